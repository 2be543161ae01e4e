/*
 * test_graph.c - the graph module (src/graph/) on small hand-written models:
 * BatchNorm attachments and consumer edges from each kind of evidence, with
 * the expected answers worked out by hand from the rules in
 * docs/fold-bn.md and docs/sparsity.md:
 *   explicit     --pair statements and a pairs file
 *   config       a tiny Keras model_config (Functional, with an activation
 *                layer in between and one BatchNorm after an activation)
 *   name         PyTorch nn.Sequential indices, conv1 / bn1, and two
 *                BatchNorms naming one conv (neither links)
 *   order        Paddle-style counter names in graph order (nearest
 *                preceding conv) and in alphabetical order (aligned by the
 *                numbers in the names: conv2d_9 before conv2d_10)
 * Then the real models of ../shared/data against their catalogs' bn_pairs
 * (skipped when the folder is absent).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "graph/graph.h"
#include "graph/graph_kconfig.h"
#include "testutil.h"

static npuc_ctx *ctx;

static int setup(void **state) { (void)state; return npuc_ctx_new(&ctx) == NPUC_OK ? 0 : -1; }
static int teardown(void **state) { (void)state; npuc_ctx_free(ctx); return 0; }

/* ------------------------------------------------------------ models */

typedef struct tspec {
    const char *name;
    int rank;
    int64_t shape[4];
    const char *group; /* Keras layer, or NULL */
} tspec;

/* Writes the tensors (float32, values irrelevant to the graph) in the given
 * storage order, with an optional model_config. */
static void write_model(const char *path, const tspec *ts, size_t n, const char *model_config) {
    npuc_writer *w;
    npuc_write_opts o = npuc_write_opts_defaults();
    o.overwrite = 1;
    assert_int_equal(npuc_writer_open(ctx, path, &o, &w), NPUC_OK);
    if (model_config) assert_int_equal(npuc_writer_meta(w, "model_config", model_config), NPUC_OK);
    for (size_t i = 0; i < n; i++) {
        npuc_tensor_info t;
        memset(&t, 0, sizeof t);
        t.name = ts[i].name;
        t.dtype = NPUC_DTYPE_F32;
        t.rank = ts[i].rank;
        memcpy(t.shape, ts[i].shape, sizeof ts[i].shape);
        t.group = ts[i].group;
        assert_int_equal(npuc_writer_declare(w, &t), NPUC_OK);
    }
    uint64_t seed = 0x9a7bu;
    for (size_t i = 0; i < n; i++) {
        uint64_t numel = 1;
        for (int d = 0; d < ts[i].rank; d++) numel *= (uint64_t)ts[i].shape[d];
        float *f = malloc(numel * sizeof *f);
        for (uint64_t e = 0; e < numel; e++) f[e] = 0.5f + fabsf(npuc_test_randn(&seed));
        assert_int_equal(npuc_writer_write(w, f, numel * sizeof *f), NPUC_OK);
        free(f);
    }
    assert_int_equal(npuc_writer_finish(w), NPUC_OK);
}

static npuc_model *open_m(const char *path) {
    npuc_model *m;
    if (npuc_model_open(ctx, path, NULL, &m) != NPUC_OK) fail_msg("%s", npuc_ctx_errmsg(ctx));
    return m;
}

static size_t tensor(const npuc_model *m, const char *name) {
    size_t i;
    if (npuc_model_find(m, name, &i) != 0) fail_msg("no tensor '%s'", name);
    return i;
}

/* A graph of m with its BatchNorm view read. */
static npuc__graph *bn_graph(npuc_model *m) {
    npuc__graph *g;
    assert_int_equal(npuc__graph_open(ctx, m, &g), NPUC_OK);
    if (npuc__graph_read_bns(ctx, g) != NPUC_OK) fail_msg("%s", npuc_ctx_errmsg(ctx));
    return g;
}

/* A graph of m with its module view read. */
static npuc__graph *module_graph(npuc_model *m, int no_guess) {
    npuc__graph *g;
    assert_int_equal(npuc__graph_open(ctx, m, &g), NPUC_OK);
    g->no_guess = no_guess;
    assert_int_equal(npuc__graph_read_modules(ctx, g), NPUC_OK);
    return g;
}

static size_t bn_index(const npuc__graph *g, const char *name) {
    int64_t b = npuc__graph_find_bn(g, name);
    if (b < 0) fail_msg("no BatchNorm '%s'", name);
    return (size_t)b;
}

static size_t module(const npuc__graph *g, const char *key) {
    int64_t x = npuc__find_mod(g, key);
    if (x < 0) fail_msg("no module '%s'", key);
    return (size_t)x;
}

