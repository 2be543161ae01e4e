/*
 * test_budget_solve.c - the budget solver (src/passes/quantize/budget_solve.c)
 * against brute force.
 *
 * The reference enumerates every combination of choices (at most 6^7 here)
 * and keeps the least distortion within the budget.  The solver must never
 * exceed the budget, must match the brute-force optimum whenever it says it
 * is exact (on these sizes it must always say so), must report
 * infeasibility exactly when the cheapest combination exceeds the budget,
 * and must return a lower bound that is one.  Instances include duplicate
 * byte counts, dominated and collinear choices, single-choice items, zero
 * distortions and budgets at and around the reachable extremes.  A forced
 * tiny work limit checks the inexact path: still within budget, its gap a
 * true bound.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "passes/quantize/budget_solve.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

typedef struct inst {
    size_t n;
    npuc__bchoice c[8][8];
    npuc__bitem it[8];
} inst;

static void make(inst *I, size_t n, size_t maxc, int kind) {
    I->n = n;
    for (size_t i = 0; i < n; i++) {
        const size_t m = 1 + rnd() % maxc;
        for (size_t j = 0; j < m; j++) {
            uint64_t b = 1 + rnd() % (kind == 1 ? 4 : 1000);
            double d = (double)(rnd() % (kind == 2 ? 5 : 100000)) / 1000.0;
            if (kind == 3) { /* collinear: distortion linear in bytes */
                b = 10 * (j + 1);
                d = 100.0 - (double)b;
            }
            I->c[i][j] = (npuc__bchoice){b, d};
        }
        I->it[i] = (npuc__bitem){I->c[i], m};
    }
}

/* Brute force: returns the least distortion within budget, or INFINITY. */
static double brute(const inst *I, uint64_t budget, uint64_t *minbytes) {
    size_t idx[8] = {0};
    double best = INFINITY;
    *minbytes = UINT64_MAX;
    for (;;) {
        uint64_t b = 0;
        double d = 0;
        for (size_t i = 0; i < I->n; i++) {
            b += I->c[i][idx[i]].bytes;
            d += I->c[i][idx[i]].dist;
        }
        if (b < *minbytes) *minbytes = b;
        if (b <= budget && d < best) best = d;
        size_t i = 0;
        while (i < I->n && ++idx[i] == I->it[i].n) idx[i++] = 0;
        if (i == I->n) break;
    }
    return best;
}

static void check_one(const inst *I, uint64_t budget, uint64_t work) {
    size_t pick[8];
    npuc__bresult r;
    uint64_t minb;
    const double opt = brute(I, budget, &minb);
    const int rc = npuc__budget_solve(I->it, I->n, budget, work, pick, &r);
    if (isinf(opt)) {
        assert_int_equal(rc, 1);
        assert_int_equal(r.bytes, minb);
        return;
    }
    assert_int_equal(rc, 0);
    uint64_t b = 0;
    double d = 0;
    for (size_t i = 0; i < I->n; i++) {
        assert_true(pick[i] < I->it[i].n);
        b += I->c[i][pick[i]].bytes;
        d += I->c[i][pick[i]].dist;
    }
    assert_true(b <= budget);
    assert_int_equal(b, r.bytes);
    assert_true(fabs(d - r.dist) <= 1e-9 * (1 + fabs(d)));
    assert_true(r.bound <= opt + 1e-9 * (1 + opt)); /* a lower bound is one */
    assert_true(d >= opt - 1e-9 * (1 + opt));
    if (r.exact || work == 0) {
        if (!(d <= opt + 1e-9 * (1 + opt)))
            fail_msg("n=%zu budget=%llu: solver %.9g > optimum %.9g (exact=%d)", I->n,
                     (unsigned long long)budget, d, opt, r.exact);
        assert_true(r.exact); /* these sizes finish within the default limit */
    } else {
        assert_true(d - r.gap <= opt + 1e-9 * (1 + opt));
    }
}

static void test_random_vs_brute(void **state) {
    (void)state;
    inst I;
    size_t count = 0;
    for (int kind = 0; kind < 4; kind++)
        for (int rep = 0; rep < 400; rep++) {
            const size_t n = 1 + rnd() % 6, maxc = 1 + rnd() % 6;
            make(&I, n, maxc, kind);
            uint64_t lo = 0, hi = 0;
            for (size_t i = 0; i < n; i++) {
                uint64_t mn = UINT64_MAX, mx = 0;
                for (size_t j = 0; j < I.it[i].n; j++) {
                    if (I.c[i][j].bytes < mn) mn = I.c[i][j].bytes;
                    if (I.c[i][j].bytes > mx) mx = I.c[i][j].bytes;
                }
                lo += mn;
                hi += mx;
            }
            const uint64_t budgets[] = {lo ? lo - 1 : 0, lo, lo + (hi - lo) / 3, lo + (hi - lo) / 2,
                                        hi - 1, hi, hi + 7, lo + rnd() % (hi - lo + 1)};
            for (size_t k = 0; k < sizeof budgets / sizeof budgets[0]; k++) {
                check_one(&I, budgets[k], 0);
                check_one(&I, budgets[k], 3); /* forced early stop */
                count++;
            }
        }
    print_message("budget solver: %zu instances checked against brute force\n", count);
}

