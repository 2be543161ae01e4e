/*
 * range_entropy.c - the entropy range: TensorRT's KL-divergence calibration
 * (Migacz, "8-bit Inference with TensorRT", GTC 2017), as in MXNet's
 * _get_optimal_threshold, applied to one group's weights.
 *
 * A 2048-bin histogram h of |x| over [0, max|x|].  For each candidate
 * i = 128..2048:
 *   P = h[0..i) with the outliers sum(h[i..)) added to P[i-1];
 *   Q = h[0..i) (outliers not folded) merged into nq = 2^(bits-1) levels,
 *       bin j going to level floor(j * nq / i) (the even split of
 *       pytorch-quantization; MXNet's integer split leaves the remainder in
 *       the last level), and each level's total spread evenly over the bins
 *       of that level where P is nonzero (MXNet's is_nonzeros);
 *   KL(P || Q) with both normalised, over the bins where P > 0.  Q can be
 *       zero there only in the last level, when it holds no values but the
 *       folded outliers; that bin gets q = 1e-4 counts (MXNet smooths with
 *       eps = 1e-4; its matching removal of 1e-4 x zero bins / nonzero
 *       bins from every other bin is left out, a change of O(1e-4 x bins / n)).
 * The smallest KL wins (the first, i.e. the smallest threshold, on ties)
 * and the threshold is t = (i + 0.5) * bin width (TensorRT's formula),
 * capped at max|x|.  Symmetric: [-t, t].  Asymmetric: the minmax range
 * clamped to [-t, t], i.e. [max(lo, -t), min(hi, t)], so a side that does
 * not reach t keeps its extreme.  With nq >= i (16-bit codes) every bin is
 * its own level.
 *
 * Speed.  The direct loop costs O(i) per candidate, ~2 million bin visits
 * per group.  Here a candidate costs O(levels): with prefix sums over the
 * histogram of counts C, of nonzero bins Z and of h log h,
 *     N * KL = sum_j P_j log P_j - sum_levels S'_L log(S_L / z_L) + N log(M / N)
 * where S_L and z_L are a level's count and nonzero bins (from C and Z),
 * S'_L its P mass (S_L plus the outliers in the last level), M = C[i] the
 * mass of Q and N the group size.  Levels past the last nonzero bin below
 * i - 1 hold nothing and are skipped; x log x and log z come from tables
 * (x log x up to the largest count a level can hold, at most 4096).  With
 * bits = 8 that is at most 1921 x 128 level visits, each a few loads and
 * adds without branches.
 *
 * Groups under ENT_MIN_N values make a meaningless 2048-bin histogram (most
 * bins 0 or 1): they use the MSE method instead.
 *
 * KL scores the shape of the distribution, not the squared error: a few far
 * outliers carry almost no probability mass, so they are clipped to the
 * bulk's tail, which at 8 bits can cost more squared error than minmax (five
 * values at 50 sigma in 65536 do; tests/unit/test_calib.c works it out).
 * Use mse when the squared error is what counts.
 *
 * Activation calibration (act_entropy.c) runs the same search on a histogram
 * merged over every chunk of samples, in TensorRT's EntropyCalibration2
 * variant (npuc__entropy_search with trt = 1, docs/calibration-activations.md):
 * a candidate whose last bin is empty while outliers are folded into it has
 * an infinite KL there (pytorch-quantization's scipy.stats.entropy), so it
 * is skipped rather than smoothed, and ties go to the largest candidate.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "range_internal.h"

#define ENT_BINS NPUC_KL_BINS
#define ENT_START NPUC_KL_START
#define ENT_MIN_N 512
#define ENT_EPS 1e-4
/* x log x is tabulated for counts up to this (larger ones call log). */
#define ENT_XLOGX_MAX 4096

