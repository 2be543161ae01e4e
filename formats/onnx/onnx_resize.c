/*
 * onnx_resize.c - a resized network graph (structured prune:
 * npuc__ng_resize) written back into the "onnx.model" entry; called from
 * the row's graph_write hook (onnx_fold.c) when the edit removed no node.
 *
 * The edit is in the graph's weight shapes: a weight whose dims in the
 * stored graph differ from g's (same rank) was resized.  Then
 *   - its TensorProto (initializer or Constant value) gets g's dims; the
 *     writer fills the payload as for any weight;
 *   - a graph input naming it (an initializer listed as an input, IR < 4)
 *     gets the new dims in its type;
 *   - the values whose channel count changed are found along the file's
 *     edges: the outputs of a node that reads a weight whose output axis
 *     shrank (the producer, its BatchNorm, a depthwise Conv), and of a node
 *     that reads such a value, unless the node reads a weight whose input
 *     axis shrank (a consumer: its output keeps its size).  Their
 *     value_info entries are dropped (ONNX runtimes infer them again);
 *   - a depthwise Conv whose kernel shrank along its output axis gets the
 *     new channel count as its "group" (it was the old one);
 *   - a weight read through Identity, Cast or Transpose is that weight (its
 *     shape follows; value_info naming it is dropped); through a Reshape,
 *     whose shape constant states the old size, it is refused;
 *   - such a value reaching a Reshape (its shape constant states a channel
 *     count npuc cannot prove) or a graph output is refused, naming the
 *     node or the output.
 * Everything else is copied as it is.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_net.h"
#include "onnx_format.h"
#include "onnx_model.h"
#include "onnx_edit.h"
#include "onnx_resize.h"
#include "strmap.h"

typedef struct rz_w {
    const char *name; /* g's string */
    int rank;
    int64_t shape[NPUC_MAX_RANK]; /* g's */
    int64_t old[NPUC_MAX_RANK];   /* the file's */
    int outchg, inchg;           /* the output / input axis changed */
} rz_w;

typedef struct rz {
    npuc_ctx *ctx;
    const char *label;
    const npuc__ng *g;
    npuc__strmap gw;      /* weight name -> node index + 1 << 8 | weight (g) */
    npuc__strmap changed; /* weight name -> index in ws */
    npuc__strmap vals;    /* resized value names */
    npuc__strmap alias;   /* Identity/Cast/Transpose of a resized weight -> index in ws */
    rz_w *ws;
    size_t nws, capws;
    npuc_status st;
} rz;

static npuc_status oom(rz *r) { return r->st = npuc_fail(r->ctx, NPUC_ERR_NOMEM, "out of memory"); }

/* The dims of TensorProto msg (packed or not): rank, -1 when malformed. */
static int tensor_dims(const unsigned char *msg, uint64_t len, int64_t *dims) {
    const unsigned char *q = msg, *end = msg + len;
    npuc__ox_field f;
    int rank = 0;
    while (q < end) {
        if (npuc__ox_next(&q, end, &f)) return -1;
        if (f.num != 1) continue;
        if (f.wt == 0) {
            if (rank >= NPUC_MAX_RANK) return -1;
            dims[rank++] = (int64_t)f.v;
        } else if (f.wt == 2) {
            const unsigned char *v = f.data, *vend = f.data + f.len;
            uint64_t x;
            while (v < vend) {
                if (npuc__ox_varint(&v, vend, &x) || rank >= NPUC_MAX_RANK) return -1;
                dims[rank++] = (int64_t)x;
            }
        }
    }
    return rank;
}

