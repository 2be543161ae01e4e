/*
 * test_quantize.c - npuc_quantize_tensor and npuc_quantize_model against an
 * independent scalar computation.
 *
 * The reference here is written from docs/quantization.md alone: it walks
 * every element by its multi-index, finds the element's channel and group by
 * explicit index arithmetic (not the [outer, C, inner] machinery the library
 * uses), and quantizes with the documented formulas.  Codes, scales and zero
 * points must match exactly; error sums within 1e-5 relative.
 *
 * A lowrank artifact as input (nested entries): the factors are quantized
 * under their own names, both factors of the first/last layer stay at 8 bits,
 * and decompress multiplies the dequantized factors.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static npuc_ctx *ctx;

static int setup(void **state) { (void)state; return npuc_ctx_new(&ctx) == NPUC_OK ? 0 : -1; }
static int teardown(void **state) { (void)state; npuc_ctx_free(ctx); return 0; }

/* Channel axis of a layout, and whether the channel spans two axes (HWIM). */
static int ref_axis(npuc_layout l, int rank, int *span) {
    *span = 1;
    switch (l) {
    case NPUC_LAYOUT_OI: case NPUC_LAYOUT_OIHW: return 0;
    case NPUC_LAYOUT_IOHW: return 1;
    case NPUC_LAYOUT_IO: case NPUC_LAYOUT_HWIO: return rank - 1;
    case NPUC_LAYOUT_HWIM: *span = 2; return rank - 2;
    default: return -1;
    }
}

typedef struct refq {
    uint64_t nscales;
    float *scale;
    int32_t *zp;
    uint8_t *codes;
    float *deq;
    double sum_e2, sum_w2;
    uint64_t clipped;
} refq;

/* For element e: its channel index and its position in the channel's
 * sequence (row-major over the non-channel axes). */
static void locate(const npuc_tensor_info *t, int ax, int span, uint64_t e, uint64_t *ch, uint64_t *pos) {
    int64_t idx[NPUC_MAX_RANK];
    uint64_t r = e;
    for (int d = t->rank - 1; d >= 0; d--) {
        idx[d] = (int64_t)(r % (uint64_t)t->shape[d]);
        r /= (uint64_t)t->shape[d];
    }
    uint64_t c = 0, p = 0;
    for (int d = 0; d < t->rank; d++) {
        if (d >= ax && d < ax + span) c = c * (uint64_t)t->shape[d] + (uint64_t)idx[d];
        else p = p * (uint64_t)t->shape[d] + (uint64_t)idx[d];
    }
    *ch = c;
    *pos = p;
}

