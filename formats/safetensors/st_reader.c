/*
 * st_reader.c - the safetensors reader.
 *
 * Byte layout (https://github.com/huggingface/safetensors, "Format"):
 *
 *   [0, 8)          N: unsigned 64-bit little-endian header length
 *   [8, 8+N)        header: a UTF-8 JSON object, possibly padded with spaces
 *                   { "__metadata__": {str: str, ...},            (optional)
 *                     "<name>": {"dtype": "F32", "shape": [..],
 *                                "data_offsets": [begin, end]}, ... }
 *   [8+N, EOF)      the byte buffer; offsets are relative to its start
 *
 * Validation is strict because the file is untrusted: the header length must
 * fit the file and a 100 MB limit (npuc_open_opts.max_header_bytes); the
 * header must be a non-empty, valid UTF-8 JSON object starting at its first
 * byte, with no duplicate keys; every tensor needs exactly the three fields,
 * a dtype npuc knows, non-negative integer dimensions, begin <= end, and
 * end - begin == numel * dtype size computed with overflow checks; sorted by
 * offset the tensors must tile the buffer with no gap and no overlap; the
 * file must end exactly at 8 + N + the last end.  A malformed file is
 * NPUC_ERR_FORMAT; a well-formed one that npuc cannot represent (rank > 8, a
 * dtype of the format that npuc lacks, such as C64 or F8_E8M0) is
 * NPUC_ERR_UNSUPPORTED; a shape whose sizes overflow 64 bits is
 * NPUC_ERR_OVERFLOW.
 *
 * Every message names the file and, where there is one, the tensor.  Names
 * and strings from the file are shown up to ST_SHOWN bytes, cut on a UTF-8
 * character boundary, so that a hostile 1 MB name cannot push the problem
 * out of the one-line message.
 *
 * The file is opened read-only and read with pread(2): the header when it is
 * opened, a payload when a pass loads it, into a buffer of the reader's own
 * (up to ST_SPARES released buffers are kept for the next tensors, so a
 * pass working tensor by tensor allocates and faults in its buffers once).  The file is never
 * mapped: a file truncated while npuc runs would turn a mapped read into
 * SIGBUS, while a short read here is an error naming the file and the tensor
 * (NPUC_ERR_IO), and a file replaced by rename keeps being read whole from
 * the inode that was opened.  Tensors are listed in storage (offset) order,
 * which for exported models is graph order.
 */
#define _GNU_SOURCE /* readahead(2) */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "st_format.h"

/* Released buffers kept: one per tensor a -j 2 pass and its read-ahead
 * have in flight, so a pass working tensor by tensor faults each buffer in
 * once (a fresh buffer is mapped anew and faulted page by page). */
#define ST_SPARES 4

typedef struct st_state {
    int fd;
    uint64_t data_start; /* 8 + N */
    pthread_mutex_t lock; /* guards spare: loads may come from several threads */
    void *spare[ST_SPARES]; /* released payload buffers kept for the next loads */
    int sparse;           /* the file has holes (fewer blocks than bytes): read_at skips them */
} st_state;

typedef struct st_entry {
    const char *name;
    npuc_dtype dtype;
    int rank;
    int64_t shape[NPUC_MAX_RANK];
    uint64_t begin, end;
    size_t order; /* position in the header */
} st_entry;

/* Payload buffers carry their capacity in a 64-byte prefix (which also
 * keeps the payload 64-byte aligned for the kernels). */
#define ST_BUF_HDR 64
#define ST_HUGE ((size_t)2 << 20) /* a huge page */

static uint64_t buf_cap(const void *p) { return *(const uint64_t *)((const char *)p - ST_BUF_HDR); }

static void buf_free(void *p) {
    if (p) free((char *)p - ST_BUF_HDR);
}

/* A buffer of at least n bytes: the smallest spare one that is big enough.
 * Large buffers are 2 MiB-aligned with transparent huge pages requested, so
 * a new one faults in 2 MiB at a time rather than 4 KiB. */
