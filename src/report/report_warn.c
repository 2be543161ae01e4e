/*
 * report_warn.c - warnings a report derives from its records, so every pass
 * and `npuc report` get them without writing them itself (docs/report.md
 * lists them):
 *
 *   - the first or last weight layer (float, rank >= 2, in file order) below
 *     8 bits: those layers are the most sensitive to quantization (the input
 *     layer sees raw data, the classifier decides), which is why npuc keeps
 *     them at 8 bits unless told otherwise;
 *   - a factored (low-rank) tensor that is not smaller than the original;
 *   - tensors whose SQNR is below info->warn_sqnr_db (default 20 dB), as one
 *     line naming the worst few.
 *
 * A warning the pass already added with the same text is not repeated.
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

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

npuc_status npuc__report_derive_warnings(const npuc_summary *s, const npuc_report_info *info,
                                         npuc__report_doc *d) {
    size_t first = s->nrecords, last = s->nrecords;
    for (size_t i = 0; i < s->nrecords; i++)
        if (is_weight(&s->records[i])) {
            if (first == s->nrecords) first = i;
            last = i;
        }
    const size_t ends[2] = {first, last};
    for (int e = 0; e < 2; e++) {
        if (ends[e] == s->nrecords || (e == 1 && last == first)) continue;
        const npuc_tensor_record *r = &s->records[ends[e]];
        double bits = npuc_record_get(r, "bits", 0);
        if (r->action == NPUC_ACTION_QUANTIZED && bits > 0 && bits < 8 &&
            add(d, "%s weight layer '%s' is quantized to %g bits: first and last layers are usually the "
                   "most sensitive (keep them at 8 bits)",
                e == 0 ? "first" : "last", r->name, bits) != NPUC_OK)
            return NPUC_ERR_NOMEM;
    }
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
