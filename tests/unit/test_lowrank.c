/*
 * test_lowrank.c - npuc lowrank against independent computations.
 *
 * References are computed here in double precision: matrices with known
 * singular values are built as U diag(s) V^T from orthonormal U, V (LAPACK
 * dgeqrf/dorgqr of Gaussian matrices), spectra come from dgesdd, products
 * and convolutions from plain loops.  The library works in float, so the
 * comparisons use the tolerances named below.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>

#include <lapacke.h>

#include "testutil.h"
#include "passes/lowrank/lowrank_internal.h"

/* The exact solver's reported error against sqrt(sum tail s_i^2) / |W|_F. */
#define LR_TAIL_RTOL 1e-4
/* Factors multiplied back (float sgemm) against a double-precision product. */
#define LR_PRODUCT_RTOL 1e-5
/* Randomized error (p = 10, q = 2) over the optimum on a 1/(1+i) spectrum. */
#define LR_RAND_MAX_RATIO 1.01
/* The same at the default q = 3 (LU bases between the products). */
#define LR_RAND_Q3_MAX_RATIO 1.005
/* Singular values of float LAPACK against double LAPACK, relative to s_1. */
#define LR_SVAL_TOL 2e-6

static npuc_ctx *ctx;

static int setup(void **state) { (void)state; return npuc_ctx_new(&ctx) == NPUC_OK ? 0 : -1; }
static int teardown(void **state) { (void)state; npuc_ctx_free(ctx); return 0; }

/* ------------------------------------------------------------- helpers */

/* rows x k column-major orthonormal columns (QR of a Gaussian matrix). */
static double *orthonormal(int rows, int k, uint64_t *rng) {
    double *q = malloc(sizeof(double) * (size_t)rows * (size_t)k), *tau = malloc(sizeof(double) * (size_t)k);
    for (int i = 0; i < rows * k; i++) q[i] = npuc_test_randn(rng);
    assert_int_equal(LAPACKE_dgeqrf(LAPACK_COL_MAJOR, rows, k, q, rows, tau), 0);
    assert_int_equal(LAPACKE_dorgqr(LAPACK_COL_MAJOR, rows, k, k, q, rows, tau), 0);
    free(tau);
    return q;
}

/* Row-major m x n float matrix W = U diag(s) V^T with k = min(m, n) given
 * singular values (descending). */
static float *with_spectrum(int m, int n, const double *s, uint64_t seed) {
    int k = m < n ? m : n;
    uint64_t rng = seed;
    double *u = orthonormal(m, k, &rng), *v = orthonormal(n, k, &rng);
    float *w = malloc(sizeof(float) * (size_t)m * (size_t)n);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double acc = 0;
            for (int t = 0; t < k; t++) acc += u[i + t * m] * s[t] * v[j + t * n];
            w[i * n + j] = (float)acc;
        }
    free(u);
    free(v);
    return w;
}

static float *gaussian(uint64_t n, uint64_t seed) {
    float *w = malloc(sizeof(float) * (size_t)n);
    uint64_t rng = seed;
    for (uint64_t i = 0; i < n; i++) w[i] = npuc_test_randn(&rng);
    return w;
}

/* Singular values of a row-major float matrix in double (dgesdd). */
static double *svals_double(const float *w, int m, int n) {
    int k = m < n ? m : n;
    double *a = malloc(sizeof(double) * (size_t)m * (size_t)n), *s = malloc(sizeof(double) * (size_t)k);
    for (int i = 0; i < m * n; i++) a[i] = w[i];
    double dummy[1];
    /* Row-major m x n is column-major n x m: same singular values. */
    assert_int_equal(LAPACKE_dgesdd(LAPACK_COL_MAJOR, 'N', n, m, a, n, s, dummy, 1, dummy, 1), 0);
    free(a);
    return s;
}

static double tail_ratio(const double *s, int k, int r) {
    double tot = 0, tail = 0;
    for (int i = 0; i < k; i++) tot += s[i] * s[i];
    for (int i = k - 1; i >= r; i--) tail += s[i] * s[i];
    return sqrt(tail / tot);
}

static npuc_tensor_info tinfo(const char *name, npuc_layout l, npuc_dtype dt, int rank, const int64_t *shape) {
    npuc_tensor_info t;
    memset(&t, 0, sizeof t);
    t.name = name;
    t.dtype = dt;
    t.rank = rank;
    t.layout = l;
    t.role = NPUC_ROLE_LINEAR;
    t.numel = 1;
    for (int i = 0; i < rank; i++) { t.shape[i] = shape[i]; t.numel *= (uint64_t)shape[i]; }
    t.nbytes = t.numel * npuc_dtype_size(dt);
    return t;
}

static npuc_lowrank_params rule(npuc_rank_rule r, double v, npuc_svd_solver solver) {
    npuc_lowrank_params p = npuc_lowrank_params_defaults();
    p.rule = r;
    if (r == NPUC_RANK_FIXED) p.rank = (int64_t)v;
    else p.value = v;
    p.svd.solver = solver;
    return p;
}

/* |W - L R|_F / |W|_F in double, with L R formed by loops from the factors
 * in the orientation the geometry says. */
static double product_error(const float *w, const npuc_lowrank_result *res) {
    const float *L = res->g.out_first ? res->a : res->b, *R = res->g.out_first ? res->b : res->a;
    int64_t m = res->g.m, n = res->g.n, r = res->rank;
    double e2 = 0, w2 = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double acc = 0;
            for (int64_t t = 0; t < r; t++) acc += (double)L[i * r + t] * R[t * n + j];
            double d = acc - w[i * n + j];
            e2 += d * d;
            w2 += (double)w[i * n + j] * w[i * n + j];
        }
    return sqrt(e2 / w2);
}

/* ------------------------------------------------------------- tests */

