/*
 * onnx_fold.c - ONNX's graph_write hook (format_row.h): an edited network
 * graph written back into the "onnx.model" entry.
 *
 * The edit ONNX writes is a folded BatchNormalization (fold-bn removes the
 * node from the network graph, its weights leave with it, and the producer
 * may get a bias weight it did not have).  A BatchNormalization node of the
 * file whose weights (inputs 1..4) are all gone from g was folded:
 *   - the node is left out, and its producer (a Conv, ConvTranspose or
 *     Gemm of the same graph, whose output nothing else reads) gets the
 *     BatchNorm's output name as its own output, so the consumers and a
 *     graph output keep their names;
 *   - a bias g gives the producer that the node has no input for becomes
 *     its input 2, declared as an initializer (dims [C], the kernel's
 *     data_type, no values: the writer fills them) in the producer's graph;
 *   - the BatchNorm's initializers and Constant nodes nothing else reads
 *     are dropped, as are graph inputs and value_info naming them or the
 *     producer's old output.
 * A MatMul producer (no bias input) keeps its output and an Add of the
 * created bias after it makes the BatchNorm's output.
 * Everything else is copied as it is.  An edit that cannot be written (a
 * producer another node reads, a
 * BatchNorm with training outputs, a BatchNorm fed by another op than
 * Conv/ConvTranspose/Gemm/MatMul) is NPUC_ERR_UNSUPPORTED naming the node.
 * The pair itself is the pass's: the hook trusts that the producer the file
 * shows is the one folded (a stated --pair naming another Conv than the
 * BatchNorm's input is not caught here).
 * A graph with split nodes (lowrank) is written by onnx_split.c first; an
 * edit that removed no node goes to onnx_resize.c (weights resized by a
 * structured prune); *out stays NULL when it resized nothing either.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_net.h"
#include "onnx_edit.h"
#include "onnx_format.h"
#include "onnx_model.h"
#include "onnx_resize.h"
#include "strmap.h"

typedef struct fold_rename {
    const char *old_out, *new_out; /* the producer's output, the BatchNorm's */
    const char *bias;              /* a created bias, or NULL */
    uint64_t dtype;                /* its ONNX data_type */
    int64_t channels;
    int add; /* a MatMul (no bias input): it keeps its output and an Add of the bias makes the BatchNorm's */
} fold_rename;

typedef struct fold_plan {
    npuc_ctx *ctx;
    const char *label;
    npuc__ox_edit *e;     /* the entry: weights' data_type (wtype), weights g holds (gw) */
    npuc__strmap uses;    /* value name -> how many node inputs read it */
    npuc__strmap gouts;   /* names that are a graph's output */
    npuc__strmap removed; /* output of a folded BatchNormalization */
    npuc__strmap drop;    /* weights to leave out */
    npuc__strmap oldout;  /* renamed producer output -> rename index */
    fold_rename *rn;
    size_t nrn, caprn;
    const npuc__ng *g;
    npuc_status st;
} fold_plan;

static int is_default(const char *domain) { return !domain || !*domain || strcmp(domain, "ai.onnx") == 0; }

static int is_op(const npuc__onnx_node *n, const char *op) {
    return n->op_type && strcmp(n->op_type, op) == 0 && is_default(n->domain);
}

static npuc_status oom(fold_plan *p) { return p->st = npuc_fail(p->ctx, NPUC_ERR_NOMEM, "out of memory"); }

static const char *node_label(const npuc__onnx_node *n) {
    return n->name && *n->name ? n->name : n->noutputs && n->outputs[0] ? n->outputs[0] : "?";
}

static void bump(fold_plan *p, npuc__strmap *m, const char *name) {
    size_t v = 0;
    if (!name || !*name) return;
    npuc__strmap_get(m, name, &v);
    if (npuc__strmap_put(m, name, v + 1) != 0) oom(p);
}

/* Counts every read of a value, in g and its subgraphs. */
static void count_uses(fold_plan *p, const npuc__onnx_graph *og) {
    for (size_t i = 0; i < og->noutputs; i++) bump(p, &p->gouts, og->outputs[i].name);
    for (size_t i = 0; i < og->nnodes; i++) {
        const npuc__onnx_node *n = &og->nodes[i];
        for (size_t k = 0; k < n->ninputs; k++) bump(p, &p->uses, n->inputs[k]);
        for (size_t a = 0; a < n->nattrs; a++)
            for (size_t s = 0; s < n->attrs[a].ngraphs; s++)
                if (n->attrs[a].graphs[s]) count_uses(p, n->attrs[a].graphs[s]);
    }
}

