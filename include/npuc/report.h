/*
 * npuc/report.h - writing what a pass did (an npuc_summary, record.h) for a
 * terminal, a script or a reviewer.
 *
 * One report model, five writers; docs/report.md describes each document:
 *   TEXT  a header of '#' lines, the aligned table (worst SQNR first with
 *         sort_by_sqnr), the warnings, the totals last
 *   CSV   one row per tensor after a header row, numbers unformatted
 *   JSON  schema "npuc.report/1" (docs/report.md, docs/report.schema.json);
 *         NaN and infinities as the strings "nan", "inf", "-inf"
 *   MD    summary table, warnings and the worst-K table, for a pull request
 *   HTML  one self-contained file (inline CSS and SVG, no network): summary,
 *         SQNR and bytes per layer, weight-vs-error histograms of the worst K
 *         layers, a sortable table
 * Every pass's --report FILE and --json go through here, so all passes
 * produce the same documents.  Every document also carries warnings derived
 * from the records (first/last weight layer below 8 bits, a factored tensor
 * that saves nothing, tensors below warn_sqnr_db) besides the summary's own.
 *
 * Example (compiled by tests/cli/c_api.sh):
 *     npuc_report_info info = npuc_report_info_defaults();
 *     info.command_line = "npuc quantize --bits 8 in.safetensors -o out.safetensors";
 *     info.inputs = (const char *[]){"in.safetensors"}; info.ninputs = 1;
 *     info.output = "out.safetensors";
 *     npuc_report_write(ctx, stdout, NPUC_REPORT_TEXT, &summary, &info);
 *
 * A JSON report can serve as the baseline of a later run
 * (npuc_report_baseline_check): CI for a model zoo fails when a layer's error
 * or size grew by more than a given percentage.
 *
 * The writers write to a FILE* the caller owns; they never print elsewhere.
 */
#ifndef NPUC_REPORT_H
#define NPUC_REPORT_H

#include "api.h"

#include <stddef.h>
#include <stdio.h>
#include "record.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Values are pinned. */
typedef enum npuc_report_format {
    NPUC_REPORT_TEXT = 0,
    NPUC_REPORT_CSV = 1,
    NPUC_REPORT_JSON = 2,
    NPUC_REPORT_MD = 3,
    NPUC_REPORT_HTML = 4
} npuc_report_format;

/* From a name ("text", "csv", "json", "md", "html") or a path's extension
 * (.txt/.csv/.json/.md/.html; anything else is text).  Returns 0, or -1 for
 * an unknown name. */
NPUC_API int npuc_report_format_parse(const char *name, npuc_report_format *out);
/* The format path's extension names, NPUC_REPORT_TEXT for any other. */
NPUC_API npuc_report_format npuc_report_format_from_path(const char *path);

/* Everything about the run that is not per tensor.  All pointers are
 * borrowed; NULL/0 fields are omitted from the output. */
typedef struct npuc_report_info {
    const char *command_line;      /* the exact command */
    const char *const *inputs;     /* input files (sizes and SHA-256 are computed) */
    size_t ninputs;
    const char *output;            /* the artifact written, if any */
    const char *params_json;       /* a JSON object: every parameter of every pass */
    int threads;                   /* worker threads used */
    int timestamp;                 /* 1: record the UTC time of writing (SOURCE_DATE_EPOCH,
                                      when set, stands in for the clock) */
    int sort_by_sqnr;              /* text/md: worst layers first */
    int worst_k;                   /* md/html: size of the worst-layers table (default 10) */
    double warn_sqnr_db;           /* warn below this SQNR (default 20 dB); NaN: never */
} npuc_report_info;

NPUC_API npuc_report_info npuc_report_info_defaults(void);

/* The line a pass prints for record i of n while it works, without a
 * newline, into buf (n bytes); namew is the column width for names:
 *   "[ 3/21] features.3.weight  [16,8,3,3]  f32 -> int4/ch  4.50 KiB -> 640 B  sqnr=20.0 dB"
 * followed by " out=0.0123" when the record has an output error (record.h). */
NPUC_API void npuc_report_line(const npuc_tensor_record *r, size_t i, size_t n, int namew, char *buf,
                      size_t bufsize);
