/*
 * range_imp.c - the importance-weighted MSE range (npuc/calib.h,
 * npuc_range_estimate_weighted): the clip that minimises
 *     E = sum_k imp_k (w_k - deq(w_k))^2
 * as llama.cpp's quantizers do with an importance matrix (imp_k: the mean
 * of x_k^2 over calibration inputs, so E is the expected squared output
 * error of the layer when inputs are uncorrelated), and the plain MSE range
 * of the full symmetric grid (imp = NULL: all weights 1).
 *
 * Candidates are shrink factors t in (0, 1] of the minmax range (both ends
 * for asymmetric ranges; for the full grid the signed maximum, whose sign
 * decides which end maps to -2^(b-1)): the geometric grid t = 2^(-j/3),
 * j = 0..24, then 8 points between the best one's neighbours and 6 within
 * one step of the new best (as range_mse.c's exact mode).  Asymmetric
 * ranges then move each end alone over the same grid once.  Every candidate
 * is evaluated exactly in double, in element order, so the result is
 * deterministic; minmax (t = 1) is returned unless a candidate is better by
 * more than RI_MARGIN relative.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "range_internal.h"

#define RI_STEPS_PER_OCTAVE 3
#define RI_COARSE_N 25
#define RI_REFINE1 8
#define RI_REFINE2 6
#define RI_MARGIN 1e-9

typedef struct ri {
    const float *x;
    const double *imp;
    size_t n;
    int bits, sym, full;
    float lo0, hi0; /* the minmax range (not symmetrised) */
} ri;

/* The full grid's quantizer for signed maximum m (ggml's Q4_0 scale,
 * kernels/qk_grid.h: m / -2^(b-1)); 0 when the scale is unusable. */
static int qparams_full(float m, int bits, npuc__qparams *p) {
    const int32_t half = (int32_t)1 << (bits - 1);
    const float scale = m / (float)-half;
    if (!(fabsf(scale) >= FLT_MIN) || !(fabsf(scale) <= FLT_MAX)) return 0;
    const float inv = 1.0f / scale;
    if (!(fabsf(inv) >= FLT_MIN) || !(fabsf(inv) <= FLT_MAX)) return 0;
    p->scale = scale;
    p->inv_scale = inv;
    p->zp = 0;
    p->vmin = (float)-half;
    p->vmax = (float)(half - 1);
    return 1;
}

/* The range a pair of shrink factors chooses. */
static void range_of(const ri *r, double tl, double th, float *lo, float *hi) {
    if (r->sym && !r->full) {
        const float a = fmaxf(fabsf(r->lo0), fabsf(r->hi0));
        *hi = (float)(th * a);
        *lo = -*hi;
    } else {
        *lo = (float)(tl * r->lo0);
        *hi = (float)(th * r->hi0);
    }
}

/* E of the range chosen by (tl, th), or +Inf when it cannot quantize. */
static double eval(const ri *r, double tl, double th) {
    float lo, hi;
    npuc__qparams p;
    range_of(r, tl, th, &lo, &hi);
    int ok;
    if (r->full) ok = qparams_full(-lo > hi ? lo : hi, r->bits, &p);
    else if (r->sym) ok = npuc__qparams_sym(hi, r->bits, &p);
    else ok = npuc__qparams_asym(lo, hi, r->bits, &p);
    if (!ok) return INFINITY;
    double e = 0;
    for (size_t i = 0; i < r->n; i++) {
        float v = r->x[i] * p.inv_scale;
        v = v < p.vmin ? p.vmin : v > p.vmax ? p.vmax : v;
        const double d = (double)(rintf(v) * p.scale) - (double)r->x[i];
        e += (r->imp ? r->imp[i] : 1.0) * d * d;
    }
    return e;
}

/* Which factor a line search moves: both, the low end, the high end. */
typedef enum { RI_BOTH, RI_LO, RI_HI } ri_dir;

static double at(const ri *r, ri_dir d, double t, double tl, double th) {
    return eval(r, d == RI_HI ? tl : t, d == RI_LO ? th : t);
}

/* Best t for direction d with the other factor fixed; *e gets its error. */
static double line(const ri *r, ri_dir d, double tl, double th, double *e) {
    double best = 1.0, eb = at(r, d, 1.0, tl, th);
    int jb = 0;
    for (int j = 1; j < RI_COARSE_N; j++) {
        const double t = exp2(-(double)j / RI_STEPS_PER_OCTAVE), v = at(r, d, t, tl, th);
        if (v < eb) eb = v, best = t, jb = j;
    }
    /* between the neighbours of the best grid point, then around the new best */
    double a = exp2(-(double)(jb + 1) / RI_STEPS_PER_OCTAVE), b = jb ? exp2(-(double)(jb - 1) / RI_STEPS_PER_OCTAVE) : 1.0;
    for (int pass = 0; pass < 2; pass++) {
        const int np = pass ? RI_REFINE2 : RI_REFINE1;
        const double step = (b - a) / (np + 1);
        for (int i = 1; i <= np; i++) {
            const double t = a + step * i, v = at(r, d, t, tl, th);
            if (v < eb) eb = v, best = t;
        }
        a = best - step > 0 ? best - step : best / 2;
        b = best + step < 1.0 ? best + step : 1.0;
    }
    *e = eb;
    return best;
}

npuc_status npuc_range_estimate_weighted(npuc_ctx *ctx, const float *x, const double *imp, size_t n,
                                         const npuc_range_opts *o, int full_grid, float *lo, float *hi) {
    if (!o || !lo || !hi || (!x && n)) return npuc_fail(ctx, NPUC_ERR_ARG, "range estimate: NULL argument");
    if (o->bits < NPUC_RANGE_MIN_BITS || o->bits > 8)
        return npuc_fail(ctx, NPUC_ERR_ARG, "weighted range estimate: %d bits is outside [2, 8]", o->bits);
    if (full_grid && !o->symmetric)
        return npuc_fail(ctx, NPUC_ERR_ARG, "weighted range estimate: the full grid is symmetric");
    *lo = *hi = 0.0f;
    if (n == 0) return NPUC_OK;
    ri r = {.x = x, .imp = imp, .n = n, .bits = o->bits, .sym = o->symmetric != 0, .full = full_grid != 0};
    if (npuc__range_minmax(x, n, &r.lo0, &r.hi0))
        return npuc_fail(ctx, NPUC_ERR_VALUE, "range estimate: the group holds NaN or Inf values");
    for (size_t i = 0; imp && i < n; i++)
        if (!(imp[i] >= 0) || !isfinite(imp[i]))
            return npuc_fail(ctx, NPUC_ERR_VALUE, "range estimate: an importance is negative, NaN or Inf");
    double tl = 1.0, th = 1.0, e;
    const double e1 = eval(&r, 1.0, 1.0);
    if (r.lo0 == r.hi0 || !isfinite(e1)) {
        range_of(&r, 1.0, 1.0, lo, hi);
        return NPUC_OK;
    }
    tl = th = line(&r, RI_BOTH, 1.0, 1.0, &e);
    if (!r.sym) {
        th = line(&r, RI_HI, tl, th, &e);
        tl = line(&r, RI_LO, tl, th, &e);
    }
    if (!(e < e1 * (1.0 - RI_MARGIN))) tl = th = 1.0;
    range_of(&r, tl, th, lo, hi);
    return NPUC_OK;
}
