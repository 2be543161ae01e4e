/*
 * recipe_steps.c - one small adapter per step kind: the keys a recipe may
 * give the step (its command's long options, '_' for '-'), the override
 * keys it honours, cross-key checks, and the translation into the pass's
 * model-level call.
 *
 * Overrides become the pass's own per-tensor rules, placed before the rules
 * the step's options give, so that "the first matching rule wins" lets the
 * more specific recipe entry decide:  bits -> quantize's layer_bits
 * "REGEX=N", group_size -> quantize's layer_group_size "REGEX=G", rank ->
 * lowrank's layer_rank "REGEX=R", sparsity -> prune's layer_sparsity
 * "REGEX=S", skip -> the pass's exclude list.  An override key a step does
 * not honour is refused at parse time with the keys it does take.
 *
 * A step whose pass is not part of this build has run == NULL: a recipe
 * naming it parses, and running it fails with "not available".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/recipe_internal.h"

#if defined(__has_include)
#if __has_include("npuc/bnfold.h")
#include "npuc/bnfold.h"
#define NPUC_HAVE_BNFOLD 1
#endif
#if __has_include("npuc/prune.h")
#include "npuc/prune.h"
#define NPUC_HAVE_PRUNE 1
#endif
#if __has_include("npuc/lowrank.h")
#include "npuc/lowrank.h"
#define NPUC_HAVE_LOWRANK 1
#endif
#endif

/* ------------------------------------------------------------ helpers */

static npuc_status where_fail(npuc_ctx *ctx, const char *file, recipe_mark m, const char *step, const char *msg) {
    char where[512];
    return npuc_fail(ctx, NPUC_ERR_ARG, "%sstep '%s': %s", npuc__recipe_where(file, m, where, sizeof where), step,
                     msg);
}

/* A growable list of strings, owned or borrowed. */
typedef struct strv {
    const char **v;
    char **own;
    size_t n, nown;
} strv;

static int strv_push(strv *s, const char *x) {
    const char **p = realloc(s->v, (s->n + 1) * sizeof *p);
    if (!p) return -1;
    s->v = p;
    p[s->n++] = x;
    return 0;
}

static int strv_push_own(strv *s, char *x) {
    if (!x) return -1;
    char **p = realloc(s->own, (s->nown + 1) * sizeof *p);
    if (!p) { free(x); return -1; }
    s->own = p;
    p[s->nown++] = x;
    return strv_push(s, x);
}

static void strv_free(strv *s) {
    for (size_t i = 0; i < s->nown; i++) free(s->own[i]);
    free(s->own);
    free(s->v);
    memset(s, 0, sizeof *s);
}

static int strv_add_list(strv *s, const recipe_opt *o) {
    for (size_t i = 0; o && i < o->nlist; i++)
        if (strv_push(s, o->list[i])) return -1;
    return 0;
}

/* rules += "MATCH=VALUE" for every override that sets key (an integer, or a
 * number printed with %.17g so the pass parses back the recipe's double). */
static int build_rules(const recipe_step *s, const char *key, strv *rules) {
    for (size_t k = 0; k < s->nov; k++) {
        const recipe_opt *v = npuc__ropt(&s->ov[k], key);
        if (!v) continue;
        const char *re = npuc__ropt(&s->ov[k], "match")->s;
        size_t n = strlen(re) + 32;
        char *rule = malloc(n);
        if (rule) {
            if (v->key->type == RT_INT) snprintf(rule, n, "%s=%lld", re, (long long)v->i);
            else snprintf(rule, n, "%s=%.17g", re, v->d);
        }
        if (strv_push_own(rules, rule)) return -1;
    }
    return 0;
}

/* exclude := overrides with skip: true, then the step's exclude option. */
static int build_exclude(const recipe_step *s, strv *ex) {
    for (size_t k = 0; k < s->nov; k++) {
        const recipe_opt *sk = npuc__ropt(&s->ov[k], "skip");
        if (sk && sk->b && strv_push(ex, npuc__ropt(&s->ov[k], "match")->s)) return -1;
    }
    return strv_add_list(ex, npuc__ropt(&s->opts, "exclude"));
}

