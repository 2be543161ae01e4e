/*
 * test_sparsify.c - N:M sparsity against an independent computation.
 *
 * The reference finds each element's output channel c, spatial tap s and
 * input channel i by explicit index arithmetic on the shape (not the
 * library's geometry), forms the groups (c, s, i / M) with position i mod M,
 * and zeroes in each group of r values the r - min(N, r) smallest by
 * (|w|, position).  Outputs must match bit for bit, group by group, for
 * every layout, patterns 1:2 .. 7:8 and 5:16, short last groups, ties and
 * existing zeros; the compressed form must round-trip exactly; and whole
 * models must round-trip through decompress, alone and combined with
 * quantization (equal to the fake-quant of the sparsified model).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static npuc_ctx *ctx;

static int setup(void **state) { (void)state; return npuc_ctx_new(&ctx) == NPUC_OK ? 0 : -1; }
static int teardown(void **state) { (void)state; npuc_ctx_free(ctx); return 0; }

static npuc_tensor_info tinfo(npuc_layout l, int rank, const int64_t *shape) {
    npuc_tensor_info t;
    memset(&t, 0, sizeof t);
    t.name = "w";
    t.dtype = NPUC_DTYPE_F32;
    t.rank = rank;
    t.numel = 1;
    for (int d = 0; d < rank; d++) {
        t.shape[d] = shape[d];
        t.numel *= (uint64_t)shape[d];
    }
    t.nbytes = t.numel * 4;
    t.layout = l;
    return t;
}

/* (c, s, i) of element e, and the counts C, S, I. */
static void locate(const npuc_tensor_info *t, uint64_t e, uint64_t *c, uint64_t *s, uint64_t *i, uint64_t *C,
                   uint64_t *S, uint64_t *I) {
    const int64_t *sh = t->shape;
    const int r = t->rank;
    uint64_t sp = 1;
    switch (t->layout) {
    case NPUC_LAYOUT_OI: *C = sh[0]; *I = sh[1]; *S = 1; *c = e / *I; *i = e % *I; *s = 0; break;
    case NPUC_LAYOUT_IO: *I = sh[0]; *C = sh[1]; *S = 1; *i = e / *C; *c = e % *C; *s = 0; break;
    case NPUC_LAYOUT_OIHW:
        for (int d = 2; d < r; d++) sp *= (uint64_t)sh[d];
        *C = sh[0]; *I = sh[1]; *S = sp;
        *c = e / (*I * sp); *i = (e / sp) % *I; *s = e % sp;
        break;
    case NPUC_LAYOUT_IOHW:
        for (int d = 2; d < r; d++) sp *= (uint64_t)sh[d];
        *I = sh[0]; *C = sh[1]; *S = sp;
        *i = e / (*C * sp); *c = (e / sp) % *C; *s = e % sp;
        break;
    case NPUC_LAYOUT_HWIO:
        for (int d = 0; d < r - 2; d++) sp *= (uint64_t)sh[d];
        *I = sh[r - 2]; *C = sh[r - 1]; *S = sp;
        *s = e / (*I * *C); *i = (e / *C) % *I; *c = e % *C;
        break;
    default: fail();
    }
}

/* The reference: groups by explicit index arithmetic, then in each group
 * of r values the r - min(n, r) smallest by (|w|, position) become +0. */
static void ref_nm(const npuc_tensor_info *t, const float *w, int n, int m, float *out) {
    uint64_t c, s, i, C = 0, S = 0, I = 0;
    locate(t, 0, &c, &s, &i, &C, &S, &I);
    const uint64_t G = (I + (uint64_t)m - 1) / (uint64_t)m, ng = C * S * G;
    int64_t *grp = malloc((size_t)(ng * (uint64_t)m) * sizeof *grp);
    for (uint64_t k = 0; k < ng * (uint64_t)m; k++) grp[k] = -1;
    for (uint64_t e = 0; e < t->numel; e++) {
        locate(t, e, &c, &s, &i, &C, &S, &I);
        grp[((c * S + s) * G + i / (uint64_t)m) * (uint64_t)m + i % (uint64_t)m] = (int64_t)e;
    }
    memcpy(out, w, t->numel * sizeof *out);
    for (uint64_t g = 0; g < ng; g++) {
        const int64_t *q = grp + g * (uint64_t)m;
        int r = 0;
        while (r < m && q[r] >= 0) r++;
        const int drop = r > n ? r - n : 0;
        /* Rank every position by (|w|, position). */
        for (int j = 0; j < r; j++) {
            int rank = 0;
            for (int e2 = 0; e2 < r; e2++) {
                float a = fabsf(w[q[e2]]), b = fabsf(w[q[j]]);
                rank += a < b || (a == b && e2 < j);
            }
            out[q[j]] = rank < drop ? 0.0f : w[q[j]];
        }
    }
    free(grp);
}

