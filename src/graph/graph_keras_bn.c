/*
 * graph_keras_bn.c - what a Keras model_config says feeds each
 * BatchNormalization layer, and whether the BatchNorm is the only thing that
 * sees that layer's output as it is.
 *
 * Each BatchNormalization layer's inbound node names its input layer exactly
 * (graph_keras.c describes the JSON); nested models are read as scopes of
 * their own.  The edge producer -> BatchNorm is taken as the producer's
 * output going into the BatchNorm alone only when the producer is a
 * convolution or Dense layer with no activation, called once, whose output
 * feeds nothing else, and the BatchNorm normalises the channel axis.
 * Anything else is recorded as the reason (the edge's skip): a BatchNorm
 * after a merge (Add, Concatenate, Multiply...) is never folded.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"

/* How many references in the scope (every node of every layer, and the
 * outputs) name layer `name`; (size_t)-1 when out of memory. */
static size_t consumers(json_t *model, json_t *layers, int sequential, const char *name) {
    size_t count = 0, i;
    json_t *l;
    if (sequential) {
        size_t at;
        if (!npuc__kjson_find_layer(layers, name, &at)) return 0;
        return at + 1 < json_array_size(layers) ? 1 : 0;
    }
    json_t **refs = malloc(NPUC_KJSON_MAX_REFS * sizeof *refs);
    if (!refs) return (size_t)-1;
    json_array_foreach(layers, i, l) {
        json_t *nodes = json_object_get(l, "inbound_nodes");
        size_t j;
        json_t *node;
        json_array_foreach(nodes, j, node) {
            size_t n = npuc__kjson_node_refs(node, refs, NPUC_KJSON_MAX_REFS);
            if (n > NPUC_KJSON_MAX_REFS) count += n - NPUC_KJSON_MAX_REFS; /* assume the worst of the uncounted */
            for (size_t k = 0; k < n && k < NPUC_KJSON_MAX_REFS; k++)
                if (strcmp(json_string_value(json_array_get(refs[k], 0)), name) == 0) count++;
        }
    }
    size_t n = npuc__kjson_output_refs(model, refs, NPUC_KJSON_MAX_REFS);
    for (size_t k = 0; k < n && k < NPUC_KJSON_MAX_REFS; k++)
        if (strcmp(json_string_value(json_array_get(refs[k], 0)), name) == 0) count++;
    free(refs);
    return count;
}

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

/* Why the edge producer -> bn is not the producer's output going into the
 * BatchNorm alone, or "" when it is. */
static void judge_edge(json_t *model, json_t *layers, int sequential, json_t *p, json_t *bn,
                       char *why, size_t n) {
    const char *pname = npuc__kjson_layer_name(p), *pcls = npuc__kjson_layer_class(p);
    json_t *pcfg = json_object_get(p, "config"), *bcfg = json_object_get(bn, "config");
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
    const char *act = json_string_value(json_object_get(pcfg, "activation"));
    if (act && strcmp(act, "linear") != 0) {
        snprintf(why, n, "'%s' applies activation '%s' before the BatchNorm", pname, act);
        return;
    }
    if (!sequential && npuc__kjson_node_count(p) > 1) {
        snprintf(why, n, "'%s' is applied to %zu inputs (shared layer)", pname, npuc__kjson_node_count(p));
        return;
    }
    size_t c = consumers(model, layers, sequential, pname);
    if (c == (size_t)-1) {
        snprintf(why, n, "out of memory while reading model_config");
        return;
    }
    if (c > 1) {
        snprintf(why, n, "the output of '%s' also feeds %zu other layer(s) or outputs", pname, c - 1);
        return;
    }
    json_t *ax = json_object_get(bcfg, "axis");
    if (json_is_array(ax)) ax = json_array_size(ax) == 1 ? json_array_get(ax, 0) : NULL;
    if (json_object_get(bcfg, "axis") && !json_is_integer(ax)) {
        snprintf(why, n, "BatchNorm normalises several axes");
        return;
    }
    if (json_is_integer(ax)) {
        long long a = json_integer_value(ax);
        const char *df = json_string_value(json_object_get(pcfg, "data_format"));
        int first = df && strcmp(df, "channels_first") == 0;
        int last = npuc__kclass_channel_axis(pcls);
        int ok = first ? a == 1 : (a == -1 || (last > 0 && a == last));
        if (!ok) {
            snprintf(why, n, "BatchNorm axis %lld is not the channel axis of '%s'", a, pname);
            return;
        }
    }
}

