/*
 * onnx_qdq.c - quantized weights as ONNX graph edits (onnx_qdq.h).
 *
 * Forms, by the default-domain opset the output ends up with:
 *   DQ     DequantizeLinear(codes, scale, zero_point) -> weight: per tensor
 *          from opset 10, per channel (axis) from 13, INT4/UINT4 and
 *          blocked (axis = the blocked axis, block_size) from 21;
 *   MUL    opset 10-12, per channel: DequantizeLinear(codes, 1, 0)
 *          [-> Sub(zero points as floats)] -> Mul(scales shaped to
 *          broadcast along the axis) -> weight;
 *   CAST   below opset 10: Cast(codes, FLOAT) [-> Sub] -> Mul -> weight;
 *   NBITS  --onnx-int4 matmulnbits: com.microsoft::MatMulNBits replaces
 *          each MatMul reading the weight (4-bit groups along K).
 * A weight whose original dtype is not FLOAT gets a Cast to it last.
 * When an encoding needs a higher opset than the model imports, the opset
 * is raised if every node converts (the table below: attributes that became
 * inputs are written as Constant nodes; nodes whose semantics changed
 * refuse), else the forms above that the model's opset has are written.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "onnx_model.h"
#include "onnx_qdq.h"
#include "strmap.h"

enum { F_DQ, F_MUL, F_CAST, F_NBITS };
enum { R_CODES, R_SCALE, R_ZP };
enum { G_TENSOR, G_CHANNEL, G_GROUP };
/* TensorProto.DataType */
enum { T_FLOAT = 1, T_UINT8 = 2, T_INT8 = 3, T_INT64 = 7, T_UINT4 = 21, T_INT4 = 22 };

typedef struct oq_entry {
    char *name;
    long t[3]; /* declared tensors: codes, scale, zero point (-1) */
    int bits, sym, gran, axis, rank, packed;
    int64_t shape[8], group, ngroups, C, numel;
    npuc_dtype dtype, sdtype;
    int form, otype; /* the form written; the ONNX type of the codes */
    int baxis;       /* blocked: the axis the blocks run along */
    int tr;          /* scales [C, G] go out as [G, C] */
    int found;
    int reshape;               /* blocked on a 2-D view, then Reshape to oshape */
    int64_t oshape[8];
    int orank;
    int64_t K, N, nb; /* NBITS */
    char *qn, *sn, *zn, *nn;
} oq_entry;

struct npuc__oq_plan {
    npuc_writer *w;
    npuc__oq_put_data_fn put;
    void *put_user;
    oq_entry *e;
    size_t ne;
    npuc__strmap byname; /* weight name -> entry */
    long *owner;         /* per declared tensor: its entry, or -1 */
    int *role;
    npuc__strmap names; /* every name the model uses, and those added */
    /* Reading back: DequantizeLinear nodes of constant inputs whose output
     * the output declares as a float tensor (decompress of a QDQ model):
     * the node and its input initializers go, the output becomes an
     * initializer again. */
    npuc__strmap undo_out, undo_in;
    npuc__strmap declared; /* declared tensor name -> index */
    size_t nundo;
    npuc__onnx_model *md;
    int64_t v, target, ir;
    int ms_needed, ms_present, nconv;
    unsigned char *buf;
    size_t cap;
    char summary[768];
};

/* ------------------------------------------------------------ names */

static int name_add(npuc__oq_plan *q, const char *s) { return s && *s ? npuc__strmap_put(&q->names, s, 0) : 0; }

static void names_graph(npuc__oq_plan *q, const npuc__onnx_graph *g) {
    for (size_t i = 0; i < g->ninitializers; i++) name_add(q, g->initializers[i]);
    for (size_t i = 0; i < g->ninputs; i++) name_add(q, g->inputs[i].name);
    for (size_t i = 0; i < g->noutputs; i++) name_add(q, g->outputs[i].name);
    for (size_t i = 0; i < g->nvalue_info; i++) name_add(q, g->value_info[i].name);
    for (size_t i = 0; i < g->nnodes; i++) {
        const npuc__onnx_node *n = &g->nodes[i];
        name_add(q, n->name);
        for (size_t k = 0; k < n->ninputs; k++) name_add(q, n->inputs[k]);
        for (size_t k = 0; k < n->noutputs; k++) name_add(q, n->outputs[k]);
        for (size_t a = 0; a < n->nattrs; a++)
            for (size_t k = 0; k < n->attrs[a].ngraphs; k++) names_graph(q, n->attrs[a].graphs[k]);
    }
}

/* base, or base_1, base_2, ...: a name the model does not use (recorded). */
static char *uniq(npuc__oq_plan *q, const char *base, const char *suffix) {
    size_t len = strlen(base) + strlen(suffix) + 24;
    char *s = malloc(len);
    if (!s) return NULL;
    snprintf(s, len, "%s%s", base, suffix);
    for (unsigned k = 1; npuc__strmap_get(&q->names, s, NULL); k++) snprintf(s, len, "%s%s_%u", base, suffix, k);
    if (name_add(q, s) != 0) {
        free(s);
        return NULL;
    }
    return s;
}

/* ------------------------------------------------------------ emitting */

static void put_str(npuc__ox_buf *b, uint32_t num, const char *s) { npuc__ox_put_bytes(b, num, s, strlen(s)); }

static void put_int(npuc__ox_buf *b, uint32_t num, int64_t v) {
    npuc__ox_put_tag(b, num, 0);
    npuc__ox_put_varint(b, (uint64_t)v);
}

/* TensorProto head: dims, data_type, name (the data follows). */
static void tensor_head(npuc__ox_buf *t, const int64_t *dims, int rank, int type, const char *name) {
    for (int k = 0; k < rank; k++) put_int(t, 1, dims[k]);
    put_int(t, 2, type);
    put_str(t, 8, name);
}

static void put_init_bytes(npuc__ox_buf *g, const int64_t *dims, int rank, int type, const char *name,
                           const void *p, size_t n) {
    npuc__ox_buf t = {0};
    tensor_head(&t, dims, rank, type, name);
    npuc__ox_put_bytes(&t, 9, p, n);
    npuc__ox_put_sub(g, 5, &t);
}

static void attr_int(npuc__ox_buf *nd, const char *name, int64_t v) {
    npuc__ox_buf a = {0};
    put_str(&a, 1, name);
    put_int(&a, 3, v);
    put_int(&a, 20, NPUC__ONNX_ATTR_INT);
    npuc__ox_put_sub(nd, 5, &a);
}

/* A node: op_type, domain ("": default), name, inputs, outputs. */
static void node_open(npuc__ox_buf *nd, const char *op, const char *domain, const char *name, const char *const *in,
                      int nin, const char *out) {
    for (int k = 0; k < nin; k++) put_str(nd, 1, in[k]);
    put_str(nd, 2, out);
    put_str(nd, 3, name);
    put_str(nd, 4, op);
    if (domain && *domain) put_str(nd, 7, domain);
}

/* ------------------------------------------------------------ sizes */

static uint64_t out_count(const oq_entry *e, int role) {
    if (role == R_CODES) return (uint64_t)e->numel;
    if (e->gran == G_TENSOR) return 1;
    return (uint64_t)e->C * (uint64_t)(e->gran == G_GROUP ? e->ngroups : 1);
}

static uint64_t out_size(const oq_entry *e, int role) {
    uint64_t n = out_count(e, role);
    if (e->form == F_NBITS) {
        if (role == R_CODES) return (uint64_t)e->N * (uint64_t)e->nb * (uint64_t)(e->group / 2);
        if (role == R_SCALE) return (uint64_t)e->N * (uint64_t)e->nb * 4;
        return (uint64_t)e->N * (uint64_t)((e->nb + 1) / 2);
    }
    if (role == R_SCALE) return n * 4;
    if (role == R_ZP && (e->form == F_MUL || e->form == F_CAST)) return n * 4;
    if (e->otype == T_INT4 || e->otype == T_UINT4) return (n + 1) / 2;
    return n;
}

/* Dims of the scale (and zero point) in the output. */
static int scale_dims(const oq_entry *e, int64_t *d) {
    if (e->gran == G_TENSOR) return 0;
    if (e->form == F_NBITS) {
        d[0] = e->N * e->nb;
        return 1;
    }
    if (e->form == F_MUL || e->form == F_CAST) { /* [C, 1, ...] broadcasting along axis */
        int r = 0;
        d[r++] = e->C;
        for (int k = e->axis + 1; k < e->rank; k++) d[r++] = 1;
        return r;
    }
    if (e->gran == G_CHANNEL) {
        d[0] = e->C;
        return 1;
    }
    for (int k = 0; k < e->rank; k++) d[k] = k == e->axis ? e->C : k == e->baxis ? e->ngroups : 1;
    return e->rank;
}

