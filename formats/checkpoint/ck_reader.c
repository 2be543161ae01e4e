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

#include "ck_ct.h"
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
    /* compressed-tensors (ck_ct.h): the stored tensors, and per tensor of
     * the model what it is made of; NULL for any other checkpoint */
    npuc_model *raw;
    struct ct_src *ct;
} ck_state;

/* A tensor of a compressed-tensors model: a stored tensor (codes == raw
 * index, packed < 0) or a weight decoded from its parts. */
typedef struct ct_src {
    size_t codes, scale, zp; /* raw indices; zp SIZE_MAX when symmetric */
    int packed;              /* -1: stored as it is; 0: int-quantized; 1: pack-quantized */
    int bits;
    int64_t O, I, G;
} ct_src;

static void shard_path(const ck_state *s, size_t k, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s", s->ix.dir, s->ix.shards[k]);
}

/* Reads stored tensor i of m (whose offsets and shards s describes) into a
 * new 64-byte aligned buffer. */
static npuc_status read_tensor(npuc_ctx *ctx, ck_state *s, const npuc_model *m, size_t i, void **data) {
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
    return NPUC_OK;
}

/* Dequantizes weight i of a compressed-tensors model: (q - zp) * scale in
 * float, as npuc's fake quantization computes it. */
static npuc_status ct_decode(npuc_ctx *ctx, ck_state *s, const ct_src *c, float *out) {
    void *q = NULL, *sc = NULL, *zp = NULL;
    npuc_status st = read_tensor(ctx, s, s->raw, c->codes, &q);
    if (st == NPUC_OK) st = read_tensor(ctx, s, s->raw, c->scale, &sc);
    if (st == NPUC_OK && c->zp != SIZE_MAX) st = read_tensor(ctx, s, s->raw, c->zp, &zp);
    float *scale = NULL;
    if (st == NPUC_OK && !(scale = malloc((size_t)(c->O * c->G) * sizeof *scale + 1)))
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    if (st == NPUC_OK) {
        npuc_convert(scale, NPUC_DTYPE_F32, sc, s->raw->t[c->scale].dtype, (size_t)(c->O * c->G));
        const int b = c->bits, off = 1 << (b - 1);
        const int64_t pf = 32 / b, P = (c->I + pf - 1) / pf, gs = c->I / c->G;
        const unsigned mask = (1u << b) - 1;
        for (int64_t r = 0; r < c->O; r++)
            for (int64_t j = 0; j < c->I; j++) {
                int64_t g = j / gs;
                int qv, zv = 0;
                if (c->packed) {
                    qv = (int)((((const uint32_t *)q)[r * P + j / pf] >> (b * (j % pf))) & mask) - off;
                    if (zp) zv = (int)((((const uint32_t *)zp)[(r / pf) * c->G + g] >> (b * (r % pf))) & mask) - off;
                } else {
                    qv = ((const int8_t *)q)[r * c->I + j];
                    if (zp) zv = ((const int8_t *)zp)[r * c->G + g];
                }
                out[r * c->I + j] = (float)(qv - zv) * scale[r * c->G + g];
            }
    }
    free(scale);
    free(q);
    free(sc);
    free(zp);
    return st;
}

static npuc_status ck_load(npuc_ctx *ctx, npuc_model *m, size_t i, void **data, int *owned) {
    ck_state *s = m->be_state;
    *owned = 1;
    if (!s->ct) return read_tensor(ctx, s, m, i, data);
    const ct_src *c = &s->ct[i];
    if (c->packed < 0) return read_tensor(ctx, s, s->raw, c->codes, data);
    void *buf = NULL;
    if (posix_memalign(&buf, 64, m->t[i].nbytes ? (size_t)m->t[i].nbytes : 1) != 0)
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: tensor '%s': out of memory", m->path, m->t[i].name);
    npuc_status st = ct_decode(ctx, s, c, buf);
    if (st != NPUC_OK) { free(buf); return st; }
    *data = buf;
    return NPUC_OK;
}

