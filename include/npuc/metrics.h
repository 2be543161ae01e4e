/*
 * npuc/metrics.h - measuring tensor values.
 *
 * The first measurement is the census a checker needs before anything else:
 * how many values of a tensor are NaN, infinite, subnormal or zero.  It is
 * taken in the tensor's own dtype, bit pattern by bit pattern, so an F16
 * subnormal is counted as an F16 subnormal (it would be a normal number after
 * widening to float32) and an F8_E4M3 0x7f is a NaN (that format has no
 * infinities).  Nothing is converted and nothing is allocated, so counting a
 * 2 GiB tensor costs one pass over its bytes.
 *
 * Example (compiled by tests/cli/c_api.sh):
 *     const void *p;
 *     npuc_model_data(ctx, m, i, &p);
 *     const npuc_tensor_info *t = npuc_model_tensor(m, i);
 *     npuc_value_counts c;
 *     npuc_count_values(p, t->dtype, t->numel, &c);
 *     if (c.nan || c.inf) printf("%s: %llu NaN, %llu Inf\n", t->name,
 *                                (unsigned long long)c.nan, (unsigned long long)c.inf);
 *     npuc_model_release(m, i);
 *
 * The `npuc validate --deep` command is a thin loop around this function.
 *
 * The second kind is the error an approximation costs (npuc_error_stats:
 * MSE, SQNR, cosine similarity, ...), which every compression pass reports
 * per tensor; see the comments at npuc_error_stats below.
 */
#ifndef NPUC_METRICS_H
#define NPUC_METRICS_H

#include "api.h"

#include <stdint.h>
#include "dtype.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Value classes of one tensor (or a sum over several).
 *
 *   nan        NaN values (any payload, either sign)
 *   inf        +Inf and -Inf
 *   finite     every value that is neither NaN nor Inf, so that
 *              nan + inf + finite == the number of values counted
 *   zero       +0 and -0 (a subset of finite)
 *   subnormal  nonzero values with the minimum exponent field (a subset of
 *              finite, disjoint from zero)
 *
 * For integer and BOOL dtypes every value is finite, and zero counts the
 * values whose bits are all zero; nan, inf and subnormal stay 0. */
typedef struct npuc_value_counts {
    uint64_t nan, inf, subnormal, zero, finite;
} npuc_value_counts;

/* Counts the value classes of the n elements at data, which hold dtype dt in
 * little-endian order (as npuc_model_data returns them).  data may be
 * unaligned; it may be NULL when n is 0.  *out is overwritten, not added to.
 * Returns NPUC_OK, or NPUC_ERR_ARG (with *out zeroed) for an invalid dtype or
 * a NULL data pointer with n > 0.  The function has no context argument:
 * those are its only failures, and the status says which. */
NPUC_API npuc_status npuc_count_values(const void *data, npuc_dtype dt, uint64_t n, npuc_value_counts *out);

/* Adds b to *acc field by field (for totals over a model). */
NPUC_API void npuc_value_counts_add(npuc_value_counts *acc, const npuc_value_counts *b);


/* Error of an approximation w' of weights w (quantized, pruned, factored...),
 * over n values:
 *
 *   mse        sum (w' - w)^2 / n            rmse  sqrt(mse)
 *   max_abs    max |w' - w|
 *   sqnr_db    10 log10(sum w^2 / sum (w' - w)^2); +Inf when the error is 0,
 *              -Inf when w is all zero but w' is not
 *   cosine     <w, w'> / (|w| |w'|); 1 when both are zero, 0 when one is
 *   rel_fro    |w' - w|_F / |w|_F; 0 when both are zero, +Inf when only w is
 *   noise_pred the uniform-noise prediction of the MSE, the mean over values
 *              of scale^2 / 12 (quantization only; 0 for other transforms)
 *   clipped    values the quantizer clamped to its range (quantization only)
 *   sum_w2, sum_e2   the raw sums, so totals over tensors can be formed
 *
 * JSON writers encode +-Inf and NaN as the strings "inf", "-inf", "nan". */
typedef struct npuc_error_stats {
    uint64_t n;
    double mse, rmse, max_abs, sqnr_db, cosine, rel_fro, noise_pred;
    uint64_t clipped;
    double sum_w2, sum_e2;
} npuc_error_stats;

/* Fills every field of *out from the sums of one or more passes over the
 * data: sum_w2 = sum w^2, sum_e2 = sum (w'-w)^2, sum_wd = sum w w',
 * sum_d2 = sum w'^2, max_abs = max |w'-w|, sum_noise = sum over values of
 * scale^2/12 (0 when not quantizing), clipped.  Sums are taken in double. */
NPUC_API void npuc_error_from_sums(npuc_error_stats *out, uint64_t n, double sum_w2, double sum_e2,
                          double sum_wd, double sum_d2, double max_abs, double sum_noise,
                          uint64_t clipped);

/* Measures approx against ref (n floats each, finite) in one pass and fills
 * *out (noise_pred and clipped are 0).  Sums are taken per 4096-value chunk
 * and added in chunk order, so the result is the same on every machine and
 * thread count. */
NPUC_API void npuc_error_measure(const float *ref, const float *approx, uint64_t n, npuc_error_stats *out);

#ifdef __cplusplus
}
#endif
#endif
