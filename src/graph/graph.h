/*
 * graph.h - what a weight file tells about its network (library-private):
 * modules and their roles, producer -> consumer edges, and which layer feeds
 * each BatchNorm.  Every edge and attachment records its evidence.
 *
 * A weight file has no graph.  What it does carry, from most to least
 * certain:
 *   explicit     what the caller states: --pair/--pairs (conv -> BatchNorm),
 *                --next/--graph (producer -> consumers, bn_pairs)
 *   config       a Keras model_config (HDF5 root attribute or safetensors
 *                metadata): inbound nodes name each layer's inputs exactly
 *   name         naming conventions: nn.Sequential indices (features.0 ->
 *                features.1), conv1 / bn1, X / X_BN, Keras numbering
 *   layer-order  Keras layer_names order (HDF5 Keras files)
 *   order        tensor storage order (a guess); alphabetical storage says
 *                nothing about the graph, and then only the numbers in the
 *                names (conv2d_9 before conv2d_10) can stand in for it
 * Evidence below config can be wrong: a link that only order or numbering
 * supports (or conv1/bn1 names in alphabetical storage, which cannot tell a
 * pre-activation block) is marked a guess, which fold-bn lists and applies
 * only with --accept-guesses.  A tensor named as a bias is never a producer.
 *
 * The graph holds no pass knowledge: it answers "which BatchNorm follows
 * which producer" (fold-bn) and "which layers consume a module's channels"
 * (structured pruning); what a pass does with the answer is the pass's.
 * The two questions grew up separately and still group tensors their own
 * way: modules (npuc__graph_read_modules) key on the Keras group, else the
 * name up to its last '/' (Keras) or '.'; BatchNorms (npuc__graph_read_bns)
 * on the name up to its last '.' or '/' without a Keras ":0" suffix.  Both
 * groupings are kept so each pass decides exactly as it did; a BatchNorm is
 * one type (npuc__bn) in both.  A weight's channels are one decision for
 * both questions (npuc__graph_channels).
 *
 *     npuc__graph *g;
 *     npuc_status st = npuc__graph_open(ctx, m, &g);
 *     if (st == NPUC_OK) st = npuc__graph_read_bns(ctx, g);
 *     npuc__bn_attachments a;
 *     if (st == NPUC_OK) st = npuc__graph_attach_bns(ctx, g, NULL, 0, NULL, &a);
 *     ... a.links[k]: BatchNorm g->bns[a.links[k].bn] follows tensor a.links[k].producer
 *     npuc__bn_attachments_free(&a);
 *     npuc__graph_free(g);
 */
#ifndef NPUC_GRAPH_H
#define NPUC_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "npuc_internal.h"

/* ------------------------------------------------------------ evidence */

/* What a decision rests on, most certain first. */
typedef enum npuc__evidence {
    NPUC_EVIDENCE_EXPLICIT = 0,    /* stated by the caller */
    NPUC_EVIDENCE_CONFIG = 1,      /* Keras model_config inbound nodes */
    NPUC_EVIDENCE_NAME = 2,        /* a naming convention */
    NPUC_EVIDENCE_LAYER_ORDER = 3, /* Keras layer_names order */
    NPUC_EVIDENCE_ORDER = 4,       /* tensor storage order */
    NPUC_EVIDENCE_GRAPH = 5        /* the file's own graph (ONNX nodes and edges): certain,
                                      numbered last so the others keep their values */
} npuc__evidence;

/* "explicit", "config", "name", "layer-order", "order", "graph"; "?" if invalid. */
const char *npuc__evidence_name(npuc__evidence e);

/* ------------------------------------------------------------ the graph */

#define NPUC_GRAPH_MAX_NEXT 32 /* consumers of one module, BatchNorms on one space */

/* One BatchNorm: its tensors as indices into the model (-1 when absent) and
 * what the graph read about it.  One type for both views: a module's
 * BatchNorm (npuc__mod.bn, read by npuc__graph_read_modules: tensors and
 * mod) and the BatchNorm view (g->bns, npuc__graph_read_bns: every field but
 * mod). */
