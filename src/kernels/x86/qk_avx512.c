/*
 * qk_avx512.c - AVX-512 versions of the kernels on the hot paths of
 * per-channel and grouped quantization: minmax and quant_run, minmax_groups
 * and quant_groups.  The other entries of the table are the AVX2 kernels
 * (qk_avx2.c), which a CPU with AVX-512F/BW/DQ also runs.
 *
 * Only the functions below are compiled for AVX-512 (function-level target
 * attributes); the table is handed out only when the CPU reports AVX-512F,
 * BW and DQ besides AVX2 and FMA.
 *
 * The arithmetic is the AVX2 fast path's with 16 lanes (qk_x86.h has the
 * reasoning): minmax's lean scan (MINPS/MAXPS plus x * 0 + c to notice NaN
 * and +-Inf, redone by the AVX2 careful scan if one was seen); quant_run's
 * float path with no clamps, its range check on k = rint(x * inv_scale), and
 * float error sums per lane over blocks of QK_BLOCK_LANE_TERMS terms, then
 * double.  Three things differ, to spare the FMA ports, which bound this
 * loop: the sum of deq^2 is scale^2 times the exact integer sum of k^2
 * (VPMADDWD on the int16 k that the code packing makes anyway; see
 * out16_reduce for why that is within the tolerance), max |deq - x| is one
 * VRANGEPS.  quant_run_hinted prefetches the next run (qk_ahead).  A group of 64 values holding a clipped, NaN or infinite element
 * is quantized by the AVX2 kernel instead (exact path, double terms), and a call
 * that raised the overflow or underflow flag is redone by it entirely, so
 * codes, dequantized values, clipped counts and max_abs are bit-identical to
 * the reference and the sums within NPUC_QSUM_RTOL.
 */
#include "kernels/npuc_kernels.h"
#include "kernels/cpu_x86.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#include "kernels/qk_scalar.h"
#include "kernels/x86/qk_x86.h"

#define NPUC_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx2,fma")))
#define NPUC_AVX512_INLINE \
    static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512dq,avx2,fma")))

/* ------------------------------------------------------------------ minmax */

/* The lean scan over blocks of 64; anything it cannot vouch for (a
 * non-finite value, or the tail) is left to the AVX2 kernel, whose result
 * for finite data does not depend on the visiting order. */
NPUC_AVX512 static uint64_t minmax_avx512(const float *x, size_t n, float *lo, float *hi) {
    if (n < 64) return npuc__qk_minmax_avx2(x, n, lo, hi);
    const __m512 z = _mm512_setzero_ps();
    __m512 lo0 = _mm512_set1_ps(INFINITY), lo1 = lo0;
    __m512 hi0 = _mm512_set1_ps(-INFINITY), hi1 = hi0;
    __m512 c0 = z, c1 = z, c2 = z, c3 = z;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        const __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
        const __m512 c = _mm512_loadu_ps(x + i + 32), d = _mm512_loadu_ps(x + i + 48);
        lo0 = _mm512_min_ps(a, lo0);
        hi0 = _mm512_max_ps(a, hi0);
        lo1 = _mm512_min_ps(b, lo1);
        hi1 = _mm512_max_ps(b, hi1);
        lo0 = _mm512_min_ps(c, lo0);
        hi0 = _mm512_max_ps(c, hi0);
        lo1 = _mm512_min_ps(d, lo1);
        hi1 = _mm512_max_ps(d, hi1);
        c0 = _mm512_fmadd_ps(a, z, c0);
        c1 = _mm512_fmadd_ps(b, z, c1);
        c2 = _mm512_fmadd_ps(c, z, c2);
        c3 = _mm512_fmadd_ps(d, z, c3);
    }
    const __m512 c = _mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3));
    if (_mm512_cmp_ps_mask(c, c, _CMP_UNORD_Q)) return npuc__qk_minmax_avx2(x, n, lo, hi);
    float rl = _mm512_reduce_min_ps(_mm512_min_ps(lo1, lo0));
    float rh = _mm512_reduce_max_ps(_mm512_max_ps(hi1, hi0));
    if (i < n) {
        float tl, th;
        if (npuc__qk_minmax_avx2(x + i, n - i, &tl, &th) != 0)
            return npuc__qk_minmax_avx2(x, n, lo, hi);
        rl = tl < rl ? tl : rl;
        rh = th > rh ? th : rh;
    }
    *lo = rl == 0.0f ? 0.0f : rl;
    *hi = rh == 0.0f ? 0.0f : rh;
    return 0;
}

