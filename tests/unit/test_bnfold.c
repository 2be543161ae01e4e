/*
 * test_bnfold.c - BatchNorm folding against reference forwards in C.
 *
 * Each layer kind has a direct forward written from its definition (nested
 * loops over spatial positions and kernel taps, not npuc's [outer, C, inner]
 * view): OIHW conv with groups (depthwise included), Conv1d, HWIO conv,
 * Keras depthwise HWIM, grouped transposed conv IOHW, and linear OI / IO.
 * conv-then-BatchNorm in double must equal the folded conv (weights stored
 * as float32, like the files) within 1e-5 relative, with and without bias,
 * with gamma / beta absent.  Then the model driver: pair finding by names,
 * Keras topology, alphabetical Paddle exports, stated pairs and a graph the
 * file states (ONNX edges: it decides before the names, which would pair
 * conv1 / bn1 across a Relu); outputs read back and checked; and every
 * validation error, with nothing written.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "graph/graph_net.h"
#include "testutil.h"

static npuc_ctx *ctx;

static int setup(void **state) { (void)state; return npuc_ctx_new(&ctx) == NPUC_OK ? 0 : -1; }
static int teardown(void **state) { (void)state; npuc_ctx_free(ctx); return 0; }

/* Relative error bound of the acceptance criterion. */
#define FOLD_RTOL 1e-5

/* ------------------------------------------------------------ reference forwards */

enum kind { K_OIHW, K_CONV1D, K_HWIO, K_HWIM, K_IOHW, K_OI, K_IO };

typedef struct layer {
    enum kind kind;
    int cin, cout, kh, kw, groups, mult; /* mult: Keras depthwise multiplier */
    int h, w;                            /* input size */
} layer;

/* Output channels of the layer (= BatchNorm channels). */
static int out_ch(const layer *L) { return L->kind == K_HWIM ? L->cin * L->mult : L->cout; }

static npuc_tensor_info weight_info(const layer *L) {
    npuc_tensor_info t;
    memset(&t, 0, sizeof t);
    t.name = "w";
    t.dtype = NPUC_DTYPE_F32;
    switch (L->kind) {
    case K_OIHW:
        t.rank = 4; t.layout = NPUC_LAYOUT_OIHW;
        t.shape[0] = L->cout; t.shape[1] = L->cin / L->groups; t.shape[2] = L->kh; t.shape[3] = L->kw;
        break;
    case K_CONV1D:
        t.rank = 3; t.layout = NPUC_LAYOUT_OIHW;
        t.shape[0] = L->cout; t.shape[1] = L->cin / L->groups; t.shape[2] = L->kw;
        break;
    case K_HWIO:
        t.rank = 4; t.layout = NPUC_LAYOUT_HWIO;
        t.shape[0] = L->kh; t.shape[1] = L->kw; t.shape[2] = L->cin; t.shape[3] = L->cout;
        break;
    case K_HWIM:
        t.rank = 4; t.layout = NPUC_LAYOUT_HWIM;
        t.shape[0] = L->kh; t.shape[1] = L->kw; t.shape[2] = L->cin; t.shape[3] = L->mult;
        break;
    case K_IOHW:
        t.rank = 4; t.layout = NPUC_LAYOUT_IOHW;
        t.shape[0] = L->cin; t.shape[1] = L->cout / L->groups; t.shape[2] = L->kh; t.shape[3] = L->kw;
        break;
    case K_OI:
        t.rank = 2; t.layout = NPUC_LAYOUT_OI; t.shape[0] = L->cout; t.shape[1] = L->cin;
        break;
    case K_IO:
        t.rank = 2; t.layout = NPUC_LAYOUT_IO; t.shape[0] = L->cin; t.shape[1] = L->cout;
        break;
    }
    t.numel = 1;
    for (int d = 0; d < t.rank; d++) t.numel *= (uint64_t)t.shape[d];
    t.nbytes = t.numel * 4;
    return t;
}

/* Output positions of the layer (per channel). */
static int out_positions(const layer *L, int *oh, int *ow) {
    switch (L->kind) {
    case K_OIHW: case K_HWIO: case K_HWIM: *oh = L->h; *ow = L->w; break;     /* 'same' padding */
    case K_CONV1D: *oh = 1; *ow = L->w; break;
    case K_IOHW: *oh = (L->h - 1) * 2 + L->kh; *ow = (L->w - 1) * 2 + L->kw; break; /* stride 2 */
    default: *oh = *ow = 1;
    }
    return *oh * *ow;
}

/* y[c * P + p]: channel-major output of the layer on input x (float weights
 * wf, bias b or NULL), computed in double.  Inputs are channel-major for
 * PyTorch layouts ([C, H, W]) and channel-last for Keras ([H, W, C]). */
static void forward(const layer *L, const float *wf, const double *b, const double *x, double *y) {
    int oh, ow, P = out_positions(L, &oh, &ow), C = out_ch(L);
    for (int i = 0; i < C * P; i++) y[i] = b ? b[i / P] : 0.0;
    const int H = L->h, W = L->w;
    switch (L->kind) {
    case K_OIHW: case K_CONV1D: {
        int kh = L->kind == K_CONV1D ? 1 : L->kh, ph = kh / 2, pw = L->kw / 2;
        int cpg = L->cin / L->groups, opg = L->cout / L->groups;
        for (int o = 0; o < L->cout; o++)
            for (int yy = 0; yy < oh; yy++)
                for (int xx = 0; xx < ow; xx++) {
                    double acc = 0;
                    int g = o / opg;
                    for (int ci = 0; ci < cpg; ci++)
                        for (int u = 0; u < kh; u++)
                            for (int v = 0; v < L->kw; v++) {
                                int iy = yy + u - ph, ix = xx + v - pw;
                                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                                int c = g * cpg + ci;
                                acc += wf[((o * cpg + ci) * kh + u) * L->kw + v] * x[(c * H + iy) * W + ix];
                            }
                    y[o * P + yy * ow + xx] += acc;
                }
        break;
    }
    case K_HWIO: case K_HWIM: {
        int ph = L->kh / 2, pw = L->kw / 2;
        for (int yy = 0; yy < oh; yy++)
            for (int xx = 0; xx < ow; xx++)
                for (int u = 0; u < L->kh; u++)
                    for (int v = 0; v < L->kw; v++) {
                        int iy = yy + u - ph, ix = xx + v - pw;
                        if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                        const double *px = x + (iy * W + ix) * L->cin;
                        if (L->kind == K_HWIO) {
                            for (int ci = 0; ci < L->cin; ci++)
                                for (int o = 0; o < L->cout; o++)
                                    y[o * P + yy * ow + xx] += wf[((u * L->kw + v) * L->cin + ci) * L->cout + o] * px[ci];
                        } else {
                            for (int ci = 0; ci < L->cin; ci++)
                                for (int m = 0; m < L->mult; m++)
                                    y[(ci * L->mult + m) * P + yy * ow + xx] +=
                                        wf[((u * L->kw + v) * L->cin + ci) * L->mult + m] * px[ci];
                        }
                    }
        break;
    }
    case K_IOHW: {
        /* ConvTranspose2d, stride 2, no padding: input (iy, ix) spreads to
         * output (2 iy + u, 2 ix + v); group g maps inputs g*cpg.. to outputs g*opg.. */
        int cpg = L->cin / L->groups, opg = L->cout / L->groups;
        for (int ci = 0; ci < L->cin; ci++) {
            int g = ci / cpg;
            for (int oc = 0; oc < opg; oc++)
                for (int iy = 0; iy < H; iy++)
                    for (int ix = 0; ix < W; ix++)
                        for (int u = 0; u < L->kh; u++)
                            for (int v = 0; v < L->kw; v++)
                                y[(g * opg + oc) * P + (2 * iy + u) * ow + (2 * ix + v)] +=
                                    wf[((ci * opg + oc) * L->kh + u) * L->kw + v] * x[(ci * H + iy) * W + ix];
        }
        break;
    }
    case K_OI:
        for (int o = 0; o < L->cout; o++)
            for (int i = 0; i < L->cin; i++) y[o] += wf[o * L->cin + i] * x[i];
        break;
    case K_IO:
        for (int o = 0; o < L->cout; o++)
            for (int i = 0; i < L->cin; i++) y[o] += wf[i * L->cout + o] * x[i];
        break;
    }
}

static size_t input_size(const layer *L) {
    if (L->kind == K_OI || L->kind == K_IO) return (size_t)L->cin;
    return (size_t)L->cin * (size_t)(L->kind == K_CONV1D ? 1 : L->h) * (size_t)L->w;
}