static npuc_status add_edge(npuc__graph *g, npuc__kbn_edge *e) {
    npuc__kbn_edge *a = realloc(g->kbn, (g->nkbn + 1) * sizeof *a);
    if (!a) return NPUC_ERR_NOMEM;
    g->kbn = a;
    a[g->nkbn++] = *e;
    return NPUC_OK;
}

static npuc_status read_scope(json_t *model, npuc__graph *g, int depth) {
    int sequential;
    json_t *layers = npuc__kjson_scope_layers(model, &sequential);
    if (!layers || depth > 32) return NPUC_OK;
    g->kbn_understood = 1;
    size_t i;
    json_t *l;
    json_array_foreach(layers, i, l) {
        int nested_seq;
        if (json_is_object(json_object_get(l, "config")) && npuc__kjson_scope_layers(l, &nested_seq)) {
            npuc_status st = read_scope(l, g, depth + 1);
            if (st != NPUC_OK) return st;
            continue;
        }
        if (!npuc__kclass_is_bn(npuc__kjson_layer_class(l)) || !npuc__kjson_layer_name(l)) continue;
        npuc__kbn_edge e;
        memset(&e, 0, sizeof e);
        int nomem = 0;
        e.bn = dup_or_null(npuc__kjson_layer_name(l), &nomem);
        json_t *epsv = json_object_get(json_object_get(l, "config"), "epsilon");
        e.eps = json_is_number(epsv) ? json_number_value(epsv) : NAN;
        json_t *p = NULL;
        if (sequential) {
            if (i == 0) snprintf(e.skip, sizeof e.skip, "BatchNorm without a producer: first layer of the model");
            else p = json_array_get(layers, i - 1);
        } else {
            json_t *nodes = json_object_get(l, "inbound_nodes"), *refs[2];
            e.shared = npuc__kjson_node_count(l) > 1;
            size_t nref = json_array_size(nodes) ? npuc__kjson_node_refs(json_array_get(nodes, 0), refs, 2) : 0;
            if (nref == 0)
                snprintf(e.skip, sizeof e.skip, "BatchNorm without a producer: no input in model_config");
            else if (nref > 1)
                snprintf(e.skip, sizeof e.skip, "BatchNorm takes %zu inputs", nref);
            else {
                const char *pn = json_string_value(json_array_get(refs[0], 0));
                p = npuc__kjson_find_layer(layers, pn, NULL);
                if (!p) {
                    e.producer = dup_or_null(pn, &nomem);
                    snprintf(e.skip, sizeof e.skip, "its input '%s' is not a layer of the model", pn);
                }
            }
        }
        if (p) {
            e.producer = dup_or_null(npuc__kjson_layer_name(p), &nomem);
            e.producer_class = dup_or_null(npuc__kjson_layer_class(p), &nomem);
            judge_edge(model, layers, sequential, p, l, e.skip, sizeof e.skip);
        }
        if (nomem || add_edge(g, &e) != NPUC_OK) {
            free(e.bn);
            free(e.producer);
            free(e.producer_class);
            return NPUC_ERR_NOMEM;
        }
    }
    return NPUC_OK;
}

npuc_status npuc__graph_read_kbn(npuc__graph *g) {
    const char *json = npuc_model_meta_get(g->m, "model_config");
    if (!json) return NPUC_OK;
    json_error_t err;
    json_t *root = json_loads(json, JSON_REJECT_DUPLICATES, &err);
    if (!root) return NPUC_OK;
    /* A whole-model file's config may sit under "config" of a wrapper. */
    npuc_status st = json_is_object(root) ? read_scope(root, g, 0) : NPUC_OK;
    json_decref(root);
    if (st != NPUC_OK) npuc__kbn_edges_free(g);
    return st;
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
