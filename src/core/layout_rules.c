/*
 * layout_rules.c - a tensor's role and layout from evidence, strongest first
 * (layout_rules.h gives the order; docs/formats.md#layouts the rules).
 *
 * The name is cut into its token (the text after the last '/' or '.', with a
 * Keras 2 ":0" dropped) and its stem (the component before the token).  Each
 * exporter family's naming rules map a token, the stem and the shape to a
 * role and layout; the file's own family (its "format" metadata, or being a
 * Keras tree) then says how far to trust that:
 *   - the name's family is the file's, and the name is unambiguous in it
 *     ("depthwise_filter" in a TF file): CERTAIN;
 *   - the name's family is the file's but the name is shared by layers with
 *     another layout (a TF "kernel" of rank 4 may be a Conv2DTranspose's;
 *     a PyTorch ".weight" may be a ConvTranspose's), or the file names no
 *     family: CONVENTION;
 *   - the name contradicts the file's family, or nothing but the shape
 *     speaks: GUESS, and the file's family layout (metadata outranks names).
 * Keras 2 model_config class names and Keras 3 layer paths
 * (layers/<layer>/vars/N, the layer named after its class by default) are
 * file structure: the class decides (CERTAIN), the default layer name is a
 * convention.  Layouts npuc has no value for (a Keras Conv2DTranspose kernel
 * [kh,kw,out,in], an MLX conv weight [out,kh,kw,in]) stay NONE with evidence
 * saying so: such a tensor is quantized per tensor, never along a wrong axis.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_kconfig.h"
#include "layout_rules.h"

/* ------------------------------------------------------------ source */

static npuc__family family_of(int keras, const char *format, const char **why) {
    static const struct { const char *v; npuc__family f; const char *why; } F[] = {
        {"tf", NPUC__FAM_TF, "format=tf"},     {"flax", NPUC__FAM_FLAX, "format=flax"},
        {"jax", NPUC__FAM_FLAX, "format=flax"}, {"pt", NPUC__FAM_PT, "format=pt"},
        {"mlx", NPUC__FAM_MLX, "format=mlx"},
    };
    for (size_t i = 0; format && i < sizeof F / sizeof F[0]; i++)
        if (strcmp(format, F[i].v) == 0) { *why = F[i].why; return F[i].f; }
    *why = keras ? "Keras file" : NULL;
    return keras ? NPUC__FAM_TF : NPUC__FAM_UNKNOWN;
}

int npuc__layout_src_init(npuc__layout_src *s, int keras, const char *format, const char *model_config) {
    memset(s, 0, sizeof *s);
    s->keras = keras;
    s->fam = family_of(keras, format, &s->fam_why);
    if (format && *format && s->fam == NPUC__FAM_UNKNOWN && !keras)
        snprintf(s->stated, sizeof s->stated, "%.20s", format);
    if (!model_config) return 0;
    /* The one reader of the configuration (graph_kconfig.c): a
     * configuration it refuses names no class (it is evidence, not a
     * requirement); only running out of memory is an error. */
    npuc_status st = npuc__kconfig_layers(NULL, "model_config", model_config, strlen(model_config), &s->layer,
                                          &s->cls, &s->nlayers);
    return st == NPUC_ERR_NOMEM ? -1 : 0;
}

int npuc__layout_src_from_meta(npuc__layout_src *s, int keras, char *const *k, char *const *v, size_t n) {
    const char *format = NULL, *config = NULL;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(k[i], "format") == 0) format = v[i];
        else if (strcmp(k[i], "model_config") == 0) config = v[i];
    }
    return npuc__layout_src_init(s, keras, format, config);
}

void npuc__layout_src_free(npuc__layout_src *s) {
    for (size_t i = 0; i < s->nlayers; i++) { free(s->layer[i]); free(s->cls[i]); }
    free(s->layer);
    free(s->cls);
    memset(s, 0, sizeof *s);
}

/* ------------------------------------------------------------ names */

typedef struct name_parts {
    const char *tok, *stem, *name;
    size_t tokn, stemn, n;
} name_parts;

