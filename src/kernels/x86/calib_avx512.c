/*
 * calib_avx512.c - AVX-512 version of the range estimators' lane loops
 * (calib_lanes.h), for the MSE range search's exact mode: group_sqerr
 * evaluates up to four candidates per pass over the group, two per 16-lane
 * register (one in the low 8 lanes, one in the high 8), each block of 8
 * values broadcast to both halves; two registers side by side, since one
 * pass over a small group is bound by latency, not throughput.  So lane j of either half sums the
 * values of index j mod 8 in index order, exactly as the reference's lane j
 * does, with the same operations (MINPS/MAXPS keep the reference's operand
 * order; no FMA: the build is ISO C, -ffp-contract=off, and the intrinsics
 * below are separate multiplies and adds); the tail of a block is a masked
 * load whose dead lanes are left out of the sums by masked adds.  The lanes
 * go to double by the reference's pairwise order (npuc_lanes_sum) in
 * packed double adds, each an IEEE add of the same two operands.  So every
 * sum is the reference's double, bit for bit.  lanes_minmax and lanes_sqerr
 * are the same loops on one 8-lane register.
 *
 * Only the functions below are compiled for AVX-512 (function-level target
 * attributes); the table is handed out only when the CPU reports AVX-512F
 * and DQ.
 */
#include "kernels/calib_lanes.h"
#include "kernels/cpu_x86.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <float.h>
#include <immintrin.h>
#include <math.h>

#define CALIB_AVX512 __attribute__((target("avx512f,avx512dq,avx2")))
#define CALIB_AVX512_INLINE static inline __attribute__((always_inline, target("avx512f,avx512dq,avx2")))

CALIB_AVX512 static void lanes_minmax_avx512(const float *x, size_t nblocks, float l[8], float h[8],
                                             float z[8]) {
    __m256 lv = _mm256_loadu_ps(l), hv = _mm256_loadu_ps(h), zv = _mm256_loadu_ps(z);
    const __m256 zero = _mm256_setzero_ps();
    for (size_t b = 0; b < nblocks; b++, x += 8) {
        const __m256 v = _mm256_loadu_ps(x);
        lv = _mm256_min_ps(v, lv); /* v < l ? v : l */
        hv = _mm256_max_ps(v, hv); /* v > h ? v : h */
        zv = _mm256_add_ps(zv, _mm256_mul_ps(v, zero));
    }
    _mm256_storeu_ps(l, lv);
    _mm256_storeu_ps(h, hv);
    _mm256_storeu_ps(z, zv);
}

/* One block of 8 values (in both halves of xv) for two candidates: the
 * reference's operations per lane, accumulated into e (and cl when wl, ch
 * when wh) in the lanes of mask k only. */
CALIB_AVX512_INLINE void step2(__m512 xv, __mmask16 k, __m512 inv, __m512 sc, __m512 lo, __m512 hi,
                               __m512 ba, __m512 bb, int wl, int wh, int symc, __m512 *e, __m512 *cl,
                               __m512 *ch) {
    const __m512 magic = _mm512_set1_ps(NPUC_RINT_MAGIC), z = _mm512_setzero_ps();
    __m512 v = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(xv, inv), lo), hi);
    v = _mm512_sub_ps(_mm512_add_ps(v, magic), magic);
    const __m512 d = _mm512_sub_ps(_mm512_mul_ps(v, sc), xv);
    const __m512 dd = _mm512_mul_ps(d, d);
    *e = _mm512_mask_add_ps(*e, k, *e, dd);
    if (symc) {
        /* Symmetric clip (see group_sqerr_avx512): beyond a bound, the
         * clipping term is the error term; elsewhere it is +0. */
        *cl = _mm512_mask_add_ps(*cl, _mm512_mask_cmp_ps_mask(k, xv, ba, _CMP_LT_OQ), *cl, dd);
        *ch = _mm512_mask_add_ps(*ch, _mm512_mask_cmp_ps_mask(k, xv, bb, _CMP_GT_OQ), *ch, dd);
        return;
    }
    if (wl) {
        const __m512 o = _mm512_max_ps(_mm512_sub_ps(ba, xv), z);
        *cl = _mm512_mask_add_ps(*cl, k, *cl, _mm512_mul_ps(o, o));
    }
    if (wh) {
        const __m512 u = _mm512_max_ps(_mm512_sub_ps(xv, bb), z);
        *ch = _mm512_mask_add_ps(*ch, k, *ch, _mm512_mul_ps(u, u));
    }
}

