/*
 * h5_common.h - what the HDF5 reader (h5_reader.c), writer (h5_writer.c) and
 * registry row (h5_format.c) share: their entry points, keeping HDF5 from
 * printing, capturing its error text for npuc messages, the npuc dtype <->
 * HDF5 type mapping, string attributes, and a small string map.
 *
 * HDF5 (1.10, serial build) is not thread-safe and keeps global state: every
 * HDF5 call npuc makes is bracketed by npuc__h5_quiet_begin/end, which hold
 * one process-wide lock (h5_common.c).  Input files are read by a contained
 * worker process by default (h5_worker.c, docs/hdf5-containment.md).
 */
#ifndef NPUC_H5_COMMON_H
#define NPUC_H5_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <hdf5.h>

#include "format_row.h"
#include "npuc/hdf5.h"

/* Limits that bound what a hostile file can make us do.  See docs/hdf5.md. */
#define NPUC_H5_MAX_DEPTH 64              /* group nesting */
#define NPUC_H5_MAX_OBJECTS (1u << 20)    /* links followed in one file */
#define NPUC_H5_MAX_ATTR_BYTES (64u << 20) /* one string attribute's data */
#define NPUC_H5_MAX_LIST (1u << 24)       /* entries in layer_names / weight_names */
#define NPUC_H5_FILL_SLACK (64ull << 20)  /* bytes a dataset may hold beyond its storage */
#define NPUC_H5_MAX_RATIO 1032ull         /* deflate's best compression ratio */

/* ------------------------------------------------------------ entry points */

typedef struct npuc_h5_as npuc_h5_as; /* below */

/* Opens an HDF5 file: in the contained reader (h5_worker.c), or in this
 * process when the environment has NPUC_H5_INPROCESS=1. */
npuc_status npuc__h5_open(npuc_ctx *ctx, const char *path, const npuc_open_opts *o, npuc_model **out);
/* The in-process reader (h5_reader.c): scan builds the tensor table,
 * metadata and groups of path without deciding layouts (the contained
 * reader's child runs it and ships the result); open_inprocess is scan +
 * npuc__model_finish.  read fills buf (tensor i's nbytes) with its data. */
npuc_status npuc__h5_scan(npuc_ctx *ctx, const char *path, npuc_model **out);
npuc_status npuc__h5_open_inprocess(npuc_ctx *ctx, const char *path, const npuc_h5_as *as,
                                    npuc_model **out);
/* Progress while a large dataset is read or written: done of total bytes. */
typedef void (*npuc_h5_progress_fn)(void *user, uint64_t done, uint64_t total);
/* read: as above; with fn non-NULL a tensor of at least NPUC_PROGRESS_MIN
 * bytes is read in pieces (npuc__h5_xfer_slabs) and fn(user, ...) called
 * after each. */
npuc_status npuc__h5_read(npuc_ctx *ctx, npuc_model *m, size_t i, void *buf, npuc_h5_progress_fn fn,
                          void *user);
/* How the .keras reader (formats/keras/) has an HDF5 file it extracted
 * opened: the model is named shown (the archive, for every later message)
 * and carries the metadata meta_k[i] = meta_v[i] (config.json as
 * model_config, ...), set before layouts and roles are decided; an entry
 * replaces a root attribute of the same name. */
struct npuc_h5_as {
    const char *shown;
    uint64_t file_size; /* the size the model reports (the archive's); 0 keeps the file's */
    const char *const *meta_k, *const *meta_v;
    size_t nmeta;
};
npuc_status npuc__h5_open_as(npuc_ctx *ctx, const char *path, const npuc_h5_as *as, npuc_model **out);
/* Applies as (may be NULL) to m; both open paths call it before
 * npuc__model_finish. */
npuc_status npuc__h5_adopt(npuc_ctx *ctx, npuc_model *m, const npuc_h5_as *as);
/* 1 when a model read from a tree of this style is read with Keras layout
 * rules (not when its "format" metadata says "pt"). */
