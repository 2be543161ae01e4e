/*
 * budget_alloc.c - measuring every candidate scheme of every free tensor and
 * choosing one per tensor under --target-size / --target-bpw
 * (budget_alloc.h).
 *
 * Measurement reads each free tensor once (npuc__load_f32) and quantizes it
 * with every candidate while it is in memory, through npuc_quantize_tensor:
 * the production quantizer, so the codes the run then writes are exactly
 * the ones measured.  A candidate whose parameters the tensor does not take
 * (no channel axis for a per-channel scheme) is left out for that tensor; a
 * tensor no candidate fits keeps its planned scheme, pinned.
 *
 * Bytes are those of the per-tensor lines: codes (bit-packed below 8 bits),
 * scales in the candidate's scale dtype, and one byte per zero point when
 * asymmetric.  --target-bpw counts them over every quantized tensor, pinned
 * ones included; --target-size adds the caller's estimate of everything
 * else in the file.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <jansson.h>

#include "budget_alloc.h"
#include "budget_solve.h"
#include "kernels/npuc_kernels.h"
#include "npuc_internal.h"
#include "passes/pass_util.h"
#include "calib_out_error.h"
#include "gguf/gguf_format.h"
#include "gguf/gguf_imatrix.h"
#include "pipeline/recipe_internal.h"

#define MAX_CANDIDATES 128

int npuc__budget_parse_size(const char *s, uint64_t *out) {
    char *end;
    if (!s || !*s || *s == '-') return -1;
    double v = strtod(s, &end);
    if (end == s || !(v > 0) || !isfinite(v)) return -1;
    double mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1024.0, end++;
    else if (*end == 'M' || *end == 'm') mul = 1024.0 * 1024, end++;
    else if (*end == 'G' || *end == 'g') mul = 1024.0 * 1024 * 1024, end++;
    if (*end == 'i' && mul > 1) end++; /* KiB, MiB, GiB */
    if (*end == 'B' && (mul > 1 || end[-1] != 'B')) end++;
    if (*end) return -1;
    v *= mul;
    if (v >= 18446744073709551615.0) return -1;
    *out = (uint64_t)v;
    return 0;
}

/* One scheme: "int4/g32", "uint8/ch", "int3/t". */
static int parse_scheme(const char *s, size_t len, const npuc_quant_params *base, npuc_quant_params *p) {
    char buf[32];
    if (len == 0 || len >= sizeof buf) return -1;
    memcpy(buf, s, len);
    buf[len] = 0;
    *p = *base;
    const char *q = buf;
    if (strncmp(q, "uint", 4) == 0) {
        p->symmetric = 0;
        q += 4;
    } else if (strncmp(q, "int", 3) == 0) {
        p->symmetric = 1;
        q += 3;
    } else {
        return -1;
    }
    if (*q < '2' || *q > '8' || q[1] != '/') return -1;
    p->bits = *q - '0';
    q += 2;
    if (strcmp(q, "ch") == 0) {
        p->gran = NPUC_GRAN_CHANNEL;
    } else if (strcmp(q, "t") == 0) {
        p->gran = NPUC_GRAN_TENSOR;
    } else if (q[0] == 'g') {
        char *end;
        long g = strtol(q + 1, &end, 10);
        if (end == q + 1 || *end || g < 2 || g > (1L << 30)) return -1;
        p->gran = NPUC_GRAN_GROUP;
        p->group_size = (uint32_t)g;
    } else {
        return -1;
    }
    if (!p->symmetric) p->grid = NPUC_GRID_RESTRICTED;
    return 0;
}

/* The candidate set: the list given, or int2..int8 x {ch, g32, g64, g128}
 * x {symmetric, asymmetric}.  Scales are f16 unless --scale-dtype chose
 * bf16 (the default f32 becomes f16: 4.5 bits per weight at int4 g32). */
static npuc_status candidates(npuc_ctx *ctx, const char *list, const npuc_quant_params *base0,
                              npuc_quant_params *c, size_t *nc) {
    npuc_quant_params base = *base0;
    if (base.scale_dtype == NPUC_DTYPE_F32) base.scale_dtype = NPUC_DTYPE_F16;
    base.axis = base0->axis;
    *nc = 0;
    if (!list) {
        static const char *const G[] = {"ch", "g32", "g64", "g128"};
        for (int sym = 1; sym >= 0; sym--)
            for (int b = 2; b <= 8; b++)
                for (size_t g = 0; g < 4; g++) {
                    char s[24];
                    snprintf(s, sizeof s, "%s%d/%s", sym ? "int" : "uint", b, G[g]);
                    if (parse_scheme(s, strlen(s), &base, &c[(*nc)++]) != 0)
                        return npuc_fail(ctx, NPUC_ERR_INTERNAL, "default candidate '%s'", s);
                }
        return NPUC_OK;
    }
    const char *s = list;
    for (;;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (*nc == MAX_CANDIDATES)
            return npuc_fail(ctx, NPUC_ERR_ARG, "--candidates: more than %d schemes", MAX_CANDIDATES);
        if (parse_scheme(s, len, &base, &c[*nc]) != 0)
            return npuc_fail(ctx, NPUC_ERR_ARG,
                             "--candidates '%.*s': expected a scheme like int4/g32, uint8/ch or int8/t "
                             "(bits 2..8, groups of 2..2^30)", (int)len, s);
        for (size_t k = 0; k < *nc; k++)
            if (memcmp(&c[k], &c[*nc], sizeof c[k]) == 0)
                return npuc_fail(ctx, NPUC_ERR_ARG, "--candidates: '%.*s' is listed twice", (int)len, s);
        (*nc)++;
        if (!e) break;
        s = e + 1;
    }
    return NPUC_OK;
}

/* GGUF outputs: the ggml types the GGUF writer writes, by name ("q4_k",
 * any case); default: the K types, the legacy block types and F16 (those
 * this build can write). */
static const int GGUF_DEFAULT[] = {NPUC__GGML_Q2_K, NPUC__GGML_Q3_K, NPUC__GGML_Q4_K, NPUC__GGML_Q5_K,
                                   NPUC__GGML_Q6_K, NPUC__GGML_Q8_0, NPUC__GGML_Q4_0, NPUC__GGML_Q4_1,
                                   NPUC__GGML_Q5_0, NPUC__GGML_Q5_1, NPUC__GGML_F16};
#define GGUF_NDEFAULT (sizeof GGUF_DEFAULT / sizeof GGUF_DEFAULT[0])

static int gguf_type_named(const char *s, size_t len) {
    static const int ALL[] = {NPUC__GGML_Q2_K, NPUC__GGML_Q3_K, NPUC__GGML_Q4_K, NPUC__GGML_Q5_K, NPUC__GGML_Q6_K,
                              NPUC__GGML_Q8_0, NPUC__GGML_Q4_0, NPUC__GGML_Q4_1, NPUC__GGML_Q5_0, NPUC__GGML_Q5_1,
                              NPUC__GGML_F16,  NPUC__GGML_BF16, NPUC__GGML_F32};
    for (size_t k = 0; k < sizeof ALL / sizeof ALL[0]; k++) {
        const char *name = npuc__ggml_type_by_id((uint32_t)ALL[k])->name;
        if (strlen(name) == len && strncasecmp(name, s, len) == 0) return ALL[k];
    }
    return -1;
}

