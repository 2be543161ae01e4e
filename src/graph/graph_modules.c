/*
 * graph_modules.c - the module view: every tensor belongs to one module (a
 * PyTorch module or a Keras layer), which holds at most one weight, its
 * bias, or a BatchNorm's tensors.  Consumer edges (graph_next.c,
 * graph_edges.c) run between modules.
 *
 * A Keras file keys modules on the tensor's layer group when it has one,
 * else on the name up to the last '/'; any other file on the name up to
 * the last '.'.  Roles are the ones core guessed for the tensors from their
 * names and shapes: a BatchNorm needs its running statistics, all of one
 * length (else its tensors count as "other"), and a bias must have the
 * weight's output-channel count.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"

int64_t npuc__find_mod(const npuc__graph *g, const char *key) {
    for (size_t i = 0; i < g->nmods; i++)
        if (strcmp(g->mods[i].key, key) == 0) return (int64_t)i;
    return -1;
}

const npuc__mod *npuc__graph_mod(const npuc__graph *g, size_t tensor) { return &g->mods[g->mod_of[tensor]]; }

int npuc__graph_is_dw(const npuc__graph *g, size_t w, uint64_t channels) {
    return npuc__is_dw(npuc__gt(g, (int64_t)w), channels);
}

uint64_t npuc__bn_channels(const npuc__graph *g, const npuc__bn *b) {
    int64_t i = b->mean >= 0 ? b->mean : b->var >= 0 ? b->var : b->gamma >= 0 ? b->gamma : b->beta;
    return i >= 0 ? npuc__gt(g, i)->numel : 0;
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
    md->bn.config_eps = NAN; /* the module view reads no config */
    md->first = first;
    md->evidence = NPUC_EVIDENCE_NAME;
    *out = g->nmods++;
    return NPUC_OK;
}

static npuc_status build_modules(npuc_ctx *ctx, npuc__graph *g) {
    npuc_model *m = g->m;
    const size_t n = g->n;
    npuc_status st;
    g->keras = npuc_model_is_keras(m);
    for (size_t i = 0; i < n && !g->keras; i++) g->keras = npuc__graph_is_keras_leaf(npuc_model_tensor(m, i)->name);
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

npuc_status npuc__graph_read_modules(npuc_ctx *ctx, npuc__graph *g) {
    npuc_status st;
    g->mod_of = calloc(g->n ? g->n : 1, sizeof *g->mod_of);
    if (!g->mod_of) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    if ((st = build_modules(ctx, g)) != NPUC_OK) return st;
    if ((st = npuc__graph_read_klayers(ctx, g)) != NPUC_OK) return st;
    g->layer_order = g->keras && !g->topo && npuc_model_is_keras(g->m);
    return NPUC_OK;
}
