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
#include <stdint.h>
#include <string.h>

#define NPUC_KQ_QK 256 /* elements per super-block (ggml's QK_K) */

/* ggml's nearest_int: round half to even through the float adder (exact
 * for |f| < 2^22; beyond, the same bits as ggml's). */
static inline int npuc_kq_nearest(float f) {
    const float v = f + 12582912.f;
    int32_t i;
    memcpy(&i, &v, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/* The two searches that cost most, in versions with identical results:
 * qkx is ggml's make_qkx2/3_quants (asymmetric, weights w, candidate
 * scales rmin + rdelta*is, is = 0..nstep), qx its make_qx_quants with
 * rmse_type 1 (symmetric, weights qw or x^2 when qw is NULL, 18
 * candidates).  The multi-group versions (qkxm, qxm) fit consecutive
 * groups; their AVX2 versions (x86/kquant_avx2.c) fit eight groups at
 * once, one per lane, each lane the reference's sequence of operations,
 * so every result is bit-identical. */
typedef float (*npuc_kq_qkx_fn)(int n, int nmax, const float *x, const float *w, uint8_t *L, float *the_min,
                                float rmin, float rdelta, int nstep, int use_mad);
typedef float (*npuc_kq_qx_fn)(int n, int nmax, const float *x, int8_t *L, const float *qw);
/* qkx on nsub consecutive groups of n values (x + n*j, w + n*j, L + n*j;
 * scales[j] its result, mins[j] its *the_min): the AVX2 version runs eight
 * groups at once, one per lane, each lane the reference's sequence. */
typedef void (*npuc_kq_qkxm_fn)(int nsub, int n, int nmax, const float *x, const float *w, uint8_t *L,
                                float *scales, float *mins, float rmin, float rdelta, int nstep, int use_mad);
/* qx on nsub consecutive groups of n values (qw + n*j, or NULL). */
typedef void (*npuc_kq_qxm_fn)(int nsub, int n, int nmax, const float *x, int8_t *L, float *scales,
                               const float *qw);
/* Q3_K's reference fit (make_q3_quants, weights x^2, coordinate descent)
 * on nsub consecutive groups of n values. */
typedef void (*npuc_kq_q3m_fn)(int nsub, int n, int nmax, const float *x, int8_t *L, float *scales);
typedef struct npuc_kq_ops {
    const char *name; /* "ref", "avx2" */
    npuc_kq_qkx_fn qkx;
    npuc_kq_qx_fn qx;
    npuc_kq_qkxm_fn qkxm;
    npuc_kq_qxm_fn qxm;
    npuc_kq_q3m_fn q3m;
} npuc_kq_ops;

float npuc_kq_fit_qkx_ref(int n, int nmax, const float *x, const float *w, uint8_t *L, float *the_min, float rmin,
                          float rdelta, int nstep, int use_mad);
float npuc_kq_fit_qx_ref(int n, int nmax, const float *x, int8_t *L, const float *qw);
float npuc_kq_fit_q3_ref(int n, int nmax, const float *x, int8_t *L);
const npuc_kq_ops *npuc_kq_ops_ref(void);
/* NULL when the CPU lacks AVX2 (or on other architectures). */
const npuc_kq_ops *npuc_kq_ops_avx2(void);
/* The reference when the quantization kernels are (NPUC_FORCE_REF=1, or
 * no AVX2: kernels.c), else AVX2. */
const npuc_kq_ops *npuc_kq_ops_best(void);

/* One row with the searches of ops (npuc_kq_row: with npuc_kq_ops_best()). */
size_t npuc_kq_row_ops(const npuc_kq_ops *ops, int type, const float *x, unsigned char *y, size_t n,
                       const float *imp);
size_t npuc_kq_row(int type, const float *x, unsigned char *y, size_t n, const float *imp);

/* n floats (n a multiple of 256) from the n / 256 blocks of K type `type`
 * at b, exactly as ggml's dequantize_row_qN_K; 0 on success, -1 for a type
 * that is not a K type. */
int npuc_kq_dequantize(int type, const unsigned char *b, float *y, size_t n);

#endif
