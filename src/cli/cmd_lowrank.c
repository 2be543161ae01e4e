/*
 * cmd_lowrank.c - `npuc lowrank`: a model in, an artifact with low-rank
 * factors out, and what each factorisation kept and cost.
 *
 * stdout carries the results: one line per tensor as it is factored (the
 * common report line plus energy, error, parameters and FLOPs), then totals;
 * with --json one npuc.report/1 document instead.  --report FILE writes the
 * same data to a file in the format its extension names.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_common.h"

enum {
    OPT_RANK = CLI_OPT_USER,
    OPT_RATIO,
    OPT_ENERGY,
    OPT_MAX_ERROR,
    OPT_ROUND_TO,
    OPT_SOLVER,
    OPT_OVERSAMPLE,
    OPT_POWER_ITERS,
    OPT_SEED,
    OPT_INCLUDE,
    OPT_EXCLUDE,
    OPT_LAYER_RANK,
    OPT_REPORT,
    OPT_DEFLATE
};

static const cli_option OPTIONS[] = {
    {"rank", 0, 1, OPT_RANK},
    {"rank-ratio", 0, 1, OPT_RATIO},
    {"energy", 0, 1, OPT_ENERGY},
    {"max-error", 0, 1, OPT_MAX_ERROR},
    {"round-to", 0, 1, OPT_ROUND_TO},
    {"solver", 0, 1, OPT_SOLVER},
    {"oversample", 0, 1, OPT_OVERSAMPLE},
    {"power-iters", 0, 1, OPT_POWER_ITERS},
    {"seed", 0, 1, OPT_SEED},
    {"include", 0, 1, OPT_INCLUDE},
    {"exclude", 0, 1, OPT_EXCLUDE},
    {"layer-rank", 0, 1, OPT_LAYER_RANK},
    {"report", 0, 1, OPT_REPORT},
    {"deflate", 0, 1, OPT_DEFLATE},
    {NULL, 0, 0, 0},
};

typedef struct lrargs {
    npuc_lowrank_opts o;
    const char **inc, **exc, **lr;
    size_t ninc, nexc, nlr;
    const char *report;
    const char *rule_flag; /* the rank rule given, for "only one" errors */
} lrargs;

