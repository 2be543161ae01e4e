/*
 * quantize.c - quantizing one tensor: grouping, range estimation, scales and
 * zero points, codes and error sums.  This is the OpenMP pass driver; the
 * per-element work is in the kernels (src/kernels/npuc_kernels.h), ranges
 * other than minmax come from calib/.
 *
 * Every layout views a tensor as [outer, C, inner].  Channel c holds the
 * values x[(o*C + c)*inner + k]; in "sequence order" j = o*inner + k, and a
 * group of size G is G consecutive j.  Two access patterns follow:
 *
 *   runs     inner != 1 or C <= 1 (OIHW, IOHW, per tensor; empty tensors
 *            too): a channel is `outer` contiguous runs of `inner` values, so
 *            each run (split at group boundaries) is one quant_run call with
 *            scalar parameters;
 *   columns  inner == 1 and C > 1 ([in,out], HWIO, HWIM): channels are the
 *            columns of a row-major [outer, C] matrix, so the rows of a group
 *            are quant_rows calls with that group's per-column parameters.
 *
 * Work is cut into items whose boundaries depend only on the tensor and the
 * parameters (a channel's chunk of at most CHUNK values, or a block of rows),
 * never on the thread count; each item has its own error sums, added in item
 * order.  Codes are elementwise, so they are identical for any thread count
 * and for the reference and SIMD kernels alike.
 *
 * Contiguous groups (runs with outer == 1: OIHW and [out, in] per channel,
 * groups inside them, small per-tensor) take one pass over memory instead of
 * two or three: a worker finds a group's min/max (and its range by the
 * method), derives its scale and quantizes it while the group is still in
 * its cache.  The kernel calls and the items their sums go to are the same
 * as in the two-pass order, so the results are bit for bit those of the two
 * passes.  While a worker quantizes one run from its cache, the kernel
 * prefetches the run that follows it in memory (quant_run_hinted), which is
 * the one the same worker most likely takes next: the memory traffic of the
 * next minmax overlaps the arithmetic of this run instead of following it.
 * Small groups (G <= 256 dividing CHUNK) with minmax ranges go a batch of
 * 4096 values at a time through three kernel calls, minmax_groups,
 * range_params and quant_groups, the last prefetching the next batch
 * (minmax_span); codes, scales and zero points are those of the per-group
 * calls bit for bit, the sums within the kernels' tolerance of them and the
 * same for any thread count.
 * Other layouts (a channel strided through the tensor, or a group
 * too large for the cache) need every group's range before the first code:
 * they keep the two passes.
 *
 * F16 and BF16 tensors (npuc__quantize with half set) are widened to F32 by the
 * kernels of kernels/cvt_kernels.h: in the one-pass order a worker widens
 * each unit of at most CHUNK values into its own buffer just before
 * quantizing it, so the F32 copy is never written to memory; the other
 * orders get the whole tensor widened first.  The kernels' output is the
 * scalar conversion's bit for bit, so every result is that of quantizing
 * the converted tensor.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codecs/codec.h"
#include "kernels/cvt_kernels.h"
#include "kernels/npuc_kernels.h"
#include "kernels/qk_grid.h"
#include "npuc_internal.h"
#include "passes/pass_desc.h"
#include "passes/pass_util.h"

#define CHUNK 65536u
/* Largest group (in values) quantized in one pass with its range search:
 * 256 KiB of floats, which stays in a core's L2 between the two. */
#define FUSE_MAX CHUNK
/* The one-pass order reads ahead at least this many values (16 KiB). */
#define AHEAD_MIN 4096u

npuc_quant_params npuc_quant_params_defaults(void) {
    npuc_quant_params p;
    memset(&p, 0, sizeof p);
    p.bits = 8;
    p.symmetric = 1;
    p.gran = NPUC_GRAN_CHANNEL;
    p.axis = -1;
    p.range = npuc_range_opts_defaults();
    p.scale_dtype = NPUC_DTYPE_F32;
    return p;
}

void npuc_quant_scheme_name(const npuc_quant_params *p, char *buf, size_t n) {
    char g[24];
    if (p->gran == NPUC_GRAN_TENSOR) snprintf(g, sizeof g, "t");
    else if (p->gran == NPUC_GRAN_GROUP) snprintf(g, sizeof g, "g%u", p->group_size);
    else snprintf(g, sizeof g, "ch");
    snprintf(buf, n, "%s%d/%s", p->symmetric ? "int" : "uint", p->bits, g);
}

static npuc_status check_params(npuc_ctx *ctx, const npuc_quant_params *p) {
    npuc_status bst = npuc__pass_check_value(ctx, "quantize", "bits", p->bits, NULL);
    if (bst != NPUC_OK) return bst;
    if (p->gran == NPUC_GRAN_GROUP && p->group_size < 2)
        return npuc_fail(ctx, NPUC_ERR_ARG, "group size %u is too small (use >= 2, or --per-channel)",
                         p->group_size);
    if ((unsigned)p->gran > NPUC_GRAN_GROUP)
        return npuc_fail(ctx, NPUC_ERR_ARG, "unknown granularity %d", (int)p->gran);
    if ((unsigned)p->grid > NPUC_GRID_FULL)
        return npuc_fail(ctx, NPUC_ERR_ARG, "unknown grid %d", (int)p->grid);
    if (p->grid == NPUC_GRID_FULL && !p->symmetric)
        return npuc_fail(ctx, NPUC_ERR_ARG, "--grid full is for symmetric schemes (asymmetric ones use all 2^b "
                         "codes already): drop --asymmetric or --grid full");
    return NPUC_OK;
}

