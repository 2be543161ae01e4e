/*
 * fuzz_recipe.c - libFuzzer target: the recipe parser (YAML through
 * libfyaml, then npuc's schema checks, regex compilation and canonical
 * JSON).  The input is the recipe text.
 */
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    npuc_ctx *ctx = npuc_fuzz_ctx();
    if (!ctx) return 0;
    npuc_recipe *r;
    if (npuc_recipe_parse(ctx, "fuzz.yaml", (const char *)data, size, &r) == NPUC_OK) {
        for (size_t i = 0; i < npuc_recipe_step_count(r); i++) {
            int line, col;
            (void)npuc_step_kind_name(npuc_recipe_step_kind(r, i, &line, &col));
        }
        (void)npuc_recipe_json(r);
        (void)npuc_recipe_sha256(r);
        npuc_recipe_free(r);
    }
    npuc_ctx_free(ctx);
    return 0;
}
