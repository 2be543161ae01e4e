/*
 * test_onnx.c - the ONNX reader and writer on models built byte by byte.
 *
 * Every file here is written from the protobuf encoding rules
 * (protobuf.dev, "Encoding") and onnx.proto's field numbers, independently
 * of npuc's wire code: varints, tags (field << 3 | wire type), length-
 * delimited sub-messages.  A good model must read with the values put in
 * (raw_data, packed float_data, F16 bits in int32_data, a Constant node's
 * value, a weight inside an If branch) and come back byte for byte when
 * rewritten unchanged, unknown fields included; each malformed one must fail
 * with NPUC_ERR_FORMAT and one line naming the file and the defect; every
 * prefix of a good file must fail or open cleanly.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx/onnx_format.h"
#include "onnx/onnx_model.h"
#include "testutil.h"

static npuc_ctx *ctx;

/* ------------------------------------------------------------ a builder */

typedef struct pb {
    unsigned char b[4096];
    size_t n;
} pb;

static void raw(pb *b, const void *p, size_t n) {
    assert_true(b->n + n <= sizeof b->b);
    memcpy(b->b + b->n, p, n);
    b->n += n;
}
static void varint(pb *b, uint64_t v) {
    do {
        unsigned char c = (unsigned char)(v & 0x7f);
        v >>= 7;
        if (v) c |= 0x80;
        raw(b, &c, 1);
    } while (v);
}
static void tag(pb *b, unsigned num, unsigned wt) { varint(b, (uint64_t)num << 3 | wt); }
static void vfield(pb *b, unsigned num, uint64_t v) {
    tag(b, num, 0);
    varint(b, v);
}
static void bytes(pb *b, unsigned num, const void *p, size_t n) {
    tag(b, num, 2);
    varint(b, n);
    raw(b, p, n);
}
static void str(pb *b, unsigned num, const char *s) { bytes(b, num, s, strlen(s)); }
static void sub(pb *b, unsigned num, const pb *c) { bytes(b, num, c->b, c->n); }

/* TensorProto: dims, data_type, name, raw_data. */
static void tensor_raw(pb *t, const char *name, const int64_t *dims, int rank, uint64_t type, const void *data,
                       size_t n) {
    t->n = 0;
    for (int i = 0; i < rank; i++) vfield(t, 1, (uint64_t)dims[i]);
    vfield(t, 2, type);
    if (name) str(t, 8, name);
    bytes(t, 9, data, n);
}

static const float W[6] = {1, -2, 3.5f, -4, 0.25f, 6};

/* A model: ir_version 7, producer, an initializer "w" [2,3] F32 raw, a
 * Constant "c" (value [2] F32 raw), an If whose then-branch holds an
 * initializer "inner" [1] F32, an unknown graph field 99, opset 13. */
static void good_model(pb *m) {
    pb g = {0}, t = {0}, node = {0}, attr = {0}, sg = {0}, opset = {0};
    const int64_t d23[] = {2, 3}, d2[] = {2}, d1[] = {1};
    m->n = 0;
    vfield(m, 1, 7);
    str(m, 2, "unit");
    /* graph */
    tensor_raw(&t, "w", d23, 2, 1, W, sizeof W);
    sub(&g, 5, &t);
    /* Constant node, attribute name after the tensor */
    tensor_raw(&t, NULL, d2, 1, 1, W, 8);
    sub(&attr, 5, &t);
    str(&attr, 1, "value");
    vfield(&attr, 20, 4);
    str(&node, 2, "c");
    str(&node, 4, "Constant");
    sub(&node, 5, &attr);
    sub(&g, 1, &node);
    /* If with a then-branch initializer */
    tensor_raw(&t, "inner", d1, 1, 1, W + 5, 4);
    sub(&sg, 5, &t);
    str(&sg, 2, "then");
    node.n = attr.n = 0;
    str(&attr, 1, "then_branch");
    sub(&attr, 6, &sg);
    vfield(&attr, 20, 5);
    str(&node, 1, "cond");
    str(&node, 2, "y");
    str(&node, 4, "If");
    sub(&node, 5, &attr);
    sub(&g, 1, &node);
    str(&g, 2, "main");
    bytes(&g, 99, "future", 6); /* unknown: must survive */
    sub(m, 7, &g);
    str(&opset, 1, "");
    vfield(&opset, 2, 13);
    sub(m, 8, &opset);
}

