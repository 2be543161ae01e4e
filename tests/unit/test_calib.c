/*
 * test_calib.c - the range estimators (npuc/calib.h) on data whose right
 * answer is known: hand-worked minmax, percentiles against qsort, clipping
 * of planted outliers, the MSE optimum of uniform data, degenerate groups,
 * determinism, the never-worse-than-minmax guarantee of mse, the KL
 * threshold against a direct O(bins^2) implementation, and parse errors.
 *
 * The quantization error is measured by this file's own implementation of
 * the quantizer (include/npuc/quant.h), accumulated in double.
 */
#include "testutil.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* mse may land this far above the best clip of a dense brute-force scan. */
#define MSE_SEARCH_SLACK 1.02
/* The planted outliers, in sigmas. */
#define OUTLIER_SIGMA 50.0f

/* ------------------------------------------------------------ helpers */

/* Sum of squared errors of quantizing x[0..n) over [lo, hi] (quant.h). */
static double ref_sse(const float *x, size_t n, float lo, float hi, int bits, int sym) {
    float scale;
    int32_t zp = 0, qmin, qmax;
    if (sym) {
        qmax = (1 << (bits - 1)) - 1;
        qmin = -qmax;
        scale = fmaxf(fabsf(lo), fabsf(hi)) / (float)qmax;
    } else {
        qmin = 0;
        qmax = (1 << bits) - 1;
        double l = lo < 0 ? lo : 0, h = hi > 0 ? hi : 0;
        scale = (float)((h - l) / qmax);
        if (!(scale >= FLT_MIN)) scale = FLT_MIN;
        float zf = nearbyintf((float)(-l) / scale);
        zp = (int32_t)(zf < 0 ? 0 : zf > (float)qmax ? (float)qmax : zf);
    }
    if (!(scale >= FLT_MIN)) scale = FLT_MIN;
    const float inv = 1.0f / scale;
    double e = 0;
    for (size_t i = 0; i < n; i++) {
        float v = x[i] * inv;
        v = v < -16777216.0f ? -16777216.0f : v > 16777216.0f ? 16777216.0f : v;
        int64_t q = (int64_t)nearbyintf(v) + zp;
        q = q < qmin ? qmin : q > qmax ? qmax : q;
        float d = (float)(q - zp) * scale;
        double diff = (double)d - (double)x[i];
        e += diff * diff;
    }
    return e;
}

/* Runs the estimator with a scratch buffer of exactly the advertised size
 * (so ASan sees any overrun) and checks the result is a finite range. */
static void estimate(const float *x, size_t n, const char *method, int bits, int sym, float *lo,
                     float *hi) {
    npuc_ctx *ctx;
    assert_int_equal(npuc_ctx_new(&ctx), NPUC_OK);
    npuc_range_opts o = npuc_range_opts_defaults();
    assert_int_equal(npuc_range_parse(ctx, method, &o), NPUC_OK);
    o.bits = bits;
    o.symmetric = sym;
    size_t ss = npuc_range_scratch_size(n, &o);
    void *scratch = ss ? malloc(ss) : NULL;
    if (ss) assert_non_null(scratch);
    npuc_status st = npuc_range_estimate(ctx, x, n, &o, lo, hi, scratch);
    if (st != NPUC_OK) print_error("%s\n", npuc_ctx_errmsg(ctx));
    assert_int_equal(st, NPUC_OK);
    free(scratch);
    npuc_ctx_free(ctx);
    assert_true(isfinite(*lo) && isfinite(*hi));
    assert_true(*lo <= *hi);
    if (sym) assert_true(*lo == -*hi);
}

static float *gaussian(size_t n, uint64_t seed) {
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) x[i] = npuc_test_randn(&s);
    return x;
}

