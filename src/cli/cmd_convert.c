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
    "(.safetensors; .h5 .hdf5 for HDF5; .keras for a Keras 3 archive; .gguf).  Tensor\n"
    "bytes, names, shapes, metadata, Keras layer groups and layouts are kept (GGUF:\n"
    "see docs/gguf.md for its types, names and metadata keys; .keras: docs/keras.md).\n"
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
    "                           bf16, q8_0, q4_0, q4_1, q5_0 or q5_1 (default f16,\n"
    "                           or a GGUF input's type); rank 0-1 stay f32, and so\n"
    "                           do tensors whose last dimension is not a multiple\n"
    "                           of 32 (a warning names them)\n"
    "      --gguf-arch NAME     GGUF general.architecture (default: a GGUF input's,\n"
    "                           else npuc)\n"
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

enum { OPT_DTYPE = CLI_OPT_USER, OPT_DEFLATE, OPT_H5_STYLE, OPT_GGUF_TYPE, OPT_GGUF_ARCH, OPT_MAX_SHARD };

static const cli_option OPTIONS[] = {
    {"dtype", 0, 1, OPT_DTYPE},
    {"deflate", 0, 1, OPT_DEFLATE},
    {"h5-style", 0, 1, OPT_H5_STYLE},
    {"gguf-type", 0, 1, OPT_GGUF_TYPE},
    {"gguf-arch", 0, 1, OPT_GGUF_ARCH},
    {"max-shard-size", 0, 1, OPT_MAX_SHARD},
    {NULL, 0, 0, 0},
};

typedef struct convert_opts {
    int dtype_set;
    npuc_dtype dtype;
    int deflate_set;
    int style_set;
    int gguf_set;
    int shard_set;
    npuc_write_opts write; /* --deflate, --h5-style, --gguf-type, --gguf-arch */
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
    case OPT_GGUF_TYPE:
    case OPT_GGUF_ARCH: {
        const char *key = id == OPT_GGUF_TYPE ? "gguf-type" : "gguf-arch";
        o->gguf_set = 1;
        return cli_set_write_opt(a->cmd, &o->write, key, key, arg);
    }
    }
    return cli_usage_error(a->cmd, "unhandled option (a bug in npuc)");
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
        cli_warn(&a, "%s: --gguf-type and --gguf-arch apply to GGUF outputs only; ignored", out);

    if ((rc = cli_ctx_new(&a, &ctx)) != CLI_EXIT_OK) goto done;
    if ((rc = cli_open_model(ctx, &a, in, &m)) != CLI_EXIT_OK) goto done;

    npuc_write_opts wo = co.write;
    wo.format = ofmt;
    wo.overwrite = a.force;
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
