/*
 * npuc/lowrank.h - low-rank factorisation of weights by truncated SVD.
 *
 * A weight is seen as a matrix W [m x n] split at its layout's output axis
 * (npuc_lowrank_geometry) and replaced by two factors of rank r,
 *
 *     W ~ L R,   L = U_r sqrt(S_r)  [m x r],   R = sqrt(S_r) V_r^T  [r x n],
 *
 * the best rank-r approximation in the Frobenius norm (Eckart-Young).  The
 * factor on the output side is stored as "<name>.lr_a", the one on the input
 * side as "<name>.lr_b", both in the source dtype and layout, shaped so that
 * lr_b is a kh x kw convolution with r outputs and lr_a a 1x1 convolution
 * (or two Linear/Dense layers) - docs/lowrank.md has the exact shapes and how
 * to load them in PyTorch and Keras.  A layer where r (m + n) >= m n would
 * not get smaller and is left dense ("no saving").
 *
 * Ranks come from one rule: a fixed rank, a fraction of min(m, n), the
 * smallest rank keeping a fraction E of the energy sum s_i^2, or the smallest
 * rank whose relative Frobenius error sqrt(sum_{i>r} s_i^2) / |W|_F is at
 * most X; optionally rounded up to a multiple of M.  Per-tensor "REGEX=R"
 * rules (npuc_lowrank_opts.layer_rank) give chosen tensors a fixed rank
 * instead.
 *
 * Two solvers: the exact thin SVD (LAPACK sgesdd, sgesvd when sgesdd does
 * not converge) and the randomized SVD of Halko, Martinsson & Tropp (2011):
 * a seeded Gaussian sketch with oversampling p, q power iterations
 * (LU-normalised between products, QR after the last, as in fbpca), and a
 * small exact SVD.  Both are deterministic: the
 * same input, options and seed give bit-identical factors for any thread
 * count (OpenBLAS runs on one thread inside npuc; npuc splits the large
 * products into fixed blocks that its own threads share).
 *
 * Example (compiled by tests/cli/c_api.sh):
 *     npuc_lowrank_opts o = npuc_lowrank_opts_defaults();
 *     o.params.rule = NPUC_RANK_ENERGY;
 *     o.params.value = 0.95;                 // keep 95 % of the energy
 *     npuc_summary sum;
 *     npuc_status st = npuc_lowrank_model(ctx, m, "model.lr.safetensors", &o, &sum);
 *     if (st == NPUC_OK) npuc_summary_free(&sum);
 */
#ifndef NPUC_LOWRANK_H
#define NPUC_LOWRANK_H

#include "api.h"

#include <stddef.h>
#include <stdint.h>
#include "metrics.h"
#include "model.h"
#include "record.h"
#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- SVD */

/* Values are pinned. */
typedef enum npuc_svd_solver {
    NPUC_SVD_AUTO = 0,        /* randomized when the rank is small against min(m, n) */
    NPUC_SVD_EXACT = 1,       /* LAPACK sgesdd (sgesvd fallback) */
    NPUC_SVD_RANDOMIZED = 2   /* Halko-Martinsson-Tropp */
} npuc_svd_solver;

/* "auto", "exact", "randomized"; and back (0, or -1 if unknown). */
NPUC_API const char *npuc_svd_solver_name(npuc_svd_solver s);
NPUC_API int npuc_svd_solver_parse(const char *s, npuc_svd_solver *out);

typedef struct npuc_svd_opts {
    npuc_svd_solver solver;   /* default AUTO */
    int oversample;           /* p: extra sketch columns, 0..1000, default 10 */
    int power_iters;          /* q: power iterations, 0..100, default 3 */
    uint64_t seed;            /* Gaussian sketch seed, default 0 */
} npuc_svd_opts;

NPUC_API npuc_svd_opts npuc_svd_opts_defaults(void);

/* Truncated SVD of the row-major m x n matrix w:  w ~ u diag(s) vt with u
 * [m x k] and vt [k x n] row-major, s descending, 1 <= k <= min(m, n).
 * AUTO picks the randomized solver when min(m, n) >= 256 and
 * k + oversample <= min(m, n) / 4, else the exact one.  Runs on the
 * context's thread count; the result does not depend on it.  Errors:
 * NPUC_ERR_ARG (sizes, options), NPUC_ERR_VALUE (NaN or Inf in w),
 * NPUC_ERR_NUMERIC (no convergence), NPUC_ERR_UNSUPPORTED (too large for
 * LAPACK's 32-bit sizes), NPUC_ERR_NOMEM. */
