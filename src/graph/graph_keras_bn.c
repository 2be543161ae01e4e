/*
 * graph_keras_bn.c - what a Keras model_config says feeds each
 * BatchNormalization layer, and whether the BatchNorm is the only thing that
 * sees that layer's output as it is.
 *
 * The configuration is read once, by graph_kconfig.c, into the model's
 * network graph (npuc_model_read_graph); this file walks that graph.  Each
 * call of a layer is a node ("name", "name#k" for call k), the class is its
 * source_op and the layer's scalar settings its attributes.  The edge
 * producer -> BatchNorm is taken as the producer's output going into the
 * BatchNorm alone only when the producer is a convolution or Dense layer
 * with no activation, declared in the BatchNorm's own model (a nested
 * model's boundary is not folded across), called once, whose output feeds
 * nothing else, and the BatchNorm normalises the channel axis.  Anything
 * else is recorded as the reason (the edge's skip): a BatchNorm after a
 * merge (Add, Concatenate, Multiply...) is never folded.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "graph/graph_net.h"

static char *dup_or_null(const char *s, int *nomem) {
    if (!s) return NULL;
    char *d = npuc__strdup(s);
    if (!d) *nomem = 1;
    return d;
}

/* Keras' merge layers: several inputs combined into one output.  A
 * BatchNorm after one normalises the sum (product, concatenation...) of
 * branches; scaling one branch's producer would change the other branches'
 * share, so it never folds. */
static int merge_class(const char *c) {
    static const char *const M[] = {"Add", "Subtract", "Multiply", "Average", "Maximum", "Minimum",
                                    "Concatenate", "Dot"};
    for (size_t k = 0; k < sizeof M / sizeof M[0]; k++)
        if (strcmp(c, M[k]) == 0) return 1;
    return 0;
}

/* A node that is call k > 0 of a layer ("name#k"). */
static int later_call(const char *name) {
    const char *h = strrchr(name, '#');
    return h && npuc__graph_all_digits(h + 1);
}

/* How many calls layer `name` has in ng (nodes "name", "name#1", ...). */
static size_t calls_of(const npuc__ng *ng, const char *name) {
    char buf[640];
    size_t n = 1;
    for (;; n++) {
        snprintf(buf, sizeof buf, "%s#%zu", name, n);
        if (npuc__ng_find_node(ng, buf) == NPUC_GRAPH_NONE) return n;
    }
}

/* The channel axis a BatchNorm's "axis" attribute names: 1 with *a set for
 * one integer ("3", "[3]"), 0 when absent, -1 for several axes or not an
 * integer. */
static int bn_axis(const char *s, long long *a) {
    if (!s) return 0;
    const char *p = s;
    int list = *p == '[';
    if (list) p++;
    char *end;
    *a = strtoll(p, &end, 10);
    if (end == p) return -1;
    if (list ? strcmp(end, "]") != 0 : *end != 0) return -1;
    return 1;
}

/* Why the edge producer node p -> BatchNorm node b is not the producer's
 * output going into the BatchNorm alone, or "" when it is. */
static void judge_edge(const npuc__ng *ng, size_t p, size_t b, size_t pv, char *why, size_t n) {
    const npuc__ng_node *P = &ng->nodes[p];
    const char *pname = P->name, *pcls = P->source_op ? P->source_op : "";
    why[0] = 0;
    if (!npuc__kclass_is_fold_producer(pcls)) {
        if (merge_class(pcls))
            snprintf(why, n, "its input '%s' is a merge (%s): a BatchNorm after a merge is never folded into "
                             "one branch", pname, pcls);
        else if (strstr(pcls, "Transpose"))
            snprintf(why, n, "its input '%s' is a %s (Keras kernel [kh,kw,out,in]), not folded", pname, pcls);
        else
            snprintf(why, n, "BatchNorm without a producer: its input '%s' is a %s, not a convolution "
                             "or Dense layer", pname, pcls[0] ? pcls : "layer of unknown class");
        return;
    }
    const char *act = npuc__ng_attr(ng, p, "activation");
    if (act && strcmp(act, "linear") != 0) {
        snprintf(why, n, "'%s' applies activation '%s' before the BatchNorm", pname, act);
        return;
    }
    size_t calls = calls_of(ng, pname);
    if (later_call(pname) || calls > 1) {
        snprintf(why, n, "'%s' is applied to %zu inputs (shared layer)", pname, calls);
        return;
    }
    /* every node reading the producer's output, and the model output */
    size_t cons[2];
    size_t c = npuc__ng_consumers(ng, pv, cons, 2) + (ng->vals[pv].is_output ? 1 : 0);
    if (c > 1) {
        snprintf(why, n, "the output of '%s' also feeds %zu other layer(s) or outputs", pname, c - 1);
        return;
    }
    long long a;
    int ax = bn_axis(npuc__ng_attr(ng, b, "axis"), &a);
    if (ax < 0) {
        snprintf(why, n, "BatchNorm normalises several axes");
        return;
    }
    if (ax > 0) {
        const char *df = npuc__ng_attr(ng, p, "data_format");
        int first = df && strcmp(df, "channels_first") == 0;
        int last = npuc__kclass_channel_axis(pcls);
        int ok = first ? a == 1 : (a == -1 || (last > 0 && a == last));
        if (!ok) snprintf(why, n, "BatchNorm axis %lld is not the channel axis of '%s'", a, pname);
    }
}

