/*
 * prune_stated.c - structured pruning's chains from a network graph the file
 * states (an ONNX model's, formats/onnx/onnx_netgraph.c), and the graph of
 * the pruned model as an edit of it (npuc__ng_resize).
 *
 * A file whose graph states its edges needs no naming rules: the channels a
 * producer (Conv, ConvTranspose, Gemm, MatMul) makes run along its output
 * value through ops that keep every channel apart (Relu, Clip, HardSigmoid,
 * BatchNormalization, a Mul/Add/Sub/Div by a scalar, Identity, Dropout,
 * pooling, a depthwise Conv) and end in the input axis of the weighted
 * nodes that read them.  An Add of two branches joins two producers'
 * channels: they prune together, with one mask, or not at all.  Anything
 * else (a Flatten, a Reshape, a Concat, a model output, a per-channel
 * operand of a Mul, an op npuc does not know) refuses the chain with the
 * node named; onnx_netgraph.c's "prune_refused" attribute says the same
 * for the file's reader.
 *
 * The planned shapes are then checked against the graph: the pruned
 * model's graph is npuc__ng_resize of a copy of the file's, and every
 * weight the resize changes must have the planned shape and every planned
 * change must be one the resize made.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_net.h"
#include "passes/prune/prune_internal.h"

static const npuc__ng *graph_of(const npuc_model *m) { return (const npuc__ng *)npuc_model_graph(m); }

int npuc__chain_stated(npuc_ctx *ctx, npuc_model *m) {
    if (!npuc_model_graph(m)) {
        if (npuc_model_read_graph(ctx, m) != NPUC_OK) {
            npuc_ctx_clear(ctx);
            return 0;
        }
    }
    const npuc__ng *g = graph_of(m);
    if (!g) return 0;
    for (size_t i = 0; i < g->nnodes; i++)
        if (g->nodes[i].ev.kind == NPUC_GRAPH_EV_FILE && g->nodes[i].ev.conf == NPUC_CONF_CERTAIN &&
            (npuc__ng_attr(g, i, "prune_consumers") || npuc__ng_attr(g, i, "prune_refused")))
            return 1;
    return 0;
}

static int op_is(const npuc__ng_node *n, const char *op) { return strcmp(n->op, op) == 0; }

static int weighted_op(const npuc__ng_node *n) {
    return op_is(n, "Conv") || op_is(n, "ConvTranspose") || op_is(n, "Gemm") || op_is(n, "MatMul");
}

/* The kernel weight of node nd (role "kernel" / "depthwise_kernel"), or NULL. */
static const npuc_graph_weight *kernel_of(const npuc__ng *g, size_t nd, size_t *k) {
    const npuc__ng_node *n = &g->nodes[nd];
    for (size_t i = 0; i < n->nw; i++)
        if (strcmp(n->w[i].role, "kernel") == 0 || strcmp(n->w[i].role, "depthwise_kernel") == 0) {
            if (k) *k = i;
            return &n->w[i];
        }
    return NULL;
}

static const npuc_graph_weight *role_of(const npuc__ng *g, size_t nd, const char *role) {
    const npuc__ng_node *n = &g->nodes[nd];
    for (size_t i = 0; i < n->nw; i++)
        if (strcmp(n->w[i].role, role) == 0) return &n->w[i];
    return NULL;
}

int npuc__chain_stated_kind(const npuc_model *m, size_t i) {
    const npuc__ng *g = graph_of(m);
    if (!g) return 0;
    const npuc_tensor_info *t = npuc_model_tensor(m, i);
    size_t nd = npuc__ng_weight_node(g, t->name);
    if (nd == NPUC_GRAPH_NONE) return 0;
    const npuc_graph_weight *w = kernel_of(g, nd, NULL);
    if (!w || strcmp(w->tensor, t->name) != 0) return 0;
    if (op_is(&g->nodes[nd], "DepthwiseConv")) return 2;
    return weighted_op(&g->nodes[nd]) ? 1 : 0;
}

/* The model tensor index of a graph weight, -1 when the model has none. */
static int64_t tindex(const npuc_model *m, const npuc_graph_weight *w) {
    size_t t;
    if (!w || npuc_model_find(m, w->tensor, &t) != 0) return -1;
    return (int64_t)t;
}

