/*
 * report_md.c - the Markdown report, sized for a pull-request comment: the
 * run (version, command, inputs with SHA-256), a one-row summary table, the
 * warnings, the worst-K table by SQNR, and the full table and the parameters
 * folded away in <details> blocks (GitHub and GitLab render them).
 *
 * Tensor names go into code spans (a fence longer than any backtick run in
 * the name, CommonMark 6.1) with '|' escaped for GFM tables; other text is
 * backslash-escaped, so no name can break the layout.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report/report_internal.h"

static size_t longest_run(const char *s, char c) {
    size_t best = 0, run = 0;
    for (; s && *s; s++) {
        run = *s == c ? run + 1 : 0;
        if (run > best) best = run;
    }
    return best;
}

/* A code span for a table cell. */
static void md_code(FILE *f, const char *s) {
    if (!s || !*s) { fputs("\"\"", f); return; }
    size_t n = longest_run(s, '`') + 1;
    for (size_t i = 0; i < n; i++) fputc('`', f);
    if (s[0] == '`' || s[strlen(s) - 1] == '`') fputc(' ', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '|') fputs("\\|", f);
        else if (*p < 0x20 || *p == 0x7f) fputc('?', f);
        else fputc(*p, f);
    }
    if (s[0] == '`' || s[strlen(s) - 1] == '`') fputc(' ', f);
    for (size_t i = 0; i < n; i++) fputc('`', f);
}

/* Plain text with the Markdown punctuation that could start emphasis, code,
 * links, HTML or a table cell escaped (text never starts a line here). */
static void md_text(FILE *f, const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; p && *p; p++) {
        if (*p && strchr("\\`*_{}[]<>|~", *p)) { fputc('\\', f); fputc(*p, f); }
        else if (*p < 0x20 || *p == 0x7f) fputc(' ', f);
        else fputc(*p, f);
    }
}

static void md_size(FILE *f, uint64_t b) {
    char buf[32];
    npuc__fmt_size(b, buf, sizeof buf);
    fputs(buf, f);
}

static void md_db(FILE *f, const npuc_tensor_record *r) {
    char buf[32];
    if (!r->has_error) { fputs("-", f); return; }
    npuc__fmt_db(r->err.sqnr_db, buf, sizeof buf);
    fputs(buf, f);
}

/* The output error cell: "-" when the tensor had no calibration data. */
static void md_out(FILE *f, const npuc_tensor_record *r) {
    char buf[32];
    if (!r->has_out_error) { fputs(" - |", f); return; }
    npuc__fmt_g(r->out_rel_error, buf, sizeof buf);
    fprintf(f, " %s |", buf);
}

static const char *scheme_of(const npuc_tensor_record *r) {
    return strcmp(r->scheme, "-") == 0 ? "-" : r->scheme;
}

/* What the error measures ("raw", "function: conv+bn"...), "-" when unset. */
static const char *compared_of(const npuc_tensor_record *r) {
    return r->compared[0] ? r->compared : "-";
}

