/*
 * calib_out_error.c - the relative output error ||(W - W') X^T|| / ||W X^T||
 * of a compressed weight over its calibration rows (calib_out_error.h).
 *
 * From W.input: W and D = W - W' are gathered into [C, K] F64 matrices in
 * the reduction order; the rows stream in chunks (the reader's, at most
 * 16 MiB) cut into sub-blocks of at most SUB_ROWS rows, and each tile of
 * TILE channels forms P = X_sub T^T with one dgemm and adds sum(P^2) to its
 * own total.
 *
 * From W.hessian (H = X^T X, [K, K]): ||T X^T||^2 = tr(T H T^T) = ||T L||^2
 * with H = L L^T, a sum of squares that cannot cancel (sum(T H .* T) can,
 * when GPTQ has pushed D into H's small directions), and half the work of
 * forming T H: one Cholesky factorisation (calib_linalg.c) and, per tile of
 * HTILE channels, the tile's rows of W and D stacked and multiplied by L in
 * place with one dtrmm.  A Hessian summed from few rows or with dead inputs
 * is only semidefinite, where Cholesky breaks down on rounding: L factors
 * H + delta I instead, delta = 2^-40 max(diag H), and delta ||T||^2 is taken
 * off each tile's sum again (exact in exact arithmetic; in doubles the
 * subtraction costs at most 2^-40 of ||T||^2 max(diag H), far below the
 * factorisation's own rounding of about K 2^-53 of it).  Should even that
 * fail (a file's "Hessian" that is indefinite), H is read again and shifted
 * past its Gershgorin bound, which always factors; the figure then is what
 * the formula gives, clamped at 0.
 *
 * The tiles and sub-blocks depend only on the tensor and the file, BLAS
 * runs on one thread inside each OpenMP task and tile totals are added in
 * tile order, so the figures are the same for any thread count.  Memory:
 * from W.input the two gathered matrices (4x the tensor as F32) plus per
 * thread TILE x max(SUB_ROWS, K) doubles; from W.hessian H (K x K doubles)
 * plus per thread 2 HTILE x K doubles.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#if defined(_OPENMP)
#include <omp.h>
#endif

#include "calib_linalg.h"
#include "calib_out_error.h"

#define TILE 64u
#define SUB_ROWS 16384u
#define HTILE 256u

typedef struct oe_state {
    const float *w, *wq;      /* the tensor as stored */
    uint64_t outer, inner;    /* its layout view: element (c, j) at ((j / inner) * C + c) * inner + j % inner */
    const double *W, *D;      /* W.input path: [C, K] */
    const double *dw;         /* per channel: the factor on D's row (sqrt of the weight), or NULL */
    uint64_t C, K, ntiles;
    double *ey;               /* per tile: e2 at 2t, y2 at 2t + 1 */
    double *scratch;          /* per thread: per_thread doubles */
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

/* Channels [c0, c0 + nc) of w and of w - wq into W and D ([nc, K], the
 * reduction order). */
