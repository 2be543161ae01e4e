/*
 * bnfold_internal.h - what the BatchNorm folding modules share
 * (library-private).  Which layer feeds each BatchNorm, and the Keras
 * model_config rewritten after folding, come from the graph
 * (src/graph/graph.h); bnfold_pairs.c turns the graph's links into a plan,
 * bnfold.c folds and writes it.
 */
#ifndef NPUC_BNFOLD_INTERNAL_H
#define NPUC_BNFOLD_INTERNAL_H

#include "graph/graph.h"
#include "npuc_internal.h"

/* bnfold_record.c: adds to o, pair x's "npuc.bnfold" entry, what a check needs to redo the fold. */
struct json_t;
int npuc__bnfold_record_pair(struct json_t *o, npuc_model *m, const npuc_bnfold_pair *x);

#endif