typedef struct sw {
    npuc_model *m;
    const npuc__ng *g;
    npuc__chain *c;
    unsigned char *seen; /* per value */
    size_t *queue;
    size_t nq, cap;
    size_t prods[NPUC_CHAIN_MAX + 1];
    size_t nprods;
} sw;

static int refuse(sw *w, const char *fmt, const char *a, const char *b) {
    npuc__fmt(w->c->why, sizeof w->c->why, fmt, a, b);
    return 1;
}

static int push(sw *w, size_t v) {
    if (w->seen[v]) return 0;
    w->seen[v] = 1;
    if (w->nq == w->cap) {
        size_t nc = w->cap ? 2 * w->cap : 16;
        size_t *q = realloc(w->queue, nc * sizeof *q);
        if (!q) return -1;
        w->queue = q;
        w->cap = nc;
    }
    w->queue[w->nq++] = v;
    return 0;
}

/* 1 when every weight of node nd holds one element (a scalar operand). */
static int scalar_weights(sw *w, size_t nd, const char **bad) {
    const npuc__ng_node *n = &w->g->nodes[nd];
    for (size_t k = 0; k < n->nw; k++) {
        int64_t t = tindex(w->m, &n->w[k]);
        if (t < 0 || npuc_model_tensor(w->m, (size_t)t)->numel != 1) {
            *bad = n->w[k].tensor;
            return 0;
        }
    }
    return 1;
}

/* 1 when op passes channels one to one (one value input, scalar weights). */
static int passes(const npuc__ng_node *n) {
    static const char *const P[] = {"Relu", "Clip", "HardSigmoid", "Identity", "Dropout", "LeakyRelu", "Sigmoid",
                                    "Tanh", "MaxPool", "AveragePool", "HardSwish", NULL};
    for (int i = 0; P[i]; i++)
        if (strcmp(n->op, P[i]) == 0) return 1;
    return (op_is(n, "Mul") || op_is(n, "Add") || op_is(n, "Sub") || op_is(n, "Div")) && n->nin == 1;
}

/* Adds producer node nd (the chain's head or an Add's other branch). */
static int add_producer(sw *w, size_t nd) {
    for (size_t i = 0; i < w->nprods; i++)
        if (w->prods[i] == nd) return 0;
    const npuc__ng_node *n = &w->g->nodes[nd];
    if (w->nprods > NPUC_CHAIN_MAX) return refuse(w, "more than %s producers share one Add%s", "64", "");
    size_t k;
    const npuc_graph_weight *kw = kernel_of(w->g, nd, &k);
    int64_t t = tindex(w->m, kw);
    if (!kw || t < 0 || kw->out_axis < 0 || kw->rank < 0)
        return refuse(w, "'%s' (%s) has no kernel whose output axis the graph states", n->name, n->op);
    if ((uint64_t)kw->shape[kw->out_axis] != w->c->channels)
        return refuse(w, "the Add joining '%s' reads another channel count from '%s'",
                      w->g->nodes[w->prods[0]].name, n->name);
    if (op_is(n, "Conv")) {
        const char *gr = npuc__ng_attr(w->g, nd, "group");
        if (gr && strtol(gr, NULL, 10) > 1) return refuse(w, "'%s' is a grouped Conv (group %s)", n->name, gr);
    }
    const npuc_graph_weight *b = role_of(w->g, nd, "bias");
    int64_t bt = tindex(w->m, b);
    if (b && (bt < 0 || b->rank != 1 || (uint64_t)b->shape[0] != w->c->channels))
        return refuse(w, "the bias of '%s' is not one value per channel ('%s')", n->name, b->tensor);
    if (w->nprods == 0) {
        w->c->bias = bt;
    } else {
        if (w->c->nwith >= NPUC_CHAIN_MAX) return refuse(w, "too many producers share '%s'%s", n->name, "");
        w->c->with[w->c->nwith] = (size_t)t;
        w->c->with_bias[w->c->nwith++] = bt;
    }
    w->prods[w->nprods++] = nd;
    if (n->nout != 1) return refuse(w, "'%s' (%s) has several outputs", n->name, n->op);
    return push(w, n->out[0]) ? refuse(w, "out of memory%s%s", "", "") : 0;
}

