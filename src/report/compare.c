/*
 * compare.c - two weight files side by side, tensor by tensor, as an
 * npuc_summary (include/npuc/compare.h has the matching rules).
 *
 * Both files are seen through their logical views (decode_entry.h), so an
 * artifact tensor is compared after decoding and costs the bytes of all its
 * parts (those of nested entries too: a lowrank tensor whose factors were
 * quantized is one tensor, "r=16+int8/ch").  One tensor pair is in memory
 * at a time, as float32, in scratch buffers reused between tensors.
 * Quantized entries also get the two figures only the scales can give, the
 * uniform-noise prediction and the count of clipped values, computed exactly
 * as the quantizer defines them (docs/quantization.md), so `npuc report` and
 * `npuc quantize` agree.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codecs/artifact_meta.h"
#include "codecs/decode_entry.h"
#include "passes/pass_util.h"

npuc_compare_opts npuc_compare_opts_defaults(void) {
    npuc_compare_opts o;
    memset(&o, 0, sizeof o);
    o.histograms = 1;
    return o;
}

/* What an encoding did, for the record's action.  Unknown encodings are
 * MODIFIED: npuc knows the values changed but not how. */
static const struct {
    const char *encoding;
    npuc_action action;
} ENCODING_ACTIONS[] = {
    {"quant", NPUC_ACTION_QUANTIZED},   {"fake_quant", NPUC_ACTION_QUANTIZED},
    {"lowrank", NPUC_ACTION_FACTORED},  {"nm_sparse", NPUC_ACTION_SPARSIFIED},
    {"sparse", NPUC_ACTION_SPARSIFIED}, {"pruned", NPUC_ACTION_PRUNED},
};

static npuc_action encoding_action(const char *enc) {
    for (size_t i = 0; i < sizeof ENCODING_ACTIONS / sizeof ENCODING_ACTIONS[0]; i++)
        if (strcmp(enc, ENCODING_ACTIONS[i].encoding) == 0) return ENCODING_ACTIONS[i].action;
    return NPUC_ACTION_MODIFIED;
}

static long long jint(const json_t *e, const char *key, long long dflt) {
    const json_t *v = json_object_get(e, key);
    return json_is_integer(v) ? json_integer_value(v) : dflt;
}

/* Quantization parameters recorded in an entry (quant or fake_quant). */
static npuc_quant_params entry_params(const json_t *e) {
    npuc_quant_params p = npuc_quant_params_defaults();
    p.bits = (int)jint(e, "bits", 8);
    p.symmetric = !json_is_false(json_object_get(e, "symmetric"));
    p.axis = (int)jint(e, "axis", -1);
    const json_t *g = json_object_get(e, "granularity");
    const char *gs = json_is_string(g) ? json_string_value(g) : "channel";
    if (strcmp(gs, "group") == 0) {
        p.gran = NPUC_GRAN_GROUP;
        long long G = jint(e, "group_size", 0);
        p.group_size = G > 0 && G <= UINT32_MAX ? (uint32_t)G : 0;
    } else if (strcmp(gs, "tensor") == 0) {
        p.gran = NPUC_GRAN_TENSOR;
    }
    return p;
}

/* The entry describing part of t when it is nested, else NULL. */
static const json_t *nested_entry(const json_t *art, const npuc__ltensor *t, const char *part) {
    if (!part || strcmp(part, t->name) == 0) return NULL;
    const json_t *e = json_object_get(json_object_get(art, "tensors"), part);
    return json_is_string(json_object_get(e, "encoding")) ? e : NULL;
}

/* The scheme of a nested entry: "int8/ch" (quant), "int8/fake" (fake_quant),
 * "int8/ch+2:4" or "2:4" (nm_sparse), else its encoding; its bit width in
 * *bits (0 when not quantized). */
