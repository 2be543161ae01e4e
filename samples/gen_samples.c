/*
 * gen_samples.c - writes the bundled sample models (samples/README.md).
 *
 *     build/npuc_gen_samples samples      # rewrites the .safetensors and .h5 samples
 *
 * The output must be byte-for-byte reproducible on every machine, because the
 * committed files are compared against a fresh run in tests/cli/samples_fresh.sh.
 * So every value comes from integer arithmetic and correctly rounded IEEE
 * operations only (+ - * / and sqrt; no exp, log, sin, whose last bit differs
 * between C libraries):
 *
 *   - xorshift64* (Vigna 2016) gives 64-bit words; the top 24 bits of a word
 *     are a uniform integer u in [0, 2^24).
 *   - A roughly Gaussian z is the Irwin-Hall sum of four such uniforms,
 *     centred and scaled to unit variance: z = (sum * 2^-24 - 2) * sqrt(3).
 *     The sum is exact in an integer, the scaling is exact in double, and the
 *     two multiplications round once each.  Its tails end at +-2*sqrt(3),
 *     which suits weights well.
 *   - Weights are z * std with a He-style std = sqrt(2 / fan_in) for convs
 *     and sqrt(1 / fan_in) for linear layers, computed in double and rounded
 *     once to the stored dtype (F16 through npuc_f32_to_f16, which rounds half
 *     to even).
 *
 * Uses the public API only (<npuc/npuc.h>), like any other client.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <npuc/npuc.h>

/* ------------------------------------------------------------ values */

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r) {
    uint64_t x = r->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 0x2545f4914f6cdd1dull;
}

/* Uniform in [0, 1), a multiple of 2^-24. */
static double rng_uniform(rng *r) { return (double)(rng_next(r) >> 40) * 0x1p-24; }

/* Irwin-Hall(4), centred, unit variance. */
static double rng_gauss(rng *r) {
    uint64_t sum = 0;
    for (int k = 0; k < 4; k++) sum += rng_next(r) >> 40;
    return ((double)sum * 0x1p-24 - 2.0) * sqrt(3.0);
}

/* How a tensor's values are drawn. */
typedef enum kind {
    K_CONV,   /* z * sqrt(2 / fan_in) */
    K_LINEAR, /* z * sqrt(1 / fan_in) */
    K_BIAS,   /* z * 0.05 */
    K_GAMMA,  /* 1 + z * 0.1 */
    K_BETA,   /* z * 0.1 */
    K_MEAN,   /* z * 0.2 */
    K_VAR,    /* 0.25 + 1.5 u: positive */
    K_COUNT   /* num_batches_tracked: one I64 */
} kind;

typedef struct spec {
    const char *name;
    const char *group; /* Keras layer, or NULL */
    npuc_dtype dtype;
    int rank;
    int64_t shape[4];
    kind kind;
    int64_t fan_in;          /* K_CONV, K_LINEAR */
    const int *zero_at;      /* K_VAR: channels forced to an exact 0 (-1 ends) */
} spec;

static double draw(rng *r, const spec *s) {
    switch (s->kind) {
    case K_CONV: return rng_gauss(r) * sqrt(2.0 / (double)s->fan_in);
    case K_LINEAR: return rng_gauss(r) * sqrt(1.0 / (double)s->fan_in);
    case K_BIAS: return rng_gauss(r) * 0.05;
    case K_GAMMA: return 1.0 + rng_gauss(r) * 0.1;
    case K_BETA: return rng_gauss(r) * 0.1;
    case K_MEAN: return rng_gauss(r) * 0.2;
    case K_VAR: return 0.25 + 1.5 * rng_uniform(r);
    case K_COUNT: return 0;
    }
    return 0;
}

/* ------------------------------------------------------------ writing */

static int report(npuc_ctx *ctx, const char *what) {
    fprintf(stderr, "npuc_gen_samples: %s: %s\n", what, npuc_ctx_errmsg(ctx));
    return 1;
}

