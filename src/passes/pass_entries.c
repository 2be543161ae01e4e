/*
 * pass_entries.c - the public model-level entry points of the passes
 * (npuc_quantize_model, ...): each hands its pass a file sink at `out` with
 * the options' write settings.  The passes themselves take any sink
 * (pass_sinks.h), which is how `npuc run` streams one step into the next.
 */
#include "passes/pass_sinks.h"

npuc_status npuc_bnfold_model(npuc_ctx *ctx, npuc_model *m, npuc_bnfold_plan *plan, const npuc_bnfold_params *p,
                              const char *out, npuc_summary *sum) {
    const npuc__sink sink = {out, &p->write, NULL, NULL};
    return npuc__bnfold_model_to(ctx, m, plan, p, &sink, sum);
}

npuc_status npuc_prune_model(npuc_ctx *ctx, npuc_model *m, const char *out, const npuc_prune_opts *o,
                             npuc_summary *sum) {
    const npuc__sink sink = {out, &o->write, NULL, NULL};
    return npuc__prune_model_to(ctx, m, &sink, o, sum);
}

npuc_status npuc_sparsify_model(npuc_ctx *ctx, npuc_model *m, const char *out, const npuc_sparsify_opts *o,
                                npuc_summary *sum) {
    const npuc__sink sink = {out, &o->write, NULL, NULL};
    return npuc__sparsify_model_to(ctx, m, &sink, o, sum);
}

npuc_status npuc_lowrank_model(npuc_ctx *ctx, npuc_model *m, const char *out, const npuc_lowrank_opts *o,
                               npuc_summary *sum) {
    const npuc__sink sink = {out, &o->write, NULL, NULL};
    return npuc__lowrank_model_to(ctx, m, &sink, o, sum);
}

npuc_status npuc_quantize_model(npuc_ctx *ctx, npuc_model *m, const char *out, const npuc_quantize_opts *o,
                                npuc_summary *sum) {
    const npuc__sink sink = {out, &o->write, NULL, NULL};
    return npuc__quantize_model_to(ctx, m, &sink, o, sum);
}
