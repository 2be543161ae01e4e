/*
 * compare.c - two weight files side by side, tensor by tensor, as an
 * npuc_summary (include/npuc/compare.h has the matching rules).
 *
 * Both files are seen through their logical views (decode_entry.h), so an
 * artifact tensor is compared after decoding and costs the bytes of all its
 * parts (those of nested entries too: a lowrank tensor whose factors were
 * quantized is one tensor, "r=16+int8/ch").  One tensor pair is in memory
 * at a time, as float32, in scratch buffers reused between tensors.
 * What a record says about an encoded tensor (action, scheme, extras, and
 * for quantized entries the noise prediction and clipped count) comes from
 * its encoding's row of the codec table (codec.h, codec_report.c).
 *
 * Exact transforms are compared by what they promise to keep, not raw
 * (compare_fn.h): a layer of a recorded BatchNorm fold against
 * conv-then-BatchNorm of the original (compare_fold.c), a factored tensor as
 * the product of its factors (decoded, or compare_factors.c when stored
 * without an entry).  Each record names its comparison in `compared`.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codecs/codec.h"
#include "codecs/decode_entry.h"
#include "passes/pass_util.h"
#include "report/compare_fn.h"
#include "calib_out_error.h"

npuc_compare_opts npuc_compare_opts_defaults(void) {
    npuc_compare_opts o;
    memset(&o, 0, sizeof o);
    o.histograms = 1;
    return o;
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
    npuc__cmp_folds folds;    /* the recorded folds usable as functions */
    int64_t *fac;             /* per original tensor: the rank of its entry-less factors, or 0 */
    unsigned char *used_b;    /* per tensor of the other file: one of those factors */
    npuc_calib *cal;          /* o->calib opened, or NULL */
} cmp_state;

/* The output error of record r (original values fa, compressed fb) over the
 * calibration file's rows for it, when it has some; a tensor without data
 * simply has none (biases, norms), any other reason is a note. */
static npuc_status out_error(cmp_state *c, npuc_tensor_record *r, const npuc_tensor_info *t, const float *fa,
                             const float *fb) {
    if (!c->cal) return NPUC_OK;
    const char *why = NULL;
    npuc_status st = npuc__out_error_measure(c->ctx, c->cal, t, fa, fb, r, &why);
    if (st == NPUC_OK && why && strcmp(why, "no calibration data") != 0) {
        const size_t l = strlen(r->note);
        snprintf(r->note + l, sizeof r->note - l, "%s%s: no output error", l ? "; " : "", why);
    }
    return st;
}

/* The action, scheme and extras a record shows for an encoded tensor of
 * view v: its encoding's row says (codec.h). */
static void describe(npuc_tensor_record *r, const npuc__lview *v, const npuc__ltensor *t) {
    npuc__codec_describe(r, t->encoding, t->entry, t->nested ? json_object_get(v->art, "tensors") : NULL);
}

static npuc_tensor_record *new_record(cmp_state *c, const npuc__ltensor *t) {
    npuc_tensor_record *r = npuc_summary_append(c->s);
    if (!r) return NULL;
    if (npuc_record_from_tensor(r, &t->info) != NPUC_OK) return NULL;
    return r;
}

/* Reads tensor i of view v as float32 into scratch sc (n values). */
static float *read_f32(cmp_state *c, npuc__lview *v, size_t i, npuc_scratch *sc, npuc_status *st) {
    const uint64_t n = v->t[i].info.numel;
    float *f = npuc__scratch(sc, (n ? n : 1) * sizeof(float));
    if (!f) {
        *st = npuc_fail(c->ctx, NPUC_ERR_NOMEM, "%s: tensor '%s': out of memory", npuc_model_path(v->m), v->t[i].name);
        return NULL;
    }
    *st = npuc__lview_read_f32(c->ctx, v, i, f);
    return *st == NPUC_OK ? f : NULL;
}

/* Record r of a layer of recorded fold k, its weight or bias: a[i] (NULL for
 * a created bias) and b[j] against conv-then-BatchNorm of the original. */