static void shuffle(float *x, size_t n, uint64_t seed) {
    uint64_t s = seed;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(npuc_test_rand(&s) % (i + 1));
        float t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The p-th percentile of v[0..n) by the documented linear definition,
 * computed by sorting a copy. */
static float ref_percentile(const float *v, size_t n, double p) {
    float *s = malloc(n * sizeof *s);
    assert_non_null(s);
    memcpy(s, v, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_float);
    double h = (double)(n - 1) * p / 100.0;
    size_t k = (size_t)h;
    double r = s[k];
    if (k + 1 < n) r += (h - (double)k) * ((double)s[k + 1] - r);
    free(s);
    return (float)r;
}

/* ------------------------------------------------------------ minmax */

static void test_minmax_hand(void **state) {
    (void)state;
    const float x[] = {0.5f, -2.25f, 1.0f, 3.5f, -0.75f};
    float lo, hi;
    estimate(x, 5, "minmax", 8, 1, &lo, &hi);
    assert_true(lo == -3.5f && hi == 3.5f);
    estimate(x, 5, "minmax", 8, 0, &lo, &hi);
    assert_true(lo == -2.25f && hi == 3.5f);
    /* Not widened to include 0: the quantizer does that. */
    const float pos[] = {1.0f, 2.0f, 3.0f};
    estimate(pos, 3, "minmax", 8, 0, &lo, &hi);
    assert_true(lo == 1.0f && hi == 3.0f);
    const float neg[] = {-4.0f, -1.5f};
    estimate(neg, 2, "minmax", 4, 1, &lo, &hi);
    assert_true(lo == -4.0f && hi == 4.0f);
}

/* ------------------------------------------------------------ percentile */

static void test_percentile_shuffled(void **state) {
    (void)state;
    const size_t n = 10000;
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) x[i] = (float)i;
    shuffle(x, n, 42);
    float lo, hi;

    /* Symmetric: the 99th percentile of |x| = 9899.01 (linear definition,
     * h = 9999 * 0.99 = 9899.01; nearest rank would give 9899). */
    estimate(x, n, "percentile=99", 8, 1, &lo, &hi);
    assert_close(hi, ref_percentile(x, n, 99.0), 0, 0);
    assert_close(hi, 9899.01, 1e-7, 0);
    assert_true(lo == -hi);

    /* Asymmetric: the 1st and 99th percentiles of x. */
    estimate(x, n, "percentile=99", 8, 0, &lo, &hi);
    assert_close(lo, ref_percentile(x, n, 1.0), 0, 0);
    assert_close(lo, 99.99, 1e-7, 0);
    assert_close(hi, 9899.01, 1e-7, 0);
    /* P below 50 names the same pair. */
    float lo2, hi2;
    estimate(x, n, "percentile=1", 8, 0, &lo2, &hi2);
    assert_true(lo2 == lo && hi2 == hi);

    /* percentile=100 is the maximum. */
    estimate(x, n, "percentile=100", 8, 1, &lo, &hi);
    assert_true(hi == 9999.0f);

    /* Signed data: the symmetric percentile is taken of |x|. */
    for (size_t i = 0; i < n; i++) x[i] = (float)i - 5000.0f;
    shuffle(x, n, 7);
    float *ax = malloc(n * sizeof *ax);
    assert_non_null(ax);
    for (size_t i = 0; i < n; i++) ax[i] = fabsf(x[i]);
    estimate(x, n, "percentile=99.9", 8, 1, &lo, &hi);
    assert_close(hi, ref_percentile(ax, n, 99.9), 0, 0);
    estimate(x, n, "percentile=99.9", 8, 0, &lo, &hi);
    assert_close(lo, ref_percentile(x, n, 0.1), 1e-7, 0);
    assert_close(hi, ref_percentile(x, n, 99.9), 1e-7, 0);
    free(ax);
    free(x);
}

/* The selection against qsort on many sizes, with heavy duplicates and
 * orders that defeat naive pivots. */
