/*
 * test_gguf_mix.c - llama.cpp's quantization mixes (formats/gguf/gguf_mix.c)
 * against a table written by hand from llama.cpp's src/llama-quant.cpp
 * (commit 007dbbf3: llama_tensor_get_type_impl, use_more_bits,
 * tensor_type_fallback), not from npuc's table.
 *
 * The expected types are strings with one character per layer (or one for
 * every layer): 2 3 4 5 6 = Q2_K..Q6_K, 8 = Q8_0, a = Q4_0, b = Q5_0,
 * c = Q5_1, h = F16, f = F32.  use_more_bits(i, n) holds for the first and
 * last n/8 layers and every third layer between (i - n/8) % 3 == 2; for 32
 * layers that is 0-3, 6, 9, ..., 27, 28-31, written out below as
 * "6666" "446"x8 "6666" for Q4_K_M.  Every tensor's type and the reason's
 * type, role and layer are checked; the rules with a name in their reason
 * (use_more_bits, 70B, 8 experts, tied, fallback, override) are checked by
 * name too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf_mix.h"
#include "testutil.h"

static npuc_ctx *ctx;

#define MAXT 1400

typedef struct model {
    npuc_tensor_info t[MAXT];
    char names[MAXT][64];
    size_t n;
    const char *mk[8], *mv[8];
    char mvb[8][32];
    size_t nm;
    int types[MAXT];
    char why[MAXT][NPUC__GGUF_REASON_MAX];
} model;

static model M;

static void meta(model *m, const char *k, const char *v) {
    snprintf(m->mvb[m->nm], sizeof m->mvb[0], "%s", v);
    m->mk[m->nm] = k;
    m->mv[m->nm] = m->mvb[m->nm];
    m->nm++;
}

/* A tensor with GGUF dims ne (innermost first), stored in npuc order. */
static void add(model *m, const char *name, int nd, int64_t ne0, int64_t ne1, int64_t ne2) {
    npuc_tensor_info *t = &m->t[m->n];
    snprintf(m->names[m->n], sizeof m->names[0], "%s", name);
    memset(t, 0, sizeof *t);
    t->name = m->names[m->n];
    t->dtype = NPUC_DTYPE_F32;
    t->rank = nd;
    const int64_t ne[3] = {ne0, ne1, ne2};
    for (int d = 0; d < nd; d++) t->shape[d] = ne[nd - 1 - d];
    m->n++;
}

typedef struct spec {
    const char *arch;
    int layers, embd, ff, head, head_kv, experts, tied, qkv;
} spec;

/* llama.cpp's tensor names for sp, layers declared last to first (the
 * mixes must not depend on the file's order). */
static void build(model *m, const spec *sp) {
    char k[8][64], v[16];
    memset(m, 0, sizeof *m);
    meta(m, "gguf.general.architecture", sp->arch);
    snprintf(k[0], 64, "gguf.%s.block_count", sp->arch);
    snprintf(k[1], 64, "gguf.%s.attention.head_count", sp->arch);
    snprintf(k[2], 64, "gguf.%s.attention.head_count_kv", sp->arch);
    snprintf(k[3], 64, "gguf.%s.expert_count", sp->arch);
    static char keys[4][64];
    memcpy(keys, k, sizeof keys);
    snprintf(v, sizeof v, "%d", sp->layers);
    meta(m, keys[0], v);
    snprintf(v, sizeof v, "%d", sp->head);
    meta(m, keys[1], v);
    snprintf(v, sizeof v, "%d", sp->head_kv);
    meta(m, keys[2], v);
    if (sp->experts) {
        snprintf(v, sizeof v, "%d", sp->experts);
        meta(m, keys[3], v);
    }
    const int64_t kv = sp->embd / sp->head * sp->head_kv;
    add(m, "token_embd.weight", 2, sp->embd, 1000, 0);
    add(m, "output_norm.weight", 1, sp->embd, 0, 0);
    if (!sp->tied) add(m, "output.weight", 2, sp->embd, 1000, 0);
    for (int i = sp->layers - 1; i >= 0; i--) {
        char n[64];
#define T(s, nd, a, b, c)                                \
    do {                                                 \
        snprintf(n, sizeof n, "blk.%d." s, i);           \
        add(m, n, nd, a, b, c);                          \
    } while (0)
        T("attn_norm.weight", 1, sp->embd, 0, 0);
        if (sp->qkv) {
            T("attn_qkv.weight", 2, sp->embd, sp->embd + 2 * kv, 0);
        } else {
            T("attn_q.weight", 2, sp->embd, sp->embd, 0);
            T("attn_k.weight", 2, sp->embd, kv, 0);
            T("attn_v.weight", 2, sp->embd, kv, 0);
        }
        T("attn_output.weight", 2, sp->embd, sp->embd, 0);
        T("ffn_norm.weight", 1, sp->embd, 0, 0);
        if (sp->experts) {
            T("ffn_gate_inp.weight", 2, sp->embd, sp->experts, 0);
            T("ffn_gate_exps.weight", 3, sp->embd, sp->ff, sp->experts);
            T("ffn_down_exps.weight", 3, sp->ff, sp->embd, sp->experts);
            T("ffn_up_exps.weight", 3, sp->embd, sp->ff, sp->experts);
        } else {
            T("ffn_gate.weight", 2, sp->embd, sp->ff, 0);
            T("ffn_down.weight", 2, sp->ff, sp->embd, 0);
            T("ffn_up.weight", 2, sp->embd, sp->ff, 0);
        }
#undef T
    }
}

