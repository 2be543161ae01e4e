/*
 * test_st.c - the safetensors reader and writer on well-formed files.
 *
 * The reader is checked against files built byte by byte in this test (an
 * independent construction of the format), the writer against the reader and
 * against its own determinism, and both against the real models in
 * ../shared/data (tensor counts and shapes from the catalog JSON).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static npuc_ctx *ctx;

static int setup(void **state) { (void)state; return npuc_ctx_new(&ctx) == NPUC_OK ? 0 : -1; }
static int teardown(void **state) { (void)state; npuc_ctx_free(ctx); return 0; }

/* Builds "8-byte length + header + data" exactly as the spec describes. */
static size_t build_file(unsigned char *out, const char *hdr, const void *data, size_t dn) {
    size_t hl = strlen(hdr);
    for (int i = 0; i < 8; i++) out[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(out + 8, hdr, hl);
    memcpy(out + 8 + hl, data, dn);
    return 8 + hl + dn;
}

static void test_reads_handmade_file(void **state) {
    (void)state;
    /* Header order differs from storage order: the model lists storage order. */
    const char *hdr = "{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]},"
                      "\"__metadata__\":{\"format\":\"pt\"},"
                      "\"a\":{\"dtype\":\"I16\",\"shape\":[1,2],\"data_offsets\":[0,4]},"
                      "\"z\":{\"dtype\":\"F16\",\"shape\":[0,3],\"data_offsets\":[12,12]},"
                      "\"s\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[12,13]}}  ";
    unsigned char data[13] = {0x01, 0x00, 0xff, 0xff, 0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0, 7};
    unsigned char file[1024];
    size_t n = build_file(file, hdr, data, sizeof data);
    const char *p = npuc_test_path("hand.safetensors");
    npuc_test_write_file(p, file, n);
    npuc_model *m;
    assert_int_equal(npuc_model_open(ctx, p, NULL, &m), NPUC_OK);
    assert_int_equal(npuc_model_count(m), 4);
    assert_string_equal(npuc_model_tensor(m, 0)->name, "a");
    assert_string_equal(npuc_model_tensor(m, 1)->name, "b");
    assert_string_equal(npuc_model_tensor(m, 2)->name, "z");
    assert_string_equal(npuc_model_tensor(m, 3)->name, "s");
    assert_int_equal(npuc_model_tensor(m, 3)->rank, 0);
    assert_int_equal(npuc_model_tensor(m, 3)->numel, 1);
    assert_int_equal(npuc_model_tensor(m, 2)->numel, 0);
    assert_string_equal(npuc_model_meta_get(m, "format"), "pt");
    float f[2];
    assert_int_equal(npuc_model_read_f32(ctx, m, 1, f), NPUC_OK);
    assert_true(f[0] == 1.0f && f[1] == -2.0f);
    assert_int_equal(npuc_model_read_f32(ctx, m, 0, f), NPUC_OK);
    assert_true(f[0] == 1.0f && f[1] == -1.0f);
    const void *d;
    assert_int_equal(npuc_model_data(ctx, m, 3, &d), NPUC_OK);
    assert_int_equal(*(const unsigned char *)d, 7);
    size_t idx;
    assert_int_equal(npuc_model_find(m, "z", &idx), 0);
    assert_int_equal(idx, 2);
    assert_int_equal(npuc_model_find(m, "nope", &idx), -1);
    npuc_model_close(m);
}

/* Every dtype, rank 0..4, zero-sized dims, awkward UTF-8 names. */
static void test_roundtrip_all_dtypes(void **state) {
    (void)state;
    const char *p = npuc_test_path("all.safetensors");
    npuc_writer *w;
    assert_int_equal(npuc_writer_open(ctx, p, NULL, &w), NPUC_OK);
    assert_int_equal(npuc_writer_meta(w, "k\xc3\xa9y", "v a l"), NPUC_OK);
    unsigned char *bufs[NPUC_DTYPE_COUNT * 3];
    npuc_tensor_info infos[NPUC_DTYPE_COUNT * 3];
    uint64_t rs = 42;
    int nt = 0;
    for (int dt = 0; dt < NPUC_DTYPE_COUNT; dt++) {
        for (int variant = 0; variant < 3; variant++) {
            npuc_tensor_info t;
            memset(&t, 0, sizeof t);
            static char names[NPUC_DTYPE_COUNT * 3][64];
            snprintf(names[nt], 64, "t/%s.%d \xe2\x9c\x93", npuc_dtype_name((npuc_dtype)dt), variant);
            t.name = names[nt];
            t.dtype = (npuc_dtype)dt;
            if (variant == 0) { t.rank = 0; }
            else if (variant == 1) { t.rank = 3; t.shape[0] = 2; t.shape[1] = 3; t.shape[2] = 5; }
            else { t.rank = 4; t.shape[0] = 3; t.shape[1] = 0; t.shape[2] = 2; t.shape[3] = 1; }
            uint64_t numel = 1;
            for (int i = 0; i < t.rank; i++) numel *= (uint64_t)t.shape[i];
            size_t nb = (size_t)numel * npuc_dtype_size(t.dtype);
            bufs[nt] = malloc(nb + 1);
            for (size_t i = 0; i < nb; i++) bufs[nt][i] = (unsigned char)npuc_test_rand(&rs);
            if (dt == NPUC_DTYPE_BOOL)
                for (size_t i = 0; i < nb; i++) bufs[nt][i] &= 1;
            infos[nt] = t;
            assert_int_equal(npuc_writer_declare(w, &t), NPUC_OK);
            nt++;
        }
    }
    for (int i = 0; i < nt; i++) {
        uint64_t nb = 1;
        for (int k = 0; k < infos[i].rank; k++) nb *= (uint64_t)infos[i].shape[k];
        nb *= npuc_dtype_size(infos[i].dtype);
        assert_int_equal(npuc_writer_write(w, bufs[i], nb), NPUC_OK);
    }
    assert_false(npuc_test_exists(p)); /* nothing at the output until finish */
    assert_int_equal(npuc_writer_finish(w), NPUC_OK);
    assert_true(npuc_test_exists(p));
    assert_false(npuc_test_exists(npuc_test_path("all.safetensors.tmp")));

    npuc_model *m;
    assert_int_equal(npuc_model_open(ctx, p, NULL, &m), NPUC_OK);
    assert_int_equal(npuc_model_count(m), (size_t)nt);
    assert_string_equal(npuc_model_meta_get(m, "k\xc3\xa9y"), "v a l");
    for (int i = 0; i < nt; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, (size_t)i);
        assert_string_equal(t->name, infos[i].name);
        assert_int_equal(t->dtype, infos[i].dtype);
        assert_int_equal(t->rank, infos[i].rank);
        for (int k = 0; k < t->rank; k++) assert_int_equal(t->shape[k], infos[i].shape[k]);
        const void *d;
        assert_int_equal(npuc_model_data(ctx, m, (size_t)i, &d), NPUC_OK);
        assert_memory_equal(d, bufs[i], t->nbytes ? t->nbytes : 0);
    }
    npuc_model_close(m);

    /* The header is padded so the payload starts 8-byte aligned. */
    size_t fn;
    unsigned char *raw = npuc_test_read_file(p, &fn);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | raw[i];
    assert_int_equal(hl % 8, 0);
    assert_int_equal(raw[8], '{');
    free(raw);
    for (int i = 0; i < nt; i++) free(bufs[i]);
}