static npuc_status gguf_candidates(npuc_ctx *ctx, const char *list, int *c, size_t *nc) {
    *nc = 0;
    if (!list) {
        for (size_t k = 0; k < GGUF_NDEFAULT; k++)
            if (npuc__ggml_type_by_id((uint32_t)GGUF_DEFAULT[k])->known) c[(*nc)++] = GGUF_DEFAULT[k];
        return NPUC_OK;
    }
    for (const char *s = list;;) {
        const char *e = strchr(s, ',');
        const size_t len = e ? (size_t)(e - s) : strlen(s);
        const int id = gguf_type_named(s, len);
        if (*nc == MAX_CANDIDATES)
            return npuc_fail(ctx, NPUC_ERR_ARG, "--candidates: more than %d types", MAX_CANDIDATES);
        if (id < 0)
            return npuc_fail(ctx, NPUC_ERR_ARG, "--candidates '%.*s': a .gguf output takes ggml types: q2_k, q3_k, "
                             "q4_k, q5_k, q6_k, q8_0, q4_0, q4_1, q5_0, q5_1, f16, bf16, f32", (int)len, s);
        for (size_t k = 0; k < *nc; k++)
            if (c[k] == id) return npuc_fail(ctx, NPUC_ERR_ARG, "--candidates: '%.*s' is listed twice", (int)len, s);
        c[(*nc)++] = id;
        if (!e) break;
        s = e + 1;
    }
    return NPUC_OK;
}

int npuc__budget_check_candidates(const char *list, char *why, size_t n) {
    npuc_quant_params c[MAX_CANDIDATES], base = npuc_quant_params_defaults();
    size_t nc;
    npuc_ctx *ctx;
    if (npuc_ctx_new(&ctx) != NPUC_OK) return -1;
    int g[MAX_CANDIDATES];
    /* npuc schemes, or ggml types (for a .gguf output: the run checks which) */
    int rc = candidates(ctx, list, &base, c, &nc) == NPUC_OK ? 0 : -1;
    if (rc && list && gguf_type_named(list, strcspn(list, ",")) >= 0) {
        npuc_ctx_clear(ctx);
        rc = gguf_candidates(ctx, list, g, &nc) == NPUC_OK ? 0 : -1;
    }
    if (rc) snprintf(why, n, "%s", npuc_ctx_errmsg(ctx));
    npuc_ctx_free(ctx);
    return rc;
}

static uint64_t scheme_bytes(const npuc_tensor_info *t, const npuc_quant_params *p, const npuc_quant_shape *qs) {
    const uint64_t codes = p->bits < 8 ? npuc_packed_size(t->numel, p->bits) : t->numel;
    const npuc_dtype sd = p->scale_dtype == NPUC_DTYPE_F16 || p->scale_dtype == NPUC_DTYPE_BF16 ? p->scale_dtype
                                                                                                 : NPUC_DTYPE_F32;
    return codes + qs->nscales * npuc_dtype_size(sd) + (p->symmetric ? 0 : qs->nscales);
}

typedef struct measured {
    npuc__bchoice *c; /* per free tensor, its available candidates */
    size_t *cand;     /* which candidate each choice is */
    size_t n;
} measured;

/* Without calibration data, the candidates of one tensor are measured side
 * by side, one per thread (each with a context of its own on one thread):
 * npuc_quantize_tensor on a small tensor spends more in its parallel
 * region's start and barriers than in work, and its codes do not depend on
 * the thread count, so the figures are those of the serial loop.  The
 * results are collected in candidate order; the first failure (lowest
 * candidate) is reported. */
static npuc_status measure_parallel(npuc_ctx *ctx, const npuc_tensor_info *t, const float *x,
                                    const npuc_quant_params *cand, size_t nc, int nth, measured *out) {
    double *dist = calloc(nc, sizeof *dist);
    uint64_t *bytes = calloc(nc, sizeof *bytes);
    npuc_status *sts = calloc(nc, sizeof *sts);
    unsigned char *ok = calloc(nc, 1);
    char (*msg)[256] = calloc(nc, sizeof *msg);
    npuc_status st = NPUC_OK;
    if (!dist || !bytes || !sts || !ok || !msg) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        goto done;
    }
#pragma omp parallel num_threads(nth)
    {
        npuc_ctx *tc = NULL;
        if (npuc_ctx_new(&tc) == NPUC_OK) npuc_ctx_set_threads(tc, 1);
        uint8_t *codes = malloc(t->numel ? (size_t)t->numel : 1);
        float *sc = NULL;
        int32_t *zp = NULL;
        uint64_t cap = 0;
#pragma omp for schedule(dynamic, 1)
        for (long k = 0; k < (long)nc; k++) {
            npuc_quant_shape qs;
            if (!tc || !codes) {
                sts[k] = NPUC_ERR_NOMEM;
                snprintf(msg[k], sizeof msg[k], "out of memory");
                continue;
            }
            if (npuc_quant_shape_of(tc, t, &cand[k], &qs) != NPUC_OK) { /* not for this tensor */
                npuc_ctx_clear(tc);
                continue;
            }
            if (qs.nscales > cap) {
                free(sc);
                free(zp);
                cap = qs.nscales;
                sc = malloc(cap * sizeof *sc);
                zp = malloc(cap * sizeof *zp);
            }
            npuc_error_stats e;
            npuc_status r = sc && zp ? npuc_quantize_tensor(tc, t, x, &cand[k], codes, sc, zp, NULL, &e)
                                     : NPUC_ERR_NOMEM;
            if (r != NPUC_OK) {
                sts[k] = r;
                snprintf(msg[k], sizeof msg[k], "%s", sc && zp ? npuc_ctx_errmsg(tc) : "out of memory");
                continue;
            }
            const double d = e.sum_w2 > 0 ? e.sum_e2 / e.sum_w2 : 0.0;
            dist[k] = isfinite(d) ? d : 0.0;
            bytes[k] = scheme_bytes(t, &cand[k], &qs);
            ok[k] = 1;
        }
        free(codes);
        free(sc);
        free(zp);
        npuc_ctx_free(tc);
    }
    for (size_t k = 0; k < nc; k++) {
        if (sts[k] != NPUC_OK) {
            st = npuc_fail(ctx, sts[k], "%s", msg[k]);
            goto done;
        }
        if (!ok[k]) continue;
        out->c[out->n] = (npuc__bchoice){bytes[k], dist[k]};
        out->cand[out->n++] = k;
    }
done:
    free(dist);
    free(bytes);
    free(sts);
    free(ok);
    free(msg);
    return st;
}

/* The importance-weighted relative squared error of y against x:
 * sum_j imp_j (x_j - y_j)^2 / sum_j imp_j x_j^2, imp_j the importance of
 * element j's input column (the last dim) in its matrix (nmat matrices of
 * numel / nmat elements, one importance row each, as llama-quantize counts
 * them). */
static double imp_error(const npuc_tensor_info *t, const float *x, const float *y, const float *imp, uint64_t nmat) {
    const uint64_t row = (uint64_t)t->shape[t->rank - 1], per = t->numel / nmat;
    double e2 = 0, w2 = 0;
    for (uint64_t j = 0; j < t->numel; j++) {
        const double a = imp[j / per * row + j % row], d = (double)x[j] - (double)y[j];
        e2 += a * d * d;
        w2 += a * (double)x[j] * (double)x[j];
    }
    return w2 > 0 ? e2 / w2 : 0.0;
}

