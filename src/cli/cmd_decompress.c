/*
 * cmd_decompress.c - `npuc decompress`: an npuc artifact back to dense float
 * tensors with the original names, shapes, dtypes and layouts; a GGUF file
 * or a checkpoint, which its reader decodes on load (the registry row's
 * decodes_on_load), written as read; an ONNX graph's quantized weights
 * (the row's decompress hook).
 */
#include <stdio.h>
#include <string.h>

#include "cli_common.h"
#include "cli_outputs.h"

static int run(int argc, char **argv) {
    cli_args a;
    npuc_write_opts wo = npuc_write_opts_defaults();
    npuc_ctx *ctx = NULL;
    npuc_model *m = NULL;
    int rc = cli_parse(&cli_cmd_decompress, argc, argv,
                       CLI_OPT_OUTPUT | CLI_OPT_FORCE | CLI_OPT_JOBS | CLI_OPT_LAYOUT | CLI_OPT_DEFLATE | CLI_OPT_MAX_MEMORY, NULL, NULL,
                       NULL, 1, 1, &a);
    if (rc != CLI_CONTINUE) goto done;
    if (!a.output) { rc = cli_usage_error(&cli_cmd_decompress, "missing -o OUT"); goto done; }
    if ((rc = cli_check_output_name(&cli_cmd_decompress, a.output)) != CLI_EXIT_OK) goto done;
    if ((rc = cli_ctx_new(&a, &ctx)) != CLI_EXIT_OK) goto done;
    if ((rc = cli_open_model(ctx, &a, a.pos[0], &m)) != CLI_EXIT_OK) goto done;
    cli_write_opts(&a, &wo);
    if (npuc_format_from_path(a.output) == NPUC_FORMAT_AUTO) wo.format = npuc_model_format(m);
    npuc_status st = npuc_decompress_model(ctx, m, a.output, &wo);
    if (st != NPUC_OK) { rc = cli_fail(ctx, st); goto done; }
    cli_warn_ctx(&a, ctx); /* the library's (a name the file does not state, a writer's) */
    cli_note(&a, "%s -> %s", a.pos[0], a.output);
    rc = CLI_EXIT_OK;
done:
    npuc_model_close(m);
    npuc_ctx_free(ctx);
    cli_args_free(&a);
    return cli_finish_stdout(rc);
}

const cli_command cli_cmd_decompress = {
    "decompress",
    "turn an npuc artifact, GGUF file or compressed-tensors checkpoint into dense tensors",
    "Usage: npuc decompress ART -o OUT [options]\n"
    "\n"
    "ART is one of four kinds of input.\n"
    "\n"
    "An npuc artifact (what npuc wrote with its 'npuc' metadata entry: a\n"
    "safetensors, HDF5, .keras or GGUF file, or a checkpoint directory): every\n"
    "tensor npuc encoded (quantized codes with their scales and zero points,\n"
    "low-rank factors, N:M-sparse values, and combinations such as quantized\n"
    "low-rank factors) is rebuilt as dense floats with the original name, shape,\n"
    "dtype and layout; other tensors are copied unchanged. Quantized values equal\n"
    "what --fake-quant writes.\n"
    "\n"
    "A GGUF file without that entry: its Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 tensors are\n"
    "written as F32, dequantized as ggml does; other tensors are copied as they are.\n"
    "\n"
    "A Hugging Face checkpoint directory, or its *.index.json, without that entry: a\n"
    "compressed-tensors checkpoint is written with its weights decoded to F32 (the\n"
    "values --fake-quant gives); any other checkpoint is copied as it is.\n"
    "\n"
    "An ONNX model (or a file converted from one) whose graph computes weights\n"
    "with DequantizeLinear, com.microsoft::MatMulNBits or the Cast/Sub/Mul\n"
    "forms quantize writes: those become float initializers under their names\n"
    "(MatMulNBits a MatMul again), with the values the ONNX operators define.\n"
    "\n"
    "Any other input without the 'npuc' metadata entry is an error (exit 2).\n"
    "\n"
    "  -o, --output OUT       the dense model (format from OUT's extension, else ART's)\n"
    "      --deflate N        HDF5 deflate level 0..9 (default 4)\n"
    "      --max-shard-size SIZE  checkpoint outputs: at most SIZE per shard (default: ART's sharding)\n"
    "  -f, --force            overwrite OUT\n"
    "  -j, --jobs N           worker threads (default: all cores)\n"
    "      --layout REGEX=NAME  override layouts (rarely needed here)\n"
    "      --max-memory SIZE  decode a tensor to more than 256x its stored bytes when it\n"
    "                         fits SIZE (default 256M): larger asks are refused as\n"
    "                         decompression bombs\n"
    "  -q, --quiet            no notes on stderr\n"
    "  -h, --help             this help\n",
    "ART",
    run,
    NULL,
};