static void split_name(const char *name, name_parts *p) {
    size_t n = strlen(name);
    /* Keras 2 names carry ":0"; ignore it. */
    if (n >= 2 && name[n - 2] == ':' && isdigit((unsigned char)name[n - 1])) n -= 2;
    size_t t = n;
    while (t > 0 && name[t - 1] != '/' && name[t - 1] != '.') t--;
    size_t s = t ? t - 1 : 0;
    while (s > 0 && name[s - 1] != '/' && name[s - 1] != '.') s--;
    p->name = name;
    p->n = n;
    p->tok = name + t;
    p->tokn = n - t;
    p->stem = name + s;
    p->stemn = t ? t - 1 - s : 0;
}

static int tok_is(const name_parts *p, const char *s) {
    return p->tokn == strlen(s) && memcmp(p->tok, s, p->tokn) == 0;
}

static int tok_starts(const name_parts *p, const char *s) {
    return p->tokn >= strlen(s) && memcmp(p->tok, s, strlen(s)) == 0;
}

static int stem_is(const name_parts *p, const char *s) {
    return p->stemn == strlen(s) && memcmp(p->stem, s, p->stemn) == 0;
}

/* Case-insensitive search of needle in the first n bytes of s. */
static int has_ci(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++) {
        size_t j = 0;
        while (j < k && tolower((unsigned char)s[i + j]) == needle[j]) j++;
        if (j == k) return 1;
    }
    return 0;
}

/* A bias-like shape: every axis but one is 1 (Paddle's [1,C,1,1]). */
static int one_live_axis(const npuc_tensor_info *t) {
    int live = 0;
    for (int i = 0; i < t->rank; i++) live += t->shape[i] != 1;
    return live <= 1;
}

/* ------------------------------------------------------------ rules */

enum { NF_NONE, NF_TF, NF_PT };

/* What a naming rule says: the family whose convention the name follows
 * (NF_TF, NF_PT, or NF_NONE: the name says nothing), whether the name is
 * unambiguous within it, and the label and description for the evidence. */
typedef struct name_rule {
    int fam, unambiguous;
    npuc_role role;
    npuc_layout layout;
    const char *label, *what;
} name_rule;

static void set_rule(name_rule *r, int fam, int unamb, npuc_role role, npuc_layout l, const char *label,
                     const char *what) {
    *r = (name_rule){.fam = fam, .unambiguous = unamb, .role = role, .layout = l, .label = label, .what = what};
}

/* The conv role of an [out, in/groups, *spatial] weight: depthwise when one
 * input channel per group and a real kernel. */
static npuc_role oihw_role(const npuc_tensor_info *t) {
    uint64_t spatial = 1;
    for (int i = 2; i < t->rank; i++) spatial *= (uint64_t)t->shape[i];
    return t->shape[1] == 1 && t->shape[0] > 1 && spatial > 1 ? NPUC_ROLE_DWCONV : NPUC_ROLE_CONV;
}

/* Keras, TensorFlow, tfjs and Flax names. */
static int tf_rule(const name_parts *p, const npuc_tensor_info *t, name_rule *r) {
    const int k = t->rank;
    if (tok_is(p, "depthwise_kernel") || tok_is(p, "depthwise_filter") || tok_is(p, "depthwise_weights")) {
        if (k >= 3) set_rule(r, NF_TF, 1, NPUC_ROLE_DWCONV, NPUC_LAYOUT_HWIM, "TF name", "depthwise kernel [*spatial,in,mult]");
        else set_rule(r, NF_TF, 1, NPUC_ROLE_DWCONV, NPUC_LAYOUT_NONE, "TF name", "depthwise kernel of rank < 3");
    } else if (tok_is(p, "pointwise_kernel") || tok_is(p, "pointwise_filter") || tok_is(p, "pointwise_weights")) {
        set_rule(r, NF_TF, 1, NPUC_ROLE_CONV, k >= 3 ? NPUC_LAYOUT_HWIO : NPUC_LAYOUT_NONE, "TF name",
                 "pointwise kernel [1,1,in,out]");
    } else if (tok_is(p, "kernel") || tok_is(p, "filters") || tok_is(p, "weights")) {
        if (k >= 3)
            set_rule(r, NF_TF, 0, NPUC_ROLE_CONV, NPUC_LAYOUT_HWIO, "TF name", "conv kernel [*spatial,in,out]");
        else if (k == 2)
            set_rule(r, NF_TF, 1, NPUC_ROLE_LINEAR, NPUC_LAYOUT_IO, "TF name", "dense kernel [in,out]");
        else return 0;
    } else if (tok_is(p, "recurrent_kernel") && k == 2) {
        set_rule(r, NF_TF, 1, NPUC_ROLE_RNN, NPUC_LAYOUT_IO, "TF name", "recurrent kernel [units,gates*units]");
    } else if ((tok_is(p, "embeddings") || tok_is(p, "embedding")) && k == 2) {
        set_rule(r, NF_TF, 1, NPUC_ROLE_EMBEDDING, NPUC_LAYOUT_OI, "TF name", "embedding table [vocab,dim]");
    } else if (tok_is(p, "gamma")) {
        set_rule(r, NF_TF, 1, NPUC_ROLE_BN_GAMMA, NPUC_LAYOUT_NONE, "TF name", "BatchNorm gamma");
    } else if (tok_is(p, "beta")) {
        set_rule(r, NF_TF, 1, NPUC_ROLE_BN_BETA, NPUC_LAYOUT_NONE, "TF name", "BatchNorm beta");
    } else if (tok_is(p, "moving_mean")) {
        set_rule(r, NF_TF, 1, NPUC_ROLE_BN_MEAN, NPUC_LAYOUT_NONE, "TF name", "BatchNorm moving mean");
    } else if (tok_is(p, "moving_variance")) {
        set_rule(r, NF_TF, 1, NPUC_ROLE_BN_VAR, NPUC_LAYOUT_NONE, "TF name", "BatchNorm moving variance");
    } else {
        return 0;
    }
    return 1;
}

