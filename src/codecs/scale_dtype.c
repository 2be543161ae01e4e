/*
 * scale_dtype.c - the precision of a quant artifact's scales
 * (`--scale-dtype f32|f16|bf16`, npuc_quant_params.scale_dtype).
 *
 * A scale stored in f16 or bf16 is the f32 scale rounded to that type (round
 * half to even, as NumPy's astype(float16) and PyTorch's .to(bfloat16) do),
 * and the quantizer computes the codes with that rounded scale, so the
 * codes, the fake-quantized values and the decoded artifact all agree: a
 * decoder reads the stored scale, widens it exactly to f32 and multiplies,
 * as for f32 scales.  This is what GGUF's Q4_0 does with its fp16 block
 * scale, and it is what makes int4 with groups of 32 cost 4 + 16/32 = 4.5
 * bits per weight.
 *
 * Two edges: a scale below the type's smallest positive value (f16:
 * 2^-24; an all-zero or almost-zero group) is raised to it, so 1/scale stays
 * finite; a scale above its largest (f16: 65504, reached by weights beyond
 * about 8.3e6 at 8 bits) is lowered to it and the codes clip, which the
 * tensor's SQNR shows.
 */
#include <math.h>
#include <string.h>

#include "codecs/codec.h"

int npuc__scale_dtype_ok(npuc_dtype dt) {
    return dt == NPUC_DTYPE_F32 || dt == NPUC_DTYPE_F16 || dt == NPUC_DTYPE_BF16;
}

void npuc__scale_round(npuc_dtype dt, float *scale, float *inv) {
    if (dt != NPUC_DTYPE_F16 && dt != NPUC_DTYPE_BF16) return;
    uint16_t h;
    float r;
    /* The full grid (--grid full) has negative scales: keep the sign. */
    const uint16_t sign = signbit(*scale) ? 0x8000 : 0;
    npuc_convert(&h, dt, scale, NPUC_DTYPE_F32, 1);
    npuc_convert(&r, NPUC_DTYPE_F32, &h, dt, 1);
    if (r == 0) { /* underflow to 0: the smallest value of that sign */
        h = (uint16_t)(sign | 1);
        npuc_convert(&r, NPUC_DTYPE_F32, &h, dt, 1);
    } else if (isinf(r)) { /* overflow: the largest finite value of that sign */
        h = (uint16_t)(sign | (dt == NPUC_DTYPE_F16 ? 0x7bff : 0x7f7f));
        npuc_convert(&r, NPUC_DTYPE_F32, &h, dt, 1);
    }
    *scale = r;
    *inv = 1.0f / r;
}

/* npuc__scale_round over n scales, with the element conversions npuc_convert
 * applies (F32 -> F16/BF16 -> F32) called directly: one npuc_convert call
 * per scale each way was a third of a --target-size measurement's time.
 * The two edges go through npuc__scale_round. */
void npuc__scale_round_n(npuc_dtype dt, float *scale, float *inv, size_t n) {
    if (dt != NPUC_DTYPE_F16 && dt != NPUC_DTYPE_BF16) return;
    const int f16 = dt == NPUC_DTYPE_F16;
    for (size_t i = 0; i < n; i++) {
        const float r = f16 ? npuc_f16_to_f32(npuc_f32_to_f16(scale[i])) : npuc_bf16_to_f32(npuc_f32_to_bf16(scale[i]));
        if (r == 0 || isinf(r)) {
            npuc__scale_round(dt, &scale[i], &inv[i]);
            continue;
        }
        scale[i] = r;
        inv[i] = 1.0f / r;
    }
}
