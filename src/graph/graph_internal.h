/*
 * graph_internal.h - what the graph's own files share (graph.h is what the
 * passes see):
 *
 *   graph_build.c      the object, storage order, channel facts of a tensor
 *   graph_modules.c    the module view
 *   graph_names.c      name rules: prefixes, leaves, PyTorch / Keras / Paddle
 *                      naming conventions, numeric order
 *   graph_keras.c      Keras class families; the consumer view of the
 *                      layers, read from the network graph
 *   graph_kconfig.c    the one reader of a Keras configuration into the
 *                      network graph, and its writer from an edited graph
 *                      (graph_kconfig.h; the formats' graph_write hook)
 *   graph_net*.c       the network graph itself (graph_net.h)
 *   graph_fill.c       building a model's network graph on request
 *   graph_config_check.c  a Keras configuration against its weights
 *   graph_keras_bn.c   model_config: what feeds each BatchNormalization layer
 *                      (walking the network graph)
 *   graph_file.c       reading stated pairs and graph files
 *   graph_edges.c      stated consumer edges (--next, --graph)
 *   graph_next.c       automatic consumer edges
 *   graph_bn.c         the BatchNorm view and the books of attachment
 *   graph_bn_stated.c  attachment rule: the file's own graph (ONNX edges)
 *   graph_bn_rules.c   attachment rules: stated pairs, model_config, names
 *   graph_order.c      attachment rules: Keras layer order, storage order
 */
#ifndef NPUC_GRAPH_INTERNAL_H
#define NPUC_GRAPH_INTERNAL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "graph/graph.h"

/* snprintf that may cut (reasons are for reading, not parsing). */
void npuc__graph_fmt(char *buf, size_t n, const char *fmt, ...) NPUC_PRINTF(3, 4);

/* ------------------------------------------------------------ names (graph_names.c) */

/* Position of the last '.' or '/' in the first n bytes of s, or -1. */
long npuc__graph_last_sep(const char *s, size_t n);
char *npuc__graph_strndup(const char *s, size_t n);
char *npuc__graph_concat3(const char *a, const char *b, const char *c);
/* The prefix naming the layer or module a tensor belongs to:
 * "features.1.running_mean" -> "features.1", "bn_Conv1/gamma:0" -> "bn_Conv1";
 * a name without a separator belongs to its Keras group, if any.  malloc'd. */
char *npuc__graph_module_of(const npuc_tensor_info *t);
/* 1 when the last component of name (without ":0") is leaf. */
int npuc__graph_leaf_is(const char *name, const char *leaf);
/* 1 when name is layer's module: its last component is layer, or it is a
 * Keras 3 variable group ".../<layer>/vars" (the layer holds the group). */
int npuc__graph_names_layer(const char *name, const char *layer);
/* 1 for Keras weight leaves (kernel, gamma, moving_mean...). */
int npuc__graph_is_keras_leaf(const char *name);
/* strcmp, except that runs of digits compare as numbers ("conv2d_9" <
 * "conv2d_10"); ties fall back to strcmp. */
int npuc__graph_natcmp(const char *a, const char *b);
int npuc__graph_all_digits(const char *s);
/* 1 if some tensor is module.x or module/x (needs g->sorted). */
int npuc__graph_has_prefix(const npuc__graph *g, const char *module);
/* The weight tensor of a module or Keras layer ("features.0" ->
 * "features.0.weight"; "Conv1" -> "Conv1/kernel"), or -1. */
int64_t npuc__graph_module_weight(const npuc__graph *g, const char *module);
/* BatchNorm names that name their producer: the BatchNorm word replaced by
 * "conv" (bn1 -> conv1, _batch_norm -> _conv), Keras X_BN / bn_X -> X.
 * malloc'd; NULL when the name has no such form. */
char *npuc__graph_conv_for_bn_leaf(const char *leaf);
char *npuc__graph_keras_producer_name(const char *leaf);
/* A global Paddle/Keras counter name (batch_norm_3, batch_normalization_2). */
int npuc__graph_counter_name(const char *leaf);
/* Keras' automatic layer families ("conv2d", "dense"...), NULL after the last. */
const char *npuc__graph_keras_family(size_t k);
/* batch_normalization_7 and conv2d_7 (or dense_7...) carry the same counter. */
int npuc__graph_same_counter(const char *bn_leaf, const char *layer_leaf);

