/*
 * act_hist.c - the histogram methods of activation calibration: entropy
 * (TensorRT's EntropyCalibration2) and mse, both on the 2048-bin histogram
 * of |x| over [0, amax] that npuc_act_calib merges over every chunk.
 *
 * Entropy follows NVIDIA's pytorch-quantization (_compute_amax_entropy),
 * the public reference of TensorRT's EntropyCalibration2: the histogram's
 * bin 0 is replaced by bin 1 (so the spike of exact zeros after a ReLU does
 * not dominate), then every candidate i = 128..2048 is scored by
 * KL(P || Q) (range_entropy.c, npuc__entropy_search with trt = 1) with
 * 2^(bits-1) levels (signed: TensorRT's int8 is symmetric), and the last
 * smallest KL wins.  The threshold is the left edge of bin i,
 * i * amax / 2048 (pytorch-quantization's calib_bin_edges[i]).
 *
 * mse follows pytorch-quantization's _compute_amax_mse: the bin centers
 * c_j = (j + 0.5) amax / 2048 stand for their values; each candidate
 * threshold t = c_i, i = 128..2047, fake-quantizes the centers with
 * scale = (2^(bits-1) - 1) / t, round half to even, clamped to
 * [-2^(bits-1), 2^(bits-1) - 1], and the smallest sum over j of
 * h_j (fq(c_j) - c_j)^2 / 2048 (the mean over bins) wins, the first on ties.
 * Computed in double (pytorch-quantization uses float32 on the GPU).
 */
#include <math.h>
#include <string.h>

#include "act_internal.h"

void npuc__act_entropy(npuc__act_chan *ch, int bits, void *scratch) {
    const float amax = ch->res.amax;
    ch->res.bin = -1;
    ch->res.threshold = 0;
    if (!(amax > 0.0f)) return;
    /* The search's own copy, with bin 0 := bin 1; the prefix arrays follow. */
    uint64_t *h = (uint64_t *)npuc__range_align(scratch);
    memcpy(h, ch->hist, NPUC_ACT_BINS * sizeof *h);
    h[0] = h[1];
    uint64_t n = 0;
    for (int j = 0; j < NPUC_ACT_BINS; j++) n += h[j];
    if (n == 0) return;
    double kl;
    int i = npuc__entropy_search(h, bits, 1, &kl, (unsigned char *)h + NPUC_ACT_BINS * sizeof *h);
    ch->res.bin = i;
    ch->res.kl = kl;
    ch->res.threshold = (double)i * ((double)amax / NPUC_ACT_BINS);
}

void npuc__act_mse(npuc__act_chan *ch, int bits) {
    const float amax = ch->res.amax;
    ch->res.bin = -1;
    ch->res.threshold = 0;
    if (!(amax > 0.0f)) return;
    const double w = (double)amax / NPUC_ACT_BINS;
    const double qmax = (double)((1 << (bits - 1)) - 1), qmin = -qmax - 1;
    double best = INFINITY;
    int best_i = NPUC_KL_START;
    for (int i = NPUC_KL_START; i < NPUC_ACT_BINS; i++) {
        const double t = ((double)i + 0.5) * w, scale = qmax / t;
        double e = 0;
        for (int j = 0; j < NPUC_ACT_BINS; j++) {
            if (!ch->hist[j]) continue;
            const double c = ((double)j + 0.5) * w;
            double q = nearbyint(c * scale);
            q = q < qmin ? qmin : q > qmax ? qmax : q;
            const double d = q / scale - c;
            e += (double)ch->hist[j] * d * d;
        }
        e /= NPUC_ACT_BINS;
        if (e < best) {
            best = e;
            best_i = i;
        }
    }
    ch->res.bin = best_i;
    ch->res.mse = best;
    ch->res.threshold = ((double)best_i + 0.5) * w;
}
