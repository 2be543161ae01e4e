/*
 * cmd_fold_bn.c - `npuc fold-bn`: BatchNorm folded into the conv/linear
 * layer that feeds it, on the weight file (npuc/bnfold.h).
 *
 * stdout carries the results: one line per tensor as it is written, the
 * table of folded pairs (channels, eps, max |scale|, spread of per-channel
 * ranges before -> after, forward check), the skipped candidates with their
 * reasons, and totals.  --dry-run prints the plan with the evidence for
 * every pair and writes nothing; --json prints an npuc.report/1 document
 * (or, with --dry-run, an npuc.bnfold.plan/1 document whose "pairs" list
 * --pairs accepts back).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_common.h"

enum {
    OPT_EPS = CLI_OPT_USER,
    OPT_PAIR,
    OPT_PAIRS,
    OPT_DRY_RUN,
    OPT_NO_GUESS,
    OPT_REPORT,
    OPT_DEFLATE
};

static const cli_option OPTIONS[] = {
    {"eps", 0, 1, OPT_EPS},
    {"pair", 0, 1, OPT_PAIR},
    {"pairs", 0, 1, OPT_PAIRS},
    {"dry-run", 0, 0, OPT_DRY_RUN},
    {"no-guess", 0, 0, OPT_NO_GUESS},
    {"report", 0, 1, OPT_REPORT},
    {"deflate", 0, 1, OPT_DEFLATE},
    {NULL, 0, 0, 0},
};

typedef struct fargs {
    npuc_bnfold_params p;
    const char **pairs;
    size_t npairs;
    const char *report;
    int dry_run;
} fargs;

static int on_opt(cli_args *a, void *ud, int id, const char *arg) {
    fargs *f = ud;
    switch (id) {
    case OPT_EPS: {
        char *end;
        double v = strtod(arg, &end);
        if (end == arg || *end || !isfinite(v) || !(v > 0))
            return cli_usage_error(a->cmd, "--eps '%s': must be a positive number", arg);
        f->p.eps = v;
        return CLI_CONTINUE;
    }
    case OPT_PAIR: {
        if (!strchr(arg, '=')) return cli_usage_error(a->cmd, "--pair '%s': expected CONV=BN", arg);
        const char **n = realloc(f->pairs, (f->npairs + 1) * sizeof *n);
        if (!n) {
            cli_error("out of memory");
            return CLI_EXIT_FAIL;
        }
        n[f->npairs++] = arg;
        f->pairs = n;
        return CLI_CONTINUE;
    }
    case OPT_PAIRS: f->p.pairs_file = arg; return CLI_CONTINUE;
    case OPT_DRY_RUN: f->dry_run = 1; return CLI_CONTINUE;
    case OPT_NO_GUESS: f->p.no_guess = 1; return CLI_CONTINUE;
    case OPT_REPORT: f->report = arg; return CLI_CONTINUE;
    case OPT_DEFLATE: return cli_set_deflate(a->cmd, &f->p.write, arg);
    }
    return cli_usage_error(a->cmd, "unhandled option (a bug in npuc)");
}

/* ------------------------------------------------------------- printing */

static const char *fmt_g(double v, char *buf, size_t n) {
    if (isnan(v)) snprintf(buf, n, "-");
    else if (isinf(v)) snprintf(buf, n, "inf");
    else snprintf(buf, n, "%.4g", v);
    return buf;
}

static size_t width_max(size_t a, size_t b) { return a > b ? a : b; }

/* The table of pairs; with why, a second line per pair with the evidence. */
static void print_pairs(const npuc_model *m, const npuc_bnfold_plan *plan, int why, int measured) {
    size_t cw = 4, bw = 2, hw = 3;
    for (size_t k = 0; k < plan->npairs; k++) {
        const npuc_bnfold_pair *x = &plan->pairs[k];
        cw = width_max(cw, cli_width(npuc_model_tensor(m, x->conv)->name));
        bw = width_max(bw, cli_width(x->bn.name));
        hw = width_max(hw, strlen(npuc_bnfold_how_name(x->how)) + (x->guess ? 6 : 0));
    }
    if (cw > 48) cw = 48;
    if (bw > 40) bw = 40;
    printf("  %3s  ", "#");
    cli_print_padded("conv", cw);
    printf("  ");
    cli_print_padded("bn", bw);
    printf("  %-*s  %5s  %-22s", (int)hw, "how", "ch", "eps (source)");
    if (measured) printf("  %8s  %-21s  %8s", "max|s|", "range spread", "check");
    printf("\n");
    for (size_t k = 0; k < plan->npairs; k++) {
        const npuc_bnfold_pair *x = &plan->pairs[k];
        char how[40], eps[64], b1[32], b2[32], b3[32], b4[32], spread[80];
        snprintf(how, sizeof how, "%s%s", npuc_bnfold_how_name(x->how), x->guess ? ",guess" : "");
        snprintf(eps, sizeof eps, "%g (%s)", x->eps, x->eps_source);
        printf("  %3zu  ", k + 1);
        cli_print_padded(npuc_model_tensor(m, x->conv)->name, cw);
        printf("  ");
        cli_print_padded(x->bn.name, bw);
        printf("  %-*s  %5lld  %-22s", (int)hw, how, (long long)x->bn.channels, eps);
        if (measured) {
            snprintf(spread, sizeof spread, "%s -> %s", fmt_g(x->stats.spread_before, b2, sizeof b2),
                     fmt_g(x->stats.spread_after, b3, sizeof b3));
            snprintf(b4, sizeof b4, "%.1e", x->stats.check_rel_err);
            printf("  %8s  %-21s  %8s", fmt_g(x->stats.max_abs_scale, b1, sizeof b1), spread, b4);
        }
        if (x->bias < 0) printf("  +bias %s", x->bias_name);
        printf("\n");
        if (why) printf("       why: %s\n", x->why);
    }
}

