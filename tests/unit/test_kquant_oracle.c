/*
 * test_kquant_oracle.c - npuc's GGUF block quantizers and dequantizers
 * against ggml's own, loaded with dlopen from the prebuilt libggml-base.so
 * of the npm package @node-llama-cpp/linux-x64 (pinned in
 * .ci/install-deps; its path comes from CMake as NPUC_GGML_LIB).
 *
 * For every type (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q4_0, Q4_1, Q5_0, Q5_1,
 * Q8_0), without and with importance weights, on 1 and 2 threads (and, in
 * the test registered with NPUC_FORCE_REF=1, with the reference kernels):
 * every byte npuc__gguf_quantize_rows writes equals what
 * ggml_quantize_chunk writes for the same rows, on heavy-tailed data with
 * outlier columns, all-zero and constant rows, exact ties, signed zeros,
 * tiny (subnormal-scale) and huge ranges, a lone spike, and row lengths of
 * 4096, 768 and (legacy types) 96.  A block whose fp16 scale overflows is
 * refused by npuc exactly where ggml stores an infinite scale.  The
 * dequantizers give the same float bits as ggml's dequantize_row_* on the
 * oracle's blocks and on random block bytes.
 *
 * ggml_init is called first: older ggml builds fill their fp16 table there,
 * and without it K-quant bytes come out silently wrong.  The test skips
 * (exit 77) only when the library is not installed.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf_format.h"
#include "testutil.h"

/* ggml's public declarations this test needs (ggml.h). */
struct ggml_init_params {
    size_t mem_size;
    void *mem_buffer;
    bool no_alloc;
};
typedef void *(*ggml_init_fn)(struct ggml_init_params);
typedef void (*ggml_free_fn)(void *);
typedef size_t (*quantize_chunk_fn)(int type, const float *src, void *dst, int64_t start, int64_t nrows,
                                    int64_t n_per_row, const float *imatrix);
typedef void (*dequant_fn)(const void *x, float *y, int64_t k);

static void *g_lib, *g_ctx;
static quantize_chunk_fn g_chunk;

enum { NTYPES = 10 };
static const struct {
    int id;
    const char *name, *deq;
    unsigned blck, tsize;
} TY[NTYPES] = {
    {NPUC__GGML_Q2_K, "Q2_K", "dequantize_row_q2_K", 256, 84},
    {NPUC__GGML_Q3_K, "Q3_K", "dequantize_row_q3_K", 256, 110},
    {NPUC__GGML_Q4_K, "Q4_K", "dequantize_row_q4_K", 256, 144},
    {NPUC__GGML_Q5_K, "Q5_K", "dequantize_row_q5_K", 256, 176},
    {NPUC__GGML_Q6_K, "Q6_K", "dequantize_row_q6_K", 256, 210},
    {NPUC__GGML_Q4_0, "Q4_0", "dequantize_row_q4_0", 32, 18},
    {NPUC__GGML_Q4_1, "Q4_1", "dequantize_row_q4_1", 32, 20},
    {NPUC__GGML_Q5_0, "Q5_0", "dequantize_row_q5_0", 32, 22},
    {NPUC__GGML_Q5_1, "Q5_1", "dequantize_row_q5_1", 32, 24},
    {NPUC__GGML_Q8_0, "Q8_0", "dequantize_row_q8_0", 32, 34},
};

static unsigned long long g_blocks, g_configs, g_deq;

/* splitmix64 and derived draws: the data are the same on every run. */
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t next64(void) {
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double unif(void) { return ((double)(next64() >> 11) + 0.5) / 9007199254740992.0; }
static double gauss(void) { return sqrt(-2.0 * log(unif())) * cos(6.283185307179586 * unif()); }
/* Student-t with 3 degrees of freedom: heavy tails. */
static double heavy(void) {
    const double g = gauss(), a = gauss(), b = gauss(), c = gauss();
    return g / sqrt((a * a + b * b + c * c) / 3.0 + 1e-12);
}

/* Fills nrow rows of n values: row r gets pattern r % NPAT. */
enum { NPAT = 12 };
static void fill(float *x, int nrow, int n) {
    for (int r = 0; r < nrow; r++) {
        float *y = x + (size_t)r * n;
        const int p = r % NPAT;
        for (int j = 0; j < n; j++) {
            double v;
            switch (p) {
            case 0: v = 0.02 * heavy(); break;
            case 1: v = 0.02 * heavy() * (j % 61 == 7 ? 40.0 : 1.0); break; /* outlier columns */
            case 2: v = 0.0; break;                                          /* all zero */
            case 3: v = 0.37; break;                                         /* constant */
            case 4: v = (double)((int)(next64() % 17) - 8) * 0.25; break;    /* exact ties on grids */
            case 5: v = j % 2 ? -0.0 : 0.0; break;                           /* signed zeros */
            case 6: v = 300.0 * heavy() * (j % 3 == 0 ? 1e-7 : 1.0); break; /* huge range */
            case 7: v = 1e-30 * heavy(); break;                              /* subnormal scales */
            case 8: v = j % 100 == 42 ? 3.0 : 0.0; break;                    /* lone spike */
            case 9: v = -2.5 + 0.001 * (double)(j % 5); break;               /* near-constant, negative */
            case 10: v = (double)(j % 32) - 15.5; break;                     /* ramps, .5 ties */
            default: v = gauss() * exp(gauss()); break;                      /* log-normal scales */
            }
            y[j] = (float)v;
        }
    }
}

/* Importance: heavy-tailed, non-negative, with zero columns. */
static void fill_imp(float *w, int n) {
    for (int j = 0; j < n; j++) {
        const double g = gauss();
        w[j] = j % 37 == 3 ? 0.0f : (float)(exp(2.0 * g) * (j % 13 == 0 ? 100.0 : 1.0));
    }
}

static int load(void) {
    const char *path = getenv("NPUC_GGML_LIB");
    if (!path || !*path) return -1;
    g_lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!g_lib) return -1;
    ggml_init_fn init = (ggml_init_fn)dlsym(g_lib, "ggml_init");
    g_chunk = (quantize_chunk_fn)dlsym(g_lib, "ggml_quantize_chunk");
    if (!init || !g_chunk) return -2;
    struct ggml_init_params ip = {1u << 20, NULL, false};
    g_ctx = init(ip);
    return g_ctx ? 0 : -2;
}

