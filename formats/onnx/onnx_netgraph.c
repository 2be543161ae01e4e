/*
 * onnx_netgraph.c - the network graph of an ONNX model (src/graph/graph_net.h)
 * built from the graph the file states (onnx_model.h), and the roles and
 * layouts of the weights from the ops that consume them.
 *
 * ONNX's row calls this as its read_graph hook (format_row.h) when a model
 * is opened, for a model opened from an .onnx file and for one converted
 * from it (the "onnx.model" metadata entry travels with the model).  Every
 * node of the file becomes a node, main graph and subgraphs (If branches,
 * Loop and Scan bodies) alike, with evidence "file" and confidence
 * certain; its inputs and outputs keep their order, the weights it reads
 * (initializers and Constant values, by name) are attached to it as
 * weights, and the other names are values.  The main graph's inputs and
 * outputs are marked is_input / is_output.  Value shapes are left unknown
 * (ONNX broadcasting and MatMul's last-axis channels do not fit the graph
 * check's channel-axis-1 rule); weight shapes are the tensors'.
 *
 * A weight's role and layout come from the op that reads it and the input
 * slot:
 *   Conv W              [O, I/g, k...]  OIHW, out 0, in 1 (depthwise when
 *                                       group == O and I/g == 1)
 *   ConvTranspose W     [I, O/g, k...]  IOHW, out 1, in 0 (depthwise when
 *                                       group == I > 1 and O/g == 1: out 0)
 *   Gemm B              transB 0: [K,N] IO, out 1; transB 1: [N,K] OI, out 0
 *   MatMul B            [K, N]          IO, out 1, in 0
 *   LSTM/GRU/RNN W, R   [dirs, gates*hidden, in]  DOI, out 1, in 2
 *   LSTM/GRU/RNN B      [dirs, 2*gates*hidden]    a bias, per channel along 1
 *   Gather data         [vocab, dim]    an embedding, OI (rows)
 *   Conv/ConvT/Gemm bias, BatchNormalization scale/B/mean/var, the scale
 *   and bias of Layer/Instance normalization: roles without a layout.
 * A weight read through Identity, Cast, Transpose or Reshape is resolved
 * to the stored tensor: a Transpose maps the consumer's axes back through
 * its perm; a Reshape only when value_info states its output shape and the
 * product of the dimensions before the axis and the axis extent agree.
 * These decisions replace the name/rank rules for the tensor
 * (npuc__model_state_layout: confidence certain, evidence naming the op).
 * A tensor two consumers read in different ways keeps the name rules.
 *
 * Edges the passes ask for are stated as node attributes, so they are seen
 * for any reader of the graph: a BatchNormalization whose input is the
 * only use of a Conv / ConvTranspose / Gemm / MatMul output gets
 * "bn_of" = that node; a weighted node's "prune_consumers" lists the
 * weighted nodes its output reaches through Relu, Clip, HardSigmoid,
 * BatchNormalization, Mul/Add/Div/Sub by a scalar weight, Identity,
 * Dropout and pooling, and an Add of two branches ("prune_with" then
 * names the other branches' producers, which must prune together); a
 * depthwise Conv passes channels through; or "prune_refused" says
 * why a structured prune of its output cannot follow the edges (an op
 * outside that list, a model output, an Add whose other branch is not made
 * by a weighted node).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_net.h"
#include "onnx_format.h"
#include "onnx_model.h"
#include "strmap.h"

typedef struct onode {
    const npuc__onnx_graph *g;
    const npuc__onnx_node *n;
} onode;

/* The decision for one model tensor. */
typedef struct wdec {
    int state; /* 0 none, 1 decided, 2 two consumers disagree */
    npuc_role role;
    npuc_layout layout;
    char why[160];
} wdec;

typedef struct bld {
    npuc_ctx *ctx;
    npuc_model *m;
    const npuc__onnx_model *om;
    npuc__ng *ng;
    onode *nodes; /* every node of every graph, main graph first */
    size_t nnodes, capnodes;
    npuc__strmap prod; /* value name -> index in nodes of its producer */
    npuc__strmap vinfo; /* value name -> index in vi of its value_info */
    const npuc__onnx_value **vi;
    size_t nvi, capvi;
    wdec *dec;
    npuc_status st;
} bld;

static npuc_status nomem(bld *b) {
    if (b->st == NPUC_OK) b->st = npuc_fail(b->ctx, NPUC_ERR_NOMEM, "%s: out of memory", npuc_model_path(b->m));
    return b->st;
}

/* Lists g's nodes and value_info, then those of its subgraphs (the parser
 * bounds the depth at NPUC__ONNX_MAX_DEPTH). */
