/*
 * npuc/calib.h - range estimation: choosing the clipping range [lo, hi] that
 * a group of weights is quantized over.
 *
 * minmax takes the extremes and never clips.  The other methods clip
 * outliers to give the bulk of the values finer steps:
 *   percentile=P  the P-th percentile of |x| (symmetric) or the (100-P)-th and
 *                 P-th percentiles of x (asymmetric);
 *   mse           searches the clip that minimises the squared error of this
 *                 group's own quantization at the given bit width (a coarse
 *                 grid over (0, max], then a finer grid around the best);
 *   entropy       TensorRT's calibration: a 2048-bin histogram of |x|, each
 *                 candidate threshold from bin 128 up folds the outliers into
 *                 its last kept bin, and the threshold with the smallest
 *                 KL divergence between the clipped and quantized
 *                 distributions wins.
 * All methods are deterministic and ignore nothing: the caller rejects
 * non-finite input first.
 *
 *     npuc_range_opts o = npuc_range_opts_defaults();
 *     o.method = NPUC_RANGE_MSE; o.bits = 4;
 *     float lo, hi;
 *     npuc_range_estimate(ctx, x, n, &o, &lo, &hi);
 */
#ifndef NPUC_CALIB_H
#define NPUC_CALIB_H

#include "api.h"

#include <stddef.h>
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Values are pinned. */
typedef enum npuc_range_method {
    NPUC_RANGE_MINMAX = 0,
    NPUC_RANGE_PERCENTILE = 1,
    NPUC_RANGE_MSE = 2,
    NPUC_RANGE_ENTROPY = 3
} npuc_range_method;

typedef struct npuc_range_opts {
    npuc_range_method method;
    double percentile; /* for PERCENTILE: in (0, 100], default 99.99 */
    int bits;          /* the bit width the range is for (MSE, ENTROPY), default 8 */
    int symmetric;     /* 1: a range symmetric around 0 (lo = -hi), default 1 */
} npuc_range_opts;

NPUC_API npuc_range_opts npuc_range_opts_defaults(void);

/* Parses "minmax", "percentile=99.9", "mse", "entropy" into o->method and
 * o->percentile.  Returns NPUC_ERR_ARG with a message for anything else. */
NPUC_API npuc_status npuc_range_parse(npuc_ctx *ctx, const char *s, npuc_range_opts *o);
/* Writes the method's name as npuc_range_parse accepts it ("minmax",
 * "percentile=99.99", "mse", "entropy") into buf of size n. */
NPUC_API void npuc_range_format(const npuc_range_opts *o, char *buf, size_t n);

/* Estimates the clipping range of x[0..n) (finite values).  For symmetric
 * ranges lo = -hi.  The range is not widened to include 0: the quantizer does
 * that for asymmetric schemes.  n == 0 gives [0, 0].  scratch may be NULL (the
 * function allocates) or hold npuc_range_scratch_size(n, o) bytes, reused
 * between calls by pass drivers. */
NPUC_API npuc_status npuc_range_estimate(npuc_ctx *ctx, const float *x, size_t n, const npuc_range_opts *o,
                                float *lo, float *hi, void *scratch);
NPUC_API size_t npuc_range_scratch_size(size_t n, const npuc_range_opts *o);

/* The MSE range weighted by importance: the clip (a shrink of the minmax
 * range, o->bits 2..8, o->symmetric) that minimises
 * sum_k imp[k] (x[k] - deq(x[k]))^2, evaluated exactly in double, as
 * llama.cpp's quantizers use an importance matrix; imp == NULL weighs every
 * value 1.  full_grid: the symmetric full grid (npuc/quant.h,
 * NPUC_GRID_FULL); the range returned is then [t*lo0, t*hi0] of the minmax
 * range [lo0, hi0], so its end of larger magnitude keeps its sign.  Minmax
 * is returned unless a clip is better.  NPUC_ERR_VALUE for NaN/Inf values or
 * a negative importance.  Deterministic, O(n) per candidate (~40). */
NPUC_API npuc_status npuc_range_estimate_weighted(npuc_ctx *ctx, const float *x, const double *imp, size_t n,
                                                  const npuc_range_opts *o, int full_grid, float *lo, float *hi);

/* ------------------------------------------------- calibration files
 *
 * A calibration file (docs/calibration.md) is any weight file npuc reads
 * (safetensors, HDF5) holding, under a weight's own name W:
 *   W.input          [N, K] (or [..., K]): the rows the layer multiplies;
 *   W.hessian        [K, K]: sum of x x^T over the rows, F32 or F64, with
 *   W.hessian_count  a scalar (or one-element tensor): how many rows;
 *   W.input_sq       [K]: mean of x^2 per input column (an importance matrix).
 * K is the weight's reduction length (values per output channel, in the
 * weight's reduction order).  The handle opens the file's header only;
 * W.input is read chunk by chunk: at most chunk_rows rows (16 MiB) are
 * converted to F64 at a time (safetensors are memory-mapped, so anonymous memory stays
 * bounded; HDF5 datasets are decoded whole by the reader first).
 *
 *     npuc_calib *c;
 *     npuc_calib_open(ctx, "calib.safetensors", &c);
 *     double *H = malloc(K * K * sizeof *H);
 *     double n;
 *     int found;
 *     npuc_calib_hessian(ctx, c, "fc1.weight", K, H, &n, &found);
 *     npuc_calib_close(c);
 */
typedef struct npuc_calib npuc_calib;

/* Opens a calibration file.  On failure *out is NULL and ctx holds why. */
NPUC_API npuc_status npuc_calib_open(npuc_ctx *ctx, const char *path, npuc_calib **out);
NPUC_API void npuc_calib_close(npuc_calib *c);
NPUC_API const char *npuc_calib_path(const npuc_calib *c);

/* Rows of W.input converted per step (default: as many as fit 16 MiB of
 * F64, at least 64; rounded up to a multiple of 64; 0 restores the default).  The result does not depend on it: the sums run over fixed blocks
 * of 64 rows in row order whatever the chunk. */
NPUC_API void npuc_calib_set_chunk_rows(npuc_calib *c, size_t rows);

/* What the file holds for weight W: 1 when it has W.input or W.hessian (a
 * Hessian can be formed), 2 when it has only W.input_sq, 0 for nothing. */
NPUC_API int npuc_calib_has(const npuc_calib *c, const char *weight);

/* The sum of x x^T over the calibration rows of W (K x K, row-major, full
 * symmetric, accumulated in F64) and the row count *n, from W.hessian (with
 * W.hessian_count) or else from W.input.  *found is 0 (and H untouched)
 * when the file has neither.  NPUC_ERR_FORMAT names the file and tensor
 * when a shape does not match K, a count is missing or not positive, or a
 * value is NaN or Inf.  Runs on the context's threads; the result does not
 * depend on their number. */
NPUC_API npuc_status npuc_calib_hessian(npuc_ctx *ctx, npuc_calib *c, const char *weight, uint64_t K, double *H,
                                        double *n, int *found);

/* The importance of each of W's K input columns, the mean of x^2: W.input_sq
 * as stored, else diag(H) / n from W.hessian or W.input.  *found as above. */
NPUC_API npuc_status npuc_calib_importance(npuc_ctx *ctx, npuc_calib *c, const char *weight, uint64_t K,
                                           double *imp, int *found);

#ifdef __cplusplus
}
#endif
#endif
