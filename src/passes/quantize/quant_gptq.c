/*
 * quant_gptq.c - GPTQ for one tensor (quant_gptq.h), written from the
 * paper's algorithm and its reference code's choices:
 *
 *   H = 2 S / n (S = sum x x^T); a dead column (H_jj = 0: an input that is
 *   always 0) gets H_jj = 1 and its weights set to 0; with act-order the
 *   columns are permuted by decreasing H_jj; H_jj += damp * mean(diag H);
 *   U = the upper Cholesky factor of H^-1, which is the reversal of the
 *   inverse of the upper Cholesky factor of H reversed (inverse_factor:
 *   one Cholesky factorisation and one triangular inverse instead of the
 *   reference's three factorisations; the same U up to rounding);
 *   in blocks of B = 128 columns, column by column: q = Q(w_j), the error
 *   e = (w_j - q) / U_jj is fed back into the block's later columns
 *   (w_k -= e U_jk), and at the end of the block the rest of the row takes
 *   the whole block's errors at once (W[:, i2:] -= E U[i1:i2, i2:], the
 *   lazy batch update, one sgemm per tile and block: the rows wait between
 *   blocks in float32, as the reference's torch code keeps them; the
 *   column-by-column work inside a block is in double).
 *
 * Scales: per channel from the row before any update; per group, when the
 * group's first column is reached, from the row as it stands at the start
 * of the current block (the reference reads W, not the block's working
 * copy); with act-order, per group from the weights before any update in
 * stored order (AutoGPTQ's static groups), so every stored group keeps one
 * scale although its columns are visited out of order.  The grid and the
 * arithmetic of each code are the kernels' (qk_scalar.h, npuc_qk_elem).
 *
 * Rows are independent given U: they are processed in tiles of TILE rows
 * whose boundaries depend only on the tensor, each tile by one thread with
 * single-threaded BLAS (npuc__blas_enter), so codes are the same for any -j.
 * The Cholesky factorisation (calib_linalg.c, shared with the output error)
 * and the triangular inverse are split the same way (fixed column blocks,
 * one single-threaded BLAS call each).  The output error's sums come from U
 * too (out_sums), so a GPTQ run reads and factors H once.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <lapacke.h>

#include "calib_linalg.h"
#include "codecs/codec.h"
#include "kernels/qk_grid.h"
#include "kernels/qk_scalar.h"
#include "npuc_internal.h"
#include "passes/lowrank/lowrank_internal.h"
#include "passes/pass_util.h"
#include "passes/quantize/quant_gptq.h"

#define BLOCK 128u
#define TILE 128u  /* rows per tile: each tile streams U once per block */
#define RI 4u      /* rows interleaved in the column loop */
#define INV_BLOCK 256u /* columns per BLAS call of the triangular inverse */

/* What every tile shares. */
typedef struct gjob {
    const float *w;
    const npuc_quant_shape *qs;
    const npuc_quant_params *p;
    uint64_t K, G; /* G: group length in columns (K per channel) */
    const double *U;          /* K x K upper factor, permuted order */
    const float *Uf;          /* U in float32, for the lazy batch update */
    const uint64_t *perm;     /* permuted column -> stored column (identity without act-order) */
    const unsigned char *dead;/* by stored column */
    int32_t qmin, qmax;
    int static_groups;        /* scales fixed before the loop (per channel, or act-order groups) */
    float *scales, *inv;
    int32_t *zp;
    uint8_t *codes;
    float *deq;               /* numel, stored order (always allocated) */
} gjob;

/* Element (c, j) of the tensor in sequence order j = o * inner + k (a
 * channel's values are contiguous when outer is 1: no divisions then). */
static inline uint64_t at(const npuc_quant_shape *qs, uint64_t c, uint64_t j) {
    if (qs->outer == 1) return c * qs->inner + j;
    return ((j / qs->inner) * qs->channels + c) * qs->inner + j % qs->inner;
}

