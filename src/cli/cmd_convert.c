/*
 * cmd_convert.c - `npuc convert IN -o OUT`: the same tensors in another file
 * format or float dtype.
 *
 * A thin front end to npuc_model_convert, which streams one tensor at a time
 * into "<OUT>.tmp" and renames it into place, so OUT is either the whole new
 * file or untouched.  Names, shapes, metadata, Keras layer groups and layouts
 * (including --layout overrides, recorded in the "npuc.layout" metadata
 * entry) carry over; tensor bytes are copied exactly unless --dtype casts the
 * float tensors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_common.h"
#include "cli_outputs.h"

static const char USAGE[] =
    "Usage: npuc convert IN -o OUT [options]\n"
    "\n"
    "Writes the tensors of IN to OUT; the output format follows OUT's extension\n"
    "(.safetensors; .h5 .hdf5 for HDF5; .keras for a Keras 3 archive; .gguf; .onnx).\n"
    "Tensor bytes, names, shapes, metadata, Keras layer groups and layouts are kept\n"
    "(GGUF: see docs/gguf.md for its types, names and metadata keys; .keras:\n"
    "docs/keras.md; .onnx: the source's ONNX graph with the new values, docs/onnx.md).\n"
    "\n"
    "Options:\n"
    "  -o, --output OUT         the file to write (required)\n"
    "  -f, --force              overwrite OUT if it exists\n"
    "      --dtype f32|f16|bf16 cast every float tensor (round half to even);\n"
    "                           integer tensors are copied as they are\n"
    "      --deflate N          HDF5 deflate level 0..9 (default 4; 0 = contiguous)\n"
    "      --h5-style STYLE     HDF5 tree: plain, keras2 (save_weights layout) or\n"
    "                           keras3 (.weights.h5); default: the input's style for\n"
    "                           an HDF5 input, else keras2 when tensors have Keras\n"
    "                           layer groups, else plain\n"
    "      --gguf-type TYPE     GGUF type of float tensors of rank >= 2: f32, f16,\n"
    "                           bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q3_k, q4_k or\n"
    "                           q5_k (default f16, or a GGUF input's type); rank\n"
    "                           0-1 stay f32, and so do tensors whose last\n"
    "                           dimension is not a multiple of 32 (a warning names\n"
    "                           them); under a K type, rows not a multiple of 256\n"
    "                           fall back as llama-quantize's (q4_k->q5_0,\n"
    "                           q5_k->q5_1, q6_k->q8_0, q2_k/q3_k->q4_0; a warning\n"
    "                           per tensor); or one of llama.cpp's mixes q2_k,\n"
    "                           q3_k_s, q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s,\n"
    "                           q5_k_m, q6_k (a type per tensor by role and layer,\n"
    "                           as llama-quantize chooses; one line per tensor on\n"
    "                           stdout says which and why)\n"
    "      --gguf-pure          every tensor in --gguf-type's own type, no mix\n"
    "                           rules (llama-quantize --pure; q2_k and q6_k then\n"
    "                           mean Q2_K and Q6_K for every tensor)\n"
    "      --gguf-tensor-type REGEX=TYPE  the type of the tensors whose name\n"
    "                           contains a match of REGEX, before the mix\n"
    "                           (repeatable: the first matching rule wins; as\n"
    "                           llama-quantize --tensor-type)\n"
    "      --gguf-arch NAME     GGUF general.architecture (default: a GGUF input's,\n"
    "                           else npuc)\n"
    "      --imatrix FILE       llama.cpp importance matrix (legacy .dat or GGUF)\n"
    "                           for the quantized GGUF types: loaded and checked\n"
    "                           against every quantized tensor (a length that does\n"
    "                           not match is an error; tensors without an entry and\n"
    "                           entries matching no tensor are warnings); the\n"
    "                           K types and q4_0, q4_1, q5_0, q5_1 then quantize\n"
    "                           with llama-quantize's weighted search (q8_0 and\n"
    "                           the float types ignore it)\n"
    "      --external-data auto|always  ONNX outputs: tensors of 1 KiB or more go to\n"
    "                           OUT.data always, or (auto, the default) only when\n"
    "                           the model would reach 2 GiB (docs/onnx.md)\n"
    "      --max-shard-size SIZE  checkpoint directories: at most SIZE per shard\n"
    "                           (default: the input's sharding; docs/checkpoints.md)\n"
    "      --layout REGEX=NAME  layout override, as for 'npuc info' (repeatable);\n"
    "                           stored in OUT so later commands see it\n"
    "  -q, --quiet              no summary line on stderr\n"
    "  -v, --verbose            more detail on stderr\n"
    "  -h, --help               show this help\n"
    "\n"
    "Exit codes: 0 ok, 1 I/O or memory failure, 2 usage error, unreadable input,\n"
    "or OUT exists without -f (nothing is written).\n";

static int run(int argc, char **argv);

const cli_command cli_cmd_convert = {
    .name = "convert",
    .summary = "copy a weight file to another format or float dtype",
    .usage = USAGE,
    .operand = "IN",
    .run = run,
};

enum {
    OPT_DTYPE = CLI_OPT_USER,
    OPT_DEFLATE,
    OPT_H5_STYLE,
    OPT_GGUF_TYPE,
    OPT_GGUF_ARCH,
    OPT_MAX_SHARD,
    OPT_IMATRIX,
    OPT_GGUF_TENSOR_TYPE,
    OPT_GGUF_PURE,
    OPT_EXTERNAL
};

static const cli_option OPTIONS[] = {
    {"dtype", 0, 1, OPT_DTYPE},
    {"deflate", 0, 1, OPT_DEFLATE},
    {"h5-style", 0, 1, OPT_H5_STYLE},
    {"gguf-type", 0, 1, OPT_GGUF_TYPE},
    {"gguf-arch", 0, 1, OPT_GGUF_ARCH},
    {"max-shard-size", 0, 1, OPT_MAX_SHARD},
    {"gguf-tensor-type", 0, 1, OPT_GGUF_TENSOR_TYPE},
    {"imatrix", 0, 1, OPT_IMATRIX},
    {"gguf-pure", 0, 0, OPT_GGUF_PURE},
    {"external-data", 0, 1, OPT_EXTERNAL},
    {NULL, 0, 0, 0},
};

typedef struct convert_opts {
    int dtype_set;
    npuc_dtype dtype;
    int deflate_set;
    int style_set;
    int gguf_set;
    int shard_set;
    int gguf_mix;                         /* --gguf-type names a llama.cpp mix */
    int gguf_pure;                        /* --gguf-pure: no mix rules */
    char rules[NPUC_WRITE_OPT_VALUE_MAX]; /* --gguf-tensor-type rules, one a line */
    npuc_write_opts write; /* --deflate, --h5-style, --gguf-type, --gguf-arch, --imatrix */
} convert_opts;

