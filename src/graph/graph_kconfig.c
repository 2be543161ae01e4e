/*
 * graph_kconfig.c - the one reader of a Keras model configuration
 * (model_config of a Keras 2 .h5 file or of safetensors metadata, and the
 * config.json of a Keras 3 .keras archive) into the network graph.
 *
 * The configuration is JSON: {"class_name": "Functional" | "Model" |
 * "Sequential", "config": {"layers": [...], "input_layers": ...,
 * "output_layers": ...}} (Keras < 2.2.3 Sequential: "config" is the layer
 * list itself).  Each layer is {"class_name", "name" or config.name,
 * "config", "inbound_nodes"}; a layer whose config holds a "layers" list
 * is a nested model (Functional or Sequential) and is read as a scope of
 * its own.  inbound_nodes lists one node per call of the layer (a shared
 * layer has several); each node names the tensors it consumes as
 * (layer, node index, tensor index):
 *   Keras 2: [[["conv1", 0, 0, {}], ["conv2", 0, 0, {}]], ...]
 *   Keras 3: [{"args": [{"class_name": "__keras_tensor__", "config":
 *            {"keras_history": ["conv1", 0, 0]}}, ...], "kwargs": {...}}]
 * (Keras 3 also nests them in lists inside args, for Concatenate, and
 * passes some by keyword in kwargs, e.g. attention's value=).
 * A Sequential scope has no inbound nodes: each layer consumes the one
 * before.
 *
 * Graph: each call of a layer is a node (the layer's name for call 0,
 * "name#k" for call k) producing value "name" / "name#k" (tensor index t >
 * 0 adds "...:t"); the format-neutral op comes from the class (Conv2D ->
 * Conv, Dense -> Gemm...), the class stays as source_op, and the layer's
 * scalar settings (filters, units, axis...) become attributes.  A nested
 * model's input layers take the values its call consumed, and a reference
 * to the nested model's output t reads its output layer t, so the graph is
 * flat.  Evidence: config, certain.
 *
 * The text comes from the file, so it is hostile until checked: duplicate
 * keys are refused (two readers of one file must not see two graphs);
 * nesting deeper than NPUC_KC_MAX_SCOPE_DEPTH, more than NPUC_KC_MAX_LAYERS
 * layers or references, a reference cycle or a layer consuming itself is
 * NPUC_ERR_FORMAT with one line naming the file and the layer.  Names are
 * looked up in a hash table, so time stays linear in the text.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "format_row.h"
#include "graph/graph_kconfig.h"

/* ------------------------------------------------------------ a name table */

typedef struct kc_map {
    char **key;
    size_t *val;
    size_t cap, n;
} kc_map;


static size_t *kc_map_get(const kc_map *m, const char *k) {
    if (!m->cap) return NULL;
    for (size_t i = npuc__ng_hash(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (!m->key[i]) return NULL;
        if (strcmp(m->key[i], k) == 0) return &m->val[i];
    }
}

/* Inserts k (copied) -> v; returns 1 when k was there (nothing changed), 0
 * when added, -1 out of memory. */
static int kc_map_put(kc_map *m, const char *k, size_t v) {
    if (kc_map_get(m, k)) return 1;
    if (2 * (m->n + 1) > m->cap) {
        size_t nc = m->cap ? 2 * m->cap : 64;
        char **nk = calloc(nc, sizeof *nk);
        size_t *nv = calloc(nc, sizeof *nv);
        if (!nk || !nv) { free(nk); free(nv); return -1; }
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->key[i]) continue;
            size_t j = npuc__ng_hash(m->key[i]) & (nc - 1);
            while (nk[j]) j = (j + 1) & (nc - 1);
            nk[j] = m->key[i];
            nv[j] = m->val[i];
        }
        free(m->key);
        free(m->val);
        m->key = nk;
        m->val = nv;
        m->cap = nc;
    }
    char *d = npuc__strdup(k);
    if (!d) return -1;
    size_t j = npuc__ng_hash(k) & (m->cap - 1);
    while (m->key[j]) j = (j + 1) & (m->cap - 1);
    m->key[j] = d;
    m->val[j] = v;
    m->n++;
    return 0;
}

static void kc_map_free(kc_map *m) {
    for (size_t i = 0; i < m->cap; i++) free(m->key[i]);
    free(m->key);
    free(m->val);
}

/* ------------------------------------------------------------ the reader's state */

typedef struct kc_layer {
    json_t *j;            /* the layer object (borrowed from the root) */
    const char *name, *cls;
    size_t scope;         /* index of its scope */
    size_t ncalls;        /* nodes made for it */
    size_t first_node;    /* graph node of call 0 */
    int nested;           /* a model: its own scope */
    size_t inner;         /* the scope it opens, when nested */
} kc_layer;

typedef struct kc_scope {
    json_t *model;        /* the model object ({"class_name", "config"}) */
    json_t *layers;
    int sequential;
    size_t owner;         /* layer opening it, or NPUC_GRAPH_NONE for the root */
    size_t depth;
    size_t first, n;      /* its layers in st->layers */
} kc_scope;

typedef struct kc {
    npuc_ctx *ctx;
    const char *label;    /* "model.h5: model_config" */
    npuc__ng *g;
    kc_layer *layers;
    size_t nlayers, caplayers;
    kc_scope *scopes;
    size_t nscopes, capscopes;
    kc_map names;         /* "<scope>\x1f<layer>" -> layer index */
    kc_map alias;         /* "<scope>\x1f<layer>\x1f<node>\x1f<tensor>" -> value (nested inputs / outputs) */
    size_t refs;          /* references followed so far */
} kc;

static npuc_status kc_nomem(kc *k) { return npuc_fail(k->ctx, NPUC_ERR_NOMEM, "out of memory"); }

static npuc_status kc_bad(kc *k, const char *fmt, ...) NPUC_PRINTF(2, 3);
static npuc_status kc_bad(kc *k, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return npuc_fail(k->ctx, NPUC_ERR_FORMAT, "%s: %s", k->label, msg);
}

static const char *layer_name(json_t *l) {
    const char *s = json_string_value(json_object_get(l, "name"));
    if (!s) s = json_string_value(json_object_get(json_object_get(l, "config"), "name"));
    return s;
}

