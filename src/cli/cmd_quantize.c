/*
 * cmd_quantize.c - `npuc quantize`: a model in, a quantized artifact out, and
 * the error it cost, tensor by tensor.
 *
 * stdout carries the results: one aligned line per tensor as it is written,
 * then totals (or, with --json, one npuc.quantize/1 document at the end).
 * --report FILE writes the same data to a file (JSON for .json, CSV for
 * .csv, else the text table).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_common.h"

enum {
    OPT_BITS = 'b',
    OPT_SYM = CLI_OPT_USER,
    OPT_ASYM,
    OPT_PER_CHANNEL,
    OPT_PER_TENSOR,
    OPT_GROUP,
    OPT_AXIS,
    OPT_RANGE,
    OPT_INCLUDE,
    OPT_EXCLUDE,
    OPT_LAYER_BITS,
    OPT_LAYER_GROUP,
    OPT_ALL,
    OPT_FAKE,
    OPT_REPORT,
    OPT_DEFLATE,
    OPT_PATTERN
};

static const cli_option OPTIONS[] = {
    {"bits", 'b', 1, OPT_BITS},
    {"symmetric", 0, 0, OPT_SYM},
    {"asymmetric", 0, 0, OPT_ASYM},
    {"per-channel", 0, 0, OPT_PER_CHANNEL},
    {"per-tensor", 0, 0, OPT_PER_TENSOR},
    {"group-size", 'g', 1, OPT_GROUP},
    {"axis", 0, 1, OPT_AXIS},
    {"range", 0, 1, OPT_RANGE},
    {"include", 0, 1, OPT_INCLUDE},
    {"exclude", 0, 1, OPT_EXCLUDE},
    {"layer-bits", 0, 1, OPT_LAYER_BITS},
    {"layer-group-size", 0, 1, OPT_LAYER_GROUP},
    {"quantize-all", 0, 0, OPT_ALL},
    {"fake-quant", 0, 0, OPT_FAKE},
    {"report", 0, 1, OPT_REPORT},
    {"deflate", 0, 1, OPT_DEFLATE},
    {"pattern", 0, 1, OPT_PATTERN},
    {NULL, 0, 0, 0},
};

typedef struct qargs {
    npuc_quantize_opts o;
    const char **inc, **exc, **lb, **lg;
    size_t ninc, nexc, nlb, nlg;
    const char *range;
    const char *report;
    int gran_set;
} qargs;

static int on_opt(cli_args *a, void *ud, int id, const char *arg) {
    qargs *q = ud;
    long v;
    (void)a;
    switch (id) {
    case OPT_BITS:
        if (cli_parse_long(arg, 2, 8, &v) != 0)
            return cli_usage_error(&cli_cmd_quantize, "--bits '%s': bit width must be 2..8", arg);
        q->o.params.bits = (int)v;
        break;
    case OPT_SYM: q->o.params.symmetric = 1; break;
    case OPT_ASYM: q->o.params.symmetric = 0; break;
    case OPT_PER_CHANNEL:
    case OPT_PER_TENSOR:
    case OPT_GROUP:
        if (q->gran_set)
            return cli_usage_error(&cli_cmd_quantize,
                                   "choose one of --per-channel, --per-tensor, --group-size");
        q->gran_set = 1;
        if (id == OPT_PER_CHANNEL) q->o.params.gran = NPUC_GRAN_CHANNEL;
        else if (id == OPT_PER_TENSOR) q->o.params.gran = NPUC_GRAN_TENSOR;
        else {
            if (cli_parse_long(arg, 2, 1L << 30, &v) != 0)
                return cli_usage_error(&cli_cmd_quantize,
                                       "--group-size '%s': must be an integer from 2 to 2^30", arg);
            q->o.params.gran = NPUC_GRAN_GROUP;
            q->o.params.group_size = (uint32_t)v;
        }
        break;
    case OPT_AXIS:
        if (cli_parse_long(arg, 0, 7, &v) != 0)
            return cli_usage_error(&cli_cmd_quantize, "--axis '%s': must be 0..7", arg);
        q->o.params.axis = (int)v;
        break;
    case OPT_RANGE: q->range = arg; break;
    case OPT_INCLUDE: if (cli_push(&q->inc, &q->ninc, arg)) return CLI_EXIT_FAIL; break;
    case OPT_EXCLUDE: if (cli_push(&q->exc, &q->nexc, arg)) return CLI_EXIT_FAIL; break;
    case OPT_LAYER_BITS: if (cli_push(&q->lb, &q->nlb, arg)) return CLI_EXIT_FAIL; break;
    case OPT_LAYER_GROUP: if (cli_push(&q->lg, &q->nlg, arg)) return CLI_EXIT_FAIL; break;
    case OPT_ALL: q->o.quantize_all = 1; break;
    case OPT_FAKE: q->o.fake_quant = 1; break;
    case OPT_PATTERN:
        if (npuc_nm_parse(arg, &q->o.pattern_n, &q->o.pattern_m) != 0)
            return cli_usage_error(&cli_cmd_quantize, "--pattern '%s': expected N:M with 1 <= N < M <= 16", arg);
        break;
    case OPT_REPORT: q->report = arg; break;
    case OPT_DEFLATE: return cli_set_deflate(&cli_cmd_quantize, &q->o.write, arg);
    }
    return CLI_CONTINUE;
}

/* ------------------------------------------------------------- printing */

