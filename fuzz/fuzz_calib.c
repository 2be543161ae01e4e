/*
 * fuzz_calib.c - libFuzzer target: calibration files (calib/calib_file.c,
 * npuc/calib.h) and the activation calibration fed from them
 * (calib/act_*.c).  The input is a whole calibration .safetensors file.
 *
 * It is opened twice: as a model, to list its tensors, and with
 * npuc_calib_open.  For every tensor named "<W>.input", "<W>.hessian",
 * "<W>.hessian_count" or "<W>.input_sq" the target asks npuc_calib_has,
 * npuc_calib_hessian (64-row chunks, so an input of more rows is read in
 * several) and npuc_calib_importance (default chunk) for W, with the K the
 * tensor's shape implies (the last dimension of .input, the first of
 * .hessian, the element count of .input_sq, 8 for .hessian_count) and with
 * K + 1 (a mismatch); K is capped at 512 so H stays within 2 MiB.  Every
 * other tensor is an activation: its float32 values (up to 1 Mi) go through
 * npuc_act_calib with the four range methods in turn (per tensor for even
 * indices, per channel along axis 1 for odd ones when at most 4 channels),
 * fed in two chunks per pass until the calibration asks for no more.
 */
#include <stdlib.h>
#include <string.h>

#include <npuc/calib.h>

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_K 512u
#define MAX_ACT (1u << 20)
#define MAX_PASSES 64
#define MAX_CHANNELS 4 /* entropy's threshold search costs ~2M steps per channel */

static const char *const SUFFIXES[] = {".input", ".hessian", ".hessian_count", ".input_sq"};

static void weight_calls(npuc_ctx *ctx, npuc_calib *c, const char *w, uint64_t K) {
    if (K == 0 || K > MAX_K) return;
    double *H = malloc(K * K * sizeof *H), *imp = malloc(K * sizeof *imp), n = 0;
    int found;
    if (H && imp) {
        (void)npuc_calib_has(c, w);
        npuc_calib_set_chunk_rows(c, 64);
        (void)npuc_calib_hessian(ctx, c, w, K, H, &n, &found);
        npuc_calib_set_chunk_rows(c, 0);
        (void)npuc_calib_importance(ctx, c, w, K, imp, &found);
    }
    free(H);
    free(imp);
}

static void calib_tensor(npuc_ctx *ctx, npuc_calib *c, const npuc_tensor_info *t) {
    size_t len = strlen(t->name);
    for (int s = 0; s < 4; s++) { /* the suffixes do not end one another */
        const char *suf = SUFFIXES[s];
        size_t k = strlen(suf);
        if (len <= k || strcmp(t->name + len - k, suf) != 0) continue;
        char w[1024];
        if (len - k >= sizeof w) return;
        memcpy(w, t->name, len - k);
        w[len - k] = 0;
        uint64_t K = 8;
        if (s == 0) K = t->rank ? (uint64_t)t->shape[t->rank - 1] : 1;
        else if (s == 1) K = t->rank ? (uint64_t)t->shape[0] : 1;
        else if (s == 3) K = t->numel;
        weight_calls(ctx, c, w, K);
        weight_calls(ctx, c, w, K + 1);
        return;
    }
}

static void act_tensor(npuc_ctx *ctx, npuc_model *m, size_t i) {
    const npuc_tensor_info *t = npuc_model_tensor(m, i);
    if (t->numel == 0 || t->numel > MAX_ACT) return;
    float *x = malloc(t->numel * sizeof *x);
    if (!x || npuc_model_read_f32(ctx, m, i, x) != NPUC_OK) {
        free(x);
        return;
    }
    uint64_t C = 1, outer = t->numel, inner = 1;
    if (i % 2 && t->rank >= 2 && t->shape[1] > 0 && t->shape[1] <= MAX_CHANNELS && t->shape[0] > 0) {
        C = (uint64_t)t->shape[1];
        outer = (uint64_t)t->shape[0];
        inner = t->numel / (outer * C);
    }
    npuc_act_opts o = npuc_act_opts_defaults();
    o.range.method = (npuc_range_method)(i % 4);
    if (o.range.method == NPUC_RANGE_PERCENTILE) o.range.percentile = 99.9;
    o.range.symmetric = (int)(i / 4 % 2 == 0);
    npuc_act_calib *a = NULL;
    if (npuc_act_calib_new(ctx, "fuzz", C, &o, &a) == NPUC_OK) {
        int more = 1;
        const uint64_t half = outer / 2, row = C * inner;
        for (int pass = 0; more && pass < MAX_PASSES; pass++) {
            if ((half && npuc_act_calib_feed(ctx, a, x, half, inner) != NPUC_OK) ||
                npuc_act_calib_feed(ctx, a, x + half * row, outer - half, inner) != NPUC_OK ||
                npuc_act_calib_end_pass(ctx, a, &more) != NPUC_OK)
                break;
        }
        npuc_act_result r;
        for (uint64_t ch = 0; !more && ch < C; ch++) (void)npuc_act_calib_result(a, ch, &r);
    }
    npuc_act_calib_free(a);
    free(x);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    npuc_ctx *ctx;
    npuc_model *m = npuc_fuzz_open(data, size, ".safetensors", NPUC_FORMAT_SAFETENSORS, &ctx);
    npuc_calib *c = NULL;
    if (m && npuc_calib_open(ctx, npuc_model_path(m), &c) == NPUC_OK) {
        for (size_t i = 0; i < npuc_model_count(m); i++) {
            const npuc_tensor_info *t = npuc_model_tensor(m, i);
            size_t len = strlen(t->name);
            int cal = 0;
            for (int s = 0; s < 4; s++) {
                size_t k = strlen(SUFFIXES[s]);
                cal |= len > k && strcmp(t->name + len - k, SUFFIXES[s]) == 0;
            }
            if (cal) calib_tensor(ctx, c, t);
            else act_tensor(ctx, m, i);
        }
    }
    npuc_calib_close(c);
    npuc_model_close(m);
    npuc_ctx_free(ctx);
    return 0;
}
