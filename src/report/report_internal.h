/*
 * report_internal.h - shared helpers of the report writers (library-private).
 */
#ifndef NPUC_REPORT_INTERNAL_H
#define NPUC_REPORT_INTERNAL_H

#include <stdio.h>

#include "npuc_internal.h"

/* "1.50 MiB" style sizes. */
void npuc__fmt_size(uint64_t b, char *buf, size_t n);
/* "[8,3,3,3]". */
void npuc__fmt_shape(const npuc_tensor_record *r, char *buf, size_t n);
/* "41.2", "inf", "-inf", "nan". */
void npuc__fmt_db(double v, char *buf, size_t n);
/* Copies s for one-line display (control characters -> '?'), at most max_cols
 * code points, "..." when cut; returns the columns used. */
size_t npuc__fmt_name(const char *s, size_t max_cols, char *buf, size_t n);
/* Record indices in report order: file order, or worst SQNR first. */
size_t *npuc__report_order(const npuc_summary *s, int by_sqnr);
/* Lower-case dtype name ("f32"). */
const char *npuc__dtype_lower(npuc_dtype dt, char buf[16]);

npuc_status npuc__report_text(npuc_ctx *ctx, FILE *f, const npuc_summary *s, const npuc_report_info *info);
npuc_status npuc__report_csv(npuc_ctx *ctx, FILE *f, const npuc_summary *s, const npuc_report_info *info);
npuc_status npuc__report_json(npuc_ctx *ctx, FILE *f, const npuc_summary *s, const npuc_report_info *info);

#endif
