/*
 * onnx_format.h - what the ONNX reader, writer and wire helpers share
 * (library-private).  docs/onnx.md says what npuc reads and writes.
 *
 * ONNX files are protobuf messages (onnx/onnx.proto).  npuc parses the
 * wire format by hand (onnx_wire.c) instead of generating code: the reader
 * walks the messages it needs (ModelProto -> GraphProto -> NodeProto ->
 * AttributeProto -> TensorProto, subgraphs included) straight from a map of
 * the file and records where each weight's bytes are, so payloads are read
 * with pread when a tensor is loaded, never unpacked into memory up front;
 * every other field is copied as bytes, so unknown fields survive.
 *
 * The graph travels with the model as the metadata entry "onnx.model": the
 * ModelProto in base64 with the payloads of the weights (and
 * metadata_props, which become ordinary metadata) taken out.  The writer
 * rebuilds the file from it, putting each declared tensor's bytes where
 * its weight was.
 */
#ifndef NPUC_ONNX_FORMAT_H
#define NPUC_ONNX_FORMAT_H

#include "format_row.h"

/* The metadata key that carries the graph (see above). */
#define NPUC__ONNX_MODEL_KEY "onnx.model"
/* Deepest nesting of graphs (If/Loop/Scan bodies) npuc follows. */
#define NPUC__ONNX_MAX_DEPTH 32
/* protobuf refuses messages of 2 GiB or more. */
#define NPUC__ONNX_PROTO_MAX 0x7fffffffull

/* ---- wire format (onnx_wire.c) */

typedef struct npuc__ox_field {
    uint32_t num;
    unsigned wt;                /* 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32 */
    uint64_t v;                 /* wt 0, 1, 5: the value */
    const unsigned char *data;  /* wt 2: the payload, len bytes */
    uint64_t len;
    const unsigned char *start, *end; /* the whole field, tag included */
} npuc__ox_field;

/* Reads one varint at *p (before end) into *v and advances *p; NULL, or a
 * static phrase saying what is wrong. */
const char *npuc__ox_varint(const unsigned char **p, const unsigned char *end, uint64_t *v);
/* Reads the field at *p (before end) and advances *p past it; NULL, or a
 * static phrase saying what is wrong (truncated varint, length past the
 * end, a group or unknown wire type, field number 0). */
const char *npuc__ox_next(const unsigned char **p, const unsigned char *end, npuc__ox_field *f);

/* An output under construction: bytes plus holes, ranges of known size whose
 * bytes a tensor's payload fills later (the writer). */
typedef struct npuc__ox_hole {
    uint64_t pos;  /* byte position in the buffer the hole sits at */
    uint64_t size; /* its length in the output */
    size_t idx;    /* the tensor whose bytes go there */
} npuc__ox_hole;

typedef struct npuc__ox_buf {
    unsigned char *p;
    size_t n, cap;
    npuc__ox_hole *h;
    size_t nh, caph;
    uint64_t holes; /* sum of the holes' sizes */
    int oom;        /* an append failed: the buffer is incomplete */
} npuc__ox_buf;

void npuc__ox_put(npuc__ox_buf *b, const void *p, size_t n);
void npuc__ox_put_varint(npuc__ox_buf *b, uint64_t v);
void npuc__ox_put_tag(npuc__ox_buf *b, uint32_t num, unsigned wt);
/* A length-delimited field num holding n bytes at p. */
void npuc__ox_put_bytes(npuc__ox_buf *b, uint32_t num, const void *p, size_t n);
/* A field num holding a hole of size bytes for tensor idx. */
void npuc__ox_put_hole(npuc__ox_buf *b, uint32_t num, uint64_t size, size_t idx);
/* Field num holding child (a sub-message, holes included); frees child. */
void npuc__ox_put_sub(npuc__ox_buf *b, uint32_t num, npuc__ox_buf *child);
/* The fields of the TensorProto msg[0..len) except its values (the typed
 * data fields, raw_data, external_data, data_location): name, dims,
 * data_type, doc_string and unknown fields, as they are.  msg is already
 * checked. */
void npuc__ox_put_tensor_meta(npuc__ox_buf *b, const unsigned char *msg, uint64_t len);
static inline uint64_t npuc__ox_size(const npuc__ox_buf *b) { return b->n + b->holes; }
void npuc__ox_free(npuc__ox_buf *b);

/* base64 (RFC 4648, with padding): encode into a malloc'd string; decode
 * into a malloc'd buffer (-1 for text that is not base64). */
char *npuc__ox_b64_encode(const unsigned char *p, size_t n);
int npuc__ox_b64_decode(const char *s, unsigned char **out, size_t *n);

/* ---- ONNX data types (TensorProto.DataType) */

/* The npuc dtype of ONNX data_type t and the typed field its values are in
 * when not in raw_data (4 float_data, 5 int32_data, 7 int64_data,
 * 10 double_data, 11 uint64_data); -1 for a type npuc does not carry as a
 * tensor (STRING, COMPLEX, 4-bit, ...). */
int npuc__ox_dtype(uint64_t t, npuc_dtype *dt, uint32_t *field);
/* The ONNX data_type of npuc dtype dt. */
uint64_t npuc__ox_type_of(npuc_dtype dt);

/* ---- walking a ModelProto (onnx_walk.c) */

