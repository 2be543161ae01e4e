/*
 * test_prune.c - magnitude and structured pruning against independent
 * computations.
 *
 * Magnitude pruning is checked against a plain sort: the indices ordered by
 * (|w|, index), the first floor(S * n) zeroed.  Output bits, zero counts and
 * error figures must match, on Gaussian data, data full of ties, data with
 * existing zeros (both signs), and sizes that take the sampled path, the
 * radix fallback and several parallel chunks.
 *
 * Structured pruning is checked by running a small reference forward
 * (convolutions, BatchNorm, ReLU, depthwise, pooling, linear, all in double)
 * over one chain of the original and of the pruned model: every activation
 * along the chain must equal the original's at the kept channels (chosen
 * here, independently, from the filter norms), and the consumer's output
 * must equal the original's with the removed channels zeroed at its input.
 * The models: samples/cnn_bn.safetensors (PyTorch names), cnn_bn_keras.h5
 * (Keras layer order), and from ../shared/data ppocr_mobile_v2_cls (Paddle
 * names, consumers stated with --next and the catalog as --graph) and
 * nsfwjs_mobilenet_v2.h5 (Keras model_config); the shared ones are skipped
 * when absent.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/nm_kernels.h"
#include "testutil.h"

static npuc_ctx *ctx;

static int setup(void **state) { (void)state; return npuc_ctx_new(&ctx) == NPUC_OK ? 0 : -1; }
static int teardown(void **state) { (void)state; npuc_ctx_free(ctx); return 0; }

/* ------------------------------------------------------------ reference */

static const float *g_sort_w;

static int cmp_mag_idx(const void *a, const void *b) {
    const size_t i = *(const size_t *)a, j = *(const size_t *)b;
    const float x = fabsf(g_sort_w[i]), y = fabsf(g_sort_w[j]);
    if (x != y) return x < y ? -1 : 1;
    return i < j ? -1 : i > j;
}

/* out = w with the k smallest by (|w|, index) set to +0. */
static void ref_prune(const float *w, size_t n, size_t k, float *out, double *sum_e2) {
    size_t *idx = malloc((n ? n : 1) * sizeof *idx);
    for (size_t i = 0; i < n; i++) idx[i] = i;
    g_sort_w = w;
    qsort(idx, n, sizeof *idx, cmp_mag_idx);
    memcpy(out, w, n * sizeof *out);
    *sum_e2 = 0;
    for (size_t i = 0; i < k; i++) {
        *sum_e2 += (double)w[idx[i]] * (double)w[idx[i]];
        out[idx[i]] = 0.0f;
    }
    free(idx);
}

enum { D_GAUSS, D_ZEROS, D_TIES, D_CONST, D_ALLZERO };

static void fill(float *w, size_t n, int kind, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        switch (kind) {
        case D_GAUSS: w[i] = 0.02f * npuc_test_randn(&s); break;
        case D_ZEROS: {
            uint64_t r = npuc_test_rand(&s) % 10;
            w[i] = r < 3 ? 0.0f : r < 6 ? -0.0f : npuc_test_randn(&s);
            break;
        }
        case D_TIES: { /* like weights stored as few-bit codes */
            static const float V[] = {0.0f, 0.5f, -0.5f, 1.0f, -1.0f, 0.25f, -0.25f, 2.0f};
            w[i] = V[npuc_test_rand(&s) % 8];
            break;
        }
        case D_CONST: w[i] = -0.75f; break;
        default: w[i] = 0.0f; break;
        }
    }
}

static uint64_t count_zeros(const float *x, size_t n) {
    uint64_t z = 0;
    for (size_t i = 0; i < n; i++) z += x[i] == 0.0f;
    return z;
}

static void check_prune(size_t n, int kind, double s, uint64_t seed) {
    float *w = malloc((n ? n : 1) * sizeof *w), *out = malloc((n ? n : 1) * sizeof *out);
    float *ref = malloc((n ? n : 1) * sizeof *ref);
    fill(w, n, kind, seed);
    const size_t k = (size_t)floor(s * (double)n);
    double e2;
    ref_prune(w, n, k, ref, &e2);
    npuc_prune_stats st;
    assert_int_equal(npuc_prune_magnitude(ctx, w, n, k, out, &st), NPUC_OK);
    if (memcmp(out, ref, n * sizeof *out) != 0) {
        for (size_t i = 0; i < n; i++)
            if (memcmp(&out[i], &ref[i], 4) != 0) {
                print_error("n=%zu kind=%d s=%g: element %zu is %g, expected %g\n", n, kind, s, i, out[i], ref[i]);
                break;
            }
        fail();
    }
    assert_int_equal(st.k, k);
    assert_int_equal(st.zeros, count_zeros(ref, n));
    /* Exactly k zeros unless the input had more. */
    uint64_t z0 = count_zeros(w, n);
    assert_int_equal(st.zeros, z0 > k ? z0 : k);
    /* Sums: the SIMD kernels add squares in float blocks (NPUC_SUMS_RTOL). */
    assert_close(st.err.sum_e2, e2, NPUC_SUMS_RTOL, 1e-300);
    double w2 = 0;
    for (size_t i = 0; i < n; i++) w2 += (double)w[i] * (double)w[i];
    assert_close(st.err.sum_w2, w2, NPUC_SUMS_RTOL, 1e-300);
    if (w2 > 0 && e2 > 0) assert_close(st.err.sqnr_db, 10 * log10(w2 / e2), 0, 1e-4);
    if (w2 > 0) assert_close(st.err.rel_fro, sqrt(e2 / w2), 2 * NPUC_SUMS_RTOL, 1e-12);
    if (n) assert_close(st.err.mse, e2 / (double)n, NPUC_SUMS_RTOL, 1e-300);
    free(w);
    free(out);
    free(ref);
}

static void test_magnitude_exact(void **state) {
    (void)state;
    static const size_t SMALL[] = {1, 2, 3, 7, 17, 100, 1023, 4096, 65535, 65537, 200003};
    static const double S[] = {0.0, 0.01, 0.3, 0.5, 0.9, 0.999};
    npuc_ctx_set_threads(ctx, 2);
    for (size_t a = 0; a < sizeof SMALL / sizeof SMALL[0]; a++)
        for (int kind = D_GAUSS; kind <= D_ALLZERO; kind++)
            for (size_t b = 0; b < sizeof S / sizeof S[0]; b++) check_prune(SMALL[a], kind, S[b], a * 131 + b);
    /* Several parallel chunks, the sampled path and (ties) the radix path. */
    check_prune((1u << 20) * 3 + 77, D_GAUSS, 0.5, 1);
    check_prune((1u << 20) * 3 + 77, D_TIES, 0.37, 2);
    check_prune((1u << 20) + 1, D_ZEROS, 0.8, 3);
    check_prune((1u << 20) + 1, D_ZEROS, 0.2, 4);
}

static void test_already_zero(void **state) {
    (void)state;
    /* 60 % zeros and S = 0.5: the chosen half are all existing zeros, the
     * lowest-index ones first, so nothing changes and the achieved sparsity
     * is 60 %. */
    const size_t n = 1000;
    float w[1000], out[1000];
    uint64_t s = 5;
    for (size_t i = 0; i < n; i++) w[i] = (i % 5) < 3 ? ((i & 1) ? -0.0f : 0.0f) : 1.0f + npuc_test_randf(&s);
    npuc_prune_stats st;
    assert_int_equal(npuc_prune_magnitude(ctx, w, n, 500, out, &st), NPUC_OK);
    for (size_t i = 0; i < n; i++) assert_true(out[i] == w[i]);
    assert_int_equal(st.zeros, 600);
    assert_true(st.err.sum_e2 == 0.0);
    /* Hand-worked ties: |w| = 1 at indices 0, 2, 4; k = 2 zeros indices 0 and 2. */
    const float h[6] = {1.0f, 3.0f, -1.0f, 2.0f, 1.0f, 5.0f};
    float ho[6];
    assert_int_equal(npuc_prune_magnitude(ctx, h, 6, 2, ho, &st), NPUC_OK);
    const float want[6] = {0.0f, 3.0f, 0.0f, 2.0f, 1.0f, 5.0f};
    assert_memory_equal(ho, want, sizeof want);
    assert_true(st.threshold == 1.0f);
}