/* ------------------------------------------------------------ minmax_groups
 *
 * 16 groups of G values (G a multiple of 16) at a time.  Each group's lane
 * min/max (and the lean scan's x * 0 + c NaN/Inf watch) is one vector; a
 * reduction tree then halves the lanes per group at each of four levels
 * while doubling the groups per vector (VSHUFF32X4 twice, VSHUFPS twice, a
 * MIN/MAX after each pair of shuffles), so the 16 minima end up in one
 * vector, likewise the maxima.  The tree leaves group 4l + q in lane
 * 4q + l; feeding the groups in that transposed order puts group g in lane
 * g.  Min and max of finite values do not depend on the order (zeros are
 * returned as +0, as minmax does), so the results are minmax's bit for bit;
 * a batch in which the watch saw NaN or Inf is redone group by group by
 * the careful scan, as are the groups after the last whole batch. */

/* Lane min/max of one group, into *l, *h; its x * 0 into the watch *c. */
NPUC_AVX512_INLINE void group_lanes(const float *xg, size_t per, __m512 *l, __m512 *h, __m512 *c) {
    const __m512 z = _mm512_setzero_ps();
    __m512 a = _mm512_loadu_ps(xg), lo = a, hi = a, w = _mm512_mul_ps(a, z);
    for (size_t v = 1; v < per; v++) {
        a = _mm512_loadu_ps(xg + 16 * v);
        lo = _mm512_min_ps(a, lo);
        hi = _mm512_max_ps(a, hi);
        w = _mm512_fmadd_ps(a, z, w);
    }
    *l = lo;
    *h = hi;
    *c = _mm512_add_ps(*c, w);
}

/* One of the two halves that a level of the tree takes from a and b: levels 1
 * and 2 pick 128-bit quarters (VSHUFF32X4), levels 3 and 4 lanes within
 * quarters (VSHUFPS); `second` picks the other half. */
NPUC_AVX512_INLINE __m512 tree_half(int level, int second, __m512 a, __m512 b) {
    switch (level) {
    case 1: return second ? _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2))
                          : _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0));
    case 2: return second ? _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1))
                          : _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    case 3: return second ? _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2))
                          : _mm512_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0));
    default: return second ? _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1))
                           : _mm512_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    }
}

/* Merges the (l, h) pairs a and b at a level: min of the minima's halves,
 * max of the maxima's. */
NPUC_AVX512_INLINE void tree_merge(int level, __m512 al, __m512 ah, __m512 bl, __m512 bh, __m512 *l,
                                   __m512 *h) {
    *l = _mm512_min_ps(tree_half(level, 0, al, bl), tree_half(level, 1, al, bl));
    *h = _mm512_max_ps(tree_half(level, 0, ah, bh), tree_half(level, 1, ah, bh));
}

/* Level 1: slots s and s + 1 in one vector, 8 lanes per group; slot s
 * holds group 4 * (s % 4) + s / 4. */
NPUC_AVX512_INLINE void tree1(const float *x, size_t G, size_t s, __m512 *l, __m512 *h, __m512 *c) {
    __m512 al, ah, bl, bh;
    group_lanes(x + (4 * (s % 4) + s / 4) * G, G / 16, &al, &ah, c);
    group_lanes(x + (4 * ((s + 1) % 4) + (s + 1) / 4) * G, G / 16, &bl, &bh, c);
    tree_merge(1, al, ah, bl, bh, l, h);
}

/* Level 2: slots s..s+3, a quarter (4 lanes) per group. */
NPUC_AVX512_INLINE void tree2(const float *x, size_t G, size_t s, __m512 *l, __m512 *h, __m512 *c) {
    __m512 al, ah, bl, bh;
    tree1(x, G, s, &al, &ah, c);
    tree1(x, G, s + 2, &bl, &bh, c);
    tree_merge(2, al, ah, bl, bh, l, h);
}

/* Level 3: slots s..s+7, two lanes per group in each quarter. */
NPUC_AVX512_INLINE void tree3(const float *x, size_t G, size_t s, __m512 *l, __m512 *h, __m512 *c) {
    __m512 al, ah, bl, bh;
    tree2(x, G, s, &al, &ah, c);
    tree2(x, G, s + 4, &bl, &bh, c);
    tree_merge(3, al, ah, bl, bh, l, h);
}