npuc_status npuc_quant_shape_of(npuc_ctx *ctx, const npuc_tensor_info *t, const npuc_quant_params *p,
                                npuc_quant_shape *qs) {
    npuc_status st = check_params(ctx, p);
    if (st != NPUC_OK) return st;
    memset(qs, 0, sizeof *qs);
    if (p->gran == NPUC_GRAN_TENSOR) {
        qs->outer = 1;
        qs->channels = 1;
        qs->inner = t->numel;
        qs->axis = -1;
    } else if (p->axis >= 0) {
        if (p->axis >= t->rank)
            return npuc_fail(ctx, NPUC_ERR_ARG, "tensor '%s': axis %d is outside its rank %d", t->name,
                             p->axis, t->rank);
        uint64_t o = 1, in = 1;
        for (int i = 0; i < t->rank; i++) {
            if (i < p->axis) o *= (uint64_t)t->shape[i];
            else if (i > p->axis) in *= (uint64_t)t->shape[i];
        }
        qs->outer = o;
        qs->channels = (uint64_t)t->shape[p->axis];
        qs->inner = in;
        qs->axis = p->axis;
    } else {
        if (t->layout == NPUC_LAYOUT_NONE)
            return npuc_fail(ctx, NPUC_ERR_ARG,
                             "tensor '%s': no output-channel axis (layout none); use --per-tensor, "
                             "--axis or --layout",
                             t->name);
        if (npuc_layout_view(t, &qs->outer, &qs->channels, &qs->inner) != NPUC_OK)
            return npuc_fail(ctx, NPUC_ERR_ARG, "tensor '%s': layout %s does not fit rank %d", t->name,
                             npuc_layout_name(t->layout), t->rank);
        qs->axis = npuc_layout_out_axis(t->layout, t->rank);
    }
    qs->per_channel = qs->outer * qs->inner;
    qs->groups_per_channel = 1;
    if (p->gran == NPUC_GRAN_GROUP && qs->per_channel > 0)
        qs->groups_per_channel = (qs->per_channel + p->group_size - 1) / p->group_size;
    qs->nscales = qs->channels * qs->groups_per_channel;
    return NPUC_OK;
}

/* Scale and zero point of a range, as quant.h specifies (the formula is
 * kernels/qk_grid.h's, shared with the kernels' range_params). */
void npuc__quant_params_from_range(float lo, float hi, int bits, int symmetric, int full, float *scale,
                                   float *inv, int32_t *zp) {
    npuc_qk_range_params(lo, hi, bits, symmetric, full, scale, inv, zp);
}

/* ---------------------------------------------------------------- ranges */

/* Min/max of every (channel, group), plus the count of non-finite values.
 * lo/hi are indexed c * gpc + g. */
static uint64_t ranges_minmax(const npuc_kernel_table *k, const float *x, const npuc_quant_shape *qs,
                              uint64_t G, float *lo, float *hi, int nth) {
    const uint64_t C = qs->channels, gpc = qs->groups_per_channel;
    uint64_t bad = 0;
    for (uint64_t i = 0; i < qs->nscales; i++) { lo[i] = INFINITY; hi[i] = -INFINITY; }
    if (qs->inner != 1 || C <= 1) {
        /* Items: (channel, chunk of CHUNK sequence values).  Each item writes
         * the min/max of every group it touches into its own slots (offsets
         * from a prefix sum), then the slots are merged in order: no locks,
         * and min/max are exact in any order anyway. */
        const uint64_t per = qs->per_channel;
        const uint64_t chunks = per ? (per + CHUNK - 1) / CHUNK : 0;
        const uint64_t items = C * chunks;
        uint64_t *first = malloc(sizeof(uint64_t) * (size_t)(items + 1));
        if (!first) return UINT64_MAX;
        first[0] = 0;
        for (uint64_t it = 0; it < items; it++) {
            uint64_t s = (it % chunks) * CHUNK, e = s + CHUNK < per ? s + CHUNK : per;
            first[it + 1] = first[it] + (e - 1) / G - s / G + 1;
        }
        float *pl = malloc(sizeof(float) * (size_t)(first[items] ? first[items] : 1));
        float *ph = malloc(sizeof(float) * (size_t)(first[items] ? first[items] : 1));
        if (!pl || !ph) { free(first); free(pl); free(ph); return UINT64_MAX; }
#pragma omp parallel for schedule(dynamic, 1) num_threads(nth) reduction(+ : bad)
        for (int64_t it = 0; it < (int64_t)items; it++) {
            uint64_t c = (uint64_t)it / chunks, s = ((uint64_t)it % chunks) * CHUNK;
            uint64_t e = s + CHUNK < per ? s + CHUNK : per;
            uint64_t g0 = s / G;
            for (uint64_t q = first[it]; q < first[it + 1]; q++) { pl[q] = INFINITY; ph[q] = -INFINITY; }
            for (uint64_t j = s; j < e;) {
                uint64_t o = j / qs->inner, kk = j % qs->inner, g = j / G;
                uint64_t end = j + (qs->inner - kk);
                if (end > e) end = e;
                if (end > (g + 1) * G) end = (g + 1) * G;
                float l, h;
                bad += k->minmax(x + (o * C + c) * qs->inner + kk, (size_t)(end - j), &l, &h);
                uint64_t q = first[it] + (g - g0);
                if (l < pl[q]) pl[q] = l;
                if (h > ph[q]) ph[q] = h;
                j = end;
            }
        }
        for (uint64_t it = 0; it < items; it++) {
            uint64_t c = it / chunks, s = (it % chunks) * CHUNK, g0 = s / G;
            for (uint64_t q = first[it]; q < first[it + 1]; q++) {
                uint64_t idx = c * gpc + g0 + (q - first[it]);
                if (pl[q] < lo[idx]) lo[idx] = pl[q];
                if (ph[q] > hi[idx]) hi[idx] = ph[q];
            }
        }
        free(first); free(pl); free(ph);
    } else {
        /* Columns: each item is a block of rows inside one group. */
        const uint64_t rows = qs->outer;
        const uint64_t rb = C >= CHUNK ? 1 : CHUNK / C;
        const uint64_t blocks_per_group = (G + rb - 1) / rb;
        const uint64_t items = gpc * blocks_per_group;
        const uint64_t nslots = C * items > 0 ? C * items : 1;
        float *plo = malloc(sizeof(float) * (size_t)nslots);
        float *phi = malloc(sizeof(float) * (size_t)nslots);
        if (!plo || !phi) { free(plo); free(phi); return UINT64_MAX; }
#pragma omp parallel for schedule(dynamic, 1) num_threads(nth) reduction(+ : bad)
        for (int64_t it = 0; it < (int64_t)items; it++) {
            uint64_t g = (uint64_t)it / blocks_per_group, b = (uint64_t)it % blocks_per_group;
            uint64_t r0 = g * G + b * rb, r1 = r0 + rb;
            if (r1 > (g + 1) * G) r1 = (g + 1) * G;
            if (r1 > rows) r1 = rows;
            float *l = plo + (uint64_t)it * C, *h = phi + (uint64_t)it * C;
            for (uint64_t c = 0; c < C; c++) { l[c] = INFINITY; h[c] = -INFINITY; }
            if (r0 < r1) bad += k->minmax_cols(x + r0 * C, (size_t)(r1 - r0), (size_t)C, (size_t)C, l, h);
        }
        for (uint64_t it = 0; it < items; it++) {
            uint64_t g = it / blocks_per_group;
            for (uint64_t c = 0; c < C; c++) {
                uint64_t idx = c * gpc + g;
                if (plo[it * C + c] < lo[idx]) lo[idx] = plo[it * C + c];
                if (phi[it * C + c] > hi[idx]) hi[idx] = phi[it * C + c];
            }
        }
        free(plo);
        free(phi);
    }
    for (uint64_t i = 0; i < qs->nscales; i++)
        if (lo[i] > hi[i]) lo[i] = hi[i] = 0; /* empty or all non-finite */
    return bad;
}

