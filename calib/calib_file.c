/*
 * calib_file.c - reading calibration files (npuc/calib.h,
 * docs/calibration.md): the Hessian sum of x x^T and the per-column
 * importance of a weight's inputs, through the model API.
 *
 * W.input [N, K] streams: at most chunk_rows rows are converted to F64 at a
 * time.  The sum runs over fixed blocks of BLOCK rows counted from row 0
 * (the chunk is a multiple of BLOCK), each block's K x K partial sum is
 * formed with its rows in order and added to H in block order, so H is the
 * same bit for bit for any chunk size and any thread count: a thread owns
 * whole rows of H.  Only the lower triangle is summed; the upper one is
 * mirrored at the end.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(_OPENMP)
#include <omp.h>
#endif

#include "npuc_internal.h"
#include "calib_out_error.h"

#define BLOCK 64u
/* Default chunk: as many rows as fit 16 MiB of F64, at least one block. */
#define CHUNK_BYTES (16u << 20)

struct npuc_calib {
    npuc_model *m;
    size_t chunk_rows;
};

npuc_status npuc_calib_open(npuc_ctx *ctx, const char *path, npuc_calib **out) {
    *out = NULL;
    npuc_calib *c = calloc(1, sizeof *c);
    if (!c) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    npuc_status st = npuc_model_open(ctx, path, NULL, &c->m);
    if (st != NPUC_OK) {
        free(c);
        return st;
    }
    *out = c;
    return NPUC_OK;
}

void npuc_calib_close(npuc_calib *c) {
    if (!c) return;
    npuc_model_close(c->m);
    free(c);
}

const char *npuc_calib_path(const npuc_calib *c) { return npuc_model_path(c->m); }

void npuc_calib_set_chunk_rows(npuc_calib *c, size_t rows) {
    if (rows == 0) {
        c->chunk_rows = 0;
        return;
    }
    if (rows < BLOCK) rows = BLOCK;
    c->chunk_rows = (rows + BLOCK - 1) / BLOCK * BLOCK;
}

/* Index of tensor "<weight><suffix>", or -1. */
static int64_t find(const npuc_calib *c, const char *weight, const char *suffix) {
    char name[1024];
    size_t idx;
    int n = snprintf(name, sizeof name, "%s%s", weight, suffix);
    if (n < 0 || (size_t)n >= sizeof name) return -1;
    return npuc_model_find(c->m, name, &idx) == 0 ? (int64_t)idx : -1;
}

int npuc_calib_has(const npuc_calib *c, const char *weight) {
    if (find(c, weight, ".input") >= 0 || find(c, weight, ".hessian") >= 0) return 1;
    return find(c, weight, ".input_sq") >= 0 ? 2 : 0;
}

int npuc__calib_has_input(const npuc_calib *c, const char *weight) { return find(c, weight, ".input") >= 0; }

/* 1 on a little-endian host, where an F64 payload's bytes are the doubles
 * (the compile-time test src/kernels/ref/qk_ref.c uses too). */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define HOST_LE 1
#else
#define HOST_LE 0
#endif

static npuc_status bad(npuc_ctx *ctx, const npuc_calib *c, const npuc_tensor_info *t, const char *what) {
    return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': %s", npuc_model_path(c->m), t->name, what);
}

/* Converts elements [first, first + n) of tensor t (raw bytes at data) to
 * F64 and checks they are finite. */
static npuc_status to_f64(npuc_ctx *ctx, const npuc_calib *c, const npuc_tensor_info *t, const void *data,
                          uint64_t first, uint64_t n, double *dst) {
    const size_t es = npuc_dtype_size(t->dtype);
    if (!npuc_dtype_is_float(t->dtype)) return bad(ctx, c, t, "not a float tensor");
    if (npuc_convert(dst, NPUC_DTYPE_F64, (const unsigned char *)data + first * es, t->dtype, (size_t)n) != 0)
        return bad(ctx, c, t, "cannot convert its dtype");
    for (uint64_t i = 0; i < n; i++)
        if (!isfinite(dst[i])) return bad(ctx, c, t, "holds NaN or Inf");
    return NPUC_OK;
}

/* Adds the lower triangle of sum over rows of x x^T, for `rows` rows of X
 * (row-major, K columns) that start on a block boundary, into H; XT is
 * scratch of K * BLOCK doubles. */
