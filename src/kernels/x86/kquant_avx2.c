/*
 * kquant_avx2.c - AVX2 versions of the two costly K-quant searches
 * (kquant_kernels.h), bit-identical to ref/kquant_ref.c.
 *
 * The reference fits each sub-block (16 or 32 values) on its own: a first
 * guess, then candidate scales one after the other, each a pass over the
 * values with float sums in value order, a candidate kept when it beats
 * the best so far (in qkx it also moves the offset later candidates start
 * from).  Here eight sub-blocks run at once, one per lane: every lane
 * performs the reference's operations for its sub-block in the reference's
 * order (sums over the values in order, within the lane), and its state
 * (offset, scale, best, codes) is updated under the lane's acceptance mask,
 * so every result is the reference's bits.  The sub-blocks come in eights
 * (Q2_K, Q3_K, Q6_K have 16, Q4_K and Q5_K 8); the one-group searches of
 * the legacy weighted paths stay the reference's.
 * The prologue (range, first guess) is the reference's scalar code.
 *
 * Compiled for AVX2 only (function target attribute; no FMA) and with
 * -ffp-contract=off, so no multiply and add are fused.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu_x86.h"
#include "kernels/kquant_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2")))

#define EPS 1e-15f /* ggml's GROUP_MAX_EPS */


/* nearest_int on eight lanes. */
AVX2 static inline __m256i nearest8(__m256 f) {
    const __m256i b = _mm256_castps_si256(_mm256_add_ps(f, _mm256_set1_ps(12582912.f)));
    return _mm256_sub_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x00400000));
}

/* The codes Lt[i] (value i of lane j's group) as bytes L[n*j + i], 0 in
 * the dead lanes (the reference's early return). */
AVX2 static void store_codes8(const __m256i *Lt, __m256 dead, int n, uint8_t *L) {
    int32_t lv[32][8];
    for (int i = 0; i < n; ++i)
        _mm256_storeu_si256((__m256i *)(void *)lv[i], _mm256_andnot_si256(_mm256_castps_si256(dead), Lt[i]));
    for (int j = 0; j < 8; ++j)
        for (int i = 0; i < n; ++i) L[n * j + i] = (uint8_t)lv[i][j];
}

/* qkx on eight groups at once, one group per lane: every lane runs the
 * reference's whole sequence (first guess, then each candidate in order,
 * accepting it on the reference's test), its state (min, scale, best,
 * codes) updated under the lane's acceptance mask.  Groups of n <= 32
 * values at x + n*j, weights at w + n*j. */
