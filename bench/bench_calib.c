/*
 * bench_calib.c - cost of the range estimators per channel: minmax,
 * percentile, mse and entropy side by side, in ns per element and as a
 * ratio to minmax.
 *
 * 64 Mi standard-normal floats (fixed seed), cut into channels of 4608
 * values (512 out channels of a 512x3x3 conv) and of 65536; one thread;
 * each method runs over every channel with its scratch allocated once (as
 * pass drivers do), best of 3 repetitions, timed in thread CPU time.  Besides the estimator alone,
 * the "+quant" column adds the time to quantize the same channels with the
 * kernels in use (quant_run, codes only), i.e. the per-element work of the
 * quantize command apart from I/O, and the last column is that total over
 * minmax's total.  The program only prints what it measured.
 *
 * Usage: bench_calib [Mi elements [method]]   (default 64, all methods;
 *        minmax always runs, as the baseline)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "npuc/npuc.h"
#include "npuc_kernels.h"

#define REPS 3

/* CPU time of this thread: on a shared machine other processes' time
 * slices do not count against the method being timed. */
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

static double uni(uint64_t *s) { return ((double)(rng(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

static volatile double g_sink;

typedef struct {
    const char *name;
    npuc_range_opts o;
} method;

/* Time of one sweep over all channels (estimate only, or estimate + quantize). */
static double sweep(npuc_ctx *ctx, const float *x, size_t nch, size_t len, const npuc_range_opts *o,
                    void *scratch, float *lo, float *hi, uint8_t *codes, int quant) {
    const npuc_kernel_table *k = npuc_kernels();
    int32_t qmax = o->symmetric ? (1 << (o->bits - 1)) - 1 : (1 << o->bits) - 1;
    int32_t qmin = o->symmetric ? -qmax : 0;
    double t0 = now();
    for (size_t c = 0; c < nch; c++) {
        if (npuc_range_estimate(ctx, x + c * len, len, o, &lo[c], &hi[c], scratch) != NPUC_OK) {
            fprintf(stderr, "bench_calib: %s\n", npuc_ctx_errmsg(ctx));
            exit(1);
        }
        if (quant) {
            float s;
            int32_t zp = 0;
            if (o->symmetric) {
                s = fmaxf(fabsf(lo[c]), fabsf(hi[c])) / (float)qmax;
            } else {
                double l = lo[c] < 0 ? lo[c] : 0, h = hi[c] > 0 ? hi[c] : 0;
                s = (float)((h - l) / qmax);
                if (s > 0) zp = (int32_t)nearbyintf((float)(-l) / s);
            }
            if (!(s > 0)) s = 1e-30f;
            npuc_qsums q = {0};
            k->quant_run(x + c * len, len, s, 1.0f / s, zp, qmin, qmax, codes, NULL, &q);
            g_sink += q.sum_e2;
        }
    }
    double t = now() - t0;
    double acc = 0;
    for (size_t c = 0; c < nch; c++) acc += hi[c] - lo[c];
    g_sink += acc;
    return t;
}

static double best_of(npuc_ctx *ctx, const float *x, size_t nch, size_t len,
                      const npuc_range_opts *o, void *scratch, float *lo, float *hi, uint8_t *codes,
                      int quant) {
    double best = 1e30;
    for (int r = 0; r < REPS; r++) {
        double t = sweep(ctx, x, nch, len, o, scratch, lo, hi, codes, quant);
        if (t < best) best = t;
    }
    return best;
}

int main(int argc, char **argv) {
    size_t mi = argc > 1 ? (size_t)strtoul(argv[1], NULL, 10) : 64;
    const char *only = argc > 2 ? argv[2] : NULL;
    if (mi == 0) mi = 64;
    size_t n = mi << 20;
    float *x = malloc(n * sizeof *x);
    uint8_t *codes = malloc(65536);
    if (!x || !codes) {
        fprintf(stderr, "bench_calib: out of memory\n");
        return 1;
    }
    uint64_t s = 0x9E3779B97F4A7C15ULL;
    for (size_t i = 0; i + 1 < n; i += 2) {
        double u1 = uni(&s), u2 = uni(&s), r = sqrt(-2.0 * log(u1));
        x[i] = (float)(r * cos(2 * M_PI * u2));
        x[i + 1] = (float)(r * sin(2 * M_PI * u2));
    }
    npuc_ctx *ctx;
    if (npuc_ctx_new(&ctx) != NPUC_OK) return 1;

    printf("bench_calib: %zu Mi N(0,1) floats, 1 thread, best of %d, kernels %s\n", mi, REPS,
           npuc_kernels()->name);
    const size_t lens[2] = {4608, 65536};
    const int bitsv[2] = {8, 4};
    for (int sym = 1; sym >= 0; sym--) {
        for (int bi = 0; bi < 2; bi++) {
            for (int li = 0; li < 2; li++) {
                size_t len = lens[li], nch = n / len, tot = nch * len;
                float *lo = malloc(nch * sizeof *lo), *hi = malloc(nch * sizeof *hi);
                if (!lo || !hi) return 1;
                printf("\n%s int%d, channels of %zu (%zu channels)\n", sym ? "symmetric" : "asymmetric",
                       bitsv[bi], len, nch);
                printf("  %-16s %10s %8s %14s %10s\n", "method", "ns/elem", "x minmax", "+quant ns/elem",
                       "x minmax");
                double base = 0, baseq = 0;
                method ms[4];
                const char *names[4] = {"minmax", "percentile=99.99", "mse", "entropy"};
                for (int m = 0; m < 4; m++) {
                    ms[m].name = names[m];
                    ms[m].o = npuc_range_opts_defaults();
                    if (npuc_range_parse(ctx, names[m], &ms[m].o) != NPUC_OK) return 1;
                    ms[m].o.bits = bitsv[bi];
                    ms[m].o.symmetric = sym;
                }
                for (int m = 0; m < 4; m++) {
                    if (m > 0 && only && strncmp(ms[m].name, only, strlen(only)) != 0) continue;
                    size_t scr = npuc_range_scratch_size(len, &ms[m].o);
                    void *scratch = scr ? malloc(scr) : NULL;
                    double t = best_of(ctx, x, nch, len, &ms[m].o, scratch, lo, hi, codes, 0);
                    double tq = best_of(ctx, x, nch, len, &ms[m].o, scratch, lo, hi, codes, 1);
                    free(scratch);
                    double ns = t * 1e9 / (double)tot, nsq = tq * 1e9 / (double)tot;
                    if (m == 0) base = ns, baseq = nsq;
                    printf("  %-16s %10.3f %8.2f %14.3f %10.2f\n", ms[m].name, ns, ns / base, nsq,
                           nsq / baseq);
                    fflush(stdout);
                }
                free(lo);
                free(hi);
            }
        }
    }
    npuc_ctx_free(ctx);
    free(x);
    free(codes);
    return g_sink == 12345.0;
}
