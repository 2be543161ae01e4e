/*
 * prune_graph.c - who consumes a layer's output channels, read from a
 * weight file that has no graph.
 *
 * Structured pruning removes output channels of a producer (a conv or
 * linear layer).  The same channel space runs through the producer's bias,
 * every BatchNorm on it, any depthwise convolution on it (channel i in,
 * channel i out, with its own bias and BatchNorm) and ends in the input
 * channels of the consumers.  A chain lists all of these; if any link is
 * uncertain the chain is not "ok" and the caller zeroes filters instead of
 * removing them.
 *
 * Evidence, most certain first (docs/sparsity.md has the full rules):
 *   explicit   --next PRODUCER=CONSUMER[,...] and --graph FILE ("next" map,
 *              "bn_pairs" as in the data catalogs), read by prune_edges.c
 *   topology   a Keras model_config (HDF5 root attribute or safetensors
 *              metadata): inbound nodes give exact edges; activations,
 *              padding, pooling and dropout pass channels through; merges
 *              (Add, Concatenate, Multiply), reshapes and the model outputs
 *              end the chain
 *   naming     PyTorch nn.Sequential names: features.0 -> features.1 -> ...
 *              inside containers whose children are numbered, climbing out
 *              of numbered containers; a custom module (children with
 *              names, e.g. a residual block) is never entered or left,
 *              because its forward may add a skip connection.  Leaving a
 *              top-level container for the next top-level module in
 *              storage order (features -> classifier) is a guess
 *   order      Keras HDF5 files without model_config: the next layer in
 *              layer_names order (a guess: merge layers are invisible)
 * Guesses are skipped with --no-guess, and with any storage order that is
 * just alphabetical (it then says nothing about the graph).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/prune/prune_internal.h"

/* ------------------------------------------------------------ tensors */

int npuc__out_axis(const npuc_tensor_info *t) { return npuc_layout_out_axis(t->layout, t->rank); }

int npuc__in_axis(const npuc_tensor_info *t) {
    if (npuc__out_axis(t) < 0) return -1;
    switch (t->layout) {
    case NPUC_LAYOUT_OI: case NPUC_LAYOUT_OIHW: return 1;
    case NPUC_LAYOUT_IO: case NPUC_LAYOUT_IOHW: return 0;
    case NPUC_LAYOUT_HWIO: case NPUC_LAYOUT_HWIM: return t->rank - 2;
    default: return -1;
    }
}

uint64_t npuc__out_channels(const npuc_tensor_info *t) {
    uint64_t o, c, i;
    if (npuc_layout_view(t, &o, &c, &i) != NPUC_OK) return 0;
    return c;
}

uint64_t npuc__in_channels(const npuc_tensor_info *t) {
    int a = npuc__in_axis(t);
    return a < 0 ? 0 : (uint64_t)t->shape[a];
}

/* A depthwise convolution passing `channels` channels through one to one
 * (channels 0: any depthwise convolution). */
int npuc__is_dw(const npuc_tensor_info *t, uint64_t channels) {
    const int r = t->rank;
    if (t->layout == NPUC_LAYOUT_HWIM)
        return r >= 3 && t->shape[r - 1] == 1 && (!channels || (uint64_t)t->shape[r - 2] == channels);
    if (t->layout == NPUC_LAYOUT_OIHW && t->shape[1] == 1) {
        if (channels) return (uint64_t)t->shape[0] == channels && channels > 1;
        return t->role == NPUC_ROLE_DWCONV;
    }
    return 0;
}

int npuc__graph_is_dw(const npuc__graph *g, size_t w, uint64_t channels) {
    return npuc__is_dw(npuc__gt(g, (int64_t)w), channels);
}

uint64_t npuc__bn_channels(const npuc__graph *g, const npuc__bn *b) {
    int64_t i = b->mean >= 0 ? b->mean : b->var >= 0 ? b->var : b->gamma >= 0 ? b->gamma : b->beta;
    return i >= 0 ? npuc__gt(g, i)->numel : 0;
}