static void test_percentile_selection(void **state) {
    (void)state;
    uint64_t s = 99;
    const double ps[] = {0.001, 1, 25, 50, 63.7, 90, 99, 99.99, 100};
    for (size_t n = 1; n < 400; n += (n < 40 ? 1 : 37)) {
        float *x = malloc(n * sizeof *x);
        assert_non_null(x);
        for (int kind = 0; kind < 4; kind++) {
            for (size_t i = 0; i < n; i++) {
                switch (kind) {
                case 0: x[i] = npuc_test_randf(&s); break;
                case 1: x[i] = (float)(npuc_test_rand(&s) % 5) - 2.0f; break; /* duplicates */
                case 2: x[i] = (float)i; break;                            /* sorted */
                default: x[i] = (float)((i < n / 2) ? i : n - i); break;   /* organ pipe */
                }
            }
            for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
                char m[64];
                snprintf(m, sizeof m, "percentile=%g", ps[k]);
                float lo, hi;
                estimate(x, n, m, 8, 0, &lo, &hi);
                double plo = ps[k] < 50 ? ps[k] : 100 - ps[k];
                assert_close(lo, ref_percentile(x, n, plo), 1e-6, 1e-7);
                assert_close(hi, ref_percentile(x, n, 100 - plo), 1e-6, 1e-7);
            }
        }
        free(x);
    }
    /* Large adversarial inputs finish (linear time) and stay exact. */
    const size_t n = 200000;
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (int kind = 0; kind < 3; kind++) {
        for (size_t i = 0; i < n; i++)
            x[i] = kind == 0 ? 1.0f : kind == 1 ? (float)(n - i) : (float)((i * 7919) % 1000);
        float lo, hi;
        estimate(x, n, "percentile=99.99", 8, 0, &lo, &hi);
        assert_close(lo, ref_percentile(x, n, 0.01), 1e-6, 0);
        assert_close(hi, ref_percentile(x, n, 99.99), 1e-6, 0);
    }
    free(x);
}

/* ------------------------------------------------------------ outliers */

/* N(0,1) n = 65536 plus 5 values at +-50 sigma. */
static float *gaussian_with_outliers(size_t n) {
    float *x = gaussian(n, 2024);
    for (int k = 0; k < 5; k++) x[(size_t)k * 13001 % n] = (k & 1) ? -OUTLIER_SIGMA : OUTLIER_SIGMA;
    return x;
}

static void test_outliers_mse(void **state) {
    (void)state;
    const size_t n = 65536;
    float *x = gaussian_with_outliers(n);
    for (int bits = 8; bits >= 4; bits -= 4) {
        for (int sym = 1; sym >= 0; sym--) {
            float lo, hi, mlo, mhi;
            estimate(x, n, "minmax", bits, sym, &mlo, &mhi);
            estimate(x, n, "mse", bits, sym, &lo, &hi);
            double e = ref_sse(x, n, lo, hi, bits, sym), emm = ref_sse(x, n, mlo, mhi, bits, sym);
            float clip = fmaxf(fabsf(lo), fabsf(hi));
            if (bits == 8) {
                /* At int8 each outlier's clipping error 2 (50 - c) per unit
                 * of c balances the rounding noise n c / (12 * 127^2) at
                 * c = 46.8: the optimum clips only a little. */
                assert_true(clip < 0.97f * OUTLIER_SIGMA);
                assert_true(clip > 0.85f * OUTLIER_SIGMA);
            } else {
                assert_true(clip < 10.0f);
            }
            assert_true(e < emm);
        }
    }
    free(x);
}