/* The layer list of a model object, or NULL; *seq for a Sequential. */
static json_t *model_layers(json_t *model, int *seq) {
    const char *cls = json_string_value(json_object_get(model, "class_name"));
    json_t *cfg = json_object_get(model, "config");
    *seq = cls && strcmp(cls, "Sequential") == 0;
    if (json_is_array(cfg)) {
        *seq = 1; /* Keras < 2.2.3 Sequential */
        return cfg;
    }
    json_t *l = json_object_get(cfg, "layers");
    return json_is_array(l) ? l : NULL;
}

static char *scoped_key(size_t scope, const char *name, long node, long tensor) {
    size_t n = strlen(name) + 64;
    char *s = malloc(n);
    if (!s) return NULL;
    if (node < 0) snprintf(s, n, "%zu\x1f%s", scope, name);
    else snprintf(s, n, "%zu\x1f%s\x1f%ld\x1f%ld", scope, name, node, tensor);
    return s;
}

/* ------------------------------------------------------------ scopes and layers */

static npuc_status kc_read_scope(kc *k, json_t *model, size_t owner, size_t depth);

static npuc_status kc_add_layer(kc *k, size_t scope, json_t *l) {
    const char *name = layer_name(l);
    const char *cls = json_string_value(json_object_get(l, "class_name"));
    if (!json_is_object(l) || !name || !*name || !cls)
        return kc_bad(k, "a layer without a name or class_name");
    if (k->nlayers >= NPUC_KC_MAX_LAYERS) {
        char n[32];
        snprintf(n, sizeof n, "%zu", (size_t)NPUC_KC_MAX_LAYERS);
        return kc_bad(k, "more than %s layers", n);
    }
    if (k->nlayers == k->caplayers) {
        size_t nc = k->caplayers ? 2 * k->caplayers : 64;
        kc_layer *q = realloc(k->layers, nc * sizeof *q);
        if (!q) return kc_nomem(k);
        k->layers = q;
        k->caplayers = nc;
    }
    char *key = scoped_key(scope, name, -1, 0);
    if (!key) return kc_nomem(k);
    int r = kc_map_put(&k->names, key, k->nlayers);
    free(key);
    if (r < 0) return kc_nomem(k);
    if (r > 0) return kc_bad(k, "layer '%s' is listed twice", name);
    size_t me = k->nlayers++;
    k->layers[me] = (kc_layer){.j = l, .name = name, .cls = cls, .scope = scope, .first_node = NPUC_GRAPH_NONE};
    int seq;
    if (model_layers(l, &seq)) {
        k->layers[me].nested = 1;
        k->layers[me].inner = k->nscopes;
        return kc_read_scope(k, l, me, k->scopes[scope].depth + 1);
    }
    return NPUC_OK;
}

static npuc_status kc_read_scope(kc *k, json_t *model, size_t owner, size_t depth) {
    if (depth > NPUC_KC_MAX_SCOPE_DEPTH)
        return kc_bad(k, "models nested deeper than %s levels (at '%s')", "32",
                      owner == NPUC_GRAPH_NONE ? "" : k->layers[owner].name);
    int seq;
    json_t *layers = model_layers(model, &seq);
    if (!layers) return kc_bad(k, "no layer list");
    if (k->nscopes == k->capscopes) {
        size_t nc = k->capscopes ? 2 * k->capscopes : 8;
        kc_scope *q = realloc(k->scopes, nc * sizeof *q);
        if (!q) return kc_nomem(k);
        k->scopes = q;
        k->capscopes = nc;
    }
    size_t me = k->nscopes++;
    k->scopes[me] = (kc_scope){.model = model, .layers = layers, .sequential = seq, .owner = owner,
                               .depth = depth, .first = k->nlayers};
    size_t i;
    json_t *l;
    /* Layers of this scope first, so that nested scopes' layers follow. */
    json_array_foreach(layers, i, l) {
        npuc_status st = kc_add_layer(k, me, l);
        if (st != NPUC_OK) return st;
    }
    k->scopes[me].n = k->nlayers - k->scopes[me].first; /* with nested scopes' layers, skipped when wiring */
    return NPUC_OK;
}

/* ------------------------------------------------------------ ops */

typedef struct kc_op {
    const char *cls;
    const char *op;
    int prefix;
} kc_op;

static const kc_op KOPS[] = {
    {"InputLayer", "Input", 0},
    {"Conv1DTranspose", "ConvTranspose", 0}, {"Conv2DTranspose", "ConvTranspose", 0},
    {"Conv3DTranspose", "ConvTranspose", 0}, {"Convolution2DTranspose", "ConvTranspose", 0},
    {"DepthwiseConv", "DepthwiseConv", 1},   {"SeparableConv", "SeparableConv", 1},
    {"Conv1D", "Conv", 0}, {"Conv2D", "Conv", 0}, {"Conv3D", "Conv", 0},
    {"Convolution1D", "Conv", 0}, {"Convolution2D", "Conv", 0}, {"Convolution3D", "Conv", 0},
    {"Dense", "Gemm", 0}, {"Embedding", "Embedding", 0},
    {"LSTM", "LSTM", 0}, {"GRU", "GRU", 0}, {"SimpleRNN", "RNN", 0},
    {"BatchNormalization", "BatchNormalization", 0}, {"SyncBatchNormalization", "BatchNormalization", 0},
    {"LayerNormalization", "LayerNormalization", 0}, {"PReLU", "PRelu", 0},
    {"ReLU", "Relu", 0}, {"LeakyReLU", "LeakyRelu", 0}, {"ELU", "Elu", 0}, {"Softmax", "Softmax", 0},
    {"Activation", "Activation", 0}, {"ThresholdedReLU", "Activation", 0},
    {"Dropout", "Dropout", 0}, {"SpatialDropout", "Dropout", 1}, {"GaussianNoise", "Dropout", 0},
    {"GaussianDropout", "Dropout", 0}, {"AlphaDropout", "Dropout", 0}, {"ActivityRegularization", "Identity", 0},
    {"Identity", "Identity", 0},
    {"MaxPool", "MaxPool", 1}, {"AveragePool", "AveragePool", 1}, {"AvgPool", "AveragePool", 1},
    {"GlobalAveragePool", "GlobalAveragePool", 1}, {"GlobalAvgPool", "GlobalAveragePool", 1},
    {"GlobalMaxPool", "GlobalMaxPool", 1},
    {"ZeroPadding", "Pad", 1}, {"Cropping", "Crop", 1}, {"UpSampling", "Upsample", 1},
    {"Add", "Add", 0}, {"Subtract", "Sub", 0}, {"Multiply", "Mul", 0}, {"Maximum", "Max", 0},
    {"Minimum", "Min", 0}, {"Average", "Mean", 0}, {"Concatenate", "Concat", 0},
    {"Flatten", "Flatten", 0}, {"Reshape", "Reshape", 0},
};

