/*
 * test_calib_lanes.c - the range estimators' lane kernels and the one
 * kernel dispatcher (src/kernels/kernels.c).
 *
 * The scalar reference is checked against hand-worked blocks; the SSE2
 * and AVX-512 versions against the reference bit for bit (lanes compared as
 * raw bits, so signed zeros count; a NaN only has to be a NaN) over odd
 * block counts, edge values and unaligned pointers, group_sqerr (whole
 * groups, batches of candidates, odd sizes) likewise.  The MSE range
 * search (calib/range_mse.c) on every fast table must choose the range the
 * reference table chooses (one candidate at a time: the specification),
 * bit for bit, on many random groups of every kind that matters.  The dispatcher is checked to give
 * every family the reference under NPUC_FORCE_REF=1 (set before the first
 * call, in main), which is what makes that variable reach calib too.
 */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/calib_lanes.h"
#include "kernels/cvt_kernels.h"
#include "kernels/nm_kernels.h"
#include "kernels/npuc_kernels.h"
#include "range_internal.h"

/* Bitwise equality, except that any two NaNs are equal: which NaN an
 * operation between two NaNs (or NaN and Inf * 0) yields depends on operand
 * order, which the compiler may commute in the scalar code, and the callers
 * only ask isnan(). */
static void assert_lanes_bits(const float *a, const float *b) {
    for (int j = 0; j < 8; j++) {
        if (isnan(a[j]) && isnan(b[j])) continue;
        uint32_t ua, ub;
        memcpy(&ua, &a[j], 4);
        memcpy(&ub, &b[j], 4);
        if (ua != ub) fail_msg("lane %d: %a (0x%08x) != %a (0x%08x)", j, a[j], ua, b[j], ub);
    }
}

/* Hand-worked: one block, scale 0.5 (inv 2), codes clamped to [-2, 1]. */
static void test_ref_hand(void **state) {
    (void)state;
    const npuc_calib_kernel_table *k = npuc_calib_kernels_ref();
    const float x[8] = {0.0f, 0.3f, -0.3f, 0.76f, -2.0f, 5.0f, 0.25f, -0.0f};
    float l[8], h[8], z[8];
    for (int j = 0; j < 8; j++) l[j] = h[j] = 1.0f, z[j] = 0.0f;
    k->lanes_minmax(x, 1, l, h, z);
    const float want_l[8] = {0.0f, 0.3f, -0.3f, 0.76f, -2.0f, 1.0f, 0.25f, -0.0f};
    const float want_h[8] = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 5.0f, 1.0f, 1.0f};
    assert_lanes_bits(l, want_l);
    assert_lanes_bits(h, want_h);
    /* deq: x*2 clamped to [-2, 1], rounded half to even, times 0.5:
     * 0 -> 0; 0.6 -> 1 -> 0.5; -0.6 -> -1 -> -0.5; 1.52 -> 1 -> 0.5;
     * -4 -> -2 -> -1; 10 -> 1 -> 0.5; 0.5 -> 0 (half to even) -> 0; -0 -> 0. */
    const npuc_lane_q q = {0.5f, 2.0f, -2.0f, 1.0f};
    float e[8] = {0}, cl[8] = {0}, ch[8] = {0};
    const float bnd[2] = {-1.0f, 1.0f};
    k->lanes_sqerr(x, 1, &q, e, bnd, cl, ch);
    const float deq[8] = {0.0f, 0.5f, -0.5f, 0.5f, -1.0f, 0.5f, 0.0f, 0.0f};
    for (int j = 0; j < 8; j++) {
        const float d = deq[j] - x[j];
        assert_true(e[j] == d * d);
    }
    /* Only x = -2 lies below A = -1 (by 1), only x = 5 above B = 1 (by 4). */
    const float want_cl[8] = {0, 0, 0, 0, 1.0f, 0, 0, 0}, want_ch[8] = {0, 0, 0, 0, 0, 16.0f, 0, 0};
    assert_lanes_bits(cl, want_cl);
    assert_lanes_bits(ch, want_ch);
}

