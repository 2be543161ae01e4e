/*
 * npuc_internal.h - what the library's own modules share and users never see:
 * the context and model structs, the error setter, overflow-checked
 * arithmetic, and the interface a file-format backend implements.
 *
 * Format backends (formats/safetensors, formats/hdf5) fill an npuc_model
 * through the npuc__model_* builders and provide an npuc_backend for loading
 * payloads; writers provide an npuc_writer_backend.  The core reaches them
 * only through the format registry (format_row.h).  Nothing here is exported.
 */
#ifndef NPUC_INTERNAL_H
#define NPUC_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <regex.h>
#include <stdint.h>

#include "npuc/npuc.h"

#if defined(__GNUC__)
#define NPUC_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define NPUC_PRINTF(a, b)
#endif

#define NPUC_MSG_MAX 1024
#define NPUC_CTX_WARN_MAX 8

struct npuc_ctx {
    npuc_status code;
    int nthreads;
    npuc_policy policy;
    uint64_t max_memory; /* 0: NPUC_DECODE_BUDGET_DEFAULT */
    char msg[NPUC_MSG_MAX];
    /* Warnings a library call left for the caller (npuc__ctx_warn): the
     * first NPUC_CTX_WARN_MAX are kept, nwarn counts them all. */
    char warn[NPUC_CTX_WARN_MAX][NPUC_MSG_MAX];
    size_t nwarn;
    npuc_progress_fn progress; /* npuc_ctx_set_progress */
    void *progress_user;
};

/* Calls ctx's progress function, if any, for a payload of total bytes
 * (none below NPUC_PROGRESS_MIN). */
static inline void npuc__progress(npuc_ctx *ctx, npuc_progress_phase ph, uint64_t done, uint64_t total) {
    if (ctx && ctx->progress && total >= NPUC_PROGRESS_MIN) ctx->progress(ctx->progress_user, ph, done, total);
}

/* Records a one-line warning on ctx (NULL: ignored) for the caller to show
 * (npuc_ctx_warning); a writer's note such as a tensor kept unquantized. */
void npuc__ctx_warn(npuc_ctx *ctx, const char *fmt, ...) NPUC_PRINTF(2, 3);

/* Records a failure on ctx (ctx may be NULL) and returns st, so callers write
 * `return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: ...", path);`. */
npuc_status npuc_fail(npuc_ctx *ctx, npuc_status st, const char *fmt, ...) NPUC_PRINTF(3, 4);
npuc_status npuc_vfail(npuc_ctx *ctx, npuc_status st, const char *fmt, va_list ap);

/* Overflow-checked size arithmetic: return 1 on overflow, else 0 and *r. */
static inline int npuc_mul_overflow(uint64_t a, uint64_t b, uint64_t *r) {
    return __builtin_mul_overflow(a, b, r);
}
static inline int npuc_add_overflow(uint64_t a, uint64_t b, uint64_t *r) {
    return __builtin_add_overflow(a, b, r);
}

/* numel and nbytes of a shape; 0 on success, -1 on overflow or a negative dim. */
int npuc__shape_sizes(npuc_dtype dt, int rank, const int64_t *shape, uint64_t *numel,
                      uint64_t *nbytes);

/* Duplicates a string (NULL -> NULL); NULL on allocation failure of a non-NULL s. */
char *npuc__strdup(const char *s);
/* Makes room for `need` elements of `elem` bytes in the array *p of
 * capacity *cap (doubling; new elements zeroed): 0, or -1 when out of
 * memory or the size overflows (*p and *cap unchanged). */
int npuc__grow(void **p, size_t *cap, size_t need, size_t elem);
/* The layout the other convention family (PyTorch/ONNX vs Keras/TF) would
 * give the same tensor: OI<->IO, OIHW/IOHW->HWIO, HWIO/HWIM->OIHW; NONE for
 * the rest.  What a doubtful layout is checked against (pass_guard.c,
 * graph_consistency.c). */
npuc_layout npuc__layout_other_family(npuc_layout l);

/* regcomp(re, pat, REG_EXTENDED | REG_NOSUB) for a pattern from a user or a
 * file, refused with REG_ESIZE ("Regular expression too big") when it is
 * longer than 1024 bytes or would expand past about 20000 nodes (counted
 * repetition multiplies: regex_bound.c), so compiling stays under a few MB. */
int npuc__regcomp(regex_t *re, const char *pat);

/* 1 if the n bytes at s are valid UTF-8 (no overlongs, no surrogates), else 0. */
int npuc__utf8_valid(const char *s, size_t n);

/* ---------------------------------------------------------------- models */

