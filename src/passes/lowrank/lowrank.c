/*
 * lowrank.c - factoring one tensor: its matrix view, the rank rules, the
 * factors and the error they cost (see include/npuc/lowrank.h).
 *
 * The best rank-r approximation of W in the Frobenius norm is the truncated
 * SVD (Eckart-Young), and its error is exactly the energy of the dropped
 * singular values: |W - W_r|_F^2 = sum_{i>=r} s_i^2.  The rank rules are
 * therefore all questions about the spectrum, answered from suffix sums
 * taken in double.  The factors split sqrt(s) evenly between the two sides,
 * so both have the same scale (which is what quantizing them later wants).
 *
 * For the randomized solver the kept energy is sum_{i<r} s~_i^2 / |W|_F^2
 * with the sketch's singular values s~.  Because the rank-r truncation of a
 * projection Q Q^T W is itself an orthogonal projection of W, this is exactly
 * the energy the factors keep, so a rank chosen by --energy/--max-error on
 * s~ meets the target (up to float rounding) even though s~ <= s.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/lowrank/lowrank_internal.h"
#include "passes/pass_util.h"

/* auto: the randomized solver when the sketch is at most this fraction of min(m, n)... */
#define NPUC_LR_AUTO_FRACTION 4
/* ...and min(m, n) is at least this (smaller matrices are cheap to factor exactly). */
#define NPUC_LR_AUTO_MIN_DIM 256
/* auto with --energy/--max-error: exact below this min(m, n). */
#define NPUC_LR_AUTO_ADAPTIVE_MIN_DIM 1024

const char *npuc_svd_solver_name(npuc_svd_solver s) {
    switch (s) {
    case NPUC_SVD_AUTO: return "auto";
    case NPUC_SVD_EXACT: return "exact";
    case NPUC_SVD_RANDOMIZED: return "randomized";
    }
    return "?";
}

int npuc_svd_solver_parse(const char *s, npuc_svd_solver *out) {
    if (strcmp(s, "auto") == 0) *out = NPUC_SVD_AUTO;
    else if (strcmp(s, "exact") == 0) *out = NPUC_SVD_EXACT;
    else if (strcmp(s, "randomized") == 0) *out = NPUC_SVD_RANDOMIZED;
    else return -1;
    return 0;
}

npuc_svd_opts npuc_svd_opts_defaults(void) {
    npuc_svd_opts o;
    memset(&o, 0, sizeof o);
    o.solver = NPUC_SVD_AUTO;
    o.oversample = 10;
    o.power_iters = 3;
    o.seed = 0;
    return o;
}

npuc_lowrank_params npuc_lowrank_params_defaults(void) {
    npuc_lowrank_params p;
    memset(&p, 0, sizeof p);
    p.rule = NPUC_RANK_NONE;
    p.round_to = 1;
    p.svd = npuc_svd_opts_defaults();
    return p;
}

static npuc_status check_svd_opts(npuc_ctx *ctx, const npuc_svd_opts *o) {
    if (o->solver != NPUC_SVD_AUTO && o->solver != NPUC_SVD_EXACT && o->solver != NPUC_SVD_RANDOMIZED)
        return npuc_fail(ctx, NPUC_ERR_ARG, "--solver: unknown solver %d", (int)o->solver);
    if (o->oversample < 0 || o->oversample > 1000)
        return npuc_fail(ctx, NPUC_ERR_ARG, "--oversample %d: must be 0..1000", o->oversample);
    if (o->power_iters < 0 || o->power_iters > 100)
        return npuc_fail(ctx, NPUC_ERR_ARG, "--power-iters %d: must be 0..100", o->power_iters);
    return NPUC_OK;
}

