/*
 * report_warn.c - warnings a report derives from its records, so every pass
 * and `npuc report` get them without writing them itself (docs/report.md
 * lists them):
 *
 *   - a layer at the model's edge below 8 bits: the embedding, the input
 *     convolution or the output head, told by name as quantize tells them
 *     (graph/graph_roles.h), else, when no name tells and the records are
 *     not in alphabetical order, the first and last weight layers (float,
 *     rank >= 2) in file order; those layers are the most sensitive to
 *     quantization (the input layer sees raw data, the head decides), which
 *     is why npuc keeps them at 8 bits unless told otherwise;
 *   - a factored (low-rank) tensor that is not smaller than the original;
 *   - tensors whose SQNR is below info->warn_sqnr_db (default 20 dB), as one
 *     line naming the worst few.
 *
 * A warning the pass already added with the same text is not repeated, and
 * warnings that differ only in the tensor they name are grouped into one
 * line (npuc_warnings_group, below; issue 31 item 12).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "graph/graph_roles.h"
#include "report/report_internal.h"

static npuc_status add(npuc__report_doc *d, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static npuc_status add(npuc__report_doc *d, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    for (size_t i = 0; i < d->nwarnings; i++)
        if (strcmp(d->warnings[i], buf) == 0) return NPUC_OK;
    char **w = realloc(d->warnings, (d->nwarnings + 1) * sizeof *w);
    if (!w) return NPUC_ERR_NOMEM;
    d->warnings = w;
    if (!(w[d->nwarnings] = npuc__strdup(buf))) return NPUC_ERR_NOMEM;
    d->nwarnings++;
    return NPUC_OK;
}

static int is_weight(const npuc_tensor_record *r) {
    return r->rank >= 2 && npuc_dtype_is_float(r->dtype) && r->action != NPUC_ACTION_REMOVED &&
           r->action != NPUC_ACTION_CREATED;
}

static int below8(const npuc_tensor_record *r) {
    const double bits = npuc_record_get(r, "bits", 0);
    return r->action == NPUC_ACTION_QUANTIZED && bits > 0 && bits < 8;
}

/* The edge-layer warnings: by name when some record's name tells an edge
 * (the last head and first input convolution in natural order, every
 * embedding), else by file order unless the records are sorted by name. */
static npuc_status edge_warnings(const npuc_summary *s, npuc__report_doc *d) {
    size_t head = s->nrecords, conv = s->nrecords, named = 0;
    char why[64];
    for (size_t i = 0; i < s->nrecords; i++) {
        const npuc_tensor_record *r = &s->records[i];
        if (!is_weight(r) || !r->name) continue;
        npuc__edge e = npuc__edge_of_name(r->name, r->rank, why, sizeof why);
        if (e == NPUC_EDGE_NONE) continue;
        named++;
        if (e == NPUC_EDGE_EMBEDDING && below8(r) &&
            add(d, "embedding '%s' is quantized to %g bits: the layers at the model's edges are usually the most "
                   "sensitive (keep them at 8 bits)", r->name, npuc_record_get(r, "bits", 0)) != NPUC_OK)
            return NPUC_ERR_NOMEM;
        if (e == NPUC_EDGE_HEAD && (head == s->nrecords || npuc__graph_natcmp(r->name, s->records[head].name) > 0))
            head = i;
        if (e == NPUC_EDGE_INPUT_CONV &&
            (conv == s->nrecords || npuc__graph_natcmp(r->name, s->records[conv].name) < 0))
            conv = i;
    }
    size_t ends[2] = {conv, head};
    const char *what[2] = {"input convolution", "output head"};
    int alphabetical = s->nrecords >= 3;
    for (size_t i = 1; i < s->nrecords && alphabetical; i++)
        alphabetical = s->records[i - 1].name && s->records[i].name &&
                       strcmp(s->records[i - 1].name, s->records[i].name) <= 0;
    if (!named && !alphabetical) {
        ends[0] = ends[1] = s->nrecords;
        for (size_t i = 0; i < s->nrecords; i++)
            if (is_weight(&s->records[i])) {
                if (ends[0] == s->nrecords) ends[0] = i;
                ends[1] = i;
            }
        if (ends[1] == ends[0]) ends[1] = s->nrecords;
        what[0] = "first weight layer";
        what[1] = "last weight layer";
    }
    for (int e = 0; e < 2; e++) {
        if (ends[e] == s->nrecords) continue;
        const npuc_tensor_record *r = &s->records[ends[e]];
        if (below8(r) &&
            add(d, "%s '%s' is quantized to %g bits: the layers at the model's edges are usually the most "
                   "sensitive (keep them at 8 bits)", what[e], r->name, npuc_record_get(r, "bits", 0)) != NPUC_OK)
            return NPUC_ERR_NOMEM;
    }
    return NPUC_OK;
}

