/*
 * cmd_calibrate.c - `npuc calibrate ACTS... -o CALIB.json`: activation ranges,
 * scales and zero points for NPUs from samples of each activation
 * (docs/calibration-activations.md), optionally as a TensorRT calibration
 * cache and AIMET encodings.
 *
 * Every tensor [N, ...] of the input files is one activation (tensors named
 * <weight>.input, .input_sq, .hessian, .hessian_count are weight calibration
 * data, docs/calibration.md, and are skipped); tensors of one name in
 * several files are one activation whose samples are all of their rows.  The
 * samples are read through the model API and fed to the library's
 * accumulator (npuc_act_calib) chunk by chunk, --chunk-rows rows at a time,
 * once per pass the method needs; results do not depend on the chunking.
 *
 * --imatrix-out FILE writes llama.cpp's legacy importance matrix from the
 * <weight>.input tensors instead (npuc_imatrix_from_calib; with -o as
 * well, both are written).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_common.h"
#include "cli_outputs.h"

static const char USAGE[] =
    "Usage: npuc calibrate ACTS... -o CALIB.json [options]\n"
    "       npuc calibrate CALIB... --imatrix-out FILE [-o CALIB.json] [-f] [-q]\n"
    "\n"
    "Computes activation ranges, scales and zero points from activation samples:\n"
    "every float tensor [N, ...] of the ACTS files (safetensors or HDF5) is the N\n"
    "samples of the activation of that name; a name found in several files gathers\n"
    "the rows of all of them.  Tensors named <weight>.input, .input_sq, .hessian and\n"
    ".hessian_count (weight calibration data) are skipped.  Samples are read in\n"
    "chunks; methods that need it read them again (entropy and mse twice, the exact\n"
    "percentile a few times), and the result is the same for any chunking.\n"
    "\n"
    "Options:\n"
    "  -o, --output FILE          the calibration JSON (schema npuc.calibration/1)\n"
    "      --method METHOD        minmax (default), percentile=P, entropy (TensorRT's\n"
    "                             EntropyCalibration2), mse\n"
    "      --per-channel AXIS     one range per index of AXIS (1..rank-1; axis 0 is the\n"
    "                             sample axis); default: one per activation\n"
    "      --bits N               bit width 2..16 (default 8)\n"
    "      --asymmetric           a range [lo, hi] with a zero point (default: symmetric)\n"
    "      --chunk-rows N         samples per chunk (default: 16 MiB of float32)\n"
    "      --no-histograms        leave the 2048-bin histograms out of the JSON\n"
    "      --trt-cache FILE       also write a TensorRT calibration cache (8-bit,\n"
    "                             symmetric, per activation)\n"
    "      --trt-version V        the cache header's version (default 8601)\n"
    "      --export-encodings FILE  also write AIMET activation_encodings\n"
    "      --encodings-version V  0.6.1 or 1.0.0 (default 1.0.0)\n"
    "      --imatrix-out FILE     write llama.cpp's importance matrix (legacy .dat, for\n"
    "                             llama-quantize --imatrix or npuc convert --imatrix)\n"
    "                             from the <weight>.input rows: per input column the\n"
    "                             sum of x^2 with ncall = the row count, so each\n"
    "                             importance is the mean of x^2; entries are named\n"
    "                             <weight> (docs/calibration.md); -o is then optional\n"
    "  -f, --force                overwrite existing outputs\n"
    "  -q, --quiet                no notes on stderr\n"
    "  -h, --help                 show this help\n"
    "\n"
    "Prints one line per activation: samples, range, scale and zero point.\n"
    "\n"
    "Example:\n"
    "  npuc calibrate acts.safetensors -o calib.json --method entropy --trt-cache model.cache\n"
    "  npuc calibrate calib.safetensors --imatrix-out model.imatrix.dat\n"
    "\n"
    "Exit codes: 0 ok, 1 failed, 2 usage error, unreadable file, NaN/Inf samples.\n";

static int run(int argc, char **argv);

const cli_command cli_cmd_calibrate = {
    .name = "calibrate",
    .summary = "activation ranges (minmax, percentile, entropy, mse) for NPUs; TensorRT cache, AIMET",
    .usage = USAGE,
    .operand = "ACTS",
    .run = run,
};

enum {
    OPT_METHOD = CLI_OPT_USER,
    OPT_AXIS,
    OPT_BITS,
    OPT_ASYM,
    OPT_CHUNK,
    OPT_NOHIST,
    OPT_TRT,
    OPT_TRT_VERSION,
    OPT_ENC,
    OPT_ENC_VERSION,
    OPT_IMATRIX_OUT
};

static const cli_option OPTIONS[] = {
    {"method", 0, 1, OPT_METHOD},
    {"per-channel", 0, 1, OPT_AXIS},
    {"bits", 0, 1, OPT_BITS},
    {"asymmetric", 0, 0, OPT_ASYM},
    {"chunk-rows", 0, 1, OPT_CHUNK},
    {"no-histograms", 0, 0, OPT_NOHIST},
    {"trt-cache", 0, 1, OPT_TRT},
    {"trt-version", 0, 1, OPT_TRT_VERSION},
    {"export-encodings", 0, 1, OPT_ENC},
    {"encodings-version", 0, 1, OPT_ENC_VERSION},
    {"imatrix-out", 0, 1, OPT_IMATRIX_OUT},
    {NULL, 0, 0, 0},
};

typedef struct calib_args {
    npuc_act_opts o;
    const char *method;
    long axis;      /* 0: per tensor */
    long chunk;     /* 0: default */
    int nohist;
    const char *trt, *trt_version, *enc, *enc_version;
    const char *imatrix_out;
} calib_args;