static void collect(bld *b, const npuc__onnx_graph *g) {
    for (size_t i = 0; i < g->nnodes && b->st == NPUC_OK; i++) {
        if (npuc__grow((void **)&b->nodes, &b->capnodes, b->nnodes + 1, sizeof *b->nodes)) { nomem(b); return; }
        b->nodes[b->nnodes] = (onode){g, &g->nodes[i]};
        for (size_t k = 0; k < g->nodes[i].noutputs; k++) {
            const char *o = g->nodes[i].outputs[k];
            if (*o && !npuc__strmap_get(&b->prod, o, NULL) && npuc__strmap_put(&b->prod, o, b->nnodes)) {
                nomem(b);
                return;
            }
        }
        b->nnodes++;
    }
    const npuc__onnx_value *lists[3] = {g->value_info, g->outputs, g->inputs};
    size_t counts[3] = {g->nvalue_info, g->noutputs, g->ninputs};
    for (int l = 0; l < 3; l++)
        for (size_t i = 0; i < counts[l] && b->st == NPUC_OK; i++) {
            const npuc__onnx_value *v = &lists[l][i];
            if (!v->name || !*v->name || v->rank < 0 || npuc__strmap_get(&b->vinfo, v->name, NULL)) continue;
            if (npuc__grow((void **)&b->vi, &b->capvi, b->nvi + 1, sizeof *b->vi) ||
                npuc__strmap_put(&b->vinfo, v->name, b->nvi)) {
                nomem(b);
                return;
            }
            b->vi[b->nvi++] = v;
        }
    for (size_t i = 0; i < g->nnodes && b->st == NPUC_OK; i++)
        for (size_t a = 0; a < g->nodes[i].nattrs; a++)
            for (size_t s = 0; s < g->nodes[i].attrs[a].ngraphs && b->st == NPUC_OK; s++)
                if (g->nodes[i].attrs[a].graphs[s]) collect(b, g->nodes[i].attrs[a].graphs[s]);
}

static const npuc__onnx_attr *attr(const npuc__onnx_node *n, const char *name) {
    for (size_t a = 0; a < n->nattrs; a++)
        if (n->attrs[a].name && strcmp(n->attrs[a].name, name) == 0) return &n->attrs[a];
    return NULL;
}

static int64_t attr_int(const npuc__onnx_node *n, const char *name, int64_t dflt) {
    const npuc__onnx_attr *a = attr(n, name);
    return a && (a->type == NPUC__ONNX_ATTR_INT || a->type == 0) ? a->i : dflt;
}

static int default_domain(const npuc__onnx_node *n) {
    return !n->domain || !*n->domain || strcmp(n->domain, "ai.onnx") == 0;
}

static int is_op(const npuc__onnx_node *n, const char *op) {
    return default_domain(n) && n->op_type && strcmp(n->op_type, op) == 0;
}

/* A name read as a weight: the stored tensor and how the axes of the value
 * the consumer reads map onto the tensor's (ax[a] = the tensor's axis for
 * the value's axis a; rank the value's rank, -1 when a Reshape left it
 * unknown). */
typedef struct wref {
    size_t t;
    int rank;
    int ax[NPUC_MAX_RANK];
    const char *via; /* "", or the op it was resolved through */
} wref;

static int shape_of(bld *b, const char *name, int *rank, int64_t *dims) {
    size_t k;
    if (!npuc__strmap_get(&b->vinfo, name, &k)) return -1;
    const npuc__onnx_value *v = b->vi[k];
    if (v->rank < 0 || v->rank > NPUC_MAX_RANK) return -1;
    for (int a = 0; a < v->rank; a++)
        if (v->dims[a] < 0) return -1;
    *rank = v->rank;
    for (int a = 0; a < v->rank; a++) dims[a] = v->dims[a];
    return 0;
}

/* The rank value_info or a graph input / output states for name (its
 * dims may be symbolic), or -1. */
static int stated_rank(bld *b, const char *name) {
    size_t k;
    if (!name || !*name || !npuc__strmap_get(&b->vinfo, name, &k)) return -1;
    return b->vi[k]->rank;
}

