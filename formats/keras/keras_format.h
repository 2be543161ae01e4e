/*
 * keras_format.h - Keras 3 .keras archives (library-private): what the
 * archive reader (keras_reader.c), writer (keras_writer.c), checked zip
 * access (keras_zip.c) and the registry row (keras_format.c) share.
 * docs/keras.md says which subset npuc reads and writes.
 *
 * A .keras file is a zip archive (Keras 3 saving_lib) holding:
 *   metadata.json     {"keras_version": ..., "date_saved": ...}
 *   config.json       the serialized model: {"module", "class_name",
 *                     "config": {"layers": [...]}, ...}
 *   model.weights.h5  the weights as a Keras 3 HDF5 tree
 *                     (layers/<name>/vars/<i>)
 *   assets/...        optional files some layers save
 * npuc reads the weights through the contained HDF5 reader (the entry is
 * extracted to a private temporary file first), config.json becomes the
 * model's "model_config" metadata (the same graph evidence a Keras 2
 * model.save file carries as an attribute), and every other text entry is
 * carried as metadata "keras.archive/<entry name>", so a pass writing a
 * .keras output copies it unchanged.
 *
 * The archive is outside input: every entry is checked before anything is
 * extracted (keras_zip.c, limits below, docs/security.md).
 */
#ifndef NPUC_KERAS_FORMAT_H
#define NPUC_KERAS_FORMAT_H

#include <stdint.h>

#include <zip.h>

#include "format_row.h"

/* Limits on an archive (docs/keras.md#limits). */
#define NPUC_KERAS_MAX_ENTRIES 65536u              /* entries in one archive */
#define NPUC_KERAS_MAX_NAME 1024u                  /* bytes of one entry name */
#define NPUC_KERAS_MAX_TEXT (64ull << 20)          /* config.json and carried entries, in all */
#define NPUC_KERAS_MAX_WEIGHTS (256ull << 30)      /* the extracted model.weights.h5 */
#define NPUC_KERAS_MAX_RATIO 1032ull               /* deflate's best ratio: more is a lie */
#define NPUC_KERAS_RATIO_SLACK (64ull << 10)       /* bytes a tiny entry may add beyond it */

#define NPUC_KERAS_WEIGHTS "model.weights.h5"
#define NPUC_KERAS_CONFIG "config.json"
#define NPUC_KERAS_METADATA "metadata.json"
/* The metadata key prefix of carried entries: "keras.archive/metadata.json". */
#define NPUC_KERAS_ENTRY_PREFIX "keras.archive/"

/* ------------------------------------------------------------ checked zip */

/* An archive opened read-only whose every entry passed the checks. */
typedef struct npuc_kzip {
    zip_t *za;
    const char *path; /* the archive, for messages (not owned) */
    uint64_t file_size;
    size_t n;
} npuc_kzip;

/* Opens path as a zip archive and checks every entry before anything is
 * read: at most NPUC_KERAS_MAX_ENTRIES entries; names of 1..MAX_NAME bytes
 * of UTF-8 without control characters, backslashes, a leading '/', empty,
 * "." or ".." components, and unique; stored or deflated, unencrypted;
 * compressed sizes inside the file; a stored entry's size equals its
 * compressed size and a deflated entry's is at most NPUC_KERAS_MAX_RATIO x
 * its compressed size + NPUC_KERAS_RATIO_SLACK.  Failures are
 * NPUC_ERR_FORMAT (NPUC_ERR_UNSUPPORTED for other methods and encryption)
 * with one line naming the archive and the entry. */
npuc_status npuc__kzip_open(npuc_ctx *ctx, const char *path, npuc_kzip *z);
void npuc__kzip_close(npuc_kzip *z);
/* Why the entry name s (len bytes) is refused (above), or NULL when it is fit. */
const char *npuc__kzip_bad_name(const char *s, size_t len);
/* Entry i's name (valid while z is open). */
const char *npuc__kzip_name(const npuc_kzip *z, size_t i);
/* The index of the entry named name, or -1. */
long npuc__kzip_find(const npuc_kzip *z, const char *name);
/* Reads entry i (at most NPUC_KERAS_MAX_TEXT bytes) into a NUL-terminated
 * malloc'd *out; *text is 1 when it is UTF-8 without NUL bytes. */
npuc_status npuc__kzip_read(npuc_ctx *ctx, const npuc_kzip *z, size_t i, char **out, int *text);
/* Extracts entry i (at most NPUC_KERAS_MAX_WEIGHTS bytes, and no more than
 * the free space where fd lives) into fd, checking that exactly the declared
 * bytes come out and their CRC matches. */
npuc_status npuc__kzip_extract(npuc_ctx *ctx, const npuc_kzip *z, size_t i, int fd);

/* ------------------------------------------------------------ reader, writer, row */

npuc_status npuc__keras_open(npuc_ctx *ctx, const char *path, const npuc_open_opts *o, npuc_model **out);
extern const npuc_writer_backend npuc__keras_writer_backend;
/* 1 when metadata key k is stored in the archive rather than in the
 * weights file: "model_config" (config.json) and the carried entries. */
int npuc__keras_archive_key(const char *k);
extern const npuc__format_row npuc__keras_format;
/* The row's sniff: NPUC__SNIFF_PLAUSIBLE for a zip signature at byte 0. */
int npuc__keras_sniff(const char *path);

#endif
