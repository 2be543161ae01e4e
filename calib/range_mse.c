/*
 * range_mse.c - the MSE range: the clip that minimises the squared error of
 * quantizing this group at `bits` with the quantizer of range_internal.h.
 *
 * Candidates.  Shrink factors t in (0, 1] of the minmax range: symmetric,
 * the clip c = t * max|x|; asymmetric, [t * lo, t * hi] of the range widened
 * to include 0 (the joint shrink), then each end alone (below).
 *
 * Search.  A coarse geometric grid t = 2^(-j/3), j = 0..24 (down to 1/256 of
 * the extremes, so the bulk stays reachable when a few outliers lie hundreds
 * of sigmas out) is scanned from t = 1 downwards and stops as soon as a
 * lower bound on the clipping error alone reaches the best total error seen:
 * clipping error only grows as t shrinks, so no smaller t can win.  (The
 * bound counts the values beyond the representable ends; for asymmetric
 * ranges those ends are pushed out by half a step, since the rounding of
 * the zero point moves them by up to that, which keeps the bound monotone.)
 * Two linear refinements follow: 5 points between the best grid point's
 * neighbours, then 3 within one step of the new best, which puts the clip
 * within ~2% of the optimum of the error being minimised (8 and 6 points
 * in exact mode, where the error of few values is a rugged function of the
 * clip).  Asymmetric
 * ranges then descend one coordinate at a time from the joint optimum: hi
 * with lo fixed, then lo with hi fixed (grid from two steps outwards down to
 * pruning, refinements of 3 and 2 points), repeated while a round gains more
 * than 1% (at most 3 rounds), so that outliers on one side do not drag the
 * quiet end in with them as the joint shrink alone would.
 *
 * Evaluation.  Groups of n <= max(512, 8 x the code's cell boundaries)
 * values (512 at int4, 1016 at int8 symmetric, 2040 at int8 asymmetric)
 * evaluate every candidate exactly on the data: that is the precise answer
 * and, for so few values, no slower than a histogram.  Larger groups make
 * one pass that builds a histogram of y = |x| (symmetric) or y = x
 * (asymmetric) with n/16 to n/8 bins (at most 2048) holding the count and the
 * sum of their values, and evaluate a candidate in O(cells) instead of
 * O(n): with levels v_r = r s, r = r0..r1, and cell boundaries
 * t_r = (r + 1/2) s, summation by parts gives
 *     E = sum y^2 + v_r1^2 N - 2 v_r1 sum y - 2 s sum_{r0 <= r < r1} G(t_r),
 *     G(t) = sum over y < t of (t - y),
 * where the outer cells reach to +-infinity, so the clipping error of every
 * value beyond the clip is in E exactly; G is exact at bin edges (from the
 * per-bin counts and sums) and interpolated linearly inside a bin, the only
 * approximation.  sum y^2 is the same for every candidate: it only enters
 * the pruning test, estimated as if each value sat at its bin's centre with
 * a uniform spread around it.
 *
 * Guarantee.  The histogram never decides alone: the winner and minmax are
 * finally evaluated exactly on the data, and minmax is returned unless the
 * winner is better by more than MSE_MARGIN (1e-5) relative.  The exact sums
 * are formed in float per lane over blocks of 256 values and flushed to
 * double (relative error < 2.1e-6), so a win by the margin is a win in exact
 * arithmetic too.  In exact mode minmax (t = 1) is the first candidate,
 * measured by the same function, and the same margin applies.  The result
 * always lies within [lo, hi] of minmax.
 *
 * Speed of exact mode.  Every decision of the search (which candidate is
 * best, where a scan stops) depends only on the candidates' errors and
 * clipping bounds, and a candidate's point depends only on the decisions
 * before its scan, so a scan's next points can be evaluated together before
 * they are visited: mse_scan evaluates up to the kernel table's batch of
 * them in one call of group_sqerr (kernels/calib_lanes.h) and then visits
 * them in order, dropping those past the stop.  The visits are those of
 * the one-at-a-time search (the reference table's batch is 1, so
 * NPUC_FORCE_REF=1 runs exactly that), and the AVX-512 kernel forms every
 * sum bit for bit as the reference does, two candidates per 16-lane
 * register; test_calib_lanes compares the chosen ranges.  At groups of 32
 * (int4, 1 thread, in memory) that takes the search from ~740 to ~490 ns
 * per group symmetric and ~1600 to ~1000 ns asymmetric; what remains is
 * mostly latency: about 3 (symmetric) or 9 (asymmetric) dependent rounds
 * of quantizer parameters (two or three divisions), one kernel pass
 * (~100 cycles of dependent adds and the fixed-order reduction to double)
 * and the visits.
 *
 * Cost, per value (bench/bench_calib.c): the histogram pass (a scatter,
 * ~1.3 cycles, the bulk of it), ~12-15 candidates (symmetric) or ~25-35
 * (asymmetric) x cells on the histogram, amortised over the group, and two
 * exact SIMD passes (~0.3 cycles each) on data already in cache.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "range_internal.h"

/* Exact evaluation when n <= max(MSE_EXACT_MIN, MSE_EXACT_PER_CELL x cell boundaries). */
#define MSE_EXACT_MIN 512
#define MSE_EXACT_PER_CELL 8
/* Histogram bins for the approximate evaluation. */
#define MSE_BINS_MAX 2048
#define MSE_BINS_MIN 64