npuc_status npuc_lowrank_params_check(npuc_ctx *ctx, const npuc_lowrank_params *p) {
    double v = p->value;
    switch (p->rule) {
    case NPUC_RANK_FIXED:
        if (p->rank < 1) return npuc_fail(ctx, NPUC_ERR_ARG, "--rank %lld: must be at least 1", (long long)p->rank);
        break;
    case NPUC_RANK_RATIO:
        if (!(v > 0 && v <= 1)) return npuc_fail(ctx, NPUC_ERR_ARG, "--rank-ratio %g: must be in (0, 1]", v);
        break;
    case NPUC_RANK_ENERGY:
        if (!(v > 0 && v <= 1)) return npuc_fail(ctx, NPUC_ERR_ARG, "--energy %g: must be in (0, 1]", v);
        break;
    case NPUC_RANK_MAX_ERROR:
        if (!(v > 0 && v < 1)) return npuc_fail(ctx, NPUC_ERR_ARG, "--max-error %g: must be in (0, 1)", v);
        break;
    default:
        return npuc_fail(ctx, NPUC_ERR_ARG,
                         "no rank rule: choose one of --rank, --rank-ratio, --energy, --max-error");
    }
    if (p->round_to < 1 || p->round_to > NPUC_SVD_DIM_MAX)
        return npuc_fail(ctx, NPUC_ERR_ARG, "--round-to %lld: must be at least 1", (long long)p->round_to);
    return check_svd_opts(ctx, &p->svd);
}

/* ------------------------------------------------------------- geometry */

npuc_status npuc_lowrank_geometry(npuc_ctx *ctx, const npuc_tensor_info *t, npuc_lowrank_geom *g) {
    memset(g, 0, sizeof *g);
    if (t->rank < 2)
        return npuc_fail(ctx, NPUC_ERR_ARG, "tensor '%s': a rank-%d tensor cannot be factored (needs a matrix)",
                         t->name, t->rank);
    if (!npuc_dtype_is_float(t->dtype))
        return npuc_fail(ctx, NPUC_ERR_ARG, "tensor '%s': %s is not a float dtype", t->name,
                         npuc_dtype_name(t->dtype));
    if (t->numel == 0) return npuc_fail(ctx, NPUC_ERR_ARG, "tensor '%s': empty tensor", t->name);
    uint64_t outer, c, inner;
    switch (t->layout) {
    case NPUC_LAYOUT_OI:
    case NPUC_LAYOUT_OIHW:
    case NPUC_LAYOUT_IO:
    case NPUC_LAYOUT_HWIO:
        if (npuc_layout_view(t, &outer, &c, &inner) != NPUC_OK)
            return npuc_fail(ctx, NPUC_ERR_ARG, "tensor '%s': layout %s does not fit its rank %d", t->name,
                             npuc_layout_name(t->layout), t->rank);
        break;
    case NPUC_LAYOUT_NONE:
        return npuc_fail(ctx, NPUC_ERR_ARG,
                         "tensor '%s': layout none has no output axis (give one with --layout)", t->name);
    default:
        return npuc_fail(ctx, NPUC_ERR_ARG,
                         "tensor '%s': layout %s (depthwise or transposed kernel) cannot be factored as a "
                         "product of two layers", t->name, npuc_layout_name(t->layout));
    }
    g->out_first = t->layout == NPUC_LAYOUT_OI || t->layout == NPUC_LAYOUT_OIHW;
    /* [outer, C, inner]: out-first layouts have outer = 1, out-last ones inner = 1. */
    g->m = (int64_t)(g->out_first ? c : outer);
    g->n = (int64_t)(g->out_first ? inner : c);
    if (g->m > NPUC_SVD_DIM_MAX || g->n > NPUC_SVD_DIM_MAX)
        return npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "tensor '%s': %llux%llu matrix is too large to factor",
                         t->name, (unsigned long long)g->m, (unsigned long long)g->n);
    return NPUC_OK;
}