/* A file a recipe names, relative to the recipe's folder unless absolute
 * (so a recipe and its pairs file move together).  malloc'd. */
static char *recipe_file(const recipe_hooks *h, const char *p) {
    const char *slash = strrchr(h->recipe, '/');
    if (p[0] == '/' || !slash) return npuc__strdup(p);
    size_t dl = (size_t)(slash - h->recipe), n = dl + strlen(p) + 2;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%.*s/%s", (int)dl, h->recipe, p);
    return s;
}

static int get_bool(const recipe_step *s, const char *k, int dflt) {
    const recipe_opt *o = npuc__ropt(&s->opts, k);
    return o ? o->b : dflt;
}

static int check_rule_bits(const char *s, char *why, size_t n) {
    const char *eq = strrchr(s, '=');
    char *end;
    long b = eq ? strtol(eq + 1, &end, 10) : 0;
    if (!eq || *end || b < 2 || b > 8) {
        snprintf(why, n, "'%s': the bit width after '=' must be 2..8", s);
        return -1;
    }
    return 0;
}

static int check_range(const char *s, char *why, size_t n) {
    npuc_ctx *c;
    if (npuc_ctx_new(&c) != NPUC_OK) { snprintf(why, n, "out of memory"); return -1; }
    npuc_range_opts r;
    int rc = npuc_range_parse(c, s, &r) == NPUC_OK ? 0 : -1;
    if (rc) snprintf(why, n, "%s", npuc_ctx_errmsg(c));
    npuc_ctx_free(c);
    return rc;
}

/* ------------------------------------------------------------ quantize */

static const recipe_key QUANTIZE_KEYS[] = {
    {"bits", RT_INT, 2, 8, 0, NULL},
    {"symmetric", RT_BOOL, 0, 0, 0, NULL},
    {"asymmetric", RT_BOOL, 0, 0, 0, NULL},
    {"per_channel", RT_BOOL, 0, 0, 0, NULL},
    {"per_tensor", RT_BOOL, 0, 0, 0, NULL},
    {"group_size", RT_INT, 2, 1 << 30, 0, NULL},
    {"axis", RT_INT, 0, 7, 0, NULL},
    {"range", RT_STR, 0, 0, 0, check_range},
    {"include", RT_LIST, 0, 0, RK_REGEX, NULL},
    {"exclude", RT_LIST, 0, 0, RK_REGEX, NULL},
    {"layer_bits", RT_LIST, 0, 0, RK_RULE, check_rule_bits},
    {"quantize_all", RT_BOOL, 0, 0, 0, NULL},
    {"fake_quant", RT_BOOL, 0, 0, 0, NULL},
    {NULL, RT_BOOL, 0, 0, 0, NULL},
};
static const char *const QUANTIZE_OV[] = {"bits", "group_size", "skip", NULL};

static npuc_status validate_quantize(npuc_ctx *ctx, const char *file, const recipe_step *s) {
    const recipe_opt *pc = npuc__ropt(&s->opts, "per_channel"), *pt = npuc__ropt(&s->opts, "per_tensor"),
                     *gs = npuc__ropt(&s->opts, "group_size"), *sy = npuc__ropt(&s->opts, "symmetric"),
                     *as = npuc__ropt(&s->opts, "asymmetric");
    if (pc && !pc->b) return where_fail(ctx, file, pc->mark, "quantize", "'per_channel: false' chooses nothing: set per_tensor or group_size instead");
    if (pt && !pt->b) return where_fail(ctx, file, pt->mark, "quantize", "'per_tensor: false' chooses nothing: leave it out (per channel is the default)");
    int ngran = (pc != NULL) + (pt != NULL) + (gs != NULL);
    if (ngran > 1) {
        const recipe_opt *second = gs ? gs : pt;
        if (pc && pt && !gs) second = pc->mark.line > pt->mark.line ? pc : pt;
        return where_fail(ctx, file, second->mark, "quantize", "choose one of per_channel, per_tensor, group_size");
    }
    if (sy && as && sy->b == as->b)
        return where_fail(ctx, file, as->mark, "quantize", "'symmetric' and 'asymmetric' contradict each other");
    return NPUC_OK;
}

