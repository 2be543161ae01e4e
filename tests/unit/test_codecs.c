/*
 * test_codecs.c - the codec table (src/codecs/codec.h) walked row by row,
 * and each decodable encoding run on a small artifact built by hand.
 *
 * The table: every row has a name that npuc__codec_find returns it for,
 * distinct part roles and distinct part names, and an unknown encoding has
 * no row.  The decoders: each artifact is written with the public writer and
 * an "npuc" metadata entry spelled out as docs/artifact.md specifies it
 * (not through the passes), with values worked out by hand, so a decoder and
 * the specification are checked against each other rather than against the
 * writer that shares their code.  A part named by the entry but not stored
 * is NPUC_ERR_FORMAT, from the row's validation and from
 * npuc_artifact_check alike.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "codecs/artifact_meta.h"
#include "codecs/codec.h"

static npuc_ctx *ctx;

static int setup(void **state) { (void)state; return npuc_ctx_new(&ctx) == NPUC_OK ? 0 : -1; }
static int teardown(void **state) { (void)state; npuc_ctx_free(ctx); return 0; }

/* ---------------------------------------------------------------- table */

static size_t nparts(const npuc__codec *c) {
    size_t n = 0;
    while (n < NPUC_CODEC_PARTS_MAX && c->parts[n].role) n++;
    return n;
}

static void test_rows(void **state) {
    (void)state;
    assert_true(npuc__codec_count >= 4);
    for (size_t i = 0; i < npuc__codec_count; i++) {
        const npuc__codec *c = npuc__codecs[i];
        assert_non_null(c->name);
        assert_true(c->name[0] != 0);
        assert_ptr_equal(npuc__codec_find(c->name), c);
        for (size_t j = 0; j < i; j++) assert_string_not_equal(npuc__codecs[j]->name, c->name);
        /* A dense row stores its values under the tensor's own name: no
         * parts and nothing to decode.  A decodable row has parts. */
        if (c->dense) {
            assert_int_equal(nparts(c), 0);
            assert_null(c->decode);
        }
        if (c->decode) assert_true(nparts(c) >= 1);
        const size_t n = nparts(c);
        char names[NPUC_CODEC_PARTS_MAX][64];
        for (size_t p = 0; p < n; p++) {
            assert_non_null(c->parts[p].suffix);
            assert_int_equal(npuc__codec_part_name(c, c->parts[p].role, "blk.0.w", names[p], sizeof names[p]), 0);
            assert_int_equal(strncmp(names[p], "blk.0.w", 7), 0);
            assert_string_equal(names[p] + 7, c->parts[p].suffix);
            char *dup = npuc__codec_part_dup(c, c->parts[p].role, "blk.0.w");
            assert_non_null(dup);
            assert_string_equal(dup, names[p]);
            free(dup);
            for (size_t q = 0; q < p; q++) {
                assert_string_not_equal(c->parts[q].role, c->parts[p].role);
                assert_string_not_equal(names[q], names[p]);
            }
        }
        char buf[8];
        assert_int_equal(npuc__codec_part_name(c, "no_such_role", "w", buf, sizeof buf), -1);
        assert_string_equal(buf, "");
    }
}