static void ck_close(npuc_model *m) {
    ck_state *s = m->be_state;
    if (!s) return;
    if (s->fd >= 0) close(s->fd);
    npuc__ck_index_free(&s->ix);
    json_decref(s->layouts);
    npuc_model_close(s->raw);
    free(s->ct);
    free(s->shard_of);
    free(s->shard_size);
    pthread_mutex_destroy(&s->lock);
    free(s);
    m->be_state = NULL;
}

static const npuc_backend CK_BACKEND = {ck_load, ck_close, NULL, NULL, NULL};

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

static int has(const npuc_model *m, const char *base, const char *suffix, size_t *idx) {
    char nm[1100];
    if ((size_t)snprintf(nm, sizeof nm, "%s%s", base, suffix) >= sizeof nm) return 0;
    return npuc_model_find(m, nm, idx) == 0;
}

static int ends(const char *s, const char *suf, size_t *stem) {
    size_t n = strlen(s), k = strlen(suf);
    *stem = n - k;
    return n > k && strcmp(s + n - k, suf) == 0;
}

/* Is raw tensor name the stored weight (codes) of a compressed-tensors
 * layer?  *packed 1 for B_packed (B: the weight's name in *base), 0 for an
 * I8 B with a B_scale. */
static int is_ct_codes(const npuc_model *raw, size_t i, char *base, size_t cap, int *packed) {
    const char *nm = raw->t[i].name;
    size_t stem, x;
    if (ends(nm, "_packed", &stem) && stem < cap) {
        snprintf(base, cap, "%.*s", (int)stem, nm);
        *packed = 1;
        return has(raw, base, "_scale", &x);
    }
    if (raw->t[i].dtype == NPUC_DTYPE_I8 && raw->t[i].rank == 2 && strlen(nm) < cap && has(raw, nm, "_scale", &x)) {
        snprintf(base, cap, "%s", nm);
        *packed = 0;
        return 1;
    }
    return 0;
}

/* 1 when raw tensor i is the scale, zero point or shape of a layer. */
static int is_ct_part(const npuc_model *raw, size_t i) {
    static const char *const SUF[] = {"_scale", "_zero_point", "_shape"};
    const char *nm = raw->t[i].name;
    for (int k = 0; k < 3; k++) {
        size_t stem, x;
        if (!ends(nm, SUF[k], &stem) || stem >= 1000) continue;
        char base[1100];
        snprintf(base, sizeof base, "%.*s", (int)stem, nm);
        if (has(raw, base, "_packed", &x) || (npuc_model_find(raw, base, &x) == 0 && raw->t[x].dtype == NPUC_DTYPE_I8))
            return 1;
    }
    return 0;
}

#define CT_BAD(...) do { st = npuc_fail(ctx, NPUC_ERR_FORMAT, __VA_ARGS__); goto fail; } while (0)

/* The model a compressed-tensors checkpoint describes: every quantized
 * layer one F32 weight decoded on load, every other tensor as stored.  On
 * success s owns raw and the new model owns s. */
