/*
 * bnfold.c - folding BatchNorm into its producer: the arithmetic
 * (npuc_bnfold_coeffs, npuc_bnfold_scale_weights, npuc_bnfold_bias) and the
 * driver that writes the folded model (npuc_bnfold_model).  Pair finding is
 * in bnfold_pairs.c.
 *
 * The driver works in three phases, like quantize:
 *   prepare  every folded BatchNorm's statistics (and its producer's bias)
 *            are read in double, s and the new bias computed and checked:
 *            non-finite values and var + eps <= 0 fail here, before a byte is
 *            written;
 *   declare  the output: tensors in input order, BatchNorm tensors left out,
 *            a created bias right after its producer and in its Keras layer;
 *            metadata copied, a Keras model_config rewritten, "npuc.bnfold"
 *            added;
 *   stream   one tensor at a time: a producer is read into double, scaled
 *            along its output-channel axis, stored in its own dtype, and
 *            measured: per-channel ranges before and after, and a forward
 *            check (the folded layer as stored against layer-then-BatchNorm
 *            in double, on random input).  Peak memory is one producer in
 *            double plus its stored bytes.
 *
 * Only the scaling is parallel (OpenMP over output rows); it is elementwise,
 * so the result does not depend on the thread count.  The measurements are
 * summed in one fixed order.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "format_row.h"
#include "graph/graph_net.h"
#include "passes/bnfold/bnfold_internal.h"
#include "passes/pass_driver.h"
#include "passes/pass_sinks.h"
#include "passes/pass_util.h"

/* ------------------------------------------------------------ arithmetic */

npuc_status npuc_bnfold_coeffs(npuc_ctx *ctx, size_t n, const double *gamma, const double *beta,
                               const double *mean, const double *var, double eps, double *scale,
                               double *shift) {
    if (!isfinite(eps) || eps < 0) return npuc_fail(ctx, NPUC_ERR_ARG, "eps %g: must be finite and >= 0", eps);
    for (size_t c = 0; c < n; c++) {
        double g = gamma ? gamma[c] : 1.0, b = beta ? beta[c] : 0.0;
        if (!isfinite(g) || !isfinite(b) || !isfinite(mean[c]) || !isfinite(var[c]))
            return npuc_fail(ctx, NPUC_ERR_VALUE, "channel %zu: %s is not finite", c,
                             !isfinite(g) ? "gamma" : !isfinite(b) ? "beta" : !isfinite(mean[c]) ? "mean" : "variance");
        double d = var[c] + eps;
        if (!(d > 0))
            return npuc_fail(ctx, NPUC_ERR_VALUE, "channel %zu: var + eps = %g + %g <= 0", c, var[c], eps);
        scale[c] = g / sqrt(d);
        shift[c] = b - mean[c] * scale[c];
        if (!isfinite(scale[c]) || !isfinite(shift[c]))
            return npuc_fail(ctx, NPUC_ERR_VALUE, "channel %zu: the folded scale overflows", c);
    }
    return NPUC_OK;
}

void npuc_bnfold_bias(size_t n, const double *bias, const double *scale, const double *shift, double *out) {
    for (size_t c = 0; c < n; c++) out[c] = (bias ? bias[c] : 0.0) * scale[c] + shift[c];
}

/* w[o, c, k] *= scale[g * C + c] for rows o0..o1 of the [outer, C, inner] view. */
static void scale_rows(uint64_t outer, uint64_t C, uint64_t inner, int groups, const double *scale, double *w,
                       uint64_t o0, uint64_t o1) {
    uint64_t per = outer / (uint64_t)groups;
    for (uint64_t o = o0; o < o1; o++) {
        const double *s = scale + (groups > 1 ? o / per : 0) * C;
        double *row = w + o * C * inner;
        for (uint64_t c = 0; c < C; c++) {
            double sc = s[c];
            double *x = row + c * inner;
            for (uint64_t k = 0; k < inner; k++) x[k] *= sc;
        }
    }
}

static npuc_status view_of(npuc_ctx *ctx, const npuc_tensor_info *t, int groups, uint64_t *outer, uint64_t *C,
                           uint64_t *inner) {
    if (t->layout == NPUC_LAYOUT_NONE || npuc_layout_view(t, outer, C, inner) != NPUC_OK)
        return npuc_fail(ctx, NPUC_ERR_ARG, "tensor '%s': layout %s has no output-channel axis for shape rank %d",
                         t->name, npuc_layout_name(t->layout), t->rank);
    if (groups < 1 || *outer % (uint64_t)groups != 0)
        return npuc_fail(ctx, NPUC_ERR_ARG, "tensor '%s': %d groups do not divide its %llu input rows", t->name,
                         groups, (unsigned long long)*outer);
    return NPUC_OK;
}