static npuc_status run_quantize(npuc_ctx *ctx, const recipe_step *s, npuc_model *m, const char *out,
                                const recipe_hooks *h, npuc_summary *sum) {
    npuc_quantize_opts o = npuc_quantize_opts_defaults();
    strv inc = {0}, exc = {0}, lb = {0}, lg = {0};
    npuc_status st = NPUC_OK;
    const recipe_opt *v;
    if ((v = npuc__ropt(&s->opts, "bits"))) o.params.bits = (int)v->i;
    if ((v = npuc__ropt(&s->opts, "symmetric"))) o.params.symmetric = v->b;
    if ((v = npuc__ropt(&s->opts, "asymmetric"))) o.params.symmetric = !v->b;
    if (get_bool(s, "per_tensor", 0)) o.params.gran = NPUC_GRAN_TENSOR;
    if ((v = npuc__ropt(&s->opts, "group_size"))) {
        o.params.gran = NPUC_GRAN_GROUP;
        o.params.group_size = (uint32_t)v->i;
    }
    if ((v = npuc__ropt(&s->opts, "axis"))) o.params.axis = (int)v->i;
    if ((v = npuc__ropt(&s->opts, "range")) && (st = npuc_range_parse(ctx, v->s, &o.params.range)) != NPUC_OK)
        return st;
    o.quantize_all = get_bool(s, "quantize_all", 0);
    o.fake_quant = get_bool(s, "fake_quant", 0);
    if (build_rules(s, "bits", &lb) || build_rules(s, "group_size", &lg) ||
        strv_add_list(&lb, npuc__ropt(&s->opts, "layer_bits")) ||
        strv_add_list(&inc, npuc__ropt(&s->opts, "include")) || build_exclude(s, &exc))
        goto nomem;
    o.include = inc.v;
    o.ninclude = inc.n;
    o.exclude = exc.v;
    o.nexclude = exc.n;
    o.layer_bits = lb.v;
    o.nlayer_bits = lb.n;
    o.layer_group_size = lg.v;
    o.nlayer_group_size = lg.n;
    o.write = h->write;
    o.on_tensor = h->on_tensor;
    o.user = h->user;
    st = npuc_quantize_model(ctx, m, out, &o, sum);
    goto done;
nomem:
    st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
done:
    strv_free(&inc);
    strv_free(&exc);
    strv_free(&lb);
    strv_free(&lg);
    return st;
}

/* ------------------------------------------------------------ fold-bn */

static int check_pair(const char *s, char *why, size_t n) {
    const char *eq = strchr(s, '=');
    if (!eq || eq == s || !eq[1]) {
        snprintf(why, n, "'%s' must be CONV=BN", s);
        return -1;
    }
    return 0;
}

static const recipe_key FOLD_KEYS[] = {
    {"eps", RT_NUM, 0, 1, RK_LO_OPEN, NULL},
    {"pair", RT_LIST, 0, 0, 0, check_pair},
    {"pairs", RT_STR, 0, 0, 0, NULL},
    {"no_guess", RT_BOOL, 0, 0, 0, NULL},
    {NULL, RT_BOOL, 0, 0, 0, NULL},
};
static const char *const NO_OV[] = {NULL};

