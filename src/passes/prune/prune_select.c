/*
 * prune_select.c - finding and zeroing the k smallest magnitudes of a tensor
 * (or of several) in linear time, with ties broken by index.
 *
 * The zero set is always described as (t, ties): every element whose
 * magnitude bits are below t, plus the first `ties` elements (in index
 * order) whose magnitude bits equal t.  That set holds exactly the k
 * smallest elements by (|w|, index), whatever the distribution and however
 * many ties there are.
 *
 * One tensor (npuc_prune_magnitude) takes the fast path, Floyd and Rivest's
 * idea of selecting from a sample first: 65,536 elements in 4,096 evenly
 * spread runs of 16 give a bracket [lo, hi) of magnitudes that holds the
 * k-th smallest with overwhelming probability (6 standard deviations of the
 * sample quantile on each side).  One parallel pass writes the output of
 * every element outside the bracket (below lo: zero, by SIMD compares on
 * the magnitude bits; above: copied), counts those below lo and collects
 * the indices and magnitudes inside it (2-3 % of them, compress-stored
 * without branches); a quickselect on the collected magnitudes then finds
 * t, and the collected elements below t, and the first ties equal to t,
 * are patched to zero.  One pass over the data, at memory speed.  When the bracket misses (a
 * distribution with a huge tie at the threshold, as in weights that were
 * once 8-bit codes) the exact radix selection below takes over: counting
 * passes over the top 11, middle 10 and low 10 magnitude bits narrow the
 * k-th magnitude down to one value, with no sort at all.  Global pruning
 * over many tensors uses the radix selection directly, streaming the tensors
 * once per level.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes/prune/prune_internal.h"

#define SAMPLE 65536u
#define SAMPLE_RUN 16u
#define SAMPLE_BLOCKS (SAMPLE / SAMPLE_RUN)
#define SMALL_N ((uint64_t)1 << 16) /* below this every element is a candidate */

static uint64_t nchunks(uint64_t n) { return (n + NPUC_PRUNE_CHUNK - 1) / NPUC_PRUNE_CHUNK; }

/* ------------------------------------------------------------ quickselect */

static void swap32(uint32_t *a, uint32_t *b) {
    uint32_t t = *a;
    *a = *b;
    *b = t;
}

static int cmp32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Rearranges a[0..n) so that a[k] is the value a sorted array would hold
 * there (Hoare's FIND with a median-of-three pivot).  After 2 log2(n) rounds
 * without convergence the remaining range is sorted, so the worst case is
 * O(n log n) (introselect). */
static void select_k(uint32_t *a, size_t n, size_t k) {
    size_t lo = 0, hi = n - 1;
    int budget = 2;
    for (size_t m = n; m > 1; m >>= 1) budget += 2;
    while (hi > lo) {
        if (budget-- <= 0) {
            qsort(a + lo, hi - lo + 1, sizeof *a, cmp32);
            return;
        }
        size_t mid = lo + (hi - lo) / 2;
        if (a[mid] < a[lo]) swap32(&a[mid], &a[lo]);
        if (a[hi] < a[lo]) swap32(&a[hi], &a[lo]);
        if (a[hi] < a[mid]) swap32(&a[hi], &a[mid]);
        const uint32_t p = a[mid];
        size_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] < p) i++;
            while (a[j] > p) j--;
            if (i <= j) {
                swap32(&a[i], &a[j]);
                i++;
                if (j == 0) break;
                j--;
            }
        }
        /* a[lo..j] <= p <= a[i..hi], and a[j+1..i-1] == p */
        if (k <= j) hi = j;
        else if (k >= i) lo = i;
        else return;
    }
}

/* The k-th smallest (0-based) of a[0..n), all in [lo, lo + span]: one
 * counting pass over the top 11 bits of a - lo, then a quickselect on the
 * one bin that holds it (a few hundred values).  tmp needs n entries.
 * Faster than quickselect on the whole, which branches on every element. */
