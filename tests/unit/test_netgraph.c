/*
 * test_netgraph.c - the network graph (src/graph/graph_net*.c) on graphs
 * built by hand in this file, with every expected shape worked out by hand
 * from the network's definition (a conv's kernel [kh,kw,in,out] in Keras
 * order, channels last):
 *
 *   x [-1,8,8,3] -> conv1 (k [3,3,3,16], b [16]) -> c1 -> bn1 (4 x [16]) -> b1
 *     -> relu1 -> r1 -> conv2 (k [3,3,16,32]) -> c2 [-1,8,8,32] -> gap -> g [-1,32]
 *     -> dense (k [32,10], b [10]) -> y [-1,10] (model output)
 *
 * Each edit (remove, split, insert, resize with propagation) is checked
 * through the public read-only view, and each refusal leaves the graph as
 * it was with a message naming what stopped it.
 */
#include <stdlib.h>
#include <string.h>

#include "graph/graph_net.h"
#include "testutil.h"

static npuc_ctx *ctx;

static int setup(void **state) { (void)state; return npuc_ctx_new(&ctx) == NPUC_OK ? 0 : -1; }
static int teardown(void **state) { (void)state; npuc_ctx_free(ctx); return 0; }

/* ------------------------------------------------------------ building */

static size_t val(npuc__ng *g, const char *name, int rank, int64_t a, int64_t b, int64_t c, int64_t d) {
    int64_t s[4] = {a, b, c, d};
    size_t i;
    assert_int_equal(npuc__ng_add_value(ctx, g, name, rank, s, NPUC_GRAPH_EV_CONFIG, NPUC_CONF_CERTAIN,
                                        "hand-built", &i), NPUC_OK);
    return i;
}

static size_t node(npuc__ng *g, const char *name, const char *op, size_t in, size_t out) {
    size_t i;
    assert_int_equal(npuc__ng_add_node(ctx, g, name, op, NULL, &in, 1, &out, 1, NPUC_GRAPH_EV_CONFIG,
                                       NPUC_CONF_CERTAIN, "hand-built", &i), NPUC_OK);
    return i;
}

static void weight(npuc__ng *g, size_t n, const char *tensor, const char *role, int rank, int64_t a, int64_t b,
                   int64_t c, int64_t d, int out_axis, int in_axis) {
    int64_t s[4] = {a, b, c, d};
    assert_int_equal(npuc__ng_add_weight(ctx, g, n, tensor, role, rank, s, out_axis, in_axis), NPUC_OK);
}

static npuc__ng *cnn(void) {
    npuc__ng *g = npuc__ng_new();
    assert_non_null(g);
    g->channels_last = 1;
    size_t x = val(g, "x", 4, -1, 8, 8, 3);
    g->vals[x].is_input = 1;
    size_t c1 = val(g, "c1", 4, -1, 8, 8, 16), b1 = val(g, "b1", 4, -1, 8, 8, 16);
    size_t r1 = val(g, "r1", 4, -1, 8, 8, 16), c2 = val(g, "c2", 4, -1, 8, 8, 32);
    size_t gp = val(g, "g", 2, -1, 32, 0, 0), y = val(g, "y", 2, -1, 10, 0, 0);
    g->vals[y].is_output = 1;
    size_t n = node(g, "conv1", "Conv", x, c1);
    weight(g, n, "conv1/kernel", "kernel", 4, 3, 3, 3, 16, 3, 2);
    weight(g, n, "conv1/bias", "bias", 1, 16, 0, 0, 0, 0, -1);
    n = node(g, "bn1", "BatchNormalization", c1, b1);
    weight(g, n, "bn1/gamma", "gamma", 1, 16, 0, 0, 0, 0, -1);
    weight(g, n, "bn1/beta", "beta", 1, 16, 0, 0, 0, 0, -1);
    weight(g, n, "bn1/moving_mean", "mean", 1, 16, 0, 0, 0, 0, -1);
    weight(g, n, "bn1/moving_variance", "var", 1, 16, 0, 0, 0, 0, -1);
    node(g, "relu1", "Relu", b1, r1);
    n = node(g, "conv2", "Conv", r1, c2);
    weight(g, n, "conv2/kernel", "kernel", 4, 3, 3, 16, 32, 3, 2);
    node(g, "gap", "GlobalAveragePool", c2, gp);
    n = node(g, "dense", "Gemm", gp, y);
    weight(g, n, "dense/kernel", "kernel", 2, 32, 10, 0, 0, 1, 0);
    weight(g, n, "dense/bias", "bias", 1, 10, 0, 0, 0, 0, -1);
    assert_int_equal(npuc__ng_check(ctx, g), NPUC_OK);
    return g;
}

