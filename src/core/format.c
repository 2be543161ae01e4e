/*
 * format.c - formats as the core sees them: rows of the registry
 * (format_row.h), looked up by id, name, extension or the file's bytes.
 * Nothing here names a format; the rows say everything.
 */
#include <string.h>

#include "format_row.h"

const npuc__format_row *npuc__format_by_id(npuc_format f) {
    size_t n;
    const npuc__format_row *const *t = npuc__format_table(&n);
    return f >= 1 && (size_t)f <= n ? t[f - 1] : NULL;
}

npuc_format npuc__format_id(const npuc__format_row *r) {
    size_t n;
    const npuc__format_row *const *t = npuc__format_table(&n);
    for (size_t i = 0; i < n; i++)
        if (t[i] == r) return (npuc_format)(i + 1);
    return NPUC_FORMAT_AUTO;
}

const npuc__opt_decl *npuc__format_opt_decl(const npuc__format_row *r, const char *key) {
    for (size_t i = 0; r && i < r->nopts; i++)
        if (strcmp(r->opts[i].key, key) == 0) return &r->opts[i];
    return NULL;
}

/* The extension is what follows the path's last '.', wherever it is (as
 * before the registry: "dir.h5/x" names no format, "x.H5" neither). */
npuc_format npuc_format_from_path(const char *path) {
    const char *dot = strrchr(path, '.');
    if (!dot) return NPUC_FORMAT_AUTO;
    size_t n;
    const npuc__format_row *const *t = npuc__format_table(&n);
    for (size_t i = 0; i < n; i++)
        for (const char *const *e = t[i]->ext; *e; e++)
            if (strcmp(dot, *e) == 0) return (npuc_format)(i + 1);
    return NPUC_FORMAT_AUTO;
}

const char *npuc_format_name(npuc_format f) {
    const npuc__format_row *r = npuc__format_by_id(f);
    return r ? r->name : "auto";
}

const char *npuc_format_ext(npuc_format f, size_t i) {
    const npuc__format_row *r = npuc__format_by_id(f);
    for (size_t k = 0; r && r->ext[k]; k++)
        if (k == i) return r->ext[k];
    return NULL;
}

npuc_format npuc_format_find(const char *name) {
    size_t n;
    const npuc__format_row *const *t = npuc__format_table(&n);
    for (size_t i = 0; name && i < n; i++)
        if (strcmp(t[i]->name, name) == 0) return (npuc_format)(i + 1);
    return NPUC_FORMAT_AUTO;
}

int npuc_format_accepts(npuc_format f, const char *key) {
    return key && npuc__format_opt_decl(npuc__format_by_id(f), key) != NULL;
}

npuc_status npuc__format_for_open(npuc_ctx *ctx, const char *path, const npuc_open_opts *o,
                                  const npuc__format_row **row) {
    *row = NULL;
    if (o->format != NPUC_FORMAT_AUTO) {
        if (!(*row = npuc__format_by_id(o->format)))
            return npuc_fail(ctx, NPUC_ERR_ARG, "%s: unknown format id %d", path, (int)o->format);
        return NPUC_OK;
    }
    /* The extension decides when it names a format (a safetensors payload
     * may contain an HDF5 signature at offset 512); otherwise the bytes. */
    const npuc__format_row *r = npuc__format_by_id(npuc_format_from_path(path));
    if (r) {
        if (r->no_signature && r->sniff(path) == NPUC__SNIFF_NO)
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: %s", path, r->no_signature);
        *row = r;
        return NPUC_OK;
    }
    size_t n;
    const npuc__format_row *const *t = npuc__format_table(&n);
    int best = NPUC__SNIFF_NO;
    *row = t[0]; /* nothing recognised: the first reader explains what is wrong */
    for (size_t i = 0; i < n; i++) {
        int s = t[i]->sniff(path);
        if (s > best) { best = s; *row = t[i]; }
    }
    return NPUC_OK;
}

const char *npuc_model_format_opt(const npuc_model *m, const char *key) {
    const npuc__format_row *r = npuc__format_by_id(m->format);
    return r && r->describe && key ? r->describe(m, key) : NULL;
}

/* Every format that stores Keras layer trees names them with the option
 * "structure" (plain, keras2, keras3), so this needs no format's help. */
int npuc_model_is_keras(const npuc_model *m) {
    const char *s = npuc_model_format_opt(m, "structure");
    return s && strcmp(s, "plain") != 0;
}

npuc_status npuc__format_read_graph(npuc_ctx *ctx, npuc_model *m) {
    size_t n;
    const npuc__format_row *const *rows = npuc__format_table(&n);
    const npuc__format_row *own = npuc__format_by_id(npuc_model_format(m));
    /* the model's own row first, then any other that may know its metadata */
    for (size_t k = 0; k <= n; k++) {
        const npuc__format_row *r = k == 0 ? own : rows[k - 1];
        if (!r || !r->read_graph || (k > 0 && r == own)) continue;
        npuc_status st = r->read_graph(ctx, m);
        if (st != NPUC_ERR_NOT_FOUND) return st;
    }
    return NPUC_ERR_NOT_FOUND;
}