/* Resolves name to a model tensor, through at most 16 pass-through ops. */
static int resolve(bld *b, const char *name, wref *r, int depth) {
    if (!name || !*name || depth > 16) return -1;
    size_t idx;
    if (npuc_model_find(b->m, name, &idx) == 0) {
        const npuc_tensor_info *t = npuc_model_tensor(b->m, idx);
        r->t = idx;
        r->rank = t->rank;
        for (int a = 0; a < t->rank; a++) r->ax[a] = a;
        r->via = "";
        return 0;
    }
    size_t p;
    if (!npuc__strmap_get(&b->prod, name, &p)) return -1;
    const npuc__onnx_node *n = b->nodes[p].n;
    if (n->ninputs < 1 || n->noutputs < 1 || strcmp(n->outputs[0], name) != 0) return -1;
    if (is_op(n, "Identity") || is_op(n, "Cast")) {
        if (resolve(b, n->inputs[0], r, depth + 1)) return -1;
        if (!*r->via) r->via = n->op_type;
        return 0;
    }
    if (is_op(n, "Transpose")) {
        wref in;
        if (resolve(b, n->inputs[0], &in, depth + 1) || in.rank < 0) return -1;
        const npuc__onnx_attr *pa = attr(n, "perm");
        int perm[NPUC_MAX_RANK];
        if (!pa || pa->type != NPUC__ONNX_ATTR_INTS) { /* default: reverse the axes */
            for (int a = 0; a < in.rank; a++) perm[a] = in.rank - 1 - a;
        } else {
            if ((int)pa->nints != in.rank) return -1;
            for (int a = 0; a < in.rank; a++) {
                if (pa->ints[a] < 0 || pa->ints[a] >= in.rank) return -1;
                perm[a] = (int)pa->ints[a];
            }
        }
        *r = in;
        for (int a = 0; a < in.rank; a++) r->ax[a] = in.ax[perm[a]];
        r->via = "Transpose";
        return 0;
    }
    if (is_op(n, "Reshape")) {
        wref in;
        if (resolve(b, n->inputs[0], &in, depth + 1) || in.rank < 0) return -1;
        *r = in;
        r->via = "Reshape";
        r->rank = -1; /* axes mapped only where value_info states the output */
        int orank;
        int64_t od[NPUC_MAX_RANK];
        if (shape_of(b, name, &orank, od) != 0) return 0;
        /* in's value shape, from the tensor through in.ax */
        const npuc_tensor_info *t = npuc_model_tensor(b->m, in.t);
        int64_t id[NPUC_MAX_RANK];
        for (int a = 0; a < in.rank; a++) id[a] = t->shape[in.ax[a]];
        r->rank = orank;
        for (int a = 0; a < orank; a++) {
            /* output axis a maps to input axis k when the elements before
             * it and its extent agree: the split and merge of axes around
             * it leave it alone */
            r->ax[a] = -1;
            int64_t before = 1;
            for (int j = 0; j < a; j++) before *= od[j];
            int64_t acc = 1;
            for (int k = 0; k < in.rank; k++) {
                if (acc == before && id[k] == od[a]) { r->ax[a] = in.ax[k]; break; }
                acc *= id[k];
                if (acc > before) break;
            }
        }
        return 0;
    }
    return -1;
}

/* The layout whose out and in axes are these on a tensor of rank r. */
static npuc_layout layout_for(int rank, int out, int in) {
    if (rank == 2) {
        if (out == 0 && (in == 1 || in < 0)) return NPUC_LAYOUT_OI;
        if (out == 1 && (in == 0 || in < 0)) return NPUC_LAYOUT_IO;
        return NPUC_LAYOUT_NONE;
    }
    if (rank >= 3) { /* in < 0: a Reshape merged the input axis away; the out axis decides */
        if (out == 0 && (in == 1 || in < 0)) return NPUC_LAYOUT_OIHW;
        if (out == 1 && (in == 0 || in < 0)) return NPUC_LAYOUT_IOHW;
        if (out == rank - 1 && (in == rank - 2 || in < 0)) return NPUC_LAYOUT_HWIO;
    }
    return NPUC_LAYOUT_NONE;
}

/* What input k of node n is when it is a weight: role string for the
 * graph, role and the consumer-side axes (out, in; -1 none) and the layout
 * it needs on the value (want: 0 any, else the layout family). */
typedef struct slot {
    const char *role;
    npuc_role r;
    int out, in;  /* axes of the value the op reads */
    int kind;     /* 0 no layout, 1 OI/OIHW family by axes, 2 DOI, 3 a bias along axis `out` */
    const char *what;
} slot;

