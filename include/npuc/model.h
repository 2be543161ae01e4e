/*
 * npuc/model.h - reading and writing weight files.
 *
 * An npuc_model is an open weight file: a table of tensors (npuc_tensor_info)
 * in storage order, string metadata, and for Keras files the layer each
 * tensor belongs to.  Opening reads the header and tensor table only; a
 * tensor's bytes are read when asked for (safetensors: straight from an mmap;
 * HDF5: into a buffer the model owns until npuc_model_release).  Peak memory
 * therefore follows the tensors a caller holds at once, not the model.
 *
 *     npuc_model *m;
 *     if (npuc_model_open(ctx, "model.safetensors", NULL, &m) != NPUC_OK) ...
 *     for (size_t i = 0; i < npuc_model_count(m); i++) {
 *         const npuc_tensor_info *t = npuc_model_tensor(m, i);
 *         float *w = malloc(t->numel * sizeof *w);
 *         npuc_model_read_f32(ctx, m, i, w);   // any float dtype -> f32
 *         ...
 *     }
 *     npuc_model_close(m);
 *
 * An npuc_writer writes a new file the same way: declare every tensor first
 * (name, dtype, shape, layer), then hand over each tensor's bytes in declared
 * order.  Bytes go to "<out>.tmp" beside the output; npuc_writer_finish()
 * fsyncs and renames it into place, and any failure or npuc_writer_abort()
 * removes it, so the output path never holds a partial file.
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

typedef enum npuc_format {
    NPUC_FORMAT_AUTO = 0,        /* from the file's magic bytes, else its extension */
    NPUC_FORMAT_SAFETENSORS = 1,
    NPUC_FORMAT_HDF5 = 2
} npuc_format;

/* The kind of HDF5 tree a model came from or is written as. */
typedef enum npuc_h5_style {
    NPUC_H5_PLAIN = 0,   /* any tree: every dataset, its path as its name */
    NPUC_H5_KERAS2 = 1,  /* Keras 2 save_weights: layer_names / weight_names */
    NPUC_H5_KERAS3 = 2   /* Keras 3 .weights.h5: layers/<name>/vars/<i> */
} npuc_h5_style;

/* Guesses a format from a path's extension (.safetensors, .h5/.hdf5/.keras). */
NPUC_API npuc_format npuc_format_from_path(const char *path);
NPUC_API const char *npuc_format_name(npuc_format f);

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

NPUC_API const char *npuc_model_path(const npuc_model *m);
NPUC_API npuc_format npuc_model_format(const npuc_model *m);
NPUC_API npuc_h5_style npuc_model_h5_style(const npuc_model *m); /* PLAIN for safetensors */
/* Size of the file on disk in bytes. */
NPUC_API uint64_t npuc_model_file_size(const npuc_model *m);

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
NPUC_API void npuc_model_meta_at(const npuc_model *m, size_t i, const char **key, const char **value);
/* The value for key, or NULL. */
NPUC_API const char *npuc_model_meta_get(const npuc_model *m, const char *key);

/* Keras layers in layer_names order (empty for non-Keras files). */
NPUC_API size_t npuc_model_group_count(const npuc_model *m);
NPUC_API const char *npuc_model_group(const npuc_model *m, size_t i);

/* Returns the raw little-endian bytes of tensor i (t->nbytes of them) through
 * *data.  The pointer stays valid until npuc_model_release(m, i) or
 * npuc_model_close(m), and may be unaligned: copy or convert before treating
 * it as a typed array (npuc_model_read_f32 does).  Fails on I/O errors and on
 * data HDF5 cannot decode. */
NPUC_API npuc_status npuc_model_data(npuc_ctx *ctx, npuc_model *m, size_t i, const void **data);
/* Drops a buffer npuc_model_data() may have allocated; a no-op for mmapped data. */
NPUC_API void npuc_model_release(npuc_model *m, size_t i);
/* Converts tensor i to float32 into dst (t->numel floats).  Integer and BOOL
 * tensors convert too.  Releases any buffer it had to load. */
NPUC_API npuc_status npuc_model_read_f32(npuc_ctx *ctx, npuc_model *m, size_t i, float *dst);

/* ---------------------------------------------------------------- writer */

typedef struct npuc_writer npuc_writer;

typedef struct npuc_write_opts {
    npuc_format format;          /* AUTO: from the output path's extension */
    int overwrite;               /* 0: an existing output is NPUC_ERR_EXISTS */
    int h5_deflate;              /* HDF5 deflate level 0..9 (default 4); 0 = contiguous */
    npuc_h5_style h5_style;      /* tree to write for HDF5 (default: KERAS2 if any
                                    tensor has a group, else PLAIN) */
    int h5_style_set;            /* 1 if h5_style was chosen explicitly */
} npuc_write_opts;

NPUC_API npuc_write_opts npuc_write_opts_defaults(void);

/* Starts writing path.  opts may be NULL.  Nothing appears at path until
 * npuc_writer_finish() succeeds. */
NPUC_API npuc_status npuc_writer_open(npuc_ctx *ctx, const char *path, const npuc_write_opts *opts,
                             npuc_writer **out);
/* Adds a model-level string metadata entry (before the first write). */
NPUC_API npuc_status npuc_writer_meta(npuc_writer *w, const char *key, const char *value);
/* Declares the next tensor (before the first write).  info->name, dtype, rank,
 * shape, layout and group are used; numel and nbytes are recomputed with
 * overflow checks.  Duplicate names are NPUC_ERR_ARG.  A layout other than
 * NONE that a reader would not guess from the name is recorded in the
 * "npuc.layout" metadata entry; NONE means "no opinion" and is not recorded. */
NPUC_API npuc_status npuc_writer_declare(npuc_writer *w, const npuc_tensor_info *info);
/* Writes the bytes of the next declared tensor (all info->nbytes of them,
 * little-endian).  Tensors are written in declaration order. */
NPUC_API npuc_status npuc_writer_write(npuc_writer *w, const void *data, uint64_t nbytes);
/* Writes every tensor's data, fsyncs, renames into place and frees w. */
NPUC_API npuc_status npuc_writer_finish(npuc_writer *w);
/* Discards everything, removes the temporary file and frees w; NULL is a no-op. */
NPUC_API void npuc_writer_abort(npuc_writer *w);

/* Copies a whole model to path (format from opts or extension), converting
 * float tensors to to_dtype when to_dtype_set is non-zero.  Metadata, layer
 * groups and layouts are kept; layouts that differ from what the target
 * format would guess are recorded in the "npuc.layout" metadata entry. */
NPUC_API npuc_status npuc_model_convert(npuc_ctx *ctx, npuc_model *m, const char *path,
                               const npuc_write_opts *opts, int to_dtype_set, npuc_dtype to_dtype);

#ifdef __cplusplus
}
#endif
#endif