/* The values of group (c, g) in sequence order, *n of them: a pointer into
 * x when they are contiguous (the group lies within one run), else copied
 * into buf run by run. */
static const float *group_values(const float *x, const npuc_quant_shape *qs, uint64_t G, uint64_t c,
                                 uint64_t g, float *buf, uint64_t *n) {
    const uint64_t s = g * G, e = s + G < qs->per_channel ? s + G : qs->per_channel;
    const uint64_t inner = qs->inner, C = qs->channels;
    uint64_t o = s / inner, kk = s % inner, m = 0;
    *n = e - s;
    if (kk + *n <= inner) return x + (o * C + c) * inner + kk;
    while (m < *n) {
        const uint64_t len = *n - m < inner - kk ? *n - m : inner - kk;
        const float *src = x + (o * C + c) * inner + kk;
        if (len == 1) buf[m] = *src;
        else memcpy(buf + m, src, (size_t)len * sizeof(float));
        m += len;
        kk = 0;
        o++;
    }
    return buf;
}

/* The range of group values v[0..n) that start at sequence position j0 of
 * their channel: npuc_range_estimate, or the weighted search when the
 * parameters carry an importance or use the full grid with MSE. */
static npuc_status range_of_group(npuc_ctx *ctx, const float *v, size_t n, uint64_t j0, const npuc_quant_params *p,
                                  const npuc_range_opts *ro, float *lo, float *hi, void *scratch) {
    if (ro->method == NPUC_RANGE_MSE && (p->importance || p->grid == NPUC_GRID_FULL))
        return npuc_range_estimate_weighted(ctx, v, p->importance ? p->importance + j0 : NULL, n, ro,
                                            p->grid == NPUC_GRID_FULL, lo, hi);
    return npuc_range_estimate(ctx, v, n, ro, lo, hi, scratch);
}

static npuc_status ranges_estimate(npuc_ctx *ctx, const float *x, const npuc_quant_shape *qs,
                                   uint64_t G, const npuc_quant_params *p, float *lo, float *hi,
                                   int nth) {
    npuc_range_opts ro = p->range;
    ro.bits = p->bits;
    ro.symmetric = p->symmetric;
    const int64_t items = (int64_t)qs->nscales;
    const uint64_t gmax = G < qs->per_channel ? G : qs->per_channel;
    int failed = 0;
    npuc_status fst = NPUC_OK;
    char msg[NPUC_MSG_MAX] = "";
    if (qs->channels == 1 && qs->outer == 1) {
        /* One contiguous group: no gather. */
        return range_of_group(ctx, x, (size_t)qs->per_channel, 0, p, &ro, lo, hi, NULL);
    }
#pragma omp parallel num_threads(nth)
    {
        float *buf = malloc(sizeof(float) * (size_t)(gmax ? gmax : 1));
        size_t scr = npuc_range_scratch_size((size_t)gmax, &ro);
        void *scratch = scr ? malloc(scr) : NULL;
        npuc_ctx *tctx = NULL;
        int ok = buf && (!scr || scratch) && npuc_ctx_new(&tctx) == NPUC_OK;
        if (!ok) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 4)
        for (int64_t it = 0; it < items; it++) {
            if (!ok) continue;
            uint64_t c = (uint64_t)it / qs->groups_per_channel, g = (uint64_t)it % qs->groups_per_channel;
            uint64_t n;
            const float *v = group_values(x, qs, G, c, g, buf, &n);
            npuc_status st = range_of_group(tctx, v, (size_t)n, g * G, p, &ro, &lo[it], &hi[it], scratch);
            if (st != NPUC_OK) {
#pragma omp critical(npuc_qfail)
                {
                    if (!failed) {
                        failed = 2;
                        fst = st;
                        snprintf(msg, sizeof msg, "%s", npuc_ctx_errmsg(tctx));
                    }
                }
            }
        }
        npuc_ctx_free(tctx);
        free(buf);
        free(scratch);
    }
    if (failed == 1) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    if (failed == 2) return npuc_fail(ctx, fst, "%s", msg);
    return NPUC_OK;
}

/* ---------------------------------------------------------------- codes */

