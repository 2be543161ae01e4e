/*
 * graph_net_edit.c - the edits passes make to a network graph: remove a
 * node (fold-bn), split one in two (lowrank), insert one on an edge
 * (quantize's DequantizeLinear), resize a value along its channel axis and
 * carry the new extent to every consumer (structured prune).
 *
 * Each edit works on a copy: the copy is changed, npuc__ng_check must
 * accept it, and only then does it replace the caller's graph.  A refusal
 * leaves the graph as it was and says which node or value stopped it.
 */
#include <stdlib.h>
#include <string.h>

#include "graph/graph_net.h"

static npuc_status nomem(npuc_ctx *ctx) { return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); }

/* Checks c and, when valid, makes it *g (freeing the old graph); else frees c. */
static npuc_status commit(npuc_ctx *ctx, npuc__ng **g, npuc__ng *c, npuc_status st) {
    if (st == NPUC_OK) st = npuc__ng_check(ctx, c);
    if (st != NPUC_OK) {
        npuc__ng_free(c);
        return st;
    }
    npuc__ng_free(*g);
    *g = c;
    return NPUC_OK;
}

/* Removes node i and value v from g, renumbering what follows them. */
static void drop_node_value(npuc__ng *g, size_t i, size_t v) {
    npuc__ng_node *n = &g->nodes[i];
    free(n->name); free(n->op); free(n->source_op); free(n->in); free(n->out);
    for (size_t k = 0; k < n->nw; k++) { free((char *)n->w[k].tensor); free((char *)n->w[k].role); }
    free(n->w);
    for (size_t k = 0; k < n->nattr; k++) { free(n->attr[k].key); free(n->attr[k].val); }
    free(n->attr);
    free(n->ev.why);
    memmove(&g->nodes[i], &g->nodes[i + 1], (g->nnodes - i - 1) * sizeof *g->nodes);
    g->nnodes--;
    free(g->vals[v].name);
    free(g->vals[v].ev.why);
    memmove(&g->vals[v], &g->vals[v + 1], (g->nvals - v - 1) * sizeof *g->vals);
    g->nvals--;
    for (size_t x = 0; x < g->nvals; x++)
        if (g->vals[x].prod != NPUC_GRAPH_NONE && g->vals[x].prod > i) g->vals[x].prod--;
    for (size_t j = 0; j < g->nnodes; j++) {
        npuc__ng_node *m = &g->nodes[j];
        for (size_t k = 0; k < m->nin; k++)
            if (m->in[k] > v) m->in[k]--;
        for (size_t k = 0; k < m->nout; k++)
            if (m->out[k] > v) m->out[k]--;
    }
    npuc__ng_reindex(g);
}

static int same_shape(const npuc__ng_value *a, const npuc__ng_value *b) {
    if (a->rank < 0 || b->rank < 0) return 1;
    if (a->rank != b->rank) return 0;
    for (int k = 0; k < a->rank; k++)
        if (a->shape[k] >= 0 && b->shape[k] >= 0 && a->shape[k] != b->shape[k]) return 0;
    return 1;
}

/* ------------------------------------------------------------ remove */

