/*
 * test_value_counts.c - npuc_count_values against hand-worked bit patterns
 * for every float dtype, and against an exhaustive oracle (the dtype
 * decoders + fpclassify) for the 8- and 16-bit formats.
 */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Serialises n values of `width` bytes little-endian into buf + off. */
static void put_le(unsigned char *buf, size_t off, const uint64_t *v, size_t n, unsigned width) {
    for (size_t i = 0; i < n; i++)
        for (unsigned b = 0; b < width; b++)
            buf[off + i * width + b] = (unsigned char)(v[i] >> (8 * b));
}

static void expect(const npuc_value_counts *c, uint64_t nan, uint64_t inf, uint64_t sub,
                   uint64_t zero, uint64_t finite) {
    assert_int_equal(c->nan, nan);
    assert_int_equal(c->inf, inf);
    assert_int_equal(c->subnormal, sub);
    assert_int_equal(c->zero, zero);
    assert_int_equal(c->finite, finite);
}

/* Counts v[0..n) of dtype dt, stored at an odd offset to prove loads are
 * unaligned-safe. */
static npuc_value_counts count_at_odd_offset(const uint64_t *v, size_t n, npuc_dtype dt) {
    unsigned w = (unsigned)npuc_dtype_size(dt);
    unsigned char *buf = calloc(n * w + 1, 1);
    assert_non_null(buf);
    put_le(buf, 1, v, n, w);
    npuc_value_counts c;
    assert_int_equal(npuc_count_values(buf + 1, dt, n, &c), NPUC_OK);
    free(buf);
    assert_int_equal(c.nan + c.inf + c.finite, n);
    return c;
}

#define N(a) (sizeof(a) / sizeof((a)[0]))

static void test_f32(void **state) {
    (void)state;
    static const uint64_t v[] = {
        0x00000000, /* +0 */
        0x80000000, /* -0 */
        0x00000001, /* smallest subnormal */
        0x807fffff, /* largest negative subnormal */
        0x00800000, /* smallest normal: finite, not subnormal */
        0x3f800000, /* 1.0 */
        0x7f7fffff, /* FLT_MAX */
        0x7f800000, /* +Inf */
        0xff800000, /* -Inf */
        0x7fc00000, /* quiet NaN */
        0xffc00001, /* negative NaN with payload */
        0x7f800001, /* signalling NaN */
    };
    npuc_value_counts c = count_at_odd_offset(v, N(v), NPUC_DTYPE_F32);
    expect(&c, 3, 2, 2, 2, 7);
}

static void test_f16(void **state) {
    (void)state;
    static const uint64_t v[] = {
        0x0000, 0x8000,         /* zeros */
        0x0001, 0x83ff,         /* subnormals (normal numbers once widened to f32) */
        0x0400, 0x3c00, 0x7bff, /* min normal, 1.0, 65504 */
        0x7c00, 0xfc00,         /* +-Inf */
        0x7e00, 0x7c01,         /* NaNs */
    };
    npuc_value_counts c = count_at_odd_offset(v, N(v), NPUC_DTYPE_F16);
    expect(&c, 2, 2, 2, 2, 7);
}

static void test_bf16(void **state) {
    (void)state;
    static const uint64_t v[] = {
        0x0000,                 /* zero */
        0x0001, 0x8040,         /* subnormals */
        0x0080, 0x3f80, 0x7f7f, /* min normal, 1.0, max */
        0x7f80, 0xff80,         /* +-Inf */
        0x7fc0, 0x7f81,         /* NaNs */
    };
    npuc_value_counts c = count_at_odd_offset(v, N(v), NPUC_DTYPE_BF16);
    expect(&c, 2, 2, 2, 1, 6);
}

static void test_e4m3(void **state) {
    (void)state;
    static const uint64_t v[] = {
        0x00, 0x80, /* zeros */
        0x01, 0x87, /* subnormals: 2^-9 and -7*2^-9 */
        0x08,       /* min normal 2^-6 */
        0x78,       /* 256: all-ones exponent, still finite in the FN variant */
        0x7e, 0xfe, /* +-448, the largest magnitude */
        0x7f, 0xff, /* the only NaNs; there is no Inf */
    };
    npuc_value_counts c = count_at_odd_offset(v, N(v), NPUC_DTYPE_F8_E4M3);
    expect(&c, 2, 0, 2, 2, 8);
}

static void test_e5m2(void **state) {
    (void)state;
    static const uint64_t v[] = {
        0x00, 0x80,       /* zeros */
        0x01, 0x83,       /* subnormals */
        0x04, 0x7b,       /* min normal, 57344 */
        0x7c, 0xfc,       /* +-Inf */
        0x7d, 0x7e, 0xff, /* NaNs */
    };
    npuc_value_counts c = count_at_odd_offset(v, N(v), NPUC_DTYPE_F8_E5M2);
    expect(&c, 3, 2, 2, 2, 6);
}

static void test_f64(void **state) {
    (void)state;
    static const uint64_t v[] = {
        0x0000000000000000ull, 0x8000000000000000ull, /* zeros */
        0x0000000000000001ull, 0x800fffffffffffffull, /* subnormals */
        0x0010000000000000ull, 0x3ff0000000000000ull, /* min normal, 1.0 */
        0x7ff0000000000000ull, 0xfff0000000000000ull, /* +-Inf */
        0x7ff8000000000000ull, 0x7ff0000000000001ull, /* NaNs */
        /* An f32 subnormal's value is a normal f64. */
        0x36a0000000000000ull,
    };
    npuc_value_counts c = count_at_odd_offset(v, N(v), NPUC_DTYPE_F64);
    expect(&c, 2, 2, 2, 2, 7);
}