static void test_bad_input(void **state) {
    (void)state;
    float w[5] = {1, NAN, 2, INFINITY, 3}, out[5];
    assert_int_equal(npuc_prune_magnitude(ctx, w, 5, 2, out, NULL), NPUC_ERR_VALUE);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "2 NaN or Inf"));
    assert_int_equal(npuc_prune_magnitude(ctx, w, 5, 6, out, NULL), NPUC_ERR_ARG);
    assert_int_equal(npuc_prune_magnitude(ctx, w, 5, 2, w + 1, NULL), NPUC_ERR_ARG); /* overlap */
    /* NaN in a large tensor (sampled path) too. */
    size_t n = 300000;
    float *big = malloc(n * sizeof *big), *o = malloc(n * sizeof *o);
    fill(big, n, D_GAUSS, 9);
    big[123457] = NAN;
    assert_int_equal(npuc_prune_magnitude(ctx, big, n, n / 2, o, NULL), NPUC_ERR_VALUE);
    /* Huge but finite weights: x^2 overflows float, not double; the sums
     * must stay exact (the chunk is redone with the reference kernel). */
    double w2 = 0, e2;
    for (size_t i = 0; i < n; i++) {
        big[i] = (i % 7 == 0 ? 3e30f : 1.0f) * (float)((i % 13) + 1);
        w2 += (double)big[i] * big[i];
    }
    float *ref = malloc(n * sizeof *ref);
    ref_prune(big, n, n / 2, ref, &e2);
    npuc_prune_stats st;
    assert_int_equal(npuc_prune_magnitude(ctx, big, n, n / 2, o, &st), NPUC_OK);
    assert_memory_equal(o, ref, n * sizeof *o);
    assert_close(st.err.sum_w2, w2, 1e-12, 0);
    assert_close(st.err.sum_e2, e2, 1e-12, 0);
    free(ref);
    free(big);
    free(o);
}

/* Results do not depend on the thread count (outputs and sums bit for bit). */
static void test_threads(void **state) {
    (void)state;
    const size_t n = (1u << 20) * 5 + 3;
    float *w = malloc(n * sizeof *w), *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    for (int kind = D_GAUSS; kind <= D_TIES; kind++) {
        fill(w, n, kind, 77);
        npuc_prune_stats sa, sb;
        npuc_ctx_set_threads(ctx, 1);
        assert_int_equal(npuc_prune_magnitude(ctx, w, n, n / 3, a, &sa), NPUC_OK);
        npuc_ctx_set_threads(ctx, 2);
        assert_int_equal(npuc_prune_magnitude(ctx, w, n, n / 3, b, &sb), NPUC_OK);
        assert_memory_equal(a, b, n * sizeof *a);
        assert_true(sa.err.sum_e2 == sb.err.sum_e2 && sa.err.sum_w2 == sb.err.sum_w2);
    }
    free(w);
    free(a);
    free(b);
}

/* AVX2 kernels against the reference: identical outputs and counts, sums
 * within 1e-12 relative, on odd sizes and edge values. */
static void test_kernels(void **state) {
    (void)state;
    const npuc_nm_kernel_table *R = npuc_nm_kernels_ref(), *V = npuc_nm_kernels_avx2();
    if (!V) skip();
    static const size_t SIZES[] = {1, 3, 7, 15, 17, 31, 33, 127, 1023};
    float x[1024 * 16], o1[1024 * 16], o2[1024 * 16];
    uint32_t i1[1024], i2[1024], g1[1024], g2[1024];
    for (size_t a = 0; a < sizeof SIZES / sizeof SIZES[0]; a++)
        for (int kind = D_GAUSS; kind <= D_ALLZERO; kind++) {
            const size_t n = SIZES[a];
            fill(x, 16 * n, kind, a + 10u * (unsigned)kind);
            x[0] = FLT_MIN / 4; /* a subnormal */
            const uint32_t lo = npuc_mag(x[n / 2]), hi = lo + 0x00400000u;
            uint64_t m1, m2, b1, b2;
            npuc_prune_sums s1, s2;
            memset(&s1, 0, sizeof s1);
            memset(&s2, 0, sizeof s2);
            uint64_t c1 = R->mag_split(x, n, lo, hi, o1, i1, g1, 1024, &m1, &b1, &s1);
            uint64_t c2 = V->mag_split(x, n, lo, hi, o2, i2, g2, 1024, &m2, &b2, &s2);
            assert_int_equal(c1, c2);
            assert_int_equal(m1, m2);
            assert_int_equal(b1, b2);
            assert_memory_equal(i1, i2, m1 * sizeof *i1);
            assert_memory_equal(g1, g2, m1 * sizeof *g1);
            assert_memory_equal(o1, o2, n * sizeof *o1);
            assert_int_equal(s1.zeros, s2.zeros);
            assert_true(s1.max_e == s2.max_e);
            assert_close(s2.sum_w2, s1.sum_w2, NPUC_SUMS_RTOL, 1e-60);
            assert_close(s2.sum_e2, s1.sum_e2, NPUC_SUMS_RTOL, 1e-60);
            /* a buffer too small: counted past cap, stored up to cap */
            uint64_t m3, b3;
            memset(&s2, 0, sizeof s2);
            V->mag_split(x, n, lo, hi, o2, i2, g2, 3, &m3, &b3, &s2);
            assert_int_equal(m3, m1);
            assert_memory_equal(i2, i1, (m1 < 3 ? m1 : 3) * sizeof *i1);
            assert_int_equal(R->mag_count_eq(x, n, lo), V->mag_count_eq(x, n, lo));
            memset(&s1, 0, sizeof s1);
            memset(&s2, 0, sizeof s2);
            R->mag_zero_below(x, n, lo, o1, &s1);
            V->mag_zero_below(x, n, lo, o2, &s2);
            assert_memory_equal(o1, o2, n * sizeof *o1);
            assert_int_equal(s1.zeros, s2.zeros);
            assert_true(s1.max_e == s2.max_e);
            assert_close(s2.sum_w2, s1.sum_w2, NPUC_SUMS_RTOL, 1e-60); /* squares of subnormals underflow float */
            assert_close(s2.sum_e2, s1.sum_e2, NPUC_SUMS_RTOL, 1e-60);
            for (unsigned m = 2; m <= 8; m++)
                for (unsigned nn = 1; nn < m; nn++) {
                    memset(&s1, 0, sizeof s1);
                    memset(&s2, 0, sizeof s2);
                    R->nm_contig(x, o1, n, nn, m, &s1);
                    V->nm_contig(x, o2, n, nn, m, &s2);
                    assert_memory_equal(o1, o2, n * m * sizeof *o1);
                    assert_int_equal(s1.zeros, s2.zeros);
                    for (unsigned rows = 1; rows <= m; rows++) {
                        memset(&s1, 0, sizeof s1);
                        memset(&s2, 0, sizeof s2);
                        R->nm_rows(x, o1, n, rows, n, nn, &s1);
                        V->nm_rows(x, o2, n, rows, n, nn, &s2);
                        assert_memory_equal(o1, o2, rows * n * sizeof *o1);
                        assert_int_equal(s1.zeros, s2.zeros);
                        assert_close(s2.sum_e2, s1.sum_e2, NPUC_SUMS_RTOL, 1e-60);
                    }
                }
        }
}