static slot slot_of(const npuc__onnx_node *n, size_t k, int vrank, int64_t dim0, int64_t dim1) {
    slot s = {"input", NPUC_ROLE_OTHER, -1, -1, 0, NULL};
    if (!default_domain(n) || !n->op_type) return s;
    const char *op = n->op_type;
    if (strcmp(op, "Conv") == 0) {
        if (k == 1 && vrank >= 3) {
            int64_t group = attr_int(n, "group", 1);
            int dw = group > 1 && dim1 == 1;
            s = (slot){dw ? "depthwise_kernel" : "kernel", dw ? NPUC_ROLE_DWCONV : NPUC_ROLE_CONV, 0, 1, 1,
                       dw ? "Conv W [C,1,k..] with group == C (depthwise)" : "Conv W [O,I/g,k..]"};
        } else if (k == 2) s = (slot){"bias", NPUC_ROLE_BIAS, -1, -1, 0, "Conv B"};
    } else if (strcmp(op, "ConvTranspose") == 0) {
        int64_t group = attr_int(n, "group", 1);
        /* group > 1 with O/g == 1: output channel c reads W[c] alone, so
         * its channels run along axis 0, as a depthwise Conv's do */
        if (k == 1 && vrank >= 3 && group > 1 && dim1 == 1 && dim0 == group)
            s = (slot){"depthwise_kernel", NPUC_ROLE_DWCONV, 0, 1, 1,
                       "ConvTranspose W [C,1,k..] with group == C (depthwise: output channel c reads W[c])"};
        else if (k == 1 && vrank >= 3) s = (slot){"kernel", NPUC_ROLE_CONVT, 1, 0, 1, "ConvTranspose W [I,O/g,k..]"};
        else if (k == 2) s = (slot){"bias", NPUC_ROLE_BIAS, -1, -1, 0, "ConvTranspose B"};
    } else if (strcmp(op, "Gemm") == 0) {
        if (k == 1 && vrank == 2) {
            int tb = attr_int(n, "transB", 0) != 0;
            s = (slot){"kernel", NPUC_ROLE_LINEAR, tb ? 0 : 1, tb ? 1 : 0, 1,
                       tb ? "Gemm B with transB=1 [N,K]" : "Gemm B with transB=0 [K,N]"};
        } else if (k == 2) s = (slot){"bias", NPUC_ROLE_BIAS, -1, -1, 0, "Gemm C"};
    } else if (strcmp(op, "MatMul") == 0) {
        if (k == 1 && vrank == 2) s = (slot){"kernel", NPUC_ROLE_LINEAR, 1, 0, 1, "MatMul B [K,N]"};
    } else if (strcmp(op, "LSTM") == 0 || strcmp(op, "GRU") == 0 || strcmp(op, "RNN") == 0) {
        if ((k == 1 || k == 2) && vrank == 3)
            s = (slot){k == 1 ? "kernel" : "recurrent_kernel", NPUC_ROLE_RNN, 1, 2, 2,
                       k == 1 ? "W [dirs,gates*hidden,in]" : "R [dirs,gates*hidden,hidden]"};
        else if (k == 3 && vrank == 2) s = (slot){"bias", NPUC_ROLE_BIAS, 1, -1, 3, "B [dirs,2*gates*hidden]"};
    } else if (strcmp(op, "Gather") == 0) {
        if (k == 0 && vrank == 2) s = (slot){"embeddings", NPUC_ROLE_EMBEDDING, 0, -1, 1, "Gather data [vocab,dim]"};
        else if (k == 1) s = (slot){"indices", NPUC_ROLE_OTHER, -1, -1, 0, NULL};
    } else if (strcmp(op, "BatchNormalization") == 0) {
        static const char *const R[] = {NULL, "gamma", "beta", "mean", "var"};
        static const npuc_role RR[] = {NPUC_ROLE_OTHER, NPUC_ROLE_BN_GAMMA, NPUC_ROLE_BN_BETA, NPUC_ROLE_BN_MEAN,
                                       NPUC_ROLE_BN_VAR};
        if (k >= 1 && k <= 4) s = (slot){R[k], RR[k], -1, -1, 0, "BatchNormalization input"};
    } else if (strcmp(op, "LayerNormalization") == 0 || strcmp(op, "InstanceNormalization") == 0 ||
               strcmp(op, "GroupNormalization") == 0) {
        if (k == 1 || k == 2) s = (slot){k == 1 ? "scale" : "bias", NPUC_ROLE_NORM, -1, -1, 0, "normalization input"};
    } else if (strcmp(op, "Reshape") == 0 && k == 1) {
        s.role = "shape";
    }
    return s;
}

/* Records the decision s for the tensor w resolves to. */
static void decide(bld *b, const npuc__onnx_node *n, size_t k, const wref *w, const slot *s) {
    if (!s->what) return;
    const npuc_tensor_info *t = npuc_model_tensor(b->m, w->t);
    npuc_layout l = NPUC_LAYOUT_NONE;
    if (s->kind != 0) {
        if (w->rank < 0 || s->out >= w->rank || s->in >= w->rank) return; /* a Reshape that hides the axes */
        int out = w->ax[s->out], in = s->in >= 0 ? w->ax[s->in] : -1;
        if (out < 0 || (s->kind != 1 && s->in >= 0 && in < 0)) return;
        if (s->kind == 2) l = out == 1 && in == 2 && t->rank == 3 ? NPUC_LAYOUT_DOI : NPUC_LAYOUT_NONE;
        else if (s->kind == 3) l = t->rank == 2 ? (out == 1 ? NPUC_LAYOUT_IO : out == 0 ? NPUC_LAYOUT_OI : 0) : 0;
        else l = layout_for(t->rank, out, in);
        if (l == NPUC_LAYOUT_NONE) return; /* axes no layout names: the name rules stay */
    }
    wdec *d = &b->dec[w->t];
    if (d->state == 1 && (d->role != s->r || d->layout != l)) {
        d->state = 2;
        return;
    }
    if (d->state != 0) return;
    d->state = 1;
    d->role = s->r;
    d->layout = l;
    if (*w->via)
        snprintf(d->why, sizeof d->why, "ONNX graph: %s input %zu of %s (through %s)", s->what, k,
                 n->name && *n->name ? n->name : n->op_type, w->via);
    else
        snprintf(d->why, sizeof d->why, "ONNX graph: %s input %zu of %s", s->what, k,
                 n->name && *n->name ? n->name : n->op_type);
}

