/*
 * decode_lowrank.c - rebuilding a factored tensor (encoding "lowrank") as the
 * product of its two factors.
 *
 * The entry records the original dtype, shape and layout, the rank and the
 * two parts ["<name>.lr_a", "<name>.lr_b"].  The layout says which factor is
 * on the left (npuc_lowrank_geometry): for OI/OIHW the dense matrix
 * [out, in * spatial] is lr_a x lr_b, for IO/HWIO the matrix
 * [spatial * in, out] is lr_b x lr_a; either way the row-major product is the
 * original tensor's bytes in its own layout.  The factors may have been cast
 * to another float dtype since (npuc convert --dtype); any float dtype is
 * read as float32.
 *
 * Each factor is read through npuc__part_read_f32, so a factor that a later
 * `npuc quantize` replaced by its own "quant" (or "fake_quant") entry is
 * dequantized first, then multiplied (decoders.h, "Nested entries").
 */
#include <stdlib.h>
#include <string.h>

#include "codecs/artifact_meta.h"
#include "codecs/codec.h"
#include "passes/lowrank/lowrank_internal.h"
#include "passes/pass_util.h"

npuc_status npuc__decode_lowrank(npuc_ctx *ctx, npuc_model *m, const npuc__nest *nest, const char *name,
                                 const json_t *e, const npuc_tensor_info *orig, float *out) {
    const char *path = npuc_model_path(m);
    npuc_status st;
    long long rank;
    if ((st = npuc__art_int(ctx, path, name, e, "rank", 1, NPUC_SVD_DIM_MAX, &rank)) != NPUC_OK) return st;
    json_t *parts = json_object_get(e, "parts");
    if (!json_is_array(parts) || json_array_size(parts) != 2 || !json_is_string(json_array_get(parts, 0)) ||
        !json_is_string(json_array_get(parts, 1)))
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': a lowrank entry needs parts [lr_a, lr_b]", path,
                         name);
    npuc_lowrank_geom g;
    npuc_tensor_info wa, wb;
    if (npuc_lowrank_geometry(ctx, orig, &g) != NPUC_OK ||
        npuc_lowrank_factor_shapes(ctx, orig, (int64_t)rank, &wa, &wb) != NPUC_OK) {
        char msg[NPUC_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", npuc_ctx_errmsg(ctx));
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: inconsistent lowrank entry: %s", path, msg);
    }
    const char *pa = json_string_value(json_array_get(parts, 0)), *pb = json_string_value(json_array_get(parts, 1));
    if ((st = npuc__part_read_f32(ctx, m, nest, name, pa, &wa, NULL)) != NPUC_OK ||
        (st = npuc__part_read_f32(ctx, m, nest, name, pb, &wb, NULL)) != NPUC_OK)
        return st;
    if (!out) return NPUC_OK;

    float *a = malloc(sizeof(float) * (size_t)(wa.numel ? wa.numel : 1));
    float *b = malloc(sizeof(float) * (size_t)(wb.numel ? wb.numel : 1));
    if (!a || !b) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: tensor '%s': out of memory", path, name);
        goto done;
    }
    if ((st = npuc__part_read_f32(ctx, m, nest, name, pa, &wa, a)) != NPUC_OK ||
        (st = npuc__part_read_f32(ctx, m, nest, name, pb, &wb, b)) != NPUC_OK)
        goto done;
    int blas = npuc__blas_enter();
    npuc__gemm_rows(g.out_first ? a : b, g.out_first ? b : a, out, g.m, g.n, (int64_t)rank, npuc__threads(ctx));
    npuc__blas_leave(blas);
done:
    free(a);
    free(b);
    return st;
}
