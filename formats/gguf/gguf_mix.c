/*
 * gguf_mix.c - llama.cpp's quantization mixes as a table (gguf_mix.h).
 *
 * llama-quantize (src/llama-quant.cpp, commit 007dbbf3) decides a tensor's
 * type in four steps, and so does npuc__gguf_mix_choose:
 *   1. is the tensor quantized at all?  Not when it has fewer than 2
 *      dimensions (ggml_n_dims: trailing dims of 1 do not count), its name
 *      does not end in "weight", or it is one of the small or special
 *      tensors of NOT_QUANTIZED below (norms, MoE routers, ...): it keeps
 *      its type;
 *   2. the first --tensor-type rule whose regex is found in the name gives
 *      the type, and the mix is not consulted (nor are its counters
 *      advanced);
 *   3. else the mix: the tensor's role (its name) picks the first row of
 *      RULES whose mix and condition hold (a KEEP row stops the search with
 *      the mix's default type), then attn_v's two adjustments (70B, 8
 *      experts); attn_v-like tensors and the FFN tensors advance counters
 *      that later tensors' conditions read;
 *   4. a row whose length (ne[0]) is not a multiple of the type's block
 *      falls back: Q2_K and Q3_K to Q4_0, Q4_K to Q5_0, Q5_K to Q5_1, Q6_K
 *      to Q8_0, and to F16 when even 32 does not divide it.
 * The IQ branches of llama.cpp's code belong to the IQ mixes, which npuc
 * does not offer, so no rule here yields an IQ type.
 */
#include <ctype.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_mix.h"

static const struct {
    const char *value, *name;
    uint32_t ftype;
    int base;
} MIXES[NPUC__GGUF_MIX_COUNT] = {
    {"", "", 0, 0},
    {"q2_k", "Q2_K", 10, NPUC__GGML_Q2_K},
    {"q3_k_s", "Q3_K_S", 11, NPUC__GGML_Q3_K},
    {"q3_k_m", "Q3_K_M", 12, NPUC__GGML_Q3_K},
    {"q3_k_l", "Q3_K_L", 13, NPUC__GGML_Q3_K},
    {"q4_k_s", "Q4_K_S", 14, NPUC__GGML_Q4_K},
    {"q4_k_m", "Q4_K_M", 15, NPUC__GGML_Q4_K},
    {"q5_k_s", "Q5_K_S", 16, NPUC__GGML_Q5_K},
    {"q5_k_m", "Q5_K_M", 17, NPUC__GGML_Q5_K},
    {"q6_k", "Q6_K", 18, NPUC__GGML_Q6_K},
};

const char *npuc__gguf_mix_name(int mix) { return mix > 0 && mix < NPUC__GGUF_MIX_COUNT ? MIXES[mix].name : ""; }
uint32_t npuc__gguf_mix_ftype(int mix) { return mix > 0 && mix < NPUC__GGUF_MIX_COUNT ? MIXES[mix].ftype : 0; }
int npuc__gguf_mix_base(int mix) { return mix > 0 && mix < NPUC__GGUF_MIX_COUNT ? MIXES[mix].base : -1; }

int npuc__gguf_mix_parse(const char *value) {
    for (int i = 1; value && i < NPUC__GGUF_MIX_COUNT; i++)
        if (strcmp(value, MIXES[i].value) == 0) return i;
    return NPUC__GGUF_MIX_NONE;
}

/* ------------------------------------------------------------ roles */

enum { R_OUTPUT, R_TOKEN_EMBD, R_ATTN_V, R_ATTN_K, R_ATTN_Q, R_ATTN_OUTPUT, R_FFN_UP, R_FFN_GATE, R_FFN_DOWN, R_OTHER };

/* llama.cpp's tensor_get_category, in its order: exact names, then
 * substrings.  attn_qkv and attn_kv_b share attn_v's rules and counter
 * (category_is_attn_v; the separate attn_qkv branch after it in
 * llama_tensor_get_type_impl is never reached at this commit). */
