/*
 * prune_internal.h - what the pruning and sparsity modules share
 * (library-private):
 *
 *   prune_select.c    k-smallest-magnitude selection (sampled bracket, exact
 *                     radix fallback) and applying a threshold with ties
 *   prune_model.c     unstructured pruning of a model (layer / global)
 *   prune_chain.c     what shares a producer's channels: its bias, BatchNorms,
 *                     depthwise convs and consumers, along the graph's edges
 *   prune_struct.c    structured pruning of a model along those chains
 *   prune_stated.c    the chains from a graph the file states (ONNX), and
 *                     the resized graph checked against the planned shapes
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

#include "graph/graph.h"
#include "graph/graph_net.h"
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

/* ------------------------------------------------------------ chains (prune_chain.c) */

#define NPUC_CHAIN_MAX NPUC_GRAPH_MAX_NEXT

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
    int guess;                       /* some link rests on storage / layer order only */
    char guess_why[200];             /* when guess: what the first guessed link rests on */
    int output;                      /* the space reaches the model output */
    char how[40];                    /* "--next/--graph", "sequential naming", "keras topology", ... */
    char why[200];                   /* when !ok: why not */
    /* From a graph the file states (prune_stated.c): the producers of the
     * other branches of an Add, which share the channels and prune with
     * the same mask, and their biases (-1 none). */
    size_t with[NPUC_CHAIN_MAX];
    int64_t with_bias[NPUC_CHAIN_MAX];
    size_t nwith;
    int stated;                      /* the chain comes from the file's graph */
} npuc__chain;

/* The graph structured pruning walks (src/graph/graph.h): modules, the
 * Keras model_config and the explicit edges of o (--next, --graph).  Chains
 * resting on storage or layer order are still found, marked guess with
 * their reason, so the caller can list them and apply them only under the
 * policy's accept_guesses; o->no_guess refuses them at the source (no
 * listing).  Explicit edges are checked
 * here: a name that matches no tensor or layer, a producer without a
 * weight, or channel counts that do not match are NPUC_ERR_ARG naming the
 * edge. */
npuc_status npuc__chain_graph(npuc_ctx *ctx, npuc_model *m, const npuc_prune_opts *o, npuc__graph **g);
/* Finds the chain of the producer whose weight tensor is w.  Returns
 * NPUC_OK with c->ok = 0 and c->why set when the consumers cannot be found
 * (the caller falls back to zeroing); NPUC_ERR_ARG for an explicit edge that
 * does not fit. */
npuc_status npuc__chain_of(npuc_ctx *ctx, npuc__graph *g, size_t w, npuc__chain *c);

/* ------------------------------------------------------------ chains from a stated graph (prune_stated.c) */

/* 1 when m's network graph states the edges structured pruning follows
 * (an ONNX file's graph: its weighted nodes carry "prune_consumers" or
 * "prune_refused", onnx_netgraph.c); the graph is read when it was not. */
int npuc__chain_stated(npuc_ctx *ctx, npuc_model *m);
/* Tensor i's kind in the stated graph: 1 the kernel of a weighted node
 * (Conv, ConvTranspose, Gemm, MatMul), 2 a depthwise kernel, 0 neither. */
int npuc__chain_stated_kind(const npuc_model *m, size_t i);
/* The chain of the weighted node whose kernel is tensor w, from the stated
 * graph's edges: consumers through channel-preserving ops (Relu, Clip,
 * HardSigmoid, BatchNormalization, a scalar Mul/Add/Sub/Div, Identity,
 * Dropout, pooling), BatchNorms and depthwise Convs on the way as
 * companions, the producers of an Add's other branches in c->with.  A
 * refused edge leaves c->ok = 0 with the reason in c->why (c->output when
 * the channels reach a model output). */
npuc_status npuc__chain_stated_of(npuc_ctx *ctx, npuc_model *m, size_t w, npuc__chain *c);
/* The network graph of the planned output: npuc__ng_resize of a copy of
 * m's graph, each chain's producers (with its Add branches) resized to the
 * kept count kept[k] of chain k (0: not shrunk), chains of one extent in
 * one edit; every weight the edit changes must have the shape newt[]
 * plans, and every planned shape change must be one the edit made.  *out
 * the graph (caller frees).  NPUC_ERR_UNSUPPORTED naming the file and the
 * node or tensor when the edit refuses or disagrees. */
npuc_status npuc__chain_stated_resize(npuc_ctx *ctx, npuc_model *m, const npuc__chain *chains, size_t nchains,
                                      const uint64_t *kept, const npuc_tensor_info *newt, npuc__ng **out);

#endif
