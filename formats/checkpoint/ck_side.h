/*
 * ck_side.h - files of a checkpoint directory other than shards (ck_side.c):
 * writing small files into the output's temporary directory and copying
 * the source's side files.
 */
#ifndef NPUC_CK_SIDE_H
#define NPUC_CK_SIDE_H

#include "ck_format.h"

/* Creates name in td with the n bytes at data (plus a '\n' when newline),
 * fsynced; dest/name in messages. */
npuc_status npuc__ck_write_file(npuc_ctx *ctx, npuc__ck_tmpdir *td, const char *dest, const char *name, const void *data,
                                size_t n, int newline);
/* 1 when a file named name is weights or an index (never copied as a side
 * file): *.safetensors, *.index.json, *.bin, *.pt, *.pth, *.ckpt, *.h5,
 * *.keras, *.msgpack, *.gguf, *.onnx, or a hidden file. */
int npuc__ck_is_weight_name(const char *name);
/* Copies byte for byte every regular file directly in src_dir that is not
 * weights, not one of skip[0..nskip) (NULL entries ignored) and not already
 * in td; subdirectories are not copied (docs/checkpoints.md). */
npuc_status npuc__ck_copy_side_files(npuc_ctx *ctx, npuc__ck_tmpdir *td, const char *dest, const char *src_dir,
                                     const char *const *skip, size_t nskip);

#endif
