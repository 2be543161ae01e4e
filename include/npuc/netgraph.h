/*
 * npuc/netgraph.h - the network graph a model carries, read-only.
 *
 * A model may carry a graph of its network: nodes (one operation each: a
 * convolution, a dense layer, a BatchNorm, an activation, an Add...), the
 * values that flow between them, and which weight tensors of the file each
 * node consumes, in which role.  Every node and every value records the
 * evidence it rests on and how sure that is:
 *
 *   FILE    stated by the file's own graph (ONNX nodes and edges)
 *   CONFIG  read from a configuration the file carries (Keras model_config,
 *           Keras 3 config.json)
 *   NAME    inferred from tensor names (nn.Sequential indices, X.weight /
 *           X.bias, Keras layer groups)
 *   ORDER   inferred from storage order alone (a guess)
 *
 * with an npuc_confidence (certain / convention / guess) and a short phrase
 * saying why.  npuc_model_read_graph builds it from what the file's reader
 * stored (a Keras configuration, else the tensor names); `npuc info --graph`
 * and `npuc info --json` show it, and `npuc validate --deep` checks a
 * configuration against the weights with it.
 *
 * Nodes and values are numbered 0..count-1; a value's producer is a node
 * index or NPUC_GRAPH_NONE for a model input.  Every string and array a
 * function here returns is borrowed from the model and stays valid until
 * the model is closed or a pass edits the graph.
 *
 * Example:
 *     if (npuc_model_read_graph(ctx, m) != NPUC_OK) return npuc_ctx_errmsg(ctx);
 *     const npuc_graph *g = npuc_model_graph(m);
 *     for (size_t i = 0; g && i < npuc_graph_node_count(g); i++) {
 *         npuc_graph_node n;
 *         npuc_graph_get_node(g, i, &n);
 *         printf("%s %s (%s)\n", n.op, n.name, npuc_graph_evidence_name(n.evidence));
 *     }
 */
#ifndef NPUC_NETGRAPH_H
#define NPUC_NETGRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "api.h"

#include "model.h"
#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NPUC_GRAPH_NONE ((size_t)-1)

typedef enum npuc_graph_evidence {
    NPUC_GRAPH_EV_FILE = 0,
    NPUC_GRAPH_EV_CONFIG = 1,
    NPUC_GRAPH_EV_NAME = 2,
    NPUC_GRAPH_EV_ORDER = 3,
    NPUC_GRAPH_EV_COUNT = 4
} npuc_graph_evidence;

typedef struct npuc_graph npuc_graph;

/* One weight tensor a node consumes. */
typedef struct npuc_graph_weight {
    const char *tensor;   /* the model's tensor name */
    const char *role;     /* "kernel", "bias", "gamma", "beta", "mean", "var", "recurrent", ... */
    int rank;             /* the shape the graph expects of it (-1: not known) */
    int64_t shape[NPUC_MAX_RANK];
    int out_axis;         /* the axis of the node's output channels, -1 none */
    int in_axis;          /* the axis of the node's input channels, -1 none */
} npuc_graph_weight;

typedef struct npuc_graph_node {
    const char *name;     /* unique in the graph */
    const char *op;       /* format-neutral operation: "Conv", "Gemm", "BatchNormalization", "Relu", ... */
    const char *source_op; /* the file's own name for it ("Conv2D", "Dense"), or NULL */
    const size_t *inputs; /* value indices, in order */
    size_t ninputs;
    const size_t *outputs;
    size_t noutputs;
    const npuc_graph_weight *weights;
    size_t nweights;
    size_t nattrs;        /* npuc_graph_node_attr */
    npuc_graph_evidence evidence;
    npuc_confidence confidence;
    const char *why;      /* one short phrase */
} npuc_graph_node;

typedef struct npuc_graph_value {
    const char *name;
    size_t producer;      /* node index, or NPUC_GRAPH_NONE for a model input */
    size_t nconsumers;    /* nodes reading it (a node reading it twice counts once) */
    int rank;             /* -1 when not known */
    int64_t shape[NPUC_MAX_RANK]; /* -1: this extent not known (batch) */
    int is_input, is_output;
    npuc_graph_evidence evidence;
    npuc_confidence confidence;
    const char *why;
} npuc_graph_value;

/* Builds m's graph once (later calls return at once): from a Keras
 * configuration the file carries (metadata model_config, which a .keras
 * archive's config.json becomes), else from tensor names and storage order,
 * as nodes whose evidence says so; every tensor is attached to its layer's
 * node as a weight.  NPUC_ERR_FORMAT with one line naming the file and the
 * layer for a configuration that is malformed or hostile (duplicate keys,
 * a cycle, a layer consuming itself, nesting or sizes beyond the limits);
 * NPUC_ERR_NOMEM.  Reads names, shapes and metadata only, no payload. */
NPUC_API npuc_status npuc_model_read_graph(npuc_ctx *ctx, npuc_model *m);
/* Checks that a Keras configuration m carries still describes its weights:
 * each layer's filters / units / depth_multiplier against the kernel of its
 * node, and every kernel's input axis against a value of known shape.
 * NPUC_OK when m has no configuration or is an npuc artifact (decompress it
 * first); NPUC_ERR_VALUE with one line naming the file, the layer, the
 * field, the tensor and both counts; the errors of npuc_model_read_graph.
 * `npuc validate --deep` runs it. */
NPUC_API npuc_status npuc_model_check_graph(npuc_ctx *ctx, npuc_model *m);
/* The graph m carries, or NULL when none was read. */
NPUC_API const npuc_graph *npuc_model_graph(const npuc_model *m);

/* Nodes / values in g (0 for NULL). */
NPUC_API size_t npuc_graph_node_count(const npuc_graph *g);
/* (see npuc_graph_node_count) */
NPUC_API size_t npuc_graph_value_count(const npuc_graph *g);
/* Fills *out for node / value i; NPUC_ERR_ARG when i is out of range. */
NPUC_API npuc_status npuc_graph_get_node(const npuc_graph *g, size_t i, npuc_graph_node *out);
NPUC_API npuc_status npuc_graph_get_value(const npuc_graph *g, size_t i, npuc_graph_value *out);
/* Attribute k of node i as key and value text (JSON numbers and strings as
 * written: "3", "same"); 0, or -1 when out of range. */
NPUC_API int npuc_graph_node_attr(const npuc_graph *g, size_t i, size_t k, const char **key, const char **value);
/* The node / value with this name, or NPUC_GRAPH_NONE. */
NPUC_API size_t npuc_graph_find_node(const npuc_graph *g, const char *name);
NPUC_API size_t npuc_graph_find_value(const npuc_graph *g, const char *name);
/* The node consuming weight tensor `tensor`, or NPUC_GRAPH_NONE; *k its
 * index among that node's weights (k may be NULL). */
NPUC_API size_t npuc_graph_weight_node(const npuc_graph *g, const char *tensor, size_t *k);
/* "file", "config", "name", "order"; "?" when invalid (static). */
NPUC_API const char *npuc_graph_evidence_name(npuc_graph_evidence e);

#ifdef __cplusplus
}
#endif
#endif