static int on_opt(cli_args *a, void *ud, int id, const char *arg) {
    convert_opts *o = ud;
    switch (id) {
    case OPT_DTYPE: {
        npuc_dtype dt;
        if (npuc_dtype_parse(arg, &dt) != 0 ||
            (dt != NPUC_DTYPE_F32 && dt != NPUC_DTYPE_F16 && dt != NPUC_DTYPE_BF16))
            return cli_usage_error(a->cmd, "--dtype: expected f32, f16 or bf16, got '%s'", arg);
        o->dtype_set = 1;
        o->dtype = dt;
        return CLI_CONTINUE;
    }
    case OPT_DEFLATE:
        o->deflate_set = 1;
        return cli_set_write_opt(a->cmd, &o->write, "deflate", "deflate", arg);
    case OPT_H5_STYLE:
        o->style_set = 1;
        return cli_set_write_opt(a->cmd, &o->write, "h5-style", "structure", arg);
    case OPT_MAX_SHARD: {
        uint64_t v;
        char s[32];
        if (cli_parse_max_shard(arg, &v) != 0)
            return cli_usage_error(a->cmd, "--max-shard-size: expected a size such as 500M or 5G, got '%s'", arg);
        snprintf(s, sizeof s, "%llu", (unsigned long long)v);
        (void)npuc_write_opts_set(NULL, &o->write, "max-shard-size", s);
        o->shard_set = 1;
        return CLI_CONTINUE;
    }
    case OPT_GGUF_PURE:
        (void)npuc_write_opts_set(NULL, &o->write, "gguf-pure", "yes");
        o->gguf_set = 1;
        o->gguf_pure = 1;
        return CLI_CONTINUE;
    case OPT_GGUF_TENSOR_TYPE: {
        const char *eq = strchr(arg, '=');
        size_t have = strlen(o->rules);
        if (!eq || eq == arg || !eq[1] || strchr(arg, '\n'))
            return cli_usage_error(a->cmd, "--gguf-tensor-type: expected REGEX=TYPE, got '%s'", arg);
        if (have + !!have + strlen(arg) >= sizeof o->rules)
            return cli_usage_error(a->cmd, "--gguf-tensor-type: the rules together exceed %zu bytes",
                                   sizeof o->rules - 1);
        if (have) o->rules[have++] = '\n';
        memcpy(o->rules + have, arg, strlen(arg) + 1);
        o->gguf_set = 1;
        return CLI_CONTINUE;
    }
    case OPT_GGUF_TYPE:
    case OPT_GGUF_ARCH:
    case OPT_IMATRIX:
    case OPT_EXTERNAL: {
        const char *key = id == OPT_GGUF_TYPE   ? "gguf-type"
                          : id == OPT_GGUF_ARCH ? "gguf-arch"
                          : id == OPT_IMATRIX   ? "imatrix"
                                                : "external-data";
        o->gguf_set |= id != OPT_EXTERNAL;
        /* the mixes are the values with a K type in their name (q4_k_m); the plain types have none */
        if (id == OPT_GGUF_TYPE) o->gguf_mix = strstr(arg, "_k") != NULL;
        return cli_set_write_opt(a->cmd, &o->write, key, key, arg);
    }
    }
    return cli_usage_error(a->cmd, "unhandled option (a bug in npuc)");
}

