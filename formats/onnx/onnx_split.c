/*
 * onnx_split.c - lowrank's split MatMul / Gemm / Conv written into the ONNX graph:
 * the part of the row's graph_write hook (onnx_fold.c dispatches here) for
 * a network graph in which npuc lowrank split nodes (npuc__ng_split_node),
 * and the artifact entries such a split realises taken out of the "npuc"
 * description the writer stores (onnx_writer.c).
 *
 * A MatMul, Gemm or Conv of the file whose weight (input 1) g no longer holds was
 * split: g has the node reading the same input and producing a new value
 * `mid` with the input-side factor B (lr_b), and a second node reading mid
 * with the output-side factor A (lr_a) and the bias, producing the old
 * output.  Written as
 *   MatMul(x, W[K,N])          ->  MatMul(x, lr_b[K,r]) -> mid;  MatMul(mid, lr_a[r,N]) -> y
 *   Gemm(x, W, C) transB=t     ->  Gemm(x, lr_b) (transA, alpha, transB kept; no C, no beta) -> mid;
 *                                  Gemm(mid, lr_a, C) (transB=t, beta kept) -> y
 *   Conv(x, W[O,I,k..], B)     ->  Conv(x, lr_b[r,I,k..]) (every attribute kept: strides, pads or
 *                                  auto_pad, dilations, kernel_shape, group 1) -> mid;
 *                                  Conv(mid, lr_a[O,r,1..], B) (no attributes: 1x1, stride 1, no pad) -> y
 * (transB=0: lr_b [K,r], lr_a [r,N]; transB=1: lr_b [r,K], lr_a [N,r]), so
 * alpha * x W + beta * C is alpha * (x B) A + beta * C; W as [O, I*k..] is
 * lr_a [O,r] times lr_b [r, I*k..], and a 1x1 convolution with A after one
 * with lr_b is the convolution with their product.  The first node keeps
 * the ONNX node's name, the second is named as in g; lr_b and lr_a become
 * initializers (dims and data_type of W's type, no values: the writer
 * fills them) of the graph the node is in, before the two nodes.  W's
 * initializer or Constant node goes, as do graph inputs and value_info
 * naming it.
 *
 * Refused (NPUC_ERR_UNSUPPORTED, the tensor and node named): a weight read
 * by another node too or a graph output, a Gemm at a default-domain opset
 * below 11 (its first half has no C, optional from 11), IR version below 4
 * (initializers listed as graph inputs), a g that does not show the two
 * nodes, a new name the file already uses, a weight g dropped that no
 * MatMul / Gemm / Conv reads directly (a Transpose between), a Conv of
 * group other than 1.  Other ops are refused by the pass before it edits g
 * (lowrank_graph.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "graph/graph_net.h"
#include "onnx_edit.h"
#include "onnx_format.h"
#include "onnx_model.h"
#include "strmap.h"

typedef struct split {
    const char *w, *out0, *op;   /* the factored weight, the node's first output, its op (file) */
    const char *lrb, *lra;       /* the first and second node's factor (g) */
    const char *mid, *second;    /* the new value and node (g) */
    const npuc_graph_weight *wb, *wa;
    uint64_t dtype;
} split;

typedef struct sp_plan {
    npuc_ctx *ctx;
    const char *label;
    const npuc__ng *g;
    npuc__ox_edit *e;    /* the entry: weights' data_type (wtype), weights g holds (gw) */
    npuc__strmap uses;   /* value -> how many node inputs read it */
    npuc__strmap gouts;  /* graph outputs */
    npuc__strmap names;  /* every name the file uses */
    npuc__strmap drop;   /* factored weights */
    npuc__strmap at;     /* split node's first output -> index */
    split *s;
    size_t ns, caps;
    int64_t opset;
    int64_t ir;
    npuc_status st;
} sp_plan;

static int is_default(const char *domain) { return !domain || !*domain || strcmp(domain, "ai.onnx") == 0; }

static npuc_status oom(sp_plan *p) { return p->st = npuc_fail(p->ctx, NPUC_ERR_NOMEM, "out of memory"); }

static void put_name(sp_plan *p, npuc__strmap *m, const char *s, int count) {
    size_t v = 0;
    if (!s || !*s) return;
    if (count) npuc__strmap_get(m, s, &v);
    if (npuc__strmap_put(m, s, v + 1) != 0) oom(p);
}

