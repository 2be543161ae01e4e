/*
 * cvt_ref.c - the scalar reference of the F16/BF16 widening kernels
 * (cvt_kernels.h): npuc_f16_to_f32 / npuc_bf16_to_f32 element by element,
 * the loops of npuc_convert.  The x86 versions finish their tails with it.
 */
#include <stdint.h>
#include <string.h>

#include "kernels/cvt_kernels.h"
#include <npuc/dtype.h>

static void f16_to_f32_ref(float *dst, const void *src, size_t n) {
    const unsigned char *s = src;
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, s + 2 * i, 2);
        const float f = npuc_f16_to_f32(h);
        memcpy(dst + i, &f, 4);
    }
}

static void bf16_to_f32_ref(float *dst, const void *src, size_t n) {
    const unsigned char *s = src;
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, s + 2 * i, 2);
        const float f = npuc_bf16_to_f32(h);
        memcpy(dst + i, &f, 4);
    }
}

static const npuc_cvt_kernel_table g_ref = {
    .name = "ref",
    .f16_to_f32 = f16_to_f32_ref,
    .bf16_to_f32 = bf16_to_f32_ref,
};

const npuc_cvt_kernel_table *npuc_cvt_kernels_ref(void) { return &g_ref; }
