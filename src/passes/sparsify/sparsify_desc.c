/*
 * sparsify_desc.c - the descriptor of the N:M sparsify pass (npuc/pass.h):
 * its options, as `npuc sparsify` flags and recipe keys, and the run that
 * calls npuc_sparsify_model.
 *
 * The row order is the recipe's canonical key order (docs/recipes.md).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "passes/pass_desc.h"

#define COST "Cost model (per layer: arithmetic intensity and estimated N:M speedup from\n" \
             "T = max(N/M * FLOPs / peak, (N/M * weight bytes + metadata + activations) / bandwidth))"

static const npuc_pass_option OPTIONS[] = {
    {.name = "pattern", .flag = "pattern", .type = NPUC_OPT_STR, .dflt = "2:4", .metavar = "N:M",
     .help = "keep N of every M, 1 <= N < M <= 16 (default 2:4)", .bad = "expected N:M with 1 <= N < M <= 16",
     .check = npuc__check_nm},
    {.name = "compressed", .flag = "compressed", .type = NPUC_OPT_BOOL,
     .help = "store kept values + 2-bit positions (encoding nm_sparse);\n"
             "'npuc decompress' expands it; default: dense with zeros"},
    {.name = "peak_tops", .flag = "peak-tops", .type = NPUC_OPT_NUM, .lo = 0, .hi = INFINITY,
     .flags = NPUC_OPT_LO_OPEN | NPUC_OPT_HI_OPEN, .dflt = "200", .metavar = "T", .section = COST,
     .help = "dense peak of the NPU in TOPS (default 200)", .bad = "must be a positive number"},
    {.name = "bandwidth", .flag = "bandwidth", .type = NPUC_OPT_NUM, .lo = 0, .hi = INFINITY,
     .flags = NPUC_OPT_LO_OPEN | NPUC_OPT_HI_OPEN, .dflt = "1000", .metavar = "GBS", .section = COST,
     .help = "memory bandwidth in GB/s (default 1000)", .bad = "must be a positive number"},
    {.name = "tokens", .flag = "tokens", .type = NPUC_OPT_NUM, .lo = 0, .hi = INFINITY,
     .flags = NPUC_OPT_LO_OPEN | NPUC_OPT_HI_OPEN, .dflt = "1", .metavar = "N", .section = COST,
     .help = "output positions per weight read: tokens for linear layers,\n"
             "output pixels for convolutions (default 1: batch-1 decoding,\n"
             "every layer memory-bound)",
     .bad = "must be a positive number"},
    {.name = "include", .flag = "include", .type = NPUC_OPT_LIST, .flags = NPUC_OPT_REGEX, .metavar = "REGEX",
     .section = "Selection",
     .help = "sparsify only matching tensors (repeatable; default: every\n"
             "float weight of rank >= 2 with a channel layout)"},
    {.name = "exclude", .flag = "exclude", .type = NPUC_OPT_LIST, .flags = NPUC_OPT_REGEX, .metavar = "REGEX",
     .section = "Selection", .help = "never sparsify matching tensors (repeatable)", .override_key = "skip"},
};

static const npuc_pass_section SECTIONS[] = {
    {"", NULL, 0}, {COST, NULL, 0}, {"Selection", NULL, 1}, {"Output", NULL, 0}, {NULL, NULL, 0},
};

static const char *const OVERRIDES[] = {"skip", NULL};
static const char *const BASE[] = {NULL};

static const npuc_pass_echo ECHO[] = {
    {"pattern", NULL}, {"compressed", "compressed"}, {"include", "include"}, {"exclude", "exclude"},
    {"peak_tops", "peak_tops"}, {"bandwidth_gbs", "bandwidth"}, {"tokens", "tokens"}, {NULL, NULL},
};

static void pattern(const npuc_pass_optset *s, int *n, int *m) {
    if (npuc_nm_parse(npuc__pass_str(s, "pattern"), n, m) != 0) *n = 2, *m = 4;
}

static void tag(const npuc_pass_optset *s, char *buf, size_t n) {
    int a, b;
    pattern(s, &a, &b);
    snprintf(buf, n, "%dof%d", a, b);
}

static int echo_value(const npuc_pass_optset *s, const char *name, npuc_pass_value *v) {
    int a, b;
    if (strcmp(name, "pattern") != 0) return 1;
    pattern(s, &a, &b);
    v->type = NPUC_OPT_STR;
    snprintf(v->s, sizeof v->s, "%d:%d", a, b);
    return 0;
}

static npuc_status run(npuc_ctx *ctx, const npuc_pass_optset *s, npuc_model *m, const npuc__sink *to,
                       const npuc_pass_io *io, npuc_summary *sum) {
    npuc_sparsify_opts o = npuc_sparsify_opts_defaults();
    const char *p = npuc__pass_str(s, "pattern");
    if (npuc_nm_parse(p, &o.n, &o.m) != 0) return npuc_fail(ctx, NPUC_ERR_ARG, "pattern '%s': not N:M", p);
    o.compressed = npuc__pass_bool(s, "compressed");
    o.cost.peak_tops = npuc__pass_num(s, "peak_tops");
    o.cost.bandwidth_gbs = npuc__pass_num(s, "bandwidth");
    o.cost.tokens = npuc__pass_num(s, "tokens");
    NPUC__PASS_SELECT(o, s);
    NPUC__PASS_IO(o, io);
    const npuc__sink sink = npuc__sink_with(to, &o.write);
    return npuc__sparsify_model_to(ctx, m, &sink, &o, sum);
}

const npuc_pass npuc__pass_sparsify = {
    .name = "sparsify",
    .kind = NPUC_STEP_SPARSIFY,
    .summary = "N:M structured sparsity (2:4) with a cost estimate per layer",
    .usage = "IN [-o OUT] [--pattern N:M] [--compressed] [options]",
    .intro = "In every group of M consecutive weights along the input channels of each output\n"
             "channel (at each spatial tap of a convolution) keeps the N of largest magnitude;\n"
             "among equal magnitudes the lower index is dropped first.  When M does not divide the\n"
             "input channels the last group is short and keeps at most N of its values.  Tensors\n"
             "with fewer than M input channels (depthwise convolutions) are left dense, with a\n"
             "warning.  docs/sparsity.md has the details and the cost model.\n",
    .footer = "Errors (exit 2, nothing written): N >= M, an --include naming a tensor whose input\n"
              "channels are fewer than M, NaN or Inf weights, an existing OUT without -f.\n",
    .verb = "sparsifying",
    .output_help = "default: IN's name with .<N>of<M>",
    .json_help = "print the npuc.report/1 JSON document instead of the table",
    NPUC__PASS_TABLES,
    .flags = NPUC_PASS_WARNINGS | NPUC_PASS_NO_SQNR_WARN,
    .tag = tag,
    .validate = NULL,
    .echo_value = echo_value,
    .run = run,
};