/* Paddle names: <op>_N.w_0 / .b_0, batch_norm_N.w_0..w_2, b_0. */
static int paddle_rule(const name_parts *p, const npuc_tensor_info *t, name_rule *r) {
    if (!(tok_is(p, "w_0") || tok_is(p, "w_1") || tok_is(p, "w_2") || tok_is(p, "b_0"))) return 0;
    const int k = t->rank;
    const int bn = has_ci(p->stem, p->stemn, "batch_norm") || has_ci(p->stem, p->stemn, "batchnorm");
    if (bn && k == 1) {
        static const npuc_role R[4] = {NPUC_ROLE_BN_GAMMA, NPUC_ROLE_BN_MEAN, NPUC_ROLE_BN_VAR, NPUC_ROLE_BN_BETA};
        static const char *const W[4] = {"BatchNorm scale", "BatchNorm mean", "BatchNorm variance", "BatchNorm shift"};
        int i = tok_is(p, "b_0") ? 3 : p->tok[2] - '0';
        set_rule(r, NF_PT, 1, R[i], NPUC_LAYOUT_NONE, "Paddle name", W[i]);
    } else if (tok_is(p, "b_0") && one_live_axis(t)) {
        set_rule(r, NF_PT, 1, NPUC_ROLE_BIAS, NPUC_LAYOUT_NONE, "Paddle name",
                 k == 1 ? "bias" : "bias [1,C,1,1]: no channel axis of its own");
    } else if (!tok_is(p, "w_0")) {
        return 0;
    } else if (k >= 3 && (has_ci(p->stem, p->stemn, "transpose") || has_ci(p->stem, p->stemn, "deconv"))) {
        set_rule(r, NF_PT, 1, NPUC_ROLE_CONVT, NPUC_LAYOUT_IOHW, "Paddle name",
                 "transposed conv weight [in,out/groups,*spatial]");
    } else if (k >= 3) {
        set_rule(r, NF_PT, 1, oihw_role(t), NPUC_LAYOUT_OIHW, "Paddle name", "conv weight [out,in/groups,*spatial]");
    } else if (k == 2 && has_ci(p->stem, p->stemn, "embedding")) {
        set_rule(r, NF_PT, 1, NPUC_ROLE_EMBEDDING, NPUC_LAYOUT_OI, "Paddle name", "embedding table [vocab,dim]");
    } else if (k == 2) {
        set_rule(r, NF_PT, 0, NPUC_ROLE_LINEAR, NPUC_LAYOUT_IO, "Paddle name", "matmul weight [in,out]");
    } else if (k == 1) {
        set_rule(r, NF_PT, 0, NPUC_ROLE_NORM, NPUC_LAYOUT_NONE, "Paddle name", "norm scale");
    } else {
        return 0;
    }
    return 1;
}