/* ------------------------------------------------------------ the forms */

static void emit_data(npuc__oq_plan *q, npuc__ox_buf *g, const oq_entry *e, int role, const int64_t *dims, int rank,
                      int type, const char *name) {
    npuc__ox_buf t = {0};
    tensor_head(&t, dims, rank, type, name);
    q->put(q->put_user, (size_t)e->t[role], out_size(e, role), &t);
    npuc__ox_put_sub(g, 5, &t);
}

static npuc_status oom(npuc__oq_plan *q) { return npuc_fail(q->w->ctx, NPUC_ERR_NOMEM, "out of memory"); }

static npuc_status emit_entry(npuc__oq_plan *q, npuc__ox_buf *g, oq_entry *e) {
    int64_t sd[8];
    int sr = scale_dims(e, sd);
    int ztype = e->otype;
    /* The codes. */
    if (e->form == F_NBITS) {
        int64_t bd[3] = {e->N, e->nb, e->group / 2};
        emit_data(q, g, e, R_CODES, bd, 3, T_UINT8, e->qn);
        ztype = T_UINT8;
    } else {
        emit_data(q, g, e, R_CODES, e->shape, e->rank, e->otype, e->qn);
    }
    emit_data(q, g, e, R_SCALE, sd, sr, T_FLOAT, e->sn);
    if (e->form == F_MUL || e->form == F_CAST) ztype = T_FLOAT;
    if (e->t[R_ZP] >= 0) {
        int64_t zd[1] = {e->N * ((e->nb + 1) / 2)};
        if (e->form == F_NBITS) emit_data(q, g, e, R_ZP, zd, 1, ztype, e->zn);
        else emit_data(q, g, e, R_ZP, sd, sr, ztype, e->zn);
    } else if (e->form == F_DQ) { /* symmetric: explicit zero points 0 (QNN wants them) */
        uint64_t n = out_size(e, R_ZP);
        unsigned char *z = calloc(n ? n : 1, 1);
        if (!z) return oom(q);
        put_init_bytes(g, sd, sr, e->otype, e->zn, z, (size_t)n);
        free(z);
    }
    if (e->form == F_NBITS) return NPUC_OK; /* the MatMul nodes are rewritten where they are */

    const char *last = e->name;
    char *tmp = NULL, *t1 = NULL, *t2 = NULL;
    if (e->dtype != NPUC_DTYPE_F32 && !(tmp = uniq(q, e->name, "_float"))) return oom(q);
    const char *dst = tmp ? tmp : last;
    npuc__ox_buf nd = {0};
    char *rs = NULL, *rshape = NULL;
    if (e->reshape && (!(rs = uniq(q, e->name, "_blocked")) || !(rshape = uniq(q, e->name, "_shape")))) {
        free(rs);
        free(tmp);
        return oom(q);
    }
    if (e->form == F_DQ) {
        const char *in[3] = {e->qn, e->sn, e->zn};
        node_open(&nd, "DequantizeLinear", "", e->nn, in, 3, rs ? rs : dst);
        if (e->gran == G_CHANNEL) attr_int(&nd, "axis", e->axis);
        if (e->gran == G_GROUP) {
            attr_int(&nd, "axis", e->baxis);
            attr_int(&nd, "block_size", e->group);
        }
        npuc__ox_put_sub(g, 1, &nd);
        if (rs) { /* back to the weight's shape */
            unsigned char raw[64];
            int64_t d = e->orank;
            for (int k = 0; k < e->orank; k++)
                for (int b = 0; b < 8; b++) raw[k * 8 + b] = (unsigned char)((uint64_t)e->oshape[k] >> (8 * b));
            put_init_bytes(g, &d, 1, T_INT64, rshape, raw, (size_t)e->orank * 8);
            char *rn = uniq(q, e->name, "_Reshape");
            if (!rn) {
                free(rs);
                free(rshape);
                free(tmp);
                return oom(q);
            }
            const char *rin[2] = {rs, rshape};
            npuc__ox_buf rb = {0};
            node_open(&rb, "Reshape", "", rn, rin, 2, dst);
            npuc__ox_put_sub(g, 1, &rb);
            free(rn);
        }
        free(rs);
        free(rshape);
    } else {
        /* codes as floats */
        char *one = NULL, *zero = NULL;
        if (!(t1 = uniq(q, e->name, "_codes_float"))) return oom(q);
        if (e->form == F_MUL) {
            if (!(one = uniq(q, e->name, "_one")) || !(zero = uniq(q, e->name, "_zero0"))) {
                free(one);
                free(t1);
                return oom(q);
            }
            float f1 = 1.0f;
            unsigned char z0 = 0;
            put_init_bytes(g, NULL, 0, T_FLOAT, one, &f1, 4);
            put_init_bytes(g, NULL, 0, e->otype, zero, &z0, 1);
            const char *in[3] = {e->qn, one, zero};
            node_open(&nd, "DequantizeLinear", "", e->nn, in, 3, t1);
        } else {
            const char *in[1] = {e->qn};
            node_open(&nd, "Cast", "", e->nn, in, 1, t1);
            attr_int(&nd, "to", T_FLOAT);
        }
        npuc__ox_put_sub(g, 1, &nd);
        free(one);
        free(zero);
        const char *x = t1;
        if (e->t[R_ZP] >= 0) {
            char *sname = uniq(q, e->name, "_Sub");
            if (!sname || !(t2 = uniq(q, e->name, "_centred"))) {
                free(sname);
                free(t1);
                return oom(q);
            }
            const char *in[2] = {t1, e->zn};
            npuc__ox_buf sb = {0};
            node_open(&sb, "Sub", "", sname, in, 2, t2);
            npuc__ox_put_sub(g, 1, &sb);
            free(sname);
            x = t2;
        }
        char *mname = uniq(q, e->name, "_Mul");
        if (!mname) {
            free(t1);
            free(t2);
            return oom(q);
        }
        const char *in[2] = {x, e->sn};
        npuc__ox_buf mb = {0};
        node_open(&mb, "Mul", "", mname, in, 2, dst);
        npuc__ox_put_sub(g, 1, &mb);
        free(mname);
    }
    if (tmp) {
        char *cname = uniq(q, e->name, "_Cast");
        if (!cname) {
            free(tmp);
            free(t1);
            free(t2);
            return oom(q);
        }
        const char *in[1] = {tmp};
        npuc__ox_buf cb = {0};
        node_open(&cb, "Cast", "", cname, in, 1, last);
        attr_int(&cb, "to", (int64_t)npuc__ox_type_of(e->dtype));
        npuc__ox_put_sub(g, 1, &cb);
        free(cname);
    }
    free(tmp);
    free(t1);
    free(t2);
    return g->oom ? oom(q) : NPUC_OK;
}

/* ------------------------------------------------------------ opset conversion */

/* Nodes whose attributes became inputs (or whose meaning changed) at an
 * opset: converting a model from opset v to t applies every row with
 * v < since <= t. */
typedef struct conv_row {
    const char *op;
    int since;
    const char *attr[3]; /* attributes that become inputs 1, 2, 3 (NULL: none) */
    int is_float[3];     /* 1: a float scalar input, 0: a 1-D INT64 input */
    const char *refuse;  /* non-NULL: not converted, the reason */
} conv_row;

