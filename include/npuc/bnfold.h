/*
 * npuc/bnfold.h - folding BatchNorm into the convolution or linear layer that
 * feeds it, on the weight file alone.
 *
 * At inference a BatchNorm is a per-channel affine map of its input,
 * y = gamma (x - mean) / sqrt(var + eps) + beta.  When x is the output of a
 * convolution or linear layer W x + b, the map folds into that layer:
 *
 *     s  = gamma / sqrt(var + eps)             one scale per output channel
 *     W' = W * s    along the layout's output-channel axis
 *     b' = (b - mean) * s + beta               (b = 0 when the layer had none)
 *
 * and the BatchNorm disappears: one pass over the activations fewer, and the
 * per-channel ranges a quantizer sees are the ones inference will use, which
 * is why folding comes before quantization.  The arithmetic is done in double
 * and the results are stored in the producer's own dtype.
 *
 * The hard part is knowing which layer feeds which BatchNorm, since a weight
 * file rarely has a graph (an ONNX model does).  npuc_bnfold_find() works it
 * out from the file, most certain evidence first (docs/fold-bn.md has the
 * full rules).  Only trustworthy pairs (explicit, the file's graph,
 * topology, unambiguous names, Keras layer order with agreeing numbering)
 * are folded by default; guesses are listed as
 * skips (guess = 1) with their reason, folded only when the context's policy
 * has accept_guesses, and under a strict policy they are NPUC_ERR_GUESS:
 *
 *   explicit     pairs the caller states ("features.0=features.1"); when any
 *                are given, only they are folded (a pair the file's graph
 *                contradicts is refused)
 *   graph        the file's own graph (ONNX): a BatchNormalization node whose
 *                input is a Conv/ConvTranspose/Gemm/MatMul output it alone
 *                reads; a BatchNorm that graph states otherwise (another op
 *                makes its input, the output has another reader) is refused
 *                and no weaker rule pairs it
 *   topology     a Keras model_config (root attribute of a model.save file,
 *                or safetensors metadata): inbound nodes give exact edges
 *   name         module / layer names that pair: features.0 -> features.1,
 *                downsample.0 -> downsample.1, conv1 -> bn1, X.conv -> X.bn,
 *                X._conv -> X._batch_norm, Keras X -> X_BN / X_bn / bn_X
 *   layer-order  Keras: the weighted layer just before the BatchNorm in
 *                layer_names (a guess unless conv2d_N/batch_normalization_N
 *                names agree)
 *   order        a guess for exported files whose names do not pair (Paddle
 *                and ONNX: conv2d_5.w_0 feeds batch_norm_3.*): the nearest
 *                preceding conv/linear whose output-channel count matches, in
 *                storage order; when storage order is alphabetical (it then
 *                says nothing about the graph) the numbers in the names stand
 *                in for it and convs are aligned with BatchNorms in order
 *
 * Every candidate that is not folded is listed with the reason (shape
 * mismatch, BatchNorm without a producer, producer feeding two BatchNorms,
 * an activation in between...), so a reviewer can check the plan before
 * anything is written.
 *
 * Example (compiled by tests/cli/c_api.sh):
 *     npuc_bnfold_params p = npuc_bnfold_params_defaults();
 *     npuc_bnfold_plan plan;
 *     if (npuc_bnfold_find(ctx, m, &p, &plan) != NPUC_OK) return 1;   // message in ctx
 *     for (size_t k = 0; k < plan.npairs; k++)
 *         printf("%s <- %s (%s)\n", npuc_model_tensor(m, plan.pairs[k].conv)->name,
 *                plan.pairs[k].bn.name, plan.pairs[k].why);
 *     npuc_summary sum;
 *     npuc_status st = npuc_bnfold_model(ctx, m, &plan, &p, "folded.safetensors", &sum);
 *     if (st == NPUC_OK) npuc_summary_free(&sum);
 *     npuc_bnfold_plan_free(&plan);
 */
#ifndef NPUC_BNFOLD_H
#define NPUC_BNFOLD_H

#include "api.h"

#include <stddef.h>
#include <stdint.h>
#include "model.h"
#include "record.h"
#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a pair was found, most certain first.  Values are pinned. */
typedef enum npuc_bnfold_how {
    NPUC_BNFOLD_EXPLICIT = 0,    /* stated by the caller */
    NPUC_BNFOLD_TOPOLOGY = 1,    /* Keras model_config inbound nodes */
    NPUC_BNFOLD_NAME = 2,        /* module or layer names pair */
    NPUC_BNFOLD_LAYER_ORDER = 3, /* Keras: the layer just before the BatchNorm */
    NPUC_BNFOLD_ORDER = 4,       /* nearest preceding producer (a guess) */
    NPUC_BNFOLD_GRAPH = 5        /* the file's own graph (ONNX edges), certain */
} npuc_bnfold_how;

