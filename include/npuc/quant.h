/*
 * npuc/quant.h - integer quantization of weights.
 *
 * Schemes: 2..8 bits; symmetric (codes in [-(2^(b-1)-1), 2^(b-1)-1], zero
 * point 0, scale = amax / (2^(b-1)-1)) or asymmetric (the range widened to
 * include 0, codes in [0, 2^b-1], scale = (hi-lo) / (2^b-1), zero point =
 * clamp(round(-lo/scale), 0, 2^b-1)); one scale per output channel (the
 * channel axis of the tensor's layout), per tensor, or per group of G
 * consecutive values along the reduction axis inside each output channel.
 * The arithmetic is PyTorch's: q = clamp(round_half_even(w * (1.0f/scale)) +
 * zp), dequantized (q - zp) * scale; docs/quantization.md works it through.
 * A scale that would be 0 or subnormal (an all-zero group) is raised to
 * FLT_MIN, so every group has a finite, positive scale and 1/scale is finite.
 *
 * The full symmetric grid (grid = NPUC_GRID_FULL, `--grid full`) uses all
 * 2^b codes [-2^(b-1), 2^(b-1)-1], as ggml's Q4_0 does: the value of largest
 * magnitude m (with its sign; the positive one when -lo == hi) maps to
 * -2^(b-1), scale = m / -2^(b-1), so the scale is negative when m > 0 and
 * -m lands on 2^(b-1), clipped to 2^(b-1)-1.  Rounding stays half-to-even
 * (ggml rounds halves up).  A scale below FLT_MIN in magnitude is FLT_MIN.
 *
 * Two levels:
 *   npuc_quantize_tensor  one float tensor -> codes, scales, zero points,
 *                         error sums (what tests and other passes use);
 *   npuc_quantize_model   a whole model -> a quantized artifact, streamed one
 *                         tensor at a time, with a per-tensor report.
 *
 * Example (compiled by tests/cli/c_api.sh):
 *     npuc_quantize_opts o = npuc_quantize_opts_defaults();
 *     o.params.bits = 8;                     // per-channel symmetric minmax
 *     npuc_summary sum;
 *     npuc_status st = npuc_quantize_model(ctx, m, "model.q8.safetensors", &o, &sum);
 *     if (st != NPUC_OK) return st;          // nothing written; the message is in ctx
 *     printf("%.1f dB\n", sum.weighted_sqnr_db);
 *     npuc_summary_free(&sum);
 */
#ifndef NPUC_QUANT_H
#define NPUC_QUANT_H

#include "api.h"

#include <stddef.h>
#include <stdint.h>
#include "calib.h"
#include "metrics.h"
#include "model.h"
#include "record.h"
#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Values are pinned. */
typedef enum npuc_granularity {
    NPUC_GRAN_CHANNEL = 0,
    NPUC_GRAN_TENSOR = 1,
    NPUC_GRAN_GROUP = 2
} npuc_granularity;

/* Values are pinned. */
typedef enum npuc_grid {
    NPUC_GRID_RESTRICTED = 0, /* symmetric codes -(2^(b-1)-1)..2^(b-1)-1 (PyTorch's) */
    NPUC_GRID_FULL = 1        /* symmetric codes -2^(b-1)..2^(b-1)-1 (ggml's Q4_0) */
} npuc_grid;