static npuc_status plan(model *m, int mix, int base, const char *rules) {
    return npuc__gguf_plan(ctx, "m.gguf", mix, base, rules, m->mk, m->mv, m->nm, m->t, m->n, m->types, m->why);
}

static int code_type(char c) {
    switch (c) {
    case '2': return NPUC__GGML_Q2_K;
    case '3': return NPUC__GGML_Q3_K;
    case '4': return NPUC__GGML_Q4_K;
    case '5': return NPUC__GGML_Q5_K;
    case '6': return NPUC__GGML_Q6_K;
    case '8': return NPUC__GGML_Q8_0;
    case 'a': return NPUC__GGML_Q4_0;
    case 'b': return NPUC__GGML_Q5_0;
    case 'c': return NPUC__GGML_Q5_1;
    case 'h': return NPUC__GGML_F16;
    case 'f': return NPUC__GGML_F32;
    default: fail_msg("bad code %c", c); return -1;
    }
}

static size_t find(const model *m, const char *name) {
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->names[i], name) == 0) return i;
    fail_msg("no tensor %s", name);
    return 0;
}

/* Tensor name has the type of code (code[layer], or code[0] for all
 * layers), its reason starts with that type's name and holds each of the
 * given phrases. */
static void is(const model *m, const char *name, const char *code, int layer, const char *p1, const char *p2) {
    const size_t i = find(m, name);
    const char c = strlen(code) == 1 ? code[0] : code[layer];
    const int want = code_type(c);
    const char *tn = npuc__ggml_type_by_id((uint32_t)want)->name;
    if (m->types[i] != want)
        fail_msg("%s: expected %s, got %s (%s)", name, tn, npuc__ggml_type_by_id((uint32_t)m->types[i])->name,
                 m->why[i]);
    if (strncmp(m->why[i], tn, strlen(tn)) != 0 || m->why[i][strlen(tn)] != ':')
        fail_msg("%s: reason '%s' does not start with %s:", name, m->why[i], tn);
    if (p1 && !strstr(m->why[i], p1)) fail_msg("%s: reason '%s' lacks '%s'", name, m->why[i], p1);
    if (p2 && !strstr(m->why[i], p2)) fail_msg("%s: reason '%s' lacks '%s'", name, m->why[i], p2);
}

typedef struct row {
    int mix;
    const char *out, *embd, *q, *k, *v, *o, *gate, *up, *down;
} row;

/* Every tensor of a model built from sp against r; the FFN names of an
 * expert model end in _exps. */