#ifdef NPUC_HAVE_BNFOLD
static npuc_status run_fold(npuc_ctx *ctx, const recipe_step *s, npuc_model *m, const char *out,
                            const recipe_hooks *h, npuc_summary *sum) {
    npuc_bnfold_params p = npuc_bnfold_params_defaults();
    strv pairs = {0};
    const recipe_opt *v;
    if ((v = npuc__ropt(&s->opts, "eps"))) p.eps = v->d;
    if (strv_add_list(&pairs, npuc__ropt(&s->opts, "pair"))) {
        strv_free(&pairs);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    p.pairs = pairs.v;
    p.npairs = pairs.n;
    char *pf = NULL;
    if ((v = npuc__ropt(&s->opts, "pairs"))) {
        if (!(pf = recipe_file(h, v->s))) {
            strv_free(&pairs);
            return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        }
        p.pairs_file = pf;
    }
    p.no_guess = get_bool(s, "no_guess", 0);
    p.write = h->write;
    p.on_tensor = h->on_tensor;
    p.user = h->user;
    npuc_bnfold_plan plan;
    npuc_status st = npuc_bnfold_find(ctx, m, &p, &plan);
    if (st == NPUC_OK) st = npuc_bnfold_model(ctx, m, &plan, &p, out, sum);
    npuc_bnfold_plan_free(&plan);
    strv_free(&pairs);
    free(pf);
    return st;
}
#define RUN_FOLD run_fold
#else
#define RUN_FOLD NULL
#endif

/* ------------------------------------------------------------ lowrank */

static int check_solver(const char *s, char *why, size_t n) {
    if (strcmp(s, "auto") && strcmp(s, "exact") && strcmp(s, "randomized")) {
        snprintf(why, n, "'%s' is not a solver (auto, exact, randomized)", s);
        return -1;
    }
    return 0;
}

static const recipe_key LOWRANK_KEYS[] = {
    {"rank", RT_INT, 1, 2147483647.0, 0, NULL},
    {"rank_ratio", RT_NUM, 0, 1, RK_LO_OPEN, NULL},
    {"energy", RT_NUM, 0, 1, RK_LO_OPEN, NULL},
    {"max_error", RT_NUM, 0, 1, RK_LO_OPEN | RK_HI_OPEN, NULL},
    {"round_to", RT_INT, 1, 1 << 20, 0, NULL},
    {"solver", RT_STR, 0, 0, 0, check_solver},
    {"oversample", RT_INT, 0, 1000, 0, NULL},
    {"power_iters", RT_INT, 0, 100, 0, NULL},
    {"seed", RT_INT, 0, 9007199254740992.0, 0, NULL},
    {"include", RT_LIST, 0, 0, RK_REGEX, NULL},
    {"exclude", RT_LIST, 0, 0, RK_REGEX, NULL},
    {NULL, RT_BOOL, 0, 0, 0, NULL},
};
static const char *const SKIP_OV[] = {"skip", NULL};
static const char *const LOWRANK_OV[] = {"rank", "skip", NULL};

static npuc_status validate_lowrank(npuc_ctx *ctx, const char *file, const recipe_step *s) {
    static const char *const rules[] = {"rank", "rank_ratio", "energy", "max_error"};
    const recipe_opt *first = NULL;
    for (int i = 0; i < 4; i++) {
        const recipe_opt *o = npuc__ropt(&s->opts, rules[i]);
        if (!o) continue;
        if (first)
            return where_fail(ctx, file, o->mark, "lowrank",
                              "choose one rank rule: rank, rank_ratio, energy or max_error");
        first = o;
    }
    if (!first)
        return where_fail(ctx, file, s->mark, "lowrank",
                          "needs a rank rule: rank, rank_ratio, energy or max_error");
    return NPUC_OK;
}

#ifdef NPUC_HAVE_LOWRANK
static npuc_status run_lowrank(npuc_ctx *ctx, const recipe_step *s, npuc_model *m, const char *out,
                               const recipe_hooks *h, npuc_summary *sum) {
    npuc_lowrank_opts o = npuc_lowrank_opts_defaults();
    const recipe_opt *v;
    if ((v = npuc__ropt(&s->opts, "rank"))) { o.params.rule = NPUC_RANK_FIXED; o.params.rank = v->i; }
    if ((v = npuc__ropt(&s->opts, "rank_ratio"))) { o.params.rule = NPUC_RANK_RATIO; o.params.value = v->d; }
    if ((v = npuc__ropt(&s->opts, "energy"))) { o.params.rule = NPUC_RANK_ENERGY; o.params.value = v->d; }
    if ((v = npuc__ropt(&s->opts, "max_error"))) { o.params.rule = NPUC_RANK_MAX_ERROR; o.params.value = v->d; }
    if ((v = npuc__ropt(&s->opts, "round_to"))) o.params.round_to = v->i;
    if ((v = npuc__ropt(&s->opts, "solver"))) npuc_svd_solver_parse(v->s, &o.params.svd.solver);
    if ((v = npuc__ropt(&s->opts, "oversample"))) o.params.svd.oversample = (int)v->i;
    if ((v = npuc__ropt(&s->opts, "power_iters"))) o.params.svd.power_iters = (int)v->i;
    if ((v = npuc__ropt(&s->opts, "seed"))) o.params.svd.seed = (uint64_t)v->i;
    npuc_status st = npuc_lowrank_params_check(ctx, &o.params);
    if (st != NPUC_OK) return st;
    strv inc = {0}, exc = {0}, lr = {0};
    if (strv_add_list(&inc, npuc__ropt(&s->opts, "include")) || build_exclude(s, &exc) ||
        build_rules(s, "rank", &lr)) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    } else {
        o.include = inc.v;
        o.ninclude = inc.n;
        o.exclude = exc.v;
        o.nexclude = exc.n;
        o.layer_rank = lr.v;
        o.nlayer_rank = lr.n;
        o.write = h->write;
        o.on_tensor = h->on_tensor;
        o.user = h->user;
        st = npuc_lowrank_model(ctx, m, out, &o, sum);
    }
    strv_free(&inc);
    strv_free(&exc);
    strv_free(&lr);
    return st;
}
#define RUN_LOWRANK run_lowrank
#else
#define RUN_LOWRANK NULL
#endif

