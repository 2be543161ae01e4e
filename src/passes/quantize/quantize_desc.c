/*
 * quantize_desc.c - the descriptor of the quantize pass (npuc/pass.h): its
 * options, as `npuc quantize` flags and recipe keys, and the run that turns
 * them into npuc_quantize_opts for npuc_quantize_model.
 *
 * The row order is the recipe's canonical key order (docs/recipes.md): keys
 * added later go where they read best, since recipes written before them
 * cannot hold them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/export_hook.h"
#include "passes/pass_desc.h"
#include "passes/quantize/budget_alloc.h"

/* "REGEX=N" with N an integer in [lo, hi]: the recipe-side check of a
 * rule's value (the pass checks it again, naming the flag). */
static int rule_int(const char *s, long lo, long hi, const char *what, const char *range, char *why, size_t n) {
    const char *eq = strrchr(s, '=');
    char *end;
    long b = eq ? strtol(eq + 1, &end, 10) : 0;
    if (!eq || !eq[1] || *end || b < lo || b > hi) {
        snprintf(why, n, "'%s': the %s after '=' must be %s", s, what, range);
        return -1;
    }
    return 0;
}

static int check_rule_bits(const char *s, char *why, size_t n) {
    return rule_int(s, 2, 8, "bit width", "2..8", why, n);
}
static int check_rule_group(const char *s, char *why, size_t n) {
    return rule_int(s, 2, 1L << 30, "group size", "an integer from 2 to 2^30", why, n);
}

enum { GRAN = 1 };

/* "25%": a percentage of the input's size, in (0, 1000]; -1 if s is not one. */
static int parse_pct(const char *s, double *pct) {
    char *end;
    const size_t l = strlen(s);
    if (l < 2 || s[l - 1] != '%' || *s == '-') return -1;
    const double v = strtod(s, &end);
    if (end != s + l - 1 || !(v > 0) || !(v <= 1000)) return -1;
    *pct = v;
    return 0;
}

static int check_size(const char *s, char *why, size_t n) {
    uint64_t v;
    double pct;
    if ((npuc__budget_parse_size(s, &v) == 0 && v > 0) || parse_pct(s, &pct) == 0) return 0;
    snprintf(why, n, "'%s': expected a size in bytes, with a K, M or G suffix, or a percentage of the "
             "input's size (25%%)", s);
    return -1;
}

static const char *const SCALE_DTYPES[] = {"f32", "f16", "bf16", NULL};
static const char *const GRIDS[] = {"restricted", "full", NULL};
static const char *const METHODS[] = {"rtn", "gptq", NULL};
static const char *const ENC_VERSIONS[] = {"0.6.1", "1.0.0", NULL};