static void add_blocks(const double *X, uint64_t rows, uint64_t K, double *H, double *XT, int nth) {
    for (uint64_t r0 = 0; r0 < rows; r0 += BLOCK) {
        const uint64_t nb = rows - r0 < BLOCK ? rows - r0 : BLOCK;
        for (uint64_t r = 0; r < nb; r++)
            for (uint64_t a = 0; a < K; a++) XT[a * BLOCK + r] = X[(r0 + r) * K + a];
#pragma omp parallel for schedule(dynamic, 16) num_threads(nth)
        for (int64_t ai = 0; ai < (int64_t)K; ai++) {
            const uint64_t a = (uint64_t)ai;
            const double *xa = XT + a * BLOCK;
            for (uint64_t b = 0; b <= a; b++) {
                const double *xb = XT + b * BLOCK;
                double s = 0;
                for (uint64_t r = 0; r < nb; r++) s += xa[r] * xb[r];
                H[a * K + b] += s;
            }
        }
    }
}

int npuc__calib_threads(npuc_ctx *ctx) {
    int n = npuc_ctx_threads(ctx);
#if defined(_OPENMP)
    if (n <= 0) n = omp_get_max_threads();
#else
    n = 1;
#endif
    return n < 1 ? 1 : n;
}

npuc_status npuc__calib_input_rows(npuc_ctx *ctx, npuc_calib *c, const char *weight, uint64_t K,
                                   npuc__calib_rows_fn fn, void *u, double *n, int *found) {
    int64_t i = find(c, weight, ".input");
    *found = 0;
    if (i < 0) return NPUC_OK;
    *found = 1;
    const size_t idx = (size_t)i;
    const npuc_tensor_info *t = npuc_model_tensor(c->m, idx);
    if (t->rank < 2 || (uint64_t)t->shape[t->rank - 1] != K) {
        char why[160];
        snprintf(why, sizeof why, "expected [N, %llu] (the weight's reduction length), found rank %d ending in %lld",
                 (unsigned long long)K, t->rank, t->rank ? (long long)t->shape[t->rank - 1] : 0LL);
        return bad(ctx, c, t, why);
    }
    const uint64_t N = K ? t->numel / K : 0;
    if (N == 0) return bad(ctx, c, t, "has no rows");
    uint64_t chunk = c->chunk_rows, xs;
    if (!chunk) {
        chunk = CHUNK_BYTES / (K * sizeof(double)) / BLOCK * BLOCK;
        if (chunk < BLOCK) chunk = BLOCK;
    }
    if (npuc_mul_overflow(chunk, K, &xs) || npuc_mul_overflow(xs, sizeof(double), &xs) || (size_t)xs != xs)
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: tensor '%s': too large", npuc_model_path(c->m), t->name);
    const void *data;
    npuc_status st = npuc_model_data(ctx, c->m, idx, &data);
    if (st != NPUC_OK) return st;
    double *X = malloc((size_t)xs);
    if (!X) st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: tensor '%s': out of memory", npuc_model_path(c->m), t->name);
    for (uint64_t r0 = 0; r0 < N && st == NPUC_OK; r0 += chunk) {
        const uint64_t rows = N - r0 < chunk ? N - r0 : chunk;
        if ((st = to_f64(ctx, c, t, data, r0 * K, rows * K, X)) == NPUC_OK) st = fn(u, X, rows);
    }
    npuc_model_release(c->m, idx);
    free(X);
    *n = (double)N;
    return st;
}

/* The Hessian sum over W.input, chunk by chunk (npuc__calib_input_rows). */
typedef struct hsum {
    double *H, *XT;
    uint64_t K;
    int nth;
    int zeroed; /* H is written only once the input was found and its K checked */
} hsum;

static void hsum_zero(hsum *h) {
    if (!h->zeroed) memset(h->H, 0, sizeof(double) * (size_t)(h->K * h->K));
    h->zeroed = 1;
}

static npuc_status hsum_rows(void *u, const double *X, uint64_t rows) {
    hsum *h = u;
    hsum_zero(h);
    add_blocks(X, rows, h->K, h->H, h->XT, h->nth);
    return NPUC_OK;
}

static npuc_status hessian_from_input(npuc_ctx *ctx, npuc_calib *c, const char *weight, uint64_t K, double *H,
                                      double *n) {
    uint64_t ts;
    int found;
    if (npuc_mul_overflow(K, (uint64_t)BLOCK * sizeof(double), &ts) || (size_t)ts != ts)
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: '%s': too large", npuc_model_path(c->m), weight);
    hsum h = {H, malloc((size_t)ts), K, npuc__calib_threads(ctx), 0};
    if (!h.XT) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: '%s': out of memory", npuc_model_path(c->m), weight);
    npuc_status st = npuc__calib_input_rows(ctx, c, weight, K, hsum_rows, &h, n, &found);
    free(h.XT);
    if (st != NPUC_OK) return st;
    if (!found) return NPUC_OK; /* the caller looks for a stored Hessian: H untouched */
    hsum_zero(&h); /* an input of no rows: H = 0 */
    for (uint64_t a = 0; a < K; a++)
        for (uint64_t b = a + 1; b < K; b++) H[a * K + b] = H[b * K + a];
    return NPUC_OK;
}