/* Frees what a test opened; a and g may be NULL. */
static void close_all(npuc_model *m, npuc__graph *g, npuc__bn_attachments *a) {
    npuc__bn_attachments_free(a);
    npuc__graph_free(g);
    npuc_model_close(m);
}

/* Checks link k: BatchNorm bn follows tensor producer, with this evidence. */
static void check_link(const npuc__graph *g, const npuc__bn_attachments *a, size_t k, const char *bn,
                       const char *producer, npuc__evidence ev, int guess, int dropped, const char *why) {
    assert_true(k < a->nlinks);
    const npuc__bn_link *l = &a->links[k];
    assert_string_equal(g->bns[l->bn].name, bn);
    assert_string_equal(npuc_model_tensor(g->m, l->producer)->name, producer);
    assert_int_equal(l->evidence, ev);
    assert_int_equal(l->guess, guess);
    assert_int_equal(l->dropped, dropped);
    assert_int_equal(l->groups, 1);
    if (why) assert_string_equal(l->why, why);
}

static void check_refusal(const npuc__graph *g, const npuc__bn_attachments *a, size_t k, const char *bn,
                          const char *producer, const char *why) {
    assert_true(k < a->nrefusals);
    const npuc__bn_refusal *r = &a->refusals[k];
    assert_string_equal(g->bns[r->bn].name, bn);
    if (producer) assert_string_equal(r->producer, producer);
    else assert_null(r->producer);
    assert_string_equal(r->why, why);
}

/* Checks that the automatic consumers of module `from` are exactly `to`
 * (NULL: none, with `why`). */
static void check_next(const npuc__graph *g, const char *from, const char *to, npuc__evidence ev, int guess,
                       int output, const char *why) {
    npuc__next r;
    int rc = npuc__graph_next(g, module(g, from), &r);
    assert_int_equal(r.evidence, ev);
    assert_int_equal(r.guess, guess);
    assert_int_equal(r.output, output);
    if (to) {
        assert_int_equal(rc, 0);
        assert_int_equal(r.n, 1);
        assert_string_equal(g->mods[r.mod[0]].key, to);
    } else {
        assert_int_equal(rc, 1);
        assert_string_equal(r.why, why);
    }
}

/* ------------------------------------------------------------ PyTorch names */

/* Graph order; features.2 is a ReLU (no tensors); layer1 is a custom module
 * whose bn1 and norm1 both name conv1. */
static const tspec TORCH[] = {
    {"features.0.weight", 4, {8, 3, 3, 3}, NULL},      /* 0 */
    {"features.1.weight", 1, {8}, NULL},               /* 1 */
    {"features.1.bias", 1, {8}, NULL},                 /* 2 */
    {"features.1.running_mean", 1, {8}, NULL},         /* 3 */
    {"features.1.running_var", 1, {8}, NULL},          /* 4 */
    {"features.3.weight", 4, {16, 8, 3, 3}, NULL},     /* 5 */
    {"features.4.running_mean", 1, {16}, NULL},        /* 6 */
    {"features.4.running_var", 1, {16}, NULL},         /* 7 */
    {"layer1.conv1.weight", 4, {16, 16, 3, 3}, NULL},  /* 8 */
    {"layer1.bn1.running_mean", 1, {16}, NULL},        /* 9 */
    {"layer1.bn1.running_var", 1, {16}, NULL},         /* 10 */
    {"layer1.norm1.running_mean", 1, {16}, NULL},      /* 11 */
    {"layer1.norm1.running_var", 1, {16}, NULL},       /* 12 */
    {"classifier.weight", 2, {10, 16}, NULL},          /* 13 */
    {"classifier.bias", 1, {10}, NULL},                /* 14 */
};
#define NTORCH (sizeof TORCH / sizeof TORCH[0])

static npuc_model *torch_model(void) {
    const char *path = npuc_test_path("torch.safetensors");
    write_model(path, TORCH, NTORCH, NULL);
    return open_m(path);
}

static void test_bn_view(void **state) {
    (void)state;
    npuc_model *m = torch_model();
    npuc__graph *g = bn_graph(m);
    /* Storage order is graph order: features.1.weight sorts after .bias. */
    assert_int_equal(g->alphabetical, 0);
    assert_int_equal(g->nbn, 4);
    const npuc__bn *b = &g->bns[0];
    assert_string_equal(b->name, "features.1");
    assert_int_equal(b->gamma, 1);
    assert_int_equal(b->beta, 2);
    assert_int_equal(b->mean, 3);
    assert_int_equal(b->var, 4);
    assert_int_equal(b->count, -1);
    assert_int_equal(b->channels, 8);
    assert_int_equal(b->first, 1);
    assert_int_equal(b->keras, 0);
    assert_true(isnan(b->config_eps));
    assert_int_equal(b->evidence, NPUC_EVIDENCE_NAME);
    assert_string_equal(g->bns[1].name, "features.4");
    assert_int_equal(g->bns[1].gamma, -1); /* affine=False */
    assert_int_equal(g->bns[1].first, 6);
    assert_string_equal(g->bns[2].name, "layer1.bn1");
    assert_string_equal(g->bns[3].name, "layer1.norm1");
    assert_int_equal(g->bn_of[3], 0);
    assert_int_equal(g->bn_of[0], -1);
    /* Only a Keras nesting ('/') is found by its last component. */
    assert_int_equal(npuc__graph_find_bn(g, "norm1"), -1);
    close_all(m, g, NULL);
}