/* Node nd reads value v of the channel space: 0 it is handled, 1 refused. */
static int visit(sw *w, size_t nd, size_t v) {
    const npuc__ng *g = w->g;
    const npuc__ng_node *n = &g->nodes[nd];
    npuc__chain *c = w->c;
    const char *bad = NULL;
    if (n->nin && n->in[0] != v && !op_is(n, "Add"))
        return refuse(w, "'%s' (%s) reads the channels as a second operand", n->name, n->op);
    if (weighted_op(n)) {
        size_t k;
        const npuc_graph_weight *kw = kernel_of(g, nd, &k);
        int64_t t = tindex(w->m, kw);
        if (!kw || t < 0 || kw->in_axis < 0 || kw->rank < 0)
            return refuse(w, "consumer '%s' (%s) has no kernel whose input axis the graph states", n->name, n->op);
        if ((uint64_t)kw->shape[kw->in_axis] != c->channels)
            return refuse(w, "consumer '%s' (%s) reads another channel count along its kernel's input axis (grouped?)",
                          n->name, n->op);
        for (size_t i = 0; i < c->ncons; i++)
            if (c->cons[i] == (size_t)t) return 0;
        for (size_t i = 0; i < w->nprods; i++)
            if (w->prods[i] == nd) return refuse(w, "'%s' reads its own channels (a cycle?)%s", n->name, "");
        if (c->ncons >= NPUC_CHAIN_MAX) return refuse(w, "too many consumers after '%s'%s", n->name, "");
        c->cons[c->ncons++] = (size_t)t;
        return 0;
    }
    if (op_is(n, "DepthwiseConv")) {
        size_t k;
        const npuc_graph_weight *kw = kernel_of(g, nd, &k);
        int64_t t = tindex(w->m, kw);
        if (!kw || t < 0 || kw->out_axis < 0 || (uint64_t)kw->shape[kw->out_axis] != c->channels)
            return refuse(w, "depthwise '%s' (%s) does not have one kernel per channel", n->name, n->op);
        const npuc_graph_weight *b = role_of(g, nd, "bias");
        int64_t bt = tindex(w->m, b);
        if (b && (bt < 0 || b->rank != 1)) return refuse(w, "the bias of '%s' is not a vector ('%s')", n->name, b->tensor);
        if (c->ndw >= NPUC_CHAIN_MAX) return refuse(w, "too many depthwise convolutions after '%s'%s", n->name, "");
        c->dw[c->ndw].weight = (size_t)t;
        c->dw[c->ndw].bias = bt;
        c->ndw++;
    } else if (op_is(n, "BatchNormalization")) {
        static const char *const R[4] = {"gamma", "beta", "mean", "var"};
        int64_t p[4];
        for (int r = 0; r < 4; r++) {
            const npuc_graph_weight *x = role_of(g, nd, R[r]);
            p[r] = tindex(w->m, x);
            if (p[r] < 0 || x->rank != 1 || (uint64_t)x->shape[0] != c->channels)
                return refuse(w, "BatchNormalization '%s': its %s is not one value per channel", n->name, R[r]);
        }
        if (n->nout != 1) return refuse(w, "BatchNormalization '%s' has training outputs%s", n->name, "");
        if (c->nbn >= NPUC_CHAIN_MAX) return refuse(w, "too many BatchNorms after '%s'%s", n->name, "");
        npuc__bn *bn = &c->bn[c->nbn++];
        memset(bn, 0, sizeof *bn);
        bn->gamma = p[0];
        bn->beta = p[1];
        bn->mean = p[2];
        bn->var = p[3];
        bn->count = -1;
        bn->channels = (int64_t)c->channels;
    } else if (passes(n)) {
        if (!scalar_weights(w, nd, &bad))
            return refuse(w, "'%s' reads '%s', which is not a scalar: a per-channel operand npuc does not shrink",
                          n->name, bad);
    } else if (op_is(n, "Add") && n->nin == 2 && n->nw == 0) {
        size_t other = n->in[0] == v ? n->in[1] : n->in[0];
        size_t pr = g->vals[other].prod;
        if (!w->seen[other]) {
            if (pr == NPUC_GRAPH_NONE || !weighted_op(&g->nodes[pr]))
                return refuse(w, "Add '%s': its other input '%s' is not made by a Conv, Gemm or MatMul", n->name,
                              g->vals[other].name);
            if (add_producer(w, pr)) return 1;
        }
    } else {
        return refuse(w, "%s '%s' reads the channels (the edit cannot follow it)", n->op, n->name);
    }
    if (n->nout != 1) return refuse(w, "'%s' (%s) has several outputs", n->name, n->op);
    return push(w, n->out[0]) ? refuse(w, "out of memory%s%s", "", "") : 0;
}

