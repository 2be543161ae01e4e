/*
 * codec_report.c - what reports say about each encoding (codec.h): the
 * scheme and extras of a record for an encoded tensor ("int8/ch", "r=16"),
 * the short scheme of an entry nested in another ("r=16+int8/ch"), and for
 * "quant" the two figures only the scales can give, the uniform-noise
 * prediction and the count of clipped values, computed exactly as the
 * quantizer defines them (docs/quantization.md), so `npuc report` and
 * `npuc quantize` agree.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codecs/codec.h"
#include "codecs/entry_fields.h"

static long long jint(const json_t *e, const char *key, long long dflt) {
    const json_t *v = json_object_get(e, key);
    return json_is_integer(v) ? json_integer_value(v) : dflt;
}

static void fake_scheme_name(const npuc_quant_params *p, char *buf, size_t n) {
    snprintf(buf, n, "%s%d/fake", p->symmetric ? "int" : "uint", p->bits);
}

void npuc__quant_scheme_ch(const npuc_quant_params *p, uint64_t channels, char *buf, size_t n) {
    npuc_quant_scheme_name(p, buf, n);
    const size_t l = strlen(buf);
    if (p->gran == NPUC_GRAN_CHANNEL && channels && l < n)
        snprintf(buf + l, n - l, "%llu", (unsigned long long)channels);
}

/* The channel count an entry's "view" [outer, C, inner] records, or 0. */
static uint64_t entry_channels(const json_t *e) {
    const json_t *c = json_array_get(json_object_get(e, "view"), 1);
    return json_is_integer(c) && json_integer_value(c) > 0 ? (uint64_t)json_integer_value(c) : 0;
}

/* ------------------------------------------------------------ records */

/* The parameters of a quant or fake_quant entry, and the extras both show
 * first: "bits", "symmetric". */
static npuc_quant_params quant_extras(npuc_tensor_record *r, const json_t *e) {
    npuc_quant_params p = npuc__quant_entry_params(e);
    npuc_record_set(r, "bits", p.bits);
    npuc_record_set(r, "symmetric", p.symmetric);
    return p;
}

void npuc__codec_describe_quant(npuc_tensor_record *r, const json_t *e, const json_t *tensors) {
    (void)tensors;
    npuc_quant_params p = quant_extras(r, e);
    npuc__quant_scheme_ch(&p, entry_channels(e), r->scheme, sizeof r->scheme);
    npuc_record_set(r, "group_size", p.gran == NPUC_GRAN_GROUP ? p.group_size : 0);
    npuc_record_set(r, "axis", (double)jint(e, "axis", -1));
}

void npuc__codec_describe_fake_quant(npuc_tensor_record *r, const json_t *e, const json_t *tensors) {
    (void)tensors;
    npuc_quant_params p = quant_extras(r, e);
    fake_scheme_name(&p, r->scheme, sizeof r->scheme);
}

/* The entry describing part of entry name when it is nested, else NULL. */
static const json_t *nested_entry(const json_t *tensors, const char *name, const char *part) {
    if (!part || strcmp(part, name) == 0) return NULL;
    const json_t *e = json_object_get(tensors, part);
    return json_is_string(json_object_get(e, "encoding")) ? e : NULL;
}

/* A lowrank entry whose factors were encoded afterwards (nested entries)
 * shows both: "r=16+int8/ch", or "r=16+int8/ch,int4/g32" when the factors
 * differ, "-" for a factor stored as is; "bits" is the widest factor's. */
static void describe_nested(npuc_tensor_record *r, const json_t *entry, const json_t *tensors) {
    const json_t *parts = json_object_get(entry, "parts");
    char s[2][32];
    int bits = 0;
    for (size_t p = 0; p < 2; p++) {
        const json_t *e = nested_entry(tensors, r->name, json_string_value(json_array_get(parts, p)));
        int b = 0;
        snprintf(s[p], sizeof s[p], "-");
        if (e) npuc__codec_nested_scheme(e, s[p], sizeof s[p], &b);
        if (b > bits) bits = b;
    }
    const size_t l = strlen(r->scheme);
    if (strcmp(s[0], s[1]) == 0) snprintf(r->scheme + l, sizeof r->scheme - l, "+%s", s[0]);
    else snprintf(r->scheme + l, sizeof r->scheme - l, "+%s,%s", s[0], s[1]);
    if (bits) npuc_record_set(r, "bits", bits);
}