static npuc_status refuse(fold_plan *p, const npuc__onnx_node *n, const char *why) {
    return p->st = npuc_fail(p->ctx, NPUC_ERR_UNSUPPORTED, "%s: BatchNormalization '%s' cannot be folded in the ONNX "
                             "graph: %s", p->label, node_label(n), why);
}

/* The bias g gives the producer holding weight `kernel` that the ONNX node
 * does not read, or NULL. */
static const npuc_graph_weight *created_bias(fold_plan *p, const npuc__onnx_node *c, const char *kernel) {
    size_t nd;
    if (!kernel || !npuc__strmap_get(&p->e->gw, kernel, &nd)) return NULL;
    const npuc__ng_node *gn = &p->g->nodes[nd];
    for (size_t k = 0; k < gn->nw; k++) {
        if (!gn->w[k].role || strcmp(gn->w[k].role, "bias") != 0) continue;
        int read = 0;
        for (size_t j = 0; j < c->ninputs; j++) read |= strcmp(c->inputs[j], gn->w[k].tensor) == 0;
        if (!read) return &gn->w[k];
    }
    return NULL;
}

static void plan_bn(fold_plan *p, const npuc__onnx_model *om, const npuc__onnx_graph *og, const npuc__onnx_node *n) {
    size_t nw = 0, gone = 0;
    for (size_t k = 1; k < n->ninputs && k < 5; k++) {
        if (!*n->inputs[k] || !npuc__strmap_get(&p->e->wtype, n->inputs[k], NULL)) continue;
        nw++;
        gone += !npuc__strmap_get(&p->e->gw, n->inputs[k], NULL);
    }
    if (!nw || !gone) return; /* not folded */
    if (gone != nw) {
        refuse(p, n, "some of its weights were folded and some were not");
        return;
    }
    for (size_t k = 1; k < n->noutputs; k++)
        if (*n->outputs[k]) {
            refuse(p, n, "it has training outputs (running mean/variance)");
            return;
        }
    if (n->ninputs < 1 || !*n->inputs[0] || n->noutputs < 1 || !*n->outputs[0]) {
        refuse(p, n, "no input or output");
        return;
    }
    const char *in = n->inputs[0];
    const npuc__onnx_node *c = NULL;
    for (size_t i = 0; i < og->nnodes && !c; i++)
        for (size_t k = 0; k < og->nodes[i].noutputs; k++)
            if (strcmp(og->nodes[i].outputs[k], in) == 0) c = &og->nodes[i];
    if (!c || c->noutputs < 1 || strcmp(c->outputs[0], in) != 0) {
        refuse(p, n, "its input is not the first output of a node of the same graph");
        return;
    }
    if (!is_op(c, "Conv") && !is_op(c, "ConvTranspose") && !is_op(c, "Gemm") && !is_op(c, "MatMul")) {
        char why[300];
        snprintf(why, sizeof why, "its input is made by '%s' (%s), not by a Conv, ConvTranspose, Gemm or MatMul",
                 node_label(c), c->op_type ? c->op_type : "?");
        refuse(p, n, why);
        return;
    }
    size_t nuse = 0;
    npuc__strmap_get(&p->uses, in, &nuse);
    if (nuse != 1 || npuc__strmap_get(&p->gouts, in, NULL) || npuc__strmap_get(&p->oldout, in, NULL)) {
        refuse(p, n, "its input is read by another node or is a graph output");
        return;
    }
    const npuc_graph_weight *b = created_bias(p, c, c->ninputs > 1 ? c->inputs[1] : NULL);
    uint64_t dtype = 0;
    if (b) {
        char why[300];
        size_t dt = 0;
        if (!is_op(c, "Conv") && !is_op(c, "ConvTranspose") && !is_op(c, "Gemm") && !is_op(c, "MatMul")) {
            snprintf(why, sizeof why, "its producer '%s' (%s) has no bias input", node_label(c),
                     c->op_type ? c->op_type : "?");
            refuse(p, n, why);
            return;
        }
        if (c->ninputs > 2 && *c->inputs[2]) {
            refuse(p, n, "its producer reads a bias the folded graph does not name");
            return;
        }
        if (b->rank != 1 || b->shape[0] <= 0 || !npuc__strmap_get(&p->e->wtype, c->inputs[1], &dt)) {
            refuse(p, n, "the created bias has no known length or the kernel no known type");
            return;
        }
        if (om->ir_version < 4) {
            refuse(p, n, "IR version below 4 lists initializers as graph inputs; a created bias is not written there");
            return;
        }
        if (npuc__strmap_get(&p->e->wtype, b->tensor, NULL) || npuc__strmap_get(&p->uses, b->tensor, NULL)) {
            snprintf(why, sizeof why, "the bias name '%s' is already used in the graph", b->tensor);
            refuse(p, n, why);
            return;
        }
        dtype = dt;
    }
    if (p->nrn == p->caprn) {
        size_t cap = p->caprn ? 2 * p->caprn : 8;
        fold_rename *r = realloc(p->rn, cap * sizeof *r);
        if (!r) {
            oom(p);
            return;
        }
        p->rn = r;
        p->caprn = cap;
    }
    fold_rename *r = &p->rn[p->nrn];
    r->old_out = in;
    r->new_out = n->outputs[0];
    r->bias = b ? b->tensor : NULL;
    r->dtype = dtype;
    r->channels = b ? b->shape[0] : 0;
    r->add = b && is_op(c, "MatMul");
    if (npuc__strmap_put(&p->oldout, in, p->nrn) != 0 ||
        npuc__strmap_put(&p->removed, n->outputs[0], 1) != 0) {
        oom(p);
        return;
    }
    p->nrn++;
    /* The BatchNorm's reads no longer count: its weights go when nothing
     * else reads them (checked after every pair is planned). */
    for (size_t k = 1; k < n->ninputs && k < 5; k++) {
        size_t u = 0;
        if (!*n->inputs[k] || !npuc__strmap_get(&p->uses, n->inputs[k], &u)) continue;
        if (npuc__strmap_put(&p->uses, n->inputs[k], u ? u - 1 : 0) != 0 ||
            npuc__strmap_put(&p->drop, n->inputs[k], 1) != 0) {
            oom(p);
            return;
        }
    }
}