/* The exact solver's error is the tail energy of the spectrum (Eckart-Young). */
static void test_exact_error_is_tail(void **state) {
    (void)state;
    const int m = 50, n = 80;
    float *w = gaussian((uint64_t)m * n, 11);
    double *s = svals_double(w, m, n);
    float sf[50];
    assert_int_equal(npuc_svd_values(ctx, w, m, n, sf), NPUC_OK);
    for (int i = 0; i < m; i++) assert_close(sf[i], s[i], 0, LR_SVAL_TOL * s[0]);
    int64_t shape[2] = {m, n};
    npuc_tensor_info t = tinfo("fc.weight", NPUC_LAYOUT_OI, NPUC_DTYPE_F32, 2, shape);
    const int ranks[] = {1, 5, 20, 30};
    for (size_t k = 0; k < sizeof ranks / sizeof ranks[0]; k++) {
        npuc_lowrank_params p = rule(NPUC_RANK_FIXED, ranks[k], NPUC_SVD_EXACT);
        npuc_lowrank_result res;
        assert_int_equal(npuc_lowrank_tensor(ctx, &t, w, &p, &res), NPUC_OK);
        assert_true(res.factored);
        assert_int_equal(res.rank, ranks[k]);
        assert_int_equal(res.solver, NPUC_SVD_EXACT);
        double want = tail_ratio(s, m, ranks[k]);
        assert_close(res.rel_fro, want, LR_TAIL_RTOL, 0);
        assert_close(res.err.rel_fro, want, LR_TAIL_RTOL, 0);
        /* The factors as stored really have that error. */
        assert_close(product_error(w, &res), want, LR_TAIL_RTOL, 0);
        assert_close(res.rel_fro_measured, want, LR_TAIL_RTOL, 0);
        double kept = 1 - want * want;
        assert_close(res.energy, kept, LR_TAIL_RTOL, 0);
        npuc_lowrank_result_free(&res);
    }
    free(s);
    free(w);
}

/* Known singular values: --energy and --max-error give the rank the
 * spectrum implies, with both solvers. */
static void test_known_spectrum_rank(void **state) {
    (void)state;
    const int m = 120, n = 90, k = 90;
    double s[90], pre[91];
    pre[0] = 0;
    for (int i = 0; i < k; i++) {
        s[i] = 10.0 * pow(0.9, i);
        pre[i + 1] = pre[i] + s[i] * s[i];
    }
    float *w = with_spectrum(m, n, s, 5);
    int64_t shape[2] = {m, n};
    npuc_tensor_info t = tinfo("w", NPUC_LAYOUT_OI, NPUC_DTYPE_F32, 2, shape);
    const double energies[] = {0.3, 0.5, 0.8, 0.9, 0.99, 0.998};
    const double errors[] = {0.5, 0.2, 0.1, 0.03, 0.01};
    const npuc_svd_solver solvers[] = {NPUC_SVD_EXACT, NPUC_SVD_RANDOMIZED};
    for (int sv = 0; sv < 2; sv++) {
        for (size_t e = 0; e < sizeof energies / sizeof energies[0]; e++) {
            int want = 0;
            while (pre[want] < energies[e] * pre[k]) want++;
            /* Keep the targets away from ties so float rounding cannot flip them. */
            assert_true(fabs(pre[want] / pre[k] - energies[e]) > 1e-4);
            assert_true(fabs(pre[want - 1] / pre[k] - energies[e]) > 1e-4);
            npuc_lowrank_params p = rule(NPUC_RANK_ENERGY, energies[e], solvers[sv]);
            npuc_lowrank_result res;
            assert_int_equal(npuc_lowrank_tensor(ctx, &t, w, &p, &res), NPUC_OK);
            assert_int_equal(res.rank, want);
            assert_int_equal(res.solver, solvers[sv]);
            assert_true(res.energy >= energies[e] - 1e-6);
            npuc_lowrank_result_free(&res);
        }
        for (size_t e = 0; e < sizeof errors / sizeof errors[0]; e++) {
            int want = 1;
            while (sqrt(1 - pre[want] / pre[k]) > errors[e]) want++;
            double got_err = sqrt(1 - pre[want] / pre[k]), prev_err = sqrt(1 - pre[want - 1] / pre[k]);
            assert_true(fabs(got_err - errors[e]) > 1e-4 && fabs(prev_err - errors[e]) > 1e-4);
            npuc_lowrank_params p = rule(NPUC_RANK_MAX_ERROR, errors[e], solvers[sv]);
            npuc_lowrank_result res;
            assert_int_equal(npuc_lowrank_tensor(ctx, &t, w, &p, &res), NPUC_OK);
            assert_int_equal(res.rank, want);
            if (res.factored) {
                assert_true(res.rel_fro <= errors[e] * (1 + 1e-4));
                assert_true(product_error(w, &res) <= errors[e] * (1 + 1e-4));
            }
            npuc_lowrank_result_free(&res);
        }
    }
    /* --round-to rounds the rank up; a rank that no longer saves is left dense. */
    npuc_lowrank_params p = rule(NPUC_RANK_ENERGY, 0.8, NPUC_SVD_EXACT);
    p.round_to = 8;
    npuc_lowrank_result res;
    assert_int_equal(npuc_lowrank_tensor(ctx, &t, w, &p, &res), NPUC_OK);
    int want = 0;
    while (pre[want] < 0.8 * pre[k]) want++;
    assert_int_equal(res.rank, (want + 7) / 8 * 8);
    assert_int_equal(res.a_info.shape[1], res.rank);
    npuc_lowrank_result_free(&res);
    p = rule(NPUC_RANK_ENERGY, 0.9999999, NPUC_SVD_EXACT);
    assert_int_equal(npuc_lowrank_tensor(ctx, &t, w, &p, &res), NPUC_OK);
    assert_false(res.factored); /* r (m + n) >= m n */
    assert_null(res.a);
    npuc_lowrank_result_free(&res);
    free(w);
}

