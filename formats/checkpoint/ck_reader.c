/*
 * ck_reader.c - a sharded checkpoint as one npuc_model.
 *
 * Opening validates the index (ck_index.c), then opens each shard in turn
 * with the safetensors reader (every header check of st_reader.c applies),
 * copies its tensor table into the one model and closes it again, so only
 * one shard is open at a time.  Every tensor of a shard must be listed in
 * the weight_map under that shard, and every listed tensor must be found
 * where the map says: a tensor in two shards, a tensor the map does not
 * list and a listed tensor no shard holds are each refused with one line.
 * Tensors keep shard order (shards in the index's order of first mention,
 * tensors in each shard's storage order); metadata is the first shard's
 * __metadata__ plus keys later shards add, and the two NPUC__CK_META_* keys
 * naming the source for a checkpoint writer.
 *
 * Payloads are read with pread from the one shard file held open (switched
 * when a tensor of another shard is loaded) into a buffer the model owns,
 * so memory follows the largest tensor, as for a single file.  A shard whose
 * size changed since opening is an error naming it.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ck_format.h"
#include "safetensors/st_format.h"

typedef struct ck_state {
    npuc__ck_index ix;
    uint32_t *shard_of;   /* per tensor */
    uint64_t *shard_size; /* per shard: its size when opened */
    pthread_mutex_t lock; /* guards fd and cur: loads may come from several threads */
    int fd;
    long cur;             /* the shard fd holds, or -1 */
    json_t *layouts;      /* while opening: the union of the shards' npuc.layout */
} ck_state;

static void shard_path(const ck_state *s, size_t k, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s", s->ix.dir, s->ix.shards[k]);
}

static npuc_status ck_load(npuc_ctx *ctx, npuc_model *m, size_t i, void **data, int *owned) {
    ck_state *s = m->be_state;
    const npuc_tensor_info *t = &m->t[i];
    size_t k = s->shard_of[i];
    char p[PATH_MAX + 256];
    shard_path(s, k, p, sizeof p);
    void *buf = NULL;
    if (t->nbytes > SIZE_MAX - 64 || posix_memalign(&buf, 64, t->nbytes ? (size_t)t->nbytes : 1) != 0)
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: tensor '%s': out of memory", p, t->name);
    npuc_status st = NPUC_OK;
    pthread_mutex_lock(&s->lock);
    if (s->cur != (long)k) {
        if (s->fd >= 0) close(s->fd);
        s->cur = -1;
        struct stat sb;
        s->fd = open(p, O_RDONLY | O_CLOEXEC);
        if (s->fd < 0) st = npuc_fail(ctx, NPUC_ERR_IO, "%s: tensor '%s': %s", p, t->name, strerror(errno));
        else if (fstat(s->fd, &sb) != 0 || (uint64_t)sb.st_size != s->shard_size[k])
            st = npuc_fail(ctx, NPUC_ERR_IO, "%s: tensor '%s': the shard changed size while npuc was reading the checkpoint",
                           p, t->name);
        else s->cur = (long)k;
    }
    for (uint64_t got = 0; st == NPUC_OK && got < t->nbytes;) {
        uint64_t want = t->nbytes - got;
        ssize_t r = pread(s->fd, (char *)buf + got, want > (1u << 30) ? (1u << 30) : (size_t)want,
                          (off_t)(m->offset[i] + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) st = npuc_fail(ctx, NPUC_ERR_IO, "%s: tensor '%s': read: %s", p, t->name, r ? strerror(errno) : "shard shrank");
        else got += (uint64_t)r;
    }
    pthread_mutex_unlock(&s->lock);
    if (st != NPUC_OK) { free(buf); return st; }
    *data = buf;
    *owned = 1;
    return NPUC_OK;
}

static void ck_close(npuc_model *m) {
    ck_state *s = m->be_state;
    if (!s) return;
    if (s->fd >= 0) close(s->fd);
    npuc__ck_index_free(&s->ix);
    json_decref(s->layouts);
    free(s->shard_of);
    free(s->shard_size);
    pthread_mutex_destroy(&s->lock);
    free(s);
    m->be_state = NULL;
}

static const npuc_backend CK_BACKEND = {ck_load, ck_close, NULL, NULL};

/* Each shard records in "npuc.layout" the layouts of its own tensors (the
 * safetensors reader refuses entries for tensors a file lacks); the model
 * gets their union. */
static npuc_status merge_layouts(npuc_ctx *ctx, ck_state *s, const char *v, const char *sp) {
    json_t *o = json_loads(v, 0, NULL);
    if (!json_is_object(o)) { /* the shard's own open already refused it */
        json_decref(o);
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: metadata 'npuc.layout' is not a JSON object", sp);
    }
    if (!s->layouts) { s->layouts = o; return NPUC_OK; }
    int bad = json_object_update(s->layouts, o);
    json_decref(o);
    return bad ? npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", sp) : NPUC_OK;
}

/* Adds shard k's tensors (opened as sub) to m, checking them against the map. */
static npuc_status add_shard(npuc_ctx *ctx, npuc_model *m, ck_state *s, size_t k, npuc_model *sub,
                             const char *sp, size_t *cap) {
    npuc_status st = NPUC_OK;
    int one = s->ix.index_name == NULL;
    uint64_t base = npuc__st_data_start(sub);
    for (size_t j = 0; j < sub->n && st == NPUC_OK; j++) {
        const npuc_tensor_info *t = &sub->t[j];
        long want = npuc__ck_index_shard(&s->ix, t->name);
        if (one) {
            want = 0;
            if (json_object_set_new(s->ix.map, t->name, json_integer(0)))
                return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", sp);
        }
        if (want < 0)
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%.160s' is not listed in the index %s", sp, t->name,
                             s->ix.index_name);
        if ((size_t)want != k)
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%.160s' is also in this shard, but the index maps it to %s",
                             sp, t->name, s->ix.shards[want]);
        size_t idx;
        if ((st = npuc__model_add(ctx, m, t->name, t->dtype, t->rank, t->shape, NULL, &idx)) != NPUC_OK) return st;
        if (idx >= *cap) {
            size_t nc = *cap ? 2 * *cap : 64;
            uint32_t *p = realloc(s->shard_of, nc * sizeof *p);
            if (!p) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", sp);
            s->shard_of = p;
            *cap = nc;
        }
        s->shard_of[idx] = (uint32_t)k;
        if (npuc_add_overflow(sub->offset[j], base, &m->offset[idx]))
            return npuc_fail(ctx, NPUC_ERR_OVERFLOW, "%s: tensor '%.160s': offset overflows", sp, t->name);
    }
    for (size_t j = 0; j < sub->nmeta && st == NPUC_OK; j++) {
        const char *key = sub->meta_k[j];
        if (strncmp(key, "npuc.source.", 12) == 0) continue;
        if (strcmp(key, "npuc.layout") == 0) st = merge_layouts(ctx, s, sub->meta_v[j], sp);
        else if (!npuc_model_meta_get(m, key)) st = npuc__model_add_meta(ctx, m, key, sub->meta_v[j]);
    }
    return st;
}

