/*
 * prune_desc.c - the descriptor of the prune pass (npuc/pass.h): magnitude
 * and structured pruning options, as `npuc prune` flags and recipe keys,
 * and the run that calls npuc_prune_model.
 *
 * The row order is the recipe's canonical key order (docs/recipes.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/pass_desc.h"

static int check_next(const char *s, char *why, size_t n) {
    const char *eq = strchr(s, '=');
    if (!eq || eq == s || !eq[1]) {
        snprintf(why, n, "'%s' must be PRODUCER=CONSUMER[,CONSUMER...]", s);
        return -1;
    }
    return 0;
}

static int check_rule_sparsity(const char *s, char *why, size_t n) {
    const char *eq = strrchr(s, '=');
    char *end;
    double v = eq && eq[1] ? strtod(eq + 1, &end) : -1;
    if (!eq || !eq[1] || *end || !(v >= 0 && v < 1)) {
        snprintf(why, n, "'%s': the sparsity after '=' must be a number in [0, 1)", s);
        return -1;
    }
    return 0;
}

static const char *const SCOPES[] = {"layer", "global", NULL};
static const char *const STRUCTURES[] = {"filter", "channel", NULL};
static const char *const CRITERIA[] = {"l1", "l2", NULL};

static const npuc_pass_option OPTIONS[] = {
    {.name = "sparsity", .flag = "sparsity", .short_flag = 's', .type = NPUC_OPT_NUM, .lo = 0, .hi = 1,
     .flags = NPUC_OPT_HI_OPEN, .metavar = "S", .help = "fraction to remove, 0 <= S < 1 (required)",
     .bad = "must be a number in [0, 1)"},
    {.name = "scope", .flag = "scope", .type = NPUC_OPT_STR, .choices = SCOPES, .noun = "scope", .dflt = "layer",
     .metavar = "layer|global",
     .help = "floor(S*n) zeros per tensor (default) or over all\nselected tensors together (unstructured only)",
     .bad = "expected layer or global"},
    {.name = "layer_sparsity", .flag = "layer-sparsity", .type = NPUC_OPT_LIST, .lo = 0, .hi = 1,
     .flags = NPUC_OPT_RULE | NPUC_OPT_RULE_NUM | NPUC_OPT_HI_OPEN,
     .metavar = "REGEX=S",
     .help = "sparsity S in [0, 1) for selected tensors matching\n"
             "REGEX (repeatable; the first matching rule wins); with\n"
             "--scope global they are pruned on their own, outside the\n"
             "global pool; structured: the matched layer's channel\n"
             "fraction (the producer for filter, the consumer for channel)",
     .check = check_rule_sparsity, .override_key = "sparsity"},
    {.name = "structured", .flag = "structured", .type = NPUC_OPT_STR, .choices = STRUCTURES, .noun = "structure",
     .metavar = "filter|channel", .help = "remove output filters, or input channels\nranked on the consuming layers' weights",
     .bad = "expected filter or channel"},
    {.name = "criterion", .flag = "criterion", .type = NPUC_OPT_STR, .choices = CRITERIA, .noun = "criterion",
     .dflt = "l1", .metavar = "l1|l2", .help = "norm that ranks filters / channels (default l1)",
     .bad = "expected l1 or l2", .needs = "structured=filter"},
    {.name = "round_to", .flag = "round-to", .type = NPUC_OPT_INT, .lo = 1, .hi = 65536, .dflt = "0",
     .metavar = "M", .help = "keep a multiple of M channels (NPUs favour 8/16/32)",
     .bad = "must be an integer from 1 to 65536", .needs = "structured=filter"},
    {.name = "next", .flag = "next", .type = NPUC_OPT_LIST, .metavar = "A=B[,C]",
     .help = "layer A's outputs feed B (and C): tensor or layer names;\n"
             "repeatable; a depthwise B passes channels on to its own next",
     .check = check_next, .needs = "structured=filter"},
    {.name = "graph", .flag = "graph", .type = NPUC_OPT_STR, .flags = NPUC_OPT_PATH, .metavar = "FILE",
     .help = "the same as a file: JSON {\"next\": {\"A\": [\"B\"]}, \"bn_pairs\":\n"
             "[{\"conv\": ..., \"bn\": ...}]} (the data catalogs qualify) or\n"
             "lines A=B[,C]",
     .needs = "structured=filter"},
    {.name = "no_guess", .flag = "no-guess", .type = NPUC_OPT_BOOL,
     .help = "do not look for chains by storage / layer order; guesses are listed but\n"
             "not applied by default (--accept-guesses applies them; docs/sparsity.md)"},
    {.name = "include", .flag = "include", .type = NPUC_OPT_LIST, .flags = NPUC_OPT_REGEX, .metavar = "REGEX",
     .section = "Selection",
     .help = "prune only tensors matching REGEX (repeatable; default:\nevery float tensor of rank >= 2)"},
    {.name = "exclude", .flag = "exclude", .type = NPUC_OPT_LIST, .flags = NPUC_OPT_REGEX, .metavar = "REGEX",
     .section = "Selection", .help = "never prune matching tensors (repeatable)", .override_key = "skip"},
};

static const npuc_pass_section SECTIONS[] = {
    {"", NULL, 0},
    {"Selection", "A pattern that matches no tensor is an error.  A bias, norm or BatchNorm tensor\n"
                  "is never pruned because a pattern matches it (its line says so): only an\n"
                  "--include '^NAME$' naming it exactly asks.", 1},
    {"Output", NULL, 0},
    {NULL, NULL, 0},
};

static const char *const OVERRIDES[] = {"sparsity", "skip", NULL};
static const char *const BASE[] = {"sparsity=0.5", NULL};

static const npuc_pass_echo ECHO[] = {
    {"sparsity", "sparsity"}, {"scope", "scope"}, {"structured", NULL}, {"criterion", "criterion"},
    {"round_to", "round_to"}, {"include", "include"}, {"exclude", "exclude"},
    {"layer_sparsity", "layer_sparsity"}, {"next", "next"}, {"graph", "graph"}, {"no_guess", "no_guess"},
    {NULL, NULL},
};

static npuc_status validate(npuc_ctx *ctx, const npuc_pass_optset *s) {
    const recipe_opt *sp = npuc__pass_get(s, "sparsity"), *st = npuc__pass_get(s, "structured"),
                     *scope = npuc__pass_get(s, "scope");
    static const char *const STRUCTURED_ONLY[] = {"criterion", "round_to", "next", "graph"};
    if (npuc__pass_is_cli(s)) {
        if (!sp) return npuc__pass_fail(ctx, s, NULL, "missing --sparsity S");
        for (int i = 0; i < 4 && !st; i++)
            if (npuc__pass_get(s, STRUCTURED_ONLY[i]))
                return npuc__pass_fail(ctx, s, NULL, "--criterion, --round-to, --next and --graph need --structured");
        if (st && scope && strcmp(scope->s, "global") == 0)
            return npuc__pass_fail(ctx, s, NULL, "--scope global is for unstructured pruning");
        return NPUC_OK;
    }
    if (!sp) return npuc__pass_fail(ctx, s, NULL, "needs 'sparsity: S' (0 <= S < 1)");
    if (st && scope) return npuc__pass_fail(ctx, s, scope, "'scope' applies to unstructured pruning only");
    for (int i = 0; i < 4 && !st; i++) {
        const recipe_opt *o = npuc__pass_get(s, STRUCTURED_ONLY[i]);
        if (o) return npuc__pass_fail(ctx, s, o, "this option needs 'structured: filter|channel'");
    }
    return NPUC_OK;
}

static void tag(const npuc_pass_optset *s, char *buf, size_t n) { snprintf(buf, n, "pruned"); }

static int echo_value(const npuc_pass_optset *s, const char *name, npuc_pass_value *v) {
    if (strcmp(name, "structured") != 0) return 1;
    const char *st = npuc__pass_str(s, "structured");
    v->type = NPUC_OPT_STR;
    snprintf(v->s, sizeof v->s, "%s", st ? st : "unstructured");
    return 0;
}

static npuc_status run(npuc_ctx *ctx, const npuc_pass_optset *s, npuc_model *m, const npuc__sink *to,
                       const npuc_pass_io *io, npuc_summary *sum) {
    npuc_prune_opts o = npuc_prune_opts_defaults();
    const char *st = npuc__pass_str(s, "structured");
    o.sparsity = npuc__pass_num(s, "sparsity");
    o.scope = strcmp(npuc__pass_str(s, "scope"), "global") == 0 ? NPUC_PRUNE_GLOBAL : NPUC_PRUNE_LAYER;
    if (st) o.structure = strcmp(st, "filter") == 0 ? NPUC_PRUNE_FILTER : NPUC_PRUNE_CHANNEL;
    o.criterion = strcmp(npuc__pass_str(s, "criterion"), "l2") == 0 ? NPUC_PRUNE_L2 : NPUC_PRUNE_L1;
    o.round_to = (uint32_t)npuc__pass_int(s, "round_to");
    o.no_guess = npuc__pass_bool(s, "no_guess");
    const npuc__strv *nx = npuc__pass_strv(s, "next"), *ls = npuc__pass_strv(s, "layer_sparsity");
    char *graph = NULL;
    if (npuc__pass_path(s, "graph", &graph) != 0) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    o.graph_file = graph;
    NPUC__PASS_SELECT(o, s);
    o.next = nx->v;
    o.nnext = nx->n;
    o.layer_sparsity = ls->v;
    o.nlayer_sparsity = ls->n;
    NPUC__PASS_IO(o, io);
    const npuc__sink sink = npuc__sink_with(to, &o.write);
    npuc_status rc = npuc__prune_model_to(ctx, m, &sink, &o, sum);
    free(graph);
    return rc;
}

const npuc_pass npuc__pass_prune = {
    .name = "prune",
    .kind = NPUC_STEP_PRUNE,
    .summary = "zero the smallest weights, or remove whole filters / channels",
    .usage = "IN [-o OUT] --sparsity S [--layer-sparsity REGEX=S]... [options]",
    .intro = "Magnitude pruning (default): in every selected tensor exactly floor(S * n) weights\n"
             "become zero, the smallest |w| first and, among equal magnitudes, the lowest index\n"
             "first; already-zero weights count.  Selection is linear time, never a sort.\n"
             "\n"
             "Structured pruning (--structured): output filters (or input channels) are ranked by\n"
             "the L1/L2 norm of their weights and the weakest are removed; the layer's bias, the\n"
             "BatchNorm after it, depthwise convs in between and the next layer's input channels\n"
             "shrink with them, so the smaller model computes exactly the kept channels.  Where\n"
             "the next layer cannot be found the filters are zeroed instead (the note says why).\n",
    .footer = "Errors (exit 2, nothing written): a sparsity outside [0, 1) (also in --layer-sparsity),\n"
              "a pattern that matches no tensor, a --next naming a missing tensor or one whose\n"
              "channels do not match, NaN or Inf weights, an existing OUT without -f.\n",
    .verb = "pruning",
    .output_help = "the pruned model (default: IN's name with .pruned); the format\n"
                   "follows OUT's extension, else IN's format",
    .json_help = "print the npuc.report/1 JSON document instead of the table",
    NPUC__PASS_TABLES,
    .flags = NPUC_PASS_WARNINGS | NPUC_PASS_NO_SQNR_WARN,
    .tag = tag,
    .validate = validate,
    .echo_value = echo_value,
    .run = run,
};
