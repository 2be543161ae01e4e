/*
 * test_h5_roundtrip.c - the HDF5 backend writes what it reads and reads what
 * others write.
 *
 *   - every dtype x ranks 0..4 x zero-sized dims x awkward UTF-8 names, in all
 *     three trees (plain, Keras 2, Keras 3), deflate on and off: names,
 *     dtypes, shapes, layouts, bytes, groups and metadata come back exactly;
 *   - the same input gives a byte-identical file twice;
 *   - files built with the HDF5 API the way h5py and Keras build them:
 *     big-endian data, h5py bool, no creation order (numeric var order),
 *     Keras 2 chunked layer_names, whole-model /model_weights, Keras 3 trees,
 *     leftover datasets outside the Keras lists;
 *   - the real .h5 files in ../shared/data against their .json catalogs.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>
#include <jansson.h>

#include "npuc/npuc.h"
#include "layout_rules.h"

/* ------------------------------------------------------------ fixtures */

typedef struct spec {
    char name[96];
    char group[48]; /* "" = none */
    npuc_dtype dt;
    int rank;
    int64_t shape[NPUC_MAX_RANK];
} spec;

typedef struct specs {
    spec v[256];
    size_t n;
} specs;

static const npuc_dtype ALL_DT[] = {
    NPUC_DTYPE_F64, NPUC_DTYPE_F32, NPUC_DTYPE_F16, NPUC_DTYPE_BF16, NPUC_DTYPE_F8_E4M3,
    NPUC_DTYPE_F8_E5M2, NPUC_DTYPE_I64, NPUC_DTYPE_I32, NPUC_DTYPE_I16, NPUC_DTYPE_I8,
    NPUC_DTYPE_U8, NPUC_DTYPE_BOOL, NPUC_DTYPE_U16, NPUC_DTYPE_U32, NPUC_DTYPE_U64};
#define N_DT (sizeof ALL_DT / sizeof ALL_DT[0])

