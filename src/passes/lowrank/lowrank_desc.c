/*
 * lowrank_desc.c - the descriptor of the low-rank pass (npuc/pass.h): the
 * rank rules and SVD options, as `npuc lowrank` flags and recipe keys, and
 * the run that calls npuc_lowrank_model.
 *
 * The row order is the recipe's canonical key order (docs/recipes.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/pass_desc.h"

static int check_rule_rank(const char *s, char *why, size_t n) {
    const char *eq = strrchr(s, '=');
    char *end;
    long long r = eq && eq[1] ? strtoll(eq + 1, &end, 10) : 0;
    if (!eq || !eq[1] || *end || r < 1 || r > 2147483647LL) {
        snprintf(why, n, "'%s': the rank after '=' must be an integer >= 1", s);
        return -1;
    }
    return 0;
}

#define RULE "Rank rule (exactly one)"
enum { RULES = 1 };
static const char *const SOLVERS[] = {"auto", "exact", "randomized", NULL};

static const npuc_pass_option OPTIONS[] = {
    {.name = "rank", .flag = "rank", .type = NPUC_OPT_INT, .lo = 1, .hi = 2147483647.0, .metavar = "R",
     .section = RULE, .help = "rank R (>= 1)", .bad = "must be a positive integer", .group = RULES},
    {.name = "rank_ratio", .flag = "rank-ratio", .type = NPUC_OPT_NUM, .lo = 0, .hi = 1, .flags = NPUC_OPT_LO_OPEN,
     .metavar = "F", .section = RULE, .help = "rank ceil(F * min(m, n)), F in (0, 1]",
     .bad = "must be a number in (0, 1]", .group = RULES},
    {.name = "energy", .flag = "energy", .type = NPUC_OPT_NUM, .lo = 0, .hi = 1, .flags = NPUC_OPT_LO_OPEN,
     .metavar = "E", .section = RULE, .help = "smallest rank keeping fraction E of sum s_i^2, E in (0, 1]",
     .bad = "must be a number in (0, 1]", .group = RULES},
    {.name = "max_error", .flag = "max-error", .type = NPUC_OPT_NUM, .lo = 0, .hi = 1,
     .flags = NPUC_OPT_LO_OPEN | NPUC_OPT_HI_OPEN, .metavar = "X", .section = RULE,
     .help = "smallest rank with |W - W_r|_F / |W|_F <= X, X in (0, 1)", .bad = "must be a number in (0, 1)",
     .group = RULES},
    {.name = "round_to", .flag = "round-to", .type = NPUC_OPT_INT, .lo = 1, .hi = 1 << 30, .dflt = "1",
     .metavar = "M", .section = RULE, .help = "round ranks up to a multiple of M (default 1)",
     .bad = "must be a positive integer"},
    {.name = "layer_rank", .flag = "layer-rank", .type = NPUC_OPT_LIST, .lo = 1, .hi = 2147483647.0,
     .flags = NPUC_OPT_RULE,
     .metavar = "REGEX=R", .section = RULE,
     .help = "rank R (>= 1) for selected tensors matching REGEX instead\n"
             "of the rule above, as if given --rank R (--round-to applies);\n"
             "the first matching rule wins (repeatable); an R above a\n"
             "matched tensor's min(m, n) is an error",
     .check = check_rule_rank, .override_key = "rank"},
    {.name = "solver", .flag = "solver", .type = NPUC_OPT_STR, .choices = SOLVERS, .noun = "solver",
     .dflt = "auto", .metavar = "S", .section = "Solver",
     .help = "exact (LAPACK sgesdd, sgesvd fallback), randomized\n"
             "(Halko-Martinsson-Tropp), or auto (default: randomized\n"
             "when the rank is small against min(m, n))",
     .bad = "must be exact, randomized or auto"},
    {.name = "oversample", .flag = "oversample", .type = NPUC_OPT_INT, .lo = 0, .hi = 1000, .dflt = "10",
     .metavar = "P", .section = "Solver", .help = "randomized: extra sketch columns (default 10)",
     .bad = "must be 0..1000"},
    {.name = "power_iters", .flag = "power-iters", .type = NPUC_OPT_INT, .lo = 0, .hi = 100, .dflt = "3",
     .metavar = "Q", .section = "Solver", .help = "randomized: power iterations (default 3)", .bad = "must be 0..100"},
    {.name = "seed", .flag = "seed", .type = NPUC_OPT_INT, .lo = 0, .hi = 9007199254740992.0, .dflt = "0",
     .metavar = "S", .section = "Solver", .help = "randomized: Gaussian sketch seed 0..2^53 (default 0)",
     .bad = "must be an integer 0..2^53"},
    {.name = "include", .flag = "include", .type = NPUC_OPT_LIST, .flags = NPUC_OPT_REGEX, .metavar = "REGEX",
     .section = "Selection",
     .help = "factor only tensors matching REGEX (repeatable); each must be\n"
             "a factorable float weight, and --rank must not exceed its min(m, n)"},
    {.name = "exclude", .flag = "exclude", .type = NPUC_OPT_LIST, .flags = NPUC_OPT_REGEX, .metavar = "REGEX",
     .section = "Selection", .help = "never factor tensors matching REGEX (repeatable)", .override_key = "skip"},
};

static const npuc_pass_section SECTIONS[] = {
    {RULE, NULL, 0},
    {"Solver", NULL, 0},
    {"Selection",
     "Default: every float weight with layout oi, io, oihw or hwio except depthwise\n"
     "kernels; one whose --rank exceeds min(m, n) stays dense.",
     1},
    {"Output", NULL, 0},
    {NULL, NULL, 0},
};

static const char *const OVERRIDES[] = {"rank", "skip", NULL};
static const char *const BASE[] = {"rank=2", NULL};

static const npuc_pass_echo ECHO[] = {
    {"rule", NULL}, {"value", NULL}, {"round_to", "round_to"}, {"solver", "solver"},
    {"oversample", "oversample"}, {"power_iters", "power_iters"}, {"seed", NULL}, {"include", "include"},
    {"exclude", "exclude"}, {"layer_rank", "layer_rank"}, {NULL, NULL},
};

static npuc_lowrank_params params_of(const npuc_pass_optset *s) {
    npuc_lowrank_params p = npuc_lowrank_params_defaults();
    const recipe_opt *v;
    if ((v = npuc__pass_get(s, "rank"))) p.rule = NPUC_RANK_FIXED, p.rank = v->i;
    if ((v = npuc__pass_get(s, "rank_ratio"))) p.rule = NPUC_RANK_RATIO, p.value = v->d;
    if ((v = npuc__pass_get(s, "energy"))) p.rule = NPUC_RANK_ENERGY, p.value = v->d;
    if ((v = npuc__pass_get(s, "max_error"))) p.rule = NPUC_RANK_MAX_ERROR, p.value = v->d;
    p.round_to = npuc__pass_int(s, "round_to");
    npuc_svd_solver_parse(npuc__pass_str(s, "solver"), &p.svd.solver);
    p.svd.oversample = (int)npuc__pass_int(s, "oversample");
    p.svd.power_iters = (int)npuc__pass_int(s, "power_iters");
    p.svd.seed = (uint64_t)npuc__pass_int(s, "seed");
    return p;
}

static npuc_status validate(npuc_ctx *ctx, const npuc_pass_optset *s) {
    char msg[160];
    if (npuc__pass_is_cli(s)) {
        const npuc_pass_option *first = NULL;
        for (size_t i = 0; i < s->nlog; i++) {
            const npuc_pass_option *o = &s->pass->options[s->log[i]];
            if (o->group != RULES) continue;
            if (first) {
                snprintf(msg, sizeof msg, "--%s and --%s: give one rank rule", first->flag, o->flag);
                return npuc__pass_fail(ctx, s, NULL, msg);
            }
            first = o;
        }
        if (!first)
            return npuc__pass_fail(ctx, s, NULL, "choose a rank rule: --rank, --rank-ratio, --energy or --max-error");
        return NPUC_OK;
    }
    static const char *const rules[] = {"rank", "rank_ratio", "energy", "max_error"};
    const recipe_opt *first = NULL;
    for (int i = 0; i < 4; i++) {
        const recipe_opt *o = npuc__pass_get(s, rules[i]);
        if (!o) continue;
        if (first) return npuc__pass_fail(ctx, s, o, "choose one rank rule: rank, rank_ratio, energy or max_error");
        first = o;
    }
    if (!first) return npuc__pass_fail(ctx, s, NULL, "needs a rank rule: rank, rank_ratio, energy or max_error");
    return NPUC_OK;
}

static void tag(const npuc_pass_optset *s, char *buf, size_t n) { snprintf(buf, n, "lr"); }

static int echo_value(const npuc_pass_optset *s, const char *name, npuc_pass_value *v) {
    static const char *const RULE_NAMES[] = {"none", "rank", "rank_ratio", "energy", "max_error"};
    npuc_lowrank_params p = params_of(s);
    if (strcmp(name, "rule") == 0) {
        v->type = NPUC_OPT_STR;
        snprintf(v->s, sizeof v->s, "%s", RULE_NAMES[(unsigned)p.rule < 5 ? p.rule : 0]);
    } else if (strcmp(name, "value") == 0) {
        v->type = p.rule == NPUC_RANK_FIXED ? NPUC_OPT_INT : NPUC_OPT_NUM;
        v->i = p.rank;
        v->d = p.value;
    } else if (strcmp(name, "seed") == 0) {
        /* A string: a 64-bit seed does not fit every JSON reader's numbers. */
        v->type = NPUC_OPT_STR;
        snprintf(v->s, sizeof v->s, "%llu", (unsigned long long)p.svd.seed);
    } else {
        return 1;
    }
    return 0;
}