typedef struct npuc__bn {
    char *name;       /* BatchNorm view: module prefix or Keras layer, "features.1", "bn_Conv1"
                         (owned by g->bns); NULL in a module's copy (its key names it) */
    int64_t gamma, beta, mean, var, count; /* count: PyTorch num_batches_tracked */
    size_t mod;       /* module view: its module */
    int64_t channels; /* BatchNorm view: its channel count */
    int keras;        /* Keras names (gamma, moving_mean...) */
    size_t first;     /* its first tensor in storage order */
    double config_eps; /* its epsilon in model_config, NaN when none */
    npuc__evidence evidence; /* of its role: name, or config when model_config lists the layer */
} npuc__bn;

/* A module (PyTorch) or layer (Keras): the tensors sharing a name prefix.
 * Its role comes from the roles core guessed for its tensors, i.e. from
 * names and shapes (evidence: name). */
typedef struct npuc__mod {
    char *key;        /* "features.3", "Conv1", "conv2d_6" (owned) */
    int64_t weight;   /* float tensor of rank >= 2 with a layout, or -1 */
    int64_t bias;     /* its rank-1 bias, or -1 */
    int is_bn;        /* a BatchNorm: bn holds its tensors */
    npuc__bn bn;
    int other;        /* holds tensors that are none of these (LayerNorm, ...) */
    size_t first;     /* storage index of its first tensor */
    npuc__evidence evidence; /* of its role */
} npuc__mod;

/* A Keras model_config layer and its edges (consumer view, graph_keras.c). */
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

/* A stated producer -> consumers edge (--next, --graph). */
typedef struct npuc__xedge {
    size_t prod;      /* module */
    size_t *cons;     /* modules */
    size_t ncons;
    char *text;       /* the statement, for messages */
} npuc__xedge;

/* A stated producer -> BatchNorm attachment (--graph bn_pairs). */
typedef struct npuc__xbn {
    size_t prod;      /* module */
    size_t bn;        /* BatchNorm module */
} npuc__xbn;


/* A BatchNormalization layer of a Keras model_config and what feeds it
 * (graph_keras_bn.c). */
typedef struct npuc__kbn_edge {
    char *bn;             /* the BatchNorm layer's name */
    char *producer;       /* the layer feeding it, or NULL (several inputs, none) */
    char *producer_class; /* its class_name, or NULL */
    char skip[160];       /* why the producer's output cannot be taken as the BatchNorm's input
                             alone; "" when it can */
    double eps;           /* the layer's epsilon, NaN when the config has none */
    int shared;           /* the BatchNorm layer is applied to several inputs */
} npuc__kbn_edge;

typedef struct npuc__graph {
    npuc_model *m;
    const char *path;
    size_t n;             /* tensors */
    int alphabetical;     /* storage order is name order: it says nothing about the graph */
    int no_guess;         /* set by the caller: consumer queries refuse what only order supports */

    /* Modules and consumer edges (npuc__graph_read_modules, _read_next). */
    npuc__mod *mods;
    size_t nmods, capmods;
    size_t *mod_of;       /* tensor -> module */
    int keras;            /* Keras names or an HDF5 Keras tree */
    int layer_order;      /* Keras layer order without model_config */
    npuc__klayer *kl;     /* model_config layers, when topo */
    size_t nkl;
    int topo;             /* model_config understood */
    npuc__xedge *xe;
    size_t nxe;
    npuc__xbn *xb;
    size_t nxb;

    /* BatchNorms (npuc__graph_read_bns). */
    npuc__bn *bns;
    size_t nbn, capbn;
    int64_t *bn_of;       /* tensor -> BatchNorm, or -1 */
    const char **sorted;  /* tensor names in strcmp order, for prefix searches */
    npuc__kbn_edge *kbn;  /* model_config BatchNorm layers and their inputs */
    size_t nkbn;
    int kbn_understood;   /* model_config parsed and had a layer list */
} npuc__graph;

/* Opens the graph of m: names and storage order only.  The views are read
 * on demand by the functions below.  NPUC_ERR_NOMEM only. */