/* ONNX initializers: LSTM/GRU/RNN W, R, B; MatMul constants. */
static int onnx_rule(const name_parts *p, const npuc_tensor_info *t, name_rule *r) {
    const int k = t->rank;
    const int dirs = k >= 2 && (t->shape[0] == 1 || t->shape[0] == 2);
    const int rnn_name = has_ci(p->name, p->n, "lstm") || has_ci(p->name, p->n, "gru") || has_ci(p->name, p->n, "rnn");
    if (k == 3 && dirs && (tok_is(p, "W") || tok_is(p, "R") || (rnn_name && !tok_starts(p, "bias")))) {
        set_rule(r, NF_PT, tok_is(p, "W") || tok_is(p, "R"), NPUC_ROLE_RNN, NPUC_LAYOUT_DOI, "ONNX name",
                 "LSTM/GRU W/R [dirs,gates*hidden,in]");
    } else if (k == 2 && dirs && tok_is(p, "B") ) {
        set_rule(r, NF_PT, 1, NPUC_ROLE_BIAS, NPUC_LAYOUT_NONE, "ONNX name", "LSTM/GRU B [dirs,2*gates*hidden]");
    } else if (k == 2 && has_ci(p->name, p->n, "matmul")) {
        set_rule(r, NF_PT, 0, NPUC_ROLE_LINEAR, NPUC_LAYOUT_IO, "ONNX name", "MatMul constant [in,out]");
    } else {
        return 0;
    }
    return 1;
}

/* PyTorch and Hugging Face transformers names. */
static int pt_rule(const name_parts *p, const npuc_tensor_info *t, name_rule *r) {
    const int k = t->rank;
    if (tok_is(p, "running_mean")) {
        set_rule(r, NF_PT, 1, NPUC_ROLE_BN_MEAN, NPUC_LAYOUT_NONE, "PyTorch name", "BatchNorm running mean");
    } else if (tok_is(p, "running_var")) {
        set_rule(r, NF_PT, 1, NPUC_ROLE_BN_VAR, NPUC_LAYOUT_NONE, "PyTorch name", "BatchNorm running variance");
    } else if (tok_is(p, "num_batches_tracked")) {
        set_rule(r, NF_PT, 1, NPUC_ROLE_BN_COUNT, NPUC_LAYOUT_NONE, "PyTorch name", "BatchNorm batch count");
    } else if ((tok_starts(p, "weight_ih") || tok_starts(p, "weight_hh")) && k == 2) {
        set_rule(r, NF_PT, 1, NPUC_ROLE_RNN, NPUC_LAYOUT_OI, "PyTorch name", "RNN weight [gates*hidden,in]");
    } else if (!tok_is(p, "weight")) {
        return 0;
    } else if (k >= 3 && (has_ci(p->name, p->n, "transpose") || has_ci(p->name, p->n, "deconv"))) {
        set_rule(r, NF_PT, 0, NPUC_ROLE_CONVT, NPUC_LAYOUT_IOHW, "PyTorch name",
                 "ConvTranspose weight [in,out/groups,*spatial]");
    } else if (k >= 3) {
        set_rule(r, NF_PT, 0, oihw_role(t), NPUC_LAYOUT_OIHW, "PyTorch name", "conv weight [out,in/groups,*spatial]");
    } else if (k == 2 && (stem_is(p, "c_attn") || stem_is(p, "c_proj") || stem_is(p, "c_fc"))) {
        /* transformers' Conv1D (GPT-2 family) stores [in, out]. */
        set_rule(r, NF_PT, 0, NPUC_ROLE_LINEAR, NPUC_LAYOUT_IO, "HF transformers name", "Conv1D weight [in,out]");
    } else if (k == 2 && has_ci(p->name, p->n, "embed")) {
        set_rule(r, NF_PT, 0, NPUC_ROLE_EMBEDDING, NPUC_LAYOUT_OI, "PyTorch name", "embedding table [vocab,dim]");
    } else if (k == 2 && (has_ci(p->name, p->n, "rnn") || has_ci(p->name, p->n, "lstm") || has_ci(p->name, p->n, "gru"))) {
        set_rule(r, NF_PT, 0, NPUC_ROLE_RNN, NPUC_LAYOUT_OI, "PyTorch name", "RNN weight [gates*hidden,in]");
    } else if (k == 2) {
        set_rule(r, NF_PT, 0, NPUC_ROLE_LINEAR, NPUC_LAYOUT_OI, "PyTorch name", "linear weight [out,in]");
    } else if (k == 1) {
        set_rule(r, NF_PT, 0, NPUC_ROLE_NORM, NPUC_LAYOUT_NONE, "PyTorch name", "norm scale");
    } else {
        return 0;
    }
    return 1;
}

