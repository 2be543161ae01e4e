/*
 * sparsify_nm.c - N:M sparsity of one tensor: where the groups run, the
 * sparsification itself, the compressed form and the cost estimate.
 *
 * Groups run along the input-channel axis at each spatial tap, as sparse
 * tensor cores read them: NVIDIA's 2:4 applies to the K dimension of a GEMM,
 * which for convolutions in NHWC/KRSC order is (r, s, c) with the input
 * channel c fastest, and apex's ASP builds its conv masks the same way
 * (weights permuted to [R*S*K, C], groups of 4 along C).  docs/sparsity.md
 * has the layout-by-layout table and the reasons.
 *
 * The work is cut the way memory runs.  When the input channels of a group
 * are adjacent (Linear [out, in], 1x1 convolutions) groups are contiguous
 * runs of m floats.  Otherwise a group's m values sit one input-channel
 * stride apart, and the positions that share a group index (the spatial taps
 * of one filter in OIHW, the output channels in HWIO / [in, out]) are
 * adjacent: those are handled m rows at a time, vectorised along the row.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/prune/prune_internal.h"

/* One decimal number of at most two digits (N and M are at most 16): no
 * sign, no spaces, no long that could be cut to an int on the way. */
static int nm_number(const char **p) {
    const char *s = *p;
    int v = 0, k = 0;
    while (s[k] >= '0' && s[k] <= '9') {
        if (++k > 2) return -1;
        v = 10 * v + (s[k - 1] - '0');
    }
    if (k == 0) return -1;
    *p = s + k;
    return v;
}

int npuc_nm_parse(const char *s, int *n, int *m) {
    if (!s) return -1;
    int a = nm_number(&s);
    if (a < 0 || *s++ != ':') return -1;
    int b = nm_number(&s);
    if (b < 0 || *s) return -1;
    if (!npuc__nm_ok(a, b)) return -1;
    *n = a;
    *m = b;
    return 0;
}

static int bits_for(int m) {
    int b = 0;
    while ((1 << b) < m) b++;
    return b;
}

int npuc__nm_geom(const npuc_tensor_info *t, int n, int m, npuc_nm_geom *g) {
    memset(g, 0, sizeof *g);
    if (!npuc__nm_ok(n, m)) return -1;
    const int r = t->rank;
    const int64_t *sh = t->shape;
    uint64_t taps = 1;
    g->n = n;
    g->m = m;
    switch (t->layout) {
    case NPUC_LAYOUT_OI:
        if (r != 2) return -1;
        g->channels = (uint64_t)sh[0];
        g->in = (uint64_t)sh[1];
        g->cstride = g->in;
        g->istride = 1;
        g->in_axis = 1;
        break;
    case NPUC_LAYOUT_IO:
        if (r != 2) return -1;
        g->channels = (uint64_t)sh[1];
        g->in = (uint64_t)sh[0];
        g->cstride = 1;
        g->istride = g->channels;
        g->in_axis = 0;
        break;
    case NPUC_LAYOUT_OIHW:
        if (r < 3) return -1;
        for (int d = 2; d < r; d++) taps *= (uint64_t)sh[d];
        g->channels = (uint64_t)sh[0];
        g->in = (uint64_t)sh[1];
        g->cstride = g->in * taps;
        g->sstride = 1;
        g->istride = taps;
        g->in_axis = 1;
        break;
    case NPUC_LAYOUT_IOHW:
        if (r < 3) return -1;
        for (int d = 2; d < r; d++) taps *= (uint64_t)sh[d];
        g->channels = (uint64_t)sh[1];
        g->in = (uint64_t)sh[0];
        g->cstride = taps;
        g->sstride = 1;
        g->istride = g->channels * taps;
        g->in_axis = 0;
        break;
    case NPUC_LAYOUT_HWIO:
        if (r < 3) return -1;
        for (int d = 0; d < r - 2; d++) taps *= (uint64_t)sh[d];
        g->channels = (uint64_t)sh[r - 1];
        g->in = (uint64_t)sh[r - 2];
        g->cstride = 1;
        g->sstride = g->in * g->channels;
        g->istride = g->channels;
        g->in_axis = r - 2;
        break;
    case NPUC_LAYOUT_HWIM:
        /* Depthwise: each output channel reads one input channel. */
        if (r < 3) return -1;
        g->in = 1;
        g->in_axis = r - 2;
        return -2;
    default:
        return -1;
    }
    g->taps = taps;
    if (g->in < (uint64_t)m) return -2;
    g->groups_per_tap = (g->in + (uint64_t)m - 1) / (uint64_t)m;
    g->groups = g->channels * g->taps * g->groups_per_tap;
    g->kept = g->groups * (uint64_t)n;
    g->meta_bits = bits_for(m);
    g->meta_bytes = (g->kept * (uint64_t)g->meta_bits + 7) / 8;
    return 0;
}