NPUC_AVX512 static uint64_t minmax_groups_avx512(const float *x, size_t ngroups, size_t G, float *lo,
                                                 float *hi) {
    uint64_t bad = 0;
    size_t g = 0;
    if (G >= 16 && G % 16 == 0) {
        const __m512 zero = _mm512_setzero_ps();
        for (; g + 16 <= ngroups; g += 16) {
            const float *xb = x + g * G;
            __m512 c = zero, al, ah, bl, bh;
            tree3(xb, G, 0, &al, &ah, &c);
            tree3(xb, G, 8, &bl, &bh, &c);
            if (_mm512_cmp_ps_mask(c, c, _CMP_UNORD_Q)) { /* NaN or Inf: the careful scan */
                for (size_t k = g; k < g + 16; k++) bad += npuc__qk_minmax_avx2(x + k * G, G, &lo[k], &hi[k]);
                continue;
            }
            __m512 l, h;
            tree_merge(4, al, ah, bl, bh, &l, &h); /* level 4: one lane per group */
            /* a zero result as +0 */
            l = _mm512_mask_mov_ps(l, _mm512_cmp_ps_mask(l, zero, _CMP_EQ_OQ), zero);
            h = _mm512_mask_mov_ps(h, _mm512_cmp_ps_mask(h, zero, _CMP_EQ_OQ), zero);
            _mm512_storeu_ps(lo + g, l);
            _mm512_storeu_ps(hi + g, h);
        }
    }
    for (; g < ngroups; g++) bad += minmax_avx512(x + g * G, G, &lo[g], &hi[g]);
    return bad;
}

/* ---------------------------------------------------------------- quant_run */

/* Per-lane block sums: three in float, and sum k^2 (k = q - zp) exactly in
 * int32 (a block adds at most 16 * QK_BLOCK_LANE_TERMS terms of at most
 * 511^2 per lane, far below 2^31). */
typedef struct {
    __m512 w2, e2, wd;
    __m512i kk;
} fsums16;

/* The run's sums so far: double lanes for the float sums, int64 lanes for
 * sum k^2, from which sum deq^2 = scale^2 * sum k^2 at the end. */
typedef struct {
    __m512d w2lo, w2hi, e2lo, e2hi, wdlo, wdhi;
    __m512i kklo, kkhi;
    __m512 amax;
    npuc_qsums exact; /* groups quantized by the AVX2 kernel */
} out16;

NPUC_AVX512_INLINE void fsums16_zero(fsums16 *f) {
    f->w2 = f->e2 = f->wd = _mm512_setzero_ps();
    f->kk = _mm512_setzero_si512();
}

NPUC_AVX512_INLINE void out16_zero(out16 *o) {
    const __m512d zd = _mm512_setzero_pd();
    o->w2lo = o->w2hi = o->e2lo = o->e2hi = o->wdlo = o->wdhi = zd;
    o->kklo = o->kkhi = _mm512_setzero_si512();
    o->amax = _mm512_setzero_ps();
    o->exact = (npuc_qsums){0};
}

NPUC_AVX512_INLINE void to_double16(__m512 f, __m512d *lo, __m512d *hi) {
    *lo = _mm512_add_pd(*lo, _mm512_cvtps_pd(_mm512_castps512_ps256(f)));
    *hi = _mm512_add_pd(*hi, _mm512_cvtps_pd(_mm512_extractf32x8_ps(f, 1)));
}

NPUC_AVX512_INLINE void fsums16_flush(fsums16 *f, out16 *o) {
    to_double16(f->w2, &o->w2lo, &o->w2hi);
    to_double16(f->e2, &o->e2lo, &o->e2hi);
    to_double16(f->wd, &o->wdlo, &o->wdhi);
    o->kklo = _mm512_add_epi64(o->kklo, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(f->kk)));
    o->kkhi = _mm512_add_epi64(o->kkhi, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(f->kk, 1)));
    fsums16_zero(f);
}

/* deq, the float error terms and max |deq - x| of 16 elements whose k is in
 * range (sum k^2 is the caller's: in integers). */
NPUC_AVX512_INLINE __m512 terms16(__m512 x, __m512i k, __m512 scale, fsums16 *f, __m512 *amax) {
    const __m512 d = _mm512_mul_ps(_mm512_cvtepi32_ps(k), scale);
    const __m512 e = _mm512_sub_ps(d, x);
    f->w2 = _mm512_fmadd_ps(x, x, f->w2);
    f->e2 = _mm512_fmadd_ps(e, e, f->e2);
    f->wd = _mm512_fmadd_ps(x, d, f->wd);
    /* VRANGEPS imm 0x0B: the operand of larger magnitude, sign cleared,
     * i.e. max(|e|, amax) in one instruction (amax >= 0). */
    *amax = _mm512_range_ps(e, *amax, 0x0B);
    return d;
}