static npuc_status run(npuc_ctx *ctx, const npuc_pass_optset *s, npuc_model *m, const npuc__sink *to,
                       const npuc_pass_io *io, npuc_summary *sum) {
    npuc_lowrank_opts o = npuc_lowrank_opts_defaults();
    o.params = params_of(s);
    npuc_status st = npuc_lowrank_params_check(ctx, &o.params);
    if (st != NPUC_OK) return st;
    const npuc__strv *lr = npuc__pass_strv(s, "layer_rank");
    NPUC__PASS_SELECT(o, s);
    o.layer_rank = lr->v;
    o.nlayer_rank = lr->n;
    NPUC__PASS_IO(o, io);
    const npuc__sink sink = npuc__sink_with(to, &o.write);
    return npuc__lowrank_model_to(ctx, m, &sink, &o, sum);
}

const npuc_pass npuc__pass_lowrank = {
    .name = "lowrank",
    .kind = NPUC_STEP_LOWRANK,
    .summary = "factor weights into two low-rank matrices by truncated SVD",
    .usage = "IN [-o OUT] (--rank R | --rank-ratio F | --energy E | --max-error X)\n"
             "                    [--layer-rank REGEX=R]... [options]",
    .intro = "Replaces each selected weight W [m x n] (split at its layout's output axis:\n"
             "[out, in*kh*kw] for OIHW, [kh*kw*in, out] for HWIO) by two factors of rank r,\n"
             "<name>.lr_a (output side) and <name>.lr_b, in the source dtype: a kh x kw conv\n"
             "with r outputs followed by a 1x1 conv, or two Linear/Dense layers\n"
             "(docs/lowrank.md).  A layer where r(m+n) >= mn stays dense (\"no saving\").\n"
             "'npuc decompress' multiplies the factors back.  An ONNX OUT gets each factored\n"
             "MatMul / Gemm / Conv (group 1) as two nodes; a weight of the default selection\n"
             "whose node cannot be split (a grouped Conv, another op, two readers) stays dense\n"
             "(docs/onnx.md).\n",
    .footer = "Errors (exit 2, nothing written): no or two rank rules, a value out of range, an\n"
              "--include match that cannot be factored (1-D, integer, depthwise layout) or whose\n"
              "--rank exceeds min(m, n), a --layer-rank R above a matched tensor's min(m, n), a\n"
              "pattern that matches no tensor, NaN or Inf in a tensor to factor, an existing OUT\n"
              "without -f, an --include match an ONNX OUT cannot write as split nodes.\n",
    .verb = "factoring",
    .output_help = "the artifact (default: IN's name with .lr); the format follows\n"
                   "OUT's extension, else IN's format",
    .json_help = "print an npuc.report/1 JSON document instead of the table",
    NPUC__PASS_TABLES,
    .flags = NPUC_PASS_WARNINGS,
    .tag = tag,
    .validate = validate,
    .echo_value = echo_value,
    .run = run,
};