/* Geometric coarse grid: t = 2^(-j / MSE_STEPS_PER_OCTAVE), j = 0..MSE_COARSE_N-1. */
#define MSE_STEPS_PER_OCTAVE 3
#define MSE_COARSE_N 25
#define MSE_REFINE1 5
#define MSE_REFINE2 3
#define MSE_EXACT_REFINE1 8
#define MSE_EXACT_REFINE2 6
/* Asymmetric: rounds of one-end searches, and their refinements. */
#define MSE_SIDE_ROUNDS 3
#define MSE_SIDE_GAIN 1e-2
#define MSE_SIDE_UP 1
#define MSE_SIDE_REFINE1 3
#define MSE_SIDE_REFINE2 2
/* Evaluations in the first batch of a one-end scan (exact mode). */
#define MSE_SIDE_FIRST 2

/* exp2((double)j / MSE_STEPS_PER_OCTAVE) for j = MSE_SIDE_UP down to
 * -(MSE_COARSE_N - 1), as glibc's exp2 gives it (test_calib_lanes checks
 * the libm in use agrees): the grid's factors without a libm call per
 * point, and the same on every libm. */
static const double mse_pow_tab[MSE_SIDE_UP + MSE_COARSE_N] = {
    0x1.428a2f98d728bp+0, /* j = 1 */
    0x1p+0, /* j = 0 */
    0x1.965fea53d6e3dp-1, /* j = -1 */
    0x1.428a2f98d728bp-1, /* j = -2 */
    0x1p-1, /* j = -3 */
    0x1.965fea53d6e3dp-2, /* j = -4 */
    0x1.428a2f98d728bp-2, /* j = -5 */
    0x1p-2, /* j = -6 */
    0x1.965fea53d6e3cp-3, /* j = -7 */
    0x1.428a2f98d728bp-3, /* j = -8 */
    0x1p-3, /* j = -9 */
    0x1.965fea53d6e3cp-4, /* j = -10 */
    0x1.428a2f98d728bp-4, /* j = -11 */
    0x1p-4, /* j = -12 */
    0x1.965fea53d6e3ep-5, /* j = -13 */
    0x1.428a2f98d728ap-5, /* j = -14 */
    0x1p-5, /* j = -15 */
    0x1.965fea53d6e3ep-6, /* j = -16 */
    0x1.428a2f98d728ap-6, /* j = -17 */
    0x1p-6, /* j = -18 */
    0x1.965fea53d6e3ep-7, /* j = -19 */
    0x1.428a2f98d728ap-7, /* j = -20 */
    0x1p-7, /* j = -21 */
    0x1.965fea53d6e3ep-8, /* j = -22 */
    0x1.428a2f98d728ap-8, /* j = -23 */
    0x1p-8, /* j = -24 */
};

double npuc__range_mse_grid(int j) {
    return j <= MSE_SIDE_UP && j > -MSE_COARSE_N ? mse_pow_tab[MSE_SIDE_UP - j] : NAN;
}

