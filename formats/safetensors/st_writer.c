/*
 * st_writer.c - the safetensors writer.
 *
 * The header needs every tensor's offsets, so the core writer has every
 * tensor declared before the first payload arrives; begin() then writes the
 * 8-byte length and the header, and each write() appends one payload.  The
 * header is compact JSON with "__metadata__" first and tensors in declaration
 * order (deterministic: the same model gives the same bytes), padded with
 * spaces so the payload starts 8-byte aligned as the format recommends.
 */
#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "st_format.h"

typedef struct stw_state {
    int fd;
    uint64_t pos; /* bytes of the file so far, holes included */
    int hole_at_end; /* the last bytes were skipped: finish() sets the size */
} stw_state;

/* Runs of zero bytes are skipped with lseek instead of written, in aligned
 * 64 KiB blocks, so they become holes of a sparse file (as cp --sparse=auto
 * does): a zero-padded or heavily pruned tensor then costs neither disk nor
 * fsync time.  The temporary file is new and empty, so a skipped range reads
 * back as zeros; finish() extends the file over a hole at its end. */
#define HOLE_BLOCK ((uint64_t)1 << 16)

static int all_zero(const char *p, size_t n) {
    uint64_t acc = 0, v;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&v, p + i, 8);
        acc |= v;
        if ((i & 4095) == 0 && acc) return 0; /* leave early on data */
    }
    for (; i < n; i++) acc |= (unsigned char)p[i];
    return acc == 0;
}

npuc_status npuc__st_write_all(npuc_ctx *ctx, const char *path, int fd, const void *p, uint64_t n, const char *what) {
    const char *c = p;
    while (n) {
        size_t chunk = n > (1u << 30) ? (1u << 30) : (size_t)n;
        ssize_t k = write(fd, c, chunk);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return npuc_fail(ctx, NPUC_ERR_IO, "%s: writing %s: %s", path, what, k < 0 ? strerror(errno) : "short write");
        c += k;
        n -= (uint64_t)k;
    }
    return NPUC_OK;
}

static npuc_status write_all(npuc_writer *w, int fd, const void *p, uint64_t n, const char *what) {
    return npuc__st_write_all(w->ctx, w->path, fd, p, n, what);
}

/* write_all() with zero blocks (aligned to the file offset) turned into
 * holes, in writes of at most NPUC__WB_CHUNK bytes each followed by the
 * writeback's turn (writeback.c), so a large tensor's first part is on its
 * way to the disk while the rest is copied; a large payload is reported to
 * the context's progress function every NPUC_PROGRESS_STEP bytes or so. */
static npuc_status write_sparse(npuc_writer *w, stw_state *s, const char *c, uint64_t n, const char *what) {
    const uint64_t total = n;
    const uint64_t cap = NPUC_PROGRESS_STEP < NPUC__WB_CHUNK ? NPUC_PROGRESS_STEP : NPUC__WB_CHUNK;
    while (n) {
        uint64_t to_edge = HOLE_BLOCK - s->pos % HOLE_BLOCK, run = 0;
        /* The longest prefix of whole zero blocks (from a block boundary). */
        if (to_edge == HOLE_BLOCK)
            while (n - run >= HOLE_BLOCK && all_zero(c + run, (size_t)HOLE_BLOCK) && run < cap) run += HOLE_BLOCK;
        if (run) {
            if (lseek(s->fd, (off_t)run, SEEK_CUR) < 0)
                return npuc_fail(w->ctx, NPUC_ERR_IO, "%s: writing %s: seek: %s", w->path, what, strerror(errno));
            s->hole_at_end = 1;
        } else {
            /* Data up to the next block boundary, then whole blocks until a zero one. */
            run = n < to_edge ? n : to_edge;
            while (n - run >= HOLE_BLOCK && !all_zero(c + run, (size_t)HOLE_BLOCK) && run < cap)
                run += HOLE_BLOCK;
            if (run == to_edge && n - run > 0 && n - run < HOLE_BLOCK) run = n; /* a short tail */
            npuc_status st = write_all(w, s->fd, c, run, what);
            if (st == NPUC_OK) st = npuc__writer_wrote(w, s->fd, s->pos + run);
            if (st != NPUC_OK) return st;
            s->hole_at_end = 0;
        }
        c += run;
        n -= run;
        s->pos += run;
        npuc__progress(w->ctx, NPUC_PROGRESS_WRITE, total - n, total);
    }
    return NPUC_OK;
}

npuc_status npuc__st_header(npuc_writer *w, char **out, size_t *len) {
    return npuc__st_header_of(w->ctx, w->path, w->t, w->n, w->meta_k, w->meta_v, w->nmeta, out, len);
}

