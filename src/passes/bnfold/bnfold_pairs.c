/*
 * bnfold_pairs.c - finding which conv/linear layer feeds each BatchNorm of a
 * weight file (npuc_bnfold_find; include/npuc/bnfold.h lists the rules,
 * docs/fold-bn.md explains them with examples).
 *
 * A BatchNorm is a set of tensors sharing a prefix: running_mean and
 * running_var (PyTorch, with weight/bias/num_batches_tracked), w_1 and w_2
 * (Paddle, with w_0/b_0), moving_mean and moving_variance (Keras, with
 * gamma/beta).  A producer is a float weight with a channel axis (a layout
 * other than none).  Each BatchNorm then goes through the rules in order of
 * certainty, and the first rule with an answer decides: a pair, or a skip
 * with the reason.  A later, weaker rule never overrides an earlier answer,
 * and a producer claimed by two BatchNorms through names is folded into
 * neither (its output would be needed unscaled by one of them).
 *
 * This file holds the books: collecting BatchNorms and producers, the name
 * and shape helpers, recording pairs and skips, and the final pass (biases,
 * eps, --no-guess).  The rules themselves are in bnfold_rules.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/bnfold/bnfold_internal.h"

const char *npuc_bnfold_how_name(npuc_bnfold_how h) {
    static const char *const N[] = {"explicit", "topology", "name", "layer-order", "order"};
    return (unsigned)h < sizeof N / sizeof N[0] ? N[h] : "?";
}

npuc_bnfold_params npuc_bnfold_params_defaults(void) {
    npuc_bnfold_params p;
    memset(&p, 0, sizeof p);
    p.write = npuc_write_opts_defaults();
    return p;
}

void npuc_bnfold_plan_free(npuc_bnfold_plan *plan) {
    if (!plan) return;
    for (size_t i = 0; i < plan->npairs; i++) {
        free(plan->pairs[i].bias_name);
        free(plan->pairs[i].bn.name);
    }
    for (size_t i = 0; i < plan->nskips; i++) {
        free(plan->skips[i].bn);
        free(plan->skips[i].conv);
    }
    free(plan->pairs);
    free(plan->skips);
    memset(plan, 0, sizeof *plan);
}

npuc_status npuc__bnf_nomem(finder *f) {
    return npuc_fail(f->ctx, NPUC_ERR_NOMEM, "%s: out of memory", f->path);
}

const char *npuc__bnf_tname(const finder *f, size_t i) { return npuc_model_tensor(f->m, i)->name; }

/* ------------------------------------------------------------ names */

/* Length of s without a Keras ":0" suffix. */
static size_t stem_len(const char *s) {
    size_t n = strlen(s), k = n;
    while (k > 0 && s[k - 1] >= '0' && s[k - 1] <= '9') k--;
    return k > 0 && k < n && s[k - 1] == ':' ? k - 1 : n;
}

/* Position of the last '.' or '/' in the first n bytes of s, or -1. */
long npuc__bnf_last_sep(const char *s, size_t n) {
    for (size_t i = n; i-- > 0;)
        if (s[i] == '.' || s[i] == '/') return (long)i;
    return -1;
}

