/*
 * kquant_ref.c - the scalar reference of ggml's super-block quantizers and
 * of the importance-weighted legacy ones (the specification of
 * kquant_kernels.h), written from the block definitions (ggml-common.h)
 * and the arithmetic of ggml-quants.c.
 *
 * Block layouts (little-endian; d, dmin are IEEE fp16; 256 values each):
 *   Q2_K   84 bytes: scales[16] (low nibble scale, high nibble min),
 *                    qs[64] (2 bits), d, dmin        x = d*sc*q - dmin*m
 *   Q3_K  110 bytes: hmask[32] (third bit), qs[64] (low 2 bits),
 *                    scales[12] (16 six-bit scales, biased by 32), d
 *                                                    x = d*(sc-32)*(q-4)
 *   Q4_K  144 bytes: d, dmin, scales[12] (8 six-bit scales and mins),
 *                    qs[128] (4 bits)                x = d*sc*q - dmin*m
 *   Q5_K  176 bytes: d, dmin, scales[12], qh[32] (fifth bit), qs[128]
 *   Q6_K  210 bytes: ql[128] (low 4 bits), qh[64] (high 2 bits),
 *                    int8 scales[16], d              x = d*sc*(q-32)
 * Q2_K, Q3_K and Q6_K have 16 sub-blocks of 16 values, Q4_K and Q5_K 8 of
 * 32.  Where each value's bits go is in the pack_* functions below.
 *
 * The search, per type (rmin, rdelta, nstep are the candidate scale grid):
 *   - Q2_K ref: per sub-block an asymmetric fit (qkx, weights |x|, -0.5,
 *     0.1, 15 steps, absolute error), then 4-bit scales and mins relative
 *     to their maxima; weighted: qkx with weights imp*sqrt(sigma2 + x^2)
 *     (-0.9, 0.05, 36, squared error), scales and mins by qp.
 *   - Q3_K ref: a symmetric fit with coordinate descent (q3); weighted: qx
 *     with weights imp*sqrt(sigma2 + x^2), scales by qx over 16 values.
 *   - Q4_K/Q5_K ref: qkx with weights av_x + |x| (-1/-0.5, 0.1, 20/15);
 *     weighted: qkx (-0.9, 0.05, 36), scales and mins by qp.
 *   - Q6_K: qx with weights x^2 (ref) or imp (weighted), 8-bit scales.
 *   - Q4_0/Q5_0 weighted: qx; Q4_1/Q5_1 weighted: qkx (-0.9, 0.05, 36);
 *     sigma2 is the mean square of the whole row.
 * After the scales are stored as fp16 and small integers, the values are
 * requantized against the stored (decoded) scales.  Every expression keeps
 * ggml's operation order; this file is compiled with -ffp-contract=off.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <npuc/dtype.h>

#include "kernels/kquant_kernels.h"

enum { QK = NPUC_KQ_QK };
typedef npuc_kq_ops kq_ops;
enum { T_Q4_0 = 2, T_Q4_1 = 3, T_Q5_0 = 6, T_Q5_1 = 7, T_Q2_K = 10, T_Q3_K, T_Q4_K, T_Q5_K, T_Q6_K };

#define EPS 1e-15f /* ggml's GROUP_MAX_EPS */

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

#define nearest npuc_kq_nearest

/* Stores v as fp16 at p; returns its float value, and sets *bad when it
 * is not finite. */
static float h16(float v, unsigned char *p, int *bad) {
    const uint16_t h = npuc_f32_to_f16(v);
    p[0] = (unsigned char)(h & 0xff);
    p[1] = (unsigned char)(h >> 8);
    if ((h & 0x7c00) == 0x7c00) *bad = 1;
    return npuc_f16_to_f32(h);
}