static void ref_quantize(const npuc_tensor_info *t, const float *w, const npuc_quant_params *p, refq *o) {
    int span = 1, ax = p->gran == NPUC_GRAN_TENSOR ? -1 : p->axis >= 0 ? p->axis : ref_axis(t->layout, t->rank, &span);
    uint64_t C = 1, per = t->numel;
    if (ax >= 0) {
        C = 1;
        for (int d = ax; d < ax + span; d++) C *= (uint64_t)t->shape[d];
        per = t->numel / (C ? C : 1);
    }
    uint64_t G = p->gran == NPUC_GRAN_GROUP ? p->group_size : per;
    uint64_t gpc = p->gran == NPUC_GRAN_GROUP ? (per + G - 1) / G : 1;
    o->nscales = C * gpc;
    float *lo = malloc(sizeof(float) * o->nscales), *hi = malloc(sizeof(float) * o->nscales);
    for (uint64_t i = 0; i < o->nscales; i++) { lo[i] = INFINITY; hi[i] = -INFINITY; }
    for (uint64_t e = 0; e < t->numel; e++) {
        uint64_t c = 0, pos = e;
        if (ax >= 0) locate(t, ax, span, e, &c, &pos);
        uint64_t g = c * gpc + pos / G;
        if (w[e] < lo[g]) lo[g] = w[e];
        if (w[e] > hi[g]) hi[g] = w[e];
    }
    o->scale = malloc(sizeof(float) * o->nscales);
    o->zp = malloc(sizeof(int32_t) * o->nscales);
    const int full = p->grid == NPUC_GRID_FULL;
    int qmax = p->symmetric ? (1 << (p->bits - 1)) - 1 : (1 << p->bits) - 1;
    int qmin = p->symmetric ? (full ? -qmax - 1 : -qmax) : 0;
    for (uint64_t g = 0; g < o->nscales; g++) {
        float s;
        int32_t z = 0;
        if (full) {
            /* the end of larger magnitude with its sign (the positive one on
             * a tie) maps to -2^(b-1); a scale of magnitude below FLT_MIN
             * becomes FLT_MIN */
            const float m = -lo[g] > hi[g] ? lo[g] : hi[g];
            s = m / (float)-(1 << (p->bits - 1));
            if (!(fabsf(s) >= FLT_MIN)) s = FLT_MIN;
        } else if (p->symmetric) {
            float amax = fabsf(lo[g]) > fabsf(hi[g]) ? fabsf(lo[g]) : fabsf(hi[g]);
            s = amax / (float)qmax;
        } else {
            double l = lo[g] < 0 ? lo[g] : 0, h = hi[g] > 0 ? hi[g] : 0;
            s = (float)((h - l) / qmax);
            if (!(s >= FLT_MIN)) s = FLT_MIN;
            float zf = nearbyintf((float)(-l) / s);
            z = zf < 0 ? 0 : zf > (float)qmax ? qmax : (int32_t)zf;
        }
        if (!full && !(s >= FLT_MIN)) s = FLT_MIN;
        o->scale[g] = s;
        o->zp[g] = z;
    }
    o->codes = malloc(t->numel + 1);
    o->deq = malloc(sizeof(float) * (t->numel + 1));
    o->sum_e2 = o->sum_w2 = 0;
    o->clipped = 0;
    for (uint64_t e = 0; e < t->numel; e++) {
        uint64_t c = 0, pos = e;
        if (ax >= 0) locate(t, ax, span, e, &c, &pos);
        uint64_t g = c * gpc + pos / G;
        float inv = 1.0f / o->scale[g];
        float v = w[e] * inv;
        if (v > 16777216.0f) v = 16777216.0f;
        if (v < -16777216.0f) v = -16777216.0f;
        long q = lrintf(v) + o->zp[g];
        if (q < qmin || q > qmax) o->clipped++;
        q = q < qmin ? qmin : q > qmax ? qmax : q;
        o->codes[e] = (uint8_t)(int8_t)q;
        if (!p->symmetric) o->codes[e] = (uint8_t)q;
        o->deq[e] = (float)(q - o->zp[g]) * o->scale[g];
        double err = (double)o->deq[e] - w[e];
        o->sum_e2 += err * err;
        o->sum_w2 += (double)w[e] * w[e];
    }
    free(lo);
    free(hi);
}

static void refq_free(refq *o) { free(o->scale); free(o->zp); free(o->codes); free(o->deq); }

/* Fills w with one of several value patterns, per channel, to hit the edges. */
static void fill(float *w, uint64_t n, int pattern, uint64_t *rs) {
    for (uint64_t i = 0; i < n; i++) {
        switch (pattern) {
        case 0: w[i] = npuc_test_randn(rs) * 0.05f; break;
        case 1: w[i] = 0.0f; break;                                    /* all zero */
        case 2: w[i] = 0.37f; break;                                   /* constant */
        case 3: w[i] = (i % 7 == 0) ? 1e30f * npuc_test_randf(rs) : npuc_test_randf(rs); break; /* huge range */
        case 4: w[i] = npuc_test_randf(rs) * 1e-39f; break;            /* subnormals */
        case 5: w[i] = (float)((int)(i % 11) - 5) * 0.5f; break;       /* exact ties */
        default: w[i] = -0.25f - npuc_test_randf(rs) * 0.01f; break;   /* all negative */
        }
    }
}

