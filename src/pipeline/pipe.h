/*
 * pipe.h - an in-memory safetensors stream between two passes running at
 * the same time (library-private; used by `npuc run`, recipe_run.c).
 *
 * A pipe is handed to the producing pass as its sink (npuc__pipe_sink_open;
 * pass_driver.h): the pass's writer feeds the pipe instead of a file: its
 * declared tensors and metadata become a safetensors header (exactly the one
 * st_writer.c would write), and each payload is queued in memory.  The next
 * pass reads the model npuc__pipe_open returns: the header parsed by the
 * safetensors reader (so it sees what it would see reading the file back),
 * and each payload handed over as it arrives.  The consumer must read every
 * tensor at most once (quantize does: in order, once); a second read is
 * NPUC_ERR_INTERNAL.
 *
 * Flow control: the producer waits while more than `cap` bytes are queued,
 * unless the consumer is waiting for a tensor not yet written (so reading
 * out of order cannot deadlock; it only queues more).  Either side failing
 * wakes the other: the consumer's reads fail once the producer has aborted,
 * the producer's writes fail once the consumer has closed its model early.
 * npuc__pipe_induced tells which failure was the consequence, so the caller
 * reports the cause.
 */
#ifndef NPUC_PIPE_H
#define NPUC_PIPE_H

#include "npuc_internal.h"

typedef struct npuc__pipe npuc__pipe;

/* Creates a pipe for the output called path (named in messages). */
npuc_status npuc__pipe_new(npuc_ctx *ctx, const char *path, uint64_t cap, npuc__pipe **out);
/* The producer's writer on pipe p (an npuc__sink_open_fn, pass_driver.h):
 * the pass writing into the pipe is handed a sink with this and p, so no
 * lookup by path is needed.  A pipe carries safetensors only. */
npuc_status npuc__pipe_sink_open(void *p, npuc_ctx *ctx, const char *path, const npuc_write_opts *write,
                                 npuc_writer **out);
/* Waits for the producer's header and opens the consumer's model.  Fails if
 * the producer ended without writing one. */
npuc_status npuc__pipe_open(npuc_ctx *ctx, npuc__pipe *p, npuc_model **out);
/* Called by whoever ran the producer once it has returned: a producer that
 * did not finish its writer (it failed, perhaps before opening one) counts
 * as failed, and the consumer is woken. */
void npuc__pipe_producer_exit(npuc__pipe *p);
/* The consumer will never read (it failed before opening its model). */
void npuc__pipe_abandon(npuc__pipe *p);
/* 1 when the producer's failure came from the consumer closing early
 * (side 0), or the consumer's from the producer aborting (side 1). */
int npuc__pipe_induced(const npuc__pipe *p, int side);
/* Unregisters and frees; both sides must be done (model closed, producer exited). */
void npuc__pipe_free(npuc__pipe *p);

extern const npuc_writer_backend npuc__pipe_writer_backend;

#endif