/* ------------------------------------------------------------ prune, sparsify */

static int check_scope(const char *s, char *why, size_t n) {
    if (strcmp(s, "layer") && strcmp(s, "global")) {
        snprintf(why, n, "'%s' is not a scope (layer, global)", s);
        return -1;
    }
    return 0;
}

static int check_structured(const char *s, char *why, size_t n) {
    if (strcmp(s, "filter") && strcmp(s, "channel")) {
        snprintf(why, n, "'%s' is not a structure (filter, channel)", s);
        return -1;
    }
    return 0;
}

static int check_criterion(const char *s, char *why, size_t n) {
    if (strcmp(s, "l1") && strcmp(s, "l2")) {
        snprintf(why, n, "'%s' is not a criterion (l1, l2)", s);
        return -1;
    }
    return 0;
}

static int check_next(const char *s, char *why, size_t n) {
    const char *eq = strchr(s, '=');
    if (!eq || eq == s || !eq[1]) {
        snprintf(why, n, "'%s' must be PRODUCER=CONSUMER[,CONSUMER...]", s);
        return -1;
    }
    return 0;
}

static int check_pattern_nm(const char *s, char *why, size_t n) {
    int a, b;
    char *end;
    long x = strtol(s, &end, 10), y = *end == ':' ? strtol(end + 1, &end, 10) : 0;
    a = (int)x;
    b = (int)y;
    if (*end || a < 1 || b <= a || b > 16) {
        snprintf(why, n, "'%s' is not an N:M pattern with 1 <= N < M <= 16 (quote it: \"2:4\")", s);
        return -1;
    }
    return 0;
}