const char *npuc__kconfig_op(const char *cls) {
    for (size_t i = 0; i < sizeof KOPS / sizeof KOPS[0]; i++) {
        size_t n = strlen(KOPS[i].cls);
        if (KOPS[i].prefix ? strncmp(cls, KOPS[i].cls, n) == 0 : strcmp(cls, KOPS[i].cls) == 0) return KOPS[i].op;
    }
    return cls;
}

/* The shape an InputLayer states (batch_input_shape / batch_shape), rank -1 when none. */
static int input_shape(json_t *cfg, int64_t *shape) {
    json_t *s = json_object_get(cfg, "batch_input_shape");
    if (!json_is_array(s)) s = json_object_get(cfg, "batch_shape");
    if (!json_is_array(s) || json_array_size(s) > NPUC_MAX_RANK) return -1;
    size_t i;
    json_t *d;
    json_array_foreach(s, i, d) shape[i] = json_is_integer(d) && json_integer_value(d) > 0 ? json_integer_value(d) : -1;
    return (int)json_array_size(s);
}

/* Copies the layer's scalar settings and short integer lists as attributes. */
static npuc_status kc_attrs(kc *k, size_t node, json_t *cfg) {
    const char *key;
    json_t *v;
    size_t n = 0;
    json_object_foreach(cfg, key, v) {
        if (n >= 32) break;
        if (json_is_object(v) || (json_is_array(v) && json_array_size(v) > NPUC_MAX_RANK) || json_is_null(v))
            continue;
        if (json_is_array(v)) {
            size_t i;
            json_t *e;
            int ok = 1;
            json_array_foreach(v, i, e) ok &= json_is_integer(e) || json_is_null(e);
            if (!ok) continue;
        }
        char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        if (!t) return kc_nomem(k);
        if (json_is_string(v)) { /* the text, not its JSON quoting */
            free(t);
            t = npuc__strdup(json_string_value(v));
            if (!t) return kc_nomem(k);
        }
        npuc_status st = npuc__ng_set_attr(k->ctx, k->g, node, key, t);
        free(t);
        if (st != NPUC_OK) return st;
        n++;
    }
    return NPUC_OK;
}

/* ------------------------------------------------------------ nodes */

static void call_name(char *buf, size_t n, const char *layer, size_t call) {
    if (call == 0) snprintf(buf, n, "%s", layer);
    else snprintf(buf, n, "%s#%zu", layer, call);
}

/* How many calls the layer has: its inbound nodes (1 in a Sequential scope
 * or with none listed). */
static size_t layer_calls(const kc *k, const kc_layer *L) {
    if (k->scopes[L->scope].sequential) return 1;
    json_t *nodes = json_object_get(L->j, "inbound_nodes");
    size_t n = json_is_array(nodes) ? json_array_size(nodes) : 0;
    return n ? n : 1;
}

/* Makes a node (and its first output value) for every call of every
 * non-nested layer, in list order. */
static npuc_status kc_make_nodes(kc *k) {
    char name[600];
    for (size_t i = 0; i < k->nlayers; i++) {
        kc_layer *L = &k->layers[i];
        if (L->nested) continue;
        json_t *cfg = json_object_get(L->j, "config");
        size_t calls = layer_calls(k, L);
        for (size_t c = 0; c < calls; c++) {
            if (k->g->nnodes >= NPUC_KC_MAX_LAYERS) {
                char n[32];
                snprintf(n, sizeof n, "%zu", (size_t)NPUC_KC_MAX_LAYERS);
                return kc_bad(k, "more than %s layer calls", n);
            }
            call_name(name, sizeof name, L->name, c);
            int64_t shape[NPUC_MAX_RANK];
            int rank = strcmp(L->cls, "InputLayer") == 0 ? input_shape(cfg, shape) : -1;
            size_t v, nd;
            npuc_status st = npuc__ng_add_value(k->ctx, k->g, name, rank, shape, NPUC_GRAPH_EV_CONFIG,
                                                NPUC_CONF_CERTAIN, "model_config", &v);
            if (st == NPUC_ERR_ARG) return kc_bad(k, "layer '%s' is listed twice", name);
            if (st != NPUC_OK) return st;
            st = npuc__ng_add_node(k->ctx, k->g, name, npuc__kconfig_op(L->cls), L->cls, NULL, 0, &v, 1,
                                   NPUC_GRAPH_EV_CONFIG, NPUC_CONF_CERTAIN, "model_config", &nd);
            if (st == NPUC_ERR_ARG) return kc_bad(k, "layer '%s' is listed twice", name);
            if (st != NPUC_OK) return st;
            if (c == 0) L->first_node = nd;
            k->g->nodes[nd].scope = L->scope;
            if (json_is_object(cfg) && (st = kc_attrs(k, nd, cfg)) != NPUC_OK) return st;
            if (strcmp(L->cls, "InputLayer") == 0) k->g->vals[v].is_input = 1;
        }
        L->ncalls = calls;
    }
    return NPUC_OK;
}

static npuc_status node_add_input(kc *k, size_t node, size_t v) {
    npuc__ng_node *n = &k->g->nodes[node];
    size_t *q = realloc(n->in, (n->nin + 1) * sizeof *q);
    if (!q) return kc_nomem(k);
    n->in = q;
    n->in[n->nin++] = v;
    return NPUC_OK;
}

/* The value for (layer, call, tensor) in scope s: a nested model's output
 * t reads its inner output layer t; an extra tensor index of a plain layer
 * adds an output to its node. */
static npuc_status kc_value(kc *k, size_t s, const char *layer, long call, long tensor, size_t *out, int depth);

/* The values a nested model's output t stands for (its output_layers[t]). */
static npuc_status kc_nested_output(kc *k, const kc_layer *L, long call, long tensor, size_t *out, int depth) {
    if (call > 0)
        return kc_bad(k, "nested model '%s' is called more than once: each call would need its own copy", L->name);
    const kc_scope *sc = &k->scopes[L->inner];
    if (sc->sequential) {
        for (size_t i = sc->first + sc->n; i-- > sc->first;)
            if (k->layers[i].scope == L->inner) return kc_value(k, L->inner, k->layers[i].name, 0, 0, out, depth + 1);
        return kc_bad(k, "nested model '%s' has no layers", L->name);
    }
    json_t *o = json_object_get(json_object_get(sc->model, "config"), "output_layers");
    json_t *ref = json_is_string(json_array_get(o, 0)) ? (tensor == 0 ? o : NULL) : json_array_get(o, (size_t)tensor);
    const char *nm = json_string_value(json_array_get(ref, 0));
    json_t *jn = json_array_get(ref, 1), *jt = json_array_get(ref, 2);
    if (!nm || !json_is_integer(jn) || !json_is_integer(jt))
        return kc_bad(k, "nested model '%s' has no output %ld", L->name, tensor);
    return kc_value(k, L->inner, nm, (long)json_integer_value(jn), (long)json_integer_value(jt), out, depth + 1);
}