static void *buf_get(st_state *s, uint64_t n) {
    void *p = NULL;
    pthread_mutex_lock(&s->lock);
    int best = -1;
    for (int k = 0; k < ST_SPARES; k++)
        if (s->spare[k] && buf_cap(s->spare[k]) >= n && (best < 0 || buf_cap(s->spare[k]) < buf_cap(s->spare[best])))
            best = k;
    if (best >= 0) {
        p = s->spare[best];
        s->spare[best] = NULL;
    }
    pthread_mutex_unlock(&s->lock);
    if (p) return p;
    if (n > SIZE_MAX - ST_BUF_HDR - ST_HUGE) return NULL;
    const size_t want = (size_t)n + ST_BUF_HDR, align = want >= 2 * ST_HUGE ? ST_HUGE : ST_BUF_HDR;
    const size_t size = align == ST_HUGE ? (want + ST_HUGE - 1) / ST_HUGE * ST_HUGE : want;
    char *b = NULL;
    if (posix_memalign((void **)&b, align, size) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    if (align == ST_HUGE) (void)madvise(b, size, MADV_HUGEPAGE);
#endif
    *(uint64_t *)b = n;
    return b + ST_BUF_HDR;
}

/* Keeps p for the next loads, in place of the smallest spare buffer when
 * every slot is taken (and frees whichever is not kept). */
static void buf_put(st_state *s, void *p) {
    pthread_mutex_lock(&s->lock);
    int slot = -1;
    for (int k = 0; k < ST_SPARES && slot < 0; k++)
        if (!s->spare[k]) slot = k;
    if (slot < 0) {
        slot = 0;
        for (int k = 1; k < ST_SPARES; k++)
            if (buf_cap(s->spare[k]) < buf_cap(s->spare[slot])) slot = k;
        if (buf_cap(s->spare[slot]) >= buf_cap(p)) slot = -1;
    }
    if (slot >= 0) {
        void *old = s->spare[slot];
        s->spare[slot] = p;
        p = old;
    }
    pthread_mutex_unlock(&s->lock);
    buf_free(p);
}

/* Reads n bytes at off; 0, or -1 with errno (0 for a file that ended early).
 * Large payloads go in NPUC_PROGRESS_STEP pieces, each reported to ctx's
 * progress function (npuc_ctx_set_progress).  With sparse set, holes of the
 * file (SEEK_DATA/SEEK_HOLE) are zero-filled instead of read: reading a hole
 * makes the kernel copy zeros page by page, which for a zero-padded 4 GiB
 * tensor cost seconds of system time; the bytes are the same. */
static int read_at_part(npuc_ctx *ctx, int fd, int sparse, void *dst, uint64_t n, uint64_t off, uint64_t whole);
static int read_at(npuc_ctx *ctx, int fd, int sparse, void *dst, uint64_t n, uint64_t off) {
    return read_at_part(ctx, fd, sparse, dst, n, off, n);
}

/* read_at for one share of a payload of `whole` bytes read by several
 * threads at once: the progress reported is the share's fraction of whole
 * (the shares advance alike). */
static void progress_part(npuc_ctx *ctx, uint64_t done, uint64_t total, uint64_t whole) {
    npuc__progress(ctx, NPUC_PROGRESS_READ,
                   total == whole ? done : (uint64_t)((double)done / (double)total * (double)whole), whole);
}

static int read_at_part(npuc_ctx *ctx, int fd, int sparse, void *dst, uint64_t n, uint64_t off, uint64_t whole) {
    char *d = dst;
    const uint64_t total = n;
    /* A share reports in steps of its size's part of NPUC_PROGRESS_STEP,
     * so the whole payload's bar moves as often as when one thread reads. */
    const uint64_t pstep = whole > total ? NPUC_PROGRESS_STEP / (whole / total) : NPUC_PROGRESS_STEP;
    const uint64_t step = ctx && ctx->progress && whole >= NPUC_PROGRESS_MIN
                              ? (pstep < ((uint64_t)1 << 20) ? (uint64_t)1 << 20 : pstep)
                              : (1u << 30);
    while (n > 0) {
        uint64_t lim = n > step ? step : n;
        if (sparse && lim >= ((uint64_t)1 << 20)) {
            off_t data = lseek(fd, (off_t)off, SEEK_DATA);
            uint64_t hole = 0;
            if (data < 0 && errno == ENXIO) { /* a hole up to the end of the file, or off is past it */
                struct stat sb;
                if (fstat(fd, &sb) != 0) return -1;
                if ((uint64_t)sb.st_size < off + n) { errno = 0; return -1; } /* the file shrank */
                hole = lim;
            } else if (data > (off_t)off) {
                hole = (uint64_t)data - off < lim ? (uint64_t)data - off : lim;
            } else if (data == (off_t)off) { /* data: read up to the next hole */
                off_t h = lseek(fd, (off_t)off, SEEK_HOLE);
                if (h > (off_t)off && (uint64_t)h - off < lim) lim = (uint64_t)h - off;
            } /* lseek failed otherwise (no SEEK_DATA support): plain reads */
            if (hole) {
                memset(d, 0, (size_t)hole);
                d += hole;
                off += hole;
                n -= hole;
                progress_part(ctx, total - n, total, whole);
                continue;
            }
        }
        ssize_t r = pread(fd, d, (size_t)lim, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            if (r == 0) errno = 0;
            return -1;
        }
        d += r;
        off += (uint64_t)r;
        n -= (uint64_t)r;
        progress_part(ctx, total - n, total, whole);
    }
    return 0;
}

/* Payloads of at least ST_PAR_MIN bytes are read by up to ST_READERS
 * threads at once (the context's thread count, -j), each a contiguous,
 * page-aligned share: one pread from the page cache runs at the speed of
 * one core's memory copy, and during the read the pass's other threads
 * would only wait (bench/bench_schemes.py's read column: 1 GiB from tmpfs
 * in 0.15 s on one thread).  A thread that cannot be started leaves its
 * share to the caller's thread.  0, or -1 with errno as read_at (the first
 * failing share's). */
#define ST_PAR_MIN ((uint64_t)8 << 20)
#define ST_READERS 4
typedef struct st_share {
    int fd, sparse;
    char *dst;
    uint64_t n, off;
    int rc, err;
} st_share;

static void *share_main(void *arg) {
    st_share *sh = arg;
    sh->rc = read_at_part(NULL, sh->fd, sh->sparse, sh->dst, sh->n, sh->off, sh->n);
    sh->err = errno;
    return NULL;
}

static int read_par(npuc_ctx *ctx, int fd, int sparse, void *dst, uint64_t n, uint64_t off) {
    int th = ctx ? npuc_ctx_threads(ctx) : 1;
    if (th <= 0) {
        const long c = sysconf(_SC_NPROCESSORS_ONLN);
        th = c > 0 ? (int)(c < ST_READERS ? c : ST_READERS) : 1;
    }
    if (th > ST_READERS) th = ST_READERS;
    if (th < 2 || n < ST_PAR_MIN) return read_at(ctx, fd, sparse, dst, n, off);
    const uint64_t share = (n / (uint64_t)th + 4095) / 4096 * 4096;
    st_share sh[ST_READERS];
    pthread_t tid[ST_READERS];
    int started[ST_READERS] = {0}, k = 0;
    for (uint64_t at = 0; at < n; at += share, k++) {
        sh[k] = (st_share){fd, sparse, (char *)dst + at, n - at < share ? n - at : share, off + at, 0, 0};
        if (k > 0) started[k] = pthread_create(&tid[k], NULL, share_main, &sh[k]) == 0;
    }
    sh[0].rc = read_at_part(ctx, fd, sparse, sh[0].dst, sh[0].n, sh[0].off, n);
    sh[0].err = errno;
    for (int j = 1; j < k; j++)
        if (started[j]) pthread_join(tid[j], NULL);
        else share_main(&sh[j]);
    for (int j = 0; j < k; j++)
        if (sh[j].rc != 0) {
            errno = sh[j].err;
            return -1;
        }
    return 0;
}

/* The error of a failed read_at of tensor t (e: its errno; 0 for a file
 * that ended early). */
static npuc_status read_failed(npuc_ctx *ctx, const npuc_model *m, const npuc_tensor_info *t, int e) {
    const st_state *s = m->be_state;
    if (e == 0) {
        struct stat sb;
        unsigned long long now = fstat(s->fd, &sb) == 0 ? (unsigned long long)sb.st_size : 0;
        return npuc_fail(ctx, NPUC_ERR_IO,
                         "%s: tensor '%s': the file shrank from %llu to %llu bytes while npuc was "
                         "reading it (truncated or rewritten in place?)",
                         m->path, t->name, (unsigned long long)m->file_size, now);
    }
    return npuc_fail(ctx, NPUC_ERR_IO, "%s: tensor '%s': read: %s", m->path, t->name, strerror(e));
}

static npuc_status st_load(npuc_ctx *ctx, npuc_model *m, size_t i, void **data, int *owned) {
    st_state *s = m->be_state;
    const npuc_tensor_info *t = &m->t[i];
    void *p = buf_get(s, t->nbytes);
    if (!p) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: tensor '%s': out of memory", m->path, t->name);
    if (read_par(ctx, s->fd, s->sparse, p, t->nbytes, s->data_start + m->offset[i]) != 0) {
        int e = errno;
        buf_put(s, p);
        return read_failed(ctx, m, t, e);
    }
    *data = p;
    *owned = 0;
    return NPUC_OK;
}

static void st_release(npuc_model *m, size_t i, void *data) {
    (void)i;
    buf_put(m->be_state, data);
}

static void st_close(npuc_model *m) {
    st_state *s = m->be_state;
    if (!s) return;
    if (s->fd >= 0) close(s->fd);
    for (int k = 0; k < ST_SPARES; k++) buf_free(s->spare[k]);
    pthread_mutex_destroy(&s->lock);
    free(s);
    m->be_state = NULL;
}

/* Asks the kernel to read tensor i's bytes into the page cache ahead of
 * its load (readahead(2)); only reads the fd and the offsets, which nothing
 * changes after opening. */
static void st_prefetch(npuc_model *m, size_t i) {
#if defined(__linux__)
    const st_state *s = m->be_state;
    (void)readahead(s->fd, (off64_t)(s->data_start + m->offset[i]), (size_t)m->t[i].nbytes);
#else
    (void)m;
    (void)i;
#endif
}

/* Bytes [off, off + n) of tensor i into the caller's dst: pread(2) on the
 * shared fd, which keeps no file position, so threads may read disjoint
 * ranges at once (no progress is reported: ctx may be NULL). */
static npuc_status st_read_range(npuc_ctx *ctx, npuc_model *m, size_t i, uint64_t off, uint64_t n, void *dst) {
    const st_state *s = m->be_state;
    if (read_at(NULL, s->fd, s->sparse, dst, n, s->data_start + m->offset[i] + off) != 0)
        return read_failed(ctx, m, &m->t[i], errno);
    return NPUC_OK;
}

static const npuc_backend ST_BACKEND = {st_load, st_close, st_release, st_prefetch, st_read_range};

/* Dtypes the format defines (huggingface/safetensors, Dtype) that npuc has no
 * representation for: such a file is well-formed but unsupported. */
static const char *const ST_FOREIGN_DTYPES[] = {"F4", "F6_E2M3", "F6_E3M2", "F8_E8M0",
                                                "F8_E4M3FNUZ", "F8_E5M2FNUZ", "C64"};

#define ST_SHOWN 160

/* How many bytes of s a message shows: all of it up to max bytes, else max
 * bytes backed up to the start of a UTF-8 character. */
static int shown_len(const char *s, size_t max) {
    size_t n = strlen(s);
    if (n <= max) return (int)n;
    n = max;
    while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80) n--;
    return (int)n;
}