/* Replaces *d, the relative weight error of deq against x, by what the
 * data says when there is some: with the channels' loss sensitivities gw
 * (W.output_grad_sq), the predicted loss increase over the calibration
 * data (oe; *used_out 3), without them the relative output error (oe;
 * *used_out 1), else the importance-weighted error (imp; *used_out 2). */
static npuc_status data_distortion(npuc_ctx *ctx, npuc_model *m, npuc_calib *cal, const npuc_tensor_info *t,
                                   const float *x, const float *deq, const float *imp, uint64_t nmat, int oe,
                                   const double *gw, double *d, int *used_out) {
    if (imp && !oe) {
        *d = imp_error(t, x, deq, imp, nmat);
        *used_out = 2;
    }
    if (oe) {
        npuc_tensor_record r;
        const char *why = NULL;
        memset(&r, 0, sizeof r);
        double rows = 0;
        npuc_status st = npuc__out_error_measure_w(ctx, cal, t, x, deq, gw, &r, &rows, &why);
        if (st != NPUC_OK) return npuc__prefix_path(ctx, st, npuc_model_path(m));
        if (!why && r.has_out_error && gw) {
            /* The predicted increase of the mean loss per row: half the
             * diagonal Fisher form of the output change. */
            *d = rows > 0 ? 0.5 * r.out_e2 / rows : 0.0;
            *used_out = 3;
        } else if (!why && r.has_out_error) {
            *d = r.out_y2 > 0 ? r.out_e2 / r.out_y2 : 0.0;
            *used_out = 1;
        }
    }
    return NPUC_OK;
}


/* Measures every candidate on tensor i: the relative squared output error
 * over the calibration data when cal has W.input or W.hessian for it, else
 * the relative squared weight error.  *used_out says which. */
static npuc_status measure(npuc_ctx *ctx, npuc_model *m, npuc_calib *cal, size_t i, const npuc_quant_params *cand,
                           size_t nc, npuc_scratch *s_in, npuc_scratch *s_codes, npuc_scratch *s_sc,
                           npuc_scratch *s_zp, npuc_scratch *s_deq, const float *imp, const double *gw, uint64_t nmat,
                           measured *out, int *used_out) {
    const npuc_tensor_info *t = npuc_model_tensor(m, i);
    const float *x;
    npuc_status st = npuc__load_f32(ctx, m, i, s_in, &x);
    if (st != NPUC_OK) return st;
    out->c = malloc(nc * sizeof *out->c);
    out->cand = malloc(nc * sizeof *out->cand);
    out->n = 0;
    if (!out->c || !out->cand) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    const int oe = cal && npuc_calib_has(cal, t->name) == 1 && t->layout != NPUC_LAYOUT_NONE;
    *used_out = 0;
    const int nth = npuc_ctx_threads(ctx) > 0 ? npuc_ctx_threads(ctx) : omp_get_max_threads();
    if (!oe && !imp && nth > 1 && nc > 1) {
        st = measure_parallel(ctx, t, x, cand, nc, nth, out);
        if (st != NPUC_OK) return npuc__prefix_path(ctx, st, npuc_model_path(m));
        npuc_model_release(m, i);
        npuc_ctx_clear(ctx);
        return NPUC_OK;
    }
    uint8_t *codes = npuc__scratch(s_codes, t->numel);
    float *deq = oe || imp ? npuc__scratch(s_deq, t->numel * sizeof(float)) : NULL;
    if (!codes || ((oe || imp) && !deq)) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: tensor '%s': out of memory", npuc_model_path(m), t->name);
    for (size_t k = 0; k < nc; k++) {
        npuc_quant_shape qs;
        if (npuc_quant_shape_of(ctx, t, &cand[k], &qs) != NPUC_OK) continue; /* not for this tensor */
        float *sc = npuc__scratch(s_sc, qs.nscales * sizeof(float));
        int32_t *zp = npuc__scratch(s_zp, qs.nscales * sizeof(int32_t));
        if (!sc || !zp) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        npuc_error_stats e;
        if ((st = npuc_quantize_tensor(ctx, t, x, &cand[k], codes, sc, zp, deq, &e)) != NPUC_OK)
            return npuc__prefix_path(ctx, st, npuc_model_path(m));
        double d = e.sum_w2 > 0 ? e.sum_e2 / e.sum_w2 : 0.0;
        if ((st = data_distortion(ctx, m, cal, t, x, deq, imp, nmat, oe, gw, &d, used_out)) != NPUC_OK) return st;
        out->c[out->n] = (npuc__bchoice){scheme_bytes(t, &cand[k], &qs), isfinite(d) ? d : 0.0};
        out->cand[out->n++] = k;
    }
    npuc_model_release(m, i);
    npuc_ctx_clear(ctx);
    return NPUC_OK;
}

/* A GGUF output: every ggml type candidate on tensor i, quantized and
 * dequantized by the GGUF writer's own codecs (npuc__gguf_quantize_rows,
 * the bytes the writer writes; npuc__gguf_dequantize, ggml's dequantizers),
 * F16/BF16 by rounding; bytes per npuc__gguf_nbytes.  A type the tensor's
 * rows do not take (GGUF ne[0] not a multiple of its block) is left out, so
 * no fallback ever applies to a chosen type, and so is a type whose block
 * scale would overflow fp16 for this tensor. */
static npuc_status measure_gguf(npuc_ctx *ctx, npuc_model *m, npuc_calib *cal, size_t i, const int *cand, size_t nc,
                                npuc_scratch *s_in, npuc_scratch *s_blk, npuc_scratch *s_deq, const float *imp,
                                const double *gw, uint64_t nmat, measured *out, int *used_out) {
    const npuc_tensor_info *t = npuc_model_tensor(m, i);
    const float *x;
    npuc_status st = npuc__load_f32(ctx, m, i, s_in, &x);
    if (st != NPUC_OK) return st;
    out->c = malloc(nc * sizeof *out->c);
    out->cand = malloc(nc * sizeof *out->cand);
    out->n = 0;
    float *deq = npuc__scratch(s_deq, t->numel * sizeof(float));
    void *blk = npuc__scratch(s_blk, t->numel * sizeof(float));
    if (!out->c || !out->cand || !deq || !blk)
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: tensor '%s': out of memory", npuc_model_path(m), t->name);
    const int oe = cal && npuc_calib_has(cal, t->name) == 1 && t->layout != NPUC_LAYOUT_NONE;
    *used_out = 0;
    const uint64_t row = t->rank ? (uint64_t)t->shape[t->rank - 1] : 1;
    for (size_t k = 0; t->rank >= 2 && k < nc; k++) {
        const npuc__ggml_type *g = npuc__ggml_type_by_id((uint32_t)cand[k]);
        uint64_t nb, bad;
        if (!g->known || row % g->blck != 0 || npuc__gguf_nbytes(g, row, t->numel, &nb) != 0) continue;
        if (g->blck == 1) {
            npuc_convert(blk, g->dtype, x, NPUC_DTYPE_F32, (size_t)t->numel);
            npuc_convert(deq, NPUC_DTYPE_F32, blk, g->dtype, (size_t)t->numel);
        } else {
            /* With an importance matrix, the writer's weighted quantizers:
             * matrix by matrix, each with its importance row. */
            const uint64_t per = t->numel / nmat;
            int r = 0;
            for (uint64_t mi = 0; mi < nmat && r == 0; mi++)
                r = npuc__gguf_quantize_rows(cand[k], x + mi * per, NPUC_DTYPE_F32,
                                             (unsigned char *)blk + mi * (per / g->blck * g->tsize), per, row,
                                             imp ? imp + mi * row : NULL, npuc_ctx_threads(ctx), &bad);
            if (r == -2) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
            if (r != 0) continue;
            npuc__gguf_dequantize(cand[k], blk, deq, t->numel);
        }
        double e2 = 0, w2 = 0;
        for (uint64_t j = 0; j < t->numel; j++) {
            const double d = (double)x[j] - (double)deq[j];
            e2 += d * d;
            w2 += (double)x[j] * (double)x[j];
        }
        double d = w2 > 0 ? e2 / w2 : 0.0;
        if ((st = data_distortion(ctx, m, cal, t, x, deq, imp, nmat, oe, gw, &d, used_out)) != NPUC_OK) return st;
        out->c[out->n] = (npuc__bchoice){nb, isfinite(d) ? d : 0.0};
        out->cand[out->n++] = k;
    }
    npuc_model_release(m, i);
    npuc_ctx_clear(ctx);
    return NPUC_OK;
}

