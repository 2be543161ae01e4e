/*
 * range_percentile.c - the percentile range: the P-th percentile of |x|
 * (symmetric) or the (100-P)-th and P-th percentiles of x (asymmetric).
 *
 * Definition: NumPy's default ("linear", Hyndman & Fan type 7).  With the
 * values sorted as v[0] <= ... <= v[n-1], the p-th percentile is
 *     h = (n - 1) * p / 100,  k = floor(h),
 *     value = v[k] + (h - k) * (v[k+1] - v[k])      (v[k] when k = n - 1),
 * computed in double and rounded once to float.  So percentile=100 is the
 * maximum, and for 0..9999 percentile=99 is 9899.01.  For an asymmetric
 * range the lower end is the min(P, 100-P)-th percentile and the upper end
 * the max(P, 100-P)-th, so lo <= hi for any P.
 *
 * Only v[k] and v[k+1] are needed, so there is no sort: a selection
 * (introselect) on a scratch copy puts v[k] in place with everything
 * smaller before it and everything larger after, and v[k+1] is the minimum
 * of what follows.  The asymmetric upper end is selected inside the part
 * that follows the lower one.  Pivots are deterministic: median of three
 * (Tukey's ninther above 256 elements), with Hoare's partition, whose scans
 * stop on values equal to the pivot so that runs of equal values (zeros of
 * a pruned layer) split evenly; after 2 log2(n) + 8 rounds the pivot
 * becomes the median of medians of five (Blum, Floyd, Pratt, Rivest,
 * Tarjan), which keeps the whole selection O(n) whatever the input order.
 * Neither pivot can be the unique maximum of the range, so every round
 * shrinks it.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "range_internal.h"

size_t npuc__range_percentile_scratch(size_t n) {
    if (n > (SIZE_MAX - NPUC_RANGE_ALIGN) / sizeof(float)) return SIZE_MAX;
    return n * sizeof(float) + NPUC_RANGE_ALIGN;
}

static inline void swapf(float *a, size_t i, size_t j) {
    float t = a[i];
    a[i] = a[j];
    a[j] = t;
}

/* Median of three values (one of them, so a pivot always exists in the array). */
static inline float med3(float a, float b, float c) {
    if (a < b) {
        if (b < c) return b;
        return a < c ? c : a;
    }
    if (a < c) return a;
    return b < c ? c : b;
}

static void insertion_sort(float *a, size_t n) {
    for (size_t i = 1; i < n; i++) {
        float v = a[i];
        size_t j = i;
        while (j > 0 && a[j - 1] > v) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = v;
    }
}

static void select_kth(float *a, size_t n, size_t k);

/* Median of the medians of groups of five: moves each group's median to the
 * front of a and selects their median recursively.  Guarantees that at least
 * ~30% of the elements lie on each side of the pivot. */
static float mom_pivot(float *a, size_t n) {
    size_t g = 0;
    for (size_t i = 0; i + 5 <= n; i += 5, g++) {
        insertion_sort(a + i, 5);
        swapf(a, g, i + 2);
    }
    if (g == 0) {
        insertion_sort(a, n);
        return a[n / 2];
    }
    select_kth(a, g, g / 2);
    return a[g / 2];
}

/* Rearranges a[0..n) so that a[k] holds the k-th smallest value (0-based),
 * a[0..k) <= a[k] <= a[k+1..n). */
static void select_kth(float *a, size_t n, size_t k) {
    size_t lo = 0, hi = n; /* the k-th lies in [lo, hi) */
    unsigned budget = 8;
    for (size_t m = n; m > 1; m >>= 1) budget += 2;
    while (hi - lo > 16) {
        const size_t m = hi - lo;
        float *s = a + lo;
        float p;
        if (budget > 0) {
            budget--;
            if (m > 256) {
                size_t e = m / 8;
                p = med3(med3(s[0], s[e], s[2 * e]), med3(s[3 * e], s[4 * e], s[5 * e]),
                         med3(s[6 * e], s[7 * e], s[m - 1]));
            } else {
                p = med3(s[0], s[m / 2], s[m - 1]);
            }
        } else {
            p = mom_pivot(s, m);
        }
        /* Hoare's partition around the value p (which is in s).  After
         * the first swap each scan has a sentinel on its side, before it p
         * itself stops both. */
        size_t i = 0, j = m - 1;
        for (;;) {
            while (s[i] < p) i++;
            while (s[j] > p) j--;
            if (i >= j) break;
            float t = s[i];
            s[i] = s[j];
            s[j] = t;
            i++;
            j--;
        }
        /* Now s[0..j] <= p <= s[j+1..m) with 0 <= j <= m - 2: continue in
         * the part that holds k. */
        if (lo + j + 1 <= k)
            lo = lo + j + 1;
        else
            hi = lo + j + 1;
    }
    insertion_sort(a + lo, hi - lo);
}

/* The value at fractional sorted position h in [0, n-1] of a[0..n) by the
 * linear definition above, leaving a[0..k) <= a[k] <= a[k+1..n) for
 * k = floor(h). */
static double value_at(float *a, size_t n, double h) {
    if (!(h > 0)) h = 0;
    if (h > (double)(n - 1)) h = (double)(n - 1);
    size_t k = (size_t)h;
    if (k > n - 1) k = n - 1;
    double frac = h - (double)k;
    select_kth(a, n, k);
    double v = a[k];
    if (frac > 0 && k + 1 < n) {
        float nx = a[k + 1];
        for (size_t i = k + 2; i < n; i++) nx = a[i] < nx ? a[i] : nx;
        v += frac * ((double)nx - v);
    }
    return v;
}

void npuc__range_percentile(const float *x, size_t n, double pct, int symmetric, float lo0,
                            float hi0, float *lo, float *hi, void *scratch) {
    (void)lo0;
    (void)hi0;
    float *a = npuc__range_align(scratch);
    if (symmetric) {
        for (size_t i = 0; i < n; i++) a[i] = fabsf(x[i]);
        float t = (float)value_at(a, n, (double)(n - 1) * pct / 100.0);
        *lo = -t;
        *hi = t;
        return;
    }
    memcpy(a, x, n * sizeof *a);
    double plo = pct < 50.0 ? pct : 100.0 - pct;
    double hl = (double)(n - 1) * plo / 100.0;
    double hh = (double)(n - 1) * (100.0 - plo) / 100.0;
    *lo = (float)value_at(a, n, hl);
    /* a[k..n) (k = floor(hl)) now holds the n - k largest values and the
     * upper position is at or after k, so it is selected in there. */
    size_t k = (size_t)hl;
    if (k > n - 1) k = n - 1;
    *hi = (float)value_at(a + k, n - k, hh - (double)k);
}