/* Biases of any family: rank 1, or a bias-like [1,C,1,1]. */
static int bias_rule(const name_parts *p, const npuc_tensor_info *t, name_rule *r) {
    if (!(has_ci(p->tok, p->tokn, "bias") || tok_is(p, "b")) || !one_live_axis(t)) return 0;
    set_rule(r, NF_NONE, 1, NPUC_ROLE_BIAS, NPUC_LAYOUT_NONE, "name", t->rank <= 1 ? "bias" : "bias-like shape, one live axis");
    return 1;
}

/* The layout family fam uses for an unnamed weight of t's rank. */
static void family_default(npuc__family fam, const npuc_tensor_info *t, name_rule *r) {
    const int k = t->rank;
    if (fam == NPUC__FAM_TF || fam == NPUC__FAM_FLAX) {
        if (k >= 3) set_rule(r, NF_TF, 0, NPUC_ROLE_CONV, NPUC_LAYOUT_HWIO, "", "conv kernel [*spatial,in,out]");
        else set_rule(r, NF_TF, 0, NPUC_ROLE_LINEAR, NPUC_LAYOUT_IO, "", "dense kernel [in,out]");
    } else if (fam == NPUC__FAM_MLX && k >= 3) {
        set_rule(r, NF_PT, 0, NPUC_ROLE_CONV, NPUC_LAYOUT_NONE, "",
                 "conv weight [out,*spatial,in] has no npuc layout (per tensor unless --layout)");
    } else {
        if (k >= 3) set_rule(r, NF_PT, 0, oihw_role(t), NPUC_LAYOUT_OIHW, "", "conv weight [out,in/groups,*spatial]");
        else set_rule(r, NF_PT, 0, NPUC_ROLE_LINEAR, NPUC_LAYOUT_OI, "", "linear weight [out,in]");
    }
}

/* ------------------------------------------------------------ Keras structure */

/* A Keras layer name without a trailing "_N" (Keras numbers default names). */
static size_t base_len(const char *s, size_t n) {
    size_t e = n;
    while (e > 0 && isdigit((unsigned char)s[e - 1])) e--;
    return e < n && e > 1 && s[e - 1] == '_' ? e - 1 : n;
}

static int base_is(const char *s, size_t n, const char *b) {
    return n == strlen(b) && memcmp(s, b, n) == 0;
}

size_t npuc__keras3_var(const char *name, size_t n) {
    size_t t = n;
    while (t > 0 && isdigit((unsigned char)name[t - 1])) t--;
    if (t == n || t < 7 || memcmp(name + t - 6, "/vars/", 6) != 0) return 0;
    return t - 5;
}

/* Keras 3 .weights.h5: <...>/<layer>/vars/<i>, the layer named after its class
 * by default.  Returns 1 when the layer's class is recognised. */
