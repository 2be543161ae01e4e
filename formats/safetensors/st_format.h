/*
 * st_format.h - what the safetensors reader and writer give the format's
 * registry row (st_format.c).
 */
#ifndef NPUC_ST_FORMAT_H
#define NPUC_ST_FORMAT_H

#include "format_row.h"

/* Opens a safetensors file (st_reader.c): header and tensor table; payloads
 * are read later with pread(2) on the file's descriptor. */
npuc_status npuc__st_open(npuc_ctx *ctx, const char *path, const npuc_open_opts *o, npuc_model **out);
/* Where the byte buffer of m (opened by npuc__st_open) starts in its file,
 * 8 + header length: m->offset[i] + this is tensor i's file offset.  The
 * checkpoint reader reads shards' payloads with it. */
uint64_t npuc__st_data_start(const npuc_model *m);
/* The safetensors header (8-byte length + JSON padded to 8 bytes, malloc'd
 * in *out) for n tensors t laid out back to back in order, with metadata
 * meta_k/meta_v (nmeta pairs); path names the output in messages.
 * npuc__st_header (npuc_internal.h) is this for a writer's declarations. */
npuc_status npuc__st_header_of(npuc_ctx *ctx, const char *path, const npuc_tensor_info *t, size_t n,
                               char *const *meta_k, char *const *meta_v, size_t nmeta, char **out, size_t *len);
/* Writes n bytes to fd (EINTR retried, chunks of 1 GiB); a failure is
 * "<path>: writing <what>: <why>" (NPUC_ERR_IO). */
npuc_status npuc__st_write_all(npuc_ctx *ctx, const char *path, int fd, const void *p, uint64_t n, const char *what);
/* The writer (st_writer.c). */
extern const npuc_writer_backend npuc__st_writer_backend;
/* The registry row (st_format.c). */
extern const npuc__format_row npuc__st_format;

#endif