/* The name of the value node `name` reads as input k, through the public view. */
static const char *input_of(const npuc__ng *g, const char *name, size_t k) {
    size_t i = npuc_graph_find_node(g, name);
    assert_true(i != NPUC_GRAPH_NONE);
    npuc_graph_node n;
    assert_int_equal(npuc_graph_get_node(g, i, &n), NPUC_OK);
    assert_true(k < n.ninputs);
    npuc_graph_value v;
    assert_int_equal(npuc_graph_get_value(g, n.inputs[k], &v), NPUC_OK);
    return v.name;
}

static const npuc_graph_weight *weight_of(const npuc__ng *g, const char *tensor) {
    size_t k, i = npuc_graph_weight_node(g, tensor, &k);
    if (i == NPUC_GRAPH_NONE) return NULL;
    npuc_graph_node n;
    npuc_graph_get_node(g, i, &n);
    return &n.weights[k];
}

static void assert_msg(const char *needle) {
    const char *m = npuc_ctx_errmsg(ctx);
    if (!strstr(m, needle)) fail_msg("message '%s' lacks '%s'", m, needle);
    assert_null(strchr(m, '\n'));
}

/* ------------------------------------------------------------ the view */

static void test_view(void **state) {
    (void)state;
    npuc__ng *g = cnn();
    assert_int_equal(npuc_graph_node_count(g), 6);
    assert_int_equal(npuc_graph_value_count(g), 7);
    npuc_graph_node n;
    assert_int_equal(npuc_graph_get_node(g, 1, &n), NPUC_OK);
    assert_string_equal(n.name, "bn1");
    assert_string_equal(n.op, "BatchNormalization");
    assert_int_equal(n.nweights, 4);
    assert_string_equal(n.weights[2].role, "mean");
    assert_string_equal(npuc_graph_evidence_name(n.evidence), "config");
    assert_int_equal(n.confidence, NPUC_CONF_CERTAIN);
    assert_int_equal(npuc_graph_get_node(g, 6, &n), NPUC_ERR_ARG);
    npuc_graph_value v;
    assert_int_equal(npuc_graph_get_value(g, npuc_graph_find_value(g, "c2"), &v), NPUC_OK);
    assert_int_equal(v.nconsumers, 1);
    assert_int_equal(v.producer, npuc_graph_find_node(g, "conv2"));
    assert_int_equal(npuc_graph_get_value(g, npuc_graph_find_value(g, "x"), &v), NPUC_OK);
    assert_int_equal(v.producer, NPUC_GRAPH_NONE);
    assert_true(v.is_input);
    assert_int_equal(npuc_graph_weight_node(g, "dense/bias", NULL), 5);
    assert_int_equal(npuc_graph_weight_node(g, "nope", NULL), NPUC_GRAPH_NONE);
    assert_int_equal(npuc__ng_set_attr(ctx, g, 0, "strides", "1"), NPUC_OK);
    assert_int_equal(npuc__ng_set_attr(ctx, g, 0, "strides", "2"), NPUC_OK);
    const char *k, *x;
    assert_int_equal(npuc_graph_node_attr(g, 0, 0, &k, &x), 0);
    assert_string_equal(k, "strides");
    assert_string_equal(x, "2");
    assert_int_equal(npuc_graph_node_attr(g, 0, 1, &k, &x), -1);
    npuc__ng_free(g);
}