/* Every group keeps at most n nonzeros (checked group by group). */
static void check_groups(const npuc_tensor_info *t, const float *out, int n, int m) {
    uint64_t c, s, i, C = 0, S = 0, I = 0;
    locate(t, 0, &c, &s, &i, &C, &S, &I);
    const uint64_t G = (I + (uint64_t)m - 1) / (uint64_t)m;
    int *nz = calloc((size_t)(C * S * G), sizeof *nz);
    for (uint64_t e = 0; e < t->numel; e++) {
        locate(t, e, &c, &s, &i, &C, &S, &I);
        nz[(c * S + s) * G + i / (uint64_t)m] += out[e] != 0.0f;
    }
    for (uint64_t g = 0; g < C * S * G; g++) assert_true(nz[g] <= n);
    free(nz);
}

static void fill(float *w, size_t n, int kind, uint64_t seed) {
    uint64_t s = seed * 7919 + 3;
    static const float V[] = {0.0f, -0.0f, 0.5f, -0.5f, 1.0f, -1.0f};
    for (size_t i = 0; i < n; i++)
        w[i] = kind == 0 ? npuc_test_randn(&s) : kind == 1 ? V[npuc_test_rand(&s) % 6]
                                                           : (npuc_test_rand(&s) % 3 ? 0.0f : npuc_test_randn(&s));
}

typedef struct lcase {
    npuc_layout l;
    int rank;
    int64_t shape[4];
} lcase;

