/*
 * qk_avx2.c - AVX2 + FMA versions of the quantization kernels.
 *
 * Only the functions below are compiled for AVX2 (function-level target
 * attributes), so the rest of the library stays baseline x86-64 and this
 * table is handed out only when the CPU reports AVX2, FMA and POPCNT.
 *
 * Equivalence with the reference (ref/qk_ref.c):
 *   - codes, clipped counts, dequantized floats and max_abs are bit-identical:
 *     every lane performs the reference's float operations in the same order
 *     (one multiply, clamp with MAXPS/MINPS whose NaN behaviour the scalar
 *     helper copies, conversion in the default round-to-nearest-even mode,
 *     integer clamp, one multiply), and tails run the shared scalar helper;
 *   - minmax results are bit-identical (a zero result is returned as +0 by
 *     both versions), minmax_cols keeps the reference's row order per column;
 *   - the sums sum_w2, sum_e2, sum_wd, sum_d2 are accumulated in double per
 *     lane (8 interleaved partial sums) and reduced in lane order, so they
 *     differ from the sequential reference only by summation order: each
 *     term is the same double, and for the non-negative terms these sums
 *     have, |avx2 - ref| <= 2 * n * 2^-53 * sum.  The tests use rtol 1e-12.
 * Results depend only on the data, never on the pointers' alignment (all
 * loads are unaligned loads and lanes follow the element index).
 *
 * Fast-path limit: the 32-bit lane arithmetic is exact while zp, qmin and
 * qmax lie in [-2^30, 2^30); elements whose parameters fall outside (no real
 * code width comes close) go through the scalar helper, which works in 64
 * bits.
 */
#include "kernels/npuc_kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#include "kernels/qk_scalar.h"

#define NPUC_AVX2 __attribute__((target("avx2,fma,popcnt")))
#define NPUC_AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma,popcnt")))

/* 1 when v lies in [-2^30, 2^30), the range the 32-bit lanes handle exactly. */
static int in_lane_range(int32_t v) { return v >= -(1 << 30) && v < (1 << 30); }

/* ------------------------------------------------------------------ minmax */

/* Mask of the lanes holding NaN or +-Inf: x - x is NaN exactly for those. */
NPUC_AVX2_INLINE __m256 nonfinite_mask(__m256 v) {
    const __m256 d = _mm256_sub_ps(v, v);
    return _mm256_cmp_ps(d, d, _CMP_UNORD_Q);
}

NPUC_AVX2_INLINE unsigned popcount_mask(__m256 m) {
    return (unsigned)__builtin_popcount((unsigned)_mm256_movemask_ps(m));
}

/* Folds v into the lane accumulators; the rare blocks holding non-finite
 * values replace them by +Inf (for the min) and -Inf (for the max), which
 * leave the accumulators unchanged.  The operand order matches the scalar
 * helper: MINPS(x, lo) = x < lo ? x : lo. */
NPUC_AVX2_INLINE uint64_t fold_minmax(__m256 v, __m256 *lo, __m256 *hi) {
    const __m256 bad = nonfinite_mask(v);
    if (_mm256_movemask_ps(bad)) {
        *lo = _mm256_min_ps(_mm256_blendv_ps(v, _mm256_set1_ps(INFINITY), bad), *lo);
        *hi = _mm256_max_ps(_mm256_blendv_ps(v, _mm256_set1_ps(-INFINITY), bad), *hi);
        return popcount_mask(bad);
    }
    *lo = _mm256_min_ps(v, *lo);
    *hi = _mm256_max_ps(v, *hi);
    return 0;
}

