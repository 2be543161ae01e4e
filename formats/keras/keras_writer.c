/*
 * keras_writer.c - writing a .keras archive.
 *
 * The weights go through the HDF5 writer (Keras 3 tree, bfloat16 as Keras 3
 * stores it) into a temporary file beside the output
 * ("<the output's temporary name>.weights.h5", registered with tempfiles.c);
 * finish then builds the zip with libzip, in Keras' order:
 *   metadata.json     the input's, unchanged (metadata "keras.archive/metadata.json")
 *   config.json       the model's "model_config" metadata (fold-bn rewrites
 *                     it when it folds; otherwise it is the input's bytes);
 *                     without one the archive has none, with a warning
 *   model.weights.h5  stored (not deflated: the HDF5 "deflate" option decides)
 *   ...               every other carried "keras.archive/<name>" entry
 * Metadata that belongs to the archive is not repeated as HDF5 attributes.
 * Entries carry a fixed time (1980-01-01), so the same input gives the same
 * bytes.
 *
 * The zip is written through a libzip source of our own over the output's
 * temporary file descriptor (npuc_atomic_file_fd), not by libzip's own
 * file source, which would write a temporary file of its own and rename it
 * over ours: the core's atomic file keeps its lock and publishes the
 * archive whole, or removes it (tempfiles.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hdf5/h5_common.h"
#include "keras_format.h"

typedef struct kw_state {
    void *h5;    /* the HDF5 writer's state (w->be_state while it runs) */
    char *h5tmp; /* the weights file, until it is in the archive */
} kw_state;

int npuc__keras_archive_key(const char *k) {
    return strcmp(k, "model_config") == 0 ||
           strncmp(k, NPUC_KERAS_ENTRY_PREFIX, sizeof NPUC_KERAS_ENTRY_PREFIX - 1) == 0;
}

static npuc_status nomem(npuc_writer *w) { return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "%s: out of memory", w->path); }

/* Runs the HDF5 writer with its own state in w->be_state. */
#define AS_H5(w, ks, call)                                                                                   \
    do {                                                                                                     \
        (w)->be_state = (ks)->h5;                                                                            \
        call;                                                                                                \
        (ks)->h5 = (w)->be_state;                                                                            \
        (w)->be_state = (ks);                                                                                \
    } while (0)

static const char *meta_of(const npuc_writer *w, const char *k) {
    for (size_t i = 0; i < w->nmeta; i++)
        if (strcmp(w->meta_k[i], k) == 0) return w->meta_v[i];
    return NULL;
}

static void drop_h5tmp(kw_state *ks) {
    if (!ks->h5tmp) return;
    unlink(ks->h5tmp);
    npuc__tempfiles_untrack(ks->h5tmp);
    free(ks->h5tmp);
    ks->h5tmp = NULL;
}

static npuc_status kw_begin(npuc_writer *w) {
    if (!meta_of(w, "model_config"))
        npuc__ctx_warn(w->ctx, "%s: the model has no Keras model_config, so the archive has no config.json: "
                               "Keras cannot load it (npuc can; --h5-style keras3 with a .weights.h5 name "
                               "writes the weights alone)", w->path);
    kw_state *ks = calloc(1, sizeof *ks);
    if (!ks) return nomem(w);
    w->be_state = ks;
    size_t n = strlen(w->tmp) + sizeof ".weights.h5";
    if (!(ks->h5tmp = malloc(n))) return nomem(w);
    snprintf(ks->h5tmp, n, "%s.weights.h5", w->tmp);
    npuc__tempfiles_track(ks->h5tmp);
    npuc_status st;
    AS_H5(w, ks, st = npuc__h5_writer_begin_at(w, ks->h5tmp, NPUC_H5_KERAS3, npuc__keras_archive_key));
    return st;
}

static npuc_status kw_write(npuc_writer *w, size_t i, const void *data, uint64_t n) {
    kw_state *ks = w->be_state;
    npuc_status st;
    AS_H5(w, ks, st = npuc__h5_writer_backend.write(w, i, data, n));
    return st;
}

/* ------------------------------------------------------------ zip sink */

/* A libzip source writing to fd (the atomic temporary file).  It reports
 * "no such file" when asked for its size, so libzip starts a new archive
 * and never reads. */
typedef struct fdsink {
    int fd;
    zip_int64_t off;
    zip_error_t err;
    npuc_writer *w;   /* for the writeback of what is written (writeback.c) */
    npuc_status wst;  /* its error, with the message in w's context */
} fdsink;

