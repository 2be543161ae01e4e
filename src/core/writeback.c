/*
 * writeback.c - making an output durable while it is still being computed.
 *
 * npuc fsyncs every output before it publishes it (tempfiles.c).  Left to
 * the end, that fsync finds the whole file not yet durable and the run
 * waits for all of it after the last tensor.  Measured on this project's
 * machine (a virtual disk with a write-back cache, docs/outputs.md#writeback-
 * figures), the wait is not the copy to the disk (256 MiB reach the device
 * in 0.05 s) but the cache flush the fsync sends, which makes the host
 * store everything written so far: 0.13 s of the 0.17 s a 256 MiB fsync
 * takes.  Starting the writeback early (sync_file_range, issue 33's first
 * version) moves only the copy; the flush stays in the tail.  So each
 * output file gets a helper thread that calls fdatasync every
 * NPUC__WB_CHUNK bytes written, while the writer goes on computing:
 *   - the writer reports its write head (npuc__writeback_wrote); once a
 *     chunk has been written since the last fdatasync began, it wakes the
 *     helper, which fdatasyncs the file as it is then (data written after
 *     the call started may or may not be covered; the next call or the
 *     final fsync covers it);
 *   - the data not yet durable stays bounded: once more than NPUC__WB_WINDOW
 *     bytes are, the writer waits for the helper, so a slow disk slows the
 *     producer instead of filling memory with dirty pages;
 *   - npuc__writeback_end stops the helper (after the fdatasync it is in,
 *     if any) before the writer's own fsync.
 * The sizes are measured (bench/bench_writeback.c, docs/outputs.md): every
 * fdatasync costs a cache flush and makes the writer's next write() from a
 * page it allocated wait for the inode, so small chunks cost time; large
 * ones leave more for the final fsync.
 *
 * Durability is unchanged: the fsync before the rename and the directory
 * fsync after it stay where they were and are what makes the output
 * durable; the early ones only leave them less to do.  The temporary file
 * is not published until then, so nothing partial is ever visible.
 *
 * An error an early fdatasync reports (EIO, ENOSPC from a filesystem that
 * allocates at writeback) is the output's error: the kernel reports a
 * writeback error once per open file, so the final fsync might not see it
 * again.  The writer gets it from its next npuc__writeback_wrote and from
 * npuc__writeback_end.  EINVAL (a descriptor that cannot be synced) stops
 * the helper quietly.
 *
 * On by default; NPUC_WRITEBACK=0 in the environment turns it off,
 * NPUC_WRITEBACK=C,W sets the chunk and the window in MiB.  Off always
 * where it cannot help: an output on tmpfs or ramfs (no disk) and a
 * descriptor that is not a regular file (a pipe).  No thread is started
 * for an output smaller than a chunk.
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

#define WB_TMPFS_MAGIC 0x01021994u
#define WB_RAMFS_MAGIC 0x858458f6u

/* The environment's settings: on with the default sizes when
 * NPUC_WRITEBACK is unset, empty or "1"; "C,W" sets the chunk and the
 * window in MiB (1 <= C <= W, C <= 4096, W <= 65536); anything else, "0"
 * included, is off. */
static void wb_settings(int *on, uint64_t *chunk, uint64_t *window) {
    *on = 1;
    *chunk = NPUC__WB_CHUNK;
    *window = NPUC__WB_WINDOW;
    const char *e = getenv("NPUC_WRITEBACK");
    if (!e || !*e || strcmp(e, "1") == 0) return;
    *on = 0;
    char *end;
    unsigned long c = strtoul(e, &end, 10), w = 0;
    if (end == e || *end != ',') return;
    w = strtoul(end + 1, &end, 10);
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

/* The helper: fdatasync whenever a chunk has been written since the last
 * one began, until asked to stop or an error. */
static void *wb_main(void *arg) {
    npuc__writeback *wb = arg;
    pthread_mutex_lock(&wb->mu);
    for (;;) {
        while (!wb->stop && wb->end - wb->synced < wb->chunk) pthread_cond_wait(&wb->cv, &wb->mu);
        if (wb->stop) break;
        const uint64_t to = wb->end;
        pthread_mutex_unlock(&wb->mu);
        int e = 0;
        while (fdatasync(wb->fd) != 0)
            if (errno != EINTR) {
                e = errno;
                break;
            }
        pthread_mutex_lock(&wb->mu);
        if (e) {
            if (e != EINVAL && e != EROFS && e != ENOSYS && e != ENOTSUP) wb->err = e;
            break;
        }
        wb->synced = to;
        pthread_cond_broadcast(&wb->cv);
    }
    wb->quit = 1;
    pthread_cond_broadcast(&wb->cv);
    pthread_mutex_unlock(&wb->mu);
    return NULL;
}

static int wb_start(npuc__writeback *wb) {
    if (pthread_mutex_init(&wb->mu, NULL) != 0) return -1;
    if (pthread_cond_init(&wb->cv, NULL) != 0) {
        pthread_mutex_destroy(&wb->mu);
        return -1;
    }
    if (pthread_create(&wb->thr, NULL, wb_main, wb) != 0) {
        pthread_cond_destroy(&wb->cv);
        pthread_mutex_destroy(&wb->mu);
        return -1;
    }
    wb->running = 1;
    return 0;
}

npuc_status npuc__writeback_wrote(npuc__writeback *wb, npuc_ctx *ctx, const char *path, uint64_t end) {
    if (!wb->on) return NPUC_OK;
    if (!wb->running) {
        if (end < wb->chunk) return NPUC_OK;
        if (wb_start(wb) != 0) { /* no thread: the final fsync does it all, as without */
            wb->on = 0;
            return NPUC_OK;
        }
    }
    pthread_mutex_lock(&wb->mu);
    wb->end = end;
    if (end - wb->synced >= wb->chunk) pthread_cond_signal(&wb->cv);
    while (!wb->quit && end - wb->synced > wb->window) pthread_cond_wait(&wb->cv, &wb->mu);
    const int e = wb->err;
    pthread_mutex_unlock(&wb->mu);
    if (e == 0) return NPUC_OK;
    return npuc_fail(ctx, NPUC_ERR_IO, "%s: writing: %s", path, strerror(e));
}

int npuc__writeback_end(npuc__writeback *wb) {
    if (!wb->running) return 0;
    pthread_mutex_lock(&wb->mu);
    wb->stop = 1;
    pthread_cond_broadcast(&wb->cv);
    pthread_mutex_unlock(&wb->mu);
    pthread_join(wb->thr, NULL);
    pthread_cond_destroy(&wb->cv);
    pthread_mutex_destroy(&wb->mu);
    wb->running = 0;
    wb->on = 0;
    return wb->err;
}

npuc_status npuc__writer_wrote(npuc_writer *w, int fd, uint64_t end) {
    if (!w->wb_set || w->wb.fd != fd) {
        npuc__writeback_end(&w->wb);
        npuc__writeback_init(&w->wb, fd);
        w->wb_set = 1;
    }
    return npuc__writeback_wrote(&w->wb, w->ctx, w->path, end);
}

npuc_status npuc__writer_wb_end(npuc_writer *w) {
    if (!w->wb_set) return NPUC_OK;
    w->wb_set = 0;
    const int e = npuc__writeback_end(&w->wb);
    return e ? npuc_fail(w->ctx, NPUC_ERR_IO, "%s: writing: %s", w->path, strerror(e)) : NPUC_OK;
}