static uint32_t select_in_range(const uint32_t *a, size_t n, size_t k, uint32_t lo, uint32_t span,
                                uint32_t *tmp) {
    int shift = 0;
    while (shift < 32 && (span >> shift) >= 2048) shift++;
    uint32_t hist[2048];
    memset(hist, 0, sizeof hist);
    for (size_t i = 0; i < n; i++) hist[(a[i] - lo) >> shift]++;
    size_t cum = 0;
    uint32_t bin = 0;
    while (cum + hist[bin] <= k) cum += hist[bin++];
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (((a[i] - lo) >> shift) == bin) tmp[m++] = a[i];
    select_k(tmp, m, k - cum);
    return tmp[k - cum];
}

/* ------------------------------------------------------------ helpers */

void npuc__prune_error(const npuc_prune_sums *s, uint64_t n, npuc_error_stats *err) {
    double kept = s->sum_w2 - s->sum_e2;
    if (kept < 0) kept = 0;
    npuc_error_from_sums(err, n, s->sum_w2, s->sum_e2, kept, kept, s->max_e, 0, 0);
}

npuc_status npuc__prune_bad_values(npuc_ctx *ctx, const char *name, uint64_t nbad) {
    if (name)
        return npuc_fail(ctx, NPUC_ERR_VALUE, "tensor '%s': %llu NaN or Inf values", name,
                         (unsigned long long)nbad);
    return npuc_fail(ctx, NPUC_ERR_VALUE, "%llu NaN or Inf values", (unsigned long long)nbad);
}

/* Zeroes the first `budget` elements with mag == t in x[0..n) (already
 * written to out with everything below t zeroed), adding their cost to s. */
static uint64_t zero_ties(const float *x, uint64_t n, uint32_t t, uint64_t budget, float *out,
                          npuc_prune_sums *s) {
    uint64_t done = 0;
    for (uint64_t i = 0; i < n && done < budget; i++) {
        if (npuc_mag(x[i]) != t) continue;
        const double d = (double)x[i];
        s->sum_e2 += d * d;
        if (fabs(d) > s->max_e) s->max_e = fabs(d);
        if (x[i] != 0.0f) s->zeros++; /* an existing zero was counted already */
        out[i] = 0.0f;
        done++;
    }
    return done;
}

