/*
 * graph_roles.h - which weight layers sit at the model's edges
 * (library-private): the embedding, the first convolution reading the
 * input, and the output head.  quantize keeps them at 8 bits below 8 bits;
 * the report warns when they are not.
 *
 * Evidence, strongest first:
 *   name   the conventions of the exporter families: an embedding is a path
 *          component embed_tokens, wte, word_embeddings, tok_embeddings,
 *          embed_in, token_embedding(s), embed, embedding; a head is a
 *          top-level module lm_head, classifier, head, fc, score, logits,
 *          predictions, output, embed_out, qa_outputs (also with a Keras or
 *          Paddle number: fc_0), the last of them in natural order when
 *          there are several (classifier.1 and classifier.4 -> classifier.4);
 *          an input convolution (rank >= 3) is a top-level conv1, conv0,
 *          Conv1, conv_stem, stem, conv_first, patch_embed, input_conv,
 *          conv1_conv, block1_conv1, conv2d / conv2d_0, or features.0,
 *          or a component patch_embeddings (the first of them).
 *          Confidence: convention.
 *   order  when names find none of the three, and storage order is not
 *          alphabetical (then it says nothing): the first and last eligible
 *          layers in storage order.  Confidence: guess.
 * Names decide alone, so every shard of one checkpoint decides the same way:
 * a shard holding neither the embedding nor the head keeps nothing.
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

typedef struct npuc__edge_roles {
    npuc__edge *edge;           /* per tensor of the model */
    npuc_confidence *confidence;/* per tensor: CONVENTION (name) or GUESS (order) */
    char (*why)[64];            /* per tensor: "name lm_head", "storage order" */
    size_t nfound;              /* tensors at an edge */
    size_t nguess;              /* of them decided by order alone */
    int alphabetical;           /* storage order is name order */
} npuc__edge_roles;

/* Decides the edge layers among the tensors with eligible[i] set.  layer
 * (may be NULL: every tensor its own) groups tensors that count as one
 * layer (the two factors of a lowrank entry): a decision for one tensor of
 * a layer holds for all of them.  NPUC_ERR_NOMEM only; free *out with
 * npuc__edge_roles_free. */
npuc_status npuc__edge_roles_find(npuc_ctx *ctx, const npuc_model *m, const unsigned char *eligible,
                                  const size_t *layer, npuc__edge_roles *out);
void npuc__edge_roles_free(npuc__edge_roles *r);

#endif
