/*
 * test_qkernels.c - the quantization kernels and the bit packing.
 *
 * The reference kernels are checked independently: against hand-worked
 * cases (codes, dequantized values, clipped counts and error sums worked out
 * on paper) and against a double-precision reimplementation written here for
 * random data.  The AVX2 kernels are then checked against the reference over
 * odd sizes, edge values, every code width 2..8 (symmetric and asymmetric)
 * and unaligned pointers: codes, dequantized floats, clipped counts, max_abs
 * and min/max are bit-identical; the four error sums agree within
 * QSUM_RTOL (npuc_kernels.h states the bound: the fast kernels add short
 * blocks in float).  Without AVX2 those tests
 * are skipped.
 */
#define _GNU_SOURCE /* feenableexcept */
#include "testutil.h"

#include <fenv.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/npuc_kernels.h"

/* Relative tolerance of the fast kernels' error sums against the reference:
 * the bound npuc_kernels.h states (float block sums of at most 16 terms per
 * lane, then double). */
#define QSUM_RTOL NPUC_QSUM_RTOL
/* The reference against the double reimplementation here: the same double
 * terms added in the same order, up to the compiler's contraction of x*x+s. */
#define REF_RTOL 1e-12

#define N(a) (sizeof(a) / sizeof((a)[0]))

static const size_t k_sizes[] = {0, 1, 3, 7, 15, 17, 31, 33, 127, 1023, 4099};

static const npuc_kernel_table *ref(void) { return npuc_kernels_ref(); }

/* The fast tables under test, one test entry each: the name in the entry's
 * initial state picks the table. */
static const npuc_kernel_table *fast_table(const char *name) {
    return strcmp(name, "avx512") == 0 ? npuc_kernels_avx512() : npuc_kernels_avx2();
}

/* The table named by the test's state, or skips the test when the CPU or
 * build lacks it. */
#define REQUIRE_FAST(t, state)                                                           \
    const npuc_kernel_table *t = fast_table((const char *)*(state));                     \
    do {                                                                                 \
        if (!t) {                                                                        \
            print_message("[  SKIPPED ] no %s on this machine or build\n",              \
                          (const char *)*(state));                                       \
            skip();                                                                      \
        }                                                                                \
    } while (0)

/* Buffers offset by one element from malloc's alignment, so the kernels see
 * pointers that are not 32-byte (nor 16-byte) aligned. */
typedef struct {
    void *base;
} ubuf;
static float *ualloc_f(ubuf *b, size_t n) {
    b->base = calloc(n + 2, sizeof(float));
    assert_non_null(b->base);
    return (float *)b->base + 1;
}
static int32_t *ualloc_i(ubuf *b, size_t n) {
    b->base = calloc(n + 2, sizeof(int32_t));
    assert_non_null(b->base);
    return (int32_t *)b->base + 1;
}
static uint8_t *ualloc_b(ubuf *b, size_t n) {
    b->base = calloc(n + 2, 1);
    assert_non_null(b->base);
    return (uint8_t *)b->base + 1;
}

