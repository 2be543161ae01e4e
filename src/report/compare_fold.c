/*
 * compare_fold.c - a folded layer against conv-then-BatchNorm of the
 * original (compare_fn.h).
 *
 * The folded file's "npuc.bnfold" record (docs/fold-bn.md) names, for each
 * pair, the producer weight, its bias (existing or created), the BatchNorm's
 * gamma/beta/mean/var tensors, eps, the layout and the groups.  Everything
 * else comes from the ORIGINAL file: the statistics are read there, s and the
 * shift are computed in double with the same formulas the fold promises
 * (npuc_bnfold_coeffs, bnfold.h), and the reference W * s or
 * (b - mean) * s + beta is measured against the folded values in double.  An
 * exact fold so reads the float32 rounding of its result, about 1e-7
 * relative, and a wrong one (wrong pair, eps, axis, or edited weights) reads
 * as a large error.  A record that cannot be resolved against the original
 * is never guessed around: its layers are compared raw and the report says
 * why.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/compare_fn.h"

static int is_bn_role(npuc_role r) {
    return r == NPUC_ROLE_BN_GAMMA || r == NPUC_ROLE_BN_BETA || r == NPUC_ROLE_BN_MEAN || r == NPUC_ROLE_BN_VAR;
}

/* Keeps the first reason a fold is compared raw, and counts them. */
static void unusable(npuc__cmp_folds *f, size_t *nbad, const char *conv, const char *why) {
    if ((*nbad)++ == 0) snprintf(f->raw_why, sizeof f->raw_why, "'%.60s': %.120s", conv ? conv : "?", why);
}

/* Index in v of the float tensor called name with numel elements, -1 if absent or otherwise. */
static long find_vec(const npuc__lview *v, const char *name, uint64_t numel) {
    long i = name ? npuc__lview_find(v, name) : -1;
    if (i < 0 || !npuc__lview_readable(&v->t[i]) || v->t[i].info.numel != numel) return -1;
    return i;
}

/* Resolves one recorded pair o into *x, or returns the reason it cannot be. */
static const char *resolve(npuc_ctx *ctx, npuc__lview *a, const npuc__lview *b, const json_t *o, npuc__cmp_fold *x,
                           float *tmp, double *st) {
    static const char *const KEYS[5] = {"gamma", "beta", "mean", "var", "count"};
    x->conv = json_string_value(json_object_get(o, "conv"));
    x->bn = json_string_value(json_object_get(o, "bn"));
    const char *bias = json_string_value(json_object_get(o, "bias"));
    const char *layout = json_string_value(json_object_get(o, "layout"));
    json_t *ch = json_object_get(o, "channels"), *gr = json_object_get(o, "groups"), *eps = json_object_get(o, "eps");
    if (!x->conv || !bias || !layout || !json_is_integer(ch) || !json_is_number(eps) ||
        !json_object_get(o, "mean") || !json_object_get(o, "var"))
        return "the npuc.bnfold record does not name the BatchNorm tensors and layout (written by an older npuc)";
    if (npuc_layout_parse(layout, &x->layout) != 0) return "unknown layout in the npuc.bnfold record";
    x->groups = json_is_integer(gr) ? (int)json_integer_value(gr) : 1;
    x->eps = json_number_value(eps);
    if (json_integer_value(ch) <= 0 || json_integer_value(ch) > (1 << 24) || x->groups < 1)
        return "bad channel or group count in the npuc.bnfold record";
    x->channels = (size_t)json_integer_value(ch);
    x->conv_a = npuc__lview_find(a, x->conv);
    x->conv_b = npuc__lview_find(b, x->conv);
    if (x->conv_a < 0 || x->conv_b < 0) return "the producer is missing from one of the files";
    npuc_tensor_info t = a->t[x->conv_a].info;
    const npuc_tensor_info *tb = &b->t[x->conv_b].info;
    if (!npuc__lview_readable(&a->t[x->conv_a]) || !npuc__lview_readable(&b->t[x->conv_b]) ||
        t.rank != tb->rank || t.numel != tb->numel || memcmp(t.shape, tb->shape, sizeof(int64_t) * (size_t)t.rank))
        return "the producer's shape or dtype differs between the files";
    uint64_t outer, C, inner;
    t.layout = x->layout;
    if (npuc_layout_view(&t, &outer, &C, &inner) != NPUC_OK || outer % (uint64_t)x->groups != 0 ||
        C * (uint64_t)x->groups != x->channels)
        return "the recorded layout and channel count do not fit the producer's shape";
    x->bias_b = find_vec(b, bias, x->channels);
    x->bias_a = json_is_true(json_object_get(o, "bias_created")) ? -1 : find_vec(a, bias, x->channels);
    if (x->bias_b < 0 || (x->bias_a < 0 && !json_is_true(json_object_get(o, "bias_created"))))
        return "the producer's bias is missing or has another size";
    for (int s = 0; s < 5; s++) {
        json_t *n = json_object_get(o, KEYS[s]);
        x->stats[s] = -1;
        if (!n || json_is_null(n)) continue;
        long i = json_is_string(n) ? npuc__lview_find(a, json_string_value(n)) : -1;
        if (s == 4) { x->stats[s] = i; continue; } /* num_batches_tracked: only accounted */
        if ((x->stats[s] = find_vec(a, json_string_value(n), x->channels)) < 0)
            return "a BatchNorm tensor it names is not in the original with that channel count";
    }
    if (x->stats[2] < 0 || x->stats[3] < 0) return "the BatchNorm mean or variance is not recorded";
    /* st: gamma, beta, mean, var, then scale and shift. */
    for (int s = 0; s < 4; s++) {
        if (x->stats[s] < 0) continue;
        if (npuc__lview_read_f32(ctx, a, (size_t)x->stats[s], tmp) != NPUC_OK) return "its statistics cannot be read";
        for (size_t c = 0; c < x->channels; c++) st[(size_t)s * x->channels + c] = tmp[c];
    }
    size_t n = x->channels;
    if (npuc_bnfold_coeffs(ctx, n, x->stats[0] >= 0 ? st : NULL, x->stats[1] >= 0 ? st + n : NULL, st + 2 * n,
                           st + 3 * n, x->eps, st + 4 * n, st + 5 * n) != NPUC_OK)
        return "its statistics do not give a finite scale (var + eps <= 0 or NaN)";
    x->scale = malloc(2 * n * sizeof(double));
    if (!x->scale) return NULL; /* reported as out of memory by the caller */
    x->shift = x->scale + n;
    memcpy(x->scale, st + 4 * n, 2 * n * sizeof(double));
    return "";
}

