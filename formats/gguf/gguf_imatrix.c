/*
 * gguf_imatrix.c - llama.cpp importance matrices: the legacy binary reader
 * and writer, the GGUF-format reader (through npuc's GGUF reader), and the
 * lookup by weight name.
 *
 * Legacy format (llama-imatrix before the GGUF format; all little-endian,
 * int32 two's complement, float32 IEEE-754):
 *
 *   int32 n_entries
 *   n_entries times: int32 len, len name bytes (no NUL), int32 ncall,
 *                    int32 nval, nval float32 values
 *   optional:        int32 last_call, int32 dlen, dlen bytes of the dataset
 *
 * llama-quantize's load_legacy_imatrix divides each value by ncall when
 * ncall > 0 and keeps it as it is otherwise; a later entry of the same name
 * replaces an earlier one; it refuses n_entries < 1 and nval < 1.
 * llama-imatrix writes ncall = the chunks seen and values = mean * ncall.
 *
 * GGUF format (llama-imatrix now): a GGUF file with metadata general.type =
 * "imatrix", imatrix.datasets (array of strings), imatrix.chunk_count and
 * imatrix.chunk_size (u32), and per weight W two F32 tensors, W.in_sum2 with
 * ne = [n_per_row, n_mat] (the sums of x^2 per input column, one row per
 * expert) and W.counts with ne = [1, n_mat] (the activations each expert's
 * sums hold).  llama-quantize's load_imatrix: importance = in_sum2 / count
 * per matrix, and 1 for every column of a matrix whose count is not > 0
 * (an expert the calibration never reached); other tensors are ignored; a
 * W.in_sum2 without W.counts or the reverse is an error, and so is missing
 * chunk metadata.  Afterwards llama_model_quantize refuses any non-finite
 * importance.
 *
 * npuc refuses, with NPUC_ERR_FORMAT naming the file and entry, what cannot
 * come from llama-imatrix: truncation, counts that do not fit the file,
 * names empty, too long, with NUL or invalid UTF-8, nval < 1, ncall < 0,
 * NaN, infinite or negative values, negative or NaN GGUF counts, non-F32 or
 * wrongly shaped GGUF tensors.  It accepts what llama-quantize accepts and
 * leaves a warning: legacy ncall = 0 (values used undivided), duplicate
 * legacy names (the last wins), bytes after the legacy trailer, GGUF counts
 * of 0 (importance 1).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf_format.h"
#include "gguf_imatrix.h"

typedef struct im_entry {
    char *name;
    uint64_t nval;
    float *imp;
    int matched;
} im_entry;

struct npuc__imatrix {
    char *path;
    int gguf;
    im_entry *e; /* sorted by name, unique */
    size_t n;
    char *dataset;
    int64_t chunks;
};

#define IM_SHOWN 8 /* names a warning lists */

void npuc__imatrix_free(npuc__imatrix *im) {
    if (!im) return;
    for (size_t i = 0; i < im->n; i++) {
        free(im->e[i].name);
        free(im->e[i].imp);
    }
    free(im->e);
    free(im->dataset);
    free(im->path);
    free(im);
}

const char *npuc__imatrix_path(const npuc__imatrix *im) { return im->path; }
int npuc__imatrix_is_gguf(const npuc__imatrix *im) { return im->gguf; }
size_t npuc__imatrix_count(const npuc__imatrix *im) { return im->n; }
const char *npuc__imatrix_name(const npuc__imatrix *im, size_t i) { return i < im->n ? im->e[i].name : NULL; }
uint64_t npuc__imatrix_len(const npuc__imatrix *im, size_t i) { return i < im->n ? im->e[i].nval : 0; }
const float *npuc__imatrix_values(const npuc__imatrix *im, size_t i) { return i < im->n ? im->e[i].imp : NULL; }
const char *npuc__imatrix_dataset(const npuc__imatrix *im) { return im->dataset ? im->dataset : ""; }
int64_t npuc__imatrix_chunks(const npuc__imatrix *im) { return im->chunks; }

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const im_entry *)a)->name, ((const im_entry *)b)->name);
}

