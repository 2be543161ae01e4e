/*
 * npuc/status.h - status codes and the library context.
 *
 * Every npuc function that can fail returns an npuc_status and hands its
 * results back through out-parameters.  The human-readable explanation of a
 * failure ("model.safetensors: tensor 'fc.weight': data_offsets [64,128)
 * exceed the 96-byte buffer") is stored in the npuc_ctx that was passed to the
 * call and read back with npuc_ctx_errmsg().  The message belongs to the
 * context: it stays valid until the next failing call on that context and is
 * never freed by the caller.  The library never prints and never exits.
 *
 * Example (compiled by tests/cli/c_api.sh):
 *     npuc_ctx *ctx;
 *     if (npuc_ctx_new(&ctx) != NPUC_OK) return 1;
 *     npuc_model *m;
 *     npuc_status st = npuc_model_open(ctx, "model.safetensors", NULL, &m);
 *     if (st != NPUC_OK) fprintf(stderr, "error: %s\n", npuc_ctx_errmsg(ctx));
 *
 * A context is not thread-safe: use one per thread that calls into npuc.
 * Pass drivers parallelise internally and report through the caller's context.
 */
#ifndef NPUC_STATUS_H
#define NPUC_STATUS_H

#include "api.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Values are pinned: scripts and bindings may rely on them. */
typedef enum npuc_status {
    NPUC_OK = 0,
    NPUC_ERR_IO = 1,          /* the OS refused a read, write, mmap, rename, fsync */
    NPUC_ERR_FORMAT = 2,      /* a file is malformed or hostile */
    NPUC_ERR_UNSUPPORTED = 3, /* well-formed but outside what npuc handles */
    NPUC_ERR_ARG = 4,         /* a bad parameter, flag or pattern */
    NPUC_ERR_NOMEM = 5,       /* an allocation failed */
    NPUC_ERR_OVERFLOW = 6,    /* a size computation would overflow */
    NPUC_ERR_NOT_FOUND = 7,   /* a named tensor, file or key does not exist */
    NPUC_ERR_VALUE = 8,       /* data values are unusable (NaN/Inf weights, var+eps <= 0) */
    NPUC_ERR_EXISTS = 9,      /* the output exists and overwriting was not allowed */
    NPUC_ERR_NUMERIC = 10,    /* a numerical routine failed (SVD did not converge) */
    NPUC_ERR_INTERNAL = 11,   /* a bug in npuc: please report it */
    NPUC_ERR_GUESS = 12,      /* a decision rests on a guess and the policy is strict */
    NPUC_ERR_GATE = 13        /* the work was done but a quality gate failed: nothing was
                                 published, the summary is kept for the report */
} npuc_status;

/* A static, never-NULL name for a status ("format error", ...). */
NPUC_API const char *npuc_status_str(npuc_status st);

/* True for the statuses that mean "the input or the request is wrong" (the
 * CLI maps these to exit code 2) rather than "the machine failed" (exit 1). */
NPUC_API int npuc_status_is_input_error(npuc_status st);

typedef struct npuc_ctx npuc_ctx;

/* Creates a context. Returns NPUC_ERR_NOMEM if it cannot be allocated. */
NPUC_API npuc_status npuc_ctx_new(npuc_ctx **out);
/* Frees a context; NULL is a no-op. */
NPUC_API void npuc_ctx_free(npuc_ctx *ctx);

/* The message of the last failure on this context, or "" when none.  Owned
 * by ctx: valid until the next call that fails on it, npuc_ctx_clear or
 * npuc_ctx_free; never freed by the caller. */
NPUC_API const char *npuc_ctx_errmsg(const npuc_ctx *ctx);
/* The status of the last failure on this context, or NPUC_OK. */
NPUC_API npuc_status npuc_ctx_errcode(const npuc_ctx *ctx);
/* Warnings the calls made with ctx left (e.g. a GGUF writer keeping a
 * tensor unquantized): how many there were, and the i-th of the first
 * eight (NULL beyond them or for a NULL ctx), owned by ctx until
 * npuc_ctx_free.  npuc_ctx_clear keeps them. */
NPUC_API size_t npuc_ctx_warning_count(const npuc_ctx *ctx);
NPUC_API const char *npuc_ctx_warning(const npuc_ctx *ctx, size_t i);

