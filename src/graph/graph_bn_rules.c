/*
 * graph_bn_rules.c - the strongest rules of BatchNorm attachment: stated
 * pairs, Keras model_config, names (graph_order.c has the order rules;
 * graph_bn.c runs them all and keeps the books).
 *
 * Each rule either decides a BatchNorm (npuc__attach_propose: a link,
 * unless the shapes disagree or the producer is claimed twice;
 * npuc__attach_refuse: a refusal with the reason) or leaves it to the next
 * rule.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"

/* ------------------------------------------------------------ rule: model_config */

npuc_status npuc__attach_rule_topology(npuc__attach *a) {
    for (size_t e = 0; e < a->g->nkbn; e++) {
        const npuc__kbn_edge *ed = &a->g->kbn[e];
        int64_t b = npuc__graph_find_bn(a->g, ed->bn);
        if (b < 0) continue;
        if (a->state[b] != ATTACH_UNDECIDED) continue;
        if (ed->shared)
            return npuc_fail(a->ctx, NPUC_ERR_FORMAT,
                             "%s: BatchNorm '%s': model_config applies it to several inputs (one BatchNorm "
                             "consumed by two producers cannot be folded)", a->g->path, ed->bn);
        if (ed->skip[0]) {
            npuc_status st = npuc__attach_refuse(a, (size_t)b, ed->producer, ed->skip);
            if (st != NPUC_OK) return st;
            continue;
        }
        /* A nested layer's weights sit beside the BatchNorm's: same parent
         * path.  A Keras 3 BatchNorm is its variable group "layers/<bn>/vars",
         * its producer's kernel "layers/<producer>/vars/0". */
        const char *key = a->g->bns[b].name;
        size_t kl = strlen(key);
        const int k3 = kl > 5 && strcmp(key + kl - 5, "/vars") == 0;
        char *base = npuc__graph_strndup(key, k3 ? kl - 5 : kl);
        const char *leaf = base ? npuc__graph_leaf(base) : NULL;
        char *parent = base ? npuc__graph_strndup(base, (size_t)(leaf - base)) : NULL;
        char *pm = parent ? npuc__graph_concat3(parent, ed->producer, k3 ? "/vars/0" : "") : NULL;
        free(parent);
        free(base);
        if (!pm) return npuc__attach_nomem(a);
        size_t k3w;
        int64_t w = k3 ? (npuc_model_find(a->g->m, pm, &k3w) == 0 ? (int64_t)k3w : -1)
                       : npuc__graph_module_weight(a->g, pm);
        if (w < 0) w = npuc__graph_module_weight(a->g, ed->producer);
        free(pm);
        char why[200];
        if (w < 0 || !npuc__graph_is_producer(npuc_model_tensor(a->g->m, (size_t)w))) {
            snprintf(why, sizeof why, "model_config: its input is '%s' (%s), but the file has no float kernel for it",
                     ed->producer, ed->producer_class);
            npuc_status st = npuc__attach_refuse(a, (size_t)b, ed->producer, why);
            if (st != NPUC_OK) return st;
            continue;
        }
        int groups;
        if (!npuc__attach_channels_match(a->g->m, (size_t)w, a->g->bns[b].channels, &groups)) {
            npuc__attach_describe_channels(a->g->m, (size_t)w, why, sizeof why);
            return npuc_fail(a->ctx, NPUC_ERR_FORMAT,
                             "%s: BatchNorm '%s': model_config says '%s' feeds it, but %s and the BatchNorm "
                             "has %lld: mismatched channel counts", a->g->path, key, ed->producer, why,
                             (long long)a->g->bns[b].channels);
        }
        snprintf(why, sizeof why, "model_config: the input of '%s' is '%s' (%s)", ed->bn, ed->producer,
                 ed->producer_class);
        npuc_status st = npuc__attach_propose(a, (size_t)w, (size_t)b, NPUC_EVIDENCE_CONFIG, 0, why);
        if (st != NPUC_OK) return st;
    }
    return NPUC_OK;
}

/* ------------------------------------------------------------ rule: names */

/* Tries module `cand` (parent + name) as b's producer.  Returns 1 when it
 * decided (paired or skipped), 0 when the module has no weight.
 *
 * Pre-activation networks (DenseNet's norm1 -> conv1, PreAct ResNet's bn1 ->
 * conv1) put the BatchNorm before its namesake conv: folding it into the
 * conv's output would be wrong.  In graph-ordered storage that shows as the
 * conv stored after the BatchNorm, which is then skipped; sequence indices
 * (A.0 -> A.1) need no such check. */