/* "explicit", "topology", "name", "layer-order", "order", "graph"; "?" if invalid. */
NPUC_API const char *npuc_bnfold_how_name(npuc_bnfold_how h);

/* The default eps of BatchNorm in PyTorch, ONNX and Paddle exports, and in Keras. */
#define NPUC_BNFOLD_EPS_TORCH 1e-5
#define NPUC_BNFOLD_EPS_KERAS 1e-3

/* One BatchNorm: its tensors as indices into the model, -1 when absent
 * (gamma with scale=False / affine=False, beta with center=False). */
typedef struct npuc_bn_tensors {
    char *name;               /* module prefix or Keras layer: "features.1", "bn_Conv1"; owned */
    int64_t gamma, beta, mean, var, count; /* count: PyTorch num_batches_tracked */
    int64_t channels;
    int keras;                /* Keras names (gamma, moving_mean...): default eps 1e-3 */
} npuc_bn_tensors;

/* What folding measured for a pair (filled by npuc_bnfold_model). */
typedef struct npuc_bnfold_stats {
    double max_abs_scale;     /* max over channels of |s| */
    double spread_before;     /* max_c r_c / min_c r_c over channels with r_c > 0, where */
    double spread_after;      /*   r_c = max |W| in channel c: before / after folding */
    double check_rel_err;     /* max_c |y_folded - y_bn| / max_c |y_bn| on random input, the
                                 folded values as stored (in the source dtype) */
    size_t record;            /* index of the producer's record in the summary */
} npuc_bnfold_stats;

typedef struct npuc_bnfold_pair {
    size_t conv;              /* the producer's weight tensor */
    int64_t bias;             /* the producer's bias tensor, or -1: one is created */
    char *bias_name;          /* the bias in the output (existing or created); owned */
    npuc_bn_tensors bn;
    npuc_bnfold_how how;
    int guess;                /* 1 when only order or numbering supports the pair */
    int groups;               /* > 1 only for grouped transposed convs (IOHW) */
    double eps;
    char eps_source[24];      /* "--eps", "model_config", "the file's graph", "keras default", "default" */
    char why[200];            /* the evidence, for --dry-run */
    npuc_bnfold_stats stats;
} npuc_bnfold_pair;

/* A BatchNorm (or a producer) that will not be folded, and why. */
typedef struct npuc_bnfold_skip {
    char *bn;                 /* the BatchNorm's name, or NULL; owned */
    char *conv;               /* the producer considered, or NULL; owned */
    char why[200];
    int guess;                /* 1: a guessed pairing, not applied (policy accept_guesses
                                 applies it instead) */
} npuc_bnfold_skip;

typedef struct npuc_bnfold_plan {
    npuc_bnfold_pair *pairs;  /* in the producers' storage order */
    size_t npairs;
    npuc_bnfold_skip *skips;
    size_t nskips;
    size_t nbn;               /* BatchNorms found in the file */
    char order_note[160];     /* how storage order was read, for --dry-run */
} npuc_bnfold_plan;

typedef struct npuc_bnfold_params {
    double eps;               /* > 0: used for every pair; 0 (default): the source's own
                                 (model_config epsilon, else 1e-3 Keras, 1e-5 otherwise) */
    const char *const *pairs; /* "CONV=BN" statements: CONV a weight tensor, module or
                                 Keras layer; BN a BatchNorm module / layer or one of its
                                 tensors.  When any are given (here or in pairs_file),
                                 only the stated pairs are folded. */
    size_t npairs;
    const char *pairs_file;   /* a file of pairs: lines "CONV=BN" (# comments), or JSON:
                                 an array of {"conv": ..., "bn": ...} (or "gamma"/"mean"/
                                 "var" in place of "bn"), or an object holding such an array
                                 under "pairs" or "bn_pairs" (npuc's --dry-run --json output
                                 and the data catalogs both qualify) */
    int no_guess;             /* accepted for old callers: guessed pairs (guess = 1, supported
                                 only by order or numbering) are skipped by default anyway;
                                 1 also overrides the policy's accept_guesses */
    npuc_write_opts write;    /* output format, overwrite, HDF5 settings */
    /* Called after each record is complete, in output order. */
    void (*on_tensor)(void *user, size_t index, size_t count, const npuc_tensor_record *r);
    void *user;
} npuc_bnfold_params;

