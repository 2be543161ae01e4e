/*
 * test_calib_linalg.c - the linear algebra GPTQ and the output error share
 * (calib_linalg.h): the blocked Cholesky factor of an SPD matrix spanning
 * several 256-column blocks reproduces the matrix (checked with plain loops
 * here, not LAPACK) and is the same bit for bit on 1 and 2 threads; a
 * matrix that is not positive definite is refused at the right column;
 * huge-page buffers are usable memory.
 */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "calib_linalg.h"

#define N 300 /* blocks of 256 + 44 */

/* A = B B^T / N + I, B uniform in [-1, 1): SPD, symmetric bytes. */
static void make_spd(double *A) {
    static double B[N * N];
    uint64_t s = 12345;
    for (size_t i = 0; i < N * N; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        B[i] = (double)(s >> 11) / 9007199254740992.0 * 2 - 1;
    }
    for (size_t a = 0; a < N; a++)
        for (size_t b = 0; b <= a; b++) {
            double v = a == b ? 1.0 : 0.0;
            for (size_t k = 0; k < N; k++) v += B[a * N + k] * B[b * N + k] / N;
            A[a * N + b] = A[b * N + a] = v;
        }
}

static void test_chol_blocks_threads(void **state) {
    (void)state;
    static double A[N * N], R1[N * N], R2[N * N];
    openblas_set_num_threads(1);
    make_spd(A);
    memcpy(R1, A, sizeof A);
    memcpy(R2, A, sizeof A);
    assert_int_equal(npuc__chol_upper(1, R1, N), 0);
    assert_int_equal(npuc__chol_upper(2, R2, N), 0);
    assert_memory_equal(R1, R2, sizeof R1);
    /* Row-major, L(i, j) = R1[i * N + j] for j <= i: L L^T = A. */
    double worst = 0;
    for (size_t a = 0; a < N; a++)
        for (size_t b = 0; b <= a; b++) {
            double v = 0;
            for (size_t k = 0; k <= b; k++) v += R1[a * N + k] * R1[b * N + k];
            const double e = fabs(v - A[a * N + b]) / sqrt(A[a * N + a] * A[b * N + b]);
            worst = e > worst ? e : worst;
        }
    assert_true(worst < 1e-13);
}

static void test_chol_refuses(void **state) {
    (void)state;
    static double A[N * N];
    for (size_t i = 0; i < N; i++) A[i * N + i] = 1;
    A[270 * N + 270] = -1; /* in the second block */
    assert_int_equal(npuc__chol_upper(2, A, N), 271);
}

static void test_huge_alloc(void **state) {
    (void)state;
    const size_t n = (size_t)5 << 20;
    unsigned char *p = npuc__huge_alloc(n), *q = npuc__huge_alloc(0);
    assert_non_null(p);
    assert_non_null(q);
    assert_int_equal((uintptr_t)p % ((uintptr_t)2 << 20), 0);
    memset(p, 0xab, n);
    assert_int_equal(p[n - 1], 0xab);
    free(p);
    free(q);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chol_blocks_threads),
        cmocka_unit_test(test_chol_refuses),
        cmocka_unit_test(test_huge_alloc),
    };
    return cmocka_run_group_tests_name("calib_linalg", tests, NULL, NULL);
}