NPUC_API npuc_status npuc_svd(npuc_ctx *ctx, const float *w, int64_t m, int64_t n, int64_t k,
                     const npuc_svd_opts *o, float *s, float *u, float *vt);

/* All min(m, n) singular values of w, descending (exact: sgesdd without
 * vectors).  The optimum a rank-r factorisation can reach is
 * sqrt(sum_{i>=r} s_i^2) / sqrt(sum s_i^2).  Errors as npuc_svd. */
NPUC_API npuc_status npuc_svd_values(npuc_ctx *ctx, const float *w, int64_t m, int64_t n, float *s);

/* ---------------------------------------------------------------- ranks */

/* Values are pinned. */
typedef enum npuc_rank_rule {
    NPUC_RANK_NONE = 0,       /* not chosen: an error */
    NPUC_RANK_FIXED = 1,      /* rank = params.rank */
    NPUC_RANK_RATIO = 2,      /* rank = ceil(value * min(m, n)), value in (0, 1] */
    NPUC_RANK_ENERGY = 3,     /* smallest r with sum_{i<r} s_i^2 >= value * sum s_i^2, value in (0, 1] */
    NPUC_RANK_MAX_ERROR = 4   /* smallest r with relative Frobenius error <= value, value in (0, 1) */
} npuc_rank_rule;

typedef struct npuc_lowrank_params {
    npuc_rank_rule rule;      /* default NONE: the caller must choose */
    int64_t rank;             /* FIXED: >= 1 */
    double value;             /* RATIO, ENERGY, MAX_ERROR */
    int64_t round_to;         /* round ranks up to a multiple of this (>= 1; default 1) */
    npuc_svd_opts svd;
} npuc_lowrank_params;

NPUC_API npuc_lowrank_params npuc_lowrank_params_defaults(void);

/* NPUC_ERR_ARG, with a message naming the option ("--energy 1.5: must be in
 * (0, 1]"), when a rule or an SVD option is out of range. */
NPUC_API npuc_status npuc_lowrank_params_check(npuc_ctx *ctx, const npuc_lowrank_params *p);

/* ---------------------------------------------------------------- tensors */

/* How a weight is factored.  Layouts OI and OIHW put the output axis first:
 * the matrix is [out, in * spatial] and lr_a (output side) = L, lr_b = R.
 * IO and HWIO put it last: the matrix is [spatial * in, out] as stored, and
 * lr_b = L (the kh x kw conv, HWIO [*spatial, in, r]), lr_a = R (the 1x1
 * conv, HWIO [1.., r, out]).  No data moves in either case. */
typedef struct npuc_lowrank_geom {
    int64_t m, n;             /* the matrix as stored, row-major */
    int out_first;            /* 1: OI/OIHW, 0: IO/HWIO */
} npuc_lowrank_geom;

/* The matrix view of t.  NPUC_ERR_ARG naming the tensor when t cannot be
 * factored: rank < 2, not a float dtype, an empty tensor, or a layout other
 * than OI, IO, OIHW, HWIO (depthwise HWIM and transposed IOHW kernels are
 * not plain matrix products; NONE has no output axis). */
NPUC_API npuc_status npuc_lowrank_geometry(npuc_ctx *ctx, const npuc_tensor_info *t, npuc_lowrank_geom *g);

/* Dtype, rank, shape and layout of the two factors of t at rank r (names
 * and groups are left NULL).  For OIHW [O, I, kh, kw]: a = [O, r, 1, 1],
 * b = [r, I, kh, kw]; for HWIO [kh, kw, I, O]: b = [kh, kw, I, r],
 * a = [1, 1, r, O]; for OI [O, I]: a = [O, r], b = [r, I]; for IO [I, O]:
 * b = [I, r], a = [r, O].  The dense tensor is rebuilt as the row-major
 * product (b x a for IO/HWIO, a x b for OI/OIHW) of the factors viewed as
 * matrices.  NPUC_ERR_ARG (naming the tensor) for a layout without a
 * factorisation or a rank outside 1..min(m, n). */
NPUC_API npuc_status npuc_lowrank_factor_shapes(npuc_ctx *ctx, const npuc_tensor_info *t, int64_t r,
                                       npuc_tensor_info *a, npuc_tensor_info *b);