/* Relative margin by which a clipped range must beat minmax (exactly). */
#define MSE_MARGIN 1e-5

/* Candidates evaluated together at most (kernels' batch, exact mode). */
#define MSE_BATCH_MAX 8

/* ------------------------------------------------------------ quantizer */

int npuc__qparams_sym(float c, int bits, npuc__qparams *p) {
    const int32_t qmax = (1 << (bits - 1)) - 1;
    float scale = c / (float)qmax;
    if (!(scale >= FLT_MIN) || !(scale <= FLT_MAX)) return 0;
    float inv = 1.0f / scale;
    if (!(inv >= FLT_MIN) || !(inv <= FLT_MAX)) return 0;
    p->scale = scale;
    p->inv_scale = inv;
    p->zp = 0;
    p->vmin = (float)-qmax;
    p->vmax = (float)qmax;
    return 1;
}

int npuc__qparams_asym(float lo, float hi, int bits, npuc__qparams *p) {
    const int32_t qmax = (int32_t)((1u << bits) - 1);
    lo = lo < 0.0f ? lo : 0.0f;
    hi = hi > 0.0f ? hi : 0.0f;
    /* The width in double, rounded once (as src/passes/quantize/quantize.c does). */
    float scale = (float)(((double)hi - (double)lo) / (double)qmax);
    if (!(scale >= FLT_MIN) || !(scale <= FLT_MAX)) return 0;
    float inv = 1.0f / scale;
    if (!(inv >= FLT_MIN) || !(inv <= FLT_MAX)) return 0;
    /* rint(v) for 0 <= v <= qmax + 1 < 2^22 (v = -lo / scale), as rintf
     * gives it apart from the sign of a zero, which the (int32_t) below drops. */
    float z = (-lo / scale + NPUC_RINT_MAGIC) - NPUC_RINT_MAGIC;
    z = z < 0.0f ? 0.0f : z;
    z = z > (float)qmax ? (float)qmax : z;
    p->scale = scale;
    p->inv_scale = inv;
    p->zp = (int32_t)z;
    p->vmin = (float)-p->zp;
    p->vmax = (float)(qmax - p->zp);
    return 1;
}

/* ------------------------------------------------------- exact error */

/* The exact sums are the kernels' group_sqerr (kernels/calib_lanes.h): the
 * squared error of x[0..n) under each candidate and, with bounds {A, B},
 * the squared distances of the values below A to A and of those above B to
 * B, in float per lane (lane = index mod 8) over blocks of NPUC_SQERR_BLOCK
 * values, lanes and blocks to double in a fixed order.  Every table forms
 * them with the same float operations in the same order per lane, so the
 * sums are bit-identical across builds and with NPUC_FORCE_REF. */
static npuc_lane_q lane_q(const npuc__qparams *p) {
    return (npuc_lane_q){p->scale, p->inv_scale, p->vmin, p->vmax};
}

double npuc__range_sse(const float *x, size_t n, const npuc__qparams *p) {
    const npuc_lane_q q = lane_q(p);
    double out[3];
    npuc_calib_kernels()->group_sqerr(x, n, &q, NULL, 1, out);
    return out[0];
}

/* ------------------------------------------------------------ search */

/* Histogram bin j covers [base + j w, base + (j+1) w).  At its left edge:
 * G and the slope to the next edge (for interpolation), and the prefix
 * count, count * edge and count * edge^2 (for the clipping bound). */
typedef struct mse_node {
    double g, dg;
} mse_node;
typedef struct mse_tail {
    double c, ce, ce2;
} mse_tail;
typedef struct mse_bin {
    double c, s;
} mse_bin;

typedef struct mse_search {
    const float *x;
    size_t n;
    int bits, sym, exact;
    const npuc_calib_kernel_table *K;
    int batch; /* candidates evaluated per pass (1 unless exact) */
    float amax; /* symmetric: max |x| */
    float L, H; /* asymmetric: extremes widened to include 0 */
    /* histogram */
    int nb;
    double base, w, invw, top;
    const mse_node *node; /* nb + 1 entries */
    const mse_tail *tail; /* nb + 1 entries */
    double tot_c, tot_s, s2;
    /* best candidate so far */
    double best_err, best_al, best_ah;
    double err_mm; /* the error of minmax (al = ah = 1) */
} mse_search;

