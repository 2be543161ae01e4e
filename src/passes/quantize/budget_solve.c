/*
 * budget_solve.c - the multiple-choice knapsack behind --target-size and
 * --target-bpw: one choice per item, bytes within a budget, least summed
 * distortion.  budget_solve.h describes the four steps; this file keeps
 * them in that order.
 *
 * Working arrays, all indexed by position in one flat array:
 *   front   the Pareto choices of every item, cheapest first (item i's are
 *           front[fo[i] .. fo[i+1]));
 *   hull    positions in front of the lower convex hull of each item's
 *           front (item i's are hull[ho[i] .. ho[i+1]), cheapest first);
 *   seg     the hull's segments of every item, sorted by distortion drop
 *           per byte, best first; the linear relaxation of any set of
 *           items takes them in this order.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "budget_solve.h"

typedef struct fchoice {
    uint64_t bytes;
    double dist;
    size_t orig; /* index into the item's choices */
} fchoice;

typedef struct seg {
    size_t item, k; /* from hull point k to k + 1 of item */
    uint64_t db;
    double dd, slope;
} seg;

typedef struct solver {
    const npuc__bitem *items;
    size_t n;
    fchoice *front;
    size_t *fo;
    size_t *hull, *ho;
    seg *seg;
    size_t nseg;
    size_t *order; /* items in branching order */
    size_t *rank;  /* position of item i in order */
    uint64_t *suffix_min; /* cheapest bytes of order[d..n) */
    /* branch and bound */
    size_t *cur, *best;
    double best_dist;
    uint64_t work, work_limit, nodes;
    int stopped;
} solver;

static int cmp_fchoice(const void *a, const void *b) {
    const fchoice *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? -1 : 1;
    if (x->dist != y->dist) return x->dist < y->dist ? -1 : 1;
    return x->orig < y->orig ? -1 : x->orig > y->orig;
}

static int cmp_seg(const void *a, const void *b) {
    const seg *x = a, *y = b;
    if (x->slope != y->slope) return x->slope > y->slope ? -1 : 1;
    if (x->item != y->item) return x->item < y->item ? -1 : 1;
    return x->k < y->k ? -1 : x->k > y->k;
}

/* Cross product sign test: is the middle point b on or above the segment
 * from a to c (so not strictly below it, and not on the lower hull)? */
static int not_below(const fchoice *a, const fchoice *b, const fchoice *c) {
    const double x1 = (double)(b->bytes - a->bytes), y1 = b->dist - a->dist;
    const double x2 = (double)(c->bytes - a->bytes), y2 = c->dist - a->dist;
    return x1 * y2 - y1 * x2 <= 0.0;
}

/* Step 1: fronts, hulls and sorted segments. */
static int build(solver *s) {
    size_t total = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (s->items[i].n == 0 || !s->items[i].c) return -1;
        if (total > SIZE_MAX - s->items[i].n) return -1;
        total += s->items[i].n;
        for (size_t j = 0; j < s->items[i].n; j++) {
            const double d = s->items[i].c[j].dist;
            if (!(d >= 0.0) || !isfinite(d)) return -1;
        }
    }
    s->front = malloc((total ? total : 1) * sizeof *s->front);
    s->fo = malloc((s->n + 1) * sizeof *s->fo);
    s->hull = malloc((total ? total : 1) * sizeof *s->hull);
    s->ho = malloc((s->n + 1) * sizeof *s->ho);
    s->seg = malloc((total ? total : 1) * sizeof *s->seg);
    if (!s->front || !s->fo || !s->hull || !s->ho || !s->seg) return -1;
    size_t nf = 0, nh = 0;
    for (size_t i = 0; i < s->n; i++) {
        fchoice *f = s->front + nf;
        for (size_t j = 0; j < s->items[i].n; j++)
            f[j] = (fchoice){s->items[i].c[j].bytes, s->items[i].c[j].dist, j};
        qsort(f, s->items[i].n, sizeof *f, cmp_fchoice);
        size_t m = 0; /* Pareto: strictly less distortion than every cheaper choice */
        for (size_t j = 0; j < s->items[i].n; j++)
            if (m == 0 || f[j].dist < f[m - 1].dist) {
                if (m > 0 && f[j].bytes == f[m - 1].bytes) continue; /* same bytes, sorted by dist */
                f[m++] = f[j];
            }
        s->fo[i] = nf;
        s->ho[i] = nh;
        size_t *h = s->hull + nh, k = 0;
        for (size_t j = 0; j < m; j++) {
            while (k >= 2 && not_below(&f[h[k - 2]], &f[h[k - 1]], &f[j])) k--;
            h[k++] = j;
        }
        for (size_t j = 0; j + 1 < k; j++) {
            const fchoice *a = &f[h[j]], *b = &f[h[j + 1]];
            seg *g = &s->seg[s->nseg++];
            g->item = i;
            g->k = j;
            g->db = b->bytes - a->bytes;
            g->dd = a->dist - b->dist;
            g->slope = g->dd / (double)g->db;
        }
        nf += m;
        nh += k;
    }
    s->fo[s->n] = nf;
    s->ho[s->n] = nh;
    qsort(s->seg, s->nseg, sizeof *s->seg, cmp_seg);
    return 0;
}

