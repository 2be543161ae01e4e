/*
 * bnfold_pairs.c - the fold plan (npuc_bnfold_find; include/npuc/bnfold.h
 * lists the rules, docs/fold-bn.md explains them with examples).
 *
 * Which layer feeds each BatchNorm is the graph's question
 * (src/graph/graph_bn.c: stated pairs, model_config, names, Keras layer
 * order, storage order, each link with its evidence).  This file turns the
 * answer into a plan: a pair per trustworthy link (a link that lost its
 * producer to a second BatchNorm folds neither), a skip per refused
 * BatchNorm, and per pair what folding needs: the bias to fold into or
 * create, and the eps with its source.
 *
 * A guessed link (only storage order or numbering supports it) is a skip
 * marked guess, listed with why it was guessed, unless the policy accepts
 * guesses (--accept-guesses; --no-guess overrides that).  Under --strict
 * without --accept-guesses the first guess is NPUC_ERR_GUESS, raised here,
 * before the driver opens anything.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npuc/netgraph.h"
#include "passes/bnfold/bnfold_internal.h"

const char *npuc_bnfold_how_name(npuc_bnfold_how h) {
    static const char *const N[] = {"explicit", "topology", "name", "layer-order", "order", "graph"};
    return (unsigned)h < sizeof N / sizeof N[0] ? N[h] : "?";
}

npuc_bnfold_params npuc_bnfold_params_defaults(void) {
    npuc_bnfold_params p;
    memset(&p, 0, sizeof p);
    p.write = npuc_write_opts_defaults();
    return p;
}

void npuc_bnfold_plan_free(npuc_bnfold_plan *plan) {
    if (!plan) return;
    for (size_t i = 0; i < plan->npairs; i++) {
        free(plan->pairs[i].bias_name);
        free(plan->pairs[i].bn.name);
    }
    for (size_t i = 0; i < plan->nskips; i++) {
        free(plan->skips[i].bn);
        free(plan->skips[i].conv);
    }
    free(plan->pairs);
    free(plan->skips);
    memset(plan, 0, sizeof *plan);
}

static npuc_bnfold_how how_of(npuc__evidence e) {
    switch (e) {
    case NPUC_EVIDENCE_EXPLICIT: return NPUC_BNFOLD_EXPLICIT;
    case NPUC_EVIDENCE_CONFIG: return NPUC_BNFOLD_TOPOLOGY;
    case NPUC_EVIDENCE_NAME: return NPUC_BNFOLD_NAME;
    case NPUC_EVIDENCE_LAYER_ORDER: return NPUC_BNFOLD_LAYER_ORDER;
    case NPUC_EVIDENCE_GRAPH: return NPUC_BNFOLD_GRAPH;
    default: return NPUC_BNFOLD_ORDER;
    }
}

/* Appends a skip; plan->skips has room (allocated for every refusal and
 * link).  NULL names stay NULL; why is formatted with vsnprintf, cut at the
 * field's size. */
static npuc_status add_skip(npuc_ctx *ctx, const char *path, npuc_bnfold_plan *plan, const char *bn,
                            const char *conv, const char *fmt, ...) NPUC_PRINTF(6, 7);
static npuc_status add_skip(npuc_ctx *ctx, const char *path, npuc_bnfold_plan *plan, const char *bn,
                            const char *conv, const char *fmt, ...) {
    npuc_bnfold_skip *s = &plan->skips[plan->nskips++]; /* owned from here, for npuc_bnfold_plan_free */
    memset(s, 0, sizeof *s);
    s->bn = bn ? npuc__strdup(bn) : NULL;
    s->conv = conv ? npuc__strdup(conv) : NULL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->why, sizeof s->why, fmt, ap);
    va_end(ap);
    if ((bn && !s->bn) || (conv && !s->conv)) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
    return NPUC_OK;
}

/* A guessed link's reason without its leading "guess: " (the callers say it). */
static const char *guess_why(const npuc__bn_link *l) {
    return strncmp(l->why, "guess: ", 7) == 0 ? l->why + 7 : l->why;
}