/* The three printf arguments of "%.*s%s": s, shortened, and "..." if it was. */
#define SHOWN(s, max) shown_len((s), (max)), (s), strlen(s) > (max) ? "..." : ""
/* "tensor '<name>'" for a name from the file. */
#define TNAME "tensor '%.*s%s'"
#define NAME(s) SHOWN(s, ST_SHOWN)

static int cmp_entry(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* A JSON integer in [0, INT64_MAX]; jansson rejects larger literals itself. */
static int get_uint(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v)) return -1;
    json_int_t x = json_integer_value(v);
    if (x < 0) return -1;
    *out = (uint64_t)x;
    return 0;
}

static npuc_status parse_entry(npuc_ctx *ctx, const char *path, const char *name, json_t *v,
                               st_entry *e) {
    if (!json_is_object(v))
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: " TNAME ": entry is not a JSON object", path,
                         NAME(name));
    json_t *dt = NULL, *shape = NULL, *offs = NULL;
    const char *k;
    json_t *f;
    json_object_foreach(v, k, f) {
        if (strcmp(k, "dtype") == 0) dt = f;
        else if (strcmp(k, "shape") == 0) shape = f;
        else if (strcmp(k, "data_offsets") == 0) offs = f;
        else return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: " TNAME ": unknown field '%.*s%s'", path,
                              NAME(name), SHOWN(k, 32));
    }
    if (!dt || !shape || !offs)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: " TNAME ": missing field '%s'", path, NAME(name),
                         !dt ? "dtype" : !shape ? "shape" : "data_offsets");
    if (!json_is_string(dt))
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: " TNAME ": dtype is not a string", path, NAME(name));
    const char *dts = json_string_value(dt);
    int known = 0;
    for (int d = 0; d < NPUC_DTYPE_COUNT; d++)
        if (strcmp(dts, npuc_dtype_name((npuc_dtype)d)) == 0) { e->dtype = (npuc_dtype)d; known = 1; }
    if (!known) {
        for (size_t i = 0; i < sizeof ST_FOREIGN_DTYPES / sizeof ST_FOREIGN_DTYPES[0]; i++)
            if (strcmp(dts, ST_FOREIGN_DTYPES[i]) == 0)
                return npuc_fail(ctx, NPUC_ERR_UNSUPPORTED,
                                 "%s: " TNAME ": dtype '%s' is not supported by npuc", path, NAME(name),
                                 dts);
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: " TNAME ": unknown dtype '%.*s%s'", path,
                         NAME(name), SHOWN(dts, 32));
    }
    if (!json_is_array(shape))
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: " TNAME ": shape is not an array", path, NAME(name));
    size_t rank = json_array_size(shape);
    if (rank > NPUC_MAX_RANK)
        return npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: " TNAME ": rank %zu exceeds %d", path,
                         NAME(name), rank, NPUC_MAX_RANK);
    e->rank = (int)rank;
    for (size_t i = 0; i < rank; i++) {
        uint64_t d;
        if (get_uint(json_array_get(shape, i), &d) != 0)
            return npuc_fail(ctx, NPUC_ERR_FORMAT,
                             "%s: " TNAME ": shape[%zu] is not a non-negative integer", path,
                             NAME(name), i);
        e->shape[i] = (int64_t)d;
    }
    if (!json_is_array(offs) || json_array_size(offs) != 2 ||
        get_uint(json_array_get(offs, 0), &e->begin) != 0 ||
        get_uint(json_array_get(offs, 1), &e->end) != 0)
        return npuc_fail(ctx, NPUC_ERR_FORMAT,
                         "%s: " TNAME ": data_offsets is not [begin, end] of non-negative integers",
                         path, NAME(name));
    if (e->begin > e->end)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: " TNAME ": data_offsets [%llu,%llu) end before begin",
                         path, NAME(name), (unsigned long long)e->begin, (unsigned long long)e->end);
    uint64_t numel, nbytes;
    if (npuc__shape_sizes(e->dtype, e->rank, e->shape, &numel, &nbytes) != 0)
        return npuc_fail(ctx, NPUC_ERR_OVERFLOW, "%s: " TNAME ": shape overflows 64-bit sizes", path,
                         NAME(name));
    if (e->end - e->begin != nbytes)
        return npuc_fail(ctx, NPUC_ERR_FORMAT,
                         "%s: " TNAME ": data_offsets [%llu,%llu) hold %llu bytes, %s shape needs %llu",
                         path, NAME(name), (unsigned long long)e->begin, (unsigned long long)e->end,
                         (unsigned long long)(e->end - e->begin), npuc_dtype_name(e->dtype),
                         (unsigned long long)nbytes);
    return NPUC_OK;
}