npuc_status npuc_bnfold_scale_weights(npuc_ctx *ctx, const npuc_tensor_info *t, int groups, const double *scale,
                                      double *w) {
    uint64_t outer, C, inner;
    npuc_status st = view_of(ctx, t, groups, &outer, &C, &inner);
    if (st != NPUC_OK) return st;
    scale_rows(outer, C, inner, groups, scale, w, 0, outer);
    return NPUC_OK;
}

/* ------------------------------------------------------------ driver */

/* Everything about one pair that is computed before streaming. */
typedef struct pairdata {
    double *gamma, *beta, *mean, *var; /* gamma 1 and beta 0 when absent */
    double *scale, *shift;
    double *bias_old;                  /* 0 when the producer had none */
    double *bias_rt;                   /* the new bias as stored, read back */
    void *bias_bytes;                  /* the new bias in bias_dtype */
    npuc_dtype bias_dtype;
    double *block;
} pairdata;

typedef struct driver {
    npuc_ctx *ctx;
    npuc_model *m;
    const char *path;
    npuc_bnfold_plan *plan;
    pairdata *pd;
    int64_t *conv_pair, *bias_pair, *removed_by; /* tensor -> pair, or -1 */
} driver;

static npuc_status read_vec(driver *d, int64_t idx, double *dst, double dflt, size_t n) {
    if (idx < 0) {
        for (size_t i = 0; i < n; i++) dst[i] = dflt;
        return NPUC_OK;
    }
    const npuc_tensor_info *t = npuc_model_tensor(d->m, (size_t)idx);
    const void *p;
    npuc_status st = npuc_model_data(d->ctx, d->m, (size_t)idx, &p);
    if (st != NPUC_OK) return st;
    npuc_convert(dst, NPUC_DTYPE_F64, p, t->dtype, n);
    npuc_model_release(d->m, (size_t)idx);
    for (size_t i = 0; i < n; i++)
        if (!isfinite(dst[i]))
            return npuc_fail(d->ctx, NPUC_ERR_VALUE, "%s: tensor '%s': value %zu is %s; cannot fold", d->path, t->name,
                             i, isnan(dst[i]) ? "NaN" : "infinite");
    return NPUC_OK;
}

