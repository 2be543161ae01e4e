/*
 * fuzz_pairs.c - libFuzzer target: the fold-bn pairs file (--pairs FILE),
 * text lines "CONV=BN" or JSON, resolved against a fixed model
 * (samples/cnn_bn.safetensors, compiled in as NPUC_FUZZ_MODEL).  Runs
 * npuc_bnfold_find as `npuc fold-bn --dry-run --pairs FILE` does.
 */
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = npuc_fuzz_write(data, size, ".pairs");
    npuc_ctx *ctx = npuc_fuzz_ctx();
    npuc_model *m = NULL;
    if (path && ctx && npuc_model_open(ctx, NPUC_FUZZ_MODEL, NULL, &m) == NPUC_OK) {
        npuc_bnfold_params p = npuc_bnfold_params_defaults();
        p.pairs_file = path;
        npuc_bnfold_plan plan;
        if (npuc_bnfold_find(ctx, m, &p, &plan) == NPUC_OK) npuc_bnfold_plan_free(&plan);
    }
    npuc_model_close(m);
    npuc_ctx_free(ctx);
    return 0;
}
