/*
 * ck_ct.h - the compressed-tensors layout of a checkpoint (vLLM and
 * transformers load it; neuralmagic/compressed-tensors defines it), written
 * from an npuc artifact's `quant` entries (ck_ct_write.c) and read back
 * dequantized (ck_ct_read.c).  docs/compressed-tensors.md is the manual.
 *
 * Per quantized Linear weight "<m>.weight" of shape [O, I]:
 *   pack-quantized (bits < 8): <m>.weight_packed I32 [O, ceil(I / (32/bits))]
 *       signed codes + 2^(bits-1), 32/bits per int32, value c of a row in bits
 *       [bits*(c % pf), bits*(c % pf + 1)) of word c / pf (pack_to_int32);
 *       <m>.weight_shape I64 [2] = {O, I};
 *       <m>.weight_zero_point I32 [ceil(O/pf), G] (asymmetric: packed along
 *       dim 0 the same way)
 *   int-quantized (8 bits): <m>.weight I8 [O, I];
 *       <m>.weight_zero_point I8 [O, G] (asymmetric)
 *   both: <m>.weight_scale F32 [O, G] (G = 1 per channel, I / group_size
 *       per group); w = (q - zero_point) * scale.
 */
#ifndef NPUC_CK_CT_H
#define NPUC_CK_CT_H

#include "ck_format.h"

/* One output tensor of a declared tensor (the writer's view). */
typedef enum { CT_COPY = 0, CT_CODES, CT_SHAPE, CT_SCALE, CT_ZP } npuc__ct_role;

typedef struct npuc__ct_out {
    npuc_tensor_info t; /* name owned */
    size_t src;         /* the declared tensor it comes from */
    npuc__ct_role role;
    int bits, symmetric, packed_in; /* CODES/ZP: the scheme; packed_in: npuc codes bit-packed */
    int64_t rows, cols;             /* CODES: [O, I]; ZP: [O, G] */
} npuc__ct_out;

typedef struct npuc__ct_plan {
    npuc__ct_out *out;
    size_t n;
    size_t *first; /* per declared tensor: its first output (outputs of one tensor are consecutive) */
    size_t *count; /* per declared tensor: how many outputs */
    json_t *qconfig; /* the quantization_config block */
} npuc__ct_plan;

/* Builds the compressed-tensors view of w's declared tensors from its
 * "npuc" metadata; refuses (NPUC_ERR_UNSUPPORTED / NPUC_ERR_ARG, one line
 * naming the tensor) what the layout cannot hold and fused groups (q/k/v,
 * gate/up) of different schemes. */
npuc_status npuc__ct_plan_build(npuc_writer *w, npuc__ct_plan *p);
void npuc__ct_plan_free(npuc__ct_plan *p);
/* The bytes of output o (malloc'd in *buf, *n bytes) from its declared
 * tensor's data. */
npuc_status npuc__ct_encode(npuc_writer *w, const npuc__ct_out *o, const void *data, void **buf, uint64_t *n);
/* config.json for the output: src_dir's config.json (or {}) with
 * "quantization_config" set to qconfig, or removed when qconfig is NULL
 * (a dense output of a compressed-tensors checkpoint); malloc'd text. */
npuc_status npuc__ct_config(npuc_ctx *ctx, const char *src_dir, const json_t *qconfig, char **text);

/* Reader side (ck_ct_read.c): when dir's config.json says quant_method
 * "compressed-tensors", *qc is its quantization_config (a new reference),
 * else NULL.  A config.json over 16 MiB or not JSON is an error. */
npuc_status npuc__ct_read_config(npuc_ctx *ctx, const char *dir, json_t **qc);
/* The scheme qc gives module: bits, symmetric; -1 when no group targets it. */
int npuc__ct_scheme(const json_t *qc, const char *module, int *bits, int *symmetric);

#endif
