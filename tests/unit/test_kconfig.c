/*
 * test_kconfig.c - the Keras model configuration reader
 * (src/graph/graph_kconfig.c) on configurations written here by hand in
 * the forms Keras writes (Keras 2 inbound_nodes lists, Keras 3
 * __keras_tensor__ args, Sequential old and new, Functional inside
 * Functional, Sequential inside Functional, a shared layer called twice),
 * with the expected edges read off the JSON by hand; then hostile texts:
 * duplicate keys, a cycle, a layer consuming itself, depth bombs, too many
 * layers, a reference to nothing.  Each refusal is NPUC_ERR_FORMAT with
 * one line naming the label.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "graph/graph_kconfig.h"
#include "testutil.h"

static npuc_ctx *ctx;

static int setup(void **state) { (void)state; return npuc_ctx_new(&ctx) == NPUC_OK ? 0 : -1; }
static int teardown(void **state) { (void)state; npuc_ctx_free(ctx); return 0; }

static npuc__ng *parse_ok(const char *json) {
    npuc__ng *g = NULL;
    npuc_status st = npuc__kconfig_parse(ctx, "m.h5: model_config", json, strlen(json), &g);
    if (st != NPUC_OK) fail_msg("refused: %s", npuc_ctx_errmsg(ctx));
    return g;
}

static void parse_bad(const char *json, size_t len, const char *needle) {
    npuc__ng *g = (npuc__ng *)1;
    assert_int_equal(npuc__kconfig_parse(ctx, "m.h5: model_config", json, len, &g), NPUC_ERR_FORMAT);
    assert_null(g);
    const char *m = npuc_ctx_errmsg(ctx);
    if (strncmp(m, "m.h5: model_config: ", 20) != 0 || !strstr(m, needle))
        fail_msg("message '%s' lacks '%s'", m, needle);
    assert_null(strchr(m, '\n'));
}

/* "a,b" when node `name` reads values a and b, in order. */
static void assert_inputs(const npuc__ng *g, const char *name, const char *want) {
    size_t i = npuc_graph_find_node(g, name);
    if (i == NPUC_GRAPH_NONE) fail_msg("no node '%s'", name);
    npuc_graph_node n;
    npuc_graph_get_node(g, i, &n);
    char got[512] = "";
    for (size_t k = 0; k < n.ninputs; k++) {
        npuc_graph_value v;
        npuc_graph_get_value(g, n.inputs[k], &v);
        if (k) strcat(got, ",");
        strncat(got, v.name, sizeof got - strlen(got) - 2);
    }
    if (strcmp(got, want) != 0) fail_msg("node '%s' reads '%s', expected '%s'", name, got, want);
}

static const char *op_of(const npuc__ng *g, const char *name) {
    npuc_graph_node n;
    assert_int_equal(npuc_graph_get_node(g, npuc_graph_find_node(g, name), &n), NPUC_OK);
    return n.op;
}

static int is_output(const npuc__ng *g, const char *value) {
    npuc_graph_value v;
    assert_int_equal(npuc_graph_get_value(g, npuc_graph_find_value(g, value), &v), NPUC_OK);
    return v.is_output;
}

/* ------------------------------------------------------------ the forms */

