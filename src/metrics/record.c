/*
 * record.c - the per-tensor record and pass summary every pass fills (see
 * include/npuc/record.h).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npuc_internal.h"

static const char *const ACTIONS[NPUC_ACTION_COUNT] = {
    "kept", "quantized", "pruned", "sparsified", "factored", "folded", "removed", "created", "modified",
};

const char *npuc_action_name(npuc_action a) {
    return (unsigned)a < NPUC_ACTION_COUNT ? ACTIONS[a] : "?";
}

static void record_init(npuc_tensor_record *r) {
    memset(r, 0, sizeof *r);
    r->action = NPUC_ACTION_KEPT;
    snprintf(r->scheme, sizeof r->scheme, "-");
}

npuc_status npuc_summary_init(npuc_summary *s, const char *pass, size_t n) {
    memset(s, 0, sizeof *s);
    snprintf(s->pass, sizeof s->pass, "%s", pass);
    s->records = calloc(n ? n : 1, sizeof *s->records);
    if (!s->records) return NPUC_ERR_NOMEM;
    s->nrecords = n;
    for (size_t i = 0; i < n; i++) record_init(&s->records[i]);
    return NPUC_OK;
}

npuc_tensor_record *npuc_summary_append(npuc_summary *s) {
    npuc_tensor_record *r = realloc(s->records, (s->nrecords + 1) * sizeof *r);
    if (!r) return NULL;
    s->records = r;
    record_init(&r[s->nrecords]);
    return &r[s->nrecords++];
}

npuc_status npuc_record_from_tensor(npuc_tensor_record *r, const npuc_tensor_info *t) {
    char *name = npuc__strdup(t->name);
    if (!name) return NPUC_ERR_NOMEM;
    free(r->name);
    r->name = name;
    r->dtype = t->dtype;
    r->rank = t->rank;
    memcpy(r->shape, t->shape, sizeof r->shape);
    r->bytes_before = r->bytes_after = t->nbytes;
    r->params_before = r->params_after = t->numel;
    return NPUC_OK;
}

void npuc_record_set(npuc_tensor_record *r, const char *key, double value) {
    for (size_t i = 0; i < r->nextra; i++)
        if (strcmp(r->extra[i].key, key) == 0) { r->extra[i].value = value; return; }
    if (r->nextra >= NPUC_RECORD_EXTRA_MAX) return;
    snprintf(r->extra[r->nextra].key, sizeof r->extra[r->nextra].key, "%s", key);
    r->extra[r->nextra++].value = value;
}

double npuc_record_get(const npuc_tensor_record *r, const char *key, double dflt) {
    for (size_t i = 0; i < r->nextra; i++)
        if (strcmp(r->extra[i].key, key) == 0) return r->extra[i].value;
    return dflt;
}

static int hist_bin(double v, double lo, double hi) {
    if (!(hi > lo)) return 0;
    double f = (v - lo) / (hi - lo) * NPUC_HIST_BINS;
    if (!(f > 0)) return 0;
    return f >= NPUC_HIST_BINS - 1 ? NPUC_HIST_BINS - 1 : (int)f;
}

npuc_status npuc_record_measure_hist(npuc_tensor_record *r, const float *ref, const float *approx,
                                     uint64_t n) {
    npuc_tensor_hist *h = r->hist ? r->hist : malloc(sizeof *h);
    if (!h) return NPUC_ERR_NOMEM;
    memset(h, 0, sizeof *h);
    double lo = INFINITY, hi = -INFINITY, emax = 0, se2[NPUC_HIST_BINS] = {0};
    for (uint64_t i = 0; i < n; i++) {
        if (!isfinite(ref[i]) || !isfinite(approx[i])) continue;
        double w = ref[i], e = fabs((double)approx[i] - w);
        if (w < lo) lo = w;
        if (w > hi) hi = w;
        if (e > emax) emax = e;
    }
    if (lo > hi) lo = hi = 0; /* nothing finite */
    h->w_min = lo;
    h->w_max = hi;
    h->e_max = emax;
    for (uint64_t i = 0; i < n; i++) {
        if (!isfinite(ref[i]) || !isfinite(approx[i])) continue;
        double w = ref[i], e = (double)approx[i] - w;
        int b = hist_bin(w, lo, hi);
        h->w_count[b]++;
        se2[b] += e * e;
        h->e_count[hist_bin(fabs(e), 0, emax)]++;
    }
    for (int b = 0; b < NPUC_HIST_BINS; b++)
        h->e_rms[b] = h->w_count[b] ? sqrt(se2[b] / (double)h->w_count[b]) : 0;
    r->hist = h;
    return NPUC_OK;
}

npuc_status npuc_summary_warn(npuc_summary *s, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char **w = realloc(s->warnings, (s->nwarnings + 1) * sizeof *w);
    if (!w) return NPUC_ERR_NOMEM;
    s->warnings = w;
    if (!(w[s->nwarnings] = npuc__strdup(buf))) return NPUC_ERR_NOMEM;
    s->nwarnings++;
    return NPUC_OK;
}

void npuc_summary_finish(npuc_summary *s) {
    double sw2 = 0, se2 = 0, oe2 = 0, oy2 = 0;
    int any = 0;
    s->n_out_error = 0;
    s->max_out_rel_error = NAN;
    s->bytes_before = s->bytes_after = s->params_before = s->params_after = 0;
    memset(s->count, 0, sizeof s->count);
    for (size_t i = 0; i < s->nrecords; i++) {
        const npuc_tensor_record *r = &s->records[i];
        s->bytes_before += r->bytes_before;
        s->bytes_after += r->bytes_after;
        s->params_before += r->params_before;
        s->params_after += r->params_after;
        if ((unsigned)r->action < NPUC_ACTION_COUNT) s->count[r->action]++;
        if (r->has_error) {
            any = 1;
            sw2 += r->err.sum_w2;
            se2 += r->err.sum_e2;
        }
        if (r->has_out_error) {
            oe2 += r->out_e2;
            oy2 += r->out_y2;
            if (!s->n_out_error++ || r->out_rel_error > s->max_out_rel_error) s->max_out_rel_error = r->out_rel_error;
        }
    }
    s->weighted_sqnr_db = !any ? NAN : se2 == 0 ? INFINITY : sw2 == 0 ? -INFINITY : 10.0 * log10(sw2 / se2);
    /* Pooled like the weighted SQNR: the output energy of every measured layer counts. */
    s->out_rel_error = !s->n_out_error ? NAN : oe2 == 0 ? 0.0 : oy2 == 0 ? INFINITY : sqrt(oe2 / oy2);
}

void npuc_summary_free(npuc_summary *s) {
    if (!s) return;
    for (size_t i = 0; i < s->nrecords; i++) {
        free(s->records[i].name);
        free(s->records[i].hist);
    }
    for (size_t i = 0; i < s->nwarnings; i++) free(s->warnings[i]);
    free(s->records);
    free(s->warnings);
    free(s->budget_json);
    memset(s, 0, sizeof *s);
}