/* First walk: which weights g resized. */
static npuc_status scan(npuc__ox_walk *wk, const npuc__ox_weight *w, npuc__ox_buf *out) {
    rz *r = wk->user;
    npuc__ox_put(out, w->msg, (size_t)w->len);
    size_t x;
    if (!npuc__strmap_get(&r->gw, w->name, &x) || npuc__strmap_get(&r->changed, w->name, NULL)) return NPUC_OK;
    const npuc_graph_weight *gw = &r->g->nodes[x >> 8].w[x & 0xff];
    int64_t dims[NPUC_MAX_RANK];
    int rank = tensor_dims(w->msg, w->len, dims);
    if (rank < 0) return npuc__ox_bad(wk, w->msg, "TensorProto.dims", "malformed dims");
    if (gw->rank < 0) return NPUC_OK;
    int same = rank == gw->rank;
    for (int a = 0; same && a < rank; a++) same = dims[a] == gw->shape[a];
    if (same) return NPUC_OK;
    if (rank != gw->rank)
        return r->st = npuc_fail(r->ctx, NPUC_ERR_UNSUPPORTED, "%s: weight '%s': the edited graph gives it rank %d, "
                                 "the file %d (only a resize along an axis is written)", r->label, w->name, gw->rank,
                                 rank);
    if (npuc__grow((void **)&r->ws, &r->capws, r->nws + 1, sizeof *r->ws)) return oom(r);
    rz_w *e = &r->ws[r->nws];
    memset(e, 0, sizeof *e);
    e->name = gw->tensor;
    e->rank = rank;
    memcpy(e->shape, gw->shape, sizeof e->shape);
    memcpy(e->old, dims, sizeof e->old);
    for (int a = 0; a < rank; a++)
        if (dims[a] != gw->shape[a]) {
            if (a == gw->out_axis) e->outchg = 1;
            else if (a == gw->in_axis) e->inchg = 1;
            else
                return r->st = npuc_fail(r->ctx, NPUC_ERR_UNSUPPORTED, "%s: weight '%s': the edited graph changes "
                                         "its axis %d, which is neither its output nor its input axis", r->label,
                                         w->name, a);
        }
    if (npuc__strmap_put(&r->changed, w->name, r->nws) != 0) return oom(r);
    r->nws++;
    return NPUC_OK;
}

static const rz_w *changed(const rz *r, const char *name) {
    size_t k;
    if (!name || !*name) return NULL;
    if (npuc__strmap_get(&r->changed, name, &k) || npuc__strmap_get(&r->alias, name, &k)) return &r->ws[k];
    return NULL;
}

static int is_default(const char *d) { return !d || !*d || strcmp(d, "ai.onnx") == 0; }

/* Marks the values whose channels changed in og (and its subgraphs);
 * *more when one was added. */
static void mark(rz *r, const npuc__onnx_graph *og, int *more) {
    for (size_t i = 0; i < og->nnodes && r->st == NPUC_OK; i++) {
        const npuc__onnx_node *n = &og->nodes[i];
        for (size_t a = 0; a < n->nattrs && r->st == NPUC_OK; a++) /* subgraphs read outer values */
            for (size_t s = 0; s < n->attrs[a].ngraphs && r->st == NPUC_OK; s++)
                if (n->attrs[a].graphs[s]) mark(r, n->attrs[a].graphs[s], more);
        if (r->st != NPUC_OK) return;
        int out = 0, cons = 0, reads = 0;
        for (size_t k = 0; k < n->ninputs; k++) {
            const rz_w *w = changed(r, n->inputs[k]);
            if (w && w->outchg) out = 1;
            if (w && w->inchg) cons = 1;
            if (*n->inputs[k] && npuc__strmap_get(&r->vals, n->inputs[k], NULL)) reads = 1;
        }
        if (is_default(n->domain) && n->op_type && strcmp(n->op_type, "Constant") == 0 && n->noutputs &&
            changed(r, n->outputs[0]))
            continue; /* the weight itself */
        const rz_w *w0 = n->ninputs ? changed(r, n->inputs[0]) : NULL;
        if (w0 && is_default(n->domain) && n->op_type && n->noutputs == 1 && *n->outputs[0]) {
            const char *op = n->op_type;
            if (strcmp(op, "Identity") == 0 || strcmp(op, "Cast") == 0 || strcmp(op, "Transpose") == 0) {
                /* the weight as the consumer reads it: its shape follows */
                size_t k;
                npuc__strmap_get(&r->changed, w0->name, &k);
                if (!npuc__strmap_get(&r->alias, n->outputs[0], NULL)) {
                    if (npuc__strmap_put(&r->alias, n->outputs[0], k) != 0) { oom(r); return; }
                    *more = 1;
                }
                continue;
            }
            if (strcmp(op, "Reshape") == 0) {
                r->st = npuc_fail(r->ctx, NPUC_ERR_UNSUPPORTED, "%s: node '%s' (Reshape) reshapes weight '%s', which "
                                  "the edit resizes: its shape constant states the old size", r->label,
                                  n->name && *n->name ? n->name : n->outputs[0], w0->name);
                return;
            }
        }
        if (reads && !out && !cons && is_default(n->domain) && n->op_type && strcmp(n->op_type, "Reshape") == 0) {
            r->st = npuc_fail(r->ctx, NPUC_ERR_UNSUPPORTED, "%s: node '%s' (Reshape) reads '%s', whose channels the "
                              "edit shrinks: its shape constant states the old size, and npuc cannot prove the new "
                              "one", r->label, n->name && *n->name ? n->name : n->outputs[0], n->inputs[0]);
            return;
        }
        if (!(out || (reads && !cons))) continue;
        for (size_t k = 0; k < n->noutputs; k++) {
            if (!*n->outputs[k] || npuc__strmap_get(&r->vals, n->outputs[k], NULL)) continue;
            if (npuc__strmap_put(&r->vals, n->outputs[k], 1) != 0) { oom(r); return; }
            *more = 1;
        }
    }
}