/* ------------------------------------------------------------ models */

typedef struct tspec {
    const char *name;
    npuc_dtype dt;
    int rank;
    int64_t shape[4];
} tspec;

static void write_model(const char *path, const tspec *ts, size_t n, uint64_t seed) {
    npuc_writer *w;
    npuc_write_opts wo = npuc_write_opts_defaults();
    wo.overwrite = 1;
    assert_int_equal(npuc_writer_open(ctx, path, &wo, &w), NPUC_OK);
    for (size_t i = 0; i < n; i++) {
        npuc_tensor_info t;
        memset(&t, 0, sizeof t);
        t.name = ts[i].name;
        t.dtype = ts[i].dt;
        t.rank = ts[i].rank;
        memcpy(t.shape, ts[i].shape, sizeof ts[i].shape);
        assert_int_equal(npuc_writer_declare(w, &t), NPUC_OK);
    }
    for (size_t i = 0; i < n; i++) {
        size_t numel = 1;
        for (int d = 0; d < ts[i].rank; d++) numel *= (size_t)ts[i].shape[d];
        float *f = malloc(numel * sizeof *f);
        fill(f, numel, i == 1 ? D_TIES : D_GAUSS, seed + i);
        void *b = malloc(numel * npuc_dtype_size(ts[i].dt));
        npuc_convert(b, ts[i].dt, f, NPUC_DTYPE_F32, numel);
        assert_int_equal(npuc_writer_write(w, b, numel * npuc_dtype_size(ts[i].dt)), NPUC_OK);
        free(b);
        free(f);
    }
    assert_int_equal(npuc_writer_finish(w), NPUC_OK);
}

static float *read_tensor(npuc_model *m, const char *name, npuc_tensor_info *info) {
    size_t i;
    if (npuc_model_find(m, name, &i) != 0) {
        print_error("tensor '%s' missing\n", name);
        fail();
    }
    const npuc_tensor_info *t = npuc_model_tensor(m, i);
    if (info) *info = *t;
    float *f = malloc((t->numel ? t->numel : 1) * sizeof *f);
    assert_int_equal(npuc_model_read_f32(ctx, m, i, f), NPUC_OK);
    return f;
}

/* Global scope: floor(S * total) zeros over all selected tensors, ties to
 * the earlier tensor, then the lower index; layer scope per tensor. */
static void test_model_scopes(void **state) {
    (void)state;
    static const tspec TS[] = {
        {"a.weight", NPUC_DTYPE_F32, 2, {50, 40}},
        {"b.weight", NPUC_DTYPE_F16, 2, {30, 21}},
        {"b.bias", NPUC_DTYPE_F32, 1, {30}},
        {"c.weight", NPUC_DTYPE_F32, 3, {7, 3, 5}},
    };
    const char *in = npuc_test_path("scopes.safetensors");
    write_model(in, TS, 4, 11);
    npuc_model *m;
    assert_int_equal(npuc_model_open(ctx, in, NULL, &m), NPUC_OK);
    const char *sel[3] = {"a.weight", "b.weight", "c.weight"};
    for (int scope = 0; scope < 2; scope++) {
        npuc_prune_opts o = npuc_prune_opts_defaults();
        o.sparsity = 0.43;
        o.scope = scope ? NPUC_PRUNE_GLOBAL : NPUC_PRUNE_LAYER;
        o.write.overwrite = 1;
        const char *out = npuc_test_path(scope ? "global.safetensors" : "layer.safetensors");
        npuc_summary sum;
        assert_int_equal(npuc_prune_model(ctx, m, out, &o, &sum), NPUC_OK);
        npuc_model *pm;
        assert_int_equal(npuc_model_open(ctx, out, NULL, &pm), NPUC_OK);
        /* Reference over the concatenation (global) or each tensor (layer). */
        size_t total = 0, ns[3];
        float *orig[3], *got[3];
        for (int t = 0; t < 3; t++) {
            npuc_tensor_info ti;
            orig[t] = read_tensor(m, sel[t], &ti);
            got[t] = read_tensor(pm, sel[t], NULL);
            ns[t] = ti.numel;
            total += ns[t];
        }
        if (scope) {
            float *cat = malloc(total * sizeof *cat), *ref = malloc(total * sizeof *ref);
            size_t off = 0;
            for (int t = 0; t < 3; t++) {
                memcpy(cat + off, orig[t], ns[t] * sizeof *cat);
                off += ns[t];
            }
            double e2;
            ref_prune(cat, total, (size_t)floor(0.43 * (double)total), ref, &e2);
            off = 0;
            for (int t = 0; t < 3; t++) {
                assert_memory_equal(got[t], ref + off, ns[t] * sizeof *ref);
                off += ns[t];
            }
            free(cat);
            free(ref);
        } else {
            for (int t = 0; t < 3; t++) {
                float *ref = malloc(ns[t] * sizeof *ref);
                double e2;
                ref_prune(orig[t], ns[t], (size_t)floor(0.43 * (double)ns[t]), ref, &e2);
                assert_memory_equal(got[t], ref, ns[t] * sizeof *ref);
                free(ref);
            }
        }
        /* The bias is untouched; records say what was done. */
        float *b0 = read_tensor(m, "b.bias", NULL), *b1 = read_tensor(pm, "b.bias", NULL);
        assert_memory_equal(b0, b1, 30 * sizeof *b0);
        free(b0);
        free(b1);
        assert_int_equal(sum.count[NPUC_ACTION_PRUNED], 3);
        for (size_t r = 0; r < sum.nrecords; r++) {
            if (sum.records[r].action != NPUC_ACTION_PRUNED) continue;
            assert_close(npuc_record_get(&sum.records[r], "sparsity_target", -1), 0.43, 0, 0);
            assert_true(npuc_record_get(&sum.records[r], "sparsity", -1) >= 0);
        }
        for (int t = 0; t < 3; t++) {
            free(orig[t]);
            free(got[t]);
        }
        npuc_summary_free(&sum);
        npuc_model_close(pm);
    }
    /* Bad sparsity: nothing written. */
    npuc_prune_opts o = npuc_prune_opts_defaults();
    o.sparsity = 1.0;
    npuc_summary sum;
    const char *bad = npuc_test_path("bad.safetensors");
    assert_int_equal(npuc_prune_model(ctx, m, bad, &o, &sum), NPUC_ERR_ARG);
    assert_false(npuc_test_exists(bad));
    o.sparsity = -0.1;
    assert_int_equal(npuc_prune_model(ctx, m, bad, &o, &sum), NPUC_ERR_ARG);
    assert_false(npuc_test_exists(bad));
    npuc_model_close(m);
}

static const char *sample(const char *name);

/* Finds tensor name's record in sum. */
static const npuc_tensor_record *rec_of(const npuc_summary *sum, const char *name) {
    for (size_t r = 0; r < sum->nrecords; r++)
        if (strcmp(sum->records[r].name, name) == 0) return &sum->records[r];
    print_error("no record for '%s'\n", name);
    fail();
    return NULL;
}

/* --layer-sparsity: the first matching rule gives a tensor its own S (layer
 * scope); with global scope the matched tensors are pruned alone and the
 * others share floor(S * N) over their own total; bad rules fail early. */