/* Scratch of npuc__entropy_search: the prefix arrays and tables below. */
size_t npuc__entropy_search_scratch(void) {
    return (ENT_BINS + 1) * sizeof(int64_t) +            /* C */
           (ENT_BINS + 1) * sizeof(double) +             /* HS */
           (ENT_BINS + 1) * sizeof(int32_t) * 2 +        /* Z, LNZ */
           (ENT_BINS + 2) * sizeof(double) +             /* log z */
           (ENT_XLOGX_MAX + 1) * sizeof(double) +        /* x log x */
           7 * NPUC_RANGE_ALIGN;
}

size_t npuc__range_entropy_scratch(size_t n, int bits, int symmetric) {
    size_t mse = npuc__range_mse_scratch(n, bits, symmetric);
    if (n < ENT_MIN_N) return mse;
    size_t own = ENT_BINS * sizeof(uint64_t) + NPUC_RANGE_ALIGN + npuc__entropy_search_scratch();
    return own > mse ? own : mse;
}

static inline double xlogx(int64_t v) { return v > 0 ? (double)v * log((double)v) : 0.0; }

/* The KL search over a 2048-bin histogram h (see the top of this file for
 * the rules; trt selects TensorRT's EntropyCalibration2 variant: a last bin
 * whose Q is empty makes the candidate's KL infinite instead of smoothed,
 * and ties go to the largest candidate).  Returns the best candidate i in
 * [ENT_START, ENT_BINS] and its KL in *kl_best (INFINITY with the returned
 * ENT_BINS when no candidate is finite). */
int npuc__entropy_search(const uint64_t *h, int bits, int trt, double *kl_best, void *scratch) {
    unsigned char *p = npuc__range_align(scratch);
    int64_t *C = (int64_t *)(void *)p;
    p = npuc__range_align(p + (ENT_BINS + 1) * sizeof *C);
    double *HS = (double *)(void *)p;
    p = npuc__range_align(p + (ENT_BINS + 1) * sizeof *HS);
    int32_t *Z = (int32_t *)(void *)p;
    p = npuc__range_align(p + (ENT_BINS + 1) * sizeof *Z);
    int32_t *LNZ = (int32_t *)(void *)p; /* LNZ[i] = last nonzero bin below i, or -1 */
    p = npuc__range_align(p + (ENT_BINS + 1) * sizeof *LNZ);
    double *LZ = (double *)(void *)p; /* LZ[z] = log z, LZ[0] = 0 */
    p = npuc__range_align(p + (ENT_BINS + 2) * sizeof *LZ);
    double *XL = (double *)(void *)p; /* XL[s] = s log s */

    C[0] = 0;
    HS[0] = 0.0;
    Z[0] = 0;
    LNZ[0] = -1;
    for (int j = 0; j < ENT_BINS; j++) {
        C[j + 1] = C[j] + (int64_t)h[j];
        HS[j + 1] = HS[j] + xlogx((int64_t)h[j]);
        Z[j + 1] = Z[j] + (h[j] != 0);
        LNZ[j + 1] = h[j] ? j : LNZ[j];
    }

    const int32_t nq = (int32_t)1 << (bits - 1);
    /* The largest level: at most ceil(2048 / nq) bins (+1 nonzero bin for the
     * folded outliers); tabulate log z that far, and x log x up to the
     * largest count such a run of bins holds. */
    const int32_t zmax = (nq < ENT_BINS ? ENT_BINS / nq : 1) + 2;
    LZ[0] = 0.0;
    for (int32_t z = 1; z <= zmax && z <= ENT_BINS + 1; z++) LZ[z] = log((double)z);
    int64_t smax = 0;
    for (int j = 0; j + zmax <= ENT_BINS + 1; j++) {
        int64_t w = C[j + zmax - 1] - C[j];
        smax = w > smax ? w : smax;
    }
    const int64_t nxl = smax < ENT_XLOGX_MAX ? smax : ENT_XLOGX_MAX;
    for (int64_t v = 0; v <= nxl; v++) XL[v] = xlogx(v);

    const int64_t N = C[ENT_BINS];
    const double logN = log((double)N);
    double best = INFINITY;
    int best_i = ENT_BINS;
    for (int32_t i = ENT_START; i <= ENT_BINS; i++) {
        const int64_t M = C[i];
        if (M <= 0) continue;
        const int64_t O = N - M;
        /* TensorRT: the folded outliers sit in a bin Q leaves empty. */
        if (trt && h[i - 1] == 0 && O > 0) continue;
        const double plogp = HS[i - 1] + xlogx((int64_t)h[i - 1] + O);
        /* Levels: nl of them.  With nl = nq (a power of two, below i) level L
         * covers bins [ceil(L i / nq), ceil((L+1) i / nq)); with nl = i every
         * bin is a level. */
        const int32_t nl = nq < i ? nq : i;
        const int one = nl == i;
        int shift = 0;
        while (((int32_t)1 << shift) < nl) shift++;
        const int32_t lnz = LNZ[i - 1];
        /* Past the level of the last nonzero bin below i - 1 every level but
         * the last is empty. */
        int32_t lend = lnz < 0 ? -1 : (int32_t)(((int64_t)lnz * nl) / i);
        if (lend > nl - 2) lend = nl - 2;
        double plogq = 0.0;
        int32_t a = 0;
        for (int32_t L = 0; L <= lend; L++) {
            const int32_t b = one ? L + 1 : (int32_t)(((int64_t)(L + 1) * i + nl - 1) >> shift);
            const int64_t S = C[b] - C[a];
            const double xs = S <= nxl ? XL[S] : xlogx(S);
            plogq += xs - (double)S * LZ[Z[b] - Z[a]];
            a = b;
        }
        {
            /* The last level [a, i) holds P[i-1] with the outliers. */
            a = one ? i - 1 : (int32_t)(((int64_t)(nl - 1) * i + nl - 1) >> shift);
            const int64_t S = C[i] - C[a];
            int32_t z = Z[i] - Z[a];
            if (h[i - 1] == 0 && O > 0) z++;
            if (S > 0)
                plogq += (double)(S + O) * (log((double)S) - LZ[z]);
            else if (O > 0)
                plogq += (double)O * log(ENT_EPS);
        }
        const double kl = (plogp - plogq) / (double)N + log((double)M) - logN;
        if (kl < best || (trt && kl == best)) {
            best = kl;
            best_i = i;
        }
    }
    *kl_best = best;
    return best_i;
}