static int try_module(npuc__attach *a, size_t b, const char *cand, const char *why, int check_order, int guess,
                      npuc_status *st) {
    int64_t w = npuc__graph_module_weight(a->g, cand);
    *st = NPUC_OK;
    if (w < 0) return 0;
    const npuc_tensor_info *t = npuc_model_tensor(a->g->m, (size_t)w);
    a->state[b] = ATTACH_SKIPPED;
    if (!npuc__graph_is_producer(t)) {
        *st = npuc__attach_refusal(a, b, t->name, "names pair it with '%s', which is not a float conv/linear "
                       "weight (role %s, layout %s)", t->name, npuc_role_name(t->role), npuc_layout_name(t->layout));
        return 1;
    }
    if (check_order && !a->g->alphabetical && (size_t)w > a->g->bns[b].first) {
        *st = npuc__attach_refusal(a, b, t->name, "names pair it with '%s', but that is stored after the "
                       "BatchNorm (pre-activation: the BatchNorm feeds it?)", t->name);
        return 1;
    }
    a->state[b] = ATTACH_UNDECIDED;
    *st = npuc__attach_propose(a, (size_t)w, b, NPUC_EVIDENCE_NAME, guess, why);
    return 1;
}

npuc_status npuc__attach_rule_names(npuc__attach *a, size_t b) {
    const char *key = a->g->bns[b].name;
    long s = npuc__graph_last_sep(key, strlen(key));
    char sep[2] = {s >= 0 ? key[s] : 0, 0};
    char *parent = npuc__graph_strndup(key, s >= 0 ? (size_t)s : 0);
    const char *leaf = key + (s + 1);
    char why[200], num[32];
    npuc_status st = NPUC_OK;
    char *cand = NULL, *word = NULL;
    if (!parent) return npuc__attach_nomem(a);
    /* nn.Sequential: features.1 follows features.0, downsample.1 follows
     * downsample.0, and a top-level torch.save(nn.Sequential(...)): 1 follows 0. */
    if (npuc__graph_all_digits(leaf) && strlen(leaf) < 18) {
        long long k = strtoll(leaf, NULL, 10);
        if (k > 0) {
            snprintf(num, sizeof num, "%lld", k - 1);
            cand = npuc__graph_concat3(parent, sep, num);
            if (!cand) goto oom;
            snprintf(why, sizeof why, "names: module '%s' comes right before '%s' in a sequence", cand, key);
            if (try_module(a, b, cand, why, 0, 0, &st)) goto done;
            snprintf(why, sizeof why, "module '%s' right before it has %s (an activation or pooling in between?)",
                     cand, npuc__graph_has_prefix(a->g, cand) ? "no conv/linear weight" : "no weights");
            st = npuc__attach_refuse(a, b, NULL, why);
            goto done;
        }
    }
    /* Keras: X / X_BN, X / bn_X. */
    if ((word = npuc__graph_keras_producer_name(leaf)) != NULL) {
        cand = npuc__graph_concat3(parent, sep, word);
        if (!cand) goto oom;
        snprintf(why, sizeof why, "names: '%s' / '%s'", cand, key);
        if (try_module(a, b, cand, why, 1, 0, &st)) goto done;
        free(cand);
        cand = NULL;
    }
    /* conv1 / bn1, X.conv / X.bn, X._conv / X._batch_norm. */
    if (!npuc__graph_counter_name(leaf)) {
        free(word);
        if ((word = npuc__graph_conv_for_bn_leaf(leaf)) != NULL) {
            cand = npuc__graph_concat3(parent, sep, word);
            if (!cand) goto oom;
            /* Alphabetical storage cannot tell ResNet's conv1 -> bn1 from a
             * pre-activation block's bn1 -> conv1 (DenseNet's norm1 -> conv1). */
            if (a->g->alphabetical)
                snprintf(why, sizeof why, "guess: names '%s' / '%s', but storage order is alphabetical, so a "
                         "pre-activation block (BatchNorm before the conv) cannot be ruled out", cand, key);
            else
                snprintf(why, sizeof why, "names: '%s' / '%s'", cand, key);
            if (try_module(a, b, cand, why, 1, a->g->alphabetical, &st)) goto done;
        }
    }
    goto done;
oom:
    st = npuc__attach_nomem(a);
done:
    free(parent);
    free(cand);
    free(word);
    return st;
}

/* ------------------------------------------------------------ rule: explicit */

/* A conv named by a statement: a weight tensor, or a module / layer. */
static int64_t resolve_conv(const npuc__graph *g, const char *s) {
    size_t idx;
    if (npuc_model_find(g->m, s, &idx) == 0) return (int64_t)idx;
    return npuc__graph_module_weight(g, s);
}

/* A BatchNorm named by a statement: its module / layer, or one of its tensors. */
static int64_t resolve_bn(const npuc__graph *g, const char *s) {
    size_t idx;
    if (npuc_model_find(g->m, s, &idx) == 0 && g->bn_of[idx] >= 0) return g->bn_of[idx];
    return npuc__graph_find_bn(g, s);
}

