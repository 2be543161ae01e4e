/*
 * decode_entry.c - the logical view of a weight file: which tensors it stands
 * for and how to read each one back as float32 (see decode_entry.h).
 *
 * The walk over the "npuc" entry mirrors the decoders:
 *   - an entry with "parts" owns them; a part named like another entry (not
 *     like the entry itself: "quant" codes are stored under the entry's own
 *     name) is a nested entry, owned with everything it owns;
 *   - an entry without parts of a dense encoding ("fake_quant", codec.h)
 *     describes a stored tensor of the same name that is already dense;
 *   - a stored tensor, and a nested entry, belong to one entry only; nesting
 *     may neither loop nor go deeper than NPUC_NEST_MAX (decoders.h);
 *   - each outermost entry is one logical tensor, in file order at its first
 *     stored tensor; every stored tensor no entry owns is one too.
 * Each entry has at most one parent, so walking up from any entry either
 * reaches an outermost one within NPUC_NEST_MAX steps or the file is bad:
 * checking that costs a few steps per entry, whatever a hostile file holds.
 * An unknown encoding (outer or nested) is not an error here: the tensor is
 * listed (bytes and shape are known) but cannot be read, and the caller says
 * so in its report.
 */
#include <stdlib.h>
#include <string.h>

#include "codecs/artifact_meta.h"
#include "codecs/codec.h"
#include "codecs/decode_entry.h"

static int by_name_cmp(const void *a, const void *b) {
    const npuc__ltensor *x = *(const npuc__ltensor *const *)a, *y = *(const npuc__ltensor *const *)b;
    return strcmp(x->name, y->name);
}

void npuc__lview_free(npuc__lview *v) {
    if (!v) return;
    json_decref(v->art);
    free(v->t);
    free(v->by_name);
    free(v->owner);
    memset(v, 0, sizeof *v);
}

/* One entry of the artifact description while the view is built. */
typedef struct ent {
    const char *key;
    const json_t *e;
    const char *enc;
    const npuc__codec *codec; /* enc's row, or NULL */
    const json_t *parts; /* NULL: a dense tensor stored under key */
    long parent;         /* the entry this one is a part of, or -1 */
    long lt;             /* its logical tensor (outermost entries), else -1 */
    int known;           /* its decoder and those of all entries nested in it are known */
    const char *unknown; /* else the first encoding without a decoder, its own or a nested one's */
} ent;

typedef struct ents {
    ent *e;
    size_t n;
    const ent **by_key;
} ents;

static int ent_key_cmp(const void *a, const void *b) {
    return strcmp((*(const ent *const *)a)->key, (*(const ent *const *)b)->key);
}

