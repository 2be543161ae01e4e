/*
 * graph_bn.c - the BatchNorm view: which tensors form each BatchNorm, and
 * which producer feeds it (npuc__graph_attach_bns; docs/fold-bn.md explains
 * the rules with examples).
 *
 * A BatchNorm is a set of tensors sharing a prefix: running_mean and
 * running_var (PyTorch, with weight/bias/num_batches_tracked), w_1 and w_2
 * (Paddle, with w_0/b_0), moving_mean and moving_variance (Keras, with
 * gamma/beta).  A producer is a float weight with a channel axis (a layout
 * other than none).  Each BatchNorm then goes through the rules in order of
 * certainty, and the first rule with an answer decides: a link, or a
 * refusal with the reason.  A later, weaker rule never overrides an earlier
 * answer, and a producer claimed by two BatchNorms through automatic rules
 * links to neither (one of them would need its output as it was).
 *
 * This file holds the view and the books: recording links and refusals and
 * the claims on producers.  The rules are in graph_bn_stated.c (the file's
 * own graph: ONNX edges), graph_bn_rules.c (stated pairs, model_config,
 * names) and graph_order.c (Keras layer order, storage order).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"

npuc_status npuc__attach_nomem(npuc__attach *a) {
    return npuc_fail(a->ctx, NPUC_ERR_NOMEM, "%s: out of memory", a->g->path);
}

const char *npuc__attach_tname(const npuc__attach *a, size_t i) { return npuc_model_tensor(a->g->m, i)->name; }

/* ------------------------------------------------------------ tensors */

/* A bias by its name: the leaf (without a Keras ":0") is "bias" (PyTorch,
 * Keras) or "b_N" (Paddle).  Such a tensor is never a BatchNorm's producer,
 * whatever role and layout its shape suggested: a Paddle bias [1,C,1,1]
 * read as a transposed convolution has C "output channels" too, and pairing
 * it would scale the bias and create "<bias>.bias". */
static int bias_named(const char *name) {
    size_t n = strlen(name);
    if (n >= 2 && name[n - 1] >= '0' && name[n - 1] <= '9') {
        size_t k = n;
        while (k > 0 && name[k - 1] >= '0' && name[k - 1] <= '9') k--;
        if (k > 0 && name[k - 1] == ':') n = k - 1;
    }
    size_t s = n;
    while (s > 0 && name[s - 1] != '.' && name[s - 1] != '/') s--;
    const char *leaf = name + s;
    size_t ln = n - s;
    if (ln == 4 && memcmp(leaf, "bias", 4) == 0) return 1;
    if (ln < 3 || leaf[0] != 'b' || leaf[1] != '_') return 0;
    for (size_t i = 2; i < ln; i++)
        if (leaf[i] < '0' || leaf[i] > '9') return 0;
    return 1;
}

int npuc__graph_is_producer(const npuc_tensor_info *t) {
    if (!npuc_dtype_is_float(t->dtype) || t->layout == NPUC_LAYOUT_NONE || t->numel == 0) return 0;
    if (t->rank < 2 || bias_named(t->name)) return 0;
    switch (t->role) {
    case NPUC_ROLE_CONV: case NPUC_ROLE_DWCONV: case NPUC_ROLE_LINEAR: case NPUC_ROLE_CONVT:
    case NPUC_ROLE_OTHER:
        return 1;
    default:
        return 0;
    }
}

int npuc__attach_channels_match(const npuc_model *m, size_t i, int64_t channels, int *groups) {
    const npuc_tensor_info *t = npuc_model_tensor(m, i);
    npuc__chan ch;
    uint64_t c = npuc__graph_channels(m, i, &ch);
    *groups = ch.groups;
    if (c == 0 || channels <= 0) return 0;
    if (c == (uint64_t)channels) return 1;
    /* Another reading than the graph's: a transposed conv whose file states
     * no groups, read with groups = channels / its axis-1 extent. */
    uint64_t per = (uint64_t)t->shape[1];
    if (t->layout == NPUC_LAYOUT_IOHW && !ch.stated && per > 0 && (uint64_t)channels % per == 0) {
        uint64_t g = (uint64_t)channels / per;
        if (g > 1 && g <= 1u << 20 && (uint64_t)t->shape[0] % g == 0) {
            *groups = (int)g;
            return 2;
        }
    }
    return 0;
}

