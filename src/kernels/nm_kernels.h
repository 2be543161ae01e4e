/*
 * nm_kernels.h - the kernels behind magnitude pruning and N:M sparsity
 * (library-private).
 *
 * Everything here works on the *magnitude bits* of a float32 value: its bit
 * pattern with the sign cleared, `mag(x) = bits(x) & 0x7fffffff`.  For finite
 * floats, |a| < |b| exactly when mag(a) < mag(b) as unsigned integers, so
 * ordering by magnitude needs no float compare, treats -0 and +0 alike, and
 * a histogram over the high bits of mag is a histogram over |x| on a
 * logarithmic-ish scale.  mag >= 0x7f800000 marks NaN and +-Inf
 * (NPUC_MAG_BAD).
 *
 * Ties are broken by index everywhere: among equal magnitudes the element
 * with the lower index is zeroed first.  Element j of a group of r values
 * (r <= m) is zeroed by N:M exactly when its rank
 *     rank_j = #{e : mag_e < mag_j} + #{e < j : mag_e == mag_j}
 * is below r - min(n, r): the r - min(n, r) smallest by (magnitude, index).
 * A short group (r < m, the tail of an input axis that m does not divide)
 * behaves as if padded with zeros: at most n of its r values are kept.
 *
 * Every kernel has a scalar version (ref/nm_ref.c, the specification) and
 * may have an AVX2 version (x86/nm_avx2.c) with the same signature.  Integer
 * results (counts, histograms, indices, which elements are zeroed, the
 * output floats) are bit-identical between versions.  The sums in
 * npuc_prune_sums are not: the reference adds every x^2 in double, the AVX2
 * versions square and add in float lanes for blocks of 256 elements and add
 * the block sums in double, so they agree within 2e-6 relative (the terms
 * are non-negative; NPUC_SUMS_RTOL), except that squares below FLT_MIN
 * (|x| < 1.1e-19) count as 0.  npuc_nm_kernels() picks a table once;
 * NPUC_FORCE_REF=1 forces the reference.  Kernels are single-threaded over
 * the range they are given; the pass drivers split work into fixed chunks
 * and add per-chunk results in chunk order, so results never depend on the
 * thread count.
 */
#ifndef NPUC_NM_KERNELS_H
#define NPUC_NM_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define NPUC_MAG_BAD 0x7f800000u

/* How far the SIMD kernels' sums may be from the reference's, relative. */
#define NPUC_SUMS_RTOL 2e-6

static inline uint32_t npuc_mag(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u & 0x7fffffffu;
}

/* What zeroing cost, over the elements one call saw. */
typedef struct npuc_prune_sums {
    double sum_w2;   /* sum of x^2 over every element */
    double sum_e2;   /* sum of x^2 over the elements set to zero */
    double max_e;    /* max |x| over the elements set to zero */
    uint64_t zeros;  /* elements of the output equal to zero (either sign) */
} npuc_prune_sums;

/* a += b, in that order. */
static inline void npuc_prune_sums_add(npuc_prune_sums *a, const npuc_prune_sums *b) {
    a->sum_w2 += b->sum_w2;
    a->sum_e2 += b->sum_e2;
    if (b->max_e > a->max_e) a->max_e = b->max_e;
    a->zeros += b->zeros;
}

typedef struct npuc_nm_kernel_table {
    const char *name; /* "ref", "avx2" */

    /* The one pass of the sampled-bracket selection: writes
     * out[i] = mag(x[i]) < lo ? +0.0f : x[i] and returns how many elements
     * have mag < lo; stores the indices (relative to x) and magnitudes of the
     * elements with lo <= mag < hi in idx[] and mag[], in increasing index
     * order, as long as fewer than cap have been stored, and counts all of
     * them in *nmid (which may end above cap); counts mag >= NPUC_MAG_BAD in
     * *nbad; adds the sums of the zeroing into *s.  Requires lo <= hi; out
     * must not overlap x. */
    uint64_t (*mag_split)(const float *x, size_t n, uint32_t lo, uint32_t hi, float *out, uint32_t *idx,
                          uint32_t *mag, size_t cap, uint64_t *nmid, uint64_t *nbad, npuc_prune_sums *s);

    /* One level of the radix selection: for every element with
     * (mag >> sel_shift) == sel, hist[(mag >> bin_shift) & 2047] += 1
     * (sel_shift 31 selects every element).  Returns the count of
     * mag >= NPUC_MAG_BAD among all elements. */
    uint64_t (*mag_hist)(const float *x, size_t n, int sel_shift, uint32_t sel, int bin_shift,
                         uint32_t *hist);

    /* Number of elements with mag == t. */
    uint64_t (*mag_count_eq)(const float *x, size_t n, uint32_t t);

    /* out[i] = mag(x[i]) < t ? +0.0f : x[i] (bit-exact copy otherwise);
     * adds the sums into *s.  out may equal x. */
    void (*mag_zero_below)(const float *x, size_t n, uint32_t t, float *out, npuc_prune_sums *s);

    /* N:M over rows: for each l < len, the rows values x[r*ld + l]
     * (r < rows, 1 <= rows <= m <= 16) form one group; the group's zeroed
     * elements (see above, with m implied by nothing but rows: a group has
     * `rows` real values) are written as +0.0f to out[r*ld + l], the others
     * copied.  n is the values kept per full group; adds the sums. */
    void (*nm_rows)(const float *x, float *out, size_t ld, unsigned rows, size_t len, unsigned n,
                    npuc_prune_sums *s);

    /* N:M over ngroups consecutive groups of m values (x[g*m + j]),
     * 1 <= n < m <= 16. */
    void (*nm_contig)(const float *x, float *out, size_t ngroups, unsigned n, unsigned m,
                      npuc_prune_sums *s);
} npuc_nm_kernel_table;

/* The table in use (chosen once; thread-safe after the first call). */
const npuc_nm_kernel_table *npuc_nm_kernels(void);
/* The scalar reference table. */
const npuc_nm_kernel_table *npuc_nm_kernels_ref(void);
/* The AVX2 table when the CPU and the build support it, else NULL. */
const npuc_nm_kernel_table *npuc_nm_kernels_avx2(void);

/* Scalar helpers the AVX2 kernels finish their tails with. */
void npuc__nm_group_ref(const float *x, float *out, size_t stride, unsigned r, unsigned n,
                        npuc_prune_sums *s);
void npuc__mag_zero_below_ref(const float *x, size_t n, uint32_t t, float *out, npuc_prune_sums *s);

#endif
