/*
 * cmd_report.c - `npuc report ORIGINAL COMPRESSED`: the error and the size of
 * every tensor of one weight file against another, as a text, CSV, JSON,
 * Markdown or HTML report, optionally gated against a baseline JSON report.
 *
 * The comparison is npuc_compare_models (compare.h); the documents are the
 * ones every pass writes with --report (report.h, docs/report.md).  stdout
 * carries the report unless -o is given; regressions against --baseline go to
 * stderr and make the exit code 3 (the report is still written).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_common.h"
#include "cli_outputs.h"

enum {
    OPT_FORMAT = CLI_OPT_USER,
    OPT_SORT,
    OPT_WORST,
    OPT_WARN_SQNR,
    OPT_BASELINE,
    OPT_MAX_REGRESS,
    OPT_NO_TIMESTAMP,
    OPT_NO_HIST,
    OPT_CALIB,
    OPT_MAX_OUT_ERROR
};

static const cli_option OPTIONS[] = {
    {"format", 0, 1, OPT_FORMAT},
    {"sort", 0, 1, OPT_SORT},
    {"worst", 0, 1, OPT_WORST},
    {"warn-sqnr", 0, 1, OPT_WARN_SQNR},
    {"baseline", 0, 1, OPT_BASELINE},
    {"max-regress", 0, 1, OPT_MAX_REGRESS},
    {"no-timestamp", 0, 0, OPT_NO_TIMESTAMP},
    {"no-histograms", 0, 0, OPT_NO_HIST},
    {"calib", 0, 1, OPT_CALIB},
    {"max-output-error", 0, 1, OPT_MAX_OUT_ERROR},
    {NULL, 0, 0, 0},
};

typedef struct rargs {
    int format_set;
    npuc_report_format format;
    int sort_sqnr;
    long worst;
    double warn_sqnr;
    const char *baseline;
    double max_regress;
    int no_timestamp;
    int no_hist;
    const char *calib;
    double max_out_error; /* NaN: no gate */
} rargs;