npuc_status npuc__ng_remove_node(npuc_ctx *ctx, npuc__ng **g, const char *name) {
    size_t i = npuc__ng_find_node(*g, name);
    if (i == NPUC_GRAPH_NONE) return npuc_fail(ctx, NPUC_ERR_ARG, "graph: no node '%s' to remove", name);
    const npuc__ng_node *n = &(*g)->nodes[i];
    if (n->nout != 1)
        return npuc_fail(ctx, NPUC_ERR_ARG, "graph: node '%s' (%s) has %zu outputs: removing it leaves no one value to "
                         "read instead", name, n->op, n->nout);
    if (n->nin == 0)
        return npuc_fail(ctx, NPUC_ERR_ARG, "graph: node '%s' (%s) reads nothing: its consumers would have no input",
                         name, n->op);
    size_t vin = n->in[0], vout = n->out[0];
    if (!same_shape(&(*g)->vals[vin], &(*g)->vals[vout]))
        return npuc_fail(ctx, NPUC_ERR_ARG, "graph: node '%s' (%s) changes the shape of '%s': its consumers cannot "
                         "read its input instead", name, n->op, (*g)->vals[vin].name);
    npuc__ng *c = npuc__ng_clone(*g);
    if (!c) return nomem(ctx);
    for (size_t j = 0; j < c->nnodes; j++) {
        npuc__ng_node *m = &c->nodes[j];
        if (j == i) continue;
        for (size_t k = 0; k < m->nin; k++)
            if (m->in[k] == vout) m->in[k] = vin;
    }
    if (c->vals[vout].is_output) c->vals[vin].is_output = 1;
    drop_node_value(c, i, vout);
    return commit(ctx, g, c, NPUC_OK);
}

/* ------------------------------------------------------------ split */

static npuc_status copy_weights(npuc_ctx *ctx, npuc__ng *c, size_t node, const npuc_graph_weight *w, size_t nw) {
    for (size_t k = 0; k < nw; k++) {
        npuc_status st = npuc__ng_add_weight(ctx, c, node, w[k].tensor, w[k].role, w[k].rank, w[k].shape,
                                             w[k].out_axis, w[k].in_axis);
        if (st != NPUC_OK) return st;
    }
    return NPUC_OK;
}

npuc_status npuc__ng_split_node(npuc_ctx *ctx, npuc__ng **g, const char *name, const char *second, const char *op2,
                                const char *mid, int mid_rank, const int64_t *mid_shape, const npuc_graph_weight *w1,
                                size_t nw1, const npuc_graph_weight *w2, size_t nw2) {
    size_t i = npuc__ng_find_node(*g, name);
    if (i == NPUC_GRAPH_NONE) return npuc_fail(ctx, NPUC_ERR_ARG, "graph: no node '%s' to split", name);
    const npuc__ng_node *n = &(*g)->nodes[i];
    if (n->nout != 1)
        return npuc_fail(ctx, NPUC_ERR_ARG, "graph: node '%s' (%s) has %zu outputs: a split needs one", name, n->op,
                         n->nout);
    if (!second || !op2 || !mid)
        return npuc_fail(ctx, NPUC_ERR_ARG, "graph: splitting '%s' needs the second node's name and op and the new "
                         "value's name", name);
    if (npuc__ng_find_node(*g, second) != NPUC_GRAPH_NONE)
        return npuc_fail(ctx, NPUC_ERR_ARG, "graph: cannot split '%s': a node '%s' exists", name, second);
    if (npuc__ng_find_value(*g, mid) != NPUC_GRAPH_NONE)
        return npuc_fail(ctx, NPUC_ERR_ARG, "graph: cannot split '%s': a value '%s' exists", name, mid);
    npuc__ng *c = npuc__ng_clone(*g);
    if (!c) return nomem(ctx);
    npuc__ng_node *cn = &c->nodes[i];
    size_t vout = cn->out[0], vmid, j;
    char why[200];
    snprintf(why, sizeof why, "split of '%s'", name);
    npuc_status st = npuc__ng_add_value(ctx, c, mid, mid_rank, mid_shape, cn->ev.kind, cn->ev.conf, why, &vmid);
    if (st != NPUC_OK) return commit(ctx, g, c, st);
    cn = &c->nodes[i];
    cn->out[0] = vmid;
    c->vals[vmid].prod = i;
    c->vals[vout].prod = NPUC_GRAPH_NONE;
    st = npuc__ng_add_node(ctx, c, second, op2, NULL, &vmid, 1, &vout, 1, cn->ev.kind, cn->ev.conf, why, &j);
    if (st == NPUC_OK && w1) {
        cn = &c->nodes[i];
        for (size_t k = 0; k < cn->nw; k++) { free((char *)cn->w[k].tensor); free((char *)cn->w[k].role); }
        cn->nw = 0;
        st = copy_weights(ctx, c, i, w1, nw1);
    }
    if (st == NPUC_OK) st = copy_weights(ctx, c, j, w2, nw2);
    return commit(ctx, g, c, st);
}

