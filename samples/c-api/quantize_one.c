/* quantize_one.c - libnpuc from C: open a model, quantize one tensor to int8
 * per channel, print its error, and write an artifact with that tensor
 * quantized.  Against an installed npuc (samples/c-api/README.md):
 *     cc quantize_one.c $(pkg-config --cflags --libs npuc) -o quantize_one
 *     ./quantize_one model.safetensors fc.weight out.safetensors
 * Every call returns a status; the message belongs to the context. */
#include <stdio.h>
#include <stdlib.h>
#include <npuc/npuc.h>

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: %s MODEL TENSOR OUT\n", argv[0]); return 2; }
    npuc_ctx *ctx;
    npuc_model *m = NULL;
    size_t i = 0;
    if (npuc_ctx_new(&ctx) != NPUC_OK) return 1;
    npuc_status st = npuc_model_open(ctx, argv[1], NULL, &m);
    if (st == NPUC_OK && npuc_model_find(m, argv[2], &i) != 0) {
        fprintf(stderr, "error: %s: no tensor '%s'\n", argv[1], argv[2]);
        npuc_model_close(m), npuc_ctx_free(ctx);
        return 2;
    }
    const npuc_tensor_info *t = m ? npuc_model_tensor(m, i) : NULL;
    npuc_quant_params p = npuc_quant_params_defaults();       /* int8, per channel, symmetric */
    npuc_quant_shape qs = {0};
    if (st == NPUC_OK) st = npuc_quant_shape_of(ctx, t, &p, &qs);
    float *w = t ? malloc(t->numel * sizeof *w) : NULL, *scales = malloc(qs.nscales * sizeof *scales);
    uint8_t *codes = t ? malloc(t->numel) : NULL;
    int32_t *zps = malloc(qs.nscales * sizeof *zps);
    npuc_error_stats err;
    if (st == NPUC_OK && !(w && codes && scales && zps)) st = NPUC_ERR_NOMEM;
    if (st == NPUC_OK) st = npuc_model_read_f32(ctx, m, i, w); /* any float dtype -> float32 */
    if (st == NPUC_OK) st = npuc_quantize_tensor(ctx, t, w, &p, codes, scales, zps, NULL, &err);
    if (st == NPUC_OK) printf("%s: %llu scales, sqnr %.2f dB, max |error| %g\n", t->name,
                              (unsigned long long)qs.nscales, err.sqnr_db, err.max_abs);
    char rx[512];                                               /* the artifact: that tensor only */
    const char *include[1] = {rx};
    snprintf(rx, sizeof rx, "^%s$", argv[2]);                  /* (regex characters unescaped) */
    npuc_quantize_opts o = npuc_quantize_opts_defaults();
    o.include = include, o.ninclude = 1;
    npuc_summary sum;
    if (st == NPUC_OK && (st = npuc_quantize_model(ctx, m, argv[3], &o, &sum)) == NPUC_OK) {
        printf("wrote %s: %llu -> %llu bytes\n", argv[3], (unsigned long long)sum.bytes_before,
               (unsigned long long)sum.bytes_after);
        npuc_summary_free(&sum);
    }
    if (st != NPUC_OK) fprintf(stderr, "error: %s\n", npuc_ctx_errmsg(ctx));
    free(w), free(codes), free(scales), free(zps);
    npuc_model_close(m);
    npuc_ctx_free(ctx);
    return st == NPUC_OK ? 0 : npuc_status_is_input_error(st) ? 2 : 1;
}
