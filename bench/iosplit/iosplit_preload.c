/*
 * iosplit_preload.c - where a process's main thread spends its time in file
 * I/O, for bench_schemes.py --split: an LD_PRELOAD library that times the
 * main thread's read, write, sync_file_range and fsync calls.
 *
 *   NPUC_IOSPLIT_OUT=FILE LD_PRELOAD=build/bench/libnpuc_iosplit.so npuc ...
 *
 * At exit it appends one line to FILE:
 *   read=S write=S wb=S sync=S
 * the seconds the main thread spent in read/pread/readv/preadv (the input;
 * a read-ahead thread's reads are not on the main thread's path and are
 * not counted), in write/pwrite/writev/fwrite (handing the output to the
 * page cache), in sync_file_range (the writeback started early and its
 * waits: writeback.c) and in fsync/fdatasync (the final sync).  The rest of
 * the wall time is computation (and process start).  Calls from inside
 * libc (stdio's own writes) are not seen twice: fwrite is timed whole.
 * Only bench/ uses it; the library is never linked into npuc.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

enum { K_READ, K_WRITE, K_WB, K_SYNC, K_N };
static _Atomic long long g_ns[K_N];

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int main_thread(void) { return (pid_t)syscall(SYS_gettid) == getpid(); }

static void *next(const char *name) { return dlsym(RTLD_NEXT, name); }

#define TIMED(kind, type, call)                                                                              \
    do {                                                                                                     \
        if (!main_thread()) return call;                                                                     \
        const long long t0 = now_ns();                                                                       \
        type r_ = call;                                                                                      \
        atomic_fetch_add(&g_ns[kind], now_ns() - t0);                                                        \
        return r_;                                                                                           \
    } while (0)

ssize_t read(int fd, void *b, size_t n) {
    static ssize_t (*f)(int, void *, size_t);
    if (!f) f = next("read");
    TIMED(K_READ, ssize_t, f(fd, b, n));
}

ssize_t pread64(int fd, void *b, size_t n, off_t o) {
    static ssize_t (*f)(int, void *, size_t, off_t);
    if (!f) f = next("pread64");
    TIMED(K_READ, ssize_t, f(fd, b, n, o));
}

ssize_t pread(int fd, void *b, size_t n, off_t o) {
    static ssize_t (*f)(int, void *, size_t, off_t);
    if (!f) f = next("pread");
    TIMED(K_READ, ssize_t, f(fd, b, n, o));
}

ssize_t preadv(int fd, const struct iovec *v, int c, off_t o) {
    static ssize_t (*f)(int, const struct iovec *, int, off_t);
    if (!f) f = next("preadv");
    TIMED(K_READ, ssize_t, f(fd, v, c, o));
}

ssize_t write(int fd, const void *b, size_t n) {
    static ssize_t (*f)(int, const void *, size_t);
    if (!f) f = next("write");
    TIMED(K_WRITE, ssize_t, f(fd, b, n));
}

ssize_t pwrite64(int fd, const void *b, size_t n, off_t o) {
    static ssize_t (*f)(int, const void *, size_t, off_t);
    if (!f) f = next("pwrite64");
    TIMED(K_WRITE, ssize_t, f(fd, b, n, o));
}

ssize_t pwrite(int fd, const void *b, size_t n, off_t o) {
    static ssize_t (*f)(int, const void *, size_t, off_t);
    if (!f) f = next("pwrite");
    TIMED(K_WRITE, ssize_t, f(fd, b, n, o));
}

ssize_t writev(int fd, const struct iovec *v, int c) {
    static ssize_t (*f)(int, const struct iovec *, int);
    if (!f) f = next("writev");
    TIMED(K_WRITE, ssize_t, f(fd, v, c));
}

size_t fwrite(const void *p, size_t s, size_t n, FILE *fp) {
    static size_t (*f)(const void *, size_t, size_t, FILE *);
    if (!f) f = next("fwrite");
    TIMED(K_WRITE, size_t, f(p, s, n, fp));
}

int sync_file_range(int fd, off64_t o, off64_t n, unsigned int fl) {
    static int (*f)(int, off64_t, off64_t, unsigned int);
    if (!f) f = next("sync_file_range");
    TIMED(K_WB, int, f(fd, o, n, fl));
}

int fsync(int fd) {
    static int (*f)(int);
    if (!f) f = next("fsync");
    TIMED(K_SYNC, int, f(fd));
}

int fdatasync(int fd) {
    static int (*f)(int);
    if (!f) f = next("fdatasync");
    TIMED(K_SYNC, int, f(fd));
}

__attribute__((destructor)) static void iosplit_report(void) {
    const char *path = getenv("NPUC_IOSPLIT_OUT");
    if (!path || !main_thread()) return;
    static int (*op)(const char *, int, ...);
    if (!op) op = next("open");
    int fd = op(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return;
    char line[160];
    int n = snprintf(line, sizeof line, "read=%.4f write=%.4f wb=%.4f sync=%.4f\n", 1e-9 * (double)g_ns[K_READ],
                     1e-9 * (double)g_ns[K_WRITE], 1e-9 * (double)g_ns[K_WB], 1e-9 * (double)g_ns[K_SYNC]);
    static ssize_t (*wr)(int, const void *, size_t);
    if (!wr) wr = next("write");
    if (n > 0) wr(fd, line, (size_t)n);
    close(fd);
}