/* Cell boundaries of the code: 2^(b-1) - 1 for |x| (symmetric), 2^b - 1. */
static size_t mse_boundaries(int bits, int sym) {
    return sym ? ((size_t)1 << (bits - 1)) - 1 : ((size_t)1 << bits) - 1;
}

static int mse_exact_mode(size_t n, int bits, int sym) {
    size_t lim = MSE_EXACT_PER_CELL * mse_boundaries(bits, sym);
    return n <= MSE_EXACT_MIN || n <= lim;
}

/* The smallest power of two above n / 16 (within [MSE_BINS_MIN,
 * MSE_BINS_MAX]): the tables cost O(bins) per group, which must stay small
 * next to the O(n) pass. */
static int mse_bins(size_t n) {
    int nb = MSE_BINS_MIN;
    while (nb < MSE_BINS_MAX && (size_t)nb * 16 <= n) nb *= 2;
    return nb;
}

size_t npuc__range_mse_scratch(size_t n, int bits, int symmetric) {
    if (bits < NPUC_RANGE_MIN_BITS || bits > NPUC_RANGE_MAX_BITS) return 0;
    if (mse_exact_mode(n, bits, symmetric != 0)) return 0;
    size_t nb = (size_t)mse_bins(n);
    return nb * sizeof(mse_bin) + (nb + 1) * (sizeof(mse_node) + sizeof(mse_tail)) +
           4 * NPUC_RANGE_ALIGN;
}

/* Lower bounds on the clipping error from the whole bins beyond a bound:
 * values above b (their bins' left edges are >= b) and below a (right edges
 * <= a), each measured to the bound. */
static double hist_clip_hi(const mse_search *m, double b) {
    const int nb = m->nb;
    const mse_tail *T = m->tail;
    double ub = ceil((b - m->base) * m->invw);
    if (!(ub < (double)nb)) return 0.0;
    int j = ub < 0.0 ? 0 : (int)ub;
    double c = T[nb].c - T[j].c, ce = T[nb].ce - T[j].ce, ce2 = T[nb].ce2 - T[j].ce2;
    double v = ce2 - 2.0 * b * ce + b * b * c;
    return v > 0.0 ? v : 0.0;
}

static double hist_clip_lo(const mse_search *m, double a) {
    const int nb = m->nb;
    const mse_tail *T = m->tail;
    double la = floor((a - m->base) * m->invw); /* bins [0, la) end at or below a */
    if (!(la > 0.0)) return 0.0;
    int j = la > (double)nb ? nb : (int)la;
    double aw = a - m->w; /* a - right edge = (a - w) - left edge */
    double v = T[j].ce2 - 2.0 * aw * T[j].ce + aw * aw * T[j].c;
    return v > 0.0 ? v : 0.0;
}

/* Error of the levels r * s, r = r0..r1, on the histogram (see the top).
 * Boundaries below the histogram have G = 0, those past its top
 * G(t) = t N - sum y (summed in closed form); only the ones in between
 * interpolate, with no branch in the loop. */
static double hist_err(const mse_search *m, double s, int r0, int r1) {
    const double flo = ceil(m->base / s - 0.5), fhi = ceil(m->top / s - 0.5);
    const int ra = flo > (double)r0 ? (flo < (double)r1 ? (int)flo : r1) : r0;
    const int rb = fhi < (double)r1 ? (fhi > (double)ra ? (int)fhi : ra) : r1;
    const mse_node *nd = m->node;
    const int jmax = m->nb - 1;
    const double du = s * m->invw, u0 = (0.5 * s - m->base) * m->invw;
    double gs = 0.0;
    for (int r = ra; r < rb; r++) {
        const double u = u0 + (double)r * du; /* in [0, nb] up to rounding */
        int j = (int)u;
        j = j < jmax ? j : jmax;
        gs += nd[j].g + (u - (double)j) * nd[j].dg;
    }
    if (rb < r1) {
        const double k = (double)(r1 - rb);
        gs += m->tot_c * s * (k * ((double)rb + (double)r1) * 0.5) - k * m->tot_s;
    }
    const double v = (double)r1 * s;
    return m->s2 + v * v * m->tot_c - 2.0 * v * m->tot_s - 2.0 * s * gs;
}