static uint64_t gguf_bytes(const npuc_tensor_info *t, int id) {
    uint64_t nb = 0;
    const uint64_t row = t->rank ? (uint64_t)t->shape[t->rank - 1] : 1;
    if (npuc__gguf_nbytes(npuc__ggml_type_by_id((uint32_t)id), row, t->numel, &nb) != 0) return t->nbytes;
    return nb;
}

/* The name of candidate k: an npuc scheme or a ggml type. */
static void cand_name(const npuc_quant_params *cand, const int *gcand, size_t k, char *buf, size_t n) {
    if (gcand) snprintf(buf, n, "%s", npuc__ggml_type_by_id((uint32_t)gcand[k])->name);
    else npuc_quant_scheme_name(&cand[k], buf, n);
}

/* ------------------------------------------------ --budget-cache FILE
 * A JSON document ("npuc.budget-cache/1") of measurements: per tensor key
 * (the SHA-256 of its stored bytes, its dtype, shape and layout, and the
 * identity of the calibration and importance files: path, size and
 * modification time), per candidate key (an npuc scheme with its scale
 * dtype, range, axis and grid, or a ggml type), [bytes, distortion] or null
 * (the candidate does not fit the tensor), and which error was measured.
 * A tensor whose every candidate is there is not measured again. */
static void file_ident(const char *path, char *buf, size_t n) {
    struct stat sb;
    if (!path) snprintf(buf, n, "-");
    else if (stat(path, &sb) != 0) snprintf(buf, n, "%s:?", path);
    else
        snprintf(buf, n, "%s:%lld:%lld.%09ld", path, (long long)sb.st_size, (long long)sb.st_mtim.tv_sec,
                 (long)sb.st_mtim.tv_nsec);
}

static npuc_status tensor_key(npuc_ctx *ctx, npuc_model *m, size_t i, const npuc__budget_req *rq, char **out) {
    const npuc_tensor_info *t = npuc_model_tensor(m, i);
    const void *data;
    char hex[65], cal[1200], imx[1200];
    npuc_status st = npuc_model_data(ctx, m, i, &data);
    if (st != NPUC_OK) return st;
    const int rc = npuc__sha256_hex(data, (size_t)t->nbytes, hex);
    npuc_model_release(m, i);
    if (rc != 0) return npuc_fail(ctx, NPUC_ERR_INTERNAL, "tensor '%s': SHA-256 failed", t->name);
    file_ident(rq->calib_path, cal, sizeof cal);
    file_ident(rq->imatrix, imx, sizeof imx);
    char shape[256] = "";
    for (int d = 0; d < t->rank; d++)
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", d ? "x" : "", (long long)t->shape[d]);
    const size_t n = strlen(t->name) + strlen(cal) + strlen(imx) + 512;
    if (!(*out = malloc(n))) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    /* The name too: calibration rows and importance entries are found by it. */
    snprintf(*out, n, "%s|%s|%s|%s|layout %d|calib %s|imatrix %s", hex, t->name, npuc_dtype_name(t->dtype), shape,
             (int)t->layout, cal, imx);
    return NPUC_OK;
}

static void cand_key(const npuc_quant_params *cand, const int *gcand, size_t k, char *buf, size_t n) {
    if (gcand) {
        snprintf(buf, n, "gguf %s", npuc__ggml_type_by_id((uint32_t)gcand[k])->name);
        return;
    }
    char name[32], range[64];
    npuc_quant_scheme_name(&cand[k], name, sizeof name);
    npuc_range_format(&cand[k].range, range, sizeof range);
    snprintf(buf, n, "%s|%s|%s|axis %d|grid %d", name, npuc_dtype_name(cand[k].scale_dtype), range, cand[k].axis,
             (int)cand[k].grid);
}

/* The cached measurements of a tensor into out (1), or 0 when any
 * candidate is missing. */
static int cache_get(json_t *entry, const npuc_quant_params *cand, const int *gcand, size_t nc, measured *out,
                     int *used) {
    json_t *c = json_object_get(entry, "c");
    if (!json_is_object(c) || !json_is_integer(json_object_get(entry, "used"))) return 0;
    out->c = malloc((nc ? nc : 1) * sizeof *out->c);
    out->cand = malloc((nc ? nc : 1) * sizeof *out->cand);
    out->n = 0;
    if (!out->c || !out->cand) return 0;
    for (size_t k = 0; k < nc; k++) {
        char key[256];
        cand_key(cand, gcand, k, key, sizeof key);
        json_t *v = json_object_get(c, key);
        if (!v) return 0;
        if (json_is_null(v)) continue;
        json_t *b = json_array_get(v, 0), *d = json_array_get(v, 1);
        if (!json_is_integer(b) || !json_is_number(d) || json_integer_value(b) < 0 || !(json_number_value(d) >= 0))
            return 0;
        out->c[out->n] = (npuc__bchoice){(uint64_t)json_integer_value(b), json_number_value(d)};
        out->cand[out->n++] = k;
    }
    *used = (int)json_integer_value(json_object_get(entry, "used"));
    return 1;
}

static int cache_put(json_t *tens, const char *key, const npuc_quant_params *cand, const int *gcand, size_t nc,
                     const measured *ms, int used) {
    json_t *e = json_object(), *c = json_object();
    if (!e || !c) {
        json_decref(e);
        json_decref(c);
        return -1;
    }
    for (size_t k = 0, j = 0; k < nc; k++) {
        char ck[256];
        cand_key(cand, gcand, k, ck, sizeof ck);
        json_t *v = json_null();
        if (j < ms->n && ms->cand[j] == k) {
            v = json_pack("[I, f]", (json_int_t)ms->c[j].bytes, ms->c[j].dist);
            j++;
        }
        if (!v || json_object_set_new(c, ck, v)) {
            json_decref(e);
            json_decref(c);
            return -1;
        }
    }
    json_object_set_new(e, "used", json_integer(used));
    json_object_set_new(e, "c", c);
    return json_object_set_new(tens, key, e);
}

