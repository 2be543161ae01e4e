/*
 * decode_part.c - how decoders read their parts (decoders.h): a stored
 * tensor by name, or a nested entry decoded one level deeper and rounded to
 * its own dtype, so a part reads exactly as decompressing it alone writes it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codecs/artifact_meta.h"
#include "codecs/codec.h"

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

npuc_status npuc__entry_no_parts(npuc_ctx *ctx, const char *path, const char *name, const char *enc) {
    const npuc__codec *c = npuc__codec_find(enc);
    if (!c || !c->decode)
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
    if (!e || npuc__codec_entry_dense(e)) {
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
    if (!json_object_get(e, "parts")) return npuc__entry_no_parts(ctx, path, part, enc);
    const npuc__codec *c = npuc__codec_find(enc);
    if (!c || !c->decode)
        return npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s': part '%s': unknown encoding '%s' (newer npuc?)",
                         path, name, part, enc);
    npuc_tensor_info info;
    if ((st = npuc__art_orig(ctx, path, part, e, &info)) != NPUC_OK) return st;
    info.name = part;
    if ((st = check_part(ctx, path, name, "is described as", &info, want)) != NPUC_OK) return st;
    const npuc__nest inner = {nest->tensors, nest->depth + 1};
    if ((st = c->decode(ctx, m, &inner, part, e, &info, out)) != NPUC_OK || !out || info.dtype == NPUC_DTYPE_F32)
        return st;
    /* The part reads as the tensor its entry describes: rounded to its dtype,
     * exactly what decompressing that entry alone writes. */
    void *tmp = malloc((size_t)(info.nbytes ? info.nbytes : 1));
    if (!tmp) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: tensor '%s': out of memory", path, part);
    npuc_convert(tmp, info.dtype, out, NPUC_DTYPE_F32, (size_t)info.numel);
    npuc_convert(out, NPUC_DTYPE_F32, tmp, info.dtype, (size_t)info.numel);
    free(tmp);
    return NPUC_OK;
}