/* y[0..n) -= a x[0..n): the rank-1 error feedback inside a block, each
 * element one fused multiply-add (fma(-a, x, y), rounded once), so every
 * clone gives the same bits: AVX-512 where the CPU has it (8 lanes; the
 * column loop's hot spot), else the C library's fma. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "default")))
#endif
static void axpy_neg(double *restrict y, const double *restrict x, double a, uint64_t n) {
#pragma omp simd
    for (uint64_t k = 0; k < n; k++) y[k] = fma(-a, x[k], y[k]);
}

/* Scale of channel c's values v[0..n) (floats of the current weights). */
static void group_params(const gjob *J, const double *v, uint64_t n, uint64_t idx) {
    float lo = 0, hi = 0;
    for (uint64_t i = 0; i < n; i++) {
        const float x = (float)v[i];
        if (i == 0 || x < lo) lo = x;
        if (i == 0 || x > hi) hi = x;
    }
    npuc__quant_params_from_range(lo, hi, J->p->bits, J->p->symmetric, J->p->grid == NPUC_GRID_FULL,
                                  &J->scales[idx], &J->inv[idx], &J->zp[idx]);
    npuc__scale_round(J->p->scale_dtype, &J->scales[idx], &J->inv[idx]); /* --scale-dtype */
}

/* GPTQ of rows [c0, c0 + R); W (R x K floats), W1 (R x BLOCK doubles),
 * E (R x BLOCK floats) and gv (G doubles) are scratch. */
static uint64_t tile(const gjob *J, uint64_t c0, uint64_t R, float *W, double *W1, float *E, double *gv) {
    uint64_t clipped = 0;
    const uint64_t K = J->K, G = J->G, gpc = J->qs->groups_per_channel;
    for (uint64_t r = 0; r < R; r++)
        for (uint64_t i = 0; i < K; i++) {
            const uint64_t j = J->perm[i];
            W[r * K + i] = J->dead[j] ? 0.0f : J->w[at(J->qs, c0 + r, j)];
        }
    for (uint64_t i1 = 0; i1 < K; i1 += BLOCK) {
        const uint64_t i2 = i1 + BLOCK < K ? i1 + BLOCK : K, nb = i2 - i1;
        for (uint64_t r = 0; r < R; r++)
            for (uint64_t k = 0; k < nb; k++) W1[r * BLOCK + k] = W[r * K + i1 + k];
        /* Rows are independent within a block too: RI rows at a time, column
         * by column, so the rows' working copies stay in L1 and the RI
         * dependency chains of a column (code, division, feedback) overlap
         * in the core instead of each waiting on the one before. */
        for (uint64_t rg = 0; rg < R; rg += RI)
            for (uint64_t i = 0; i < nb; i++)
                for (uint64_t r = rg; r < rg + RI && r < R; r++) {
                    const uint64_t c = c0 + r;
                    double *w1 = W1 + r * BLOCK;
                    const uint64_t col = i1 + i, j = J->perm[col];
                    const double *u = J->U + col * K + i1; /* row col of U, from column i1 */
                    if (!J->static_groups && col % G == 0) {
                        const uint64_t n = K - col < G ? K - col : G;
                        for (uint64_t k = 0; k < n; k++) gv[k] = W[r * K + col + k];
                        group_params(J, gv, n, c * gpc + col / G);
                    }
                    const uint64_t idx = c * gpc + j / G, o = at(J->qs, c, j);
                    npuc_qsums acc = {0};
                    float dq;
                    const double x = w1[i];
                    J->codes[o] = npuc_qk_elem((float)x, J->scales[idx], J->inv[idx], J->zp[idx], J->qmin, J->qmax, &dq,
                                               &acc);
                    J->deq[o] = dq;
                    clipped += acc.clipped;
                    const double e = (x - (double)dq) / u[i];
                    axpy_neg(w1 + i + 1, u + i + 1, e, nb - i - 1);
                    E[r * BLOCK + i] = (float)e;
                }
        if (i2 < K)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)R, (int)(K - i2), (int)nb, -1.0f, E,
                        (int)BLOCK, J->Uf + i1 * K + i2, (int)K, 1.0f, W + i2, (int)K);
    }
    return clipped;
}

/* U: the upper Cholesky factor of H^-1, row-major, written over H (K x K,
 * symmetric); Y is K x K scratch.  With P the reversal of the columns:
 * P H P = R^T R (R upper) gives H^-1 = P R^-1 R^-T P = U^T U with
 * U = P R^-T P upper, i.e. U(a, b) = R^-1(K-1-b, K-1-a).  P H P is H's
 * values in reverse order, and the column-major bytes of Y = R^-1 read
 * backwards are U row-major: no transposes.  The inverse is solved in
 * fixed column blocks (R[0:c1, 0:c1] Y[0:c1, c0:c1] = I) on the context's
 * threads, one single-threaded dtrsm each: the same bytes for any -j.
 * Returns 0, or the LAPACK info of the factorisation. */