static npuc_status cache_load(npuc_ctx *ctx, const char *path, json_t **doc) {
    struct stat sb;
    *doc = NULL;
    if (stat(path, &sb) == 0) {
        json_error_t je;
        if (sb.st_size > (1LL << 30))
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "--budget-cache %s: not a budget cache (over 1 GiB)", path);
        json_t *d = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
        const char *fmt = json_string_value(json_object_get(d, "format"));
        if (!d || !fmt || strcmp(fmt, "npuc.budget-cache/1") != 0 || !json_is_object(json_object_get(d, "tensors"))) {
            json_decref(d);
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "--budget-cache %s: not an npuc.budget-cache/1 document%s%s", path,
                             d ? "" : ": ", d ? "" : je.text);
        }
        *doc = d;
        return NPUC_OK;
    }
    *doc = json_pack("{s:s, s:{}}", "format", "npuc.budget-cache/1", "tensors");
    return *doc ? NPUC_OK : npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
}

static npuc_status cache_save(npuc_ctx *ctx, const char *path, json_t *doc) {
    npuc_atomic_file *af;
    npuc_status st = npuc_atomic_file_open(ctx, path, 1, &af);
    if (st != NPUC_OK) return st;
    if (json_dump_file(doc, npuc_atomic_file_temp(af), JSON_COMPACT) != 0) {
        npuc_atomic_file_abort(af);
        return npuc_fail(ctx, NPUC_ERR_IO, "--budget-cache %s: cannot write it", path);
    }
    return npuc_atomic_file_commit(af);
}

static npuc_status write_plan(npuc_ctx *ctx, npuc_model *m, const npuc__budget_req *rq, const size_t *freei,
                              size_t nfree, const measured *ms, const size_t *pick, const npuc_quant_params *cand,
                              size_t nc, const npuc__bitem *items, uint64_t fixed, uint64_t budget,
                              const npuc__bresult *res, uint64_t file_bytes, const int *gcand, int loss,
                              size_t nmeasured,
                              size_t ncached) {
    json_t *doc = json_object(), *tens = json_array(), *curve = json_array(), *uni = json_array();
    if (!doc || !tens || !curve || !uni) goto nomem;
    json_object_set_new(doc, "format", json_string("npuc.plan/1"));
    json_object_set_new(doc, "model", json_string(npuc_model_path(m)));
    if (gcand) json_object_set_new(doc, "output", json_string("gguf"));
    if (rq->target_size) json_object_set_new(doc, "target_size", json_integer((json_int_t)rq->target_size));
    if (rq->target_bpw > 0) json_object_set_new(doc, "target_bpw", json_real(rq->target_bpw));
    json_object_set_new(doc, "objective",
                        json_string(loss ? "sum of predicted loss increases (half the squared output errors "
                                           "weighted by output_grad_sq, per calibration row)"
                                    : rq->calibrated && rq->imatrix ? "sum of relative squared output errors (where no "
                                                                    "calibration data, importance-weighted errors, "
                                                                    "else weight errors)"
                                    : rq->calibrated ? "sum of relative squared output errors (weight errors where no "
                                                       "calibration data)"
                                    : rq->imatrix ? "sum of importance-weighted relative squared errors (weight errors "
                                                    "where the imatrix has no entry)"
                                                  : "sum of relative squared weight errors"));
    json_object_set_new(doc, "payload_budget", json_integer((json_int_t)budget));
    json_object_set_new(doc, "pinned_bytes", json_integer((json_int_t)fixed));
    /* The output file's size, exact (computed from the header the writer will
     * write) under --target-size with a file output; else absent. */
    if (file_bytes) json_object_set_new(doc, "file_bytes", json_integer((json_int_t)file_bytes));
    json_object_set_new(doc, "predicted_distortion", json_real(res->dist));
    json_object_set_new(doc, "optimal", json_boolean(res->exact));
    /* Free tensors measured by this run, and taken from --budget-cache. */
    json_object_set_new(doc, "measured_tensors", json_integer((json_int_t)nmeasured));
    json_object_set_new(doc, "cached_tensors", json_integer((json_int_t)ncached));
    for (size_t f = 0; f < nfree; f++) {
        char name[32];
        const size_t k = ms[f].cand[pick[f]];
        cand_name(cand, gcand, k, name, sizeof name);
        json_t *e = json_pack("{s:s, s:s, s:I, s:f}", "name", npuc_model_tensor(m, freei[f])->name, "scheme", name,
                              "bytes", (json_int_t)ms[f].c[pick[f]].bytes, "distortion", ms[f].c[pick[f]].dist);
        if (!e || json_array_append_new(tens, e)) goto nomem;
    }
    /* The size/distortion curve: 24 budgets from the least to the most. */
    uint64_t lo = 0, hi = 0;
    for (size_t f = 0; f < nfree; f++) {
        uint64_t mn = UINT64_MAX, mx = 0;
        for (size_t j = 0; j < ms[f].n; j++) {
            if (ms[f].c[j].bytes < mn) mn = ms[f].c[j].bytes;
            if (ms[f].c[j].bytes > mx) mx = ms[f].c[j].bytes;
        }
        lo += mn;
        hi += mx;
    }
    size_t *tmp = malloc((nfree ? nfree : 1) * sizeof *tmp);
    if (!tmp) goto nomem;
    for (int q = 0; q <= 24; q++) {
        npuc__bresult r;
        const uint64_t b = lo + (hi - lo) / 24 * (uint64_t)q;
        if (npuc__budget_solve(items, nfree, b, 0, tmp, &r) != 0) continue;
        json_array_append_new(curve, json_pack("{s:I, s:f}", "bytes", (json_int_t)(r.bytes + fixed), "distortion",
                                               r.dist));
    }
    free(tmp);
    /* The uniform schemes, where every free tensor takes them. */
    for (size_t k = 0; k < nc; k++) {
        uint64_t b = 0;
        double d = 0;
        size_t f = 0;
        for (; f < nfree; f++) {
            size_t j = 0;
            while (j < ms[f].n && ms[f].cand[j] != k) j++;
            if (j == ms[f].n) break;
            b += ms[f].c[j].bytes;
            d += ms[f].c[j].dist;
        }
        if (f < nfree) continue;
        char name[32];
        cand_name(cand, gcand, k, name, sizeof name);
        json_array_append_new(uni, json_pack("{s:s, s:I, s:f}", "scheme", name, "bytes", (json_int_t)(b + fixed),
                                             "distortion", d));
    }
    json_object_set_new(doc, "tensors", tens);
    json_object_set_new(doc, "curve", curve);
    json_object_set_new(doc, "uniform", uni);
    tens = curve = uni = NULL;
    if (rq->curve_json) {
        json_t *c = json_pack("{s:O, s:O, s:{s:I, s:f}}", "curve", json_object_get(doc, "curve"), "uniform",
                              json_object_get(doc, "uniform"), "chosen", "bytes", (json_int_t)(res->bytes + fixed),
                              "distortion", res->dist);
        free(*rq->curve_json);
        *rq->curve_json = c ? json_dumps(c, JSON_COMPACT) : NULL;
        json_decref(c);
    }
    if (!rq->plan_out) {
        json_decref(doc);
        return NPUC_OK;
    }
    npuc_atomic_file *af;
    npuc_status st = npuc_atomic_file_open(ctx, rq->plan_out, rq->overwrite, &af);
    if (st != NPUC_OK) {
        json_decref(doc);
        return st;
    }
    if (json_dump_file(doc, npuc_atomic_file_temp(af), JSON_INDENT(1)) != 0) {
        npuc_atomic_file_abort(af);
        json_decref(doc);
        return npuc_fail(ctx, NPUC_ERR_IO, "%s: cannot write the plan", rq->plan_out);
    }
    json_decref(doc);
    return npuc_atomic_file_commit(af);
nomem:
    json_decref(doc);
    json_decref(tens);
    json_decref(curve);
    json_decref(uni);
    return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
}