npuc_status npuc_lowrank_factor_shapes(npuc_ctx *ctx, const npuc_tensor_info *t, int64_t r,
                                       npuc_tensor_info *a, npuc_tensor_info *b) {
    npuc_lowrank_geom g;
    npuc_status st = npuc_lowrank_geometry(ctx, t, &g);
    if (st != NPUC_OK) return st;
    int64_t mn = g.m < g.n ? g.m : g.n;
    if (r < 1 || r > mn)
        return npuc_fail(ctx, NPUC_ERR_ARG, "tensor '%s': rank %lld is outside 1..%lld", t->name, (long long)r,
                         (long long)mn);
    memset(a, 0, sizeof *a);
    memset(b, 0, sizeof *b);
    a->dtype = b->dtype = t->dtype;
    a->layout = b->layout = t->layout;
    a->rank = b->rank = t->rank;
    a->role = b->role = t->role;
    const int R = t->rank;
    if (g.out_first) {
        /* OI [O, I] / OIHW [O, I, *sp]:  a = [O, r, 1, ...] (1x1 conv), b = [r, I, *sp]. */
        a->shape[0] = t->shape[0];
        a->shape[1] = r;
        for (int i = 2; i < R; i++) a->shape[i] = 1;
        b->shape[0] = r;
        for (int i = 1; i < R; i++) b->shape[i] = t->shape[i];
    } else {
        /* IO [I, O] / HWIO [*sp, I, O]:  b = [*sp, I, r], a = [1, ..., r, O] (1x1 conv). */
        for (int i = 0; i < R - 1; i++) b->shape[i] = t->shape[i];
        b->shape[R - 1] = r;
        for (int i = 0; i < R - 2; i++) a->shape[i] = 1;
        a->shape[R - 2] = r;
        a->shape[R - 1] = t->shape[R - 1];
    }
    if (npuc__shape_sizes(a->dtype, a->rank, a->shape, &a->numel, &a->nbytes) != 0 ||
        npuc__shape_sizes(b->dtype, b->rank, b->shape, &b->numel, &b->nbytes) != 0)
        return npuc_fail(ctx, NPUC_ERR_OVERFLOW, "tensor '%s': factor sizes overflow", t->name);
    return NPUC_OK;
}

/* ------------------------------------------------------------- spectra */

/* Singular values s[0..k) as energies: pre[r] = sum_{i<r} s_i^2 (r = 0..k),
 * suf[r] = sum_{i>=r} s_i^2, both summed in double from their own end so
 * that small tails keep their precision. */
static void spectrum_sums(const float *s, int64_t k, double *pre, double *suf) {
    pre[0] = 0;
    for (int64_t i = 0; i < k; i++) pre[i + 1] = pre[i] + (double)s[i] * (double)s[i];
    suf[k] = 0;
    for (int64_t i = k - 1; i >= 0; i--) suf[i] = suf[i + 1] + (double)s[i] * (double)s[i];
}

/* The smallest r in [1, rmax] that meets the rule, given the kept energy
 * pre[r] and the dropped energy tail(r) = total - pre[r] (or suf[r] when the
 * spectrum is complete); 0 when none does. */
static int64_t rank_for(const npuc_lowrank_params *p, const double *pre, const double *suf, double total,
                        int64_t rmax) {
    if (total <= 0) return 1; /* an all-zero matrix: rank 1 is exact */
    for (int64_t r = 1; r <= rmax; r++) {
        double tail = suf ? suf[r] : total - pre[r];
        if (tail < 0) tail = 0;
        if (p->rule == NPUC_RANK_ENERGY ? pre[r] >= p->value * total || tail <= 0
                                        : sqrt(tail / total) <= p->value)
            return r;
    }
    return 0;
}

static int64_t round_rank(int64_t r, int64_t to, int64_t mn) {
    if (to > 1) r = (r + to - 1) / to * to;
    return r > mn ? mn : r;
}

/* r (m + n) >= m n: factors would hold at least as many values as W.  Dims
 * are below 2^31, so both products fit 64 bits. */
static int no_saving(int64_t r, int64_t m, int64_t n) {
    return (uint64_t)r * (uint64_t)(m + n) >= (uint64_t)m * (uint64_t)n;
}

/* ------------------------------------------------------------- factors */

typedef struct esums {
    double w2, e2, wd, d2, max_abs;
} esums;

