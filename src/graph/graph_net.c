/*
 * graph_net.c - the network graph object: nodes, values, weights and
 * attributes, lookups, a deep copy for all-or-nothing edits, and the
 * validity check every edit ends with.
 */
#include <stdlib.h>
#include <string.h>

#include "strmap.h"
#include "graph/graph_net.h"

/* ------------------------------------------------------------ memory */

static void ev_free(npuc__ng_ev *e) { free(e->why); }

static void node_free(npuc__ng_node *n) {
    free(n->name); free(n->op); free(n->source_op);
    free(n->in); free(n->out);
    for (size_t k = 0; k < n->nw; k++) { free((char *)n->w[k].tensor); free((char *)n->w[k].role); }
    free(n->w);
    for (size_t k = 0; k < n->nattr; k++) { free(n->attr[k].key); free(n->attr[k].val); }
    free(n->attr);
    ev_free(&n->ev);
}

npuc__ng *npuc__ng_new(void) {
    npuc__ng *g = calloc(1, sizeof(npuc__ng));
    if (g) npuc__ng_reindex(g);
    return g;
}

/* ------------------------------------------------------------ name indexes */

uint64_t npuc__ng_hash(const char *s) { return npuc__fnv1a64(s); }

static const char *node_name_at(const npuc__ng *g, size_t i) { return g->nodes[i].name; }
static const char *value_name_at(const npuc__ng *g, size_t i) { return g->vals[i].name; }

static void ix_put(size_t *tab, size_t cap, const char *name, size_t idx) {
    size_t j = npuc__ng_hash(name) & (cap - 1);
    while (tab[j]) j = (j + 1) & (cap - 1);
    tab[j] = idx + 1;
}

/* Builds one index for n names with room to grow; frees it on failure. */
static void ix_build(const npuc__ng *g, size_t **tab, size_t *cap, size_t n,
                     const char *(*name_at)(const npuc__ng *, size_t)) {
    free(*tab);
    size_t c = 64;
    while (c < 2 * n + 2) c *= 2;
    *tab = calloc(c, sizeof **tab);
    *cap = *tab ? c : 0;
    for (size_t i = 0; *tab && i < n; i++) ix_put(*tab, c, name_at(g, i), i);
}

void npuc__ng_reindex(npuc__ng *g) {
    ix_build(g, &g->nix, &g->nixcap, g->nnodes, node_name_at);
    ix_build(g, &g->vix, &g->vixcap, g->nvals, value_name_at);
}

/* Adds the newest entry (index n - 1) to an index, growing it at half load. */
static void ix_add(npuc__ng *g, size_t **tab, size_t *cap, size_t n, const char *(*name_at)(const npuc__ng *, size_t)) {
    if (!*tab) return; /* linear search from now on */
    if (2 * n + 2 > *cap) ix_build(g, tab, cap, n, name_at);
    else ix_put(*tab, *cap, name_at(g, n - 1), n - 1);
}

static size_t ix_find(const npuc__ng *g, const size_t *tab, size_t cap, size_t n, const char *name,
                      const char *(*name_at)(const npuc__ng *, size_t)) {
    if (!name) return NPUC_GRAPH_NONE;
    if (!tab) {
        for (size_t i = 0; i < n; i++)
            if (strcmp(name_at(g, i), name) == 0) return i;
        return NPUC_GRAPH_NONE;
    }
    for (size_t j = npuc__ng_hash(name) & (cap - 1);; j = (j + 1) & (cap - 1)) {
        if (!tab[j]) return NPUC_GRAPH_NONE;
        if (tab[j] - 1 < n && strcmp(name_at(g, tab[j] - 1), name) == 0) return tab[j] - 1;
    }
}

void npuc__ng_free(npuc__ng *g) {
    if (!g) return;
    for (size_t i = 0; i < g->nnodes; i++) node_free(&g->nodes[i]);
    for (size_t i = 0; i < g->nvals; i++) { free(g->vals[i].name); ev_free(&g->vals[i].ev); }
    free(g->nodes);
    free(g->vals);
    free(g->nix);
    free(g->vix);
    free(g);
}