/* ------------------------------------------------------------ the rewrite */

static npuc_status put_weight(npuc__ox_walk *wk, const npuc__ox_weight *w, npuc__ox_buf *out) {
    rz *r = wk->user;
    const rz_w *e = changed(r, w->name);
    if (!e) {
        npuc__ox_put(out, w->msg, (size_t)w->len);
        return NPUC_OK;
    }
    for (int a = 0; a < e->rank; a++) {
        npuc__ox_put_tag(out, 1, 0);
        npuc__ox_put_varint(out, (uint64_t)e->shape[a]);
    }
    const unsigned char *q = w->msg, *end = w->msg + w->len;
    npuc__ox_field f;
    while (q < end) {
        const char *why = npuc__ox_next(&q, end, &f);
        if (why) return npuc__ox_bad(wk, q, "TensorProto", why);
        if (f.num != 1) npuc__ox_put(out, f.start, (size_t)(f.end - f.start));
    }
    return NPUC_OK;
}

/* A Conv reading a resized depthwise kernel: its "group" follows. */
static npuc_status put_node(npuc__ox_walk *wk, const unsigned char *b, uint64_t n, int depth, npuc__ox_buf *out,
                            int *handled) {
    (void)depth;
    rz *r = wk->hook_user;
    const unsigned char *q = b, *end = b + n;
    npuc__ox_field f, a;
    int conv = 0, dflt = 1, nin = 0;
    const rz_w *e = NULL;
    while (q < end) {
        const char *why = npuc__ox_next(&q, end, &f);
        if (why) return npuc__ox_bad(wk, q, "NodeProto", why);
        if (f.num == 1 && nin++ == 1 && f.wt == 2) {
            for (size_t k = 0; k < r->nws && !e; k++)
                if (strlen(r->ws[k].name) == f.len && memcmp(r->ws[k].name, f.data, (size_t)f.len) == 0)
                    e = &r->ws[k];
        }
        if (f.num == 4) conv = npuc__ox_field_is(&f, "Conv");
        if (f.num == 7) dflt = f.wt == 2 && (f.len == 0 || npuc__ox_field_is(&f, "ai.onnx"));
    }
    if (!conv || !dflt || !e || !e->outchg || e->rank < 2 || e->old[1] != 1) return NPUC_OK;
    npuc__ox_buf c = {0};
    int found = 0;
    for (q = b; q < end;) {
        (void)npuc__ox_next(&q, end, &f);
        int group = 0;
        if (f.num == 5 && f.wt == 2)
            for (const unsigned char *x = f.data, *xe = f.data + f.len; x < xe;) {
                if (npuc__ox_next(&x, xe, &a)) break;
                if (a.num == 1 && npuc__ox_field_is(&a, "group")) group = 1;
            }
        if (!group) {
            npuc__ox_put(&c, f.start, (size_t)(f.end - f.start));
            continue;
        }
        int64_t gv = -1;
        for (const unsigned char *x = f.data, *xe = f.data + f.len; x < xe;) {
            if (npuc__ox_next(&x, xe, &a)) break;
            if (a.num == 3 && a.wt == 0) gv = (int64_t)a.v;
        }
        if (gv != e->old[0]) {
            npuc__ox_free(&c);
            return r->st = npuc_fail(r->ctx, NPUC_ERR_UNSUPPORTED, "%s: Conv reading '%s': group %lld is not its "
                                     "%lld channels, so the new group cannot be proven", r->label, e->name,
                                     (long long)gv, (long long)e->old[0]);
        }
        npuc__ox_buf at = {0};
        npuc__ox_put_bytes(&at, 1, "group", 5);
        npuc__ox_put_tag(&at, 3, 0);
        npuc__ox_put_varint(&at, (uint64_t)e->shape[0]);
        npuc__ox_put_tag(&at, 20, 0);
        npuc__ox_put_varint(&at, 2); /* AttributeProto.INT */
        npuc__ox_put_sub(&c, 5, &at);
        found = 1;
    }
    if (!found) { /* group 1 and a [C, 1, ...] kernel: a Conv of one input channel, not depthwise */
        npuc__ox_free(&c);
        return NPUC_OK;
    }
    npuc__ox_put_sub(out, 1, &c);
    *handled = 1;
    return out->oom ? oom(r) : NPUC_OK;
}