/* ------------------------------------------------------------ model_config (graph_keras.c) */

/* Class families. */
int npuc__kclass_is_bn(const char *c);
int npuc__kclass_is_fold_producer(const char *c); /* Conv*D, Depthwise/SeparableConv*D, Dense */
int npuc__kclass_channel_axis(const char *c);     /* channels_last output axis, -1 unknown */
int npuc__kclass_passthrough(const char *c);      /* weightless, channel i stays channel i */
int npuc__kclass_weighted(const char *c);         /* a consumer with weights (BatchNorm included) */

/* The consumer view of the top-level layers (g->kl, g->topo). */
npuc_status npuc__graph_read_klayers(npuc_ctx *ctx, npuc__graph *g);
int64_t npuc__graph_find_klayer(const npuc__graph *g, const char *name);

/* The BatchNorm layers and their inputs (g->kbn; graph_keras_bn.c), from
 * the model's network graph (graph_kconfig.c reads the configuration).
 * NPUC_ERR_NOMEM only: a configuration the reader refuses leaves
 * g->kbn_understood 0. */
npuc_status npuc__graph_read_kbn(npuc_ctx *ctx, npuc__graph *g);
void npuc__kbn_edges_free(npuc__graph *g);

/* ------------------------------------------------------------ files (graph_file.c) */

/* The largest graph or pairs file read (bytes): the text is held whole, and
 * the JSON parsed from it takes a small multiple of that. */
#define NPUC__GRAPH_FILE_MAX ((size_t)64 << 20)

/* Reads the whole file path (at most NPUC__GRAPH_FILE_MAX bytes) into *buf,
 * NUL-terminated, length *len (a NUL inside is the caller's to refuse).
 * Every failure is an error whose message starts with label and names the
 * file's role noun ("pairs file"): cannot open (NPUC_ERR_NOT_FOUND / _IO),
 * too large (NPUC_ERR_ARG), out of memory (NPUC_ERR_NOMEM), a read error
 * (NPUC_ERR_IO): never a text silently cut short.  *buf is NULL on error. */
npuc_status npuc__graph_read_text(npuc_ctx *ctx, const char *path, const char *label, const char *noun, char **buf,
                                  size_t *len);

/* Reads the conv and BatchNorm names of a JSON pair object: "conv", and
 * "bn" or one of the BatchNorm's tensors ("gamma", "mean", "var", "beta"). */
void npuc__graph_json_pair(const json_t *o, const char **conv, const char **bn);

/* One stated pair, from "CONV=BN" or a pairs file. */
typedef struct npuc__pair_stmt {
    char *conv, *bn;
    char *origin;         /* "--pair A=B", "pairs.txt:3", "pairs.json: pair 2" */
} npuc__pair_stmt;

/* Parses the statements: "CONV=BN" strings, then the file's lines or JSON.
 * Errors: NPUC_ERR_ARG for a malformed statement, NPUC_ERR_NOT_FOUND /
 * NPUC_ERR_IO when the file cannot be read. */
npuc_status npuc__graph_pair_statements(npuc_ctx *ctx, const char *const *pairs, size_t npairs, const char *file,
                                        npuc__pair_stmt **out, size_t *n);
void npuc__graph_pair_statements_free(npuc__pair_stmt *s, size_t n);

/* ------------------------------------------------------------ attachment (graph_bn.c) */

/* A float weight of rank >= 2 with an output-channel axis that can feed a
 * BatchNorm; never a tensor named as a bias (bias, b_N), whatever its shape. */
int npuc__graph_is_producer(const npuc_tensor_info *t);

#define ATTACH_UNDECIDED (-1) /* state: no rule has decided yet */
#define ATTACH_SKIPPED (-2)   /* state: refused, reason recorded */
#define ATTACH_CONTESTED (-2) /* claim: two BatchNorms wanted this producer */