static const struct {
    const char *s;
    int exact, role;
    const char *label;
} ROLES[] = {
    {"output.weight", 1, R_OUTPUT, "output"},
    {"token_embd.weight", 1, R_TOKEN_EMBD, "token_embd"},
    {"per_layer_token_embd.weight", 1, R_TOKEN_EMBD, "per_layer_token_embd"},
    {"attn_qkv.weight", 0, R_ATTN_V, "attn_qkv"},
    {"attn_kv_b.weight", 0, R_ATTN_V, "attn_kv_b"},
    {"attn_v.weight", 0, R_ATTN_V, "attn_v"},
    {"attn_k.weight", 0, R_ATTN_K, "attn_k"},
    {"attn_q.weight", 0, R_ATTN_Q, "attn_q"},
    {"attn_output.weight", 0, R_ATTN_OUTPUT, "attn_output"},
    {"ffn_up", 0, R_FFN_UP, "ffn_up"},
    {"ffn_gate", 0, R_FFN_GATE, "ffn_gate"},
    {"ffn_down", 0, R_FFN_DOWN, "ffn_down"},
};

static int role_of(const char *name, const char **label) {
    for (size_t i = 0; i < sizeof ROLES / sizeof ROLES[0]; i++)
        if (ROLES[i].exact ? strcmp(name, ROLES[i].s) == 0 : strstr(name, ROLES[i].s) != NULL) {
            *label = ROLES[i].label;
            return ROLES[i].role;
        }
    *label = "other";
    return R_OTHER;
}

/* llama.cpp's tensor_allows_quantization: names containing one of these
 * (exact: equal to it) are never quantized. */
static const struct {
    const char *s;
    int exact;
} NOT_QUANTIZED[] = {
    {"_norm.weight", 0}, {"ffn_gate_inp.weight", 0}, {"ffn_gate_tid2eid.weight", 0}, {"altup", 0},
    {"laurel", 0}, {"per_layer_model_proj", 0}, {"position_embd.weight", 1}, {"token_types.weight", 1},
    {"ssm_conv1d", 0}, {"shortconv.conv.weight", 0}, {"indexer.k_proj.weight", 0},
    {"indexer.q_proj.weight", 0}, {"time_mix_first.weight", 0}, {"time_mix_w0.weight", 0},
    {"time_mix_w1.weight", 0}, {"time_mix_w2.weight", 0}, {"time_mix_v0.weight", 0},
    {"time_mix_v1.weight", 0}, {"time_mix_v2.weight", 0}, {"time_mix_a0.weight", 0},
    {"time_mix_a1.weight", 0}, {"time_mix_a2.weight", 0}, {"time_mix_g1.weight", 0},
    {"time_mix_g2.weight", 0}, {"time_mix_decay_w1.weight", 0}, {"time_mix_decay_w2.weight", 0},
    {"time_mix_lerp_fused.weight", 0}, {"attn_rel_b.weight", 0}, {".position_embd", 0},
    {"sam.pos_embd", 0}, {"sam.neck.", 0}, {"sam.net_", 0}, {".rel_pos", 0}, {".patch_embd", 0},
    {".patch_merger", 0}, {"a.rvq.codebook", 0}, {"mm.a.code_embd", 0},
};

/* ggml_n_dims: 1 + the index (innermost first) of the last dim above 1. */
static int n_dims(int rank, const int64_t *shape) {
    int nd = 1;
    for (int d = 0; d < rank; d++)
        if (shape[d] > 1) { nd = rank - d; break; }
    return nd;
}