static void check_rows(const spec *sp, const row *rows, size_t nrows) {
    for (size_t r = 0; r < nrows; r++) {
        const row *w = &rows[r];
        build(&M, sp);
        assert_int_equal(plan(&M, w->mix, npuc__gguf_mix_base(w->mix), NULL), NPUC_OK);
        char n[64], lay[48];
        if (!sp->tied) is(&M, "output.weight", w->out, 0, "output", NULL);
        is(&M, "token_embd.weight", w->embd, 0, "token_embd", NULL);
        is(&M, "output_norm.weight", "f", 0, "rank 1", NULL);
        const char *x = sp->experts ? "_exps" : "";
        for (int i = 0; i < sp->layers; i++) {
            snprintf(lay, sizeof lay, "layer %d of %d", i, sp->layers);
#define N(s)                                     \
    (snprintf(n, sizeof n, "blk.%d." s, i), n)
            is(&M, N("attn_norm.weight"), "f", i, NULL, NULL);
            if (sp->qkv) {
                is(&M, N("attn_qkv.weight"), w->v, i, "attn_qkv", NULL);
            } else {
                is(&M, N("attn_q.weight"), w->q, i, "attn_q", NULL);
                is(&M, N("attn_k.weight"), w->k, i, "attn_k", NULL);
                is(&M, N("attn_v.weight"), w->v, i, "attn_v", NULL);
            }
            is(&M, N("attn_output.weight"), w->o, i, "attn_output", NULL);
            snprintf(n, sizeof n, "blk.%d.ffn_gate%s.weight", i, x);
            is(&M, n, w->gate, i, "ffn_gate", lay);
            snprintf(n, sizeof n, "blk.%d.ffn_up%s.weight", i, x);
            is(&M, n, w->up, i, "ffn_up", lay);
            snprintf(n, sizeof n, "blk.%d.ffn_down%s.weight", i, x);
            is(&M, n, w->down, i, "ffn_down", lay);
            if (sp->experts) is(&M, N("ffn_gate_inp.weight"), "f", i, "not quantized", NULL);
#undef N
        }
    }
}

/* ------------------------------------------------------------ the tables */

/* llama 2 7B's shape: 32 layers, no GQA (n_head == n_head_kv). */
static void llama32(void **state) {
    (void)state;
    static const spec sp = {"llama", 32, 4096, 11008, 32, 32, 0, 0, 0};
    static const row rows[] = {
        {NPUC__GGUF_MIX_Q2_K, "6", "2", "2", "2", "3", "3", "2", "2", "3"},
        {NPUC__GGUF_MIX_Q3_K_S, "6", "3", "3", "3", "3", "3", "3", "3", "3"},
        {NPUC__GGUF_MIX_Q3_K_M, "6", "3", "3", "3", "55444444444444444444444444444444", "4", "3", "3",
         "55444444444444444444444444444444"},
        {NPUC__GGUF_MIX_Q3_K_L, "6", "3", "3", "3", "5", "5", "3", "3", "5"},
        {NPUC__GGUF_MIX_Q4_K_S, "6", "4", "4", "4", "55554444444444444444444444444444", "4", "4", "4",
         "55554444444444444444444444444444"},
        {NPUC__GGUF_MIX_Q4_K_M, "6", "4", "4", "4", "66664464464464464464464464466666", "4", "4", "4",
         "66664464464464464464464464466666"},
        {NPUC__GGUF_MIX_Q5_K_S, "6", "5", "5", "5", "5", "5", "5", "5", "5"},
        {NPUC__GGUF_MIX_Q5_K_M, "6", "5", "5", "5", "66665565565565565565565565566666", "5", "5", "5",
         "66665565565565565565565565566666"},
        {NPUC__GGUF_MIX_Q6_K, "6", "6", "6", "6", "6", "6", "6", "6", "6"},
    };
    check_rows(&sp, rows, sizeof rows / sizeof rows[0]);
    /* the named rules */
    build(&M, &sp);
    assert_int_equal(plan(&M, NPUC__GGUF_MIX_Q4_K_M, NPUC__GGML_Q4_K, NULL), NPUC_OK);
    is(&M, "blk.3.ffn_down.weight", "6", 0, "ffn_down, layer 3 of 32", "use_more_bits");
    is(&M, "blk.6.attn_v.weight", "6", 0, "attn_v, 6 of 32", "use_more_bits");
    is(&M, "blk.4.ffn_down.weight", "4", 0, "mix default", NULL);
    /* Q8_0 and plain types are not mixes: every float matrix gets the type */
    assert_int_equal(plan(&M, NPUC__GGUF_MIX_NONE, NPUC__GGML_Q8_0, NULL), NPUC_OK);
    is(&M, "output.weight", "8", 0, "the chosen type", NULL);
    is(&M, "blk.0.attn_v.weight", "8", 0, NULL, NULL);
}

