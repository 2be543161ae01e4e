/*
 * graph_fill.c - the network graph of an opened model, built once on
 * request (npuc_model_read_graph) from what the reader left in the model:
 *
 *   - a graph the file states (ONNX): the format row's read_graph hook
 *     (format_row.h) builds it, evidence "file", weights attached;
 *   - a Keras configuration (metadata model_config: a Keras 2 .h5 root
 *     attribute, a .keras archive's config.json, a safetensors entry) is
 *     read by graph_kconfig.c: nodes and edges with evidence "config";
 *   - otherwise the modules the tensor names form (graph_modules.c) become
 *     nodes, and their edges are the consumer edges npuc__graph_next finds
 *     (nn.Sequential naming: evidence "name", convention; Keras layer order
 *     or storage order: evidence "order", a guess).
 *
 * Then every tensor is attached to the node of its layer or module as a
 * weight with its role and channel axes (from the layout core decided).
 * Readers stay in formats/, which depend on core only; the graph module
 * builds on what they stored, so every format with a configuration or with
 * names gets a graph without code of its own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "graph/graph_kconfig.h"

/* The role a weight plays in its node: the Keras leaf when it names one,
 * else the role core decided. */
static const char *weight_role(const npuc_tensor_info *t) {
    switch (t->role) { /* what core decided for the vectors is surer than a leaf like "weight" */
    case NPUC_ROLE_BN_GAMMA: return "gamma";
    case NPUC_ROLE_BN_BETA: return "beta";
    case NPUC_ROLE_BN_MEAN: return "mean";
    case NPUC_ROLE_BN_VAR: return "var";
    case NPUC_ROLE_BN_COUNT: return "count";
    case NPUC_ROLE_BIAS: return "bias";
    default: break;
    }
    static const struct { const char *leaf, *role; } R[] = {
        {"kernel", "kernel"}, {"bias", "bias"}, {"gamma", "gamma"}, {"beta", "beta"},
        {"moving_mean", "mean"}, {"moving_variance", "var"}, {"running_mean", "mean"}, {"running_var", "var"},
        {"depthwise_kernel", "depthwise_kernel"}, {"pointwise_kernel", "pointwise_kernel"},
        {"recurrent_kernel", "recurrent_kernel"}, {"embeddings", "embeddings"}, {"weight", "kernel"},
        {"num_batches_tracked", "count"},
    };
    for (size_t i = 0; i < sizeof R / sizeof R[0]; i++)
        if (npuc__graph_leaf_is(t->name, R[i].leaf)) return R[i].role;
    return npuc_role_name(t->role);
}

/* The node a tensor belongs to: its Keras group, its module, or the last
 * component of its module (a nested model's layer). */
static size_t node_of(const npuc__ng *ng, const npuc_tensor_info *t) {
    size_t n = NPUC_GRAPH_NONE;
    if (t->group) {
        n = npuc__ng_find_node(ng, t->group);
        if (n == NPUC_GRAPH_NONE) n = npuc__ng_find_node(ng, npuc__graph_leaf(t->group));
    }
    if (n != NPUC_GRAPH_NONE) return n;
    char *mod = npuc__graph_module_of(t);
    if (!mod) return NPUC_GRAPH_NONE;
    n = npuc__ng_find_node(ng, mod);
    if (n == NPUC_GRAPH_NONE) n = npuc__ng_find_node(ng, npuc__graph_leaf(mod));
    if (n == NPUC_GRAPH_NONE) { /* Keras 3: ".../<layer>/vars" */
        size_t len = strlen(mod);
        if (len > 5 && strcmp(mod + len - 5, "/vars") == 0) {
            mod[len - 5] = 0;
            n = npuc__ng_find_node(ng, mod);
            if (n == NPUC_GRAPH_NONE) n = npuc__ng_find_node(ng, npuc__graph_leaf(mod));
        }
    }
    free(mod);
    return n;
}

static npuc_status attach_weights(npuc_ctx *ctx, npuc__ng *ng, npuc_model *m) {
    for (size_t i = 0; i < npuc_model_count(m); i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        size_t n = node_of(ng, t);
        if (n == NPUC_GRAPH_NONE) continue;
        int oa = t->rank == 1 ? 0 : npuc__out_axis(t), ia = t->rank == 1 ? -1 : npuc__in_axis(t);
        npuc_status st = npuc__ng_add_weight(ctx, ng, n, t->name, weight_role(t), t->rank, t->shape, oa, ia);
        if (st != NPUC_OK) return st;
    }
    return NPUC_OK;
}

/* ------------------------------------------------------------ from names and order */

static const char *module_op(const npuc__graph *g, const npuc__mod *x) {
    if (x->is_bn) return "BatchNormalization";
    if (x->weight < 0) return "Module";
    switch (npuc__gt(g, x->weight)->role) {
    case NPUC_ROLE_CONV: return npuc__is_dw(npuc__gt(g, x->weight), 0) ? "DepthwiseConv" : "Conv";
    case NPUC_ROLE_DWCONV: return "DepthwiseConv";
    case NPUC_ROLE_CONVT: return "ConvTranspose";
    case NPUC_ROLE_RNN: return "RNN";
    case NPUC_ROLE_LINEAR: return "Gemm";
    case NPUC_ROLE_EMBEDDING: return "Embedding";
    default: return "Module";
    }
}