/* ------------------------------------------------------------ modules */

static int is_keras_leaf(const char *name) {
    static const char *const LEAVES[] = {"kernel", "depthwise_kernel", "gamma", "beta", "moving_mean",
                                         "moving_variance", "recurrent_kernel", "pointwise_kernel", NULL};
    const char *leaf = strrchr(name, '/');
    leaf = leaf ? leaf + 1 : name;
    size_t n = strlen(leaf);
    if (n >= 2 && leaf[n - 2] == ':' && isdigit((unsigned char)leaf[n - 1])) n -= 2;
    for (int k = 0; LEAVES[k]; k++)
        if (strlen(LEAVES[k]) == n && memcmp(LEAVES[k], leaf, n) == 0) return 1;
    return 0;
}

int64_t npuc__find_mod(const npuc__graph *g, const char *key) {
    for (size_t i = 0; i < g->nmods; i++)
        if (strcmp(g->mods[i].key, key) == 0) return (int64_t)i;
    return -1;
}

static npuc_status add_mod(npuc_ctx *ctx, npuc__graph *g, const char *key, size_t klen, size_t first,
                           size_t *out) {
    for (size_t i = 0; i < g->nmods; i++)
        if (strlen(g->mods[i].key) == klen && memcmp(g->mods[i].key, key, klen) == 0) {
            *out = i;
            return NPUC_OK;
        }
    if (g->nmods == g->capmods) {
        size_t nc = g->capmods ? 2 * g->capmods : 64;
        npuc__mod *p = realloc(g->mods, nc * sizeof *p);
        if (!p) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        g->mods = p;
        g->capmods = nc;
    }
    npuc__mod *md = &g->mods[g->nmods];
    memset(md, 0, sizeof *md);
    md->key = malloc(klen + 1);
    if (!md->key) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    memcpy(md->key, key, klen);
    md->key[klen] = 0;
    md->weight = md->bias = -1;
    md->bn.gamma = md->bn.beta = md->bn.mean = md->bn.var = md->bn.count = -1;
    md->first = first;
    *out = g->nmods++;
    return NPUC_OK;
}

static npuc_status build_modules(npuc_ctx *ctx, npuc__graph *g) {
    npuc_model *m = g->m;
    const size_t n = npuc_model_count(m);
    npuc_status st;
    g->keras = npuc_model_is_keras(m);
    for (size_t i = 0; i < n && !g->keras; i++) g->keras = is_keras_leaf(npuc_model_tensor(m, i)->name);
    g->alphabetical = n >= 3;
    for (size_t i = 1; i < n && g->alphabetical; i++)
        if (strcmp(npuc_model_tensor(m, i - 1)->name, npuc_model_tensor(m, i)->name) > 0) g->alphabetical = 0;
    for (size_t i = 0; i < n; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        const char *key = t->name;
        size_t klen;
        if (g->keras && t->group && *t->group) {
            key = t->group;
            klen = strlen(key);
        } else {
            const char *d = strrchr(t->name, g->keras ? '/' : '.');
            klen = d ? (size_t)(d - t->name) : strlen(t->name);
        }
        size_t mi = 0;
        if ((st = add_mod(ctx, g, key, klen, i, &mi)) != NPUC_OK) return st;
        g->mod_of[i] = mi;
        npuc__mod *md = &g->mods[mi];
        md->bn.mod = mi;
        switch (t->role) {
        case NPUC_ROLE_BN_GAMMA: md->is_bn = 1; md->bn.gamma = (int64_t)i; continue;
        case NPUC_ROLE_BN_BETA: md->is_bn = 1; md->bn.beta = (int64_t)i; continue;
        case NPUC_ROLE_BN_MEAN: md->is_bn = 1; md->bn.mean = (int64_t)i; continue;
        case NPUC_ROLE_BN_VAR: md->is_bn = 1; md->bn.var = (int64_t)i; continue;
        case NPUC_ROLE_BN_COUNT: md->is_bn = 1; md->bn.count = (int64_t)i; continue;
        default: break;
        }
        if (t->rank >= 2 && npuc_dtype_is_float(t->dtype) && npuc__out_axis(t) >= 0 && md->weight < 0)
            md->weight = (int64_t)i;
        else if (t->rank == 1 && t->role == NPUC_ROLE_BIAS && md->bias < 0)
            md->bias = (int64_t)i;
        else
            md->other = 1;
    }
    for (size_t k = 0; k < g->nmods; k++) {
        npuc__mod *md = &g->mods[k];
        if (md->is_bn) {
            /* A BatchNorm needs its statistics, all of one length. */
            uint64_t c = npuc__bn_channels(g, &md->bn);
            const int64_t parts[4] = {md->bn.gamma, md->bn.beta, md->bn.mean, md->bn.var};
            int ok = md->bn.mean >= 0 && md->bn.var >= 0 && md->weight < 0;
            for (int p = 0; p < 4; p++)
                if (parts[p] >= 0 && (npuc__gt(g, parts[p])->rank != 1 || npuc__gt(g, parts[p])->numel != c)) ok = 0;
            if (!ok) { md->is_bn = 0; md->other = 1; }
        }
        if (md->weight >= 0 && md->bias >= 0 && npuc__gt(g, md->bias)->numel != npuc__out_channels(npuc__gt(g, md->weight))) {
            md->bias = -1;
            md->other = 1;
        }
    }
    return NPUC_OK;
}