static void fill(float *x, size_t n, uint64_t *s, int edge) {
    for (size_t i = 0; i < n; i++) x[i] = npuc_test_randn(s) * 3.0f;
    if (!edge) return;
    for (size_t i = 0; i < n; i += 13) x[i] = -0.0f;
    for (size_t i = 5; i < n; i += 29) x[i] = 1e-40f; /* subnormal */
    for (size_t i = 7; i < n; i += 31) x[i] = 3e38f;
    for (size_t i = 11; i < n; i += 97) x[i] = NAN;
    for (size_t i = 17; i < n; i += 101) x[i] = -INFINITY;
}

/* The fast tables this CPU runs (NULL entries skipped). */
static const npuc_calib_kernel_table *fast_table(int i) {
    return i == 0 ? npuc_calib_kernels_sse2() : npuc_calib_kernels_avx512();
}

static void assert_doubles_bits(const double *a, const double *b, size_t k, const char *what) {
    for (size_t j = 0; j < k; j++) {
        if (isnan(a[j]) && isnan(b[j])) continue;
        if (memcmp(&a[j], &b[j], sizeof a[j]) != 0) fail_msg("%s [%zu]: %a != %a", what, j, a[j], b[j]);
    }
}

static void lanes_match_ref(const npuc_calib_kernel_table *f) {
    const npuc_calib_kernel_table *r = npuc_calib_kernels_ref();
    static const size_t blocks[] = {0, 1, 2, 3, 7, 31, 32, 129};
    uint64_t s = 42;
    float *buf = malloc((129 * 8 + 1) * sizeof *buf);
    assert_non_null(buf);
    for (int edge = 0; edge < 2; edge++)
        for (int off = 0; off < 2; off++)
            for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++) {
                float *x = buf + off; /* off = 1: not 16-byte aligned */
                fill(x, blocks[b] * 8, &s, edge);
                float l1[8], h1[8], z1[8], l2[8], h2[8], z2[8];
                for (int j = 0; j < 8; j++) l1[j] = h1[j] = l2[j] = h2[j] = 0.5f, z1[j] = z2[j] = 0.0f;
                r->lanes_minmax(x, blocks[b], l1, h1, z1);
                f->lanes_minmax(x, blocks[b], l2, h2, z2);
                assert_lanes_bits(l1, l2);
                assert_lanes_bits(h1, h2);
                assert_lanes_bits(z1, z2);
                for (int bits = 2; bits <= 8; bits += 3) {
                    const float qmax = (float)((1 << (bits - 1)) - 1);
                    const npuc_lane_q q = {0.37f / qmax, qmax / 0.37f, -qmax, qmax};
                    const float bnd[2] = {-0.4f, 0.3f};
                    for (int with_bnd = 0; with_bnd < 2; with_bnd++) {
                        float e1[8] = {0}, c1[8] = {0}, d1[8] = {0}, e2[8] = {0}, c2[8] = {0}, d2[8] = {0};
                        r->lanes_sqerr(x, blocks[b], &q, e1, with_bnd ? bnd : NULL, c1, d1);
                        f->lanes_sqerr(x, blocks[b], &q, e2, with_bnd ? bnd : NULL, c2, d2);
                        assert_lanes_bits(e1, e2);
                        assert_lanes_bits(c1, c2);
                        assert_lanes_bits(d1, d2);
                    }
                }
            }
    free(buf);
}

static void test_lanes_match_ref(void **state) {
    (void)state;
    for (int fi = 0; fi < 2; fi++)
        if (fast_table(fi)) lanes_match_ref(fast_table(fi));
}