/* conv+BN vs folded conv on random input; returns the relative error. */
static double fold_error(const layer *L, int with_bias, int with_gamma, int with_beta, uint64_t seed) {
    npuc_tensor_info t = weight_info(L);
    int oh, ow, P = out_positions(L, &oh, &ow), C = out_ch(L);
    float *w = malloc(t.numel * sizeof *w), *wf2 = malloc(t.numel * sizeof *wf2);
    double *wd = malloc(t.numel * sizeof *wd);
    double *b = malloc(C * sizeof *b), *g = malloc(C * sizeof *g), *be = malloc(C * sizeof *be);
    double *mu = malloc(C * sizeof *mu), *var = malloc(C * sizeof *var), *s = malloc(C * sizeof *s);
    double *sh = malloc(C * sizeof *sh), *b2 = malloc(C * sizeof *b2);
    size_t nx = input_size(L);
    double *x = malloc(nx * sizeof *x), *y0 = malloc((size_t)C * P * sizeof *y0), *y1 = malloc((size_t)C * P * sizeof *y1);
    for (uint64_t i = 0; i < t.numel; i++) w[i] = npuc_test_randn(&seed) * 0.3f;
    for (int c = 0; c < C; c++) {
        b[c] = with_bias ? npuc_test_randn(&seed) * 0.1 : 0.0;
        g[c] = 1.0 + 0.5 * npuc_test_randf(&seed);
        be[c] = 0.2 * npuc_test_randn(&seed);
        mu[c] = 0.3 * npuc_test_randn(&seed);
        var[c] = c == 1 ? 0.0 : 0.1 + fabs((double)npuc_test_randn(&seed)); /* one variance exactly 0 */
    }
    for (size_t i = 0; i < nx; i++) x[i] = npuc_test_randf(&seed);
    const double eps = 1e-3;
    /* Reference: the layer, then BatchNorm, in double. */
    forward(L, w, with_bias ? b : NULL, x, y0);
    for (int c = 0; c < C; c++)
        for (int p = 0; p < P; p++) {
            double v = y0[c * P + p];
            y0[c * P + p] = (with_gamma ? g[c] : 1.0) * (v - mu[c]) / sqrt(var[c] + eps) + (with_beta ? be[c] : 0.0);
        }
    /* Folded: npuc's arithmetic, weights stored as float32. */
    for (uint64_t i = 0; i < t.numel; i++) wd[i] = w[i];
    assert_int_equal(npuc_bnfold_coeffs(ctx, (size_t)C, with_gamma ? g : NULL, with_beta ? be : NULL, mu, var, eps, s, sh),
                     NPUC_OK);
    assert_int_equal(npuc_bnfold_scale_weights(ctx, &t, L->kind == K_IOHW ? L->groups : 1, s, wd), NPUC_OK);
    npuc_bnfold_bias((size_t)C, with_bias ? b : NULL, s, sh, b2);
    for (uint64_t i = 0; i < t.numel; i++) wf2[i] = (float)wd[i];
    for (int c = 0; c < C; c++) b2[c] = (float)b2[c];
    forward(L, wf2, b2, x, y1);
    double num = 0, den = 0;
    for (int i = 0; i < C * P; i++) {
        if (fabs(y1[i] - y0[i]) > num) num = fabs(y1[i] - y0[i]);
        if (fabs(y0[i]) > den) den = fabs(y0[i]);
    }
    free(w); free(wf2); free(wd); free(b); free(g); free(be); free(mu); free(var); free(s); free(sh); free(b2);
    free(x); free(y0); free(y1);
    return num / den;
}

static void test_layers_against_reference(void **state) {
    (void)state;
    static const struct { const char *what; layer L; } CASES[] = {
        {"OIHW conv", {K_OIHW, 3, 5, 3, 3, 1, 0, 6, 5}},
        {"OIHW grouped conv", {K_OIHW, 4, 6, 3, 3, 2, 0, 5, 5}},
        {"OIHW depthwise (groups = channels)", {K_OIHW, 4, 4, 3, 3, 4, 0, 5, 4}},
        {"OIHW depthwise, multiplier 2", {K_OIHW, 3, 6, 3, 3, 3, 0, 4, 4}},
        {"Conv1d", {K_CONV1D, 3, 4, 1, 5, 1, 0, 1, 9}},
        {"HWIO conv (Keras)", {K_HWIO, 3, 5, 3, 3, 1, 0, 5, 6}},
        {"HWIM depthwise (Keras), mult 1", {K_HWIM, 4, 0, 3, 3, 1, 1, 5, 5}},
        {"HWIM depthwise (Keras), mult 3", {K_HWIM, 2, 0, 3, 3, 1, 3, 4, 5}},
        {"IOHW transposed conv", {K_IOHW, 3, 4, 2, 3, 1, 0, 3, 4}},
        {"IOHW grouped transposed conv", {K_IOHW, 4, 6, 3, 2, 2, 0, 3, 3}},
        {"linear OI", {K_OI, 7, 5, 0, 0, 1, 0, 0, 0}},
        {"linear IO (Keras Dense)", {K_IO, 6, 9, 0, 0, 1, 0, 0, 0}},
    };
    uint64_t seed = 0x600d5eedu;
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++)
        for (int variant = 0; variant < 8; variant++) {
            int bias = variant & 1, gamma = !(variant & 2), beta = !(variant & 4);
            double e = fold_error(&CASES[k].L, bias, gamma, beta, seed++);
            if (!(e <= FOLD_RTOL))
                fail_msg("%s (bias %d, gamma %d, beta %d): relative error %.3g > %g", CASES[k].what, bias, gamma,
                         beta, e, FOLD_RTOL);
        }
}

static void test_coeffs_hand_worked(void **state) {
    (void)state;
    /* gamma 2, var 3, eps 1: s = 2/2 = 1; mean 4, beta 5: shift = 5 - 4 = 1. */
    double g = 2, b = 5, m = 4, v = 3, s, sh, bias = 10, out;
    assert_int_equal(npuc_bnfold_coeffs(ctx, 1, &g, &b, &m, &v, 1.0, &s, &sh), NPUC_OK);
    assert_close(s, 1.0, 0, 1e-15);
    assert_close(sh, 1.0, 0, 1e-15);
    npuc_bnfold_bias(1, &bias, &s, &sh, &out); /* (10 - 4) * 1 + 5 */
    assert_close(out, 11.0, 0, 1e-15);
    /* Variance exactly 0 is legal: eps carries it. */
    v = 0;
    assert_int_equal(npuc_bnfold_coeffs(ctx, 1, NULL, NULL, &m, &v, 1e-3, &s, &sh), NPUC_OK);
    assert_close(s, 1.0 / sqrt(1e-3), 1e-15, 0);
    /* var + eps <= 0 and non-finite values are errors naming the channel. */
    double vv[2] = {1, -1}, mm[2] = {0, 0}, ss[2], hh[2];
    assert_int_equal(npuc_bnfold_coeffs(ctx, 2, NULL, NULL, mm, vv, 1e-5, ss, hh), NPUC_ERR_VALUE);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "channel 1"));
    vv[1] = 1;
    mm[0] = NAN;
    assert_int_equal(npuc_bnfold_coeffs(ctx, 2, NULL, NULL, mm, vv, 1e-5, ss, hh), NPUC_ERR_VALUE);
    assert_int_equal(npuc_bnfold_coeffs(ctx, 2, NULL, NULL, mm, vv, -1, ss, hh), NPUC_ERR_ARG);
    /* A layout without a channel axis cannot be scaled. */
    npuc_tensor_info t;
    memset(&t, 0, sizeof t);
    t.name = "v";
    t.rank = 1;
    t.shape[0] = 2;
    t.numel = 2;
    assert_int_equal(npuc_bnfold_scale_weights(ctx, &t, 1, ss, hh), NPUC_ERR_ARG);
}

/* ------------------------------------------------------------ model files */

typedef struct tspec {
    const char *name;
    int rank;
    int64_t shape[4];
    npuc_dtype dt;
    const char *group;
} tspec;

/* Writes tensors with deterministic values; fill(name, i, seed) picks them. */
typedef float (*fill_fn)(const char *name, uint64_t i, uint64_t *seed);

static float fill_default(const char *name, uint64_t i, uint64_t *seed) {
    (void)i;
    size_t n = strlen(name);
    if (strstr(name, "running_var") || strstr(name, "moving_variance") || (n > 4 && strcmp(name + n - 4, ".w_2") == 0))
        return 0.5f + fabsf(npuc_test_randn(seed));
    if (strstr(name, "num_batches")) return 7;
    if ((strstr(name, ".weight") && strstr(name, "bn")) || strstr(name, "gamma")) return 1.0f + 0.3f * npuc_test_randf(seed);
    return npuc_test_randn(seed) * 0.5f;
}