static npuc_status bpw_infeasible(npuc_ctx *ctx, const char *path, double bpw, uint64_t least, uint64_t numel) {
    return npuc_fail(ctx, NPUC_ERR_ARG,
                     "%s: --target-bpw %g is not reachable with these candidates: the least is %.4f bits per weight",
                     path, bpw, numel ? 8.0 * (double)least / (double)numel : 0.0);
}

/* The choice pick (per free tensor f, the index into ms[f]) into p. */
static void apply_pick(npuc_quant_params *p, int *gout, const size_t *freei, size_t nfree, const measured *ms,
                       const npuc_quant_params *cand, const int *gcand, const size_t *pick) {
    for (size_t f = 0; f < nfree; f++)
        if (gout) gout[freei[f]] = gcand[ms[f].cand[pick[f]]];
        else p[freei[f]] = cand[ms[f].cand[pick[f]]];
}

/* --target-size met to the byte: the file's size beyond the free tensors'
 * payloads (pinned and other tensors, the header with its description of
 * every scheme, padding) depends a little on the choice, so it is computed
 * exactly (rq->file_size) for each choice tried.  First the least-payload
 * choice: its exact size is the smallest reachable one (above it, the target
 * is infeasible); then payload budgets B = target - (exact size - payload)
 * of the last choice, moved by what the last choice missed or overshot, and
 * bisected between the largest budget whose choice fit and the smallest
 * whose choice did not, until the file is the target to the byte, the
 * budgets meet or 64 tries are spent.  The best choice that fits (least
 * predicted distortion; then the larger file) is the answer: pick, *res and
 * *file_bytes. */
static npuc_status exact_size(npuc_ctx *ctx, npuc_model *m, const npuc__budget_req *rq, const npuc__bitem *items,
                              const size_t *freei, size_t nfree, const measured *ms, const npuc_quant_params *cand,
                              const int *gcand, npuc_quant_params *p, uint64_t bpw_budget, uint64_t numel, uint64_t fixed, size_t *pick,
                              npuc__bresult *res, uint64_t *file_bytes) {
    const char *path = npuc_model_path(m);
    const uint64_t target = rq->target_size;
    size_t *tp = malloc((nfree ? nfree : 1) * sizeof *tp);
    if (!tp) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    npuc_status st = NPUC_OK;
    npuc__bresult r;
    uint64_t pmin = 0;
    for (size_t f = 0; f < nfree; f++) {
        uint64_t mn = UINT64_MAX;
        for (size_t j = 0; j < items[f].n; j++)
            if (items[f].c[j].bytes < mn) mn = items[f].c[j].bytes;
        pmin += mn;
    }
    if (pmin > bpw_budget) {
        st = bpw_infeasible(ctx, path, rq->target_bpw, pmin + fixed, numel);
        goto done;
    }
    /* The least payload, with the least distortion among such choices. */
    if (npuc__budget_solve(items, nfree, pmin, 0, tp, &r) != 0) {
        st = npuc_fail(ctx, NPUC_ERR_INTERNAL, "%s: the budget solver failed", path);
        goto done;
    }
    uint64_t size;
    apply_pick(p, rq->gguf, freei, nfree, ms, cand, gcand, tp);
    if ((st = rq->file_size(rq->file_size_user, p, rq->gguf, &size)) != NPUC_OK) goto done;
    if (size > target) {
        st = npuc_fail(ctx, NPUC_ERR_ARG,
                       "%s: --target-size %llu is not reachable with these candidates: the smallest output is "
                       "%llu bytes", path, (unsigned long long)target, (unsigned long long)size);
        goto done;
    }
    memcpy(pick, tp, nfree * sizeof *pick);
    *res = r;
    *file_bytes = size;
    uint64_t lo = pmin, hi = bpw_budget == UINT64_MAX ? UINT64_MAX : bpw_budget + 1; /* fits at lo; not known at hi */
    uint64_t b = target - (size - r.bytes);
    for (int it = 0; it < 64 && size != target; it++) {
        if (b >= hi || b <= lo) {
            if (hi == UINT64_MAX || hi - lo <= 1) break;
            b = lo + (hi - lo) / 2;
        }
        if (b > bpw_budget) b = bpw_budget;
        if (b <= lo) break;
        if (npuc__budget_solve(items, nfree, b, 0, tp, &r) != 0) {
            st = npuc_fail(ctx, NPUC_ERR_INTERNAL, "%s: the budget solver failed", path);
            goto done;
        }
        apply_pick(p, rq->gguf, freei, nfree, ms, cand, gcand, tp);
        if ((st = rq->file_size(rq->file_size_user, p, rq->gguf, &size)) != NPUC_OK) goto done;
        if (size <= target) {
            if (r.dist < res->dist || (r.dist == res->dist && size > *file_bytes)) {
                memcpy(pick, tp, nfree * sizeof *pick);
                *res = r;
                *file_bytes = size;
            }
            lo = b;
            b += target - size;
        } else {
            hi = b;
            b = b > size - target ? b - (size - target) : 0;
        }
    }
    apply_pick(p, rq->gguf, freei, nfree, ms, cand, gcand, pick);
done:
    free(tp);
    return st;
}

/* The loss sensitivities of t's output channels (W.output_grad_sq) when
 * the calibration file has them and calibration data for t: *gw
 * (malloc'd, the caller frees), else NULL. */
static npuc_status output_grad(npuc_ctx *ctx, npuc_model *m, npuc_calib *cal, const npuc_tensor_info *t,
                               double **gw) {
    uint64_t outer, C, inner;
    int found = 0;
    *gw = NULL;
    if (!cal || npuc_calib_has(cal, t->name) != 1 || t->layout == NPUC_LAYOUT_NONE ||
        npuc_layout_view(t, &outer, &C, &inner) != NPUC_OK || !C)
        return NPUC_OK;
    double *g = malloc((size_t)C * sizeof *g);
    if (!g) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    npuc_status st = npuc__calib_output_grad(ctx, cal, t->name, C, g, &found);
    if (st != NPUC_OK || !found) {
        free(g);
        return st == NPUC_OK ? st : npuc__prefix_path(ctx, st, npuc_model_path(m));
    }
    *gw = g;
    return NPUC_OK;
}