static void check_one(const npuc_tensor_info *t, const float *w, const npuc_quant_params *p, int threads) {
    npuc_quant_shape qs;
    assert_int_equal(npuc_quant_shape_of(ctx, t, p, &qs), NPUC_OK);
    refq r;
    ref_quantize(t, w, p, &r);
    assert_int_equal(qs.nscales, r.nscales);
    uint8_t *codes = malloc(t->numel + 1);
    float *sc = malloc(sizeof(float) * (qs.nscales + 1));
    int32_t *zp = malloc(sizeof(int32_t) * (qs.nscales + 1));
    float *deq = malloc(sizeof(float) * (t->numel + 1));
    npuc_error_stats es;
    npuc_ctx_set_threads(ctx, threads);
    assert_int_equal(npuc_quantize_tensor(ctx, t, w, p, codes, sc, zp, deq, &es), NPUC_OK);
    for (uint64_t g = 0; g < qs.nscales; g++) {
        if (sc[g] != r.scale[g] || zp[g] != r.zp[g])
            fail_msg("%s bits=%d sym=%d gran=%d: group %llu scale %.9g/%.9g zp %d/%d", t->name, p->bits,
                     p->symmetric, p->gran, (unsigned long long)g, sc[g], r.scale[g], zp[g], r.zp[g]);
        assert_true(isfinite(sc[g]) && (p->grid == NPUC_GRID_FULL ? sc[g] != 0 : sc[g] > 0));
    }
    for (uint64_t e = 0; e < t->numel; e++)
        if (codes[e] != r.codes[e] || memcmp(&deq[e], &r.deq[e], 4) != 0)
            fail_msg("%s bits=%d sym=%d gran=%d: element %llu code %d/%d deq %.9g/%.9g", t->name, p->bits,
                     p->symmetric, p->gran, (unsigned long long)e, codes[e], r.codes[e], deq[e], r.deq[e]);
    assert_int_equal(es.clipped, r.clipped);
    /* The SIMD kernels add short blocks of terms in float before double
     * (within 1e-6 relative of plain double sums, NPUC_QSUM_RTOL in
     * src/kernels/npuc_kernels.h); 1e-5 leaves room. */
    assert_close(es.sum_e2, r.sum_e2, 1e-5, 1e-300);
    assert_close(es.sum_w2, r.sum_w2, 1e-5, 1e-300);
    /* Dequantizing the codes gives the same floats. */
    float *back = malloc(sizeof(float) * (t->numel + 1));
    assert_int_equal(npuc_dequantize_tensor(ctx, t, p, codes, sc, zp, back), NPUC_OK);
    assert_memory_equal(back, deq, t->numel * sizeof(float));
    free(back);
    free(codes); free(sc); free(zp); free(deq);
    refq_free(&r);
    npuc_ctx_set_threads(ctx, 0);
}

/* Every scheme x granularity x bit width x layout x value pattern. */
static void test_against_reference(void **state) {
    (void)state;
    static const struct { const char *name; npuc_layout l; int rank; int64_t shape[4]; } CASES[] = {
        {"oi", NPUC_LAYOUT_OI, 2, {7, 33}},
        {"io", NPUC_LAYOUT_IO, 2, {33, 7}},
        {"oihw", NPUC_LAYOUT_OIHW, 4, {5, 3, 3, 3}},
        {"iohw", NPUC_LAYOUT_IOHW, 4, {3, 5, 2, 3}},
        {"hwio", NPUC_LAYOUT_HWIO, 4, {3, 3, 4, 6}},
        {"hwim", NPUC_LAYOUT_HWIM, 4, {3, 3, 5, 2}},
        {"single", NPUC_LAYOUT_OI, 2, {1, 1}},
        {"onerow", NPUC_LAYOUT_IO, 2, {1, 17}},
    };
    uint64_t rs = 7;
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
        npuc_tensor_info t;
        memset(&t, 0, sizeof t);
        t.name = CASES[c].name;
        t.dtype = NPUC_DTYPE_F32;
        t.rank = CASES[c].rank;
        t.layout = CASES[c].l;
        memcpy(t.shape, CASES[c].shape, sizeof CASES[c].shape);
        t.numel = 1;
        for (int d = 0; d < t.rank; d++) t.numel *= (uint64_t)t.shape[d];
        t.nbytes = t.numel * 4;
        float *w = malloc(sizeof(float) * t.numel);
        for (int pattern = 0; pattern < 7; pattern++) {
            fill(w, t.numel, pattern, &rs);
            for (int bits = 2; bits <= 8; bits++)
                for (int sym = 0; sym <= 1; sym++)
                    for (int gran = 0; gran <= 2; gran++) {
                        npuc_quant_params p = npuc_quant_params_defaults();
                        p.bits = bits;
                        p.symmetric = sym;
                        p.gran = (npuc_granularity)gran;
                        p.group_size = (uint32_t)(2 + (bits % 4) * 3); /* 2, 5, 8, 11 */
                        check_one(&t, w, &p, 1 + (bits & 1));
                    }
        }
        free(w);
    }
}