/* A model owns its graph and frees it on close (the sanitizer build would
 * report a leak otherwise). */
static void test_model_owns(void **state) {
    (void)state;
    npuc_model *m = npuc__model_new("hand.safetensors", NPUC_FORMAT_SAFETENSORS);
    assert_non_null(m);
    assert_null(npuc_model_graph(m));
    npuc__model_set_graph(m, cnn());
    assert_int_equal(npuc_graph_node_count(npuc_model_graph(m)), 6);
    npuc__model_set_graph(m, cnn()); /* replaces, freeing the first */
    assert_int_equal(npuc_graph_node_count(npuc_model_graph(m)), 6);
    npuc_model_close(m);
}

/* ------------------------------------------------------------ the check */

static void test_check_refusals(void **state) {
    (void)state;
    npuc__ng *g = npuc__ng_new();
    size_t a = val(g, "a", -1, 0, 0, 0, 0), b = val(g, "b", -1, 0, 0, 0, 0);
    /* names are unique, outputs have one producer */
    size_t i;
    assert_int_equal(npuc__ng_add_value(ctx, g, "a", -1, NULL, NPUC_GRAPH_EV_FILE, NPUC_CONF_CERTAIN, "", &i),
                     NPUC_ERR_ARG);
    assert_msg("'a' defined twice");
    node(g, "n1", "Relu", a, b);
    assert_int_equal(npuc__ng_add_node(ctx, g, "n2", "Relu", NULL, &a, 1, &b, 1, NPUC_GRAPH_EV_FILE,
                                       NPUC_CONF_CERTAIN, "", &i), NPUC_ERR_ARG);
    assert_msg("'b' is made by 'n1' and 'n2'");
    assert_int_equal(npuc__ng_add_node(ctx, g, "n1", "Relu", NULL, &b, 1, NULL, 0, NPUC_GRAPH_EV_FILE,
                                       NPUC_CONF_CERTAIN, "", &i), NPUC_ERR_ARG);
    assert_msg("node 'n1' defined twice");
    /* a cycle: n1 reads a, which n2 makes from b, which n1 makes */
    node(g, "n2", "Relu", b, a);
    assert_int_equal(npuc__ng_check(ctx, g), NPUC_ERR_VALUE);
    assert_msg("is on a cycle");
    npuc__ng_free(g);

    /* a node consuming itself */
    g = npuc__ng_new();
    a = val(g, "self", -1, 0, 0, 0, 0);
    node(g, "loop", "Relu", a, a);
    assert_int_equal(npuc__ng_check(ctx, g), NPUC_ERR_VALUE);
    assert_msg("'loop' is on a cycle");
    npuc__ng_free(g);

    /* a kernel whose input axis disagrees with what it reads */
    g = cnn();
    npuc__ng_weight(g, npuc__ng_find_node(g, "conv2"), "kernel")->shape[2] = 17;
    assert_int_equal(npuc__ng_check(ctx, g), NPUC_ERR_VALUE);
    assert_msg("node 'conv2' (Conv): weight 'conv2/kernel' axis 2 has 17 channels, 'r1' has 16");
    npuc__ng_free(g);

    /* a BatchNorm vector of the wrong length */
    g = cnn();
    npuc__ng_weight(g, npuc__ng_find_node(g, "bn1"), "var")->shape[0] = 15;
    assert_int_equal(npuc__ng_check(ctx, g), NPUC_ERR_VALUE);
    assert_msg("'bn1/moving_variance' axis 0 has 15 channels, 'b1' has 16");
    npuc__ng_free(g);
}

/* ------------------------------------------------------------ remove */

