/*
 * bench_iofloor.c - the least any program must do to turn one safetensors
 * file into another of a given size on this machine: the file I/O of
 * `npuc quantize` with no computation.  bench_quantize.py times it beside
 * npuc, so the end-to-end figure can be read against what the kernel and
 * the page cache allow, not only against memcpy.
 *
 *   bench_iofloor IN OUT OUT_BYTES THREADS [PIECES] [pread]
 *
 * Like npuc it maps IN read-only and reads every byte once (THREADS OpenMP
 * threads OR-ing 64-bit words, so every page is faulted in and every cache
 * line crosses the memory bus), in PIECES equal slices (default 16, one per
 * tensor of the benchmark's model).  With "pread" it reads instead with
 * pread() into one reused 1 MiB buffer per thread (a copy, but no page
 * tables to build and tear down).  After each slice it write()s
 * OUT_BYTES / PIECES bytes to OUT.tmp, a new file; then fsync, close,
 * rename to OUT, fsync of OUT's directory, munmap.  Prints the wall time of the whole in seconds.
 * The output bytes come from a buffer written once before timing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: bench_iofloor IN OUT OUT_BYTES THREADS [PIECES]\n");
        return 2;
    }
    const char *in = argv[1], *out = argv[2];
    const size_t out_bytes = (size_t)strtoull(argv[3], NULL, 10);
    const int threads = atoi(argv[4]);
    const size_t pieces = argc > 5 ? (size_t)atol(argv[5]) : 16;
    const int use_pread = argc > 6 && strcmp(argv[6], "pread") == 0;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    const size_t wpiece = (out_bytes + pieces - 1) / pieces;
    char *buf = malloc(wpiece ? wpiece : 1);
    if (!buf) { fprintf(stderr, "bench_iofloor: out of memory\n"); return 1; }
    for (size_t i = 0; i < wpiece; i++) buf[i] = (char)(i * 131u);

    const double t0 = now();
    int fd = open(in, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) { perror(in); return 1; }
    const size_t n = (size_t)st.st_size, words = n / 8;
    const uint64_t *p = use_pread ? NULL : mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) { perror("mmap"); return 1; }
    int o = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (o < 0) { perror(tmp); return 1; }
    uint64_t acc = 0;
    size_t left = out_bytes;
    for (size_t k = 0; k < pieces; k++) {
        const size_t lo = words / pieces * k, hi = k + 1 == pieces ? words : words / pieces * (k + 1);
        if (!use_pread) {
#pragma omp parallel for num_threads(threads) schedule(static) reduction(| : acc)
            for (size_t i = lo; i < hi; i++) acc |= p[i];
        } else {
            enum { RB = 1 << 17 }; /* words: 1 MiB */
            int bad = 0;
#pragma omp parallel num_threads(threads) reduction(| : acc) reduction(+ : bad)
            {
                uint64_t *b = malloc(RB * 8);
                if (!b) bad++;
#pragma omp for schedule(static)
                for (size_t c = lo; c < hi; c += RB) {
                    const size_t m = hi - c < RB ? hi - c : RB;
                    if (!b || pread(fd, b, m * 8, (off_t)(c * 8)) != (ssize_t)(m * 8)) { bad++; continue; }
                    for (size_t i = 0; i < m; i++) acc |= b[i];
                }
                free(b);
            }
            if (bad) { fprintf(stderr, "bench_iofloor: %s: read failed\n", in); return 1; }
        }
        const size_t w = left < wpiece ? left : wpiece;
        if (write_all(o, buf, w) != 0) { perror(tmp); return 1; }
        left -= w;
    }
    if (fsync(o) != 0 || close(o) != 0 || rename(tmp, out) != 0) { perror(out); return 1; }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", out);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0; else snprintf(dir, sizeof dir, ".");
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* as npuc: the rename made durable */
    if (dfd >= 0) { fsync(dfd); close(dfd); }
    if (p) munmap((void *)p, n);
    close(fd);
    const double dt = now() - t0;
    printf("iofloor%s threads=%d in=%zu out=%zu seconds=%.6f check=%llx\n", use_pread ? "-pread" : "", threads, n, out_bytes, dt,
           (unsigned long long)(acc & 0xF));
    free(buf);
    return 0;
}