/* Mixed channels in one tensor: zero, constant, huge, subnormal, normal. */
static void test_edge_channels(void **state) {
    (void)state;
    npuc_tensor_info t = {.name = "edge", .dtype = NPUC_DTYPE_F32, .rank = 2, .shape = {5, 9},
                          .layout = NPUC_LAYOUT_OI, .numel = 45, .nbytes = 180};
    float w[45];
    uint64_t rs = 3;
    for (int i = 0; i < 9; i++) {
        w[i] = 0;
        w[9 + i] = -2.5f;
        w[18 + i] = (i == 4) ? 3e38f : npuc_test_randf(&rs);
        w[27 + i] = 1e-41f * (float)(i - 4);
        w[36 + i] = npuc_test_randn(&rs);
    }
    for (int bits = 2; bits <= 8; bits++)
        for (int sym = 0; sym <= 1; sym++) {
            npuc_quant_params p = npuc_quant_params_defaults();
            p.bits = bits;
            p.symmetric = sym;
            check_one(&t, w, &p, 2);
        }
    /* The all-zero channel: zero codes (or the zero point), exact zeros back. */
    npuc_quant_params p = npuc_quant_params_defaults();
    uint8_t codes[45];
    float sc[5], deq[45];
    int32_t zp[5];
    assert_int_equal(npuc_quantize_tensor(ctx, &t, w, &p, codes, sc, zp, deq, NULL), NPUC_OK);
    for (int i = 0; i < 9; i++) { assert_int_equal(codes[i], 0); assert_true(deq[i] == 0.0f); }
    /* The constant channel -2.5 is exact: -127 * (2.5/127). */
    for (int i = 9; i < 18; i++) assert_int_equal((int8_t)codes[i], -127);
}

/* A hand-worked case: symmetric 8-bit, amax 1.27 -> scale 0.01. */
static void test_hand_worked(void **state) {
    (void)state;
    npuc_tensor_info t = {.name = "h", .dtype = NPUC_DTYPE_F32, .rank = 2, .shape = {1, 5},
                          .layout = NPUC_LAYOUT_OI, .numel = 5, .nbytes = 20};
    float w[5] = {1.27f, -0.635f, 0.005f, 0.015f, 0.0f};
    npuc_quant_params p = npuc_quant_params_defaults();
    uint8_t codes[5];
    float sc[1];
    int32_t zp[1];
    assert_int_equal(npuc_quantize_tensor(ctx, &t, w, &p, codes, sc, zp, NULL, NULL), NPUC_OK);
    assert_true(sc[0] == 1.27f / 127.0f);
    float inv = 1.0f / sc[0];
    assert_int_equal((int8_t)codes[0], 127);
    assert_int_equal((int8_t)codes[1], (int)nearbyintf(-0.635f * inv)); /* -63.5 region */
    assert_int_equal((int8_t)codes[2], (int)nearbyintf(0.005f * inv));
    assert_int_equal((int8_t)codes[4], 0);
    /* Asymmetric 8-bit over [-1, 3]: scale 4/255, zero point round(255/4) = 64. */
    float a[4] = {-1.0f, 3.0f, 0.0f, 1.0f};
    npuc_tensor_info ta = {.name = "a", .dtype = NPUC_DTYPE_F32, .rank = 2, .shape = {1, 4},
                           .layout = NPUC_LAYOUT_OI, .numel = 4, .nbytes = 16};
    p.symmetric = 0;
    assert_int_equal(npuc_quantize_tensor(ctx, &ta, a, &p, codes, sc, zp, NULL, NULL), NPUC_OK);
    assert_true(sc[0] == (float)(4.0 / 255.0));
    assert_int_equal(zp[0], 64);
    assert_int_equal(codes[0], 0);   /* -1/scale = -63.75 -> -64, +64 = 0 */
    assert_int_equal(codes[1], 255); /* 191.25 -> 191 + 64 = 255 */
    assert_int_equal(codes[2], 64);
}

