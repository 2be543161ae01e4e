/*
 * onnx_reader.c - the ONNX reader.
 *
 * The file is mapped read-only and walked once (onnx_walk.c).  Each weight
 * TensorProto (TensorProto fields: 1 dims, 2 data_type, 3 segment, 4
 * float_data, 5 int32_data, 6 string_data, 7 int64_data, 8 name, 9
 * raw_data, 10 double_data, 11 uint64_data, 12 doc_string, 13
 * external_data, 14 data_location) of a type npuc has a dtype for becomes a
 * tensor of the model, named by its ONNX name, with its dims as the shape.
 * Where its values are is recorded, not the values: raw_data's offset in the
 * model file; the TensorProto's range for the typed fields (float_data, and
 * int32_data for the 8/16-bit types, F16 and BF16, as onnx.proto says),
 * decoded when loaded; or for data_location = EXTERNAL the file its
 * "location" names beside the model, with "offset" and "length".  Loading a
 * tensor reads only its bytes (pread), so memory follows the largest tensor.
 *
 * The file is untrusted: the walker checks every varint, length and wire
 * type; here every tensor's data must agree with its dims (raw_data
 * length, element count of the typed field, external length), an external
 * location must be a relative path without ".." that stays inside the
 * model's folder (openat2 RESOLVE_BENEATH, so a symlink leading out is
 * refused too), and offset + length must lie inside that file.  Tensors of
 * types npuc has no dtype for (STRING, COMPLEX, 4-bit) stay in the graph
 * untouched and are not listed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(__linux__)
#include <linux/openat2.h>
#endif

#include "onnx_format.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the ONNX reader assumes a little-endian host (raw_data is little-endian)"
#endif

enum { SRC_EMPTY, SRC_RAW, SRC_TYPED, SRC_EXTERNAL };
#define OX_SPARES 2

typedef struct ox_src {
    int kind;
    int file;       /* SRC_EXTERNAL: index into ext */
    uint64_t off;   /* RAW, EXTERNAL: where the bytes start; TYPED: the TensorProto */
    uint64_t len;   /* TYPED: the TensorProto's length */
    uint32_t field; /* TYPED: the field the values are in */
} ox_src;

typedef struct ox_ext {
    char *loc;
    int fd;
    uint64_t size;
} ox_ext;

typedef struct ox_state {
    int fd, dirfd;
    const unsigned char *map;
    uint64_t size;
    ox_src *src; /* by tensor index */
    uint64_t *cap; /* by tensor index: the capacity of its loaded buffer */
    size_t nsrc, capsrc;
    ox_ext *ext;
    size_t next;
    npuc_model *m;
    pthread_mutex_t lock; /* guards spare: loads may come from several threads */
    struct {
        void *p;
        uint64_t cap;
    } spare[OX_SPARES]; /* released payload buffers, reused by later loads */
} ox_state;

/* A buffer of at least n bytes: a released one that fits, else a new one
 * (its capacity in *cap). */
static void *buf_get(ox_state *s, uint64_t n, uint64_t *cap) {
    void *p = NULL;
    pthread_mutex_lock(&s->lock);
    int best = -1;
    for (int k = 0; k < OX_SPARES; k++)
        if (s->spare[k].p && s->spare[k].cap >= n && (best < 0 || s->spare[k].cap < s->spare[best].cap)) best = k;
    if (best >= 0) {
        p = s->spare[best].p;
        *cap = s->spare[best].cap;
        s->spare[best].p = NULL;
    }
    pthread_mutex_unlock(&s->lock);
    if (p) return p;
    *cap = n ? n : 1;
    return *cap <= SIZE_MAX ? malloc((size_t)*cap) : NULL;
}

/* Keeps p (capacity cap) for a later load, or frees it (or the smallest
 * spare, when p is larger). */