/* The one-line totals ("total: 21 tensors, 4 quantized ..."), no newline;
 * "; output error=E (max M, N tensors)" at the end when records have one. */
NPUC_API void npuc_report_totals_line(const npuc_summary *s, char *buf, size_t bufsize);

/* Writes the whole report.  Fails with NPUC_ERR_IO when the stream does, or
 * NPUC_ERR_ARG for an unknown format; an input that cannot be hashed is
 * reported in the document, not as a failure. */
NPUC_API npuc_status npuc_report_write(npuc_ctx *ctx, FILE *f, npuc_report_format fmt, const npuc_summary *s,
                              const npuc_report_info *info);
/* Writes to path through a temporary file and rename, like artifacts.
 * Errors: NPUC_ERR_IO naming the path (nothing left there), NPUC_ERR_NOMEM. */
NPUC_API npuc_status npuc_report_write_file(npuc_ctx *ctx, const char *path, npuc_report_format fmt,
                                   const npuc_summary *s, const npuc_report_info *info);

/* ------------------------------------------------------------- baselines */

/* Values are pinned. */
typedef enum npuc_regress_kind {
    NPUC_REGRESS_ERROR = 0,   /* the error grew */
    NPUC_REGRESS_SIZE = 1     /* the bytes after compression grew */
} npuc_regress_kind;

typedef struct npuc_regression {
    char *name;               /* the tensor, or NULL for the totals; owned */
    npuc_regress_kind kind;
    double before, after;     /* ERROR: MSE (totals: weighted SQNR in dB); SIZE: bytes after */
    char text[400];           /* one line for people, e.g.
                                 "'fc.weight': MSE 1.2e-05 -> 4.9e-05 (+308%), SQNR 24.1 -> 18.0 dB" */
} npuc_regression;

typedef struct npuc_baseline_result {
    npuc_regression *items;   /* in the current summary's record order, totals last */
    size_t n;
    size_t matched;           /* tensors in both, by name */
    size_t only_baseline;     /* tensors the baseline has and the summary does not */
    size_t only_current;      /* tensors new since the baseline */
} npuc_baseline_result;

/* Compares s with a previous "npuc.report/1" JSON report at baseline_path.
 * With p = max_regress_pct / 100 (>= 0), a tensor in both regressed when
 *   its MSE grew:   mse_now > mse_then * (1 + p)  (an exact tensor, error
 *                   null, counts as MSE 0: any error now is a regression; for
 *                   the same original this is an SQNR drop of more than
 *                   10 log10(1 + p) dB, 0.21 dB at 5 %), or a NaN MSE now;
 *   its size grew:  bytes_after_now > bytes_after_then * (1 + p);
 * and the totals regressed when the weighted SQNR dropped by more than
 * 10 log10(1 + p) dB or the total bytes after grew by more than p.  Tensors
 * in only one of the two are counted, not regressions.  An identical rerun
 * has no regression.  Errors: NPUC_ERR_IO / NPUC_ERR_NOT_FOUND when the file
 * cannot be read, NPUC_ERR_FORMAT when it is not an npuc.report/1 document,
 * NPUC_ERR_ARG for a negative percentage.  On success free *out with
 * npuc_baseline_result_free. */
NPUC_API npuc_status npuc_report_baseline_check(npuc_ctx *ctx, const char *baseline_path, const npuc_summary *s,
                                       double max_regress_pct, npuc_baseline_result *out);
/* Frees what r holds (NULL is a no-op). */
NPUC_API void npuc_baseline_result_free(npuc_baseline_result *r);

/* Warnings grouped for reading: lines that are the same text but for the
 * first name they quote ('...', a tensor) become one line, that text with
 * the name as '*' followed by " (N tensors: 'a', 'b', ...)", at the place
 * of the first; other lines are copied.  Reports group their warnings this
 * way, and the CLI its stderr lines.  Returns a new array of *out_n owned
 * lines (free with npuc_warnings_free), or NULL when out of memory. */
NPUC_API char **npuc_warnings_group(const char *const *w, size_t n, size_t *out_n);
NPUC_API void npuc_warnings_free(char **w, size_t n);

#ifdef __cplusplus
}
#endif
#endif
