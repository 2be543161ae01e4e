/*
 * decode_entry.c - the logical view of a weight file: which tensors it stands
 * for and how to read each one back as float32 (see decode_entry.h).
 *
 * The walk over the "npuc" entry mirrors npuc_decompress_model: every entry
 * with "parts" owns those stored tensors, a part may belong to one entry
 * only, and the entry sits in file order at its first part.  Entries without
 * parts ("fake_quant") describe a stored tensor of the same name that is
 * already dense.  An unknown encoding is not an error here: the tensor is
 * listed (bytes and shape are known) but cannot be read, and the caller says
 * so in its report.
 */
#include <stdlib.h>
#include <string.h>

#include "artifact/artifact_meta.h"
#include "passes/decode_entry.h"

static int by_name_cmp(const void *a, const void *b) {
    const npuc__ltensor *x = *(const npuc__ltensor *const *)a, *y = *(const npuc__ltensor *const *)b;
    return strcmp(x->name, y->name);
}

static int by_stored_cmp(const void *a, const void *b) {
    const npuc__ltensor *x = a, *y = b;
    return x->stored < y->stored ? -1 : x->stored > y->stored;
}

void npuc__lview_free(npuc__lview *v) {
    if (!v) return;
    json_decref(v->art);
    free(v->t);
    free(v->by_name);
    memset(v, 0, sizeof *v);
}

/* Adds the entries of the artifact description to v->t, marking the stored
 * tensors they own in owner[] (1 = part of an entry). */
static npuc_status add_entries(npuc_ctx *ctx, npuc__lview *v, unsigned char *owner) {
    npuc_model *m = v->m;
    const char *path = npuc_model_path(m);
    const size_t n = npuc_model_count(m);
    npuc_status st;
    const char *key;
    json_t *e;
    json_object_foreach(json_object_get(v->art, "tensors"), key, e) {
        const char *enc;
        if ((st = npuc__art_str(ctx, path, key, e, "encoding", &enc)) != NPUC_OK) return st;
        npuc__ltensor *t = &v->t[v->n];
        memset(t, 0, sizeof *t);
        t->name = key;
        t->entry = e;
        t->encoding = enc;
        json_t *parts = json_object_get(e, "parts");
        if (!parts) {
            /* A dense tensor described by the entry (fake_quant): it is stored
             * under its own name and read like any other. */
            size_t idx;
            if (npuc_model_find(m, key, &idx) != 0)
                return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': described in 'npuc' but not stored",
                                 path, key);
            if (owner[idx])
                return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s' belongs to two entries", path, key);
            owner[idx] = 1;
            t->info = *npuc_model_tensor(m, idx);
            t->dense = 1;
            t->stored = idx;
            t->nparts = 1;
            t->bytes = t->info.nbytes;
            v->n++;
            continue;
        }
        if (!json_is_array(parts) || json_array_size(parts) == 0)
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': artifact entry has no parts", path, key);
        if ((st = npuc__art_orig(ctx, path, key, e, &t->info)) != NPUC_OK) return st;
        t->info.name = key;
        t->stored = n;
        for (size_t p = 0; p < json_array_size(parts); p++) {
            json_t *pn = json_array_get(parts, p);
            size_t idx;
            if (!json_is_string(pn))
                return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': a part name is not a string", path, key);
            if ((st = npuc__part(ctx, m, key, json_string_value(pn), &idx)) != NPUC_OK) return st;
            if (owner[idx])
                return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': part '%s' belongs to two entries", path,
                                 key, json_string_value(pn));
            owner[idx] = 1;
            if (idx < t->stored) t->stored = idx;
            t->bytes += npuc_model_tensor(m, idx)->nbytes;
            t->nparts++;
        }
        t->info.group = npuc_model_tensor(m, t->stored)->group;
        t->fn = npuc__decoder_find(enc);
        if (t->fn && (st = t->fn(ctx, m, key, e, &t->info, NULL)) != NPUC_OK) return st;
        v->n++;
    }
    return NPUC_OK;
}

npuc_status npuc__lview_open(npuc_ctx *ctx, npuc_model *m, npuc__lview *v) {
    memset(v, 0, sizeof *v);
    v->m = m;
    const size_t n = npuc_model_count(m);
    npuc_status st;
    unsigned char *owner = calloc(n ? n : 1, 1);
    if (!owner) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    if ((st = npuc__art_load(ctx, m, &v->art)) != NPUC_OK) goto fail;
    /* At most one logical tensor per stored tensor plus one per entry. */
    size_t ne = v->art ? json_object_size(json_object_get(v->art, "tensors")) : 0;
    v->t = calloc(n + ne ? n + ne : 1, sizeof *v->t);
    v->by_name = calloc(n + ne ? n + ne : 1, sizeof *v->by_name);
    if (!v->t || !v->by_name) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto fail; }
    if (v->art && (st = add_entries(ctx, v, owner)) != NPUC_OK) goto fail;
    for (size_t i = 0; i < n; i++) {
        if (owner[i]) continue;
        npuc__ltensor *t = &v->t[v->n++];
        memset(t, 0, sizeof *t);
        t->info = *npuc_model_tensor(m, i);
        t->name = t->info.name;
        t->dense = 1;
        t->stored = i;
        t->nparts = 1;
        t->bytes = t->info.nbytes;
    }
    /* File order of the first stored tensor; no two logical tensors share one. */
    qsort(v->t, v->n, sizeof *v->t, by_stored_cmp);
    for (size_t i = 0; i < v->n; i++) v->by_name[i] = &v->t[i];
    qsort(v->by_name, v->n, sizeof *v->by_name, by_name_cmp);
    for (size_t i = 1; i < v->n; i++)
        if (strcmp(v->by_name[i - 1]->name, v->by_name[i]->name) == 0) {
            st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s' is both stored and described as encoded",
                           npuc_model_path(m), v->by_name[i]->name);
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
    return t->fn(ctx, v->m, t->name, t->entry, &t->info, out);
}