npuc_status npuc__chain_stated_of(npuc_ctx *ctx, npuc_model *m, size_t wt, npuc__chain *c) {
    memset(c, 0, sizeof *c);
    c->producer = wt;
    c->bias = -1;
    c->stated = 1;
    snprintf(c->how, sizeof c->how, "ONNX graph");
    const npuc__ng *g = graph_of(m);
    const npuc_tensor_info *t = npuc_model_tensor(m, wt);
    size_t nd = g ? npuc__ng_weight_node(g, t->name) : NPUC_GRAPH_NONE;
    if (nd == NPUC_GRAPH_NONE) {
        npuc__fmt(c->why, sizeof c->why, "no node of the file's graph reads it");
        return NPUC_OK;
    }
    const npuc_graph_weight *kw = kernel_of(g, nd, NULL);
    if (!kw || kw->out_axis < 0 || kw->rank < 0) {
        npuc__fmt(c->why, sizeof c->why, "'%.150s' has no kernel whose output axis the graph states", g->nodes[nd].name);
        return NPUC_OK;
    }
    c->channels = (uint64_t)kw->shape[kw->out_axis];
    const char *ref = npuc__ng_attr(g, nd, "prune_refused");
    if (ref) {
        npuc__fmt(c->why, sizeof c->why, "node '%.60s': %.130s", g->nodes[nd].name, ref);
        c->output = strstr(ref, "model output") != NULL;
        return NPUC_OK;
    }
    sw w = {.m = m, .g = g, .c = c};
    w.seen = calloc(g->nvals ? g->nvals : 1, 1);
    size_t *cons = malloc(64 * sizeof *cons);
    if (!w.seen || !cons) {
        free(w.seen);
        free(cons);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    int rc = add_producer(&w, nd);
    for (size_t q = 0; rc == 0 && q < w.nq; q++) {
        size_t v = w.queue[q];
        if (g->vals[v].is_output) {
            c->output = 1;
            rc = refuse(&w, "its channels reach the model output '%s'%s", g->vals[v].name, "");
            break;
        }
        size_t nc = npuc__ng_consumers(g, v, cons, 64);
        if (nc > 64) rc = refuse(&w, "more than %s nodes read '%s'", "64", g->vals[v].name);
        if (nc == 0) /* a subgraph's output, or a value nothing reads: where its channels go is not stated */
            rc = refuse(&w, "no node reads '%s' (a subgraph's output?): where its channels go is not stated%s",
                        g->vals[v].name, "");
        for (size_t k = 0; rc == 0 && k < nc; k++) rc = visit(&w, cons[k], v);
    }
    if (rc) {
        char why[sizeof c->why];
        snprintf(why, sizeof why, "%s", c->why);
        npuc__fmt(c->why, sizeof c->why, "node '%.60s': %.130s", g->nodes[nd].name, why);
    }
    c->ok = rc == 0 && c->ncons > 0;
    if (rc == 0 && c->ncons == 0) npuc__fmt(c->why, sizeof c->why, "node '%.60s': no consumer found", g->nodes[nd].name);
    free(w.seen);
    free(w.queue);
    free(cons);
    return NPUC_OK;
}

/* ------------------------------------------------------------ the resized graph */

typedef struct seen_change {
    size_t t;
    int axis;
} seen_change;

npuc_status npuc__chain_stated_resize(npuc_ctx *ctx, npuc_model *m, const npuc__chain *chains, size_t nchains,
                                      const uint64_t *kept, const npuc_tensor_info *newt, npuc__ng **out) {
    const char *path = npuc_model_path(m);
    *out = NULL;
    npuc__ng *g = npuc__ng_clone(graph_of(m));
    const size_t n = npuc_model_count(m);
    unsigned char *done = calloc(nchains ? nchains : 1, 1);
    const char **vals = malloc((nchains * (NPUC_CHAIN_MAX + 1) + 1) * sizeof *vals);
    seen_change *sc = NULL;
    size_t nsc = 0, capsc = 0;
    npuc_status st = NPUC_OK;
    if (!g || !done || !vals) st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    for (size_t a = 0; st == NPUC_OK && a < nchains; a++) {
        if (done[a] || !kept[a]) continue;
        /* every chain of this extent: one edit (an Add's branches are in one chain) */
        size_t nv = 0;
        const char *first = NULL;
        for (size_t b = a; b < nchains; b++) {
            if (done[b] || kept[b] != kept[a]) continue;
            done[b] = 1;
            const npuc__chain *c = &chains[b];
            for (size_t k = 0; k <= c->nwith; k++) {
                size_t t = k ? c->with[k - 1] : c->producer;
                size_t nd = npuc__ng_weight_node(g, npuc_model_tensor(m, t)->name);
                if (nd == NPUC_GRAPH_NONE || g->nodes[nd].nout != 1) {
                    st = npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s': structured pruning: no node of the "
                                   "file's graph makes its channels", path, npuc_model_tensor(m, t)->name);
                    break;
                }
                if (!first) first = g->nodes[nd].name;
                vals[nv++] = g->vals[g->nodes[nd].out[0]].name;
            }
            if (st != NPUC_OK) break;
        }
        if (st != NPUC_OK) break;
        npuc__ng_change *chg = NULL;
        size_t nchg = 0;
        st = npuc__ng_resize(ctx, &g, vals, nv, (int64_t)kept[a], &chg, &nchg);
        if (st != NPUC_OK) {
            char why[600];
            snprintf(why, sizeof why, "%s", npuc_ctx_errmsg(ctx));
            st = npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: structured pruning of '%s' as a graph edit: %s", path,
                           first ? first : "?", why);
            break;
        }
        for (size_t k = 0; st == NPUC_OK && k < nchg; k++) {
            const npuc_graph_weight *w = &g->nodes[chg[k].node].w[chg[k].weight];
            size_t t;
            if (npuc_model_find(m, w->tensor, &t) != 0 || t >= n || chg[k].axis >= newt[t].rank ||
                newt[t].shape[chg[k].axis] != chg[k].extent) {
                st = npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: node '%s': the graph edit gives '%s' %lld along axis "
                               "%d, the planned weights %lld: refused (the graph would disagree with its weights)",
                               path, g->nodes[chg[k].node].name, w->tensor, (long long)chg[k].extent, chg[k].axis,
                               t < n && chg[k].axis < newt[t].rank ? (long long)newt[t].shape[chg[k].axis] : -1LL);
                break;
            }
            if (nsc == capsc) {
                size_t nc = capsc ? 2 * capsc : 16;
                seen_change *q = realloc(sc, nc * sizeof *q);
                if (!q) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); break; }
                sc = q;
                capsc = nc;
            }
            sc[nsc++] = (seen_change){t, chg[k].axis};
        }
        free(chg);
    }
    /* every planned change is one the edit made */
    for (size_t t = 0; st == NPUC_OK && t < n; t++) {
        const npuc_tensor_info *o = npuc_model_tensor(m, t);
        for (int a = 0; a < o->rank && st == NPUC_OK; a++) {
            if (o->shape[a] == newt[t].shape[a]) continue;
            int found = 0;
            for (size_t k = 0; k < nsc && !found; k++) found = sc[k].t == t && sc[k].axis == a;
            if (!found)
                st = npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s': structured pruning plans %lld along axis "
                               "%d, but the graph edit does not resize it: refused (the graph would disagree with its "
                               "weights)", path, o->name, (long long)newt[t].shape[a], a);
        }
    }
    free(done);
    free(vals);
    free(sc);
    if (st != NPUC_OK) {
        npuc__ng_free(g);
        return st;
    }
    *out = g;
    return NPUC_OK;
}