static void test_keras2_functional(void **state) {
    (void)state;
    npuc__ng *g = parse_ok(
        "{\"class_name\": \"Functional\", \"config\": {\"name\": \"m\", \"layers\": ["
        " {\"class_name\": \"InputLayer\", \"name\": \"input_1\", \"config\": {\"batch_input_shape\": [null, 8, 8, 3],"
        "  \"name\": \"input_1\"}, \"inbound_nodes\": []},"
        " {\"class_name\": \"Conv2D\", \"name\": \"conv1\", \"config\": {\"name\": \"conv1\", \"filters\": 16,"
        "  \"kernel_size\": [3, 3], \"padding\": \"same\"}, \"inbound_nodes\": [[[\"input_1\", 0, 0, {}]]]},"
        " {\"class_name\": \"BatchNormalization\", \"name\": \"bn1\", \"config\": {\"name\": \"bn1\", \"axis\": [3]},"
        "  \"inbound_nodes\": [[[\"conv1\", 0, 0, {}]]]},"
        " {\"class_name\": \"Activation\", \"name\": \"act\", \"config\": {\"name\": \"act\", \"activation\": \"relu\"},"
        "  \"inbound_nodes\": [[[\"bn1\", 0, 0, {}]]]},"
        " {\"class_name\": \"Add\", \"name\": \"add\", \"config\": {\"name\": \"add\"},"
        "  \"inbound_nodes\": [[[\"act\", 0, 0, {}], [\"conv1\", 0, 0, {}]]]},"
        " {\"class_name\": \"Dense\", \"name\": \"dense\", \"config\": {\"name\": \"dense\", \"units\": 16},"
        "  \"inbound_nodes\": [[[\"add\", 0, 0, {}]], [[\"dense\", 0, 0, {}]]]}],"
        " \"input_layers\": [[\"input_1\", 0, 0]], \"output_layers\": [[\"dense\", 1, 0]]}}");
    assert_int_equal(npuc_graph_node_count(g), 7); /* dense twice: a shared layer */
    assert_inputs(g, "conv1", "input_1");
    assert_inputs(g, "bn1", "conv1");
    assert_inputs(g, "add", "act,conv1");
    assert_inputs(g, "dense", "add");
    assert_inputs(g, "dense#1", "dense");
    assert_string_equal(op_of(g, "conv1"), "Conv");
    assert_string_equal(op_of(g, "dense#1"), "Gemm");
    assert_string_equal(op_of(g, "bn1"), "BatchNormalization");
    assert_true(is_output(g, "dense#1"));
    assert_false(is_output(g, "dense"));
    npuc_graph_value v;
    npuc_graph_get_value(g, npuc_graph_find_value(g, "input_1"), &v);
    assert_true(v.is_input);
    assert_int_equal(v.rank, 4);
    assert_int_equal(v.shape[0], -1);
    assert_int_equal(v.shape[3], 3);
    npuc_graph_node n;
    npuc_graph_get_node(g, npuc_graph_find_node(g, "conv1"), &n);
    assert_string_equal(n.source_op, "Conv2D");
    assert_string_equal(npuc_graph_evidence_name(n.evidence), "config");
    assert_string_equal(npuc__ng_attr(g, npuc_graph_find_node(g, "conv1"), "filters"), "16");
    assert_string_equal(npuc__ng_attr(g, npuc_graph_find_node(g, "conv1"), "padding"), "same");
    assert_string_equal(npuc__ng_attr(g, npuc_graph_find_node(g, "conv1"), "kernel_size"), "[3,3]");
    npuc__ng_free(g);
}

#define KT(name) "{\"class_name\": \"__keras_tensor__\", \"config\": {\"shape\": [null, 4], \"dtype\": \"float32\"," \
                 " \"keras_history\": [\"" name "\", 0, 0]}}"