NPUC_AVX2 static uint64_t minmax_avx2(const float *x, size_t n, float *lo, float *hi) {
    __m256 lo0 = _mm256_set1_ps(INFINITY), lo1 = lo0;
    __m256 hi0 = _mm256_set1_ps(-INFINITY), hi1 = hi0;
    uint64_t bad = 0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        const __m256 bad_ab = _mm256_or_ps(nonfinite_mask(a), nonfinite_mask(b));
        if (_mm256_movemask_ps(bad_ab)) {
            bad += fold_minmax(a, &lo0, &hi0);
            bad += fold_minmax(b, &lo1, &hi1);
        } else {
            lo0 = _mm256_min_ps(a, lo0);
            hi0 = _mm256_max_ps(a, hi0);
            lo1 = _mm256_min_ps(b, lo1);
            hi1 = _mm256_max_ps(b, hi1);
        }
    }
    for (; i + 8 <= n; i += 8) bad += fold_minmax(_mm256_loadu_ps(x + i), &lo0, &hi0);

    float l[8], h[8];
    _mm256_storeu_ps(l, _mm256_min_ps(lo1, lo0));
    _mm256_storeu_ps(h, _mm256_max_ps(hi1, hi0));
    float rl = INFINITY, rh = -INFINITY;
    for (int k = 0; k < 8; k++) {
        rl = l[k] < rl ? l[k] : rl;
        rh = h[k] > rh ? h[k] : rh;
    }
    for (; i < n; i++) bad += (uint64_t)npuc_qk_minmax_elem(x[i], &rl, &rh);
    if (bad == n) rl = rh = 0.0f;
    *lo = rl == 0.0f ? 0.0f : rl;
    *hi = rh == 0.0f ? 0.0f : rh;
    return bad;
}

/* Columns across lanes, rows in groups of four: each column still sees its
 * rows in order, as in the reference, while lo/hi are loaded and stored once
 * per four rows rather than once per row. */
NPUC_AVX2 static uint64_t minmax_cols_avx2(const float *x, size_t rows, size_t cols, size_t ld,
                                           float *lo, float *hi) {
    uint64_t bad = 0;
    size_t r = 0;
    for (; r + 4 <= rows; r += 4) {
        const float *r0 = x + r * ld, *r1 = r0 + ld, *r2 = r1 + ld, *r3 = r2 + ld;
        size_t c = 0;
        for (; c + 8 <= cols; c += 8) {
            __m256 l = _mm256_loadu_ps(lo + c), h = _mm256_loadu_ps(hi + c);
            bad += fold_minmax(_mm256_loadu_ps(r0 + c), &l, &h);
            bad += fold_minmax(_mm256_loadu_ps(r1 + c), &l, &h);
            bad += fold_minmax(_mm256_loadu_ps(r2 + c), &l, &h);
            bad += fold_minmax(_mm256_loadu_ps(r3 + c), &l, &h);
            _mm256_storeu_ps(lo + c, l);
            _mm256_storeu_ps(hi + c, h);
        }
        for (; c < cols; c++) {
            bad += (uint64_t)npuc_qk_minmax_elem(r0[c], &lo[c], &hi[c]);
            bad += (uint64_t)npuc_qk_minmax_elem(r1[c], &lo[c], &hi[c]);
            bad += (uint64_t)npuc_qk_minmax_elem(r2[c], &lo[c], &hi[c]);
            bad += (uint64_t)npuc_qk_minmax_elem(r3[c], &lo[c], &hi[c]);
        }
    }
    for (; r < rows; r++) {
        const float *row = x + r * ld;
        size_t c = 0;
        for (; c + 8 <= cols; c += 8) {
            __m256 l = _mm256_loadu_ps(lo + c), h = _mm256_loadu_ps(hi + c);
            bad += fold_minmax(_mm256_loadu_ps(row + c), &l, &h);
            _mm256_storeu_ps(lo + c, l);
            _mm256_storeu_ps(hi + c, h);
        }
        for (; c < cols; c++) bad += (uint64_t)npuc_qk_minmax_elem(row[c], &lo[c], &hi[c]);
    }
    return bad;
}

/* ---------------------------------------------------------------- quantize */

/* Per-lane double accumulators: lo for elements 0..3 of each vector, hi for
 * elements 4..7.  Named fields (no arrays) let the compiler keep them all in
 * registers once the helpers below are inlined. */
typedef struct {
    __m256d w2, e2, wd, d2, amax;
} vsums4;
typedef struct {
    vsums4 lo, hi;
    uint64_t clipped;
} vsums;