static void test_bad_values_and_params(void **state) {
    (void)state;
    npuc_tensor_info t = {.name = "bad.weight", .dtype = NPUC_DTYPE_F32, .rank = 2, .shape = {2, 3},
                          .layout = NPUC_LAYOUT_OI, .numel = 6, .nbytes = 24};
    float w[6] = {1, NAN, 3, INFINITY, -INFINITY, 0};
    uint8_t codes[6];
    float sc[2];
    int32_t zp[2];
    npuc_quant_params p = npuc_quant_params_defaults();
    assert_int_equal(npuc_quantize_tensor(ctx, &t, w, &p, codes, sc, zp, NULL, NULL), NPUC_ERR_VALUE);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "bad.weight"));
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "3 NaN or Inf"));
    p.bits = 9;
    assert_int_equal(npuc_quantize_tensor(ctx, &t, w, &p, codes, sc, zp, NULL, NULL), NPUC_ERR_ARG);
    p.bits = 1;
    assert_int_equal(npuc_quantize_tensor(ctx, &t, w, &p, codes, sc, zp, NULL, NULL), NPUC_ERR_ARG);
    p = npuc_quant_params_defaults();
    p.axis = 2;
    assert_int_equal(npuc_quantize_tensor(ctx, &t, w, &p, codes, sc, zp, NULL, NULL), NPUC_ERR_ARG);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "axis 2"));
    p = npuc_quant_params_defaults();
    p.gran = NPUC_GRAN_GROUP;
    p.group_size = 1;
    assert_int_equal(npuc_quantize_tensor(ctx, &t, w, &p, codes, sc, zp, NULL, NULL), NPUC_ERR_ARG);
}

/* Bigger tensors: identical codes and bit-identical error sums for 1 and 2
 * threads, for the run path and the column path. */
static void test_thread_independence(void **state) {
    (void)state;
    uint64_t rs = 11;
    npuc_tensor_info ts[2] = {
        {.name = "big_oi", .dtype = NPUC_DTYPE_F32, .rank = 2, .shape = {300, 700}, .layout = NPUC_LAYOUT_OI},
        {.name = "big_io", .dtype = NPUC_DTYPE_F32, .rank = 2, .shape = {700, 300}, .layout = NPUC_LAYOUT_IO},
    };
    for (int k = 0; k < 2; k++) {
        npuc_tensor_info *t = &ts[k];
        t->numel = 210000;
        t->nbytes = t->numel * 4;
        float *w = malloc(sizeof(float) * t->numel);
        for (uint64_t i = 0; i < t->numel; i++) w[i] = npuc_test_randn(&rs);
        for (int gran = 0; gran <= 2; gran++) {
            npuc_quant_params p = npuc_quant_params_defaults();
            p.gran = (npuc_granularity)gran;
            p.group_size = 64;
            p.bits = 4;
            uint8_t *c1 = malloc(t->numel), *c2 = malloc(t->numel);
            float s1[64000], s2[64000];
            int32_t z1[64000], z2[64000];
            npuc_error_stats e1, e2;
            npuc_ctx_set_threads(ctx, 1);
            assert_int_equal(npuc_quantize_tensor(ctx, t, w, &p, c1, s1, z1, NULL, &e1), NPUC_OK);
            npuc_ctx_set_threads(ctx, 2);
            assert_int_equal(npuc_quantize_tensor(ctx, t, w, &p, c2, s2, z2, NULL, &e2), NPUC_OK);
            assert_memory_equal(c1, c2, t->numel);
            assert_true(e1.sum_e2 == e2.sum_e2 && e1.sum_w2 == e2.sum_w2 && e1.max_abs == e2.max_abs);
            free(c1); free(c2);
            check_one(t, w, &p, 2);
        }
        free(w);
    }
    npuc_ctx_set_threads(ctx, 0);
}

/* The grouped minmax path (a channel's groups of 32..256 contiguous:
 * minmax_groups, range_params, quant_groups batch by batch): channels
 * longer than a batch (4096 values) and than a chunk (65536) with a shorter
 * last group, every width, symmetric, asymmetric and the full grid, every
 * value pattern, against the independent reference; codes and error sums
 * identical for 1 and 2 threads. */