static int keras3_rule(const name_parts *p, const npuc_tensor_info *t, name_rule *r) {
    const size_t at = npuc__keras3_var(p->name, p->n);
    if (!at) return 0;
    const int v = atoi(p->name + at + 5);
    /* The layer: the component before "vars" ("cell" for an RNN's cell: the one before). */
    const char *e = p->name + at - 1, *s = e;
    while (s > p->name && s[-1] != '/') s--;
    if (e - s == 4 && memcmp(s, "cell", 4) == 0 && s > p->name) {
        e = s - 1;
        s = e;
        while (s > p->name && s[-1] != '/') s--;
    }
    if (s >= e) return 0;
    const size_t bl = base_len(s, (size_t)(e - s));
    const int k = t->rank;
    const char *L = "Keras 3 layer path";
#define B(x) base_is(s, bl, x)
    if ((B("depthwise_conv2d") || B("depthwise_conv1d")) && v == 0 && k >= 3)
        set_rule(r, NF_TF, 0, NPUC_ROLE_DWCONV, NPUC_LAYOUT_HWIM, L, "depthwise_conv*/vars/0: depthwise kernel [*spatial,in,mult]");
    else if ((B("separable_conv2d") || B("separable_conv1d")) && v == 0 && k >= 3)
        set_rule(r, NF_TF, 0, NPUC_ROLE_DWCONV, NPUC_LAYOUT_HWIM, L, "separable_conv*/vars/0: depthwise kernel [*spatial,in,mult]");
    else if ((B("separable_conv2d") || B("separable_conv1d")) && v == 1 && k >= 3)
        set_rule(r, NF_TF, 0, NPUC_ROLE_CONV, NPUC_LAYOUT_HWIO, L, "separable_conv*/vars/1: pointwise kernel [1,1,in,out]");
    else if ((B("conv1d_transpose") || B("conv2d_transpose") || B("conv3d_transpose")) && v == 0 && k >= 3)
        set_rule(r, NF_TF, 0, NPUC_ROLE_CONVT, NPUC_LAYOUT_NONE, L,
                 "conv*_transpose/vars/0: kernel [*spatial,out,in] has no npuc layout (per tensor unless --layout)");
    else if ((B("conv1d") || B("conv2d") || B("conv3d")) && v == 0 && k >= 3)
        set_rule(r, NF_TF, 0, NPUC_ROLE_CONV, NPUC_LAYOUT_HWIO, L, "conv*/vars/0: conv kernel [*spatial,in,out]");
    else if (B("dense") && v == 0 && k == 2)
        set_rule(r, NF_TF, 0, NPUC_ROLE_LINEAR, NPUC_LAYOUT_IO, L, "dense/vars/0: dense kernel [in,out]");
    else if (B("embedding") && v == 0 && k == 2)
        set_rule(r, NF_TF, 0, NPUC_ROLE_EMBEDDING, NPUC_LAYOUT_OI, L, "embedding/vars/0: embedding table [vocab,dim]");
    else if ((B("lstm") || B("gru") || B("simple_rnn")) && v <= 1 && k == 2)
        set_rule(r, NF_TF, 0, NPUC_ROLE_RNN, NPUC_LAYOUT_IO, L, "RNN cell vars/0,1: kernel [in,gates*units]");
    else if (B("batch_normalization") && v <= 3 && k == 1) {
        static const npuc_role R[4] = {NPUC_ROLE_BN_GAMMA, NPUC_ROLE_BN_BETA, NPUC_ROLE_BN_MEAN, NPUC_ROLE_BN_VAR};
        set_rule(r, NF_TF, 0, R[v], NPUC_LAYOUT_NONE, L, "batch_normalization/vars/0..3: gamma, beta, mean, variance");
    } else if (B("layer_normalization") && k == 1)
        set_rule(r, NF_TF, 0, NPUC_ROLE_NORM, NPUC_LAYOUT_NONE, L, "layer_normalization/vars: scale, shift");
    else if (k == 1 && v >= 1 && (B("dense") || B("conv1d") || B("conv2d") || B("conv3d") || B("depthwise_conv2d") ||
                                  B("depthwise_conv1d") || B("separable_conv2d") || B("separable_conv1d") ||
                                  B("conv2d_transpose") || B("conv1d_transpose") || B("conv3d_transpose") ||
                                  B("lstm") || B("gru") || B("simple_rnn")))
        set_rule(r, NF_TF, 0, NPUC_ROLE_BIAS, NPUC_LAYOUT_NONE, L, "vars/N of rank 1: bias");
    else
        return 0;
#undef B
    return 1;
}

/* The class model_config gives the tensor's layer, or NULL. */
static const char *config_class(const npuc__layout_src *s, const npuc_tensor_info *t) {
    if (!s->nlayers) return NULL;
    const char *layer = t->group;
    size_t ln = layer ? strlen(layer) : 0;
    if (!layer) {
        const char *sl = strchr(t->name, '/');
        if (!sl) return NULL;
        layer = t->name;
        ln = (size_t)(sl - t->name);
    }
    for (size_t i = 0; i < s->nlayers; i++)
        if (strlen(s->layer[i]) == ln && memcmp(s->layer[i], layer, ln) == 0) return s->cls[i];
    return NULL;
}