static void test_layer_sparsity(void **state) {
    (void)state;
    static const tspec TS[] = {
        {"a.weight", NPUC_DTYPE_F32, 2, {50, 40}},
        {"b.weight", NPUC_DTYPE_F16, 2, {30, 21}},
        {"b.bias", NPUC_DTYPE_F32, 1, {30}},
        {"c.weight", NPUC_DTYPE_F32, 3, {7, 3, 5}},
    };
    const char *in = npuc_test_path("layers.safetensors");
    write_model(in, TS, 4, 23);
    npuc_model *m, *pm;
    assert_int_equal(npuc_model_open(ctx, in, NULL, &m), NPUC_OK);
    const char *names[3] = {"a.weight", "b.weight", "c.weight"};
    float *orig[3], *got[3];
    size_t ns[3];
    for (int t = 0; t < 3; t++) {
        npuc_tensor_info ti;
        orig[t] = read_tensor(m, names[t], &ti);
        ns[t] = ti.numel;
    }
    const char *out = npuc_test_path("layers.out.safetensors");
    npuc_summary sum;

    /* Layer scope: b.weight takes the first rule (0.2), not the second (0.7). */
    const char *rules[2] = {"^b\\.=0.2", "weight$=0.7"};
    const double want[3] = {0.7, 0.2, 0.7};
    npuc_prune_opts o = npuc_prune_opts_defaults();
    o.sparsity = 0.43;
    o.layer_sparsity = rules;
    o.nlayer_sparsity = 2;
    o.write.overwrite = 1;
    if (npuc_prune_model(ctx, m, out, &o, &sum) != NPUC_OK) fail_msg("%s", npuc_ctx_errmsg(ctx));
    assert_int_equal(npuc_model_open(ctx, out, NULL, &pm), NPUC_OK);
    for (int t = 0; t < 3; t++) {
        got[t] = read_tensor(pm, names[t], NULL);
        float *ref = malloc(ns[t] * sizeof *ref);
        double e2;
        const size_t k = (size_t)floor(want[t] * (double)ns[t]);
        ref_prune(orig[t], ns[t], k, ref, &e2);
        assert_memory_equal(got[t], ref, ns[t] * sizeof *ref);
        const npuc_tensor_record *r = rec_of(&sum, names[t]);
        assert_string_equal(r->scheme, "mag/layer");
        assert_close(npuc_record_get(r, "sparsity_target", -1), want[t], 0, 0);
        assert_close(npuc_record_get(r, "pruned", -1), (double)k, 0, 0);
        free(ref);
        free(got[t]);
    }
    assert_int_equal(rec_of(&sum, "b.bias")->action, NPUC_ACTION_KEPT); /* rules do not select */
    npuc_summary_free(&sum);
    npuc_model_close(pm);

    /* Global scope: a.weight alone at 0.1; b and c share floor(0.43 (Nb + Nc)). */
    const char *grule[1] = {"^a\\.weight$=0.1"};
    o.scope = NPUC_PRUNE_GLOBAL;
    o.layer_sparsity = grule;
    o.nlayer_sparsity = 1;
    if (npuc_prune_model(ctx, m, out, &o, &sum) != NPUC_OK) fail_msg("%s", npuc_ctx_errmsg(ctx));
    assert_int_equal(npuc_model_open(ctx, out, NULL, &pm), NPUC_OK);
    for (int t = 0; t < 3; t++) got[t] = read_tensor(pm, names[t], NULL);
    float *ref = malloc(ns[0] * sizeof *ref);
    double e2;
    ref_prune(orig[0], ns[0], (size_t)floor(0.1 * (double)ns[0]), ref, &e2);
    assert_memory_equal(got[0], ref, ns[0] * sizeof *ref);
    free(ref);
    const size_t pool = ns[1] + ns[2];
    float *cat = malloc(pool * sizeof *cat);
    ref = malloc(pool * sizeof *ref);
    memcpy(cat, orig[1], ns[1] * sizeof *cat);
    memcpy(cat + ns[1], orig[2], ns[2] * sizeof *cat);
    ref_prune(cat, pool, (size_t)floor(0.43 * (double)pool), ref, &e2);
    assert_memory_equal(got[1], ref, ns[1] * sizeof *ref);
    assert_memory_equal(got[2], ref + ns[1], ns[2] * sizeof *ref);
    free(cat);
    free(ref);
    assert_string_equal(rec_of(&sum, "a.weight")->scheme, "mag/layer");
    assert_close(npuc_record_get(rec_of(&sum, "a.weight"), "sparsity_target", -1), 0.1, 0, 0);
    assert_string_equal(rec_of(&sum, "c.weight")->scheme, "mag/global");
    assert_close(npuc_record_get(rec_of(&sum, "c.weight"), "sparsity_target", -1), 0.43, 0, 0);
    for (int t = 0; t < 3; t++) free(got[t]);
    npuc_summary_free(&sum);
    npuc_model_close(pm);

    /* Bad rules, in both scopes and structured: NPUC_ERR_ARG, one line, nothing written. */
    const char *bad = npuc_test_path("layers.bad.safetensors");
    const char *b1[1] = {"a=1"}, *b2[1] = {"a=abc"}, *b3[1] = {"^nothing$=0.3"}, *b4[1] = {"a"},
               *b5[1] = {"a=-0.5"}, *b6[1] = {"(a=0.5"};
    const char *const *brules[6] = {b1, b2, b3, b4, b5, b6};
    const char *bwant[6] = {"--layer-sparsity 'a=1': the sparsity after '=' must be a number in [0, 1)",
                            "--layer-sparsity 'a=abc': the sparsity after '=' must be a number in [0, 1)",
                            "layers.safetensors: --layer-sparsity '^nothing$=0.3' matches no tensor",
                            "--layer-sparsity 'a': expected REGEX=VALUE",
                            "--layer-sparsity 'a=-0.5': the sparsity after '=' must be a number in [0, 1)",
                            "--layer-sparsity '(a=0.5': invalid regular expression"};
    for (int k = 0; k < 6; k++)
        for (int mode = 0; mode < 3; mode++) {
            o = npuc_prune_opts_defaults();
            o.scope = mode == 1 ? NPUC_PRUNE_GLOBAL : NPUC_PRUNE_LAYER;
            o.structure = mode == 2 ? NPUC_PRUNE_FILTER : NPUC_PRUNE_UNSTRUCTURED;
            o.layer_sparsity = brules[k];
            o.nlayer_sparsity = 1;
            assert_int_equal(npuc_prune_model(ctx, m, bad, &o, &sum), NPUC_ERR_ARG);
            if (!strstr(npuc_ctx_errmsg(ctx), bwant[k]))
                fail_msg("rule %d mode %d: '%s', expected '%s'", k, mode, npuc_ctx_errmsg(ctx), bwant[k]);
            assert_null(strchr(npuc_ctx_errmsg(ctx), '\n'));
            assert_false(npuc_test_exists(bad));
        }
    for (int t = 0; t < 3; t++) free(orig[t]);
    npuc_model_close(m);

    /* Structured: features.3's filters at 0.75 (12 of 16 removed), the
     * other producers at 0.5; channel mode: the rule names the consumer. */
    assert_int_equal(npuc_model_open(ctx, sample("cnn_bn.safetensors"), NULL, &m), NPUC_OK);
    const char *srule[1] = {"^features\\.3\\.weight$=0.75"};
    o = npuc_prune_opts_defaults();
    o.sparsity = 0.5;
    o.structure = NPUC_PRUNE_FILTER;
    o.layer_sparsity = srule;
    o.nlayer_sparsity = 1;
    o.write.overwrite = 1;
    npuc_policy pol = npuc_policy_defaults();
    pol.accept_guesses = 1; /* features.6 -> classifier is a guess (storage order) */
    npuc_ctx_set_policy(ctx, &pol);
    if (npuc_prune_model(ctx, m, out, &o, &sum) != NPUC_OK) fail_msg("%s", npuc_ctx_errmsg(ctx));
    pol = npuc_policy_defaults();
    npuc_ctx_set_policy(ctx, &pol);
    assert_int_equal(npuc_model_open(ctx, out, NULL, &pm), NPUC_OK);
    npuc_tensor_info t0, t3;
    float *p0 = read_tensor(pm, "features.0.weight", &t0), *p3 = read_tensor(pm, "features.3.weight", &t3);
    assert_int_equal(t0.shape[0], 4);
    assert_int_equal(t3.shape[0], 4);
    assert_int_equal(t3.shape[1], 4);
    const npuc_tensor_record *r3 = rec_of(&sum, "features.3.weight");
    assert_close(npuc_record_get(r3, "sparsity_target", -1), 0.75, 0, 0);
    assert_close(npuc_record_get(r3, "channels_removed", -1), 12, 0, 0);
    assert_close(npuc_record_get(rec_of(&sum, "features.0.weight"), "sparsity_target", -1), 0.5, 0, 0);
    free(p0);
    free(p3);
    npuc_summary_free(&sum);
    npuc_model_close(pm);
    o.structure = NPUC_PRUNE_CHANNEL;
    if (npuc_prune_model(ctx, m, out, &o, &sum) != NPUC_OK) fail_msg("%s", npuc_ctx_errmsg(ctx));
    assert_int_equal(npuc_model_open(ctx, out, NULL, &pm), NPUC_OK);
    p3 = read_tensor(pm, "features.3.weight", &t3);
    assert_int_equal(t3.shape[1], 2); /* 8 input channels at 0.75: 6 removed */
    p0 = read_tensor(pm, "features.0.weight", &t0);
    assert_int_equal(t0.shape[0], 2);
    assert_close(npuc_record_get(rec_of(&sum, "features.0.weight"), "sparsity_target", -1), 0.75, 0, 0);
    free(p0);
    free(p3);
    npuc_summary_free(&sum);
    npuc_model_close(pm);
    npuc_model_close(m);
}