/* ------------------------------------------------------------ building the graph */

static size_t value(bld *b, const char *name) {
    size_t v = npuc__ng_find_value(b->ng, name);
    if (v != NPUC_GRAPH_NONE || b->st != NPUC_OK) return v;
    b->st = npuc__ng_add_value(b->ctx, b->ng, name, -1, NULL, NPUC_GRAPH_EV_FILE, NPUC_CONF_CERTAIN,
                               "an ONNX value", &v);
    return b->st == NPUC_OK ? v : NPUC_GRAPH_NONE;
}

/* A name for node n unused in the graph. */
static int node_name(bld *b, const npuc__onnx_node *n, size_t i, char *out, size_t cap) {
    if (n->name && *n->name) snprintf(out, cap, "%s", n->name);
    else snprintf(out, cap, "%s_%zu", n->op_type ? n->op_type : "node", i);
    size_t len = strlen(out);
    for (unsigned k = 2; npuc__ng_find_node(b->ng, out) != NPUC_GRAPH_NONE; k++) {
        if (k > 1000000) return -1;
        snprintf(out + (len < cap - 12 ? len : cap - 12), 12, "#%u", k);
    }
    return 0;
}

static void add_attrs(bld *b, size_t nd, const npuc__onnx_node *n) {
    char buf[512];
    for (size_t a = 0; a < n->nattrs && b->st == NPUC_OK; a++) {
        const npuc__onnx_attr *x = &n->attrs[a];
        if (!x->name) continue;
        if (x->type == NPUC__ONNX_ATTR_INT) snprintf(buf, sizeof buf, "%lld", (long long)x->i);
        else if (x->type == NPUC__ONNX_ATTR_FLOAT) snprintf(buf, sizeof buf, "%.9g", (double)x->f);
        else if (x->type == NPUC__ONNX_ATTR_STRING) snprintf(buf, sizeof buf, "%.200s", x->s ? x->s : "");
        else if (x->type == NPUC__ONNX_ATTR_INTS) {
            size_t o = 0;
            buf[o++] = '[';
            for (size_t k = 0; k < x->nints && o < sizeof buf - 32; k++)
                o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%lld", k ? "," : "", (long long)x->ints[k]);
            snprintf(buf + o, sizeof buf - o, "]");
        } else
            continue;
        b->st = npuc__ng_set_attr(b->ctx, b->ng, nd, x->name, buf);
    }
}

