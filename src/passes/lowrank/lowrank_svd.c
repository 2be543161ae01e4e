/*
 * lowrank_svd.c - the exact and randomized truncated SVDs behind npuc lowrank.
 *
 * Exact: LAPACK sgesdd (divide and conquer), and sgesvd (QR iteration) when
 * sgesdd reports that its bidiagonal solver did not converge, which LAPACK
 * documents as possible but which practically never happens on real data.
 *
 * Randomized: Halko, Martinsson & Tropp, "Finding structure with randomness"
 * (SIAM Review 2011), algorithm 4.4 (randomized subspace iteration) followed
 * by algorithm 5.1 (direct SVD of the projection), with the intermediate
 * normalisations done by LU instead of QR as in Li, Linderman, Szlam,
 * Stanton, Kluger & Tygert, "Algorithm 971: an implementation of a
 * randomized algorithm for principal component analysis" (ACM TOMS 2017,
 * the fbpca package):
 *
 *     Omega ~ N(0, 1)^{m x l}          (here on X = W^T, see lowrank_internal.h)
 *     Y = X Omega
 *     repeat q times:  Y = X lu(X^T lu(Y))
 *     Q = qr(Y);   B = Q^T X  (l x m);   B = U_B S V_B^T;   X ~ (Q U_B) S V_B^T
 *
 * where lu(Y) is the factor P L of Y = P L U, a basis of Y's range.
 *
 * Normalising after every product keeps the small singular directions from
 * drowning in rounding error (the plain power scheme (X X^T)^q X Omega loses
 * everything below eps^(1/(2q+1)) of s_1).  Any well-conditioned basis of
 * the same column space does that job, and the unit lower-trapezoidal factor
 * of an LU factorisation with partial pivoting is one (its entries are at
 * most 1 in magnitude, its diagonal is 1), at a quarter of the flops of a
 * Householder QR (sgetrf: rows l^2 against 4 rows l^2 for sgeqrf + sorgqr).
 * Only the basis that B is projected on must be orthonormal, so the last
 * normalisation is a QR.  In exact arithmetic every iterate spans the same
 * subspace as with QR throughout, which is torch.svd_lowrank's
 * get_approximate_basis, so the two can be compared at equal (l, q); in
 * float, LU and QR throughout gave the same errors to 5 digits, seed for
 * seed.  The error of the rank-r truncation is within a factor
 * [1 + O((s_{r+1}/s_r)^{2q})] of the optimum for decaying spectra;
 * docs/lowrank.md has the measurements.
 *
 * Two arrangements keep the serial part small, which matters because the
 * passes over X scale with the thread count and LAPACK here does not: the
 * QRs are blocked Householder factorisations whose block-reflector updates
 * the threads share (orthonormalise), and the SVD of the wide l x m matrix B
 * is taken as the QR of B^T = X^T Q followed by the SVD of its l x l factor R.
 *
 * The Gaussian test matrix comes from a counter-based generator (SplitMix64
 * of seed and element index, Box-Muller), so it is the same for any thread
 * count and any machine.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <lapacke.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "passes/lowrank/lowrank_internal.h"

/* ------------------------------------------------------------- OpenBLAS */

int npuc__blas_enter(void) {
    int prev = openblas_get_num_threads();
    if (prev != 1) openblas_set_num_threads(1);
    return prev;
}

void npuc__blas_leave(int prev) {
    if (prev != 1 && prev > 0) openblas_set_num_threads(prev);
}

/* ------------------------------------------------------------- products */

int64_t npuc__gemm_block(int64_t rows) {
    /* Large enough that repacking the shared operand once per block stays a
     * small fraction of the work, small enough to give two threads several
     * blocks each on 4096-row matrices.  A function of `rows` alone. */
    int64_t b = (rows + 7) / 8;
    b = (b + 63) / 64 * 64;
    return b < 256 ? 256 : b;
}

/* Column-major C (M x N) = op(A) op(B), split into fixed blocks of rows of C
 * (split_rows) or of columns of C, one single-threaded sgemm per block. */
