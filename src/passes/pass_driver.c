/*
 * pass_driver.c - what every pass driver shares (see pass_driver.h).
 */
#include <stdlib.h>
#include <string.h>

#include "codecs/artifact_meta.h"
#include "codecs/codec.h"
#include "graph/graph.h"
#include "passes/pass_driver.h"
#include "passes/pass_gate.h"
#include "passes/pass_util.h"
#include "pipeline/readahead.h"

static npuc_status begin(npuc__drive *d, npuc_ctx *ctx, npuc_model *m, const npuc__sink *sink, const char *pass,
                         size_t nrecords, npuc__on_tensor_fn on_tensor, void *user, npuc_summary *sum) {
    memset(d, 0, sizeof *d);
    d->ctx = ctx;
    d->m = m;
    d->sink = *sink;
    d->sum = sum;
    d->on_tensor = on_tensor;
    d->user = user;
    if (npuc_summary_init(sum, pass, nrecords) != NPUC_OK) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    return NPUC_OK;
}

npuc_status npuc__drive_begin(npuc__drive *d, npuc_ctx *ctx, npuc_model *m, const npuc__sink *sink,
                              const char *pass, npuc__on_tensor_fn on_tensor, void *user, npuc_summary *sum) {
    const size_t n = npuc_model_count(m);
    npuc_status st = begin(d, ctx, m, sink, pass, n, on_tensor, user, sum);
    for (size_t i = 0; i < n && st == NPUC_OK; i++)
        if (npuc_record_from_tensor(&sum->records[i], npuc_model_tensor(m, i)) != NPUC_OK)
            st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    return st;
}

npuc_status npuc__drive_begin_blank(npuc__drive *d, npuc_ctx *ctx, npuc_model *m, const npuc__sink *sink,
                                    const char *pass, size_t nrecords, npuc__on_tensor_fn on_tensor, void *user,
                                    npuc_summary *sum) {
    return begin(d, ctx, m, sink, pass, nrecords, on_tensor, user, sum);
}

/* The entries a pass does not carry over by default: the artifact
 * description it rebuilds, and the layouts the writer records itself. */
static npuc_status default_meta(void *u, const char *key, const char **value) {
    (void)u;
    if (strcmp(key, NPUC_ART_KEY) == 0 || strcmp(key, "npuc.layout") == 0) *value = NULL;
    return NPUC_OK;
}

npuc_status npuc__drive_open(npuc__drive *d, npuc__meta_fn meta, void *u) {
    if (!d->sink.path) return NPUC_OK;
    npuc_status st = d->sink.open ? d->sink.open(d->sink.state, d->ctx, d->sink.path, d->sink.write, &d->w)
                                  : npuc_writer_open(d->ctx, d->sink.path, d->sink.write, &d->w);
    if (!meta) meta = default_meta;
    for (size_t i = 0; i < npuc_model_meta_count(d->m) && st == NPUC_OK; i++) {
        const char *k, *v;
        npuc_model_meta_at(d->m, i, &k, &v);
        if ((st = meta(u, k, &v)) == NPUC_OK && v) st = npuc_writer_meta(d->w, k, v);
    }
    return st;
}

npuc_status npuc__drive_declare(npuc__drive *d, const npuc_tensor_info *info) {
    return d->w ? npuc_writer_declare(d->w, info) : NPUC_OK;
}

npuc_status npuc__drive_declare_inputs(npuc__drive *d) {
    npuc_status st = NPUC_OK;
    for (size_t i = 0; i < npuc_model_count(d->m) && st == NPUC_OK; i++)
        st = npuc__drive_declare(d, npuc_model_tensor(d->m, i));
    return st;
}

npuc_status npuc__drive_artifact(npuc__drive *d) {
    json_decref(d->art);
    d->art = npuc__art_new();
    return d->art ? NPUC_OK : npuc_fail(d->ctx, NPUC_ERR_NOMEM, "out of memory");
}