static void write_model(const char *path, const tspec *ts, size_t n, const char *const *meta, size_t nmeta,
                        fill_fn fill) {
    npuc_writer *w;
    npuc_write_opts o = npuc_write_opts_defaults();
    o.overwrite = 1;
    assert_int_equal(npuc_writer_open(ctx, path, &o, &w), NPUC_OK);
    for (size_t i = 0; i + 1 < nmeta; i += 2) assert_int_equal(npuc_writer_meta(w, meta[i], meta[i + 1]), NPUC_OK);
    for (size_t i = 0; i < n; i++) {
        npuc_tensor_info t;
        memset(&t, 0, sizeof t);
        t.name = ts[i].name;
        t.dtype = ts[i].dt ? ts[i].dt : NPUC_DTYPE_F32;
        t.rank = ts[i].rank;
        memcpy(t.shape, ts[i].shape, sizeof ts[i].shape);
        t.group = ts[i].group;
        assert_int_equal(npuc_writer_declare(w, &t), NPUC_OK);
    }
    uint64_t seed = 0xb0f01du;
    for (size_t i = 0; i < n; i++) {
        uint64_t numel = 1;
        for (int d = 0; d < ts[i].rank; d++) numel *= (uint64_t)ts[i].shape[d];
        npuc_dtype dt = ts[i].dt ? ts[i].dt : NPUC_DTYPE_F32;
        float *f = malloc((numel ? numel : 1) * sizeof *f);
        void *bytes = malloc((numel ? numel : 1) * 8);
        for (uint64_t e = 0; e < numel; e++) f[e] = (fill ? fill : fill_default)(ts[i].name, e, &seed);
        npuc_convert(bytes, dt, f, NPUC_DTYPE_F32, numel);
        assert_int_equal(npuc_writer_write(w, bytes, numel * npuc_dtype_size(dt)), NPUC_OK);
        free(f);
        free(bytes);
    }
    assert_int_equal(npuc_writer_finish(w), NPUC_OK);
}

static double *read_d(npuc_model *m, const char *name) {
    size_t i;
    if (npuc_model_find(m, name, &i) != 0) fail_msg("tensor '%s' missing", name);
    const npuc_tensor_info *t = npuc_model_tensor(m, i);
    const void *p;
    assert_int_equal(npuc_model_data(ctx, m, i, &p), NPUC_OK);
    double *d = malloc(t->numel * sizeof *d);
    npuc_convert(d, NPUC_DTYPE_F64, p, t->dtype, t->numel);
    npuc_model_release(m, i);
    return d;
}

static int has_tensor(npuc_model *m, const char *name) {
    size_t i;
    return npuc_model_find(m, name, &i) == 0;
}

/* Checks out's conv (OIHW/OI, out axis 0) and bias against in's conv+BN. */
static void check_folded_axis0(npuc_model *in, npuc_model *out, const char *conv, const char *bias_in,
                               const char *bn, double eps, double tol) {
    char nm[128];
    size_t ci;
    assert_int_equal(npuc_model_find(in, conv, &ci), 0);
    const npuc_tensor_info *t = npuc_model_tensor(in, ci);
    uint64_t C = (uint64_t)t->shape[0], per = t->numel / C;
    double *w = read_d(in, conv), *w2 = read_d(out, conv);
    snprintf(nm, sizeof nm, "%s.running_mean", bn);
    double *mu = read_d(in, nm);
    snprintf(nm, sizeof nm, "%s.running_var", bn);
    double *var = read_d(in, nm);
    snprintf(nm, sizeof nm, "%s.weight", bn);
    double *g = has_tensor(in, nm) ? read_d(in, nm) : NULL;
    snprintf(nm, sizeof nm, "%s.bias", bn);
    double *be = has_tensor(in, nm) ? read_d(in, nm) : NULL;
    double *b = bias_in && has_tensor(in, bias_in) ? read_d(in, bias_in) : NULL;
    char bout[128];
    snprintf(bout, sizeof bout, "%.*s.bias", (int)(strlen(conv) - 7), conv);
    double *b2 = read_d(out, bout);
    for (uint64_t c = 0; c < C; c++) {
        double s = (g ? g[c] : 1) / sqrt(var[c] + eps);
        for (uint64_t k = 0; k < per; k++) assert_close(w2[c * per + k], w[c * per + k] * s, tol, 1e-7);
        assert_close(b2[c], ((b ? b[c] : 0) - mu[c]) * s + (be ? be[c] : 0), tol, 1e-6);
    }
    free(w); free(w2); free(mu); free(var); free(g); free(be); free(b); free(b2);
}

static npuc_model *open_m(const char *path) {
    npuc_model *m;
    if (npuc_model_open(ctx, path, NULL, &m) != NPUC_OK) fail_msg("%s", npuc_ctx_errmsg(ctx));
    return m;
}

static const npuc_bnfold_pair *pair_for(const npuc_bnfold_plan *p, const npuc_model *m, const char *conv) {
    for (size_t k = 0; k < p->npairs; k++)
        if (strcmp(npuc_model_tensor(m, p->pairs[k].conv)->name, conv) == 0) return &p->pairs[k];
    return NULL;
}

/* The context's policy: guesses applied (accept) and refused (strict). */
static void set_policy(int accept, int strict) {
    npuc_policy pol = npuc_policy_defaults();
    pol.accept_guesses = accept;
    pol.strict = strict;
    npuc_ctx_set_policy(ctx, &pol);
}

static const npuc_bnfold_skip *skip_for(const npuc_bnfold_plan *p, const char *bn) {
    for (size_t k = 0; k < p->nskips; k++)
        if (p->skips[k].bn && strcmp(p->skips[k].bn, bn) == 0) return &p->skips[k];
    return NULL;
}

static const tspec TORCH_NET[] = {
    {"net.0.weight", 4, {4, 3, 3, 3}, 0, NULL},
    {"net.1.weight", 1, {4}, 0, NULL},
    {"net.1.bias", 1, {4}, 0, NULL},
    {"net.1.running_mean", 1, {4}, 0, NULL},
    {"net.1.running_var", 1, {4}, 0, NULL},
    {"net.1.num_batches_tracked", 0, {0}, NPUC_DTYPE_I64, NULL},
    {"net.3.weight", 4, {6, 4, 1, 1}, 0, NULL},
    {"net.3.bias", 1, {6}, 0, NULL},
    {"net.4.running_mean", 1, {6}, 0, NULL}, /* affine=False: no weight, no bias */
    {"net.4.running_var", 1, {6}, 0, NULL},
    {"net.6.running_mean", 1, {6}, 0, NULL}, /* after net.5, a ReLU: not foldable */
    {"net.6.running_var", 1, {6}, 0, NULL},
    {"layer1.0.conv1.weight", 4, {6, 6, 3, 3}, 0, NULL},
    {"layer1.0.bn1.weight", 1, {6}, 0, NULL},
    {"layer1.0.bn1.bias", 1, {6}, 0, NULL},
    {"layer1.0.bn1.running_mean", 1, {6}, 0, NULL},
    {"layer1.0.bn1.running_var", 1, {6}, 0, NULL},
    {"fc.weight", 2, {3, 6}, 0, NULL},
    {"fc.bias", 1, {3}, 0, NULL},
};

