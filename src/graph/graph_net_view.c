/*
 * graph_net_view.c - the model's ownership of its network graph and the
 * read-only public view (include/npuc/netgraph.h).
 */
#include <stdio.h>
#include <string.h>

#include "format_row.h"
#include "graph/graph_net.h"

static void graph_free_cb(void *g) { npuc__ng_free(g); }

void npuc__model_set_graph(npuc_model *m, npuc__ng *g) {
    if (m->graph && m->graph_free) m->graph_free(m->graph);
    m->graph = g;
    m->graph_free = g ? graph_free_cb : NULL;
}

npuc__ng *npuc__model_graph_mut(npuc_model *m) { return m->graph; }

const npuc_graph *npuc_model_graph(const npuc_model *m) { return m ? m->graph : NULL; }

size_t npuc_graph_node_count(const npuc_graph *g) { return g ? g->nnodes : 0; }
size_t npuc_graph_value_count(const npuc_graph *g) { return g ? g->nvals : 0; }

npuc_status npuc_graph_get_node(const npuc_graph *g, size_t i, npuc_graph_node *out) {
    memset(out, 0, sizeof *out);
    if (!g || i >= g->nnodes) return NPUC_ERR_ARG;
    const npuc__ng_node *n = &g->nodes[i];
    out->name = n->name;
    out->op = n->op;
    out->source_op = n->source_op;
    out->inputs = n->in;
    out->ninputs = n->nin;
    out->outputs = n->out;
    out->noutputs = n->nout;
    out->weights = n->w;
    out->nweights = n->nw;
    out->nattrs = n->nattr;
    out->evidence = n->ev.kind;
    out->confidence = n->ev.conf;
    out->why = n->ev.why ? n->ev.why : "";
    return NPUC_OK;
}

npuc_status npuc_graph_get_value(const npuc_graph *g, size_t i, npuc_graph_value *out) {
    memset(out, 0, sizeof *out);
    if (!g || i >= g->nvals) return NPUC_ERR_ARG;
    const npuc__ng_value *v = &g->vals[i];
    out->name = v->name;
    out->producer = v->prod;
    out->nconsumers = npuc__ng_consumers(g, i, NULL, 0);
    out->rank = v->rank;
    for (int a = 0; a < v->rank; a++) out->shape[a] = v->shape[a];
    out->is_input = v->is_input;
    out->is_output = v->is_output;
    out->evidence = v->ev.kind;
    out->confidence = v->ev.conf;
    out->why = v->ev.why ? v->ev.why : "";
    return NPUC_OK;
}

int npuc_graph_node_attr(const npuc_graph *g, size_t i, size_t k, const char **key, const char **value) {
    if (!g || i >= g->nnodes || k >= g->nodes[i].nattr) return -1;
    *key = g->nodes[i].attr[k].key;
    *value = g->nodes[i].attr[k].val;
    return 0;
}

size_t npuc_graph_find_node(const npuc_graph *g, const char *name) {
    return g ? npuc__ng_find_node(g, name) : NPUC_GRAPH_NONE;
}

size_t npuc_graph_find_value(const npuc_graph *g, const char *name) {
    return g ? npuc__ng_find_value(g, name) : NPUC_GRAPH_NONE;
}

size_t npuc_graph_weight_node(const npuc_graph *g, const char *tensor, size_t *k) {
    for (size_t i = 0; g && tensor && i < g->nnodes; i++)
        for (size_t j = 0; j < g->nodes[i].nw; j++)
            if (strcmp(g->nodes[i].w[j].tensor, tensor) == 0) {
                if (k) *k = j;
                return i;
            }
    return NPUC_GRAPH_NONE;
}

const char *npuc_graph_evidence_name(npuc_graph_evidence e) {
    static const char *const N[] = {"file", "config", "name", "order"};
    return (unsigned)e < sizeof N / sizeof N[0] ? N[e] : "?";
}

size_t npuc__ng_weight_node(const npuc__ng *g, const char *tensor) {
    for (size_t i = 0; g && i < g->nnodes; i++)
        for (size_t k = 0; k < g->nodes[i].nw; k++)
            if (strcmp(g->nodes[i].w[k].tensor, tensor) == 0) return i;
    return NPUC_GRAPH_NONE;
}

npuc_status npuc__graph_write_meta(npuc_ctx *ctx, const npuc_writer *w, const npuc_model *src, const npuc__ng *g,
                                   const char **key, char **out) {
    *out = NULL;
    *key = w && w->row ? w->row->graph_meta : NULL;
    if (!*key || !w->row->graph_write || !g) return NPUC_OK;
    const char *stored = npuc_model_meta_get(src, *key);
    if (!stored) return NPUC_OK;
    char label[4200];
    snprintf(label, sizeof label, "%s: %s", npuc_model_path(src), *key);
    return w->row->graph_write(ctx, label, stored, g, out);
}
