/*
 * bench_memcpy.c - the bandwidth yardstick the quantize/prune benchmarks
 * compare against: memcpy of N MiB, single-threaded and split over T threads
 * (OpenMP), best of 5, printed as GB/s of bytes read + written.
 *
 *   bench_memcpy [MiB] [threads]
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 1024;
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    size_t n = mib << 20;
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b) { fprintf(stderr, "bench_memcpy: out of memory\n"); return 1; }
    memset(a, 1, n);
    memset(b, 2, n); /* touch every page first: no page faults in the timing */
    for (int t = 1; t <= threads; t++) {
        double best = 1e30;
        for (int rep = 0; rep < 5; rep++) {
            double t0 = now();
#pragma omp parallel num_threads(t)
            {
                int id = omp_get_thread_num(), nt = omp_get_num_threads();
                size_t lo = n / (size_t)nt * (size_t)id, hi = id == nt - 1 ? n : n / (size_t)nt * (size_t)(id + 1);
                memcpy(b + lo, a + lo, hi - lo);
            }
            double dt = now() - t0;
            if (dt < best) best = dt;
        }
        printf("memcpy threads=%d bytes=%zu seconds=%.6f gbps=%.3f\n", t, n, best, 2.0 * (double)n / best / 1e9);
    }
    free(a);
    free(b);
    return 0;
}