static int on_opt(cli_args *a, void *ud, int id, const char *arg) {
    (void)a;
    calib_args *c = ud;
    switch (id) {
    case OPT_METHOD: c->method = arg; break;
    case OPT_AXIS:
        if (cli_parse_long(arg, 1, 7, &c->axis) != 0)
            return cli_usage_error(&cli_cmd_calibrate, "--per-channel '%s': an axis from 1 to 7", arg);
        break;
    case OPT_BITS: {
        long b;
        if (cli_parse_long(arg, 2, 16, &b) != 0)
            return cli_usage_error(&cli_cmd_calibrate, "--bits '%s': bit width must be 2..16", arg);
        c->o.range.bits = (int)b;
        break;
    }
    case OPT_ASYM: c->o.range.symmetric = 0; break;
    case OPT_CHUNK:
        if (cli_parse_long(arg, 1, 1L << 40, &c->chunk) != 0)
            return cli_usage_error(&cli_cmd_calibrate, "--chunk-rows '%s': a positive integer", arg);
        break;
    case OPT_NOHIST: c->nohist = 1; break;
    case OPT_TRT: c->trt = arg; break;
    case OPT_TRT_VERSION: {
        size_t n = strlen(arg);
        if (n == 0 || n > 16 || strspn(arg, "0123456789") != n)
            return cli_usage_error(&cli_cmd_calibrate, "--trt-version '%s': 1 to 16 digits, e.g. 8601", arg);
        c->trt_version = arg;
        break;
    }
    case OPT_ENC: c->enc = arg; break;
    case OPT_IMATRIX_OUT: c->imatrix_out = arg; break;
    case OPT_ENC_VERSION:
        if (strcmp(arg, "0.6.1") != 0 && strcmp(arg, "1.0.0") != 0)
            return cli_usage_error(&cli_cmd_calibrate, "--encodings-version '%s': use 0.6.1 or 1.0.0", arg);
        c->enc_version = arg;
        break;
    }
    return CLI_CONTINUE;
}

/* One activation: where its samples are. */
typedef struct act_src {
    size_t file, index;
} act_src;

typedef struct act {
    const char *name;
    const npuc_tensor_info *t; /* the first source's tensor (shape beyond dim 0) */
    act_src *src;
    size_t nsrc;
    uint64_t rows, outer, channels, inner; /* per row: [outer, channels, inner] */
} act;

