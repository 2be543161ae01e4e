/*
 * fuzz_kconfig.c - libFuzzer target: the Keras model configuration reader
 * (src/graph/graph_kconfig.c: model_config / config.json into the network
 * graph).  The input is the JSON text itself; the reader has no public entry
 * point of its own, so this target links the static library and calls the
 * internal npuc__kconfig_parse, then walks every node and value of a graph
 * it accepts through the public view and runs the graph's own check.  Any
 * refusal is fine; a crash, hang, leak, or an accepted graph that fails the
 * check is not.
 */
#include <stdlib.h>

#include "fuzz_util.h"
#include "graph/graph_kconfig.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    npuc_ctx *ctx = npuc_fuzz_ctx();
    npuc__ng *g = NULL;
    if (ctx && npuc__kconfig_parse(ctx, "fuzz: model_config", (const char *)data, size, &g) == NPUC_OK) {
        for (size_t i = 0; i < npuc_graph_node_count(g); i++) {
            npuc_graph_node n;
            npuc_graph_get_node(g, i, &n);
            for (size_t k = 0; k < n.ninputs; k++)
                if (n.inputs[k] >= npuc_graph_value_count(g)) abort();
        }
        for (size_t v = 0; v < npuc_graph_value_count(g); v++) {
            npuc_graph_value x;
            npuc_graph_get_value(g, v, &x);
        }
        if (npuc__ng_check(ctx, g) != NPUC_OK) abort();
    }
    npuc__ng_free(g);
    npuc_ctx_free(ctx);
    return 0;
}
