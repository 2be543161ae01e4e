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
    const double *Ud;         /* U's diagonal blocks: row a, columns [i1, i1 + BLOCK) of its block at Ud + a * BLOCK */
    const float *Uf;          /* U in float32 (upper triangle), for the lazy batch update */
    const double *R;          /* the Cholesky factor of the reversed Hd (inverse_factor), for the output error */
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
static uint64_t tile(const gjob *J, uint64_t c0, uint64_t R, float *W, double *W1, float *E, double *gv,
                     double *e2out) {
    uint64_t clipped = 0;
    double e2 = 0;
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
                    const double *u = J->Ud + col * BLOCK; /* row col of U, from column i1 */
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
                    e2 += e * e;
                }
        if (i2 < K)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)R, (int)(K - i2), (int)nb, -1.0f, E,
                        (int)BLOCK, J->Uf + i1 * K + i2, (int)K, 1.0f, W + i2, (int)K);
    }
    *e2out = e2;
    return clipped;
}

/* A = P Hd P, the dampened Hessian in (act-order) column order reversed,
 * where Hd = f H (f = 2 / n) with the dead diagonal set to 1 (diag holds
 * that diagonal, f H_jj or 1) and lam added to it:
 *   A(a, b) = f H(x, y), x = perm[K-1-a], y = perm[K-1-b], a != b;
 *   A(a, a) = diag[perm[K-1-a]] + lam.
 * Without act-order A is H itself, reversed in place (row a swaps with row
 * K-1-a reversed), else A is a separate buffer gathered from H.  Each
 * element is rounded as the unfused steps would round it: one pass over
 * the K x K values, on the context's threads. */
static void reversed_hessian(npuc_ctx *ctx, double *H, double *A, uint64_t K, double f, const uint64_t *perm,
                             const double *diag, double lam) {
    if (A == H) {
#pragma omp parallel for schedule(static) num_threads(npuc__threads(ctx)) if (K >= 256)
        for (int64_t ai = 0; ai < (int64_t)((K + 1) / 2); ai++) {
            const uint64_t a = (uint64_t)ai, m = K - 1 - a;
            double *ra = H + a * K, *rm = H + m * K;
            if (a < m) {
                for (uint64_t b = 0; b < K; b++) {
                    const double t = ra[b];
                    ra[b] = f * rm[K - 1 - b];
                    rm[K - 1 - b] = f * t;
                }
                ra[a] = diag[m] + lam;
                rm[m] = diag[a] + lam;
            } else { /* the middle row of an odd K: reversed within itself */
                for (uint64_t b = 0; b < K / 2; b++) {
                    const double t = ra[b];
                    ra[b] = f * ra[K - 1 - b];
                    ra[K - 1 - b] = f * t;
                }
                ra[a] = diag[a] + lam;
            }
        }
        return;
    }
#pragma omp parallel for schedule(static) num_threads(npuc__threads(ctx)) if (K >= 256)
    for (int64_t ai = 0; ai < (int64_t)K; ai++) {
        const uint64_t a = (uint64_t)ai;
        const double *hx = H + perm[K - 1 - a] * K;
        double *ra = A + a * K;
        for (uint64_t b = 0; b < K; b++) ra[b] = f * hx[perm[K - 1 - b]];
        ra[a] = diag[perm[K - 1 - a]] + lam;
    }
}

/* U: the upper Cholesky factor of Hd^-1, from A = P Hd P (P the reversal
 * of the columns), the reversed matrix in column-major order: A = R^T R (R
 * upper) gives Hd^-1 = P R^-1 R^-T P = U^T U with U = P R^-T P upper, i.e.
 * U(a, b) = R^-1(K-1-b, K-1-a): column j of R^-1 read backwards is row
 * K-1-j of U.  R is written over A (and kept: the output error's W half
 * multiplies by it).  R^-1 is solved in fixed column blocks (R[0:c1, 0:c1]
 * Y = I[0:c1, c0:c1]) on the context's threads, one single-threaded dtrsm
 * each, into a block of scratch per thread, and each block's columns go
 * straight to their rows of Uf (float32) and Ud (U's 128-column diagonal
 * blocks in double, all the column loop reads): no K x K double buffer
 * besides A.  The same bytes for any -j.  Returns 0, the LAPACK info of the
 * factorisation, or -1 when out of memory. */
