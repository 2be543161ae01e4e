/*
 * sparsify_quant.c - N:M sparsity before quantization (`npuc quantize
 * --pattern N:M`): the tensor is sparsified, the sparse tensor quantized
 * with the ordinary quantizer (npuc_quantize_tensor, so scales and codes are
 * exactly those of `npuc sparsify` followed by `npuc quantize`), and only
 * the codes of the kept positions are stored, with the positions, as an
 * "nm_sparse" entry whose "quant" object describes the codes
 * (docs/artifact.md).  Pruned positions quantize to the zero point, so
 * dropping them loses nothing: decode_nm.c rebuilds the fake-quant of the
 * sparsified tensor exactly.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codecs/artifact_meta.h"
#include "codecs/codec.h"
#include "codecs/entry_fields.h"
#include "kernels/npuc_kernels.h"
#include "passes/pass_util.h"
#include "passes/sparsify/sparsify_nm.h"

static int packed_of(const npuc_quant_params *p) { return p->bits < 8; }

uint64_t npuc__nmq_bytes(const npuc_quant_params *p, const npuc_quant_shape *qs, const npuc_nm_geom *g) {
    uint64_t codes = packed_of(p) ? npuc_packed_size(g->kept, p->bits) : g->kept;
    return codes + qs->nscales * 4 + (p->symmetric ? 0 : qs->nscales) + g->meta_bytes;
}

npuc_status npuc__nmq_declare(npuc_ctx *ctx, npuc_writer *w, json_t *art, const npuc_tensor_info *t,
                              const npuc_quant_params *p, const npuc_quant_shape *qs, const npuc_nm_geom *g,
                              char **names) {
    npuc_status st;
    const int packed = packed_of(p);
    npuc_tensor_info c;
    memset(&c, 0, sizeof c);
    c.name = t->name;
    c.group = t->group;
    c.dtype = p->symmetric && !packed ? NPUC_DTYPE_I8 : NPUC_DTYPE_U8;
    if (packed) {
        c.rank = 1;
        c.shape[0] = (int64_t)npuc_packed_size(g->kept, p->bits);
    } else {
        c.rank = 2;
        c.shape[0] = (int64_t)g->channels;
        c.shape[1] = (int64_t)(g->kept / (g->channels ? g->channels : 1));
    }
    if ((st = npuc_writer_declare(w, &c)) != NPUC_OK) return st;
    names[0] = npuc__codec_part_dup(&npuc__codec_nm_sparse, "scale", t->name);
    names[1] = npuc__codec_part_dup(&npuc__codec_nm_sparse, "zero_point", t->name);
    names[2] = npuc__codec_part_dup(&npuc__codec_nm_sparse, "meta", t->name);
    if (!names[0] || !names[1] || !names[2]) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    npuc_tensor_info s;
    memset(&s, 0, sizeof s);
    s.name = names[0];
    s.dtype = NPUC_DTYPE_F32;
    s.group = t->group;
    if (p->gran == NPUC_GRAN_TENSOR) s.rank = 0;
    else if (p->gran == NPUC_GRAN_GROUP) {
        s.rank = 2;
        s.shape[0] = (int64_t)qs->channels;
        s.shape[1] = (int64_t)qs->groups_per_channel;
    } else {
        s.rank = 1;
        s.shape[0] = (int64_t)qs->channels;
    }
    if ((st = npuc_writer_declare(w, &s)) != NPUC_OK) return st;
    if (!p->symmetric) {
        s.name = names[1];
        s.dtype = NPUC_DTYPE_U8;
        if ((st = npuc_writer_declare(w, &s)) != NPUC_OK) return st;
    }
    npuc_tensor_info mt;
    memset(&mt, 0, sizeof mt);
    mt.name = names[2];
    mt.dtype = NPUC_DTYPE_U8;
    mt.rank = 1;
    mt.shape[0] = (int64_t)g->meta_bytes;
    mt.group = t->group;
    if ((st = npuc_writer_declare(w, &mt)) != NPUC_OK) return st;

    json_t *q = json_object();
    json_t *parts = p->symmetric ? json_pack("[sss]", t->name, names[0], names[2])
                                 : json_pack("[ssss]", t->name, names[0], names[1], names[2]);
    json_t *e = npuc__art_add(art, t, npuc__codec_nm_sparse.name);
    int bad = !q || !parts || !e;
    if (!bad) {
        bad |= npuc__quant_entry_set(q, p, qs, packed, NULL, c.dtype, names[0], p->symmetric ? NULL : names[1]);
        bad |= npuc__nm_entry_set(e, g, t->name, names[2], q);
        q = NULL;
        bad |= json_object_set_new(e, "parts", parts);
        parts = NULL;
    }
    json_decref(q);
    json_decref(parts);
    return bad ? npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory") : NPUC_OK;
}

npuc_status npuc__nmq_write(npuc_ctx *ctx, npuc_writer *w, const npuc_tensor_info *t, const float *x,
                            const npuc_quant_params *p, const npuc_quant_shape *qs, const npuc_nm_geom *g,
                            npuc_error_stats *err, uint64_t *zeros) {
    npuc_status st;
    const uint64_t n = t->numel, ns = qs->nscales ? qs->nscales : 1;
    float *y = malloc((size_t)(n ? n : 1) * sizeof *y), *deq = malloc((size_t)(n ? n : 1) * sizeof *deq);
    uint8_t *codes = malloc((size_t)(n ? n : 1)), *kc = malloc((size_t)(g->kept ? g->kept : 1));
    uint8_t *meta = malloc((size_t)(g->meta_bytes ? g->meta_bytes : 1));
    uint8_t *pk = packed_of(p) ? malloc((size_t)npuc_packed_size(g->kept, p->bits) + 1) : NULL;
    float *scales = malloc(sizeof(float) * (size_t)ns);
    int32_t *zps = malloc(sizeof(int32_t) * (size_t)ns);
    uint8_t *z8 = malloc((size_t)ns);
    npuc_prune_stats ps;
    npuc_error_stats qerr;
    if (!y || !deq || !codes || !kc || !meta || (packed_of(p) && !pk) || !scales || !zps || !z8) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "tensor '%s': out of memory", t->name);
        goto done;
    }
    if ((st = npuc_nm_sparsify(ctx, t, g, x, y, &ps)) != NPUC_OK) goto done;
    if ((st = npuc_quantize_tensor(ctx, t, y, p, codes, scales, zps, deq, &qerr)) != NPUC_OK) goto done;
    npuc_error_measure(x, deq, n, err); /* against the original, not the sparse tensor */
    *zeros = ps.zeros;
    npuc_nm_pack(g, y, codes, 1, kc, meta);
    if (packed_of(p)) {
        npuc_pack_bits(kc, (size_t)g->kept, p->bits, pk);
        st = npuc_writer_write(w, pk, npuc_packed_size(g->kept, p->bits));
    } else {
        st = npuc_writer_write(w, kc, g->kept);
    }
    if (st == NPUC_OK) st = npuc_writer_write(w, scales, qs->nscales * sizeof(float));
    if (st == NPUC_OK && !p->symmetric) {
        for (uint64_t k = 0; k < qs->nscales; k++) z8[k] = (uint8_t)zps[k];
        st = npuc_writer_write(w, z8, qs->nscales);
    }
    if (st == NPUC_OK) st = npuc_writer_write(w, meta, g->meta_bytes);
done:
    free(y);
    free(deq);
    free(codes);
    free(kc);
    free(meta);
    free(pk);
    free(scales);
    free(zps);
    free(z8);
    return st;
}