static const npuc_pass_option OPTIONS[] = {
    {.name = "bits", .flag = "bits", .short_flag = 'b', .type = NPUC_OPT_INT, .lo = 2, .hi = 8, .dflt = "8",
     .metavar = "N", .section = "Scheme", .help = "bit width 2..8 (default 8); codes below 8 bits are bit-packed",
     .bad = "bit width must be 2..8"},
    {.name = "symmetric", .flag = "symmetric", .type = NPUC_OPT_BOOL, .section = "Scheme",
     .help = "codes in [-(2^(b-1)-1), 2^(b-1)-1], zero point 0 (default)"},
    {.name = "asymmetric", .flag = "asymmetric", .type = NPUC_OPT_BOOL, .section = "Scheme",
     .help = "range widened to include 0, codes in [0, 2^b-1]"},
    {.name = "per_channel", .flag = "per-channel", .type = NPUC_OPT_BOOL, .section = "Scheme", .group = GRAN,
     .help = "one scale per output channel of the layout (default)"},
    {.name = "per_tensor", .flag = "per-tensor", .type = NPUC_OPT_BOOL, .section = "Scheme", .group = GRAN,
     .help = "one scale per tensor"},
    {.name = "group_size", .flag = "group-size", .short_flag = 'g', .type = NPUC_OPT_INT, .lo = 2, .hi = 1 << 30,
     .metavar = "G", .section = "Scheme", .group = GRAN,
     .help = "one scale per G values along the reduction axis of each channel",
     .bad = "must be an integer from 2 to 2^30"},
    {.name = "axis", .flag = "axis", .type = NPUC_OPT_INT, .lo = 0, .hi = 7, .metavar = "N", .section = "Scheme",
     .help = "use axis N as the channel axis for every quantized tensor", .bad = "must be 0..7"},
    {.name = "scale_dtype", .flag = "scale-dtype", .type = NPUC_OPT_STR, .dflt = "f32", .metavar = "DTYPE",
     .section = "Scheme", .choices = SCALE_DTYPES, .noun = "scale dtype", .bad = "must be f32, f16 or bf16",
     .help = "how the artifact stores scales: f32 (default), f16 or bf16 (codes use\n"
             "the rounded scale; int4 -g 32 with f16 costs 4.5 bits per weight)"},
    {.name = "range", .flag = "range", .type = NPUC_OPT_STR, .dflt = "minmax", .metavar = "METHOD",
     .section = "Scheme", .help = "minmax (default), percentile=P, mse, entropy", .check = npuc__check_range},
    {.name = "grid", .flag = "grid", .type = NPUC_OPT_STR, .choices = GRIDS, .noun = "grid", .dflt = "restricted",
     .metavar = "GRID", .section = "Scheme", .bad = "must be restricted or full",
     .help = "symmetric code grid: restricted (default, -(2^(b-1)-1)..2^(b-1)-1) or\n"
             "full (all 2^b codes, ggml's Q4_0: the largest magnitude maps to -2^(b-1))"},
    {.name = "method", .flag = "method", .type = NPUC_OPT_STR, .choices = METHODS, .noun = "method", .dflt = "rtn",
     .metavar = "METHOD", .section = "Calibration", .bad = "must be rtn or gptq",
     .help = "rtn: round to nearest (default); gptq: GPTQ error feedback through\n"
             "the Hessian of each layer's inputs (needs --calib)"},
    {.name = "calib", .flag = "calib", .type = NPUC_OPT_STR, .flags = NPUC_OPT_PATH, .metavar = "FILE",
     .section = "Calibration",
     .help = "calibration data (safetensors or HDF5): <weight>.input, <weight>.hessian\n"
             "or <weight>.input_sq per layer (docs/calibration.md); with --range mse\n"
             "the range search weighs each input column by its mean x^2; every layer\n"
             "with .input or .hessian gets its output error ||(W-W')X||/||WX||;\n"
             "<weight>.output_grad_sq makes a budget predict the loss itself"},
    {.name = "damp", .flag = "damp", .type = NPUC_OPT_NUM, .lo = 0, .hi = 1, .flags = NPUC_OPT_LO_OPEN, .dflt = "0.01",
     .metavar = "F", .section = "Calibration", .needs = "method=gptq",
     .help = "GPTQ dampening: F * mean(diag H) is added to diag H (default 0.01)",
     .bad = "must be a number in (0, 1]"},
    {.name = "act_order", .flag = "act-order", .type = NPUC_OPT_BOOL, .section = "Calibration", .needs = "method=gptq",
     .help = "GPTQ: quantize columns in decreasing diag H order (group scales are\n"
             "then computed from the weights before any update)"},
    {.name = "include", .flag = "include", .type = NPUC_OPT_LIST, .flags = NPUC_OPT_REGEX, .metavar = "REGEX",
     .section = "Selection", .help = "quantize only tensors matching REGEX (repeatable)"},
    {.name = "exclude", .flag = "exclude", .type = NPUC_OPT_LIST, .flags = NPUC_OPT_REGEX, .metavar = "REGEX",
     .section = "Selection", .help = "never quantize tensors matching REGEX (repeatable)", .override_key = "skip"},
    {.name = "layer_bits", .flag = "layer-bits", .type = NPUC_OPT_LIST, .lo = 2, .hi = 8, .flags = NPUC_OPT_RULE,
     .metavar = "REGEX=N", .section = "Selection", .help = "bit width for matching tensors; the first match wins",
     .check = check_rule_bits, .override_key = "bits"},
    {.name = "layer_group_size", .flag = "layer-group-size", .type = NPUC_OPT_LIST, .lo = 2, .hi = 1 << 30,
     .flags = NPUC_OPT_RULE,
     .metavar = "REGEX=G", .section = "Selection", .help = "groups of G for matching tensors; the first match wins",
     .check = check_rule_group, .override_key = "group_size"},
    {.name = "target_size", .flag = "target-size", .type = NPUC_OPT_STR, .metavar = "SIZE", .section = "Budget",
     .help = "choose every tensor's scheme so that the output file is at most SIZE\n"
             "(bytes, with a K/M/G suffix, or N% of the input's size) with the least\n"
             "summed relative error;\n"
             "the file's size is computed exactly (.safetensors, .gguf), an\n"
             "unreachable SIZE fails naming the smallest reachable (docs/budget.md)", .check = check_size},
    {.name = "target_bpw", .flag = "target-bpw", .type = NPUC_OPT_NUM, .lo = 1, .hi = 32, .metavar = "B",
     .section = "Budget",
     .help = "choose every tensor's scheme so that the quantized tensors average at\n"
             "most B bits per weight, scales and zero points included",
     .bad = "must be a number from 1 to 32"},
    {.name = "candidates", .flag = "candidates", .type = NPUC_OPT_STR, .metavar = "LIST", .section = "Budget",
     .check = npuc__budget_check_candidates,
     .help = "the schemes the budget chooses from, e.g. int4/g32,int8/ch,uint4/g128\n"
             "(default: int2..int8 and uint2..uint8 at ch, g32, g64, g128, f16 scales);\n"
             "for a .gguf output ggml types, e.g. q4_k,q8_0 (default: q2_k..q6_k,\n"
             "q8_0, q4_0, q4_1, q5_0, q5_1, f16)"},
    {.name = "plan_out", .flag = "plan-out", .type = NPUC_OPT_STR, .flags = NPUC_OPT_PATH, .metavar = "FILE",
     .section = "Budget",
     .help = "write the chosen scheme per tensor and the size/error curve as JSON"},
    {.name = "budget_cache", .flag = "budget-cache", .type = NPUC_OPT_STR, .flags = NPUC_OPT_PATH,
     .metavar = "FILE", .section = "Budget",
     .help = "reuse the measurements stored in FILE and add this run's (created when\n"
             "missing): another budget on the same model measures nothing again"},
    {.name = "plan", .flag = "plan", .type = NPUC_OPT_STR, .flags = NPUC_OPT_PATH, .metavar = "FILE",
     .section = "Budget",
     .help = "apply the schemes of a --plan-out file without measuring (same model\n"
             "and selection flags)"},
    {.name = "quantize_all", .flag = "quantize-all", .type = NPUC_OPT_BOOL, .section = "Selection",
     .help = "below 8 bits, also take the first and last weight layers to\n"
             "the low width (default: they stay at 8 bits)"},
    {.name = "fake_quant", .flag = "fake-quant", .type = NPUC_OPT_BOOL, .section = "Output",
     .help = "write quantized-then-dequantized floats in the source dtype"},
    {.name = "pattern", .flag = "pattern", .type = NPUC_OPT_STR, .metavar = "N:M", .section = "Scheme",
     .help = "N:M-sparsify first (2:4: keep 2 of every 4 weights along the input\n"
             "channels), quantize the kept values, store them with their\n"
             "positions (encoding nm_sparse, docs/sparsity.md)",
     .bad = "expected N:M with 1 <= N < M <= 16", .check = npuc__check_nm},
    {.name = "export_encodings", .flag = "export-encodings", .type = NPUC_OPT_STR, .flags = NPUC_OPT_PATH,
     .metavar = "FILE", .section = "Output",
     .help = "also write AIMET encodings JSON: param_encodings of every quantized\n"
             "tensor (docs/aimet.md)"},
    {.name = "encodings_version", .flag = "encodings-version", .type = NPUC_OPT_STR, .choices = ENC_VERSIONS,
     .noun = "version", .dflt = "1.0.0", .metavar = "V", .section = "Output", .bad = "use 0.6.1 or 1.0.0",
     .help = "AIMET encodings version: 0.6.1 or 1.0.0 (default)"},
    {.name = "activation_encodings", .flag = "activation-encodings", .type = NPUC_OPT_STR, .flags = NPUC_OPT_PATH,
     .metavar = "CALIB", .section = "Output",
     .help = "merge the activations of an 'npuc calibrate' JSON into the\n"
             "--export-encodings file"},
};

