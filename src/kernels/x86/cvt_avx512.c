/*
 * cvt_avx512.c - AVX-512F versions of the F16/BF16 widening kernels
 * (cvt_kernels.h), 16 elements a step, 32 per loop turn; the tail goes to
 * the reference.  The arithmetic is cvt_f16c.c's with 16 lanes: VCVTPH2PS,
 * then the Inf/NaN lanes (exponent field all ones) replaced, under a mask,
 * by the reference's sign << 16 | 0x7f800000 | mantissa << 13, so that a
 * signalling NaN keeps its payload as npuc_f16_to_f32 does.  Only these
 * functions are compiled for AVX-512 (function-level target attributes);
 * the table is handed out only when the CPU reports AVX-512F.
 */
#include "kernels/cvt_kernels.h"
#include "kernels/cpu_x86.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#define CVT_AVX512 __attribute__((target("avx512f")))
#define CVT_AVX512_INLINE static inline __attribute__((always_inline, target("avx512f")))

/* 16 halves -> 16 floats, bit for bit npuc_f16_to_f32. */
CVT_AVX512_INLINE __m512 f16x16(__m256i h) {
    const __m512i h32 = _mm512_cvtepu16_epi32(h);
    const __m512 hw = _mm512_cvtph_ps(h);
    const __m512i emask = _mm512_set1_epi32(0x7c00);
    const __mmask16 special = _mm512_cmpeq_epi32_mask(_mm512_and_si512(h32, emask), emask);
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(h32, _mm512_set1_epi32(0x8000)), 16);
    const __m512i man = _mm512_slli_epi32(_mm512_and_si512(h32, _mm512_set1_epi32(0x3ff)), 13);
    const __m512i ref = _mm512_or_si512(_mm512_or_si512(sign, man), _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_mov_ps(hw, special, _mm512_castsi512_ps(ref));
}

CVT_AVX512 static void f16_to_f32_avx512(float *dst, const void *src, size_t n) {
    const unsigned char *s = src;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)(s + 2 * i));
        const __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(s + 2 * i + 32));
        _mm512_storeu_ps(dst + i, f16x16(a));
        _mm512_storeu_ps(dst + i + 16, f16x16(b));
    }
    if (i < n) npuc_cvt_kernels_ref()->f16_to_f32(dst + i, s + 2 * i, n - i);
}

CVT_AVX512 static void bf16_to_f32_avx512(float *dst, const void *src, size_t n) {
    const unsigned char *s = src;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)(s + 2 * i));
        const __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(s + 2 * i + 32));
        _mm512_storeu_si512(dst + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(a), 16));
        _mm512_storeu_si512(dst + i + 16, _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
    }
    if (i < n) npuc_cvt_kernels_ref()->bf16_to_f32(dst + i, s + 2 * i, n - i);
}

static const npuc_cvt_kernel_table g_avx512 = {
    .name = "avx512",
    .f16_to_f32 = f16_to_f32_avx512,
    .bf16_to_f32 = bf16_to_f32_avx512,
};

const npuc_cvt_kernel_table *npuc_cvt_kernels_avx512(void) {
    if (npuc_cpu_has(NPUC_CPU_AVX512F)) return &g_avx512;
    return NULL;
}

#else

const npuc_cvt_kernel_table *npuc_cvt_kernels_avx512(void) { return NULL; }

#endif