/* Writes one model: the tensors of specs (in order) with values from a PRNG
 * seeded with seed, and the given metadata pairs (NULL-terminated). */
static int write_model(npuc_ctx *ctx, const char *dir, const char *file, const spec *specs,
                       size_t n, uint64_t seed, const char *const *meta, int keras) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    npuc_write_opts o = npuc_write_opts_defaults();
    o.overwrite = 1;
    if (npuc_format_accepts(npuc_format_from_path(path), "structure") &&
        npuc_write_opts_set(ctx, &o, "structure", keras ? "keras2" : "plain") != NPUC_OK)
        return report(ctx, path);
    npuc_writer *w;
    if (npuc_writer_open(ctx, path, &o, &w) != NPUC_OK) return report(ctx, path);
    for (size_t i = 0; meta && meta[i]; i += 2)
        if (npuc_writer_meta(w, meta[i], meta[i + 1]) != NPUC_OK) goto fail;

    for (size_t i = 0; i < n; i++) {
        npuc_tensor_info t;
        memset(&t, 0, sizeof t);
        t.name = specs[i].name;
        t.dtype = specs[i].dtype;
        t.rank = specs[i].rank;
        for (int d = 0; d < t.rank; d++) t.shape[d] = specs[i].shape[d];
        t.group = specs[i].group;
        /* Declare the layout a reader will guess, so the writer has no
         * override to record. */
        npuc_guess_role_layout(t.name, t.rank, t.shape, keras, &t.role, &t.layout);
        if (npuc_writer_declare(w, &t) != NPUC_OK) goto fail;
    }

    rng r = {seed};
    for (size_t i = 0; i < n; i++) {
        const spec *s = &specs[i];
        uint64_t numel = 1;
        for (int d = 0; d < s->rank; d++) numel *= (uint64_t)s->shape[d];
        size_t esize = npuc_dtype_size(s->dtype);
        unsigned char *buf = calloc((size_t)numel, esize);
        if (!buf) {
            fprintf(stderr, "npuc_gen_samples: out of memory\n");
            npuc_writer_abort(w);
            return 1;
        }
        for (uint64_t k = 0; k < numel; k++) {
            if (s->kind == K_COUNT) {
                int64_t v = 4690; /* 10 epochs of 469 batches */
                memcpy(buf + k * esize, &v, sizeof v);
                continue;
            }
            float f = (float)draw(&r, s);
            for (const int *z = s->zero_at; z && *z >= 0; z++)
                if ((uint64_t)*z == k) f = 0.0f;
            if (s->dtype == NPUC_DTYPE_F16) {
                uint16_t h = npuc_f32_to_f16(f);
                memcpy(buf + k * esize, &h, sizeof h);
            } else {
                memcpy(buf + k * esize, &f, sizeof f);
            }
        }
        npuc_status st = npuc_writer_write(w, buf, numel * esize);
        free(buf);
        if (st != NPUC_OK) goto fail;
    }
    if (npuc_writer_finish(w) != NPUC_OK) return report(ctx, path);
    printf("wrote %s (%zu tensors)\n", path, n);
    return 0;
fail:
    npuc_writer_abort(w);
    return report(ctx, path);
}

/* ------------------------------------------------------------ the models */

#define F32 NPUC_DTYPE_F32
#define F16 NPUC_DTYPE_F16
#define I64 NPUC_DTYPE_I64

/* A small CNN in PyTorch state-dict naming (nn.Sequential "features" +
 * "classifier"), BatchNorm unfused: conv(3->8, no bias) BN ReLU, conv(8->16)
 * BN ReLU, depthwise conv(16, groups=16, no bias) BN ReLU, pool, Linear(16->10). */