static const char *quantized_not(const char *name, int rank, const int64_t *shape) {
    if (n_dims(rank, shape) < 2) return "fewer than 2 dimensions";
    size_t n = strlen(name);
    if (n < 6 || strcmp(name + n - 6, "weight") != 0) return "not a weight";
    for (size_t i = 0; i < sizeof NOT_QUANTIZED / sizeof NOT_QUANTIZED[0]; i++)
        if (NOT_QUANTIZED[i].exact ? strcmp(name, NOT_QUANTIZED[i].s) == 0
                                   : strstr(name, NOT_QUANTIZED[i].s) != NULL)
            return NOT_QUANTIZED[i].s;
    return NULL;
}

/* ------------------------------------------------------------ rules */

#define M(x) (1u << NPUC__GGUF_MIX_##x)
#define ALL_MIXES 0x3feu

enum {
    C_ALWAYS,
    C_GQA4,          /* n_head / n_head_kv >= 4 */
    C_WV_LT2,        /* i_attention_wv < 2 */
    C_WV_LT4,        /* i_attention_wv < 4 */
    C_WV_MORE,       /* use_more_bits(i_attention_wv, n_attention_wv) */
    C_L_LT16,        /* layer < n_layer / 16 */
    C_L_MORE,        /* use_more_bits(layer, n_layer) */
    C_FALCON,
    C_NOT_FALCON,
    C_NOT_FALCON_LT8, /* arch != falcon && layer < n_layer / 8 */
    C_FALCON_LT16,
    C_FALCON_MORE,
    C_EXPERT8,       /* n_expert == 8 */
    C_NF_EXPERT8,    /* arch != falcon && n_expert == 8 */
    C_NX_ODD,        /* falcon, or ne[0] not a multiple of the default type's block */
    C_NOT_Q8_0       /* the type so far is not Q8_0 */
};

#define KEEP (-1) /* the mix's default type, and stop */

typedef struct rule {
    int role;
    unsigned mixes;
    int cond, type;
    const char *why;
} rule;

/* First match wins within a role, in the order of llama.cpp's if-chains;
 * the rows of one role and mix read top to bottom as that chain does. */
