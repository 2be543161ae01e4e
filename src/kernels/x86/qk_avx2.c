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
 *     (one multiply, conversion in the default round-to-nearest-even mode,
 *     one multiply), and tails run the shared scalar helper;
 *   - minmax results are bit-identical (a zero result is returned as +0 by
 *     both versions), minmax_cols keeps the reference's row order per column;
 *   - the sums sum_w2, sum_e2, sum_wd, sum_d2 differ from the sequential
 *     reference by rounding only, within the bound npuc_kernels.h states.
 * Results depend only on the data, never on the pointers' alignment (all
 * loads are unaligned loads and lanes follow the element index).
 *
 * Two paths per quantization call (qk_x86.h has the reasoning):
 *   fast   for in-range parameters: no clamps (a clipped, NaN or infinite
 *          element is detected from the unclamped integers instead), codes
 *          narrowed 32 at a time with saturating packs, error sums in float
 *          per block of QK_BLOCK_LANE_TERMS terms per lane, then in double;
 *   exact  everything else, and any fast call that saw a clipped element or
 *          an overflow/underflow flag (it is redone from the start): the
 *          reference's clamps, error terms in double per lane (8 interleaved
 *          partial sums, reduced in lane order).
 * The exact path's 32-bit lane arithmetic is exact while zp, qmin and qmax
 * lie in [-2^30, 2^30); elements whose parameters fall outside (no real code
 * width comes close) go through the scalar helper, which works in 64 bits.
 */
#include "kernels/npuc_kernels.h"
#include "kernels/cpu_x86.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#include "kernels/qk_grid.h"
#include "kernels/qk_scalar.h"
#include "kernels/x86/qk_x86.h"

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

/* minmax: a lean scan over blocks of 32 that assumes every value is finite
 * (MINPS/MAXPS, plus x * 0 + c, which turns NaN for good once an x was NaN
 * or +-Inf), redone by the careful scan from the start if that assumption
 * failed.  The min and max of finite values do not depend on the order they
 * are visited in (a zero result is returned as +0), so both scans give the
 * same answer. */