static float rd16(const unsigned char *p) { return npuc_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

/* 1 when every |x[j]| < 2^59 (so not NaN or infinite).  Larger values
 * overflow ggml's float sums of squares, and a block holding one would
 * have an fp16 scale beyond 65504 anyway (the scales are at least
 * max|x| / 4096), so refusing them refuses nothing ggml stores finitely. */
static int finite_n(const float *x, int n) {
    uint32_t bad = 0;
    for (int j = 0; j < n; j++) {
        uint32_t u;
        memcpy(&u, &x[j], 4);
        bad |= (uint32_t)((u & 0x7fffffffu) >= 0x5d000000u);
    }
    return !bad;
}

/* ---- the searches ------------------------------------------------------ */

/* The value of largest magnitude with its sign (the first on ties), or 0
 * with L zeroed when that magnitude is below ggml's GROUP_MAX_EPS (the
 * searches' "all zero" case). */
static float signed_amax(int n, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    return max;
}

/* Symmetric fit of n values to nmax + [-nmax, nmax-1] with weights qw (or
 * x^2 when qw is NULL): ggml's make_qx_quants with rmse_type 1.  L gets
 * the codes; returns the scale. */
float npuc_kq_fit_qx_ref(int n, int nmax, const float *x, int8_t *L, const float *qw) {
    const float max = signed_amax(n, x, L);
    if (max == 0.0f) return 0.f;
    float iscale = (float)(-nmax) / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest(iscale * x[i]);
        l = imax(-nmax, imin(nmax - 1, l));
        L[i] = (int8_t)(l + nmax);
        const float w = qw ? qw[i] : x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest(iscale * x[i]);
            l = imax(-nmax, imin(nmax - 1, l));
            const float w = qw ? qw[i] : x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) {
                const int l = nearest(iscale * x[i]);
                L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Q3_K's reference fit: ggml's make_q3_quants with do_rmse (weights x^2,
 * up to five rounds of per-value coordinate descent). */
float npuc_kq_fit_q3_ref(int n, int nmax, const float *x, int8_t *L) {
    const float max = signed_amax(n, x, L);
    if (max == 0.0f) return 0.f;
    const float iscale = (float)(-nmax) / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest(iscale * x[i]);
        l = imax(-nmax, imin(nmax - 1, l));
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * (float)L[i] * (float)L[i];
                int nl = nearest(x[i] * sl2 / slx);
                nl = imax(-nmax, imin(nmax - 1, nl));
                if (nl != L[i]) {
                    slx += w * x[i] * (float)nl;
                    sl2 += w * (float)nl * (float)nl;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)nl;
                        sumlx = slx;
                        suml2 = sl2;
                        ++changed;
                    }
                }
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; ++i) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Asymmetric fit of n values to [0, nmax] with weights w: ggml's
 * make_qkx2_quants / make_qkx3_quants (the same arithmetic when weights
 * are given).  *the_min gets minus the offset; returns the scale. */