static zip_int64_t sink_cb(void *ud, void *data, zip_uint64_t len, zip_source_cmd_t cmd) {
    fdsink *s = ud;
    switch (cmd) {
    case ZIP_SOURCE_SUPPORTS: return ZIP_SOURCE_SUPPORTS_WRITABLE;
    case ZIP_SOURCE_STAT: zip_error_set(&s->err, ZIP_ER_READ, ENOENT); return -1;
    case ZIP_SOURCE_ERROR: return zip_error_to_data(&s->err, data, len);
    case ZIP_SOURCE_FREE: return 0;
    case ZIP_SOURCE_BEGIN_WRITE:
        if (ftruncate(s->fd, 0) != 0) { zip_error_set(&s->err, ZIP_ER_WRITE, errno); return -1; }
        s->off = 0;
        return 0;
    case ZIP_SOURCE_WRITE: {
        const char *p = data;
        for (zip_uint64_t done = 0; done < len;) {
            ssize_t k = pwrite(s->fd, p + done, (size_t)(len - done), (off_t)(s->off + (zip_int64_t)done));
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) { zip_error_set(&s->err, ZIP_ER_WRITE, k < 0 ? errno : ENOSPC); return -1; }
            done += (zip_uint64_t)k;
        }
        s->off += (zip_int64_t)len;
        if ((s->wst = npuc__writer_wrote(s->w, s->fd, (uint64_t)s->off)) != NPUC_OK) {
            zip_error_set(&s->err, ZIP_ER_WRITE, EIO);
            return -1;
        }
        return (zip_int64_t)len;
    }
    case ZIP_SOURCE_SEEK_WRITE: {
        zip_source_args_seek_t *a = ZIP_SOURCE_GET_ARGS(zip_source_args_seek_t, data, len, &s->err);
        if (!a) return -1;
        off_t end = lseek(s->fd, 0, SEEK_END);
        zip_int64_t base = a->whence == SEEK_SET ? 0 : a->whence == SEEK_CUR ? s->off : (zip_int64_t)end;
        if (end < 0 || a->whence < SEEK_SET || a->whence > SEEK_END || base + a->offset < 0) {
            zip_error_set(&s->err, ZIP_ER_INVAL, 0);
            return -1;
        }
        s->off = base + a->offset;
        return 0;
    }
    case ZIP_SOURCE_TELL_WRITE: return s->off;
    case ZIP_SOURCE_COMMIT_WRITE:   /* the core fsyncs and publishes */
    case ZIP_SOURCE_ROLLBACK_WRITE: /* the core removes the file */
    case ZIP_SOURCE_REMOVE: return 0;
    default: zip_error_set(&s->err, ZIP_ER_OPNOTSUPP, 0); return -1;
    }
}

/* Adds entry name from src (consumed) with method cm and the fixed time. */
static int add_entry(zip_t *za, const char *name, zip_source_t *src, zip_int32_t cm) {
    if (!src) return -1;
    zip_int64_t i = zip_file_add(za, name, src, ZIP_FL_ENC_UTF_8);
    if (i < 0) {
        zip_source_free(src);
        return -1;
    }
    struct tm t = {.tm_year = 80, .tm_mon = 0, .tm_mday = 1};
    return zip_set_file_compression(za, (zip_uint64_t)i, cm, 0) != 0 ||
                   zip_file_set_mtime(za, (zip_uint64_t)i, mktime(&t), 0) != 0
               ? -1
               : 0;
}

static int add_text(zip_t *za, const char *name, const char *v) {
    return add_entry(za, name, zip_source_buffer(za, v, strlen(v), 0), ZIP_CM_DEFLATE);
}

static npuc_status build_zip(npuc_writer *w, kw_state *ks) {
    fdsink s = {.fd = npuc_atomic_file_fd(w->af), .w = w};
    zip_error_init(&s.err);
    zip_error_t e;
    zip_error_init(&e);
    zip_t *za = NULL;
    zip_source_t *src = zip_source_function_create(sink_cb, &s, &e);
    if (src && !(za = zip_open_from_source(src, ZIP_CREATE | ZIP_TRUNCATE, &e))) zip_source_free(src);
    npuc_status st = NPUC_OK;
    const char *md = meta_of(w, NPUC_KERAS_ENTRY_PREFIX NPUC_KERAS_METADATA);
    const char *cfg = meta_of(w, "model_config");
    int bad = !za || (md && add_text(za, NPUC_KERAS_METADATA, md) != 0) ||
              (cfg && add_text(za, NPUC_KERAS_CONFIG, cfg) != 0) ||
              add_entry(za, NPUC_KERAS_WEIGHTS, zip_source_file(za, ks->h5tmp, 0, -1), ZIP_CM_STORE) != 0;
    const size_t pl = sizeof NPUC_KERAS_ENTRY_PREFIX - 1;
    for (size_t i = 0; i < w->nmeta && !bad; i++) {
        const char *k = w->meta_k[i];
        if (strncmp(k, NPUC_KERAS_ENTRY_PREFIX, pl) != 0 || strcmp(k + pl, NPUC_KERAS_METADATA) == 0) continue;
        /* The reader refused unsafe names; metadata from elsewhere is held to the same rule. */
        if (npuc__kzip_bad_name(k + pl, strlen(k + pl))) {
            st = npuc_fail(w->ctx, NPUC_ERR_UNSUPPORTED, "%s: metadata '%s' names no safe archive entry", w->path, k);
            bad = 1;
            break;
        }
        bad = add_text(za, k + pl, w->meta_v[i]) != 0;
    }
    if (za && !bad && zip_close(za) == 0) za = NULL;
    else if (st == NPUC_OK && s.wst != NPUC_OK) st = s.wst;
    else if (st == NPUC_OK) {
        const char *why = za ? zip_strerror(za) : zip_error_strerror(&e);
        st = npuc_fail(w->ctx, NPUC_ERR_IO, "%s: cannot write the archive (libzip: %s)", w->path, why);
    }
    if (za) zip_discard(za);
    zip_error_fini(&e);
    zip_error_fini(&s.err);
    return st;
}

static npuc_status kw_finish(npuc_writer *w) {
    kw_state *ks = w->be_state;
    if (!ks) return npuc_fail(w->ctx, NPUC_ERR_INTERNAL, "%s: finish without begin", w->path);
    npuc_status st;
    AS_H5(w, ks, st = npuc__h5_writer_finish_at(w, ks->h5tmp));
    if (st == NPUC_OK) st = build_zip(w, ks);
    drop_h5tmp(ks);
    free(ks);
    w->be_state = NULL;
    return st;
}

static void kw_abort(npuc_writer *w) {
    kw_state *ks = w->be_state;
    if (!ks) return;
    if (ks->h5) AS_H5(w, ks, npuc__h5_writer_backend.abort(w));
    drop_h5tmp(ks);
    free(ks);
    w->be_state = NULL;
}

const npuc_writer_backend npuc__keras_writer_backend = {kw_begin, kw_write, kw_finish, kw_abort, 0};