static void test_attach_names(void **state) {
    (void)state;
    npuc_model *m = torch_model();
    npuc__graph *g = bn_graph(m);
    npuc__bn_attachments a;
    assert_int_equal(npuc__graph_attach_bns(ctx, g, NULL, 0, NULL, &a), NPUC_OK);
    /* features.1 and features.4 follow their sequence predecessors; bn1 and
     * norm1 both name conv1: bn1 links first, norm1 then contests it, so the
     * first link is dropped and both are refused. */
    assert_int_equal(a.nlinks, 3);
    check_link(g, &a, 0, "features.1", "features.0.weight", NPUC_EVIDENCE_NAME, 0, 0,
               "names: module 'features.0' comes right before 'features.1' in a sequence");
    check_link(g, &a, 1, "features.4", "features.3.weight", NPUC_EVIDENCE_NAME, 0, 0,
               "names: module 'features.3' comes right before 'features.4' in a sequence");
    check_link(g, &a, 2, "layer1.bn1", "layer1.conv1.weight", NPUC_EVIDENCE_NAME, 0, 1,
               "names: 'layer1.conv1' / 'layer1.bn1'");
    assert_int_equal(a.nrefusals, 2);
    const char *two = "producer 'layer1.conv1.weight' would feed two BatchNorms ('layer1.bn1' and 'layer1.norm1')";
    check_refusal(g, &a, 0, "layer1.bn1", "layer1.conv1.weight", two);
    check_refusal(g, &a, 1, "layer1.norm1", "layer1.conv1.weight", two);
    close_all(m, g, &a);
}

static void test_next_names(void **state) {
    (void)state;
    npuc_model *m = torch_model();
    npuc__graph *g = module_graph(m, 0);
    assert_int_equal(g->keras, 0);
    assert_int_equal(g->topo, 0);
    assert_int_equal(npuc__graph_next_evidence(g), NPUC_EVIDENCE_NAME);
    /* Modules: the name up to the last '.'; roles from the tensors. */
    assert_int_equal(g->nmods, 8);
    const npuc__mod *f1 = &g->mods[module(g, "features.1")];
    assert_true(f1->is_bn);
    assert_int_equal(f1->weight, -1);
    assert_int_equal(f1->bn.mean, 3);
    const npuc__mod *cl = &g->mods[module(g, "classifier")];
    assert_int_equal(cl->weight, 13);
    assert_int_equal(cl->bias, 14);
    assert_int_equal(cl->first, 13);
    assert_int_equal(cl->evidence, NPUC_EVIDENCE_NAME);
    /* The next numbered sibling, skipping features.2 (a ReLU, no tensors). */
    check_next(g, "features.0", "features.1", NPUC_EVIDENCE_NAME, 0, 0, NULL);
    check_next(g, "features.1", "features.3", NPUC_EVIDENCE_NAME, 0, 0, NULL);
    /* Leaving the container for the next top-level module in storage order
     * is a guess; that module, layer1, has named children, so it cannot be
     * entered. */
    check_next(g, "features.4", NULL, NPUC_EVIDENCE_NAME, 1, 0,
               "'layer1' is a custom module (named children): its forward is unknown");
    check_next(g, "layer1.conv1", NULL, NPUC_EVIDENCE_NAME, 0, 0,
               "'layer1.conv1' is inside 'layer1', a custom module whose forward is unknown");
    check_next(g, "classifier", NULL, NPUC_EVIDENCE_NAME, 0, 1,
               "nothing follows 'classifier': it feeds the model output");
    npuc__graph_free(g);
    /* --no-guess: storage order is not followed out of a container. */
    g = module_graph(m, 1);
    check_next(g, "features.0", "features.1", NPUC_EVIDENCE_NAME, 0, 0, NULL);
    check_next(g, "features.4", NULL, NPUC_EVIDENCE_NAME, 0, 0,
               "'features' ends its container; following storage order is a guess (--no-guess)");
    close_all(m, g, NULL);
}

/* ------------------------------------------------------------ explicit */