/* The seed's old default, ratio 0.5 on a square matrix, saves nothing. */
static void test_no_saving(void **state) {
    (void)state;
    int64_t shape[2] = {64, 64};
    float *w = gaussian(64 * 64, 3);
    npuc_tensor_info t = tinfo("sq", NPUC_LAYOUT_OI, NPUC_DTYPE_F32, 2, shape);
    npuc_lowrank_params p = rule(NPUC_RANK_RATIO, 0.5, NPUC_SVD_AUTO);
    npuc_lowrank_result res;
    assert_int_equal(npuc_lowrank_tensor(ctx, &t, w, &p, &res), NPUC_OK);
    assert_int_equal(res.rank, 32);
    assert_false(res.factored);
    npuc_lowrank_result_free(&res);
    p = rule(NPUC_RANK_RATIO, 0.25, NPUC_SVD_AUTO); /* 16 * 128 < 4096 */
    assert_int_equal(npuc_lowrank_tensor(ctx, &t, w, &p, &res), NPUC_OK);
    assert_int_equal(res.rank, 16);
    assert_true(res.factored);
    assert_false(res.rank_is_bound);
    npuc_lowrank_result_free(&res);
    free(w);

    /* A flat (Gaussian) spectrum and a demanding energy: the randomized
     * search stops once no rank that saves is left (149 for 300 x 300). */
    int64_t big[2] = {300, 300};
    w = gaussian(300 * 300, 13);
    t = tinfo("flat", NPUC_LAYOUT_OI, NPUC_DTYPE_F32, 2, big);
    p = rule(NPUC_RANK_ENERGY, 0.999, NPUC_SVD_RANDOMIZED);
    assert_int_equal(npuc_lowrank_tensor(ctx, &t, w, &p, &res), NPUC_OK);
    assert_false(res.factored);
    assert_true(res.rank_is_bound);
    assert_true(res.rank > 149 && res.rank < 300);
    npuc_lowrank_result_free(&res);
    p.svd.solver = NPUC_SVD_EXACT;
    assert_int_equal(npuc_lowrank_tensor(ctx, &t, w, &p, &res), NPUC_OK);
    assert_false(res.factored);
    assert_false(res.rank_is_bound);
    assert_true(res.rank > 149);
    npuc_lowrank_result_free(&res);
    free(w);
}

static void assert_shape(const npuc_tensor_info *t, int rank, const int64_t *want) {
    assert_int_equal(t->rank, rank);
    for (int i = 0; i < rank; i++) assert_int_equal(t->shape[i], want[i]);
}

/* Factor shapes per layout, and what they mean: conv(x, W) equals a kh x kw
 * conv with lr_b followed by a 1x1 conv with lr_a, in either layout. */
static void test_conv_factor_shapes(void **state) {
    (void)state;
    npuc_tensor_info a, b;
    {
        int64_t s[4] = {64, 32, 3, 3}, wa[4] = {64, 8, 1, 1}, wb[4] = {8, 32, 3, 3};
        npuc_tensor_info t = tinfo("c", NPUC_LAYOUT_OIHW, NPUC_DTYPE_F32, 4, s);
        assert_int_equal(npuc_lowrank_factor_shapes(ctx, &t, 8, &a, &b), NPUC_OK);
        assert_shape(&a, 4, wa);
        assert_shape(&b, 4, wb);
        assert_int_equal(a.layout, NPUC_LAYOUT_OIHW);
    }
    {
        int64_t s[4] = {3, 3, 32, 64}, wa[4] = {1, 1, 8, 64}, wb[4] = {3, 3, 32, 8};
        npuc_tensor_info t = tinfo("k", NPUC_LAYOUT_HWIO, NPUC_DTYPE_F32, 4, s);
        assert_int_equal(npuc_lowrank_factor_shapes(ctx, &t, 8, &a, &b), NPUC_OK);
        assert_shape(&a, 4, wa);
        assert_shape(&b, 4, wb);
        assert_int_equal(b.layout, NPUC_LAYOUT_HWIO);
    }
    {
        int64_t s[3] = {16, 8, 5}, wa[3] = {16, 4, 1}, wb[3] = {4, 8, 5};
        npuc_tensor_info t = tinfo("c1", NPUC_LAYOUT_OIHW, NPUC_DTYPE_F32, 3, s);
        assert_int_equal(npuc_lowrank_factor_shapes(ctx, &t, 4, &a, &b), NPUC_OK);
        assert_shape(&a, 3, wa);
        assert_shape(&b, 3, wb);
    }
    {
        int64_t s[2] = {40, 60}, wa[2] = {40, 4}, wb[2] = {4, 60};
        npuc_tensor_info t = tinfo("oi", NPUC_LAYOUT_OI, NPUC_DTYPE_F32, 2, s);
        assert_int_equal(npuc_lowrank_factor_shapes(ctx, &t, 4, &a, &b), NPUC_OK);
        assert_shape(&a, 2, wa);
        assert_shape(&b, 2, wb);
        int64_t s2[2] = {60, 40}, wa2[2] = {4, 40}, wb2[2] = {60, 4};
        t = tinfo("io", NPUC_LAYOUT_IO, NPUC_DTYPE_F32, 2, s2);
        assert_int_equal(npuc_lowrank_factor_shapes(ctx, &t, 4, &a, &b), NPUC_OK);
        assert_shape(&a, 2, wa2);
        assert_shape(&b, 2, wb2);
    }
    /* Depthwise, transposed and 1-D tensors have no such factorisation. */
    {
        int64_t s[4] = {3, 3, 16, 1};
        npuc_tensor_info t = tinfo("dw", NPUC_LAYOUT_HWIM, NPUC_DTYPE_F32, 4, s);
        assert_int_equal(npuc_lowrank_factor_shapes(ctx, &t, 1, &a, &b), NPUC_ERR_ARG);
        t = tinfo("ct", NPUC_LAYOUT_IOHW, NPUC_DTYPE_F32, 4, s);
        assert_int_equal(npuc_lowrank_factor_shapes(ctx, &t, 1, &a, &b), NPUC_ERR_ARG);
        t = tinfo("b", NPUC_LAYOUT_NONE, NPUC_DTYPE_F32, 1, s);
        assert_int_equal(npuc_lowrank_factor_shapes(ctx, &t, 1, &a, &b), NPUC_ERR_ARG);
    }

    /* Convolution semantics on an exactly rank-4 kernel, CO=8, CI=3, 3x3, on a
     * 3x6x6 input (valid padding). */
    enum { CO = 8, CI = 3, CK = 3, CH = 6, COH = CH - CK + 1, CR = 4 };
    uint64_t rng = 9;
    float g1[CO * CR], g2[CR * CI * CK * CK], x[CI * CH * CH];
    for (int i = 0; i < CO * CR; i++) g1[i] = npuc_test_randn(&rng);
    for (int i = 0; i < CR * CI * CK * CK; i++) g2[i] = npuc_test_randn(&rng);
    for (int i = 0; i < CI * CH * CH; i++) x[i] = npuc_test_randn(&rng);
    float woihw[CO * CI * CK * CK], whwio[CK * CK * CI * CO];
    for (int o = 0; o < CO; o++)
        for (int c = 0; c < CI * CK * CK; c++) {
            double acc = 0;
            for (int t = 0; t < CR; t++) acc += (double)g1[o * CR + t] * g2[t * CI * CK * CK + c];
            woihw[o * CI * CK * CK + c] = (float)acc;
            int i = c / (CK * CK), kh = c / CK % CK, kw = c % CK;
            whwio[((kh * CK + kw) * CI + i) * CO + o] = (float)acc;
        }
    for (int layout = 0; layout < 2; layout++) {
        int64_t so[4] = {CO, CI, CK, CK}, sh[4] = {CK, CK, CI, CO};
        npuc_tensor_info t = layout == 0 ? tinfo("c", NPUC_LAYOUT_OIHW, NPUC_DTYPE_F32, 4, so)
                                         : tinfo("k", NPUC_LAYOUT_HWIO, NPUC_DTYPE_F32, 4, sh);
        const float *wt = layout == 0 ? woihw : whwio;
        npuc_lowrank_params p = rule(NPUC_RANK_FIXED, CR, NPUC_SVD_EXACT);
        npuc_lowrank_result res;
        assert_int_equal(npuc_lowrank_tensor(ctx, &t, wt, &p, &res), NPUC_OK);
        assert_true(res.factored);
        /* Weight accessors in each layout's own index order. */
#define W_AT(o, i, kh, kw) (layout == 0 ? wt[(((o) * CI + (i)) * CK + (kh)) * CK + (kw)] \
                                        : wt[(((kh) * CK + (kw)) * CI + (i)) * CO + (o)])
#define B_AT(j, i, kh, kw) (layout == 0 ? res.b[(((j) * CI + (i)) * CK + (kh)) * CK + (kw)] \
                                        : res.b[(((kh) * CK + (kw)) * CI + (i)) * CR + (j)])