float npuc_kq_fit_qkx_ref(int n, int nmax, const float *x, const float *w, uint8_t *L, float *the_min, float rmin,
                          float rdelta, int nstep, int use_mad) {
    uint8_t Laux[32];
    float min = x[0], max = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max <= min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1 / iscale;
    float best = 0;
    for (int i = 0; i < n; ++i) {
        const int l = nearest(iscale * (x[i] - min));
        L[i] = (uint8_t)imax(0, imin(nmax, l));
        float diff = scale * (float)L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best += w[i] * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest(iscale * (x[i] - min));
            l = imax(0, imin(nmax, l));
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * (float)l;
            sum_l2 += w[i] * (float)l * (float)l;
            sum_xl += w[i] * (float)l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float err = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * (float)Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                err += w[i] * diff;
            }
            if (err < best) {
                memcpy(L, Laux, (size_t)n);
                best = err;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

static void qkxm_ref(int nsub, int n, int nmax, const float *x, const float *w, uint8_t *L, float *scales,
                     float *mins, float rmin, float rdelta, int nstep, int use_mad) {
    for (int j = 0; j < nsub; ++j)
        scales[j] = npuc_kq_fit_qkx_ref(n, nmax, x + n * j, w + n * j, L + n * j, &mins[j], rmin, rdelta, nstep,
                                        use_mad);
}

static void q3m_ref(int nsub, int n, int nmax, const float *x, int8_t *L, float *scales) {
    for (int j = 0; j < nsub; ++j) scales[j] = npuc_kq_fit_q3_ref(n, nmax, x + n * j, L + n * j);
}

static void qxm_ref(int nsub, int n, int nmax, const float *x, int8_t *L, float *scales, const float *qw) {
    for (int j = 0; j < nsub; ++j) scales[j] = npuc_kq_fit_qx_ref(n, nmax, x + n * j, L + n * j, qw ? qw + n * j : NULL);
}

/* Non-negative fit of n sub-block scales (or mins) to [0, nmax] with
 * weights qw: ggml's make_qp_quants.  L keeps ggml's uint8_t wrap of a
 * negative code. */
static float fit_qp(int n, int nmax, const float *x, uint8_t *L, const float *qw) {
    float max = 0;
    for (int i = 0; i < n; ++i) max = max > x[i] ? max : x[i];
    if (max < EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = (float)nmax / max;
    for (int i = 0; i < n; ++i) L[i] = (uint8_t)nearest(iscale * x[i]);
    const float scale = 1 / iscale;
    float best = 0;
    for (int i = 0; i < n; ++i) {
        const float diff = x[i] - scale * (float)L[i];
        best += qw[i] * diff * diff;
    }
    for (int is = -4; is <= 4; ++is) {
        if (is == 0) continue;
        const float iscale_is = (0.1f * (float)is + (float)nmax) / max;
        const float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; ++i) {
            const int l = imin(nmax, nearest(iscale_is * x[i]));
            const float diff = x[i] - scale_is * (float)l;
            mse += qw[i] * diff * diff;
        }
        if (mse < best) {
            best = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = imin(nmax, nearest(iscale * x[i]));
        L[i] = (uint8_t)l;
        sumlx += qw[i] * x[i] * (float)l;
        suml2 += qw[i] * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = qw[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            float sl2 = suml2 - w * (float)L[i] * (float)L[i];
            if (slx > 0 && sl2 > 0) {
                const int nl = imin(nmax, nearest(x[i] * sl2 / slx));
                if (nl != L[i]) {
                    slx += w * x[i] * (float)nl;
                    sl2 += w * (float)nl * (float)nl;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)nl;
                        sumlx = slx;
                        suml2 = sl2;
                        ++changed;
                    }
                }
            }
        }
        if (!changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* ---- packing ----------------------------------------------------------- */

/* Four 2-bit codes per byte: byte 32*h + l holds values 128*h + l + 32*s
 * at bits 2*s (Q2_K, Q3_K's low bits). */
static void pack_2bit(const uint8_t *L, unsigned char *qs) {
    for (int j = 0; j < QK; j += 128)
        for (int l = 0; l < 32; ++l)
            qs[j / 4 + l] = (unsigned char)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                            (L[j + l + 96] << 6));
}

/* The 6-bit scale sc and min m of sub-block j of a Q4_K/Q5_K block
 * (ggml's get_scale_min_k4). */
static void scale_min_k4(int j, const unsigned char *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
    }
}

/* Eight 6-bit scales and mins into 12 bytes: j < 4 in the low 6 bits of
 * bytes j and j + 4; j >= 4 in the nibbles of byte j + 4 with their top
 * two bits in the top bits of bytes j - 4 and j. */
static void pack_k4(const uint8_t *ls, const uint8_t *lm, unsigned char *s) {
    for (int j = 0; j < 8; ++j) {
        if (j < 4) {
            s[j] = ls[j];
            s[j + 4] = lm[j];
        } else {
            s[j + 4] = (unsigned char)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
            s[j - 4] |= (unsigned char)((ls[j] >> 4) << 6);
            s[j - 0] |= (unsigned char)((lm[j] >> 4) << 6);
        }
    }
}

/* Q4_K/Q5_K requantization against the stored scales: L[32*j + i] in
 * [0, nmax]; sub-blocks of scale 0 keep their codes. */
static void requant_k4(const float *x, const unsigned char *dd, const unsigned char *s, int nmax, uint8_t *L) {
    for (int j = 0; j < QK / 32; ++j) {
        uint8_t sc, m;
        scale_min_k4(j, s, &sc, &m);
        const float d = rd16(dd) * (float)sc;
        if (!(d != 0.0f)) continue;
        const float dm = rd16(dd + 2) * (float)m;
        for (int ii = 0; ii < 32; ++ii) {
            const int l = nearest((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)imax(0, imin(nmax, l));
        }
    }
}

static void pack_q4k(const uint8_t *L, unsigned char *q) {
    for (int j = 0; j < QK; j += 64, q += 32)
        for (int l = 0; l < 32; ++l) q[l] = (unsigned char)(L[j + l] | (L[j + l + 32] << 4));
}

static void pack_q5k(const uint8_t *L, unsigned char *qh, unsigned char *ql) {
    memset(qh, 0, QK / 8);
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < QK; n += 64, ql += 32) {
        for (int j = 0; j < 32; ++j) {
            int l1 = L[n + j], l2 = L[n + j + 32];
            if (l1 > 15) {
                l1 -= 16;
                qh[j] |= m1;
            }
            if (l2 > 15) {
                l2 -= 16;
                qh[j] |= m2;
            }
            ql[j] = (unsigned char)(l1 | (l2 << 4));
        }
        m1 = (uint8_t)(m1 << 2);
        m2 = (uint8_t)(m2 << 2);
    }
}

/* The weighted paths' weights w[i] = imp[i] * sqrt(sigma2 + x[i]^2) for a
 * block's 256 values, and sw[j] the sum of group j's gs weights, in order. */
static void imp_weights(const float *x, const float *qw, float sigma2, int gs, float *w, float *sw) {
    for (int j = 0; j < QK / gs; ++j) {
        float *wj = w + gs * j;
        for (int l = 0; l < gs; ++l) wj[l] = qw[gs * j + l] * sqrtf(sigma2 + x[gs * j + l] * x[gs * j + l]);
        float sumw = 0;
        for (int l = 0; l < gs; ++l) sumw += wj[l];
        sw[j] = sumw;
    }
}

/* ---- Q2_K -------------------------------------------------------------- */

static void q2k_finish(const float *x, unsigned char *b, uint8_t *L) {
    const unsigned char *s = b;
    for (int j = 0; j < QK / 16; ++j) {
        const float d = rd16(b + 80) * (float)(s[j] & 0xF);
        if (!(d != 0.0f)) continue;
        const float dm = rd16(b + 82) * (float)(s[j] >> 4);
        for (int ii = 0; ii < 16; ++ii) {
            const int l = nearest((x[16 * j + ii] + dm) / d);
            L[16 * j + ii] = (uint8_t)imax(0, imin(3, l));
        }
    }
    pack_2bit(L, b + 16);
}

static int q2k_ref(const kq_ops *o, const float *x, unsigned char *b, const float *qw) {
    (void)qw;
    uint8_t L[QK];
    float w[QK], mins[QK / 16], scales[QK / 16];
    float max_scale = 0, max_min = 0;
    int bad = 0;
    for (int l = 0; l < QK; ++l) w[l] = fabsf(x[l]);
    o->qkxm(QK / 16, 16, 3, x, w, L, scales, mins, -0.5f, 0.1f, 15, 1);
    for (int j = 0; j < QK / 16; ++j) {
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
        const float iscale = 15.f / max_scale;
        for (int j = 0; j < QK / 16; ++j) b[j] = (unsigned char)nearest(iscale * scales[j]);
        h16(max_scale / 15.f, b + 80, &bad);
    } else {
        memset(b, 0, QK / 16);
        h16(0.f, b + 80, &bad);
    }
    if (max_min > 0) {
        const float iscale = 15.f / max_min;
        for (int j = 0; j < QK / 16; ++j) b[j] |= (unsigned char)(nearest(iscale * mins[j]) << 4);
        h16(max_min / 15.f, b + 82, &bad);
    } else {
        h16(0.f, b + 82, &bad);
    }
    q2k_finish(x, b, L);
    return bad ? -1 : 0;
}

static int q2k_imp(const kq_ops *o, const float *x, unsigned char *b, const float *qw) {
    uint8_t L[QK], Ls[QK / 16], Lm[QK / 16];
    float w[QK], mins[QK / 16], scales[QK / 16], sw[QK / 16];
    int bad = 0;
    float sumx2 = 0;
    for (int j = 0; j < QK; ++j) sumx2 += x[j] * x[j];
    const float sigma2 = sumx2 / QK;
    imp_weights(x, qw, sigma2, 16, w, sw);
    o->qkxm(QK / 16, 16, 3, x, w, L, scales, mins, -0.9f, 0.05f, 36, 0);
    const float dm = fit_qp(QK / 16, 15, scales, Ls, sw);
    const float mm = fit_qp(QK / 16, 15, mins, Lm, sw);
    h16(dm, b + 80, &bad);
    h16(mm, b + 82, &bad);
    for (int j = 0; j < QK / 16; ++j) b[j] = (unsigned char)(Ls[j] | (Lm[j] << 4));
    q2k_finish(x, b, L);
    return bad ? -1 : 0;
}

/* ---- Q3_K -------------------------------------------------------------- */

/* Sixteen codes l in [0, 63] into the 12 scale bytes at s (zeroed first):
 * low nibbles in bytes 0..7 (j < 8 low, j >= 8 high nibble of j - 8), the
 * top two bits in byte 8 + j % 4 at bit 2 * (j / 4). */
static void pack_q3_scales(const int *ls, unsigned char *s) {
    memset(s, 0, 12);
    for (int j = 0; j < QK / 16; ++j) {
        int l = ls[j];
        if (j < 8)
            s[j] = (unsigned char)(l & 0xF);
        else
            s[j - 8] |= (unsigned char)((l & 0xF) << 4);
        l >>= 4;
        s[j % 4 + 8] |= (unsigned char)(l << (2 * (j / 4)));
    }
}

static int q3_scale(const unsigned char *s, int j) {
    int8_t sc = (int8_t)(j < 8 ? s[j] & 0xF : s[j - 8] >> 4);
    sc = (int8_t)((sc | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32);
    return sc;
}

static void q3k_finish(const float *x, unsigned char *b, int8_t *L) {
    const unsigned char *s = b + 96;
    for (int j = 0; j < QK / 16; ++j) {
        const float d = rd16(b + 108) * (float)q3_scale(s, j);
        if (!(d != 0.0f)) continue;
        for (int ii = 0; ii < 16; ++ii) {
            const int l = nearest(x[16 * j + ii] / d);
            L[16 * j + ii] = (int8_t)(imax(-4, imin(3, l)) + 4);
        }
    }
    unsigned char *hmask = b;
    memset(hmask, 0, QK / 8);
    int m = 0;
    uint8_t hm = 1;
    uint8_t U[QK];
    for (int j = 0; j < QK; ++j) {
        int v = L[j];
        if (v > 3) {
            hmask[m] |= hm;
            v -= 4;
        }
        U[j] = (uint8_t)v;
        if (++m == QK / 8) {
            m = 0;
            hm = (uint8_t)(hm << 1);
        }
    }
    pack_2bit(U, b + 32);
}

static int q3k_ref(const kq_ops *o, const float *x, unsigned char *b, const float *qw) {
    (void)qw;
    int8_t L[QK];
    float scales[QK / 16];
    float max_scale = 0, amax = 0;
    int bad = 0;
    o->q3m(QK / 16, 16, 4, x, L, scales);
    for (int j = 0; j < QK / 16; ++j) {
        const float a = fabsf(scales[j]);
        if (a > amax) {
            amax = a;
            max_scale = scales[j];
        }
    }
    if (max_scale != 0.0f) {
        const float iscale = -32.f / max_scale;
        int ls[QK / 16];
        for (int j = 0; j < QK / 16; ++j) {
            int8_t l = (int8_t)nearest(iscale * scales[j]);
            l = (int8_t)(imax(-32, imin(31, l)) + 32);
            ls[j] = l;
        }
        pack_q3_scales(ls, b + 96);
        h16(1 / iscale, b + 108, &bad);
    } else {
        memset(b + 96, 0, 12);
        h16(0.f, b + 108, &bad);
    }
    q3k_finish(x, b, L);
    return bad ? -1 : 0;
}

static int q3k_imp(const kq_ops *o, const float *x, unsigned char *b, const float *qw) {
    int8_t L[QK], Ls[QK / 16];
    float scales[QK / 16], w[QK], sw[QK / 16];
    int bad = 0;
    float sumx2 = 0;
    for (int j = 0; j < QK; ++j) sumx2 += x[j] * x[j];
    const float sigma2 = 2 * sumx2 / QK;
    imp_weights(x, qw, sigma2, 16, w, sw);
    o->qxm(QK / 16, 16, 4, x, L, scales, w);
    const float d_block = o->qx(QK / 16, 32, scales, Ls, sw);
    int ls[QK / 16];
    for (int j = 0; j < QK / 16; ++j) ls[j] = Ls[j];
    pack_q3_scales(ls, b + 96);
    h16(d_block, b + 108, &bad);
    q3k_finish(x, b, L);
    return bad ? -1 : 0;
}

/* ---- Q4_K and Q5_K ----------------------------------------------------- */

/* Stores the scales and mins (6-bit codes ls, lm; fp16 d and dmin),
 * requantizes against them and packs the codes: the end of every Q4_K and
 * Q5_K path.  -1 when d or dmin is not finite in fp16. */
static int q45k_finish(const float *x, unsigned char *b, uint8_t *L, const uint8_t *ls, const uint8_t *lm, float d,
                       float dmin, int five) {
    int bad = 0;
    pack_k4(ls, lm, b + 4);
    h16(d, b, &bad);
    h16(dmin, b + 2, &bad);
    requant_k4(x, b, b + 4, five ? 31 : 15, L);
    if (five)
        pack_q5k(L, b + 16, b + 48);
    else
        pack_q4k(L, b + 16);
    return bad ? -1 : 0;
}

/* The reference search of Q4_K (five = 0) and Q5_K (five = 1). */
static int q45k_ref(const kq_ops *o, const float *x, unsigned char *b, int five) {
    const int nmax = five ? 31 : 15;
    uint8_t L[QK], ls[8], lm[8];
    float w[QK], mins[QK / 32], scales[QK / 32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK / 32; ++j) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; ++l) w[32 * j + l] = av_x + fabsf(x[32 * j + l]);
    }
    o->qkxm(QK / 32, 32, nmax, x, w, L, scales, mins, five ? -0.5f : -1.f, 0.1f, five ? 15 : 20, 0);
    for (int j = 0; j < QK / 32; ++j) {
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < QK / 32; ++j) {
        const uint8_t a = (uint8_t)nearest(inv_scale * scales[j]), c = (uint8_t)nearest(inv_min * mins[j]);
        ls[j] = a < 63 ? a : 63;
        lm[j] = c < 63 ? c : 63;
    }
    return q45k_finish(x, b, L, ls, lm, max_scale / 63.f, max_min / 63.f, five);
}

static int q45k_imp(const kq_ops *o, const float *x, unsigned char *b, const float *qw, int five) {
    const int nmax = five ? 31 : 15;
    uint8_t L[QK], Ls[8], Lm[8];
    float w[QK], sw[QK / 32], mins[QK / 32], scales[QK / 32];
    float sum_x2 = 0;
    for (int l = 0; l < QK; ++l) sum_x2 += x[l] * x[l];
    const float sigma2 = 2 * sum_x2 / QK;
    imp_weights(x, qw, sigma2, 32, w, sw);
    o->qkxm(QK / 32, 32, nmax, x, w, L, scales, mins, -0.9f, 0.05f, 36, 0);
    const float d_block = fit_qp(QK / 32, 63, scales, Ls, sw);
    const float m_block = fit_qp(QK / 32, 63, mins, Lm, sw);
    if (five) /* ggml caps Q5_K's codes at 63, not Q4_K's */
        for (int j = 0; j < QK / 32; ++j) {
            Ls[j] = Ls[j] < 63 ? Ls[j] : 63;
            Lm[j] = Lm[j] < 63 ? Lm[j] : 63;
        }
    return q45k_finish(x, b, L, Ls, Lm, d_block, m_block, five);
}

static int q4k_ref(const kq_ops *o, const float *x, unsigned char *b, const float *qw) { (void)qw; return q45k_ref(o, x, b, 0); }
static int q5k_ref(const kq_ops *o, const float *x, unsigned char *b, const float *qw) { (void)qw; return q45k_ref(o, x, b, 1); }
static int q4k_imp(const kq_ops *o, const float *x, unsigned char *b, const float *qw) { return q45k_imp(o, x, b, qw, 0); }
static int q5k_imp(const kq_ops *o, const float *x, unsigned char *b, const float *qw) { return q45k_imp(o, x, b, qw, 1); }

/* ---- Q6_K -------------------------------------------------------------- */

/* Reference (qw NULL: weights x^2) and weighted (qw) alike. */
static int q6k(const kq_ops *o, const float *x, unsigned char *b, const float *qw) {
    int8_t L[QK];
    float scales[QK / 16];
    float max_scale = 0, max_abs = 0;
    int bad = 0;
    o->qxm(QK / 16, 16, 32, x, L, scales, qw);
    for (int ib = 0; ib < QK / 16; ++ib) {
        const float a = fabsf(scales[ib]);
        if (a > max_abs) {
            max_abs = a;
            max_scale = scales[ib];
        }
    }
    if (max_abs < EPS) {
        memset(b, 0, 210);
        return 0;
    }
    const float iscale = -128.f / max_scale;
    int8_t *sc = (int8_t *)(void *)(b + 192);
    h16(1 / iscale, b + 208, &bad);
    for (int ib = 0; ib < QK / 16; ++ib) sc[ib] = (int8_t)imin(127, nearest(iscale * scales[ib]));
    for (int j = 0; j < QK / 16; ++j) {
        const float d = rd16(b + 208) * (float)sc[j];
        if (!(d != 0.0f)) continue;
        for (int ii = 0; ii < 16; ++ii) {
            const int l = nearest(x[16 * j + ii] / d);
            L[16 * j + ii] = (int8_t)(imax(-32, imin(31, l)) + 32);
        }
    }
    unsigned char *ql = b, *qh = b + 128;
    for (int j = 0; j < QK; j += 128, ql += 64, qh += 32) {
        for (int l = 0; l < 32; ++l) {
            const uint8_t v0 = (uint8_t)L[j + l], v1 = (uint8_t)L[j + l + 32], v2 = (uint8_t)L[j + l + 64],
                          v3 = (uint8_t)L[j + l + 96];
            ql[l] = (unsigned char)((v0 & 0xF) | ((v2 & 0xF) << 4));
            ql[l + 32] = (unsigned char)((v1 & 0xF) | ((v3 & 0xF) << 4));
            qh[l] = (unsigned char)((v0 >> 4) | ((v1 >> 4) << 2) | ((v2 >> 4) << 4) | ((v3 >> 4) << 6));
        }
    }
    return bad ? -1 : 0;
}

/* ---- the legacy types' weighted paths ----------------------------------- */

/* Q4_0 (five = 0) and Q5_0 (five = 1) with weights w. */
static int q_0_imp(const kq_ops *o, const float *x, unsigned char *b, const float *w, int five) {
    int8_t L[32];
    int bad = 0;
    const float d = o->qx(32, five ? 16 : 8, x, L, w);
    h16(d, b, &bad);
    unsigned char *qs = b + (five ? 6 : 2);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
        const uint8_t a = (uint8_t)L[j], c = (uint8_t)L[j + 16];
        qs[j] = (unsigned char)((a & 0x0F) | ((c & 0x0F) << 4));
        qh |= (uint32_t)((a & 0x10u) >> 4) << j;
        qh |= (uint32_t)((c & 0x10u) >> 4) << (j + 16);
    }
    if (five)
        for (int i = 0; i < 4; i++) b[2 + i] = (unsigned char)(qh >> (8 * i));
    return bad ? -1 : 0;
}