static const conv_row CONV[] = {
    {"Slice", 10, {"starts", "ends", "axes"}, {0, 0, 0}, NULL},
    {"TopK", 10, {"k"}, {0}, NULL},
    {"Upsample", 10, {NULL}, {0}, "Upsample was removed at opset 10 (Resize replaces it with other inputs)"},
    {"Clip", 11, {"min", "max"}, {1, 1}, NULL},
    {"Pad", 11, {"pads", "value"}, {0, 1}, NULL},
    {"Resize", 11, {NULL}, {0}, "Resize's inputs (roi, scales, sizes) changed at opset 11"},
    {"Scatter", 11, {NULL}, {0}, "Scatter was deprecated at opset 11 (ScatterElements replaces it)"},
    {"Dropout", 12, {"ratio"}, {1}, NULL},
    {"Squeeze", 13, {"axes"}, {0}, NULL},
    {"Unsqueeze", 13, {"axes"}, {0}, NULL},
    {"Split", 13, {"split"}, {0}, NULL},
    {"ReduceSum", 13, {"axes"}, {0}, NULL},
    {"Softmax", 13, {NULL}, {0}, "Softmax no longer flattens its input to 2-D at opset 13"},
    {"LogSoftmax", 13, {NULL}, {0}, "LogSoftmax no longer flattens its input to 2-D at opset 13"},
    {"Hardmax", 13, {NULL}, {0}, "Hardmax no longer flattens its input to 2-D at opset 13"},
    {"ReduceMean", 18, {"axes"}, {0}, NULL},
    {"ReduceMax", 18, {"axes"}, {0}, NULL},
    {"ReduceMin", 18, {"axes"}, {0}, NULL},
    {"ReduceProd", 18, {"axes"}, {0}, NULL},
    {"ReduceL1", 18, {"axes"}, {0}, NULL},
    {"ReduceL2", 18, {"axes"}, {0}, NULL},
    {"ReduceLogSum", 18, {"axes"}, {0}, NULL},
    {"ReduceLogSumExp", 18, {"axes"}, {0}, NULL},
    {"ReduceSumSquare", 18, {"axes"}, {0}, NULL},
    {"GroupNormalization", 21, {NULL}, {0}, "GroupNormalization's scale and bias became per channel at opset 21"},
};

static int default_domain(const char *d) { return !d || !*d || strcmp(d, "ai.onnx") == 0; }

static const conv_row *conv_find(const char *op, int64_t v, int64_t t, size_t *from) {
    for (size_t i = *from; i < sizeof CONV / sizeof CONV[0]; i++)
        if (strcmp(CONV[i].op, op) == 0 && v < CONV[i].since && CONV[i].since <= t) {
            *from = i + 1;
            return &CONV[i];
        }
    return NULL;
}

/* "node 'NAME' (Op)", or "the Op node with output 'Y'" for a nameless one. */
static void node_desc(const npuc__onnx_node *n, char *b, size_t nb) {
    if (n->name && *n->name) snprintf(b, nb, "node '%.100s' (%.60s)", n->name, n->op_type);
    else snprintf(b, nb, "the %.60s node with output '%.100s'", n->op_type, n->noutputs ? n->outputs[0] : "");
}

/* The rank g's value_info, outputs or inputs state for name, or -1. */
static int stated_rank(const npuc__onnx_graph *g, const char *name) {
    const npuc__onnx_value *lists[3] = {g->value_info, g->outputs, g->inputs};
    const size_t counts[3] = {g->nvalue_info, g->noutputs, g->ninputs};
    for (int l = 0; l < 3; l++)
        for (size_t i = 0; i < counts[l]; i++)
            if (lists[l][i].name && strcmp(lists[l][i].name, name) == 0 && lists[l][i].rank >= 0)
                return lists[l][i].rank;
    return -1;
}

/* A Softmax / LogSoftmax / Hardmax below opset 13 whose axis is its
 * input's last (by a rank the graph states): flattening the input to 2-D
 * at that axis and normalizing along the second is normalizing along the
 * last axis, which is what the op means from 13, so the node needs no
 * change. */
static int softmax_same(const npuc__onnx_graph *g, const npuc__onnx_node *n) {
    if (strcmp(n->op_type, "Softmax") != 0 && strcmp(n->op_type, "LogSoftmax") != 0 &&
        strcmp(n->op_type, "Hardmax") != 0)
        return 0;
    int r = n->noutputs ? stated_rank(g, n->outputs[0]) : -1;
    if (r < 0 && n->ninputs) r = stated_rank(g, n->inputs[0]);
    if (r < 1) return 0;
    int64_t axis = 1; /* the default below opset 13 */
    for (size_t a = 0; a < n->nattrs; a++)
        if (n->attrs[a].name && strcmp(n->attrs[a].name, "axis") == 0) axis = n->attrs[a].i;
    if (axis < 0) axis += r;
    return axis == r - 1;
}

/* Why the graph cannot go from opset v to t (a static buffer), or NULL. */
static const char *conv_blocked(const npuc__onnx_graph *g, int64_t v, int64_t t, char *why, size_t nwhy) {
    for (size_t i = 0; i < g->nnodes; i++) {
        const npuc__onnx_node *n = &g->nodes[i];
        if (default_domain(n->domain)) {
            size_t from = 0;
            for (const conv_row *r; (r = conv_find(n->op_type, v, t, &from));)
                if (r->refuse && !(r->since == 13 && softmax_same(g, n))) {
                    node_desc(n, why, nwhy);
                    size_t u = strlen(why);
                    snprintf(why + u, nwhy - u, ": %s", r->refuse);
                    return why;
                }
            if (v < 9 && t >= 9 && strcmp(n->op_type, "BatchNormalization") == 0)
                for (size_t a = 0; a < n->nattrs; a++)
                    if (strcmp(n->attrs[a].name, "spatial") == 0 && n->attrs[a].i == 0) {
                        node_desc(n, why, nwhy);
                        size_t u = strlen(why);
                        snprintf(why + u, nwhy - u, ": spatial=0 was removed at opset 9");
                        return why;
                    }
        }
        for (size_t a = 0; a < n->nattrs; a++)
            for (size_t k = 0; k < n->attrs[a].ngraphs; k++) {
                const char *w = conv_blocked(n->attrs[a].graphs[k], v, t, why, nwhy);
                if (w) return w;
            }
    }
    return NULL;
}

/* Reads an attribute's INTS (packed or not), INT, or FLOAT value. */
static int attr_value(const unsigned char *p, uint64_t n, char *name, size_t nname, int64_t *ints, size_t *nints,
                      size_t cap, float *fv, int *has_f) {
    const unsigned char *q = p, *end = p + n;
    npuc__ox_field f;
    *nints = 0;
    *has_f = 0;
    name[0] = 0;
    while (q < end) {
        if (npuc__ox_next(&q, end, &f)) return -1;
        if (f.num == 1 && f.wt == 2) snprintf(name, nname, "%.*s", (int)(f.len < 200 ? f.len : 200), (const char *)f.data);
        else if (f.num == 2 && f.wt == 5) {
            uint32_t u = (uint32_t)f.v;
            memcpy(fv, &u, 4);
            *has_f = 1;
        } else if ((f.num == 3 || f.num == 8) && f.wt == 0) {
            if (*nints >= cap) return -2;
            ints[(*nints)++] = (int64_t)f.v;
        } else if (f.num == 8 && f.wt == 2) {
            const unsigned char *a = f.data, *ae = f.data + f.len;
            uint64_t x;
            while (a < ae && !npuc__ox_varint(&a, ae, &x)) {
                if (*nints >= cap) return -2;
                ints[(*nints)++] = (int64_t)x;
            }
        }
    }
    return 0;
}

#define OQ_MAXINTS 64

/* Rewrites a node whose attributes became inputs between q->v and
 * q->target; *handled = 0 when the node needs nothing. */