static int inverse_factor(npuc_ctx *ctx, double *H, double *Y, uint64_t K) {
    const uint64_t KK = K * K;
    for (uint64_t i = 0; i < KK / 2; i++) {
        const double t = H[i];
        H[i] = H[KK - 1 - i];
        H[KK - 1 - i] = t;
    }
    const int info = npuc__chol_upper(npuc__threads(ctx), H, K);
    if (info != 0) return info;
    const int64_t nblk = (int64_t)((K + INV_BLOCK - 1) / INV_BLOCK);
#pragma omp parallel for num_threads(npuc__threads(ctx)) schedule(dynamic, 1)
    for (int64_t bi = nblk - 1; bi >= 0; bi--) { /* the largest solves first */
        const uint64_t c0 = (uint64_t)bi * INV_BLOCK, c1 = c0 + INV_BLOCK < K ? c0 + INV_BLOCK : K;
        for (uint64_t j = c0; j < c1; j++) {
            memset(Y + j * K, 0, sizeof(double) * (size_t)K);
            Y[j * K + j] = 1;
        }
        cblas_dtrsm(CblasColMajor, CblasLeft, CblasUpper, CblasNoTrans, CblasNonUnit, (int)c1, (int)(c1 - c0), 1.0,
                    H, (int)K, Y + c0 * K, (int)K);
    }
    for (uint64_t i = 0; i < KK; i++) H[i] = Y[KK - 1 - i];
    return 0;
}

/* The output error's sums (npuc__gptq_opts.out) from U, GPTQ's own factor.
 * GPTQ factored Hd = P (f H + sum_dead e_j e_j^T) P^T + lam I (f = 2 / n, P
 * the act-order permutation, lam the dampening) as Hd^-1 = U^T U, so
 * Hd = U^-1 U^-T and, for any rows T in permuted column order,
 *   tr(T H T^T) = (||T U^-1||^2 - lam ||T||^2 - sum_dead ||T_:,j||^2) / f,
 * exact in exact arithmetic.  Per tile of OTILE rows, the rows of D = W - W'
 * and of W are stacked and solved against U in place with one dtrsm (the
 * work of the dtrmm calib_out_error.c does after its own factorisation of
 * H, which this saves with the second read of H).  The subtraction cancels
 * lam ||T||^2 / ||T U^-1||^2 of the leading digits, at most a few when
 * GPTQ has pushed D into H's small directions; in doubles (dtrsm's
 * relative error about K 2^-53) the figure keeps more than eight.  Tiles
 * depend only on the tensor and are added in order: the same sums for any
 * -j.  Returns 0, or -1 when out of memory. */
#define OTILE 256u
static int out_sums(npuc_ctx *ctx, const gjob *J, double lam, double f, double *out) {
    const uint64_t K = J->K, C = J->qs->channels, ntiles = (C + OTILE - 1) / OTILE;
    double *ey = calloc(2 * ntiles, sizeof(double));
    int failed = !ey;
#pragma omp parallel num_threads(npuc__threads(ctx)) if (!failed)
    {
        const uint64_t rows = C < OTILE ? C : OTILE;
        double *B = npuc__huge_alloc(sizeof(double) * (size_t)(2 * rows * K));
        if (!B) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t ti = 0; ti < (int64_t)ntiles; ti++) {
            if (!B) continue;
            const uint64_t c0 = (uint64_t)ti * OTILE, nc = C - c0 < OTILE ? C - c0 : OTILE;
            double *BD = B, *BW = B + nc * K, n2[2] = {0, 0}, dead2[2] = {0, 0};
            for (uint64_t r = 0; r < nc; r++)
                for (uint64_t i = 0; i < K; i++) {
                    const uint64_t j = J->perm[i], o = at(J->qs, c0 + r, j);
                    const double x = J->w[o], d = x - (double)J->deq[o];
                    BD[r * K + i] = d;
                    BW[r * K + i] = x;
                    n2[0] += d * d, n2[1] += x * x;
                    if (J->dead[j]) dead2[0] += d * d, dead2[1] += x * x;
                }
            cblas_dtrsm(CblasRowMajor, CblasRight, CblasUpper, CblasNoTrans, CblasNonUnit, (int)(2 * nc), (int)K,
                        1.0, J->U, (int)K, B, (int)K);
            for (int k = 0; k < 2; k++) {
                const double *T = k ? BW : BD;
                double s2 = 0;
                for (uint64_t i = 0; i < nc * K; i++) s2 += T[i] * T[i];
                ey[2 * ti + k] = (s2 - lam * n2[k] - dead2[k]) / f;
            }
        }
        free(B);
    }
    if (failed) {
        free(ey);
        return -1;
    }
    out[0] = out[1] = 0;
    for (uint64_t ti = 0; ti < ntiles; ti++) out[0] += ey[2 * ti], out[1] += ey[2 * ti + 1];
    free(ey);
    return 0;
}