static void nested_scheme(const json_t *e, char *buf, size_t n, int *bits) {
    const char *enc = json_string_value(json_object_get(e, "encoding"));
    const json_t *q = strcmp(enc, "nm_sparse") == 0 ? json_object_get(e, "quant") : e;
    npuc_quant_params p = entry_params(json_is_object(q) ? q : e);
    *bits = 0;
    if (strcmp(enc, "quant") == 0 || (strcmp(enc, "nm_sparse") == 0 && json_is_object(q))) {
        npuc_quant_scheme_name(&p, buf, n);
        *bits = p.bits;
    } else if (strcmp(enc, "fake_quant") == 0) {
        snprintf(buf, n, "%s%d/fake", p.symmetric ? "int" : "uint", p.bits);
        *bits = p.bits;
    } else if (strcmp(enc, "nm_sparse") != 0) {
        snprintf(buf, n, "%.20s", enc);
        return;
    }
    if (strcmp(enc, "nm_sparse") == 0) {
        const size_t l = *bits ? strlen(buf) : 0;
        snprintf(buf + l, n - l, "%s%lld:%lld", *bits ? "+" : "", jint(e, "n", 0), jint(e, "m", 0));
    }
}

/* A lowrank entry whose factors were encoded afterwards (nested entries)
 * shows both: "r=16+int8/ch", or "r=16+int8/ch,int4/g32" when the factors
 * differ, "-" for a factor stored as is; "bits" is the widest factor's. */
static void describe_nested(npuc_tensor_record *r, const json_t *art, const npuc__ltensor *t) {
    const json_t *parts = json_object_get(t->entry, "parts");
    char s[2][24];
    int bits = 0;
    for (size_t p = 0; p < 2; p++) {
        const json_t *e = nested_entry(art, t, json_string_value(json_array_get(parts, p)));
        int b = 0;
        snprintf(s[p], sizeof s[p], "-");
        if (e) nested_scheme(e, s[p], sizeof s[p], &b);
        if (b > bits) bits = b;
    }
    const size_t l = strlen(r->scheme);
    if (strcmp(s[0], s[1]) == 0) snprintf(r->scheme + l, sizeof r->scheme - l, "+%s", s[0]);
    else snprintf(r->scheme + l, sizeof r->scheme - l, "+%s,%s", s[0], s[1]);
    if (bits) npuc_record_set(r, "bits", bits);
}

/* The scheme and extras a record shows for an encoded tensor. */
static void describe_encoding(npuc_tensor_record *r, const json_t *art, const npuc__ltensor *t) {
    const char *enc = t->encoding;
    r->action = encoding_action(enc);
    if (strcmp(enc, "quant") == 0 || strcmp(enc, "fake_quant") == 0) {
        npuc_quant_params p = entry_params(t->entry);
        npuc_record_set(r, "bits", p.bits);
        npuc_record_set(r, "symmetric", p.symmetric);
        if (strcmp(enc, "quant") == 0) {
            npuc_quant_scheme_name(&p, r->scheme, sizeof r->scheme);
            npuc_record_set(r, "group_size", p.gran == NPUC_GRAN_GROUP ? p.group_size : 0);
            npuc_record_set(r, "axis", (double)jint(t->entry, "axis", -1));
        } else {
            snprintf(r->scheme, sizeof r->scheme, "%s%d/fake", p.symmetric ? "int" : "uint", p.bits);
        }
    } else if (strcmp(enc, "lowrank") == 0) {
        long long rank = jint(t->entry, "rank", -1);
        if (rank >= 0) {
            snprintf(r->scheme, sizeof r->scheme, "r=%lld", rank);
            npuc_record_set(r, "rank", (double)rank);
            if (t->nested) describe_nested(r, art, t);
        } else {
            snprintf(r->scheme, sizeof r->scheme, "lowrank");
        }
    } else {
        snprintf(r->scheme, sizeof r->scheme, "%.31s", enc);
    }
}

/* The noise prediction sum (scale^2 / 12 per value) and the clipped count of
 * a "quant" entry, for the original values w: value w is clipped when
 * round_half_even(w * (1/scale)) + zp lies outside [qmin, qmax].  Leaves both
 * at 0 when the entry cannot be read (the decoder validated it already). */
