/*
 * cmd_sparsify.c - `npuc sparsify`: N:M structured sparsity (2:4 by
 * default) along the input channels of every weight, dense or compressed
 * (kept values + positions), with a roofline estimate of what it buys per
 * layer and warnings where it cannot pay.
 *
 * stdout: one line per tensor, then totals (or --json); warnings on stderr.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_common.h"

enum {
    OPT_PATTERN = CLI_OPT_USER,
    OPT_COMPRESSED,
    OPT_INCLUDE,
    OPT_EXCLUDE,
    OPT_PEAK,
    OPT_BW,
    OPT_TOKENS,
    OPT_REPORT,
    OPT_DEFLATE
};

static const cli_option OPTIONS[] = {
    {"pattern", 0, 1, OPT_PATTERN},
    {"compressed", 0, 0, OPT_COMPRESSED},
    {"include", 0, 1, OPT_INCLUDE},
    {"exclude", 0, 1, OPT_EXCLUDE},
    {"peak-tops", 0, 1, OPT_PEAK},
    {"bandwidth", 0, 1, OPT_BW},
    {"tokens", 0, 1, OPT_TOKENS},
    {"report", 0, 1, OPT_REPORT},
    {"deflate", 0, 1, OPT_DEFLATE},
    {NULL, 0, 0, 0},
};

typedef struct sargs {
    npuc_sparsify_opts o;
    const char **inc, **exc;
    size_t ninc, nexc;
    const char *report;
} sargs;

static int positive(const char *flag, const char *arg, double *out) {
    char *end;
    errno = 0;
    double v = strtod(arg, &end);
    if (end == arg || *end || errno || !(v > 0) || !isfinite(v))
        return cli_usage_error(&cli_cmd_sparsify, "%s '%s': must be a positive number", flag, arg);
    *out = v;
    return CLI_CONTINUE;
}

static int on_opt(cli_args *a, void *ud, int id, const char *arg) {
    sargs *q = ud;
    (void)a;
    switch (id) {
    case OPT_PATTERN:
        if (npuc_nm_parse(arg, &q->o.n, &q->o.m) != 0)
            return cli_usage_error(&cli_cmd_sparsify, "--pattern '%s': expected N:M with 1 <= N < M <= 16", arg);
        break;
    case OPT_COMPRESSED: q->o.compressed = 1; break;
    case OPT_INCLUDE: if (cli_push(&q->inc, &q->ninc, arg)) return CLI_EXIT_FAIL; break;
    case OPT_EXCLUDE: if (cli_push(&q->exc, &q->nexc, arg)) return CLI_EXIT_FAIL; break;
    case OPT_PEAK: return positive("--peak-tops", arg, &q->o.cost.peak_tops);
    case OPT_BW: return positive("--bandwidth", arg, &q->o.cost.bandwidth_gbs);
    case OPT_TOKENS: return positive("--tokens", arg, &q->o.cost.tokens);
    case OPT_REPORT: q->report = arg; break;
    case OPT_DEFLATE: return cli_set_deflate(&cli_cmd_sparsify, &q->o.write, arg);
    }
    return CLI_CONTINUE;
}

static char *params_json(const sargs *q) {
    json_t *inc = json_array(), *exc = json_array();
    for (size_t i = 0; i < q->ninc; i++) json_array_append_new(inc, cli_json_str(q->inc[i]));
    for (size_t i = 0; i < q->nexc; i++) json_array_append_new(exc, cli_json_str(q->exc[i]));
    char pattern[16];
    snprintf(pattern, sizeof pattern, "%d:%d", q->o.n, q->o.m);
    json_t *p = json_pack("{s:{s:s, s:b, s:o, s:o, s:f, s:f, s:f}}", "sparsify", "pattern", pattern, "compressed",
                          q->o.compressed, "include", inc, "exclude", exc, "peak_tops", q->o.cost.peak_tops,
                          "bandwidth_gbs", q->o.cost.bandwidth_gbs, "tokens", q->o.cost.tokens);
    char *s = p ? json_dumps(p, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(p);
    return s;
}

static int run(int argc, char **argv) {
    cli_args a;
    sargs q;
    memset(&q, 0, sizeof q);
    q.o = npuc_sparsify_opts_defaults();
    npuc_ctx *ctx = NULL;
    npuc_model *m = NULL;
    char *out_alloc = NULL, *pj = NULL;
    npuc_summary sum;
    memset(&sum, 0, sizeof sum);
    char *cmdline = cli_join_command(argc, argv);
    int rc = cli_parse(&cli_cmd_sparsify, argc, argv,
                       CLI_OPT_OUTPUT | CLI_OPT_FORCE | CLI_OPT_JOBS | CLI_OPT_LAYOUT | CLI_OPT_JSON, OPTIONS,
                       on_opt, &q, 1, 1, &a);
    if (rc != CLI_CONTINUE) goto done;
    if ((rc = cli_ctx_new(&a, &ctx)) != CLI_EXIT_OK) goto done;
    q.o.include = q.inc; q.o.ninclude = q.ninc;
    q.o.exclude = q.exc; q.o.nexclude = q.nexc;
    q.o.write.overwrite = a.force;
    if ((rc = cli_open_model(ctx, &a, a.pos[0], &m)) != CLI_EXIT_OK) goto done;
    char tag[32];
    snprintf(tag, sizeof tag, "%dof%d", q.o.n, q.o.m);
    const char *out;
    if ((rc = cli_output_path(&a, m, tag, &q.o.write, &out, &out_alloc)) != CLI_EXIT_OK) goto done;

    cli_printer p;
    cli_printer_init(&p, &a, m, "sparsifying");
    q.o.on_tensor = cli_printer_on_tensor;
    q.o.user = &p;
    npuc_status st = npuc_sparsify_model(ctx, m, out, &q.o, &sum);
    if (st != NPUC_OK) {
        fflush(stdout);
        rc = cli_fail(ctx, st);
        goto done;
    }
    pj = params_json(&q);
    if ((rc = cli_emit_result(ctx, &a, &sum, a.pos[0], out, cmdline, pj, q.report, CLI_RESULT_WARNINGS | CLI_RESULT_NO_SQNR_WARN)) != CLI_EXIT_OK) goto done;
    rc = CLI_EXIT_OK;
done:
    npuc_summary_free(&sum);
    free(cmdline);
    free(pj);
    npuc_model_close(m);
    npuc_ctx_free(ctx);
    free(out_alloc);
    free(q.inc);
    free(q.exc);
    cli_args_free(&a);
    return cli_finish_stdout(rc);
}

const cli_command cli_cmd_sparsify = {
    "sparsify",
    "N:M structured sparsity (2:4) with a cost estimate per layer",
    "Usage: npuc sparsify IN [-o OUT] [--pattern N:M] [--compressed] [options]\n"
    "\n"
    "In every group of M consecutive weights along the input channels of each output\n"
    "channel (at each spatial tap of a convolution) keeps the N of largest magnitude;\n"
    "among equal magnitudes the lower index is dropped first.  When M does not divide the\n"
    "input channels the last group is short and keeps at most N of its values.  Tensors\n"
    "with fewer than M input channels (depthwise convolutions) are left dense, with a\n"
    "warning.  docs/sparsity.md has the details and the cost model.\n"
    "\n"
    "  --pattern N:M          keep N of every M, 1 <= N < M <= 16 (default 2:4)\n"
    "  --compressed           store kept values + 2-bit positions (encoding nm_sparse);\n"
    "                         'npuc decompress' expands it; default: dense with zeros\n"
    "\n"
    "Cost model (per layer: arithmetic intensity and estimated N:M speedup from\n"
    "T = max(N/M * FLOPs / peak, (N/M * weight bytes + metadata + activations) / bandwidth)):\n"
    "  --peak-tops T          dense peak of the NPU in TOPS (default 200)\n"
    "  --bandwidth GBS        memory bandwidth in GB/s (default 1000)\n"
    "  --tokens N             output positions per weight read: tokens for linear layers,\n"
    "                         output pixels for convolutions (default 1: batch-1 decoding,\n"
    "                         every layer memory-bound)\n"
    "\n"
    "Selection:\n"
    "  --include REGEX        sparsify only matching tensors (repeatable; default: every\n"
    "                         float weight of rank >= 2 with a channel layout)\n"
    "  --exclude REGEX        never sparsify matching tensors (repeatable)\n"
    "  --layout REGEX=NAME    override the layout of matching tensors (docs/formats.md)\n"
    "\n"
    "Output:\n"
    "  -o, --output OUT       default: IN's name with .<N>of<M>\n"
    "      --deflate N        HDF5 deflate level 0..9 (default 4)\n"
    "  -f, --force            overwrite OUT\n"
    "      --json             print the npuc.report/1 JSON document instead of the table\n"
    "      --report FILE      also write the results to FILE (.json, .csv, .md, .html, else text)\n"
    "  -j, --jobs N           worker threads (default: all cores); output is identical for any N\n"
    "  -q, --quiet            no warnings or progress on stderr\n"
    "  -h, --help             this help\n"
    "\n"
    "Errors (exit 2, nothing written): N >= M, an --include naming a tensor whose input\n"
    "channels are fewer than M, NaN or Inf weights, an existing OUT without -f.\n",
    "IN",
    run,
};