int npuc__h5_keras_rules(const npuc_model *m, npuc_h5_style style);
/* The row's describe hook (h5_reader.c): "structure" -> the tree m was read
 * from ("plain", "keras2", "keras3"). */
const char *npuc__h5_describe(const npuc_model *m, const char *key);
/* The writer (h5_writer.c); it reads the options "deflate" and "structure"
 * (h5_format.c declares them). */
extern const npuc_writer_backend npuc__h5_writer_backend;
/* The writer's begin and finish on a file of the caller's (the .keras
 * writer builds its model.weights.h5 this way, formats/keras/): begin
 * creates file with the given tree and w's "deflate" option, writing every
 * metadata entry as a root attribute except those skip_meta (may be NULL)
 * returns 1 for; finish completes and fsyncs it.  w->be_state holds the HDF5
 * writer's state in between (write and abort are the backend's own). */
npuc_status npuc__h5_writer_begin_at(npuc_writer *w, const char *file, npuc_h5_style style,
                                     int (*skip_meta)(const char *key));
npuc_status npuc__h5_writer_finish_at(npuc_writer *w, const char *file);
/* The tree w writes: its "structure" option as an npuc_h5_style. */
npuc_h5_style npuc__h5_writer_style(const npuc_writer *w);
/* The registry row (h5_format.c). */
extern const npuc__format_row npuc__h5_format;

/* ------------------------------------------------------------ quiet */

/* HDF5 prints its error stack to stderr by default; a library must not.
 * Every HDF5 call is bracketed with quiet_begin/end on a caller-owned q:
 * begin takes the process-wide HDF5 lock (recursive, so calls nest), saves
 * the application's error handler in q and installs none; end restores it
 * and releases the lock. */
typedef struct npuc_h5_quiet {
    H5E_auto2_t func;
    void *data;
    int saved;
} npuc_h5_quiet;
void npuc__h5_quiet_begin(npuc_h5_quiet *q);
void npuc__h5_quiet_end(npuc_h5_quiet *q);

/* fork() with the HDF5 lock held, so the child (0 returned) holds a
 * consistent copy of the library; the child gets a fresh lock.  -1 on
 * failure (errno set). */
pid_t npuc__h5_fork(void);

/* Copies the most specific message of HDF5's current error stack into buf
 * ("inflate() failed"), or "unknown HDF5 error".  Call it right after the
 * failing HDF5 call: the next API call clears the stack. */
void npuc__h5_errtext(char *buf, size_t n);

/* ------------------------------------------------------------ pieces */

/* Reads (write 0) or writes (write 1) all of dataset d, t's data, between
 * buf and the file with memory type mtype, the caller holding the HDF5
 * lock.  Without fn, or for a tensor under NPUC_PROGRESS_MIN bytes, one
 * H5Dread/H5Dwrite; else pieces of about NPUC_PROGRESS_STEP bytes along the
 * first dimension longer than 1, whole chunks of a chunked dataset, with
 * fn(user, bytes done, t->nbytes) after each (h5_slabs.c).  The file's
 * bytes and buf's are those of the single call.  0, or -1 with HDF5's
 * message in err (errn bytes). */
int npuc__h5_xfer_slabs(hid_t d, hid_t mtype, const npuc_tensor_info *t, void *buf, int write,
                        npuc_h5_progress_fn fn, void *user, char *err, size_t errn);

/* ------------------------------------------------------------ types */

/* A new HDF5 type for dt as the writer stores it (caller closes it):
 * IEEE F64/F32 LE, float16 as h5py spells it, bfloat16 and the two OCP fp8
 * formats as custom little-endian floats, STD integers LE, BOOL as h5py's
 * enum {FALSE=0, TRUE=1} over int8.  H5I_INVALID_HID on failure. */
hid_t npuc__h5_type_create(npuc_dtype dt);