static im_entry *find(const npuc__imatrix *im, const char *name) {
    im_entry key = {.name = (char *)name};
    return im->n ? bsearch(&key, im->e, im->n, sizeof *im->e, cmp_entry) : NULL;
}

/* A warning that counts entries of one kind and names the first few. */
typedef struct im_list {
    size_t n;
    char names[256];
} im_list;

static void list_add(im_list *l, const char *name) {
    size_t len = strlen(l->names);
    if (l->n < IM_SHOWN && len + 4 < sizeof l->names)
        snprintf(l->names + len, sizeof l->names - len, "%s'%.64s'", l->n ? ", " : "", name);
    l->n++;
}

static const char *list_more(const im_list *l, char *buf, size_t cap) {
    if (l->n > IM_SHOWN) snprintf(buf, cap, " and %zu more", l->n - IM_SHOWN);
    else buf[0] = 0;
    return buf;
}

/* ------------------------------------------------------------- legacy */

typedef struct lg_cur {
    const unsigned char *p;
    uint64_t size, pos;
} lg_cur;

static uint64_t left(const lg_cur *c) { return c->size - c->pos; }

static int32_t get_i32(lg_cur *c) {
    const unsigned char *b = c->p + c->pos;
    c->pos += 4;
    return (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
}

static float get_f32(const unsigned char *b) {
    uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The whole file in memory (its size bounds everything the parse keeps). */
static npuc_status slurp(npuc_ctx *ctx, const char *path, unsigned char **buf, uint64_t *size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        int e = errno;
        if (fd >= 0) close(fd);
        return npuc_fail(ctx, e == ENOENT ? NPUC_ERR_NOT_FOUND : NPUC_ERR_IO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode) || (uint64_t)sb.st_size > SIZE_MAX / 2) {
        close(fd);
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: not a regular file of a readable size", path);
    }
    uint64_t n = (uint64_t)sb.st_size, got = 0;
    unsigned char *b = malloc(n ? (size_t)n : 1);
    if (!b) {
        close(fd);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
    }
    while (got < n) {
        ssize_t k = read(fd, b + got, (size_t)(n - got));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int e = errno;
            free(b);
            close(fd);
            return npuc_fail(ctx, NPUC_ERR_IO, "%s: read: %s", path,
                             k < 0 ? strerror(e) : "the file shrank while npuc was reading it");
        }
        got += (uint64_t)k;
    }
    close(fd);
    *buf = b;
    *size = n;
    return NPUC_OK;
}

