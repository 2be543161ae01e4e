/*
 * bench_lowrank.c - npuc lowrank's solvers against full LAPACK sgesdd and
 * torch.svd_lowrank, side by side (issue 5).
 *
 *     bench_lowrank [--quick] [--no-torch] [--shared DIR] [--python PATH]
 *
 * Matrices:
 *   - random 4096 x 4096 and 4096 x 1024 with a known power-law spectrum
 *     s_i = (1 + i)^-alpha, built as U diag(s) V^T from orthonormal U, V
 *     (QR of Gaussian matrices); alpha = 1 (decaying: low rank matters) and,
 *     without --quick, alpha = 0.5 (flat: the hard case for sketching);
 *   - the nine Linear weights of ../shared/data/ppocrv4_rec.safetensors
 *     (Paddle [in, out], factored as stored).
 * For each, at r = min(m, n) / 8, with p = 10 oversampling columns and q = 3
 * power iterations (npuc's default, the fewest that reach 1.01x the optimum
 * on the 4096 x 4096 matrices) and, for the random matrices, also q = 2 (the
 * issue's setting) and, on 4096 x 4096, p = 20 with q = 3 (to set npuc with
 * more oversampling against torch at p = 10):
 *   sgesdd    the full thin SVD (jobz 'S') by OpenBLAS's LAPACK with 1 and 2
 *             threads (the reference cost of "just do the SVD");
 *   exact     npuc_lowrank_tensor with the exact solver (sgesdd on one thread,
 *             factors, error measurement);
 *   rand      npuc_lowrank_tensor with the randomized solver, with 1 and 2
 *             threads (-j): SVD, factors and measured error;
 *   svd       npuc_svd alone (randomized, 1 and 2 threads): the same work as
 *             torch.svd_lowrank at the same p and q;
 *   err/opt   the randomized factors' measured |W - A B|_F / |W|_F over the
 *             optimum sqrt(sum_{i>=r} s_i^2) / |W|_F from sgesdd's values;
 *   torch     torch.svd_lowrank(W, q=r+p, niter=q) with 1 and 2 threads
 *             (bench_lowrank_torch.py, Debian's /usr/bin/python3) on 1 and 2
 *             cores: OpenBLAS (which torch's matmuls and QRs use) on that
 *             many threads and ATen on 1 or that many, the faster; its error
 *             over the same optimum.
 * Times are the best of several runs (one run for the 4096 x 4096 sgesdd),
 * taken in three rounds that each time npuc and torch in turn, so that a
 * burst of load from another process hits both sides alike; each row ends
 * with the 1-minute load average when it was printed.
 * Benchmarks print, they do not judge; the goals of the issue are shown next
 * to the measured ratios.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>
#include <lapacke.h>

#include <npuc/npuc.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void loadavg(char *buf, size_t n) {
    FILE *f = fopen("/proc/loadavg", "r");
    buf[0] = 0;
    if (f) {
        if (!fgets(buf, (int)n, f)) buf[0] = 0;
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = 0;
}

static uint64_t rng_next(uint64_t *s) {
    uint64_t x = (*s += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static float randn(uint64_t *s) {
    double u1 = ((double)(rng_next(s) >> 11) + 0.5) / 9007199254740992.0;
    double u2 = (double)(rng_next(s) >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
}

/* rows x k column-major with orthonormal columns. */
static float *orthonormal(int rows, int k, uint64_t *s) {
    float *q = malloc(sizeof(float) * (size_t)rows * (size_t)k), *tau = malloc(sizeof(float) * (size_t)k);
    for (size_t i = 0; i < (size_t)rows * (size_t)k; i++) q[i] = randn(s);
    if (LAPACKE_sgeqrf(LAPACK_COL_MAJOR, rows, k, q, rows, tau) ||
        LAPACKE_sorgqr(LAPACK_COL_MAJOR, rows, k, k, q, rows, tau)) {
        fprintf(stderr, "bench_lowrank: QR failed\n");
        exit(1);
    }
    free(tau);
    return q;
}

