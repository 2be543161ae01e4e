/*
 * sparsify_nm.h - N:M sparsity as the other modules use it (library-private):
 *
 *   sparsify_nm.c     N:M geometry, sparsify, pack / unpack, cost model
 *   sparsify_model.c  N:M sparsity of a model (npuc sparsify)
 *   sparsify_quant.c  N:M before quantization (npuc quantize --pattern)
 *
 * quantize_model.c reaches --pattern through the second half, the nm_sparse
 * decoder the geometry through the first.
 */
#ifndef NPUC_SPARSIFY_NM_H
#define NPUC_SPARSIFY_NM_H

#include <jansson.h>
#include <stdint.h>

#include "kernels/nm_kernels.h"
#include "npuc_internal.h"

/* Sparsifies x into out along g (see npuc_nm_sparsify), adding the sums;
 * *nbad gets the count of NaN / Inf values (then the output is garbage). */
npuc_status npuc__nm_apply(npuc_ctx *ctx, const npuc_nm_geom *g, const float *x, float *out,
                           npuc_prune_sums *s, uint64_t *nbad);

/* Geometry without messages: 0 when t can be N:M-sparsified, -1 for a bad
 * pattern or layout, -2 when its input-channel axis is shorter than m. */
int npuc__nm_geom(const npuc_tensor_info *t, int n, int m, npuc_nm_geom *g);

/* The bounds of an N:M pattern, written once (issue 31 item 16): parsing
 * (npuc_nm_parse, --pattern's check), geometry and the passes' own checks
 * of a pattern given through the C API use these. */
#define NPUC__NM_BOUNDS "1 <= N < M <= 16"
static inline int npuc__nm_ok(int n, int m) { return n >= 1 && n < m && m <= 16; }

/* -------------------------------------------- quantize --pattern (sparsify_quant.c) */

/* Declares the stored tensors of a quantized N:M tensor: codes "<name>"
 * ([kept] or packed), "<name>.scale", "<name>.zero_point" (asymmetric),
 * "<name>.nm_meta", and adds the "nm_sparse" artifact entry with its "quant"
 * description.  names[0..2] receive the owned scale/zero point/meta names. */
npuc_status npuc__nmq_declare(npuc_ctx *ctx, npuc_writer *w, json_t *art, const npuc_tensor_info *t,
                              const npuc_quant_params *p, const npuc_quant_shape *qs,
                              const npuc_nm_geom *g, char **names);
/* Sparsifies x, quantizes the result (npuc_quantize_tensor), writes codes,
 * scales, zero points and metadata.  err gets the error of the dequantized
 * sparse tensor against x; *zeros the zero count of the sparse tensor. */
npuc_status npuc__nmq_write(npuc_ctx *ctx, npuc_writer *w, const npuc_tensor_info *t, const float *x,
                            const npuc_quant_params *p, const npuc_quant_shape *qs,
                            const npuc_nm_geom *g, npuc_error_stats *err, uint64_t *zeros);
/* Bytes the stored parts take. */
uint64_t npuc__nmq_bytes(const npuc_quant_params *p, const npuc_quant_shape *qs, const npuc_nm_geom *g);

#endif
