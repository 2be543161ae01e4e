/*
 * calib_lanes.h - the inner loops of the range estimators (calib/), as
 * kernels (library-private).
 *
 * Both loops keep 8 float lanes, lane = element index mod 8, and perform
 * the same float operations in the same order per lane in every version,
 * so the scalar reference (ref/calib_ref.c) and the SSE2 version
 * (x86/calib_sse2.c) give the same bits, signed zeros included (a NaN is a
 * NaN in both, though its sign and payload may differ: the compiler may
 * commute the scalar additions, and callers only ask isnan).  They
 * cover the first 8 * nblocks elements; the caller finishes the tail with
 * the same scalar operations.  Which version runs is decided by the one
 * kernel dispatcher (kernels.c), so NPUC_FORCE_REF=1 reaches these too.
 *
 * group_sqerr is the whole exact evaluation of the MSE range search
 * (calib/range_mse.c) for a batch of candidates: its specification is
 * npuc_group_sqerr_lanes below (lanes_sqerr over blocks of
 * NPUC_SQERR_BLOCK values, the tail of a block in its lanes by the same
 * scalar operations, the 8 lanes to double in npuc_lanes_sum's order, the
 * blocks added in order), which the ref and SSE2 tables run as is; the
 * AVX-512 table (x86/calib_avx512.c) evaluates two candidates per register in
 * the two halves of a 16-lane register with the same operations per lane,
 * so every sum is the same double.
 */
#ifndef NPUC_CALIB_LANES_H
#define NPUC_CALIB_LANES_H

#include <stddef.h>

/* rint(v) for |v| <= 2^22 in the default rounding mode (round half to even):
 * adding 1.5 * 2^23 leaves no fraction bits, so the addition itself rounds. */
#define NPUC_RINT_MAGIC 12582912.0f

/* One candidate quantizer as the error loop applies it:
 * deq(x) = rint(clamp(x * inv_scale, vmin, vmax)) * scale. */
typedef struct npuc_lane_q {
    float scale, inv_scale, vmin, vmax;
} npuc_lane_q;

/* Exact sums are formed in float over blocks of this many values. */
#define NPUC_SQERR_BLOCK 256

typedef void (*npuc_lanes_sqerr_fn)(const float *x, size_t nblocks, const npuc_lane_q *q, float e[8],
                                    const float *bnd, float cl[8], float ch[8]);

typedef struct npuc_calib_kernel_table {
    const char *name; /* "ref", "sse2", "avx512" */
    /* l[j] = min(x, l[j]), h[j] = max(x, h[j]) (MINPS/MAXPS semantics:
     * v < l ? v : l) and z[j] += x * 0 over the elements of lane j. */
    void (*lanes_minmax)(const float *x, size_t nblocks, float l[8], float h[8], float z[8]);
    /* e[j] += (deq(x) - x)^2; with bnd = {A, B} also cl[j] += max(A - x, 0)^2
     * and ch[j] += max(x - B, 0)^2 (cl, ch unused when bnd is NULL). */
    void (*lanes_sqerr)(const float *x, size_t nblocks, const npuc_lane_q *q, float e[8],
                        const float *bnd, float cl[8], float ch[8]);
    /* For candidates c = 0..k-1 (quantizer q[c], bounds bnd[2c], bnd[2c+1]
     * or none when bnd is NULL): out[3c] = the sum over x[0..n) of
     * (deq(x) - x)^2, out[3c+1], out[3c+2] the clipping sums of lanes_sqerr
     * (0 without bnd), as npuc_group_sqerr_lanes forms them. */
    void (*group_sqerr)(const float *x, size_t n, const npuc_lane_q *q, const float *bnd, size_t k,
                        double *out);
    /* How many candidates group_sqerr evaluates in one pass over x (what a
     * caller may batch at no extra cost). */
    int batch;
} npuc_calib_kernel_table;

/* Sums 8 float lanes into double in a fixed order. */
static inline double npuc_lanes_sum(const float l[8]) {
    return (((double)l[0] + l[1]) + ((double)l[2] + l[3])) +
           (((double)l[4] + l[5]) + ((double)l[6] + l[7]));
}

/* One element's terms as the reference forms them: e += (deq(x) - x)^2
 * and, with bnd = {A, B}, cl += max(A - x, 0)^2, ch += max(x - B, 0)^2
 * (MAXPS(a, b) = a > b ? a : b, MINPS(a, b) = a < b ? a : b). */
static inline void npuc_sqerr_elem(float xv, const npuc_lane_q *q, const float *bnd, float *e, float *cl,
                                   float *ch) {
    float v = xv * q->inv_scale;
    v = v > q->vmin ? v : q->vmin;
    v = v < q->vmax ? v : q->vmax;
    const float r = (v + NPUC_RINT_MAGIC) - NPUC_RINT_MAGIC;
    const float d = r * q->scale - xv;
    *e += d * d;
    if (bnd) {
        float o = bnd[0] - xv, u = xv - bnd[1];
        o = o > 0.0f ? o : 0.0f;
        u = u > 0.0f ? u : 0.0f;
        *cl += o * o;
        *ch += u * u;
    }
}

/* The specification of group_sqerr, on a lane kernel f. */
static inline void npuc_group_sqerr_lanes(npuc_lanes_sqerr_fn f, const float *x, size_t n,
                                          const npuc_lane_q *q, const float *bnd, size_t k,
                                          double *out) {
    for (size_t c = 0; c < k; c++) {
        const float *bc = bnd ? bnd + 2 * c : NULL;
        double tot = 0.0, tl = 0.0, th = 0.0;
        for (size_t i0 = 0; i0 < n; i0 += NPUC_SQERR_BLOCK) {
            const size_t m = n - i0 < NPUC_SQERR_BLOCK ? n - i0 : NPUC_SQERR_BLOCK;
            const float *xb = x + i0;
            float e[8] = {0}, cl[8] = {0}, ch[8] = {0};
            f(xb, m / 8, &q[c], e, bc, cl, ch);
            /* The tail, by the same operations, in its lanes. */
            for (size_t i = m / 8 * 8; i < m; i++)
                npuc_sqerr_elem(xb[i], &q[c], bc, &e[i & 7], &cl[i & 7], &ch[i & 7]);
            tot += npuc_lanes_sum(e);
            if (bc) {
                tl += npuc_lanes_sum(cl);
                th += npuc_lanes_sum(ch);
            }
        }
        out[3 * c] = tot;
        out[3 * c + 1] = tl;
        out[3 * c + 2] = th;
    }
}

/* The table in use (kernels.c's dispatcher). */
const npuc_calib_kernel_table *npuc_calib_kernels(void);
/* The scalar reference, always available. */
const npuc_calib_kernel_table *npuc_calib_kernels_ref(void);
/* The SSE2 table where the build targets SSE2, else NULL. */
const npuc_calib_kernel_table *npuc_calib_kernels_sse2(void);
/* The AVX-512 table (AVX2 lane loops, up to four candidates per pass in
 * group_sqerr) when the CPU has AVX-512F and DQ, else NULL. */
const npuc_calib_kernel_table *npuc_calib_kernels_avx512(void);

#endif