static void test_attach_explicit(void **state) {
    (void)state;
    npuc_model *m = torch_model();
    npuc__graph *g = bn_graph(m);
    npuc__bn_attachments a;
    /* A module for a module, a weight for a BatchNorm tensor; only stated
     * pairs link, whatever the names say. */
    const char *pairs[] = {"features.0=features.1", "layer1.conv1.weight = layer1.norm1.running_var"};
    assert_int_equal(npuc__graph_attach_bns(ctx, g, pairs, 2, NULL, &a), NPUC_OK);
    assert_int_equal(a.nlinks, 2);
    check_link(g, &a, 0, "features.1", "features.0.weight", NPUC_EVIDENCE_EXPLICIT, 0, 0,
               "stated: --pair features.0=features.1");
    check_link(g, &a, 1, "layer1.norm1", "layer1.conv1.weight", NPUC_EVIDENCE_EXPLICIT, 0, 0,
               "stated: --pair layer1.conv1.weight = layer1.norm1.running_var");
    assert_int_equal(a.nrefusals, 2);
    check_refusal(g, &a, 0, "features.4", NULL, "not among the stated pairs");
    check_refusal(g, &a, 1, "layer1.bn1", NULL, "not among the stated pairs");
    npuc__bn_attachments_free(&a);

    /* A pairs file in the catalogs' form: the BatchNorm named by its mean. */
    const char *file = npuc_test_path("pairs.json");
    const char *js = "{\"bn_pairs\": [{\"conv\": \"features.3.weight\", \"mean\": \"features.4.running_mean\"}]}";
    npuc_test_write_file(file, js, strlen(js));
    assert_int_equal(npuc__graph_attach_bns(ctx, g, NULL, 0, file, &a), NPUC_OK);
    assert_int_equal(a.nlinks, 1);
    char why[300];
    snprintf(why, sizeof why, "stated: %s: pair 1", file);
    check_link(g, &a, 0, "features.4", "features.3.weight", NPUC_EVIDENCE_EXPLICIT, 0, 0, why);
    assert_int_equal(a.nrefusals, 3);
    npuc__bn_attachments_free(&a);

    /* One BatchNorm stated for two producers: an error, nothing returned. */
    const char *bad[] = {"features.0=features.1", "features.3=features.1"};
    assert_int_equal(npuc__graph_attach_bns(ctx, g, bad, 2, NULL, &a), NPUC_ERR_ARG);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "BatchNorm 'features.1' is stated for two producers"));
    assert_int_equal(a.nlinks, 0);
    assert_null(a.links);
    close_all(m, g, NULL);
}

/* ------------------------------------------------------------ Keras model_config */

/* in -> c1 -> bn1 -> act (ReLU) -> c2 (relu) -> bn2 -> d -> output */
static const char KERAS_CFG[] =
    "{\"class_name\": \"Functional\", \"config\": {\"name\": \"m\", \"layers\": ["
    "{\"name\": \"in\", \"class_name\": \"InputLayer\", \"config\": {}, \"inbound_nodes\": []},"
    "{\"name\": \"c1\", \"class_name\": \"Conv2D\", \"config\": {\"activation\": \"linear\", \"use_bias\": false},"
    " \"inbound_nodes\": [[[\"in\", 0, 0, {}]]]},"
    "{\"name\": \"bn1\", \"class_name\": \"BatchNormalization\", \"config\": {\"axis\": -1, \"epsilon\": 0.01},"
    " \"inbound_nodes\": [[[\"c1\", 0, 0, {}]]]},"
    "{\"name\": \"act\", \"class_name\": \"ReLU\", \"config\": {}, \"inbound_nodes\": [[[\"bn1\", 0, 0, {}]]]},"
    "{\"name\": \"c2\", \"class_name\": \"Conv2D\", \"config\": {\"activation\": \"relu\", \"use_bias\": true},"
    " \"inbound_nodes\": [[[\"act\", 0, 0, {}]]]},"
    "{\"name\": \"bn2\", \"class_name\": \"BatchNormalization\", \"config\": {\"axis\": -1, \"epsilon\": 0.002},"
    " \"inbound_nodes\": [[[\"c2\", 0, 0, {}]]]},"
    "{\"name\": \"d\", \"class_name\": \"Dense\", \"config\": {\"activation\": \"linear\"},"
    " \"inbound_nodes\": [[[\"bn2\", 0, 0, {}]]]}"
    "], \"input_layers\": [[\"in\", 0, 0]], \"output_layers\": [[\"d\", 0, 0]]}}";

#define KBN(L, C)                                                                                   \
    {L "/gamma", 1, {C}, L}, {L "/beta", 1, {C}, L}, {L "/moving_mean", 1, {C}, L},                 \
    {L "/moving_variance", 1, {C}, L}