/* A finite decimal number; returns 0, or -1. */
static int parse_double(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno == ERANGE || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

static int set_rule(lrargs *q, const char *flag, npuc_rank_rule rule) {
    if (q->rule_flag)
        return cli_usage_error(&cli_cmd_lowrank, "%s and %s: give one rank rule", q->rule_flag, flag);
    q->rule_flag = flag;
    q->o.params.rule = rule;
    return CLI_CONTINUE;
}

static int on_opt(cli_args *a, void *ud, int id, const char *arg) {
    lrargs *q = ud;
    npuc_lowrank_params *p = &q->o.params;
    long v;
    double d;
    (void)a;
    switch (id) {
    case OPT_RANK:
        if (cli_parse_long(arg, 1, 2147483647L, &v) != 0)
            return cli_usage_error(&cli_cmd_lowrank, "--rank '%s': must be a positive integer", arg);
        p->rank = v;
        return set_rule(q, "--rank", NPUC_RANK_FIXED);
    case OPT_RATIO:
        if (parse_double(arg, &d) != 0 || !(d > 0 && d <= 1))
            return cli_usage_error(&cli_cmd_lowrank, "--rank-ratio '%s': must be a number in (0, 1]", arg);
        p->value = d;
        return set_rule(q, "--rank-ratio", NPUC_RANK_RATIO);
    case OPT_ENERGY:
        if (parse_double(arg, &d) != 0 || !(d > 0 && d <= 1))
            return cli_usage_error(&cli_cmd_lowrank, "--energy '%s': must be a number in (0, 1]", arg);
        p->value = d;
        return set_rule(q, "--energy", NPUC_RANK_ENERGY);
    case OPT_MAX_ERROR:
        if (parse_double(arg, &d) != 0 || !(d > 0 && d < 1))
            return cli_usage_error(&cli_cmd_lowrank, "--max-error '%s': must be a number in (0, 1)", arg);
        p->value = d;
        return set_rule(q, "--max-error", NPUC_RANK_MAX_ERROR);
    case OPT_ROUND_TO:
        if (cli_parse_long(arg, 1, 1L << 30, &v) != 0)
            return cli_usage_error(&cli_cmd_lowrank, "--round-to '%s': must be a positive integer", arg);
        p->round_to = v;
        break;
    case OPT_SOLVER:
        if (npuc_svd_solver_parse(arg, &p->svd.solver) != 0)
            return cli_usage_error(&cli_cmd_lowrank, "--solver '%s': must be exact, randomized or auto", arg);
        break;
    case OPT_OVERSAMPLE:
        if (cli_parse_long(arg, 0, 1000, &v) != 0)
            return cli_usage_error(&cli_cmd_lowrank, "--oversample '%s': must be 0..1000", arg);
        p->svd.oversample = (int)v;
        break;
    case OPT_POWER_ITERS:
        if (cli_parse_long(arg, 0, 100, &v) != 0)
            return cli_usage_error(&cli_cmd_lowrank, "--power-iters '%s': must be 0..100", arg);
        p->svd.power_iters = (int)v;
        break;
    case OPT_SEED: {
        char *end;
        errno = 0;
        unsigned long long s = strtoull(arg, &end, 10);
        if (!*arg || *end || errno == ERANGE || arg[0] == '-')
            return cli_usage_error(&cli_cmd_lowrank, "--seed '%s': must be an integer 0..2^64-1", arg);
        p->svd.seed = (uint64_t)s;
        break;
    }
    case OPT_INCLUDE: if (cli_push(&q->inc, &q->ninc, arg)) return CLI_EXIT_FAIL; break;
    case OPT_EXCLUDE: if (cli_push(&q->exc, &q->nexc, arg)) return CLI_EXIT_FAIL; break;
    case OPT_LAYER_RANK: if (cli_push(&q->lr, &q->nlr, arg)) return CLI_EXIT_FAIL; break;
    case OPT_REPORT: q->report = arg; break;
    case OPT_DEFLATE: return cli_set_deflate(&cli_cmd_lowrank, &q->o.write, arg);
    }
    return CLI_CONTINUE;
}

/* ------------------------------------------------------------- printing */

/* After a factored tensor's line: energy, error, params and FLOPs. */
static void lowrank_extra(const npuc_tensor_record *r) {
    char c1[CLI_FMT_MAX], c2[CLI_FMT_MAX];
    if (r->action != NPUC_ACTION_FACTORED) return;
    double fb = npuc_record_get(r, "flops_before", 0), fa = npuc_record_get(r, "flops_after", 0);
    printf("  energy=%.4f err=%.4f  params %s -> %s  flops %.2fx", npuc_record_get(r, "energy", NAN),
           r->err.rel_fro, cli_fmt_count(r->params_before, c1), cli_fmt_count(r->params_after, c2),
           fa > 0 ? fb / fa : 0.0);
}

/* Every parameter of the run, for the report header. */
static char *params_json(const lrargs *q) {
    const npuc_lowrank_params *p = &q->o.params;
    static const char *const RULES[] = {"none", "rank", "rank_ratio", "energy", "max_error"};
    json_t *inc = json_array(), *exc = json_array(), *lr = json_array();
    for (size_t i = 0; i < q->ninc; i++) json_array_append_new(inc, cli_json_str(q->inc[i]));
    for (size_t i = 0; i < q->nexc; i++) json_array_append_new(exc, cli_json_str(q->exc[i]));
    for (size_t i = 0; i < q->nlr; i++) json_array_append_new(lr, cli_json_str(q->lr[i]));
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)p->svd.seed);
    json_t *value = p->rule == NPUC_RANK_FIXED ? json_integer((json_int_t)p->rank) : json_real(p->value);
    json_t *j = json_pack("{s:{s:s, s:o, s:I, s:s, s:i, s:i, s:s, s:o, s:o, s:o}}", "lowrank", "rule",
                          RULES[(unsigned)p->rule < 5 ? p->rule : 0], "value", value, "round_to",
                          (json_int_t)p->round_to, "solver", npuc_svd_solver_name(p->svd.solver), "oversample",
                          p->svd.oversample, "power_iters", p->svd.power_iters, "seed", seed, "include", inc,
                          "exclude", exc, "layer_rank", lr);
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(j);
    return s;
}

static int run(int argc, char **argv) {
    cli_args a;
    lrargs q;
    memset(&q, 0, sizeof q);
    q.o = npuc_lowrank_opts_defaults();
    npuc_ctx *ctx = NULL;
    npuc_model *m = NULL;
    char *out_alloc = NULL, *pj = NULL;
    npuc_summary sum;
    memset(&sum, 0, sizeof sum);
    char *cmdline = cli_join_command(argc, argv);
    int rc = cli_parse(&cli_cmd_lowrank, argc, argv,
                       CLI_OPT_OUTPUT | CLI_OPT_FORCE | CLI_OPT_JOBS | CLI_OPT_LAYOUT | CLI_OPT_JSON, OPTIONS,
                       on_opt, &q, 1, 1, &a);
    if (rc != CLI_CONTINUE) goto done;
    if (!q.rule_flag) {
        rc = cli_usage_error(&cli_cmd_lowrank, "choose a rank rule: --rank, --rank-ratio, --energy or --max-error");
        goto done;
    }
    if ((rc = cli_ctx_new(&a, &ctx)) != CLI_EXIT_OK) goto done;
    q.o.include = q.inc;
    q.o.ninclude = q.ninc;
    q.o.exclude = q.exc;
    q.o.nexclude = q.nexc;
    q.o.layer_rank = q.lr;
    q.o.nlayer_rank = q.nlr;
    q.o.write.overwrite = a.force;
    if ((rc = cli_open_model(ctx, &a, a.pos[0], &m)) != CLI_EXIT_OK) goto done;
    const char *out;
    if ((rc = cli_output_path(&a, m, "lr", &q.o.write, &out, &out_alloc)) != CLI_EXIT_OK) goto done;

    cli_printer p;
    cli_printer_init(&p, &a, m, "factoring");
    p.extra = lowrank_extra;
    q.o.on_tensor = cli_printer_on_tensor;
    q.o.user = &p;
    npuc_status st = npuc_lowrank_model(ctx, m, out, &q.o, &sum);
    if (st != NPUC_OK) {
        fflush(stdout);
        rc = cli_fail(ctx, st);
        goto done;
    }
    pj = params_json(&q);
    if ((rc = cli_emit_result(ctx, &a, &sum, a.pos[0], out, cmdline, pj, q.report, CLI_RESULT_WARNINGS)) != CLI_EXIT_OK) goto done;
    rc = CLI_EXIT_OK;
done:
    npuc_summary_free(&sum);
    npuc_model_close(m);
    npuc_ctx_free(ctx);
    free(out_alloc);
    free(pj);
    free(cmdline);
    free(q.inc);
    free(q.exc);
    free(q.lr);
    cli_args_free(&a);
    return cli_finish_stdout(rc);
}