static void scan_graph(sp_plan *p, const npuc__onnx_graph *og) {
    for (size_t i = 0; i < og->ninitializers; i++) put_name(p, &p->names, og->initializers[i], 0);
    for (size_t i = 0; i < og->ninputs; i++) put_name(p, &p->names, og->inputs[i].name, 0);
    for (size_t i = 0; i < og->noutputs; i++) {
        put_name(p, &p->names, og->outputs[i].name, 0);
        put_name(p, &p->gouts, og->outputs[i].name, 0);
    }
    for (size_t i = 0; i < og->nvalue_info; i++) put_name(p, &p->names, og->value_info[i].name, 0);
    for (size_t i = 0; i < og->nnodes; i++) {
        const npuc__onnx_node *n = &og->nodes[i];
        put_name(p, &p->names, n->name, 0);
        for (size_t k = 0; k < n->ninputs; k++) {
            put_name(p, &p->names, n->inputs[k], 0);
            put_name(p, &p->uses, n->inputs[k], 1);
        }
        for (size_t k = 0; k < n->noutputs; k++) put_name(p, &p->names, n->outputs[k], 0);
        for (size_t a = 0; a < n->nattrs; a++)
            for (size_t s = 0; s < n->attrs[a].ngraphs; s++)
                if (n->attrs[a].graphs[s]) scan_graph(p, n->attrs[a].graphs[s]);
    }
}

static const char *node_label(const npuc__onnx_node *n) {
    return n->name && *n->name ? n->name : n->noutputs && n->outputs[0] ? n->outputs[0] : "?";
}

static int is_split_candidate(const sp_plan *p, const npuc__onnx_node *n) {
    if (!is_default(n->domain) || !n->op_type || n->ninputs < 2 || n->noutputs < 1 || !*n->outputs[0]) return 0;
    if (strcmp(n->op_type, "MatMul") != 0 && strcmp(n->op_type, "Gemm") != 0 && strcmp(n->op_type, "Conv") != 0)
        return 0;
    const char *w = n->inputs[1];
    return *w && npuc__strmap_get(&p->e->wtype, w, NULL) && !npuc__strmap_get(&p->e->gw, w, NULL);
}

static size_t count_graph(const sp_plan *p, const npuc__onnx_graph *og) {
    size_t c = 0;
    for (size_t i = 0; i < og->nnodes; i++) {
        const npuc__onnx_node *n = &og->nodes[i];
        c += is_split_candidate(p, n);
        for (size_t a = 0; a < n->nattrs; a++)
            for (size_t s = 0; s < n->attrs[a].ngraphs; s++)
                if (n->attrs[a].graphs[s]) c += count_graph(p, n->attrs[a].graphs[s]);
    }
    return c;
}

static npuc_status refuse(sp_plan *p, const npuc__onnx_node *n, const char *why) {
    return p->st = npuc_fail(p->ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s' (%s '%s') cannot be written as a split "
                             "%s in the ONNX graph: %s", p->label, n->inputs[1], n->op_type, node_label(n), n->op_type,
                             why);
}

/* The weight of node i with role "kernel", or NULL. */
static const npuc_graph_weight *kernel_of(const npuc__ng *g, size_t i) {
    for (size_t k = 0; k < g->nodes[i].nw; k++)
        if (g->nodes[i].w[k].role && strcmp(g->nodes[i].w[k].role, "kernel") == 0) return &g->nodes[i].w[k];
    return NULL;
}

static int is_new(sp_plan *p, const char *name) {
    return !npuc__strmap_get(&p->names, name, NULL) && !npuc__strmap_get(&p->e->wtype, name, NULL);
}

static int64_t int_attr(const npuc__onnx_node *n, const char *name, int64_t dflt) {
    for (size_t a = 0; a < n->nattrs; a++)
        if (n->attrs[a].name && strcmp(n->attrs[a].name, name) == 0) return n->attrs[a].i;
    return dflt;
}

/* The factors' shapes for kernel W of rank k: MatMul / Gemm 2-D (checked
 * by the pass); Conv lr_b [r, I, k..], lr_a [O, r, 1..]. */
static int factor_shapes_ok(const npuc_graph_weight *wb, const npuc_graph_weight *wa, int conv) {
    if (!conv) return wb->rank == 2 && wa->rank == 2;
    if (wb->rank < 3 || wb->rank != wa->rank || wb->shape[0] != wa->shape[1]) return 0;
    for (int k = 2; k < wa->rank; k++)
        if (wa->shape[k] != 1) return 0;
    return 1;
}