static void test_remove(void **state) {
    (void)state;
    npuc__ng *g = cnn();
    assert_int_equal(npuc__ng_remove_node(ctx, &g, "bn1"), NPUC_OK);
    assert_int_equal(npuc_graph_node_count(g), 5);
    assert_int_equal(npuc_graph_value_count(g), 6);
    assert_int_equal(npuc_graph_find_node(g, "bn1"), NPUC_GRAPH_NONE);
    assert_int_equal(npuc_graph_find_value(g, "b1"), NPUC_GRAPH_NONE);
    assert_string_equal(input_of(g, "relu1", 0), "c1");
    assert_string_equal(input_of(g, "conv2", 0), "r1"); /* renumbered, still right */
    assert_null(weight_of(g, "bn1/gamma"));
    assert_non_null(weight_of(g, "conv2/kernel"));
    assert_int_equal(npuc__ng_check(ctx, g), NPUC_OK);

    /* the last node: its input becomes the model output */
    assert_int_equal(npuc__ng_remove_node(ctx, &g, "relu1"), NPUC_OK);
    size_t sm_in = npuc__ng_find_value(g, "y"), sm_out = val(g, "probs", 2, -1, 10, 0, 0);
    g->vals[sm_in].is_output = 0;
    g->vals[sm_out].is_output = 1;
    node(g, "softmax", "Softmax", sm_in, sm_out);
    assert_int_equal(npuc__ng_remove_node(ctx, &g, "softmax"), NPUC_OK);
    npuc_graph_value v;
    npuc_graph_get_value(g, npuc_graph_find_value(g, "y"), &v);
    assert_true(v.is_output);
    npuc__ng_free(g);
}

static void test_remove_refusals(void **state) {
    (void)state;
    npuc__ng *g = cnn();
    assert_int_equal(npuc__ng_remove_node(ctx, &g, "bn9"), NPUC_ERR_ARG);
    assert_msg("no node 'bn9'");
    /* a conv changes the shape (3 -> 16 channels) */
    assert_int_equal(npuc__ng_remove_node(ctx, &g, "conv1"), NPUC_ERR_ARG);
    assert_msg("node 'conv1' (Conv) changes the shape of 'x'");
    /* two outputs */
    size_t o1 = val(g, "s1", -1, 0, 0, 0, 0), o2 = val(g, "s2", -1, 0, 0, 0, 0), in = npuc__ng_find_value(g, "r1");
    size_t outs[2] = {o1, o2}, i;
    assert_int_equal(npuc__ng_add_node(ctx, g, "split", "Split", NULL, &in, 1, outs, 2, NPUC_GRAPH_EV_FILE,
                                       NPUC_CONF_CERTAIN, "", &i), NPUC_OK);
    assert_int_equal(npuc__ng_remove_node(ctx, &g, "split"), NPUC_ERR_ARG);
    assert_msg("has 2 outputs");
    /* reads nothing */
    size_t o3 = val(g, "s3", -1, 0, 0, 0, 0);
    assert_int_equal(npuc__ng_add_node(ctx, g, "const", "Constant", NULL, NULL, 0, &o3, 1, NPUC_GRAPH_EV_FILE,
                                       NPUC_CONF_CERTAIN, "", &i), NPUC_OK);
    assert_int_equal(npuc__ng_remove_node(ctx, &g, "const"), NPUC_ERR_ARG);
    assert_msg("reads nothing");
    assert_int_equal(npuc_graph_node_count(g), 8); /* unchanged by every refusal */
    npuc__ng_free(g);
}

/* ------------------------------------------------------------ split */