void npuc__attach_describe_channels(const npuc_model *m, size_t i, char *buf, size_t n) {
    const npuc_tensor_info *t = npuc_model_tensor(m, i);
    npuc__chan ch;
    unsigned long long c = (unsigned long long)npuc__graph_channels(m, i, &ch);
    if (ch.stated)
        snprintf(buf, n, "'%s' has %llu output channels (layout %s, %d groups stated)", t->name, c,
                 npuc_layout_name(t->layout), ch.groups);
    else
        snprintf(buf, n, "'%s' has %llu output channels (layout %s)", t->name, c, npuc_layout_name(t->layout));
}

int64_t npuc__attach_existing_bias(const npuc__attach *a, size_t conv) {
    char *b = npuc__graph_bias_name(npuc__attach_tname(a, conv));
    size_t idx;
    int64_t r = b && npuc_model_find(a->g->m, b, &idx) == 0 ? (int64_t)idx : -1;
    free(b);
    return r;
}

/* ------------------------------------------------------------ the view */

static npuc_status nomem(npuc_ctx *ctx, const npuc__graph *g) {
    return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", g->path);
}

static npuc_status collect_bns(npuc_ctx *ctx, npuc__graph *g) {
    char *prev = NULL;
    int64_t prev_bn = -1;
    for (size_t i = 0; i < g->n; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(g->m, i);
        if (t->role < NPUC_ROLE_BN_GAMMA || t->role > NPUC_ROLE_BN_COUNT) continue;
        char *key = npuc__graph_module_of(t);
        if (!key) { free(prev); return nomem(ctx, g); }
        int64_t b = -1;
        if (prev && strcmp(prev, key) == 0) b = prev_bn;
        for (size_t k = 0; b < 0 && k < g->nbn; k++)
            if (strcmp(g->bns[k].name, key) == 0) b = (int64_t)k;
        if (b < 0) {
            if (g->nbn == g->capbn) {
                size_t cap = g->capbn ? 2 * g->capbn : 16;
                npuc__bn *nb = realloc(g->bns, cap * sizeof *nb);
                if (!nb) { free(key); free(prev); return nomem(ctx, g); }
                g->bns = nb;
                g->capbn = cap;
            }
            npuc__bn *nb = &g->bns[g->nbn];
            memset(nb, 0, sizeof *nb);
            nb->name = npuc__strdup(key);
            if (!nb->name) { free(key); free(prev); return nomem(ctx, g); }
            nb->gamma = nb->beta = nb->mean = nb->var = nb->count = -1;
            nb->first = i;
            nb->config_eps = NAN;
            nb->evidence = NPUC_EVIDENCE_NAME;
            b = (int64_t)g->nbn++;
        }
        free(prev);
        prev = key;
        prev_bn = b;
        npuc__bn *x = &g->bns[b];
        int64_t *slot = t->role == NPUC_ROLE_BN_GAMMA ? &x->gamma : t->role == NPUC_ROLE_BN_BETA ? &x->beta :
                        t->role == NPUC_ROLE_BN_MEAN ? &x->mean : t->role == NPUC_ROLE_BN_VAR ? &x->var : &x->count;
        if (*slot >= 0) {
            free(prev);
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: BatchNorm '%s': two %s tensors ('%s' and '%s')",
                             g->path, x->name, npuc_role_name(t->role), npuc__gt(g, *slot)->name, t->name);
        }
        *slot = (int64_t)i;
        g->bn_of[i] = b;
    }
    free(prev);
    /* Keep complete BatchNorms; gamma/beta alone are a Keras LayerNormalization. */
    size_t w = 0;
    for (size_t k = 0; k < g->nbn; k++) {
        npuc__bn *x = &g->bns[k];
        int64_t idx[5] = {x->gamma, x->beta, x->mean, x->var, x->count};
        if (x->mean < 0 || x->var < 0) {
            for (int j = 0; j < 5; j++)
                if (idx[j] >= 0) g->bn_of[idx[j]] = -1;
            free(x->name);
            continue;
        }
        const npuc_tensor_info *mt = npuc_model_tensor(g->m, (size_t)x->mean);
        x->channels = mt->rank == 1 ? mt->shape[0] : -1;
        x->keras = npuc__graph_leaf_is(mt->name, "moving_mean");
        npuc_status bad = NPUC_OK;
        for (int j = 0; j < 4 && bad == NPUC_OK; j++) {
            if (idx[j] < 0) continue;
            const npuc_tensor_info *t = npuc_model_tensor(g->m, (size_t)idx[j]);
            if (t->rank != 1 || t->shape[0] != x->channels || t->numel == 0)
                bad = npuc_fail(ctx, NPUC_ERR_FORMAT,
                                "%s: BatchNorm '%s': tensor '%s' has shape %s[%lld], but '%s' is [%lld]: "
                                "mismatched channel counts", g->path, x->name, t->name,
                                t->rank == 1 ? "" : "rank != 1, ", t->rank >= 1 ? (long long)t->shape[0] : 0LL,
                                mt->name, (long long)mt->shape[0]);
            else if (!npuc_dtype_is_float(t->dtype))
                bad = npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: BatchNorm '%s': tensor '%s' is %s, not a float",
                                g->path, x->name, t->name, npuc_dtype_name(t->dtype));
        }
        if (bad != NPUC_OK) {
            /* The view keeps owning the names not compacted yet. */
            size_t left = g->nbn - k;
            memmove(&g->bns[w], x, left * sizeof *x);
            g->nbn = w + left;
            return bad;
        }
        for (int j = 0; j < 5; j++)
            if (idx[j] >= 0) g->bn_of[idx[j]] = (int64_t)w;
        g->bns[w++] = *x;
    }
    g->nbn = w;
    return NPUC_OK;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int64_t npuc__graph_find_bn(const npuc__graph *g, const char *layer) {
    for (size_t k = 0; k < g->nbn; k++)
        if (strcmp(g->bns[k].name, layer) == 0) return (int64_t)k;
    for (size_t k = 0; k < g->nbn; k++)
        if (npuc__graph_names_layer(g->bns[k].name, layer)) return (int64_t)k;
    return -1;
}