static int same_bits_f(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static void assert_sums_equalish(const npuc_qsums *got, const npuc_qsums *want) {
    assert_int_equal(got->clipped, want->clipped);
    assert_true(memcmp(&got->max_abs, &want->max_abs, sizeof(double)) == 0);
    assert_close(got->sum_w2, want->sum_w2, QSUM_RTOL, 0.0);
    assert_close(got->sum_e2, want->sum_e2, QSUM_RTOL, 0.0);
    assert_close(got->sum_wd, want->sum_wd, QSUM_RTOL, 0.0);
    assert_close(got->sum_d2, want->sum_d2, QSUM_RTOL, 0.0);
}

/* ------------------------------------------------------------ test data */

enum {
    DATA_GAUSS,
    DATA_UNIFORM,
    DATA_ZEROS,    /* +0 and -0 */
    DATA_CONST,    /* one value repeated */
    DATA_HUGE,     /* +-1e30 among ordinary values */
    DATA_SUBNORM,  /* subnormal floats */
    DATA_TIES,     /* x * inv_scale lands exactly on k + 0.5 */
    DATA_NONFINITE, /* NaN and +-Inf sprinkled in */
    DATA_NAN        /* NaN sprinkled in, no Inf (so max_abs stays finite) */
};
#define DATA_KINDS 9

/* Fills x[0..n) with data of the given kind.  For DATA_TIES the caller uses
 * scale 0.25, a power of two, so x * 4 is exact. */
static void fill(float *x, size_t n, int kind, uint64_t *rng) {
    for (size_t i = 0; i < n; i++) {
        float v = npuc_test_randn(rng);
        switch (kind) {
        case DATA_UNIFORM: v = npuc_test_randf(rng) * 3.0f; break;
        case DATA_ZEROS: v = (npuc_test_rand(rng) & 1) ? -0.0f : 0.0f; break;
        case DATA_CONST: v = 0.37f; break;
        case DATA_HUGE:
            if (i % 3 == 0) v = (npuc_test_rand(rng) & 1) ? 1e30f : -1e30f;
            break;
        case DATA_SUBNORM: v = npuc_test_randf(rng) * 1e-39f; break;
        case DATA_TIES: {
            const int k = (int)(npuc_test_rand(rng) % 301) - 150;
            v = ((float)k + 0.5f) * 0.25f;
            break;
        }
        case DATA_NONFINITE: {
            static const float odd[] = {NAN, INFINITY, -INFINITY};
            if (i % 5 == 2) v = odd[npuc_test_rand(rng) % 3];
            break;
        }
        case DATA_NAN:
            if (i % 5 == 2) v = NAN;
            break;
        default: break;
        }
        x[i] = v;
    }
}

/* A per-tensor scale as a pass would derive it from the data's finite
 * range; symmetric ranges have zp 0, asymmetric ones a zp in [qmin, qmax]. */
static void pick_scale(const float *x, size_t n, int kind, int sym, int32_t qmin, int32_t qmax,
                       float *scale, int32_t *zp) {
    if (kind == DATA_TIES) {
        *scale = 0.25f;
        *zp = sym ? 0 : (qmin + qmax + 1) / 2;
        return;
    }
    if (sym == 2) {
        /* The full grid (ggml's Q4_0), written here from its definition: the
         * first value of largest magnitude, with its sign, maps to qmin. */
        float amax = 0.0f, m = 0.0f;
        for (size_t i = 0; i < n; i++)
            if (isfinite(x[i]) && fabsf(x[i]) > amax) amax = fabsf(x[i]), m = x[i];
        *scale = kind == DATA_TIES ? -0.25f : m / (float)qmin;
        *zp = 0;
        if (!(fabsf(*scale) > 0.0f)) *scale = 1.0f;
        return;
    }
    float lo, hi;
    ref()->minmax(x, n, &lo, &hi);
    if (sym) {
        const float amax = fmaxf(fabsf(lo), fabsf(hi));
        *scale = amax > 0.0f ? amax / (float)qmax : 1.0f;
        *zp = 0;
    } else {
        lo = fminf(lo, 0.0f);
        hi = fmaxf(hi, 0.0f);
        *scale = hi > lo ? (hi - lo) / (float)(qmax - qmin) : 1.0f;
        long z = qmin - lrintf(lo / *scale);
        *zp = (int32_t)(z < qmin ? qmin : z > qmax ? qmax : z);
    }
    if (!(*scale > 0.0f)) *scale = 1.0f;
}

/* sym: 0 asymmetric, 1 symmetric restricted, 2 symmetric full grid. */
static void qrange(int bits, int sym, int32_t *qmin, int32_t *qmax) {
    if (sym) {
        *qmax = (1 << (bits - 1)) - 1;
        *qmin = sym == 2 ? -*qmax - 1 : -*qmax;
    } else {
        *qmin = 0;
        *qmax = (1 << bits) - 1;
    }
}

/* ------------------------------------------- reference, independent checks */

/* The full symmetric grid at 4 bits, worked on paper: the first value of
 * largest magnitude is +1.0, so scale = 1.0 / -8 = -0.125 (inverse -8).
 * x * -8 = -8, 4, -2.4, 8, -0.5, -7.5 round half-even to -8, 4, -2, 8 (past
 * the top code: clipped to 7), -0 and -8; dequantized q * -0.125. */
static void test_ref_hand_full_grid(void **state) {
    (void)state;
    const float x[] = {1.0f, -0.5f, 0.3f, -1.0f, 0.0625f, 0.9375f};
    const int8_t want_q[] = {-8, 4, -2, 7, 0, -8};
    const float want_d[] = {1.0f, -0.5f, 0.25f, -0.875f, 0.0f, 1.0f};
    int32_t qmin, qmax;
    qrange(4, 2, &qmin, &qmax);
    assert_int_equal(qmin, -8);
    assert_int_equal(qmax, 7);
    uint8_t c[6];
    float d[6];
    npuc_qsums s;
    memset(&s, 0, sizeof s);
    ref()->quant_run(x, 6, -0.125f, -8.0f, 0, qmin, qmax, c, d, &s);
    for (int i = 0; i < 6; i++) {
        assert_int_equal((int8_t)c[i], want_q[i]);
        assert_true(d[i] == want_d[i]);
    }
    assert_int_equal(s.clipped, 1);
    assert_true(s.max_abs == 0.125);
}

static void test_ref_hand_symmetric(void **state) {
    (void)state;
    /* scale 0.5 (inv 2), int8 symmetric.  x * 2 = 0.48, 0.5, 1.5, -0.5, 200,
     * 2.5, -3.5 round half to even to 0, 0, 2, -0, 200 (clipped to 127), 2, -4. */
    const float x[] = {0.24f, 0.25f, 0.75f, -0.25f, 100.0f, 1.25f, -1.75f};
    const uint8_t want_codes[] = {0, 0, 2, 0, 127, 2, 0xFC};
    const float want_deq[] = {0.0f, 0.0f, 1.0f, 0.0f, 63.5f, 1.0f, -2.0f};
    uint8_t codes[N(x)];
    float deq[N(x)];
    npuc_qsums s = {0};
    ref()->quant_run(x, N(x), 0.5f, 2.0f, 0, -127, 127, codes, deq, &s);
    assert_memory_equal(codes, want_codes, N(x));
    for (size_t i = 0; i < N(x); i++) assert_true(same_bits_f(deq[i], want_deq[i]));

    /* e = deq - x = -a, -0.25, 0.25, 0.25, -36.5, -0.25, -0.25 with a = 0.24f. */
    const double a = (double)0.24f;
    assert_int_equal(s.clipped, 1);
    assert_close(s.sum_w2, a * a + 0.0625 + 0.5625 + 0.0625 + 10000.0 + 1.5625 + 3.0625, 1e-15, 0);
    assert_close(s.sum_e2, a * a + 5 * 0.0625 + 1332.25, 1e-15, 0);
    assert_close(s.sum_wd, 0.75 + 6350.0 + 1.25 + 3.5, 1e-15, 0);
    assert_close(s.sum_d2, 1.0 + 4032.25 + 1.0 + 4.0, 1e-15, 0);
    assert_true(s.max_abs == 36.5);

    /* The sums are added into what *s already held, and deq may be NULL. */
    uint8_t codes2[N(x)];
    ref()->quant_run(x, N(x), 0.5f, 2.0f, 0, -127, 127, codes2, NULL, &s);
    assert_memory_equal(codes2, want_codes, N(x));
    assert_int_equal(s.clipped, 2);
    assert_close(s.sum_d2, 2 * 4038.25, 1e-15, 0);
}

static void test_ref_hand_asymmetric(void **state) {
    (void)state;
    /* 4-bit unsigned, zp 8, scale 0.5: x * 2 = -10, -8.5, 0, 7.5, 7 round to
     * -10, -8, 0, 8, 7; plus zp: -2 (clipped to 0), 0, 8, 16 (clipped to 15), 15. */
    const float x[] = {-5.0f, -4.25f, 0.0f, 3.75f, 3.5f};
    const uint8_t want_codes[] = {0, 0, 8, 15, 15};
    const float want_deq[] = {-4.0f, -4.0f, 0.0f, 3.5f, 3.5f};
    uint8_t codes[N(x)];
    float deq[N(x)];
    npuc_qsums s = {0};
    ref()->quant_run(x, N(x), 0.5f, 2.0f, 8, 0, 15, codes, deq, &s);
    assert_memory_equal(codes, want_codes, N(x));
    for (size_t i = 0; i < N(x); i++) assert_true(same_bits_f(deq[i], want_deq[i]));
    assert_int_equal(s.clipped, 2);
    assert_close(s.sum_w2, 25.0 + 18.0625 + 0.0 + 14.0625 + 12.25, 1e-15, 0);
    assert_close(s.sum_e2, 1.0 + 0.0625 + 0.0 + 0.0625 + 0.0, 1e-15, 0);
    assert_close(s.sum_wd, 20.0 + 17.0 + 0.0 + 13.125 + 12.25, 1e-15, 0);
    assert_close(s.sum_d2, 16.0 + 16.0 + 0.0 + 12.25 + 12.25, 1e-15, 0);
    assert_true(s.max_abs == 1.0);

    /* quant_vec with per-element parameters gives the same answer. */
    const float sc[] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f}, inv[] = {2.0f, 2.0f, 2.0f, 2.0f, 2.0f};
    const int32_t zp[] = {8, 8, 8, 8, 8};
    npuc_qsums s2 = {0};
    ref()->quant_vec(x, N(x), sc, inv, zp, 0, 15, codes, deq, &s2);
    assert_memory_equal(codes, want_codes, N(x));
    assert_memory_equal(&s2, &s, sizeof s);
}

/* NaN becomes qmin and +-Inf the nearest end, all counted as clipped; the
 * error terms of NaN are NaN (max_abs skips them), those of Inf infinite. */
static void test_ref_nonfinite_policy(void **state) {
    (void)state;
    const float x[] = {NAN, INFINITY, -INFINITY, 1.0f};
    uint8_t codes[4];
    float deq[4];
    npuc_qsums s = {0};
    ref()->quant_run(x, 1, 0.5f, 2.0f, 0, -7, 7, codes, deq, &s);
    assert_int_equal(codes[0], (uint8_t)-7);
    assert_true(deq[0] == -3.5f);
    assert_int_equal(s.clipped, 1);
    assert_true(isnan(s.sum_w2) && isnan(s.sum_e2));
    assert_true(s.max_abs == 0.0);

    memset(&s, 0, sizeof s);
    ref()->quant_run(x + 1, 3, 0.5f, 2.0f, 0, -7, 7, codes, deq, &s);
    assert_int_equal(codes[0], 7);
    assert_int_equal(codes[1], (uint8_t)-7);
    assert_int_equal(codes[2], 2);
    assert_int_equal(s.clipped, 2);
    assert_true(isinf(s.max_abs) && isinf(s.sum_w2));
}

/* Round half to even written out by hand, without nearbyintf/rintf. */
static double rne(double v) {
    const double f = floor(v), frac = v - f;
    if (frac > 0.5) return f + 1.0;
    if (frac < 0.5) return f;
    return fmod(f, 2.0) == 0.0 ? f : f + 1.0;
}

/* The quantization arithmetic of npuc_kernels.h in double: a product of two
 * floats is exact in double, so rounding it to float once reproduces the
 * float multiplies the kernels specify. */
static void quant_double(const float *x, size_t n, const float *scale, const float *inv,
                         const int32_t *zp, int32_t qmin, int32_t qmax, uint8_t *codes, float *deq,
                         npuc_qsums *s) {
    for (size_t i = 0; i < n; i++) {
        double v = (float)((double)x[i] * (double)inv[i]);
        if (!(v >= -16777216.0)) v = -16777216.0;
        if (v > 16777216.0) v = 16777216.0;
        int64_t q = (int64_t)rne(v) + zp[i];
        if (q < qmin || q > qmax) s->clipped++;
        if (q < qmin) q = qmin;
        if (q > qmax) q = qmax;
        codes[i] = (uint8_t)(q & 0xFF);
        deq[i] = (float)((double)(q - zp[i]) * (double)scale[i]);
        const double e = (double)deq[i] - (double)x[i];
        s->sum_w2 += (double)x[i] * x[i];
        s->sum_e2 += e * e;
        s->sum_wd += (double)x[i] * deq[i];
        s->sum_d2 += (double)deq[i] * deq[i];
        if (fabs(e) > s->max_abs) s->max_abs = fabs(e);
    }
}