typedef enum { DIR_JOINT, DIR_HI, DIR_LO } mse_dir;

/* One candidate (al, ah) (factors on the low and high extremes) and what
 * evaluating it gave: ok = 0 when it cannot be quantized; its error e; and
 * clip, a lower bound on the clipping error that can only grow as the
 * search direction moves inwards: the values beyond the clip ends pushed
 * out by half a step (the zero point's rounding moves the representable
 * ends by up to that), on the side(s) the direction moves. */
typedef struct mse_cand {
    double al, ah, e, clip;
    int ok;
} mse_cand;

/* The candidate at t along direction d from (al0, ah0). */
static mse_cand dir_cand(mse_dir d, double t, double al0, double ah0) {
    mse_cand c = {t, t, INFINITY, INFINITY, 0};
    if (d == DIR_HI) c.al = al0;
    if (d == DIR_LO) c.ah = ah0;
    return c;
}

/* Evaluates c[0..k) (k <= MSE_BATCH_MAX) along d: a pure function of the
 * candidates, so evaluating some ahead of the search's need (speculation,
 * mse_scan) changes nothing but time.  In exact mode the candidates share
 * one call of the kernels' group_sqerr. */
static void mse_eval(const mse_search *m, mse_dir d, mse_cand *c, int k) {
    npuc_lane_q q[MSE_BATCH_MAX];
    float bnd[2 * MSE_BATCH_MAX];
    int idx[MSE_BATCH_MAX], nq = 0;
    for (int i = 0; i < k; i++) {
        npuc__qparams p;
        float a, b;
        const float lc = (float)(c[i].al * m->L), hc = (float)(c[i].ah * m->H);
        c[i].ok = m->sym ? npuc__qparams_sym((float)(c[i].ah * m->amax), m->bits, &p)
                         : npuc__qparams_asym(lc, hc, m->bits, &p);
        if (!c[i].ok) {
            c[i].e = c[i].clip = INFINITY;
            continue;
        }
        if (m->sym) {
            b = p.vmax * p.scale;
            a = -b;
        } else {
            a = lc - 0.5f * p.scale;
            b = hc + 0.5f * p.scale;
        }
        if (m->exact) {
            /* A one-end scan reads one clipping sum: an infinite bound on
             * the other side makes that sum +0, which the kernels may give
             * without computing it. */
            if (d == DIR_HI) a = -INFINITY;
            if (d == DIR_LO) b = INFINITY;
            q[nq] = lane_q(&p);
            bnd[2 * nq] = a;
            bnd[2 * nq + 1] = b;
            idx[nq++] = i;
            continue;
        }
        const double s = (double)p.scale;
        double e = hist_err(m, s, m->sym ? 0 : (int)p.vmin, (int)p.vmax);
        if (e < 0.0) e = 0.0; /* cancellation in the histogram form */
        const double ch = hist_clip_hi(m, (double)b);
        const double cl = m->sym ? 0.0 : hist_clip_lo(m, (double)a);
        c[i].e = e;
        c[i].clip = d == DIR_HI ? ch : d == DIR_LO ? cl : cl + ch;
    }
    if (nq == 0) return;
    double out[3 * MSE_BATCH_MAX];
    m->K->group_sqerr(m->x, m->n, q, bnd, (size_t)nq, out);
    for (int j = 0; j < nq; j++) {
        const double cl = out[3 * j + 1], ch = out[3 * j + 2];
        c[idx[j]].e = out[3 * j];
        c[idx[j]].clip = d == DIR_HI ? ch : d == DIR_LO ? cl : cl + ch;
    }
}

/* The search's visit of an evaluated candidate, in the search's order. */
static void mse_visit(mse_search *m, const mse_cand *c) {
    if (!c->ok) return;
    if (c->al == 1.0 && c->ah == 1.0) m->err_mm = c->e;
    if (c->e < m->best_err) {
        m->best_err = c->e;
        m->best_al = c->al;
        m->best_ah = c->ah;
    }
}

