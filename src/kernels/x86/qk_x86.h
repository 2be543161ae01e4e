/*
 * qk_x86.h - what the x86 SIMD kernels (qk_avx2.c, qk_avx512.c) share
 * (library-private): the MXCSR watch behind their float error sums and the
 * parameter checks that decide whether a call may take the fast path.
 *
 * The fast quantization paths accumulate the four error sums in float over
 * short blocks (QK_BLOCK_LANE_TERMS terms per lane), add each block into
 * double accumulators, and keep max |deq - x| in float.  That is accurate
 * (see npuc_kernels.h for the bound) only while no float operation
 * overflowed or lost precision to underflow, and max |deq - x| is exact only
 * while deq - x is exact in float.  A fast call therefore:
 *
 *   - clears the MXCSR overflow and underflow flags, runs, and reads them
 *     back: x86 raises UE only for a tiny *inexact* result and OE for an
 *     overflow, so flags that stayed clear prove that every rounding was
 *     relative (at most 2^-24).  With those exceptions unmasked (a caller
 *     that traps them) the fast path is not taken at all;
 *   - runs only when the parameters pass qk_params_ok() (inv_scale * scale
 *     within [1 - 2^-22, 1], zero point and code range of a byte), and
 *     checks that no element was clipped, NaN or infinite (the integer
 *     q = rint(x * inv_scale) + zp stayed inside [qmin, qmax]).  Then
 *     deq - x is exact in float: deq = 0 gives -x; otherwise
 *     |rint(v) - v| <= 1/2 with rint(v) != 0 puts x within [deq/2, 2 deq]
 *     (the boundary case |rint(v)| = 1, |v| just above 1/2, needs
 *     inv_scale * scale <= 1 + 2^-24, which the check guarantees), and
 *     Sterbenz's lemma makes the subtraction exact;
 *   - otherwise discards its results and redoes the call on the exact path
 *     (double sums, the reference's clamps), which writes the same codes
 *     and dequantized values.
 * The flags the caller had set are restored afterwards, so the sticky
 * floating-point status seen by the rest of the program is unchanged.
 */
#ifndef NPUC_QK_X86_H
#define NPUC_QK_X86_H

#include <stddef.h>
#include <stdint.h>
#include <xmmintrin.h>

#include "kernels/npuc_kernels.h"

/* MXCSR status flags OE (overflow) and UE (underflow), and their exception
 * masks OM and UM (set: the exception only raises the flag). */
#define QK_CSR_OE (1u << 3)
#define QK_CSR_UE (1u << 4)
#define QK_CSR_WATCH (QK_CSR_OE | QK_CSR_UE)
#define QK_CSR_OM (1u << 10)
#define QK_CSR_UM (1u << 11)

/* Float terms each lane adds before its block sum moves to double. */
#define QK_BLOCK_LANE_TERMS 16

/* The asm statements are volatile and clobber memory, so the compiler keeps
 * loads, stores and other volatile statements on their side of them; the
 * arithmetic whose flags are read is tied to the read through `pin`, the
 * address of the results that must be complete first. */
static inline unsigned qk_csr_read(const void *pin) {
    unsigned c;
    __asm__ __volatile__("stmxcsr %0" : "=m"(c) : "r"(pin) : "memory");
    return c;
}

static inline void qk_csr_write(unsigned c) {
    __asm__ __volatile__("ldmxcsr %0" : : "m"(c) : "memory");
}

/* Clears the watched flags and stores the MXCSR as it was in *c0; returns
 * 0, changing nothing, when the caller has unmasked overflow or underflow
 * traps (feenableexcept): a float term the reference forms in double could
 * then trap, so such calls take the exact path. */
static inline int qk_watch_begin(unsigned *c0) {
    *c0 = qk_csr_read(NULL);
    if ((*c0 & (QK_CSR_OM | QK_CSR_UM)) != (QK_CSR_OM | QK_CSR_UM)) return 0;
    if (*c0 & QK_CSR_WATCH) qk_csr_write(*c0 & ~QK_CSR_WATCH);
    return 1;
}

/* Returns 1 when a watched flag was raised since qk_watch_begin (after the
 * results at pin were computed) and puts back the caller's flags. */
static inline int qk_watch_end(unsigned c0, const void *pin) {
    const unsigned c1 = qk_csr_read(pin);
    if (c0 & QK_CSR_WATCH) qk_csr_write(c1 | (c0 & QK_CSR_WATCH));
    return (c1 & QK_CSR_WATCH) != 0;
}

/* How codes are narrowed to bytes: saturating to int8 (every valid code of a
 * signed range within [-128, 127]) or to uint8 (range within [0, 255]). */
enum { QK_PACK_NONE = 0, QK_PACK_I8 = 1, QK_PACK_U8 = 2 };