static void test_keras3_functional(void **state) {
    (void)state;
    npuc__ng *g = parse_ok(
        "{\"module\": \"keras\", \"class_name\": \"Functional\", \"config\": {\"name\": \"f\", \"layers\": ["
        " {\"module\": \"keras.layers\", \"class_name\": \"InputLayer\", \"name\": \"x\","
        "  \"config\": {\"batch_shape\": [null, 4], \"name\": \"x\"}, \"inbound_nodes\": []},"
        " {\"class_name\": \"Dense\", \"name\": \"a\", \"config\": {\"name\": \"a\", \"units\": 4},"
        "  \"inbound_nodes\": [{\"args\": [" KT("x") "], \"kwargs\": {}}]},"
        " {\"class_name\": \"Dense\", \"name\": \"b\", \"config\": {\"name\": \"b\", \"units\": 4},"
        "  \"inbound_nodes\": [{\"args\": [" KT("x") "], \"kwargs\": {\"training\": false, \"mask\": " KT("a") "}}]},"
        " {\"class_name\": \"Concatenate\", \"name\": \"cat\", \"config\": {\"name\": \"cat\", \"axis\": -1},"
        "  \"inbound_nodes\": [{\"args\": [[" KT("a") ", " KT("b") "]], \"kwargs\": {}}]}],"
        " \"input_layers\": [\"x\", 0, 0], \"output_layers\": [\"cat\", 0, 0]}}");
    assert_int_equal(npuc_graph_node_count(g), 4);
    assert_inputs(g, "a", "x");
    assert_inputs(g, "b", "x,a"); /* the keyword tensor after the positional ones */
    assert_inputs(g, "cat", "a,b");
    assert_string_equal(op_of(g, "cat"), "Concat");
    assert_true(is_output(g, "cat"));
    npuc__ng_free(g);
}

static void test_sequential(void **state) {
    (void)state;
    /* Keras >= 2.2.3 */
    npuc__ng *g = parse_ok(
        "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
        " {\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 5], \"name\": \"in\"}},"
        " {\"class_name\": \"Dense\", \"config\": {\"name\": \"d1\", \"units\": 3}},"
        " {\"class_name\": \"Dense\", \"config\": {\"name\": \"d2\", \"units\": 2}}]}}");
    assert_inputs(g, "d1", "in");
    assert_inputs(g, "d2", "d1");
    assert_true(is_output(g, "d2"));
    npuc__ng_free(g);
    /* Keras < 2.2.3: config is the list */
    g = parse_ok("{\"class_name\": \"Sequential\", \"config\": ["
                 " {\"class_name\": \"Dense\", \"config\": {\"name\": \"d1\", \"batch_input_shape\": [null, 5]}},"
                 " {\"class_name\": \"Dropout\", \"config\": {\"name\": \"dr\"}},"
                 " {\"class_name\": \"Dense\", \"config\": {\"name\": \"d2\"}}]}");
    assert_inputs(g, "d1", "");
    assert_inputs(g, "dr", "d1");
    assert_inputs(g, "d2", "dr");
    assert_string_equal(op_of(g, "dr"), "Dropout");
    npuc__ng_free(g);
}

static void test_nested(void **state) {
    (void)state;
    /* a Functional holding a Functional and a Sequential, each called once */
    npuc__ng *g = parse_ok(
        "{\"class_name\": \"Functional\", \"config\": {\"layers\": ["
        " {\"class_name\": \"InputLayer\", \"name\": \"input_1\", \"config\": {\"name\": \"input_1\"},"
        "  \"inbound_nodes\": []},"
        " {\"class_name\": \"Functional\", \"name\": \"inner\", \"config\": {\"name\": \"inner\", \"layers\": ["
        "   {\"class_name\": \"InputLayer\", \"name\": \"in2\", \"config\": {\"name\": \"in2\"}, \"inbound_nodes\": []},"
        "   {\"class_name\": \"Dense\", \"name\": \"d2\", \"config\": {\"name\": \"d2\"},"
        "    \"inbound_nodes\": [[[\"in2\", 0, 0, {}]]]}],"
        "  \"input_layers\": [[\"in2\", 0, 0]], \"output_layers\": [[\"d2\", 0, 0]]},"
        "  \"inbound_nodes\": [[[\"input_1\", 0, 0, {}]]]},"
        " {\"class_name\": \"Sequential\", \"name\": \"block\", \"config\": {\"name\": \"block\", \"layers\": ["
        "   {\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c_in\"}},"
        "   {\"class_name\": \"ReLU\", \"config\": {\"name\": \"r\"}}]},"
        "  \"inbound_nodes\": [[[\"inner\", 0, 0, {}]]]},"
        " {\"class_name\": \"Dense\", \"name\": \"out\", \"config\": {\"name\": \"out\"},"
        "  \"inbound_nodes\": [[[\"block\", 0, 0, {}]]]}],"
        " \"input_layers\": [[\"input_1\", 0, 0]], \"output_layers\": [[\"out\", 0, 0]]}}");
    assert_inputs(g, "d2", "input_1"); /* in2 stands for what inner was called on */
    assert_inputs(g, "c_in", "d2");
    assert_inputs(g, "r", "c_in");
    assert_inputs(g, "out", "r");
    assert_int_equal(npuc_graph_find_node(g, "inner"), NPUC_GRAPH_NONE); /* flat: no node for a nested model */
    assert_true(is_output(g, "out"));
    npuc_graph_value v;
    npuc_graph_get_value(g, npuc_graph_find_value(g, "in2"), &v);
    assert_false(v.is_input);
    npuc__ng_free(g);
}