static int parse_double(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

static int on_opt(cli_args *a, void *ud, int id, const char *arg) {
    rargs *r = ud;
    (void)a;
    switch (id) {
    case OPT_FORMAT:
        if (npuc_report_format_parse(arg, &r->format) != 0)
            return cli_usage_error(&cli_cmd_report, "--format '%s': use text, csv, json, md or html", arg);
        r->format_set = 1;
        break;
    case OPT_SORT:
        if (strcmp(arg, "sqnr") == 0) r->sort_sqnr = 1;
        else if (strcmp(arg, "file") == 0) r->sort_sqnr = 0;
        else return cli_usage_error(&cli_cmd_report, "--sort '%s': use sqnr or file", arg);
        break;
    case OPT_WORST:
        if (cli_parse_long(arg, 0, 100000, &r->worst) != 0)
            return cli_usage_error(&cli_cmd_report, "--worst '%s': must be an integer from 0 to 100000", arg);
        break;
    case OPT_WARN_SQNR:
        if (strcmp(arg, "off") == 0) r->warn_sqnr = NAN;
        else if (parse_double(arg, &r->warn_sqnr) != 0)
            return cli_usage_error(&cli_cmd_report, "--warn-sqnr '%s': a number of dB, or off", arg);
        break;
    case OPT_BASELINE: r->baseline = arg; break;
    case OPT_MAX_REGRESS:
        if (parse_double(arg, &r->max_regress) != 0 || r->max_regress < 0)
            return cli_usage_error(&cli_cmd_report, "--max-regress '%s': a percentage >= 0", arg);
        break;
    case OPT_NO_TIMESTAMP: r->no_timestamp = 1; break;
    case OPT_NO_HIST: r->no_hist = 1; break;
    case OPT_CALIB: r->calib = arg; break;
    case OPT_MAX_OUT_ERROR:
        if (cli_parse_out_error(arg, &r->max_out_error) != 0)
            return cli_usage_error(&cli_cmd_report, "--max-output-error '%s': a relative error >= 0 (0.05 for 5%%)",
                                   arg);
        break;
    }
    return CLI_CONTINUE;
}

/* What the compressed file says about the passes that made it: its "npuc"
 * description without the per-tensor entries (those are in the records),
 * plus how many tensors use each encoding. */
static json_t *artifact_params(npuc_model *m) {
    const char *meta = npuc_model_meta_get(m, "npuc");
    if (!meta) return json_null();
    json_t *art = json_loads(meta, 0, NULL);
    if (!json_is_object(art)) { json_decref(art); return json_null(); }
    json_t *enc = json_object(), *tens = json_object_get(art, "tensors");
    const char *k;
    json_t *e;
    json_object_foreach(tens, k, e) {
        const char *name = json_string_value(json_object_get(e, "encoding"));
        if (!name) continue;
        json_t *c = json_object_get(enc, name);
        json_object_set_new(enc, name, json_integer(c ? json_integer_value(c) + 1 : 1));
    }
    json_object_del(art, "tensors");
    json_object_set_new(art, "encodings", enc);
    return art;
}


static int run(int argc, char **argv) {
    cli_args a;
    rargs r;
    memset(&r, 0, sizeof r);
    r.worst = 10;
    r.warn_sqnr = 20.0;
    r.max_regress = 5.0;
    r.max_out_error = NAN;
    npuc_ctx *ctx = NULL;
    npuc_model *mo = NULL, *mc = NULL;
    npuc_summary sum;
    memset(&sum, 0, sizeof sum);
    npuc_baseline_result base;
    memset(&base, 0, sizeof base);
    char *cmdline = cli_join_command(argc, argv), *pj = NULL;
    int rc = cli_parse(&cli_cmd_report, argc, argv,
                       CLI_OPT_OUTPUT | CLI_OPT_FORCE | CLI_OPT_JOBS | CLI_OPT_LAYOUT | CLI_OPT_JSON | CLI_OPT_MAX_MEMORY,
                       OPTIONS, on_opt,
                       &r, 2, 2, &a);
    if (rc != CLI_CONTINUE) goto done;
    if (!cmdline) { rc = CLI_EXIT_FAIL; goto done; }
    npuc_report_format fmt = r.format_set ? r.format :
                             a.json       ? NPUC_REPORT_JSON :
                             a.output     ? npuc_report_format_from_path(a.output) : NPUC_REPORT_TEXT;
    if (!isnan(r.max_out_error) && !r.calib) {
        rc = cli_usage_error(&cli_cmd_report, "--max-output-error needs calibration data: add --calib FILE");
        goto done;
    }
    /* A report's name, never a model's (issue 31 item 11: cli_outputs.h). */
    if (a.output && ((rc = cli_side_probe(a.output, "report")) != CLI_CONTINUE ||
                     (rc = cli_check_report_name(a.output, a.force, "report")) != CLI_EXIT_OK))
        goto done;
    if ((rc = cli_ctx_new(&a, &ctx)) != CLI_EXIT_OK) goto done;
    if ((rc = cli_open_model(ctx, &a, a.pos[0], &mo)) != CLI_EXIT_OK) goto done;
    if ((rc = cli_open_model(ctx, &a, a.pos[1], &mc)) != CLI_EXIT_OK) goto done;
    npuc_compare_opts co = npuc_compare_opts_defaults();
    co.histograms = !r.no_hist;
    co.calib = r.calib;
    npuc_status st = npuc_compare_models(ctx, mo, mc, &co, &sum);
    if (st != NPUC_OK) { rc = cli_fail(ctx, st); goto done; }

    /* Every parameter of the run, and what the compressed file records of the passes. */
    static const char *const FORMATS[] = {"text", "csv", "json", "md", "html"};
    json_t *layouts = json_array();
    for (size_t i = 0; i < a.nlayouts; i++) json_array_append_new(layouts, cli_json_str(a.layouts[i]));
    json_t *p = json_pack("{s:{s:s, s:s, s:i, s:o, s:o, s:f, s:o, s:b}, s:o}", "report", "format",
                          FORMATS[fmt], "sort", r.sort_sqnr ? "sqnr" : "file", "worst", (int)r.worst,
                          "warn_sqnr_db", isnan(r.warn_sqnr) ? json_null() : json_real(r.warn_sqnr), "baseline",
                          r.baseline ? cli_json_str(r.baseline) : json_null(), "max_regress_pct", r.max_regress,
                          "layout", layouts, "histograms", !r.no_hist, "artifact", artifact_params(mc));
    if (p && r.calib) {
        json_t *rep = json_object_get(p, "report");
        json_object_set_new(rep, "calib", cli_json_str(r.calib));
        json_object_set_new(rep, "max_output_error", isnan(r.max_out_error) ? json_null() : json_real(r.max_out_error));
    }
    pj = p ? json_dumps(p, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(p);
    if (!pj) { cli_error("out of memory"); rc = CLI_EXIT_FAIL; goto done; }

    int regressed = 0;
    if (r.baseline) {
        if ((st = npuc_report_baseline_check(ctx, r.baseline, &sum, r.max_regress, &base)) != NPUC_OK) {
            rc = cli_fail(ctx, st);
            goto done;
        }
        for (size_t i = 0; i < base.n; i++) {
            fprintf(stderr, "npuc: regression: %s\n", base.items[i].text);
            if (npuc_summary_warn(&sum, "regression against the baseline: %s", base.items[i].text) != NPUC_OK) {
                cli_error("out of memory");
                rc = CLI_EXIT_FAIL;
                goto done;
            }
        }
        cli_note(&a, "baseline %s: %zu tensors compared, %zu only in the baseline, %zu new; %zu regression%s "
                     "beyond %g%%", r.baseline, base.matched, base.only_baseline, base.only_current, base.n,
                 base.n == 1 ? "" : "s", r.max_regress);
        regressed = base.n > 0;
    }
    /* --max-output-error, as the pass commands' gate (tensors without
     * calibration data are not judged); the report is written all the same. */
    const npuc_tensor_record *worst_out = NULL;
    size_t nover = 0;
    if (!isnan(r.max_out_error)) {
        for (size_t i = 0; i < sum.nrecords; i++) {
            const npuc_tensor_record *t = &sum.records[i];
            if (!t->has_out_error) continue;
            if (!(t->out_rel_error <= r.max_out_error)) nover++;
            if (!worst_out || !(t->out_rel_error <= worst_out->out_rel_error)) worst_out = t;
        }
        if (!sum.n_out_error &&
            npuc_summary_warn(&sum, "--max-output-error %g checked nothing: no tensor has calibration data in %s",
                              r.max_out_error, r.calib) != NPUC_OK) {
            cli_error("out of memory");
            rc = CLI_EXIT_FAIL;
            goto done;
        }
        if (nover && npuc_summary_warn(&sum, "quality gate failed: tensor '%s' output error %.4g > --max-output-error %g "
                                             "(%zu tensor%s above)", worst_out->name, worst_out->out_rel_error,
                                       r.max_out_error, nover, nover == 1 ? "" : "s") != NPUC_OK) {
            cli_error("out of memory");
            rc = CLI_EXIT_FAIL;
            goto done;
        }
    }

    npuc_report_info info = npuc_report_info_defaults();
    const char *inputs[2] = {a.pos[0], a.pos[1]};
    info.command_line = cmdline;
    info.inputs = inputs;
    info.ninputs = 2;
    info.params_json = pj;
    info.threads = npuc_ctx_threads(ctx);
    info.timestamp = !r.no_timestamp;
    info.sort_by_sqnr = r.sort_sqnr;
    info.worst_k = (int)r.worst;
    info.warn_sqnr_db = r.warn_sqnr;
    if (a.output) {
        if ((st = npuc_report_write_file(ctx, a.output, fmt, &sum, &info)) != NPUC_OK) {
            rc = cli_fail(ctx, st);
            goto done;
        }
        char line[1024];
        npuc_report_totals_line(&sum, line, sizeof line);
        cli_note(&a, "%s: %s", a.output, line);
    } else if ((st = npuc_report_write(ctx, stdout, fmt, &sum, &info)) != NPUC_OK) {
        rc = cli_fail(ctx, st);
        goto done;
    }
    if (regressed) {
        cli_error("%zu regression%s against %s beyond %g%%", base.n, base.n == 1 ? "" : "s", r.baseline,
                  r.max_regress);
        rc = CLI_EXIT_GATE;
        goto done;
    }
    if (nover) {
        cli_error("%s: quality gate failed: tensor '%s' output error %.4g > --max-output-error %g (%zu tensor%s above)",
                  a.pos[1], worst_out->name, worst_out->out_rel_error, r.max_out_error, nover, nover == 1 ? "" : "s");
        rc = CLI_EXIT_GATE;
        goto done;
    }
    rc = CLI_EXIT_OK;
done:
    npuc_baseline_result_free(&base);
    npuc_summary_free(&sum);
    free(cmdline);
    free(pj);
    npuc_model_close(mo);
    npuc_model_close(mc);
    npuc_ctx_free(ctx);
    cli_args_free(&a);
    return cli_finish_stdout(rc);
}

const cli_command cli_cmd_report = {
    "report",
    "compare two weight files tensor by tensor: error and size per layer",
    "Usage: npuc report ORIGINAL COMPRESSED [-o FILE] [options]\n"
    "\n"
    "Compares every tensor of ORIGINAL with its namesake in COMPRESSED and reports the\n"
    "error (MSE, SQNR, cosine, max |error|) and the bytes before and after, per tensor\n"
    "and in total.  Either file may be safetensors or HDF5, plain or an npuc artifact;\n"
    "artifact tensors are decoded (quantized, low-rank, ...) and cost the bytes of all\n"
    "their stored parts.  Tensors only in ORIGINAL are 'removed' (folded BatchNorm,\n"
    "pruned layers), tensors only in COMPRESSED 'created'; a changed shape is reported\n"
    "as structured pruning with the parameters before and after.\n"
    "\n"
    "Exact transforms are compared by what they keep: a layer folded by npuc fold-bn\n"
    "(named in COMPRESSED's npuc.bnfold record) against conv-then-BatchNorm computed from\n"
    "ORIGINAL's statistics, a factored tensor as the product of its factors.  Each\n"
    "tensor's line says which comparison its error is ([raw], [function: conv+bn],\n"
    "[product of factors]).\n"
    "\n"
    "Output:\n"
    "  -o, --output FILE      write the report to FILE (default: stdout); FILE ends in\n"
    "                         .txt, .md, .csv, .json or .html\n"
    "      --format FMT       text, csv, json, md or html (default: from FILE's extension)\n"
    "      --json             same as --format json\n"
    "      --sort KEY         file (default) or sqnr: worst layers first (text, md, html)\n"
    "      --worst K          size of the worst-layers table and histograms (default 10)\n"
    "      --warn-sqnr DB     warn about tensors below DB dB SQNR (default 20), or 'off'\n"
    "      --no-timestamp     leave the UTC time out of the report (reproducible output;\n"
    "                         SOURCE_DATE_EPOCH also fixes it)\n"
    "      --no-histograms    do not measure the weight-vs-error histograms\n"
    "  -f, --force            overwrite FILE (never a file npuc opens as a model)\n"
    "\n"
    "Baseline (CI gate):\n"
    "      --baseline OLD.json  compare with a previous JSON report: exit 3 and list the\n"
    "                         tensors whose MSE or size grew by more than PCT\n"
    "      --max-regress PCT  allowed growth in percent (default 5)\n"
    "\n"
    "Output error (docs/calibration.md#output-error):\n"
    "      --calib FILE       calibration data (<weight>.input or <weight>.hessian): each\n"
    "                         tensor it names also gets its relative output error\n"
    "                         ||(W-W')X||/||WX|| beside the weight error\n"
    "      --max-output-error F  exit 3 when a tensor's output error is above F (the\n"
    "                         report is written all the same)\n"
    "\n"
    "  -j, --jobs N           worker threads (default: all cores)\n"
    "      --layout REGEX=NAME  override the layout of matching tensors in both files\n"
    "      --max-memory SIZE  decoding budget (default 256M; docs/artifact.md)\n"
    "  -q, --quiet            no notes on stderr\n"
    "  -h, --help             this help\n"
    "\n"
    "Exit codes: 0 ok, 1 failure, 2 usage or bad input, 3 a regression against the\n"
    "baseline or an output error above --max-output-error (the report is written all\n"
    "the same).  docs/report.md describes the\n"
    "documents and the JSON schema.\n",
    "ORIGINAL COMPRESSED",
    run,
    NULL,
};
