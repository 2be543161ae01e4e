/*
 * fuzz_graph.c - libFuzzer target: the graph file (`npuc prune --graph FILE`
 * for structured pruning: JSON {"next": ..., "bn_pairs": [...]} or text lines
 * "PRODUCER=CONSUMER[,...]"), read and checked against a fixed model
 * (samples/cnn_bn.safetensors, compiled in as NPUC_FUZZ_MODEL).  The reader
 * has no public entry point of its own, so this target links the static
 * library and calls the internal npuc__graph_check_consistency, which reads
 * the file, resolves and checks every stated edge, then checks the model's
 * channel extents along them.
 */
#include "fuzz_util.h"
#include "graph/graph.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = npuc_fuzz_write(data, size, ".graph");
    npuc_ctx *ctx = npuc_fuzz_ctx();
    npuc_model *m = NULL;
    if (path && ctx && npuc_model_open(ctx, NPUC_FUZZ_MODEL, NULL, &m) == NPUC_OK)
        (void)npuc__graph_check_consistency(ctx, m, NULL, 0, path);
    npuc_model_close(m);
    npuc_ctx_free(ctx);
    return 0;
}
