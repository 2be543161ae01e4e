/*
 * bench_budget_solve.c - time of the budget solver (issue 32's goal: under
 * 10 ms for 1000 tensors).
 *
 *   bench_budget_solve [TENSORS [SCHEMES [REPS]]]
 *
 * Builds TENSORS items (default 1000) of SCHEMES choices (default 42:
 * int2..int8 at six granularities) whose distortion falls as 4^-bits times
 * a random sensitivity, as measured distortions do, and solves them at
 * five budgets between the smallest and the largest reachable size.
 * Prints, per budget, the median wall time of REPS runs (default 21), the
 * nodes the branch and bound visited, whether it proved optimality, and
 * the relative gap otherwise.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "passes/quantize/budget_solve.h"

static uint64_t st = 88172645463325252ull;
static uint64_t rnd(void) {
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    return st;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmpd(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000;
    const size_t m = argc > 2 ? strtoul(argv[2], NULL, 10) : 42;
    const int reps = argc > 3 ? atoi(argv[3]) : 21;
    if (n == 0 || m == 0 || reps <= 0) return 2;
    npuc__bchoice *c = malloc(n * m * sizeof *c);
    npuc__bitem *it = malloc(n * sizeof *it);
    size_t *pick = malloc(n * sizeof *pick);
    double *t = malloc((size_t)reps * sizeof *t);
    if (!c || !it || !pick || !t) return 1;
    uint64_t lo = 0, hi = 0;
    for (size_t i = 0; i < n; i++) {
        const double sens = 0.1 + (double)(rnd() % 1000) / 100.0;
        const uint64_t numel = 4096 * (1 + rnd() % 64);
        uint64_t mn = UINT64_MAX, mx = 0;
        for (size_t j = 0; j < m; j++) {
            const unsigned bits = 2 + (unsigned)(j % 7), g = (unsigned)(j / 7) % 6;
            const uint64_t bytes = numel * bits / 8 + numel / (32u << g) * 2;
            const double noise = 1.0 + 0.02 * (double)(rnd() % 100) / 100.0;
            c[i * m + j] = (npuc__bchoice){bytes, sens * ldexp(1.0, -2 * (int)bits) * (1.0 + 0.05 * g) * noise};
            if (bytes < mn) mn = bytes;
            if (bytes > mx) mx = bytes;
        }
        lo += mn;
        hi += mx;
        it[i] = (npuc__bitem){c + i * m, m};
    }
    printf("budget solver: %zu tensors x %zu schemes, %d runs per budget (median)\n", n, m, reps);
    printf("%-10s %12s %10s %8s %6s %10s\n", "budget", "bytes", "ms", "nodes", "exact", "gap/dist");
    for (int k = 1; k <= 5; k++) {
        const uint64_t budget = lo + (hi - lo) * (uint64_t)k / 6;
        npuc__bresult r = {0};
        for (int q = 0; q < reps; q++) {
            const double t0 = now();
            if (npuc__budget_solve(it, n, budget, 0, pick, &r) != 0) return 1;
            t[q] = now() - t0;
        }
        qsort(t, (size_t)reps, sizeof *t, cmpd);
        printf("%d/6        %12llu %10.3f %8llu %6d %10.2e\n", k, (unsigned long long)r.bytes, 1e3 * t[reps / 2],
               (unsigned long long)r.nodes, r.exact, r.dist > 0 ? r.gap / r.dist : 0.0);
    }
    free(c);
    free(it);
    free(pick);
    free(t);
    return 0;
}