/* The distortions of the free tensors must be of one kind when one is the
 * predicted loss (W.output_grad_sq): a loss and a relative error do not
 * add up.  NPUC_ERR_ARG naming a tensor of each kind otherwise. */
static npuc_status one_kind(npuc_ctx *ctx, npuc_model *m, const size_t *freei, size_t nfree, const int *outerr) {
    size_t with = SIZE_MAX, without = SIZE_MAX;
    for (size_t f = 0; f < nfree; f++) {
        if (outerr[freei[f]] == 3 && with == SIZE_MAX) with = freei[f];
        if (outerr[freei[f]] != 3 && without == SIZE_MAX) without = freei[f];
    }
    if (with == SIZE_MAX || without == SIZE_MAX) return NPUC_OK;
    return npuc_fail(ctx, NPUC_ERR_ARG,
                     "%s: --calib: tensor '%s' has output_grad_sq (its distortion is a predicted loss) but tensor "
                     "'%s' has %s: a loss and a relative error cannot be added; give every tensor the budget "
                     "chooses calibration rows and output_grad_sq, or none output_grad_sq",
                     npuc_model_path(m), npuc_model_tensor(m, with)->name, npuc_model_tensor(m, without)->name,
                     outerr[without] == 1 ? "no output_grad_sq" : "no calibration data");
}

npuc_status npuc__budget_choose(npuc_ctx *ctx, npuc_model *m, npuc_calib *cal, const npuc__budget_req *rq,
                                const int *quantize, const int *pinned, npuc_quant_params *p, char (*note)[128]) {
    const char *path = npuc_model_path(m);
    const size_t n = npuc_model_count(m);
    npuc_quant_params cand[MAX_CANDIDATES];
    int gcand_[MAX_CANDIDATES], *gcand = rq->gguf ? gcand_ : NULL;
    size_t nc = 0, nfree = 0;
    npuc_status st;
    npuc_quant_params base = npuc_quant_params_defaults();
    for (size_t i = 0; i < n; i++)
        if (quantize[i]) {
            base = p[i]; /* range, axis, grid, scale dtype as asked */
            break;
        }
    if ((st = gcand ? gguf_candidates(ctx, rq->candidates, gcand, &nc)
                    : candidates(ctx, rq->candidates, &base, cand, &nc)) != NPUC_OK)
        return st;
    size_t *freei = calloc(n ? n : 1, sizeof *freei);
    measured *ms = calloc(n ? n : 1, sizeof *ms);
    npuc__bitem *items = calloc(n ? n : 1, sizeof *items);
    size_t *pick = calloc(n ? n : 1, sizeof *pick);
    npuc_scratch s_in = {0}, s_codes = {0}, s_sc = {0}, s_zp = {0}, s_deq = {0};
    int *outerr = calloc(n ? n : 1, sizeof *outerr);
    uint64_t fixed = 0, numel = 0;
    npuc__imatrix *im = NULL;
    json_t *cache = NULL;
    size_t nmeasured = 0, ncached = 0;
    if (!freei || !ms || !items || !pick || !outerr) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (rq->imatrix && (st = npuc__imatrix_load(ctx, rq->imatrix, &im)) != NPUC_OK) goto done;
    if (rq->cache && (st = cache_load(ctx, rq->cache, &cache)) != NPUC_OK) goto done;
    for (size_t i = 0; i < n && st == NPUC_OK; i++) {
        if (!quantize[i]) continue;
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        numel += t->numel;
        /* The tensor's importance rows, when the imatrix has them. */
        const float *imp = NULL;
        const uint64_t nmat = t->rank >= 3 ? (uint64_t)t->shape[t->rank - 3] : 1;
        if (im && !pinned[i] && t->rank >= 2 &&
            (st = npuc__imatrix_lookup(ctx, im, t->name, NULL, (uint64_t)t->shape[t->rank - 1], nmat, &imp)) !=
                NPUC_OK)
            break;
        if (!pinned[i]) {
            char *key = NULL;
            int hit = 0;
            if (cache) {
                if ((st = tensor_key(ctx, m, i, rq, &key)) != NPUC_OK) break;
                hit = cache_get(json_object_get(json_object_get(cache, "tensors"), key), cand, gcand, nc, &ms[nfree],
                                &outerr[i]);
                if (!hit) {
                    free(ms[nfree].c);
                    free(ms[nfree].cand);
                    ms[nfree] = (measured){0};
                }
            }
            if (hit) {
                ncached++;
            } else {
                double *gw = NULL;
                st = output_grad(ctx, m, cal, t, &gw);
                if (st == NPUC_OK)
                    st = gcand ? measure_gguf(ctx, m, cal, i, gcand, nc, &s_in, &s_codes, &s_deq, imp, gw, nmat,
                                              &ms[nfree], &outerr[i])
                               : measure(ctx, m, cal, i, cand, nc, &s_in, &s_codes, &s_sc, &s_zp, &s_deq, imp, gw,
                                         nmat, &ms[nfree], &outerr[i]);
                free(gw);
                nmeasured++;
                if (st == NPUC_OK && cache &&
                    cache_put(json_object_get(cache, "tensors"), key, cand, gcand, nc, &ms[nfree], outerr[i]) != 0)
                    st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
            }
            free(key);
            if (st != NPUC_OK) break;
            if (ms[nfree].n) {
                items[nfree] = (npuc__bitem){ms[nfree].c, ms[nfree].n};
                freei[nfree++] = i;
                continue;
            }
            free(ms[nfree].c);
            free(ms[nfree].cand);
            ms[nfree] = (measured){0};
            snprintf(note[i], 128, "budget: no candidate fits this tensor; kept as planned");
        }
        if (gcand) {
            fixed += gguf_bytes(t, rq->gguf[i]);
            continue;
        }
        npuc_quant_shape qs;
        if ((st = npuc_quant_shape_of(ctx, t, &p[i], &qs)) != NPUC_OK) {
            st = npuc__prefix_path(ctx, st, path);
            break;
        }
        fixed += scheme_bytes(t, &p[i], &qs);
    }
    if (st == NPUC_OK) st = one_kind(ctx, m, freei, nfree, outerr);
    if (st != NPUC_OK) goto done;
    if (im) npuc__imatrix_warn_unmatched(ctx, im);
    if (cache && nmeasured && (st = cache_save(ctx, rq->cache, cache)) != NPUC_OK) goto done;
    /* The payload budget of the free tensors. */
    uint64_t budget = UINT64_MAX;
    if (rq->target_bpw > 0) {
        const double bits = floor(rq->target_bpw * (double)numel / 8.0);
        budget = bits >= (double)fixed ? (uint64_t)bits - fixed : 0;
        if (bits < (double)fixed) budget = 0;
    }
    const uint64_t bpw_budget = budget;
    if (rq->target_size && !rq->file_size) {
        const uint64_t other = fixed + rq->overhead;
        const uint64_t b = rq->target_size > other ? rq->target_size - other : 0;
        if (b < budget) budget = b;
    }
    npuc__bresult res;
    uint64_t file_bytes = 0;
    if (rq->file_bytes) *rq->file_bytes = 0;
    if (rq->target_size && rq->file_size) {
        st = exact_size(ctx, m, rq, items, freei, nfree, ms, cand, gcand, p, bpw_budget, numel, fixed, pick, &res,
                        &file_bytes);
        if (st != NPUC_OK) goto done;
        if (rq->file_bytes) *rq->file_bytes = file_bytes;
        const uint64_t bs = rq->target_size - (file_bytes - res.bytes); /* the payload budget that was met */
        if (bs < budget) budget = bs;
    } else {
        int rc = npuc__budget_solve(items, nfree, budget, 0, pick, &res);
        if (rc < 0) {
            st = npuc_fail(ctx, NPUC_ERR_INTERNAL, "%s: the budget solver failed", path);
            goto done;
        }
        if (rc == 1 || (rq->target_bpw > 0 && 8.0 * (double)(res.bytes + fixed) > rq->target_bpw * (double)numel) ||
            (rq->target_size && res.bytes + fixed + rq->overhead > rq->target_size)) {
            const uint64_t least = res.bytes + fixed;
            if (rq->target_size)
                st = npuc_fail(ctx, NPUC_ERR_ARG,
                               "%s: --target-size %llu is not reachable with these candidates: the smallest output "
                               "is about %llu bytes", path, (unsigned long long)rq->target_size,
                               (unsigned long long)(least + rq->overhead));
            else
                st = bpw_infeasible(ctx, path, rq->target_bpw, least, numel);
            goto done;
        }
    }
    for (size_t f = 0; f < nfree; f++) {
        const size_t i = freei[f], j = pick[f];
        if (gcand) rq->gguf[i] = gcand[ms[f].cand[j]];
        else p[i] = cand[ms[f].cand[j]];
        /* Why: what the next larger choice on the front would buy per byte. */
        double best = 0;
        for (size_t q = 0; q < ms[f].n; q++)
            if (ms[f].c[q].bytes > ms[f].c[j].bytes && ms[f].c[q].dist < ms[f].c[j].dist) {
                const double g = (ms[f].c[j].dist - ms[f].c[q].dist) / (double)(ms[f].c[q].bytes - ms[f].c[j].bytes);
                if (g > best) best = g;
            }
        const char *what = outerr[i] == 1 ? "output" : outerr[i] == 2 ? "imatrix-weighted" : "weight";
        if (outerr[i] == 3 && best > 0)
            snprintf(note[i], 128, "budget: predicted loss +%.3g; more bytes would buy %.3g per KiB", ms[f].c[j].dist,
                     best * 1024);
        else if (outerr[i] == 3)
            snprintf(note[i], 128, "budget: predicted loss +%.3g; the best candidate", ms[f].c[j].dist);
        else if (best > 0)
            snprintf(note[i], 128, "budget: rel. %s error^2 %.3g; more bytes would buy %.3g per KiB", what,
                     ms[f].c[j].dist, best * 1024);
        else
            snprintf(note[i], 128, "budget: rel. %s error^2 %.3g; the best candidate", what, ms[f].c[j].dist);
    }
    if (rq->plan_out || rq->curve_json)
        st = write_plan(ctx, m, rq, freei, nfree, ms, pick, cand, nc, items, fixed, budget, &res, file_bytes, gcand,
                        nfree && outerr[freei[0]] == 3, nmeasured, ncached);
done:
    for (size_t f = 0; ms && f < n; f++) {
        free(ms[f].c);
        free(ms[f].cand);
    }
    free(ms);
    free(freei);
    free(items);
    free(pick);
    free(outerr);
    npuc__imatrix_free(im);
    json_decref(cache);
    npuc__scratch_free(&s_deq);
    npuc__scratch_free(&s_in);
    npuc__scratch_free(&s_codes);
    npuc__scratch_free(&s_sc);
    npuc__scratch_free(&s_zp);
    return st;
}