/* NPUC_ERR_GUESS for guessed link l, naming what would fix it. */
static npuc_status refuse_guess(npuc_ctx *ctx, const npuc__graph *g, const npuc__bn_link *l, size_t more) {
    const char *bn = g->bns[l->bn].name, *conv = npuc__gt(g, (int64_t)l->producer)->name;
    char rest[64] = "";
    if (more) snprintf(rest, sizeof rest, " (and %zu more guessed pairing%s)", more, more == 1 ? "" : "s");
    if (l->groups_guessed)
        return npuc_fail(ctx, NPUC_ERR_GUESS,
                         "%s: BatchNorm '%s': pairing it with '%s' is a guess (%s); refused by --strict: a depthwise "
                         "transposed conv is stated with --layout '%s=oihw' (channels on axis 0), or apply guesses "
                         "with --accept-guesses%s",
                         g->path, bn, conv, guess_why(l), conv, rest);
    return npuc_fail(ctx, NPUC_ERR_GUESS,
                     "%s: BatchNorm '%s': pairing it with '%s' is a guess (%s); refused by --strict: state it with "
                     "--pair %s=%s or --pairs FILE, or apply guesses with --accept-guesses%s",
                     g->path, bn, conv, guess_why(l), conv, bn, rest);
}

/* Pairs and skips from the graph's links and refusals, in their order. */
static npuc_status plan_from_links(npuc_ctx *ctx, const npuc__graph *g, const npuc__bn_attachments *at,
                                   const npuc_bnfold_params *p, npuc_bnfold_plan *plan) {
    const npuc_policy *pol = npuc_ctx_policy(ctx);
    const int accept = pol->accept_guesses && !p->no_guess;
    if (pol->strict && !accept) {
        size_t nguess = 0, first = 0;
        for (size_t k = 0; k < at->nlinks; k++)
            if (!at->links[k].dropped && at->links[k].guess && nguess++ == 0) first = k;
        if (nguess) return refuse_guess(ctx, g, &at->links[first], nguess - 1);
    }
    plan->pairs = calloc(at->nlinks ? at->nlinks : 1, sizeof *plan->pairs);
    plan->skips = calloc(at->nrefusals + at->nlinks ? at->nrefusals + at->nlinks : 1, sizeof *plan->skips);
    if (!plan->pairs || !plan->skips) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", g->path);
    npuc_status st = NPUC_OK;
    for (size_t k = 0; k < at->nrefusals && st == NPUC_OK; k++) {
        const npuc__bn_refusal *r = &at->refusals[k];
        st = add_skip(ctx, g->path, plan, g->bns[r->bn].name, r->producer, "%s", r->why);
    }
    for (size_t k = 0; k < at->nlinks && st == NPUC_OK; k++) {
        const npuc__bn_link *l = &at->links[k];
        const npuc__bn *b = &g->bns[l->bn];
        if (l->dropped) continue;
        if (l->guess && !accept) {
            st = add_skip(ctx, g->path, plan, b->name, npuc__gt(g, (int64_t)l->producer)->name,
                          "a guess, not applied (--accept-guesses applies it): %s", guess_why(l));
            plan->skips[plan->nskips - 1].guess = 1;
            continue;
        }
        npuc_bnfold_pair *x = &plan->pairs[plan->npairs];
        x->conv = l->producer;
        x->bias = -1;
        x->bn.name = npuc__strdup(b->name);
        if (!x->bn.name) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", g->path);
        x->bn.gamma = b->gamma;
        x->bn.beta = b->beta;
        x->bn.mean = b->mean;
        x->bn.var = b->var;
        x->bn.count = b->count;
        x->bn.channels = b->channels;
        x->bn.keras = b->keras;
        x->how = how_of(l->evidence);
        x->guess = l->guess;
        x->groups = l->groups;
        snprintf(x->why, sizeof x->why, "%s", l->why);
        plan->npairs++;
    }
    return st;
}