static void gemm_split(int nthreads, int split_rows, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
                       int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                       int64_t ldb, float *C, int64_t ldc) {
    int64_t total = split_rows ? M : N;
    int64_t blk = npuc__gemm_block(total);
    int64_t nb = (total + blk - 1) / blk;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads) if (nthreads > 1 && nb > 1)
    for (int64_t b = 0; b < nb; b++) {
        int64_t o = b * blk, len = total - o < blk ? total - o : blk;
        if (split_rows) {
            const float *Ab = ta == CblasNoTrans ? A + o : A + o * lda;
            cblas_sgemm(CblasColMajor, ta, tb, (int)len, (int)N, (int)K, 1.0f, Ab, (int)lda, B, (int)ldb,
                        0.0f, C + o, (int)ldc);
        } else {
            const float *Bb = tb == CblasNoTrans ? B + o * ldb : B + o;
            cblas_sgemm(CblasColMajor, ta, tb, (int)M, (int)len, (int)K, 1.0f, A, (int)lda, Bb, (int)ldb,
                        0.0f, C + o * ldc, (int)ldc);
        }
    }
}

void npuc__gemm_rows(const float *a, const float *b, float *c, int64_t m, int64_t n, int64_t k,
                     int nthreads) {
    /* Row-major C = A B is column-major C^T = B^T A^T: rows of C are columns of C^T. */
    gemm_split(nthreads, 0, CblasNoTrans, CblasNoTrans, n, m, k, b, n, a, k, c, n);
}

/* ------------------------------------------------------------- helpers */

static npuc_status lapack_fail(npuc_ctx *ctx, const char *what, const char *routine, lapack_int info) {
    if (info == LAPACK_WORK_MEMORY_ERROR || info == LAPACK_TRANSPOSE_MEMORY_ERROR)
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory in %s", what, routine);
    if (info > 0)
        return npuc_fail(ctx, NPUC_ERR_NUMERIC, "%s: %s did not converge (info %d)", what, routine, (int)info);
    return npuc_fail(ctx, NPUC_ERR_INTERNAL, "%s: %s rejected argument %d", what, routine, (int)-info);
}

static void *alloc_floats(int64_t a, int64_t b) {
    uint64_t n;
    if (a < 0 || b < 0 || npuc_mul_overflow((uint64_t)a, (uint64_t)b, &n) ||
        npuc_mul_overflow(n, sizeof(float), &n) || (uint64_t)(size_t)n != n)
        return NULL;
    return malloc(n ? (size_t)n : 1);
}

void npuc__svd_free(npuc__svd *s) {
    if (!s) return;
    free(s->s);
    free(s->u);
    free(s->vt);
    free(s->q);
    free(s->ub);
    memset(s, 0, sizeof *s);
}

/* ------------------------------------------------------------- LAPACK */

/* A workspace size from a LAPACK query.  The size comes back as a float,
 * which before LAPACK 3.11 (sroundup_lwork) may round a large count down by
 * up to 2^-24 relative; round up instead, and never go below the documented
 * minimum.  Returns -1 when it does not fit a 32-bit lapack_int. */
static lapack_int lwork_from(float query, double minimum) {
    double v = (double)query * (1.0 + 1.0 / 4194304.0) + 1.0;
    if (v < minimum) v = minimum;
    return v > (double)INT_MAX ? -1 : (lapack_int)v;
}

/* sgesdd / sgesvd on a column-major rows x cols matrix (lda = rows) with our
 * own workspace, so that the size query's rounding cannot bite. */
