/*
 * gguf_kernels.h - the block quantizers of ggml's legacy 32-element types
 * Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 (library-private; the GGUF writer,
 * formats/gguf/, is their one caller).
 *
 * gguf_ref.c holds the scalar reference, written from the block definitions
 * and the contract of ggml's quantize_row_*_ref ("reference implementation
 * for deterministic creation of model files"); it is the specification.
 * gguf_avx512.c computes the same bytes with AVX-512, sixteen elements a
 * step, and hands every block it cannot vouch for (a non-finite element, a
 * subnormal scale) to the reference.  Block layouts, rounding and the
 * scale choices are described at the top of gguf_ref.c.
 *
 * Every function quantizes nb consecutive blocks, 32 floats each, from x
 * into b (nb * the type's block bytes) and returns the index of the first
 * block it refused, or nb when it refused none.  A block is refused when
 * one of its elements is NaN or +-Inf, or when its fp16 scale or minimum
 * would overflow (what ggml would store as inf); a refused block's bytes
 * are unspecified, the blocks after it are still written.  Bytes of
 * accepted blocks are identical in every version of the table.
 */
#ifndef NPUC_GGUF_KERNELS_H
#define NPUC_GGUF_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <npuc/dtype.h>

/* Stores v as little-endian fp16 (round to nearest even, as ggml's
 * GGML_FP32_TO_FP16) at dst; -1 when v is not finite in fp16. */
static inline int npuc_gguf_half(float v, unsigned char *dst) {
    const uint16_t h = npuc_f32_to_f16(v);
    if ((h & 0x7c00) == 0x7c00) return -1;
    dst[0] = (unsigned char)(h & 0xff);
    dst[1] = (unsigned char)(h >> 8);
    return 0;
}

typedef size_t (*npuc_gguf_qfn)(const float *x, unsigned char *b, size_t nb);

typedef struct npuc_gguf_kernel_table {
    const char *name; /* "ref", "avx512" */
    npuc_gguf_qfn q8_0, q4_0, q4_1, q5_0, q5_1;
} npuc_gguf_kernel_table;

/* The table chosen once for this CPU: the reference when the quantization
 * kernels are the reference (NPUC_FORCE_REF=1, or no AVX2; kernels.c), else
 * the fastest version the CPU runs. */
const npuc_gguf_kernel_table *npuc_gguf_kernels(void);
const npuc_gguf_kernel_table *npuc_gguf_kernels_ref(void);
/* NULL when the CPU lacks AVX-512F/BW/DQ (or on other architectures). */
const npuc_gguf_kernel_table *npuc_gguf_kernels_avx512(void);

#endif