/* ------------------------------------------------------------ insert */

npuc_status npuc__ng_insert_node(npuc_ctx *ctx, npuc__ng **g, const char *value, const char *consumer,
                                 const char *name, const char *op) {
    size_t v = npuc__ng_find_value(*g, value);
    if (v == NPUC_GRAPH_NONE) return npuc_fail(ctx, NPUC_ERR_ARG, "graph: no value '%s' to insert '%s' on", value, name);
    size_t cons = NPUC_GRAPH_NONE;
    if (consumer) {
        cons = npuc__ng_find_node(*g, consumer);
        if (cons == NPUC_GRAPH_NONE)
            return npuc_fail(ctx, NPUC_ERR_ARG, "graph: no node '%s' to insert '%s' before", consumer, name);
        const npuc__ng_node *m = &(*g)->nodes[cons];
        size_t k = 0;
        while (k < m->nin && m->in[k] != v) k++;
        if (k == m->nin)
            return npuc_fail(ctx, NPUC_ERR_ARG, "graph: node '%s' does not read '%s': no edge to insert '%s' on",
                             consumer, value, name);
    }
    if (!name || !op) return npuc_fail(ctx, NPUC_ERR_ARG, "graph: an inserted node needs a name and an op");
    if (npuc__ng_find_node(*g, name) != NPUC_GRAPH_NONE)
        return npuc_fail(ctx, NPUC_ERR_ARG, "graph: cannot insert '%s': a node of that name exists", name);
    size_t nl = strlen(name);
    char *vname = malloc(nl + 3);
    if (!vname) return nomem(ctx);
    memcpy(vname, name, nl);
    memcpy(vname + nl, ":0", 3);
    if (npuc__ng_find_value(*g, vname) != NPUC_GRAPH_NONE) {
        npuc_status st = npuc_fail(ctx, NPUC_ERR_ARG, "graph: cannot insert '%s': a value '%s' exists", name, vname);
        free(vname);
        return st;
    }
    npuc__ng *c = npuc__ng_clone(*g);
    if (!c) { free(vname); return nomem(ctx); }
    size_t vnew, inode;
    const npuc__ng_value *src = &c->vals[v];
    npuc_status st = npuc__ng_add_value(ctx, c, vname, src->rank, src->shape, src->ev.kind, NPUC_CONF_CERTAIN,
                                        "inserted by a pass", &vnew);
    free(vname);
    if (st == NPUC_OK)
        st = npuc__ng_add_node(ctx, c, name, op, NULL, &v, 1, &vnew, 1, c->vals[v].ev.kind, NPUC_CONF_CERTAIN,
                               "inserted by a pass", &inode);
    if (st == NPUC_OK) {
        for (size_t j = 0; j < c->nnodes; j++) {
            if (j == inode || (cons != NPUC_GRAPH_NONE && j != cons)) continue;
            npuc__ng_node *m = &c->nodes[j];
            for (size_t k = 0; k < m->nin; k++)
                if (m->in[k] == v) m->in[k] = vnew;
        }
        if (cons == NPUC_GRAPH_NONE && c->vals[v].is_output) {
            c->vals[v].is_output = 0;
            c->vals[vnew].is_output = 1;
        }
    }
    return commit(ctx, g, c, st);
}

/* ------------------------------------------------------------ resize */

typedef struct rs {
    npuc_ctx *ctx;
    npuc__ng *g;
    int64_t *ch;          /* value -> channel extent, -1 unknown */
    size_t *queue;        /* values whose extent changed */
    size_t qhead, qtail, qcap;
    npuc__ng_change *chg;
    size_t nchg, capchg;
} rs;

