/*
 * layout.c - tensor layouts and roles: names, the [outer, C, inner] view, and
 * the guess a reader makes from a tensor's name and shape.
 *
 * The guess is deliberately simple and documented in docs/formats.md:
 *   - Keras names decide first, in any file format: "kernel" is HWIO (rank
 *     >= 3) or Dense IO (rank 2), "depthwise_kernel" is HWIM, "gamma",
 *     "beta", "moving_mean", "moving_variance" are BatchNorm statistics.
 *   - In a Keras file (keras != 0) unnamed weights (Keras 3 "vars/0") follow
 *     the Keras convention by rank.
 *   - Everything else follows the PyTorch/ONNX convention: rank 2 is [out,in],
 *     rank >= 3 is OIHW (ConvTranspose when the name says so).
 * Files that break the convention (Paddle MatMul weights are [in,out]) need a
 * --layout REGEX=NAME override.
 */
#include <ctype.h>
#include <string.h>

#include <jansson.h>

#include "npuc_internal.h"

static const char *const LAYOUT_NAMES[NPUC_LAYOUT_COUNT] = {
    "none", "oi", "io", "oihw", "iohw", "hwio", "hwim",
};

const char *npuc_layout_name(npuc_layout l) {
    return (unsigned)l < NPUC_LAYOUT_COUNT ? LAYOUT_NAMES[l] : "?";
}

