/*
 * decoders.h - how `npuc decompress` rebuilds encoded tensors (library-private).
 *
 * An artifact's "npuc" entry (docs/artifact.md) maps each original tensor
 * name to an entry with its "encoding", original "dtype"/"shape"/"layout",
 * and "parts": the names of the stored tensors that encode it (for "quant":
 * the codes, "<name>.scale", "<name>.zero_point"; for "lowrank":
 * "<name>.lr_a", "<name>.lr_b"; ...).  decompress.c walks the stored tensors
 * in file order; the first part of an entry it meets is replaced by the
 * rebuilt original, the other parts are dropped, everything else is copied.
 *
 * A decoder rebuilds one original tensor as float32.  With out == NULL it
 * only validates the entry and its parts (names present, dtypes and sizes
 * consistent), so decompress can fail before it writes anything.  Errors are
 * NPUC_ERR_FORMAT with a message naming the file and the tensor.
 */
#ifndef NPUC_DECODERS_H
#define NPUC_DECODERS_H

#include <jansson.h>

#include "npuc_internal.h"

typedef npuc_status (*npuc_decode_fn)(npuc_ctx *ctx, npuc_model *m, const char *name,
                                      const json_t *entry, const npuc_tensor_info *orig, float *out);

/* Index of the stored tensor called part (NPUC_ERR_FORMAT naming the entry when absent). */
npuc_status npuc__part(npuc_ctx *ctx, npuc_model *m, const char *name, const char *part, size_t *idx);

npuc_status npuc__decode_quant(npuc_ctx *ctx, npuc_model *m, const char *name, const json_t *entry,
                               const npuc_tensor_info *orig, float *out);
npuc_status npuc__decode_lowrank(npuc_ctx *ctx, npuc_model *m, const char *name, const json_t *entry,
                                 const npuc_tensor_info *orig, float *out);
npuc_status npuc__decode_nm(npuc_ctx *ctx, npuc_model *m, const char *name, const json_t *entry, const npuc_tensor_info *orig, float *out);
/* Further decoders (lowrank, nm_sparse) are listed in decompress.c's table. */

#endif
