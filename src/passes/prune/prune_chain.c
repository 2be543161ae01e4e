/*
 * prune_chain.c - everything that shares one producer's output channels,
 * the unit structured pruning removes channels from.
 *
 * Structured pruning removes output channels of a producer (a conv or
 * linear layer).  The same channel space runs through the producer's bias,
 * every BatchNorm on it, any depthwise convolution on it (channel i in,
 * channel i out, with its own bias and BatchNorm) and ends in the input
 * channels of the consumers.  A chain lists all of these; if any link is
 * uncertain the chain is not "ok" and the caller zeroes filters instead of
 * removing them.
 *
 * Which module follows which is the graph's answer (src/graph/: stated
 * edges --next/--graph and bn_pairs first, then model_config, Keras layer
 * order, nn.Sequential naming); this file walks those edges from a producer
 * and checks that every module on the way keeps the channel count.  A
 * stated edge that does not fit is the caller's error; anything found
 * automatically that does not fit only stops the chain.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/prune/prune_internal.h"

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

static int visit(walk *w, npuc_ctx *ctx, npuc_status *st, size_t y);

/* A link of the chain rests on a guess: the chain is one, and the first
 * reason is kept for the warning that lists it. */
static void note_guess(npuc__chain *c, const npuc__next *next) {
    if (!next->guess) return;
    if (!c->guess) npuc__fmt(c->guess_why, sizeof c->guess_why, "%s", next->guess_why);
    c->guess = 1;
}

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
    const npuc__xedge *e = npuc__graph_stated_next(w->g, x);
    npuc__next next;
    int rc;
    if (e) {
        const char *saved = w->edge;
        int64_t b = npuc__graph_stated_bn(w->g, x);
        if (b < 0 && !w->g->mods[x].is_bn) {
            /* No stated BatchNorm: take one the automatic evidence puts right after x. */
            if (npuc__graph_next(w->g, x, &next) == 0 && next.n == 1 && w->g->mods[next.mod[0]].is_bn) {
                b = (int64_t)next.mod[0];
                note_guess(w->c, &next);
            }
        }
        if (b >= 0 && (rc = add_bn(w, ctx, st, (size_t)b)) != 0) return rc;
        w->used_explicit = 1;
        w->edge = e->text;
        for (size_t i = 0; i < e->ncons; i++)
            if ((rc = visit(w, ctx, st, e->cons[i])) != 0) return rc;
        w->edge = saved;
        return 0;
    }
    int64_t b = npuc__graph_stated_bn(w->g, x);
    if (b >= 0) {
        if ((rc = add_bn(w, ctx, st, (size_t)b)) != 0) return rc;
        w->used_explicit = 1;
        x = (size_t)b; /* the space continues after the stated BatchNorm */
        if (npuc__graph_stated_next(w->g, x)) return follow(w, ctx, st, x);
    }
    const char *saved = w->edge;
    w->edge = NULL; /* automatic evidence: failures fall back */
    rc = npuc__graph_next(w->g, x, &next);
    note_guess(w->c, &next);
    if (next.output) w->c->output = 1;
    if (rc) {
        npuc__fmt(w->c->why, sizeof w->c->why, "%s", next.why);
        w->edge = saved;
        return rc;
    }
    for (size_t i = 0; i < next.n && rc == 0; i++) rc = visit(w, ctx, st, next.mod[i]);
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
    npuc__chan tch;
    npuc__graph_channels(g->m, (size_t)md->weight, &tch);
    if (tch.groups > 1)
        return wfail(w, ctx, st, "consumer '%s' is a transposed conv of %d groups", t->name, tch.groups);
    if (npuc__in_channels(t) != c->channels)
        return wfail(w, ctx, st, "consumer '%s'%s has %llu input channels, the producer %llu output channels",
                     t->name, t->layout == NPUC_LAYOUT_OIHW && t->shape[1] == 1 ? " (grouped?)" : "",
                     (unsigned long long)npuc__in_channels(t), (unsigned long long)c->channels);
    if (c->ncons >= NPUC_CHAIN_MAX) return wfail(w, ctx, st, "too many consumers");
    c->cons[c->ncons++] = (size_t)md->weight;
    return 0;
}

/* The evidence in the words of the producer's note. */
static const char *how_words(npuc__evidence ev) {
    switch (ev) {
    case NPUC_EVIDENCE_EXPLICIT: return "--next/--graph";
    case NPUC_EVIDENCE_CONFIG: return "keras topology";
    case NPUC_EVIDENCE_LAYER_ORDER: return "layer order";
    default: return "sequential naming";
    }
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
    npuc__chan ch; /* the channels every pass reads (fold-bn included) */
    c->channels = npuc__graph_channels(g->m, wt, &ch);
    if (ch.groups > 1) {
        npuc__fmt(c->why, sizeof c->why, "a transposed conv of %d groups: its channels span the groups", ch.groups);
        return NPUC_OK;
    }
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
    const npuc__evidence ev = w.used_explicit ? NPUC_EVIDENCE_EXPLICIT : npuc__graph_next_evidence(g);
    snprintf(c->how, sizeof c->how, "%s%s", how_words(ev), c->guess ? " (guess)" : "");
    return NPUC_OK;
}

/* ------------------------------------------------------------ the graph */

npuc_status npuc__chain_graph(npuc_ctx *ctx, npuc_model *m, const npuc_prune_opts *o, npuc__graph **out) {
    npuc__graph *g;
    npuc_status st = npuc__graph_open(ctx, m, &g);
    *out = NULL;
    if (st != NPUC_OK) return st;
    g->no_guess = o->no_guess;
    if ((st = npuc__graph_read_stated(ctx, g)) != NPUC_OK) goto fail;
    if ((st = npuc__graph_read_modules(ctx, g)) != NPUC_OK) goto fail;
    if ((st = npuc__graph_read_next(ctx, g, o->next, o->nnext, o->graph_file)) != NPUC_OK) goto fail;
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
