/*
 * gguf_reader.c - the GGUF reader.
 *
 * Byte layout (ggml's docs/gguf.md, version 3; all little-endian):
 *
 *   magic "GGUF", u32 version, u64 n_tensors, u64 n_kv
 *   n_kv times:      string key, u32 value type, value
 *   n_tensors times: string name, u32 n_dims, u64 ne[n_dims] (innermost
 *                    first), u32 ggml type, u64 offset (from the data start)
 *   padding to general.alignment (default 32), then the tensor data
 *
 * A string is a u64 length and that many bytes (no NUL).  Value types: 0 u8,
 * 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string, 9 array (u32
 * element type, u64 count, elements), 10 u64, 11 i64, 12 f64.
 *
 * The file is untrusted, so every count and length is checked before it is
 * used: a count must fit the bytes left in the file at its smallest element
 * size, keys are at most 65535 bytes, tensor names at most 63 (ggml's
 * limit), dims at most 4, each below 2^63 with an overflow-checked product,
 * offsets aligned and inside the data area, tensors not overlapping, the
 * alignment a power of two, keys unique, strings valid UTF-8, arrays not
 * nested.  The header is read through a small buffered cursor with pread, so
 * memory follows what is kept (names, metadata), never a count from the
 * file.  Malformed files are NPUC_ERR_FORMAT; well-formed ones npuc cannot
 * read (a big-endian or version 1 file, an i-quant or other unsupported
 * tensor type) are
 * NPUC_ERR_UNSUPPORTED; messages name the file and, where there is one, the
 * tensor.
 *
 * The model: tensors in header order with shapes in npuc's row-major order
 * (ne reversed); the block types (legacy and K) are exposed as F32 and
 * dequantized on load exactly as ggml's dequantize_row_* (gguf_quant.c); a
 * block type's ne[0] must be a multiple of its block size (32, or 256).  Metadata: string keys
 * "npuc.K" become K (what the GGUF writer stored from its source); every
 * other scalar or string key K becomes "gguf.K", its value as text (integers
 * in decimal, floats with %.9g / %.17g, bools true/false); arrays are not
 * carried, except npuc.gguf.long_names, which restores shortened names.
 */
#define _GNU_SOURCE /* readahead(2) */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf_format.h"

#define GG_KEY_MAX 65535u
#define GG_META_SHOWN 64

typedef struct gg_state {
    int fd;
    int *type; /* ggml type of each tensor */
    uint64_t *raw; /* stored bytes of each tensor */
} gg_state;

/* A buffered cursor over the file's header. */
typedef struct gg_rd {
    npuc_ctx *ctx;
    const char *path;
    int fd;
    uint64_t fsize, pos;
    uint64_t bstart, blen;
    unsigned char buf[1 << 16];
} gg_rd;

static npuc_status rd_fill(gg_rd *r, void *dst, uint64_t n, const char *what) {
    uint64_t end;
    if (npuc_add_overflow(r->pos, n, &end) || end > r->fsize)
        return npuc_fail(r->ctx, NPUC_ERR_FORMAT, "%s: %s at byte %" PRIu64 " runs past the end of the file (%" PRIu64 " bytes)",
                         r->path, what, r->pos, r->fsize);
    unsigned char *d = dst;
    if (!d) { /* a skip: nothing to read */
        r->pos = end;
        return NPUC_OK;
    }
    while (n) {
        if (r->pos < r->bstart || r->pos >= r->bstart + r->blen) {
            uint64_t want = r->fsize - r->pos < sizeof r->buf ? r->fsize - r->pos : sizeof r->buf;
            ssize_t k;
            do k = pread(r->fd, r->buf, (size_t)want, (off_t)r->pos);
            while (k < 0 && errno == EINTR);
            if (k <= 0)
                return npuc_fail(r->ctx, NPUC_ERR_IO, "%s: reading the header: %s", r->path,
                                 k < 0 ? strerror(errno) : "the file shrank while npuc was reading it");
            r->bstart = r->pos;
            r->blen = (uint64_t)k;
        }
        uint64_t off = r->pos - r->bstart, take = r->blen - off < n ? r->blen - off : n;
        memcpy(d, r->buf + off, (size_t)take);
        d += take;
        r->pos += take;
        n -= take;
    }
    return NPUC_OK;
}

