/*
 * test_act_calib.c - activation calibration (npuc_act_calib, npuc/calib.h)
 * on cases the CLI test (tests/cli/calibrate.sh, NumPy references) does not
 * reach cheaply: exact percentiles against qsort when most values tie (a
 * ReLU's zeros) and when one far outlier forces several narrowing passes;
 * identical results for chunks of 1, 7 and all values, in any order of
 * channels' chunks; all-zero activations; NaN; misuse.
 */
#include "testutil.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmpf(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The linear percentile of x[0..n) by sorting a copy (docs/calibration-activations.md). */
static float ref_pct(const float *x, size_t n, double p) {
    float *a = malloc(n * sizeof *a);
    assert_non_null(a);
    memcpy(a, x, n * sizeof *a);
    qsort(a, n, sizeof *a, cmpf);
    double h = (double)(n - 1) * p / 100.0;
    size_t k = (size_t)h;
    double v = a[k];
    if (h - (double)k > 0 && k + 1 < n) v += (h - (double)k) * ((double)a[k + 1] - v);
    free(a);
    return (float)v;
}

/* Runs every pass over x[0..n) (one channel) in chunks of `chunk` values. */
static npuc_act_result run(const float *x, size_t n, size_t chunk, const char *method, int sym, int *passes,
                           npuc_act_calib **keep) {
    npuc_ctx *ctx;
    assert_int_equal(npuc_ctx_new(&ctx), NPUC_OK);
    npuc_act_opts o = npuc_act_opts_defaults();
    assert_int_equal(npuc_range_parse(ctx, method, &o.range), NPUC_OK);
    o.range.symmetric = sym;
    npuc_act_calib *c;
    assert_int_equal(npuc_act_calib_new(ctx, "t", 1, &o, &c), NPUC_OK);
    int more = 1, np = 0;
    while (more) {
        for (size_t i = 0; i < n; i += chunk)
            assert_int_equal(npuc_act_calib_feed(ctx, c, x + i, 1, n - i < chunk ? n - i : chunk), NPUC_OK);
        assert_int_equal(npuc_act_calib_end_pass(ctx, c, &more), NPUC_OK);
        np++;
    }
    npuc_act_result r;
    assert_int_equal(npuc_act_calib_result(c, 0, &r), NPUC_OK);
    if (passes) *passes = np;
    if (keep)
        *keep = c;
    else
        npuc_act_calib_free(c);
    npuc_ctx_free(ctx);
    return r;
}

static void test_percentile_ties_and_outlier(void **state) {
    (void)state;
    const size_t n = 50000;
    float *x = malloc(n * sizeof *x), *ax = malloc(n * sizeof *ax);
    assert_non_null(x);
    assert_non_null(ax);
    uint64_t s = 7;
    for (size_t i = 0; i < n; i++) {
        float v = npuc_test_randf(&s);
        x[i] = v < 0.6f ? 0.0f : v; /* most values tie at 0 */
    }
    const double P[] = {50.0, 99.0, 99.9, 100.0, 30.0};
    for (size_t k = 0; k < sizeof P / sizeof *P; k++) {
        char m[32];
        snprintf(m, sizeof m, "percentile=%g", P[k]);
        npuc_act_result r = run(x, n, n, m, 0, NULL, NULL);
        const double plo = P[k] < 50 ? P[k] : 100 - P[k];
        assert_true(r.lo == ref_pct(x, n, plo));
        assert_true(r.hi == ref_pct(x, n, 100 - plo));
        for (size_t i = 0; i < n; i++) ax[i] = fabsf(x[i]);
        r = run(x, n, n, m, 1, NULL, NULL);
        assert_true(r.hi == ref_pct(ax, n, P[k]) && r.lo == -r.hi);
    }
    /* One far outlier: the first 256 bins over [0, 1e6] put everything else
     * in bin 0, so the search narrows more than once. */
    for (size_t i = 0; i < n; i++) x[i] = npuc_test_randf(&s);
    x[n / 2] = 1e6f;
    int passes;
    npuc_act_result r = run(x, n, 999, "percentile=99.9", 0, &passes, NULL);
    assert_true(passes >= 3);
    assert_true(r.hi == ref_pct(x, n, 99.9));
    assert_true(r.lo == ref_pct(x, n, 0.1));
    free(x);
    free(ax);
}