static void test_grouped_minmax(void **state) {
    (void)state;
    const char *q = getenv("NPUC_TEST_QUICK");
    const int quick = q && *q && strcmp(q, "0") != 0;
    static const uint32_t gs[] = {32, 64, 128, 256};
    uint64_t rs = 23;
    npuc_tensor_info t = {.name = "grouped", .dtype = NPUC_DTYPE_F32, .rank = 2, .shape = {3, 8467},
                          .layout = NPUC_LAYOUT_OI};
    t.numel = 3 * 8467;
    t.nbytes = t.numel * 4;
    float *w = malloc(sizeof(float) * t.numel);
    static const int quick_patterns[] = {0, 1, 3, 5}; /* normal, all zero, huge range, ties */
    for (int pi = 0; pi < (quick ? 4 : 7); pi++) {
        fill(w, t.numel, quick ? quick_patterns[pi] : pi, &rs);
        for (size_t gi = 0; gi < sizeof gs / sizeof gs[0]; gi += quick ? 3 : 1)
            for (int bits = 2; bits <= 8; bits += quick ? 3 : 1)
                for (int scheme = 0; scheme < 3; scheme++) {
                    npuc_quant_params p = npuc_quant_params_defaults();
                    p.bits = bits;
                    p.symmetric = scheme > 0;
                    p.grid = scheme == 2 ? NPUC_GRID_FULL : NPUC_GRID_RESTRICTED;
                    p.gran = NPUC_GRAN_GROUP;
                    p.group_size = gs[gi];
                    check_one(&t, w, &p, 1 + (int)((gi + (size_t)bits) & 1));
                }
    }
    free(w);
    /* Across a chunk boundary, 1 and 2 threads. */
    npuc_tensor_info b = {.name = "grouped_big", .dtype = NPUC_DTYPE_F32, .rank = 2, .shape = {2, 69669},
                          .layout = NPUC_LAYOUT_OI};
    b.numel = 2 * 69669;
    b.nbytes = b.numel * 4;
    w = malloc(sizeof(float) * b.numel);
    for (uint64_t i = 0; i < b.numel; i++) w[i] = npuc_test_randn(&rs);
    w[70000] = 0.0f; /* ties and a zero group among Gaussian groups */
    for (uint64_t i = 1024; i < 1024 + 256; i++) w[i] = 0.0f;
    for (uint64_t i = 5000; i < 5100; i++) w[i] = 0.5f * (float)((int)(i % 5) - 2);
    uint8_t *c1 = malloc(b.numel), *c2 = malloc(b.numel);
    float *s1 = malloc(sizeof(float) * 5000), *s2 = malloc(sizeof(float) * 5000);
    int32_t *z1 = malloc(sizeof(int32_t) * 5000), *z2 = malloc(sizeof(int32_t) * 5000);
    for (size_t gi = 0; gi < sizeof gs / sizeof gs[0]; gi += quick ? 3 : 1)
        for (int scheme = 0; scheme < 3; scheme++) {
            npuc_quant_params p = npuc_quant_params_defaults();
            p.bits = 4;
            p.symmetric = scheme > 0;
            p.grid = scheme == 2 ? NPUC_GRID_FULL : NPUC_GRID_RESTRICTED;
            p.gran = NPUC_GRAN_GROUP;
            p.group_size = gs[gi];
            npuc_error_stats e1, e2;
            npuc_ctx_set_threads(ctx, 1);
            assert_int_equal(npuc_quantize_tensor(ctx, &b, w, &p, c1, s1, z1, NULL, &e1), NPUC_OK);
            npuc_ctx_set_threads(ctx, 2);
            assert_int_equal(npuc_quantize_tensor(ctx, &b, w, &p, c2, s2, z2, NULL, &e2), NPUC_OK);
            const uint64_t ns = 2 * ((69669 + gs[gi] - 1) / gs[gi]);
            assert_memory_equal(c1, c2, b.numel);
            assert_memory_equal(s1, s2, ns * sizeof(float));
            assert_memory_equal(z1, z2, ns * sizeof(int32_t));
            assert_memory_equal(&e1, &e2, sizeof e1);
            check_one(&b, w, &p, 2);
        }
    npuc_ctx_set_threads(ctx, 0);
    free(w); free(c1); free(c2); free(s1); free(s2); free(z1); free(z2);
}