static const fchoice *hull_pt(const solver *s, size_t i, size_t k) {
    return &s->front[s->fo[i] + s->hull[s->ho[i] + k]];
}

/* The linear relaxation of the items at positions >= d of the order, with
 * budget r: their cheapest distortions less the segments taken in slope
 * order while they fit, the first that does not fit taken in part.
 * Returns INFINITY when their cheapest choices do not fit. */
static double relax(solver *s, size_t d, uint64_t r) {
    if (d >= s->n) return 0.0;
    if (s->suffix_min[d] > r) return INFINITY;
    r -= s->suffix_min[d];
    double v = 0.0;
    for (size_t p = d; p < s->n; p++) v += hull_pt(s, s->order[p], 0)->dist;
    s->work += s->n - d;
    for (size_t q = 0; q < s->nseg; q++) {
        const seg *g = &s->seg[q];
        s->work++;
        if (s->rank[g->item] < d) continue;
        if (g->db <= r) {
            r -= g->db;
            v -= g->dd;
        } else {
            v -= g->dd * ((double)r / (double)g->db);
            break;
        }
    }
    return v > 0.0 ? v : 0.0;
}

static int better(double a, double b) { return a < b - 1e-12 * fabs(b); }

/* Step 4's depth-first search below position d with distortion fixed so far
 * and budget r left. */
static void branch(solver *s, size_t d, double fixed, uint64_t r) {
    if (s->stopped) return;
    s->nodes++;
    if (d == s->n) {
        if (better(fixed, s->best_dist)) {
            s->best_dist = fixed;
            memcpy(s->best, s->cur, s->n * sizeof *s->cur);
        }
        return;
    }
    if (s->work > s->work_limit) {
        s->stopped = 1;
        return;
    }
    const size_t i = s->order[d];
    const fchoice *f = s->front + s->fo[i];
    const size_t m = s->fo[i + 1] - s->fo[i];
    const uint64_t rest = d + 1 < s->n ? s->suffix_min[d + 1] : 0;
    /* Least distortion first: good solutions early make the bound bite. */
    for (size_t jj = m; jj-- > 0;) {
        if (f[jj].bytes > r || r - f[jj].bytes < rest) continue;
        const double lb = fixed + f[jj].dist + relax(s, d + 1, r - f[jj].bytes);
        if (!better(lb, s->best_dist)) continue;
        s->cur[i] = jj;
        branch(s, d + 1, fixed + f[jj].dist, r - f[jj].bytes);
        if (s->stopped) return;
    }
}

/* qsort has no context argument: the spreads are put beside the indices. */
typedef struct spread_ix {
    double spread;
    size_t item;
} spread_ix;

static int cmp_spread(const void *a, const void *b) {
    const spread_ix *x = a, *y = b;
    if (x->spread != y->spread) return x->spread > y->spread ? -1 : 1;
    return x->item < y->item ? -1 : x->item > y->item;
}

static void free_solver(solver *s) {
    free(s->front);
    free(s->fo);
    free(s->hull);
    free(s->ho);
    free(s->seg);
    free(s->order);
    free(s->rank);
    free(s->suffix_min);
    free(s->cur);
    free(s->best);
}