static npuc_status open_bytes(const char *name, const pb *b, npuc_model **m) {
    const char *p = npuc_test_path(name);
    npuc_test_write_file(p, b->b, b->n);
    npuc_open_opts o = npuc_open_opts_defaults();
    return npuc_model_open(ctx, p, &o, m);
}

static void test_good(void **state) {
    (void)state;
    pb m = {0};
    good_model(&m);
    npuc_model *md;
    assert_int_equal(open_bytes("good.onnx", &m, &md), NPUC_OK);
    assert_string_equal(npuc_format_name(npuc_model_format(md)), "onnx");
    assert_int_equal(npuc_model_count(md), 3);
    const char *names[] = {"w", "c", "inner"};
    const int ranks[] = {2, 1, 1};
    const size_t numel[] = {6, 2, 1};
    const float *want[] = {W, W, W + 5};
    for (size_t i = 0; i < 3; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(md, i);
        assert_string_equal(t->name, names[i]);
        assert_int_equal(t->rank, ranks[i]);
        assert_int_equal(t->dtype, NPUC_DTYPE_F32);
        float v[6];
        assert_int_equal(npuc_model_read_f32(ctx, md, i, v), NPUC_OK);
        assert_memory_equal(v, want[i], numel[i] * sizeof(float));
    }
    /* The graph for the graph module. */
    npuc__onnx_model *gm;
    assert_int_equal(npuc__onnx_graph_parse(ctx, md, &gm), NPUC_OK);
    assert_int_equal(gm->ir_version, 7);
    assert_int_equal(gm->nopsets, 1);
    assert_string_equal(gm->opsets[0].domain, "");
    assert_int_equal(gm->opsets[0].version, 13);
    const npuc__onnx_graph *g = gm->graph;
    assert_string_equal(g->name, "main");
    assert_int_equal(g->ninitializers, 1);
    assert_string_equal(g->initializers[0], "w");
    assert_int_equal(g->nnodes, 2);
    assert_string_equal(g->nodes[0].op_type, "Constant");
    assert_string_equal(g->nodes[0].domain, "");
    assert_int_equal(g->nodes[0].nattrs, 1);
    assert_string_equal(g->nodes[0].attrs[0].name, "value");
    assert_int_equal(g->nodes[0].attrs[0].type, NPUC__ONNX_ATTR_TENSOR);
    assert_string_equal(g->nodes[0].attrs[0].weight, "c");
    const npuc__onnx_node *nif = &g->nodes[1];
    assert_string_equal(nif->op_type, "If");
    assert_int_equal(nif->ninputs, 1);
    assert_string_equal(nif->inputs[0], "cond");
    assert_string_equal(nif->outputs[0], "y");
    assert_int_equal(nif->attrs[0].ngraphs, 1);
    assert_string_equal(nif->attrs[0].graphs[0]->name, "then");
    assert_string_equal(nif->attrs[0].graphs[0]->initializers[0], "inner");
    npuc__onnx_graph_free(gm);
    /* Unchanged values: the same bytes back. */
    const char *out = npuc_test_path("good_out.onnx");
    npuc_write_opts wo = npuc_write_opts_defaults();
    assert_int_equal(npuc_model_convert(ctx, md, out, &wo, 0, NPUC_DTYPE_F32), NPUC_OK);
    npuc_model_close(md);
    size_t n;
    unsigned char *back = npuc_test_read_file(out, &n);
    assert_non_null(back);
    assert_int_equal(n, m.n);
    assert_memory_equal(back, m.b, n);
    free(back);
}

