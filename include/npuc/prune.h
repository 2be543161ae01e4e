/*
 * npuc/prune.h - magnitude pruning, structured (filter / channel) pruning
 * and N:M sparsity of weights.
 *
 * Three ways to put zeros into a network, from least to most constrained:
 *
 *   magnitude    npuc_prune_magnitude: exactly k = floor(S * n) elements of a
 *                tensor (or, with scope GLOBAL, of all selected tensors
 *                together) become zero: the k smallest |w|, ties broken by
 *                index (the lower index is zeroed first), so the achieved
 *                count is exact and the result does not depend on the
 *                machine.  Selection is linear time: a sampled bracket
 *                around the k-th magnitude and one counting pass, with an
 *                exact three-level radix histogram over the magnitude bits
 *                as the fallback; never a sort of the tensor.
 *   structured   whole output filters (or input channels) are ranked by the
 *                L1/L2 norm of their weights and the weakest are *removed*:
 *                the layer, its bias, the BatchNorm after it, any depthwise
 *                convolution (+ BatchNorm) in between, and the input channels
 *                of the layer(s) consuming it all shrink together, so the
 *                smaller network computes exactly the kept channels of the
 *                original.  Where no consumer can be found the filters are
 *                zeroed instead, and the report says so.  docs/sparsity.md
 *                lists how consumers are found.
 *   N:M          npuc_nm_sparsify: in every group of M consecutive weights
 *                along the input-channel axis of each output channel (at
 *                each spatial tap), keep the N of largest magnitude: the
 *                pattern sparse tensor cores execute (2:4).  A compressed
 *                form (kept values + packed positions, encoding "nm_sparse",
 *                docs/artifact.md) is what such hardware reads.
 *
 * Example (compiled by tests/cli/c_api.sh):
 *     float *out = malloc(n * sizeof *out);
 *     npuc_prune_stats ps;
 *     npuc_prune_magnitude(ctx, w, n, (uint64_t)(0.5 * n), out, &ps);   // 50 %
 *
 *     npuc_sparsify_opts so = npuc_sparsify_opts_defaults();          // 2:4
 *     npuc_summary sum;
 *     npuc_sparsify_model(ctx, m, "model.24.safetensors", &so, &sum);
 *     npuc_summary_free(&sum);
 *
 * All functions return a status and leave a one-line message in ctx on
 * failure; model-level functions write nothing when they fail.  Work runs on
 * the context's thread count and gives identical results for any count.
 */
#ifndef NPUC_PRUNE_H
#define NPUC_PRUNE_H

#include "api.h"

#include <stddef.h>
#include <stdint.h>
#include "metrics.h"
#include "model.h"
#include "record.h"
#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ one tensor */

/* What one pruning or sparsifying call did. */
typedef struct npuc_prune_stats {
    uint64_t n;           /* elements */
    uint64_t k;           /* elements chosen for zeroing (pruned positions) */
    uint64_t zeros;       /* elements of the output equal to zero: k plus the zeros kept */
    float threshold;      /* the largest |w| zeroed (0 when nothing was) */
    npuc_error_stats err; /* of the output against the input */
} npuc_prune_stats;

/* Writes w[0..n) to out with exactly k elements set to +0: the k smallest
 * |w|, the lower index first among equal magnitudes (so already-zero weights
 * go first).  Every other element is copied bit for bit.  out must not
 * overlap w.  Fails with NPUC_ERR_ARG when k > n or out overlaps w,
 * NPUC_ERR_VALUE when w holds NaN or Inf, NPUC_ERR_NOMEM.  st may be NULL. */
NPUC_API npuc_status npuc_prune_magnitude(npuc_ctx *ctx, const float *w, uint64_t n, uint64_t k, float *out,
                                 npuc_prune_stats *st);

/* Where N:M groups run in a tensor (docs/sparsity.md).  Each output channel
 * c (the layout's channel axis, npuc_layout_view) has I input channels at S
 * spatial taps; the groups are M consecutive input channels at one tap, the
 * last group of each tap short when M does not divide I.  Element (c, s, i)
 * lives at offset c*cstride + s*sstride + i*istride.  The compressed order
 * of groups is c, then s, then i / M (the reduction order of an NHWC / KRSC
 * implicit GEMM, input channel fastest). */
typedef struct npuc_nm_geom {
    int n, m;                 /* keep n of every m */
    uint64_t channels;        /* C: output channels */
    uint64_t in;              /* I: input channels per output channel (the group axis) */
    uint64_t taps;            /* S: spatial taps (1 for linear layers) */
    uint64_t cstride, sstride, istride;
    int in_axis;              /* the tensor axis holding I */
    uint64_t groups_per_tap;  /* ceil(I / M) */
    uint64_t groups;          /* C * S * groups_per_tap */
    uint64_t kept;            /* stored values: groups * n */
    int meta_bits;            /* bits per stored position: ceil(log2 m) */
    uint64_t meta_bytes;      /* ceil(kept * meta_bits / 8) */
} npuc_nm_geom;

