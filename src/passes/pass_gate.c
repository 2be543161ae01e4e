/*
 * pass_gate.c - the quality gates and the low-quality warning (pass_gate.h).
 *
 * The figures are the ones the report prints: a record's err.sqnr_db, and
 * the weighted SQNR over the records with an error (npuc_summary_finish's
 * weighted_sqnr_db when the scope is the whole summary).  A gate compares
 * with `<`, so a result exactly at the threshold passes.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "passes/pass_gate.h"

static void fmt_db(double v, char *buf, size_t n) {
    if (isnan(v)) snprintf(buf, n, "nan");
    else if (isinf(v)) snprintf(buf, n, "%sinf", v < 0 ? "-" : "");
    else snprintf(buf, n, "%.2f", v);
}

int npuc__gate_any(const npuc_ctx *ctx) {
    const npuc_policy *p = npuc_ctx_policy(ctx);
    return !isnan(p->min_sqnr) || !isnan(p->min_layer_sqnr) || !isnan(p->max_output_error);
}

static int in_scope(const npuc_tensor_record *r, const npuc__gate_scope *sc) {
    return r->has_error && (!sc->step || (size_t)npuc_record_get(r, "step", 0) == sc->step);
}

/* What the scope measured: the weighted SQNR (NaN when no record has an
 * error), the worst tensor and how many tensors fall below `below`. */
typedef struct figures {
    double weighted;
    const npuc_tensor_record *worst;
    size_t nbelow;
} figures;

static void measure(const npuc_summary *sum, const npuc__gate_scope *sc, double below, figures *f) {
    double sw2 = 0, se2 = 0;
    int any = 0;
    memset(f, 0, sizeof *f);
    for (size_t i = 0; i < sum->nrecords; i++) {
        const npuc_tensor_record *r = &sum->records[i];
        if (!in_scope(r, sc)) continue;
        any = 1;
        sw2 += r->err.sum_w2;
        se2 += r->err.sum_e2;
        const double s = r->err.sqnr_db;
        if (isnan(s)) continue;
        if (!f->worst || s < f->worst->err.sqnr_db) f->worst = r;
        if (s < below) f->nbelow++;
    }
    f->weighted = !any ? NAN : se2 == 0 ? INFINITY : sw2 == 0 ? -INFINITY : 10.0 * log10(sw2 / se2);
}

static npuc_status gate_fail(npuc_ctx *ctx, npuc_summary *sum, const npuc__gate_scope *sc, const char *what) {
    char out[600] = "";
    if (sc->output) snprintf(out, sizeof out, "; %s not written", sc->output);
    if (npuc_summary_warn(sum, "quality gate failed: %s%s", sc->label, what) != NPUC_OK)
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    return npuc_fail(ctx, NPUC_ERR_GATE, "%s: quality gate failed: %s%s%s", sc->input, sc->label, what, out);
}

/* --max-output-error: every tensor in scope with an output error (a
 * calibration file had its inputs) must stay at or below the limit; tensors
 * without calibration data are not judged (item 6 of the calibration
 * design: a missing entry never fails a run unless --strict, which the
 * passes check before writing).  With nothing measured in the whole run the
 * gate checks nothing, and a warning says so. */
static npuc_status output_gate(npuc_ctx *ctx, npuc_summary *sum, const npuc__gate_scope *sc, double limit) {
    const npuc_tensor_record *worst = NULL;
    size_t nover = 0, nmeasured = 0;
    for (size_t i = 0; i < sum->nrecords; i++) {
        const npuc_tensor_record *r = &sum->records[i];
        if (!r->has_out_error || (sc->step && (size_t)npuc_record_get(r, "step", 0) != sc->step)) continue;
        nmeasured++;
        if (!(r->out_rel_error <= limit)) nover++;
        if (!worst || !(r->out_rel_error <= worst->out_rel_error)) worst = r;
    }
    if (!nmeasured) {
        if (sc->step) return NPUC_OK;
        return npuc_summary_warn(sum, "%s--max-output-error %g checked nothing: no tensor has calibration data "
                                      "(add --calib FILE naming the layers)", sc->label, limit) == NPUC_OK
                   ? NPUC_OK
                   : npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    if (!nover) return NPUC_OK;
    char what[512];
    snprintf(what, sizeof what, "tensor '%.200s' output error %.4g > --max-output-error %g (%zu tensor%s above)",
             worst->name, worst->out_rel_error, limit, nover, nover == 1 ? "" : "s");
    return gate_fail(ctx, sum, sc, what);
}

npuc_status npuc__gate_check(npuc_ctx *ctx, npuc_summary *sum, const npuc__gate_scope *sc) {
    const npuc_policy *p = npuc_ctx_policy(ctx);
    char a[32], b[32], what[512];
    figures f;
    if (!npuc__gate_any(ctx)) {
        if (!sc->warn) return NPUC_OK;
        measure(sum, sc, NPUC_GATE_WARN_LAYER_DB, &f);
        const int weighted = f.weighted < NPUC_GATE_WARN_WEIGHTED_DB;
        if (!weighted && !f.nbelow) return NPUC_OK;
        fmt_db(f.weighted, a, sizeof a);
        fmt_db(f.worst ? f.worst->err.sqnr_db : NAN, b, sizeof b);
        if (weighted)
            snprintf(what, sizeof what, "weighted SQNR %s dB is below %g dB", a, NPUC_GATE_WARN_WEIGHTED_DB);
        else
            snprintf(what, sizeof what, "%zu tensor%s below %g dB (worst '%.200s' %s dB)", f.nbelow,
                     f.nbelow == 1 ? " is" : "s are", NPUC_GATE_WARN_LAYER_DB, f.worst->name, b);
        return npuc_summary_warn(sum, "%s%s: the result is probably damaged (use more bits, or --min-sqnr DB "
                                      "to refuse it)", sc->label, what) == NPUC_OK
                   ? NPUC_OK
                   : npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    measure(sum, sc, isnan(p->min_layer_sqnr) ? -INFINITY : p->min_layer_sqnr, &f);
    if (!isnan(p->min_sqnr) && f.weighted < p->min_sqnr) {
        fmt_db(f.weighted, a, sizeof a);
        snprintf(what, sizeof what, "weighted SQNR %s dB < --min-sqnr %g dB", a, p->min_sqnr);
        return gate_fail(ctx, sum, sc, what);
    }
    if (!isnan(p->min_layer_sqnr) && f.nbelow) {
        fmt_db(f.worst->err.sqnr_db, a, sizeof a);
        snprintf(what, sizeof what, "tensor '%.200s' SQNR %s dB < --min-layer-sqnr %g dB (%zu tensor%s below)",
                 f.worst->name, a, p->min_layer_sqnr, f.nbelow, f.nbelow == 1 ? "" : "s");
        return gate_fail(ctx, sum, sc, what);
    }
    if (!isnan(p->max_output_error)) return output_gate(ctx, sum, sc, p->max_output_error);
    return NPUC_OK;
}