/* Packed codes (bits < 8; the layout of npuc_pack_bits: eight codes fill
 * exactly `bits` bytes, so code i's group of eight starts at byte i/8*bits).
 * A worker packs the code range [a, b) it has just produced while the codes
 * are still in its cache: every group of eight wholly inside the range, so
 * workers write disjoint bytes.  The groups that straddle the end of a range
 * (b not a multiple of 8, the tensor's last partial group included) are
 * packed once every worker is done (pack_seam).  Each piece starts on a
 * byte boundary, so the bytes are npuc_pack_bits' on the whole tensor (the
 * kernel table's pack_bits is npuc_pack_bits byte for byte). */
static void pack_inside(const npuc_kernel_table *k, const uint8_t *codes, uint64_t a, uint64_t b, int bits,
                        uint8_t *packed) {
    const uint64_t s = (a + 7) / 8 * 8, e = b / 8 * 8;
    if (packed && s < e) k->pack_bits(codes + s, (size_t)(e - s), bits, packed + s / 8 * (uint64_t)bits);
}

/* The group of eight that holds code b - 1 when a range ends at b inside it
 * (numel: the tensor's, so the last group may be shorter). */
static void pack_seam(const uint8_t *codes, uint64_t b, uint64_t numel, int bits, uint8_t *packed) {
    if (!packed || b % 8 == 0) return;
    const uint64_t g = b / 8 * 8, n = numel - g < 8 ? numel - g : 8;
    npuc_pack_bits(codes + g, (size_t)n, bits, packed + g / 8 * (uint64_t)bits);
}

/* Whole-tensor packing where a unit's codes are not one range (runs with
 * outer > 1): blocks of CHUNK codes in parallel, after the codes. */
static void pack_all(const npuc_kernel_table *k, const uint8_t *codes, uint64_t numel, int bits, uint8_t *packed,
                     int nth) {
    const int64_t blocks = (int64_t)((numel + CHUNK - 1) / CHUNK);
#pragma omp parallel for schedule(static) num_threads(nth)
    for (int64_t b = 0; b < blocks; b++) {
        const uint64_t s = (uint64_t)b * CHUNK, n = numel - s < CHUNK ? numel - s : CHUNK;
        k->pack_bits(codes + s, (size_t)n, bits, packed + s / 8 * (uint64_t)bits);
    }
}


/* What the one-pass workers share.  The values at sequence index i of the
 * tensor are w[i - w0]: w is the whole tensor (w0 = 0), or, when the input
 * is F16/BF16 widened unit by unit (widen set), a worker's own copy of one
 * unit starting at w0. */
typedef struct fuse_job {
    const npuc_kernel_table *k;
    const float *w;
    uint64_t w0;
    const unsigned char *src; /* the F16/BF16 bytes when widen is set */
    npuc_cvt_fn widen;
    const npuc_quant_shape *qs;
    uint64_t G, chunks, numel;
    const npuc_quant_params *p;
    npuc_range_opts ro; /* p->range with the scheme's bits and symmetry */
    int32_t qmin, qmax;
    float *scales, *inv;
    int32_t *zero_points;
    uint8_t *codes;
    uint8_t *packed; /* NULL, or the bit-packed codes (pack_inside) */
    float *deq;
    npuc_qsums *sums;
} fuse_job;

/* Groups of at most GROUPS_MAX values go to the kernel's quant_groups a
 * chunk at a time (kernels/npuc_kernels.h): one call per chunk instead of
 * one quant_run per group, whose fixed cost dominates at G = 32 (issue 18,
 * docs/quantization.md "Every scheme"). */
#define GROUPS_MAX 256u

static const float *vals(const fuse_job *j, uint64_t i) { return j->w + (i - j->w0); }

static void group_params(const fuse_job *j, uint64_t idx, float lo, float hi) {
    npuc__quant_params_from_range(lo, hi, j->p->bits, j->p->symmetric, j->p->grid == NPUC_GRID_FULL,
                                  &j->scales[idx], &j->inv[idx], &j->zero_points[idx]);
    npuc__scale_round(j->p->scale_dtype, &j->scales[idx], &j->inv[idx]); /* --scale-dtype */
}

/* Values per batch of the minmax order (16 KiB of floats, which stay in L1
 * between the ranges and the codes); a multiple of every G that divides
 * CHUNK and is at most GROUPS_MAX. */
#define BATCH 4096u

/* grouped_span for minmax ranges: batch by batch, every group's min/max in
 * one minmax_groups call (a channel's last, shorter group by minmax), their
 * scales and zero points in one range_params call (results bit-identical to
 * group_params on each group), then their codes in one quant_groups call
 * (the last group by quant_run), the sums into the chunk's item. */
static uint64_t minmax_span(const fuse_job *j, uint64_t c, uint64_t s, uint64_t e) {
    const npuc_kernel_table *k = j->k;
    const uint64_t per = j->qs->per_channel, base = c * per, G = j->G;
    const uint64_t idx0 = c * j->qs->groups_per_channel;
    const int full = j->p->grid == NPUC_GRID_FULL;
    uint64_t bad = 0;
    for (uint64_t q = s; q < e;) {
        const uint64_t ch = q / CHUNK, chend = (ch + 1) * CHUNK < e ? (ch + 1) * CHUNK : e;
        const uint64_t end = q + BATCH < chend ? q + BATCH : chend;
        const uint64_t whole = (end - q) / G, r = q + whole * G, gi = idx0 + q / G;
        const uint64_t ng = whole + (r < end);
        /* The ranges go where the scales and 1/scales will be (range_params
         * may work in place). */
        float *sc = j->scales + gi, *iv = j->inv + gi;
        bad += k->minmax_groups(vals(j, base + q), (size_t)whole, (size_t)G, sc, iv);
        if (r < end) bad += k->minmax(vals(j, base + r), (size_t)(end - r), &sc[whole], &iv[whole]);
        k->range_params(sc, iv, (size_t)ng, j->p->bits, j->p->symmetric, full, sc, iv, j->zero_points + gi);
        npuc__scale_round_n(j->p->scale_dtype, sc, iv, (size_t)ng); /* --scale-dtype */
        npuc_qsums *sums = &j->sums[c * j->chunks + ch];
        /* While the codes are computed from cache, the next batch (which
         * this thread most likely takes next) streams into it (not when the
         * worker holds a widened copy of this unit only). */
        const uint64_t a0 = base + end;
        const uint64_t an = j->widen || a0 >= j->numel ? 0 : j->numel - a0 < BATCH ? j->numel - a0 : BATCH;
        const npuc_qhint h = {an ? vals(j, a0) : NULL, (size_t)an};
        k->quant_groups(vals(j, base + q), (size_t)whole, (size_t)G, sc, iv, j->zero_points + gi, j->qmin,
                        j->qmax, j->codes + base + q, j->deq ? j->deq + base + q : NULL, sums, &h);
        if (r < end)
            k->quant_run(vals(j, base + r), (size_t)(end - r), sc[whole], iv[whole], j->zero_points[gi + whole],
                         j->qmin, j->qmax, j->codes + base + r, j->deq ? j->deq + base + r : NULL, sums);
        q = end;
    }
    return bad;
}