static void plan_node(sp_plan *p, const npuc__onnx_node *n) {
    const npuc__ng *g = p->g;
    const char *w = n->inputs[1];
    int gemm = strcmp(n->op_type, "Gemm") == 0, conv = strcmp(n->op_type, "Conv") == 0;
    char why[400];
    size_t u = 0;
    npuc__strmap_get(&p->uses, w, &u);
    if (u != 1 || npuc__strmap_get(&p->gouts, w, NULL)) {
        refuse(p, n, "the weight has other readers or is a graph output");
        return;
    }
    if (gemm && p->opset < 11) {
        snprintf(why, sizeof why, "the first Gemm would have no C, which ONNX allows from opset 11, and the model "
                 "imports opset %lld", (long long)p->opset);
        refuse(p, n, why);
        return;
    }
    if (conv && int_attr(n, "group", 1) != 1) {
        snprintf(why, sizeof why, "group %lld: a grouped convolution is not a product of two convolutions",
                 (long long)int_attr(n, "group", 1));
        refuse(p, n, why);
        return;
    }
    if (p->ir < 4) {
        refuse(p, n, "IR version below 4 lists initializers as graph inputs; new factors are not written there");
        return;
    }
    /* g: out0 made by the second node, which reads mid, made by the first,
     * which reads x. */
    size_t vy = npuc__ng_find_value(g, n->outputs[0]);
    size_t j = vy == NPUC_GRAPH_NONE ? NPUC_GRAPH_NONE : g->vals[vy].prod;
    size_t vm = j == NPUC_GRAPH_NONE || g->nodes[j].nin != 1 ? NPUC_GRAPH_NONE : g->nodes[j].in[0];
    size_t i = vm == NPUC_GRAPH_NONE ? NPUC_GRAPH_NONE : g->vals[vm].prod;
    const npuc_graph_weight *wb = i == NPUC_GRAPH_NONE ? NULL : kernel_of(g, i);
    const npuc_graph_weight *wa = j == NPUC_GRAPH_NONE ? NULL : kernel_of(g, j);
    if (!wb || !wa || g->nodes[i].nin != 1 || g->nodes[i].nout != 1 ||
        strcmp(g->vals[g->nodes[i].in[0]].name, n->inputs[0]) != 0 || strcmp(g->nodes[j].op, n->op_type) != 0 ||
        strcmp(g->nodes[i].op, n->op_type) != 0 || !factor_shapes_ok(wb, wa, conv)) {
        refuse(p, n, "the edited graph drops the weight but does not show the node split in two with a factor each");
        return;
    }
    for (size_t k = 0; k < g->nodes[j].nw; k++) {
        const npuc_graph_weight *x = &g->nodes[j].w[k];
        if (x == wa) continue;
        if (!(gemm || conv) || strcmp(x->role, "bias") != 0 || n->ninputs < 3 || strcmp(n->inputs[2], x->tensor) != 0) {
            snprintf(why, sizeof why, "the second node holds '%s' (%s), which is not the node's %s", x->tensor,
                     x->role, conv ? "B" : "C");
            refuse(p, n, why);
            return;
        }
    }
    if (g->nodes[i].nw != 1) {
        refuse(p, n, "the first node holds more than its factor");
        return;
    }
    const char *nn[4] = {wb->tensor, wa->tensor, g->vals[vm].name, g->nodes[j].name};
    for (int k = 0; k < 4; k++)
        if (!is_new(p, nn[k])) {
            snprintf(why, sizeof why, "the name '%s' is already used in the graph", nn[k]);
            refuse(p, n, why);
            return;
        }
    size_t dt = 0;
    npuc__strmap_get(&p->e->wtype, w, &dt);
    if (p->ns == p->caps) {
        size_t cap = p->caps ? 2 * p->caps : 8;
        split *s = realloc(p->s, cap * sizeof *s);
        if (!s) {
            oom(p);
            return;
        }
        p->s = s;
        p->caps = cap;
    }
    p->s[p->ns] = (split){w, n->outputs[0], n->op_type, wb->tensor, wa->tensor, g->vals[vm].name, g->nodes[j].name,
                          wb, wa, (uint64_t)dt};
    for (int k = 0; k < 4; k++) put_name(p, &p->names, nn[k], 0);
    if (npuc__strmap_put(&p->at, n->outputs[0], p->ns) != 0 || npuc__strmap_put(&p->drop, w, 1) != 0) {
        oom(p);
        return;
    }
    p->ns++;
}