/* npuc_lanes_sum of both halves of v: candidate 0's in element 0, 1's in 1. */
CALIB_AVX512_INLINE __m128d lanes_sum2(__m512 v) {
    const __m512d p = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
    const __m512d q = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1));
    /* [p0+p1, q0+q1, p2+p3, q2+q3, p4+p5, q4+q5, p6+p7, q6+q7] */
    const __m512d s = _mm512_add_pd(_mm512_unpacklo_pd(p, q), _mm512_unpackhi_pd(p, q));
    /* element 0: (p0+p1) + (p2+p3), 4: (p4+p5) + (p6+p7) (1, 5: q's) */
    const __m512d t = _mm512_add_pd(s, _mm512_permutex_pd(s, 0x4E));
    /* element 0: the two halves' sums added, as npuc_lanes_sum does */
    const __m512d u = _mm512_add_pd(t, _mm512_shuffle_f64x2(t, t, 0x4E));
    return _mm512_castpd512_pd128(u);
}

CALIB_AVX512_INLINE __m512 two(float a, float b) {
    return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1);
}

/* Candidates q[0..2P) (bounds bnd[0..4P)) over x[0..n), P pairs of them
 * side by side (independent chains, so the latency of one pass is shared);
 * out[3c..3c+2] for c < nout.  wl = 0 (wh = 0): every low (high) bound is
 * -Inf (+Inf) or there are no bounds, so that clipping sum is +0, which it
 * gives without computing it. */
CALIB_AVX512_INLINE void pairs_sqerr(const float *x, size_t n, const npuc_lane_q *q, const float *bnd,
                                     int wl, int wh, int symc, int P, double *out, size_t nout) {
    __m512 inv[2], sc[2], lo[2], hi[2], ba[2], bb[2];
    __m128d tot[2], tl[2], th[2];
    #pragma GCC unroll 2
    for (int p = 0; p < P; p++) {
        const npuc_lane_q *q0 = &q[2 * p], *q1 = &q[2 * p + 1];
        inv[p] = two(q0->inv_scale, q1->inv_scale);
        sc[p] = two(q0->scale, q1->scale);
        lo[p] = two(q0->vmin, q1->vmin);
        hi[p] = two(q0->vmax, q1->vmax);
        ba[p] = wl ? two(bnd[4 * p], bnd[4 * p + 2]) : _mm512_setzero_ps();
        bb[p] = wh ? two(bnd[4 * p + 1], bnd[4 * p + 3]) : _mm512_setzero_ps();
        tot[p] = tl[p] = th[p] = _mm_setzero_pd();
    }
    for (size_t i0 = 0; i0 < n; i0 += NPUC_SQERR_BLOCK) {
        const size_t m = n - i0 < NPUC_SQERR_BLOCK ? n - i0 : NPUC_SQERR_BLOCK;
        const float *xb = x + i0;
        __m512 e[2], cl[2], ch[2];
        #pragma GCC unroll 2
        for (int p = 0; p < P; p++) e[p] = cl[p] = ch[p] = _mm512_setzero_ps();
        const size_t nb = m / 8;
        for (size_t b = 0; b < nb; b++) {
            const __m512 xv = _mm512_broadcast_f32x8(_mm256_loadu_ps(xb + 8 * b));
            #pragma GCC unroll 2
            for (int p = 0; p < P; p++)
                step2(xv, (__mmask16)0xFFFF, inv[p], sc[p], lo[p], hi[p], ba[p], bb[p], wl, wh, symc, &e[p],
                      &cl[p], &ch[p]);
        }
        if (m % 8) {
            const unsigned k8 = (1u << (m % 8)) - 1u;
            const __m512 t = _mm512_maskz_loadu_ps((__mmask16)k8, xb + 8 * nb);
            const __m512 xv = _mm512_shuffle_f32x4(t, t, 0x44); /* low 8 to both halves */
            #pragma GCC unroll 2
            for (int p = 0; p < P; p++)
                step2(xv, (__mmask16)(k8 | k8 << 8), inv[p], sc[p], lo[p], hi[p], ba[p], bb[p], wl, wh,
                      symc, &e[p], &cl[p], &ch[p]);
        }
        #pragma GCC unroll 2
        for (int p = 0; p < P; p++) {
            tot[p] = _mm_add_pd(tot[p], lanes_sum2(e[p]));
            if (wl) tl[p] = _mm_add_pd(tl[p], lanes_sum2(cl[p]));
            if (wh) th[p] = _mm_add_pd(th[p], lanes_sum2(ch[p]));
        }
    }
    #pragma GCC unroll 2
    for (int p = 0; p < P; p++) {
        double a[2], l[2], h[2];
        _mm_storeu_pd(a, tot[p]);
        _mm_storeu_pd(l, tl[p]);
        _mm_storeu_pd(h, th[p]);
#pragma GCC unroll 2
        for (int c = 0; c < 2; c++) {
            if ((size_t)(2 * p + c) >= nout) break;
            double *o = out + 3 * (2 * p + c);
            o[0] = a[c], o[1] = l[c], o[2] = h[c];
        }
    }
}

