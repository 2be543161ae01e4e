/*
 * gguf_quant.c - ggml's type traits and the scalar codecs of its legacy
 * 32-element block types, written from the block definitions
 * (ggml-common.h) and the reference quantizers' contract: "reference
 * implementation for deterministic creation of model files".
 *
 * Block layouts (little-endian; d and m are IEEE fp16):
 *   Q8_0  34 bytes: d, int8 qs[32]                  x = qs[j] * d
 *   Q4_0  18 bytes: d, qs[16]                       x = (nibble - 8) * d
 *   Q4_1  20 bytes: d, m, qs[16]                    x = nibble * d + m
 *   Q5_0  22 bytes: d, qh[4], qs[16]                x = (nibble | bit << 4) - 16) * d
 *   Q5_1  24 bytes: d, m, qh[4], qs[16]             x = (nibble | bit << 4) * d + m
 * In the 4- and 5-bit types byte qs[j] holds element j in its low nibble
 * and element j + 16 in its high one; the 32-bit word qh holds the fifth
 * bit of element j at bit j.
 *
 * The quantizers make the reference's choices, which decide every byte:
 *   - Q8_0: d = amax / 127, q = roundf(x / d) computed as x * (1/d): round
 *     half away from zero, not to even.
 *   - Q4_0 / Q5_0: the scale comes from the element of largest magnitude
 *     with its sign (the first one on ties), d = max / -8 (-16), and
 *     q = min(15 (31), trunc(x * (1/d) + 8.5 (16.5))): the +0.5 offset and
 *     truncation make a half round up.
 *   - Q4_1 / Q5_1: d = (max - min) / 15 (31), m = min, q = trunc((x - min) *
 *     (1/d) + 0.5), capped at 15 for Q4_1 only, as the reference does.
 *   - 1/d is taken from the float32 d, not from its fp16 rounding, and d = 0
 *     (an all-zero or constant block) uses 1/d = 0.
 *   - fp16 conversion rounds to nearest even (npuc_f32_to_f16, the same
 *     rounding as ggml's GGML_FP32_TO_FP16).
 * Every operation is a separate float32 operation: the library is built as
 * ISO C11 (-std=c11, under which GCC does not contract a * b + c into an
 * FMA) for baseline x86-64, so no multiply-add is fused.  A scale or minimum that overflows
 * fp16 is refused (ggml would store inf and its dequantization would give
 * NaN/inf).
 */
#include <math.h>
#include <string.h>
#if defined(_OPENMP)
#include <omp.h>
#endif

#include "gguf_format.h"
#include "kernels/qk_grid.h"

static const npuc__ggml_type TYPES[] = {
    {NPUC__GGML_F32, "F32", 1, 4, NPUC_DTYPE_F32, 1},
    {NPUC__GGML_F16, "F16", 1, 2, NPUC_DTYPE_F16, 1},
    {NPUC__GGML_Q4_0, "Q4_0", 32, 18, NPUC_DTYPE_F32, 1},
    {NPUC__GGML_Q4_1, "Q4_1", 32, 20, NPUC_DTYPE_F32, 1},
    {NPUC__GGML_Q5_0, "Q5_0", 32, 22, NPUC_DTYPE_F32, 1},
    {NPUC__GGML_Q5_1, "Q5_1", 32, 24, NPUC_DTYPE_F32, 1},
    {NPUC__GGML_Q8_0, "Q8_0", 32, 34, NPUC_DTYPE_F32, 1},
    {9, "Q8_1", 0, 0, NPUC_DTYPE_F32, 0},
    {10, "Q2_K", 0, 0, NPUC_DTYPE_F32, 0},
    {11, "Q3_K", 0, 0, NPUC_DTYPE_F32, 0},
    {12, "Q4_K", 0, 0, NPUC_DTYPE_F32, 0},
    {13, "Q5_K", 0, 0, NPUC_DTYPE_F32, 0},
    {14, "Q6_K", 0, 0, NPUC_DTYPE_F32, 0},
    {15, "Q8_K", 0, 0, NPUC_DTYPE_F32, 0},
    {16, "IQ2_XXS", 0, 0, NPUC_DTYPE_F32, 0},
    {17, "IQ2_XS", 0, 0, NPUC_DTYPE_F32, 0},
    {18, "IQ3_XXS", 0, 0, NPUC_DTYPE_F32, 0},
    {19, "IQ1_S", 0, 0, NPUC_DTYPE_F32, 0},
    {20, "IQ4_NL", 0, 0, NPUC_DTYPE_F32, 0},
    {21, "IQ3_S", 0, 0, NPUC_DTYPE_F32, 0},
    {22, "IQ2_S", 0, 0, NPUC_DTYPE_F32, 0},
    {23, "IQ4_XS", 0, 0, NPUC_DTYPE_F32, 0},
    {NPUC__GGML_I8, "I8", 1, 1, NPUC_DTYPE_I8, 1},
    {NPUC__GGML_I16, "I16", 1, 2, NPUC_DTYPE_I16, 1},
    {NPUC__GGML_I32, "I32", 1, 4, NPUC_DTYPE_I32, 1},
    {NPUC__GGML_I64, "I64", 1, 8, NPUC_DTYPE_I64, 1},
    {NPUC__GGML_F64, "F64", 1, 8, NPUC_DTYPE_F64, 1},
    {29, "IQ1_M", 0, 0, NPUC_DTYPE_F32, 0},
    {NPUC__GGML_BF16, "BF16", 1, 2, NPUC_DTYPE_BF16, 1},
    {34, "TQ1_0", 0, 0, NPUC_DTYPE_F32, 0},
    {35, "TQ2_0", 0, 0, NPUC_DTYPE_F32, 0},
    {39, "MXFP4", 0, 0, NPUC_DTYPE_F32, 0},
};