const npuc__mod *npuc__graph_mod(const npuc__graph *g, size_t tensor) { return &g->mods[g->mod_of[tensor]]; }

/* ------------------------------------------------------------ Keras topology */

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

static int64_t find_layer(const npuc__graph *g, const char *name) {
    for (size_t i = 0; i < g->nkl; i++)
        if (strcmp(g->kl[i].name, name) == 0) return (int64_t)i;
    return -1;
}

/* Reads a Keras model_config; a config it does not understand leaves
 * g->topo = 0 (and chains then fall back), never an error. */
static npuc_status read_topology(npuc_ctx *ctx, npuc__graph *g) {
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
            int64_t p = find_layer(g, refs[r]);
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
            int64_t p = find_layer(g, refs[r]);
            if (p >= 0) g->kl[p].is_output = 1;
        }
    }
    g->topo = 1;
done:
    free(refs);
    json_decref(root);
    return st;
}

static int cls_is(const char *c, const char *const *list, int prefix) {
    for (int i = 0; list[i]; i++)
        if (prefix ? strncmp(c, list[i], strlen(list[i])) == 0 : strcmp(c, list[i]) == 0) return 1;
    return 0;
}

/* Weightless layers that keep channel i as channel i. */
static int cls_passthrough(const char *c) {
    static const char *const EXACT[] = {"Activation", "ReLU", "LeakyReLU", "ELU", "ThresholdedReLU",
                                        "Dropout", "GaussianNoise", "GaussianDropout", "AlphaDropout",
                                        "ActivityRegularization", "Flatten", "Identity", NULL};
    static const char *const PREFIX[] = {"ZeroPadding", "Cropping", "MaxPool", "AveragePool", "AvgPool",
                                         "GlobalAveragePool", "GlobalAvgPool", "GlobalMaxPool",
                                         "UpSampling", "SpatialDropout", NULL};
    return cls_is(c, EXACT, 0) || cls_is(c, PREFIX, 1);
}

static int cls_weighted(const char *c) {
    static const char *const W[] = {"Conv1D", "Conv2D", "Conv3D", "Convolution1D", "Convolution2D",
                                    "Convolution3D", "Dense", "DepthwiseConv1D", "DepthwiseConv2D",
                                    "BatchNormalization", "SyncBatchNormalization", NULL};
    return cls_is(c, W, 0);
}

