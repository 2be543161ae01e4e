/*
 * test_gguf_kernels.c - the GGUF block quantizers (src/kernels/gguf_*):
 * every optimised table against the scalar reference, block for block,
 * and the reference against an independent transcription of ggml's
 * quantize_row_*_ref written here (the same expressions, one float
 * operation each, roundf and fabsf from libm), on odd block counts, ties,
 * signed zeros, constant and all-zero blocks, huge ranges, subnormal
 * scales, and NaN/Inf refusal at the same block index.  The driver
 * (npuc__gguf_quantize) gives the same bytes and the same refused index
 * on 1 and 2 threads and from f16/bf16 sources as from their float32
 * conversion.  (tests/cli/gguf.sh checks whole files against NumPy.)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf_format.h"
#include "kernels/gguf_kernels.h"
#include "kernels/kquant_kernels.h"
#include "testutil.h"

enum { NT = 5 };
static const int IDS[NT] = {NPUC__GGML_Q8_0, NPUC__GGML_Q4_0, NPUC__GGML_Q4_1, NPUC__GGML_Q5_0, NPUC__GGML_Q5_1};
static const size_t TSIZE[NT] = {34, 18, 20, 22, 24};

static npuc_gguf_qfn fn_of(const npuc_gguf_kernel_table *k, int t) {
    const npuc_gguf_qfn f[NT] = {k->q8_0, k->q4_0, k->q4_1, k->q5_0, k->q5_1};
    return f[t];
}

static void h16(float v, unsigned char *p, int *bad) {
    uint16_t h = npuc_f32_to_f16(v);
    if ((h & 0x7c00) == 0x7c00) *bad = 1;
    p[0] = (unsigned char)h;
    p[1] = (unsigned char)(h >> 8);
}

/* ggml's quantize_row_*_ref for one block, transcribed; returns 0, or -1
 * for a block npuc refuses (non-finite value, fp16 overflow). */