static int dup_ev(npuc__ng_ev *d, const npuc__ng_ev *s) {
    *d = *s;
    d->why = npuc__strdup(s->why);
    return s->why && !d->why ? -1 : 0;
}

static size_t *dup_idx(const size_t *a, size_t n) {
    size_t *r = malloc((n ? n : 1) * sizeof *r);
    if (r && n) memcpy(r, a, n * sizeof *r);
    return r;
}

static int node_copy(npuc__ng_node *d, const npuc__ng_node *s) {
    memset(d, 0, sizeof *d);
    d->name = npuc__strdup(s->name);
    d->op = npuc__strdup(s->op);
    d->source_op = npuc__strdup(s->source_op);
    d->in = dup_idx(s->in, s->nin);
    d->out = dup_idx(s->out, s->nout);
    d->nin = s->nin;
    d->nout = s->nout;
    d->scope = s->scope;
    d->w = calloc(s->nw ? s->nw : 1, sizeof *d->w);
    d->attr = calloc(s->nattr ? s->nattr : 1, sizeof *d->attr);
    if (!d->name || !d->op || (s->source_op && !d->source_op) || !d->in || !d->out || !d->w || !d->attr ||
        dup_ev(&d->ev, &s->ev))
        return -1;
    for (size_t k = 0; k < s->nw; k++) {
        d->w[k] = s->w[k];
        d->w[k].tensor = npuc__strdup(s->w[k].tensor);
        d->w[k].role = npuc__strdup(s->w[k].role);
        d->nw = k + 1;
        if (!d->w[k].tensor || !d->w[k].role) return -1;
    }
    for (size_t k = 0; k < s->nattr; k++) {
        d->attr[k].key = npuc__strdup(s->attr[k].key);
        d->attr[k].val = npuc__strdup(s->attr[k].val);
        d->nattr = k + 1;
        if (!d->attr[k].key || !d->attr[k].val) return -1;
    }
    return 0;
}

npuc__ng *npuc__ng_clone(const npuc__ng *g) {
    npuc__ng *c = npuc__ng_new();
    if (!c) return NULL;
    c->channels_last = g->channels_last;
    c->nodes = calloc(g->nnodes ? g->nnodes : 1, sizeof *c->nodes);
    c->vals = calloc(g->nvals ? g->nvals : 1, sizeof *c->vals);
    if (!c->nodes || !c->vals) goto fail;
    c->capnodes = g->nnodes ? g->nnodes : 1;
    c->capvals = g->nvals ? g->nvals : 1;
    for (size_t i = 0; i < g->nnodes; i++) {
        c->nnodes = i + 1;
        if (node_copy(&c->nodes[i], &g->nodes[i])) goto fail;
    }
    for (size_t i = 0; i < g->nvals; i++) {
        c->vals[i] = g->vals[i];
        c->vals[i].name = npuc__strdup(g->vals[i].name);
        c->vals[i].ev.why = NULL;
        c->nvals = i + 1;
        if (!c->vals[i].name || dup_ev(&c->vals[i].ev, &g->vals[i].ev)) goto fail;
    }
    npuc__ng_reindex(c);
    return c;
fail:
    npuc__ng_free(c);
    return NULL;
}

static npuc_status nomem(npuc_ctx *ctx) { return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); }

/* ------------------------------------------------------------ lookups */

size_t npuc__ng_find_node(const npuc__ng *g, const char *name) {
    return ix_find(g, g->nix, g->nixcap, g->nnodes, name, node_name_at);
}

size_t npuc__ng_find_value(const npuc__ng *g, const char *name) {
    return ix_find(g, g->vix, g->vixcap, g->nvals, name, value_name_at);
}

npuc_graph_weight *npuc__ng_weight(npuc__ng *g, size_t node, const char *role) {
    if (node >= g->nnodes) return NULL;
    npuc__ng_node *n = &g->nodes[node];
    for (size_t k = 0; k < n->nw; k++)
        if (strcmp(n->w[k].role, role) == 0) return &n->w[k];
    return NULL;
}

