/*
 * range_internal.h - what the range estimators (range.c, range_percentile.c,
 * range_mse.c, range_entropy.c) share: the quantizer arithmetic they evaluate
 * candidate ranges with, the exact error of a range, and each method's
 * scratch needs.  Library-private.
 *
 * The quantizer modelled here is the one of include/npuc/quant.h and
 * src/kernels/npuc_kernels.h (calib depends on core only, so it is restated
 * rather than called):
 *   symmetric,  clip c:   scale = c / qmax, qmax = 2^(b-1) - 1, zp = 0
 *   asymmetric, [lo, hi]: lo <= 0 <= hi after widening to include 0,
 *                         scale = (float)(((double)hi - lo) / (2^b - 1)),
 *                         zp = clamp(rint(-lo / scale), 0, 2^b - 1)
 *   q = clamp(rint(x * inv_scale) + zp, qmin, qmax), inv_scale = 1.0f / scale,
 *   deq = (float)(q - zp) * scale
 * in float (rint rounds half to even).  Because qmin and qmax are integers
 * and rint is monotone,
 * clamp(rint(v) + zp, qmin, qmax) - zp == rint(clamp(v, qmin - zp, qmax - zp)),
 * which is how the evaluators below compute it (clamp first, so the rounding
 * argument stays small).
 *
 * Symmetric codes use the restricted range [-qmax, qmax], as quant.h does.
 * (A quantizer that also used -2^(b-1) could only give a value below -c a
 * code closer to it, so the errors computed here would bound its errors and
 * "never worse than minmax" would still hold.)
 */
#ifndef NPUC_RANGE_INTERNAL_H
#define NPUC_RANGE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "npuc_internal.h"

/* The inner loops (minmax, exact error) are kernels (kernels/calib_lanes.h):
 * SSE2 where the build targets it, plain C otherwise or with
 * NPUC_FORCE_REF=1, with the same float operations per lane, so the results
 * are bit-identical. */
#include "kernels/calib_lanes.h"

/* Bit widths MSE and entropy accept. */
#define NPUC_RANGE_MIN_BITS 2
#define NPUC_RANGE_MAX_BITS 16

/* Scratch pointers handed out by the estimators are aligned to this. */
#define NPUC_RANGE_ALIGN 64

/* One candidate quantizer, ready to apply: deq(x) = rint(clamp(x * inv, vmin, vmax)) * scale. */
typedef struct npuc__qparams {
    float scale, inv_scale;
    float vmin, vmax; /* qmin - zp and qmax - zp, integers */
    int32_t zp;
} npuc__qparams;

/* Fills p for the symmetric clip c > 0 at `bits`.  Returns 0 when the scale
 * or its inverse is not a normal finite float (c too small to quantize
 * with), so the candidate must be skipped. */
int npuc__qparams_sym(float c, int bits, npuc__qparams *p);
/* The same for the asymmetric range [lo, hi] (widened to include 0 here). */
int npuc__qparams_asym(float lo, float hi, int bits, npuc__qparams *p);

/* Sum of squared quantization errors of x[0..n) under p, as the quantizer
 * produces them: deq is formed in float exactly as above, (deq - x)^2 summed
 * in float over 8 lanes (index mod 8) per block of 256 values and the blocks
 * in double, so the result is deterministic, identical with and without
 * SIMD, and within 2.1e-6 relative of the exact sum. */
double npuc__range_sse(const float *x, size_t n, const npuc__qparams *p);

/* min, max of x[0..n); returns nonzero when some value is NaN or +-Inf. */
int npuc__range_minmax(const float *x, size_t n, float *lo, float *hi);

/* Aligns p up to NPUC_RANGE_ALIGN. */
static inline void *npuc__range_align(void *p) {
    uintptr_t u = (uintptr_t)p;
    return (void *)((u + (NPUC_RANGE_ALIGN - 1)) & ~(uintptr_t)(NPUC_RANGE_ALIGN - 1));
}

/* Scratch bytes each method needs for a group of n values (alignment slack
 * included); SIZE_MAX when that would overflow. */
size_t npuc__range_percentile_scratch(size_t n);
size_t npuc__range_mse_scratch(size_t n, int bits, int symmetric);
size_t npuc__range_entropy_scratch(size_t n, int bits, int symmetric);

/* The methods.  x holds n > 0 finite values whose minmax range is
 * [lo0, hi0] (lo0 = -hi0 = -max|x| when symmetric, lo0 < hi0), options are
 * validated and scratch holds the method's scratch size (NULL when that is
 * 0).  They cannot fail and return a range inside [lo0, hi0]. */
void npuc__range_percentile(const float *x, size_t n, double pct, int symmetric, float lo0,
                            float hi0, float *lo, float *hi, void *scratch);
void npuc__range_mse(const float *x, size_t n, int bits, int symmetric, float lo0, float hi0,
                     float *lo, float *hi, void *scratch);
void npuc__range_entropy(const float *x, size_t n, int bits, int symmetric, float lo0, float hi0,
                         float *lo, float *hi, void *scratch);
/* npuc__range_mse on the kernel table K (npuc__range_mse passes
 * npuc_calib_kernels()): every table chooses the same range, bit for bit;
 * the reference table (batch 1) evaluates one candidate at a time, the
 * specification of the search. */
/* The MSE search's grid factor exp2(j / 3) from its table (NAN outside it). */
double npuc__range_mse_grid(int j);
void npuc__range_mse_k(const npuc_calib_kernel_table *K, const float *x, size_t n, int bits,
                       int symmetric, float lo0, float hi0, float *lo, float *hi, void *scratch);

/* The entropy method's histogram and its KL search (range_entropy.c), shared
 * with activation calibration (act_*.c): h holds NPUC_KL_BINS counts of
 * |x| over [0, amax]; candidates i = NPUC_KL_START..NPUC_KL_BINS.  trt = 0
 * is the weights' variant (smoothed empty last level, first minimum), trt = 1
 * TensorRT's EntropyCalibration2 as pytorch-quantization computes it (an
 * empty Q bin under P mass is an infinite KL, last minimum).  Returns the best
 * i with its KL in *kl (INFINITY when none is finite); scratch holds
 * npuc__entropy_search_scratch() bytes. */
#define NPUC_KL_BINS 2048
#define NPUC_KL_START 128
size_t npuc__entropy_search_scratch(void);
int npuc__entropy_search(const uint64_t *h, int bits, int trt, double *kl, void *scratch);

#endif