static const recipe_key PRUNE_KEYS[] = {
    {"sparsity", RT_NUM, 0, 1, RK_HI_OPEN, NULL},
    {"scope", RT_STR, 0, 0, 0, check_scope},
    {"structured", RT_STR, 0, 0, 0, check_structured},
    {"criterion", RT_STR, 0, 0, 0, check_criterion},
    {"round_to", RT_INT, 1, 1 << 20, 0, NULL},
    {"next", RT_LIST, 0, 0, 0, check_next},
    {"graph", RT_STR, 0, 0, 0, NULL},
    {"no_guess", RT_BOOL, 0, 0, 0, NULL},
    {"include", RT_LIST, 0, 0, RK_REGEX, NULL},
    {"exclude", RT_LIST, 0, 0, RK_REGEX, NULL},
    {NULL, RT_BOOL, 0, 0, 0, NULL},
};
static const recipe_key SPARSIFY_KEYS[] = {
    {"pattern", RT_STR, 0, 0, 0, check_pattern_nm},
    {"compressed", RT_BOOL, 0, 0, 0, NULL},
    {"peak_tops", RT_NUM, 0, 1e9, RK_LO_OPEN, NULL},
    {"bandwidth", RT_NUM, 0, 1e9, RK_LO_OPEN, NULL},
    {"tokens", RT_NUM, 0, 1e15, RK_LO_OPEN, NULL},
    {"include", RT_LIST, 0, 0, RK_REGEX, NULL},
    {"exclude", RT_LIST, 0, 0, RK_REGEX, NULL},
    {NULL, RT_BOOL, 0, 0, 0, NULL},
};

static npuc_status validate_prune(npuc_ctx *ctx, const char *file, const recipe_step *s) {
    const recipe_opt *sp = npuc__ropt(&s->opts, "sparsity"), *st = npuc__ropt(&s->opts, "structured");
    if (!sp) return where_fail(ctx, file, s->mark, "prune", "needs 'sparsity: S' (0 <= S < 1)");
    const char *unstructured_only[] = {"scope"}, *structured_only[] = {"criterion", "round_to", "next", "graph"};
    if (st) {
        const recipe_opt *o = npuc__ropt(&s->opts, unstructured_only[0]);
        if (o) return where_fail(ctx, file, o->mark, "prune", "'scope' applies to unstructured pruning only");
    } else {
        for (int i = 0; i < 4; i++) {
            const recipe_opt *o = npuc__ropt(&s->opts, structured_only[i]);
            if (o) return where_fail(ctx, file, o->mark, "prune", "this option needs 'structured: filter|channel'");
        }
    }
    return NPUC_OK;
}

#ifdef NPUC_HAVE_PRUNE
static npuc_status run_prune(npuc_ctx *ctx, const recipe_step *s, npuc_model *m, const char *out,
                             const recipe_hooks *h, npuc_summary *sum) {
    npuc_prune_opts o = npuc_prune_opts_defaults();
    const recipe_opt *v;
    if ((v = npuc__ropt(&s->opts, "sparsity"))) o.sparsity = v->d;
    if ((v = npuc__ropt(&s->opts, "scope"))) o.scope = strcmp(v->s, "global") ? NPUC_PRUNE_LAYER : NPUC_PRUNE_GLOBAL;
    if ((v = npuc__ropt(&s->opts, "structured")))
        o.structure = strcmp(v->s, "filter") ? NPUC_PRUNE_CHANNEL : NPUC_PRUNE_FILTER;
    if ((v = npuc__ropt(&s->opts, "criterion"))) o.criterion = strcmp(v->s, "l1") ? NPUC_PRUNE_L2 : NPUC_PRUNE_L1;
    if ((v = npuc__ropt(&s->opts, "round_to"))) o.round_to = (uint32_t)v->i;
    char *gf = NULL;
    if ((v = npuc__ropt(&s->opts, "graph")) && !(gf = recipe_file(h, v->s)))
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    o.graph_file = gf;
    o.no_guess = get_bool(s, "no_guess", 0);
    strv inc = {0}, exc = {0}, nx = {0}, ls = {0};
    npuc_status st;
    if (strv_add_list(&inc, npuc__ropt(&s->opts, "include")) || build_exclude(s, &exc) ||
        strv_add_list(&nx, npuc__ropt(&s->opts, "next")) || build_rules(s, "sparsity", &ls)) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    } else {
        o.include = inc.v;
        o.ninclude = inc.n;
        o.exclude = exc.v;
        o.nexclude = exc.n;
        o.layer_sparsity = ls.v;
        o.nlayer_sparsity = ls.n;
        o.next = nx.v;
        o.nnext = nx.n;
        o.write = h->write;
        o.on_tensor = h->on_tensor;
        o.user = h->user;
        st = npuc_prune_model(ctx, m, out, &o, sum);
    }
    strv_free(&inc);
    strv_free(&exc);
    strv_free(&nx);
    strv_free(&ls);
    free(gf);
    return st;
}