size_t npuc__ng_consumers(const npuc__ng *g, size_t v, size_t *out, size_t max) {
    size_t c = 0;
    for (size_t i = 0; i < g->nnodes; i++) {
        const npuc__ng_node *n = &g->nodes[i];
        for (size_t k = 0; k < n->nin; k++)
            if (n->in[k] == v) {
                if (c < max) out[c] = i;
                c++;
                break;
            }
    }
    return c;
}

const char *npuc__ng_attr(const npuc__ng *g, size_t node, const char *key) {
    if (node >= g->nnodes) return NULL;
    const npuc__ng_node *n = &g->nodes[node];
    for (size_t k = 0; k < n->nattr; k++)
        if (strcmp(n->attr[k].key, key) == 0) return n->attr[k].val;
    return NULL;
}

/* ------------------------------------------------------------ building */

static int set_ev(npuc__ng_ev *e, npuc_graph_evidence kind, npuc_confidence conf, const char *why) {
    e->kind = kind;
    e->conf = conf;
    e->why = npuc__strdup(why ? why : "");
    return e->why ? 0 : -1;
}

npuc_status npuc__ng_add_value(npuc_ctx *ctx, npuc__ng *g, const char *name, int rank, const int64_t *shape,
                               npuc_graph_evidence ev, npuc_confidence conf, const char *why, size_t *idx) {
    if (!name || !*name) return npuc_fail(ctx, NPUC_ERR_ARG, "graph: a value needs a name");
    if (rank > NPUC_MAX_RANK) return npuc_fail(ctx, NPUC_ERR_ARG, "graph: value '%s' has rank %d", name, rank);
    if (npuc__ng_find_value(g, name) != NPUC_GRAPH_NONE)
        return npuc_fail(ctx, NPUC_ERR_ARG, "graph: value '%s' defined twice", name);
    if (g->nvals >= NPUC_NG_MAX_EDGES)
        return npuc_fail(ctx, NPUC_ERR_ARG, "graph: more than %zu values", NPUC_NG_MAX_EDGES);
    int64_t sh[NPUC_MAX_RANK]; /* shape may point into g->vals, which grow moves */
    for (int a = 0; a < rank; a++) sh[a] = shape ? shape[a] : -1;
    if (npuc__grow((void **)&g->vals, &g->capvals, g->nvals + 1, sizeof *g->vals)) return nomem(ctx);
    npuc__ng_value *v = &g->vals[g->nvals];
    memset(v, 0, sizeof *v);
    v->name = npuc__strdup(name);
    v->rank = rank < 0 ? -1 : rank;
    for (int a = 0; a < rank; a++) v->shape[a] = sh[a];
    v->prod = NPUC_GRAPH_NONE;
    if (!v->name || set_ev(&v->ev, ev, conf, why)) {
        free(v->name);
        free(v->ev.why);
        return nomem(ctx);
    }
    if (idx) *idx = g->nvals;
    g->nvals++;
    ix_add(g, &g->vix, &g->vixcap, g->nvals, value_name_at);
    return NPUC_OK;
}