static void test_ref_vs_double(void **state) {
    (void)state;
    uint64_t rng = 12345;
    const size_t n = 4099;
    float *x = malloc(n * sizeof *x), *sc = malloc(n * sizeof *sc), *inv = malloc(n * sizeof *inv);
    float *d_ref = malloc(n * sizeof(float)), *d_dbl = malloc(n * sizeof(float));
    int32_t *zp = malloc(n * sizeof *zp);
    uint8_t *c_ref = malloc(n), *c_dbl = malloc(n);
    assert_true(x && sc && inv && d_ref && d_dbl && zp && c_ref && c_dbl);
    for (int bits = 2; bits <= 8; bits++) {
        for (int sym = 0; sym <= 1; sym++) {
            for (int kind = 0; kind < DATA_KINDS; kind++) {
                if (kind == DATA_NONFINITE || kind == DATA_NAN) continue; /* pinned above */
                int32_t qmin, qmax, z;
                float scale;
                qrange(bits, sym, &qmin, &qmax);
                fill(x, n, kind, &rng);
                pick_scale(x, n, kind, sym, qmin, qmax, &scale, &z);
                for (size_t i = 0; i < n; i++) {
                    sc[i] = scale;
                    inv[i] = 1.0f / scale;
                    zp[i] = z;
                }
                npuc_qsums s_ref = {0}, s_dbl = {0};
                ref()->quant_run(x, n, scale, 1.0f / scale, z, qmin, qmax, c_ref, d_ref, &s_ref);
                quant_double(x, n, sc, inv, zp, qmin, qmax, c_dbl, d_dbl, &s_dbl);
                assert_memory_equal(c_ref, c_dbl, n);
                assert_memory_equal(d_ref, d_dbl, n * sizeof(float));
                assert_int_equal(s_ref.clipped, s_dbl.clipped);
                assert_true(s_ref.max_abs == s_dbl.max_abs);
                assert_close(s_ref.sum_w2, s_dbl.sum_w2, REF_RTOL, 0);
                assert_close(s_ref.sum_e2, s_dbl.sum_e2, REF_RTOL, 0);
                assert_close(s_ref.sum_wd, s_dbl.sum_wd, REF_RTOL, 0);
                assert_close(s_ref.sum_d2, s_dbl.sum_d2, REF_RTOL, 0);
            }
        }
    }
    free(x), free(sc), free(inv), free(d_ref), free(d_dbl), free(zp), free(c_ref), free(c_dbl);
}

static void test_ref_minmax_hand(void **state) {
    (void)state;
    float lo, hi;
    const float x[] = {3.0f, NAN, -2.0f, INFINITY, -INFINITY, 0.5f};
    assert_int_equal(ref()->minmax(x, N(x), &lo, &hi), 3);
    assert_true(lo == -2.0f && hi == 3.0f);

    const float only_bad[] = {NAN, INFINITY, -INFINITY};
    assert_int_equal(ref()->minmax(only_bad, N(only_bad), &lo, &hi), 3);
    assert_true(same_bits_f(lo, 0.0f) && same_bits_f(hi, 0.0f));

    assert_int_equal(ref()->minmax(x, 0, &lo, &hi), 0);
    assert_true(same_bits_f(lo, 0.0f) && same_bits_f(hi, 0.0f));

    /* A zero extreme is +0 whichever signed zero came first. */
    const float zeros[] = {-0.0f, 0.0f, -0.0f, 1.0f};
    assert_int_equal(ref()->minmax(zeros, N(zeros), &lo, &hi), 0);
    assert_true(same_bits_f(lo, 0.0f) && hi == 1.0f);

    /* minmax_cols over a 3x3 block with row stride 4 (the 4th float of each
     * row is padding that must be ignored). */
    const float blk[] = {1.0f, -1.0f, NAN, 99.0f, /**/ 2.0f, -3.0f, 5.0f, -99.0f,
                         /**/ 0.5f, INFINITY, 4.0f, 99.0f};
    float l[3] = {INFINITY, INFINITY, INFINITY}, h[3] = {-INFINITY, -INFINITY, -INFINITY};
    assert_int_equal(ref()->minmax_cols(blk, 3, 3, 4, l, h), 2);
    assert_true(l[0] == 0.5f && h[0] == 2.0f);
    assert_true(l[1] == -3.0f && h[1] == -1.0f);
    assert_true(l[2] == 4.0f && h[2] == 5.0f);
}

/* minmax_groups and range_params of the reference, by hand: per-group
 * results with NaN/Inf skipped and an all-non-finite group at 0, 0; the
 * three parameter formulas of quant.h worked out on paper. */
static void test_ref_groups_hand(void **state) {
    (void)state;
    const float x[] = {1.0f, -2.0f, NAN, 0.5f, /**/ NAN, INFINITY, -INFINITY, NAN,
                       /**/ -0.0f, 0.0f, -0.0f, -0.0f, /**/ 3.0f, 3.0f, -3.0f, 2.0f};
    float lo[4], hi[4];
    assert_int_equal(ref()->minmax_groups(x, 4, 4, lo, hi), 5);
    assert_true(lo[0] == -2.0f && hi[0] == 1.0f);
    assert_true(same_bits_f(lo[1], 0.0f) && same_bits_f(hi[1], 0.0f));
    assert_true(same_bits_f(lo[2], 0.0f) && same_bits_f(hi[2], 0.0f));
    assert_true(lo[3] == -3.0f && hi[3] == 3.0f);
    assert_int_equal(ref()->minmax_groups(x, 0, 4, lo, hi), 0);

    /* int4 symmetric [-1, 0.5]: s = 1/7; asymmetric uint8 [-1, 3]: s = 4/255
     * in double then float, zp = rint(1 / s) = rint(63.75) = 64; full grid
     * int4 [-1, 0.5]: m = -1, s = -1 / -8 = 0.125; [-0.5, 0.5] ties to the
     * positive end: s = 0.5 / -8; all-zero: FLT_MIN, zp 0. */
    const float l[] = {-1.0f, -1.0f, -0.0f}, h[] = {0.5f, 3.0f, 0.0f};
    float sc[3], iv[3];
    int32_t zp[3];
    ref()->range_params(l, h, 1, 4, 1, 0, sc, iv, zp);
    assert_true(sc[0] == 1.0f / 7.0f && iv[0] == 1.0f / sc[0] && zp[0] == 0);
    ref()->range_params(l + 1, h + 1, 1, 8, 0, 0, sc, iv, zp);
    assert_true(sc[0] == (float)(4.0 / 255.0) && zp[0] == 64);
    ref()->range_params(l, h, 1, 4, 1, 1, sc, iv, zp);
    assert_true(sc[0] == 0.125f && iv[0] == 8.0f && zp[0] == 0);
    const float tl = -0.5f, th = 0.5f;
    ref()->range_params(&tl, &th, 1, 4, 1, 1, sc, iv, zp);
    assert_true(sc[0] == -0.0625f);
    for (int sym = 0; sym <= 1; sym++)
        for (int full = 0; full <= sym; full++) {
            ref()->range_params(l + 2, h + 2, 1, 4, sym, full, sc, iv, zp);
            assert_true(sc[0] == FLT_MIN && iv[0] == 1.0f / FLT_MIN && zp[0] == 0);
        }
}

/* ------------------------------------------------------ fast versus ref */