static const tspec KERAS[] = {
    {"c1/kernel", 4, {3, 3, 2, 4}, "c1"}, KBN("bn1", 4),
    {"c2/kernel", 4, {1, 1, 4, 6}, "c2"}, {"c2/bias", 1, {6}, "c2"}, KBN("bn2", 6),
    {"d/kernel", 2, {6, 3}, "d"}, {"d/bias", 1, {3}, "d"},
};

static npuc_model *keras_model(void) {
    const char *path = npuc_test_path("keras.h5");
    write_model(path, KERAS, sizeof KERAS / sizeof KERAS[0], KERAS_CFG);
    return open_m(path);
}

static void test_attach_config(void **state) {
    (void)state;
    npuc_model *m = keras_model();
    npuc__graph *g = bn_graph(m);
    assert_int_equal(g->kbn_understood, 1);
    assert_int_equal(g->nkbn, 2);
    size_t b1 = bn_index(g, "bn1"), b2 = bn_index(g, "bn2");
    assert_int_equal(g->bns[b1].keras, 1);
    assert_int_equal(g->bns[b1].evidence, NPUC_EVIDENCE_CONFIG);
    assert_close(g->bns[b1].config_eps, 0.01, 0, 0);
    assert_close(g->bns[b2].config_eps, 0.002, 0, 0);
    npuc__bn_attachments a;
    assert_int_equal(npuc__graph_attach_bns(ctx, g, NULL, 0, NULL, &a), NPUC_OK);
    /* bn1 reads c1 alone; c2 applies relu before bn2, so bn2 is refused by
     * model_config and no weaker rule gets to guess. */
    assert_int_equal(a.nlinks, 1);
    check_link(g, &a, 0, "bn1", "c1/kernel", NPUC_EVIDENCE_CONFIG, 0, 0,
               "model_config: the input of 'bn1' is 'c1' (Conv2D)");
    assert_int_equal(a.nrefusals, 1);
    check_refusal(g, &a, 0, "bn2", "c2", "'c2' applies activation 'relu' before the BatchNorm");
    close_all(m, g, &a);
}

static void test_next_config(void **state) {
    (void)state;
    npuc_model *m = keras_model();
    npuc__graph *g = module_graph(m, 0);
    assert_int_equal(g->keras, 1);
    assert_int_equal(g->topo, 1);
    assert_int_equal(g->nkl, 7);
    assert_int_equal(npuc__graph_next_evidence(g), NPUC_EVIDENCE_CONFIG);
    /* Modules are the Keras layers. */
    assert_int_equal(g->nmods, 5);
    assert_true(g->mods[module(g, "bn2")].is_bn);
    assert_int_equal(g->mods[module(g, "c2")].bias, (int64_t)tensor(m, "c2/bias"));
    check_next(g, "c1", "bn1", NPUC_EVIDENCE_CONFIG, 0, 0, NULL);
    /* Through the weightless ReLU layer. */
    check_next(g, "bn1", "c2", NPUC_EVIDENCE_CONFIG, 0, 0, NULL);
    check_next(g, "bn2", "d", NPUC_EVIDENCE_CONFIG, 0, 0, NULL);
    check_next(g, "d", NULL, NPUC_EVIDENCE_CONFIG, 0, 1, "'d' is a model output");
    close_all(m, g, NULL);
}

/* The configuration follows an edited graph (graph_kconfig.c's writer):
 * bn1 removed as fold-bn removes it, c1 given the bias folding creates,
 * c2's kernel pruned to 5 filters, d's kernel to 2 units; then a Sequential
 * model whose Dense layer states its units. */