npuc_status npuc_nm_geometry(npuc_ctx *ctx, const npuc_tensor_info *t, int n, int m, npuc_nm_geom *g) {
    const char *name = t->name ? t->name : "?";
    int rc = npuc__nm_geom(t, n, m, g);
    if (rc == -1 && !npuc__nm_ok(n, m))
        return npuc_fail(ctx, NPUC_ERR_ARG, "pattern %d:%d: need " NPUC__NM_BOUNDS, n, m);
    if (rc == -1)
        return npuc_fail(ctx, NPUC_ERR_ARG, "tensor '%s': layout %s has no input-channel axis for N:M", name,
                         npuc_layout_name(t->layout));
    if (rc == -2)
        return npuc_fail(ctx, NPUC_ERR_ARG,
                         "tensor '%s': input-channel axis %d has %llu value%s, shorter than M=%d%s", name,
                         g->in_axis, (unsigned long long)g->in, g->in == 1 ? "" : "s", m,
                         t->layout == NPUC_LAYOUT_HWIM || g->in == 1 ? " (depthwise)" : "");
    return NPUC_OK;
}

/* ------------------------------------------------------------ sparsify */

/* How the work is cut: contiguous groups, or blocks of rows. */
typedef struct nm_plan {
    int contig;
    /* contiguous: rows of `in` values at stride `in` (rows = C * S) */
    uint64_t rows;
    /* blocked: P outer blocks at pstride, each gpr groups of up to m rows at
     * istride, rows of L adjacent positions */
    uint64_t P, pstride, L;
    uint64_t items, per_chunk; /* work items and items per chunk */
} nm_plan;

static void nm_plan_of(const npuc_nm_geom *g, nm_plan *p) {
    memset(p, 0, sizeof *p);
    const uint64_t m = (uint64_t)g->m;
    if (g->istride == 1) {
        p->contig = 1;
        p->rows = g->channels * g->taps;
        if (g->in % m == 0) { /* one run of groups */
            p->items = p->rows * g->groups_per_tap;
            p->per_chunk = NPUC_PRUNE_CHUNK / m;
        } else {
            p->items = p->rows;
            p->per_chunk = NPUC_PRUNE_CHUNK / g->in;
        }
    } else {
        if (g->sstride == 1 && g->cstride == g->taps) { /* IOHW: (c, s) adjacent */
            p->P = 1;
            p->L = g->channels * g->taps;
        } else if (g->sstride == 1) { /* OIHW: taps adjacent, one filter at a time */
            p->P = g->channels;
            p->pstride = g->cstride;
            p->L = g->taps;
        } else { /* IO / HWIO: output channels adjacent, one tap at a time */
            p->P = g->taps;
            p->pstride = g->sstride;
            p->L = g->channels;
        }
        p->items = p->P * g->groups_per_tap;
        p->per_chunk = NPUC_PRUNE_CHUNK / (m * p->L);
    }
    if (p->per_chunk == 0) p->per_chunk = 1;
}

static void nm_run(const npuc_nm_kernel_table *K, const npuc_nm_geom *g, const nm_plan *p, const float *x,
                   float *out, uint64_t a, uint64_t b, npuc_prune_sums *s) {
    const unsigned n = (unsigned)g->n, m = (unsigned)g->m;
    if (p->contig && g->in % m == 0) {
        K->nm_contig(x + a * m, out + a * m, (size_t)(b - a), n, m, s);
        return;
    }
    if (p->contig) {
        const uint64_t full = g->in / m, r = g->in % m;
        for (uint64_t row = a; row < b; row++) {
            const uint64_t base = row * g->in;
            K->nm_contig(x + base, out + base, (size_t)full, n, m, s);
            npuc__nm_group_ref(x + base + full * m, out + base + full * m, 1, (unsigned)r, n, s);
        }
        return;
    }
    for (uint64_t it = a; it < b; it++) {
        const uint64_t pb = it / g->groups_per_tap, gi = it % g->groups_per_tap;
        const uint64_t i0 = gi * m;
        const unsigned rows = (unsigned)(g->in - i0 < m ? g->in - i0 : m);
        const uint64_t base = pb * p->pstride + i0 * g->istride;
        K->nm_rows(x + base, out + base, (size_t)g->istride, rows, (size_t)p->L, n, s);
    }
}

