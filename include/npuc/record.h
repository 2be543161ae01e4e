/*
 * npuc/record.h - what a pass did to each tensor, in one shape for every
 * pass (quantize, prune, sparsify, lowrank, fold-bn, recipes).
 *
 * A pass driver fills an npuc_summary: one npuc_tensor_record per input
 * tensor (plus records for tensors it created), each with the action taken,
 * a short scheme name, bytes and parameters before/after, the error it cost
 * (npuc_error_stats, when values changed) and a few pass-specific numbers as
 * named extras ("bits", "sparsity", "rank", "energy", ...).  Reports, the CLI
 * tables and the JSON output are all written from this one model, so a new
 * pass gets every report format for free.
 *
 * Example (compiled by tests/cli/c_api.sh):
 *     npuc_summary s;
 *     npuc_summary_init(&s, "quantize", n);
 *     npuc_tensor_record *r = &s.records[i];
 *     npuc_record_set(r, "bits", 8);
 *     npuc_summary_finish(&s);       // totals
 *     npuc_summary_free(&s);
 *
 * Extras are documented by each pass (docs/cli.md lists them); keys are at
 * most 23 bytes.
 */
#ifndef NPUC_RECORD_H
#define NPUC_RECORD_H

#include "api.h"

#include <stddef.h>
#include <stdint.h>
#include "dtype.h"
#include "metrics.h"
#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Values are pinned. */
typedef enum npuc_action {
    NPUC_ACTION_KEPT = 0,        /* copied unchanged */
    NPUC_ACTION_QUANTIZED = 1,
    NPUC_ACTION_PRUNED = 2,      /* values zeroed or channels removed */
    NPUC_ACTION_SPARSIFIED = 3,  /* N:M structured sparsity */
    NPUC_ACTION_FACTORED = 4,    /* low-rank factors */
    NPUC_ACTION_FOLDED = 5,      /* BatchNorm folded into it */
    NPUC_ACTION_REMOVED = 6,     /* dropped from the output (folded BatchNorm statistics) */
    NPUC_ACTION_CREATED = 7,     /* new in the output (a bias created by folding) */
    NPUC_ACTION_MODIFIED = 8,    /* values changed by a transform npuc cannot name (npuc report
                                    comparing two dense files, say a fine-tuned copy) */
    NPUC_ACTION_COUNT = 9
} npuc_action;

/* "kept", "quantized", "pruned", "sparsified", "factored", "folded", "removed", "created",
 * "modified" (static strings). */
NPUC_API const char *npuc_action_name(npuc_action a);

#define NPUC_RECORD_EXTRA_MAX 16

typedef struct npuc_record_extra {
    char key[24];
    double value;
} npuc_record_extra;

/* Where a tensor's error lives, for the report's weight-vs-error charts
 * (optional; npuc report fills it, see npuc_record_measure_hist).  The
 * original values' range [w_min, w_max] is cut into NPUC_HIST_BINS equal
 * bins: w_count[b] originals fall into bin b and e_rms[b] is the RMS error
 * of those values (0 for an empty bin), so a reviewer sees whether the error
 * sits in the bulk or in the tails (clipped outliers).  e_count is the
 * histogram of |error| over [0, e_max].  A value v falls into bin
 * min(floor((v - lo) / (hi - lo) * NPUC_HIST_BINS), NPUC_HIST_BINS - 1), bin 0
 * when hi == lo.  Only pairs of finite values are counted. */
#define NPUC_HIST_BINS 32

typedef struct npuc_tensor_hist {
    double w_min, w_max;
    uint64_t w_count[NPUC_HIST_BINS];
    double e_rms[NPUC_HIST_BINS];
    double e_max;
    uint64_t e_count[NPUC_HIST_BINS];
} npuc_tensor_hist;