static npuc_status conv_node(npuc__oq_plan *q, const unsigned char *p, uint64_t n, npuc__ox_buf *out, int *handled) {
    const unsigned char *r = p, *end = p + n;
    npuc__ox_field f;
    char op[64] = "", dom[64] = "", out0[256] = "";
    int ninputs = 0;
    while (r < end) {
        if (npuc__ox_next(&r, end, &f)) return NPUC_OK; /* the walker reports it */
        if (f.wt != 2) continue;
        if (f.num == 4) snprintf(op, sizeof op, "%.*s", (int)(f.len < 63 ? f.len : 63), (const char *)f.data);
        if (f.num == 7) snprintf(dom, sizeof dom, "%.*s", (int)(f.len < 63 ? f.len : 63), (const char *)f.data);
        if (f.num == 2 && !out0[0]) snprintf(out0, sizeof out0, "%.*s", (int)(f.len < 200 ? f.len : 200), (const char *)f.data);
        if (f.num == 1) ninputs++;
    }
    if (!default_domain(dom)) return NPUC_OK;
    size_t from = 0;
    const conv_row *rows[4];
    int nrows = 0, bn = q->v < 9 && q->target >= 9 && strcmp(op, "BatchNormalization") == 0;
    for (const conv_row *c; nrows < 4 && (c = conv_find(op, q->v, q->target, &from));) rows[nrows++] = c;
    if (!nrows && !bn) return NPUC_OK;
    /* The moved attributes' values, by input position. */
    int have[4] = {0};
    int64_t vals[4][OQ_MAXINTS];
    size_t nvals[4] = {0};
    float fvals[4] = {0};
    int isf[4] = {0};
    npuc__ox_buf nd = {0}, consts = {0};
    for (r = p; r < end;) {
        (void)npuc__ox_next(&r, end, &f);
        int moved = 0;
        if (f.num == 5 && f.wt == 2) {
            char an[208];
            int64_t ints[OQ_MAXINTS];
            size_t ni;
            float fv;
            int hf;
            int rc = attr_value(f.data, f.len, an, sizeof an, ints, &ni, OQ_MAXINTS, &fv, &hf);
            if (rc == -2) {
                npuc__ox_free(&nd);
                npuc__ox_free(&consts);
                return npuc_fail(q->w->ctx, NPUC_ERR_UNSUPPORTED,
                                 "%s: node with output '%s' (%s): attribute '%s' has more than %d values to move to "
                                 "an input when raising the opset", q->w->path, out0, op, an, OQ_MAXINTS);
            }
            if (rc == 0) {
                if (bn && strcmp(an, "spatial") == 0) moved = 1; /* spatial=1: the default since opset 9 */
                for (int k = 0; k < nrows && !moved; k++)
                    for (int j = 0; j < 3 && rows[k]->attr[j]; j++)
                        if (strcmp(an, rows[k]->attr[j]) == 0) {
                            moved = 1;
                            have[j + 1] = 1;
                            isf[j + 1] = rows[k]->is_float[j];
                            fvals[j + 1] = hf ? fv : 0.0f;
                            memcpy(vals[j + 1], ints, ni * sizeof *ints);
                            nvals[j + 1] = ni;
                        }
            }
        }
        if (!moved) npuc__ox_put(&nd, f.start, (size_t)(f.end - f.start));
    }
    /* Attributes that became inputs follow the node's data input. */
    int last = 0;
    for (int j = 1; j < 4; j++)
        if (have[j]) last = j;
    if (last && ninputs != 1) {
        npuc__ox_free(&nd);
        return npuc_fail(q->w->ctx, NPUC_ERR_UNSUPPORTED,
                         "%s: node with output '%s' (%s): raising the opset from %" PRId64 " to %" PRId64
                         " moves attributes to inputs, but the node already has %d inputs",
                         q->w->path, out0, op, q->v, q->target, ninputs);
    }
    for (int j = 1; j <= last; j++) {
        if (!have[j]) {
            put_str(&nd, 1, "");
            continue;
        }
        char suffix[96];
        snprintf(suffix, sizeof suffix, "_%.48s_input%d", op, j); /* uniq() keeps it unique */
        char *cn = uniq(q, out0[0] ? out0 : op, suffix);
        if (!cn) {
            npuc__ox_free(&nd);
            npuc__ox_free(&consts);
            return oom(q);
        }
        npuc__ox_buf t = {0}, a = {0}, c = {0};
        if (isf[j]) {
            tensor_head(&t, NULL, 0, T_FLOAT, cn);
            npuc__ox_put_bytes(&t, 9, &fvals[j], 4);
        } else {
            int64_t d = (int64_t)nvals[j];
            tensor_head(&t, &d, 1, T_INT64, cn);
            unsigned char raw[OQ_MAXINTS * 8];
            for (size_t k = 0; k < nvals[j]; k++)
                for (int b = 0; b < 8; b++) raw[k * 8 + b] = (unsigned char)((uint64_t)vals[j][k] >> (8 * b));
            npuc__ox_put_bytes(&t, 9, raw, nvals[j] * 8);
        }
        put_str(&a, 1, "value");
        npuc__ox_put_sub(&a, 5, &t);
        put_int(&a, 20, NPUC__ONNX_ATTR_TENSOR);
        put_str(&c, 2, cn);
        put_str(&c, 3, cn);
        put_str(&c, 4, "Constant");
        npuc__ox_put_sub(&c, 5, &a);
        npuc__ox_put_sub(&consts, 1, &c);
        put_str(&nd, 1, cn);
        free(cn);
    }
    npuc__ox_put(out, consts.p, consts.n);
    npuc__ox_free(&consts);
    npuc__ox_put_sub(out, 1, &nd);
    q->nconv++;
    *handled = 1;
    return out->oom ? oom(q) : NPUC_OK;
}

/* ------------------------------------------------------------ hooks */

static oq_entry *entry_of(const npuc__oq_plan *q, const char *name, size_t len) {
    char buf[512];
    if (len >= sizeof buf) return NULL;
    memcpy(buf, name, len);
    buf[len] = 0;
    size_t i;
    return npuc__strmap_get(&q->byname, buf, &i) ? &q->e[i] : NULL;
}

/* The Constant node of the default domain at p[0..n): its first output. */
static int constant_output(const unsigned char *p, uint64_t n, const unsigned char **name, uint64_t *len) {
    const unsigned char *r = p, *end = p + n;
    npuc__ox_field f;
    int constant = 0, dflt = 1;
    *name = NULL;
    while (r < end) {
        if (npuc__ox_next(&r, end, &f)) return 0;
        if (f.wt != 2) continue;
        if (f.num == 4) constant = f.len == 8 && memcmp(f.data, "Constant", 8) == 0;
        if (f.num == 7) dflt = f.len == 0 || (f.len == 7 && memcmp(f.data, "ai.onnx", 7) == 0);
        if (f.num == 2 && !*name) {
            *name = f.data;
            *len = f.len;
        }
    }
    return constant && dflt && *name;
}

/* The output of the DequantizeLinear node at p[0..n) into o; 0 if it is
 * not one (or its output does not fit). */
static int dq_output(const unsigned char *p, uint64_t n, char *o, size_t no) {
    const unsigned char *r = p, *end = p + n;
    npuc__ox_field f;
    int dq = 0, dflt = 1, have = 0;
    while (r < end) {
        if (npuc__ox_next(&r, end, &f)) return 0;
        if (f.wt != 2) continue;
        if (f.num == 4) dq = f.len == 16 && memcmp(f.data, "DequantizeLinear", 16) == 0;
        if (f.num == 7) dflt = f.len == 0 || (f.len == 7 && memcmp(f.data, "ai.onnx", 7) == 0);
        if (f.num == 2 && !have) {
            if (f.len >= no) return 0;
            memcpy(o, f.data, (size_t)f.len);
            o[f.len] = 0;
            have = 1;
        }
    }
    return dq && dflt && have;
}

static npuc_status hk_graph_begin(npuc__ox_walk *wk, const unsigned char *p, uint64_t n, int depth,
                                  npuc__ox_buf *out) {
    (void)depth;
    npuc__oq_plan *q = wk->hook_user;
    const unsigned char *r = p, *end = p + n;
    npuc__ox_field f, g;
    while (r < end) {
        if (npuc__ox_next(&r, end, &f)) return NPUC_OK; /* the walker reports it */
        if (f.wt != 2) continue;
        oq_entry *e = NULL;
        if (f.num == 5) {
            for (const unsigned char *t = f.data, *te = f.data + f.len; t < te;) {
                if (npuc__ox_next(&t, te, &g)) break;
                if (g.num == 8 && g.wt == 2) e = entry_of(q, (const char *)g.data, g.len);
            }
        } else if (f.num == 1) {
            const unsigned char *nm;
            uint64_t len;
            if (constant_output(f.data, f.len, &nm, &len)) e = entry_of(q, (const char *)nm, len);
            size_t d;
            char o[512];
            if (q->nundo && dq_output(f.data, f.len, o, sizeof o) && npuc__strmap_get(&q->undo_out, o, &d)) {
                const npuc_tensor_info *t = &q->w->t[d];
                npuc__ox_buf tb = {0};
                tensor_head(&tb, t->shape, t->rank, (int)npuc__ox_type_of(t->dtype), t->name);
                q->put(q->put_user, d, t->nbytes, &tb);
                npuc__ox_put_sub(out, 5, &tb);
            }
        }
        if (e && !e->found) {
            e->found = 1;
            npuc_status st = emit_entry(q, out, e);
            if (st != NPUC_OK) return st;
        }
    }
    return NPUC_OK;
}

