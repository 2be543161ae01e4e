#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void npuc_test_assert_close(double a, double b, double rtol, double atol, const char *file, int line) {
    if (isnan(a) && isnan(b)) return;
    if (a == b) return;
    double tol = atol + rtol * fabs(b);
    if (!(fabs(a - b) <= tol)) {
        print_error("%s:%d: %.9g is not close to %.9g (rtol %g, atol %g)\n", file, line, a, b, rtol, atol);
        _fail(file, line);
    }
}

static char g_tmp[512];

static void rm_tmp(void) {
    if (!g_tmp[0] || getenv("NPUC_KEEP_TMP")) return;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0) { /* best effort */ }
}

const char *npuc_test_tmpdir(void) {
    if (!g_tmp[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(g_tmp, sizeof g_tmp, "%s/npuc-test-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(g_tmp)) { perror("mkdtemp"); exit(1); }
        atexit(rm_tmp);
    }
    return g_tmp;
}

const char *npuc_test_path(const char *name) {
    static char bufs[8][1024];
    static int k;
    char *b = bufs[k++ & 7];
    snprintf(b, 1024, "%s/%s", npuc_test_tmpdir(), name);
    return b;
}

const char *npuc_test_shared(void) {
    const char *d = getenv("NPUC_SHARED_DATA");
    struct stat sb;
    if (!d || stat(d, &sb) != 0 || !S_ISDIR(sb.st_mode)) return NULL;
    return d;
}

const char *npuc_test_shared_file(const char *name) {
    static char bufs[8][1024];
    static int k;
    const char *d = npuc_test_shared();
    if (!d) return NULL;
    char *b = bufs[k++ & 7];
    snprintf(b, 1024, "%s/%s", d, name);
    return npuc_test_exists(b) ? b : NULL;
}

void npuc_test_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

void *npuc_test_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)len + 1);
    if (b && fread(b, 1, (size_t)len, f) != (size_t)len) { free(b); b = NULL; }
    fclose(f);
    if (b) { b[len] = 0; *n = (size_t)len; }
    return b;
}

int npuc_test_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

uint64_t npuc_test_rand(uint64_t *s) {
    uint64_t x = *s ? *s : 0x9e3779b97f4a7c15ull;
    x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

float npuc_test_randf(uint64_t *s) {
    return (float)((double)(npuc_test_rand(s) >> 11) * 0x1p-53 * 2.0 - 1.0);
}

float npuc_test_randn(uint64_t *s) {
    double u1 = ((double)(npuc_test_rand(s) >> 11) + 1.0) * 0x1p-53;
    double u2 = (double)(npuc_test_rand(s) >> 11) * 0x1p-53;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
