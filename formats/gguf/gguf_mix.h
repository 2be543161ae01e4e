/*
 * gguf_mix.h - llama.cpp's quantization mixes (library-private): the ggml
 * type llama-quantize gives each tensor of a model for LLAMA_FTYPE_MOSTLY_
 * Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M and Q6_K,
 * by tensor role, layer index and model shape, plus per-tensor overrides
 * (llama-quantize's --tensor-type, npuc's --gguf-tensor-type REGEX=TYPE)
 * and the fallbacks for rows that are not a multiple of the block.
 *
 * The rules follow llama.cpp's src/llama-quant.cpp at commit
 * 007dbbf3fd17eefe9b47fee45f48f7ba5e62b714 (llama_tensor_get_type and
 * friends), re-written as a table (gguf_mix.c); docs/gguf.md has them as a
 * table too.  Everything here is pure: no I/O, no printing.
 */
#ifndef NPUC_GGUF_MIX_H
#define NPUC_GGUF_MIX_H

#include <stddef.h>
#include <stdint.h>

#include "gguf_format.h"

/* The mixes, in the order of the "gguf-type" choices that name them. */
enum {
    NPUC__GGUF_MIX_NONE = 0, /* a plain type: every quantized tensor gets it (llama-quantize --pure) */
    NPUC__GGUF_MIX_Q2_K,
    NPUC__GGUF_MIX_Q3_K_S,
    NPUC__GGUF_MIX_Q3_K_M,
    NPUC__GGUF_MIX_Q3_K_L,
    NPUC__GGUF_MIX_Q4_K_S,
    NPUC__GGUF_MIX_Q4_K_M,
    NPUC__GGUF_MIX_Q5_K_S,
    NPUC__GGUF_MIX_Q5_K_M,
    NPUC__GGUF_MIX_Q6_K,
    NPUC__GGUF_MIX_COUNT
};

#define NPUC__GGUF_REASON_MAX 192

/* "Q4_K_M"; "" for NONE. */
const char *npuc__gguf_mix_name(int mix);
/* The mix a "gguf-type" value names ("q4_k_m"), else NONE. */
int npuc__gguf_mix_parse(const char *value);
/* llama.cpp's LLAMA_FTYPE_MOSTLY_* value (general.file_type) and the
 * mix's default ggml type (Q4_K for Q4_K_M). */
uint32_t npuc__gguf_mix_ftype(int mix);
int npuc__gguf_mix_base(int mix);

/* What the rules need to know about the model and the state
 * llama-quantize keeps while it walks the tensors.  Fill the first five
 * from the model's hyperparameters (<arch>.block_count, .expert_count,
 * .attention.head_count, .attention.head_count_kv; 0 when absent, n_head_kv
 * defaulting to n_head as llama.cpp's loader does), call
 * npuc__gguf_mix_count over every tensor name, then npuc__gguf_mix_choose
 * for each tensor in llama-quantize's order (npuc__gguf_mix_order). */
typedef struct npuc__gguf_mix_state {
    const char *arch; /* general.architecture ("llama", "falcon", ...) */
    int n_layer, n_expert, n_head, n_head_kv;
    /* set by npuc__gguf_mix_count */
    int n_attention_wv; /* attn_v, attn_qkv and attn_kv_b tensors */
    int tied;           /* no output.weight: token_embd is treated as the output */
    /* advanced by npuc__gguf_mix_choose */
    int i_attention_wv, i_ffn_down, i_ffn_gate, i_ffn_up;
} npuc__gguf_mix_state;

void npuc__gguf_mix_count(npuc__gguf_mix_state *s, const char *const *names, size_t n);

/* The layer-major order llama-quantize visits tensors in (its model
 * loader's weights_map: by the N of "blk.N.", names without one first,
 * then by name): fills idx[0..n) with a permutation of 0..n-1; -1 when
 * out of memory. */
int npuc__gguf_mix_order(const char *const *names, size_t n, size_t *idx);

/* The ggml type of one tensor under mix (NONE: base for every quantized
 * tensor) with base its default type.  name, rank and shape (npuc order,
 * outermost first: GGUF's ne[0] is shape[rank - 1]) describe the tensor;
 * keep is the type it keeps when llama-quantize would not quantize it
 * (norms, ffn_gate_inp, rank-1 tensors: its own float type).  override is
 * the type of the first --gguf-tensor-type rule whose pattern matched the
 * name (-1: none) and pattern that rule's pattern.  Writes why into reason
 * ("Q6_K: ffn_down, layer 3 of 32, use_more_bits") and returns the type,
 * or -1 with the message in reason (an expert model's FFN tensor without a
 * "blk.N." layer, as llama.cpp refuses it). */
int npuc__gguf_mix_choose(npuc__gguf_mix_state *s, int mix, int base, const char *name, int rank,
                          const int64_t *shape, int keep, int override, const char *pattern, char *reason,
                          size_t cap);

/* The whole plan for n tensors (the writer's and npuc_gguf_plan's):
 * hyperparameters from the metadata (keys "gguf.<arch>.block_count", ...
 * as the GGUF reader names them; mix != NONE needs block_count), the
 * --gguf-tensor-type rules in rules (newline-separated REGEX=TYPE, may be
 * NULL), types[i] and reasons[i] for every tensor (reasons may be NULL).
 * Integer tensors keep their type; rank 0-1 are F32.  Errors (NPUC_ERR_ARG:
 * a bad rule, a mix without block_count; NPUC_ERR_UNSUPPORTED: a dtype or
 * rank GGUF cannot hold) name path and the tensor. */
npuc_status npuc__gguf_plan(npuc_ctx *ctx, const char *path, int mix, int base, const char *rules,
                            const char *const *mk, const char *const *mv, size_t nmeta,
                            const npuc_tensor_info *t, size_t n, int *types,
                            char (*reasons)[NPUC__GGUF_REASON_MAX]);

/* llama-quantize's type for a K type `id` whose rows (GGUF ne[0]) hold
 * `row` values (tensor_type_fallback): id itself when 256 divides row, else
 * Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K/Q3_K -> Q4_0 (IQ4_NL
 * there, which npuc does not write), and F16 when 32 does not divide row
 * either.  Any other type comes back as it is.  The one table of it: the
 * mixes (gguf_mix.c) and the writer's single types (gguf_writer.c) use it. */
int npuc__gguf_k_fallback(int id, int64_t row);

#endif
