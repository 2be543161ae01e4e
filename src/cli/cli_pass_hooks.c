/*
 * cli_pass_hooks.c - what only one pass command does (cli_pass.h): the
 * tail of lowrank's per-tensor lines, and fold-bn's --dry-run with its
 * table of pairs and skipped candidates (or, with --json, the
 * npuc.bnfold.plan/1 document whose "pairs" list --pairs accepts back).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_pass.h"

/* ------------------------------------------------------------ lowrank */

/* After a factored tensor's line: energy, error, params and FLOPs. */
static void lowrank_extra(const npuc_tensor_record *r) {
    char c1[CLI_FMT_MAX], c2[CLI_FMT_MAX];
    if (r->action != NPUC_ACTION_FACTORED) return;
    double fb = npuc_record_get(r, "flops_before", 0), fa = npuc_record_get(r, "flops_after", 0);
    printf("  energy=%.4f err=%.4f  params %s -> %s  flops %.2fx", npuc_record_get(r, "energy", NAN),
           r->err.rel_fro, cli_fmt_count(r->params_before, c1), cli_fmt_count(r->params_after, c2),
           fa > 0 ? fb / fa : 0.0);
}

const cli_pass_hook cli_pass_hook_lowrank = {.pass = "lowrank", .line_extra = lowrank_extra};

/* ------------------------------------------------------------ fold-bn: printing */

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
        json_object_set_new(o, "guess", json_boolean(s->guess));
        json_array_append_new(skips, o);
    }
    json_object_set_new(doc, "pairs", pairs);
    json_object_set_new(doc, "skipped", skips);
    return doc;
}


/* ------------------------------------------------------------ fold-bn: the hook */

static const npuc_pass_option FOLD_OPTIONS[] = {
    {.name = "dry_run", .flag = "dry-run", .type = NPUC_OPT_BOOL, .section = "Output",
     .help = "list pairs, reasons and per-pair numbers; write nothing"},
};

static int fold_option(cli_pass_run *r, const npuc_pass_option *o, const char *arg) {
    (void)o;
    (void)arg;
    r->dry_run = 1;
    return CLI_CONTINUE;
}

static int fold_prepare(cli_pass_run *r) {
    const char *out = r->a.output;
    if (!r->dry_run && (!out || !*out)) return cli_usage_error(r->cmd, "missing -o OUT (or --dry-run)");
    if (r->dry_run && out) cli_warn(&r->a, "--dry-run writes nothing; -o %s ignored", out);
    r->io.dry_run = r->dry_run;
    r->io.plan = &r->plan;
    return CLI_CONTINUE;
}

/* The pass's echoed parameters, plus --dry-run and the pairs folded. */
static int fold_params(cli_pass_run *r, const npuc_bnfold_plan *plan) {
    json_error_t e;
    json_t *root = json_loads(r->params, 0, &e), *p = json_object_get(root, r->pass->name), *pairs = json_array();
    if (!p || !pairs) {
        json_decref(root);
        json_decref(pairs);
        return -1;
    }
    for (size_t k = 0; k < plan->npairs; k++) {
        const npuc_bnfold_pair *x = &plan->pairs[k];
        json_array_append_new(pairs, json_pack("{s:o, s:o, s:s, s:b, s:o, s:s}", "conv",
                                               cli_json_str(npuc_model_tensor(r->m, x->conv)->name), "bn",
                                               cli_json_str(x->bn.name), "how", npuc_bnfold_how_name(x->how),
                                               "guess", x->guess, "eps", jnum(x->eps), "eps_source", x->eps_source));
    }
    json_object_set_new(p, "dry_run", json_boolean(r->dry_run));
    json_object_set_new(p, "folded", pairs);
    char *s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!s) return -1;
    free(r->params);
    r->params = s;
    return 0;
}

static int fold_finish(cli_pass_run *r) {
    const npuc_bnfold_plan *plan = r->plan;
    const cli_args *a = &r->a;
    npuc_status st;
    int rc;
    cli_warn_summary(a, r->in, &r->sum);
    if (a->json && r->dry_run) {
        json_t *doc = plan_json(r->m, plan, r->in);
        if (!doc) {
            cli_error("out of memory");
            return CLI_EXIT_FAIL;
        }
        if ((rc = cli_json_print(doc)) != 0) return rc;
    }
    if (fold_params(r, plan) != 0) {
        cli_error("out of memory");
        return CLI_EXIT_FAIL;
    }
    npuc_report_info info = npuc_report_info_defaults();
    const char *inputs[1] = {r->in};
    info.command_line = r->cmdline;
    info.inputs = inputs;
    info.ninputs = 1;
    info.output = r->dry_run ? NULL : r->a.output;
    info.params_json = r->params;
    info.threads = npuc_ctx_threads(r->ctx);
    info.warn_sqnr_db = NAN;
    if (a->json && !r->dry_run) {
        if ((st = npuc_report_write(r->ctx, stdout, NPUC_REPORT_JSON, &r->sum, &info)) != NPUC_OK)
            return cli_fail(r->ctx, st);
    } else if (!a->json) {
        size_t ng = count_guesses(plan);
        if (r->dry_run) printf("%s: dry run, nothing written\n", r->in);
        printf("%s %zu of %zu BatchNorms", r->dry_run ? "would fold" : "folded", plan->npairs, plan->nbn);
        if (ng) printf(" (%zu guessed)", ng);
        printf("; %zu skipped; %s\n", plan->nskips, plan->order_note);
        if (plan->npairs) print_pairs(r->m, plan, r->dry_run, 1);
        print_skips(plan);
        char line[1024];
        npuc_report_totals_line(&r->sum, line, sizeof line);
        printf("%s\n", line);
    }
    if (a->report) {
        info.timestamp = 1;
        st = npuc_report_write_file(r->ctx, a->report, npuc_report_format_from_path(a->report), &r->sum, &info);
        if (st != NPUC_OK) return cli_fail(r->ctx, st);
    }
    return CLI_EXIT_OK;
}

static void fold_done(cli_pass_run *r) {
    npuc_bnfold_plan_free(r->plan);
    free(r->plan);
    r->plan = NULL;
}

const cli_pass_hook cli_pass_hook_fold_bn = {
    .pass = "fold-bn",
    .options = FOLD_OPTIONS,
    .noptions = sizeof FOLD_OPTIONS / sizeof FOLD_OPTIONS[0],
    .on_option = fold_option,
    .prepare = fold_prepare,
    .finish = fold_finish,
    .done = fold_done,
};
