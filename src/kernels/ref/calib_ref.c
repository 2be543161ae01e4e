/*
 * calib_ref.c - scalar reference of the range estimators' lane loops
 * (calib_lanes.h): the specification the SSE2 version matches bit for bit.
 * MAXPS(a, b) is a > b ? a : b and MINPS(a, b) is a < b ? a : b, which is
 * what the conditional expressions below spell out.
 */
#include "kernels/calib_lanes.h"

static void lanes_minmax_ref(const float *x, size_t nblocks, float l[8], float h[8], float z[8]) {
    for (size_t b = 0; b < nblocks; b++, x += 8) {
        for (int j = 0; j < 8; j++) {
            const float v = x[j];
            l[j] = v < l[j] ? v : l[j];
            h[j] = v > h[j] ? v : h[j];
            z[j] += v * 0.0f;
        }
    }
}

static void lanes_sqerr_ref(const float *x, size_t nblocks, const npuc_lane_q *q, float e[8],
                            const float *bnd, float cl[8], float ch[8]) {
    for (size_t b = 0; b < nblocks; b++, x += 8)
        for (int j = 0; j < 8; j++) npuc_sqerr_elem(x[j], q, bnd, &e[j], &cl[j], &ch[j]);
}

static void group_sqerr_ref(const float *x, size_t n, const npuc_lane_q *q, const float *bnd, size_t k,
                            double *out) {
    npuc_group_sqerr_lanes(lanes_sqerr_ref, x, n, q, bnd, k, out);
}

static const npuc_calib_kernel_table g_ref = {
    .name = "ref",
    .lanes_minmax = lanes_minmax_ref,
    .lanes_sqerr = lanes_sqerr_ref,
    .group_sqerr = group_sqerr_ref,
    .batch = 1,
};

const npuc_calib_kernel_table *npuc_calib_kernels_ref(void) { return &g_ref; }
