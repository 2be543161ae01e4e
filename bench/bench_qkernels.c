/*
 * bench_qkernels.c - throughput of the quantization kernels, reference, AVX2
 * and AVX-512 side by side, against memcpy of the same buffer; then the
 * cost per weight of minmax and quant_run on one 16 KiB run kept in L1
 * (the arithmetic alone, no memory traffic).
 *
 * One 256 MiB float buffer (far larger than any cache), single thread, best
 * of 5 repetitions of each measurement.  GB/s counts bytes read plus bytes
 * written (memcpy: 2 x 256 MiB; minmax: 4 B per float; quantization: 4 B in,
 * 1 B code out, plus 4 B when dequantized values are written), so every
 * figure is comparable with the memcpy line, which is roughly what the
 * memory system allows.  The program only prints what it measured.
 *
 * Usage: bench_qkernels [MiB]   (buffer size, default 256)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "npuc_kernels.h"

#define REPS 5
#define RUN_LEN 4096 /* per-channel-like runs for quant_run */
#define ROW_LEN 1024 /* channels per row for quant_vec */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    const npuc_kernel_table *k;
    const float *x;
    size_t n;
    uint8_t *codes;
    float *deq;
    float *dst; /* memcpy target */
    const float *rscale, *rinv;       /* per run (cycled) */
    const float *vscale, *vinv;       /* per column of a row */
    const int32_t *vzp;
} job;

static volatile double g_sink; /* keeps results observable */

enum { OP_MEMCPY, OP_MINMAX, OP_MINMAX_COLS, OP_QRUN, OP_QRUN_DEQ, OP_QVEC, OP_QVEC_DEQ };

static void run_op(int op, const job *j) {
    const npuc_kernel_table *k = j->k;
    npuc_qsums s = {0};
    switch (op) {
    case OP_MEMCPY:
        memcpy(j->dst, j->x, j->n * sizeof(float));
        g_sink = j->dst[j->n / 2];
        break;
    case OP_MINMAX: {
        float lo, hi;
        const uint64_t bad = k->minmax(j->x, j->n, &lo, &hi);
        g_sink = (double)lo + (double)hi + (double)bad;
        break;
    }
    case OP_MINMAX_COLS: {
        float lo[ROW_LEN], hi[ROW_LEN];
        for (int c = 0; c < ROW_LEN; c++) lo[c] = 1e30f, hi[c] = -1e30f;
        const uint64_t bad = k->minmax_cols(j->x, j->n / ROW_LEN, ROW_LEN, ROW_LEN, lo, hi);
        g_sink = (double)lo[7] + (double)hi[7] + (double)bad;
        break;
    }
    case OP_QRUN:
    case OP_QRUN_DEQ: {
        float *deq = op == OP_QRUN_DEQ ? j->deq : NULL;
        for (size_t r = 0, i = 0; i < j->n; r++, i += RUN_LEN) {
            const size_t len = j->n - i < RUN_LEN ? j->n - i : RUN_LEN;
            k->quant_run(j->x + i, len, j->rscale[r % 64], j->rinv[r % 64], 0, -127, 127,
                         j->codes + i, deq ? deq + i : NULL, &s);
        }
        g_sink = s.sum_e2;
        break;
    }
    case OP_QVEC:
    case OP_QVEC_DEQ: {
        float *deq = op == OP_QVEC_DEQ ? j->deq : NULL;
        for (size_t i = 0; i + ROW_LEN <= j->n; i += ROW_LEN)
            k->quant_vec(j->x + i, ROW_LEN, j->vscale, j->vinv, j->vzp, 0, 255, j->codes + i,
                         deq ? deq + i : NULL, &s);
        g_sink = s.sum_e2;
        break;
    }
    default: break;
    }
}

/* Bytes read + written per float for each operation. */
static double bytes_per_float(int op) {
    switch (op) {
    case OP_MEMCPY: return 8.0;
    case OP_MINMAX:
    case OP_MINMAX_COLS: return 4.0;
    case OP_QRUN:
    case OP_QVEC: return 5.0;
    default: return 9.0;
    }
}

/* Best-of-REPS throughput in GB/s (1e9 bytes per second). */
static double measure(int op, const job *j) {
    double best = 1e30;
    for (int r = 0; r < REPS; r++) {
        const double t0 = now();
        run_op(op, j);
        const double t = now() - t0;
        if (t < best) best = t;
    }
    return bytes_per_float(op) * (double)j->n / best / 1e9;
}