static void test_find(void **state) {
    (void)state;
    assert_null(npuc__codec_find("no_such_encoding"));
    assert_null(npuc__codec_find(""));
    assert_null(npuc__codec_find(NULL));
    assert_ptr_equal(npuc__codec_find("quant"), &npuc__codec_quant);
    assert_ptr_equal(npuc__codec_find("fake_quant"), &npuc__codec_fake_quant);
    assert_ptr_equal(npuc__codec_find("lowrank"), &npuc__codec_lowrank);
    assert_ptr_equal(npuc__codec_find("nm_sparse"), &npuc__codec_nm_sparse);
    /* The suffixes docs/artifact.md names. */
    char buf[32];
    assert_int_equal(npuc__codec_part_name(&npuc__codec_quant, "scale", "fc.weight", buf, sizeof buf), 0);
    assert_string_equal(buf, "fc.weight.scale");
    assert_int_equal(npuc__codec_part_name(&npuc__codec_quant, "codes", "fc.weight", buf, sizeof buf), 0);
    assert_string_equal(buf, "fc.weight");
    assert_int_equal(npuc__codec_part_name(&npuc__codec_lowrank, "lr_b", "fc.weight", buf, sizeof buf), 0);
    assert_string_equal(buf, "fc.weight.lr_b");
    assert_int_equal(npuc__codec_part_name(&npuc__codec_nm_sparse, "meta", "fc.weight", buf, sizeof buf), 0);
    assert_string_equal(buf, "fc.weight.nm_meta");
    /* A name that does not fit is refused, not cut. */
    assert_int_equal(npuc__codec_part_name(&npuc__codec_quant, "zero_point", "fc.weight", buf, 16), -1);
    assert_string_equal(buf, "");
    json_t *e = json_pack("{s:s}", "encoding", "fake_quant");
    assert_ptr_equal(npuc__codec_of(e), &npuc__codec_fake_quant);
    assert_true(npuc__codec_entry_dense(e));
    json_object_set_new(e, "encoding", json_string("no_such_encoding"));
    assert_null(npuc__codec_of(e));
    assert_false(npuc__codec_entry_dense(e));
    json_object_set_new(e, "encoding", json_integer(3));
    assert_null(npuc__codec_of(e));
    json_decref(e);
}

/* ------------------------------------------------------------- decoding */

typedef struct stored {
    const char *name;
    npuc_dtype dtype;
    int rank;
    int64_t shape[3];
    const void *bytes;
} stored;

/* Writes the stored tensors and the "npuc" entry art to file name. */
static const char *write_artifact(const char *file, const stored *t, size_t n, const char *art) {
    const char *path = npuc_test_path(file);
    npuc_write_opts o = npuc_write_opts_defaults();
    o.overwrite = 1;
    npuc_writer *w;
    assert_int_equal(npuc_writer_open(ctx, path, &o, &w), NPUC_OK);
    assert_int_equal(npuc_writer_meta(w, "npuc", art), NPUC_OK);
    for (size_t i = 0; i < n; i++) {
        npuc_tensor_info info;
        memset(&info, 0, sizeof info);
        info.name = t[i].name;
        info.dtype = t[i].dtype;
        info.rank = t[i].rank;
        memcpy(info.shape, t[i].shape, sizeof t[i].shape);
        assert_int_equal(npuc_writer_declare(w, &info), NPUC_OK);
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t numel = 1;
        for (int d = 0; d < t[i].rank; d++) numel *= (uint64_t)t[i].shape[d];
        assert_int_equal(npuc_writer_write(w, t[i].bytes, numel * npuc_dtype_size(t[i].dtype)), NPUC_OK);
    }
    if (npuc_writer_finish(w) != NPUC_OK) fail_msg("%s", npuc_ctx_errmsg(ctx));
    return path;
}

/* Decodes entry `name` of the artifact at path through its row into out
 * (NULL: validates only); returns the decoder's status. */
static npuc_status decode(const char *path, const char *name, float *out) {
    npuc_model *m;
    if (npuc_model_open(ctx, path, NULL, &m) != NPUC_OK) fail_msg("%s", npuc_ctx_errmsg(ctx));
    json_t *art;
    assert_int_equal(npuc__art_load(ctx, m, &art), NPUC_OK);
    assert_non_null(art);
    const json_t *tensors = json_object_get(art, "tensors"), *e = json_object_get(tensors, name);
    assert_non_null(e);
    const npuc__codec *c = npuc__codec_of(e);
    assert_non_null(c);
    assert_non_null(c->decode);
    npuc_tensor_info orig;
    assert_int_equal(npuc__art_orig(ctx, path, name, e, &orig), NPUC_OK);
    orig.name = name;
    const npuc__nest nest = {tensors, 0};
    npuc_status st = c->decode(ctx, m, &nest, name, e, &orig, NULL);
    if (st == NPUC_OK && out) st = c->decode(ctx, m, &nest, name, e, &orig, out);
    json_decref(art);
    npuc_model_close(m);
    return st;
}

