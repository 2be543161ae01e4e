/*
 * act_select.c - exact percentiles of activation samples that arrive in
 * chunks and are read several times (npuc_act_calib, percentile method).
 *
 * The percentile is NumPy's default ("linear", Hyndman & Fan type 7), as
 * range_percentile.c defines it for weights: with n values sorted,
 * h = (n - 1) p / 100, k = floor(h), value = v[k] + (h - k)(v[k+1] - v[k]) in
 * double, rounded once to float.  Symmetric ranges take it of |x|;
 * asymmetric ones take the min(P, 100-P)-th and max(P, 100-P)-th of x.
 *
 * Each needed order statistic v[r] is one target.  A target starts with
 * [a, b] = [min, max] of its values (pass 1) and each later pass counts the
 * values below a and bins those in [a, b] into 256 bins by
 * floor((v - a) * 256 / (b - a)) in double, keeping each bin's extremes.
 * The binning is monotone, so the bin that holds rank r - below holds
 * exactly the values in [its min, its max]: that becomes [a, b].  When the
 * bin's min equals its max the value is found; when it holds at most
 * NPUC_SEL_KEEP values the next pass keeps them and sorts them.  Memory is
 * bounded (about 4 KiB + 16 KiB per target) whatever the sample count, and
 * each narrowing shrinks [a, b] about 256-fold, so a few passes suffice;
 * a run of equal values (zeros of a ReLU) ends the search at once.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "act_internal.h"

static int sel_init(npuc__sel *s, uint64_t rank, float a, float b) {
    memset(s, 0, sizeof *s);
    s->rank = rank;
    s->a = a;
    s->b = b;
    s->state = a == b ? SEL_DONE : SEL_NARROW;
    s->value = a;
    if (s->state == SEL_DONE) return 0;
    s->cnt = calloc(NPUC_SEL_BINS, sizeof *s->cnt);
    s->bmin = malloc(NPUC_SEL_BINS * sizeof *s->bmin);
    s->bmax = malloc(NPUC_SEL_BINS * sizeof *s->bmax);
    return s->cnt && s->bmin && s->bmax ? 0 : -1;
}

/* The sorted position h of percentile p among n values: k and the fraction. */
static void position(uint64_t n, double p, uint64_t *k, double *frac) {
    double h = (double)(n - 1) * p / 100.0;
    if (!(h > 0)) h = 0;
    if (h > (double)(n - 1)) h = (double)(n - 1);
    *k = (uint64_t)h;
    if (*k > n - 1) *k = n - 1;
    *frac = h - (double)*k;
}

npuc_status npuc__sel_setup(npuc_ctx *ctx, npuc__act_chan *ch, double pct, int symmetric) {
    const uint64_t n = ch->n1;
    uint64_t k;
    double frac;
    int bad = 0;
    ch->nsel = 0;
    if (symmetric) {
        const float amax = fmaxf(fabsf(ch->min), fabsf(ch->max));
        /* min |x| is not known; 0 bounds it. */
        position(n, pct, &k, &frac);
        bad |= sel_init(&ch->sel[ch->nsel++], k, 0.0f, amax);
        bad |= sel_init(&ch->sel[ch->nsel++], k + 1 < n ? k + 1 : k, 0.0f, amax);
    } else {
        const double plo = pct < 50.0 ? pct : 100.0 - pct;
        position(n, plo, &k, &frac);
        bad |= sel_init(&ch->sel[ch->nsel++], k, ch->min, ch->max);
        bad |= sel_init(&ch->sel[ch->nsel++], k + 1 < n ? k + 1 : k, ch->min, ch->max);
        position(n, 100.0 - plo, &k, &frac);
        bad |= sel_init(&ch->sel[ch->nsel++], k, ch->min, ch->max);
        bad |= sel_init(&ch->sel[ch->nsel++], k + 1 < n ? k + 1 : k, ch->min, ch->max);
    }
    return bad ? npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory") : NPUC_OK;
}

static int cmp_float(const void *x, const void *y) {
    float a = *(const float *)x, b = *(const float *)y;
    return (a > b) - (a < b);
}

npuc_status npuc__sel_end(npuc_ctx *ctx, npuc__sel *s, int *open) {
    *open = 0;
    if (s->state == SEL_DONE) return NPUC_OK;
    const uint64_t r = s->rank - s->below; /* rank inside [a, b] */
    if (s->state == SEL_COLLECT) {
        /* Every value in [a, b] was kept (the count came from the pass
         * before, over the same values). */
        const uint64_t m = s->nkeep < s->cap ? s->nkeep : s->cap;
        qsort(s->keep, (size_t)m, sizeof *s->keep, cmp_float);
        s->value = m ? s->keep[r < m ? r : m - 1] : s->a;
        s->state = SEL_DONE;
        npuc__sel_free(s);
        return NPUC_OK;
    }
    uint64_t acc = 0;
    int k = 0;
    for (; k < NPUC_SEL_BINS - 1; k++) {
        if (acc + s->cnt[k] > r) break;
        acc += s->cnt[k];
    }
    const uint64_t c = s->cnt[k];
    if (c == 0) { /* only when passes saw different values */
        s->value = s->a;
        s->state = SEL_DONE;
        npuc__sel_free(s);
        return NPUC_OK;
    }
    s->a = s->bmin[k];
    s->b = s->bmax[k];
    s->below = 0;
    if (s->a == s->b) {
        s->value = s->a;
        s->state = SEL_DONE;
        npuc__sel_free(s);
        return NPUC_OK;
    }
    memset(s->cnt, 0, NPUC_SEL_BINS * sizeof *s->cnt);
    if (c <= NPUC_SEL_KEEP) {
        s->keep = malloc((size_t)c * sizeof *s->keep);
        if (!s->keep) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        s->cap = c;
        s->nkeep = 0;
        s->state = SEL_COLLECT;
    }
    *open = 1;
    return NPUC_OK;
}

void npuc__sel_free(npuc__sel *s) {
    free(s->cnt);
    free(s->bmin);
    free(s->bmax);
    free(s->keep);
    s->cnt = NULL;
    s->bmin = s->bmax = s->keep = NULL;
}

/* v[k] + frac (v[k+1] - v[k]) from a pair of finished targets. */
static float interp(const npuc__sel *lo, const npuc__sel *hi, double frac) {
    double v = lo->value;
    if (frac > 0) v += frac * ((double)hi->value - v);
    return (float)v;
}

void npuc__sel_result(npuc__act_chan *ch, double pct, int symmetric) {
    const uint64_t n = ch->n1;
    uint64_t k;
    double frac;
    if (symmetric) {
        position(n, pct, &k, &frac);
        float t = interp(&ch->sel[0], &ch->sel[1], frac);
        ch->res.threshold = t;
        ch->res.lo = -t;
        ch->res.hi = t;
        return;
    }
    const double plo = pct < 50.0 ? pct : 100.0 - pct;
    position(n, plo, &k, &frac);
    ch->res.lo = interp(&ch->sel[0], &ch->sel[1], frac);
    position(n, 100.0 - plo, &k, &frac);
    ch->res.hi = interp(&ch->sel[2], &ch->sel[3], frac);
    ch->res.threshold = ch->res.hi;
}
