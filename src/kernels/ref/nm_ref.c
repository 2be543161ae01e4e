/*
 * nm_ref.c - scalar reference versions of the pruning and N:M kernels
 * (nm_kernels.h is the contract), and the choice of table.
 *
 * These are the specification: plain loops, one element at a time, doubles
 * for every sum.  The AVX2 versions must zero exactly the same elements and
 * count exactly the same things.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/nm_kernels.h"

/* Folds one element into the sums: v is the input, zeroed says whether the
 * output is zero because the element was pruned. */
static inline void account(float v, int zeroed, npuc_prune_sums *s) {
    const double d = (double)v;
    s->sum_w2 += d * d;
    if (zeroed) {
        s->sum_e2 += d * d;
        const double a = d < 0 ? -d : d;
        if (a > s->max_e) s->max_e = a;
        s->zeros++;
    } else if (v == 0.0f) {
        s->zeros++;
    }
}

static uint64_t mag_split_ref(const float *x, size_t n, uint32_t lo, uint32_t hi, float *out, uint32_t *idx,
                              uint32_t *mag, size_t cap, uint64_t *nmid, uint64_t *nbad, npuc_prune_sums *s) {
    uint64_t below = 0, mid = 0, bad = 0;
    for (size_t i = 0; i < n; i++) {
        const float v = x[i];
        const uint32_t m = npuc_mag(v);
        bad += m >= NPUC_MAG_BAD;
        const int z = m < lo;
        account(v, z, s);
        out[i] = z ? 0.0f : v;
        if (z) below++;
        else if (m < hi) {
            if (mid < cap) {
                idx[mid] = (uint32_t)i;
                mag[mid] = m;
            }
            mid++;
        }
    }
    *nmid = mid;
    *nbad = bad;
    return below;
}

static uint64_t mag_hist_ref(const float *x, size_t n, int sel_shift, uint32_t sel, int bin_shift,
                             uint32_t *hist) {
    uint64_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        const uint32_t m = npuc_mag(x[i]);
        bad += m >= NPUC_MAG_BAD;
        if ((m >> sel_shift) == sel) hist[(m >> bin_shift) & 2047u]++;
    }
    return bad;
}

static uint64_t mag_count_eq_ref(const float *x, size_t n, uint32_t t) {
    uint64_t c = 0;
    for (size_t i = 0; i < n; i++) c += npuc_mag(x[i]) == t;
    return c;
}

void npuc__mag_zero_below_ref(const float *x, size_t n, uint32_t t, float *out, npuc_prune_sums *s) {
    for (size_t i = 0; i < n; i++) {
        const float v = x[i];
        const int z = npuc_mag(v) < t;
        account(v, z, s);
        out[i] = z ? 0.0f : v;
    }
}

/* One group of r values at x[0], x[stride], ...: zero the r - min(n, r)
 * smallest by (magnitude, index). */
void npuc__nm_group_ref(const float *x, float *out, size_t stride, unsigned r, unsigned n,
                        npuc_prune_sums *s) {
    uint32_t mag[16];
    float v[16];
    const unsigned drop = r > n ? r - n : 0;
    for (unsigned j = 0; j < r; j++) {
        v[j] = x[j * stride];
        mag[j] = npuc_mag(v[j]);
    }
    for (unsigned j = 0; j < r; j++) {
        unsigned rank = 0;
        for (unsigned e = 0; e < r; e++)
            rank += mag[e] < mag[j] || (e < j && mag[e] == mag[j]);
        const int z = rank < drop;
        account(v[j], z, s);
        out[j * stride] = z ? 0.0f : v[j];
    }
}

static void nm_rows_ref(const float *x, float *out, size_t ld, unsigned rows, size_t len, unsigned n,
                        npuc_prune_sums *s) {
    for (size_t l = 0; l < len; l++) npuc__nm_group_ref(x + l, out + l, ld, rows, n, s);
}

static void nm_contig_ref(const float *x, float *out, size_t ngroups, unsigned n, unsigned m,
                          npuc_prune_sums *s) {
    for (size_t g = 0; g < ngroups; g++) npuc__nm_group_ref(x + g * m, out + g * m, 1, m, n, s);
}

static const npuc_nm_kernel_table g_ref = {
    .name = "ref",
    .mag_split = mag_split_ref,
    .mag_hist = mag_hist_ref,
    .mag_count_eq = mag_count_eq_ref,
    .mag_zero_below = npuc__mag_zero_below_ref,
    .nm_rows = nm_rows_ref,
    .nm_contig = nm_contig_ref,
};

const npuc_nm_kernel_table *npuc_nm_kernels_ref(void) { return &g_ref; }