/* ------------------------------------------------------------ hostile texts */

#define L2(name, cls, inbound) \
    "{\"class_name\": \"" cls "\", \"name\": \"" name "\", \"config\": {\"name\": \"" name "\"}, \"inbound_nodes\": " inbound "}"

static void test_hostile(void **state) {
    (void)state;
    const char *s;
    s = "{\"class_name\": \"Functional\", \"config\": {\"layers\": [], \"layers\": []}}";
    parse_bad(s, strlen(s), "duplicate object key");
    s = "{\"class_name\": \"Functional\", \"config\": {\"layers\": [" L2("a", "Dense", "[[[\"a\", 0, 0, {}]]]") "]}}";
    parse_bad(s, strlen(s), "layer 'a' consumes its own output");
    s = "{\"class_name\": \"Functional\", \"config\": {\"layers\": [" L2("a", "Dense", "[[[\"b\", 0, 0, {}]]]") ", "
        L2("b", "Dense", "[[[\"a\", 0, 0, {}]]]") "]}}";
    parse_bad(s, strlen(s), "is on a cycle");
    s = "{\"class_name\": \"Functional\", \"config\": {\"layers\": [" L2("a", "Dense", "[[[\"ghost\", 0, 0, {}]]]")
        "]}}";
    parse_bad(s, strlen(s), "layer 'ghost', which the model does not list");
    s = "{\"class_name\": \"Functional\", \"config\": {\"layers\": [" L2("a", "Dense", "[]") ", "
        L2("b", "Dense", "[[[\"a\", 3, 0, {}]]]") "]}}";
    parse_bad(s, strlen(s), "a call of 'a' that the layer does not have");
    s = "{\"class_name\": \"Functional\", \"config\": {\"layers\": [" L2("a", "Dense", "[]") ", " L2("a", "Dense", "[]")
        "]}}";
    parse_bad(s, strlen(s), "layer 'a' is listed twice");
    s = "[1, 2]";
    parse_bad(s, strlen(s), "not a JSON object");
    s = "{\"class_name\": \"Functional\", \"config\": {}}";
    parse_bad(s, strlen(s), "no layer list");
    s = "{\"class_name\": \"Func";
    parse_bad(s, strlen(s), "line 1");
}

/* Deeply nested arrays (jansson stops at 2048) and models nested 40 deep. */
static void test_depth_bombs(void **state) {
    (void)state;
    size_t n = 200000;
    char *s = malloc(2 * n + 64);
    size_t p = (size_t)sprintf(s, "{\"class_name\": \"Functional\", \"config\": {\"layers\": ");
    for (size_t i = 0; i < n; i++) s[p++] = '[';
    for (size_t i = 0; i < n; i++) s[p++] = ']';
    p += (size_t)sprintf(s + p, "}}");
    parse_bad(s, p, "maximum parsing depth");
    free(s);

    char *m = malloc(1 << 16);
    p = 0;
    for (int d = 0; d < 40; d++)
        p += (size_t)sprintf(m + p, "{\"class_name\": \"Sequential\", \"name\": \"m%d\", \"config\": {\"name\": "
                                    "\"m%d\", \"layers\": [", d, d);
    p += (size_t)sprintf(m + p, "{\"class_name\": \"Dense\", \"config\": {\"name\": \"leaf\"}}");
    for (int d = 0; d < 40; d++) p += (size_t)sprintf(m + p, "]}}");
    parse_bad(m, p, "models nested deeper than 32 levels");
    free(m);
}