npuc_status npuc__ng_add_node(npuc_ctx *ctx, npuc__ng *g, const char *name, const char *op, const char *source_op,
                              const size_t *in, size_t nin, const size_t *out, size_t nout, npuc_graph_evidence ev,
                              npuc_confidence conf, const char *why, size_t *idx) {
    if (!name || !*name || !op) return npuc_fail(ctx, NPUC_ERR_ARG, "graph: a node needs a name and an op");
    if (npuc__ng_find_node(g, name) != NPUC_GRAPH_NONE)
        return npuc_fail(ctx, NPUC_ERR_ARG, "graph: node '%s' defined twice", name);
    if (g->nnodes >= NPUC_NG_MAX_NODES)
        return npuc_fail(ctx, NPUC_ERR_ARG, "graph: more than %zu nodes", NPUC_NG_MAX_NODES);
    for (size_t k = 0; k < nin; k++)
        if (in[k] >= g->nvals) return npuc_fail(ctx, NPUC_ERR_ARG, "graph: node '%s' reads no value", name);
    for (size_t k = 0; k < nout; k++) {
        if (out[k] >= g->nvals) return npuc_fail(ctx, NPUC_ERR_ARG, "graph: node '%s' makes no value", name);
        if (g->vals[out[k]].prod != NPUC_GRAPH_NONE || g->vals[out[k]].is_input)
            return npuc_fail(ctx, NPUC_ERR_ARG, "graph: value '%s' is made by '%s' and '%s'", g->vals[out[k]].name,
                             g->vals[out[k]].is_input ? "the model input" : g->nodes[g->vals[out[k]].prod].name,
                             name);
        for (size_t j = 0; j < k; j++)
            if (out[j] == out[k])
                return npuc_fail(ctx, NPUC_ERR_ARG, "graph: node '%s' makes '%s' twice", name, g->vals[out[k]].name);
    }
    if (npuc__grow((void **)&g->nodes, &g->capnodes, g->nnodes + 1, sizeof *g->nodes)) return nomem(ctx);
    npuc__ng_node *n = &g->nodes[g->nnodes];
    memset(n, 0, sizeof *n);
    n->name = npuc__strdup(name);
    n->op = npuc__strdup(op);
    n->source_op = npuc__strdup(source_op);
    n->in = dup_idx(in, nin);
    n->out = dup_idx(out, nout);
    n->nin = nin;
    n->nout = nout;
    if (!n->name || !n->op || (source_op && !n->source_op) || !n->in || !n->out || set_ev(&n->ev, ev, conf, why)) {
        node_free(n);
        memset(n, 0, sizeof *n);
        return nomem(ctx);
    }
    for (size_t k = 0; k < nout; k++) g->vals[out[k]].prod = g->nnodes;
    if (idx) *idx = g->nnodes;
    g->nnodes++;
    ix_add(g, &g->nix, &g->nixcap, g->nnodes, node_name_at);
    return NPUC_OK;
}

npuc_status npuc__ng_add_weight(npuc_ctx *ctx, npuc__ng *g, size_t node, const char *tensor, const char *role,
                                int rank, const int64_t *shape, int out_axis, int in_axis) {
    if (node >= g->nnodes || !tensor || !role) return npuc_fail(ctx, NPUC_ERR_ARG, "graph: weight of no node");
    npuc__ng_node *n = &g->nodes[node];
    if (rank > NPUC_MAX_RANK || out_axis >= (rank < 0 ? NPUC_MAX_RANK : rank) ||
        in_axis >= (rank < 0 ? NPUC_MAX_RANK : rank))
        return npuc_fail(ctx, NPUC_ERR_ARG, "graph: node '%s': weight '%s' has axes outside its rank %d", n->name,
                         tensor, rank);
    int64_t sh[NPUC_MAX_RANK]; /* shape may point into n->w, which realloc moves */
    for (int a = 0; a < rank; a++) sh[a] = shape[a];
    npuc_graph_weight *w = realloc(n->w, (n->nw + 1) * sizeof *w);
    if (!w) return nomem(ctx);
    n->w = w;
    npuc_graph_weight *x = &w[n->nw];
    memset(x, 0, sizeof *x);
    x->tensor = npuc__strdup(tensor);
    x->role = npuc__strdup(role);
    if (!x->tensor || !x->role) {
        free((char *)x->tensor);
        free((char *)x->role);
        return nomem(ctx);
    }
    x->rank = rank < 0 ? -1 : rank;
    for (int a = 0; a < rank; a++) x->shape[a] = sh[a];
    x->out_axis = out_axis;
    x->in_axis = in_axis;
    n->nw++;
    return NPUC_OK;
}