static long ent_find(const ents *E, const char *key) {
    size_t lo = 0, hi = E->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(E->by_key[mid]->key, key);
        if (c == 0) return (long)(E->by_key[mid] - E->e);
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

/* The nested entry a part names, or -1 when the part is a stored tensor. */
static long nested_part(const ents *E, size_t k, const char *part) {
    return strcmp(part, E->e[k].key) == 0 ? -1 : ent_find(E, part);
}

/* Reads the entries and links each nested one to its parent. */
static npuc_status parse_entries(npuc_ctx *ctx, const char *path, const json_t *tens, ents *E) {
    npuc_status st;
    const char *key;
    json_t *e;
    json_object_foreach((json_t *)tens, key, e) {
        ent *x = &E->e[E->n];
        x->key = key;
        x->e = e;
        x->parent = x->lt = -1;
        if ((st = npuc__art_str(ctx, path, key, e, "encoding", &x->enc)) != NPUC_OK) return st;
        x->parts = json_object_get(e, "parts");
        if (x->parts && (!json_is_array(x->parts) || json_array_size(x->parts) == 0))
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': artifact entry has no parts", path, key);
        for (size_t p = 0; x->parts && p < json_array_size(x->parts); p++)
            if (!json_is_string(json_array_get(x->parts, p)))
                return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': a part name is not a string", path, key);
        /* Without parts: dense when the row says so (fake_quant); a decodable
         * encoding without parts is malformed, which the outer entry's
         * validation reports. */
        x->codec = npuc__codec_find(x->enc);
        x->known = x->codec && (x->codec->decode || (!x->parts && x->codec->dense));
        x->unknown = x->known ? NULL : x->enc;
        E->by_key[E->n] = x;
        E->n++;
    }
    qsort(E->by_key, E->n, sizeof *E->by_key, ent_key_cmp);
    for (size_t k = 0; k < E->n; k++) {
        const json_t *parts = E->e[k].parts;
        for (size_t p = 0; parts && p < json_array_size(parts); p++) {
            const char *pn = json_string_value(json_array_get(parts, p));
            long c = nested_part(E, k, pn);
            if (c < 0) continue;
            if (E->e[c].parent >= 0)
                return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': part '%s' belongs to two entries", path,
                                 E->e[k].key, pn);
            E->e[c].parent = (long)k;
        }
    }
    /* No loops, bounded depth; then an unknown decoder anywhere inside makes
     * the outermost entry unreadable. */
    for (size_t k = 0; k < E->n; k++) {
        long x = (long)k;
        for (int d = 1; E->e[x].parent >= 0; d++) {
            x = E->e[x].parent;
            if (x == (long)k)
                return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': artifact entries are parts of each other in a cycle",
                                 path, E->e[k].key);
            if (d > NPUC_NEST_MAX)
                return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': artifact entries nest more than %d deep",
                                 path, E->e[k].key, NPUC_NEST_MAX);
        }
    }
    for (size_t k = 0; k < E->n; k++)
        if (E->e[k].unknown)
            for (long x = E->e[k].parent; x >= 0; x = E->e[x].parent) {
                E->e[x].known = 0;
                if (!E->e[x].unknown) E->e[x].unknown = E->e[k].unknown;
            }
    return NPUC_OK;
}

/* Marks stored tensor idx as belonging to logical tensor lt (entry key's). */
static npuc_status claim(npuc_ctx *ctx, const npuc_model *m, long *owner, size_t idx, long lt, const char *key,
                         const char *part) {
    if (owner[idx] >= 0) {
        if (strcmp(key, part) == 0)
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s' belongs to two entries", npuc_model_path(m), key);
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': part '%s' belongs to two entries",
                         npuc_model_path(m), key, part);
    }
    owner[idx] = lt;
    return NPUC_OK;
}

/* Adds one logical tensor per outermost entry to v->t and records in
 * owner[] which one each stored tensor belongs to. */
