/*
 * decoders.h - how encoded tensors are rebuilt (library-private): the
 * decoder signature the codec table (codec.h) holds, and the part readers
 * every decoder uses (decode_part.c).
 *
 * An artifact's "npuc" entry (docs/artifact.md) maps each original tensor
 * name to an entry with its "encoding", original "dtype"/"shape"/"layout",
 * and "parts": the names of the tensors that encode it (for "quant": the
 * codes, "<name>.scale", "<name>.zero_point"; for "lowrank": "<name>.lr_a",
 * "<name>.lr_b"; ...).  The logical view (decode_entry.h) says which stored
 * tensors stand for which original; decompress.c writes it out.
 *
 * Nested entries.  A part whose name is the key of another entry (other than
 * the entry's own key: a "quant" entry stores its codes under its own name)
 * is not a stored tensor but a logical one, described by that entry: after
 * `npuc lowrank` then `npuc quantize`, "W" is "lowrank" with parts
 * ["W.lr_a", "W.lr_b"], and "W.lr_a" is "quant" with parts ["W.lr_a",
 * "W.lr_a.scale"].  Decoders whose parts are float tensors (lowrank) read them
 * with npuc__part_read_f32, which decodes such an inner entry, recursively,
 * at most NPUC_NEST_MAX levels deep.  Parts that are raw bytes (codes,
 * scales, positions) are always stored tensors (npuc__part).
 *
 * A decoder rebuilds one original tensor as float32.  With out == NULL it
 * only validates the entry and its parts (names present, dtypes and sizes
 * consistent, inner entries too), so decompress can fail before it writes
 * anything.  Errors are NPUC_ERR_FORMAT with a message naming the file and
 * the tensor.
 */
#ifndef NPUC_DECODERS_H
#define NPUC_DECODERS_H

#include <jansson.h>

#include "npuc_internal.h"

/* Deepest nesting of entries: 0 is a top-level entry, 1 an entry that is a
 * part of one (a quantized lowrank factor); one level spare. */
#define NPUC_NEST_MAX 2

/* Where an entry sits: the artifact's "tensors" object (to resolve nested
 * parts; NULL when there is nothing to resolve) and its nesting depth. */
typedef struct npuc__nest {
    const json_t *tensors;
    int depth;
} npuc__nest;

typedef npuc_status (*npuc_decode_fn)(npuc_ctx *ctx, npuc_model *m, const npuc__nest *nest, const char *name,
                                      const json_t *entry, const npuc_tensor_info *orig, float *out);

/* Index of the stored tensor called part (NPUC_ERR_FORMAT naming the entry when absent). */
npuc_status npuc__part(npuc_ctx *ctx, npuc_model *m, const char *name, const char *part, size_t *idx);

/* The entry describing part of entry name when part is nested (the key of
 * another entry), else NULL: part is then a stored tensor.  A nested
 * "fake_quant" entry (no parts) describes a dense stored tensor of its name. */
const json_t *npuc__part_entry(const npuc__nest *nest, const char *name, const char *part);

/* Reads part `part` of entry `name` as want->numel float32 values into out
 * (out == NULL: validates only).  The part must be a float tensor of exactly
 * want's shape (want's dtype is not checked).  A nested part is decoded by
 * its own entry's decoder at nest->depth + 1 and rounded to that entry's
 * dtype, so it reads exactly as decompressing the inner entry alone would
 * write it; deeper than NPUC_NEST_MAX is NPUC_ERR_FORMAT (a cycle ends
 * there), an unknown inner encoding NPUC_ERR_UNSUPPORTED.  Otherwise the
 * stored tensor is read. */
npuc_status npuc__part_read_f32(npuc_ctx *ctx, npuc_model *m, const npuc__nest *nest, const char *name,
                                const char *part, const npuc_tensor_info *want, float *out);

/* Why an entry without "parts" that is not dense cannot be read:
 * NPUC_ERR_UNSUPPORTED naming an encoding npuc cannot decode, else
 * NPUC_ERR_FORMAT (a decodable encoding needs its parts). */
npuc_status npuc__entry_no_parts(npuc_ctx *ctx, const char *path, const char *name, const char *encoding);

#endif