char *npuc__bnf_strndup(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

char *npuc__bnf_concat3(const char *a, const char *b, const char *c) {
    size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
    char *s = malloc(la + lb + lc + 1);
    if (!s) return NULL;
    memcpy(s, a, la);
    memcpy(s + la, b, lb);
    memcpy(s + la + lb, c, lc + 1);
    return s;
}

/* The prefix naming the layer or module a tensor belongs to:
 * "features.1.running_mean" -> "features.1", "bn_Conv1/gamma:0" -> "bn_Conv1".
 * A name without a separator belongs to its Keras group, if any. */
char *npuc__bnf_module_of(const npuc_tensor_info *t) {
    size_t n = stem_len(t->name);
    long s = npuc__bnf_last_sep(t->name, n);
    if (s >= 0) return npuc__bnf_strndup(t->name, (size_t)s);
    return npuc__strdup(t->group ? t->group : "");
}

int npuc__bnf_leaf_is(const char *name, const char *leaf) {
    size_t n = stem_len(name);
    long s = npuc__bnf_last_sep(name, n);
    const char *l = name + (s + 1);
    size_t ln = n - (size_t)(s + 1);
    return ln == strlen(leaf) && memcmp(l, leaf, ln) == 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* 1 if some tensor's name starts with prefix followed by sep. */
static int has_prefix1(const finder *f, const char *prefix, char sep) {
    size_t pl = strlen(prefix), lo = 0, hi = f->n;
    char *key = malloc(pl + 2);
    if (!key) return 0;
    memcpy(key, prefix, pl);
    key[pl] = sep;
    key[pl + 1] = 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(f->sorted[mid], key) < 0) lo = mid + 1;
        else hi = mid;
    }
    int r = lo < f->n && strncmp(f->sorted[lo], key, pl + 1) == 0;
    free(key);
    return r;
}

int npuc__bnf_has_prefix(const finder *f, const char *module) {
    return has_prefix1(f, module, '.') || has_prefix1(f, module, '/');
}

/* The weight tensor of a module or Keras layer ("features.0" ->
 * "features.0.weight"; "Conv1" -> "Conv1/kernel"), or -1. */
int64_t npuc__bnf_module_weight(const finder *f, const char *module) {
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
        if (npuc_model_find(f->m, buf, &idx) == 0) r = (int64_t)idx;
    }
    free(buf);
    return r;
}

/* ------------------------------------------------------------ tensors */

int npuc__bnf_is_producer(const npuc_tensor_info *t) {
    if (!npuc_dtype_is_float(t->dtype) || t->layout == NPUC_LAYOUT_NONE || t->numel == 0) return 0;
    switch (t->role) {
    case NPUC_ROLE_CONV: case NPUC_ROLE_DWCONV: case NPUC_ROLE_LINEAR: case NPUC_ROLE_CONVT:
    case NPUC_ROLE_OTHER:
        return 1;
    default:
        return 0;
    }
}

static uint64_t out_channels(const npuc_tensor_info *t) {
    uint64_t o, c, k;
    return npuc_layout_view(t, &o, &c, &k) == NPUC_OK ? c : 0;
}

/* Whether producer t can feed a BatchNorm of `channels` channels; *groups
 * is set for grouped transposed convs, whose view holds out/groups channels. */
int npuc__bnf_channels_match(const npuc_tensor_info *t, int64_t channels, int *groups) {
    uint64_t c = out_channels(t);
    *groups = 1;
    if (c == 0 || channels <= 0) return 0;
    if (c == (uint64_t)channels) return 1;
    if (t->layout == NPUC_LAYOUT_IOHW && (uint64_t)channels % c == 0) {
        uint64_t g = (uint64_t)channels / c;
        if (g <= 1u << 20 && (uint64_t)t->shape[0] % g == 0) {
            *groups = (int)g;
            return 1;
        }
    }
    return 0;
}

void npuc__bnf_describe_channels(const npuc_tensor_info *t, char *buf, size_t n) {
    snprintf(buf, n, "'%s' has %llu output channels (layout %s)", t->name,
             (unsigned long long)out_channels(t), npuc_layout_name(t->layout));
}

/* The bias belonging to producer weight name w: "X.weight" -> "X.bias",
 * "X.w_0" -> "X.b_0", "L/kernel:0" -> "L/bias:0", else "w.bias".  The name
 * is returned whether or not such a tensor exists. */