/* The books of npuc__graph_attach_bns, shared with its rules. */
typedef struct npuc__attach {
    npuc_ctx *ctx;
    npuc__graph *g;
    npuc__bn_attachments *out;
    int64_t *state;       /* BatchNorm -> link, ATTACH_UNDECIDED or ATTACH_SKIPPED */
    int64_t *claim;       /* tensor -> link it produces for, -1 free, ATTACH_CONTESTED */
    size_t caplinks, caprefusals;
} npuc__attach;

npuc_status npuc__attach_nomem(npuc__attach *a);
const char *npuc__attach_tname(const npuc__attach *a, size_t i);
/* Whether producer i of m can feed a BatchNorm of `channels` channels: 1
 * when its channels as the graph decides them (npuc__graph_channels) are
 * `channels`, *groups its stated groups; 2 when only another reading fits (a
 * transposed conv whose file states no groups, read with *groups =
 * channels / its axis-1 extent): a guess, never taken on a guessed pairing;
 * 0 otherwise. */
int npuc__attach_channels_match(const npuc_model *m, size_t i, int64_t channels, int *groups);
void npuc__attach_describe_channels(const npuc_model *m, size_t i, char *buf, size_t n);
/* The existing bias tensor of producer weight conv, or -1. */
int64_t npuc__attach_existing_bias(const npuc__attach *a, size_t conv);

/* A refusal of BatchNorm b (the state is the caller's); refuse also marks b
 * decided.  link records a link; propose links unless the shapes disagree
 * or another BatchNorm claimed conv (then neither holds). */
npuc_status npuc__attach_refusal(npuc__attach *a, size_t b, const char *conv, const char *fmt, ...) NPUC_PRINTF(4, 5);
npuc_status npuc__attach_refuse(npuc__attach *a, size_t b, const char *conv, const char *why);
npuc_status npuc__attach_link(npuc__attach *a, size_t conv, size_t b, int groups, npuc__evidence ev, int guess,
                              const char *why);
npuc_status npuc__attach_propose(npuc__attach *a, size_t conv, size_t b, npuc__evidence ev, int guess,
                                 const char *why);

/* What the file's own graph states about the BatchNorms (graph_bn_stated.c):
 * node_of maps a tensor to the node reading it as a weight; ng is NULL when
 * the model carries no graph. */
typedef struct npuc__graph_stated {
    const struct npuc_graph *ng;
    size_t *node_of;      /* tensor -> node, NPUC_GRAPH_NONE, or (size_t)-2 for several */
} npuc__graph_stated;

/* NPUC_ERR_NOMEM only. */
npuc_status npuc__graph_stated_open(npuc_ctx *ctx, const npuc__graph *g, npuc__graph_stated *s);
void npuc__graph_stated_close(npuc__graph_stated *s);
/* BatchNorm b as the file's graph states it: -1 it states nothing (no
 * BatchNormalization node stated by the file reads b's tensors); 1 its
 * producer is weight tensor *w; 0 it cannot be folded.  why (n bytes) says
 * what the graph states; *node the producer's kernel or node considered (or
 * NULL), borrowed. */
int npuc__graph_stated_verdict(const npuc__graph *g, const npuc__graph_stated *s, size_t b, int64_t *w,
                               const char **node, char *why, size_t n);

/* The rules, in the order npuc__graph_attach_bns runs them (graph_bn_stated.c,
 * graph_bn_rules.c, graph_order.c). */
npuc_status npuc__attach_rule_stated_graph(npuc__attach *a);
npuc_status npuc__attach_rule_explicit(npuc__attach *a, const char *const *pairs, size_t npairs, const char *file);
npuc_status npuc__attach_rule_topology(npuc__attach *a);
npuc_status npuc__attach_rule_names(npuc__attach *a, size_t b);
npuc_status npuc__attach_rule_keras_order(npuc__attach *a);
npuc_status npuc__attach_rule_nearest(npuc__attach *a, size_t b);
npuc_status npuc__attach_rule_aligned(npuc__attach *a, const size_t *bns, size_t nb);

#endif