/* Parses the header at b (8-byte length, JSON) of a file of fsize bytes into
 * m: metadata, tensors in storage order with their buffer offsets in
 * m->offset.  b must hold at least min(fsize, 8 + header length) bytes. */
static npuc_status parse_header(npuc_ctx *ctx, const char *path, npuc_model *m, const unsigned char *b,
                                uint64_t fsize, uint64_t max_header, uint64_t *data_start) {
    npuc_status st = NPUC_OK;
    json_t *root = NULL;
    st_entry *ents = NULL;
    if (fsize < 8)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: file is %llu bytes, too short for a safetensors header", path,
                         (unsigned long long)fsize);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b[i];
    uint64_t limit = max_header ? max_header : 100000000u;
    if (hlen > limit) {
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: header length %llu exceeds the %llu-byte limit", path,
                       (unsigned long long)hlen, (unsigned long long)limit);
        goto done;
    }
    if (hlen > fsize - 8) {
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: header length %llu exceeds the file (%llu bytes)", path,
                       (unsigned long long)hlen, (unsigned long long)fsize);
        goto done;
    }
    if (hlen == 0) {
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: header is empty (length 0)", path);
        goto done;
    }
    if (b[8] != '{') {
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: header does not start with a JSON object", path);
        goto done;
    }
    if (!npuc__utf8_valid((const char *)b + 8, (size_t)hlen)) {
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: header is not valid UTF-8", path);
        goto done;
    }
    *data_start = 8 + hlen;
    json_error_t je;
    root = json_loadb((const char *)b + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: header JSON: %s at byte %d", path, je.text,
                       je.position);
        goto done;
    }
    if (!json_is_object(root)) {
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: header is not a JSON object", path);
        goto done;
    }
    size_t n = json_object_size(root);
    ents = calloc(n ? n : 1, sizeof *ents);
    if (!ents) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path); goto done; }
    size_t nt = 0, order = 0;
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        if (strcmp(k, "__metadata__") == 0) {
            if (!json_is_object(v)) {
                st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: __metadata__ is not a JSON object", path);
                goto done;
            }
            const char *mk;
            json_t *mv;
            json_object_foreach(v, mk, mv) {
                if (!json_is_string(mv)) {
                    st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: __metadata__ '%.*s%s' is not a string",
                                   path, NAME(mk));
                    goto done;
                }
                if ((st = npuc__model_add_meta(ctx, m, mk, json_string_value(mv))) != NPUC_OK) goto done;
            }
            continue;
        }
        ents[nt].name = k;
        ents[nt].order = order++;
        if ((st = parse_entry(ctx, path, k, v, &ents[nt])) != NPUC_OK) goto done;
        nt++;
    }
    qsort(ents, nt, sizeof *ents, cmp_entry);
    uint64_t pos = 0;
    for (size_t i = 0; i < nt; i++) {
        if (ents[i].begin != pos) {
            st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: " TNAME ": data_offsets begin at %llu, expected %llu (%s)",
                           path, NAME(ents[i].name), (unsigned long long)ents[i].begin, (unsigned long long)pos,
                           ents[i].begin > pos ? "gap in the buffer" : "overlaps the previous tensor");
            goto done;
        }
        pos = ents[i].end;
    }
    uint64_t expect;
    if (npuc_add_overflow(*data_start, pos, &expect) || expect != fsize) {
        st = npuc_fail(ctx, NPUC_ERR_FORMAT,
                       "%s: file is %llu bytes but the header describes %llu (8 + %llu header + %llu data)",
                       path, (unsigned long long)fsize, (unsigned long long)(*data_start + pos),
                       (unsigned long long)hlen, (unsigned long long)pos);
        goto done;
    }
    for (size_t i = 0; i < nt; i++) {
        size_t idx;
        if ((st = npuc__model_add(ctx, m, ents[i].name, ents[i].dtype, ents[i].rank, ents[i].shape,
                                  NULL, &idx)) != NPUC_OK)
            goto done;
        m->offset[idx] = ents[i].begin;
    }