NPUC_AVX2_INLINE void vsums_init(vsums *a) {
    const __m256d z = _mm256_setzero_pd();
    a->lo = a->hi = (vsums4){z, z, z, z, z};
    a->clipped = 0;
}

NPUC_AVX2 static void vsums4_store(const vsums4 *a, int k, double *w2, double *e2, double *wd,
                                   double *d2, double *am) {
    _mm256_storeu_pd(w2 + k, a->w2);
    _mm256_storeu_pd(e2 + k, a->e2);
    _mm256_storeu_pd(wd + k, a->wd);
    _mm256_storeu_pd(d2 + k, a->d2);
    _mm256_storeu_pd(am + k, a->amax);
}

/* Adds the lanes into acc in a fixed order (elements 0..7 of a vector). */
NPUC_AVX2 static void vsums_reduce(const vsums *a, npuc_qsums *acc) {
    double w2[8], e2[8], wd[8], d2[8], am[8];
    vsums4_store(&a->lo, 0, w2, e2, wd, d2, am);
    vsums4_store(&a->hi, 4, w2, e2, wd, d2, am);
    for (int k = 0; k < 8; k++) {
        acc->sum_w2 += w2[k];
        acc->sum_e2 += e2[k];
        acc->sum_wd += wd[k];
        acc->sum_d2 += d2[k];
        acc->max_abs = am[k] > acc->max_abs ? am[k] : acc->max_abs;
    }
    acc->clipped += a->clipped;
}

/* Error terms of four elements, x and deq widened to double (exactly). */
NPUC_AVX2_INLINE void accum4(__m256d x, __m256d d, vsums4 *a) {
    const __m256d absmask = _mm256_castsi256_pd(_mm256_set1_epi64x(INT64_MAX));
    const __m256d e = _mm256_sub_pd(d, x);
    a->w2 = _mm256_fmadd_pd(x, x, a->w2);
    a->e2 = _mm256_fmadd_pd(e, e, a->e2);
    a->wd = _mm256_fmadd_pd(x, d, a->wd);
    a->d2 = _mm256_fmadd_pd(d, d, a->d2);
    /* MAXPD(|e|, m) keeps m when |e| is NaN, as the scalar helper does. */
    a->amax = _mm256_max_pd(_mm256_and_pd(e, absmask), a->amax);
}

/* The eight-lane version of npuc_qk_elem: returns the clamped q and the
 * dequantized values in *dq.  MAXPS(v, -2^24) is v > -2^24 ? v : -2^24 and
 * MINPS(v, 2^24) is v < 2^24 ? v : 2^24, the scalar helper's clamp including
 * its NaN outcome; CVTPS2DQ rounds half to even in the default MXCSR. */
NPUC_AVX2_INLINE __m256i quant8(__m256 x, __m256 scale, __m256 inv, __m256i zp, __m256i qmin,
                                __m256i qmax, __m256 *dq, vsums *a) {
    __m256 v = _mm256_mul_ps(x, inv);
    v = _mm256_max_ps(v, _mm256_set1_ps(-NPUC_QK_VLIM));
    v = _mm256_min_ps(v, _mm256_set1_ps(NPUC_QK_VLIM));
    __m256i q = _mm256_add_epi32(_mm256_cvtps_epi32(v), zp);
    const __m256i clip = _mm256_or_si256(_mm256_cmpgt_epi32(qmin, q), _mm256_cmpgt_epi32(q, qmax));
    a->clipped += popcount_mask(_mm256_castsi256_ps(clip));
    q = _mm256_min_epi32(_mm256_max_epi32(q, qmin), qmax);
    const __m256 d = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q, zp)), scale);
    *dq = d;
    accum4(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), _mm256_cvtps_pd(_mm256_castps256_ps128(d)),
           &a->lo);
    accum4(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)),
           _mm256_cvtps_pd(_mm256_extractf128_ps(d, 1)), &a->hi);
    return q;
}

/* Stores the low byte of each 32-bit lane (the two's complement code). */
NPUC_AVX2_INLINE void store_codes8(uint8_t *dst, __m256i q) {
    const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                          -1, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                          -1, -1);
    const __m256i t = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(q, pick),
                                                  _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1));
    _mm_storel_epi64((__m128i *)(void *)dst, _mm256_castsi256_si128(t));
}

