/*
 * quant_gptq.h - GPTQ (Frantar, Ashkboos, Hoefler and Alistarh, "GPTQ:
 * Accurate Post-Training Quantization for Generative Pre-trained
 * Transformers", 2022) for one tensor (library-private).
 *
 * The tensor is viewed as rows = output channels, columns = the channel's
 * values in sequence order (npuc_quant_shape: j = o * inner + k), which is
 * the reduction order the calibration inputs' K columns follow.  Codes,
 * scales and zero points come out exactly as npuc_quantize_tensor lays them
 * out (stored order, same grid and scale arithmetic), so the artifact is
 * the one round-to-nearest writes.
 */
#ifndef NPUC_QUANT_GPTQ_H
#define NPUC_QUANT_GPTQ_H

#include <npuc/quant.h>

typedef struct npuc__gptq_opts {
    double damp;   /* dampening: damp * mean(diag H) is added to diag H, in (0, 1] */
    int act_order; /* columns in decreasing diag(H) order; group scales then come
                      from the weights before any update (static groups) */
    double *out;   /* optional, 2 doubles: the output error's sums over the
                      calibration rows, out[0] = tr(D H D^T) = ||(W - W')X^T||^2
                      and out[1] = tr(W H W^T) = ||W X^T||^2 (record.h out_e2
                      and out_y2), from the factor GPTQ already has (no second
                      read or factorisation of H) */
} npuc__gptq_opts;

/* Quantizes w (t's numel floats) with GPTQ under params p, given H, the sum
 * of x x^T over n calibration rows (K x K, K = values per channel, row-major,
 * symmetric).  H is overwritten (it becomes scratch).  Outputs as
 * npuc_quantize_tensor: codes (numel), scales and zero_points (nscales),
 * deq (optional, numel floats) and err (optional).  Fails with
 * NPUC_ERR_VALUE naming the tensor when w holds NaN/Inf or the dampened
 * Hessian is not positive definite (the message suggests a larger --damp).
 * Runs on the context's threads; codes do not depend on their number. */
npuc_status npuc__gptq_tensor(npuc_ctx *ctx, const npuc_tensor_info *t, const float *w,
                              const npuc_quant_params *p, double *H, double n, const npuc__gptq_opts *o,
                              uint8_t *codes, float *scales, int32_t *zero_points, float *deq,
                              npuc_error_stats *err);

#endif