/* What npuc_lowrank_tensor found for one tensor. */
typedef struct npuc_lowrank_result {
    npuc_lowrank_geom g;
    int64_t rank;             /* chosen rank (after --round-to) */
    int rank_is_bound;        /* 1: the randomized search stopped once no saving rank was
                                 left; the rule needs at least `rank` (factored is 0) */
    int factored;             /* 0: no saving (r (m + n) >= m n); a and b are NULL */
    npuc_svd_solver solver;   /* the solver that ran: EXACT or RANDOMIZED */
    double energy;            /* kept fraction of sum s_i^2 */
    double rel_fro;           /* relative Frobenius error: from the tail singular values
                                 (exact solver, F32) or measured on the factors */
    double rel_fro_measured;  /* |W - a x b|_F / |W|_F of the factors as stored */
    npuc_error_stats err;     /* of the stored factors; rel_fro/sqnr/mse from the tail
                                 for the exact solver on F32 data, else measured */
    npuc_tensor_info a_info, b_info; /* factor shapes (names NULL) */
    float *a, *b;             /* factor values (malloc'd), already rounded to t->dtype */
} npuc_lowrank_result;

/* Factors t (its values w, t->numel finite floats) under p.  The rank is
 * chosen by p's rule; a FIXED rank above min(m, n) is NPUC_ERR_ARG.  NaN or
 * Inf in w is NPUC_ERR_VALUE naming the tensor.  On success *res owns a and
 * b (free with npuc_lowrank_result_free); on failure *res is zeroed. */
NPUC_API npuc_status npuc_lowrank_tensor(npuc_ctx *ctx, const npuc_tensor_info *t, const float *w,
                                const npuc_lowrank_params *p, npuc_lowrank_result *res);
/* Frees res's factors and zeroes it (NULL is a no-op). */
NPUC_API void npuc_lowrank_result_free(npuc_lowrank_result *res);

/* ---------------------------------------------------------------- models */

typedef struct npuc_lowrank_opts {
    npuc_lowrank_params params;
    const char *const *include;    /* regexes: factor only matching tensors; every match must be
                                      factorable (else NPUC_ERR_ARG) */
    size_t ninclude;
    const char *const *exclude;    /* regexes: never factor matching tensors */
    size_t nexclude;
    const char *const *layer_rank; /* "REGEX=R" (R >= 1): a selected tensor matching REGEX is
                                      factored at the fixed rank R instead of params' rule, as if
                                      the run had --rank R (round_to still rounds it up); the
                                      first matching rule wins.  Rules do not select tensors. */
    size_t nlayer_rank;
    npuc_write_opts write;         /* output options (format, overwrite, deflate) */
    /* Called after each tensor is factored or passed over (calling thread). */
    void (*on_tensor)(void *user, size_t index, size_t count, const npuc_tensor_record *r);
    void *user;
} npuc_lowrank_opts;

NPUC_API npuc_lowrank_opts npuc_lowrank_opts_defaults(void);

/* Factors the selected tensors of m and writes the artifact to out.  Without
 * --include every float tensor with layout OI, IO, OIHW or HWIO is selected,
 * except depthwise kernels; one whose fixed rank exceeds min(m, n), or that
 * would not shrink, stays dense with a note.  With --include, a matching
 * tensor that cannot be factored or whose fixed rank exceeds min(m, n) is an
 * error.  A selected tensor matched by a layer_rank rule whose R exceeds its
 * min(m, n) is always an error (NPUC_ERR_ARG naming the tensor and the rule);
 * so are a layer_rank rule that is not "REGEX=R" with an integer R >= 1 and
 * one that matches no tensor of m.  Factored tensors become "<name>.lr_a" and "<name>.lr_b", recorded
 * in the "npuc" metadata entry with encoding "lowrank" (docs/artifact.md);
 * `npuc decompress` multiplies them back.
 *
 * *sum gets one record per input tensor: action FACTORED (scheme "r=64") or
 * KEPT; extras "rank", "energy", "flops_before" (2 m n, per input vector or
 * output position), "flops_after" (2 r (m + n)), "solver" (1 exact,
 * 2 randomized), "rel_fro_measured", "m", "n".  The work happens before
 * anything is written (factors are spilled to an unlinked temporary file
 * beside out, so memory follows the largest tensor); on failure nothing is
 * written at out and *sum is empty. */
NPUC_API npuc_status npuc_lowrank_model(npuc_ctx *ctx, npuc_model *m, const char *out,
                               const npuc_lowrank_opts *o, npuc_summary *sum);

#ifdef __cplusplus
}
#endif
#endif
