/*
 * bench_quantize_mem.c - int8 per-channel quantization in memory, side by
 * side with memcpy of the same bytes: the library's compute path without
 * the file I/O that bounds every command end to end (bench_quantize.py
 * measures that; docs/sparsity.md shows `npuc convert` alone reaches only
 * ~0.16 of memcpy on this machine).
 *
 *   bench_quantize_mem [tensors] [rows] [cols]      default 16 x 4096 x 4096 (1 GiB F32)
 *
 * Tensors are Gaussian F32 in RAM (pages touched before timing).  For -j 1
 * and -j 2 it times npuc_quantize_tensor over all tensors (minmax,
 * symmetric, per channel, codes + scales + error sums) and memcpy of the
 * input bytes with the same thread count, alternating the two, REPS runs of
 * each (best kept), so a change in the machine's load hits both; it prints
 * GB/s of bytes read + written (memcpy: 4 + 4 bytes per weight;
 * quantization: 4 bytes in + 1 byte out) and the ratio.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <npuc/npuc.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define REPS 7

static double memcpy_time(char *dst, const char *src, size_t n, int threads) {
    double t0 = now();
#pragma omp parallel num_threads(threads)
    {
        int id = omp_get_thread_num(), nt = omp_get_num_threads();
        size_t lo = n / (size_t)nt * (size_t)id, hi = id == nt - 1 ? n : n / (size_t)nt * (size_t)(id + 1);
        memcpy(dst + lo, src + lo, hi - lo);
    }
    return now() - t0;
}

int main(int argc, char **argv) {
    int nt = argc > 1 ? atoi(argv[1]) : 16;
    int64_t rows = argc > 2 ? atol(argv[2]) : 4096, cols = argc > 3 ? atol(argv[3]) : 4096;
    size_t per = (size_t)(rows * cols), total = per * (size_t)nt;
    float *w = malloc(total * sizeof(float));
    uint8_t *codes = malloc(per);
    float *scales = malloc(sizeof(float) * (size_t)rows);
    int32_t *zp = malloc(sizeof(int32_t) * (size_t)rows);
    char *dst = malloc(total * sizeof(float));
    if (!w || !codes || !scales || !zp || !dst) { fprintf(stderr, "out of memory\n"); return 1; }
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < total; i++) { /* Irwin-Hall(4) ~ Gaussian, cheap */
        float a = 0;
        for (int k = 0; k < 4; k++) {
            s ^= s >> 12; s ^= s << 25; s ^= s >> 27;
            a += (float)((s * 0x2545f4914f6cdd1dull) >> 40) * 0x1p-24f;
        }
        w[i] = (a - 2.0f) * 0.035f;
    }
    memset(dst, 0, total * sizeof(float));
    memset(codes, 0, per);
    npuc_ctx *ctx;
    npuc_ctx_new(&ctx);
    npuc_tensor_info t;
    memset(&t, 0, sizeof t);
    t.name = "w";
    t.dtype = NPUC_DTYPE_F32;
    t.rank = 2;
    t.shape[0] = rows;
    t.shape[1] = cols;
    t.numel = per;
    t.nbytes = per * 4;
    t.layout = NPUC_LAYOUT_OI;
    npuc_quant_params p = npuc_quant_params_defaults();
    printf("# %d x [%lld,%lld] F32 = %.2f GiB in RAM; int8 symmetric per channel, minmax\n", nt,
           (long long)rows, (long long)cols, (double)total * 4 / 1073741824.0);
    for (int threads = 1; threads <= 2; threads++) {
        npuc_ctx_set_threads(ctx, threads);
        double best = 1e30, mc = 1e30;
        for (int rep = 0; rep < REPS; rep++) {
            double t0 = now();
            for (int k = 0; k < nt; k++) {
                npuc_error_stats e;
                if (npuc_quantize_tensor(ctx, &t, w + (size_t)k * per, &p, codes, scales, zp, NULL, &e) != NPUC_OK) {
                    fprintf(stderr, "%s\n", npuc_ctx_errmsg(ctx));
                    return 1;
                }
            }
            double dt = now() - t0;
            if (dt < best) best = dt;
            dt = memcpy_time(dst, (const char *)w, total * sizeof(float), threads);
            if (dt < mc) mc = dt;
        }
        double q_gbps = (double)total * 5 / best / 1e9, m_gbps = (double)total * 8 / mc / 1e9;
        printf("threads=%d  memcpy %6.2f GB/s  npuc_quantize_tensor %6.2f GB/s (%.3f s)  ratio %.2f\n", threads,
               m_gbps, q_gbps, best, q_gbps / m_gbps);
    }
    npuc_ctx_free(ctx);
    free(w); free(codes); free(scales); free(zp); free(dst);
    return 0;
}