/* ------------------------------------------------------------ the walk */

typedef struct walk {
    npuc__graph *g;
    npuc__chain *c;
    const char *edge;  /* the explicit statement being followed, or NULL */
    int depth;
    int used_explicit; /* an explicit edge or BatchNorm pair was used */
} walk;

/* Ends the walk: an explicit edge makes it the caller's error (-1, status
 * in *st), anything else a fallback with a reason (1). */
static int wfail(walk *w, npuc_ctx *ctx, npuc_status *st, const char *fmt, ...) NPUC_PRINTF(4, 5);
static int wfail(walk *w, npuc_ctx *ctx, npuc_status *st, const char *fmt, ...) {
    char buf[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (w->edge) {
        *st = npuc_fail(ctx, NPUC_ERR_ARG, "%s: %s: %s", npuc_model_path(w->g->m), w->edge, buf);
        return -1;
    }
    npuc__fmt(w->c->why, sizeof w->c->why, "%s", buf);
    return 1;
}

static int is_numeric(const char *s, size_t n, long *v) {
    if (n == 0 || n > 9) return 0;
    long x = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i])) return 0;
        x = x * 10 + (s[i] - '0');
    }
    *v = x;
    return 1;
}

/* The first module inside key (a leaf module, or the lowest-numbered child
 * recursively); -1 with *why when key is a module with named children. */
static int64_t descend(const npuc__graph *g, const char *key, char *why, size_t wn) {
    char cur[512];
    snprintf(cur, sizeof cur, "%s", key);
    for (int depth = 0; depth < 32; depth++) {
        int64_t exact = npuc__find_mod(g, cur);
        if (exact >= 0) return exact;
        const size_t kl = strlen(cur);
        long best = -1;
        for (size_t i = 0; i < g->nmods; i++) {
            const char *k = g->mods[i].key;
            if (strncmp(k, cur, kl) != 0 || k[kl] != '.') continue;
            const char *c = k + kl + 1, *d = strchr(c, '.');
            size_t cl = d ? (size_t)(d - c) : strlen(c);
            long v;
            if (!is_numeric(c, cl, &v)) {
                npuc__fmt(why, wn, "'%s' is a custom module (named children): its forward is unknown", cur);
                return -1;
            }
            if (best < 0 || v < best) best = v;
        }
        if (best < 0) {
            npuc__fmt(why, wn, "no module '%s'", cur);
            return -1;
        }
        size_t l = strlen(cur);
        snprintf(cur + l, sizeof cur - l, ".%ld", best);
    }
    npuc__fmt(why, wn, "modules nested too deeply under '%s'", key);
    return -1;
}

/* PyTorch nn.Sequential successor of module x (see the file comment).
 * Returns the module, or -1 with c->why (and c->output when nothing
 * follows). */