/* Zero runs become holes (st_writer.c write_sparse): the raw file must still
 * hold exactly the bytes given, zeros where holes were skipped, at every
 * alignment: data then zeros at odd offsets, a zero tensor that ends the file
 * (the size comes from ftruncate), short tensors between them.  The reader
 * (st_reader.c read_at) zero-fills holes instead of reading them: reading
 * the file back through it gives the same bytes. */
static void test_zero_runs_read_back(void **state) {
    (void)state;
    const char *p = npuc_test_path("holes.safetensors");
    npuc_writer *w;
    assert_int_equal(npuc_writer_open(ctx, p, NULL, &w), NPUC_OK);
    const uint64_t sizes[] = {3, (3u << 20) + 5, 7, (3u << 16) + 1, 1u << 20};
    enum { NT = sizeof sizes / sizeof *sizes };
    unsigned char *bufs[NT];
    uint64_t rs = 7;
    for (int i = 0; i < NT; i++) {
        char name[16];
        snprintf(name, sizeof name, "t%d", i);
        npuc_tensor_info t;
        memset(&t, 0, sizeof t);
        t.name = name;
        t.dtype = NPUC_DTYPE_U8;
        t.rank = 1;
        t.shape[0] = (int64_t)sizes[i];
        assert_int_equal(npuc_writer_declare(w, &t), NPUC_OK);
        bufs[i] = calloc(1, (size_t)sizes[i]);
        assert_non_null(bufs[i]);
        /* t1: data, 2.3 MiB of zeros, data at the end; t3: one byte past
         * three zero blocks; t4 (the last): all zeros. */
        if (i == 0 || i == 2) for (uint64_t k = 0; k < sizes[i]; k++) bufs[i][k] = (unsigned char)(npuc_test_rand(&rs) | 1);
        if (i == 1) {
            for (uint64_t k = 0; k < 1000; k++) bufs[i][k] = (unsigned char)(k | 1);
            for (uint64_t k = (2u << 20) + 300000; k < sizes[i]; k++) bufs[i][k] = (unsigned char)npuc_test_rand(&rs);
        }
    }
    bufs[3][(3u << 16)] = 9;
    for (int i = 0; i < NT; i++) assert_int_equal(npuc_writer_write(w, bufs[i], sizes[i]), NPUC_OK);
    assert_int_equal(npuc_writer_finish(w), NPUC_OK);
    size_t fn;
    unsigned char *raw = npuc_test_read_file(p, &fn);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | raw[i];
    uint64_t off = 8 + hl, total = off;
    for (int i = 0; i < NT; i++) total += sizes[i];
    assert_int_equal(fn, total);
    npuc_model *m;
    assert_int_equal(npuc_model_open(ctx, p, NULL, &m), NPUC_OK);
    for (int i = 0; i < NT; i++) {
        assert_memory_equal(raw + off, bufs[i], (size_t)sizes[i]);
        off += sizes[i];
        const void *d;
        assert_int_equal(npuc_model_data(ctx, m, (size_t)i, &d), NPUC_OK);
        assert_memory_equal(d, bufs[i], (size_t)sizes[i]);
        free(bufs[i]);
    }
    npuc_model_close(m);
    free(raw);
}