npuc_status npuc__ng_set_attr(npuc_ctx *ctx, npuc__ng *g, size_t node, const char *key, const char *val) {
    if (node >= g->nnodes || !key || !val) return npuc_fail(ctx, NPUC_ERR_ARG, "graph: attribute of no node");
    npuc__ng_node *n = &g->nodes[node];
    char *v = npuc__strdup(val);
    if (!v) return nomem(ctx);
    for (size_t k = 0; k < n->nattr; k++)
        if (strcmp(n->attr[k].key, key) == 0) {
            free(n->attr[k].val);
            n->attr[k].val = v;
            return NPUC_OK;
        }
    npuc__ng_kv *a = realloc(n->attr, (n->nattr + 1) * sizeof *a);
    char *k2 = npuc__strdup(key);
    if (!a || !k2) {
        if (a) n->attr = a;
        free(v);
        free(k2);
        return nomem(ctx);
    }
    n->attr = a;
    a[n->nattr].key = k2;
    a[n->nattr].val = v;
    n->nattr++;
    return NPUC_OK;
}

/* ------------------------------------------------------------ the check */

static npuc_status check_structure(npuc_ctx *ctx, const npuc__ng *g) {
    for (size_t i = 0; i < g->nnodes; i++) {
        const npuc__ng_node *n = &g->nodes[i];
        if (npuc__ng_find_node(g, n->name) != i)
            return npuc_fail(ctx, NPUC_ERR_VALUE, "graph: two nodes named '%s'", n->name);
        for (size_t k = 0; k < n->nin; k++)
            if (n->in[k] >= g->nvals)
                return npuc_fail(ctx, NPUC_ERR_VALUE, "graph: node '%s' input %zu names no value", n->name, k);
        for (size_t k = 0; k < n->nout; k++)
            if (n->out[k] >= g->nvals || g->vals[n->out[k]].prod != i)
                return npuc_fail(ctx, NPUC_ERR_VALUE, "graph: node '%s' output %zu is not recorded as its own",
                                 n->name, k);
    }
    for (size_t v = 0; v < g->nvals; v++) {
        const npuc__ng_value *x = &g->vals[v];
        if (npuc__ng_find_value(g, x->name) != v)
            return npuc_fail(ctx, NPUC_ERR_VALUE, "graph: two values named '%s'", x->name);
        if (x->prod == NPUC_GRAPH_NONE) continue;
        if (x->prod >= g->nnodes)
            return npuc_fail(ctx, NPUC_ERR_VALUE, "graph: value '%s' has a producer that does not exist", x->name);
        const npuc__ng_node *p = &g->nodes[x->prod];
        size_t k = 0;
        while (k < p->nout && p->out[k] != v) k++;
        if (k == p->nout)
            return npuc_fail(ctx, NPUC_ERR_VALUE, "graph: value '%s' names '%s' as producer, which does not make it",
                             x->name, p->name);
    }
    return NPUC_OK;
}

/* Kahn's order over the nodes: a node is ready when every input is a model
 * input, a constant or made by a finished node. */
static npuc_status check_acyclic(npuc_ctx *ctx, const npuc__ng *g) {
    size_t nn = g->nnodes;
    if (!nn) return NPUC_OK;
    size_t *pending = calloc(nn, sizeof *pending), *queue = malloc(nn * sizeof *queue);
    size_t *cstart = calloc(g->nvals + 1, sizeof *cstart), *cons = NULL;
    npuc_status st = NPUC_OK;
    size_t nedges = 0;
    if (!pending || !queue || !cstart) { st = nomem(ctx); goto done; }
    for (size_t i = 0; i < nn; i++) {
        for (size_t k = 0; k < g->nodes[i].nin; k++) {
            size_t v = g->nodes[i].in[k];
            if (g->vals[v].prod != NPUC_GRAPH_NONE) pending[i]++;
            cstart[v + 1]++;
            nedges++;
        }
    }
    for (size_t v = 0; v < g->nvals; v++) cstart[v + 1] += cstart[v];
    cons = malloc((nedges ? nedges : 1) * sizeof *cons);
    if (!cons) { st = nomem(ctx); goto done; }
    {
        size_t *fill = calloc(g->nvals + 1, sizeof *fill);
        if (!fill) { st = nomem(ctx); goto done; }
        for (size_t i = 0; i < nn; i++)
            for (size_t k = 0; k < g->nodes[i].nin; k++) {
                size_t v = g->nodes[i].in[k];
                cons[cstart[v] + fill[v]++] = i;
            }
        free(fill);
    }
    size_t head = 0, tail = 0;
    for (size_t i = 0; i < nn; i++)
        if (!pending[i]) queue[tail++] = i;
    while (head < tail) {
        const npuc__ng_node *n = &g->nodes[queue[head++]];
        for (size_t k = 0; k < n->nout; k++) {
            size_t v = n->out[k];
            for (size_t c = cstart[v]; c < cstart[v + 1]; c++)
                if (--pending[cons[c]] == 0) queue[tail++] = cons[c];
        }
    }
    if (tail < nn) {
        size_t i = 0;
        while (!pending[i]) i++;
        st = npuc_fail(ctx, NPUC_ERR_VALUE, "graph: node '%s' is on a cycle (it depends on its own output)",
                       g->nodes[i].name);
    }
done:
    free(pending); free(queue); free(cstart); free(cons);
    return st;
}

