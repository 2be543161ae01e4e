/*
 * bnfold_rules.c - the evidence rules of BatchNorm pair finding, strongest
 * first: stated pairs, Keras topology, names, Keras layer order, storage
 * order.  bnfold_pairs.c collects the BatchNorms and producers, runs these
 * rules in that order and keeps the books (include/npuc/bnfold.h lists the
 * rules; docs/fold-bn.md explains them with examples).
 *
 * Each rule either decides a BatchNorm (npuc__bnf_propose: a pair, unless
 * the shapes disagree or the producer is claimed twice; npuc__bnf_skip_bn:
 * a skip with the reason) or leaves it to the next rule.
 *
 * The last rule, for exported files whose names do not pair, reads storage
 * order.  Exporters write tensors in graph order, so "the nearest preceding
 * conv with the right channel count" is a good guess; but files written from
 * a sorted dict (safetensors' own save_file, the shared Paddle exports) are
 * alphabetical, and then the numbers in the names (conv2d_5, batch_norm_3)
 * are the only trace of the graph: producers and BatchNorms are each put in
 * numeric order and aligned by dynamic programming (an edit-distance
 * alignment: every BatchNorm gets a distinct producer with its channel
 * count, in the same order, skipping as few bias-free producers as
 * possible, since a conv built to feed a BatchNorm normally has no bias).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/bnfold/bnfold_internal.h"

/* ------------------------------------------------------------ rule: topology */

npuc_status npuc__bnf_rule_topology(finder *f) {
    for (size_t e = 0; e < f->topo.n; e++) {
        const npuc__bnf_edge *ed = &f->topo.e[e];
        int64_t b = npuc__bnf_find_bn_layer(f, ed->bn);
        if (b < 0) continue;
        if (isfinite(ed->eps)) f->bn_eps[b] = ed->eps;
        if (f->bn_state[b] != UNDECIDED) continue;
        if (ed->shared)
            return npuc_fail(f->ctx, NPUC_ERR_FORMAT,
                             "%s: BatchNorm '%s': model_config applies it to several inputs (one BatchNorm "
                             "consumed by two producers cannot be folded)", f->path, ed->bn);
        if (ed->skip[0]) {
            npuc_status st = npuc__bnf_skip_bn(f, (size_t)b, ed->producer, ed->skip);
            if (st != NPUC_OK) return st;
            continue;
        }
        /* A nested layer's weights sit beside the BatchNorm's: same parent path. */
        const char *key = f->bn[b].name, *leaf = npuc__bnf_leaf(key);
        char *parent = npuc__bnf_strndup(key, (size_t)(leaf - key));
        char *pm = parent ? npuc__bnf_concat3(parent, ed->producer, "") : NULL;
        free(parent);
        if (!pm) return npuc__bnf_nomem(f);
        int64_t w = npuc__bnf_module_weight(f, pm);
        if (w < 0) w = npuc__bnf_module_weight(f, ed->producer);
        free(pm);
        char why[200];
        if (w < 0 || !npuc__bnf_is_producer(npuc_model_tensor(f->m, (size_t)w))) {
            snprintf(why, sizeof why, "model_config: its input is '%s' (%s), but the file has no float kernel for it",
                     ed->producer, ed->producer_class);
            npuc_status st = npuc__bnf_skip_bn(f, (size_t)b, ed->producer, why);
            if (st != NPUC_OK) return st;
            continue;
        }
        const npuc_tensor_info *t = npuc_model_tensor(f->m, (size_t)w);
        int groups;
        if (!npuc__bnf_channels_match(t, f->bn[b].channels, &groups)) {
            npuc__bnf_describe_channels(t, why, sizeof why);
            return npuc_fail(f->ctx, NPUC_ERR_FORMAT,
                             "%s: BatchNorm '%s': model_config says '%s' feeds it, but %s and the BatchNorm "
                             "has %lld: mismatched channel counts", f->path, key, ed->producer, why,
                             (long long)f->bn[b].channels);
        }
        snprintf(why, sizeof why, "model_config: the input of '%s' is '%s' (%s)", ed->bn, ed->producer,
                 ed->producer_class);
        npuc_status st = npuc__bnf_propose(f, (size_t)w, (size_t)b, NPUC_BNFOLD_TOPOLOGY, 0, why);
        if (st != NPUC_OK) return st;
    }
    return NPUC_OK;
}

