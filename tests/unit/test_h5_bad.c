/*
 * test_h5_bad.c - malformed and hostile HDF5 files.
 *
 * Every fixture is built here with the HDF5 C API (or by patching the bytes
 * of a file it wrote), so the test needs nothing but libhdf5.  Each case
 * expects one specific status and a message that names the file (and the
 * dataset or attribute at fault); under ASan the run also proves there is no
 * crash and no leak.  A last case flips random bytes in the compressed data
 * of a valid file and asks that loading fails cleanly or not at all.
 */
#include "testutil.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hdf5.h>

#include "npuc/npuc.h"

static npuc_ctx *g_ctx;

static int setup(void **state) {
    (void)state;
    return npuc_ctx_new(&g_ctx) == NPUC_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    npuc_ctx_free(g_ctx);
    return 0;
}

static char *tpath(const char *name) {
    static char buf[8][1024];
    static int k;
    char *b = buf[k++ & 7];
    snprintf(b, 1024, "%s", npuc_test_path(name));
    return b;
}

/* Opening path fails with st; the message names the file and, when given,
 * contains what. */
static void expect_open(const char *path, npuc_status st, const char *what) {
    npuc_model *m = (npuc_model *)1;
    npuc_status got = npuc_model_open(g_ctx, path, NULL, &m);
    const char *msg = npuc_ctx_errmsg(g_ctx);
    if (got != st)
        fail_msg("%s: status %s, expected %s (%s)", path, npuc_status_str(got), npuc_status_str(st), msg);
    assert_null(m);
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", path);
    if (!strstr(msg, basename(copy))) fail_msg("message does not name the file: %s", msg);
    if (what && !strstr(msg, what)) fail_msg("message lacks '%s': %s", what, msg);
    if (strchr(msg, '\n')) fail_msg("message is not one line: %s", msg);
}

static npuc_model *open_ok(const char *path) {
    npuc_model *m;
    npuc_status st = npuc_model_open(g_ctx, path, NULL, &m);
    if (st != NPUC_OK) fail_msg("%s: %s", path, npuc_ctx_errmsg(g_ctx));
    return m;
}

static hid_t mkfile(const char *path) {
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(f >= 0);
    return f;
}

static hid_t lcpl_intermediate(void) {
    hid_t l = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(l, 1);
    return l;
}

/* A small float dataset, contiguous unless dcpl says otherwise. */
static void put_f32(hid_t loc, const char *name, hsize_t n, hid_t dcpl) {
    float *v = calloc(n ? n : 1, sizeof *v);
    for (hsize_t i = 0; i < n; i++) v[i] = (float)i * 0.5f;
    hid_t sp = H5Screate_simple(1, &n, NULL), l = lcpl_intermediate();
    hid_t d = H5Dcreate2(loc, name, H5T_IEEE_F32LE, sp, l, dcpl, H5P_DEFAULT);
    assert_true(d >= 0);
    assert_true(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
    H5Dclose(d);
    H5Pclose(l);
    H5Sclose(sp);
    free(v);
}

/* A dataset of type t and the given shape, never written. */
static void put_empty(hid_t loc, const char *name, hid_t t, int rank, const hsize_t *dims,
                      const hsize_t *maxdims, hid_t dcpl) {
    hid_t sp = H5Screate_simple(rank, dims, maxdims), l = lcpl_intermediate();
    assert_true(sp >= 0);
    hid_t d = H5Dcreate2(loc, name, t, sp, l, dcpl, H5P_DEFAULT);
    assert_true(d >= 0);
    H5Dclose(d);
    H5Pclose(l);
    H5Sclose(sp);
}

static void str_attr(hid_t obj, const char *name, const char *v) {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(v) ? strlen(v) : 1);
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(a >= 0);
    assert_true(H5Awrite(a, t, v) >= 0);
    H5Aclose(a);
    H5Sclose(s);
    H5Tclose(t);
}

static void str_array_attr(hid_t obj, const char *name, const char *const *v, size_t n) {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    hsize_t dim = n;
    hid_t s = H5Screate_simple(1, &dim, NULL);
    hid_t a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(a >= 0);
    assert_true(H5Awrite(a, t, v) >= 0);
    H5Aclose(a);
    H5Sclose(s);
    H5Tclose(t);
}

