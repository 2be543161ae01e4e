/*
 * npuc/model.h - reading and writing weight files.
 *
 * An npuc_model is an open weight file: a table of tensors (npuc_tensor_info)
 * in storage order, string metadata, and for Keras files the layer each
 * tensor belongs to.  Opening reads the header and tensor table only; a
 * tensor's bytes are read when asked for (safetensors: pread(2) into a buffer
 * the model owns until npuc_model_release; HDF5: likewise, through the
 * contained reader).  Peak memory
 * therefore follows the tensors a caller holds at once, not the model.
 *
 * Example (compiled by tests/cli/c_api.sh):
 *     npuc_model *m;
 *     if (npuc_model_open(ctx, "model.safetensors", NULL, &m) != NPUC_OK) return 1;
 *     for (size_t i = 0; i < npuc_model_count(m); i++) {
 *         const npuc_tensor_info *t = npuc_model_tensor(m, i);
 *         float *w = malloc(t->numel * sizeof *w);
 *         if (w && npuc_model_read_f32(ctx, m, i, w) == NPUC_OK)   // any float dtype -> f32
 *             printf("%s: first value %g\n", t->name, t->numel ? w[0] : 0.0f);
 *         free(w);
 *     }
 *     npuc_model_close(m);
 *
 * An npuc_writer writes a new file the same way: declare every tensor first
 * (name, dtype, shape, layer), then hand over each tensor's bytes in declared
 * order.  Bytes go to a temporary file of this run's own beside the output
 * (".<out>.npuc-<pid>-<random>.tmp", see npuc_atomic_file_open);
 * npuc_writer_finish() fsyncs and renames it into place, and any failure or
 * npuc_writer_abort() removes it, so the output path never holds a partial
 * file, and two runs writing the same output never mix their bytes.
 */
#ifndef NPUC_MODEL_H
#define NPUC_MODEL_H

#include "api.h"

