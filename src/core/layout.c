/*
 * layout.c - tensor layouts and roles: names, parsing, the output axis and
 * the [outer, C, inner] view every pass works on, and the "npuc.layout"
 * metadata a writer records.  Which layout a tensor has is decided from
 * evidence in layout_rules.c (layout_rules.h).
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "layout_rules.h"

static const char *const LAYOUT_NAMES[NPUC_LAYOUT_COUNT] = {
    "none", "oi", "io", "oihw", "iohw", "hwio", "hwim", "doi",
};

const char *npuc_layout_name(npuc_layout l) {
    return (unsigned)l < NPUC_LAYOUT_COUNT ? LAYOUT_NAMES[l] : "?";
}

int npuc_layout_parse(const char *s, npuc_layout *out) {
    static const struct { const char *name; npuc_layout l; } ALIASES[] = {
        {"linear", NPUC_LAYOUT_OI}, {"dense", NPUC_LAYOUT_IO}, {"matmul", NPUC_LAYOUT_IO},
        {"conv", NPUC_LAYOUT_OIHW}, {"convtranspose", NPUC_LAYOUT_IOHW},
        {"keras-conv", NPUC_LAYOUT_HWIO}, {"depthwise", NPUC_LAYOUT_HWIM},
        {"onnx-rnn", NPUC_LAYOUT_DOI},
    };
    char low[32];
    size_t n = strlen(s);
    if (n == 0 || n >= sizeof low) return -1;
    for (size_t i = 0; i <= n; i++) low[i] = (char)tolower((unsigned char)s[i]);
    for (int i = 0; i < NPUC_LAYOUT_COUNT; i++)
        if (strcmp(low, LAYOUT_NAMES[i]) == 0) { *out = (npuc_layout)i; return 0; }
    for (size_t i = 0; i < sizeof ALIASES / sizeof ALIASES[0]; i++)
        if (strcmp(low, ALIASES[i].name) == 0) { *out = ALIASES[i].l; return 0; }
    return -1;
}

int npuc_layout_min_rank(npuc_layout l) {
    switch (l) {
    case NPUC_LAYOUT_OI: case NPUC_LAYOUT_IO: return 2;
    case NPUC_LAYOUT_OIHW: case NPUC_LAYOUT_IOHW: case NPUC_LAYOUT_HWIO: case NPUC_LAYOUT_HWIM:
    case NPUC_LAYOUT_DOI:
        return 3;
    default: return 0;
    }
}

int npuc_layout_out_axis(npuc_layout l, int rank) {
    if (l == NPUC_LAYOUT_NONE || (unsigned)l >= NPUC_LAYOUT_COUNT) return -1;
    if (rank < npuc_layout_min_rank(l) || ((l == NPUC_LAYOUT_OI || l == NPUC_LAYOUT_IO) && rank != 2))
        return -1;
    switch (l) {
    case NPUC_LAYOUT_OI: case NPUC_LAYOUT_OIHW: return 0;
    case NPUC_LAYOUT_IOHW: return 1;
    case NPUC_LAYOUT_IO: case NPUC_LAYOUT_HWIO: return rank - 1;
    case NPUC_LAYOUT_HWIM: case NPUC_LAYOUT_DOI: return rank - 2;
    default: return -1;
    }
}

npuc_layout npuc__layout_other_family(npuc_layout l) {
    switch (l) {
    case NPUC_LAYOUT_OI: return NPUC_LAYOUT_IO;
    case NPUC_LAYOUT_IO: return NPUC_LAYOUT_OI;
    case NPUC_LAYOUT_OIHW:
    case NPUC_LAYOUT_IOHW: return NPUC_LAYOUT_HWIO;
    case NPUC_LAYOUT_HWIO:
    case NPUC_LAYOUT_HWIM: return NPUC_LAYOUT_OIHW;
    default: return NPUC_LAYOUT_NONE;
    }
}

const char *npuc_confidence_name(npuc_confidence c) {
    static const char *const N[NPUC_CONF_COUNT] = {"certain", "convention", "guess"};
    return (unsigned)c < NPUC_CONF_COUNT ? N[c] : "?";
}

static const char *const ROLE_NAMES[NPUC_ROLE_COUNT] = {
    "other", "conv", "dwconv", "linear", "embedding", "rnn", "bias", "bn_gamma",
    "bn_beta", "bn_mean", "bn_var", "bn_count", "norm", "convt",
};

const char *npuc_role_name(npuc_role r) {
    return (unsigned)r < NPUC_ROLE_COUNT ? ROLE_NAMES[r] : "?";
}

npuc_status npuc_layout_view(const npuc_tensor_info *t, uint64_t *outer, uint64_t *channels,
                             uint64_t *inner) {
    int ax = npuc_layout_out_axis(t->layout, t->rank);
    if (t->layout == NPUC_LAYOUT_NONE) {
        *outer = 1; *channels = 1; *inner = t->numel;
        return NPUC_OK;
    }
    if (ax < 0) return NPUC_ERR_ARG;
    /* The channel spans axis ax, for HWIM also the axis after it, and for DOI
     * every axis before it (one [out, in] matrix per direction). */
    int first = t->layout == NPUC_LAYOUT_DOI ? 0 : ax;
    int last = t->layout == NPUC_LAYOUT_HWIM ? ax + 1 : ax;
    uint64_t o = 1, c = 1, in = 1;
    for (int i = 0; i < t->rank; i++) {
        uint64_t d = (uint64_t)t->shape[i];
        if (i < first) o *= d;
        else if (i <= last) c *= d;
        else in *= d;
    }
    *outer = o; *channels = c; *inner = in;
    return NPUC_OK;
}

char *npuc__layout_meta_json(const npuc_tensor_info *t, size_t n, const npuc__layout_src *src, int *err) {
    *err = 0;
    npuc__layout_decision *d = calloc(n ? n : 1, sizeof *d);
    json_t *o = d ? json_object() : NULL;
    if (!o) { free(d); *err = 1; return NULL; }
    for (size_t i = 0; i < n; i++) npuc__layout_decide(src, &t[i], &d[i]);
    npuc__layout_refine(src, t, n, d); /* as a reader of the file will */
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        /* NONE is what a zero-initialised info says: "no opinion", not an override. */
        if (d[i].layout == t[i].layout || t[i].layout == NPUC_LAYOUT_NONE) continue;
        if (json_object_set_new(o, t[i].name, json_string(npuc_layout_name(t[i].layout)))) {
            json_decref(o);
            free(d);
            *err = 1;
            return NULL;
        }
        count++;
    }
    char *s = NULL;
    if (count) {
        s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!s) *err = 1;
    }
    json_decref(o);
    free(d);
    return s;
}