static npuc_status prepare_pair(driver *d, size_t k) {
    npuc_bnfold_pair *x = &d->plan->pairs[k];
    pairdata *pd = &d->pd[k];
    size_t C = (size_t)x->bn.channels;
    const npuc_tensor_info *conv = npuc_model_tensor(d->m, x->conv);
    pd->bias_dtype = x->bias >= 0 ? npuc_model_tensor(d->m, (size_t)x->bias)->dtype : conv->dtype;
    pd->block = malloc(8 * C * sizeof(double));
    pd->bias_bytes = malloc(C * npuc_dtype_size(pd->bias_dtype) + 1);
    if (!pd->block || !pd->bias_bytes) return npuc_fail(d->ctx, NPUC_ERR_NOMEM, "out of memory");
    double *b = pd->block;
    pd->gamma = b; pd->beta = b + C; pd->mean = b + 2 * C; pd->var = b + 3 * C;
    pd->scale = b + 4 * C; pd->shift = b + 5 * C; pd->bias_old = b + 6 * C; pd->bias_rt = b + 7 * C;
    npuc_status st;
    if ((st = read_vec(d, x->bn.gamma, pd->gamma, 1.0, C)) != NPUC_OK ||
        (st = read_vec(d, x->bn.beta, pd->beta, 0.0, C)) != NPUC_OK ||
        (st = read_vec(d, x->bn.mean, pd->mean, 0.0, C)) != NPUC_OK ||
        (st = read_vec(d, x->bn.var, pd->var, 1.0, C)) != NPUC_OK ||
        (st = read_vec(d, x->bias, pd->bias_old, 0.0, C)) != NPUC_OK)
        return st;
    st = npuc_bnfold_coeffs(d->ctx, C, pd->gamma, pd->beta, pd->mean, pd->var, x->eps, pd->scale, pd->shift);
    if (st != NPUC_OK) {
        char msg[NPUC_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", npuc_ctx_errmsg(d->ctx));
        return npuc_fail(d->ctx, st, "%s: BatchNorm '%s' (eps %g, %s): %s", d->path, x->bn.name, x->eps,
                         x->eps_source, msg);
    }
    npuc_bnfold_bias(C, pd->bias_old, pd->scale, pd->shift, pd->bias_rt);
    npuc_convert(pd->bias_bytes, pd->bias_dtype, pd->bias_rt, NPUC_DTYPE_F64, C);
    npuc_convert(pd->bias_rt, NPUC_DTYPE_F64, pd->bias_bytes, pd->bias_dtype, C);
    for (size_t c = 0; c < C; c++)
        if (!isfinite(pd->bias_rt[c]))
            return npuc_fail(d->ctx, NPUC_ERR_VALUE, "%s: folding BatchNorm '%s' into '%s': bias channel %zu "
                             "overflows %s", d->path, x->bn.name, conv->name, c, npuc_dtype_name(pd->bias_dtype));
    double ms = 0;
    for (size_t c = 0; c < C; c++)
        if (fabs(pd->scale[c]) > ms) ms = fabs(pd->scale[c]);
    x->stats.max_abs_scale = ms;
    return NPUC_OK;
}

/* A uniform number in [-1, 1) for element e of pair k (splitmix64), so the
 * check input is the same in both passes and on every machine. */
static double check_input(uint64_t k, uint64_t e) {
    uint64_t z = e + 0x9e3779b97f4a7c15ull * (k + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

static double spread(const double *r, size_t n) {
    double lo = INFINITY, hi = 0;
    for (size_t c = 0; c < n; c++) {
        if (r[c] > hi) hi = r[c];
        if (r[c] > 0 && r[c] < lo) lo = r[c];
    }
    return hi > 0 ? hi / lo : 1.0;
}

/* Per BatchNorm channel: r[c] = max |w| and y[c] = sum w x over the
 * channel's elements (the layer's output for one input patch). */
static void measure(const double *w, uint64_t outer, uint64_t C, uint64_t inner, int groups, size_t k, double *r,
                    double *y, size_t nch) {
    uint64_t per = outer / (uint64_t)groups;
    for (size_t c = 0; c < nch; c++) r[c] = y[c] = 0;
    for (uint64_t o = 0; o < outer; o++) {
        uint64_t base = (groups > 1 ? o / per : 0) * C;
        for (uint64_t c = 0; c < C; c++) {
            uint64_t e0 = (o * C + c) * inner;
            double rr = r[base + c], yy = y[base + c];
            for (uint64_t j = 0; j < inner; j++) {
                double v = w[e0 + j];
                if (fabs(v) > rr) rr = fabs(v);
                yy += v * check_input(k, e0 + j);
            }
            r[base + c] = rr;
            y[base + c] = yy;
        }
    }
}

typedef struct scratch_set {
    npuc_scratch w, out, r, y0, y1;
} scratch_set;

/* Folds pair k's producer: scaled weights into *bytes (the producer's dtype). */
static npuc_status fold_producer(driver *d, size_t k, scratch_set *s, const void **bytes) {
    npuc_bnfold_pair *x = &d->plan->pairs[k];
    const pairdata *pd = &d->pd[k];
    const npuc_tensor_info *t = npuc_model_tensor(d->m, x->conv);
    const size_t ne = (size_t)t->numel, C = (size_t)x->bn.channels;
    uint64_t outer, Cv, inner;
    npuc_status st = view_of(d->ctx, t, x->groups, &outer, &Cv, &inner);
    if (st != NPUC_OK) {
        char msg[NPUC_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", npuc_ctx_errmsg(d->ctx));
        return npuc_fail(d->ctx, st, "%s: %s", d->path, msg);
    }
    uint64_t wbytes;
    if (npuc_mul_overflow(t->numel, sizeof(double), &wbytes))
        return npuc_fail(d->ctx, NPUC_ERR_OVERFLOW, "%s: tensor '%s': too large", d->path, t->name);
    double *w = npuc__scratch(&s->w, wbytes);
    void *out = npuc__scratch(&s->out, t->nbytes);
    double *r = npuc__scratch(&s->r, 2 * C * sizeof(double));
    double *y0 = npuc__scratch(&s->y0, C * sizeof(double)), *y1 = npuc__scratch(&s->y1, C * sizeof(double));
    if (!w || !out || !r || !y0 || !y1)
        return npuc_fail(d->ctx, NPUC_ERR_NOMEM, "%s: tensor '%s': out of memory", d->path, t->name);
    const void *p;
    if ((st = npuc_model_data(d->ctx, d->m, x->conv, &p)) != NPUC_OK) return st;
    npuc_convert(w, NPUC_DTYPE_F64, p, t->dtype, ne);
    npuc_model_release(d->m, x->conv);
    for (size_t e = 0; e < ne; e++)
        if (!isfinite(w[e]))
            return npuc_fail(d->ctx, NPUC_ERR_VALUE, "%s: tensor '%s': value %zu is %s; cannot fold BatchNorm '%s' "
                             "into it", d->path, t->name, e, isnan(w[e]) ? "NaN" : "infinite", x->bn.name);
    measure(w, outer, Cv, inner, x->groups, k, r, y0, C);
    /* Elementwise, so any split over rows gives the same bytes. */
    int nt = npuc__threads(d->ctx);
    int64_t rows = (int64_t)outer;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1 && ne >= (1u << 16))
#endif
    for (int64_t o = 0; o < rows; o++) scale_rows(outer, Cv, inner, x->groups, pd->scale, w, (uint64_t)o, (uint64_t)o + 1);
    (void)nt;
    npuc_convert(out, t->dtype, w, NPUC_DTYPE_F64, ne);
    npuc_convert(w, NPUC_DTYPE_F64, out, t->dtype, ne);
    for (size_t e = 0; e < ne; e++)
        if (!isfinite(w[e]))
            return npuc_fail(d->ctx, NPUC_ERR_VALUE, "%s: folding BatchNorm '%s' into '%s': value %zu overflows %s "
                             "(max |scale| %g)", d->path, x->bn.name, t->name, e, npuc_dtype_name(t->dtype),
                             x->stats.max_abs_scale);
    x->stats.spread_before = spread(r, C);
    measure(w, outer, Cv, inner, x->groups, k, r + C, y1, C);
    x->stats.spread_after = spread(r + C, C);
    /* Forward check: layer-then-BatchNorm in double against the stored folded layer. */
    double num = 0, den = 0;
    for (size_t c = 0; c < C; c++) {
        double ref = pd->gamma[c] * (y0[c] + pd->bias_old[c] - pd->mean[c]) / sqrt(pd->var[c] + x->eps) + pd->beta[c];
        double got = y1[c] + pd->bias_rt[c];
        if (fabs(got - ref) > num) num = fabs(got - ref);
        if (fabs(ref) > den) den = fabs(ref);
    }
    x->stats.check_rel_err = den > 0 ? num / den : num;
    *bytes = out;
    return NPUC_OK;
}

/* ------------------------------------------------------------ metadata */

static int keras_kernel(const char *name) {
    const char *leaf = npuc__graph_leaf(name);
    return strncmp(leaf, "kernel", 6) == 0 || strncmp(leaf, "depthwise_kernel", 16) == 0 ||
           strncmp(leaf, "pointwise_kernel", 16) == 0;
}

/* The Keras layer of a producer weight: its group, else the name's parent. */
static char *layer_of(const npuc_tensor_info *t) {
    if (t->group) return npuc__strdup(t->group);
    const char *slash = strrchr(t->name, '/');
    size_t n = slash ? (size_t)(slash - t->name) : strlen(t->name);
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, t->name, n);
        s[n] = 0;
    }
    return s;
}

/* The "npuc.bnfold" entry: the folded pairs, appended to any earlier list. */
static char *bnfold_meta(const driver *d, int *err) {
    *err = 0;
    json_t *root = NULL, *pairs;
    const char *prev = npuc_model_meta_get(d->m, "npuc.bnfold");
    if (prev) {
        json_error_t e;
        root = json_loads(prev, 0, &e);
        if (!json_is_object(root) || !json_is_array(json_object_get(root, "pairs"))) {
            json_decref(root);
            root = NULL;
        }
    }
    if (!root) root = json_pack("{s:s, s:[]}", "schema", "npuc.bnfold/1", "pairs");
    if (!root) { *err = 1; return NULL; }
    pairs = json_object_get(root, "pairs");
    for (size_t k = 0; k < d->plan->npairs; k++) {
        const npuc_bnfold_pair *x = &d->plan->pairs[k];
        const npuc_tensor_info *t = npuc_model_tensor(d->m, x->conv);
        json_t *o = json_pack("{s:s, s:s, s:s, s:f, s:s, s:b}", "conv", t->name, "bn", x->bn.name, "how",
                              npuc_bnfold_how_name(x->how), "eps", x->eps, "bias", x->bias_name,
                              "bias_created", x->bias < 0);
        if (o && x->bias < 0 && keras_kernel(t->name)) {
            char *layer = layer_of(t);
            if (!layer || json_object_set_new(o, "layer", json_string(layer)) ||
                json_object_set_new(o, "use_bias", json_true()))
                *err = 1;
            free(layer);
        }
        if (o && npuc__bnfold_record_pair(o, d->m, x) != 0) *err = 1; /* bnfold_record.c */
        if (!o || json_array_append_new(pairs, o)) *err = 1;
    }
    char *s = *err ? NULL : json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    if (!s) *err = 1;
    json_decref(root);
    return s;
}

/* The model's network graph with every folded BatchNorm node removed (its
 * consumers read the producer: npuc__ng_remove_node) and each producer
 * that gets a created bias holding it, in *out (the caller's). */
static npuc_status folded_graph(driver *d, npuc__ng **out) {
    *out = NULL;
    npuc_status st = npuc_model_read_graph(d->ctx, d->m);
    if (st != NPUC_OK) return st;
    npuc__ng *g = npuc__ng_clone(npuc_model_graph(d->m));
    if (!g) return npuc_fail(d->ctx, NPUC_ERR_NOMEM, "out of memory");
    for (size_t k = 0; k < d->plan->npairs && st == NPUC_OK; k++) {
        const npuc_bnfold_pair *x = &d->plan->pairs[k];
        const int64_t bt = x->bn.mean >= 0 ? x->bn.mean : x->bn.gamma;
        const npuc_tensor_info *conv = npuc_model_tensor(d->m, x->conv);
        size_t bn = bt >= 0 ? npuc__ng_weight_node(g, npuc_model_tensor(d->m, (size_t)bt)->name) : NPUC_GRAPH_NONE;
        size_t cn = npuc__ng_weight_node(g, conv->name);
        if (bn == NPUC_GRAPH_NONE || cn == NPUC_GRAPH_NONE) {
            st = npuc_fail(d->ctx, NPUC_ERR_UNSUPPORTED, "BatchNorm '%s' or its producer is not a node of the graph",
                           x->bn.name);
            break;
        }
        if (x->bias < 0 && !npuc__ng_weight(g, cn, "bias")) {
            const int64_t c = x->bn.channels;
            st = npuc__ng_add_weight(d->ctx, g, cn, x->bias_name, "bias", 1, &c, 0, -1);
        }
        char *name = st == NPUC_OK ? npuc__strdup(g->nodes[bn].name) : NULL;
        if (st == NPUC_OK && !name) st = npuc_fail(d->ctx, NPUC_ERR_NOMEM, "out of memory");
        if (st == NPUC_OK) st = npuc__ng_remove_node(d->ctx, &g, name);
        free(name);
    }
    if (st != NPUC_OK) {
        npuc__ng_free(g);
        return st;
    }
    *out = g;
    return NPUC_OK;
}

/* The graph entry of the output's format (model_config) written from the
 * folded graph, or NULL (*why set) when the graph could not be edited or
 * written; NULL with why[0] == 0 when there is nothing to write. */
static npuc_status rewritten_graph_meta(driver *d, const npuc_writer *w, const char **key, char **out, char *why,
                                        size_t nwhy) {
    *out = NULL;
    *key = NULL;
    why[0] = 0;
    if (!w || !w->row || !w->row->graph_meta || !npuc_model_meta_get(d->m, w->row->graph_meta) || !d->plan->npairs)
        return NPUC_OK;
    npuc__ng *g = NULL;
    npuc_status st = folded_graph(d, &g);
    if (st == NPUC_OK) st = npuc__graph_write_meta(d->ctx, w, d->m, g, key, out);
    npuc__ng_free(g);
    if (st == NPUC_ERR_NOMEM) return st;
    if (st != NPUC_OK) {
        snprintf(why, nwhy, "%s", npuc_ctx_errmsg(d->ctx));
        npuc_ctx_clear(d->ctx);
    }
    return NPUC_OK;
}

/* The metadata as fold-bn carries it over (npuc__meta_fn): without the
 * layouts and an earlier "npuc.bnfold" list (written anew after the copy),
 * model_config with the folded BatchNorm layers taken out; "npuc" stays. */
typedef struct meta_copy {
    driver *d;
    npuc__drive *dr;
    npuc_summary *sum;
    char *cfg;  /* the rewritten graph entry (model_config), or NULL */
    int cfg_done;
} meta_copy;

static npuc_status copy_meta(void *u, const char *key, const char **value) {
    meta_copy *mc = u;
    if (strcmp(key, "npuc.layout") == 0 || strcmp(key, "npuc.bnfold") == 0) {
        *value = NULL;
        return NPUC_OK;
    }
    const npuc_writer *w = mc->dr->w;
    if (!w || !w->row || !w->row->graph_meta || strcmp(key, w->row->graph_meta) != 0) return NPUC_OK;
    if (!mc->cfg_done) {
        char why[600];
        const char *k;
        mc->cfg_done = 1;
        if (rewritten_graph_meta(mc->d, w, &k, &mc->cfg, why, sizeof why) != NPUC_OK)
            return npuc_fail(mc->d->ctx, NPUC_ERR_NOMEM, "out of memory");
        /* A format whose graph entry is the file's graph itself (ONNX:
         * graph_meta_key) cannot be written without the edit. */
        if (mc->d->plan->npairs && !mc->cfg && w->row->graph_meta_key &&
            strcmp(w->row->graph_meta_key, key) == 0)
            return npuc_fail(mc->d->ctx, NPUC_ERR_UNSUPPORTED, "%s: fold-bn: %s", w->path,
                             why[0] ? why : "the graph names no folded BatchNorm");
        if (mc->d->plan->npairs && !mc->cfg &&
            npuc_summary_warn(mc->sum, "%s was not rewritten (%s): it still lists the folded BatchNorm layers", key,
                              why[0] ? why : "no folded layer in it") != NPUC_OK)
            return npuc_fail(mc->d->ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    if (mc->cfg) *value = mc->cfg;
    return NPUC_OK;
}

/* Opens the output with the input's metadata (copy_meta) and the
 * "npuc.bnfold" list of this run's pairs. */
static npuc_status open_output(driver *d, npuc__drive *dr, npuc_summary *sum) {
    meta_copy mc = {d, dr, sum, NULL, 0};
    int err = 0;
    char *fold = NULL;
    npuc_status st = npuc__drive_open(dr, copy_meta, &mc);
    if (st == NPUC_OK && dr->w && d->plan->npairs) {
        if (!(fold = bnfold_meta(d, &err))) st = npuc_fail(d->ctx, NPUC_ERR_NOMEM, "out of memory");
        else st = npuc_writer_meta(dr->w, "npuc.bnfold", fold);
    }
    free(mc.cfg);
    free(fold);
    return st;
}

/* ------------------------------------------------------------ records */

static npuc_status fill_conv_record(driver *d, npuc_tensor_record *r, size_t k) {
    const npuc_bnfold_pair *x = &d->plan->pairs[k];
    if (npuc_record_from_tensor(r, npuc_model_tensor(d->m, x->conv)) != NPUC_OK)
        return npuc_fail(d->ctx, NPUC_ERR_NOMEM, "out of memory");
    r->action = NPUC_ACTION_FOLDED;
    snprintf(r->scheme, sizeof r->scheme, "bn");
    snprintf(r->note, sizeof r->note, "<- %s (%s%s)", x->bn.name, npuc_bnfold_how_name(x->how), x->guess ? ", guess" : "");
    npuc_record_set(r, "channels", (double)x->bn.channels);
    npuc_record_set(r, "eps", x->eps);
    npuc_record_set(r, "max_abs_scale", x->stats.max_abs_scale);
    npuc_record_set(r, "spread_before", x->stats.spread_before);
    npuc_record_set(r, "spread_after", x->stats.spread_after);
    npuc_record_set(r, "check_rel_err", x->stats.check_rel_err);
    npuc_record_set(r, "guess", x->guess);
    npuc_record_set(r, "bias_created", x->bias < 0);
    if (x->groups > 1) npuc_record_set(r, "groups", x->groups);
    return NPUC_OK;
}

static void fill_created_record(driver *d, npuc_tensor_record *r, size_t k, char *name) {
    const npuc_bnfold_pair *x = &d->plan->pairs[k];
    r->name = name;
    r->dtype = d->pd[k].bias_dtype;
    r->rank = 1;
    r->shape[0] = x->bn.channels;
    r->action = NPUC_ACTION_CREATED;
    snprintf(r->scheme, sizeof r->scheme, "bn");
    r->bytes_before = r->params_before = 0;
    r->params_after = (uint64_t)x->bn.channels;
    r->bytes_after = r->params_after * npuc_dtype_size(r->dtype);
    snprintf(r->note, sizeof r->note, "bias created for %s", npuc_model_tensor(d->m, x->conv)->name);
}

/* ------------------------------------------------------------ entry point */

static void driver_free(driver *d) {
    if (d->pd)
        for (size_t k = 0; k < d->plan->npairs; k++) {
            free(d->pd[k].block);
            free(d->pd[k].bias_bytes);
        }
    free(d->pd);
    free(d->conv_pair);
    free(d->bias_pair);
    free(d->removed_by);
}

npuc_status npuc__bnfold_model_to(npuc_ctx *ctx, npuc_model *m, npuc_bnfold_plan *plan, const npuc_bnfold_params *p,
                                  const npuc__sink *to, npuc_summary *sum) {
    driver d;
    memset(&d, 0, sizeof d);
    d.ctx = ctx;
    d.m = m;
    d.path = npuc_model_path(m);
    d.plan = plan;
    const size_t n = npuc_model_count(m), np = plan->npairs;
    npuc__drive dr = {0};
    scratch_set s;
    memset(&s, 0, sizeof s);
    npuc_status st = NPUC_OK;
    size_t ncreated = 0;
    for (size_t k = 0; k < np; k++) ncreated += plan->pairs[k].bias < 0;
    memset(sum, 0, sizeof *sum);
    d.pd = calloc(np ? np : 1, sizeof *d.pd);
    d.conv_pair = malloc((n ? n : 1) * sizeof *d.conv_pair);
    d.bias_pair = malloc((n ? n : 1) * sizeof *d.bias_pair);
    d.removed_by = malloc((n ? n : 1) * sizeof *d.removed_by);
    if (!d.pd || !d.conv_pair || !d.bias_pair || !d.removed_by ||
        npuc__drive_begin_blank(&dr, ctx, m, to, "fold-bn", n + ncreated, p->on_tensor, p->user, sum) != NPUC_OK)
        goto oom;
    for (size_t i = 0; i < n; i++) d.conv_pair[i] = d.bias_pair[i] = d.removed_by[i] = -1;
    for (size_t k = 0; k < np; k++) {
        const npuc_bnfold_pair *x = &plan->pairs[k];
        int64_t idx[5] = {x->bn.gamma, x->bn.beta, x->bn.mean, x->bn.var, x->bn.count};
        if (x->conv >= n || x->bn.channels <= 0) {
            st = npuc_fail(ctx, NPUC_ERR_ARG, "%s: pair %zu does not belong to this model", d.path, k);
            goto fail;
        }
        d.conv_pair[x->conv] = (int64_t)k;
        if (x->bias >= 0) d.bias_pair[x->bias] = (int64_t)k;
        for (int j = 0; j < 5; j++)
            if (idx[j] >= 0 && (size_t)idx[j] < n) d.removed_by[idx[j]] = (int64_t)k;
    }
    /* prepare */
    for (size_t k = 0; k < np; k++)
        if ((st = prepare_pair(&d, k)) != NPUC_OK) goto fail;
    /* Folding scales along the output-channel axis: its layout must not be
     * a silent guess (a warning, or NPUC_ERR_GUESS under --strict). */
    for (size_t k = 0; k < np; k++)
        if ((st = npuc__drive_guard(&dr, plan->pairs[k].conv, "BatchNorm folding")) != NPUC_OK) goto fail;
    /* declare (no output: --dry-run) */
    if ((st = open_output(&d, &dr, sum)) != NPUC_OK) goto fail;
    if (dr.w) {
        for (size_t i = 0; i < n; i++) {
            const npuc_tensor_info *t = npuc_model_tensor(m, i);
            if (d.removed_by[i] >= 0) continue;
            if ((st = npuc_writer_declare(dr.w, t)) != NPUC_OK) goto fail;
            int64_t k = d.conv_pair[i];
            if (k >= 0 && plan->pairs[k].bias < 0) {
                npuc_tensor_info b;
                memset(&b, 0, sizeof b);
                b.name = plan->pairs[k].bias_name;
                b.dtype = d.pd[k].bias_dtype;
                b.rank = 1;
                b.shape[0] = plan->pairs[k].bn.channels;
                b.role = NPUC_ROLE_BIAS;
                b.group = t->group;
                if ((st = npuc_writer_declare(dr.w, &b)) != NPUC_OK) goto fail;
            }
        }
    }
    /* stream */
    size_t ri = 0;
    for (size_t i = 0; i < n; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        npuc_tensor_record *r = &sum->records[ri];
        int64_t k = d.conv_pair[i];
        if (npuc_record_from_tensor(r, t) != NPUC_OK) goto oom;
        if (d.removed_by[i] >= 0) {
            r->action = NPUC_ACTION_REMOVED;
            r->bytes_after = r->params_after = 0;
            snprintf(r->note, sizeof r->note, "folded into %s", npuc_model_tensor(m, plan->pairs[d.removed_by[i]].conv)->name);
        } else if (k >= 0) {
            const void *bytes = NULL;
            if ((st = fold_producer(&d, (size_t)k, &s, &bytes)) != NPUC_OK) goto fail;
            if ((st = npuc__drive_write(&dr, bytes, t->nbytes)) != NPUC_OK) goto fail;
            if ((st = fill_conv_record(&d, r, (size_t)k)) != NPUC_OK) goto fail;
            plan->pairs[k].stats.record = ri;
        } else if (d.bias_pair[i] >= 0) {
            const pairdata *pd = &d.pd[d.bias_pair[i]];
            if ((st = npuc__drive_write(&dr, pd->bias_bytes, t->nbytes)) != NPUC_OK) goto fail;
            r->action = NPUC_ACTION_FOLDED;
            snprintf(r->scheme, sizeof r->scheme, "bn");
            snprintf(r->note, sizeof r->note, "bias of %s", npuc_model_tensor(m, plan->pairs[d.bias_pair[i]].conv)->name);
        } else if ((st = npuc__drive_pass_through(&dr, i)) != NPUC_OK) {
            goto fail;
        }
        npuc__drive_done(&dr, ri);
        ri++;
        if (k >= 0 && plan->pairs[k].bias < 0) {
            const npuc_bnfold_pair *x = &plan->pairs[k];
            char *name = npuc__strdup(x->bias_name);
            if (!name) goto oom;
            if ((st = npuc__drive_write(&dr, d.pd[k].bias_bytes,
                                        (uint64_t)x->bn.channels * npuc_dtype_size(d.pd[k].bias_dtype))) != NPUC_OK) {
                free(name);
                goto fail;
            }
            fill_created_record(&d, &sum->records[ri], (size_t)k, name);
            npuc__drive_done(&dr, ri);
            ri++;
        }
    }
    size_t nguess = 0, nleft = 0;
    for (size_t k = 0; k < np; k++) nguess += plan->pairs[k].guess;
    for (size_t k = 0; k < plan->nskips; k++) nleft += plan->skips[k].guess;
    if (nguess && npuc_summary_warn(sum, "%zu of %zu folded pairs are guesses from storage order or numbering, "
                                         "applied with --accept-guesses; review them with --dry-run",
                                    nguess, np) != NPUC_OK)
        goto oom;
    if (nleft && npuc_summary_warn(sum, "%zu guessed pairing%s not applied (each listed as a skip with why it was "
                                        "guessed); state pairs with --pair CONV=BN or --pairs FILE, or apply "
                                        "guesses with --accept-guesses", nleft, nleft == 1 ? "" : "s") != NPUC_OK)
        goto oom;
    if (np == 0 && npuc_summary_warn(sum, "no BatchNorm was folded (%zu found)", plan->nbn) != NPUC_OK) goto oom;
    goto done;
oom:
    st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", d.path);
fail:
done:
    st = npuc__drive_end(&dr, st);
    npuc__scratch_free(&s.w);
    npuc__scratch_free(&s.out);
    npuc__scratch_free(&s.r);
    npuc__scratch_free(&s.y0);
    npuc__scratch_free(&s.y1);
    driver_free(&d);
    return st;
}
