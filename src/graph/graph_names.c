/*
 * graph_names.c - what tensor and layer names tell: which module or layer a
 * tensor belongs to, which tensor is a module's weight or bias, and the
 * naming conventions that pair a BatchNorm with its producer (PyTorch conv1 /
 * bn1 and X.conv / X.bn, Keras X / X_BN and bn_X, Keras' automatic
 * numbering conv2d_7 / batch_normalization_7).  Digit runs compare as
 * numbers where names stand in for graph order.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "layout_rules.h"

/* Length of s without a Keras ":0" suffix. */
static size_t stem_len(const char *s) {
    size_t n = strlen(s), k = n;
    while (k > 0 && s[k - 1] >= '0' && s[k - 1] <= '9') k--;
    return k > 0 && k < n && s[k - 1] == ':' ? k - 1 : n;
}

long npuc__graph_last_sep(const char *s, size_t n) {
    for (size_t i = n; i-- > 0;)
        if (s[i] == '.' || s[i] == '/') return (long)i;
    return -1;
}

char *npuc__graph_strndup(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

char *npuc__graph_concat3(const char *a, const char *b, const char *c) {
    size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
    char *s = malloc(la + lb + lc + 1);
    if (!s) return NULL;
    memcpy(s, a, la);
    memcpy(s + la, b, lb);
    memcpy(s + la + lb, c, lc + 1);
    return s;
}

char *npuc__graph_module_of(const npuc_tensor_info *t) {
    size_t n = stem_len(t->name);
    long s = npuc__graph_last_sep(t->name, n);
    if (s >= 0) return npuc__graph_strndup(t->name, (size_t)s);
    return npuc__strdup(t->group ? t->group : "");
}

int npuc__graph_leaf_is(const char *name, const char *leaf) {
    size_t n = stem_len(name);
    long s = npuc__graph_last_sep(name, n);
    const char *l = name + (s + 1);
    size_t ln = n - (size_t)(s + 1);
    return ln == strlen(leaf) && memcmp(l, leaf, ln) == 0;
}

int npuc__graph_names_layer(const char *name, const char *layer) {
    size_t n = strlen(name), ll = strlen(layer);
    if (n >= 5 && strcmp(name + n - 5, "/vars") == 0) n -= 5;
    return n >= ll && memcmp(name + n - ll, layer, ll) == 0 && (n == ll || name[n - ll - 1] == '/');
}

const char *npuc__graph_leaf(const char *s) {
    const char *l = s;
    for (const char *p = s; *p; p++)
        if (*p == '/') l = p + 1;
    return l;
}

int npuc__graph_is_keras_leaf(const char *name) {
    static const char *const LEAVES[] = {"kernel", "depthwise_kernel", "gamma", "beta", "moving_mean",
                                         "moving_variance", "recurrent_kernel", "pointwise_kernel", NULL};
    const char *leaf = strrchr(name, '/');
    leaf = leaf ? leaf + 1 : name;
    size_t n = strlen(leaf);
    if (n >= 2 && leaf[n - 2] == ':' && isdigit((unsigned char)leaf[n - 1])) n -= 2;
    for (int k = 0; LEAVES[k]; k++)
        if (strlen(LEAVES[k]) == n && memcmp(LEAVES[k], leaf, n) == 0) return 1;
    return 0;
}

int npuc__graph_natcmp(const char *a, const char *b) {
    const char *pa = a, *pb = b;
    while (*pa && *pb) {
        if (*pa >= '0' && *pa <= '9' && *pb >= '0' && *pb <= '9') {
            while (*pa == '0' && pa[1] >= '0' && pa[1] <= '9') pa++;
            while (*pb == '0' && pb[1] >= '0' && pb[1] <= '9') pb++;
            size_t la = 0, lb = 0;
            while (pa[la] >= '0' && pa[la] <= '9') la++;
            while (pb[lb] >= '0' && pb[lb] <= '9') lb++;
            if (la != lb) return la < lb ? -1 : 1;
            int c = memcmp(pa, pb, la);
            if (c) return c < 0 ? -1 : 1;
            pa += la;
            pb += lb;
            continue;
        }
        if (*pa != *pb) return (unsigned char)*pa < (unsigned char)*pb ? -1 : 1;
        pa++;
        pb++;
    }
    if (*pa || *pb) return *pa ? 1 : -1;
    int c = strcmp(a, b);
    return c < 0 ? -1 : c > 0;
}

int npuc__graph_all_digits(const char *s) {
    if (!*s) return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return 0;
    return 1;
}

/* ------------------------------------------------------------ modules by name */

/* 1 if some tensor's name starts with prefix followed by sep. */
static int has_prefix1(const npuc__graph *g, const char *prefix, char sep) {
    size_t pl = strlen(prefix), lo = 0, hi = g->n;
    char *key = malloc(pl + 2);
    if (!key) return 0;
    memcpy(key, prefix, pl);
    key[pl] = sep;
    key[pl + 1] = 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(g->sorted[mid], key) < 0) lo = mid + 1;
        else hi = mid;
    }
    int r = lo < g->n && strncmp(g->sorted[lo], key, pl + 1) == 0;
    free(key);
    return r;
}

int npuc__graph_has_prefix(const npuc__graph *g, const char *module) {
    return has_prefix1(g, module, '.') || has_prefix1(g, module, '/');
}

