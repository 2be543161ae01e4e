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
 * Example (compiled by tests/cli/c_api.sh):
 *     npuc_range_opts o = npuc_range_opts_defaults();
 *     o.method = NPUC_RANGE_MSE; o.bits = 4;
 *     float lo, hi;
 *     npuc_range_estimate(ctx, x, n, &o, &lo, &hi, NULL);   // NULL: it allocates its scratch
 */
#ifndef NPUC_CALIB_H
#define NPUC_CALIB_H

#include "api.h"

#include <stddef.h>
#include <stdint.h>
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
 * between calls by pass drivers.  Errors: NPUC_ERR_ARG for a bad option
 * (percentile, bits, method), NPUC_ERR_VALUE when x holds NaN or Inf,
 * NPUC_ERR_NOMEM. */
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
 * as stored, else diag(H) / n from W.hessian or W.input.  *found and the
 * errors as npuc_calib_hessian (NPUC_ERR_FORMAT naming the file and tensor
 * for a shape other than K, NaN, Inf or a negative value). */
NPUC_API npuc_status npuc_calib_importance(npuc_ctx *ctx, npuc_calib *c, const char *weight, uint64_t K,
                                           double *imp, int *found);

/* ------------------------------------------------- activation calibration
 *
 * Activation ranges for NPUs (docs/calibration-activations.md): samples of
 * one activation arrive in chunks (rows of an [N, ...] tensor, from one or
 * several files) and may have to be read more than once, because exact
 * results need the whole data set first:
 *   pass 1  count, min, max (minmax ends here);
 *   pass 2  entropy, mse: a 2048-bin histogram of |x| over [0, amax], amax
 *           from pass 1, so every chunk bins alike and histograms merge by
 *           adding counts, exactly as one pass over all samples would;
 *   pass 2+ percentile: exact order statistics by narrowing (a 256-bin
 *           histogram of the values between two bounds per pass, then the
 *           few values of the target bin are kept and sorted).
 * Values are viewed as [outer, C, inner] (C = 1 per tensor).
 *
 *     npuc_act_calib *c;
 *     npuc_act_calib_new(ctx, "acts.safetensors: tensor 'relu1'", 1, &o, &c);
 *     int more = 1;
 *     while (more) {
 *         for (each chunk) npuc_act_calib_feed(ctx, c, x, rows * per_row, 1);
 *         npuc_act_calib_end_pass(ctx, c, &more);
 *     }
 *     npuc_act_result r;
 *     npuc_act_calib_result(c, 0, &r);
 *     npuc_act_calib_free(c);
 */
typedef struct npuc_act_opts {
    npuc_range_opts range; /* method, percentile, bits (2..16), symmetric (default 1) */
} npuc_act_opts;

NPUC_API npuc_act_opts npuc_act_opts_defaults(void);

typedef struct npuc_act_calib npuc_act_calib;

/* label prefixes every message ("FILE: tensor 'NAME'"); channels >= 1.
 * Returns NPUC_ERR_ARG for bad options, NPUC_ERR_NOMEM. */
NPUC_API npuc_status npuc_act_calib_new(npuc_ctx *ctx, const char *label, uint64_t channels,
                                        const npuc_act_opts *o, npuc_act_calib **out);
NPUC_API void npuc_act_calib_free(npuc_act_calib *c);
/* Adds x = [outer, channels, inner] to the current pass.  A NaN or Inf is
 * NPUC_ERR_VALUE naming the label and the count.  Each pass must see the
 * same values (in any chunking and order). */
NPUC_API npuc_status npuc_act_calib_feed(npuc_ctx *ctx, npuc_act_calib *c, const float *x, uint64_t outer,
                                         uint64_t inner);
/* Closes the pass; *more = 1 when every chunk must be fed again.  A pass
 * that saw other values than the first (a count that differs) is
 * NPUC_ERR_VALUE; no values at all is NPUC_ERR_VALUE. */
NPUC_API npuc_status npuc_act_calib_end_pass(npuc_ctx *ctx, npuc_act_calib *c, int *more);

#define NPUC_ACT_BINS 2048