static npuc_status hk_node(npuc__ox_walk *wk, const unsigned char *p, uint64_t n, int depth, npuc__ox_buf *out,
                           int *handled) {
    (void)depth;
    npuc__oq_plan *q = wk->hook_user;
    const unsigned char *nm;
    uint64_t len;
    if (constant_output(p, n, &nm, &len) && entry_of(q, (const char *)nm, len)) {
        *handled = 1; /* the Constant's value went out as initializers */
        return NPUC_OK;
    }
    char o[512];
    if (q->nundo && dq_output(p, n, o, sizeof o) && npuc__strmap_get(&q->undo_out, o, NULL)) {
        *handled = 1; /* its output is an initializer again */
        return NPUC_OK;
    }
    /* MatMul reading an NBITS weight as B -> MatMulNBits. */
    const unsigned char *r = p, *end = p + n;
    npuc__ox_field f;
    int matmul = 0, dflt = 1, k = 0;
    oq_entry *e = NULL;
    while (r < end) {
        if (npuc__ox_next(&r, end, &f)) return NPUC_OK;
        if (f.wt != 2) continue;
        if (f.num == 4) matmul = f.len == 6 && memcmp(f.data, "MatMul", 6) == 0;
        if (f.num == 7) dflt = f.len == 0 || (f.len == 7 && memcmp(f.data, "ai.onnx", 7) == 0);
        if (f.num == 1 && k++ == 1) e = entry_of(q, (const char *)f.data, f.len);
    }
    if (matmul && dflt && e && e->form == F_NBITS) {
        npuc__ox_buf nd = {0};
        k = 0;
        for (r = p; r < end;) {
            (void)npuc__ox_next(&r, end, &f);
            if (f.num == 1 && f.wt == 2) {
                if (k++ == 1) {
                    put_str(&nd, 1, e->qn);
                    put_str(&nd, 1, e->sn);
                    if (e->t[R_ZP] >= 0) put_str(&nd, 1, e->zn);
                    continue;
                }
            }
            if (f.num == 4 || f.num == 7) continue;
            npuc__ox_put(&nd, f.start, (size_t)(f.end - f.start));
        }
        put_str(&nd, 4, "MatMulNBits");
        put_str(&nd, 7, "com.microsoft");
        attr_int(&nd, "K", e->K);
        attr_int(&nd, "N", e->N);
        attr_int(&nd, "bits", 4);
        attr_int(&nd, "block_size", e->group);
        npuc__ox_put_sub(out, 1, &nd);
        *handled = 1;
        return out->oom ? oom(q) : NPUC_OK;
    }
    if (q->target > q->v) return conv_node(q, p, n, out, handled);
    return NPUC_OK;
}

static npuc_status hk_graph_field(npuc__ox_walk *wk, const npuc__ox_field *f, int depth, int *keep) {
    (void)depth;
    npuc__oq_plan *q = wk->hook_user;
    if (f->num != 11 || f->wt != 2) return NPUC_OK;
    /* A graph input naming a replaced weight (IR < 4 lists initializers as
     * inputs): a node now produces it. */
    const unsigned char *r = f->data, *end = f->data + f->len;
    npuc__ox_field g;
    while (r < end) {
        if (npuc__ox_next(&r, end, &g)) return NPUC_OK;
        if (g.num == 1 && g.wt == 2 && entry_of(q, (const char *)g.data, g.len)) *keep = 0;
    }
    return NPUC_OK;
}

static int64_t ir_for(int64_t opset) { return opset >= 21 ? 10 : opset >= 13 ? 7 : opset >= 10 ? 5 : 3; }

static npuc_status hk_model_field(npuc__ox_walk *wk, const npuc__ox_field *f, npuc__ox_buf *out, int *handled) {
    npuc__oq_plan *q = wk->hook_user;
    if (!q->ne) return NPUC_OK; /* reading back only: the opset stays */
    if (f->num == 1 && f->wt == 0) {
        int64_t ir = ir_for(q->target);
        put_int(out, 1, (int64_t)f->v > ir ? (int64_t)f->v : ir);
        *handled = 1;
    } else if (f->num == 8 && f->wt == 2) {
        const unsigned char *r = f->data, *end = f->data + f->len;
        npuc__ox_field g;
        int dflt = 1;
        while (r < end) {
            if (npuc__ox_next(&r, end, &g)) return NPUC_OK;
            if (g.num == 1 && g.wt == 2) dflt = g.len == 0 || (g.len == 7 && memcmp(g.data, "ai.onnx", 7) == 0);
        }
        if (!dflt) return NPUC_OK;
        npuc__ox_buf o = {0};
        for (r = f->data; r < end;) {
            (void)npuc__ox_next(&r, end, &g);
            if (g.num == 2) put_int(&o, 2, q->target);
            else npuc__ox_put(&o, g.start, (size_t)(g.end - g.start));
        }
        npuc__ox_put_sub(out, 8, &o);
        if (q->ms_needed && !q->ms_present) {
            npuc__ox_buf m = {0};
            put_str(&m, 1, "com.microsoft");
            put_int(&m, 2, 1);
            npuc__ox_put_sub(out, 8, &m);
            q->ms_present = 1;
        }
        *handled = 1;
    }
    return out->oom ? oom(q) : NPUC_OK;
}

void npuc__oq_hooks(npuc__oq_plan *q, npuc__ox_walk *wk) {
    wk->hook_user = q;
    wk->graph_begin = hk_graph_begin;
    wk->node = hk_node;
    wk->graph_field = hk_graph_field;
    wk->model_field = hk_model_field;
}

int npuc__oq_replaces(const npuc__oq_plan *q, const char *name) {
    return q && (npuc__strmap_get(&q->byname, name, NULL) || npuc__strmap_get(&q->undo_in, name, NULL));
}

/* owner[i]: an entry, -1 none, -2 an undone DequantizeLinear's input (not
 * written), -3 its output (an initializer again). */
int npuc__oq_owns(const npuc__oq_plan *q, size_t i) { return q && q->owner[i] != -1; }

npuc_status npuc__oq_check(npuc__oq_plan *q) {
    for (size_t i = 0; i < q->ne; i++)
        if (!q->e[i].found)
            return npuc_fail(q->w->ctx, NPUC_ERR_UNSUPPORTED,
                             "%s: tensor '%s' is stored quantized but is not a weight of the ONNX graph", q->w->path,
                             q->e[i].name);
    return NPUC_OK;
}

/* ------------------------------------------------------------ payloads */

static int code_at(const oq_entry *e, const unsigned char *p, uint64_t i) {
    if (!e->packed) return e->sym ? (int)(signed char)p[i] : (int)p[i];
    uint64_t bit = i * (uint64_t)e->bits;
    unsigned v = 0;
    for (int b = 0; b < e->bits; b++, bit++) v |= (unsigned)((p[bit / 8] >> (bit % 8)) & 1u) << b;
    if (e->sym && (v & (1u << (e->bits - 1)))) return (int)v - (1 << e->bits);
    return (int)v;
}

static float scale_at(const oq_entry *e, const unsigned char *p, uint64_t i) {
    if (e->sdtype == NPUC_DTYPE_F16) return npuc_f16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
    if (e->sdtype == NPUC_DTYPE_BF16) return npuc_bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
    float f;
    memcpy(&f, p + 4 * i, 4);
    return f;
}

/* Output position j of a per-group scale/zero point -> npuc's [C, G] index. */
static uint64_t grp_src(const oq_entry *e, uint64_t j) {
    if (!e->tr) return j;
    uint64_t g = j / (uint64_t)e->C, c = j % (uint64_t)e->C;
    return c * (uint64_t)e->ngroups + g;
}

