/*
 * aimet_params.c - the weight grids of an npuc artifact for AIMET's
 * param_encodings (docs/aimet.md): every "quant" entry of the artifact's
 * "npuc" description (docs/artifact.md) with its stored scales and zero
 * points, read back from the file npuc just wrote (so the encodings describe
 * exactly the codes in it, whatever pass or method chose them).
 *
 * Granularity: per tensor -> one encoding; per channel -> one per channel,
 * in channel order; per group -> AIMET 1.0.0's PER_BLOCK, which blocks the
 * input-channel axis (dim 1) with the kernel dims whole: npuc's groups of G
 * consecutive values of [I, kh, kw...] are such blocks when the channel axis
 * is dim 0, G is a multiple of k = kh*kw*... and I a multiple of G / k
 * (block_size = G / k; scales [O, I / block_size] row-major, npuc's own
 * order).  Other grouped tensors, every grouped tensor in 0.6.1 (which has
 * no blocks), and entries of other encodings (nm_sparse, fake_quant: no
 * stored scales) are left out with a warning naming the tensor.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "codecs/artifact_meta.h"
#include "export_internal.h"

/* Reads stored tensor `part` (n values) as float. */
static npuc_status read_part(npuc_ctx *ctx, npuc_model *m, const char *part, uint64_t n, float *dst) {
    size_t i;
    if (npuc_model_find(m, part, &i) != 0)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s' named by the artifact is missing",
                         npuc_model_path(m), part);
    if (npuc_model_tensor(m, i)->numel != n)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s' holds %llu values, the entry needs %llu",
                         npuc_model_path(m), part, (unsigned long long)npuc_model_tensor(m, i)->numel,
                         (unsigned long long)n);
    return npuc_model_read_f32(ctx, m, i, dst);
}