static void test_writer_refuses_overwrite_and_duplicates(void **state) {
    (void)state;
    const char *p = npuc_test_path("exists.safetensors");
    npuc_test_write_file(p, "keep", 4);
    npuc_writer *w;
    assert_int_equal(npuc_writer_open(ctx, p, NULL, &w), NPUC_ERR_EXISTS);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "exists.safetensors"));
    size_t n;
    char *c = npuc_test_read_file(p, &n);
    assert_int_equal(n, 4);
    free(c);
    npuc_write_opts o = npuc_write_opts_defaults();
    o.overwrite = 1;
    assert_int_equal(npuc_writer_open(ctx, p, &o, &w), NPUC_OK);
    npuc_tensor_info t = {.name = "x", .dtype = NPUC_DTYPE_F32, .rank = 1, .shape = {2}};
    assert_int_equal(npuc_writer_declare(w, &t), NPUC_OK);
    assert_int_equal(npuc_writer_declare(w, &t), NPUC_ERR_ARG);
    npuc_writer_abort(w);
    c = npuc_test_read_file(p, &n);
    assert_int_equal(n, 4); /* abort left the old file alone */
    free(c);
    assert_false(npuc_test_exists(npuc_test_path("exists.safetensors.tmp")));
}

/* Re-writing a model gives the same bytes: convert a shared model twice. */
static void test_shared_models(void **state) {
    (void)state;
    static const char *const STEMS[] = {"silero_vad_v5", "ppocrv4_rec", "ppocr_mobile_v2_cls",
                                        "nsfwjs_mobilenet_v2"};
    int seen = 0;
    for (size_t s = 0; s < 4; s++) {
        char fn[128], jn[128];
        snprintf(fn, sizeof fn, "%s.safetensors", STEMS[s]);
        snprintf(jn, sizeof jn, "%s.json", STEMS[s]);
        const char *path = npuc_test_shared_file(fn);
        const char *jpath = npuc_test_shared_file(jn);
        if (!path || !jpath) continue;
        seen++;
        json_error_t je;
        json_t *cat = json_load_file(jpath, 0, &je);
        assert_non_null(cat);
        npuc_model *m;
        assert_int_equal(npuc_model_open(ctx, path, NULL, &m), NPUC_OK);
        assert_int_equal(npuc_model_count(m), json_integer_value(json_object_get(cat, "n_tensors")));
        uint64_t params = 0;
        for (size_t i = 0; i < npuc_model_count(m); i++) params += npuc_model_tensor(m, i)->numel;
        assert_int_equal(params, json_integer_value(json_object_get(cat, "total_params")));
        const char *lists[] = {"conv_weights", "linear_2d_weights"};
        for (int l = 0; l < 2; l++) {
            json_t *arr = json_object_get(cat, lists[l]);
            for (size_t i = 0; i < json_array_size(arr); i++) {
                json_t *e = json_array_get(arr, i);
                size_t idx;
                assert_int_equal(npuc_model_find(m, json_string_value(json_array_get(e, 0)), &idx), 0);
                const npuc_tensor_info *t = npuc_model_tensor(m, idx);
                json_t *shape = json_array_get(e, 1);
                assert_int_equal(t->rank, json_array_size(shape));
                for (int k = 0; k < t->rank; k++)
                    assert_int_equal(t->shape[k], json_integer_value(json_array_get(shape, (size_t)k)));
            }
        }
        const char *o1 = npuc_test_path("copy1.safetensors"), *o2 = npuc_test_path("copy2.safetensors");
        npuc_write_opts wo = npuc_write_opts_defaults();
        wo.overwrite = 1;
        assert_int_equal(npuc_model_convert(ctx, m, o1, &wo, 0, NPUC_DTYPE_F32), NPUC_OK);
        assert_int_equal(npuc_model_convert(ctx, m, o2, &wo, 0, NPUC_DTYPE_F32), NPUC_OK);
        size_t n1, n2, n0;
        unsigned char *b1 = npuc_test_read_file(o1, &n1), *b2 = npuc_test_read_file(o2, &n2);
        unsigned char *b0 = npuc_test_read_file(path, &n0);
        assert_int_equal(n1, n2);
        assert_memory_equal(b1, b2, n1);
        /* Same payload bytes, in the same storage order, as the source. */
        uint64_t h0 = 0, h1 = 0;
        for (int i = 7; i >= 0; i--) { h0 = h0 << 8 | b0[i]; h1 = h1 << 8 | b1[i]; }
        assert_int_equal(n0 - 8 - h0, n1 - 8 - h1);
        assert_memory_equal(b0 + 8 + h0, b1 + 8 + h1, n0 - 8 - h0);
        free(b0); free(b1); free(b2);
        npuc_model_close(m);
        json_decref(cat);
    }
    if (!seen) skip();
}

