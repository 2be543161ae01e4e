/*
 * bnfold_internal.h - what the BatchNorm folding modules share
 * (library-private): the Keras topology reader and rewriter
 * (bnfold_topo.c), used by pair finding (bnfold_pairs.c) and by the output
 * writer (bnfold.c), the parser of stated pairs (bnfold_explicit.c), and the
 * state pair finding shares between its books (bnfold_pairs.c) and its rules
 * (bnfold_rules.c).
 */
#ifndef NPUC_BNFOLD_INTERNAL_H
#define NPUC_BNFOLD_INTERNAL_H

#include <stddef.h>

#include "npuc_internal.h"

/* One BatchNormalization layer of a Keras model_config and what feeds it. */
typedef struct npuc__bnf_edge {
    char *bn;             /* the BatchNorm layer's name */
    char *producer;       /* the layer feeding it, or NULL (several inputs, none) */
    char *producer_class; /* its class_name, or NULL */
    char skip[160];       /* why the edge cannot be folded; "" when it can */
    double eps;           /* the layer's epsilon, NaN when the config has none */
    int shared;           /* the BatchNorm layer is applied to several inputs */
} npuc__bnf_edge;

typedef struct npuc__bnf_topo {
    npuc__bnf_edge *e;
    size_t n;
    int understood;       /* the JSON parsed and had a layer list */
} npuc__bnf_topo;

/* Reads the BatchNorm edges of a Keras model_config (Keras 2 list-style or
 * Keras 3 dict-style inbound nodes, Functional and Sequential models, nested
 * models).  A config it does not understand leaves understood = 0 and n = 0.
 * Returns NPUC_ERR_NOMEM only. */
npuc_status npuc__bnf_topo_read(const char *json, npuc__bnf_topo *out);
void npuc__bnf_topo_free(npuc__bnf_topo *t);

/* Rewrites a model_config after folding: the BatchNorm layers bns[k] are
 * removed, their consumers (and the model outputs) wired to what fed them,
 * and the producer layers convs[k] get use_bias = true.  Returns the new
 * JSON (malloc'd) or NULL: *err = 0 when the config was not understood or
 * nothing changed, 1 on allocation failure. */
char *npuc__bnf_topo_rewrite(const char *json, const char *const *bns, const char *const *convs,
                             size_t n, int *err);

/* One stated pair, from --pair or a --pairs file. */
typedef struct npuc__bnf_stmt {
    char *conv, *bn;
    char *origin;         /* "--pair A=B", "pairs.txt:3", "pairs.json: pair 2" */
} npuc__bnf_stmt;

/* Parses the statements (bnfold_explicit.c): "CONV=BN" strings, then the
 * file's lines or JSON.  Errors: NPUC_ERR_ARG for a malformed statement,
 * NPUC_ERR_NOT_FOUND / NPUC_ERR_IO when the file cannot be read. */
npuc_status npuc__bnf_statements(npuc_ctx *ctx, const char *const *pairs, size_t npairs,
                                 const char *file, npuc__bnf_stmt **out, size_t *n);
void npuc__bnf_statements_free(npuc__bnf_stmt *s, size_t n);

/* strcmp, except that runs of digits compare as numbers ("conv2d_9" <
 * "conv2d_10"); ties fall back to strcmp. */
int npuc__bnf_natcmp(const char *a, const char *b);

/* The last component of a Keras or PyTorch path ("model/bn_Conv1" ->
 * "bn_Conv1"). */
const char *npuc__bnf_leaf(const char *s);

/* ------------------------------------------------------------ pair finding */

/* The state of npuc_bnfold_find (bnfold_pairs.c), shared with the rules
 * (bnfold_rules.c). */
#define UNDECIDED (-1) /* bn_state: no rule has decided yet */
#define SKIPPED (-2)   /* bn_state: skipped, reason recorded */
#define CONTESTED (-2) /* claim: two BatchNorms wanted this producer */

typedef struct finder {
    npuc_ctx *ctx;
    npuc_model *m;
    const char *path;
    size_t n;
    npuc_bnfold_plan *plan;
    npuc_bn_tensors *bn;
    size_t nbn, capbn;
    size_t *bn_first;   /* first tensor of each BatchNorm in storage order */
    int64_t *bn_of;     /* tensor -> BatchNorm, or -1 */
    int64_t *bn_state;  /* BatchNorm -> pair, UNDECIDED or SKIPPED */
    int64_t *claim;     /* tensor -> pair it produces for, -1 free, CONTESTED */
    unsigned char *dead; /* pair dropped after a conflict */
    double *bn_eps;     /* epsilon from model_config, NaN when none */
    size_t cappairs, capskips, capdead;
    const char **sorted; /* tensor names in strcmp order, for prefix searches */
    int alphabetical;    /* storage order is name order: it says nothing about the graph */
    npuc__bnf_topo topo;
} finder;

/* Names and shapes (bnfold_pairs.c). */
npuc_status npuc__bnf_nomem(finder *f);
const char *npuc__bnf_tname(const finder *f, size_t i);
long npuc__bnf_last_sep(const char *s, size_t n);       /* last '.' or '/' in s[0..n), or -1 */
char *npuc__bnf_strndup(const char *s, size_t n);
char *npuc__bnf_concat3(const char *a, const char *b, const char *c);
char *npuc__bnf_module_of(const npuc_tensor_info *t);   /* "features.1.running_mean" -> "features.1" */
int npuc__bnf_leaf_is(const char *name, const char *leaf);
int npuc__bnf_has_prefix(const finder *f, const char *module); /* some tensor is module.x or module/x */
int64_t npuc__bnf_module_weight(const finder *f, const char *module); /* module.weight, L/kernel...; -1 */
int npuc__bnf_is_producer(const npuc_tensor_info *t);
int npuc__bnf_channels_match(const npuc_tensor_info *t, int64_t channels, int *groups);
void npuc__bnf_describe_channels(const npuc_tensor_info *t, char *buf, size_t n);
int64_t npuc__bnf_existing_bias(const finder *f, size_t conv);
int64_t npuc__bnf_find_bn_layer(const finder *f, const char *layer);

/* The books (bnfold_pairs.c).  propose pairs conv with BatchNorm b unless the
 * shapes disagree or another BatchNorm claimed conv (then neither folds). */
npuc_status npuc__bnf_add_skip(finder *f, const char *bn, const char *conv, const char *fmt, ...) NPUC_PRINTF(4, 5);
npuc_status npuc__bnf_skip_bn(finder *f, size_t b, const char *conv, const char *why);
npuc_status npuc__bnf_add_pair(finder *f, size_t conv, size_t b, int groups, npuc_bnfold_how how, int guess,
                               const char *why);
npuc_status npuc__bnf_propose(finder *f, size_t conv, size_t b, npuc_bnfold_how how, int guess, const char *why);

/* The rules (bnfold_rules.c), in the order npuc_bnfold_find runs them. */
npuc_status npuc__bnf_rule_explicit(finder *f, const npuc_bnfold_params *p);
npuc_status npuc__bnf_rule_topology(finder *f);
npuc_status npuc__bnf_rule_names(finder *f, size_t b);
npuc_status npuc__bnf_rule_keras_order(finder *f);
int npuc__bnf_is_alphabetical(const finder *f);
npuc_status npuc__bnf_rule_nearest(finder *f, size_t b);
npuc_status npuc__bnf_rule_aligned(finder *f, const size_t *bns, size_t nb);
int npuc__bnf_all_digits(const char *s);

#endif