/* One line per tensor on stdout: its name, GGUF type and why
 * ("blk.3.ffn_down.weight  Q6_K: ffn_down, layer 3 of 32, use_more_bits"). */
static int print_plan(const cli_args *a, npuc_ctx *ctx, const npuc_model *m, const npuc_write_opts *wo,
                      const convert_opts *co) {
    size_t n = npuc_model_count(m);
    npuc_gguf_choice *c = calloc(n ? n : 1, sizeof *c);
    if (!c) return cli_fail(ctx, NPUC_ERR_NOMEM);
    npuc_status st = npuc_gguf_plan(ctx, m, wo, co->dtype_set, co->dtype, c);
    if (st != NPUC_OK) {
        free(c);
        return cli_fail(ctx, st);
    }
    int w = 0;
    for (size_t i = 0; i < n; i++) {
        int l = (int)strlen(npuc_model_tensor(m, i)->name);
        if (l > w) w = l;
    }
    (void)a;
    for (size_t i = 0; i < n; i++) printf("%-*s  %s\n", w, npuc_model_tensor(m, i)->name, c[i].reason);
    free(c);
    return CLI_EXIT_OK;
}

static int run(int argc, char **argv) {
    cli_args a;
    convert_opts co;
    memset(&co, 0, sizeof co);
    co.write = npuc_write_opts_defaults();
    npuc_ctx *ctx = NULL;
    npuc_model *m = NULL;
    int rc = cli_parse(&cli_cmd_convert, argc, argv,
                       CLI_OPT_OUTPUT | CLI_OPT_FORCE | CLI_OPT_LAYOUT, OPTIONS, on_opt, &co, 1, 1,
                       &a);
    if (rc != CLI_CONTINUE) goto done;
    const char *in = a.pos[0], *out = a.output;
    if (!out || !*out) {
        rc = cli_usage_error(a.cmd, "missing -o OUT");
        goto done;
    }
    if ((rc = cli_check_output_name(a.cmd, out)) != CLI_EXIT_OK) goto done; /* -o DIR, an unknown extension */
    npuc_format ofmt = npuc_format_from_path(out);
    /* A name without an extension is a checkpoint directory when the input
     * is one or --max-shard-size asks for shards (docs/checkpoints.md). */
    struct stat isb;
    size_t il = strlen(in);
    if (ofmt == NPUC_FORMAT_AUTO && (co.shard_set || (stat(in, &isb) == 0 && S_ISDIR(isb.st_mode)) ||
                                     (il > 11 && strcmp(in + il - 11, ".index.json") == 0)))
        ofmt = npuc_format_find("checkpoint");
    struct stat osb;
    if (ofmt == NPUC_FORMAT_AUTO && stat(out, &osb) == 0 && S_ISDIR(osb.st_mode)) {
        rc = cli_usage_error(a.cmd, "%s: is a directory (the output must be a file name)", out);
        goto done;
    }
    if (ofmt == NPUC_FORMAT_AUTO) {
        rc = cli_usage_error(a.cmd, "%s: cannot tell the output format from the name "
                                    "(use .safetensors, .h5, .hdf5, .keras or .gguf)", out);
        goto done;
    }
    if ((co.deflate_set && !npuc_format_accepts(ofmt, "deflate")) ||
        (co.style_set && !npuc_format_accepts(ofmt, "structure")))
        cli_warn(&a, "%s: --deflate and --h5-style apply to HDF5 outputs only; ignored", out);
    if (co.gguf_set && !npuc_format_accepts(ofmt, "gguf-type"))
        cli_warn(&a, "%s: --gguf-type, --gguf-tensor-type, --gguf-arch and --imatrix apply to GGUF outputs only; ignored",
                 out);

    if ((rc = cli_ctx_new(&a, &ctx)) != CLI_EXIT_OK) goto done;
    if ((rc = cli_open_model(ctx, &a, in, &m)) != CLI_EXIT_OK) goto done;

    npuc_write_opts wo = co.write;
    wo.format = ofmt;
    wo.overwrite = a.force;
    if (co.rules[0] && npuc_write_opts_set(ctx, &wo, "gguf-tensor-type", co.rules) != NPUC_OK) {
        rc = cli_usage_error(a.cmd, "--gguf-tensor-type: %s", npuc_ctx_errmsg(ctx));
        goto done;
    }
    /* The per-tensor decisions first, as llama-quantize logs them: they also
     * explain a refusal (a type this build cannot write). */
    if (npuc_format_accepts(ofmt, "gguf-type") && ((co.gguf_mix && !co.gguf_pure) || co.rules[0] || a.verbose) &&
        (rc = print_plan(&a, ctx, m, &wo, &co)) != CLI_EXIT_OK)
        goto done;
    fflush(stdout);
    npuc_status st = npuc_model_convert(ctx, m, out, &wo, co.dtype_set, co.dtype);
    cli_warn_ctx(&a, ctx);
    if (st != NPUC_OK) {
        rc = cli_fail(ctx, st);
        goto done;
    }

    if (!a.quiet) {
        uint64_t params = 0, bytes = 0;
        size_t n = npuc_model_count(m);
        for (size_t i = 0; i < n; i++) {
            params += npuc_model_tensor(m, i)->numel;
            bytes += npuc_model_tensor(m, i)->nbytes;
        }
        struct stat sb;
        char b1[CLI_FMT_MAX], b2[CLI_FMT_MAX], b3[CLI_FMT_MAX], cast[64] = "";
        if (co.dtype_set)
            snprintf(cast, sizeof cast, ", float tensors cast to %s", npuc_dtype_name(co.dtype));
        cli_note(&a, "converted %s (%s, %s) -> %s (%s, %s): %zu %s, %s params%s", in,
                 npuc_format_name(npuc_model_format(m)),
                 cli_fmt_size(npuc_model_file_size(m), b1), out, npuc_format_name(ofmt),
                 stat(out, &sb) == 0 ? cli_fmt_size((uint64_t)sb.st_size, b2) : "?", n,
                 n == 1 ? "tensor" : "tensors", cli_fmt_count(params, b3), cast);
        if (a.verbose)
            cli_note(&a, "tensor data: %s in the input", cli_fmt_size(bytes, b1));
    }
done:
    npuc_model_close(m);
    npuc_ctx_free(ctx);
    cli_args_free(&a);
    return cli_finish_stdout(rc);
}