static npuc_status rd_u32(gg_rd *r, uint32_t *v, const char *what) {
    unsigned char b[4];
    npuc_status st = rd_fill(r, b, 4, what);
    *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return st;
}

static npuc_status rd_u64(gg_rd *r, uint64_t *v, const char *what) {
    unsigned char b[8];
    npuc_status st = rd_fill(r, b, 8, what);
    *v = 0;
    for (int i = 7; i >= 0; i--) *v = *v << 8 | b[i];
    return st;
}

static uint64_t rd_left(const gg_rd *r) { return r->fsize - r->pos; }

/* A string of at most max bytes, NUL-terminated in *out (malloc'd), or
 * skipped when out is NULL. */
static npuc_status rd_str(gg_rd *r, uint64_t max, char **out, const char *what) {
    uint64_t n;
    npuc_status st = rd_u64(r, &n, what);
    if (st != NPUC_OK) return st;
    if (n > max || n > rd_left(r))
        return npuc_fail(r->ctx, NPUC_ERR_FORMAT, "%s: %s: length %" PRIu64 " exceeds %s", r->path, what, n,
                         n > rd_left(r) ? "the rest of the file" : "its limit");
    if (!out) return rd_fill(r, NULL, n, what);
    char *s = malloc((size_t)n + 1);
    if (!s) return npuc_fail(r->ctx, NPUC_ERR_NOMEM, "%s: out of memory", r->path);
    if ((st = rd_fill(r, s, n, what)) != NPUC_OK) { free(s); return st; }
    s[n] = 0;
    if (memchr(s, 0, (size_t)n) || !npuc__utf8_valid(s, (size_t)n)) {
        free(s);
        return npuc_fail(r->ctx, NPUC_ERR_FORMAT, "%s: %s is not valid UTF-8 text", r->path, what);
    }
    *out = s;
    return NPUC_OK;
}