static npuc_status add_entries(npuc_ctx *ctx, npuc__lview *v, long *owner) {
    npuc_model *m = v->m;
    const char *path = npuc_model_path(m);
    const json_t *tens = json_object_get(v->art, "tensors");
    ents E = {0};
    npuc_status st = NPUC_OK;
    size_t ne = json_object_size(tens);
    E.e = calloc(ne ? ne : 1, sizeof *E.e);
    E.by_key = calloc(ne ? ne : 1, sizeof *E.by_key);
    if (!E.e || !E.by_key) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
    if ((st = parse_entries(ctx, path, tens, &E)) != NPUC_OK) goto done;
    for (size_t k = 0; k < E.n; k++) {
        ent *x = &E.e[k];
        if (x->parent >= 0) continue;
        npuc__ltensor *t = &v->t[v->n];
        memset(t, 0, sizeof *t);
        t->name = x->key;
        t->entry = x->e;
        t->encoding = x->enc;
        t->codec = x->codec;
        t->stored = npuc_model_count(m);
        if (!x->parts) {
            /* A dense tensor described by the entry (fake_quant): it is stored
             * under its own name and read like any other. */
            size_t idx;
            if (npuc_model_find(m, x->key, &idx) != 0) {
                st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': described in 'npuc' but not stored", path,
                               x->key);
                goto done;
            }
            t->info = *npuc_model_tensor(m, idx);
            t->dense = 1;
        } else {
            if ((st = npuc__art_orig(ctx, path, x->key, x->e, &t->info)) != NPUC_OK) goto done;
            t->info.name = x->key;
            t->fn = x->known ? x->codec->decode : NULL;
            t->unknown = x->unknown;
        }
        x->lt = (long)v->n++;
    }
    /* Stored tensors, each claimed once, go to the outermost entry above. */
    for (size_t k = 0; k < E.n; k++) {
        const ent *x = &E.e[k];
        long top = (long)k;
        while (E.e[top].parent >= 0) top = E.e[top].parent;
        const long lt = E.e[top].lt;
        size_t idx;
        if (!x->parts) {
            if (npuc_model_find(m, x->key, &idx) != 0) {
                st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': described in 'npuc' but not stored", path,
                               x->key);
                goto done;
            }
            if ((st = claim(ctx, m, owner, idx, lt, x->key, x->key)) != NPUC_OK) goto done;
            continue;
        }
        for (size_t p = 0; p < json_array_size(x->parts); p++) {
            const char *pn = json_string_value(json_array_get(x->parts, p));
            if (nested_part(&E, k, pn) >= 0) {
                v->t[lt].nested = 1;
                continue;
            }
            if ((st = npuc__part(ctx, m, x->key, pn, &idx)) != NPUC_OK ||
                (st = claim(ctx, m, owner, idx, lt, x->key, pn)) != NPUC_OK)
                goto done;
        }
    }
done:
    free(E.e);
    free(E.by_key);
    return st;
}

/* Puts v->t in file order of each tensor's first stored tensor and fills
 * v->owner from owner[] (indices before the reordering). */
static npuc_status order(npuc_ctx *ctx, npuc__lview *v, const long *owner) {
    const size_t n = npuc_model_count(v->m);
    npuc__ltensor *t = calloc(v->n ? v->n : 1, sizeof *t);
    size_t *newidx = calloc(v->n ? v->n : 1, sizeof *newidx);
    if (!t || !newidx) {
        free(t);
        free(newidx);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    /* Distinct first stored tensors: a bucket sort by them. */
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const npuc__ltensor *x = &v->t[owner[i]];
        if (x->stored != i) continue;
        newidx[owner[i]] = k;
        t[k++] = *x;
    }
    for (size_t i = 0; i < n; i++) v->owner[i] = newidx[owner[i]];
    free(v->t);
    free(newidx);
    v->t = t;
    return NPUC_OK;
}

/* A decompression bomb is refused before anything is allocated: the float32
 * values an entry decodes to must fit NPUC_DECODE_RATIO times its stored
 * bytes or the context's memory budget (status.h). */
static npuc_status check_budget(npuc_ctx *ctx, const char *path, const npuc__ltensor *t) {
    uint64_t decoded, ratio_cap;
    const uint64_t budget = npuc_ctx_max_memory(ctx);
    if (npuc_mul_overflow(t->info.numel, sizeof(float), &decoded) ||
        npuc_mul_overflow(t->bytes, NPUC_DECODE_RATIO, &ratio_cap))
        ratio_cap = UINT64_MAX;
    if (decoded <= ratio_cap || decoded <= budget) return NPUC_OK;
    return npuc_fail(ctx, NPUC_ERR_FORMAT,
                     "%s: tensor '%s': decodes to %llu bytes from %llu stored (over %ux and over the %llu-MiB "
                     "memory budget): refused as a decompression bomb; raise --max-memory if the file is trusted",
                     path, t->name, (unsigned long long)decoded, (unsigned long long)t->bytes, NPUC_DECODE_RATIO,
                     (unsigned long long)(budget >> 20));
}