/* Codes of 64 elements as bytes in element order, from k of the four
 * vectors narrowed to int16 (a = k0|k1, b = k2|k3 as VPACKSSDW leaves them,
 * exact: |k| <= 511) plus the zero point in int16 (q in [-128, 255]):
 * VPACKSSWB or VPACKUSWB, which interleave 128-bit quarters, undone by one
 * VPERMD. */
NPUC_AVX512_INLINE void store_codes64(uint8_t *dst, __m512i a, __m512i b, __m512i vz16, int pack) {
    a = _mm512_add_epi16(a, vz16);
    b = _mm512_add_epi16(b, vz16);
    const __m512i c = pack == QK_PACK_I8 ? _mm512_packs_epi16(a, b) : _mm512_packus_epi16(a, b);
    const __m512i perm = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_storeu_si512((void *)dst, _mm512_permutexvar_epi32(perm, c));
}

/* Codes of 16 elements (q in [-128, 255]) with saturating narrowing. */
NPUC_AVX512_INLINE void store_codes16(uint8_t *dst, __m512i q, int pack) {
    const __m128i c = pack == QK_PACK_I8 ? _mm512_cvtsepi32_epi8(q) : _mm512_cvtusepi32_epi8(q);
    _mm_storeu_si128((__m128i *)(void *)dst, c);
}

NPUC_AVX512_INLINE __m512i rint_mul16(__m512 x, __m512 inv) {
    return _mm512_cvtps_epi32(_mm512_mul_ps(x, inv));
}

/* Elements [i, i + count) on the AVX2 exact path, into o->exact.  Out of
 * line and cold, so the loop keeps its registers; the loop hands it runs of
 * consecutive groups at once, so data that clips often pays one call per
 * run, not per group. */
__attribute__((noinline, cold)) static void exact_span(const float *x, size_t i, size_t count,
                                                       float scale, float inv_scale, int32_t zp,
                                                       int32_t qmin, int32_t qmax, uint8_t *codes,
                                                       float *deq, npuc_qsums *exact) {
    npuc__qk_quant_run_exact_avx2(x + i, count, scale, inv_scale, zp, qmin, qmax, codes + i,
                                  deq ? deq + i : NULL, exact);
}

/* The vector part ([0, n16), n16 a multiple of 16) for one (pack, with_deq)
 * combination. */