static const npuc_pass_section SECTIONS[] = {
    {"Scheme", NULL, 0},
    {"Calibration", "Tensors without calibration data are rounded to nearest, with a note\n"
                    "(an error under --strict).", 0},
    {"Selection", "A pattern that matches no tensor is an error.  A bias, norm or BatchNorm tensor\n"
                  "is never quantized because a pattern matches it (its line says so): only an\n"
                  "--include '^NAME$' naming it exactly asks.", 1},
    {"Budget", "Tensors pinned by --layer-bits, --layer-group-size or the 8-bit edge rule\n"
               "keep their scheme; an unreachable budget exits 2 naming the least size.", 0},
    {"Output", NULL, 0},
    {NULL, NULL, 0},
};

static const char *const OVERRIDES[] = {"bits", "group_size", "skip", NULL};
static const char *const BASE[] = {NULL};

static const npuc_pass_echo ECHO[] = {
    {"bits", "bits"}, {"symmetric", NULL}, {"scheme", NULL}, {"granularity", NULL}, {"group_size", NULL},
    {"axis", NULL}, {"range", NULL}, {"include", "include"}, {"exclude", "exclude"}, {"layer_bits", "layer_bits"},
    {"layer_group_size", "layer_group_size"}, {"quantize_all", "quantize_all"}, {"fake_quant", "fake_quant"},
    {"pattern", NULL}, {NULL, NULL},
};

