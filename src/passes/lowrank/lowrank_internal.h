/*
 * lowrank_internal.h - the SVD machinery behind npuc lowrank (library-private;
 * lowrank_svd.c implements it, lowrank.c, lowrank_model.c and
 * decode_lowrank.c use it).
 *
 * Orientation.  Weights are row-major m x n matrices W.  LAPACK and the
 * BLAS wrappers below are column-major, and the same bytes read column-major
 * are the n x m matrix X = W^T.  Every routine here factors X instead of W,
 * so no matrix is ever transposed in memory: an SVD X = U_X S V_X^T gives
 * W = V_X S U_X^T, whose left vectors (V_X) are exactly the bytes LAPACK
 * returns as V_X^T, and whose right vectors (U_X^T) are the bytes of U_X.
 * npuc__svd below therefore holds W's factors in row-major form.
 *
 * Threads.  OpenBLAS runs on one thread inside npuc (npuc__blas_enter).  The
 * large products are split into blocks whose size depends only on the
 * matrix dimensions, each block is one single-threaded sgemm, and npuc's
 * OpenMP threads share the blocks.  Every element is thus computed by the
 * same call whatever the thread count, which is what makes results
 * bit-identical for any -j.
 */
#ifndef NPUC_LOWRANK_INTERNAL_H
#define NPUC_LOWRANK_INTERNAL_H

#include <stdint.h>

#include "npuc_internal.h"

/* Sets OpenBLAS to one thread and returns the previous setting, which
 * npuc__blas_leave restores.  Calls nest. */
int npuc__blas_enter(void);
void npuc__blas_leave(int prev);

/* The largest m, n the solvers accept (LAPACK and CBLAS take 32-bit ints). */
#define NPUC_SVD_DIM_MAX 2147483647LL

/* A truncated SVD of a row-major m x n matrix W:  W ~ u diag(s) vt. */
typedef struct npuc__svd {
    int64_t m, n;
    int64_t k;        /* singular values in s (exact: min(m, n); randomized: the sketch width l) */
    float *s;         /* k values, descending */
    float *u;         /* left vectors: m x k, row stride ldu */
    int64_t ldu;
    float *vt;        /* right vectors: kvt x n row-major (NULL until npuc__svd_vt) */
    int64_t kvt;
    int randomized;
    /* Randomized only: W^T ~ q ub diag(s) u^T, q is n x l and ub l x l (column-major). */
    float *q, *ub;
} npuc__svd;

/* How npuc__svd_exact runs LAPACK. */
enum {
    NPUC__SVD_GESDD = 0,   /* sgesdd, falling back to sgesvd when it does not converge */
    NPUC__SVD_GESVD = 1,   /* sgesvd only (tests use it to exercise the fallback) */
    NPUC__SVD_VALUES = 2   /* sgesdd, singular values only (u, vt stay NULL) */
};

/* The exact thin SVD of w (m x n row-major, finite): k = min(m, n) triplets.
 * Fails with NPUC_ERR_NUMERIC (no convergence), NPUC_ERR_NOMEM,
 * NPUC_ERR_UNSUPPORTED (beyond LAPACK's 32-bit workspace); messages name
 * `what` (a tensor description like "tensor 'fc.weight'"). */
npuc_status npuc__svd_exact(npuc_ctx *ctx, const char *what, const float *w, int64_t m, int64_t n,
                            int method, npuc__svd *out);

/* The randomized SVD of w with a sketch of l columns (1 <= l <= min(m, n)):
 * Gaussian test matrix from `seed`, power_iters subspace iterations
 * (Halko, Martinsson & Tropp 2011, algorithm 4.4) normalised by LU after
 * every product but the last and by QR after the last (as fbpca does), then
 * the exact SVD of the l x n projection.  k = l; the right vectors come
 * later from npuc__svd_vt.  nthreads >= 1; the result is bit-identical for
 * any nthreads. */
npuc_status npuc__svd_randomized(npuc_ctx *ctx, const char *what, const float *w, int64_t m,
                                 int64_t n, int64_t l, int power_iters, uint64_t seed,
                                 int nthreads, npuc__svd *out);

/* Makes sure out->vt holds the first r right vectors (r <= out->k). */
npuc_status npuc__svd_vt(npuc_ctx *ctx, npuc__svd *out, int64_t r, int nthreads);

void npuc__svd_free(npuc__svd *s);

/* Row-major C [m x n] = A [m x k] B [k x n] (leading dimensions k, n, n),
 * split over fixed blocks of rows of C that nthreads share. */
void npuc__gemm_rows(const float *a, const float *b, float *c, int64_t m, int64_t n, int64_t k,
                     int nthreads);

/* The number of rows of C npuc__gemm_rows gives one sgemm call: a function
 * of the row count only. */
int64_t npuc__gemm_block(int64_t rows);

/* A factored tensor of the model and its two factors (lowrank_model.c). */
typedef struct npuc__lowrank_split {
    size_t tensor;
    const npuc_tensor_info *a, *b; /* lr_a (output side), lr_b */
} npuc__lowrank_split;

/* For an output whose format keeps the file's graph in a metadata entry
 * (ONNX): splits each factored weight's node in a copy of m's graph and
 * sets w's graph entry to the format's rewrite of it (lowrank_graph.c).
 * Nothing done for other outputs or without factored tensors.  A weight
 * that cannot be written as a split is NPUC_ERR_UNSUPPORTED naming w's
 * path and the tensor. */
npuc_status npuc__lowrank_graph_meta(npuc_ctx *ctx, npuc_model *m, npuc_writer *w, const npuc__lowrank_split *sp,
                                     size_t ns);
/* Before any SVD: *ok 0 when w rewrites m's graph (ONNX) and tensor's node
 * there cannot be split (a MatMul / Gemm / Conv of group 1 reading it
 * alone), why completing "tensor 'T' "; *ok 1 otherwise. */
npuc_status npuc__lowrank_graph_splittable(npuc_ctx *ctx, npuc_model *m, const npuc_writer *w, size_t tensor,
                                           char *why, size_t nwhy, int *ok);

#endif