int npuc_layout_parse(const char *s, npuc_layout *out) {
    static const struct { const char *name; npuc_layout l; } ALIASES[] = {
        {"linear", NPUC_LAYOUT_OI}, {"dense", NPUC_LAYOUT_IO}, {"matmul", NPUC_LAYOUT_IO},
        {"conv", NPUC_LAYOUT_OIHW}, {"convtranspose", NPUC_LAYOUT_IOHW},
        {"keras-conv", NPUC_LAYOUT_HWIO}, {"depthwise", NPUC_LAYOUT_HWIM},
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
    case NPUC_LAYOUT_HWIM: return rank - 2;
    default: return -1;
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
    /* The channel spans axis ax, and for HWIM also the axis after it. */
    int last = t->layout == NPUC_LAYOUT_HWIM ? ax + 1 : ax;
    uint64_t o = 1, c = 1, in = 1;
    for (int i = 0; i < t->rank; i++) {
        uint64_t d = (uint64_t)t->shape[i];
        if (i < ax) o *= d;
        else if (i <= last) c *= d;
        else in *= d;
    }
    *outer = o; *channels = c; *inner = in;
    return NPUC_OK;
}

static int ends_with(const char *s, size_t n, const char *suf) {
    size_t k = strlen(suf);
    return n >= k && memcmp(s + n - k, suf, k) == 0;
}

static int contains_ci(const char *s, const char *needle) {
    size_t k = strlen(needle);
    for (; *s; s++) {
        size_t i = 0;
        while (i < k && s[i] && tolower((unsigned char)s[i]) == needle[i]) i++;
        if (i == k) return 1;
    }
    return 0;
}

void npuc_guess_role_layout(const char *name, int rank, const int64_t *shape, int keras,
                            npuc_role *role, npuc_layout *layout) {
    size_t n = strlen(name);
    /* Keras 2 names carry ":0"; ignore it. */
    if (n >= 2 && name[n - 2] == ':' && isdigit((unsigned char)name[n - 1])) n -= 2;
    const char *leaf = name;
    for (size_t i = 0; i < n; i++)
        if (name[i] == '/') leaf = name + i + 1;
    size_t leafn = (size_t)(name + n - leaf);
#define LEAF_IS(s) (leafn == strlen(s) && memcmp(leaf, s, leafn) == 0)
    npuc_role r = NPUC_ROLE_OTHER;
    npuc_layout l = NPUC_LAYOUT_NONE;

    if (LEAF_IS("depthwise_kernel")) {
        r = NPUC_ROLE_DWCONV;
        l = rank >= 3 ? NPUC_LAYOUT_HWIM : NPUC_LAYOUT_NONE;
    } else if (LEAF_IS("kernel") || LEAF_IS("pointwise_kernel")) {
        r = rank >= 3 ? NPUC_ROLE_CONV : NPUC_ROLE_LINEAR;
        l = rank >= 3 ? NPUC_LAYOUT_HWIO : rank == 2 ? NPUC_LAYOUT_IO : NPUC_LAYOUT_NONE;
    } else if (LEAF_IS("recurrent_kernel")) {
        r = NPUC_ROLE_RNN;
        l = rank == 2 ? NPUC_LAYOUT_IO : NPUC_LAYOUT_NONE;
    } else if (LEAF_IS("embeddings")) {
        r = NPUC_ROLE_EMBEDDING;
        l = rank == 2 ? NPUC_LAYOUT_OI : NPUC_LAYOUT_NONE;
    } else if (LEAF_IS("gamma")) {
        r = NPUC_ROLE_BN_GAMMA;
    } else if (LEAF_IS("beta")) {
        r = NPUC_ROLE_BN_BETA;
    } else if (LEAF_IS("moving_mean")) {
        r = NPUC_ROLE_BN_MEAN;
    } else if (LEAF_IS("moving_variance")) {
        r = NPUC_ROLE_BN_VAR;
    } else if (keras && (LEAF_IS("bias") || rank < 2)) {
        r = rank == 1 && LEAF_IS("bias") ? NPUC_ROLE_BIAS : NPUC_ROLE_OTHER;
    } else if (keras) {
        r = rank >= 3 ? NPUC_ROLE_CONV : NPUC_ROLE_LINEAR;
        l = rank >= 3 ? NPUC_LAYOUT_HWIO : NPUC_LAYOUT_IO;
    } else {
        /* PyTorch / ONNX / Paddle conventions. */
        const char *dot = leaf;
        for (const char *p = leaf; p < name + n; p++)
            if (*p == '.') dot = p + 1;
        size_t dotn = (size_t)(name + n - dot);
        size_t stemn = dot > leaf ? (size_t)(dot - leaf - 1) : 0;
        char stem[256];
        if (stemn >= sizeof stem) stemn = sizeof stem - 1;
        memcpy(stem, leaf, stemn);
        stem[stemn] = 0;
        int paddle_bn = contains_ci(stem, "batch_norm") || contains_ci(stem, "batchnorm");
#define DOT_IS(s) (dotn == strlen(s) && memcmp(dot, s, dotn) == 0)
        if (ends_with(name, n, "running_mean")) r = NPUC_ROLE_BN_MEAN;
        else if (ends_with(name, n, "running_var")) r = NPUC_ROLE_BN_VAR;
        else if (ends_with(name, n, "num_batches_tracked")) r = NPUC_ROLE_BN_COUNT;
        else if (paddle_bn && rank == 1 && DOT_IS("w_0")) r = NPUC_ROLE_BN_GAMMA;
        else if (paddle_bn && rank == 1 && DOT_IS("b_0")) r = NPUC_ROLE_BN_BETA;
        else if (paddle_bn && rank == 1 && DOT_IS("w_1")) r = NPUC_ROLE_BN_MEAN;
        else if (paddle_bn && rank == 1 && DOT_IS("w_2")) r = NPUC_ROLE_BN_VAR;
        else if (rank == 1 && (DOT_IS("bias") || DOT_IS("b_0") || contains_ci(dot, "bias")))
            r = NPUC_ROLE_BIAS;
        else if (rank == 1 && DOT_IS("weight")) r = NPUC_ROLE_NORM;
        else if (rank >= 3) {
            if (contains_ci(name, "transpose") || contains_ci(name, "deconv")) {
                r = NPUC_ROLE_CONVT;
                l = NPUC_LAYOUT_IOHW;
            } else {
                uint64_t spatial = 1;
                for (int i = 2; i < rank; i++) spatial *= (uint64_t)shape[i];
                r = shape[1] == 1 && shape[0] > 1 && spatial > 1 ? NPUC_ROLE_DWCONV : NPUC_ROLE_CONV;
                l = NPUC_LAYOUT_OIHW;
            }
        } else if (rank == 2) {
            l = NPUC_LAYOUT_OI;
            if (contains_ci(name, "embed")) r = NPUC_ROLE_EMBEDDING;
            else if (contains_ci(name, "rnn") || contains_ci(name, "lstm") ||
                     contains_ci(name, "gru") || contains_ci(name, "weight_ih") ||
                     contains_ci(name, "weight_hh"))
                r = NPUC_ROLE_RNN;
            else r = NPUC_ROLE_LINEAR;
        }
#undef DOT_IS
    }
#undef LEAF_IS
    *role = r;
    *layout = l;
}

char *npuc__layout_meta_json(const npuc_tensor_info *t, size_t n, int keras, int *err) {
    *err = 0;
    json_t *o = json_object();
    if (!o) { *err = 1; return NULL; }
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        npuc_role r;
        npuc_layout g;
        npuc_guess_role_layout(t[i].name, t[i].rank, t[i].shape, keras, &r, &g);
        /* NONE is what a zero-initialised info says: "no opinion", not an override. */
        if (g == t[i].layout || t[i].layout == NPUC_LAYOUT_NONE) continue;
        if (json_object_set_new(o, t[i].name, json_string(npuc_layout_name(t[i].layout)))) {
            json_decref(o);
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
    return s;
}