AVX2 static void qkx8(int n, int nmax, const float *x, const float *w, uint8_t *L, float *scales, float *mins,
                      float rmin, float rdelta, int nstep, int use_mad) {
    __m256 xt[32], wt[32];
    __m256i Lt[32], la[32];
    const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(n));
    xt[0] = _mm256_i32gather_ps(x, idx, 4); /* n >= 1 */
    wt[0] = _mm256_i32gather_ps(w, idx, 4);
    for (int i = 1; i < n; ++i) {
        xt[i] = _mm256_i32gather_ps(x + i, idx, 4);
        wt[i] = _mm256_i32gather_ps(w + i, idx, 4);
    }
    const __m256 vzero = _mm256_setzero_ps(), vnmaxf = _mm256_set1_ps((float)nmax);
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i vnmax = _mm256_set1_epi32(nmax), izero = _mm256_setzero_si256();
    __m256 min = xt[0], max = xt[0], sum_w = wt[0];
    __m256 sum_x = _mm256_mul_ps(sum_w, xt[0]);
    for (int i = 1; i < n; ++i) {
        min = _mm256_min_ps(xt[i], min); /* x < min ? x : min */
        max = _mm256_max_ps(xt[i], max); /* x > max ? x : max */
        sum_w = _mm256_add_ps(sum_w, wt[i]);
        sum_x = _mm256_add_ps(sum_x, _mm256_mul_ps(wt[i], xt[i]));
    }
    min = _mm256_blendv_ps(min, vzero, _mm256_cmp_ps(min, vzero, _CMP_GT_OQ));
    const __m256 min0 = min;
    const __m256 dead = _mm256_cmp_ps(max, min, _CMP_LE_OQ);
    const __m256 iscale = _mm256_div_ps(vnmaxf, _mm256_sub_ps(max, min));
    __m256 scale = _mm256_div_ps(_mm256_set1_ps(1.0f), iscale);
    __m256 best = vzero;
    for (int i = 0; i < n; ++i) {
        Lt[i] = _mm256_max_epi32(izero, _mm256_min_epi32(vnmax, nearest8(_mm256_mul_ps(iscale, _mm256_sub_ps(xt[i], min)))));
        __m256 diff = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(scale, _mm256_cvtepi32_ps(Lt[i])), min), xt[i]);
        diff = use_mad ? _mm256_and_ps(diff, absmask) : _mm256_mul_ps(diff, diff);
        best = _mm256_add_ps(best, _mm256_mul_ps(wt[i], diff));
    }
    for (int is = 0; nstep >= 1 && is <= nstep; ++is) {
        const __m256 isc = _mm256_div_ps(
            _mm256_set1_ps(rmin + rdelta * (float)is + (float)nmax), _mm256_sub_ps(max, min));
        __m256 sl = vzero, sl2 = vzero, sxl = vzero;
        __m256 lf[32];
        for (int i = 0; i < n; ++i) {
            la[i] = _mm256_max_epi32(izero, _mm256_min_epi32(vnmax, nearest8(_mm256_mul_ps(isc, _mm256_sub_ps(xt[i], min)))));
            lf[i] = _mm256_cvtepi32_ps(la[i]);
            const __m256 wl = _mm256_mul_ps(wt[i], lf[i]);
            sl = _mm256_add_ps(sl, wl);
            sl2 = _mm256_add_ps(sl2, _mm256_mul_ps(wl, lf[i]));
            sxl = _mm256_add_ps(sxl, _mm256_mul_ps(wl, xt[i]));
        }
        const __m256 D = _mm256_sub_ps(_mm256_mul_ps(sum_w, sl2), _mm256_mul_ps(sl, sl));
        __m256 ts = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sum_w, sxl), _mm256_mul_ps(sum_x, sl)), D);
        __m256 tm = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sl2, sum_x), _mm256_mul_ps(sl, sxl)), D);
        const __m256 pos = _mm256_cmp_ps(tm, vzero, _CMP_GT_OQ);
        tm = _mm256_blendv_ps(tm, vzero, pos);
        ts = _mm256_blendv_ps(ts, _mm256_div_ps(sxl, sl2), pos);
        __m256 err = vzero;
        for (int i = 0; i < n; ++i) {
            __m256 diff = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(ts, lf[i]), tm), xt[i]);
            diff = use_mad ? _mm256_and_ps(diff, absmask) : _mm256_mul_ps(diff, diff);
            err = _mm256_add_ps(err, _mm256_mul_ps(wt[i], diff));
        }
        const __m256 acc = _mm256_and_ps(_mm256_cmp_ps(D, vzero, _CMP_GT_OQ), _mm256_cmp_ps(err, best, _CMP_LT_OQ));
        if (_mm256_movemask_ps(acc) == 0) continue;
        best = _mm256_blendv_ps(best, err, acc);
        scale = _mm256_blendv_ps(scale, ts, acc);
        min = _mm256_blendv_ps(min, tm, acc);
        const __m256i acci = _mm256_castps_si256(acc);
        for (int i = 0; i < n; ++i) Lt[i] = _mm256_blendv_epi8(Lt[i], la[i], acci);
    }
    /* Lanes with max <= min: the reference's early return. */
    scale = _mm256_blendv_ps(scale, vzero, dead);
    min = _mm256_blendv_ps(min, min0, dead);
    const __m256 negmin = _mm256_xor_ps(min, _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u)));
    _mm256_storeu_ps(scales, scale);
    _mm256_storeu_ps(mins, negmin);
    store_codes8(Lt, dead, n, L);
}

AVX2 static void qkxm_avx2(int nsub, int n, int nmax, const float *x, const float *w, uint8_t *L, float *scales,
                           float *mins, float rmin, float rdelta, int nstep, int use_mad) {
    int j = 0;
    for (; j + 8 <= nsub; j += 8)
        qkx8(n, nmax, x + n * j, w + n * j, L + n * j, scales + j, mins + j, rmin, rdelta, nstep, use_mad);
    _mm256_zeroupper(); /* GCC emits none under a target attribute: SSE code after this would pay for the dirty upper halves */
    for (; j < nsub; ++j)
        scales[j] = npuc_kq_fit_qkx_ref(n, nmax, x + n * j, w + n * j, L + n * j, &mins[j], rmin, rdelta, nstep,
                                        use_mad);
}