static void test_bad_arguments(void **state) {
    (void)state;
    npuc__bchoice c[2] = {{10, 1.0}, {20, NAN}};
    npuc__bitem it[1] = {{c, 2}};
    size_t pick[1];
    npuc__bresult r;
    assert_int_equal(npuc__budget_solve(it, 1, 100, 0, pick, &r), -1);
    c[1].dist = -1;
    assert_int_equal(npuc__budget_solve(it, 1, 100, 0, pick, &r), -1);
    it[0].n = 0;
    assert_int_equal(npuc__budget_solve(it, 1, 100, 0, pick, &r), -1);
    npuc__bchoice big[1] = {{UINT64_MAX, 0}};
    npuc__bitem two[2] = {{big, 1}, {big, 1}};
    size_t p2[2];
    assert_int_equal(npuc__budget_solve(two, 2, UINT64_MAX, 0, p2, &r), -1);
    assert_int_equal(npuc__budget_solve(NULL, 0, 0, 0, NULL, &r), 0);
    assert_int_equal(r.bytes, 0);
}

/* A hand-worked case: two tensors, the second far more sensitive.  Budget
 * 12: {4 bits (4 B, 1.0), 8 bits (8 B, 0.1)} x {4 B, 9.0 / 8 B, 0.2}: the
 * optimum spends the extra bytes on the second (1.0 + 0.2 = 1.2). */
static void test_hand_worked(void **state) {
    (void)state;
    npuc__bchoice a[2] = {{4, 1.0}, {8, 0.1}}, b[2] = {{4, 9.0}, {8, 0.2}};
    npuc__bitem it[2] = {{a, 2}, {b, 2}};
    size_t pick[2];
    npuc__bresult r;
    assert_int_equal(npuc__budget_solve(it, 2, 12, 0, pick, &r), 0);
    assert_int_equal(pick[0], 0);
    assert_int_equal(pick[1], 1);
    assert_true(fabs(r.dist - 1.2) < 1e-12);
    assert_int_equal(r.bytes, 12);
    assert_true(r.exact);
}

/* Size of the problem the allocator meets: 1000 tensors, 42 schemes each
 * (int2..int8 at 6 granularities), convex-ish distortion.  The result must
 * be within budget and its gap small relative to the distortion; the time
 * is measured by bench, not here. */
static void test_large_instance(void **state) {
    (void)state;
    const size_t n = 1000, m = 42;
    npuc__bchoice *c = malloc(n * m * sizeof *c);
    npuc__bitem *it = malloc(n * sizeof *it);
    size_t *pick = malloc(n * sizeof *pick);
    assert_non_null(c);
    assert_non_null(it);
    assert_non_null(pick);
    uint64_t lo = 0, hi = 0;
    for (size_t i = 0; i < n; i++) {
        const double sens = 0.1 + (double)(rnd() % 1000) / 100.0;
        const uint64_t numel = 4096 * (1 + rnd() % 64);
        for (size_t j = 0; j < m; j++) {
            const unsigned bits = 2 + (unsigned)(j % 7), g = (unsigned)(j / 7);
            const uint64_t bytes = numel * bits / 8 + numel / (32u << g) * 2;
            c[i * m + j] = (npuc__bchoice){bytes, sens * ldexp(1.0, -2 * (int)bits) * (1.0 + 0.05 * g)};
        }
        lo += numel * 2 / 8 + numel / 1024 * 2;
        hi += numel + numel / 32 * 2;
        it[i] = (npuc__bitem){c + i * m, m};
    }
    npuc__bresult r;
    const uint64_t budget = lo + (hi - lo) / 3;
    assert_int_equal(npuc__budget_solve(it, n, budget, 0, pick, &r), 0);
    assert_true(r.bytes <= budget);
    assert_true(r.gap <= 1e-3 * r.dist + 1e-12);
    free(c);
    free(it);
    free(pick);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_worked),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_random_vs_brute),
        cmocka_unit_test(test_large_instance),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