static npuc_status rs_push(rs *r, size_t v) {
    if (r->qtail == r->qcap) {
        size_t nc = r->qcap ? 2 * r->qcap : 16;
        size_t *q = realloc(r->queue, nc * sizeof *q);
        if (!q) return nomem(r->ctx);
        r->queue = q;
        r->qcap = nc;
    }
    r->queue[r->qtail++] = v;
    return NPUC_OK;
}

/* Sets value v's channel extent (and its shape's channel axis when known);
 * queues it when it changed. */
static npuc_status rs_set(rs *r, size_t v, int64_t extent) {
    if (r->ch[v] == extent) return NPUC_OK;
    npuc__ng_value *x = &r->g->vals[v];
    if (x->is_output)
        return npuc_fail(r->ctx, NPUC_ERR_UNSUPPORTED, "graph: resizing reaches model output '%s' (%lld -> %lld "
                         "channels): the model's outputs keep their size", x->name, (long long)r->ch[v],
                         (long long)extent);
    r->ch[v] = extent;
    int ax = npuc__ng_channel_axis(r->g, x->rank);
    if (ax >= 0) x->shape[ax] = extent;
    return rs_push(r, v);
}

static npuc_status rs_weight(rs *r, size_t node, size_t k, int axis, int64_t extent) {
    npuc_graph_weight *w = &r->g->nodes[node].w[k];
    if (w->rank < 0 || axis < 0 || axis >= w->rank || w->shape[axis] == extent) return NPUC_OK;
    w->shape[axis] = extent;
    for (size_t c = 0; c < r->nchg; c++)
        if (r->chg[c].node == node && r->chg[c].weight == k && r->chg[c].axis == axis) {
            r->chg[c].extent = extent;
            return NPUC_OK;
        }
    if (r->nchg == r->capchg) {
        size_t nc = r->capchg ? 2 * r->capchg : 8;
        npuc__ng_change *q = realloc(r->chg, nc * sizeof *q);
        if (!q) return nomem(r->ctx);
        r->chg = q;
        r->capchg = nc;
    }
    r->chg[r->nchg++] = (npuc__ng_change){node, k, axis, extent};
    return NPUC_OK;
}

static npuc_status rs_refuse(rs *r, size_t node, size_t v, const char *why) {
    const npuc__ng_node *n = &r->g->nodes[node];
    return npuc_fail(r->ctx, NPUC_ERR_UNSUPPORTED, "graph: node '%s' (%s) reads resized '%s': %s", n->name, n->op,
                     r->g->vals[v].name, why);
}

/* The flattened extent of value v: the product of every axis but the batch
 * axis, -1 when one is not known. */
static int64_t flat_extent(const rs *r, size_t v) {
    const npuc__ng_value *x = &r->g->vals[v];
    if (x->rank < 2) return -1;
    int64_t p = 1;
    for (int a = 1; a < x->rank; a++) {
        if (x->shape[a] < 0 || __builtin_mul_overflow(p, x->shape[a], &p)) return -1;
    }
    return p;
}

