/*
 * prune_internal.h - what the pruning and sparsity modules share
 * (library-private):
 *
 *   prune_select.c    k-smallest-magnitude selection (sampled bracket, exact
 *                     radix fallback) and applying a threshold with ties
 *   prune_model.c     unstructured pruning of a model (layer / global)
 *   prune_graph.c     who consumes a layer's channels: chains of producer,
 *                     BatchNorm, depthwise convs and consumers
 *   prune_struct.c    structured pruning of a model along those chains
 *   sparsify_nm.c     (passes/sparsify/) N:M sparsity; it shares the
 *                     magnitude selection and the error sums of prune_select.c
 *
 * The N:M declarations themselves are in passes/sparsify/sparsify_nm.h,
 * included here for the files that still reach them through this header.
 */
#ifndef NPUC_PRUNE_INTERNAL_H
#define NPUC_PRUNE_INTERNAL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/nm_kernels.h"
#include "npuc_internal.h"
#include "passes/pass_util.h"
#include "passes/sparsify/sparsify_nm.h"

/* Elements per unit of parallel work.  Fixed, so per-chunk sums added in
 * chunk order give the same result for any thread count. */
#define NPUC_PRUNE_CHUNK ((uint64_t)1 << 20)

/* ------------------------------------------------------------ selection */

/* Tensors a selection runs over, loaded one at a time. */
typedef struct npuc__mag_src {
    size_t count;
    npuc_status (*get)(void *u, size_t i, const float **x, uint64_t *n);
    void (*put)(void *u, size_t i);
    void *u;
} npuc__mag_src;

/* The zero set "every element with mag < t, and the first `ties` elements
 * with mag == t in index order" that holds exactly the k smallest
 * magnitudes of the concatenation of src's tensors, by exact three-level
 * radix selection over the magnitude bits (11 + 10 + 10 bits: three counting
 * passes, no sort).  *nbad gets the NaN/Inf count (the result is then
 * meaningless). */
npuc_status npuc__mag_select_radix(npuc_ctx *ctx, const npuc__mag_src *src, uint64_t k, uint32_t *t,
                                   uint64_t *ties, uint64_t *nbad);

/* Writes x with every mag < t zeroed and the first *ties elements with
 * mag == t zeroed (index order); *ties is decreased by those zeroed.  Adds
 * the sums into *s. */
npuc_status npuc__mag_apply(npuc_ctx *ctx, const float *x, uint64_t n, uint32_t t, uint64_t *ties,
                            float *out, npuc_prune_sums *s);

/* Error figures of a pruned tensor from its sums (w' is w or 0, so
 * sum w w' = sum w'^2 = sum_w2 - sum_e2). */
void npuc__prune_error(const npuc_prune_sums *s, uint64_t n, npuc_error_stats *err);

/* The error message for NaN/Inf values (NPUC_ERR_VALUE), without a path. */
npuc_status npuc__prune_bad_values(npuc_ctx *ctx, const char *name, uint64_t nbad);

/* ------------------------------------------------------------ per-layer targets */

/* Each tensor's target sparsity: sp[i] = S of the first --layer-sparsity
 * rule ("REGEX=S", S in [0, 1)) matching tensor i's name, else o->sparsity;
 * own[i] = 1 when a rule matched (own may be NULL).  A malformed rule, a
 * value outside [0, 1) and a rule matching no tensor of m are NPUC_ERR_ARG. */
npuc_status npuc__layer_sparsity(npuc_ctx *ctx, npuc_model *m, const npuc_prune_opts *o, double *sp,
                                 unsigned char *own);

/* ------------------------------------------------------------ chains (prune_graph.c) */

#define NPUC_CHAIN_MAX 32

/* A BatchNorm's tensors, -1 when absent. */
typedef struct npuc__bn {
    int64_t gamma, beta, mean, var, count;
    size_t mod; /* its module */
} npuc__bn;

/* A module (PyTorch) or layer (Keras): the tensors sharing a name prefix. */
typedef struct npuc__mod {
    char *key;        /* "features.3", "Conv1", "conv2d_6" (owned) */
    int64_t weight;   /* float tensor of rank >= 2 with a layout, or -1 */
    int64_t bias;     /* its rank-1 bias, or -1 */
    int is_bn;        /* a BatchNorm: bn holds its tensors */
    npuc__bn bn;
    int other;        /* holds tensors that are none of these (LayerNorm, ...) */
    size_t first;     /* storage index of its first tensor */
} npuc__mod;

/* A weight that a channel space passes through (a depthwise convolution). */
typedef struct npuc__dw {
    size_t weight;
    int64_t bias;
} npuc__dw;

