/*
 * pipe.c - an in-memory safetensors stream between two concurrent passes
 * (see pipe.h).  One mutex and one condition variable per pipe guard
 * everything.  Payloads are copied once, from the producer's buffer into a
 * block the consumer reads in place; when the consumer releases it the
 * block goes back to a small free list for the next payloads, so a run does
 * not map and fault in fresh pages for every tensor (large malloc blocks
 * are mmapped, and freeing unmaps them).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/pipe.h"

#define NPUC_PIPE_SPARES 2

struct npuc__pipe {
    char *path;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *hdr;              /* the safetensors header (8-byte length + JSON) */
    uint64_t file_size;     /* what the file would have been */
    int header_ready;
    void **buf;             /* queued payloads by tensor index */
    uint64_t *len;
    unsigned char *taken;
    size_t n, written;      /* declared; written so far (in declaration order) */
    uint64_t queued, cap;
    size_t want;            /* tensor the consumer waits for, or SIZE_MAX */
    int producer_done, producer_failed, consumer_quit;
    int producer_induced, consumer_induced;
    void *spare[NPUC_PIPE_SPARES]; /* released blocks, for reuse */
    size_t spare_cap[NPUC_PIPE_SPARES];
    size_t *cap_of;         /* allocated size of buf[i] */
};