const cli_command cli_cmd_lowrank = {
    "lowrank",
    "factor weights into two low-rank matrices by truncated SVD",
    "Usage: npuc lowrank IN [-o OUT] (--rank R | --rank-ratio F | --energy E | --max-error X)\n"
    "                    [--layer-rank REGEX=R]... [options]\n"
    "\n"
    "Replaces each selected weight W [m x n] (split at its layout's output axis:\n"
    "[out, in*kh*kw] for OIHW, [kh*kw*in, out] for HWIO) by two factors of rank r,\n"
    "<name>.lr_a (output side) and <name>.lr_b, in the source dtype: a kh x kw conv\n"
    "with r outputs followed by a 1x1 conv, or two Linear/Dense layers\n"
    "(docs/lowrank.md).  A layer where r(m+n) >= mn stays dense (\"no saving\").\n"
    "'npuc decompress' multiplies the factors back.\n"
    "\n"
    "Rank rule (exactly one):\n"
    "      --rank R           rank R (>= 1)\n"
    "      --rank-ratio F     rank ceil(F * min(m, n)), F in (0, 1]\n"
    "      --energy E         smallest rank keeping fraction E of sum s_i^2, E in (0, 1]\n"
    "      --max-error X      smallest rank with |W - W_r|_F / |W|_F <= X, X in (0, 1)\n"
    "      --round-to M       round ranks up to a multiple of M (default 1)\n"
    "      --layer-rank REGEX=R  rank R (>= 1) for selected tensors matching REGEX instead\n"
    "                         of the rule above, as if given --rank R (--round-to applies);\n"
    "                         the first matching rule wins (repeatable); an R above a\n"
    "                         matched tensor's min(m, n) is an error\n"
    "\n"
    "Solver:\n"
    "      --solver S         exact (LAPACK sgesdd, sgesvd fallback), randomized\n"
    "                         (Halko-Martinsson-Tropp), or auto (default: randomized\n"
    "                         when the rank is small against min(m, n))\n"
    "      --oversample P     randomized: extra sketch columns (default 10)\n"
    "      --power-iters Q    randomized: power iterations (default 3)\n"
    "      --seed S           randomized: Gaussian sketch seed (default 0)\n"
    "\n"
    "Selection:\n"
    "      --include REGEX    factor only tensors matching REGEX (repeatable); each must be\n"
    "                         a factorable float weight, and --rank must not exceed its min(m, n)\n"
    "      --exclude REGEX    never factor tensors matching REGEX (repeatable)\n"
    "      --layout REGEX=NAME  override the layout of matching tensors (docs/formats.md)\n"
    "  Default: every float weight with layout oi, io, oihw or hwio except depthwise\n"
    "  kernels; one whose --rank exceeds min(m, n) stays dense.\n"
    "\n"
    "Output:\n"
    "  -o, --output OUT       the artifact (default: IN's name with .lr); the format follows\n"
    "                         OUT's extension, else IN's format\n"
    "      --deflate N        HDF5 deflate level 0..9 (default 4)\n"
    "  -f, --force            overwrite OUT\n"
    "      --json             print an npuc.report/1 JSON document instead of the table\n"
    "      --report FILE      also write the report to FILE (.json, .csv, .md, .html, else text)\n"
    "  -j, --jobs N           worker threads (default: all cores); output is identical for any N\n"
    "  -q, --quiet            no notes or progress on stderr\n"
    "  -h, --help             this help\n"
    "\n"
    "Errors (exit 2, nothing written): no or two rank rules, a value out of range, an\n"
    "--include match that cannot be factored (1-D, integer, depthwise layout) or whose\n"
    "--rank exceeds min(m, n), a --layer-rank R above a matched tensor's min(m, n), a\n"
    "pattern that matches no tensor, NaN or Inf in a tensor to factor, an existing OUT\n"
    "without -f.\n",
    "IN",
    run,
};