npuc_status npuc__graph_open(npuc_ctx *ctx, npuc_model *m, npuc__graph **out);
/* Reads the model's network graph (npuc_model_read_graph), so that what the
 * file states there (a transposed conv's groups: npuc__graph_channels) is
 * known to the pass from the start; a graph the reader refuses states
 * nothing.  Passes call it after npuc__graph_open (the graph's own
 * inference opens a npuc__graph too, so npuc__graph_open cannot).
 * NPUC_ERR_NOMEM only. */
npuc_status npuc__graph_read_stated(npuc_ctx *ctx, npuc__graph *g);
/* Frees g and everything it read; NULL is a no-op. */
void npuc__graph_free(npuc__graph *g);

static inline const npuc_tensor_info *npuc__gt(const npuc__graph *g, int64_t i) {
    return npuc_model_tensor(g->m, (size_t)i);
}

/* ------------------------------------------------------------ tensors */

/* 1 for a Keras 3 variable path ".../vars/<digits>" (unnamed, Keras defaults
 * apply: a BatchNorm's epsilon is 1e-3). */
int npuc__graph_is_keras3_var(const char *name);

/* Output / input channel axis of a weight tensor, -1 when it has none. */
int npuc__out_axis(const npuc_tensor_info *t);
int npuc__in_axis(const npuc_tensor_info *t);
/* Output channels of a weight (its layout view's C), input channels (the
 * layout's input axis); 0 when undefined. */
uint64_t npuc__out_channels(const npuc_tensor_info *t);
uint64_t npuc__in_channels(const npuc_tensor_info *t);
/* A depthwise conv passing `channels` channels through one to one
 * (channels 0: any depthwise convolution). */
int npuc__is_dw(const npuc_tensor_info *t, uint64_t channels);

/* A weight's output channels as the graph decides them, once, for every pass
 * (fold-bn's pairing and folding, structured prune's chains and plan).  From
 * the layout's output axis; for a transposed conv (IOHW [in, out/groups, ..])
 * the groups come only from the file: a `group`/`groups` attribute of the
 * node holding the weight (ONNX ConvTranspose, a Keras config), else 1 by
 * convention.  A BatchNorm's channel count never changes this reading: a pass
 * that would need another (groups inferred from a BatchNorm) says so as a
 * guess.  An ONNX ConvTranspose with group == C and W [C,1,k..] is already a
 * depthwise kernel (role dwconv, channels on axis 0). */
typedef struct npuc__chan {
    int axis;                /* output-channel axis, -1 when none */
    uint64_t channels;       /* output channels; 0 when undefined */
    int groups;              /* groups of a transposed conv stated by the file, else 1 */
    int depthwise;           /* a depthwise conv (channels pass one to one) */
    int stated;              /* groups come from the file's graph */
    npuc_confidence confidence; /* of the reading: the layout's, CERTAIN when the group is stated */
    const char *evidence;    /* one short phrase (static) */
} npuc__chan;

/* Fills *c for tensor i of m; returns c->channels. */
uint64_t npuc__graph_channels(const npuc_model *m, size_t i, npuc__chan *c);

/* ------------------------------------------------------------ modules and consumers */

/* Groups the tensors into modules, reads a Keras model_config into layers
 * with their edges (a config it does not understand leaves g->topo = 0,
 * never an error), and notes whether Keras layer order is available.
 * NPUC_ERR_NOMEM only. */
npuc_status npuc__graph_read_modules(npuc_ctx *ctx, npuc__graph *g);
/* The module with this key, or -1. */
int64_t npuc__find_mod(const npuc__graph *g, const char *key);
/* The module of tensor i. */
const npuc__mod *npuc__graph_mod(const npuc__graph *g, size_t tensor);
/* 1 when weight tensor w is a depthwise convolution passing `channels`
 * channels through one to one (channels 0: any depthwise convolution). */
int npuc__graph_is_dw(const npuc__graph *g, size_t w, uint64_t channels);
/* A BatchNorm module's channel count, 0 when undefined. */
uint64_t npuc__bn_channels(const npuc__graph *g, const npuc__bn *b);