static void pat(char *b, const char *a, int na, const char *m, int nm, const char *z, int nz) {
    b[0] = 0;
    for (int i = 0; i < na; i++) strcat(b, a);
    for (int i = 0; i < nm; i++) strcat(b, m);
    for (int i = 0; i < nz; i++) strcat(b, z);
}

/* llama 2 70B's shape: 80 layers, n_head 64, n_head_kv 8 (GQA 8): attn_v
 * Q3_K/Q4_K become Q5_K; use_more_bits(i, 80): 0-9, 12, 15, ..., 69, 70-79. */
static void llama70b(void **state) {
    (void)state;
    static const spec sp = {"llama", 80, 8192, 28672, 64, 8, 0, 0, 0};
    static char v4m[81], d4m[81], v5m[81], d3m[81], d4s[81];
    pat(v4m, "6", 10, "556", 20, "6", 10);
    pat(d4m, "6", 10, "446", 20, "6", 10);
    pat(v5m, "6", 10, "556", 20, "6", 10);
    pat(d3m, "5", 5, "4", 75, "", 0);
    pat(d4s, "5", 10, "4", 70, "", 0);
    const row rows[] = {
        {NPUC__GGUF_MIX_Q2_K, "6", "2", "2", "2", "5", "3", "2", "2", "3"},
        {NPUC__GGUF_MIX_Q3_K_S, "6", "3", "3", "3", "5", "3", "3", "3", "3"},
        {NPUC__GGUF_MIX_Q3_K_M, "6", "3", "3", "3", "5", "4", "3", "3", d3m},
        {NPUC__GGUF_MIX_Q3_K_L, "6", "3", "3", "3", "5", "5", "3", "3", "5"},
        {NPUC__GGUF_MIX_Q4_K_S, "6", "4", "4", "4", "5", "4", "4", "4", d4s},
        {NPUC__GGUF_MIX_Q4_K_M, "6", "4", "4", "4", v4m, "4", "4", "4", d4m},
        {NPUC__GGUF_MIX_Q5_K_S, "6", "5", "5", "5", "5", "5", "5", "5", "5"},
        {NPUC__GGUF_MIX_Q5_K_M, "6", "5", "5", "5", v5m, "5", "5", "5", v5m},
        {NPUC__GGUF_MIX_Q6_K, "6", "6", "6", "6", "6", "6", "6", "6", "6"},
    };
    check_rows(&sp, rows, sizeof rows / sizeof rows[0]);
    build(&M, &sp);
    assert_int_equal(plan(&M, NPUC__GGUF_MIX_Q2_K, NPUC__GGML_Q2_K, NULL), NPUC_OK);
    is(&M, "blk.40.attn_v.weight", "5", 0, "n_gqa >= 4", "70B (Q4_K -> Q5_K)");
    /* 80 layers without GQA is llama 65B: no bump */
    static const spec s65 = {"llama", 80, 8192, 22016, 64, 64, 0, 0, 0};
    build(&M, &s65);
    assert_int_equal(plan(&M, NPUC__GGUF_MIX_Q3_K_S, NPUC__GGML_Q3_K, NULL), NPUC_OK);
    is(&M, "blk.40.attn_v.weight", "3", 0, NULL, NULL);
}

/* Mixtral 8x7B's shape: 8 experts, attn_v and attn_k Q8_0, attn_output
 * Q5_K for the mixes llama.cpp lists (Q3_K_L, Q5_K_S, Q5_K_M, Q6_K keep
 * their default), the experts' ffn_down by the layer in their name. */
