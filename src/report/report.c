/*
 * report.c - report formats, the per-tensor line, and writing a report to a
 * file atomically.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report/report_internal.h"

int npuc_report_format_parse(const char *name, npuc_report_format *out) {
    static const struct { const char *n; npuc_report_format f; } NAMES[] = {
        {"text", NPUC_REPORT_TEXT}, {"txt", NPUC_REPORT_TEXT}, {"csv", NPUC_REPORT_CSV},
        {"json", NPUC_REPORT_JSON}, {"md", NPUC_REPORT_MD},    {"markdown", NPUC_REPORT_MD},
        {"html", NPUC_REPORT_HTML},
    };
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
        if (strcmp(name, NAMES[i].n) == 0) { *out = NAMES[i].f; return 0; }
    return -1;
}

npuc_report_format npuc_report_format_from_path(const char *path) {
    const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    npuc_report_format f = NPUC_REPORT_TEXT;
    if (dot && (!slash || dot > slash) && npuc_report_format_parse(dot + 1, &f) == 0) return f;
    if (dot && strcmp(dot, ".htm") == 0) return NPUC_REPORT_HTML;
    return NPUC_REPORT_TEXT;
}

npuc_report_info npuc_report_info_defaults(void) {
    npuc_report_info i;
    memset(&i, 0, sizeof i);
    i.worst_k = 10;
    i.warn_sqnr_db = 20.0;
    return i;
}

void npuc__fmt_size(uint64_t b, char *buf, size_t n) {
    static const char *const U[] = {"KiB", "MiB", "GiB", "TiB"};
    if (b < 1024) { snprintf(buf, n, "%llu B", (unsigned long long)b); return; }
    double v = (double)b / 1024.0;
    int u = 0;
    while (v >= 1024.0 && u < 3) { v /= 1024.0; u++; }
    snprintf(buf, n, "%.2f %s", v, U[u]);
}

void npuc__fmt_shape(const npuc_tensor_record *r, char *buf, size_t n) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int d = 0; d < r->rank && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, d ? ",%lld" : "%lld", (long long)r->shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

void npuc__fmt_db(double v, char *buf, size_t n) {
    if (isnan(v)) snprintf(buf, n, "nan");
    else if (isinf(v)) snprintf(buf, n, "%s", v > 0 ? "inf" : "-inf");
    else snprintf(buf, n, "%.1f", v);
}

const char *npuc__dtype_lower(npuc_dtype dt, char buf[16]) {
    const char *s = npuc_dtype_name(dt);
    size_t i = 0;
    for (; s[i] && i < 15; i++) buf[i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] + 32 : s[i]);
    buf[i] = 0;
    return buf;
}

size_t npuc__fmt_name(const char *s, size_t max_cols, char *buf, size_t n) {
    size_t cols = 0, k = 0, total = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if ((*p & 0xc0) != 0x80) total++;
    int cut = total > max_cols;
    size_t limit = cut ? (max_cols > 3 ? max_cols - 3 : 0) : max_cols;
    for (const unsigned char *p = (const unsigned char *)s; *p && k + 8 < n;) {
        size_t len = 1;
        while (p[len] && (p[len] & 0xc0) == 0x80) len++;
        if (cols >= limit) break;
        if (*p < 0x20 || *p == 0x7f) buf[k++] = '?';
        else { memcpy(buf + k, p, len); k += len; }
        p += len;
        cols++;
    }
    if (cut) { memcpy(buf + k, "...", 3); k += 3; cols += 3; }
    buf[k] = 0;
    return cols;
}

void npuc_report_line(const npuc_tensor_record *r, size_t i, size_t n, int namew, char *buf,
                      size_t bufsize) {
    char name[512], shape[128], b1[32], b2[32], db[32], dt[16];
    size_t cols = npuc__fmt_name(r->name ? r->name : "", namew > 0 ? (size_t)namew : 48, name, sizeof name);
    npuc__fmt_shape(r, shape, sizeof shape);
    npuc__fmt_size(r->bytes_before, b1, sizeof b1);
    npuc__fmt_size(r->bytes_after, b2, sizeof b2);
    int w = snprintf(NULL, 0, "%zu", n);
    size_t k = (size_t)snprintf(buf, bufsize, "[%*zu/%zu] %s%*s %-16s %4s -> %-10s %10s -> %10s", w, i + 1, n,
                                name, (int)((size_t)namew > cols ? (size_t)namew - cols : 0), "", shape,
                                npuc__dtype_lower(r->dtype, dt),
                                strcmp(r->scheme, "-") == 0 && r->action != NPUC_ACTION_KEPT
                                    ? npuc_action_name(r->action) : r->scheme,
                                b1, b2);
    /* Bits per weight of the original tensor: what it costs now per value it
     * had (a created tensor: per value it has). */
    uint64_t np = r->params_before ? r->params_before : r->params_after;
    if (np && k < bufsize)
        k += (size_t)snprintf(buf + k, bufsize - k, " %6.2f bpw", 8.0 * (double)r->bytes_after / (double)np);
    if (r->has_error && k < bufsize) {
        npuc__fmt_db(r->err.sqnr_db, db, sizeof db);
        k += (size_t)snprintf(buf + k, bufsize - k, "  sqnr=%s dB", db);
    }
    /* The output error over calibration data (--calib): only when measured. */
    if (r->has_out_error && k < bufsize) {
        npuc__fmt_g(r->out_rel_error, db, sizeof db);
        k += (size_t)snprintf(buf + k, bufsize - k, " out=%s", db);
    }
    /* npuc report's records say what was compared, with the relative error
     * (an exact fold reads 1e-7 there, not a dB figure to puzzle over). */
    if (r->compared[0] && k < bufsize) {
        if (r->has_error) {
            npuc__fmt_g(r->err.rel_fro, db, sizeof db);
            k += (size_t)snprintf(buf + k, bufsize - k, " rel=%s", db);
        }
        if (k < bufsize) k += (size_t)snprintf(buf + k, bufsize - k, "  [%s]", r->compared);
    }
    if (r->note[0] && k < bufsize) snprintf(buf + k, bufsize - k, "  (%s)", r->note);
}