static void quant_noise_clipped(npuc_ctx *ctx, npuc_model *m, const npuc__ltensor *t, const float *w,
                                double *noise, uint64_t *clipped) {
    *noise = 0;
    *clipped = 0;
    npuc_quant_params p = entry_params(t->entry);
    npuc_quant_shape qs;
    const json_t *sn = json_object_get(t->entry, "scale"), *zn = json_object_get(t->entry, "zero_point");
    size_t is, iz = 0;
    if (!json_is_string(sn) || npuc_model_find(m, json_string_value(sn), &is) != 0) return;
    if (!p.symmetric && (!json_is_string(zn) || npuc_model_find(m, json_string_value(zn), &iz) != 0)) return;
    if (npuc_quant_shape_of(ctx, &t->info, &p, &qs) != NPUC_OK) { npuc_ctx_clear(ctx); return; }
    const npuc_tensor_info *ts = npuc_model_tensor(m, is);
    if (ts->dtype != NPUC_DTYPE_F32 || ts->numel != qs.nscales || qs.nscales == 0) return;
    float *sc = malloc(sizeof(float) * (size_t)qs.nscales);
    int32_t *zp = calloc((size_t)qs.nscales, sizeof *zp);
    const void *d;
    if (!sc || !zp || npuc_model_data(ctx, m, is, &d) != NPUC_OK) goto done;
    memcpy(sc, d, sizeof(float) * (size_t)qs.nscales);
    npuc_model_release(m, is);
    if (!p.symmetric) {
        const npuc_tensor_info *tz = npuc_model_tensor(m, iz);
        if (tz->dtype != NPUC_DTYPE_U8 || tz->numel != qs.nscales || npuc_model_data(ctx, m, iz, &d) != NPUC_OK)
            goto done;
        for (uint64_t k = 0; k < qs.nscales; k++) zp[k] = ((const uint8_t *)d)[k];
        npuc_model_release(m, iz);
    }
    const int32_t qmax = p.symmetric ? (1 << (p.bits - 1)) - 1 : (1 << p.bits) - 1;
    const int32_t qmin = p.symmetric ? -qmax : 0;
    const uint64_t C = qs.channels, gpc = qs.groups_per_channel;
    const uint64_t G = p.gran == NPUC_GRAN_GROUP ? p.group_size : (qs.per_channel ? qs.per_channel : 1);
    /* The same sum, in the same order, as npuc_quantize_tensor. */
    double nz = 0;
    for (uint64_t c = 0; c < C; c++)
        for (uint64_t g = 0; g < gpc; g++) {
            uint64_t s = g * G, e = s + G < qs.per_channel ? s + G : qs.per_channel;
            double s2 = sc[c * gpc + g];
            nz += (double)(e - s) * s2 * s2 / 12.0;
        }
    uint64_t clip = 0;
    for (uint64_t o = 0; o < qs.outer; o++)
        for (uint64_t c = 0; c < C; c++)
            for (uint64_t k = 0; k < qs.inner; k++) {
                float x = w[(o * C + c) * qs.inner + k];
                if (!isfinite(x)) continue;
                uint64_t idx = c * gpc + (o * qs.inner + k) / G;
                float v = x * (1.0f / sc[idx]);
                if (v > 16777216.0f) v = 16777216.0f;
                if (v < -16777216.0f) v = -16777216.0f;
                long q = (long)nearbyintf(v) + zp[idx];
                if (q < qmin || q > qmax) clip++;
            }
    *noise = nz;
    *clipped = clip;
done:
    free(sc);
    free(zp);
}

/* Whether every group of M = 4 values along the reduction axis keeps at most
 * 2 nonzeros (2:4 structured sparsity).  Groups run over each channel's
 * sequence (docs/quantization.md), contiguously or, for convolutions in
 * OIHW/IOHW, along the input-channel axis (stride = the spatial size). */
static int is_2_4(const npuc_tensor_info *t, const float *x) {
    uint64_t outer, C, inner;
    if (t->rank < 2 || npuc_layout_view(t, &outer, &C, &inner) != NPUC_OK) return 0;
    uint64_t per = outer * inner, stride = 1;
    if ((t->layout == NPUC_LAYOUT_OIHW || t->layout == NPUC_LAYOUT_IOHW) && t->rank >= 3) {
        stride = 1;
        for (int d = 2; d < t->rank; d++) stride *= (uint64_t)t->shape[d];
    }
    for (int pass = 0; pass < (stride > 1 ? 2 : 1); pass++) {
        uint64_t st = pass == 0 ? 1 : stride;
        int ok = per % (4 * st) == 0;
        for (uint64_t c = 0; ok && c < C; c++)
            for (uint64_t base = 0; ok && base < per; base += 4 * st)
                for (uint64_t off = 0; ok && off < st; off++) {
                    int nz = 0;
                    for (uint64_t q = 0; q < 4; q++) {
                        uint64_t j = base + off + q * st, o = j / inner, k = j % inner;
                        nz += x[(o * C + c) * inner + k] != 0.0f;
                    }
                    ok = nz <= 2;
                }
        if (ok) return 1;
    }
    return 0;
}

