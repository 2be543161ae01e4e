/*
 * ck_writer.c - writing a sharded checkpoint directory.
 *
 * Once every tensor is declared (begin), the tensors are assigned to shards:
 *   - with the write option "max-shard-size" (bytes, --max-shard-size), in
 *     declaration order, a new shard starting when the next tensor would
 *     take the current one past the limit (transformers' rule: a tensor
 *     larger than the limit gets a shard of its own), named
 *     model-00001-of-0000N.safetensors (model.safetensors when N is 1);
 *   - else, when the source was a checkpoint with an index (the reader's
 *     NPUC__CK_META_* metadata), as in the source: each tensor goes to the
 *     shard of the source tensor whose name is its longest prefix ending
 *     before a '.' or '_' ("fc.weight.scale" and "fc.weight_packed" follow
 *     "fc.weight"), a tensor with no such source tensor to the shard of the
 *     tensor declared before it; shard and index names are the source's;
 *   - else one model.safetensors.
 * Each shard is an ordinary safetensors file (st_writer.c's header) with the
 * model's metadata, its "npuc.layout" cut to its own tensors; it is created
 * at its first tensor and closed after its last, so shards are written one
 * at a time when tensors arrive in shard order, as they do.  finish() writes
 * the index (metadata.total_size = the sum of all tensors' bytes, weight_map
 * sorted by name, as transformers writes it), copies the source directory's
 * side files byte for byte and publishes the directory (ck_dir.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ck_format.h"
#include "ck_ct.h"
#include "ck_side.h"
#include "safetensors/st_format.h"

typedef struct ckw_shard {
    char *name;
    size_t *idx; /* its tensors, in declaration order */
    size_t n, written;
    int fd;
    uint64_t pos;         /* bytes written to the shard */
    npuc__writeback wb;   /* its writeback while later tensors are computed */
} ckw_shard;

typedef struct ckw_state {
    npuc__ck_tmpdir *td;
    ckw_shard *sh;
    size_t nsh;
    npuc__ct_plan pl;  /* the output tensors: the declared ones, or their compressed-tensors form */
    int ct;            /* writing compressed-tensors */
    size_t *shard_of;  /* per output tensor */
    char *index_name;  /* NULL: no index */
    const char *src_dir, *src_index; /* from metadata; NULL when absent */
    char **mk, **mv;   /* shard metadata: w's without npuc.source.* and npuc.layout */
    size_t nmeta;
    json_t *layouts;   /* w's npuc.layout, or NULL */
} ckw_state;

static void free_state(ckw_state *s) {
    if (!s) return;
    for (size_t k = 0; k < s->nsh; k++) {
        if (s->sh[k].fd >= 0) {
            (void)npuc__writeback_end(&s->sh[k].wb);
            close(s->sh[k].fd);
        }
        free(s->sh[k].name);
        free(s->sh[k].idx);
    }
    free(s->sh);
    free(s->shard_of);
    npuc__ct_plan_free(&s->pl);
    free(s->index_name);
    free(s->mk);
    free(s->mv);
    json_decref(s->layouts);
    free(s);
}

static const char *meta_get(const npuc_writer *w, const char *key) {
    for (size_t i = 0; i < w->nmeta; i++)
        if (strcmp(w->meta_k[i], key) == 0) return w->meta_v[i];
    return NULL;
}

/* The source shard of name: its longest prefix ending before '.' or '_'
 * (or all of it) that the source index maps; -1 when none does. */
static long source_shard(const npuc__ck_index *ix, const char *name) {
    char buf[1024];
    size_t n = strlen(name);
    if (n >= sizeof buf) return -1;
    memcpy(buf, name, n + 1);
    for (size_t l = n; l > 0; l--) {
        if (l < n && name[l] != '.' && name[l] != '_') continue;
        buf[l] = 0;
        long k = npuc__ck_index_shard(ix, buf);
        if (k >= 0) return k;
    }
    return -1;
}

static npuc_status add_shard(npuc_writer *w, ckw_state *s, const char *name) {
    ckw_shard *p = realloc(s->sh, (s->nsh + 1) * sizeof *p);
    if (!p) return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
    s->sh = p;
    memset(&p[s->nsh], 0, sizeof *p);
    p[s->nsh].fd = -1;
    if (!(p[s->nsh].name = npuc__strdup(name))) return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
    s->nsh++;
    return NPUC_OK;
}

static npuc_status single_shard(npuc_writer *w, ckw_state *s);