static npuc_status kc_value(kc *k, size_t s, const char *layer, long call, long tensor, size_t *out, int depth) {
    if (depth > (int)NPUC_KC_MAX_SCOPE_DEPTH + 2)
        return kc_bad(k, "references through nested models deeper than the nesting at '%s'", layer);
    if (call < 0 || tensor < 0 || tensor > 1024)
        return kc_bad(k, "a reference to '%s' with a negative or huge index", layer);
    char *key = scoped_key(s, layer, call, tensor);
    if (!key) return kc_nomem(k);
    size_t *a = kc_map_get(&k->alias, key);
    free(key);
    if (a) {
        *out = *a;
        return NPUC_OK;
    }
    key = scoped_key(s, layer, -1, 0);
    if (!key) return kc_nomem(k);
    size_t *li = kc_map_get(&k->names, key);
    free(key);
    if (!li) return kc_bad(k, "a reference to layer '%s', which the model does not list", layer);
    kc_layer *L = &k->layers[*li];
    if (L->nested) return kc_nested_output(k, L, call, tensor, out, depth);
    if ((size_t)call >= L->ncalls)
        return kc_bad(k, "a reference to a call of '%s' that the layer does not have", layer);
    size_t node = L->first_node + (size_t)call;
    npuc__ng_node *n = &k->g->nodes[node];
    if (tensor == 0) {
        *out = n->out[0];
        return NPUC_OK;
    }
    char name[640];
    snprintf(name, sizeof name, "%s:%ld", n->name, tensor);
    size_t v = npuc__ng_find_value(k->g, name);
    if (v != NPUC_GRAPH_NONE) {
        if (k->g->vals[v].prod != node)
            return kc_bad(k, "output '%s' of a layer clashes with a layer named so", name);
        *out = v;
        return NPUC_OK;
    }
    npuc_status st = npuc__ng_add_value(k->ctx, k->g, name, -1, NULL, NPUC_GRAPH_EV_CONFIG, NPUC_CONF_CERTAIN,
                                        "model_config", &v);
    if (st != NPUC_OK) return st;
    n = &k->g->nodes[node];
    size_t *q = realloc(n->out, (n->nout + 1) * sizeof *q);
    if (!q) return kc_nomem(k);
    n->out = q;
    n->out[n->nout++] = v;
    k->g->vals[v].prod = node;
    *out = v;
    return NPUC_OK;
}

/* ------------------------------------------------------------ references */

typedef struct kc_ref {
    const char *layer;
    long call, tensor;
} kc_ref;

/* Collects the references of one inbound node, in order: Keras 2 entries
 * [name, node, tensor, kwargs] and Keras 3 __keras_tensor__ objects inside
 * args (at any list depth).  Depth-limited by jansson's parser (2048). */
static npuc_status kc_collect(kc *k, json_t *v, int keras2_entry_ok, kc_ref *refs, size_t *n, size_t cap,
                              const char *layer) {
    if (json_is_array(v)) {
        json_t *j0 = json_array_get(v, 0);
        if (keras2_entry_ok && json_is_string(j0) && json_is_integer(json_array_get(v, 1)) &&
            json_is_integer(json_array_get(v, 2))) {
            if (*n >= cap) return kc_bad(k, "layer '%s' reads more than 4096 tensors in one call", layer);
            refs[(*n)++] = (kc_ref){json_string_value(j0), (long)json_integer_value(json_array_get(v, 1)),
                                    (long)json_integer_value(json_array_get(v, 2))};
            return NPUC_OK;
        }
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
            npuc_status st = kc_collect(k, e, keras2_entry_ok, refs, n, cap, layer);
            if (st != NPUC_OK) return st;
        }
    } else if (json_is_object(v)) {
        const char *cls = json_string_value(json_object_get(v, "class_name"));
        if (cls && strcmp(cls, "__keras_tensor__") == 0) {
            json_t *h = json_object_get(json_object_get(v, "config"), "keras_history");
            const char *nm = json_string_value(json_array_get(h, 0));
            if (!nm || !json_is_integer(json_array_get(h, 1)) || !json_is_integer(json_array_get(h, 2)))
                return kc_bad(k, "layer '%s': a __keras_tensor__ without a keras_history [layer, node, tensor]",
                              layer);
            if (*n >= cap) return kc_bad(k, "layer '%s' reads more than 4096 tensors in one call", layer);
            refs[(*n)++] = (kc_ref){nm, (long)json_integer_value(json_array_get(h, 1)),
                                    (long)json_integer_value(json_array_get(h, 2))};
            return NPUC_OK;
        }
        /* A Keras 3 node: {"args": [...], "kwargs": {...}}: tensors in args,
         * then tensors passed by keyword (attention's value=, a mask=). */
        json_t *args = json_object_get(v, "args"), *kw = json_object_get(v, "kwargs");
        if (args || kw) {
            npuc_status st = args ? kc_collect(k, args, 0, refs, n, cap, layer) : NPUC_OK;
            const char *key;
            json_t *x;
            if (st == NPUC_OK && json_is_object(kw))
                json_object_foreach(kw, key, x) {
                    if ((st = kc_collect(k, x, 0, refs, n, cap, layer)) != NPUC_OK) break;
                }
            return st;
        }
    }
    return NPUC_OK;
}

/* Aliases the input layers of nested model L's scope to the values its call
 * consumed. */
