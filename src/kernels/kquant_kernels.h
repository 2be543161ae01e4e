/*
 * kquant_kernels.h - ggml's super-block ("K") quantizers Q2_K, Q3_K, Q4_K,
 * Q5_K and Q6_K, the importance-weighted paths of the legacy types Q4_0,
 * Q4_1, Q5_0 and Q5_1, and the K dequantizers (library-private; the GGUF
 * block driver, formats/gguf/gguf_quant.c, is their caller).
 *
 * src/kernels/ref/kquant_ref.c is the scalar reference and the
 * specification, written from ggml's block definitions (ggml-common.h) and
 * the arithmetic of its quantizers (ggml-quants.c): the bytes of every
 * accepted block equal what ggml_quantize_chunk(type, x, y, 0, nrow,
 * n_per_row, imp) writes, which is, per type and importance:
 *
 *   type    imp == NULL                 imp != NULL
 *   Q2_K    quantize_row_q2_K_ref       quantize_row_q2_K_impl
 *   Q3_K    quantize_row_q3_K_ref       quantize_row_q3_K_impl
 *   Q4_K    quantize_row_q4_K_ref       quantize_row_q4_K_impl
 *   Q5_K    quantize_row_q5_K_ref       quantize_row_q5_K_impl
 *   Q6_K    quantize_row_q6_K_ref       quantize_row_q6_K_impl
 *   Q4_0..  (gguf_kernels.h tables)     quantize_row_q4_0_impl etc.
 *   Q8_0    (gguf_kernels.h tables)     the same: ggml ignores importance
 *
 * Contract of npuc_kq_row: x holds one row of n floats (n a multiple of the
 * type's block: 256 for K types, 32 for the legacy ones); y receives the
 * row's n / blck blocks; imp is NULL or the row's n importance weights
 * (one imatrix row: the same n floats for every row of a tensor, finite and
 * >= 0, as llama.cpp's imatrix holds them).  The legacy weighted paths use
 * a statistic of the whole row (the mean square), so a row must be passed
 * whole; the K paths are per super-block.  Returns the index of the first
 * block refused, or n / blck: a block is refused when one of its values is
 * NaN, +-Inf or of magnitude 2^59 or more (where ggml's sums of squares
 * overflow; its scale would exceed fp16 anyway), or when its fp16 scale or
 * minimum is not finite (what ggml would store as inf or NaN).  A refused block's bytes are unspecified,
 * the later blocks are still written.  imp != NULL is only for the types
 * with a weighted path (not Q8_0); returns 0 (every block refused) for a
 * type it does not handle.
 *
 * Every float operation is the one ggml performs, in its order: the file
 * is compiled with -ffp-contract=off (no fused multiply-add) and without
 * fast-math, and rounding to integers uses ggml's nearest_int (add 1.5 *
 * 2^23 and take the mantissa bits: round half to even for |v| < 2^22).
 */
#ifndef NPUC_KQUANT_KERNELS_H
#define NPUC_KQUANT_KERNELS_H

#include <stddef.h>

#define NPUC_KQ_QK 256 /* elements per super-block (ggml's QK_K) */

size_t npuc_kq_row(int type, const float *x, unsigned char *y, size_t n, const float *imp);

/* n floats (n a multiple of 256) from the n / 256 blocks of K type `type`
 * at b, exactly as ggml's dequantize_row_qN_K; 0 on success, -1 for a type
 * that is not a K type. */
int npuc_kq_dequantize(int type, const unsigned char *b, float *y, size_t n);

#endif