static void test_masks(void **state) {
    (void)state;
    static const lcase L[] = {
        {NPUC_LAYOUT_OI, 2, {10, 16}},      {NPUC_LAYOUT_OI, 2, {7, 13}},      {NPUC_LAYOUT_IO, 2, {13, 10}},
        {NPUC_LAYOUT_IO, 2, {32, 9}},       {NPUC_LAYOUT_OIHW, 4, {6, 8, 3, 3}}, {NPUC_LAYOUT_OIHW, 3, {5, 10, 3}},
        {NPUC_LAYOUT_OIHW, 4, {4, 17, 1, 1}}, {NPUC_LAYOUT_HWIO, 4, {3, 3, 8, 6}}, {NPUC_LAYOUT_HWIO, 4, {1, 1, 10, 5}},
        {NPUC_LAYOUT_HWIO, 3, {5, 19, 7}},  {NPUC_LAYOUT_IOHW, 4, {9, 4, 2, 2}}, {NPUC_LAYOUT_OI, 2, {3, 33}},
    };
    static const int P[][2] = {{2, 4}, {1, 4}, {3, 4}, {1, 2}, {4, 8}, {3, 8}, {7, 8}, {2, 3}, {5, 16}};
    for (size_t a = 0; a < sizeof L / sizeof L[0]; a++)
        for (size_t p = 0; p < sizeof P / sizeof P[0]; p++)
            for (int kind = 0; kind < 3; kind++) {
                npuc_tensor_info t = tinfo(L[a].l, L[a].rank, L[a].shape);
                npuc_nm_geom g;
                npuc_status st = npuc_nm_geometry(ctx, &t, P[p][0], P[p][1], &g);
                const int in = (int)(L[a].l == NPUC_LAYOUT_OI ? t.shape[1] : L[a].l == NPUC_LAYOUT_IO || L[a].l == NPUC_LAYOUT_IOHW ? t.shape[0]
                                     : L[a].l == NPUC_LAYOUT_OIHW ? t.shape[1] : t.shape[t.rank - 2]);
                if (in < P[p][1]) {
                    assert_int_equal(st, NPUC_ERR_ARG);
                    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "shorter than M"));
                    continue;
                }
                assert_int_equal(st, NPUC_OK);
                float *w = malloc(t.numel * 4), *o = malloc(t.numel * 4), *r = malloc(t.numel * 4);
                fill(w, t.numel, kind, a * 31 + p);
                npuc_prune_stats ps;
                assert_int_equal(npuc_nm_sparsify(ctx, &t, &g, w, o, &ps), NPUC_OK);
                ref_nm(&t, w, P[p][0], P[p][1], r);
                if (memcmp(o, r, t.numel * 4) != 0) {
                    print_error("layout %s shape case %zu pattern %d:%d kind %d differs\n", npuc_layout_name(t.layout),
                                a, P[p][0], P[p][1], kind);
                    fail();
                }
                check_groups(&t, o, P[p][0], P[p][1]);
                uint64_t z = 0;
                for (uint64_t e = 0; e < t.numel; e++) z += o[e] == 0.0f;
                assert_int_equal(ps.zeros, z);
                /* Compressed form round trip, values and positions. */
                float *vals = malloc((size_t)g.kept * 4 + 4), *back = malloc(t.numel * 4);
                uint8_t *meta = malloc((size_t)g.meta_bytes + 1), *kept = malloc(t.numel);
                npuc_nm_pack(&g, o, o, 4, vals, meta);
                assert_int_equal(npuc_nm_unpack(ctx, "w", &g, vals, 4, meta, back, kept), NPUC_OK);
                for (uint64_t e = 0; e < t.numel; e++) assert_true(back[e] == o[e] && (o[e] == 0.0f || kept[e]));
                /* Corrupt a position: the decoder refuses. */
                if (g.meta_bytes) {
                    meta[0] ^= 0xff;
                    npuc_status us = npuc_nm_unpack(ctx, "w", &g, vals, 4, meta, back, NULL);
                    if (us != NPUC_OK) assert_int_equal(us, NPUC_ERR_FORMAT);
                }
                free(vals);
                free(back);
                free(meta);
                free(kept);
                free(w);
                free(o);
                free(r);
            }
}

static void test_large_and_threads(void **state) {
    (void)state;
    static const lcase L[] = {
        {NPUC_LAYOUT_OI, 2, {2048, 1024}}, {NPUC_LAYOUT_OI, 2, {1500, 1027}}, {NPUC_LAYOUT_HWIO, 4, {3, 3, 64, 256}},
        {NPUC_LAYOUT_OIHW, 4, {256, 64, 3, 3}}, {NPUC_LAYOUT_IO, 2, {1030, 700}},
    };
    for (size_t a = 0; a < sizeof L / sizeof L[0]; a++) {
        npuc_tensor_info t = tinfo(L[a].l, L[a].rank, L[a].shape);
        npuc_nm_geom g;
        assert_int_equal(npuc_nm_geometry(ctx, &t, 2, 4, &g), NPUC_OK);
        float *w = malloc(t.numel * 4), *o1 = malloc(t.numel * 4), *o2 = malloc(t.numel * 4), *r = malloc(t.numel * 4);
        fill(w, t.numel, (int)(a % 2), a + 100);
        npuc_prune_stats s1, s2;
        npuc_ctx_set_threads(ctx, 1);
        assert_int_equal(npuc_nm_sparsify(ctx, &t, &g, w, o1, &s1), NPUC_OK);
        npuc_ctx_set_threads(ctx, 2);
        assert_int_equal(npuc_nm_sparsify(ctx, &t, &g, w, o2, &s2), NPUC_OK);
        assert_memory_equal(o1, o2, t.numel * 4);
        assert_true(s1.err.sum_e2 == s2.err.sum_e2 && s1.err.sum_w2 == s2.err.sum_w2);
        ref_nm(&t, w, 2, 4, r);
        assert_memory_equal(o1, r, t.numel * 4);
        /* Error figures from an independent sum. */
        double w2 = 0, e2 = 0;
        for (uint64_t e = 0; e < t.numel; e++) {
            w2 += (double)w[e] * w[e];
            e2 += ((double)r[e] - w[e]) * ((double)r[e] - w[e]);
        }
        assert_close(s1.err.sum_w2, w2, 2e-6, 0); /* NPUC_SUMS_RTOL: float-block sums */
        assert_close(s1.err.sum_e2, e2, 2e-6, 0);
        assert_close(s1.err.sqnr_db, 10 * log10(w2 / e2), 0, 1e-4);
        assert_close(s1.err.rel_fro, sqrt(e2 / w2), 4e-6, 0);
        free(w);
        free(o1);
        free(o2);
        free(r);
    }
}