typedef struct npuc_tensor_record {
    char *name;                  /* owned by the summary */
    npuc_dtype dtype;            /* source dtype */
    int rank;
    int64_t shape[NPUC_MAX_RANK];
    npuc_action action;
    char scheme[32];             /* "int8/ch", "uint4/g128", "2:4", "r=64", "bn", "-" */
    char note[128];              /* why kept, a fallback taken, a warning; "" if none */
    uint64_t bytes_before, bytes_after;
    uint64_t params_before, params_after;
    int has_error;               /* err is meaningful */
    npuc_error_stats err;
    size_t nextra;
    npuc_record_extra extra[NPUC_RECORD_EXTRA_MAX];
    npuc_tensor_hist *hist;      /* optional, owned by the summary; NULL when not measured */
    char compared[24];           /* what err measures (npuc report): "raw" (the tensor against its
                                    namesake), "function: conv+bn" (a folded layer against
                                    conv-then-BatchNorm of the original), "product of factors";
                                    "" when not set (a pass's own records) */
    /* The output error over calibration data (--calib, docs/calibration.md#output-error):
     * with D = W - W' viewed as [channels, K] in the weight's reduction order and X the
     * calibration rows [N, K], out_e2 = ||D X^T||^2 and out_y2 = ||W X^T||^2 (summed in F64;
     * from the stored Hessian H = X^T X as tr(D H D^T) when only W.hessian is given), and
     * out_rel_error = sqrt(out_e2 / out_y2).  has_out_error is 0 (and the figures 0) for a
     * tensor without calibration data: reports show it as absent, never as 0. */
    int has_out_error;
    double out_rel_error;
    double out_e2, out_y2;
} npuc_tensor_record;

typedef struct npuc_summary {
    char pass[24];               /* "quantize", "prune", ... or "run" for recipes */
    npuc_tensor_record *records;
    size_t nrecords;
    /* Totals, filled by npuc_summary_finish(). */
    uint64_t bytes_before, bytes_after;
    uint64_t params_before, params_after;
    size_t count[NPUC_ACTION_COUNT];
    double weighted_sqnr_db;     /* 10 log10(sum w^2 / sum e^2) over records with errors */
    double out_rel_error;        /* sqrt(sum out_e2 / sum out_y2) over records with an output
                                    error; NaN when none has one */
    double max_out_rel_error;    /* the largest out_rel_error; NaN when none */
    size_t n_out_error;          /* records with an output error */
    /* Warnings for the reviewer (one line each, owned). */
    char **warnings;
    size_t nwarnings;
    /* quantize under a budget: {"curve": [{bytes, distortion}...], "uniform":
     * [{scheme, bytes, distortion}...], "chosen": {bytes, distortion}} as JSON
     * text (bytes: the quantized tensors' payloads), for the HTML report's
     * chart (docs/budget.md); NULL otherwise.  Owned. */
    char *budget_json;
} npuc_summary;

/* Allocates n zeroed records (action KEPT, scheme "-").  Returns NPUC_ERR_NOMEM. */
NPUC_API npuc_status npuc_summary_init(npuc_summary *s, const char *pass, size_t n);
/* Appends one more zeroed record (for created tensors); returns it or NULL. */
NPUC_API npuc_tensor_record *npuc_summary_append(npuc_summary *s);
/* Fills a record's name (copied; owned by the summary), dtype, shape, bytes
 * and params from t.  NPUC_ERR_NOMEM. */
NPUC_API npuc_status npuc_record_from_tensor(npuc_tensor_record *r, const npuc_tensor_info *t);
/* Sets (or replaces) a named extra; silently ignores keys beyond the limit. */
NPUC_API void npuc_record_set(npuc_tensor_record *r, const char *key, double value);
/* The named extra, or dflt when absent. */
NPUC_API double npuc_record_get(const npuc_tensor_record *r, const char *key, double dflt);
/* Measures the histograms of approx against ref (n floats each) into r->hist,
 * allocating it when NULL; pairs with a non-finite value are skipped.
 * Returns NPUC_ERR_NOMEM (r->hist unchanged) when the allocation fails. */
NPUC_API npuc_status npuc_record_measure_hist(npuc_tensor_record *r, const float *ref, const float *approx,
                                     uint64_t n);
/* Adds a warning line (printf-style).  Returns NPUC_ERR_NOMEM on failure. */
NPUC_API npuc_status npuc_summary_warn(npuc_summary *s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Computes the totals from the records. */
NPUC_API void npuc_summary_finish(npuc_summary *s);
/* Frees records, names, histograms and warnings; the struct is zeroed; NULL is a no-op. */
NPUC_API void npuc_summary_free(npuc_summary *s);

#ifdef __cplusplus
}
#endif
#endif