/* fused_span when G divides CHUNK (so no group crosses a chunk boundary):
 * first every group's range and parameters in [s, e), then the codes chunk
 * by chunk, the whole groups of each in one quant_groups call and a
 * channel's last, shorter group (per % G values) by quant_run; the same
 * codes, scales and per-chunk sums items as the loop in fused_span. */
static uint64_t grouped_span(const fuse_job *j, uint64_t c, uint64_t s, uint64_t e, npuc_ctx *tctx,
                             void *scratch, npuc_status *est) {
    const uint64_t per = j->qs->per_channel, base = c * per, G = j->G;
    const uint64_t idx0 = c * j->qs->groups_per_channel;
    uint64_t bad = 0;
    if (j->p->range.method == NPUC_RANGE_MINMAX) return minmax_span(j, c, s, e);
    for (uint64_t g0 = s; g0 < e; g0 += G) {
        const uint64_t n = g0 + G < per ? G : per - g0;
        const float *xg = vals(j, base + g0);
        float lo, hi;
        bad += j->k->minmax(xg, (size_t)n, &lo, &hi);
        if (j->p->range.method != NPUC_RANGE_MINMAX &&
            (*est = range_of_group(tctx, xg, (size_t)n, g0, j->p, &j->ro, &lo, &hi, scratch)) != NPUC_OK)
            return bad;
        group_params(j, idx0 + g0 / G, lo, hi);
    }
    for (uint64_t q = s; q < e;) {
        const uint64_t ch = q / CHUNK, end = (ch + 1) * CHUNK < e ? (ch + 1) * CHUNK : e;
        const uint64_t whole = (end - q) / G, gi = idx0 + q / G;
        npuc_qsums *sums = &j->sums[c * j->chunks + ch];
        j->k->quant_groups(vals(j, base + q), (size_t)whole, (size_t)G, j->scales + gi, j->inv + gi,
                           j->zero_points + gi, j->qmin, j->qmax, j->codes + base + q,
                           j->deq ? j->deq + base + q : NULL, sums, NULL);
        const uint64_t r = q + whole * G;
        if (r < end) /* the channel's last group, shorter than G */
            j->k->quant_run(vals(j, base + r), (size_t)(end - r), j->scales[gi + whole], j->inv[gi + whole],
                            j->zero_points[gi + whole], j->qmin, j->qmax, j->codes + base + r,
                            j->deq ? j->deq + base + r : NULL, sums);
        q = end;
    }
    return bad;
}

/* One pass over the groups of channel c whose values start in [s, e) of the
 * channel's sequence (s and e on group boundaries), when outer == 1, so a
 * group is the contiguous x[c*per + g*G, ...): its min/max (and non-finite
 * count), its range by the method (minmax, or npuc_range_estimate with
 * tctx/scratch), scale and zero point, then its codes, split at CHUNK
 * boundaries exactly as the two-pass loop splits them, with the sums of
 * chunk ch going to sums[c * chunks + ch].  Returns the count of non-finite
 * values; a failed range estimate stops the span and is left in *est. */
static uint64_t fused_span(const fuse_job *j, uint64_t c, uint64_t s, uint64_t e, npuc_ctx *tctx,
                           void *scratch, npuc_status *est) {
    const uint64_t per = j->qs->per_channel, base = c * per, G = j->G;
    uint64_t bad = 0;
    if (G <= GROUPS_MAX && CHUNK % G == 0) return grouped_span(j, c, s, e, tctx, scratch, est);
    for (uint64_t g0 = s; g0 < e;) {
        const uint64_t g1 = g0 + G < per ? g0 + G : per;
        const uint64_t idx = c * j->qs->groups_per_channel + g0 / G;
        const float *xg = vals(j, base + g0);
        float lo, hi;
        /* minmax gives 0, 0 when nothing is finite, as ranges_minmax does. */
        bad += j->k->minmax(xg, (size_t)(g1 - g0), &lo, &hi);
        if (j->p->range.method != NPUC_RANGE_MINMAX &&
            (*est = range_of_group(tctx, xg, (size_t)(g1 - g0), g0, j->p, &j->ro, &lo, &hi, scratch)) != NPUC_OK)
            return bad;
        group_params(j, idx, lo, hi);
        for (uint64_t q = g0; q < g1;) {
            const uint64_t ch = q / CHUNK, end = (ch + 1) * CHUNK < g1 ? (ch + 1) * CHUNK : g1;
            /* Read ahead the values as many as these (at least AHEAD_MIN)
             * further on, which this thread most likely takes next (not
             * when the worker holds a widened copy of this unit only). */
            const uint64_t len = end - q, a0 = base + q + (len > AHEAD_MIN ? len : AHEAD_MIN);
            const uint64_t an = j->widen || a0 >= j->numel ? 0 : j->numel - a0 < len ? j->numel - a0 : len;
            const npuc_qhint h = {an ? vals(j, a0) : NULL, (size_t)an};
            j->k->quant_run_hinted(vals(j, base + q), (size_t)len, j->scales[idx], j->inv[idx],
                                   j->zero_points[idx], j->qmin, j->qmax, j->codes + base + q,
                                   j->deq ? j->deq + base + q : NULL, &j->sums[c * j->chunks + ch], &h);
            q = end;
        }
        g0 = g1;
    }
    return bad;
}

