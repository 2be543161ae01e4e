/*
 * test_cvt.c - the F16/BF16 widening kernels (src/kernels/cvt_kernels.h).
 *
 * The reference table is checked against a decoder written here from the
 * IEEE 754 binary16 / bfloat16 definitions (value = (-1)^s * 2^(e-15) *
 * (1 + m/1024), subnormals m * 2^-24; Inf/NaN keep sign and payload bits,
 * mantissa m in bits 13..22), for all 65536 patterns.  Every other table
 * this CPU runs is checked against the reference bit for bit (NaNs
 * included: a signalling NaN must stay signalling with its payload), over
 * all 65536 patterns at source and destination offsets of 0..3 elements,
 * and over every length 0..67 at every offset, with guard elements after
 * the end that must stay untouched.  The dispatcher's choice is checked to
 * be the fastest table available.
 */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cvt_kernels.h"

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* binary16 -> float32 bits from the definition (independent of dtype.c). */
static uint32_t f16_spec(uint16_t h) {
    const uint32_t s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    if (e == 31) return s << 31 | 0x7f800000u | m << 13;
    const double v = e == 0 ? ldexp((double)m, -24) : ldexp(1.0 + m / 1024.0, (int)e - 15);
    return bits_of((float)(s ? -v : v)); /* exact: 11 significant bits, exponent >= -24 */
}

static const npuc_cvt_kernel_table *tables(size_t *n, const npuc_cvt_kernel_table *out[3]) {
    *n = 0;
    const npuc_cvt_kernel_table *c[3] = {npuc_cvt_kernels_ref(), npuc_cvt_kernels_f16c(),
                                         npuc_cvt_kernels_avx512()};
    for (int i = 0; i < 3; i++)
        if (c[i]) out[(*n)++] = c[i];
    return out[0];
}

/* All 65536 patterns, in order, as little-endian bytes. */
static unsigned char *all_patterns(size_t off) {
    unsigned char *b = malloc(2 * (65536 + off));
    assert_non_null(b);
    for (uint32_t i = 0; i < 65536; i++) {
        b[2 * (off + i)] = (unsigned char)(i & 0xff);
        b[2 * (off + i) + 1] = (unsigned char)(i >> 8);
    }
    return b;
}

static void test_ref_matches_definition(void **state) {
    (void)state;
    const npuc_cvt_kernel_table *r = npuc_cvt_kernels_ref();
    unsigned char *src = all_patterns(0);
    float *dst = malloc(65536 * sizeof(float));
    assert_non_null(dst);
    r->f16_to_f32(dst, src, 65536);
    for (uint32_t i = 0; i < 65536; i++)
        if (bits_of(dst[i]) != f16_spec((uint16_t)i))
            fail_msg("f16 0x%04x: 0x%08x, expected 0x%08x", i, bits_of(dst[i]), f16_spec((uint16_t)i));
    r->bf16_to_f32(dst, src, 65536);
    for (uint32_t i = 0; i < 65536; i++)
        if (bits_of(dst[i]) != i << 16) fail_msg("bf16 0x%04x: 0x%08x", i, bits_of(dst[i]));
    /* A few by hand. */
    r->f16_to_f32(dst, (const unsigned char[]){0x00, 0x3c, 0x01, 0x00, 0x01, 0x7c, 0xff, 0x83}, 4);
    assert_true(dst[0] == 1.0f);
    assert_true(dst[1] == 0x1p-24f);
    assert_int_equal(bits_of(dst[2]), 0x7f802000u); /* signalling NaN, payload 1: kept */
    assert_int_equal(bits_of(dst[3]), 0xb87fc000u); /* -(1023 * 2^-24) */
    free(src);
    free(dst);
}