/* One weight the walker found: an initializer, or a Constant node's value. */
typedef struct npuc__ox_weight {
    const char *name;              /* initializer name or the Constant's output */
    const unsigned char *msg;      /* the TensorProto's bytes */
    uint64_t len;
    int constant;                  /* 1: a Constant node's "value" */
    int depth;                     /* 0: the main graph, else the subgraph depth */
} npuc__ox_weight;

typedef struct npuc__ox_walk {
    npuc_ctx *ctx;
    const char *path;           /* names the file in messages */
    const unsigned char *base;  /* start of the ModelProto: offsets in messages */
    /* Emits weight w into out (or nothing, to drop it). */
    npuc_status (*weight)(struct npuc__ox_walk *wk, const npuc__ox_weight *w, npuc__ox_buf *out);
    /* Sees each metadata_props entry; *keep = 1 copies it to the output. */
    npuc_status (*meta)(struct npuc__ox_walk *wk, const char *k, const char *v, int *keep);
    void *user;
    /* Optional hooks (NULL: fields copied as they are), for the writer's
     * graph edits (onnx_qdq.c).  graph_begin sees each graph's bytes
     * p[0..n) before its fields are walked and may put fields first into
     * out; node sees each NodeProto and, setting *handled, writes whatever
     * replaces it (complete GraphProto fields) into the graph's out;
     * graph_field sees the graph's other fields (inputs, outputs, ...) and
     * clears *keep to leave one out; model_field sees ModelProto's fields
     * other than the graph and metadata_props and, setting *handled, writes
     * their replacement. */
    npuc_status (*graph_begin)(struct npuc__ox_walk *wk, const unsigned char *p, uint64_t n, int depth,
                               npuc__ox_buf *out);
    npuc_status (*node)(struct npuc__ox_walk *wk, const unsigned char *p, uint64_t n, int depth, npuc__ox_buf *out,
                        int *handled);
    npuc_status (*graph_field)(struct npuc__ox_walk *wk, const npuc__ox_field *f, int depth, int *keep);
    npuc_status (*model_field)(struct npuc__ox_walk *wk, const npuc__ox_field *f, npuc__ox_buf *out, int *handled);
    void *hook_user; /* for the hooks */
    /* Set by weight() for an initializer it leaves out (reset by the walker). */
    int drop;
} npuc__ox_walk;

/* Walks the ModelProto p[0..n) and rebuilds it into out: every field copied
 * as it is, except weights (handed to wk->weight) and metadata_props (to
 * wk->meta).  Malformed input: NPUC_ERR_FORMAT naming the byte. */
npuc_status npuc__ox_walk_model(npuc__ox_walk *wk, const unsigned char *p, uint64_t n, npuc__ox_buf *out);
/* "<path>: malformed ONNX protobuf at byte N (<where>): <why>" */
npuc_status npuc__ox_bad(npuc__ox_walk *wk, const unsigned char *at, const char *where, const char *why);

/* ---- reader, writer, row */

npuc_status npuc__onnx_open(npuc_ctx *ctx, const char *path, const npuc_open_opts *o, npuc_model **out);
/* Cheap structural check of a ModelProto's first bytes: 1 when the first
 * fields are those a ModelProto starts with. */
int npuc__onnx_looks_like(const unsigned char *p, size_t n);
/* 1 when a model npuc__onnx_open opened keeps tensors in external data. */
int npuc__onnx_model_external(const npuc_model *m);
extern const npuc_writer_backend npuc__onnx_writer_backend;
extern const npuc__format_row npuc__onnx_format;

/* The network graph of m from its "onnx.model" entry, and the roles and
 * layouts its ops give the weights (onnx_netgraph.c): the row's read_graph
 * hook (format_row.h).  NPUC_ERR_NOT_FOUND when m has no such entry. */
npuc_status npuc__onnx_read_graph(npuc_ctx *ctx, npuc_model *m);
/* The row's graph_write hook (onnx_fold.c): the "onnx.model" entry stored
 * rewritten for the edited network graph g (folded BatchNormalization
 * nodes removed, producers renamed and given their bias); *out NULL when g
 * removes no node of the file. */
npuc_status npuc__onnx_graph_write(npuc_ctx *ctx, const char *label, const char *stored, const npuc_graph *g,
                                   char **out);
/* The same for lowrank's split MatMul / Gemm nodes (onnx_split.c): *handled
 * 1 when g drops a MatMul or Gemm weight of the file or holds a kernel the
 * file does not (then *out is the
 * rewritten entry or the call fails naming the tensor), else 0 and nothing
 * done. */
struct npuc__ox_edit; /* onnx_edit.h */
npuc_status npuc__onnx_split_write(npuc_ctx *ctx, const char *label, struct npuc__ox_edit *e, const npuc_graph *g,
                                   char **out, int *handled);
/* The artifact description art without the "lowrank" entries whose factors
 * the ONNX graph skel[0..nskel) reads in place of the dense weight (a split
 * written by npuc__onnx_split_write): *out NULL when none is taken out,
 * *empty 1 when no entry is left (the description is then not written). */
npuc_status npuc__onnx_split_artifact(npuc_ctx *ctx, const char *path, const unsigned char *skel, size_t nskel,
                                      const char *art, char **out, int *empty);
/* The row's decompress hook (onnx_deq.c): the graph's DequantizeLinear /
 * MatMulNBits weights evaluated into float initializers (docs/onnx.md). */
npuc_status npuc__onnx_decompress(npuc_ctx *ctx, npuc_model *m, const char *out, const npuc_write_opts *wo);

#endif
