/*
 * aimet_encodings.c - AIMET quantization encodings JSON (npuc_aimet_export,
 * docs/aimet.md), the file Qualcomm's QNN/SNPE converters take beside a
 * model (--quantization_overrides), in the two versions AIMET exports today:
 *
 *   0.6.1  {"version": "0.6.1", "activation_encodings": {NAME: [ENC...]},
 *           "param_encodings": {NAME: [ENC...]}, "excluded_layers": [],
 *           "quantizer_args": {...}}
 *          ENC = {"bitwidth", "dtype": "int", "is_symmetric": "True"|"False",
 *                 "max", "min", "offset", "scale"}; one ENC per tensor, or
 *          one per channel.
 *   1.0.0  {"version": "1.0.0", "activation_encodings": [Q...],
 *           "param_encodings": [Q...], "excluded_layers": []}
 *          Q = {"name", "dtype": "INT", "enc_type": "PER_TENSOR" |
 *               "PER_CHANNEL" | "PER_BLOCK", "bw", "is_sym", "scale": [...],
 *               "offset": [...], "block_size" (PER_BLOCK)}.
 *
 * AIMET's grid: q = clamp(round(x / scale) - offset, 0, 2^bw - 1),
 * x' = (q + offset) * scale, min = offset * scale,
 * max = (2^bw - 1 + offset) * scale.  npuc's asymmetric grid is that grid with
 * offset = -zero_point.  npuc's symmetric codes -(2^(b-1)-1)..2^(b-1)-1 are
 * AIMET's symmetric grid, offset = -2^(b-1) (the unsigned code is npuc's
 * plus 2^(b-1); AIMET also has the code -2^(b-1), which npuc never
 * stores).  Scales are npuc's float32 values, printed with 17 significant
 * digits, so a reader gets the same float32 back and, computing
 * round(x * (1 / scale)) in float32 as npuc does, the same codes.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "export_internal.h"

static double enc_min(const npuc__grid *g, uint64_t k, long long *offset) {
    *offset = g->symmetric ? -((long long)1 << (g->bits - 1)) : -(long long)g->zp[k];
    return (double)*offset * (double)g->scale[k];
}

static json_t *legacy_list(const npuc__grid *g) {
    json_t *arr = json_array();
    for (uint64_t k = 0; arr && k < g->n; k++) {
        long long off;
        const double mn = enc_min(g, k, &off);
        const double mx = (double)(((long long)1 << g->bits) - 1 + off) * (double)g->scale[k];
        json_t *e = json_object();
        if (!e || json_array_append_new(arr, e) != 0) {
            json_decref(arr);
            return NULL;
        }
        json_object_set_new(e, "bitwidth", json_integer(g->bits));
        json_object_set_new(e, "dtype", json_string("int"));
        json_object_set_new(e, "is_symmetric", json_string(g->symmetric ? "True" : "False"));
        json_object_set_new(e, "max", json_real(mx));
        json_object_set_new(e, "min", json_real(mn));
        json_object_set_new(e, "offset", json_integer(off));
        json_object_set_new(e, "scale", json_real(g->scale[k]));
    }
    return arr;
}

static json_t *v1_entry(const npuc__grid *g) {
    json_t *e = json_object(), *sc = json_array(), *of = json_array();
    if (!e || !sc || !of) {
        json_decref(e);
        json_decref(sc);
        json_decref(of);
        return NULL;
    }
    json_object_set_new(e, "name", json_string(g->name));
    json_object_set_new(e, "dtype", json_string("INT"));
    json_object_set_new(e, "enc_type",
                        json_string(g->block_size ? "PER_BLOCK" : g->per_channel ? "PER_CHANNEL" : "PER_TENSOR"));
    json_object_set_new(e, "bw", json_integer(g->bits));
    json_object_set_new(e, "is_sym", json_boolean(g->symmetric));
    for (uint64_t k = 0; k < g->n; k++) {
        long long off;
        (void)enc_min(g, k, &off);
        json_array_append_new(sc, json_real(g->scale[k]));
        json_array_append_new(of, json_integer(off));
    }
    json_object_set_new(e, "scale", sc);
    json_object_set_new(e, "offset", of);
    if (g->block_size) json_object_set_new(e, "block_size", json_integer((json_int_t)g->block_size));
    return e;
}

/* The encodings of one list of grids in the chosen version. */
static json_t *section(npuc_ctx *ctx, const npuc__grids *g, int v1) {
    json_t *s = v1 ? json_array() : json_object();
    for (size_t i = 0; s && i < g->n; i++) {
        if (g->v[i].bits < 4) { /* the specification's bitwidth constraint */
            npuc__ctx_warn(ctx, "tensor '%s': %d bits is below AIMET's 4-bit minimum: no encoding written",
                           g->v[i].name, g->v[i].bits);
            continue;
        }
        json_t *e = v1 ? v1_entry(&g->v[i]) : legacy_list(&g->v[i]);
        int bad = !e || (v1 ? json_array_append_new(s, e) : json_object_set_new(s, g->v[i].name, e)) != 0;
        if (bad) {
            json_decref(s);
            return NULL;
        }
    }
    return s;
}