static void int_array_attr(hid_t obj, const char *name) {
    hsize_t dim = 3;
    int v[3] = {1, 2, 3};
    hid_t s = H5Screate_simple(1, &dim, NULL);
    hid_t a = H5Acreate2(obj, name, H5T_STD_I32LE, s, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(a >= 0);
    assert_true(H5Awrite(a, H5T_NATIVE_INT, v) >= 0);
    H5Aclose(a);
    H5Sclose(s);
}

/* A valid npuc-written file with a few tensors (deflate on). */
static void write_valid(const char *path, int style) {
    npuc_write_opts o = npuc_write_opts_defaults();
    o.overwrite = 1;
    assert_int_equal(npuc_write_opts_set(g_ctx, &o, "structure", npuc_h5_style_name((npuc_h5_style)style)), NPUC_OK);
    npuc_writer *w;
    assert_int_equal(npuc_writer_open(g_ctx, path, &o, &w), NPUC_OK);
    assert_int_equal(npuc_writer_meta(w, "k", "v"), NPUC_OK);
    const char *names[] = {"conv/kernel", "conv/bias", "dense/kernel"};
    int64_t shapes[3][2] = {{64, 48}, {48, 1}, {32, 16}};
    for (int i = 0; i < 3; i++) {
        npuc_tensor_info t;
        memset(&t, 0, sizeof t);
        t.name = names[i];
        t.dtype = NPUC_DTYPE_F32;
        t.rank = 2;
        t.shape[0] = shapes[i][0];
        t.shape[1] = shapes[i][1];
        t.group = i < 2 ? "conv" : "dense";
        assert_int_equal(npuc_writer_declare(w, &t), NPUC_OK);
    }
    uint64_t seed = 7;
    for (int i = 0; i < 3; i++) {
        size_t n = (size_t)(shapes[i][0] * shapes[i][1]);
        float *v = malloc(n * sizeof *v);
        for (size_t k = 0; k < n; k++) v[k] = npuc_test_randn(&seed);
        assert_int_equal(npuc_writer_write(w, v, n * sizeof *v), NPUC_OK);
        free(v);
    }
    npuc_status st = npuc_writer_finish(w);
    if (st != NPUC_OK) fail_msg("%s", npuc_ctx_errmsg(g_ctx));
}

/* ------------------------------------------------------------ not HDF5 at all */

static void test_truncated(void **state) {
    (void)state;
    const char *src = tpath("valid.h5");
    write_valid(src, NPUC_H5_PLAIN);
    size_t n;
    unsigned char *b = npuc_test_read_file(src, &n);
    assert_non_null(b);
    const size_t cuts[] = {8, 48, 100, 512, n / 3, n / 2, n - 100, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "trunc_%zu.h5", cuts[i]);
        const char *p = tpath(name);
        npuc_test_write_file(p, b, cuts[i]);
        expect_open(p, NPUC_ERR_FORMAT, NULL);
    }
    free(b);
}

static void test_garbage_after_signature(void **state) {
    (void)state;
    unsigned char b[4096] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    uint64_t seed = 99;
    for (size_t i = 8; i < sizeof b; i++) b[i] = (unsigned char)npuc_test_rand(&seed);
    const char *p = tpath("garbage.h5");
    npuc_test_write_file(p, b, sizeof b);
    expect_open(p, NPUC_ERR_FORMAT, "HDF5");
    /* A superblock version nobody has written: */
    memset(b + 8, 0, sizeof b - 8);
    b[8] = 9;
    npuc_test_write_file(p, b, sizeof b);
    expect_open(p, NPUC_ERR_FORMAT, NULL);
}

static void test_empty_and_foreign(void **state) {
    (void)state;
    const char *p = tpath("empty.h5");
    npuc_test_write_file(p, "", 0);
    expect_open(p, NPUC_ERR_FORMAT, "not an HDF5 file");
    p = tpath("text.h5");
    const char *txt = "this is not a weight file\n";
    npuc_test_write_file(p, txt, strlen(txt));
    expect_open(p, NPUC_ERR_FORMAT, "not an HDF5 file");
}

/* ------------------------------------------------------------ links */

