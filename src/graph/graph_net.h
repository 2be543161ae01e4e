/*
 * graph_net.h - the network graph a model owns (include/npuc/netgraph.h is its
 * read-only view): building it, checking it, and the edits passes make.
 *
 *   graph_net.c       the object: nodes, values, weights, attributes,
 *                     lookups, copy, and the validity check
 *   graph_net_ops.c   what each format-neutral op does to shapes and
 *                     channels (the op table)
 *   graph_net_edit.c  the edits: remove a node, split one, insert one on an
 *                     edge, resize a value along an axis
 *   graph_net_view.c  the public view and the model's ownership
 *
 * Indices.  Nodes and values live in arrays; an edit may renumber them (a
 * removed node's successors move down), so callers hold names, or indices
 * only between edits.  A value has at most one producer (a node output) or
 * none (a model input); its consumers are found through the nodes' input
 * lists.
 *
 * Edits are all-or-nothing: each works on a copy of the graph, checks the
 * result with npuc__ng_check, and replaces the graph only when it is valid;
 * otherwise the graph is unchanged and ctx holds the reason
 * (NPUC_ERR_ARG for a request that names nothing or breaks a rule,
 * NPUC_ERR_UNSUPPORTED for a shape the graph cannot carry through an op,
 * NPUC_ERR_NOMEM).
 */
#ifndef NPUC_GRAPH_NET_H
#define NPUC_GRAPH_NET_H

#include <stddef.h>
#include <stdint.h>

#include "npuc/netgraph.h"
#include "npuc_internal.h"

/* How far the parser of a file's graph may go (hostile inputs). */
#define NPUC_NG_MAX_NODES ((size_t)1 << 20)
#define NPUC_NG_MAX_EDGES ((size_t)1 << 22)

typedef struct npuc__ng_ev {
    npuc_graph_evidence kind;
    npuc_confidence conf;
    char *why; /* owned; NULL reads as "" */
} npuc__ng_ev;

typedef struct npuc__ng_kv {
    char *key, *val;
} npuc__ng_kv;

typedef struct npuc__ng_node {
    char *name, *op, *source_op;
    size_t *in, nin;
    size_t *out, nout;
    npuc_graph_weight *w; /* tensor and role strings owned */
    size_t nw;
    npuc__ng_kv *attr;
    size_t nattr;
    npuc__ng_ev ev;
    /* The model scope the node was declared in (a Keras configuration's
     * nested models: 0 the outer model, k > 0 the k-th nested one); 0 for
     * a graph without scopes and for nodes an edit adds. */
    size_t scope;
} npuc__ng_node;

typedef struct npuc__ng_value {
    char *name;
    int rank;
    int64_t shape[NPUC_MAX_RANK];
    size_t prod; /* NPUC_GRAPH_NONE: model input or constant */
    int is_input, is_output;
    npuc__ng_ev ev;
} npuc__ng_value;

struct npuc_graph {
    npuc__ng_node *nodes;
    size_t nnodes, capnodes;
    npuc__ng_value *vals;
    size_t nvals, capvals;
    int channels_last; /* Keras / TF: the channel axis of a value is its last; else axis 1 (ONNX, PyTorch) */
    /* Name indexes (open addressing, slot -> index + 1), so lookups stay
     * constant time on a graph of many thousand nodes; NULL: searched
     * linearly (after an allocation failure). */
    size_t *nix, *vix;
    size_t nixcap, vixcap;
};

typedef struct npuc_graph npuc__ng;

/* ------------------------------------------------------------ building (graph_net.c) */

npuc__ng *npuc__ng_new(void);
void npuc__ng_free(npuc__ng *g);
/* FNV-1a of a NUL-terminated name (the graph's name indexes, the Keras
 * reader's tables). */
uint64_t npuc__ng_hash(const char *s);
/* Rebuilds the name indexes (after an edit renumbered nodes or values);
 * on allocation failure lookups fall back to a linear search. */
void npuc__ng_reindex(npuc__ng *g);
/* A deep copy, or NULL when out of memory. */
npuc__ng *npuc__ng_clone(const npuc__ng *g);