static lapack_int gesdd(char jobz, int64_t rows, int64_t cols, float *a, float *s, float *u, int64_t ldu,
                        float *vt, int64_t ldvt) {
    int64_t mn = rows < cols ? rows : cols, mx = rows < cols ? cols : rows;
    double minimum = jobz == 'N' ? 3.0 * mn + (mx > 7 * mn ? mx : 7.0 * mn)
                                 : 3.0 * mn + fmax((double)mx, 4.0 * mn * mn + 4.0 * mn);
    lapack_int *iwork = malloc(sizeof(lapack_int) * (size_t)(8 * mn));
    float q = 0, *work = NULL;
    if (!iwork) return LAPACK_WORK_MEMORY_ERROR;
    lapack_int info = LAPACKE_sgesdd_work(LAPACK_COL_MAJOR, jobz, (lapack_int)rows, (lapack_int)cols, a,
                                          (lapack_int)rows, s, u, (lapack_int)ldu, vt, (lapack_int)ldvt, &q, -1,
                                          iwork);
    if (info == 0) {
        lapack_int lwork = lwork_from(q, minimum);
        work = lwork > 0 ? malloc(sizeof(float) * (size_t)lwork) : NULL;
        info = !work ? LAPACK_WORK_MEMORY_ERROR
                     : LAPACKE_sgesdd_work(LAPACK_COL_MAJOR, jobz, (lapack_int)rows, (lapack_int)cols, a,
                                           (lapack_int)rows, s, u, (lapack_int)ldu, vt, (lapack_int)ldvt, work,
                                           lwork, iwork);
    }
    free(work);
    free(iwork);
    return info;
}

static lapack_int gesvd(char job, int64_t rows, int64_t cols, float *a, float *s, float *u, int64_t ldu,
                        float *vt, int64_t ldvt) {
    int64_t mn = rows < cols ? rows : cols, mx = rows < cols ? cols : rows;
    double minimum = fmax(3.0 * mn + mx, 5.0 * mn);
    float q = 0, *work = NULL;
    lapack_int info = LAPACKE_sgesvd_work(LAPACK_COL_MAJOR, job, job, (lapack_int)rows, (lapack_int)cols, a,
                                          (lapack_int)rows, s, u, (lapack_int)ldu, vt, (lapack_int)ldvt, &q, -1);
    if (info == 0) {
        lapack_int lwork = lwork_from(q, minimum);
        work = lwork > 0 ? malloc(sizeof(float) * (size_t)lwork) : NULL;
        info = !work ? LAPACK_WORK_MEMORY_ERROR
                     : LAPACKE_sgesvd_work(LAPACK_COL_MAJOR, job, job, (lapack_int)rows, (lapack_int)cols, a,
                                           (lapack_int)rows, s, u, (lapack_int)ldu, vt, (lapack_int)ldvt, work,
                                           lwork);
    }
    free(work);
    return info;
}

/* The SVD of the column-major rows x cols matrix a (lda = rows, destroyed;
 * `orig` restores it for the fallback): sgesdd unless force_gesvd, then
 * sgesvd when sgesdd did not converge.  job 'N' (values) or 'S' (thin). */
static npuc_status svd_dense(npuc_ctx *ctx, const char *what, char job, int force_gesvd, const float *orig,
                             float *a, int64_t rows, int64_t cols, float *s, float *u, int64_t ldu, float *vt,
                             int64_t ldvt) {
    lapack_int info = force_gesvd ? 1 : gesdd(job, rows, cols, a, s, u, ldu, vt, ldvt);
    if (info > 0) {
        memcpy(a, orig, (size_t)rows * (size_t)cols * sizeof(float));
        info = gesvd(job, rows, cols, a, s, u, ldu, vt, ldvt);
        if (info != 0) return lapack_fail(ctx, what, "sgesvd", info);
    } else if (info != 0) {
        return lapack_fail(ctx, what, "sgesdd", info);
    }
    int64_t mn = rows < cols ? rows : cols;
    for (int64_t i = 0; i < mn; i++)
        if (!isfinite(s[i]))
            return npuc_fail(ctx, NPUC_ERR_NUMERIC,
                             "%s: the SVD produced non-finite singular values (values too large for float?)", what);
    return NPUC_OK;
}

/* ------------------------------------------------------------- exact */

