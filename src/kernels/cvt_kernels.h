/*
 * cvt_kernels.h - widening F16 and BF16 tensors to F32 (library-private;
 * npuc__load_f32 in src/passes/pass_util.c is the caller).
 *
 * The specification is the scalar npuc_f16_to_f32 / npuc_bf16_to_f32
 * (src/core/dtype.c) applied element by element, which is what the
 * reference table (ref/cvt_ref.c) does.  Every other version gives the same
 * 32 bits for each of the 65536 input patterns: subnormals exactly, signed
 * zeros, infinities, and NaNs with their sign and payload kept as they are
 * (an F16 NaN's 10 mantissa bits become bits 13..22 of the F32 NaN; a
 * signalling NaN stays signalling, although the F16C instruction would set
 * the quiet bit: the x86 versions put those lanes right, see cvt_f16c.c).
 * BF16 is the upper half of an F32, so its widening is a 16-bit shift.
 *
 * src holds n little-endian 2-byte elements at any byte address (a mapped
 * safetensors tensor need not be aligned); dst gets n floats and need not
 * be aligned either; the two must not overlap.  Single-threaded: the caller
 * splits a large tensor into chunks and converts them in parallel, which
 * changes nothing in the result since every element is converted on its
 * own.
 */
#ifndef NPUC_CVT_KERNELS_H
#define NPUC_CVT_KERNELS_H

#include <stddef.h>

typedef void (*npuc_cvt_fn)(float *dst, const void *src, size_t n);

typedef struct npuc_cvt_kernel_table {
    const char *name; /* "ref", "f16c", "avx512" */
    npuc_cvt_fn f16_to_f32;
    npuc_cvt_fn bf16_to_f32;
} npuc_cvt_kernel_table;

/* The table in use (kernels.c's dispatcher; NPUC_FORCE_REF=1 gives the
 * reference). */
const npuc_cvt_kernel_table *npuc_cvt_kernels(void);
/* The scalar reference, always available. */
const npuc_cvt_kernel_table *npuc_cvt_kernels_ref(void);
/* AVX2 + F16C, 8 elements a step; NULL when the CPU or the build lacks them. */
const npuc_cvt_kernel_table *npuc_cvt_kernels_f16c(void);
/* AVX-512F (+BW), 16 elements a step; NULL when the CPU or the build lacks it. */
const npuc_cvt_kernel_table *npuc_cvt_kernels_avx512(void);

#endif