/* Adds a value; rank -1 when its shape is not known.  *idx its index.
 * NPUC_ERR_ARG for a name already used, NPUC_ERR_NOMEM. */
npuc_status npuc__ng_add_value(npuc_ctx *ctx, npuc__ng *g, const char *name, int rank, const int64_t *shape,
                               npuc_graph_evidence ev, npuc_confidence conf, const char *why, size_t *idx);
/* Adds a node reading values in[0..nin) and producing out[0..nout) (each
 * output must have no producer yet).  NPUC_ERR_ARG for a name already used,
 * an index out of range or an output that already has a producer. */
npuc_status npuc__ng_add_node(npuc_ctx *ctx, npuc__ng *g, const char *name, const char *op, const char *source_op,
                              const size_t *in, size_t nin, const size_t *out, size_t nout, npuc_graph_evidence ev,
                              npuc_confidence conf, const char *why, size_t *idx);
/* Appends a weight to node i: tensor name, role, the shape it has (rank -1
 * unknown) and its channel axes (-1 none). */
npuc_status npuc__ng_add_weight(npuc_ctx *ctx, npuc__ng *g, size_t node, const char *tensor, const char *role,
                                int rank, const int64_t *shape, int out_axis, int in_axis);
/* Sets (or replaces) attribute key of node i. */
npuc_status npuc__ng_set_attr(npuc_ctx *ctx, npuc__ng *g, size_t node, const char *key, const char *val);
const char *npuc__ng_attr(const npuc__ng *g, size_t node, const char *key);

size_t npuc__ng_find_node(const npuc__ng *g, const char *name);
size_t npuc__ng_find_value(const npuc__ng *g, const char *name);
/* The weight of node i with this role, or NULL. */
npuc_graph_weight *npuc__ng_weight(npuc__ng *g, size_t node, const char *role);
/* Nodes reading value v, in node order, each once; at most max stored,
 * the count returned. */
size_t npuc__ng_consumers(const npuc__ng *g, size_t v, size_t *out, size_t max);

/* Checks g: indices in range, names unique, each value produced once and
 * by the node that lists it, no cycle, and along every edge whose shapes
 * are known, the extents the op table requires (a convolution's kernel
 * input axis against its input's channels, a BatchNorm's vectors against
 * its channels, elementwise inputs alike).  NPUC_OK or NPUC_ERR_VALUE with
 * one line naming the node, the value and both extents. */
npuc_status npuc__ng_check(npuc_ctx *ctx, const npuc__ng *g);

/* ------------------------------------------------------------ the op table (graph_net_ops.c) */

typedef enum npuc__ng_kind {
    NPUC_NG_UNKNOWN = 0,  /* nothing known: shapes stop here */
    NPUC_NG_SOURCE,       /* model input: no inputs */
    NPUC_NG_WEIGHTED,     /* reads channels through a kernel's in axis, makes the kernel's out channels */
    NPUC_NG_DEPTHWISE,    /* a kernel per channel: channels pass through one to one */
    NPUC_NG_CHANNELWISE,  /* vectors per channel (BatchNorm, per-channel scale): channels pass */
    NPUC_NG_ELEMENTWISE,  /* one input, same shape out (activations, dropout, identity) */
    NPUC_NG_SPATIAL,      /* one input; channel axis kept, other axes may change (pool, pad) */
    NPUC_NG_GLOBAL_POOL,  /* spatial axes reduced away: [.., C] out */
    NPUC_NG_MERGE,        /* several inputs of one shape, that shape out (Add, Mul, Max...) */
    NPUC_NG_CONCAT,       /* several inputs joined along an axis */
    NPUC_NG_FLATTEN,      /* all but the batch axis into one */
    NPUC_NG_RESHAPE       /* a stated target shape */
} npuc__ng_kind;

/* The kind of a format-neutral op name ("Conv" -> WEIGHTED). */
npuc__ng_kind npuc__ng_op_kind(const char *op);
const char *npuc__ng_kind_name(npuc__ng_kind k);
/* The channel axis of a value of this rank in g (-1 for rank < 1). */
int npuc__ng_channel_axis(const npuc__ng *g, int rank);