static void test_outliers_entropy(void **state) {
    (void)state;
    const size_t n = 65536;
    float *x = gaussian_with_outliers(n);
    for (int bits = 8; bits >= 4; bits -= 4) {
        for (int sym = 1; sym >= 0; sym--) {
            float lo, hi, mlo, mhi;
            estimate(x, n, "minmax", bits, sym, &mlo, &mhi);
            estimate(x, n, "entropy", bits, sym, &lo, &hi);
            /* KL ignores the 5 / 65536 of the mass out there and fits the
             * bulk: the clip lies in the Gaussian's tail. */
            float clip = fmaxf(fabsf(lo), fabsf(hi));
            assert_true(clip > 2.5f && clip < 10.0f);
            double e = ref_sse(x, n, lo, hi, bits, sym), emm = ref_sse(x, n, mlo, mhi, bits, sym);
            /* At int4 that is also far better in MSE.  At int8 it is not,
             * and cannot be: clipping five values from 50 to ~4.5 sigma
             * costs 5 * 45.5^2 ~ 10^4 sigma^2, while minmax's whole
             * rounding noise is 65536 * (50/127)^2 / 12 ~ 850 sigma^2.
             * That is the known trade-off of KL calibration, which scores
             * the shape of the distribution, not the squared error. */
            if (bits == 4) assert_true(e < emm);
        }
    }
    free(x);
}

/* The threshold equals the minimiser of a direct O(bins^2) implementation
 * of the documented KL: P = h[0..i) with the outliers in P[i-1]; Q = h[0..i)
 * merged into nq levels (bin j to level j * nq / i) and spread over each
 * level's nonzero-P bins; zero Q under nonzero P smoothed to 1e-4 counts. */
