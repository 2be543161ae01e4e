/*
 * qk_ref.c - the scalar reference kernels (the specification the optimised
 * kernels are tested against), the qsums combiner and the bit packing of
 * narrow codes.
 *
 * The reference loops go element by element in index order and accumulate
 * the error sums of one call in double from zero, then add them into the
 * caller's npuc_qsums, so a call's contribution does not depend on what the
 * accumulator already held.  The per-element steps live in qk_scalar.h and
 * are shared with the tails of the SIMD kernels.
 */
#include <string.h>

#include "kernels/npuc_kernels.h"
#include "kernels/qk_grid.h"
#include "kernels/qk_scalar.h"

void npuc_qsums_add(npuc_qsums *a, const npuc_qsums *b) {
    a->sum_w2 += b->sum_w2;
    a->sum_e2 += b->sum_e2;
    a->sum_wd += b->sum_wd;
    a->sum_d2 += b->sum_d2;
    a->max_abs = b->max_abs > a->max_abs ? b->max_abs : a->max_abs;
    a->clipped += b->clipped;
}

/* A zero minimum or maximum is returned as +0: which signed zero a min/max
 * meets first depends on the visiting order, and the SIMD versions visit in
 * a different order, so canonicalising keeps every version bit-identical. */
static uint64_t minmax_ref(const float *x, size_t n, float *lo, float *hi) {
    float l = INFINITY, h = -INFINITY;
    uint64_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += (uint64_t)npuc_qk_minmax_elem(x[i], &l, &h);
    if (bad == n) l = h = 0.0f;
    *lo = l == 0.0f ? 0.0f : l;
    *hi = h == 0.0f ? 0.0f : h;
    return bad;
}

static uint64_t minmax_groups_ref(const float *x, size_t ngroups, size_t G, float *lo, float *hi) {
    uint64_t bad = 0;
    for (size_t g = 0; g < ngroups; g++) bad += minmax_ref(x + g * G, G, &lo[g], &hi[g]);
    return bad;
}

static void range_params_ref(const float *lo, const float *hi, size_t n, int bits, int symmetric, int full,
                             float *scale, float *inv, int32_t *zp) {
    for (size_t i = 0; i < n; i++) npuc_qk_range_params(lo[i], hi[i], bits, symmetric, full, &scale[i], &inv[i], &zp[i]);
}

/* Each column is folded over the rows in row order, which the SIMD version
 * keeps too (its lanes are columns), so no zero canonicalisation is needed. */
static uint64_t minmax_cols_ref(const float *x, size_t rows, size_t cols, size_t ld, float *lo,
                                float *hi) {
    uint64_t bad = 0;
    for (size_t r = 0; r < rows; r++) {
        const float *row = x + r * ld;
        for (size_t c = 0; c < cols; c++) bad += (uint64_t)npuc_qk_minmax_elem(row[c], &lo[c], &hi[c]);
    }
    return bad;
}

static void quant_run_ref(const float *x, size_t n, float scale, float inv_scale, int32_t zp,
                          int32_t qmin, int32_t qmax, uint8_t *codes, float *deq, npuc_qsums *s) {
    npuc_qsums acc = {0};
    for (size_t i = 0; i < n; i++) {
        float d;
        codes[i] = npuc_qk_elem(x[i], scale, inv_scale, zp, qmin, qmax, &d, &acc);
        if (deq) deq[i] = d;
    }
    npuc_qsums_add(s, &acc);
}

/* The reference ignores the hints. */
static void quant_run_hinted_ref(const float *x, size_t n, float scale, float inv_scale, int32_t zp,
                                 int32_t qmin, int32_t qmax, uint8_t *codes, float *deq,
                                 npuc_qsums *s, const npuc_qhint *h) {
    (void)h;
    quant_run_ref(x, n, scale, inv_scale, zp, qmin, qmax, codes, deq, s);
}

static void quant_groups_ref(const float *x, size_t ngroups, size_t G, const float *scale,
                             const float *inv_scale, const int32_t *zp, int32_t qmin, int32_t qmax,
                             uint8_t *codes, float *deq, npuc_qsums *s, const npuc_qhint *h) {
    (void)h;
    for (size_t g = 0; g < ngroups; g++)
        quant_run_ref(x + g * G, G, scale[g], inv_scale[g], zp[g], qmin, qmax, codes + g * G,
                      deq ? deq + g * G : NULL, s);
}

static void quant_vec_ref(const float *x, size_t n, const float *scale, const float *inv_scale,
                          const int32_t *zp, int32_t qmin, int32_t qmax, uint8_t *codes, float *deq,
                          npuc_qsums *s) {
    npuc_qsums acc = {0};
    for (size_t i = 0; i < n; i++) {
        float d;
        codes[i] = npuc_qk_elem(x[i], scale[i], inv_scale[i], zp[i], qmin, qmax, &d, &acc);
        if (deq) deq[i] = d;
    }
    npuc_qsums_add(s, &acc);
}

static void quant_rows_ref(const float *x, size_t rows, size_t cols, size_t ld, const float *scale,
                           const float *inv_scale, const int32_t *zp, int32_t qmin, int32_t qmax,
                           uint8_t *codes, float *deq, npuc_qsums *s) {
    for (size_t r = 0; r < rows; r++)
        quant_vec_ref(x + r * ld, cols, scale, inv_scale, zp, qmin, qmax, codes + r * ld,
                      deq ? deq + r * ld : NULL, s);
}