static int is_weight_data(const char *name) {
    static const char *const SUFFIX[] = {".input", ".input_sq", ".hessian", ".hessian_count"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof SUFFIX / sizeof *SUFFIX; i++) {
        size_t k = strlen(SUFFIX[i]);
        if (n > k && strcmp(name + n - k, SUFFIX[i]) == 0) return 1;
    }
    return 0;
}

/* Gathers the activations of the open models; prints the error and returns
 * its exit code on a mismatch. */
static int gather(const cli_args *a, const calib_args *c, npuc_model **m, size_t nm, act **out, size_t *nout) {
    act *v = NULL;
    size_t n = 0;
    for (size_t f = 0; f < nm; f++)
        for (size_t i = 0; i < npuc_model_count(m[f]); i++) {
            const npuc_tensor_info *t = npuc_model_tensor(m[f], i);
            if (is_weight_data(t->name)) continue;
            if (!npuc_dtype_is_float(t->dtype) || t->rank < 1) {
                cli_note(a, "%s: tensor '%s' (%s, rank %d) is not float samples [N, ...]: skipped",
                         npuc_model_path(m[f]), t->name, npuc_dtype_name(t->dtype), t->rank);
                continue;
            }
            size_t k = 0;
            while (k < n && strcmp(v[k].name, t->name) != 0) k++;
            if (k == n) {
                act *nv = realloc(v, (n + 1) * sizeof *v);
                if (!nv) goto nomem;
                v = nv;
                memset(&v[n], 0, sizeof v[n]);
                v[n].name = t->name;
                v[n].t = t;
                v[n].outer = 1;
                v[n].channels = 1;
                v[n].inner = 1;
                if (c->axis && c->axis >= t->rank) {
                    cli_error("%s: tensor '%s' has rank %d: --per-channel %ld needs an axis from 1 to %d",
                              npuc_model_path(m[f]), t->name, t->rank, c->axis, t->rank - 1);
                    free(v);
                    return CLI_EXIT_USAGE;
                }
                for (int d = 1; d < t->rank; d++) {
                    uint64_t s = (uint64_t)t->shape[d];
                    if (c->axis == d) v[n].channels = s;
                    else if (c->axis && d < c->axis) v[n].outer *= s;
                    else v[n].inner *= s;
                }
                n++;
            } else {
                const npuc_tensor_info *t0 = v[k].t;
                int same = t0->rank == t->rank;
                for (int d = 1; same && d < t->rank; d++) same = t0->shape[d] == t->shape[d];
                if (!same) {
                    cli_error("%s: tensor '%s': the sample shape differs from the one in an earlier file",
                              npuc_model_path(m[f]), t->name);
                    free(v);
                    return CLI_EXIT_USAGE;
                }
            }
            act_src *ns = realloc(v[k].src, (v[k].nsrc + 1) * sizeof *ns);
            if (!ns) goto nomem;
            v[k].src = ns;
            v[k].src[v[k].nsrc++] = (act_src){f, i};
            v[k].rows += (uint64_t)t->shape[0];
        }
    *out = v;
    *nout = n;
    return CLI_EXIT_OK;
nomem:
    for (size_t k = 0; k < n; k++) free(v[k].src);
    free(v);
    cli_error("out of memory");
    return CLI_EXIT_FAIL;
}

/* One pass over every chunk of activation x. */
static npuc_status feed_pass(npuc_ctx *ctx, npuc_model **m, const act *x, uint64_t chunk_rows, float *buf,
                             npuc_act_calib *c) {
    const uint64_t per_row = x->outer * x->channels * x->inner;
    for (size_t s = 0; s < x->nsrc; s++) {
        npuc_model *mm = m[x->src[s].file];
        const size_t i = x->src[s].index;
        const npuc_tensor_info *t = npuc_model_tensor(mm, i);
        const void *data;
        npuc_status st = npuc_model_data(ctx, mm, i, &data);
        if (st != NPUC_OK) return st;
        const size_t esz = npuc_dtype_size(t->dtype);
        for (uint64_t r = 0; r < (uint64_t)t->shape[0] && st == NPUC_OK; r += chunk_rows) {
            uint64_t nr = (uint64_t)t->shape[0] - r < chunk_rows ? (uint64_t)t->shape[0] - r : chunk_rows;
            const unsigned char *src = (const unsigned char *)data + r * per_row * esz;
            if (npuc_convert(buf, NPUC_DTYPE_F32, src, t->dtype, (size_t)(nr * per_row)) != 0) {
                npuc_model_release(mm, i);
                return NPUC_ERR_INTERNAL;
            }
            st = npuc_act_calib_feed(ctx, c, buf, nr * x->outer, x->inner);
        }
        npuc_model_release(mm, i);
        if (st != NPUC_OK) return st;
    }
    return NPUC_OK;
}