/* Reads stated consumer edges (graph_edges.c): "PRODUCER=CONSUMER[,...]"
 * statements (--next) and a graph file (JSON {"next": {...}, "bn_pairs":
 * [...]} or lines "A=B[,C]").  Each edge is checked as it is read: names
 * must resolve to a tensor or module, and the consumer must read (or, a
 * depthwise conv, pass through) as many channels as the producer makes.
 * Failures are NPUC_ERR_ARG naming the statement; NPUC_ERR_NOT_FOUND /
 * NPUC_ERR_IO when the file cannot be read.  Needs the modules. */
npuc_status npuc__graph_read_next(npuc_ctx *ctx, npuc__graph *g, const char *const *next, size_t nnext,
                                  const char *file);
/* The stated edge out of module x, or NULL; the stated BatchNorm module
 * after x, or -1. */
const npuc__xedge *npuc__graph_stated_next(const npuc__graph *g, size_t x);
int64_t npuc__graph_stated_bn(const npuc__graph *g, size_t x);

/* The modules directly after a module by the automatic evidence
 * (graph_next.c). */
typedef struct npuc__next {
    size_t mod[NPUC_GRAPH_MAX_NEXT]; /* weighted modules (BatchNorms included) */
    size_t n;
    npuc__evidence evidence;  /* config, layer-order or name */
    int guess;                /* order only supports it (set even when the search then failed) */
    int output;               /* the space reaches the model output */
    char why[200];            /* when no answer: why not */
    char guess_why[200];      /* when guess: what the guess rests on, for the warning */
} npuc__next;

/* Fills r with the modules consuming module x's output: from model_config
 * when understood (through channel-preserving weightless layers), else the
 * next Keras layer (a guess), else nn.Sequential naming.  Returns 0, or 1
 * with r->why when the consumers cannot be told; g->no_guess refuses what
 * only order supports. */
int npuc__graph_next(const npuc__graph *g, size_t x, npuc__next *r);
/* The evidence npuc__graph_next uses for this file. */
npuc__evidence npuc__graph_next_evidence(const npuc__graph *g);

/* ------------------------------------------------------------ consistency (graph_consistency.c) */

/* Checks that every tensor attached to a channel set has the set's extent,
 * wherever the graph knows the attachment by trustworthy evidence: a
 * weight's bias (X.weight / X.bias, L/kernel / L/bias, X.w_0 / X.b_0), the
 * tensors of one BatchNorm among themselves, and along every consumer edge
 * that is stated (next / graph_file, as for npuc__graph_read_next), read
 * from a Keras model_config or given by nn.Sequential naming (never by
 * storage or layer order): the BatchNorm after a layer, a depthwise conv
 * passing its channels through, and the consumer's input axis (a dense
 * layer after a convolution is skipped: a Flatten may sit between).  An npuc
 * artifact is checked in its logical view (each encoded tensor with the
 * shape its "npuc" entry records).  Returns NPUC_ERR_VALUE with a one-line
 * message naming both tensors and their extents; NPUC_ERR_ARG for a stated
 * edge that does not fit or cannot be read (npuc__graph_read_next's errors);
 * NPUC_ERR_FORMAT for a malformed "npuc" entry; NPUC_ERR_NOMEM. */
npuc_status npuc__graph_check_consistency(npuc_ctx *ctx, npuc_model *m, const char *const *next, size_t nnext,
                                          const char *graph_file);
/* The same for tensors not yet in a file: the n infos a pass declared for
 * its output at path, with the output's metadata (model_config, the "npuc"
 * artifact entry).  The pass driver runs it before an output is published. */
npuc_status npuc__graph_check_declared(npuc_ctx *ctx, const char *path, const npuc_tensor_info *t, size_t n,
                                       char *const *meta_k, char *const *meta_v, size_t nmeta);
/* The same along the stated edges too (a pass's --next / --graph). */
npuc_status npuc__graph_check_declared_edges(npuc_ctx *ctx, const char *path, const npuc_tensor_info *t, size_t n,
                                             char *const *meta_k, char *const *meta_v, size_t nmeta,
                                             const char *const *next, size_t nnext, const char *graph_file);