/* Everything that shares the output-channel space of one producer. */
typedef struct npuc__chain {
    size_t producer;                 /* the producer's weight tensor */
    int64_t bias;                    /* its bias, or -1 */
    uint64_t channels;
    size_t nbn, ndw, ncons;
    npuc__bn bn[NPUC_CHAIN_MAX];     /* BatchNorms on the space (after the producer or a dw) */
    npuc__dw dw[NPUC_CHAIN_MAX];     /* depthwise convs (channel-preserving) */
    size_t cons[NPUC_CHAIN_MAX];     /* consumers' weight tensors (input channels) */
    int ok;                          /* consumers found: the space can shrink */
    int guess;                       /* found by storage / layer order only */
    int output;                      /* the space reaches the model output */
    char how[40];                    /* "--next", "sequential naming", "keras topology", ... */
    char why[200];                   /* when !ok: why not */
} npuc__chain;

/* A Keras model_config layer and its edges (prune_graph.c). */
typedef struct npuc__klayer {
    char *name, *cls;
    size_t *in;       /* producer layers */
    size_t nin;
    size_t *out;      /* consumer layers */
    size_t nout, capout;
    int is_output;
    int64_t mod;      /* module holding its weights, or -1 */
    long groups;      /* Conv "groups" (1 when absent) */
} npuc__klayer;

typedef struct npuc__xedge {
    size_t prod;      /* module */
    size_t *cons;     /* modules */
    size_t ncons;
    char *text;       /* the statement, for messages */
} npuc__xedge;

typedef struct npuc__xbn {
    size_t prod;      /* module */
    size_t bn;        /* BatchNorm module */
} npuc__xbn;

typedef struct npuc__graph {
    npuc_model *m;
    npuc__mod *mods;
    size_t nmods, capmods;
    size_t *mod_of;
    int keras, alphabetical, no_guess, layer_order;
    npuc__klayer *kl;
    size_t nkl;
    int topo;
    npuc__xedge *xe;
    size_t nxe;
    npuc__xbn *xb;
    size_t nxb;
} npuc__graph;

static inline const npuc_tensor_info *npuc__gt(const npuc__graph *g, int64_t i) {
    return npuc_model_tensor(g->m, (size_t)i);
}
/* Output channels of a weight (its layout view's C), input channels (the
 * layout's input axis), a BatchNorm's channel count; 0 when undefined. */
uint64_t npuc__out_channels(const npuc_tensor_info *t);
uint64_t npuc__in_channels(const npuc_tensor_info *t);
uint64_t npuc__bn_channels(const npuc__graph *g, const npuc__bn *b);
/* A depthwise conv passing `channels` channels through (0: any). */
int npuc__is_dw(const npuc_tensor_info *t, uint64_t channels);
/* The module with this key, or -1; the explicit edge of module x, or NULL. */
int64_t npuc__find_mod(const npuc__graph *g, const char *key);
const npuc__xedge *npuc__explicit_of(const npuc__graph *g, size_t x);
/* Reads --graph and --next into g (prune_edges.c). */
npuc_status npuc__graph_edges(npuc_ctx *ctx, npuc__graph *g, const npuc_prune_opts *o);

/* Reads names, shapes, roles, metadata (Keras model_config) and the
 * explicit edges of o (--next, --graph) of m.  Explicit edges are checked
 * here: a name that matches no tensor or layer, a producer without a weight,
 * or channel counts that do not match are NPUC_ERR_ARG naming the edge. */
npuc_status npuc__graph_build(npuc_ctx *ctx, npuc_model *m, const npuc_prune_opts *o, npuc__graph **g);
void npuc__graph_free(npuc__graph *g);
/* The module of tensor i. */
const npuc__mod *npuc__graph_mod(const npuc__graph *g, size_t tensor);
/* 1 when weight tensor w is a depthwise convolution passing `channels`
 * channels through one to one (channels 0: any depthwise convolution). */
int npuc__graph_is_dw(const npuc__graph *g, size_t w, uint64_t channels);
/* Output / input channel axis of a weight tensor, -1 when it has none. */
int npuc__out_axis(const npuc_tensor_info *t);
int npuc__in_axis(const npuc_tensor_info *t);
/* Finds the chain of the producer whose weight tensor is w.  Returns
 * NPUC_OK with c->ok = 0 and c->why set when the consumers cannot be found
 * (the caller falls back to zeroing); NPUC_ERR_ARG for an explicit edge that
 * does not fit. */
npuc_status npuc__chain_of(npuc_ctx *ctx, npuc__graph *g, size_t w, npuc__chain *c);

#endif
