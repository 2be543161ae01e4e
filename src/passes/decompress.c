/*
 * decompress.c - turning an npuc artifact back into dense float tensors.
 *
 * The "npuc" metadata entry lists every encoded tensor with its original
 * dtype, shape and layout and the names of its companion tensors (scales,
 * zero points).  Encoded tensors are rebuilt (codes unpacked and
 * dequantized, then cast to the original dtype), companions are dropped, and
 * every other tensor is copied byte for byte.  The rebuilt values are exactly
 * what `--fake-quant` writes: both use (q - zp) * scale in float.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifact/artifact_meta.h"
#include "kernels/npuc_kernels.h"
#include "npuc_internal.h"
#include "passes/pass_util.h"

typedef struct dentry {
    int kind;          /* 0 copy, 1 quant, 2 companion (dropped) */
    json_t *e;         /* the artifact entry (borrowed) */
    npuc_tensor_info orig;
    npuc_quant_params p;
    int packed;
    size_t scale_idx, zp_idx;
} dentry;

static npuc_status parse_quant(npuc_ctx *ctx, npuc_model *m, size_t i, dentry *d) {
    const char *path = npuc_model_path(m);
    const npuc_tensor_info *t = npuc_model_tensor(m, i);
    npuc_status st;
    long long bits, axis, gs;
    const char *gran, *scale;
    int sym;
    if ((st = npuc__art_orig(ctx, path, t->name, d->e, &d->orig)) != NPUC_OK ||
        (st = npuc__art_int(ctx, path, t->name, d->e, "bits", 2, 8, &bits)) != NPUC_OK ||
        (st = npuc__art_bool(ctx, path, t->name, d->e, "symmetric", &sym)) != NPUC_OK ||
        (st = npuc__art_str(ctx, path, t->name, d->e, "granularity", &gran)) != NPUC_OK ||
        (st = npuc__art_int(ctx, path, t->name, d->e, "axis", -1, NPUC_MAX_RANK - 1, &axis)) != NPUC_OK ||
        (st = npuc__art_int(ctx, path, t->name, d->e, "group_size", 0, UINT32_MAX, &gs)) != NPUC_OK ||
        (st = npuc__art_bool(ctx, path, t->name, d->e, "packed", &d->packed)) != NPUC_OK ||
        (st = npuc__art_str(ctx, path, t->name, d->e, "scale", &scale)) != NPUC_OK)
        return st;
    d->orig.name = t->name;
    d->orig.group = t->group;
    d->p = npuc_quant_params_defaults();
    d->p.bits = (int)bits;
    d->p.symmetric = sym;
    d->p.group_size = (uint32_t)gs;
    d->p.axis = (int)axis;
    if (strcmp(gran, "channel") == 0) d->p.gran = NPUC_GRAN_CHANNEL;
    else if (strcmp(gran, "group") == 0) d->p.gran = NPUC_GRAN_GROUP;
    else if (strcmp(gran, "tensor") == 0) d->p.gran = NPUC_GRAN_TENSOR;
    else return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': unknown granularity '%s'", path, t->name, gran);
    npuc_quant_shape qs;
    if ((st = npuc_quant_shape_of(ctx, &d->orig, &d->p, &qs)) != NPUC_OK)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': inconsistent artifact entry", path, t->name);
    /* The codes, scale and zero point tensors must have the sizes the entry implies. */
    uint64_t want = d->packed ? npuc_packed_size(d->orig.numel, d->p.bits) : d->orig.numel;
    if (t->nbytes != want || npuc_dtype_size(t->dtype) != 1)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': codes hold %llu bytes, entry implies %llu",
                         path, t->name, (unsigned long long)t->nbytes, (unsigned long long)want);
    if (npuc_model_find(m, scale, &d->scale_idx) != 0 ||
        npuc_model_tensor(m, d->scale_idx)->dtype != NPUC_DTYPE_F32 ||
        npuc_model_tensor(m, d->scale_idx)->numel != qs.nscales)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': scale tensor '%s' missing or mis-sized",
                         path, t->name, scale);
    if (!sym) {
        const char *zp;
        if ((st = npuc__art_str(ctx, path, t->name, d->e, "zero_point", &zp)) != NPUC_OK) return st;
        if (npuc_model_find(m, zp, &d->zp_idx) != 0 ||
            npuc_model_tensor(m, d->zp_idx)->dtype != NPUC_DTYPE_U8 ||
            npuc_model_tensor(m, d->zp_idx)->numel != qs.nscales)
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': zero point tensor '%s' missing or mis-sized",
                             path, t->name, zp);
    }
    return NPUC_OK;
}