static void test_entropy_matches_direct(void **state) {
    (void)state;
    const size_t n = 65536;
    const int nb = 2048;
    float *x = gaussian(n, 555);
    for (size_t i = 0; i < n; i += 97) x[i] *= 3.0f; /* a heavier tail */
    double *P = malloc(nb * sizeof *P), *Q = malloc(nb * sizeof *Q), *kl = malloc((nb + 1) * sizeof *kl);
    uint32_t *h = calloc(nb, sizeof *h);
    assert_true(P && Q && kl && h);
    float amax = 0;
    for (size_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    for (size_t i = 0; i < n; i++) {
        float u = fabsf(x[i]) * ((float)nb / amax);
        int j = u < (float)(nb - 1) ? (int)u : nb - 1;
        h[j]++;
    }
    for (int bits = 8; bits >= 4; bits -= 4) {
        const int nq = 1 << (bits - 1);
        double best = INFINITY;
        for (int i = 128; i <= nb; i++) {
            double out = 0, M = 0;
            for (int j = i; j < nb; j++) out += h[j];
            for (int j = 0; j < i; j++) P[j] = h[j], M += h[j];
            P[i - 1] += out;
            for (int L = 0; L < nq; L++) {
                int a = (int)(((int64_t)L * i + nq - 1) / nq), b = (int)(((int64_t)(L + 1) * i + nq - 1) / nq);
                double S = 0, z = 0;
                for (int j = a; j < b; j++) S += h[j], z += P[j] != 0;
                for (int j = a; j < b; j++) Q[j] = P[j] != 0 && z > 0 ? S / z : 0;
            }
            double d = 0;
            for (int j = 0; j < i; j++) {
                if (P[j] == 0) continue;
                double q = Q[j] > 0 ? Q[j] : 1e-4;
                d += (P[j] / n) * log((P[j] / n) / (q / M));
            }
            kl[i] = d;
            best = fmin(best, d);
        }
        float lo, hi;
        estimate(x, n, "entropy", bits, 1, &lo, &hi);
        /* Back from t = (i + 0.5) * w to i. */
        int i = (int)lround((double)hi / ((double)amax / nb) - 0.5);
        assert_true(i >= 128 && i <= nb);
        assert_close(kl[i], best, 1e-9, 1e-12);
    }
    free(P);
    free(Q);
    free(kl);
    free(h);
    free(x);
}

/* ------------------------------------------------------------ mse */

/* Uniform data: the MSE-optimal uniform quantizer with 2 qmax + 1 levels
 * over [-1, 1] puts its outer levels at 1 - 1/(2 qmax + 1), i.e. the clip is
 * 254/255 of max|x| at int8 and 14/15 at int4. */
static void test_uniform_mse(void **state) {
    (void)state;
    const size_t n = 65536;
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    uint64_t s = 31337;
    for (size_t i = 0; i < n; i++) x[i] = npuc_test_randf(&s);
    float amax = 0;
    for (size_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    float lo, hi;
    estimate(x, n, "mse", 8, 1, &lo, &hi);
    assert_close(hi, amax, 0.02, 0);
    assert_close(hi, amax * 254.0 / 255.0, 0.01, 0);
    estimate(x, n, "mse", 4, 1, &lo, &hi);
    assert_close(hi, amax * 14.0 / 15.0, 0.02, 0);
    free(x);
}

/* mse against a dense brute-force scan of the clip, on a few shapes. */
static void test_mse_near_brute_force(void **state) {
    (void)state;
    const size_t sizes[] = {300, 4608, 40000};
    for (size_t si = 0; si < 3; si++) {
        size_t n = sizes[si];
        float *x = gaussian(n, 1000 + si);
        for (size_t i = 0; i < n; i += 5) x[i] = x[i] * x[i] * x[i]; /* heavier tails */
        for (int bits = 8; bits >= 3; bits -= (bits == 8 ? 4 : 1)) {
            float lo, hi, amax = 0;
            for (size_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
            estimate(x, n, "mse", bits, 1, &lo, &hi);
            double e = ref_sse(x, n, lo, hi, bits, 1), best = INFINITY;
            for (int k = 0; k <= 1600; k++) {
                float c = (float)(amax * pow(2.0, -k / 200.0));
                best = fmin(best, ref_sse(x, n, -c, c, bits, 1));
            }
            if (!(e <= best * MSE_SEARCH_SLACK))
                print_error("n=%zu bits=%d: mse %g vs best %g (clip %g of %g)\n", n, bits, e, best, hi, amax);
            assert_true(e <= best * MSE_SEARCH_SLACK);
        }
        free(x);
    }
}

/* The guarantee: mse is never worse than minmax, exactly measured, on any
 * group: sizes on both sides of the exact/histogram switch, all code widths,
 * skewed and spiky data. */
static void test_mse_never_worse(void **state) {
    (void)state;
    const size_t sizes[] = {1, 2, 3, 7, 17, 64, 65, 127, 300, 1023, 2049, 5000, 70000};
    uint64_t s = 5;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t n = sizes[si];
        float *x = malloc(n * sizeof *x);
        assert_non_null(x);
        for (int kind = 0; kind < 4; kind++) {
            for (size_t i = 0; i < n; i++) {
                float g = npuc_test_randn(&s);
                switch (kind) {
                case 0: x[i] = g; break;
                case 1: x[i] = g * g * 0.1f + 0.2f; break;                  /* skewed, positive */
                case 2: x[i] = (npuc_test_rand(&s) % 3) ? 0.0f : g; break; /* pruned */
                default: x[i] = (i % 101 == 0) ? g * 40.0f : g; break;     /* outliers */
                }
            }
            for (int bits = 2; bits <= 8; bits++) {
                for (int sym = 0; sym <= 1; sym++) {
                    float lo, hi, mlo, mhi;
                    estimate(x, n, "minmax", bits, sym, &mlo, &mhi);
                    estimate(x, n, "mse", bits, sym, &lo, &hi);
                    double e = ref_sse(x, n, lo, hi, bits, sym), emm = ref_sse(x, n, mlo, mhi, bits, sym);
                    if (!(e <= emm)) print_error("n=%zu kind=%d bits=%d sym=%d: %g > %g\n", n, kind, bits, sym, e, emm);
                    assert_true(e <= emm);
                    /* And inside the minmax range. */
                    assert_true(lo >= mlo && hi <= mhi);
                }
            }
        }
        free(x);
    }
}

/* ------------------------------------------------------------ edge cases */

static void check_all_methods(const float *x, size_t n) {
    const char *methods[] = {"minmax", "percentile=99.9", "percentile=100", "mse", "entropy"};
    float mn = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        mn = i ? fminf(mn, x[i]) : x[i];
        mx = i ? fmaxf(mx, x[i]) : x[i];
    }
    const float amax = fmaxf(fabsf(mn), fabsf(mx));
    for (size_t m = 0; m < sizeof methods / sizeof methods[0]; m++) {
        for (int bits = 2; bits <= 8; bits += 2) {
            for (int sym = 0; sym <= 1; sym++) {
                float lo = NAN, hi = NAN;
                estimate(x, n, methods[m], bits, sym, &lo, &hi);
                if (n == 0) {
                    assert_true(lo == 0.0f && hi == 0.0f);
                } else if (sym) {
                    assert_true(hi >= 0.0f && hi <= amax);
                } else {
                    assert_true(lo >= mn && hi <= mx);
                }
            }
        }
    }
}

static void test_degenerate_groups(void **state) {
    (void)state;
    static float buf[20000];
    check_all_methods(buf, 0);
    const float one = -2.5f;
    check_all_methods(&one, 1);
    memset(buf, 0, sizeof buf);
    check_all_methods(buf, 1000);
    check_all_methods(buf, 20000);
    for (size_t i = 0; i < 20000; i++) buf[i] = 3.0f;
    check_all_methods(buf, 100);
    check_all_methods(buf, 20000);
    for (size_t i = 0; i < 20000; i++) buf[i] = (i & 1) ? -1e-40f : 2e-41f; /* subnormal */
    check_all_methods(buf, 5000);
    for (size_t i = 0; i < 20000; i++) buf[i] = (i % 3) ? 3e38f : -1e38f; /* near FLT_MAX */
    check_all_methods(buf, 5000);
    uint64_t s = 3;
    for (size_t i = 0; i < 20000; i++) buf[i] = npuc_test_randn(&s) * 1e-30f;
    check_all_methods(buf, 20000);
}

static void test_determinism(void **state) {
    (void)state;
    const size_t n = 65536;
    float *x = gaussian_with_outliers(n);
    const char *methods[] = {"percentile=99.9", "mse", "entropy"};
    npuc_ctx *ctx;
    assert_int_equal(npuc_ctx_new(&ctx), NPUC_OK);
    for (size_t m = 0; m < 3; m++) {
        for (int sym = 0; sym <= 1; sym++) {
            npuc_range_opts o = npuc_range_opts_defaults();
            assert_int_equal(npuc_range_parse(ctx, methods[m], &o), NPUC_OK);
            o.symmetric = sym;
            o.bits = 4;
            const size_t len[] = {n, 4608, 300};
            for (size_t l = 0; l < 3; l++) {
                float r[3][2];
                size_t ss = npuc_range_scratch_size(n, &o); /* a larger scratch is fine too */
                void *scratch = ss ? malloc(ss) : NULL;
                if (ss) memset(scratch, 0xA5, ss);
                assert_int_equal(npuc_range_estimate(ctx, x, len[l], &o, &r[0][0], &r[0][1], NULL), NPUC_OK);
                assert_int_equal(npuc_range_estimate(ctx, x, len[l], &o, &r[1][0], &r[1][1], scratch), NPUC_OK);
                assert_int_equal(npuc_range_estimate(ctx, x, len[l], &o, &r[2][0], &r[2][1], scratch), NPUC_OK);
                assert_memory_equal(r[0], r[1], sizeof r[0]);
                assert_memory_equal(r[0], r[2], sizeof r[0]);
                free(scratch);
            }
        }
    }
    npuc_ctx_free(ctx);
    free(x);
}

/* ------------------------------------------------------------ options */

static void expect_parse_error(const char *text) {
    npuc_ctx *ctx;
    assert_int_equal(npuc_ctx_new(&ctx), NPUC_OK);
    npuc_range_opts o = npuc_range_opts_defaults();
    assert_int_equal(npuc_range_parse(ctx, text, &o), NPUC_ERR_ARG);
    char quoted[128];
    snprintf(quoted, sizeof quoted, "'%s'", text);
    if (!strstr(npuc_ctx_errmsg(ctx), quoted)) print_error("message: %s\n", npuc_ctx_errmsg(ctx));
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), quoted));
    /* A failed parse leaves the options alone. */
    assert_int_equal(o.method, NPUC_RANGE_MINMAX);
    npuc_ctx_free(ctx);
}