static npuc_status kc_bind_nested(kc *k, kc_layer *L, const size_t *vals, size_t nv) {
    const kc_scope *sc = &k->scopes[L->inner];
    if (sc->sequential) {
        if (!sc->n) return NPUC_OK;
        const kc_layer *first = &k->layers[sc->first];
        if (strcmp(first->cls, "InputLayer") != 0) return NPUC_OK; /* the first layer reads the call's input */
        if (!nv) return NPUC_OK;
        char *key = scoped_key(L->inner, first->name, 0, 0);
        if (!key) return kc_nomem(k);
        int r = kc_map_put(&k->alias, key, vals[0]);
        free(key);
        return r < 0 ? kc_nomem(k) : NPUC_OK;
    }
    json_t *il = json_object_get(json_object_get(sc->model, "config"), "input_layers");
    kc_ref refs[64];
    size_t n = 0;
    if (json_is_string(json_array_get(il, 0))) {
        if (json_is_integer(json_array_get(il, 1))) refs[n++] = (kc_ref){json_string_value(json_array_get(il, 0)), 0, 0};
    } else {
        size_t i;
        json_t *e;
        json_array_foreach(il, i, e) {
            if (n == 64) break;
            const char *nm = json_string_value(json_array_get(e, 0));
            if (nm) refs[n++] = (kc_ref){nm, 0, 0};
        }
    }
    for (size_t i = 0; i < n && i < nv; i++) {
        char *key = scoped_key(L->inner, refs[i].layer, 0, 0);
        if (!key) return kc_nomem(k);
        int r = kc_map_put(&k->alias, key, vals[i]);
        free(key);
        if (r < 0) return kc_nomem(k);
        /* the inner InputLayer's node now reads the outer value: not a model input */
        key = scoped_key(L->inner, refs[i].layer, -1, 0);
        if (!key) return kc_nomem(k);
        size_t *li = kc_map_get(&k->names, key);
        free(key);
        if (li && !k->layers[*li].nested && k->layers[*li].first_node != NPUC_GRAPH_NONE) {
            size_t nd = k->layers[*li].first_node;
            if (k->g->nodes[nd].nin == 0) {
                k->g->vals[k->g->nodes[nd].out[0]].is_input = 0;
                npuc_status st = node_add_input(k, nd, vals[i]);
                if (st != NPUC_OK) return st;
            }
        }
    }
    return NPUC_OK;
}

/* The scope's layers in list order: a plain layer's calls read their
 * references; a nested model binds its inputs, then its own layers are
 * wired (they follow in st->layers, in their scope's turn). */
static npuc_status kc_wire_scope(kc *k, size_t s, kc_ref *refs, size_t *vals) {
    kc_scope *sc = &k->scopes[s];
    size_t prev = NPUC_GRAPH_NONE; /* Sequential: the value the next layer reads */
    if (sc->sequential && sc->owner != NPUC_GRAPH_NONE) {
        /* a nested Sequential whose first layer is not an InputLayer reads the call's input */
        char *key = scoped_key(s, "\x1finput", 0, 0);
        if (!key) return kc_nomem(k);
        size_t *a = kc_map_get(&k->alias, key);
        free(key);
        if (a) prev = *a;
    }
    for (size_t i = sc->first; i < sc->first + sc->n; i++) {
        kc_layer *L = &k->layers[i];
        if (L->scope != s) continue;
        if (sc->sequential) {
            if (L->nested) {
                if (prev != NPUC_GRAPH_NONE) {
                    npuc_status st = kc_bind_nested(k, L, &prev, 1);
                    if (st == NPUC_OK) {
                        char *key = scoped_key(L->inner, "\x1finput", 0, 0);
                        if (!key) return kc_nomem(k);
                        int r = kc_map_put(&k->alias, key, prev);
                        free(key);
                        if (r < 0) return kc_nomem(k);
                    }
                    if (st != NPUC_OK) return st;
                }
                npuc_status st = kc_wire_scope(k, L->inner, refs, vals);
                if (st == NPUC_OK) st = kc_nested_output(k, L, 0, 0, &prev, 0);
                if (st != NPUC_OK) return st;
                continue;
            }
            size_t node = L->first_node;
            char *key = scoped_key(s, L->name, 0, 0);
            if (!key) return kc_nomem(k);
            size_t *a = kc_map_get(&k->alias, key);
            free(key);
            if (a) { /* an InputLayer bound to the outer call's input */
                k->g->vals[k->g->nodes[node].out[0]].is_input = 0;
                npuc_status st = node_add_input(k, node, *a);
                if (st != NPUC_OK) return st;
            } else if (prev != NPUC_GRAPH_NONE && strcmp(L->cls, "InputLayer") != 0) {
                npuc_status st = node_add_input(k, node, prev);
                if (st != NPUC_OK) return st;
            }
            prev = k->g->nodes[node].out[0];
            continue;
        }
        json_t *nodes = json_object_get(L->j, "inbound_nodes");
        for (size_t c = 0; c < (L->nested ? 1 : L->ncalls); c++) {
            size_t nr = 0;
            npuc_status st = kc_collect(k, json_array_get(nodes, c), 1, refs, &nr, NPUC_KC_MAX_REFS, L->name);
            if (st != NPUC_OK) return st;
            k->refs += nr;
            if (k->refs > NPUC_KC_MAX_EDGES) return kc_bad(k, "more than 4194304 references");
            for (size_t r = 0; r < nr; r++) {
                if (!L->nested && refs[r].call >= (long)c && strcmp(refs[r].layer, L->name) == 0)
                    return kc_bad(k, "layer '%s' consumes its own output", L->name);
                st = kc_value(k, s, refs[r].layer, refs[r].call, refs[r].tensor, &vals[r], 0);
                if (st != NPUC_OK) return st;
            }
            if (L->nested) {
                st = kc_bind_nested(k, L, vals, nr);
                if (st == NPUC_OK && nr) {
                    char *key = scoped_key(L->inner, "\x1finput", 0, 0);
                    if (!key) return kc_nomem(k);
                    int rr = kc_map_put(&k->alias, key, vals[0]);
                    free(key);
                    if (rr < 0) return kc_nomem(k);
                }
                if (st == NPUC_OK) st = kc_wire_scope(k, L->inner, refs, vals);
                if (st != NPUC_OK) return st;
                continue;
            }
            for (size_t r = 0; r < nr; r++) {
                st = node_add_input(k, L->first_node + c, vals[r]);
                if (st != NPUC_OK) return st;
            }
        }
    }
    return NPUC_OK;
}

