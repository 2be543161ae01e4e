/*
 * test_calib_file.c - calibration files (npuc/calib.h): the Hessian sum
 * streamed from W.input equals, bit for bit, whatever the chunk size and the
 * thread count, and agrees with a plain double sum written here; W.hessian
 * with its count, W.input_sq, missing entries and malformed ones.
 *
 * The file is written byte by byte here (safetensors: an 8-byte header
 * length, a JSON header, the data), not by npuc's writer.
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 300
#define K 37

/* The plain sum agrees this closely (it adds in another order). */
#define SUM_RTOL 1e-12

static float X[N * K];
static double H_ref[K * K], HS[K * K];
static float SQ[K];

static const char *make_file(void) {
    uint64_t rng = 99;
    for (size_t i = 0; i < N * K; i++) X[i] = npuc_test_randn(&rng) * (float)(1 + i % K);
    for (size_t i = 3; i < N * K; i += K) X[i] += 100.0f; /* a column with a large mean */
    memset(H_ref, 0, sizeof H_ref);
    for (size_t r = 0; r < N; r++)
        for (size_t a = 0; a < K; a++)
            for (size_t b = 0; b < K; b++) H_ref[a * K + b] += (double)X[r * K + a] * X[r * K + b];
    for (size_t i = 0; i < K * K; i++) HS[i] = H_ref[i];
    for (size_t k = 0; k < K; k++) SQ[k] = 0.5f + (float)k;
    const int64_t count = 1234;

    const size_t nx = sizeof X, nh = sizeof HS, nsq = sizeof SQ, nbad = K * (K - 1) * 4;
    char hdr[1024];
    int n = snprintf(hdr, sizeof hdr,
                     "{\"a.weight.input\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[0,%zu]},"
                     "\"b.weight.hessian\":{\"dtype\":\"F64\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]},"
                     "\"b.weight.hessian_count\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[%zu,%zu]},"
                     "\"c.weight.input_sq\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]},"
                     "\"d.weight.hessian\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]}}",
                     N, K, nx, K, K, nx, nx + nh, nx + nh, nx + nh + 8, K, nx + nh + 8, nx + nh + 8 + nsq, K,
                     K - 1, nx + nh + 8 + nsq, nx + nh + 8 + nsq + nbad);
    while (n % 8) hdr[n++] = ' ';
    const size_t total = 8 + (size_t)n + nx + nh + 8 + nsq + nbad;
    unsigned char *buf = calloc(1, total), *p = buf;
    assert_non_null(buf);
    const uint64_t hl = (uint64_t)n;
    for (int i = 0; i < 8; i++) *p++ = (unsigned char)(hl >> (8 * i));
    memcpy(p, hdr, (size_t)n), p += n;
    memcpy(p, X, nx), p += nx; /* little-endian host */
    memcpy(p, HS, nh), p += nh;
    memcpy(p, &count, 8), p += 8;
    memcpy(p, SQ, nsq);
    const char *path = npuc_test_path("calib.safetensors");
    npuc_test_write_file(path, buf, total);
    free(buf);
    return path;
}

/* A fresh file, context and handle. */
static void open_fresh(npuc_ctx **ctx, npuc_calib **c) {
    const char *path = make_file();
    assert_int_equal(npuc_ctx_new(ctx), NPUC_OK);
    assert_int_equal(npuc_calib_open(*ctx, path, c), NPUC_OK);
}

static void test_stream_chunks_threads(void **state) {
    (void)state;
    npuc_ctx *ctx;
    npuc_calib *c;
    open_fresh(&ctx, &c);
    static double H0[K * K], H1[K * K];
    double n = 0;
    int found = 0;
    npuc_calib_set_chunk_rows(c, 0); /* one chunk: all 300 rows */
    assert_int_equal(npuc_calib_hessian(ctx, c, "a.weight", K, H0, &n, &found), NPUC_OK);
    assert_int_equal(found, 1);
    assert_true(n == N);
    for (size_t i = 0; i < K * K; i++) assert_close(H0[i], H_ref[i], SUM_RTOL, 1e-9);
    const size_t chunks[] = {1, 64, 65, 128, 256, 1000};
    for (size_t ci = 0; ci < sizeof chunks / sizeof chunks[0]; ci++)
        for (int th = 1; th <= 2; th++) {
            npuc_ctx_set_threads(ctx, th);
            npuc_calib_set_chunk_rows(c, chunks[ci]);
            memset(H1, 0xff, sizeof H1);
            assert_int_equal(npuc_calib_hessian(ctx, c, "a.weight", K, H1, &n, &found), NPUC_OK);
            assert_memory_equal(H1, H0, sizeof H0);
        }
    /* importance from the inputs: diag / N */
    static double imp[K];
    assert_int_equal(npuc_calib_importance(ctx, c, "a.weight", K, imp, &found), NPUC_OK);
    assert_int_equal(found, 1);
    for (size_t k = 0; k < K; k++) assert_true(imp[k] == H0[k * K + k] / N);
    npuc_calib_close(c);
    npuc_ctx_free(ctx);
}