static const spec CNN_BN[] = {
    {"features.0.weight", NULL, F32, 4, {8, 3, 3, 3}, K_CONV, 27, NULL},
    {"features.1.weight", NULL, F32, 1, {8}, K_GAMMA, 0, NULL},
    {"features.1.bias", NULL, F32, 1, {8}, K_BETA, 0, NULL},
    {"features.1.running_mean", NULL, F32, 1, {8}, K_MEAN, 0, NULL},
    {"features.1.running_var", NULL, F32, 1, {8}, K_VAR, 0, NULL},
    {"features.1.num_batches_tracked", NULL, I64, 0, {0}, K_COUNT, 0, NULL},
    {"features.3.weight", NULL, F32, 4, {16, 8, 3, 3}, K_CONV, 72, NULL},
    {"features.3.bias", NULL, F32, 1, {16}, K_BIAS, 0, NULL},
    {"features.4.weight", NULL, F32, 1, {16}, K_GAMMA, 0, NULL},
    {"features.4.bias", NULL, F32, 1, {16}, K_BETA, 0, NULL},
    {"features.4.running_mean", NULL, F32, 1, {16}, K_MEAN, 0, NULL},
    {"features.4.running_var", NULL, F32, 1, {16}, K_VAR, 0, NULL},
    {"features.4.num_batches_tracked", NULL, I64, 0, {0}, K_COUNT, 0, NULL},
    {"features.6.weight", NULL, F32, 4, {16, 1, 3, 3}, K_CONV, 9, NULL},
    {"features.7.weight", NULL, F32, 1, {16}, K_GAMMA, 0, NULL},
    {"features.7.bias", NULL, F32, 1, {16}, K_BETA, 0, NULL},
    {"features.7.running_mean", NULL, F32, 1, {16}, K_MEAN, 0, NULL},
    {"features.7.running_var", NULL, F32, 1, {16}, K_VAR, 0, NULL},
    {"features.7.num_batches_tracked", NULL, I64, 0, {0}, K_COUNT, 0, NULL},
    {"classifier.weight", NULL, F32, 2, {10, 16}, K_LINEAR, 16, NULL},
    {"classifier.bias", NULL, F32, 1, {10}, K_BIAS, 0, NULL},
};

/* Two exact zeros in a moving variance, as in real Keras exports
 * (nsfwjs_mobilenet_v2 has some): folding must add eps. */
static const int VAR_ZEROS[] = {5, 12, -1};

/* The same network as Keras 2 save_weights writes it: one group per layer,
 * HWIO kernels, depthwise [kh, kw, in, multiplier], Dense [in, out]. */
static const spec CNN_BN_KERAS[] = {
    {"conv2d/kernel", "conv2d", F32, 4, {3, 3, 3, 8}, K_CONV, 27, NULL},
    {"batch_normalization/gamma", "batch_normalization", F32, 1, {8}, K_GAMMA, 0, NULL},
    {"batch_normalization/beta", "batch_normalization", F32, 1, {8}, K_BETA, 0, NULL},
    {"batch_normalization/moving_mean", "batch_normalization", F32, 1, {8}, K_MEAN, 0, NULL},
    {"batch_normalization/moving_variance", "batch_normalization", F32, 1, {8}, K_VAR, 0, NULL},
    {"conv2d_1/kernel", "conv2d_1", F32, 4, {3, 3, 8, 16}, K_CONV, 72, NULL},
    {"conv2d_1/bias", "conv2d_1", F32, 1, {16}, K_BIAS, 0, NULL},
    {"batch_normalization_1/gamma", "batch_normalization_1", F32, 1, {16}, K_GAMMA, 0, NULL},
    {"batch_normalization_1/beta", "batch_normalization_1", F32, 1, {16}, K_BETA, 0, NULL},
    {"batch_normalization_1/moving_mean", "batch_normalization_1", F32, 1, {16}, K_MEAN, 0, NULL},
    {"batch_normalization_1/moving_variance", "batch_normalization_1", F32, 1, {16}, K_VAR, 0,
     VAR_ZEROS},
    {"depthwise_conv2d/depthwise_kernel", "depthwise_conv2d", F32, 4, {3, 3, 16, 1}, K_CONV, 9, NULL},
    {"batch_normalization_2/gamma", "batch_normalization_2", F32, 1, {16}, K_GAMMA, 0, NULL},
    {"batch_normalization_2/beta", "batch_normalization_2", F32, 1, {16}, K_BETA, 0, NULL},
    {"batch_normalization_2/moving_mean", "batch_normalization_2", F32, 1, {16}, K_MEAN, 0, NULL},
    {"batch_normalization_2/moving_variance", "batch_normalization_2", F32, 1, {16}, K_VAR, 0, NULL},
    {"dense/kernel", "dense", F32, 2, {16, 10}, K_LINEAR, 16, NULL},
    {"dense/bias", "dense", F32, 1, {10}, K_BIAS, 0, NULL},
};