/* Marks the root's outputs. */
static npuc_status kc_outputs(kc *k) {
    kc_scope *sc = &k->scopes[0];
    size_t v;
    if (sc->sequential) {
        for (size_t i = sc->first + sc->n; i-- > sc->first;) {
            if (k->layers[i].scope != 0) continue;
            npuc_status st = kc_value(k, 0, k->layers[i].name, 0, 0, &v, 0);
            if (st != NPUC_OK) return st;
            k->g->vals[v].is_output = 1;
            return NPUC_OK;
        }
        return NPUC_OK;
    }
    json_t *o = json_object_get(json_object_get(sc->model, "config"), "output_layers");
    kc_ref refs[64];
    size_t n = 0;
    if (json_is_string(json_array_get(o, 0))) {
        refs[n++] = (kc_ref){json_string_value(json_array_get(o, 0)), (long)json_integer_value(json_array_get(o, 1)),
                             (long)json_integer_value(json_array_get(o, 2))};
    } else {
        size_t i;
        json_t *e;
        json_array_foreach(o, i, e) {
            if (n == 64) break;
            const char *nm = json_string_value(json_array_get(e, 0));
            if (nm) refs[n++] = (kc_ref){nm, (long)json_integer_value(json_array_get(e, 1)),
                                         (long)json_integer_value(json_array_get(e, 2))};
        }
    }
    for (size_t i = 0; i < n; i++) {
        npuc_status st = kc_value(k, 0, refs[i].layer, refs[i].call, refs[i].tensor, &v, 0);
        if (st != NPUC_OK) return st;
        k->g->vals[v].is_output = 1;
    }
    return NPUC_OK;
}

/* Reads text into k (k->g the graph, k->layers and k->scopes pointing into
 * *rootp, the caller's to json_decref, also on failure); kc_free frees the
 * rest. */
static npuc_status kc_read(kc *k, const char *text, size_t len, json_t **rootp) {
    *rootp = NULL;
    if (len > NPUC_KC_MAX_TEXT)
        return npuc_fail(k->ctx, NPUC_ERR_FORMAT, "%s: %zu bytes, more than the %zu a model configuration may have",
                         k->label, len, (size_t)NPUC_KC_MAX_TEXT);
    json_error_t err;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    if (!root) return npuc_fail(k->ctx, NPUC_ERR_FORMAT, "%s: line %d: %s", k->label, err.line, err.text);
    *rootp = root;
    npuc_status st = NPUC_OK;
    kc_ref *refs = malloc(NPUC_KC_MAX_REFS * sizeof *refs);
    size_t *vals = malloc(NPUC_KC_MAX_REFS * sizeof *vals);
    k->g = npuc__ng_new();
    if (!refs || !vals || !k->g) { st = kc_nomem(k); goto done; }
    k->g->channels_last = 1;
    if (!json_is_object(root)) { st = kc_bad(k, "not a JSON object"); goto done; }
    st = kc_read_scope(k, root, NPUC_GRAPH_NONE, 0);
    if (st != NPUC_OK) goto done;
    st = kc_make_nodes(k);
    if (st == NPUC_OK) st = kc_wire_scope(k, 0, refs, vals);
    if (st == NPUC_OK) st = kc_outputs(k);
    if (st == NPUC_OK) {
        st = npuc__ng_check(k->ctx, k->g);
        if (st != NPUC_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", npuc_ctx_errmsg(k->ctx));
            st = npuc_fail(k->ctx, NPUC_ERR_FORMAT, "%s: %s", k->label, strncmp(msg, "graph: ", 7) ? msg : msg + 7);
        }
    }
done:
    free(refs);
    free(vals);
    return st;
}

static void kc_free(kc *k) {
    kc_map_free(&k->names);
    kc_map_free(&k->alias);
    free(k->layers);
    free(k->scopes);
    npuc__ng_free(k->g);
    k->g = NULL;
}

npuc_status npuc__kconfig_parse(npuc_ctx *ctx, const char *label, const char *text, size_t len, npuc__ng **out) {
    *out = NULL;
    kc k = {.ctx = ctx, .label = label};
    json_t *root;
    npuc_status st = kc_read(&k, text, len, &root);
    if (st == NPUC_OK) {
        *out = k.g;
        k.g = NULL;
    }
    kc_free(&k);
    json_decref(root);
    return st;
}

npuc_status npuc__kconfig_layers(npuc_ctx *ctx, const char *label, const char *text, size_t len, char ***names,
                                 char ***classes, size_t *n) {
    *names = *classes = NULL;
    *n = 0;
    if (len > NPUC_KC_MAX_TEXT)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: %zu bytes, more than the %zu a model configuration may have",
                         label, len, (size_t)NPUC_KC_MAX_TEXT);
    json_error_t err;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    if (!root) return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: line %d: %s", label, err.line, err.text);
    kc k = {.ctx = ctx, .label = label};
    npuc_status st = json_is_object(root) ? kc_read_scope(&k, root, NPUC_GRAPH_NONE, 0)
                                          : kc_bad(&k, "not a JSON object");
    char **nm = NULL, **cl = NULL;
    if (st == NPUC_OK) {
        nm = calloc(k.nlayers ? k.nlayers : 1, sizeof *nm);
        cl = calloc(k.nlayers ? k.nlayers : 1, sizeof *cl);
        if (!nm || !cl) st = kc_nomem(&k);
        for (size_t i = 0; st == NPUC_OK && i < k.nlayers; i++) {
            nm[i] = npuc__strdup(k.layers[i].name);
            cl[i] = npuc__strdup(k.layers[i].cls);
            if (!nm[i] || !cl[i]) st = kc_nomem(&k);
        }
        if (st != NPUC_OK) {
            for (size_t i = 0; nm && cl && i < k.nlayers; i++) {
                free(nm[i]);
                free(cl[i]);
            }
            free(nm);
            free(cl);
        } else {
            *names = nm;
            *classes = cl;
            *n = k.nlayers;
        }
    }
    kc_map_free(&k.names);
    kc_map_free(&k.alias);
    free(k.layers);
    free(k.scopes);
    json_decref(root);
    return st;
}

/* ------------------------------------------------------------ writing the graph back */

/* A reference a removed layer's consumers read instead: its input's
 * (layer, call, tensor). */
typedef struct kc_subst {
    const char *layer;
    long call, tensor;
} kc_subst;

/* The (layer, call, tensor) of value v of the original graph k->g, in the
 * scope of its producer; 0 when v has no producer. */
static int kc_ref_of(const kc *k, size_t v, size_t *layer, kc_subst *r) {
    size_t p = k->g->vals[v].prod;
    if (p == NPUC_GRAPH_NONE) return 0;
    for (size_t i = 0; i < k->nlayers; i++) {
        const kc_layer *L = &k->layers[i];
        if (L->nested || L->first_node == NPUC_GRAPH_NONE || p < L->first_node || p >= L->first_node + L->ncalls)
            continue;
        const npuc__ng_node *n = &k->g->nodes[p];
        long t = 0;
        for (size_t o = 0; o < n->nout; o++)
            if (n->out[o] == v) {
                const char *c = strrchr(k->g->vals[v].name, ':');
                t = o == 0 || !c ? 0 : strtol(c + 1, NULL, 10);
            }
        *layer = i;
        *r = (kc_subst){L->name, (long)(p - L->first_node), t};
        return 1;
    }
    return 0;
}