void npuc__range_entropy(const float *x, size_t n, int bits, int symmetric, float lo0, float hi0,
                         float *lo, float *hi, void *scratch) {
    if (n < ENT_MIN_N) {
        npuc__range_mse(x, n, bits, symmetric, lo0, hi0, lo, hi, scratch);
        return;
    }
    *lo = lo0;
    *hi = hi0;
    const float amax = fmaxf(fabsf(lo0), fabsf(hi0));
    const float invw = (float)ENT_BINS / amax;
    if (!(amax > 0.0f) || !(invw <= FLT_MAX)) return;

    uint64_t *h = (uint64_t *)npuc__range_align(scratch);
    memset(h, 0, ENT_BINS * sizeof *h);
    const float top = (float)(ENT_BINS - 1);
    for (size_t i = 0; i < n; i++) {
        float u = fabsf(x[i]) * invw;
        u = u < top ? u : top;
        h[(int)u]++;
    }
    double kl;
    const int best_i = npuc__entropy_search(h, bits, 0, &kl, (unsigned char *)h + ENT_BINS * sizeof *h);

    double t = ((double)best_i + 0.5) * ((double)amax / ENT_BINS);
    float tf = t < (double)amax ? (float)t : amax;
    if (symmetric) {
        *lo = -tf;
        *hi = tf;
    } else {
        *lo = lo0 > -tf ? lo0 : -tf;
        *hi = hi0 < tf ? hi0 : tf;
    }
}