/* The name of ValueInfoProto bytes p[0..n) (a copy; NULL none / no memory). */
static char *vi_name(const unsigned char *p, uint64_t n) {
    const unsigned char *q = p, *end = p + n;
    npuc__ox_field f;
    while (q < end) {
        if (npuc__ox_next(&q, end, &f)) return NULL;
        if (f.num == 1 && f.wt == 2 && !memchr(f.data, 0, (size_t)f.len)) {
            char *s = malloc((size_t)f.len + 1);
            if (s) {
                memcpy(s, f.data, (size_t)f.len);
                s[f.len] = 0;
            }
            return s;
        }
    }
    return NULL;
}

/* The elem_type of a ValueInfoProto's tensor type (0 unknown). */
static uint64_t vi_elem(const unsigned char *p, uint64_t n) {
    const unsigned char *q = p, *end = p + n;
    npuc__ox_field f, t, e;
    while (q < end) {
        if (npuc__ox_next(&q, end, &f)) return 0;
        if (f.num != 2 || f.wt != 2) continue;
        for (const unsigned char *a = f.data, *ae = f.data + f.len; a < ae;) {
            if (npuc__ox_next(&a, ae, &t)) return 0;
            if (t.num != 1 || t.wt != 2) continue;
            for (const unsigned char *b = t.data, *be = t.data + t.len; b < be;) {
                if (npuc__ox_next(&b, be, &e)) return 0;
                if (e.num == 1 && e.wt == 0) return e.v;
            }
        }
    }
    return 0;
}

/* Graph inputs come first, each as it was or, naming a resized weight,
 * with its new dims (graph_field drops the originals). */
static npuc_status begin_graph(npuc__ox_walk *wk, const unsigned char *p, uint64_t n, int depth, npuc__ox_buf *out) {
    (void)depth;
    rz *r = wk->hook_user;
    const unsigned char *q = p, *end = p + n;
    npuc__ox_field f;
    while (q < end) {
        const char *why = npuc__ox_next(&q, end, &f);
        if (why) return npuc__ox_bad(wk, q, "GraphProto", why);
        if (f.num != 11 || f.wt != 2) continue;
        char *name = vi_name(f.data, f.len);
        const rz_w *e = changed(r, name);
        free(name);
        if (!e) {
            npuc__ox_put(out, f.start, (size_t)(f.end - f.start));
            continue;
        }
        npuc__ox_buf vi = {0}, ty = {0}, tt = {0}, sh = {0};
        npuc__ox_put_bytes(&vi, 1, e->name, strlen(e->name));
        npuc__ox_put_tag(&tt, 1, 0);
        npuc__ox_put_varint(&tt, vi_elem(f.data, f.len));
        for (int a = 0; a < e->rank; a++) {
            npuc__ox_buf d = {0};
            npuc__ox_put_tag(&d, 1, 0);
            npuc__ox_put_varint(&d, (uint64_t)e->shape[a]);
            npuc__ox_put_sub(&sh, 1, &d);
        }
        npuc__ox_put_sub(&tt, 2, &sh);
        npuc__ox_put_sub(&ty, 1, &tt);
        npuc__ox_put_sub(&vi, 2, &ty);
        npuc__ox_put_sub(out, 11, &vi);
    }
    return out->oom ? oom(r) : NPUC_OK;
}