static void test_errors_and_parse(void **state) {
    (void)state;
    int n, m;
    assert_int_equal(npuc_nm_parse("2:4", &n, &m), 0);
    assert_true(n == 2 && m == 4);
    assert_int_equal(npuc_nm_parse("5:16", &n, &m), 0);
    static const char *const BAD[] = {"4:4", "5:4", "0:4", "2:17", "a:b", "2", "2:4x", ":4", "-1:4", ""};
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) assert_int_equal(npuc_nm_parse(BAD[i], &n, &m), -1);
    int64_t dw[4] = {16, 1, 3, 3}, hwim[4] = {3, 3, 16, 1}, bias[1] = {16};
    npuc_tensor_info t = tinfo(NPUC_LAYOUT_OIHW, 4, dw);
    npuc_nm_geom g;
    assert_int_equal(npuc_nm_geometry(ctx, &t, 2, 4, &g), NPUC_ERR_ARG);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "depthwise"));
    t = tinfo(NPUC_LAYOUT_HWIM, 4, hwim);
    assert_int_equal(npuc_nm_geometry(ctx, &t, 2, 4, &g), NPUC_ERR_ARG);
    t = tinfo(NPUC_LAYOUT_NONE, 1, bias);
    assert_int_equal(npuc_nm_geometry(ctx, &t, 2, 4, &g), NPUC_ERR_ARG);
    t = tinfo(NPUC_LAYOUT_OI, 2, (int64_t[]){4, 8});
    assert_int_equal(npuc_nm_geometry(ctx, &t, 4, 4, &g), NPUC_ERR_ARG);
    float w[32], o[32];
    for (int i = 0; i < 32; i++) w[i] = (float)i;
    w[5] = NAN;
    assert_int_equal(npuc_nm_geometry(ctx, &t, 2, 4, &g), NPUC_OK);
    assert_int_equal(npuc_nm_sparsify(ctx, &t, &g, w, o, NULL), NPUC_ERR_VALUE);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "1 NaN or Inf"));
    /* Huge finite weights (x^2 overflows float, not double) are fine. */
    double w2 = 0;
    for (int i = 0; i < 32; i++) {
        w[i] = (float)(i + 1) * 1e30f;
        w2 += (double)w[i] * w[i];
    }
    npuc_prune_stats ps;
    assert_int_equal(npuc_nm_sparsify(ctx, &t, &g, w, o, &ps), NPUC_OK);
    assert_close(ps.err.sum_w2, w2, 1e-12, 0);
}

/* The cost model against the formula, worked here. */
static void test_cost(void **state) {
    (void)state;
    int64_t sh[2] = {4096, 4096};
    npuc_tensor_info t = tinfo(NPUC_LAYOUT_OI, 2, sh);
    npuc_nm_geom g;
    assert_int_equal(npuc_nm_geometry(ctx, &t, 2, 4, &g), NPUC_OK);
    assert_int_equal(g.kept, 4096ull * 2048);
    assert_int_equal(g.meta_bytes, 4096ull * 2048 * 2 / 8);
    npuc_cost_model cm = npuc_cost_model_defaults();
    assert_close(cm.peak_tops, 200, 0, 0);
    assert_close(cm.bandwidth_gbs, 1000, 0, 0);
    static const double TOK[] = {1, 100, 1e5};
    for (size_t k = 0; k < 3; k++) {
        cm.tokens = TOK[k];
        npuc_nm_cost c;
        npuc_nm_cost_of(&g, 1.0, 1.0, &cm, &c); /* int8 values and activations */
        const double P = 4096.0 * 4096, flops = 2 * P * TOK[k], act = TOK[k] * 8192;
        const double td = fmax(flops / 200e12, (P + act) / 1e12);
        const double ts = fmax(0.5 * flops / 200e12, (0.5 * P + P / 8 + act) / 1e12);
        assert_close(c.flops, flops, 1e-12, 0);
        assert_close(c.ai, flops / (P + act), 1e-12, 0);
        assert_close(c.ridge, 200, 1e-12, 0);
        assert_close(c.speedup, td / ts, 1e-12, 0);
    }
    /* Memory-bound at 1 token: the byte ratio, 1 / (0.5 + 1/8) = 1.6 for int8. */
    cm.tokens = 1;
    npuc_nm_cost c;
    npuc_nm_cost_of(&g, 1.0, 1.0, &cm, &c);
    assert_close(c.speedup, 1.6, 1e-3, 0);
}