static npuc_status load_legacy(npuc_ctx *ctx, npuc__imatrix *im, const unsigned char *buf, uint64_t size) {
    const char *path = im->path;
    lg_cur c = {buf, size, 0};
    if (size < 4)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: %" PRIu64 " bytes, too short for an importance matrix", path, size);
    int32_t n = get_i32(&c);
    /* The smallest entry: len, 1 name byte, ncall, nval, one value. */
    if (n < 1)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: entry count %" PRId32 ": no importance data", path, n);
    if ((uint64_t)n > left(&c) / 17)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: entry count %" PRId32 " cannot fit the %" PRIu64 "-byte file",
                         path, n, size);
    if (!(im->e = calloc((size_t)n, sizeof *im->e))) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
    im_list zero = {0};
    for (int32_t i = 0; i < n; i++) {
        if (left(&c) < 4)
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: entry #%" PRId32 " of %" PRId32 ": the file ends before it",
                             path, i + 1, n);
        int32_t len = get_i32(&c);
        if (len < 1 || (uint32_t)len > NPUC__IMATRIX_NAME_MAX)
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: entry #%" PRId32 ": name length %" PRId32 " is not 1..%u",
                             path, i + 1, len, NPUC__IMATRIX_NAME_MAX);
        if ((uint64_t)len > left(&c))
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: entry #%" PRId32 ": its %" PRId32
                                                   "-byte name runs past the end of the file", path, i + 1, len);
        const char *nm = (const char *)c.p + c.pos;
        if (memchr(nm, 0, (size_t)len) || !npuc__utf8_valid(nm, (size_t)len))
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: entry #%" PRId32 ": the name is not UTF-8 text without NUL",
                             path, i + 1);
        im_entry *e = &im->e[im->n];
        if (!(e->name = malloc((size_t)len + 1))) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
        memcpy(e->name, nm, (size_t)len);
        e->name[len] = 0;
        im->n++;
        c.pos += (uint64_t)len;
        if (left(&c) < 8)
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: entry '%.64s': the file ends before ncall and nval", path,
                             e->name);
        int32_t ncall = get_i32(&c), nval = get_i32(&c);
        if (ncall < 0)
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: entry '%.64s': ncall %" PRId32 " is negative", path, e->name,
                             ncall);
        if (nval < 1)
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: entry '%.64s': %" PRId32 " values (at least 1)", path,
                             e->name, nval);
        if ((uint64_t)nval > left(&c) / 4)
            return npuc_fail(ctx, NPUC_ERR_FORMAT,
                             "%s: entry '%.64s': %" PRId32 " values run past the end of the file (%" PRIu64
                             " bytes left)", path, e->name, nval, left(&c));
        if (!(e->imp = malloc((size_t)nval * sizeof *e->imp)))
            return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
        e->nval = (uint64_t)nval;
        for (int32_t j = 0; j < nval; j++) {
            float v = get_f32(c.p + c.pos + 4 * (uint64_t)j);
            if (!isfinite(v) || v < 0)
                return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: entry '%.64s': value %" PRId32 " is %s", path, e->name,
                                 j, isnan(v) ? "NaN" : isinf(v) ? "infinite" : "negative (a sum of squares)");
            /* load_legacy_imatrix: v /= ncall, a float divided by an int. */
            e->imp[j] = ncall > 0 ? v / (float)ncall : v;
        }
        c.pos += 4 * (uint64_t)nval;
        if (ncall == 0) list_add(&zero, e->name);
    }
    char more[48];
    if (zero.n)
        npuc__ctx_warn(ctx, "%s: %zu entr%s with ncall 0 (%s%s): values used undivided, as llama-quantize does",
                       path, zero.n, zero.n == 1 ? "y" : "ies", zero.names, list_more(&zero, more, sizeof more));
    if (left(&c) > 0) {
        if (left(&c) < 8)
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: %" PRIu64 " bytes after the entries: a truncated trailer "
                                                   "(last call, dataset name)", path, left(&c));
        int32_t last = get_i32(&c), dlen = get_i32(&c);
        if (last < 0)
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: the trailer's last call %" PRId32 " is negative", path, last);
        if (dlen < 0 || (uint64_t)dlen > left(&c))
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: the trailer's dataset name length %" PRId32
                                                   " does not fit the %" PRIu64 " bytes left", path, dlen, left(&c));
        if (!(im->dataset = malloc((size_t)dlen + 1))) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
        memcpy(im->dataset, c.p + c.pos, (size_t)dlen);
        im->dataset[dlen] = 0;
        c.pos += (uint64_t)dlen;
        im->chunks = last;
        if (left(&c) > 0)
            npuc__ctx_warn(ctx, "%s: %" PRIu64 " bytes after the dataset name are ignored, as llama-quantize does",
                           path, left(&c));
    }
    /* Duplicates: the last one wins (load_legacy_imatrix's map). */
    for (size_t i = 0; i < im->n; i++) im->e[i].matched = (int)i; /* the file order, for the sort below */
    im_list dup = {0};
    qsort(im->e, im->n, sizeof *im->e, cmp_entry);
    size_t w = 0;
    for (size_t i = 0; i < im->n; i++) {
        if (w > 0 && strcmp(im->e[w - 1].name, im->e[i].name) == 0) {
            list_add(&dup, im->e[i].name);
            im_entry *keep = im->e[w - 1].matched > im->e[i].matched ? &im->e[w - 1] : &im->e[i];
            im_entry *drop = keep == &im->e[i] ? &im->e[w - 1] : &im->e[i];
            free(drop->name);
            free(drop->imp);
            im->e[w - 1] = *keep;
            continue;
        }
        im->e[w++] = im->e[i];
    }
    im->n = w;
    for (size_t i = 0; i < im->n; i++) im->e[i].matched = 0;
    if (dup.n)
        npuc__ctx_warn(ctx, "%s: %zu entr%s named twice (%s%s): the last one is used, as llama-quantize does", path,
                       dup.n, dup.n == 1 ? "y" : "ies", dup.names, list_more(&dup, more, sizeof more));
    return NPUC_OK;
}