static void test_split(void **state) {
    (void)state;
    npuc__ng *g = cnn();
    /* dense [32,10] + b as A [32,4] then B [4,10] + b */
    npuc_graph_weight w1[1] = {{"dense/kernel.lr_a", "kernel", 2, {32, 4}, 1, 0}};
    npuc_graph_weight w2[2] = {{"dense/kernel.lr_b", "kernel", 2, {4, 10}, 1, 0},
                               {"dense/bias", "bias", 1, {10}, 0, -1}};
    int64_t mid[2] = {-1, 4};
    assert_int_equal(npuc__ng_split_node(ctx, &g, "dense", "dense_b", "Gemm", "dense_mid", 2, mid, w1, 1, w2, 2),
                     NPUC_OK);
    assert_int_equal(npuc_graph_node_count(g), 7);
    assert_string_equal(input_of(g, "dense_b", 0), "dense_mid");
    assert_string_equal(input_of(g, "dense", 0), "g");
    npuc_graph_value v;
    npuc_graph_get_value(g, npuc_graph_find_value(g, "y"), &v);
    assert_int_equal(v.producer, npuc_graph_find_node(g, "dense_b"));
    assert_true(v.is_output);
    npuc_graph_get_value(g, npuc_graph_find_value(g, "dense_mid"), &v);
    assert_int_equal(v.producer, npuc_graph_find_node(g, "dense"));
    assert_int_equal(v.shape[1], 4);
    assert_null(weight_of(g, "dense/kernel"));
    assert_int_equal(npuc_graph_weight_node(g, "dense/bias", NULL), npuc_graph_find_node(g, "dense_b"));
    npuc__ng_free(g);
}

/* A factored conv: a 3x3 conv with r = 4 outputs, then a 1x1 conv; the
 * rank-4 value between them is checked against both kernels. */
static void test_split_conv(void **state) {
    (void)state;
    npuc__ng *g = cnn();
    npuc_graph_weight w1[1] = {{"conv2/kernel.lr_b", "kernel", 4, {3, 3, 16, 4}, 3, 2}};
    npuc_graph_weight w2[1] = {{"conv2/kernel.lr_a", "kernel", 4, {1, 1, 4, 32}, 3, 2}};
    int64_t mid[4] = {-1, 8, 8, 4};
    assert_int_equal(npuc__ng_split_node(ctx, &g, "conv2", "conv2.lr", "Conv", "c2_mid", 4, mid, w1, 1, w2, 1),
                     NPUC_OK);
    assert_string_equal(input_of(g, "conv2.lr", 0), "c2_mid");
    assert_string_equal(input_of(g, "gap", 0), "c2");
    npuc_graph_value v;
    npuc_graph_get_value(g, npuc_graph_find_value(g, "c2"), &v);
    assert_int_equal(v.producer, npuc_graph_find_node(g, "conv2.lr"));
    /* the 1x1 conv reading 5 channels from the rank-4 value is refused */
    npuc__ng_free(g);
    g = cnn();
    w2[0].shape[2] = 5;
    assert_int_equal(npuc__ng_split_node(ctx, &g, "conv2", "conv2.lr", "Conv", "c2_mid", 4, mid, w1, 1, w2, 1),
                     NPUC_ERR_VALUE);
    assert_msg("weight 'conv2/kernel.lr_a' axis 2 has 5 channels, 'c2_mid' has 4");
    npuc__ng_free(g);
}

static void test_split_refusals(void **state) {
    (void)state;
    npuc__ng *g = cnn();
    npuc_graph_weight w1[1] = {{"A", "kernel", 2, {32, 5}, 1, 0}}; /* makes 5, B reads 4 */
    npuc_graph_weight w2[1] = {{"B", "kernel", 2, {4, 10}, 1, 0}};
    int64_t mid[2] = {-1, 4};
    assert_int_equal(npuc__ng_split_node(ctx, &g, "dense", "dense_b", "Gemm", "m", 2, mid, w1, 1, w2, 1),
                     NPUC_ERR_VALUE);
    assert_msg("weight 'A' axis 1 has 5 channels, 'm' has 4");
    assert_int_equal(npuc__ng_split_node(ctx, &g, "dense", "conv2", "Gemm", "m", 2, mid, NULL, 0, NULL, 0),
                     NPUC_ERR_ARG);
    assert_msg("a node 'conv2' exists");
    assert_int_equal(npuc__ng_split_node(ctx, &g, "dense", "d2", "Gemm", "c1", 2, mid, NULL, 0, NULL, 0),
                     NPUC_ERR_ARG);
    assert_msg("a value 'c1' exists");
    assert_int_equal(npuc__ng_split_node(ctx, &g, "nothere", "d2", "Gemm", "m", 2, mid, NULL, 0, NULL, 0),
                     NPUC_ERR_ARG);
    assert_msg("no node 'nothere'");
    assert_int_equal(npuc_graph_node_count(g), 6);
    assert_non_null(weight_of(g, "dense/kernel"));
    npuc__ng_free(g);
}