static void test_stored_and_missing(void **state) {
    (void)state;
    npuc_ctx *ctx;
    npuc_calib *c;
    open_fresh(&ctx, &c);
    assert_int_equal(npuc_calib_has(c, "a.weight"), 1);
    assert_int_equal(npuc_calib_has(c, "b.weight"), 1);
    assert_int_equal(npuc_calib_has(c, "c.weight"), 2);
    assert_int_equal(npuc_calib_has(c, "zzz"), 0);
    static double H[K * K], imp[K];
    double n = 0;
    int found = 0;
    assert_int_equal(npuc_calib_hessian(ctx, c, "b.weight", K, H, &n, &found), NPUC_OK);
    assert_int_equal(found, 1);
    assert_true(n == 1234);
    assert_memory_equal(H, HS, sizeof H);
    assert_int_equal(npuc_calib_importance(ctx, c, "c.weight", K, imp, &found), NPUC_OK);
    assert_int_equal(found, 1);
    for (size_t k = 0; k < K; k++) assert_true(imp[k] == (double)SQ[k]);
    assert_int_equal(npuc_calib_hessian(ctx, c, "zzz", K, H, &n, &found), NPUC_OK);
    assert_int_equal(found, 0);
    assert_int_equal(npuc_calib_hessian(ctx, c, "c.weight", K, H, &n, &found), NPUC_OK);
    assert_int_equal(found, 0);
    /* wrong K, a non-square Hessian, a Hessian without its count */
    assert_int_equal(npuc_calib_hessian(ctx, c, "a.weight", K + 1, H, &n, &found), NPUC_ERR_FORMAT);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "a.weight.input"));
    assert_int_equal(npuc_calib_hessian(ctx, c, "d.weight", K, H, &n, &found), NPUC_ERR_FORMAT);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "d.weight.hessian"));
    assert_int_equal(npuc_calib_importance(ctx, c, "c.weight", K - 1, imp, &found), NPUC_ERR_FORMAT);
    npuc_calib_close(c);
    npuc_calib_close(NULL);
    assert_int_not_equal(npuc_calib_open(ctx, npuc_test_path("absent.safetensors"), &c), NPUC_OK);
    assert_null(c);
    npuc_ctx_free(ctx);
}

/* A stored F64 Hessian of K >= 512 is read straight into the caller's H
 * in row blocks on the context's threads (hessian_stored): the values as
 * written, the upper triangle taken from the lower one (an asymmetry far
 * below the tolerance is evened out), at 1 and 2 threads; one NaN anywhere
 * is refused with the tensor's name. */
#define KB 520 /* not a multiple of the 64-row blocks */
static void write_big(const char *path, const double *h, int with_count) {
    const size_t nh = sizeof(double) * KB * KB;
    char hdr[512];
    int n = with_count ? snprintf(hdr, sizeof hdr,
                                  "{\"w.hessian\":{\"dtype\":\"F64\",\"shape\":[%d,%d],\"data_offsets\":[0,%zu]},"
                                  "\"w.hessian_count\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[%zu,%zu]}}",
                                  KB, KB, nh, nh, nh + 8)
                       : 0;
    while (n % 8) hdr[n++] = ' ';
    const size_t total = 8 + (size_t)n + nh + 8;
    unsigned char *buf = calloc(1, total), *p = buf;
    assert_non_null(buf);
    for (int i = 0; i < 8; i++) *p++ = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(p, hdr, (size_t)n), p += n;
    memcpy(p, h, nh), p += nh;
    const int64_t count = 7;
    memcpy(p, &count, 8);
    npuc_test_write_file(path, buf, total);
    free(buf);
}

static void test_stored_large(void **state) {
    (void)state;
    double *h = malloc(sizeof(double) * KB * KB), *H = malloc(sizeof(double) * KB * KB);
    assert_non_null(h);
    assert_non_null(H);
    uint64_t rng = 5;
    for (size_t a = 0; a < KB; a++)
        for (size_t b = 0; b <= a; b++) {
            const double v = a == b ? 50.0 + (double)a : (double)npuc_test_randn(&rng);
            h[a * KB + b] = v;
            h[b * KB + a] = a == b ? v : v * (1 + 1e-12); /* within the symmetry tolerance */
        }
    const char *path = npuc_test_path("big_h.safetensors");
    write_big(path, h, 1);
    for (int threads = 1; threads <= 2; threads++) {
        npuc_ctx *ctx;
        npuc_calib *c;
        assert_int_equal(npuc_ctx_new(&ctx), NPUC_OK);
        npuc_ctx_set_threads(ctx, threads);
        assert_int_equal(npuc_calib_open(ctx, path, &c), NPUC_OK);
        double n = 0;
        int found = 0;
        memset(H, 0, sizeof(double) * KB * KB);
        assert_int_equal(npuc_calib_hessian(ctx, c, "w", KB, H, &n, &found), NPUC_OK);
        assert_int_equal(found, 1);
        assert_true(n == 7);
        for (size_t a = 0; a < KB; a++)
            for (size_t b = 0; b < KB; b++) {
                const double want = a >= b ? h[a * KB + b] : h[b * KB + a];
                if (H[a * KB + b] != want) fail_msg("H[%zu, %zu] = %.17g, want %.17g", a, b, H[a * KB + b], want);
            }
        npuc_calib_close(c);
        npuc_ctx_free(ctx);
    }
    h[300 * KB + 7] = NAN;
    write_big(path, h, 1);
    npuc_ctx *ctx;
    npuc_calib *c;
    assert_int_equal(npuc_ctx_new(&ctx), NPUC_OK);
    npuc_ctx_set_threads(ctx, 2);
    assert_int_equal(npuc_calib_open(ctx, path, &c), NPUC_OK);
    double n = 0;
    int found = 0;
    assert_int_equal(npuc_calib_hessian(ctx, c, "w", KB, H, &n, &found), NPUC_ERR_FORMAT);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "w.hessian"));
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "NaN"));
    npuc_calib_close(c);
    npuc_ctx_free(ctx);
    free(h);
    free(H);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_chunks_threads),
        cmocka_unit_test(test_stored_and_missing),
        cmocka_unit_test(test_stored_large),
    };
    return cmocka_run_group_tests_name("calib_file", tests, NULL, NULL);
}