static int inverse_factor(npuc_ctx *ctx, double *A, uint64_t K, float *Uf, double *Ud) {
    const int info = npuc__chol_upper(npuc__threads(ctx), A, K);
    if (info != 0) return info;
    const int64_t nblk = (int64_t)((K + INV_BLOCK - 1) / INV_BLOCK);
    int failed = 0;
#pragma omp parallel num_threads(npuc__threads(ctx))
    {
        const uint64_t cols = K < INV_BLOCK ? K : INV_BLOCK;
        double *Y = npuc__huge_alloc(sizeof(double) * (size_t)(K * cols));
        if (!Y) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t bi = nblk - 1; bi >= 0; bi--) { /* the largest solves first */
            if (!Y) continue;
            const uint64_t c0 = (uint64_t)bi * INV_BLOCK, c1 = c0 + INV_BLOCK < K ? c0 + INV_BLOCK : K;
            for (uint64_t j = c0; j < c1; j++) {
                memset(Y + (j - c0) * K, 0, sizeof(double) * (size_t)c1);
                Y[(j - c0) * K + j] = 1;
            }
            cblas_dtrsm(CblasColMajor, CblasLeft, CblasUpper, CblasNoTrans, CblasNonUnit, (int)c1, (int)(c1 - c0),
                        1.0, A, (int)K, Y, (int)K);
            for (uint64_t j = c0; j < c1; j++) {
                const uint64_t a = K - 1 - j, i1 = a / BLOCK * BLOCK, i2 = i1 + BLOCK < K ? i1 + BLOCK : K;
                const double *y = Y + (j - c0) * K + (K - 1); /* y[-b] = R^-1(K-1-b, j) = U(a, b) */
                float *uf = Uf + a * K;
                for (uint64_t b = a; b < K; b++) uf[b] = (float)y[-(int64_t)b];
                for (uint64_t b = a; b < i2; b++) Ud[a * BLOCK + (b - i1)] = y[-(int64_t)b];
            }
        }
        free(Y);
    }
    return failed ? -1 : 0;
}

/* The output error's sums (npuc__gptq_opts.out) from U, GPTQ's own factor.
 * GPTQ factored Hd = P (f H + sum_dead e_j e_j^T) P^T + lam I (f = 2 / n, P
 * the act-order permutation, lam the dampening) as Hd^-1 = U^T U, so
 * Hd = U^-1 U^-T and, for any rows T in permuted column order,
 *   tr(T H T^T) = (||T U^-1||^2 - lam ||T||^2 - sum_dead ||T_:,j||^2) / f.
 *
 * D = W - W': GPTQ's column loop already holds D U^-1.  With e_j = (w_j -
 * q_j) / U_jj the error it feeds back (w_k -= e_j U_jk for k > j), q_j =
 * w_j - sum_{i <= j} e_i U_ij, i.e. D' = E U for the rows D' = W_z - W'
 * it quantized (W_z: dead columns zeroed), so ||D' U^-1||^2 = ||E||^2, the
 * sum of the squared errors (tile() adds them up; the reference code's
 * "Losses" are half of it).  Dead columns are decoupled in Hd (row and
 * column j of H are 0; Hd_jj = 1 + lam) and hold D_:,j = W_:,j, so
 *   tr(D H D^T) = (||E||^2 - lam ||D_live||^2) / f,
 * over the live columns.  The identity is exact for the working values the
 * loop quantized; those carry the float32 rounding of the lazy batch
 * updates (W waits between blocks in float), which moves the figure by
 * about 1e-9 relative (bench_gptq's 4096 x 4096: 306316.330086 by a dtrsm
 * on the stored D, 306316.330390 from E).  ld2 = ||D_live||^2.
 *
 * W: ||W U^-1||^2 = ||W P R^T||^2 (U^-1 = P R^T P, R = inverse_factor's
 * factor; P, the reversal, only reorders columns), a triangular product of
 * W's rows in reversed column order with R^T, per tile of OTILE rows, one
 * dtrmm each (the work calib_out_error.c does after its own factorisation
 * of H, which this saves with the second read of H).  The subtraction of
 * lam ||W||^2 cancels a fraction lam ||W||^2 / ||W U^-1||^2 of the leading
 * digits, small unless W lies in H's null space.  Tiles depend only on the
 * tensor and are added in order: the same sums for any -j.  Returns 0, or
 * -1 when out of memory. */