/* |W - L R| sums, with L R formed one fixed block of rows at a time
 * (npuc__gemm_block) and the per-block sums added in block order, so the
 * result is the same for any thread count. */
static npuc_status measure(npuc_ctx *ctx, const float *w, const float *L, const float *R, int64_t m, int64_t n,
                           int64_t r, int nthreads, esums *out) {
    int64_t blk = npuc__gemm_block(m), nb = (m + blk - 1) / blk;
    esums *part = calloc((size_t)nb, sizeof *part);
    int failed = 0;
    memset(out, 0, sizeof *out);
    if (!part) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
#pragma omp parallel num_threads(nthreads) if (nthreads > 1 && nb > 1)
    {
        float *tmp = malloc(sizeof(float) * (size_t)blk * (size_t)n);
        if (!tmp) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t b = 0; b < nb; b++) {
            if (!tmp) continue;
            int64_t r0 = b * blk, rows = m - r0 < blk ? m - r0 : blk;
            npuc__gemm_rows(L + r0 * r, R, tmp, rows, n, r, 1);
            esums e = {0, 0, 0, 0, 0};
            const float *x = w + r0 * n;
            for (int64_t i = 0; i < rows * n; i++) {
                double a = x[i], d = tmp[i], df = d - a;
                e.w2 += a * a;
                e.e2 += df * df;
                e.wd += a * d;
                e.d2 += d * d;
                if (fabs(df) > e.max_abs) e.max_abs = fabs(df);
            }
            part[b] = e;
        }
        free(tmp);
    }
    if (failed) {
        free(part);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    for (int64_t b = 0; b < nb; b++) {
        out->w2 += part[b].w2;
        out->e2 += part[b].e2;
        out->wd += part[b].wd;
        out->d2 += part[b].d2;
        if (part[b].max_abs > out->max_abs) out->max_abs = part[b].max_abs;
    }
    free(part);
    return NPUC_OK;
}

/* Rounds x[0..n) to dtype dt and back, in place (no-op for F32). */
static npuc_status round_to_dtype(npuc_ctx *ctx, float *x, uint64_t n, npuc_dtype dt) {
    if (dt == NPUC_DTYPE_F32) return NPUC_OK;
    size_t es = npuc_dtype_size(dt);
    void *tmp = malloc((size_t)n * es + 1);
    if (!tmp) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    npuc_convert(tmp, dt, x, NPUC_DTYPE_F32, (size_t)n);
    npuc_convert(x, NPUC_DTYPE_F32, tmp, dt, (size_t)n);
    free(tmp);
    return NPUC_OK;
}

static uint64_t count_nonfinite(const float *w, uint64_t n) {
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n; i++) bad += !isfinite(w[i]);
    return bad;
}

void npuc_lowrank_result_free(npuc_lowrank_result *res) {
    if (!res) return;
    free(res->a);
    free(res->b);
    memset(res, 0, sizeof *res);
}

/* Which solver runs for a known rank r under `s` (AUTO resolved). */
static npuc_svd_solver pick_solver(npuc_svd_solver s, int64_t r, int p, int64_t mn) {
    if (s != NPUC_SVD_AUTO) return s;
    return mn >= NPUC_LR_AUTO_MIN_DIM && (r + p) * NPUC_LR_AUTO_FRACTION <= mn ? NPUC_SVD_RANDOMIZED
                                                                                 : NPUC_SVD_EXACT;
}