static inline int qk_pack_kind(int32_t qmin, int32_t qmax) {
    if (qmin > qmax) return QK_PACK_NONE;
    if (qmin >= -128 && qmax <= 127) return QK_PACK_I8;
    if (qmin >= 0 && qmax <= 255) return QK_PACK_U8;
    return QK_PACK_NONE;
}

/* p = inv_scale * scale, rounded to float, in [1 - 2^-22, 1]: then the exact
 * product is at most 1 + 2^-24 (a larger one rounds above 1), and zero,
 * infinite and NaN parameters are ruled out. */
static inline int qk_prod_ok(float p) { return p <= 1.0f && p >= 1.0f - 0x1p-22f; }

static inline int qk_inv_ok(float scale, float inv_scale) { return qk_prod_ok(inv_scale * scale); }

/* The read-ahead of quant_run_hinted: a cursor over the cache lines of
 * [ahead, ahead + n_ahead) that the loops advance a few lines per step of
 * their own, so the lines arrive while the current run is computed from
 * cache.  PREFETCHT1 fills L2 (and L3), not L1, so the current run's lines
 * are not evicted from L1.  Prefetches never fault, change no result and
 * cost only a load slot each. */
typedef struct {
    uintptr_t p, end;
} qk_ahead;

static inline qk_ahead qk_ahead_make(const npuc_qhint *h) {
    const uintptr_t p = h ? (uintptr_t)h->ahead : 0;
    qk_ahead r = {p & ~(uintptr_t)63, p ? p + h->n_ahead * sizeof(float) : 0};
    return r;
}

/* Prefetches the next `lines` cache lines of the window, if any remain. */
static inline void qk_ahead_step(qk_ahead *a, int lines) {
    if (a->p >= a->end) return;
    for (int l = 0; l < lines; l++) _mm_prefetch((const char *)(a->p + 64u * (unsigned)l), _MM_HINT_T1);
    a->p += 64u * (unsigned)lines;
}

/* The AVX2 kernels (qk_avx2.c), which the AVX-512 table reuses where it has
 * no version of its own.  Call them only where npuc_kernels_avx2() is
 * non-NULL. */
uint64_t npuc__qk_minmax_avx2(const float *x, size_t n, float *lo, float *hi);
uint64_t npuc__qk_minmax_groups_avx2(const float *x, size_t ngroups, size_t G, float *lo, float *hi);
void npuc__qk_range_params_avx2(const float *lo, const float *hi, size_t n, int bits, int symmetric,
                                int full, float *scale, float *inv, int32_t *zp);
uint64_t npuc__qk_minmax_cols_avx2(const float *x, size_t rows, size_t cols, size_t ld, float *lo,
                                   float *hi);
void npuc__qk_quant_run_avx2(const float *x, size_t n, float scale, float inv_scale, int32_t zp,
                             int32_t qmin, int32_t qmax, uint8_t *codes, float *deq,
                             npuc_qsums *s);
/* The exact path alone (the reference's clamps, double terms): what the
 * fast paths hand a group to when it holds a clipped, NaN or infinite value. */
void npuc__qk_quant_run_exact_avx2(const float *x, size_t n, float scale, float inv_scale,
                                   int32_t zp, int32_t qmin, int32_t qmax, uint8_t *codes,
                                   float *deq, npuc_qsums *s);
void npuc__qk_quant_run_hinted_avx2(const float *x, size_t n, float scale, float inv_scale,
                                    int32_t zp, int32_t qmin, int32_t qmax, uint8_t *codes,
                                    float *deq, npuc_qsums *s, const npuc_qhint *h);
void npuc__qk_quant_groups_avx2(const float *x, size_t ngroups, size_t G, const float *scale,
                                const float *inv_scale, const int32_t *zp, int32_t qmin, int32_t qmax,
                                uint8_t *codes, float *deq, npuc_qsums *s, const npuc_qhint *h);
void npuc__qk_quant_vec_avx2(const float *x, size_t n, const float *scale, const float *inv_scale,
                             const int32_t *zp, int32_t qmin, int32_t qmax, uint8_t *codes,
                             float *deq, npuc_qsums *s);
void npuc__qk_quant_rows_avx2(const float *x, size_t rows, size_t cols, size_t ld,
                              const float *scale, const float *inv_scale, const int32_t *zp,
                              int32_t qmin, int32_t qmax, uint8_t *codes, float *deq,
                              npuc_qsums *s);
/* pack_avx2.c: npuc_pack_bits with 4- and 2-bit codes packed 64/128 at a time. */
void npuc__qk_pack_bits_avx2(const uint8_t *codes, size_t n, int bits, uint8_t *out);

#endif