static void test_model_torch_names(void **state) {
    (void)state;
    const char *in = npuc_test_path("torch.safetensors"), *out = npuc_test_path("torch_folded.safetensors");
    write_model(in, TORCH_NET, sizeof TORCH_NET / sizeof TORCH_NET[0], NULL, 0, NULL);
    npuc_model *m = open_m(in);
    npuc_bnfold_params p = npuc_bnfold_params_defaults();
    npuc_bnfold_plan plan;
    assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), NPUC_OK);
    assert_int_equal(plan.nbn, 4);
    assert_int_equal(plan.npairs, 3);
    const npuc_bnfold_pair *a = pair_for(&plan, m, "net.0.weight"), *b = pair_for(&plan, m, "net.3.weight"),
                           *c = pair_for(&plan, m, "layer1.0.conv1.weight");
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    assert_string_equal(a->bn.name, "net.1");
    assert_int_equal(a->how, NPUC_BNFOLD_NAME);
    assert_int_equal(a->guess, 0);
    assert_true(a->bias < 0);
    assert_string_equal(a->bias_name, "net.0.bias");
    assert_true(a->bn.count >= 0);
    assert_string_equal(b->bn.name, "net.4");
    assert_true(b->bias >= 0);
    assert_true(b->bn.gamma < 0 && b->bn.beta < 0);
    assert_string_equal(c->bn.name, "layer1.0.bn1");
    assert_close(a->eps, 1e-5, 0, 0);
    assert_string_equal(a->eps_source, "default");
    const npuc_bnfold_skip *s = skip_for(&plan, "net.6");
    assert_non_null(s);
    assert_non_null(strstr(s->why, "net.5"));
    npuc_summary sum;
    assert_int_equal(npuc_bnfold_model(ctx, m, &plan, &p, out, &sum), NPUC_OK);
    assert_int_equal(sum.count[NPUC_ACTION_FOLDED], 4);   /* 3 producers + 1 existing bias */
    assert_int_equal(sum.count[NPUC_ACTION_CREATED], 2);
    assert_int_equal(sum.count[NPUC_ACTION_REMOVED], 5 + 2 + 4);
    for (size_t k = 0; k < plan.npairs; k++) {
        assert_true(plan.pairs[k].stats.check_rel_err < 1e-6);
        assert_true(plan.pairs[k].stats.max_abs_scale > 0);
        const npuc_tensor_record *r = &sum.records[plan.pairs[k].stats.record];
        assert_int_equal(r->action, NPUC_ACTION_FOLDED);
        assert_close(npuc_record_get(r, "channels", 0), (double)plan.pairs[k].bn.channels, 0, 0);
    }
    /* The created bias follows its producer in the records. */
    assert_string_equal(sum.records[plan.pairs[0].stats.record + 1].name, "net.0.bias");
    npuc_summary_free(&sum);
    npuc_model *o = open_m(out);
    assert_false(has_tensor(o, "net.1.running_mean"));
    assert_false(has_tensor(o, "net.1.num_batches_tracked"));
    assert_false(has_tensor(o, "net.4.running_var"));
    assert_true(has_tensor(o, "net.6.running_var")); /* skipped: kept */
    size_t bi, wi;
    assert_int_equal(npuc_model_find(o, "net.0.bias", &bi), 0);
    assert_int_equal(npuc_model_find(o, "net.0.weight", &wi), 0);
    assert_int_equal(bi, wi + 1);
    check_folded_axis0(m, o, "net.0.weight", NULL, "net.1", 1e-5, 1e-6);
    check_folded_axis0(m, o, "net.3.weight", "net.3.bias", "net.4", 1e-5, 1e-6);
    check_folded_axis0(m, o, "layer1.0.conv1.weight", NULL, "layer1.0.bn1", 1e-5, 1e-6);
    const char *meta = npuc_model_meta_get(o, "npuc.bnfold");
    assert_non_null(meta);
    assert_non_null(strstr(meta, "\"bn\":\"net.1\""));
    npuc_model_close(o);
    /* An existing output is refused without overwrite and left alone. */
    assert_int_equal(npuc_bnfold_model(ctx, m, &plan, &p, out, &sum), NPUC_ERR_EXISTS);
    /* --eps applies to every pair and is recorded. */
    p.eps = 1e-2;
    p.write.overwrite = 1;
    npuc_bnfold_plan_free(&plan);
    assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), NPUC_OK);
    assert_string_equal(plan.pairs[0].eps_source, "--eps");
    assert_int_equal(npuc_bnfold_model(ctx, m, &plan, &p, out, &sum), NPUC_OK);
    npuc_summary_free(&sum);
    o = open_m(out);
    check_folded_axis0(m, o, "net.0.weight", NULL, "net.1", 1e-2, 1e-6);
    npuc_model_close(o);
    npuc_bnfold_plan_free(&plan);
    npuc_model_close(m);
}

/* DenseNet-style pre-activation: norm1 feeds conv1, so the names must not pair
 * them when storage order shows the conv after the BatchNorm. */
static void test_preactivation(void **state) {
    (void)state;
    static const tspec NET[] = {
        {"features.conv0.weight", 4, {8, 3, 7, 7}, 0, NULL},
        {"features.norm0.weight", 1, {8}, 0, NULL}, {"features.norm0.bias", 1, {8}, 0, NULL},
        {"features.norm0.running_mean", 1, {8}, 0, NULL}, {"features.norm0.running_var", 1, {8}, 0, NULL},
        {"layer.norm1.weight", 1, {8}, 0, NULL}, {"layer.norm1.bias", 1, {8}, 0, NULL},
        {"layer.norm1.running_mean", 1, {8}, 0, NULL}, {"layer.norm1.running_var", 1, {8}, 0, NULL},
        {"layer.conv1.weight", 4, {8, 8, 1, 1}, 0, NULL},
    };
    const char *in = npuc_test_path("dense.safetensors");
    write_model(in, NET, sizeof NET / sizeof NET[0], NULL, 0, NULL);
    npuc_model *m = open_m(in);
    npuc_bnfold_params p = npuc_bnfold_params_defaults();
    npuc_bnfold_plan plan;
    assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), NPUC_OK);
    assert_int_equal(plan.npairs, 1);
    assert_string_equal(pair_for(&plan, m, "features.conv0.weight")->bn.name, "features.norm0");
    const npuc_bnfold_skip *s = skip_for(&plan, "layer.norm1");
    assert_non_null(s);
    assert_non_null(strstr(s->why, "pre-activation"));
    npuc_bnfold_plan_free(&plan);
    npuc_model_close(m);
}

/* ------------------------------------------------------------ the file's own graph */

static size_t sval(npuc__ng *g, const char *name) {
    size_t i;
    assert_int_equal(npuc__ng_add_value(ctx, g, name, -1, NULL, NPUC_GRAPH_EV_FILE, NPUC_CONF_CERTAIN, "a value", &i),
                     NPUC_OK);
    return i;
}

static size_t snode(npuc__ng *g, const char *name, const char *op, size_t in, size_t out) {
    size_t i;
    assert_int_equal(npuc__ng_add_node(ctx, g, name, op, op, &in, 1, &out, 1, NPUC_GRAPH_EV_FILE, NPUC_CONF_CERTAIN,
                                       "an ONNX node", &i), NPUC_OK);
    return i;
}

/* As the ONNX reader states it: x -> Conv conv1 -> [Relu] -> BatchNormalization bn1 -> y. */
static npuc__ng *stated_graph(int relu) {
    npuc__ng *g = npuc__ng_new();
    assert_non_null(g);
    size_t x = sval(g, "x"), c = sval(g, "c"), r = relu ? sval(g, "r") : c, y = sval(g, "y");
    g->vals[x].is_input = 1;
    g->vals[y].is_output = 1;
    int64_t k[4] = {4, 3, 3, 3}, v[1] = {4};
    size_t n = snode(g, "conv1", "Conv", x, c);
    assert_int_equal(npuc__ng_add_weight(ctx, g, n, "conv1.weight", "kernel", 4, k, 0, 1), NPUC_OK);
    if (relu) snode(g, "relu", "Relu", c, r);
    n = snode(g, "bn1", "BatchNormalization", r, y);
    const char *const W[][2] = {{"bn1.weight", "gamma"}, {"bn1.bias", "beta"}, {"bn1.running_mean", "mean"},
                                {"bn1.running_var", "var"}};
    for (int i = 0; i < 4; i++)
        assert_int_equal(npuc__ng_add_weight(ctx, g, n, W[i][0], W[i][1], 1, v, 0, -1), NPUC_OK);
    return g;
}

