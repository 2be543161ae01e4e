/*
 * bnfold_topo.c - the Keras topology (model_config JSON) as BatchNorm
 * folding needs it: which layer feeds each BatchNormalization layer, whether
 * that edge may be folded, and the config rewritten after folding.
 *
 * A Keras model.save file carries the model's graph as JSON in the root
 * attribute model_config.  Each layer lists its inbound nodes: one node per
 * call of the layer, each node the list of tensors it consumed, named by
 * (layer, node index, tensor index).  Keras 2 writes an entry as the array
 * [layer, node, tensor, kwargs]; Keras 3 writes a node as {"args": [...]}
 * holding {"class_name": "__keras_tensor__", "config": {"keras_history":
 * [layer, node, tensor]}}.  Sequential models have no inbound nodes: each
 * layer consumes the previous one.  A layer whose config holds a "layers"
 * list is a nested model, read as a scope of its own.
 *
 * An edge producer -> BatchNorm can be folded only when nothing else sees
 * the producer's output as it was: the producer has no activation, is called
 * once, and its output feeds the BatchNorm alone; the BatchNorm normalises
 * the channel axis.  Anything else is reported as the reason to skip.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "passes/bnfold/bnfold_internal.h"

static const char *const PRODUCER_CLASSES[] = {
    "Conv1D", "Conv2D", "Conv3D", "DepthwiseConv1D", "DepthwiseConv2D",
    "SeparableConv1D", "SeparableConv2D", "Dense",
};

static int is_producer_class(const char *c) {
    for (size_t i = 0; i < sizeof PRODUCER_CLASSES / sizeof PRODUCER_CLASSES[0]; i++)
        if (strcmp(c, PRODUCER_CLASSES[i]) == 0) return 1;
    return 0;
}

/* References followed per node; a node with more (a huge Concatenate) counts
 * the rest as consumers, which can only make an edge look unsafe. */
#define MAX_REFS 4096

static int is_bn_class(const char *c) {
    return strcmp(c, "BatchNormalization") == 0 || strcmp(c, "SyncBatchNormalization") == 0;
}

/* The channel axis index of a channels_last output, or -1 when unknown. */
static int last_axis_of(const char *c) {
    if (strcmp(c, "Dense") == 0) return 1;
    size_t n = strlen(c);
    if (n >= 2 && c[n - 1] == 'D' && c[n - 2] >= '1' && c[n - 2] <= '3') return c[n - 2] - '0' + 1;
    return -1;
}

int npuc__bnf_natcmp(const char *a, const char *b) {
    const char *pa = a, *pb = b;
    while (*pa && *pb) {
        if (*pa >= '0' && *pa <= '9' && *pb >= '0' && *pb <= '9') {
            while (*pa == '0' && pa[1] >= '0' && pa[1] <= '9') pa++;
            while (*pb == '0' && pb[1] >= '0' && pb[1] <= '9') pb++;
            size_t la = 0, lb = 0;
            while (pa[la] >= '0' && pa[la] <= '9') la++;
            while (pb[lb] >= '0' && pb[lb] <= '9') lb++;
            if (la != lb) return la < lb ? -1 : 1;
            int c = memcmp(pa, pb, la);
            if (c) return c < 0 ? -1 : 1;
            pa += la;
            pb += lb;
            continue;
        }
        if (*pa != *pb) return (unsigned char)*pa < (unsigned char)*pb ? -1 : 1;
        pa++;
        pb++;
    }
    if (*pa || *pb) return *pa ? 1 : -1;
    int c = strcmp(a, b);
    return c < 0 ? -1 : c > 0;
}

const char *npuc__bnf_leaf(const char *s) {
    const char *l = s;
    for (const char *p = s; *p; p++)
        if (*p == '/') l = p + 1;
    return l;
}

/* ------------------------------------------------------------ scopes */

static json_t *scope_layers(json_t *model, int *sequential) {
    const char *cls = json_string_value(json_object_get(model, "class_name"));
    json_t *cfg = json_object_get(model, "config");
    *sequential = cls && strcmp(cls, "Sequential") == 0;
    if (json_is_array(cfg)) return cfg; /* Keras < 2.2.3 Sequential */
    json_t *l = json_object_get(cfg, "layers");
    return json_is_array(l) ? l : NULL;
}

static const char *layer_name(json_t *l) {
    const char *s = json_string_value(json_object_get(l, "name"));
    if (!s) s = json_string_value(json_object_get(json_object_get(l, "config"), "name"));
    return s;
}