static char *bias_name_for(const char *w) {
    size_t n = stem_len(w);
    const char *suffix = w + n;
    long s = npuc__bnf_last_sep(w, n);
    const char *leaf = w + (s + 1);
    size_t ln = n - (size_t)(s + 1), pl = (size_t)(s + 1);
    char *pre = npuc__bnf_strndup(w, pl), *r = NULL;
    if (!pre) return NULL;
    if (s >= 0 && w[s] == '.' && ln == 6 && memcmp(leaf, "weight", 6) == 0) r = npuc__bnf_concat3(pre, "bias", suffix);
    else if (s >= 0 && w[s] == '.' && ln == 3 && memcmp(leaf, "w_0", 3) == 0) r = npuc__bnf_concat3(pre, "b_0", suffix);
    else if (s >= 0 && w[s] == '/' &&
             ((ln == 6 && memcmp(leaf, "kernel", 6) == 0) || (ln == 16 && memcmp(leaf, "depthwise_kernel", 16) == 0) ||
              (ln == 16 && memcmp(leaf, "pointwise_kernel", 16) == 0)))
        r = npuc__bnf_concat3(pre, "bias", suffix);
    else r = npuc__bnf_concat3(w, ".bias", "");
    free(pre);
    return r;
}

int64_t npuc__bnf_existing_bias(const finder *f, size_t conv) {
    char *b = bias_name_for(npuc__bnf_tname(f, conv));
    size_t idx;
    int64_t r = b && npuc_model_find(f->m, b, &idx) == 0 ? (int64_t)idx : -1;
    free(b);
    return r;
}

/* ------------------------------------------------------------ BatchNorms */

static npuc_status collect_bns(finder *f) {
    char *prev = NULL;
    int64_t prev_bn = -1;
    for (size_t i = 0; i < f->n; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(f->m, i);
        if (t->role < NPUC_ROLE_BN_GAMMA || t->role > NPUC_ROLE_BN_COUNT) continue;
        char *key = npuc__bnf_module_of(t);
        if (!key) { free(prev); return npuc__bnf_nomem(f); }
        int64_t b = -1;
        if (prev && strcmp(prev, key) == 0) b = prev_bn;
        for (size_t k = 0; b < 0 && k < f->nbn; k++)
            if (strcmp(f->bn[k].name, key) == 0) b = (int64_t)k;
        if (b < 0) {
            if (f->nbn == f->capbn) {
                size_t cap = f->capbn ? 2 * f->capbn : 16;
                npuc_bn_tensors *nb = realloc(f->bn, cap * sizeof *nb);
                size_t *nf = nb ? realloc(f->bn_first, cap * sizeof *nf) : NULL;
                if (nb) f->bn = nb;
                if (!nf) { free(key); free(prev); return npuc__bnf_nomem(f); }
                f->bn_first = nf;
                f->capbn = cap;
            }
            npuc_bn_tensors *nb = &f->bn[f->nbn];
            memset(nb, 0, sizeof *nb);
            nb->name = npuc__strdup(key);
            if (!nb->name) { free(key); free(prev); return npuc__bnf_nomem(f); }
            nb->gamma = nb->beta = nb->mean = nb->var = nb->count = -1;
            f->bn_first[f->nbn] = i;
            b = (int64_t)f->nbn++;
        }
        free(prev);
        prev = key;
        prev_bn = b;
        npuc_bn_tensors *x = &f->bn[b];
        int64_t *slot = t->role == NPUC_ROLE_BN_GAMMA ? &x->gamma : t->role == NPUC_ROLE_BN_BETA ? &x->beta :
                        t->role == NPUC_ROLE_BN_MEAN ? &x->mean : t->role == NPUC_ROLE_BN_VAR ? &x->var : &x->count;
        if (*slot >= 0) {
            free(prev);
            return npuc_fail(f->ctx, NPUC_ERR_FORMAT, "%s: BatchNorm '%s': two %s tensors ('%s' and '%s')",
                             f->path, x->name, npuc_role_name(t->role), npuc__bnf_tname(f, (size_t)*slot), t->name);
        }
        *slot = (int64_t)i;
        f->bn_of[i] = b;
    }
    free(prev);
    /* Keep complete BatchNorms; gamma/beta alone are a Keras LayerNormalization. */
    size_t w = 0;
    for (size_t k = 0; k < f->nbn; k++) {
        npuc_bn_tensors *x = &f->bn[k];
        int64_t idx[5] = {x->gamma, x->beta, x->mean, x->var, x->count};
        if (x->mean < 0 || x->var < 0) {
            for (int j = 0; j < 5; j++)
                if (idx[j] >= 0) f->bn_of[idx[j]] = -1;
            free(x->name);
            continue;
        }
        const npuc_tensor_info *mt = npuc_model_tensor(f->m, (size_t)x->mean);
        x->channels = mt->rank == 1 ? mt->shape[0] : -1;
        x->keras = npuc__bnf_leaf_is(mt->name, "moving_mean");
        for (int j = 0; j < 4; j++) {
            if (idx[j] < 0) continue;
            const npuc_tensor_info *t = npuc_model_tensor(f->m, (size_t)idx[j]);
            if (t->rank != 1 || t->shape[0] != x->channels || t->numel == 0)
                return npuc_fail(f->ctx, NPUC_ERR_FORMAT,
                                 "%s: BatchNorm '%s': tensor '%s' has shape %s[%lld], but '%s' is [%lld]: "
                                 "mismatched channel counts", f->path, x->name, t->name,
                                 t->rank == 1 ? "" : "rank != 1, ", t->rank >= 1 ? (long long)t->shape[0] : 0LL,
                                 mt->name, (long long)mt->shape[0]);
            if (!npuc_dtype_is_float(t->dtype))
                return npuc_fail(f->ctx, NPUC_ERR_UNSUPPORTED, "%s: BatchNorm '%s': tensor '%s' is %s, not a float",
                                 f->path, x->name, t->name, npuc_dtype_name(t->dtype));
        }
        for (int j = 0; j < 5; j++)
            if (idx[j] >= 0) f->bn_of[idx[j]] = (int64_t)w;
        f->bn_first[w] = f->bn_first[k];
        f->bn[w++] = *x;
    }
    f->nbn = w;
    return NPUC_OK;
}