static void moe8(void **state) {
    (void)state;
    static const spec sp = {"llama", 32, 4096, 14336, 32, 8, 8, 0, 0};
    static const row rows[] = {
        {NPUC__GGUF_MIX_Q2_K, "6", "2", "2", "8", "8", "5", "2", "2", "3"},
        {NPUC__GGUF_MIX_Q3_K_S, "6", "3", "3", "8", "8", "5", "3", "3", "3"},
        {NPUC__GGUF_MIX_Q3_K_M, "6", "3", "3", "8", "8", "5", "3", "3", "55444444444444444444444444444444"},
        {NPUC__GGUF_MIX_Q3_K_L, "6", "3", "3", "8", "8", "3", "3", "3", "5"},
        {NPUC__GGUF_MIX_Q4_K_S, "6", "4", "4", "8", "8", "5", "4", "4", "55554444444444444444444444444444"},
        {NPUC__GGUF_MIX_Q4_K_M, "6", "4", "4", "8", "8", "5", "4", "4", "66664464464464464464464464466666"},
        {NPUC__GGUF_MIX_Q5_K_S, "6", "5", "5", "8", "8", "5", "5", "5", "5"},
        {NPUC__GGUF_MIX_Q5_K_M, "6", "5", "5", "8", "8", "5", "5", "5", "66665565565565565565565565566666"},
        {NPUC__GGUF_MIX_Q6_K, "6", "6", "6", "8", "8", "6", "6", "6", "6"},
    };
    check_rows(&sp, rows, sizeof rows / sizeof rows[0]);
    build(&M, &sp);
    assert_int_equal(plan(&M, NPUC__GGUF_MIX_Q4_K_M, NPUC__GGML_Q4_K, NULL), NPUC_OK);
    is(&M, "blk.9.attn_v.weight", "8", 0, "8 experts (Q6_K -> Q8_0)", NULL);
    is(&M, "blk.9.attn_k.weight", "8", 0, "8 experts", NULL);
    /* an expert tensor outside blk.N. cannot be placed: llama.cpp refuses */
    add(&M, "extra.ffn_down_exps.weight", 3, 14336, 4096, 8);
    assert_int_equal(plan(&M, NPUC__GGUF_MIX_Q4_K_M, NPUC__GGML_Q4_K, NULL), NPUC_ERR_ARG);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "extra.ffn_down_exps.weight"));
}

/* Fused attn_qkv goes through attn_v's rules and counter (category_is_attn_v
 * comes first in llama_tensor_get_type_impl); gqa 1. */
static void fused_qkv(void **state) {
    (void)state;
    static const spec sp = {"llama", 32, 3072, 8192, 32, 32, 0, 0, 1};
    static const row rows[] = {
        {NPUC__GGUF_MIX_Q2_K, "6", "2", "-", "-", "3", "3", "2", "2", "3"},
        {NPUC__GGUF_MIX_Q3_K_M, "6", "3", "-", "-", "55444444444444444444444444444444", "4", "3", "3",
         "55444444444444444444444444444444"},
        {NPUC__GGUF_MIX_Q4_K_M, "6", "4", "-", "-", "66664464464464464464464464466666", "4", "4", "4",
         "66664464464464464464464464466666"},
        {NPUC__GGUF_MIX_Q5_K_M, "6", "5", "-", "-", "66665565565565565565565565566666", "5", "5", "5",
         "66665565565565565565565565566666"},
    };
    check_rows(&sp, rows, sizeof rows / sizeof rows[0]);
}

/* Tied embeddings (no output.weight): token_embd is quantized as the
 * output would be. */
static void tied(void **state) {
    (void)state;
    static const spec sp = {"llama", 16, 2048, 8192, 32, 8, 0, 1, 0};
    build(&M, &sp);
    for (int mix = 1; mix < NPUC__GGUF_MIX_COUNT; mix++) {
        assert_int_equal(plan(&M, mix, npuc__gguf_mix_base(mix), NULL), NPUC_OK);
        is(&M, "token_embd.weight", "6", 0, "token_embd (tied: no output.weight)", NULL);
    }
}

/* Rows that are not a multiple of 256 fall back (Q2_K/Q3_K -> Q4_0, Q4_K
 * -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0; F16 when 32 does not divide them);
 * output.weight goes to Q8_0. */