typedef struct npuc_backend {
    /* Loads tensor i.  Either points *data into memory the backend keeps
     * (owned = 0) or allocates it with malloc (owned = 1). */
    npuc_status (*load)(npuc_ctx *ctx, npuc_model *m, size_t i, void **data, int *owned);
    void (*close)(npuc_model *m);
    /* Optional: tensor i's payload (loaded with owned = 0) is no longer
     * used (npuc_model_release); NULL when nothing is to be done. */
    void (*release)(npuc_model *m, size_t i, void *data);
    /* Optional: brings tensor i's bytes into memory ahead of its load (a
     * hint; errors are ignored).  May run on another thread while the model
     * is in use, so it must touch no state that loading changes.  NULL when
     * the backend has no such thing. */
    void (*prefetch)(npuc_model *m, size_t i);
    /* Optional: reads bytes [off, off + n) of tensor i's payload, as stored,
     * into dst (the caller's memory; nothing is loaded or kept).  Callable
     * from several threads at once on disjoint ranges (with ctx NULL there:
     * npuc_fail then only returns the status).  NULL when the backend cannot. */
    npuc_status (*read_range)(npuc_ctx *ctx, npuc_model *m, size_t i, uint64_t off, uint64_t n, void *dst);
} npuc_backend;

struct npuc_model {
    char *path;
    npuc_format format;
    uint64_t file_size;

    npuc_tensor_info *t; /* tensors in storage order */
    uint64_t *offset;    /* backend use: byte offset of each payload */
    char **src;          /* backend use: source path (HDF5 dataset path) */
    void **buf;          /* loaded payloads */
    unsigned char *owned;
    size_t n, cap;

    size_t *hash; /* open-addressing name index: slot -> tensor index + 1 */
    size_t hcap;

    char **meta_k, **meta_v;
    size_t nmeta, capmeta;

    char **groups;
    size_t ngroups, capgroups;

    char **evidence; /* distinct evidence phrases the tensor infos point to */
    size_t nevidence, capevidence;

    const npuc_backend *be;
    void *be_state;

    /* The network graph (src/graph/graph_net.h), or NULL; freed on close
     * through graph_free, so core needs no graph code. */
    void *graph;
    void (*graph_free)(void *graph);
};

npuc_model *npuc__model_new(const char *path, npuc_format fmt);
/* The backend's prefetch hook for tensor i; returns 0 (doing nothing) when
 * the backend has none or i is out of range. */
int npuc__model_can_prefetch(const npuc_model *m);
void npuc__model_prefetch(npuc_model *m, size_t i);
/* The backend's read_range hook (npuc_backend): 1 if the model has one.
 * npuc__model_read_range reads bytes [off, off + n) of tensor i's payload
 * into dst (NPUC_ERR_ARG for a range outside it or a model without the
 * hook); thread-safe for disjoint ranges with ctx NULL. */
int npuc__model_can_read_range(const npuc_model *m);
npuc_status npuc__model_read_range(npuc_ctx *ctx, npuc_model *m, size_t i, uint64_t off, uint64_t n, void *dst);
/* Appends a tensor; copies name (and group when non-NULL).  Checks rank and
 * shape, computes numel/nbytes with overflow checks. */
npuc_status npuc__model_add(npuc_ctx *ctx, npuc_model *m, const char *name, npuc_dtype dt,
                            int rank, const int64_t *shape, const char *group, size_t *idx);
npuc_status npuc__model_add_meta(npuc_ctx *ctx, npuc_model *m, const char *k, const char *v);
npuc_status npuc__model_add_group(npuc_ctx *ctx, npuc_model *m, const char *g);
/* Builds the name index (rejecting duplicate names), decides roles and
 * layouts from evidence (layout_rules.h: keras != 0 for a Keras tree read
 * with Keras rules, plus the "format" and "model_config" metadata), then
 * applies the "npuc.layout" metadata entry if present. */
npuc_status npuc__model_finish(npuc_ctx *ctx, npuc_model *m, int keras);
/* Sets tensor i's role and layout as a graph the file states decides them
 * (confidence certain, evidence why): the hook by which a format's
 * read_graph (format_row.h) makes the consuming op's layout win over the
 * name/rank rules.  NPUC_ERR_ARG for a layout that does not fit the rank. */
npuc_status npuc__model_state_layout(npuc_ctx *ctx, npuc_model *m, size_t i, npuc_role role, npuc_layout l,
                                     const char *why);
/* Asks every format row with a read_graph hook (format_row.h) for m's
 * graph; NPUC_ERR_NOT_FOUND when none has one for m. */
npuc_status npuc__format_read_graph(npuc_ctx *ctx, npuc_model *m);

/* ---------------------------------------------------------------- writers */

typedef struct npuc_writer_backend {
    /* Called once, after every tensor is declared, before the first write. */
    npuc_status (*begin)(npuc_writer *w);
    /* Writes the bytes of tensor i (its full nbytes). */
    npuc_status (*write)(npuc_writer *w, size_t i, const void *data, uint64_t n);
    /* Completes and closes the temporary file, fsyncing it. */
    npuc_status (*finish)(npuc_writer *w);
    /* Releases backend state after a failure; the core removes the file. */
    void (*abort)(npuc_writer *w);
    /* 1: no file is written (pipe.c), so the core neither renames nor removes one. */
    int no_file;
} npuc_writer_backend;

/* Adds path, a file the caller creates under a name of its own (a recipe's
 * step file), to the files npuc_tempfiles_cleanup() removes on a signal;
 * npuc__tempfiles_untrack(path) takes it out again, once the file is gone
 * or published.  track returns -1 (and the file is not covered) when the
 * fixed table is full.  Both are in tempfiles.c. */