static npuc_status ct_view(npuc_ctx *ctx, npuc_model *raw, ck_state *s, const json_t *qc, npuc_model **out) {
    *out = NULL;
    npuc_status st = NPUC_OK;
    npuc_model *v = npuc__model_new(raw->path, NPUC_FORMAT_AUTO);
    ct_src *ct = calloc(raw->n + 1, sizeof *ct);
    void *shp = NULL;
    if (!v || !ct) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", raw->path); goto fail; }
    for (size_t i = 0; i < raw->n; i++) {
        char base[1000];
        int packed;
        const npuc_tensor_info *t = &raw->t[i];
        size_t idx;
        if (is_ct_codes(raw, i, base, sizeof base, &packed)) {
            ct_src c = {.codes = i, .zp = SIZE_MAX, .packed = packed};
            size_t shape_i, ml;
            char mod[1000];
            snprintf(mod, sizeof mod, "%.*s", ends(base, ".weight", &ml) ? (int)ml : (int)strlen(base), base);
            int sym;
            if (npuc__ct_scheme(qc, mod, &c.bits, &sym) != 0)
                CT_BAD("%s: tensor '%s': no config group of quantization_config targets module '%s'", raw->path, base, mod);
            has(raw, base, "_scale", &c.scale);
            if (!has(raw, base, "_zero_point", &c.zp)) c.zp = SIZE_MAX;
            if (packed) {
                if (!has(raw, base, "_shape", &shape_i) || raw->t[shape_i].numel != 2 ||
                    (raw->t[shape_i].dtype != NPUC_DTYPE_I64 && raw->t[shape_i].dtype != NPUC_DTYPE_I32))
                    CT_BAD("%s: tensor '%s_packed': no '%s_shape' of two integers", raw->path, base, base);
                if ((st = read_tensor(ctx, s, raw, shape_i, &shp)) != NPUC_OK) goto fail;
                int wide = raw->t[shape_i].dtype == NPUC_DTYPE_I64;
                c.O = wide ? ((int64_t *)shp)[0] : ((int32_t *)shp)[0];
                c.I = wide ? ((int64_t *)shp)[1] : ((int32_t *)shp)[1];
                free(shp);
                shp = NULL;
            } else {
                c.O = t->shape[0];
                c.I = t->shape[1];
            }
            const npuc_tensor_info *sc = &raw->t[c.scale];
            c.G = sc->rank == 2 ? sc->shape[1] : 1;
            int64_t pf = 32 / c.bits;
            int ok = c.O > 0 && c.I > 0 && c.O <= (1LL << 31) && c.I <= (1LL << 31) && c.G > 0 && c.I % c.G == 0 &&
                     npuc_dtype_is_float(sc->dtype) && sc->shape[0] == c.O && (sc->rank == 2 || sc->rank == 1);
            if (ok && packed)
                ok = t->dtype == NPUC_DTYPE_I32 && t->rank == 2 && t->shape[0] == c.O && t->shape[1] == (c.I + pf - 1) / pf;
            if (ok && c.zp != SIZE_MAX) {
                const npuc_tensor_info *z = &raw->t[c.zp];
                ok = z->rank == 2 && z->shape[1] == c.G &&
                     (packed ? z->dtype == NPUC_DTYPE_I32 && z->shape[0] == (c.O + pf - 1) / pf
                             : z->dtype == NPUC_DTYPE_I8 && z->shape[0] == c.O);
            }
            if (!ok) CT_BAD("%s: tensor '%s': its compressed-tensors parts do not fit shape [%lld,%lld] (%d bits)", raw->path,
                            base, (long long)c.O, (long long)c.I, c.bits);
            int64_t shape[2] = {c.O, c.I};
            if ((st = npuc__model_add(ctx, v, base, NPUC_DTYPE_F32, 2, shape, NULL, &idx)) != NPUC_OK) goto fail;
            ct[idx] = c;
        } else if (!is_ct_part(raw, i)) {
            if ((st = npuc__model_add(ctx, v, t->name, t->dtype, t->rank, t->shape, NULL, &idx)) != NPUC_OK) goto fail;
            ct[idx] = (ct_src){.codes = i, .zp = SIZE_MAX, .packed = -1};
        }
    }
    for (size_t i = 0; i < raw->nmeta && st == NPUC_OK; i++) st = npuc__model_add_meta(ctx, v, raw->meta_k[i], raw->meta_v[i]);
    if (st != NPUC_OK || (st = npuc__model_finish(ctx, v, 0)) != NPUC_OK) goto fail;
    v->file_size = raw->file_size;
    raw->be = NULL;
    raw->be_state = NULL;
    s->raw = raw;
    s->ct = ct;
    v->be = &CK_BACKEND;
    v->be_state = s;
    *out = v;
    return NPUC_OK;
fail:
    free(shp);
    free(ct);
    npuc_model_close(v);
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
    json_t *qc = NULL;
    if ((st = npuc__ct_read_config(ctx, s->ix.dir, &qc)) != NPUC_OK) goto fail;
    if (qc) {
        npuc_model *v;
        st = ct_view(ctx, m, s, qc, &v);
        json_decref(qc);
        if (st != NPUC_OK) goto fail;
        *out = v;
        return NPUC_OK;
    }
    *out = m;
    return NPUC_OK;
fail:
    npuc_model_close(m);
    return st;
}
