/*
 * graph_keras.c - a Keras model_config as a graph: its layers, the
 * references between them, the class families that matter, and the
 * consumer view structured pruning walks.
 *
 * A Keras model.save file carries the model's graph as JSON in the root
 * attribute model_config (safetensors files may carry it as metadata).  Each
 * layer lists its inbound nodes: one node per call of the layer, each node
 * the list of tensors it consumed, named by (layer, node index, tensor
 * index).  Keras 2 writes an entry as the array [layer, node, tensor,
 * kwargs]; Keras 3 writes a node as {"args": [...]} holding {"class_name":
 * "__keras_tensor__", "config": {"keras_history": [layer, node, tensor]}}.
 * Sequential models have no inbound nodes: each layer consumes the previous
 * one.  A layer whose config holds a "layers" list is a nested model.
 *
 * Two readers grew up separately and keep their own rules (each pass
 * decides exactly as before):
 *   - the BatchNorm view (graph_keras_bn.c) reads nested models as scopes
 *     of their own, takes a node's references from its direct entries (or
 *     Keras 3 __keras_tensor__ objects), and rejects duplicate JSON keys;
 *   - the consumer view (npuc__graph_read_klayers, below) reads the
 *     top-level layers only, takes every [name, int, int] array or
 *     keras_history anywhere below inbound_nodes as a reference (at most 256
 *     per layer), and names a layer by config.name first.
 */
#include <string.h>
#include <stdlib.h>

#include "graph/graph_internal.h"

/* ------------------------------------------------------------ JSON vocabulary */

json_t *npuc__kjson_scope_layers(json_t *model, int *sequential) {
    const char *cls = json_string_value(json_object_get(model, "class_name"));
    json_t *cfg = json_object_get(model, "config");
    *sequential = cls && strcmp(cls, "Sequential") == 0;
    if (json_is_array(cfg)) return cfg; /* Keras < 2.2.3 Sequential */
    json_t *l = json_object_get(cfg, "layers");
    return json_is_array(l) ? l : NULL;
}

const char *npuc__kjson_layer_name(json_t *l) {
    const char *s = json_string_value(json_object_get(l, "name"));
    if (!s) s = json_string_value(json_object_get(json_object_get(l, "config"), "name"));
    return s;
}

const char *npuc__kjson_layer_class(json_t *l) {
    const char *s = json_string_value(json_object_get(l, "class_name"));
    return s ? s : "";
}

/* Collects keras_history arrays below v (Keras 3 nodes). */
static void find_histories(json_t *v, json_t **out, size_t *n, size_t max) {
    if (json_is_object(v)) {
        json_t *h = json_object_get(json_object_get(v, "config"), "keras_history");
        const char *cls = json_string_value(json_object_get(v, "class_name"));
        if (cls && strcmp(cls, "__keras_tensor__") == 0 && json_is_array(h) &&
            json_is_string(json_array_get(h, 0))) {
            if (*n < max) out[*n] = h;
            (*n)++;
            return;
        }
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) find_histories(x, out, n, max);
    } else if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) find_histories(x, out, n, max);
    }
}

size_t npuc__kjson_node_refs(json_t *node, json_t **out, size_t max) {
    size_t n = 0;
    if (json_is_array(node)) {
        size_t i;
        json_t *e;
        json_array_foreach(node, i, e) {
            if (json_is_array(e) && json_is_string(json_array_get(e, 0))) {
                if (n < max) out[n] = e;
                n++;
            }
        }
    } else if (json_is_object(node)) {
        find_histories(node, out, &n, max);
    }
    return n;
}

size_t npuc__kjson_node_count(json_t *l) {
    json_t *nodes = json_object_get(l, "inbound_nodes");
    return json_is_array(nodes) ? json_array_size(nodes) : 0;
}

/* output_layers is [[name, 0, 0], ...], or a single [name, 0, 0] in Keras 3. */
size_t npuc__kjson_output_refs(json_t *model, json_t **out, size_t max) {
    json_t *o = json_object_get(json_object_get(model, "config"), "output_layers");
    if (!json_is_array(o)) return 0;
    if (json_is_string(json_array_get(o, 0))) {
        if (max) out[0] = o;
        return 1;
    }
    return npuc__kjson_node_refs(o, out, max);
}

json_t *npuc__kjson_find_layer(json_t *layers, const char *name, size_t *idx) {
    size_t i;
    json_t *l;
    json_array_foreach(layers, i, l) {
        const char *s = npuc__kjson_layer_name(l);
        if (s && strcmp(s, name) == 0) {
            if (idx) *idx = i;
            return l;
        }
    }
    return NULL;
}

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