/* ------------------------------------------------------------ insert */

static void test_insert(void **state) {
    (void)state;
    npuc__ng *g = cnn();
    assert_int_equal(npuc__ng_insert_node(ctx, &g, "r1", "conv2", "dq", "DequantizeLinear"), NPUC_OK);
    assert_string_equal(input_of(g, "conv2", 0), "dq:0");
    assert_string_equal(input_of(g, "dq", 0), "r1");
    npuc_graph_value v;
    npuc_graph_get_value(g, npuc_graph_find_value(g, "dq:0"), &v);
    assert_int_equal(v.rank, 4);
    assert_int_equal(v.shape[3], 16);
    /* on the model output with every consumer: the output moves */
    assert_int_equal(npuc__ng_insert_node(ctx, &g, "y", NULL, "post", "Identity"), NPUC_OK);
    npuc_graph_get_value(g, npuc_graph_find_value(g, "y"), &v);
    assert_false(v.is_output);
    npuc_graph_get_value(g, npuc_graph_find_value(g, "post:0"), &v);
    assert_true(v.is_output);
    assert_int_equal(npuc_graph_node_count(g), 8);

    /* refusals */
    assert_int_equal(npuc__ng_insert_node(ctx, &g, "c1", "conv2", "q2", "Identity"), NPUC_ERR_ARG);
    assert_msg("node 'conv2' does not read 'c1'");
    assert_int_equal(npuc__ng_insert_node(ctx, &g, "zz", NULL, "q2", "Identity"), NPUC_ERR_ARG);
    assert_msg("no value 'zz'");
    assert_int_equal(npuc__ng_insert_node(ctx, &g, "c1", "nobody", "q2", "Identity"), NPUC_ERR_ARG);
    assert_msg("no node 'nobody'");
    assert_int_equal(npuc__ng_insert_node(ctx, &g, "c1", NULL, "dq", "Identity"), NPUC_ERR_ARG);
    assert_msg("a node of that name exists");
    assert_int_equal(npuc_graph_node_count(g), 8);
    npuc__ng_free(g);
}

/* ------------------------------------------------------------ resize */

static int64_t wdim(const npuc__ng *g, const char *tensor, int axis) {
    const npuc_graph_weight *w = weight_of(g, tensor);
    assert_non_null(w);
    return w->shape[axis];
}