static const char *layer_class(json_t *l) {
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

/* The input references of one node: arrays whose element 0 is the producing
 * layer's name (Keras 2 entries or Keras 3 keras_history).  Returns how many
 * there are; at most max are stored. */
static size_t node_refs(json_t *node, json_t **out, size_t max) {
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

static size_t node_count(json_t *l) {
    json_t *nodes = json_object_get(l, "inbound_nodes");
    return json_is_array(nodes) ? json_array_size(nodes) : 0;
}

/* The model outputs as references (output_layers is [[name, 0, 0], ...], or
 * a single [name, 0, 0] in Keras 3). */
static size_t output_refs(json_t *model, json_t **out, size_t max) {
    json_t *o = json_object_get(json_object_get(model, "config"), "output_layers");
    if (!json_is_array(o)) return 0;
    if (json_is_string(json_array_get(o, 0))) {
        if (max) out[0] = o;
        return 1;
    }
    return node_refs(o, out, max);
}

static json_t *find_layer(json_t *layers, const char *name, size_t *idx) {
    size_t i;
    json_t *l;
    json_array_foreach(layers, i, l) {
        const char *s = layer_name(l);
        if (s && strcmp(s, name) == 0) {
            if (idx) *idx = i;
            return l;
        }
    }
    return NULL;
}

/* How many references in the scope (every node of every layer, and the
 * outputs) name layer `name`; (size_t)-1 when out of memory. */
static size_t consumers(json_t *model, json_t *layers, int sequential, const char *name) {
    size_t count = 0, i;
    json_t *l;
    if (sequential) {
        size_t at;
        if (!find_layer(layers, name, &at)) return 0;
        return at + 1 < json_array_size(layers) ? 1 : 0;
    }
    json_t **refs = malloc(MAX_REFS * sizeof *refs);
    if (!refs) return (size_t)-1;
    json_array_foreach(layers, i, l) {
        json_t *nodes = json_object_get(l, "inbound_nodes");
        size_t j;
        json_t *node;
        json_array_foreach(nodes, j, node) {
            size_t n = node_refs(node, refs, MAX_REFS);
            if (n > MAX_REFS) count += n - MAX_REFS; /* assume the worst of the uncounted */
            for (size_t k = 0; k < n && k < MAX_REFS; k++)
                if (strcmp(json_string_value(json_array_get(refs[k], 0)), name) == 0) count++;
        }
    }
    size_t n = output_refs(model, refs, MAX_REFS);
    for (size_t k = 0; k < n && k < MAX_REFS; k++)
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

/* Why the edge producer -> bn cannot be folded, or "" when it can. */
static void judge_edge(json_t *model, json_t *layers, int sequential, json_t *p, json_t *bn,
                       char *why, size_t n) {
    const char *pname = layer_name(p), *pcls = layer_class(p);
    json_t *pcfg = json_object_get(p, "config"), *bcfg = json_object_get(bn, "config");
    why[0] = 0;
    if (!is_producer_class(pcls)) {
        if (strstr(pcls, "Transpose"))
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
    if (!sequential && node_count(p) > 1) {
        snprintf(why, n, "'%s' is applied to %zu inputs (shared layer)", pname, node_count(p));
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
        int last = last_axis_of(pcls);
        int ok = first ? a == 1 : (a == -1 || (last > 0 && a == last));
        if (!ok) {
            snprintf(why, n, "BatchNorm axis %lld is not the channel axis of '%s'", a, pname);
            return;
        }
    }
}

static npuc_status add_edge(npuc__bnf_topo *t, npuc__bnf_edge *e) {
    npuc__bnf_edge *a = realloc(t->e, (t->n + 1) * sizeof *a);
    if (!a) return NPUC_ERR_NOMEM;
    t->e = a;
    a[t->n++] = *e;
    return NPUC_OK;
}

static npuc_status read_scope(json_t *model, npuc__bnf_topo *t, int depth) {
    int sequential;
    json_t *layers = scope_layers(model, &sequential);
    if (!layers || depth > 32) return NPUC_OK;
    t->understood = 1;
    size_t i;
    json_t *l;
    json_array_foreach(layers, i, l) {
        int nested_seq;
        if (json_is_object(json_object_get(l, "config")) && scope_layers(l, &nested_seq)) {
            npuc_status st = read_scope(l, t, depth + 1);
            if (st != NPUC_OK) return st;
            continue;
        }
        if (!is_bn_class(layer_class(l)) || !layer_name(l)) continue;
        npuc__bnf_edge e;
        memset(&e, 0, sizeof e);
        int nomem = 0;
        e.bn = dup_or_null(layer_name(l), &nomem);
        json_t *epsv = json_object_get(json_object_get(l, "config"), "epsilon");
        e.eps = json_is_number(epsv) ? json_number_value(epsv) : NAN;
        json_t *p = NULL;
        if (sequential) {
            if (i == 0) snprintf(e.skip, sizeof e.skip, "BatchNorm without a producer: first layer of the model");
            else p = json_array_get(layers, i - 1);
        } else {
            json_t *nodes = json_object_get(l, "inbound_nodes"), *refs[2];
            e.shared = node_count(l) > 1;
            size_t nref = json_array_size(nodes) ? node_refs(json_array_get(nodes, 0), refs, 2) : 0;
            if (nref == 0)
                snprintf(e.skip, sizeof e.skip, "BatchNorm without a producer: no input in model_config");
            else if (nref > 1)
                snprintf(e.skip, sizeof e.skip, "BatchNorm takes %zu inputs", nref);
            else {
                const char *pn = json_string_value(json_array_get(refs[0], 0));
                p = find_layer(layers, pn, NULL);
                if (!p) {
                    e.producer = dup_or_null(pn, &nomem);
                    snprintf(e.skip, sizeof e.skip, "its input '%s' is not a layer of the model", pn);
                }
            }
        }
        if (p) {
            e.producer = dup_or_null(layer_name(p), &nomem);
            e.producer_class = dup_or_null(layer_class(p), &nomem);
            judge_edge(model, layers, sequential, p, l, e.skip, sizeof e.skip);
        }
        if (nomem || add_edge(t, &e) != NPUC_OK) {
            free(e.bn);
            free(e.producer);
            free(e.producer_class);
            return NPUC_ERR_NOMEM;
        }
    }
    return NPUC_OK;
}

npuc_status npuc__bnf_topo_read(const char *json, npuc__bnf_topo *out) {
    memset(out, 0, sizeof out[0]);
    if (!json) return NPUC_OK;
    json_error_t err;
    json_t *root = json_loads(json, JSON_REJECT_DUPLICATES, &err);
    if (!root) return NPUC_OK;
    /* A whole-model file's config may sit under "config" of a wrapper. */
    npuc_status st = json_is_object(root) ? read_scope(root, out, 0) : NPUC_OK;
    json_decref(root);
    if (st != NPUC_OK) npuc__bnf_topo_free(out);
    return st;
}

void npuc__bnf_topo_free(npuc__bnf_topo *t) {
    if (!t) return;
    for (size_t i = 0; i < t->n; i++) {
        free(t->e[i].bn);
        free(t->e[i].producer);
        free(t->e[i].producer_class);
    }
    free(t->e);
    memset(t, 0, sizeof *t);
}

/* ------------------------------------------------------------ rewrite */

typedef struct fold_list {
    const char *const *bns, *const *convs;
    size_t n;
} fold_list;

static int listed(const fold_list *f, const char *bn, const char *conv) {
    for (size_t k = 0; k < f->n; k++)
        if (strcmp(npuc__bnf_leaf(f->bns[k]), bn) == 0 && (!conv || strcmp(npuc__bnf_leaf(f->convs[k]), conv) == 0))
            return 1;
    return 0;
}

static int is_listed_conv(const fold_list *f, const char *conv) {
    for (size_t k = 0; k < f->n; k++)
        if (strcmp(npuc__bnf_leaf(f->convs[k]), conv) == 0) return 1;
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
    json_t *layers = scope_layers(model, &sequential);
    if (!layers || depth > 32) return 0;
    size_t nl = json_array_size(layers);
    json_t **rm_names = calloc(nl ? nl : 1, sizeof *rm_names), **with = calloc(nl ? nl : 1, sizeof *with);
    json_t **refs = malloc(MAX_REFS * sizeof *refs);
    size_t nr = 0;
    int rc = -1;
    if (!rm_names || !with || !refs) goto done;
    /* Nested models first, then this scope's BatchNorms. */
    for (size_t i = 0; i < nl; i++) {
        json_t *l = json_array_get(layers, i);
        int s;
        if (json_is_object(json_object_get(l, "config")) && scope_layers(l, &s)) {
            if (rewrite_scope(l, f, depth + 1, changed) != 0) goto done;
        }
    }
    for (size_t i = nl; i-- > 0;) {
        json_t *l = json_array_get(layers, i);
        const char *name = layer_name(l);
        if (!name || !is_bn_class(layer_class(l))) continue;
        json_t *src = NULL;
        const char *pn = NULL;
        if (sequential) {
            if (i == 0) continue;
            pn = layer_name(json_array_get(layers, i - 1));
        } else {
            json_t *nodes = json_object_get(l, "inbound_nodes"), *r[2];
            if (json_array_size(nodes) != 1 || node_refs(json_array_get(nodes, 0), r, 2) != 1) continue;
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
                size_t n = node_refs(node, refs, MAX_REFS);
                if (rewire(refs, n < MAX_REFS ? n : MAX_REFS, rm_names, with, nr) != 0) goto done;
            }
        }
        size_t n = output_refs(model, refs, MAX_REFS);
        if (rewire(refs, n < MAX_REFS ? n : MAX_REFS, rm_names, with, nr) != 0) goto done;
    }
    /* Folded producers now carry a bias. */
    size_t i;
    json_t *l;
    json_array_foreach(layers, i, l) {
        const char *name = layer_name(l);
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

char *npuc__bnf_topo_rewrite(const char *json, const char *const *bns, const char *const *convs,
                             size_t n, int *err) {
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
