/*
 * calib_out_error.c - the relative output error ||(W - W') X^T|| / ||W X^T||
 * of a compressed weight over its calibration rows (calib_out_error.h).
 *
 * W and D = W - W' are gathered into [C, K] F64 matrices in the reduction
 * order.  From W.input the rows stream in chunks (the reader's, at most
 * 16 MiB) cut into sub-blocks of at most SUB_ROWS rows, and each tile of
 * TILE channels forms P = X_sub T^T with one dgemm and adds sum(P^2) to its
 * own total; from W.hessian (H = X^T X, [K, K]) each tile forms M = T H and
 * adds sum(M .* T), the same sum since ||T X^T||^2 = tr(T X^T X T^T).  The
 * tiles and sub-blocks depend only on the tensor and the file, BLAS runs on
 * one thread inside each OpenMP task and tile totals are added in tile
 * order, so the figures are the same for any thread count.  Memory: the two
 * gathered matrices (4x the tensor as F32) plus per thread TILE x
 * max(SUB_ROWS, K) doubles, plus H (K x K) on the Hessian path.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#if defined(_OPENMP)
#include <omp.h>
#endif

#include "calib_out_error.h"

#define TILE 64u
#define SUB_ROWS 16384u

typedef struct oe_state {
    const double *W, *D; /* [C, K] */
    uint64_t C, K, ntiles;
    double *ey;          /* per tile: e2 at 2t, y2 at 2t + 1 */
    double *scratch;     /* per thread: TILE * max(SUB_ROWS, K) doubles */
    size_t per_thread;
    int nth;
} oe_state;

static int thread_id(void) {
#if defined(_OPENMP)
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static double sum_sq(const double *p, uint64_t n) {
    double s = 0;
    for (uint64_t i = 0; i < n; i++) s += p[i] * p[i];
    return s;
}

/* One chunk of rows: every tile adds ||X T_D^T||^2 and ||X T_W^T||^2. */
static npuc_status oe_rows(void *u, const double *X, uint64_t rows) {
    oe_state *s = u;
    for (uint64_t r0 = 0; r0 < rows; r0 += SUB_ROWS) {
        const uint64_t nr = rows - r0 < SUB_ROWS ? rows - r0 : SUB_ROWS;
#pragma omp parallel for schedule(dynamic, 1) num_threads(s->nth)
        for (int64_t ti = 0; ti < (int64_t)s->ntiles; ti++) {
            const uint64_t c0 = (uint64_t)ti * TILE, nc = s->C - c0 < TILE ? s->C - c0 : TILE;
            double *P = s->scratch + (size_t)thread_id() * s->per_thread;
            for (int which = 0; which < 2; which++) {
                const double *T = (which ? s->W : s->D) + c0 * s->K;
                cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nr, (int)nc, (int)s->K, 1.0,
                            X + r0 * s->K, (int)s->K, T, (int)s->K, 0.0, P, (int)nc);
                s->ey[2 * ti + which] += sum_sq(P, nr * nc);
            }
        }
    }
    return NPUC_OK;
}

/* The Hessian path: every tile adds tr(T H T^T) for T = D and T = W. */
static void oe_hessian(oe_state *s, const double *H) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(s->nth)
    for (int64_t ti = 0; ti < (int64_t)s->ntiles; ti++) {
        const uint64_t c0 = (uint64_t)ti * TILE, nc = s->C - c0 < TILE ? s->C - c0 : TILE;
        double *M = s->scratch + (size_t)thread_id() * s->per_thread;
        for (int which = 0; which < 2; which++) {
            const double *T = (which ? s->W : s->D) + c0 * s->K;
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nc, (int)s->K, (int)s->K, 1.0, T,
                        (int)s->K, H, (int)s->K, 0.0, M, (int)s->K);
            double e = 0;
            for (uint64_t i = 0; i < nc * s->K; i++) e += M[i] * T[i];
            s->ey[2 * ti + which] = e;
        }
    }
}

/* Gathers w and w - wq into [C, K] in the reduction order; -1 when a value
 * is not finite. */