/* Every bit pattern of the small formats, classified independently through
 * the library's decoders and the C library's fpclassify on the widened value
 * (exact for these formats) plus the format's own min-normal threshold. */
static void exhaustive(npuc_dtype dt, unsigned npat, double min_normal) {
    unsigned w = (unsigned)npuc_dtype_size(dt);
    unsigned char *buf = malloc((size_t)npat * w);
    assert_non_null(buf);
    npuc_value_counts want = {0};
    for (unsigned i = 0; i < npat; i++) {
        uint64_t bits = i;
        put_le(buf, (size_t)i * w, &bits, 1, w);
        double x;
        switch (dt) {
        case NPUC_DTYPE_F16: x = npuc_f16_to_f32((uint16_t)i); break;
        case NPUC_DTYPE_BF16: x = npuc_bf16_to_f32((uint16_t)i); break;
        case NPUC_DTYPE_F8_E4M3: x = npuc_e4m3_to_f32((uint8_t)i); break;
        default: x = npuc_e5m2_to_f32((uint8_t)i); break;
        }
        if (isnan(x)) want.nan++;
        else if (isinf(x)) want.inf++;
        else {
            want.finite++;
            if (x == 0) want.zero++;
            else if (fabs(x) < min_normal) want.subnormal++;
        }
    }
    npuc_value_counts c;
    assert_int_equal(npuc_count_values(buf, dt, npat, &c), NPUC_OK);
    free(buf);
    expect(&c, want.nan, want.inf, want.subnormal, want.zero, want.finite);
}

static void test_exhaustive_small_formats(void **state) {
    (void)state;
    exhaustive(NPUC_DTYPE_F16, 65536, 0x1p-14);
    exhaustive(NPUC_DTYPE_BF16, 65536, 0x1p-126);
    exhaustive(NPUC_DTYPE_F8_E4M3, 256, 0x1p-6);
    exhaustive(NPUC_DTYPE_F8_E5M2, 256, 0x1p-14);
    /* The totals, worked by hand: E4M3 has 2 NaNs, 14 subnormals, no Inf;
     * E5M2 has 6 NaNs, 2 Infs, 6 subnormals. */
    unsigned char all[256];
    for (int i = 0; i < 256; i++) all[i] = (unsigned char)i;
    npuc_value_counts c;
    assert_int_equal(npuc_count_values(all, NPUC_DTYPE_F8_E4M3, 256, &c), NPUC_OK);
    expect(&c, 2, 0, 14, 2, 254);
    assert_int_equal(npuc_count_values(all, NPUC_DTYPE_F8_E5M2, 256, &c), NPUC_OK);
    expect(&c, 6, 2, 6, 2, 248);
}

static void test_integers(void **state) {
    (void)state;
    static const uint64_t i32[] = {0, 1, 0xffffffffu, 0};
    npuc_value_counts c = count_at_odd_offset(i32, N(i32), NPUC_DTYPE_I32);
    expect(&c, 0, 0, 0, 2, 4);
    /* Low 32 bits zero, the value is not: the whole width is compared. */
    static const uint64_t i64[] = {0x0000000100000000ull, 0, 0x7ff0000000000000ull};
    c = count_at_odd_offset(i64, N(i64), NPUC_DTYPE_I64);
    expect(&c, 0, 0, 0, 1, 3);
    static const uint64_t b[] = {0, 1, 0};
    c = count_at_odd_offset(b, N(b), NPUC_DTYPE_BOOL);
    expect(&c, 0, 0, 0, 2, 3);
    static const uint64_t u16[] = {0x7c00, 0x0001};
    c = count_at_odd_offset(u16, N(u16), NPUC_DTYPE_U16); /* F16 Inf bits, but an integer */
    expect(&c, 0, 0, 0, 0, 2);
}

static void test_args(void **state) {
    (void)state;
    npuc_value_counts c;
    memset(&c, 0xab, sizeof c);
    assert_int_equal(npuc_count_values(NULL, NPUC_DTYPE_F32, 0, &c), NPUC_OK);
    expect(&c, 0, 0, 0, 0, 0);
    memset(&c, 0xab, sizeof c);
    assert_int_equal(npuc_count_values(NULL, NPUC_DTYPE_F32, 3, &c), NPUC_ERR_ARG);
    expect(&c, 0, 0, 0, 0, 0);
    float f = 1.0f;
    assert_int_equal(npuc_count_values(&f, (npuc_dtype)99, 1, &c), NPUC_ERR_ARG);
    assert_int_equal(npuc_count_values(&f, NPUC_DTYPE_COUNT, 1, &c), NPUC_ERR_ARG);

    npuc_value_counts a = {1, 2, 3, 4, 5}, b = {10, 20, 30, 40, 50};
    npuc_value_counts_add(&a, &b);
    expect(&a, 11, 22, 33, 44, 55);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32),
        cmocka_unit_test(test_f16),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_e4m3),
        cmocka_unit_test(test_e5m2),
        cmocka_unit_test(test_f64),
        cmocka_unit_test(test_exhaustive_small_formats),
        cmocka_unit_test(test_integers),
        cmocka_unit_test(test_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