done:
    free(ents);
    json_decref(root);
    return st;
}

npuc_status npuc__st_open(npuc_ctx *ctx, const char *path, const npuc_open_opts *o, npuc_model **out) {
    npuc_status st = NPUC_OK;
    npuc_model *m = NULL;
    st_state *s = NULL;
    *out = NULL;

    unsigned char *head = NULL;
    s = calloc(1, sizeof *s);
    if (s) pthread_mutex_init(&s->lock, NULL);
    m = npuc__model_new(path, NPUC_FORMAT_SAFETENSORS);
    if (!s || !m) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path); goto fail; }
    s->fd = -1;
    m->be = &ST_BACKEND;
    m->be_state = s;

    s->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (s->fd < 0) {
        st = npuc_fail(ctx, errno == ENOENT ? NPUC_ERR_NOT_FOUND : NPUC_ERR_IO, "%s: %s", path,
                       strerror(errno));
        goto fail;
    }
    struct stat sb;
    if (fstat(s->fd, &sb) != 0) { st = npuc_fail(ctx, NPUC_ERR_IO, "%s: %s", path, strerror(errno)); goto fail; }
    uint64_t fsize = (uint64_t)sb.st_size;
    m->file_size = fsize;
    s->sparse = sb.st_blocks >= 0 && (uint64_t)sb.st_blocks < fsize / 512; /* holes: see read_at */
    if (fsize < 8) { /* say what is wrong first */
        st = parse_header(ctx, path, m, NULL, fsize, 0, &s->data_start);
        goto fail;
    }
    /* The header: its length word, then as much of the file as the length
     * claims (parse_header checks it against the limit and the size). */
    unsigned char len8[8];
    if (read_at(NULL, s->fd, 0, len8, 8, 0) != 0) goto short_read;
    uint64_t hlen = 0, limit = o->max_header_bytes ? o->max_header_bytes : 100000000u;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
    uint64_t want = 8 + (hlen <= limit && hlen <= fsize - 8 ? hlen : 0);
    if (!(head = malloc((size_t)want + 1))) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path); goto fail; }
    memcpy(head, len8, 8);
    head[want] = 0;
    if (want > 8 && read_at(NULL, s->fd, 0, head + 8, want - 8, 8) != 0) goto short_read;
    if ((st = parse_header(ctx, path, m, head, fsize, o->max_header_bytes, &s->data_start)) != NPUC_OK ||
        (st = npuc__model_finish(ctx, m, 0)) != NPUC_OK)
        goto fail;
    free(head);
    *out = m;
    return NPUC_OK;