npuc_status npuc__nm_apply(npuc_ctx *ctx, const npuc_nm_geom *g, const float *x, float *out,
                           npuc_prune_sums *s, uint64_t *nbad) {
    const npuc_nm_kernel_table *K = npuc_nm_kernels();
    nm_plan p;
    nm_plan_of(g, &p);
    const uint64_t nc = (p.items + p.per_chunk - 1) / p.per_chunk;
    npuc_prune_sums *cs = calloc(nc ? nc : 1, sizeof *cs);
    if (!cs) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    const int nt = npuc__threads(ctx);
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (uint64_t c = 0; c < nc; c++) {
        const uint64_t a = c * p.per_chunk, b = a + p.per_chunk < p.items ? a + p.per_chunk : p.items;
        nm_run(K, g, &p, x, out, a, b, &cs[c]);
    }
    for (uint64_t c = 0; c < nc; c++) {
        if (!isfinite(cs[c].sum_w2)) { /* float-lane sums overflowed, or NaN/Inf: redo in double */
            const uint64_t a = c * p.per_chunk, b = a + p.per_chunk < p.items ? a + p.per_chunk : p.items;
            memset(&cs[c], 0, sizeof cs[c]);
            nm_run(npuc_nm_kernels_ref(), g, &p, x, out, a, b, &cs[c]);
        }
        npuc_prune_sums_add(s, &cs[c]);
    }
    free(cs);
    *nbad = 0;
    /* Finite floats cannot make sum_w2 overflow a double, so a non-finite
     * sum means NaN or Inf in the data: count them for the message. */
    if (!isfinite(s->sum_w2)) {
        const uint64_t numel = g->channels * g->taps * g->in;
        for (uint64_t i = 0; i < numel; i++) *nbad += npuc_mag(x[i]) >= NPUC_MAG_BAD;
        if (!*nbad) *nbad = 1;
    }
    return NPUC_OK;
}

npuc_status npuc_nm_sparsify(npuc_ctx *ctx, const npuc_tensor_info *t, const npuc_nm_geom *g,
                             const float *w, float *out, npuc_prune_stats *st) {
    npuc_prune_sums s;
    memset(&s, 0, sizeof s);
    if (st) memset(st, 0, sizeof *st);
    if (g->channels * g->taps * g->in != t->numel)
        return npuc_fail(ctx, NPUC_ERR_ARG, "tensor '%s': N:M geometry does not match its shape",
                         t->name ? t->name : "?");
    uint64_t nbad;
    npuc_status rc = npuc__nm_apply(ctx, g, w, out, &s, &nbad);
    if (rc != NPUC_OK) return rc;
    if (nbad) return npuc__prune_bad_values(ctx, t->name, nbad);
    if (st) {
        const uint64_t m = (uint64_t)g->m, n = (uint64_t)g->n, full = g->in / m, r = g->in % m;
        st->n = t->numel;
        st->k = g->channels * g->taps * (full * (m - n) + (r > n ? r - n : 0));
        st->zeros = s.zeros;
        st->threshold = (float)s.max_e;
        npuc__prune_error(&s, t->numel, &st->err);
    }
    return NPUC_OK;
}

/* ------------------------------------------------------------ compressed form */

static void put_bits(uint8_t *meta, uint64_t slot, int bits, unsigned v) {
    const uint64_t bit = slot * (uint64_t)bits;
    for (int b = 0; b < bits; b++)
        if (v >> b & 1u) meta[(bit + (uint64_t)b) >> 3] |= (uint8_t)(1u << ((bit + (uint64_t)b) & 7));
}

static unsigned get_bits(const uint8_t *meta, uint64_t slot, int bits) {
    const uint64_t bit = slot * (uint64_t)bits;
    unsigned v = 0;
    for (int b = 0; b < bits; b++)
        v |= (unsigned)(meta[(bit + (uint64_t)b) >> 3] >> ((bit + (uint64_t)b) & 7) & 1u) << b;
    return v;
}

void npuc_nm_pack(const npuc_nm_geom *g, const float *sparse, const void *src, size_t esize, void *values,
                  uint8_t *meta) {
    const uint64_t m = (uint64_t)g->m, n = (uint64_t)g->n;
    const uint8_t *sb = src;
    uint8_t *vb = values;
    uint64_t slot = 0;
    memset(meta, 0, (size_t)g->meta_bytes);
    for (uint64_t c = 0; c < g->channels; c++)
        for (uint64_t s = 0; s < g->taps; s++)
            for (uint64_t gi = 0; gi < g->groups_per_tap; gi++) {
                const uint64_t i0 = gi * m, r = g->in - i0 < m ? g->in - i0 : m;
                const uint64_t base = c * g->cstride + s * g->sstride + i0 * g->istride;
                const uint64_t drop = r > n ? r - n : 0;
                uint32_t mag[16];
                for (uint64_t j = 0; j < r; j++) mag[j] = npuc_mag(sparse[base + j * g->istride]);
                uint64_t used = 0;
                for (uint64_t j = 0; j < r; j++) {
                    uint64_t rank = 0;
                    for (uint64_t e = 0; e < r; e++) rank += mag[e] < mag[j] || (e < j && mag[e] == mag[j]);
                    if (rank < drop) continue;
                    memcpy(vb + (slot + used) * esize, sb + (base + j * g->istride) * esize, esize);
                    put_bits(meta, slot + used, g->meta_bits, (unsigned)j);
                    used++;
                }
                for (uint64_t j = used; j < n; j++) { /* padding of a short group */
                    memset(vb + (slot + j) * esize, 0, esize);
                    put_bits(meta, slot + j, g->meta_bits, (unsigned)j);
                }
                slot += n;
            }
}