static void test_stated_graph(void **state) {
    (void)state;
    static const tspec NET[] = {
        {"conv1.weight", 4, {4, 3, 3, 3}, 0, NULL},
        {"bn1.weight", 1, {4}, 0, NULL}, {"bn1.bias", 1, {4}, 0, NULL},
        {"bn1.running_mean", 1, {4}, 0, NULL}, {"bn1.running_var", 1, {4}, 0, NULL},
    };
    const char *in = npuc_test_path("stated.safetensors");
    write_model(in, NET, sizeof NET / sizeof NET[0], NULL, 0, NULL);
    npuc_bnfold_params p = npuc_bnfold_params_defaults();
    npuc_bnfold_plan plan;

    /* Without a graph the names pair conv1 / bn1. */
    npuc_model *m = open_m(in);
    assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), NPUC_OK);
    assert_int_equal(plan.npairs, 1);
    assert_int_equal(plan.pairs[0].how, NPUC_BNFOLD_NAME);
    npuc_bnfold_plan_free(&plan);
    npuc_model_close(m);

    /* The file states conv1 -> bn1: paired from the graph, no guess, --strict allows it. */
    m = open_m(in);
    npuc__model_set_graph(m, stated_graph(0));
    set_policy(0, 1);
    assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), NPUC_OK);
    assert_int_equal(plan.npairs, 1);
    assert_int_equal(plan.pairs[0].how, NPUC_BNFOLD_GRAPH);
    assert_false(plan.pairs[0].guess);
    assert_string_equal(npuc_model_tensor(m, plan.pairs[0].conv)->name, "conv1.weight");
    assert_non_null(strstr(plan.pairs[0].why, "the file's graph: Conv 'conv1' -> BatchNormalization 'bn1'"));
    npuc_bnfold_plan_free(&plan);
    set_policy(0, 0);
    npuc_model_close(m);

    /* The file states a Relu between them: refused, and the names do not
     * override it, guesses accepted or not; stating the pair is an error. */
    m = open_m(in);
    npuc__model_set_graph(m, stated_graph(1));
    set_policy(1, 0);
    assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), NPUC_OK);
    assert_int_equal(plan.npairs, 0);
    const npuc_bnfold_skip *sk = skip_for(&plan, "bn1");
    assert_non_null(sk);
    assert_false(sk->guess);
    assert_non_null(strstr(sk->why, "the file's graph: its input 'r' is made by Relu 'relu'"));
    npuc_bnfold_plan_free(&plan);
    set_policy(0, 0);
    const char *pairs[] = {"conv1.weight=bn1"};
    p.pairs = pairs;
    p.npairs = 1;
    assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), NPUC_ERR_ARG);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "--pair conv1.weight=bn1: the file states otherwise: BatchNorm 'bn1' "
                                                 "cannot be folded: its input 'r' is made by Relu 'relu'"));
    assert_int_equal(plan.npairs, 0);
    npuc_model_close(m);
}

/* ------------------------------------------------------------ Keras topology */

static const char KERAS_CFG[] =
    "{\"class_name\": \"Model\", \"config\": {\"name\": \"m\", \"layers\": ["
    "{\"name\": \"in\", \"class_name\": \"InputLayer\", \"config\": {}, \"inbound_nodes\": []},"
    "{\"name\": \"c1\", \"class_name\": \"Conv2D\", \"config\": {\"activation\": \"linear\", \"use_bias\": false}, \"inbound_nodes\": [[[\"in\", 0, 0, {}]]]},"
    "{\"name\": \"bn1\", \"class_name\": \"BatchNormalization\", \"config\": {\"axis\": -1, \"epsilon\": 0.01}, \"inbound_nodes\": [[[\"c1\", 0, 0, {}]]]},"
    "{\"name\": \"c2\", \"class_name\": \"Conv2D\", \"config\": {\"activation\": \"relu\", \"use_bias\": true}, \"inbound_nodes\": [[[\"bn1\", 0, 0, {}]]]},"
    "{\"name\": \"bn2\", \"class_name\": \"BatchNormalization\", \"config\": {\"axis\": 3, \"epsilon\": 0.001}, \"inbound_nodes\": [[[\"c2\", 0, 0, {}]]]},"
    "{\"name\": \"c3\", \"class_name\": \"Conv2D\", \"config\": {\"activation\": \"linear\", \"use_bias\": false}, \"inbound_nodes\": [[[\"bn2\", 0, 0, {}]]]},"
    "{\"name\": \"c3_BN\", \"class_name\": \"BatchNormalization\", \"config\": {\"axis\": -1}, \"inbound_nodes\": [[[\"c3\", 0, 0, {}]]]},"
    "{\"name\": \"add\", \"class_name\": \"Add\", \"config\": {}, \"inbound_nodes\": [[[\"c3\", 0, 0, {}], [\"c3_BN\", 0, 0, {}]]]},"
    "{\"name\": \"d\", \"class_name\": \"Dense\", \"config\": {\"activation\": \"linear\", \"use_bias\": false}, \"inbound_nodes\": [[[\"add\", 0, 0, {}]]]},"
    "{\"name\": \"bnd\", \"class_name\": \"BatchNormalization\", \"config\": {\"axis\": -1, \"epsilon\": 0.001}, \"inbound_nodes\": [[[\"d\", 0, 0, {}]]]}"
    "], \"input_layers\": [[\"in\", 0, 0]], \"output_layers\": [[\"bnd\", 0, 0]]}}";

#define KBN(L, C)                                                                                               \
    {L "/gamma", 1, {C}, 0, L}, {L "/beta", 1, {C}, 0, L}, {L "/moving_mean", 1, {C}, 0, L},                    \
    {L "/moving_variance", 1, {C}, 0, L}

static const tspec KERAS_NET[] = {
    {"c1/kernel", 4, {3, 3, 2, 4}, 0, "c1"}, KBN("bn1", 4),
    {"c2/kernel", 4, {1, 1, 4, 4}, 0, "c2"}, {"c2/bias", 1, {4}, 0, "c2"}, KBN("bn2", 4),
    {"c3/kernel", 4, {1, 1, 4, 4}, 0, "c3"}, KBN("c3_BN", 4),
    {"d/kernel", 2, {4, 5}, 0, "d"}, KBN("bnd", 5),
};

static void test_keras_topology(void **state) {
    (void)state;
    const char *in = npuc_test_path("keras.h5"), *out = npuc_test_path("keras_folded.h5");
    const char *meta[] = {"model_config", KERAS_CFG};
    write_model(in, KERAS_NET, sizeof KERAS_NET / sizeof KERAS_NET[0], meta, 2, NULL);
    npuc_model *m = open_m(in);
    npuc_bnfold_params p = npuc_bnfold_params_defaults();
    npuc_bnfold_plan plan;
    assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), NPUC_OK);
    assert_int_equal(plan.nbn, 4);
    assert_int_equal(plan.npairs, 2);
    const npuc_bnfold_pair *a = pair_for(&plan, m, "c1/kernel"), *d = pair_for(&plan, m, "d/kernel");
    assert_non_null(a);
    assert_non_null(d);
    assert_int_equal(a->how, NPUC_BNFOLD_TOPOLOGY);
    assert_close(a->eps, 0.01, 0, 0);
    assert_string_equal(a->eps_source, "model_config");
    assert_string_equal(a->bias_name, "c1/bias");
    const npuc_bnfold_skip *s2 = skip_for(&plan, "bn2"), *s3 = skip_for(&plan, "c3_BN");
    assert_non_null(s2);
    assert_non_null(strstr(s2->why, "activation 'relu'"));
    assert_non_null(s3);
    assert_non_null(strstr(s3->why, "also feeds"));
    npuc_summary sum;
    assert_int_equal(npuc_bnfold_model(ctx, m, &plan, &p, out, &sum), NPUC_OK);
    npuc_summary_free(&sum);
    npuc_model *o = open_m(out);
    assert_false(has_tensor(o, "bn1/gamma"));
    assert_true(has_tensor(o, "bn2/gamma"));
    size_t bi;
    assert_int_equal(npuc_model_find(o, "c1/bias", &bi), 0);
    assert_string_equal(npuc_model_tensor(o, bi)->group, "c1");
    /* The Keras dense kernel is [in, out]: check W' = W * s along axis 1. */
    double *w = read_d(m, "d/kernel"), *w2 = read_d(o, "d/kernel"), *g = read_d(m, "bnd/gamma"),
           *v = read_d(m, "bnd/moving_variance");
    for (int i = 0; i < 4; i++)
        for (int c = 0; c < 5; c++) assert_close(w2[i * 5 + c], w[i * 5 + c] * g[c] / sqrt(v[c] + 1e-3), 1e-6, 1e-7);
    free(w); free(w2); free(g); free(v);
    /* model_config: bn1 and bnd gone, c2 and the output rewired, use_bias set. */
    json_error_t je;
    json_t *cfg = json_loads(npuc_model_meta_get(o, "model_config"), 0, &je);
    assert_non_null(cfg);
    json_t *layers = json_object_get(json_object_get(cfg, "config"), "layers");
    assert_int_equal(json_array_size(layers), 8);
    size_t i;
    json_t *l;
    json_array_foreach(layers, i, l) {
        const char *nm = json_string_value(json_object_get(l, "name"));
        assert_true(strcmp(nm, "bn1") != 0 && strcmp(nm, "bnd") != 0);
        if (strcmp(nm, "c2") == 0) {
            json_t *ref = json_array_get(json_array_get(json_array_get(json_object_get(l, "inbound_nodes"), 0), 0), 0);
            assert_string_equal(json_string_value(ref), "c1");
        }
        if (strcmp(nm, "c1") == 0 || strcmp(nm, "d") == 0)
            assert_true(json_is_true(json_object_get(json_object_get(l, "config"), "use_bias")));
    }
    json_t *outl = json_object_get(json_object_get(cfg, "config"), "output_layers");
    assert_string_equal(json_string_value(json_array_get(json_array_get(outl, 0), 0)), "d");
    json_decref(cfg);
    assert_non_null(strstr(npuc_model_meta_get(o, "npuc.bnfold"), "\"use_bias\":true"));
    npuc_model_close(o);
    npuc_bnfold_plan_free(&plan);
    npuc_model_close(m);

    /* A BatchNorm layer applied to two inputs: one BN, two producers: an error. */
    static const char SHARED[] =
        "{\"class_name\": \"Model\", \"config\": {\"layers\": ["
        "{\"name\": \"c1\", \"class_name\": \"Conv2D\", \"config\": {}, \"inbound_nodes\": []},"
        "{\"name\": \"c2\", \"class_name\": \"Conv2D\", \"config\": {}, \"inbound_nodes\": []},"
        "{\"name\": \"bn1\", \"class_name\": \"BatchNormalization\", \"config\": {}, "
        "\"inbound_nodes\": [[[\"c1\", 0, 0, {}]], [[\"c2\", 0, 0, {}]]]}]}}";
    const char *meta2[] = {"model_config", SHARED};
    write_model(in, KERAS_NET, 5, meta2, 2, NULL);
    m = open_m(in);
    assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), NPUC_ERR_FORMAT);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "bn1"));
    assert_int_equal(plan.npairs, 0);
    npuc_model_close(m);
}

