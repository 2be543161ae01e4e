/*
 * report_internal.h - shared helpers of the report writers (library-private).
 *
 * npuc_report_write() first gathers everything a document needs beyond the
 * summary into an npuc__report_doc (report_header.c: input sizes and SHA-256,
 * the commit, the UTC time; report_warn.c: the warnings, the summary's own
 * plus those derived from the records), then hands it to one writer.  So all
 * five formats say the same things.
 */
#ifndef NPUC_REPORT_INTERNAL_H
#define NPUC_REPORT_INTERNAL_H

#include <stdio.h>

#include "npuc_internal.h"

typedef struct npuc__report_input {
    const char *path;
    int ok;                 /* size and sha256 are known */
    uint64_t size;
    char sha256[65];        /* lower-case hex */
} npuc__report_input;

typedef struct npuc__report_doc {
    npuc__report_input *inputs;
    size_t ninputs;
    const char *commit;     /* short git commit of the build, or NULL */
    char timestamp[32];     /* "2024-05-01T12:00:00Z", or "" when not recorded */
    char **warnings;        /* every warning, owned */
    size_t nwarnings;
    size_t *order;          /* record indices in report order (file order or worst SQNR first) */
    size_t *worst;          /* records with an error figure, worst SQNR first */
    size_t nworst;          /* how many of them (all, not only worst_k) */
} npuc__report_doc;

npuc_status npuc__report_doc_init(npuc_ctx *ctx, const npuc_summary *s, const npuc_report_info *info,
                                  npuc__report_doc *d);
void npuc__report_doc_free(npuc__report_doc *d);
/* Replaces d's warnings by npuc_warnings_group's lines (report_warn.c). */
npuc_status npuc__report_group_warnings(npuc__report_doc *d);
/* Adds to d the warnings derived from the records (report_warn.c). */
npuc_status npuc__report_derive_warnings(const npuc_summary *s, const npuc_report_info *info,
                                         npuc__report_doc *d);

/* "1.50 MiB" style sizes. */
void npuc__fmt_size(uint64_t b, char *buf, size_t n);
/* "[8,3,3,3]". */
void npuc__fmt_shape(const npuc_tensor_record *r, char *buf, size_t n);
/* "41.2", "inf", "-inf", "nan". */
void npuc__fmt_db(double v, char *buf, size_t n);
/* "%.4g" for finite numbers, else "inf", "-inf", "nan". */
void npuc__fmt_g(double v, char *buf, size_t n);
/* Copies s for one-line display (control characters -> '?'), at most max_cols
 * code points, "..." when cut; returns the columns used. */
size_t npuc__fmt_name(const char *s, size_t max_cols, char *buf, size_t n);
/* Sorts the record indices idx[0..n) worst SQNR first (npuc__record_sqnr,
 * ties in index order); reentrant.  0, or -1 when out of memory. */
int npuc__sort_by_sqnr(const npuc_summary *s, size_t *idx, size_t n);
/* Record indices in report order: file order, or worst SQNR first. */
size_t *npuc__report_order(const npuc_summary *s, int by_sqnr);
/* Lower-case dtype name ("f32"). */
const char *npuc__dtype_lower(npuc_dtype dt, char buf[16]);
/* bytes_before / bytes_after, or NaN when nothing is left. */
double npuc__ratio(uint64_t before, uint64_t after);
/* The SQNR used for ordering and warnings: +Inf without an error figure. */
double npuc__record_sqnr(const npuc_tensor_record *r);

npuc_status npuc__report_text(npuc_ctx *ctx, FILE *f, const npuc_summary *s, const npuc_report_info *info,
                              const npuc__report_doc *d);
npuc_status npuc__report_csv(npuc_ctx *ctx, FILE *f, const npuc_summary *s, const npuc_report_info *info,
                             const npuc__report_doc *d);
npuc_status npuc__report_json(npuc_ctx *ctx, FILE *f, const npuc_summary *s, const npuc_report_info *info,
                              const npuc__report_doc *d);
npuc_status npuc__report_md(npuc_ctx *ctx, FILE *f, const npuc_summary *s, const npuc_report_info *info,
                            const npuc__report_doc *d);
npuc_status npuc__report_html(npuc_ctx *ctx, FILE *f, const npuc_summary *s, const npuc_report_info *info,
                              const npuc__report_doc *d);

#endif