static void test_soft_link(void **state) {
    (void)state;
    const char *p = tpath("soft.h5");
    hid_t f = mkfile(p);
    put_f32(f, "data", 4, H5P_DEFAULT);
    assert_true(H5Lcreate_soft("/data", f, "alias", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    H5Fclose(f);
    expect_open(p, NPUC_ERR_UNSUPPORTED, "'alias' is a soft link");
}

static void test_external_link(void **state) {
    (void)state;
    const char *other = tpath("other.h5");
    hid_t f = mkfile(other);
    put_f32(f, "secret", 4, H5P_DEFAULT);
    H5Fclose(f);
    const char *p = tpath("extlink.h5");
    f = mkfile(p);
    assert_true(H5Lcreate_external(other, "/secret", f, "outside", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    H5Fclose(f);
    expect_open(p, NPUC_ERR_UNSUPPORTED, "'outside' is an external link");
}

/* A group that links back to its parent: the walk must end, finding the one
 * dataset once. */
static void test_hardlink_cycle(void **state) {
    (void)state;
    const char *p = tpath("cycle.h5");
    hid_t f = mkfile(p);
    put_f32(f, "g/data", 4, H5P_DEFAULT);
    assert_true(H5Lcreate_hard(f, "/", f, "g/up", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    assert_true(H5Lcreate_hard(f, "/g", f, "g/self", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    H5Fclose(f);
    npuc_model *m = open_ok(p);
    assert_int_equal(npuc_model_count(m), 1);
    assert_string_equal(npuc_model_tensor(m, 0)->name, "g/data");
    npuc_model_close(m);
}

static void test_deep_nesting(void **state) {
    (void)state;
    const char *p = tpath("deep.h5");
    char path[512] = "";
    for (int i = 0; i < 80; i++) strcat(path, "d/");
    strcat(path, "data");
    hid_t f = mkfile(p);
    put_f32(f, path, 2, H5P_DEFAULT);
    H5Fclose(f);
    expect_open(p, NPUC_ERR_UNSUPPORTED, "nested deeper");
}

/* ------------------------------------------------------------ storage */

static void test_external_storage(void **state) {
    (void)state;
    const char *p = tpath("extstore.h5");
    hid_t f = mkfile(p);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    assert_true(H5Pset_external(dcpl, "/etc/passwd", 0, 64) >= 0);
    hsize_t n = 16;
    put_empty(f, "leak", H5T_IEEE_F32LE, 1, &n, NULL, dcpl);
    H5Pclose(dcpl);
    H5Fclose(f);
    expect_open(p, NPUC_ERR_UNSUPPORTED, "'leak': data in external files");
}

static void test_virtual(void **state) {
    (void)state;
    const char *src = tpath("vds_src.h5");
    hid_t f = mkfile(src);
    put_f32(f, "data", 8, H5P_DEFAULT);
    H5Fclose(f);
    const char *p = tpath("vds.h5");
    f = mkfile(p);
    hsize_t n = 8;
    hid_t vspace = H5Screate_simple(1, &n, NULL), sspace = H5Screate_simple(1, &n, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    assert_true(H5Pset_virtual(dcpl, vspace, src, "/data", sspace) >= 0);
    hid_t d = H5Dcreate2(f, "virt", H5T_IEEE_F32LE, vspace, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    assert_true(d >= 0);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(vspace);
    H5Sclose(sspace);
    H5Fclose(f);
    expect_open(p, NPUC_ERR_UNSUPPORTED, "'virt': virtual datasets");
}

static size_t passthru(unsigned flags, size_t ncd, const unsigned cd[], size_t nbytes,
                       size_t *buf_size, void **buf) {
    (void)flags; (void)ncd; (void)cd; (void)buf_size; (void)buf;
    return nbytes;
}

/* A filter the reading process does not have: registered while writing,
 * unregistered before reading. */
static void test_unavailable_filter(void **state) {
    (void)state;
    const H5Z_class2_t cls = {H5Z_CLASS_T_VERS, 333, 1, 1, "npuc-test-filter", NULL, NULL, passthru};
    assert_true(H5Zregister(&cls) >= 0);
    const char *p = tpath("filter.h5");
    hid_t f = mkfile(p);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hsize_t c = 4;
    H5Pset_chunk(dcpl, 1, &c);
    assert_true(H5Pset_filter(dcpl, 333, H5Z_FLAG_MANDATORY, 0, NULL) >= 0);
    put_f32(f, "filtered", 16, dcpl);
    H5Pclose(dcpl);
    H5Fclose(f);
    assert_true(H5Zunregister(333) >= 0);
    expect_open(p, NPUC_ERR_UNSUPPORTED, "'filtered': filter 333");
}

/* 2^40 one-byte elements, chunked, nothing stored: reading would allocate a
 * terabyte of fill value. */
static void test_shape_bomb_chunked(void **state) {
    (void)state;
    const char *p = tpath("bomb_chunked.h5");
    hid_t f = mkfile(p);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hsize_t dims[2] = {1ull << 20, 1ull << 20}, cd[2] = {1024, 1024};
    H5Pset_chunk(dcpl, 2, cd);
    H5Pset_deflate(dcpl, 9);
    unsigned char fillv = 42;
    H5Pset_fill_value(dcpl, H5T_NATIVE_UCHAR, &fillv);
    put_empty(f, "bomb", H5T_STD_U8LE, 2, dims, NULL, dcpl);
    H5Pclose(dcpl);
    H5Fclose(f);
    expect_open(p, NPUC_ERR_FORMAT, "'bomb'");
}

/* An unwritten contiguous gigabyte: reading it would allocate all of it as
 * fill value. */
static void test_shape_bomb_contiguous(void **state) {
    (void)state;
    const char *p = tpath("bomb_contig.h5");
    hid_t f = mkfile(p);
    hsize_t n = 1ull << 30;
    put_empty(f, "huge", H5T_STD_U8LE, 1, &n, NULL, H5P_DEFAULT);
    H5Fclose(f);
    expect_open(p, NPUC_ERR_FORMAT, "'huge': shape needs");
}

/* A contiguous dataset whose dataspace is patched to claim far more bytes
 * than the file holds (the 1.6-compatible format has no checksums, so only
 * our own checks stand between the patch and a huge read). */
static void test_contiguous_lies(void **state) {
    (void)state;
    const char *p = tpath("liar.h5");
    hid_t f = mkfile(p);
    const hsize_t MAGIC = 40961; /* 0xa001: easy to find, 8 bytes LE */
    hsize_t n = MAGIC;
    uint32_t *v = calloc(n, sizeof *v);
    hid_t sp = H5Screate_simple(1, &n, NULL);
    hid_t d = H5Dcreate2(f, "liar", H5T_STD_U32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    H5Dclose(d);
    H5Sclose(sp);
    H5Fclose(f);
    free(v);
    size_t len;
    unsigned char *b = npuc_test_read_file(p, &len);
    unsigned char pat[8] = {0x01, 0xa0, 0, 0, 0, 0, 0, 0}, rep[8] = {0, 0, 0, 0, 2, 0, 0, 0};
    int hits = 0;
    for (size_t i = 0; i + 8 <= len; i++)
        if (memcmp(b + i, pat, 8) == 0) { memcpy(b + i, rep, 8); hits++; }
    assert_true(hits >= 1);
    npuc_test_write_file(p, b, len);
    free(b);
    expect_open(p, NPUC_ERR_FORMAT, "'liar'");
}

/* A chunk far larger than the data: HDF5 would allocate the whole chunk. */
static void test_giant_chunk(void **state) {
    (void)state;
    const char *p = tpath("giant_chunk.h5");
    hid_t f = mkfile(p);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hsize_t n = 4, mx = H5S_UNLIMITED, c = 1ull << 28;
    H5Pset_chunk(dcpl, 1, &c);
    put_empty(f, "g", H5T_STD_U8LE, 1, &n, &mx, dcpl);
    H5Pclose(dcpl);
    H5Fclose(f);
    expect_open(p, NPUC_ERR_FORMAT, "chunks larger");
}

/* A deflate chunk whose compressed bytes are garbage: opening works, reading
 * that tensor fails cleanly. */
static void test_corrupt_chunk(void **state) {
    (void)state;
    const char *p = tpath("badchunk.h5");
    hid_t f = mkfile(p);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hsize_t n = 64, c = 16, off = 0;
    H5Pset_chunk(dcpl, 1, &c);
    H5Pset_deflate(dcpl, 6);
    put_empty(f, "w", H5T_IEEE_F32LE, 1, &n, NULL, dcpl);
    hid_t d = H5Dopen2(f, "w", H5P_DEFAULT);
    unsigned char junk[40];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)(i * 37 + 11);
    junk[0] = 0x78; /* a plausible zlib header, then nonsense */
    junk[1] = 0x9c;
    assert_true(H5Dwrite_chunk(d, H5P_DEFAULT, 0, &off, sizeof junk, junk) >= 0);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Fclose(f);
    npuc_model *m = open_ok(p);
    const void *data;
    assert_int_equal(npuc_model_data(g_ctx, m, 0, &data), NPUC_ERR_FORMAT);
    const char *msg = npuc_ctx_errmsg(g_ctx);
    assert_non_null(strstr(msg, "badchunk.h5"));
    assert_non_null(strstr(msg, "tensor 'w': cannot read data (HDF5: "));
    float out[64];
    assert_int_equal(npuc_model_read_f32(g_ctx, m, 0, out), NPUC_ERR_FORMAT);
    npuc_model_close(m);
}

/* ------------------------------------------------------------ shapes and types */

static void test_overflowing_dims(void **state) {
    (void)state;
    const char *p = tpath("overflow.h5");
    hid_t f = mkfile(p);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hsize_t dims[3] = {1ull << 40, 1ull << 40, 1ull << 40}, cd[3] = {1, 1, 16};
    H5Pset_chunk(dcpl, 3, cd);
    put_empty(f, "ovf", H5T_IEEE_F64LE, 3, dims, NULL, dcpl);
    H5Pclose(dcpl);
    H5Fclose(f);
    expect_open(p, NPUC_ERR_OVERFLOW, "'ovf'");
}

static void test_rank_too_high(void **state) {
    (void)state;
    const char *p = tpath("rank9.h5");
    hid_t f = mkfile(p);
    hsize_t dims[9] = {1, 1, 1, 1, 1, 1, 1, 1, 2};
    put_empty(f, "r9", H5T_IEEE_F32LE, 9, dims, NULL, H5P_DEFAULT);
    H5Fclose(f);
    expect_open(p, NPUC_ERR_UNSUPPORTED, "'r9': rank 9 exceeds 8");
}

static void test_null_dataspace(void **state) {
    (void)state;
    const char *p = tpath("null.h5");
    hid_t f = mkfile(p);
    hid_t sp = H5Screate(H5S_NULL);
    hid_t d = H5Dcreate2(f, "nothing", H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(d);
    H5Sclose(sp);
    H5Fclose(f);
    expect_open(p, NPUC_ERR_UNSUPPORTED, "'nothing': null dataspace");
}

static void test_string_dataset(void **state) {
    (void)state;
    const char *p = tpath("strings.h5");
    hid_t f = mkfile(p);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, 8);
    hsize_t n = 2;
    put_empty(f, "text", t, 1, &n, NULL, H5P_DEFAULT);
    H5Tclose(t);
    H5Fclose(f);
    expect_open(p, NPUC_ERR_UNSUPPORTED, "'text': HDF5 string type");
}

static void test_compound(void **state) {
    (void)state;
    const char *p = tpath("compound.h5");
    hid_t f = mkfile(p);
    hid_t t = H5Tcreate(H5T_COMPOUND, 8);
    H5Tinsert(t, "a", 0, H5T_STD_I32LE);
    H5Tinsert(t, "b", 4, H5T_IEEE_F32LE);
    hsize_t n = 3;
    put_empty(f, "pairs", t, 1, &n, NULL, H5P_DEFAULT);
    H5Tclose(t);
    H5Fclose(f);
    expect_open(p, NPUC_ERR_UNSUPPORTED, "'pairs': HDF5 compound type");
}

static void test_other_enum(void **state) {
    (void)state;
    const char *p = tpath("enum.h5");
    hid_t f = mkfile(p);
    hid_t t = H5Tenum_create(H5T_NATIVE_INT8);
    signed char a = 0, b = 1, c = 2;
    H5Tenum_insert(t, "RED", &a);
    H5Tenum_insert(t, "GREEN", &b);
    H5Tenum_insert(t, "BLUE", &c);
    hsize_t n = 3;
    put_empty(f, "colors", t, 1, &n, NULL, H5P_DEFAULT);
    H5Tclose(t);
    H5Fclose(f);
    expect_open(p, NPUC_ERR_UNSUPPORTED, "'colors': enum types");
}

static void test_odd_float(void **state) {
    (void)state;
    const char *p = tpath("float24.h5");
    hid_t f = mkfile(p);
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(t, 23, 16, 7, 0, 16);
    H5Tset_size(t, 3);
    H5Tset_precision(t, 24);
    H5Tset_ebias(t, 63);
    hsize_t n = 3;
    put_empty(f, "f24", t, 1, &n, NULL, H5P_DEFAULT);
    H5Tclose(t);
    H5Fclose(f);
    expect_open(p, NPUC_ERR_UNSUPPORTED, "'f24': 3-byte float");
}

static void test_npuc_dtype_mismatch(void **state) {
    (void)state;
    const char *p = tpath("mismatch.h5");
    hid_t f = mkfile(p);
    hsize_t n = 4;
    put_empty(f, "ints", H5T_STD_I16LE, 1, &n, NULL, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "ints", H5P_DEFAULT);
    str_attr(d, "npuc_dtype", "F32");
    H5Dclose(d);
    H5Fclose(f);
    expect_open(p, NPUC_ERR_FORMAT, "'ints': attribute npuc_dtype 'F32' contradicts");

    p = tpath("unknown_dtype.h5");
    f = mkfile(p);
    put_empty(f, "x", H5T_STD_I16LE, 1, &n, NULL, H5P_DEFAULT);
    d = H5Dopen2(f, "x", H5P_DEFAULT);
    str_attr(d, "npuc_dtype", "F7");
    H5Dclose(d);
    H5Fclose(f);
    expect_open(p, NPUC_ERR_FORMAT, "'x': attribute npuc_dtype 'F7' names no dtype");
}

/* ------------------------------------------------------------ names */

static void test_duplicate_names(void **state) {
    (void)state;
    const char *p = tpath("dupname.h5");
    hid_t f = mkfile(p);
    put_f32(f, "a", 2, H5P_DEFAULT);
    put_f32(f, "b", 2, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "a", H5P_DEFAULT);
    str_attr(d, "name", "same");
    H5Dclose(d);
    d = H5Dopen2(f, "b", H5P_DEFAULT);
    str_attr(d, "name", "same");
    H5Dclose(d);
    H5Fclose(f);
    expect_open(p, NPUC_ERR_FORMAT, "duplicate tensor name 'same'");
}

static void test_bad_utf8_name(void **state) {
    (void)state;
    const char *p = tpath("badutf8.h5");
    hid_t f = mkfile(p);
    put_f32(f, "a", 2, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "a", H5P_DEFAULT);
    str_attr(d, "name", "caf\xc3");
    H5Dclose(d);
    H5Fclose(f);
    expect_open(p, NPUC_ERR_FORMAT, "'a': tensor name is not valid UTF-8");
}

/* ------------------------------------------------------------ keras lists */

/* A Keras 2 skeleton: layer "dense" with dense/kernel:0. */
static hid_t keras2_file(const char *p) {
    hid_t f = mkfile(p);
    put_f32(f, "dense/dense/kernel:0", 6, H5P_DEFAULT);
    return f;
}

static void test_layer_names_wrong_type(void **state) {
    (void)state;
    const char *p = tpath("k2_layers_int.h5");
    hid_t f = keras2_file(p);
    int_array_attr(f, "layer_names");
    H5Fclose(f);
    expect_open(p, NPUC_ERR_FORMAT, "attribute 'layer_names' is not a string array");

    p = tpath("k2_layers_scalar.h5");
    f = keras2_file(p);
    str_attr(f, "layer_names", "dense");
    H5Fclose(f);
    expect_open(p, NPUC_ERR_FORMAT, "attribute 'layer_names' is not a string array");
}

static void test_weight_names_wrong_type(void **state) {
    (void)state;
    const char *p = tpath("k2_weights_int.h5");
    hid_t f = keras2_file(p);
    const char *ln[] = {"dense"};
    str_array_attr(f, "layer_names", ln, 1);
    hid_t g = H5Gopen2(f, "dense", H5P_DEFAULT);
    int_array_attr(g, "weight_names");
    H5Gclose(g);
    H5Fclose(f);
    expect_open(p, NPUC_ERR_FORMAT, "layer 'dense': attribute 'weight_names' is not a string array");

    p = tpath("k2_weights_missing_attr.h5");
    f = keras2_file(p);
    str_array_attr(f, "layer_names", ln, 1);
    H5Fclose(f);
    expect_open(p, NPUC_ERR_FORMAT, "attribute 'weight_names' is missing");
}

static void test_weight_names_missing_dataset(void **state) {
    (void)state;
    const char *p = tpath("k2_missing.h5");
    hid_t f = keras2_file(p);
    const char *ln[] = {"dense"};
    str_array_attr(f, "layer_names", ln, 1);
    hid_t g = H5Gopen2(f, "dense", H5P_DEFAULT);
    const char *wn[] = {"dense/kernel:0", "dense/bias:0"};
    str_array_attr(g, "weight_names", wn, 2);
    H5Gclose(g);
    H5Fclose(f);
    expect_open(p, NPUC_ERR_FORMAT, "weight_names entry 'dense/bias:0' names no dataset");

    /* an entry naming a group, not a dataset */
    p = tpath("k2_group_entry.h5");
    f = keras2_file(p);
    str_array_attr(f, "layer_names", ln, 1);
    g = H5Gopen2(f, "dense", H5P_DEFAULT);
    const char *wg[] = {"dense"};
    str_array_attr(g, "weight_names", wg, 1);
    H5Gclose(g);
    H5Fclose(f);
    expect_open(p, NPUC_ERR_FORMAT, "weight_names entry 'dense' names no dataset");
}

static void test_layer_missing(void **state) {
    (void)state;
    const char *p = tpath("k2_nolayer.h5");
    hid_t f = keras2_file(p);
    const char *ln[] = {"dense", "ghost"};
    str_array_attr(f, "layer_names", ln, 2);
    hid_t g = H5Gopen2(f, "dense", H5P_DEFAULT);
    const char *wn[] = {"dense/kernel:0"};
    str_array_attr(g, "weight_names", wn, 1);
    H5Gclose(g);
    H5Fclose(f);
    expect_open(p, NPUC_ERR_FORMAT, "layer_names lists 'ghost'");
}

/* A weight path running through a soft link is refused like any soft link. */
static void test_soft_link_in_weight_path(void **state) {
    (void)state;
    const char *p = tpath("k2_soft.h5");
    hid_t f = keras2_file(p);
    const char *ln[] = {"dense"};
    str_array_attr(f, "layer_names", ln, 1);
    assert_true(H5Lcreate_soft("/dense/dense", f, "dense/via", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    hid_t g = H5Gopen2(f, "dense", H5P_DEFAULT);
    const char *wn[] = {"via/kernel:0"};
    str_array_attr(g, "weight_names", wn, 1);
    H5Gclose(g);
    H5Fclose(f);
    expect_open(p, NPUC_ERR_UNSUPPORTED, "soft link");
}

/* ------------------------------------------------------------ random damage */

typedef struct range {
    uint64_t off, len;
} range;

/* The file ranges of every stored chunk of the datasets at paths. */
static size_t chunk_ranges(const char *file, const char *const *paths, size_t np, range *r,
                           size_t cap) {
    size_t n = 0;
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    assert_true(f >= 0);
    for (size_t i = 0; i < np; i++) {
        hid_t d = H5Dopen2(f, paths[i], H5P_DEFAULT);
        assert_true(d >= 0);
        hsize_t nc = 0;
        hid_t sp = H5Dget_space(d); /* 1.10.8 refuses H5S_ALL here */
        assert_true(H5Dget_num_chunks(d, sp, &nc) >= 0);
        for (hsize_t k = 0; k < nc && n < cap; k++) {
            hsize_t off[8];
            unsigned mask;
            haddr_t addr;
            hsize_t size;
            assert_true(H5Dget_chunk_info(d, sp, k, off, &mask, &addr, &size) >= 0);
            r[n].off = addr;
            r[n].len = size;
            n++;
        }
        H5Sclose(sp);
        H5Dclose(d);
    }
    H5Fclose(f);
    return n;
}

/* Flips bytes inside the compressed chunks of a valid file: opening still
 * works (the structure is intact) and every load either succeeds or is a
 * FORMAT error naming the file and tensor.  Damage to HDF5's own metadata is
 * left out on purpose: HDF5 1.10.8 leaks memory inside libhdf5 after an
 * object header fails its checksum (and then prints "infinite loop closing
 * library" at exit, h5dump too), which no caller can prevent; the truncation
 * and garbage cases above cover metadata that fails to parse. */
static void test_random_damage(void **state) {
    (void)state;
    const char *src = tpath("fuzz_src.h5");
    write_valid(src, NPUC_H5_PLAIN);
    const char *paths[] = {"conv/kernel", "conv/bias", "dense/kernel"};
    range r[64];
    size_t nr = chunk_ranges(src, paths, 3, r, 64);
    assert_true(nr >= 3);
    size_t n;
    unsigned char *orig = npuc_test_read_file(src, &n);
    assert_non_null(orig);
    unsigned char *b = malloc(n);
    uint64_t seed = 2024;
    const char *p = tpath("fuzz.h5");
    int failures = 0;
    for (int iter = 0; iter < 300; iter++) {
        memcpy(b, orig, n);
        int flips = 1 + (int)(npuc_test_rand(&seed) % 8);
        for (int k = 0; k < flips; k++) {
            const range *c = &r[npuc_test_rand(&seed) % nr];
            assert_true(c->off + c->len <= n);
            b[c->off + npuc_test_rand(&seed) % c->len] ^= (unsigned char)(1 + npuc_test_rand(&seed) % 255);
        }
        npuc_test_write_file(p, b, n);
        npuc_model *m = open_ok(p);
        for (size_t i = 0; i < npuc_model_count(m); i++) {
            const void *d;
            npuc_status st = npuc_model_data(g_ctx, m, i, &d);
            if (st == NPUC_OK) {
                npuc_model_release(m, i);
                continue;
            }
            if (st != NPUC_ERR_FORMAT) fail_msg("iteration %d: %s", iter, npuc_ctx_errmsg(g_ctx));
            assert_non_null(strstr(npuc_ctx_errmsg(g_ctx), "fuzz.h5"));
            assert_non_null(strstr(npuc_ctx_errmsg(g_ctx), npuc_model_tensor(m, i)->name));
            failures++;
        }
        npuc_model_close(m);
    }
    assert_true(failures > 0); /* the damage was noticed at least sometimes */
    free(b);
    free(orig);
}

/* The library never prints: HDF5's error stack stays off stderr while npuc
 * fails on a hostile file, and the caller's own HDF5 error handler is back
 * in place afterwards. */
static void test_library_is_silent(void **state) {
    (void)state;
    const char *p = tpath("silent.h5");
    hid_t f = mkfile(p);
    put_f32(f, "data", 4, H5P_DEFAULT);
    H5Lcreate_soft("/data", f, "alias", H5P_DEFAULT, H5P_DEFAULT);
    H5Fclose(f);
    const char *log = tpath("stderr.txt");
    fflush(stderr);
    int saved = dup(2);
    FILE *lf = fopen(log, "w");
    assert_non_null(lf);
    dup2(fileno(lf), 2);
    npuc_model *m;
    npuc_status a = npuc_model_open(g_ctx, p, NULL, &m);
    npuc_status b = npuc_model_open(g_ctx, tpath("garbage.h5"), NULL, &m);
    npuc_writer *w;
    npuc_status c = npuc_writer_open(g_ctx, tpath("nodir/x.h5"), NULL, &w);
    npuc_tensor_info t;
    memset(&t, 0, sizeof t);
    t.name = "a";
    t.dtype = NPUC_DTYPE_U8;
    npuc_writer_declare(w, &t);
    unsigned char one = 1;
    npuc_status d = npuc_writer_write(w, &one, 1);
    npuc_writer_abort(w);
    H5E_auto2_t fn = NULL;
    void *data = NULL;
    H5Eget_auto2(H5E_DEFAULT, &fn, &data);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    fclose(lf);
    assert_int_equal(a, NPUC_ERR_UNSUPPORTED);
    assert_int_equal(b, NPUC_ERR_FORMAT);
    assert_int_equal(c, NPUC_OK);
    assert_int_equal(d, NPUC_ERR_IO);
    assert_non_null(fn); /* HDF5's default printer, restored */
    size_t n = 0;
    char *text = npuc_test_read_file(log, &n);
    if (n) fail_msg("the library printed: %s", text);
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_garbage_after_signature),
        cmocka_unit_test(test_empty_and_foreign),
        cmocka_unit_test(test_soft_link),
        cmocka_unit_test(test_external_link),
        cmocka_unit_test(test_hardlink_cycle),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_external_storage),
        cmocka_unit_test(test_virtual),
        cmocka_unit_test(test_unavailable_filter),
        cmocka_unit_test(test_shape_bomb_chunked),
        cmocka_unit_test(test_shape_bomb_contiguous),
        cmocka_unit_test(test_contiguous_lies),
        cmocka_unit_test(test_giant_chunk),
        cmocka_unit_test(test_corrupt_chunk),
        cmocka_unit_test(test_overflowing_dims),
        cmocka_unit_test(test_rank_too_high),
        cmocka_unit_test(test_null_dataspace),
        cmocka_unit_test(test_string_dataset),
        cmocka_unit_test(test_compound),
        cmocka_unit_test(test_other_enum),
        cmocka_unit_test(test_odd_float),
        cmocka_unit_test(test_npuc_dtype_mismatch),
        cmocka_unit_test(test_duplicate_names),
        cmocka_unit_test(test_bad_utf8_name),
        cmocka_unit_test(test_layer_names_wrong_type),
        cmocka_unit_test(test_weight_names_wrong_type),
        cmocka_unit_test(test_weight_names_missing_dataset),
        cmocka_unit_test(test_layer_missing),
        cmocka_unit_test(test_soft_link_in_weight_path),
        cmocka_unit_test(test_random_damage),
        cmocka_unit_test(test_library_is_silent),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
