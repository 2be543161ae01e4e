/*
 * nm_avx2.c - AVX2 versions of the pruning and N:M kernels (nm_kernels.h).
 *
 * Only these functions are compiled for AVX2 (function-level target
 * attributes), and the table is handed out only when the CPU reports AVX2
 * and FMA, like the quantization kernels (qk_avx2.c).
 *
 * Equivalence with the reference (ref/nm_ref.c): every decision is made on
 * the 31-bit magnitude bits with exact integer compares, so the zeroed
 * elements, the output floats (copied by bit-exact masking), the counts and
 * the stored indices are bit-identical.  The error sums are formed in float
 * blocks (see vsums) and agree with the reference within NPUC_SUMS_RTOL.
 * Tails run the scalar helpers.
 *
 * N:M ranks are computed without sorting.  Over rows (nm_rows) one vector
 * holds the same position l of 8 neighbouring groups, so every pair (e, j)
 * of rows is compared once and rank_j gets -[mag_e > mag_j] for e < j and
 * +[mag_e < mag_j] for e > j on top of j (the count of e < j).  Over
 * contiguous groups of m in {2, 4, 8} (nm_contig) a vector holds 8/m whole
 * groups; element j is compared with its group rotated by k = 1..m-1
 * (VPERMD), the rotated element being e = (j + k) mod m, which is below j
 * exactly in the lanes with j + k >= m.
 */
#include "kernels/nm_kernels.h"
#include "kernels/cpu_x86.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>
#include <math.h>
#include <pthread.h>

#define NPUC_AVX2 __attribute__((target("avx2,fma,popcnt")))
#define NPUC_AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma,popcnt")))

/* Accumulators for npuc_prune_sums, 8 lanes wide.  Squares are formed and
 * added in float lanes for blocks of VS_BLOCK vectors (256 elements), then
 * the block sums are added in double: half the instructions of squaring in
 * double, and within NPUC_SUMS_RTOL of the reference.  A block whose float
 * sum overflows (|x| above 1.8e19) gives a non-finite sum; the pass drivers
 * then redo that chunk with the reference kernel. */
#define VS_BLOCK 32

typedef struct vsums {
    __m256d w2a, w2b, e2a, e2b; /* double totals */
    __m256 fw2, fe2;            /* float sums of the current block */
    __m256 maxe;
    __m256i zc;                 /* minus the zero count per lane, this block */
    uint64_t zeros;
    unsigned blk;
} vsums;

NPUC_AVX2_INLINE void vs_init(vsums *v) {
    v->w2a = v->w2b = v->e2a = v->e2b = _mm256_setzero_pd();
    v->fw2 = v->fe2 = v->maxe = _mm256_setzero_ps();
    v->zc = _mm256_setzero_si256();
    v->zeros = 0;
    v->blk = 0;
}

NPUC_AVX2_INLINE void vs_block(vsums *v) {
    v->w2a = _mm256_add_pd(v->w2a, _mm256_cvtps_pd(_mm256_castps256_ps128(v->fw2)));
    v->w2b = _mm256_add_pd(v->w2b, _mm256_cvtps_pd(_mm256_extractf128_ps(v->fw2, 1)));
    v->e2a = _mm256_add_pd(v->e2a, _mm256_cvtps_pd(_mm256_castps256_ps128(v->fe2)));
    v->e2b = _mm256_add_pd(v->e2b, _mm256_cvtps_pd(_mm256_extractf128_ps(v->fe2, 1)));
    v->fw2 = v->fe2 = _mm256_setzero_ps();
    int32_t z[8];
    _mm256_storeu_si256((__m256i *)z, v->zc);
    for (int i = 0; i < 8; i++) v->zeros += (uint64_t)(-z[i]);
    v->zc = _mm256_setzero_si256();
    v->blk = 0;
}

/* Folds 8 inputs x, the mask of zeroed lanes z (all ones) and the output o. */
NPUC_AVX2_INLINE void vs_add(vsums *v, __m256 x, __m256 z, __m256 o) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 e = _mm256_and_ps(z, x);
    v->fw2 = _mm256_fmadd_ps(x, x, v->fw2);
    v->fe2 = _mm256_fmadd_ps(e, e, v->fe2);
    v->maxe = _mm256_max_ps(v->maxe, _mm256_and_ps(e, absmask));
    v->zc = _mm256_add_epi32(v->zc, _mm256_castps_si256(_mm256_cmp_ps(o, _mm256_setzero_ps(), _CMP_EQ_OQ)));
    if (++v->blk == VS_BLOCK) vs_block(v);
}