NPUC_API npuc_bnfold_params npuc_bnfold_params_defaults(void);

/* Finds the pairs to fold in m and fills *plan (zeroed first).  Reads names,
 * shapes, layouts and metadata only, no tensor data.  Fails with
 * NPUC_ERR_ARG for a bad --pair / --pairs statement (unknown tensor, not a
 * conv/linear weight, a BatchNorm stated for two producers or a producer for
 * two BatchNorms, channel counts that differ), NPUC_ERR_NOT_FOUND or
 * NPUC_ERR_IO when pairs_file cannot be read, NPUC_ERR_FORMAT for a
 * BatchNorm whose own tensors disagree in shape or a Keras BatchNorm layer
 * that the topology shows applied to several inputs, NPUC_ERR_UNSUPPORTED for
 * an npuc artifact (decompress it first), NPUC_ERR_GUESS under a strict policy
 * (npuc_ctx_policy) when a pairing is only a guess and accept_guesses is off
 * (the message names the BatchNorm, the candidate and --pair / --pairs /
 * --accept-guesses).  On failure *plan is empty. */
NPUC_API npuc_status npuc_bnfold_find(npuc_ctx *ctx, npuc_model *m, const npuc_bnfold_params *p,
                             npuc_bnfold_plan *plan);
/* Frees everything a plan owns and zeroes it; NULL is a no-op. */
NPUC_API void npuc_bnfold_plan_free(npuc_bnfold_plan *plan);

/* Writes m to out with every pair of plan folded: producers scaled, biases
 * folded or created (declared right after their producer, in its Keras
 * layer), BatchNorm tensors (and num_batches_tracked) removed, metadata kept.
 * A Keras model_config is rewritten to match: folded BatchNorm layers are
 * removed and their consumers wired to the producer, which gets
 * use_bias=true.  The metadata entry "npuc.bnfold" lists the folded pairs
 * (docs/fold-bn.md).  out == NULL is a dry run: everything is computed and
 * checked, nothing is written.
 *
 * Fills *sum ("fold-bn": one record per input tensor plus one per created
 * bias, in output order; FOLDED for producers and their biases, REMOVED for
 * BatchNorm tensors, CREATED for new biases; extras "channels", "eps",
 * "max_abs_scale", "spread_before", "spread_after", "check_rel_err",
 * "guess" on producers) and each pair's stats.
 *
 * Fails with NPUC_ERR_VALUE when var + eps <= 0 or a value involved is NaN or
 * infinite, NPUC_ERR_UNSUPPORTED for a non-float BatchNorm or producer, and
 * with the writer's statuses; on failure nothing is written, *sum is freed
 * and the context names the file, the tensor and the problem. */
NPUC_API npuc_status npuc_bnfold_model(npuc_ctx *ctx, npuc_model *m, npuc_bnfold_plan *plan,
                              const npuc_bnfold_params *p, const char *out, npuc_summary *sum);

/* ------------------------------------------------------ the arithmetic */

/* The BatchNorm as y = scale * x + shift for each of n channels:
 * scale = gamma / sqrt(var + eps), shift = beta - mean * scale.  gamma NULL
 * means 1 and beta NULL means 0 (scale=False / center=False).  Fails with
 * NPUC_ERR_VALUE, naming the channel, when var + eps <= 0 or a value is not
 * finite; var exactly 0 with eps > 0 is fine. */
NPUC_API npuc_status npuc_bnfold_coeffs(npuc_ctx *ctx, size_t n, const double *gamma, const double *beta,
                               const double *mean, const double *var, double eps, double *scale,
                               double *shift);

/* Scales the weights w of tensor t (t->numel doubles, row-major, layout
 * t->layout) by scale along the output-channel axis: w[o, c, k] *= scale[c]
 * in the [outer, C, inner] view (npuc_layout_view).  groups > 1 is for a
 * grouped transposed conv (IOHW [in, out/groups, ...]): output channel
 * g * (out/groups) + c of input row o, g = o / (in/groups), so scale then
 * has groups * C entries.  Fails with NPUC_ERR_ARG when the layout does not
 * fit the tensor or groups does not divide its input axis. */
NPUC_API npuc_status npuc_bnfold_scale_weights(npuc_ctx *ctx, const npuc_tensor_info *t, int groups,
                                      const double *scale, double *w);

/* b'[c] = b[c] * scale[c] + shift[c] for n channels; bias NULL means zeros. */
NPUC_API void npuc_bnfold_bias(size_t n, const double *bias, const double *scale, const double *shift,
                      double *out);

#ifdef __cplusplus
}
#endif
#endif