CALIB_AVX512 static void group_sqerr_avx512(const float *x, size_t n, const npuc_lane_q *q,
                                            const float *bnd, size_t k, double *out) {
    /* Up to four candidates per pass; missing ones repeat the last and are
     * dropped. */
    for (size_t c = 0; c < k; c += 4) {
        const size_t r = k - c < 4 ? k - c : 4;
        npuc_lane_q qq[4];
        float bq[8] = {0};
        for (size_t i = 0; i < 4; i++) {
            const size_t src = c + (i < r ? i : r - 1);
            qq[i] = q[src];
            if (bnd) bq[2 * i] = bnd[2 * src], bq[2 * i + 1] = bnd[2 * src + 1];
        }
        /* Which clipping sums can be nonzero (a -Inf low or +Inf high
         * bound, as one-end scans pass, adds only zeros). */
        int wl = 0, wh = 0;
        for (size_t i = 0; bnd && i < r; i++) {
            wl |= bq[2 * i] != -INFINITY;
            wh |= bq[2 * i + 1] != INFINITY;
        }
        /* Symmetric clips: every bound pair is {-B, B} with B = vmax * scale
         * (the float product the error term forms for a clipped value),
         * vmin = -vmax in [-32767, -1], scale normal and inv_scale within
         * 2^-20 of 1 / scale.  Then a value x > B has x * inv_scale above
         * vmax (1 - 2^-20 - 3 * 2^-24) > vmax - 1/2 (or +Inf), so its code
         * is vmax, deq = B, and d = B - x is
         * exactly -(x - B): the clipping term max(x - B, 0)^2 equals d^2
         * bit for bit; likewise d = -B - x = A - x below A = -B; everywhere
         * else (NaN included) the clipping term is +0, which leaves a sum of
         * nonnegative terms unchanged.  So the error terms, added under the
         * masks x > B and x < A, give the reference's clipping sums. */
        int symc = bnd != NULL;
        for (size_t i = 0; symc && i < 4; i++)
            symc = bq[2 * i + 1] == qq[i].vmax * qq[i].scale && bq[2 * i] == -bq[2 * i + 1] &&
                   qq[i].vmin == -qq[i].vmax && qq[i].vmax >= 1.0f && qq[i].vmax <= 32767.0f &&
                   qq[i].scale >= FLT_MIN && fabsf(qq[i].inv_scale * qq[i].scale - 1.0f) <= 0x1p-20f;
        const int w = symc ? 4 : wl * 2 + wh;
        if (r > 2) {
            if (w == 4) pairs_sqerr(x, n, qq, bq, 1, 1, 1, 2, out + 3 * c, r);
            else if (w == 3) pairs_sqerr(x, n, qq, bq, 1, 1, 0, 2, out + 3 * c, r);
            else if (w == 2) pairs_sqerr(x, n, qq, bq, 1, 0, 0, 2, out + 3 * c, r);
            else if (w == 1) pairs_sqerr(x, n, qq, bq, 0, 1, 0, 2, out + 3 * c, r);
            else pairs_sqerr(x, n, qq, bq, 0, 0, 0, 2, out + 3 * c, r);
        } else {
            if (w == 4) pairs_sqerr(x, n, qq, bq, 1, 1, 1, 1, out + 3 * c, r);
            else if (w == 3) pairs_sqerr(x, n, qq, bq, 1, 1, 0, 1, out + 3 * c, r);
            else if (w == 2) pairs_sqerr(x, n, qq, bq, 1, 0, 0, 1, out + 3 * c, r);
            else if (w == 1) pairs_sqerr(x, n, qq, bq, 0, 1, 0, 1, out + 3 * c, r);
            else pairs_sqerr(x, n, qq, bq, 0, 0, 0, 1, out + 3 * c, r);
        }
    }
}