static void odd_rows(void **state) {
    (void)state;
    static const spec sp = {"llama", 8, 96, 160, 8, 2, 0, 0, 0}; /* gqa 4; use_more_bits(i, 8): 0, 3, 6, 7 */
    static const row rows[] = {
        {NPUC__GGUF_MIX_Q2_K, "8", "a", "a", "a", "b", "a", "a", "a", "a"}, /* attn_v Q4_K (gqa 4) -> Q5_0 */
        {NPUC__GGUF_MIX_Q3_K_L, "8", "a", "a", "a", "c", "c", "a", "a", "c"},
        {NPUC__GGUF_MIX_Q4_K_M, "8", "b", "b", "b", "8bb8bb88", "b", "b", "b", "8bb8bb88"},
        {NPUC__GGUF_MIX_Q5_K_S, "8", "c", "c", "c", "c", "c", "c", "c", "c"},
        {NPUC__GGUF_MIX_Q6_K, "8", "8", "8", "8", "8", "8", "8", "8", "8"},
    };
    check_rows(&sp, rows, sizeof rows / sizeof rows[0]);
    build(&M, &sp);
    assert_int_equal(plan(&M, NPUC__GGUF_MIX_Q4_K_M, NPUC__GGML_Q4_K, NULL), NPUC_OK);
    is(&M, "blk.3.ffn_down.weight", "8", 0, "use_more_bits (Q6_K)", "fallback: ne[0] 160 is not a multiple of 256");
    /* 100 is not even a multiple of 32: F16; output.weight's Q8_0 cannot
     * hold it either (llama-quantize refuses), npuc keeps it F32 */
    static const spec s100 = {"llama", 8, 100, 160, 4, 4, 0, 0, 0};
    build(&M, &s100);
    assert_int_equal(plan(&M, NPUC__GGUF_MIX_Q4_K_M, NPUC__GGML_Q4_K, NULL), NPUC_OK);
    is(&M, "blk.1.attn_q.weight", "h", 0, "fallback: ne[0] 100", NULL);
    is(&M, "output.weight", "f", 0, "kept F32: ne[0] 100 is not a multiple of 32", NULL);
    is(&M, "blk.1.ffn_down.weight", "b", 0, NULL, NULL); /* ne[0] = 160 */
}

/* Falcon's exceptions: output Q8_0, ffn_down by its own ladder, attn_output
 * only for Q3_K_L. */
static void falcon(void **state) {
    (void)state;
    static const spec sp = {"falcon", 32, 4544, 18176, 71, 1, 0, 0, 0};
    /* 4544 and 18176 are multiples of 64, not 256: the K types fall back.
     * Use a shape that keeps them: */
    static const spec s2 = {"falcon", 32, 4608, 18432, 72, 1, 0, 0, 0};
    (void)sp;
    static const row rows[] = {
        {NPUC__GGUF_MIX_Q2_K, "8", "2", "2", "2", "4", "2", "2", "2", "3"}, /* gqa 72 */
        {NPUC__GGUF_MIX_Q3_K_M, "8", "3", "3", "3", "55444444444444444444444444444444", "3", "3", "3",
         "55443343343343343343343343344444"},
        {NPUC__GGUF_MIX_Q3_K_L, "8", "3", "3", "3", "5", "4", "3", "3", "4"},
        {NPUC__GGUF_MIX_Q4_K_S, "8", "4", "4", "4", "55554444444444444444444444444444", "4", "4", "4", "4"},
        {NPUC__GGUF_MIX_Q4_K_M, "8", "4", "4", "4", "66664464464464464464464464466666", "4", "4", "4",
         "66554454454454454454454454455555"},
    };
    check_rows(&s2, rows, sizeof rows / sizeof rows[0]);
}

/* --gguf-tensor-type: the first matching rule wins, the pattern is
 * lower-cased and searched anywhere in the name, the mix's counters skip
 * the overridden tensors, the fallback still applies. */