npuc_status npuc_aimet_export(npuc_ctx *ctx, const char *calib_path, const char *artifact_path,
                              const char *version, const char *out, int overwrite) {
    if (!version || !out) return npuc_fail(ctx, NPUC_ERR_ARG, "AIMET encodings: NULL argument");
    const int v1 = strcmp(version, "1.0.0") == 0;
    if (!v1 && strcmp(version, "0.6.1") != 0)
        return npuc_fail(ctx, NPUC_ERR_ARG, "AIMET encodings version '%s': use 0.6.1 or 1.0.0", version);
    npuc__grids acts = {0}, params = {0};
    json_t *doc = NULL;
    char *text = NULL;
    npuc_status st = NPUC_OK;
    if (calib_path && (st = npuc__calib_doc_read(ctx, calib_path, &acts)) != NPUC_OK) goto done;
    if (artifact_path && (st = npuc__artifact_grids(ctx, artifact_path, version, &params)) != NPUC_OK) goto done;
    json_t *ja = section(ctx, &acts, v1), *jp = section(ctx, &params, v1);
    doc = json_object();
    if (!doc || !ja || !jp) {
        json_decref(ja);
        json_decref(jp);
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        goto done;
    }
    json_object_set_new(doc, "version", json_string(version));
    json_object_set_new(doc, "activation_encodings", ja);
    json_object_set_new(doc, "param_encodings", jp);
    json_object_set_new(doc, "excluded_layers", json_array());
    if (!v1) {
        /* 0.6.1's description of how the encodings were made (informational). */
        int pc = 0;
        for (size_t i = 0; i < params.n; i++) pc |= params.v[i].per_channel;
        json_t *q = json_object();
        json_object_set_new(q, "activation_bitwidth", json_integer(acts.n ? acts.bits : 8));
        json_object_set_new(q, "dtype", json_string("int"));
        json_object_set_new(q, "is_symmetric",
                            json_string((params.n ? params.v[0].symmetric : acts.n ? acts.symmetric : 1) ? "True"
                                                                                                       : "False"));
        json_object_set_new(q, "param_bitwidth", json_integer(params.n ? params.v[0].bits : 8));
        json_object_set_new(q, "per_channel_quantization", json_string(pc ? "True" : "False"));
        json_object_set_new(q, "quant_scheme", json_string("post_training_tf"));
        json_object_set_new(doc, "quantizer_args", q);
    }
    text = json_dumps(doc, JSON_INDENT(4) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    if (!text) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        goto done;
    }
    size_t n = strlen(text);
    char *t2 = realloc(text, n + 2);
    if (!t2) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        goto done;
    }
    text = t2;
    text[n++] = '\n';
    st = npuc__export_write(ctx, out, overwrite, text, n);
done:
    free(text);
    json_decref(doc);
    npuc__grids_free(&acts);
    npuc__grids_free(&params);
    return st;
}