/* Keras names without topology: layer order, numbering, X_BN / bn_X. */
static void test_keras_names_and_order(void **state) {
    (void)state;
    static const tspec NET[] = {
        {"conv2d/kernel", 4, {3, 3, 3, 8}, 0, "conv2d"}, KBN("batch_normalization", 8),
        {"depthwise_conv2d/depthwise_kernel", 4, {3, 3, 8, 1}, 0, "depthwise_conv2d"}, KBN("batch_normalization_1", 8),
        {"block_expand/kernel", 4, {1, 1, 8, 6}, 0, "block_expand"}, KBN("block_expand_BN", 6),
        {"Conv1/kernel", 4, {1, 1, 6, 5}, 0, "Conv1"}, KBN("bn_Conv1", 5),
        {"dense/kernel", 2, {5, 7}, 0, "dense"}, KBN("batch_normalization_2", 3),
        {"head/kernel", 2, {7, 3}, 0, "head"}, KBN("batch_normalization_9", 3),
    };
    const char *in = npuc_test_path("knames.h5");
    write_model(in, NET, sizeof NET / sizeof NET[0], NULL, 0, NULL);
    npuc_model *m = open_m(in);
    npuc_bnfold_params p = npuc_bnfold_params_defaults();
    npuc_bnfold_plan plan;
    /* By default the two guesses are listed, not applied (issue 14). */
    assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), NPUC_OK);
    assert_int_equal(plan.npairs, 3);
    assert_int_equal(skip_for(&plan, "batch_normalization_1")->guess, 1);
    assert_string_equal(skip_for(&plan, "batch_normalization_1")->conv, "depthwise_conv2d/depthwise_kernel");
    assert_non_null(strstr(skip_for(&plan, "batch_normalization_1")->why, "--accept-guesses"));
    assert_int_equal(skip_for(&plan, "batch_normalization_9")->guess, 1);
    assert_int_equal(skip_for(&plan, "batch_normalization_2")->guess, 0);
    npuc_bnfold_plan_free(&plan);
    /* --strict: the first guess is an error naming the BatchNorm, the candidate and the flags. */
    set_policy(0, 1);
    assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), NPUC_ERR_GUESS);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "BatchNorm 'batch_normalization_1'"));
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "'depthwise_conv2d/depthwise_kernel'"));
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "--pair depthwise_conv2d/depthwise_kernel=batch_normalization_1"));
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "--accept-guesses"));
    assert_int_equal(plan.npairs, 0);
    /* --accept-guesses applies them (under --strict too). */
    set_policy(1, 1);
    assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), NPUC_OK);
    assert_int_equal(plan.nbn, 6);
    assert_int_equal(plan.npairs, 5);
    const npuc_bnfold_pair *x = pair_for(&plan, m, "conv2d/kernel");
    assert_int_equal(x->how, NPUC_BNFOLD_LAYER_ORDER);
    assert_int_equal(x->guess, 0); /* numbering agrees */
    assert_string_equal(x->eps_source, "keras default");
    assert_close(x->eps, 1e-3, 0, 0);
    x = pair_for(&plan, m, "depthwise_conv2d/depthwise_kernel");
    assert_int_equal(x->how, NPUC_BNFOLD_LAYER_ORDER);
    assert_int_equal(x->guess, 1);
    assert_int_equal(pair_for(&plan, m, "block_expand/kernel")->how, NPUC_BNFOLD_NAME);
    x = pair_for(&plan, m, "head/kernel"); /* "head" is no Keras counter name: a guess */
    assert_int_equal(x->how, NPUC_BNFOLD_LAYER_ORDER);
    assert_int_equal(x->guess, 1);
    assert_int_equal(pair_for(&plan, m, "Conv1/kernel")->how, NPUC_BNFOLD_NAME);
    const npuc_bnfold_skip *s = skip_for(&plan, "batch_normalization_2");
    assert_non_null(s);
    assert_non_null(strstr(s->why, "shape mismatch"));
    npuc_bnfold_plan_free(&plan);
    /* --no-guess (the default's old name) overrides --accept-guesses. */
    set_policy(1, 0);
    p.no_guess = 1;
    assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), NPUC_OK);
    assert_int_equal(plan.npairs, 3);
    assert_non_null(strstr(skip_for(&plan, "batch_normalization_1")->why, "a guess, not applied"));
    assert_non_null(skip_for(&plan, "batch_normalization_9"));
    npuc_bnfold_plan_free(&plan);
    set_policy(0, 0);
    npuc_model_close(m);
}

/* ------------------------------------------------------------ exported files */

static const tspec PADDLE_ALPHA[] = {
    {"batch_norm_0.b_0", 1, {4}, 0, NULL}, {"batch_norm_0.w_0", 1, {4}, 0, NULL},
    {"batch_norm_0.w_1", 1, {4}, 0, NULL}, {"batch_norm_0.w_2", 1, {4}, 0, NULL},
    {"batch_norm_1.b_0", 1, {4}, 0, NULL}, {"batch_norm_1.w_0", 1, {4}, 0, NULL},
    {"batch_norm_1.w_1", 1, {4}, 0, NULL}, {"batch_norm_1.w_2", 1, {4}, 0, NULL},
    {"batch_norm_2.b_0", 1, {2}, 0, NULL}, {"batch_norm_2.w_0", 1, {2}, 0, NULL},
    {"batch_norm_2.w_1", 1, {2}, 0, NULL}, {"batch_norm_2.w_2", 1, {2}, 0, NULL},
    {"conv2d_0.w_0", 4, {4, 3, 3, 3}, 0, NULL},
    {"conv2d_1.b_0", 1, {4}, 0, NULL}, {"conv2d_1.w_0", 4, {4, 4, 1, 1}, 0, NULL}, /* SE conv, no BN */
    {"conv2d_2.w_0", 4, {4, 4, 1, 1}, 0, NULL},
    {"conv2d_10.w_0", 4, {2, 4, 1, 1}, 0, NULL},
    {"conv2d_9.w_0", 4, {3, 4, 1, 1}, 0, NULL},  /* no BN follows: left out */
};

