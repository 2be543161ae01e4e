/*
 * pass_driver.h - the part every pass driver shares (library-private): the
 * summary and its records, the output, the input's metadata, declaring and
 * streaming tensors, the artifact description, the read-ahead helper,
 * progress callbacks, and finishing or aborting the output.  A pass keeps its own plan
 * and its own math; the driver owns what would otherwise be written once per
 * pass and drift.
 *
 * The order is fixed by the writer (declare-then-stream, model.h):
 *
 *     npuc__drive dr = {0};
 *     const npuc__sink sink = {out, &o->write, NULL, NULL};
 *     if ((st = npuc__drive_begin(&dr, ctx, m, &sink, "prune", o->on_tensor, o->user, sum)) != NPUC_OK)
 *         goto fail;
 *     ... plan; every check that must fail before a byte is written ...
 *     if ((st = npuc__drive_open(&dr, NULL, NULL)) != NPUC_OK) goto fail;  // output + metadata
 *     ... npuc__drive_declare() every output tensor ...
 *     for (size_t i = 0; i < n; i++) {
 *         if (untouched) st = npuc__drive_pass_through(&dr, i);
 *         else { ...compute...; st = npuc__drive_write(&dr, bytes, nbytes); }
 *         if (st != NPUC_OK) goto fail;
 *         npuc__drive_done(&dr, i);
 *     }
 * fail:  // the success path ends here too, with st == NPUC_OK
 *     st = npuc__drive_end(&dr, st);
 *     ... the pass's own buffers ...
 *     return st;
 *
 * The output is opened in one place, npuc__drive_open, from the sink the pass
 * was handed; a pass never opens a writer itself.
 */
#ifndef NPUC_PASS_DRIVER_H
#define NPUC_PASS_DRIVER_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "npuc_internal.h"

/* Opens a writer for a sink that is not a plain file (the in-memory pipe of
 * `npuc run`, pipeline/pipe.h): like npuc_writer_open, on state. */
typedef npuc_status (*npuc__sink_open_fn)(void *state, npuc_ctx *ctx, const char *path,
                                          const npuc_write_opts *write, npuc_writer **out);

/* Where a pass's output goes, handed to the pass explicitly (no registry).
 * path NULL: nowhere (fold-bn --dry-run); the driver's output functions then
 * do nothing and succeed.  open NULL: the file at path (npuc_writer_open);
 * else open(state, ...) makes the writer and path only names the output in
 * messages. */
typedef struct npuc__sink {
    const char *path;
    const npuc_write_opts *write; /* may be NULL: the defaults */
    npuc__sink_open_fn open;
    void *state;
} npuc__sink;

/* The progress callback of the pass options (npuc_*_opts.on_tensor). */
typedef void (*npuc__on_tensor_fn)(void *user, size_t index, size_t count, const npuc_tensor_record *r);

/* Decides the fate of one metadata entry of the input while it is copied:
 * sets *value to the value to write (the one given, or a replacement the
 * hook keeps alive until the copy is done) or to NULL to leave the entry out.
 * A status other than NPUC_OK (with its message set) stops the copy. */
typedef npuc_status (*npuc__meta_fn)(void *u, const char *key, const char **value);

struct npuc__readahead;

/* One pass run.  Fields are readable by the pass (w for helpers that take a
 * writer, art for entries); the functions below change them. */
typedef struct npuc__drive {
    npuc_ctx *ctx;
    npuc_model *m;
    npuc__sink sink;
    npuc_summary *sum;
    npuc__on_tensor_fn on_tensor;
    void *user;
    npuc_writer *w;             /* after npuc__drive_open with a sink path; else NULL */
    json_t *art;                /* after npuc__drive_artifact: the new "npuc" description */
    struct npuc__readahead *ra; /* after npuc__drive_readahead, when it started */
} npuc__drive;

/* Starts a pass on m: initialises sum for `pass` with one record per input
 * tensor, filled from the tensor (npuc_record_from_tensor), and remembers the
 * sink and the callback.  Nothing is opened.  NPUC_ERR_NOMEM ("out of
 * memory"); d is then safe to abort. */
npuc_status npuc__drive_begin(npuc__drive *d, npuc_ctx *ctx, npuc_model *m, const npuc__sink *sink,
                              const char *pass, npuc__on_tensor_fn on_tensor, void *user, npuc_summary *sum);