int npuc__tempfiles_track(const char *path);
/* Removes the temporary files of path that killed runs left (the name
 * pattern of npuc_atomic_file_open and a lock nobody holds), as opening a
 * new one does; for callers that may not write path at all (batch
 * --resume skipping a complete output a run was killed publishing). */
npuc_status npuc__tempfiles_sweep(npuc_ctx *ctx, const char *path);
void npuc__tempfiles_untrack(const char *path);
/* npuc_atomic_file_open without its look at path: a temporary file that
 * only anchors a run's other files beside path (recipe_files.c), also when
 * path is, or is to become, a directory (a checkpoint output); the caller
 * judges an existing path. */
npuc_status npuc__atomic_file_open_anchor(npuc_ctx *ctx, const char *path, npuc_atomic_file **out);
/* Removes the entries directly in directory path (files; a subdirectory
 * stays and so does path) and then path; 0 when path is gone. */
int npuc__remove_dir1(const char *path);

/* Writing an output back to disk while it is written (writeback.c): a
 * writer calls npuc__writeback_init once it has the file's descriptor,
 * npuc__writeback_wrote(wb, ctx, path, end) after each write, end being the
 * offset up to which the file now holds its bytes (the write head), and
 * npuc__writeback_end before its own final fsync and before closing the
 * descriptor, on every path (success or not).  Once NPUC__WB_CHUNK bytes
 * are written, a helper thread makes the file durable so far with
 * fdatasync every NPUC__WB_CHUNK bytes while the writer goes on; the writer
 * waits when more than NPUC__WB_WINDOW bytes are not yet durable.  An I/O
 * error the helper meets is returned by the next npuc__writeback_wrote
 * (NPUC_ERR_IO naming path) and by npuc__writeback_end (its errno).  The
 * final fsync stays the writer's.  On by default; off with
 * NPUC_WRITEBACK=0, and always on tmpfs and for a pipe; NPUC_WRITEBACK=C,W
 * sets the chunk and the window in MiB.  npuc__writer_wrote is the same
 * with the state kept in w (one output file per writer; a new fd starts it
 * anew), ended by the core writer before the format's finish or abort. */
#define NPUC__WB_CHUNK ((uint64_t)48 << 20)
#define NPUC__WB_WINDOW ((uint64_t)144 << 20)
typedef struct npuc__writeback {
    int fd, on;
    uint64_t chunk, window;
    uint64_t end;    /* the write head last reported */
    uint64_t synced; /* [0, synced) made durable by the helper */
    int err;         /* the helper's fdatasync errno, or 0 */
    int running, stop, quit; /* helper started; asked to stop; it has stopped */
    pthread_t thr;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} npuc__writeback;
void npuc__writeback_init(npuc__writeback *wb, int fd);
npuc_status npuc__writeback_wrote(npuc__writeback *wb, npuc_ctx *ctx, const char *path, uint64_t end);
int npuc__writeback_end(npuc__writeback *wb);
npuc_status npuc__writer_wrote(npuc_writer *w, int fd, uint64_t end);
npuc_status npuc__writer_wb_end(npuc_writer *w);

/* npuc_writer_open with a backend of the caller's instead of the format's
 * (be NULL: the format's, a file at path).  A caller's backend writes no
 * file (no_file), so there is no existing-output check; path names the
 * output in messages.  `npuc run` hands its in-memory pipe to a pass this
 * way (pipeline/pipe.c), through the pass's sink. */
npuc_status npuc__writer_open_be(npuc_ctx *ctx, const char *path, const npuc_write_opts *opts,
                                 const npuc_writer_backend *be, void *be_state, npuc_writer **out);

struct npuc_writer {
    npuc_ctx *ctx;
    char *path, *tmp;
    npuc_write_opts opts; /* key/value options: read them with npuc__writer_opt (format_row.h) */
    npuc_format format;
    const struct npuc__format_row *row; /* the output format's registry row */

    npuc_tensor_info *t; /* declared tensors (names, groups owned) */
    size_t n, cap, next;
    size_t *hash;
    size_t hcap;

    char **meta_k, **meta_v;
    size_t nmeta, capmeta;

    int begun, failed;
    const npuc_writer_backend *be;
    void *be_state;
    npuc_atomic_file *af; /* the output's temporary file (tempfiles.c); NULL before begin */
    npuc__writeback wb;   /* npuc__writer_wrote's state, once wb_set */
    int wb_set;
};

/* The safetensors header st_writer.c writes for w's declared tensors and
 * metadata: 8-byte length + padded JSON, malloc'd in *out. */
npuc_status npuc__st_header(npuc_writer *w, char **out, size_t *len);
/* A model from such a header alone (file_size = header + payload bytes),
 * with the given backend loading payloads; on failure be_state is untouched. */
npuc_status npuc__st_open_header(npuc_ctx *ctx, const char *path, const void *header, uint64_t file_size,
                                 const npuc_backend *be, void *be_state, npuc_model **out);


#endif