/* Carries value v's new extent into consumer node j. */
static npuc_status rs_consumer(rs *r, size_t j, size_t v) {
    npuc__ng_node *n = &r->g->nodes[j];
    npuc__ng_kind kind = npuc__ng_op_kind(n->op);
    size_t out = n->nout ? n->out[0] : NPUC_GRAPH_NONE;
    int64_t e = r->ch[v];
    npuc_status st = NPUC_OK;
    switch (kind) {
    case NPUC_NG_WEIGHTED:
        if (n->nin && n->in[0] != v) return rs_refuse(r, j, v, "it reads it as a second operand");
        for (size_t k = 0; st == NPUC_OK && k < n->nw; k++)
            if (n->w[k].in_axis >= 0) st = rs_weight(r, j, k, n->w[k].in_axis, e);
        return st;
    case NPUC_NG_DEPTHWISE:
    case NPUC_NG_CHANNELWISE:
        for (size_t k = 0; st == NPUC_OK && k < n->nw; k++) {
            const npuc_graph_weight *w = &n->w[k];
            int ax = w->out_axis >= 0 ? w->out_axis : w->in_axis;
            if (ax >= 0) st = rs_weight(r, j, k, ax, e);
        }
        /* fall through */
    case NPUC_NG_ELEMENTWISE:
    case NPUC_NG_SPATIAL:
    case NPUC_NG_GLOBAL_POOL:
        if (st != NPUC_OK) return st;
        if (n->nin && n->in[0] != v) return rs_refuse(r, j, v, "it reads it as a second operand");
        if (out == NPUC_GRAPH_NONE) return NPUC_OK;
        if (kind == NPUC_NG_ELEMENTWISE && r->g->vals[out].rank >= 0 && r->g->vals[v].rank >= 0 &&
            r->g->vals[out].rank != r->g->vals[v].rank)
            return rs_refuse(r, j, v, "its output has another rank");
        return rs_set(r, out, e);
    case NPUC_NG_MERGE:
        /* Only when every input now has this extent; a later arrival of the
         * other inputs re-runs this, and rs_finish checks the last word. */
        for (size_t k = 0; k < n->nin; k++)
            if (r->ch[n->in[k]] != e) return NPUC_OK;
        return out == NPUC_GRAPH_NONE ? NPUC_OK : rs_set(r, out, e);
    case NPUC_NG_CONCAT: {
        const char *ax = npuc__ng_attr(r->g, j, "axis");
        const npuc__ng_value *o = out == NPUC_GRAPH_NONE ? NULL : &r->g->vals[out];
        if (ax && o && o->rank > 0) {
            long a = strtol(ax, NULL, 10);
            if (a < 0) a += o->rank;
            if (a != npuc__ng_channel_axis(r->g, o->rank))
                return rs_refuse(r, j, v, "it joins along another axis than the channels");
        }
        int64_t sum = 0;
        for (size_t k = 0; k < n->nin; k++) {
            if (r->ch[n->in[k]] < 0) return rs_refuse(r, j, v, "the channels of another input are not known");
            sum += r->ch[n->in[k]];
        }
        return out == NPUC_GRAPH_NONE ? NPUC_OK : rs_set(r, out, sum);
    }
    case NPUC_NG_FLATTEN: {
        int64_t f = flat_extent(r, v);
        if (f < 0) return rs_refuse(r, j, v, "its shape is not known, so the flattened size cannot be proven");
        return out == NPUC_GRAPH_NONE ? NPUC_OK : rs_set(r, out, f);
    }
    case NPUC_NG_RESHAPE:
        return rs_refuse(r, j, v, "its target shape states the old size");
    default:
        return rs_refuse(r, j, v, "the graph does not know how this op carries channels");
    }
}

/* Every merge reached must have all its inputs at one extent. */
static npuc_status rs_finish(rs *r) {
    for (size_t j = 0; j < r->g->nnodes; j++) {
        const npuc__ng_node *n = &r->g->nodes[j];
        if (npuc__ng_op_kind(n->op) != NPUC_NG_MERGE) continue;
        for (size_t k = 1; k < n->nin; k++)
            if (r->ch[n->in[k]] != r->ch[n->in[0]] && r->ch[n->in[k]] >= 0 && r->ch[n->in[0]] >= 0)
                return npuc_fail(r->ctx, NPUC_ERR_UNSUPPORTED, "graph: node '%s' (%s) reads '%s' (%lld channels) and "
                                 "'%s' (%lld): their producers must be resized together", n->name, n->op,
                                 r->g->vals[n->in[0]].name, (long long)r->ch[n->in[0]], r->g->vals[n->in[k]].name,
                                 (long long)r->ch[n->in[k]]);
    }
    return NPUC_OK;
}