static json_t *num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

/* The JSON of one finished activation. */
static json_t *act_json(const act *x, const npuc_act_calib *c, const calib_args *ca) {
    json_t *o = json_object(), *shape = json_array(), *chans = json_array();
    if (!o || !shape || !chans) goto fail;
    json_array_append_new(shape, json_integer((json_int_t)x->rows));
    for (int d = 1; d < x->t->rank; d++) json_array_append_new(shape, json_integer(x->t->shape[d]));
    json_object_set_new(o, "shape", shape);
    json_object_set_new(o, "samples", json_integer((json_int_t)x->rows));
    json_object_set_new(o, "axis", ca->axis ? json_integer(ca->axis) : json_null());
    json_object_set_new(o, "channels", chans);
    shape = chans = NULL;
    json_t *arr = json_object_get(o, "channels");
    for (uint64_t k = 0; k < x->channels; k++) {
        npuc_act_result r;
        if (npuc_act_calib_result(c, k, &r) != NPUC_OK) goto fail;
        json_t *e = json_object();
        if (!e || json_array_append_new(arr, e) != 0) goto fail;
        json_object_set_new(e, "count", json_integer((json_int_t)r.count));
        json_object_set_new(e, "min", json_real(r.min));
        json_object_set_new(e, "max", json_real(r.max));
        json_object_set_new(e, "amax", json_real(r.amax));
        json_object_set_new(e, "lo", json_real(r.lo));
        json_object_set_new(e, "hi", json_real(r.hi));
        json_object_set_new(e, "scale", json_real(r.scale));
        json_object_set_new(e, "zero_point", json_integer(r.zero_point));
        json_object_set_new(e, "threshold", num(r.threshold));
        json_object_set_new(e, "bin", r.bin >= 0 ? json_integer(r.bin) : json_null());
        json_object_set_new(e, "kl", num(r.kl));
        json_object_set_new(e, "mse", num(r.mse));
        if (r.histogram && !ca->nohist) {
            json_t *h = json_array();
            if (!h) goto fail;
            for (int j = 0; j < NPUC_ACT_BINS; j++) json_array_append_new(h, json_integer((json_int_t)r.histogram[j]));
            json_object_set_new(e, "histogram", h);
        }
    }
    return o;
fail:
    json_decref(shape);
    json_decref(chans);
    json_decref(o);
    return NULL;
}