static void add(specs *s, const char *name, const char *group, npuc_dtype dt, int rank, ...) {
    assert_true(s->n < sizeof s->v / sizeof s->v[0]);
    spec *p = &s->v[s->n++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    snprintf(p->group, sizeof p->group, "%s", group ? group : "");
    p->dt = dt;
    p->rank = rank;
    va_list ap;
    va_start(ap, rank);
    for (int i = 0; i < rank; i++) p->shape[i] = va_arg(ap, int);
    va_end(ap);
}

/* Every dtype at ranks 0..4 plus zero-sized shapes, grouped by dtype, then
 * names that are not safe HDF5 paths or collide with each other. */
static void make_specs(specs *s, int groups) {
    s->n = 0;
    char name[96], grp[48];
    for (size_t d = 0; d < N_DT; d++) {
        const char *dn = npuc_dtype_name(ALL_DT[d]);
        snprintf(grp, sizeof grp, "layer_%s", dn);
        const char *g = groups ? grp : NULL;
        snprintf(name, sizeof name, "%s/scalar", dn); add(s, name, g, ALL_DT[d], 0);
        snprintf(name, sizeof name, "%s/r1", dn); add(s, name, g, ALL_DT[d], 1, 7);
        snprintf(name, sizeof name, "%s/r2", dn); add(s, name, g, ALL_DT[d], 2, 3, 5);
        snprintf(name, sizeof name, "%s/r3", dn); add(s, name, g, ALL_DT[d], 3, 2, 3, 4);
        snprintf(name, sizeof name, "%s/r4", dn); add(s, name, g, ALL_DT[d], 4, 2, 1, 3, 2);
        snprintf(name, sizeof name, "%s/empty", dn); add(s, name, g, ALL_DT[d], 1, 0);
        snprintf(name, sizeof name, "%s/empty3", dn); add(s, name, g, ALL_DT[d], 3, 3, 0, 2);
    }
    const char *w = groups ? "weird/grp" : NULL;
    add(s, "with space.and.dots", w, NPUC_DTYPE_F32, 1, 4);
    add(s, "ünïcødé/名前/веса", w, NPUC_DTYPE_F16, 2, 2, 2);
    char bait[16];
    snprintf(bait, sizeof bait, "t%05zu", s->n); /* the plain writer's name for "../escape" */
    add(s, "../escape", w, NPUC_DTYPE_F32, 1, 2);
    add(s, "/leading", w, NPUC_DTYPE_I8, 1, 3);
    add(s, "trailing/", w, NPUC_DTYPE_U8, 1, 3);
    add(s, "double//slash", w, NPUC_DTYPE_I16, 1, 2);
    add(s, ".", w, NPUC_DTYPE_F32, 0);
    add(s, "", w, NPUC_DTYPE_F32, 1, 1);
    add(s, "x/y", w, NPUC_DTYPE_F32, 1, 2);
    add(s, "x", w, NPUC_DTYPE_F32, 1, 2); /* "x" is a group by now */
    add(s, bait, w, NPUC_DTYPE_F32, 1, 2); /* collides with a generated path */
    add(s, "big", groups ? "ünï layer" : NULL, NPUC_DTYPE_F32, 2, 300, 1000); /* > 1 MiB: several chunks */
    add(s, "wide", groups ? "../bad layer" : NULL, NPUC_DTYPE_BF16, 2, 2, 600000); /* row > 1 MiB */
}

static void fill(void *buf, size_t n, npuc_dtype dt, uint64_t *seed) {
    unsigned char *b = buf;
    for (size_t i = 0; i < n; i++) {
        uint64_t r = npuc_test_rand(seed);
        b[i] = (unsigned char)(dt == NPUC_DTYPE_BOOL ? (r >> 17) & 1 : r >> 24);
    }
}

static void *data_of(const spec *p, size_t *n) {
    uint64_t numel = 1;
    for (int i = 0; i < p->rank; i++) numel *= (uint64_t)p->shape[i];
    *n = (size_t)(numel * npuc_dtype_size(p->dt));
    void *b = malloc(*n ? *n : 1);
    assert_non_null(b);
    uint64_t seed = 0x1234567 + (uint64_t)strlen(p->name) * 977 + (uint64_t)p->dt * 131 + *n;
    fill(b, *n, p->dt, &seed);
    return b;
}

static const char *META_K[] = {"backend", "keras_version", "greeting", "json", "format"};
static const char *META_V[] = {"tensorflow", "2.15.0", "héllo wörld", "{\"a\": [1, 2, {\"b\": null}]}",
                               "tf"};

static char *big_meta(void) {
    size_t n = 150000;
    char *s = malloc(n + 1);
    assert_non_null(s);
    for (size_t i = 0; i < n; i++) s[i] = (char)('a' + i % 26);
    s[n] = 0;
    return s;
}

static void write_specs(npuc_ctx *ctx, const char *path, const specs *s, int style, int deflate) {
    npuc_write_opts o = npuc_write_opts_defaults();
    char level[16];
    snprintf(level, sizeof level, "%d", deflate);
    assert_int_equal(npuc_write_opts_set(ctx, &o, "structure", npuc_h5_style_name((npuc_h5_style)style)), NPUC_OK);
    assert_int_equal(npuc_write_opts_set(ctx, &o, "deflate", level), NPUC_OK);
    o.overwrite = 1;
    npuc_writer *w;
    assert_int_equal(npuc_writer_open(ctx, path, &o, &w), NPUC_OK);
    for (size_t i = 0; i < sizeof META_K / sizeof META_K[0]; i++)
        assert_int_equal(npuc_writer_meta(w, META_K[i], META_V[i]), NPUC_OK);
    char *big = big_meta();
    assert_int_equal(npuc_writer_meta(w, "model_config", big), NPUC_OK);
    assert_int_equal(npuc_writer_meta(w, "layer_names", "must not confuse the reader"), NPUC_OK);
    free(big);
    for (size_t i = 0; i < s->n; i++) {
        const spec *p = &s->v[i];
        npuc_tensor_info t;
        memset(&t, 0, sizeof t);
        t.name = p->name;
        t.dtype = p->dt;
        t.rank = p->rank;
        memcpy(t.shape, p->shape, sizeof t.shape);
        t.group = p->group[0] ? p->group : NULL;
        t.layout = p->rank == 2 ? NPUC_LAYOUT_IO : NPUC_LAYOUT_NONE;
        npuc_status st = npuc_writer_declare(w, &t);
        if (st != NPUC_OK) fail_msg("declare %s: %s", p->name, npuc_ctx_errmsg(ctx));
    }
    for (size_t i = 0; i < s->n; i++) {
        size_t n;
        void *b = data_of(&s->v[i], &n);
        npuc_status st = npuc_writer_write(w, b, n);
        free(b);
        if (st != NPUC_OK) fail_msg("write %s: %s", s->v[i].name, npuc_ctx_errmsg(ctx));
    }
    npuc_status st = npuc_writer_finish(w);
    if (st != NPUC_OK) fail_msg("finish: %s", npuc_ctx_errmsg(ctx));
}

/* The expected Keras group of spec i: its group, or in Keras 2 its own name. */
static const char *expect_group(const spec *p, int style) {
    if (style == NPUC_H5_PLAIN) return NULL;
    if (p->group[0]) return p->group;
    return style == NPUC_H5_KERAS2 ? p->name : NULL;
}

static void check_model(npuc_ctx *ctx, const char *path, const specs *s, int style) {
    npuc_model *m;
    npuc_status st = npuc_model_open(ctx, path, NULL, &m);
    if (st != NPUC_OK) fail_msg("open %s: %s", path, npuc_ctx_errmsg(ctx));
    assert_int_equal(npuc_model_format(m), NPUC_FORMAT_HDF5);
    assert_int_equal(npuc_model_h5_style(m), style);
    assert_int_equal(npuc_model_count(m), s->n);
    for (size_t i = 0; i < s->n; i++) {
        const spec *p = &s->v[i];
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        if (strcmp(t->name, p->name) != 0) fail_msg("tensor %zu: '%s', expected '%s'", i, t->name, p->name);
        assert_int_equal(t->dtype, p->dt);
        assert_int_equal(t->rank, p->rank);
        for (int k = 0; k < p->rank; k++) assert_int_equal(t->shape[k], p->shape[k]);
        /* Declared layouts survive; NONE means "no opinion": the reader's
         * decision, which weighs the file's "format" = "tf" metadata. */
        npuc__layout_src src;
        npuc__layout_decision d;
        assert_int_equal(npuc__layout_src_init(&src, style != NPUC_H5_PLAIN, "tf", NULL), 0);
        npuc__layout_decide(&src, t, &d);
        npuc__layout_src_free(&src);
        assert_int_equal(t->layout, p->rank == 2 ? NPUC_LAYOUT_IO : d.layout);
        const char *g = expect_group(p, style);
        if (g) {
            assert_non_null(t->group);
            assert_string_equal(t->group, g);
        } else {
            assert_null(t->group);
        }
        size_t n;
        void *want = data_of(p, &n);
        const void *got;
        st = npuc_model_data(ctx, m, i, &got);
        if (st != NPUC_OK) fail_msg("data %s: %s", p->name, npuc_ctx_errmsg(ctx));
        assert_int_equal(t->nbytes, n);
        assert_memory_equal(got, want, n);
        npuc_model_release(m, i);
        free(want);
    }
    /* Groups: each distinct group once, in order of first appearance. */
    size_t ng = 0;
    for (size_t i = 0; i < s->n; i++) {
        const char *g = expect_group(&s->v[i], style);
        if (!g) continue;
        int dup = 0;
        for (size_t j = 0; j < i; j++) {
            const char *h = expect_group(&s->v[j], style);
            if (h && strcmp(h, g) == 0) dup = 1;
        }
        if (dup) continue;
        assert_true(ng < npuc_model_group_count(m));
        assert_string_equal(npuc_model_group(m, ng), g);
        ng++;
    }
    assert_int_equal(npuc_model_group_count(m), ng);
    for (size_t i = 0; i < sizeof META_K / sizeof META_K[0]; i++) {
        const char *v = npuc_model_meta_get(m, META_K[i]);
        assert_non_null(v);
        assert_string_equal(v, META_V[i]);
    }
    char *big = big_meta();
    assert_non_null(npuc_model_meta_get(m, "model_config"));
    assert_string_equal(npuc_model_meta_get(m, "model_config"), big);
    free(big);
    assert_null(npuc_model_meta_get(m, "layer_names"));
    npuc_model_close(m);
}

static void roundtrip(int style, int deflate) {
    npuc_ctx *ctx;
    assert_int_equal(npuc_ctx_new(&ctx), NPUC_OK);
    specs *s = calloc(1, sizeof *s);
    assert_non_null(s);
    make_specs(s, style != NPUC_H5_PLAIN);
    if (style == NPUC_H5_KERAS3) /* loose tensors go last: /vars is read after layers/ */
        add(s, "loose", NULL, NPUC_DTYPE_F32, 1, 3);
    if (style == NPUC_H5_KERAS2)
        add(s, "own.layer", NULL, NPUC_DTYPE_F32, 1, 3);
    char a[64], b[64];
    snprintf(a, sizeof a, "rt_%d_%d_a.h5", style, deflate);
    snprintf(b, sizeof b, "rt_%d_%d_b.h5", style, deflate);
    char pa[1024], pb[1024];
    snprintf(pa, sizeof pa, "%s", npuc_test_path(a));
    snprintf(pb, sizeof pb, "%s", npuc_test_path(b));
    write_specs(ctx, pa, s, style, deflate);
    write_specs(ctx, pb, s, style, deflate);
    check_model(ctx, pa, s, style);
    size_t na, nb;
    void *fa = npuc_test_read_file(pa, &na), *fb = npuc_test_read_file(pb, &nb);
    assert_non_null(fa);
    assert_non_null(fb);
    assert_int_equal(na, nb);
    assert_memory_equal(fa, fb, na); /* deterministic */
    free(fa);
    free(fb);
    assert_false(npuc_test_exists(npuc_test_path("rt.h5.tmp")));
    free(s);
    npuc_ctx_free(ctx);
}

static void test_plain(void **state) { (void)state; roundtrip(NPUC_H5_PLAIN, 4); }
static void test_plain_contig(void **state) { (void)state; roundtrip(NPUC_H5_PLAIN, 0); }
static void test_keras2(void **state) { (void)state; roundtrip(NPUC_H5_KERAS2, 4); }
static void test_keras2_contig(void **state) { (void)state; roundtrip(NPUC_H5_KERAS2, 0); }
static void test_keras3(void **state) { (void)state; roundtrip(NPUC_H5_KERAS3, 1); }
static void test_keras3_contig(void **state) { (void)state; roundtrip(NPUC_H5_KERAS3, 0); }

/* Copying a model (convert) keeps everything, also across styles. */
static void test_convert(void **state) {
    (void)state;
    npuc_ctx *ctx;
    assert_int_equal(npuc_ctx_new(&ctx), NPUC_OK);
    specs *s = calloc(1, sizeof *s);
    assert_non_null(s);
    make_specs(s, 1);
    char src[1024], dst[1024];
    snprintf(src, sizeof src, "%s", npuc_test_path("conv_src.h5"));
    snprintf(dst, sizeof dst, "%s", npuc_test_path("conv_dst.h5"));
    write_specs(ctx, src, s, NPUC_H5_KERAS2, 4);
    npuc_model *m;
    assert_int_equal(npuc_model_open(ctx, src, NULL, &m), NPUC_OK);
    npuc_status st = npuc_model_convert(ctx, m, dst, NULL, 0, NPUC_DTYPE_F32);
    if (st != NPUC_OK) fail_msg("convert: %s", npuc_ctx_errmsg(ctx));
    npuc_model_close(m);
    check_model(ctx, dst, s, NPUC_H5_KERAS2);
    free(s);
    npuc_ctx_free(ctx);
}

/* A failing writer leaves nothing behind and reports the output path. */
static void test_write_errors(void **state) {
    (void)state;
    npuc_ctx *ctx;
    assert_int_equal(npuc_ctx_new(&ctx), NPUC_OK);
    const char *bad = npuc_test_path("no/such/dir/out.h5");
    npuc_writer *w;
    assert_int_equal(npuc_writer_open(ctx, bad, NULL, &w), NPUC_OK);
    npuc_tensor_info t;
    memset(&t, 0, sizeof t);
    t.name = "a";
    t.dtype = NPUC_DTYPE_F32;
    t.rank = 1;
    t.shape[0] = 2;
    assert_int_equal(npuc_writer_declare(w, &t), NPUC_OK);
    float v[2] = {1, 2};
    assert_int_equal(npuc_writer_write(w, v, sizeof v), NPUC_ERR_IO);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "out.h5"));
    npuc_writer_abort(w);
    assert_false(npuc_test_exists(bad));

    /* Aborting halfway removes the temporary file. */
    const char *p = npuc_test_path("aborted.h5");
    assert_int_equal(npuc_writer_open(ctx, p, NULL, &w), NPUC_OK);
    assert_int_equal(npuc_writer_declare(w, &t), NPUC_OK);
    t.name = "b";
    assert_int_equal(npuc_writer_declare(w, &t), NPUC_OK);
    assert_int_equal(npuc_writer_write(w, v, sizeof v), NPUC_OK);
    npuc_writer_abort(w);
    assert_false(npuc_test_exists(p));
    assert_false(npuc_test_exists(npuc_test_path("aborted.h5.tmp")));

    /* An empty metadata key cannot become an attribute. */
    assert_int_equal(npuc_writer_open(ctx, p, NULL, &w), NPUC_OK);
    assert_int_equal(npuc_writer_meta(w, "", "x"), NPUC_OK);
    assert_int_equal(npuc_writer_finish(w), NPUC_ERR_UNSUPPORTED);
    assert_false(npuc_test_exists(p));

    /* No tensors at all is a valid (empty) file. */
    assert_int_equal(npuc_writer_open(ctx, p, NULL, &w), NPUC_OK);
    assert_int_equal(npuc_writer_finish(w), NPUC_OK);
    npuc_model *m;
    assert_int_equal(npuc_model_open(ctx, p, NULL, &m), NPUC_OK);
    assert_int_equal(npuc_model_count(m), 0);
    npuc_model_close(m);
    npuc_ctx_free(ctx);
}