NPUC_AVX2_INLINE double hsum(__m256d a, __m256d b) {
    double la[4], lb[4], s = 0;
    _mm256_storeu_pd(la, a);
    _mm256_storeu_pd(lb, b);
    for (int i = 0; i < 4; i++) s += la[i] + lb[i];
    return s;
}

NPUC_AVX2_INLINE void vs_flush(vsums *v, npuc_prune_sums *s) {
    vs_block(v);
    float m[8];
    _mm256_storeu_ps(m, v->maxe);
    s->sum_w2 += hsum(v->w2a, v->w2b);
    s->sum_e2 += hsum(v->e2a, v->e2b);
    for (int i = 0; i < 8; i++)
        if ((double)m[i] > s->max_e) s->max_e = (double)m[i];
    s->zeros += v->zeros;
}

NPUC_AVX2_INLINE __m256i magv(__m256 x) {
    return _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x7fffffff));
}

/* ---------------------------------------------------------------- magnitude */

/* For each 8-bit lane mask, the VPERMD indices that move the set lanes to
 * the front in order (AVX2 has no compress-store; a 8 KiB table does it). */
static int32_t g_pack_lut[256][8];
static pthread_once_t g_pack_once = PTHREAD_ONCE_INIT;

static void pack_lut_init(void) {
    for (unsigned m = 0; m < 256; m++) {
        int k = 0;
        for (int l = 0; l < 8; l++)
            if (m >> l & 1) g_pack_lut[m][k++] = l;
        for (; k < 8; k++) g_pack_lut[m][k] = 0;
    }
}

/* Branch-free: the counts accumulate in vector lanes, the candidates are
 * packed with VPERMD and stored 8 lanes at a time (the next vector's store
 * overwrites the unused tail), so the 2-3 % of vectors holding candidates
 * cost no mispredicted branch.  NaN / Inf are detected by the lane maximum
 * and counted exactly only when present. */
NPUC_AVX2 static uint64_t mag_split_avx2(const float *x, size_t n, uint32_t lo, uint32_t hi, float *out,
                                         uint32_t *idx, uint32_t *mag, size_t cap, uint64_t *nmid,
                                         uint64_t *nbad, npuc_prune_sums *s) {
    /* Magnitudes are below 2^31, so signed compares are exact; bounds above
     * every finite magnitude are clamped to INT32_MAX (only NaN lies above). */
    const __m256i vlo = _mm256_set1_epi32((int32_t)(lo > 0x7fffffffu ? 0x7fffffffu : lo));
    const __m256i vhi = _mm256_set1_epi32((int32_t)(hi > 0x7fffffffu ? 0x7fffffffu : hi));
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i below = _mm256_setzero_si256(), vmax = _mm256_setzero_si256();
    uint64_t mid = 0, bad = 0, nbelow = 0;
    vsums v;
    vs_init(&v);
    size_t i = 0;
    /* (lane counters are int32: vectors only for the first 2^30 elements) */
    for (; i + 8 <= n && i < ((size_t)1 << 30); i += 8) {
        const __m256 xv = _mm256_loadu_ps(x + i);
        const __m256i m = magv(xv);
        const __m256i b = _mm256_cmpgt_epi32(vlo, m);
        const __m256i in = _mm256_andnot_si256(b, _mm256_cmpgt_epi32(vhi, m));
        const __m256 o = _mm256_andnot_ps(_mm256_castsi256_ps(b), xv);
        _mm256_storeu_ps(out + i, o);
        vs_add(&v, xv, _mm256_castsi256_ps(b), o);
        below = _mm256_sub_epi32(below, b);
        vmax = _mm256_max_epu32(vmax, m);
        const unsigned md = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(in));
        if (mid + 8 <= cap) {
            const __m256i perm = _mm256_loadu_si256((const __m256i *)g_pack_lut[md]);
            const __m256i iv = _mm256_add_epi32(lanes, _mm256_set1_epi32((int32_t)i));
            _mm256_storeu_si256((__m256i *)(idx + mid), _mm256_permutevar8x32_epi32(iv, perm));
            _mm256_storeu_si256((__m256i *)(mag + mid), _mm256_permutevar8x32_epi32(m, perm));
        } else { /* near the end of the buffer: one by one, counting past cap */
            uint32_t lane[8];
            _mm256_storeu_si256((__m256i *)lane, m);
            uint64_t p = mid;
            for (unsigned mm = md; mm; mm &= mm - 1, p++) {
                const unsigned k = (unsigned)__builtin_ctz(mm);
                if (p < cap) {
                    idx[p] = (uint32_t)(i + k);
                    mag[p] = lane[k];
                }
            }
        }
        mid += (unsigned)__builtin_popcount(md);
    }
    vs_flush(&v, s);
    int32_t bl[8];
    uint32_t mx[8];
    _mm256_storeu_si256((__m256i *)bl, below);
    _mm256_storeu_si256((__m256i *)mx, vmax);
    int any_bad = 0;
    for (int k = 0; k < 8; k++) {
        nbelow += (uint32_t)bl[k];
        any_bad |= mx[k] >= NPUC_MAG_BAD;
    }
    if (any_bad)
        for (size_t j = 0; j < i; j++) bad += npuc_mag(x[j]) >= NPUC_MAG_BAD;
    for (; i < n; i++) {
        const float f = x[i];
        const uint32_t mg = npuc_mag(f);
        bad += mg >= NPUC_MAG_BAD;
        const double d = (double)f;
        s->sum_w2 += d * d;
        if (mg < lo) {
            nbelow++;
            s->sum_e2 += d * d;
            if (fabs(d) > s->max_e) s->max_e = fabs(d);
            s->zeros++;
            out[i] = 0.0f;
            continue;
        }
        out[i] = f;
        s->zeros += f == 0.0f;
        if (mg < hi) {
            if (mid < cap) {
                idx[mid] = (uint32_t)i;
                mag[mid] = mg;
            }
            mid++;
        }
    }
    *nmid = mid;
    *nbad = bad;
    return nbelow;
}