npuc_status npuc__oq_transform(npuc__oq_plan *q, size_t i, const void *data, uint64_t n, const void **outp,
                               uint64_t *nout) {
    *outp = data;
    *nout = n;
    if (q && q->owner[i] == -2) *nout = 0;
    if (!q || q->owner[i] < 0) return NPUC_OK;
    const oq_entry *e = &q->e[q->owner[i]];
    int role = q->role[i];
    uint64_t size = out_size(e, role);
    const unsigned char *s = data;
    int same = role == R_CODES ? (e->form != F_NBITS && (!e->packed || e->otype == T_INT4 || e->otype == T_UINT4))
             : role == R_SCALE ? (e->form != F_NBITS && e->sdtype == NPUC_DTYPE_F32 && !e->tr)
                               : (e->form == F_DQ && e->otype == T_UINT8 && !e->tr);
    if (same) return size == n ? NPUC_OK : npuc_fail(q->w->ctx, NPUC_ERR_INTERNAL, "%s: tensor '%s': %" PRIu64
                                                     " bytes, %" PRIu64 " planned", q->w->path, e->name, n, size);
    if (size > q->cap) {
        unsigned char *b = realloc(q->buf, (size_t)size);
        if (!b) return oom(q);
        q->buf = b;
        q->cap = (size_t)size;
    }
    unsigned char *o = q->buf;
    uint64_t cnt = out_count(e, role);
    if (role == R_CODES && e->form == F_NBITS) {
        /* B[n][b][j/2]: k = b*G + j, low nibble first; symmetric codes + 8
         * (MatMulNBits' default zero point); the padding of a short last
         * block reads as the zero point. */
        memset(o, 0, (size_t)size);
        uint64_t blob = (uint64_t)e->group / 2;
        for (int64_t nn = 0; nn < e->N; nn++)
            for (int64_t b = 0; b < e->nb; b++)
                for (int64_t j = 0; j < e->group; j++) {
                    int64_t k = b * e->group + j;
                    unsigned v = 8;
                    if (k < e->K) v = (unsigned)(code_at(e, s, (uint64_t)(k * e->N + nn)) + (e->sym ? 8 : 0));
                    else if (!e->sym) v = 0;
                    o[((uint64_t)nn * (uint64_t)e->nb + (uint64_t)b) * blob + (uint64_t)j / 2] |=
                        (unsigned char)((v & 15u) << (4 * (j & 1)));
                }
    } else if (role == R_CODES) { /* unpacked to one byte a code */
        for (uint64_t k = 0; k < cnt; k++) o[k] = (unsigned char)code_at(e, s, k);
    } else if (role == R_SCALE) {
        for (uint64_t k = 0; k < cnt; k++) {
            float f = scale_at(e, s, grp_src(e, k));
            memcpy(o + 4 * k, &f, 4);
        }
    } else if (e->form == F_NBITS) {
        uint64_t per = (uint64_t)(e->nb + 1) / 2;
        memset(o, 0, (size_t)size);
        for (int64_t nn = 0; nn < e->N; nn++)
            for (int64_t b = 0; b < e->nb; b++)
                o[(uint64_t)nn * per + (uint64_t)b / 2] |=
                    (unsigned char)((s[(uint64_t)nn * (uint64_t)e->nb + (uint64_t)b] & 15u) << (4 * (b & 1)));
    } else if (e->form == F_MUL || e->form == F_CAST) {
        for (uint64_t k = 0; k < cnt; k++) {
            float f = (float)s[k];
            memcpy(o + 4 * k, &f, 4);
        }
    } else if (e->otype == T_UINT4) {
        memset(o, 0, (size_t)size);
        for (uint64_t k = 0; k < cnt; k++) o[k / 2] |= (unsigned char)((s[grp_src(e, k)] & 15u) << (4 * (k & 1)));
    } else {
        for (uint64_t k = 0; k < cnt; k++) o[k] = s[grp_src(e, k)];
    }
    *outp = o;
    *nout = size;
    return NPUC_OK;
}

/* ------------------------------------------------------------ the plan */

static long decl_of(const npuc__oq_plan *q, const char *name) {
    size_t i;
    return name && npuc__strmap_get(&q->declared, name, &i) ? (long)i : -1;
}

static int64_t opset_of(const npuc__onnx_model *md, const char *domain, int *present) {
    *present = 0;
    for (size_t i = 0; i < md->nopsets; i++) {
        const char *d = md->opsets[i].domain;
        if (domain ? strcmp(d, domain) == 0 : default_domain(d)) {
            *present = 1;
            return md->opsets[i].version;
        }
    }
    return 0;
}

/* How the weight name is used in g and below: MatMul B inputs and others. */
static void uses(const npuc__onnx_graph *g, const char *name, int *mm, int *other) {
    for (size_t i = 0; i < g->noutputs; i++)
        if (strcmp(g->outputs[i].name, name) == 0) (*other)++;
    for (size_t i = 0; i < g->nnodes; i++) {
        const npuc__onnx_node *n = &g->nodes[i];
        for (size_t k = 0; k < n->ninputs; k++)
            if (strcmp(n->inputs[k], name) == 0) {
                if (k == 1 && default_domain(n->domain) && strcmp(n->op_type, "MatMul") == 0) (*mm)++;
                else (*other)++;
            }
        for (size_t a = 0; a < n->nattrs; a++)
            for (size_t j = 0; j < n->attrs[a].ngraphs; j++) uses(n->attrs[a].graphs[j], name, mm, other);
    }
}

static int in_list(char *const *l, size_t n, const char *s) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(l[i], s) == 0) return 1;
    return 0;
}

static int is_init_anywhere(const npuc__onnx_graph *g, const char *s) {
    if (in_list(g->initializers, g->ninitializers, s)) return 1;
    for (size_t i = 0; i < g->nnodes; i++)
        for (size_t a = 0; a < g->nodes[i].nattrs; a++)
            for (size_t k = 0; k < g->nodes[i].attrs[a].ngraphs; k++)
                if (is_init_anywhere(g->nodes[i].attrs[a].graphs[k], s)) return 1;
    return 0;
}

/* DequantizeLinear nodes reading initializers of their graph whose output
 * is a declared float tensor that no graph holds as a weight. */
static npuc_status find_undo(npuc__oq_plan *q, const npuc__onnx_graph *g) {
    for (size_t i = 0; i < g->nnodes; i++) {
        const npuc__onnx_node *n = &g->nodes[i];
        for (size_t a = 0; a < n->nattrs; a++)
            for (size_t k = 0; k < n->attrs[a].ngraphs; k++) {
                npuc_status st = find_undo(q, n->attrs[a].graphs[k]);
                if (st != NPUC_OK) return st;
            }
        if (!default_domain(n->domain) || strcmp(n->op_type, "DequantizeLinear") != 0 || n->noutputs != 1) continue;
        long d = decl_of(q, n->outputs[0]);
        if (d < 0 || !npuc_dtype_is_float(q->w->t[d].dtype) || is_init_anywhere(q->md->graph, n->outputs[0])) continue;
        int ok = n->ninputs >= 2;
        for (size_t k = 0; k < n->ninputs && ok; k++) ok = !*n->inputs[k] || in_list(g->initializers, g->ninitializers, n->inputs[k]);
        if (!ok) continue;
        if (npuc__strmap_put(&q->undo_out, n->outputs[0], (size_t)d) != 0) return oom(q);
        q->owner[d] = -3;
        for (size_t k = 0; k < n->ninputs; k++) {
            if (!*n->inputs[k]) continue;
            if (npuc__strmap_put(&q->undo_in, n->inputs[k], 0) != 0) return oom(q);
            long di = decl_of(q, n->inputs[k]);
            if (di >= 0) q->owner[di] = -2;
        }
        q->nundo++;
    }
    return NPUC_OK;
}