/* ------------------------------------------------------------ models */

static const char *sample(const char *name) {
    static char buf[4][1024];
    static int k;
    const char *src = getenv("NPUC_SRC");
    char *b = buf[k++ & 3];
    snprintf(b, 1024, "%s/samples/%s", src ? src : "..", name);
    return b;
}

static void same_models(const char *a, const char *b) {
    npuc_model *ma, *mb;
    assert_int_equal(npuc_model_open(ctx, a, NULL, &ma), NPUC_OK);
    assert_int_equal(npuc_model_open(ctx, b, NULL, &mb), NPUC_OK);
    assert_int_equal(npuc_model_count(ma), npuc_model_count(mb));
    for (size_t i = 0; i < npuc_model_count(ma); i++) {
        const npuc_tensor_info *ta = npuc_model_tensor(ma, i);
        size_t j;
        assert_int_equal(npuc_model_find(mb, ta->name, &j), 0);
        const npuc_tensor_info *tb = npuc_model_tensor(mb, j);
        assert_int_equal(ta->dtype, tb->dtype);
        assert_int_equal(ta->nbytes, tb->nbytes);
        const void *pa, *pb;
        assert_int_equal(npuc_model_data(ctx, ma, i, &pa), NPUC_OK);
        assert_int_equal(npuc_model_data(ctx, mb, j, &pb), NPUC_OK);
        if (memcmp(pa, pb, (size_t)ta->nbytes) != 0) {
            print_error("%s vs %s: tensor '%s' differs\n", a, b, ta->name);
            fail();
        }
        npuc_model_release(ma, i);
        npuc_model_release(mb, j);
    }
    npuc_model_close(ma);
    npuc_model_close(mb);
}

