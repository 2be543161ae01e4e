/*
 * pass_gate.h - the quality gates of a run (library-private): what a pass
 * driver (npuc__drive_end) and a recipe run check before they publish an
 * output.
 *
 * The policy on the context (npuc_ctx_policy) carries three gates, NaN when
 * off:
 *   min_sqnr        the weighted SQNR of the transformed tensors (records with
 *                   an error, 10 log10(sum w^2 / sum e^2)) must reach it;
 *   min_layer_sqnr  every transformed tensor's SQNR must reach it;
 *   max_output_error  every tensor's relative output error over its
 *                   calibration data (record.h) must not exceed it; tensors
 *                   without calibration data are not judged.
 * A failed gate is NPUC_ERR_GATE: the caller discards the output but keeps
 * the summary, so the report is still written (CLI exit 3).
 *
 * Without either gate a result that is probably damaged (weighted SQNR under
 * NPUC_GATE_WARN_WEIGHTED_DB, or a tensor under NPUC_GATE_WARN_LAYER_DB) gets
 * a summary warning instead, unless the pass's error is its purpose
 * (NPUC_PASS_NO_SQNR_WARN: prune, sparsify, fold-bn), where a low SQNR says
 * nothing about damage.
 */
#ifndef NPUC_PASS_GATE_H
#define NPUC_PASS_GATE_H

#include <stddef.h>

#include "npuc_internal.h"

#define NPUC_GATE_WARN_WEIGHTED_DB 10.0
#define NPUC_GATE_WARN_LAYER_DB 0.0

/* Which records a check covers and how its messages name the run. */
typedef struct npuc__gate_scope {
    const char *input;  /* the input file, first in messages */
    const char *output; /* what is not published, or NULL */
    size_t step;        /* 0: every record; k: records whose extra "step" is k */
    const char *label;  /* "" or "step 2 (quantize): ", put before the figures */
    int warn;           /* add the low-quality warning when no gate is set */
} npuc__gate_scope;

/* Checks sum's records in scope against the gates of ctx's policy.  A
 * failed gate adds a summary warning naming the figure (and for the layer
 * gate the worst tensor) and returns NPUC_ERR_GATE with the same one-line
 * message in ctx; the weighted gate is checked first, the output gate last.  Without gates and
 * with sc->warn, adds the low-quality warning when it applies.  NaN SQNRs
 * (nothing to measure) pass; NPUC_ERR_NOMEM when a warning cannot be
 * added. */
npuc_status npuc__gate_check(npuc_ctx *ctx, npuc_summary *sum, const npuc__gate_scope *sc);

/* 1 when ctx's policy sets a gate. */
int npuc__gate_any(const npuc_ctx *ctx);

#endif
