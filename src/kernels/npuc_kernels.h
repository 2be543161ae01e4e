/*
 * npuc_kernels.h - the numeric kernels behind the passes (library-private).
 *
 * Every kernel has a scalar reference version (kernels/ref/, the
 * specification) and may have optimised versions (kernels/x86/) with the
 * same signature.  npuc_kernels() returns the table chosen once at start-up
 * from the CPU's features; NPUC_FORCE_REF=1 in the environment forces the
 * reference table.  Integer outputs (codes, counts), dequantized floats,
 * min/max, max_abs and the scales, 1/scales and zero points of range_params
 * of every version are bit-identical to the reference; the four error sums
 * of npuc_qsums match within NPUC_QSUM_RTOL (below).
 *
 * The grouped quantizer (groups of at most 256 values) makes three calls per
 * batch of groups: minmax_groups, range_params, quant_groups; per-channel
 * runs take minmax and quant_run_hinted; strided channels minmax_cols and
 * quant_rows.
 *
 * Kernels are single-threaded over the range they are given; pass drivers
 * split work into fixed chunks and run chunks in parallel, combining
 * per-chunk results in chunk order so that results do not depend on the
 * thread count.
 *
 * Quantization arithmetic (the same as PyTorch's quantize_per_channel):
 *     v    = x * inv_scale                  (float multiply, inv_scale = 1.0f / scale)
 *     v    = clamp(v, -2^24, 2^24)          (keeps the int conversion defined; no effect on codes)
 *     q    = clamp(rint_half_even(v) + zp, qmin, qmax)
 *     code = (uint8_t)q                     (two's complement byte for signed codes)
 *     deq  = (float)(q - zp) * scale        (float multiply)
 * A value is "clipped" when rint_half_even(v) + zp fell outside [qmin, qmax].
 */
#ifndef NPUC_KERNELS_H
#define NPUC_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* Error sums over the elements one kernel call saw (double accumulators).
 *
 * Tolerance: the reference adds every term in double, in element order.  The
 * SIMD versions add, per lane, blocks of at most 16 terms in float (each term
 * x*x, e*e, x*deq, deq*deq formed exactly inside a fused multiply-add, so
 * only the 16 additions round, by at most 2^-24 each) and then the block
 * sums in double.  The terms of each sum have one sign, so each of
 * sum_w2, sum_e2, sum_wd, sum_d2 is within NPUC_QSUM_RTOL = 1e-6 (16 * 2^-24
 * = 9.54e-7, plus double rounding) of the reference's, relative.  (The
 * AVX-512 version forms sum_d2 as scale^2 times the exact integer sum of
 * (q - zp)^2 instead: within 2^-23, relative.)  The float
 * path is taken only when it is that accurate: a call whose data or
 * parameters could overflow, underflow, clip or meet NaN/Inf is computed
 * with double terms instead (see kernels/x86/qk_x86.h). */
#define NPUC_QSUM_RTOL 1e-6

typedef struct npuc_qsums {
    double sum_w2;   /* sum of x^2 */
    double sum_e2;   /* sum of (deq - x)^2 */
    double sum_wd;   /* sum of x * deq */
    double sum_d2;   /* sum of deq^2 */
    double max_abs;  /* max |deq - x| */
    uint64_t clipped;
} npuc_qsums;

/* Adds b into a (in that order). */
void npuc_qsums_add(npuc_qsums *a, const npuc_qsums *b);

/* Hints for quant_run_hinted; a kernel may ignore any of them.
 *   ahead, n_ahead  floats to prefetch into the core's L2 cache while the run
 *                   is computed, a few cache lines per step, so that memory
 *                   streams the next run while this one is worked on from
 *                   cache (the one-pass quantizer's next minmax then reads
 *                   from cache).  Never dereferenced; may lie anywhere.
 * (Measured and not kept: streaming stores for the codes, and 64-byte
 * aligned code buffers; neither was faster beyond this machine's noise on
 * bench_quantize_mem.) */
typedef struct npuc_qhint {
    const float *ahead;
    size_t n_ahead;
} npuc_qhint;