static void buf_put(ox_state *s, void *p, uint64_t cap) {
    pthread_mutex_lock(&s->lock);
    int slot = -1;
    for (int k = 0; k < OX_SPARES; k++)
        if (!s->spare[k].p || (s->spare[k].cap < cap && (slot < 0 || s->spare[slot].p))) slot = k;
    if (slot >= 0) {
        void *old = s->spare[slot].p;
        s->spare[slot].p = p;
        s->spare[slot].cap = cap;
        p = old;
    }
    pthread_mutex_unlock(&s->lock);
    free(p);
}

/* ------------------------------------------------------------ loading */

static int pread_all(int fd, void *dst, uint64_t n, uint64_t off) {
    unsigned char *d = dst;
    while (n) {
        size_t want = n > (1u << 30) ? (1u << 30) : (size_t)n;
        ssize_t k = pread(fd, d, want, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            if (k == 0) errno = 0;
            return -1;
        }
        d += k;
        off += (uint64_t)k;
        n -= (uint64_t)k;
    }
    return 0;
}

/* The values of field src->field of the TensorProto at map[off..off+len)
 * into dst (numel elements of dtype dt). */
static void decode_typed(const unsigned char *msg, uint64_t len, uint32_t field, npuc_dtype dt, unsigned char *dst,
                         uint64_t numel) {
    const unsigned char *q = msg, *end = msg + len;
    size_t es = npuc_dtype_size(dt);
    uint64_t k = 0;
    npuc__ox_field f;
    while (q < end && !npuc__ox_next(&q, end, &f)) {
        if (f.num != field) continue;
        const unsigned char *v = f.wt == 2 ? f.data : NULL, *vend = v ? f.data + f.len : NULL;
        for (;;) {
            uint64_t x;
            if (v) {
                if (v >= vend) break;
                if (field == 4 || field == 10) {
                    unsigned w = field == 4 ? 4 : 8;
                    x = 0;
                    for (unsigned i = w; i-- > 0;) x = x << 8 | v[i];
                    v += w;
                } else if (npuc__ox_varint(&v, vend, &x)) {
                    break;
                }
            } else {
                x = f.v;
            }
            if (k < numel) {
                for (size_t b = 0; b < es; b++) dst[k * es + b] = (unsigned char)(x >> (8 * b));
                k++;
            }
            if (!v) break;
        }
    }
}

static npuc_status ox_load(npuc_ctx *ctx, npuc_model *m, size_t i, void **data, int *owned) {
    ox_state *s = m->be_state;
    const npuc_tensor_info *t = &m->t[i];
    const ox_src *src = &s->src[i];
    uint64_t cap;
    unsigned char *p = buf_get(s, t->nbytes, &cap);
    if (!p) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: tensor '%s': out of memory", m->path, t->name);
    int rc = 0;
    if (src->kind == SRC_RAW) rc = pread_all(s->fd, p, t->nbytes, src->off);
    else if (src->kind == SRC_EXTERNAL) rc = pread_all(s->ext[src->file].fd, p, t->nbytes, src->off);
    else if (src->kind == SRC_TYPED) decode_typed(s->map + src->off, src->len, src->field, t->dtype, p, t->numel);
    if (rc != 0) {
        int e = errno;
        buf_put(s, p, cap);
        return npuc_fail(ctx, NPUC_ERR_IO, "%s: tensor '%s': read%s%s: %s", m->path, t->name,
                         src->kind == SRC_EXTERNAL ? " of " : "", src->kind == SRC_EXTERNAL ? s->ext[src->file].loc : "",
                         e ? strerror(e) : "the file shrank while npuc was reading it");
    }
    pthread_mutex_lock(&s->lock);
    s->cap[i] = cap;
    pthread_mutex_unlock(&s->lock);
    *data = p;
    *owned = 0;
    return NPUC_OK;
}

static void ox_release(npuc_model *m, size_t i, void *data) {
    ox_state *s = m->be_state;
    pthread_mutex_lock(&s->lock);
    uint64_t cap = s->cap[i];
    pthread_mutex_unlock(&s->lock);
    buf_put(s, data, cap);
}