void npuc_report_totals_line(const npuc_summary *s, char *buf, size_t bufsize) {
    char b1[32], b2[32], db[32];
    npuc__fmt_size(s->bytes_before, b1, sizeof b1);
    npuc__fmt_size(s->bytes_after, b2, sizeof b2);
    /* The records are the input's tensors plus those a pass created: when
     * some were removed or created, the counts in and out differ, and each
     * is said (fold-bn: 21 in, 8 out; issue 31 item 13). */
    const size_t created = s->count[NPUC_ACTION_CREATED], removed = s->count[NPUC_ACTION_REMOVED];
    size_t k = created || removed
                   ? (size_t)snprintf(buf, bufsize, "total: %zu tensors in, %zu out", s->nrecords - created,
                                      s->nrecords - removed)
                   : (size_t)snprintf(buf, bufsize, "total: %zu tensors", s->nrecords);
    for (int a = 1; a < NPUC_ACTION_COUNT && k < bufsize; a++)
        if (s->count[a]) k += (size_t)snprintf(buf + k, bufsize - k, ", %zu %s", s->count[a], npuc_action_name((npuc_action)a));
    if (k < bufsize)
        k += (size_t)snprintf(buf + k, bufsize - k, "; %s -> %s (%.2fx", b1, b2,
                              s->bytes_after ? (double)s->bytes_before / (double)s->bytes_after : 0.0);
    if (k < bufsize)
        k += (size_t)snprintf(buf + k, bufsize - k, s->params_before ? ", %.2f bpw)" : ")",
                              s->params_before ? 8.0 * (double)s->bytes_after / (double)s->params_before : 0.0);
    if (!isnan(s->weighted_sqnr_db) && k < bufsize) {
        npuc__fmt_db(s->weighted_sqnr_db, db, sizeof db);
        k += (size_t)snprintf(buf + k, bufsize - k, "; weighted sqnr=%s dB", db);
    }
    if (s->n_out_error && k < bufsize) {
        char mx[32];
        npuc__fmt_g(s->out_rel_error, db, sizeof db);
        npuc__fmt_g(s->max_out_rel_error, mx, sizeof mx);
        snprintf(buf + k, bufsize - k, "; output error=%s (max %s, %zu tensors)", db, mx, s->n_out_error);
    }
}

