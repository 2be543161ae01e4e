/*
 * graph_order.c - the order rules of BatchNorm attachment, for what model
 * config and names leave undecided: Keras layer order, then storage order
 * (graph_bn.c runs the rules and keeps the books).
 *
 * Keras layer order: the layer just before a Keras-named BatchNorm in
 * layer_names (or, without groups, in storage order), taken when it is a
 * producer with the right channel count; a guess unless the Keras numbering
 * agrees (conv2d_7 / batch_normalization_7).  Numbering alone is the
 * fallback.
 *
 * Storage order: exporters write tensors in graph order, so "the nearest
 * preceding conv with the right channel count" is a good guess; but files
 * written from a sorted dict (safetensors' own save_file, the shared Paddle
 * exports) are alphabetical, and then the numbers in the names (conv2d_5,
 * batch_norm_3) are the only trace of the graph: producers and BatchNorms
 * are each put in numeric order and aligned by dynamic programming (an
 * edit-distance alignment: every BatchNorm gets a distinct producer with its
 * channel count, in the same order, skipping as few bias-free producers as
 * possible, since a conv built to feed a BatchNorm normally has no bias).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"

/* ------------------------------------------------------------ rule: Keras layer order */

typedef struct layers {
    size_t n;
    int64_t *of;      /* tensor -> layer */
    size_t *ntens;    /* tensors per layer */
    char **name;      /* layer names (borrowed from the model, or owned prefixes) */
    int owned;
} layers;

static void layers_free(layers *L) {
    if (L->owned)
        for (size_t i = 0; i < L->n; i++) free(L->name[i]);
    free(L->of);
    free(L->ntens);
    free(L->name);
    memset(L, 0, sizeof *L);
}

/* Layers in model order: the Keras groups when the file has them (layers
 * without weights included), else runs of tensors sharing a prefix. */
static npuc_status build_layers(npuc__attach *a, layers *L) {
    memset(L, 0, sizeof *L);
    size_t ng = npuc_model_group_count(a->g->m), cap = ng ? ng : a->g->n;
    L->of = malloc((a->g->n ? a->g->n : 1) * sizeof *L->of);
    L->ntens = calloc(cap ? cap : 1, sizeof *L->ntens);
    L->name = calloc(cap ? cap : 1, sizeof *L->name);
    if (!L->of || !L->ntens || !L->name) return npuc__attach_nomem(a);
    if (ng) {
        L->n = ng;
        for (size_t g = 0; g < ng; g++) L->name[g] = (char *)npuc_model_group(a->g->m, g);
        size_t last = 0;
        for (size_t i = 0; i < a->g->n; i++) {
            const char *g = npuc_model_tensor(a->g->m, i)->group;
            L->of[i] = -1;
            if (!g) continue;
            if (strcmp(L->name[last], g) != 0)
                for (size_t k = 0; k < ng; k++)
                    if (strcmp(L->name[k], g) == 0) { last = k; break; }
            if (strcmp(L->name[last], g) == 0) {
                L->of[i] = (int64_t)last;
                L->ntens[last]++;
            }
        }
        return NPUC_OK;
    }
    L->owned = 1;
    for (size_t i = 0; i < a->g->n; i++) {
        char *p = npuc__graph_module_of(npuc_model_tensor(a->g->m, i));
        if (!p) return npuc__attach_nomem(a);
        if (L->n && strcmp(L->name[L->n - 1], p) == 0) free(p);
        else L->name[L->n++] = p;
        L->of[i] = (int64_t)L->n - 1;
        L->ntens[L->n - 1]++;
    }
    return NPUC_OK;
}

/* The producer weight of layer l: pointwise_kernel, kernel, or another
 * producer; -1 when it has none. */
static int64_t layer_producer(const npuc__attach *a, const layers *L, size_t l) {
    int64_t best = -1;
    int rank = 0;
    for (size_t i = 0; i < a->g->n; i++) {
        if (L->of[i] != (int64_t)l) continue;
        const npuc_tensor_info *t = npuc_model_tensor(a->g->m, i);
        if (!npuc__graph_is_producer(t)) continue;
        int r = npuc__graph_leaf_is(t->name, "pointwise_kernel") ? 3 : npuc__graph_leaf_is(t->name, "kernel") ? 2 : 1;
        if (r > rank) { rank = r; best = (int64_t)i; }
    }
    return best;
}

