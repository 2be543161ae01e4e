/*
 * test_readahead.c - the read-ahead helper (src/pipeline/readahead.h).
 *
 * Counts: how many tensors the helper prefetched for a given window and
 * wanted set, worked out by hand (the helper counts only tensors it
 * prefetched, so a wrong window or wanted set shows).  Effect: that the
 * prefetched tensors' pages are in the process's page table afterwards,
 * read independently from /proc/self/pagemap (bit 63: page present), on a
 * safetensors file of 6 tensors of 256 KiB each, written here and never
 * read through the mapping.  (Absence is not checked: the kernel may map a
 * whole large folio of the page cache on one fault, neighbours included.)
 * The pagemap checks are skipped where the kernel has no MADV_POPULATE_READ
 * or pagemap cannot be read.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "testutil.h"

#include "pipeline/readahead.h"

#define NT 6
#define TN 65536 /* floats per tensor: 256 KiB, far beyond fault-around */

static npuc_ctx *ctx;
static int g_pagemap_ok;

/* Writes a fresh model (a new file, so none of its pages is mapped yet). */
static const char *make_model(const char *name) {
    char hdr[2048];
    size_t hl = 0;
    hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl, "{");
    for (int i = 0; i < NT; i++)
        hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl,
                               "%s\"t%d\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%d,%d]}",
                               i ? "," : "", i, TN, i * TN * 4, (i + 1) * TN * 4);
    hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl, "}");
    while (hl % 8) hdr[hl++] = ' ';
    const size_t n = 8 + hl + (size_t)NT * TN * 4;
    unsigned char *f = calloc(1, n);
    assert_non_null(f);
    for (int i = 0; i < 8; i++) f[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(f + 8, hdr, hl);
    for (size_t k = 8 + hl; k < n; k++) f[k] = (unsigned char)(k * 7);
    const char *p = npuc_test_path(name);
    npuc_test_write_file(p, f, n);
    free(f);
    return p;
}

/* Pages of [p, p + n) present in this process's page table. */
static size_t present_pages(const void *p, size_t n) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t a = (uintptr_t)p / page, e = ((uintptr_t)p + n + page - 1) / page;
    int fd = open("/proc/self/pagemap", O_RDONLY);
    assert_true(fd >= 0);
    size_t present = 0;
    for (uintptr_t v = a; v < e; v++) {
        uint64_t ent = 0;
        assert_int_equal(pread(fd, &ent, sizeof ent, (off_t)(v * sizeof ent)), (ssize_t)sizeof ent);
        present += (ent >> 63) & 1;
    }
    close(fd);
    return present;
}

/* Pages that [p, p + n) touches. */
static size_t pages_of(const void *p, size_t n) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    return (size_t)(((uintptr_t)p + n + page - 1) / page - (uintptr_t)p / page);
}

static const void *tensor_ptr(npuc_model *m, size_t i) {
    const void *d;
    assert_int_equal(npuc_model_data(ctx, m, i, &d), NPUC_OK); /* computes the pointer only */
    return d;
}

static int setup(void **state) {
    (void)state;
    if (npuc_ctx_new(&ctx) != NPUC_OK) return -1;
    /* Can this kernel populate, and can we read the page table? */
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *probe = mmap(NULL, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (probe == MAP_FAILED) return -1;
#ifdef MADV_POPULATE_READ
    int fd = open("/proc/self/pagemap", O_RDONLY);
    g_pagemap_ok = fd >= 0 && madvise(probe, page, MADV_POPULATE_READ) == 0;
    if (fd >= 0) close(fd);
#endif
    munmap(probe, page);
    if (!g_pagemap_ok) print_message("[  NOTE    ] no MADV_POPULATE_READ or pagemap: page checks skipped\n");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    npuc_ctx_free(ctx);
    return 0;
}

static void check_present(npuc_model *m, size_t i) {
    if (!g_pagemap_ok) return;
    const void *p = tensor_ptr(m, i);
    assert_int_equal(present_pages(p, (size_t)TN * 4), pages_of(p, (size_t)TN * 4));
}

/* No position given: the window is tensors 0..ahead. */
static void test_window_from_start(void **state) {
    (void)state;
    npuc_model *m;
    assert_int_equal(npuc_model_open(ctx, make_model("a.safetensors"), NULL, &m), NPUC_OK);
    unsigned char want[NT];
    memset(want, 1, sizeof want);
    npuc__readahead *ra = npuc__readahead_start(m, want, 2, 1, 1);
    assert_non_null(ra);
    assert_int_equal(npuc__readahead_stop(ra), 3);
    for (int i = 0; i < 3; i++) check_present(m, (size_t)i);
    npuc_model_close(m);
}

/* Moving to the last tensor lets it take all of them. */
static void test_follows_position(void **state) {
    (void)state;
    npuc_model *m;
    assert_int_equal(npuc_model_open(ctx, make_model("b.safetensors"), NULL, &m), NPUC_OK);
    unsigned char want[NT];
    memset(want, 1, sizeof want);
    npuc__readahead *ra = npuc__readahead_start(m, want, 1, 1, 1);
    assert_non_null(ra);
    for (size_t i = 0; i < NT; i++) npuc__readahead_at(ra, i);
    npuc__readahead_at(ra, 2); /* going back is ignored */
    assert_int_equal(npuc__readahead_stop(ra), NT);
    for (int i = 0; i < NT; i++) check_present(m, (size_t)i);
    npuc_model_close(m);
}

/* Only wanted tensors, only inside the window: want {1, 3, 5}, ahead 1,
 * position 2 -> window 0..3 -> tensors 1 and 3. */
static void test_wanted_only(void **state) {
    (void)state;
    npuc_model *m;
    assert_int_equal(npuc_model_open(ctx, make_model("c.safetensors"), NULL, &m), NPUC_OK);
    const unsigned char want[NT] = {0, 1, 0, 1, 0, 1};
    npuc__readahead *ra = npuc__readahead_start(m, want, 1, 1, 1);
    assert_non_null(ra);
    npuc__readahead_at(ra, 2);
    assert_int_equal(npuc__readahead_stop(ra), 2);
    check_present(m, 1);
    check_present(m, 3);
    npuc_model_close(m);
}

/* No helper when every core computes, and the NULL helper is a no-op. */
static void test_no_spare_core(void **state) {
    (void)state;
    npuc_model *m;
    assert_int_equal(npuc_model_open(ctx, make_model("d.safetensors"), NULL, &m), NPUC_OK);
    unsigned char want[NT];
    memset(want, 1, sizeof want);
    npuc__readahead *ra = npuc__readahead_start(m, want, 2, 1 << 20, 0);
    assert_null(ra);
    npuc__readahead_at(ra, 3);
    assert_int_equal(npuc__readahead_stop(ra), 0);
    npuc_model_close(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window_from_start),
        cmocka_unit_test(test_follows_position),
        cmocka_unit_test(test_wanted_only),
        cmocka_unit_test(test_no_spare_core),
    };
    return cmocka_run_group_tests_name("readahead", tests, setup, teardown);
}
