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

typedef struct npuc_calib_kernel_table {
    const char *name; /* "ref", "sse2" */
    /* l[j] = min(x, l[j]), h[j] = max(x, h[j]) (MINPS/MAXPS semantics:
     * v < l ? v : l) and z[j] += x * 0 over the elements of lane j. */
    void (*lanes_minmax)(const float *x, size_t nblocks, float l[8], float h[8], float z[8]);
    /* e[j] += (deq(x) - x)^2; with bnd = {A, B} also cl[j] += max(A - x, 0)^2
     * and ch[j] += max(x - B, 0)^2 (cl, ch unused when bnd is NULL). */
    void (*lanes_sqerr)(const float *x, size_t nblocks, const npuc_lane_q *q, float e[8],
                        const float *bnd, float cl[8], float ch[8]);
} npuc_calib_kernel_table;

/* The table in use (kernels.c's dispatcher). */
const npuc_calib_kernel_table *npuc_calib_kernels(void);
/* The scalar reference, always available. */
const npuc_calib_kernel_table *npuc_calib_kernels_ref(void);
/* The SSE2 table where the build targets SSE2, else NULL. */
const npuc_calib_kernel_table *npuc_calib_kernels_sse2(void);

#endif