npuc_status npuc__graph_read_bns(npuc_ctx *ctx, npuc__graph *g) {
    size_t n1 = g->n ? g->n : 1;
    g->bn_of = malloc(n1 * sizeof *g->bn_of);
    g->sorted = malloc(n1 * sizeof *g->sorted);
    if (!g->bn_of || !g->sorted) return nomem(ctx, g);
    for (size_t i = 0; i < g->n; i++) {
        g->bn_of[i] = -1;
        g->sorted[i] = npuc_model_tensor(g->m, i)->name;
    }
    qsort(g->sorted, g->n, sizeof *g->sorted, cmp_str);
    npuc_status st = collect_bns(ctx, g);
    if (st != NPUC_OK) return st;
    if (npuc__graph_read_kbn(ctx, g) != NPUC_OK) return nomem(ctx, g);
    /* Epsilons from model_config hold whichever rule links a BatchNorm. */
    for (size_t e = 0; e < g->nkbn; e++) {
        int64_t b = npuc__graph_find_bn(g, g->kbn[e].bn);
        if (b < 0) continue;
        g->bns[b].evidence = NPUC_EVIDENCE_CONFIG;
        if (isfinite(g->kbn[e].eps)) g->bns[b].config_eps = g->kbn[e].eps;
    }
    return NPUC_OK;
}

/* ------------------------------------------------------------ the books */