/* A Hessian from a BLAS product may differ from its transpose in the last
 * bits: the lower triangle of H (K x K, row-major) is copied over the upper
 * one, and only a real asymmetry (not a sum of x x^T) is refused (returns
 * 0; H is then partly rewritten).  In SYM_TILE x SYM_TILE tiles, so the
 * transposed reads stay in cache: a 4096 x 4096 Hessian read column by
 * column misses the cache on every value. */
#define SYM_TILE 64u
static int symmetrize(double *H, uint64_t K, int nth) {
    const int64_t nt = (int64_t)((K + SYM_TILE - 1) / SYM_TILE);
    int ok = 1;
    /* A row of tiles writes only its own columns of the upper triangle: the
     * rows of tiles are independent. */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nth) if (K >= 512)
    for (int64_t ti = nt - 1; ti >= 0; ti--) { /* the longest rows first */
        const uint64_t a0 = (uint64_t)ti * SYM_TILE, a1 = a0 + SYM_TILE < K ? a0 + SYM_TILE : K;
        int good = 1;
        for (uint64_t b0 = 0; good && b0 <= a0; b0 += SYM_TILE) {
            const uint64_t b1 = b0 + SYM_TILE < K ? b0 + SYM_TILE : K;
            for (uint64_t a = a0; good && a < a1; a++)
                for (uint64_t b = b0; b < b1 && b < a; b++) {
                    const double l = H[a * K + b], u = H[b * K + a];
                    if (fabs(l - u) > 1e-6 * sqrt(fabs(H[a * K + a]) * fabs(H[b * K + b])) + 1e-300) {
                        good = 0;
                        break;
                    }
                    H[b * K + a] = l;
                }
        }
        if (!good) {
#pragma omp atomic write
            ok = 0;
        }
    }
    return ok;
}

static npuc_status hessian_stored(npuc_ctx *ctx, npuc_calib *c, size_t idx, const char *weight, uint64_t K,
                                  double *H, double *n) {
    const npuc_tensor_info *t = npuc_model_tensor(c->m, idx);
    if (t->rank != 2 || (uint64_t)t->shape[0] != K || (uint64_t)t->shape[1] != K) {
        char why[96];
        snprintf(why, sizeof why, "expected [%llu, %llu] (the weight's reduction length)", (unsigned long long)K,
                 (unsigned long long)K);
        return bad(ctx, c, t, why);
    }
    int64_t ci = find(c, weight, ".hessian_count");
    if (ci < 0)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': no '%s.hessian_count' beside it (the rows summed)",
                         npuc_model_path(c->m), t->name, weight);
    const npuc_tensor_info *tc = npuc_model_tensor(c->m, (size_t)ci);
    const void *data;
    double cnt = 0;
    npuc_status st;
    if (tc->numel != 1) return bad(ctx, c, tc, "expected one value (the count of rows summed)");
    if ((st = npuc_model_data(ctx, c->m, (size_t)ci, &data)) != NPUC_OK) return st;
    if (npuc_convert(&cnt, NPUC_DTYPE_F64, data, tc->dtype, 1) != 0) cnt = -1;
    npuc_model_release(c->m, (size_t)ci);
    if (!(cnt > 0) || !isfinite(cnt)) return bad(ctx, c, tc, "the count of rows must be positive");
    /* An F64 Hessian is read straight into H, a row block per thread, and
     * checked there: one 4096 x 4096 Hessian is 128 MiB, which a load would
     * copy into a buffer of its own on one thread first.  Any failure (a
     * read error, a value that is not finite) falls through to the load
     * below, which says what it is. */
    if (t->dtype == NPUC_DTYPE_F64 && HOST_LE && npuc__model_can_read_range(c->m) && K >= 512) {
        const int64_t nrb = (int64_t)((K + 63) / 64);
        int okr = 1;
#pragma omp parallel for schedule(static) num_threads(npuc__calib_threads(ctx))
        for (int64_t rb = 0; rb < nrb; rb++) {
            const uint64_t r0 = (uint64_t)rb * 64, r1 = r0 + 64 < K ? r0 + 64 : K;
            double *h = H + r0 * K;
            int good = npuc__model_read_range(NULL, c->m, idx, r0 * K * 8, (r1 - r0) * K * 8, h) == NPUC_OK;
            for (uint64_t k = 0; good && k < (r1 - r0) * K; k++) good = isfinite(h[k]);
            if (!good) {
#pragma omp atomic write
                okr = 0;
            }
        }
        if (okr) {
            if (!symmetrize(H, K, npuc__calib_threads(ctx))) return bad(ctx, c, t, "is not symmetric");
            *n = cnt;
            return NPUC_OK;
        }
    }
    if ((st = npuc_model_data(ctx, c->m, idx, &data)) != NPUC_OK) return st;
    /* Converted a row block at a time on the context's threads: one 4096 x
     * 4096 Hessian is 128 MiB to convert and check. */
    {
        const int64_t nrb = (int64_t)((K + 63) / 64);
        int okc = 1;
#pragma omp parallel for schedule(static) num_threads(npuc__calib_threads(ctx)) if (K >= 512)
        for (int64_t rb = 0; rb < nrb; rb++) {
            const uint64_t r0 = (uint64_t)rb * 64, r1 = r0 + 64 < K ? r0 + 64 : K;
            if (to_f64(NULL, c, t, data, r0 * K, (r1 - r0) * K, H + r0 * K) != NPUC_OK) {
#pragma omp atomic write
                okc = 0;
            }
        }
        /* Again on one thread for the message (to_f64 names what is wrong). */
        st = okc ? NPUC_OK : to_f64(ctx, c, t, data, 0, K * K, H);
    }
    npuc_model_release(c->m, idx);
    if (st != NPUC_OK) return st;
    if (!symmetrize(H, K, npuc__calib_threads(ctx))) return bad(ctx, c, t, "is not symmetric");
    *n = cnt;
    return NPUC_OK;
}