/* Decodes and compares with want (n floats, exactly: every value below is
 * a small multiple of a power of two). */
static void expect_decoded(const char *path, const char *name, const float *want, size_t n) {
    float got[16];
    assert_true(n <= 16);
    if (decode(path, name, got) != NPUC_OK) fail_msg("%s", npuc_ctx_errmsg(ctx));
    for (size_t i = 0; i < n; i++) assert_close(got[i], want[i], 0, 0);
    /* The public check agrees: the file is sound and decodes. */
    npuc_model *m;
    assert_int_equal(npuc_model_open(ctx, path, NULL, &m), NPUC_OK);
    npuc_artifact_info info;
    if (npuc_artifact_check(ctx, m, 1, &info) != NPUC_OK) fail_msg("%s", npuc_ctx_errmsg(ctx));
    assert_int_equal(info.encoded, 1);
    assert_int_equal(info.decoded, 1);
    npuc_model_close(m);
}

#define ART(tensors) "{\"schema\": \"npuc.artifact/1\", \"npuc_version\": \"0.1.0\", \"tensors\": {" tensors "}}"

/* int8, symmetric, per output channel: w' = q * scale[c]. */
static void test_quant_channel(void **state) {
    (void)state;
    const int8_t codes[6] = {1, -2, 3, 4, 0, -127};
    const float scale[2] = {0.5f, 0.25f};
    const stored t[] = {{"w", NPUC_DTYPE_I8, 2, {2, 3}, codes}, {"w.scale", NPUC_DTYPE_F32, 1, {2}, scale}};
    const char *path = write_artifact(
        "quant_ch.safetensors", t, 2,
        ART("\"w\": {\"encoding\": \"quant\", \"dtype\": \"F32\", \"shape\": [2, 3], \"layout\": \"oi\","
            " \"bits\": 8, \"symmetric\": true, \"granularity\": \"channel\", \"axis\": 0, \"group_size\": 0,"
            " \"view\": [1, 2, 3], \"range\": \"minmax\", \"packed\": false, \"codes\": \"w\","
            " \"codes_dtype\": \"I8\", \"scale\": \"w.scale\", \"zero_point\": null,"
            " \"parts\": [\"w\", \"w.scale\"]}"));
    const float want[6] = {0.5f, -1.0f, 1.5f, 1.0f, 0.0f, -31.75f};
    expect_decoded(path, "w", want, 6);
}

/* uint8, asymmetric, one scale and zero point: w' = (q - 10) * 0.5. */
static void test_quant_asymmetric(void **state) {
    (void)state;
    const uint8_t codes[4] = {0, 10, 255, 11};
    const float scale[1] = {0.5f};
    const uint8_t zp[1] = {10};
    const stored t[] = {{"w", NPUC_DTYPE_U8, 2, {2, 2}, codes},
                        {"w.scale", NPUC_DTYPE_F32, 0, {0}, scale},
                        {"w.zero_point", NPUC_DTYPE_U8, 0, {0}, zp}};
    const char *path = write_artifact(
        "quant_asym.safetensors", t, 3,
        ART("\"w\": {\"encoding\": \"quant\", \"dtype\": \"F32\", \"shape\": [2, 2], \"layout\": \"oi\","
            " \"bits\": 8, \"symmetric\": false, \"granularity\": \"tensor\", \"axis\": -1, \"group_size\": 0,"
            " \"view\": [1, 1, 4], \"range\": \"minmax\", \"packed\": false, \"codes\": \"w\","
            " \"codes_dtype\": \"U8\", \"scale\": \"w.scale\", \"zero_point\": \"w.zero_point\","
            " \"parts\": [\"w\", \"w.scale\", \"w.zero_point\"]}"));
    const float want[4] = {-5.0f, 0.0f, 122.5f, 0.5f};
    expect_decoded(path, "w", want, 4);
}