/* Typed fields: packed float_data, unpacked float_data, F16 in int32_data. */
static void test_typed(void **state) {
    (void)state;
    pb m = {0}, g = {0}, t = {0}, packed = {0};
    vfield(&m, 1, 7);
    const float f[2] = {1.5f, -2.0f};
    vfield(&t, 1, 2);
    vfield(&t, 2, 1);
    str(&t, 8, "packed");
    bytes(&t, 4, f, sizeof f);
    sub(&g, 5, &t);
    t.n = 0;
    vfield(&t, 1, 2);
    vfield(&t, 2, 1);
    str(&t, 8, "unpacked");
    for (int i = 0; i < 2; i++) {
        tag(&t, 4, 5);
        raw(&t, &f[i], 4);
    }
    sub(&g, 5, &t);
    t.n = 0;
    vfield(&t, 1, 3);
    vfield(&t, 2, 10);
    str(&t, 8, "half");
    varint(&packed, 0x3c00); /* 1.0 */
    varint(&packed, 0xc000); /* -2.0 */
    varint(&packed, 0x3800); /* 0.5 */
    sub(&t, 5, &packed);
    sub(&g, 5, &t);
    sub(&m, 7, &g);
    npuc_model *md;
    assert_int_equal(open_bytes("typed.onnx", &m, &md), NPUC_OK);
    assert_int_equal(npuc_model_count(md), 3);
    float v[3];
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(npuc_model_read_f32(ctx, md, i, v), NPUC_OK);
        assert_memory_equal(v, f, sizeof f);
    }
    assert_int_equal(npuc_model_tensor(md, 2)->dtype, NPUC_DTYPE_F16);
    assert_int_equal(npuc_model_read_f32(ctx, md, 2, v), NPUC_OK);
    assert_true(v[0] == 1.0f && v[1] == -2.0f && v[2] == 0.5f);
    npuc_model_close(md);
}

typedef struct bad_case {
    const char *name;
    unsigned char b[64];
    size_t n;
    const char *why;
} bad_case;

static void expect_bad(const char *name, const pb *b, npuc_status want, const char *why) {
    npuc_model *md = (npuc_model *)1;
    npuc_status st = open_bytes(name, b, &md);
    const char *msg = npuc_ctx_errmsg(ctx);
    if (st != want || !strstr(msg, why) || !strstr(msg, name) || strchr(msg, '\n'))
        fail_msg("%s: status %d, message '%s' (want %d, '%s')", name, (int)st, msg, (int)want, why);
    assert_null(md);
}

