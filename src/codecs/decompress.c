/*
 * decompress.c - turning an npuc artifact back into dense float tensors.
 *
 * The file is seen through its logical view (decode_entry.h), which has
 * validated every entry, nested ones included, before anything is written.
 * The stored tensors are then walked in file order: the first stored tensor
 * of an encoded tensor is replaced by the rebuilt original (cast to its
 * original dtype, in the Keras layer of that first tensor), its other stored
 * tensors are dropped, and every other tensor is copied byte for byte.
 * Each encoding's decoder is named by its row of the codec table (codec.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codecs/artifact_meta.h"
#include "format_row.h"
#include "npuc_internal.h"
#include "codecs/codec.h"
#include "codecs/decode_entry.h"
#include "passes/pass_util.h"

npuc_status npuc_decompress_model(npuc_ctx *ctx, npuc_model *m, const char *out,
                                  const npuc_write_opts *wo) {
    const char *path = npuc_model_path(m);
    npuc_status st;
    npuc_writer *w = NULL;
    npuc__lview v;
    npuc_scratch s_f = {0}, s_cast = {0};
    /* Weights a graph states as quantization operators (ONNX QDQ) are the
     * format row's to read; NOT_FOUND: none, the artifact path follows. */
    size_t nrows = 0;
    const npuc__format_row *const *rows = npuc__format_table(&nrows);
    for (size_t r = 0; r < nrows; r++)
        if (rows[r]->decompress && (st = rows[r]->decompress(ctx, m, out, wo)) != NPUC_ERR_NOT_FOUND) return st;
    if ((st = npuc__lview_open(ctx, m, &v)) != NPUC_OK) return st;
    if (!v.art) {
        const npuc__format_row *row = npuc__format_by_id(npuc_model_format(m));
        if (row && row->decodes_on_load) {
            st = npuc_model_convert(ctx, m, out, wo, 0, NPUC_DTYPE_F32);
            goto done;
        }
        st = npuc_fail(ctx, NPUC_ERR_ARG, "%s: not an npuc artifact (no 'npuc' metadata)", path);
        goto done;
    }
    /* The view lists what it cannot decode; decompress refuses it, naming
     * the encoding (the outer one, or the nested one the decoder meets). */
    const npuc__nest nest = {json_object_get(v.art, "tensors"), 0};
    for (size_t l = 0; l < v.n; l++) {
        const npuc__ltensor *t = &v.t[l];
        if (t->dense && t->encoding && !npuc__codec_entry_dense(t->entry)) {
            st = npuc__entry_no_parts(ctx, path, t->name, t->encoding);
            goto done;
        }
        if (t->dense || t->fn) continue;
        const npuc__codec *c = npuc__codec_find(t->encoding);
        if (!c || !c->decode) {
            st = npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s': unknown encoding '%s' (newer npuc?)", path,
                           t->name, t->encoding);
            goto done;
        }
        if ((st = c->decode(ctx, m, &nest, t->name, t->entry, &t->info, NULL)) == NPUC_OK)
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