npuc_status npuc__report_md(npuc_ctx *ctx, FILE *f, const npuc_summary *s, const npuc_report_info *info,
                            const npuc__report_doc *d) {
    (void)ctx;
    char buf[64], shape[160];
    fprintf(f, "## npuc report: %s\n\n", s->pass);
    if (info->command_line) {
        md_code(f, info->command_line);
        fputs("\n\n", f);
    }
    fputs("| | |\n|---|---|\n", f);
    fprintf(f, "| npuc | %s (commit %s) |\n", npuc_version(), d->commit ? d->commit : "unknown");
    for (size_t i = 0; i < d->ninputs; i++) {
        fputs("| input | ", f);
        md_code(f, d->inputs[i].path);
        if (d->inputs[i].ok)
            fprintf(f, ": %llu bytes, sha256 `%s` |\n", (unsigned long long)d->inputs[i].size, d->inputs[i].sha256);
        else
            fputs(": unreadable |\n", f);
    }
    if (info->output) {
        fputs("| output | ", f);
        md_code(f, info->output);
        fputs(" |\n", f);
    }
    if (info->threads) fprintf(f, "| threads | %d |\n", info->threads);
    if (d->timestamp[0]) fprintf(f, "| time (UTC) | %s |\n", d->timestamp);

    /* Summary: one row, a column per action that occurs. */
    fputs("\n### Summary\n\n| tensors |", f);
    for (int a = 0; a < NPUC_ACTION_COUNT; a++)
        if (s->count[a]) fprintf(f, " %s |", npuc_action_name((npuc_action)a));
    const int oe = s->n_out_error > 0; /* output error columns only with --calib */
    fputs(" bytes before | bytes after | ratio | weighted SQNR |", f);
    if (oe) fputs(" output error | worst output error |", f);
    fputs("\n|---:|", f);
    for (int a = 0; a < NPUC_ACTION_COUNT; a++)
        if (s->count[a]) fputs("---:|", f);
    fputs(oe ? "---:|---:|---:|---:|---:|---:|\n" : "---:|---:|---:|---:|\n", f);
    fprintf(f, "| %zu |", s->nrecords);
    for (int a = 0; a < NPUC_ACTION_COUNT; a++)
        if (s->count[a]) fprintf(f, " %zu |", s->count[a]);
    fputc(' ', f);
    md_size(f, s->bytes_before);
    fputs(" | ", f);
    md_size(f, s->bytes_after);
    double ratio = npuc__ratio(s->bytes_before, s->bytes_after);
    if (isnan(ratio)) fputs(" | - | ", f);
    else fprintf(f, " | %.2fx | ", ratio);
    if (isnan(s->weighted_sqnr_db)) fputs("- |", f);
    else {
        npuc__fmt_db(s->weighted_sqnr_db, buf, sizeof buf);
        fprintf(f, "%s dB |", buf);
    }
    if (oe) {
        char mx[32];
        npuc__fmt_g(s->out_rel_error, buf, sizeof buf);
        npuc__fmt_g(s->max_out_rel_error, mx, sizeof mx);
        fprintf(f, " %s | %s |", buf, mx);
    }
    fputc('\n', f);

    if (d->nwarnings) {
        fputs("\n**Warnings**\n\n", f);
        for (size_t i = 0; i < d->nwarnings; i++) {
            fputs("- ", f);
            md_text(f, d->warnings[i]);
            fputc('\n', f);
        }
    }

    size_t k = info->worst_k > 0 ? (size_t)info->worst_k : 0;
    if (k > d->nworst) k = d->nworst;
    if (k) {
        fprintf(f, "\n### Worst %zu tensor%s by SQNR\n\n", k, k == 1 ? "" : "s");
        fputs(oe ? "| # | tensor | shape | action | scheme | compared | SQNR (dB) | rel. error | output error | max abs "
                   "error | bytes |\n|---:|---|---|---|---|---|---:|---:|---:|---:|---|\n"
                 : "| # | tensor | shape | action | scheme | compared | SQNR (dB) | rel. error | max abs error | bytes |\n"
                   "|---:|---|---|---|---|---|---:|---:|---:|---|\n", f);
        for (size_t i = 0; i < k; i++) {
            const npuc_tensor_record *r = &s->records[d->worst[i]];
            char rel[32], mx[32], b1[32], b2[32];
            npuc__fmt_shape(r, shape, sizeof shape);
            npuc__fmt_g(r->err.rel_fro, rel, sizeof rel);
            npuc__fmt_g(r->err.max_abs, mx, sizeof mx);
            npuc__fmt_size(r->bytes_before, b1, sizeof b1);
            npuc__fmt_size(r->bytes_after, b2, sizeof b2);
            fprintf(f, "| %zu | ", i + 1);
            md_code(f, r->name);
            fprintf(f, " | %s | %s | ", shape, npuc_action_name(r->action));
            md_text(f, scheme_of(r));
            fputs(" | ", f);
            md_text(f, compared_of(r));
            fputs(" | ", f);
            md_db(f, r);
            fprintf(f, " | %s |", rel);
            if (oe) md_out(f, r);
            fprintf(f, " %s | %s \xe2\x86\x92 %s |\n", mx, b1, b2);
        }
    }

    fprintf(f, "\n<details><summary>All %zu tensors</summary>\n\n", s->nrecords);
    fputs(oe ? "| # | tensor | shape | dtype | action | scheme | compared | SQNR (dB) | output error | bytes before | "
               "bytes after | note |\n|---:|---|---|---|---|---|---|---:|---:|---:|---:|---|\n"
             : "| # | tensor | shape | dtype | action | scheme | compared | SQNR (dB) | bytes before | bytes after | note |\n"
               "|---:|---|---|---|---|---|---|---:|---:|---:|---|\n", f);
    for (size_t i = 0; i < s->nrecords; i++) {
        const npuc_tensor_record *r = &s->records[d->order[i]];
        char dt[16];
        npuc__fmt_shape(r, shape, sizeof shape);
        fprintf(f, "| %zu | ", d->order[i] + 1);
        md_code(f, r->name);
        fprintf(f, " | %s | %s | %s | ", shape, npuc__dtype_lower(r->dtype, dt), npuc_action_name(r->action));
        md_text(f, scheme_of(r));
        fputs(" | ", f);
        md_text(f, compared_of(r));
        fputs(" | ", f);
        md_db(f, r);
        fputs(" |", f);
        if (oe) md_out(f, r);
        fputc(' ', f);
        md_size(f, r->bytes_before);
        fputs(" | ", f);
        md_size(f, r->bytes_after);
        fputs(" | ", f);
        md_text(f, r->note);
        fputs(" |\n", f);
    }
    fputs("\n</details>\n", f);

    if (info->params_json) {
        size_t n = longest_run(info->params_json, '`') + 1;
        if (n < 3) n = 3;
        fputs("\n<details><summary>Parameters</summary>\n\n", f);
        for (size_t i = 0; i < n; i++) fputc('`', f);
        fputs("json\n", f);
        fputs(info->params_json, f);
        fputc('\n', f);
        for (size_t i = 0; i < n; i++) fputc('`', f);
        fputs("\n\n</details>\n", f);
    }
    return NPUC_OK;
}