static void check_quant(const npuc_kernel_table *fast, const float *x_src, size_t n, int kind,
                        int bits, int sym, uint64_t *rng) {
    int32_t qmin, qmax, zp0;
    float scale;
    qrange(bits, sym, &qmin, &qmax);
    pick_scale(x_src, n, kind, sym, qmin, qmax, &scale, &zp0);

    ubuf bx, bs, bi, bz, bc0, bc1, bd0, bd1;
    float *x = ualloc_f(&bx, n), *sc = ualloc_f(&bs, n), *inv = ualloc_f(&bi, n);
    int32_t *zp = ualloc_i(&bz, n);
    uint8_t *c_ref = ualloc_b(&bc0, n), *c_fast = ualloc_b(&bc1, n);
    float *d_ref = ualloc_f(&bd0, n), *d_fast = ualloc_f(&bd1, n);
    if (n) memcpy(x, x_src, n * sizeof *x);
    for (size_t i = 0; i < n; i++) {
        /* Per-element parameters: scales vary by up to 60 %, asymmetric zero
         * points are random in [qmin, qmax]. */
        sc[i] = kind == DATA_TIES ? scale : scale * (1.0f + 0.1f * (float)(i % 7));
        inv[i] = 1.0f / sc[i];
        zp[i] = sym ? 0 : qmin + (int32_t)(npuc_test_rand(rng) % (uint64_t)(qmax - qmin + 1));
    }

    /* Sums start non-zero to check that kernels add into them. */
    const npuc_qsums start = {1.0, 2.0, 3.0, 4.0, 0.125, 5};
    npuc_qsums s_ref = start, s_fast = start;
    ref()->quant_run(x, n, scale, 1.0f / scale, zp0, qmin, qmax, c_ref, d_ref, &s_ref);
    fast->quant_run(x, n, scale, 1.0f / scale, zp0, qmin, qmax, c_fast, d_fast, &s_fast);
    assert_memory_equal(c_fast, c_ref, n);
    assert_memory_equal(d_fast, d_ref, n * sizeof(float));
    assert_sums_equalish(&s_fast, &s_ref);

    /* deq == NULL: same codes and sums. */
    npuc_qsums s_nod = start;
    memset(c_fast, 0xAA, n);
    fast->quant_run(x, n, scale, 1.0f / scale, zp0, qmin, qmax, c_fast, NULL, &s_nod);
    assert_memory_equal(c_fast, c_ref, n);
    assert_memory_equal(&s_nod, &s_fast, sizeof s_nod);

    /* quant_run_hinted: the read-ahead changes nothing, whether the window
     * is absent, the run itself, another buffer or memory past the end of x
     * (which the kernel must never dereference), into codes that are 64-byte
     * aligned or not.  Both tables: results bit for bit those of their own
     * quant_run. */
    const float *windows[] = {NULL, x, d_ref, x + n, (const float *)(uintptr_t)4096};
    for (size_t wi = 0; wi < N(windows); wi++)
        for (int misalign = 0; misalign < 2; misalign++) {
            const npuc_kernel_table *tabs[] = {ref(), fast};
            const npuc_qhint h = {windows[wi], n + 4096};
            for (int ti = 0; ti < 2; ti++) {
                npuc_qsums s_plain = start, s_hint = start;
                uint8_t *c_plain = ti ? c_fast : c_ref;
                float *d_plain = ti ? d_fast : d_ref;
                uint8_t *c_al = aligned_alloc(64, (n + 64) / 64 * 64 + 64);
                ubuf bda;
                float *d_h = ualloc_f(&bda, n);
                assert_non_null(c_al);
                uint8_t *c_h = c_al + misalign;
                tabs[ti]->quant_run(x, n, scale, 1.0f / scale, zp0, qmin, qmax, c_plain, d_plain, &s_plain);
                tabs[ti]->quant_run_hinted(x, n, scale, 1.0f / scale, zp0, qmin, qmax, c_h,
                                           wi % 2 ? d_h : NULL, &s_hint, wi == 0 ? NULL : &h);
                assert_memory_equal(c_h, c_plain, n);
                if (wi % 2) assert_memory_equal(d_h, d_plain, n * sizeof(float));
                assert_memory_equal(&s_hint, &s_plain, sizeof s_hint);
                free(c_al), free(bda.base);
            }
        }

    /* quant_groups: runs of G values with the parameters of sc/inv/zp's
     * first ngroups entries (the first group's scale FLT_MIN, as an all-zero
     * group gets), against quant_run on each run in turn, the definition;
     * G not a multiple of 16 or above 256 takes the fallback. */
    static const size_t gs[] = {16, 32, 48, 64, 128, 256, 3, 272};
    const npuc_qhint hint = {x + n / 2, n}; /* reaches past x: never read */
    for (size_t gi = 0; gi < N(gs); gi++) {
        const size_t G = gs[gi], ng = n / G;
        if (ng == 0) continue;
        const float sc0 = sc[0], inv0 = inv[0];
        if (kind == DATA_ZEROS) sc[0] = FLT_MIN, inv[0] = 1.0f / FLT_MIN;
        npuc_qsums s_def = start, s_rg = start;
        s_fast = start;
        memset(c_fast, 0xAA, n);
        for (size_t g = 0; g < ng; g++)
            ref()->quant_run(x + g * G, G, sc[g], inv[g], zp[g], qmin, qmax, c_ref + g * G, d_ref + g * G,
                             &s_def);
        ref()->quant_groups(x, ng, G, sc, inv, zp, qmin, qmax, c_fast, d_fast, &s_rg, NULL);
        assert_memory_equal(c_fast, c_ref, ng * G);
        assert_memory_equal(d_fast, d_ref, ng * G * sizeof(float));
        assert_memory_equal(&s_rg, &s_def, sizeof s_rg);
        memset(c_fast, 0xAA, n);
        fast->quant_groups(x, ng, G, sc, inv, zp, qmin, qmax, c_fast, d_fast, &s_fast, &hint);
        assert_memory_equal(c_fast, c_ref, ng * G);
        assert_memory_equal(d_fast, d_ref, ng * G * sizeof(float));
        assert_sums_equalish(&s_fast, &s_def);
        npuc_qsums s_nodeq = start;
        memset(c_fast, 0xAA, n);
        fast->quant_groups(x, ng, G, sc, inv, zp, qmin, qmax, c_fast, NULL, &s_nodeq, NULL);
        assert_memory_equal(c_fast, c_ref, ng * G);
        assert_memory_equal(&s_nodeq, &s_fast, sizeof s_nodeq);
        sc[0] = sc0, inv[0] = inv0;
    }

    s_ref = start, s_fast = start;
    ref()->quant_vec(x, n, sc, inv, zp, qmin, qmax, c_ref, d_ref, &s_ref);
    fast->quant_vec(x, n, sc, inv, zp, qmin, qmax, c_fast, d_fast, &s_fast);
    assert_memory_equal(c_fast, c_ref, n);
    assert_memory_equal(d_fast, d_ref, n * sizeof(float));
    assert_sums_equalish(&s_fast, &s_ref);

    free(bx.base), free(bs.base), free(bi.base), free(bz.base);
    free(bc0.base), free(bc1.base), free(bd0.base), free(bd1.base);
}

static void test_fast_quant(void **state) {
    REQUIRE_FAST(fast, state);
    uint64_t rng = 777;
    float *x = malloc(4099 * sizeof *x);
    assert_non_null(x);
    for (size_t si = 0; si < N(k_sizes); si++)
        for (int kind = 0; kind < DATA_KINDS; kind++) {
            fill(x, k_sizes[si], kind, &rng);
            for (int bits = 2; bits <= 8; bits++)
                for (int sym = 0; sym <= 2; sym++) check_quant(fast, x, k_sizes[si], kind, bits, sym, &rng);
        }
    free(x);
}

/* Clipping now and then: a symmetric scale at 0.65 of the data's amax clips
 * a few per cent of Gaussian values, so runs of clean and clipped groups
 * alternate (the fast kernels hand runs of clipped groups to the exact
 * path together), at lengths that end in every kind of tail. */