static void test_malformed(void **state) {
    (void)state;
    static const bad_case cases[] = {
        {"trunc_varint.onnx", {0x08, 0x07, 0x3a, 0x02, 0x0a, 0x80}, 6, "truncated varint"},
        {"len_past_end.onnx", {0x08, 0x07, 0x3a, 0x05, 0x0a, 0x10, 0x0a, 0x01}, 8, "length past the end"},
        {"wire_type.onnx", {0x08, 0x07, 0x3a, 0x02, 0x28, 0x01}, 6, "wrong wire type"},
        {"group.onnx", {0x08, 0x07, 0x3a, 0x01, 0x0b}, 5, "wrong wire type"},
        {"field0.onnx", {0x08, 0x07, 0x3a, 0x02, 0x02, 0x00}, 6, "invalid field number"},
        {"no_graph.onnx", {0x08, 0x07, 0x12, 0x01, 'x'}, 5, "no graph"},
        {"two_graphs.onnx", {0x08, 0x07, 0x3a, 0x00, 0x3a, 0x00}, 6, "a second graph"},
        {"long_varint.onnx", {0x08, 0x07, 0x3a, 0x0b, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, 15,
         "varint longer than 64 bits"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pb b = {0};
        raw(&b, cases[i].b, cases[i].n);
        expect_bad(cases[i].name, &b, NPUC_ERR_FORMAT, cases[i].why);
    }
    /* dims [2,3] F32 with 20 bytes of raw_data */
    pb m = {0}, g = {0}, t = {0};
    const int64_t d23[] = {2, 3};
    vfield(&m, 1, 7);
    tensor_raw(&t, "w", d23, 2, 1, W, 20);
    sub(&g, 5, &t);
    sub(&m, 7, &g);
    expect_bad("short_raw.onnx", &m, NPUC_ERR_FORMAT, "need 24 bytes but raw_data holds 20");
    /* dims [2,3] with 5 float_data values */
    m.n = g.n = t.n = 0;
    vfield(&m, 1, 7);
    vfield(&t, 1, 2);
    vfield(&t, 1, 3);
    vfield(&t, 2, 1);
    str(&t, 8, "w");
    bytes(&t, 4, W, 20);
    sub(&g, 5, &t);
    sub(&m, 7, &g);
    expect_bad("short_typed.onnx", &m, NPUC_ERR_FORMAT, "hold 6 elements but the file has 5 values");
    /* an initializer without a name */
    m.n = g.n = 0;
    vfield(&m, 1, 7);
    tensor_raw(&t, NULL, d23, 2, 1, W, 24);
    sub(&g, 5, &t);
    sub(&m, 7, &g);
    expect_bad("noname.onnx", &m, NPUC_ERR_FORMAT, "an initializer without a name");
    /* external data: "..", absolute, past the end of the data file */
    const char *locs[] = {"../x.data", "/etc/passwd", "sub/../../x.data", "x.data"};
    const char *whys[] = {"not a relative path inside", "not a relative path inside", "not a relative path inside",
                          "runs past the end of 'x.data'"};
    npuc_test_write_file(npuc_test_path("x.data"), W, 16);
    for (int k = 0; k < 4; k++) {
        pb e = {0};
        m.n = g.n = t.n = 0;
        vfield(&m, 1, 7);
        vfield(&t, 1, 2);
        vfield(&t, 1, 3);
        vfield(&t, 2, 1);
        str(&t, 8, "w");
        str(&e, 1, "location");
        str(&e, 2, locs[k]);
        sub(&t, 13, &e);
        vfield(&t, 14, 1);
        sub(&g, 5, &t);
        sub(&m, 7, &g);
        char name[32];
        snprintf(name, sizeof name, "ext%d.onnx", k);
        expect_bad(name, &m, NPUC_ERR_FORMAT, whys[k]);
    }
}

/* Graphs nested 40 deep through If attributes. */
static void test_depth(void **state) {
    (void)state;
    static pb g[2];
    pb *cur = &g[0], *next = &g[1];
    cur->n = 0;
    str(cur, 2, "leaf");
    for (int d = 0; d < 40; d++) {
        pb attr = {0}, node = {0};
        str(&attr, 1, "then_branch");
        sub(&attr, 6, cur);
        str(&node, 4, "If");
        sub(&node, 5, &attr);
        next->n = 0;
        sub(next, 1, &node);
        pb *x = cur;
        cur = next;
        next = x;
    }
    pb m = {0};
    vfield(&m, 1, 7);
    sub(&m, 7, cur);
    expect_bad("deep.onnx", &m, NPUC_ERR_FORMAT, "nested deeper than 32");
}

static void test_every_prefix(void **state) {
    (void)state;
    pb m = {0};
    good_model(&m);
    for (size_t n = 0; n < m.n; n++) {
        pb p = {0};
        raw(&p, m.b, n);
        npuc_model *md = NULL;
        if (open_bytes("prefix.onnx", &p, &md) == NPUC_OK) npuc_model_close(md);
        else assert_null(md);
    }
}

static void test_wire(void **state) {
    (void)state;
    const unsigned char max[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    const unsigned char *p = max;
    uint64_t v;
    assert_null(npuc__ox_varint(&p, max + sizeof max, &v));
    assert_true(v == UINT64_MAX && p == max + sizeof max);
    const unsigned char over[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02};
    p = over;
    assert_non_null(npuc__ox_varint(&p, over + sizeof over, &v));
    /* base64 round trip over every length 0..40 */
    unsigned char in[40];
    for (int i = 0; i < 40; i++) in[i] = (unsigned char)(i * 37 + 11);
    for (size_t n = 0; n <= 40; n++) {
        char *s = npuc__ox_b64_encode(in, n);
        unsigned char *o;
        size_t k;
        assert_int_equal(npuc__ox_b64_decode(s, &o, &k), 0);
        assert_int_equal(k, n);
        if (n) assert_memory_equal(o, in, n);
        free(o);
        free(s);
    }
    char *fb = npuc__ox_b64_encode((const unsigned char *)"foobar", 6);
    assert_string_equal(fb, "Zm9vYmFy"); /* RFC 4648's test vector */
    free(fb);
    unsigned char *o;
    size_t k;
    assert_int_equal(npuc__ox_b64_decode("Zm9v!mFy", &o, &k), -1);
    /* sniff */
    assert_int_equal(npuc__onnx_looks_like((const unsigned char *)"\x08\x07\x12\x04unit", 7), 1);
    assert_int_equal(npuc__onnx_looks_like((const unsigned char *)"\x40\x00\x00\x00\x00\x00\x00\x00{", 9), 0);
}

static int setup(void **state) {
    (void)state;
    return npuc_ctx_new(&ctx) == NPUC_OK ? 0 : -1;
}
static int teardown(void **state) {
    (void)state;
    npuc_ctx_free(ctx);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good),  cmocka_unit_test(test_typed),        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_depth), cmocka_unit_test(test_every_prefix), cmocka_unit_test(test_wire),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