static void test_resize(void **state) {
    (void)state;
    npuc__ng *g = cnn();
    const char *v[1] = {"c1"};
    npuc__ng_change *ch;
    size_t nch;
    assert_int_equal(npuc__ng_resize(ctx, &g, v, 1, 12, &ch, &nch), NPUC_OK);
    /* conv1 out (kernel axis 3, bias), bn1's four vectors, conv2's kernel axis 2 */
    assert_int_equal(nch, 7);
    assert_int_equal(wdim(g, "conv1/kernel", 3), 12);
    assert_int_equal(wdim(g, "conv1/kernel", 2), 3);
    assert_int_equal(wdim(g, "conv1/bias", 0), 12);
    assert_int_equal(wdim(g, "bn1/gamma", 0), 12);
    assert_int_equal(wdim(g, "bn1/moving_variance", 0), 12);
    assert_int_equal(wdim(g, "conv2/kernel", 2), 12);
    assert_int_equal(wdim(g, "conv2/kernel", 3), 32);
    int seen_conv2 = 0;
    for (size_t k = 0; k < nch; k++)
        if (ch[k].node == npuc_graph_find_node(g, "conv2")) {
            assert_int_equal(ch[k].axis, 2);
            assert_int_equal(ch[k].extent, 12);
            seen_conv2 = 1;
        }
    assert_true(seen_conv2);
    free(ch);
    npuc_graph_value x;
    npuc_graph_get_value(g, npuc_graph_find_value(g, "r1"), &x);
    assert_int_equal(x.shape[3], 12);
    assert_int_equal(x.shape[1], 8);
    npuc_graph_get_value(g, npuc_graph_find_value(g, "c2"), &x);
    assert_int_equal(x.shape[3], 32);

    /* through GlobalAveragePool into the dense's input axis */
    v[0] = "c2";
    assert_int_equal(npuc__ng_resize(ctx, &g, v, 1, 20, NULL, NULL), NPUC_OK);
    assert_int_equal(wdim(g, "dense/kernel", 0), 20);
    assert_int_equal(wdim(g, "dense/kernel", 1), 10);
    npuc__ng_free(g);
}

/* x -> conv_a -> a, x -> conv_b -> b, add(a, b) -> s -> conv_c; then a
 * Flatten -> dense branch, a Reshape, an op the table does not know. */
static npuc__ng *branches(void) {
    npuc__ng *g = npuc__ng_new();
    g->channels_last = 1;
    size_t x = val(g, "x", 4, -1, 4, 4, 3);
    g->vals[x].is_input = 1;
    size_t a = val(g, "a", 4, -1, 4, 4, 8), b = val(g, "b", 4, -1, 4, 4, 8), s = val(g, "s", 4, -1, 4, 4, 8);
    size_t c = val(g, "c", 4, -1, 4, 4, 6), f = val(g, "f", 2, -1, 96, 0, 0), d = val(g, "d", 2, -1, 5, 0, 0);
    size_t n = node(g, "conv_a", "Conv", x, a);
    weight(g, n, "conv_a.weight", "kernel", 4, 8, 3, 1, 1, 0, 1); /* OIHW as ONNX writes it */
    n = node(g, "conv_b", "Conv", x, b);
    weight(g, n, "conv_b.weight", "kernel", 4, 8, 3, 1, 1, 0, 1);
    size_t ins[2] = {a, b}, i;
    assert_int_equal(npuc__ng_add_node(ctx, g, "add", "Add", NULL, ins, 2, &s, 1, NPUC_GRAPH_EV_FILE,
                                       NPUC_CONF_CERTAIN, "", &i), NPUC_OK);
    n = node(g, "conv_c", "Conv", s, c);
    weight(g, n, "conv_c.weight", "kernel", 4, 6, 8, 1, 1, 0, 1);
    node(g, "flat", "Flatten", c, f);
    n = node(g, "fc", "Gemm", f, d);
    weight(g, n, "fc.weight", "kernel", 2, 5, 96, 0, 0, 0, 1);
    assert_int_equal(npuc__ng_check(ctx, g), NPUC_OK);
    return g;
}

static void test_resize_merge_flatten(void **state) {
    (void)state;
    npuc__ng *g = branches();
    const char *one[1] = {"a"};
    /* one branch of an Add alone is refused, nothing changes */
    assert_int_equal(npuc__ng_resize(ctx, &g, one, 1, 5, NULL, NULL), NPUC_ERR_UNSUPPORTED);
    assert_msg("node 'add' (Add) reads 'a' (5 channels) and 'b' (8): their producers must be resized together");
    assert_int_equal(wdim(g, "conv_a.weight", 0), 8);
    /* both together: the Add passes 5 channels to conv_c */
    const char *both[2] = {"a", "b"};
    assert_int_equal(npuc__ng_resize(ctx, &g, both, 2, 5, NULL, NULL), NPUC_OK);
    assert_int_equal(wdim(g, "conv_a.weight", 0), 5);
    assert_int_equal(wdim(g, "conv_b.weight", 0), 5);
    assert_int_equal(wdim(g, "conv_c.weight", 1), 5);
    /* conv_c to 2 channels: Flatten makes 4*4*2 = 32, the Gemm's in axis follows */
    const char *c[1] = {"c"};
    assert_int_equal(npuc__ng_resize(ctx, &g, c, 1, 2, NULL, NULL), NPUC_OK);
    assert_int_equal(wdim(g, "fc.weight", 1), 32);
    assert_int_equal(wdim(g, "fc.weight", 0), 5);
    npuc__ng_free(g);
}

