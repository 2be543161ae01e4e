/*
 * decompress.c - turning an npuc artifact back into dense float tensors, and
 * the table of decoders every reader of artifacts shares.
 *
 * The file is seen through its logical view (decode_entry.h), which has
 * validated every entry, nested ones included, before anything is written.
 * The stored tensors are then walked in file order: the first stored tensor
 * of an encoded tensor is replaced by the rebuilt original (cast to its
 * original dtype, in the Keras layer of that first tensor), its other stored
 * tensors are dropped, and every other tensor is copied byte for byte.
 * Decoders live in one file per encoding (decoders.h); nested parts are read
 * through npuc__part_read_f32 below.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codecs/artifact_meta.h"
#include "npuc_internal.h"
#include "codecs/decode_entry.h"
#include "codecs/decoders.h"
#include "passes/pass_util.h"

static const struct {
    const char *encoding;
    npuc_decode_fn fn;
} DECODERS[] = {
    {"quant", npuc__decode_quant},
    {"lowrank", npuc__decode_lowrank},
    {"nm_sparse", npuc__decode_nm},
};

npuc_decode_fn npuc__decoder_find(const char *encoding) {
    for (size_t d = 0; d < sizeof DECODERS / sizeof DECODERS[0]; d++)
        if (strcmp(encoding, DECODERS[d].encoding) == 0) return DECODERS[d].fn;
    return NULL;
}

npuc_status npuc__part(npuc_ctx *ctx, npuc_model *m, const char *name, const char *part, size_t *idx) {
    if (npuc_model_find(m, part, idx) != 0)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': its part '%s' is missing", npuc_model_path(m),
                         name, part);
    return NPUC_OK;
}

const json_t *npuc__part_entry(const npuc__nest *nest, const char *name, const char *part) {
    if (!nest || !nest->tensors || strcmp(name, part) == 0) return NULL;
    return json_object_get(nest->tensors, part);
}

/* An entry for a tensor stored dense under its own name ("fake_quant"). */
static int dense_entry(const json_t *e) {
    const json_t *enc = json_object_get(e, "encoding");
    return !json_object_get(e, "parts") && json_is_string(enc) && strcmp(json_string_value(enc), "fake_quant") == 0;
}

/* Why an entry without parts that is not dense cannot be decoded. */
static npuc_status no_parts(npuc_ctx *ctx, const char *path, const char *name, const char *enc) {
    if (!npuc__decoder_find(enc))
        return npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s': unknown encoding '%s' (newer npuc?)", path,
                         name, enc);
    return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': artifact entry has no parts", path, name);
}

static void fmt_shape(const npuc_tensor_info *t, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < t->rank && k + 24 < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)t->shape[i]);
}

/* NPUC_ERR_FORMAT unless got is a float tensor of want's shape. */
static npuc_status check_part(npuc_ctx *ctx, const char *path, const char *name, const char *what,
                              const npuc_tensor_info *got, const npuc_tensor_info *want) {
    int ok = npuc_dtype_is_float(got->dtype) && got->rank == want->rank;
    for (int i = 0; ok && i < want->rank; i++) ok = got->shape[i] == want->shape[i];
    if (ok) return NPUC_OK;
    char gs[128], ws[128];
    fmt_shape(got, gs, sizeof gs);
    fmt_shape(want, ws, sizeof ws);
    return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': part '%s' %s %s [%s], the entry implies a float [%s]",
                     path, name, got->name, what, npuc_dtype_name(got->dtype), gs, ws);
}

npuc_status npuc__part_read_f32(npuc_ctx *ctx, npuc_model *m, const npuc__nest *nest, const char *name,
                                const char *part, const npuc_tensor_info *want, float *out) {
    const char *path = npuc_model_path(m);
    npuc_status st;
    const json_t *e = npuc__part_entry(nest, name, part);
    if (!e || dense_entry(e)) {
        size_t idx;
        if ((st = npuc__part(ctx, m, name, part, &idx)) != NPUC_OK ||
            (st = check_part(ctx, path, name, "is", npuc_model_tensor(m, idx), want)) != NPUC_OK)
            return st;
        return out ? npuc_model_read_f32(ctx, m, idx, out) : NPUC_OK;
    }
    /* A nested entry: decode it one level deeper (a cycle stops here too). */
    if (nest->depth + 1 > NPUC_NEST_MAX)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': part '%s' nests entries more than %d deep", path,
                         name, part, NPUC_NEST_MAX);
    const char *enc;
    if ((st = npuc__art_str(ctx, path, part, e, "encoding", &enc)) != NPUC_OK) return st;
    if (!json_object_get(e, "parts")) return no_parts(ctx, path, part, enc);
    npuc_decode_fn fn = npuc__decoder_find(enc);
    if (!fn)
        return npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s': part '%s': unknown encoding '%s' (newer npuc?)",
                         path, name, part, enc);
    npuc_tensor_info info;
    if ((st = npuc__art_orig(ctx, path, part, e, &info)) != NPUC_OK) return st;
    info.name = part;
    if ((st = check_part(ctx, path, name, "is described as", &info, want)) != NPUC_OK) return st;
    const npuc__nest inner = {nest->tensors, nest->depth + 1};
    if ((st = fn(ctx, m, &inner, part, e, &info, out)) != NPUC_OK || !out || info.dtype == NPUC_DTYPE_F32) return st;
    /* The part reads as the tensor its entry describes: rounded to its dtype,
     * exactly what decompressing that entry alone writes. */
    void *tmp = malloc((size_t)(info.nbytes ? info.nbytes : 1));
    if (!tmp) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: tensor '%s': out of memory", path, part);
    npuc_convert(tmp, info.dtype, out, NPUC_DTYPE_F32, (size_t)info.numel);
    npuc_convert(out, NPUC_DTYPE_F32, tmp, info.dtype, (size_t)info.numel);
    free(tmp);
    return NPUC_OK;
}