static npuc_status compare_fold(cmp_state *c, npuc_tensor_record *r, size_t k, npuc__fold_part part, const long i,
                                size_t j) {
    npuc_status st = NPUC_OK;
    const uint64_t n = c->b.t[j].info.numel;
    const float *fa = i >= 0 ? read_f32(c, &c->a, (size_t)i, &c->sa, &st) : NULL;
    const float *fb = st == NPUC_OK ? read_f32(c, &c->b, j, &c->sb, &st) : NULL;
    float *ref = npuc__scratch(&c->sfa, (n ? n : 1) * sizeof(float));
    if (st != NPUC_OK) return st;
    if (!ref) return npuc_fail(c->ctx, NPUC_ERR_NOMEM, "out of memory");
    if ((st = npuc__cmp_fold_measure(c->ctx, &c->folds, k, part, &c->a, fa, fb, n, ref, r)) != NPUC_OK) return st;
    if (c->o->histograms && npuc_record_measure_hist(r, ref, fb, n) != NPUC_OK)
        return npuc_fail(c->ctx, NPUC_ERR_NOMEM, "out of memory");
    if (!c->b.t[j].encoding) {
        if (r->action != NPUC_ACTION_CREATED) r->action = NPUC_ACTION_FOLDED;
        snprintf(r->scheme, sizeof r->scheme, "bn");
    }
    return NPUC_OK;
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
    if (tb->encoding) describe(r, &c->b, tb);
    if (!same_shape(&ta->info, &tb->info)) {
        char s1[56], s2[56];
        fmt_shape(&ta->info, s1, sizeof s1);
        fmt_shape(&tb->info, s2, sizeof s2);
        r->action = NPUC_ACTION_PRUNED;
        if (!tb->encoding) snprintf(r->scheme, sizeof r->scheme, "shape");
        snprintf(r->note, sizeof r->note, "shape %s -> %s", s1, s2);
        snprintf(r->compared, sizeof r->compared, "%s", NPUC__CMP_RAW);
        return NPUC_OK;
    }
    npuc__fold_part part;
    long fk = npuc__cmp_fold_of_orig(&c->folds, i, &part);
    if (fk >= 0 && part != NPUC__FOLD_STAT) return compare_fold(c, r, (size_t)fk, part, (long)i, j);
    snprintf(r->compared, sizeof r->compared, "%s", NPUC__CMP_RAW);
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
    if (tb->codec && tb->codec->noise && tb->fn) {
        double noise;
        uint64_t clipped;
        tb->codec->noise(ctx, c->b.m, tb->entry, &tb->info, fa, &noise, &clipped);
        r->err.noise_pred = mn ? noise / (double)mn : 0;
        r->err.clipped = clipped;
    }
    if (c->o->histograms && npuc_record_measure_hist(r, fa, fb, n) != NPUC_OK)
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    if ((st = out_error(c, r, &ta->info, fa, fb)) != NPUC_OK) return st;
    if (tb->codec == &npuc__codec_lowrank) snprintf(r->compared, sizeof r->compared, "%s", NPUC__CMP_FACTORS);
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
        if (!r->note[0]) snprintf(r->note, sizeof r->note, "compared raw: no usable npuc.bnfold record");
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
        if (c->used_b[k]) continue; /* a factor, counted with its original */
        npuc_tensor_record *r = new_record(c, t);
        if (!r) return npuc_fail(c->ctx, NPUC_ERR_NOMEM, "out of memory");
        r->action = NPUC_ACTION_CREATED;
        r->bytes_before = r->params_before = 0;
        r->bytes_after = t->bytes;
        if (t->encoding) {
            describe(r, &c->b, t);
            r->action = NPUC_ACTION_CREATED;
        }
        snprintf(r->note, sizeof r->note, "only in the compressed file");
        long fk = npuc__cmp_fold_created_bias(&c->folds, k);
        npuc_status st;
        if (fk >= 0 && npuc__lview_readable(t) &&
            (st = compare_fold(c, r, (size_t)fk, NPUC__FOLD_BIAS, -1, k)) != NPUC_OK)
            return st;
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
    if (c.o->calib && (st = npuc_calib_open(ctx, c.o->calib, &c.cal)) != NPUC_OK) goto fail;
    if ((st = npuc__lview_open(ctx, orig, &c.a)) != NPUC_OK) goto fail;
    if ((st = npuc__lview_open(ctx, compressed, &c.b)) != NPUC_OK) goto fail;
    in_orig = calloc(c.b.n ? c.b.n : 1, 1);
    c.used_b = calloc(c.b.n ? c.b.n : 1, 1);
    c.fac = calloc(c.a.n ? c.a.n : 1, sizeof *c.fac);
    if (!in_orig || !c.used_b || !c.fac) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto fail; }
    for (size_t k = 0; k < c.b.n; k++) in_orig[k] = npuc__lview_find(&c.a, c.b.t[k].name) >= 0;
    for (size_t i = 0; i < c.a.n; i++)
        if (is_bn(c.a.t[i].info.role) && npuc__lview_find(&c.b, c.a.t[i].name) < 0) c.bn_removed = 1;
    if ((st = npuc__cmp_folds_open(ctx, &c.a, &c.b, &c.folds)) != NPUC_OK) goto fail;
    if ((st = npuc__cmp_factors_find(ctx, &c.a, &c.b, c.fac, c.used_b)) != NPUC_OK) goto fail;
    if (c.folds.raw_why[0] &&
        npuc_summary_warn(out, "%s: %s: those layers are compared raw (W' against W: the fold's rescaling, not "
                               "its error); fold with this npuc's fold-bn to record the pairs",
                          npuc_model_path(compressed), c.folds.raw_why) != NPUC_OK) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        goto fail;
    }

    if ((st = add_created(&c, 0, in_orig)) != NPUC_OK) goto fail;
    for (size_t i = 0; i < c.a.n; i++) {
        const npuc__ltensor *ta = &c.a.t[i];
        npuc_tensor_record *r = new_record(&c, ta);
        if (!r) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto fail; }
        size_t ri = (size_t)(r - out->records);
        r->bytes_before = ta->bytes;
        long j = npuc__lview_find(&c.b, ta->name);
        if (j < 0) {
            npuc__fold_part part;
            long fk = npuc__cmp_fold_of_orig(&c.folds, i, &part);
            r->action = NPUC_ACTION_REMOVED;
            r->bytes_after = r->params_after = 0;
            if (c.fac[i] > 0) {
                float *fa = read_f32(&c, &c.a, i, &c.sa, &st);
                float *fb = fa ? npuc__scratch(&c.sb, ta->info.numel * sizeof(float)) : NULL;
                if (fa && !fb) st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
                if (!fb || (st = npuc__cmp_factors_measure(ctx, &c.a, &c.b, i, c.fac[i], fa, fb, r)) != NPUC_OK)
                    goto fail;
                if (c.o->histograms && npuc_record_measure_hist(r, fa, fb, ta->info.numel) != NPUC_OK) {
                    st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
                    goto fail;
                }
                if ((st = out_error(&c, r, &ta->info, fa, fb)) != NPUC_OK) goto fail;
            } else if (fk >= 0 && part == NPUC__FOLD_STAT) {
                snprintf(r->note, sizeof r->note, "folded into '%.100s'", c.folds.f[fk].conv);
                snprintf(r->compared, sizeof r->compared, "%s", NPUC__CMP_CONV_BN);
            } else {
                snprintf(r->note, sizeof r->note, "%s",
                         is_bn(ta->info.role) ? "BatchNorm parameter gone (folded?)" : "not in the compressed file");
            }
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
    free(c.used_b);
    free(c.fac);
    npuc__cmp_folds_free(&c.folds);
    npuc__lview_free(&c.a);
    npuc__lview_free(&c.b);
    npuc__scratch_free(&c.sa);
    npuc__scratch_free(&c.sb);
    npuc__scratch_free(&c.sfa);
    npuc__scratch_free(&c.sfb);
    npuc_calib_close(c.cal);
    return st;
}