npuc_status npuc__lview_open(npuc_ctx *ctx, npuc_model *m, npuc__lview *v) {
    memset(v, 0, sizeof *v);
    v->m = m;
    const size_t n = npuc_model_count(m);
    const char *path = npuc_model_path(m);
    npuc_status st;
    long *owner = malloc(sizeof *owner * (n ? n : 1));
    if (!owner) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) owner[i] = -1;
    if ((st = npuc__art_load(ctx, m, &v->art)) != NPUC_OK) goto fail;
    /* At most one logical tensor per stored tensor plus one per entry. */
    size_t ne = v->art ? json_object_size(json_object_get(v->art, "tensors")) : 0;
    v->t = calloc(n + ne ? n + ne : 1, sizeof *v->t);
    v->by_name = calloc(n + ne ? n + ne : 1, sizeof *v->by_name);
    v->owner = calloc(n ? n : 1, sizeof *v->owner);
    if (!v->t || !v->by_name || !v->owner) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto fail; }
    if (v->art && (st = add_entries(ctx, v, owner)) != NPUC_OK) goto fail;
    const size_t nent = v->n;
    for (size_t i = 0; i < n; i++) {
        if (owner[i] >= 0) continue;
        npuc__ltensor *t = &v->t[v->n];
        memset(t, 0, sizeof *t);
        t->info = *npuc_model_tensor(m, i);
        t->name = t->info.name;
        t->dense = 1;
        owner[i] = (long)v->n++;
    }
    for (size_t l = 0; l < v->n; l++) v->t[l].stored = n;
    for (size_t i = 0; i < n; i++) {
        npuc__ltensor *t = &v->t[owner[i]];
        if (i < t->stored) t->stored = i;
        t->bytes += npuc_model_tensor(m, i)->nbytes;
        t->nparts++;
    }
    /* Validate the decodable entries (in the order of the description). */
    const npuc__nest nest = {v->art ? json_object_get(v->art, "tensors") : NULL, 0};
    for (size_t l = 0; l < nent; l++) {
        npuc__ltensor *t = &v->t[l];
        if (t->stored == n) { /* only possible when every part is nested and owns nothing */
            st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': artifact entry has no stored parts", path, t->name);
            goto fail;
        }
        if (t->dense) continue;
        if ((st = check_budget(ctx, path, t)) != NPUC_OK) goto fail;
        t->info.group = npuc_model_tensor(m, t->stored)->group;
        if (t->fn && (st = t->fn(ctx, m, &nest, t->name, t->entry, &t->info, NULL)) != NPUC_OK) goto fail;
    }
    if ((st = order(ctx, v, owner)) != NPUC_OK) goto fail;
    for (size_t i = 0; i < v->n; i++) v->by_name[i] = &v->t[i];
    qsort(v->by_name, v->n, sizeof *v->by_name, by_name_cmp);
    for (size_t i = 1; i < v->n; i++)
        if (strcmp(v->by_name[i - 1]->name, v->by_name[i]->name) == 0) {
            st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s' is both stored and described as encoded", path,
                           v->by_name[i]->name);
            goto fail;
        }
    free(owner);
    return NPUC_OK;
fail:
    free(owner);
    npuc__lview_free(v);
    return st;
}

long npuc__lview_find(const npuc__lview *v, const char *name) {
    size_t lo = 0, hi = v->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(v->by_name[mid]->name, name);
        if (c == 0) return (long)(v->by_name[mid] - v->t);
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

int npuc__lview_readable(const npuc__ltensor *t) {
    if (t->dense) return npuc_dtype_is_float(t->info.dtype);
    return t->fn != NULL && npuc_dtype_is_float(t->info.dtype);
}

npuc_status npuc__lview_read_f32(npuc_ctx *ctx, npuc__lview *v, size_t i, float *out) {
    const npuc__ltensor *t = &v->t[i];
    if (!npuc__lview_readable(t))
        return npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s': cannot be read as float (encoding '%s')",
                         npuc_model_path(v->m), t->name, t->encoding ? t->encoding : "none");
    if (t->dense) return npuc_model_read_f32(ctx, v->m, t->stored, out);
    const npuc__nest nest = {json_object_get(v->art, "tensors"), 0};
    return t->fn(ctx, v->m, &nest, t->name, t->entry, &t->info, out);
}
