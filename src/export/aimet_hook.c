/*
 * aimet_hook.c - `quantize --export-encodings FILE [--activation-encodings
 * CALIB.json] [--encodings-version V]` (issue 16): the quantize pass calls
 * npuc__aimet_hook_check before it writes anything and npuc__aimet_hook_write
 * after its artifact is published, which reads the artifact back
 * (aimet_params.c) and merges the calibration document's activations.
 */
#include <string.h>
#include <unistd.h>

#include "export_internal.h"
#include "export_hook.h"

npuc_status npuc__aimet_hook_check(npuc_ctx *ctx, const char *act, const char *out, int overwrite) {
    if (!out) {
        if (act)
            return npuc_fail(ctx, NPUC_ERR_ARG, "activation encodings '%s' go into AIMET encodings: add "
                             "--export-encodings FILE", act);
        return NPUC_OK;
    }
    if (!overwrite && access(out, F_OK) == 0)
        return npuc_fail(ctx, NPUC_ERR_EXISTS, "%s: the encodings file exists (use -f to overwrite it)", out);
    if (!act) return NPUC_OK;
    npuc__grids g;
    npuc_status st = npuc__calib_doc_read(ctx, act, &g);
    npuc__grids_free(&g);
    return st;
}

npuc_status npuc__aimet_hook_write(npuc_ctx *ctx, const char *act, const char *artifact, const char *version,
                                   const char *out, int overwrite, npuc_summary *sum) {
    if (!out) return NPUC_OK;
    const size_t n0 = npuc_ctx_warning_count(ctx);
    npuc_status st = npuc_aimet_export(ctx, act, artifact, version ? version : "1.0.0", out, overwrite);
    /* The tensors left out are the run's warnings, shown with the others. */
    for (size_t i = n0; st == NPUC_OK && i < npuc_ctx_warning_count(ctx); i++)
        st = npuc_summary_warn(sum, "%s", npuc_ctx_warning(ctx, i));
    return st;
}
