/*
 * qk_grid.h - the code grids of symmetric quantization and the scale of the
 * full grid (library-private, header-only so that formats/gguf can share it
 * without linking the kernels).
 *
 * The restricted grid is PyTorch's: codes -(2^(b-1)-1)..2^(b-1)-1, scale =
 * amax / (2^(b-1)-1).  The full grid is ggml's Q4_0/Q5_0 (ggml-quants.c,
 * quantize_row_q4_0_ref): every one of the 2^b codes, the element of largest
 * magnitude m keeping its sign and mapping to -2^(b-1), so
 *     d = m / -2^(b-1)      (one float division, as ggml writes it)
 * and -m lands on +2^(b-1), one past the top code, where it is clipped.  The
 * GGUF writer's Q4_0/Q5_0 and npuc's --grid full both take d from here.
 */
#ifndef NPUC_QK_GRID_H
#define NPUC_QK_GRID_H

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* The value of largest magnitude in x[0..n) with its sign, the first one on
 * ties (ggml's choice); 0 when n == 0 or all values are 0.  NaN is never
 * larger, so it is skipped. */
static inline float npuc_qk_signed_max(const float *x, size_t n) {
    float amax = 0.0f, max = 0.0f;
    for (size_t j = 0; j < n; j++)
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    return max;
}

/* The signed maximum of a range [lo, hi] found by min/max: the end of larger
 * magnitude, the positive one when they tie (-lo == hi). */
static inline float npuc_qk_signed_max_range(float lo, float hi) { return -lo > hi ? lo : hi; }

/* The full grid's scale for signed maximum m at `bits` bits (may be
 * negative, zero or subnormal: the caller decides what a zero scale means). */
static inline float npuc_qk_full_scale(float m, int bits) { return m / (float)-(1 << (bits - 1)); }

/* Code range of a scheme: asymmetric [0, 2^b-1]; symmetric restricted
 * [-(2^(b-1)-1), 2^(b-1)-1]; symmetric full [-2^(b-1), 2^(b-1)-1]. */
static inline void npuc_qk_code_range(int bits, int symmetric, int full, int32_t *qmin, int32_t *qmax) {
    if (symmetric) {
        *qmax = ((int32_t)1 << (bits - 1)) - 1;
        *qmin = full ? -*qmax - 1 : -*qmax;
    } else {
        *qmin = 0;
        *qmax = ((int32_t)1 << bits) - 1;
    }
}

/* Scale, 1/scale and zero point of a clipping range [lo, hi] (quant.h
 * specifies them; npuc__quant_params_from_range and the kernels'
 * range_params are this, and the SIMD range_params repeat its operations in
 * the same order, so their results are bit-identical):
 *   symmetric full   s = npuc_qk_full_scale(signed max of the range), zp 0
 *   symmetric        s = max(|lo|, |hi|) / (2^(b-1) - 1), zp 0
 *   asymmetric       l = min(lo, 0), h = max(hi, 0) in double,
 *                    s = (float)((h - l) / (2^b - 1)),
 *                    zp = clamp(rint_half_even(-l / s), 0, 2^b - 1)
 * A scale whose magnitude is below FLT_MIN (an all-zero group, or a
 * subnormal range) becomes FLT_MIN, so 1/s stays finite. */
static inline void npuc_qk_range_params(float lo, float hi, int bits, int symmetric, int full,
                                        float *scale, float *inv, int32_t *zp) {
    float s;
    int32_t z = 0;
    if (symmetric && full) {
        s = npuc_qk_full_scale(npuc_qk_signed_max_range(lo, hi), bits);
        if (!(fabsf(s) >= FLT_MIN)) s = FLT_MIN; /* all-zero group, or subnormal range */
        *scale = s;
        *inv = 1.0f / s;
        *zp = 0;
        return;
    }
    if (symmetric) {
        float amax = fmaxf(fabsf(lo), fabsf(hi));
        s = amax / (float)((1 << (bits - 1)) - 1);
    } else {
        double l = lo < 0 ? lo : 0, h = hi > 0 ? hi : 0;
        s = (float)((h - l) / (double)((1 << bits) - 1));
        if (!(s >= FLT_MIN)) s = FLT_MIN;
        float zf = nearbyintf((float)(-l) / s);
        float qmax = (float)((1 << bits) - 1);
        z = (int32_t)(zf < 0 ? 0 : zf > qmax ? qmax : zf);
    }
    if (!(s >= FLT_MIN)) s = FLT_MIN; /* all-zero group, or subnormal range */
    *scale = s;
    *inv = 1.0f / s;
    *zp = z;
}

#endif