/* ------------------------------------------------------------ BatchNorm attachment */

/* Collects the BatchNorms (tensors sharing a prefix with running mean and
 * variance; gamma/beta alone are a LayerNorm and left out) and reads the
 * Keras model_config's BatchNorm layers.  NPUC_ERR_FORMAT for BatchNorm
 * tensors whose shapes disagree or two tensors of one kind,
 * NPUC_ERR_UNSUPPORTED for a non-float one, NPUC_ERR_NOMEM. */
npuc_status npuc__graph_read_bns(npuc_ctx *ctx, npuc__graph *g);
/* The BatchNorm named by a module / layer name (exactly, or as the last
 * component of a nested Keras name), or -1. */
int64_t npuc__graph_find_bn(const npuc__graph *g, const char *layer);

/* BatchNorm b follows producer weight tensor `producer`. */
typedef struct npuc__bn_link {
    size_t bn;            /* index into g->bns */
    size_t producer;      /* the producer's weight tensor */
    int groups;           /* > 1 only for grouped transposed convs (IOHW) */
    npuc__evidence evidence;
    int guess;            /* only order or numbering supports it, or groups_guessed */
    int groups_guessed;   /* groups inferred from the BatchNorm, not stated by the file (a guess) */
    int dropped;          /* a later rule gave the producer a second BatchNorm: neither holds */
    char why[200];        /* the evidence, for a reader */
} npuc__bn_link;

/* A BatchNorm left without a producer (or a link dropped), and why. */
typedef struct npuc__bn_refusal {
    size_t bn;            /* index into g->bns */
    char *producer;       /* the producer or layer considered, or NULL; owned */
    char why[200];
} npuc__bn_refusal;

typedef struct npuc__bn_attachments {
    npuc__bn_link *links;       /* in the order they were found */
    size_t nlinks;
    npuc__bn_refusal *refusals; /* in the order they were decided */
    size_t nrefusals;
    size_t nstated;             /* BatchNorms the file's own graph decided (graph_bn_stated.c) */
} npuc__bn_attachments;

/* Finds the producer of every BatchNorm (graph_bn.c; docs/fold-bn.md has
 * the rules).  With stated pairs ("CONV=BN" strings and/or a pairs file),
 * only they link and every other BatchNorm is refused (a pair the file's own
 * graph contradicts is NPUC_ERR_ARG); else each BatchNorm goes through the
 * file's own graph (ONNX edges), model_config, names, Keras layer order and
 * storage order, and the first rule with an answer decides.  A producer two BatchNorms reach
 * through automatic rules links to neither (both refused, the first link
 * marked dropped).  Errors: NPUC_ERR_ARG for a bad statement (unknown name,
 * not a float conv/linear weight, stated twice, channels that differ),
 * NPUC_ERR_NOT_FOUND / NPUC_ERR_IO for an unreadable pairs file,
 * NPUC_ERR_FORMAT for model_config contradicting the file; *out is then
 * empty.  Needs npuc__graph_read_bns. */
npuc_status npuc__graph_attach_bns(npuc_ctx *ctx, npuc__graph *g, const char *const *pairs, size_t npairs,
                                   const char *pairs_file, npuc__bn_attachments *out);
void npuc__bn_attachments_free(npuc__bn_attachments *a);

/* ------------------------------------------------------------ names */

/* The last component of a Keras or PyTorch path ("model/bn_Conv1" ->
 * "bn_Conv1"). */
const char *npuc__graph_leaf(const char *s);
/* The bias belonging to producer weight name w: "X.weight" -> "X.bias",
 * "X.w_0" -> "X.b_0", "L/kernel:0" -> "L/bias:0", else "w.bias"; malloc'd,
 * NULL when out of memory.  The name is returned whether or not such a
 * tensor exists. */
char *npuc__graph_bias_name(const char *w);

/* A Keras model_config is read by graph_kconfig.c into the network graph and
 * written back from an edited graph by npuc__kconfig_write (the formats'
 * graph_write hook). */

#endif