static void overrides(void **state) {
    (void)state;
    static const spec sp = {"llama", 32, 4096, 11008, 32, 32, 0, 0, 0};
    build(&M, &sp);
    assert_int_equal(plan(&M, NPUC__GGUF_MIX_Q4_K_M, NPUC__GGML_Q4_K,
                          "BLK\\.0\\.attn_v=q8_0\nattn_v=Q5_K\nffn_down=q6_k\nblk\\.1\\.=f16"),
                     NPUC_OK);
    is(&M, "blk.0.attn_v.weight", "8", 0, "override blk\\.0\\.attn_v", NULL);
    is(&M, "blk.5.attn_v.weight", "5", 0, "override attn_v", NULL);
    is(&M, "blk.1.attn_v.weight", "5", 0, "override attn_v", NULL); /* first rule wins over blk\.1\. */
    is(&M, "blk.1.attn_q.weight", "h", 0, "override blk\\.1\\.", NULL);
    is(&M, "blk.4.ffn_down.weight", "6", 0, "override ffn_down", NULL);
    /* blk.1.ffn_up was overridden, so the mix counted blk.4.ffn_up as its 4th (llama.cpp advances its counters only in the mix rules) */
    is(&M, "blk.4.ffn_up.weight", "4", 0, "layer 3 of 32", NULL);
    /* counters: with blk.0's attn_v overridden, blk.4's is the 4th the mix
     * sees (i_attention_wv 3: use_more_bits) */
    build(&M, &sp);
    assert_int_equal(plan(&M, NPUC__GGUF_MIX_Q4_K_M, NPUC__GGML_Q4_K, "blk\\.0\\.attn_v=q8_0"), NPUC_OK);
    is(&M, "blk.4.attn_v.weight", "6", 0, "attn_v, 3 of 32", "use_more_bits");
    is(&M, "blk.5.attn_v.weight", "4", 0, "attn_v, 4 of 32", NULL);
    /* a K override on rows of 96 falls back */
    static const spec s96 = {"llama", 8, 96, 160, 8, 8, 0, 0, 0};
    build(&M, &s96);
    assert_int_equal(plan(&M, NPUC__GGUF_MIX_NONE, NPUC__GGML_Q8_0, "ffn_up=q4_k"), NPUC_OK);
    is(&M, "blk.2.ffn_up.weight", "b", 0, "override ffn_up (Q4_K); fallback", NULL);
    is(&M, "blk.2.ffn_down.weight", "8", 0, "the chosen type", NULL);
    /* refusals */
    build(&M, &sp);
    assert_int_equal(plan(&M, NPUC__GGUF_MIX_Q4_K_M, NPUC__GGML_Q4_K, "attn_v"), NPUC_ERR_ARG);
    assert_int_equal(plan(&M, NPUC__GGUF_MIX_Q4_K_M, NPUC__GGML_Q4_K, "=q8_0"), NPUC_ERR_ARG);
    assert_int_equal(plan(&M, NPUC__GGUF_MIX_Q4_K_M, NPUC__GGML_Q4_K, "attn_v=iq4_nl"), NPUC_ERR_ARG);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "unknown type 'iq4_nl'"));
    assert_int_equal(plan(&M, NPUC__GGUF_MIX_Q4_K_M, NPUC__GGML_Q4_K, "attn_v[=q8_0"), NPUC_ERR_ARG);
    assert_int_equal(plan(&M, NPUC__GGUF_MIX_NONE, NPUC__GGML_F16, "attn_v=q8_0"), NPUC_ERR_ARG);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "--gguf-type is quantized"));
}

/* A mix needs <arch>.block_count; llama.cpp's names are what it reads. */
static void needs_block_count(void **state) {
    (void)state;
    static const spec sp = {"llama", 4, 256, 512, 4, 4, 0, 0, 0};
    build(&M, &sp);
    M.mk[1] = "gguf.llama.not_block_count";
    assert_int_equal(plan(&M, NPUC__GGUF_MIX_Q4_K_M, NPUC__GGML_Q4_K, NULL), NPUC_ERR_ARG);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "llama.block_count"));
    assert_int_equal(plan(&M, NPUC__GGUF_MIX_NONE, NPUC__GGML_Q8_0, NULL), NPUC_OK);
}

static void names_and_ftypes(void **state) {
    (void)state;
    static const char *const V[] = {"q2_k", "q3_k_s", "q3_k_m", "q3_k_l", "q4_k_s",
                                    "q4_k_m", "q5_k_s", "q5_k_m", "q6_k"};
    for (int i = 0; i < 9; i++) {
        assert_int_equal(npuc__gguf_mix_parse(V[i]), i + 1);
        assert_int_equal(npuc__gguf_mix_ftype(i + 1), 10 + i); /* LLAMA_FTYPE_MOSTLY_Q2_K = 10 .. Q6_K = 18 */
    }
    assert_int_equal(npuc__gguf_mix_parse("q8_0"), NPUC__GGUF_MIX_NONE);
    assert_string_equal(npuc__gguf_mix_name(NPUC__GGUF_MIX_Q4_K_M), "Q4_K_M");
}

static int setup(void **state) {
    (void)state;
    return npuc_ctx_new(&ctx) == NPUC_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    npuc_ctx_free(ctx);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(llama32),  cmocka_unit_test(llama70b),  cmocka_unit_test(moe8),
        cmocka_unit_test(fused_qkv), cmocka_unit_test(tied),     cmocka_unit_test(odd_rows),
        cmocka_unit_test(falcon),   cmocka_unit_test(overrides), cmocka_unit_test(needs_block_count),
        cmocka_unit_test(names_and_ftypes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