const npuc__ggml_type *npuc__ggml_type_by_id(uint32_t id) {
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
        if ((uint32_t)TYPES[i].id == id) return &TYPES[i];
    return NULL;
}

int npuc__gguf_nbytes(const npuc__ggml_type *t, uint64_t row, uint64_t numel, uint64_t *nbytes) {
    if (!t->known || t->blck == 0) return -1;
    if (row % t->blck != 0 && numel != 0) return -1;
    return npuc_mul_overflow(numel / t->blck, t->tsize, nbytes) ? -1 : 0;
}

/* fp16 of v, or -1 when it is not finite in fp16. */
static int half(float v, unsigned char *dst) {
    uint16_t h = npuc_f32_to_f16(v);
    if ((h & 0x7c00) == 0x7c00) return -1;
    dst[0] = (unsigned char)(h & 0xff);
    dst[1] = (unsigned char)(h >> 8);
    return 0;
}

static float unhalf(const unsigned char *p) { return npuc_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* roundf(v) (half away from zero) for a finite |v| < 2^23, inline so the
 * loop vectorizes: v - trunc(v) is exact there. */
static inline int round_away(float v) {
    const int r = (int)v;
    const float f = v - (float)r;
    return r + (f >= 0.5f) - (f <= -0.5f);
}

static int q8_0(const float *x, unsigned char *b) {
    float amax = 0.0f; /* the values are finite (the writer checks): max, not fmaxf */
    for (int j = 0; j < 32; j++) {
        const float a = fabsf(x[j]);
        amax = a > amax ? a : amax;
    }
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    if (half(d, b) != 0) return -1;
    if (isinf(id)) { /* a subnormal d: x * id leaves round_away's range; as ggml computes it */
        for (int j = 0; j < 32; j++) b[2 + j] = (unsigned char)(int8_t)(int)roundf(x[j] * id);
        return 0;
    }
    for (int j = 0; j < 32; j++) {
        const float x0 = x[j] * id;
        b[2 + j] = (unsigned char)(int8_t)round_away(x0);
    }
    return 0;
}

/* Q4_0 (five = 0) and Q5_0 (five = 1). */
static int q_0(const float *x, unsigned char *b, int five) {
    /* The full grid's scale, shared with npuc quantize --grid full. */
    const float d = npuc_qk_full_scale(npuc_qk_signed_max(x, 32), five ? 5 : 4);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const float off = five ? 16.5f : 8.5f;
    const int cap = five ? 31 : 15;
    unsigned char *qs = b + (five ? 6 : 2);
    uint32_t qh = 0;
    if (half(d, b) != 0) return -1;
    for (int j = 0; j < 16; j++) {
        const float x0 = x[j] * id, x1 = x[16 + j] * id;
        int q0 = (int8_t)(int)(x0 + off), q1 = (int8_t)(int)(x1 + off);
        q0 = q0 < cap ? q0 : cap;
        q1 = q1 < cap ? q1 : cap;
        qs[j] = (unsigned char)((q0 & 0x0f) | (q1 & 0x0f) << 4);
        qh |= (uint32_t)((q0 >> 4) & 1) << j | (uint32_t)((q1 >> 4) & 1) << (j + 16);
    }
    if (five) put_u32(b + 2, qh);
    return 0;
}

/* Q4_1 (five = 0) and Q5_1 (five = 1); min and max start as the
 * reference's (FLT_MAX, -FLT_MAX), which only matters for NaN, refused
 * before.  Q5_1's code is not capped at 31, as in the reference. */
static int q_1(const float *x, unsigned char *b, int five) {
    float min = 3.40282347e+38f, max = -3.40282347e+38f;
    for (int j = 0; j < 32; j++) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / (five ? 31 : 15);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    unsigned char *qs = b + (five ? 8 : 4);
    uint32_t qh = 0;
    if (half(d, b) != 0 || half(min, b + 2) != 0) return -1;
    for (int j = 0; j < 16; j++) {
        const float x0 = (x[j] - min) * id, x1 = (x[16 + j] - min) * id;
        int q0 = (uint8_t)(int)(x0 + 0.5f), q1 = (uint8_t)(int)(x1 + 0.5f);
        if (!five) {
            q0 = q0 < 15 ? q0 : 15;
            q1 = q1 < 15 ? q1 : 15;
        }
        qs[j] = (unsigned char)((q0 & 0x0f) | (q1 & 0x0f) << 4);
        qh |= (uint32_t)((q0 >> 4) & 1) << j | (uint32_t)((q1 >> 4) & 1) << (j + 16);
    }
    if (five) put_u32(b + 4, qh);
    return 0;
}

static int q4_0(const float *x, unsigned char *b) { return q_0(x, b, 0); }
static int q5_0(const float *x, unsigned char *b) { return q_0(x, b, 1); }
static int q4_1(const float *x, unsigned char *b) { return q_1(x, b, 0); }
static int q5_1(const float *x, unsigned char *b) { return q_1(x, b, 1); }

int npuc__gguf_quantize(int id, const float *x, void *blocks, uint64_t k, int nth, uint64_t *bad_block) {
    const npuc__ggml_type *t = npuc__ggml_type_by_id((uint32_t)id);
    int (*fn)(const float *, unsigned char *) = id == NPUC__GGML_Q8_0   ? q8_0
                                                : id == NPUC__GGML_Q4_0 ? q4_0
                                                : id == NPUC__GGML_Q4_1 ? q4_1
                                                : id == NPUC__GGML_Q5_0 ? q5_0
                                                : id == NPUC__GGML_Q5_1 ? q5_1
                                                                        : NULL;
    if (!fn || !t) return -1;
    unsigned char *b = blocks;
    const int64_t nb = (int64_t)(k / 32);
    uint64_t first_bad = UINT64_MAX;
#if defined(_OPENMP)
    if (nth <= 0) nth = omp_get_max_threads();
#else
    (void)nth;
#endif
    /* Blocks are independent: any split gives the same bytes, and the
     * smallest failing index is the same whatever the thread count. */
#pragma omp parallel for schedule(static) num_threads(nth) reduction(min : first_bad) if (nb >= 4096)
    for (int64_t i = 0; i < nb; i++)
        if (fn(x + 32 * i, b + t->tsize * (uint64_t)i) != 0 && (uint64_t)i < first_bad) first_bad = (uint64_t)i;
    if (first_bad != UINT64_MAX) {
        *bad_block = first_bad;
        return -1;
    }
    return 0;
}

void npuc__gguf_dequantize(int id, const void *blocks, float *y, uint64_t k) {
    const unsigned char *b = blocks;
    const npuc__ggml_type *t = npuc__ggml_type_by_id((uint32_t)id);
    for (uint64_t i = 0; i < k / 32; i++, b += t->tsize, y += 32) {
        const float d = unhalf(b);
        switch (id) {
        case NPUC__GGML_Q8_0:
            for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)b[2 + j] * d;
            break;
        case NPUC__GGML_Q4_0:
            for (int j = 0; j < 16; j++) {
                y[j] = (float)((b[2 + j] & 0x0f) - 8) * d;
                y[j + 16] = (float)((b[2 + j] >> 4) - 8) * d;
            }
            break;
        case NPUC__GGML_Q4_1: {
            const float m = unhalf(b + 2);
            for (int j = 0; j < 16; j++) {
                const float v0 = (float)(b[4 + j] & 0x0f) * d, v1 = (float)(b[4 + j] >> 4) * d;
                y[j] = v0 + m;
                y[j + 16] = v1 + m;
            }
            break;
        }
        case NPUC__GGML_Q5_0: {
            const uint32_t qh = get_u32(b + 2);
            for (int j = 0; j < 16; j++) {
                const int h0 = (int)((qh >> j) << 4 & 0x10), h1 = (int)((qh >> (j + 12)) & 0x10);
                y[j] = (float)(((b[6 + j] & 0x0f) | h0) - 16) * d;
                y[j + 16] = (float)(((b[6 + j] >> 4) | h1) - 16) * d;
            }
            break;
        }
        case NPUC__GGML_Q5_1: {
            const float m = unhalf(b + 2);
            const uint32_t qh = get_u32(b + 4);
            for (int j = 0; j < 16; j++) {
                const int h0 = (int)((qh >> j) << 4 & 0x10), h1 = (int)((qh >> (j + 12)) & 0x10);
                const float v0 = (float)((b[8 + j] & 0x0f) | h0) * d;
                const float v1 = (float)((b[8 + j] >> 4) | h1) * d;
                y[j] = v0 + m;
                y[j + 16] = v1 + m;
            }
            break;
        }
        default:
            return;
        }
    }
}