typedef struct npuc_kernel_table {
    const char *name; /* "ref", "avx2", "avx512" */

    /* Min and max over x[0..n) ignoring non-finite values; returns how many
     * values were NaN or +-Inf.  With no finite value, *lo = *hi = 0. */
    uint64_t (*minmax)(const float *x, size_t n, float *lo, float *hi);

    /* minmax over each of ngroups consecutive runs of G values: lo[g], hi[g]
     * are minmax's results on x[g*G .. (g+1)*G) (non-finite values skipped;
     * a group with no finite value gets 0, 0; a zero result is +0), and
     * the return value is the total non-finite count.  The AVX-512 version
     * takes 16 groups at once (G a multiple of 16): their lane-wise min/max,
     * then a transposing reduction tree that leaves the 16 results in one
     * vector, so a 32-value group pays no call and no horizontal reduction
     * of its own. */
    uint64_t (*minmax_groups)(const float *x, size_t ngroups, size_t G, float *lo, float *hi);

    /* Scale, 1/scale and zero point of n ranges [lo[i], hi[i]] (finite, as
     * minmax gives them), exactly npuc_qk_range_params (kernels/qk_grid.h)
     * on each: the SIMD versions repeat its IEEE operations in its order,
     * so the bits are the same.  scale may be the same array as lo, and inv
     * the same as hi (element i is read before it is written). */
    void (*range_params)(const float *lo, const float *hi, size_t n, int bits, int symmetric, int full,
                         float *scale, float *inv, int32_t *zp);

    /* Column-wise min/max over a row-major [rows, cols] block with row stride
     * ld (in floats): lo[c] = min(lo[c], x[r*ld + c]) over r, likewise hi.
     * lo/hi must be initialised by the caller (+Inf / -Inf).  Non-finite
     * values are skipped and counted in the return value. */
    uint64_t (*minmax_cols)(const float *x, size_t rows, size_t cols, size_t ld, float *lo,
                            float *hi);

    /* Quantizes a run x[0..n) that shares one scale/zero point (see the
     * arithmetic above), writes codes[0..n) and, when deq is non-NULL, the
     * dequantized values; adds the error sums into *s. */
    void (*quant_run)(const float *x, size_t n, float scale, float inv_scale, int32_t zp,
                      int32_t qmin, int32_t qmax, uint8_t *codes, float *deq, npuc_qsums *s);

    /* quant_run with hints about the memory around it (h may be NULL);
     * results are exactly quant_run's whatever the hints say. */
    void (*quant_run_hinted)(const float *x, size_t n, float scale, float inv_scale, int32_t zp,
                             int32_t qmin, int32_t qmax, uint8_t *codes, float *deq,
                             npuc_qsums *s, const struct npuc_qhint *h);

    /* Quantizes ngroups consecutive runs of G values: run g is
     * x[g*G .. (g+1)*G) with scale[g], inv_scale[g] and zp[g], its codes and
     * dequantized values at the same offsets.  Codes and deq are exactly
     * quant_run's on each run in turn (the reference does that); the sums of
     * all runs are added into *s.  Small groups (int4 g32) then pay a call's
     * setup and final reduction once per batch rather than once per group.
     * h (may be NULL): memory to prefetch meanwhile, as for quant_run_hinted
     * (the grouped quantizer's next batch, whose minmax_groups then reads
     * from cache); results are the same whatever it says. */
    void (*quant_groups)(const float *x, size_t ngroups, size_t G, const float *scale,
                         const float *inv_scale, const int32_t *zp, int32_t qmin, int32_t qmax,
                         uint8_t *codes, float *deq, npuc_qsums *s, const struct npuc_qhint *h);

    /* The same for a run whose element i has its own scale[i], inv_scale[i]
     * and zp[i] (a row of a [in, out] weight quantized per output column). */
    void (*quant_vec)(const float *x, size_t n, const float *scale, const float *inv_scale,
                      const int32_t *zp, int32_t qmin, int32_t qmax, uint8_t *codes, float *deq,
                      npuc_qsums *s);

    /* quant_vec over `rows` rows of a row-major block that share the same
     * per-column parameters: row r is x[r*ld .. r*ld + cols), its codes and
     * dequantized values go to the same offsets of codes and deq.  The sums
     * of all the rows are added into *s (the reference calls quant_vec row
     * after row). */
    void (*quant_rows)(const float *x, size_t rows, size_t cols, size_t ld, const float *scale,
                       const float *inv_scale, const int32_t *zp, int32_t qmin, int32_t qmax,
                       uint8_t *codes, float *deq, npuc_qsums *s);

    /* npuc_pack_bits (below), byte for byte: codes[0..n) packed into out
     * from a byte boundary.  The reference is npuc_pack_bits itself. */
    void (*pack_bits)(const uint8_t *codes, size_t n, int bits, uint8_t *out);
} npuc_kernel_table;

/* The table in use (chosen once, thread-safe after the first call). */
const npuc_kernel_table *npuc_kernels(void);
/* The scalar reference table, always available (tests compare against it). */
const npuc_kernel_table *npuc_kernels_ref(void);
/* The AVX2 table when the CPU and the build support it, else NULL. */
const npuc_kernel_table *npuc_kernels_avx2(void);
/* The AVX-512 table (AVX-512F/BW/DQ; its minmax, minmax_groups, quant_run,
 * quant_run_hinted and quant_groups are AVX-512, the rest AVX2) when the CPU
 * and the build support it, else NULL. */
const npuc_kernel_table *npuc_kernels_avx512(void);

/* Bit packing of codes narrower than 8 bits, LSB-first: element i occupies
 * bits [i*bits, (i+1)*bits) of the output stream, bit 0 being the least
 * significant bit of byte 0.  Only the low `bits` bits of each code are kept.
 * out must hold npuc_packed_size(n, bits) bytes; trailing bits are zero. */
uint64_t npuc_packed_size(uint64_t n, int bits);
void npuc_pack_bits(const uint8_t *codes, size_t n, int bits, uint8_t *out);
/* Inverse of npuc_pack_bits; sign-extends each field to a full byte when
 * is_signed (so a 4-bit code 0xF becomes 0xFF, i.e. -1). */
void npuc_unpack_bits(const uint8_t *in, size_t n, int bits, int is_signed, uint8_t *codes);

#endif