npuc_status npuc__pipe_new(npuc_ctx *ctx, const char *path, uint64_t cap, npuc__pipe **out) {
    *out = NULL;
    npuc__pipe *p = calloc(1, sizeof *p);
    if (!p || !(p->path = npuc__strdup(path))) {
        free(p);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->cap = cap;
    p->want = SIZE_MAX;
    *out = p;
    return NPUC_OK;
}

npuc_status npuc__pipe_sink_open(void *p, npuc_ctx *ctx, const char *path, const npuc_write_opts *write,
                                 npuc_writer **out) {
    *out = NULL;
    npuc_write_opts o = write ? *write : npuc_write_opts_defaults();
    npuc_format f = o.format != NPUC_FORMAT_AUTO ? o.format : npuc_format_from_path(path);
    if (f != NPUC_FORMAT_SAFETENSORS)
        return npuc_fail(ctx, NPUC_ERR_INTERNAL, "%s: a stream carries safetensors only", path);
    return npuc__writer_open_be(ctx, path, &o, &npuc__pipe_writer_backend, p, out);
}

void npuc__pipe_free(npuc__pipe *p) {
    if (!p) return;
    for (size_t i = 0; p->buf && i < p->n; i++) free(p->buf[i]);
    for (int k = 0; k < NPUC_PIPE_SPARES; k++) free(p->spare[k]);
    free(p->buf);
    free(p->cap_of);
    free(p->len);
    free(p->taken);
    free(p->hdr);
    free(p->path);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

void npuc__pipe_producer_exit(npuc__pipe *p) {
    pthread_mutex_lock(&p->mu);
    if (!p->producer_done) p->producer_failed = 1; /* returned without finishing its writer */
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void npuc__pipe_abandon(npuc__pipe *p) {
    pthread_mutex_lock(&p->mu);
    p->consumer_quit = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

int npuc__pipe_induced(const npuc__pipe *p, int side) {
    return side == 0 ? p->producer_induced : p->consumer_induced;
}

/* ------------------------------------------------------------ producer */

static npuc_status pw_begin(npuc_writer *w) {
    npuc__pipe *p = w->be_state;
    char *hdr;
    size_t hl;
    npuc_status st = npuc__st_header(w, &hdr, &hl);
    if (st != NPUC_OK) return st;
    uint64_t size = hl;
    for (size_t i = 0; i < w->n; i++)
        if (npuc_add_overflow(size, w->t[i].nbytes, &size)) {
            free(hdr);
            return npuc_fail(w->ctx, NPUC_ERR_OVERFLOW, "%s: total size overflows", w->path);
        }
    size_t n = w->n ? w->n : 1;
    void **buf = calloc(n, sizeof *buf);
    uint64_t *len = calloc(n, sizeof *len);
    size_t *cap_of = calloc(n, sizeof *cap_of);
    unsigned char *taken = calloc(n, 1);
    if (!buf || !len || !taken || !cap_of) {
        free(hdr); free(buf); free(len); free(taken); free(cap_of);
        return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_lock(&p->mu);
    p->hdr = hdr;
    p->file_size = size;
    p->buf = buf;
    p->len = len;
    p->cap_of = cap_of;
    p->taken = taken;
    p->n = w->n;
    p->header_ready = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return NPUC_OK;
}

static npuc_status pw_write(npuc_writer *w, size_t i, const void *data, uint64_t n) {
    npuc__pipe *p = w->be_state;
    if ((uint64_t)(size_t)n != n) return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "%s: tensor too large", w->path);
    /* The smallest released block that holds n bytes, else a new one. */
    void *copy = NULL;
    size_t cap = 0;
    pthread_mutex_lock(&p->mu);
    int best = -1;
    for (int k = 0; k < NPUC_PIPE_SPARES; k++)
        if (p->spare[k] && p->spare_cap[k] >= n && (best < 0 || p->spare_cap[k] < p->spare_cap[best])) best = k;
    if (best >= 0) {
        copy = p->spare[best];
        cap = p->spare_cap[best];
        p->spare[best] = NULL;
    }
    pthread_mutex_unlock(&p->mu);
    if (!copy) {
        cap = n ? (size_t)n : 1;
        copy = malloc(cap);
    }
    if (!copy) return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "%s: tensor '%s': out of memory", w->path, w->t[i].name);
    if (n) memcpy(copy, data, (size_t)n);
    pthread_mutex_lock(&p->mu);
    while (!p->consumer_quit && p->queued > 0 && p->queued + n > p->cap &&
           !(p->want != SIZE_MAX && p->want >= p->written))
        pthread_cond_wait(&p->cv, &p->mu);
    if (p->consumer_quit) {
        p->producer_induced = 1;
        pthread_mutex_unlock(&p->mu);
        free(copy);
        return npuc_fail(w->ctx, NPUC_ERR_IO, "%s: the next step stopped reading", w->path);
    }
    p->buf[i] = copy;
    p->cap_of[i] = cap;
    p->len[i] = n;
    p->queued += n;
    p->written = i + 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return NPUC_OK;
}

static npuc_status pw_finish(npuc_writer *w) {
    npuc__pipe *p = w->be_state;
    pthread_mutex_lock(&p->mu);
    p->producer_done = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return NPUC_OK;
}

static void pw_abort(npuc_writer *w) {
    npuc__pipe *p = w->be_state;
    pthread_mutex_lock(&p->mu);
    p->producer_failed = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

const npuc_writer_backend npuc__pipe_writer_backend = {pw_begin, pw_write, pw_finish, pw_abort, 1};

/* ------------------------------------------------------------ consumer */

static npuc_status pm_load(npuc_ctx *ctx, npuc_model *m, size_t i, void **data, int *owned) {
    npuc__pipe *p = m->be_state;
    npuc_status st = NPUC_OK;
    pthread_mutex_lock(&p->mu);
    if (i >= p->n || p->taken[i]) {
        st = npuc_fail(ctx, NPUC_ERR_INTERNAL, "%s: tensor '%s' read twice from a stream", p->path, m->t[i].name);
        goto done;
    }
    while (p->written <= i && !p->producer_failed && !p->producer_done) {
        p->want = i;
        pthread_cond_broadcast(&p->cv);
        pthread_cond_wait(&p->cv, &p->mu);
    }
    p->want = SIZE_MAX;
    if (p->written <= i) {
        p->consumer_induced = 1;
        st = npuc_fail(ctx, NPUC_ERR_IO, "%s: the previous step failed", p->path);
        goto done;
    }
    *data = p->buf[i]; /* stays p->buf[i] until pm_release hands it back */
    *owned = 0;
    p->taken[i] = 1;
    pthread_cond_broadcast(&p->cv);
done:
    pthread_mutex_unlock(&p->mu);
    return st;
}

/* The consumer is done with tensor i: its block becomes a spare (the
 * smallest one goes if all slots are full) and its bytes leave the queue. */
static void pm_release(npuc_model *m, size_t i, void *data) {
    npuc__pipe *p = m->be_state;
    pthread_mutex_lock(&p->mu);
    if (i < p->n && p->buf[i] == data) {
        int slot = -1;
        for (int k = 0; k < NPUC_PIPE_SPARES && slot < 0; k++)
            if (!p->spare[k]) slot = k;
        if (slot < 0) {
            slot = 0;
            for (int k = 1; k < NPUC_PIPE_SPARES; k++)
                if (p->spare_cap[k] < p->spare_cap[slot]) slot = k;
            if (p->spare_cap[slot] < p->cap_of[i]) {
                free(p->spare[slot]);
                p->spare[slot] = NULL;
            } else {
                slot = -1;
            }
        }
        if (slot >= 0) {
            p->spare[slot] = data;
            p->spare_cap[slot] = p->cap_of[i];
        } else {
            free(data);
        }
        p->buf[i] = NULL;
        p->queued -= p->len[i];
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
}

static void pm_close(npuc_model *m) {
    npuc__pipe *p = m->be_state;
    pthread_mutex_lock(&p->mu);
    int all = p->producer_done;
    for (size_t i = 0; all && i < p->n; i++) all = p->taken[i];
    if (!all) p->consumer_quit = 1;
    for (size_t i = 0; i < p->n; i++) {
        free(p->buf[i]);
        p->buf[i] = NULL;
    }
    p->queued = 0;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static const npuc_backend PIPE_MODEL_BACKEND = {pm_load, pm_close, pm_release, NULL, NULL};

npuc_status npuc__pipe_open(npuc_ctx *ctx, npuc__pipe *p, npuc_model **out) {
    *out = NULL;
    pthread_mutex_lock(&p->mu);
    while (!p->header_ready && !p->producer_failed) pthread_cond_wait(&p->cv, &p->mu);
    int ok = p->header_ready;
    if (!ok) p->consumer_induced = 1;
    pthread_mutex_unlock(&p->mu);
    if (!ok) return npuc_fail(ctx, NPUC_ERR_IO, "%s: the previous step failed", p->path);
    /* The header is complete and no longer changes once published. */
    npuc_status st = npuc__st_open_header(ctx, p->path, p->hdr, p->file_size, &PIPE_MODEL_BACKEND, p, out);
    if (st != NPUC_OK) {
        pthread_mutex_lock(&p->mu);
        p->consumer_quit = 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    return st;
}