/* ------------------------------------------------------------ reference forward */

typedef struct act {
    int C, H, W;
    double *v; /* [C][H][W] */
} act;

static act act_new(int C, int H, int W) {
    act a = {C, H, W, calloc((size_t)C * H * W, sizeof(double))};
    return a;
}

enum { S_CONV, S_DW, S_BN, S_RELU, S_POOL, S_LINEAR };

typedef struct stage {
    int kind;
    const char *w, *b;            /* weight and bias (NULL: none) */
    const char *g, *beta, *mean, *var;
    double eps;
} stage;

static double wget(const npuc_tensor_info *t, const float *v, int o, int i, int ky, int kx) {
    const int64_t *s = t->shape;
    switch (t->layout) {
    case NPUC_LAYOUT_OIHW: return v[((o * s[1] + i) * s[2] + ky) * s[3] + kx];
    case NPUC_LAYOUT_HWIO: return v[((ky * s[1] + kx) * s[2] + i) * s[3] + o];
    case NPUC_LAYOUT_OI: return v[o * s[1] + i];
    case NPUC_LAYOUT_IO: return v[i * s[1] + o];
    default: fail(); return 0;
    }
}

static act run_stage(npuc_model *m, const stage *st, act in) {
    npuc_tensor_info t;
    float *w = NULL, *b = NULL;
    act out = {0, 0, 0, NULL};
    if (st->kind == S_CONV || st->kind == S_LINEAR) {
        w = read_tensor(m, st->w, &t);
        if (st->b) b = read_tensor(m, st->b, NULL);
        const int oihw = t.layout == NPUC_LAYOUT_OIHW || t.layout == NPUC_LAYOUT_OI;
        const int O = (int)(oihw ? t.shape[0] : t.shape[t.rank - 1]);
        const int I = (int)(oihw ? t.shape[1] : t.shape[t.rank - 2]);
        const int KH = t.rank == 4 ? (int)(oihw ? t.shape[2] : t.shape[0]) : 1;
        const int KW = t.rank == 4 ? (int)(oihw ? t.shape[3] : t.shape[1]) : 1;
        assert_int_equal(I, in.C);
        out = act_new(O, in.H, in.W);
        for (int o = 0; o < O; o++)
            for (int y = 0; y < in.H; y++)
                for (int x = 0; x < in.W; x++) {
                    double s = b ? b[o] : 0;
                    for (int i = 0; i < I; i++)
                        for (int ky = 0; ky < KH; ky++)
                            for (int kx = 0; kx < KW; kx++) {
                                int yy = y + ky - KH / 2, xx = x + kx - KW / 2;
                                if (yy < 0 || yy >= in.H || xx < 0 || xx >= in.W) continue;
                                s += wget(&t, w, o, i, ky, kx) * in.v[((size_t)i * in.H + yy) * in.W + xx];
                            }
                    out.v[((size_t)o * in.H + y) * in.W + x] = s;
                }
    } else if (st->kind == S_DW) {
        w = read_tensor(m, st->w, &t);
        if (st->b) b = read_tensor(m, st->b, NULL);
        const int hwim = t.layout == NPUC_LAYOUT_HWIM;
        const int C = (int)(hwim ? t.shape[2] : t.shape[0]);
        const int KH = (int)(hwim ? t.shape[0] : t.shape[2]), KW = (int)(hwim ? t.shape[1] : t.shape[3]);
        assert_int_equal(C, in.C);
        out = act_new(C, in.H, in.W);
        for (int c = 0; c < C; c++)
            for (int y = 0; y < in.H; y++)
                for (int x = 0; x < in.W; x++) {
                    double s = b ? b[c] : 0;
                    for (int ky = 0; ky < KH; ky++)
                        for (int kx = 0; kx < KW; kx++) {
                            int yy = y + ky - KH / 2, xx = x + kx - KW / 2;
                            if (yy < 0 || yy >= in.H || xx < 0 || xx >= in.W) continue;
                            double wv = hwim ? w[(ky * KW + kx) * C + c] : w[(c * KH + ky) * KW + kx];
                            s += wv * in.v[((size_t)c * in.H + yy) * in.W + xx];
                        }
                    out.v[((size_t)c * in.H + y) * in.W + x] = s;
                }
    } else if (st->kind == S_BN) {
        npuc_tensor_info ti;
        float *g = read_tensor(m, st->g, &ti), *be = read_tensor(m, st->beta, NULL);
        float *mu = read_tensor(m, st->mean, NULL), *va = read_tensor(m, st->var, NULL);
        assert_int_equal((int)ti.numel, in.C);
        out = act_new(in.C, in.H, in.W);
        for (int c = 0; c < in.C; c++)
            for (int p = 0; p < in.H * in.W; p++) {
                size_t k = (size_t)c * in.H * in.W + p;
                out.v[k] = g[c] * (in.v[k] - mu[c]) / sqrt((double)va[c] + st->eps) + be[c];
            }
        free(g);
        free(be);
        free(mu);
        free(va);
    } else if (st->kind == S_RELU) {
        out = act_new(in.C, in.H, in.W);
        for (size_t k = 0; k < (size_t)in.C * in.H * in.W; k++) out.v[k] = in.v[k] > 0 ? in.v[k] : 0;
    } else { /* S_POOL */
        out = act_new(in.C, 1, 1);
        for (int c = 0; c < in.C; c++) {
            double s = 0;
            for (int p = 0; p < in.H * in.W; p++) s += in.v[(size_t)c * in.H * in.W + p];
            out.v[c] = s / (in.H * in.W);
        }
    }
    free(w);
    free(b);
    return out;
}

/* Runs the stages; acts[s] is the output of stage s.  With zero != NULL the
 * channels c with zero[c] are set to 0 at the input of the last stage. */