NPUC_AVX2 uint64_t npuc__qk_minmax_avx2(const float *x, size_t n, float *lo, float *hi) {
    __m256 lo0 = _mm256_set1_ps(INFINITY), lo1 = lo0;
    __m256 hi0 = _mm256_set1_ps(-INFINITY), hi1 = hi0;
    uint64_t bad = 0;
    size_t i = 0;
    {
        const __m256 z = _mm256_setzero_ps();
        __m256 c0 = z, c1 = z, c2 = z, c3 = z;
        for (; i + 32 <= n; i += 32) {
            const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
            const __m256 c = _mm256_loadu_ps(x + i + 16), d = _mm256_loadu_ps(x + i + 24);
            lo0 = _mm256_min_ps(a, lo0);
            hi0 = _mm256_max_ps(a, hi0);
            lo1 = _mm256_min_ps(b, lo1);
            hi1 = _mm256_max_ps(b, hi1);
            lo0 = _mm256_min_ps(c, lo0);
            hi0 = _mm256_max_ps(c, hi0);
            lo1 = _mm256_min_ps(d, lo1);
            hi1 = _mm256_max_ps(d, hi1);
            c0 = _mm256_fmadd_ps(a, z, c0);
            c1 = _mm256_fmadd_ps(b, z, c1);
            c2 = _mm256_fmadd_ps(c, z, c2);
            c3 = _mm256_fmadd_ps(d, z, c3);
        }
        const __m256 c = _mm256_or_ps(_mm256_or_ps(c0, c1), _mm256_or_ps(c2, c3));
        if (_mm256_movemask_ps(_mm256_cmp_ps(c, c, _CMP_UNORD_Q))) {
            lo0 = lo1 = _mm256_set1_ps(INFINITY);
            hi0 = hi1 = _mm256_set1_ps(-INFINITY);
            i = 0;
        }
    }
    if (i < 32) { /* the lean scan did not run or is being redone */
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
NPUC_AVX2 uint64_t npuc__qk_minmax_cols_avx2(const float *x, size_t rows, size_t cols, size_t ld,
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

/* ------------------------------------------------------ quantize, exact path */

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

NPUC_AVX2 void npuc__qk_quant_run_exact_avx2(const float *x, size_t n, float scale,
                                            float inv_scale, int32_t zp, int32_t qmin, int32_t qmax,
                                            uint8_t *codes, float *deq, npuc_qsums *s) {
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

NPUC_AVX2 static void quant_vec_exact(const float *x, size_t n, const float *scale,
                                      const float *inv_scale, const int32_t *zp, int32_t qmin,
                                      int32_t qmax, uint8_t *codes, float *deq, npuc_qsums *s) {
    npuc_qsums acc = {0};
    size_t i = 0;
    if (in_lane_range(qmin) && in_lane_range(qmax)) {
        const __m256i vlo = _mm256_set1_epi32(qmin), vhi = _mm256_set1_epi32(qmax);
        const __m256i bias = _mm256_set1_epi32(1 << 16);
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


/* ------------------------------------------------------- quantize, fast path */

/* Float lane sums of the current block, and the double lane sums they are
 * added into (lo: elements 0..3 of a vector, hi: 4..7). */
typedef struct {
    __m256 w2, e2, wd, d2;
} fsums;
typedef struct {
    __m256d w2lo, w2hi, e2lo, e2hi, wdlo, wdhi, d2lo, d2hi;
} dsums;

NPUC_AVX2_INLINE void fsums_zero(fsums *f) {
    f->w2 = f->e2 = f->wd = f->d2 = _mm256_setzero_ps();
}

NPUC_AVX2_INLINE void to_double(__m256 f, __m256d *lo, __m256d *hi) {
    *lo = _mm256_add_pd(*lo, _mm256_cvtps_pd(_mm256_castps256_ps128(f)));
    *hi = _mm256_add_pd(*hi, _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1)));
}

NPUC_AVX2_INLINE void fsums_flush(fsums *f, dsums *d) {
    to_double(f->w2, &d->w2lo, &d->w2hi);
    to_double(f->e2, &d->e2lo, &d->e2hi);
    to_double(f->wd, &d->wdlo, &d->wdhi);
    to_double(f->d2, &d->d2lo, &d->d2hi);
    fsums_zero(f);
}

/* Narrows the codes of 32 elements (four vectors of 32-bit q in [-128, 255])
 * to bytes in element order: PACKSSDW, then PACKSSWB (int8) or PACKUSWB
 * (uint8), which interleave 128-bit halves, undone by one permute. */
NPUC_AVX2_INLINE void store_codes32(uint8_t *dst, __m256i q0, __m256i q1, __m256i q2, __m256i q3,
                                    int pack) {
    const __m256i a = _mm256_packs_epi32(q0, q1), b = _mm256_packs_epi32(q2, q3);
    const __m256i c = pack == QK_PACK_I8 ? _mm256_packs_epi16(a, b) : _mm256_packus_epi16(a, b);
    _mm256_storeu_si256((__m256i *)(void *)dst,
                        _mm256_permutevar8x32_epi32(c, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

/* Any lane of a, b out of [lo, hi] (signed 32-bit): VPTEST of the or of the
 * two compares. */
NPUC_AVX2_INLINE int any_outside(__m256i mn, __m256i mx, __m256i lo, __m256i hi) {
    const __m256i out = _mm256_or_si256(_mm256_cmpgt_epi32(lo, mn), _mm256_cmpgt_epi32(mx, hi));
    return !_mm256_testz_si256(out, out);
}

NPUC_AVX2_INLINE __m256i min4(__m256i a, __m256i b, __m256i c, __m256i d) {
    return _mm256_min_epi32(_mm256_min_epi32(a, b), _mm256_min_epi32(c, d));
}

NPUC_AVX2_INLINE __m256i max4(__m256i a, __m256i b, __m256i c, __m256i d) {
    return _mm256_max_epi32(_mm256_max_epi32(a, b), _mm256_max_epi32(c, d));
}

/* The results of a fast call: the double sums and float max of the groups
 * that took the float path, and the exact-path lane sums of the groups that
 * held a clipped, NaN or infinite element. */
typedef struct {
    dsums d;
    __m256 amax;
    vsums x;
} fast_out;

NPUC_AVX2_INLINE void fast_out_init(fast_out *o) {
    const __m256d z = _mm256_setzero_pd();
    o->d.w2lo = o->d.w2hi = o->d.e2lo = o->d.e2hi = z;
    o->d.wdlo = o->d.wdhi = o->d.d2lo = o->d.d2hi = z;
    o->amax = _mm256_setzero_ps();
    vsums_init(&o->x);
}

/* Adds the fast call's sums into acc: the float-path lanes, then the
 * exact-path lanes, each in lane order. */
NPUC_AVX2 static void fast_out_reduce(const fast_out *o, npuc_qsums *acc) {
    double w2[8], e2[8], wd[8], d2[8];
    float am[8];
    _mm256_storeu_pd(w2, o->d.w2lo), _mm256_storeu_pd(w2 + 4, o->d.w2hi);
    _mm256_storeu_pd(e2, o->d.e2lo), _mm256_storeu_pd(e2 + 4, o->d.e2hi);
    _mm256_storeu_pd(wd, o->d.wdlo), _mm256_storeu_pd(wd + 4, o->d.wdhi);
    _mm256_storeu_pd(d2, o->d.d2lo), _mm256_storeu_pd(d2 + 4, o->d.d2hi);
    _mm256_storeu_ps(am, o->amax);
    for (int k = 0; k < 8; k++) {
        acc->sum_w2 += w2[k];
        acc->sum_e2 += e2[k];
        acc->sum_wd += wd[k];
        acc->sum_d2 += d2[k];
        acc->max_abs = (double)am[k] > acc->max_abs ? (double)am[k] : acc->max_abs;
    }
    vsums_reduce(&o->x, acc);
}

/* Float-path work of one vector whose k = rint(x * inv) is known to be in
 * range: deq, error terms, max |deq - x|. */
NPUC_AVX2_INLINE __m256 fast_terms(__m256 x, __m256i k, __m256 scale, fsums *f, __m256 *amax) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MAX));
    const __m256 d = _mm256_mul_ps(_mm256_cvtepi32_ps(k), scale);
    const __m256 e = _mm256_sub_ps(d, x);
    f->w2 = _mm256_fmadd_ps(x, x, f->w2);
    f->e2 = _mm256_fmadd_ps(e, e, f->e2);
    f->wd = _mm256_fmadd_ps(x, d, f->wd);
    f->d2 = _mm256_fmadd_ps(d, d, f->d2);
    *amax = _mm256_max_ps(_mm256_and_ps(e, absmask), *amax);
    return d;
}

NPUC_AVX2_INLINE __m256i rint_mul(__m256 x, __m256 inv) {
    return _mm256_cvtps_epi32(_mm256_mul_ps(x, inv));
}

/* Vectors [i, i + count) on the exact path (quant8: the reference's clamps,
 * double terms, clip count), codes and deq stored.  Out of line and cold,
 * so the float path's loop keeps its registers.  scale, inv and zp are
 * either broadcast (quant_run) or element arrays (quant_vec, stride 1). */
NPUC_AVX2 __attribute__((noinline, cold)) static void exact_vectors(
    const float *x, size_t i, size_t count, const float *scale, const float *inv, const int32_t *zp,
    int stride, int32_t qmin, int32_t qmax, uint8_t *codes, float *deq, vsums *a) {
    const __m256i vlo = _mm256_set1_epi32(qmin), vhi = _mm256_set1_epi32(qmax);
    for (size_t v = i; v < i + count; v += 8) {
        const size_t p = stride ? v : 0;
        const __m256 vs = stride ? _mm256_loadu_ps(scale + p) : _mm256_set1_ps(*scale);
        const __m256 vi = stride ? _mm256_loadu_ps(inv + p) : _mm256_set1_ps(*inv);
        const __m256i vz = stride ? _mm256_loadu_si256((const __m256i *)(const void *)(zp + p))
                                  : _mm256_set1_epi32(*zp);
        __m256 d;
        const __m256i q = quant8(_mm256_loadu_ps(x + v), vs, vi, vz, vlo, vhi, &d, a);
        store_codes8(codes + v, q);
        if (deq) _mm256_storeu_ps(deq + v, d);
    }
}

/* The vector part of quant_run (elements [0, n8), n8 a multiple of 8) for
 * one (pack, with_deq) combination; the compiler specialises each call site.
 * Groups of 32 (or single vectors at the end) whose k = rint(x * inv_scale)
 * all lie in [qmin - zp, qmax - zp] take the float path; any other group
 * (a clipped, NaN or infinite element: the conversion gives INT32_MIN for
 * the last two) is computed on the exact path instead. */
NPUC_AVX2_INLINE void run_fast_body(const float *x, size_t n8, float scale, float inv_scale,
                                    int32_t zp, int32_t qmin, int32_t qmax, uint8_t *codes,
                                    float *deq, int pack, int with_deq, fast_out *o,
                                    qk_ahead *pf) {
    const __m256 vs = _mm256_set1_ps(scale), vi = _mm256_set1_ps(inv_scale);
    const __m256i vz = _mm256_set1_epi32(zp);
    const __m256i klo = _mm256_set1_epi32(qmin - zp), khi = _mm256_set1_epi32(qmax - zp);
    const size_t block = 8 * QK_BLOCK_LANE_TERMS;
    __m256 amax = o->amax;
    fsums f;
    fsums_zero(&f);
    size_t i = 0;
    while (i < n8) {
        const size_t end = n8 - i > block ? i + block : n8;
        for (; i + 32 <= end; i += 32) {
            const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
            const __m256 x2 = _mm256_loadu_ps(x + i + 16), x3 = _mm256_loadu_ps(x + i + 24);
            qk_ahead_step(pf, 2);
            const __m256i k0 = rint_mul(x0, vi), k1 = rint_mul(x1, vi);
            const __m256i k2 = rint_mul(x2, vi), k3 = rint_mul(x3, vi);
            const __m256i mn = min4(k0, k1, k2, k3), mx = max4(k0, k1, k2, k3);
            if (__builtin_expect(any_outside(mn, mx, klo, khi), 0)) {
                exact_vectors(x, i, 32, &scale, &inv_scale, &zp, 0, qmin, qmax, codes,
                              with_deq ? deq : NULL, &o->x);
                continue;
            }
            const __m256 d0 = fast_terms(x0, k0, vs, &f, &amax);
            const __m256 d1 = fast_terms(x1, k1, vs, &f, &amax);
            const __m256 d2 = fast_terms(x2, k2, vs, &f, &amax);
            const __m256 d3 = fast_terms(x3, k3, vs, &f, &amax);
            store_codes32(codes + i, _mm256_add_epi32(k0, vz), _mm256_add_epi32(k1, vz),
                          _mm256_add_epi32(k2, vz), _mm256_add_epi32(k3, vz), pack);
            if (with_deq) {
                _mm256_storeu_ps(deq + i, d0);
                _mm256_storeu_ps(deq + i + 8, d1);
                _mm256_storeu_ps(deq + i + 16, d2);
                _mm256_storeu_ps(deq + i + 24, d3);
            }
        }
        for (; i < end; i += 8) {
            const __m256 x0 = _mm256_loadu_ps(x + i);
            qk_ahead_step(pf, 1);
            const __m256i k0 = rint_mul(x0, vi);
            if (__builtin_expect(any_outside(k0, k0, klo, khi), 0)) {
                exact_vectors(x, i, 8, &scale, &inv_scale, &zp, 0, qmin, qmax, codes,
                              with_deq ? deq : NULL, &o->x);
                continue;
            }
            const __m256 d0 = fast_terms(x0, k0, vs, &f, &amax);
            store_codes8(codes + i, _mm256_add_epi32(k0, vz));
            if (with_deq) _mm256_storeu_ps(deq + i, d0);
        }
        fsums_flush(&f, &o->d);
    }
    o->amax = amax;
}

NPUC_AVX2 void npuc__qk_quant_run_hinted_avx2(const float *x, size_t n, float scale,
                                            float inv_scale, int32_t zp, int32_t qmin, int32_t qmax,
                                            uint8_t *codes, float *deq, npuc_qsums *s,
                                            const npuc_qhint *h) {
    const int pack = qk_pack_kind(qmin, qmax);
    const size_t n8 = n & ~(size_t)7;
    unsigned csr;
    if (n8 == 0 || pack == QK_PACK_NONE || zp < -256 || zp > 256 || !qk_inv_ok(scale, inv_scale) ||
        !qk_watch_begin(&csr)) {
        npuc__qk_quant_run_exact_avx2(x, n, scale, inv_scale, zp, qmin, qmax, codes, deq, s);
        return;
    }
    fast_out o;
    fast_out_init(&o);
    qk_ahead pf = qk_ahead_make(h);
    /* One specialisation per (pack, deq) pair. */
    if (pack == QK_PACK_I8 && deq)
        run_fast_body(x, n8, scale, inv_scale, zp, qmin, qmax, codes, deq, QK_PACK_I8, 1, &o, &pf);
    else if (pack == QK_PACK_I8)
        run_fast_body(x, n8, scale, inv_scale, zp, qmin, qmax, codes, NULL, QK_PACK_I8, 0, &o, &pf);
    else if (deq)
        run_fast_body(x, n8, scale, inv_scale, zp, qmin, qmax, codes, deq, QK_PACK_U8, 1, &o, &pf);
    else
        run_fast_body(x, n8, scale, inv_scale, zp, qmin, qmax, codes, NULL, QK_PACK_U8, 0, &o, &pf);
    if (qk_watch_end(csr, &o)) {
        npuc__qk_quant_run_exact_avx2(x, n, scale, inv_scale, zp, qmin, qmax, codes, deq, s);
        return;
    }
    npuc_qsums acc = {0};
    fast_out_reduce(&o, &acc);
    for (size_t i = n8; i < n; i++) {
        float d;
        codes[i] = npuc_qk_elem(x[i], scale, inv_scale, zp, qmin, qmax, &d, &acc);
        if (deq) deq[i] = d;
    }
    npuc_qsums_add(s, &acc);
}

NPUC_AVX2 void npuc__qk_quant_run_avx2(const float *x, size_t n, float scale, float inv_scale,
                                     int32_t zp, int32_t qmin, int32_t qmax, uint8_t *codes,
                                     float *deq, npuc_qsums *s) {
    npuc__qk_quant_run_hinted_avx2(x, n, scale, inv_scale, zp, qmin, qmax, codes, deq, s, NULL);
}

/* quant_vec's version: per-element parameters, q = k + zp checked against
 * [qmin, qmax], which also bounds |k| by 2^16 + 255, far inside the
 * reference's 2^24 clamp, while |zp| <= 2^16.  The parameters themselves
 * must pass params_ok() below: quant_vec collects what that needs as it goes
 * (track = 1), quant_rows checks once for all its rows (track = 0). */
typedef struct {
    fast_out r;
    __m256i zbad;   /* OR of zp + 2^16: no bit above 16 set iff every zp in [-2^16, 2^16) */
    __m256 plo, phi; /* min / max of inv_scale * scale (NaN products leave them: then k or deq is
                        out of range or NaN, which is caught elsewhere) */
} vec_out;

NPUC_AVX2_INLINE void vec_track(__m256 vs, __m256 vi, __m256i vz, vec_out *o) {
    const __m256 p = _mm256_mul_ps(vs, vi);
    o->plo = _mm256_min_ps(p, o->plo);
    o->phi = _mm256_max_ps(p, o->phi);
    o->zbad = _mm256_or_si256(o->zbad, _mm256_add_epi32(vz, _mm256_set1_epi32(1 << 16)));
}

NPUC_AVX2_INLINE void vec_out_init(vec_out *o) {
    fast_out_init(&o->r);
    o->zbad = _mm256_setzero_si256();
    o->plo = o->phi = _mm256_set1_ps(1.0f);
}

NPUC_AVX2 static int vec_params_ok(const vec_out *o) {
    float plo[8], phi[8];
    _mm256_storeu_ps(plo, o->plo);
    _mm256_storeu_ps(phi, o->phi);
    const __m256i zhigh = _mm256_and_si256(o->zbad, _mm256_set1_epi32((int32_t)0xFFFE0000u));
    int ok = _mm256_testz_si256(zhigh, zhigh);
    for (int k = 0; k < 8; k++) ok &= qk_prod_ok(plo[k]) && qk_prod_ok(phi[k]);
    return ok;
}

/* Checks the parameters of n8 columns (a multiple of 8) once. */
NPUC_AVX2 static int vec_params_scan(const float *scale, const float *inv, const int32_t *zp,
                                     size_t n8) {
    vec_out o;
    vec_out_init(&o);
    for (size_t i = 0; i < n8; i += 8)
        vec_track(_mm256_loadu_ps(scale + i), _mm256_loadu_ps(inv + i),
                  _mm256_loadu_si256((const __m256i *)(const void *)(zp + i)), &o);
    return vec_params_ok(&o);
}

NPUC_AVX2_INLINE __m256i load_zp(const int32_t *zp) {
    return _mm256_loadu_si256((const __m256i *)(const void *)zp);
}

/* The vector part of one row ([0, n8), n8 a multiple of 8), groups of 32
 * (then single vectors) as in quant_run; the float sums are flushed to
 * double at least every QK_BLOCK_LANE_TERMS vectors and at the row's end. */
NPUC_AVX2_INLINE void vec_fast_body(const float *x, size_t n8, const float *scale, const float *inv,
                                    const int32_t *zp, int32_t qmin, int32_t qmax, uint8_t *codes,
                                    float *deq, int pack, int with_deq, int track, vec_out *o) {
    const __m256i vqlo = _mm256_set1_epi32(qmin), vqhi = _mm256_set1_epi32(qmax);
    const size_t block = 8 * QK_BLOCK_LANE_TERMS;
    __m256 amax = o->r.amax;
    fsums f;
    fsums_zero(&f);
    size_t i = 0;
    while (i < n8) {
        const size_t end = n8 - i > block ? i + block : n8;
        for (; i + 32 <= end; i += 32) {
            const __m256 s0 = _mm256_loadu_ps(scale + i), s1 = _mm256_loadu_ps(scale + i + 8);
            const __m256 s2 = _mm256_loadu_ps(scale + i + 16), s3 = _mm256_loadu_ps(scale + i + 24);
            const __m256 i0 = _mm256_loadu_ps(inv + i), i1 = _mm256_loadu_ps(inv + i + 8);
            const __m256 i2 = _mm256_loadu_ps(inv + i + 16), i3 = _mm256_loadu_ps(inv + i + 24);
            const __m256i z0 = load_zp(zp + i), z1 = load_zp(zp + i + 8);
            const __m256i z2 = load_zp(zp + i + 16), z3 = load_zp(zp + i + 24);
            if (track) {
                vec_track(s0, i0, z0, o);
                vec_track(s1, i1, z1, o);
                vec_track(s2, i2, z2, o);
                vec_track(s3, i3, z3, o);
            }
            const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
            const __m256 x2 = _mm256_loadu_ps(x + i + 16), x3 = _mm256_loadu_ps(x + i + 24);
            const __m256i k0 = rint_mul(x0, i0), k1 = rint_mul(x1, i1);
            const __m256i k2 = rint_mul(x2, i2), k3 = rint_mul(x3, i3);
            const __m256i q0 = _mm256_add_epi32(k0, z0), q1 = _mm256_add_epi32(k1, z1);
            const __m256i q2 = _mm256_add_epi32(k2, z2), q3 = _mm256_add_epi32(k3, z3);
            const __m256i mn = min4(q0, q1, q2, q3), mx = max4(q0, q1, q2, q3);
            if (__builtin_expect(any_outside(mn, mx, vqlo, vqhi), 0)) {
                exact_vectors(x, i, 32, scale, inv, zp, 1, qmin, qmax, codes, with_deq ? deq : NULL,
                              &o->r.x);
                continue;
            }
            const __m256 d0 = fast_terms(x0, k0, s0, &f, &amax);
            const __m256 d1 = fast_terms(x1, k1, s1, &f, &amax);
            const __m256 d2 = fast_terms(x2, k2, s2, &f, &amax);
            const __m256 d3 = fast_terms(x3, k3, s3, &f, &amax);
            store_codes32(codes + i, q0, q1, q2, q3, pack);
            if (with_deq) {
                _mm256_storeu_ps(deq + i, d0);
                _mm256_storeu_ps(deq + i + 8, d1);
                _mm256_storeu_ps(deq + i + 16, d2);
                _mm256_storeu_ps(deq + i + 24, d3);
            }
        }
        for (; i < end; i += 8) {
            const __m256 s0 = _mm256_loadu_ps(scale + i), i0 = _mm256_loadu_ps(inv + i);
            const __m256i z0 = load_zp(zp + i);
            if (track) vec_track(s0, i0, z0, o);
            const __m256 x0 = _mm256_loadu_ps(x + i);
            const __m256i k0 = rint_mul(x0, i0), q0 = _mm256_add_epi32(k0, z0);
            if (__builtin_expect(any_outside(q0, q0, vqlo, vqhi), 0)) {
                exact_vectors(x, i, 8, scale, inv, zp, 1, qmin, qmax, codes, with_deq ? deq : NULL,
                              &o->r.x);
                continue;
            }
            const __m256 d0 = fast_terms(x0, k0, s0, &f, &amax);
            store_codes8(codes + i, q0);
            if (with_deq) _mm256_storeu_ps(deq + i, d0);
        }
        fsums_flush(&f, &o->r.d);
    }
    o->r.amax = amax;
}

/* vec_fast_body specialised for each (pack, deq, track) combination. */
NPUC_AVX2 static void vec_fast_any(const float *x, size_t n8, const float *scale, const float *inv,
                                   const int32_t *zp, int32_t qmin, int32_t qmax, uint8_t *codes,
                                   float *deq, int pack, int track, vec_out *o) {
#define VEC_BODY(P, D, T) vec_fast_body(x, n8, scale, inv, zp, qmin, qmax, codes, deq, P, D, T, o)
    if (track) {
        if (pack == QK_PACK_I8 && deq) VEC_BODY(QK_PACK_I8, 1, 1);
        else if (pack == QK_PACK_I8) VEC_BODY(QK_PACK_I8, 0, 1);
        else if (deq) VEC_BODY(QK_PACK_U8, 1, 1);
        else VEC_BODY(QK_PACK_U8, 0, 1);
    } else {
        if (pack == QK_PACK_I8 && deq) VEC_BODY(QK_PACK_I8, 1, 0);
        else if (pack == QK_PACK_I8) VEC_BODY(QK_PACK_I8, 0, 0);
        else if (deq) VEC_BODY(QK_PACK_U8, 1, 0);
        else VEC_BODY(QK_PACK_U8, 0, 0);
    }
#undef VEC_BODY
}

/* The scalar tail of one row (elements [n8, n)) into acc. */
static void vec_tail(const float *x, size_t n8, size_t n, const float *scale,
                     const float *inv_scale, const int32_t *zp, int32_t qmin, int32_t qmax,
                     uint8_t *codes, float *deq, npuc_qsums *acc) {
    for (size_t i = n8; i < n; i++) {
        float d;
        codes[i] = npuc_qk_elem(x[i], scale[i], inv_scale[i], zp[i], qmin, qmax, &d, acc);
        if (deq) deq[i] = d;
    }
}

NPUC_AVX2 void npuc__qk_quant_vec_avx2(const float *x, size_t n, const float *scale,
                                       const float *inv_scale, const int32_t *zp, int32_t qmin,
                                       int32_t qmax, uint8_t *codes, float *deq, npuc_qsums *s) {
    const int pack = qk_pack_kind(qmin, qmax);
    const size_t n8 = n & ~(size_t)7;
    unsigned csr;
    if (n8 == 0 || pack == QK_PACK_NONE || !qk_watch_begin(&csr)) {
        quant_vec_exact(x, n, scale, inv_scale, zp, qmin, qmax, codes, deq, s);
        return;
    }
    vec_out o;
    vec_out_init(&o);
    vec_fast_any(x, n8, scale, inv_scale, zp, qmin, qmax, codes, deq, pack, 1, &o);
    if (qk_watch_end(csr, &o) || !vec_params_ok(&o)) {
        quant_vec_exact(x, n, scale, inv_scale, zp, qmin, qmax, codes, deq, s);
        return;
    }
    npuc_qsums acc = {0};
    fast_out_reduce(&o.r, &acc);
    vec_tail(x, n8, n, scale, inv_scale, zp, qmin, qmax, codes, deq, &acc);
    npuc_qsums_add(s, &acc);
}

/* Rows sharing one set of column parameters: the parameters are checked
 * once, then every row runs the fast row body; the call is redone row by row
 * on the exact path if a watched flag was raised. */
NPUC_AVX2 void npuc__qk_quant_rows_avx2(const float *x, size_t rows, size_t cols, size_t ld,
                                        const float *scale, const float *inv_scale,
                                        const int32_t *zp, int32_t qmin, int32_t qmax,
                                        uint8_t *codes, float *deq, npuc_qsums *s) {
    const int pack = qk_pack_kind(qmin, qmax);
    const size_t n8 = cols & ~(size_t)7;
    unsigned csr;
    if (rows == 0) return;
    if (n8 == 0 || pack == QK_PACK_NONE || !vec_params_scan(scale, inv_scale, zp, n8) ||
        !qk_watch_begin(&csr)) {
        for (size_t r = 0; r < rows; r++)
            quant_vec_exact(x + r * ld, cols, scale, inv_scale, zp, qmin, qmax, codes + r * ld,
                            deq ? deq + r * ld : NULL, s);
        return;
    }
    vec_out o;
    vec_out_init(&o);
    for (size_t r = 0; r < rows; r++)
        vec_fast_any(x + r * ld, n8, scale, inv_scale, zp, qmin, qmax, codes + r * ld,
                     deq ? deq + r * ld : NULL, pack, 0, &o);
    if (qk_watch_end(csr, &o)) {
        for (size_t r = 0; r < rows; r++)
            quant_vec_exact(x + r * ld, cols, scale, inv_scale, zp, qmin, qmax, codes + r * ld,
                            deq ? deq + r * ld : NULL, s);
        return;
    }
    npuc_qsums acc = {0};
    fast_out_reduce(&o.r, &acc);
    if (n8 < cols)
        for (size_t r = 0; r < rows; r++)
            vec_tail(x + r * ld, n8, cols, scale, inv_scale, zp, qmin, qmax, codes + r * ld,
                     deq ? deq + r * ld : NULL, &acc);
    npuc_qsums_add(s, &acc);
}

/* One quant_run per group: AVX2 has no version of its own (nor uses h). */
void npuc__qk_quant_groups_avx2(const float *x, size_t ngroups, size_t G, const float *scale,
                                const float *inv_scale, const int32_t *zp, int32_t qmin, int32_t qmax,
                                uint8_t *codes, float *deq, npuc_qsums *s, const npuc_qhint *h) {
    (void)h;
    for (size_t g = 0; g < ngroups; g++)
        npuc__qk_quant_run_avx2(x + g * G, G, scale[g], inv_scale[g], zp[g], qmin, qmax, codes + g * G,
                                deq ? deq + g * G : NULL, s);
}

/* One minmax per group: the AVX2 table has no transposing version (the
 * AVX-512 table has, qk_avx512.c). */
uint64_t npuc__qk_minmax_groups_avx2(const float *x, size_t ngroups, size_t G, float *lo, float *hi) {
    uint64_t bad = 0;
    for (size_t g = 0; g < ngroups; g++) bad += npuc__qk_minmax_avx2(x + g * G, G, &lo[g], &hi[g]);
    return bad;
}

/* npuc_qk_range_params (kernels/qk_grid.h) on 8 ranges at once, each IEEE
 * operation of the scalar formula done lane-wise in the same order (the
 * asymmetric scale's division in double, 4 lanes at a time), so the bits are
 * the reference's; the tail runs the scalar formula itself.  With finite
 * inputs: MINPS(lo, 0) is lo < 0 ? lo : 0 and MAXPS(hi, 0) is hi > 0 ? hi : 0
 * (the second operand on ties, so -0 gives +0 as in the scalar), fmaxf of
 * two magnitudes is MAXPS, and nearbyintf in the default rounding mode is
 * ROUNDPS to nearest even. */
NPUC_AVX2 void npuc__qk_range_params_avx2(const float *lo, const float *hi, size_t n, int bits,
                                          int symmetric, int full, float *scale, float *inv,
                                          int32_t *zp) {
    const __m256 z = _mm256_setzero_ps(), sign = _mm256_set1_ps(-0.0f);
    const __m256 fmin = _mm256_set1_ps(FLT_MIN), one = _mm256_set1_ps(1.0f);
    const __m256 dfull = _mm256_set1_ps((float)-(1 << (bits - 1)));
    const __m256 dsym = _mm256_set1_ps((float)((1 << (bits - 1)) - 1));
    const __m256 qmaxf = _mm256_set1_ps((float)((1 << bits) - 1));
    const __m256d dasym = _mm256_set1_pd((double)((1 << bits) - 1));
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 l = _mm256_loadu_ps(lo + i), h = _mm256_loadu_ps(hi + i);
        __m256 s;
        __m256i zi = _mm256_setzero_si256();
        if (symmetric && full) {
            /* the signed maximum: -lo > hi ? lo : hi */
            const __m256 m = _mm256_blendv_ps(h, l, _mm256_cmp_ps(_mm256_xor_ps(l, sign), h, _CMP_GT_OQ));
            s = _mm256_div_ps(m, dfull);
            s = _mm256_blendv_ps(fmin, s, _mm256_cmp_ps(_mm256_andnot_ps(sign, s), fmin, _CMP_GE_OQ));
        } else if (symmetric) {
            const __m256 amax = _mm256_max_ps(_mm256_andnot_ps(sign, l), _mm256_andnot_ps(sign, h));
            s = _mm256_div_ps(amax, dsym);
            s = _mm256_blendv_ps(fmin, s, _mm256_cmp_ps(s, fmin, _CMP_GE_OQ));
        } else {
            const __m256 ln = _mm256_min_ps(l, z), hp = _mm256_max_ps(h, z);
            const __m256d d0 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(hp)),
                                             _mm256_cvtps_pd(_mm256_castps256_ps128(ln)));
            const __m256d d1 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(hp, 1)),
                                             _mm256_cvtps_pd(_mm256_extractf128_ps(ln, 1)));
            s = _mm256_set_m128(_mm256_cvtpd_ps(_mm256_div_pd(d1, dasym)),
                                _mm256_cvtpd_ps(_mm256_div_pd(d0, dasym)));
            s = _mm256_blendv_ps(fmin, s, _mm256_cmp_ps(s, fmin, _CMP_GE_OQ));
            __m256 zf = _mm256_round_ps(_mm256_div_ps(_mm256_xor_ps(ln, sign), s),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            zf = _mm256_min_ps(_mm256_max_ps(zf, z), qmaxf);
            zi = _mm256_cvttps_epi32(zf);
        }
        _mm256_storeu_ps(scale + i, s);
        _mm256_storeu_ps(inv + i, _mm256_div_ps(one, s));
        _mm256_storeu_si256((__m256i *)(void *)(zp + i), zi);
    }
    for (; i < n; i++) npuc_qk_range_params(lo[i], hi[i], bits, symmetric, full, &scale[i], &inv[i], &zp[i]);
}

static const npuc_kernel_table g_avx2 = {
    .name = "avx2",
    .minmax = npuc__qk_minmax_avx2,
    .minmax_groups = npuc__qk_minmax_groups_avx2,
    .range_params = npuc__qk_range_params_avx2,
    .minmax_cols = npuc__qk_minmax_cols_avx2,
    .quant_run = npuc__qk_quant_run_avx2,
    .quant_run_hinted = npuc__qk_quant_run_hinted_avx2,
    .quant_groups = npuc__qk_quant_groups_avx2,
    .quant_vec = npuc__qk_quant_vec_avx2,
    .quant_rows = npuc__qk_quant_rows_avx2,
    .pack_bits = npuc__qk_pack_bits_avx2,
};

/* npuc_cpu_has's AVX2 bit already includes the OS's YMM-state check
 * (XGETBV, x86/cpu_probe.c). */
const npuc_kernel_table *npuc_kernels_avx2(void) {
    if (npuc_cpu_has(NPUC_CPU_AVX2 | NPUC_CPU_FMA | NPUC_CPU_POPCNT))
        return &g_avx2;
    return NULL;
}

#else

const npuc_kernel_table *npuc_kernels_avx2(void) { return NULL; }

#endif
