/*
 * writer.c - the format-independent half of writing a weight file: the
 * declared tensor table, and the output as an atomic file (tempfiles.c):
 * this run's own temporary file beside the output, locked while written,
 * published whole by one rename or removed.  The
 * output format's registry row (format_row.h) supplies the backend and the
 * write options it accepts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format_row.h"
#include "layout_rules.h"

/* "(use .safetensors or .h5)": the first extension of every writable
 * format, for the message when a name has none of them. */
static void ext_hint(char *buf, size_t cap) {
    size_t n, k = 0, len = 0;
    const npuc__format_row *const *t = npuc__format_table(&n);
    for (size_t i = 0; i < n; i++) k += t[i]->writer != NULL && t[i]->ext[0];
    buf[0] = 0;
    for (size_t i = 0, j = 0; i < n && len < cap; i++) {
        if (!t[i]->writer || !t[i]->ext[0]) continue;
        const char *sep = j == 0 ? "" : j + 1 < k ? ", " : " or ";
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", sep, t[i]->ext[0]);
        j++;
    }
}

npuc_status npuc_writer_open(npuc_ctx *ctx, const char *path, const npuc_write_opts *opts,
                             npuc_writer **out) {
    return npuc__writer_open_be(ctx, path, opts, NULL, NULL, out);
}

npuc_status npuc__writer_open_be(npuc_ctx *ctx, const char *path, const npuc_write_opts *opts,
                                 const npuc_writer_backend *be, void *be_state, npuc_writer **out) {
    *out = NULL;
    npuc_write_opts o = opts ? *opts : npuc_write_opts_defaults();
    if (!path || !*path) return npuc_fail(ctx, NPUC_ERR_ARG, "no output file given");
    npuc_format f = o.format != NPUC_FORMAT_AUTO ? o.format : npuc_format_from_path(path);
    /* An existing directory first: no name or -f makes it a file output;
     * only a row that writes directories (a checkpoint) may take it. */
    struct stat sb;
    const int exists = !be && stat(path, &sb) == 0;
    if (exists && S_ISDIR(sb.st_mode) &&
        (f == NPUC_FORMAT_AUTO || !npuc__format_by_id(f) || !npuc__format_by_id(f)->writes_dir))
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: is a directory (the output must be a file name)", path);
    if (f == NPUC_FORMAT_AUTO) {
        char hint[256];
        ext_hint(hint, sizeof hint);
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: cannot tell the output format from the name (use %s)",
                         path, hint);
    }
    const npuc__format_row *row = npuc__format_by_id(f);
    if (!row) return npuc_fail(ctx, NPUC_ERR_ARG, "%s: unknown format id %d", path, (int)f);
    if (!row->writer) return npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: npuc cannot write %s files", path, row->name);
    npuc_status st = npuc__write_opts_check(ctx, row, &o);
    if (st == NPUC_OK) st = npuc__write_opts_check_output(ctx, row, &o, path);
    if (st != NPUC_OK) return st;
    if (exists && !o.overwrite)
        return npuc_fail(ctx, NPUC_ERR_EXISTS, "%s: output exists (use -f to overwrite)", path);
    npuc_writer *w = calloc(1, sizeof *w);
    if (!w) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    w->ctx = ctx;
    w->opts = o;
    w->format = f;
    w->row = row;
    w->be = be ? be : row->writer;
    w->be_state = be_state;
    w->path = npuc__strdup(path);
    if (!w->path) {
        free(w);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    *out = w;
    return NPUC_OK;
}

