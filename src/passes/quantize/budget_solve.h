/*
 * budget_solve.h - choosing one scheme per tensor under a byte budget
 * (library-private; the mixed-precision allocator of issue 32 and its tests
 * are the callers).
 *
 * The problem is a multiple-choice knapsack: item i (a tensor) has n_i
 * choices (schemes), choice j costing bytes[i][j] and adding distortion
 * dist[i][j]; pick exactly one choice per item so that the bytes add up to
 * at most the budget and the distortions add up to the least.  The
 * objective assumes the distortions are additive across tensors
 * (docs/budget.md says when that holds).
 *
 * npuc__budget_solve works in four steps:
 *   1. per item, the Pareto front (a choice that costs more and distorts no
 *      less than another is never useful) and its lower convex hull in the
 *      (bytes, distortion) plane;
 *   2. the Lagrangian solution: every item starts at its cheapest choice and
 *      the hull segments are taken in order of distortion drop per byte
 *      while they fit.  Sorting the segments finds the multiplier exactly,
 *      where a bisection on it would find it to a tolerance: the same
 *      solution, without the tolerance;
 *   3. a greedy fill of what the budget has left: among all Pareto choices
 *      (not only the hull's) that still fit, the one with the best drop per
 *      added byte, until none improves;
 *   4. branch and bound over the items (depth first, bound = the fixed
 *      items' distortion plus the linear relaxation of the rest, which the
 *      sorted hull segments give), started from step 3's solution, within a
 *      work limit.  When it finishes, the result is optimal (exact = 1);
 *      when the limit stops it, the result is the best found and gap says
 *      how far from optimal it can be at most.
 *
 * Everything is deterministic: ties are broken by item and choice index.
 */
#ifndef NPUC_BUDGET_SOLVE_H
#define NPUC_BUDGET_SOLVE_H

#include <stddef.h>
#include <stdint.h>

typedef struct npuc__bchoice {
    uint64_t bytes; /* what this choice adds to the output */
    double dist;    /* its predicted distortion, >= 0 and finite */
} npuc__bchoice;

typedef struct npuc__bitem {
    const npuc__bchoice *c;
    size_t n; /* >= 1 */
} npuc__bitem;

typedef struct npuc__bresult {
    uint64_t bytes;   /* of the chosen solution; the least reachable when infeasible */
    double dist;      /* its distortion */
    double bound;     /* a lower bound of the optimal distortion */
    double gap;       /* dist - bound, 0 when exact */
    double lambda;    /* the Lagrange multiplier of step 2 (distortion per byte) */
    uint64_t nodes;   /* branch-and-bound nodes visited */
    int exact;        /* 1: proved optimal */
} npuc__bresult;

/* Default work limit of steps 3 and 4, in choice and segment visits: a
 * few milliseconds on this machine (bench/bench_budget_solve.c). */
#define NPUC__BUDGET_WORK_DEFAULT 2000000ull

/* Picks pick[i] (an index into items[i].c) for every item.  Returns 0, or
 * 1 when even the cheapest choices exceed the budget (res->bytes is then
 * their total and pick holds them), or -1 on a bad argument (an item with no
 * choice, a negative or non-finite distortion, a byte total that overflows)
 * or when memory runs out.  work_limit: 0 for the default. */
int npuc__budget_solve(const npuc__bitem *items, size_t nitems, uint64_t budget, uint64_t work_limit,
                       size_t *pick, npuc__bresult *res);

#endif