static npuc_status rs_start(rs *r, const char *name, int64_t extent) {
    size_t v = npuc__ng_find_value(r->g, name);
    if (v == NPUC_GRAPH_NONE) return npuc_fail(r->ctx, NPUC_ERR_ARG, "graph: no value '%s' to resize", name);
    size_t p = r->g->vals[v].prod;
    if (p == NPUC_GRAPH_NONE)
        return npuc_fail(r->ctx, NPUC_ERR_ARG, "graph: '%s' is a model input: its size is the model's interface",
                         name);
    npuc__ng_node *n = &r->g->nodes[p];
    npuc__ng_kind kind = npuc__ng_op_kind(n->op);
    if (kind != NPUC_NG_WEIGHTED)
        return npuc_fail(r->ctx, NPUC_ERR_ARG, "graph: '%s' is made by '%s' (%s), which has no output channels of its "
                         "own to remove", name, n->name, n->op);
    if (n->nout != 1)
        return npuc_fail(r->ctx, NPUC_ERR_ARG, "graph: '%s' is one of %zu outputs of '%s'", name, n->nout, n->name);
    npuc_status st = NPUC_OK;
    for (size_t k = 0; st == NPUC_OK && k < n->nw; k++)
        if (n->w[k].out_axis >= 0) st = rs_weight(r, p, k, n->w[k].out_axis, extent);
    if (st == NPUC_OK) st = rs_set(r, v, extent);
    return st;
}

npuc_status npuc__ng_resize(npuc_ctx *ctx, npuc__ng **g, const char *const *vals, size_t nv, int64_t extent,
                            npuc__ng_change **changes, size_t *nchanges) {
    if (changes) *changes = NULL;
    if (nchanges) *nchanges = 0;
    if (extent < 1) return npuc_fail(ctx, NPUC_ERR_ARG, "graph: cannot resize to %lld channels", (long long)extent);
    if (!nv) return npuc_fail(ctx, NPUC_ERR_ARG, "graph: nothing to resize");
    rs r = {.ctx = ctx};
    r.g = npuc__ng_clone(*g);
    r.ch = malloc((r.g && r.g->nvals ? r.g->nvals : 1) * sizeof *r.ch);
    if (!r.g || !r.ch) {
        npuc__ng_free(r.g);
        free(r.ch);
        return nomem(ctx);
    }
    for (size_t v = 0; v < r.g->nvals; v++) {
        const npuc__ng_value *x = &r.g->vals[v];
        int ax = npuc__ng_channel_axis(r.g, x->rank);
        r.ch[v] = ax >= 0 ? x->shape[ax] : -1;
    }
    npuc_status st = NPUC_OK;
    for (size_t k = 0; st == NPUC_OK && k < nv; k++) st = rs_start(&r, vals[k], extent);
    size_t cap = 64, *cons = malloc(cap * sizeof *cons);
    if (!cons && st == NPUC_OK) st = nomem(ctx);
    while (st == NPUC_OK && r.qhead < r.qtail) {
        size_t v = r.queue[r.qhead++];
        size_t nc = npuc__ng_consumers(r.g, v, cons, cap);
        if (nc > cap) {
            size_t *q = realloc(cons, nc * sizeof *q);
            if (!q) { st = nomem(ctx); break; }
            cons = q;
            cap = nc;
            npuc__ng_consumers(r.g, v, cons, cap);
        }
        for (size_t c = 0; st == NPUC_OK && c < nc; c++) st = rs_consumer(&r, cons[c], v);
    }
    free(cons);
    if (st == NPUC_OK) st = rs_finish(&r);
    free(r.ch);
    free(r.queue);
    npuc__ng *c = r.g;
    st = commit(ctx, g, c, st);
    if (st == NPUC_OK && changes) {
        *changes = r.chg;
        *nchanges = r.nchg;
    } else {
        free(r.chg);
    }
    return st;
}