static void plan_graph(sp_plan *p, const npuc__onnx_graph *og) {
    for (size_t i = 0; i < og->nnodes && p->st == NPUC_OK; i++) {
        const npuc__onnx_node *n = &og->nodes[i];
        if (is_split_candidate(p, n)) plan_node(p, n);
        for (size_t a = 0; a < n->nattrs && p->st == NPUC_OK; a++)
            for (size_t s = 0; s < n->attrs[a].ngraphs; s++)
                if (n->attrs[a].graphs[s]) plan_graph(p, n->attrs[a].graphs[s]);
    }
}

/* Every weight of the file g no longer holds must be one a split
 * replaces: else it was read through another node (a Transpose, Identity,
 * Cast or Reshape between it and the MatMul), which has no split form. */
static void check_gone(sp_plan *p, const npuc__onnx_graph *og) {
    for (size_t i = 0; i < og->ninitializers + og->nnodes && p->st == NPUC_OK; i++) {
        const char *w = NULL;
        if (i < og->ninitializers) w = og->initializers[i];
        for (size_t a = 0; i >= og->ninitializers && a < og->nodes[i - og->ninitializers].nattrs; a++) {
            const npuc__onnx_attr *at = &og->nodes[i - og->ninitializers].attrs[a];
            if (at->weight) w = at->weight;
            for (size_t s = 0; s < at->ngraphs; s++)
                if (at->graphs[s]) check_gone(p, at->graphs[s]);
        }
        if (p->st != NPUC_OK || !w || npuc__strmap_get(&p->e->gw, w, NULL) || npuc__strmap_get(&p->drop, w, NULL))
            continue;
        p->st = npuc_fail(p->ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s' cannot be written as a split MatMul, Gemm "
                          "or Conv in the ONNX graph: no MatMul, Gemm or Conv reads it directly as its weight "
                          "(another node is between them)", p->label, w);
    }
}

/* 1 when g holds a kernel the file does not: a factor of a split. */
static int new_kernels(const sp_plan *p) {
    for (size_t i = 0; i < p->g->nnodes; i++)
        for (size_t k = 0; k < p->g->nodes[i].nw; k++) {
            const npuc_graph_weight *x = &p->g->nodes[i].w[k];
            if (x->role && strcmp(x->role, "kernel") == 0 && !npuc__strmap_get(&p->e->wtype, x->tensor, NULL)) return 1;
        }
    return 0;
}

/* ------------------------------------------------------------ the walks */

static npuc_status copy_weight(npuc__ox_walk *wk, const npuc__ox_weight *w, npuc__ox_buf *out) {
    sp_plan *p = wk->user;
    if (!w->constant && npuc__strmap_get(&p->drop, w->name, NULL)) {
        wk->drop = 1;
        return NPUC_OK;
    }
    npuc__ox_put(out, w->msg, (size_t)w->len);
    return NPUC_OK;
}


/* 1 when attribute field f (an AttributeProto) is named name. */
static int attr_named(const npuc__ox_field *f, const char *name) {
    const unsigned char *q = f->data, *end = f->data + f->len;
    npuc__ox_field a;
    while (q < end) {
        if (npuc__ox_next(&q, end, &a)) return 0;
        if (a.num == 1) return npuc__ox_field_is(&a, name);
    }
    return 0;
}

static void put_str(npuc__ox_buf *b, uint32_t num, const char *s) { npuc__ox_put_bytes(b, num, s, strlen(s)); }

static void put_factor(npuc__ox_buf *out, const npuc_graph_weight *w, uint64_t dtype) {
    npuc__ox_buf t = {0};
    for (int k = 0; k < w->rank; k++) {
        npuc__ox_put_tag(&t, 1, 0);
        npuc__ox_put_varint(&t, (uint64_t)w->shape[k]);
    }
    npuc__ox_put_tag(&t, 2, 0);
    npuc__ox_put_varint(&t, dtype);
    put_str(&t, 8, w->tensor);
    npuc__ox_put_sub(out, 5, &t);
}

