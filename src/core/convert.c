/*
 * convert.c - copying a model to another file (and format), optionally
 * casting float tensors.  Streams one tensor at a time: peak memory is one
 * tensor (two when casting).
 */
#include <stdlib.h>
#include <string.h>

#include "format_row.h"

npuc_status npuc_model_convert(npuc_ctx *ctx, npuc_model *m, const char *path,
                               const npuc_write_opts *opts, int to_dtype_set, npuc_dtype to_dtype) {
    npuc_write_opts o = opts ? *opts : npuc_write_opts_defaults();
    if (to_dtype_set && !npuc_dtype_is_float(to_dtype))
        return npuc_fail(ctx, NPUC_ERR_ARG, "--dtype must be a float type (f32, f16, bf16)");
    npuc_writer *w = NULL;
    void *cast = NULL;
    npuc_status st = npuc_writer_open(ctx, path, &o, &w);
    if (st != NPUC_OK) return st;
    /* Same format: keep how the input is stored (HDF5: its structure). */
    if (w->format == m->format && (st = npuc__writer_inherit(w, m)) != NPUC_OK) goto fail;
    for (size_t i = 0; i < m->nmeta; i++) {
        if (strcmp(m->meta_k[i], "npuc.layout") == 0) continue; /* the writer recomputes it */
        if ((st = npuc_writer_meta(w, m->meta_k[i], m->meta_v[i])) != NPUC_OK) goto fail;
    }
    for (size_t i = 0; i < m->n; i++) {
        npuc_tensor_info t = m->t[i];
        if (to_dtype_set && npuc_dtype_is_float(t.dtype)) t.dtype = to_dtype;
        if ((st = npuc_writer_declare(w, &t)) != NPUC_OK) goto fail;
    }
    for (size_t i = 0; i < m->n; i++) {
        const npuc_tensor_info *src = &m->t[i];
        const npuc_tensor_info *dst = &w->t[i];
        const void *p;
        int was = m->buf[i] != NULL;
        if ((st = npuc_model_data(ctx, m, i, &p)) != NPUC_OK) goto fail;
        if (dst->dtype != src->dtype) {
            free(cast);
            cast = malloc(dst->nbytes ? (size_t)dst->nbytes : 1);
            if (!cast) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto fail; }
            npuc_convert(cast, dst->dtype, p, src->dtype, (size_t)src->numel);
            p = cast;
        }
        st = npuc_writer_write(w, p, dst->nbytes);
        if (!was) npuc_model_release(m, i);
        if (st != NPUC_OK) goto fail;
    }
    free(cast);
    return npuc_writer_finish(w);
fail:
    free(cast);
    npuc_writer_abort(w);
    return st;
}
