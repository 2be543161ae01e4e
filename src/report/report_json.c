/*
 * report_json.c - the "npuc.report/1" JSON document (docs/report.md).
 * Non-finite numbers are encoded as the strings "inf", "-inf" and "nan".
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "report/report_internal.h"

static json_t *jnum(double v) {
    if (isnan(v)) return json_string("nan");
    if (isinf(v)) return json_string(v > 0 ? "inf" : "-inf");
    return json_real(v);
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

/* SHA-256 of a file as lower-case hex, or NULL when it cannot be read. */
static char *sha256_file(const char *path, uint64_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned char *buf = malloc(1 << 20);
    char *hex = NULL;
    if (md && buf && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1) {
        size_t k;
        uint64_t total = 0;
        int ok = 1;
        while ((k = fread(buf, 1, 1 << 20, f)) > 0) {
            total += k;
            if (EVP_DigestUpdate(md, buf, k) != 1) { ok = 0; break; }
        }
        unsigned char dig[EVP_MAX_MD_SIZE];
        unsigned int dl = 0;
        if (ok && !ferror(f) && EVP_DigestFinal_ex(md, dig, &dl) == 1 && (hex = malloc(2 * dl + 1))) {
            for (unsigned int i = 0; i < dl; i++) snprintf(hex + 2 * i, 3, "%02x", dig[i]);
            *size = total;
        }
    }
    EVP_MD_CTX_free(md);
    free(buf);
    fclose(f);
    return hex;
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

json_t *npuc__report_json_doc(const npuc_summary *s, const npuc_report_info *info);

json_t *npuc__report_json_doc(const npuc_summary *s, const npuc_report_info *info) {
    json_t *doc = json_object();
    json_object_set_new(doc, "schema", json_string("npuc.report/1"));
    json_object_set_new(doc, "npuc_version", json_string(npuc_version()));
#ifdef NPUC_GIT_COMMIT
    json_object_set_new(doc, "git_commit", json_string(NPUC_GIT_COMMIT));
#else
    json_object_set_new(doc, "git_commit", json_null());
#endif
    json_object_set_new(doc, "pass", json_string(s->pass));
    json_object_set_new(doc, "command", jstr(info->command_line));
    if (info->timestamp) {
        char ts[32];
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
        json_object_set_new(doc, "timestamp_utc", json_string(ts));
    } else {
        json_object_set_new(doc, "timestamp_utc", json_null());
    }
    json_object_set_new(doc, "threads", info->threads ? json_integer(info->threads) : json_null());
    json_t *inputs = json_array();
    for (size_t i = 0; i < info->ninputs; i++) {
        uint64_t size = 0;
        char *hex = sha256_file(info->inputs[i], &size);
        json_t *in = json_object();
        json_object_set_new(in, "path", jstr(info->inputs[i]));
        json_object_set_new(in, "size", hex ? json_integer((json_int_t)size) : json_null());
        json_object_set_new(in, "sha256", hex ? json_string(hex) : json_null());
        free(hex);
        json_array_append_new(inputs, in);
    }
    json_object_set_new(doc, "inputs", inputs);
    json_object_set_new(doc, "output", jstr(info->output));
    json_t *params = NULL;
    if (info->params_json) params = json_loads(info->params_json, 0, NULL);
    json_object_set_new(doc, "params", params ? params : json_object());
    json_t *tens = json_array();
    for (size_t i = 0; i < s->nrecords; i++) {
        const npuc_tensor_record *r = &s->records[i];
        json_t *t = json_object(), *shape = json_array(), *extra = json_object();
        for (int d = 0; d < r->rank; d++) json_array_append_new(shape, json_integer(r->shape[d]));
        for (size_t e = 0; e < r->nextra; e++) json_object_set_new(extra, r->extra[e].key, jnum(r->extra[e].value));
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
        json_object_set_new(t, "extra", extra);
        json_object_set_new(t, "note", jstr(r->note));
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
    json_object_set_new(tot, "ratio", jnum(s->bytes_after ? (double)s->bytes_before / (double)s->bytes_after : NAN));
    json_object_set_new(tot, "weighted_sqnr_db", jnum(s->weighted_sqnr_db));
    json_object_set_new(doc, "totals", tot);
    json_t *warn = json_array();
    for (size_t i = 0; i < s->nwarnings; i++) json_array_append_new(warn, jstr(s->warnings[i]));
    json_object_set_new(doc, "warnings", warn);
    return doc;
}

npuc_status npuc__report_json(npuc_ctx *ctx, FILE *f, const npuc_summary *s, const npuc_report_info *info) {
    json_t *doc = npuc__report_json_doc(s, info);
    if (!doc) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    int rc = json_dumpf(doc, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(doc);
    fputc('\n', f);
    if (rc != 0) return npuc_fail(ctx, NPUC_ERR_IO, "writing the JSON report: %s", strerror(errno));
    return NPUC_OK;
}