npuc_status npuc__mag_apply(npuc_ctx *ctx, const float *x, uint64_t n, uint32_t t, uint64_t *ties,
                            float *out, npuc_prune_sums *s) {
    const npuc_nm_kernel_table *K = npuc_nm_kernels();
    const uint64_t nc = nchunks(n);
    const int nt = npuc__threads(ctx);
    npuc_prune_sums *cs = calloc(nc ? nc : 1, sizeof *cs);
    uint64_t *budget = calloc(nc ? nc : 1, sizeof *budget);
    if (!cs || !budget) {
        free(cs);
        free(budget);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    if (*ties) {
        /* Ties go to the lowest indices: count per chunk, then hand out. */
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
        for (uint64_t c = 0; c < nc; c++) {
            const uint64_t b = c * NPUC_PRUNE_CHUNK, e = b + NPUC_PRUNE_CHUNK < n ? b + NPUC_PRUNE_CHUNK : n;
            budget[c] = K->mag_count_eq(x + b, (size_t)(e - b), t);
        }
        for (uint64_t c = 0; c < nc; c++) {
            const uint64_t give = budget[c] < *ties ? budget[c] : *ties;
            budget[c] = give;
            *ties -= give;
        }
    }
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (uint64_t c = 0; c < nc; c++) {
        const uint64_t b = c * NPUC_PRUNE_CHUNK, e = b + NPUC_PRUNE_CHUNK < n ? b + NPUC_PRUNE_CHUNK : n;
        K->mag_zero_below(x + b, (size_t)(e - b), t, out + b, &cs[c]);
        if (budget[c]) zero_ties(x + b, e - b, t, budget[c], out + b, &cs[c]);
    }
    for (uint64_t c = 0; c < nc; c++) {
        if (!isfinite(cs[c].sum_w2)) { /* float-lane sums overflowed: exact sums from the reference */
            const uint64_t b = c * NPUC_PRUNE_CHUNK, e = b + NPUC_PRUNE_CHUNK < n ? b + NPUC_PRUNE_CHUNK : n;
            memset(&cs[c], 0, sizeof cs[c]);
            npuc__mag_zero_below_ref(x + b, (size_t)(e - b), t, out + b, &cs[c]);
            if (budget[c]) zero_ties(x + b, e - b, t, budget[c], out + b, &cs[c]);
        }
        npuc_prune_sums_add(s, &cs[c]);
    }
    free(cs);
    free(budget);
    return NPUC_OK;
}

/* ------------------------------------------------------------ radix selection */

/* One counting level over every tensor of src: hist[2048] of
 * (mag >> bin_shift) & 2047 over the elements with (mag >> sel_shift) == sel. */
static npuc_status radix_level(npuc_ctx *ctx, const npuc__mag_src *src, int sel_shift, uint32_t sel,
                               int bin_shift, uint64_t *hist, uint64_t *nbad) {
    const npuc_nm_kernel_table *K = npuc_nm_kernels();
    const int nt = npuc__threads(ctx);
    memset(hist, 0, 2048 * sizeof *hist);
    *nbad = 0;
    for (size_t a = 0; a < src->count; a++) {
        const float *x;
        uint64_t n;
        npuc_status st = src->get(src->u, a, &x, &n);
        if (st != NPUC_OK) return st;
        const uint64_t nc = nchunks(n);
        uint32_t *h = calloc((size_t)(nc ? nc : 1) * 2048, sizeof *h);
        uint64_t *bad = calloc(nc ? nc : 1, sizeof *bad);
        if (!h || !bad) {
            free(h);
            free(bad);
            if (src->put) src->put(src->u, a);
            return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        }
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
        for (uint64_t c = 0; c < nc; c++) {
            const uint64_t b = c * NPUC_PRUNE_CHUNK, e = b + NPUC_PRUNE_CHUNK < n ? b + NPUC_PRUNE_CHUNK : n;
            bad[c] = K->mag_hist(x + b, (size_t)(e - b), sel_shift, sel, bin_shift, h + c * 2048);
        }
        for (uint64_t c = 0; c < nc; c++) {
            *nbad += bad[c];
            for (int i = 0; i < 2048; i++) hist[i] += h[c * 2048 + i];
        }
        free(h);
        free(bad);
        if (src->put) src->put(src->u, a);
    }
    return NPUC_OK;
}

/* The bin holding the need-th smallest (need >= 1) counted element, and how
 * many counted elements lie in lower bins. */
static int radix_find(const uint64_t *hist, uint64_t need, uint64_t *below) {
    uint64_t cum = 0;
    for (int b = 0; b < 2048; b++) {
        if (cum + hist[b] >= need) {
            *below = cum;
            return b;
        }
        cum += hist[b];
    }
    *below = cum;
    return -1;
}

npuc_status npuc__mag_select_radix(npuc_ctx *ctx, const npuc__mag_src *src, uint64_t k, uint32_t *t,
                                   uint64_t *ties, uint64_t *nbad) {
    uint64_t hist[2048], below, bad2;
    npuc_status st;
    *t = 0;
    *ties = 0;
    /* Level 1 also counts NaN/Inf (every element is visited). */
    if ((st = radix_level(ctx, src, 31, 0, 20, hist, nbad)) != NPUC_OK) return st;
    if (*nbad || k == 0) return NPUC_OK;
    uint64_t need = k;
    int b1 = radix_find(hist, need, &below);
    if (b1 < 0) return npuc_fail(ctx, NPUC_ERR_INTERNAL, "radix selection: k beyond the element count");
    need -= below;
    if ((st = radix_level(ctx, src, 20, (uint32_t)b1, 10, hist, &bad2)) != NPUC_OK) return st;
    int b2 = radix_find(hist, need, &below);
    if (b2 < 0) return npuc_fail(ctx, NPUC_ERR_INTERNAL, "radix selection: level 2 lost the element");
    need -= below;
    const uint32_t sel3 = ((uint32_t)b1 << 10) | ((uint32_t)b2 & 1023u);
    if ((st = radix_level(ctx, src, 10, sel3, 0, hist, &bad2)) != NPUC_OK) return st;
    int b3 = radix_find(hist, need, &below);
    if (b3 < 0) return npuc_fail(ctx, NPUC_ERR_INTERNAL, "radix selection: level 3 lost the element");
    need -= below;
    *t = (sel3 << 10) | ((uint32_t)b3 & 1023u);
    *ties = need;
    return NPUC_OK;
}

/* ------------------------------------------------------------ one tensor */

typedef struct one_src {
    const float *x;
    uint64_t n;
} one_src;

static npuc_status one_get(void *u, size_t i, const float **x, uint64_t *n) {
    one_src *o = u;
    (void)i;
    *x = o->x;
    *n = o->n;
    return NPUC_OK;
}

/* The sampled bracket: fills *lo, *hi (lo <= hi) so that the k-th smallest
 * magnitude very probably lies in [lo, hi), and *expect, the expected
 * fraction of elements inside. */
static npuc_status sample_bracket(npuc_ctx *ctx, const float *x, uint64_t n, uint64_t k, uint32_t *lo,
                                  uint32_t *hi, double *expect) {
    if (n <= SMALL_N) { /* every element is a candidate */
        *lo = 0;
        *hi = NPUC_MAG_BAD;
        *expect = 1.0;
        return NPUC_OK;
    }
    uint32_t *s = malloc(SAMPLE * sizeof *s);
    if (!s) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    /* SAMPLE_BLOCKS runs of SAMPLE_RUN adjacent elements (one cache line
     * each), evenly spread: 16x fewer cache misses than single elements. */
    const uint64_t step = n / SAMPLE_BLOCKS;
    for (uint64_t b = 0; b < SAMPLE_BLOCKS; b++)
        for (uint64_t j = 0; j < SAMPLE_RUN; j++) s[b * SAMPLE_RUN + j] = npuc_mag(x[b * step + j]);
    const double q = (double)k / (double)n;
    /* 6 standard deviations of an i.i.d. sample quantile, the extra margin
     * for runs of neighbours being alike. */
    const double d = 6.0 * sqrt(q * (1.0 - q) / SAMPLE) + 8.0 / SAMPLE;
    const double ql = q - d, qh = q + d;
    if (ql <= 0) *lo = 0;
    else {
        size_t r = (size_t)(ql * SAMPLE);
        select_k(s, SAMPLE, r);
        *lo = s[r];
    }
    if (qh >= 1) *hi = NPUC_MAG_BAD;
    else {
        size_t r = (size_t)(qh * SAMPLE);
        if (r >= SAMPLE) r = SAMPLE - 1;
        select_k(s, SAMPLE, r);
        *hi = s[r] >= NPUC_MAG_BAD ? NPUC_MAG_BAD : s[r] + 1;
        if (*hi < *lo) *hi = *lo;
    }
    *expect = (qh < 1 ? qh : 1) - (ql > 0 ? ql : 0);
    free(s);
    return NPUC_OK;
}

/* Zeroes those of a chunk's candidates (idx relative to the chunk start b,
 * magnitudes mag) below t and the first `ties` equal to t, adding their
 * cost to s. */
static void patch_chunk(float *out, uint64_t b, const uint32_t *idx, const uint32_t *mag, uint64_t ncand,
                        uint32_t t, uint64_t ties, npuc_prune_sums *s) {
    for (uint64_t j = 0; j < ncand; j++) {
        if (!(mag[j] < t || (mag[j] == t && ties > 0))) continue;
        if (mag[j] == t) ties--;
        float f;
        memcpy(&f, &mag[j], sizeof f); /* |x| */
        const double d = (double)f;
        s->sum_e2 += d * d;
        if (d > s->max_e) s->max_e = d;
        if (mag[j] != 0) s->zeros++; /* an existing zero was counted already */
        out[b + idx[j]] = 0.0f;
    }
}

/* The fast path, one pass over the data: with the sampled bracket [lo, hi)
 * the pass already writes the output for every element outside it (below
 * lo: zero; from hi up: copied) and collects the ~2 % inside; once the pass
 * has counted how many lie below lo, the threshold among the collected ones
 * is known and they are patched.  Returns NPUC_OK with *done = 0 when the
 * bracket missed and the radix selection must run instead (it rewrites
 * all of out). */
static npuc_status bracket_prune(npuc_ctx *ctx, const float *x, uint64_t n, uint64_t k, float *out,
                                 npuc_prune_sums *sums, int *done, uint64_t *nbad_out) {
    const npuc_nm_kernel_table *K = npuc_nm_kernels();
    const int nt = npuc__threads(ctx);
    const uint64_t nc = nchunks(n);
    uint32_t lo = 0, hi = NPUC_MAG_BAD;
    double expect = 1.0;
    npuc_status st = sample_bracket(ctx, x, n, k, &lo, &hi, &expect);
    if (st != NPUC_OK) return st;
    *done = 0;
    /* Room per chunk: four times the expected count, at least 4096. */
    uint64_t cap = (uint64_t)(4.0 * expect * (double)NPUC_PRUNE_CHUNK) + 4096;
    if (cap > NPUC_PRUNE_CHUNK) cap = NPUC_PRUNE_CHUNK;
    if (cap > n) cap = n;
    uint32_t *idx = malloc((size_t)(nc * cap) * sizeof *idx), *mag = malloc((size_t)(nc * cap) * sizeof *mag);
    uint64_t *below = calloc(nc, sizeof *below), *mid = calloc(nc, sizeof *mid), *bad = calloc(nc, sizeof *bad);
    uint64_t *ties = calloc(nc, sizeof *ties);
    npuc_prune_sums *cs = calloc(nc, sizeof *cs);
    uint32_t *tmp = NULL;
    if (!idx || !mag || !below || !mid || !bad || !ties || !cs) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        goto done;
    }
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (uint64_t c = 0; c < nc; c++) {
        const uint64_t b = c * NPUC_PRUNE_CHUNK, e = b + NPUC_PRUNE_CHUNK < n ? b + NPUC_PRUNE_CHUNK : n;
        below[c] = K->mag_split(x + b, (size_t)(e - b), lo, hi, out + b, idx + c * cap, mag + c * cap, (size_t)cap,
                                &mid[c], &bad[c], &cs[c]);
    }
    uint64_t c_lo = 0, c_mid = 0, nbad = 0;
    int overflow = 0;
    for (uint64_t c = 0; c < nc; c++) {
        c_lo += below[c];
        c_mid += mid[c];
        nbad += bad[c];
        overflow |= mid[c] > cap;
    }
    *nbad_out = nbad;
    if (nbad || overflow || c_lo > k || c_lo + c_mid < k) goto done; /* not done: radix */

    /* The threshold among the candidates, and each chunk's share of the
     * ties (the lowest indices first). */
    const uint64_t r = k - c_lo;
    uint32_t t = lo;
    if (r > 0) {
        tmp = malloc((size_t)c_mid * sizeof *tmp);
        if (!tmp) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
        uint32_t *all = calloc((size_t)c_mid, sizeof *all); /* calloc: quiets gcc -O3 maybe-uninitialized */
        if (!all) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
        uint64_t p = 0;
        for (uint64_t c = 0; c < nc; c++) {
            memcpy(all + p, mag + c * cap, (size_t)mid[c] * sizeof *all);
            p += mid[c];
        }
        t = select_in_range(all, (size_t)c_mid, (size_t)(r - 1), lo, hi - lo, tmp);
        uint64_t less = 0;
        for (uint64_t j = 0; j < c_mid; j++) less += all[j] < t;
        free(all);
        uint64_t left = r - less;
        for (uint64_t c = 0; c < nc && left; c++) {
            uint64_t eq = 0;
            for (uint64_t j = 0; j < mid[c]; j++) eq += mag[c * cap + j] == t;
            ties[c] = eq < left ? eq : left;
            left -= ties[c];
        }
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
        for (uint64_t c = 0; c < nc; c++)
            patch_chunk(out, c * NPUC_PRUNE_CHUNK, idx + c * cap, mag + c * cap, mid[c], t, ties[c], &cs[c]);
    }
    for (uint64_t c = 0; c < nc; c++) {
        if (!isfinite(cs[c].sum_w2)) { /* float-lane sums overflowed: exact sums from the reference */
            const uint64_t b = c * NPUC_PRUNE_CHUNK, e = b + NPUC_PRUNE_CHUNK < n ? b + NPUC_PRUNE_CHUNK : n;
            uint64_t m2, b2;
            memset(&cs[c], 0, sizeof cs[c]);
            npuc_nm_kernels_ref()->mag_split(x + b, (size_t)(e - b), lo, hi, out + b, idx + c * cap, mag + c * cap,
                                             (size_t)cap, &m2, &b2, &cs[c]);
            if (r > 0) patch_chunk(out, b, idx + c * cap, mag + c * cap, mid[c], t, ties[c], &cs[c]);
        }
        npuc_prune_sums_add(sums, &cs[c]);
    }
    *done = 1;
done:
    free(idx);
    free(mag);
    free(below);
    free(mid);
    free(bad);
    free(ties);
    free(tmp);
    free(cs);
    return st;
}