#define OTILE 256u
static int out_sums(npuc_ctx *ctx, const gjob *J, double lam, double f, double e2, double ld2, double *out) {
    const uint64_t K = J->K, C = J->qs->channels, ntiles = (C + OTILE - 1) / OTILE;
    double *ey = calloc(ntiles, sizeof(double));
    int failed = !ey;
#pragma omp parallel num_threads(npuc__threads(ctx)) if (!failed)
    {
        const uint64_t rows = C < OTILE ? C : OTILE;
        double *B = npuc__huge_alloc(sizeof(double) * (size_t)(rows * K));
        if (!B) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t ti = 0; ti < (int64_t)ntiles; ti++) {
            if (!B) continue;
            const uint64_t c0 = (uint64_t)ti * OTILE, nc = C - c0 < OTILE ? C - c0 : OTILE;
            double n2 = 0, dead2 = 0, s2 = 0;
            for (uint64_t r = 0; r < nc; r++)
                for (uint64_t i = 0; i < K; i++) {
                    const uint64_t j = J->perm[K - 1 - i];
                    const double x = J->w[at(J->qs, c0 + r, j)];
                    B[r * K + i] = x;
                    n2 += x * x;
                    if (J->dead[j]) dead2 += x * x;
                }
            /* R column-major is R^T row-major: B := B R^T */
            cblas_dtrmm(CblasRowMajor, CblasRight, CblasLower, CblasNoTrans, CblasNonUnit, (int)nc, (int)K, 1.0,
                        J->R, (int)K, B, (int)K);
            for (uint64_t i = 0; i < nc * K; i++) s2 += B[i] * B[i];
            ey[ti] = (s2 - lam * n2 - dead2) / f;
        }
        free(B);
    }
    if (failed) {
        free(ey);
        return -1;
    }
    out[0] = (e2 - lam * ld2) / f;
    out[1] = 0;
    for (uint64_t ti = 0; ti < ntiles; ti++) out[1] += ey[ti];
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
    float *Uf = npuc__huge_alloc(sizeof(float) * (size_t)(K * K));
    double *Ud = npuc__huge_alloc(sizeof(double) * (size_t)(K * BLOCK));
    double *Ap = NULL; /* with act-order: the permuted matrix (H is permuted into it) */
    float *inv = malloc(sizeof(float) * (size_t)qs.nscales);
    float *deq = deq_out ? deq_out : malloc(sizeof(float) * (size_t)t->numel);
    if (!perm || !dead || !diag || !Uf || !Ud || !inv || !deq) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "tensor '%s': out of memory", t->name);
        goto done;
    }
    /* H = 2 S / n (the scale does not change the result: dampening is
     * relative); dead columns.  Only the diagonal here: the rest is scaled
     * as it is reversed (reversed_hessian). */
    const double f = 2.0 / n;
    for (uint64_t j = 0; j < K; j++) {
        perm[j] = j;
        diag[j] = H[j * K + j] * f;
        if (diag[j] == 0) {
            dead[j] = 1;
            diag[j] = 1;
        }
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
        if (!(Ap = npuc__huge_alloc(sizeof(double) * (size_t)(K * K)))) {
            st = npuc_fail(ctx, NPUC_ERR_NOMEM, "tensor '%s': out of memory", t->name);
            goto done;
        }
    }
    double mean = 0;
    for (uint64_t j = 0; j < K; j++) mean += diag[perm[j]];
    mean /= (double)K;
    const double lam = o->damp * mean;
    double *A = Ap ? Ap : H;
    reversed_hessian(ctx, H, A, K, f, perm, diag, lam);
    const int blas = npuc__blas_enter();
    int info = inverse_factor(ctx, A, K, Uf, Ud);
    if (info != 0) {
        npuc__blas_leave(blas);
        st = info < 0 ? npuc_fail(ctx, NPUC_ERR_NOMEM, "tensor '%s': out of memory", t->name)
                      : npuc_fail(ctx, NPUC_ERR_VALUE,
                                  "tensor '%s': the dampened Hessian is not positive definite (LAPACK info %d); "
                                  "raise --damp",
                                  t->name, info);
        goto done;
    }
    J.R = A;
    J.Ud = Ud;
    J.Uf = Uf;
    const uint64_t tiles = (C + TILE - 1) / TILE;
    double *te2 = calloc((size_t)tiles, sizeof(double));
    int failed = !te2;
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
            clipped += tile(&J, c0, R, W, W1, E, gv, &te2[ti]);
        }
        free(W), free(W1), free(E), free(gv);
    }
    if (!failed && o->out) {
        double e2 = 0, ld2 = 0;
        for (uint64_t ti = 0; ti < tiles; ti++) e2 += te2[ti];
        for (uint64_t c = 0; c < C; c++)
            for (uint64_t j = 0; j < K; j++) {
                const uint64_t oi = at(&qs, c, j);
                const double d = (double)w[oi] - (double)deq[oi];
                if (!dead[j]) ld2 += d * d;
            }
        if (out_sums(ctx, &J, lam, f, e2, ld2, o->out) != 0) failed = 1;
    }
    free(te2);
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
    free(perm), free(dead), free(diag), free(inv), free(Uf), free(Ud), free(Ap);
    if (deq != deq_out) free(deq);
    return st;
}
