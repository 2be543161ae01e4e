/*
 * graph_next.c - which modules consume a module's output channels, by the
 * automatic evidence (graph_edges.c has the stated edges).
 *
 * Evidence, most certain first (docs/sparsity.md has the full rules):
 *   config       a Keras model_config: inbound nodes give exact edges;
 *                activations, padding, pooling and dropout pass channels
 *                through; merges (Add, Concatenate, Multiply), reshapes and
 *                the model outputs end the search
 *   layer-order  Keras HDF5 files without model_config: the next layer in
 *                layer_names order (a guess: merge layers are invisible)
 *   name         PyTorch nn.Sequential names: features.0 -> features.1 ->
 *                ... inside containers whose children are numbered,
 *                climbing out of numbered containers; a custom module
 *                (children with names, e.g. a residual block) is never
 *                entered or left, because its forward may add a skip
 *                connection.  A file whose top-level names are all numbers
 *                (0.weight, 1.running_mean, 3.weight) is the state of an
 *                nn.Sequential itself: the root is then a numbered container
 *                and its last child feeds the model output.  Leaving a
 *                top-level container for the next top-level module in
 *                storage order (features -> classifier) is a guess
 * Guesses are refused with g->no_guess (a guess is also marked, with what
 * it rests on, so a pass can list it and apply it only when told to), and
 * storage order is never followed when it is just alphabetical (it then says
 * nothing about the graph).
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "graph/graph_internal.h"

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
                npuc__graph_fmt(why, wn, "'%s' is a custom module (named children): its forward is unknown", cur);
                return -1;
            }
            if (best < 0 || v < best) best = v;
        }
        if (best < 0) {
            npuc__graph_fmt(why, wn, "no module '%s'", cur);
            return -1;
        }
        size_t l = strlen(cur);
        snprintf(cur + l, sizeof cur - l, ".%ld", best);
    }
    npuc__graph_fmt(why, wn, "modules nested too deeply under '%s'", key);
    return -1;
}

/* 1 when every module's first name component is a number: the file is the
 * state of an nn.Sequential (the root is a numbered container). */
static int root_is_sequential(const npuc__graph *g) {
    for (size_t k = 0; k < g->nmods; k++) {
        const char *key = g->mods[k].key, *d = strchr(key, '.');
        long v;
        if (!is_numeric(key, d ? (size_t)(d - key) : strlen(key), &v)) return 0;
    }
    return g->nmods > 0;
}

/* The child of the root nn.Sequential after top-level index i, or -1 with
 * r->why (r->output when i is its last child). */
static int64_t root_next(const npuc__graph *g, long i, npuc__next *r) {
    long best = -1;
    for (size_t k = 0; k < g->nmods; k++) {
        const char *key = g->mods[k].key, *d = strchr(key, '.');
        long v;
        if (is_numeric(key, d ? (size_t)(d - key) : strlen(key), &v) && v > i && (best < 0 || v < best)) best = v;
    }
    if (best < 0) {
        npuc__graph_fmt(r->why, sizeof r->why, "nothing follows '%ld' in the top-level nn.Sequential: it feeds the "
                        "model output", i);
        r->output = 1;
        return -1;
    }
    char next[32];
    snprintf(next, sizeof next, "%ld", best);
    return descend(g, next, r->why, sizeof r->why);
}

/* PyTorch nn.Sequential successor of module x (see the file comment).
 * Returns the module, or -1 with r->why (and r->output when nothing
 * follows). */
static int64_t seq_next(const npuc__graph *g, size_t x, npuc__next *r) {
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
                npuc__graph_fmt(r->why, sizeof r->why,
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
                return descend(g, next, r->why, sizeof r->why);
            }
            *dot = 0; /* last child: climb out of the container */
            up = 1;
            continue;
        }
        /* A top-level name. */
        long ti;
        if (is_numeric(cur, strlen(cur), &ti) && root_is_sequential(g)) return root_next(g, ti, r);
        if (!up) {
            int last = 1;
            for (size_t k = 0; k < g->nmods && last; k++) last = g->mods[k].first <= g->mods[x].first;
            if (last && !g->alphabetical) {
                npuc__graph_fmt(r->why, sizeof r->why, "nothing follows '%s': it feeds the model output", cur);
                r->output = 1;
            } else {
                npuc__graph_fmt(r->why, sizeof r->why, "'%s' is not inside an nn.Sequential", g->mods[x].key);
            }
            return -1;
        }
        if (g->alphabetical || g->no_guess) {
            npuc__graph_fmt(r->why, sizeof r->why, "'%s' ends its container; %s", cur,
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
            npuc__graph_fmt(r->why, sizeof r->why, "nothing follows '%s': it feeds the model output", cur);
            r->output = 1;
            return -1;
        }
        char top[512];
        const char *yk = g->mods[y].key, *d = strchr(yk, '.');
        snprintf(top, sizeof top, "%.*s", (int)(d ? (size_t)(d - yk) : strlen(yk)), yk);
        r->guess = 1;
        npuc__graph_fmt(r->guess_why, sizeof r->guess_why,
                        "'%s' ends its container and '%s' is the next module in storage order", cur, top);
        return descend(g, top, r->why, sizeof r->why);
    }
    npuc__graph_fmt(r->why, sizeof r->why, "modules nested too deeply");
    return -1;
}