/* Fills s->shard_of and s->sh (names; tensor lists come after). */
static npuc_status plan(npuc_writer *w, ckw_state *s) {
    npuc_status st = NPUC_OK;
    long max = npuc__writer_opt_long(w, "max-shard-size", 0);
    if (max > 0) {
        uint64_t cur = 0;
        size_t k = 0;
        for (size_t i = 0; i < s->pl.n; i++) {
            if (i > 0 && cur > 0 && (cur + s->pl.out[i].t.nbytes > (uint64_t)max || cur + s->pl.out[i].t.nbytes < cur)) {
                k++;
                cur = 0;
            }
            s->shard_of[i] = k;
            cur += s->pl.out[i].t.nbytes;
        }
        size_t nsh = s->pl.n ? k + 1 : 1;
        for (size_t j = 0; j < nsh && st == NPUC_OK; j++) {
            char nm[64];
            if (nsh == 1) snprintf(nm, sizeof nm, "model.safetensors");
            else snprintf(nm, sizeof nm, "model-%05zu-of-%05zu.safetensors", j + 1, nsh);
            st = add_shard(w, s, nm);
        }
        if (st == NPUC_OK && nsh > 1 && !(s->index_name = npuc__strdup("model.safetensors.index.json")))
            st = npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
        return st;
    }
    if (s->src_dir && s->src_index && *s->src_index) {
        char ip[PATH_MAX];
        snprintf(ip, sizeof ip, "%s/%s", s->src_dir, s->src_index);
        npuc__ck_index ix;
        if ((st = npuc__ck_index_load(w->ctx, ip, &ix)) != NPUC_OK) return st;
        if (ix.nshards == 0) {
            npuc__ck_index_free(&ix);
            return single_shard(w, s);
        }
        /* Source shard -> output shard, keeping only shards that get a tensor. */
        long *remap = malloc((ix.nshards ? ix.nshards : 1) * sizeof *remap);
        if (!remap) { npuc__ck_index_free(&ix); return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory"); }
        for (size_t j = 0; j < ix.nshards; j++) remap[j] = -1;
        long prev = 0;
        for (size_t i = 0; i < s->pl.n; i++) {
            long k = source_shard(&ix, s->pl.out[i].t.name);
            if (k < 0) k = prev;
            prev = k;
            s->shard_of[i] = (size_t)k; /* source numbering for now */
            remap[k] = 0;
        }
        for (size_t j = 0; j < ix.nshards && st == NPUC_OK; j++)
            if (remap[j] == 0) {
                remap[j] = (long)s->nsh;
                st = add_shard(w, s, ix.shards[j]);
            }
        for (size_t i = 0; i < s->pl.n && st == NPUC_OK; i++) s->shard_of[i] = (size_t)remap[s->shard_of[i]];
        if (st == NPUC_OK && !(s->index_name = npuc__strdup(s->src_index)))
            st = npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
        free(remap);
        npuc__ck_index_free(&ix);
        if (st != NPUC_OK || s->nsh > 0) return st;
    }
    return single_shard(w, s);
}

static npuc_status single_shard(npuc_writer *w, ckw_state *s) {
    for (size_t i = 0; i < s->pl.n; i++) s->shard_of[i] = 0;
    return add_shard(w, s, "model.safetensors");
}

/* The declared tensors as they are. */
static npuc_status identity_plan(npuc_writer *w, npuc__ct_plan *p) {
    memset(p, 0, sizeof *p);
    p->out = calloc(w->n + 1, sizeof *p->out);
    p->first = calloc(w->n + 1, sizeof *p->first);
    p->count = calloc(w->n + 1, sizeof *p->count);
    if (!p->out || !p->first || !p->count) return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < w->n; i++) {
        p->out[i].t = w->t[i];
        p->out[i].t.group = NULL;
        p->out[i].src = i;
        p->first[i] = i;
        p->count[i] = 1;
        p->n = i + 1;
        if (!(p->out[i].t.name = npuc__strdup(w->t[i].name))) return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    return NPUC_OK;
}

static npuc_status ckw_begin(npuc_writer *w) {
    ckw_state *s = calloc(1, sizeof *s);
    if (!s) return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
    w->be_state = s;
    s->src_dir = meta_get(w, NPUC__CK_META_DIR);
    s->src_index = meta_get(w, NPUC__CK_META_INDEX);
    s->mk = calloc(w->nmeta + 1, sizeof *s->mk);
    s->mv = calloc(w->nmeta + 1, sizeof *s->mv);
    const char *fmt = npuc__writer_opt(w, "checkpoint-format");
    s->ct = fmt && strcmp(fmt, "compressed-tensors") == 0;
    npuc_status st = s->ct ? npuc__ct_plan_build(w, &s->pl) : identity_plan(w, &s->pl);
    if (st != NPUC_OK) return st;
    s->shard_of = calloc(s->pl.n + 1, sizeof *s->shard_of);
    if (!s->mk || !s->mv || !s->shard_of) return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < w->nmeta; i++) {
        if (strncmp(w->meta_k[i], "npuc.source.", 12) == 0) continue;
        if (s->ct && strcmp(w->meta_k[i], "npuc") == 0) continue; /* names parts compressed-tensors renamed */
        if (strcmp(w->meta_k[i], "npuc.layout") == 0) {
            s->layouts = json_loads(w->meta_v[i], 0, NULL);
            continue;
        }
        s->mk[s->nmeta] = w->meta_k[i];
        s->mv[s->nmeta++] = w->meta_v[i];
    }
    st = plan(w, s);
    for (size_t i = 0; i < s->pl.n && st == NPUC_OK; i++) {
        ckw_shard *h = &s->sh[s->shard_of[i]];
        size_t *p = realloc(h->idx, (h->n + 1) * sizeof *p);
        if (!p) return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
        h->idx = p;
        h->idx[h->n++] = i;
    }
    if (st == NPUC_OK) st = npuc__ck_tmpdir_open(w->ctx, w->path, w->opts.overwrite, &s->td);
    /* An empty model still gets its one (empty) shard. */
    if (st == NPUC_OK && s->pl.n == 0) {
        int fd;
        char *hdr;
        size_t len;
        if ((st = npuc__ck_tmpdir_create(s->td, s->sh[0].name, &fd)) == NPUC_OK &&
            (st = npuc__st_header_of(w->ctx, w->path, NULL, 0, s->mk, s->mv, s->nmeta, &hdr, &len)) == NPUC_OK) {
            st = npuc__st_write_all(w->ctx, w->path, fd, hdr, len, "the header");
            free(hdr);
        }
        if (fd >= 0) close(fd);
    }
    return st;
}