enum { T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STRING, T_ARRAY, T_U64, T_I64, T_F64 };
static const unsigned char SCALAR_SIZE[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

/* A scalar value of type t as text in buf. */
static npuc_status rd_scalar(gg_rd *r, uint32_t t, char *buf, size_t cap, const char *what) {
    unsigned char b[8] = {0};
    npuc_status st = rd_fill(r, b, SCALAR_SIZE[t], what);
    if (st != NPUC_OK) return st;
    uint64_t u = 0;
    for (int i = SCALAR_SIZE[t] - 1; i >= 0; i--) u = u << 8 | b[i];
    switch (t) {
    case T_U8: case T_U16: case T_U32: case T_U64: snprintf(buf, cap, "%" PRIu64, u); break;
    case T_I8: snprintf(buf, cap, "%d", (int)(int8_t)u); break;
    case T_I16: snprintf(buf, cap, "%d", (int)(int16_t)u); break;
    case T_I32: snprintf(buf, cap, "%" PRId32, (int32_t)(uint32_t)u); break;
    case T_I64: snprintf(buf, cap, "%" PRId64, (int64_t)u); break;
    case T_BOOL:
        if (u > 1) return npuc_fail(r->ctx, NPUC_ERR_FORMAT, "%s: %s: bool value %u is not 0 or 1", r->path, what, (unsigned)u);
        snprintf(buf, cap, "%s", u ? "true" : "false");
        break;
    case T_F32: { uint32_t x = (uint32_t)u; float f; memcpy(&f, &x, 4); snprintf(buf, cap, "%.9g", (double)f); break; }
    default: { double f; memcpy(&f, &u, 8); snprintf(buf, cap, "%.17g", f); break; }
    }
    return NPUC_OK;
}

typedef struct gg_hdr {
    char **keys;
    size_t nkeys;
    char **long_names; /* pairs: short, full */
    size_t nlong;
    uint32_t align;
} gg_hdr;

static void hdr_free(gg_hdr *h) {
    for (size_t i = 0; i < h->nkeys; i++) free(h->keys[i]);
    for (size_t i = 0; i < h->nlong; i++) free(h->long_names[i]);
    free(h->keys);
    free(h->long_names);
}

/* The value of key k (type t already read): kept as metadata, as the
 * alignment or as the long-name map, or skipped. */
static npuc_status rd_value(gg_rd *r, npuc_model *m, gg_hdr *h, const char *k, uint32_t t) {
    char what[128];
    snprintf(what, sizeof what, "key '%.*s'", GG_META_SHOWN, k);
    npuc_status st;
    if (t > T_F64)
        return npuc_fail(r->ctx, NPUC_ERR_FORMAT, "%s: %s: unknown value type %u", r->path, what, (unsigned)t);
    if (strcmp(k, "general.alignment") == 0) {
        uint32_t a;
        if (t != T_U32)
            return npuc_fail(r->ctx, NPUC_ERR_FORMAT, "%s: general.alignment is of type %u, not u32", r->path, (unsigned)t);
        if ((st = rd_u32(r, &a, what)) != NPUC_OK) return st;
        if (a == 0 || (a & (a - 1)))
            return npuc_fail(r->ctx, NPUC_ERR_FORMAT, "%s: general.alignment %u is not a power of two", r->path, (unsigned)a);
        h->align = a;
        char v[16];
        snprintf(v, sizeof v, "%u", (unsigned)a);
        return npuc__model_add_meta(r->ctx, m, "gguf.general.alignment", v);
    }
    if (t == T_ARRAY) {
        uint32_t et;
        uint64_t n;
        if ((st = rd_u32(r, &et, what)) != NPUC_OK || (st = rd_u64(r, &n, what)) != NPUC_OK) return st;
        if (et == T_ARRAY)
            return npuc_fail(r->ctx, NPUC_ERR_UNSUPPORTED, "%s: %s: nested arrays are not supported", r->path, what);
        if (et > T_F64)
            return npuc_fail(r->ctx, NPUC_ERR_FORMAT, "%s: %s: unknown array element type %u", r->path, what, (unsigned)et);
        uint64_t esize = et == T_STRING ? 8 : SCALAR_SIZE[et];
        if (n > rd_left(r) / esize)
            return npuc_fail(r->ctx, NPUC_ERR_FORMAT, "%s: %s: %" PRIu64 " array elements cannot fit the rest of the file",
                             r->path, what, n);
        int names = strcmp(k, NPUC__GGUF_LONG_NAMES) == 0;
        if (names && (et != T_STRING || n % 2 != 0))
            return npuc_fail(r->ctx, NPUC_ERR_FORMAT, "%s: %s is not an array of string pairs", r->path, what);
        if (et != T_STRING) return rd_fill(r, NULL, n * esize, what);
        if (names) {
            if (!(h->long_names = calloc(n ? (size_t)n : 1, sizeof *h->long_names)))
                return npuc_fail(r->ctx, NPUC_ERR_NOMEM, "%s: out of memory", r->path);
        }
        for (uint64_t i = 0; i < n; i++) {
            if ((st = rd_str(r, UINT64_MAX, names ? &h->long_names[i] : NULL, what)) != NPUC_OK) return st;
            if (names) h->nlong++;
        }
        return NPUC_OK;
    }
    if (t == T_STRING) {
        char *v = NULL;
        if ((st = rd_str(r, UINT64_MAX, &v, what)) != NPUC_OK) return st;
        if (strncmp(k, "npuc.", 5) == 0 && k[5]) {
            st = npuc__model_add_meta(r->ctx, m, k + 5, v);
        } else {
            size_t kl = strlen(k);
            char *mk = malloc(kl + 6);
            if (!mk) st = npuc_fail(r->ctx, NPUC_ERR_NOMEM, "%s: out of memory", r->path);
            else {
                memcpy(mk, "gguf.", 5);
                memcpy(mk + 5, k, kl + 1);
                st = npuc__model_add_meta(r->ctx, m, mk, v);
                free(mk);
            }
        }
        free(v);
        return st;
    }
    char v[64];
    if ((st = rd_scalar(r, t, v, sizeof v, what)) != NPUC_OK) return st;
    size_t kl = strlen(k);
    char *mk = malloc(kl + 6);
    if (!mk) return npuc_fail(r->ctx, NPUC_ERR_NOMEM, "%s: out of memory", r->path);
    memcpy(mk, "gguf.", 5);
    memcpy(mk + 5, k, kl + 1);
    st = npuc__model_add_meta(r->ctx, m, mk, v);
    free(mk);
    return st;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

typedef struct gg_tinfo {
    char *name;
    int rank;
    int64_t shape[NPUC__GGUF_MAX_DIMS];
    const npuc__ggml_type *type;
    uint64_t offset, nbytes;
} gg_tinfo;

static int cmp_off(const void *a, const void *b) {
    const gg_tinfo *x = *(gg_tinfo *const *)a, *y = *(gg_tinfo *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static npuc_status rd_tensor(gg_rd *r, uint64_t idx, gg_tinfo *ti) {
    char what[96];
    snprintf(what, sizeof what, "tensor #%" PRIu64 " name", idx);
    uint64_t n;
    npuc_status st = rd_u64(r, &n, what);
    if (st != NPUC_OK) return st;
    if (n > NPUC__GGUF_NAME_MAX)
        return npuc_fail(r->ctx, NPUC_ERR_FORMAT, "%s: tensor #%" PRIu64 ": name of %" PRIu64 " bytes exceeds GGUF's %u",
                         r->path, idx, n, NPUC__GGUF_NAME_MAX);
    r->pos -= 8;
    if ((st = rd_str(r, NPUC__GGUF_NAME_MAX, &ti->name, what)) != NPUC_OK) return st;
    snprintf(what, sizeof what, "tensor '%s'", ti->name);
    uint32_t nd, type;
    if ((st = rd_u32(r, &nd, what)) != NPUC_OK) return st;
    if (nd > NPUC__GGUF_MAX_DIMS)
        return npuc_fail(r->ctx, NPUC_ERR_FORMAT, "%s: %s: %u dims, GGUF allows at most %d", r->path, what,
                         (unsigned)nd, NPUC__GGUF_MAX_DIMS);
    ti->rank = (int)nd;
    for (uint32_t d = 0; d < nd; d++) {
        uint64_t v;
        if ((st = rd_u64(r, &v, what)) != NPUC_OK) return st;
        if (v > (uint64_t)INT64_MAX)
            return npuc_fail(r->ctx, NPUC_ERR_FORMAT, "%s: %s: ne[%u] = %" PRIu64 " is out of range", r->path, what,
                             (unsigned)d, v);
        ti->shape[nd - 1 - d] = (int64_t)v;
    }
    if ((st = rd_u32(r, &type, what)) != NPUC_OK || (st = rd_u64(r, &ti->offset, what)) != NPUC_OK) return st;
    ti->type = npuc__ggml_type_by_id(type);
    if (!ti->type)
        return npuc_fail(r->ctx, NPUC_ERR_FORMAT, "%s: %s: unknown ggml type %u", r->path, what, (unsigned)type);
    if (!ti->type->known)
        return npuc_fail(r->ctx, NPUC_ERR_UNSUPPORTED, "%s: %s: ggml type %s is not supported by npuc (docs/gguf.md)",
                         r->path, what, ti->type->name);
    uint64_t numel, ignored, row = nd ? (uint64_t)ti->shape[nd - 1] : 1;
    if (npuc__shape_sizes(NPUC_DTYPE_F32, ti->rank, ti->shape, &numel, &ignored) != 0)
        return npuc_fail(r->ctx, NPUC_ERR_OVERFLOW, "%s: %s: shape overflows 64-bit sizes", r->path, what);
    if (npuc__gguf_nbytes(ti->type, row, numel, &ti->nbytes) != 0)
        return npuc_fail(r->ctx, NPUC_ERR_FORMAT, "%s: %s: ne[0] = %" PRIu64 " is not a multiple of %s's block of %u",
                         r->path, what, row, ti->type->name, ti->type->blck);
    return NPUC_OK;
}

static npuc_status gg_load(npuc_ctx *ctx, npuc_model *m, size_t i, void **data, int *owned) {
    gg_state *s = m->be_state;
    const npuc_tensor_info *t = &m->t[i];
    const npuc__ggml_type *gt = npuc__ggml_type_by_id((uint32_t)s->type[i]);
    void *out = malloc(t->nbytes ? (size_t)t->nbytes : 1);
    void *raw = gt->blck > 1 ? malloc(s->raw[i] ? (size_t)s->raw[i] : 1) : out;
    if (!out || !raw) {
        free(out);
        if (raw != out) free(raw);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: tensor '%s': out of memory", m->path, t->name);
    }
    char *d = raw;
    uint64_t n = s->raw[i], off = m->offset[i];
    while (n) {
        size_t chunk = n > (1u << 30) ? (1u << 30) : (size_t)n;
        ssize_t k = pread(s->fd, d, chunk, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int e = errno;
            free(out);
            if (raw != out) free(raw);
            return k < 0 ? npuc_fail(ctx, NPUC_ERR_IO, "%s: tensor '%s': read: %s", m->path, t->name, strerror(e))
                         : npuc_fail(ctx, NPUC_ERR_IO, "%s: tensor '%s': the file shrank while npuc was reading it",
                                     m->path, t->name);
        }
        d += k;
        off += (uint64_t)k;
        n -= (uint64_t)k;
    }
    if (raw != out) {
        npuc__gguf_dequantize(s->type[i], raw, out, t->numel);
        free(raw);
    }
    *data = out;
    *owned = 1;
    return NPUC_OK;
}

static void gg_close(npuc_model *m) {
    gg_state *s = m->be_state;
    if (!s) return;
    if (s->fd >= 0) close(s->fd);
    free(s->type);
    free(s->raw);
    free(s);
    m->be_state = NULL;
}

static void gg_prefetch(npuc_model *m, size_t i) {
#if defined(__linux__)
    const gg_state *s = m->be_state;
    (void)readahead(s->fd, (off64_t)m->offset[i], (size_t)s->raw[i]);
#else
    (void)m;
    (void)i;
#endif
}

static const npuc_backend GG_BACKEND = {gg_load, gg_close, NULL, gg_prefetch, NULL};

int npuc__gguf_model_type(const npuc_model *m, size_t i) {
    const gg_state *s = m->be_state;
    return s && i < m->n ? s->type[i] : -1;
}

/* Reads the header and tensor table of r into m. */
static npuc_status parse(gg_rd *r, npuc_model *m, gg_state *s) {
    npuc_status st = NPUC_OK;
    gg_hdr h = {.align = NPUC__GGUF_ALIGN};
    gg_tinfo *ti = NULL, **by_off = NULL;
    uint64_t nt = 0, nkv = 0;
    unsigned char magic[4];
    uint32_t version;
    if (r->fsize < 24)
        return npuc_fail(r->ctx, NPUC_ERR_FORMAT, "%s: file is %" PRIu64 " bytes, too short for a GGUF header", r->path, r->fsize);
    if ((st = rd_fill(r, magic, 4, "magic")) != NPUC_OK) return st;
    if (memcmp(magic, NPUC__GGUF_MAGIC, 4) != 0)
        return npuc_fail(r->ctx, NPUC_ERR_FORMAT, "%s: not a GGUF file (no GGUF magic)", r->path);
    if ((st = rd_u32(r, &version, "version")) != NPUC_OK) return st;
    if (version != 2 && version != 3)
        return npuc_fail(r->ctx, NPUC_ERR_UNSUPPORTED, "%s: GGUF version %u%s is not supported (npuc reads 2 and 3)",
                         r->path, (unsigned)version, (version & 0xffff) == 0 ? " (a big-endian file?)" : "");
    if ((st = rd_u64(r, &nt, "n_tensors")) != NPUC_OK || (st = rd_u64(r, &nkv, "n_kv")) != NPUC_OK) return st;
    /* Smallest encodings: a tensor info is 8 + 4 + 4 + 8 bytes, a key/value
     * 8 + 4 + 1. */
    if (nt > rd_left(r) / 24)
        return npuc_fail(r->ctx, NPUC_ERR_FORMAT, "%s: n_tensors %" PRIu64 " cannot fit the %" PRIu64 "-byte file",
                         r->path, nt, r->fsize);
    if (nkv > rd_left(r) / 13)
        return npuc_fail(r->ctx, NPUC_ERR_FORMAT, "%s: n_kv %" PRIu64 " cannot fit the %" PRIu64 "-byte file",
                         r->path, nkv, r->fsize);
    if (!(h.keys = calloc(nkv ? (size_t)nkv : 1, sizeof *h.keys)))
        return npuc_fail(r->ctx, NPUC_ERR_NOMEM, "%s: out of memory", r->path);
    for (uint64_t i = 0; i < nkv; i++) {
        char what[48];
        snprintf(what, sizeof what, "key #%" PRIu64, i);
        char *k = NULL;
        uint32_t t;
        if ((st = rd_str(r, GG_KEY_MAX, &k, what)) != NPUC_OK) goto done;
        h.keys[h.nkeys++] = k;
        if (!*k) { st = npuc_fail(r->ctx, NPUC_ERR_FORMAT, "%s: %s is empty", r->path, what); goto done; }
        if ((st = rd_u32(r, &t, what)) != NPUC_OK || (st = rd_value(r, m, &h, k, t)) != NPUC_OK) goto done;
    }
    qsort(h.keys, h.nkeys, sizeof *h.keys, cmp_str);
    for (size_t i = 1; i < h.nkeys; i++)
        if (strcmp(h.keys[i - 1], h.keys[i]) == 0) {
            st = npuc_fail(r->ctx, NPUC_ERR_FORMAT, "%s: key '%.*s' appears twice", r->path, GG_META_SHOWN, h.keys[i]);
            goto done;
        }
    ti = calloc(nt ? (size_t)nt : 1, sizeof *ti);
    by_off = calloc(nt ? (size_t)nt : 1, sizeof *by_off);
    s->type = calloc(nt ? (size_t)nt : 1, sizeof *s->type);
    s->raw = calloc(nt ? (size_t)nt : 1, sizeof *s->raw);
    if (!ti || !by_off || !s->type || !s->raw) { st = npuc_fail(r->ctx, NPUC_ERR_NOMEM, "%s: out of memory", r->path); goto done; }
    for (uint64_t i = 0; i < nt; i++) {
        if ((st = rd_tensor(r, i, &ti[i])) != NPUC_OK) goto done;
        by_off[i] = &ti[i];
    }
    uint64_t data_start = (r->pos + h.align - 1) / h.align * h.align;
    if (data_start < r->pos || data_start > r->fsize) {
        st = npuc_fail(r->ctx, NPUC_ERR_FORMAT, "%s: the data area (aligned to %u) starts past the end of the file",
                       r->path, (unsigned)h.align);
        goto done;
    }
    uint64_t data_size = r->fsize - data_start;
    for (uint64_t i = 0; i < nt; i++) {
        uint64_t end;
        if (ti[i].offset % h.align != 0) {
            st = npuc_fail(r->ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': offset %" PRIu64 " is not a multiple of the alignment %u",
                           r->path, ti[i].name, ti[i].offset, (unsigned)h.align);
            goto done;
        }
        if (npuc_add_overflow(ti[i].offset, ti[i].nbytes, &end) || end > data_size) {
            st = npuc_fail(r->ctx, NPUC_ERR_FORMAT,
                           "%s: tensor '%s': data [%" PRIu64 ", +%" PRIu64 ") exceeds the %" PRIu64 "-byte data area",
                           r->path, ti[i].name, ti[i].offset, ti[i].nbytes, data_size);
            goto done;
        }
    }
    qsort(by_off, (size_t)nt, sizeof *by_off, cmp_off);
    for (uint64_t i = 1; i < nt; i++)
        if (by_off[i - 1]->offset + by_off[i - 1]->nbytes > by_off[i]->offset) {
            st = npuc_fail(r->ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': data overlaps tensor '%s'", r->path,
                           by_off[i]->name, by_off[i - 1]->name);
            goto done;
        }
    /* Shortened names back to the full ones the writer recorded. */
    for (size_t p = 0; p + 1 < h.nlong; p += 2) {
        uint64_t i = 0;
        while (i < nt && strcmp(ti[i].name, h.long_names[p]) != 0) i++;
        if (i == nt) {
            st = npuc_fail(r->ctx, NPUC_ERR_FORMAT, "%s: %s names '%.*s', which is no tensor", r->path,
                           NPUC__GGUF_LONG_NAMES, GG_META_SHOWN, h.long_names[p]);
            goto done;
        }
        free(ti[i].name);
        ti[i].name = h.long_names[p + 1];
        h.long_names[p + 1] = NULL;
    }
    for (uint64_t i = 0; i < nt; i++) {
        size_t idx;
        if ((st = npuc__model_add(r->ctx, m, ti[i].name, ti[i].type->dtype, ti[i].rank, ti[i].shape, NULL, &idx)) !=
            NPUC_OK)
            goto done;
        m->offset[idx] = data_start + ti[i].offset;
        s->type[idx] = ti[i].type->id;
        s->raw[idx] = ti[i].nbytes;
    }
done:
    for (uint64_t i = 0; ti && i < nt; i++) free(ti[i].name);
    free(ti);
    free(by_off);
    hdr_free(&h);
    return st;
}

npuc_status npuc__gguf_open(npuc_ctx *ctx, const char *path, const npuc_open_opts *o, npuc_model **out) {
    (void)o;
    *out = NULL;
    npuc_status st;
    gg_rd *r = calloc(1, sizeof *r);
    gg_state *s = calloc(1, sizeof *s);
    npuc_model *m = npuc__model_new(path, npuc_format_find("gguf"));
    if (!r || !s || !m) {
        free(r);
        free(s);
        if (m) npuc_model_close(m);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
    }
    s->fd = -1;
    m->be = &GG_BACKEND;
    m->be_state = s;
    s->fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (s->fd < 0 || fstat(s->fd, &sb) != 0) {
        st = npuc_fail(ctx, errno == ENOENT ? NPUC_ERR_NOT_FOUND : NPUC_ERR_IO, "%s: %s", path, strerror(errno));
        goto fail;
    }
    m->file_size = (uint64_t)sb.st_size;
    r->ctx = ctx;
    r->path = path;
    r->fd = s->fd;
    r->fsize = m->file_size;
    if ((st = parse(r, m, s)) != NPUC_OK || (st = npuc__model_finish(ctx, m, 0)) != NPUC_OK) goto fail;
    free(r);
    *out = m;
    return NPUC_OK;
fail:
    free(r);
    npuc_model_close(m);
    return st;
}
