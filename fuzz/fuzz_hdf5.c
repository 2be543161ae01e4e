/*
 * fuzz_hdf5.c - libFuzzer target: the HDF5 reader (plain trees, Keras 2 and
 * Keras 3 weight files).  The input is a whole .h5 file, opened through the
 * public npuc_model_open whatever reads it underneath (in process, or a
 * contained worker): open, list groups and metadata, read every tensor,
 * close.  Any error is fine; a crash or hang is not.
 */
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = npuc_fuzz_write(data, size, ".h5");
    npuc_ctx *ctx = npuc_fuzz_ctx();
    if (!path || !ctx) {
        npuc_ctx_free(ctx);
        return 0;
    }
    npuc_open_opts o = npuc_open_opts_defaults();
    o.format = NPUC_FORMAT_HDF5;
    npuc_model *m;
    if (npuc_model_open(ctx, path, &o, &m) == NPUC_OK) {
        for (size_t i = 0; i < npuc_model_meta_count(m); i++) {
            const char *k, *v;
            npuc_model_meta_at(m, i, &k, &v);
        }
        for (size_t i = 0; i < npuc_model_group_count(m); i++) (void)npuc_model_group(m, i);
        (void)npuc_model_format_opt(m, "structure");
        npuc_fuzz_read_all(ctx, m);
        npuc_model_close(m);
    }
    npuc_ctx_free(ctx);
    return 0;
}