static void check_table(const npuc_cvt_kernel_table *t, const npuc_cvt_kernel_table *r) {
    /* Every pattern at source/destination offsets 0..3 (unaligned both). */
    float *want = malloc((65536 + 8) * sizeof(float)), *got = malloc((65536 + 8) * sizeof(float));
    assert_non_null(want);
    assert_non_null(got);
    for (int kind = 0; kind < 2; kind++)
        for (size_t off = 0; off < 4; off++) {
            unsigned char *src = all_patterns(off);
            npuc_cvt_fn fr = kind ? r->bf16_to_f32 : r->f16_to_f32;
            npuc_cvt_fn ft = kind ? t->bf16_to_f32 : t->f16_to_f32;
            fr(want, src + 2 * off, 65536);
            memset(got, 0xa5, (65536 + 8) * sizeof(float));
            ft(got + off, src + 2 * off, 65536);
            for (uint32_t i = 0; i < 65536; i++)
                if (bits_of(got[off + i]) != bits_of(want[i]))
                    fail_msg("%s %s 0x%04x (offset %zu): 0x%08x, reference 0x%08x", t->name,
                             kind ? "bf16" : "f16", i, off, bits_of(got[off + i]), bits_of(want[i]));
            for (size_t g = 0; g < off; g++) assert_int_equal(bits_of(got[g]), 0xa5a5a5a5u);
            assert_int_equal(bits_of(got[off + 65536]), 0xa5a5a5a5u);
            free(src);
        }
    /* Lengths 0..67 at offsets 0..3, a pseudo-random mix of patterns (NaNs,
     * subnormals and normals), 4 guard elements after the end. */
    uint64_t rs = 18;
    unsigned char src[2 * 80];
    for (size_t i = 0; i < sizeof src; i++) src[i] = (unsigned char)npuc_test_rand(&rs);
    src[10] = 0x01, src[11] = 0x7c; /* element 5: a signalling NaN */
    src[20] = 0x01, src[21] = 0x00; /* element 10: the smallest subnormal */
    for (int kind = 0; kind < 2; kind++)
        for (size_t off = 0; off < 4; off++)
            for (size_t n = 0; n <= 67; n++) {
                float w[80], g[80];
                npuc_cvt_fn fr = kind ? r->bf16_to_f32 : r->f16_to_f32;
                npuc_cvt_fn ft = kind ? t->bf16_to_f32 : t->f16_to_f32;
                memset(g, 0x5a, sizeof g);
                fr(w, src + 2 * off, n);
                ft(g + off, src + 2 * off, n);
                for (size_t i = 0; i < n; i++)
                    if (bits_of(g[off + i]) != bits_of(w[i]))
                        fail_msg("%s %s n=%zu off=%zu element %zu: 0x%08x != 0x%08x", t->name,
                                 kind ? "bf16" : "f16", n, off, i, bits_of(g[off + i]), bits_of(w[i]));
                for (size_t i = 0; i < off; i++) assert_int_equal(bits_of(g[i]), 0x5a5a5a5au);
                for (size_t i = off + n; i < off + n + 4; i++) assert_int_equal(bits_of(g[i]), 0x5a5a5a5au);
            }
    /* An odd byte address for the source (2-byte elements need not be aligned). */
    unsigned char *odd = malloc(2 * 65536 + 1);
    unsigned char *all = all_patterns(0);
    assert_non_null(odd);
    memcpy(odd + 1, all, 2 * 65536);
    for (int kind = 0; kind < 2; kind++) {
        (kind ? r->bf16_to_f32 : r->f16_to_f32)(want, all, 65536);
        (kind ? t->bf16_to_f32 : t->f16_to_f32)(got, odd + 1, 65536);
        assert_memory_equal(got, want, 65536 * sizeof(float));
    }
    free(odd);
    free(all);
    free(want);
    free(got);
}

static void test_every_table_matches_ref(void **state) {
    (void)state;
    const npuc_cvt_kernel_table *t[3];
    size_t n;
    const npuc_cvt_kernel_table *r = tables(&n, t);
    for (size_t i = 0; i < n; i++) check_table(t[i], r);
    print_message("cvt tables checked:");
    for (size_t i = 0; i < n; i++) print_message(" %s", t[i]->name);
    print_message("\n");
}

/* Without NPUC_FORCE_REF (main clears it) the dispatcher takes the fastest
 * table: avx512 > f16c > ref. */
static void test_dispatch_fastest(void **state) {
    (void)state;
    const npuc_cvt_kernel_table *t[3];
    size_t n;
    tables(&n, t);
    const npuc_cvt_kernel_table *want = npuc_cvt_kernels_avx512();
    if (!want) want = npuc_cvt_kernels_f16c();
    if (!want) want = npuc_cvt_kernels_ref();
    assert_ptr_equal(npuc_cvt_kernels(), want);
}

int main(void) {
    unsetenv("NPUC_FORCE_REF");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ref_matches_definition),
        cmocka_unit_test(test_every_table_matches_ref),
        cmocka_unit_test(test_dispatch_fastest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