npuc_status npuc__svd_exact(npuc_ctx *ctx, const char *what, const float *w, int64_t m, int64_t n,
                            int method, npuc__svd *out) {
    memset(out, 0, sizeof *out);
    if (m < 1 || n < 1 || m > NPUC_SVD_DIM_MAX || n > NPUC_SVD_DIM_MAX)
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: matrix %lldx%lld is outside the SVD's size range", what,
                         (long long)m, (long long)n);
    int64_t mn = m < n ? m : n, mx = m < n ? n : m;
    /* The thin SVD's workspace, about 4 mn^2 floats, and the matrix itself
     * must stay within LAPACK's 32-bit counts. */
    double need = method == NPUC__SVD_VALUES ? 10.0 * mn + mx : 4.0 * mn * mn + 7.0 * mn + mx;
    if (need > (double)INT_MAX * 0.98 || (double)m * (double)n > (double)INT_MAX)
        return npuc_fail(ctx, NPUC_ERR_UNSUPPORTED,
                         "%s: %lldx%lld is too large for the exact solver (LAPACK's 32-bit workspace); "
                         "use the randomized solver", what, (long long)m, (long long)n);
    npuc_status st = NPUC_OK;
    int prev = npuc__blas_enter();
    float *x = alloc_floats(m, n);
    out->m = m;
    out->n = n;
    out->k = mn;
    out->s = alloc_floats(mn, 1);
    if (method != NPUC__SVD_VALUES) {
        out->u = alloc_floats(m, mn);   /* V_X^T: mn x m column-major = u of W, ld mn */
        out->vt = alloc_floats(mn, n);  /* U_X: n x mn column-major = vt of W */
        out->ldu = mn;
        out->kvt = mn;
    }
    if (!x || !out->s || (method != NPUC__SVD_VALUES && (!out->u || !out->vt))) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory for the SVD of a %lldx%lld matrix", what,
                       (long long)m, (long long)n);
        goto done;
    }
    /* X = W^T is n x m column-major with leading dimension n. */
    memcpy(x, w, (size_t)m * (size_t)n * sizeof(float));
    if (method == NPUC__SVD_VALUES) {
        float dummy[1] = {0};
        st = svd_dense(ctx, what, 'N', 0, w, x, n, m, out->s, dummy, 1, dummy, 1);
    } else {
        st = svd_dense(ctx, what, 'S', method == NPUC__SVD_GESVD, w, x, n, m, out->s, out->vt, n, out->u, mn);
    }
done:
    free(x);
    if (st != NPUC_OK) npuc__svd_free(out);
    npuc__blas_leave(prev);
    return st;
}

/* ------------------------------------------------------------- randomized */

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Fills g[0..count) with standard normal values: pair i comes from two
 * SplitMix64 outputs of (seed, i) through Box-Muller, so any element can be
 * produced independently and the result does not depend on the split. */
static void gaussian_fill(float *g, int64_t count, uint64_t seed, int nthreads) {
    const double two_pi = 6.283185307179586476925286766559;
    uint64_t key = splitmix64(seed ^ 0x6e7075632e6c72ull); /* "npuc.lr" */
    int64_t pairs = (count + 1) / 2;
#pragma omp parallel for schedule(static) num_threads(nthreads) if (nthreads > 1 && pairs > 65536)
    for (int64_t i = 0; i < pairs; i++) {
        uint64_t a = splitmix64(key + 2 * (uint64_t)i), b = splitmix64(key + 2 * (uint64_t)i + 1);
        double u1 = ((double)(a >> 11) + 0.5) * (1.0 / 9007199254740992.0); /* (0, 1) */
        double u2 = (double)(b >> 11) * (1.0 / 9007199254740992.0);         /* [0, 1) */
        double r = sqrt(-2.0 * log(u1));
        g[2 * i] = (float)(r * cos(two_pi * u2));
        if (2 * i + 1 < count) g[2 * i + 1] = (float)(r * sin(two_pi * u2));
    }
}

/* Replaces the rows x l column-major y (rows >= l) by a basis of a subspace
 * that contains its range: the factor P L of the LU factorisation with
 * partial pivoting y = P L U (LAPACK sgetrf), L unit lower trapezoidal with
 * entries of magnitude at most 1, rows put back in y's order.  When y is rank
 * deficient (a zero pivot, sgetrf's info > 0) L is still unit lower
 * triangular and so of full rank; the extra directions it then spans cannot
 * make the final projection worse.
 *
 * sgetrf runs on one thread: it costs under a tenth of one product with X
 * (15 ms against 170 ms on 4096 x 522), and a blocked LU whose trailing
 * updates the threads shared (as orthonormalise does) measured within 1 % of
 * it on two threads, because its panel factorisations stay serial. */
