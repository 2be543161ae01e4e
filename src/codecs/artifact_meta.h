/*
 * artifact_meta.h - the "npuc" metadata entry that describes an artifact
 * (library-private).  docs/artifact.md is the specification; in short:
 *
 *   {"schema": "npuc.artifact/1", "npuc_version": "0.1.0",
 *    "tensors": {"<name>": {"encoding": "quant", "dtype": "F32",
 *                            "shape": [64, 3, 3, 3], "layout": "oihw", ...}}}
 *
 * Every entry names its encoding and the original dtype, shape and layout,
 * so `npuc decompress` can rebuild the dense tensor; encoding-specific fields
 * sit beside them.  The JSON is written with keys in insertion order and no
 * timestamps, so artifacts are byte-identical across runs.
 */
#ifndef NPUC_ARTIFACT_META_H
#define NPUC_ARTIFACT_META_H

#include <jansson.h>

#include "npuc_internal.h"

#define NPUC_ART_KEY "npuc"
#define NPUC_ART_SCHEMA "npuc.artifact/1"

/* A new root object with schema, version and an empty "tensors" object. */
json_t *npuc__art_new(void);
/* Adds an entry for tensor orig with the given encoding; returns the entry
 * (borrowed) for encoding-specific fields, or NULL on allocation failure. */
json_t *npuc__art_add(json_t *root, const npuc_tensor_info *orig, const char *encoding);
/* Serialises compactly; malloc'd string (free with free()). */
char *npuc__art_dumps(const json_t *root);

/* Parses m's "npuc" entry.  *root is NULL (and NPUC_OK) when the model has
 * none; NPUC_ERR_FORMAT when it is malformed or of an unknown schema. */
npuc_status npuc__art_load(npuc_ctx *ctx, const npuc_model *m, json_t **root);
/* The original dtype, rank, shape and layout recorded in an entry (name and
 * group are left to the caller). */
npuc_status npuc__art_orig(npuc_ctx *ctx, const char *path, const char *name, const json_t *entry,
                           npuc_tensor_info *info);
/* Reads an integer / boolean / string field, failing with a message naming
 * the tensor when it is missing or of the wrong type. */
npuc_status npuc__art_int(npuc_ctx *ctx, const char *path, const char *name, const json_t *e,
                          const char *key, long long lo, long long hi, long long *out);
npuc_status npuc__art_bool(npuc_ctx *ctx, const char *path, const char *name, const json_t *e,
                           const char *key, int *out);
npuc_status npuc__art_str(npuc_ctx *ctx, const char *path, const char *name, const json_t *e,
                          const char *key, const char **out);

#endif