static void add_node(bld *b, size_t i) {
    const npuc__onnx_node *n = b->nodes[i].n;
    /* A Constant whose value is a weight is that weight, not a node. */
    if (is_op(n, "Constant") && n->noutputs == 1 && npuc_model_find(b->m, n->outputs[0], &(size_t){0}) == 0) return;
    /* So is a pass-through op whose output resolves to a stored tensor. */
    wref w;
    if (n->noutputs == 1 && n->ninputs >= 1 &&
        (is_op(n, "Identity") || is_op(n, "Cast") || is_op(n, "Transpose") || is_op(n, "Reshape")) &&
        resolve(b, n->outputs[0], &w, 0) == 0)
        return;
    size_t *in = calloc(n->ninputs + 1, sizeof *in), *out = calloc(n->noutputs + 1, sizeof *out);
    size_t nin = 0, nout = 0;
    struct { size_t k; wref w; } *ws = calloc(n->ninputs + 1, sizeof *ws);
    size_t nw = 0;
    if (!in || !out || !ws) { nomem(b); goto done; }
    for (size_t k = 0; k < n->ninputs && b->st == NPUC_OK; k++) {
        const char *x = n->inputs[k];
        if (!*x) continue;
        if (resolve(b, x, &ws[nw].w, 0) == 0) { ws[nw++].k = k; continue; }
        size_t v = value(b, x);
        if (v != NPUC_GRAPH_NONE) in[nin++] = v;
    }
    for (size_t k = 0; k < n->noutputs && b->st == NPUC_OK; k++) {
        if (!*n->outputs[k]) continue;
        size_t v = value(b, n->outputs[k]);
        if (v == NPUC_GRAPH_NONE) break;
        if (b->ng->vals[v].prod != NPUC_GRAPH_NONE) {
            b->st = npuc_fail(b->ctx, NPUC_ERR_FORMAT, "%s: ONNX graph: value '%.200s' is produced twice",
                              npuc_model_path(b->m), n->outputs[k]);
            break;
        }
        int dup = 0;
        for (size_t j = 0; j < nout; j++) dup |= out[j] == v;
        if (!dup) out[nout++] = v;
    }
    if (b->st != NPUC_OK) goto done;
    char name[600], src[300];
    if (node_name(b, n, i, name, sizeof name) != 0) {
        b->st = npuc_fail(b->ctx, NPUC_ERR_FORMAT, "%s: ONNX graph: too many nodes named '%.200s'",
                          npuc_model_path(b->m), name);
        goto done;
    }
    const char *op = n->op_type ? n->op_type : "";
    if (default_domain(n)) snprintf(src, sizeof src, "%.250s", op);
    else snprintf(src, sizeof src, "%.40s::%.250s", n->domain, op);
    /* the format-neutral op: ONNX's names, a depthwise Conv told apart;
     * an op of another domain is its domain-qualified name (unknown) */
    const char *nop = default_domain(n) ? op : src;
    for (size_t k = 0; k < nw; k++) {
        const npuc_tensor_info *t = npuc_model_tensor(b->m, ws[k].w.t);
        int64_t d0 = ws[k].w.rank >= 1 && ws[k].w.ax[0] >= 0 ? t->shape[ws[k].w.ax[0]] : -1;
        int64_t d1 = ws[k].w.rank >= 2 && ws[k].w.ax[1] >= 0 ? t->shape[ws[k].w.ax[1]] : -1;
        slot s = slot_of(n, ws[k].k, ws[k].w.rank, d0, d1);
        if (s.r == NPUC_ROLE_DWCONV && strcmp(op, "Conv") == 0) nop = "DepthwiseConv";
    }
    size_t nd;
    b->st = npuc__ng_add_node(b->ctx, b->ng, name, nop, src, in, nin, out, nout, NPUC_GRAPH_EV_FILE,
                              NPUC_CONF_CERTAIN, "an ONNX node", &nd);
    if (b->st == NPUC_ERR_ARG) b->st = NPUC_ERR_FORMAT; /* the file's graph broke a rule */
    if (b->st != NPUC_OK) goto done;
    add_attrs(b, nd, n);
    if (b->st == NPUC_OK && is_op(n, "MatMul")) {
        /* The output's rank as value_info or the graph's inputs state it
         * (a MatMul's is its first input's): "out_rank", which tells
         * whether its channels (the last axis) are axis 1 (fold-bn). */
        int r = stated_rank(b, n->noutputs ? n->outputs[0] : "");
        if (r < 0) r = stated_rank(b, n->ninputs ? n->inputs[0] : "");
        char buf[16];
        snprintf(buf, sizeof buf, "%d", r);
        if (r >= 2) b->st = npuc__ng_set_attr(b->ctx, b->ng, nd, "out_rank", buf);
    }
    for (size_t k = 0; k < nw && b->st == NPUC_OK; k++) {
        const npuc_tensor_info *t = npuc_model_tensor(b->m, ws[k].w.t);
        int64_t d0 = ws[k].w.rank >= 1 && ws[k].w.ax[0] >= 0 ? t->shape[ws[k].w.ax[0]] : -1;
        int64_t d1 = ws[k].w.rank >= 2 && ws[k].w.ax[1] >= 0 ? t->shape[ws[k].w.ax[1]] : -1;
        slot s = slot_of(n, ws[k].k, ws[k].w.rank, d0, d1);
        decide(b, n, ws[k].k, &ws[k].w, &s);
        /* the weight's axes on the stored tensor */
        int oa = s.out >= 0 && ws[k].w.rank > s.out ? ws[k].w.ax[s.out] : -1;
        int ia = s.in >= 0 && ws[k].w.rank > s.in ? ws[k].w.ax[s.in] : -1;
        /* a stored vector per channel (a bias, a BatchNorm's four): its one
         * axis is the channels (a structured prune's resize shrinks it) */
        if (oa < 0 && t->rank == 1 && ws[k].w.rank == 1 && ws[k].w.ax[0] == 0 &&
            (s.r == NPUC_ROLE_BIAS || s.r == NPUC_ROLE_BN_GAMMA || s.r == NPUC_ROLE_BN_BETA ||
             s.r == NPUC_ROLE_BN_MEAN || s.r == NPUC_ROLE_BN_VAR))
            oa = 0;
        b->st = npuc__ng_add_weight(b->ctx, b->ng, nd, t->name, s.role, t->rank, t->shape, oa, ia);
    }
done:
    free(in);
    free(out);
    free(ws);
}

/* ------------------------------------------------------------ edges for fold-bn and structured prune */

static int weighted(const npuc__ng *g, size_t nd) {
    const char *op = g->nodes[nd].op;
    for (size_t k = 0; k < g->nodes[nd].nw; k++) {
        const char *r = g->nodes[nd].w[k].role;
        if ((strcmp(r, "kernel") == 0 || strcmp(r, "depthwise_kernel") == 0) &&
            (strcmp(op, "Conv") == 0 || strcmp(op, "DepthwiseConv") == 0 || strcmp(op, "ConvTranspose") == 0 ||
             strcmp(op, "Gemm") == 0 || strcmp(op, "MatMul") == 0))
            return 1;
    }
    return 0;
}