static npuc_status rule_keras_order(npuc__attach *a, const layers *L, size_t b) {
    const char *key = a->g->bns[b].name, *leaf = npuc__graph_leaf(key);
    char why[200];
    int64_t l = L->of[a->g->bns[b].first];
    if (l <= 0) return npuc__attach_refuse(a, b, NULL, "BatchNorm without a producer: first layer of the file");
    size_t prev = (size_t)l - 1;
    npuc_status st;
    if (L->ntens[prev] == 0) {
        snprintf(why, sizeof why, "layer '%s' right before it has no weights (an activation in between?)", L->name[prev]);
        return npuc__attach_refuse(a, b, L->name[prev], why);
    }
    int64_t w = layer_producer(a, L, prev);
    if (w >= 0) {
        int groups;
        if (npuc__attach_channels_match(a->g->m, (size_t)w, a->g->bns[b].channels, &groups) && a->claim[w] == -1) {
            int agree = npuc__graph_same_counter(leaf, npuc__graph_leaf(L->name[prev]));
            snprintf(why, sizeof why, "layer order: '%s' is the layer before '%s'%s", L->name[prev], key,
                     agree ? " (numbering agrees)" : "");
            return npuc__attach_propose(a, (size_t)w, b, NPUC_EVIDENCE_LAYER_ORDER, !agree, why);
        }
    }
    /* Keras numbering alone: batch_normalization_N after conv2d_N. */
    if (strncmp(leaf, "batch_normalization", 19) == 0) {
        const char *num = leaf + 19;
        const char *fam;
        for (size_t k = 0; (fam = npuc__graph_keras_family(k)) != NULL; k++) {
            char *pre = npuc__graph_strndup(key, (size_t)(leaf - key));
            char *cand = pre ? npuc__graph_concat3(pre, fam, num) : NULL;
            free(pre);
            if (!cand) return npuc__attach_nomem(a);
            int64_t cw = npuc__graph_module_weight(a->g, cand);
            int groups;
            if (cw >= 0 && npuc__graph_is_producer(npuc_model_tensor(a->g->m, (size_t)cw)) && a->claim[cw] == -1 &&
                npuc__attach_channels_match(a->g->m, (size_t)cw, a->g->bns[b].channels, &groups) == 1) {
                snprintf(why, sizeof why, "Keras numbering: '%s' / '%s' (not adjacent in layer order)", cand, key);
                free(cand);
                return npuc__attach_propose(a, (size_t)cw, b, NPUC_EVIDENCE_NAME, 1, why);
            }
            free(cand);
        }
    }
    if (w < 0) {
        snprintf(why, sizeof why, "BatchNorm without a producer: the layer before it, '%s', is not a "
                 "convolution or Dense layer", L->name[prev]);
        return npuc__attach_refuse(a, b, L->name[prev], why);
    }
    const npuc_tensor_info *t = npuc_model_tensor(a->g->m, (size_t)w);
    if (a->claim[w] != -1) {
        snprintf(why, sizeof why, "the layer before it, '%s', already feeds another BatchNorm", L->name[prev]);
        return npuc__attach_refuse(a, b, t->name, why);
    }
    char ch[160];
    npuc__attach_describe_channels(a->g->m, (size_t)w, ch, sizeof ch);
    snprintf(why, sizeof why, "shape mismatch: %s, the BatchNorm %lld", ch, (long long)a->g->bns[b].channels);
    st = npuc__attach_refuse(a, b, t->name, why);
    return st;
}

npuc_status npuc__attach_rule_keras_order(npuc__attach *a) {
    layers L;
    npuc_status st = build_layers(a, &L);
    for (size_t b = 0; b < a->g->nbn && st == NPUC_OK; b++)
        if (a->state[b] == ATTACH_UNDECIDED && a->g->bns[b].keras) st = rule_keras_order(a, &L, b);
    layers_free(&L);
    return st;
}

/* ------------------------------------------------------------ rule: storage order */

npuc_status npuc__attach_rule_nearest(npuc__attach *a, size_t b) {
    char why[200];
    for (size_t j = a->g->bns[b].first; j-- > 0;) {
        const npuc_tensor_info *t = npuc_model_tensor(a->g->m, j);
        int groups;
        if (!npuc__graph_is_producer(t) || a->claim[j] != -1 || npuc__attach_channels_match(a->g->m, j, a->g->bns[b].channels, &groups) != 1) continue;
        snprintf(why, sizeof why, "guess: nearest preceding conv/linear with %lld output channels in storage order",
                 (long long)a->g->bns[b].channels);
        return npuc__attach_propose(a, j, b, NPUC_EVIDENCE_ORDER, 1, why);
    }
    snprintf(why, sizeof why, "BatchNorm without a producer: no free conv/linear with %lld output channels "
             "precedes it", (long long)a->g->bns[b].channels);
    return npuc__attach_refuse(a, b, NULL, why);
}

/* A name and what it names, for sorting by npuc__graph_natcmp (names are
 * unique, so the order is total and qsort's instability does not show). */
typedef struct named {
    const char *name;
    size_t idx;
} named;

static int by_natural_name(const void *x, const void *y) {
    return npuc__graph_natcmp(((const named *)x)->name, ((const named *)y)->name);
}

/* Sorts idx[0..n) by the natural order of name(idx[k]). */
static int sort_natural(size_t *idx, size_t n, const char *(*name)(const npuc__graph *, size_t), const npuc__graph *g) {
    named *v = malloc((n ? n : 1) * sizeof *v);
    if (!v) return -1;
    for (size_t k = 0; k < n; k++) {
        v[k].name = name(g, idx[k]);
        v[k].idx = idx[k];
    }
    qsort(v, n, sizeof *v, by_natural_name);
    for (size_t k = 0; k < n; k++) idx[k] = v[k].idx;
    free(v);
    return 0;
}

