/*
 * graph_build.c - the graph object: opening, freeing, storage order, and
 * the channel facts of a weight tensor that every view reads.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "graph/graph_net.h"

const char *npuc__evidence_name(npuc__evidence e) {
    static const char *const N[] = {"explicit", "config", "name", "layer-order", "order", "graph"};
    return (unsigned)e < sizeof N / sizeof N[0] ? N[e] : "?";
}

void npuc__graph_fmt(char *buf, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

/* Storage order says nothing about the graph when it is just name order (a
 * file written from a sorted dict: safetensors' own save_file, the shared
 * Paddle exports).  Fewer than three tensors are always in some order. */
static int is_alphabetical(const npuc_model *m, size_t n) {
    if (n < 3) return 0;
    for (size_t i = 1; i < n; i++)
        if (strcmp(npuc_model_tensor(m, i - 1)->name, npuc_model_tensor(m, i)->name) > 0) return 0;
    return 1;
}

npuc_status npuc__graph_open(npuc_ctx *ctx, npuc_model *m, npuc__graph **out) {
    npuc__graph *g = calloc(1, sizeof *g);
    *out = NULL;
    if (!g) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    g->m = m;
    g->path = npuc_model_path(m);
    g->n = npuc_model_count(m);
    g->alphabetical = is_alphabetical(m, g->n);
    *out = g;
    return NPUC_OK;
}

npuc_status npuc__graph_read_stated(npuc_ctx *ctx, npuc__graph *g) {
    npuc_status st = npuc_model_read_graph(ctx, g->m);
    if (st == NPUC_ERR_NOMEM) return st;
    if (st != NPUC_OK) npuc_ctx_clear(ctx); /* a graph the reader refuses states nothing */
    return NPUC_OK;
}

void npuc__graph_free(npuc__graph *g) {
    if (!g) return;
    for (size_t i = 0; i < g->nmods; i++) free(g->mods[i].key);
    free(g->mods);
    free(g->mod_of);
    for (size_t i = 0; i < g->nkl; i++) {
        free(g->kl[i].name);
        free(g->kl[i].cls);
        free(g->kl[i].in);
        free(g->kl[i].out);
    }
    free(g->kl);
    for (size_t i = 0; i < g->nxe; i++) {
        free(g->xe[i].cons);
        free(g->xe[i].text);
    }
    free(g->xe);
    free(g->xb);
    for (size_t k = 0; k < g->nbn; k++) free(g->bns[k].name);
    free(g->bns);
    free(g->bn_of);
    free(g->sorted);
    npuc__kbn_edges_free(g);
    free(g);
}

/* ------------------------------------------------------------ tensors */

int npuc__out_axis(const npuc_tensor_info *t) { return npuc_layout_out_axis(t->layout, t->rank); }

int npuc__in_axis(const npuc_tensor_info *t) {
    if (npuc__out_axis(t) < 0) return -1;
    switch (t->layout) {
    case NPUC_LAYOUT_OI: case NPUC_LAYOUT_OIHW: return 1;
    case NPUC_LAYOUT_IO: case NPUC_LAYOUT_IOHW: return 0;
    case NPUC_LAYOUT_HWIO: case NPUC_LAYOUT_HWIM: return t->rank - 2;
    case NPUC_LAYOUT_DOI: return t->rank - 1;
    default: return -1;
    }
}

uint64_t npuc__out_channels(const npuc_tensor_info *t) {
    uint64_t o, c, i;
    if (npuc_layout_view(t, &o, &c, &i) != NPUC_OK) return 0;
    return c;
}

uint64_t npuc__in_channels(const npuc_tensor_info *t) {
    int a = npuc__in_axis(t);
    return a < 0 ? 0 : (uint64_t)t->shape[a];
}

/* The `group` (ONNX) or `groups` (Keras) of the node holding weight t in
 * m's graph, when the graph has been read and states one; else 0. */
static long stated_groups(const npuc_model *m, const npuc_tensor_info *t) {
    const npuc__ng *ng = npuc_model_graph(m);
    if (!ng) return 0;
    size_t nd = npuc__ng_weight_node(ng, t->name);
    if (nd == NPUC_GRAPH_NONE) return 0;
    const char *v = npuc__ng_attr(ng, nd, "group");
    if (!v) v = npuc__ng_attr(ng, nd, "groups");
    if (!v) return 0;
    char *end;
    long g = strtol(v, &end, 10);
    return *end == '\0' && g >= 1 && g <= (1L << 20) ? g : 0;
}

uint64_t npuc__graph_channels(const npuc_model *m, size_t i, npuc__chan *c) {
    const npuc_tensor_info *t = npuc_model_tensor(m, i);
    memset(c, 0, sizeof *c);
    c->axis = npuc__out_axis(t);
    c->channels = npuc__out_channels(t);
    c->groups = 1;
    c->depthwise = npuc__is_dw(t, 0);
    c->confidence = t->confidence;
    c->evidence = "the layout's output axis";
    if (t->layout != NPUC_LAYOUT_IOHW || c->channels == 0) return c->channels;
    long g = stated_groups(m, t);
    if (g > 1 && (uint64_t)t->shape[0] % (uint64_t)g == 0 && c->channels <= UINT64_MAX / (uint64_t)g) {
        c->groups = (int)g;
        c->channels *= (uint64_t)g;
        c->stated = 1;
        c->confidence = NPUC_CONF_CERTAIN;
        c->evidence = "a transposed conv with the groups its node states";
    } else if (!g) {
        c->evidence = "a transposed conv whose file states no groups: 1 by convention";
    }
    return c->channels;
}

int npuc__is_dw(const npuc_tensor_info *t, uint64_t channels) {
    const int r = t->rank;
    if (t->layout == NPUC_LAYOUT_HWIM)
        return r >= 3 && t->shape[r - 1] == 1 && (!channels || (uint64_t)t->shape[r - 2] == channels);
    if (t->layout == NPUC_LAYOUT_OIHW && t->shape[1] == 1) {
        if (channels) return (uint64_t)t->shape[0] == channels && channels > 1;
        return t->role == NPUC_ROLE_DWCONV;
    }
    return 0;
}