npuc_status npuc__ck_open(npuc_ctx *ctx, const char *path, const npuc_open_opts *o, npuc_model **out) {
    *out = NULL;
    npuc_status st = NPUC_OK;
    ck_state *s = calloc(1, sizeof *s);
    npuc_model *m = npuc__model_new(path, NPUC_FORMAT_AUTO);
    if (!s || !m) {
        free(s);
        if (m) npuc_model_close(m);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
    }
    pthread_mutex_init(&s->lock, NULL);
    s->fd = -1;
    s->cur = -1;
    m->be = &CK_BACKEND;
    m->be_state = s;
    if ((st = npuc__ck_index_load(ctx, path, &s->ix)) != NPUC_OK) goto fail;
    if (!(s->shard_size = calloc(s->ix.nshards ? s->ix.nshards : 1, sizeof *s->shard_size))) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    npuc_open_opts so = *o;
    so.format = NPUC_FORMAT_SAFETENSORS;
    size_t cap = 0;
    for (size_t k = 0; k < s->ix.nshards && st == NPUC_OK; k++) {
        char sp[PATH_MAX + 256];
        shard_path(s, k, sp, sizeof sp);
        npuc_model *sub = NULL;
        if ((st = npuc__st_open(ctx, sp, &so, &sub)) != NPUC_OK) goto fail;
        s->shard_size[k] = sub->file_size;
        if (npuc_add_overflow(m->file_size, sub->file_size, &m->file_size))
            st = npuc_fail(ctx, NPUC_ERR_OVERFLOW, "%s: total size overflows", path);
        if (st == NPUC_OK) st = add_shard(ctx, m, s, k, sub, sp, &cap);
        npuc_model_close(sub);
    }
    if (st != NPUC_OK) goto fail;
    char abs[PATH_MAX];
    if (!realpath(s->ix.dir, abs)) {
        st = npuc_fail(ctx, NPUC_ERR_IO, "%s: %s", s->ix.dir, strerror(errno));
        goto fail;
    }
    if (s->layouts) {
        char *lj = json_dumps(s->layouts, JSON_COMPACT | JSON_PRESERVE_ORDER);
        st = lj ? npuc__model_add_meta(ctx, m, "npuc.layout", lj) : npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
        free(lj);
        json_decref(s->layouts);
        s->layouts = NULL;
        if (st != NPUC_OK) goto fail;
    }
    if ((st = npuc__model_add_meta(ctx, m, NPUC__CK_META_DIR, abs)) != NPUC_OK ||
        (st = npuc__model_add_meta(ctx, m, NPUC__CK_META_INDEX, s->ix.index_name ? s->ix.index_name : "")) != NPUC_OK ||
        (st = npuc__model_finish(ctx, m, 0)) != NPUC_OK)
        goto fail;
    if (m->n != json_object_size(s->ix.map)) {
        const char *k;
        json_t *v;
        json_object_foreach(s->ix.map, k, v) {
            size_t idx;
            if (npuc_model_find(m, k, &idx) != 0) {
                st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s/%s: tensor '%.160s' is listed in shard %s, which does not hold it",
                               s->ix.dir, s->ix.index_name, k, s->ix.shards[json_integer_value(v)]);
                goto fail;
            }
        }
    }
    *out = m;
    return NPUC_OK;
fail:
    npuc_model_close(m);
    return st;
}