/* A transformer-style block in half precision with the LayerNorm kept in
 * float32, as mixed-precision checkpoints store it: token embedding (vocab
 * 100, width 64), attention projections, LayerNorm, and an MLP of width 128
 * (not the usual 4x, to keep the file under 100 KiB). */
static const spec MLP_ATTN[] = {
    {"embed.weight", NULL, F16, 2, {100, 64}, K_LINEAR, 64, NULL},
    {"attn.q_proj.weight", NULL, F16, 2, {64, 64}, K_LINEAR, 64, NULL},
    {"attn.q_proj.bias", NULL, F16, 1, {64}, K_BIAS, 0, NULL},
    {"attn.k_proj.weight", NULL, F16, 2, {64, 64}, K_LINEAR, 64, NULL},
    {"attn.k_proj.bias", NULL, F16, 1, {64}, K_BIAS, 0, NULL},
    {"attn.v_proj.weight", NULL, F16, 2, {64, 64}, K_LINEAR, 64, NULL},
    {"attn.v_proj.bias", NULL, F16, 1, {64}, K_BIAS, 0, NULL},
    {"attn.o_proj.weight", NULL, F16, 2, {64, 64}, K_LINEAR, 64, NULL},
    {"attn.o_proj.bias", NULL, F16, 1, {64}, K_BIAS, 0, NULL},
    {"ln1.weight", NULL, F32, 1, {64}, K_GAMMA, 0, NULL},
    {"ln1.bias", NULL, F32, 1, {64}, K_BETA, 0, NULL},
    {"mlp.fc1.weight", NULL, F16, 2, {128, 64}, K_LINEAR, 64, NULL},
    {"mlp.fc1.bias", NULL, F16, 1, {128}, K_BIAS, 0, NULL},
    {"mlp.fc2.weight", NULL, F16, 2, {64, 128}, K_LINEAR, 128, NULL},
    {"mlp.fc2.bias", NULL, F16, 1, {64}, K_BIAS, 0, NULL},
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "samples";
    if (argc > 2 || (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0))) {
        fprintf(argc > 2 ? stderr : stdout, "Usage: npuc_gen_samples [DIR]   (default: samples)\n");
        return argc > 2 ? 2 : 0;
    }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "npuc_gen_samples: %s: %s\n", dir, strerror(errno));
        return 1;
    }
    npuc_ctx *ctx;
    if (npuc_ctx_new(&ctx) != NPUC_OK) return 1;
    static const char *const META_PT[] = {"format", "pt", "source", "npuc_gen_samples", NULL};
    static const char *const META_KERAS[] = {"backend", "tensorflow", "keras_version", "2.11.0",
                                             "source", "npuc_gen_samples", NULL};
    int rc = write_model(ctx, dir, "cnn_bn.safetensors", CNN_BN, COUNT(CNN_BN), 0x5eed0001u, META_PT, 0);
    if (!rc)
        rc = write_model(ctx, dir, "cnn_bn_keras.h5", CNN_BN_KERAS, COUNT(CNN_BN_KERAS), 0x5eed0002u,
                         META_KERAS, 1);
    if (!rc)
        rc = write_model(ctx, dir, "mlp_attn.safetensors", MLP_ATTN, COUNT(MLP_ATTN), 0x5eed0003u,
                         META_PT, 0);
    npuc_ctx_free(ctx);
    return rc;
}
