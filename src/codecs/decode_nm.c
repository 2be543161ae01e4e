/*
 * decode_nm.c - rebuilding an N:M-compressed tensor (encoding "nm_sparse",
 * docs/artifact.md): kept values (floats in the source dtype, or quantized
 * codes with scales) plus packed positions, expanded to the dense tensor
 * with zeros at the pruned positions.
 *
 * For quantized values the codes are scattered into a dense code array,
 * dequantized exactly as the "quant" decoder does, and the pruned positions
 * are then set to +0 - which is what quantizing the sparsified tensor gives
 * there (a zero quantizes to the zero point and dequantizes to +0), so the
 * result equals `npuc quantize --pattern N:M --fake-quant` bit for bit.
 */
#include <stdlib.h>
#include <string.h>

#include "codecs/artifact_meta.h"
#include "kernels/npuc_kernels.h"
#include "codecs/codec.h"
#include "codecs/entry_fields.h"
#include "passes/prune/prune_internal.h"

typedef struct nmq {
    npuc_quant_params p;
    npuc_quant_shape qs;
    int packed;
    size_t ic, is, iz;
} nmq;

static npuc_status parse_quant(npuc_ctx *ctx, npuc_model *m, const char *name, const json_t *q,
                               const npuc_tensor_info *orig, const npuc_nm_geom *g, size_t iv, nmq *out) {
    const char *path = npuc_model_path(m);
    npuc_status st;
    npuc_quant_params p;
    const char *gran, *scale_name;
    int packed;
    if ((st = npuc__quant_entry_read(ctx, path, name, q, &p, &gran, &packed)) != NPUC_OK ||
        (st = npuc__art_str(ctx, path, name, q, "scale", &scale_name)) != NPUC_OK ||
        (st = npuc__quant_entry_gran(ctx, path, name, gran, &p)) != NPUC_OK)
        return st;
    const int sym = p.symmetric;
    out->p = p;
    out->packed = packed;
    out->ic = iv;
    if (npuc_quant_shape_of(ctx, orig, &p, &out->qs) != NPUC_OK)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': inconsistent quantization entry", path, name);
    const npuc_tensor_info *tc = npuc_model_tensor(m, iv);
    const uint64_t want = packed ? npuc_packed_size(g->kept, p.bits) : g->kept;
    if (tc->nbytes != want || npuc_dtype_size(tc->dtype) != 1)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': codes hold %llu bytes, the entry implies %llu", path,
                         name, (unsigned long long)tc->nbytes, (unsigned long long)want);
    if ((st = npuc__part(ctx, m, name, scale_name, &out->is)) != NPUC_OK) return st;
    const npuc_tensor_info *ts = npuc_model_tensor(m, out->is);
    if (ts->dtype != NPUC_DTYPE_F32 || ts->numel != out->qs.nscales)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': scale tensor '%s' is not %llu F32 values", path, name,
                         scale_name, (unsigned long long)out->qs.nscales);
    if (!sym) {
        const char *zp_name;
        if ((st = npuc__art_str(ctx, path, name, q, "zero_point", &zp_name)) != NPUC_OK ||
            (st = npuc__part(ctx, m, name, zp_name, &out->iz)) != NPUC_OK)
            return st;
        const npuc_tensor_info *tz = npuc_model_tensor(m, out->iz);
        if (tz->dtype != NPUC_DTYPE_U8 || tz->numel != out->qs.nscales)
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': zero point tensor '%s' is not %llu U8 values",
                             path, name, zp_name, (unsigned long long)out->qs.nscales);
    }
    return NPUC_OK;
}

static npuc_status decode_quantized(npuc_ctx *ctx, npuc_model *m, const char *name, const npuc_tensor_info *orig,
                                    const npuc_nm_geom *g, const nmq *q, const uint8_t *meta, float *out) {
    npuc_status st;
    const uint64_t ns = q->qs.nscales ? q->qs.nscales : 1;
    uint8_t *codes = malloc((size_t)(g->kept ? g->kept : 1));
    uint8_t *dense = malloc((size_t)(orig->numel ? orig->numel : 1));
    uint8_t *kept = malloc((size_t)(orig->numel ? orig->numel : 1));
    float *sc = malloc(sizeof(float) * (size_t)ns);
    int32_t *zp = calloc((size_t)ns, sizeof(int32_t));
    const void *cp, *sp, *zpp;
    if (!codes || !dense || !kept || !sc || !zp) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
    if ((st = npuc_model_data(ctx, m, q->is, &sp)) != NPUC_OK) goto done;
    memcpy(sc, sp, (size_t)q->qs.nscales * sizeof(float));
    npuc_model_release(m, q->is);
    if (!q->p.symmetric) {
        if ((st = npuc_model_data(ctx, m, q->iz, &zpp)) != NPUC_OK) goto done;
        for (uint64_t k = 0; k < q->qs.nscales; k++) zp[k] = ((const uint8_t *)zpp)[k];
        npuc_model_release(m, q->iz);
    }
    if ((st = npuc_model_data(ctx, m, q->ic, &cp)) != NPUC_OK) goto done;
    if (q->packed) npuc_unpack_bits(cp, (size_t)g->kept, q->p.bits, q->p.symmetric, codes);
    else memcpy(codes, cp, (size_t)g->kept);
    npuc_model_release(m, q->ic);
    if ((st = npuc_nm_unpack(ctx, name, g, codes, 1, meta, dense, kept)) != NPUC_OK) {
        st = npuc__prefix_path(ctx, NPUC_ERR_FORMAT, npuc_model_path(m));
        goto done;
    }
    if ((st = npuc_dequantize_tensor(ctx, orig, &q->p, dense, sc, zp, out)) != NPUC_OK) goto done;
    for (uint64_t i = 0; i < orig->numel; i++)
        if (!kept[i]) out[i] = 0.0f;
done:
    free(codes);
    free(dense);
    free(kept);
    free(sc);
    free(zp);
    return st;
}