NPUC_AVX2 static uint64_t mag_count_eq_avx2(const float *x, size_t n, uint32_t t) {
    const __m256i vt = _mm256_set1_epi32((int32_t)t);
    uint64_t c = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i m = magv(_mm256_loadu_ps(x + i));
        c += (unsigned)__builtin_popcount(
            (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(m, vt))));
    }
    for (; i < n; i++) c += npuc_mag(x[i]) == t;
    return c;
}

NPUC_AVX2 static void mag_zero_below_avx2(const float *x, size_t n, uint32_t t, float *out,
                                          npuc_prune_sums *s) {
    if (t > 0x7fffffffu) { /* every finite value: not a case the drivers produce */
        npuc__mag_zero_below_ref(x, n, t, out, s);
        return;
    }
    const __m256i vt = _mm256_set1_epi32((int32_t)t);
    vsums v;
    vs_init(&v);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 xv = _mm256_loadu_ps(x + i);
        const __m256 z = _mm256_castsi256_ps(_mm256_cmpgt_epi32(vt, magv(xv)));
        const __m256 o = _mm256_andnot_ps(z, xv);
        _mm256_storeu_ps(out + i, o);
        vs_add(&v, xv, z, o);
    }
    vs_flush(&v, s);
    npuc__mag_zero_below_ref(x + i, n - i, t, out + i, s);
}

/* ---------------------------------------------------------------- N:M */

NPUC_AVX2 static void nm_rows_avx2(const float *x, float *out, size_t ld, unsigned rows, size_t len,
                                   unsigned n, npuc_prune_sums *s) {
    const unsigned drop = rows > n ? rows - n : 0;
    size_t l = 0;
    vsums v;
    vs_init(&v);
    if (drop == 0) { /* nothing to zero: a copy, with the sums */
        for (unsigned r = 0; r < rows; r++) {
            size_t k = 0;
            for (; k + 8 <= len; k += 8) {
                const __m256 xv = _mm256_loadu_ps(x + r * ld + k);
                _mm256_storeu_ps(out + r * ld + k, xv);
                vs_add(&v, xv, _mm256_setzero_ps(), xv);
            }
            for (; k < len; k++) {
                const float f = x[r * ld + k];
                out[r * ld + k] = f;
                v.zeros += f == 0.0f;
                const double d = (double)f;
                s->sum_w2 += d * d;
            }
        }
        vs_flush(&v, s);
        return;
    }
    const __m256i vdrop = _mm256_set1_epi32((int32_t)drop);
    for (; l + 8 <= len; l += 8) {
        __m256 xv[16];
        __m256i m[16], rank[16];
        for (unsigned r = 0; r < rows; r++) {
            xv[r] = _mm256_loadu_ps(x + r * ld + l);
            m[r] = magv(xv[r]);
            rank[r] = _mm256_set1_epi32((int32_t)r);
        }
        for (unsigned j = 1; j < rows; j++)
            for (unsigned e = 0; e < j; e++) {
                const __m256i g = _mm256_cmpgt_epi32(m[e], m[j]); /* -1 where mag_e > mag_j */
                rank[j] = _mm256_add_epi32(rank[j], g);            /* e < j: counted unless mag_e > mag_j */
                rank[e] = _mm256_sub_epi32(rank[e], g);            /* j > e: counted when mag_j < mag_e */
            }
        for (unsigned r = 0; r < rows; r++) {
            const __m256 z = _mm256_castsi256_ps(_mm256_cmpgt_epi32(vdrop, rank[r]));
            const __m256 o = _mm256_andnot_ps(z, xv[r]);
            _mm256_storeu_ps(out + r * ld + l, o);
            vs_add(&v, xv[r], z, o);
        }
    }
    vs_flush(&v, s);
    for (; l < len; l++) npuc__nm_group_ref(x + l, out + l, ld, rows, n, s);
}

