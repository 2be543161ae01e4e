/*
 * test_tempfiles.c - atomic files (npuc_atomic_file_*, tempfiles.c): two
 * files racing for one path without overwrite (the second commit is
 * NPUC_ERR_EXISTS and the first one's bytes stay), with overwrite (the last
 * commit wins), the temporary name pattern, stale temporary files removed
 * only when nobody holds their lock, and npuc_tempfiles_cleanup().
 */
#include "testutil.h"
#include "npuc_internal.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static npuc_ctx *ctx;

static int setup(void **state) {
    (void)state;
    return npuc_ctx_new(&ctx) == NPUC_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    npuc_ctx_free(ctx);
    return 0;
}

static void put(npuc_atomic_file *f, const char *s) {
    assert_int_equal(write(npuc_atomic_file_fd(f), s, strlen(s)), (ssize_t)strlen(s));
}

static void expect_content(const char *path, const char *want) {
    size_t n;
    char *got = npuc_test_read_file(path, &n);
    assert_non_null(got);
    assert_int_equal(n, strlen(want));
    assert_memory_equal(got, want, n);
    free(got);
}

/* Number of entries of the test folder whose name contains s. */
static int count_named(const char *s) {
    DIR *d = opendir(npuc_test_tmpdir());
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += strstr(e->d_name, s) != NULL;
    closedir(d);
    return n;
}

static void test_race_without_overwrite(void **state) {
    (void)state;
    const char *out = npuc_test_path("race.bin");
    npuc_atomic_file *a, *b;
    assert_int_equal(npuc_atomic_file_open(ctx, out, 0, &a), NPUC_OK);
    assert_int_equal(npuc_atomic_file_open(ctx, out, 0, &b), NPUC_OK);
    assert_string_not_equal(npuc_atomic_file_temp(a), npuc_atomic_file_temp(b));
    /* ".race.bin.npuc-<pid>-<16 hex>.tmp" beside the output */
    char want[64];
    snprintf(want, sizeof want, "/.race.bin.npuc-%ld-", (long)getpid());
    assert_non_null(strstr(npuc_atomic_file_temp(a), want));
    assert_int_equal(count_named(".race.bin.npuc-"), 2);
    put(a, "first");
    put(b, "second");
    assert_false(npuc_test_exists(out)); /* nothing before a commit */
    assert_int_equal(npuc_atomic_file_commit(a), NPUC_OK);
    assert_int_equal(npuc_atomic_file_commit(b), NPUC_ERR_EXISTS);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "output exists (use -f to overwrite)"));
    expect_content(out, "first");
    assert_int_equal(count_named(".npuc-"), 0);
    /* Opening for an existing path without overwrite fails at once. */
    assert_int_equal(npuc_atomic_file_open(ctx, out, 0, &a), NPUC_ERR_EXISTS);
    unlink(out);
}

static void test_race_with_overwrite(void **state) {
    (void)state;
    const char *out = npuc_test_path("last.bin");
    npuc_test_write_file(out, "old", 3);
    npuc_atomic_file *a, *b;
    assert_int_equal(npuc_atomic_file_open(ctx, out, 1, &a), NPUC_OK);
    assert_int_equal(npuc_atomic_file_open(ctx, out, 1, &b), NPUC_OK);
    put(a, "aaaa");
    put(b, "bb");
    expect_content(out, "old");
    assert_int_equal(npuc_atomic_file_commit(b), NPUC_OK);
    expect_content(out, "bb");
    assert_int_equal(npuc_atomic_file_commit(a), NPUC_OK);
    expect_content(out, "aaaa");
    npuc_atomic_file_abort(NULL);
    assert_int_equal(npuc_atomic_file_open(ctx, out, 1, &a), NPUC_OK);
    put(a, "discarded");
    npuc_atomic_file_abort(a);
    expect_content(out, "aaaa");
    assert_int_equal(count_named(".npuc-"), 0);
    unlink(out);
}

