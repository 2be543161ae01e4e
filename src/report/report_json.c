/*
 * report_json.c - the "npuc.report/1" JSON document (docs/report.md).
 * Non-finite numbers are encoded as the strings "inf", "-inf" and "nan".
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "report/report_internal.h"

static json_t *jnum(double v) {
    if (isnan(v)) return json_string("nan");
    if (isinf(v)) return json_string(v > 0 ? "inf" : "-inf");
    return json_real(v);
}

/* The extras that are flags or counts, written as JSON booleans and
 * integers (records keep every extra as a double; docs/report.md lists
 * them).  Any other extra is a number; a value that is not a whole number
 * (or not 0/1 for a flag) stays a number, so nothing is lost. */
static const char *const EXTRA_BOOL[] = {"symmetric", "guess", "bias_created", NULL};
static const char *const EXTRA_INT[] = {"axis", "bits", "bytes_meta", "bytes_sparse", "channels", "channels_removed",
                                        "flops_after", "flops_before", "group_size", "groups", "inputs_removed",
                                        "m", "n", "pruned", "rank", "step", "zeros", NULL};

static int listed(const char *const *keys, const char *k) {
    for (; *keys; keys++)
        if (strcmp(*keys, k) == 0) return 1;
    return 0;
}

static json_t *jextra(const npuc_record_extra *x) {
    double v = x->value;
    if (listed(EXTRA_BOOL, x->key) && (v == 0 || v == 1)) return json_boolean(v == 1);
    if (listed(EXTRA_INT, x->key) && isfinite(v) && v == floor(v) && fabs(v) < 9007199254740992.0)
        return json_integer((json_int_t)v);
    return jnum(v);
}

/* A JSON string from possibly invalid UTF-8 (bad bytes become U+FFFD). */
static json_t *jstr(const char *s) {
    if (!s) return json_null();
    json_t *j = json_string(s);
    if (j) return j;
    size_t n = strlen(s);
    char *b = malloc(3 * n + 1);
    if (!b) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) b[k++] = (char)c;
        else { b[k++] = (char)0xef; b[k++] = (char)0xbf; b[k++] = (char)0xbd; }
    }
    b[k] = 0;
    j = json_string(b);
    free(b);
    return j;
}

static json_t *error_json(const npuc_error_stats *e) {
    json_t *o = json_object();
    json_object_set_new(o, "mse", jnum(e->mse));
    json_object_set_new(o, "rmse", jnum(e->rmse));
    json_object_set_new(o, "max_abs", jnum(e->max_abs));
    json_object_set_new(o, "sqnr_db", jnum(e->sqnr_db));
    json_object_set_new(o, "cosine", jnum(e->cosine));
    json_object_set_new(o, "rel_fro", jnum(e->rel_fro));
    json_object_set_new(o, "noise_pred", jnum(e->noise_pred));
    json_object_set_new(o, "clipped", json_integer((json_int_t)e->clipped));
    return o;
}

static json_t *hist_json(const npuc_tensor_hist *h) {
    json_t *o = json_object(), *wc = json_array(), *er = json_array(), *ec = json_array();
    for (int b = 0; b < NPUC_HIST_BINS; b++) {
        json_array_append_new(wc, json_integer((json_int_t)h->w_count[b]));
        json_array_append_new(er, jnum(h->e_rms[b]));
        json_array_append_new(ec, json_integer((json_int_t)h->e_count[b]));
    }
    json_object_set_new(o, "bins", json_integer(NPUC_HIST_BINS));
    json_object_set_new(o, "w_min", jnum(h->w_min));
    json_object_set_new(o, "w_max", jnum(h->w_max));
    json_object_set_new(o, "w_count", wc);
    json_object_set_new(o, "e_rms", er);
    json_object_set_new(o, "e_max", jnum(h->e_max));
    json_object_set_new(o, "e_count", ec);
    return o;
}