npuc_status npuc_nm_unpack(npuc_ctx *ctx, const char *name, const npuc_nm_geom *g, const void *values,
                           size_t esize, const uint8_t *meta, void *dense, uint8_t *kept) {
    const uint64_t m = (uint64_t)g->m, n = (uint64_t)g->n;
    const uint64_t numel = g->channels * g->taps * g->in;
    const uint8_t *vb = values;
    uint8_t *db = dense;
    memset(dense, 0, (size_t)(numel * esize));
    if (kept) memset(kept, 0, (size_t)numel);
    uint64_t slot = 0, grp = 0;
    for (uint64_t c = 0; c < g->channels; c++)
        for (uint64_t s = 0; s < g->taps; s++)
            for (uint64_t gi = 0; gi < g->groups_per_tap; gi++, grp++) {
                const uint64_t i0 = gi * m, r = g->in - i0 < m ? g->in - i0 : m;
                const uint64_t base = c * g->cstride + s * g->sstride + i0 * g->istride;
                const uint64_t want = r < n ? r : n;
                uint64_t inside = 0;
                int prev = -1;
                for (uint64_t j = 0; j < n; j++, slot++) {
                    const unsigned pos = get_bits(meta, slot, g->meta_bits);
                    if ((int)pos <= prev || pos >= m)
                        return npuc_fail(ctx, NPUC_ERR_FORMAT,
                                         "tensor '%s': N:M group %llu: positions are not increasing below M=%d",
                                         name, (unsigned long long)grp, g->m);
                    prev = (int)pos;
                    if (pos >= r) continue; /* padding of a short group */
                    inside++;
                    const uint64_t at = base + pos * g->istride;
                    memcpy(db + at * esize, vb + slot * esize, esize);
                    if (kept) kept[at] = 1;
                }
                if (inside != want)
                    return npuc_fail(ctx, NPUC_ERR_FORMAT,
                                     "tensor '%s': N:M group %llu keeps %llu of its %llu values, expected %llu", name,
                                     (unsigned long long)grp, (unsigned long long)inside, (unsigned long long)r,
                                     (unsigned long long)want);
            }
    return NPUC_OK;
}

/* ------------------------------------------------------------ cost model */

npuc_cost_model npuc_cost_model_defaults(void) {
    npuc_cost_model c;
    c.peak_tops = 200.0;
    c.bandwidth_gbs = 1000.0;
    c.tokens = 1.0;
    return c;
}

void npuc_nm_cost_of(const npuc_nm_geom *g, double value_bytes, double act_bytes, const npuc_cost_model *cm,
                     npuc_nm_cost *o) {
    const double params = (double)g->channels * (double)g->taps * (double)g->in;
    const double density = (double)g->n / (double)g->m;
    const double peak = cm->peak_tops * 1e12, bw = cm->bandwidth_gbs * 1e9;
    const double act = cm->tokens * ((double)g->in + (double)g->channels) * act_bytes;
    memset(o, 0, sizeof *o);
    o->flops = 2.0 * params * cm->tokens;
    o->bytes_meta = (double)g->meta_bytes;
    o->bytes_dense = params * value_bytes + act;
    o->bytes_sparse = (double)g->kept * value_bytes + o->bytes_meta + act;
    o->ai = o->bytes_dense > 0 ? o->flops / o->bytes_dense : 0;
    o->ridge = bw > 0 ? peak / bw : 0;
    const double cd = peak > 0 ? o->flops / peak : 0, cs = peak > 0 ? density * o->flops / peak : 0;
    const double md = bw > 0 ? o->bytes_dense / bw : 0, ms = bw > 0 ? o->bytes_sparse / bw : 0;
    o->t_dense = cd > md ? cd : md;
    o->t_sparse = cs > ms ? cs : ms;
    o->speedup = o->t_sparse > 0 ? o->t_dense / o->t_sparse : 1.0;
}
