/*
 * artifact_check.c - npuc_artifact_check: an artifact's description against
 * its stored tensors, through the logical view decompress and report use
 * (decode_entry.h), so the three agree on what a sound artifact is.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npuc/artifact.h"
#include "codecs/decode_entry.h"

npuc_status npuc_artifact_check(npuc_ctx *ctx, npuc_model *m, int decode, npuc_artifact_info *out) {
    memset(out, 0, sizeof *out);
    npuc__lview v;
    npuc_status st = npuc__lview_open(ctx, m, &v);
    if (st != NPUC_OK) return st;
    uint64_t maxn = 0;
    for (size_t i = 0; i < v.n; i++) {
        const npuc__ltensor *t = &v.t[i];
        if (!t->entry) continue;
        out->encoded++;
        if (!npuc__lview_readable(t)) {
            st = npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s': encoding '%s' cannot be decoded by this build",
                           npuc_model_path(m), t->name, t->unknown ? t->unknown : t->encoding);
            goto done;
        }
        if (t->info.numel > maxn) maxn = t->info.numel;
    }
    if (!decode || !out->encoded) goto done;
    uint64_t nb;
    if (npuc_mul_overflow(maxn ? maxn : 1, sizeof(float), &nb) || (uint64_t)(size_t)nb != nb) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: a tensor is too large to decode", npuc_model_path(m));
        goto done;
    }
    float *buf = malloc((size_t)nb);
    if (!buf) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", npuc_model_path(m));
        goto done;
    }
    for (size_t i = 0; i < v.n && st == NPUC_OK; i++) {
        const npuc__ltensor *t = &v.t[i];
        if (!t->entry) continue;
        if ((st = npuc__lview_read_f32(ctx, &v, i, buf)) != NPUC_OK) break;
        uint64_t bad = 0;
        for (uint64_t k = 0; k < t->info.numel; k++) bad += !isfinite(buf[k]);
        if (bad && !out->nonfinite) snprintf(out->first_nonfinite, sizeof out->first_nonfinite, "%s", t->name);
        out->nonfinite += bad;
        out->decoded++;
    }
    free(buf);
done:
    npuc__lview_free(&v);
    return st;
}