static void test_exported_alphabetical(void **state) {
    (void)state;
    const char *in = npuc_test_path("paddle.safetensors"), *out = npuc_test_path("paddle_folded.h5");
    /* Names sorted with strcmp: conv2d_10 before conv2d_2. */
    tspec ts[sizeof PADDLE_ALPHA / sizeof PADDLE_ALPHA[0]];
    memcpy(ts, PADDLE_ALPHA, sizeof ts);
    size_t n = sizeof ts / sizeof ts[0];
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && strcmp(ts[j - 1].name, ts[j].name) > 0; j--) {
            tspec t = ts[j]; ts[j] = ts[j - 1]; ts[j - 1] = t;
        }
    write_model(in, ts, n, NULL, 0, NULL);
    npuc_model *m = open_m(in);
    npuc_bnfold_params p = npuc_bnfold_params_defaults();
    npuc_bnfold_plan plan;
    /* Every pair here is a guess: none is applied by default. */
    assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), NPUC_OK);
    assert_int_equal(plan.npairs, 0);
    assert_int_equal(plan.nskips, 3);
    for (size_t k = 0; k < plan.nskips; k++) assert_int_equal(plan.skips[k].guess, 1);
    npuc_bnfold_plan_free(&plan);
    set_policy(1, 0);
    assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), NPUC_OK);
    assert_int_equal(plan.npairs, 3);
    assert_non_null(strstr(plan.order_note, "alphabetical"));
    assert_string_equal(pair_for(&plan, m, "conv2d_0.w_0")->bn.name, "batch_norm_0");
    assert_string_equal(pair_for(&plan, m, "conv2d_2.w_0")->bn.name, "batch_norm_1");
    assert_string_equal(pair_for(&plan, m, "conv2d_10.w_0")->bn.name, "batch_norm_2");
    assert_null(pair_for(&plan, m, "conv2d_1.w_0"));
    assert_int_equal(pair_for(&plan, m, "conv2d_0.w_0")->how, NPUC_BNFOLD_ORDER);
    assert_int_equal(pair_for(&plan, m, "conv2d_0.w_0")->guess, 1);
    assert_string_equal(pair_for(&plan, m, "conv2d_0.w_0")->bias_name, "conv2d_0.b_0");
    npuc_summary sum;
    assert_int_equal(npuc_bnfold_model(ctx, m, &plan, &p, out, &sum), NPUC_OK);
    assert_true(sum.nwarnings >= 1); /* guesses are flagged */
    npuc_summary_free(&sum);
    npuc_bnfold_plan_free(&plan);
    npuc_model *o = open_m(out);
    assert_true(has_tensor(o, "conv2d_0.b_0"));
    assert_false(has_tensor(o, "batch_norm_0.w_2"));
    npuc_model_close(o);
    npuc_model_close(m);

    /* The same tensors in graph order: the nearest preceding producer. */
    static const tspec GRAPH[] = {
        {"conv2d_0.w_0", 4, {4, 3, 3, 3}, 0, NULL},
        {"batch_norm_0.w_0", 1, {4}, 0, NULL}, {"batch_norm_0.b_0", 1, {4}, 0, NULL},
        {"batch_norm_0.w_1", 1, {4}, 0, NULL}, {"batch_norm_0.w_2", 1, {4}, 0, NULL},
        {"conv2d_1.w_0", 4, {2, 4, 1, 1}, 0, NULL},
        {"conv2d_2.w_0", 4, {4, 2, 1, 1}, 0, NULL},
        {"conv2d_3.w_0", 4, {3, 4, 1, 1}, 0, NULL}, /* wrong channels: passed over */
        {"batch_norm_1.w_0", 1, {4}, 0, NULL}, {"batch_norm_1.b_0", 1, {4}, 0, NULL},
        {"batch_norm_1.w_1", 1, {4}, 0, NULL}, {"batch_norm_1.w_2", 1, {4}, 0, NULL},
        {"batch_norm_2.w_1", 1, {7}, 0, NULL}, {"batch_norm_2.w_2", 1, {7}, 0, NULL},
    };
    write_model(in, GRAPH, sizeof GRAPH / sizeof GRAPH[0], NULL, 0, NULL);
    m = open_m(in);
    assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), NPUC_OK);
    assert_int_equal(plan.npairs, 2);
    assert_string_equal(pair_for(&plan, m, "conv2d_0.w_0")->bn.name, "batch_norm_0");
    assert_string_equal(pair_for(&plan, m, "conv2d_2.w_0")->bn.name, "batch_norm_1");
    assert_non_null(strstr(pair_for(&plan, m, "conv2d_2.w_0")->why, "nearest preceding"));
    assert_non_null(strstr(skip_for(&plan, "batch_norm_2")->why, "without a producer"));
    npuc_bnfold_plan_free(&plan);
    npuc_model_close(m);
    set_policy(0, 0);
}

/* Grouped transposed conv (groups inferred) and a half-precision producer.
 * The file states no groups, so the graph reads up.0.weight as 3 channels
 * (npuc__graph_channels, as structured prune does): the 2 groups that fit the
 * BatchNorm are a guess, listed but not folded by default, refused under
 * strict, folded with accept_guesses. */
static void test_transposed_and_f16(void **state) {
    (void)state;
    static const tspec NET[] = {
        {"up.0.weight", 4, {4, 3, 2, 2}, 0, NULL}, /* IOHW, groups 2: 6 output channels */
        {"up.1.running_mean", 1, {6}, 0, NULL}, {"up.1.running_var", 1, {6}, 0, NULL},
        {"up.1.weight", 1, {6}, 0, NULL}, {"up.1.bias", 1, {6}, 0, NULL},
        {"half.0.weight", 4, {5, 2, 3, 3}, NPUC_DTYPE_F16, NULL},
        {"half.1.running_mean", 1, {5}, 0, NULL}, {"half.1.running_var", 1, {5}, 0, NULL},
    };
    const char *in = npuc_test_path("convt.safetensors"), *out = npuc_test_path("convt_folded.safetensors");
    write_model(in, NET, sizeof NET / sizeof NET[0], NULL, 0, NULL);
    npuc_model *m = open_m(in);
    assert_int_equal(npuc_model_set_layout(ctx, m, 0, NPUC_LAYOUT_IOHW), NPUC_OK);
    npuc_bnfold_params p = npuc_bnfold_params_defaults();
    npuc_bnfold_plan plan;
    assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), NPUC_OK);
    assert_int_equal(plan.npairs, 1);
    const npuc_bnfold_skip *sk = skip_for(&plan, "up.1");
    assert_non_null(sk);
    assert_int_equal(sk->guess, 1);
    assert_non_null(strstr(sk->why, "2 groups from the BatchNorm"));
    npuc_bnfold_plan_free(&plan);
    set_policy(0, 1);
    assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), NPUC_ERR_GUESS);
    set_policy(1, 0);
    assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), NPUC_OK);
    set_policy(0, 0);
    assert_int_equal(plan.npairs, 2);
    const npuc_bnfold_pair *t = pair_for(&plan, m, "up.0.weight"), *h = pair_for(&plan, m, "half.0.weight");
    assert_int_equal(t->groups, 2);
    assert_int_equal(t->guess, 1);
    npuc_summary sum;
    assert_int_equal(npuc_bnfold_model(ctx, m, &plan, &p, out, &sum), NPUC_OK);
    npuc_summary_free(&sum);
    assert_true(t->stats.check_rel_err < 1e-6);
    assert_true(h->stats.check_rel_err < 2e-3 && h->stats.check_rel_err > 1e-8); /* F16 rounding shows */
    npuc_model *o = open_m(out);
    size_t i;
    assert_int_equal(npuc_model_find(o, "half.0.weight", &i), 0);
    assert_int_equal(npuc_model_tensor(o, i)->dtype, NPUC_DTYPE_F16);
    assert_int_equal(npuc_model_find(o, "half.0.bias", &i), 0);
    assert_int_equal(npuc_model_tensor(o, i)->dtype, NPUC_DTYPE_F16);
    /* Transposed, groups 2: input rows 0-1 feed channels 0-2, rows 2-3 channels 3-5. */
    double *w = read_d(m, "up.0.weight"), *w2 = read_d(o, "up.0.weight"), *g = read_d(m, "up.1.weight"),
           *v = read_d(m, "up.1.running_var");
    for (int ci = 0; ci < 4; ci++)
        for (int oc = 0; oc < 3; oc++)
            for (int k = 0; k < 4; k++) {
                int c = (ci / 2) * 3 + oc, e = (ci * 3 + oc) * 4 + k;
                assert_close(w2[e], w[e] * g[c] / sqrt(v[c] + 1e-5), 1e-6, 1e-7);
            }
    free(w); free(w2); free(g); free(v);
    npuc_model_close(o);
    npuc_bnfold_plan_free(&plan);
    npuc_model_close(m);
}

/* ------------------------------------------------------------ stated pairs */