int npuc__budget_solve(const npuc__bitem *items, size_t nitems, uint64_t budget, uint64_t work_limit,
                       size_t *pick, npuc__bresult *res) {
    memset(res, 0, sizeof *res);
    solver s = {.items = items, .n = nitems};
    s.work_limit = work_limit ? work_limit : NPUC__BUDGET_WORK_DEFAULT;
    int rc = -1;
    if ((nitems && (!items || !pick)) || build(&s) != 0) goto out;
    const size_t n = nitems;
    s.order = malloc((n ? n : 1) * sizeof *s.order);
    s.rank = malloc((n ? n : 1) * sizeof *s.rank);
    s.suffix_min = malloc((n + 1) * sizeof *s.suffix_min);
    s.cur = malloc((n ? n : 1) * sizeof *s.cur);
    s.best = malloc((n ? n : 1) * sizeof *s.best);
    spread_ix *sp = malloc((n ? n : 1) * sizeof *sp);
    if (!s.order || !s.rank || !s.suffix_min || !s.cur || !s.best || !sp) {
        free(sp);
        goto out;
    }
    /* Branch first on the items whose choice matters most. */
    for (size_t i = 0; i < n; i++) {
        const fchoice *f = s.front + s.fo[i];
        const size_t m = s.fo[i + 1] - s.fo[i];
        sp[i] = (spread_ix){f[0].dist - f[m - 1].dist, i};
    }
    qsort(sp, n, sizeof *sp, cmp_spread);
    for (size_t d = 0; d < n; d++) {
        s.order[d] = sp[d].item;
        s.rank[sp[d].item] = d;
    }
    free(sp);
    s.suffix_min[n] = 0;
    for (size_t d = n; d-- > 0;) {
        const uint64_t b = hull_pt(&s, s.order[d], 0)->bytes;
        if (s.suffix_min[d + 1] > UINT64_MAX - b) goto out;
        s.suffix_min[d] = s.suffix_min[d + 1] + b;
    }
    /* Step 2: everyone at the cheapest choice, then the hull's segments. */
    size_t *level = s.cur; /* hull level per item, reused below */
    double dist = 0.0;
    for (size_t i = 0; i < n; i++) {
        level[i] = 0;
        dist += hull_pt(&s, i, 0)->dist;
    }
    if (s.suffix_min[0] > budget) {
        for (size_t i = 0; i < n; i++) pick[i] = hull_pt(&s, i, 0)->orig;
        res->bytes = s.suffix_min[0];
        res->dist = dist;
        rc = 1;
        goto out;
    }
    uint64_t r = budget - s.suffix_min[0];
    for (size_t q = 0; q < s.nseg; q++) {
        const seg *g = &s.seg[q];
        if (level[g->item] != g->k) continue; /* cannot happen on a convex hull */
        if (g->db > r) {
            res->lambda = g->slope;
            break;
        }
        r -= g->db;
        dist -= g->dd;
        level[g->item]++;
    }
    /* Step 3: greedy fill over all Pareto choices. */
    size_t *at = s.best; /* position in the item's front */
    for (size_t i = 0; i < n; i++) at[i] = s.hull[s.ho[i] + level[i]];
    for (;;) {
        double gain = 0.0;
        size_t bi = SIZE_MAX, bj = 0;
        if (s.work > s.work_limit) break; /* any point of the fill is a solution */
        for (size_t i = 0; i < n; i++) {
            const fchoice *f = s.front + s.fo[i];
            const size_t m = s.fo[i + 1] - s.fo[i];
            for (size_t j = at[i] + 1; j < m; j++) {
                s.work++;
                const uint64_t db = f[j].bytes - f[at[i]].bytes;
                if (db > r) break;
                const double g = (f[at[i]].dist - f[j].dist) / (double)db;
                if (g > gain) {
                    gain = g;
                    bi = i;
                    bj = j;
                }
            }
        }
        if (bi == SIZE_MAX) break;
        const fchoice *f = s.front + s.fo[bi];
        r -= f[bj].bytes - f[at[bi]].bytes;
        dist -= f[at[bi]].dist - f[bj].dist;
        at[bi] = bj;
    }
    /* Recompute the greedy solution's distortion exactly (no drift). */
    s.best_dist = 0.0;
    for (size_t i = 0; i < n; i++) s.best_dist += s.front[s.fo[i] + at[i]].dist;
    (void)dist;
    /* Step 4: branch and bound from the greedy solution. */
    const double root = relax(&s, 0, budget);
    branch(&s, 0, 0.0, budget);
    res->nodes = s.nodes;
    res->exact = !s.stopped;
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
        const fchoice *c = &s.front[s.fo[i] + s.best[i]];
        pick[i] = c->orig;
        bytes += c->bytes;
    }
    res->bytes = bytes;
    res->dist = s.best_dist;
    res->bound = res->exact ? s.best_dist : (root < s.best_dist ? root : s.best_dist);
    res->gap = res->dist - res->bound;
    rc = 0;
out:
    free_solver(&s);
    return rc;
}
