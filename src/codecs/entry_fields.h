/*
 * entry_fields.h - the encoding-specific fields of artifact entries
 * (library-private), written by the passes and read by the decoders and
 * reports, so each is spelled once.  docs/artifact.md is the specification.
 *
 * Quantization: how a "quant" entry, and the "quant" object of an
 * "nm_sparse" entry, record the scheme (encoding "quant"):
 *
 *   "bits": 8, "symmetric": true, "granularity": "channel", "axis": 0,
 *   "group_size": 0, "view": [1, 8, 27], "range": "minmax", "packed": false,
 *   "codes": "w", "codes_dtype": "I8", "scale": "w.scale", "zero_point": null
 *
 * The writing passes (quantize, sparsify's --pattern path) set them with
 * npuc__quant_entry_set, the decoders read them back strictly
 * (npuc__quant_entry_read), reports leniently (npuc__quant_entry_params).
 */
#ifndef NPUC_ENTRY_FIELDS_H
#define NPUC_ENTRY_FIELDS_H

#include <jansson.h>

#include "npuc_internal.h"

/* Sets the fields above on object e, in that order (the JSON keeps it, so
 * artifacts stay byte-identical): p and qs the scheme and its shape, packed
 * whether codes are bit-packed, codes the codes' part name or NULL to leave
 * "codes" out (an nm_sparse entry names its codes "values"), codes_dtype
 * their dtype, scale the scales' part name, zero_point the zero points' or
 * NULL (JSON null, symmetric).  Returns 0, or -1 when out of memory. */
int npuc__quant_entry_set(json_t *e, const npuc_quant_params *p, const npuc_quant_shape *qs, int packed,
                          const char *codes, npuc_dtype codes_dtype, const char *scale, const char *zero_point);

/* Reads "bits", "symmetric", "granularity", "axis", "group_size" and
 * "packed" of entry name into *p and *packed, checking each, in that order;
 * the granularity is returned as text in *gran, for npuc__quant_entry_gran
 * once the caller has read its part names (so a malformed entry is reported
 * at the same field whatever reads it).  NPUC_ERR_FORMAT naming the field. */
npuc_status npuc__quant_entry_read(npuc_ctx *ctx, const char *path, const char *name, const json_t *e,
                                   npuc_quant_params *p, const char **gran, int *packed);
/* Sets p->gran from its name ("channel", "group", "tensor"); an unknown one
 * is NPUC_ERR_FORMAT naming tensor name. */
npuc_status npuc__quant_entry_gran(npuc_ctx *ctx, const char *path, const char *name, const char *gran,
                                   npuc_quant_params *p);

/* The parameters an entry records, for reports: missing or malformed fields
 * keep their defaults (8 bits, symmetric, per channel, axis -1). */
npuc_quant_params npuc__quant_entry_params(const json_t *e);

/* N:M sparsity: sets the fields of an "nm_sparse" entry e after its
 * geometry g, in the order "n", "m", "in_axis", "groups", "values",
 * "meta", "meta_bits", "quant": values and meta are the part names, quant
 * the codes' description (an object with the quantization fields, whose
 * reference is taken even on failure) or NULL (JSON null: float values).
 * Returns 0, or -1 when out of memory. */
int npuc__nm_entry_set(json_t *e, const npuc_nm_geom *g, const char *values, const char *meta, json_t *quant);

#endif