/* Forgets the last failure. */
NPUC_API void npuc_ctx_clear(npuc_ctx *ctx);

/* Worker threads for pass drivers: 0 (default) means all cores. */
NPUC_API void npuc_ctx_set_threads(npuc_ctx *ctx, int nthreads);
/* The thread count set (0: all cores). */
NPUC_API int npuc_ctx_threads(const npuc_ctx *ctx);

/* How a run treats what the file does not state, and how good its result
 * must be.  The defaults: guesses are shown (summary warnings, info) but
 * not refused; guessed graph edges are listed but not applied; no gates. */
typedef struct npuc_policy {
    int strict;            /* every decision resting on a guess is NPUC_ERR_GUESS,
                              raised before anything is written */
    int accept_guesses;    /* apply graph edges that are guesses (fold-bn pairs,
                              structured-pruning consumers); default: list them only */
    double min_sqnr;       /* gate in dB on the weighted SQNR of the transformed
                              tensors; NaN: off */
    double min_layer_sqnr; /* gate in dB on every transformed tensor's SQNR; NaN: off */
    double max_output_error; /* gate on every tensor's relative output error over its
                                calibration data (record.h out_rel_error); NaN: off */
} npuc_policy;

/* strict 0, accept_guesses 0, all gates NaN. */
NPUC_API npuc_policy npuc_policy_defaults(void);
/* Sets the policy of the runs made with ctx (copied); a new context has the
 * defaults. */
NPUC_API void npuc_ctx_set_policy(npuc_ctx *ctx, const npuc_policy *p);
/* The context's policy; never NULL for a non-NULL ctx. */
NPUC_API const npuc_policy *npuc_ctx_policy(const npuc_ctx *ctx);

/* Decoding budget.  An encoded tensor (an npuc artifact entry) may decode to
 * at most NPUC_DECODE_RATIO times the bytes it is stored in, or to at most
 * the context's memory budget, whichever is larger; anything beyond is
 * refused as a decompression bomb (NPUC_ERR_FORMAT) before any allocation.
 * The budget defaults to NPUC_DECODE_BUDGET_DEFAULT bytes of float32. */
#define NPUC_DECODE_RATIO 256u
#define NPUC_DECODE_BUDGET_DEFAULT (256ull << 20)
/* Sets the memory budget in bytes (0: the default). */
NPUC_API void npuc_ctx_set_max_memory(npuc_ctx *ctx, uint64_t bytes);
/* The budget in force: the value set, or NPUC_DECODE_BUDGET_DEFAULT. */
NPUC_API uint64_t npuc_ctx_max_memory(const npuc_ctx *ctx);

/* Progress inside one large tensor.  fn(user, phase, done, total) reports
 * the bytes of one payload moved so far: phase NPUC_PROGRESS_READ while an
 * input tensor is read, NPUC_PROGRESS_WRITE while an output tensor is
 * written (safetensors, HDF5 and .keras), each payload of at least
 * NPUC_PROGRESS_MIN bytes reported about every NPUC_PROGRESS_STEP bytes
 * (HDF5: whole chunks) and at its end (smaller ones not at all).
 * It is called on the thread doing that read or write with ctx, so a
 * context shared by several threads gets concurrent calls.  fn must not
 * call back into npuc with ctx.  NULL (the default) turns it off. */
#define NPUC_PROGRESS_MIN (64ull << 20)
#define NPUC_PROGRESS_STEP (16ull << 20)
typedef enum npuc_progress_phase { NPUC_PROGRESS_READ = 0, NPUC_PROGRESS_WRITE = 1 } npuc_progress_phase;
typedef void (*npuc_progress_fn)(void *user, npuc_progress_phase phase, uint64_t done, uint64_t total);
/* Sets (fn, user) as ctx's progress function, as above; fn NULL turns it off. */
NPUC_API void npuc_ctx_set_progress(npuc_ctx *ctx, npuc_progress_fn fn, void *user);

/* The compressor's version string, e.g. "0.1.0" (static; build.h has the
 * rest of what the build is). */
NPUC_API const char *npuc_version(void);

#ifdef __cplusplus
}
#endif
#endif