npuc_status npuc_decompress_model(npuc_ctx *ctx, npuc_model *m, const char *out,
                                  const npuc_write_opts *wo) {
    const char *path = npuc_model_path(m);
    npuc_status st;
    npuc_writer *w = NULL;
    npuc__lview v;
    npuc_scratch s_f = {0}, s_cast = {0};
    if ((st = npuc__lview_open(ctx, m, &v)) != NPUC_OK) return st;
    if (!v.art) {
        st = npuc_fail(ctx, NPUC_ERR_ARG, "%s: not an npuc artifact (no 'npuc' metadata)", path);
        goto done;
    }
    /* The view lists what it cannot decode; decompress refuses it, naming
     * the encoding (the outer one, or the nested one the decoder meets). */
    const npuc__nest nest = {json_object_get(v.art, "tensors"), 0};
    for (size_t l = 0; l < v.n; l++) {
        const npuc__ltensor *t = &v.t[l];
        if (t->dense && t->encoding && !dense_entry(t->entry)) {
            st = no_parts(ctx, path, t->name, t->encoding);
            goto done;
        }
        if (t->dense || t->fn) continue;
        npuc_decode_fn fn = npuc__decoder_find(t->encoding);
        if (!fn) {
            st = npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s': unknown encoding '%s' (newer npuc?)", path,
                           t->name, t->encoding);
            goto done;
        }
        if ((st = fn(ctx, m, &nest, t->name, t->entry, &t->info, NULL)) == NPUC_OK)
            st = npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s': cannot be decoded", path, t->name);
        goto done;
    }

    if ((st = npuc_writer_open(ctx, out, wo, &w)) != NPUC_OK) goto done;
    for (size_t i = 0; i < npuc_model_meta_count(m); i++) {
        const char *mk, *mv;
        npuc_model_meta_at(m, i, &mk, &mv);
        if (strcmp(mk, NPUC_ART_KEY) == 0 || strcmp(mk, "npuc.layout") == 0) continue;
        if ((st = npuc_writer_meta(w, mk, mv)) != NPUC_OK) goto done;
    }
    /* v.t is in file order of each tensor's first stored tensor. */
    for (size_t l = 0; l < v.n; l++)
        if ((st = npuc_writer_declare(w, v.t[l].dense ? npuc_model_tensor(m, v.t[l].stored) : &v.t[l].info)) !=
            NPUC_OK)
            goto done;
    for (size_t l = 0; l < v.n; l++) {
        const npuc__ltensor *t = &v.t[l];
        if (t->dense) {
            const void *p;
            if ((st = npuc_model_data(ctx, m, t->stored, &p)) != NPUC_OK) goto done;
            st = npuc_writer_write(w, p, npuc_model_tensor(m, t->stored)->nbytes);
            npuc_model_release(m, t->stored);
            if (st != NPUC_OK) goto done;
            continue;
        }
        float *f = npuc__scratch(&s_f, t->info.numel * sizeof(float));
        if (!f) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: tensor '%s': out of memory", path, t->name); goto done; }
        if ((st = t->fn(ctx, m, &nest, t->name, t->entry, &t->info, f)) != NPUC_OK) goto done;
        const void *outp = f;
        if (t->info.dtype != NPUC_DTYPE_F32) {
            void *cast = npuc__scratch(&s_cast, t->info.nbytes);
            if (!cast) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
            npuc_convert(cast, t->info.dtype, f, NPUC_DTYPE_F32, (size_t)t->info.numel);
            outp = cast;
        }
        if ((st = npuc_writer_write(w, outp, t->info.nbytes)) != NPUC_OK) goto done;
    }
    st = npuc_writer_finish(w);
    w = NULL;
done:
    npuc_writer_abort(w);
    npuc__lview_free(&v);
    npuc__scratch_free(&s_f);
    npuc__scratch_free(&s_cast);
    return st;
}