NPUC_AVX512_INLINE void run16_body(const float *x, size_t n16, float scale, float inv_scale,
                                   int32_t zp, int32_t qmin, int32_t qmax, uint8_t *codes,
                                   float *deq, int pack, int with_deq, out16 *o, qk_ahead *pf) {
    const __m512 vs = _mm512_set1_ps(scale), vi = _mm512_set1_ps(inv_scale);
    const __m512i vz = _mm512_set1_epi32(zp), vz16 = _mm512_set1_epi16((short)zp);
    const __m512i klo = _mm512_set1_epi32(qmin - zp), khi = _mm512_set1_epi32(qmax - zp);
    const size_t block = 16 * QK_BLOCK_LANE_TERMS;
    __m512 amax = o->amax;
    fsums16 f;
    fsums16_zero(&f);
    size_t i = 0, pend_i = 0, pend_n = 0; /* groups waiting for the exact path: [pend_i, +pend_n) */
    while (i < n16) {
        const size_t end = n16 - i > block ? i + block : n16;
        for (; i + 64 <= end; i += 64) {
            const __m512 x0 = _mm512_loadu_ps(x + i), x1 = _mm512_loadu_ps(x + i + 16);
            const __m512 x2 = _mm512_loadu_ps(x + i + 32), x3 = _mm512_loadu_ps(x + i + 48);
            qk_ahead_step(pf, 4);
            const __m512i k0 = rint_mul16(x0, vi), k1 = rint_mul16(x1, vi);
            const __m512i k2 = rint_mul16(x2, vi), k3 = rint_mul16(x3, vi);
            const __m512i mn = _mm512_min_epi32(_mm512_min_epi32(k0, k1), _mm512_min_epi32(k2, k3));
            const __m512i mx = _mm512_max_epi32(_mm512_max_epi32(k0, k1), _mm512_max_epi32(k2, k3));
            const __mmask16 out = _mm512_cmplt_epi32_mask(mn, klo) | _mm512_cmpgt_epi32_mask(mx, khi);
            if (__builtin_expect(out != 0, 0)) { /* clipped, NaN or Inf: exact path */
                if (!pend_n) pend_i = i;
                pend_n += 64;
                continue;
            }
            if (__builtin_expect(pend_n != 0, 0)) {
                exact_span(x, pend_i, pend_n, scale, inv_scale, zp, qmin, qmax, codes,
                           with_deq ? deq : NULL, &o->exact);
                pend_n = 0;
            }
            const __m512 d0 = terms16(x0, k0, vs, &f, &amax);
            const __m512 d1 = terms16(x1, k1, vs, &f, &amax);
            const __m512 d2 = terms16(x2, k2, vs, &f, &amax);
            const __m512 d3 = terms16(x3, k3, vs, &f, &amax);
            const __m512i a = _mm512_packs_epi32(k0, k1), b = _mm512_packs_epi32(k2, k3);
            f.kk = _mm512_add_epi32(f.kk, _mm512_add_epi32(_mm512_madd_epi16(a, a), _mm512_madd_epi16(b, b)));
            store_codes64(codes + i, a, b, vz16, pack);
            if (with_deq) {
                _mm512_storeu_ps(deq + i, d0);
                _mm512_storeu_ps(deq + i + 16, d1);
                _mm512_storeu_ps(deq + i + 32, d2);
                _mm512_storeu_ps(deq + i + 48, d3);
            }
        }
        for (; i < end; i += 16) {
            const __m512 x0 = _mm512_loadu_ps(x + i);
            qk_ahead_step(pf, 1);
            const __m512i k0 = rint_mul16(x0, vi);
            const __mmask16 out = _mm512_cmplt_epi32_mask(k0, klo) | _mm512_cmpgt_epi32_mask(k0, khi);
            if (__builtin_expect(out != 0, 0)) {
                if (!pend_n) pend_i = i;
                pend_n += 16;
                continue;
            }
            if (__builtin_expect(pend_n != 0, 0)) {
                exact_span(x, pend_i, pend_n, scale, inv_scale, zp, qmin, qmax, codes,
                           with_deq ? deq : NULL, &o->exact);
                pend_n = 0;
            }
            const __m512 d0 = terms16(x0, k0, vs, &f, &amax);
            f.kk = _mm512_add_epi32(f.kk, _mm512_mullo_epi32(k0, k0));
            store_codes16(codes + i, _mm512_add_epi32(k0, vz), pack);
            if (with_deq) _mm512_storeu_ps(deq + i, d0);
        }
        fsums16_flush(&f, o);
    }
    if (pend_n)
        exact_span(x, pend_i, pend_n, scale, inv_scale, zp, qmin, qmax, codes, with_deq ? deq : NULL,
                   &o->exact);
    o->amax = amax;
}

/* Adds the float-path lanes (in lane order), then the exact groups' sums.
 * The float path's sum of deq^2 is scale^2 * sum k^2, one rounding from the
 * exact integer sum (below 2^53: n < 2^31 terms of at most 511^2), where the
 * reference adds fl(k * scale)^2: each of its terms is within 2^-23 of
 * (k * scale)^2, relative, and all terms are >= 0, so the two sums differ
 * by less than 1.2e-7 of either, well inside NPUC_QSUM_RTOL. */
NPUC_AVX512 static void out16_reduce(const out16 *o, float scale, npuc_qsums *acc) {
    double w2[16], e2[16], wd[16];
    int64_t kk[16];
    float am[16];
    _mm512_storeu_pd(w2, o->w2lo), _mm512_storeu_pd(w2 + 8, o->w2hi);
    _mm512_storeu_pd(e2, o->e2lo), _mm512_storeu_pd(e2 + 8, o->e2hi);
    _mm512_storeu_pd(wd, o->wdlo), _mm512_storeu_pd(wd + 8, o->wdhi);
    _mm512_storeu_si512((void *)kk, o->kklo), _mm512_storeu_si512((void *)(kk + 8), o->kkhi);
    _mm512_storeu_ps(am, o->amax);
    for (int k = 0; k < 16; k++) {
        acc->sum_w2 += w2[k];
        acc->sum_e2 += e2[k];
        acc->sum_wd += wd[k];
        acc->max_abs = (double)am[k] > acc->max_abs ? (double)am[k] : acc->max_abs;
    }
    int64_t ksum = 0;
    for (int k = 0; k < 16; k++) ksum += kk[k];
    acc->sum_d2 += (double)ksum * ((double)scale * (double)scale);
    npuc_qsums_add(acc, &o->exact);
}