static npuc_status split_node(npuc__ox_walk *wk, const unsigned char *b, uint64_t n, int depth, npuc__ox_buf *out,
                              int *handled) {
    (void)depth;
    sp_plan *p = wk->hook_user;
    const unsigned char *q = b, *end = b + n;
    npuc__ox_field f;
    char *out0 = NULL;
    int constant = 0, dflt = 1;
    while (q < end) {
        const char *why = npuc__ox_next(&q, end, &f);
        if (why) {
            free(out0);
            return npuc__ox_bad(wk, q, "NodeProto", why);
        }
        if (f.num == 2 && !out0 && !(out0 = npuc__ox_field_dup(&f))) return oom(p);
        if (f.num == 4) constant = npuc__ox_field_is(&f, "Constant");
        if (f.num == 7) dflt = f.wt == 2 && (f.len == 0 || npuc__ox_field_is(&f, "ai.onnx"));
    }
    size_t r;
    if (!out0) return NPUC_OK;
    if (dflt && constant && npuc__strmap_get(&p->drop, out0, NULL)) {
        *handled = 1; /* the factored weight's Constant */
    } else if (npuc__strmap_get(&p->at, out0, &r)) {
        const split *s = &p->s[r];
        int gemm = strcmp(s->op, "Gemm") == 0, kin = 0, first_out = 1;
        npuc__ox_buf one = {0}, two = {0};
        put_str(&two, 1, s->mid);
        put_str(&two, 1, s->lra);
        for (q = b; q < end;) {
            (void)npuc__ox_next(&q, end, &f);
            if (f.num == 1) {
                if (kin == 1) put_str(&one, 1, s->lrb);
                else if (kin == 2) npuc__ox_put(&two, f.start, (size_t)(f.end - f.start)); /* C */
                else npuc__ox_put(&one, f.start, (size_t)(f.end - f.start));
                kin++;
            } else if (f.num == 2 && first_out) {
                put_str(&one, 2, s->mid);
                first_out = 0;
            } else if (f.num == 5 && gemm && attr_named(&f, "beta")) {
                npuc__ox_put(&two, f.start, (size_t)(f.end - f.start));
            } else if (f.num == 5 && gemm && attr_named(&f, "transB")) {
                npuc__ox_put(&one, f.start, (size_t)(f.end - f.start));
                npuc__ox_put(&two, f.start, (size_t)(f.end - f.start));
            } else {
                npuc__ox_put(&one, f.start, (size_t)(f.end - f.start));
                if (f.num == 7) npuc__ox_put(&two, f.start, (size_t)(f.end - f.start)); /* domain */
            }
        }
        put_str(&two, 2, s->out0);
        put_str(&two, 3, s->second);
        put_str(&two, 4, s->op);
        put_factor(out, s->wb, s->dtype);
        put_factor(out, s->wa, s->dtype);
        npuc__ox_put_sub(out, 1, &one);
        npuc__ox_put_sub(out, 1, &two);
        *handled = 1;
    }
    free(out0);
    return out->oom ? oom(p) : NPUC_OK;
}

/* Graph inputs and value_info naming a factored weight go. */
static npuc_status split_field(npuc__ox_walk *wk, const npuc__ox_field *f, int depth, int *keep) {
    (void)depth;
    sp_plan *p = wk->hook_user;
    char *name = NULL;
    const int r = npuc__ox_value_info_name(f, &name);
    if (r < 0) return oom(p);
    if (r > 0 && npuc__strmap_get(&p->drop, name, NULL)) *keep = 0;
    free(name);
    return NPUC_OK;
}

static void plan_free(sp_plan *p) {
    npuc__strmap_free(&p->uses);
    npuc__strmap_free(&p->gouts);
    npuc__strmap_free(&p->names);
    npuc__strmap_free(&p->drop);
    npuc__strmap_free(&p->at);
    free(p->s);
}

static int64_t default_opset(const npuc__onnx_model *om) {
    for (size_t i = 0; i < om->nopsets; i++)
        if (is_default(om->opsets[i].domain)) return om->opsets[i].version;
    return 0;
}

