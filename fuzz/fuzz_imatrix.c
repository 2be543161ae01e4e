/*
 * fuzz_imatrix.c - libFuzzer target: llama.cpp importance matrices
 * (formats/gguf/gguf_imatrix.c).  The input is a whole imatrix file, legacy
 * .dat or GGUF (told apart by the magic, as npuc__imatrix_load does).  When
 * it loads, every entry is walked, looked up by its own name with the
 * length it has (1 matrix, and 2 when even), with one column more (a
 * mismatch), under a name with ".weight" appended and removed, and then
 * the entries matching nothing are listed.  Seeds: fuzz/corpus/imatrix/
 * (fuzz/make_seeds.py imatrix).
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "gguf/gguf_imatrix.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = npuc_fuzz_write(data, size, ".dat");
    npuc_ctx *ctx = npuc_fuzz_ctx();
    if (!path || !ctx) {
        npuc_ctx_free(ctx);
        return 0;
    }
    npuc__imatrix *im = NULL;
    if (npuc__imatrix_load(ctx, path, &im) == NPUC_OK) {
        (void)npuc__imatrix_dataset(im);
        (void)npuc__imatrix_chunks(im);
        for (size_t i = 0; i < npuc__imatrix_count(im); i++) {
            const char *name = npuc__imatrix_name(im, i);
            const uint64_t n = npuc__imatrix_len(im, i);
            const float *v = npuc__imatrix_values(im, i), *imp;
            volatile float sink = n ? v[0] + v[n - 1] : 0.0f;
            (void)sink;
            (void)npuc__imatrix_lookup(ctx, im, name, NULL, n, 1, &imp);
            if (n % 2 == 0) (void)npuc__imatrix_lookup(ctx, im, name, NULL, n / 2, 2, &imp);
            (void)npuc__imatrix_lookup(ctx, im, name, NULL, n + 1, 1, &imp);
            size_t len = strlen(name);
            char *w = malloc(len + 8);
            if (w) {
                memcpy(w, name, len);
                memcpy(w + len, ".weight", 8);
                (void)npuc__imatrix_lookup(ctx, im, "x", w, n, 1, &imp);
                if (len > 7) {
                    w[len - 7] = 0;
                    (void)npuc__imatrix_mark(im, w, NULL);
                }
                free(w);
            }
        }
        for (size_t k = 0; k < npuc__imatrix_unmatched_count(im); k++) (void)npuc__imatrix_unmatched(im, k);
        npuc__imatrix_warn_unmatched(ctx, im);
        npuc__imatrix_free(im);
    }
    npuc_ctx_free(ctx);
    return 0;
}