void npuc__codec_describe_lowrank(npuc_tensor_record *r, const json_t *e, const json_t *tensors) {
    long long rank = jint(e, "rank", -1);
    if (rank < 0) {
        snprintf(r->scheme, sizeof r->scheme, "%s", npuc__codec_lowrank.name);
        return;
    }
    snprintf(r->scheme, sizeof r->scheme, "r=%lld", rank);
    npuc_record_set(r, "rank", (double)rank);
    if (tensors) describe_nested(r, e, tensors);
}

void npuc__codec_describe(npuc_tensor_record *r, const char *encoding, const json_t *entry, const json_t *tensors) {
    const npuc__codec *c = npuc__codec_find(encoding);
    /* Unknown encodings are MODIFIED: npuc knows the values changed but not how. */
    r->action = c ? c->action : NPUC_ACTION_MODIFIED;
    if (c && c->describe) c->describe(r, entry, tensors);
    else snprintf(r->scheme, sizeof r->scheme, "%.31s", encoding);
}

/* ------------------------------------------------------ nested schemes */

void npuc__codec_scheme_quant(const json_t *e, char *buf, size_t n, int *bits) {
    npuc_quant_params p = npuc__quant_entry_params(e);
    npuc__quant_scheme_ch(&p, entry_channels(e), buf, n);
    *bits = p.bits;
}

void npuc__codec_scheme_fake_quant(const json_t *e, char *buf, size_t n, int *bits) {
    npuc_quant_params p = npuc__quant_entry_params(e);
    fake_scheme_name(&p, buf, n);
    *bits = p.bits;
}

/* "int8/ch+2:4" with a "quant" object, else "2:4". */
void npuc__codec_scheme_nm_sparse(const json_t *e, char *buf, size_t n, int *bits) {
    const json_t *q = json_object_get(e, "quant");
    *bits = 0;
    if (json_is_object(q)) npuc__codec_scheme_quant(q, buf, n, bits);
    const size_t l = *bits ? strlen(buf) : 0;
    snprintf(buf + l, n - l, "%s%lld:%lld", *bits ? "+" : "", jint(e, "n", 0), jint(e, "m", 0));
}

void npuc__codec_nested_scheme(const json_t *e, char *buf, size_t n, int *bits) {
    const npuc__codec *c = npuc__codec_of(e);
    *bits = 0;
    if (c && c->nested_scheme) c->nested_scheme(e, buf, n, bits);
    else snprintf(buf, n, "%.20s", json_string_value(json_object_get(e, "encoding")));
}

/* ---------------------------------------------- quantization figures */

/* The noise prediction sum and the clipped count of a "quant" entry, for the
 * original values w: value w is clipped when round_half_even(w * (1/scale))
 * + zp lies outside [qmin, qmax].  Leaves both at 0 when the entry cannot be
 * read (the decoder validated it already). */
void npuc__codec_noise_quant(npuc_ctx *ctx, npuc_model *m, const json_t *entry, const npuc_tensor_info *orig,
                             const float *w, double *noise, uint64_t *clipped) {
    *noise = 0;
    *clipped = 0;
    npuc_quant_params p = npuc__quant_entry_params(entry);
    npuc_quant_shape qs;
    const json_t *sn = json_object_get(entry, "scale"), *zn = json_object_get(entry, "zero_point");
    size_t is, iz = 0;
    if (!json_is_string(sn) || npuc_model_find(m, json_string_value(sn), &is) != 0) return;
    if (!p.symmetric && (!json_is_string(zn) || npuc_model_find(m, json_string_value(zn), &iz) != 0)) return;
    if (npuc_quant_shape_of(ctx, orig, &p, &qs) != NPUC_OK) { npuc_ctx_clear(ctx); return; }
    const npuc_tensor_info *ts = npuc_model_tensor(m, is);
    if (!npuc__scale_dtype_ok(ts->dtype) || ts->numel != qs.nscales || qs.nscales == 0) return;
    float *sc = malloc(sizeof(float) * (size_t)qs.nscales);
    int32_t *zp = calloc((size_t)qs.nscales, sizeof *zp);
    const void *d;
    if (!sc || !zp || npuc_model_data(ctx, m, is, &d) != NPUC_OK) goto done;
    npuc_convert(sc, NPUC_DTYPE_F32, d, ts->dtype, (size_t)qs.nscales); /* F16/BF16: --scale-dtype */
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