/* Visits the points t[0..np) along d in order, stopping after the first
 * whose clipping bound reaches the best error so far (every later point
 * clips at least as much, so none can win: *stop is then set); points with
 * given[i] set are not evaluated (error e0, bound 0).  Their errors go to
 * err[]; returns how many were visited.  The points are evaluated m->batch at a time ahead of
 * the visits: a point past the stop is evaluated and dropped unvisited, so
 * the visits, and with them every decision, are those of evaluating one
 * point at a time (batch 1, as NPUC_FORCE_REF runs it). */
static int mse_scan(mse_search *m, mse_dir d, double al0, double ah0, const double *t,
                    const unsigned char *given, double e0, int np, double *err, int *stop) {
    int v = 0;
    *stop = 0;
    while (v < np) {
        mse_cand c[MSE_BATCH_MAX];
        int k = 0, end = v;
        while (end < np && k < m->batch) {
            if (!(given && given[end])) c[k++] = dir_cand(d, t[end], al0, ah0);
            end++;
        }
        mse_eval(m, d, c, k);
        for (int i = v, ci = 0; i < end; i++) {
            double clip = 0.0;
            if (given && given[i]) {
                err[i] = e0;
            } else {
                mse_visit(m, &c[ci]);
                err[i] = c[ci].e;
                clip = c[ci].clip;
                ci++;
            }
            if (clip >= m->best_err) {
                *stop = 1;
                return i + 1;
            }
        }
        v = end;
    }
    return np;
}

/* Linear refinement: npts points strictly inside (lo, hi), from the top
 * down, pruned like the coarse scan.  Returns the best t (tb unless one
 * beats *eb) and its error in *eb. */
static double refine(mse_search *m, mse_dir d, double al0, double ah0, double lo, double hi,
                     int npts, double tb, double *eb) {
    double h = (hi - lo) / (npts + 1);
    double t[MSE_EXACT_REFINE1], err[MSE_EXACT_REFINE1];
    int np = 0;
    for (int k = npts; k >= 1 && np < MSE_EXACT_REFINE1; k--) t[np++] = lo + h * k;
    int stop;
    const int nv = mse_scan(m, d, al0, ah0, t, NULL, 0.0, np, err, &stop);
    for (int i = 0; i < nv; i++) {
        if (err[i] < *eb) {
            *eb = err[i];
            tb = t[i];
        }
    }
    return tb;
}

/* One-dimensional search along direction d over t in (0, 1]: the geometric
 * grid t = t0 * 2^(j/3) from j = jup down (t <= 1 only; t0 itself, already
 * evaluated with error e0 when jup > 0, is not evaluated again), pruned once
 * the clipping bound reaches the best error, then the two refinements. */
static void line_search(mse_search *m, mse_dir d, double al0, double ah0, double t0, double e0,
                        int jup, int n1, int n2) {
    const double ratio = mse_pow_tab[MSE_SIDE_UP - 1]; /* exp2(1/3) */
    const double tmin = t0 * mse_pow_tab[MSE_SIDE_UP + MSE_COARSE_N - 1];
    double grid[MSE_COARSE_N + 8], err[MSE_COARSE_N + 8];
    unsigned char given[MSE_COARSE_N + 8];
    /* The grid from the top, made m->batch evaluations at a time (the
     * points depend on t0 alone) and scanned; the scan ends where the
     * pruning stops it, at tmin or when the table is full. */
    int np = 0, g = 0, j = jup, end = 0;
    while (!end) {
        const int start = np;
        /* One-end scans start next to their optimum and mostly stop
         * within a point or two: a smaller first batch wastes less. */
        const int want =
            start == 0 && d != DIR_JOINT && m->batch > MSE_SIDE_FIRST ? MSE_SIDE_FIRST : m->batch;
        for (int k = 0; k < want;) {
            if (j <= -MSE_COARSE_N || np >= MSE_COARSE_N + 8) {
                end = 1;
                break;
            }
            const double t = t0 * mse_pow_tab[MSE_SIDE_UP - j];
            const int gv = j == 0 && jup > 0;
            j--;
            if (t > 1.0 || (np > 0 && t >= grid[np - 1])) continue;
            grid[np] = t;
            given[np] = (unsigned char)gv;
            np++;
            k += !gv;
            if (t <= tmin) {
                end = 1;
                break;
            }
        }
        int stop;
        g = start + mse_scan(m, d, al0, ah0, grid + start, given + start, e0, np - start, err + start, &stop);
        if (stop) break;
    }
    int b = 0;
    for (int k = 1; k < g; k++)
        if (err[k] < err[b]) b = k;
    double tb = grid[b], eb = err[b];
    double hi = b > 0 ? grid[b - 1] : fmin(1.0, grid[0] * ratio);
    double lo = b + 1 < g ? grid[b + 1] : grid[b] / ratio;
    if (hi > tb || lo < tb) {
        double t1 = refine(m, d, al0, ah0, lo, hi, n1, tb, &eb);
        double h1 = (hi - lo) / (n1 + 1);
        double lo2 = t1 - h1 > 0.0 ? t1 - h1 : t1 / 2, hi2 = t1 + h1 < 1.0 ? t1 + h1 : 1.0;
        refine(m, d, al0, ah0, lo2, hi2, n2, t1, &eb);
    }
}