static void plan_graph(fold_plan *p, const npuc__onnx_model *om, const npuc__onnx_graph *og) {
    for (size_t i = 0; i < og->nnodes && p->st == NPUC_OK; i++) {
        const npuc__onnx_node *n = &og->nodes[i];
        if (is_op(n, "BatchNormalization")) plan_bn(p, om, og, n);
        for (size_t a = 0; a < n->nattrs && p->st == NPUC_OK; a++)
            for (size_t s = 0; s < n->attrs[a].ngraphs; s++)
                if (n->attrs[a].graphs[s]) plan_graph(p, om, n->attrs[a].graphs[s]);
    }
}

/* ------------------------------------------------------------ the walks */

static npuc_status copy_weight(npuc__ox_walk *wk, const npuc__ox_weight *w, npuc__ox_buf *out) {
    fold_plan *p = wk->user;
    size_t u = 0;
    if (!w->constant && npuc__strmap_get(&p->drop, w->name, NULL) &&
        !(npuc__strmap_get(&p->uses, w->name, &u) && u > 0)) {
        wk->drop = 1;
        return NPUC_OK;
    }
    npuc__ox_put(out, w->msg, (size_t)w->len);
    return NPUC_OK;
}


static npuc_status fold_node(npuc__ox_walk *wk, const unsigned char *b, uint64_t n, int depth, npuc__ox_buf *out,
                             int *handled) {
    (void)depth;
    fold_plan *p = wk->hook_user;
    const unsigned char *q = b, *end = b + n;
    npuc__ox_field f;
    char *out0 = NULL;
    int constant = 0, bn = 0, dflt = 1, nin = 0;
    while (q < end) {
        const char *why = npuc__ox_next(&q, end, &f);
        if (why) {
            free(out0);
            return npuc__ox_bad(wk, q, "NodeProto", why);
        }
        if (f.num == 1) nin++;
        if (f.num == 2 && !out0 && !(out0 = npuc__ox_field_dup(&f))) return oom(p);
        if (f.num == 4) {
            constant = npuc__ox_field_is(&f, "Constant");
            bn = npuc__ox_field_is(&f, "BatchNormalization");
        }
        if (f.num == 7) dflt = f.wt == 2 && (f.len == 0 || npuc__ox_field_is(&f, "ai.onnx"));
    }
    size_t r, u = 0;
    if (!out0) return NPUC_OK;
    if (dflt && constant && npuc__strmap_get(&p->drop, out0, NULL) && !(npuc__strmap_get(&p->uses, out0, &u) && u)) {
        *handled = 1;
    } else if (dflt && bn && npuc__strmap_get(&p->removed, out0, NULL)) {
        *handled = 1;
    } else if (npuc__strmap_get(&p->oldout, out0, &r)) {
        const fold_rename *x = &p->rn[r];
        npuc__ox_buf c = {0};
        int first = 1;
        for (q = b; q < end;) {
            (void)npuc__ox_next(&q, end, &f);
            if (f.num == 2 && first && !x->add) {
                npuc__ox_put_bytes(&c, 2, x->new_out, strlen(x->new_out));
                first = 0;
            } else {
                npuc__ox_put(&c, f.start, (size_t)(f.end - f.start));
            }
        }
        if (x->add) {
            /* MatMul keeps its output; Add(output, bias) makes the
             * BatchNorm's (the bias runs along the last axis, the
             * MatMul's N: the BatchNorm's channels on [batch, N]). */
            npuc__ox_buf a = {0};
            npuc__ox_put_bytes(&a, 1, x->old_out, strlen(x->old_out));
            npuc__ox_put_bytes(&a, 1, x->bias, strlen(x->bias));
            npuc__ox_put_bytes(&a, 2, x->new_out, strlen(x->new_out));
            npuc__ox_put_bytes(&a, 3, x->bias, strlen(x->bias));
            npuc__ox_put_bytes(&a, 4, "Add", 3);
            npuc__ox_put_sub(out, 1, &c);
            c = a;
        } else if (x->bias) {
            for (; nin < 2; nin++) npuc__ox_put_bytes(&c, 1, "", 0);
            npuc__ox_put_bytes(&c, 1, x->bias, strlen(x->bias));
        }
        if (x->bias) {
            npuc__ox_buf t = {0};
            npuc__ox_put_tag(&t, 1, 0);
            npuc__ox_put_varint(&t, (uint64_t)x->channels);
            npuc__ox_put_tag(&t, 2, 0);
            npuc__ox_put_varint(&t, x->dtype);
            npuc__ox_put_bytes(&t, 8, x->bias, strlen(x->bias));
            npuc__ox_put_sub(out, 5, &t);
        }
        npuc__ox_put_sub(out, 1, &c);
        *handled = 1;
    }
    free(out0);
    return out->oom ? oom(p) : NPUC_OK;
}