/* Parses "N:M" (1 <= N < M <= 16; decimal digits only: no sign, no spaces).
 * Returns 0, or -1 when malformed or out of range. */
NPUC_API int npuc_nm_parse(const char *s, int *n, int *m);

/* The N:M geometry of tensor t.  Fails with NPUC_ERR_ARG (message names the
 * tensor) when n:m is invalid, the layout is NONE, or the input-channel axis
 * is shorter than m (a depthwise convolution has one input channel per
 * output channel: nothing for N:M to choose from). */
NPUC_API npuc_status npuc_nm_geometry(npuc_ctx *ctx, const npuc_tensor_info *t, int n, int m, npuc_nm_geom *g);

/* Writes w (t->numel floats) to out with N:M sparsity along g's groups: in
 * each group of r <= m values the r - min(n, r) smallest by (|w|, index) are
 * set to +0, the rest copied bit for bit.  out may equal w.  NaN or Inf is
 * NPUC_ERR_VALUE.  st may be NULL (k counts pruned positions). */
NPUC_API npuc_status npuc_nm_sparsify(npuc_ctx *ctx, const npuc_tensor_info *t, const npuc_nm_geom *g,
                             const float *w, float *out, npuc_prune_stats *st);

/* Compression of an N:M-sparse tensor: for every group in compressed order,
 * n slots holding the kept positions in increasing order and their values.
 * The positions are those npuc_nm_sparsify kept (taken from `sparse`, its
 * output: N:M selection is idempotent); a short group with r <= n values
 * fills slots r..n-1 with positions r..n-1 and zero bytes.  The values are
 * gathered from src, esize bytes per element (src may be `sparse` itself
 * with esize 4, or quantization codes with esize 1).  values: g->kept *
 * esize bytes; meta: g->meta_bytes, positions packed LSB-first, meta_bits
 * each. */
NPUC_API void npuc_nm_pack(const npuc_nm_geom *g, const float *sparse, const void *src, size_t esize,
                  void *values, uint8_t *meta);
/* The inverse: writes the dense tensor (numel * esize bytes, zero bytes at
 * pruned positions) and, when kept is not NULL, kept[i] = 1 for stored
 * positions, 0 elsewhere.  Checks every group's positions (increasing,
 * below m, padding slots of short groups at positions r..) and fails with
 * NPUC_ERR_FORMAT (message names `name`) when they are not canonical. */
NPUC_API npuc_status npuc_nm_unpack(npuc_ctx *ctx, const char *name, const npuc_nm_geom *g, const void *values,
                           size_t esize, const uint8_t *meta, void *dense, uint8_t *kept);

/* ------------------------------------------------------------ cost model */

/* A roofline NPU for the N:M cost estimate (docs/sparsity.md). */
typedef struct npuc_cost_model {
    double peak_tops;     /* dense peak, 10^12 ops/s (default 200) */
    double bandwidth_gbs; /* memory bandwidth, 10^9 bytes/s (default 1000) */
    double tokens;        /* output positions per weight read: tokens for linear
                             layers, output pixels for convolutions (default 1) */
} npuc_cost_model;

NPUC_API npuc_cost_model npuc_cost_model_defaults(void);

/* The estimate for one layer with geometry g whose values take value_bytes
 * each (4 for F32, 1 for int8), activations act_bytes each. */
typedef struct npuc_nm_cost {
    double flops;         /* 2 * params * tokens */
    double bytes_dense;   /* weights + activations, dense */
    double bytes_sparse;  /* N/M of the weights + metadata + activations */
    double bytes_meta;
    double ai;            /* dense arithmetic intensity, flops / bytes_dense */
    double ridge;         /* peak / bandwidth: above it a layer is compute-bound */
    double t_dense, t_sparse; /* seconds: max(flops/peak, bytes/bandwidth), flops * N/M when sparse */
    double speedup;       /* t_dense / t_sparse */
} npuc_nm_cost;

/* The roofline estimate for one layer of geometry g under cost model cm,
 * into *out (the caller's); cannot fail. */
NPUC_API void npuc_nm_cost_of(const npuc_nm_geom *g, double value_bytes, double act_bytes,
                     const npuc_cost_model *cm, npuc_nm_cost *out);

/* Below this estimated speedup a sparsified layer is reported as one where
 * N:M "cannot pay". */
#define NPUC_NM_MIN_GAIN 1.2

/* ------------------------------------------------------------ whole models */

typedef enum npuc_prune_scope {
    NPUC_PRUNE_LAYER = 0,   /* floor(S * n) zeros in every selected tensor */
    NPUC_PRUNE_GLOBAL = 1   /* floor(S * total) zeros over all selected tensors */
} npuc_prune_scope;

