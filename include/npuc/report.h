/*
 * npuc/report.h - writing what a pass did (an npuc_summary, record.h) for a
 * terminal, a script or a reviewer.
 *
 * One report model, several writers: the aligned text table (and the
 * one-line-per-tensor form passes print while they work), CSV, JSON (schema
 * "npuc.report/1", docs/report.md), Markdown and self-contained HTML.  Every
 * pass's --report FILE and --json go through here, so all passes produce the
 * same document.
 *
 *     npuc_report_info info = npuc_report_info_defaults();
 *     info.command_line = "npuc quantize --bits 8 in.safetensors -o out.safetensors";
 *     info.inputs = (const char *[]){"in.safetensors"}; info.ninputs = 1;
 *     info.output = "out.safetensors";
 *     npuc_report_write(ctx, stdout, NPUC_REPORT_TEXT, &summary, &info);
 *
 * The writers write to a FILE* the caller owns; they never print elsewhere.
 */
#ifndef NPUC_REPORT_H
#define NPUC_REPORT_H

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
int npuc_report_format_parse(const char *name, npuc_report_format *out);
npuc_report_format npuc_report_format_from_path(const char *path);

/* Everything about the run that is not per tensor.  All pointers are
 * borrowed; NULL/0 fields are omitted from the output. */
typedef struct npuc_report_info {
    const char *command_line;      /* the exact command */
    const char *const *inputs;     /* input files (sizes and SHA-256 are computed) */
    size_t ninputs;
    const char *output;            /* the artifact written, if any */
    const char *params_json;       /* a JSON object: every parameter of every pass */
    int threads;                   /* worker threads used */
    int timestamp;                 /* 1: record the UTC time of writing */
    int sort_by_sqnr;              /* text/md: worst layers first */
    int worst_k;                   /* md/html: size of the worst-layers table (default 10) */
    double warn_sqnr_db;           /* warn below this SQNR (default 20 dB); NaN: never */
} npuc_report_info;

npuc_report_info npuc_report_info_defaults(void);

/* The line a pass prints for record i of n while it works, without a
 * newline, into buf (n bytes); namew is the column width for names:
 *   "[ 3/21] features.3.weight  [16,8,3,3]  f32 -> int4/ch  4.50 KiB -> 640 B  sqnr=20.0 dB" */
void npuc_report_line(const npuc_tensor_record *r, size_t i, size_t n, int namew, char *buf,
                      size_t bufsize);
/* The one-line totals ("total: 21 tensors, 4 quantized ..."), no newline. */
void npuc_report_totals_line(const npuc_summary *s, char *buf, size_t bufsize);

/* Writes the whole report.  Fails with NPUC_ERR_IO when the stream does, or
 * NPUC_ERR_ARG for an unknown format; an input that cannot be hashed is
 * reported in the document, not as a failure. */
npuc_status npuc_report_write(npuc_ctx *ctx, FILE *f, npuc_report_format fmt, const npuc_summary *s,
                              const npuc_report_info *info);
/* Writes to path through a temporary file and rename, like artifacts. */
npuc_status npuc_report_write_file(npuc_ctx *ctx, const char *path, npuc_report_format fmt,
                                   const npuc_summary *s, const npuc_report_info *info);

#ifdef __cplusplus
}
#endif
#endif