npuc_status npuc__attach_refusal(npuc__attach *a, size_t b, const char *conv, const char *fmt, ...) {
    npuc__bn_attachments *o = a->out;
    if (o->nrefusals == a->caprefusals) {
        size_t cap = a->caprefusals ? 2 * a->caprefusals : 16;
        npuc__bn_refusal *s = realloc(o->refusals, cap * sizeof *s);
        if (!s) return npuc__attach_nomem(a);
        o->refusals = s;
        a->caprefusals = cap;
    }
    npuc__bn_refusal *s = &o->refusals[o->nrefusals];
    memset(s, 0, sizeof *s);
    s->bn = b;
    s->producer = conv ? npuc__strdup(conv) : NULL;
    if (conv && !s->producer) return npuc__attach_nomem(a);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->why, sizeof s->why, fmt, ap);
    va_end(ap);
    o->nrefusals++;
    return NPUC_OK;
}

npuc_status npuc__attach_refuse(npuc__attach *a, size_t b, const char *conv, const char *why) {
    a->state[b] = ATTACH_SKIPPED;
    return npuc__attach_refusal(a, b, conv, "%s", why);
}

npuc_status npuc__attach_link(npuc__attach *a, size_t conv, size_t b, int groups, npuc__evidence ev, int guess,
                              const char *why) {
    npuc__bn_attachments *o = a->out;
    if (o->nlinks == a->caplinks) {
        size_t cap = a->caplinks ? 2 * a->caplinks : 16;
        npuc__bn_link *nl = realloc(o->links, cap * sizeof *nl);
        if (!nl) return npuc__attach_nomem(a);
        o->links = nl;
        a->caplinks = cap;
    }
    npuc__bn_link *x = &o->links[o->nlinks];
    memset(x, 0, sizeof *x);
    x->bn = b;
    x->producer = conv;
    x->groups = groups;
    x->evidence = ev;
    x->guess = guess;
    snprintf(x->why, sizeof x->why, "%s", why);
    a->claim[conv] = (int64_t)o->nlinks;
    a->state[b] = (int64_t)o->nlinks;
    o->nlinks++;
    return NPUC_OK;
}

npuc_status npuc__attach_propose(npuc__attach *a, size_t conv, size_t b, npuc__evidence ev, int guess,
                                 const char *why) {
    const npuc__graph *g = a->g;
    const npuc_tensor_info *t = npuc_model_tensor(g->m, conv);
    char buf[200];
    int groups;
    int match = npuc__attach_channels_match(g->m, conv, g->bns[b].channels, &groups);
    if (match == 2 && guess) {
        /* The pairing is a guess already, and it would also need the
         * producer read otherwise than every other pass reads it: refused,
         * --accept-guesses or not. */
        npuc__attach_describe_channels(g->m, conv, buf, sizeof buf);
        a->state[b] = ATTACH_SKIPPED;
        return npuc__attach_refusal(a, b, t->name,
                                    "channel counts disagree: %s, the BatchNorm %lld; pairing them would take a "
                                    "guessed pairing and %d groups the file does not state",
                                    buf, (long long)g->bns[b].channels, groups);
    }
    char why2[200];
    if (match == 2) {
        /* A stated or name-based pairing that fits only with groups inferred
         * from the BatchNorm: a guess (the graph, and structured prune, read
         * the producer with 1 group). */
        snprintf(why2, sizeof why2, "%s; guess: %d groups from the BatchNorm, the file states none (the graph: "
                 "%llu channels)", why, groups, (unsigned long long)npuc__out_channels(t));
        why = why2;
        guess = 1;
    }
    if (!match) {
        npuc__attach_describe_channels(g->m, conv, buf, sizeof buf);
        a->state[b] = ATTACH_SKIPPED;
        return npuc__attach_refusal(a, b, t->name, "shape mismatch: %s, the BatchNorm %lld%s", buf,
                                    (long long)g->bns[b].channels,
                                    t->layout == NPUC_LAYOUT_OI || t->layout == NPUC_LAYOUT_IO
                                        ? " (a --layout override may be needed)" : "");
    }
    int64_t c = a->claim[conv];
    if (c == ATTACH_CONTESTED) {
        a->state[b] = ATTACH_SKIPPED;
        return npuc__attach_refusal(a, b, t->name, "producer '%s' would feed several BatchNorms", t->name);
    }
    if (c >= 0) {
        npuc__bn_link *other = &a->out->links[c];
        other->dropped = 1;
        a->claim[conv] = ATTACH_CONTESTED;
        a->state[b] = ATTACH_SKIPPED;
        npuc_status st = npuc__attach_refusal(a, other->bn, t->name,
                                              "producer '%s' would feed two BatchNorms ('%s' and '%s')", t->name,
                                              g->bns[other->bn].name, g->bns[b].name);
        if (st != NPUC_OK) return st;
        return npuc__attach_refusal(a, b, t->name, "producer '%s' would feed two BatchNorms ('%s' and '%s')",
                                    t->name, g->bns[other->bn].name, g->bns[b].name);
    }
    npuc_status st = npuc__attach_link(a, conv, b, groups, ev, guess, why);
    if (st == NPUC_OK && match == 2) a->out->links[a->out->nlinks - 1].groups_guessed = 1;
    return st;
}