static int same_shape(const npuc_tensor_info *a, const npuc_tensor_info *b) {
    if (a->rank != b->rank) return 0;
    for (int d = 0; d < a->rank; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return 1;
}

static void fmt_shape(const npuc_tensor_info *t, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < t->rank && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, d ? ",%lld" : "%lld", (long long)t->shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

static int is_bn(npuc_role r) {
    return r == NPUC_ROLE_BN_GAMMA || r == NPUC_ROLE_BN_BETA || r == NPUC_ROLE_BN_MEAN || r == NPUC_ROLE_BN_VAR;
}

typedef struct cmp_state {
    npuc_ctx *ctx;
    npuc__lview a, b;         /* original, compressed */
    npuc_summary *s;
    const npuc_compare_opts *o;
    npuc_scratch sa, sb, sfa, sfb;
    int bn_removed;           /* a BatchNorm of the original is gone from the other file */
} cmp_state;

static npuc_tensor_record *new_record(cmp_state *c, const npuc__ltensor *t) {
    npuc_tensor_record *r = npuc_summary_append(c->s);
    if (!r) return NULL;
    if (npuc_record_from_tensor(r, &t->info) != NPUC_OK) return NULL;
    return r;
}

/* Fills record ri (already holding the original's figures) for the pair
 * (a[i], b[j]) of tensors with the same name. */
static npuc_status compare_pair(cmp_state *c, size_t ri, size_t i, size_t j) {
    npuc_ctx *ctx = c->ctx;
    const npuc__ltensor *ta = &c->a.t[i], *tb = &c->b.t[j];
    npuc_tensor_record *r = &c->s->records[ri];
    r->bytes_before = ta->bytes;
    r->bytes_after = tb->bytes;
    r->params_after = tb->info.numel;
    if (tb->encoding) describe_encoding(r, c->b.art, tb);
    if (!same_shape(&ta->info, &tb->info)) {
        char s1[56], s2[56];
        fmt_shape(&ta->info, s1, sizeof s1);
        fmt_shape(&tb->info, s2, sizeof s2);
        r->action = NPUC_ACTION_PRUNED;
        if (!tb->encoding) snprintf(r->scheme, sizeof r->scheme, "shape");
        snprintf(r->note, sizeof r->note, "shape %s -> %s", s1, s2);
        return NPUC_OK;
    }
    /* Two dense tensors of the same dtype: identical bytes mean kept. */
    if (ta->dense && tb->dense && !ta->encoding && !tb->encoding && ta->info.dtype == tb->info.dtype) {
        const void *pa, *pb;
        npuc_status st;
        if ((st = npuc_model_data(ctx, c->a.m, ta->stored, &pa)) != NPUC_OK) return st;
        if ((st = npuc_model_data(ctx, c->b.m, tb->stored, &pb)) != NPUC_OK) {
            npuc_model_release(c->a.m, ta->stored);
            return st;
        }
        int same = memcmp(pa, pb, (size_t)ta->info.nbytes) == 0;
        npuc_model_release(c->a.m, ta->stored);
        npuc_model_release(c->b.m, tb->stored);
        if (same) return NPUC_OK; /* KEPT, as initialised */
    }
    if (!npuc__lview_readable(tb) && tb->encoding && !tb->fn) {
        const char *enc = tb->unknown ? tb->unknown : tb->encoding; /* a nested one, maybe */
        snprintf(r->note, sizeof r->note, "encoding '%.60s' cannot be decoded by npuc %s", enc, npuc_version());
        return npuc_summary_warn(c->s, "tensor '%s': encoding '%s' is unknown to npuc %s: no error figures",
                                 r->name, enc, npuc_version()) == NPUC_OK ? NPUC_OK
               : npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    if (!npuc__lview_readable(ta) || !npuc__lview_readable(tb)) {
        /* Integer tensors (counters, indices): different bytes, no error figure. */
        r->action = NPUC_ACTION_MODIFIED;
        snprintf(r->note, sizeof r->note, "non-float values differ");
        return NPUC_OK;
    }
    const uint64_t n = ta->info.numel;
    float *fa = npuc__scratch(&c->sa, n * sizeof(float)), *fb = npuc__scratch(&c->sb, n * sizeof(float));
    if (!fa || !fb) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: tensor '%s': out of memory", npuc_model_path(c->a.m), r->name);
    npuc_status st;
    if ((st = npuc__lview_read_f32(ctx, &c->a, i, fa)) != NPUC_OK) return st;
    if ((st = npuc__lview_read_f32(ctx, &c->b, j, fb)) != NPUC_OK) return st;

    /* Non-finite values stay out of the sums (npuc_error_measure wants finite
     * input); each side's count becomes a warning. */
    uint64_t bad_a = 0, bad_b = 0, zeros_a = 0, zeros_b = 0;
    for (uint64_t k = 0; k < n; k++) {
        if (!isfinite(fa[k])) bad_a++;
        else if (!isfinite(fb[k])) bad_b++;
        else {
            zeros_a += fa[k] == 0.0f;
            zeros_b += fb[k] == 0.0f;
        }
    }
    const float *ma = fa, *mb = fb;
    uint64_t mn = n;
    if (bad_a || bad_b) {
        float *ca = npuc__scratch(&c->sfa, n * sizeof(float)), *cb = npuc__scratch(&c->sfb, n * sizeof(float));
        if (!ca || !cb) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        mn = 0;
        for (uint64_t k = 0; k < n; k++)
            if (isfinite(fa[k]) && isfinite(fb[k])) { ca[mn] = fa[k]; cb[mn] = fb[k]; mn++; }
        ma = ca;
        mb = cb;
        snprintf(r->note, sizeof r->note, "%llu non-finite value%s left out of the error",
                 (unsigned long long)(bad_a + bad_b), bad_a + bad_b == 1 ? "" : "s");
        if (bad_a &&
            npuc_summary_warn(c->s, "tensor '%s': %llu NaN/Inf value%s in the original weights", r->name,
                              (unsigned long long)bad_a, bad_a == 1 ? "" : "s") != NPUC_OK)
            return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        if (bad_b &&
            npuc_summary_warn(c->s, "tensor '%s': %llu NaN/Inf value%s in the compressed file where the original is finite",
                              r->name, (unsigned long long)bad_b, bad_b == 1 ? "" : "s") != NPUC_OK)
            return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    r->has_error = 1;
    npuc_error_measure(ma, mb, mn, &r->err);
    if (tb->encoding && strcmp(tb->encoding, "quant") == 0 && tb->fn) {
        double noise;
        uint64_t clipped;
        quant_noise_clipped(ctx, c->b.m, tb, fa, &noise, &clipped);
        r->err.noise_pred = mn ? noise / (double)mn : 0;
        r->err.clipped = clipped;
    }
    if (c->o->histograms && npuc_record_measure_hist(r, fa, fb, n) != NPUC_OK)
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    if (tb->encoding) return NPUC_OK;

    /* Two dense files: name what the values show. */
    if (r->err.sum_e2 == 0 && !bad_a && !bad_b && ta->info.dtype == tb->info.dtype) {
        r->action = NPUC_ACTION_KEPT; /* the same values, stored differently */
    } else if (zeros_b > zeros_a) {
        npuc_record_set(r, "sparsity", (double)zeros_b / (double)n);
        if (is_2_4(&tb->info, fb)) {
            r->action = NPUC_ACTION_SPARSIFIED;
            snprintf(r->scheme, sizeof r->scheme, "2:4");
        } else {
            r->action = NPUC_ACTION_PRUNED;
            snprintf(r->scheme, sizeof r->scheme, "%.1f%% zeros", 100.0 * (double)zeros_b / (double)n);
        }
    } else if (ta->info.dtype != tb->info.dtype) {
        char dt[16];
        const char *s = npuc_dtype_name(tb->info.dtype);
        size_t k = 0;
        for (; s[k] && k < 15; k++) dt[k] = (char)(s[k] >= 'A' && s[k] <= 'Z' ? s[k] + 32 : s[k]);
        dt[k] = 0;
        r->action = NPUC_ACTION_QUANTIZED;
        snprintf(r->scheme, sizeof r->scheme, "%s", dt);
        npuc_record_set(r, "bits", 8.0 * (double)npuc_dtype_size(tb->info.dtype));
    } else if (c->bn_removed &&
               (ta->info.role == NPUC_ROLE_CONV || ta->info.role == NPUC_ROLE_DWCONV ||
                ta->info.role == NPUC_ROLE_LINEAR || ta->info.role == NPUC_ROLE_CONVT ||
                ta->info.role == NPUC_ROLE_BIAS)) {
        r->action = NPUC_ACTION_FOLDED;
        snprintf(r->scheme, sizeof r->scheme, "bn");
    } else {
        r->action = NPUC_ACTION_MODIFIED;
    }
    return NPUC_OK;
}

/* Records for the tensors of the compressed file from index k on that the
 * original does not have, up to the next one it does. */
static npuc_status add_created(cmp_state *c, size_t k, const unsigned char *in_orig) {
    for (; k < c->b.n && !in_orig[k]; k++) {
        const npuc__ltensor *t = &c->b.t[k];
        npuc_tensor_record *r = new_record(c, t);
        if (!r) return npuc_fail(c->ctx, NPUC_ERR_NOMEM, "out of memory");
        r->action = NPUC_ACTION_CREATED;
        r->bytes_before = r->params_before = 0;
        r->bytes_after = t->bytes;
        if (t->encoding) {
            describe_encoding(r, c->b.art, t);
            r->action = NPUC_ACTION_CREATED;
        }
        snprintf(r->note, sizeof r->note, "only in the compressed file");
    }
    return NPUC_OK;
}

npuc_status npuc_compare_models(npuc_ctx *ctx, npuc_model *orig, npuc_model *compressed,
                                const npuc_compare_opts *o, npuc_summary *out) {
    npuc_compare_opts dflt = npuc_compare_opts_defaults();
    cmp_state c;
    memset(&c, 0, sizeof c);
    c.ctx = ctx;
    c.s = out;
    c.o = o ? o : &dflt;
    unsigned char *in_orig = NULL;
    npuc_status st;
    if (npuc_summary_init(out, "compare", 0) != NPUC_OK) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    if ((st = npuc__lview_open(ctx, orig, &c.a)) != NPUC_OK) goto fail;
    if ((st = npuc__lview_open(ctx, compressed, &c.b)) != NPUC_OK) goto fail;
    in_orig = calloc(c.b.n ? c.b.n : 1, 1);
    if (!in_orig) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto fail; }
    for (size_t k = 0; k < c.b.n; k++) in_orig[k] = npuc__lview_find(&c.a, c.b.t[k].name) >= 0;
    for (size_t i = 0; i < c.a.n; i++)
        if (is_bn(c.a.t[i].info.role) && npuc__lview_find(&c.b, c.a.t[i].name) < 0) c.bn_removed = 1;

    if ((st = add_created(&c, 0, in_orig)) != NPUC_OK) goto fail;
    for (size_t i = 0; i < c.a.n; i++) {
        const npuc__ltensor *ta = &c.a.t[i];
        npuc_tensor_record *r = new_record(&c, ta);
        if (!r) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto fail; }
        size_t ri = (size_t)(r - out->records);
        r->bytes_before = ta->bytes;
        long j = npuc__lview_find(&c.b, ta->name);
        if (j < 0) {
            r->action = NPUC_ACTION_REMOVED;
            r->bytes_after = r->params_after = 0;
            snprintf(r->note, sizeof r->note, "%s",
                     is_bn(ta->info.role) ? "BatchNorm parameter gone (folded?)" : "not in the compressed file");
            continue;
        }
        if ((st = compare_pair(&c, ri, i, (size_t)j)) != NPUC_OK) goto fail;
        if ((st = add_created(&c, (size_t)j + 1, in_orig)) != NPUC_OK) goto fail;
    }
    npuc_summary_finish(out);
    goto done;
fail:
    npuc_summary_free(out);
done:
    free(in_orig);
    npuc__lview_free(&c.a);
    npuc__lview_free(&c.b);
    npuc__scratch_free(&c.sa);
    npuc__scratch_free(&c.sb);
    npuc__scratch_free(&c.sfa);
    npuc__scratch_free(&c.sfb);
    return st;
}