NPUC_AVX512 static void quant_run_hinted_avx512(const float *x, size_t n, float scale,
                                                float inv_scale, int32_t zp, int32_t qmin,
                                                int32_t qmax, uint8_t *codes, float *deq,
                                                npuc_qsums *s, const npuc_qhint *h) {
    const int pack = qk_pack_kind(qmin, qmax);
    const size_t n16 = n & ~(size_t)15;
    unsigned csr;
    if (n16 == 0 || n >= ((size_t)1 << 31) || pack == QK_PACK_NONE || zp < -256 || zp > 256 ||
        !qk_inv_ok(scale, inv_scale) || !qk_watch_begin(&csr)) {
        npuc__qk_quant_run_hinted_avx2(x, n, scale, inv_scale, zp, qmin, qmax, codes, deq, s, h);
        return;
    }
    qk_ahead pf = qk_ahead_make(h);
    out16 o;
    out16_zero(&o);
    /* One specialisation per (pack, deq) pair. */
    if (pack == QK_PACK_I8 && deq)
        run16_body(x, n16, scale, inv_scale, zp, qmin, qmax, codes, deq, QK_PACK_I8, 1, &o, &pf);
    else if (pack == QK_PACK_I8)
        run16_body(x, n16, scale, inv_scale, zp, qmin, qmax, codes, NULL, QK_PACK_I8, 0, &o, &pf);
    else if (deq)
        run16_body(x, n16, scale, inv_scale, zp, qmin, qmax, codes, deq, QK_PACK_U8, 1, &o, &pf);
    else
        run16_body(x, n16, scale, inv_scale, zp, qmin, qmax, codes, NULL, QK_PACK_U8, 0, &o, &pf);
    if (qk_watch_end(csr, &o)) {
        npuc__qk_quant_run_avx2(x, n, scale, inv_scale, zp, qmin, qmax, codes, deq, s);
        return;
    }
    npuc_qsums acc = {0};
    out16_reduce(&o, scale, &acc);
    for (size_t i = n16; i < n; i++) {
        float d;
        codes[i] = npuc_qk_elem(x[i], scale, inv_scale, zp, qmin, qmax, &d, &acc);
        if (deq) deq[i] = d;
    }
    npuc_qsums_add(s, &acc);
}

NPUC_AVX512 static void quant_run_avx512(const float *x, size_t n, float scale, float inv_scale,
                                         int32_t zp, int32_t qmin, int32_t qmax, uint8_t *codes,
                                         float *deq, npuc_qsums *s) {
    quant_run_hinted_avx512(x, n, scale, inv_scale, zp, qmin, qmax, codes, deq, s, NULL);
}

/* ---------------------------------------------------------------- quant_groups
 *
 * Runs of G values (G a multiple of 16, at most 16 * QK_BLOCK_LANE_TERMS)
 * with their own parameters, in one call: the float block sums, the double
 * lanes, max |deq - x| and the MXCSR watch carry across groups, so the
 * setup and the final lane reduction of quant_run are paid once per call.
 * Per group: its sum k^2 in int32 lanes (at most 256 * 511^2 < 2^31 in
 * all), converted exactly to double and multiplied by its scale^2 (exact in
 * double) in one FMA into double lanes: sum deq^2 within the bound
 * out16_reduce states, with no horizontal sum per group.  Vectors go in
 * pairs, as quant_run's body takes them in fours: k narrowed to int16 once
 * for VPMADDWD (k^2) and the code bytes (32 per store).  A group whose
 * parameters quant_run would not take on its fast path goes to the AVX2
 * quant_run, a group holding a clipped, NaN or infinite value (found by a
 * first pass over its k) to the exact path, both into o->exact.  G of 32,
 * 64 or 128 (per = 2, 4, 8 vectors) have their own specialisations, which
 * keep the first pass's k in registers instead of computing them again. */

/* Codes of 32 elements in order from a = VPACKSSDW(k0, k1) (exact: |k| <=
 * 511) plus the zero point in int16: the first half of store_codes64's
 * permutation puts the bytes back in element order. */
NPUC_AVX512_INLINE void store_codes32(uint8_t *dst, __m512i a, __m512i vz16, int pack) {
    a = _mm512_add_epi16(a, vz16);
    const __m512i c = pack == QK_PACK_I8 ? _mm512_packs_epi16(a, a) : _mm512_packus_epi16(a, a);
    const __m512i perm = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm256_storeu_si256((__m256i *)(void *)dst, _mm512_castsi512_si256(_mm512_permutexvar_epi32(perm, c)));
}

/* KEEP: the number of vectors per group when it is a constant at most 8
 * (their k stay in registers between the range check and the terms), else 0. */