/* The 8 lanes in one register: lanes_sqerr with AVX2 operations. */
CALIB_AVX512 static void lanes_sqerr_avx512(const float *x, size_t nblocks, const npuc_lane_q *q, float e[8],
                                            const float *bnd, float cl[8], float ch[8]) {
    const __m256 inv = _mm256_set1_ps(q->inv_scale), sc = _mm256_set1_ps(q->scale);
    const __m256 lo = _mm256_set1_ps(q->vmin), hi = _mm256_set1_ps(q->vmax);
    const __m256 magic = _mm256_set1_ps(NPUC_RINT_MAGIC), z = _mm256_setzero_ps();
    const __m256 ba = _mm256_set1_ps(bnd ? bnd[0] : 0.0f), bb = _mm256_set1_ps(bnd ? bnd[1] : 0.0f);
    __m256 ev = _mm256_loadu_ps(e), lv = z, hv = z;
    if (bnd) {
        lv = _mm256_loadu_ps(cl);
        hv = _mm256_loadu_ps(ch);
    }
    for (size_t b = 0; b < nblocks; b++, x += 8) {
        const __m256 xv = _mm256_loadu_ps(x);
        __m256 v = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(xv, inv), lo), hi);
        v = _mm256_sub_ps(_mm256_add_ps(v, magic), magic);
        const __m256 d = _mm256_sub_ps(_mm256_mul_ps(v, sc), xv);
        ev = _mm256_add_ps(ev, _mm256_mul_ps(d, d));
        if (bnd) {
            const __m256 o = _mm256_max_ps(_mm256_sub_ps(ba, xv), z);
            const __m256 u = _mm256_max_ps(_mm256_sub_ps(xv, bb), z);
            lv = _mm256_add_ps(lv, _mm256_mul_ps(o, o));
            hv = _mm256_add_ps(hv, _mm256_mul_ps(u, u));
        }
    }
    _mm256_storeu_ps(e, ev);
    if (bnd) {
        _mm256_storeu_ps(cl, lv);
        _mm256_storeu_ps(ch, hv);
    }
}

static const npuc_calib_kernel_table g_avx512 = {
    .name = "avx512",
    .lanes_minmax = lanes_minmax_avx512,
    .lanes_sqerr = lanes_sqerr_avx512,
    .group_sqerr = group_sqerr_avx512,
    .batch = 8,
};

const npuc_calib_kernel_table *npuc_calib_kernels_avx512(void) {
    if (npuc_cpu_has(NPUC_CPU_AVX2 | NPUC_CPU_AVX512F | NPUC_CPU_AVX512DQ))
        return &g_avx512;
    return NULL;
}

#else

const npuc_calib_kernel_table *npuc_calib_kernels_avx512(void) { return NULL; }

#endif
