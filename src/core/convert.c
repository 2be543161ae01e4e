/*
 * convert.c - copying a model to another file (and format), optionally
 * casting float tensors.  Streams one tensor at a time: peak memory is one
 * tensor (two when casting).
 */
#include <stdlib.h>
#include <string.h>

#include "npuc_internal.h"

npuc_status npuc_model_convert(npuc_ctx *ctx, npuc_model *m, const char *path,
                               const npuc_write_opts *opts, int to_dtype_set, npuc_dtype to_dtype) {
    npuc_write_opts o = opts ? *opts : npuc_write_opts_defaults();
    if (to_dtype_set && !npuc_dtype_is_float(to_dtype))
        return npuc_fail(ctx, NPUC_ERR_ARG, "--dtype must be a float type (f32, f16, bf16)");
    npuc_writer *w = NULL;
    void *cast = NULL;
    npuc_status st = npuc_writer_open(ctx, path, &o, &w);
    if (st != NPUC_OK) return st;
    if (w->format == NPUC_FORMAT_HDF5 && !o.h5_style_set && m->format == NPUC_FORMAT_HDF5) {
        w->opts.h5_style = m->h5_style == NPUC_H5_KERAS3 ? NPUC_H5_KERAS3 :
                           m->h5_style == NPUC_H5_KERAS2 ? NPUC_H5_KERAS2 : NPUC_H5_PLAIN;
        w->opts.h5_style_set = 1;
    }
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