int main(int argc, char **argv) {
    const size_t mib = argc > 1 ? (size_t)strtoul(argv[1], NULL, 10) : 256;
    if (mib < 1 || mib > 65536) {
        fprintf(stderr, "usage: bench_qkernels [MiB 1..65536]\n");
        return 2;
    }
    const size_t n = mib * 1024 * 1024 / sizeof(float);
    float *x = malloc(n * sizeof *x), *deq = malloc(n * sizeof *deq);
    uint8_t *codes = malloc(n);
    if (!x || !deq || !codes) {
        fprintf(stderr, "bench_qkernels: out of memory\n");
        return 1;
    }
    /* Roughly bell-shaped data in [-2, 2) (sum of two uniforms); every page
     * of every buffer is touched before timing. */
    uint64_t st = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; i++) {
        st ^= st >> 12, st ^= st << 25, st ^= st >> 27;
        const uint64_t r = st * 0x2545f4914f6cdd1dull;
        x[i] = (float)((double)(r >> 40) * 0x1p-24 + (double)(r & 0xffffff) * 0x1p-24) * 2.0f - 2.0f;
    }
    memset(deq, 0, n * sizeof *deq);
    memset(codes, 0, n);

    float rscale[64], rinv[64], vscale[ROW_LEN], vinv[ROW_LEN];
    int32_t vzp[ROW_LEN];
    for (int r = 0; r < 64; r++) {
        rscale[r] = (1.5f + 0.01f * (float)r) / 127.0f; /* a little clipping */
        rinv[r] = 1.0f / rscale[r];
    }
    for (int c = 0; c < ROW_LEN; c++) {
        vscale[c] = (3.5f + 0.001f * (float)c) / 255.0f;
        vinv[c] = 1.0f / vscale[c];
        vzp[c] = 120 + c % 16;
    }

    const npuc_kernel_table *tabs[3] = {npuc_kernels_ref(), npuc_kernels_avx2(), npuc_kernels_avx512()};
    static const char *const tname[3] = {"ref", "avx2", "avx512"};
    job j = {.x = x, .n = n, .codes = codes, .deq = deq, .dst = deq, .rscale = rscale,
             .rinv = rinv, .vscale = vscale, .vinv = vinv, .vzp = vzp};

    printf("bench_qkernels: %zu MiB f32 buffer (%zu floats), single thread, best of %d\n", mib, n,
           REPS);
    printf("GB/s = (bytes read + written) / time; ratios are to memcpy of the same buffer\n");
    j.k = tabs[0];
    const double mc = measure(OP_MEMCPY, &j);
    printf("%-34s %9.2f GB/s\n\n", "memcpy (read + written)", mc);
    printf("%-34s %9s %9s %9s   ratio to memcpy (ref / avx2 / avx512)\n", "kernel", "ref GB/s",
           "avx2", "avx512");

    static const struct {
        int op;
        const char *label;
    } ops[] = {
        {OP_MINMAX, "minmax"},
        {OP_MINMAX_COLS, "minmax_cols [rows x 1024]"},
        {OP_QRUN, "quant_run  runs 4096, codes"},
        {OP_QRUN_DEQ, "quant_run  runs 4096, codes+deq"},
        {OP_QVEC, "quant_vec  rows 1024, codes"},
        {OP_QVEC_DEQ, "quant_vec  rows 1024, codes+deq"},
    };
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
        double g[3] = {0, 0, 0};
        printf("%-34s", ops[o].label);
        for (int t = 0; t < 3; t++) {
            if (!tabs[t]) {
                printf(" %9s", "n/a");
                continue;
            }
            j.k = tabs[t];
            g[t] = measure(ops[o].op, &j);
            printf(" %9.2f", g[t]);
        }
        printf("   %.2f / %.2f / %.2f\n", g[0] / mc, g[1] / mc, g[2] / mc);
    }

    /* In L1: one run of RUN_LEN floats, minmax and quant_run (codes) over it
     * again and again; best of REPS batches. */
    printf("\nin L1 (one run of %d floats, repeated): ns per weight\n", RUN_LEN);
    printf("%-34s %9s %9s %9s\n", "kernel", "ref", "avx2", "avx512");
    const int batches = 20000;
    for (int op = 0; op < 2; op++) {
        printf("%-34s", op ? "quant_run, codes" : "minmax");
        for (int t = 0; t < 3; t++) {
            if (!tabs[t]) {
                printf(" %9s", "n/a");
                continue;
            }
            const int nb = t == 0 ? batches / 20 : batches; /* the reference is slow */
            double best = 1e30;
            for (int r = 0; r < REPS; r++) {
                npuc_qsums qs = {0};
                float lo = 0, hi = 0;
                const double t0 = now();
                for (int b = 0; b < nb; b++) {
                    if (op)
                        tabs[t]->quant_run(x, RUN_LEN, rscale[0], rinv[0], 0, -127, 127, codes, NULL, &qs);
                    else
                        tabs[t]->minmax(x, RUN_LEN, &lo, &hi);
                }
                const double dt = now() - t0;
                g_sink = qs.sum_e2 + (double)lo + (double)hi;
                if (dt < best) best = dt;
            }
            printf(" %9.3f", best / nb / RUN_LEN * 1e9);
        }
        printf("\n");
    }
    (void)tname;
    free(x), free(deq), free(codes);
    return 0;
}