/* --------------------------------------------------------------- GGUF */

static int ends_with(const char *s, const char *suffix, size_t *stem) {
    size_t n = strlen(s), k = strlen(suffix);
    if (n <= k || strcmp(s + n - k, suffix) != 0) return 0;
    *stem = n - k;
    return 1;
}

/* A tensor of a GGUF imatrix: W.in_sum2 (kind 0) or W.counts (kind 1). */
typedef struct gg_part {
    const char *name;
    size_t stem, kind, index;
} gg_part;

static int cmp_stem(const gg_part *x, const gg_part *y) {
    const size_t n = x->stem < y->stem ? x->stem : y->stem;
    int c = memcmp(x->name, y->name, n);
    return c ? c : x->stem < y->stem ? -1 : x->stem > y->stem;
}

static int cmp_part(const void *a, const void *b) {
    const gg_part *x = a, *y = b;
    int c = cmp_stem(x, y);
    return c ? c : x->kind < y->kind ? -1 : x->kind > y->kind;
}

/* The meta value of GGUF key k as an unsigned number, or -1 when absent or
 * not a number. */
static int64_t meta_u32(const npuc_model *m, const char *k) {
    const char *v = npuc_model_meta_get(m, k);
    if (!v || !*v) return -1;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    return errno || *end || v[0] == '-' || x > UINT32_MAX ? -1 : (int64_t)x;
}