/* Builds the histogram of y = |x| (symmetric) or y = x (asymmetric) and its
 * tables.  Returns 0 when the span cannot be binned in float (too small, or
 * beyond FLT_MAX); the caller then keeps minmax. */
static int mse_build(mse_search *m, void *scratch) {
    const int nb = mse_bins(m->n);
    unsigned char *p = npuc__range_align(scratch);
    mse_bin *bin = (mse_bin *)(void *)p;
    p = npuc__range_align(p + (size_t)nb * sizeof *bin);
    mse_node *node = (mse_node *)(void *)p;
    p = npuc__range_align(p + (size_t)(nb + 1) * sizeof *node);
    mse_tail *tail = (mse_tail *)(void *)p;

    const float lo = m->sym ? 0.0f : m->L;
    const float span = m->sym ? m->amax : m->H - m->L;
    const float invw = (float)nb / span;
    if (!(span > 0.0f && span <= FLT_MAX) || !(invw <= FLT_MAX)) return 0;
    memset(bin, 0, (size_t)nb * sizeof *bin);

    /* The scatter is the cost of the whole method: one pass, count and sum
     * only (the sum of squares is not needed for ranking candidates). */
    const float top = (float)(nb - 1);
    const float *x = m->x;
    const size_t n = m->n;
    if (m->sym) {
        for (size_t i = 0; i < n; i++) {
            const float a = fabsf(x[i]);
            float u = a * invw;
            u = u < top ? u : top;
            mse_bin *b = &bin[(int)u];
            b->c += 1.0;
            b->s += a;
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            const float a = x[i];
            float u = (a - lo) * invw;
            u = u < top ? u : top;
            u = u > 0.0f ? u : 0.0f;
            mse_bin *b = &bin[(int)u];
            b->c += 1.0;
            b->s += a;
        }
    }
    m->nb = nb;
    m->base = (double)lo;
    m->w = (double)span / nb;
    m->invw = (double)nb / (double)span;
    m->top = m->base + (double)span;

    /* G at the left edges and the prefix tables. */
    double c = 0, s = 0, ce = 0, ce2 = 0;
    for (int j = 0; j < nb; j++) {
        const double e = m->base + m->w * j;
        node[j].g = e * c - s;
        tail[j] = (mse_tail){c, ce, ce2};
        const double dc = bin[j].c;
        c += dc;
        s += bin[j].s;
        ce += dc * e;
        ce2 += dc * e * e;
    }
    node[nb].g = m->top * c - s;
    node[nb].dg = 0.0;
    tail[nb] = (mse_tail){c, ce, ce2};
    for (int j = 0; j < nb; j++) node[j].dg = node[j + 1].g - node[j].g;
    m->tot_c = c;
    m->tot_s = s;
    /* sum y^2 (for the pruning test only): every value at its bin's centre
     * plus a uniform spread within the bin, sum c ((e + w/2)^2 + w^2/12). */
    m->s2 = ce2 + m->w * ce + c * m->w * m->w / 3.0;
    m->node = node;
    m->tail = tail;
    return 1;
}