/* The scheme the options choose (everything but the lists). */
static npuc_status quant_params(npuc_ctx *ctx, const npuc_pass_optset *s, npuc_quant_params *p) {
    const recipe_opt *v;
    *p = npuc_quant_params_defaults();
    p->bits = (int)npuc__pass_int(s, "bits");
    /* The later of --symmetric / --asymmetric wins (a recipe that sets
     * both the same way is refused by validate). */
    if ((v = npuc__pass_later(s, "symmetric", "asymmetric")))
        p->symmetric = strcmp(v->key->name, "symmetric") == 0 ? v->b : !v->b;
    if (npuc__pass_bool(s, "per_tensor")) p->gran = NPUC_GRAN_TENSOR;
    if ((v = npuc__pass_get(s, "group_size"))) {
        p->gran = NPUC_GRAN_GROUP;
        p->group_size = (uint32_t)v->i;
    }
    if ((v = npuc__pass_get(s, "axis"))) p->axis = (int)v->i;
    if ((v = npuc__pass_get(s, "scale_dtype")) && npuc_dtype_parse(v->s, &p->scale_dtype) != 0)
        return npuc_fail(ctx, NPUC_ERR_ARG, "scale dtype '%s': use f32, f16 or bf16", v->s);
    if ((v = npuc__pass_get(s, "grid")) && strcmp(v->s, "full") == 0) p->grid = NPUC_GRID_FULL;
    if ((v = npuc__pass_get(s, "range"))) return npuc_range_parse(ctx, v->s, &p->range);
    return NPUC_OK;
}

static npuc_status validate(npuc_ctx *ctx, const npuc_pass_optset *s) {
    if (npuc__pass_is_cli(s)) {
        size_t ngran = 0;
        for (size_t i = 0; i < s->nlog; i++) ngran += s->pass->options[s->log[i]].group == GRAN;
        if (ngran > 1) return npuc__pass_fail(ctx, s, NULL, "choose one of --per-channel, --per-tensor, --group-size");
        if (npuc__pass_get(s, "symmetric") && npuc__pass_get(s, "asymmetric"))
            return npuc__pass_fail(ctx, s, NULL, "choose one of --symmetric, --asymmetric");
        return NPUC_OK;
    }
    const recipe_opt *pc = npuc__pass_get(s, "per_channel"), *pt = npuc__pass_get(s, "per_tensor"),
                     *gs = npuc__pass_get(s, "group_size"), *sy = npuc__pass_get(s, "symmetric"),
                     *as = npuc__pass_get(s, "asymmetric");
    if (pc && !pc->b)
        return npuc__pass_fail(ctx, s, pc, "'per_channel: false' chooses nothing: set per_tensor or group_size instead");
    if (pt && !pt->b)
        return npuc__pass_fail(ctx, s, pt, "'per_tensor: false' chooses nothing: leave it out (per channel is the default)");
    if ((pc != NULL) + (pt != NULL) + (gs != NULL) > 1) {
        const recipe_opt *second = gs ? gs : pt;
        if (pc && pt && !gs) second = pc->mark.line > pt->mark.line ? pc : pt;
        return npuc__pass_fail(ctx, s, second, "choose one of per_channel, per_tensor, group_size");
    }
    if (sy && as && sy->b == as->b)
        return npuc__pass_fail(ctx, s, as, "'symmetric' and 'asymmetric' contradict each other");
    /* A plan is applied as it is: a budget beside it has nothing to choose
     * (npuc batch --target-size on such a recipe is refused here too). */
    const recipe_opt *pl = npuc__pass_get(s, "plan");
    if (pl && (npuc__pass_get(s, "target_size") || npuc__pass_get(s, "target_bpw") || npuc__pass_get(s, "plan_out")))
        return npuc__pass_fail(ctx, s, pl, "'plan' applies a plan: without target_size, target_bpw or plan_out");
    return NPUC_OK;
}