static void test_explicit_pairs(void **state) {
    (void)state;
    const char *in = npuc_test_path("torch_x.safetensors");
    write_model(in, TORCH_NET, sizeof TORCH_NET / sizeof TORCH_NET[0], NULL, 0, NULL);
    npuc_model *m = open_m(in);
    npuc_bnfold_params p = npuc_bnfold_params_defaults();
    npuc_bnfold_plan plan;
    const char *ok[] = {"net.0=net.1.running_var", "layer1.0.conv1.weight=layer1.0.bn1"};
    p.pairs = ok;
    p.npairs = 2;
    assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), NPUC_OK);
    assert_int_equal(plan.npairs, 2);
    assert_int_equal(plan.pairs[0].how, NPUC_BNFOLD_EXPLICIT);
    assert_non_null(skip_for(&plan, "net.4"));
    npuc_bnfold_plan_free(&plan);
    /* A pairs file, text with comments; and JSON. */
    const char *txt = npuc_test_path("pairs.txt"), *js = npuc_test_path("pairs.json");
    const char T[] = "# pairs\n\n  net.3.weight = net.4 \nnet.0.weight=net.1\n";
    const char J[] = "{\"pairs\": [{\"conv\": \"net.3.weight\", \"bn\": \"net.4\"}, "
                     "{\"conv\": \"net.0.weight\", \"mean\": \"net.1.running_mean\"}]}";
    npuc_test_write_file(txt, T, sizeof T - 1);
    npuc_test_write_file(js, J, sizeof J - 1);
    p.pairs = NULL;
    p.npairs = 0;
    p.pairs_file = txt;
    assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), NPUC_OK);
    assert_int_equal(plan.npairs, 2);
    assert_non_null(strstr(plan.pairs[0].why, "pairs.txt:"));
    npuc_bnfold_plan_free(&plan);
    p.pairs_file = js;
    assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), NPUC_OK);
    assert_int_equal(plan.npairs, 2);
    npuc_bnfold_plan_free(&plan);
    /* Errors: nothing found, one BN for two producers, mismatched channels,
     * not a conv weight, malformed statements, missing file. */
    static const struct { const char *stmt[2]; size_t n; npuc_status st; const char *msg; } BAD[] = {
        {{"nope=net.1"}, 1, NPUC_ERR_ARG, "no tensor or layer 'nope'"},
        {{"net.0=nope"}, 1, NPUC_ERR_ARG, "not a BatchNorm"},
        {{"net.0.weight=net.1", "net.3.weight=net.1"}, 2, NPUC_ERR_ARG, "two producers"},
        {{"net.0.weight=net.1", "net.0.weight=net.4"}, 2, NPUC_ERR_ARG, "two BatchNorms"},
        {{"net.3.weight=net.1"}, 1, NPUC_ERR_ARG, "mismatched channel counts"},
        {{"net.3.bias=net.4"}, 1, NPUC_ERR_ARG, "not a float conv/linear weight"},
        {{"net.0.weight"}, 1, NPUC_ERR_ARG, "expected CONV=BN"},
    };
    p.pairs_file = NULL;
    for (size_t k = 0; k < sizeof BAD / sizeof BAD[0]; k++) {
        p.pairs = BAD[k].stmt;
        p.npairs = BAD[k].n;
        assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), BAD[k].st);
        if (!strstr(npuc_ctx_errmsg(ctx), BAD[k].msg)) fail_msg("case %zu: %s", k, npuc_ctx_errmsg(ctx));
        assert_int_equal(plan.npairs, 0);
    }
    p.pairs = NULL;
    p.npairs = 0;
    p.pairs_file = npuc_test_path("absent.txt");
    assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), NPUC_ERR_NOT_FOUND);
    const char BADJ[] = "[{\"conv\": 3}]";
    npuc_test_write_file(js, BADJ, sizeof BADJ - 1);
    p.pairs_file = js;
    assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), NPUC_ERR_ARG);
    npuc_model_close(m);
}

/* ------------------------------------------------------------ validation */

static int g_bad; /* which value fill_bad corrupts */

static float fill_bad(const char *name, uint64_t i, uint64_t *seed) {
    float v = fill_default(name, i, seed);
    if (g_bad == 1 && strcmp(name, "net.1.running_var") == 0 && i == 2) return -1.0f;
    if (g_bad == 2 && strcmp(name, "net.1.weight") == 0 && i == 0) return NAN;
    if (g_bad == 3 && strcmp(name, "net.0.weight") == 0 && i == 5) return INFINITY;
    if (g_bad == 4 && strcmp(name, "net.1.running_var") == 0) return 0.0f;
    return v;
}

static void test_validation(void **state) {
    (void)state;
    const char *in = npuc_test_path("bad.safetensors"), *out = npuc_test_path("bad_out.safetensors");
    static const struct { int bad; npuc_status st; const char *msg; } CASES[] = {
        {1, NPUC_ERR_VALUE, "var + eps"},
        {2, NPUC_ERR_VALUE, "net.1.weight"},
        {3, NPUC_ERR_VALUE, "net.0.weight"},
        {4, NPUC_OK, NULL}, /* variance exactly 0: legal */
    };
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
        g_bad = CASES[k].bad;
        write_model(in, TORCH_NET, 6, NULL, 0, fill_bad);
        remove(out);
        npuc_model *m = open_m(in);
        npuc_bnfold_params p = npuc_bnfold_params_defaults();
        npuc_bnfold_plan plan;
        npuc_summary sum;
        assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), NPUC_OK);
        assert_int_equal(npuc_bnfold_model(ctx, m, &plan, &p, out, &sum), CASES[k].st);
        if (CASES[k].msg) {
            const char *e = npuc_ctx_errmsg(ctx);
            if (!strstr(e, CASES[k].msg) || !strstr(e, in)) fail_msg("case %d: %s", CASES[k].bad, e);
            assert_false(npuc_test_exists(out));
            assert_false(npuc_test_exists(tmp));
            assert_int_equal(sum.nrecords, 0);
            /* A dry run finds the same error. */
            assert_int_equal(npuc_bnfold_model(ctx, m, &plan, &p, NULL, &sum), CASES[k].st);
        } else {
            assert_true(npuc_test_exists(out));
            npuc_summary_free(&sum);
            npuc_model *o = open_m(out);
            double *w = read_d(o, "net.0.weight");
            for (int e = 0; e < 108; e++) assert_true(isfinite(w[e]));
            free(w);
            check_folded_axis0(m, o, "net.0.weight", NULL, "net.1", 1e-5, 1e-6);
            npuc_model_close(o);
        }
        npuc_bnfold_plan_free(&plan);
        npuc_model_close(m);
    }
    /* BatchNorm tensors that disagree in length: a format error at find. */
    static const tspec MIS[] = {
        {"net.0.weight", 4, {4, 3, 3, 3}, 0, NULL},
        {"net.1.running_mean", 1, {4}, 0, NULL},
        {"net.1.running_var", 1, {3}, 0, NULL},
    };
    write_model(in, MIS, 3, NULL, 0, NULL);
    npuc_model *m = open_m(in);
    npuc_bnfold_params p = npuc_bnfold_params_defaults();
    npuc_bnfold_plan plan;
    assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), NPUC_ERR_FORMAT);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "mismatched channel counts"));
    p.eps = -1;
    assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), NPUC_ERR_ARG);
    npuc_model_close(m);
}

/* The same output bytes for any thread count. */
static void test_thread_independence(void **state) {
    (void)state;
    static const tspec BIG[] = {
        {"f.0.weight", 4, {128, 64, 3, 3}, 0, NULL}, /* large enough for the parallel path */
        {"f.1.running_mean", 1, {128}, 0, NULL}, {"f.1.running_var", 1, {128}, 0, NULL},
    };
    const char *in = npuc_test_path("big.safetensors");
    write_model(in, BIG, 3, NULL, 0, NULL);
    npuc_model *m = open_m(in);
    void *bytes[2];
    size_t len[2];
    for (int r = 0; r < 2; r++) {
        const char *out = npuc_test_path(r ? "big4.safetensors" : "big1.safetensors");
        npuc_ctx_set_threads(ctx, r ? 4 : 1);
        npuc_bnfold_params p = npuc_bnfold_params_defaults();
        npuc_bnfold_plan plan;
        npuc_summary sum;
        assert_int_equal(npuc_bnfold_find(ctx, m, &p, &plan), NPUC_OK);
        assert_int_equal(npuc_bnfold_model(ctx, m, &plan, &p, out, &sum), NPUC_OK);
        npuc_summary_free(&sum);
        npuc_bnfold_plan_free(&plan);
        bytes[r] = npuc_test_read_file(out, &len[r]);
    }
    npuc_ctx_set_threads(ctx, 0);
    assert_int_equal(len[0], len[1]);
    assert_memory_equal(bytes[0], bytes[1], len[0]);
    free(bytes[0]);
    free(bytes[1]);
    npuc_model_close(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_coeffs_hand_worked),
        cmocka_unit_test(test_layers_against_reference),
        cmocka_unit_test(test_model_torch_names),
        cmocka_unit_test(test_preactivation),
        cmocka_unit_test(test_stated_graph),
        cmocka_unit_test(test_keras_topology),
        cmocka_unit_test(test_keras_names_and_order),
        cmocka_unit_test(test_exported_alphabetical),
        cmocka_unit_test(test_transposed_and_f16),
        cmocka_unit_test(test_explicit_pairs),
        cmocka_unit_test(test_validation),
        cmocka_unit_test(test_thread_independence),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
