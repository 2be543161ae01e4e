/*
 * graph_keras.c - the Keras class families that matter to the passes, and
 * the consumer view structured pruning walks.
 *
 * The configuration itself (model_config: layers, inbound nodes, nested
 * models, Keras 2 and Keras 3 references) is read in one place,
 * graph_kconfig.c, into the model's network graph (npuc_model_read_graph),
 * and written back from an edited graph there too.  The consumer view
 * (npuc__graph_read_klayers, below) is that graph seen layer by layer, as
 * the BatchNorm view (graph_keras_bn.c) is.
 */
#include <string.h>
#include <stdlib.h>

#include "graph/graph_internal.h"
#include "graph/graph_net.h"

/* ------------------------------------------------------------ class families */

static int cls_is(const char *c, const char *const *list, int prefix) {
    for (int i = 0; list[i]; i++)
        if (prefix ? strncmp(c, list[i], strlen(list[i])) == 0 : strcmp(c, list[i]) == 0) return 1;
    return 0;
}

int npuc__kclass_is_bn(const char *c) {
    return strcmp(c, "BatchNormalization") == 0 || strcmp(c, "SyncBatchNormalization") == 0;
}

int npuc__kclass_is_fold_producer(const char *c) {
    static const char *const P[] = {"Conv1D", "Conv2D", "Conv3D", "DepthwiseConv1D", "DepthwiseConv2D",
                                    "SeparableConv1D", "SeparableConv2D", "Dense", NULL};
    return cls_is(c, P, 0);
}

int npuc__kclass_channel_axis(const char *c) {
    if (strcmp(c, "Dense") == 0) return 1;
    size_t n = strlen(c);
    if (n >= 2 && c[n - 1] == 'D' && c[n - 2] >= '1' && c[n - 2] <= '3') return c[n - 2] - '0' + 1;
    return -1;
}

int npuc__kclass_passthrough(const char *c) {
    static const char *const EXACT[] = {"Activation", "ReLU", "LeakyReLU", "ELU", "ThresholdedReLU",
                                        "Dropout", "GaussianNoise", "GaussianDropout", "AlphaDropout",
                                        "ActivityRegularization", "Flatten", "Identity", NULL};
    static const char *const PREFIX[] = {"ZeroPadding", "Cropping", "MaxPool", "AveragePool", "AvgPool",
                                         "GlobalAveragePool", "GlobalAvgPool", "GlobalMaxPool",
                                         "UpSampling", "SpatialDropout", NULL};
    return cls_is(c, EXACT, 0) || cls_is(c, PREFIX, 1);
}

int npuc__kclass_weighted(const char *c) {
    static const char *const W[] = {"Conv1D", "Conv2D", "Conv3D", "Convolution1D", "Convolution2D",
                                    "Convolution3D", "Dense", "DepthwiseConv1D", "DepthwiseConv2D",
                                    "BatchNormalization", "SyncBatchNormalization", NULL};
    return cls_is(c, W, 0);
}

/* ------------------------------------------------------------ the consumer view */

int64_t npuc__graph_find_klayer(const npuc__graph *g, const char *name) {
    for (size_t i = 0; i < g->nkl; i++)
        if (strcmp(g->kl[i].name, name) == 0) return (int64_t)i;
    return -1;
}

/* The layer a graph node is a call of: its name up to a "#k" call suffix. */
static int64_t klayer_of_node(const npuc__graph *g, const npuc__ng *ng, size_t node, char *buf, size_t n) {
    const char *name = ng->nodes[node].name, *hash = strrchr(name, '#');
    size_t len = hash && npuc__graph_all_digits(hash + 1) ? (size_t)(hash - name) : strlen(name);
    if (len >= n) return -1;
    memcpy(buf, name, len);
    buf[len] = 0;
    return npuc__graph_find_klayer(g, buf);
}

static npuc_status kl_add_out(npuc_ctx *ctx, npuc__klayer *pl, size_t consumer) {
    if (pl->nout == pl->capout) {
        size_t nc = pl->capout ? 2 * pl->capout : 4;
        size_t *q = realloc(pl->out, nc * sizeof *q);
        if (!q) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        pl->out = q;
        pl->capout = nc;
    }
    pl->out[pl->nout++] = consumer;
    return NPUC_OK;
}

/* The consumer view is the network graph (npuc_model_read_graph, whose
 * Keras reader is graph_kconfig.c) seen layer by layer: one klayer per
 * layer node (a shared layer's calls folded into one), its producers and
 * consumers the layers of the nodes along its edges.  A configuration the
 * reader refuses leaves g->topo = 0 (consumers then come from order or
 * names), never an error but out of memory. */
npuc_status npuc__graph_read_klayers(npuc_ctx *ctx, npuc__graph *g) {
    if (!npuc_model_meta_get(g->m, "model_config") || !g->keras) return NPUC_OK;
    npuc_status st = npuc_model_read_graph(ctx, g->m);
    if (st == NPUC_ERR_NOMEM) return st;
    if (st != NPUC_OK) return NPUC_OK; /* not understood */
    const npuc__ng *ng = npuc_model_graph(g->m);
    char name[640];
    g->kl = calloc(ng->nnodes ? ng->nnodes : 1, sizeof *g->kl);
    int64_t *kof = malloc((ng->nnodes ? ng->nnodes : 1) * sizeof *kof);
    if (!g->kl || !kof) { free(kof); return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); }
    for (size_t i = 0; i < ng->nnodes; i++) { /* call 0 of each layer, in list order */
        const npuc__ng_node *n = &ng->nodes[i];
        kof[i] = klayer_of_node(g, ng, i, name, sizeof name);
        if (kof[i] >= 0) continue;
        npuc__klayer *k = &g->kl[g->nkl];
        k->name = npuc__strdup(name);
        k->cls = npuc__strdup(n->source_op ? n->source_op : n->op);
        if (!k->name || !k->cls) {
            free(k->name);
            free(k->cls);
            free(kof);
            return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        }
        const char *gr = npuc__ng_attr(ng, i, "groups");
        k->groups = gr ? strtol(gr, NULL, 10) : 1;
        k->mod = npuc__find_mod(g, name);
        kof[i] = (int64_t)g->nkl++;
    }
    for (size_t i = 0; i < ng->nnodes && st == NPUC_OK; i++) {
        const npuc__ng_node *n = &ng->nodes[i];
        npuc__klayer *k = &g->kl[kof[i]];
        size_t *q = realloc(k->in, (k->nin + n->nin + 1) * sizeof *q);
        if (!q) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); break; }
        k->in = q;
        for (size_t r = 0; r < n->nin && st == NPUC_OK; r++) {
            size_t p = ng->vals[n->in[r]].prod;
            if (p == NPUC_GRAPH_NONE) continue;
            k->in[k->nin++] = (size_t)kof[p];
            st = kl_add_out(ctx, &g->kl[kof[p]], (size_t)kof[i]);
        }
        for (size_t o = 0; o < n->nout; o++)
            if (ng->vals[n->out[o]].is_output) k->is_output = 1;
    }
    free(kof);
    if (st == NPUC_OK) g->topo = g->nkl > 0;
    return st;
}