/* Decreasing diag(H), ties by column (a stable order). */
typedef struct dcol {
    double d;
    uint64_t j;
} dcol;
static int by_diag(const void *a, const void *b) {
    const dcol *x = a, *y = b;
    if (x->d != y->d) return x->d > y->d ? -1 : 1;
    return x->j < y->j ? -1 : x->j > y->j;
}

npuc_status npuc__gptq_tensor(npuc_ctx *ctx, const npuc_tensor_info *t, const float *w,
                              const npuc_quant_params *p, double *H, double n, const npuc__gptq_opts *o,
                              uint8_t *codes, float *scales, int32_t *zero_points, float *deq_out,
                              npuc_error_stats *err) {
    npuc_quant_shape qs;
    npuc_status st = npuc_quant_shape_of(ctx, t, p, &qs);
    if (st != NPUC_OK) return st;
    if (p->gran == NPUC_GRAN_TENSOR)
        return npuc_fail(ctx, NPUC_ERR_ARG, "tensor '%s': GPTQ needs per-channel or per-group scales", t->name);
    const uint64_t K = qs.per_channel, C = qs.channels, gpc = qs.groups_per_channel;
    const uint64_t G = p->gran == NPUC_GRAN_GROUP ? p->group_size : K;
    uint64_t bad = 0;
    for (uint64_t i = 0; i < t->numel; i++) bad += !isfinite(w[i]);
    if (bad)
        return npuc_fail(ctx, NPUC_ERR_VALUE, "tensor '%s': %llu NaN or Inf value%s; cannot quantize", t->name,
                         (unsigned long long)bad, bad == 1 ? "" : "s");
    if (K > (uint64_t)INT32_MAX / 2 || C > (uint64_t)INT32_MAX)
        return npuc_fail(ctx, NPUC_ERR_ARG, "tensor '%s': too large for GPTQ", t->name);

    uint64_t *perm = malloc(sizeof(uint64_t) * (size_t)K);
    unsigned char *dead = calloc((size_t)K, 1);
    double *diag = malloc(sizeof(double) * (size_t)K);
    double *U = npuc__huge_alloc(sizeof(double) * (size_t)(K * K)); /* scratch: the permuted H, then R^-1 */
    float *inv = malloc(sizeof(float) * (size_t)qs.nscales);
    float *deq = deq_out ? deq_out : malloc(sizeof(float) * (size_t)t->numel);
    if (!perm || !dead || !diag || !U || !inv || !deq) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "tensor '%s': out of memory", t->name);
        goto done;
    }
    /* H = 2 S / n (the scale does not change the result: dampening is
     * relative); dead columns. */
    const double f = 2.0 / n;
    for (uint64_t i = 0; i < K * K; i++) H[i] *= f;
    for (uint64_t j = 0; j < K; j++) {
        perm[j] = j;
        if (H[j * K + j] == 0) {
            dead[j] = 1;
            H[j * K + j] = 1;
        }
        diag[j] = H[j * K + j];
    }
    gjob J = {.w = w, .qs = &qs, .p = p, .K = K, .G = G, .perm = perm, .dead = dead, .scales = scales,
              .inv = inv, .zp = zero_points, .codes = codes, .deq = deq};
    npuc_qk_code_range(p->bits, p->symmetric, p->grid == NPUC_GRID_FULL, &J.qmin, &J.qmax);
    /* Scales fixed before the loop: per channel from the rows as stored
     * (the reference takes them before zeroing dead columns); act-order
     * groups from the rows with dead columns zeroed. */
    J.static_groups = p->gran != NPUC_GRAN_GROUP || o->act_order;
    if (J.static_groups) {
        double *gv = malloc(sizeof(double) * (size_t)G);
        if (!gv) {
            st = npuc_fail(ctx, NPUC_ERR_NOMEM, "tensor '%s': out of memory", t->name);
            goto done;
        }
        for (uint64_t c = 0; c < C; c++)
            for (uint64_t g = 0; g < gpc; g++) {
                const uint64_t s = g * G, e = s + G < K ? s + G : K;
                for (uint64_t j = s; j < e; j++)
                    gv[j - s] = p->gran == NPUC_GRAN_GROUP && dead[j] ? 0.0 : (double)w[at(&qs, c, j)];
                group_params(&J, gv, e - s, c * gpc + g);
            }
        free(gv);
    }
    if (o->act_order) {
        dcol *dc = malloc(sizeof(dcol) * (size_t)K);
        if (!dc) {
            st = npuc_fail(ctx, NPUC_ERR_NOMEM, "tensor '%s': out of memory", t->name);
            goto done;
        }
        for (uint64_t j = 0; j < K; j++) dc[j] = (dcol){diag[j], j};
        qsort(dc, (size_t)K, sizeof *dc, by_diag);
        for (uint64_t j = 0; j < K; j++) perm[j] = dc[j].j;
        free(dc);
        for (uint64_t a = 0; a < K; a++)
            for (uint64_t b = 0; b < K; b++) U[a * K + b] = H[perm[a] * K + perm[b]];
        memcpy(H, U, sizeof(double) * (size_t)(K * K));
    }
    double mean = 0;
    for (uint64_t j = 0; j < K; j++) mean += H[j * K + j];
    mean /= (double)K;
    const double lam = o->damp * mean;
    for (uint64_t j = 0; j < K; j++) H[j * K + j] += lam;
    const int blas = npuc__blas_enter();
    int info = inverse_factor(ctx, H, U, K);
    if (info != 0) {
        npuc__blas_leave(blas);
        st = npuc_fail(ctx, NPUC_ERR_VALUE,
                       "tensor '%s': the dampened Hessian is not positive definite (LAPACK info %d); raise --damp",
                       t->name, info);
        goto done;
    }
    J.U = H;
    float *Uf = (float *)U; /* R^-1 is no longer needed: its memory holds U in float */
    for (uint64_t i = 0; i < K * K; i++) Uf[i] = (float)H[i];
    J.Uf = Uf;
    const uint64_t tiles = (C + TILE - 1) / TILE;
    int failed = 0;
    uint64_t clipped = 0; /* an integer sum: the same in any order */