static void test_chunking_invariant(void **state) {
    (void)state;
    const size_t n = 20000;
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    uint64_t s = 11;
    for (size_t i = 0; i < n; i++) x[i] = npuc_test_randf(&s) * (i % 7 == 0 ? 5.0f : 1.0f);
    const char *M[] = {"minmax", "percentile=99.99", "entropy", "mse"};
    for (size_t k = 0; k < 4; k++)
        for (int sym = 0; sym <= 1; sym++) {
            npuc_act_calib *c1, *c2, *c3;
            npuc_act_result a = run(x, n, n, M[k], sym, NULL, &c1);
            npuc_act_result b = run(x, n, 1, M[k], sym, NULL, &c2);
            npuc_act_result d = run(x, n, 7, M[k], sym, NULL, &c3);
            assert_true(a.lo == b.lo && a.hi == b.hi && a.scale == b.scale && a.zero_point == b.zero_point);
            assert_true(a.lo == d.lo && a.hi == d.hi && a.bin == d.bin && a.count == n);
            if (a.histogram) {
                assert_memory_equal(a.histogram, b.histogram, NPUC_ACT_BINS * sizeof *a.histogram);
                assert_memory_equal(a.histogram, d.histogram, NPUC_ACT_BINS * sizeof *a.histogram);
            }
            npuc_act_calib_free(c1);
            npuc_act_calib_free(c2);
            npuc_act_calib_free(c3);
        }
    free(x);
}

static void test_zero_and_bad(void **state) {
    (void)state;
    float z[600] = {0};
    const char *M[] = {"minmax", "percentile=99", "entropy", "mse"};
    for (size_t k = 0; k < 4; k++) {
        npuc_act_result r = run(z, 600, 600, M[k], 1, NULL, NULL);
        assert_true(r.lo == 0.0f && r.hi == 0.0f && r.scale == FLT_MIN && r.zero_point == 0);
    }
    npuc_ctx *ctx;
    assert_int_equal(npuc_ctx_new(&ctx), NPUC_OK);
    npuc_act_opts o = npuc_act_opts_defaults();
    npuc_act_calib *c;
    assert_int_equal(npuc_act_calib_new(ctx, "acts.safetensors: tensor 'x'", 2, &o, &c), NPUC_OK);
    float v[4] = {1.0f, NAN, 2.0f, INFINITY};
    assert_int_equal(npuc_act_calib_feed(ctx, c, v, 1, 2), NPUC_ERR_VALUE);
    assert_string_equal(npuc_ctx_errmsg(ctx),
                        "acts.safetensors: tensor 'x': 2 NaN or Inf values in the activation samples");
    npuc_act_result r;
    assert_int_equal(npuc_act_calib_result(c, 0, &r), NPUC_ERR_ARG); /* passes not done */
    npuc_act_calib_free(c);
    /* No samples at all. */
    assert_int_equal(npuc_act_calib_new(ctx, "e", 1, &o, &c), NPUC_OK);
    int more;
    assert_int_equal(npuc_act_calib_end_pass(ctx, c, &more), NPUC_ERR_VALUE);
    npuc_act_calib_free(c);
    o.range.bits = 1;
    assert_int_equal(npuc_act_calib_new(ctx, "b", 1, &o, &c), NPUC_ERR_ARG);
    assert_null(c);
    npuc_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_percentile_ties_and_outlier),
        cmocka_unit_test(test_chunking_invariant),
        cmocka_unit_test(test_zero_and_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