/* Too many layers: over the layer cap (65536) in text small enough to be
 * read, and a million layers, over the text cap; and a long valid chain,
 * which must parse (in linear time: names are hashed). */
static char *chain(size_t n, size_t *len) {
    char *s = malloc(n * 96 + 128);
    size_t p = (size_t)sprintf(s, "{\"class_name\": \"Functional\", \"config\": {\"layers\": [");
    for (size_t i = 0; i < n; i++) {
        if (i == 0) p += (size_t)sprintf(s + p, "{\"class_name\":\"InputLayer\",\"name\":\"l0\",\"inbound_nodes\":[]}");
        else p += (size_t)sprintf(s + p, ",{\"class_name\":\"ReLU\",\"name\":\"l%zu\",\"inbound_nodes\":[[[\"l%zu\",0,0,{}]]]}",
                                  i, i - 1);
    }
    p += (size_t)sprintf(s + p, "], \"output_layers\": [[\"l%zu\", 0, 0]]}}", n - 1);
    *len = p;
    return s;
}

static void test_many_layers(void **state) {
    (void)state;
    size_t len;
    char *s = chain(60000, &len);
    npuc__ng *g = NULL;
    assert_int_equal(npuc__kconfig_parse(ctx, "m.h5: model_config", s, len, &g), NPUC_OK);
    assert_int_equal(npuc_graph_node_count(g), 60000);
    assert_inputs(g, "l59999", "l59998");
    assert_true(is_output(g, "l59999"));
    npuc__ng_free(g);
    free(s);
    s = chain(70000, &len);
    parse_bad(s, len, "more than 65536 layers");
    free(s);
    s = chain(1000000, &len);
    parse_bad(s, len, "more than the 16777216 a model configuration may have");
    free(s);
}

/* A real Keras 2 config (nsfwjs MobileNetV2, checked into the fuzz corpus):
 * every layer is one node, and each node reads exactly the layers its
 * single inbound node names, in order (read here directly from the JSON). */
static void test_real_config(void **state) {
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/fuzz/corpus/kconfig/seed_nsfwjs_mobilenet_v2.json", getenv("NPUC_SRC"));
    size_t len;
    char *text = npuc_test_read_file(path, &len);
    assert_non_null(text);
    npuc__ng *g = NULL;
    assert_int_equal(npuc__kconfig_parse(ctx, "nsfwjs: model_config", text, len, &g), NPUC_OK);
    json_t *root = json_loadb(text, len, 0, NULL), *layers = json_object_get(json_object_get(root, "config"), "layers");
    assert_int_equal(npuc_graph_node_count(g), json_array_size(layers));
    size_t i, nadd = 0;
    json_t *l;
    json_array_foreach(layers, i, l) {
        const char *name = json_string_value(json_object_get(l, "name"));
        json_t *node = json_array_get(json_object_get(l, "inbound_nodes"), 0);
        char want[512] = "";
        size_t k;
        json_t *e;
        json_array_foreach(node, k, e) {
            if (k) strcat(want, ",");
            strcat(want, json_string_value(json_array_get(e, 0)));
        }
        assert_inputs(g, name, want);
        nadd += strcmp(json_string_value(json_object_get(l, "class_name")), "Add") == 0;
    }
    assert_true(nadd > 0);
    assert_true(is_output(g, "dense_3"));
    json_decref(root);
    npuc__ng_free(g);
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keras2_functional),
        cmocka_unit_test(test_keras3_functional),
        cmocka_unit_test(test_sequential),
        cmocka_unit_test(test_nested),
        cmocka_unit_test(test_real_config),
        cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_depth_bombs),
        cmocka_unit_test(test_many_layers),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
