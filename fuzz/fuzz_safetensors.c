/*
 * fuzz_safetensors.c - libFuzzer target: the safetensors header parser and
 * reader.  The input is a whole .safetensors file: open it (header, tensor
 * table, metadata), list what info lists, read every tensor raw and as
 * float32, close.
 */
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = npuc_fuzz_write(data, size, ".safetensors");
    npuc_ctx *ctx = npuc_fuzz_ctx();
    if (!path || !ctx) {
        npuc_ctx_free(ctx);
        return 0;
    }
    npuc_open_opts o = npuc_open_opts_defaults();
    o.format = NPUC_FORMAT_SAFETENSORS;
    npuc_model *m;
    if (npuc_model_open(ctx, path, &o, &m) == NPUC_OK) {
        for (size_t i = 0; i < npuc_model_meta_count(m); i++) {
            const char *k, *v;
            npuc_model_meta_at(m, i, &k, &v);
        }
        npuc_fuzz_read_all(ctx, m);
        npuc_model_close(m);
    }
    npuc_ctx_free(ctx);
    return 0;
}