/* Points every reference below v (Keras 2 entries, Keras 3 keras_history;
 * the traversal of kc_collect) that names a removed layer of the scope at
 * its substitute.  sub[i] for layer i, layer NULL when kept. */
static int kc_rewire(const kc *k, size_t scope, json_t *v, int keras2_entry_ok, const kc_subst *sub) {
    json_t *ref = NULL;
    if (json_is_array(v) && keras2_entry_ok && json_is_string(json_array_get(v, 0)) &&
        json_is_integer(json_array_get(v, 1)) && json_is_integer(json_array_get(v, 2)))
        ref = v;
    else if (json_is_object(v)) {
        const char *cls = json_string_value(json_object_get(v, "class_name"));
        if (cls && strcmp(cls, "__keras_tensor__") == 0) {
            ref = json_object_get(json_object_get(v, "config"), "keras_history");
            if (!json_is_string(json_array_get(ref, 0))) return 0;
        }
    }
    if (ref) {
        for (int hops = 0; hops < NPUC_KC_MAX_LAYERS; hops++) {
            char *key = scoped_key(scope, json_string_value(json_array_get(ref, 0)), -1, 0);
            if (!key) return -1;
            size_t *li = kc_map_get(&k->names, key);
            free(key);
            if (!li || !sub[*li].layer) return 0;
            const kc_subst *s = &sub[*li];
            if (json_array_set_new(ref, 0, json_string(s->layer)) || json_array_set_new(ref, 1, json_integer(s->call)) ||
                json_array_set_new(ref, 2, json_integer(s->tensor)))
                return -1;
        }
        return 0;
    }
    if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) if (kc_rewire(k, scope, e, keras2_entry_ok, sub) != 0) return -1;
    } else if (json_is_object(v)) {
        json_t *args = json_object_get(v, "args"), *kw = json_object_get(v, "kwargs");
        if (args && kc_rewire(k, scope, args, 0, sub) != 0) return -1;
        const char *key;
        json_t *x;
        if (json_is_object(kw))
            json_object_foreach(kw, key, x) if (kc_rewire(k, scope, x, 0, sub) != 0) return -1;
    }
    return 0;
}

/* The configuration field a layer's kernel states, and where in the Keras
 * kernel it reads: Conv*D [..., in, filters], Conv*DTranspose [..., filters,
 * in], SeparableConv*D's pointwise [1, 1, in, filters], Dense [in, units].
 * 0 for a class with no such field. */
static int width_field(const char *cls, const char **field, const char **role, int *from_end) {
    *field = "filters";
    *role = "kernel";
    *from_end = 1;
    if (!strcmp(cls, "Dense")) *field = "units";
    else if (!strcmp(cls, "Conv1DTranspose") || !strcmp(cls, "Conv2DTranspose") || !strcmp(cls, "Conv3DTranspose"))
        *from_end = 2;
    else if (!strcmp(cls, "SeparableConv1D") || !strcmp(cls, "SeparableConv2D")) *role = "pointwise_kernel";
    else if (strcmp(cls, "Conv1D") != 0 && strcmp(cls, "Conv2D") != 0 && strcmp(cls, "Conv3D") != 0) return 0;
    return 1;
}

/* Brings the configuration fields of layer L up to its node in g: the width
 * its kernel states, use_bias when the node has a bias. */
static int kc_sync_fields(const npuc__ng *g, size_t node, const kc_layer *L, int *changed, int64_t *was,
                          int64_t *now) {
    json_t *cfg = json_object_get(L->j, "config");
    *was = *now = 0;
    if (!json_is_object(cfg)) return 0;
    const npuc__ng_node *n = &g->nodes[node];
    const char *field, *role;
    int from_end;
    for (size_t w = 0; w < n->nw; w++) {
        const npuc_graph_weight *W = &n->w[w];
        if (strcmp(W->role, "bias") == 0 && json_is_boolean(json_object_get(cfg, "use_bias")) &&
            !json_is_true(json_object_get(cfg, "use_bias"))) {
            if (json_object_set_new(cfg, "use_bias", json_true())) return -1;
            (*changed)++;
        }
        if (!width_field(L->cls, &field, &role, &from_end) || strcmp(W->role, role) != 0 || W->rank < 2) continue;
        json_t *v = json_object_get(cfg, field);
        const json_int_t want = (json_int_t)W->shape[W->rank - from_end];
        if (!json_is_integer(v) || want <= 0 || json_integer_value(v) == want) continue;
        *was = (int64_t)json_integer_value(v);
        *now = (int64_t)want;
        if (json_object_set_new(cfg, field, json_integer(want))) return -1;
        (*changed)++;
    }
    return 0;
}

/* The layer of k whose call-0 node is named `name`, or NULL. */
static kc_layer *kc_layer_of_node(kc *k, const char *name) {
    size_t n0 = npuc__ng_find_node(k->g, name);
    for (size_t i = 0; n0 != NPUC_GRAPH_NONE && i < k->nlayers; i++)
        if (!k->layers[i].nested && k->layers[i].first_node == n0) return &k->layers[i];
    return NULL;
}

/* A shape list field (Reshape target_shape, InputLayer batch_input_shape /
 * batch_shape) whose last entry is the channel count `was`, every other
 * entry 1 or null (the batch): it then holds exactly that many values, so
 * the new count is proven to go there.  1 set, 0 not such a list. */
static int kc_set_channels(json_t *list, int64_t was, int64_t now) {
    size_t n = json_array_size(list);
    if (!n || !json_is_integer(json_array_get(list, n - 1)) || json_integer_value(json_array_get(list, n - 1)) != was)
        return 0;
    for (size_t i = 0; i + 1 < n; i++) {
        json_t *e = json_array_get(list, i);
        if (!json_is_null(e) && !(json_is_integer(e) && json_integer_value(e) == 1)) return 0;
    }
    return json_array_set_new(list, n - 1, json_integer(now)) == 0;
}

