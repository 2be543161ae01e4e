/*
 * compare_factors.c - low-rank factors stored without an artifact entry,
 * compared as their product (compare_fn.h).
 *
 * `npuc lowrank` records each factored tensor in the "npuc" metadata entry,
 * and the logical view decodes it.  When that entry is lost on the way (the
 * file re-saved by a tool that drops metadata), the original W is missing
 * from the other file, which instead holds W's factors under the part names
 * of the "lowrank" codec row.  They are taken for W's factors only when
 * their shapes are exactly those of a factorisation of W at some rank
 * (npuc_lowrank_factor_shapes, with W's layout in the original); the product
 * is then rebuilt by the lowrank decoder itself, given the entry the
 * metadata would have held, so it is the product `npuc decompress` computes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codecs/codec.h"
#include "report/compare_fn.h"

/* The factor names of tensor name (lr_a, lr_b) into na, nb; 0 or -1. */
static int factor_names(const char *name, char *na, char *nb, size_t n) {
    return npuc__codec_part_name(&npuc__codec_lowrank, "lr_a", name, na, n) != 0 ||
                   npuc__codec_part_name(&npuc__codec_lowrank, "lr_b", name, nb, n) != 0
               ? -1 : 0;
}

static int same_shape(const npuc_tensor_info *x, const npuc_tensor_info *y) {
    return x->rank == y->rank && memcmp(x->shape, y->shape, sizeof(int64_t) * (size_t)x->rank) == 0;
}

/* The rank at which ta and tb are the factors of t, or 0. */
static int64_t factor_rank(npuc_ctx *ctx, const npuc_tensor_info *t, const npuc_tensor_info *ta,
                           const npuc_tensor_info *tb) {
    npuc_lowrank_geom g;
    int64_t r = 0;
    if (npuc_lowrank_geometry(ctx, t, &g) == NPUC_OK && ta->rank >= 2) {
        r = g.out_first ? ta->shape[1] : ta->shape[ta->rank - 2];
        npuc_tensor_info wa, wb;
        if (r < 1 || npuc_lowrank_factor_shapes(ctx, t, r, &wa, &wb) != NPUC_OK || !same_shape(&wa, ta) ||
            !same_shape(&wb, tb))
            r = 0;
    }
    return r;
}

npuc_status npuc__cmp_factors_find(npuc_ctx *ctx, const npuc__lview *a, const npuc__lview *b, int64_t *fac,
                                   unsigned char *used_b) {
    char na[1024], nb[1024];
    for (size_t i = 0; i < a->n; i++) {
        fac[i] = 0;
        const npuc__ltensor *t = &a->t[i];
        if (!npuc__lview_readable(t) || npuc__lview_find(b, t->name) >= 0 || factor_names(t->name, na, nb, sizeof na))
            continue;
        long ja = npuc__lview_find(b, na), jb = npuc__lview_find(b, nb);
        if (ja < 0 || jb < 0 || used_b[ja] || used_b[jb] || !b->t[ja].dense || !b->t[jb].dense ||
            !npuc__lview_readable(&b->t[ja]) || !npuc__lview_readable(&b->t[jb]))
            continue;
        if ((fac[i] = factor_rank(ctx, &t->info, &b->t[ja].info, &b->t[jb].info)) > 0) used_b[ja] = used_b[jb] = 1;
    }
    return NPUC_OK;
}

npuc_status npuc__cmp_factors_measure(npuc_ctx *ctx, const npuc__lview *a, npuc__lview *b, size_t i, int64_t rank,
                                      const float *fa, float *out, npuc_tensor_record *r) {
    const npuc__ltensor *t = &a->t[i];
    char na[1024], nb[1024];
    if (factor_names(t->name, na, nb, sizeof na) != 0)
        return npuc_fail(ctx, NPUC_ERR_ARG, "tensor '%s': name too long", t->name);
    long ja = npuc__lview_find(b, na), jb = npuc__lview_find(b, nb);
    /* The entry the "npuc" metadata would have held (docs/artifact.md). */
    json_t *e = json_pack("{s:s, s:I, s:[s, s]}", "encoding", npuc__codec_lowrank.name, "rank", (json_int_t)rank,
                          "parts", na, nb);
    if (!e) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    npuc__nest nest = {b->art ? json_object_get(b->art, "tensors") : NULL, 0};
    npuc_status st = npuc__codec_lowrank.decode(ctx, b->m, &nest, t->name, e, &t->info, out);
    json_decref(e);
    if (st != NPUC_OK) return st;
    r->bytes_after = b->t[ja].bytes + b->t[jb].bytes;
    r->params_after = b->t[ja].info.numel + b->t[jb].info.numel;
    r->action = NPUC_ACTION_FACTORED;
    snprintf(r->scheme, sizeof r->scheme, "r=%lld", (long long)rank);
    npuc_record_set(r, "rank", (double)rank);
    snprintf(r->compared, sizeof r->compared, "%s", NPUC__CMP_FACTORS);
    snprintf(r->note, sizeof r->note, "as '%.50s' x '%.50s' (no npuc entry)", na, nb);
    r->has_error = 1;
    npuc_error_measure(fa, out, t->info.numel, &r->err);
    return NPUC_OK;
}
