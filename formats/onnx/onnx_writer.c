/*
 * onnx_writer.c - the ONNX writer: the same graph with new weight values.
 *
 * The graph comes from the "onnx.model" metadata entry the reader recorded
 * (onnx_format.h), carried over by convert and by every pass like any
 * other metadata, also through a safetensors file.  begin() walks it
 * (onnx_walk.c) and puts in each weight's place the tensor declared under
 * its ONNX name: the TensorProto keeps its other fields as they were and
 * gets raw_data, or, for external data, data_location EXTERNAL and
 * location/offset/length pointing into "<output>.data".  The writer only
 * changes values: a declared tensor whose dtype or shape differs from the
 * graph's, a weight with no declared tensor, or a declared tensor the graph
 * does not have is refused, as are encoded artifacts ONNX cannot express
 * (quantized weights become DequantizeLinear nodes: onnx_qdq.c; fold-bn's
 * removed nodes arrive as an "onnx.model" entry the row's graph_write hook
 * rewrote: onnx_fold.c; lowrank's split MatMul / Gemm nodes the same way,
 * onnx_split.c, whose realised "lowrank" entries leave the stored "npuc"
 * description).  Without an "onnx.model" entry
 * (a safetensors source) the output is a model whose graph holds the
 * tensors as initializers and no nodes.
 *
 * Every metadata entry but "onnx.model" becomes a metadata_props entry.
 *
 * The layout of the output is known before any payload arrives (sizes are
 * declared), so begin() writes the protobuf with holes where raw_data goes
 * and write() fills each hole with pwrite: memory holds the graph, never
 * the weights.  External data is used when the "external-data" option says
 * "always", or when the model would otherwise reach 2 GiB (protobuf's
 * limit); then every tensor of 1 KiB or more goes to the data file, each at
 * an offset aligned to 4096 bytes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "onnx_format.h"
#include "onnx_qdq.h"

#define OW_EXT_MIN 1024u   /* tensors this size and up go external */
#define OW_EXT_ALIGN 4096u /* offsets in the data file */

typedef struct ow_state {
    int fd, dfd;
    char *dpath, *dtmp, *dloc; /* the data file, its temporary name, its location */
    uint64_t *off;             /* per declared tensor: offset in its file */
    unsigned char *ext;        /* per declared tensor: 1 in the data file */
    unsigned char *used;
    size_t *order;             /* declared tensors sorted by name */
    uint64_t dsize;
    int external, from_graph;
    npuc__oq_plan *qdq;        /* quantized weights as graph edits, or NULL */
} ow_state;


static int cmp_idx(const void *a, const void *b, void *w) {
    const npuc_writer *wr = w;
    return strcmp(wr->t[*(const size_t *)a].name, wr->t[*(const size_t *)b].name);
}