static void test_fast_quant_sparse_clips(void **state) {
    REQUIRE_FAST(fast, state);
    uint64_t rng = 4242;
    const size_t sizes[] = {64, 100, 1024, 4099, 8192 + 48};
    for (size_t si = 0; si < N(sizes); si++) {
        const size_t n = sizes[si];
        ubuf bx, bc0, bc1, bd0, bd1;
        float *x = ualloc_f(&bx, n), *d_ref = ualloc_f(&bd0, n), *d_fast = ualloc_f(&bd1, n);
        uint8_t *c_ref = ualloc_b(&bc0, n), *c_fast = ualloc_b(&bc1, n);
        fill(x, n, DATA_GAUSS, &rng);
        float lo, hi;
        ref()->minmax(x, n, &lo, &hi);
        const float scale = 0.65f * fmaxf(-lo, hi) / 127.0f;
        for (int zp = 0; zp <= 1; zp++) {
            const int32_t z = zp ? 128 : 0, qmin = zp ? 0 : -127, qmax = zp ? 255 : 127;
            const float sc = scale;
            npuc_qsums s_ref = {0}, s_fast = {0};
            ref()->quant_run(x, n, sc, 1.0f / sc, z, qmin, qmax, c_ref, d_ref, &s_ref);
            fast->quant_run(x, n, sc, 1.0f / sc, z, qmin, qmax, c_fast, d_fast, &s_fast);
            assert_true(s_ref.clipped > 0 && s_ref.clipped < n / 4); /* some, not most */
            assert_memory_equal(c_fast, c_ref, n);
            assert_memory_equal(d_fast, d_ref, n * sizeof(float));
            assert_sums_equalish(&s_fast, &s_ref);
        }
        free(bx.base), free(bc0.base), free(bc1.base), free(bd0.base), free(bd1.base);
    }
}

/* Parameters a pass should never produce still give identical results:
 * inv_scale = +Inf (scale 0), a zero point beyond +-2^30 (the SIMD kernels'
 * scalar path), qmin > qmax. */
static void test_fast_quant_odd_params(void **state) {
    REQUIRE_FAST(fast, state);
    uint64_t rng = 99;
    const size_t n = 1023;
    ubuf bx, bc0, bc1, bd0, bd1, bs, bi, bz;
    float *x = ualloc_f(&bx, n), *d_ref = ualloc_f(&bd0, n), *d_fast = ualloc_f(&bd1, n);
    float *sc = ualloc_f(&bs, n), *inv = ualloc_f(&bi, n);
    int32_t *zp = ualloc_i(&bz, n);
    uint8_t *c_ref = ualloc_b(&bc0, n), *c_fast = ualloc_b(&bc1, n);
    fill(x, n, DATA_GAUSS, &rng);
    x[5] = 0.0f;
    x[6] = -0.0f;
    const struct {
        float scale, inv;
        int32_t zp, qmin, qmax;
    } cases[] = {
        {0.0f, INFINITY, 0, -127, 127},
        {0.01f, 100.0f, INT32_MAX, -127, 127},
        {0.01f, 100.0f, INT32_MIN, 0, 255},
        {0.01f, 100.0f, (1 << 30), 0, 255},
        {0.01f, 100.0f, -(1 << 30), 0, 255},
        {0.01f, 100.0f, 0, INT32_MIN, INT32_MAX},
        {0.01f, 100.0f, 3, 10, -10},
    };
    for (size_t k = 0; k < N(cases); k++) {
        npuc_qsums s_ref = {0}, s_fast = {0};
        ref()->quant_run(x, n, cases[k].scale, cases[k].inv, cases[k].zp, cases[k].qmin,
                         cases[k].qmax, c_ref, d_ref, &s_ref);
        fast->quant_run(x, n, cases[k].scale, cases[k].inv, cases[k].zp, cases[k].qmin,
                        cases[k].qmax, c_fast, d_fast, &s_fast);
        assert_memory_equal(c_fast, c_ref, n);
        assert_memory_equal(d_fast, d_ref, n * sizeof(float));
        assert_sums_equalish(&s_fast, &s_ref);

        /* quant_vec with a few lanes holding the odd zero point. */
        for (size_t i = 0; i < n; i++) {
            sc[i] = cases[k].scale;
            inv[i] = cases[k].inv;
            zp[i] = (i % 13 == 0) ? cases[k].zp : 1;
        }
        s_ref = (npuc_qsums){0}, s_fast = (npuc_qsums){0};
        ref()->quant_vec(x, n, sc, inv, zp, cases[k].qmin, cases[k].qmax, c_ref, d_ref, &s_ref);
        fast->quant_vec(x, n, sc, inv, zp, cases[k].qmin, cases[k].qmax, c_fast, d_fast, &s_fast);
        assert_memory_equal(c_fast, c_ref, n);
        assert_memory_equal(d_fast, d_ref, n * sizeof(float));
        assert_sums_equalish(&s_fast, &s_ref);
    }
    free(bx.base), free(bc0.base), free(bc1.base), free(bd0.base), free(bd1.base);
    free(bs.base), free(bi.base), free(bz.base);
}

/* quant_rows against the reference (quant_vec row after row): blocks with a
 * row stride beyond the row (the gap must stay untouched), every code width,
 * per-column scales and zero points, edge data, and parameters a pass never
 * produces (zero points beyond 2^16, inconsistent inverse scales). */
static void test_fast_quant_rows(void **state) {
    REQUIRE_FAST(fast, state);
    static const size_t cols_list[] = {1, 7, 8, 33, 100, 1031};
    static const size_t rows_list[] = {0, 1, 3, 6};
    uint64_t rng = 4711;
    for (size_t ci = 0; ci < N(cols_list); ci++)
        for (size_t ri = 0; ri < N(rows_list); ri++)
            for (int kind = 0; kind < DATA_KINDS; kind++)
                for (int bits = 2; bits <= 8; bits += 3)
                    for (int sym = 0; sym <= 2; sym++)
                        for (int odd = 0; odd <= 2; odd++) {
                            const size_t cols = cols_list[ci], rows = rows_list[ri], ld = cols + 5;
                            const size_t total = rows * ld + 1;
                            int32_t qmin, qmax, zp0;
                            float scale;
                            qrange(bits, sym, &qmin, &qmax);
                            ubuf bx, bs, bi, bz, bc0, bc1, bd0, bd1;
                            float *x = ualloc_f(&bx, total), *sc = ualloc_f(&bs, cols);
                            float *inv = ualloc_f(&bi, cols);
                            int32_t *zp = ualloc_i(&bz, cols);
                            uint8_t *c_ref = ualloc_b(&bc0, total), *c_fast = ualloc_b(&bc1, total);
                            float *d_ref = ualloc_f(&bd0, total), *d_fast = ualloc_f(&bd1, total);
                            fill(x, total, kind, &rng);
                            pick_scale(x, total, kind, sym, qmin, qmax, &scale, &zp0);
                            for (size_t c = 0; c < cols; c++) {
                                sc[c] = kind == DATA_TIES ? scale : scale * (1.0f + 0.05f * (float)(c % 5));
                                inv[c] = 1.0f / sc[c];
                                zp[c] = sym ? 0 : qmin + (int32_t)(npuc_test_rand(&rng) % (uint64_t)(qmax - qmin + 1));
                                if (odd == 1 && c % 11 == 3) zp[c] = 1 << 20;
                                if (odd == 2 && c % 9 == 4) inv[c] *= 1.001f;
                            }
                            memset(c_ref, 0x5A, total), memset(c_fast, 0x5A, total);
                            for (size_t i = 0; i < total; i++) d_ref[i] = d_fast[i] = -7.0f;
                            const npuc_qsums start = {1.0, 2.0, 3.0, 4.0, 0.125, 5};
                            npuc_qsums s_ref = start, s_fast = start;
                            ref()->quant_rows(x, rows, cols, ld, sc, inv, zp, qmin, qmax, c_ref, d_ref, &s_ref);
                            fast->quant_rows(x, rows, cols, ld, sc, inv, zp, qmin, qmax, c_fast, d_fast, &s_fast);
                            assert_memory_equal(c_fast, c_ref, total);
                            assert_memory_equal(d_fast, d_ref, total * sizeof(float));
                            assert_sums_equalish(&s_fast, &s_ref);
                            npuc_qsums s_nod = start;
                            fast->quant_rows(x, rows, cols, ld, sc, inv, zp, qmin, qmax, c_fast, NULL, &s_nod);
                            assert_memory_equal(c_fast, c_ref, total);
                            assert_memory_equal(&s_nod, &s_fast, sizeof s_nod);
                            free(bx.base), free(bs.base), free(bi.base), free(bz.base);
                            free(bc0.base), free(bc1.base), free(bd0.base), free(bd1.base);
                        }
}

