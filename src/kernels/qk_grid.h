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

#endif