static npuc_status load_gguf(npuc_ctx *ctx, npuc__imatrix *im) {
    const char *path = im->path;
    npuc_model *m = NULL;
    npuc_status st = npuc__gguf_open(ctx, path, NULL, &m);
    if (st != NPUC_OK) return st;
    const size_t nt = npuc_model_count(m);
    size_t *sum_of = NULL, *cnt_of = NULL;
    gg_part *by = NULL;
    float *cnt = NULL;
    if (meta_u32(m, "gguf.imatrix.chunk_count") < 0 || meta_u32(m, "gguf.imatrix.chunk_size") < 0) {
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: a GGUF file without imatrix.chunk_count and imatrix.chunk_size "
                                             "(u32): not an importance matrix (llama-quantize refuses it too)", path);
        goto done;
    }
    im->chunks = meta_u32(m, "gguf.imatrix.chunk_count");
    if (!(im->e = calloc(nt ? nt : 1, sizeof *im->e)) || !(sum_of = calloc(nt ? nt : 1, sizeof *sum_of)) ||
        !(cnt_of = calloc(nt ? nt : 1, sizeof *cnt_of)) || !(by = calloc(nt ? nt : 1, sizeof *by))) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    /* Pair W.in_sum2 with W.counts: the tensors of either kind sorted by
     * (W, kind), so a pair is two neighbours. */
    size_t nb = 0;
    for (size_t i = 0; i < nt; i++) {
        const char *name = npuc_model_tensor(m, i)->name;
        size_t stem;
        if (ends_with(name, ".in_sum2", &stem)) by[nb++] = (gg_part){name, stem, 0, i};
        else if (ends_with(name, ".counts", &stem)) by[nb++] = (gg_part){name, stem, 1, i};
    }
    qsort(by, nb, sizeof *by, cmp_part);
    for (size_t k = 0; k < nb;) {
        const gg_part *a = &by[k], *b = k + 1 < nb ? &by[k + 1] : NULL;
        if (!b || a->kind != 0 || b->kind != 1 || cmp_stem(a, b) != 0) {
            st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: entry '%.*s': a %s tensor without %s", path, (int)a->stem,
                           a->name, a->kind ? ".counts" : ".in_sum2", a->kind ? ".in_sum2" : ".counts");
            goto done;
        }
        im_entry *e = &im->e[im->n];
        if (!(e->name = strndup(a->name, a->stem))) {
            st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
            goto done;
        }
        sum_of[im->n] = a->index;
        cnt_of[im->n++] = b->index;
        k += 2;
    }
    if (im->n == 0) {
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: no <tensor>.in_sum2 / <tensor>.counts pairs: no importance data",
                       path);
        goto done;
    }
    im_list zero = {0};
    for (size_t k = 0; k < im->n; k++) {
        im_entry *e = &im->e[k];
        const size_t is = sum_of[k], ic = cnt_of[k];
        const npuc_tensor_info *ts = npuc_model_tensor(m, is), *tc = npuc_model_tensor(m, ic);
        if (npuc__gguf_model_type(m, is) != NPUC__GGML_F32 || npuc__gguf_model_type(m, ic) != NPUC__GGML_F32) {
            st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: entry '%s': .in_sum2 and .counts must be F32 (llama.cpp reads "
                                                 "them as floats)", path, e->name);
            goto done;
        }
        /* in_sum2: ne = [n_per_row, n_mat] (npuc order [n_mat, n_per_row]);
         * counts: n_mat values. */
        if (ts->rank < 1 || ts->rank > 2 || ts->numel == 0) {
            st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: entry '%s': .in_sum2 has rank %d and %" PRIu64
                                                 " values, expected [n_mat, n_per_row]", path, e->name, ts->rank,
                           ts->numel);
            goto done;
        }
        const uint64_t row = (uint64_t)ts->shape[ts->rank - 1], nmat = ts->rank == 2 ? (uint64_t)ts->shape[0] : 1;
        if (tc->numel != nmat) {
            st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: entry '%s': .counts has %" PRIu64 " values, .in_sum2 %" PRIu64
                                                 " matrices", path, e->name, tc->numel, nmat);
            goto done;
        }
        e->nval = ts->numel;
        float *nc = realloc(cnt, (size_t)nmat * sizeof *cnt);
        if (!nc || !(e->imp = malloc((size_t)e->nval * sizeof *e->imp))) {
            if (nc) cnt = nc;
            st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
            goto done;
        }
        cnt = nc;
        if ((st = npuc_model_read_f32(ctx, m, is, e->imp)) != NPUC_OK ||
            (st = npuc_model_read_f32(ctx, m, ic, cnt)) != NPUC_OK)
            goto done;
        int partial = 0;
        for (uint64_t j = 0; j < nmat; j++) {
            const float c = cnt[j];
            if (!(c >= 0) || isinf(c)) {
                st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: entry '%s': count %" PRIu64 " is %g", path, e->name, j,
                               (double)c);
                goto done;
            }
            for (uint64_t i = 0; i < row; i++) {
                float *v = &e->imp[j * row + i];
                if (!isfinite(*v) || *v < 0) {
                    st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: entry '%s': in_sum2 value %" PRIu64 " is %s", path,
                                   e->name, j * row + i,
                                   isnan(*v) ? "NaN" : isinf(*v) ? "infinite" : "negative (a sum of squares)");
                    goto done;
                }
                /* load_imatrix: sums / count when count > 0, else 1. */
                *v = c > 0.0f ? *v / c : 1.0f;
                if (!isfinite(*v)) {
                    st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: entry '%s': in_sum2 value %" PRIu64
                                                         " divided by the count %g overflows", path, e->name,
                                   j * row + i, (double)c);
                    goto done;
                }
            }
            partial |= c == 0.0f;
        }
        if (partial) list_add(&zero, e->name);
    }
    qsort(im->e, im->n, sizeof *im->e, cmp_entry);
    char more[48];
    if (zero.n)
        npuc__ctx_warn(ctx, "%s: %zu entr%s with a count of 0 (partial data: %s%s): importance 1 there, as "
                            "llama-quantize does", path, zero.n, zero.n == 1 ? "y" : "ies", zero.names,
                       list_more(&zero, more, sizeof more));
done:
    free(sum_of);
    free(cnt_of);
    free(by);
    free(cnt);
    npuc_model_close(m);
    return st;
}

