/*
 * cvt_f16c.c - AVX2 + F16C versions of the F16/BF16 widening kernels
 * (cvt_kernels.h), 8 elements a step, 16 per loop turn; the tail goes to
 * the reference.
 *
 * F16: VCVTPH2PS converts zeros, subnormals (exactly; MXCSR.DAZ does not
 * apply to it), normals and infinities as npuc_f16_to_f32 does, but it
 * quiets a signalling NaN (sets bit 22 of the result), where the reference
 * keeps the 10 payload bits as they are.  So every lane whose exponent field
 * is all ones (Inf or NaN) takes the reference's formula instead, computed
 * on the integers: sign << 16 | 0x7f800000 | mantissa << 13.  The blend costs
 * a few integer operations per 8 elements, and the loop is bound by memory.
 * BF16: the 16 bits become the upper half of the float (zero-extend, shift).
 * Only these functions are compiled for AVX2/F16C (function-level target
 * attributes); the table is handed out only when the CPU reports both.
 */
#include "kernels/cvt_kernels.h"
#include "kernels/cpu_x86.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#define CVT_F16C __attribute__((target("avx2,f16c")))
#define CVT_F16C_INLINE static inline __attribute__((always_inline, target("avx2,f16c")))

/* 8 halves -> 8 floats, bit for bit npuc_f16_to_f32 (see the top). */
CVT_F16C_INLINE __m256 f16x8(__m128i h) {
    const __m256i h32 = _mm256_cvtepu16_epi32(h);
    const __m256 hw = _mm256_cvtph_ps(h);
    const __m256i emask = _mm256_set1_epi32(0x7c00);
    const __m256i special = _mm256_cmpeq_epi32(_mm256_and_si256(h32, emask), emask);
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x8000)), 16);
    const __m256i man = _mm256_slli_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x3ff)), 13);
    const __m256i ref = _mm256_or_si256(_mm256_or_si256(sign, man), _mm256_set1_epi32(0x7f800000));
    return _mm256_blendv_ps(hw, _mm256_castsi256_ps(ref), _mm256_castsi256_ps(special));
}

CVT_F16C static void f16_to_f32_f16c(float *dst, const void *src, size_t n) {
    const unsigned char *s = src;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(s + 2 * i));
        const __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + 2 * i + 16));
        _mm256_storeu_ps(dst + i, f16x8(a));
        _mm256_storeu_ps(dst + i + 8, f16x8(b));
    }
    if (i < n) npuc_cvt_kernels_ref()->f16_to_f32(dst + i, s + 2 * i, n - i);
}

CVT_F16C static void bf16_to_f32_f16c(float *dst, const void *src, size_t n) {
    const unsigned char *s = src;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(s + 2 * i));
        const __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + 2 * i + 16));
        _mm256_storeu_si256((__m256i *)(void *)(dst + i), _mm256_slli_epi32(_mm256_cvtepu16_epi32(a), 16));
        _mm256_storeu_si256((__m256i *)(void *)(dst + i + 8), _mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
    }
    if (i < n) npuc_cvt_kernels_ref()->bf16_to_f32(dst + i, s + 2 * i, n - i);
}

static const npuc_cvt_kernel_table g_f16c = {
    .name = "f16c",
    .f16_to_f32 = f16_to_f32_f16c,
    .bf16_to_f32 = bf16_to_f32_f16c,
};

const npuc_cvt_kernel_table *npuc_cvt_kernels_f16c(void) {
    if (npuc_cpu_has(NPUC_CPU_AVX2 | NPUC_CPU_F16C)) return &g_f16c;
    return NULL;
}

#else

const npuc_cvt_kernel_table *npuc_cvt_kernels_f16c(void) { return NULL; }

#endif