typedef struct npuc_quant_params {
    int bits;                 /* 2..8, default 8 */
    int symmetric;            /* default 1 */
    npuc_granularity gran;    /* default NPUC_GRAN_CHANNEL */
    uint32_t group_size;      /* for NPUC_GRAN_GROUP, >= 2 */
    int axis;                 /* -1 (default): the layout's output axis; else an explicit axis */
    npuc_range_opts range;    /* default minmax */
    npuc_dtype scale_dtype;   /* how an artifact stores scales: NPUC_DTYPE_F32 (default), F16 or
                                 BF16; the codes are computed with the rounded scale
                                 (--scale-dtype, docs/artifact.md) */
    npuc_grid grid;           /* symmetric only; default NPUC_GRID_RESTRICTED */
    /* With range MSE: the importance of each value position of a channel
     * (per_channel doubles, sequence order, not owned), e.g. the mean x^2 of
     * the layer's inputs; the range search then minimises the weighted error
     * (npuc_range_estimate_weighted).  NULL (default): unweighted.  The full
     * grid's MSE search is the weighted one with all weights 1. */
    const double *importance;
} npuc_quant_params;

/* 8 bits, symmetric, per channel, the layout's axis, minmax. */
NPUC_API npuc_quant_params npuc_quant_params_defaults(void);

/* How a tensor's values are grouped under params p: `channels` groups of
 * scale (per group: `groups_per_channel`), the channel view [outer, C, inner]
 * and the number of scales.  Fails with NPUC_ERR_ARG (message names the
 * tensor) when the axis does not exist or the parameters are invalid. */
typedef struct npuc_quant_shape {
    uint64_t outer, channels, inner;  /* the view; channels = 1 per tensor */
    uint64_t per_channel;             /* values per channel = outer * inner */
    uint64_t groups_per_channel;      /* ceil(per_channel / group size), 1 if not grouped */
    uint64_t nscales;                 /* channels * groups_per_channel */
    int axis;                         /* output axis used, -1 per tensor */
} npuc_quant_shape;

/* Fills *qs for t under p (see above); NPUC_ERR_ARG naming the tensor. */
NPUC_API npuc_status npuc_quant_shape_of(npuc_ctx *ctx, const npuc_tensor_info *t, const npuc_quant_params *p,
                                npuc_quant_shape *qs);

/* Quantizes w (t->numel finite floats in t's shape).  Outputs: codes
 * (t->numel bytes: int8 two's complement for symmetric, uint8 for
 * asymmetric, unpacked even below 8 bits), scales and zero points
 * (qs.nscales each; zero points all 0 when symmetric), deq (optional,
 * t->numel floats: the dequantized values) and err (optional).  A NaN or Inf
 * in w is NPUC_ERR_VALUE naming the tensor and the count of bad values.
 * Runs on the context's thread count; results do not depend on it. */
NPUC_API npuc_status npuc_quantize_tensor(npuc_ctx *ctx, const npuc_tensor_info *t, const float *w,
                                 const npuc_quant_params *p, uint8_t *codes, float *scales,
                                 int32_t *zero_points, float *deq, npuc_error_stats *err);

/* Dequantizes codes produced by npuc_quantize_tensor back to floats into out
 * (t->numel, the caller's).  NPUC_ERR_ARG for parameters npuc_quant_shape_of
 * refuses. */
NPUC_API npuc_status npuc_dequantize_tensor(npuc_ctx *ctx, const npuc_tensor_info *t,
                                   const npuc_quant_params *p, const uint8_t *codes,
                                   const float *scales, const int32_t *zero_points, float *out);

/* ------------------------------------------------------------ whole models */

/* Values are pinned. */
typedef enum npuc_qmethod {
    NPUC_QMETHOD_RTN = 0, /* round to nearest (default) */
    NPUC_QMETHOD_GPTQ = 1 /* GPTQ (Frantar et al., 2022) with the calibration file's Hessians */
} npuc_qmethod;

