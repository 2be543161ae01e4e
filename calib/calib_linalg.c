/*
 * calib_linalg.c - the blocked Cholesky factorisation and huge-page
 * buffers (calib_linalg.h).
 *
 * LAPACK's dpotrf on OpenBLAS threads inside its own calls, and how it
 * splits the work depends on the thread count; here the split is fixed by
 * the matrix alone (blocks of CHOL_BLOCK columns) and every BLAS call is
 * single-threaded, so the factor is the same bit for bit for any -j.
 */
#include <stdlib.h>
#include <sys/mman.h>

#include <cblas.h>
#include <lapacke.h>

#include "calib_linalg.h"

#define CHOL_BLOCK 256u
#define HUGE_PAGE ((size_t)2 << 20)

void *npuc__huge_alloc(size_t n) {
    if (n < 2 * HUGE_PAGE) return malloc(n ? n : 1);
    const size_t r = (n + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    void *p = NULL;
    if (r < n || posix_memalign(&p, HUGE_PAGE, r) != 0) return NULL;
#if defined(MADV_HUGEPAGE)
    (void)madvise(p, r, MADV_HUGEPAGE);
#endif
    return p;
}

int npuc__chol_upper(int nthreads, double *A, uint64_t K) {
    const int lda = (int)K;
    for (uint64_t k0 = 0; k0 < K; k0 += CHOL_BLOCK) {
        const uint64_t k1 = k0 + CHOL_BLOCK < K ? k0 + CHOL_BLOCK : K, nb = k1 - k0;
        const lapack_int info = LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'U', (lapack_int)nb, A + k0 * K + k0, lda);
        if (info != 0) return (int)(k0 + (uint64_t)info);
        const int64_t nblk = (int64_t)((K - k1 + CHOL_BLOCK - 1) / CHOL_BLOCK);
        /* R12 = R11^-T A12 */
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1)
        for (int64_t b = 0; b < nblk; b++) {
            const uint64_t j0 = k1 + (uint64_t)b * CHOL_BLOCK, j1 = j0 + CHOL_BLOCK < K ? j0 + CHOL_BLOCK : K;
            cblas_dtrsm(CblasColMajor, CblasLeft, CblasUpper, CblasTrans, CblasNonUnit, (int)nb, (int)(j1 - j0), 1.0,
                        A + k0 * K + k0, lda, A + j0 * K + k0, lda);
        }
        /* A22 -= R12^T R12, block column [j0, j1) down to its diagonal */
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1)
        for (int64_t b = nblk - 1; b >= 0; b--) {
            const uint64_t j0 = k1 + (uint64_t)b * CHOL_BLOCK, j1 = j0 + CHOL_BLOCK < K ? j0 + CHOL_BLOCK : K;
            cblas_dgemm(CblasColMajor, CblasTrans, CblasNoTrans, (int)(j1 - k1), (int)(j1 - j0), (int)nb, -1.0,
                        A + k1 * K + k0, lda, A + j0 * K + k0, lda, 1.0, A + j0 * K + k1, lda);
        }
    }
    return 0;
}