static npuc_status lu_basis(npuc_ctx *ctx, const char *what, float *y, int64_t rows, int64_t l) {
    lapack_int *ipiv = malloc(sizeof(lapack_int) * (size_t)l);
    if (!ipiv) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", what);
    lapack_int info = LAPACKE_sgetrf_work(LAPACK_COL_MAJOR, (lapack_int)rows, (lapack_int)l, y, (lapack_int)rows, ipiv);
    if (info < 0) {
        free(ipiv);
        return lapack_fail(ctx, what, "sgetrf", info);
    }
    /* U above the diagonal goes, L's unit diagonal comes back. */
    for (int64_t c = 0; c < l; c++) {
        float *col = y + c * rows;
        memset(col, 0, sizeof(float) * (size_t)c);
        col[c] = 1.0f;
    }
    /* P L: sgetrf's interchanges undone in reverse order (incx = -1). */
    info = LAPACKE_slaswp_work(LAPACK_COL_MAJOR, (lapack_int)l, y, (lapack_int)rows, 1, (lapack_int)l, ipiv, -1);
    free(ipiv);
    return info == 0 ? NPUC_OK : lapack_fail(ctx, what, "slaswp", info);
}

/* Householder QR in panels of QR_NB columns; the block reflectors are
 * applied QR_CB columns per LAPACK call. */
#define QR_NB 32
#define QR_CB 64

/* C := H C (trans 'N') or H^T C (trans 'T') for the block reflector
 * H = I - V T V^T of one panel (V: mrows x k, unit lower trapezoidal), on the
 * mrows x ncols matrix c.  The columns are split into fixed QR_CB-wide LAPACK
 * slarfb calls that the threads share, so every column is updated by the same
 * call whatever the thread count. */
static int apply_reflector(char trans, const float *v, int64_t ldv, const float *t, int64_t mrows, int64_t k,
                           float *c, int64_t ldc, int64_t ncols, int nthreads) {
    int64_t nb = (ncols + QR_CB - 1) / QR_CB;
    int failed = 0;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads) if (nthreads > 1 && nb > 1)
    for (int64_t b = 0; b < nb; b++) {
        float work[QR_CB * QR_NB];
        int64_t o = b * QR_CB, w = ncols - o < QR_CB ? ncols - o : QR_CB;
        lapack_int info = LAPACKE_slarfb_work(LAPACK_COL_MAJOR, 'L', trans, 'F', 'C', (lapack_int)mrows, (lapack_int)w,
                                              (lapack_int)k, v, (lapack_int)ldv, t, QR_NB, c + o * ldc,
                                              (lapack_int)ldc, work, (lapack_int)w);
        if (info != 0) {
#pragma omp atomic write
            failed = 1;
        }
    }
    return failed;
}

/* Replaces the rows x l column-major y (rows >= l) by an orthonormal basis
 * of its range, Q of y = Q R, and stores R (l x l, column-major, zeros below
 * the diagonal) in r when r is not NULL.
 *
 * This is LAPACK's blocked Householder QR (sgeqrf followed by sorgqr) with
 * the same reflectors, arranged so that threads can share it
 * deterministically: each QR_NB-column panel is factored by sgeqrt3
 * (recursive, level 3, giving the panel's triangular factor T directly), the
 * trailing columns and, backwards, the columns of Q are updated with slarfb
 * in fixed column blocks (apply_reflector).  A plain sgeqrf/sorgqr pair runs
 * on one thread (OpenBLAS' own threading is off, see npuc__blas_enter), and
 * five of them took as long as the six passes over a 4096 x 4096 matrix. */