/* ------------------------------------------------------------ foreign files */

static hid_t new_file(const char *path, int track_order) {
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    if (track_order)
        H5Pset_link_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
    H5Pclose(fcpl);
    assert_true(f >= 0);
    return f;
}

static void put(hid_t loc, const char *name, hid_t ftype, hid_t mtype, int rank, const hsize_t *dims,
                const void *data) {
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t sp = rank ? H5Screate_simple(rank, dims, NULL) : H5Screate(H5S_SCALAR);
    hid_t d = H5Dcreate2(loc, name, ftype, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(d >= 0);
    assert_true(H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0);
    H5Dclose(d);
    H5Sclose(sp);
    H5Pclose(lcpl);
}

static void fixed_str_array(hid_t obj, const char *name, const char *const *v, size_t n, size_t w) {
    char *buf = calloc(n ? n : 1, w);
    for (size_t i = 0; i < n; i++) memcpy(buf + i * w, v[i], strlen(v[i]));
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, w);
    hsize_t dim = n;
    hid_t s = H5Screate_simple(1, &dim, NULL);
    hid_t a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(a >= 0);
    assert_true(H5Awrite(a, t, buf) >= 0);
    H5Aclose(a);
    H5Sclose(s);
    H5Tclose(t);
    free(buf);
}

