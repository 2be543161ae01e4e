/*
 * bench_kquant.c - GGUF K-quant quantization speed: npuc's quantizer
 * (npuc__gguf_quantize_rows, what `npuc convert --gguf-type q4_k` runs) and
 * ggml's ggml_quantize_chunk (what llama-quantize runs), side by side on the
 * same rows, 1 and 2 threads, without and with importance weights.  ggml is
 * loaded with dlopen from libggml-base.so (NPUC_GGML_LIB, default the npm
 * cache of .ci/install-deps --test); on 2 threads its rows are split in two
 * halves, one ggml_quantize_chunk call per thread, as llama-quantize splits
 * a tensor into row chunks.  Every run's bytes are compared with ggml's.
 *
 * Medians of REPS alternating runs (npuc, ggml, npuc, ggml, ...), in
 * millions of weights per second; the time is the quantizer alone (the
 * search and the packing: the data are in memory, no I/O).
 *
 * Usage: bench_kquant [ROWS [COLS [all]]]   (default 2048 x 4096; Q4_K and
 * Q6_K, or every K type with "all")
 */
#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf/gguf_format.h"

#define REPS 5

struct ggml_init_params {
    size_t mem_size;
    void *mem_buffer;
    bool no_alloc;
};
typedef void *(*ggml_init_fn)(struct ggml_init_params);
typedef size_t (*chunk_fn)(int, const float *, void *, int64_t, int64_t, int64_t, const float *);
static chunk_fn g_chunk;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static uint64_t rng = 88172645463325252ull;
static double unif(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
}
static double gauss(void) { return sqrt(-2.0 * log(unif())) * cos(6.283185307179586 * unif()); }

static double run_ggml(int id, const float *x, unsigned char *y, int64_t rows, int64_t cols, const float *imp,
                       int nth, size_t row_bytes) {
    const double t0 = now();
    const int64_t half = rows / 2;
#pragma omp parallel for num_threads(nth) schedule(static, 1)
    for (int p = 0; p < nth; p++) {
        const int64_t r0 = nth == 1 ? 0 : p * half, nr = nth == 1 ? rows : p == 0 ? half : rows - half;
        (void)row_bytes;
        g_chunk(id, x, y, r0 * cols, nr, cols, imp);
    }
    return now() - t0;
}

static double run_npuc(int id, const float *x, unsigned char *y, int64_t rows, int64_t cols, const float *imp,
                       int nth) {
    uint64_t bad;
    const double t0 = now();
    if (npuc__gguf_quantize_rows(id, x, NPUC_DTYPE_F32, y, (uint64_t)(rows * cols), (uint64_t)cols, imp, nth,
                                 &bad) != 0)
        fprintf(stderr, "npuc refused block %llu\n", (unsigned long long)bad);
    return now() - t0;
}

int main(int argc, char **argv) {
    const int64_t rows = argc > 1 ? atoll(argv[1]) : 2048, cols = argc > 2 ? atoll(argv[2]) : 4096;
    char def[1024];
    const char *path = getenv("NPUC_GGML_LIB");
    if (!path) {
        snprintf(def, sizeof def, "%s/.cache/npuc-npm/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/"
                 "libggml-base.so", getenv("HOME") ? getenv("HOME") : "");
        path = def;
    }
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "bench_kquant: cannot load %s (.ci/install-deps --test installs it)\n", path);
        return 1;
    }
    ggml_init_fn init = (ggml_init_fn)dlsym(lib, "ggml_init");
    g_chunk = (chunk_fn)dlsym(lib, "ggml_quantize_chunk");
    struct ggml_init_params ip = {1u << 20, NULL, false};
    if (!init || !g_chunk || !init(ip)) return 1;

    const size_t n = (size_t)(rows * cols);
    float *x = malloc(n * sizeof *x), *imp = malloc((size_t)cols * sizeof *imp);
    for (size_t i = 0; i < n; i++) {
        const double a = gauss(), b = gauss(), c = gauss();
        x[i] = (float)(0.02 * gauss() / sqrt((a * a + b * b + c * c) / 3.0 + 1e-12));
    }
    for (int64_t j = 0; j < cols; j++) imp[j] = (float)exp(2.0 * gauss());
    printf("bench_kquant: %lld x %lld float32 (%.1f M weights), ggml from %s\n", (long long)rows, (long long)cols,
           (double)n / 1e6, path);
    printf("%-5s %-4s %3s  %12s %12s %8s  %s\n", "type", "imp", "thr", "npuc Mw/s", "ggml Mw/s", "npuc/ggml",
           "bytes");
    const int ids[] = {NPUC__GGML_Q4_K, NPUC__GGML_Q6_K, NPUC__GGML_Q2_K, NPUC__GGML_Q3_K, NPUC__GGML_Q5_K};
    const size_t ntypes = argc > 3 && strcmp(argv[3], "all") == 0 ? sizeof ids / sizeof ids[0] : 2;
    for (size_t ti = 0; ti < ntypes; ti++) {
        const npuc__ggml_type *t = npuc__ggml_type_by_id((uint32_t)ids[ti]);
        const size_t bytes = n / t->blck * t->tsize;
        unsigned char *yo = malloc(bytes), *yq = malloc(bytes);
        for (int wi = 0; wi < 2; wi++) {
            const float *w = wi ? imp : NULL;
            for (int nth = 1; nth <= 2; nth++) {
                double tn[REPS], tg[REPS];
                for (int r = 0; r < REPS; r++) {
                    tn[r] = run_npuc(t->id, x, yq, rows, cols, w, nth);
                    tg[r] = run_ggml(t->id, x, yo, rows, cols, w, nth, bytes / (size_t)rows);
                }
                qsort(tn, REPS, sizeof tn[0], cmp_d);
                qsort(tg, REPS, sizeof tg[0], cmp_d);
                const double mn = (double)n / tn[REPS / 2] / 1e6, mg = (double)n / tg[REPS / 2] / 1e6;
                printf("%-5s %-4s %3d  %12.1f %12.1f %8.2fx  %s\n", t->name, wi ? "yes" : "no", nth, mn, mg, mn / mg,
                       memcmp(yo, yq, bytes) == 0 ? "identical" : "DIFFER");
                fflush(stdout);
            }
        }
        free(yo);
        free(yq);
    }
    free(x);
    free(imp);
    return 0;
}
