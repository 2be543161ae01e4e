/*
 * test_scale_dtype.c - npuc__scale_round (src/codecs/scale_dtype.c), the
 * rounding behind `quantize --scale-dtype`, against values worked out by
 * hand from the IEEE half and bfloat16 layouts: round half to even, an
 * underflow raised to the smallest positive value, an overflow lowered to
 * the largest finite one, and 1/scale taken of the rounded scale; and
 * npuc__scale_round_n (the batch form) on each value, negated too (the full
 * grid's negative scales keep their sign).
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "testutil.h"

#include "codecs/codec.h"

static void check(npuc_dtype dt, float in, float want) {
    float s = in, inv = 0;
    npuc__scale_round(dt, &s, &inv);
    uint32_t a, b;
    memcpy(&a, &s, 4);
    memcpy(&b, &want, 4);
    if (a != b) fail_msg("%s: %.9g rounds to %.9g, want %.9g", npuc_dtype_name(dt), (double)in, (double)s,
                         (double)want);
    assert_true(inv == 1.0f / want);
    /* The batch form, between other values: the same bits. */
    float v[3] = {0.3f, in, -in}, iv[3] = {0, 0, 0};
    npuc__scale_round_n(dt, v, iv, 3);
    memcpy(&a, &v[1], 4);
    if (a != b) fail_msg("%s: npuc__scale_round_n: %.9g rounds to %.9g, want %.9g", npuc_dtype_name(dt), (double)in,
                         (double)v[1], (double)want);
    assert_true(iv[1] == 1.0f / want && v[2] == -want && iv[2] == -1.0f / want);
}

static void test_f16(void **state) {
    (void)state;
    check(NPUC_DTYPE_F16, 1.0f, 1.0f);
    /* 1 + 2^-11 is halfway between 1 and 1 + 2^-10: even mantissa (1) wins;
     * 1 + 3*2^-11 is halfway between 1 + 2^-10 and 1 + 2^-9: 1 + 2^-9. */
    check(NPUC_DTYPE_F16, 1.0f + ldexpf(1, -11), 1.0f);
    check(NPUC_DTYPE_F16, 1.0f + 3 * ldexpf(1, -11), 1.0f + ldexpf(1, -9));
    check(NPUC_DTYPE_F16, 0.1f, 0.0999755859375f);      /* 0x2e66 */
    check(NPUC_DTYPE_F16, ldexpf(1, -20), ldexpf(1, -20)); /* a subnormal half */
    check(NPUC_DTYPE_F16, FLT_MIN, ldexpf(1, -24));     /* underflow: the smallest subnormal */
    check(NPUC_DTYPE_F16, 1e6f, 65504.0f);              /* overflow: the largest finite */
}

static void test_bf16(void **state) {
    (void)state;
    check(NPUC_DTYPE_BF16, 1.0f, 1.0f);
    check(NPUC_DTYPE_BF16, 1.0f + ldexpf(1, -8), 1.0f);                /* tie, even */
    check(NPUC_DTYPE_BF16, 1.0f + 3 * ldexpf(1, -8), 1.0f + ldexpf(1, -6)); /* tie, up to even */
    check(NPUC_DTYPE_BF16, 0.1f, 0.10009765625f);                       /* 0x3dcd */
    check(NPUC_DTYPE_BF16, FLT_MIN, FLT_MIN);                           /* 0x0080, exact */
    check(NPUC_DTYPE_BF16, FLT_MAX, 3.38953139e38f);                    /* 0x7f7f: no inf */
}

static void test_f32_untouched(void **state) {
    (void)state;
    float s = 0.1f, inv = 7.0f;
    npuc__scale_round(NPUC_DTYPE_F32, &s, &inv);
    assert_true(s == 0.1f && inv == 7.0f);
    assert_true(npuc__scale_dtype_ok(NPUC_DTYPE_F16) && npuc__scale_dtype_ok(NPUC_DTYPE_BF16) &&
                npuc__scale_dtype_ok(NPUC_DTYPE_F32) && !npuc__scale_dtype_ok(NPUC_DTYPE_F64));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_f32_untouched),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