/* ------------------------------------------------------------ edits (graph_net_edit.c) */

/* Removes node `name`, which must have one output and pass one input
 * through with the output's shape (a BatchNorm, an activation, Identity):
 * every consumer of its output reads its first input instead, and a model
 * output becomes that input.  Its weights leave the graph with it.
 * Refused: an unknown node, several outputs, no input, shapes that differ. */
npuc_status npuc__ng_remove_node(npuc_ctx *ctx, npuc__ng **g, const char *name);

/* Splits node `name` (one output) into itself and a new node `second` of op
 * `op2`: the node now produces a new value `mid` (rank mid_rank, -1 when
 * not known), `second` reads mid and produces the node's old output.  The
 * node's weights become w1[0..nw1) (w1 NULL: it keeps its own) and
 * `second` gets w2[0..nw2): x W + b as x A, then B + b.  The check then
 * requires A's out axis, mid's channels and B's in axis to agree.
 * Refused: unknown node, a name in use, several outputs, extents that do
 * not chain. */
npuc_status npuc__ng_split_node(npuc_ctx *ctx, npuc__ng **g, const char *name, const char *second, const char *op2,
                                const char *mid, int mid_rank, const int64_t *mid_shape, const npuc_graph_weight *w1,
                                size_t nw1, const npuc_graph_weight *w2, size_t nw2);

/* Inserts a new node `name` of op `op` (one input, one output of the same
 * shape: DequantizeLinear, an activation, Identity) on the edge from value
 * `value` to node `consumer` (NULL: to every consumer and to the model
 * output when it is one).  The new node's output is a new value `name`
 * ":0" with value's shape.  Refused: unknown value or consumer, a consumer
 * that does not read the value, a name in use. */
npuc_status npuc__ng_insert_node(npuc_ctx *ctx, npuc__ng **g, const char *value, const char *consumer,
                                 const char *name, const char *op);

/* What a resize changed, for the caller to apply to the tensors: weight k
 * of node `node` now has `extent` along `axis`. */
typedef struct npuc__ng_change {
    size_t node, weight;
    int axis;
    int64_t extent;
} npuc__ng_change;

/* Resizes values vals[0..nv) along their channel axis to `extent` (a
 * structured prune of their producers: the producers' kernels' out axis and
 * bias follow), and propagates through consumers: channel-preserving ops
 * (BatchNorm, activations, pooling, depthwise) resize their output and
 * vectors; Flatten its output; Concat its output along the axis; a merge
 * (Add) only when all its inputs are among the resized; a weighted consumer
 * resizes its kernel's in axis and stops.  A Reshape, an unknown op, a
 * merge with an input left at the old size, or a model output reached are
 * refused with the node named.  *changes (malloc'd, may be NULL) lists
 * every weight changed. */
npuc_status npuc__ng_resize(npuc_ctx *ctx, npuc__ng **g, const char *const *vals, size_t nv, int64_t extent,
                            npuc__ng_change **changes, size_t *nchanges);

/* ------------------------------------------------------------ ownership (graph_net_view.c) */

/* The node holding weight tensor `tensor`, or NPUC_GRAPH_NONE. */
size_t npuc__ng_weight_node(const npuc__ng *g, const char *tensor);

/* Writes g, an edited copy of src's graph, back into the metadata entry in
 * which w's format keeps a graph (its row's graph_meta and graph_write),
 * when src has that entry: *out the new value (malloc'd, for
 * npuc_writer_meta under *key) or NULL when the format keeps no graph, src
 * has none, or nothing changed.  Errors as the row's graph_write. */
npuc_status npuc__graph_write_meta(npuc_ctx *ctx, const npuc_writer *w, const npuc_model *src, const npuc__ng *g,
                                   const char **key, char **out);

/* Hands g to m (m frees it on close; a graph it had is freed). */
void npuc__model_set_graph(npuc_model *m, npuc__ng *g);
npuc__ng *npuc__model_graph_mut(npuc_model *m);

#endif