/* Applies a model_config class to a TF-named decision: the class settles the
 * question the name left open (Conv2D or Conv2DTranspose behind "kernel"). */
static int config_rule(const char *cls, const name_rule *nr, name_rule *r) {
    if (!cls || nr->fam != NF_TF) return 0;
    *r = *nr;
    r->label = "Keras model_config";
    if (strstr(cls, "Transpose") && nr->role == NPUC_ROLE_CONV) {
        r->role = NPUC_ROLE_CONVT;
        r->layout = NPUC_LAYOUT_NONE;
        r->what = "transposed conv kernel [*spatial,out,in] has no npuc layout (per tensor unless --layout)";
        return 1;
    }
    const int conv = strncmp(cls, "Conv", 4) == 0 || strncmp(cls, "Convolution", 11) == 0;
    const int ok = (conv && nr->role == NPUC_ROLE_CONV) ||
                   (strstr(cls, "Depthwise") && nr->role == NPUC_ROLE_DWCONV) ||
                   (strstr(cls, "Separable") && (nr->role == NPUC_ROLE_DWCONV || nr->role == NPUC_ROLE_CONV)) ||
                   (strcmp(cls, "Dense") == 0 && nr->role == NPUC_ROLE_LINEAR) ||
                   (strcmp(cls, "Embedding") == 0 && nr->role == NPUC_ROLE_EMBEDDING) ||
                   (strstr(cls, "BatchNorm") && nr->role >= NPUC_ROLE_BN_GAMMA && nr->role <= NPUC_ROLE_BN_VAR) ||
                   ((strstr(cls, "LSTM") || strstr(cls, "GRU") || strstr(cls, "RNN")) &&
                    (nr->role == NPUC_ROLE_RNN || nr->role == NPUC_ROLE_LINEAR));
    if (!ok) return 0;
    if (nr->role == NPUC_ROLE_LINEAR && strcmp(cls, "Dense") != 0) r->role = NPUC_ROLE_RNN;
    r->unambiguous = 1;
    return 1;
}

/* ------------------------------------------------------------ decide */

/* Records rule r with confidence c and the evidence "<a><b><c>: <what>". */
static void decided(npuc__layout_decision *d, const name_rule *r, npuc_confidence c, const char *a,
                    const char *b, const char *e) {
    d->role = r->role;
    d->layout = r->layout;
    d->conf = c;
    snprintf(d->ev, sizeof d->ev, "%s%s%s: %s", a, b, e, r->what);
}

/* Shape plausibility alone: a rank-4 [k,k,in,out] with a small square
 * kernel first and not last reads as HWIO; anything else by rank. */
static void by_shape(const npuc_tensor_info *t, npuc__layout_decision *d) {
    name_rule r;
    const int64_t *s = t->shape;
    const int hwio = t->rank == 4 && s[0] == s[1] && s[0] <= 7 && !(s[2] == s[3] && s[2] <= 7);
    if (hwio) {
        set_rule(&r, NF_TF, 0, NPUC_ROLE_CONV, NPUC_LAYOUT_HWIO, "", "conv kernel [kh,kw,in,out]");
        decided(d, &r, NPUC_CONF_GUESS, "no name or format evidence", "; shape looks like it", "");
    } else {
        family_default(NPUC__FAM_PT, t, &r);
        decided(d, &r, NPUC_CONF_GUESS, "no name or format evidence", "; by rank, PyTorch's", "");
    }
}