/* The BatchNorm named by a module / layer name (exactly, or as the last
 * component of a nested Keras name), or -1. */
int64_t npuc__bnf_find_bn_layer(const finder *f, const char *layer) {
    for (size_t k = 0; k < f->nbn; k++)
        if (strcmp(f->bn[k].name, layer) == 0) return (int64_t)k;
    size_t ll = strlen(layer);
    for (size_t k = 0; k < f->nbn; k++) {
        size_t nl = strlen(f->bn[k].name);
        if (nl > ll && f->bn[k].name[nl - ll - 1] == '/' && strcmp(f->bn[k].name + nl - ll, layer) == 0)
            return (int64_t)k;
    }
    return -1;
}

/* ------------------------------------------------------------ plan building */

npuc_status npuc__bnf_add_skip(finder *f, const char *bn, const char *conv, const char *fmt, ...) {
    npuc_bnfold_plan *p = f->plan;
    if (p->nskips == f->capskips) {
        size_t cap = f->capskips ? 2 * f->capskips : 16;
        npuc_bnfold_skip *s = realloc(p->skips, cap * sizeof *s);
        if (!s) return npuc__bnf_nomem(f);
        p->skips = s;
        f->capskips = cap;
    }
    npuc_bnfold_skip *s = &p->skips[p->nskips];
    memset(s, 0, sizeof *s);
    s->bn = bn ? npuc__strdup(bn) : NULL;
    s->conv = conv ? npuc__strdup(conv) : NULL;
    if ((bn && !s->bn) || (conv && !s->conv)) {
        free(s->bn);
        free(s->conv);
        return npuc__bnf_nomem(f);
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->why, sizeof s->why, fmt, ap);
    va_end(ap);
    p->nskips++;
    return NPUC_OK;
}

npuc_status npuc__bnf_skip_bn(finder *f, size_t b, const char *conv, const char *why) {
    f->bn_state[b] = SKIPPED;
    return npuc__bnf_add_skip(f, f->bn[b].name, conv, "%s", why);
}