static void gather(const oe_state *s, uint64_t c0, uint64_t nc, double *W, double *D) {
    const uint64_t K = s->K, C = s->C, inner = s->inner;
    for (uint64_t o = 0; o < s->outer; o++)
        for (uint64_t c = c0; c < c0 + nc; c++)
            for (uint64_t k = 0; k < inner; k++) {
                const uint64_t src = (o * C + c) * inner + k, dst = (c - c0) * K + o * inner + k;
                W[dst] = (double)s->w[src];
                D[dst] = (double)s->w[src] - (double)s->wq[src];
                if (s->dw) D[dst] *= s->dw[c];
            }
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

/* The shift that makes H + delta I strictly diagonally dominant, hence
 * positive definite whatever H is: twice the largest Gershgorin excess,
 * plus d0. */
static double gershgorin_shift(const double *H, uint64_t K, double d0) {
    double g = 0;
    for (uint64_t a = 0; a < K; a++) {
        double off = 0;
        for (uint64_t b = 0; b < K; b++)
            if (b != a) off += fabs(H[a * K + b]);
        if (off - H[a * K + a] > g) g = off - H[a * K + a];
    }
    return 2 * g + d0;
}

/* The Hessian path: H + delta I = L L^T, then every tile adds ||T L||^2 -
 * delta ||T||^2 for T = D and T = W.  H holds the file's Hessian (n, found
 * as npuc_calib_hessian) and is overwritten. */
static npuc_status oe_hessian(npuc_ctx *ctx, npuc_calib *c, const char *name, oe_state *s, double *H) {
    const uint64_t K = s->K;
    double dmax = 0, delta, n;
    for (uint64_t j = 0; j < K; j++) dmax = H[j * K + j] > dmax ? H[j * K + j] : dmax;
    delta = dmax > 0 ? ldexp(dmax, -40) : 1.0;
    for (int attempt = 0;; attempt++) {
        for (uint64_t j = 0; j < K; j++) H[j * K + j] += delta;
        if (npuc__chol_upper(s->nth, H, K) == 0) break;
        int found = 0;
        npuc_status st = npuc_calib_hessian(ctx, c, name, K, H, &n, &found);
        if (st != NPUC_OK) return st;
        delta = gershgorin_shift(H, K, delta);
        if (attempt == 1 || !(delta < INFINITY))
            return npuc_fail(ctx, NPUC_ERR_VALUE, "%s: tensor '%s.hessian': cannot be factored for the output error",
                             npuc_calib_path(c), name);
    }
#pragma omp parallel for schedule(dynamic, 1) num_threads(s->nth)
    for (int64_t ti = 0; ti < (int64_t)s->ntiles; ti++) {
        const uint64_t c0 = (uint64_t)ti * HTILE, nc = s->C - c0 < HTILE ? s->C - c0 : HTILE;
        double *B = s->scratch + (size_t)thread_id() * s->per_thread, *BD = B + nc * K;
        gather(s, c0, nc, B, BD);
        const double w0 = sum_sq(B, nc * K), d0 = sum_sq(BD, nc * K);
        cblas_dtrmm(CblasRowMajor, CblasRight, CblasLower, CblasNoTrans, CblasNonUnit, (int)(2 * nc), (int)K, 1.0,
                    H, (int)K, B, (int)K);
        s->ey[2 * ti] = sum_sq(BD, nc * K) - delta * d0;
        s->ey[2 * ti + 1] = sum_sq(B, nc * K) - delta * w0;
    }
    return NPUC_OK;
}

npuc_status npuc__out_error_measure(npuc_ctx *ctx, npuc_calib *c, const npuc_tensor_info *t, const float *w,
                                    const float *wq, npuc_tensor_record *r, const char **why) {
    return npuc__out_error_measure_w(ctx, c, t, w, wq, NULL, r, NULL, why);
}

npuc_status npuc__out_error_measure_w(npuc_ctx *ctx, npuc_calib *c, const npuc_tensor_info *t, const float *w,
                                      const float *wq, const double *chan_w, npuc_tensor_record *r, double *rows,
                                      const char **why) {
    uint64_t outer, C, inner, mk, per, hb;
    *why = NULL;
    if (rows) *rows = 0;
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
    for (uint64_t i = 0; i < t->numel; i++)
        if (!isfinite(w[i]) || !isfinite(wq[i])) {
            *why = "non-finite values";
            return NPUC_OK;
        }
    const int from_input = npuc__calib_has_input(c, t->name);
    const uint64_t tile = from_input ? TILE : HTILE;
    oe_state s = {.w = w, .wq = wq, .outer = outer, .inner = inner, .C = C, .K = K,
                  .ntiles = (C + tile - 1) / tile, .nth = npuc__calib_threads(ctx)};
    s.per_thread = from_input ? (size_t)TILE * (K > SUB_ROWS ? K : SUB_ROWS) : (size_t)(2 * (C < HTILE ? C : HTILE)) * K;
    if (K > INT32_MAX || C > INT32_MAX || npuc_mul_overflow(C, K, &mk) ||
        npuc_mul_overflow(mk, sizeof(double), &mk) || (size_t)mk != mk ||
        npuc_mul_overflow(s.per_thread, (uint64_t)s.nth * sizeof(double), &per) || (size_t)per != per ||
        npuc_mul_overflow(K * K, sizeof(double), &hb) || (size_t)hb != hb)
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "tensor '%s': too large for the output error", t->name);
    double *W = NULL, *D = NULL, *H = NULL, *dw = NULL, n = 0;
    if (chan_w) {
        if (!(dw = malloc((size_t)C * sizeof *dw)))
            return npuc_fail(ctx, NPUC_ERR_NOMEM, "tensor '%s': out of memory for the output error", t->name);
        for (uint64_t k = 0; k < C; k++) dw[k] = sqrt(chan_w[k]);
        s.dw = dw;
    }
    s.scratch = npuc__huge_alloc((size_t)per);
    s.ey = calloc(2 * s.ntiles, sizeof(double));
    npuc_status st = NPUC_OK;
    int found = 0;
    const int prev = openblas_get_num_threads();
    if (from_input) {
        W = malloc((size_t)mk);
        D = malloc((size_t)mk);
    } else {
        H = npuc__huge_alloc((size_t)hb);
    }
    if (!s.scratch || !s.ey || (from_input ? !W || !D : !H)) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "tensor '%s': out of memory for the output error", t->name);
        goto done;
    }
    if (prev != 1) openblas_set_num_threads(1);
    if (from_input) {
        gather(&s, 0, C, W, D);
        s.W = W;
        s.D = D;
        st = npuc__calib_input_rows(ctx, c, t->name, K, oe_rows, &s, &n, &found);
    } else if ((st = npuc_calib_hessian(ctx, c, t->name, K, H, &n, &found)) == NPUC_OK && found) {
        st = oe_hessian(ctx, c, t->name, &s, H);
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
    if (rows) *rows = n;
done:
    free(dw);
    free(W);
    free(D);
    free(H);
    free(s.scratch);
    free(s.ey);
    return st;
}