/* Follows the output of node `from` of g, whose channel count went from
 * `was` to `now`, to the layers that consume those channels: a weighted
 * consumer takes them through its kernel (already in g); a Reshape or a
 * nested model's InputLayer stating the count in a shape is updated when
 * the shape is proven to be just the channels (kc_set_channels), else the
 * write is refused naming both layers: a configuration that would not load
 * is never written silently. */
static npuc_status kc_follow(kc *k, const npuc__ng *g, size_t from, int64_t was, int64_t now, int *changed) {
    size_t *queue = malloc((g->nnodes + 1) * sizeof *queue), nq = 0;
    unsigned char *seen = calloc(g->nnodes + 1, 1), *mixed = calloc(g->nnodes + 1, 1);
    size_t *cons = malloc((g->nnodes + 1) * sizeof *cons);
    npuc_status st = NPUC_OK;
    if (!queue || !seen || !mixed || !cons) { st = kc_nomem(k); goto done; }
    queue[nq++] = from;
    seen[from] = 1;
    for (size_t qi = 0; qi < nq && st == NPUC_OK; qi++) {
        const npuc__ng_node *n = &g->nodes[queue[qi]];
        for (size_t o = 0; o < n->nout && st == NPUC_OK; o++) {
            size_t nc = npuc__ng_consumers(g, n->out[o], cons, g->nnodes);
            for (size_t c = 0; c < nc && st == NPUC_OK; c++) {
                const npuc__ng_node *C = &g->nodes[cons[c]];
                npuc__ng_kind kind = npuc__ng_op_kind(C->op);
                if (kind == NPUC_NG_WEIGHTED) continue;
                int carries = kind == NPUC_NG_CONCAT || kind == NPUC_NG_FLATTEN || mixed[queue[qi]];
                if (kind == NPUC_NG_RESHAPE || kind == NPUC_NG_SOURCE) {
                    kc_layer *L = kc_layer_of_node(k, C->name);
                    json_t *cfg = L ? json_object_get(L->j, "config") : NULL;
                    json_t *sh = json_object_get(cfg, kind == NPUC_NG_RESHAPE ? "target_shape" : "batch_input_shape");
                    if (!sh && kind == NPUC_NG_SOURCE) sh = json_object_get(cfg, "batch_shape");
                    if (sh && (carries || !kc_set_channels(sh, was, now))) {
                        st = npuc_fail(k->ctx, NPUC_ERR_UNSUPPORTED,
                                       "%s: layer '%s' (%s) states a shape that carries the channels of '%s' "
                                       "(%lld, now %lld), and it cannot be proven which entry counts them: not "
                                       "rewritten", k->label, C->name, C->source_op ? C->source_op : C->op,
                                       g->nodes[from].name,
                                       (long long)was, (long long)now);
                        break;
                    }
                    if (sh) (*changed)++;
                    if (kind == NPUC_NG_RESHAPE) continue; /* its output is the stated shape */
                }
                if (!seen[cons[c]]) {
                    seen[cons[c]] = 1;
                    mixed[cons[c]] = (unsigned char)carries;
                    queue[nq++] = cons[c];
                }
            }
        }
    }
done:
    free(queue);
    free(seen);
    free(mixed);
    free(cons);
    return st;
}

npuc_status npuc__kconfig_write(npuc_ctx *ctx, const char *label, const char *text, size_t len, const npuc__ng *g,
                                char **out) {
    *out = NULL;
    kc k = {.ctx = ctx, .label = label};
    json_t *root;
    kc_subst *sub = NULL;
    int changed = 0;
    npuc_status st = kc_read(&k, text, len, &root);
    if (st != NPUC_OK) goto done;
    sub = calloc(k.nlayers ? k.nlayers : 1, sizeof *sub);
    if (!sub) { st = kc_nomem(&k); goto done; }
    /* Layers whose nodes the edited graph no longer has were removed (a
     * folded BatchNorm): their consumers read their input instead. */
    for (size_t i = 0; i < k.nlayers && st == NPUC_OK; i++) {
        kc_layer *L = &k.layers[i];
        if (L->nested || L->first_node == NPUC_GRAPH_NONE) continue;
        const npuc__ng_node *n0 = &k.g->nodes[L->first_node];
        size_t node = npuc__ng_find_node(g, n0->name);
        if (node != NPUC_GRAPH_NONE) {
            int64_t was, now;
            if (kc_sync_fields(g, node, L, &changed, &was, &now) != 0) st = kc_nomem(&k);
            else if (was != now) st = kc_follow(&k, g, node, was, now, &changed);
            continue;
        }
        size_t pl;
        if (L->ncalls != 1 || n0->nin != 1 || !kc_ref_of(&k, n0->in[0], &pl, &sub[i]) ||
            k.layers[pl].scope != L->scope)
            st = npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: layer '%s' left the graph, but the configuration can "
                           "only drop a layer called once on one input of its own model", label, L->name);
    }
    /* Rewired first (a substitute's name lives in the tree), then dropped. */
    for (size_t s = 0; s < k.nscopes && st == NPUC_OK; s++) {
        kc_scope *sc = &k.scopes[s];
        if (sc->sequential) continue;
        size_t i;
        json_t *l;
        json_array_foreach(sc->layers, i, l) {
            if (kc_rewire(&k, s, json_object_get(l, "inbound_nodes"), 1, sub) != 0) { st = kc_nomem(&k); break; }
        }
        json_t *o = json_object_get(json_object_get(sc->model, "config"), "output_layers");
        if (st == NPUC_OK && o && kc_rewire(&k, s, o, 1, sub) != 0) st = kc_nomem(&k);
    }
    for (size_t s = 0; s < k.nscopes && st == NPUC_OK; s++) {
        kc_scope *sc = &k.scopes[s];
        for (size_t i = json_array_size(sc->layers); i-- > 0 && st == NPUC_OK;) {
            char *key = scoped_key(s, layer_name(json_array_get(sc->layers, i)), -1, 0);
            size_t *li = key ? kc_map_get(&k.names, key) : NULL;
            free(key);
            if (!li || !sub[*li].layer) continue;
            if (json_array_remove(sc->layers, i)) st = kc_nomem(&k);
            changed++;
        }
    }
    if (st == NPUC_OK && changed && !(*out = json_dumps(root, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17))))
        st = kc_nomem(&k);
done:
    free(sub);
    kc_free(&k);
    json_decref(root);
    return st;
}

npuc_status npuc__kconfig_graph_write(npuc_ctx *ctx, const char *label, const char *stored, const npuc_graph *g,
                                      char **out) {
    return npuc__kconfig_write(ctx, label, stored, strlen(stored), g, out);
}