/* A bias of n values: [n], or Paddle's [1,n,1,1] (every other extent 1). */
static int vector_of(const npuc_tensor_info *t, int64_t n) {
    if (t->rank < 1 || (int64_t)t->numel != n) return 0;
    int big = 0;
    for (int d = 0; d < t->rank; d++) big += t->shape[d] != 1;
    return big <= 1;
}

/* The epsilon a BatchNormalization node of the file's own graph states
 * (ONNX: the attribute `epsilon`, 1e-5 when absent, as the operator
 * defines it): the node that holds the BatchNorm's mean.  NaN when the
 * file states no such node. */
static double graph_eps(const npuc_model *m, const char *mean) {
    const npuc_graph *ng = npuc_model_graph(m);
    size_t k, n = ng ? npuc_graph_weight_node(ng, mean, &k) : NPUC_GRAPH_NONE;
    npuc_graph_node nd;
    if (n == NPUC_GRAPH_NONE || npuc_graph_get_node(ng, n, &nd) != NPUC_OK || nd.evidence != NPUC_GRAPH_EV_FILE ||
        !nd.op || strcmp(nd.op, "BatchNormalization") != 0)
        return NAN;
    for (size_t a = 0; a < nd.nattrs; a++) {
        const char *key, *val;
        if (npuc_graph_node_attr(ng, n, a, &key, &val) != 0 || strcmp(key, "epsilon") != 0) continue;
        char *end;
        double e = strtod(val, &end);
        return *end == '\0' && isfinite(e) && e > 0 ? e : NAN;
    }
    return 1e-5;
}

/* The bias the file's own graph gives the node reading kernel (an ONNX
 * Conv's input 2, a Gemm's C, whatever their names), or NULL: then the
 * bias is found by name. */
static const char *graph_bias(const npuc_model *m, const char *kernel) {
    const npuc_graph *ng = npuc_model_graph(m);
    size_t n = ng ? npuc_graph_weight_node(ng, kernel, NULL) : NPUC_GRAPH_NONE;
    npuc_graph_node nd;
    if (n == NPUC_GRAPH_NONE || npuc_graph_get_node(ng, n, &nd) != NPUC_OK || nd.evidence != NPUC_GRAPH_EV_FILE)
        return NULL;
    for (size_t k = 0; k < nd.nweights; k++)
        if (nd.weights[k].role && strcmp(nd.weights[k].role, "bias") == 0) return nd.weights[k].tensor;
    return NULL;
}

/* The bias to fold into (or create) and the eps of every pair, then the
 * pairs in their producers' storage order. */