npuc_status npuc__budget_apply_plan(npuc_ctx *ctx, npuc_model *m, const char *plan, const int *quantize,
                                    const int *pinned, npuc_quant_params *p, char (*note)[128]) {
    const size_t n = npuc_model_count(m);
    npuc_quant_params base = npuc_quant_params_defaults();
    for (size_t i = 0; i < n; i++)
        if (quantize[i]) {
            base = p[i];
            break;
        }
    if (base.scale_dtype == NPUC_DTYPE_F32) base.scale_dtype = NPUC_DTYPE_F16;
    json_error_t je;
    /* A plan is small: one entry per tensor; 64 MiB is far beyond any. */
    FILE *f = fopen(plan, "rb");
    if (!f) return npuc_fail(ctx, NPUC_ERR_NOT_FOUND, "--plan %s: cannot open it", plan);
    if (fseek(f, 0, SEEK_END) != 0 || ftell(f) > (64L << 20)) {
        fclose(f);
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "--plan %s: not a plan (over 64 MiB)", plan);
    }
    rewind(f);
    json_t *doc = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
    fclose(f);
    if (!doc) return npuc_fail(ctx, NPUC_ERR_FORMAT, "--plan %s: line %d: %s", plan, je.line, je.text);
    npuc_status st = NPUC_OK;
    unsigned char *seen = calloc(n ? n : 1, 1);
    json_t *tens = json_object_get(doc, "tensors");
    const char *fmt = json_string_value(json_object_get(doc, "format"));
    if (!seen) st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    else if (!fmt || strcmp(fmt, "npuc.plan/1") != 0 || !json_is_array(tens))
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "--plan %s: not an npuc.plan/1 document (quantize --plan-out writes one)",
                       plan);
    for (size_t k = 0; st == NPUC_OK && k < json_array_size(tens); k++) {
        json_t *e = json_array_get(tens, k);
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *scheme = json_string_value(json_object_get(e, "scheme"));
        size_t i;
        if (!name || !scheme) {
            st = npuc_fail(ctx, NPUC_ERR_FORMAT, "--plan %s: tensor entry %zu has no name or scheme", plan, k);
        } else if (npuc_model_find(m, name, &i) != 0) {
            st = npuc_fail(ctx, NPUC_ERR_ARG, "--plan %s: tensor '%s' is not in %s", plan, name, npuc_model_path(m));
        } else if (!quantize[i] || pinned[i]) {
            st = npuc_fail(ctx, NPUC_ERR_ARG, "--plan %s: tensor '%s' is %s in this run, the plan cannot choose it",
                           plan, name, quantize[i] ? "pinned" : "not quantized");
        } else if (seen[i]) {
            st = npuc_fail(ctx, NPUC_ERR_FORMAT, "--plan %s: tensor '%s' is listed twice", plan, name);
        } else if (parse_scheme(scheme, strlen(scheme), &base, &p[i]) != 0) {
            st = npuc_fail(ctx, NPUC_ERR_FORMAT, "--plan %s: tensor '%s': scheme '%s' is not one npuc writes", plan,
                           name, scheme);
        } else {
            seen[i] = 1;
            snprintf(note[i], 128, "plan: %s", scheme);
        }
    }
    for (size_t i = 0; st == NPUC_OK && i < n; i++)
        if (quantize[i] && !pinned[i] && !seen[i])
            st = npuc_fail(ctx, NPUC_ERR_ARG, "--plan %s: no scheme for tensor '%s' (a plan from another model or "
                           "other flags?)", plan, npuc_model_tensor(m, i)->name);
    free(seen);
    json_decref(doc);
    return st;
}