npuc_status npuc_lowrank_tensor(npuc_ctx *ctx, const npuc_tensor_info *t, const float *w,
                                const npuc_lowrank_params *p, npuc_lowrank_result *res) {
    memset(res, 0, sizeof *res);
    npuc_status st;
    if ((st = npuc_lowrank_params_check(ctx, p)) != NPUC_OK) return st;
    if ((st = npuc_lowrank_geometry(ctx, t, &res->g)) != NPUC_OK) return st;
    uint64_t bad = count_nonfinite(w, t->numel);
    if (bad)
        return npuc_fail(ctx, NPUC_ERR_VALUE,
                         "tensor '%s': %llu NaN/Inf value%s; low-rank factorisation needs finite weights", t->name,
                         (unsigned long long)bad, bad == 1 ? "" : "s");
    const int64_t m = res->g.m, n = res->g.n, mn = m < n ? m : n;
    const int nt = npuc__threads(ctx), ov = p->svd.oversample;
    char what[256];
    snprintf(what, sizeof what, "tensor '%s'", t->name);
    res->energy = NAN;
    res->rel_fro = NAN;
    res->rel_fro_measured = NAN;

    npuc__svd svd;
    memset(&svd, 0, sizeof svd);
    double *pre = NULL, *suf = NULL;
    float *L = NULL, *R = NULL;
    int64_t r = 0;
    double total = 0; /* the energy the kept fraction is relative to */
    int tail_exact = 0;
    /* The largest rank that still saves: r (m + n) < m n. */
    const int64_t rmax_save = (int64_t)(((uint64_t)m * (uint64_t)n - 1) / (uint64_t)(m + n));
    for (uint64_t i = 0; i < t->numel; i++) total += (double)w[i] * (double)w[i];

    if (p->rule == NPUC_RANK_FIXED || p->rule == NPUC_RANK_RATIO) {
        if (p->rule == NPUC_RANK_FIXED && p->rank > mn)
            return npuc_fail(ctx, NPUC_ERR_ARG,
                             "tensor '%s': --rank %lld exceeds min(m, n) = %lld of its %lldx%lld matrix", t->name,
                             (long long)p->rank, (long long)mn, (long long)m, (long long)n);
        r = p->rule == NPUC_RANK_FIXED ? p->rank : (int64_t)ceil(p->value * (double)mn - 1e-9);
        if (r < 1) r = 1;
        r = round_rank(r, p->round_to, mn);
        res->rank = r;
        if (no_saving(r, m, n)) return NPUC_OK; /* nothing to compute */
        res->solver = pick_solver(p->svd.solver, r, ov, mn);
        if (res->solver == NPUC_SVD_EXACT) {
            st = npuc__svd_exact(ctx, what, w, m, n, NPUC__SVD_GESDD, &svd);
        } else {
            int64_t l = r + ov < mn ? r + ov : mn;
            st = npuc__svd_randomized(ctx, what, w, m, n, l, p->svd.power_iters, p->svd.seed, nt, &svd);
        }
        if (st != NPUC_OK) goto fail;
    } else {
        /* --energy / --max-error: the rank depends on the spectrum. */
        npuc_svd_solver s = p->svd.solver;
        if (s == NPUC_SVD_AUTO) s = mn >= NPUC_LR_AUTO_ADAPTIVE_MIN_DIM ? NPUC_SVD_RANDOMIZED : NPUC_SVD_EXACT;
        if (s == NPUC_SVD_RANDOMIZED) {
            /* Grow the sketch until its leading k values reach the target
             * (the last `ov` of a sketch are less accurate, so they do not
             * count), doubling k; auto gives up on it beyond min(m, n)/4. */
            int64_t k = mn / 16 > 32 ? mn / 16 : 32;
            if (k > mn) k = mn;
            for (;;) {
                int64_t l = k + ov < mn ? k + ov : mn;
                if (p->svd.solver == NPUC_SVD_AUTO && l * NPUC_LR_AUTO_FRACTION > mn) { s = NPUC_SVD_EXACT; break; }
                npuc__svd_free(&svd);
                st = npuc__svd_randomized(ctx, what, w, m, n, l, p->svd.power_iters, p->svd.seed, nt, &svd);
                if (st != NPUC_OK) goto fail;
                free(pre);
                pre = malloc(sizeof(double) * (size_t)(l + 1));
                if (!pre) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto fail; }
                pre[0] = 0;
                for (int64_t i = 0; i < l; i++) pre[i + 1] = pre[i] + (double)svd.s[i] * svd.s[i];
                int64_t window = l == mn ? l : (k < l ? k : l);
                r = rank_for(p, pre, NULL, total, window);
                if (r) break;
                if (l == mn) { r = mn; break; }
                if (window >= rmax_save) {
                    /* Every rank that would save was tried: the target needs
                     * more, so the layer stays dense; stop growing the sketch. */
                    r = window + 1;
                    res->rank_is_bound = 1;
                    break;
                }
                k *= 2;
            }
        }
        if (s == NPUC_SVD_EXACT) {
            npuc__svd_free(&svd);
            if ((st = npuc__svd_exact(ctx, what, w, m, n, NPUC__SVD_GESDD, &svd)) != NPUC_OK) goto fail;
            free(pre);
            pre = malloc(sizeof(double) * (size_t)(mn + 1));
            suf = malloc(sizeof(double) * (size_t)(mn + 1));
            if (!pre || !suf) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto fail; }
            spectrum_sums(svd.s, mn, pre, suf);
            r = rank_for(p, pre, suf, pre[mn], mn);
            if (!r) r = mn;
        }
        res->solver = s;
        r = round_rank(r, p->round_to, mn);
        res->rank = r;
        if (res->rank_is_bound) goto done;
        if (r > svd.k) {
            /* --round-to asked for more vectors than the sketch holds. */
            int64_t l = r + ov < mn ? r + ov : mn;
            npuc__svd_free(&svd);
            st = npuc__svd_randomized(ctx, what, w, m, n, l, p->svd.power_iters, p->svd.seed, nt, &svd);
            if (st != NPUC_OK) goto fail;
        }
    }

    /* Energies of the chosen rank. */
    {
        double kept = 0, tail;
        for (int64_t i = 0; i < r; i++) kept += (double)svd.s[i] * svd.s[i];
        if (svd.randomized) {
            tail = total - kept;
        } else {
            tail = 0;
            for (int64_t i = mn - 1; i >= r; i--) tail += (double)svd.s[i] * svd.s[i];
            total = kept + tail;
            tail_exact = 1;
        }
        if (tail < 0) tail = 0;
        res->energy = total > 0 ? (kept / total > 1 ? 1 : kept / total) : 1;
        res->rel_fro = total > 0 ? sqrt(tail / total) : 0;
        if (no_saving(r, m, n)) goto done;
        if ((st = npuc__svd_vt(ctx, &svd, r, nt)) != NPUC_OK) goto fail;
        /* L = U_r sqrt(S_r) (m x r), R = sqrt(S_r) V_r^T (r x n). */
        L = malloc(sizeof(float) * (size_t)m * (size_t)r);
        R = malloc(sizeof(float) * (size_t)r * (size_t)n);
        if (!L || !R) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory for the factors", what); goto fail; }
        float *sq = malloc(sizeof(float) * (size_t)r);
        if (!sq) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory for the factors", what); goto fail; }
        for (int64_t j = 0; j < r; j++) sq[j] = sqrtf(svd.s[j]);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < r; j++) L[i * r + j] = svd.u[i * svd.ldu + j] * sq[j];
        for (int64_t j = 0; j < r; j++)
            for (int64_t c = 0; c < n; c++) R[j * n + c] = svd.vt[j * n + c] * sq[j];
        free(sq);
        if ((st = round_to_dtype(ctx, L, (uint64_t)m * (uint64_t)r, t->dtype)) != NPUC_OK ||
            (st = round_to_dtype(ctx, R, (uint64_t)r * (uint64_t)n, t->dtype)) != NPUC_OK)
            goto fail;
        esums e;
        if ((st = measure(ctx, w, L, R, m, n, r, nt, &e)) != NPUC_OK) goto fail;
        res->rel_fro_measured = e.w2 > 0 ? sqrt(e.e2 / e.w2) : e.e2 > 0 ? INFINITY : 0;
        if (tail_exact && t->dtype == NPUC_DTYPE_F32) {
            /* Eckart-Young: W' = U_r U_r^T W, so <W, W'> = |W'|^2 = kept. */
            npuc_error_from_sums(&res->err, t->numel, total, tail, kept, kept, e.max_abs, 0, 0);
        } else {
            npuc_error_from_sums(&res->err, t->numel, e.w2, e.e2, e.wd, e.d2, e.max_abs, 0, 0);
            res->rel_fro = res->rel_fro_measured;
        }
        if ((st = npuc_lowrank_factor_shapes(ctx, t, r, &res->a_info, &res->b_info)) != NPUC_OK) goto fail;
        res->factored = 1;
        res->a = res->g.out_first ? L : R;
        res->b = res->g.out_first ? R : L;
        L = R = NULL;
    }