static void test_group_sqerr_matches_ref(void **state) {
    (void)state;
    const npuc_calib_kernel_table *r = npuc_calib_kernels_ref();
    static const size_t sizes[] = {1, 5, 8, 31, 32, 33, 64, 129, 255, 256, 257, 600};
    uint64_t s = 7;
    float *buf = malloc(601 * sizeof *buf);
    assert_non_null(buf);
    for (int fi = 0; fi < 2; fi++) {
        const npuc_calib_kernel_table *f = fast_table(fi);
        if (!f) continue;
        assert_true(f->batch >= 1);
        for (int edge = 0; edge < 2; edge++)
            for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
                float *x = buf + (si & 1); /* odd: not aligned */
                fill(x, sizes[si], &s, edge);
                npuc_lane_q q[3];
                float bnd[6];
                for (int c = 0; c < 3; c++) {
                    const float qmax = (float)((1 << (2 + 3 * c)) - 1), w = 0.2f + 0.35f * (float)c;
                    q[c] = (npuc_lane_q){w / qmax, qmax / w, c == 1 ? -3.0f : -qmax, qmax};
                    bnd[2 * c] = -w - 0.1f * (float)c;
                    bnd[2 * c + 1] = w;
                }
                const npuc_lane_q qk[5] = {q[0], q[1], q[2], q[1], q[0]};
                /* Bounds: none, finite, or one side infinite on every
                 * candidate (what the MSE search's one-end scans pass). */
                /* 4: symmetric clips {-B, B}, B = vmax * scale, as the
                 * symmetric search passes (a shortcut in the AVX-512 kernel). */
                npuc_lane_q qs[5];
                for (int c = 0; c < 5; c++) {
                    qs[c] = qk[c];
                    qs[c].vmin = -qs[c].vmax;
                }
                for (size_t k = 1; k <= 5; k++)
                    for (int with_bnd = 0; with_bnd < 5; with_bnd++) {
                        float b[10];
                        for (int c = 0; c < 5; c++) {
                            b[2 * c] = with_bnd == 2 ? -INFINITY : bnd[2 * (c % 3)];
                            b[2 * c + 1] = with_bnd == 3 ? INFINITY : bnd[2 * (c % 3) + 1];
                            if (with_bnd == 4) {
                                b[2 * c + 1] = qs[c].vmax * qs[c].scale;
                                b[2 * c] = -b[2 * c + 1];
                            }
                        }
                        const npuc_lane_q *qq = with_bnd == 4 ? qs : qk;
                        double o1[15], o2[15];
                        r->group_sqerr(x, sizes[si], qq, with_bnd ? b : NULL, k, o1);
                        f->group_sqerr(x, sizes[si], qq, with_bnd ? b : NULL, k, o2);
                        assert_doubles_bits(o1, o2, 3 * k, f->name);
                    }
            }
    }
    free(buf);
}

/* A group of kind `kind` (0 Gaussian, 1 heavy tails with outliers, 2 all
 * equal, 3 subnormal, 4 ties on a few levels, 5 mostly zero, 6 positive). */
static void fill_group(float *x, size_t n, int kind, uint64_t *s) {
    const float scale = ldexpf(1.0f, (int)(npuc_test_rand(s) % 40) - 20);
    for (size_t i = 0; i < n; i++) {
        const float g = npuc_test_randn(s);
        switch (kind) {
        case 0: x[i] = g * scale; break;
        case 1: x[i] = (npuc_test_rand(s) % 29 == 0 ? g * 60.0f : g * g * g) * scale; break;
        case 2: x[i] = -0.75f * scale; break;
        case 3: x[i] = g * 1e-41f; break;
        case 4: x[i] = (float)((int)(npuc_test_rand(s) % 7) - 3) * scale; break;
        case 5: x[i] = npuc_test_rand(s) % 4 ? 0.0f : g * scale; break;
        default: x[i] = fabsf(g) * scale + scale; break;
        }
    }
}