NPUC_AVX512_INLINE void groups_body(const float *x, size_t ngroups, size_t G, const float *scale,
                                    const float *inv_scale, const int32_t *zp, int32_t qmin, int32_t qmax,
                                    uint8_t *codes, float *deq, int pack, int with_deq, const size_t KEEP,
                                    out16 *o, __m512d *d2lo, __m512d *d2hi, qk_ahead *pf) {
    const size_t per = KEEP ? KEEP : G / 16;
    __m512d s2lo = *d2lo, s2hi = *d2hi;
    __m512 amax = o->amax;
    fsums16 f;
    fsums16_zero(&f);
    size_t terms = 0; /* float terms per lane in f */
    for (size_t g = 0; g < ngroups; g++) {
        const float *xg = x + g * G;
        uint8_t *cg = codes + g * G;
        float *dg = with_deq ? deq + g * G : NULL;
        const float sc = scale[g], iv = inv_scale[g];
        const int32_t z = zp[g];
        qk_ahead_step(pf, (int)per); /* as many lines as the group holds */
        if (z < -256 || z > 256 || !qk_inv_ok(sc, iv)) {
            npuc__qk_quant_run_avx2(xg, G, sc, iv, z, qmin, qmax, cg, dg, &o->exact);
            continue;
        }
        const __m512 vi = _mm512_set1_ps(iv), vs = _mm512_set1_ps(sc);
        const __m512i klo = _mm512_set1_epi32(qmin - z), khi = _mm512_set1_epi32(qmax - z);
        __m512i kv[8];
        __mmask16 out = 0;
#pragma GCC unroll 8
        for (size_t v = 0; v < per; v++) {
            const __m512i k = rint_mul16(_mm512_loadu_ps(xg + 16 * v), vi);
            if (KEEP) kv[v] = k;
            out |= _mm512_cmplt_epi32_mask(k, klo) | _mm512_cmpgt_epi32_mask(k, khi);
        }
        if (out) {
            exact_span(xg, 0, G, sc, iv, z, qmin, qmax, cg, dg, &o->exact);
            continue;
        }
        if (terms + per > QK_BLOCK_LANE_TERMS) {
            fsums16_flush(&f, o);
            terms = 0;
        }
        terms += per;
        const __m512i vz16 = _mm512_set1_epi16((short)z);
        __m512i kk = _mm512_setzero_si512();
        size_t v = 0;
#pragma GCC unroll 4
        for (; v + 2 <= per; v += 2) {
            const __m512 x0 = _mm512_loadu_ps(xg + 16 * v), x1 = _mm512_loadu_ps(xg + 16 * v + 16);
            const __m512i k0 = KEEP ? kv[v] : rint_mul16(x0, vi);
            const __m512i k1 = KEEP ? kv[v + 1] : rint_mul16(x1, vi);
            const __m512 d0 = terms16(x0, k0, vs, &f, &amax);
            const __m512 d1 = terms16(x1, k1, vs, &f, &amax);
            const __m512i a = _mm512_packs_epi32(k0, k1);
            kk = _mm512_add_epi32(kk, _mm512_madd_epi16(a, a));
            store_codes32(cg + 16 * v, a, vz16, pack);
            if (with_deq) {
                _mm512_storeu_ps(dg + 16 * v, d0);
                _mm512_storeu_ps(dg + 16 * v + 16, d1);
            }
        }
        if (v < per) { /* an odd last vector */
            const __m512 x0 = _mm512_loadu_ps(xg + 16 * v);
            const __m512i k0 = rint_mul16(x0, vi);
            const __m512 d0 = terms16(x0, k0, vs, &f, &amax);
            kk = _mm512_add_epi32(kk, _mm512_mullo_epi32(k0, k0));
            store_codes16(cg + 16 * v, _mm512_add_epi32(k0, _mm512_set1_epi32(z)), pack);
            if (with_deq) _mm512_storeu_ps(dg + 16 * v, d0);
        }
        const __m512d s2 = _mm512_set1_pd((double)sc * (double)sc);
        s2lo = _mm512_fmadd_pd(_mm512_cvtepi32_pd(_mm512_castsi512_si256(kk)), s2, s2lo);
        s2hi = _mm512_fmadd_pd(_mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(kk, 1)), s2, s2hi);
    }
    fsums16_flush(&f, o);
    o->amax = amax;
    *d2lo = s2lo;
    *d2hi = s2hi;
}

