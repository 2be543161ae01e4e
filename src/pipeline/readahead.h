/*
 * readahead.h - a helper thread that brings the next tensors of a model into
 * memory while a pass works on the current one (library-private).
 *
 * A pass that walks a model's tensors in order reports where it is with
 * npuc__readahead_at(); the helper calls the backend's prefetch hook
 * (npuc__model_prefetch: for safetensors, readahead(2) of the tensor's byte
 * range into the page cache) on the wanted tensors up to `ahead` positions
 * past it, so that the disk reads of a file not in the page cache happen
 * while the pass computes, and the pass's own pread finds the bytes cached.
 * It changes no result (tests/unit/test_readahead.c sees the pages arrive
 * with mincore(2)).
 *
 * The helper is worth a core only when the pass leaves one idle: with every
 * core computing, it preempts OpenMP workers that spin at barriers (measured
 * slower: docs/quantization.md).  npuc__readahead_start decides that.
 */
#ifndef NPUC_READAHEAD_H
#define NPUC_READAHEAD_H

#include <stddef.h>

#include "npuc_internal.h"

typedef struct npuc__readahead npuc__readahead;

/* Starts a helper over m's tensors whose want[i] is non-zero (n = the
 * model's tensor count; want NULL: every tensor), at most `ahead` tensors past the current one.
 * Returns NULL, starting nothing, when the backend cannot prefetch, when
 * `threads` compute threads leave no core of the machine free or the wanted
 * tensors hold less than NPUC_READAHEAD_MIN bytes (unless force: tests), or
 * on any failure: read-ahead is only ever an optimisation. */
#define NPUC_READAHEAD_MIN ((uint64_t)32 << 20) /* below this, a thread costs more than it saves */
npuc__readahead *npuc__readahead_start(npuc_model *m, const unsigned char *want, size_t ahead,
                                       int threads, int force);

/* The pass is now working on tensor i (calls must not go backwards). */
void npuc__readahead_at(npuc__readahead *ra, size_t i);

/* Lets the helper finish the tensors it may still take (up to `ahead` past
 * the last position given), joins it and frees ra; returns how many tensors
 * it prefetched.  NULL is allowed (returns 0). */
size_t npuc__readahead_stop(npuc__readahead *ra);

#endif