static int64_t seq_next(walk *w, size_t x) {
    npuc__graph *g = w->g;
    char cur[512];
    int up = 0;
    snprintf(cur, sizeof cur, "%s", g->mods[x].key);
    for (int depth = 0; depth < 64; depth++) {
        char *dot = strrchr(cur, '.');
        if (dot) {
            long i;
            const size_t pl = (size_t)(dot - cur);
            if (!is_numeric(dot + 1, strlen(dot + 1), &i)) {
                *dot = 0;
                npuc__fmt(w->c->why, sizeof w->c->why,
                         "'%s' is inside '%s', a custom module whose forward is unknown", g->mods[x].key, cur);
                return -1;
            }
            long best = -1;
            for (size_t k = 0; k < g->nmods; k++) {
                const char *key = g->mods[k].key;
                if (strncmp(key, cur, pl) != 0 || key[pl] != '.') continue;
                const char *c = key + pl + 1, *d = strchr(c, '.');
                long v;
                if (is_numeric(c, d ? (size_t)(d - c) : strlen(c), &v) && v > i && (best < 0 || v < best)) best = v;
            }
            if (best >= 0) {
                char next[512];
                snprintf(next, sizeof next, "%.*s.%ld", (int)pl, cur, best);
                int64_t r = descend(g, next, w->c->why, sizeof w->c->why);
                return r;
            }
            *dot = 0; /* last child: climb out of the container */
            up = 1;
            continue;
        }
        /* A top-level name. */
        if (!up) {
            int last = 1;
            for (size_t k = 0; k < g->nmods && last; k++) last = g->mods[k].first <= g->mods[x].first;
            if (last && !g->alphabetical) {
                npuc__fmt(w->c->why, sizeof w->c->why, "nothing follows '%s': it feeds the model output", cur);
                w->c->output = 1;
            } else {
                npuc__fmt(w->c->why, sizeof w->c->why, "'%s' is not inside an nn.Sequential", g->mods[x].key);
            }
            return -1;
        }
        if (g->alphabetical || g->no_guess) {
            npuc__fmt(w->c->why, sizeof w->c->why, "'%s' ends its container; %s", cur,
                     g->no_guess ? "following storage order is a guess (--no-guess)"
                                 : "storage order is alphabetical, so it says nothing about what follows");
            return -1;
        }
        const size_t cl = strlen(cur);
        size_t last = 0;
        for (size_t k = 0; k < g->nmods; k++) {
            const char *key = g->mods[k].key;
            if (strncmp(key, cur, cl) == 0 && (key[cl] == 0 || key[cl] == '.') && g->mods[k].first > last)
                last = g->mods[k].first;
        }
        int64_t y = -1;
        for (size_t k = 0; k < g->nmods; k++)
            if (g->mods[k].first > last && (y < 0 || g->mods[k].first < g->mods[y].first)) y = (int64_t)k;
        if (y < 0) {
            npuc__fmt(w->c->why, sizeof w->c->why, "nothing follows '%s': it feeds the model output", cur);
            w->c->output = 1;
            return -1;
        }
        char top[512];
        const char *yk = g->mods[y].key, *d = strchr(yk, '.');
        snprintf(top, sizeof top, "%.*s", (int)(d ? (size_t)(d - yk) : strlen(yk)), yk);
        w->c->guess = 1;
        return descend(g, top, w->c->why, sizeof w->c->why);
    }
    npuc__fmt(w->c->why, sizeof w->c->why, "modules nested too deeply");
    return -1;
}

/* Keras topology: the weighted layers (BatchNorm included) that consume
 * layer li, through channel-preserving weightless layers. */
static int topo_collect(walk *w, size_t li, size_t *out, size_t *n, int depth) {
    npuc__graph *g = w->g;
    const npuc__klayer *L = &g->kl[li];
    if (L->is_output) {
        npuc__fmt(w->c->why, sizeof w->c->why, "'%s' is a model output", L->name);
        w->c->output = 1;
        return 1;
    }
    if (depth > 64) {
        npuc__fmt(w->c->why, sizeof w->c->why, "topology too deep");
        return 1;
    }
    if (L->nout == 0) {
        npuc__fmt(w->c->why, sizeof w->c->why, "nothing consumes '%s'", L->name);
        w->c->output = 1;
        return 1;
    }
    for (size_t k = 0; k < L->nout; k++) {
        const npuc__klayer *Z = &g->kl[L->out[k]];
        if (Z->nin != 1) {
            npuc__fmt(w->c->why, sizeof w->c->why, "'%s' (%s) takes several inputs", Z->name, Z->cls);
            return 1;
        }
        if (cls_passthrough(Z->cls) && Z->mod < 0) {
            if (topo_collect(w, L->out[k], out, n, depth + 1)) return 1;
            continue;
        }
        if (!cls_weighted(Z->cls)) {
            npuc__fmt(w->c->why, sizeof w->c->why, "'%s' is a %s layer", Z->name, Z->cls);
            return 1;
        }
        if (Z->mod < 0) {
            npuc__fmt(w->c->why, sizeof w->c->why, "layer '%s' has no weights in the file", Z->name);
            return 1;
        }
        if (Z->groups > 1 && strncmp(Z->cls, "Depthwise", 9) != 0) {
            npuc__fmt(w->c->why, sizeof w->c->why, "'%s' is a grouped convolution", Z->name);
            return 1;
        }
        if (*n >= NPUC_CHAIN_MAX) {
            npuc__fmt(w->c->why, sizeof w->c->why, "too many consumers");
            return 1;
        }
        out[(*n)++] = (size_t)Z->mod;
    }
    return 0;
}