/* Loads eight groups of n values transposed (xt[i], lane j = x[n*j + i])
 * and sets *maxp to each lane's value of largest magnitude with its sign
 * (the first on ties, as the reference's scan); returns the mask of the
 * lanes whose magnitude is below EPS (the reference's "all zero" return). */
AVX2 static __m256 load_signed_amax8(const float *x, __m256i idx, int n, __m256 *xt, __m256 *maxp) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 max = _mm256_setzero_ps(), amax = _mm256_setzero_ps();
    for (int i = 0; i < n; ++i) {
        xt[i] = _mm256_i32gather_ps(x + i, idx, 4);
        const __m256 ax = _mm256_and_ps(xt[i], absmask);
        const __m256 gt = _mm256_cmp_ps(ax, amax, _CMP_GT_OQ);
        amax = _mm256_blendv_ps(amax, ax, gt);
        max = _mm256_blendv_ps(max, xt[i], gt);
    }
    *maxp = max;
    return _mm256_cmp_ps(amax, _mm256_set1_ps(EPS), _CMP_LT_OQ);
}

/* qx on eight groups at once, one group per lane (the candidates of one
 * group depend on nothing but the group: each lane runs the reference's
 * sequence, accepting under its mask).  Groups of n <= 32 at x + n*j,
 * weights qw + n*j (or x^2 when qw is NULL). */
AVX2 static void qx8(int n, int nmax, const float *x, int8_t *L, float *scales, const float *qw) {
    __m256 xt[32], wt[32], wx[32];
    __m256i Lt[32];
    const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(n));
    const __m256 vzero = _mm256_setzero_ps();
    const __m256i vlo = _mm256_set1_epi32(-nmax), vhi = _mm256_set1_epi32(nmax - 1), vn = _mm256_set1_epi32(nmax);
    __m256 max;
    const __m256 dead = load_signed_amax8(x, idx, n, xt, &max);
    for (int i = 0; i < n; ++i) {
        wt[i] = qw ? _mm256_i32gather_ps(qw + i, idx, 4) : _mm256_mul_ps(xt[i], xt[i]);
        wx[i] = _mm256_mul_ps(wt[i], xt[i]); /* the reference's w*x, then * l */
    }
    const __m256 iscale = _mm256_div_ps(_mm256_set1_ps((float)(-nmax)), max);
    __m256 slx = vzero, sl2 = vzero;
    for (int i = 0; i < n; ++i) {
        const __m256i l = _mm256_max_epi32(vlo, _mm256_min_epi32(vhi, nearest8(_mm256_mul_ps(iscale, xt[i]))));
        Lt[i] = _mm256_add_epi32(l, vn);
        const __m256 lf = _mm256_cvtepi32_ps(l);
        slx = _mm256_add_ps(slx, _mm256_mul_ps(wx[i], lf));
        sl2 = _mm256_add_ps(sl2, _mm256_mul_ps(_mm256_mul_ps(wt[i], lf), lf));
    }
    __m256 scale = _mm256_blendv_ps(_mm256_div_ps(slx, sl2), vzero, _mm256_cmp_ps(sl2, vzero, _CMP_EQ_OQ));
    __m256 best = _mm256_mul_ps(scale, slx);
    /* The 18 candidates -9..-1, 1..9 two at a time: both candidates' sums
     * in one loop (four independent chains instead of two: the loop is
     * bound by the adds' latency), then the reference's accept-if-better
     * decisions in candidate order, so the result is the one-at-a-time
     * search's bit for bit. */
    static const signed char PAIRS[9][2] = {{-9, -8}, {-7, -6}, {-5, -4}, {-3, -2}, {-1, 1},
                                            {2, 3},   {4, 5},   {6, 7},   {8, 9}};
    for (int p = 0; p < 9; ++p) {
        __m256i la[2][32];
        __m256 sx[2] = {vzero, vzero}, s2[2] = {vzero, vzero};
        __m256 isc[2];
        for (int c = 0; c < 2; ++c)
            isc[c] = _mm256_div_ps(_mm256_set1_ps(-((float)nmax + 0.1f * (float)PAIRS[p][c])), max);
        for (int i = 0; i < n; ++i) {
            la[0][i] = _mm256_max_epi32(vlo, _mm256_min_epi32(vhi, nearest8(_mm256_mul_ps(isc[0], xt[i]))));
            la[1][i] = _mm256_max_epi32(vlo, _mm256_min_epi32(vhi, nearest8(_mm256_mul_ps(isc[1], xt[i]))));
            const __m256 l0 = _mm256_cvtepi32_ps(la[0][i]), l1 = _mm256_cvtepi32_ps(la[1][i]);
            sx[0] = _mm256_add_ps(sx[0], _mm256_mul_ps(wx[i], l0));
            sx[1] = _mm256_add_ps(sx[1], _mm256_mul_ps(wx[i], l1));
            s2[0] = _mm256_add_ps(s2[0], _mm256_mul_ps(_mm256_mul_ps(wt[i], l0), l0));
            s2[1] = _mm256_add_ps(s2[1], _mm256_mul_ps(_mm256_mul_ps(wt[i], l1), l1));
        }
        for (int c = 0; c < 2; ++c) {
            const __m256 acc = _mm256_and_ps(_mm256_cmp_ps(s2[c], vzero, _CMP_GT_OQ),
                                             _mm256_cmp_ps(_mm256_mul_ps(sx[c], sx[c]), _mm256_mul_ps(best, s2[c]),
                                                           _CMP_GT_OQ));
            if (_mm256_movemask_ps(acc) == 0) continue;
            const __m256 ns = _mm256_div_ps(sx[c], s2[c]);
            scale = _mm256_blendv_ps(scale, ns, acc);
            best = _mm256_blendv_ps(best, _mm256_mul_ps(ns, sx[c]), acc);
            const __m256i acci = _mm256_castps_si256(acc);
            for (int i = 0; i < n; ++i) Lt[i] = _mm256_blendv_epi8(Lt[i], _mm256_add_epi32(la[c][i], vn), acci);
        }
    }
    scale = _mm256_blendv_ps(scale, vzero, dead);
    _mm256_storeu_ps(scales, scale);
    store_codes8(Lt, dead, n, (uint8_t *)(void *)L);
}