static void test_keras_fold(void **state) {
    (void)state;
    npuc_ctx *kx;
    assert_int_equal(npuc_ctx_new(&kx), NPUC_OK);
    npuc__ng *g;
    assert_int_equal(npuc__kconfig_parse(kx, "t", KERAS_CFG, strlen(KERAS_CFG), &g), NPUC_OK);
    char *out = NULL;
    /* Nothing edited: nothing to write. */
    assert_int_equal(npuc__kconfig_write(kx, "t", KERAS_CFG, strlen(KERAS_CFG), g, &out), NPUC_OK);
    assert_null(out);
    const int64_t c4 = 4, k2[4] = {1, 1, 4, 5}, kd[2] = {5, 2};
    assert_int_equal(npuc__ng_add_weight(kx, g, npuc__ng_find_node(g, "c1"), "c1/bias", "bias", 1, &c4, 0, -1),
                     NPUC_OK);
    assert_int_equal(npuc__ng_add_weight(kx, g, npuc__ng_find_node(g, "c2"), "c2/kernel", "kernel", 4, k2, 3, 2),
                     NPUC_OK);
    assert_int_equal(npuc__ng_add_weight(kx, g, npuc__ng_find_node(g, "d"), "d/kernel", "kernel", 2, kd, 1, 0),
                     NPUC_OK);
    assert_int_equal(npuc__ng_remove_node(kx, &g, "bn1"), NPUC_OK);
    assert_int_equal(npuc__kconfig_write(kx, "t", KERAS_CFG, strlen(KERAS_CFG), g, &out), NPUC_OK);
    assert_non_null(out);
    json_error_t je;
    json_t *root = json_loads(out, JSON_REJECT_DUPLICATES, &je);
    assert_non_null(root);
    json_t *layers = json_object_get(json_object_get(root, "config"), "layers");
    assert_int_equal(json_array_size(layers), 6);
    json_t *c1 = json_array_get(layers, 1), *act = json_array_get(layers, 2), *c2 = json_array_get(layers, 3);
    json_t *d = json_array_get(layers, 5);
    assert_string_equal(json_string_value(json_object_get(act, "name")), "act");
    assert_true(json_is_true(json_object_get(json_object_get(c1, "config"), "use_bias")));
    json_t *ref = json_array_get(json_array_get(json_object_get(act, "inbound_nodes"), 0), 0);
    assert_string_equal(json_string_value(json_array_get(ref, 0)), "c1");
    /* c2's and d's configs have no filters / units field: none is invented */
    assert_null(json_object_get(json_object_get(c2, "config"), "filters"));
    assert_null(json_object_get(json_object_get(d, "config"), "units"));
    json_decref(root);
    free(out);
    /* A configuration with units: the field follows the kernel. */
    static const char SEQ[] = "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
                              "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d1\", \"units\": 8}},"
                              "{\"class_name\": \"BatchNormalization\", \"config\": {\"name\": \"b\", \"axis\": -1}},"
                              "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d2\", \"units\": 3}}]}}";
    npuc__ng *s;
    assert_int_equal(npuc__kconfig_parse(kx, "t", SEQ, strlen(SEQ), &s), NPUC_OK);
    const int64_t k1[2] = {4, 6};
    assert_int_equal(npuc__ng_add_weight(kx, s, npuc__ng_find_node(s, "d1"), "d1/kernel", "kernel", 2, k1, 1, 0),
                     NPUC_OK);
    assert_int_equal(npuc__ng_remove_node(kx, &s, "b"), NPUC_OK);
    assert_int_equal(npuc__kconfig_write(kx, "t", SEQ, strlen(SEQ), s, &out), NPUC_OK);
    assert_non_null(out);
    root = json_loads(out, 0, &je);
    layers = json_object_get(json_object_get(root, "config"), "layers");
    assert_int_equal(json_array_size(layers), 2);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(json_array_get(layers, 0), "config"), "units")),
                     6);
    assert_string_equal(json_string_value(json_object_get(json_object_get(json_array_get(layers, 1), "config"),
                                                          "name")), "d2");
    json_decref(root);
    free(out);
    npuc__ng_free(s);
    /* Text the reader refuses: refused by the writer too, naming it. */
    assert_int_equal(npuc__kconfig_write(kx, "t", "{\"a\": 1, \"a\": 2}", 16, g, &out), NPUC_ERR_FORMAT);
    assert_null(out);
    npuc__ng_free(g);
    npuc_ctx_free(kx);
}

/* Issue 31 item 8: a Reshape that states the channel count of a pruned
 * layer follows it when its target is just the channels ([1,1,C] after a
 * global pool: the squeeze-excite pattern), and refuses, naming it, when
 * the count cannot be told apart ([2,4]). */
static const char SE_CFG[] =
    "{\"class_name\": \"Functional\", \"config\": {\"name\": \"m\", \"layers\": ["
    "{\"name\": \"in\", \"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 8, 8, 3]},"
    " \"inbound_nodes\": []},"
    "{\"name\": \"c1\", \"class_name\": \"Conv2D\", \"config\": {\"filters\": 8, \"use_bias\": true},"
    " \"inbound_nodes\": [[[\"in\", 0, 0, {}]]]},"
    "{\"name\": \"gap\", \"class_name\": \"GlobalAveragePooling2D\", \"config\": {},"
    " \"inbound_nodes\": [[[\"c1\", 0, 0, {}]]]},"
    "{\"name\": \"r\", \"class_name\": \"Reshape\", \"config\": {\"target_shape\": TARGET},"
    " \"inbound_nodes\": [[[\"gap\", 0, 0, {}]]]},"
    "{\"name\": \"c2\", \"class_name\": \"Conv2D\", \"config\": {\"filters\": 4, \"use_bias\": true},"
    " \"inbound_nodes\": [[[\"r\", 0, 0, {}]]]}"
    "], \"input_layers\": [[\"in\", 0, 0]], \"output_layers\": [[\"c2\", 0, 0]]}}";