npuc_status npuc_writer_meta(npuc_writer *w, const char *key, const char *value) {
    if (w->begun) return npuc_fail(w->ctx, NPUC_ERR_INTERNAL, "metadata added after data");
    for (size_t i = 0; i < w->nmeta; i++)
        if (strcmp(w->meta_k[i], key) == 0) {
            char *v = npuc__strdup(value);
            if (!v) return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
            free(w->meta_v[i]);
            w->meta_v[i] = v;
            return NPUC_OK;
        }
    size_t c1 = w->capmeta, c2 = w->capmeta;
    if (npuc__grow((void **)&w->meta_k, &c1, w->nmeta + 1, sizeof *w->meta_k) ||
        npuc__grow((void **)&w->meta_v, &c2, w->nmeta + 1, sizeof *w->meta_v))
        return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
    w->capmeta = c1;
    char *k = npuc__strdup(key), *v = npuc__strdup(value);
    if (!k || !v) { free(k); free(v); return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory"); }
    w->meta_k[w->nmeta] = k;
    w->meta_v[w->nmeta] = v;
    w->nmeta++;
    return NPUC_OK;
}

npuc_status npuc_writer_declare(npuc_writer *w, const npuc_tensor_info *info) {
    if (w->begun) return npuc_fail(w->ctx, NPUC_ERR_INTERNAL, "tensor declared after data");
    if (!info->name || !npuc__utf8_valid(info->name, strlen(info->name)))
        return npuc_fail(w->ctx, NPUC_ERR_ARG, "%s: tensor name is not valid UTF-8", w->path);
    if ((unsigned)info->dtype >= NPUC_DTYPE_COUNT)
        return npuc_fail(w->ctx, NPUC_ERR_ARG, "%s: tensor '%s': invalid dtype", w->path, info->name);
    if (npuc__grow((void **)&w->t, &w->cap, w->n + 1, sizeof *w->t))
        return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
    npuc_tensor_info t = *info;
    if (npuc__shape_sizes(t.dtype, t.rank, t.shape, &t.numel, &t.nbytes) != 0)
        return npuc_fail(w->ctx, NPUC_ERR_OVERFLOW, "%s: tensor '%s': bad or overflowing shape",
                         w->path, info->name);
    /* Names must be unique.  A linear scan: declaring is not the hot path,
     * and models hold thousands of tensors, not millions. */
    for (size_t i = 0; i < w->n; i++) {
        if (w->t[i].name[0] == t.name[0] && strcmp(w->t[i].name, t.name) == 0)
            return npuc_fail(w->ctx, NPUC_ERR_ARG, "%s: duplicate tensor name '%s'", w->path, t.name);
    }
    t.name = npuc__strdup(info->name);
    t.group = info->group ? npuc__strdup(info->group) : NULL;
    if (!t.name || (info->group && !t.group)) {
        free((char *)t.name);
        free((char *)t.group);
        return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    w->t[w->n++] = t;
    return NPUC_OK;
}

static npuc_status begin(npuc_writer *w) {
    if (w->begun) return NPUC_OK;
    /* Record layouts that a reader of this file would not guess. */
    int keras = w->row->keras_layouts ? w->row->keras_layouts(w) : 0;
    int err;
    npuc__layout_src src;
    if (npuc__layout_src_from_meta(&src, keras, w->meta_k, w->meta_v, w->nmeta) != 0)
        return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
    char *lj = npuc__layout_meta_json(w->t, w->n, &src, &err);
    npuc__layout_src_free(&src);
    /* A graph a format's read_graph restates on reading (format_row.h
     * graph_meta_key): the layouts come from its ops, none is recorded. */
    size_t nrows;
    const npuc__format_row *const *rows = npuc__format_table(&nrows);
    for (size_t r = 0; lj && r < nrows; r++)
        for (size_t i = 0; lj && rows[r]->graph_meta_key && i < w->nmeta; i++)
            if (strcmp(w->meta_k[i], rows[r]->graph_meta_key) == 0) {
                free(lj);
                lj = NULL;
            }
    if (err) return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < w->nmeta; i++)
        if (strcmp(w->meta_k[i], "npuc.layout") == 0) {
            free(w->meta_k[i]);
            free(w->meta_v[i]);
            memmove(&w->meta_k[i], &w->meta_k[i + 1], (w->nmeta - i - 1) * sizeof *w->meta_k);
            memmove(&w->meta_v[i], &w->meta_v[i + 1], (w->nmeta - i - 1) * sizeof *w->meta_v);
            w->nmeta--;
            break;
        }
    if (lj) {
        npuc_status st = npuc_writer_meta(w, "npuc.layout", lj);
        free(lj);
        if (st != NPUC_OK) return st;
    }
    /* Facts about the source only a directory writer uses (format_row.h). */
    for (size_t i = 0; !w->row->writes_dir && i < w->nmeta;)
        if (strncmp(w->meta_k[i], "npuc.source.", 12) == 0) {
            free(w->meta_k[i]);
            free(w->meta_v[i]);
            memmove(&w->meta_k[i], &w->meta_k[i + 1], (w->nmeta - i - 1) * sizeof *w->meta_k);
            memmove(&w->meta_v[i], &w->meta_v[i + 1], (w->nmeta - i - 1) * sizeof *w->meta_v);
            w->nmeta--;
        } else {
            i++;
        }
    if (!w->be->no_file) {
        /* The temporary file exists from here on; the backend reopens it by
         * name (w->tmp) while w->af holds it locked. */
        npuc_status st = npuc_atomic_file_open(w->ctx, w->path, w->opts.overwrite, &w->af);
        if (st != NPUC_OK) return st;
        if (!(w->tmp = npuc__strdup(npuc_atomic_file_temp(w->af)))) {
            npuc_atomic_file_abort(w->af);
            w->af = NULL;
            return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
        }
    }
    w->begun = 1;
    return w->be->begin(w);
}

npuc_status npuc_writer_write(npuc_writer *w, const void *data, uint64_t nbytes) {
    if (w->failed) return npuc_fail(w->ctx, NPUC_ERR_INTERNAL, "write after a failed write");
    npuc_status st = begin(w);
    if (st != NPUC_OK) { w->failed = 1; return st; }
    if (w->next >= w->n)
        return npuc_fail(w->ctx, NPUC_ERR_INTERNAL, "%s: more tensors written than declared", w->path);
    const npuc_tensor_info *t = &w->t[w->next];
    if (nbytes != t->nbytes) {
        w->failed = 1;
        return npuc_fail(w->ctx, NPUC_ERR_INTERNAL, "%s: tensor '%s': %llu bytes given, %llu expected",
                         w->path, t->name, (unsigned long long)nbytes, (unsigned long long)t->nbytes);
    }
    st = w->be->write(w, w->next, data, nbytes);
    if (st != NPUC_OK) { w->failed = 1; return st; }
    w->next++;
    return NPUC_OK;
}

static void free_writer(npuc_writer *w) {
    for (size_t i = 0; i < w->n; i++) { free((char *)w->t[i].name); free((char *)w->t[i].group); }
    for (size_t i = 0; i < w->nmeta; i++) { free(w->meta_k[i]); free(w->meta_v[i]); }
    free(w->t); free(w->hash); free(w->meta_k); free(w->meta_v);
    free(w->path); free(w->tmp);
    free(w);
}

void npuc_writer_abort(npuc_writer *w) {
    if (!w) return;
    /* The helper stops before the file closes; its error, if any, must not
     * replace the one that aborts the write (in ctx). */
    if (w->wb_set) (void)npuc__writeback_end(&w->wb);
    w->wb_set = 0;
    if (w->begun && w->be->abort) w->be->abort(w);
    npuc_atomic_file_abort(w->af);
    free_writer(w);
}

npuc_status npuc_writer_finish(npuc_writer *w) {
    npuc_ctx *ctx = w->ctx;
    npuc_status st = NPUC_OK;
    if (w->failed) { st = NPUC_ERR_INTERNAL; npuc_fail(ctx, st, "%s: finish after a failed write", w->path); goto fail; }
    if ((st = begin(w)) != NPUC_OK) goto fail;
    if (w->next != w->n) {
        st = npuc_fail(ctx, NPUC_ERR_INTERNAL, "%s: %zu of %zu declared tensors written", w->path,
                       w->next, w->n);
        goto fail;
    }
    /* The writeback helper stops before the format's finish closes its
     * descriptor, and again after it for formats that write everything
     * there (.keras) on the atomic file's descriptor, fsynced below. */
    if ((st = npuc__writer_wb_end(w)) != NPUC_OK || (st = w->be->finish(w)) != NPUC_OK ||
        (st = npuc__writer_wb_end(w)) != NPUC_OK)
        goto fail;
    if (!w->be->no_file) {
        st = npuc_atomic_file_commit(w->af); /* frees af, whatever happens */
        w->af = NULL;
    }
    free_writer(w);
    return st;
fail:
    npuc_writer_abort(w);
    return st;
}