/* The type Keras 3 stores for dt: bfloat16 as a 2-byte opaque type (the
 * writer adds the dataset attribute dtype = "bfloat16", as Keras does), every
 * other dtype as npuc__h5_type_create.  H5I_INVALID_HID on failure. */
hid_t npuc__h5_type_create_keras3(npuc_dtype dt);

/* Why a stored type has no npuc dtype. */
typedef enum npuc_h5_typecheck {
    NPUC_H5_TYPE_OK = 0,
    NPUC_H5_TYPE_UNSUPPORTED, /* a well-formed type npuc does not handle */
    NPUC_H5_TYPE_MISMATCH,    /* an npuc_dtype attribute that contradicts the type */
    NPUC_H5_TYPE_ERROR        /* HDF5 could not describe the type */
} npuc_h5_typecheck;

/* Maps a stored type to an npuc dtype.  hint is the dataset's `npuc_dtype`
 * attribute (a safetensors dtype name) or NULL; when given it decides between
 * types HDF5 cannot tell apart, and must agree with the type's class, size
 * and signedness.  A 2-byte opaque type is BF16 when the hint says so (the
 * reader turns Keras 3's dtype = "bfloat16" attribute into that hint).  why
 * (n bytes) receives a short description on failure. */
npuc_h5_typecheck npuc__h5_type_classify(hid_t ftype, const char *hint, npuc_dtype *dt,
                                         char *why, size_t n);

/* The memory type to read a dataset of type ftype into raw little-endian
 * bytes of dtype dt (caller closes it).  Floats keep their own fields with
 * the byte order set to LE, so reading is a byte copy or byte swap, never a
 * numeric conversion; integers read as the STD LE type of the same size.
 * H5I_INVALID_HID on failure. */
hid_t npuc__h5_memtype(hid_t ftype, npuc_dtype dt);

/* ------------------------------------------------------------ strings */

typedef struct npuc_h5_strlist {
    char **v;
    size_t n, cap;
} npuc_h5_strlist;

void npuc__h5_strlist_free(npuc_h5_strlist *l);
/* Appends a copy of the first len bytes of s; -1 on allocation failure. */
int npuc__h5_strlist_push(npuc_h5_strlist *l, const char *s, size_t len);

/* Results of reading string attributes. */
typedef enum npuc_h5_attr {
    NPUC_H5_ATTR_OK = 0,
    NPUC_H5_ATTR_ABSENT,   /* no such attribute */
    NPUC_H5_ATTR_WRONG,    /* not a string, or not the expected shape */
    NPUC_H5_ATTR_TOOBIG,   /* more than NPUC_H5_MAX_ATTR_BYTES / NPUC_H5_MAX_LIST */
    NPUC_H5_ATTR_NOMEM,
    NPUC_H5_ATTR_ERROR     /* HDF5 failed to read it */
} npuc_h5_attr;

/* Reads attribute name of obj as one string: a scalar fixed- or
 * variable-length string.  *out is malloc'd (strings stop at the first NUL;
 * space padding is trimmed). */
npuc_h5_attr npuc__h5_attr_string(hid_t obj, const char *name, char **out);
/* Same for an already open attribute. */
npuc_h5_attr npuc__h5_attr_read_string(hid_t attr, char **out);
/* Reads attribute name of obj as a list: a rank-1 array of fixed- or
 * variable-length strings, appended to out.  An empty array of any type is
 * an empty list (Keras stores an empty weight list as float64[0]). */
npuc_h5_attr npuc__h5_attr_strlist(hid_t obj, const char *name, npuc_h5_strlist *out);

/* Writes a scalar variable-length UTF-8 string attribute. -1 on failure. */
int npuc__h5_write_str_attr(hid_t obj, const char *name, const char *value);
/* Writes a rank-1 fixed-length, NUL-padded string array attribute, as h5py
 * stores a numpy 'S' array (Keras' layer_names / weight_names). */
int npuc__h5_write_str_array_attr(hid_t obj, const char *name, const char *const *v, size_t n);

#endif