/* The one-pass order for groups that are contiguous (outer == 1) and fit in
 * a core's cache (G <= FUSE_MAX), any range method.  *sums gets one entry
 * per (channel, chunk) item, as in the two-pass order.  With widen set (and
 * units of at most CHUNK values: fusable()), w is NULL and each worker
 * widens a unit's F16/BF16 bytes from src into its own buffer just before
 * quantizing it, so the F32 copy never leaves the core's cache; the kernel
 * calls, and so every result, are the same as on a widened tensor. */
static npuc_status one_pass(npuc_ctx *ctx, const npuc_tensor_info *t, const npuc_kernel_table *k,
                            const float *w, const unsigned char *src, npuc_cvt_fn widen,
                            const npuc_quant_shape *qs, uint64_t G,
                            const npuc_quant_params *p, int32_t qmin, int32_t qmax, float *inv,
                            float *scales, int32_t *zero_points, uint8_t *codes, uint8_t *packed, float *deq,
                            npuc_qsums **sums_out, uint64_t *items_out, int nth) {
    const uint64_t C = qs->channels, per = qs->per_channel;
    const uint64_t chunks = per ? (per + CHUNK - 1) / CHUNK : 0;
    /* Units of work: one chunk item when no group crosses a chunk boundary,
     * else a whole channel (its chunks in order), so every item's sums are
     * written by one unit in chunk order.  Units are grabbed a few at a
     * time, at least CHUNK values a grab. */
    const int by_chunk = chunks <= 1 || CHUNK % G == 0;
    const uint64_t units = by_chunk ? C * chunks : C;
    const int grab = per == 0 || per >= CHUNK || !by_chunk ? 1 : (int)(CHUNK / per);
    const int est = p->range.method != NPUC_RANGE_MINMAX;
    const uint64_t gmax = G < per ? G : per;
    fuse_job j = {.k = k, .w = w, .src = src, .widen = widen, .qs = qs, .G = G, .chunks = chunks,
                  .numel = C * per, .p = p, .ro = p->range, .qmin = qmin, .qmax = qmax, .scales = scales, .inv = inv,
                  .zero_points = zero_points, .codes = codes, .packed = packed, .deq = deq};
    j.ro.bits = p->bits;
    j.ro.symmetric = p->symmetric;
    *items_out = C * chunks;
    *sums_out = j.sums = calloc((size_t)(*items_out ? *items_out : 1), sizeof *j.sums);
    if (!j.sums) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    uint64_t bad = 0;
    int failed = 0;
    npuc_status fst = NPUC_OK;
    char msg[NPUC_MSG_MAX] = "";
#pragma omp parallel num_threads(nth) reduction(+ : bad)
    {
        void *scratch = NULL;
        npuc_ctx *tctx = NULL;
        int ok = 1;
        fuse_job jw = j; /* this worker's view of a widened unit */
        float *buf = NULL;
        if (est) {
            const size_t scr = npuc_range_scratch_size((size_t)gmax, &j.ro);
            scratch = scr ? malloc(scr) : NULL;
            ok = (!scr || scratch) && npuc_ctx_new(&tctx) == NPUC_OK;
        }
        if (ok && widen) {
            jw.w = buf = malloc(sizeof(float) * (size_t)(per < CHUNK ? per : CHUNK));
            ok = buf != NULL;
        }
        if (!ok) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, grab)
        for (int64_t u = 0; u < (int64_t)units; u++) {
            if (!ok) continue;
            uint64_t c = by_chunk ? (uint64_t)u / chunks : (uint64_t)u, s0 = 0, e0 = per;
            if (by_chunk) {
                s0 = ((uint64_t)u % chunks) * CHUNK;
                e0 = s0 + CHUNK < per ? s0 + CHUNK : per;
            }
            npuc_status st = NPUC_OK;
            if (widen) {
                jw.w0 = c * per + s0;
                widen(buf, src + 2 * jw.w0, (size_t)(e0 - s0));
            }
            bad += fused_span(widen ? &jw : &j, c, s0, e0, tctx, scratch, &st);
            pack_inside(k, codes, c * per + s0, c * per + e0, p->bits, packed);
            if (st != NPUC_OK) {
#pragma omp critical(npuc_qfail)
                {
                    if (!failed) {
                        failed = 2;
                        fst = st;
                        snprintf(msg, sizeof msg, "%s", npuc_ctx_errmsg(tctx));
                    }
                }
            }
        }
        npuc_ctx_free(tctx);
        free(scratch);
        free(buf);
    }
    if (packed)
        for (uint64_t u = 0; u < units; u++) {
            const uint64_t c = by_chunk ? u / chunks : u, ch = by_chunk ? u % chunks : chunks - 1;
            pack_seam(codes, c * per + ((ch + 1) * CHUNK < per ? (ch + 1) * CHUNK : per), C * per, p->bits, packed);
        }
    /* The two-pass order's precedence: non-finite values first. */
    if (bad)
        return npuc_fail(ctx, NPUC_ERR_VALUE, "tensor '%s': %llu NaN or Inf value%s; cannot quantize",
                         t->name, (unsigned long long)bad, bad == 1 ? "" : "s");
    if (failed == 1) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    if (failed == 2) return npuc_fail(ctx, fst, "%s", msg);
    return NPUC_OK;
}

/* The two-pass order: every group's range (min/max, then the range method),
 * the scales, then the codes; *sums gets one entry per item (*items). */
