/*
 * cmd_prune.c - `npuc prune`: magnitude pruning (exactly floor(S * n)
 * zeros per tensor, or over all selected tensors) and structured pruning
 * (whole filters or input channels removed, every companion tensor shrunk
 * with them), with the error it cost, tensor by tensor.
 *
 * stdout: one line per tensor as it is written, then totals (or, with
 * --json, the npuc.report/1 document); warnings on stderr.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_common.h"

enum {
    OPT_SPARSITY = 's',
    OPT_SCOPE = CLI_OPT_USER,
    OPT_STRUCTURED,
    OPT_CRITERION,
    OPT_ROUND,
    OPT_INCLUDE,
    OPT_EXCLUDE,
    OPT_LAYER_SPARSITY,
    OPT_NEXT,
    OPT_GRAPH,
    OPT_NO_GUESS,
    OPT_REPORT,
    OPT_DEFLATE
};

static const cli_option OPTIONS[] = {
    {"sparsity", 's', 1, OPT_SPARSITY},
    {"scope", 0, 1, OPT_SCOPE},
    {"structured", 0, 1, OPT_STRUCTURED},
    {"criterion", 0, 1, OPT_CRITERION},
    {"round-to", 0, 1, OPT_ROUND},
    {"include", 0, 1, OPT_INCLUDE},
    {"exclude", 0, 1, OPT_EXCLUDE},
    {"layer-sparsity", 0, 1, OPT_LAYER_SPARSITY},
    {"next", 0, 1, OPT_NEXT},
    {"graph", 0, 1, OPT_GRAPH},
    {"no-guess", 0, 0, OPT_NO_GUESS},
    {"report", 0, 1, OPT_REPORT},
    {"deflate", 0, 1, OPT_DEFLATE},
    {NULL, 0, 0, 0},
};

typedef struct pargs {
    npuc_prune_opts o;
    const char **inc, **exc, **next, **ls;
    size_t ninc, nexc, nnext, nls;
    const char *report;
    int sparsity_set, scope_set, criterion_set, round_set;
} pargs;

static int on_opt(cli_args *a, void *ud, int id, const char *arg) {
    pargs *q = ud;
    long v;
    (void)a;
    switch (id) {
    case OPT_SPARSITY: {
        char *end;
        errno = 0;
        double s = strtod(arg, &end);
        if (end == arg || *end || errno || !(s >= 0.0 && s < 1.0))
            return cli_usage_error(&cli_cmd_prune, "--sparsity '%s': must be a number in [0, 1)", arg);
        q->o.sparsity = s;
        q->sparsity_set = 1;
        break;
    }
    case OPT_SCOPE:
        if (strcmp(arg, "layer") == 0) q->o.scope = NPUC_PRUNE_LAYER;
        else if (strcmp(arg, "global") == 0) q->o.scope = NPUC_PRUNE_GLOBAL;
        else return cli_usage_error(&cli_cmd_prune, "--scope '%s': expected layer or global", arg);
        q->scope_set = 1;
        break;
    case OPT_STRUCTURED:
        if (strcmp(arg, "filter") == 0) q->o.structure = NPUC_PRUNE_FILTER;
        else if (strcmp(arg, "channel") == 0) q->o.structure = NPUC_PRUNE_CHANNEL;
        else return cli_usage_error(&cli_cmd_prune, "--structured '%s': expected filter or channel", arg);
        break;
    case OPT_CRITERION:
        if (strcmp(arg, "l1") == 0) q->o.criterion = NPUC_PRUNE_L1;
        else if (strcmp(arg, "l2") == 0) q->o.criterion = NPUC_PRUNE_L2;
        else return cli_usage_error(&cli_cmd_prune, "--criterion '%s': expected l1 or l2", arg);
        q->criterion_set = 1;
        break;
    case OPT_ROUND:
        if (cli_parse_long(arg, 1, 65536, &v) != 0)
            return cli_usage_error(&cli_cmd_prune, "--round-to '%s': must be an integer from 1 to 65536", arg);
        q->o.round_to = (uint32_t)v;
        q->round_set = 1;
        break;
    case OPT_INCLUDE: if (cli_push(&q->inc, &q->ninc, arg)) return CLI_EXIT_FAIL; break;
    case OPT_EXCLUDE: if (cli_push(&q->exc, &q->nexc, arg)) return CLI_EXIT_FAIL; break;
    case OPT_NEXT: if (cli_push(&q->next, &q->nnext, arg)) return CLI_EXIT_FAIL; break;
    case OPT_LAYER_SPARSITY: if (cli_push(&q->ls, &q->nls, arg)) return CLI_EXIT_FAIL; break;
    case OPT_GRAPH: q->o.graph_file = arg; break;
    case OPT_NO_GUESS: q->o.no_guess = 1; break;
    case OPT_REPORT: q->report = arg; break;
    case OPT_DEFLATE: return cli_set_deflate(&cli_cmd_prune, &q->o.write, arg);
    }
    return CLI_CONTINUE;
}

static char *params_json(const pargs *q) {
    json_t *inc = json_array(), *exc = json_array(), *next = json_array(), *ls = json_array();
    for (size_t i = 0; i < q->ninc; i++) json_array_append_new(inc, cli_json_str(q->inc[i]));
    for (size_t i = 0; i < q->nexc; i++) json_array_append_new(exc, cli_json_str(q->exc[i]));
    for (size_t i = 0; i < q->nnext; i++) json_array_append_new(next, cli_json_str(q->next[i]));
    for (size_t i = 0; i < q->nls; i++) json_array_append_new(ls, cli_json_str(q->ls[i]));
    const char *structure = q->o.structure == NPUC_PRUNE_FILTER ? "filter" :
                            q->o.structure == NPUC_PRUNE_CHANNEL ? "channel" : "unstructured";
    json_t *p = json_pack("{s:{s:f, s:s, s:s, s:s, s:i, s:o, s:o, s:o, s:o, s:o, s:b}}", "prune", "sparsity",
                          q->o.sparsity, "scope", q->o.scope == NPUC_PRUNE_GLOBAL ? "global" : "layer",
                          "structured", structure, "criterion", q->o.criterion == NPUC_PRUNE_L2 ? "l2" : "l1",
                          "round_to", (int)q->o.round_to, "include", inc, "exclude", exc, "layer_sparsity", ls,
                          "next", next,
                          "graph", cli_json_str(q->o.graph_file), "no_guess", q->o.no_guess);
    char *s = p ? json_dumps(p, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(p);
    return s;
}

static int run(int argc, char **argv) {
    cli_args a;
    pargs q;
    memset(&q, 0, sizeof q);
    q.o = npuc_prune_opts_defaults();
    npuc_ctx *ctx = NULL;
    npuc_model *m = NULL;
    char *out_alloc = NULL, *pj = NULL;
    npuc_summary sum;
    memset(&sum, 0, sizeof sum);
    char *cmdline = cli_join_command(argc, argv);
    int rc = cli_parse(&cli_cmd_prune, argc, argv,
                       CLI_OPT_OUTPUT | CLI_OPT_FORCE | CLI_OPT_JOBS | CLI_OPT_LAYOUT | CLI_OPT_JSON, OPTIONS,
                       on_opt, &q, 1, 1, &a);
    if (rc != CLI_CONTINUE) goto done;
    if (!q.sparsity_set) { rc = cli_usage_error(&cli_cmd_prune, "missing --sparsity S"); goto done; }
    if (q.o.structure == NPUC_PRUNE_UNSTRUCTURED && (q.criterion_set || q.round_set || q.nnext || q.o.graph_file)) {
        rc = cli_usage_error(&cli_cmd_prune, "--criterion, --round-to, --next and --graph need --structured");
        goto done;
    }
    if (q.o.structure != NPUC_PRUNE_UNSTRUCTURED && q.scope_set && q.o.scope == NPUC_PRUNE_GLOBAL) {
        rc = cli_usage_error(&cli_cmd_prune, "--scope global is for unstructured pruning");
        goto done;
    }
    if ((rc = cli_ctx_new(&a, &ctx)) != CLI_EXIT_OK) goto done;
    q.o.include = q.inc; q.o.ninclude = q.ninc;
    q.o.exclude = q.exc; q.o.nexclude = q.nexc;
    q.o.next = q.next; q.o.nnext = q.nnext;
    q.o.layer_sparsity = q.ls; q.o.nlayer_sparsity = q.nls;
    q.o.write.overwrite = a.force;
    if ((rc = cli_open_model(ctx, &a, a.pos[0], &m)) != CLI_EXIT_OK) goto done;
    const char *out;
    if ((rc = cli_output_path(&a, m, "pruned", &q.o.write, &out, &out_alloc)) != CLI_EXIT_OK) goto done;

    cli_printer p;
    cli_printer_init(&p, &a, m, "pruning");
    q.o.on_tensor = cli_printer_on_tensor;
    q.o.user = &p;
    npuc_status st = npuc_prune_model(ctx, m, out, &q.o, &sum);
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
    free(q.next);
    free(q.ls);
    cli_args_free(&a);
    return cli_finish_stdout(rc);
}

const cli_command cli_cmd_prune = {
    "prune",
    "zero the smallest weights, or remove whole filters / channels",
    "Usage: npuc prune IN [-o OUT] --sparsity S [--layer-sparsity REGEX=S]... [options]\n"
    "\n"
    "Magnitude pruning (default): in every selected tensor exactly floor(S * n) weights\n"
    "become zero, the smallest |w| first and, among equal magnitudes, the lowest index\n"
    "first; already-zero weights count.  Selection is linear time, never a sort.\n"
    "\n"
    "Structured pruning (--structured): output filters (or input channels) are ranked by\n"
    "the L1/L2 norm of their weights and the weakest are removed; the layer's bias, the\n"
    "BatchNorm after it, depthwise convs in between and the next layer's input channels\n"
    "shrink with them, so the smaller model computes exactly the kept channels.  Where\n"
    "the next layer cannot be found the filters are zeroed instead (the note says why).\n"
    "\n"
    "  -s, --sparsity S       fraction to remove, 0 <= S < 1 (required)\n"
    "      --scope layer|global  floor(S*n) zeros per tensor (default) or over all\n"
    "                         selected tensors together (unstructured only)\n"
    "      --layer-sparsity REGEX=S  sparsity S in [0, 1) for selected tensors matching\n"
    "                         REGEX (repeatable; the first matching rule wins); with\n"
    "                         --scope global they are pruned on their own, outside the\n"
    "                         global pool; structured: the matched layer's channel\n"
    "                         fraction (the producer for filter, the consumer for channel)\n"
    "      --structured filter|channel  remove output filters, or input channels\n"
    "                         ranked on the consuming layers' weights\n"
    "      --criterion l1|l2  norm that ranks filters / channels (default l1)\n"
    "      --round-to M       keep a multiple of M channels (NPUs favour 8/16/32)\n"
    "      --next A=B[,C]     layer A's outputs feed B (and C): tensor or layer names;\n"
    "                         repeatable; a depthwise B passes channels on to its own next\n"
    "      --graph FILE       the same as a file: JSON {\"next\": {\"A\": [\"B\"]}, \"bn_pairs\":\n"
    "                         [{\"conv\": ..., \"bn\": ...}]} (the data catalogs qualify) or\n"
    "                         lines A=B[,C]\n"
    "      --no-guess         do not follow storage / layer order (docs/sparsity.md)\n"
    "\n"
    "Selection:\n"
    "      --include REGEX    prune only tensors matching REGEX (repeatable; default:\n"
    "                         every float tensor of rank >= 2)\n"
    "      --exclude REGEX    never prune matching tensors (repeatable)\n"
    "      --layout REGEX=NAME  override the layout of matching tensors (docs/formats.md)\n"
    "  A pattern that matches no tensor is an error.\n"
    "\n"
    "Output:\n"
    "  -o, --output OUT       the pruned model (default: IN's name with .pruned); the format\n"
    "                         follows OUT's extension, else IN's format\n"
    "      --deflate N        HDF5 deflate level 0..9 (default 4)\n"
    "  -f, --force            overwrite OUT\n"
    "      --json             print the npuc.report/1 JSON document instead of the table\n"
    "      --report FILE      also write the results to FILE (.json, .csv, .md, .html, else text)\n"
    "  -j, --jobs N           worker threads (default: all cores); output is identical for any N\n"
    "  -q, --quiet            no warnings or progress on stderr\n"
    "  -h, --help             this help\n"
    "\n"
    "Errors (exit 2, nothing written): a sparsity outside [0, 1) (also in --layer-sparsity),\n"
    "a pattern that matches no tensor, a --next naming a missing tensor or one whose\n"
    "channels do not match, NaN or Inf weights, an existing OUT without -f.\n",
    "IN",
    run,
};