npuc_status npuc__cmp_folds_open(npuc_ctx *ctx, npuc__lview *a, const npuc__lview *b, npuc__cmp_folds *out) {
    memset(out, 0, sizeof *out);
    int bn_gone = 0;
    for (size_t i = 0; i < a->n && !bn_gone; i++)
        bn_gone = is_bn_role(a->t[i].info.role) && npuc__lview_find(b, a->t[i].name) < 0;
    const char *meta = npuc_model_meta_get(b->m, "npuc.bnfold");
    json_t *pairs = NULL;
    if (meta) {
        out->record = json_loads(meta, 0, NULL);
        pairs = json_object_get(out->record, "pairs");
    }
    if (!json_is_array(pairs)) {
        if (bn_gone || meta)
            snprintf(out->raw_why, sizeof out->raw_why, "%s", meta ? "its npuc.bnfold record is not readable"
                     : "BatchNorm tensors are gone but the file has no npuc.bnfold record");
        return NPUC_OK;
    }
    size_t np = json_array_size(pairs), nbad = 0, cmax = 1;
    for (size_t k = 0; k < np; k++) {
        json_t *c = json_object_get(json_array_get(pairs, k), "channels");
        if (json_is_integer(c) && json_integer_value(c) > 0 && json_integer_value(c) <= (1 << 24) &&
            (size_t)json_integer_value(c) > cmax)
            cmax = (size_t)json_integer_value(c);
    }
    /* A recorded channel count is only a claim: a fold that resolves has
     * as many channels as one of the original's tensors has elements, so
     * the scratch never outgrows the largest of them (a small file cannot
     * make this ask for 800 MB). */
    uint64_t numel_max = 1;
    for (size_t i = 0; i < a->n; i++)
        if (a->t[i].info.numel > numel_max) numel_max = a->t[i].info.numel;
    if (cmax > numel_max) cmax = (size_t)numel_max;
    out->f = calloc(np ? np : 1, sizeof *out->f);
    float *tmp = malloc(cmax * sizeof(float));
    double *st = malloc(6 * cmax * sizeof(double));
    npuc_status rc = NPUC_OK;
    if (!out->f || !tmp || !st) { rc = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
    for (size_t k = 0; k < np; k++) {
        npuc__cmp_fold *x = &out->f[out->n];
        memset(x, 0, sizeof *x);
        const char *why = resolve(ctx, a, b, json_array_get(pairs, k), x, tmp, st);
        if (!why) { rc = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
        if (*why) unusable(out, &nbad, x->conv, why);
        else out->n++;
    }
    if (nbad > 1) {
        size_t l = strlen(out->raw_why);
        snprintf(out->raw_why + l, sizeof out->raw_why - l, " (and %zu more)", nbad - 1);
    }
done:
    free(tmp);
    free(st);
    if (rc != NPUC_OK) npuc__cmp_folds_free(out);
    return rc;
}

void npuc__cmp_folds_free(npuc__cmp_folds *f) {
    if (!f) return;
    for (size_t k = 0; f->f && k < f->n; k++) free(f->f[k].scale);
    free(f->f);
    json_decref(f->record);
    memset(f, 0, sizeof *f);
}

long npuc__cmp_fold_of_orig(const npuc__cmp_folds *f, size_t ia, npuc__fold_part *part) {
    for (size_t k = 0; k < f->n; k++) {
        const npuc__cmp_fold *x = &f->f[k];
        *part = (long)ia == x->conv_a ? NPUC__FOLD_WEIGHT : (long)ia == x->bias_a ? NPUC__FOLD_BIAS : NPUC__FOLD_NONE;
        for (int s = 0; s < 5 && !*part; s++)
            if ((long)ia == x->stats[s]) *part = NPUC__FOLD_STAT;
        if (*part) return (long)k;
    }
    *part = NPUC__FOLD_NONE;
    return -1;
}

long npuc__cmp_fold_created_bias(const npuc__cmp_folds *f, size_t jb) {
    for (size_t k = 0; k < f->n; k++)
        if (f->f[k].bias_a < 0 && f->f[k].bias_b == (long)jb) return (long)k;
    return -1;
}

npuc_status npuc__cmp_fold_measure(npuc_ctx *ctx, const npuc__cmp_folds *f, size_t k, npuc__fold_part part,
                                   npuc__lview *a, const float *fa, const float *fb, uint64_t n, float *ref_f32,
                                   npuc_tensor_record *r) {
    const npuc__cmp_fold *x = &f->f[k];
    uint64_t bytes;
    if (npuc_mul_overflow(n ? n : 1, sizeof(double), &bytes) || bytes > SIZE_MAX)
        return npuc_fail(ctx, NPUC_ERR_OVERFLOW, "tensor '%s': too large", r->name);
    double *ref = malloc((size_t)bytes);
    if (!ref) return npuc_fail(ctx, NPUC_ERR_NOMEM, "tensor '%s': out of memory", r->name);
    npuc_status st = NPUC_OK;
    if (part == NPUC__FOLD_WEIGHT) {
        npuc_tensor_info t = a->t[x->conv_a].info;
        t.layout = x->layout;
        for (uint64_t e = 0; e < n; e++) ref[e] = fa[e];
        st = npuc_bnfold_scale_weights(ctx, &t, x->groups, x->scale, ref);
    } else if (x->bias_a >= 0) {
        float *b = malloc(x->channels * sizeof(float));
        if (!b) st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        else if ((st = npuc__lview_read_f32(ctx, a, (size_t)x->bias_a, b)) == NPUC_OK) {
            for (size_t c = 0; c < x->channels; c++) ref[c] = b[c];
            npuc_bnfold_bias(x->channels, ref, x->scale, x->shift, ref);
        }
        free(b);
    } else {
        npuc_bnfold_bias(x->channels, NULL, x->scale, x->shift, ref);
    }
    if (st != NPUC_OK) { free(ref); return st; }
    /* Sums in double, in element order; pairs with a non-finite value are left out. */
    double w2 = 0, e2 = 0, wd = 0, d2 = 0, mx = 0;
    uint64_t m = 0;
    for (uint64_t e = 0; e < n; e++) {
        ref_f32[e] = (float)ref[e];
        if (!isfinite(ref[e]) || !isfinite(fb[e])) continue;
        double d = (double)fb[e] - ref[e];
        w2 += ref[e] * ref[e];
        e2 += d * d;
        wd += ref[e] * fb[e];
        d2 += (double)fb[e] * fb[e];
        if (fabs(d) > mx) mx = fabs(d);
        m++;
    }
    free(ref);
    npuc_error_from_sums(&r->err, m, w2, e2, wd, d2, mx, 0, 0);
    r->has_error = 1;
    snprintf(r->compared, sizeof r->compared, "%s", NPUC__CMP_CONV_BN);
    if (m < n)
        snprintf(r->note, sizeof r->note, "%llu non-finite value%s left out of the error",
                 (unsigned long long)(n - m), n - m == 1 ? "" : "s");
    else
        snprintf(r->note, sizeof r->note, "%s of '%.50s' <- BatchNorm '%.40s'",
                 part == NPUC__FOLD_WEIGHT ? "weight" : x->bias_a >= 0 ? "bias" : "created bias", x->conv,
                 x->bn ? x->bn : "?");
    return NPUC_OK;
}
