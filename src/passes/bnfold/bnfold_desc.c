/*
 * bnfold_desc.c - the descriptor of the fold-bn pass (npuc/pass.h): its
 * options, as `npuc fold-bn` flags and recipe keys, and the run: plan
 * (npuc_bnfold_find), then apply (npuc_bnfold_model).
 *
 * The row order is the recipe's canonical key order (docs/recipes.md).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/pass_desc.h"

static int check_pair(const char *s, char *why, size_t n) {
    const char *eq = strchr(s, '=');
    if (!eq || eq == s || !eq[1]) {
        snprintf(why, n, "'%s' must be CONV=BN", s);
        return -1;
    }
    return 0;
}

static const npuc_pass_option OPTIONS[] = {
    {.name = "eps", .flag = "eps", .type = NPUC_OPT_NUM, .lo = 0, .hi = INFINITY,
     .flags = NPUC_OPT_LO_OPEN | NPUC_OPT_HI_OPEN, .metavar = "E", .section = "Folding",
     .help = "BatchNorm epsilon for every pair (default: model_config's,\n"
             "else 1e-3 for Keras names and Keras 3 variables, 1e-5 for\nPyTorch/ONNX/Paddle)",
     .bad = "must be a positive number"},
    {.name = "pair", .flag = "pair", .type = NPUC_OPT_LIST, .metavar = "CONV=BN", .section = "Pairs",
     .help = "fold BatchNorm BN (module, layer or one of its tensors) into\n"
             "CONV (weight tensor, module or layer); repeatable",
     .bad = "expected CONV=BN", .check = check_pair},
    {.name = "pairs", .flag = "pairs", .type = NPUC_OPT_STR, .flags = NPUC_OPT_PATH, .metavar = "FILE",
     .section = "Pairs",
     .help = "pairs from FILE: lines CONV=BN, or JSON (the \"pairs\" of\n"
             "--dry-run --json); with --pair/--pairs only stated pairs fold"},
    {.name = "no_guess", .flag = "no-guess", .type = NPUC_OPT_BOOL, .section = "Pairs",
     .help = "skip guessed pairs (storage order, numbering): now the\n"
             "default, kept for scripts; overrides --accept-guesses"},
};

static const npuc_pass_section SECTIONS[] = {
    {"Pairs", NULL, 1}, {"Folding", NULL, 0}, {"Output", NULL, 0}, {NULL, NULL, 0},
};

static const char *const OVERRIDES[] = {NULL};
static const char *const BASE[] = {NULL};

static const npuc_pass_echo ECHO[] = {
    {"eps", "eps"}, {"pair", "pair"}, {"pairs_file", "pairs"}, {"no_guess", "no_guess"}, {NULL, NULL},
};

static npuc_status run(npuc_ctx *ctx, const npuc_pass_optset *s, npuc_model *m, const npuc__sink *to,
                       const npuc_pass_io *io, npuc_summary *sum) {
    npuc_bnfold_params p = npuc_bnfold_params_defaults();
    const npuc__strv *pairs = npuc__pass_strv(s, "pair");
    char *pf = NULL;
    if (npuc__pass_path(s, "pairs", &pf) != 0) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    p.eps = npuc__pass_num(s, "eps"); /* 0 when absent: the source's own */
    p.pairs = pairs->v;
    p.npairs = pairs->n;
    p.pairs_file = pf;
    p.no_guess = npuc__pass_bool(s, "no_guess");
    NPUC__PASS_IO(p, io);
    npuc_bnfold_plan *plan = calloc(1, sizeof *plan);
    npuc_status st = plan ? npuc_bnfold_find(ctx, m, &p, plan) : npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    npuc__sink sink = npuc__sink_with(to, &p.write);
    if (io->dry_run) sink.path = NULL; /* plan and measure, write nothing */
    if (st == NPUC_OK) st = npuc__bnfold_model_to(ctx, m, plan, &p, &sink, sum);
    if (st == NPUC_OK && io->plan) {
        *io->plan = plan;
    } else {
        npuc_bnfold_plan_free(plan);
        free(plan);
    }
    free(pf);
    return st;
}

const npuc_pass npuc__pass_fold_bn = {
    .name = "fold-bn",
    .kind = NPUC_STEP_FOLD_BN,
    .summary = "fold BatchNorm into the conv/linear layer that feeds it",
    .usage = "IN -o OUT [options]\n"
             "       npuc fold-bn IN --dry-run [--json]",
    .intro = "Folds each BatchNorm into the convolution or linear layer feeding it:\n"
             "s = gamma/sqrt(var+eps), W' = W*s along the output-channel axis, b' = (b-mean)*s+beta\n"
             "(a bias is created when the layer had none).  The BatchNorm tensors are removed;\n"
             "values are computed in double and stored in the source dtype.  Fold before you\n"
             "quantize: folding changes each output channel's range.\n"
             "\n"
             "Pairs are found from the file (docs/fold-bn.md): an ONNX file's own graph (a\n"
             "BatchNorm its graph refuses is never paired), a Keras model_config topology,\n"
             "module and layer names (features.0/features.1, conv1/bn1, X/X_BN, bn_X), Keras\n"
             "layer order, else the nearest preceding conv/linear with the same channel count\n"
             "in storage order (a guess).  Guessed pairs are listed, not folded, unless\n"
             "--accept-guesses; --strict makes them an error (exit 2).  --dry-run shows every\n"
             "pair with its evidence and every skipped candidate with the reason.\n",
    .footer = "Per pair: channels, eps and where it came from, max |scale|, the spread of per-channel\n"
              "weight ranges (max/min of max|W| per channel) before -> after, and a forward check:\n"
              "max |folded - (layer then BatchNorm)| / max |output| on random input.\n"
              "\n"
              "Errors: var+eps <= 0, NaN/Inf, mismatched channel counts, a BatchNorm stated for two\n"
              "producers, a stated pair the file's graph contradicts, an existing OUT without -f:\n"
              "exit 2, nothing written.\n",
    .verb = "folding",
    .output_help = "the folded model; the format follows OUT's extension, else\nIN's format",
    .json_help = "print an npuc.report/1 document (with --dry-run: the plan,\n"
                 "npuc.bnfold.plan/1) instead of the tables",
    NPUC__PASS_TABLES,
    .flags = NPUC_PASS_NO_SQNR_WARN,
    .tag = NULL,
    .validate = NULL,
    .echo_value = NULL,
    .run = run,
};