/* The modules directly after module x by the automatic evidence; 0 with
 * out/n, or 1 with c->why. */
static int auto_next(walk *w, size_t x, size_t *out, size_t *n) {
    npuc__graph *g = w->g;
    *n = 0;
    if (g->keras && g->topo) {
        int64_t li = find_layer(g, g->mods[x].key);
        if (li < 0) {
            npuc__fmt(w->c->why, sizeof w->c->why, "layer '%s' is not in model_config", g->mods[x].key);
            return 1;
        }
        if (g->kl[li].nin > 1) {
            npuc__fmt(w->c->why, sizeof w->c->why, "layer '%s' is applied to several inputs", g->mods[x].key);
            return 1;
        }
        return topo_collect(w, (size_t)li, out, n, 0);
    }
    if (g->keras) {
        if (!g->layer_order || g->no_guess || g->alphabetical) {
            npuc__fmt(w->c->why, sizeof w->c->why, "no model_config%s: give --next or --graph",
                     g->layer_order ? " and layer order is a guess (--no-guess)" : " and no Keras layer order");
            return 1;
        }
        int64_t y = -1;
        for (size_t k = 0; k < g->nmods; k++)
            if (g->mods[k].first > g->mods[x].first && (y < 0 || g->mods[k].first < g->mods[y].first)) y = (int64_t)k;
        if (y < 0) {
            npuc__fmt(w->c->why, sizeof w->c->why, "'%s' is the last layer: it feeds the model output", g->mods[x].key);
            w->c->output = 1;
            return 1;
        }
        w->c->guess = 1;
        out[(*n)++] = (size_t)y;
        return 0;
    }
    int64_t y = seq_next(w, x);
    if (y < 0) return 1;
    out[(*n)++] = (size_t)y;
    return 0;
}

const npuc__xedge *npuc__explicit_of(const npuc__graph *g, size_t x) {
    for (size_t i = 0; i < g->nxe; i++)
        if (g->xe[i].prod == x) return &g->xe[i];
    return NULL;
}

static int64_t explicit_bn(const npuc__graph *g, size_t x) {
    for (size_t i = 0; i < g->nxb; i++)
        if (g->xb[i].prod == x) return (int64_t)g->xb[i].bn;
    return -1;
}

static int visit(walk *w, npuc_ctx *ctx, npuc_status *st, size_t y);

static int add_bn(walk *w, npuc_ctx *ctx, npuc_status *st, size_t bm) {
    npuc__chain *c = w->c;
    const npuc__mod *b = &w->g->mods[bm];
    if (npuc__bn_channels(w->g, &b->bn) != c->channels)
        return wfail(w, ctx, st, "BatchNorm '%s' has %llu channels, the producer %llu", b->key,
                     (unsigned long long)npuc__bn_channels(w->g, &b->bn), (unsigned long long)c->channels);
    for (size_t i = 0; i < c->nbn; i++)
        if (c->bn[i].mod == bm) return wfail(w, ctx, st, "BatchNorm '%s' reached twice", b->key);
    if (c->nbn >= NPUC_CHAIN_MAX) return wfail(w, ctx, st, "too many BatchNorms on one channel space");
    c->bn[c->nbn++] = b->bn;
    return 0;
}

/* Follows the channel space out of module x (the producer, a depthwise
 * conv or a BatchNorm on the space). */