static dequant_fn deq_of(int t) {
    dequant_fn f = (dequant_fn)dlsym(g_lib, TY[t].deq);
    assert_non_null(f);
    return f;
}

/* ggml's and npuc's dequantization of the nb blocks of type t at b: the
 * same float bits. */
static void same_dequant(int t, const unsigned char *b, size_t nb) {
    const size_t k = nb * TY[t].blck;
    float *yo = malloc(k * sizeof *yo), *yq = malloc(k * sizeof *yq);
    assert_non_null(yo);
    assert_non_null(yq);
    deq_of(t)(b, yo, (int64_t)k);
    npuc__gguf_dequantize(TY[t].id, b, yq, k);
    assert_memory_equal(yo, yq, k * sizeof *yo);
    g_deq += nb;
    free(yo);
    free(yq);
}

/* One configuration: type t, nrow rows of n, importance or not, nth
 * threads.  Every block is compared; returns nothing, fails on the first
 * differing block with its coordinates. */
static void compare(int t, const float *x, int nrow, int n, const float *imp, int nth) {
    const size_t nb = (size_t)nrow * n / TY[t].blck, bytes = nb * TY[t].tsize;
    unsigned char *o = malloc(bytes), *q = malloc(bytes);
    assert_non_null(o);
    assert_non_null(q);
    memset(o, 0xa5, bytes);
    memset(q, 0x5a, bytes);
    const size_t wrote = g_chunk(TY[t].id, x, o, 0, nrow, n, imp);
    assert_int_equal(wrote, bytes);
    uint64_t bad = 0;
    const int rc = npuc__gguf_quantize_rows(TY[t].id, x, NPUC_DTYPE_F32, q, (uint64_t)nrow * n, (uint64_t)n, imp,
                                            nth, &bad);
    if (rc != 0) fprintf(stderr, "%s imp=%d nth=%d n=%d: refused block %llu\n", TY[t].name, imp != NULL, nth, n,
                         (unsigned long long)bad);
    assert_int_equal(rc, 0);
    for (size_t b = 0; b < nb; b++) {
        if (memcmp(o + b * TY[t].tsize, q + b * TY[t].tsize, TY[t].tsize) != 0) {
            fprintf(stderr, "%s imp=%d nth=%d n=%d: block %zu (row %zu, pattern %zu) differs\n  ggml:", TY[t].name,
                    imp != NULL, nth, n, b, b * TY[t].blck / n, (b * TY[t].blck / n) % NPAT);
            for (unsigned i = 0; i < TY[t].tsize; i++) fprintf(stderr, " %02x", o[b * TY[t].tsize + i]);
            fprintf(stderr, "\n  npuc:");
            for (unsigned i = 0; i < TY[t].tsize; i++) fprintf(stderr, " %02x", q[b * TY[t].tsize + i]);
            fprintf(stderr, "\n");
            fail();
        }
        g_blocks++;
    }
    g_configs++;
    /* The dequantizers, on the oracle's blocks: the same float bits. */
    same_dequant(t, o, nb);
    free(o);
    free(q);
}

static void run_shape(int nrow, int n, int legacy_only) {
    float *x = malloc((size_t)nrow * n * sizeof *x), *imp = malloc((size_t)n * sizeof *imp);
    assert_non_null(x);
    assert_non_null(imp);
    fill(x, nrow, n);
    fill_imp(imp, n);
    for (int t = 0; t < NTYPES; t++) {
        if ((int)(n % TY[t].blck) != 0 || (legacy_only && TY[t].blck != 32)) continue;
        for (int nth = 1; nth <= 2; nth++) {
            compare(t, x, nrow, n, NULL, nth);
            compare(t, x, nrow, n, imp, nth);
        }
    }
    free(x);
    free(imp);
}