int64_t npuc__graph_module_weight(const npuc__graph *g, const char *module) {
    static const char *const SUFFIXES[] = {
        ".weight", ".w_0", "/kernel", "/kernel:0", "/pointwise_kernel", "/pointwise_kernel:0",
        "/depthwise_kernel", "/depthwise_kernel:0",
    };
    size_t ml = strlen(module);
    char *buf = malloc(ml + 24);
    if (!buf) return -1;
    int64_t r = -1;
    for (size_t k = 0; k < sizeof SUFFIXES / sizeof SUFFIXES[0] && r < 0; k++) {
        size_t idx;
        memcpy(buf, module, ml);
        strcpy(buf + ml, SUFFIXES[k]);
        if (npuc_model_find(g->m, buf, &idx) == 0) r = (int64_t)idx;
    }
    free(buf);
    return r;
}

char *npuc__graph_bias_name(const char *w) {
    size_t n = stem_len(w);
    const char *suffix = w + n;
    long s = npuc__graph_last_sep(w, n);
    const char *leaf = w + (s + 1);
    size_t ln = n - (size_t)(s + 1), pl = (size_t)(s + 1);
    char *pre = npuc__graph_strndup(w, pl), *r = NULL;
    if (!pre) return NULL;
    if (s >= 0 && w[s] == '.' && ln == 6 && memcmp(leaf, "weight", 6) == 0) r = npuc__graph_concat3(pre, "bias", suffix);
    else if (s >= 0 && w[s] == '.' && ln == 3 && memcmp(leaf, "w_0", 3) == 0) r = npuc__graph_concat3(pre, "b_0", suffix);
    else if (s >= 0 && w[s] == '/' &&
             ((ln == 6 && memcmp(leaf, "kernel", 6) == 0) || (ln == 16 && memcmp(leaf, "depthwise_kernel", 16) == 0) ||
              (ln == 16 && memcmp(leaf, "pointwise_kernel", 16) == 0)))
        r = npuc__graph_concat3(pre, "bias", suffix);
    else r = npuc__graph_concat3(w, ".bias", "");
    free(pre);
    return r;
}

/* ------------------------------------------------------------ BatchNorm naming */

char *npuc__graph_conv_for_bn_leaf(const char *leaf) {
    static const char *const WORDS[] = {"batch_norm", "batchnorm", "BatchNorm", "bn", "norm"};
    for (size_t w = 0; w < sizeof WORDS / sizeof WORDS[0]; w++) {
        const char *at = strstr(leaf, WORDS[w]);
        if (!at) continue;
        char *pre = npuc__graph_strndup(leaf, (size_t)(at - leaf));
        char *r = pre ? npuc__graph_concat3(pre, "conv", at + strlen(WORDS[w])) : NULL;
        free(pre);
        return r;
    }
    return NULL;
}

char *npuc__graph_keras_producer_name(const char *leaf) {
    static const char *const SUFFIXES[] = {"_BN", "_bn", "_batchnorm", "_BatchNorm", "_batch_norm"};
    size_t n = strlen(leaf);
    for (size_t k = 0; k < sizeof SUFFIXES / sizeof SUFFIXES[0]; k++) {
        size_t sl = strlen(SUFFIXES[k]);
        if (n > sl && strcmp(leaf + n - sl, SUFFIXES[k]) == 0) return npuc__graph_strndup(leaf, n - sl);
    }
    if (n > 3 && (strncmp(leaf, "bn_", 3) == 0 || strncmp(leaf, "BN_", 3) == 0)) return npuc__strdup(leaf + 3);
    return NULL;
}

/* A global counter says nothing about the module that feeds it. */
int npuc__graph_counter_name(const char *leaf) {
    static const char *const P[] = {"batch_norm_", "batch_normalization_", "batchnorm_", "bn_"};
    if (strcmp(leaf, "batch_normalization") == 0) return 1;
    for (size_t k = 0; k < sizeof P / sizeof P[0]; k++) {
        size_t pl = strlen(P[k]);
        if (strncmp(leaf, P[k], pl) == 0 && npuc__graph_all_digits(leaf + pl)) return 1;
    }
    return 0;
}

/* Keras' automatic layer names: a family and an optional "_N" counter. */
static const char *const KERAS_FAMILIES[] = {"conv2d", "depthwise_conv2d", "separable_conv2d", "conv1d",
                                             "conv3d", "dense"};

const char *npuc__graph_keras_family(size_t k) {
    return k < sizeof KERAS_FAMILIES / sizeof KERAS_FAMILIES[0] ? KERAS_FAMILIES[k] : NULL;
}

/* The unnumbered first layers (conv2d / batch_normalization) agree too. */
int npuc__graph_same_counter(const char *bn_leaf, const char *layer_leaf) {
    if (strncmp(bn_leaf, "batch_normalization", 19) != 0) return 0;
    const char *num = bn_leaf + 19;
    if (*num && (num[0] != '_' || !npuc__graph_all_digits(num + 1))) return 0;
    for (size_t k = 0; k < sizeof KERAS_FAMILIES / sizeof KERAS_FAMILIES[0]; k++) {
        size_t fl = strlen(KERAS_FAMILIES[k]);
        if (strncmp(layer_leaf, KERAS_FAMILIES[k], fl) == 0 && strcmp(layer_leaf + fl, num) == 0) return 1;
    }
    return 0;
}

int npuc__graph_is_keras3_var(const char *name) { return npuc__keras3_var(name, strlen(name)) != 0; }
