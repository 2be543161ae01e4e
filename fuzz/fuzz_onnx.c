/*
 * fuzz_onnx.c - libFuzzer target: the ONNX reader and writer
 * (formats/onnx/).  The input is a whole .onnx file: open it (the protobuf
 * walk, weights, their data checked against their dims, and the network
 * graph with the roles and layouts its ops state, onnx_netgraph.c, which
 * npuc_model_open builds through the row's read_graph), read every tensor
 * raw and as float32, and when it opened, write it back as ONNX (the
 * writer's walk over the graph the reader kept) and parse that graph into
 * onnx_model.h's structs, then close.  External data
 * files do not exist beside the scratch file, so such tensors fail cleanly.
 * Seeds: fuzz/corpus/onnx/.
 */
#include "fuzz_util.h"

#include "../formats/onnx/onnx_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    npuc_ctx *ctx = NULL;
    npuc_model *m = npuc_fuzz_open(data, size, ".onnx", npuc_format_find("onnx"), &ctx);
    if (m) {
        npuc_fuzz_read_all(ctx, m);
        npuc__onnx_model *g = NULL;
        if (npuc__onnx_graph_parse(ctx, m, &g) == NPUC_OK) npuc__onnx_graph_free(g);
        npuc_write_opts o = npuc_write_opts_defaults();
        o.overwrite = 1;
        (void)npuc_model_convert(ctx, m, npuc_fuzz_path("out.onnx"), &o, 0, NPUC_DTYPE_F32);
        npuc_model_close(m);
    }
    npuc_ctx_free(ctx);
    return 0;
}