/* The declared tensor named name, or -1. */
static long find_tensor(const npuc_writer *w, const ow_state *s, const char *name) {
    size_t lo = 0, hi = w->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(w->t[s->order[mid]].name, name);
        if (c == 0) return (long)s->order[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

/* The data of declared tensor i into out: raw_data with a hole, or
 * EXTERNAL with its place in the data file. */
static void put_data_n(npuc_writer *w, ow_state *s, size_t i, uint64_t nbytes, npuc__ox_buf *out) {
    if (s->external && nbytes >= OW_EXT_MIN) {
        uint64_t at = (s->dsize + OW_EXT_ALIGN - 1) / OW_EXT_ALIGN * OW_EXT_ALIGN;
        s->off[i] = at;
        s->ext[i] = 1;
        s->dsize = at + nbytes;
        char num[24];
        const char *kv[3][2] = {{"location", s->dloc}, {"offset", NULL}, {"length", NULL}};
        for (int k = 0; k < 3; k++) {
            npuc__ox_buf e = {0};
            npuc__ox_put_bytes(&e, 1, kv[k][0], strlen(kv[k][0]));
            const char *v = kv[k][1];
            if (!v) {
                snprintf(num, sizeof num, "%" PRIu64, k == 1 ? at : nbytes);
                v = num;
            }
            npuc__ox_put_bytes(&e, 2, v, strlen(v));
            npuc__ox_put_sub(out, 13, &e);
        }
        npuc__ox_put_tag(out, 14, 0);
        npuc__ox_put_varint(out, 1);
    } else {
        npuc__ox_put_hole(out, 9, nbytes, i);
    }
}

static void put_data(npuc_writer *w, ow_state *s, size_t i, npuc__ox_buf *out) {
    put_data_n(w, s, i, w->t[i].nbytes, out);
}

/* The plan's (onnx_qdq.h) way to place a tensor's bytes. */
static void qdq_put(void *user, size_t i, uint64_t size, npuc__ox_buf *out) {
    npuc_writer *w = user;
    put_data_n(w, w->be_state, i, size, out);
}

/* 1 when the TensorProto msg is of a type the reader does not list as a
 * tensor (INT4, STRING, ...): its values stayed in the graph entry. */
static int unlisted(const unsigned char *msg, uint64_t len) {
    const unsigned char *q = msg, *end = msg + len;
    npuc__ox_field f;
    npuc_dtype dt;
    uint32_t field;
    while (q < end) {
        if (npuc__ox_next(&q, end, &f)) return 0;
        if (f.num == 2 && f.wt == 0) return npuc__ox_dtype(f.v, &dt, &field) != 0;
    }
    return 0;
}

static npuc_status wr_weight(npuc__ox_walk *wk, const npuc__ox_weight *wt, npuc__ox_buf *out) {
    npuc_writer *w = wk->user;
    ow_state *s = w->be_state;
    if (npuc__oq_replaces(s->qdq, wt->name)) {
        wk->drop = 1; /* the plan wrote its integer initializer */
        return NPUC_OK;
    }
    long i = find_tensor(w, s, wt->name);
    if (i < 0 && unlisted(wt->msg, wt->len)) { /* the graph entry kept its values (onnx_reader.c) */
        npuc__ox_put(out, wt->msg, (size_t)wt->len);
        return NPUC_OK;
    }
    if (i < 0)
        return npuc_fail(wk->ctx, NPUC_ERR_UNSUPPORTED,
                         "%s: weight '%s' of the ONNX graph has no tensor in the output (removing weights is a graph "
                         "edit npuc does not write to ONNX yet)", w->path, wt->name);
    const npuc_tensor_info *t = &w->t[i];
    if (s->used[i]++)
        return npuc_fail(wk->ctx, NPUC_ERR_FORMAT, "%s: the ONNX graph names two weights '%s'", w->path, wt->name);
    /* The graph's data type and dims must be the declared tensor's. */
    const unsigned char *q = wt->msg, *end = wt->msg + wt->len;
    npuc__ox_field f;
    const char *why;
    uint64_t dtype = 0;
    int rank = 0, same = 1;
    while (q < end) {
        if ((why = npuc__ox_next(&q, end, &f))) return npuc__ox_bad(wk, q, "TensorProto", why);
        if (f.num == 2 && f.wt == 0) dtype = f.v;
        if (f.num == 1 && f.wt == 0) {
            same &= rank < t->rank && (uint64_t)t->shape[rank] == f.v;
            rank++;
        } else if (f.num == 1 && f.wt == 2) {
            const unsigned char *v = f.data, *vend = f.data + f.len;
            uint64_t x;
            while (v < vend) {
                if ((why = npuc__ox_varint(&v, vend, &x))) return npuc__ox_bad(wk, f.start, "TensorProto.dims", why);
                same &= rank < t->rank && (uint64_t)t->shape[rank] == x;
                rank++;
            }
        }
    }
    if (!same || rank != t->rank || dtype != npuc__ox_type_of(t->dtype))
        return npuc_fail(wk->ctx, NPUC_ERR_UNSUPPORTED,
                         "%s: tensor '%s': the output's %s shape or dtype differs from the ONNX graph's (changing a "
                         "weight's shape or type is a graph edit npuc does not write to ONNX yet)",
                         w->path, wt->name, npuc_dtype_name(t->dtype));
    npuc__ox_put_tensor_meta(out, wt->msg, wt->len);
    put_data(w, s, (size_t)i, out);
    return NPUC_OK;
}

static npuc_status wr_meta(npuc__ox_walk *wk, const char *k, const char *v, int *keep) {
    (void)wk;
    (void)k;
    (void)v;
    *keep = 1; /* entries npuc could not name (the reader kept them) */
    return NPUC_OK;
}

/* A graph without nodes holding every declared tensor (no "onnx.model"). */
static void bare_model(npuc_writer *w, ow_state *s, npuc__ox_buf *out) {
    npuc__ox_put_tag(out, 1, 0);
    npuc__ox_put_varint(out, 8); /* ir_version 8: opsets up to 18 */
    npuc__ox_put_bytes(out, 2, "npuc", 4);
    npuc__ox_buf op = {0}, g = {0};
    npuc__ox_put_bytes(&op, 1, "", 0);
    npuc__ox_put_tag(&op, 2, 0);
    npuc__ox_put_varint(&op, 17);
    npuc__ox_put_sub(out, 8, &op);
    npuc__ox_put_bytes(&g, 2, "npuc", 4);
    for (size_t i = 0; i < w->n; i++) {
        const npuc_tensor_info *t = &w->t[i];
        npuc__ox_buf tb = {0}, dims = {0};
        for (int k = 0; k < t->rank; k++) npuc__ox_put_varint(&dims, (uint64_t)t->shape[k]);
        if (t->rank) npuc__ox_put_sub(&tb, 1, &dims);
        else npuc__ox_free(&dims);
        npuc__ox_put_tag(&tb, 2, 0);
        npuc__ox_put_varint(&tb, npuc__ox_type_of(t->dtype));
        npuc__ox_put_bytes(&tb, 8, t->name, strlen(t->name));
        put_data(w, s, i, &tb);
        npuc__ox_put_sub(&g, 5, &tb);
        s->used[i] = 1;
    }
    npuc__ox_put_sub(out, 7, &g);
}

static npuc_status write_all(npuc_writer *w, int fd, const void *p, uint64_t n, uint64_t off, const char *what) {
    const unsigned char *c = p;
    while (n) {
        size_t k = n > (1u << 30) ? (1u << 30) : (size_t)n;
        ssize_t r = pwrite(fd, c, k, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return npuc_fail(w->ctx, NPUC_ERR_IO, "%s: writing %s: %s", w->path, what, r < 0 ? strerror(errno) : "no progress");
        c += r;
        off += (uint64_t)r;
        n -= (uint64_t)r;
    }
    return NPUC_OK;
}


static npuc_status ow_begin(npuc_writer *w) {
    ow_state *s = calloc(1, sizeof *s);
    if (!s) return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
    s->fd = s->dfd = -1;
    w->be_state = s;
    npuc_status st = NPUC_OK;
    unsigned char *skel = NULL;
    size_t nskel = 0;
    npuc__ox_buf out = {0};
    const char *graph = NULL, *art = NULL;
    char *art_split = NULL; /* art without the entries split nodes realise */
    int art_gone = 0;
    for (size_t i = 0; i < w->nmeta; i++) {
        if (strcmp(w->meta_k[i], NPUC__ONNX_MODEL_KEY) == 0) graph = w->meta_v[i];
        if (strcmp(w->meta_k[i], "npuc") == 0) art = w->meta_v[i];
    }
    if (graph && npuc__ox_b64_decode(graph, &skel, &nskel) != 0)
        return npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: the \"%s\" metadata entry is not base64", w->path,
                         NPUC__ONNX_MODEL_KEY);
    s->from_graph = graph != NULL;
    s->off = calloc(w->n + 1, sizeof *s->off);
    s->ext = calloc(w->n + 1, 1);
    s->used = calloc(w->n + 1, 1);
    s->order = malloc((w->n + 1) * sizeof *s->order);
    size_t plen = strlen(w->path);
    s->dpath = malloc(plen + 6);
    s->dtmp = malloc(plen + 40);
    if (!s->off || !s->ext || !s->used || !s->order || !s->dpath || !s->dtmp) {
        st = npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
        goto done;
    }
    snprintf(s->dpath, plen + 6, "%s.data", w->path);
    snprintf(s->dtmp, plen + 40, "%s.data.npuc-%ld", w->path, (long)getpid());
    const char *base = strrchr(s->dpath, '/');
    s->dloc = (char *)(base ? base + 1 : s->dpath);
    for (size_t i = 0; i < w->n; i++) s->order[i] = i;
    qsort_r(s->order, w->n, sizeof *s->order, cmp_idx, w);
    /* External data: asked for, or needed to stay below 2 GiB. */
    uint64_t total = nskel + 4096;
    for (size_t i = 0; i < w->n; i++) total += w->t[i].nbytes + 64;
    for (size_t i = 0; i < w->nmeta; i++) total += strlen(w->meta_k[i]) + strlen(w->meta_v[i]) + 16;
    const char *opt = npuc__writer_opt(w, "external-data");
    s->external = (opt && strcmp(opt, "always") == 0) || total > NPUC__ONNX_PROTO_MAX;

    if (skel) {
        /* lowrank entries the graph realises (onnx_split.c) are not described */
        if (art &&
            (st = npuc__onnx_split_artifact(w->ctx, w->path, skel, nskel, art, &art_split, &art_gone)) != NPUC_OK)
            goto done;
        if (art_gone) art = NULL;
        else if (art_split) art = art_split;
        if ((st = npuc__oq_plan_make(w, skel, nskel, art, qdq_put, w, &s->qdq)) != NPUC_OK) goto done;
        npuc__ox_walk wk = {.ctx = w->ctx, .path = w->path, .base = skel, .weight = wr_weight, .meta = wr_meta, .user = w};
        if (s->qdq) npuc__oq_hooks(s->qdq, &wk);
        if ((st = npuc__ox_walk_model(&wk, skel, nskel, &out)) != NPUC_OK) goto done;
        if (s->qdq && (st = npuc__oq_check(s->qdq)) != NPUC_OK) goto done;
        for (size_t i = 0; i < w->n; i++)
            if (!s->used[i] && !npuc__oq_owns(s->qdq, i)) {
                st = npuc_fail(w->ctx, NPUC_ERR_UNSUPPORTED,
                               "%s: tensor '%s' is not a weight of the ONNX graph (adding weights is a graph edit "
                               "npuc does not write to ONNX yet)", w->path, w->t[i].name);
                goto done;
            }
    } else {
        /* Quantized tensors without a graph: refused by the plan. */
        if (art && (st = npuc__oq_plan_make(w, NULL, 0, art, qdq_put, w, &s->qdq)) != NPUC_OK) goto done;
        bare_model(w, s, &out);
    }
    for (size_t i = 0; i < w->nmeta; i++) {
        if (strcmp(w->meta_k[i], NPUC__ONNX_MODEL_KEY) == 0) continue;
        if (strcmp(w->meta_k[i], "npuc") == 0 && art_gone) continue;
        char *v = NULL;
        const char *mv = strcmp(w->meta_k[i], "npuc") == 0 && art_split ? art_split : w->meta_v[i];
        if (s->qdq && strcmp(w->meta_k[i], "npuc") == 0 && !(v = npuc__oq_artifact(s->qdq, mv))) {
            st = npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
            goto done;
        }
        const char *val = v ? v : mv;
        npuc__ox_buf e = {0};
        npuc__ox_put_bytes(&e, 1, w->meta_k[i], strlen(w->meta_k[i]));
        npuc__ox_put_bytes(&e, 2, val, strlen(val));
        npuc__ox_put_sub(&out, 14, &e);
        free(v);
    }
    if (out.oom) { st = npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
    if (npuc__ox_size(&out) > NPUC__ONNX_PROTO_MAX) {
        st = npuc_fail(w->ctx, NPUC_ERR_UNSUPPORTED, "%s: the model would be %" PRIu64 " bytes, over protobuf's 2 GiB "
                       "limit even with its tensors in external data", w->path, npuc__ox_size(&out));
        goto done;
    }
    s->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (s->fd < 0) {
        st = npuc_fail(w->ctx, NPUC_ERR_IO, "%s: cannot create %s: %s", w->path, w->tmp, strerror(errno));
        goto done;
    }
    /* The bytes between the holes; each hole's file offset for write(). */
    uint64_t pos = 0, fpos = 0;
    for (size_t h = 0; h <= out.nh && st == NPUC_OK; h++) {
        uint64_t upto = h < out.nh ? out.h[h].pos : out.n;
        st = write_all(w, s->fd, out.p + pos, upto - pos, fpos, "the graph");
        fpos += upto - pos;
        pos = upto;
        if (h < out.nh) {
            s->off[out.h[h].idx] = fpos;
            fpos += out.h[h].size;
        }
    }
    if (st == NPUC_OK && ftruncate(s->fd, (off_t)fpos) != 0)
        st = npuc_fail(w->ctx, NPUC_ERR_IO, "%s: setting the size: %s", w->path, strerror(errno));
    if (st == NPUC_OK && *npuc__oq_summary(s->qdq)) npuc__ctx_warn(w->ctx, "%s", npuc__oq_summary(s->qdq));
    if (st == NPUC_OK && s->external) {
        s->dfd = open(s->dtmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (s->dfd < 0) st = npuc_fail(w->ctx, NPUC_ERR_IO, "%s: cannot create %s: %s", w->path, s->dtmp, strerror(errno));
        else (void)npuc__tempfiles_track(s->dtmp);
        if (st == NPUC_OK && ftruncate(s->dfd, (off_t)s->dsize) != 0)
            st = npuc_fail(w->ctx, NPUC_ERR_IO, "%s: setting the size: %s", s->dpath, strerror(errno));
    }
done:
    npuc__ox_free(&out);
    free(skel);
    free(art_split);
    return st;
}

static npuc_status ow_write(npuc_writer *w, size_t i, const void *data, uint64_t n) {
    ow_state *s = w->be_state;
    char what[128];
    snprintf(what, sizeof what, "tensor '%.100s'", w->t[i].name);
    const void *p = data;
    npuc_status st = npuc__oq_transform(s->qdq, i, data, n, &p, &n);
    if (st != NPUC_OK) return st;
    return write_all(w, s->ext[i] ? s->dfd : s->fd, p, n, s->off[i], what);
}

static void ow_free(npuc_writer *w) {
    ow_state *s = w->be_state;
    if (!s) return;
    free(s->off);
    free(s->ext);
    free(s->used);
    free(s->order);
    free(s->dpath);
    free(s->dtmp);
    npuc__oq_free(s->qdq);
    free(s);
    w->be_state = NULL;
}

static npuc_status ow_finish(npuc_writer *w) {
    ow_state *s = w->be_state;
    npuc_status st = NPUC_OK;
    if (fsync(s->fd) != 0) st = npuc_fail(w->ctx, NPUC_ERR_IO, "%s: fsync: %s", w->path, strerror(errno));
    if (close(s->fd) != 0 && st == NPUC_OK) st = npuc_fail(w->ctx, NPUC_ERR_IO, "%s: close: %s", w->path, strerror(errno));
    s->fd = -1;
    if (s->dfd >= 0) {
        if (st == NPUC_OK && fsync(s->dfd) != 0) st = npuc_fail(w->ctx, NPUC_ERR_IO, "%s: fsync: %s", s->dpath, strerror(errno));
        if (close(s->dfd) != 0 && st == NPUC_OK) st = npuc_fail(w->ctx, NPUC_ERR_IO, "%s: close: %s", s->dpath, strerror(errno));
        s->dfd = -1;
        if (st == NPUC_OK && rename(s->dtmp, s->dpath) != 0)
            st = npuc_fail(w->ctx, NPUC_ERR_IO, "%s: %s", s->dpath, strerror(errno));
        if (st != NPUC_OK) unlink(s->dtmp);
        npuc__tempfiles_untrack(s->dtmp);
    }
    ow_free(w);
    return st;
}

static void ow_abort(npuc_writer *w) {
    ow_state *s = w->be_state;
    if (!s) return;
    if (s->fd >= 0) close(s->fd);
    if (s->dfd >= 0) {
        close(s->dfd);
        unlink(s->dtmp);
        npuc__tempfiles_untrack(s->dtmp);
    }
    ow_free(w);
}

const npuc_writer_backend npuc__onnx_writer_backend = {ow_begin, ow_write, ow_finish, ow_abort, 0};