static void test_stale_removed_only_when_unlocked(void **state) {
    (void)state;
    const char *dead = npuc_test_path(".st.bin.npuc-1-00000000000000aa.tmp");
    npuc_test_write_file(dead, "x", 1);
    const char *held = npuc_test_path(".st.bin.npuc-2-00000000000000bb.tmp");
    npuc_test_write_file(held, "y", 1);
    const char *other = npuc_test_path(".st.binx.npuc-3-00000000000000cc.tmp");
    npuc_test_write_file(other, "z", 1);
    int hfd = open(held, O_RDONLY);
    assert_true(hfd >= 0);
    assert_int_equal(flock(hfd, LOCK_EX), 0); /* as a live run holds it */
    npuc_atomic_file *f;
    assert_int_equal(npuc_atomic_file_open(ctx, npuc_test_path("st.bin"), 0, &f), NPUC_OK);
    assert_false(npuc_test_exists(dead));
    assert_true(npuc_test_exists(held));
    assert_true(npuc_test_exists(other));
    /* Our own file is locked too: a second open does not remove it. */
    npuc_atomic_file *g;
    assert_int_equal(npuc_atomic_file_open(ctx, npuc_test_path("st.bin"), 0, &g), NPUC_OK);
    assert_true(npuc_test_exists(npuc_atomic_file_temp(f)));
    npuc_atomic_file_abort(g);
    npuc_atomic_file_abort(f);
    close(hfd);
    unlink(held);
    unlink(other);
}

static void test_cleanup_removes_live_temps(void **state) {
    (void)state;
    npuc_atomic_file *a, *b;
    assert_int_equal(npuc_atomic_file_open(ctx, npuc_test_path("c1.bin"), 0, &a), NPUC_OK);
    assert_int_equal(npuc_atomic_file_open(ctx, npuc_test_path("c2.bin"), 0, &b), NPUC_OK);
    assert_int_equal(count_named(".npuc-"), 2);
    npuc_tempfiles_cleanup(); /* what the CLI's signal handler calls */
    assert_int_equal(count_named(".npuc-"), 0);
    npuc_atomic_file_abort(a);
    npuc_atomic_file_abort(b);
}

/* A tracked directory holding files (a recipe's finished checkpoint step
 * directory, whose files are no longer tracked themselves) is emptied and
 * removed by the cleanup; a tracked name that does not exist is harmless. */
static void test_cleanup_removes_tracked_dir(void **state) {
    (void)state;
    char dir[4096], f[4200];
    snprintf(dir, sizeof dir, "%s", npuc_test_path(".out.npucstep-1-0123456789abcdef.s2.tmp"));
    assert_int_equal(mkdir(dir, 0755), 0);
    for (int i = 0; i < 40; i++) { /* more entries than one small getdents64 batch */
        snprintf(f, sizeof f, "%s/model-%05d-of-00040.safetensors-with-a-long-name-to-fill-the-buffer", dir, i);
        FILE *fp = fopen(f, "w");
        assert_non_null(fp);
        fputs("x", fp);
        fclose(fp);
    }
    int slot = npuc__tempfiles_track(dir);
    assert_true(slot >= 0);
    npuc__tempfiles_track(npuc_test_path("never-created.tmp"));
    npuc_tempfiles_cleanup();
    struct stat sb;
    assert_int_not_equal(stat(dir, &sb), 0);
    npuc__tempfiles_untrack(dir);
    npuc__tempfiles_untrack(npuc_test_path("never-created.tmp"));
}

static void test_bad_paths(void **state) {
    (void)state;
    npuc_atomic_file *f;
    assert_int_equal(npuc_atomic_file_open(ctx, "", 0, &f), NPUC_ERR_ARG);
    assert_int_equal(npuc_atomic_file_open(ctx, npuc_test_tmpdir(), 1, &f), NPUC_ERR_ARG);
    assert_int_equal(npuc_atomic_file_open(ctx, npuc_test_path("no/such/dir/x.bin"), 0, &f), NPUC_ERR_IO);
    assert_null(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_race_without_overwrite),
        cmocka_unit_test(test_race_with_overwrite),
        cmocka_unit_test(test_stale_removed_only_when_unlocked),
        cmocka_unit_test(test_cleanup_removes_live_temps),
        cmocka_unit_test(test_cleanup_removes_tracked_dir),
        cmocka_unit_test(test_bad_paths),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