/* ------------------------------------------------ lowrank, then quantize
 * A small model: three linear weights and a bias; every weight is factored at
 * rank 3, then the artifact is quantized (nested entries, docs/artifact.md). */
static void write_lr_model(const char *path) {
    npuc_writer *w;
    static const struct { const char *name; int rank; int64_t shape[2]; } T[] = {
        {"a.weight", 2, {24, 16}}, {"a.bias", 1, {24}}, {"b.weight", 2, {20, 24}}, {"c.weight", 2, {12, 20}},
    };
    enum { NT = sizeof T / sizeof T[0] };
    uint64_t rs = 5;
    assert_int_equal(npuc_writer_open(ctx, path, NULL, &w), NPUC_OK);
    for (int i = 0; i < NT; i++) {
        npuc_tensor_info t;
        memset(&t, 0, sizeof t);
        t.name = T[i].name;
        t.dtype = NPUC_DTYPE_F32;
        t.rank = T[i].rank;
        memcpy(t.shape, T[i].shape, sizeof T[i].shape);
        assert_int_equal(npuc_writer_declare(w, &t), NPUC_OK);
    }
    for (int i = 0; i < NT; i++) {
        uint64_t n = (uint64_t)T[i].shape[0] * (uint64_t)(T[i].rank == 2 ? T[i].shape[1] : 1);
        float *f = malloc(sizeof(float) * n);
        for (uint64_t k = 0; k < n; k++) f[k] = npuc_test_randn(&rs);
        assert_int_equal(npuc_writer_write(w, f, n * sizeof(float)), NPUC_OK);
        free(f);
    }
    assert_int_equal(npuc_writer_finish(w), NPUC_OK);
}

static float *read_named(npuc_model *m, const char *name, const npuc_tensor_info **t) {
    size_t i;
    assert_int_equal(npuc_model_find(m, name, &i), 0);
    *t = npuc_model_tensor(m, i);
    float *f = malloc(sizeof(float) * (size_t)(*t)->numel);
    assert_int_equal(npuc_model_read_f32(ctx, m, i, f), NPUC_OK);
    return f;
}

static double record_bits(const npuc_summary *s, const char *name) {
    for (size_t i = 0; i < s->nrecords; i++)
        if (strcmp(s->records[i].name, name) == 0) return npuc_record_get(&s->records[i], "bits", -1);
    fail_msg("no record for %s", name);
    return -1;
}

/* The factors are quantized under their own names; the first and last layers
 * (both factors of each) stay at 8 bits below 8 bits; decompress gives the
 * product of the dequantized factors, which is exactly what decompressing the
 * --fake-quant artifact gives. */