npuc_status npuc__bnf_add_pair(finder *f, size_t conv, size_t b, int groups, npuc_bnfold_how how, int guess,
                            const char *why) {
    npuc_bnfold_plan *p = f->plan;
    if (p->npairs == f->cappairs) {
        size_t cap = f->cappairs ? 2 * f->cappairs : 16;
        npuc_bnfold_pair *np = realloc(p->pairs, cap * sizeof *np);
        if (!np) return npuc__bnf_nomem(f);
        p->pairs = np;
        unsigned char *d = realloc(f->dead, cap);
        if (!d) return npuc__bnf_nomem(f);
        f->dead = d;
        f->cappairs = cap;
    }
    npuc_bnfold_pair *x = &p->pairs[p->npairs];
    memset(x, 0, sizeof *x);
    x->conv = conv;
    x->bias = -1;
    x->bn = f->bn[b];
    x->bn.name = npuc__strdup(f->bn[b].name);
    if (!x->bn.name) return npuc__bnf_nomem(f);
    x->how = how;
    x->guess = guess;
    x->groups = groups;
    snprintf(x->why, sizeof x->why, "%s", why);
    f->dead[p->npairs] = 0;
    f->claim[conv] = (int64_t)p->npairs;
    f->bn_state[b] = (int64_t)p->npairs;
    p->npairs++;
    return NPUC_OK;
}

/* Pairs producer `conv` with BatchNorm b unless another BatchNorm already
 * claimed it through an automatic rule: then neither is folded. */
npuc_status npuc__bnf_propose(finder *f, size_t conv, size_t b, npuc_bnfold_how how, int guess,
                           const char *why) {
    const npuc_tensor_info *t = npuc_model_tensor(f->m, conv);
    char buf[200];
    int groups;
    if (!npuc__bnf_channels_match(t, f->bn[b].channels, &groups)) {
        npuc__bnf_describe_channels(t, buf, sizeof buf);
        f->bn_state[b] = SKIPPED;
        return npuc__bnf_add_skip(f, f->bn[b].name, t->name, "shape mismatch: %s, the BatchNorm %lld%s", buf,
                        (long long)f->bn[b].channels,
                        t->layout == NPUC_LAYOUT_OI || t->layout == NPUC_LAYOUT_IO ? " (a --layout override may be needed)" : "");
    }
    int64_t c = f->claim[conv];
    if (c == CONTESTED) {
        f->bn_state[b] = SKIPPED;
        return npuc__bnf_add_skip(f, f->bn[b].name, t->name, "producer '%s' would feed several BatchNorms", t->name);
    }
    if (c >= 0) {
        npuc_bnfold_pair *other = &f->plan->pairs[c];
        f->dead[c] = 1;
        f->claim[conv] = CONTESTED;
        f->bn_state[b] = SKIPPED;
        npuc_status st = npuc__bnf_add_skip(f, other->bn.name, t->name, "producer '%s' would feed two BatchNorms ('%s' and '%s')",
                                  t->name, other->bn.name, f->bn[b].name);
        if (st != NPUC_OK) return st;
        return npuc__bnf_add_skip(f, f->bn[b].name, t->name, "producer '%s' would feed two BatchNorms ('%s' and '%s')",
                        t->name, other->bn.name, f->bn[b].name);
    }
    return npuc__bnf_add_pair(f, conv, b, groups, how, guess, why);
}

/* ------------------------------------------------------------ finishing */