/* Q4_1 (five = 0) and Q5_1 (five = 1) with weights w. */
static int q_1_imp(const kq_ops *o, const float *x, unsigned char *b, const float *w, int five) {
    uint8_t L[32];
    int bad = 0;
    float min;
    const float d = o->qkx(32, five ? 31 : 15, x, w, L, &min, -0.9f, 0.05f, 36, 0);
    h16(d, b, &bad);
    h16(-min, b + 2, &bad);
    unsigned char *qs = b + (five ? 8 : 4);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
        qs[j] = (unsigned char)((L[j] & 0x0F) | ((L[j + 16] & 0x0F) << 4));
        qh |= (uint32_t)((L[j] & 0x10u) >> 4) << j;
        qh |= (uint32_t)((L[j + 16] & 0x10u) >> 4) << (j + 16);
    }
    if (five)
        for (int i = 0; i < 4; i++) b[4 + i] = (unsigned char)(qh >> (8 * i));
    return bad ? -1 : 0;
}

static size_t legacy_imp(const kq_ops *o, int type, const float *x, unsigned char *y, size_t n, const float *imp) {
    const size_t nb = n / 32, ts = type == T_Q4_0 ? 18 : type == T_Q4_1 ? 20 : type == T_Q5_0 ? 22 : 24;
    float sum_x2 = 0;
    for (size_t j = 0; j < n; ++j) sum_x2 += x[j] * x[j];
    const float sigma2 = sum_x2 / (float)n;
    size_t first = nb;
    for (size_t ib = 0; ib < nb; ++ib) {
        const float *xb = x + 32 * ib, *qw = imp + 32 * ib;
        float w[32];
        for (int j = 0; j < 32; ++j) w[j] = qw[j] * sqrtf(sigma2 + xb[j] * xb[j]);
        int r;
        if (!finite_n(xb, 32))
            r = -1;
        else if (type == T_Q4_0 || type == T_Q5_0)
            r = q_0_imp(o, xb, y + ts * ib, w, type == T_Q5_0);
        else
            r = q_1_imp(o, xb, y + ts * ib, w, type == T_Q5_1);
        if (r != 0 && first == nb) first = ib;
    }
    return first;
}