npuc_status npuc__decode_nm(npuc_ctx *ctx, npuc_model *m, const npuc__nest *nest, const char *name,
                            const json_t *e, const npuc_tensor_info *orig, float *out) {
    (void)nest; /* values and positions are raw stored tensors */
    const char *path = npuc_model_path(m);
    npuc_status st;
    long long n, mm, in_axis, groups, meta_bits;
    const char *vname, *mname;
    if ((st = npuc__art_int(ctx, path, name, e, "n", 1, 15, &n)) != NPUC_OK ||
        (st = npuc__art_int(ctx, path, name, e, "m", 2, 16, &mm)) != NPUC_OK ||
        (st = npuc__art_int(ctx, path, name, e, "in_axis", 0, NPUC_MAX_RANK - 1, &in_axis)) != NPUC_OK ||
        (st = npuc__art_int(ctx, path, name, e, "groups", 0, INT64_MAX, &groups)) != NPUC_OK ||
        (st = npuc__art_int(ctx, path, name, e, "meta_bits", 1, 4, &meta_bits)) != NPUC_OK ||
        (st = npuc__art_str(ctx, path, name, e, "values", &vname)) != NPUC_OK ||
        (st = npuc__art_str(ctx, path, name, e, "meta", &mname)) != NPUC_OK)
        return st;
    npuc_nm_geom g;
    if (npuc__nm_geom(orig, (int)n, (int)mm, &g) != 0 || g.in_axis != in_axis || (long long)g.groups != groups ||
        g.meta_bits != meta_bits)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': nm_sparse entry does not fit its shape and layout",
                         path, name);
    size_t iv, im;
    if ((st = npuc__part(ctx, m, name, vname, &iv)) != NPUC_OK || (st = npuc__part(ctx, m, name, mname, &im)) != NPUC_OK)
        return st;
    const npuc_tensor_info *tm = npuc_model_tensor(m, im), *tv = npuc_model_tensor(m, iv);
    if (tm->dtype != NPUC_DTYPE_U8 || tm->numel != g.meta_bytes)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': metadata '%s' is not %llu U8 values", path, name,
                         mname, (unsigned long long)g.meta_bytes);
    const json_t *q = json_object_get(e, "quant");
    nmq qd;
    if (json_is_object(q)) {
        if ((st = parse_quant(ctx, m, name, q, orig, &g, iv, &qd)) != NPUC_OK) return st;
    } else if (!q || json_is_null(q)) {
        if (tv->dtype != orig->dtype || tv->numel != g.kept)
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': values '%s' are not %llu %s values", path, name,
                             vname, (unsigned long long)g.kept, npuc_dtype_name(orig->dtype));
    } else {
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': \"quant\" is neither null nor an object", path, name);
    }
    if (!out) return NPUC_OK;

    const void *mp, *vp;
    uint8_t *meta = malloc((size_t)(g.meta_bytes ? g.meta_bytes : 1));
    if (!meta) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    if ((st = npuc_model_data(ctx, m, im, &mp)) != NPUC_OK) { free(meta); return st; }
    memcpy(meta, mp, (size_t)g.meta_bytes);
    npuc_model_release(m, im);
    if (json_is_object(q)) {
        st = decode_quantized(ctx, m, name, orig, &g, &qd, meta, out);
        free(meta);
        return st;
    }
    const size_t es = npuc_dtype_size(orig->dtype);
    void *dense = out;
    if (orig->dtype != NPUC_DTYPE_F32) {
        dense = malloc((size_t)(orig->nbytes ? orig->nbytes : 1));
        if (!dense) { free(meta); return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); }
    }
    if ((st = npuc_model_data(ctx, m, iv, &vp)) == NPUC_OK) {
        st = npuc_nm_unpack(ctx, name, &g, vp, es, meta, dense, NULL);
        if (st != NPUC_OK) st = npuc__prefix_path(ctx, st, path);
        npuc_model_release(m, iv);
    }
    if (st == NPUC_OK && dense != out) npuc_convert(out, NPUC_DTYPE_F32, dense, orig->dtype, (size_t)orig->numel);
    if (dense != out) free(dense);
    free(meta);
    return st;
}