static void test_lowrank_artifact(void **state) {
    (void)state;
    const char *src = npuc_test_path("nq_src.safetensors"), *lr = npuc_test_path("nq_lr.safetensors"),
               *q = npuc_test_path("nq_q.safetensors"), *fq = npuc_test_path("nq_fq.safetensors"),
               *dq = npuc_test_path("nq_dq.safetensors"), *dfq = npuc_test_path("nq_dfq.safetensors"),
               *qq = npuc_test_path("nq_qq.safetensors");
    write_lr_model(src);
    npuc_model *m, *ml, *mq, *mfq, *md;
    npuc_summary sum;
    assert_int_equal(npuc_model_open(ctx, src, NULL, &m), NPUC_OK);
    npuc_lowrank_opts lo = npuc_lowrank_opts_defaults();
    lo.params.rule = NPUC_RANK_FIXED;
    lo.params.rank = 3;
    assert_int_equal(npuc_lowrank_model(ctx, m, lr, &lo, &sum), NPUC_OK);
    assert_int_equal(sum.count[NPUC_ACTION_FACTORED], 3);
    npuc_summary_free(&sum);

    assert_int_equal(npuc_model_open(ctx, lr, NULL, &ml), NPUC_OK);
    npuc_quantize_opts o = npuc_quantize_opts_defaults();
    o.params.bits = 4;
    o.params.gran = NPUC_GRAN_GROUP;
    o.params.group_size = 8;
    assert_int_equal(npuc_quantize_model(ctx, ml, q, &o, &sum), NPUC_OK);
    assert_int_equal(sum.count[NPUC_ACTION_QUANTIZED], 6);
    assert_int_equal(record_bits(&sum, "a.weight.lr_a"), 8);
    assert_int_equal(record_bits(&sum, "a.weight.lr_b"), 8);
    assert_int_equal(record_bits(&sum, "b.weight.lr_a"), 4);
    assert_int_equal(record_bits(&sum, "b.weight.lr_b"), 4);
    assert_int_equal(record_bits(&sum, "c.weight.lr_a"), 8);
    assert_int_equal(record_bits(&sum, "c.weight.lr_b"), 8);
    npuc_summary_free(&sum);
    o.fake_quant = 1;
    assert_int_equal(npuc_quantize_model(ctx, ml, fq, &o, &sum), NPUC_OK);
    npuc_summary_free(&sum);

    /* Both decompress to the same bytes. */
    assert_int_equal(npuc_model_open(ctx, q, NULL, &mq), NPUC_OK);
    assert_int_equal(npuc_model_open(ctx, fq, NULL, &mfq), NPUC_OK);
    assert_int_equal(npuc_decompress_model(ctx, mq, dq, NULL), NPUC_OK);
    assert_int_equal(npuc_decompress_model(ctx, mfq, dfq, NULL), NPUC_OK);
    size_t n1, n2;
    void *b1 = npuc_test_read_file(dq, &n1), *b2 = npuc_test_read_file(dfq, &n2);
    assert_non_null(b1);
    assert_non_null(b2);
    assert_int_equal(n1, n2);
    assert_memory_equal(b1, b2, n1);
    free(b1);
    free(b2);

    /* The dense tensors are the products of the fake-quantized factors
     * (formed here in double), under the original names and shapes only. */
    assert_int_equal(npuc_model_open(ctx, dq, NULL, &md), NPUC_OK);
    assert_int_equal(npuc_model_count(md), npuc_model_count(m));
    static const char *W[] = {"a.weight", "b.weight", "c.weight"};
    for (size_t k = 0; k < 3; k++) {
        char na[32], nb[32];
        snprintf(na, sizeof na, "%s.lr_a", W[k]);
        snprintf(nb, sizeof nb, "%s.lr_b", W[k]);
        const npuc_tensor_info *ta, *tb, *to, *td;
        float *a = read_named(mfq, na, &ta), *b = read_named(mfq, nb, &tb);
        float *orig = read_named(m, W[k], &to), *d = read_named(md, W[k], &td);
        assert_int_equal(td->rank, 2);
        assert_int_equal(td->shape[0], to->shape[0]);
        assert_int_equal(td->shape[1], to->shape[1]);
        assert_int_equal(td->dtype, NPUC_DTYPE_F32);
        const int64_t M = to->shape[0], N = to->shape[1];
        double maxd = 0, maxp = 0;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double acc = 0;
                for (int r = 0; r < 3; r++) acc += (double)a[i * 3 + r] * b[r * N + j];
                maxd = fmax(maxd, fabs(acc - d[i * N + j]));
                maxp = fmax(maxp, fabs(acc));
            }
        assert_true(maxd <= 1e-5 * maxp);
        free(a); free(b); free(orig); free(d);
    }
    size_t idx;
    assert_int_not_equal(npuc_model_find(md, "b.weight.lr_a", &idx), 0);
    assert_int_not_equal(npuc_model_find(md, "b.weight.lr_a.scale", &idx), 0);

    /* Quantizing the quantized artifact again is refused, nothing written. */
    o.fake_quant = 0;
    assert_int_equal(npuc_quantize_model(ctx, mq, qq, &o, &sum), NPUC_ERR_ARG);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "decompress it first"));
    assert_false(npuc_test_exists(qq));
    npuc_model_close(md);
    npuc_model_close(mq);
    npuc_model_close(mfq);
    npuc_model_close(ml);
    npuc_model_close(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_worked),
        cmocka_unit_test(test_against_reference),
        cmocka_unit_test(test_edge_channels),
        cmocka_unit_test(test_bad_values_and_params),
        cmocka_unit_test(test_thread_independence),
        cmocka_unit_test(test_grouped_minmax),
        cmocka_unit_test(test_lowrank_artifact),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