static npuc_status bad_entry(npuc__oq_plan *q, const char *name, const char *why) {
    return npuc_fail(q->w->ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s': %s", q->w->path, name, why);
}

static int json_int(json_t *o, const char *k, int64_t *v) {
    json_t *x = json_object_get(o, k);
    if (!json_is_integer(x)) return -1;
    *v = json_integer_value(x);
    return 0;
}

static npuc_status read_entry(npuc__oq_plan *q, const char *name, json_t *v, oq_entry *e) {
    npuc_writer *w = q->w;
    int64_t bits, axis, group;
    json_t *shape = json_object_get(v, "shape");
    const char *gran = json_string_value(json_object_get(v, "granularity"));
    const char *dt = json_string_value(json_object_get(v, "dtype"));
    if (json_int(v, "bits", &bits) || json_int(v, "axis", &axis) || json_int(v, "group_size", &group) || !gran ||
        !dt || !json_is_array(shape) || json_array_size(shape) > 8 || bits < 2 || bits > 8)
        return npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': the artifact entry is incomplete", w->path, name);
    if (!(e->name = npuc__strdup(name))) return oom(q);
    e->bits = (int)bits;
    e->sym = json_is_true(json_object_get(v, "symmetric"));
    e->packed = json_is_true(json_object_get(v, "packed"));
    e->gran = strcmp(gran, "tensor") == 0 ? G_TENSOR : strcmp(gran, "group") == 0 ? G_GROUP : G_CHANNEL;
    e->rank = (int)json_array_size(shape);
    e->numel = 1;
    for (int k = 0; k < e->rank; k++) {
        e->shape[k] = json_integer_value(json_array_get(shape, (size_t)k));
        if (e->shape[k] < 0 || npuc_mul_overflow((uint64_t)e->numel, (uint64_t)e->shape[k], (uint64_t *)&e->numel))
            return npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': bad shape", w->path, name);
    }
    if (npuc_dtype_parse(dt, &e->dtype) != 0)
        return npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%s'", w->path, name, dt);
    e->axis = e->gran == G_TENSOR ? -1 : (int)axis;
    if (e->gran != G_TENSOR && (axis < 0 || axis >= e->rank))
        return npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': axis %" PRId64 " outside the shape", w->path, name,
                         axis);
    e->C = e->gran == G_TENSOR ? 1 : e->shape[e->axis];
    e->group = group;
    e->t[R_CODES] = decl_of(q, json_string_value(json_object_get(v, "codes")));
    e->t[R_SCALE] = decl_of(q, json_string_value(json_object_get(v, "scale")));
    e->t[R_ZP] = decl_of(q, json_string_value(json_object_get(v, "zero_point")));
    if (e->t[R_CODES] < 0 || e->t[R_SCALE] < 0 || (!e->sym && e->t[R_ZP] < 0))
        return npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': a part of the entry is not in the output", w->path,
                         name);
    e->sdtype = w->t[e->t[R_SCALE]].dtype;
    if (e->gran == G_GROUP) {
        if (group <= 0) return npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': group_size %" PRId64, w->path, name, group);
        /* ONNX blocks one axis: the channel's sequence must run along one (or be
         * contiguous, below). */
        int seq = -1, nseq = 0;
        for (int k = 0; k < e->rank; k++)
            if (k != e->axis && e->shape[k] > 1) {
                seq = k;
                nseq++;
            }
        int64_t outer = 1, inner = 1;
        for (int k = 0; k < e->axis; k++) outer *= e->shape[k];
        for (int k = e->axis + 1; k < e->rank; k++) inner *= e->shape[k];
        if (nseq > 1 && (outer == 1 || inner == 1)) {
            /* The sequence is contiguous: block the 2-D view [C, inner]
             * (or [outer, C]) and Reshape back. */
            e->reshape = 1;
            e->orank = e->rank;
            memcpy(e->oshape, e->shape, sizeof e->shape);
            e->rank = 2;
            e->shape[0] = outer == 1 ? e->C : outer;
            e->shape[1] = outer == 1 ? inner : e->C;
            e->axis = outer == 1 ? 0 : 1;
            seq = 1 - e->axis;
            nseq = 1;
        }
        if (nseq > 1) {
            char why[256];
            snprintf(why, sizeof why, "groups of %" PRId64 " run across %d axes of the shape, and ONNX's blocked "
                     "DequantizeLinear blocks one axis; use --per-channel, or write safetensors", group, nseq);
            return bad_entry(q, name, why);
        }
        if (seq < 0) seq = e->axis == 0 && e->rank > 1 ? 1 : 0;
        e->baxis = seq;
        e->ngroups = (e->numel / (e->C ? e->C : 1) + group - 1) / group;
        e->tr = seq < e->axis;
    }
    /* The stored parts must hold what the entry describes (the artifact
     * may come from any file). */
    uint64_t ncodes = e->packed ? ((uint64_t)e->numel * (uint64_t)e->bits + 7) / 8 : (uint64_t)e->numel;
    uint64_t nsc = out_count(e, R_SCALE);
    size_t ssz = e->sdtype == NPUC_DTYPE_F32 ? 4 : e->sdtype == NPUC_DTYPE_F16 || e->sdtype == NPUC_DTYPE_BF16 ? 2 : 0;
    const npuc_tensor_info *tc = &w->t[e->t[R_CODES]], *ts = &w->t[e->t[R_SCALE]];
    if (tc->nbytes != ncodes || (npuc_dtype_size(tc->dtype) != 1) || !ssz || ts->nbytes != nsc * ssz ||
        (e->t[R_ZP] >= 0 && (w->t[e->t[R_ZP]].nbytes != nsc || npuc_dtype_size(w->t[e->t[R_ZP]].dtype) != 1)) ||
        (e->packed && e->bits == 8))
        return npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': its stored codes, scales or zero points do not "
                         "have the sizes the artifact entry describes", w->path, name);
    return NPUC_OK;
}

static const char *form_name(const oq_entry *e, char *b, size_t nb) {
    const char *ty = e->otype == T_INT4 ? "int4" : e->otype == T_UINT4 ? "uint4" : e->otype == T_INT8 ? "int8" : "uint8";
    const char *g = e->gran == G_TENSOR ? "per tensor" : e->gran == G_CHANNEL ? "per channel" : "blocked";
    switch (e->form) {
    case F_NBITS: snprintf(b, nb, "com.microsoft::MatMulNBits (4-bit, block %" PRId64 ")", e->group); break;
    case F_MUL: snprintf(b, nb, "DequantizeLinear %s scale 1 + Mul by %s scales", ty, g); break;
    case F_CAST: snprintf(b, nb, "Cast %s + Mul by %s scales", ty, g); break;
    default:
        if (e->gran == G_GROUP) snprintf(b, nb, "DequantizeLinear %s blocked (block_size %" PRId64 ")", ty, e->group);
        else snprintf(b, nb, "DequantizeLinear %s %s", ty, g);
    }
    return b;
}