npuc_status npuc__imatrix_load(npuc_ctx *ctx, const char *path, npuc__imatrix **out) {
    *out = NULL;
    npuc__imatrix *im = calloc(1, sizeof *im);
    if (!im || !(im->path = strdup(path))) {
        free(im);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
    }
    im->chunks = -1;
    unsigned char *buf = NULL;
    uint64_t size = 0;
    npuc_status st = slurp(ctx, path, &buf, &size);
    if (st == NPUC_OK) {
        if (size >= 4 && memcmp(buf, NPUC__GGUF_MAGIC, 4) == 0) {
            free(buf);
            buf = NULL;
            im->gguf = 1;
            st = load_gguf(ctx, im);
        } else {
            st = load_legacy(ctx, im, buf, size);
        }
    }
    free(buf);
    if (st != NPUC_OK) {
        npuc__imatrix_free(im);
        return st;
    }
    *out = im;
    return NPUC_OK;
}

/* ------------------------------------------------------------- lookup */

/* The entry for tensor name (the candidates npuc__imatrix_lookup lists), or
 * NULL; -1 in *oom when out of memory. */
static im_entry *entry_for(const npuc__imatrix *im, const char *name, const char *alt, int *oom) {
    im_entry *e = find(im, name);
    if (!e && alt) e = find(im, alt);
    size_t stem, n = strlen(name);
    char *s = NULL;
    if (!e && ends_with(name, ".weight", &stem)) {
        if (!(s = strndup(name, stem))) goto nomem;
        e = find(im, s);
        free(s);
    }
    if (!e) {
        if (!(s = malloc(n + 8))) goto nomem;
        memcpy(s, name, n);
        memcpy(s + n, ".weight", 8);
        e = find(im, s);
        free(s);
    }
    return e;
nomem:
    *oom = -1;
    return NULL;
}

int npuc__imatrix_mark(npuc__imatrix *im, const char *name, const char *alt) {
    int oom = 0;
    im_entry *e = entry_for(im, name, alt, &oom);
    if (e) e->matched = 1;
    return e != NULL;
}

npuc_status npuc__imatrix_lookup(npuc_ctx *ctx, npuc__imatrix *im, const char *name, const char *alt,
                                 uint64_t n_per_row, uint64_t n_mat, const float **imp) {
    *imp = NULL;
    int oom = 0;
    im_entry *e = entry_for(im, name, alt, &oom);
    if (oom) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    if (!e) return NPUC_OK;
    e->matched = 1;
    uint64_t want;
    if (npuc_mul_overflow(n_per_row, n_mat, &want) || want != e->nval) {
        if (strcmp(name, "token_embd.weight") == 0) {
            npuc__ctx_warn(ctx, "%s: entry '%s' has %" PRIu64 " values, tensor '%s' needs %" PRIu64
                                " (%" PRIu64 " x %" PRIu64 "): quantized without importance, as llama-quantize "
                                "does for token_embd.weight", im->path, e->name, e->nval, name, want, n_mat,
                           n_per_row);
            return NPUC_OK;
        }
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: entry '%s' has %" PRIu64 " values, tensor '%s' needs %" PRIu64
                                               " (%" PRIu64 " matri%s of %" PRIu64 " input columns): an importance "
                                               "matrix for another model?", im->path, e->name, e->nval, name,
                         n_per_row * n_mat, n_mat, n_mat == 1 ? "x" : "ces", n_per_row);
    }
    *imp = e->imp;
    return NPUC_OK;
}

size_t npuc__imatrix_unmatched_count(const npuc__imatrix *im) {
    size_t k = 0;
    for (size_t i = 0; i < im->n; i++) k += !im->e[i].matched;
    return k;
}

const char *npuc__imatrix_unmatched(const npuc__imatrix *im, size_t k) {
    for (size_t i = 0; i < im->n; i++)
        if (!im->e[i].matched && k-- == 0) return im->e[i].name;
    return NULL;
}

void npuc__imatrix_warn_unmatched(npuc_ctx *ctx, const npuc__imatrix *im) {
    im_list l = {0};
    for (size_t i = 0; i < im->n; i++)
        if (!im->e[i].matched) list_add(&l, im->e[i].name);
    char more[48];
    if (l.n)
        npuc__ctx_warn(ctx, "%s: %zu imatrix entr%s matching no tensor: %s%s", im->path, l.n,
                       l.n == 1 ? "y" : "ies", l.names, list_more(&l, more, sizeof more));
}

/* ------------------------------------------------------------- writer */

static void le32(unsigned char *b, uint32_t v) {
    for (int i = 0; i < 4; i++) b[i] = (unsigned char)(v >> (8 * i));
}

