/*
 * graph_keras_edit.c - a Keras model_config edited after BatchNorm layers
 * were folded into their producers: each folded BatchNorm layer is removed,
 * its consumers (and the model outputs) read its producer instead, and the
 * producer gets use_bias = true.  graph_keras.c describes the JSON.
 */
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"

typedef struct fold_list {
    const char *const *bns, *const *convs;
    size_t n;
} fold_list;

static int listed(const fold_list *f, const char *bn, const char *conv) {
    for (size_t k = 0; k < f->n; k++)
        if (npuc__graph_names_layer(f->bns[k], bn) && (!conv || npuc__graph_names_layer(f->convs[k], conv)))
            return 1;
    return 0;
}

static int is_listed_conv(const fold_list *f, const char *conv) {
    for (size_t k = 0; k < f->n; k++)
        if (npuc__graph_names_layer(f->convs[k], conv)) return 1;
    return 0;
}

/* Replaces references to removed BatchNorms (removed[k] -> with[k], a
 * reference array [layer, node, tensor, ...]) in the references below v. */
static int rewire(json_t **refs, size_t n, json_t *const *removed_names, json_t *const *with, size_t nr) {
    for (size_t k = 0; k < n; k++) {
        const char *name = json_string_value(json_array_get(refs[k], 0));
        for (size_t r = 0; r < nr; r++) {
            if (!name || strcmp(name, json_string_value(removed_names[r])) != 0) continue;
            for (size_t e = 0; e < 3 && e < json_array_size(with[r]); e++)
                if (json_array_set(refs[k], e, json_array_get(with[r], e)) != 0) return -1;
            break;
        }
    }
    return 0;
}

static int rewrite_scope(json_t *model, const fold_list *f, int depth, int *changed) {
    int sequential;
    json_t *layers = npuc__kjson_scope_layers(model, &sequential);
    if (!layers || depth > 32) return 0;
    size_t nl = json_array_size(layers);
    json_t **rm_names = calloc(nl ? nl : 1, sizeof *rm_names), **with = calloc(nl ? nl : 1, sizeof *with);
    json_t **refs = malloc(NPUC_KJSON_MAX_REFS * sizeof *refs);
    size_t nr = 0;
    int rc = -1;
    if (!rm_names || !with || !refs) goto done;
    /* Nested models first, then this scope's BatchNorms. */
    for (size_t i = 0; i < nl; i++) {
        json_t *l = json_array_get(layers, i);
        int s;
        if (json_is_object(json_object_get(l, "config")) && npuc__kjson_scope_layers(l, &s)) {
            if (rewrite_scope(l, f, depth + 1, changed) != 0) goto done;
        }
    }
    for (size_t i = nl; i-- > 0;) {
        json_t *l = json_array_get(layers, i);
        const char *name = npuc__kjson_layer_name(l);
        if (!name || !npuc__kclass_is_bn(npuc__kjson_layer_class(l))) continue;
        json_t *src = NULL;
        const char *pn = NULL;
        if (sequential) {
            if (i == 0) continue;
            pn = npuc__kjson_layer_name(json_array_get(layers, i - 1));
        } else {
            json_t *nodes = json_object_get(l, "inbound_nodes"), *r[2];
            if (json_array_size(nodes) != 1 || npuc__kjson_node_refs(json_array_get(nodes, 0), r, 2) != 1) continue;
            src = r[0];
            pn = json_string_value(json_array_get(src, 0));
        }
        if (!pn || !listed(f, name, pn)) continue;
        if (!sequential) {
            rm_names[nr] = json_string(name);
            with[nr] = json_deep_copy(src);
            if (!rm_names[nr] || !with[nr]) { json_decref(rm_names[nr]); json_decref(with[nr]); goto done; }
            nr++;
        }
        if (json_array_remove(layers, i) != 0) goto done;
        *changed = 1;
    }
    /* Consumers of removed BatchNorms read the producer instead.  A chain of
     * removed layers cannot occur: a BatchNorm's producer is a conv. */
    if (nr) {
        size_t i;
        json_t *l;
        json_array_foreach(layers, i, l) {
            json_t *nodes = json_object_get(l, "inbound_nodes"), *node;
            size_t j;
            json_array_foreach(nodes, j, node) {
                size_t n = npuc__kjson_node_refs(node, refs, NPUC_KJSON_MAX_REFS);
                if (rewire(refs, n < NPUC_KJSON_MAX_REFS ? n : NPUC_KJSON_MAX_REFS, rm_names, with, nr) != 0) goto done;
            }
        }
        size_t n = npuc__kjson_output_refs(model, refs, NPUC_KJSON_MAX_REFS);
        if (rewire(refs, n < NPUC_KJSON_MAX_REFS ? n : NPUC_KJSON_MAX_REFS, rm_names, with, nr) != 0) goto done;
    }
    /* Folded producers now carry a bias. */
    size_t i;
    json_t *l;
    json_array_foreach(layers, i, l) {
        const char *name = npuc__kjson_layer_name(l);
        json_t *cfg = json_object_get(l, "config");
        if (!name || !json_is_object(cfg) || !is_listed_conv(f, name)) continue;
        if (json_object_set_new(cfg, "use_bias", json_true()) != 0) goto done;
        *changed = 1;
    }
    rc = 0;
done:
    for (size_t k = 0; k < nr; k++) {
        json_decref(rm_names[k]);
        json_decref(with[k]);
    }
    free(rm_names);
    free(with);
    free(refs);
    return rc;
}

char *npuc__graph_keras_fold(const char *json, const char *const *bns, const char *const *convs, size_t n,
                             int *err) {
    *err = 0;
    if (!json || n == 0) return NULL;
    json_error_t e;
    json_t *root = json_loads(json, JSON_REJECT_DUPLICATES, &e);
    if (!root) return NULL;
    fold_list f = {bns, convs, n};
    int changed = 0;
    char *out = NULL;
    if (json_is_object(root)) {
        if (rewrite_scope(root, &f, 0, &changed) != 0) *err = 1;
        else if (changed && !(out = json_dumps(root, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17))))
            *err = 1;
    }
    json_decref(root);
    return out;
}