npuc_status npuc__drive_describe(npuc__drive *d) {
    if (!d->w || !json_object_size(json_object_get(d->art, "tensors"))) return NPUC_OK;
    char *s = npuc__art_dumps(d->art);
    if (!s) return npuc_fail(d->ctx, NPUC_ERR_NOMEM, "out of memory");
    npuc_status st = npuc_writer_meta(d->w, NPUC_ART_KEY, s);
    free(s);
    return st;
}

void npuc__drive_readahead(npuc__drive *d, const unsigned char *want, size_t ahead) {
    const char *env = getenv("NPUC_READAHEAD");
    if (d->ra || (env && strcmp(env, "0") == 0)) return;
    d->ra = npuc__readahead_start(d->m, want, ahead, npuc__threads(d->ctx), env && strcmp(env, "1") == 0);
}

void npuc__drive_at(npuc__drive *d, size_t i) { npuc__readahead_at(d->ra, i); }

npuc_status npuc__drive_write(npuc__drive *d, const void *data, uint64_t nbytes) {
    return d->w ? npuc_writer_write(d->w, data, nbytes) : NPUC_OK;
}

npuc_status npuc__drive_pass_through(npuc__drive *d, size_t i) {
    if (!d->w) return NPUC_OK;
    const void *p;
    npuc_status st = npuc_model_data(d->ctx, d->m, i, &p);
    if (st != NPUC_OK) return st;
    st = npuc_writer_write(d->w, p, npuc_model_tensor(d->m, i)->nbytes);
    npuc_model_release(d->m, i);
    return st;
}

void npuc__drive_done(npuc__drive *d, size_t rec) {
    if (d->on_tensor) d->on_tensor(d->user, rec, d->sum->nrecords, &d->sum->records[rec]);
}

npuc_status npuc__drive_end(npuc__drive *d, npuc_status st) {
    npuc__readahead_stop(d->ra);
    d->ra = NULL;
    json_decref(d->art);
    d->art = NULL;
    /* Never publish an inconsistent model (graph_consistency.c). */
    if (st == NPUC_OK && d->w)
        st = npuc__graph_check_declared(d->ctx, d->w->path, d->w->t, d->w->n, d->w->meta_k, d->w->meta_v, d->w->nmeta);
    if (st == NPUC_OK) {
        npuc_summary_finish(d->sum);
        /* The quality gates, once the totals are known and before anything
         * is published: a failed gate discards the output and keeps the
         * summary for the report (pass_gate.h). */
        const npuc_pass *p = npuc_pass_find(d->sum->pass);
        const npuc__gate_scope sc = {npuc_model_path(d->m), d->sink.path, 0, "",
                                     !(p && (p->flags & NPUC_PASS_NO_SQNR_WARN))};
        st = npuc__gate_check(d->ctx, d->sum, &sc);
        if (st == NPUC_OK && d->w) {
            st = npuc_writer_finish(d->w); /* frees the writer whatever happens */
            d->w = NULL;
        }
    }
    if (st != NPUC_OK) {
        npuc_writer_abort(d->w);
        d->w = NULL;
        if (d->sum && st != NPUC_ERR_GATE) npuc_summary_free(d->sum);
    }
    return st;
}

npuc_status npuc__reject_artifact(npuc_ctx *ctx, npuc_model *m, const char *what) {
    json_t *prev = NULL;
    npuc_status st = npuc__art_load(ctx, m, &prev);
    if (st != NPUC_OK) return st;
    if (prev) {
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(prev, "tensors"), k, v) {
            const npuc__codec *c = npuc__codec_of(v); /* dense encodings (fake_quant) are plain tensors */
            if (!c || !c->dense) {
                st = npuc_fail(ctx, NPUC_ERR_ARG, "%s: already an npuc artifact (tensor '%s' is encoded); "
                               "decompress it %s%s", npuc_model_path(m), k, what ? "before " : "first",
                               what ? what : "");
                break;
            }
        }
        json_decref(prev);
    }
    return st;
}