static void ox_close(npuc_model *m) {
    ox_state *s = m->be_state;
    if (!s) return;
    if (s->map) munmap((void *)s->map, (size_t)s->size);
    if (s->fd >= 0) close(s->fd);
    if (s->dirfd >= 0) close(s->dirfd);
    for (size_t i = 0; i < s->next; i++) {
        if (s->ext[i].fd >= 0) close(s->ext[i].fd);
        free(s->ext[i].loc);
    }
    for (int k = 0; k < OX_SPARES; k++) free(s->spare[k].p);
    pthread_mutex_destroy(&s->lock);
    free(s->ext);
    free(s->src);
    free(s->cap);
    free(s);
    m->be_state = NULL;
}

/* Asks the kernel to read tensor i's bytes ahead of its load (a hint;
 * reads only offsets and descriptors, which nothing changes once open). */
static void ox_prefetch(npuc_model *m, size_t i) {
#if defined(__linux__)
    const ox_state *s = m->be_state;
    const ox_src *src = &s->src[i];
    if (src->kind == SRC_RAW) (void)readahead(s->fd, (off64_t)src->off, (size_t)m->t[i].nbytes);
    else if (src->kind == SRC_EXTERNAL)
        (void)readahead(s->ext[src->file].fd, (off64_t)src->off, (size_t)m->t[i].nbytes);
#else
    (void)m;
    (void)i;
#endif
}

static const npuc_backend OX_BACKEND = {ox_load, ox_close, ox_release, ox_prefetch, NULL};

/* ------------------------------------------------------------ external data */

/* Opens location relative to the model's folder, refusing anything that
 * would leave it. */