static json_t *report_json_doc(const npuc_summary *s, const npuc_report_info *info, const npuc__report_doc *d) {
    json_t *doc = json_object();
    json_object_set_new(doc, "schema", json_string("npuc.report/1"));
    json_object_set_new(doc, "npuc_version", json_string(npuc_version()));
    json_object_set_new(doc, "git_commit", d->commit ? json_string(d->commit) : json_null());
    json_object_set_new(doc, "pass", json_string(s->pass));
    json_object_set_new(doc, "command", jstr(info->command_line));
    json_object_set_new(doc, "timestamp_utc", d->timestamp[0] ? json_string(d->timestamp) : json_null());
    json_object_set_new(doc, "threads", info->threads ? json_integer(info->threads) : json_null());
    json_t *inputs = json_array();
    for (size_t i = 0; i < d->ninputs; i++) {
        const npuc__report_input *in = &d->inputs[i];
        json_t *o = json_object();
        json_object_set_new(o, "path", jstr(in->path));
        json_object_set_new(o, "size", in->ok ? json_integer((json_int_t)in->size) : json_null());
        json_object_set_new(o, "sha256", in->ok ? json_string(in->sha256) : json_null());
        json_array_append_new(inputs, o);
    }
    json_object_set_new(doc, "inputs", inputs);
    json_object_set_new(doc, "output", jstr(info->output));
    json_t *params = NULL;
    if (info->params_json) params = json_loads(info->params_json, 0, NULL);
    json_object_set_new(doc, "params", params && json_is_object(params) ? params : json_object());
    if (params && !json_is_object(params)) json_decref(params);
    json_object_set_new(doc, "warn_sqnr_db", isnan(info->warn_sqnr_db) ? json_null() : jnum(info->warn_sqnr_db));
    json_t *tens = json_array();
    for (size_t i = 0; i < s->nrecords; i++) {
        const npuc_tensor_record *r = &s->records[i];
        json_t *t = json_object(), *shape = json_array(), *extra = json_object();
        for (int k = 0; k < r->rank; k++) json_array_append_new(shape, json_integer(r->shape[k]));
        for (size_t e = 0; e < r->nextra; e++) json_object_set_new(extra, r->extra[e].key, jextra(&r->extra[e]));
        json_object_set_new(t, "name", jstr(r->name));
        json_object_set_new(t, "dtype", json_string(npuc_dtype_name(r->dtype)));
        json_object_set_new(t, "shape", shape);
        json_object_set_new(t, "action", json_string(npuc_action_name(r->action)));
        json_object_set_new(t, "scheme", jstr(r->scheme));
        json_object_set_new(t, "bytes_before", json_integer((json_int_t)r->bytes_before));
        json_object_set_new(t, "bytes_after", json_integer((json_int_t)r->bytes_after));
        json_object_set_new(t, "params_before", json_integer((json_int_t)r->params_before));
        json_object_set_new(t, "params_after", json_integer((json_int_t)r->params_after));
        json_object_set_new(t, "error", r->has_error ? error_json(&r->err) : json_null());
        json_object_set_new(t, "output_rel_error", r->has_out_error ? jnum(r->out_rel_error) : json_null());
        json_object_set_new(t, "extra", extra);
        json_object_set_new(t, "compared", r->compared[0] ? json_string(r->compared) : json_null());
        json_object_set_new(t, "note", jstr(r->note));
        json_object_set_new(t, "histogram", r->hist ? hist_json(r->hist) : json_null());
        json_array_append_new(tens, t);
    }
    json_object_set_new(doc, "tensors", tens);
    json_t *tot = json_object(), *counts = json_object();
    for (int a = 0; a < NPUC_ACTION_COUNT; a++)
        json_object_set_new(counts, npuc_action_name((npuc_action)a), json_integer((json_int_t)s->count[a]));
    json_object_set_new(tot, "tensors", json_integer((json_int_t)s->nrecords));
    json_object_set_new(tot, "counts", counts);
    json_object_set_new(tot, "bytes_before", json_integer((json_int_t)s->bytes_before));
    json_object_set_new(tot, "bytes_after", json_integer((json_int_t)s->bytes_after));
    json_object_set_new(tot, "params_before", json_integer((json_int_t)s->params_before));
    json_object_set_new(tot, "params_after", json_integer((json_int_t)s->params_after));
    json_object_set_new(tot, "ratio", jnum(npuc__ratio(s->bytes_before, s->bytes_after)));
    json_object_set_new(tot, "weighted_sqnr_db", jnum(s->weighted_sqnr_db));
    json_object_set_new(tot, "output_rel_error", s->n_out_error ? jnum(s->out_rel_error) : json_null());
    json_object_set_new(tot, "max_output_rel_error", s->n_out_error ? jnum(s->max_out_rel_error) : json_null());
    json_object_set_new(doc, "totals", tot);
    json_t *warn = json_array();
    for (size_t i = 0; i < d->nwarnings; i++) json_array_append_new(warn, jstr(d->warnings[i]));
    json_object_set_new(doc, "warnings", warn);
    return doc;
}

npuc_status npuc__report_json(npuc_ctx *ctx, FILE *f, const npuc_summary *s, const npuc_report_info *info,
                              const npuc__report_doc *d) {
    json_t *doc = report_json_doc(s, info, d);
    if (!doc) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    int rc = json_dumpf(doc, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(doc);
    fputc('\n', f);
    if (rc != 0) return npuc_fail(ctx, NPUC_ERR_IO, "writing the JSON report: %s", strerror(errno));
    return NPUC_OK;
}