NPUC_AVX2 static void nm_contig_avx2(const float *x, float *out, size_t ngroups, unsigned n, unsigned m,
                                     npuc_prune_sums *s) {
    if (m != 2 && m != 4 && m != 8) {
        for (size_t g = 0; g < ngroups; g++) npuc__nm_group_ref(x + g * m, out + g * m, 1, m, n, s);
        return;
    }
    /* Per rotation k: the VPERMD index and the lanes where the rotated
     * element has the lower index (j + k >= m). */
    __m256i perm[8], wrap[8];
    int32_t pi[8], wi[8], base[8];
    for (unsigned k = 1; k < m; k++) {
        for (unsigned q = 0; q < 8; q++) {
            const unsigned j = q % m;
            pi[q] = (int32_t)((q / m) * m + (j + k) % m);
            wi[q] = j + k >= m ? -1 : 0;
        }
        perm[k] = _mm256_loadu_si256((const __m256i *)pi);
        wrap[k] = _mm256_loadu_si256((const __m256i *)wi);
    }
    for (unsigned q = 0; q < 8; q++) base[q] = (int32_t)(q % m);
    const __m256i vbase = _mm256_loadu_si256((const __m256i *)base);
    const __m256i vdrop = _mm256_set1_epi32((int32_t)(m - n));
    const size_t total = ngroups * m;
    vsums v;
    vs_init(&v);
    size_t i = 0;
    for (; i + 8 <= total; i += 8) {
        const __m256 xv = _mm256_loadu_ps(x + i);
        const __m256i mg = magv(xv);
        __m256i rank = vbase; /* +1 for every rotation whose element lies below j */
        for (unsigned k = 1; k < m; k++) {
            const __m256i rot = _mm256_permutevar8x32_epi32(mg, perm[k]);
            const __m256i gt_rot = _mm256_cmpgt_epi32(rot, mg); /* wrap lanes: -[mag_e > mag_j] */
            const __m256i gt_me = _mm256_cmpgt_epi32(mg, rot);  /* other lanes: +[mag_e < mag_j] */
            const __m256i c = _mm256_blendv_epi8(_mm256_sub_epi32(_mm256_setzero_si256(), gt_me), gt_rot, wrap[k]);
            rank = _mm256_add_epi32(rank, c);
        }
        const __m256 z = _mm256_castsi256_ps(_mm256_cmpgt_epi32(vdrop, rank));
        const __m256 o = _mm256_andnot_ps(z, xv);
        _mm256_storeu_ps(out + i, o);
        vs_add(&v, xv, z, o);
    }
    vs_flush(&v, s);
    for (size_t g = i / m; g < ngroups; g++) npuc__nm_group_ref(x + g * m, out + g * m, 1, m, n, s);
}

static uint64_t mag_hist_scalar(const float *x, size_t n, int sel_shift, uint32_t sel, int bin_shift,
                                uint32_t *hist) {
    return npuc_nm_kernels_ref()->mag_hist(x, n, sel_shift, sel, bin_shift, hist);
}

static const npuc_nm_kernel_table g_avx2 = {
    .name = "avx2",
    .mag_split = mag_split_avx2,
    .mag_hist = mag_hist_scalar, /* scatter increments: SIMD does not help */
    .mag_count_eq = mag_count_eq_avx2,
    .mag_zero_below = mag_zero_below_avx2,
    .nm_rows = nm_rows_avx2,
    .nm_contig = nm_contig_avx2,
};

const npuc_nm_kernel_table *npuc_nm_kernels_avx2(void) {
    if (npuc_cpu_has(NPUC_CPU_AVX2 | NPUC_CPU_FMA | NPUC_CPU_POPCNT)) {
        pthread_once(&g_pack_once, pack_lut_init);
        return &g_avx2;
    }
    return NULL;
}

#else

const npuc_nm_kernel_table *npuc_nm_kernels_avx2(void) { return NULL; }

#endif