static int follow(walk *w, npuc_ctx *ctx, npuc_status *st, size_t x) {
    if (++w->depth > 64) return wfail(w, ctx, st, "the chain is too long (a cycle?)");
    const npuc__xedge *e = npuc__explicit_of(w->g, x);
    size_t next[NPUC_CHAIN_MAX], nn = 0;
    int rc;
    if (e) {
        const char *saved = w->edge;
        int64_t b = explicit_bn(w->g, x);
        if (b < 0 && !w->g->mods[x].is_bn) {
            /* No stated BatchNorm: take one the automatic evidence puts right after x. */
            walk probe = *w;
            npuc__chain tmp = *w->c;
            probe.c = &tmp;
            probe.edge = NULL;
            size_t an[NPUC_CHAIN_MAX], na = 0;
            if (auto_next(&probe, x, an, &na) == 0 && na == 1 && w->g->mods[an[0]].is_bn) b = (int64_t)an[0];
        }
        if (b >= 0 && (rc = add_bn(w, ctx, st, (size_t)b)) != 0) return rc;
        w->used_explicit = 1;
        w->edge = e->text;
        for (size_t i = 0; i < e->ncons; i++)
            if ((rc = visit(w, ctx, st, e->cons[i])) != 0) return rc;
        w->edge = saved;
        return 0;
    }
    int64_t b = explicit_bn(w->g, x);
    if (b >= 0) {
        if ((rc = add_bn(w, ctx, st, (size_t)b)) != 0) return rc;
        w->used_explicit = 1;
        x = (size_t)b; /* the space continues after the stated BatchNorm */
        if (npuc__explicit_of(w->g, x)) return follow(w, ctx, st, x);
    }
    const char *saved = w->edge;
    w->edge = NULL; /* automatic evidence: failures fall back */
    rc = auto_next(w, x, next, &nn);
    if (rc) {
        w->edge = saved;
        return rc;
    }
    for (size_t i = 0; i < nn && rc == 0; i++) rc = visit(w, ctx, st, next[i]);
    w->edge = saved;
    return rc;
}

static int visit(walk *w, npuc_ctx *ctx, npuc_status *st, size_t y) {
    npuc__graph *g = w->g;
    npuc__chain *c = w->c;
    const npuc__mod *md = &g->mods[y];
    if (md->is_bn) {
        int rc = add_bn(w, ctx, st, y);
        return rc ? rc : follow(w, ctx, st, y);
    }
    if (md->weight < 0)
        return wfail(w, ctx, st, "'%s' has no conv/linear weight or BatchNorm statistics", md->key);
    if (md->other && !g->keras)
        return wfail(w, ctx, st, "module '%s' holds tensors npuc does not know how to shrink", md->key);
    const npuc_tensor_info *t = npuc__gt(g, md->weight);
    if ((size_t)md->weight == c->producer) return wfail(w, ctx, st, "'%s' is reached twice (a cycle?)", md->key);
    for (size_t i = 0; i < c->ndw; i++)
        if (c->dw[i].weight == (size_t)md->weight) return wfail(w, ctx, st, "'%s' is reached twice", md->key);
    for (size_t i = 0; i < c->ncons; i++)
        if (c->cons[i] == (size_t)md->weight) return wfail(w, ctx, st, "'%s' is reached twice", md->key);
    if (npuc__is_dw(t, c->channels)) {
        if (c->ndw >= NPUC_CHAIN_MAX) return wfail(w, ctx, st, "too many depthwise convolutions");
        c->dw[c->ndw].weight = (size_t)md->weight;
        c->dw[c->ndw].bias = md->bias;
        c->ndw++;
        return follow(w, ctx, st, y);
    }
    if (npuc__in_channels(t) != c->channels)
        return wfail(w, ctx, st, "consumer '%s'%s has %llu input channels, the producer %llu output channels",
                     t->name, t->layout == NPUC_LAYOUT_OIHW && t->shape[1] == 1 ? " (grouped?)" : "",
                     (unsigned long long)npuc__in_channels(t), (unsigned long long)c->channels);
    if (c->ncons >= NPUC_CHAIN_MAX) return wfail(w, ctx, st, "too many consumers");
    c->cons[c->ncons++] = (size_t)md->weight;
    return 0;
}