static void run_chain(npuc_model *m, const stage *st, int n, act in, act *acts, const uint8_t *zero) {
    act cur = in;
    for (int s = 0; s < n; s++) {
        if (zero && s == n - 1) {
            act z = act_new(cur.C, cur.H, cur.W);
            memcpy(z.v, cur.v, (size_t)cur.C * cur.H * cur.W * sizeof(double));
            for (int c = 0; c < cur.C; c++)
                if (zero[c])
                    for (int p = 0; p < cur.H * cur.W; p++) z.v[(size_t)c * cur.H * cur.W + p] = 0;
            acts[s] = run_stage(m, &st[s], z);
            free(z.v);
        } else {
            acts[s] = run_stage(m, &st[s], cur);
        }
        cur = acts[s];
    }
}

/* The channels an independent ranking keeps: the producer's filters by L1
 * (or L2) norm, kept = C - floor(S C) rounded up to round_to, the lowest
 * scores removed, ties removing the lower index first. */
static void ref_keep(npuc_model *m, const char *wname, double s, int l2, int round_to, uint8_t *keep, int *C_out) {
    npuc_tensor_info t;
    float *w = read_tensor(m, wname, &t);
    const int oaxis = t.layout == NPUC_LAYOUT_OIHW || t.layout == NPUC_LAYOUT_OI ? 0 : t.rank - 1;
    const int C = (int)t.shape[oaxis];
    double *sc = calloc((size_t)C, sizeof *sc);
    for (size_t e = 0; e < t.numel; e++) {
        size_t c = oaxis == 0 ? e / (t.numel / (size_t)C) : e % (size_t)C;
        sc[c] += l2 ? (double)w[e] * w[e] : fabs((double)w[e]);
    }
    int kept = C - (int)floor(s * C);
    if (round_to > 1) kept = (kept + round_to - 1) / round_to * round_to;
    if (kept > C) kept = C;
    for (int c = 0; c < C; c++) keep[c] = 1;
    for (int r = 0; r < C - kept; r++) { /* remove the weakest remaining, lowest index on ties */
        int best = -1;
        for (int c = 0; c < C; c++)
            if (keep[c] && (best < 0 || sc[c] < sc[best])) best = c;
        keep[best] = 0;
    }
    *C_out = C;
    free(sc);
    free(w);
}

typedef struct chain_case {
    const char *file;            /* relative to samples/ or the shared folder */
    int shared;
    const char *producer;        /* weight tensor */
    const stage *st;
    int nst;
    int first_consumer_stage;    /* stages [0, this) carry the pruned space; the last stage is the consumer */
    const char *const *next;     /* --next statements */
    size_t nnext;
    const char *graph;           /* --graph, relative to the shared folder */
    const char *const *companions;  /* every tensor whose channel axis must shrink (rank 1 or weights) */
    size_t ncomp;
    double sparsity;
    int l2, round_to;
} chain_case;

static const char *sample(const char *name) {
    static char buf[4][1024];
    static int k;
    const char *src = getenv("NPUC_SRC");
    char *b = buf[k++ & 3];
    snprintf(b, 1024, "%s/samples/%s", src ? src : "..", name);
    return b;
}

static void check_chain(const chain_case *cc) {
    const char *in = cc->shared ? npuc_test_shared_file(cc->file) : sample(cc->file);
    if (!in) return;
    npuc_model *m, *pm;
    assert_int_equal(npuc_model_open(ctx, in, NULL, &m), NPUC_OK);
    char inc[256], graph[1024];
    size_t k = 0;
    inc[k++] = '^';
    for (const char *p = cc->producer; *p && k < sizeof inc - 4; p++) {
        if (*p == '.') inc[k++] = '\\';
        inc[k++] = *p;
    }
    inc[k++] = '$';
    inc[k] = 0;
    const char *incs[1] = {inc};
    npuc_prune_opts o = npuc_prune_opts_defaults();
    o.sparsity = cc->sparsity;
    o.structure = NPUC_PRUNE_FILTER;
    o.criterion = cc->l2 ? NPUC_PRUNE_L2 : NPUC_PRUNE_L1;
    o.round_to = (uint32_t)cc->round_to;
    o.include = incs;
    o.ninclude = 1;
    o.next = cc->next;
    o.nnext = cc->nnext;
    if (cc->graph) {
        snprintf(graph, sizeof graph, "%s/%s", npuc_test_shared(), cc->graph);
        o.graph_file = graph;
    }
    o.write.overwrite = 1;
    const char *ext = strrchr(cc->file, '.');
    char outname[64];
    snprintf(outname, sizeof outname, "chain%s", ext);
    const char *out = npuc_test_path(outname);
    npuc_summary sum;
    assert_int_equal(npuc_prune_model(ctx, m, out, &o, &sum), NPUC_OK);
    assert_int_equal(npuc_model_open(ctx, out, NULL, &pm), NPUC_OK);

    uint8_t keep[4096];
    int C;
    ref_keep(m, cc->producer, cc->sparsity, cc->l2, cc->round_to, keep, &C);
    int kept = 0, map[4096];
    for (int c = 0; c < C; c++)
        if (keep[c]) map[kept++] = c;
    assert_true(kept < C);

    /* Every companion's channel axis shrank to `kept`, and nothing else did. */
    for (size_t i = 0; i < cc->ncomp; i++) {
        size_t a, b;
        assert_int_equal(npuc_model_find(m, cc->companions[i], &a), 0);
        assert_int_equal(npuc_model_find(pm, cc->companions[i], &b), 0);
        const npuc_tensor_info *t0 = npuc_model_tensor(m, a), *t1 = npuc_model_tensor(pm, b);
        assert_int_equal(t0->rank, t1->rank);
        int changed = 0;
        for (int d = 0; d < t0->rank; d++)
            if (t0->shape[d] != t1->shape[d]) {
                assert_int_equal(t0->shape[d], C);
                assert_int_equal(t1->shape[d], kept);
                changed++;
            }
        if (changed != 1) {
            print_error("%s: companion %s: %d axes changed\n", cc->file, cc->companions[i], changed);
            fail();
        }
    }

    /* Reference forward on random input. */
    npuc_tensor_info pt;
    float *pw = read_tensor(m, cc->producer, &pt);
    free(pw);
    const int I = (int)(pt.layout == NPUC_LAYOUT_OIHW || pt.layout == NPUC_LAYOUT_OI ? pt.shape[1] : pt.shape[pt.rank - 2]);
    act x = act_new(I, 5, 5);
    uint64_t rs = 42;
    for (int e = 0; e < I * 25; e++) x.v[e] = npuc_test_randn(&rs);
    act A[16], B[16], Z[16];
    run_chain(m, cc->st, cc->nst, x, A, NULL);
    run_chain(pm, cc->st, cc->nst, x, B, NULL);
    uint8_t zero[4096];
    for (int c = 0; c < C; c++) zero[c] = !keep[c];
    run_chain(m, cc->st, cc->nst, x, Z, zero);
    for (int s = 0; s < cc->first_consumer_stage; s++) {
        assert_int_equal(B[s].C, kept);
        assert_int_equal(A[s].C, C);
        const int P = A[s].H * A[s].W;
        for (int j = 0; j < kept; j++)
            for (int p = 0; p < P; p++)
                assert_close(B[s].v[(size_t)j * P + p], A[s].v[(size_t)map[j] * P + p], 1e-12, 1e-12);
    }
    const int L = cc->nst - 1;
    assert_int_equal(B[L].C, Z[L].C);
    for (size_t e = 0; e < (size_t)B[L].C * B[L].H * B[L].W; e++) assert_close(B[L].v[e], Z[L].v[e], 1e-10, 1e-10);
    /* ... and removing channels did change the consumer's output. */
    double diff = 0;
    for (size_t e = 0; e < (size_t)B[L].C * B[L].H * B[L].W; e++) diff += fabs(B[L].v[e] - A[L].v[e]);
    assert_true(diff > 0);
    for (int s = 0; s < cc->nst; s++) {
        free(A[s].v);
        free(B[s].v);
        free(Z[s].v);
    }
    free(x.v);
    /* The producer's record says what happened. */
    size_t pi;
    assert_int_equal(npuc_model_find(m, cc->producer, &pi), 0);
    const npuc_tensor_record *r = &sum.records[pi];
    assert_int_equal(r->action, NPUC_ACTION_PRUNED);
    assert_close(npuc_record_get(r, "channels", -1), C, 0, 0);
    assert_close(npuc_record_get(r, "channels_removed", -1), C - kept, 0, 0);
    npuc_summary_free(&sum);
    npuc_model_close(pm);
    npuc_model_close(m);
}