static void print_skips(const npuc_bnfold_plan *plan) {
    for (size_t k = 0; k < plan->nskips; k++) {
        const npuc_bnfold_skip *s = &plan->skips[k];
        printf("  skip %s", s->bn ? s->bn : "-");
        if (s->conv) printf(" (producer %s)", s->conv);
        printf(": %s\n", s->why);
    }
}

static size_t count_guesses(const npuc_bnfold_plan *plan) {
    size_t g = 0;
    for (size_t k = 0; k < plan->npairs; k++) g += plan->pairs[k].guess;
    return g;
}

static json_t *jnum(double v) {
    if (isnan(v)) return json_string("nan");
    if (isinf(v)) return json_string(v > 0 ? "inf" : "-inf");
    return json_real(v);
}

/* The npuc.bnfold.plan/1 document of a dry run. */
static json_t *plan_json(const npuc_model *m, const npuc_bnfold_plan *plan, const char *in) {
    json_t *doc = json_object(), *pairs = json_array(), *skips = json_array();
    if (!doc || !pairs || !skips) {
        json_decref(doc);
        json_decref(pairs);
        json_decref(skips);
        return NULL;
    }
    json_object_set_new(doc, "schema", json_string("npuc.bnfold.plan/1"));
    json_object_set_new(doc, "npuc_version", json_string(npuc_version()));
    json_object_set_new(doc, "input", cli_json_str(in));
    json_object_set_new(doc, "order", json_string(plan->order_note));
    json_object_set_new(doc, "batchnorms", json_integer((json_int_t)plan->nbn));
    json_object_set_new(doc, "guesses", json_integer((json_int_t)count_guesses(plan)));
    for (size_t k = 0; k < plan->npairs; k++) {
        const npuc_bnfold_pair *x = &plan->pairs[k];
        json_t *o = json_object();
        json_object_set_new(o, "conv", cli_json_str(npuc_model_tensor(m, x->conv)->name));
        json_object_set_new(o, "bn", cli_json_str(x->bn.name));
        json_object_set_new(o, "how", json_string(npuc_bnfold_how_name(x->how)));
        json_object_set_new(o, "guess", json_boolean(x->guess));
        json_object_set_new(o, "channels", json_integer((json_int_t)x->bn.channels));
        json_object_set_new(o, "groups", json_integer(x->groups));
        json_object_set_new(o, "eps", jnum(x->eps));
        json_object_set_new(o, "eps_source", json_string(x->eps_source));
        json_object_set_new(o, "bias", cli_json_str(x->bias_name));
        json_object_set_new(o, "bias_created", json_boolean(x->bias < 0));
        json_object_set_new(o, "max_abs_scale", jnum(x->stats.max_abs_scale));
        json_object_set_new(o, "spread_before", jnum(x->stats.spread_before));
        json_object_set_new(o, "spread_after", jnum(x->stats.spread_after));
        json_object_set_new(o, "check_rel_err", jnum(x->stats.check_rel_err));
        json_object_set_new(o, "why", cli_json_str(x->why));
        json_array_append_new(pairs, o);
    }
    for (size_t k = 0; k < plan->nskips; k++) {
        const npuc_bnfold_skip *s = &plan->skips[k];
        json_t *o = json_object();
        json_object_set_new(o, "bn", cli_json_str(s->bn));
        json_object_set_new(o, "conv", cli_json_str(s->conv));
        json_object_set_new(o, "why", cli_json_str(s->why));
        json_array_append_new(skips, o);
    }
    json_object_set_new(doc, "pairs", pairs);
    json_object_set_new(doc, "skipped", skips);
    return doc;
}

