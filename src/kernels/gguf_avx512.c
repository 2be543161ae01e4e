/*
 * gguf_avx512.c - AVX-512 versions of the GGUF block quantizers
 * (gguf_kernels.h), the same bytes as the reference (gguf_ref.c).
 *
 * One block is two 16-lane vectors.  The block's reductions (max |x|,
 * min, max) are exact whatever the order, the scale and its reciprocal
 * are computed in scalar code with the reference's expressions, and the
 * per-element arithmetic is the reference's, one float operation at a time
 * (multiply, then add: no fused multiply-add, so this file is compiled
 * without the fma target):
 *   - Q8_0: roundf(x * id) as trunc(v) + (v - trunc(v) >= 0.5) -
 *     (v - trunc(v) <= -0.5), exact for |v| < 2^23 (here |v| <= 127);
 *   - Q4_0/Q5_0: the signed maximum is the first element whose |x| equals
 *     the block's max |x| (the reference keeps the first on ties);
 *   - Q4_1/Q5_1: min and max are values; which zero (+0 or -0) they are
 *     decides the stored fp16 minimum and the sign of a zero scale, so a
 *     zero min or max is replaced by the first element equal to it, the
 *     one the reference's strict comparisons keep.
 * A block with a non-finite element, an fp16 overflow of its scale or
 * minimum, or a subnormal scale (1/d = inf: the reference's arithmetic
 * there leaves the range the trick above is exact in) is handed to the
 * reference, which refuses or computes it.
 */
#include "kernels/gguf_kernels.h"
#include "kernels/cpu_x86.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>
#include <math.h>

#include "kernels/qk_grid.h"

#define GG_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,f16c")))

/* npuc_gguf_half with F16C's VCVTPS2PH (IEEE round to nearest even, the
 * rounding of npuc_f32_to_f16) instead of a call per block. */
GG_AVX512 static inline int half(float v, unsigned char *dst) {
    const uint16_t h = (uint16_t)_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(v), _MM_FROUND_TO_NEAREST_INT), 0);
    if ((h & 0x7c00) == 0x7c00) return -1;
    dst[0] = (unsigned char)(h & 0xff);
    dst[1] = (unsigned char)(h >> 8);
    return 0;
}

/* 1-bits of the elements (of the block's 32) that are NaN or +-Inf. */
GG_AVX512 static inline uint32_t nonfinite(__m512 a, __m512 c) {
    const __m512i e = _mm512_set1_epi32(0x7f800000);
    const __mmask16 na = _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(a), e), e);
    const __mmask16 nc = _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(c), e), e);
    return (uint32_t)na | (uint32_t)nc << 16;
}

/* Index of the first of the 32 elements equal to v; 0 when none is (v is a
 * NaN the reduction carried: such a block goes to the reference anyway, and
 * ctz(0) would be undefined, an index past the block). */
GG_AVX512 static inline int first_eq(__m512 a, __m512 c, float v) {
    const __m512 vv = _mm512_set1_ps(v);
    const uint32_t m = (uint32_t)_mm512_cmp_ps_mask(a, vv, _CMP_EQ_OQ) |
                       (uint32_t)_mm512_cmp_ps_mask(c, vv, _CMP_EQ_OQ) << 16;
    return m ? __builtin_ctz(m) : 0;
}

/* roundf of each lane, |v| < 2^23, as 32-bit integers. */
GG_AVX512 static inline __m512i round_away(__m512 v) {
    const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(v, t);
    const __m512i one = _mm512_set1_epi32(1);
    __m512i r = _mm512_cvttps_epi32(t);
    r = _mm512_mask_add_epi32(r, _mm512_cmp_ps_mask(f, _mm512_set1_ps(0.5f), _CMP_GE_OQ), r, one);
    return _mm512_mask_sub_epi32(r, _mm512_cmp_ps_mask(f, _mm512_set1_ps(-0.5f), _CMP_LE_OQ), r, one);
}

/* Packs codes qa (elements 0..15) and qc (16..31) into 16 nibble bytes at
 * qs; returns the fifth bits as Q5's qh word. */
GG_AVX512 static inline uint32_t pack(__m512i qa, __m512i qc, unsigned char *qs) {
    const __m512i m = _mm512_set1_epi32(0x0f), b4 = _mm512_set1_epi32(0x10);
    const __m512i p = _mm512_or_si512(_mm512_and_si512(qa, m), _mm512_slli_epi32(_mm512_and_si512(qc, m), 4));
    _mm_storeu_si128((__m128i *)(void *)qs, _mm512_cvtepi32_epi8(p));
    return (uint32_t)_mm512_test_epi32_mask(qa, b4) | (uint32_t)_mm512_test_epi32_mask(qc, b4) << 16;
}

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* The reference on block x alone; 0 when it accepted it. */
static int by_ref(npuc_gguf_qfn ref, const float *x, unsigned char *b) { return ref(x, b, 1) == 1 ? 0 : -1; }

GG_AVX512 static size_t q8_0_avx512(const float *x, unsigned char *b, size_t nb) {
    size_t first = nb;
    for (size_t i = 0; i < nb; i++, x += 32, b += 34) {
        const __m512 a = _mm512_loadu_ps(x), c = _mm512_loadu_ps(x + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(c)));
        const float d = amax / 127;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        if (nonfinite(a, c) || isinf(id) || half(d, b) != 0) {
            if (by_ref(npuc_gguf_kernels_ref()->q8_0, x, b) != 0 && first == nb) first = i;
            continue;
        }
        const __m512 vid = _mm512_set1_ps(id);
        _mm_storeu_si128((__m128i *)(void *)(b + 2), _mm512_cvtepi32_epi8(round_away(_mm512_mul_ps(a, vid))));
        _mm_storeu_si128((__m128i *)(void *)(b + 18), _mm512_cvtepi32_epi8(round_away(_mm512_mul_ps(c, vid))));
    }
    return first;
}