static int oracle(int t, const float *x, unsigned char *y) {
    int bad = 0;
    for (int j = 0; j < 32; j++)
        if (!isfinite(x[j])) return -1;
    if (t == 0) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / ((1 << 7) - 1), id = d ? 1.0f / d : 0.0f;
        h16(d, y, &bad);
        for (int j = 0; j < 32; j++) y[2 + j] = (unsigned char)(int8_t)roundf(x[j] * id);
    } else if (t == 1 || t == 3) {
        const int five = t == 3;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; j++)
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        const float d = max / (five ? -16 : -8), id = d ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        h16(d, y, &bad);
        unsigned char *qs = y + (five ? 6 : 2);
        for (int j = 0; j < 16; j++) {
            const float x0 = x[j] * id, x1 = x[16 + j] * id;
            const float o = five ? 16.5f : 8.5f;
            const int cap = five ? 31 : 15;
            const int a = (int8_t)(x0 + o) < cap ? (int8_t)(x0 + o) : cap;
            const int b = (int8_t)(x1 + o) < cap ? (int8_t)(x1 + o) : cap;
            qs[j] = (unsigned char)((a & 0x0f) | (b & 0x0f) << 4);
            qh |= (uint32_t)((a & 0x10) >> 4) << j | (uint32_t)((b & 0x10) >> 4) << (j + 16);
        }
        if (five) memcpy(y + 2, &qh, 4); /* little-endian x86 */
    } else {
        const int five = t == 4;
        float min = 3.402823466e+38f, max = -3.402823466e+38f;
        for (int j = 0; j < 32; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / (five ? 31 : 15), id = d ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        h16(d, y, &bad);
        h16(min, y + 2, &bad);
        unsigned char *qs = y + (five ? 8 : 4);
        for (int j = 0; j < 16; j++) {
            const float x0 = (x[j] - min) * id, x1 = (x[16 + j] - min) * id;
            int a = (uint8_t)(x0 + 0.5f), b = (uint8_t)(x1 + 0.5f);
            if (!five) {
                a = a < 15 ? a : 15;
                b = b < 15 ? b : 15;
            }
            qs[j] = (unsigned char)((a & 0x0f) | (b & 0x0f) << 4);
            qh |= (uint32_t)((a & 0x10) >> 4) << j | (uint32_t)((b & 0x10) >> 4) << (j + 16);
        }
        if (five) memcpy(y + 4, &qh, 4);
    }
    return bad ? -1 : 0;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float unif(void) { return (float)(next32() & 0xffffff) / 16777216.0f * 2.0f - 1.0f; }

/* Block number b of the edge-case set (NCASE kinds, cycled). */
#define NCASE 20
static void make_block(int kind, float *x) {
    const float scale = ldexpf(1.0f, (int)(next32() % 40) - 20);
    for (int j = 0; j < 32; j++) x[j] = unif() * scale;
    switch (kind) {
    case 0: break;                                                   /* random */
    case 1: memset(x, 0, 32 * sizeof *x); break;                     /* all zero */
    case 2: for (int j = 0; j < 32; j++) x[j] = -0.0f; break;        /* all -0 */
    case 3: for (int j = 0; j < 32; j++) x[j] = (j & 1) ? 0.0f : -0.0f; break;
    case 4: for (int j = 0; j < 32; j++) x[j] = (j & 1) ? -0.0f : 0.0f; break;
    case 5: for (int j = 0; j < 32; j++) x[j] = 3.25f; break;        /* constant */
    case 6: for (int j = 0; j < 32; j++) x[j] = -1.5f; break;
    case 7: /* Q8_0 ties: amax 127 gives d = 1, halves round away */
        for (int j = 0; j < 32; j++) x[j] = (float)((int)(next32() % 254) - 127) + 0.5f * (j & 1);
        x[5] = 127.0f;
        break;
    case 8: /* Q4_0 ties: max -8, d = 1, x + 8.5 on halves */
        for (int j = 0; j < 32; j++) x[j] = (float)((int)(next32() % 16) - 8) + 0.5f * (j & 1);
        x[9] = -8.0f;
        break;
    case 9: /* equal magnitudes of opposite signs: the first wins */
        x[3] = 2.0f * scale;
        x[20] = -2.0f * scale;
        break;
    case 10:
        x[3] = -2.0f * scale;
        x[20] = 2.0f * scale;
        break;
    case 11: /* Q4_1 ties: min 0, max 15 (d = 1), (x - 0) + 0.5 on halves */
        for (int j = 0; j < 32; j++) x[j] = (float)(next32() % 15) + 0.5f * (j & 1);
        x[0] = 0.0f;
        x[31] = 15.0f;
        break;
    case 12: x[7] = 60000.0f; break;                                 /* near fp16's max */
    case 13: x[7] = 1e7f; break;                                     /* scale overflows fp16 */
    case 14: x[0] = 1e-30f; x[1] = -3e4f; break;                     /* huge range */
    case 15: for (int j = 0; j < 32; j++) x[j] = unif() * 1e-40f; break; /* subnormal scale */
    case 16: for (int j = 0; j < 32; j++) x[j] = unif() * 3e-38f; break; /* tiny scale */
    case 17: x[next32() % 32] = NAN; break;
    case 18: x[next32() % 32] = -INFINITY; break;
    case 19: /* min -0 after a +0, max 0: the sign of the first zero decides */
        for (int j = 0; j < 32; j++) x[j] = -fabsf(x[j]);
        x[2] = 0.0f;
        x[4] = -0.0f;
        break;
    }
}

/* The reference against the oracle, and every other table against the
 * reference, on nb blocks (the refused index and every accepted block). */
static void check_tables(int nb) {
    float *x = malloc((size_t)nb * 32 * sizeof *x);
    unsigned char *r = malloc((size_t)nb * 34), *f = malloc((size_t)nb * 34), o[34];
    assert_non_null(x);
    assert_non_null(r);
    assert_non_null(f);
    const npuc_gguf_kernel_table *fast[] = {npuc_gguf_kernels_avx512(), npuc_gguf_kernels()};
    for (int t = 0; t < NT; t++) {
        for (int b = 0; b < nb; b++) make_block((b * 7 + t) % NCASE, x + 32 * b);
        size_t want = (size_t)nb;
        for (int b = nb - 1; b >= 0; b--)
            if (oracle(t, x + 32 * b, o) != 0) want = (size_t)b;
        assert_int_equal(fn_of(npuc_gguf_kernels_ref(), t)(x, r, (size_t)nb), want);
        for (int b = 0; b < nb; b++)
            if (oracle(t, x + 32 * b, o) == 0 && memcmp(o, r + TSIZE[t] * b, TSIZE[t]) != 0)
                fail_msg("type %d block %d (kind %d): the reference differs from ggml's", t, b, (b * 7 + t) % NCASE);
        for (size_t k = 0; k < sizeof fast / sizeof fast[0]; k++) {
            if (!fast[k]) continue;
            memset(f, 0xa5, (size_t)nb * TSIZE[t]);
            assert_int_equal(fn_of(fast[k], t)(x, f, (size_t)nb), want);
            for (int b = 0; b < nb; b++)
                if (oracle(t, x + 32 * b, o) == 0 && memcmp(f + TSIZE[t] * b, r + TSIZE[t] * b, TSIZE[t]) != 0)
                    fail_msg("%s type %d block %d (kind %d) differs from the reference", fast[k]->name, t, b,
                             (b * 7 + t) % NCASE);
        }
    }
    free(x);
    free(r);
    free(f);
}

static void test_tables(void **state) {
    (void)state;
    static const int NB[] = {1, 3, 7, 15, 17, 31, 33, 127, 1023};
    for (size_t i = 0; i < sizeof NB / sizeof NB[0]; i++) check_tables(NB[i]);
    if (!npuc_gguf_kernels_avx512()) print_message("(no AVX-512 on this CPU: the reference only)\n");
}

/* Random blocks by the thousand: fast == reference. */
static void test_random(void **state) {
    (void)state;
    const int nb = 20000;
    const npuc_gguf_kernel_table *k = npuc_gguf_kernels_avx512();
    if (!k) skip(); /* before any allocation: skip() returns from the test */
    float *x = malloc((size_t)nb * 32 * sizeof *x);
    unsigned char *r = malloc((size_t)nb * 34), *f = malloc((size_t)nb * 34);
    assert_non_null(x);
    assert_non_null(r);
    assert_non_null(f);
    for (int i = 0; i < nb * 32; i++) x[i] = unif() * ldexpf(1.0f, (int)((i / 32) % 30) - 15);
    for (int t = 0; t < NT; t++) {
        assert_int_equal(fn_of(npuc_gguf_kernels_ref(), t)(x, r, (size_t)nb), nb);
        assert_int_equal(fn_of(k, t)(x, f, (size_t)nb), nb);
        assert_memory_equal(f, r, (size_t)nb * TSIZE[t]);
    }
    free(x);
    free(r);
    free(f);
}

/* The driver: -j1 == -j2 (bytes and refused index), f16/bf16 sources ==
 * their float32 conversion. */
static void test_driver(void **state) {
    (void)state;
    const uint64_t nb = 16 * 256 + 77, k = nb * 32; /* enough tiles to run in parallel, odd tail */
    float *x = malloc(k * sizeof *x), *xc = malloc(k * sizeof *xc);
    uint16_t *h = malloc(k * 2);
    unsigned char *a = malloc(nb * 34), *b = malloc(nb * 34);
    assert_true(x && xc && h && a && b);
    for (uint64_t i = 0; i < k; i++) x[i] = unif() * 0.05f;
    for (int t = 0; t < NT; t++) {
        uint64_t bad1 = 0, bad2 = 0;
        assert_int_equal(npuc__gguf_quantize(IDS[t], x, NPUC_DTYPE_F32, a, k, 1, &bad1), 0);
        assert_int_equal(npuc__gguf_quantize(IDS[t], x, NPUC_DTYPE_F32, b, k, 2, &bad2), 0);
        assert_memory_equal(a, b, nb * TSIZE[t]);
        const npuc_dtype dts[] = {NPUC_DTYPE_F16, NPUC_DTYPE_BF16};
        for (int d = 0; d < 2; d++) {
            npuc_convert(h, dts[d], x, NPUC_DTYPE_F32, k);
            npuc_convert(xc, NPUC_DTYPE_F32, h, dts[d], k);
            assert_int_equal(npuc__gguf_quantize(IDS[t], xc, NPUC_DTYPE_F32, a, k, 1, &bad1), 0);
            assert_int_equal(npuc__gguf_quantize(IDS[t], h, dts[d], b, k, 2, &bad2), 0);
            assert_memory_equal(a, b, nb * TSIZE[t]);
        }
        /* Two refused blocks in different threads' halves: the first is reported. */
        x[3000 * 32 + 5] = NAN;
        x[100 * 32 + 9] = 1e9f;
        assert_int_equal(npuc__gguf_quantize(IDS[t], x, NPUC_DTYPE_F32, a, k, 1, &bad1), -1);
        assert_int_equal(npuc__gguf_quantize(IDS[t], x, NPUC_DTYPE_F32, b, k, 2, &bad2), -1);
        assert_int_equal(bad1, 100);
        assert_int_equal(bad2, 100);
        x[3000 * 32 + 5] = 0.01f;
        x[100 * 32 + 9] = 0.02f;
    }
    free(x);
    free(xc);
    free(h);
    free(a);
    free(b);
}

/* The K-quant searches: the AVX2 version's bytes equal the reference's
 * for every K type and weighted legacy type, with and without importance,
 * on heavy-tailed, tied, constant, zero and wide-range rows (ggml itself
 * is the oracle of both in test_kquant_oracle; this keeps the two equal
 * where that library is not installed). */
static void test_kquant_avx2(void **state) {
    (void)state;
    const npuc_kq_ops *a = npuc_kq_ops_avx2(), *r = npuc_kq_ops_ref();
    if (!a) {
        printf("no AVX2: only the reference K-quant searches exist here\n");
        return;
    }
    enum { N = 1024, ROWS = 24 };
    static float x[ROWS * N], imp[N];
    static unsigned char ya[N / 32 * 34], yr[N / 32 * 34];
    uint32_t s = 12345;
    for (int i = 0; i < ROWS * N; i++) {
        s = s * 1664525u + 1013904223u;
        const float u = (float)(s >> 8) / 16777216.0f - 0.5f;
        const int row = i / N, p = row % 6;
        x[i] = p == 0 ? u * u * u * 8.0f : p == 1 ? 0.0f : p == 2 ? 0.37f : p == 3 ? (float)((int)(u * 16)) * 0.25f
             : p == 4 ? u * ((i % 7) == 0 ? 300.0f : 1e-4f) : u;
    }
    for (int j = 0; j < N; j++) imp[j] = (j % 37 == 3) ? 0.0f : (float)(1 + j % 11) * 0.3f;
    const int types[] = {NPUC__GGML_Q2_K, NPUC__GGML_Q3_K, NPUC__GGML_Q4_K, NPUC__GGML_Q5_K, NPUC__GGML_Q6_K,
                         NPUC__GGML_Q4_0, NPUC__GGML_Q4_1, NPUC__GGML_Q5_0, NPUC__GGML_Q5_1};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const npuc__ggml_type *g = npuc__ggml_type_by_id((uint32_t)types[t]);
        for (int wi = 0; wi < 2; wi++) {
            if (!wi && !npuc__gguf_is_ktype(types[t])) continue; /* legacy: weighted paths only */
            for (int row = 0; row < ROWS; row++) {
                const size_t nb = N / g->blck;
                const size_t ra = npuc_kq_row_ops(a, types[t], x + row * N, ya, N, wi ? imp : NULL);
                const size_t rr = npuc_kq_row_ops(r, types[t], x + row * N, yr, N, wi ? imp : NULL);
                assert_int_equal(ra, nb);
                assert_int_equal(rr, nb);
                if (memcmp(ya, yr, nb * g->tsize) != 0) {
                    fprintf(stderr, "%s imp=%d row %d: AVX2 and reference differ\n", g->name, wi, row);
                    fail();
                }
            }
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_driver),
        cmocka_unit_test(test_kquant_avx2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