/* 40 rows of 4096: 20 tiles of 8192 values, so both threads work. */
static void test_rows_4096(void **state) {
    (void)state;
    run_shape(40, 4096, 0);
}

/* 3 super-blocks a row; every pattern twice. */
static void test_rows_768(void **state) {
    (void)state;
    run_shape(24, 768, 0);
}

/* Rows of 96 (3 legacy blocks): the legacy weighted paths' row statistic. */
static void test_rows_96(void **state) {
    (void)state;
    run_shape(36, 96, 1);
}

/* Scales beyond fp16: npuc refuses the block ggml stores with an infinite
 * d, at the same index. */
static void test_overflow(void **state) {
    (void)state;
    enum { N = 512 };
    static float x[N];
    for (int j = 0; j < N; j++) x[j] = j < 256 ? 0.01f * (float)(j % 7) : 3.0e38f * (j % 2 ? 1.0f : -0.5f);
    for (int t = 0; t < NTYPES; t++) {
        const size_t nb = N / TY[t].blck;
        unsigned char o[N / 32 * 34], q[N / 32 * 34];
        g_chunk(TY[t].id, x, o, 0, 1, N, NULL);
        uint64_t bad = 99;
        const int rc = npuc__gguf_quantize_rows(TY[t].id, x, NPUC_DTYPE_F32, q, N, N, NULL, 1, &bad);
        assert_int_equal(rc, -1);
        assert_int_equal(bad, nb / 2); /* the first block of the second half */
        /* The accepted blocks before it are identical. */
        assert_memory_equal(o, q, nb / 2 * TY[t].tsize);
        g_blocks += nb / 2;
    }
}

/* Random block bytes with a finite fp16 scale: the dequantizers agree bit
 * for bit (every code, scale and min pattern). */
static void test_dequant_random(void **state) {
    (void)state;
    enum { NB = 512 };
    for (int t = 0; t < NTYPES; t++) {
        const size_t ts = TY[t].tsize;
        unsigned char *b = malloc(NB * ts);
        assert_non_null(b);
        for (size_t i = 0; i < NB * ts; i++) b[i] = (unsigned char)next64();
        /* Clear the fp16 exponent's top bit of d and dmin/m so they are finite. */
        for (size_t i = 0; i < NB; i++) {
            unsigned char *p = b + i * ts;
            size_t offs[2];
            int no = 0;
            switch (TY[t].id) {
            case NPUC__GGML_Q2_K: offs[no++] = 80; offs[no++] = 82; break;
            case NPUC__GGML_Q3_K: offs[no++] = 108; break;
            case NPUC__GGML_Q4_K: case NPUC__GGML_Q5_K: offs[no++] = 0; offs[no++] = 2; break;
            case NPUC__GGML_Q6_K: offs[no++] = 208; break;
            case NPUC__GGML_Q4_1: case NPUC__GGML_Q5_1: offs[no++] = 0; offs[no++] = 2; break;
            default: offs[no++] = 0; break;
            }
            for (int o = 0; o < no; o++) p[offs[o] + 1] &= 0xbf;
        }
        same_dequant(t, b, NB);
        free(b);
    }
}

static void test_summary(void **state) {
    (void)state;
    printf("kquant oracle: %llu blocks byte-identical in %llu configurations, %llu blocks dequantized "
           "identically (NPUC_FORCE_REF=%s)\n",
           g_blocks, g_configs, g_deq, getenv("NPUC_FORCE_REF") ? getenv("NPUC_FORCE_REF") : "unset");
    assert_true(g_configs > 0);
}

int main(void) {
    const int r = load();
    if (r == -1) {
        printf("SKIP: ggml's libggml-base.so not found (NPUC_GGML_LIB=%s); `.ci/install-deps --test` installs "
               "the npm package @node-llama-cpp/linux-x64 that ships it\n",
               getenv("NPUC_GGML_LIB") ? getenv("NPUC_GGML_LIB") : "unset");
        return 77;
    }
    if (r != 0) {
        fprintf(stderr, "%s: ggml_init or ggml_quantize_chunk missing or failing\n", getenv("NPUC_GGML_LIB"));
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_4096),      cmocka_unit_test(test_rows_768), cmocka_unit_test(test_rows_96),
        cmocka_unit_test(test_overflow),       cmocka_unit_test(test_dequant_random),
        cmocka_unit_test(test_summary),
    };
    const int rc = cmocka_run_group_tests(tests, NULL, NULL);
    /* ggml_init's context is ggml's allocation: freed by ggml_free, or the
     * sanitizer pass's LeakSanitizer reports it. */
    ggml_free_fn gfree = (ggml_free_fn)dlsym(g_lib, "ggml_free");
    if (gfree) gfree(g_ctx);
    return rc;
}