static void test_layout_rules(void **state) {
    (void)state;
    const char *p = npuc_test_path("lay.safetensors");
    npuc_writer *w;
    npuc_write_opts o = npuc_write_opts_defaults();
    o.overwrite = 1;
    assert_int_equal(npuc_writer_open(ctx, p, &o, &w), NPUC_OK);
    npuc_tensor_info a = {.name = "fc.w_0", .dtype = NPUC_DTYPE_F32, .rank = 2, .shape = {3, 4}};
    npuc_tensor_info b = {.name = "conv.weight", .dtype = NPUC_DTYPE_F32, .rank = 4, .shape = {2, 3, 1, 1}};
    assert_int_equal(npuc_writer_declare(w, &a), NPUC_OK);
    assert_int_equal(npuc_writer_declare(w, &b), NPUC_OK);
    float z[12] = {0};
    assert_int_equal(npuc_writer_write(w, z, sizeof z), NPUC_OK);
    assert_int_equal(npuc_writer_write(w, z, 6 * sizeof(float)), NPUC_OK);
    assert_int_equal(npuc_writer_finish(w), NPUC_OK);
    npuc_model *m;
    assert_int_equal(npuc_model_open(ctx, p, NULL, &m), NPUC_OK);
    /* Paddle's MatMul weights are [in, out] (issue 14: decided from the name). */
    assert_int_equal(npuc_model_tensor(m, 0)->layout, NPUC_LAYOUT_IO);
    assert_int_equal(npuc_model_tensor(m, 0)->confidence, NPUC_CONF_CONVENTION);
    assert_int_equal(npuc_model_tensor(m, 1)->layout, NPUC_LAYOUT_OIHW);
    const char *bad[] = {"nomatch=io"};
    assert_int_equal(npuc_model_apply_layout_rules(ctx, m, bad, 1), NPUC_ERR_ARG);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "matches no tensor"));
    const char *unfit[] = {"conv=io"};
    assert_int_equal(npuc_model_apply_layout_rules(ctx, m, unfit, 1), NPUC_ERR_ARG);
    const char *good[] = {"^fc\\.=linear"};
    assert_int_equal(npuc_model_apply_layout_rules(ctx, m, good, 1), NPUC_OK);
    assert_int_equal(npuc_model_tensor(m, 0)->layout, NPUC_LAYOUT_OI);
    assert_int_equal(npuc_model_tensor(m, 0)->confidence, NPUC_CONF_CERTAIN);
    /* The override survives a copy through the "npuc.layout" metadata entry. */
    const char *p2 = npuc_test_path("lay2.safetensors");
    assert_int_equal(npuc_model_convert(ctx, m, p2, &o, 0, NPUC_DTYPE_F32), NPUC_OK);
    npuc_model_close(m);
    assert_int_equal(npuc_model_open(ctx, p2, NULL, &m), NPUC_OK);
    assert_int_equal(npuc_model_tensor(m, 0)->layout, NPUC_LAYOUT_OI);
    assert_int_equal(npuc_model_tensor(m, 0)->confidence, NPUC_CONF_CERTAIN);
    assert_string_equal(npuc_model_meta_get(m, "npuc.layout"), "{\"fc.w_0\":\"oi\"}");
    uint64_t outer, ch, inner;
    assert_int_equal(npuc_layout_view(npuc_model_tensor(m, 0), &outer, &ch, &inner), NPUC_OK);
    assert_int_equal(outer, 1); assert_int_equal(ch, 3); assert_int_equal(inner, 4);
    assert_int_equal(npuc_layout_view(npuc_model_tensor(m, 1), &outer, &ch, &inner), NPUC_OK);
    assert_int_equal(outer, 1); assert_int_equal(ch, 2); assert_int_equal(inner, 3);
    npuc_model_close(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reads_handmade_file),
        cmocka_unit_test(test_roundtrip_all_dtypes),
        cmocka_unit_test(test_zero_runs_read_back),
        cmocka_unit_test(test_writer_refuses_overwrite_and_duplicates),
        cmocka_unit_test(test_shared_models),
        cmocka_unit_test(test_layout_rules),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
