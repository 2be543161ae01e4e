/*
 * bench_writeback.c - the chunk and the window of the early writeback
 * (src/core/writeback.c), measured apart from npuc's computation.
 *
 *   bench_writeback DIR [MIB [PIECES [COMPUTE_MS [REPS]]]]
 *
 * Writes a file of MIB MiB (default 256) in DIR as npuc's writers do: in
 * PIECES tensors (default 16), each written in writes of at most the chunk
 * with npuc__writeback_wrote after each, then fsync, rename, fsync of the
 * directory.  Between two tensors the writer "computes" for COMPUTE_MS / PIECES
 * ms (default 250 ms in all): a sleep, so the figure does not depend on how
 * busy the CPUs are, only on the disk.  Every setting (off, then chunk,window
 * in MiB) runs once per round, REPS rounds (default 5) in turn; printed: the
 * median wall time, the median time in the final fsync (the tail: the
 * helper's last fdatasync, waited for, and the writer's fsync) and the
 * median time in npuc__writeback_wrote (the waits for the window), per
 * setting.  The data is a
 * pattern without zero blocks.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "npuc_internal.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One file; returns 0 and the wall, fsync and wait seconds. */
static int one(const char *dir, const char *setting, uint64_t total, int pieces, double compute, const char *buf,
               double *wall, double *tail, double *waits) {
    char tmp[4096], out[4096];
    snprintf(tmp, sizeof tmp, "%s/.bench_writeback.%ld.tmp", dir, (long)getpid());
    snprintf(out, sizeof out, "%s/bench_writeback.%ld.out", dir, (long)getpid());
    if (setting) setenv("NPUC_WRITEBACK", setting, 1);
    else unsetenv("NPUC_WRITEBACK");
    const double t0 = now();
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    npuc__writeback wb;
    npuc__writeback_init(&wb, fd);
    const uint64_t per = total / (uint64_t)pieces, step = wb.on ? wb.chunk : per;
    uint64_t pos = 0;
    double w = 0;
    struct timespec nap = {(time_t)(compute / pieces), (long)(1e9 * (compute / pieces - (double)(time_t)(compute / pieces)))};
    for (int p = 0; p < pieces; p++) {
        nanosleep(&nap, NULL);
        for (uint64_t done = 0; done < per;) {
            const uint64_t k = per - done < step ? per - done : step;
            for (uint64_t o = 0; o < k;) {
                ssize_t r = write(fd, buf + o, (size_t)(k - o));
                if (r < 0 && errno == EINTR) continue;
                if (r <= 0) return -1;
                o += (uint64_t)r;
            }
            done += k;
            pos += k;
            const double a = now();
            if (npuc__writeback_wrote(&wb, NULL, tmp, pos) != NPUC_OK) return -1;
            w += now() - a;
        }
    }
    const double a = now();
    if (npuc__writeback_end(&wb) != 0 || fsync(fd) != 0) return -1;
    *tail = now() - a;
    close(fd);
    if (rename(tmp, out) != 0) return -1;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    *wall = now() - t0;
    *waits = w;
    unlink(out);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_writeback DIR [MIB [PIECES [COMPUTE_MS [REPS]]]]\n");
        return 2;
    }
    const char *dir = argv[1];
    const uint64_t mib = argc > 2 ? strtoull(argv[2], NULL, 10) : 256;
    const int pieces = argc > 3 ? atoi(argv[3]) : 16;
    const double compute = (argc > 4 ? atof(argv[4]) : 250) / 1000.0;
    const int reps = argc > 5 ? atoi(argv[5]) : 5;
    const char *settings[] = {"0", NULL, "4,16", "8,32", "16,64", "16,128", "32,256", "64,256"};
    enum { NS = sizeof settings / sizeof settings[0] };
    if (mib == 0 || pieces <= 0 || reps <= 0 || reps > 99) return 2;
    const uint64_t per = (mib << 20) / (uint64_t)pieces;
    char *buf = malloc((size_t)per);
    if (!buf) return 1;
    for (uint64_t i = 0; i < per; i++) buf[i] = (char)(i * 2654435761u >> 13 | 1);
    double wall[NS][100], tail[NS][100], waits[NS][100];
    for (int r = 0; r < reps; r++)
        for (int s = 0; s < NS; s++)
            if (one(dir, settings[s], mib << 20, pieces, compute, buf, &wall[s][r], &tail[s][r], &waits[s][r]) != 0) {
                fprintf(stderr, "bench_writeback: %s: %s\n", dir, strerror(errno));
                return 1;
            }
    double ld[3] = {0};
    if (getloadavg(ld, 3) < 1) ld[0] = -1;
    printf("# %llu MiB in %d pieces to %s, %.0f ms of sleep as computation, %d rounds, medians; load %.2f\n",
           (unsigned long long)mib, pieces, dir, compute * 1000, reps, ld[0]);
    printf("%-22s %8s %8s %8s %8s\n", "NPUC_WRITEBACK", "wall s", "fsync s", "waits s", "- sleep");
    for (int s = 0; s < NS; s++) {
        const double mw = median(wall[s], reps);
        printf("%-22s %8.3f %8.3f %8.3f %8.3f\n", settings[s] ? settings[s] : "(default: 48,144)", mw,
               median(tail[s], reps), median(waits[s], reps), mw - compute);
    }
    unsetenv("NPUC_WRITEBACK");
    free(buf);
    return 0;
}
