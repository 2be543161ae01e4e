/*
 * bench_quantize_mem.c - int8 per-channel quantization in memory, side by
 * side with memcpy of the same bytes: the library's compute path without
 * the file I/O that bounds every command end to end (bench_quantize.py
 * measures that; docs/sparsity.md shows `npuc convert` alone reaches only
 * ~0.16 of memcpy on this machine).
 *
 *   bench_quantize_mem [tensors] [rows] [cols] [-j THREADS] [-r REPS] [SCHEME...]
 *
 * default 16 x 4096 x 4096 (1 GiB F32), -j 1 and 2, 7 reps, scheme b8c.
 *
 * Tensors are Gaussian F32 in RAM (pages touched before timing).  For each
 * SCHEME and each thread count it times npuc_quantize_tensor over all
 * tensors (codes + scales + error sums) and memcpy of the input bytes with
 * the same thread count, alternating the two, REPS runs of each (best
 * kept), so a change in the machine's load hits both; it prints GB/s of
 * bytes read + written (memcpy: 4 + 4 bytes per weight; quantization: 4
 * bytes in + 1 byte of (unpacked) code out + the scales and zero points)
 * and the ratio.  A SCHEME is b<bits> then t (per tensor), c (per channel)
 * or g<G> (groups of G), then optionally a (asymmetric) and m (--range
 * mse): b8c, b4g32a, b4g128m.  bench_schemes.py runs every scheme through
 * one process, so the model is built once.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <npuc/npuc.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}


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

/* Parses a SCHEME (see the top) into p; -1 when it is not one. */
static int parse_scheme(const char *s, npuc_quant_params *p) {
    char *end;
    *p = npuc_quant_params_defaults();
    if (*s++ != 'b') return -1;
    p->bits = (int)strtol(s, &end, 10);
    if (end == s || p->bits < 2 || p->bits > 8) return -1;
    s = end;
    if (*s == 't') { p->gran = NPUC_GRAN_TENSOR; s++; }
    else if (*s == 'c') { p->gran = NPUC_GRAN_CHANNEL; s++; }
    else if (*s == 'g') {
        long g = strtol(s + 1, &end, 10);
        if (end == s + 1 || g < 2) return -1;
        p->gran = NPUC_GRAN_GROUP;
        p->group_size = (uint32_t)g;
        s = end;
    } else return -1;
    if (*s == 'a') { p->symmetric = 0; s++; }
    if (*s == 'm') { p->range.method = NPUC_RANGE_MSE; s++; }
    p->range.bits = p->bits;
    p->range.symmetric = p->symmetric;
    return *s ? -1 : 0;
}

int main(int argc, char **argv) {
    int only_threads = 0, reps = 7, opt;
    while ((opt = getopt(argc, argv, "j:r:")) != -1) {
        if (opt == 'j') only_threads = atoi(optarg);
        else if (opt == 'r') reps = atoi(optarg);
        else { fprintf(stderr, "usage: %s [tensors] [rows] [cols] [-j T] [-r REPS] [SCHEME...]\n", argv[0]); return 2; }
    }
    /* Positional: up to three numbers, then schemes. */
    int pos = optind, nt = 16;
    int64_t rows = 4096, cols = 4096;
    if (pos < argc && argv[pos][0] != 'b') nt = atoi(argv[pos++]);
    if (pos < argc && argv[pos][0] != 'b') rows = atol(argv[pos++]);
    if (pos < argc && argv[pos][0] != 'b') cols = atol(argv[pos++]);
    const char *deflt[] = {"b8c"};
    const char *const *schemes = pos < argc ? (const char *const *)argv + pos : deflt;
    int nschemes = pos < argc ? argc - pos : 1;
    size_t per = (size_t)(rows * cols), total = per * (size_t)nt;
    float *w = malloc(total * sizeof(float));
    uint8_t *codes = malloc(per);
    float *scales = malloc(sizeof(float) * per); /* enough for any grouping */
    int32_t *zp = malloc(sizeof(int32_t) * per);
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
    memset(scales, 0, sizeof(float) * per);
    memset(zp, 0, sizeof(int32_t) * per);
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
    printf("# %d x [%lld,%lld] F32 = %.2f GiB in RAM; best of %d\n", nt, (long long)rows, (long long)cols,
           (double)total * 4 / 1073741824.0, reps);
    for (int si = 0; si < nschemes; si++) {
        npuc_quant_params p;
        npuc_quant_shape qs;
        if (parse_scheme(schemes[si], &p) != 0 || npuc_quant_shape_of(ctx, &t, &p, &qs) != NPUC_OK) {
            fprintf(stderr, "bad scheme '%s'\n", schemes[si]);
            return 2;
        }
        /* Bytes written besides the codes: a scale per group, and a zero
         * point per group when asymmetric. */
        double side = (double)qs.nscales * (p.symmetric ? 4 : 8) * nt;
        for (int threads = 1; threads <= 2; threads++) {
            if (only_threads && threads != only_threads) continue;
            npuc_ctx_set_threads(ctx, threads);
            double best = 1e30, mc = 1e30;
            for (int rep = 0; rep < reps; rep++) {
                double t0 = now();
                for (int k = 0; k < nt; k++) {
                    npuc_error_stats e;
                    if (npuc_quantize_tensor(ctx, &t, w + (size_t)k * per, &p, codes, scales, zp, NULL, &e) !=
                        NPUC_OK) {
                        fprintf(stderr, "%s\n", npuc_ctx_errmsg(ctx));
                        return 1;
                    }
                }
                double dt = now() - t0;
                if (dt < best) best = dt;
                dt = memcpy_time(dst, (const char *)w, total * sizeof(float), threads);
                if (dt < mc) mc = dt;
            }
            double q_gbps = ((double)total * 5 + side) / best / 1e9, m_gbps = (double)total * 8 / mc / 1e9;
            printf("threads=%d  memcpy %6.2f GB/s  npuc_quantize_tensor %6.2f GB/s (%.3f s)  ratio %.2f  scheme=%s\n",
                   threads, m_gbps, q_gbps, best, q_gbps / m_gbps, schemes[si]);
            fflush(stdout);
        }
    }
    npuc_ctx_free(ctx);
    free(w); free(codes); free(scales); free(zp); free(dst);
    return 0;
}