/* int4, symmetric, packed LSB first: codes -1, 2, 7, -7 are the nibbles
 * 0xF, 0x2, 0x7, 0x9, so the bytes are 0x2F, 0x97; scale 0.5 per tensor. */
static void test_quant_packed(void **state) {
    (void)state;
    const uint8_t codes[2] = {0x2F, 0x97};
    const float scale[1] = {0.5f};
    const stored t[] = {{"w", NPUC_DTYPE_U8, 1, {2}, codes}, {"w.scale", NPUC_DTYPE_F32, 0, {0}, scale}};
    const char *path = write_artifact(
        "quant_packed.safetensors", t, 2,
        ART("\"w\": {\"encoding\": \"quant\", \"dtype\": \"F32\", \"shape\": [2, 2], \"layout\": \"oi\","
            " \"bits\": 4, \"symmetric\": true, \"granularity\": \"tensor\", \"axis\": -1, \"group_size\": 0,"
            " \"view\": [1, 1, 4], \"range\": \"minmax\", \"packed\": true, \"codes\": \"w\","
            " \"codes_dtype\": \"U8\", \"scale\": \"w.scale\", \"zero_point\": null,"
            " \"parts\": [\"w\", \"w.scale\"]}"));
    const float want[4] = {-0.5f, 1.0f, 3.5f, -3.5f};
    expect_decoded(path, "w", want, 4);
}

/* Rank 1, oi: W [2, 3] = lr_a [2, 1] x lr_b [1, 3]. */
static void test_lowrank(void **state) {
    (void)state;
    const float a[2] = {1.0f, 2.0f}, b[3] = {3.0f, -1.0f, 0.5f};
    const stored t[] = {{"w.lr_a", NPUC_DTYPE_F32, 2, {2, 1}, a}, {"w.lr_b", NPUC_DTYPE_F32, 2, {1, 3}, b}};
    const char *path = write_artifact(
        "lowrank.safetensors", t, 2,
        ART("\"w\": {\"encoding\": \"lowrank\", \"dtype\": \"F32\", \"shape\": [2, 3], \"layout\": \"oi\","
            " \"parts\": [\"w.lr_a\", \"w.lr_b\"], \"rank\": 1, \"matrix\": [2, 3], \"solver\": \"exact\"}"));
    const float want[6] = {3.0f, -1.0f, 0.5f, 6.0f, -2.0f, 1.0f};
    expect_decoded(path, "w", want, 6);
}

/* The same product with lr_a stored as a nested "quant" entry: codes 2, 4
 * at scale 0.5 per channel are the factor [1, 2]. */
static void test_lowrank_nested(void **state) {
    (void)state;
    const int8_t ca[2] = {2, 4};
    const float sa[2] = {0.5f, 0.5f}, b[3] = {3.0f, -1.0f, 0.5f};
    const stored t[] = {{"w.lr_a", NPUC_DTYPE_I8, 2, {2, 1}, ca},
                        {"w.lr_a.scale", NPUC_DTYPE_F32, 1, {2}, sa},
                        {"w.lr_b", NPUC_DTYPE_F32, 2, {1, 3}, b}};
    const char *path = write_artifact(
        "lowrank_nested.safetensors", t, 3,
        ART("\"w\": {\"encoding\": \"lowrank\", \"dtype\": \"F32\", \"shape\": [2, 3], \"layout\": \"oi\","
            " \"parts\": [\"w.lr_a\", \"w.lr_b\"], \"rank\": 1, \"matrix\": [2, 3], \"solver\": \"exact\"},"
            " \"w.lr_a\": {\"encoding\": \"quant\", \"dtype\": \"F32\", \"shape\": [2, 1], \"layout\": \"oi\","
            " \"bits\": 8, \"symmetric\": true, \"granularity\": \"channel\", \"axis\": 0, \"group_size\": 0,"
            " \"view\": [1, 2, 1], \"range\": \"minmax\", \"packed\": false, \"codes\": \"w.lr_a\","
            " \"codes_dtype\": \"I8\", \"scale\": \"w.lr_a.scale\", \"zero_point\": null,"
            " \"parts\": [\"w.lr_a\", \"w.lr_a.scale\"]}"));
    const float want[6] = {3.0f, -1.0f, 0.5f, 6.0f, -2.0f, 1.0f};
    expect_decoded(path, "w", want, 6);
}

