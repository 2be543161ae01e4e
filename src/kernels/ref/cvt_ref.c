/*
 * cvt_ref.c - the scalar reference of the F16/BF16 widening kernels
 * (cvt_kernels.h): npuc_f16_to_f32 / npuc_bf16_to_f32 element by element,
 * the loops of npuc_convert.  The x86 versions finish their tails with it.
 */
#include <stdint.h>
#include <string.h>

#include <npuc/dtype.h>

#include "kernels/cvt_kernels.h"

/* The one loop of both, calling the specification's decoder per element. */
static inline void widen_each(float *dst, const void *src, size_t n, float (*dec)(uint16_t)) {
    const unsigned char *s = src;
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, s + 2 * i, 2);
        const float f = dec(h);
        memcpy(dst + i, &f, 4);
    }
}

static void f16_to_f32_ref(float *dst, const void *src, size_t n) { widen_each(dst, src, n, npuc_f16_to_f32); }
static void bf16_to_f32_ref(float *dst, const void *src, size_t n) { widen_each(dst, src, n, npuc_bf16_to_f32); }

static const npuc_cvt_kernel_table g_ref = {
    .name = "ref",
    .f16_to_f32 = f16_to_f32_ref,
    .bf16_to_f32 = bf16_to_f32_ref,
};

const npuc_cvt_kernel_table *npuc_cvt_kernels_ref(void) { return &g_ref; }