static npuc_status finish_pairs(npuc_ctx *ctx, const npuc__graph *g, const npuc_bnfold_params *p,
                                npuc_bnfold_plan *plan) {
    for (size_t k = 0; k < plan->npairs; k++) {
        npuc_bnfold_pair *x = &plan->pairs[k];
        const npuc_tensor_info *t = npuc_model_tensor(g->m, x->conv);
        const char *gb = graph_bias(g->m, t->name);
        x->bias_name = gb ? npuc__strdup(gb) : npuc__graph_bias_name(t->name);
        if (!x->bias_name) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", g->path);
        size_t idx;
        if (npuc_model_find(g->m, x->bias_name, &idx) == 0) {
            const npuc_tensor_info *bt = npuc_model_tensor(g->m, idx);
            if (g->bn_of[idx] >= 0 || !vector_of(bt, x->bn.channels) || !npuc_dtype_is_float(bt->dtype))
                return npuc_fail(ctx, NPUC_ERR_FORMAT,
                                 "%s: tensor '%s': bias of '%s' should be a float vector of %lld values to fold "
                                 "BatchNorm '%s' (mismatched channel counts)", g->path, bt->name, t->name,
                                 (long long)x->bn.channels, x->bn.name);
            x->bias = (int64_t)idx;
        }
        int64_t b = npuc__graph_find_bn(g, x->bn.name);
        double cfg = b >= 0 ? g->bns[b].config_eps : NAN, gcfg;
        if (p->eps > 0) {
            x->eps = p->eps;
            snprintf(x->eps_source, sizeof x->eps_source, "--eps");
        } else if (isfinite(cfg) && cfg > 0) {
            x->eps = cfg;
            snprintf(x->eps_source, sizeof x->eps_source, "model_config");
        } else if (b >= 0 && isfinite(gcfg = graph_eps(g->m, npuc__gt(g, g->bns[b].mean)->name))) {
            x->eps = gcfg;
            snprintf(x->eps_source, sizeof x->eps_source, "the file's graph");
        } else if (x->bn.keras || (b >= 0 && npuc__graph_is_keras3_var(npuc__gt(g, g->bns[b].mean)->name))) {
            x->eps = NPUC_BNFOLD_EPS_KERAS;
            snprintf(x->eps_source, sizeof x->eps_source, "keras default");
        } else {
            x->eps = NPUC_BNFOLD_EPS_TORCH;
            snprintf(x->eps_source, sizeof x->eps_source, "default");
        }
    }
    /* Created biases must not collide with one another (two producers with
     * the same fallback name cannot happen: names are unique). */
    for (size_t i = 0; i < plan->npairs; i++) {
        for (size_t j = 0; j < i; j++)
            if (plan->pairs[i].bias < 0 && plan->pairs[j].bias == plan->pairs[i].bias &&
                strcmp(plan->pairs[i].bias_name, plan->pairs[j].bias_name) == 0)
                return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: two folded layers would create the bias '%s'",
                                 g->path, plan->pairs[i].bias_name);
    }
    /* In the producers' storage order. */
    for (size_t i = 1; i < plan->npairs; i++) {
        npuc_bnfold_pair x = plan->pairs[i];
        size_t j = i;
        for (; j > 0 && plan->pairs[j - 1].conv > x.conv; j--) plan->pairs[j] = plan->pairs[j - 1];
        plan->pairs[j] = x;
    }
    return NPUC_OK;
}

npuc_status npuc_bnfold_find(npuc_ctx *ctx, npuc_model *m, const npuc_bnfold_params *p,
                             npuc_bnfold_plan *plan) {
    memset(plan, 0, sizeof *plan);
    if (!(p->eps >= 0) || isinf(p->eps)) {
        return npuc_fail(ctx, NPUC_ERR_ARG, "--eps %g: must be a positive number", p->eps);
    }
    if (npuc_model_meta_get(m, "npuc")) {
        return npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: an npuc artifact (compressed weights); decompress it "
                         "before folding BatchNorm", npuc_model_path(m));
    }
    npuc__graph *g = NULL;
    npuc__bn_attachments at;
    memset(&at, 0, sizeof at);
    npuc_status st = npuc__graph_open(ctx, m, &g);
    if (st == NPUC_OK) st = npuc__graph_read_stated(ctx, g);
    if (st == NPUC_OK) st = npuc__graph_read_bns(ctx, g);
    if (st == NPUC_OK) {
        plan->nbn = g->nbn;
        st = npuc__graph_attach_bns(ctx, g, p->pairs, p->npairs, p->pairs_file, &at);
    }
    if (st == NPUC_OK) st = plan_from_links(ctx, g, &at, p, plan);
    if (st == NPUC_OK) st = finish_pairs(ctx, g, p, plan);
    if (st == NPUC_OK) {
        if (p->npairs || p->pairs_file)
            snprintf(plan->order_note, sizeof plan->order_note, "pairs stated explicitly");
        else if (at.nstated && at.nstated == g->nbn)
            snprintf(plan->order_note, sizeof plan->order_note, "pairs from the file's graph (its edges)");
        else
            snprintf(plan->order_note, sizeof plan->order_note, "%s%s%s",
                     at.nstated ? "the file's graph for some; " : "",
                     g->kbn_understood ? "model_config topology; " : "",
                     g->alphabetical ? "storage order is alphabetical: numbers in names stand in for graph order"
                                     : "storage order taken as graph order");
    }
    npuc__bn_attachments_free(&at);
    npuc__graph_free(g);
    if (st != NPUC_OK) npuc_bnfold_plan_free(plan);
    return st;
}