/* Graph inputs naming a dropped weight, value_info naming one or a
 * producer's old output, go. */
static npuc_status fold_field(npuc__ox_walk *wk, const npuc__ox_field *f, int depth, int *keep) {
    (void)depth;
    fold_plan *p = wk->hook_user;
    char *name = NULL;
    const int r = npuc__ox_value_info_name(f, &name);
    if (r < 0) return oom(p);
    size_t u = 0;
    if (r > 0 && ((npuc__strmap_get(&p->drop, name, NULL) && !(npuc__strmap_get(&p->uses, name, &u) && u)) ||
                  (f->num == 13 && npuc__strmap_get(&p->oldout, name, NULL))))
        *keep = 0;
    free(name);
    return NPUC_OK;
}

static void plan_free(fold_plan *p) {
    npuc__strmap_free(&p->uses);
    npuc__strmap_free(&p->gouts);
    npuc__strmap_free(&p->removed);
    npuc__strmap_free(&p->drop);
    npuc__strmap_free(&p->oldout);
    free(p->rn);
}

npuc_status npuc__onnx_graph_write(npuc_ctx *ctx, const char *label, const char *stored, const npuc_graph *g,
                                   char **out) {
    *out = NULL;
    npuc__ox_edit e;
    npuc_status st = npuc__ox_edit_open(ctx, label, stored, g, &e);
    int split = 0; /* lowrank's split nodes: onnx_split.c */
    if (st == NPUC_OK) st = npuc__onnx_split_write(ctx, label, &e, g, out, &split);
    if (st != NPUC_OK || split) {
        npuc__ox_edit_close(&e);
        return st;
    }
    fold_plan p;
    memset(&p, 0, sizeof p);
    p.ctx = ctx;
    p.label = label;
    p.g = g;
    p.e = &e;
    const npuc__onnx_model *om = e.om;
    npuc__ox_buf res = {0};
    npuc__ox_walk wk;
    memset(&wk, 0, sizeof wk);
    wk.ctx = ctx;
    wk.path = label;
    wk.base = e.skel;
    wk.meta = npuc__ox_keep_meta;
    wk.user = &p;
    if (om->graph) {
        count_uses(&p, om->graph);
        if ((st = p.st) == NPUC_OK) {
            plan_graph(&p, om, om->graph);
            st = p.st;
        }
    }
    if (st == NPUC_OK && !p.nrn && om->graph) /* no node removed: a resize (structured prune)? */
        st = npuc__onnx_resize_write(ctx, label, e.skel, e.nskel, om, g, out);
    if (st == NPUC_OK && p.nrn) {
        wk.weight = copy_weight;
        wk.node = fold_node;
        wk.graph_field = fold_field;
        wk.hook_user = &p;
        st = npuc__ox_walk_model(&wk, e.skel, e.nskel, &res);
        if (st == NPUC_OK && res.nh) st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: payloads in the graph entry", label);
        if (st == NPUC_OK && !(*out = npuc__ox_b64_encode(res.p, res.n))) st = oom(&p);
    }
    npuc__ox_free(&res);
    plan_free(&p);
    npuc__ox_edit_close(&e);
    return st;
}