/* The same with nrecords blank records, for a pass whose records do not
 * follow the input tensors one to one (fold-bn: removed and created tensors). */
npuc_status npuc__drive_begin_blank(npuc__drive *d, npuc_ctx *ctx, npuc_model *m, const npuc__sink *sink,
                                    const char *pass, size_t nrecords, npuc__on_tensor_fn on_tensor, void *user,
                                    npuc_summary *sum);

/* Opens the output (the one place a pass's writer is opened: an existing
 * output without overwrite fails here with NPUC_ERR_EXISTS) and copies the
 * input's metadata in file order.  meta NULL: every entry except the
 * artifact description ("npuc", rebuilt by the pass) and "npuc.layout" (the
 * writer records layouts itself); else meta decides each entry.  Without a
 * sink path it does nothing. */
npuc_status npuc__drive_open(npuc__drive *d, npuc__meta_fn meta, void *u);

/* Declares the next output tensor / every input tensor as it is.  No-ops
 * without an output. */
npuc_status npuc__drive_declare(npuc__drive *d, const npuc_tensor_info *info);
npuc_status npuc__drive_declare_inputs(npuc__drive *d);

/* Creates d->art, an empty artifact description the pass adds entries to
 * while it declares.  NPUC_ERR_NOMEM. */
npuc_status npuc__drive_artifact(npuc__drive *d);
/* After the last declaration: stores d->art as the "npuc" metadata entry when
 * it has entries (an artifact), else nothing. */
npuc_status npuc__drive_describe(npuc__drive *d);

/* Starts the read-ahead helper (pipeline/readahead.h) over the tensors with
 * want[i] set (want NULL: all), `ahead` tensors past the current one, when it
 * pays: a core left idle by the pass's threads and enough bytes.
 * NPUC_READAHEAD=0 keeps it off, =1 starts it regardless (tests).  Never
 * fails: read-ahead is only an optimisation.  npuc__drive_end stops it. */
void npuc__drive_readahead(npuc__drive *d, const unsigned char *want, size_t ahead);
/* The pass now works on tensor i (read-ahead position; never backwards). */
void npuc__drive_at(npuc__drive *d, size_t i);

/* Writes the bytes of the next declared tensor.  NPUC_OK without an output. */
npuc_status npuc__drive_write(npuc__drive *d, const void *data, uint64_t nbytes);
/* Copies input tensor i to the output byte for byte (the tensor declared
 * at this position must be tensor i as it is) and releases it; without an
 * output it reads nothing. */
npuc_status npuc__drive_pass_through(npuc__drive *d, size_t i);
/* Record `rec` is complete: calls the progress callback with it and the
 * record count. */
void npuc__drive_done(npuc__drive *d, size_t rec);

/* Ends the run.  st NPUC_OK: stops the read-ahead helper, totals the
 * summary, checks the quality gates of the ctx's policy (pass_gate.h) and
 * finishes the output (fsync, then into place), returning that status.  A
 * failed gate: removes the temporary output and returns NPUC_ERR_GATE with
 * the summary kept (the caller reports it, then frees it).  Any other st, or
 * finishing that fails: stops the helper, removes the temporary output and
 * frees the summary, returning the failure.  Safe after a failed begin and
 * on a zeroed d. */
npuc_status npuc__drive_end(npuc__drive *d, npuc_status st);

/* Never silently wrong (pass_guard.c): call before npuc__drive_open for each
 * input tensor i whose layout the pass relies on; `what` names the use
 * ("per-channel quantization", "structured pruning").  When the layout is
 * not certain and either rests on a guess or puts >= 256 elements on a
 * channel axis of length <= 4, adds a summary warning naming the tensor, the
 * choice and its evidence, the alternative and --layout; under a strict
 * policy (npuc_ctx_policy) fails with NPUC_ERR_GUESS instead.  NPUC_ERR_NOMEM. */
npuc_status npuc__drive_guard(npuc__drive *d, size_t i, const char *what);

/* NPUC_ERR_ARG "<path>: already an npuc artifact (tensor 'X' is encoded);
 * decompress it before <what>" (what NULL: "...; decompress it first") when
 * m carries encoded tensors; "fake_quant" entries (dense already) pass. */
npuc_status npuc__reject_artifact(npuc_ctx *ctx, npuc_model *m, const char *what);

#endif
