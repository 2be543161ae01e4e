/*
 * writeback.c - writing an output to disk while it is still being computed.
 *
 * npuc fsyncs every output before it publishes it (tempfiles.c).  Left to
 * the end, that fsync finds the whole file dirty in the page cache and the
 * run waits for all of it after the last tensor: on this project's machine
 * 35-65% of a 1 GiB quantization went there.  So every writer tells this
 * module how far it has written (npuc__writeback_wrote, after each write of
 * a region), and
 *   - every NPUC__WB_CHUNK bytes the completed, page-aligned range behind
 *     the write head is handed to the disk with sync_file_range(...,
 *     SYNC_FILE_RANGE_WRITE), which queues the I/O and returns: the disk
 *     writes while later tensors are computed;
 *   - the dirty or in-flight data stays bounded: once more than
 *     NPUC__WB_WINDOW bytes have been started and not waited for, the writer
 *     waits (SYNC_FILE_RANGE_WAIT_BEFORE | WRITE | WAIT_AFTER) until the
 *     range that far behind the write head is written, so a slow disk slows
 *     the producer instead of filling memory.
 * The sizes are measured (bench/bench_writeback.c, the figures in
 * docs/outputs.md#writeback-figures): smaller chunks cost system calls and
 * break the disk's requests up, larger ones leave more for the final
 * fsync; the window keeps a few chunks queued so the disk never idles
 * between them.
 *
 * Durability is unchanged: sync_file_range writes data pages only, no
 * metadata and no disk cache flush, and promises nothing; the fsync before
 * the rename and the directory fsync after it stay where they were.  A
 * range rewritten after its writeback started (an HDF5 header) is dirty
 * again and the final fsync writes it.
 *
 * An error the wait reports (EIO, ENOSPC from a filesystem that allocates
 * at writeback) is the write's error: the kernel reports a writeback error
 * once per open file, so the final fsync might not see it again.  Errors
 * that only say the call does not apply (EINVAL, ESPIPE, ENOSYS) switch the
 * writeback off for the file.
 *
 * Off by default: measured on this project's machine it made the write()
 * calls of a safetensors output slower than the fsync tail it removed
 * (docs/outputs.md#writeback-figures), so it runs only with NPUC_WRITEBACK=1
 * (or "C,W": the chunk and the window in MiB) in the environment, until it
 * is measured better.  Off always where it cannot help: an output on tmpfs
 * or ramfs (no disk; sync_file_range is a no-op there anyway) and a
 * descriptor that is not a regular file (a pipe).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "npuc_internal.h"

#define WB_PAGE ((uint64_t)4096)
#define WB_TMPFS_MAGIC 0x01021994u
#define WB_RAMFS_MAGIC 0x858458f6u

/* The environment's settings: off unless NPUC_WRITEBACK is "1" (the
 * default sizes) or "C,W" (chunk and window in MiB); anything else, "0"
 * included, is off. */
static void wb_settings(int *on, uint64_t *chunk, uint64_t *window) {
    *on = 0;
    *chunk = NPUC__WB_CHUNK;
    *window = NPUC__WB_WINDOW;
    const char *e = getenv("NPUC_WRITEBACK");
    if (!e || !*e) return;
    if (strcmp(e, "1") == 0) {
        *on = 1;
        return;
    }
    char *end;
    unsigned long c = strtoul(e, &end, 10), w = 0;
    if (*end == ',') w = strtoul(end + 1, &end, 10);
    if (*end == 0 && c >= 1 && c <= 4096 && w >= c && w <= 65536) {
        *on = 1;
        *chunk = (uint64_t)c << 20;
        *window = (uint64_t)w << 20;
    }
}

void npuc__writeback_init(npuc__writeback *wb, int fd) {
    memset(wb, 0, sizeof *wb);
    wb->fd = fd;
    wb_settings(&wb->on, &wb->chunk, &wb->window);
    struct stat sb;
    struct statfs fs;
    if (wb->on && (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))) wb->on = 0;
    if (wb->on && fstatfs(fd, &fs) == 0 &&
        ((unsigned)fs.f_type == WB_TMPFS_MAGIC || (unsigned)fs.f_type == WB_RAMFS_MAGIC))
        wb->on = 0;
}

/* sync_file_range over [off, off + len) with flags; 0, or an errno that
 * is the write's error (the others switch wb off). */
static int wb_range(npuc__writeback *wb, uint64_t off, uint64_t len, unsigned flags) {
    for (;;) {
        if (sync_file_range(wb->fd, (off64_t)off, (off64_t)len, flags) == 0) return 0;
        if (errno == EINTR) continue;
        if (errno == EINVAL || errno == ESPIPE || errno == ENOSYS || errno == EOPNOTSUPP) {
            wb->on = 0;
            return 0;
        }
        return errno;
    }
}

npuc_status npuc__writeback_wrote(npuc__writeback *wb, npuc_ctx *ctx, const char *path, uint64_t end) {
    if (!wb->on || end < wb->started + wb->chunk) return NPUC_OK;
    const uint64_t to = end / WB_PAGE * WB_PAGE;
    int e = wb_range(wb, wb->started, to - wb->started, SYNC_FILE_RANGE_WRITE);
    if (e == 0) wb->started = to;
    if (e == 0 && wb->on && wb->started - wb->waited > wb->window) {
        const uint64_t upto = wb->started - wb->window;
        e = wb_range(wb, wb->waited, upto - wb->waited,
                     SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
        if (e == 0) wb->waited = upto;
    }
    if (e == 0) return NPUC_OK;
    wb->on = 0;
    return npuc_fail(ctx, NPUC_ERR_IO, "%s: writing: %s", path, strerror(e));
}

npuc_status npuc__writer_wrote(npuc_writer *w, int fd, uint64_t end) {
    if (!w->wb_set || w->wb.fd != fd) {
        npuc__writeback_init(&w->wb, fd);
        w->wb_set = 1;
    }
    return npuc__writeback_wrote(&w->wb, w->ctx, w->path, end);
}
