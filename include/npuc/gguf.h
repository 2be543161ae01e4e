/*
 * npuc/gguf.h - what is specific to writing GGUF files: the ggml type each
 * tensor gets and why.  docs/gguf.md describes the types, llama.cpp's
 * mixes (Q2_K .. Q6_K, Q4_K_M, ...) and the per-tensor overrides.
 *
 * Writing GGUF takes three write options (model.h, npuc_write_opts_set):
 *   "gguf-type"         a plain ggml type (f32, f16, bf16, q8_0, q4_0, q4_1,
 *                       q5_0, q5_1) or one of llama.cpp's mixes (q2_k,
 *                       q3_k_s, q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s,
 *                       q5_k_m, q6_k), chosen per tensor by role and layer
 *                       as llama-quantize does
 *   "gguf-tensor-type"  newline-separated REGEX=TYPE rules, applied before
 *                       the mix: the first whose REGEX is found in a
 *                       tensor's name gives its type (llama-quantize's
 *                       --tensor-type)
 *   "gguf-arch"         general.architecture
 *
 * Example (compiled by tests/cli/c_api.sh):
 *     npuc_write_opts o = npuc_write_opts_defaults();
 *     npuc_write_opts_set(ctx, &o, "gguf-type", "q4_k_m");
 *     npuc_gguf_choice *c = calloc(npuc_model_count(m), sizeof *c);
 *     if (npuc_gguf_plan(ctx, m, &o, 0, NPUC_DTYPE_F32, c) == NPUC_OK)
 *         printf("%s %s\n", c[0].type, c[0].reason);
 */
#ifndef NPUC_GGUF_H
#define NPUC_GGUF_H

#include "api.h"
#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NPUC_GGUF_REASON_MAX 192

/* One tensor's decision: its ggml type name ("Q6_K") and why, e.g.
 * "Q6_K: ffn_down, layer 3 of 32, use_more_bits". */
typedef struct npuc_gguf_choice {
    char type[16];
    char reason[NPUC_GGUF_REASON_MAX];
} npuc_gguf_choice;

/* The type npuc_model_convert(ctx, m, path.gguf, opts, to_dtype_set,
 * to_dtype) gives each tensor of m, and why: out[i] for tensor i, out
 * holding npuc_model_count(m) entries.  Nothing is read but the model's
 * names, shapes, dtypes and metadata.  Errors are those the GGUF writer
 * would report for the same plan (NPUC_ERR_ARG: a bad --gguf-tensor-type
 * rule, a mix on a source without <arch>.block_count; NPUC_ERR_UNSUPPORTED:
 * a tensor GGUF cannot hold). */
NPUC_API npuc_status npuc_gguf_plan(npuc_ctx *ctx, const npuc_model *m, const npuc_write_opts *opts,
                                    int to_dtype_set, npuc_dtype to_dtype, npuc_gguf_choice *out);

#ifdef __cplusplus
}
#endif
#endif