/* The exact error of the range [lo, hi]. */
static double exact_err(const mse_search *m, float lo, float hi) {
    npuc__qparams p;
    int ok = m->sym ? npuc__qparams_sym(hi, m->bits, &p) : npuc__qparams_asym(lo, hi, m->bits, &p);
    if (!ok) return INFINITY;
    const npuc_lane_q q = lane_q(&p);
    double out[3];
    m->K->group_sqerr(m->x, m->n, &q, NULL, 1, out);
    return out[0];
}

void npuc__range_mse(const float *x, size_t n, int bits, int symmetric, float lo0, float hi0,
                     float *lo, float *hi, void *scratch) {
    npuc__range_mse_k(npuc_calib_kernels(), x, n, bits, symmetric, lo0, hi0, lo, hi, scratch);
}

void npuc__range_mse_k(const npuc_calib_kernel_table *K, const float *x, size_t n, int bits,
                       int symmetric, float lo0, float hi0, float *lo, float *hi, void *scratch) {
    *lo = lo0;
    *hi = hi0;
    mse_search m;
    memset(&m, 0, sizeof m);
    m.x = x;
    m.n = n;
    m.bits = bits;
    m.sym = symmetric;
    m.amax = hi0; /* symmetric: lo0 = -hi0 */
    m.L = lo0 < 0.0f ? lo0 : 0.0f;
    m.H = hi0 > 0.0f ? hi0 : 0.0f;
    m.best_err = INFINITY;
    m.err_mm = INFINITY;
    m.best_al = m.best_ah = 1.0;
    m.exact = mse_exact_mode(n, bits, symmetric);
    m.K = K;
    m.batch = !m.exact ? 1 : m.K->batch < MSE_BATCH_MAX ? m.K->batch : MSE_BATCH_MAX;

    npuc__qparams p0;
    if (symmetric ? !npuc__qparams_sym(hi0, bits, &p0) : !npuc__qparams_asym(lo0, hi0, bits, &p0))
        return; /* a range too small to quantize: nothing to gain */
    if (!m.exact && !mse_build(&m, scratch)) return;

    /* Exact evaluations of a few values give a rugged error curve: look
     * closer.  An asymmetric joint optimum is only the start of the
     * coordinate descent: one refinement is enough. */
    line_search(&m, DIR_JOINT, 1.0, 1.0, 1.0, 0.0, 0, m.exact ? MSE_EXACT_REFINE1 : MSE_REFINE1,
                !symmetric ? 0 : m.exact ? MSE_EXACT_REFINE2 : MSE_REFINE2);
    if (!symmetric && m.H > 0.0f && m.L < 0.0f) {
        /* Then each end alone from the joint optimum (coordinate descent),
         * again while a round gains more than 0.1%. */
        for (int round = 0; round < MSE_SIDE_ROUNDS; round++) {
            double before = m.best_err;
            line_search(&m, DIR_HI, m.best_al, m.best_ah, m.best_ah, m.best_err, MSE_SIDE_UP,
                        MSE_SIDE_REFINE1, MSE_SIDE_REFINE2);
            line_search(&m, DIR_LO, m.best_al, m.best_ah, m.best_al, m.best_err, MSE_SIDE_UP,
                        MSE_SIDE_REFINE1, MSE_SIDE_REFINE2);
            if (!(m.best_err < before * (1.0 - MSE_SIDE_GAIN))) break;
        }
    }

    float l, h;
    if (symmetric) {
        h = (float)(m.best_ah * m.amax);
        l = -h;
    } else {
        l = (float)(m.best_al * m.L);
        h = (float)(m.best_ah * m.H);
        l = l < lo0 ? lo0 : l;
        h = h > hi0 ? hi0 : h;
    }
    if (l == lo0 && h == hi0) return;
    /* Exact mode has both numbers already (same function, same order). */
    double e_best = m.exact ? m.best_err : exact_err(&m, l, h);
    double e_mm = m.exact ? m.err_mm : exact_err(&m, lo0, hi0);
    if (e_best < e_mm * (1.0 - MSE_MARGIN)) {
        *lo = l;
        *hi = h;
    }
}