short_read:
    st = errno ? npuc_fail(ctx, NPUC_ERR_IO, "%s: read: %s", path, strerror(errno))
               : npuc_fail(ctx, NPUC_ERR_IO, "%s: the file shrank while npuc was reading its header", path);
fail:
    free(head);
    if (m) npuc_model_close(m);
    else if (s) { pthread_mutex_destroy(&s->lock); free(s); }
    return st;
}

npuc_status npuc__st_open_header(npuc_ctx *ctx, const char *path, const void *header, uint64_t file_size,
                                 const npuc_backend *be, void *be_state, npuc_model **out) {
    *out = NULL;
    uint64_t data_start;
    npuc_model *m = npuc__model_new(path, NPUC_FORMAT_SAFETENSORS);
    if (!m) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
    m->file_size = file_size;
    npuc_status st = parse_header(ctx, path, m, header, file_size, 0, &data_start);
    if (st == NPUC_OK) st = npuc__model_finish(ctx, m, 0);
    if (st != NPUC_OK) {
        npuc_model_close(m); /* no backend yet: be_state stays the caller's */
        return st;
    }
    m->be = be;
    m->be_state = be_state;
    *out = m;
    return NPUC_OK;
}

uint64_t npuc__st_data_start(const npuc_model *m) {
    const st_state *s = m->be_state;
    return s->data_start;
}