void npuc__layout_decide(const npuc__layout_src *s, const npuc_tensor_info *t, npuc__layout_decision *d) {
    name_parts p;
    name_rule nr, cr;
    split_name(t->name, &p);
    memset(d, 0, sizeof *d);
    d->conf = NPUC_CONF_CERTAIN;
    const int fam_nf = s->fam == NPUC__FAM_TF || s->fam == NPUC__FAM_FLAX ? NF_TF
                       : s->fam == NPUC__FAM_PT || s->fam == NPUC__FAM_MLX ? NF_PT : NF_NONE;
    char tok[48];
    snprintf(tok, sizeof tok, "'%.*s'", (int)(p.tokn < 40 ? p.tokn : 40), p.tok);

    int named = (s->keras && keras3_rule(&p, t, &nr)) || tf_rule(&p, t, &nr) || paddle_rule(&p, t, &nr) ||
                onnx_rule(&p, t, &nr) || pt_rule(&p, t, &nr) || bias_rule(&p, t, &nr);
    if (named && config_rule(config_class(s, t), &nr, &cr)) {
        decided(d, &cr, NPUC_CONF_CERTAIN, "Keras model_config ", config_class(s, t), "");
        return;
    }
    if (named && nr.layout == NPUC_LAYOUT_NONE) {
        /* No axis to get wrong: the role is what the name says. */
        decided(d, &nr, nr.unambiguous ? NPUC_CONF_CERTAIN : NPUC_CONF_CONVENTION, nr.label, " ", tok);
        return;
    }
    if (named && s->fam == NPUC__FAM_MLX && t->rank >= 3) named = 0; /* MLX conv: see family_default */
    if (named && fam_nf == NF_NONE && s->stated[0] && t->rank >= 2) {
        /* The file states a format that names no family ("np"): a family's
         * naming convention does not outrank it; the shapes may decide
         * (npuc__layout_refine), else it stays a guess. */
        decided(d, &nr, NPUC_CONF_GUESS, "", "", "");
        d->kind = NPUC__DEC_DEMOTED;
        snprintf(d->ev, sizeof d->ev, "format=%s names no family, so the %s %s does not decide: %s, a guess",
                 s->stated, nr.label, tok, nr.what);
        return;
    }
    if (named && (nr.fam == fam_nf || fam_nf == NF_NONE)) {
        npuc_confidence c = nr.fam == fam_nf && nr.unambiguous ? NPUC_CONF_CERTAIN : NPUC_CONF_CONVENTION;
        char pre[64];
        snprintf(pre, sizeof pre, "%s%s%s ", fam_nf == NF_NONE ? "" : s->fam_why, fam_nf == NF_NONE ? "" : ", ",
                 nr.label);
        decided(d, &nr, c, pre, tok, "");
        return;
    }
    if (t->rank < 2) {
        d->role = named ? nr.role : NPUC_ROLE_OTHER;
        d->layout = NPUC_LAYOUT_NONE;
        return;
    }
    if (fam_nf == NF_NONE) {
        by_shape(t, d);
        d->kind = NPUC__DEC_UNNAMED;
        return;
    }
    /* The file names its family: its convention decides.  A name of the other
     * family, or no telling name, leaves it a convention at best. */
    family_default(s->fam, t, &cr);
    if (named) {
        d->role = cr.role;
        d->layout = cr.layout;
        d->conf = NPUC_CONF_GUESS;
        snprintf(d->ev, sizeof d->ev, "%s outranks the %s %s (%s): read as %s", s->fam_why, nr.label, tok,
                 npuc_layout_name(nr.layout), cr.what);
        return;
    }
    /* A Keras weight that may be depthwise ([kh,kw,C,1]) is not settled by
     * rank, nor is a weight the family's layout gives one output channel
     * (an ONNX RNN W [1,gates*hidden,in] read as OIHW). */
    const int maybe_dw = fam_nf == NF_TF && t->rank >= 3 && t->shape[t->rank - 1] == 1;
    const int ax = npuc_layout_out_axis(cr.layout, t->rank);
    const int one_ch = ax >= 0 && t->shape[ax] == 1 && t->numel > 1;
    decided(d, &cr, maybe_dw || one_ch ? NPUC_CONF_GUESS : NPUC_CONF_CONVENTION, s->fam_why, ", unnamed weight ", tok);
    d->kind = NPUC__DEC_UNNAMED;
}

void npuc_guess_role_layout(const char *name, int rank, const int64_t *shape, int keras, npuc_role *role,
                            npuc_layout *layout) {
    npuc_tensor_info t;
    npuc__layout_src s;
    npuc__layout_decision d;
    memset(&t, 0, sizeof t);
    t.name = name;
    t.rank = rank < 0 ? 0 : rank > NPUC_MAX_RANK ? NPUC_MAX_RANK : rank;
    for (int i = 0; i < t.rank; i++) t.shape[i] = shape[i];
    npuc__layout_src_init(&s, keras, NULL, NULL); /* allocates nothing without a config */
    npuc__layout_decide(&s, &t, &d);
    *role = d.role;
    *layout = d.layout;
}