/* Collects the layer names an inbound_nodes value refers to: Keras 2
 * [[["name", node, tensor, {}], ...]] and Keras 3 {"keras_history":
 * ["name", node, tensor]} anywhere inside. */
static void refs_collect(const json_t *v, const char **names, size_t *n, size_t cap) {
    if (json_is_array(v)) {
        size_t sz = json_array_size(v);
        if (sz >= 3 && json_is_string(json_array_get(v, 0)) && json_is_integer(json_array_get(v, 1)) &&
            json_is_integer(json_array_get(v, 2))) {
            if (*n < cap) names[(*n)++] = json_string_value(json_array_get(v, 0));
            return;
        }
        for (size_t i = 0; i < sz; i++) refs_collect(json_array_get(v, i), names, n, cap);
    } else if (json_is_object(v)) {
        const json_t *h = json_object_get(v, "keras_history");
        if (json_is_array(h) && json_is_string(json_array_get(h, 0))) {
            if (*n < cap) names[(*n)++] = json_string_value(json_array_get(h, 0));
            return;
        }
        const char *k;
        json_t *e;
        json_object_foreach((json_t *)v, k, e) refs_collect(e, names, n, cap);
    }
}

int64_t npuc__graph_find_klayer(const npuc__graph *g, const char *name) {
    for (size_t i = 0; i < g->nkl; i++)
        if (strcmp(g->kl[i].name, name) == 0) return (int64_t)i;
    return -1;
}

/* A config it does not understand leaves g->topo = 0 (and consumers then
 * come from order or names), never an error. */
npuc_status npuc__graph_read_klayers(npuc_ctx *ctx, npuc__graph *g) {
    const char *js = npuc_model_meta_get(g->m, "model_config");
    if (!js || !g->keras) return NPUC_OK;
    json_t *root = json_loads(js, 0, NULL);
    if (!root) return NPUC_OK;
    npuc_status st = NPUC_OK;
    json_t *cfg = json_object_get(root, "config");
    json_t *layers = json_is_array(cfg) ? cfg : json_object_get(cfg, "layers");
    const char *cls = json_string_value(json_object_get(root, "class_name"));
    const int sequential = cls && strcmp(cls, "Sequential") == 0;
    size_t nl = json_array_size(layers);
    const char **refs = NULL;
    if (!json_is_array(layers) || nl == 0) goto done;
    g->kl = calloc(nl, sizeof *g->kl);
    refs = malloc(256 * sizeof *refs);
    if (!g->kl || !refs) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
    for (size_t i = 0; i < nl; i++) {
        json_t *L = json_array_get(layers, i), *lc = json_object_get(L, "config");
        const char *name = json_string_value(json_object_get(lc, "name"));
        if (!name) name = json_string_value(json_object_get(L, "name"));
        const char *c = json_string_value(json_object_get(L, "class_name"));
        if (!name || !c) goto done; /* not understood */
        npuc__klayer *k = &g->kl[g->nkl++];
        k->name = npuc__strdup(name);
        k->cls = npuc__strdup(c);
        if (!k->name || !k->cls) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
        json_t *gr = json_object_get(lc, "groups");
        k->groups = json_is_integer(gr) ? (long)json_integer_value(gr) : 1;
        k->mod = npuc__find_mod(g, name);
    }
    for (size_t i = 0; i < g->nkl; i++) {
        size_t nr = 0;
        if (sequential) {
            if (i > 0) refs[nr++] = g->kl[i - 1].name;
        } else {
            refs_collect(json_object_get(json_array_get(layers, i), "inbound_nodes"), refs, &nr, 256);
        }
        npuc__klayer *k = &g->kl[i];
        k->in = calloc(nr ? nr : 1, sizeof *k->in);
        if (!k->in) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
        for (size_t r = 0; r < nr; r++) {
            int64_t p = npuc__graph_find_klayer(g, refs[r]);
            if (p < 0) continue;
            k->in[k->nin++] = (size_t)p;
            npuc__klayer *pl = &g->kl[p];
            if (pl->nout == pl->capout) {
                size_t nc = pl->capout ? 2 * pl->capout : 4;
                size_t *q = realloc(pl->out, nc * sizeof *q);
                if (!q) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
                pl->out = q;
                pl->capout = nc;
            }
            pl->out[pl->nout++] = i;
        }
    }
    if (sequential) g->kl[g->nkl - 1].is_output = 1;
    else {
        size_t nr = 0;
        refs_collect(json_object_get(json_is_object(cfg) ? cfg : root, "output_layers"), refs, &nr, 256);
        for (size_t r = 0; r < nr; r++) {
            int64_t p = npuc__graph_find_klayer(g, refs[r]);
            if (p >= 0) g->kl[p].is_output = 1;
        }
    }
    g->topo = 1;
done:
    free(refs);
    json_decref(root);
    return st;
}