typedef enum npuc_prune_structure {
    NPUC_PRUNE_UNSTRUCTURED = 0, /* individual weights */
    NPUC_PRUNE_FILTER = 1,       /* output filters, ranked on the layer's own weights */
    NPUC_PRUNE_CHANNEL = 2       /* input channels, ranked on the consumers' weights */
} npuc_prune_structure;

typedef enum npuc_prune_criterion {
    NPUC_PRUNE_L1 = 0,
    NPUC_PRUNE_L2 = 1
} npuc_prune_criterion;

typedef struct npuc_prune_opts {
    double sparsity;                 /* in [0, 1): fraction of weights (channels) removed */
    npuc_prune_scope scope;          /* unstructured only */
    npuc_prune_structure structure;
    npuc_prune_criterion criterion;  /* structured only */
    uint32_t round_to;               /* structured: round the kept channel count up to a
                                        multiple of this (0 or 1: no rounding) */
    const char *const *include;      /* regexes: prune only matching tensors (rank >= 2 by
                                        default) */
    size_t ninclude;
    const char *const *exclude;      /* regexes: never prune matching tensors */
    size_t nexclude;
    const char *const *layer_sparsity; /* "REGEX=S", S in [0, 1): a selected tensor matching
                                        REGEX is pruned at S instead of `sparsity` (first
                                        matching rule wins; rules do not select tensors).
                                        Unstructured, layer scope: floor(S * n) zeros in it;
                                        global scope: it is pruned on its own at S and left out
                                        of the global pool; structured: the fraction of its
                                        channels removed (the producer's weight in filter mode,
                                        the consumer's in channel mode). */
    size_t nlayer_sparsity;
    const char *const *next;         /* "PRODUCER=CONSUMER[,CONSUMER...]": who consumes a
                                        layer's output channels (tensor or layer names) */
    size_t nnext;
    const char *graph_file;          /* the same as a file (docs/sparsity.md), or NULL */
    int no_guess;                    /* do not use consumers found by storage / layer order */
    npuc_write_opts write;
    /* Called after each tensor is written (from the calling thread). */
    void (*on_tensor)(void *user, size_t index, size_t count, const npuc_tensor_record *r);
    void *user;
} npuc_prune_opts;

NPUC_API npuc_prune_opts npuc_prune_opts_defaults(void);

/* Prunes m and writes the result to out (same tensors and names; shrunk
 * shapes for structured pruning).  *sum ("prune") gets one record per input
 * tensor: PRUNED with scheme "mag/layer", "mag/global", "filter/l1", ...,
 * extras "sparsity_target", "sparsity" (achieved: zeros / n, or channels
 * removed / channels), "zeros", "channels", "channels_removed", and the error
 * of the pruned weights against the originals; companions (biases,
 * BatchNorms, consumers) are PRUNED with a note naming their chain.
 * "sparsity_target" is the tensor's own target (its layer_sparsity rule's S,
 * else `sparsity`); with global scope, tensors with a rule of their own get
 * scheme "mag/layer".  Fails with NPUC_ERR_ARG for a sparsity outside
 * [0, 1) (also in a layer_sparsity rule), a rule matching nothing,
 * a --next naming a missing tensor or one whose channels do not match;
 * NPUC_ERR_VALUE for NaN/Inf weights.  On failure nothing is written and
 * *sum is empty. */
NPUC_API npuc_status npuc_prune_model(npuc_ctx *ctx, npuc_model *m, const char *out, const npuc_prune_opts *o,
                             npuc_summary *sum);

typedef struct npuc_sparsify_opts {
    int n, m;                        /* the pattern (default 2:4) */
    int compressed;                  /* write encoding "nm_sparse" instead of dense zeros */
    const char *const *include;      /* as for npuc_prune_opts */
    size_t ninclude;
    const char *const *exclude;
    size_t nexclude;
    npuc_cost_model cost;
    npuc_write_opts write;
    void (*on_tensor)(void *user, size_t index, size_t count, const npuc_tensor_record *r);
    void *user;
} npuc_sparsify_opts;

NPUC_API npuc_sparsify_opts npuc_sparsify_opts_defaults(void);

/* N:M-sparsifies every selected tensor of m (rank >= 2 float tensors with a
 * channel layout, or the --include set) and writes out, dense or compressed.
 * Tensors whose input-channel axis is shorter than M (depthwise
 * convolutions) are kept and listed in a warning when selected by default,
 * and are an NPUC_ERR_ARG when an --include names them.  Records
 * (SPARSIFIED): extras "n", "m", "sparsity_target", "sparsity", "zeros",
 * "ai", "speedup_24" (for 2:4; "speedup_nm" for other patterns),
 * "bytes_sparse", "bytes_meta", and the error; warnings for layers where the
 * pattern cannot pay and when every weight layer was sparsified. */
NPUC_API npuc_status npuc_sparsify_model(npuc_ctx *ctx, npuc_model *m, const char *out,
                                const npuc_sparsify_opts *o, npuc_summary *sum);

#ifdef __cplusplus
}
#endif
#endif