static const char *tensor_name(const npuc__graph *g, size_t i) { return npuc__gt(g, (int64_t)i)->name; }
static const char *bn_name(const npuc__graph *g, size_t b) { return g->bns[b].name; }

/* Alphabetical storage: align producers and BatchNorms, each in natural
 * name order, by dynamic programming.  Cost: 1000 for a BatchNorm left
 * without a producer, 1 for a bias-free producer left out, 2 for pairing a
 * producer that has a bias (convs before a BatchNorm normally have none). */
npuc_status npuc__attach_rule_aligned(npuc__attach *a, const size_t *bns, size_t nb) {
    enum { BIG = 1000 };
    size_t *prods = malloc((a->g->n ? a->g->n : 1) * sizeof *prods), np = 0;
    size_t *bs = malloc((nb ? nb : 1) * sizeof *bs);
    unsigned char *hasb = NULL;
    uint64_t *dp = NULL;
    npuc_status st = NPUC_OK;
    if (!prods || !bs) goto oom;
    for (size_t i = 0; i < a->g->n; i++)
        if (npuc__graph_is_producer(npuc_model_tensor(a->g->m, i)) && a->claim[i] == -1) prods[np++] = i;
    memcpy(bs, bns, nb * sizeof *bs);
    if (sort_natural(prods, np, tensor_name, a->g) != 0 || sort_natural(bs, nb, bn_name, a->g) != 0) goto oom;
    uint64_t cells;
    if (npuc_mul_overflow((uint64_t)np + 1, (uint64_t)nb + 1, &cells) || cells > (1u << 23)) {
        for (size_t j = 0; j < nb && st == NPUC_OK; j++)
            st = npuc__attach_refuse(a, bs[j], NULL, "storage order is alphabetical and there are too many candidates "
                                         "to align; state pairs with --pair/--pairs");
        goto done;
    }
    hasb = malloc(np ? np : 1);
    dp = malloc((size_t)cells * sizeof *dp);
    if (!hasb || !dp) goto oom;
    for (size_t i = 0; i < np; i++) hasb[i] = npuc__attach_existing_bias(a, prods[i]) >= 0;
    const size_t W = nb + 1;
#define DP(i, j) dp[(size_t)(i) * W + (j)]
    for (size_t j = 0; j <= nb; j++) DP(0, j) = (uint64_t)j * BIG;
    for (size_t i = 1; i <= np; i++) {
        uint64_t skipc = hasb[i - 1] ? 0 : 1, matchc = hasb[i - 1] ? 2 : 0;
        for (size_t j = 0; j <= nb; j++) {
            uint64_t best = DP(i - 1, j) + skipc;
            if (j > 0) {
                int g;
                if (DP(i, j - 1) + BIG < best) best = DP(i, j - 1) + BIG;
                if (npuc__attach_channels_match(a->g->m, prods[i - 1], a->g->bns[bs[j - 1]].channels, &g) == 1 && DP(i - 1, j - 1) + matchc < best)
                    best = DP(i - 1, j - 1) + matchc;
            }
            DP(i, j) = best;
        }
    }
    /* Walk back, preferring a match, then leaving a producer out. */
    size_t i = np, j = nb;
    size_t *match = malloc((nb ? nb : 1) * sizeof *match);
    if (!match) goto oom;
    for (size_t k = 0; k < nb; k++) match[k] = (size_t)-1;
    while (j > 0) {
        int g;
        if (i > 0 && npuc__attach_channels_match(a->g->m, prods[i - 1], a->g->bns[bs[j - 1]].channels, &g) == 1 &&
            DP(i, j) == DP(i - 1, j - 1) + (hasb[i - 1] ? 2u : 0u)) {
            match[j - 1] = prods[i - 1];
            i--;
            j--;
        } else if (i > 0 && DP(i, j) == DP(i - 1, j) + (hasb[i - 1] ? 0u : 1u)) {
            i--;
        } else {
            j--;
        }
    }
#undef DP
    char why[200];
    for (size_t k = 0; k < nb && st == NPUC_OK; k++) {
        if (match[k] == (size_t)-1) {
            snprintf(why, sizeof why, "BatchNorm without a producer: no conv/linear with %lld output channels "
                     "fits the numbering", (long long)a->g->bns[bs[k]].channels);
            st = npuc__attach_refuse(a, bs[k], NULL, why);
        } else {
            snprintf(why, sizeof why, "guess: storage order is alphabetical; convs and BatchNorms aligned in "
                     "numeric name order (%lld channels)", (long long)a->g->bns[bs[k]].channels);
            st = npuc__attach_propose(a, match[k], bs[k], NPUC_EVIDENCE_ORDER, 1, why);
        }
    }
    free(match);
    goto done;
oom:
    st = npuc__attach_nomem(a);
done:
    free(prods);
    free(bs);
    free(hasb);
    free(dp);
    return st;
}