static npuc_status graph_field(npuc__ox_walk *wk, const npuc__ox_field *f, int depth, int *keep) {
    (void)depth;
    rz *r = wk->hook_user;
    if (f->num == 11) {
        *keep = 0; /* written by begin_graph */
        return NPUC_OK;
    }
    if ((f->num != 12 && f->num != 13) || f->wt != 2) return NPUC_OK;
    char *name = vi_name(f->data, f->len);
    int hit = name && (npuc__strmap_get(&r->vals, name, NULL) || npuc__strmap_get(&r->alias, name, NULL));
    npuc_status st = NPUC_OK;
    if (hit && f->num == 12)
        st = npuc_fail(r->ctx, NPUC_ERR_UNSUPPORTED, "%s: graph output '%s': the edit shrinks its channels (the "
                       "model's outputs keep their size)", r->label, name);
    else if (hit)
        *keep = 0;
    free(name);
    return st;
}

npuc_status npuc__onnx_resize_write(npuc_ctx *ctx, const char *label, const unsigned char *skel, size_t nskel,
                                    const npuc__onnx_model *om, const npuc_graph *g, char **out) {
    *out = NULL;
    rz r;
    memset(&r, 0, sizeof r);
    r.ctx = ctx;
    r.label = label;
    r.g = g;
    npuc_status st = NPUC_OK;
    for (size_t i = 0; st == NPUC_OK && i < g->nnodes; i++)
        for (size_t k = 0; k < g->nodes[i].nw && k < 256; k++)
            if (!npuc__strmap_get(&r.gw, g->nodes[i].w[k].tensor, NULL) &&
                npuc__strmap_put(&r.gw, g->nodes[i].w[k].tensor, i << 8 | k) != 0)
                st = oom(&r);
    npuc__ox_walk wk;
    memset(&wk, 0, sizeof wk);
    wk.ctx = ctx;
    wk.path = label;
    wk.base = skel;
    wk.weight = scan;
    wk.meta = npuc__ox_keep_meta;
    wk.user = &r;
    npuc__ox_buf res = {0};
    if (st == NPUC_OK) {
        st = npuc__ox_walk_model(&wk, skel, nskel, &res);
        if (st == NPUC_OK) st = r.st;
        npuc__ox_free(&res);
    }
    if (st == NPUC_OK && r.nws && om->graph) {
        for (int more = 1, k = 0; more && st == NPUC_OK && k < 1000; k++) {
            more = 0;
            mark(&r, om->graph, &more);
            st = r.st;
        }
        if (st == NPUC_OK) {
            wk.weight = put_weight;
            wk.graph_begin = begin_graph;
            wk.node = put_node;
            wk.graph_field = graph_field;
            wk.hook_user = &r;
            st = npuc__ox_walk_model(&wk, skel, nskel, &res);
            if (st == NPUC_OK) st = r.st;
            if (st == NPUC_OK && res.nh) st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: payloads in the graph entry", label);
            if (st == NPUC_OK && !(*out = npuc__ox_b64_encode(res.p, res.n))) st = oom(&r);
        }
    }
    npuc__ox_free(&res);
    npuc__strmap_free(&r.gw);
    npuc__strmap_free(&r.changed);
    npuc__strmap_free(&r.vals);
    npuc__strmap_free(&r.alias);
    free(r.ws);
    return st;
}