NPUC_AVX2 static void quant_run_avx2(const float *x, size_t n, float scale, float inv_scale,
                                     int32_t zp, int32_t qmin, int32_t qmax, uint8_t *codes,
                                     float *deq, npuc_qsums *s) {
    npuc_qsums acc = {0};
    size_t i = 0;
    if (in_lane_range(zp) && in_lane_range(qmin) && in_lane_range(qmax)) {
        const __m256 vs = _mm256_set1_ps(scale), vi = _mm256_set1_ps(inv_scale);
        const __m256i vz = _mm256_set1_epi32(zp), vlo = _mm256_set1_epi32(qmin),
                      vhi = _mm256_set1_epi32(qmax);
        vsums a;
        vsums_init(&a);
        for (; i + 8 <= n; i += 8) {
            __m256 d;
            const __m256i q = quant8(_mm256_loadu_ps(x + i), vs, vi, vz, vlo, vhi, &d, &a);
            store_codes8(codes + i, q);
            if (deq) _mm256_storeu_ps(deq + i, d);
        }
        vsums_reduce(&a, &acc);
    }
    for (; i < n; i++) {
        float d;
        codes[i] = npuc_qk_elem(x[i], scale, inv_scale, zp, qmin, qmax, &d, &acc);
        if (deq) deq[i] = d;
    }
    npuc_qsums_add(s, &acc);
}

NPUC_AVX2 static void quant_vec_avx2(const float *x, size_t n, const float *scale,
                                     const float *inv_scale, const int32_t *zp, int32_t qmin,
                                     int32_t qmax, uint8_t *codes, float *deq, npuc_qsums *s) {
    npuc_qsums acc = {0};
    size_t i = 0;
    if (in_lane_range(qmin) && in_lane_range(qmax)) {
        const __m256i vlo = _mm256_set1_epi32(qmin), vhi = _mm256_set1_epi32(qmax);
        const __m256i bias = _mm256_set1_epi32(1 << 30);
        vsums a;
        vsums_init(&a);
        for (; i + 8 <= n; i += 8) {
            const __m256i vz = _mm256_loadu_si256((const __m256i *)(const void *)(zp + i));
            /* zp + 2^30 (wrapping) has its sign bit set exactly when zp lies
             * outside [-2^30, 2^30); such blocks take the scalar path. */
            if (_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_add_epi32(vz, bias)))) {
                for (size_t k = i; k < i + 8; k++) {
                    float d;
                    codes[k] = npuc_qk_elem(x[k], scale[k], inv_scale[k], zp[k], qmin, qmax, &d,
                                            &acc);
                    if (deq) deq[k] = d;
                }
                continue;
            }
            __m256 d;
            const __m256i q = quant8(_mm256_loadu_ps(x + i), _mm256_loadu_ps(scale + i),
                                     _mm256_loadu_ps(inv_scale + i), vz, vlo, vhi, &d, &a);
            store_codes8(codes + i, q);
            if (deq) _mm256_storeu_ps(deq + i, d);
        }
        vsums_reduce(&a, &acc);
    }
    for (; i < n; i++) {
        float d;
        codes[i] = npuc_qk_elem(x[i], scale[i], inv_scale[i], zp[i], qmin, qmax, &d, &acc);
        if (deq) deq[i] = d;
    }
    npuc_qsums_add(s, &acc);
}

static const npuc_kernel_table g_avx2 = {
    .name = "avx2",
    .minmax = minmax_avx2,
    .minmax_cols = minmax_cols_avx2,
    .quant_run = quant_run_avx2,
    .quant_vec = quant_vec_avx2,
};

/* libgcc fills the CPU model in a constructor that runs before main, and its
 * "avx2" answer already includes the OS's YMM-state check (XGETBV). */
const npuc_kernel_table *npuc_kernels_avx2(void) {
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("popcnt"))
        return &g_avx2;
    return NULL;
}

#else

const npuc_kernel_table *npuc_kernels_avx2(void) { return NULL; }

#endif