static npuc_status orthonormalise(npuc_ctx *ctx, const char *what, float *y, int64_t rows, int64_t l, int nthreads,
                                  float *r) {
    int64_t np = (l + QR_NB - 1) / QR_NB;
    float *t = alloc_floats(np * QR_NB, QR_NB), *vb = alloc_floats(rows, QR_NB);
    npuc_status st = NPUC_OK;
    if (!t || !vb) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", what); goto done; }
    for (int64_t p = 0; p < np; p++) {
        int64_t j = p * QR_NB, jb = l - j < QR_NB ? l - j : QR_NB;
        float *panel = y + j + j * rows, *tp = t + p * QR_NB * QR_NB;
        lapack_int info = LAPACKE_sgeqrt3_work(LAPACK_COL_MAJOR, (lapack_int)(rows - j), (lapack_int)jb, panel,
                                               (lapack_int)rows, tp, QR_NB);
        if (info != 0) { st = lapack_fail(ctx, what, "sgeqrt3", info); goto done; }
        if (j + jb < l &&
            apply_reflector('T', panel, rows, tp, rows - j, jb, panel + jb * rows, rows, l - j - jb, nthreads)) {
            st = lapack_fail(ctx, what, "slarfb", -1);
            goto done;
        }
    }
    if (r)
        for (int64_t c = 0; c < l; c++)
            for (int64_t i = 0; i < l; i++) r[i + c * l] = i <= c ? y[i + c * rows] : 0.0f;
    /* Q = H_0 H_1 ... [I; 0], applied backwards: when panel p is reached, its
     * columns of the partial product are still unit vectors and the columns
     * to its right are zero above row j (LAPACK sorgqr's invariant). */
    for (int64_t p = np - 1; p >= 0; p--) {
        int64_t j = p * QR_NB, jb = l - j < QR_NB ? l - j : QR_NB, mj = rows - j;
        for (int64_t c = 0; c < jb; c++) {
            float *col = y + (j + c) * rows;
            memcpy(vb + c * mj, col + j, sizeof(float) * (size_t)mj);
            memset(col, 0, sizeof(float) * (size_t)rows);
            col[j + c] = 1.0f;
        }
        if (apply_reflector('N', vb, mj, t + p * QR_NB * QR_NB, mj, jb, y + j + j * rows, rows, l - j, nthreads)) {
            st = lapack_fail(ctx, what, "slarfb", -1);
            goto done;
        }
    }
done:
    free(t);
    free(vb);
    return st;
}