done:
    npuc__svd_free(&svd);
    free(pre);
    free(suf);
    return NPUC_OK;
fail:
    npuc__svd_free(&svd);
    free(pre);
    free(suf);
    free(L);
    free(R);
    npuc_lowrank_result_free(res);
    return st;
}

/* ------------------------------------------------------------- plain SVDs */

static npuc_status check_matrix(npuc_ctx *ctx, const float *w, int64_t m, int64_t n) {
    if (m < 1 || n < 1 || m > NPUC_SVD_DIM_MAX || n > NPUC_SVD_DIM_MAX)
        return npuc_fail(ctx, NPUC_ERR_ARG, "SVD: matrix %lldx%lld is outside 1..2^31-1", (long long)m,
                         (long long)n);
    uint64_t bad = count_nonfinite(w, (uint64_t)m * (uint64_t)n);
    if (bad) return npuc_fail(ctx, NPUC_ERR_VALUE, "SVD: %llu NaN/Inf values in the matrix", (unsigned long long)bad);
    return NPUC_OK;
}

npuc_status npuc_svd(npuc_ctx *ctx, const float *w, int64_t m, int64_t n, int64_t k,
                     const npuc_svd_opts *o, float *s, float *u, float *vt) {
    npuc_svd_opts d = npuc_svd_opts_defaults();
    if (!o) o = &d;
    npuc_status st;
    if ((st = check_svd_opts(ctx, o)) != NPUC_OK || (st = check_matrix(ctx, w, m, n)) != NPUC_OK) return st;
    int64_t mn = m < n ? m : n;
    if (k < 1 || k > mn)
        return npuc_fail(ctx, NPUC_ERR_ARG, "SVD: k = %lld is outside 1..%lld", (long long)k, (long long)mn);
    npuc__svd svd;
    int nt = npuc__threads(ctx);
    if (pick_solver(o->solver, k, o->oversample, mn) == NPUC_SVD_EXACT)
        st = npuc__svd_exact(ctx, "SVD", w, m, n, NPUC__SVD_GESDD, &svd);
    else
        st = npuc__svd_randomized(ctx, "SVD", w, m, n, k + o->oversample < mn ? k + o->oversample : mn,
                                  o->power_iters, o->seed, nt, &svd);
    if (st == NPUC_OK) st = npuc__svd_vt(ctx, &svd, k, nt);
    if (st != NPUC_OK) { npuc__svd_free(&svd); return st; }
    memcpy(s, svd.s, sizeof(float) * (size_t)k);
    for (int64_t i = 0; i < m; i++) memcpy(u + i * k, svd.u + i * svd.ldu, sizeof(float) * (size_t)k);
    memcpy(vt, svd.vt, sizeof(float) * (size_t)k * (size_t)n);
    npuc__svd_free(&svd);
    return NPUC_OK;
}

npuc_status npuc_svd_values(npuc_ctx *ctx, const float *w, int64_t m, int64_t n, float *s) {
    npuc_status st = check_matrix(ctx, w, m, n);
    if (st != NPUC_OK) return st;
    npuc__svd svd;
    if ((st = npuc__svd_exact(ctx, "SVD", w, m, n, NPUC__SVD_VALUES, &svd)) != NPUC_OK) return st;
    memcpy(s, svd.s, sizeof(float) * (size_t)svd.k);
    npuc__svd_free(&svd);
    return NPUC_OK;
}