static int gather(const float *w, const float *wq, uint64_t outer, uint64_t C, uint64_t inner, double *W,
                  double *D) {
    const uint64_t K = outer * inner;
    for (uint64_t o = 0; o < outer; o++)
        for (uint64_t c = 0; c < C; c++)
            for (uint64_t k = 0; k < inner; k++) {
                const uint64_t src = (o * C + c) * inner + k, dst = c * K + o * inner + k;
                if (!isfinite(w[src]) || !isfinite(wq[src])) return -1;
                W[dst] = (double)w[src];
                D[dst] = (double)w[src] - (double)wq[src];
            }
    return 0;
}

npuc_status npuc__out_error_measure(npuc_ctx *ctx, npuc_calib *c, const npuc_tensor_info *t, const float *w,
                                    const float *wq, npuc_tensor_record *r, const char **why) {
    uint64_t outer, C, inner, mk, per, hb;
    *why = NULL;
    if (npuc_calib_has(c, t->name) != 1) {
        *why = "no calibration data";
        return NPUC_OK;
    }
    if (t->layout == NPUC_LAYOUT_NONE || npuc_layout_view(t, &outer, &C, &inner) != NPUC_OK) {
        *why = "no channel axis";
        return NPUC_OK;
    }
    const uint64_t K = outer * inner;
    if (!C || !K) {
        *why = "empty";
        return NPUC_OK;
    }
    oe_state s = {.C = C, .K = K, .ntiles = (C + TILE - 1) / TILE, .nth = npuc__calib_threads(ctx)};
    s.per_thread = (size_t)TILE * (K > SUB_ROWS ? K : SUB_ROWS);
    if (K > INT32_MAX || C > INT32_MAX || npuc_mul_overflow(C, K, &mk) ||
        npuc_mul_overflow(mk, sizeof(double), &mk) || (size_t)mk != mk ||
        npuc_mul_overflow(s.per_thread, (uint64_t)s.nth * sizeof(double), &per) || (size_t)per != per ||
        npuc_mul_overflow(K * K, sizeof(double), &hb))
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "tensor '%s': too large for the output error", t->name);
    double *W = malloc((size_t)mk), *D = malloc((size_t)mk), *H = NULL, n = 0;
    s.scratch = malloc((size_t)per);
    s.ey = calloc(2 * s.ntiles, sizeof(double));
    npuc_status st = NPUC_OK;
    int found = 0;
    const int prev = openblas_get_num_threads();
    if (!W || !D || !s.scratch || !s.ey) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "tensor '%s': out of memory", t->name);
        goto done;
    }
    if (gather(w, wq, outer, C, inner, W, D) != 0) {
        *why = "non-finite values";
        goto done;
    }
    s.W = W;
    s.D = D;
    if (prev != 1) openblas_set_num_threads(1);
    st = npuc__calib_input_rows(ctx, c, t->name, K, oe_rows, &s, &n, &found);
    if (st == NPUC_OK && !found) {
        if (!(H = (size_t)hb == hb ? malloc((size_t)hb) : NULL)) {
            st = npuc_fail(ctx, NPUC_ERR_NOMEM, "tensor '%s': out of memory for its %llux%llu Hessian", t->name,
                           (unsigned long long)K, (unsigned long long)K);
        } else if ((st = npuc_calib_hessian(ctx, c, t->name, K, H, &n, &found)) == NPUC_OK && found) {
            oe_hessian(&s, H);
        }
    }
    if (prev != 1 && prev > 0) openblas_set_num_threads(prev);
    if (st != NPUC_OK || !found) {
        if (st == NPUC_OK) *why = "no calibration data";
        goto done;
    }
    double e2 = 0, y2 = 0;
    for (uint64_t ti = 0; ti < s.ntiles; ti++) {
        e2 += s.ey[2 * ti];
        y2 += s.ey[2 * ti + 1];
    }
    /* A Hessian from a file is only nearly positive semidefinite: a tiny
     * negative rounding residue is an error of 0. */
    if (e2 < 0) e2 = 0;
    if (y2 < 0) y2 = 0;
    r->has_out_error = 1;
    r->out_e2 = e2;
    r->out_y2 = y2;
    r->out_rel_error = e2 == 0 ? 0.0 : y2 == 0 ? INFINITY : sqrt(e2 / y2);
    npuc_record_set(r, "calib_rows", n);
done:
    free(W);
    free(D);
    free(H);
    free(s.scratch);
    free(s.ey);
    return st;
}