npuc_status npuc__st_header_of(npuc_ctx *ctx, const char *path, const npuc_tensor_info *t, size_t n,
                               char *const *meta_k, char *const *meta_v, size_t nmeta, char **out, size_t *len) {
    npuc_status st = NPUC_OK;
    char *hdr = NULL;
    json_t *root = json_object();
    *out = NULL;
    *len = 0;
    if (!root) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto fail; }
    if (nmeta) {
        json_t *meta = json_object();
        if (!meta || json_object_set_new(root, "__metadata__", meta)) {
            st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
            goto fail;
        }
        for (size_t i = 0; i < nmeta; i++)
            if (json_object_set_new(meta, meta_k[i], json_string(meta_v[i]))) {
                st = npuc_fail(ctx, NPUC_ERR_ARG, "%s: metadata '%s' is not valid UTF-8", path,
                               meta_k[i]);
                goto fail;
            }
    }
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        const npuc_tensor_info *ti = &t[i];
        if (strcmp(ti->name, "__metadata__") == 0) {
            st = npuc_fail(ctx, NPUC_ERR_ARG, "%s: a tensor cannot be named __metadata__", path);
            goto fail;
        }
        json_t *e = json_object(), *shape = json_array(), *offs = json_array();
        uint64_t end;
        if (npuc_add_overflow(off, ti->nbytes, &end)) {
            json_decref(e); json_decref(shape); json_decref(offs);
            st = npuc_fail(ctx, NPUC_ERR_OVERFLOW, "%s: total size overflows", path);
            goto fail;
        }
        int bad = !e || !shape || !offs;
        for (int d = 0; !bad && d < ti->rank; d++)
            bad = json_array_append_new(shape, json_integer((json_int_t)ti->shape[d])) != 0;
        bad = bad || json_array_append_new(offs, json_integer((json_int_t)off)) ||
              json_array_append_new(offs, json_integer((json_int_t)end)) ||
              json_object_set_new(e, "dtype", json_string(npuc_dtype_name(ti->dtype)));
        if (!bad) {
            bad = json_object_set_new(e, "shape", shape) || json_object_set_new(e, "data_offsets", offs);
            shape = offs = NULL;
        }
        if (!bad) {
            bad = json_object_set_new(root, ti->name, e);
            e = NULL;
        }
        json_decref(shape); json_decref(offs); json_decref(e);
        if (bad) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto fail; }
        off = end;
    }
    hdr = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!hdr) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto fail; }
    size_t hl = strlen(hdr);
    size_t padded = (hl + 7) & ~(size_t)7;
    char *h2 = realloc(hdr, padded + 8);
    if (!h2) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto fail; }
    hdr = h2;
    memmove(hdr + 8, hdr, hl);
    memset(hdr + 8 + hl, ' ', padded - hl);
    for (int i = 0; i < 8; i++) hdr[i] = (char)(((uint64_t)padded >> (8 * i)) & 0xff);
    *out = hdr;
    *len = padded + 8;
    hdr = NULL;
fail:
    free(hdr);
    json_decref(root);
    return st;
}

static npuc_status stw_begin(npuc_writer *w) {
    char *hdr;
    size_t len;
    npuc_status st = npuc__st_header(w, &hdr, &len);
    if (st != NPUC_OK) return st;
    stw_state *s = calloc(1, sizeof *s);
    if (!s) {
        free(hdr);
        return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    s->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (s->fd < 0) {
        st = npuc_fail(w->ctx, NPUC_ERR_IO, "%s: cannot create %s: %s", w->path, w->tmp, strerror(errno));
        free(s);
        free(hdr);
        return st;
    }
    w->be_state = s;
    st = write_all(w, s->fd, hdr, len, "the header");
    s->pos = len;
    free(hdr);
    return st;
}

static npuc_status stw_write(npuc_writer *w, size_t i, const void *data, uint64_t n) {
    stw_state *s = w->be_state;
    char what[128];
    snprintf(what, sizeof what, "tensor '%.100s'", w->t[i].name);
    return write_sparse(w, s, data, n, what);
}

static npuc_status stw_finish(npuc_writer *w) {
    stw_state *s = w->be_state;
    npuc_status st = NPUC_OK;
    if (s->hole_at_end && ftruncate(s->fd, (off_t)s->pos) != 0)
        st = npuc_fail(w->ctx, NPUC_ERR_IO, "%s: setting the size: %s", w->path, strerror(errno));
    if (st == NPUC_OK && fsync(s->fd) != 0) st = npuc_fail(w->ctx, NPUC_ERR_IO, "%s: fsync: %s", w->path, strerror(errno));
    if (close(s->fd) != 0 && st == NPUC_OK)
        st = npuc_fail(w->ctx, NPUC_ERR_IO, "%s: close: %s", w->path, strerror(errno));
    free(s);
    w->be_state = NULL;
    return st;
}

static void stw_abort(npuc_writer *w) {
    stw_state *s = w->be_state;
    if (!s) return;
    if (s->fd >= 0) close(s->fd);
    free(s);
    w->be_state = NULL;
}

const npuc_writer_backend npuc__st_writer_backend = {stw_begin, stw_write, stw_finish, stw_abort, 0};
