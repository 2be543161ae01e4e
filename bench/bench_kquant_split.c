/*
 * bench_kquant_split.c - where the time of a K-quant conversion goes: read,
 * search, packing, write + fsync (issue 29's speed item).
 *
 *   bench_kquant_split MODEL OUTDIR [q4_k|q6_k ...] [REPS]
 *
 * For every tensor of MODEL whose rows are a multiple of 256 (what
 * `npuc convert --gguf-type TYPE --gguf-pure` quantizes as TYPE):
 *   read     loading it through the public API (npuc_model_data: pread of
 *            the file, which the page cache holds after the first run) and
 *            widening to float32 where needed;
 *   search   the quantizer with its searches (npuc_kq_row_ops with the
 *            chosen kernels: ggml's make_qkx/make_qx fits) minus the same
 *            driver with the searches replaced by stubs that return a fixed
 *            scale: what the fits cost;
 *   packing  that stubbed run: the per-block work around the searches
 *            (second-level scales, requantization, bit packing), which does
 *            not depend on the values;
 *   write    writing the quantized bytes to a file in OUTDIR and fsyncing
 *            it, as the GGUF writer does.
 * Rows are split between 2 threads (pthreads, halves of each tensor), as
 * the writer's OpenMP loop runs them.  Medians of REPS runs (default 5).
 * The sum is compared by the reader with `npuc convert`'s wall time
 * (bench_kquant_llama.py): the rest is start-up, metadata and the header.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "npuc/npuc.h"
#include "kernels/kquant_kernels.h"
#include "gguf/gguf_format.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmpd(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Search stubs: a fixed scale, codes 0, the same output shapes. */
static float s_qkx(int n, int nmax, const float *x, const float *w, uint8_t *L, float *the_min, float rmin,
                   float rdelta, int nstep, int use_mad) {
    (void)nmax, (void)x, (void)w, (void)rmin, (void)rdelta, (void)nstep, (void)use_mad;
    memset(L, 0, (size_t)n);
    *the_min = 0.0f;
    return 1.0f;
}
static float s_qx(int n, int nmax, const float *x, int8_t *L, const float *qw) {
    (void)nmax, (void)x, (void)qw;
    memset(L, 0, (size_t)n);
    return 1.0f;
}
static void s_qkxm(int nsub, int n, int nmax, const float *x, const float *w, uint8_t *L, float *scales, float *mins,
                   float rmin, float rdelta, int nstep, int use_mad) {
    (void)nmax, (void)x, (void)w, (void)rmin, (void)rdelta, (void)nstep, (void)use_mad;
    memset(L, 0, (size_t)(nsub * n));
    for (int j = 0; j < nsub; j++) scales[j] = 1.0f, mins[j] = 0.0f;
}
static void s_qxm(int nsub, int n, int nmax, const float *x, int8_t *L, float *scales, const float *qw) {
    (void)nmax, (void)x, (void)qw;
    memset(L, 0, (size_t)(nsub * n));
    for (int j = 0; j < nsub; j++) scales[j] = 1.0f;
}
static void s_q3m(int nsub, int n, int nmax, const float *x, int8_t *L, float *scales) {
    (void)nmax, (void)x;
    memset(L, 0, (size_t)(nsub * n));
    for (int j = 0; j < nsub; j++) scales[j] = 1.0f;
}
static const npuc_kq_ops STUB = {"stub", s_qkx, s_qx, s_qkxm, s_qxm, s_q3m};

typedef struct job {
    const npuc_kq_ops *ops;
    int type;
    const float *x;
    unsigned char *y;
    size_t rows, row, tsize;
} job;

static void *run_rows(void *p) {
    const job *j = p;
    for (size_t r = 0; r < j->rows; r++)
        npuc_kq_row_ops(j->ops, j->type, j->x + r * j->row, j->y + r * (j->row / 256) * j->tsize, j->row, NULL);
    return NULL;
}

