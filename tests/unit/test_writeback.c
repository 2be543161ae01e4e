/*
 * test_writeback.c - the early writeback of outputs (writeback.c): which
 * descriptors it applies to (a regular file on a disk, by default, with
 * NPUC_WRITEBACK=1 or C,W; never tmpfs or a pipe; off with 0), the settings
 * it takes and the ones it refuses, and the helper's bound worked by hand:
 * with a 1 MiB chunk and a 4 MiB window, no thread before the first MiB,
 * and after each 1 MiB written at most 4 MiB not yet made durable by the
 * helper's fdatasync.  The file's bytes are read back: the writeback never
 * changes them.
 */
#define _GNU_SOURCE
#include "testutil.h"
#include "npuc_internal.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#define MIB ((uint64_t)1 << 20)

static npuc_ctx *ctx;

static int setup(void **state) {
    (void)state;
    return npuc_ctx_new(&ctx) == NPUC_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    unsetenv("NPUC_WRITEBACK");
    npuc_ctx_free(ctx);
    return 0;
}

static int on_tmpfs(int fd) {
    struct statfs fs;
    return fstatfs(fd, &fs) == 0 && (unsigned)fs.f_type == 0x01021994u;
}

static void test_cursors(void **state) {
    (void)state;
    setenv("NPUC_WRITEBACK", "1,4", 1);
    const char *p = npuc_test_path("wb.bin");
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    if (on_tmpfs(fd)) { /* nothing to write back: the case below covers tmpfs */
        close(fd);
        unlink(p);
        skip();
    }
    npuc__writeback wb;
    npuc__writeback_init(&wb, fd);
    assert_int_equal(wb.on, 1);
    assert_int_equal(wb.chunk, MIB);
    assert_int_equal(wb.window, 4 * MIB);
    unsigned char *buf = malloc(MIB);
    assert_non_null(buf);
    /* Less than a chunk: no helper yet. */
    memset(buf, 7, 5000);
    assert_int_equal(write(fd, buf, 5000), 5000);
    assert_int_equal(npuc__writeback_wrote(&wb, ctx, p, 5000), NPUC_OK);
    assert_int_equal(wb.running, 0);
    uint64_t end = 5000;
    for (int k = 1; k <= 10; k++) {
        memset(buf, k, MIB);
        assert_int_equal(write(fd, buf, MIB), (ssize_t)MIB);
        end += MIB;
        assert_int_equal(npuc__writeback_wrote(&wb, ctx, p, end), NPUC_OK);
        assert_int_equal(wb.running, 1);
        /* Back from the report only with at most the window not durable. */
        pthread_mutex_lock(&wb.mu);
        const uint64_t synced = wb.synced;
        pthread_mutex_unlock(&wb.mu);
        assert_true(synced <= end);
        assert_true(end - synced <= 4 * MIB);
    }
    assert_true(wb.synced >= 6 * MIB); /* 10 MiB + 5000 written, 4 MiB window */
    assert_int_equal(npuc__writeback_end(&wb), 0);
    assert_int_equal(wb.running, 0);
    assert_int_equal(npuc__writeback_end(&wb), 0); /* twice is harmless */
    close(fd);
    /* The bytes are the ones written. */
    size_t n;
    unsigned char *got = (unsigned char *)npuc_test_read_file(p, &n);
    assert_non_null(got);
    assert_int_equal(n, end);
    for (size_t i = 0; i < 5000; i++) assert_int_equal(got[i], 7);
    for (int k = 1; k <= 10; k++) {
        const unsigned char *q = got + 5000 + (size_t)(k - 1) * MIB;
        assert_int_equal(q[0], k);
        assert_int_equal(q[MIB - 1], k);
    }
    free(got);
    free(buf);
    unlink(p);
}

static void test_off(void **state) {
    (void)state;
    npuc__writeback wb;
    /* A pipe: off even when asked for, and a write report is a no-op. */
    setenv("NPUC_WRITEBACK", "1", 1);
    int pp[2];
    assert_int_equal(pipe(pp), 0);
    npuc__writeback_init(&wb, pp[1]);
    assert_int_equal(wb.on, 0);
    assert_int_equal(npuc__writeback_wrote(&wb, ctx, "pipe", 100 * MIB), NPUC_OK);
    assert_int_equal(wb.running, 0);
    assert_int_equal(npuc__writeback_end(&wb), 0);
    close(pp[0]);
    close(pp[1]);
    /* tmpfs, where there is one. */
    int fd = open("/dev/shm", O_RDONLY | O_DIRECTORY);
    if (fd >= 0 && on_tmpfs(fd)) {
        close(fd);
        char p[64];
        snprintf(p, sizeof p, "/dev/shm/npuc-test-wb-%ld", (long)getpid());
        fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
        assert_true(fd >= 0);
        npuc__writeback_init(&wb, fd);
        assert_int_equal(wb.on, 0);
        close(fd);
        unlink(p);
    } else if (fd >= 0) {
        close(fd);
    }
    /* 0 and settings it refuses (a window below the chunk, 0, too large,
     * trailing junk, no number): off, with the default sizes. */
    const char *bad[] = {"0", "8,4", "0,64", "8,70000", "8,64x", "x", "2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("NPUC_WRITEBACK", bad[i], 1);
        fd = open(npuc_test_path("d.bin"), O_RDWR | O_CREAT | O_TRUNC, 0644);
        assert_true(fd >= 0);
        npuc__writeback_init(&wb, fd);
        assert_int_equal(wb.on, 0);
        assert_int_equal(wb.chunk, NPUC__WB_CHUNK);
        assert_int_equal(wb.window, NPUC__WB_WINDOW);
        close(fd);
    }
    /* Unset, empty and 1: on (on a disk) with the default sizes. */
    const char *good[] = {NULL, "", "1"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        if (good[i]) setenv("NPUC_WRITEBACK", good[i], 1);
        else unsetenv("NPUC_WRITEBACK");
        fd = open(npuc_test_path("d.bin"), O_RDWR | O_CREAT | O_TRUNC, 0644);
        assert_true(fd >= 0);
        npuc__writeback_init(&wb, fd);
        assert_int_equal(wb.on, !on_tmpfs(fd));
        assert_int_equal(wb.chunk, NPUC__WB_CHUNK);
        assert_int_equal(wb.window, NPUC__WB_WINDOW);
        close(fd);
    }
    unlink(npuc_test_path("d.bin"));
    unsetenv("NPUC_WRITEBACK");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cursors),
        cmocka_unit_test(test_off),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