static void test_structured_samples(void **state) {
    (void)state;
    /* PyTorch names: features.0 -> BN features.1 -> features.3 (nn.Sequential). */
    static const stage ST0[] = {
        {S_CONV, "features.0.weight", NULL, 0, 0, 0, 0, 0},
        {S_BN, 0, 0, "features.1.weight", "features.1.bias", "features.1.running_mean", "features.1.running_var", 1e-5},
        {S_RELU, 0, 0, 0, 0, 0, 0, 0},
        {S_CONV, "features.3.weight", "features.3.bias", 0, 0, 0, 0, 0},
    };
    static const char *const C0[] = {"features.0.weight", "features.1.weight", "features.1.bias",
                                     "features.1.running_mean", "features.1.running_var", "features.3.weight"};
    /* features.3 (+bias) -> BN -> depthwise features.6 -> BN -> pool -> classifier. */
    static const stage ST1[] = {
        {S_CONV, "features.3.weight", "features.3.bias", 0, 0, 0, 0, 0},
        {S_BN, 0, 0, "features.4.weight", "features.4.bias", "features.4.running_mean", "features.4.running_var", 1e-5},
        {S_RELU, 0, 0, 0, 0, 0, 0, 0},
        {S_DW, "features.6.weight", NULL, 0, 0, 0, 0, 0},
        {S_BN, 0, 0, "features.7.weight", "features.7.bias", "features.7.running_mean", "features.7.running_var", 1e-5},
        {S_RELU, 0, 0, 0, 0, 0, 0, 0},
        {S_POOL, 0, 0, 0, 0, 0, 0, 0},
        {S_LINEAR, "classifier.weight", "classifier.bias", 0, 0, 0, 0, 0},
    };
    static const char *const C1[] = {"features.3.weight", "features.3.bias", "features.4.weight", "features.4.bias",
                                     "features.4.running_mean", "features.4.running_var", "features.6.weight",
                                     "features.7.weight", "features.7.bias", "features.7.running_mean",
                                     "features.7.running_var", "classifier.weight"};
    /* The same network in Keras layout (layer_names order). */
    static const stage SK[] = {
        {S_CONV, "conv2d_1/kernel", "conv2d_1/bias", 0, 0, 0, 0, 0},
        {S_BN, 0, 0, "batch_normalization_1/gamma", "batch_normalization_1/beta", "batch_normalization_1/moving_mean",
         "batch_normalization_1/moving_variance", 1e-3},
        {S_DW, "depthwise_conv2d/depthwise_kernel", NULL, 0, 0, 0, 0, 0},
        {S_BN, 0, 0, "batch_normalization_2/gamma", "batch_normalization_2/beta", "batch_normalization_2/moving_mean",
         "batch_normalization_2/moving_variance", 1e-3},
        {S_RELU, 0, 0, 0, 0, 0, 0, 0},
        {S_POOL, 0, 0, 0, 0, 0, 0, 0},
        {S_LINEAR, "dense/kernel", "dense/bias", 0, 0, 0, 0, 0},
    };
    static const char *const CK[] = {"conv2d_1/kernel", "conv2d_1/bias", "batch_normalization_1/gamma",
                                     "batch_normalization_1/moving_variance", "depthwise_conv2d/depthwise_kernel",
                                     "batch_normalization_2/beta", "batch_normalization_2/moving_mean", "dense/kernel"};
    static const stage SK0[] = {
        {S_CONV, "conv2d/kernel", NULL, 0, 0, 0, 0, 0},
        {S_BN, 0, 0, "batch_normalization/gamma", "batch_normalization/beta", "batch_normalization/moving_mean",
         "batch_normalization/moving_variance", 1e-3},
        {S_CONV, "conv2d_1/kernel", "conv2d_1/bias", 0, 0, 0, 0, 0},
    };
    static const char *const CK0[] = {"conv2d/kernel", "batch_normalization/gamma", "batch_normalization/beta",
                                      "conv2d_1/kernel"};
    const chain_case cases[] = {
        {"cnn_bn.safetensors", 0, "features.0.weight", ST0, 4, 3, NULL, 0, NULL, C0, 6, 0.5, 0, 1},
        {"cnn_bn.safetensors", 0, "features.3.weight", ST1, 8, 7, NULL, 0, NULL, C1, 12, 0.3, 1, 4},
        {"cnn_bn_keras.h5", 0, "conv2d_1/kernel", SK, 7, 6, NULL, 0, NULL, CK, 8, 0.5, 0, 1},
        {"cnn_bn_keras.h5", 0, "conv2d/kernel", SK0, 3, 2, NULL, 0, NULL, CK0, 4, 0.6, 1, 1},
    };
    /* features.6 -> classifier (storage order) and the Keras layer order are
     * guesses: applied here with accept_guesses, the rest of the suite runs
     * with the default policy (listed, not applied). */
    npuc_policy pol = npuc_policy_defaults();
    pol.accept_guesses = 1;
    npuc_ctx_set_policy(ctx, &pol);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_chain(&cases[i]);
    pol = npuc_policy_defaults();
    npuc_ctx_set_policy(ctx, &pol);
}