/* Creates shard h's file and writes its header. */
static npuc_status open_shard(npuc_writer *w, ckw_state *s, ckw_shard *h) {
    npuc_status st = npuc__ck_tmpdir_create(s->td, h->name, &h->fd);
    if (st != NPUC_OK) return st;
    npuc_tensor_info *t = malloc((h->n ? h->n : 1) * sizeof *t);
    char **mk = calloc(s->nmeta + 1, sizeof *mk), **mv = calloc(s->nmeta + 1, sizeof *mv);
    char *lj = NULL, *hdr = NULL;
    size_t len, nm = s->nmeta;
    json_t *lay = s->layouts ? json_object() : NULL;
    if (!t || !mk || !mv || (s->layouts && !lay)) { st = npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
    for (size_t j = 0; j < h->n; j++) {
        t[j] = s->pl.out[h->idx[j]].t;
        json_t *l = s->layouts ? json_object_get(s->layouts, t[j].name) : NULL;
        if (l && json_object_set(lay, t[j].name, l)) { st = npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
    }
    memcpy(mk, s->mk, s->nmeta * sizeof *mk);
    memcpy(mv, s->mv, s->nmeta * sizeof *mv);
    if (lay && json_object_size(lay)) {
        if (!(lj = json_dumps(lay, JSON_COMPACT | JSON_PRESERVE_ORDER))) { st = npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
        mk[nm] = "npuc.layout";
        mv[nm++] = lj;
    }
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", w->path, h->name);
    if ((st = npuc__st_header_of(w->ctx, p, t, h->n, mk, mv, nm, &hdr, &len)) == NPUC_OK)
        st = npuc__st_write_all(w->ctx, p, h->fd, hdr, len, "the header");
    npuc__writeback_init(&h->wb, h->fd);
    h->pos = len;
done:
    free(hdr);
    free(lj);
    json_decref(lay);
    free(t);
    free(mk);
    free(mv);
    return st;
}

static npuc_status close_shard(npuc_writer *w, ckw_shard *h) {
    npuc_status st = NPUC_OK;
    const int e = npuc__writeback_end(&h->wb);
    if (e) st = npuc_fail(w->ctx, NPUC_ERR_IO, "%s/%s: writing: %s", w->path, h->name, strerror(e));
    else if (fsync(h->fd) != 0) st = npuc_fail(w->ctx, NPUC_ERR_IO, "%s/%s: fsync: %s", w->path, h->name, strerror(errno));
    if (close(h->fd) != 0 && st == NPUC_OK)
        st = npuc_fail(w->ctx, NPUC_ERR_IO, "%s/%s: close: %s", w->path, h->name, strerror(errno));
    h->fd = -1;
    return st;
}

static npuc_status ckw_write(npuc_writer *w, size_t i, const void *data, uint64_t n) {
    ckw_state *s = w->be_state;
    npuc_status st = NPUC_OK;
    (void)n;
    for (size_t k = s->pl.first[i]; k < s->pl.first[i] + s->pl.count[i] && st == NPUC_OK; k++) {
        ckw_shard *h = &s->sh[s->shard_of[k]];
        if (h->written == 0 && (st = open_shard(w, s, h)) != NPUC_OK) return st;
        void *enc;
        uint64_t en;
        if ((st = npuc__ct_encode(w, &s->pl.out[k], data, &enc, &en)) != NPUC_OK) return st;
        char what[160], p[PATH_MAX];
        snprintf(what, sizeof what, "tensor '%.100s'", s->pl.out[k].t.name);
        snprintf(p, sizeof p, "%s/%s", w->path, h->name);
        /* In pieces of the writeback's chunk, each started on its way to
         * the disk once written (writeback.c), so close_shard's fsync finds
         * little left to write. */
        const char *c = enc ? enc : data;
        for (uint64_t done = 0; done < en && st == NPUC_OK;) {
            const uint64_t piece = en - done < NPUC__WB_CHUNK ? en - done : NPUC__WB_CHUNK;
            st = npuc__st_write_all(w->ctx, p, h->fd, c + done, piece, what);
            done += piece;
            h->pos += piece;
            if (st == NPUC_OK) st = npuc__writeback_wrote(&h->wb, w->ctx, p, h->pos);
        }
        free(enc);
        if (st == NPUC_OK && ++h->written == h->n) st = close_shard(w, h);
    }
    return st;
}

/* The index: metadata.total_size and the weight_map sorted by name. */
static npuc_status write_index(npuc_writer *w, ckw_state *s) {
    uint64_t total = 0;
    json_t *root = json_object(), *meta = json_object(), *map = json_object();
    int bad = !root || !meta || !map;
    for (size_t i = 0; i < s->pl.n && !bad; i++) {
        total += s->pl.out[i].t.nbytes;
        bad = json_object_set_new(map, s->pl.out[i].t.name, json_string(s->sh[s->shard_of[i]].name)) != 0;
    }
    bad = bad || json_object_set_new(meta, "total_size", json_integer((json_int_t)total)) ||
          json_object_set(root, "metadata", meta) || json_object_set(root, "weight_map", map);
    char *txt = bad ? NULL : json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(root);
    json_decref(meta);
    json_decref(map);
    if (!txt) return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
    npuc_status st = npuc__ck_write_file(w->ctx, s->td, w->path, s->index_name, txt, strlen(txt), 1);
    free(txt);
    return st;
}

static npuc_status ckw_finish(npuc_writer *w) {
    ckw_state *s = w->be_state;
    npuc_status st = NPUC_OK;
    for (size_t k = 0; k < s->nsh && st == NPUC_OK; k++)
        if (s->sh[k].fd >= 0) st = close_shard(w, &s->sh[k]);
    if (st == NPUC_OK && s->index_name) st = write_index(w, s);
    /* config.json gains the quantization_config of a compressed-tensors
     * output, and loses a compressed-tensors one the output no longer is. */
    json_t *src_qc = NULL;
    if (st == NPUC_OK && !s->ct && s->src_dir) st = npuc__ct_read_config(w->ctx, s->src_dir, &src_qc);
    if (st == NPUC_OK && (s->ct || src_qc)) {
        char *cfg = NULL;
        if ((st = npuc__ct_config(w->ctx, s->src_dir, s->ct ? s->pl.qconfig : NULL, &cfg)) == NPUC_OK)
            st = npuc__ck_write_file(w->ctx, s->td, w->path, "config.json", cfg, strlen(cfg), 1);
        free(cfg);
    }
    json_decref(src_qc);
    if (st == NPUC_OK && s->src_dir) {
        const char *skip[2] = {s->index_name, s->src_index};
        st = npuc__ck_copy_side_files(w->ctx, s->td, w->path, s->src_dir, skip, 2);
    }
    if (st == NPUC_OK) {
        st = npuc__ck_tmpdir_publish(s->td); /* frees td whatever happens */
        s->td = NULL;
    }
    if (st != NPUC_OK) npuc__ck_tmpdir_abort(s->td);
    free_state(s);
    w->be_state = NULL;
    return st;
}

static void ckw_abort(npuc_writer *w) {
    ckw_state *s = w->be_state;
    if (!s) return;
    for (size_t k = 0; k < s->nsh; k++)
        if (s->sh[k].fd >= 0) {
            (void)npuc__writeback_end(&s->sh[k].wb);
            close(s->sh[k].fd);
            s->sh[k].fd = -1;
        }
    npuc__ck_tmpdir_abort(s->td);
    free_state(s);
    w->be_state = NULL;
}

/* no_file: the backend publishes its directory itself (ck_dir.c). */
const npuc_writer_backend npuc__ck_writer_backend = {ckw_begin, ckw_write, ckw_finish, ckw_abort, 1};
