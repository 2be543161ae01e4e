/*
 * report_baseline.c - comparing a summary with a previous JSON report, for CI
 * gates over model zoos (report.h states the rule; docs/report.md explains
 * it).
 *
 * The rule is on MSE rather than SQNR because MSE is what grows: "the error
 * grew by more than 5 %" reads the same for a 40 dB layer and a 12 dB one,
 * and for an unchanged original it is exactly an SQNR drop of more than
 * 10 log10(1.05) = 0.21 dB.  Numbers are read back from the JSON exactly
 * (jansson prints doubles with 17 significant digits), so an identical rerun
 * compares equal.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "report/report_internal.h"

typedef struct base_tensor {
    const char *name;   /* borrowed from the JSON document */
    int has_error;
    double mse, sqnr;
    uint64_t bytes_after;
    int used;
} base_tensor;

static int base_cmp(const void *a, const void *b) {
    return strcmp(((const base_tensor *)a)->name, ((const base_tensor *)b)->name);
}

/* A number as the report writes it: a JSON number or "inf", "-inf", "nan". */
static int jnum_get(const json_t *v, double *out) {
    if (json_is_number(v)) { *out = json_number_value(v); return 0; }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (strcmp(s, "inf") == 0) { *out = INFINITY; return 0; }
        if (strcmp(s, "-inf") == 0) { *out = -INFINITY; return 0; }
        if (strcmp(s, "nan") == 0) { *out = NAN; return 0; }
    }
    return -1;
}

void npuc_baseline_result_free(npuc_baseline_result *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n; i++) free(r->items[i].name);
    free(r->items);
    memset(r, 0, sizeof *r);
}

static npuc_regression *push(npuc_baseline_result *r, const char *name, npuc_regress_kind kind, double before,
                             double after) {
    npuc_regression *it = realloc(r->items, (r->n + 1) * sizeof *it);
    if (!it) return NULL;
    r->items = it;
    it = &it[r->n];
    memset(it, 0, sizeof *it);
    if (name && !(it->name = npuc__strdup(name))) return NULL;
    it->kind = kind;
    it->before = before;
    it->after = after;
    r->n++;
    return it;
}

static void pct(double before, double after, char *buf, size_t n) {
    if (before > 0 && isfinite(before) && isfinite(after)) snprintf(buf, n, "%+.0f%%", 100.0 * (after / before - 1));
    else snprintf(buf, n, "from %s", before == 0 ? "0" : "?");
}