/* Row-major m x n: U diag((1+i)^-alpha) V^T. */
static float *spectrum_matrix(int m, int n, double alpha, uint64_t seed) {
    int k = m < n ? m : n;
    uint64_t s = seed;
    openblas_set_num_threads(2);
    float *u = orthonormal(m, k, &s), *v = orthonormal(n, k, &s);
    for (int j = 0; j < k; j++) {
        float sj = (float)pow(1.0 + j, -alpha);
        for (int i = 0; i < m; i++) u[i + (size_t)j * m] *= sj;
    }
    float *w = malloc(sizeof(float) * (size_t)m * (size_t)n);
    /* Row-major W = (U S) V^T. */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, n, k, 1.0f, u, m, v, n, 0.0f, w, n);
    /* u is m x k column-major = k x m row-major, so op(A) = U: (k x m)^T; v likewise. */
    free(u);
    free(v);
    return w;
}

/* The full thin SVD by LAPACK (jobz 'S') with `threads` OpenBLAS threads;
 * returns seconds and the singular values in s (min(m, n)). */
static double time_sgesdd(const float *w, int m, int n, int threads, float *s) {
    int k = m < n ? m : n;
    float *x = malloc(sizeof(float) * (size_t)m * n), *u = malloc(sizeof(float) * (size_t)m * k),
          *vt = malloc(sizeof(float) * (size_t)k * n);
    memcpy(x, w, sizeof(float) * (size_t)m * n);
    openblas_set_num_threads(threads);
    double t0 = now();
    int info = LAPACKE_sgesdd(LAPACK_ROW_MAJOR, 'S', m, n, x, n, s, u, k, vt, n);
    double t = now() - t0;
    openblas_set_num_threads(1);
    if (info) fprintf(stderr, "bench_lowrank: sgesdd info %d\n", info);
    free(x);
    free(u);
    free(vt);
    return t;
}

typedef struct run {
    double time_s, rel_fro;
} run;

/* Best of reps runs of npuc_lowrank_tensor at fixed rank r. */
static run time_npuc(npuc_ctx *ctx, const float *w, int m, int n, int r, npuc_svd_solver solver, int threads,
                     int reps, int ov, int pi) {
    int64_t shape[2] = {m, n};
    npuc_tensor_info t;
    memset(&t, 0, sizeof t);
    t.name = "bench";
    t.dtype = NPUC_DTYPE_F32;
    t.rank = 2;
    t.shape[0] = shape[0];
    t.shape[1] = shape[1];
    t.numel = (uint64_t)m * (uint64_t)n;
    t.nbytes = t.numel * 4;
    t.layout = NPUC_LAYOUT_OI;
    npuc_lowrank_params p = npuc_lowrank_params_defaults();
    p.rule = NPUC_RANK_FIXED;
    p.rank = r;
    p.svd.solver = solver;
    p.svd.oversample = ov;
    p.svd.power_iters = pi;
    npuc_ctx_set_threads(ctx, threads);
    run best = {INFINITY, NAN};
    for (int i = 0; i < reps; i++) {
        npuc_lowrank_result res;
        double t0 = now();
        npuc_status st = npuc_lowrank_tensor(ctx, &t, w, &p, &res);
        double dt = now() - t0;
        if (st != NPUC_OK) {
            fprintf(stderr, "bench_lowrank: %s\n", npuc_ctx_errmsg(ctx));
            exit(1);
        }
        if (dt < best.time_s) best.time_s = dt;
        best.rel_fro = res.rel_fro_measured;
        npuc_lowrank_result_free(&res);
    }
    return best;
}