static npuc_status two_pass(npuc_ctx *ctx, const npuc_tensor_info *t, const npuc_kernel_table *k,
                            const float *w, const npuc_quant_shape *qsp, uint64_t G,
                            const npuc_quant_params *p, int32_t qmin, int32_t qmax, float *inv,
                            float *scales, int32_t *zero_points, uint8_t *codes, uint8_t *packed, float *deq,
                            npuc_qsums **sums_out, uint64_t *items_out, int nth) {
    const npuc_quant_shape qs = *qsp;
    const uint64_t C = qs.channels, gpc = qs.groups_per_channel;
    npuc_status st = NPUC_OK;
    npuc_qsums *sums = NULL;
    float *vs = NULL, *vinv = NULL;
    int32_t *vzp = NULL;
    uint64_t items = 0;
    float *lo = malloc(sizeof(float) * (size_t)(qs.nscales ? qs.nscales : 1));
    float *hi = malloc(sizeof(float) * (size_t)(qs.nscales ? qs.nscales : 1));
    if (!lo || !hi) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }

    uint64_t bad = ranges_minmax(k, w, &qs, G, lo, hi, nth);
    if (bad == UINT64_MAX) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
    if (bad) {
        st = npuc_fail(ctx, NPUC_ERR_VALUE, "tensor '%s': %llu NaN or Inf value%s; cannot quantize",
                       t->name, (unsigned long long)bad, bad == 1 ? "" : "s");
        goto done;
    }
    if (p->range.method != NPUC_RANGE_MINMAX &&
        (st = ranges_estimate(ctx, w, &qs, G, p, lo, hi, nth)) != NPUC_OK)
        goto done;
    for (uint64_t i = 0; i < qs.nscales; i++)
        npuc__quant_params_from_range(lo[i], hi[i], p->bits, p->symmetric, p->grid == NPUC_GRID_FULL, &scales[i], &inv[i],
                                      &zero_points[i]);
    npuc__scale_round_n(p->scale_dtype, scales, inv, (size_t)qs.nscales); /* --scale-dtype */

    if (qs.inner != 1 || C <= 1) {
        const uint64_t per = qs.per_channel;
        const uint64_t chunks = per ? (per + CHUNK - 1) / CHUNK : 0;
        items = C * chunks;
        sums = calloc((size_t)(items ? items : 1), sizeof *sums);
        if (!sums) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
#pragma omp parallel for schedule(dynamic, 1) num_threads(nth)
        for (int64_t it = 0; it < (int64_t)items; it++) {
            uint64_t c = (uint64_t)it / chunks, s = ((uint64_t)it % chunks) * CHUNK;
            uint64_t e = s + CHUNK < per ? s + CHUNK : per;
            for (uint64_t j = s; j < e;) {
                uint64_t o = j / qs.inner, kk = j % qs.inner, g = j / G;
                uint64_t end = j + (qs.inner - kk);
                if (end > e) end = e;
                if (end > (g + 1) * G) end = (g + 1) * G;
                uint64_t off = (o * C + c) * qs.inner + kk, idx = c * gpc + g;
                k->quant_run(w + off, (size_t)(end - j), scales[idx], inv[idx], zero_points[idx], qmin,
                             qmax, codes + off, deq ? deq + off : NULL, &sums[it]);
                j = end;
            }
            if (qs.outer == 1) pack_inside(k, codes, c * per + s, c * per + e, p->bits, packed);
        }
        if (packed && qs.outer == 1)
            for (uint64_t it = 0; it < items; it++) {
                const uint64_t c = it / chunks, ch = it % chunks;
                pack_seam(codes, c * per + ((ch + 1) * CHUNK < per ? (ch + 1) * CHUNK : per), t->numel, p->bits,
                          packed);
            }
        else if (packed)
            pack_all(k, codes, t->numel, p->bits, packed, nth); /* a channel's codes are strided */
    } else {
        /* Per-column parameters, transposed to [group][C] so a row reads them
         * contiguously. */
        vs = malloc(sizeof(float) * (size_t)(gpc * C));
        vinv = malloc(sizeof(float) * (size_t)(gpc * C));
        vzp = malloc(sizeof(int32_t) * (size_t)(gpc * C));
        const uint64_t rb = C >= CHUNK ? 1 : CHUNK / C;
        const uint64_t rows = qs.outer;
        items = (rows + rb - 1) / rb;
        sums = calloc((size_t)(items ? items : 1), sizeof *sums);
        if (!vs || !vinv || !vzp || !sums) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
        for (uint64_t c = 0; c < C; c++)
            for (uint64_t g = 0; g < gpc; g++) {
                vs[g * C + c] = scales[c * gpc + g];
                vinv[g * C + c] = inv[c * gpc + g];
                vzp[g * C + c] = zero_points[c * gpc + g];
            }
#pragma omp parallel for schedule(dynamic, 1) num_threads(nth)
        for (int64_t it = 0; it < (int64_t)items; it++) {
            uint64_t r0 = (uint64_t)it * rb, r1 = r0 + rb < rows ? r0 + rb : rows;
            /* One quant_rows call per run of rows in the same group. */
            for (uint64_t r = r0; r < r1;) {
                uint64_t g = r / G, re = (g + 1) * G < r1 ? (g + 1) * G : r1;
                k->quant_rows(w + r * C, (size_t)(re - r), (size_t)C, (size_t)C, vs + g * C, vinv + g * C,
                              vzp + g * C, qmin, qmax, codes + r * C, deq ? deq + r * C : NULL,
                              &sums[it]);
                r = re;
            }
            pack_inside(k, codes, r0 * C, r1 * C, p->bits, packed);
        }
        for (uint64_t it = 0; packed && it < items; it++)
            pack_seam(codes, ((uint64_t)it * rb + rb < rows ? (uint64_t)it * rb + rb : rows) * C, t->numel, p->bits,
                      packed);
    }
done:
    free(lo); free(hi); free(vs); free(vinv); free(vzp);
    if (st != NPUC_OK) {
        free(sums);
        sums = NULL;
    }
    *sums_out = sums;
    *items_out = items;
    return st;
}