static int open_beneath(int dirfd, const char *loc) {
#if defined(__linux__) && defined(SYS_openat2)
    struct open_how how = {.flags = O_RDONLY | O_CLOEXEC, .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
    long fd = syscall(SYS_openat2, dirfd, loc, &how, sizeof how);
    if (fd >= 0 || errno != ENOSYS) return (int)fd;
#endif
    /* No openat2: follow no symlink at all. */
    char buf[PATH_MAX];
    if (strlen(loc) >= sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(buf, loc);
    int d = dup(dirfd);
    char *c = buf;
    while (d >= 0) {
        char *slash = strchr(c, '/');
        if (slash) *slash = 0;
        if (!*c || strcmp(c, ".") == 0) {
            if (!slash) break;
            c = slash + 1;
            continue;
        }
        int nfd = openat(d, c, O_NOFOLLOW | O_CLOEXEC | (slash ? O_DIRECTORY | O_PATH : O_RDONLY));
        close(d);
        if (nfd < 0 || !slash) return nfd;
        d = nfd;
        c = slash + 1;
    }
    if (d >= 0) close(d);
    errno = EISDIR;
    return -1;
}

static int bad_location(const char *loc) {
    if (!*loc || loc[0] == '/') return 1;
    for (const char *c = loc; *c;) {
        const char *e = strchr(c, '/');
        size_t n = e ? (size_t)(e - c) : strlen(c);
        if (n == 2 && c[0] == '.' && c[1] == '.') return 1;
        if (!e) break;
        c = e + 1;
    }
    return 0;
}

static npuc_status ext_file(npuc_ctx *ctx, ox_state *s, const char *path, const char *tname, const char *loc, int *idx) {
    for (size_t i = 0; i < s->next; i++)
        if (strcmp(s->ext[i].loc, loc) == 0) {
            *idx = (int)i;
            return NPUC_OK;
        }
    if (bad_location(loc))
        return npuc_fail(ctx, NPUC_ERR_FORMAT,
                         "%s: tensor '%s': external data location '%s' is not a relative path inside the model's folder",
                         path, tname, loc);
    ox_ext *e = realloc(s->ext, (s->next + 1) * sizeof *e);
    if (!e) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
    s->ext = e;
    int fd = open_beneath(s->dirfd, loc);
    if (fd < 0)
        return npuc_fail(ctx, errno == EXDEV || errno == ELOOP ? NPUC_ERR_FORMAT : errno == ENOENT ? NPUC_ERR_NOT_FOUND : NPUC_ERR_IO,
                         "%s: tensor '%s': external data '%s': %s", path, tname, loc,
                         errno == EXDEV || errno == ELOOP ? "leads outside the model's folder" : strerror(errno));
    struct stat sb;
    char *dup = npuc__strdup(loc);
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || !dup) {
        int e2 = errno;
        close(fd);
        free(dup);
        return npuc_fail(ctx, NPUC_ERR_IO, "%s: tensor '%s': external data '%s': %s", path, tname, loc,
                         !dup ? "out of memory" : e2 && !S_ISREG(sb.st_mode) ? strerror(e2) : "not a regular file");
    }
    s->ext[s->next] = (ox_ext){dup, fd, (uint64_t)sb.st_size};
    *idx = (int)s->next++;
    return NPUC_OK;
}

/* ------------------------------------------------------------ weights */

typedef struct ox_rd {
    ox_state *s;
    npuc_model *m;
} ox_rd;

/* Elements in one occurrence of a typed field (packed or not); -1 when a
 * packed run is malformed. */
static int64_t typed_count(const npuc__ox_field *f, uint32_t field) {
    int fixed = field == 4 ? 4 : field == 10 ? 8 : 0;
    if (f->wt != 2) {
        int want = fixed == 4 ? 5 : fixed == 8 ? 1 : 0;
        return (int)f->wt == want ? 1 : -1;
    }
    if (fixed) return f->len % (uint64_t)fixed ? -1 : (int64_t)(f->len / (uint64_t)fixed);
    int64_t k = 0;
    for (uint64_t i = 0; i < f->len; i++) k += !(f->data[i] & 0x80);
    if (f->len && (f->data[f->len - 1] & 0x80)) return -1;
    return k;
}

static int parse_u64(const char *s, uint64_t *v) {
    if (!*s || strlen(s) > 20) return -1;
    uint64_t x = 0;
    for (const char *c = s; *c; c++) {
        if (*c < '0' || *c > '9' || x > (UINT64_MAX - 9) / 10) return -1;
        x = x * 10 + (uint64_t)(*c - '0');
    }
    *v = x;
    return 0;
}

static npuc_status rd_weight(npuc__ox_walk *wk, const npuc__ox_weight *w, npuc__ox_buf *out) {
    ox_rd *r = wk->user;
    ox_state *s = r->s;
    const char *path = wk->path;
    const unsigned char *q = w->msg, *end = w->msg + w->len;
    npuc__ox_field f;
    const char *why;
    int64_t dims[NPUC_MAX_RANK];
    int rank = 0, too_deep = 0, external = 0, has_raw = 0;
    uint64_t dtype = 0, raw_off = 0, raw_len = 0, ext_off = 0, ext_len = 0;
    int has_len = 0;
    int64_t counts[12] = {0};
    char *loc = NULL;
    npuc_status st = NPUC_OK;
    while (q < end && st == NPUC_OK) {
        if ((why = npuc__ox_next(&q, end, &f))) { st = npuc__ox_bad(wk, q, "TensorProto", why); break; }
        switch (f.num) {
        case 1:
            if (f.wt == 0) {
                if (rank < NPUC_MAX_RANK) dims[rank] = (int64_t)f.v;
                if (f.v > INT64_MAX) st = npuc__ox_bad(wk, f.start, "TensorProto.dims", "a negative dimension");
                if (rank++ >= NPUC_MAX_RANK) too_deep = 1;
            } else if (f.wt == 2) {
                const unsigned char *v = f.data, *vend = f.data + f.len;
                uint64_t x;
                while (v < vend && st == NPUC_OK) {
                    if ((why = npuc__ox_varint(&v, vend, &x))) st = npuc__ox_bad(wk, f.start, "TensorProto.dims", why);
                    else if (x > INT64_MAX) st = npuc__ox_bad(wk, f.start, "TensorProto.dims", "a negative dimension");
                    else {
                        if (rank < NPUC_MAX_RANK) dims[rank] = (int64_t)x;
                        if (rank++ >= NPUC_MAX_RANK) too_deep = 1;
                    }
                }
            } else {
                st = npuc__ox_bad(wk, f.start, "TensorProto.dims", "wrong wire type");
            }
            break;
        case 2:
        case 14:
            if (f.wt != 0) { st = npuc__ox_bad(wk, f.start, "TensorProto", "wrong wire type (expected a varint)"); break; }
            if (f.num == 2) dtype = f.v;
            else external = f.v == 1;
            break;
        case 3:
            st = npuc_fail(wk->ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s': segmented tensors are not supported", path,
                           w->name);
            break;
        case 4: case 5: case 6: case 7: case 10: case 11:
            if (f.num == 6) { counts[6]++; break; }
            {
                int64_t k = typed_count(&f, f.num);
                if (k < 0) st = npuc__ox_bad(wk, f.start, "TensorProto data", "wrong wire type or a broken packed array");
                else counts[f.num] += k;
            }
            break;
        case 9:
            if (f.wt != 2) { st = npuc__ox_bad(wk, f.start, "TensorProto.raw_data", "wrong wire type"); break; }
            has_raw = 1;
            raw_off = (uint64_t)(f.data - s->map);
            raw_len = f.len;
            break;
        case 13: {
            if (f.wt != 2) { st = npuc__ox_bad(wk, f.start, "TensorProto.external_data", "wrong wire type"); break; }
            const unsigned char *t = f.data, *tend = f.data + f.len;
            npuc__ox_field g;
            const unsigned char *kp = NULL, *vp = NULL;
            uint64_t kl = 0, vl = 0;
            while (t < tend && st == NPUC_OK) {
                if ((why = npuc__ox_next(&t, tend, &g))) st = npuc__ox_bad(wk, t, "external_data", why);
                else if ((g.num == 1 || g.num == 2) && g.wt != 2) st = npuc__ox_bad(wk, g.start, "external_data", "wrong wire type");
                else if (g.num == 1) { kp = g.data; kl = g.len; }
                else if (g.num == 2) { vp = g.data; vl = g.len; }
            }
            if (st != NPUC_OK || !kp) break;
            char val[4097];
            if (vl >= sizeof val || (vp && memchr(vp, 0, (size_t)vl))) {
                st = npuc_fail(wk->ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': an external_data value is too long or holds a NUL",
                               path, w->name);
                break;
            }
            if (vp) memcpy(val, vp, (size_t)vl);
            val[vl] = 0;
            if (kl == 8 && memcmp(kp, "location", 8) == 0) {
                free(loc);
                if (!(loc = npuc__strdup(val))) st = npuc_fail(wk->ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
            } else if ((kl == 6 && memcmp(kp, "offset", 6) == 0) || (kl == 6 && memcmp(kp, "length", 6) == 0)) {
                int is_len = kp[0] == 'l';
                if (parse_u64(val, is_len ? &ext_len : &ext_off) != 0)
                    st = npuc_fail(wk->ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': external data %s '%s' is not a number",
                                   path, w->name, is_len ? "length" : "offset", val);
                has_len |= is_len;
            }
            break;
        }
        default:
            break;
        }
    }
    npuc_dtype dt;
    uint32_t field;
    if (st == NPUC_OK && npuc__ox_dtype(dtype, &dt, &field) != 0) {
        /* Not a tensor npuc carries: the graph keeps it as it is. */
        if (external)
            st = npuc_fail(wk->ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s': external data of ONNX data type %" PRIu64
                           " is not supported", path, w->name, dtype);
        else
            npuc__ox_put(out, w->msg, (size_t)w->len);
        free(loc);
        return st;
    }
    if (st == NPUC_OK && too_deep)
        st = npuc_fail(wk->ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s': rank %d exceeds %d", path, w->name, rank, NPUC_MAX_RANK);
    size_t idx = 0;
    if (st == NPUC_OK) st = npuc__model_add(wk->ctx, r->m, w->name, dt, rank, dims, NULL, &idx);
    if (st != NPUC_OK) { free(loc); return st; }
    const npuc_tensor_info *t = &r->m->t[idx];
    char dimtxt[160];
    int o = snprintf(dimtxt, sizeof dimtxt, "[");
    for (int i = 0; i < rank && o < (int)sizeof dimtxt - 24; i++)
        o += snprintf(dimtxt + o, sizeof dimtxt - (size_t)o, "%s%" PRId64, i ? ", " : "", dims[i]);
    snprintf(dimtxt + o, sizeof dimtxt - (size_t)o, "]");
    ox_src src = {SRC_EMPTY, 0, 0, 0, 0};
    int ntyped = 0;
    for (int k = 4; k <= 11; k++) ntyped += counts[k] != 0 && k != 8 && k != 9;
    if (external) {
        if (has_raw || ntyped)
            st = npuc_fail(wk->ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': external data together with values in the file",
                           path, w->name);
        else if (!loc)
            st = npuc_fail(wk->ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': external data without a location", path, w->name);
        else if (has_len && ext_len != t->nbytes)
            st = npuc_fail(wk->ctx, NPUC_ERR_FORMAT,
                           "%s: tensor '%s': dims %s of %s need %" PRIu64 " bytes but the external length is %" PRIu64,
                           path, w->name, dimtxt, npuc_dtype_name(dt), t->nbytes, ext_len);
        int fi = 0;
        uint64_t e;
        if (st == NPUC_OK) st = ext_file(wk->ctx, s, path, w->name, loc, &fi);
        if (st == NPUC_OK && (npuc_add_overflow(ext_off, t->nbytes, &e) || e > s->ext[fi].size))
            st = npuc_fail(wk->ctx, NPUC_ERR_FORMAT,
                           "%s: tensor '%s': external data at offset %" PRIu64 " + %" PRIu64 " bytes runs past the end of '%s' (%" PRIu64 " bytes)",
                           path, w->name, ext_off, t->nbytes, loc, s->ext[fi].size);
        src = (ox_src){SRC_EXTERNAL, fi, ext_off, t->nbytes, 0};
    } else if (has_raw) {
        if (ntyped)
            st = npuc_fail(wk->ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': both raw_data and typed values", path, w->name);
        else if (raw_len != t->nbytes)
            st = npuc_fail(wk->ctx, NPUC_ERR_FORMAT,
                           "%s: tensor '%s': dims %s of %s need %" PRIu64 " bytes but raw_data holds %" PRIu64, path,
                           w->name, dimtxt, npuc_dtype_name(dt), t->nbytes, raw_len);
        src = (ox_src){SRC_RAW, 0, raw_off, raw_len, 0};
    } else if (ntyped) {
        if (ntyped > 1 || !counts[field])
            st = npuc_fail(wk->ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': values in a field that does not fit data type %s",
                           path, w->name, npuc_dtype_name(dt));
        else if ((uint64_t)counts[field] != t->numel)
            st = npuc_fail(wk->ctx, NPUC_ERR_FORMAT,
                           "%s: tensor '%s': dims %s hold %" PRIu64 " elements but the file has %" PRId64 " values", path,
                           w->name, dimtxt, t->numel, counts[field]);
        src = (ox_src){SRC_TYPED, 0, (uint64_t)(w->msg - s->map), w->len, field};
    } else if (t->numel) {
        st = npuc_fail(wk->ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': dims %s hold %" PRIu64 " elements but it has no data",
                       path, w->name, dimtxt, t->numel);
    }
    free(loc);
    if (st != NPUC_OK) return st;
    if (idx >= s->capsrc) { /* grow by doubling only when full (it doubled on every new tensor) */
        size_t cap = s->capsrc ? 2 * s->capsrc : 16;
        while (cap <= idx) cap *= 2;
        ox_src *ns = realloc(s->src, cap * sizeof *ns);
        if (!ns) return npuc_fail(wk->ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
        s->src = ns;
        s->capsrc = cap;
    }
    if (s->nsrc <= idx) s->nsrc = idx + 1;
    s->src[idx] = src;
    /* The graph keeps the TensorProto without its values. */
    npuc__ox_put_tensor_meta(out, w->msg, w->len);
    return NPUC_OK;
}

static npuc_status rd_meta(npuc__ox_walk *wk, const char *k, const char *v, int *keep) {
    ox_rd *r = wk->user;
    *keep = 0;
    if (!*k || strcmp(k, NPUC__ONNX_MODEL_KEY) == 0) {
        *keep = 1; /* nothing npuc can name: stays in the graph */
        return NPUC_OK;
    }
    return npuc__model_add_meta(wk->ctx, r->m, k, v);
}

int npuc__onnx_model_external(const npuc_model *m) {
    const ox_state *s = m->be_state;
    for (size_t i = 0; s && i < s->nsrc; i++)
        if (s->src[i].kind == SRC_EXTERNAL) return 1;
    return 0;
}

npuc_status npuc__onnx_open(npuc_ctx *ctx, const char *path, const npuc_open_opts *o, npuc_model **out) {
    (void)o;
    *out = NULL;
    npuc_status st = NPUC_OK;
    ox_state *s = calloc(1, sizeof *s);
    npuc_model *m = npuc__model_new(path, npuc_format_find("onnx"));
    if (!s || !m) {
        free(s);
        if (m) npuc_model_close(m);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
    }
    s->fd = s->dirfd = -1;
    pthread_mutex_init(&s->lock, NULL);
    m->be = &OX_BACKEND;
    m->be_state = s;
    npuc__ox_buf skel = {0};
    if ((s->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        st = npuc_fail(ctx, errno == ENOENT ? NPUC_ERR_NOT_FOUND : NPUC_ERR_IO, "%s: %s", path, strerror(errno));
        goto done;
    }
    struct stat sb;
    if (fstat(s->fd, &sb) != 0) { st = npuc_fail(ctx, NPUC_ERR_IO, "%s: %s", path, strerror(errno)); goto done; }
    s->size = m->file_size = (uint64_t)sb.st_size;
    if (s->size == 0) { st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: empty file, not an ONNX model", path); goto done; }
    void *map = mmap(NULL, (size_t)s->size, PROT_READ, MAP_PRIVATE, s->fd, 0);
    if (map == MAP_FAILED) { st = npuc_fail(ctx, NPUC_ERR_IO, "%s: mmap: %s", path, strerror(errno)); goto done; }
    s->map = map;
    {
        char *dir = npuc__strdup(path);
        if (!dir) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path); goto done; }
        char *slash = strrchr(dir, '/');
        if (slash == dir) slash[1] = 0;
        else if (slash) *slash = 0;
        s->dirfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        free(dir);
        if (s->dirfd < 0) { st = npuc_fail(ctx, NPUC_ERR_IO, "%s: the model's folder: %s", path, strerror(errno)); goto done; }
    }
    ox_rd r = {s, m};
    npuc__ox_walk wk = {.ctx = ctx, .path = path, .base = s->map, .weight = rd_weight, .meta = rd_meta, .user = &r};
    if ((st = npuc__ox_walk_model(&wk, s->map, s->size, &skel)) != NPUC_OK) goto done;
    char *b64 = npuc__ox_b64_encode(skel.p, skel.n);
    if (!b64) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path); goto done; }
    st = npuc__model_add_meta(ctx, m, NPUC__ONNX_MODEL_KEY, b64);
    free(b64);
    if (st == NPUC_OK && !(s->cap = calloc(m->n + 1, sizeof *s->cap)))
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
    if (st == NPUC_OK) st = npuc__model_finish(ctx, m, 0);
done:
    npuc__ox_free(&skel);
    if (st != NPUC_OK) {
        npuc_model_close(m);
        return st;
    }
    *out = m;
    return NPUC_OK;
}