static npuc_status infer(npuc_ctx *ctx, npuc_model *m, npuc__ng **out) {
    npuc__graph *g = NULL;
    npuc__ng *ng = npuc__ng_new();
    npuc_status st = ng ? npuc__graph_open(ctx, m, &g) : npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    if (st == NPUC_OK) st = npuc__graph_read_modules(ctx, g);
    char name[600];
    /* one node per module, in storage order of their first tensors, each
     * making one value "<module>:0" */
    for (size_t x = 0; st == NPUC_OK && x < g->nmods; x++) {
        const npuc__mod *md = &g->mods[x];
        snprintf(name, sizeof name, "%s:0", md->key);
        size_t v, nd;
        st = npuc__ng_add_value(ctx, ng, name, -1, NULL, NPUC_GRAPH_EV_NAME, NPUC_CONF_CONVENTION,
                                "a module: tensors sharing a name prefix", &v);
        if (st == NPUC_OK)
            st = npuc__ng_add_node(ctx, ng, md->key, module_op(g, md), NULL, NULL, 0, &v, 1, NPUC_GRAPH_EV_NAME,
                                   NPUC_CONF_CONVENTION, "a module: tensors sharing a name prefix", &nd);
    }
    /* edges by the consumer rules; order-only ones are guesses */
    for (size_t x = 0; st == NPUC_OK && x < g->nmods; x++) {
        npuc__next r;
        if (npuc__graph_next(g, x, &r) != 0) continue;
        size_t v = ng->nodes[x].out[0];
        for (size_t k = 0; st == NPUC_OK && k < r.n; k++) {
            npuc__ng_node *c = &ng->nodes[r.mod[k]];
            if (r.mod[k] == x) continue;
            size_t *q = realloc(c->in, (c->nin + 1) * sizeof *q);
            if (!q) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); break; }
            c->in = q;
            c->in[c->nin++] = v;
        }
        if (r.n && st == NPUC_OK) {
            npuc__ng_value *val = &ng->vals[v];
            free(val->ev.why);
            char why[64];
            snprintf(why, sizeof why, "consumers by %s", npuc__evidence_name(r.evidence));
            val->ev.why = npuc__strdup(r.guess ? r.guess_why : why);
            val->ev.kind = r.guess ? NPUC_GRAPH_EV_ORDER : r.evidence == NPUC_EVIDENCE_CONFIG ? NPUC_GRAPH_EV_CONFIG
                           : r.evidence == NPUC_EVIDENCE_EXPLICIT ? NPUC_GRAPH_EV_FILE
                           : r.evidence == NPUC_EVIDENCE_NAME ? NPUC_GRAPH_EV_NAME : NPUC_GRAPH_EV_ORDER;
            val->ev.conf = r.guess || val->ev.kind == NPUC_GRAPH_EV_ORDER ? NPUC_CONF_GUESS : NPUC_CONF_CONVENTION;
            if (!val->ev.why) st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        }
        if (r.output && st == NPUC_OK) ng->vals[v].is_output = 1;
    }
    npuc__graph_free(g);
    if (st == NPUC_OK && npuc__ng_check(ctx, ng) != NPUC_OK) {
        /* inferred edges that close a cycle say nothing: keep the nodes alone */
        for (size_t i = 0; i < ng->nnodes; i++) ng->nodes[i].nin = 0;
        st = npuc__ng_check(ctx, ng);
    }
    if (st != NPUC_OK) {
        npuc__ng_free(ng);
        return st;
    }
    *out = ng;
    return NPUC_OK;
}

/* ------------------------------------------------------------ the entry */

npuc_status npuc_model_read_graph(npuc_ctx *ctx, npuc_model *m) {
    if (!m) return npuc_fail(ctx, NPUC_ERR_ARG, "no model");
    if (m->graph) return NPUC_OK;
    npuc__ng *ng = NULL;
    npuc_status st;
    /* A graph the file states (ONNX; normally read when the model was
     * opened): the format's read_graph hook builds it, weights attached. */
    st = npuc__format_read_graph(ctx, m);
    if (st != NPUC_ERR_NOT_FOUND) return st;
    const char *cfg = npuc_model_meta_get(m, "model_config");
    if (cfg) {
        char label[4200];
        snprintf(label, sizeof label, "%s: model_config", npuc_model_path(m));
        st = npuc__kconfig_parse(ctx, label, cfg, strlen(cfg), &ng);
    } else {
        st = infer(ctx, m, &ng);
    }
    if (st == NPUC_OK) st = attach_weights(ctx, ng, m);
    if (st != NPUC_OK) {
        npuc__ng_free(ng);
        return st;
    }
    npuc__model_set_graph(m, ng);
    return NPUC_OK;
}
