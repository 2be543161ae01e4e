/*
 * error_stats.c - error metrics of an approximated tensor (see metrics.h for
 * the definitions and the conventions at zero error or zero signal).
 */
#include <math.h>

#include "npuc_internal.h"

void npuc_error_from_sums(npuc_error_stats *o, uint64_t n, double sw2, double se2, double swd,
                          double sd2, double max_abs, double sum_noise, uint64_t clipped) {
    o->n = n;
    o->sum_w2 = sw2;
    o->sum_e2 = se2;
    o->mse = n ? se2 / (double)n : 0;
    o->rmse = sqrt(o->mse);
    o->max_abs = max_abs;
    o->noise_pred = n ? sum_noise / (double)n : 0;
    o->clipped = clipped;
    if (se2 == 0) o->sqnr_db = INFINITY;
    else if (sw2 == 0) o->sqnr_db = -INFINITY;
    else o->sqnr_db = 10.0 * log10(sw2 / se2);
    if (sw2 == 0) o->rel_fro = se2 == 0 ? 0 : INFINITY;
    else o->rel_fro = sqrt(se2 / sw2);
    if (sw2 == 0 && sd2 == 0) o->cosine = 1;
    else if (sw2 == 0 || sd2 == 0) o->cosine = 0;
    else o->cosine = swd / (sqrt(sw2) * sqrt(sd2));
}

void npuc_error_measure(const float *ref, const float *approx, uint64_t n, npuc_error_stats *out) {
    double sw2 = 0, se2 = 0, swd = 0, sd2 = 0, mx = 0;
    for (uint64_t c = 0; c < n; c += 4096) {
        uint64_t e = n - c < 4096 ? n : c + 4096;
        double a = 0, b = 0, d = 0, f = 0;
        for (uint64_t i = c; i < e; i++) {
            double w = ref[i], q = approx[i], err = q - w;
            a += w * w;
            b += err * err;
            d += w * q;
            f += q * q;
            if (fabs(err) > mx) mx = fabs(err);
        }
        sw2 += a; se2 += b; swd += d; sd2 += f;
    }
    npuc_error_from_sums(out, n, sw2, se2, swd, sd2, mx, 0, 0);
}