/* ---- entry points ------------------------------------------------------ */

typedef int (*kq_block_fn)(const kq_ops *o, const float *x, unsigned char *b, const float *qw);

static const kq_ops REF = {"ref", npuc_kq_fit_qkx_ref, npuc_kq_fit_qx_ref, qkxm_ref, qxm_ref, q3m_ref};

const npuc_kq_ops *npuc_kq_ops_ref(void) { return &REF; }

size_t npuc_kq_row(int type, const float *x, unsigned char *y, size_t n, const float *imp) {
    return npuc_kq_row_ops(npuc_kq_ops_best(), type, x, y, n, imp);
}

size_t npuc_kq_row_ops(const kq_ops *o, int type, const float *x, unsigned char *y, size_t n, const float *imp) {
    kq_block_fn fn;
    size_t ts;
    switch (type) {
    case T_Q2_K: fn = imp ? q2k_imp : q2k_ref, ts = 84; break;
    case T_Q3_K: fn = imp ? q3k_imp : q3k_ref, ts = 110; break;
    case T_Q4_K: fn = imp ? q4k_imp : q4k_ref, ts = 144; break;
    case T_Q5_K: fn = imp ? q5k_imp : q5k_ref, ts = 176; break;
    case T_Q6_K: fn = q6k, ts = 210; break;
    case T_Q4_0: case T_Q4_1: case T_Q5_0: case T_Q5_1:
        return imp ? legacy_imp(o, type, x, y, n, imp) : 0;
    default: return 0;
    }
    const size_t nb = n / QK;
    size_t first = nb;
    for (size_t i = 0; i < nb; i++) {
        const float *xb = x + QK * i;
        if ((!finite_n(xb, QK) || fn(o, xb, y + ts * i, imp ? imp + QK * i : NULL) != 0) && first == nb) first = i;
    }
    return first;
}