npuc_status npuc_report_baseline_check(npuc_ctx *ctx, const char *path, const npuc_summary *s,
                                       double max_regress_pct, npuc_baseline_result *out) {
    memset(out, 0, sizeof *out);
    if (!(max_regress_pct >= 0) || !isfinite(max_regress_pct))
        return npuc_fail(ctx, NPUC_ERR_ARG, "--max-regress %g: must be a percentage >= 0", max_regress_pct);
    const double p = max_regress_pct / 100.0, db_drop = 10.0 * log10(1.0 + p);
    FILE *f = fopen(path, "rb");
    if (!f)
        return npuc_fail(ctx, errno == ENOENT ? NPUC_ERR_NOT_FOUND : NPUC_ERR_IO, "%s: cannot read the baseline: %s",
                         path, strerror(errno));
    json_error_t je;
    json_t *doc = json_loadf(f, 0, &je);
    fclose(f);
    if (!doc) return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: line %d: %s", path, je.line, je.text);
    npuc_status st = NPUC_OK;
    base_tensor *bt = NULL;
    json_t *schema = json_object_get(doc, "schema"), *tens = json_object_get(doc, "tensors");
    json_t *tot = json_object_get(doc, "totals");
    if (!json_is_string(schema) || strcmp(json_string_value(schema), "npuc.report/1") != 0 || !json_is_array(tens) ||
        !json_is_object(tot)) {
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: not an npuc.report/1 JSON report", path);
        goto done;
    }
    size_t nb = json_array_size(tens);
    bt = calloc(nb ? nb : 1, sizeof *bt);
    if (!bt) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
    for (size_t i = 0; i < nb; i++) {
        json_t *t = json_array_get(tens, i), *name = json_object_get(t, "name"), *err = json_object_get(t, "error");
        json_t *ba = json_object_get(t, "bytes_after");
        if (!json_is_string(name) || !json_is_integer(ba) || json_integer_value(ba) < 0 ||
            !(json_is_null(err) || json_is_object(err))) {
            st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensors[%zu]: missing name, bytes_after or error", path, i);
            goto done;
        }
        bt[i].name = json_string_value(name);
        bt[i].bytes_after = (uint64_t)json_integer_value(ba);
        if (json_is_object(err)) {
            if (jnum_get(json_object_get(err, "mse"), &bt[i].mse) != 0 ||
                jnum_get(json_object_get(err, "sqnr_db"), &bt[i].sqnr) != 0) {
                st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': error.mse or error.sqnr_db is not a number",
                               path, bt[i].name);
                goto done;
            }
            bt[i].has_error = 1;
        } else {
            bt[i].sqnr = INFINITY;
        }
    }
    qsort(bt, nb, sizeof *bt, base_cmp);
    for (size_t i = 0; i < s->nrecords; i++) {
        const npuc_tensor_record *r = &s->records[i];
        base_tensor key = {.name = r->name ? r->name : ""};
        base_tensor *b = bsearch(&key, bt, nb, sizeof *bt, base_cmp);
        if (!b) { out->only_current++; continue; }
        if (!b->used) out->matched++;
        b->used = 1;
        char pc[32], d1[32], d2[32];
        if (r->has_error) {
            double then = b->has_error ? b->mse : 0, now = r->err.mse;
            int worse = isnan(now) ? !isnan(then) : !isnan(then) && now > then * (1 + p);
            if (worse) {
                npuc_regression *g = push(out, r->name, NPUC_REGRESS_ERROR, then, now);
                if (!g) goto nomem;
                char m1[32], m2[32];
                npuc__fmt_g(then, m1, sizeof m1);
                npuc__fmt_g(now, m2, sizeof m2);
                pct(then, now, pc, sizeof pc);
                npuc__fmt_db(b->sqnr, d1, sizeof d1);
                npuc__fmt_db(r->err.sqnr_db, d2, sizeof d2);
                snprintf(g->text, sizeof g->text, "'%.160s': MSE %s -> %s (%s), SQNR %s -> %s dB", r->name, m1, m2, pc,
                         d1, d2);
            }
        }
        if ((double)r->bytes_after > (double)b->bytes_after * (1 + p)) {
            npuc_regression *g = push(out, r->name, NPUC_REGRESS_SIZE, (double)b->bytes_after, (double)r->bytes_after);
            if (!g) goto nomem;
            pct((double)b->bytes_after, (double)r->bytes_after, pc, sizeof pc);
            snprintf(g->text, sizeof g->text, "'%.160s': %llu -> %llu bytes (%s)", r->name,
                     (unsigned long long)b->bytes_after, (unsigned long long)r->bytes_after, pc);
        }
    }
    for (size_t i = 0; i < nb; i++) out->only_baseline += !bt[i].used;

    /* Totals. */
    double then_db, then_bytes;
    if (jnum_get(json_object_get(tot, "weighted_sqnr_db"), &then_db) != 0 ||
        jnum_get(json_object_get(tot, "bytes_after"), &then_bytes) != 0) {
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: totals.weighted_sqnr_db or totals.bytes_after is missing", path);
        goto done;
    }
    const double now_db = s->weighted_sqnr_db;
    if (!isnan(then_db) && !isnan(now_db) && now_db < then_db - db_drop) {
        npuc_regression *g = push(out, NULL, NPUC_REGRESS_ERROR, then_db, now_db);
        if (!g) goto nomem;
        char d1[32], d2[32];
        npuc__fmt_db(then_db, d1, sizeof d1);
        npuc__fmt_db(now_db, d2, sizeof d2);
        snprintf(g->text, sizeof g->text, "totals: weighted SQNR %s -> %s dB (allowed drop %.2f dB)", d1, d2, db_drop);
    }
    if ((double)s->bytes_after > then_bytes * (1 + p)) {
        npuc_regression *g = push(out, NULL, NPUC_REGRESS_SIZE, then_bytes, (double)s->bytes_after);
        if (!g) goto nomem;
        char pc[32];
        pct(then_bytes, (double)s->bytes_after, pc, sizeof pc);
        snprintf(g->text, sizeof g->text, "totals: %.0f -> %llu bytes (%s)", then_bytes,
                 (unsigned long long)s->bytes_after, pc);
    }
    goto done;
nomem:
    st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
done:
    if (st != NPUC_OK) npuc_baseline_result_free(out);
    free(bt);
    json_decref(doc);
    return st;
}