/* Ops a channel passes through unchanged for a structured prune: one value
 * input (weights are per channel or scalar). */
static int passes_channels(const npuc__ng *g, size_t nd) {
    static const char *const P[] = {"Relu", "Clip", "HardSigmoid", "BatchNormalization", "Identity", "Dropout",
                                    "LeakyRelu", "Sigmoid", "Tanh", "MaxPool", "AveragePool", "HardSwish", NULL};
    const char *op = g->nodes[nd].op;
    for (int i = 0; P[i]; i++)
        if (strcmp(op, P[i]) == 0) return 1;
    /* Mul / Add / Sub / Div by a scalar weight: one value input (a per-channel
     * operand would have to shrink with the channels) */
    if ((strcmp(op, "Mul") == 0 || strcmp(op, "Add") == 0 || strcmp(op, "Sub") == 0 || strcmp(op, "Div") == 0) &&
        g->nodes[nd].nin == 1) {
        for (size_t k = 0; k < g->nodes[nd].nw; k++) {
            const npuc_graph_weight *w = &g->nodes[nd].w[k];
            if (w->rank < 0) return 0;
            for (int a = 0; a < w->rank; a++)
                if (w->shape[a] != 1) return 0;
        }
        return 1;
    }
    return 0;
}

typedef struct pwalk {
    size_t *cons;
    size_t ncons, cap;
    size_t *with; /* producers of the other branches of an Add: they prune together */
    size_t nwith, capwith;
    const char *refused;
    char why[300];
} pwalk;

/* Follows value v to the weighted nodes reading it. */
static void walk(bld *b, size_t v, pwalk *p, int depth) {
    const npuc__ng *g = b->ng;
    if (p->refused) return;
    if (depth > 64) {
        p->refused = "the chain of channel-preserving ops is longer than 64";
        return;
    }
    if (g->vals[v].is_output) {
        snprintf(p->why, sizeof p->why, "its channels reach the model output '%.200s'", g->vals[v].name);
        p->refused = p->why;
        return;
    }
    size_t c[64];
    size_t nc = npuc__ng_consumers(g, v, c, 64);
    if (nc > 64) {
        p->refused = "more than 64 consumers";
        return;
    }
    for (size_t k = 0; k < nc && !p->refused; k++) {
        size_t nd = c[k];
        const npuc__ng_node *n = &g->nodes[nd];
        if (weighted(g, nd) && strcmp(n->op, "DepthwiseConv") != 0) {
            int seen = 0;
            for (size_t j = 0; j < p->ncons; j++) seen |= p->cons[j] == nd;
            if (!seen) {
                if (npuc__grow((void **)&p->cons, &p->cap, p->ncons + 1, sizeof *p->cons)) {
                    p->refused = "out of memory";
                    return;
                }
                p->cons[p->ncons++] = nd;
            }
            continue;
        }
        if ((passes_channels(g, nd) || strcmp(n->op, "DepthwiseConv") == 0) && n->nout >= 1) {
            walk(b, n->out[0], p, depth + 1);
            continue;
        }
        if (strcmp(n->op, "Add") == 0 && n->nin == 2 && n->nout >= 1) {
            /* both branches must come from weighted nodes that prune together */
            size_t other = n->in[0] == v ? n->in[1] : n->in[0];
            size_t pr = g->vals[other].prod;
            if (pr == NPUC_GRAPH_NONE || !weighted(g, pr)) {
                snprintf(p->why, sizeof p->why, "Add '%.200s': its other input is not made by a weighted node",
                         n->name);
                p->refused = p->why;
                return;
            }
            int seen = 0;
            for (size_t j = 0; j < p->nwith; j++) seen |= p->with[j] == pr;
            if (!seen) {
                if (npuc__grow((void **)&p->with, &p->capwith, p->nwith + 1, sizeof *p->with)) {
                    p->refused = "out of memory";
                    return;
                }
                p->with[p->nwith++] = pr;
            }
            walk(b, n->out[0], p, depth + 1);
            continue;
        }
        snprintf(p->why, sizeof p->why, "%.80s '%.200s' reads it", n->op, n->name);
        p->refused = p->why;
    }
}

