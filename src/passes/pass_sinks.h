/*
 * pass_sinks.h - the model-level passes with their output handed over as an
 * npuc__sink (pass_driver.h) instead of a path (library-private).
 *
 * Each public npuc_<pass>_model(ctx, m, out, opts, sum) is the call below
 * with the sink {out, &opts->write} (a file).  `npuc run` calls these
 * directly to hand a step the in-memory pipe that the next step reads
 * (pipeline/pipe.h), so no writer ever looks an output up by its path.
 * opts->write is ignored here: the sink carries the write options.
 */
#ifndef NPUC_PASS_SINKS_H
#define NPUC_PASS_SINKS_H

#include "npuc_internal.h"
#include "passes/pass_driver.h"

/* `to` with the write options of the pass's own options struct (which a
 * descriptor's run fills from npuc_pass_io.write). */
static inline npuc__sink npuc__sink_with(const npuc__sink *to, const npuc_write_opts *write) {
    npuc__sink s = *to;
    s.write = write;
    return s;
}

npuc_status npuc__quantize_model_to(npuc_ctx *ctx, npuc_model *m, const npuc__sink *to,
                                    const npuc_quantize_opts *o, npuc_summary *sum);
npuc_status npuc__prune_model_to(npuc_ctx *ctx, npuc_model *m, const npuc__sink *to, const npuc_prune_opts *o,
                                 npuc_summary *sum);
npuc_status npuc__sparsify_model_to(npuc_ctx *ctx, npuc_model *m, const npuc__sink *to,
                                    const npuc_sparsify_opts *o, npuc_summary *sum);
npuc_status npuc__lowrank_model_to(npuc_ctx *ctx, npuc_model *m, const npuc__sink *to,
                                   const npuc_lowrank_opts *o, npuc_summary *sum);
npuc_status npuc__bnfold_model_to(npuc_ctx *ctx, npuc_model *m, npuc_bnfold_plan *plan,
                                  const npuc_bnfold_params *p, const npuc__sink *to, npuc_summary *sum);

#endif