typedef struct npuc_quantize_opts {
    npuc_quant_params params;
    const char *const *include;    /* regexes: quantize only matching tensors (and rank >= 2) */
    size_t ninclude;
    const char *const *exclude;    /* regexes: never quantize matching tensors */
    size_t nexclude;
    const char *const *layer_bits; /* "REGEX=N": bit width per tensor, first match wins */
    size_t nlayer_bits;
    const char *const *layer_group_size; /* "REGEX=G": groups of G (>= 2) for matching tensors,
                                            first match wins (recipes' group_size override) */
    size_t nlayer_group_size;
    int quantize_all;              /* below 8 bits, also quantize the first and last
                                      weight layers at the low width (default: 8 bits) */
    int fake_quant;                /* write dequantized floats in the source dtype */
    int pattern_n, pattern_m;      /* N:M sparsity before quantizing (prune.h); 0: none */
    npuc_write_opts write;         /* output options (format, overwrite, deflate) */
    const char *calib;             /* calibration file (docs/calibration.md), or NULL */
    npuc_qmethod method;           /* default NPUC_QMETHOD_RTN; GPTQ needs calib */
    double damp;                   /* GPTQ dampening, in (0, 1], default 0.01 */
    int act_order;                 /* GPTQ: columns in decreasing diag(H) order */
    /* Mixed precision under a budget (docs/budget.md): with target_size (bytes
     * of the output file) or target_bpw (bits per weight over the quantized
     * tensors, scales and zero points included) every quantized tensor not
     * pinned by layer_bits, layer_group_size or the 8-bit edge rule gets the
     * candidate scheme that keeps the budget with the least summed relative
     * squared error.  candidates: "int4/g32,uint8/ch,..." (NULL: int2..int8 x
     * per channel, g32, g64, g128 x symmetric, asymmetric, f16 scales);
     * plan_out: a JSON file with the choice per tensor and the size/error
     * curve (NULL: none). */
    uint64_t target_size;
    double target_size_pct; /* > 0: target_size is this percentage of the input's size
                               (its file's, else its tensors' bytes) */
    double target_bpw;
    const char *candidates;
    const char *plan_out;
    const char *plan; /* apply this plan_out document instead of measuring */
    /* A file of measurements the budget reuses and adds to, keyed by the
     * tensor's bytes, the candidate and the calibration/importance files,
     * so several budgets share one measurement pass (NULL: none). */
    const char *budget_cache;
    /* Called after each tensor is written (from the calling thread). */
    void (*on_tensor)(void *user, size_t index, size_t count, const npuc_tensor_record *r);
    void *user;
} npuc_quantize_opts;

/* The defaults: npuc_quant_params_defaults(), every tensor of rank >= 2. */
NPUC_API npuc_quantize_opts npuc_quantize_opts_defaults(void);

/* Quantizes every selected tensor of m and writes the artifact to out (see
 * docs/artifact.md): codes under the tensor's name, "<name>.scale",
 * "<name>.zero_point" (asymmetric), and a versioned JSON description in the
 * "npuc" metadata entry.  Tensors are streamed one at a time.  *sum gets one
 * record per input tensor (action QUANTIZED or KEPT; scheme like "int8/ch";
 * extras "bits", "symmetric", "group_size", "axis" for quantized tensors) and
 * the totals.  On failure nothing is written at out and *sum is empty; on
 * success the caller frees it with npuc_summary_free. */
NPUC_API npuc_status npuc_quantize_model(npuc_ctx *ctx, npuc_model *m, const char *out,
                                const npuc_quantize_opts *o, npuc_summary *sum);

/* Turns any npuc artifact back into dense float tensors with the original
 * names, shapes, dtypes and layouts; tensors npuc did not encode are copied.
 * Errors: NPUC_ERR_FORMAT for a malformed artifact description,
 * also when decoding a tensor would exceed the context's memory budget
 * (npuc_ctx_set_max_memory), NPUC_ERR_IO / NPUC_ERR_EXISTS writing; nothing
 * is then left at out. */
NPUC_API npuc_status npuc_decompress_model(npuc_ctx *ctx, npuc_model *m, const char *out,
                                  const npuc_write_opts *wo);

/* The short scheme name used in reports ("int8/ch", "uint4/g128", "int8/t"). */
NPUC_API void npuc_quant_scheme_name(const npuc_quant_params *p, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