static npuc_status add_edge(npuc__graph *g, npuc__kbn_edge *e) {
    npuc__kbn_edge *a = realloc(g->kbn, (g->nkbn + 1) * sizeof *a);
    if (!a) return NPUC_ERR_NOMEM;
    g->kbn = a;
    a[g->nkbn++] = *e;
    return NPUC_OK;
}

/* One BatchNorm layer (node b, its call 0). */
static npuc_status read_bn(const npuc__ng *ng, size_t b, npuc__graph *g) {
    const npuc__ng_node *B = &ng->nodes[b];
    npuc__kbn_edge e;
    memset(&e, 0, sizeof e);
    int nomem = 0;
    e.bn = dup_or_null(B->name, &nomem);
    const char *eps = npuc__ng_attr(ng, b, "epsilon");
    char *end = NULL;
    e.eps = eps ? strtod(eps, &end) : NAN;
    if (eps && (end == eps || *end)) e.eps = NAN;
    e.shared = calls_of(ng, B->name) > 1;
    size_t pv = B->nin ? B->in[0] : NPUC_GRAPH_NONE;
    size_t p = pv != NPUC_GRAPH_NONE ? ng->vals[pv].prod : NPUC_GRAPH_NONE;
    if (B->nin > 1)
        snprintf(e.skip, sizeof e.skip, "BatchNorm takes %zu inputs", B->nin);
    else if (p == NPUC_GRAPH_NONE)
        snprintf(e.skip, sizeof e.skip, "BatchNorm without a producer: %s",
                 B->scope ? "first layer of the model" : "no input in model_config");
    else if (ng->nodes[p].scope != B->scope) {
        e.producer = dup_or_null(ng->nodes[p].name, &nomem);
        e.producer_class = dup_or_null(ng->nodes[p].source_op, &nomem);
        if (B->scope && ng->nodes[p].scope < B->scope)
            snprintf(e.skip, sizeof e.skip, "BatchNorm without a producer: first layer of the model");
        else
            snprintf(e.skip, sizeof e.skip, "its input '%.60s' is the output of a nested model: not folded "
                     "across the model's boundary", ng->nodes[p].name);
    } else {
        e.producer = dup_or_null(ng->nodes[p].name, &nomem);
        e.producer_class = dup_or_null(ng->nodes[p].source_op, &nomem);
        judge_edge(ng, p, b, pv, e.skip, sizeof e.skip);
    }
    if (nomem || add_edge(g, &e) != NPUC_OK) {
        free(e.bn);
        free(e.producer);
        free(e.producer_class);
        return NPUC_ERR_NOMEM;
    }
    return NPUC_OK;
}

npuc_status npuc__graph_read_kbn(npuc_ctx *ctx, npuc__graph *g) {
    if (!npuc_model_meta_get(g->m, "model_config")) return NPUC_OK;
    npuc_status st = npuc_model_read_graph(ctx, g->m);
    if (st == NPUC_ERR_NOMEM) return st;
    if (st != NPUC_OK) { /* a configuration the reader refuses says nothing */
        npuc_ctx_clear(ctx);
        return NPUC_OK;
    }
    const npuc__ng *ng = npuc_model_graph(g->m);
    if (!ng) return NPUC_OK;
    g->kbn_understood = 1;
    for (size_t i = 0; i < ng->nnodes; i++) {
        const npuc__ng_node *n = &ng->nodes[i];
        if (!n->source_op || !npuc__kclass_is_bn(n->source_op) || later_call(n->name)) continue;
        if ((st = read_bn(ng, i, g)) != NPUC_OK) {
            npuc__kbn_edges_free(g);
            return st;
        }
    }
    return NPUC_OK;
}

void npuc__kbn_edges_free(npuc__graph *g) {
    for (size_t i = 0; i < g->nkbn; i++) {
        free(g->kbn[i].bn);
        free(g->kbn[i].producer);
        free(g->kbn[i].producer_class);
    }
    free(g->kbn);
    g->kbn = NULL;
    g->nkbn = 0;
    g->kbn_understood = 0;
}