#define A_AT(o, j) (layout == 0 ? res.a[(o) * CR + (j)] : res.a[(j) * CO + (o)])
        double maxd = 0, maxy = 0;
        for (int o = 0; o < CO; o++)
            for (int y = 0; y < COH; y++)
                for (int z = 0; z < COH; z++) {
                    double direct = 0, fact = 0;
                    for (int i = 0; i < CI; i++)
                        for (int kh = 0; kh < CK; kh++)
                            for (int kw = 0; kw < CK; kw++)
                                direct += (double)W_AT(o, i, kh, kw) * x[(i * CH + y + kh) * CH + z + kw];
                    for (int j = 0; j < CR; j++) {
                        double mid = 0; /* output j of the kh x kw conv with CR outputs */
                        for (int i = 0; i < CI; i++)
                            for (int kh = 0; kh < CK; kh++)
                                for (int kw = 0; kw < CK; kw++)
                                    mid += (double)B_AT(j, i, kh, kw) * x[(i * CH + y + kh) * CH + z + kw];
                        fact += (double)A_AT(o, j) * mid; /* the 1x1 conv */
                    }
                    maxd = fmax(maxd, fabs(direct - fact));
                    maxy = fmax(maxy, fabs(direct));
                }
#undef W_AT
#undef B_AT
#undef A_AT
        assert_true(maxd <= 1e-5 * maxy);
        npuc_lowrank_result_free(&res);
    }
}

static void write_model(const char *path) {
    npuc_writer *w;
    assert_int_equal(npuc_writer_open(ctx, path, NULL, &w), NPUC_OK);
    static const struct { const char *name; npuc_dtype dt; int rank; int64_t shape[4]; } T[] = {
        {"fc.weight", NPUC_DTYPE_F32, 2, {40, 60}},
        {"fc.bias", NPUC_DTYPE_F32, 1, {40}},
        {"conv.weight", NPUC_DTYPE_F32, 4, {16, 8, 3, 3}},
        {"blk/kernel", NPUC_DTYPE_F32, 4, {3, 3, 8, 16}},
        {"proj/kernel", NPUC_DTYPE_F32, 2, {60, 40}},
        {"half.weight", NPUC_DTYPE_F16, 2, {32, 48}},
    };
    enum { NT = sizeof T / sizeof T[0] };
    for (int i = 0; i < NT; i++) {
        npuc_tensor_info t;
        memset(&t, 0, sizeof t);
        t.name = T[i].name;
        t.dtype = T[i].dt;
        t.rank = T[i].rank;
        memcpy(t.shape, T[i].shape, sizeof T[i].shape);
        assert_int_equal(npuc_writer_declare(w, &t), NPUC_OK);
    }
    for (int i = 0; i < NT; i++) {
        uint64_t n = 1;
        for (int d = 0; d < T[i].rank; d++) n *= (uint64_t)T[i].shape[d];
        float *f = gaussian(n, 100 + (uint64_t)i);
        if (T[i].dt == NPUC_DTYPE_F16) {
            uint16_t *h = malloc(2 * (size_t)n);
            npuc_convert(h, NPUC_DTYPE_F16, f, NPUC_DTYPE_F32, (size_t)n);
            assert_int_equal(npuc_writer_write(w, h, 2 * n), NPUC_OK);
            free(h);
        } else {
            assert_int_equal(npuc_writer_write(w, f, 4 * n), NPUC_OK);
        }
        free(f);
    }
    assert_int_equal(npuc_writer_finish(w), NPUC_OK);
}

static float *read_tensor(npuc_model *m, const char *name, const npuc_tensor_info **t) {
    size_t i;
    assert_int_equal(npuc_model_find(m, name, &i), 0);
    *t = npuc_model_tensor(m, i);
    float *f = malloc(sizeof(float) * (size_t)(*t)->numel);
    assert_int_equal(npuc_model_read_f32(ctx, m, i, f), NPUC_OK);
    return f;
}

/* Decompress rebuilds every factored tensor as the product of its factors,
 * in the original dtype, shape and layout; other tensors are copied. */