/* One (pack, deq) pair: the specialisations by vectors per group. */
NPUC_AVX512_INLINE void groups_pd(const float *x, size_t ngroups, size_t G, const float *scale,
                                  const float *inv_scale, const int32_t *zp, int32_t qmin, int32_t qmax,
                                  uint8_t *codes, float *deq, int pack, int with_deq, out16 *o,
                                  __m512d *d2lo, __m512d *d2hi, qk_ahead *pf) {
    if (G == 32)
        groups_body(x, ngroups, G, scale, inv_scale, zp, qmin, qmax, codes, deq, pack, with_deq, 2, o, d2lo,
                    d2hi, pf);
    else if (G == 64)
        groups_body(x, ngroups, G, scale, inv_scale, zp, qmin, qmax, codes, deq, pack, with_deq, 4, o, d2lo,
                    d2hi, pf);
    else if (G == 128)
        groups_body(x, ngroups, G, scale, inv_scale, zp, qmin, qmax, codes, deq, pack, with_deq, 8, o, d2lo,
                    d2hi, pf);
    else
        groups_body(x, ngroups, G, scale, inv_scale, zp, qmin, qmax, codes, deq, pack, with_deq, 0, o, d2lo,
                    d2hi, pf);
}

NPUC_AVX512 static void quant_groups_avx512(const float *x, size_t ngroups, size_t G, const float *scale,
                                            const float *inv_scale, const int32_t *zp, int32_t qmin,
                                            int32_t qmax, uint8_t *codes, float *deq, npuc_qsums *s,
                                            const npuc_qhint *h) {
    const int pack = qk_pack_kind(qmin, qmax);
    unsigned csr;
    if (G == 0 || G % 16 || G > 16 * QK_BLOCK_LANE_TERMS || pack == QK_PACK_NONE || !qk_watch_begin(&csr)) {
        for (size_t g = 0; g < ngroups; g++)
            quant_run_hinted_avx512(x + g * G, G, scale[g], inv_scale[g], zp[g], qmin, qmax, codes + g * G,
                                    deq ? deq + g * G : NULL, s, NULL);
        return;
    }
    qk_ahead pf = qk_ahead_make(h);
    out16 o;
    out16_zero(&o);
    __m512d d2lo = _mm512_setzero_pd(), d2hi = d2lo;
    if (pack == QK_PACK_I8 && deq)
        groups_pd(x, ngroups, G, scale, inv_scale, zp, qmin, qmax, codes, deq, QK_PACK_I8, 1, &o, &d2lo, &d2hi, &pf);
    else if (pack == QK_PACK_I8)
        groups_pd(x, ngroups, G, scale, inv_scale, zp, qmin, qmax, codes, NULL, QK_PACK_I8, 0, &o, &d2lo, &d2hi, &pf);
    else if (deq)
        groups_pd(x, ngroups, G, scale, inv_scale, zp, qmin, qmax, codes, deq, QK_PACK_U8, 1, &o, &d2lo, &d2hi, &pf);
    else
        groups_pd(x, ngroups, G, scale, inv_scale, zp, qmin, qmax, codes, NULL, QK_PACK_U8, 0, &o, &d2lo, &d2hi, &pf);
    if (qk_watch_end(csr, &o)) {
        npuc__qk_quant_groups_avx2(x, ngroups, G, scale, inv_scale, zp, qmin, qmax, codes, deq, s, NULL);
        return;
    }
    npuc_qsums acc = {0};
    out16_reduce(&o, 0.0f, &acc); /* o's sum k^2 lanes stayed 0: d2lo/d2hi hold sum deq^2 */
    double d2[16];
    _mm512_storeu_pd(d2, d2lo);
    _mm512_storeu_pd(d2 + 8, d2hi);
    for (int k = 0; k < 16; k++) acc.sum_d2 += d2[k];
    npuc_qsums_add(s, &acc);
}

static const npuc_kernel_table g_avx512 = {
    .name = "avx512",
    .minmax = minmax_avx512,
    .minmax_groups = minmax_groups_avx512,
    .range_params = npuc__qk_range_params_avx2,
    .minmax_cols = npuc__qk_minmax_cols_avx2,
    .quant_run = quant_run_avx512,
    .quant_run_hinted = quant_run_hinted_avx512,
    .quant_groups = quant_groups_avx512,
    .quant_vec = npuc__qk_quant_vec_avx2,
    .quant_rows = npuc__qk_quant_rows_avx2,
    .pack_bits = npuc__qk_pack_bits_avx2,
};

const npuc_kernel_table *npuc_kernels_avx512(void) {
    if (npuc_kernels_avx2() && npuc_cpu_has(NPUC_CPU_AVX512F | NPUC_CPU_AVX512BW | NPUC_CPU_AVX512DQ))
        return &g_avx512;
    return NULL;
}

#else

const npuc_kernel_table *npuc_kernels_avx512(void) { return NULL; }

#endif