/* ------------------------------------------------------------ rule: names */

/* Replaces the first of the BatchNorm words in leaf with "conv":
 * bn1 -> conv1, _batch_norm -> _conv, bn -> conv.  NULL when none occurs. */
static char *conv_for_bn_leaf(const char *leaf) {
    static const char *const WORDS[] = {"batch_norm", "batchnorm", "BatchNorm", "bn", "norm"};
    for (size_t w = 0; w < sizeof WORDS / sizeof WORDS[0]; w++) {
        const char *at = strstr(leaf, WORDS[w]);
        if (!at) continue;
        char *pre = npuc__bnf_strndup(leaf, (size_t)(at - leaf));
        char *r = pre ? npuc__bnf_concat3(pre, "conv", at + strlen(WORDS[w])) : NULL;
        free(pre);
        return r;
    }
    return NULL;
}

/* Keras BatchNorm layer names that name their producer: X_BN, X_bn,
 * X_batchnorm, bn_X.  NULL when the name has none of these forms. */
static char *keras_producer_name(const char *leaf) {
    static const char *const SUFFIXES[] = {"_BN", "_bn", "_batchnorm", "_BatchNorm", "_batch_norm"};
    size_t n = strlen(leaf);
    for (size_t k = 0; k < sizeof SUFFIXES / sizeof SUFFIXES[0]; k++) {
        size_t sl = strlen(SUFFIXES[k]);
        if (n > sl && strcmp(leaf + n - sl, SUFFIXES[k]) == 0) return npuc__bnf_strndup(leaf, n - sl);
    }
    if (n > 3 && (strncmp(leaf, "bn_", 3) == 0 || strncmp(leaf, "BN_", 3) == 0)) return npuc__strdup(leaf + 3);
    return NULL;
}

int npuc__bnf_all_digits(const char *s) {
    if (!*s) return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return 0;
    return 1;
}

/* A global Paddle/Keras counter name (batch_norm_3, batch_normalization_2):
 * it says nothing about the module that feeds it. */
static int counter_name(const char *leaf) {
    static const char *const P[] = {"batch_norm_", "batch_normalization_", "batchnorm_", "bn_"};
    if (strcmp(leaf, "batch_normalization") == 0) return 1;
    for (size_t k = 0; k < sizeof P / sizeof P[0]; k++) {
        size_t pl = strlen(P[k]);
        if (strncmp(leaf, P[k], pl) == 0 && npuc__bnf_all_digits(leaf + pl)) return 1;
    }
    return 0;
}

/* Tries module `cand` (parent + name) as b's producer.  Returns 1 when it
 * decided (paired or skipped), 0 when the module has no weight.
 *
 * Pre-activation networks (DenseNet's norm1 -> conv1, PreAct ResNet's bn1 ->
 * conv1) put the BatchNorm before its namesake conv: folding it into the
 * conv's output would be wrong.  In graph-ordered storage that shows as the
 * conv stored after the BatchNorm, which is then skipped; sequence indices
 * (A.0 -> A.1) need no such check. */