/* ------------------------------------------------------------ entry point */

void npuc__bn_attachments_free(npuc__bn_attachments *a) {
    if (!a) return;
    for (size_t i = 0; i < a->nrefusals; i++) free(a->refusals[i].producer);
    free(a->links);
    free(a->refusals);
    memset(a, 0, sizeof *a);
}

static npuc_status attach_auto(npuc__attach *a) {
    npuc__graph *g = a->g;
    npuc_status st = npuc__attach_rule_stated_graph(a);
    if (st != NPUC_OK) return st;
    if (g->kbn_understood && (st = npuc__attach_rule_topology(a)) != NPUC_OK) return st;
    for (size_t b = 0; b < g->nbn && st == NPUC_OK; b++)
        if (a->state[b] == ATTACH_UNDECIDED) st = npuc__attach_rule_names(a, b);
    if (st != NPUC_OK) return st;
    if ((st = npuc__attach_rule_keras_order(a)) != NPUC_OK) return st;
    size_t *rest = malloc((g->nbn ? g->nbn : 1) * sizeof *rest), nrest = 0;
    if (!rest) return npuc__attach_nomem(a);
    for (size_t b = 0; b < g->nbn; b++)
        if (a->state[b] == ATTACH_UNDECIDED) rest[nrest++] = b;
    if (g->alphabetical && nrest) st = npuc__attach_rule_aligned(a, rest, nrest);
    else
        for (size_t k = 0; k < nrest && st == NPUC_OK; k++) st = npuc__attach_rule_nearest(a, rest[k]);
    free(rest);
    return st;
}

npuc_status npuc__graph_attach_bns(npuc_ctx *ctx, npuc__graph *g, const char *const *pairs, size_t npairs,
                                   const char *pairs_file, npuc__bn_attachments *out) {
    npuc__attach a;
    memset(&a, 0, sizeof a);
    memset(out, 0, sizeof *out);
    a.ctx = ctx;
    a.g = g;
    a.out = out;
    a.state = malloc((g->nbn ? g->nbn : 1) * sizeof *a.state);
    a.claim = malloc((g->n ? g->n : 1) * sizeof *a.claim);
    npuc_status st;
    if (!a.state || !a.claim) st = npuc__attach_nomem(&a);
    else {
        for (size_t k = 0; k < g->nbn; k++) a.state[k] = ATTACH_UNDECIDED;
        for (size_t i = 0; i < g->n; i++) a.claim[i] = -1;
        st = npairs || pairs_file ? npuc__attach_rule_explicit(&a, pairs, npairs, pairs_file) : attach_auto(&a);
    }
    free(a.state);
    free(a.claim);
    if (st != NPUC_OK) npuc__bn_attachments_free(out);
    return st;
}