/* Best of reps runs of the public randomized SVD alone (what torch.svd_lowrank returns). */
static double time_svd(npuc_ctx *ctx, const float *w, int m, int n, int r, int threads, int reps, int ov, int pi) {
    npuc_svd_opts o = npuc_svd_opts_defaults();
    o.solver = NPUC_SVD_RANDOMIZED;
    o.oversample = ov;
    o.power_iters = pi;
    float *s = malloc(sizeof(float) * (size_t)r), *u = malloc(sizeof(float) * (size_t)m * r),
          *vt = malloc(sizeof(float) * (size_t)r * n);
    npuc_ctx_set_threads(ctx, threads);
    double best = INFINITY;
    for (int i = 0; i < reps; i++) {
        double t0 = now();
        if (npuc_svd(ctx, w, m, n, r, &o, s, u, vt) != NPUC_OK) {
            fprintf(stderr, "bench_lowrank: %s\n", npuc_ctx_errmsg(ctx));
            exit(1);
        }
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    free(s);
    free(u);
    free(vt);
    return best;
}

static const char *g_python = "/usr/bin/python3";
static int g_torch = 1;

/* One torch.svd_lowrank run through bench_lowrank_torch.py (beside this
 * file) with OpenBLAS on blas_threads and ATen on aten_threads threads. */
static run torch_once(const char *raw, int m, int n, int r, int blas_threads, int aten_threads, int reps, int ov,
                      int pi) {
    run out = {NAN, NAN};
    char dir[1024], cmd[2048];
    snprintf(dir, sizeof dir, "%s", __FILE__);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0; else snprintf(dir, sizeof dir, ".");
    /* torch.set_num_threads sizes ATen's OpenMP pool only; torch's matmuls and
     * QRs run in OpenBLAS, whose pool is sized from the environment. */
    snprintf(cmd, sizeof cmd,
             "OPENBLAS_NUM_THREADS=%d OMP_NUM_THREADS=%d '%s' '%s/bench_lowrank_torch.py' %s %d %d %d %d %d %d %d",
             blas_threads, aten_threads, g_python, dir, raw, m, n, r, ov, pi, aten_threads, reps);
    FILE *p = popen(cmd, "r");
    char line[512] = "";
    if (p) {
        if (!fgets(line, sizeof line, p)) line[0] = 0;
        if (pclose(p) != 0) { g_torch = 0; fprintf(stderr, "bench_lowrank: torch unavailable: %s", line); }
    }
    const char *a = strstr(line, "\"time_s\": "), *b = strstr(line, "\"rel_fro\": ");
    if (a && b) {
        out.time_s = strtod(a + 10, NULL);
        out.rel_fro = strtod(b + 11, NULL);
    }
    return out;
}

/* torch on `threads` cores: OpenBLAS on that many threads, and ATen on 1 or
 * on `threads` threads, whichever is faster (on two cores ATen's pool and
 * OpenBLAS' compete, so ATen on one thread is usually torch's best). */
static run time_torch(const float *w, int m, int n, int r, int threads, int reps, int ov, int pi) {
    run best = {NAN, NAN};
    if (!g_torch) return best;
    char raw[] = "/tmp/npuc-bench-lr-XXXXXX";
    int fd = mkstemp(raw);
    if (fd < 0) return best;
    FILE *f = fdopen(fd, "wb");
    fwrite(w, sizeof(float), (size_t)m * n, f);
    fclose(f);
    for (int aten = 1; aten <= threads && g_torch; aten = aten == 1 && threads > 1 ? threads : threads + 1) {
        run t = torch_once(raw, m, n, r, threads, aten, reps, ov, pi);
        if (isnan(best.time_s) || t.time_s < best.time_s) best = t;
    }
    unlink(raw);
    return best;
}

static double optimum(const float *s, int k, int r) {
    double tot = 0, tail = 0;
    for (int i = 0; i < k; i++) tot += (double)s[i] * s[i];
    for (int i = k - 1; i >= r; i--) tail += (double)s[i] * s[i];
    return sqrt(tail / tot);
}

static void fmt_t(double t, char *buf, size_t n) {
    if (isnan(t)) snprintf(buf, n, "-");
    else if (t < 1e-3) snprintf(buf, n, "%.0f us", t * 1e6);
    else if (t < 1) snprintf(buf, n, "%.1f ms", t * 1e3);
    else snprintf(buf, n, "%.2f s", t);
}

/* One matrix: the full SVD once, then one row per (oversampling, power iterations) setting. */
static void bench_matrix(npuc_ctx *ctx, const char *label, const float *w, int m, int n, int quick, const int *pq,
                         int npq) {
    int k = m < n ? m : n, r = k / 8 > 0 ? k / 8 : 1;
    double big = (double)m * n * k;
    int reps = big > 1e10 ? 3 : big > 1e8 ? 5 : 20;
    float *s = malloc(sizeof(float) * (size_t)k);
    double sd1 = quick && big > 1e10 ? NAN : time_sgesdd(w, m, n, 1, s);
    double sd2 = time_sgesdd(w, m, n, 2, s);
    if (big <= 1e10) { /* small: best of several */
        for (int i = 1; i < reps; i++) {
            double t = time_sgesdd(w, m, n, 1, s);
            if (t < sd1) sd1 = t;
            t = time_sgesdd(w, m, n, 2, s);
            if (t < sd2) sd2 = t;
        }
    }
    double opt = optimum(s, k, r);
    const npuc_svd_opts def = npuc_svd_opts_defaults();
    run ex = time_npuc(ctx, w, m, n, r, NPUC_SVD_EXACT, 2, big > 1e10 ? 1 : reps, def.oversample, def.power_iters);
    if (fabs(ex.rel_fro / opt - 1) > 1e-3)
        printf("  ! exact solver error %.6f differs from the optimum %.6f\n", ex.rel_fro, opt);
    for (int c = 0; c < npq; c++) {
        int ov = pq[2 * c], pi = pq[2 * c + 1];
        /* Rounds of npuc and torch in turn; the best time of each. */
        const int rounds = 3, per = (reps + rounds - 1) / rounds;
        run r1 = {INFINITY, NAN}, r2 = r1, t1 = {NAN, NAN}, t2 = t1;
        double sv1 = INFINITY, sv2 = INFINITY;
        for (int round = 0; round < rounds; round++) {
            run x = time_npuc(ctx, w, m, n, r, NPUC_SVD_RANDOMIZED, 1, per, ov, pi);
            if (x.time_s < r1.time_s) r1 = x;
            x = time_npuc(ctx, w, m, n, r, NPUC_SVD_RANDOMIZED, 2, per, ov, pi);
            if (x.time_s < r2.time_s) r2 = x;
            sv1 = fmin(sv1, time_svd(ctx, w, m, n, r, 1, per, ov, pi));
            sv2 = fmin(sv2, time_svd(ctx, w, m, n, r, 2, per, ov, pi));
            x = time_torch(w, m, n, r, 1, per, ov, pi);
            if (isnan(t1.time_s) || x.time_s < t1.time_s) t1 = x;
            x = time_torch(w, m, n, r, 2, per, ov, pi);
            if (isnan(t2.time_s) || x.time_s < t2.time_s) t2 = x;
        }
        char a[8][24], c2[2][24], lab[64];
        fmt_t(sd1, a[0], 24);
        fmt_t(sd2, a[1], 24);
        fmt_t(ex.time_s, a[2], 24);
        fmt_t(r1.time_s, a[3], 24);
        fmt_t(r2.time_s, a[4], 24);
        fmt_t(t1.time_s, c2[0], 24);
        fmt_t(t2.time_s, c2[1], 24);
        snprintf(a[5], 24, "%.1fx", sd2 / r2.time_s);
        fmt_t(sv2, a[6], 24);
        fmt_t(sv1, a[7], 24);
        snprintf(lab, sizeof lab, "%s p%d q%d", label, ov, pi);
        char la[128];
        loadavg(la, sizeof la);
        la[strcspn(la, " ")] = 0;
        printf("%-34s %5dx%-5d %4d | %9s %9s | %9s | %9s %9s %9s %9s %6s | %8.5f %7.4f | %9s %9s %7.4f | %5.2fx %5.2fx | %s\n",
               lab, m, n, r, c ? "" : a[0], c ? "" : a[1], c ? "" : a[2], a[3], a[4], a[7], a[6], a[5], opt,
               r2.rel_fro / opt, c2[0], c2[1], t2.rel_fro / opt, t1.time_s / sv1, t2.time_s / sv2, la);
        if (r1.rel_fro != r2.rel_fro)
            printf("  ! randomized results differ between 1 and 2 threads (%.9g vs %.9g)\n", r1.rel_fro, r2.rel_fro);
        fflush(stdout);
    }
    free(s);
}

int main(int argc, char **argv) {
    int quick = 0;
    const char *shared = getenv("NPUC_SHARED_DATA");
    char sbuf[1024];
    if (!shared) {
        snprintf(sbuf, sizeof sbuf, "%s", __FILE__);
        char *sl = strrchr(sbuf, '/');
        if (sl) *sl = 0;
        strncat(sbuf, "/../../shared/data", sizeof sbuf - strlen(sbuf) - 1);
        shared = sbuf;
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--no-torch")) g_torch = 0;
        else if (!strcmp(argv[i], "--shared") && i + 1 < argc) shared = argv[++i];
        else if (!strcmp(argv[i], "--python") && i + 1 < argc) g_python = argv[++i];
        else {
            fprintf(stderr, "usage: bench_lowrank [--quick] [--no-torch] [--shared DIR] [--python PATH]\n");
            return 2;
        }
    }
    npuc_ctx *ctx;
    if (npuc_ctx_new(&ctx) != NPUC_OK) return 1;
    openblas_set_num_threads(1);
    char la[128];
    loadavg(la, sizeof la);
    printf("bench_lowrank: %ld cores, OpenBLAS %s\n", sysconf(_SC_NPROCESSORS_ONLN), openblas_get_config());
    printf("load average at start: %s\n", la);
    printf("r = min(m,n)/8; randomized with p oversampling columns and q power iterations (npuc and torch alike)\n");
    printf("sgesdd = full thin SVD by LAPACK (1 / 2 OpenBLAS threads); exact = npuc exact solver; "
           "rand = npuc randomized (-j 1 / -j 2)\n");
    printf("rand = the whole per-tensor step (SVD, factors, measured error); svd = npuc_svd alone (randomized, "
           "what torch.svd_lowrank returns)\n");
    printf("speedup = sgesdd(2 thr) / rand(-j 2); err/opt = measured error / optimal error; "
           "t/n 1, t/n 2 = torch time / npuc svd time with 1, 2 threads (> 1: npuc faster)\n");
    printf("torch N: OPENBLAS_NUM_THREADS=N, ATen (torch.set_num_threads) on 1 or N threads, the faster\n\n");
    printf("%-34s %11s %4s | %9s %9s | %9s | %9s %9s %9s %9s %6s | %8s %7s | %9s %9s %7s | %6s %6s | %s\n", "matrix",
           "m x n", "r", "sgesdd 1", "sgesdd 2", "exact", "rand j1", "rand j2", "svd j1", "svd j2", "speedup",
           "opt err", "err/opt", "torch 1", "torch 2", "err/opt", "t/n 1", "t/n 2", "load");

    /* ppocrv4_rec Linear layers, as stored ([in, out]). */
    char path[1200];
    snprintf(path, sizeof path, "%s/ppocrv4_rec.safetensors", shared);
    npuc_model *m = NULL;
    if (access(path, R_OK) == 0 && npuc_model_open(ctx, path, NULL, &m) == NPUC_OK) {
        const char *rule = "^linear_[0-9]+\\.w_0$=io";
        npuc_model_apply_layout_rules(ctx, m, &rule, 1);
        for (size_t i = 0; i < npuc_model_count(m); i++) {
            const npuc_tensor_info *t = npuc_model_tensor(m, i);
            if (strncmp(t->name, "linear_", 7) != 0 || t->rank != 2) continue;
            float *w = malloc(sizeof(float) * (size_t)t->numel);
            npuc_model_read_f32(ctx, m, i, w);
            char label[64];
            snprintf(label, sizeof label, "ppocrv4 %s", t->name);
            const npuc_svd_opts d = npuc_svd_opts_defaults();
            const int def[2] = {d.oversample, d.power_iters};
            bench_matrix(ctx, label, w, (int)t->shape[0], (int)t->shape[1], quick, def, 1);
            free(w);
        }
        npuc_model_close(m);
    } else {
        printf("(no %s: ppocrv4_rec rows skipped)\n", path);
    }
    static const struct { int m, n; double alpha; } R[] = {
        {4096, 1024, 1.0}, {4096, 4096, 1.0}, {4096, 1024, 0.5}, {4096, 4096, 0.5},
    };
    for (size_t i = 0; i < sizeof R / sizeof R[0]; i++) {
        if (quick && R[i].alpha != 1.0) continue;
        float *w = spectrum_matrix(R[i].m, R[i].n, R[i].alpha, 42 + i);
        char label[64];
        snprintf(label, sizeof label, "random (1+i)^-%.1f", R[i].alpha);
        /* npuc's default (p 10, q 3), the setting (p 10, q 2) and,
         * on 4096 x 4096, p 20 q 3: what more oversampling buys (compare
         * npuc's p 20 row with torch's p 10 row: time and error). */
        static const int both[6] = {10, 3, 10, 2, 20, 3};
        bench_matrix(ctx, label, w, R[i].m, R[i].n, quick, both, R[i].m == R[i].n ? 3 : 2);
        free(w);
    }
    loadavg(la, sizeof la);
    printf("\nload average at end: %s\n", la);
    printf("goals (issue 5): 4096x4096 r=512: speedup >= 5x with err/opt <= 1.01; npuc faster than torch at "
           "equal or lower error (t/n > 1 with npuc err/opt <= torch err/opt, same p and q)\n");
    npuc_ctx_free(ctx);
    return 0;
}
