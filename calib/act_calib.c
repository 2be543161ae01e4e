/*
 * act_calib.c - the accumulator of activation calibration (npuc/calib.h):
 * the passes over an activation's samples, per channel, and the range,
 * scale and zero point each method ends with.
 *
 * Why passes instead of merging as data arrives: an exact merge of
 * histograms needs one binning for every chunk, and a bin width fixed by
 * the first chunk (pytorch-quantization widens it with extra bins when a
 * later chunk reaches further) would make the result depend on the order
 * and size of the chunks.  Pass 1 finds amax over all samples, so pass 2
 * bins every value by floor(|x| * 2048 / amax) (in double, the last bin
 * closed at amax) and the merged counts are the one-pass histogram.
 * Percentiles are exact order statistics (act_select.c), also over passes.
 *
 * The range becomes codes as quant.h does (range_internal.h's
 * npuc__qparams_*): symmetric scale = hi / (2^(b-1) - 1), zero point 0;
 * asymmetric [lo, hi] widened to include 0, scale = (hi - lo) / (2^b - 1),
 * zero point = clamp(rint(-lo / scale), 0, 2^b - 1).  A scale that is 0 or
 * subnormal (an all-zero activation) becomes FLT_MIN with zero point 0.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "act_internal.h"

npuc_act_opts npuc_act_opts_defaults(void) {
    npuc_act_opts o;
    memset(&o, 0, sizeof o);
    o.range = npuc_range_opts_defaults();
    return o;
}

npuc_status npuc_act_calib_new(npuc_ctx *ctx, const char *label, uint64_t channels, const npuc_act_opts *o,
                               npuc_act_calib **out) {
    *out = NULL;
    if (!label || !o || channels == 0 || channels > (uint64_t)1 << 32)
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: activation calibration needs 1..2^32 channels",
                         label ? label : "activation");
    const npuc_range_opts *r = &o->range;
    if (r->bits < NPUC_RANGE_MIN_BITS || r->bits > NPUC_RANGE_MAX_BITS)
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: bit width %d is not in %d..%d", label, r->bits,
                         NPUC_RANGE_MIN_BITS, NPUC_RANGE_MAX_BITS);
    if ((int)r->method < 0 || r->method > NPUC_RANGE_ENTROPY)
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: unknown range method", label);
    if (r->method == NPUC_RANGE_PERCENTILE && !(r->percentile > 0.0 && r->percentile <= 100.0))
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: the percentile must be in (0, 100]", label);
    npuc_act_calib *c = calloc(1, sizeof *c);
    if (!c) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    c->label = strdup(label);
    c->o = *o;
    c->channels = channels;
    c->pass = 1;
    c->ch = calloc((size_t)channels, sizeof *c->ch);
    if (!c->label || !c->ch) goto nomem;
    const int hist = r->method == NPUC_RANGE_ENTROPY || r->method == NPUC_RANGE_MSE;
    for (uint64_t i = 0; i < channels; i++) {
        npuc__act_chan *ch = &c->ch[i];
        ch->min = INFINITY;
        ch->max = -INFINITY;
        if (hist && !(ch->hist = calloc(NPUC_ACT_BINS, sizeof *ch->hist))) goto nomem;
    }
    if (r->method == NPUC_RANGE_ENTROPY &&
        !(c->scratch = malloc(NPUC_ACT_BINS * sizeof(uint64_t) + NPUC_RANGE_ALIGN + npuc__entropy_search_scratch())))
        goto nomem;
    *out = c;
    return NPUC_OK;
nomem:
    npuc_act_calib_free(c);
    return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory for activation calibration", label);
}

void npuc_act_calib_free(npuc_act_calib *c) {
    if (!c) return;
    if (c->ch)
        for (uint64_t i = 0; i < c->channels; i++) {
            free(c->ch[i].hist);
            for (int k = 0; k < c->ch[i].nsel; k++) npuc__sel_free(&c->ch[i].sel[k]);
        }
    free(c->ch);
    free(c->scratch);
    free(c->label);
    free(c);
}

/* Pass 1: count and extremes; non-finite values are counted, not used. */
static uint64_t feed_minmax(npuc__act_chan *ch, const float *x, uint64_t n) {
    uint64_t bad = 0;
    float lo = ch->min, hi = ch->max;
    for (uint64_t i = 0; i < n; i++) {
        const float v = x[i];
        if (!isfinite(v)) {
            bad++;
            continue;
        }
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    ch->min = lo;
    ch->max = hi;
    ch->n += n;
    return bad;
}

static void feed_hist(npuc__act_chan *ch, const float *x, uint64_t n) {
    const double amax = ch->res.amax;
    ch->n += n;
    if (!(amax > 0)) {
        ch->hist[0] += n;
        return;
    }
    for (uint64_t i = 0; i < n; i++) {
        double u = (double)fabsf(x[i]) * NPUC_ACT_BINS / amax;
        int k = u < NPUC_ACT_BINS - 1 ? (int)u : NPUC_ACT_BINS - 1;
        ch->hist[k]++;
    }
}

static void feed_sel(npuc__act_chan *ch, const float *x, uint64_t n, int symmetric) {
    ch->n += n;
    for (uint64_t i = 0; i < n; i++) {
        const float v = symmetric ? fabsf(x[i]) : x[i];
        for (int k = 0; k < ch->nsel; k++) npuc__sel_feed(&ch->sel[k], v);
    }
}

npuc_status npuc_act_calib_feed(npuc_ctx *ctx, npuc_act_calib *c, const float *x, uint64_t outer,
                                uint64_t inner) {
    if (!c || c->pass == 0) return npuc_fail(ctx, NPUC_ERR_ARG, "activation calibration: no pass is open");
    if (outer && inner && (!x || outer > UINT64_MAX / inner / c->channels))
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: chunk size overflows", c->label);
    const npuc_range_method m = c->o.range.method;
    uint64_t bad = 0;
    for (uint64_t o = 0; o < outer; o++)
        for (uint64_t k = 0; k < c->channels; k++) {
            npuc__act_chan *ch = &c->ch[k];
            const float *v = x + (o * c->channels + k) * inner;
            if (c->pass == 1)
                bad += feed_minmax(ch, v, inner);
            else if (m == NPUC_RANGE_PERCENTILE)
                feed_sel(ch, v, inner, c->o.range.symmetric);
            else
                feed_hist(ch, v, inner);
        }
    if (bad)
        return npuc_fail(ctx, NPUC_ERR_VALUE, "%s: %llu NaN or Inf values in the activation samples", c->label,
                         (unsigned long long)bad);
    return NPUC_OK;
}

/* Range -> scale and zero point, as quant.h quantizes. */
static void finish_codes(npuc_act_result *r, int bits, int symmetric) {
    npuc__qparams p;
    int ok = symmetric ? npuc__qparams_sym(r->hi, bits, &p) : npuc__qparams_asym(r->lo, r->hi, bits, &p);
    r->scale = ok ? p.scale : FLT_MIN;
    r->zero_point = ok ? p.zp : 0;
}

npuc_status npuc_act_calib_end_pass(npuc_ctx *ctx, npuc_act_calib *c, int *more) {
    *more = 0;
    if (!c || c->pass == 0) return npuc_fail(ctx, NPUC_ERR_ARG, "activation calibration: no pass is open");
    const npuc_range_opts *o = &c->o.range;
    int open = 0;
    for (uint64_t k = 0; k < c->channels; k++) {
        npuc__act_chan *ch = &c->ch[k];
        npuc_act_result *r = &ch->res;
        if (c->pass == 1) {
            if (ch->n == 0) return npuc_fail(ctx, NPUC_ERR_VALUE, "%s: no activation samples", c->label);
            ch->n1 = ch->n;
            r->count = ch->n;
            r->min = ch->min;
            r->max = ch->max;
            r->amax = fmaxf(fabsf(ch->min), fabsf(ch->max));
            r->bin = -1;
            r->kl = NAN;
            r->mse = NAN;
            r->lo = o->symmetric ? -r->amax : ch->min;
            r->hi = o->symmetric ? r->amax : ch->max;
            r->threshold = r->amax;
            if (o->method == NPUC_RANGE_PERCENTILE) {
                npuc_status st = npuc__sel_setup(ctx, ch, o->percentile, o->symmetric);
                if (st != NPUC_OK) return st;
                for (int s = 0; s < ch->nsel; s++) open |= ch->sel[s].state != SEL_DONE;
            } else if (o->method != NPUC_RANGE_MINMAX) {
                open = 1;
            }
        } else {
            if (ch->n != ch->n1)
                return npuc_fail(ctx, NPUC_ERR_VALUE,
                                 "%s: pass %d saw %llu values, pass 1 saw %llu (the input changed?)", c->label,
                                 c->pass, (unsigned long long)ch->n, (unsigned long long)ch->n1);
            if (o->method == NPUC_RANGE_PERCENTILE) {
                for (int s = 0; s < ch->nsel; s++) {
                    int again;
                    npuc_status st = npuc__sel_end(ctx, &ch->sel[s], &again);
                    if (st != NPUC_OK) return st;
                    open |= again;
                }
            }
        }
        ch->n = 0;
    }
    if (open) {
        c->pass++;
        *more = 1;
        return NPUC_OK;
    }
    /* Every pass is done: the method's range. */
    for (uint64_t k = 0; k < c->channels; k++) {
        npuc__act_chan *ch = &c->ch[k];
        npuc_act_result *r = &ch->res;
        if (o->method == NPUC_RANGE_PERCENTILE) {
            npuc__sel_result(ch, o->percentile, o->symmetric);
        } else if (o->method == NPUC_RANGE_ENTROPY || o->method == NPUC_RANGE_MSE) {
            if (o->method == NPUC_RANGE_ENTROPY)
                npuc__act_entropy(ch, o->bits, c->scratch);
            else
                npuc__act_mse(ch, o->bits);
            r->histogram = ch->hist;
            const float t = r->threshold < (double)r->amax ? (float)r->threshold : r->amax;
            r->lo = o->symmetric ? -t : (r->min > -t ? r->min : -t);
            r->hi = o->symmetric ? t : (r->max < t ? r->max : t);
        }
        finish_codes(r, o->bits, o->symmetric);
    }
    c->pass = 0;
    return NPUC_OK;
}

npuc_status npuc_act_calib_result(const npuc_act_calib *c, uint64_t ch, npuc_act_result *r) {
    if (!c || c->pass != 0 || ch >= c->channels) return NPUC_ERR_ARG;
    *r = c->ch[ch].res;
    return NPUC_OK;
}
