/*
 * testutil.h - helpers shared by the cmocka unit tests.
 *
 * Debian's cmocka 1.1.5 has no assert_double_equal: use assert_close().
 * Tests that need ../shared/data call npuc_test_shared() and skip (exit 77,
 * which CTest reports as skipped) when it is absent.
 */
#ifndef NPUC_TESTUTIL_H
#define NPUC_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "npuc/npuc.h"

/* Fails the test unless |a - b| <= atol + rtol * |b| (NaN equals NaN). */
#define assert_close(a, b, rtol, atol) npuc_test_assert_close((a), (b), (rtol), (atol), __FILE__, __LINE__)
void npuc_test_assert_close(double a, double b, double rtol, double atol, const char *file, int line);

/* A fresh temporary directory (removed at exit); returned path is static per call. */
const char *npuc_test_tmpdir(void);
/* tmpdir + "/" + name, in a static rotating buffer. */
const char *npuc_test_path(const char *name);
/* The shared data folder ($NPUC_SHARED_DATA), or NULL when it does not exist. */
const char *npuc_test_shared(void);
/* shared + "/" + name when that file exists, else NULL. */
const char *npuc_test_shared_file(const char *name);
/* Writes n bytes to path; fails the test on error. */
void npuc_test_write_file(const char *path, const void *data, size_t n);
/* Reads a whole file (malloc'd); *n gets its size; NULL if missing. */
void *npuc_test_read_file(const char *path, size_t *n);
/* 1 if path exists. */
int npuc_test_exists(const char *path);
/* Deterministic pseudo-random numbers (xorshift64*), for test data. */
uint64_t npuc_test_rand(uint64_t *state);
/* Uniform in [-1, 1). */
float npuc_test_randf(uint64_t *state);
/* Standard normal (Box-Muller). */
float npuc_test_randn(uint64_t *state);

#endif