static void test_range_mse_fast_matches_ref(void **state) {
    (void)state;
    const int quick = getenv("NPUC_TEST_QUICK") && *getenv("NPUC_TEST_QUICK");
    const npuc_calib_kernel_table *r = npuc_calib_kernels_ref();
    static const size_t sizes[] = {32, 33, 64, 128, 256, 17, 100, 1000};
    static const int bitsv[] = {2, 3, 4, 8};
    const int reps = quick ? 1 : 12;
    float *x = malloc(1000 * sizeof *x);
    const size_t ss = npuc__range_mse_scratch(1000, 2, 0) + npuc__range_mse_scratch(1000, 2, 1);
    void *scratch = malloc(ss);
    assert_non_null(x);
    assert_non_null(scratch);
    uint64_t s = 11;
    int clipped = 0, runs = 0;
    for (int fi = 0; fi < 2; fi++) {
        const npuc_calib_kernel_table *f = fast_table(fi);
        if (!f) continue;
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (int kind = 0; kind < 7; kind++)
                for (int rep = 0; rep < reps; rep++)
                    for (int bi = 0; bi < 4; bi++)
                        for (int sym = 0; sym <= 1; sym++) {
                            const size_t n = sizes[si];
                            fill_group(x, n, kind, &s);
                            float l = x[0], h = x[0];
                            for (size_t i = 1; i < n; i++) {
                                l = fminf(l, x[i]);
                                h = fmaxf(h, x[i]);
                            }
                            if (sym) {
                                h = fmaxf(fabsf(l), fabsf(h));
                                l = -h;
                            }
                            if (l == h) continue; /* range.c keeps such groups as they are */
                            float rl, rh, fl, fh;
                            npuc__range_mse_k(r, x, n, bitsv[bi], sym, l, h, &rl, &rh, scratch);
                            npuc__range_mse_k(f, x, n, bitsv[bi], sym, l, h, &fl, &fh, scratch);
                            if (memcmp(&rl, &fl, 4) != 0 || memcmp(&rh, &fh, 4) != 0)
                                fail_msg("%s n=%zu kind=%d bits=%d sym=%d: ref [%a, %a], fast [%a, %a]",
                                         f->name, n, kind, bitsv[bi], sym, rl, rh, fl, fh);
                            clipped += rl != l || rh != h;
                            runs++;
                        }
    }
    /* The comparison means something only if the search often clips. */
    if (runs) assert_true(clipped > runs / 4);
    free(x);
    free(scratch);
}

/* The MSE search's table of grid factors is this libm's exp2(j / 3), the
 * factors the search used to compute per point. */
static void test_range_mse_grid_is_exp2(void **state) {
    (void)state;
    for (int j = 1; j > -25; j--) {
        const double want = exp2((double)j / 3);
        if (npuc__range_mse_grid(j) != want)
            fail_msg("j=%d: %a != exp2 %a", j, npuc__range_mse_grid(j), want);
    }
    assert_true(isnan(npuc__range_mse_grid(2)) && isnan(npuc__range_mse_grid(-25)));
}

/* main sets NPUC_FORCE_REF=1 before any kernel accessor runs. */
static void test_force_ref_reaches_every_family(void **state) {
    (void)state;
    assert_ptr_equal(npuc_kernels(), npuc_kernels_ref());
    assert_ptr_equal(npuc_nm_kernels(), npuc_nm_kernels_ref());
    assert_ptr_equal(npuc_calib_kernels(), npuc_calib_kernels_ref());
    assert_ptr_equal(npuc_cvt_kernels(), npuc_cvt_kernels_ref());
    /* And the choice is made once: changing the variable later changes nothing. */
    setenv("NPUC_FORCE_REF", "0", 1);
    assert_ptr_equal(npuc_calib_kernels(), npuc_calib_kernels_ref());
    assert_ptr_equal(npuc_kernels(), npuc_kernels_ref());
}

int main(void) {
    setenv("NPUC_FORCE_REF", "1", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ref_hand),
        cmocka_unit_test(test_lanes_match_ref),
        cmocka_unit_test(test_group_sqerr_matches_ref),
        cmocka_unit_test(test_range_mse_fast_matches_ref),
        cmocka_unit_test(test_range_mse_grid_is_exp2),
        cmocka_unit_test(test_force_ref_reaches_every_family),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