/* One channel's result, valid while c lives. */
typedef struct npuc_act_result {
    uint64_t count;      /* values seen */
    float min, max;      /* their extremes */
    float amax;          /* max |x|, the histogram's upper edge */
    float lo, hi;        /* the chosen range (lo = -hi when symmetric) */
    float scale;         /* symmetric: hi / (2^(b-1)-1); asymmetric as quant.h; FLT_MIN when 0 */
    int32_t zero_point;  /* 0 when symmetric */
    int bin;             /* entropy: the threshold bin i (threshold = i * amax / 2048);
                            mse: the bin whose center is the threshold; else -1 */
    double threshold;    /* entropy, mse, percentile: the clip before the range is formed */
    double kl;           /* entropy: KL divergence at the chosen bin; else NaN */
    double mse;          /* mse: the histogram's mean squared error there; else NaN */
    const uint64_t *histogram; /* entropy, mse: NPUC_ACT_BINS counts of |x| over [0, amax]; else NULL */
} npuc_act_result;

/* The result of channel ch after the last pass; NPUC_ERR_ARG before that. */
NPUC_API npuc_status npuc_act_calib_result(const npuc_act_calib *c, uint64_t ch, npuc_act_result *r);

/* ------------------------------------------- exports for other toolchains
 *
 * Both read a calibration document written by `npuc calibrate`
 * ("schema": "npuc.calibration/1", docs/calibration-activations.md) and
 * write their file atomically (no overwrite unless overwrite != 0).
 *
 * npuc_trt_cache_export: a TensorRT calibration cache, the line
 * "TRT-<version>-EntropyCalibration2" then "<name>: <hex>" per activation,
 * hex the 8 lowercase digits of the big-endian bits of the float32 scale
 * amax / 127 (symmetric 8-bit, per tensor only; version e.g. "8601").
 *
 * npuc_aimet_export: AIMET encodings JSON (docs/aimet.md), version "0.6.1"
 * or "1.0.0": activation_encodings from calib_path (may be NULL) and
 * param_encodings for every "quant" entry of the npuc artifact at
 * artifact_path (may be NULL).
 *
 * Errors: NPUC_ERR_ARG for a NULL argument or a bad version,
 * NPUC_ERR_NOT_FOUND / NPUC_ERR_FORMAT for a calibration document or
 * artifact that cannot be read or is malformed (naming the file),
 * NPUC_ERR_UNSUPPORTED for what the target cannot hold (a TensorRT cache:
 * per-channel, asymmetric or non-8-bit scales), NPUC_ERR_EXISTS when out
 * exists and overwrite is 0, NPUC_ERR_IO writing; nothing is written then. */
NPUC_API npuc_status npuc_trt_cache_export(npuc_ctx *ctx, const char *calib_path, const char *version,
                                           const char *out, int overwrite);
NPUC_API npuc_status npuc_aimet_export(npuc_ctx *ctx, const char *calib_path, const char *artifact_path,
                                       const char *version, const char *out, int overwrite);

typedef struct npuc_model npuc_model; /* model.h */

/* ------------------------------------------- importance matrix for llama.cpp
 *
 * llama.cpp's legacy importance matrix (the .dat that llama-imatrix writes
 * and `llama-quantize --imatrix` reads) from calibration inputs
 * (docs/calibration.md, "Importance matrix for llama.cpp"): for every float
 * tensor W.input [..., K] of the files (leading axes are rows; tensors of one
 * W in several files are one entry whose rows are all of theirs, with the
 * same K), the sum of x^2 per input column, accumulated in double over the
 * rows in file then row order.  Written to out atomically, entries in name
 * order: name W, ncall = the row count, the K sums as float32, so that
 * sum / ncall, what llama-quantize divides, is the mean of x^2; the trailer
 * holds the largest row count and files[0]'s path as the dataset name.
 * *nentries (may be NULL) gets the number of entries.  Errors, naming the
 * file and tensor, with nothing written: no W.input tensor
 * (NPUC_ERR_NOT_FOUND), a W.input that is not float, of rank < 2 or without
 * rows, or whose K differs between files (NPUC_ERR_FORMAT), NaN or Inf in a
 * row or a sum beyond float32 (NPUC_ERR_VALUE), more than 2^31-1 rows or
 * values (NPUC_ERR_UNSUPPORTED: the format's counts are int32),
 * NPUC_ERR_EXISTS, NPUC_ERR_IO. */
NPUC_API npuc_status npuc_imatrix_from_calib(npuc_ctx *ctx, npuc_model *const *files, size_t nfiles,
                                             const char *out, int overwrite, size_t *nentries);

#ifdef __cplusplus
}
#endif
#endif