static void test_decompress_reproduces_product(void **state) {
    (void)state;
    const char *src = npuc_test_path("lr_src.safetensors"), *art = npuc_test_path("lr_art.safetensors"),
               *dec = npuc_test_path("lr_dec.safetensors");
    write_model(src);
    npuc_model *m, *ma, *md;
    assert_int_equal(npuc_model_open(ctx, src, NULL, &m), NPUC_OK);
    npuc_lowrank_opts o = npuc_lowrank_opts_defaults();
    o.params = rule(NPUC_RANK_FIXED, 4, NPUC_SVD_EXACT);
    npuc_summary sum;
    assert_int_equal(npuc_lowrank_model(ctx, m, art, &o, &sum), NPUC_OK);
    assert_int_equal(sum.count[NPUC_ACTION_FACTORED], 5);
    assert_int_equal(sum.count[NPUC_ACTION_KEPT], 1);
    for (size_t i = 0; i < sum.nrecords; i++) {
        const npuc_tensor_record *r = &sum.records[i];
        if (r->action != NPUC_ACTION_FACTORED) continue;
        double mm = npuc_record_get(r, "m", 0), nn = npuc_record_get(r, "n", 0);
        assert_int_equal(npuc_record_get(r, "rank", 0), 4);
        assert_close(npuc_record_get(r, "flops_before", 0), 2 * mm * nn, 0, 0);
        assert_close(npuc_record_get(r, "flops_after", 0), 2 * 4 * (mm + nn), 0, 0);
        assert_int_equal(r->params_after, (uint64_t)(4 * (mm + nn)));
        assert_true(r->has_error);
    }
    npuc_summary_free(&sum);

    assert_int_equal(npuc_model_open(ctx, art, NULL, &ma), NPUC_OK);
    assert_int_equal(npuc_decompress_model(ctx, ma, dec, NULL), NPUC_OK);
    assert_int_equal(npuc_model_open(ctx, dec, NULL, &md), NPUC_OK);
    assert_int_equal(npuc_model_count(md), npuc_model_count(m));
    static const struct { const char *name; int out_first; int64_t a[4], b[4]; } F[] = {
        {"fc.weight", 1, {40, 4}, {4, 60}},
        {"conv.weight", 1, {16, 4, 1, 1}, {4, 8, 3, 3}},
        {"blk/kernel", 0, {1, 1, 4, 16}, {3, 3, 8, 4}},
        {"proj/kernel", 0, {4, 40}, {60, 4}},
        {"half.weight", 1, {32, 4}, {4, 48}},
    };
    for (size_t f = 0; f < sizeof F / sizeof F[0]; f++) {
        char na[64], nb[64];
        snprintf(na, sizeof na, "%s.lr_a", F[f].name);
        snprintf(nb, sizeof nb, "%s.lr_b", F[f].name);
        const npuc_tensor_info *ta, *tb, *to, *td;
        float *a = read_tensor(ma, na, &ta), *b = read_tensor(ma, nb, &tb);
        float *orig = read_tensor(m, F[f].name, &to), *d = read_tensor(md, F[f].name, &td);
        assert_shape(ta, to->rank, F[f].a);
        assert_shape(tb, to->rank, F[f].b);
        assert_int_equal(ta->dtype, to->dtype);
        assert_int_equal(ta->layout, to->layout);
        assert_int_equal(td->dtype, to->dtype);
        assert_int_equal(td->layout, to->layout);
        assert_shape(td, to->rank, to->shape);
        /* The product in double, in the orientation of the layout. */
        const float *L = F[f].out_first ? a : b, *R = F[f].out_first ? b : a;
        int64_t mm = F[f].out_first ? to->shape[0] : (int64_t)(to->numel / (uint64_t)to->shape[to->rank - 1]);
        int64_t nn = (int64_t)to->numel / mm;
        double maxd = 0, maxp = 0;
        for (int64_t i = 0; i < mm; i++)
            for (int64_t j = 0; j < nn; j++) {
                double acc = 0;
                for (int t = 0; t < 4; t++) acc += (double)L[i * 4 + t] * R[t * nn + j];
                if (to->dtype == NPUC_DTYPE_F16) { /* decompress casts back to F16 */
                    float fa = (float)acc;
                    uint16_t h;
                    npuc_convert(&h, NPUC_DTYPE_F16, &fa, NPUC_DTYPE_F32, 1);
                    npuc_convert(&fa, NPUC_DTYPE_F32, &h, NPUC_DTYPE_F16, 1);
                    acc = fa;
                }
                maxd = fmax(maxd, fabs(acc - d[i * nn + j]));
                maxp = fmax(maxp, fabs(acc));
            }
        assert_true(maxd <= (to->dtype == NPUC_DTYPE_F16 ? 1e-3 : LR_PRODUCT_RTOL) * maxp);
        free(a); free(b); free(orig); free(d);
    }
    /* The bias is copied bit for bit. */
    const npuc_tensor_info *t1, *t2;
    float *b1 = read_tensor(m, "fc.bias", &t1), *b2 = read_tensor(md, "fc.bias", &t2);
    assert_memory_equal(b1, b2, 40 * sizeof(float));
    free(b1); free(b2);
    npuc_model_close(md);
    npuc_model_close(ma);
    npuc_model_close(m);
}

/* Randomized SVD (p = 10, q = 2) lands within LR_RAND_MAX_RATIO of the optimum. */
static void test_randomized_near_optimal(void **state) {
    (void)state;
    const int m = 400, n = 300;
    double s[300];
    for (int i = 0; i < n; i++) s[i] = 1.0 / (1 + i);
    float *w = with_spectrum(m, n, s, 21);
    int64_t shape[2] = {m, n};
    npuc_tensor_info t = tinfo("w", NPUC_LAYOUT_OI, NPUC_DTYPE_F32, 2, shape);
    for (int r = 10; r <= 60; r += 25) {
        npuc_lowrank_params p = rule(NPUC_RANK_FIXED, r, NPUC_SVD_RANDOMIZED);
        p.svd.power_iters = 2;
        npuc_lowrank_result res;
        assert_int_equal(npuc_lowrank_tensor(ctx, &t, w, &p, &res), NPUC_OK);
        assert_int_equal(res.solver, NPUC_SVD_RANDOMIZED);
        double opt = tail_ratio(s, n, r), got = product_error(w, &res);
        assert_close(res.rel_fro, got, 1e-4, 0); /* measured, not estimated */
        printf("  randomized r=%d: error %.6f, optimum %.6f, ratio %.5f\n", r, got, opt, got / opt);
        assert_true(got <= LR_RAND_MAX_RATIO * opt);
        assert_true(got >= opt * (1 - 1e-4));
        npuc_lowrank_result_free(&res);
    }
    free(w);
}

/* max |a_i - (i == j)| over the Gram matrix of k column-major vectors of
 * length len (stride ld between vectors, unit stride within: cols = 1) or of
 * k row vectors stored as columns of a row-major len x k matrix (cols = 0). */
