/*
 * gguf_ref.c - the scalar reference quantizers of ggml's legacy 32-element
 * block types (the specification of gguf_kernels.h), written from the block
 * definitions (ggml-common.h) and the reference quantizers' contract:
 * "reference implementation for deterministic creation of model files".
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
 *
 * A block with a NaN or infinite element is refused before any of this
 * (gguf_kernels.h): ggml's arithmetic would give it no meaningful bytes.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/gguf_kernels.h"
#include "kernels/qk_grid.h"

#define half npuc_gguf_half

/* 1 when every one of the block's 32 values is finite (branch-free over the
 * exponent bits). */
static int finite32(const float *x) {
    uint32_t bad = 0;
    for (int j = 0; j < 32; j++) {
        uint32_t u;
        memcpy(&u, &x[j], 4);
        bad |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
    }
    return !bad;
}

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* roundf(v) (half away from zero) for a finite |v| < 2^23, inline so the
 * loop vectorizes: v - trunc(v) is exact there. */
static inline int round_away(float v) {
    const int r = (int)v;
    const float f = v - (float)r;
    return r + (f >= 0.5f) - (f <= -0.5f);
}

static int q8_0(const float *x, unsigned char *b) {
    float amax = 0.0f; /* the values are finite (run() checks): max, not fmaxf */
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
 * before (run()).  Q5_1's code is not capped at 31, as in the reference. */
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

/* nb blocks of one type; the first refused block's index, or nb. */
static size_t run(int (*fn)(const float *, unsigned char *), size_t tsize, const float *x, unsigned char *b,
                  size_t nb) {
    size_t first = nb;
    for (size_t i = 0; i < nb; i++)
        if ((!finite32(x + 32 * i) || fn(x + 32 * i, b + tsize * i) != 0) && first == nb) first = i;
    return first;
}

static size_t q8_0_ref(const float *x, unsigned char *b, size_t nb) { return run(q8_0, 34, x, b, nb); }
static size_t q4_0_ref(const float *x, unsigned char *b, size_t nb) { return run(q4_0, 18, x, b, nb); }
static size_t q4_1_ref(const float *x, unsigned char *b, size_t nb) { return run(q4_1, 20, x, b, nb); }
static size_t q5_0_ref(const float *x, unsigned char *b, size_t nb) { return run(q5_0, 22, x, b, nb); }
static size_t q5_1_ref(const float *x, unsigned char *b, size_t nb) { return run(q5_1, 24, x, b, nb); }

static const npuc_gguf_kernel_table g_ref = {"ref", q8_0_ref, q4_0_ref, q4_1_ref, q5_0_ref, q5_1_ref};

const npuc_gguf_kernel_table *npuc_gguf_kernels_ref(void) { return &g_ref; }