static npuc_status one_entry(npuc_ctx *ctx, npuc_model *m, const char *name, const json_t *e, int v1,
                             npuc__grids *out) {
    const char *path = npuc_model_path(m), *gran, *scale_name;
    long long bits, axis, gsize;
    int sym;
    npuc_status st;
    if ((st = npuc__art_int(ctx, path, name, e, "bits", 2, 8, &bits)) != NPUC_OK ||
        (st = npuc__art_bool(ctx, path, name, e, "symmetric", &sym)) != NPUC_OK ||
        (st = npuc__art_str(ctx, path, name, e, "granularity", &gran)) != NPUC_OK ||
        (st = npuc__art_int(ctx, path, name, e, "axis", -1, NPUC_MAX_RANK - 1, &axis)) != NPUC_OK ||
        (st = npuc__art_int(ctx, path, name, e, "group_size", 0, (long long)1 << 30, &gsize)) != NPUC_OK ||
        (st = npuc__art_str(ctx, path, name, e, "scale", &scale_name)) != NPUC_OK)
        return st;
    const json_t *zj = json_object_get(e, "zero_point");
    /* --grid full: codes -2^(b-1)..2^(b-1)-1 times a negative scale, i.e.
     * -(2^(b-1)-1)..2^(b-1) times |scale|: one code above AIMET's symmetric
     * grid, so no encoding reproduces them. */
    const json_t *grid = json_object_get(e, "grid");
    if (json_is_string(grid) && strcmp(json_string_value(grid), "full") == 0) {
        npuc__ctx_warn(ctx, "%s: tensor '%s': the full grid (--grid full) has no AIMET encoding: no param "
                       "encoding written", path, name);
        return NPUC_OK;
    }
    npuc_tensor_info orig;
    memset(&orig, 0, sizeof orig);
    if ((st = npuc__art_orig(ctx, path, name, e, &orig)) != NPUC_OK) return st;
    const int grouped = strcmp(gran, "group") == 0, per_tensor = strcmp(gran, "tensor") == 0;
    uint64_t nscale = 1, block = 0;
    if (!per_tensor) {
        if (axis < 0 || axis >= orig.rank)
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': artifact axis %lld outside rank %d", path,
                             name, axis, orig.rank);
        const uint64_t C = (uint64_t)orig.shape[axis];
        nscale = C;
        if (grouped) {
            if (gsize < 2) return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': group_size %lld", path, name, gsize);
            const uint64_t per = orig.numel / (C ? C : 1);
            nscale = C * ((per + (uint64_t)gsize - 1) / (uint64_t)gsize);
            uint64_t k = 1;
            for (int d = 2; d < orig.rank; d++) k *= (uint64_t)orig.shape[d];
            const uint64_t I = orig.rank >= 2 ? (uint64_t)orig.shape[1] : 0;
            const int ok = v1 && axis == 0 && orig.rank >= 2 && k > 0 && (uint64_t)gsize % k == 0 && I % ((uint64_t)gsize / k) == 0;
            if (!ok) {
                if (v1)
                    npuc__ctx_warn(ctx, "%s: tensor '%s': groups of %lld along axis %lld are not blocks of whole "
                                   "input channels (AIMET PER_BLOCK): no param encoding written", path, name, gsize,
                                   axis);
                else
                    npuc__ctx_warn(ctx, "%s: tensor '%s': AIMET 0.6.1 has no per-block encodings: no param "
                                   "encoding written (use --encodings-version 1.0.0)", path, name);
                return NPUC_OK;
            }
            block = (uint64_t)gsize / k;
        }
    }
    npuc__grid *g = npuc__grids_add(ctx, out, name, nscale);
    if (!g) return npuc_ctx_errcode(ctx);
    g->bits = (int)bits;
    g->symmetric = sym;
    g->per_channel = !per_tensor;
    g->block_size = block;
    if ((st = read_part(ctx, m, scale_name, nscale, g->scale)) != NPUC_OK) return st;
    if (!sym) {
        if (!json_is_string(zj))
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': asymmetric entry without a zero_point",
                             path, name);
        float *z = malloc((size_t)nscale * sizeof *z);
        if (!z) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        st = read_part(ctx, m, json_string_value(zj), nscale, z);
        for (uint64_t i = 0; st == NPUC_OK && i < nscale; i++) {
            if (!(z[i] >= 0 && z[i] <= (float)((1 << bits) - 1)))
                st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': zero point %g outside the grid", path,
                               name, (double)z[i]);
            else
                g->zp[i] = (int32_t)z[i];
        }
        free(z);
        if (st != NPUC_OK) return st;
    }
    for (uint64_t i = 0; i < nscale; i++)
        if (!(g->scale[i] > 0.0f) || g->scale[i] > 3.4e38f)
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': scale %g is not positive and finite", path,
                             name, (double)g->scale[i]);
    return NPUC_OK;
}

npuc_status npuc__artifact_grids(npuc_ctx *ctx, const char *path, const char *version, npuc__grids *out) {
    memset(out, 0, sizeof *out);
    out->bits = out->symmetric = -1;
    npuc_model *m;
    npuc_status st = npuc_model_open(ctx, path, NULL, &m);
    if (st != NPUC_OK) return st;
    json_t *root;
    if ((st = npuc__art_load(ctx, m, &root)) != NPUC_OK) goto done;
    if (!root) {
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: not an npuc artifact (no 'npuc' metadata)", path);
        goto done;
    }
    const int v1 = strcmp(version, "1.0.0") == 0;
    const char *name;
    json_t *e;
    json_object_foreach(json_object_get(root, "tensors"), name, e) {
        const json_t *enc = json_object_get(e, "encoding");
        if (json_is_string(enc) && strcmp(json_string_value(enc), "quant") == 0) {
            if ((st = one_entry(ctx, m, name, e, v1, out)) != NPUC_OK) break;
        } else if (json_is_string(enc) && strcmp(json_string_value(enc), "lowrank") != 0) {
            npuc__ctx_warn(ctx, "%s: tensor '%s': encoding '%s' stores no scales: no param encoding written", path,
                           name, json_string_value(enc));
        }
    }
    json_decref(root);
done:
    npuc_model_close(m);
    if (st != NPUC_OK) npuc__grids_free(out);
    return st;
}