static void tag(const npuc_pass_optset *s, char *buf, size_t n) {
    snprintf(buf, n, "%s%d", npuc__pass_bool(s, "fake_quant") ? "fq" : "q", (int)npuc__pass_int(s, "bits"));
}

static int echo_value(const npuc_pass_optset *s, const char *name, npuc_pass_value *v) {
    npuc_ctx *ctx;
    npuc_quant_params p;
    if (strcmp(name, "pattern") == 0) {
        const recipe_opt *o = npuc__pass_get(s, "pattern");
        int n, m;
        v->type = NPUC_OPT_STR;
        v->null = !o || npuc_nm_parse(o->s, &n, &m) != 0;
        if (v->null) return 0;
        snprintf(v->s, sizeof v->s, "%d:%d", n, m);
        return 0;
    }
    if (npuc_ctx_new(&ctx) != NPUC_OK) return -1;
    npuc_status st = quant_params(ctx, s, &p);
    npuc_ctx_free(ctx);
    if (st != NPUC_OK) return -1;
    v->type = NPUC_OPT_INT;
    if (strcmp(name, "symmetric") == 0) {
        v->type = NPUC_OPT_BOOL;
        v->b = p.symmetric;
    } else if (strcmp(name, "scheme") == 0) {
        v->type = NPUC_OPT_STR;
        npuc_quant_scheme_name(&p, v->s, sizeof v->s);
    } else if (strcmp(name, "granularity") == 0) {
        v->type = NPUC_OPT_STR;
        snprintf(v->s, sizeof v->s, "%s",
                 p.gran == NPUC_GRAN_TENSOR ? "tensor" : p.gran == NPUC_GRAN_GROUP ? "group" : "channel");
    } else if (strcmp(name, "group_size") == 0) {
        v->i = (int)p.group_size;
    } else if (strcmp(name, "axis") == 0) {
        v->i = p.axis;
    } else if (strcmp(name, "range") == 0) {
        v->type = NPUC_OPT_STR;
        npuc_range_format(&p.range, v->s, sizeof v->s);
    } else {
        return 1;
    }
    return 0;
}