/* Data whose float error terms would overflow or underflow (|x| ~ 1e-25:
 * x*x is below the float range; |x| ~ 1e25: x*x above it), alone and mixed
 * with ordinary values.  The fast kernels must notice (MXCSR flags) and give
 * the reference's results: without that, sum_w2 would be 0 or Inf. */
static void test_fast_quant_float_range(void **state) {
    REQUIRE_FAST(fast, state);
    uint64_t rng = 2024;
    const size_t n = 1031;
    ubuf bx, bc0, bc1, bd0, bd1;
    float *x = ualloc_f(&bx, n), *d_ref = ualloc_f(&bd0, n), *d_fast = ualloc_f(&bd1, n);
    uint8_t *c_ref = ualloc_b(&bc0, n), *c_fast = ualloc_b(&bc1, n);
    static const float mags[] = {1e-25f, 1e25f, 1e-19f, 3e18f};
    for (size_t mi = 0; mi < N(mags); mi++)
        for (int mixed = 0; mixed <= 1; mixed++) {
            for (size_t i = 0; i < n; i++) {
                x[i] = npuc_test_randn(&rng) * mags[mi];
                if (mixed && i % 3) x[i] = npuc_test_randn(&rng) * 0.05f;
            }
            for (int sym = 0; sym <= 1; sym++) {
                int32_t qmin, qmax, zp;
                float scale;
                qrange(8, sym, &qmin, &qmax);
                pick_scale(x, n, DATA_GAUSS, sym, qmin, qmax, &scale, &zp);
                npuc_qsums s_ref = {0}, s_fast = {0};
                ref()->quant_run(x, n, scale, 1.0f / scale, zp, qmin, qmax, c_ref, d_ref, &s_ref);
                fast->quant_run(x, n, scale, 1.0f / scale, zp, qmin, qmax, c_fast, d_fast, &s_fast);
                assert_memory_equal(c_fast, c_ref, n);
                assert_memory_equal(d_fast, d_ref, n * sizeof(float));
                assert_sums_equalish(&s_fast, &s_ref);
                assert_true(s_fast.sum_w2 > 0 && isfinite(s_fast.sum_w2));
            }
        }
    free(bx.base), free(bc0.base), free(bc1.base), free(bd0.base), free(bd1.base);
}

/* The fast kernels read and clear the overflow/underflow flags for their own
 * use; the caller's flags are as if the kernel had not touched them: a flag
 * raised before the call is still raised, and ordinary data raises none. */
static void test_fast_fenv(void **state) {
    REQUIRE_FAST(fast, state);
    uint64_t rng = 5;
    const size_t n = 4099;
    float *x = malloc(n * sizeof *x), *deq = malloc(n * sizeof *deq);
    uint8_t *codes = malloc(n);
    assert_true(x && deq && codes);
    fill(x, n, DATA_GAUSS, &rng);
    float lo, hi;
    ref()->minmax(x, n, &lo, &hi);
    const float scale = fmaxf(fabsf(lo), fabsf(hi)) / 127.0f;
    npuc_qsums s = {0};
    feclearexcept(FE_ALL_EXCEPT);
    fast->quant_run(x, n, scale, 1.0f / scale, 0, -127, 127, codes, deq, &s);
    assert_false(fetestexcept(FE_UNDERFLOW | FE_OVERFLOW));
    feraiseexcept(FE_UNDERFLOW | FE_OVERFLOW);
    fast->quant_run(x, n, scale, 1.0f / scale, 0, -127, 127, codes, deq, &s);
    assert_true(fetestexcept(FE_UNDERFLOW) && fetestexcept(FE_OVERFLOW));
    feclearexcept(FE_ALL_EXCEPT);

    /* With underflow and overflow trapping, data whose float squares would
     * underflow (the reference squares in double) quantizes without a trap
     * and with the reference's results. */
    for (size_t i = 0; i < n; i++) x[i] *= 1e-24f;
    ref()->minmax(x, n, &lo, &hi);
    const float s2 = fmaxf(fabsf(lo), fabsf(hi)) / 127.0f;
    uint8_t *c_ref = malloc(n);
    float *d_ref = malloc(n * sizeof *d_ref);
    assert_true(c_ref && d_ref);
    npuc_qsums s_ref = {0}, s_fast = {0};
    ref()->quant_run(x, n, s2, 1.0f / s2, 0, -127, 127, c_ref, d_ref, &s_ref);
    feclearexcept(FE_ALL_EXCEPT);
    const int was = feenableexcept(FE_UNDERFLOW | FE_OVERFLOW);
    fast->quant_run(x, n, s2, 1.0f / s2, 0, -127, 127, codes, deq, &s_fast);
    feclearexcept(FE_ALL_EXCEPT);
    fedisableexcept(FE_ALL_EXCEPT & ~was);
    assert_memory_equal(codes, c_ref, n);
    assert_memory_equal(deq, d_ref, n * sizeof(float));
    assert_sums_equalish(&s_fast, &s_ref);
    free(x), free(deq), free(codes), free(c_ref), free(d_ref);
}

static void test_fast_minmax(void **state) {
    REQUIRE_FAST(fast, state);
    uint64_t rng = 4242;
    ubuf b;
    float *x = ualloc_f(&b, 4099);
    for (size_t si = 0; si < N(k_sizes); si++) {
        const size_t n = k_sizes[si];
        for (int kind = 0; kind <= DATA_KINDS + 2; kind++) {
            if (kind < DATA_KINDS) {
                fill(x, n, kind, &rng);
            } else if (kind == DATA_KINDS) { /* nothing finite */
                for (size_t i = 0; i < n; i++) x[i] = (i & 1) ? NAN : -INFINITY;
            } else if (kind == DATA_KINDS + 1) { /* one finite value, last */
                for (size_t i = 0; i < n; i++) x[i] = INFINITY;
                if (n) x[n - 1] = -0.0f;
            } else { /* extremes in the scalar tail */
                fill(x, n, DATA_GAUSS, &rng);
                if (n) x[n - 1] = 1e20f;
                if (n > 1) x[n - 2] = -1e20f;
            }
            float lr, hr, lf, hf;
            const uint64_t br = ref()->minmax(x, n, &lr, &hr);
            const uint64_t bf = fast->minmax(x, n, &lf, &hf);
            assert_int_equal(bf, br);
            assert_true(same_bits_f(lf, lr));
            assert_true(same_bits_f(hf, hr));
        }
    }
    free(b.base);
}

/* minmax_groups: every group size the grouped quantizer uses (and odd
 * ones), batch counts around the AVX-512 version's 16 groups, every data
 * kind (ties, signed zeros, NaN/Inf), an all-non-finite group, an all-zero
 * group and a NaN in one group of an otherwise finite batch; unaligned. */
static void test_fast_minmax_groups(void **state) {
    REQUIRE_FAST(fast, state);
    static const size_t gs[] = {2, 3, 16, 17, 32, 48, 64, 128, 256};
    static const size_t ngs[] = {0, 1, 15, 16, 17, 33, 48};
    uint64_t rng = 1717;
    for (size_t gi = 0; gi < N(gs); gi++)
        for (size_t ni = 0; ni < N(ngs); ni++)
            for (int kind = 0; kind <= DATA_KINDS + 1; kind++) {
                const size_t G = gs[gi], ng = ngs[ni], n = G * ng;
                ubuf bx, b0, b1, b2, b3;
                float *x = ualloc_f(&bx, n + 1);
                float *lr = ualloc_f(&b0, ng + 1), *hr = ualloc_f(&b1, ng + 1);
                float *lf = ualloc_f(&b2, ng + 1), *hf = ualloc_f(&b3, ng + 1);
                fill(x, n, kind < DATA_KINDS ? kind : DATA_GAUSS, &rng);
                if (kind == DATA_KINDS && ng > 2) { /* group 1 all non-finite, group 2 all zero */
                    for (size_t i = 0; i < G; i++) x[G + i] = (i & 1) ? NAN : INFINITY;
                    for (size_t i = 0; i < G; i++) x[2 * G + i] = (i % 3) ? 0.0f : -0.0f;
                }
                if (kind == DATA_KINDS + 1 && ng) x[n - 1 - (n / 3)] = NAN; /* one NaN in one batch */
                const uint64_t br = ref()->minmax_groups(x, ng, G, lr, hr);
                const uint64_t bf = fast->minmax_groups(x, ng, G, lf, hf);
                assert_int_equal(bf, br);
                assert_memory_equal(lf, lr, ng * sizeof(float));
                assert_memory_equal(hf, hr, ng * sizeof(float));
                /* the reference is minmax on each group */
                for (size_t g = 0; g < ng; g++) {
                    float l, h;
                    ref()->minmax(x + g * G, G, &l, &h);
                    assert_true(same_bits_f(l, lr[g]) && same_bits_f(h, hr[g]));
                }
                free(bx.base), free(b0.base), free(b1.base), free(b2.base), free(b3.base);
            }
}

