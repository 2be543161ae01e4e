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

#ifdef __cplusplus
}
#endif
#endif