npuc_status npuc__chain_of(npuc_ctx *ctx, npuc__graph *g, size_t wt, npuc__chain *c) {
    memset(c, 0, sizeof *c);
    c->producer = wt;
    c->bias = -1;
    const npuc_tensor_info *t = npuc__gt(g, (int64_t)wt);
    const size_t x = g->mod_of[wt];
    if (g->mods[x].weight != (int64_t)wt) {
        npuc__fmt(c->why, sizeof c->why, "not the weight of module '%s'", g->mods[x].key);
        return NPUC_OK;
    }
    c->bias = g->mods[x].bias;
    c->channels = npuc__out_channels(t);
    walk w = {g, c, NULL, 0, 0};
    npuc_status st = NPUC_OK;
    if (npuc__is_dw(t, 0)) {
        npuc__fmt(c->why, sizeof c->why, "a depthwise convolution: its channels belong to the layer feeding it");
        return NPUC_OK;
    }
    int rc = follow(&w, ctx, &st, x);
    if (rc < 0) return st;
    c->ok = rc == 0 && c->ncons > 0;
    if (rc == 0 && c->ncons == 0) npuc__fmt(c->why, sizeof c->why, "no consumer found");
    snprintf(c->how, sizeof c->how, "%s%s",
             w.used_explicit ? "--next/--graph" : g->topo ? "keras topology" : g->keras ? "layer order" : "sequential naming",
             c->guess ? " (guess)" : "");
    return NPUC_OK;
}

/* ------------------------------------------------------------ build / free */

npuc_status npuc__graph_build(npuc_ctx *ctx, npuc_model *m, const npuc_prune_opts *o, npuc__graph **out) {
    npuc_status st;
    npuc__graph *g = calloc(1, sizeof *g);
    *out = NULL;
    if (!g) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    g->m = m;
    g->no_guess = o->no_guess;
    g->mod_of = calloc(npuc_model_count(m) ? npuc_model_count(m) : 1, sizeof *g->mod_of);
    if (!g->mod_of) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto fail; }
    if ((st = build_modules(ctx, g)) != NPUC_OK) goto fail;
    if ((st = read_topology(ctx, g)) != NPUC_OK) goto fail;
    g->layer_order = g->keras && !g->topo && npuc_model_is_keras(m);
    if ((st = npuc__graph_edges(ctx, g, o)) != NPUC_OK) goto fail;
    /* Walk every explicit producer now, so a bad edge fails before anything
     * is written. */
    for (size_t i = 0; i < g->nxe; i++) {
        const npuc__mod *md = &g->mods[g->xe[i].prod];
        if (md->weight < 0 || npuc__is_dw(npuc__gt(g, md->weight), 0)) continue;
        npuc__chain c;
        if ((st = npuc__chain_of(ctx, g, (size_t)md->weight, &c)) != NPUC_OK) goto fail;
    }
    *out = g;
    return NPUC_OK;
fail:
    npuc__graph_free(g);
    return st;
}

void npuc__graph_free(npuc__graph *g) {
    if (!g) return;
    for (size_t i = 0; i < g->nmods; i++) free(g->mods[i].key);
    free(g->mods);
    free(g->mod_of);
    for (size_t i = 0; i < g->nkl; i++) {
        free(g->kl[i].name);
        free(g->kl[i].cls);
        free(g->kl[i].in);
        free(g->kl[i].out);
    }
    free(g->kl);
    for (size_t i = 0; i < g->nxe; i++) {
        free(g->xe[i].cons);
        free(g->xe[i].text);
    }
    free(g->xe);
    free(g->xb);
    free(g);
}