static double orthonormality_defect(const float *v, int64_t len, int64_t k, int64_t ld, int cols) {
    double worst = 0;
    for (int64_t a = 0; a < k; a++)
        for (int64_t b = a; b < k; b++) {
            double dot = 0;
            for (int64_t i = 0; i < len; i++)
                dot += cols ? (double)v[a * ld + i] * v[b * ld + i] : (double)v[i * ld + a] * v[i * ld + b];
            worst = fmax(worst, fabs(dot - (a == b)));
        }
    return worst;
}

/* The default randomized path (q = 3: LU bases between the products, a QR
 * after the last): within LR_RAND_Q3_MAX_RATIO of the optimum on a known
 * spectrum, the same bits for 1, 2 and 3 threads, orthonormal vectors, and
 * sound when the LU meets exact zero pivots (rank-deficient and zero input). */
static void test_randomized_lu_iterations(void **state) {
    (void)state;
    const int m = 520, n = 380;
    double s[380];
    for (int i = 0; i < n; i++) s[i] = 1.0 / (1 + i);
    float *w = with_spectrum(m, n, s, 41);
    int64_t shape[2] = {m, n};
    npuc_tensor_info t = tinfo("w", NPUC_LAYOUT_OI, NPUC_DTYPE_F32, 2, shape);
    assert_int_equal(npuc_svd_opts_defaults().power_iters, 3);
    for (int r = 20; r <= 80; r += 60) {
        npuc_lowrank_params p = rule(NPUC_RANK_FIXED, r, NPUC_SVD_RANDOMIZED);
        npuc_lowrank_result res;
        assert_int_equal(npuc_lowrank_tensor(ctx, &t, w, &p, &res), NPUC_OK);
        double opt = tail_ratio(s, n, r), got = product_error(w, &res);
        printf("  randomized q=3 r=%d: error %.6f, optimum %.6f, ratio %.5f\n", r, got, opt, got / opt);
        assert_true(got <= LR_RAND_Q3_MAX_RATIO * opt);
        assert_true(got >= opt * (1 - 1e-4));
        npuc_lowrank_result_free(&res);
    }

    /* The internal factors, bit for bit: l = 150 gives three LU and five QR
     * panels of 32 columns and several column blocks per reflector. */
    const int64_t l = 150;
    npuc__svd ref;
    assert_int_equal(npuc__svd_randomized(ctx, "t", w, m, n, l, 3, 9, 1, &ref), NPUC_OK);
    assert_true(orthonormality_defect(ref.u, m, l, ref.ldu, 0) < 1e-5);  /* u: m x l row-major */
    assert_true(orthonormality_defect(ref.q, n, l, n, 1) < 1e-5);        /* q: n x l column-major */
    for (int i = 0; i < 30; i++) assert_close(ref.s[i], s[i], 1e-4, 0);
    for (int th = 2; th <= 3; th++) {
        npuc__svd got;
        assert_int_equal(npuc__svd_randomized(ctx, "t", w, m, n, l, 3, 9, th, &got), NPUC_OK);
        assert_memory_equal(got.s, ref.s, sizeof(float) * (size_t)l);
        assert_memory_equal(got.u, ref.u, sizeof(float) * (size_t)m * (size_t)l);
        assert_memory_equal(got.q, ref.q, sizeof(float) * (size_t)n * (size_t)l);
        assert_memory_equal(got.ub, ref.ub, sizeof(float) * (size_t)l * (size_t)l);
        npuc__svd_free(&got);
    }
    npuc__svd_free(&ref);

    /* Only three nonzero columns: every product has at most three nonzero
     * rows on one side, so sgetrf meets exact zero pivots.  Rank 3 < r, so
     * the factors are exact up to rounding. */
    memset(w, 0, sizeof(float) * (size_t)m * (size_t)n);
    uint64_t rng = 5;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < 3; j++) w[i * n + j] = npuc_test_randn(&rng);
    npuc_lowrank_params p = rule(NPUC_RANK_FIXED, 10, NPUC_SVD_RANDOMIZED);
    npuc_lowrank_result res;
    assert_int_equal(npuc_lowrank_tensor(ctx, &t, w, &p, &res), NPUC_OK);
    assert_true(isfinite(res.rel_fro_measured) && res.rel_fro_measured < 1e-5);
    assert_true(product_error(w, &res) < 1e-5);
    npuc_lowrank_result_free(&res);
    /* All zeros: zero factors, zero error. */
    memset(w, 0, sizeof(float) * (size_t)m * (size_t)n);
    assert_int_equal(npuc_lowrank_tensor(ctx, &t, w, &p, &res), NPUC_OK);
    assert_true(res.rel_fro_measured == 0);
    for (uint64_t i = 0; i < res.a_info.numel; i++) assert_true(res.a[i] == 0);
    for (uint64_t i = 0; i < res.b_info.numel; i++) assert_true(res.b[i] == 0);
    npuc_lowrank_result_free(&res);
    free(w);
}

/* Same input, options and seed: the same bits for any thread count; another
 * seed: other factors of the same quality. */
static void test_determinism(void **state) {
    (void)state;
    const int m = 700, n = 600;
    double s[600];
    for (int i = 0; i < n; i++) s[i] = 1.0 / sqrt(1 + i);
    float *w = with_spectrum(m, n, s, 31);
    int64_t shape[2] = {m, n};
    npuc_tensor_info t = tinfo("w", NPUC_LAYOUT_OI, NPUC_DTYPE_F32, 2, shape);
    const npuc_svd_solver solvers[] = {NPUC_SVD_RANDOMIZED, NPUC_SVD_EXACT};
    for (int sv = 0; sv < 2; sv++) {
        npuc_lowrank_result ref;
        /* r = 120: a sketch of 130 columns, five QR panels and several
         * block-reflector column blocks per panel. */
        npuc_lowrank_params p = rule(NPUC_RANK_FIXED, 120, solvers[sv]);
        npuc_ctx_set_threads(ctx, 1);
        assert_int_equal(npuc_lowrank_tensor(ctx, &t, w, &p, &ref), NPUC_OK);
        for (int th = 2; th <= 3; th++) {
            npuc_lowrank_result res;
            npuc_ctx_set_threads(ctx, th);
            assert_int_equal(npuc_lowrank_tensor(ctx, &t, w, &p, &res), NPUC_OK);
            assert_memory_equal(res.a, ref.a, sizeof(float) * ref.a_info.numel);
            assert_memory_equal(res.b, ref.b, sizeof(float) * ref.b_info.numel);
            assert_true(memcmp(&res.err, &ref.err, sizeof res.err) == 0);
            npuc_lowrank_result_free(&res);
        }
        if (solvers[sv] == NPUC_SVD_RANDOMIZED) {
            npuc_lowrank_result other;
            p.svd.seed = 12345;
            assert_int_equal(npuc_lowrank_tensor(ctx, &t, w, &p, &other), NPUC_OK);
            assert_true(memcmp(other.a, ref.a, sizeof(float) * ref.a_info.numel) != 0);
            assert_close(other.rel_fro, ref.rel_fro, 1e-3, 0);
            npuc_lowrank_result_free(&other);
        }
        npuc_lowrank_result_free(&ref);
    }
    npuc_ctx_set_threads(ctx, 0);
    free(w);
}