/* Whether the one-pass order takes this tensor in units of at most CHUNK
 * values, which a worker can widen from F16/BF16 on its own. */
static int fusable(const npuc_quant_shape *qs, uint64_t G) {
    const int runs = qs->inner != 1 || qs->channels <= 1;
    return runs && qs->outer == 1 && qs->per_channel > 0 && G <= FUSE_MAX &&
           (qs->per_channel <= CHUNK || CHUNK % G == 0);
}

/* npuc_quantize_tensor on w (F32), or, with half set, on half (t's F16/BF16
 * bytes): widened unit by unit inside the one pass when fusable(), else
 * whole into scr first (pass_util.h). */
npuc_status npuc__quantize(npuc_ctx *ctx, const npuc_tensor_info *t, const float *w, const void *half,
                           npuc_scratch *scr, const npuc_quant_params *p, const npuc__qout *out) {
    const void *src = half;
    uint8_t *codes = out->codes, *packed = out->packed;
    float *scales = out->scales, *deq = out->deq;
    int32_t *zero_points = out->zero_points;
    npuc_error_stats *err = out->err;
    npuc_quant_shape qs;
    npuc_status st = npuc_quant_shape_of(ctx, t, p, &qs);
    if (st != NPUC_OK) return st;
    const npuc_kernel_table *k = npuc_kernels();
    const int nth = npuc__threads(ctx);
    const uint64_t C = qs.channels, gpc = qs.groups_per_channel;
    const uint64_t G = p->gran == NPUC_GRAN_GROUP ? p->group_size : (qs.per_channel ? qs.per_channel : 1);
    int32_t qmin, qmax;
    npuc_qk_code_range(p->bits, p->symmetric, p->grid == NPUC_GRID_FULL, &qmin, &qmax);
    npuc_cvt_fn widen = NULL;
    if (half) {
        if (fusable(&qs, G)) {
            const npuc_cvt_kernel_table *cv = npuc_cvt_kernels();
            widen = t->dtype == NPUC_DTYPE_F16 ? cv->f16_to_f32 : cv->bf16_to_f32;
        } else {
            uint64_t nb;
            float *f = npuc_mul_overflow(t->numel, sizeof(float), &nb) ? NULL : npuc__scratch(scr, nb);
            if (!f) return npuc_fail(ctx, NPUC_ERR_NOMEM, "tensor '%s': out of memory", t->name);
            npuc__widen_f32(ctx, f, src, t->dtype, (size_t)t->numel);
            w = f;
        }
    }

    float *inv = malloc(sizeof(float) * (size_t)(qs.nscales ? qs.nscales : 1));
    npuc_qsums *sums = NULL;
    uint64_t items = 0;
    if (!inv) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }

    /* One pass needs values (an empty tensor gets its scales from the two-pass
     * order's empty ranges). */
    const int runs = qs.inner != 1 || C <= 1;
    if (runs && qs.outer == 1 && qs.per_channel > 0 && G <= FUSE_MAX)
        st = one_pass(ctx, t, k, w, widen ? src : NULL, widen, &qs, G, p, qmin, qmax, inv, scales, zero_points,
                      codes, packed, deq, &sums, &items, nth);
    else
        st = two_pass(ctx, t, k, w, &qs, G, p, qmin, qmax, inv, scales, zero_points, codes, packed, deq, &sums,
                      &items, nth);
    if (st != NPUC_OK) goto done;
    if (err) {
        double noise = 0;
        for (uint64_t c = 0; c < C; c++)
            for (uint64_t g = 0; g < gpc; g++) {
                uint64_t s = g * G, e = s + G < qs.per_channel ? s + G : qs.per_channel;
                double sc = scales[c * gpc + g];
                noise += (double)(e - s) * sc * sc / 12.0;
            }
        npuc_qsums tot;
        memset(&tot, 0, sizeof tot);
        for (uint64_t it = 0; it < items; it++) npuc_qsums_add(&tot, &sums[it]);
        npuc_error_from_sums(err, t->numel, tot.sum_w2, tot.sum_e2, tot.sum_wd, tot.sum_d2, tot.max_abs,
                             noise, tot.clipped);
    }
done:
    free(inv);
    free(sums);
    return st;
}

npuc_status npuc_quantize_tensor(npuc_ctx *ctx, const npuc_tensor_info *t, const float *w,
                                 const npuc_quant_params *p, uint8_t *codes, float *scales,
                                 int32_t *zero_points, float *deq, npuc_error_stats *err) {
    const npuc__qout out = {codes, NULL, scales, zero_points, deq, err};
    return npuc__quantize(ctx, t, w, NULL, NULL, p, &out);
}

npuc_status npuc_dequantize_tensor(npuc_ctx *ctx, const npuc_tensor_info *t,
                                   const npuc_quant_params *p, const uint8_t *codes,
                                   const float *scales, const int32_t *zero_points, float *out) {
    npuc_quant_shape qs;
    npuc_status st = npuc_quant_shape_of(ctx, t, p, &qs);
    if (st != NPUC_OK) return st;
    const uint64_t C = qs.channels, gpc = qs.groups_per_channel;
    const uint64_t G = p->gran == NPUC_GRAN_GROUP ? p->group_size : (qs.per_channel ? qs.per_channel : 1);
    const int nth = npuc__threads(ctx);
#pragma omp parallel for schedule(static) num_threads(nth)
    for (int64_t i = 0; i < (int64_t)t->numel; i++) {
        uint64_t u = (uint64_t)i;
        uint64_t k = u % qs.inner, rest = u / qs.inner, c = rest % C, o = rest / C;
        uint64_t idx = c * gpc + (o * qs.inner + k) / G;
        int32_t q = p->symmetric ? (int32_t)(int8_t)codes[u] : (int32_t)codes[u];
        out[u] = (float)(q - zero_points[idx]) * scales[idx];
    }
    return NPUC_OK;
}