static char *se_cfg(const char *target) {
    const char *at = strstr(SE_CFG, "TARGET");
    size_t n = strlen(SE_CFG) + strlen(target);
    char *s = malloc(n);
    assert_non_null(s);
    snprintf(s, n, "%.*s%s%s", (int)(at - SE_CFG), SE_CFG, target, at + 6);
    return s;
}

static void test_keras_reshape(void **state) {
    (void)state;
    npuc_ctx *kx;
    assert_int_equal(npuc_ctx_new(&kx), NPUC_OK);
    const int64_t k1[4] = {3, 3, 3, 6};
    for (int bad = 0; bad < 2; bad++) {
        char *cfg = se_cfg(bad ? "[2, 4]" : "[1, 1, 8]"), *out = NULL;
        npuc__ng *g;
        assert_int_equal(npuc__kconfig_parse(kx, "t", cfg, strlen(cfg), &g), NPUC_OK);
        assert_int_equal(npuc__ng_add_weight(kx, g, npuc__ng_find_node(g, "c1"), "c1/kernel", "kernel", 4, k1, 3, 2),
                         NPUC_OK);
        npuc_status st = npuc__kconfig_write(kx, "t", cfg, strlen(cfg), g, &out);
        if (bad) {
            assert_int_equal(st, NPUC_ERR_UNSUPPORTED);
            assert_null(out);
            assert_non_null(strstr(npuc_ctx_errmsg(kx), "layer 'r' (Reshape)"));
            assert_non_null(strstr(npuc_ctx_errmsg(kx), "'c1'"));
        } else {
            assert_int_equal(st, NPUC_OK);
            assert_non_null(out);
            json_t *root = json_loads(out, 0, NULL);
            json_t *layers = json_object_get(json_object_get(root, "config"), "layers");
            json_t *c1 = json_object_get(json_array_get(layers, 1), "config");
            json_t *r = json_object_get(json_object_get(json_array_get(layers, 3), "config"), "target_shape");
            assert_int_equal(json_integer_value(json_object_get(c1, "filters")), 6);
            assert_int_equal(json_array_size(r), 3);
            assert_int_equal(json_integer_value(json_array_get(r, 2)), 6);
            assert_int_equal(json_integer_value(json_array_get(r, 0)), 1);
            json_decref(root);
        }
        free(out);
        free(cfg);
        npuc__ng_free(g);
    }
    npuc_ctx_free(kx);
}

/* ------------------------------------------------------------ storage order */

/* Paddle exports: counter names that do not pair; equal channel counts, so
 * only order can tell the convs apart. */
#define PBN(L) {L ".w_0", 1, {8}, NULL}, {L ".b_0", 1, {8}, NULL}, {L ".w_1", 1, {8}, NULL}, {L ".w_2", 1, {8}, NULL}

static const tspec PADDLE_GRAPH[] = {
    {"conv2d_9.w_0", 4, {8, 3, 3, 3}, NULL}, PBN("batch_norm_3"),
    {"conv2d_10.w_0", 4, {8, 8, 1, 1}, NULL}, PBN("batch_norm_4"),
};

/* The same tensors in strcmp order. */
#define PBN_SORTED(L) {L ".b_0", 1, {8}, NULL}, {L ".w_0", 1, {8}, NULL}, {L ".w_1", 1, {8}, NULL}, {L ".w_2", 1, {8}, NULL}

static const tspec PADDLE_SORTED[] = {
    PBN_SORTED("batch_norm_3"), PBN_SORTED("batch_norm_4"),
    {"conv2d_10.w_0", 4, {8, 8, 1, 1}, NULL}, {"conv2d_9.w_0", 4, {8, 3, 3, 3}, NULL},
};

static void test_attach_order(void **state) {
    (void)state;
    const char *path = npuc_test_path("paddle.safetensors");
    write_model(path, PADDLE_GRAPH, sizeof PADDLE_GRAPH / sizeof PADDLE_GRAPH[0], NULL);
    npuc_model *m = open_m(path);
    npuc__graph *g = bn_graph(m);
    assert_int_equal(g->alphabetical, 0);
    npuc__bn_attachments a;
    assert_int_equal(npuc__graph_attach_bns(ctx, g, NULL, 0, NULL, &a), NPUC_OK);
    /* The nearest preceding free conv with 8 channels. */
    const char *near = "guess: nearest preceding conv/linear with 8 output channels in storage order";
    assert_int_equal(a.nlinks, 2);
    check_link(g, &a, 0, "batch_norm_3", "conv2d_9.w_0", NPUC_EVIDENCE_ORDER, 1, 0, near);
    check_link(g, &a, 1, "batch_norm_4", "conv2d_10.w_0", NPUC_EVIDENCE_ORDER, 1, 0, near);
    assert_int_equal(a.nrefusals, 0);
    close_all(m, g, &a);

    /* Alphabetical storage says nothing; the numbers in the names do:
     * conv2d_9 comes before conv2d_10, so it feeds batch_norm_3. */
    path = npuc_test_path("paddle_sorted.safetensors");
    write_model(path, PADDLE_SORTED, sizeof PADDLE_SORTED / sizeof PADDLE_SORTED[0], NULL);
    m = open_m(path);
    g = bn_graph(m);
    assert_int_equal(g->alphabetical, 1);
    assert_int_equal(npuc__graph_attach_bns(ctx, g, NULL, 0, NULL, &a), NPUC_OK);
    const char *aligned = "guess: storage order is alphabetical; convs and BatchNorms aligned in numeric name "
                          "order (8 channels)";
    assert_int_equal(a.nlinks, 2);
    check_link(g, &a, 0, "batch_norm_3", "conv2d_9.w_0", NPUC_EVIDENCE_ORDER, 1, 0, aligned);
    check_link(g, &a, 1, "batch_norm_4", "conv2d_10.w_0", NPUC_EVIDENCE_ORDER, 1, 0, aligned);
    close_all(m, g, &a);
}