static void test_structured_shared(void **state) {
    (void)state;
    if (!npuc_test_shared_file("ppocr_mobile_v2_cls.safetensors") && !npuc_test_shared_file("nsfwjs_mobilenet_v2.h5"))
        skip();
    /* Paddle names, alphabetical storage: consumers stated, BatchNorms from the catalog. */
    static const stage SP[] = {
        {S_CONV, "conv2d_6.w_0", NULL, 0, 0, 0, 0, 0},
        {S_BN, 0, 0, "batch_norm_4.w_0", "batch_norm_4.b_0", "batch_norm_4.w_1", "batch_norm_4.w_2", 1e-5},
        {S_RELU, 0, 0, 0, 0, 0, 0, 0},
        {S_DW, "conv2d_7.w_0", NULL, 0, 0, 0, 0, 0},
        {S_BN, 0, 0, "batch_norm_5.w_0", "batch_norm_5.b_0", "batch_norm_5.w_1", "batch_norm_5.w_2", 1e-5},
        {S_RELU, 0, 0, 0, 0, 0, 0, 0},
        {S_CONV, "conv2d_8.w_0", NULL, 0, 0, 0, 0, 0},
    };
    static const char *const CP[] = {"conv2d_6.w_0", "batch_norm_4.w_0", "batch_norm_4.b_0", "batch_norm_4.w_1",
                                     "batch_norm_4.w_2", "conv2d_7.w_0", "batch_norm_5.w_0", "batch_norm_5.w_2",
                                     "conv2d_8.w_0"};
    static const char *const NP[] = {"conv2d_6=conv2d_7", "conv2d_7.w_0=conv2d_8.w_0"};
    /* Keras MobileNetV2, exact topology from model_config. */
    static const stage SN[] = {
        {S_CONV, "block_3_expand/kernel", NULL, 0, 0, 0, 0, 0},
        {S_BN, 0, 0, "block_3_expand_BN/gamma", "block_3_expand_BN/beta", "block_3_expand_BN/moving_mean",
         "block_3_expand_BN/moving_variance", 1e-3},
        {S_RELU, 0, 0, 0, 0, 0, 0, 0},
        {S_DW, "block_3_depthwise/depthwise_kernel", NULL, 0, 0, 0, 0, 0},
        {S_BN, 0, 0, "block_3_depthwise_BN/gamma", "block_3_depthwise_BN/beta", "block_3_depthwise_BN/moving_mean",
         "block_3_depthwise_BN/moving_variance", 1e-3},
        {S_RELU, 0, 0, 0, 0, 0, 0, 0},
        {S_CONV, "block_3_project/kernel", NULL, 0, 0, 0, 0, 0},
    };
    static const char *const CN[] = {"block_3_expand/kernel", "block_3_expand_BN/gamma", "block_3_expand_BN/beta",
                                     "block_3_expand_BN/moving_mean", "block_3_expand_BN/moving_variance",
                                     "block_3_depthwise/depthwise_kernel", "block_3_depthwise_BN/gamma",
                                     "block_3_depthwise_BN/moving_variance", "block_3_project/kernel"};
    const chain_case cases[] = {
        {"ppocr_mobile_v2_cls.safetensors", 1, "conv2d_6.w_0", SP, 7, 6, NP, 2, "ppocr_mobile_v2_cls.json", CP, 9,
         0.5, 0, 8},
        {"ppocr_mobile_v2_cls.h5", 1, "conv2d_6.w_0", SP, 7, 6, NP, 2, "ppocr_mobile_v2_cls.json", CP, 9, 0.4, 1, 1},
        {"nsfwjs_mobilenet_v2.h5", 1, "block_3_expand/kernel", SN, 7, 6, NULL, 0, NULL, CN, 9, 0.5, 1, 16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_chain(&cases[i]);
}

/* Channel mode ranks on the consumer's input slices; without a chain the
 * filters are zeroed in place and the note says so. */
static void test_structured_modes(void **state) {
    (void)state;
    const char *in = sample("cnn_bn.safetensors");
    npuc_model *m, *pm;
    assert_int_equal(npuc_model_open(ctx, in, NULL, &m), NPUC_OK);
    const char *inc[1] = {"^features\\.3\\.weight$"};
    npuc_prune_opts o = npuc_prune_opts_defaults();
    o.sparsity = 0.5;
    o.structure = NPUC_PRUNE_CHANNEL;
    o.include = inc;
    o.ninclude = 1;
    o.write.overwrite = 1;
    const char *out = npuc_test_path("channel.safetensors");
    npuc_summary sum;
    assert_int_equal(npuc_prune_model(ctx, m, out, &o, &sum), NPUC_OK);
    assert_int_equal(npuc_model_open(ctx, out, NULL, &pm), NPUC_OK);
    /* Independent ranking on features.3's input slices. */
    npuc_tensor_info t;
    float *w = read_tensor(m, "features.3.weight", &t);
    double sc[8] = {0};
    for (size_t e = 0; e < t.numel; e++) sc[(e / 9) % 8] += fabs((double)w[e]);
    uint8_t keep[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    for (int r = 0; r < 4; r++) {
        int best = -1;
        for (int c = 0; c < 8; c++)
            if (keep[c] && (best < 0 || sc[c] < sc[best])) best = c;
        keep[best] = 0;
    }
    float *w0 = read_tensor(m, "features.0.weight", NULL), *p0 = read_tensor(pm, "features.0.weight", NULL);
    float *p3 = read_tensor(pm, "features.3.weight", &t);
    assert_int_equal(t.shape[1], 4);
    for (int c = 0, j = 0; c < 8; c++)
        if (keep[c]) {
            assert_memory_equal(p0 + j * 27, w0 + c * 27, 27 * sizeof(float));
            for (int o2 = 0; o2 < 16; o2++) assert_memory_equal(p3 + (o2 * 4 + j) * 9, w + (o2 * 8 + c) * 9, 9 * sizeof(float));
            j++;
        }
    free(w);
    free(w0);
    free(p0);
    free(p3);
    npuc_summary_free(&sum);
    npuc_model_close(pm);

    /* --no-guess: features.3's consumer is found only by storage order, so
     * its weakest filters are zeroed in place. */
    o = npuc_prune_opts_defaults();
    o.sparsity = 0.25;
    o.structure = NPUC_PRUNE_FILTER;
    o.include = inc;
    o.ninclude = 1;
    o.no_guess = 1;
    o.write.overwrite = 1;
    assert_int_equal(npuc_prune_model(ctx, m, out, &o, &sum), NPUC_OK);
    assert_int_equal(npuc_model_open(ctx, out, NULL, &pm), NPUC_OK);
    size_t i3;
    assert_int_equal(npuc_model_find(m, "features.3.weight", &i3), 0);
    assert_non_null(strstr(sum.records[i3].note, "zeroed, not removed"));
    assert_true(sum.nwarnings >= 1);
    w = read_tensor(m, "features.3.weight", &t);
    p3 = read_tensor(pm, "features.3.weight", &t);
    assert_int_equal(t.shape[0], 16);
    double fs[16] = {0};
    for (size_t e = 0; e < t.numel; e++) fs[e / 72] += fabs((double)w[e]);
    int zeroed = 0;
    for (int f = 0; f < 16; f++) {
        int allz = 1;
        for (int e = 0; e < 72; e++) allz &= p3[f * 72 + e] == 0.0f;
        if (allz) {
            zeroed++;
            int weaker = 0; /* a zeroed filter is among the 4 weakest */
            for (int g2 = 0; g2 < 16; g2++) weaker += fs[g2] < fs[f];
            assert_true(weaker < 4);
        } else {
            assert_memory_equal(p3 + f * 72, w + f * 72, 72 * sizeof(float));
        }
    }
    assert_int_equal(zeroed, 4);
    free(w);
    free(p3);
    npuc_summary_free(&sum);
    npuc_model_close(pm);

    /* Bad --next: a missing tensor, mismatched shapes; nothing written. */
    const char *bad = npuc_test_path("badnext.safetensors");
    const char *n1[1] = {"features.0=nothing.here"};
    const char *n2[1] = {"features.0=classifier"};
    const char *n3[1] = {"features.0"};
    const char *const *nexts[3] = {n1, n2, n3};
    const char *want[3] = {"no tensor or layer 'nothing.here'", "shapes do not match", "expected PRODUCER=CONSUMER"};
    for (int k = 0; k < 3; k++) {
        o = npuc_prune_opts_defaults();
        o.structure = NPUC_PRUNE_FILTER;
        o.next = nexts[k];
        o.nnext = 1;
        assert_int_equal(npuc_prune_model(ctx, m, bad, &o, &sum), NPUC_ERR_ARG);
        assert_non_null(strstr(npuc_ctx_errmsg(ctx), want[k]));
        assert_null(strchr(npuc_ctx_errmsg(ctx), '\n'));
        assert_false(npuc_test_exists(bad));
    }
    npuc_model_close(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_magnitude_exact),
        cmocka_unit_test(test_already_zero),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_kernels),
        cmocka_unit_test(test_model_scopes),
        cmocka_unit_test(test_layer_sparsity),
        cmocka_unit_test(test_structured_samples),
        cmocka_unit_test(test_structured_shared),
        cmocka_unit_test(test_structured_modes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