static void vlen_str_array(hid_t obj, const char *name, const char *const *v, size_t n) {
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

static npuc_model *open_ok(npuc_ctx *ctx, const char *path) {
    npuc_model *m;
    npuc_status st = npuc_model_open(ctx, path, NULL, &m);
    if (st != NPUC_OK) fail_msg("open %s: %s", path, npuc_ctx_errmsg(ctx));
    return m;
}

static const npuc_tensor_info *find(const npuc_model *m, const char *name) {
    size_t i;
    if (npuc_model_find(m, name, &i) != 0) fail_msg("no tensor '%s'", name);
    return npuc_model_tensor(m, i);
}

/* Big-endian data, h5py's float16 and bool, order by name without creation
 * order, numbers compared numerically. */
static void test_foreign_plain(void **state) {
    (void)state;
    npuc_ctx *ctx;
    assert_int_equal(npuc_ctx_new(&ctx), NPUC_OK);
    const char *p = npuc_test_path("foreign_plain.h5");
    hid_t f = new_file(p, 0);
    hsize_t d3 = 3, d2[2] = {2, 2};
    int32_t i32[3] = {1, -2, 0x01020304};
    float f32[4] = {1.5f, -2.25f, 1e-3f, 65504.0f};
    uint16_t u16[3] = {1, 0xabcd, 65535};
    put(f, "be/i32", H5T_STD_I32BE, H5T_NATIVE_INT32, 1, &d3, i32);
    put(f, "be/f32", H5T_IEEE_F32BE, H5T_NATIVE_FLOAT, 2, d2, f32);
    put(f, "be/u16", H5T_STD_U16BE, H5T_NATIVE_UINT16, 1, &d3, u16);
    /* h5py float16, big-endian this time */
    hid_t h16 = H5Tcopy(H5T_IEEE_F32BE);
    H5Tset_fields(h16, 15, 10, 5, 0, 10);
    H5Tset_size(h16, 2);
    H5Tset_ebias(h16, 15);
    hid_t h16le = H5Tcopy(h16);
    H5Tset_order(h16le, H5T_ORDER_LE);
    uint16_t half[3] = {0x3c00, 0xc000, 0x7e00}; /* 1, -2, NaN */
    put(f, "be/f16", h16, h16le, 1, &d3, half);
    H5Tclose(h16);
    H5Tclose(h16le);
    /* h5py bool */
    hid_t bt = H5Tenum_create(H5T_NATIVE_INT8);
    signed char fv = 0, tv = 1;
    H5Tenum_insert(bt, "FALSE", &fv);
    H5Tenum_insert(bt, "TRUE", &tv);
    unsigned char bools[3] = {1, 0, 1};
    put(f, "mask", bt, bt, 1, &d3, bools);
    H5Tclose(bt);
    double sc = 3.25;
    put(f, "scalar", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 0, NULL, &sc);
    const char *order[] = {"vars/10", "vars/2", "vars/0", "vars/1"};
    for (size_t i = 0; i < 4; i++) put(f, order[i], H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, &d3, f32);
    /* a root attribute that is not a scalar string is no metadata */
    const char *arr[] = {"a", "b"};
    fixed_str_array(f, "an_array", arr, 2, 2);
    H5Fclose(f);

    npuc_model *m = open_ok(ctx, p);
    assert_int_equal(npuc_model_h5_style(m), NPUC_H5_PLAIN);
    assert_int_equal(npuc_model_count(m), 10);
    const char *want[] = {"be/f16", "be/f32", "be/i32", "be/u16", "mask", "scalar",
                          "vars/0", "vars/1", "vars/2", "vars/10"};
    for (size_t i = 0; i < 10; i++) assert_string_equal(npuc_model_tensor(m, i)->name, want[i]);
    const void *d;
    assert_int_equal(find(m, "be/i32")->dtype, NPUC_DTYPE_I32);
    assert_int_equal(npuc_model_data(ctx, m, 2, &d), NPUC_OK);
    assert_memory_equal(d, i32, sizeof i32); /* little-endian on this host */
    assert_int_equal(find(m, "be/f32")->dtype, NPUC_DTYPE_F32);
    assert_int_equal(npuc_model_data(ctx, m, 1, &d), NPUC_OK);
    assert_memory_equal(d, f32, sizeof f32);
    assert_int_equal(find(m, "be/u16")->dtype, NPUC_DTYPE_U16);
    assert_int_equal(npuc_model_data(ctx, m, 3, &d), NPUC_OK);
    assert_memory_equal(d, u16, sizeof u16);
    assert_int_equal(find(m, "be/f16")->dtype, NPUC_DTYPE_F16);
    assert_int_equal(npuc_model_data(ctx, m, 0, &d), NPUC_OK);
    assert_memory_equal(d, half, sizeof half); /* NaN payload kept: no numeric conversion */
    assert_int_equal(find(m, "mask")->dtype, NPUC_DTYPE_BOOL);
    assert_int_equal(npuc_model_data(ctx, m, 4, &d), NPUC_OK);
    assert_memory_equal(d, bools, 3);
    const npuc_tensor_info *t = find(m, "scalar");
    assert_int_equal(t->rank, 0);
    assert_int_equal(t->numel, 1);
    float x;
    assert_int_equal(npuc_model_read_f32(ctx, m, 5, &x), NPUC_OK);
    assert_true(x == 3.25f);
    assert_int_equal(npuc_model_meta_count(m), 0);
    npuc_model_close(m);
    npuc_ctx_free(ctx);
}

/* Keras 2 variants: vlen names, layer_names split into layer_names0/1 (Keras
 * does that past 64 KiB), an empty float64 weight_names (Keras writes
 * np.asarray([]) for layers without weights), a dataset no list reaches, and
 * a whole-model file with /model_weights. */
static void test_foreign_keras2(void **state) {
    (void)state;
    npuc_ctx *ctx;
    assert_int_equal(npuc_ctx_new(&ctx), NPUC_OK);
    const char *p = npuc_test_path("foreign_k2.h5");
    hid_t f = new_file(p, 0);
    hsize_t d2[2] = {3, 4}, d1 = 4;
    float k[12] = {0}, b[4] = {0};
    put(f, "dense/dense/kernel:0", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, d2, k);
    put(f, "dense/dense/bias:0", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, &d1, b);
    put(f, "conv/w", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, d2, k);
    put(f, "stray/data", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, &d1, b);
    hid_t g = H5Gcreate2(f, "flatten", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t zero = 0;
    hid_t sp = H5Screate_simple(1, &zero, NULL);
    hid_t a = H5Acreate2(g, "weight_names", H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Aclose(a);
    H5Sclose(sp);
    H5Gclose(g);
    const char *l0[] = {"dense", "flatten"}, *l1[] = {"conv"};
    fixed_str_array(f, "layer_names0", l0, 2, 7);
    fixed_str_array(f, "layer_names1", l1, 1, 4);
    g = H5Gopen2(f, "dense", H5P_DEFAULT);
    const char *wn[] = {"dense/kernel:0", "dense/bias:0"};
    vlen_str_array(g, "weight_names", wn, 2);
    H5Gclose(g);
    g = H5Gopen2(f, "conv", H5P_DEFAULT);
    const char *wc[] = {"w"};
    vlen_str_array(g, "weight_names", wc, 1);
    H5Gclose(g);
    H5Fclose(f);

    npuc_model *m = open_ok(ctx, p);
    assert_int_equal(npuc_model_h5_style(m), NPUC_H5_KERAS2);
    assert_int_equal(npuc_model_count(m), 4);
    assert_string_equal(npuc_model_tensor(m, 0)->name, "dense/kernel:0");
    assert_string_equal(npuc_model_tensor(m, 1)->name, "dense/bias:0");
    assert_string_equal(npuc_model_tensor(m, 2)->name, "w");
    assert_string_equal(npuc_model_tensor(m, 3)->name, "stray/data");
    assert_null(npuc_model_tensor(m, 3)->group);
    assert_string_equal(npuc_model_tensor(m, 0)->group, "dense");
    assert_int_equal(npuc_model_tensor(m, 0)->layout, NPUC_LAYOUT_IO); /* Keras Dense kernel */
    assert_int_equal(npuc_model_group_count(m), 3);
    assert_string_equal(npuc_model_group(m, 1), "flatten");
    assert_string_equal(npuc_model_group(m, 2), "conv");
    npuc_model_close(m);

    /* Whole-model file: the weights live under /model_weights. */
    p = npuc_test_path("foreign_k2_full.h5");
    f = new_file(p, 1);
    put(f, "model_weights/dense/dense/kernel:0", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, d2, k);
    put(f, "optimizer_weights/Adam/iter:0", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, &d1, b);
    g = H5Gopen2(f, "model_weights", H5P_DEFAULT);
    const char *ln[] = {"dense"};
    fixed_str_array(g, "layer_names", ln, 1, 5);
    hid_t lg = H5Gopen2(g, "dense", H5P_DEFAULT);
    const char *wk[] = {"dense/kernel:0"};
    fixed_str_array(lg, "weight_names", wk, 1, 14);
    H5Gclose(lg);
    H5Gclose(g);
    H5Fclose(f);
    m = open_ok(ctx, p);
    assert_int_equal(npuc_model_h5_style(m), NPUC_H5_KERAS2);
    assert_int_equal(npuc_model_count(m), 2);
    assert_string_equal(npuc_model_tensor(m, 0)->name, "dense/kernel:0");
    assert_string_equal(npuc_model_tensor(m, 1)->name, "optimizer_weights/Adam/iter:0");
    npuc_model_close(m);
    npuc_ctx_free(ctx);
}

/* A Keras 3 tree as keras.saving writes it (no creation order: by name). */
static void test_foreign_keras3(void **state) {
    (void)state;
    npuc_ctx *ctx;
    assert_int_equal(npuc_ctx_new(&ctx), NPUC_OK);
    const char *p = npuc_test_path("foreign_k3.weights.h5");
    hid_t f = new_file(p, 0);
    hsize_t d4[4] = {3, 3, 2, 8}, d1 = 8, d2[2] = {8, 4};
    float *z = calloc(3 * 3 * 2 * 8, sizeof *z);
    put(f, "layers/conv2d/vars/0", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, d4, z);
    put(f, "layers/conv2d/vars/1", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, &d1, z);
    put(f, "layers/dense/vars/0", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, d2, z);
    put(f, "layers/functional/layers/dense_1/vars/0", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, d2, z);
    hid_t g = H5Gcreate2(f, "vars", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Gclose(g);
    free(z);
    H5Fclose(f);
    npuc_model *m = open_ok(ctx, p);
    assert_int_equal(npuc_model_h5_style(m), NPUC_H5_KERAS3);
    assert_int_equal(npuc_model_count(m), 4);
    assert_string_equal(npuc_model_tensor(m, 0)->name, "layers/conv2d/vars/0");
    assert_string_equal(npuc_model_tensor(m, 0)->group, "conv2d");
    assert_int_equal(npuc_model_tensor(m, 0)->layout, NPUC_LAYOUT_HWIO); /* Keras convention */
    assert_string_equal(npuc_model_tensor(m, 2)->group, "dense");
    assert_string_equal(npuc_model_tensor(m, 3)->group, "functional/layers/dense_1");
    assert_int_equal(npuc_model_group_count(m), 3);
    npuc_model_close(m);
    npuc_ctx_free(ctx);
}

/* ------------------------------------------------------------ shared data */

static void check_shared(const char *stem) {
    char h5[256], js[256];
    snprintf(h5, sizeof h5, "%s.h5", stem);
    snprintf(js, sizeof js, "%s.json", stem);
    const char *hp = npuc_test_shared_file(h5);
    const char *jp = npuc_test_shared_file(js);
    if (!hp || !jp) {
        print_message("skipping %s: not in the shared data folder\n", stem);
        return;
    }
    json_error_t e;
    json_t *cat = json_load_file(jp, 0, &e);
    assert_non_null(cat);
    npuc_ctx *ctx;
    assert_int_equal(npuc_ctx_new(&ctx), NPUC_OK);
    npuc_model *m = open_ok(ctx, hp);
    assert_int_equal(npuc_model_h5_style(m), NPUC_H5_KERAS2);
    assert_int_equal(npuc_model_count(m), json_integer_value(json_object_get(cat, "n_tensors")));
    assert_non_null(npuc_model_meta_get(m, "keras_version"));
    const char *lists[] = {"conv_weights", "linear_2d_weights"};
    size_t checked = 0;
    for (size_t l = 0; l < 2; l++) {
        size_t i;
        json_t *ent;
        json_array_foreach(json_object_get(cat, lists[l]), i, ent) {
            const char *name = json_string_value(json_array_get(ent, 0));
            json_t *shape = json_array_get(ent, 1);
            const npuc_tensor_info *t = find(m, name);
            assert_int_equal(t->rank, json_array_size(shape));
            for (int k = 0; k < t->rank; k++)
                assert_int_equal(t->shape[k], json_integer_value(json_array_get(shape, (size_t)k)));
            checked++;
        }
    }
    assert_true(checked > 0);
    /* Every tensor's data loads and has its byte count. */
    for (size_t i = 0; i < npuc_model_count(m); i++) {
        const void *d;
        npuc_status st = npuc_model_data(ctx, m, i, &d);
        if (st != NPUC_OK) fail_msg("%s", npuc_ctx_errmsg(ctx));
        npuc_model_release(m, i);
    }
    if (strcmp(stem, "nsfwjs_mobilenet_v2") == 0) {
        assert_non_null(npuc_model_meta_get(m, "model_config"));
        const npuc_tensor_info *t = find(m, "Conv1/kernel");
        assert_int_equal(t->layout, NPUC_LAYOUT_HWIO);
        assert_int_equal(npuc_layout_out_axis(t->layout, t->rank), 3);
        t = find(m, "dense_1/kernel");
        assert_int_equal(t->layout, NPUC_LAYOUT_IO);
        assert_string_equal(npuc_model_group(m, 0), "Conv1");
    }
    if (strcmp(stem, "ppocr_mobile_v2_cls") == 0) {
        assert_string_equal(npuc_model_meta_get(m, "format"), "pt");
        size_t i;
        json_t *ent;
        json_array_foreach(json_object_get(cat, "conv_weights"), i, ent) {
            const npuc_tensor_info *t = find(m, json_string_value(json_array_get(ent, 0)));
            assert_int_equal(t->layout, NPUC_LAYOUT_OIHW);
            assert_int_equal(npuc_layout_out_axis(t->layout, t->rank), 0);
        }
    }
    npuc_model_close(m);
    npuc_ctx_free(ctx);
    json_decref(cat);
}

static void test_shared(void **state) {
    (void)state;
    if (!npuc_test_shared()) skip();
    check_shared("nsfwjs_mobilenet_v2");
    check_shared("ppocr_mobile_v2_cls");
    check_shared("ppocrv4_rec");
    check_shared("silero_vad_v5");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain),          cmocka_unit_test(test_plain_contig),
        cmocka_unit_test(test_keras2),         cmocka_unit_test(test_keras2_contig),
        cmocka_unit_test(test_keras3),         cmocka_unit_test(test_keras3_contig),
        cmocka_unit_test(test_convert),        cmocka_unit_test(test_write_errors),
        cmocka_unit_test(test_foreign_plain),  cmocka_unit_test(test_foreign_keras2),
        cmocka_unit_test(test_foreign_keras3), cmocka_unit_test(test_shared),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
