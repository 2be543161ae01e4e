/*
 * graph_roles.h - which weight layers sit at the model's edges
 * (library-private): the embedding, the first convolution reading the
 * input, and the output head.  quantize keeps them at 8 bits below 8 bits;
 * the report warns when they are not.
 *
 * Each side (input, output) is decided on its own, by the first rule that
 * finds something for it:
 *   graph  a network graph the file states (a Keras model_config, an ONNX
 *          graph: node evidence file or config; a graph npuc inferred from
 *          names is not used): on the input side the weighted nodes a walk
 *          from the model inputs along consumers reaches first, on the
 *          output side those a walk from the model outputs along producers
 *          reaches first.  Confidence: the graph's (certain).
 *   name   the conventions of the exporter families, matched on whole path
 *          components: an embedding is a component embed_tokens, wte,
 *          word_embeddings, tok_embeddings, embed_in, token_embedding(s),
 *          embed, embedding, or (first or second component only) tok,
 *          tok_emb, emb, shared; a head is a top-level module lm_head,
 *          classifier, head, fc, score, logits, predictions, output, out,
 *          fc_out, embed_out, qa_outputs (also with a Keras or Paddle
 *          number: fc_0), the last of them in natural order when there are
 *          several (classifier.1 and classifier.4 -> classifier.4); an
 *          input convolution (rank >= 3) is a top-level conv1, conv0,
 *          Conv1, conv_stem, stem, conv_first, patch_embed, input_conv,
 *          conv1_conv, block1_conv1, or features.0, or a component
 *          patch_embeddings (the first of them).  Not conv2d: Keras and
 *          Paddle name every convolution conv2d_N.  Confidence: convention.
 *          A named token embedding [V, d] with no head named and no other
 *          layer making V outputs settles the output side too (tied
 *          weights or hidden states out): nothing more is kept.
 *   order  the first (last) eligible layer in storage order, or, when
 *          storage is alphabetical, in the order of the numbers in the
 *          names (conv2d_9 before conv2d_10).  Confidence: guess.
 * One shard of a checkpoint (a safetensors file beside a
 * *.safetensors.index.json that lists it among others) is decided over the
 * whole checkpoint; a file named like a shard (-00001-of-00003) without
 * its index uses the graph and names only, never order.
 *
 *     npuc__edge_roles er;
 *     st = npuc__edge_roles_find(ctx, m, eligible, layer, &er);
 *     ... er.edge[i] != NPUC_EDGE_NONE: tensor i is at an edge, er.why[i] says why
 *     npuc__edge_roles_free(&er);
 */
#ifndef NPUC_GRAPH_ROLES_H
#define NPUC_GRAPH_ROLES_H

#include <stddef.h>

#include "npuc_internal.h"

typedef enum npuc__edge {
    NPUC_EDGE_NONE = 0,
    NPUC_EDGE_EMBEDDING = 1,  /* the input embedding */
    NPUC_EDGE_INPUT_CONV = 2, /* the first convolution reading the input */
    NPUC_EDGE_HEAD = 3,       /* the output head */
    NPUC_EDGE_FIRST = 4,      /* first eligible layer in storage order (a guess) */
    NPUC_EDGE_LAST = 5        /* last eligible layer in storage order (a guess) */
} npuc__edge;

/* "embedding", "input convolution", "output head", "first weight layer",
 * "last weight layer"; "" for NONE. */
const char *npuc__edge_name(npuc__edge e);

/* What a name alone says (the name rules above, without the "last of
 * several heads" choice, which needs every name): the edge, and into why
 * (n bytes) the evidence ("name lm_head").  rank: the tensor's rank. */
npuc__edge npuc__edge_of_name(const char *name, int rank, char *why, size_t n);

/* 1 for a tensor the edge rule weighs whatever a run selects: a float
 * weight of rank >= 2 with elements, whose role is not bias, norm or
 * BatchNorm (a run's --include / --exclude pick what is changed, not where
 * the model's edges are). */
int npuc__edge_candidate(const npuc_tensor_info *t);

typedef struct npuc__edge_roles {
    npuc__edge *edge;           /* per tensor of the model */
    npuc_confidence *confidence;/* per tensor: CERTAIN (graph), CONVENTION (name) or GUESS (order) */
    char (*why)[64];            /* per tensor: "config: ...", "name lm_head", "storage order" */
    size_t nfound;              /* tensors at an edge */
    size_t nguess;              /* of them decided by order alone */
    int alphabetical;           /* storage order is name order */
    int by_numbering;           /* the order rule read the numbers in the names */
    int tied;                   /* the output side is the named embedding (no head) */
} npuc__edge_roles;

/* Decides the edge layers among the tensors with eligible[i] set.  layer
 * (may be NULL: every tensor its own) groups tensors that count as one
 * layer (the two factors of a lowrank entry): a decision for one tensor of
 * a layer holds for all of them.  Reads m's graph (npuc_model_read_graph)
 * when m carries a model_config or is ONNX; a graph that cannot be read
 * leaves the decision to names.  NPUC_ERR_NOMEM only; free *out with
 * npuc__edge_roles_free. */
npuc_status npuc__edge_roles_find(npuc_ctx *ctx, npuc_model *m, const unsigned char *eligible,
                                  const size_t *layer, npuc__edge_roles *out);
void npuc__edge_roles_free(npuc__edge_roles *r);

#endif