/* Keras topology: the weighted layers (BatchNorm included) that consume
 * layer li, through channel-preserving weightless layers. */
static int topo_collect(const npuc__graph *g, size_t li, npuc__next *r, int depth) {
    const npuc__klayer *L = &g->kl[li];
    if (L->is_output) {
        npuc__graph_fmt(r->why, sizeof r->why, "'%s' is a model output", L->name);
        r->output = 1;
        return 1;
    }
    if (depth > 64) {
        npuc__graph_fmt(r->why, sizeof r->why, "topology too deep");
        return 1;
    }
    if (L->nout == 0) {
        npuc__graph_fmt(r->why, sizeof r->why, "nothing consumes '%s'", L->name);
        r->output = 1;
        return 1;
    }
    for (size_t k = 0; k < L->nout; k++) {
        const npuc__klayer *Z = &g->kl[L->out[k]];
        if (Z->nin != 1) {
            npuc__graph_fmt(r->why, sizeof r->why, "'%s' (%s) takes several inputs", Z->name, Z->cls);
            return 1;
        }
        if (npuc__kclass_passthrough(Z->cls) && Z->mod < 0) {
            if (topo_collect(g, L->out[k], r, depth + 1)) return 1;
            continue;
        }
        if (!npuc__kclass_weighted(Z->cls)) {
            npuc__graph_fmt(r->why, sizeof r->why, "'%s' is a %s layer", Z->name, Z->cls);
            return 1;
        }
        if (Z->mod < 0) {
            npuc__graph_fmt(r->why, sizeof r->why, "layer '%s' has no weights in the file", Z->name);
            return 1;
        }
        if (Z->groups > 1 && strncmp(Z->cls, "Depthwise", 9) != 0) {
            npuc__graph_fmt(r->why, sizeof r->why, "'%s' is a grouped convolution", Z->name);
            return 1;
        }
        if (r->n >= NPUC_GRAPH_MAX_NEXT) {
            npuc__graph_fmt(r->why, sizeof r->why, "too many consumers");
            return 1;
        }
        r->mod[r->n++] = (size_t)Z->mod;
    }
    return 0;
}

npuc__evidence npuc__graph_next_evidence(const npuc__graph *g) {
    return g->topo ? NPUC_EVIDENCE_CONFIG : g->keras ? NPUC_EVIDENCE_LAYER_ORDER : NPUC_EVIDENCE_NAME;
}

int npuc__graph_next(const npuc__graph *g, size_t x, npuc__next *r) {
    memset(r, 0, sizeof *r);
    r->evidence = npuc__graph_next_evidence(g);
    if (g->keras && g->topo) {
        int64_t li = npuc__graph_find_klayer(g, g->mods[x].key);
        if (li < 0) {
            npuc__graph_fmt(r->why, sizeof r->why, "layer '%s' is not in model_config", g->mods[x].key);
            return 1;
        }
        if (g->kl[li].nin > 1) {
            npuc__graph_fmt(r->why, sizeof r->why, "layer '%s' is applied to several inputs", g->mods[x].key);
            return 1;
        }
        return topo_collect(g, (size_t)li, r, 0);
    }
    if (g->keras) {
        if (!g->layer_order || g->no_guess || g->alphabetical) {
            npuc__graph_fmt(r->why, sizeof r->why, "no model_config%s: give --next or --graph",
                            g->layer_order ? " and layer order is a guess (--no-guess)"
                                           : " and no Keras layer order");
            return 1;
        }
        int64_t y = -1;
        for (size_t k = 0; k < g->nmods; k++)
            if (g->mods[k].first > g->mods[x].first && (y < 0 || g->mods[k].first < g->mods[y].first)) y = (int64_t)k;
        if (y < 0) {
            npuc__graph_fmt(r->why, sizeof r->why, "'%s' is the last layer: it feeds the model output", g->mods[x].key);
            r->output = 1;
            return 1;
        }
        r->guess = 1;
        npuc__graph_fmt(r->guess_why, sizeof r->guess_why,
                        "no model_config: '%s' is the next layer in layer_names order, and merge layers are "
                        "invisible there", g->mods[y].key);
        r->mod[r->n++] = (size_t)y;
        return 0;
    }
    int64_t y = seq_next(g, x, r);
    if (y < 0) return 1;
    r->mod[r->n++] = (size_t)y;
    return 0;
}