npuc_status npuc_calib_hessian(npuc_ctx *ctx, npuc_calib *c, const char *weight, uint64_t K, double *H, double *n,
                               int *found) {
    int64_t i = find(c, weight, ".hessian");
    *found = 0;
    if (i >= 0) {
        *found = 1;
        return hessian_stored(ctx, c, (size_t)i, weight, K, H, n);
    }
    if ((i = find(c, weight, ".input")) >= 0) {
        *found = 1;
        return hessian_from_input(ctx, c, weight, K, H, n);
    }
    return NPUC_OK;
}

/* Tensor i of the file, K values >= 0 (what: the count's meaning), into
 * dst as F64. */
static npuc_status read_nonneg(npuc_ctx *ctx, npuc_calib *c, size_t i, uint64_t K, const char *what, double *dst) {
    const npuc_tensor_info *t = npuc_model_tensor(c->m, i);
    const void *data;
    if (t->numel != K) {
        char why[128];
        snprintf(why, sizeof why, "expected %llu values (%s)", (unsigned long long)K, what);
        return bad(ctx, c, t, why);
    }
    npuc_status st = npuc_model_data(ctx, c->m, i, &data);
    if (st != NPUC_OK) return st;
    st = to_f64(ctx, c, t, data, 0, K, dst);
    npuc_model_release(c->m, i);
    for (uint64_t k = 0; st == NPUC_OK && k < K; k++)
        if (dst[k] < 0) st = bad(ctx, c, t, "holds a negative mean square");
    return st;
}

npuc_status npuc__calib_output_grad(npuc_ctx *ctx, npuc_calib *c, const char *weight, uint64_t C, double *g,
                                    int *found) {
    int64_t i = find(c, weight, ".output_grad_sq");
    *found = 0;
    if (i < 0) return NPUC_OK;
    npuc_status st = read_nonneg(ctx, c, (size_t)i, C, "the weight's output channels", g);
    *found = st == NPUC_OK;
    return st;
}

npuc_status npuc_calib_importance(npuc_ctx *ctx, npuc_calib *c, const char *weight, uint64_t K, double *imp,
                                  int *found) {
    int64_t i = find(c, weight, ".input_sq");
    *found = 0;
    if (i >= 0) {
        npuc_status st = read_nonneg(ctx, c, (size_t)i, K, "the weight's reduction length", imp);
        *found = st == NPUC_OK;
        return st;
    }
    if (!npuc_calib_has(c, weight)) return NPUC_OK;
    uint64_t hs;
    if (npuc_mul_overflow(K, K, &hs) || npuc_mul_overflow(hs, sizeof(double), &hs) || (size_t)hs != hs)
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: '%s': too large", npuc_model_path(c->m), weight);
    double *H = malloc((size_t)hs), n = 0;
    if (!H) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    npuc_status st = npuc_calib_hessian(ctx, c, weight, K, H, &n, found);
    if (st == NPUC_OK)
        for (uint64_t k = 0; k < K; k++) imp[k] = H[k * K + k] / n;
    free(H);
    return st;
}