npuc_status npuc_prune_magnitude(npuc_ctx *ctx, const float *w, uint64_t n, uint64_t k, float *out,
                                 npuc_prune_stats *st_out) {
    npuc_prune_sums s;
    memset(&s, 0, sizeof s);
    if (st_out) memset(st_out, 0, sizeof *st_out);
    if (k > n)
        return npuc_fail(ctx, NPUC_ERR_ARG, "cannot zero %llu of %llu elements", (unsigned long long)k,
                         (unsigned long long)n);
    if (n && (!w || !out)) return npuc_fail(ctx, NPUC_ERR_ARG, "NULL tensor data");
    if (n && out < w + n && w < out + n) return npuc_fail(ctx, NPUC_ERR_ARG, "output overlaps the input");
    int done = 0;
    uint64_t nbad = 0;
    npuc_status st = NPUC_OK;
    if (n) st = bracket_prune(ctx, w, n, k, out, &s, &done, &nbad);
    if (st != NPUC_OK) return st;
    if (nbad) return npuc__prune_bad_values(ctx, NULL, nbad);
    if (n && !done) {
        one_src o = {w, n};
        npuc__mag_src src = {1, one_get, NULL, &o};
        uint32_t t;
        uint64_t ties;
        if ((st = npuc__mag_select_radix(ctx, &src, k, &t, &ties, &nbad)) != NPUC_OK) return st;
        if (nbad) return npuc__prune_bad_values(ctx, NULL, nbad);
        memset(&s, 0, sizeof s);
        if ((st = npuc__mag_apply(ctx, w, n, t, &ties, out, &s)) != NPUC_OK) return st;
    }
    if (st_out) {
        st_out->n = n;
        st_out->k = k;
        st_out->zeros = s.zeros;
        st_out->threshold = (float)s.max_e;
        npuc__prune_error(&s, n, &st_out->err);
    }
    return NPUC_OK;
}