/* 2:4 along the input axis of an oi [2, 4] tensor: one group per row.
 * Row 0 keeps positions 0 and 3, row 1 positions 1 and 2; the positions
 * 0, 3, 1, 2 take 2 bits each, LSB first: 0 | 3 << 2 | 1 << 4 | 2 << 6 =
 * 0x9C. */
static void test_nm_sparse(void **state) {
    (void)state;
    const float values[4] = {1.5f, -2.0f, 3.0f, 0.25f};
    const uint8_t meta[1] = {0x9C};
    const stored t[] = {{"w", NPUC_DTYPE_F32, 2, {2, 2}, values}, {"w.nm_meta", NPUC_DTYPE_U8, 1, {1}, meta}};
    const char *path = write_artifact(
        "nm.safetensors", t, 2,
        ART("\"w\": {\"encoding\": \"nm_sparse\", \"dtype\": \"F32\", \"shape\": [2, 4], \"layout\": \"oi\","
            " \"n\": 2, \"m\": 4, \"in_axis\": 1, \"groups\": 2, \"values\": \"w\", \"meta\": \"w.nm_meta\","
            " \"meta_bits\": 2, \"quant\": null, \"parts\": [\"w\", \"w.nm_meta\"]}"));
    const float want[8] = {1.5f, 0.0f, 0.0f, -2.0f, 0.0f, 3.0f, 0.25f, 0.0f};
    expect_decoded(path, "w", want, 8);
}

/* The quant artifact above without its scale tensor. */
static void test_missing_part(void **state) {
    (void)state;
    const int8_t codes[6] = {1, -2, 3, 4, 0, -127};
    const stored t[] = {{"w", NPUC_DTYPE_I8, 2, {2, 3}, codes}};
    const char *path = write_artifact(
        "quant_noscale.safetensors", t, 1,
        ART("\"w\": {\"encoding\": \"quant\", \"dtype\": \"F32\", \"shape\": [2, 3], \"layout\": \"oi\","
            " \"bits\": 8, \"symmetric\": true, \"granularity\": \"channel\", \"axis\": 0, \"group_size\": 0,"
            " \"view\": [1, 2, 3], \"range\": \"minmax\", \"packed\": false, \"codes\": \"w\","
            " \"codes_dtype\": \"I8\", \"scale\": \"w.scale\", \"zero_point\": null,"
            " \"parts\": [\"w\", \"w.scale\"]}"));
    assert_int_equal(decode(path, "w", NULL), NPUC_ERR_FORMAT);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "tensor 'w': its part 'w.scale' is missing"));
    npuc_model *m;
    assert_int_equal(npuc_model_open(ctx, path, NULL, &m), NPUC_OK);
    npuc_artifact_info info;
    assert_int_equal(npuc_artifact_check(ctx, m, 0, &info), NPUC_ERR_FORMAT);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "'w.scale' is missing"));
    npuc_model_close(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows),          cmocka_unit_test(test_find),
        cmocka_unit_test(test_quant_channel), cmocka_unit_test(test_quant_asymmetric),
        cmocka_unit_test(test_quant_packed),  cmocka_unit_test(test_lowrank),
        cmocka_unit_test(test_lowrank_nested), cmocka_unit_test(test_nm_sparse),
        cmocka_unit_test(test_missing_part),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
