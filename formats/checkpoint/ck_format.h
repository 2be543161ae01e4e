/*
 * ck_format.h - Hugging Face sharded checkpoints: a directory holding
 * safetensors shards, the index that maps every tensor to its shard
 * (`model.safetensors.index.json`), and side files (config.json, tokenizer
 * files, generation_config.json).  One folder, one registry row (ck_format.c):
 *
 *   ck_index.c   finds and validates the index (bounded, hostile-safe)
 *   ck_reader.c  one npuc_model over all shards, payloads read shard by shard
 *   ck_dir.c     the output directory as one atomic unit (temp dir + rename)
 *   ck_writer.c  the writer backend: shard plan, shards, index, side files
 *
 * docs/checkpoints.md is the manual.
 */
#ifndef NPUC_CK_FORMAT_H
#define NPUC_CK_FORMAT_H

#include <jansson.h>

#include "format_row.h"

/* Metadata the reader adds so that a checkpoint writer can keep the input's
 * sharding and copy its side files: the source directory and the index's
 * file name ("" when the checkpoint is one model.safetensors).  Every other
 * format's writer drops keys starting with NPUC__SOURCE_META_PREFIX
 * (writer.c), so no path leaks into a single-file output. */
#define NPUC__CK_META_DIR "npuc.source.checkpoint"
#define NPUC__CK_META_INDEX "npuc.source.index"

#define NPUC__CK_INDEX_MAX_BYTES (64u << 20) /* an index file larger than this is refused */
#define NPUC__CK_MAX_SHARDS 100000
#define NPUC__CK_MAX_TENSORS 10000000

/* A validated index: shard file names in first-mention order and, per
 * tensor name, its shard (map: name -> JSON integer shard index). */
typedef struct npuc__ck_index {
    char *dir;        /* the checkpoint directory, without a trailing '/' */
    char *index_name; /* the index's file name in dir; NULL: one shard, no index */
    char **shards;    /* shard file names, nshards of them */
    size_t nshards;
    json_t *map;      /* tensor name -> shard index (json integer) */
} npuc__ck_index;

/* Resolves path (a checkpoint directory or its *.index.json) and reads and
 * validates its index: at most NPUC__CK_INDEX_MAX_BYTES, a JSON object with
 * a "weight_map" object of tensor name -> shard file name, each shard a
 * plain file name in the directory (no '/', no leading '.', ending in
 * .safetensors) that exists; names are unique (duplicate keys refused).
 * A directory without an index holding model.safetensors (or exactly one
 * *.safetensors file) is a one-shard checkpoint whose map is filled by the
 * reader.  On failure ix is empty and ctx holds one line naming the file. */
npuc_status npuc__ck_index_load(npuc_ctx *ctx, const char *path, npuc__ck_index *ix);
void npuc__ck_index_free(npuc__ck_index *ix);
/* The shard index of name in ix->map, or -1. */
long npuc__ck_index_shard(const npuc__ck_index *ix, const char *name);
/* NPUC__SNIFF_SIGNATURE for a directory holding an index or model.safetensors
 * and for a file named *.index.json, PLAUSIBLE for any other directory (so
 * the reader explains what is missing), else NO. */
int npuc__ck_sniff(const char *path);

/* The reader (ck_reader.c). */
npuc_status npuc__ck_open(npuc_ctx *ctx, const char *path, const npuc_open_opts *o, npuc_model **out);

/* ------------------------------------------------ atomic output directory */

typedef struct npuc__ck_tmpdir npuc__ck_tmpdir;
/* Creates dest's temporary directory ".<base>.npuc-<pid>-<random>.tmpdir"
 * beside dest, locked (flock) while this run owns it, after sweeping the
 * unlocked leftovers of killed runs.  dest existing is NPUC_ERR_EXISTS
 * without overwrite; with it, dest must be a directory npuc may replace
 * (see npuc__ck_tmpdir_publish). */
npuc_status npuc__ck_tmpdir_open(npuc_ctx *ctx, const char *dest, int overwrite, npuc__ck_tmpdir **out);
/* Creates file name in the temporary directory (O_EXCL), registered for
 * removal on a signal; the caller closes *fd. */
npuc_status npuc__ck_tmpdir_create(npuc__ck_tmpdir *d, const char *name, int *fd);
/* The temporary directory's path. */
const char *npuc__ck_tmpdir_path(const npuc__ck_tmpdir *d);
/* Publishes the directory as dest in one rename: RENAME_NOREPLACE without
 * overwrite; with it an existing dest is exchanged (RENAME_EXCHANGE) and the
 * old one removed afterwards, but only when it holds nothing but regular
 * files and is empty or a checkpoint (has *.safetensors or *.index.json):
 * -f never deletes a folder of other things.  Frees d whatever happens; on
 * failure the temporary directory is removed. */
npuc_status npuc__ck_tmpdir_publish(npuc__ck_tmpdir *d);
/* The row's move_dir (format_row.h): moves the complete checkpoint
 * directory from (a recipe's last step file) to dest with the rules of
 * npuc__ck_tmpdir_publish, then fsyncs dest's parent; from NULL only checks
 * that dest is absent or, with overwrite, replaceable. */
npuc_status npuc__ck_dir_move(npuc_ctx *ctx, const char *from, const char *dest, int overwrite);
/* Removes the temporary directory and its files; NULL is a no-op. */
void npuc__ck_tmpdir_abort(npuc__ck_tmpdir *d);

/* The writer (ck_writer.c) and the row (ck_format.c). */
extern const npuc_writer_backend npuc__ck_writer_backend;
extern const npuc__format_row npuc__ck_format;

#endif