npuc_status npuc_decompress_model(npuc_ctx *ctx, npuc_model *m, const char *out,
                                  const npuc_write_opts *wo) {
    const char *path = npuc_model_path(m);
    const size_t n = npuc_model_count(m);
    npuc_status st = NPUC_OK;
    json_t *art = NULL;
    npuc_writer *w = NULL;
    npuc_scratch s_codes = {0}, s_f = {0}, s_cast = {0};
    float *sc = NULL;
    int32_t *zp = NULL;
    dentry *d = calloc(n ? n : 1, sizeof *d);
    if (!d) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    if ((st = npuc__art_load(ctx, m, &art)) != NPUC_OK) goto done;
    if (!art) {
        st = npuc_fail(ctx, NPUC_ERR_ARG, "%s: not an npuc artifact (no 'npuc' metadata)", path);
        goto done;
    }
    json_t *tens = json_object_get(art, "tensors");
    for (size_t i = 0; i < n; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        d[i].e = json_object_get(tens, t->name);
        if (!d[i].e) continue;
        const char *enc;
        if ((st = npuc__art_str(ctx, path, t->name, d[i].e, "encoding", &enc)) != NPUC_OK) goto done;
        if (strcmp(enc, "quant") == 0) {
            d[i].kind = 1;
            if ((st = parse_quant(ctx, m, i, &d[i])) != NPUC_OK) goto done;
        } else if (strcmp(enc, "fake_quant") != 0) {
            st = npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s': unknown encoding '%s'", path, t->name, enc);
            goto done;
        }
    }
    uint64_t max_scales = 1;
    for (size_t i = 0; i < n; i++) {
        if (d[i].kind != 1) continue;
        d[d[i].scale_idx].kind = 2;
        if (!d[i].p.symmetric) d[d[i].zp_idx].kind = 2;
        uint64_t k = npuc_model_tensor(m, d[i].scale_idx)->numel;
        if (k > max_scales) max_scales = k;
    }
    sc = malloc(sizeof(float) * (size_t)max_scales);
    zp = malloc(sizeof(int32_t) * (size_t)max_scales);
    if (!sc || !zp) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }

    if ((st = npuc_writer_open(ctx, out, wo, &w)) != NPUC_OK) goto done;
    for (size_t i = 0; i < npuc_model_meta_count(m); i++) {
        const char *k, *v;
        npuc_model_meta_at(m, i, &k, &v);
        if (strcmp(k, NPUC_ART_KEY) == 0 || strcmp(k, "npuc.layout") == 0) continue;
        if ((st = npuc_writer_meta(w, k, v)) != NPUC_OK) goto done;
    }
    for (size_t i = 0; i < n; i++) {
        if (d[i].kind == 2) continue;
        if ((st = npuc_writer_declare(w, d[i].kind == 1 ? &d[i].orig : npuc_model_tensor(m, i))) != NPUC_OK)
            goto done;
    }
    for (size_t i = 0; i < n; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        const void *p;
        if (d[i].kind == 2) continue;
        if ((st = npuc_model_data(ctx, m, i, &p)) != NPUC_OK) goto done;
        if (d[i].kind == 0) {
            st = npuc_writer_write(w, p, t->nbytes);
            npuc_model_release(m, i);
            if (st != NPUC_OK) goto done;
            continue;
        }
        const npuc_tensor_info *o = &d[i].orig;
        const uint8_t *codes = p;
        if (d[i].packed) {
            uint8_t *u = npuc__scratch(&s_codes, o->numel);
            if (!u) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
            npuc_unpack_bits(p, (size_t)o->numel, d[i].p.bits, d[i].p.symmetric, u);
            codes = u;
        }
        const void *sp;
        uint64_t ns = npuc_model_tensor(m, d[i].scale_idx)->numel;
        if ((st = npuc_model_data(ctx, m, d[i].scale_idx, &sp)) != NPUC_OK) goto done;
        memcpy(sc, sp, (size_t)ns * sizeof(float));
        npuc_model_release(m, d[i].scale_idx);
        for (uint64_t k = 0; k < ns; k++) zp[k] = 0;
        if (!d[i].p.symmetric) {
            const void *zpp;
            if ((st = npuc_model_data(ctx, m, d[i].zp_idx, &zpp)) != NPUC_OK) goto done;
            for (uint64_t k = 0; k < ns; k++) zp[k] = ((const uint8_t *)zpp)[k];
            npuc_model_release(m, d[i].zp_idx);
        }
        float *f = npuc__scratch(&s_f, o->numel * sizeof(float));
        if (!f) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
        if ((st = npuc_dequantize_tensor(ctx, o, &d[i].p, codes, sc, zp, f)) != NPUC_OK) goto done;
        npuc_model_release(m, i);
        const void *outp = f;
        if (o->dtype != NPUC_DTYPE_F32) {
            void *cast = npuc__scratch(&s_cast, o->nbytes);
            if (!cast) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
            npuc_convert(cast, o->dtype, f, NPUC_DTYPE_F32, (size_t)o->numel);
            outp = cast;
        }
        if ((st = npuc_writer_write(w, outp, o->nbytes)) != NPUC_OK) goto done;
    }
    st = npuc_writer_finish(w);
    w = NULL;
done:
    npuc_writer_abort(w);
    json_decref(art);
    free(d);
    free(sc);
    free(zp);
    npuc__scratch_free(&s_codes);
    npuc__scratch_free(&s_f);
    npuc__scratch_free(&s_cast);
    return st;
}