static npuc_status put(npuc_ctx *ctx, FILE *f, const char *path, const void *p, size_t n) {
    if (n && fwrite(p, 1, n, f) != n) return npuc_fail(ctx, NPUC_ERR_IO, "%s: write: %s", path, strerror(errno));
    return NPUC_OK;
}

static npuc_status put_i32(npuc_ctx *ctx, FILE *f, const char *path, int32_t v) {
    unsigned char b[4];
    le32(b, (uint32_t)v);
    return put(ctx, f, path, b, 4);
}

npuc_status npuc__imatrix_write_dat(npuc_ctx *ctx, const char *path, int overwrite, const npuc__imatrix_out *e,
                                    size_t n, int32_t last_call, const char *dataset) {
    if (n < 1 || n > INT32_MAX) return npuc_fail(ctx, NPUC_ERR_ARG, "%s: %zu entries, expected 1..2^31-1", path, n);
    size_t dl = dataset ? strlen(dataset) : 0;
    if (dl > INT32_MAX || last_call < 0) return npuc_fail(ctx, NPUC_ERR_ARG, "%s: bad trailer", path);
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(e[i].name);
        if (len < 1 || len > NPUC__IMATRIX_NAME_MAX)
            return npuc_fail(ctx, NPUC_ERR_ARG, "%s: entry '%.64s': a name of %zu bytes (1..%u)", path, e[i].name,
                             len, NPUC__IMATRIX_NAME_MAX);
        if (e[i].ncall < 1 || e[i].nval < 1 || e[i].nval > INT32_MAX)
            return npuc_fail(ctx, NPUC_ERR_ARG, "%s: entry '%s': ncall %" PRId32 ", %" PRIu64
                                                " values (ncall >= 1, 1..2^31-1 values)", path, e[i].name,
                             e[i].ncall, e[i].nval);
        for (uint64_t j = 0; j < e[i].nval; j++)
            if (!isfinite(e[i].values[j]))
                return npuc_fail(ctx, NPUC_ERR_ARG, "%s: entry '%s': value %" PRIu64 " is not finite", path,
                                 e[i].name, j);
    }
    npuc_atomic_file *af;
    npuc_status st = npuc_atomic_file_open(ctx, path, overwrite, &af);
    if (st != NPUC_OK) return st;
    int fd = dup(npuc_atomic_file_fd(af));
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        if (fd >= 0) close(fd);
        npuc_atomic_file_abort(af);
        return npuc_fail(ctx, NPUC_ERR_IO, "%s: %s", path, strerror(errno));
    }
    st = put_i32(ctx, f, path, (int32_t)n);
    for (size_t i = 0; i < n && st == NPUC_OK; i++) {
        size_t len = strlen(e[i].name);
        if ((st = put_i32(ctx, f, path, (int32_t)len)) != NPUC_OK || (st = put(ctx, f, path, e[i].name, len)) != NPUC_OK ||
            (st = put_i32(ctx, f, path, e[i].ncall)) != NPUC_OK ||
            (st = put_i32(ctx, f, path, (int32_t)e[i].nval)) != NPUC_OK)
            break;
        unsigned char b[4096];
        for (uint64_t j = 0; j < e[i].nval && st == NPUC_OK;) {
            size_t k = 0;
            for (; k < sizeof b / 4 && j < e[i].nval; k++, j++) {
                uint32_t u;
                memcpy(&u, &e[i].values[j], 4);
                le32(b + 4 * k, u);
            }
            st = put(ctx, f, path, b, 4 * k);
        }
    }
    if (st == NPUC_OK && (st = put_i32(ctx, f, path, last_call)) == NPUC_OK &&
        (st = put_i32(ctx, f, path, (int32_t)dl)) == NPUC_OK)
        st = put(ctx, f, path, dataset, dl);
    if (fclose(f) != 0 && st == NPUC_OK) st = npuc_fail(ctx, NPUC_ERR_IO, "%s: write: %s", path, strerror(errno));
    if (st != NPUC_OK) {
        npuc_atomic_file_abort(af);
        return st;
    }
    return npuc_atomic_file_commit(af);
}