npuc_status npuc__oq_plan_make(npuc_writer *w, const unsigned char *skel, size_t nskel, const char *art,
                               npuc__oq_put_data_fn put, void *put_user, npuc__oq_plan **out) {
    *out = NULL;
    json_t *root = art ? json_loads(art, 0, NULL) : NULL, *v;
    json_t *tensors = json_object_get(root, "tensors");
    const char *k;
    size_t nq = 0;
    npuc_status st = NPUC_OK;
    json_object_foreach(tensors, k, v) {
        const char *enc = json_string_value(json_object_get(v, "encoding"));
        if (!enc || strcmp(enc, "fake_quant") == 0) continue;
        if (strcmp(enc, "quant") != 0) {
            st = npuc_fail(w->ctx, NPUC_ERR_UNSUPPORTED,
                           "%s: tensor '%s' is stored as '%s', which in ONNX needs graph edits npuc does not write "
                           "(a split MatMul, sparse storage); write safetensors", w->path, k, enc);
            goto fail_json;
        }
        nq++;
    }
    if (!skel) {
        json_decref(root);
        return nq ? npuc_fail(w->ctx, NPUC_ERR_UNSUPPORTED, "%s: quantized tensors need the ONNX graph their "
                              "weights belong to, and this model has none (it did not come from an ONNX file); use "
                              "--fake-quant, or write safetensors", w->path)
                  : NPUC_OK;
    }
    npuc__oq_plan *q = calloc(1, sizeof *q);
    if (!q) {
        json_decref(root);
        return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    *out = q;
    q->w = w;
    q->put = put;
    q->put_user = put_user;
    q->e = calloc(nq, sizeof *q->e);
    q->owner = malloc((w->n + 1) * sizeof *q->owner);
    q->role = calloc(w->n + 1, sizeof *q->role);
    if (!q->e || !q->owner || !q->role) { st = oom(q); goto fail_json; }
    for (size_t i = 0; i < w->n; i++) {
        q->owner[i] = -1;
        if (npuc__strmap_put(&q->declared, w->t[i].name, i) != 0) { st = oom(q); goto fail_json; }
    }
    if ((st = npuc__onnx_graph_parse_bytes(w->ctx, w->path, skel, nskel, &q->md)) != NPUC_OK) goto fail_json;
    names_graph(q, q->md->graph);
    if ((st = find_undo(q, q->md->graph)) != NPUC_OK) goto fail_json;
    if (!nq) {
        json_decref(root);
        if (!q->nundo) {
            npuc__oq_free(q);
            *out = NULL;
        }
        return NPUC_OK;
    }
    json_object_foreach(tensors, k, v) {
        const char *enc = json_string_value(json_object_get(v, "encoding"));
        if (!enc || strcmp(enc, "quant") != 0) continue;
        /* A part of another entry (lowrank factors) is not a graph weight. */
        json_t *ov;
        const char *ok;
        json_object_foreach(tensors, ok, ov) {
            json_t *parts = json_object_get(ov, "parts");
            for (size_t j = 0; strcmp(ok, k) != 0 && j < json_array_size(parts); j++)
                if (strcmp(json_string_value(json_array_get(parts, j)) ? json_string_value(json_array_get(parts, j)) : "", k) == 0) {
                    st = npuc_fail(w->ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s' is a part of '%s' (%s), which in "
                                   "ONNX needs a split MatMul npuc does not write; write safetensors", w->path, k, ok,
                                   json_string_value(json_object_get(ov, "encoding")));
                    goto fail_json;
                }
        }
        oq_entry *e = &q->e[q->ne];
        if ((st = read_entry(q, k, v, e)) != NPUC_OK) {
            free(e->name); /* not counted in q->ne, so not freed with the plan */
            e->name = NULL;
            goto fail_json;
        }
        q->ne++;
        if (npuc__strmap_put(&q->byname, e->name, q->ne - 1) != 0) { st = oom(q); goto fail_json; }
        for (int r = 0; r < 3; r++)
            if (e->t[r] >= 0) {
                q->owner[e->t[r]] = (long)(q->ne - 1);
                q->role[e->t[r]] = r;
            }
    }
    json_decref(root);
    root = NULL;

    /* MatMulNBits where asked for and possible. */
    const char *i4 = npuc__writer_opt(w, "onnx-int4");
    int nbits = i4 && strcmp(i4, "matmulnbits") == 0;
    char nbits_why[256] = "";
    for (size_t i = 0; i < q->ne && nbits; i++) {
        oq_entry *e = &q->e[i];
        if (e->bits != 4) continue;
        int mm = 0, other = 0;
        uses(q->md->graph, e->name, &mm, &other);
        const char *why = e->gran != G_GROUP ? "not in groups"
                        : e->rank != 2 || e->axis != 1 ? "not a [K, N] weight grouped along K (its layout's output "
                                                         "axis is not 1)"
                        : e->group < 16 || (e->group & (e->group - 1)) ? "its group size is not a power of 2 >= 16"
                        : !mm || other ? "it is not read by MatMul nodes only" : NULL;
        if (why) {
            if (!nbits_why[0]) snprintf(nbits_why, sizeof nbits_why, "; '%.100s' not as MatMulNBits: %s", e->name, why);
            continue;
        }
        e->form = F_NBITS;
        e->K = e->shape[0];
        e->N = e->shape[1];
        e->nb = e->ngroups;
        e->tr = 0; /* scales [N, n_blocks]: npuc's [C, G] */
        q->ms_needed = 1;
    }

    /* The opset the encoding needs, and whether the model can be raised. */
    int have;
    q->v = opset_of(q->md, NULL, &have);
    (void)opset_of(q->md, "com.microsoft", &q->ms_present);
    if (!have || q->v < 7) {
        st = npuc_fail(w->ctx, NPUC_ERR_UNSUPPORTED, "%s: the model imports the default ONNX opset %s%" PRId64
                       "; npuc writes quantized weights into models of opset 7 or later", w->path,
                       have ? "" : "not at all, ", q->v);
        goto fail;
    }
    int64_t need = 10;
    int groups = 0;
    for (size_t i = 0; i < q->ne; i++) {
        const oq_entry *e = &q->e[i];
        if (e->form == F_NBITS) continue;
        int64_t n = e->gran == G_GROUP || e->bits == 4 ? 21 : e->gran == G_CHANNEL ? 13 : 10;
        groups |= e->gran == G_GROUP;
        if (n > need) need = n;
    }
    char why[512] = "";
    const char *blocked = NULL;
    q->target = q->v;
    if (q->v < need) {
        blocked = conv_blocked(q->md->graph, q->v, need, why, sizeof why);
        if (!blocked) q->target = need;
        else if (groups) {
            st = npuc_fail(w->ctx, NPUC_ERR_UNSUPPORTED, "%s: blocked quantization needs opset 21 and the model's "
                           "opset %" PRId64 " cannot be raised: %s", w->path, q->v, blocked);
            goto fail;
        } else if (need == 21 && q->v < 13 && !conv_blocked(q->md->graph, q->v, 13, why, sizeof why)) {
            q->target = 13; /* int4 per channel stored as int8 at opset 13 */
        }
    }
    int sub = 0, int4_as8 = 0;
    for (size_t i = 0; i < q->ne; i++) {
        oq_entry *e = &q->e[i];
        if (e->form == F_NBITS) continue;
        if (e->bits == 4 && e->packed && q->target >= 21) e->otype = e->sym ? T_INT4 : T_UINT4;
        else e->otype = e->sym ? T_INT8 : T_UINT8;
        if (e->bits == 4 && q->target < 21) int4_as8++;
        else if (e->bits != 8 && e->bits != 4) sub++;
        if (e->gran == G_GROUP || e->gran == G_TENSOR) e->form = q->target >= 10 ? F_DQ : F_CAST;
        else e->form = q->target >= 13 ? F_DQ : q->target >= 10 ? F_MUL : F_CAST;
    }
    for (size_t i = 0; i < q->ne; i++) {
        oq_entry *e = &q->e[i];
        if (!(e->qn = uniq(q, e->name, "_quantized")) || !(e->sn = uniq(q, e->name, "_scale")) ||
            !(e->zn = uniq(q, e->name, "_zero_point")) ||
            !(e->nn = uniq(q, e->name, e->form == F_CAST ? "_Cast_codes" : "_DequantizeLinear"))) {
            st = oom(q);
            goto fail;
        }
    }
    /* The summary: forms with counts, the opset, notes. */
    char *s = q->summary;
    size_t left = sizeof q->summary, used = 0;
    used += (size_t)snprintf(s, left, "%s: ONNX quantized weights written as", w->path);
    for (size_t i = 0; i < q->ne && used < left; i++) {
        char b[160], c[160];
        form_name(&q->e[i], b, sizeof b);
        int dup = 0;
        for (size_t j = 0; j < i && !dup; j++) dup = strcmp(form_name(&q->e[j], c, sizeof c), b) == 0;
        if (dup) continue;
        size_t cnt = 0;
        for (size_t j = 0; j < q->ne; j++) cnt += strcmp(form_name(&q->e[j], c, sizeof c), b) == 0;
        used += (size_t)snprintf(s + used, left - used, "%s %zu x %s", i ? "," : "", cnt, b);
    }
    if (used < left) {
        if (q->target > q->v)
            used += (size_t)snprintf(s + used, left - used, "; opset raised %" PRId64 " -> %" PRId64, q->v, q->target);
        else
            used += (size_t)snprintf(s + used, left - used, "; opset %" PRId64, q->target);
    }
    if (used < left && blocked)
        used += (size_t)snprintf(s + used, left - used, " (not raised to %" PRId64 ": %s)", need, blocked);
    if (used < left && int4_as8)
        used += (size_t)snprintf(s + used, left - used, "; %d 4-bit weight(s) stored as int8 (INT4 needs opset 21)",
                                 int4_as8);
    if (used < left && sub)
        used += (size_t)snprintf(s + used, left - used, "; %d weight(s) of 2, 3, 5, 6 or 7 bits stored one code a byte "
                                 "(ONNX has no such type)", sub);
    if (used < left && nbits_why[0]) snprintf(s + used, left - used, "%s", nbits_why);
    return NPUC_OK;

fail_json:
    json_decref(root);
fail:
    npuc__oq_free(*out);
    *out = NULL;
    return st;
}

const char *npuc__oq_summary(const npuc__oq_plan *q) { return q ? q->summary : ""; }

char *npuc__oq_artifact(const npuc__oq_plan *q, const char *art) {
    json_t *root = json_loads(art, 0, NULL);
    json_t *tensors = json_object_get(root, "tensors");
    if (!root) return npuc__strdup(art);
    for (size_t i = 0; q && i < q->ne; i++) {
        const oq_entry *e = &q->e[i];
        json_t *v = json_object_get(tensors, e->name);
        if (!v) continue;
        /* Read back from the ONNX file: codes one a byte, F32 scales [C] or [],
         * a FLOAT weight (no Cast after the node). */
        if (e->form == F_DQ && e->bits == 8 && e->gran != G_GROUP && e->sdtype == NPUC_DTYPE_F32 &&
            e->dtype == NPUC_DTYPE_F32) {
            json_object_set_new(v, "codes", json_string(e->qn));
            json_object_set_new(v, "scale", json_string(e->sn));
            json_t *parts = json_array();
            json_array_append_new(parts, json_string(e->qn));
            json_array_append_new(parts, json_string(e->sn));
            if (!e->sym) {
                json_object_set_new(v, "zero_point", json_string(e->zn));
                json_array_append_new(parts, json_string(e->zn));
            }
            json_object_set_new(v, "parts", parts);
        } else {
            json_object_del(tensors, e->name);
        }
    }
    char *s = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(root);
    return s;
}

void npuc__oq_free(npuc__oq_plan *q) {
    if (!q) return;
    for (size_t i = 0; i < q->ne; i++) {
        oq_entry *e = &q->e[i];
        free(e->name);
        free(e->qn);
        free(e->sn);
        free(e->zn);
        free(e->nn);
    }
    free(q->e);
    free(q->owner);
    free(q->role);
    free(q->buf);
    npuc__strmap_free(&q->byname);
    npuc__strmap_free(&q->names);
    npuc__strmap_free(&q->undo_out);
    npuc__strmap_free(&q->undo_in);
    npuc__strmap_free(&q->declared);
    npuc__onnx_graph_free(q->md);
    free(q);
}