static void edges(bld *b) {
    npuc__ng *g = b->ng;
    size_t c[2];
    for (size_t nd = 0; nd < g->nnodes && b->st == NPUC_OK; nd++) {
        if (!weighted(g, nd) || g->nodes[nd].nout < 1) continue;
        size_t v = g->nodes[nd].out[0];
        /* BatchNorm pair: the BN is the only consumer and the value no output */
        if (!g->vals[v].is_output && npuc__ng_consumers(g, v, c, 2) == 1 &&
            strcmp(g->nodes[c[0]].op, "BatchNormalization") == 0 && g->nodes[c[0]].nin >= 1 &&
            g->nodes[c[0]].in[0] == v) {
            b->st = npuc__ng_set_attr(b->ctx, g, c[0], "bn_of", g->nodes[nd].name);
            if (b->st != NPUC_OK) return;
        }
        pwalk p = {0};
        if (strcmp(g->nodes[nd].op, "DepthwiseConv") == 0)
            p.refused = "a depthwise convolution: its channels are its input's (prune the producer)";
        else
            walk(b, v, &p, 0);
        if (p.refused) {
            b->st = npuc__ng_set_attr(b->ctx, g, nd, "prune_refused", p.refused);
        } else if (p.ncons) {
            size_t len = 1;
            for (size_t k = 0; k < p.ncons; k++) len += strlen(g->nodes[p.cons[k]].name) + 1;
            char *s = malloc(len);
            if (!s) {
                nomem(b);
            } else {
                size_t o = 0;
                for (size_t k = 0; k < p.ncons; k++)
                    o += (size_t)sprintf(s + o, "%s%s", k ? "," : "", g->nodes[p.cons[k]].name);
                s[o] = 0;
                b->st = npuc__ng_set_attr(b->ctx, g, nd, "prune_consumers", s);
                free(s);
            }
        }
        if (!p.refused && p.nwith && b->st == NPUC_OK) {
            size_t len = 1;
            for (size_t k = 0; k < p.nwith; k++) len += strlen(g->nodes[p.with[k]].name) + 1;
            char *s = malloc(len);
            if (!s) {
                nomem(b);
            } else {
                size_t o = 0;
                for (size_t k = 0; k < p.nwith; k++)
                    o += (size_t)sprintf(s + o, "%s%s", k ? "," : "", g->nodes[p.with[k]].name);
                s[o] = 0;
                b->st = npuc__ng_set_attr(b->ctx, g, nd, "prune_with", s);
                free(s);
            }
        }
        free(p.cons);
        free(p.with);
    }
}

/* ------------------------------------------------------------ the hook */

npuc_status npuc__onnx_read_graph(npuc_ctx *ctx, npuc_model *m) {
    npuc__onnx_model *om = NULL;
    npuc_status st = npuc__onnx_graph_parse(ctx, m, &om);
    if (st != NPUC_OK) return st;
    bld b = {.ctx = ctx, .m = m, .om = om, .st = NPUC_OK};
    b.ng = npuc__ng_new();
    b.dec = calloc(npuc_model_count(m) + 1, sizeof *b.dec);
    if (!b.ng || !b.dec) nomem(&b);
    if (b.st == NPUC_OK) {
        b.ng->channels_last = 0;
        collect(&b, om->graph);
    }
    const npuc__onnx_graph *main = om->graph;
    /* the main graph's inputs first, so their values are marked before any node */
    for (size_t i = 0; i < main->ninputs && b.st == NPUC_OK; i++) {
        const char *x = main->inputs[i].name;
        if (!x || !*x || npuc_model_find(m, x, &(size_t){0}) == 0) continue; /* an initializer listed as input */
        size_t v = value(&b, x);
        if (v != NPUC_GRAPH_NONE) b.ng->vals[v].is_input = 1;
    }
    for (size_t i = 0; i < b.nnodes && b.st == NPUC_OK; i++) add_node(&b, i);
    for (size_t i = 0; i < main->noutputs && b.st == NPUC_OK; i++) {
        const char *x = main->outputs[i].name;
        if (!x || !*x || npuc_model_find(m, x, &(size_t){0}) == 0) continue;
        size_t v = value(&b, x);
        if (v != NPUC_GRAPH_NONE) b.ng->vals[v].is_output = 1;
    }
    if (b.st == NPUC_OK && npuc__ng_check(ctx, b.ng) != NPUC_OK) {
        char why[400];
        snprintf(why, sizeof why, "%s", npuc_ctx_errmsg(ctx));
        b.st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: ONNX %s", npuc_model_path(m), why);
    }
    if (b.st == NPUC_OK) edges(&b);
    /* the roles and layouts the graph states win over the name rules */
    for (size_t i = 0; i < npuc_model_count(m) && b.st == NPUC_OK; i++)
        if (b.dec[i].state == 1)
            b.st = npuc__model_state_layout(ctx, m, i, b.dec[i].role, b.dec[i].layout, b.dec[i].why);
    st = b.st;
    if (st == NPUC_OK) npuc__model_set_graph(m, b.ng);
    else npuc__ng_free(b.ng);
    free(b.nodes);
    free(b.vi);
    free(b.dec);
    npuc__strmap_free(&b.prod);
    npuc__strmap_free(&b.vinfo);
    npuc__onnx_graph_free(om);
    return st;
}