static void test_resize_refusals(void **state) {
    (void)state;
    npuc__ng *g = cnn();
    const char *v[1] = {"y"};
    assert_int_equal(npuc__ng_resize(ctx, &g, v, 1, 5, NULL, NULL), NPUC_ERR_UNSUPPORTED);
    assert_msg("reaches model output 'y'");
    v[0] = "x";
    assert_int_equal(npuc__ng_resize(ctx, &g, v, 1, 2, NULL, NULL), NPUC_ERR_ARG);
    assert_msg("'x' is a model input");
    v[0] = "b1";
    assert_int_equal(npuc__ng_resize(ctx, &g, v, 1, 2, NULL, NULL), NPUC_ERR_ARG);
    assert_msg("made by 'bn1' (BatchNormalization), which has no output channels of its own");
    v[0] = "c1";
    assert_int_equal(npuc__ng_resize(ctx, &g, v, 1, 0, NULL, NULL), NPUC_ERR_ARG);
    v[0] = "nope";
    assert_int_equal(npuc__ng_resize(ctx, &g, v, 1, 3, NULL, NULL), NPUC_ERR_ARG);
    assert_msg("no value 'nope'");
    /* a Reshape after relu1 states the old channel count */
    size_t r1 = npuc__ng_find_value(g, "r1"), rs = val(g, "rs", 2, -1, 1024, 0, 0);
    node(g, "reshape", "Reshape", r1, rs);
    v[0] = "c1";
    assert_int_equal(npuc__ng_resize(ctx, &g, v, 1, 12, NULL, NULL), NPUC_ERR_UNSUPPORTED);
    assert_msg("node 'reshape' (Reshape) reads resized 'r1': its target shape states the old size");
    npuc__ng_free(g);

    g = cnn();
    size_t b1 = npuc__ng_find_value(g, "b1"), o = val(g, "mystery_out", -1, 0, 0, 0, 0);
    node(g, "mystery", "FancyOp", b1, o);
    assert_int_equal(npuc__ng_resize(ctx, &g, v, 1, 12, NULL, NULL), NPUC_ERR_UNSUPPORTED);
    assert_msg("node 'mystery' (FancyOp) reads resized 'b1': the graph does not know how this op carries channels");
    assert_int_equal(wdim(g, "conv1/kernel", 3), 16); /* unchanged */
    npuc__ng_free(g);

    /* a Flatten whose input shape is not known */
    g = branches();
    g->vals[npuc__ng_find_value(g, "c")].shape[1] = -1;
    const char *c[1] = {"c"};
    assert_int_equal(npuc__ng_resize(ctx, &g, c, 1, 2, NULL, NULL), NPUC_ERR_UNSUPPORTED);
    assert_msg("the flattened size cannot be proven");
    npuc__ng_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_view),
        cmocka_unit_test(test_model_owns),
        cmocka_unit_test(test_check_refusals),
        cmocka_unit_test(test_remove),
        cmocka_unit_test(test_remove_refusals),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_split_conv),
        cmocka_unit_test(test_split_refusals),
        cmocka_unit_test(test_insert),
        cmocka_unit_test(test_resize),
        cmocka_unit_test(test_resize_merge_flatten),
        cmocka_unit_test(test_resize_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