static void test_models(void **state) {
    (void)state;
    const char *files[] = {"cnn_bn.safetensors", "cnn_bn_keras.h5", "mlp_attn.safetensors"};
    for (size_t f = 0; f < 3; f++) {
        const char *ext = strrchr(files[f], '.');
        char n1[64], n2[64], n3[64], n4[64], n5[64], n6[64];
        snprintf(n1, sizeof n1, "dense%s", ext);
        snprintf(n2, sizeof n2, "comp%s", ext);
        snprintf(n3, sizeof n3, "decomp%s", ext);
        snprintf(n4, sizeof n4, "q%s", ext);
        snprintf(n5, sizeof n5, "fq%s", ext);
        snprintf(n6, sizeof n6, "dq%s", ext);
        npuc_model *m, *sm;
        assert_int_equal(npuc_model_open(ctx, sample(files[f]), NULL, &m), NPUC_OK);
        npuc_sparsify_opts o = npuc_sparsify_opts_defaults();
        o.write.overwrite = 1;
        npuc_summary sum;
        assert_int_equal(npuc_sparsify_model(ctx, m, npuc_test_path(n1), &o, &sum), NPUC_OK);
        assert_true(sum.count[NPUC_ACTION_SPARSIFIED] >= 2);
        if (f < 2) { /* the depthwise conv and the 3-channel first conv are left dense, with a warning */
            int found = 0;
            for (size_t w = 0; w < sum.nwarnings; w++) found |= strstr(sum.warnings[w], "shorter than M=4") != NULL;
            assert_true(found);
        }
        for (size_t r = 0; r < sum.nrecords; r++)
            if (sum.records[r].action == NPUC_ACTION_SPARSIFIED) {
                assert_close(npuc_record_get(&sum.records[r], "sparsity_target", -1), 0.5, 0, 0);
                assert_true(npuc_record_get(&sum.records[r], "speedup_24", -1) > 1.0);
                assert_true(npuc_record_get(&sum.records[r], "ai", -1) > 0);
            }
        npuc_summary_free(&sum);
        o.compressed = 1;
        assert_int_equal(npuc_sparsify_model(ctx, m, npuc_test_path(n2), &o, &sum), NPUC_OK);
        assert_true(sum.bytes_after < sum.bytes_before);
        npuc_summary_free(&sum);
        npuc_model *cm;
        npuc_write_opts wo = npuc_write_opts_defaults();
        wo.overwrite = 1;
        assert_int_equal(npuc_model_open(ctx, npuc_test_path(n2), NULL, &cm), NPUC_OK);
        assert_int_equal(npuc_decompress_model(ctx, cm, npuc_test_path(n3), &wo), NPUC_OK);
        npuc_model_close(cm);
        same_models(npuc_test_path(n3), npuc_test_path(n1));

        /* 2:4 + quantization: decompress(quantize --pattern) == fake-quant of the sparsified model. */
        static const int BITS[] = {8, 4, 8};
        static const int SYM[] = {1, 0, 0};
        static const uint32_t GS[] = {0, 16, 0};
        for (int q = 0; q < 3; q++) {
            npuc_quantize_opts qo = npuc_quantize_opts_defaults();
            qo.params.bits = BITS[q];
            qo.params.symmetric = SYM[q];
            if (GS[q]) {
                qo.params.gran = NPUC_GRAN_GROUP;
                qo.params.group_size = GS[q];
            }
            qo.quantize_all = 1;
            qo.pattern_n = 2;
            qo.pattern_m = 4;
            qo.write.overwrite = 1;
            assert_int_equal(npuc_quantize_model(ctx, m, npuc_test_path(n4), &qo, &sum), NPUC_OK);
            npuc_summary_free(&sum);
            assert_int_equal(npuc_model_open(ctx, npuc_test_path(n4), NULL, &cm), NPUC_OK);
            assert_int_equal(npuc_decompress_model(ctx, cm, npuc_test_path(n6), &wo), NPUC_OK);
            npuc_model_close(cm);
            qo.pattern_n = qo.pattern_m = 0;
            qo.fake_quant = 1;
            assert_int_equal(npuc_model_open(ctx, npuc_test_path(n1), NULL, &sm), NPUC_OK);
            assert_int_equal(npuc_quantize_model(ctx, sm, npuc_test_path(n5), &qo, &sum), NPUC_OK);
            npuc_summary_free(&sum);
            npuc_model_close(sm);
            same_models(npuc_test_path(n6), npuc_test_path(n5));
        }

        /* --include naming a depthwise conv, or N >= M: an error, nothing written. */
        const char *bad = npuc_test_path(f == 1 ? "bad.h5" : "bad.safetensors");
        const char *inc[1] = {f == 0 ? "features\\.6\\.weight" : f == 1 ? "depthwise" : "embed"};
        o = npuc_sparsify_opts_defaults();
        o.include = inc;
        o.ninclude = 1;
        npuc_status st = npuc_sparsify_model(ctx, m, bad, &o, &sum);
        if (f < 2) {
            assert_int_equal(st, NPUC_ERR_ARG);
            assert_non_null(strstr(npuc_ctx_errmsg(ctx), "shorter than M=4"));
            assert_false(npuc_test_exists(bad));
        } else {
            npuc_summary_free(&sum);
        }
        o = npuc_sparsify_opts_defaults();
        o.n = 4;
        assert_int_equal(npuc_sparsify_model(ctx, m, bad, &o, &sum), NPUC_ERR_ARG);
        if (f < 2) assert_false(npuc_test_exists(bad));
        npuc_model_close(m);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_masks),
        cmocka_unit_test(test_large_and_threads),
        cmocka_unit_test(test_errors_and_parse),
        cmocka_unit_test(test_cost),
        cmocka_unit_test(test_models),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