/* Q4_0 (five = 0) and Q5_0 (five = 1). */
GG_AVX512 static inline size_t q_0(const float *x, unsigned char *b, size_t nb, int five) {
    const size_t tsize = five ? 22 : 18;
    const __m512 off = _mm512_set1_ps(five ? 16.5f : 8.5f);
    const __m512i cap = _mm512_set1_epi32(five ? 31 : 15);
    const npuc_gguf_qfn ref = five ? npuc_gguf_kernels_ref()->q5_0 : npuc_gguf_kernels_ref()->q4_0;
    size_t first = nb;
    for (size_t i = 0; i < nb; i++, x += 32, b += tsize) {
        const __m512 a = _mm512_loadu_ps(x), c = _mm512_loadu_ps(x + 16);
        const __m512 aa = _mm512_abs_ps(a), ac = _mm512_abs_ps(c);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(aa, ac));
        const float max = amax != 0.0f ? x[first_eq(aa, ac, amax)] : 0.0f;
        const float d = npuc_qk_full_scale(max, five ? 5 : 4);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        if (nonfinite(a, c) || isinf(id) || half(d, b) != 0) {
            if (by_ref(ref, x, b) != 0 && first == nb) first = i;
            continue;
        }
        const __m512 vid = _mm512_set1_ps(id);
        const __m512i qa = _mm512_min_epi32(_mm512_cvttps_epi32(_mm512_add_ps(_mm512_mul_ps(a, vid), off)), cap);
        const __m512i qc = _mm512_min_epi32(_mm512_cvttps_epi32(_mm512_add_ps(_mm512_mul_ps(c, vid), off)), cap);
        const uint32_t qh = pack(qa, qc, b + (five ? 6 : 2));
        if (five) put_u32(b + 2, qh);
    }
    return first;
}

/* Q4_1 (five = 0) and Q5_1 (five = 1, codes not capped, as the reference). */
GG_AVX512 static inline size_t q_1(const float *x, unsigned char *b, size_t nb, int five) {
    const size_t tsize = five ? 24 : 20;
    const __m512 vhalf = _mm512_set1_ps(0.5f);
    const __m512i cap = _mm512_set1_epi32(five ? 0x7fffffff : 15);
    const npuc_gguf_qfn ref = five ? npuc_gguf_kernels_ref()->q5_1 : npuc_gguf_kernels_ref()->q4_1;
    size_t first = nb;
    for (size_t i = 0; i < nb; i++, x += 32, b += tsize) {
        const __m512 a = _mm512_loadu_ps(x), c = _mm512_loadu_ps(x + 16);
        float min = _mm512_reduce_min_ps(_mm512_min_ps(a, c));
        float max = _mm512_reduce_max_ps(_mm512_max_ps(a, c));
        if (min == 0.0f) min = x[first_eq(a, c, min)];
        if (max == 0.0f) max = x[first_eq(a, c, max)];
        const float d = (max - min) / (five ? 31 : 15);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        if (nonfinite(a, c) || isinf(id) || half(d, b) != 0 || half(min, b + 2) != 0) {
            if (by_ref(ref, x, b) != 0 && first == nb) first = i;
            continue;
        }
        const __m512 vid = _mm512_set1_ps(id), vmin = _mm512_set1_ps(min);
        const __m512 va = _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(a, vmin), vid), vhalf);
        const __m512 vc = _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(c, vmin), vid), vhalf);
        const __m512i qa = _mm512_min_epi32(_mm512_cvttps_epi32(va), cap);
        const __m512i qc = _mm512_min_epi32(_mm512_cvttps_epi32(vc), cap);
        const uint32_t qh = pack(qa, qc, b + (five ? 8 : 4));
        if (five) put_u32(b + 4, qh);
    }
    return first;
}

GG_AVX512 static size_t q4_0_avx512(const float *x, unsigned char *b, size_t nb) { return q_0(x, b, nb, 0); }
GG_AVX512 static size_t q5_0_avx512(const float *x, unsigned char *b, size_t nb) { return q_0(x, b, nb, 1); }
GG_AVX512 static size_t q4_1_avx512(const float *x, unsigned char *b, size_t nb) { return q_1(x, b, nb, 0); }
GG_AVX512 static size_t q5_1_avx512(const float *x, unsigned char *b, size_t nb) { return q_1(x, b, nb, 1); }

static const npuc_gguf_kernel_table g_avx512 = {"avx512",    q8_0_avx512, q4_0_avx512,
                                                q4_1_avx512, q5_0_avx512, q5_1_avx512};

const npuc_gguf_kernel_table *npuc_gguf_kernels_avx512(void) {
    if (npuc_cpu_has(NPUC_CPU_AVX512F | NPUC_CPU_AVX512BW | NPUC_CPU_AVX512DQ | NPUC_CPU_F16C))
        return &g_avx512;
    return NULL;
}

#else

const npuc_gguf_kernel_table *npuc_gguf_kernels_avx512(void) { return NULL; }

#endif