/* A finite float of any magnitude and either sign (every exponent, zeros
 * and subnormals included), or a value from the edges list. */
static float any_finite(uint64_t *rng) {
    static const float edges[] = {0.0f, -0.0f, FLT_MIN, -FLT_MIN, 1e-45f, -1e-45f, FLT_MAX, -FLT_MAX,
                                  1.0f, -1.0f, 0.5f, -0.5f};
    const uint64_t r = npuc_test_rand(rng);
    if (r % 8 == 0) return edges[(r >> 8) % N(edges)];
    uint32_t u = (uint32_t)(r >> 16);
    float f;
    memcpy(&f, &u, sizeof f);
    return isfinite(f) ? f : 1.0f;
}

/* range_params: every width 2..8 and scheme (symmetric, asymmetric, full
 * grid) over ranges from typical weights to the extremes of float (zeros of
 * either sign, subnormals, FLT_MAX, ties -lo == hi), odd counts; the fast
 * version's scale, 1/scale and zero point are the reference's bits, also
 * when it works in place (scale over lo, inv over hi). */
static void test_fast_range_params(void **state) {
    REQUIRE_FAST(fast, state);
    static const size_t ns[] = {0, 1, 7, 8, 9, 31, 64, 257};
    uint64_t rng = 99;
    for (size_t ni = 0; ni < N(ns); ni++)
        for (int bits = 2; bits <= 8; bits++)
            for (int scheme = 0; scheme < 3; scheme++)
                for (int kind = 0; kind < 3; kind++) {
                    const size_t n = ns[ni];
                    const int sym = scheme > 0, full = scheme == 2;
                    ubuf b[8];
                    float *lo = ualloc_f(&b[0], n), *hi = ualloc_f(&b[1], n);
                    float *sr = ualloc_f(&b[2], n), *ir = ualloc_f(&b[3], n);
                    float *sf = ualloc_f(&b[4], n), *ifa = ualloc_f(&b[5], n);
                    int32_t *zr = ualloc_i(&b[6], n), *zf = ualloc_i(&b[7], n);
                    for (size_t i = 0; i < n; i++) {
                        float a, c;
                        if (kind == 0) { /* a group of Gaussian weights */
                            a = -fabsf(npuc_test_randn(&rng)) * 0.05f;
                            c = fabsf(npuc_test_randn(&rng)) * 0.05f;
                        } else if (kind == 1) { /* anything finite */
                            a = any_finite(&rng);
                            c = any_finite(&rng);
                        } else { /* ties -lo == hi, one-sided and degenerate ranges */
                            a = any_finite(&rng);
                            c = (i % 3 == 0) ? -a : (i % 3 == 1) ? a : 0.0f;
                        }
                        lo[i] = a < c ? a : c;
                        hi[i] = a < c ? c : a;
                    }
                    ref()->range_params(lo, hi, n, bits, sym, full, sr, ir, zr);
                    fast->range_params(lo, hi, n, bits, sym, full, sf, ifa, zf);
                    assert_memory_equal(sf, sr, n * sizeof(float));
                    assert_memory_equal(ifa, ir, n * sizeof(float));
                    assert_memory_equal(zf, zr, n * sizeof(int32_t));
                    for (size_t i = 0; i < n; i++) { /* in place */
                        sf[i] = lo[i];
                        ifa[i] = hi[i];
                    }
                    fast->range_params(sf, ifa, n, bits, sym, full, sf, ifa, zf);
                    assert_memory_equal(sf, sr, n * sizeof(float));
                    assert_memory_equal(ifa, ir, n * sizeof(float));
                    assert_memory_equal(zf, zr, n * sizeof(int32_t));
                    for (int k = 0; k < 8; k++) free(b[k].base);
                }
}

static void test_fast_minmax_cols(void **state) {
    REQUIRE_FAST(fast, state);
    static const size_t rows_list[] = {0, 1, 3, 4, 5, 17};
    uint64_t rng = 31337;
    for (size_t ri = 0; ri < N(rows_list); ri++)
        for (size_t ci = 0; ci < N(k_sizes); ci++)
            for (int kind = 0; kind < DATA_KINDS; kind++) {
                const size_t rows = rows_list[ri], cols = k_sizes[ci], ld = cols + 3;
                ubuf bx, b0, b1, b2, b3;
                float *x = ualloc_f(&bx, rows * ld);
                float *lr = ualloc_f(&b0, cols), *hr = ualloc_f(&b1, cols);
                float *lf = ualloc_f(&b2, cols), *hf = ualloc_f(&b3, cols);
                fill(x, rows * ld, kind, &rng);
                for (size_t c = 0; c < cols; c++) {
                    lr[c] = lf[c] = INFINITY;
                    hr[c] = hf[c] = -INFINITY;
                }
                const uint64_t br = ref()->minmax_cols(x, rows, cols, ld, lr, hr);
                const uint64_t bf = fast->minmax_cols(x, rows, cols, ld, lf, hf);
                assert_int_equal(bf, br);
                assert_memory_equal(lf, lr, cols * sizeof(float));
                assert_memory_equal(hf, hr, cols * sizeof(float));
                free(bx.base), free(b0.base), free(b1.base), free(b2.base), free(b3.base);
            }
}

/* npuc_kernels() honours NPUC_FORCE_REF, read once at the first call. */
static void test_dispatch(void **state) {
    (void)state;
    const char *force = getenv("NPUC_FORCE_REF");
    const int forced = force && *force && strcmp(force, "0") != 0;
    const npuc_kernel_table *want = forced                 ? ref()
                                    : npuc_kernels_avx512() ? npuc_kernels_avx512()
                                    : npuc_kernels_avx2()   ? npuc_kernels_avx2()
                                                            : ref();
    assert_ptr_equal(npuc_kernels(), want);
    assert_ptr_equal(npuc_kernels(), want);
    assert_string_equal(ref()->name, "ref");
    print_message("kernel table in use: %s\n", npuc_kernels()->name);
}

/* ---------------------------------------------------------------- packing */

static void test_pack_hand(void **state) {
    (void)state;
    uint8_t out[8], back[8];
    /* 3 bits: 1 | 2<<3 | 3<<6 | 4<<9 | 5<<12 = 0x58D1, 15 bits in 2 bytes. */
    const uint8_t c3[] = {1, 2, 3, 4, 5};
    assert_int_equal(npuc_packed_size(5, 3), 2);
    memset(out, 0xEE, sizeof out);
    npuc_pack_bits(c3, 5, 3, out);
    assert_int_equal(out[0], 0xD1);
    assert_int_equal(out[1], 0x58);
    assert_int_equal(out[2], 0xEE); /* nothing past the packed size */
    npuc_unpack_bits(out, 5, 3, 0, back);
    assert_memory_equal(back, c3, 5);

    /* 4 bits: nibbles low first; the last byte's high nibble is zero. */
    const uint8_t c4[] = {1, 2, 3, 4, 5};
    assert_int_equal(npuc_packed_size(5, 4), 3);
    npuc_pack_bits(c4, 5, 4, out);
    assert_int_equal(out[0], 0x21);
    assert_int_equal(out[1], 0x43);
    assert_int_equal(out[2], 0x05);

    /* Signed 4-bit -1, 7, -8 keep their low nibbles F, 7, 8 and sign-extend
     * back; unsigned unpacking gives the raw nibbles. */
    const uint8_t s4[] = {0xFF, 0x07, 0xF8};
    npuc_pack_bits(s4, 3, 4, out);
    assert_int_equal(out[0], 0x7F);
    assert_int_equal(out[1], 0x08);
    npuc_unpack_bits(out, 3, 4, 1, back);
    assert_memory_equal(back, s4, 3);
    npuc_unpack_bits(out, 3, 4, 0, back);
    assert_int_equal(back[0], 0x0F);
    assert_int_equal(back[1], 0x07);
    assert_int_equal(back[2], 0x08);

    /* 2 bits: 3 | 0<<2 | 1<<4 | 2<<6 = 0x93, then 3; only low bits are kept. */
    const uint8_t c2[] = {3, 0, 1, 2, 0xFF};
    npuc_pack_bits(c2, 5, 2, out);
    assert_int_equal(out[0], 0x93);
    assert_int_equal(out[1], 0x03);

    /* 3-bit signed -1 (0xFF) and -4 (0xFC): fields 7 and 4 -> 7 | 4<<3 = 0x27. */
    const uint8_t s3[] = {0xFF, 0xFC};
    npuc_pack_bits(s3, 2, 3, out);
    assert_int_equal(out[0], 0x27);
    npuc_unpack_bits(out, 2, 3, 1, back);
    assert_memory_equal(back, s3, 2);
}

