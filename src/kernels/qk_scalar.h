/*
 * qk_scalar.h - the per-element steps of the quantization kernels
 * (library-private).
 *
 * The reference kernels (ref/qk_ref.c) are loops over these helpers, and the
 * optimised kernels (x86/) finish their tails with them, so the scalar
 * specification and every tail are literally the same code, as in ggml's
 * quantize_row_*_ref.  Each helper is written with the comparisons that the
 * SIMD instructions perform (x86 MINPS/MAXPS return their second operand
 * unless the comparison holds), so NaN takes the same path in every version:
 *
 *   - minmax skips NaN and +-Inf (they are counted by the caller);
 *   - quantization clamps x * inv_scale to [-2^24, 2^24] with NaN landing on
 *     -2^24, so a NaN weight becomes qmin (counted as clipped) and its
 *     error terms are NaN, which max_abs ignores and the sums carry.
 *
 * Rounding uses nearbyintf, which rounds half to even in the default
 * floating-point environment (the library never changes it).
 */
#ifndef NPUC_QK_SCALAR_H
#define NPUC_QK_SCALAR_H

#include <math.h>
#include <stdint.h>

#include "npuc_kernels.h"

/* x * inv_scale is clamped to +-this before conversion, which keeps the float
 * to integer conversion defined; it cannot change a code while qmin - zp and
 * qmax - zp lie within +-2^24 (true for every code width up to 24 bits). */
#define NPUC_QK_VLIM 0x1p24f

/* Folds x into [*lo, *hi] unless it is NaN or +-Inf; returns 1 when skipped.
 * x - x is NaN exactly for the non-finite values, the same test the SIMD
 * versions make with an unordered compare. */
static inline int npuc_qk_minmax_elem(float x, float *lo, float *hi) {
    const float d = x - x;
    if (d != d) return 1;
    *lo = x < *lo ? x : *lo;
    *hi = x > *hi ? x : *hi;
    return 0;
}

/* Quantizes one element (the arithmetic documented in npuc_kernels.h),
 * stores its dequantized value in *deq_out, adds its error terms into *acc
 * and returns the code byte.  q is formed in 64 bits, so any int32 zero point
 * and range is defined; the clamp to qmin then qmax is the order the SIMD
 * versions use (max, then min). */
static inline uint8_t npuc_qk_elem(float x, float scale, float inv_scale, int32_t zp, int32_t qmin,
                                   int32_t qmax, float *deq_out, npuc_qsums *acc) {
    float v = x * inv_scale;
    v = v > -NPUC_QK_VLIM ? v : -NPUC_QK_VLIM;
    v = v < NPUC_QK_VLIM ? v : NPUC_QK_VLIM;
    int64_t q = (int64_t)nearbyintf(v) + zp;
    acc->clipped += (uint64_t)(q < qmin || q > qmax);
    q = q < qmin ? qmin : q;
    q = q > qmax ? qmax : q;
    const float dq = (float)(q - zp) * scale;
    *deq_out = dq;

    /* Products of two floats are exact in double; only the summation rounds. */
    const double xd = x, dd = dq, e = dd - xd, ae = fabs(e);
    acc->sum_w2 += xd * xd;
    acc->sum_e2 += e * e;
    acc->sum_wd += xd * dd;
    acc->sum_d2 += dd * dd;
    acc->max_abs = ae > acc->max_abs ? ae : acc->max_abs;
    return (uint8_t)q;
}

#endif