/* Writes doc to path atomically; an exit code, after printing any error. */
static int write_json(npuc_ctx *ctx, const char *path, int force, const json_t *doc) {
    char *s = json_dumps(doc, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    if (!s) {
        cli_error("out of memory");
        return CLI_EXIT_FAIL;
    }
    npuc_atomic_file *f;
    npuc_status st = npuc_atomic_file_open(ctx, path, force, &f);
    if (st != NPUC_OK) {
        free(s);
        return cli_fail(ctx, st);
    }
    size_t n = strlen(s), off = 0;
    s[n++] = '\n'; /* replaces the terminator: n counts the bytes to write */
    while (off < n) {
        ssize_t w = write(npuc_atomic_file_fd(f), s + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            free(s);
            npuc_atomic_file_abort(f);
            cli_error("%s: write failed: %s", path, strerror(errno));
            return CLI_EXIT_FAIL;
        }
        off += (size_t)w;
    }
    free(s);
    st = npuc_atomic_file_commit(f);
    return st == NPUC_OK ? CLI_EXIT_OK : cli_fail(ctx, st);
}

static int run(int argc, char **argv) {
    cli_args a;
    calib_args c = {.o = npuc_act_opts_defaults(), .trt_version = "8601", .enc_version = "1.0.0"};
    int rc = cli_parse(&cli_cmd_calibrate, argc, argv, CLI_OPT_OUTPUT | CLI_OPT_FORCE, OPTIONS, on_opt, &c, 1,
                       -1, &a);
    if (rc != CLI_CONTINUE) return rc;
    npuc_ctx *ctx = NULL;
    npuc_model **m = NULL;
    act *acts = NULL;
    size_t nacts = 0;
    float *buf = NULL;
    json_t *doc = NULL, *list = NULL;
    npuc_status st = NPUC_OK;
    if (!a.output && !c.imatrix_out) {
        rc = cli_usage_error(&cli_cmd_calibrate, "missing -o CALIB.json (or --imatrix-out FILE)");
        goto done;
    }
    if (!a.output && (c.trt || c.enc)) {
        rc = cli_usage_error(&cli_cmd_calibrate, "--trt-cache and --export-encodings need -o CALIB.json");
        goto done;
    }
    /* Every output is tried before the work, so a run never fails at the end. */
    const char *const outs[] = {a.output, c.trt, c.enc, c.imatrix_out};
    const char *const what[] = {"calibration", "TensorRT cache", "AIMET encodings", "importance matrix"};
    for (int k = 0; k < 4; k++) {
        if (!outs[k]) continue;
        if (!a.force && access(outs[k], F_OK) == 0) {
            cli_error("%s: the output exists (use -f to overwrite it)", outs[k]);
            rc = CLI_EXIT_USAGE;
            goto done;
        }
        if ((rc = cli_side_probe(outs[k], what[k])) != CLI_CONTINUE) goto done;
    }
    if ((rc = cli_ctx_new(&a, &ctx)) != CLI_EXIT_OK) goto done;
    if (c.method && (st = npuc_range_parse(ctx, c.method, &c.o.range)) != NPUC_OK) {
        rc = cli_usage_error(&cli_cmd_calibrate, "--method '%s': use minmax, percentile=P, entropy or mse",
                             c.method);
        goto done;
    }
    if (c.trt && (c.o.range.bits != 8 || !c.o.range.symmetric || c.axis)) {
        rc = cli_usage_error(&cli_cmd_calibrate,
                             "--trt-cache holds symmetric 8-bit per-tensor scales: drop --bits, --asymmetric "
                             "and --per-channel");
        goto done;
    }
    m = calloc((size_t)a.npos, sizeof *m);
    if (!m) {
        cli_error("out of memory");
        rc = CLI_EXIT_FAIL;
        goto done;
    }
    for (int f = 0; f < a.npos; f++)
        if ((rc = cli_open_model(ctx, &a, a.pos[f], &m[f])) != CLI_EXIT_OK) goto done;
    if (c.imatrix_out) {
        size_t ne;
        if ((st = npuc_imatrix_from_calib(ctx, m, (size_t)a.npos, c.imatrix_out, a.force, &ne)) != NPUC_OK)
            goto fail;
        cli_note(&a, "wrote %s: llama.cpp importance matrix (legacy format), %zu entr%s", c.imatrix_out, ne,
                 ne == 1 ? "y" : "ies");
        if (!a.output) {
            rc = CLI_EXIT_OK;
            goto done;
        }
    }
    if ((rc = gather(&a, &c, m, (size_t)a.npos, &acts, &nacts)) != CLI_EXIT_OK) goto done;
    if (nacts == 0) {
        cli_error("%s: no activation samples (float tensors [N, ...]) in the input", a.pos[0]);
        rc = CLI_EXIT_USAGE;
        goto done;
    }

    doc = json_object();
    list = json_object();
    json_t *inputs = json_array();
    if (!doc || !list || !inputs) {
        json_decref(inputs);
        st = NPUC_ERR_NOMEM;
        goto fail;
    }
    char mbuf[64];
    npuc_range_format(&c.o.range, mbuf, sizeof mbuf);
    json_object_set_new(doc, "schema", json_string("npuc.calibration/1"));
    json_object_set_new(doc, "npuc_version", json_string(npuc_version()));
    json_object_set_new(doc, "method", json_string(mbuf));
    json_object_set_new(doc, "bits", json_integer(c.o.range.bits));
    json_object_set_new(doc, "symmetric", json_boolean(c.o.range.symmetric));
    json_object_set_new(doc, "histogram_bins", json_integer(NPUC_ACT_BINS));
    for (int f = 0; f < a.npos; f++) json_array_append_new(inputs, cli_json_str(a.pos[f]));
    json_object_set_new(doc, "inputs", inputs);
    json_object_set_new(doc, "activations", list);

    size_t namew = 4;
    for (size_t k = 0; k < nacts; k++) namew = strlen(acts[k].name) > namew ? strlen(acts[k].name) : namew;
    if (namew > 48) namew = 48;
    for (size_t k = 0; k < nacts; k++) {
        act *x = &acts[k];
        const uint64_t per_row = x->outer * x->channels * x->inner;
        uint64_t rows = c.chunk ? (uint64_t)c.chunk : (per_row ? ((uint64_t)16 << 20) / 4 / per_row : 1);
        if (rows == 0) rows = 1;
        if (rows > x->rows && x->rows) rows = x->rows;
        if (per_row && rows > SIZE_MAX / 4 / per_row) {
            cli_error("tensor '%s': --chunk-rows %" PRIu64 " is too large", x->name, rows);
            rc = CLI_EXIT_USAGE;
            goto done;
        }
        const uint64_t nval = rows * per_row;
        float *nb = realloc(buf, (size_t)(nval > 0 ? nval : 1) * sizeof *buf);
        if (!nb) {
            st = NPUC_ERR_NOMEM;
            goto fail;
        }
        buf = nb;
        char label[512];
        snprintf(label, sizeof label, "%s: tensor '%s'", npuc_model_path(m[x->src[0].file]), x->name);
        npuc_act_calib *ac;
        if ((st = npuc_act_calib_new(ctx, label, x->channels, &c.o, &ac)) != NPUC_OK) goto fail;
        int more = 1;
        while (more && st == NPUC_OK) {
            st = feed_pass(ctx, m, x, rows, buf, ac);
            if (st == NPUC_OK) st = npuc_act_calib_end_pass(ctx, ac, &more);
        }
        json_t *j = st == NPUC_OK ? act_json(x, ac, &c) : NULL;
        if (st == NPUC_OK && !j) st = NPUC_ERR_NOMEM;
        if (st == NPUC_OK) {
            npuc_act_result r;
            npuc_act_calib_result(ac, 0, &r);
            char cnt[CLI_FMT_MAX];
            cli_print_padded(x->name, namew);
            if (x->channels == 1)
                printf("  %s samples  [%.6g, %.6g]  scale=%.6g  zp=%d\n", cli_fmt_count(x->rows, cnt), r.lo, r.hi,
                       r.scale, (int)r.zero_point);
            else
                printf("  %s samples  %" PRIu64 " channels (axis %ld)\n", cli_fmt_count(x->rows, cnt), x->channels,
                       c.axis);
            json_object_set_new(list, x->name, j);
        }
        npuc_act_calib_free(ac);
        if (st != NPUC_OK) goto fail;
    }
    if ((rc = write_json(ctx, a.output, a.force, doc)) != CLI_EXIT_OK) goto done;
    if (c.trt && (st = npuc_trt_cache_export(ctx, a.output, c.trt_version, c.trt, a.force)) != NPUC_OK) goto fail;
    if (c.enc && (st = npuc_aimet_export(ctx, a.output, NULL, c.enc_version, c.enc, a.force)) != NPUC_OK)
        goto fail;
    rc = CLI_EXIT_OK;
    goto done;
fail:
    rc = cli_fail(ctx, st);
done:
    json_decref(doc);
    free(buf);
    for (size_t k = 0; k < nacts; k++) free(acts[k].src);
    free(acts);
    if (m)
        for (int f = 0; f < a.npos; f++) npuc_model_close(m[f]);
    free(m);
    npuc_ctx_free(ctx);
    cli_args_free(&a);
    return cli_finish_stdout(rc);
}