/* Whole artifacts are byte-identical for -j 1 and -j 2. */
static void test_artifact_determinism(void **state) {
    (void)state;
    const char *src = npuc_test_path("det_src.safetensors");
    write_model(src);
    const char *outs[2] = {npuc_test_path("det_j1.safetensors"), npuc_test_path("det_j2.safetensors")};
    for (int j = 0; j < 2; j++) {
        npuc_model *m;
        npuc_ctx_set_threads(ctx, j + 1);
        assert_int_equal(npuc_model_open(ctx, src, NULL, &m), NPUC_OK);
        npuc_lowrank_opts o = npuc_lowrank_opts_defaults();
        o.params = rule(NPUC_RANK_MAX_ERROR, 0.8, NPUC_SVD_RANDOMIZED);
        npuc_summary sum;
        assert_int_equal(npuc_lowrank_model(ctx, m, outs[j], &o, &sum), NPUC_OK);
        npuc_summary_free(&sum);
        npuc_model_close(m);
    }
    npuc_ctx_set_threads(ctx, 0);
    size_t n1, n2;
    void *f1 = npuc_test_read_file(outs[0], &n1), *f2 = npuc_test_read_file(outs[1], &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(f1, f2, n1);
    free(f1);
    free(f2);
}

/* The sgesvd fallback gives the same decomposition as sgesdd. */
static void test_gesvd_fallback(void **state) {
    (void)state;
    const int m = 70, n = 45;
    float *w = gaussian((uint64_t)m * n, 77);
    npuc__svd a, b;
    assert_int_equal(npuc__svd_exact(ctx, "t", w, m, n, NPUC__SVD_GESDD, &a), NPUC_OK);
    assert_int_equal(npuc__svd_exact(ctx, "t", w, m, n, NPUC__SVD_GESVD, &b), NPUC_OK);
    assert_int_equal(a.k, 45);
    assert_int_equal(b.k, 45);
    for (int i = 0; i < 45; i++) assert_close(b.s[i], a.s[i], 0, LR_SVAL_TOL * 2 * a.s[0]);
    /* u diag(s) vt rebuilds w. */
    double maxd = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double acc = 0;
            for (int t = 0; t < 45; t++) acc += (double)b.u[i * b.ldu + t] * b.s[t] * b.vt[t * n + j];
            maxd = fmax(maxd, fabs(acc - w[i * n + j]));
        }
    assert_true(maxd < 1e-4);
    npuc__svd_free(&a);
    npuc__svd_free(&b);
    free(w);
}

/* The public truncated SVD: orthonormal vectors that rebuild the matrix. */
static void test_public_svd(void **state) {
    (void)state;
    const int m = 30, n = 50, k = 30;
    float *w = gaussian((uint64_t)m * n, 8), s[30], *u = malloc(sizeof(float) * m * k), *vt = malloc(sizeof(float) * k * n);
    assert_int_equal(npuc_svd(ctx, w, m, n, k, NULL, s, u, vt), NPUC_OK);
    for (int a = 0; a < k; a++)
        for (int b = 0; b < k; b++) {
            double dot = 0;
            for (int i = 0; i < m; i++) dot += (double)u[i * k + a] * u[i * k + b];
            assert_close(dot, a == b, 0, 1e-5);
        }
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double acc = 0;
            for (int t = 0; t < k; t++) acc += (double)u[i * k + t] * s[t] * vt[t * n + j];
            assert_close(acc, w[i * n + j], 0, 1e-4);
        }
    assert_int_equal(npuc_svd(ctx, w, m, n, 31, NULL, s, u, vt), NPUC_ERR_ARG);
    free(u);
    free(vt);
    free(w);

    /* Randomized, wide sketch (160 columns: several QR panels and reflector
     * blocks): orthonormal vectors on both sides, values close to the exact ones. */
    const int M = 500, N = 400, K = 150;
    double sp[400];
    for (int i = 0; i < N; i++) sp[i] = 1.0 / (1 + i);
    float *W = with_spectrum(M, N, sp, 61), *S = malloc(sizeof(float) * K), *U = malloc(sizeof(float) * M * K),
          *VT = malloc(sizeof(float) * K * N);
    npuc_svd_opts o = npuc_svd_opts_defaults();
    o.solver = NPUC_SVD_RANDOMIZED;
    npuc_ctx_set_threads(ctx, 2);
    assert_int_equal(npuc_svd(ctx, W, M, N, K, &o, S, U, VT), NPUC_OK);
    npuc_ctx_set_threads(ctx, 0);
    double worst_u = 0, worst_v = 0;
    for (int a = 0; a < K; a++)
        for (int b = a; b < K; b++) {
            double du = 0, dv = 0;
            for (int i = 0; i < M; i++) du += (double)U[i * K + a] * U[i * K + b];
            for (int j = 0; j < N; j++) dv += (double)VT[a * N + j] * VT[b * N + j];
            worst_u = fmax(worst_u, fabs(du - (a == b)));
            worst_v = fmax(worst_v, fabs(dv - (a == b)));
        }
    assert_true(worst_u < 1e-5 && worst_v < 1e-5);
    /* s~_i <= s_i (the sketch projects W); the last sketch values are the least accurate. */
    for (int i = 0; i < K; i++) assert_true(S[i] <= sp[i] * (1 + 1e-5) && S[i] >= sp[i] * 0.9);
    for (int i = 0; i < 20; i++) assert_close(S[i], sp[i], 1e-4, 0);
    free(W); free(S); free(U); free(VT);
}

static int dir_has_leftovers(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int found = 0;
    while (d && (e = readdir(d)))
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) found = 1;
    if (d) closedir(d);
    return found;
}