npuc_status npuc__onnx_split_write(npuc_ctx *ctx, const char *label, npuc__ox_edit *e, const npuc_graph *g,
                                   char **out, int *handled) {
    *out = NULL;
    *handled = 0;
    sp_plan p;
    memset(&p, 0, sizeof p);
    p.ctx = ctx;
    p.label = label;
    p.g = g;
    p.e = e;
    const npuc__onnx_model *om = e->om;
    const unsigned char *skel = e->skel;
    const size_t nskel = e->nskel;
    npuc__ox_buf res = {0};
    npuc__ox_walk wk;
    memset(&wk, 0, sizeof wk);
    wk.ctx = ctx;
    wk.path = label;
    wk.base = skel;
    wk.meta = npuc__ox_keep_meta;
    wk.user = &p;
    npuc_status st = NPUC_OK;
    if (om->graph && (count_graph(&p, om->graph) || new_kernels(&p))) {
        *handled = 1;
        p.opset = default_opset(om);
        p.ir = om->ir_version;
        scan_graph(&p, om->graph);
        if ((st = p.st) == NPUC_OK) {
            plan_graph(&p, om->graph);
            if (p.st == NPUC_OK) check_gone(&p, om->graph);
            st = p.st;
        }
        if (st == NPUC_OK) {
            wk.weight = copy_weight;
            wk.node = split_node;
            wk.graph_field = split_field;
            wk.hook_user = &p;
            st = npuc__ox_walk_model(&wk, skel, nskel, &res);
            if (st == NPUC_OK && res.nh) st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: payloads in the graph entry", label);
            if (st == NPUC_OK && !(*out = npuc__ox_b64_encode(res.p, res.n))) st = oom(&p);
        }
    }
    npuc__ox_free(&res);
    plan_free(&p);
    return st;
}

/* ------------------------------------------------------------ the artifact */

static void weights_of(npuc__strmap *m, const npuc__onnx_graph *og, int *err) {
    for (size_t i = 0; i < og->ninitializers; i++)
        if (npuc__strmap_put(m, og->initializers[i], 1) != 0) *err = 1;
    for (size_t i = 0; i < og->nnodes; i++) {
        const npuc__onnx_node *n = &og->nodes[i];
        for (size_t a = 0; a < n->nattrs; a++) {
            if (n->attrs[a].weight && npuc__strmap_put(m, n->attrs[a].weight, 1) != 0) *err = 1;
            for (size_t s = 0; s < n->attrs[a].ngraphs; s++)
                if (n->attrs[a].graphs[s]) weights_of(m, n->attrs[a].graphs[s], err);
        }
    }
}

npuc_status npuc__onnx_split_artifact(npuc_ctx *ctx, const char *path, const unsigned char *skel, size_t nskel,
                                      const char *art, char **out, int *empty) {
    *out = NULL;
    *empty = 0;
    json_t *root = art ? json_loads(art, 0, NULL) : NULL, *v;
    json_t *tensors = json_object_get(root, "tensors");
    const char *k;
    void *tmp;
    int any = 0, err = 0;
    json_object_foreach(tensors, k, v) {
        const char *enc = json_string_value(json_object_get(v, "encoding"));
        any |= enc && strcmp(enc, "lowrank") == 0;
    }
    if (!any) {
        json_decref(root);
        return NPUC_OK;
    }
    npuc__onnx_model *om = NULL;
    npuc_status st = npuc__onnx_graph_parse_bytes(ctx, path, skel, nskel, &om);
    npuc__strmap ws = {0};
    if (st == NPUC_OK && om->graph) weights_of(&ws, om->graph, &err);
    int removed = 0;
    json_object_foreach_safe(tensors, tmp, k, v) {
        if (st != NPUC_OK || err) break;
        const char *enc = json_string_value(json_object_get(v, "encoding"));
        json_t *parts = json_object_get(v, "parts");
        if (!enc || strcmp(enc, "lowrank") != 0 || npuc__strmap_get(&ws, k, NULL) || json_array_size(parts) != 2)
            continue;
        const char *a = json_string_value(json_array_get(parts, 0)), *b = json_string_value(json_array_get(parts, 1));
        if (!a || !b || !npuc__strmap_get(&ws, a, NULL) || !npuc__strmap_get(&ws, b, NULL)) continue;
        if (json_object_del(tensors, k) != 0) err = 1;
        removed++;
    }
    if (st == NPUC_OK && !err && removed) {
        *empty = json_object_size(tensors) == 0;
        if (!*empty && !(*out = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS))) err = 1;
    }
    if (st == NPUC_OK && err) st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    npuc__strmap_free(&ws);
    npuc__onnx_graph_free(om);
    json_decref(root);
    return st;
}