static npuc_status finish_pairs(finder *f, const npuc_bnfold_params *p) {
    npuc_bnfold_plan *plan = f->plan;
    /* Drop pairs lost to conflicts and, with no_guess, the guesses. */
    size_t w = 0;
    for (size_t k = 0; k < plan->npairs; k++) {
        npuc_bnfold_pair *x = &plan->pairs[k];
        if (!f->dead[k] && p->no_guess && x->guess) {
            npuc_status st = npuc__bnf_add_skip(f, x->bn.name, npuc__bnf_tname(f, x->conv), "a guess (%s), skipped with --no-guess", x->why);
            if (st != NPUC_OK) return st;
            f->dead[k] = 1;
        }
        if (f->dead[k]) {
            free(x->bn.name);
            continue;
        }
        plan->pairs[w++] = *x;
    }
    plan->npairs = w;
    for (size_t k = 0; k < plan->npairs; k++) {
        npuc_bnfold_pair *x = &plan->pairs[k];
        const npuc_tensor_info *t = npuc_model_tensor(f->m, x->conv);
        x->bias_name = bias_name_for(t->name);
        if (!x->bias_name) return npuc__bnf_nomem(f);
        size_t idx;
        if (npuc_model_find(f->m, x->bias_name, &idx) == 0) {
            const npuc_tensor_info *bt = npuc_model_tensor(f->m, idx);
            if (f->bn_of[idx] >= 0 || bt->rank != 1 || bt->shape[0] != x->bn.channels || !npuc_dtype_is_float(bt->dtype))
                return npuc_fail(f->ctx, NPUC_ERR_FORMAT,
                                 "%s: tensor '%s': bias of '%s' should be a float vector of %lld values to fold "
                                 "BatchNorm '%s' (mismatched channel counts)", f->path, bt->name, t->name,
                                 (long long)x->bn.channels, x->bn.name);
            x->bias = (int64_t)idx;
        }
        int64_t b = npuc__bnf_find_bn_layer(f, x->bn.name);
        double cfg = b >= 0 ? f->bn_eps[b] : NAN;
        if (p->eps > 0) {
            x->eps = p->eps;
            snprintf(x->eps_source, sizeof x->eps_source, "--eps");
        } else if (isfinite(cfg) && cfg > 0) {
            x->eps = cfg;
            snprintf(x->eps_source, sizeof x->eps_source, "model_config");
        } else if (x->bn.keras) {
            x->eps = NPUC_BNFOLD_EPS_KERAS;
            snprintf(x->eps_source, sizeof x->eps_source, "keras default");
        } else {
            x->eps = NPUC_BNFOLD_EPS_TORCH;
            snprintf(x->eps_source, sizeof x->eps_source, "default");
        }
    }
    /* Created biases must not collide with one another (two producers with
     * the same fallback name cannot happen: names are unique). */
    for (size_t i = 0; i < plan->npairs; i++) {
        for (size_t j = 0; j < i; j++)
            if (plan->pairs[i].bias < 0 && plan->pairs[j].bias == plan->pairs[i].bias &&
                strcmp(plan->pairs[i].bias_name, plan->pairs[j].bias_name) == 0)
                return npuc_fail(f->ctx, NPUC_ERR_FORMAT, "%s: two folded layers would create the bias '%s'",
                                 f->path, plan->pairs[i].bias_name);
    }
    /* In the producers' storage order. */
    for (size_t i = 1; i < plan->npairs; i++) {
        npuc_bnfold_pair x = plan->pairs[i];
        size_t j = i;
        for (; j > 0 && plan->pairs[j - 1].conv > x.conv; j--) plan->pairs[j] = plan->pairs[j - 1];
        plan->pairs[j] = x;
    }
    return NPUC_OK;
}

/* ------------------------------------------------------------ entry point */

static void finder_free(finder *f) {
    if (f->bn)
        for (size_t k = 0; k < f->nbn; k++) free(f->bn[k].name);
    free(f->bn);
    free(f->bn_first);
    free(f->bn_of);
    free(f->bn_state);
    free(f->claim);
    free(f->dead);
    free(f->bn_eps);
    free(f->sorted);
    npuc__bnf_topo_free(&f->topo);
}