static void test_packed_size(void **state) {
    (void)state;
    assert_int_equal(npuc_packed_size(0, 4), 0);
    assert_int_equal(npuc_packed_size(1, 2), 1);
    assert_int_equal(npuc_packed_size(8, 3), 3);
    assert_int_equal(npuc_packed_size(9, 3), 4);
    assert_int_equal(npuc_packed_size(7, 8), 7);
    assert_true(npuc_packed_size(UINT64_MAX, 8) == UINT64_MAX);
    assert_true(npuc_packed_size(UINT64_MAX, 4) == (UINT64_C(1) << 63));
    assert_int_equal(npuc_packed_size(10, 0), 0);
    assert_int_equal(npuc_packed_size(10, 9), 0);
}

static void test_pack_roundtrip(void **state) {
    (void)state;
    uint64_t rng = 2024;
    static const size_t ns[] = {0, 1, 3, 7, 9, 15, 17, 33, 1023, 4099};
    uint8_t *codes = malloc(4099), *back = malloc(4099), *packed = malloc(4099 + 1);
    assert_true(codes && back && packed);
    for (int bits = 2; bits <= 8; bits++)
        for (int is_signed = 0; is_signed <= 1; is_signed++)
            for (size_t k = 0; k < N(ns); k++) {
                const size_t n = ns[k];
                const uint64_t psz = npuc_packed_size(n, bits);
                for (size_t i = 0; i < n; i++) {
                    const int32_t lo = is_signed ? -(1 << (bits - 1)) : 0;
                    const int32_t v = lo + (int32_t)(npuc_test_rand(&rng) % (1u << bits));
                    codes[i] = (uint8_t)v;
                }
                memset(packed, 0xEE, 4099 + 1);
                npuc_pack_bits(codes, n, bits, packed);
                assert_int_equal(packed[psz], 0xEE);
                if (psz && (n * (size_t)bits) % 8) /* trailing bits are zero */
                    assert_int_equal(packed[psz - 1] >> ((n * (size_t)bits) % 8), 0);
                npuc_unpack_bits(packed, n, bits, is_signed, back);
                assert_memory_equal(back, codes, n);
            }
    free(codes), free(back), free(packed);
}

/* npuc_pack_bits (groups of eight codes a word or bytes at a time, then a
 * serial tail) against a packer written from the format's definition, one
 * bit at a time: bit b of code i is bit i*bits + b of the stream, LSB of
 * byte 0 first.  Codes are whole random bytes, so the masking of the bits
 * above the width is checked too; every width, every tail length, and
 * nothing written past the packed size. */
static void test_pack_vs_bitwise(void **state) {
    (void)state;
    uint64_t rng = 18;
    enum { NMAX = 4099 };
    uint8_t *codes = malloc(NMAX), *got = malloc(NMAX + 1), *want = malloc(NMAX + 1);
    assert_true(codes && got && want);
    static const size_t big[] = {64, 1023, 1024, 4096, 4099};
    for (int bits = 1; bits <= 8; bits++)
        for (size_t k = 0; k < 41 + N(big); k++) {
            const size_t n = k < 41 ? k : big[k - 41];
            for (size_t i = 0; i < n; i++) codes[i] = (uint8_t)npuc_test_rand(&rng);
            const uint64_t psz = npuc_packed_size(n, bits);
            memset(want, 0, NMAX + 1);
            for (size_t i = 0; i < n; i++)
                for (int b = 0; b < bits; b++)
                    if (codes[i] >> b & 1) {
                        const size_t at = i * (size_t)bits + (size_t)b;
                        want[at / 8] |= (uint8_t)(1u << (at % 8));
                    }
            want[psz] = 0xEE;
            memset(got, 0xEE, NMAX + 1);
            npuc_pack_bits(codes, n, bits, got);
            assert_memory_equal(got, want, psz + 1);
        }
    free(codes), free(got), free(want);
}

/* The table's pack_bits (AVX2: 4 and 2 bits 64/128 codes at a time, the
 * rest by npuc_pack_bits) against npuc_pack_bits: every width, every length
 * up to three 2-bit blocks and some odd larger ones, codes of whole random
 * bytes (the masking), pointers off alignment, nothing written past the
 * packed size. */
static void test_fast_pack(void **state) {
    REQUIRE_FAST(t, state);
    uint64_t rng = 181;
    enum { NMAX = 4099 };
    uint8_t *codes = malloc(NMAX + 1), *got = malloc(NMAX + 2), *want = malloc(NMAX + 2);
    assert_true(codes && got && want);
    static const size_t big[] = {511, 1024, 2049, 4096, 4099};
    for (int bits = 1; bits <= 8; bits++)
        for (size_t k = 0; k < 390 + N(big); k++) {
            const size_t n = k < 390 ? k : big[k - 390];
            for (size_t i = 0; i < n + 1; i++) codes[i] = (uint8_t)npuc_test_rand(&rng);
            const uint64_t psz = npuc_packed_size(n, bits);
            memset(want, 0xEE, NMAX + 2);
            memset(got, 0xEE, NMAX + 2);
            npuc_pack_bits(codes + 1, n, bits, want + 1);
            t->pack_bits(codes + 1, n, bits, got + 1);
            assert_memory_equal(got, want, psz + 2);
        }
    free(codes), free(got), free(want);
}

/* One entry per fast table; the state names it. */
#define FAST_TESTS(f)                                                                    \
    {#f "_avx2", f, NULL, NULL, (void *)"avx2"}, {#f "_avx512", f, NULL, NULL, (void *)"avx512"}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ref_hand_symmetric),
        cmocka_unit_test(test_ref_hand_asymmetric),
        cmocka_unit_test(test_ref_hand_full_grid),
        cmocka_unit_test(test_ref_nonfinite_policy),
        cmocka_unit_test(test_ref_vs_double),
        cmocka_unit_test(test_ref_minmax_hand),
        cmocka_unit_test(test_ref_groups_hand),
        FAST_TESTS(test_fast_quant),
        FAST_TESTS(test_fast_quant_sparse_clips),
        FAST_TESTS(test_fast_quant_odd_params),
        FAST_TESTS(test_fast_quant_rows),
        FAST_TESTS(test_fast_quant_float_range),
        FAST_TESTS(test_fast_fenv),
        FAST_TESTS(test_fast_minmax),
        FAST_TESTS(test_fast_minmax_cols),
        FAST_TESTS(test_fast_minmax_groups),
        FAST_TESTS(test_fast_range_params),
        cmocka_unit_test(test_dispatch),
        cmocka_unit_test(test_pack_hand),
        cmocka_unit_test(test_packed_size),
        cmocka_unit_test(test_pack_roundtrip),
        cmocka_unit_test(test_pack_vs_bitwise),
        FAST_TESTS(test_fast_pack),
    };
    return cmocka_run_group_tests_name("qkernels", tests, NULL, NULL);
}