static const npuc_kernel_table g_ref = {
    .name = "ref",
    .minmax = minmax_ref,
    .minmax_groups = minmax_groups_ref,
    .range_params = range_params_ref,
    .minmax_cols = minmax_cols_ref,
    .quant_run = quant_run_ref,
    .quant_run_hinted = quant_run_hinted_ref,
    .quant_groups = quant_groups_ref,
    .quant_vec = quant_vec_ref,
    .quant_rows = quant_rows_ref,
    .pack_bits = npuc_pack_bits,
};

const npuc_kernel_table *npuc_kernels_ref(void) { return &g_ref; }

/* ------------------------------------------------------------------ packing
 *
 * Widths outside 1..8 are a caller bug with no sensible output: the size is
 * 0 and pack/unpack write nothing.  The size is computed per group of eight
 * codes (eight codes fill exactly `bits` bytes) so that n * bits cannot
 * overflow. */

uint64_t npuc_packed_size(uint64_t n, int bits) {
    if (bits < 1 || bits > 8) return 0;
    const uint64_t b = (uint64_t)bits;
    return n / 8 * b + (n % 8 * b + 7) / 8;
}

/* The specification: one code at a time through a bit accumulator.  Packs
 * codes[0..n) into out starting at a byte boundary. */
static void pack_bits_serial(const uint8_t *codes, size_t n, int bits, uint8_t *out) {
    const uint32_t mask = (1u << bits) - 1u;
    uint32_t acc = 0; /* pending bits, LSB first; never more than 7 + 8 */
    int nacc = 0;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        acc |= ((uint32_t)codes[i] & mask) << nacc;
        nacc += bits;
        if (nacc >= 8) {
            out[o++] = (uint8_t)acc;
            acc >>= 8;
            nacc -= 8;
        }
    }
    if (nacc > 0) out[o] = (uint8_t)acc;
}

/* Eight codes as one 64-bit word, code k in byte k (a little-endian load). */
static uint64_t load8_le(const uint8_t *c) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t w;
    memcpy(&w, c, 8);
    return w;
#else
    uint64_t w = 0;
    for (int k = 0; k < 8; k++) w |= (uint64_t)c[k] << (8 * k);
    return w;
#endif
}

/* Eight codes fill exactly `bits` bytes, so the stream splits into groups of
 * eight that start on byte boundaries: the bulk is packed a group at a time
 * from one 64-bit load (2 and 4 bits: the fields merged pairwise by shifts
 * and masks, SWAR; other widths: each field shifted into place), stored
 * `bits` bytes at a time, least significant first, and the tail of fewer
 * than eight codes by the serial loop.  The bytes are pack_bits_serial's
 * (test_qkernels compares them with a packer that goes bit by bit). */
void npuc_pack_bits(const uint8_t *codes, size_t n, int bits, uint8_t *out) {
    if (bits < 1 || bits > 8) return;
    if (bits == 8) {
        if (n) memcpy(out, codes, n);
        return;
    }
    const size_t groups = n / 8;
    const uint64_t mask = (1u << bits) - 1u;
    for (size_t g = 0; g < groups; g++) {
        uint64_t w = load8_le(codes + 8 * g), p = 0;
        if (bits == 4) {
            w &= 0x0F0F0F0F0F0F0F0Full;
            w = (w | w >> 4) & 0x00FF00FF00FF00FFull;  /* byte 2j: c[2j] | c[2j+1] << 4 */
            w = (w | w >> 8) & 0x0000FFFF0000FFFFull;
            p = (w | w >> 16) & 0xFFFFFFFFull;
        } else if (bits == 2) {
            w &= 0x0303030303030303ull;
            w = (w | w >> 6) & 0x000F000F000F000Full;  /* byte 2j: c[2j] | c[2j+1] << 2 */
            w = (w | w >> 12) & 0x000000FF000000FFull; /* byte 4j: four fields */
            p = (w | w >> 24) & 0xFFFFull;
        } else {
            for (int k = 0; k < 8; k++) p |= (w >> (8 * k) & mask) << (k * bits);
        }
        uint8_t *o = out + g * (size_t)bits;
        for (int b = 0; b < bits; b++) o[b] = (uint8_t)(p >> (8 * b));
    }
    pack_bits_serial(codes + 8 * groups, n % 8, bits, out + groups * (size_t)bits);
}

void npuc_unpack_bits(const uint8_t *in, size_t n, int bits, int is_signed, uint8_t *codes) {
    if (bits < 1 || bits > 8) return;
    if (bits == 8) {
        if (n) memcpy(codes, in, n);
        return;
    }
    const uint32_t mask = (1u << bits) - 1u;
    const uint32_t sign = is_signed ? 1u << (bits - 1) : 0u;
    uint32_t acc = 0;
    int nacc = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (nacc < bits) {
            acc |= (uint32_t)in[k++] << nacc;
            nacc += 8;
        }
        const uint32_t v = acc & mask;
        acc >>= bits;
        nacc -= bits;
        /* Sign extension: fields with the top bit set get every higher bit. */
        codes[i] = (uint8_t)(v & sign ? v | ~mask : v);
    }
}