int npuc_kq_dequantize(int type, const unsigned char *b, float *y, size_t n) {
    const size_t nb = n / QK;
    switch (type) {
    case T_Q2_K:
        for (size_t i = 0; i < nb; i++, b += 84) {
            const float d = rd16(b + 80), min = rd16(b + 82);
            const unsigned char *q = b + 16;
            int is = 0;
            for (int k = 0; k < QK; k += 128, q += 32)
                for (int shift = 0; shift < 8; shift += 2)
                    for (int h = 0; h < 2; h++) {
                        const uint8_t sc = b[is++];
                        const float dl = d * (float)(sc & 0xF), ml = min * (float)(sc >> 4);
                        for (int l = 0; l < 16; ++l) *y++ = dl * (float)((q[l + 16 * h] >> shift) & 3) - ml;
                    }
        }
        return 0;
    case T_Q3_K:
        for (size_t i = 0; i < nb; i++, b += 110) {
            const float d_all = rd16(b + 108);
            const unsigned char *q = b + 32, *hm = b;
            uint8_t m = 1;
            int is = 0;
            for (int k = 0; k < QK; k += 128, q += 32)
                for (int shift = 0; shift < 8; shift += 2, m = (uint8_t)(m << 1))
                    for (int h = 0; h < 2; h++) {
                        const float dl = d_all * (float)q3_scale(b + 96, is++);
                        for (int l = 0; l < 16; ++l)
                            *y++ = dl * (float)(((q[l + 16 * h] >> shift) & 3) - ((hm[l + 16 * h] & m) ? 0 : 4));
                    }
        }
        return 0;
    case T_Q4_K:
    case T_Q5_K: {
        const int five = type == T_Q5_K;
        for (size_t i = 0; i < nb; i++, b += five ? 176 : 144) {
            const float d = rd16(b), min = rd16(b + 2);
            const unsigned char *ql = b + (five ? 48 : 16), *qh = b + 16;
            uint8_t u1 = 1, u2 = 2;
            for (int j = 0, is = 0; j < QK; j += 64, is += 2, ql += 32) {
                uint8_t sc, m;
                scale_min_k4(is, b + 4, &sc, &m);
                const float d1 = d * (float)sc, m1 = min * (float)m;
                scale_min_k4(is + 1, b + 4, &sc, &m);
                const float d2 = d * (float)sc, m2 = min * (float)m;
                for (int l = 0; l < 32; ++l)
                    *y++ = d1 * (float)((ql[l] & 0xF) + (five && (qh[l] & u1) ? 16 : 0)) - m1;
                for (int l = 0; l < 32; ++l)
                    *y++ = d2 * (float)((ql[l] >> 4) + (five && (qh[l] & u2) ? 16 : 0)) - m2;
                u1 = (uint8_t)(u1 << 2);
                u2 = (uint8_t)(u2 << 2);
            }
        }
        return 0;
    }
    case T_Q6_K:
        for (size_t i = 0; i < nb; i++, b += 210) {
            const float d = rd16(b + 208);
            const unsigned char *ql = b, *qh = b + 128;
            const int8_t *sc = (const int8_t *)(const void *)(b + 192);
            for (int k = 0; k < QK; k += 128, y += 128, ql += 64, qh += 32, sc += 8) {
                for (int l = 0; l < 32; ++l) {
                    const int is = l / 16;
                    const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                    const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                    const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                    const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                    y[l + 0] = d * (float)sc[is + 0] * (float)q1;
                    y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                    y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                    y[l + 96] = d * (float)sc[is + 6] * (float)q4;
                }
            }
        }
        return 0;
    default: return -1;
    }
}