static void test_parse(void **state) {
    (void)state;
    expect_parse_error("percentile=0");
    expect_parse_error("percentile=101");
    expect_parse_error("percentile=abc");
    expect_parse_error("kl");
    expect_parse_error("");
    expect_parse_error("percentile=");
    expect_parse_error("percentile=nan");
    expect_parse_error("percentile=99.9x");
    expect_parse_error("percentile= 99");
    expect_parse_error("MSE");

    npuc_ctx *ctx;
    assert_int_equal(npuc_ctx_new(&ctx), NPUC_OK);
    npuc_range_opts o = npuc_range_opts_defaults();
    assert_int_equal(o.method, NPUC_RANGE_MINMAX);
    assert_int_equal(o.bits, 8);
    assert_int_equal(o.symmetric, 1);
    assert_close(o.percentile, 99.99, 0, 0);
    char buf[64];
    const char *names[] = {"minmax", "mse", "entropy", "percentile=99.99", "percentile=99.9",
                           "percentile=100", "percentile=0.001", "percentile=99.999999"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        assert_int_equal(npuc_range_parse(ctx, names[i], &o), NPUC_OK);
        npuc_range_format(&o, buf, sizeof buf);
        assert_string_equal(buf, names[i]);
    }
    assert_int_equal(npuc_range_parse(ctx, "percentile=1e2", &o), NPUC_OK);
    assert_int_equal(o.method, NPUC_RANGE_PERCENTILE);
    assert_close(o.percentile, 100.0, 0, 0);

    /* Invalid options and data at estimate time. */
    float x[4] = {1, 2, 3, 4}, lo, hi;
    o = npuc_range_opts_defaults();
    o.method = NPUC_RANGE_MSE;
    o.bits = 1;
    assert_int_equal(npuc_range_estimate(ctx, x, 4, &o, &lo, &hi, NULL), NPUC_ERR_ARG);
    o.bits = 17;
    assert_int_equal(npuc_range_estimate(ctx, x, 4, &o, &lo, &hi, NULL), NPUC_ERR_ARG);
    o = npuc_range_opts_defaults();
    o.method = NPUC_RANGE_PERCENTILE;
    o.percentile = 0.0;
    assert_int_equal(npuc_range_estimate(ctx, x, 4, &o, &lo, &hi, NULL), NPUC_ERR_ARG);
    o.method = (npuc_range_method)9;
    assert_int_equal(npuc_range_estimate(ctx, x, 4, &o, &lo, &hi, NULL), NPUC_ERR_ARG);
    o = npuc_range_opts_defaults();
    x[2] = NAN;
    assert_int_equal(npuc_range_estimate(ctx, x, 4, &o, &lo, &hi, NULL), NPUC_ERR_VALUE);
    x[2] = INFINITY;
    o.method = NPUC_RANGE_ENTROPY;
    assert_int_equal(npuc_range_estimate(ctx, x, 4, &o, &lo, &hi, NULL), NPUC_ERR_VALUE);
    npuc_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_minmax_hand),
        cmocka_unit_test(test_percentile_shuffled),
        cmocka_unit_test(test_percentile_selection),
        cmocka_unit_test(test_outliers_mse),
        cmocka_unit_test(test_outliers_entropy),
        cmocka_unit_test(test_entropy_matches_direct),
        cmocka_unit_test(test_uniform_mse),
        cmocka_unit_test(test_mse_near_brute_force),
        cmocka_unit_test(test_mse_never_worse),
        cmocka_unit_test(test_degenerate_groups),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