/* Every parameter of the run, for the report header. */
static char *params_json(const qargs *q) {
    char range[48], scheme[32];
    npuc_range_format(&q->o.params.range, range, sizeof range);
    npuc_quant_scheme_name(&q->o.params, scheme, sizeof scheme);
    json_t *inc = json_array(), *exc = json_array(), *lb = json_array(), *lg = json_array();
    for (size_t i = 0; i < q->nlg; i++) json_array_append_new(lg, cli_json_str(q->lg[i]));
    for (size_t i = 0; i < q->ninc; i++) json_array_append_new(inc, cli_json_str(q->inc[i]));
    for (size_t i = 0; i < q->nexc; i++) json_array_append_new(exc, cli_json_str(q->exc[i]));
    for (size_t i = 0; i < q->nlb; i++) json_array_append_new(lb, cli_json_str(q->lb[i]));
    char pattern[16] = "";
    if (q->o.pattern_m) snprintf(pattern, sizeof pattern, "%d:%d", q->o.pattern_n, q->o.pattern_m);
    json_t *p = json_pack("{s:{s:i, s:b, s:s, s:s, s:i, s:i, s:s, s:o, s:o, s:o, s:o, s:b, s:b, s:s?}}", "quantize",
                          "bits", q->o.params.bits, "symmetric", q->o.params.symmetric, "scheme", scheme,
                          "granularity", q->o.params.gran == NPUC_GRAN_TENSOR ? "tensor" :
                                         q->o.params.gran == NPUC_GRAN_GROUP ? "group" : "channel",
                          "group_size", (int)q->o.params.group_size, "axis", q->o.params.axis, "range", range,
                          "include", inc, "exclude", exc, "layer_bits", lb, "layer_group_size", lg,
                          "quantize_all", q->o.quantize_all,
                          "fake_quant", q->o.fake_quant, "pattern", q->o.pattern_m ? pattern : NULL);
    char *s = p ? json_dumps(p, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(p);
    return s;
}

static int run(int argc, char **argv) {
    cli_args a;
    qargs q;
    memset(&q, 0, sizeof q);
    q.o = npuc_quantize_opts_defaults();
    npuc_ctx *ctx = NULL;
    npuc_model *m = NULL;
    char *out_alloc = NULL;
    npuc_summary sum;
    memset(&sum, 0, sizeof sum);
    char *cmdline = cli_join_command(argc, argv), *pj = NULL;
    int rc = cli_parse(&cli_cmd_quantize, argc, argv,
                       CLI_OPT_OUTPUT | CLI_OPT_FORCE | CLI_OPT_JOBS | CLI_OPT_LAYOUT | CLI_OPT_JSON,
                       OPTIONS, on_opt, &q, 1, 1, &a);
    if (rc != CLI_CONTINUE) goto done;
    if ((rc = cli_ctx_new(&a, &ctx)) != CLI_EXIT_OK) goto done;
    if (q.range) {
        npuc_status st = npuc_range_parse(ctx, q.range, &q.o.params.range);
        if (st != NPUC_OK) { rc = cli_usage_error(&cli_cmd_quantize, "%s", npuc_ctx_errmsg(ctx)); goto done; }
    }
    q.o.include = q.inc; q.o.ninclude = q.ninc;
    q.o.exclude = q.exc; q.o.nexclude = q.nexc;
    q.o.layer_bits = q.lb; q.o.nlayer_bits = q.nlb;
    q.o.layer_group_size = q.lg; q.o.nlayer_group_size = q.nlg;
    q.o.write.overwrite = a.force;
    if ((rc = cli_open_model(ctx, &a, a.pos[0], &m)) != CLI_EXIT_OK) goto done;
    char tag[32];
    snprintf(tag, sizeof tag, "%s%d", q.o.fake_quant ? "fq" : "q", q.o.params.bits);
    const char *out;
    if ((rc = cli_output_path(&a, m, tag, &q.o.write, &out, &out_alloc)) != CLI_EXIT_OK) goto done;

    cli_printer p;
    cli_printer_init(&p, &a, m, "quantizing");
    q.o.on_tensor = cli_printer_on_tensor;
    q.o.user = &p;
    npuc_status st = npuc_quantize_model(ctx, m, out, &q.o, &sum);
    if (st != NPUC_OK) {
        fflush(stdout);
        rc = cli_fail(ctx, st);
        goto done;
    }
    pj = params_json(&q);
    if ((rc = cli_emit_result(ctx, &a, &sum, a.pos[0], out, cmdline, pj, q.report, 0)) != CLI_EXIT_OK) goto done;
    rc = CLI_EXIT_OK;
done:
    npuc_summary_free(&sum);
    free(cmdline);
    free(pj);
    npuc_model_close(m);
    npuc_ctx_free(ctx);
    free(out_alloc);
    free(q.inc); free(q.exc); free(q.lb); free(q.lg);
    cli_args_free(&a);
    return cli_finish_stdout(rc);
}

const cli_command cli_cmd_quantize = {
    "quantize",
    "quantize weights to 2..8-bit integers, report the error per tensor",
    "Usage: npuc quantize IN [-o OUT] [options]\n"
    "\n"
    "Quantizes every float weight of rank >= 2 (conv, linear, embedding, recurrent) and\n"
    "writes an artifact: codes under the tensor's name, <name>.scale and, asymmetric,\n"
    "<name>.zero_point, described in the 'npuc' metadata entry (docs/artifact.md).\n"
    "Biases, norms and BatchNorm statistics stay as they are.  IN may be the output of\n"
    "'npuc lowrank': its factors <name>.lr_a/.lr_b are quantized like any weight (the\n"
    "two factors of a layer are one layer for the first/last rule) and decompress\n"
    "multiplies the dequantized factors; other artifacts must be decompressed first.\n"
    "\n"
    "Scheme:\n"
    "  -b, --bits N           bit width 2..8 (default 8); codes below 8 bits are bit-packed\n"
    "      --symmetric        codes in [-(2^(b-1)-1), 2^(b-1)-1], zero point 0 (default)\n"
    "      --asymmetric       range widened to include 0, codes in [0, 2^b-1]\n"
    "      --per-channel      one scale per output channel of the layout (default)\n"
    "      --per-tensor       one scale per tensor\n"
    "  -g, --group-size G     one scale per G values along the reduction axis of each channel\n"
    "      --axis N           use axis N as the channel axis for every quantized tensor\n"
    "      --range METHOD     minmax (default), percentile=P, mse, entropy\n"
    "      --pattern N:M      N:M-sparsify first (2:4: keep 2 of every 4 weights along the input\n"
    "                         channels), quantize the kept values, store them with their\n"
    "                         positions (encoding nm_sparse, docs/sparsity.md)\n"
    "\n"
    "Selection:\n"
    "      --include REGEX    quantize only tensors matching REGEX (repeatable)\n"
    "      --exclude REGEX    never quantize tensors matching REGEX (repeatable)\n"
    "      --layer-bits REGEX=N  bit width for matching tensors; the first match wins\n"
    "      --layer-group-size REGEX=G  groups of G for matching tensors; the first match wins\n"
    "      --quantize-all     below 8 bits, also take the first and last weight layers to\n"
    "                         the low width (default: they stay at 8 bits)\n"
    "      --layout REGEX=NAME  override the layout of matching tensors (docs/formats.md)\n"
    "  A pattern that matches no tensor is an error.\n"
    "\n"
    "Output:\n"
    "  -o, --output OUT       the artifact (default: IN's name with .q<bits>); the format\n"
    "                         follows OUT's extension, else IN's format\n"
    "      --fake-quant       write quantized-then-dequantized floats in the source dtype\n"
    "      --deflate N        HDF5 deflate level 0..9 (default 4)\n"
    "  -f, --force            overwrite OUT\n"
    "      --json             print an npuc.quantize/1 JSON document instead of the table\n"
    "      --report FILE      also write the results to FILE (.json, .csv, else text)\n"
    "  -j, --jobs N           worker threads (default: all cores); output is identical for any N;\n"
    "                         below the core count, one more thread reads the next tensors ahead\n"
    "  -q, --quiet            no notes or progress on stderr\n"
    "  -h, --help             this help\n"
    "\n"
    "Errors: NaN or Inf in a tensor to quantize, a bad bit width, axis or group size, or an\n"
    "existing OUT without -f exit 2 and write nothing.\n",
    "IN",
    run,
};