double npuc__record_sqnr(const npuc_tensor_record *r) {
    if (!r->has_error) return INFINITY;
    return isnan(r->err.sqnr_db) ? -INFINITY : r->err.sqnr_db;
}

double npuc__ratio(uint64_t before, uint64_t after) {
    return after ? (double)before / (double)after : NAN;
}

void npuc__fmt_g(double v, char *buf, size_t n) {
    if (isnan(v)) snprintf(buf, n, "nan");
    else if (isinf(v)) snprintf(buf, n, "%s", v > 0 ? "inf" : "-inf");
    else snprintf(buf, n, "%.4g", v);
}

/* A record index with its sort key, so the comparison needs no context:
 * qsort() has no context argument, and a global one would make two reports
 * written at once in two threads sort by each other's records. */
typedef struct keyed {
    double key;
    size_t idx;
} keyed;

static int by_key(const void *a, const void *b) {
    const keyed *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

int npuc__sort_by_sqnr(const npuc_summary *s, size_t *idx, size_t n) {
    if (n < 2) return 0;
    keyed *k = malloc(n * sizeof *k); /* n <= s->nrecords: no overflow */
    if (!k) return -1;
    for (size_t i = 0; i < n; i++) k[i] = (keyed){npuc__record_sqnr(&s->records[idx[i]]), idx[i]};
    qsort(k, n, sizeof *k, by_key);
    for (size_t i = 0; i < n; i++) idx[i] = k[i].idx;
    free(k);
    return 0;
}

size_t *npuc__report_order(const npuc_summary *s, int sort) {
    size_t *o = malloc(sizeof *o * (s->nrecords ? s->nrecords : 1));
    if (!o) return NULL;
    for (size_t i = 0; i < s->nrecords; i++) o[i] = i;
    if (sort && npuc__sort_by_sqnr(s, o, s->nrecords) != 0) {
        free(o);
        return NULL;
    }
    return o;
}

npuc_status npuc_report_write(npuc_ctx *ctx, FILE *f, npuc_report_format fmt, const npuc_summary *s,
                              const npuc_report_info *info) {
    npuc_report_info dflt = npuc_report_info_defaults();
    if (!info) info = &dflt;
    npuc_status (*const WRITERS[])(npuc_ctx *, FILE *, const npuc_summary *, const npuc_report_info *,
                                   const npuc__report_doc *) = {
        npuc__report_text, npuc__report_csv, npuc__report_json, npuc__report_md, npuc__report_html,
    };
    if ((unsigned)fmt >= sizeof WRITERS / sizeof WRITERS[0])
        return npuc_fail(ctx, NPUC_ERR_ARG, "unknown report format %d", (int)fmt);
    npuc__report_doc d;
    npuc_status st = npuc__report_doc_init(ctx, s, info, &d);
    if (st != NPUC_OK) return st;
    st = WRITERS[fmt](ctx, f, s, info, &d);
    npuc__report_doc_free(&d);
    if (st != NPUC_OK) return st;
    if (fflush(f) != 0 || ferror(f)) return npuc_fail(ctx, NPUC_ERR_IO, "writing the report: %s", strerror(errno));
    return NPUC_OK;
}

npuc_status npuc_report_write_file(npuc_ctx *ctx, const char *path, npuc_report_format fmt,
                                   const npuc_summary *s, const npuc_report_info *info) {
    /* An atomic file (model.h): this run's own temporary file, published
     * whole by rename, removed on failure or by the CLI's signal handler. */
    npuc_atomic_file *af;
    npuc_status st = npuc_atomic_file_open(ctx, path, 1, &af);
    if (st != NPUC_OK) return st;
    int fd = dup(npuc_atomic_file_fd(af)); /* the original carries the lock */
    FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
    if (!f) {
        st = npuc_fail(ctx, NPUC_ERR_IO, "%s: cannot write the report: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        npuc_atomic_file_abort(af);
        return st;
    }
    st = npuc_report_write(ctx, f, fmt, s, info);
    if (fclose(f) != 0 && st == NPUC_OK) st = npuc_fail(ctx, NPUC_ERR_IO, "%s: %s", path, strerror(errno));
    if (st != NPUC_OK) {
        npuc_atomic_file_abort(af);
        return st;
    }
    return npuc_atomic_file_commit(af);
}