npuc_status npuc__svd_randomized(npuc_ctx *ctx, const char *what, const float *w, int64_t m,
                                 int64_t n, int64_t l, int power_iters, uint64_t seed,
                                 int nthreads, npuc__svd *out) {
    memset(out, 0, sizeof *out);
    int64_t mn = m < n ? m : n;
    if (m < 1 || n < 1 || m > NPUC_SVD_DIM_MAX || n > NPUC_SVD_DIM_MAX || l < 1 || l > mn)
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: sketch width %lld does not fit a %lldx%lld matrix", what,
                         (long long)l, (long long)m, (long long)n);
    if ((double)l * (double)(m > n ? m : n) > (double)INT_MAX * 4.0)
        return npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: sketch %lld x %lld is too large", what, (long long)l,
                         (long long)(m > n ? m : n));
    if (nthreads < 1) nthreads = 1;
    npuc_status st = NPUC_OK;
    int prev = npuc__blas_enter();
    /* X = W^T: p x q column-major, p = n, q = m, leading dimension n. */
    const float *X = w;
    const int64_t p = n, q = m;
    float *y = alloc_floats(p, l);      /* range of X: p x l */
    float *z = alloc_floats(q, l);      /* range of X^T, and Omega: q x l */
    float *bm = alloc_floats(l, l);     /* R of B^T = X^T Q */
    out->m = m;
    out->n = n;
    out->k = l;
    out->randomized = 1;
    out->s = alloc_floats(l, 1);
    out->u = alloc_floats(l, q);        /* V_B^T: l x q column-major = u of W, ld l */
    out->ldu = l;
    out->ub = alloc_floats(l, l);
    if (!y || !z || !bm || !out->s || !out->u || !out->ub) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory for a randomized SVD of width %lld", what,
                       (long long)l);
        goto done;
    }
    gaussian_fill(z, q * l, seed, nthreads);
    /* Y = X Omega: split over rows of X. */
    gemm_split(nthreads, 1, CblasNoTrans, CblasNoTrans, p, l, q, X, p, z, q, y, p);
    /* LU bases in between, an orthonormal Q after the last product (fbpca's
     * arrangement, see the top of this file). */
    st = power_iters > 0 ? lu_basis(ctx, what, y, p, l) : orthonormalise(ctx, what, y, p, l, nthreads, NULL);
    if (st != NPUC_OK) goto done;
    for (int it = 0; it < power_iters; it++) {
        /* Z = X^T Y: rows of Z are columns of X. */
        gemm_split(nthreads, 1, CblasTrans, CblasNoTrans, q, l, p, X, p, y, p, z, q);
        if ((st = lu_basis(ctx, what, z, q, l)) != NPUC_OK) goto done;
        gemm_split(nthreads, 1, CblasNoTrans, CblasNoTrans, p, l, q, X, p, z, q, y, p);
        st = it + 1 < power_iters ? lu_basis(ctx, what, y, p, l) : orthonormalise(ctx, what, y, p, l, nthreads, NULL);
        if (st != NPUC_OK) goto done;
    }
    /* The projection B = Q^T X (l x q), by way of B^T = X^T Q = Q_b R_b: then
     * B = R_b^T Q_b^T, and with R_b = U_2 S V_2^T,  B = V_2 S (Q_b U_2)^T.
     * Only the l x l SVD is serial; sgesdd on the wide B would spend most of
     * its time in a serial LQ factorisation of B. */
    gemm_split(nthreads, 1, CblasTrans, CblasNoTrans, q, l, p, X, p, y, p, z, q);
    if ((st = orthonormalise(ctx, what, z, q, l, nthreads, bm)) != NPUC_OK) goto done;
    {
        float *u2 = alloc_floats(l, l), *v2t = alloc_floats(l, l), *rcopy = alloc_floats(l, l);
        if (!u2 || !v2t || !rcopy) {
            free(u2); free(v2t); free(rcopy);
            st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", what);
            goto done;
        }
        memcpy(rcopy, bm, sizeof(float) * (size_t)l * (size_t)l);
        st = svd_dense(ctx, what, 'S', 0, rcopy, bm, l, l, out->s, u2, l, v2t, l);
        if (st == NPUC_OK) {
            /* U_B = V_2: the transpose of sgesdd's V_2^T. */
            for (int64_t i = 0; i < l; i++)
                for (int64_t j = 0; j < l; j++) out->ub[i + j * l] = v2t[j + i * l];
            /* W's left vectors are V_X = Q_b U_2 (q x l); as m x l row-major
             * they are the column-major l x q matrix U_2^T Q_b^T. */
            gemm_split(nthreads, 0, CblasTrans, CblasTrans, l, q, l, u2, l, z, q, out->u, l);
        }
        free(u2);
        free(v2t);
        free(rcopy);
        if (st != NPUC_OK) goto done;
    }
    out->q = y;
    y = NULL;
done:
    free(y);
    free(z);
    free(bm);
    if (st != NPUC_OK) npuc__svd_free(out);
    npuc__blas_leave(prev);
    return st;
}

npuc_status npuc__svd_vt(npuc_ctx *ctx, npuc__svd *s, int64_t r, int nthreads) {
    if (r < 1 || r > s->k) return npuc_fail(ctx, NPUC_ERR_INTERNAL, "SVD: %lld vectors asked of %lld", (long long)r, (long long)s->k);
    if (!s->randomized || (s->vt && s->kvt >= r)) return NPUC_OK;
    float *vt = alloc_floats(r, s->n);
    if (!vt) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    int prev = npuc__blas_enter();
    /* Row j of W's vt is column j of U_X = Q U_B (n x r column-major). */
    gemm_split(nthreads < 1 ? 1 : nthreads, 1, CblasNoTrans, CblasNoTrans, s->n, r, s->k, s->q, s->n, s->ub,
               s->k, vt, s->n);
    npuc__blas_leave(prev);
    free(s->vt);
    s->vt = vt;
    s->kvt = r;
    return NPUC_OK;
}