/* One pass over every tensor with ops on 2 threads; seconds. */
static double quantize_all(const npuc_kq_ops *ops, int type, float **x, const size_t *rows, const size_t *cols,
                           size_t nt, unsigned char **y, size_t tsize) {
    const double t0 = now();
    for (size_t i = 0; i < nt; i++) {
        const size_t h = rows[i] / 2;
        job a = {ops, type, x[i], y[i], h, cols[i], tsize};
        job b = {ops, type, x[i] + h * cols[i], y[i] + h * (cols[i] / 256) * tsize, rows[i] - h, cols[i], tsize};
        pthread_t th;
        if (pthread_create(&th, NULL, run_rows, &b) != 0) run_rows(&b);
        else {
            run_rows(&a);
            pthread_join(th, NULL);
            continue;
        }
        run_rows(&a);
    }
    return now() - t0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL OUTDIR [q4_k|q6_k ...] [REPS]\n", argv[0]);
        return 2;
    }
    int reps = 5, ntypes = 0, types[8];
    for (int a = 3; a < argc; a++) {
        if (strcmp(argv[a], "q4_k") == 0 && ntypes < 8) types[ntypes++] = NPUC__GGML_Q4_K;
        else if (strcmp(argv[a], "q6_k") == 0 && ntypes < 8) types[ntypes++] = NPUC__GGML_Q6_K;
        else reps = atoi(argv[a]) > 0 ? atoi(argv[a]) : reps;
    }
    if (!ntypes) types[ntypes++] = NPUC__GGML_Q4_K, types[ntypes++] = NPUC__GGML_Q6_K;
    npuc_ctx *ctx;
    npuc_model *m;
    if (npuc_ctx_new(&ctx) != NPUC_OK || npuc_model_open(ctx, argv[1], NULL, &m) != NPUC_OK) {
        fprintf(stderr, "bench_kquant_split: %s\n", ctx ? npuc_ctx_errmsg(ctx) : "out of memory");
        return 1;
    }
    const size_t n = npuc_model_count(m);
    float **x = calloc(n, sizeof *x);
    unsigned char **y = calloc(n, sizeof *y);
    size_t *rows = calloc(n, sizeof *rows), *cols = calloc(n, sizeof *cols), nt = 0;
    double *tr = calloc((size_t)reps, sizeof *tr), *tf = calloc((size_t)reps, sizeof *tf),
           *ts = calloc((size_t)reps, sizeof *ts), *tw = calloc((size_t)reps, sizeof *tw);
    if (!x || !y || !rows || !cols || !tr || !tf || !ts || !tw) return 1;
    uint64_t weights = 0;
    for (int r = 0; r < reps; r++) {
        const double t0 = now();
        nt = 0;
        for (size_t i = 0; i < n; i++) {
            const npuc_tensor_info *t = npuc_model_tensor(m, i);
            if (t->rank < 2 || t->shape[t->rank - 1] % 256 != 0 || !npuc_dtype_is_float(t->dtype)) continue;
            const void *p;
            if (npuc_model_data(ctx, m, i, &p) != NPUC_OK) return 1;
            if (!x[nt] && !(x[nt] = malloc(t->numel * sizeof(float)))) return 1;
            npuc_convert(x[nt], NPUC_DTYPE_F32, p, t->dtype, (size_t)t->numel);
            npuc_model_release(m, i);
            cols[nt] = (size_t)t->shape[t->rank - 1];
            rows[nt] = (size_t)(t->numel / cols[nt]);
            nt++;
        }
        tr[r] = now() - t0;
    }
    qsort(tr, (size_t)reps, sizeof *tr, cmpd);
    for (size_t i = 0; i < nt; i++) weights += rows[i] * cols[i];
    printf("bench_kquant_split: %s: %zu tensors, %.1f M weights, 2 threads, medians of %d runs\n", argv[1], nt,
           (double)weights / 1e6, reps);
    printf("%-5s %8s %8s %8s %8s %8s\n", "type", "read", "search", "packing", "write", "sum");
    for (int k = 0; k < ntypes; k++) {
        const npuc__ggml_type *gt = npuc__ggml_type_by_id((uint32_t)types[k]);
        size_t bytes = 0;
        for (size_t i = 0; i < nt; i++) {
            free(y[i]);
            if (!(y[i] = malloc(rows[i] * (cols[i] / 256) * gt->tsize))) return 1;
            bytes += rows[i] * (cols[i] / 256) * gt->tsize;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/bench_kquant_split.%d.tmp", argv[2], (int)getpid());
        for (int r = 0; r < reps; r++) {
            tf[r] = quantize_all(npuc_kq_ops_best(), types[k], x, rows, cols, nt, y, gt->tsize);
            ts[r] = quantize_all(&STUB, types[k], x, rows, cols, nt, y, gt->tsize);
            const double t0 = now();
            const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
            if (fd < 0) return 1;
            for (size_t i = 0; i < nt; i++) {
                const size_t nb = rows[i] * (cols[i] / 256) * gt->tsize;
                if (write(fd, y[i], nb) != (ssize_t)nb) return 1;
            }
            if (fsync(fd) != 0 || close(fd) != 0) return 1;
            tw[r] = now() - t0;
            unlink(path);
        }
        qsort(tf, (size_t)reps, sizeof *tf, cmpd);
        qsort(ts, (size_t)reps, sizeof *ts, cmpd);
        qsort(tw, (size_t)reps, sizeof *tw, cmpd);
        const double full = tf[reps / 2], stub = ts[reps / 2], rd = tr[reps / 2], wr = tw[reps / 2];
        printf("%-5s %7.3fs %7.3fs %7.3fs %7.3fs %7.3fs   (%zu bytes out; kernels %s)\n", gt->name, rd, full - stub,
               stub, wr, rd + full + wr, bytes, npuc_kq_ops_best()->name);
    }
    for (size_t i = 0; i < n; i++) free(x[i]), free(y[i]);
    free(x), free(y), free(rows), free(cols), free(tr), free(tf), free(ts), free(tw);
    npuc_model_close(m);
    npuc_ctx_free(ctx);
    return 0;
}