/* Every parameter of the run, and the pairs folded, for the report header. */
static char *params_json(const npuc_model *m, const fargs *f, const npuc_bnfold_plan *plan) {
    json_t *pairs = json_array(), *stated = json_array();
    for (size_t k = 0; k < plan->npairs; k++) {
        const npuc_bnfold_pair *x = &plan->pairs[k];
        json_array_append_new(pairs, json_pack("{s:o, s:o, s:s, s:b, s:o, s:s}", "conv",
                                               cli_json_str(npuc_model_tensor(m, x->conv)->name), "bn",
                                               cli_json_str(x->bn.name), "how", npuc_bnfold_how_name(x->how),
                                               "guess", x->guess, "eps", jnum(x->eps), "eps_source", x->eps_source));
    }
    for (size_t k = 0; k < f->npairs; k++) json_array_append_new(stated, cli_json_str(f->pairs[k]));
    json_t *p = json_pack("{s:{s:o, s:o, s:o, s:b, s:b, s:o}}", "fold-bn", "eps",
                          f->p.eps > 0 ? json_real(f->p.eps) : json_null(), "pair", stated, "pairs_file",
                          cli_json_str(f->p.pairs_file), "no_guess", f->p.no_guess, "dry_run", f->dry_run,
                          "folded", pairs);
    char *s = p ? json_dumps(p, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(p);
    return s;
}

static int run(int argc, char **argv) {
    cli_args a;
    fargs f;
    memset(&f, 0, sizeof f);
    f.p = npuc_bnfold_params_defaults();
    npuc_ctx *ctx = NULL;
    npuc_model *m = NULL;
    npuc_bnfold_plan plan;
    memset(&plan, 0, sizeof plan);
    npuc_summary sum;
    memset(&sum, 0, sizeof sum);
    char *cmdline = cli_join_command(argc, argv), *pj = NULL;
    int rc = cli_parse(&cli_cmd_fold_bn, argc, argv,
                       CLI_OPT_OUTPUT | CLI_OPT_FORCE | CLI_OPT_JOBS | CLI_OPT_LAYOUT | CLI_OPT_JSON, OPTIONS,
                       on_opt, &f, 1, 1, &a);
    if (rc != CLI_CONTINUE) goto done;
    const char *in = a.pos[0], *out = a.output;
    if (!f.dry_run && (!out || !*out)) {
        rc = cli_usage_error(a.cmd, "missing -o OUT (or --dry-run)");
        goto done;
    }
    if (f.dry_run && out) cli_warn(&a, "--dry-run writes nothing; -o %s ignored", out);
    f.p.pairs = f.pairs;
    f.p.npairs = f.npairs;
    f.p.write.overwrite = a.force;
    if ((rc = cli_ctx_new(&a, &ctx)) != CLI_EXIT_OK) goto done;
    if ((rc = cli_open_model(ctx, &a, in, &m)) != CLI_EXIT_OK) goto done;
    if (!f.dry_run && npuc_format_from_path(out) == NPUC_FORMAT_AUTO) f.p.write.format = npuc_model_format(m);

    npuc_status st = npuc_bnfold_find(ctx, m, &f.p, &plan);
    if (st != NPUC_OK) {
        rc = cli_fail(ctx, st);
        goto done;
    }
    cli_printer pr;
    cli_printer_init(&pr, &a, m, "folding");
    pr.text = !a.json && !f.dry_run;
    pr.progress = cli_progress_enabled(&a) && (a.json || f.dry_run);
    f.p.on_tensor = cli_printer_on_tensor;
    f.p.user = &pr;
    st = npuc_bnfold_model(ctx, m, &plan, &f.p, f.dry_run ? NULL : out, &sum);
    if (st != NPUC_OK) {
        fflush(stdout);
        rc = cli_fail(ctx, st);
        goto done;
    }
    for (size_t i = 0; i < sum.nwarnings; i++) cli_warn(&a, "%s: %s", in, sum.warnings[i]);

    if (a.json && f.dry_run) {
        json_t *doc = plan_json(m, &plan, in);
        if (!doc) {
            cli_error("out of memory");
            rc = CLI_EXIT_FAIL;
            goto done;
        }
        if ((rc = cli_json_print(doc)) != 0) goto done;
    }
    pj = params_json(m, &f, &plan);
    npuc_report_info info = npuc_report_info_defaults();
    const char *inputs[1] = {in};
    info.command_line = cmdline;
    info.inputs = inputs;
    info.ninputs = 1;
    info.output = f.dry_run ? NULL : out;
    info.params_json = pj;
    info.threads = npuc_ctx_threads(ctx);
    info.warn_sqnr_db = NAN;
    if (a.json && !f.dry_run) {
        if ((st = npuc_report_write(ctx, stdout, NPUC_REPORT_JSON, &sum, &info)) != NPUC_OK) {
            rc = cli_fail(ctx, st);
            goto done;
        }
    } else if (!a.json) {
        size_t ng = count_guesses(&plan);
        if (f.dry_run) printf("%s: dry run, nothing written\n", in);
        printf("%s %zu of %zu BatchNorms", f.dry_run ? "would fold" : "folded", plan.npairs, plan.nbn);
        if (ng) printf(" (%zu guessed)", ng);
        printf("; %zu skipped; %s\n", plan.nskips, plan.order_note);
        if (plan.npairs) print_pairs(m, &plan, f.dry_run, 1);
        print_skips(&plan);
        char line[1024];
        npuc_report_totals_line(&sum, line, sizeof line);
        printf("%s\n", line);
    }
    if (f.report) {
        info.timestamp = 1;
        st = npuc_report_write_file(ctx, f.report, npuc_report_format_from_path(f.report), &sum, &info);
        if (st != NPUC_OK) {
            rc = cli_fail(ctx, st);
            goto done;
        }
    }
    rc = CLI_EXIT_OK;
done:
    npuc_summary_free(&sum);
    npuc_bnfold_plan_free(&plan);
    free(cmdline);
    free(pj);
    free(f.pairs);
    npuc_model_close(m);
    npuc_ctx_free(ctx);
    cli_args_free(&a);
    return cli_finish_stdout(rc);
}

const cli_command cli_cmd_fold_bn = {
    "fold-bn",
    "fold BatchNorm into the conv/linear layer that feeds it",
    "Usage: npuc fold-bn IN -o OUT [options]\n"
    "       npuc fold-bn IN --dry-run [--json]\n"
    "\n"
    "Folds each BatchNorm into the convolution or linear layer feeding it:\n"
    "s = gamma/sqrt(var+eps), W' = W*s along the output-channel axis, b' = (b-mean)*s+beta\n"
    "(a bias is created when the layer had none).  The BatchNorm tensors are removed;\n"
    "values are computed in double and stored in the source dtype.  Fold before you\n"
    "quantize: folding changes each output channel's range.\n"
    "\n"
    "Pairs are found from the file (docs/fold-bn.md): a Keras model_config topology,\n"
    "module and layer names (features.0/features.1, conv1/bn1, X/X_BN, bn_X), Keras\n"
    "layer order, else the nearest preceding conv/linear with the same channel count\n"
    "in storage order (a guess).  --dry-run shows every pair with its evidence and\n"
    "every skipped candidate with the reason.\n"
    "\n"
    "Pairs:\n"
    "      --pair CONV=BN     fold BatchNorm BN (module, layer or one of its tensors) into\n"
    "                         CONV (weight tensor, module or layer); repeatable\n"
    "      --pairs FILE       pairs from FILE: lines CONV=BN, or JSON (the \"pairs\" of\n"
    "                         --dry-run --json); with --pair/--pairs only stated pairs fold\n"
    "      --no-guess         skip pairs supported only by storage order or numbering\n"
    "      --layout REGEX=NAME  override the layout of matching tensors (docs/formats.md)\n"
    "\n"
    "Folding:\n"
    "      --eps E            BatchNorm epsilon for every pair (default: model_config's,\n"
    "                         else 1e-3 for Keras names, 1e-5 for PyTorch/ONNX/Paddle)\n"
    "\n"
    "Output:\n"
    "  -o, --output OUT       the folded model; the format follows OUT's extension, else\n"
    "                         IN's format\n"
    "      --dry-run          list pairs, reasons and per-pair numbers; write nothing\n"
    "      --deflate N        HDF5 deflate level 0..9 (default 4)\n"
    "  -f, --force            overwrite OUT\n"
    "      --json             print an npuc.report/1 document (with --dry-run: the plan,\n"
    "                         npuc.bnfold.plan/1) instead of the tables\n"
    "      --report FILE      also write the report to FILE (.json, .csv, else text)\n"
    "  -j, --jobs N           worker threads (default: all cores); output is identical for any N\n"
    "  -q, --quiet            no warnings or progress on stderr\n"
    "  -h, --help             this help\n"
    "\n"
    "Per pair: channels, eps and where it came from, max |scale|, the spread of per-channel\n"
    "weight ranges (max/min of max|W| per channel) before -> after, and a forward check:\n"
    "max |folded - (layer then BatchNorm)| / max |output| on random input.\n"
    "\n"
    "Errors: var+eps <= 0, NaN/Inf, mismatched channel counts, a BatchNorm stated for two\n"
    "producers, an existing OUT without -f: exit 2, nothing written.\n",
    "IN",
    run,
};