static npuc_status extent_mismatch(npuc_ctx *ctx, const npuc__ng_node *n, const char *what, const char *vname,
                                   int64_t want, int64_t have) {
    return npuc_fail(ctx, NPUC_ERR_VALUE, "graph: node '%s' (%s): %s has %lld channels, '%s' has %lld", n->name,
                     n->op, what, (long long)want, vname, (long long)have);
}

/* The channel extent of value v, -1 when not known. */
static int64_t value_channels(const npuc__ng *g, size_t v) {
    const npuc__ng_value *x = &g->vals[v];
    int ax = npuc__ng_channel_axis(g, x->rank);
    return ax < 0 ? -1 : x->shape[ax];
}

static npuc_status check_node_extents(npuc_ctx *ctx, const npuc__ng *g, size_t i) {
    const npuc__ng_node *n = &g->nodes[i];
    npuc__ng_kind kind = npuc__ng_op_kind(n->op);
    int64_t cin = n->nin ? value_channels(g, n->in[0]) : -1;
    int64_t cout = n->nout ? value_channels(g, n->out[0]) : -1;
    const char *vin = n->nin ? g->vals[n->in[0]].name : "";
    const char *vout = n->nout ? g->vals[n->out[0]].name : "";
    for (size_t k = 0; k < n->nw; k++) {
        const npuc_graph_weight *w = &n->w[k];
        if (w->rank < 0) continue;
        char what[200];
        if (w->in_axis >= 0 && cin >= 0 && w->shape[w->in_axis] != cin) {
            snprintf(what, sizeof what, "weight '%s' axis %d", w->tensor, w->in_axis);
            return extent_mismatch(ctx, n, what, vin, w->shape[w->in_axis], cin);
        }
        if (w->out_axis >= 0 && cout >= 0 && w->shape[w->out_axis] != cout) {
            snprintf(what, sizeof what, "weight '%s' axis %d", w->tensor, w->out_axis);
            return extent_mismatch(ctx, n, what, vout, w->shape[w->out_axis], cout);
        }
    }
    if ((kind == NPUC_NG_CHANNELWISE || kind == NPUC_NG_DEPTHWISE || kind == NPUC_NG_ELEMENTWISE ||
         kind == NPUC_NG_SPATIAL || kind == NPUC_NG_GLOBAL_POOL) &&
        cin >= 0 && cout >= 0 && cin != cout)
        return extent_mismatch(ctx, n, "its output", vin, cout, cin);
    if (kind == NPUC_NG_MERGE)
        for (size_t k = 1; k < n->nin; k++) {
            int64_t c = value_channels(g, n->in[k]);
            if (c >= 0 && cin >= 0 && c != cin)
                return extent_mismatch(ctx, n, g->vals[n->in[k]].name, vin, c, cin);
        }
    return NPUC_OK;
}

npuc_status npuc__ng_check(npuc_ctx *ctx, const npuc__ng *g) {
    npuc_status st = check_structure(ctx, g);
    if (st == NPUC_OK) st = check_acyclic(ctx, g);
    for (size_t i = 0; st == NPUC_OK && i < g->nnodes; i++) st = check_node_extents(ctx, g, i);
    return st;
}
