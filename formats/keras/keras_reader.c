/*
 * keras_reader.c - opening a .keras archive as an npuc model.
 *
 * The archive is checked entry by entry (keras_zip.c); model.weights.h5 is
 * extracted to a private temporary file (mode 0600 in $TMPDIR, else /tmp,
 * registered with tempfiles.c so a signal removes it) and opened by the
 * contained HDF5 reader (formats/hdf5/h5_worker.c) under the archive's name,
 * with config.json as "model_config" and the other text entries as
 * "keras.archive/<name>" metadata.  The temporary file is unlinked as soon
 * as the reader has it open, so nothing is left behind however npuc ends.
 *
 * A file named .keras that is HDF5 (Keras 2 could save a whole model under
 * any name) is read as HDF5, as before archives were supported.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hdf5/h5_common.h"
#include "keras_format.h"

typedef struct kmeta {
    char **k, **v;
    size_t n;
} kmeta;

static void kmeta_free(kmeta *m) {
    for (size_t i = 0; i < m->n; i++) { free(m->k[i]); free(m->v[i]); }
    free(m->k);
    free(m->v);
}

/* Takes ownership of v. */
static int kmeta_push(kmeta *m, const char *k, char *v) {
    char **nk = realloc(m->k, (m->n + 1) * sizeof *nk);
    if (nk) m->k = nk;
    char **nv = realloc(m->v, (m->n + 1) * sizeof *nv);
    if (nv) m->v = nv;
    char *kc = npuc__strdup(k);
    if (!nk || !nv || !kc) { free(kc); free(v); return -1; }
    m->k[m->n] = kc;
    m->v[m->n++] = v;
    return 0;
}

/* config.json -> model_config, other non-folder entries -> carried text;
 * binary entries are not carried (a warning says so). */
static npuc_status collect(npuc_ctx *ctx, const npuc_kzip *z, long wi, kmeta *meta) {
    uint64_t total = 0; /* bytes held in memory, bounded by NPUC_KERAS_MAX_TEXT in all */
    for (size_t i = 0; i < z->n; i++) {
        const char *name = npuc__kzip_name(z, i);
        size_t len = strlen(name);
        if ((long)i == wi || (len && name[len - 1] == '/')) continue;
        char *v = NULL;
        int text = 0;
        npuc_status st = npuc__kzip_read(ctx, z, i, &v, &text);
        if (st != NPUC_OK) return st;
        int cfg = strcmp(name, NPUC_KERAS_CONFIG) == 0;
        total += strlen(v);
        if (total > NPUC_KERAS_MAX_TEXT) {
            free(v);
            return npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: the entries besides %s hold more than %llu bytes",
                             z->path, NPUC_KERAS_WEIGHTS, (unsigned long long)NPUC_KERAS_MAX_TEXT);
        }
        if (!text) {
            free(v);
            if (cfg)
                return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: config.json is not UTF-8 text", z->path);
            npuc__ctx_warn(ctx, "%s: zip entry '%s' is binary: it is not carried to outputs", z->path, name);
            continue;
        }
        char key[sizeof NPUC_KERAS_ENTRY_PREFIX + NPUC_KERAS_MAX_NAME];
        snprintf(key, sizeof key, "%s%s", NPUC_KERAS_ENTRY_PREFIX, name);
        if (kmeta_push(meta, cfg ? "model_config" : key, v) != 0)
            return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", z->path);
    }
    return NPUC_OK;
}

/* A private temporary file for the extracted weights; *fd open for writing. */
static npuc_status make_temp(npuc_ctx *ctx, const char *path, char **tmp, int *fd) {
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir) dir = "/tmp";
    size_t n = strlen(dir) + 32;
    char *t = malloc(n);
    if (!t) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
    snprintf(t, n, "%s/npuc-keras-XXXXXX", dir);
    *fd = mkstemp(t); /* O_EXCL, mode 0600 */
    if (*fd < 0) {
        npuc_status st = npuc_fail(ctx, NPUC_ERR_IO, "%s: cannot create a temporary file in %s: %s", path, dir,
                                   strerror(errno));
        free(t);
        return st;
    }
    npuc__tempfiles_track(t);
    *tmp = t;
    return NPUC_OK;
}

static void drop_temp(char *tmp) {
    if (!tmp) return;
    unlink(tmp);
    npuc__tempfiles_untrack(tmp);
    free(tmp);
}

/* Messages about the extracted file name it as "<archive>: model.weights.h5". */
static npuc_status rename_message(npuc_ctx *ctx, npuc_status st, const char *tmp, const char *path) {
    const char *msg = npuc_ctx_errmsg(ctx);
    size_t tl = strlen(tmp);
    if (!msg || strncmp(msg, tmp, tl) != 0) return st;
    char *rest = npuc__strdup(msg + tl);
    if (!rest) return st;
    npuc_fail(ctx, st, "%s: %s%s", path, NPUC_KERAS_WEIGHTS, rest);
    free(rest);
    return st;
}

npuc_status npuc__keras_open(npuc_ctx *ctx, const char *path, const npuc_open_opts *o, npuc_model **out) {
    *out = NULL;
    /* A zip is read as one even if a stored HDF5 entry's signature happens
     * to sit at one of the offsets the HDF5 sniff looks at. */
    if (npuc__keras_sniff(path) == NPUC__SNIFF_NO && npuc__h5_format.sniff(path) == NPUC__SNIFF_SIGNATURE)
        return npuc__h5_open(ctx, path, o, out);
    npuc_kzip z;
    kmeta meta = {0};
    char *tmp = NULL;
    int fd = -1;
    npuc_status st = npuc__kzip_open(ctx, path, &z);
    if (st != NPUC_OK) return st;
    long wi = npuc__kzip_find(&z, NPUC_KERAS_WEIGHTS);
    if (wi < 0) {
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: not a Keras 3 archive: no %s entry", path, NPUC_KERAS_WEIGHTS);
        goto done;
    }
    if ((st = collect(ctx, &z, wi, &meta)) != NPUC_OK) goto done;
    if ((st = make_temp(ctx, path, &tmp, &fd)) != NPUC_OK) goto done;
    st = npuc__kzip_extract(ctx, &z, (size_t)wi, fd);
    if (close(fd) != 0 && st == NPUC_OK)
        st = npuc_fail(ctx, NPUC_ERR_IO, "%s: cannot write the extracted %s: %s", path, NPUC_KERAS_WEIGHTS,
                       strerror(errno));
    if (st != NPUC_OK) goto done;
    const uint64_t archive_size = z.file_size;
    npuc__kzip_close(&z);
    npuc_h5_as as = {.shown = path, .file_size = archive_size, .meta_k = (const char *const *)meta.k,
                     .meta_v = (const char *const *)meta.v, .nmeta = meta.n};
    st = npuc__h5_open_as(ctx, tmp, &as, out);
    if (st != NPUC_OK) st = rename_message(ctx, st, tmp, path);
done:
    npuc__kzip_close(&z);
    drop_temp(tmp); /* the reader holds the file open: unlinking it is safe */
    kmeta_free(&meta);
    return st;
}