static const rule RULES[] = {
    {R_OUTPUT, ALL_MIXES, C_NX_ODD, NPUC__GGML_Q8_0, "falcon or ne[0] not a multiple of the block"},
    {R_OUTPUT, ALL_MIXES, C_NOT_Q8_0, NPUC__GGML_Q6_K, ""},

    {R_ATTN_V, M(Q2_K), C_GQA4, NPUC__GGML_Q4_K, "n_gqa >= 4"},
    {R_ATTN_V, M(Q2_K), C_ALWAYS, NPUC__GGML_Q3_K, "mix rule"},
    {R_ATTN_V, M(Q3_K_M), C_WV_LT2, NPUC__GGML_Q5_K, "first 2"},
    {R_ATTN_V, M(Q3_K_M), C_ALWAYS, NPUC__GGML_Q4_K, "mix rule"},
    {R_ATTN_V, M(Q3_K_L), C_ALWAYS, NPUC__GGML_Q5_K, "mix rule"},
    {R_ATTN_V, M(Q4_K_M) | M(Q5_K_M), C_WV_MORE, NPUC__GGML_Q6_K, "use_more_bits"},
    {R_ATTN_V, M(Q4_K_S), C_WV_LT4, NPUC__GGML_Q5_K, "first 4"},

    {R_ATTN_K, ALL_MIXES, C_EXPERT8, NPUC__GGML_Q8_0, "8 experts"},

    {R_FFN_DOWN, M(Q2_K), C_ALWAYS, NPUC__GGML_Q3_K, "mix rule"},
    {R_FFN_DOWN, M(Q3_K_M), C_L_LT16, NPUC__GGML_Q5_K, "first 1/16"},
    {R_FFN_DOWN, M(Q3_K_M), C_NOT_FALCON, NPUC__GGML_Q4_K, "mix rule"},
    {R_FFN_DOWN, M(Q3_K_M), C_L_MORE, NPUC__GGML_Q4_K, "use_more_bits"},
    {R_FFN_DOWN, M(Q3_K_M), C_ALWAYS, NPUC__GGML_Q3_K, "falcon"},
    {R_FFN_DOWN, M(Q3_K_L), C_FALCON, NPUC__GGML_Q4_K, "falcon"},
    {R_FFN_DOWN, M(Q3_K_L), C_ALWAYS, NPUC__GGML_Q5_K, "mix rule"},
    {R_FFN_DOWN, M(Q4_K_M), C_FALCON_LT16, NPUC__GGML_Q6_K, "falcon, first 1/16"},
    {R_FFN_DOWN, M(Q4_K_M), C_FALCON_MORE, NPUC__GGML_Q5_K, "falcon, use_more_bits"},
    {R_FFN_DOWN, M(Q4_K_M), C_FALCON, NPUC__GGML_Q4_K, "falcon"},
    {R_FFN_DOWN, M(Q4_K_M) | M(Q5_K_M), C_L_MORE, NPUC__GGML_Q6_K, "use_more_bits"},
    {R_FFN_DOWN, M(Q4_K_S), C_NOT_FALCON_LT8, NPUC__GGML_Q5_K, "first 1/8"},

    {R_ATTN_OUTPUT, M(Q2_K) | M(Q3_K_S) | M(Q3_K_M) | M(Q4_K_S) | M(Q4_K_M), C_NF_EXPERT8, NPUC__GGML_Q5_K,
     "8 experts"},
    {R_ATTN_OUTPUT, ALL_MIXES, C_NF_EXPERT8, KEEP, "8 experts"},
    {R_ATTN_OUTPUT, M(Q2_K), C_NOT_FALCON, NPUC__GGML_Q3_K, "mix rule"},
    {R_ATTN_OUTPUT, M(Q3_K_M), C_NOT_FALCON, NPUC__GGML_Q4_K, "mix rule"},
    {R_ATTN_OUTPUT, M(Q3_K_L), C_NOT_FALCON, NPUC__GGML_Q5_K, "mix rule"},
    {R_ATTN_OUTPUT, M(Q3_K_L), C_FALCON, NPUC__GGML_Q4_K, "falcon"},
};

/* llama.cpp's use_more_bits: the first and last eighth of the layers and
 * every third one between them. */
static int more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

typedef struct ctxt {
    const npuc__gguf_mix_state *s;
    int layer, nlayer; /* the FFN tensors' layer and layer count */
    int falcon;
    int64_t ne0;
    int cur; /* the type so far */
} ctxt;

static int cond_holds(const ctxt *c, int cond) {
    const npuc__gguf_mix_state *s = c->s;
    const int gqa = s->n_head_kv > 0 ? s->n_head / s->n_head_kv : 0;
    const npuc__ggml_type *t = npuc__ggml_type_by_id((uint32_t)c->cur);
    const int64_t blck = t && t->known ? t->blck : 256; /* the K types: 256 */
    switch (cond) {
    case C_ALWAYS: return 1;
    case C_GQA4: return gqa >= 4;
    case C_WV_LT2: return s->i_attention_wv < 2;
    case C_WV_LT4: return s->i_attention_wv < 4;
    case C_WV_MORE: return more_bits(s->i_attention_wv, s->n_attention_wv);
    case C_L_LT16: return c->layer < c->nlayer / 16;
    case C_L_MORE: return more_bits(c->layer, c->nlayer);
    case C_FALCON: return c->falcon;
    case C_NOT_FALCON: return !c->falcon;
    case C_NOT_FALCON_LT8: return !c->falcon && c->layer < c->nlayer / 8;
    case C_FALCON_LT16: return c->falcon && c->layer < c->nlayer / 16;
    case C_FALCON_MORE: return c->falcon && more_bits(c->layer, c->nlayer);
    case C_EXPERT8: return s->n_expert == 8;
    case C_NF_EXPERT8: return !c->falcon && s->n_expert == 8;
    case C_NX_ODD: return c->falcon || c->ne0 % blck != 0;
    case C_NOT_Q8_0: return c->cur != NPUC__GGML_Q8_0;
    default: return 0;
    }
}