npuc_status npuc__attach_rule_explicit(npuc__attach *a, const char *const *pairs, size_t npairs, const char *file) {
    npuc__pair_stmt *sts = NULL;
    size_t ns = 0;
    npuc__graph_stated gs;
    npuc_status st = npuc__graph_stated_open(a->ctx, a->g, &gs);
    if (st != NPUC_OK) return st;
    st = npuc__graph_pair_statements(a->ctx, pairs, npairs, file, &sts, &ns);
    if (st != NPUC_OK) {
        npuc__graph_stated_close(&gs);
        return st;
    }
    for (size_t k = 0; k < ns && st == NPUC_OK; k++) {
        const npuc__pair_stmt *s = &sts[k];
        int64_t w = resolve_conv(a->g, s->conv), b = resolve_bn(a->g, s->bn);
        if (w < 0) {
            st = npuc_fail(a->ctx, NPUC_ERR_ARG, "%s: %s: no tensor or layer '%s' in the file", a->g->path, s->origin, s->conv);
            break;
        }
        const npuc_tensor_info *t = npuc_model_tensor(a->g->m, (size_t)w);
        if (!npuc__graph_is_producer(t)) {
            st = npuc_fail(a->ctx, NPUC_ERR_ARG, "%s: %s: tensor '%s' is not a float conv/linear weight (role %s, "
                           "layout %s; a --layout override may be needed)", a->g->path, s->origin, t->name,
                           npuc_role_name(t->role), npuc_layout_name(t->layout));
            break;
        }
        if (b < 0) {
            st = npuc_fail(a->ctx, NPUC_ERR_ARG, "%s: %s: '%s' is not a BatchNorm in the file", a->g->path, s->origin, s->bn);
            break;
        }
        if (a->state[b] >= 0) {
            const npuc__bn_link *o = &a->out->links[a->state[b]];
            if (o->producer == (size_t)w) continue; /* stated twice */
            st = npuc_fail(a->ctx, NPUC_ERR_ARG, "%s: %s: BatchNorm '%s' is stated for two producers ('%s' and "
                           "'%s'): a BatchNorm consumed by two producers cannot be folded", a->g->path, s->origin,
                           a->g->bns[b].name, npuc__attach_tname(a, o->producer), t->name);
            break;
        }
        if (a->claim[w] >= 0) {
            st = npuc_fail(a->ctx, NPUC_ERR_ARG, "%s: %s: '%s' is stated for two BatchNorms ('%s' and '%s')",
                           a->g->path, s->origin, t->name, a->g->bns[a->out->links[a->claim[w]].bn].name, a->g->bns[b].name);
            break;
        }
        /* The file's own graph, when it states this BatchNorm, has the last word. */
        int64_t gw;
        const char *gnode;
        char gwhy[200];
        int verdict = npuc__graph_stated_verdict(a->g, &gs, (size_t)b, &gw, &gnode, gwhy, sizeof gwhy);
        if (verdict == 0) {
            st = npuc_fail(a->ctx, NPUC_ERR_ARG, "%s: %s: the file states otherwise: BatchNorm '%s' cannot be "
                           "folded: %s", a->g->path, s->origin, a->g->bns[b].name, gwhy);
            break;
        }
        if (verdict == 1 && gw != w) {
            st = npuc_fail(a->ctx, NPUC_ERR_ARG, "%s: %s: the file states otherwise: BatchNorm '%s' follows '%s' "
                           "(%s)", a->g->path, s->origin, a->g->bns[b].name, npuc__attach_tname(a, (size_t)gw), gwhy);
            break;
        }
        int groups;
        int match = npuc__attach_channels_match(a->g->m, (size_t)w, a->g->bns[b].channels, &groups);
        if (!match) {
            char ch[160];
            npuc__attach_describe_channels(a->g->m, (size_t)w, ch, sizeof ch);
            st = npuc_fail(a->ctx, NPUC_ERR_ARG, "%s: %s: %s but BatchNorm '%s' has %lld: mismatched channel counts",
                           a->g->path, s->origin, ch, a->g->bns[b].name, (long long)a->g->bns[b].channels);
            break;
        }
        char why[200];
        if (match == 2)
            snprintf(why, sizeof why, "stated: %s; guess: %d groups from the BatchNorm, the file states none "
                     "(the graph: %llu channels)", s->origin, groups, (unsigned long long)npuc__out_channels(t));
        else
            snprintf(why, sizeof why, "stated: %s%s", s->origin, verdict == 1 ? " (the file's graph agrees)" : "");
        st = npuc__attach_link(a, (size_t)w, (size_t)b, groups, NPUC_EVIDENCE_EXPLICIT, match == 2, why);
        if (st == NPUC_OK && match == 2) a->out->links[a->out->nlinks - 1].groups_guessed = 1;
    }
    npuc__graph_pair_statements_free(sts, ns);
    npuc__graph_stated_close(&gs);
    for (size_t b = 0; b < a->g->nbn && st == NPUC_OK; b++)
        if (a->state[b] == ATTACH_UNDECIDED) st = npuc__attach_refuse(a, b, NULL, "not among the stated pairs");
    return st;
}