static npuc_status run(npuc_ctx *ctx, const npuc_pass_optset *s, npuc_model *m, const npuc__sink *to,
                       const npuc_pass_io *io, npuc_summary *sum) {
    npuc_quantize_opts o = npuc_quantize_opts_defaults();
    const npuc__strv *lb = npuc__pass_strv(s, "layer_bits"), *lg = npuc__pass_strv(s, "layer_group_size");
    const recipe_opt *v;
    npuc_status st = quant_params(ctx, s, &o.params);
    if (st != NPUC_OK) return st;
    o.quantize_all = npuc__pass_bool(s, "quantize_all");
    o.fake_quant = npuc__pass_bool(s, "fake_quant");
    if ((v = npuc__pass_get(s, "pattern")) && npuc_nm_parse(v->s, &o.pattern_n, &o.pattern_m) != 0)
        return npuc_fail(ctx, NPUC_ERR_ARG, "pattern '%s': not N:M", v->s);
    if ((v = npuc__pass_get(s, "method")) && strcmp(v->s, "gptq") == 0) o.method = NPUC_QMETHOD_GPTQ;
    o.damp = npuc__pass_num(s, "damp");
    o.act_order = npuc__pass_bool(s, "act_order");
    NPUC__PASS_SELECT(o, s);
    o.layer_bits = lb->v;
    o.nlayer_bits = lb->n;
    o.layer_group_size = lg->v;
    o.nlayer_group_size = lg->n;
    NPUC__PASS_IO(o, io);
    if ((v = npuc__pass_get(s, "target_size")) && parse_pct(v->s, &o.target_size_pct) != 0 &&
        npuc__budget_parse_size(v->s, &o.target_size) != 0)
        return npuc_fail(ctx, NPUC_ERR_ARG, "--target-size '%s': not a size", v->s);
    if (o.target_size_pct > 0 && io->pct_base > 0) { /* a recipe run: of its input file */
        const double t = floor(o.target_size_pct / 100.0 * (double)io->pct_base);
        o.target_size = t >= 1 ? (uint64_t)t : 1;
        o.target_size_pct = 0;
    }
    if (npuc__pass_get(s, "target_bpw")) o.target_bpw = npuc__pass_num(s, "target_bpw");
    if ((v = npuc__pass_get(s, "candidates"))) o.candidates = v->s;
    char *plan_out = NULL;
    if (npuc__pass_path(s, "plan_out", &plan_out) != 0) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    o.plan_out = plan_out;
    char *plan_in = NULL;
    if (npuc__pass_path(s, "plan", &plan_in) != 0) {
        free(plan_out);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    o.plan = plan_in;
    char *calib = NULL; /* relative to the recipe's folder in a recipe */
    if (npuc__pass_path(s, "calib", &calib) != 0) {
        free(plan_out);
        free(plan_in);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    o.calib = calib;
    char *bcache = NULL;
    if (npuc__pass_path(s, "budget_cache", &bcache) != 0) st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    o.budget_cache = bcache;
    const npuc__sink sink = npuc__sink_with(to, &o.write);
    /* AIMET encodings (src/export/aimet_hook.c): checked first, written from the published artifact. */
    char *enc = NULL, *act = NULL;
    if (npuc__pass_path(s, "export_encodings", &enc) != 0 || npuc__pass_path(s, "activation_encodings", &act) != 0)
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    if (st == NPUC_OK) st = npuc__aimet_hook_check(ctx, act, enc, o.write.overwrite);
    if (st == NPUC_OK) st = npuc__quantize_model_to(ctx, m, &sink, &o, sum);
    if (st == NPUC_OK)
        st = npuc__aimet_hook_write(ctx, act, sink.path, npuc__pass_str(s, "encodings_version"), enc,
                                    o.write.overwrite, sum);
    free(calib);
    free(bcache);
    free(plan_out);
    free(plan_in);
    free(enc);
    free(act);
    return st;
}

const npuc_pass npuc__pass_quantize = {
    .name = "quantize",
    .kind = NPUC_STEP_QUANTIZE,
    .summary = "quantize weights to 2..8-bit integers, report the error per tensor",
    .usage = "IN [-o OUT] [options]",
    .intro = "Quantizes every float weight of rank >= 2 (conv, linear, embedding, recurrent) and\n"
             "writes an artifact: codes under the tensor's name, <name>.scale and, asymmetric,\n"
             "<name>.zero_point, described in the 'npuc' metadata entry (docs/artifact.md).\n"
             "Biases, norms and BatchNorm statistics stay as they are.  IN may be the output of\n"
             "'npuc lowrank': its factors <name>.lr_a/.lr_b are quantized like any weight (the\n"
             "two factors of a layer are one layer for the first/last rule) and decompress\n"
             "multiplies the dequantized factors; other artifacts must be decompressed first.\n",
    .footer = "With -j below the core count, one more thread reads the next tensors ahead.\n"
              "\n"
              "Errors: NaN or Inf in a tensor to quantize, a bad bit width, axis or group size, or an\n"
              "existing OUT without -f exit 2 and write nothing.\n",
    .verb = "quantizing",
    .output_help = "the artifact (default: IN's name with .q<bits>); the format\n"
                   "follows OUT's extension, else IN's format",
    .json_help = "print an npuc.report/1 JSON document instead of the table",
    NPUC__PASS_TABLES,
    .flags = NPUC_PASS_WARNINGS, /* the layout guard's warnings (pass_guard.c) */
    .tag = tag,
    .validate = validate,
    .echo_value = echo_value,
    .run = run,
};