#pragma omp parallel num_threads(npuc__threads(ctx)) reduction(+ : clipped)
    {
        float *W = malloc(sizeof(float) * (size_t)(TILE * K)), *E = malloc(sizeof(float) * TILE * BLOCK);
        double *W1 = malloc(sizeof(double) * TILE * BLOCK);
        double *gv = malloc(sizeof(double) * (size_t)G);
        const int ok = W && W1 && E && gv;
        if (!ok) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t ti = 0; ti < (int64_t)tiles; ti++) {
            if (!ok) continue;
            const uint64_t c0 = (uint64_t)ti * TILE, R = C - c0 < TILE ? C - c0 : TILE;
            clipped += tile(&J, c0, R, W, W1, E, gv);
        }
        free(W), free(W1), free(E), free(gv);
    }
    if (!failed && o->out && out_sums(ctx, &J, lam, f, o->out) != 0) failed = 1;
    npuc__blas_leave(blas);
    if (failed) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "tensor '%s': out of memory", t->name);
        goto done;
    }
    if (err) {
        /* The sums npuc_quantize_tensor reports, in stored order. */
        double w2 = 0, e2 = 0, wd = 0, d2 = 0, mx = 0, noise = 0;
        for (uint64_t i = 0; i < t->numel; i++) {
            const double x = w[i], d = deq[i], e = d - x;
            w2 += x * x, e2 += e * e, wd += x * d, d2 += d * d;
            mx = fabs(e) > mx ? fabs(e) : mx;
        }
        for (uint64_t c = 0; c < C; c++)
            for (uint64_t g = 0; g < gpc; g++) {
                const uint64_t s = g * G, e = s + G < K ? s + G : K;
                const double sc = scales[c * gpc + g];
                noise += (double)(e - s) * sc * sc / 12.0;
            }
        npuc_error_from_sums(err, t->numel, w2, e2, wd, d2, mx, noise, clipped);
    }
done:
    free(perm), free(dead), free(diag), free(inv), free(U);
    if (deq != deq_out) free(deq);
    return st;
}
