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

/* ------------------------------------------------ widths after structured pruning */

/* The kernel of layer `name` among the output tensors t[0..n) whose leaf
 * (":0" aside) is `leaf`, or NULL. */
static const npuc_tensor_info *kernel_of(const npuc_tensor_info *t, size_t n, const char *name, const char *leaf) {
    for (size_t k = 0; k < n; k++) {
        const char *lf = npuc__graph_leaf(t[k].name);
        size_t ll = strlen(lf), want = strlen(leaf);
        if (ll >= 2 && lf[ll - 2] == ':') ll -= 2;
        if (ll != want || memcmp(lf, leaf, want) != 0 || lf == t[k].name) continue;
        char dir[512];
        const size_t dl = (size_t)(lf - t[k].name) - 1;
        if (dl >= sizeof dir) continue;
        memcpy(dir, t[k].name, dl);
        dir[dl] = 0;
        if (npuc__graph_names_layer(dir, name)) return &t[k];
    }
    return NULL;
}

static int sync_scope(json_t *model, const npuc_tensor_info *t, size_t n, int depth, int *changed) {
    int sequential;
    json_t *layers = npuc__kjson_scope_layers(model, &sequential);
    if (!layers || depth > 32) return 0;
    size_t i;
    json_t *l;
    json_array_foreach(layers, i, l) {
        int s;
        json_t *cfg = json_object_get(l, "config");
        if (!json_is_object(cfg)) continue;
        if (npuc__kjson_scope_layers(l, &s)) {
            if (sync_scope(l, t, n, depth + 1, changed) != 0) return -1;
            continue;
        }
        const char *cls = npuc__kjson_layer_class(l), *name = npuc__kjson_layer_name(l);
        if (!cls || !name) continue;
        /* Keras kernels: Conv*D [..., in, filters], Conv*DTranspose
         * [..., filters, in], SeparableConv*D's pointwise [1, 1, in,
         * filters], Dense [in, units]. */
        const char *field = "filters", *leaf = "kernel";
        int from_end = 1;
        if (!strcmp(cls, "Dense")) field = "units";
        else if (!strcmp(cls, "Conv1DTranspose") || !strcmp(cls, "Conv2DTranspose") || !strcmp(cls, "Conv3DTranspose"))
            from_end = 2;
        else if (!strcmp(cls, "SeparableConv1D") || !strcmp(cls, "SeparableConv2D")) leaf = "pointwise_kernel";
        else if (strcmp(cls, "Conv1D") != 0 && strcmp(cls, "Conv2D") != 0 && strcmp(cls, "Conv3D") != 0) continue;
        const npuc_tensor_info *k = kernel_of(t, n, name, leaf);
        json_t *v = json_object_get(cfg, field);
        if (!k || !npuc_dtype_is_float(k->dtype) || k->rank < 2 || !json_is_integer(v)) continue;
        const json_int_t want = (json_int_t)k->shape[k->rank - from_end];
        if (json_integer_value(v) == want) continue;
        if (json_object_set_new(cfg, field, json_integer(want)) != 0) return -1;
        (*changed)++;
    }
    return 0;
}

char *npuc__graph_keras_sync_widths(const char *json, const npuc_tensor_info *t, size_t n, int *nchanged, int *err) {
    *err = 0;
    *nchanged = 0;
    if (!json) return NULL;
    json_error_t e;
    json_t *root = json_loads(json, JSON_REJECT_DUPLICATES, &e);
    if (!root) return NULL;
    char *out = NULL;
    if (json_is_object(root)) {
        if (sync_scope(root, t, n, 0, nchanged) != 0) *err = 1;
        else if (*nchanged && !(out = json_dumps(root, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17)))) *err = 1;
    }
    json_decref(root);
    return out;
}
