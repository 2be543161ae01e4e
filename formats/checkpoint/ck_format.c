/*
 * ck_format.c - the sharded checkpoint's row in the format registry.
 *
 * A checkpoint is a directory (or its *.index.json), so it has no extension;
 * the sniff recognises it (ck_index.c) and an output without an extension
 * takes the input's format, so `npuc quantize ckpt/ -o out/` writes a
 * checkpoint.  Write options: "max-shard-size" in bytes (0 or unset: keep
 * the input's sharding) and "checkpoint-format" (npuc or compressed-tensors).
 */
#include "ck_format.h"

static const char *const CK_EXT[] = {NULL};

static const char *const CK_FORMATS[] = {"npuc", "compressed-tensors", NULL};

/* compressed-tensors is a checkpoint: a .safetensors output refuses it. */
static const char *const CK_OUTPUT_OPTS[] = {"checkpoint-format", NULL};

static const npuc__opt_decl CK_OPTS[] = {
    {"checkpoint-format", NPUC__OPT_CHOICE, "checkpoint format", 0, 0, CK_FORMATS, "npuc",
     "npuc (npuc's artifact in each shard) or compressed-tensors (docs/compressed-tensors.md)"},
    {"max-shard-size", NPUC__OPT_INT, "max shard size", 0, 1L << 50, NULL, "0",
     "largest shard of a checkpoint output in bytes (0: keep the input's sharding)"},
};

const npuc__format_row npuc__ck_format = {
    .name = "checkpoint",
    .ext = CK_EXT,
    .sniff = npuc__ck_sniff,
    .no_signature = NULL,
    .open = npuc__ck_open,
    .writer = &npuc__ck_writer_backend,
    .opts = CK_OPTS,
    .nopts = sizeof CK_OPTS / sizeof CK_OPTS[0],
    .output_opts = CK_OUTPUT_OPTS,
    .writes_dir = 1,
    .move_dir = npuc__ck_dir_move,
    .decodes_on_load = 1, /* a compressed-tensors checkpoint: decompress writes its decoded weights */
};
