/*
 * onnx_model.h - the graph of an ONNX model as plain structs, for the
 * network-graph module (issue 28) to consume; library-private.
 *
 * npuc__onnx_graph_parse() reads it from the "onnx.model" metadata entry
 * the ONNX reader records (onnx_format.h), so it is there for a model
 * opened from an .onnx file and for one converted from it (a safetensors
 * file keeps the entry).  Weights are named, not copied: an initializer is
 * listed by name in its graph's initializers, a Constant node's value by its
 * output name in the attribute's weight field; the tensors themselves are
 * the model's (npuc_model_find by that name).  Everything is owned by the
 * returned struct and freed with npuc__onnx_graph_free().
 */
#ifndef NPUC_ONNX_MODEL_H
#define NPUC_ONNX_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "npuc_internal.h"

/* AttributeProto.AttributeType values. */
enum {
    NPUC__ONNX_ATTR_FLOAT = 1, NPUC__ONNX_ATTR_INT = 2, NPUC__ONNX_ATTR_STRING = 3, NPUC__ONNX_ATTR_TENSOR = 4,
    NPUC__ONNX_ATTR_GRAPH = 5, NPUC__ONNX_ATTR_FLOATS = 6, NPUC__ONNX_ATTR_INTS = 7, NPUC__ONNX_ATTR_STRINGS = 8,
    NPUC__ONNX_ATTR_TENSORS = 9, NPUC__ONNX_ATTR_GRAPHS = 10
};

struct npuc__onnx_graph;

typedef struct npuc__onnx_attr {
    char *name;
    int type;              /* NPUC__ONNX_ATTR_*, 0 when the file does not say */
    float f;
    int64_t i;
    char *s;               /* STRING: the bytes, NUL-terminated (slen excludes it) */
    size_t slen;
    float *floats;
    size_t nfloats;
    int64_t *ints;
    size_t nints;
    char *weight;          /* TENSOR of a Constant's "value": the weight's name */
    unsigned char *tensor; /* any other TENSOR: the TensorProto's bytes */
    size_t tensor_len;
    struct npuc__onnx_graph **graphs; /* GRAPH (one) or GRAPHS */
    size_t ngraphs;
} npuc__onnx_attr;

typedef struct npuc__onnx_node {
    char *name, *op_type, *domain; /* domain "" is the default ai.onnx */
    char **inputs, **outputs;      /* "" for an omitted optional input */
    size_t ninputs, noutputs;
    npuc__onnx_attr *attrs;
    size_t nattrs;
} npuc__onnx_node;

/* A graph input, output or value_info entry: a tensor type and shape. */
typedef struct npuc__onnx_value {
    char *name;
    int elem_type;  /* TensorProto.DataType; 0 when unknown */
    int rank;       /* -1: no shape stated */
    int64_t *dims;  /* rank entries; -1 for a symbolic or unknown dimension */
} npuc__onnx_value;

typedef struct npuc__onnx_graph {
    char *name;
    npuc__onnx_node *nodes;
    size_t nnodes;
    npuc__onnx_value *inputs, *outputs, *value_info;
    size_t ninputs, noutputs, nvalue_info;
    char **initializers; /* names of the graph's weights stored as initializers */
    size_t ninitializers;
} npuc__onnx_graph;

typedef struct npuc__onnx_opset {
    char *domain;
    int64_t version;
} npuc__onnx_opset;

typedef struct npuc__onnx_model {
    int64_t ir_version;
    npuc__onnx_opset *opsets;
    size_t nopsets;
    npuc__onnx_graph *graph;
} npuc__onnx_model;

/* The graph of m from its "onnx.model" entry into *out.  NPUC_ERR_NOT_FOUND
 * when m has no such entry; NPUC_ERR_FORMAT for a malformed one (the entry
 * may come from any file's metadata, so it is parsed as hostile input). */
npuc_status npuc__onnx_graph_parse(npuc_ctx *ctx, const npuc_model *m, npuc__onnx_model **out);
/* The same from a ModelProto's bytes p[0..n) (path names it in messages). */
npuc_status npuc__onnx_graph_parse_bytes(npuc_ctx *ctx, const char *path, const unsigned char *p, size_t n,
                                         npuc__onnx_model **out);
void npuc__onnx_graph_free(npuc__onnx_model *g);

#endif
