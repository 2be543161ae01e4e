/*
 * graph_config_check.c - does a Keras configuration still describe the
 * weights beside it?  A structured prune that shrinks a conv's kernel but
 * leaves its layer's "filters" at the old count writes a file Keras cannot
 * load; this check, run by `npuc validate --deep`, names such a layer.
 *
 * For every node read from the configuration, the counts its layer states
 * are compared with the kernel the node consumes:
 *   Conv*D, DepthwiseConv (filters; depth_multiplier)  kernel's last axis
 *   Conv*DTranspose (filters)                           kernel axis rank-2
 *   SeparableConv*D (filters)                           pointwise kernel's last axis
 *   Dense (units)                                       kernel's last axis
 * and the graph's own check runs (a kernel's input axis against a value of
 * known shape, e.g. the model input's channels).  An npuc artifact is left
 * to `npuc decompress` first: its stored tensors are encodings, not the
 * shapes the configuration describes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "graph/graph_net.h"

static const npuc_graph_weight *find_role(const npuc__ng_node *n, const char *role) {
    for (size_t k = 0; k < n->nw; k++)
        if (strcmp(n->w[k].role, role) == 0) return &n->w[k];
    return NULL;
}

static void fmt_shape(const npuc_graph_weight *w, char *buf, size_t n) {
    size_t p = 0;
    p += (size_t)snprintf(buf + p, n - p, "[");
    for (int a = 0; a < w->rank && p < n; a++)
        p += (size_t)snprintf(buf + p, n - p, "%s%lld", a ? "," : "", (long long)w->shape[a]);
    if (p < n) snprintf(buf + p, n - p, "]");
}

/* Compares the integer attribute key of node n with axis `axis` (from the
 * end when negative) of its weight `role`. */
static npuc_status check_count(npuc_ctx *ctx, const char *path, const npuc__ng_node *n, const char *key,
                               const char *role, int axis) {
    const char *v = NULL;
    for (size_t k = 0; k < n->nattr; k++)
        if (strcmp(n->attr[k].key, key) == 0) v = n->attr[k].val;
    const npuc_graph_weight *w = find_role(n, role);
    if (!v || !w || w->rank < 1) return NPUC_OK;
    char *end;
    long long want = strtoll(v, &end, 10);
    if (*end) return NPUC_OK; /* not an integer: nothing stated */
    int ax = axis < 0 ? w->rank + axis : axis;
    if (ax < 0 || ax >= w->rank) return NPUC_OK;
    if (w->shape[ax] == want) return NPUC_OK;
    char sh[128];
    fmt_shape(w, sh, sizeof sh);
    return npuc_fail(ctx, NPUC_ERR_VALUE,
                     "%s: model_config: layer '%s' (%s) states %s %lld, but its %s '%s' %s has %lld on axis %d",
                     path, n->name, n->source_op ? n->source_op : n->op, key, want, role, w->tensor, sh,
                     (long long)w->shape[ax], ax);
}

npuc_status npuc_model_check_graph(npuc_ctx *ctx, npuc_model *m) {
    if (!npuc_model_meta_get(m, "model_config") || npuc_model_meta_get(m, "npuc")) return NPUC_OK;
    npuc_status st = npuc_model_read_graph(ctx, m);
    if (st != NPUC_OK) return st;
    const npuc__ng *g = npuc_model_graph(m);
    const char *path = npuc_model_path(m);
    for (size_t i = 0; st == NPUC_OK && i < g->nnodes; i++) {
        const npuc__ng_node *n = &g->nodes[i];
        if (n->ev.kind != NPUC_GRAPH_EV_CONFIG) continue;
        if (strcmp(n->op, "Conv") == 0) st = check_count(ctx, path, n, "filters", "kernel", -1);
        else if (strcmp(n->op, "ConvTranspose") == 0) st = check_count(ctx, path, n, "filters", "kernel", -2);
        else if (strcmp(n->op, "SeparableConv") == 0) st = check_count(ctx, path, n, "filters", "pointwise_kernel", -1);
        else if (strcmp(n->op, "DepthwiseConv") == 0)
            st = check_count(ctx, path, n, "depth_multiplier", "depthwise_kernel", -1);
        else if (strcmp(n->op, "Gemm") == 0) st = check_count(ctx, path, n, "units", "kernel", -1);
    }
    if (st == NPUC_OK && npuc__ng_check(ctx, g) != NPUC_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", npuc_ctx_errmsg(ctx));
        st = npuc_fail(ctx, NPUC_ERR_VALUE, "%s: model_config: %s", path, strncmp(msg, "graph: ", 7) ? msg : msg + 7);
    }
    return st;
}