npuc_status npuc_bnfold_find(npuc_ctx *ctx, npuc_model *m, const npuc_bnfold_params *p,
                             npuc_bnfold_plan *plan) {
    finder f;
    memset(&f, 0, sizeof f);
    memset(plan, 0, sizeof *plan);
    f.ctx = ctx;
    f.m = m;
    f.path = npuc_model_path(m);
    f.n = npuc_model_count(m);
    f.plan = plan;
    npuc_status st = NPUC_OK;
    if (!(p->eps >= 0) || isinf(p->eps)) {
        return npuc_fail(ctx, NPUC_ERR_ARG, "--eps %g: must be a positive number", p->eps);
    }
    if (npuc_model_meta_get(m, "npuc")) {
        return npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: an npuc artifact (compressed weights); decompress it "
                         "before folding BatchNorm", f.path);
    }
    size_t n1 = f.n ? f.n : 1;
    f.bn_of = malloc(n1 * sizeof *f.bn_of);
    f.claim = malloc(n1 * sizeof *f.claim);
    f.sorted = malloc(n1 * sizeof *f.sorted);
    if (!f.bn_of || !f.claim || !f.sorted) { st = npuc__bnf_nomem(&f); goto fail; }
    for (size_t i = 0; i < f.n; i++) {
        f.bn_of[i] = -1;
        f.claim[i] = -1;
        f.sorted[i] = npuc__bnf_tname(&f, i);
    }
    qsort(f.sorted, f.n, sizeof *f.sorted, cmp_str);
    if ((st = collect_bns(&f)) != NPUC_OK) goto fail;
    plan->nbn = f.nbn;
    f.bn_state = malloc((f.nbn ? f.nbn : 1) * sizeof *f.bn_state);
    f.bn_eps = malloc((f.nbn ? f.nbn : 1) * sizeof *f.bn_eps);
    if (!f.bn_state || !f.bn_eps) { st = npuc__bnf_nomem(&f); goto fail; }
    for (size_t k = 0; k < f.nbn; k++) {
        f.bn_state[k] = UNDECIDED;
        f.bn_eps[k] = NAN;
    }
    if ((st = npuc__bnf_topo_read(npuc_model_meta_get(m, "model_config"), &f.topo)) != NPUC_OK) {
        st = npuc__bnf_nomem(&f);
        goto fail;
    }
    int alpha = f.alphabetical = npuc__bnf_is_alphabetical(&f);
    if (p->npairs || p->pairs_file) {
        /* Epsilons from model_config still apply to stated pairs. */
        for (size_t e = 0; e < f.topo.n; e++) {
            int64_t b = npuc__bnf_find_bn_layer(&f, f.topo.e[e].bn);
            if (b >= 0 && isfinite(f.topo.e[e].eps)) f.bn_eps[b] = f.topo.e[e].eps;
        }
        if ((st = npuc__bnf_rule_explicit(&f, p)) != NPUC_OK) goto fail;
        snprintf(plan->order_note, sizeof plan->order_note, "pairs stated explicitly");
    } else {
        if (f.topo.understood && (st = npuc__bnf_rule_topology(&f)) != NPUC_OK) goto fail;
        for (size_t b = 0; b < f.nbn && st == NPUC_OK; b++)
            if (f.bn_state[b] == UNDECIDED) st = npuc__bnf_rule_names(&f, b);
        if (st != NPUC_OK) goto fail;
        if ((st = npuc__bnf_rule_keras_order(&f)) != NPUC_OK) goto fail;
        size_t *rest = malloc((f.nbn ? f.nbn : 1) * sizeof *rest), nrest = 0;
        if (!rest) { st = npuc__bnf_nomem(&f); goto fail; }
        for (size_t b = 0; b < f.nbn; b++)
            if (f.bn_state[b] == UNDECIDED) rest[nrest++] = b;
        if (alpha && nrest) st = npuc__bnf_rule_aligned(&f, rest, nrest);
        else
            for (size_t k = 0; k < nrest && st == NPUC_OK; k++) st = npuc__bnf_rule_nearest(&f, rest[k]);
        free(rest);
        if (st != NPUC_OK) goto fail;
        snprintf(plan->order_note, sizeof plan->order_note, "%s%s",
                 f.topo.understood ? "model_config topology; " : "",
                 alpha ? "storage order is alphabetical: numbers in names stand in for graph order"
                       : "storage order taken as graph order");
    }
    if ((st = finish_pairs(&f, p)) != NPUC_OK) goto fail;
    finder_free(&f);
    return NPUC_OK;
fail:
    finder_free(&f);
    npuc_bnfold_plan_free(plan);
    return st;
}
