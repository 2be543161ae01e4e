/*
 * calib_sse2.c - SSE2 version of the range estimators' lane loops
 * (calib_lanes.h).  Two 4-wide registers hold the 8 lanes; every operation
 * is the packed form of the reference's scalar one (MINPS/MAXPS keep the
 * reference's "v < l ? v : l" operand order), so the bits are the same.
 * SSE2 is part of the x86-64 baseline, so no CPU check is needed.
 */
#include "kernels/calib_lanes.h"

#if defined(__SSE2__)
#include <emmintrin.h>

static void lanes_minmax_sse2(const float *x, size_t nblocks, float l[8], float h[8], float z[8]) {
    __m128 l0 = _mm_loadu_ps(l), l1 = _mm_loadu_ps(l + 4);
    __m128 h0 = _mm_loadu_ps(h), h1 = _mm_loadu_ps(h + 4);
    __m128 z0 = _mm_loadu_ps(z), z1 = _mm_loadu_ps(z + 4);
    const __m128 zero = _mm_setzero_ps();
    for (size_t b = 0; b < nblocks; b++, x += 8) {
        const __m128 v0 = _mm_loadu_ps(x), v1 = _mm_loadu_ps(x + 4);
        l0 = _mm_min_ps(v0, l0); /* v < l ? v : l */
        l1 = _mm_min_ps(v1, l1);
        h0 = _mm_max_ps(v0, h0); /* v > h ? v : h */
        h1 = _mm_max_ps(v1, h1);
        z0 = _mm_add_ps(z0, _mm_mul_ps(v0, zero));
        z1 = _mm_add_ps(z1, _mm_mul_ps(v1, zero));
    }
    _mm_storeu_ps(l, l0);
    _mm_storeu_ps(l + 4, l1);
    _mm_storeu_ps(h, h0);
    _mm_storeu_ps(h + 4, h1);
    _mm_storeu_ps(z, z0);
    _mm_storeu_ps(z + 4, z1);
}

/* The quantizer broadcast to 4 lanes. */
typedef struct lane_q4 {
    __m128 inv, sc, lo, hi, magic;
} lane_q4;

/* (deq(x) - x)^2 for 4 lanes: the reference's operations, packed. */
static inline __m128 sq_err(__m128 x, const lane_q4 *q) {
    __m128 v = _mm_min_ps(_mm_max_ps(_mm_mul_ps(x, q->inv), q->lo), q->hi);
    v = _mm_sub_ps(_mm_add_ps(v, q->magic), q->magic);
    const __m128 d = _mm_sub_ps(_mm_mul_ps(v, q->sc), x);
    return _mm_mul_ps(d, d);
}

static void lanes_sqerr_sse2(const float *x, size_t nblocks, const npuc_lane_q *q, float e[8],
                             const float *bnd, float cl[8], float ch[8]) {
    const lane_q4 q4 = {_mm_set1_ps(q->inv_scale), _mm_set1_ps(q->scale), _mm_set1_ps(q->vmin),
                        _mm_set1_ps(q->vmax), _mm_set1_ps(NPUC_RINT_MAGIC)};
    __m128 a0 = _mm_loadu_ps(e), a1 = _mm_loadu_ps(e + 4);
    if (!bnd) {
        for (size_t b = 0; b < nblocks; b++, x += 8) {
            const __m128 x0 = _mm_loadu_ps(x), x1 = _mm_loadu_ps(x + 4);
            a0 = _mm_add_ps(a0, sq_err(x0, &q4));
            a1 = _mm_add_ps(a1, sq_err(x1, &q4));
        }
    } else {
        const __m128 ba = _mm_set1_ps(bnd[0]), bb = _mm_set1_ps(bnd[1]), z = _mm_setzero_ps();
        __m128 l0 = _mm_loadu_ps(cl), l1 = _mm_loadu_ps(cl + 4);
        __m128 h0 = _mm_loadu_ps(ch), h1 = _mm_loadu_ps(ch + 4);
        for (size_t b = 0; b < nblocks; b++, x += 8) {
            const __m128 x0 = _mm_loadu_ps(x), x1 = _mm_loadu_ps(x + 4);
            a0 = _mm_add_ps(a0, sq_err(x0, &q4));
            a1 = _mm_add_ps(a1, sq_err(x1, &q4));
            const __m128 o0 = _mm_max_ps(_mm_sub_ps(ba, x0), z), o1 = _mm_max_ps(_mm_sub_ps(ba, x1), z);
            const __m128 u0 = _mm_max_ps(_mm_sub_ps(x0, bb), z), u1 = _mm_max_ps(_mm_sub_ps(x1, bb), z);
            l0 = _mm_add_ps(l0, _mm_mul_ps(o0, o0));
            l1 = _mm_add_ps(l1, _mm_mul_ps(o1, o1));
            h0 = _mm_add_ps(h0, _mm_mul_ps(u0, u0));
            h1 = _mm_add_ps(h1, _mm_mul_ps(u1, u1));
        }
        _mm_storeu_ps(cl, l0);
        _mm_storeu_ps(cl + 4, l1);
        _mm_storeu_ps(ch, h0);
        _mm_storeu_ps(ch + 4, h1);
    }
    _mm_storeu_ps(e, a0);
    _mm_storeu_ps(e + 4, a1);
}

static void group_sqerr_sse2(const float *x, size_t n, const npuc_lane_q *q, const float *bnd, size_t k,
                             double *out) {
    npuc_group_sqerr_lanes(lanes_sqerr_sse2, x, n, q, bnd, k, out);
}

static const npuc_calib_kernel_table g_sse2 = {
    .name = "sse2",
    .lanes_minmax = lanes_minmax_sse2,
    .lanes_sqerr = lanes_sqerr_sse2,
    .group_sqerr = group_sqerr_sse2,
    .batch = 1,
};

const npuc_calib_kernel_table *npuc_calib_kernels_sse2(void) { return &g_sse2; }

#else

const npuc_calib_kernel_table *npuc_calib_kernels_sse2(void) { return NULL; }

#endif