static int try_module(finder *f, size_t b, const char *cand, const char *why, int check_order, npuc_status *st) {
    int64_t w = npuc__bnf_module_weight(f, cand);
    *st = NPUC_OK;
    if (w < 0) return 0;
    const npuc_tensor_info *t = npuc_model_tensor(f->m, (size_t)w);
    f->bn_state[b] = SKIPPED;
    if (!npuc__bnf_is_producer(t)) {
        *st = npuc__bnf_add_skip(f, f->bn[b].name, t->name, "names pair it with '%s', which is not a float conv/linear "
                       "weight (role %s, layout %s)", t->name, npuc_role_name(t->role), npuc_layout_name(t->layout));
        return 1;
    }
    if (check_order && !f->alphabetical && (size_t)w > f->bn_first[b]) {
        *st = npuc__bnf_add_skip(f, f->bn[b].name, t->name, "names pair it with '%s', but that is stored after the "
                       "BatchNorm (pre-activation: the BatchNorm feeds it?)", t->name);
        return 1;
    }
    f->bn_state[b] = UNDECIDED;
    *st = npuc__bnf_propose(f, (size_t)w, b, NPUC_BNFOLD_NAME, 0, why);
    return 1;
}

npuc_status npuc__bnf_rule_names(finder *f, size_t b) {
    const char *key = f->bn[b].name;
    long s = npuc__bnf_last_sep(key, strlen(key));
    char sep[2] = {s >= 0 ? key[s] : 0, 0};
    char *parent = npuc__bnf_strndup(key, s >= 0 ? (size_t)s : 0);
    const char *leaf = key + (s + 1);
    char why[200], num[32];
    npuc_status st = NPUC_OK;
    char *cand = NULL, *word = NULL;
    if (!parent) return npuc__bnf_nomem(f);
    /* nn.Sequential: features.1 follows features.0, downsample.1 follows downsample.0. */
    if (npuc__bnf_all_digits(leaf) && strlen(leaf) < 18 && s >= 0) {
        long long k = strtoll(leaf, NULL, 10);
        if (k > 0) {
            snprintf(num, sizeof num, "%lld", k - 1);
            cand = npuc__bnf_concat3(parent, sep, num);
            if (!cand) goto oom;
            snprintf(why, sizeof why, "names: module '%s' comes right before '%s' in a sequence", cand, key);
            if (try_module(f, b, cand, why, 0, &st)) goto done;
            snprintf(why, sizeof why, "module '%s' right before it has %s (an activation or pooling in between?)",
                     cand, npuc__bnf_has_prefix(f, cand) ? "no conv/linear weight" : "no weights");
            st = npuc__bnf_skip_bn(f, b, NULL, why);
            goto done;
        }
    }
    /* Keras: X / X_BN, X / bn_X. */
    if ((word = keras_producer_name(leaf)) != NULL) {
        cand = npuc__bnf_concat3(parent, sep, word);
        if (!cand) goto oom;
        snprintf(why, sizeof why, "names: '%s' / '%s'", cand, key);
        if (try_module(f, b, cand, why, 1, &st)) goto done;
        free(cand);
        cand = NULL;
    }
    /* conv1 / bn1, X.conv / X.bn, X._conv / X._batch_norm. */
    if (!counter_name(leaf)) {
        free(word);
        if ((word = conv_for_bn_leaf(leaf)) != NULL) {
            cand = npuc__bnf_concat3(parent, sep, word);
            if (!cand) goto oom;
            snprintf(why, sizeof why, "names: '%s' / '%s'", cand, key);
            if (try_module(f, b, cand, why, 1, &st)) goto done;
        }
    }
    goto done;
oom:
    st = npuc__bnf_nomem(f);
done:
    free(parent);
    free(cand);
    free(word);
    return st;
}

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
static npuc_status build_layers(finder *f, layers *L) {
    memset(L, 0, sizeof *L);
    size_t ng = npuc_model_group_count(f->m), cap = ng ? ng : f->n;
    L->of = malloc((f->n ? f->n : 1) * sizeof *L->of);
    L->ntens = calloc(cap ? cap : 1, sizeof *L->ntens);
    L->name = calloc(cap ? cap : 1, sizeof *L->name);
    if (!L->of || !L->ntens || !L->name) return npuc__bnf_nomem(f);
    if (ng) {
        L->n = ng;
        for (size_t g = 0; g < ng; g++) L->name[g] = (char *)npuc_model_group(f->m, g);
        size_t last = 0;
        for (size_t i = 0; i < f->n; i++) {
            const char *g = npuc_model_tensor(f->m, i)->group;
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
    for (size_t i = 0; i < f->n; i++) {
        char *p = npuc__bnf_module_of(npuc_model_tensor(f->m, i));
        if (!p) return npuc__bnf_nomem(f);
        if (L->n && strcmp(L->name[L->n - 1], p) == 0) free(p);
        else L->name[L->n++] = p;
        L->of[i] = (int64_t)L->n - 1;
        L->ntens[L->n - 1]++;
    }
    return NPUC_OK;
}

/* The producer weight of layer l: pointwise_kernel, kernel, or another
 * producer; -1 when it has none. */
static int64_t layer_producer(const finder *f, const layers *L, size_t l) {
    int64_t best = -1;
    int rank = 0;
    for (size_t i = 0; i < f->n; i++) {
        if (L->of[i] != (int64_t)l) continue;
        const npuc_tensor_info *t = npuc_model_tensor(f->m, i);
        if (!npuc__bnf_is_producer(t)) continue;
        int r = npuc__bnf_leaf_is(t->name, "pointwise_kernel") ? 3 : npuc__bnf_leaf_is(t->name, "kernel") ? 2 : 1;
        if (r > rank) { rank = r; best = (int64_t)i; }
    }
    return best;
}

/* Keras' automatic layer names: a family and an optional "_N" counter. */
static const char *const KERAS_FAMILIES[] = {"conv2d", "depthwise_conv2d", "separable_conv2d", "conv1d",
                                             "conv3d", "dense"};

/* Keras numbering: batch_normalization_7 and conv2d_7 (or depthwise_conv2d_7,
 * dense_7...) carry the same counter; the unnumbered first layers too. */
static int same_counter(const char *bn_leaf, const char *layer_leaf) {
    if (strncmp(bn_leaf, "batch_normalization", 19) != 0) return 0;
    const char *num = bn_leaf + 19;
    if (*num && (num[0] != '_' || !npuc__bnf_all_digits(num + 1))) return 0;
    for (size_t k = 0; k < sizeof KERAS_FAMILIES / sizeof KERAS_FAMILIES[0]; k++) {
        size_t fl = strlen(KERAS_FAMILIES[k]);
        if (strncmp(layer_leaf, KERAS_FAMILIES[k], fl) == 0 && strcmp(layer_leaf + fl, num) == 0) return 1;
    }
    return 0;
}

static npuc_status rule_keras_order(finder *f, const layers *L, size_t b) {
    const char *key = f->bn[b].name, *leaf = npuc__bnf_leaf(key);
    char why[200];
    int64_t l = L->of[f->bn_first[b]];
    if (l <= 0) return npuc__bnf_skip_bn(f, b, NULL, "BatchNorm without a producer: first layer of the file");
    size_t prev = (size_t)l - 1;
    npuc_status st;
    if (L->ntens[prev] == 0) {
        snprintf(why, sizeof why, "layer '%s' right before it has no weights (an activation in between?)", L->name[prev]);
        return npuc__bnf_skip_bn(f, b, L->name[prev], why);
    }
    int64_t w = layer_producer(f, L, prev);
    if (w >= 0) {
        const npuc_tensor_info *t = npuc_model_tensor(f->m, (size_t)w);
        int groups;
        if (npuc__bnf_channels_match(t, f->bn[b].channels, &groups) && f->claim[w] == -1) {
            int agree = same_counter(leaf, npuc__bnf_leaf(L->name[prev]));
            snprintf(why, sizeof why, "layer order: '%s' is the layer before '%s'%s", L->name[prev], key,
                     agree ? " (numbering agrees)" : "");
            return npuc__bnf_propose(f, (size_t)w, b, NPUC_BNFOLD_LAYER_ORDER, !agree, why);
        }
    }
    /* Keras numbering alone: batch_normalization_N after conv2d_N. */
    if (strncmp(leaf, "batch_normalization", 19) == 0) {
        const char *num = leaf + 19;
        for (size_t k = 0; k < sizeof KERAS_FAMILIES / sizeof KERAS_FAMILIES[0]; k++) {
            char *pre = npuc__bnf_strndup(key, (size_t)(leaf - key));
            char *cand = pre ? npuc__bnf_concat3(pre, KERAS_FAMILIES[k], num) : NULL;
            free(pre);
            if (!cand) return npuc__bnf_nomem(f);
            int64_t cw = npuc__bnf_module_weight(f, cand);
            int groups;
            if (cw >= 0 && npuc__bnf_is_producer(npuc_model_tensor(f->m, (size_t)cw)) && f->claim[cw] == -1 &&
                npuc__bnf_channels_match(npuc_model_tensor(f->m, (size_t)cw), f->bn[b].channels, &groups)) {
                snprintf(why, sizeof why, "Keras numbering: '%s' / '%s' (not adjacent in layer order)", cand, key);
                free(cand);
                return npuc__bnf_propose(f, (size_t)cw, b, NPUC_BNFOLD_NAME, 1, why);
            }
            free(cand);
        }
    }
    if (w < 0) {
        snprintf(why, sizeof why, "BatchNorm without a producer: the layer before it, '%s', is not a "
                 "convolution or Dense layer", L->name[prev]);
        return npuc__bnf_skip_bn(f, b, L->name[prev], why);
    }
    const npuc_tensor_info *t = npuc_model_tensor(f->m, (size_t)w);
    if (f->claim[w] != -1) {
        snprintf(why, sizeof why, "the layer before it, '%s', already feeds another BatchNorm", L->name[prev]);
        return npuc__bnf_skip_bn(f, b, t->name, why);
    }
    char ch[160];
    npuc__bnf_describe_channels(t, ch, sizeof ch);
    snprintf(why, sizeof why, "shape mismatch: %s, the BatchNorm %lld", ch, (long long)f->bn[b].channels);
    st = npuc__bnf_skip_bn(f, b, t->name, why);
    return st;
}

npuc_status npuc__bnf_rule_keras_order(finder *f) {
    layers L;
    npuc_status st = build_layers(f, &L);
    for (size_t b = 0; b < f->nbn && st == NPUC_OK; b++)
        if (f->bn_state[b] == UNDECIDED && f->bn[b].keras) st = rule_keras_order(f, &L, b);
    layers_free(&L);
    return st;
}

/* ------------------------------------------------------------ rule: storage order */

int npuc__bnf_is_alphabetical(const finder *f) {
    if (f->n < 3) return 0;
    for (size_t i = 1; i < f->n; i++)
        if (strcmp(npuc__bnf_tname(f, i - 1), npuc__bnf_tname(f, i)) > 0) return 0;
    return 1;
}

npuc_status npuc__bnf_rule_nearest(finder *f, size_t b) {
    char why[200];
    for (size_t j = f->bn_first[b]; j-- > 0;) {
        const npuc_tensor_info *t = npuc_model_tensor(f->m, j);
        int groups;
        if (!npuc__bnf_is_producer(t) || f->claim[j] != -1 || !npuc__bnf_channels_match(t, f->bn[b].channels, &groups)) continue;
        snprintf(why, sizeof why, "guess: nearest preceding conv/linear with %lld output channels in storage order",
                 (long long)f->bn[b].channels);
        return npuc__bnf_propose(f, j, b, NPUC_BNFOLD_ORDER, 1, why);
    }
    snprintf(why, sizeof why, "BatchNorm without a producer: no free conv/linear with %lld output channels "
             "precedes it", (long long)f->bn[b].channels);
    return npuc__bnf_skip_bn(f, b, NULL, why);
}

static const finder *g_sort_finder; /* qsort has no context argument; single-threaded use */

static int by_natural_tensor(const void *a, const void *b) {
    return npuc__bnf_natcmp(npuc__bnf_tname(g_sort_finder, *(const size_t *)a), npuc__bnf_tname(g_sort_finder, *(const size_t *)b));
}

static int by_natural_bn(const void *a, const void *b) {
    return npuc__bnf_natcmp(g_sort_finder->bn[*(const size_t *)a].name, g_sort_finder->bn[*(const size_t *)b].name);
}

/* Alphabetical storage: align producers and BatchNorms, each in natural
 * name order, by dynamic programming.  Cost: 1000 for a BatchNorm left
 * without a producer, 1 for a bias-free producer left out, 2 for pairing a
 * producer that has a bias (convs before a BatchNorm normally have none). */
npuc_status npuc__bnf_rule_aligned(finder *f, const size_t *bns, size_t nb) {
    enum { BIG = 1000 };
    size_t *prods = malloc((f->n ? f->n : 1) * sizeof *prods), np = 0;
    size_t *bs = malloc((nb ? nb : 1) * sizeof *bs);
    unsigned char *hasb = NULL;
    uint64_t *dp = NULL;
    npuc_status st = NPUC_OK;
    if (!prods || !bs) goto oom;
    for (size_t i = 0; i < f->n; i++)
        if (npuc__bnf_is_producer(npuc_model_tensor(f->m, i)) && f->claim[i] == -1) prods[np++] = i;
    memcpy(bs, bns, nb * sizeof *bs);
    g_sort_finder = f;
    qsort(prods, np, sizeof *prods, by_natural_tensor);
    qsort(bs, nb, sizeof *bs, by_natural_bn);
    g_sort_finder = NULL;
    uint64_t cells;
    if (npuc_mul_overflow((uint64_t)np + 1, (uint64_t)nb + 1, &cells) || cells > (1u << 23)) {
        for (size_t j = 0; j < nb && st == NPUC_OK; j++)
            st = npuc__bnf_skip_bn(f, bs[j], NULL, "storage order is alphabetical and there are too many candidates "
                                         "to align; state pairs with --pair/--pairs");
        goto done;
    }
    hasb = malloc(np ? np : 1);
    dp = malloc((size_t)cells * sizeof *dp);
    if (!hasb || !dp) goto oom;
    for (size_t i = 0; i < np; i++) hasb[i] = npuc__bnf_existing_bias(f, prods[i]) >= 0;
    const size_t W = nb + 1;
#define DP(i, j) dp[(size_t)(i) * W + (j)]
    for (size_t j = 0; j <= nb; j++) DP(0, j) = (uint64_t)j * BIG;
    for (size_t i = 1; i <= np; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(f->m, prods[i - 1]);
        uint64_t skipc = hasb[i - 1] ? 0 : 1, matchc = hasb[i - 1] ? 2 : 0;
        for (size_t j = 0; j <= nb; j++) {
            uint64_t best = DP(i - 1, j) + skipc;
            if (j > 0) {
                int g;
                if (DP(i, j - 1) + BIG < best) best = DP(i, j - 1) + BIG;
                if (npuc__bnf_channels_match(t, f->bn[bs[j - 1]].channels, &g) && DP(i - 1, j - 1) + matchc < best)
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
        if (i > 0 && npuc__bnf_channels_match(npuc_model_tensor(f->m, prods[i - 1]), f->bn[bs[j - 1]].channels, &g) &&
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
                     "fits the numbering", (long long)f->bn[bs[k]].channels);
            st = npuc__bnf_skip_bn(f, bs[k], NULL, why);
        } else {
            snprintf(why, sizeof why, "guess: storage order is alphabetical; convs and BatchNorms aligned in "
                     "numeric name order (%lld channels)", (long long)f->bn[bs[k]].channels);
            st = npuc__bnf_propose(f, match[k], bs[k], NPUC_BNFOLD_ORDER, 1, why);
        }
    }
    free(match);
    goto done;
oom:
    st = npuc__bnf_nomem(f);
done:
    free(prods);
    free(bs);
    free(hasb);
    free(dp);
    return st;
}

/* ------------------------------------------------------------ rule: explicit */

/* A conv named by a statement: a weight tensor, or a module / layer. */
static int64_t resolve_conv(const finder *f, const char *s) {
    size_t idx;
    if (npuc_model_find(f->m, s, &idx) == 0) return (int64_t)idx;
    return npuc__bnf_module_weight(f, s);
}

/* A BatchNorm named by a statement: its module / layer, or one of its tensors. */
static int64_t resolve_bn(const finder *f, const char *s) {
    size_t idx;
    if (npuc_model_find(f->m, s, &idx) == 0 && f->bn_of[idx] >= 0) return f->bn_of[idx];
    return npuc__bnf_find_bn_layer(f, s);
}

npuc_status npuc__bnf_rule_explicit(finder *f, const npuc_bnfold_params *p) {
    npuc__bnf_stmt *sts = NULL;
    size_t ns = 0;
    npuc_status st = npuc__bnf_statements(f->ctx, p->pairs, p->npairs, p->pairs_file, &sts, &ns);
    if (st != NPUC_OK) return st;
    for (size_t k = 0; k < ns && st == NPUC_OK; k++) {
        const npuc__bnf_stmt *s = &sts[k];
        int64_t w = resolve_conv(f, s->conv), b = resolve_bn(f, s->bn);
        if (w < 0) {
            st = npuc_fail(f->ctx, NPUC_ERR_ARG, "%s: %s: no tensor or layer '%s' in the file", f->path, s->origin, s->conv);
            break;
        }
        const npuc_tensor_info *t = npuc_model_tensor(f->m, (size_t)w);
        if (!npuc__bnf_is_producer(t)) {
            st = npuc_fail(f->ctx, NPUC_ERR_ARG, "%s: %s: tensor '%s' is not a float conv/linear weight (role %s, "
                           "layout %s; a --layout override may be needed)", f->path, s->origin, t->name,
                           npuc_role_name(t->role), npuc_layout_name(t->layout));
            break;
        }
        if (b < 0) {
            st = npuc_fail(f->ctx, NPUC_ERR_ARG, "%s: %s: '%s' is not a BatchNorm in the file", f->path, s->origin, s->bn);
            break;
        }
        if (f->bn_state[b] >= 0) {
            const npuc_bnfold_pair *o = &f->plan->pairs[f->bn_state[b]];
            if (o->conv == (size_t)w) continue; /* stated twice */
            st = npuc_fail(f->ctx, NPUC_ERR_ARG, "%s: %s: BatchNorm '%s' is stated for two producers ('%s' and "
                           "'%s'): a BatchNorm consumed by two producers cannot be folded", f->path, s->origin,
                           f->bn[b].name, npuc__bnf_tname(f, o->conv), t->name);
            break;
        }
        if (f->claim[w] >= 0) {
            st = npuc_fail(f->ctx, NPUC_ERR_ARG, "%s: %s: '%s' is stated for two BatchNorms ('%s' and '%s')",
                           f->path, s->origin, t->name, f->plan->pairs[f->claim[w]].bn.name, f->bn[b].name);
            break;
        }
        int groups;
        if (!npuc__bnf_channels_match(t, f->bn[b].channels, &groups)) {
            char ch[160];
            npuc__bnf_describe_channels(t, ch, sizeof ch);
            st = npuc_fail(f->ctx, NPUC_ERR_ARG, "%s: %s: %s but BatchNorm '%s' has %lld: mismatched channel counts",
                           f->path, s->origin, ch, f->bn[b].name, (long long)f->bn[b].channels);
            break;
        }
        char why[200];
        snprintf(why, sizeof why, "stated: %s", s->origin);
        st = npuc__bnf_add_pair(f, (size_t)w, (size_t)b, groups, NPUC_BNFOLD_EXPLICIT, 0, why);
    }
    npuc__bnf_statements_free(sts, ns);
    for (size_t b = 0; b < f->nbn && st == NPUC_OK; b++)
        if (f->bn_state[b] == UNDECIDED) st = npuc__bnf_skip_bn(f, b, NULL, "not among the stated pairs");
    return st;
}
