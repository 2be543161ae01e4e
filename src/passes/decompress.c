/*
 * decompress.c - turning an npuc artifact back into dense float tensors.
 *
 * The "npuc" metadata entry maps each encoded original tensor to its
 * encoding, its original dtype/shape/layout and its "parts" (the stored
 * tensors that encode it).  The stored tensors are walked in file order: the
 * first part of an entry is replaced by the rebuilt original (cast to its
 * original dtype), its other parts are dropped, and every other tensor is
 * copied byte for byte.  Every entry is validated before anything is
 * written.  Decoders live in one file per encoding (decoders.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifact/artifact_meta.h"
#include "npuc_internal.h"
#include "passes/decode_entry.h"
#include "passes/decoders.h"
#include "passes/pass_util.h"

static const struct {
    const char *encoding;
    npuc_decode_fn fn;
} DECODERS[] = {
    {"quant", npuc__decode_quant},
    {"lowrank", npuc__decode_lowrank},
    {"nm_sparse", npuc__decode_nm},
};

npuc_status npuc__part(npuc_ctx *ctx, npuc_model *m, const char *name, const char *part, size_t *idx) {
    if (npuc_model_find(m, part, idx) != 0)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': its part '%s' is missing", npuc_model_path(m),
                         name, part);
    return NPUC_OK;
}

typedef struct entry {
    const char *name;
    const json_t *e;
    npuc_decode_fn fn;
    npuc_tensor_info orig;
} entry;

npuc_status npuc_decompress_model(npuc_ctx *ctx, npuc_model *m, const char *out,
                                  const npuc_write_opts *wo) {
    const char *path = npuc_model_path(m);
    const size_t n = npuc_model_count(m);
    npuc_status st = NPUC_OK;
    json_t *art = NULL;
    npuc_writer *w = NULL;
    entry *ents = NULL;
    npuc_scratch s_f = {0}, s_cast = {0};
    /* For each stored tensor: -1 plain, else the entry it is a part of; and
     * whether it is that entry's first part in file order. */
    long *owner = calloc(n ? n : 1, sizeof *owner);
    unsigned char *first = calloc(n ? n : 1, 1);
    if (!owner || !first) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
    for (size_t i = 0; i < n; i++) owner[i] = -1;
    if ((st = npuc__art_load(ctx, m, &art)) != NPUC_OK) goto done;
    if (!art) {
        st = npuc_fail(ctx, NPUC_ERR_ARG, "%s: not an npuc artifact (no 'npuc' metadata)", path);
        goto done;
    }
    json_t *tens = json_object_get(art, "tensors");
    size_t ne = json_object_size(tens), k = 0;
    ents = calloc(ne ? ne : 1, sizeof *ents);
    if (!ents) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
    const char *key;
    json_t *e;
    json_object_foreach(tens, key, e) {
        const char *enc;
        if ((st = npuc__art_str(ctx, path, key, e, "encoding", &enc)) != NPUC_OK) goto done;
        if (strcmp(enc, "fake_quant") == 0) continue; /* dense already */
        entry *en = &ents[k];
        en->name = key;
        en->e = e;
        for (size_t d = 0; d < sizeof DECODERS / sizeof DECODERS[0]; d++)
            if (strcmp(enc, DECODERS[d].encoding) == 0) en->fn = DECODERS[d].fn;
        if (!en->fn) {
            st = npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s': unknown encoding '%s' (newer npuc?)",
                           path, key, enc);
            goto done;
        }
        if ((st = npuc__art_orig(ctx, path, key, e, &en->orig)) != NPUC_OK) goto done;
        en->orig.name = key;
        json_t *parts = json_object_get(e, "parts");
        if (!json_is_array(parts) || json_array_size(parts) == 0) {
            st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': artifact entry has no parts", path, key);
            goto done;
        }
        size_t lowest = n;
        for (size_t p = 0; p < json_array_size(parts); p++) {
            json_t *pn = json_array_get(parts, p);
            size_t idx;
            if (!json_is_string(pn)) {
                st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': a part name is not a string", path, key);
                goto done;
            }
            if ((st = npuc__part(ctx, m, key, json_string_value(pn), &idx)) != NPUC_OK) goto done;
            if (owner[idx] != -1) {
                st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': part '%s' belongs to two entries", path,
                               key, json_string_value(pn));
                goto done;
            }
            owner[idx] = (long)k;
            if (idx < lowest) lowest = idx;
        }
        first[lowest] = 1;
        /* The first part carries the Keras layer of the rebuilt tensor. */
        en->orig.group = npuc_model_tensor(m, lowest)->group;
        if ((st = en->fn(ctx, m, key, e, &en->orig, NULL)) != NPUC_OK) goto done;
        k++;
    }
    ne = k;

    if ((st = npuc_writer_open(ctx, out, wo, &w)) != NPUC_OK) goto done;
    for (size_t i = 0; i < npuc_model_meta_count(m); i++) {
        const char *mk, *mv;
        npuc_model_meta_at(m, i, &mk, &mv);
        if (strcmp(mk, NPUC_ART_KEY) == 0 || strcmp(mk, "npuc.layout") == 0) continue;
        if ((st = npuc_writer_meta(w, mk, mv)) != NPUC_OK) goto done;
    }
    for (size_t i = 0; i < n; i++) {
        if (owner[i] >= 0 && !first[i]) continue;
        const npuc_tensor_info *t = owner[i] >= 0 ? &ents[owner[i]].orig : npuc_model_tensor(m, i);
        if ((st = npuc_writer_declare(w, t)) != NPUC_OK) goto done;
    }
    for (size_t i = 0; i < n; i++) {
        if (owner[i] >= 0 && !first[i]) continue;
        if (owner[i] < 0) {
            const void *p;
            if ((st = npuc_model_data(ctx, m, i, &p)) != NPUC_OK) goto done;
            st = npuc_writer_write(w, p, npuc_model_tensor(m, i)->nbytes);
            npuc_model_release(m, i);
            if (st != NPUC_OK) goto done;
            continue;
        }
        const entry *en = &ents[owner[i]];
        float *f = npuc__scratch(&s_f, en->orig.numel * sizeof(float));
        if (!f) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: tensor '%s': out of memory", path, en->name); goto done; }
        if ((st = en->fn(ctx, m, en->name, en->e, &en->orig, f)) != NPUC_OK) goto done;
        const void *outp = f;
        if (en->orig.dtype != NPUC_DTYPE_F32) {
            void *cast = npuc__scratch(&s_cast, en->orig.nbytes);
            if (!cast) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
            npuc_convert(cast, en->orig.dtype, f, NPUC_DTYPE_F32, (size_t)en->orig.numel);
            outp = cast;
        }
        if ((st = npuc_writer_write(w, outp, en->orig.nbytes)) != NPUC_OK) goto done;
    }
    st = npuc_writer_finish(w);
    w = NULL;
done:
    npuc_writer_abort(w);
    json_decref(art);
    free(ents);
    free(owner);
    free(first);
    npuc__scratch_free(&s_f);
    npuc__scratch_free(&s_cast);
    return st;
}

/* The decoder for an encoding, for readers of single entries (decode_entry.c). */
npuc_decode_fn npuc__decoder_find(const char *encoding) {
    for (size_t d = 0; d < sizeof DECODERS / sizeof DECODERS[0]; d++)
        if (strcmp(encoding, DECODERS[d].encoding) == 0) return DECODERS[d].fn;
    return NULL;
}