npuc_status npuc__report_derive_warnings(const npuc_summary *s, const npuc_report_info *info,
                                         npuc__report_doc *d) {
    if (edge_warnings(s, d) != NPUC_OK) return NPUC_ERR_NOMEM;
    for (size_t i = 0; i < s->nrecords; i++) {
        const npuc_tensor_record *r = &s->records[i];
        if (r->action == NPUC_ACTION_FACTORED && r->bytes_after >= r->bytes_before &&
            add(d, "factored tensor '%s' saves nothing (%llu bytes -> %llu bytes): keep it dense", r->name,
                (unsigned long long)r->bytes_before, (unsigned long long)r->bytes_after) != NPUC_OK)
            return NPUC_ERR_NOMEM;
    }
    if (!isnan(info->warn_sqnr_db)) {
        size_t below = 0;
        while (below < d->nworst && npuc__record_sqnr(&s->records[d->worst[below]]) < info->warn_sqnr_db) below++;
        if (below) {
            char list[768], db[32];
            size_t k = 0;
            list[0] = 0;
            for (size_t i = 0; i < below && i < 5 && k < sizeof list; i++) {
                const npuc_tensor_record *r = &s->records[d->worst[i]];
                npuc__fmt_db(r->err.sqnr_db, db, sizeof db);
                k += (size_t)snprintf(list + k, sizeof list - k, "%s'%.100s' %s dB", i ? ", " : "", r->name, db);
            }
            if (below > 5 && k < sizeof list) snprintf(list + k, sizeof list - k, " and %zu more", below - 5);
            npuc__fmt_db(info->warn_sqnr_db, db, sizeof db);
            if (add(d, "%zu tensor%s below the SQNR warning level of %s dB: %s", below, below == 1 ? "" : "s", db,
                    list) != NPUC_OK)
                return NPUC_ERR_NOMEM;
        }
    }
    return NPUC_OK;
}

/* ------------------------------------------------------------- grouping */

/* The first quoted name of w: [*b, *e) spans the text between the quotes;
 * 0 when w quotes nothing. */
static int quoted(const char *w, const char **b, const char **e) {
    const char *q = strchr(w, '\'');
    if (!q) return 0;
    const char *r = strchr(q + 1, '\'');
    if (!r) return 0;
    *b = q + 1;
    *e = r;
    return 1;
}

/* 1 when a and b are the same text but for their first quoted names. */
static int same_but_name(const char *a, const char *b) {
    const char *ab, *ae, *bb, *be;
    if (!quoted(a, &ab, &ae) || !quoted(b, &bb, &be)) return 0;
    return (size_t)(ab - a) == (size_t)(bb - b) && strncmp(a, b, (size_t)(ab - a)) == 0 && strcmp(ae, be) == 0;
}

void npuc_warnings_free(char **w, size_t n) {
    for (size_t i = 0; w && i < n; i++) free(w[i]);
    free(w);
}

/* A grouped line: the first warning with its quoted name replaced by
 * "'*'", then " (N tensors: 'a', 'b', ...)" in the order they came. */
static char *group_line(const char *const *w, const size_t *members, size_t k) {
    const char *b = NULL, *e = NULL;
    quoted(w[members[0]], &b, &e);
    size_t len = strlen(w[members[0]]) + 64;
    for (size_t j = 0; j < k; j++) {
        const char *mb = NULL, *me = NULL;
        quoted(w[members[j]], &mb, &me);
        len += (size_t)(me - mb) + 4;
    }
    char *out = malloc(len);
    if (!out) return NULL;
    size_t o = (size_t)snprintf(out, len, "%.*s*%s (%zu tensors: ", (int)(b - w[members[0]]), w[members[0]], e, k);
    for (size_t j = 0; j < k && o < len; j++) {
        const char *mb = NULL, *me = NULL;
        quoted(w[members[j]], &mb, &me);
        o += (size_t)snprintf(out + o, len - o, "%s'%.*s'", j ? ", " : "", (int)(me - mb), mb);
    }
    if (o < len) snprintf(out + o, len - o, ")");
    return out;
}

char **npuc_warnings_group(const char *const *w, size_t n, size_t *out_n) {
    *out_n = 0;
    char **out = calloc(n ? n : 1, sizeof *out);
    unsigned char *taken = calloc(n ? n : 1, 1);
    size_t *members = malloc((n ? n : 1) * sizeof *members);
    if (!out || !taken || !members) goto nomem;
    for (size_t i = 0; i < n; i++) {
        if (taken[i]) continue;
        size_t k = 0;
        members[k++] = i;
        for (size_t j = i + 1; j < n; j++)
            if (!taken[j] && same_but_name(w[i], w[j])) {
                members[k++] = j;
                taken[j] = 1;
            }
        out[*out_n] = k > 1 ? group_line(w, members, k) : npuc__strdup(w[i]);
        if (!out[*out_n]) goto nomem;
        ++*out_n;
    }
    free(taken);
    free(members);
    return out;
nomem:
    npuc_warnings_free(out, *out_n);
    free(taken);
    free(members);
    *out_n = 0;
    return NULL;
}

npuc_status npuc__report_group_warnings(npuc__report_doc *d) {
    size_t n;
    char **g = npuc_warnings_group((const char *const *)d->warnings, d->nwarnings, &n);
    if (!g) return NPUC_ERR_NOMEM;
    npuc_warnings_free(d->warnings, d->nwarnings);
    d->warnings = g;
    d->nwarnings = n;
    return NPUC_OK;
}