static const char *tname(int id) {
    const npuc__ggml_type *t = npuc__ggml_type_by_id((uint32_t)id);
    return t ? t->name : "?";
}

static int is_k(int id) { return id >= NPUC__GGML_Q2_K && id <= NPUC__GGML_Q6_K; }

int npuc__gguf_k_fallback(int id, int64_t row) {
    if (!is_k(id) || row % 256 == 0) return id;
    if (row % 32 != 0) return NPUC__GGML_F16;
    switch (id) {
    case NPUC__GGML_Q4_K: return NPUC__GGML_Q5_0;
    case NPUC__GGML_Q5_K: return NPUC__GGML_Q5_1;
    case NPUC__GGML_Q6_K: return NPUC__GGML_Q8_0;
    default: return NPUC__GGML_Q4_0; /* Q2_K, Q3_K: IQ4_NL in llama.cpp, which npuc does not write */
    }
}

/* Appends a formatted piece to reason. */
static void add(char *r, size_t cap, const char *fmt, const char *a, long x, long y) {
    size_t n = strlen(r);
    if (n + 1 < cap) snprintf(r + n, cap - n, fmt, a, x, y);
}

int npuc__gguf_mix_choose(npuc__gguf_mix_state *s, int mix, int base, const char *name, int rank,
                          const int64_t *shape, int keep, int override, const char *pattern, char *reason,
                          size_t cap) {
    char why[NPUC__GGUF_REASON_MAX] = "";
    const char *label, *no = quantized_not(name, rank, shape);
    const int role = role_of(name, &label);
    ctxt c = {.s = s, .falcon = s->arch && strcmp(s->arch, "falcon") == 0, .cur = base};
    c.ne0 = rank ? shape[rank - 1] : 1;
    if (no) {
        snprintf(reason, cap, "%s: not quantized (%s)", tname(keep), no);
        return keep;
    }
    if (override >= 0) {
        c.cur = override;
        snprintf(why, sizeof why, "override %s", pattern ? pattern : "");
    } else if (mix == NPUC__GGUF_MIX_NONE) {
        snprintf(why, sizeof why, "%s", "the chosen type");
    } else {
        const int attn_v = role == R_ATTN_V, ffn = role == R_FFN_DOWN || role == R_FFN_GATE || role == R_FFN_UP;
        int r = role == R_TOKEN_EMBD && s->tied ? R_OUTPUT : role;
        if (ffn) {
            c.nlayer = s->n_layer;
            c.layer = role == R_FFN_DOWN ? s->i_ffn_down : role == R_FFN_GATE ? s->i_ffn_gate : s->i_ffn_up;
            if (s->n_expert > 1) { /* experts are not in layer order: the name says */
                if (sscanf(name, "blk.%d.", &c.layer) != 1) {
                    snprintf(reason, cap, "tensor '%s': cannot tell its layer (no blk.N.), as llama-quantize "
                             "needs for an expert model", name);
                    return -1;
                }
                if (c.layer < 0 || c.layer >= s->n_layer) {
                    snprintf(reason, cap, "tensor '%s': layer %d is outside 0..%d (block_count %d)", name,
                             c.layer, s->n_layer - 1, s->n_layer);
                    return -1;
                }
            }
        }
        snprintf(why, sizeof why, "%s", label);
        if (role == R_TOKEN_EMBD && s->tied) add(why, sizeof why, "%s", " (tied: no output.weight)", 0, 0);
        if (attn_v) add(why, sizeof why, "%s%ld of %ld", ", ", s->i_attention_wv, s->n_attention_wv);
        if (ffn) add(why, sizeof why, "%s%ld of %ld", ", layer ", c.layer, c.nlayer);
        const char *rule_why = "mix default";
        for (size_t i = 0; i < sizeof RULES / sizeof RULES[0]; i++) {
            const rule *u = &RULES[i];
            if (u->role != r || !(u->mixes & (1u << mix)) || !cond_holds(&c, u->cond)) continue;
            if (u->type != KEEP) c.cur = u->type;
            rule_why = u->why;
            break;
        }
        if (*rule_why) add(why, sizeof why, ", %s", rule_why, 0, 0);
        if (attn_v) {
            const int is70b = s->arch && strcmp(s->arch, "llama") == 0 && s->n_layer == 80 &&
                              s->n_head != s->n_head_kv && s->n_expert != 8;
            if (is70b && (c.cur == NPUC__GGML_Q3_K || c.cur == NPUC__GGML_Q4_K)) {
                add(why, sizeof why, ", 70B (%s -> Q5_K)", tname(c.cur), 0, 0);
                c.cur = NPUC__GGML_Q5_K;
            }
            if (s->n_expert == 8) {
                add(why, sizeof why, ", 8 experts (%s -> Q8_0)", tname(c.cur), 0, 0);
                c.cur = NPUC__GGML_Q8_0;
            }
            s->i_attention_wv++;
        }
        if (role == R_FFN_DOWN) s->i_ffn_down++;
        if (role == R_FFN_GATE) s->i_ffn_gate++;
        if (role == R_FFN_UP) s->i_ffn_up++;
    }
    /* Step 4: rows the type's block does not divide. */
    const int chosen = c.cur;
    if (is_k(chosen) && c.ne0 % 256 != 0) {
        c.cur = npuc__gguf_k_fallback(chosen, c.ne0);
        snprintf(reason, cap, "%s: %s (%s); fallback: ne[0] %lld is not a multiple of 256", tname(c.cur), why,
                 tname(chosen), (long long)c.ne0);
        return c.cur;
    }
    if (!is_k(chosen)) {
        const npuc__ggml_type *t = npuc__ggml_type_by_id((uint32_t)chosen);
        if (t && t->blck > 1 && c.ne0 % t->blck != 0) {
            snprintf(reason, cap, "F32: %s (%s); kept F32: ne[0] %lld is not a multiple of %u", why, t->name,
                     (long long)c.ne0, t->blck);
            return NPUC__GGML_F32;
        }
    }
    snprintf(reason, cap, "%s: %s", tname(chosen), why);
    return chosen;
}