#include <stddef.h>
#include <stdint.h>
#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A file format.  Each format is one row of the library's format registry
 * (docs/formats.md#the-format-registry); its id is its row's position, so
 * the values below are pinned and a format added later has an id without a
 * name here: find it with npuc_format_find("name"). */
typedef enum npuc_format {
    NPUC_FORMAT_AUTO = 0,        /* from the file's extension, else its magic bytes */
    NPUC_FORMAT_SAFETENSORS = 1,
    NPUC_FORMAT_HDF5 = 2
} npuc_format;

/* The format a path's extension names (.safetensors/.st; .h5/.hdf5/.keras/
 * .he5), or NPUC_FORMAT_AUTO when none does. */
NPUC_API npuc_format npuc_format_from_path(const char *path);
/* "safetensors", "hdf5", ...; "auto" for NPUC_FORMAT_AUTO and unknown ids. */
NPUC_API const char *npuc_format_name(npuc_format f);
/* The format called name ("hdf5"), or NPUC_FORMAT_AUTO when there is none. */
NPUC_API npuc_format npuc_format_find(const char *name);
/* The i-th file extension (with the dot) of format f, i from 0; NULL past
 * the last, and for a format that is a folder (checkpoint) or an unknown
 * id.  Formats are ids 1, 2, ... while npuc_format_name is not "auto": the
 * CLI's --help lists them so. */
NPUC_API const char *npuc_format_ext(npuc_format f, size_t i);
/* 1 when format f declares the write option key (see npuc_write_opts_set). */
NPUC_API int npuc_format_accepts(npuc_format f, const char *key);

typedef struct npuc_model npuc_model;

typedef struct npuc_open_opts {
    npuc_format format;          /* NPUC_FORMAT_AUTO by default */
    uint64_t max_header_bytes;   /* safetensors header limit; default 100,000,000 */
} npuc_open_opts;

NPUC_API npuc_open_opts npuc_open_opts_defaults(void);

/* Opens a weight file and validates its structure strictly.  opts may be NULL.
 * On success *out owns the model; on failure *out is NULL and the context
 * holds a message naming the file, the tensor and the problem. */
NPUC_API npuc_status npuc_model_open(npuc_ctx *ctx, const char *path, const npuc_open_opts *opts,
                            npuc_model **out);
/* Closes a model and frees everything it owns; NULL is a no-op. */
NPUC_API void npuc_model_close(npuc_model *m);

/* The path m was opened from (owned by m). */
NPUC_API const char *npuc_model_path(const npuc_model *m);
/* The format m was read as (never NPUC_FORMAT_AUTO). */
NPUC_API npuc_format npuc_model_format(const npuc_model *m);
/* How m is stored, as the value of one of its format's write options: for
 * HDF5, "structure" gives "plain", "keras2" or "keras3" (hdf5.h).  Writing
 * with that value reproduces the layout, and npuc_model_convert carries it
 * over to an output in the same format.  NULL when m's format does not
 * describe key.  The string is static. */
NPUC_API const char *npuc_model_format_opt(const npuc_model *m, const char *key);
/* 1 when m's tensors are stored as Keras layers (a Keras 2 or Keras 3 weight
 * tree: its "structure" is not "plain"), so names and layouts follow Keras
 * conventions; 0 otherwise. */
NPUC_API int npuc_model_is_keras(const npuc_model *m);
/* Size of the file on disk in bytes. */
NPUC_API uint64_t npuc_model_file_size(const npuc_model *m);

/* The number of tensors. */
NPUC_API size_t npuc_model_count(const npuc_model *m);
/* The i-th tensor in storage order; NULL when i is out of range. */
NPUC_API const npuc_tensor_info *npuc_model_tensor(const npuc_model *m, size_t i);
/* Index of the tensor with this name; returns 0 and sets *idx, or -1. */
NPUC_API int npuc_model_find(const npuc_model *m, const char *name, size_t *idx);

/* Overrides a tensor's layout.  Fails with NPUC_ERR_ARG when the layout does
 * not fit the tensor's rank. */
NPUC_API npuc_status npuc_model_set_layout(npuc_ctx *ctx, npuc_model *m, size_t i, npuc_layout l);
/* Applies "REGEX=NAME" rules (POSIX extended regex, matched anywhere in the
 * name unless anchored) to every tensor; for each tensor the first rule that
 * matches wins.  A malformed rule, an unknown layout name, a rule that matches
 * no tensor, or a layout that does not fit a matched tensor's rank is an
 * NPUC_ERR_ARG naming the rule. */
NPUC_API npuc_status npuc_model_apply_layout_rules(npuc_ctx *ctx, npuc_model *m, const char *const *rules,
                                          size_t nrules);

/* Model-level string metadata (safetensors __metadata__, HDF5 root string
 * attributes), in file order. */
NPUC_API size_t npuc_model_meta_count(const npuc_model *m);
/* Entry i (< the count): *key and *value are owned by m. */
NPUC_API void npuc_model_meta_at(const npuc_model *m, size_t i, const char **key, const char **value);
/* The value for key, or NULL. */
NPUC_API const char *npuc_model_meta_get(const npuc_model *m, const char *key);

/* Keras layers in layer_names order (empty for non-Keras files); the names
 * are owned by m, NULL for i out of range. */
NPUC_API size_t npuc_model_group_count(const npuc_model *m);
NPUC_API const char *npuc_model_group(const npuc_model *m, size_t i);

/* Returns the raw little-endian bytes of tensor i (t->nbytes of them) through
 * *data.  The pointer stays valid until npuc_model_release(m, i) or
 * npuc_model_close(m), and may be unaligned: copy or convert before treating
 * it as a typed array (npuc_model_read_f32 does).  Fails on I/O errors and on
 * data HDF5 cannot decode. */
NPUC_API npuc_status npuc_model_data(npuc_ctx *ctx, npuc_model *m, size_t i, const void **data);
/* Drops the buffer npuc_model_data() read tensor i into (the model may keep
 * it for reuse); a no-op when tensor i is not loaded. */
NPUC_API void npuc_model_release(npuc_model *m, size_t i);
/* Converts tensor i to float32 into dst (t->numel floats).  Integer and BOOL
 * tensors convert too.  Releases any buffer it had to load.  Errors: I/O
 * (NPUC_ERR_IO), a malformed payload (NPUC_ERR_FORMAT), i out of range
 * (NPUC_ERR_ARG); dst is then undefined. */
NPUC_API npuc_status npuc_model_read_f32(npuc_ctx *ctx, npuc_model *m, size_t i, float *dst);

/* ---------------------------------------------------------------- writer */

typedef struct npuc_writer npuc_writer;

/* Format-specific write options are key/value strings, declared by the
 * formats that accept them (docs/formats.md#write-options): HDF5 takes
 * "deflate" (0..9, default 4; 0 = contiguous storage) and "structure"
 * (plain, keras2 or keras3; default keras2 when any tensor has a layer
 * group, else plain).  The struct holds them inline, so it stays plain data:
 * copy it, assign it, no freeing. */
#define NPUC_WRITE_OPTS_MAX 8        /* options one npuc_write_opts holds */
#define NPUC_WRITE_OPT_KEY_MAX 24    /* bytes of a key, NUL included */
#define NPUC_WRITE_OPT_VALUE_MAX 1024 /* bytes of a value, NUL included (a path:
                                         GGUF's "imatrix") */

typedef struct npuc_write_opt {
    char key[NPUC_WRITE_OPT_KEY_MAX];
    char value[NPUC_WRITE_OPT_VALUE_MAX];
} npuc_write_opt;

typedef struct npuc_write_opts {
    npuc_format format;          /* AUTO: from the output path's extension */
    int overwrite;               /* 0: an existing output is NPUC_ERR_EXISTS */
    unsigned nopt;               /* options set, in opt[0..nopt) */
    npuc_write_opt opt[NPUC_WRITE_OPTS_MAX];
} npuc_write_opts;

NPUC_API npuc_write_opts npuc_write_opts_defaults(void);
/* Sets write option key to value (replacing an earlier value), e.g.
 *
 *     npuc_write_opts o = npuc_write_opts_defaults();
 *     npuc_write_opts_set(ctx, &o, "deflate", "9");
 *
 * A key no format declares, or a value the declaring format refuses
 * ("deflate level 12 is outside 0..9"), is NPUC_ERR_ARG with the message in
 * ctx (which may be NULL), and o is unchanged.  The output's format reads
 * the keys it declares and ignores the others, so the same options serve
 * outputs of any format. */
NPUC_API npuc_status npuc_write_opts_set(npuc_ctx *ctx, npuc_write_opts *o, const char *key,
                                         const char *value);

/* Starts writing path.  opts may be NULL.  Nothing appears at path until
 * npuc_writer_finish() succeeds.  The options are checked against the
 * output format's declarations (NPUC_ERR_ARG for an invalid value or a key
 * no format declares). */
NPUC_API npuc_status npuc_writer_open(npuc_ctx *ctx, const char *path, const npuc_write_opts *opts,
                             npuc_writer **out);
/* Adds (or replaces) a model-level string metadata entry before the first
 * write; key and value are copied.  NPUC_ERR_INTERNAL after the first write
 * (a caller bug), NPUC_ERR_NOMEM. */
NPUC_API npuc_status npuc_writer_meta(npuc_writer *w, const char *key, const char *value);
/* Declares the next tensor (before the first write).  info->name, dtype, rank,
 * shape, layout and group are used; numel and nbytes are recomputed with
 * overflow checks.  Duplicate names are NPUC_ERR_ARG.  A layout other than
 * NONE that a reader would not guess from the name is recorded in the
 * "npuc.layout" metadata entry; NONE means "no opinion" and is not recorded. */
NPUC_API npuc_status npuc_writer_declare(npuc_writer *w, const npuc_tensor_info *info);
/* Writes the bytes of the next declared tensor (all info->nbytes of them,
 * little-endian).  Tensors are written in declaration order.  data is only
 * read during the call.  Errors: NPUC_ERR_INTERNAL for a size that does
 * not match the declaration or a write past the last tensor (caller bugs),
 * NPUC_ERR_IO (a full disk); after a failure only npuc_writer_abort (or
 * finish, which then fails) may follow. */
NPUC_API npuc_status npuc_writer_write(npuc_writer *w, const void *data, uint64_t nbytes);
/* Writes every tensor's data, fsyncs, renames into place and frees w, on
 * success and on failure alike (w must not be used after).  Errors:
 * NPUC_ERR_INTERNAL when a declared tensor was not written or a write
 * failed, NPUC_ERR_IO, NPUC_ERR_EXISTS when the output appeared meanwhile
 * without overwrite; nothing is then left at the path. */
NPUC_API npuc_status npuc_writer_finish(npuc_writer *w);
/* Discards everything, removes the temporary file and frees w; NULL is a no-op. */
NPUC_API void npuc_writer_abort(npuc_writer *w);

/* ---------------------------------------------------------- atomic files */

/* A file that appears at its path whole or not at all: every npuc_writer
 * writes through one, and so can a caller's side files (reports,
 * summaries).  npuc_atomic_file_open() creates a new temporary file
 * ".<base>.npuc-<pid>-<random>.tmp" in path's directory (O_EXCL) and holds
 * an exclusive flock(2) on it until commit or abort; it first removes the
 * temporary files of the same output that runs killed outright (SIGKILL)
 * left behind, recognised by the name and a lock nobody holds.  An existing
 * path is NPUC_ERR_EXISTS unless overwrite is non-zero.
 *
 * npuc_atomic_file_commit() fsyncs the file, moves it to path (overwrite:
 * rename(2), the last run to commit wins; else renameat2 RENAME_NOREPLACE,
 * or link(2) where the filesystem lacks it, so a path that appeared in the
 * meantime is NPUC_ERR_EXISTS and stays untouched), fsyncs the directory
 * and frees f, whatever happens.  npuc_atomic_file_abort() removes the
 * temporary file and frees f; NULL is a no-op.  Write through
 * npuc_atomic_file_fd() (a dup of it for stdio) or reopen the temporary
 * path; do not close the descriptor, which carries the lock. */
typedef struct npuc_atomic_file npuc_atomic_file;

/* *out is the caller's, released by commit or abort.  Errors:
 * NPUC_ERR_EXISTS, NPUC_ERR_ARG (path is a directory), NPUC_ERR_IO. */
NPUC_API npuc_status npuc_atomic_file_open(npuc_ctx *ctx, const char *path, int overwrite,
                                           npuc_atomic_file **out);
/* The temporary file's descriptor (owned by f) and its path (owned by f). */
NPUC_API int npuc_atomic_file_fd(const npuc_atomic_file *f);
NPUC_API const char *npuc_atomic_file_temp(const npuc_atomic_file *f);
/* Errors: NPUC_ERR_IO (fsync, rename), NPUC_ERR_EXISTS; f is freed either way.
 * The message goes to the context f was opened with. */
NPUC_API npuc_status npuc_atomic_file_commit(npuc_atomic_file *f);
NPUC_API void npuc_atomic_file_abort(npuc_atomic_file *f);

/* Removes the temporary file of every atomic file (hence every writer) this
 * process has open.  Async-signal-safe: call it from a SIGINT/SIGTERM/SIGHUP
 * handler before _exit(); the npuc program does.  Relative temporary paths
 * are resolved against the current directory, so a program that changes
 * directory while writing should use absolute output paths. */
NPUC_API void npuc_tempfiles_cleanup(void);

/* Copies a whole model to path (format from opts or extension), converting
 * float tensors to to_dtype when to_dtype_set is non-zero.  Metadata, layer
 * groups and layouts are kept; layouts that differ from what the target
 * format would guess are recorded in the "npuc.layout" metadata entry.  An
 * output in m's own format keeps how m is stored (npuc_model_format_opt,
 * e.g. an HDF5 structure) for every option opts leaves unset.  Errors as
 * npuc_writer_open/_finish's and npuc_model_data's; NPUC_ERR_UNSUPPORTED for
 * a tensor the output format cannot hold.  Nothing is left at path on failure. */
NPUC_API npuc_status npuc_model_convert(npuc_ctx *ctx, npuc_model *m, const char *path,
                               const npuc_write_opts *opts, int to_dtype_set, npuc_dtype to_dtype);

#ifdef __cplusplus
}
#endif
#endif
