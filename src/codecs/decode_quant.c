/*
 * decode_quant.c - rebuilding a quantized tensor (encoding "quant") from its
 * codes, scales and zero points: w' = (q - zp) * scale, exactly what
 * --fake-quant writes.
 */
#include <stdlib.h>
#include <string.h>

#include "codecs/artifact_meta.h"
#include "kernels/npuc_kernels.h"
#include "codecs/codec.h"
#include "codecs/entry_fields.h"

npuc_status npuc__decode_quant(npuc_ctx *ctx, npuc_model *m, const npuc__nest *nest, const char *name,
                               const json_t *e, const npuc_tensor_info *orig, float *out) {
    (void)nest; /* codes, scales and zero points are raw stored tensors */
    const char *path = npuc_model_path(m);
    npuc_status st;
    npuc_quant_params p;
    const char *gran, *codes_name, *scale_name;
    int packed;
    if ((st = npuc__quant_entry_read(ctx, path, name, e, &p, &gran, &packed)) != NPUC_OK ||
        (st = npuc__art_str(ctx, path, name, e, "codes", &codes_name)) != NPUC_OK ||
        (st = npuc__art_str(ctx, path, name, e, "scale", &scale_name)) != NPUC_OK ||
        (st = npuc__quant_entry_gran(ctx, path, name, gran, &p)) != NPUC_OK)
        return st;
    const int sym = p.symmetric;
    npuc_quant_shape qs;
    if (npuc_quant_shape_of(ctx, orig, &p, &qs) != NPUC_OK)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': inconsistent quantization entry", path, name);
    size_t ic, is, iz = 0;
    if ((st = npuc__part(ctx, m, name, codes_name, &ic)) != NPUC_OK ||
        (st = npuc__part(ctx, m, name, scale_name, &is)) != NPUC_OK)
        return st;
    const npuc_tensor_info *tc = npuc_model_tensor(m, ic), *ts = npuc_model_tensor(m, is);
    uint64_t want = packed ? npuc_packed_size(orig->numel, p.bits) : orig->numel;
    if (tc->nbytes != want || npuc_dtype_size(tc->dtype) != 1)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': codes hold %llu bytes, the entry implies %llu",
                         path, name, (unsigned long long)tc->nbytes, (unsigned long long)want);
    if (!npuc__scale_dtype_ok(ts->dtype) || ts->numel != qs.nscales)
        return npuc_fail(ctx, NPUC_ERR_FORMAT,
                         "%s: tensor '%s': scale tensor '%s' is not %llu F32, F16 or BF16 values", path, name,
                         scale_name, (unsigned long long)qs.nscales);
    if (!sym) {
        const char *zp_name;
        if ((st = npuc__art_str(ctx, path, name, e, "zero_point", &zp_name)) != NPUC_OK ||
            (st = npuc__part(ctx, m, name, zp_name, &iz)) != NPUC_OK)
            return st;
        const npuc_tensor_info *tz = npuc_model_tensor(m, iz);
        if (tz->dtype != NPUC_DTYPE_U8 || tz->numel != qs.nscales)
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': zero point tensor '%s' is not %llu U8 values",
                             path, name, zp_name, (unsigned long long)qs.nscales);
    }
    if (!out) return NPUC_OK;

    uint8_t *unpacked = NULL;
    float *sc = malloc(sizeof(float) * (size_t)(qs.nscales ? qs.nscales : 1));
    int32_t *zp = calloc((size_t)(qs.nscales ? qs.nscales : 1), sizeof(int32_t));
    const void *cp, *sp, *zpp;
    if (!sc || !zp) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
    /* Scales stored as F16/BF16 (--scale-dtype) widen exactly to f32. */
    if ((st = npuc_model_data(ctx, m, is, &sp)) != NPUC_OK) goto done;
    npuc_convert(sc, NPUC_DTYPE_F32, sp, ts->dtype, (size_t)qs.nscales);
    npuc_model_release(m, is);
    if (!sym) {
        if ((st = npuc_model_data(ctx, m, iz, &zpp)) != NPUC_OK) goto done;
        for (uint64_t k = 0; k < qs.nscales; k++) zp[k] = ((const uint8_t *)zpp)[k];
        npuc_model_release(m, iz);
    }
    if ((st = npuc_model_data(ctx, m, ic, &cp)) != NPUC_OK) goto done;
    const uint8_t *codes = cp;
    if (packed) {
        unpacked = malloc((size_t)(orig->numel ? orig->numel : 1));
        if (!unpacked) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
        npuc_unpack_bits(cp, (size_t)orig->numel, p.bits, sym, unpacked);
        codes = unpacked;
    }
    st = npuc_dequantize_tensor(ctx, orig, &p, codes, sc, zp, out);
    npuc_model_release(m, ic);
done:
    free(unpacked);
    free(sc);
    free(zp);
    return st;
}