void npuc__gguf_mix_count(npuc__gguf_mix_state *s, const char *const *names, size_t n) {
    s->n_attention_wv = 0;
    s->tied = 1;
    s->i_attention_wv = s->i_ffn_down = s->i_ffn_gate = s->i_ffn_up = 0;
    for (size_t i = 0; i < n; i++) {
        const char *label;
        const int r = role_of(names[i], &label);
        if (r == R_ATTN_V) s->n_attention_wv++;
        if (r == R_OUTPUT) s->tied = 0;
    }
}

static int layer_of(const char *name) {
    int l = -1;
    if (sscanf(name, "blk.%d.", &l) != 1) l = -1;
    return l;
}

typedef struct ord {
    int layer;
    const char *name;
    size_t i;
} ord;

static int ord_cmp(const void *a, const void *b) {
    const ord *x = a, *y = b;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    const int c = strcmp(x->name, y->name);
    return c ? c : (x->i > y->i) - (x->i < y->i);
}

int npuc__gguf_mix_order(const char *const *names, size_t n, size_t *idx) {
    ord *o = malloc((n ? n : 1) * sizeof *o);
    if (!o) return -1;
    for (size_t i = 0; i < n; i++) o[i] = (ord){layer_of(names[i]), names[i], i};
    qsort(o, n, sizeof *o, ord_cmp);
    for (size_t i = 0; i < n; i++) idx[i] = o[i].i;
    free(o);
    return 0;
}
