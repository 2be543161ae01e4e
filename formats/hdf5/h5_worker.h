/*
 * h5_worker.h - the contained HDF5 reader: npuc reads every HDF5 input in a
 * child process (h5_child.c) so that a crash or hang inside libhdf5 on a
 * hostile file becomes an error naming the file instead of taking the host
 * process down.  The parent side (h5_worker.c) is the model backend; the
 * protocol is h5_proto.h.  docs/hdf5-containment.md has the whole story.
 *
 * Limits (the child's own; the parent enforces the wall time):
 *   CPU   open: NPUC_H5_OPEN_CPU_S + 1 s per 256 MiB of file;
 *         each tensor: NPUC_H5_LOAD_CPU_S + 1 s per 16 MiB of tensor;
 *         at least NPUC_H5_TIMEOUT when set
 *   wall  open: NPUC_H5_OPEN_WALL_S + 1 s per 64 MiB of file;
 *         each tensor: NPUC_H5_LOAD_WALL_S + 1 s per 4 MiB; both replaced
 *         by NPUC_H5_TIMEOUT=SECONDS when set
 *   memory (RLIMIT_AS, not under AddressSanitizer): the address space the
 *         child inherited + max(NPUC_H5_HEADROOM, the context's max-memory)
 *         + twice the tensor being read
 */
#ifndef NPUC_H5_WORKER_H
#define NPUC_H5_WORKER_H

#include <stdint.h>
#include <sys/types.h>

#include "h5_common.h"

#define NPUC_H5_OPEN_CPU_S 1u
#define NPUC_H5_LOAD_CPU_S 10u
#define NPUC_H5_OPEN_WALL_S 30u
#define NPUC_H5_LOAD_WALL_S 60u
#define NPUC_H5_HEADROOM (1ull << 30)
/* The largest model description the parent accepts from the child. */
#define NPUC_H5_MAX_DESCRIPTION (1ull << 30)

/* The child: reads path with the in-process reader (npuc__h5_scan), sends
 * the model description on sock, then serves tensor reads into the shared
 * memory the parent passes until the socket closes.  Never returns; leaves
 * with _exit (no atexit handlers, no stdio flush of the parent's buffers). */
_Noreturn void npuc__h5_child_main(int sock, const char *path, uint64_t headroom, pid_t parent);

/* NPUC_H5_TIMEOUT=SECONDS (1..86400) from the environment, else 0. */
unsigned npuc__h5_timeout_env(void);

/* 1 and *style when m is read by the contained reader, else 0. */
int npuc__h5_worker_style(const npuc_model *m, npuc_h5_style *style);
/* The child's pid for m, or -1 (in-process, or the child is gone): for tests. */
pid_t npuc__h5_worker_pid(const npuc_model *m);

#endif