AVX2 static void qxm_avx2(int nsub, int n, int nmax, const float *x, int8_t *L, float *scales, const float *qw) {
    int j = 0;
    for (; j + 8 <= nsub; j += 8) qx8(n, nmax, x + n * j, L + n * j, scales + j, qw ? qw + n * j : NULL);
    _mm256_zeroupper();
    for (; j < nsub; ++j) scales[j] = npuc_kq_fit_qx_ref(n, nmax, x + n * j, L + n * j, qw ? qw + n * j : NULL);
}

/* Q3_K's reference fit (make_q3_quants with coordinate descent) on eight
 * groups of n <= 32 at once, one per lane.  A lane whose pass changed
 * nothing would change nothing in a further pass either (its state is
 * the same), so running the passes until no lane changes equals the
 * reference's per-group stop. */
AVX2 static void q38(int n, int nmax, const float *x, int8_t *L, float *scales) {
    __m256 xt[32], wx[32], wt[32];
    __m256i Lt[32];
    const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(n));
    const __m256 vzero = _mm256_setzero_ps();
    const __m256i vlo = _mm256_set1_epi32(-nmax), vhi = _mm256_set1_epi32(nmax - 1), vn = _mm256_set1_epi32(nmax);
    __m256 max;
    const __m256 dead = load_signed_amax8(x, idx, n, xt, &max);
    for (int i = 0; i < n; ++i) {
        wt[i] = _mm256_mul_ps(xt[i], xt[i]);
        wx[i] = _mm256_mul_ps(wt[i], xt[i]);
    }
    const __m256 iscale = _mm256_div_ps(_mm256_set1_ps((float)(-nmax)), max);
    __m256 slx = vzero, sl2 = vzero;
    for (int i = 0; i < n; ++i) {
        Lt[i] = _mm256_max_epi32(vlo, _mm256_min_epi32(vhi, nearest8(_mm256_mul_ps(iscale, xt[i]))));
        const __m256 lf = _mm256_cvtepi32_ps(Lt[i]);
        slx = _mm256_add_ps(slx, _mm256_mul_ps(wx[i], lf));
        sl2 = _mm256_add_ps(sl2, _mm256_mul_ps(_mm256_mul_ps(wt[i], lf), lf));
    }
    for (int itry = 0; itry < 5; ++itry) {
        __m256 changed = vzero;
        for (int i = 0; i < n; ++i) {
            const __m256 lf = _mm256_cvtepi32_ps(Lt[i]);
            __m256 nslx = _mm256_sub_ps(slx, _mm256_mul_ps(wx[i], lf));
            __m256 nsl2 = _mm256_sub_ps(sl2, _mm256_mul_ps(_mm256_mul_ps(wt[i], lf), lf));
            const __m256 c1 = _mm256_cmp_ps(nslx, vzero, _CMP_GT_OQ);
            if (_mm256_movemask_ps(c1) == 0) continue;
            const __m256i nl = _mm256_max_epi32(
                vlo, _mm256_min_epi32(vhi, nearest8(_mm256_div_ps(_mm256_mul_ps(xt[i], nsl2), nslx))));
            const __m256 c2 = _mm256_castsi256_ps(_mm256_xor_si256(_mm256_cmpeq_epi32(nl, Lt[i]), _mm256_set1_epi32(-1)));
            const __m256 nlf = _mm256_cvtepi32_ps(nl);
            nslx = _mm256_add_ps(nslx, _mm256_mul_ps(wx[i], nlf));
            nsl2 = _mm256_add_ps(nsl2, _mm256_mul_ps(_mm256_mul_ps(wt[i], nlf), nlf));
            const __m256 c3 = _mm256_and_ps(
                _mm256_cmp_ps(nsl2, vzero, _CMP_GT_OQ),
                _mm256_cmp_ps(_mm256_mul_ps(_mm256_mul_ps(nslx, nslx), sl2),
                              _mm256_mul_ps(_mm256_mul_ps(slx, slx), nsl2), _CMP_GT_OQ));
            const __m256 acc = _mm256_and_ps(_mm256_and_ps(c1, c2), c3);
            Lt[i] = _mm256_blendv_epi8(Lt[i], nl, _mm256_castps_si256(acc));
            slx = _mm256_blendv_ps(slx, nslx, acc);
            sl2 = _mm256_blendv_ps(sl2, nsl2, acc);
            changed = _mm256_or_ps(changed, acc);
        }
        if (_mm256_movemask_ps(_mm256_andnot_ps(dead, changed)) == 0) break;
    }
    for (int i = 0; i < n; ++i) Lt[i] = _mm256_add_epi32(Lt[i], vn);
    const __m256 scale = _mm256_blendv_ps(_mm256_div_ps(slx, sl2), vzero, _mm256_cmp_ps(sl2, vzero, _CMP_NGT_UQ));
    _mm256_storeu_ps(scales, _mm256_blendv_ps(scale, vzero, dead));
    store_codes8(Lt, dead, n, (uint8_t *)(void *)L);
}

AVX2 static void q3m_avx2(int nsub, int n, int nmax, const float *x, int8_t *L, float *scales) {
    int j = 0;
    for (; j + 8 <= nsub; j += 8) q38(n, nmax, x + n * j, L + n * j, scales + j);
    _mm256_zeroupper();
    for (; j < nsub; ++j) scales[j] = npuc_kq_fit_q3_ref(n, nmax, x + n * j, L + n * j);
}

/* One group at a time (the legacy types' weighted paths, whose blocks are
 * fitted one by one): the reference's searches. */
static const npuc_kq_ops AVX2_OPS = {"avx2", npuc_kq_fit_qkx_ref, npuc_kq_fit_qx_ref, qkxm_avx2, qxm_avx2, q3m_avx2};

const npuc_kq_ops *npuc_kq_ops_avx2(void) { return npuc_cpu_has(NPUC_CPU_AVX2) ? &AVX2_OPS : NULL; }

#else
const npuc_kq_ops *npuc_kq_ops_avx2(void) { return NULL; }
#endif