/* Bad input: a specific status, a one-line message, nothing written. */
static void test_bad_inputs(void **state) {
    (void)state;
    int64_t shape[2] = {20, 30};
    npuc_tensor_info t = tinfo("fc.weight", NPUC_LAYOUT_OI, NPUC_DTYPE_F32, 2, shape);
    float *w = gaussian(600, 4);
    npuc_lowrank_result res;
    npuc_lowrank_params p = rule(NPUC_RANK_FIXED, 0, NPUC_SVD_AUTO);
    assert_int_equal(npuc_lowrank_tensor(ctx, &t, w, &p, &res), NPUC_ERR_ARG);
    p = rule(NPUC_RANK_FIXED, 21, NPUC_SVD_AUTO);
    assert_int_equal(npuc_lowrank_tensor(ctx, &t, w, &p, &res), NPUC_ERR_ARG);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "exceeds min(m, n) = 20"));
    const double bad_energy[] = {0, -0.5, 1.0000001, NAN};
    for (int i = 0; i < 4; i++) {
        p = rule(NPUC_RANK_ENERGY, bad_energy[i], NPUC_SVD_AUTO);
        assert_int_equal(npuc_lowrank_params_check(ctx, &p), NPUC_ERR_ARG);
    }
    p = rule(NPUC_RANK_MAX_ERROR, 1.0, NPUC_SVD_AUTO);
    assert_int_equal(npuc_lowrank_params_check(ctx, &p), NPUC_ERR_ARG);
    p = npuc_lowrank_params_defaults();
    assert_int_equal(npuc_lowrank_params_check(ctx, &p), NPUC_ERR_ARG);
    w[17] = NAN;
    p = rule(NPUC_RANK_FIXED, 2, NPUC_SVD_AUTO);
    assert_int_equal(npuc_lowrank_tensor(ctx, &t, w, &p, &res), NPUC_ERR_VALUE);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "tensor 'fc.weight': 1 NaN/Inf value"));
    assert_null(strchr(npuc_ctx_errmsg(ctx), '\n'));
    free(w);

    /* Model level: a NaN weight, an explicit 1-D tensor, an explicit rank
     * above min(m, n): each fails with nothing at the output path. */
    const char *src = npuc_test_path("bad_src.safetensors"), *out = npuc_test_path("bad_out.safetensors");
    write_model(src);
    npuc_model *m;
    assert_int_equal(npuc_model_open(ctx, src, NULL, &m), NPUC_OK);
    struct { const char *inc; double rank; npuc_status want; const char *msg; } cases[] = {
        {"^fc\\.bias$", 2, NPUC_ERR_ARG, "tensor 'fc.bias': a rank-1 tensor cannot be factored"},
        {"^fc\\.weight$", 41, NPUC_ERR_ARG, "tensor 'fc.weight': --rank 41 exceeds min(m, n) = 40"},
        {"^nothing$", 2, NPUC_ERR_ARG, "--include '^nothing$' matches no tensor"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        npuc_lowrank_opts o = npuc_lowrank_opts_defaults();
        o.params = rule(NPUC_RANK_FIXED, cases[c].rank, NPUC_SVD_AUTO);
        o.include = &cases[c].inc;
        o.ninclude = 1;
        npuc_summary sum;
        assert_int_equal(npuc_lowrank_model(ctx, m, out, &o, &sum), cases[c].want);
        assert_non_null(strstr(npuc_ctx_errmsg(ctx), cases[c].msg));
        assert_non_null(strstr(npuc_ctx_errmsg(ctx), src)); /* names the file */
        assert_false(npuc_test_exists(out));
        assert_int_equal(sum.nrecords, 0);
    }
    npuc_model_close(m);

    /* NaN in a weight, found mid-way: still nothing written, no temporary left. */
    const char *nan_src = npuc_test_path("nan_src.safetensors");
    {
        npuc_writer *wr;
        assert_int_equal(npuc_writer_open(ctx, nan_src, NULL, &wr), NPUC_OK);
        npuc_tensor_info a = tinfo("a.weight", NPUC_LAYOUT_OI, NPUC_DTYPE_F32, 2, shape);
        npuc_tensor_info b = tinfo("b.weight", NPUC_LAYOUT_OI, NPUC_DTYPE_F32, 2, shape);
        assert_int_equal(npuc_writer_declare(wr, &a), NPUC_OK);
        assert_int_equal(npuc_writer_declare(wr, &b), NPUC_OK);
        float *v = gaussian(600, 5);
        assert_int_equal(npuc_writer_write(wr, v, 2400), NPUC_OK);
        v[599] = NAN;
        assert_int_equal(npuc_writer_write(wr, v, 2400), NPUC_OK);
        free(v);
        assert_int_equal(npuc_writer_finish(wr), NPUC_OK);
    }
    assert_int_equal(npuc_model_open(ctx, nan_src, NULL, &m), NPUC_OK);
    npuc_lowrank_opts o = npuc_lowrank_opts_defaults();
    o.params = rule(NPUC_RANK_FIXED, 2, NPUC_SVD_AUTO);
    npuc_summary sum;
    const char *nan_out = npuc_test_path("nan_out.safetensors");
    assert_int_equal(npuc_lowrank_model(ctx, m, nan_out, &o, &sum), NPUC_ERR_VALUE);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "tensor 'b.weight': 1 NaN/Inf value"));
    assert_false(npuc_test_exists(nan_out));
    assert_false(dir_has_leftovers(npuc_test_tmpdir(), "nan_out.safetensors."));
    /* An existing output without overwrite fails before any work. */
    o.params = rule(NPUC_RANK_FIXED, 2, NPUC_SVD_AUTO);
    assert_int_equal(npuc_lowrank_model(ctx, m, src, &o, &sum), NPUC_ERR_EXISTS);
    npuc_model_close(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_error_is_tail),
        cmocka_unit_test(test_known_spectrum_rank),
        cmocka_unit_test(test_no_saving),
        cmocka_unit_test(test_conv_factor_shapes),
        cmocka_unit_test(test_decompress_reproduces_product),
        cmocka_unit_test(test_randomized_near_optimal),
        cmocka_unit_test(test_randomized_lu_iterations),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_artifact_determinism),
        cmocka_unit_test(test_gesvd_fallback),
        cmocka_unit_test(test_public_svd),
        cmocka_unit_test(test_bad_inputs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