static npuc_status run_sparsify(npuc_ctx *ctx, const recipe_step *s, npuc_model *m, const char *out,
                                const recipe_hooks *h, npuc_summary *sum) {
    npuc_sparsify_opts o = npuc_sparsify_opts_defaults();
    const recipe_opt *v;
    if ((v = npuc__ropt(&s->opts, "pattern")) && npuc_nm_parse(v->s, &o.n, &o.m) != 0)
        return npuc_fail(ctx, NPUC_ERR_ARG, "pattern '%s': not N:M", v->s);
    o.compressed = get_bool(s, "compressed", 0);
    if ((v = npuc__ropt(&s->opts, "peak_tops"))) o.cost.peak_tops = v->d;
    if ((v = npuc__ropt(&s->opts, "bandwidth"))) o.cost.bandwidth_gbs = v->d;
    if ((v = npuc__ropt(&s->opts, "tokens"))) o.cost.tokens = v->d;
    strv inc = {0}, exc = {0};
    npuc_status st;
    if (strv_add_list(&inc, npuc__ropt(&s->opts, "include")) || build_exclude(s, &exc)) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    } else {
        o.include = inc.v;
        o.ninclude = inc.n;
        o.exclude = exc.v;
        o.nexclude = exc.n;
        o.write = h->write;
        o.on_tensor = h->on_tensor;
        o.user = h->user;
        st = npuc_sparsify_model(ctx, m, out, &o, sum);
    }
    strv_free(&inc);
    strv_free(&exc);
    return st;
}
#define RUN_PRUNE run_prune
#define RUN_SPARSIFY run_sparsify
#else
#define RUN_PRUNE NULL
#define RUN_SPARSIFY NULL
#endif
static const char *const PRUNE_OV[] = {"sparsity", "skip", NULL};

/* ------------------------------------------------------------ the table */

static const recipe_step_def DEFS[NPUC_STEP_COUNT] = {
    [NPUC_STEP_FOLD_BN] = {"fold-bn", FOLD_KEYS, NO_OV, NULL, RUN_FOLD},
    [NPUC_STEP_PRUNE] = {"prune", PRUNE_KEYS, PRUNE_OV, validate_prune, RUN_PRUNE},
    [NPUC_STEP_SPARSIFY] = {"sparsify", SPARSIFY_KEYS, SKIP_OV, NULL, RUN_SPARSIFY},
    [NPUC_STEP_LOWRANK] = {"lowrank", LOWRANK_KEYS, LOWRANK_OV, validate_lowrank, RUN_LOWRANK},
    [NPUC_STEP_QUANTIZE] = {"quantize", QUANTIZE_KEYS, QUANTIZE_OV, validate_quantize, run_quantize},
};

const recipe_step_def *npuc__recipe_step_def(npuc_step_kind k) {
    return (unsigned)k < NPUC_STEP_COUNT ? &DEFS[k] : NULL;
}
