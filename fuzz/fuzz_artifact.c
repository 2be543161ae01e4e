/*
 * fuzz_artifact.c - libFuzzer target: an npuc artifact's "npuc" description
 * and every decoder (quant, nm_sparse, lowrank, nested entries).  The input
 * is a whole artifact .safetensors file: open it, run the checks `npuc
 * validate --deep` runs (the description, every entry decoded once, the
 * channel consistency of its logical view), then decompress it as `npuc
 * decompress` does into the scratch directory.  The context's decoding
 * budget (NPUC_FUZZ_MAX_MEMORY) refuses decompression bombs.
 */
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    npuc_ctx *ctx;
    npuc_model *m = npuc_fuzz_open(data, size, ".safetensors", NPUC_FORMAT_SAFETENSORS, &ctx);
    if (m) {
        npuc_artifact_info info;
        (void)npuc_artifact_check(ctx, m, 1, &info);
        (void)npuc_model_check_consistency(ctx, m);
        /* Run even when the check failed: decompress has checks of its own. */
        const char *out = npuc_fuzz_path("decompressed.safetensors");
        npuc_write_opts wo = npuc_write_opts_defaults();
        wo.overwrite = 1;
        if (out) (void)npuc_decompress_model(ctx, m, out, &wo);
    }
    npuc_model_close(m);
    npuc_ctx_free(ctx);
    return 0;
}