/* ------------------------------------------------------------ real models */

/* Every link of the file's automatic attachment is one of the catalog's
 * bn_pairs (conv and BatchNorm mean), with the evidence expected; none is
 * dropped and none left out. */
static void check_catalog(const char *file, const char *catalog, npuc__evidence ev) {
    const char *path = npuc_test_shared_file(file), *cat = npuc_test_shared_file(catalog);
    if (!path || !cat) skip();
    json_error_t je;
    json_t *root = json_load_file(cat, 0, &je);
    assert_non_null(root);
    json_t *pairs = json_object_get(root, "bn_pairs");
    npuc_model *m = open_m(path);
    npuc__graph *g = bn_graph(m);
    npuc__bn_attachments a;
    assert_int_equal(npuc__graph_attach_bns(ctx, g, NULL, 0, NULL, &a), NPUC_OK);
    assert_int_equal(a.nlinks, json_array_size(pairs));
    assert_int_equal(a.nrefusals, 0);
    for (size_t k = 0; k < a.nlinks; k++) {
        const npuc__bn_link *l = &a.links[k];
        const char *conv = npuc_model_tensor(m, l->producer)->name;
        const char *mean = npuc_model_tensor(m, (size_t)g->bns[l->bn].mean)->name;
        int found = 0;
        size_t i;
        json_t *p;
        json_array_foreach(pairs, i, p) {
            found |= strcmp(json_string_value(json_object_get(p, "conv")), conv) == 0 &&
                     strcmp(json_string_value(json_object_get(p, "mean")), mean) == 0;
        }
        if (!found) fail_msg("%s: %s -> %s is not in the catalog", file, conv, mean);
        assert_int_equal(l->evidence, ev);
        assert_int_equal(l->dropped, 0);
    }
    close_all(m, g, &a);
    json_decref(root);
}

static void test_shared_config(void **state) {
    (void)state;
    check_catalog("nsfwjs_mobilenet_v2.h5", "nsfwjs_mobilenet_v2.json", NPUC_EVIDENCE_CONFIG);
    /* The consumer view of the same model_config: Conv1 feeds bn_Conv1,
     * which feeds the first depthwise conv through its ReLU. */
    npuc_model *m = open_m(npuc_test_shared_file("nsfwjs_mobilenet_v2.h5"));
    npuc__graph *g = module_graph(m, 0);
    assert_int_equal(g->topo, 1);
    check_next(g, "Conv1", "bn_Conv1", NPUC_EVIDENCE_CONFIG, 0, 0, NULL);
    check_next(g, "bn_Conv1", "expanded_conv_depthwise", NPUC_EVIDENCE_CONFIG, 0, 0, NULL);
    close_all(m, g, NULL);
}

static void test_shared_names(void **state) {
    (void)state;
    check_catalog("nsfwjs_mobilenet_v2.safetensors", "nsfwjs_mobilenet_v2.json", NPUC_EVIDENCE_NAME);
}

static void test_shared_order(void **state) {
    (void)state;
    check_catalog("ppocr_mobile_v2_cls.safetensors", "ppocr_mobile_v2_cls.json", NPUC_EVIDENCE_ORDER);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bn_view),
        cmocka_unit_test(test_attach_names),
        cmocka_unit_test(test_next_names),
        cmocka_unit_test(test_attach_explicit),
        cmocka_unit_test(test_attach_config),
        cmocka_unit_test(test_next_config),
        cmocka_unit_test(test_keras_fold),
        cmocka_unit_test(test_keras_reshape),
        cmocka_unit_test(test_attach_order),
        cmocka_unit_test(test_shared_config),
        cmocka_unit_test(test_shared_names),
        cmocka_unit_test(test_shared_order),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
