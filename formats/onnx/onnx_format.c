/*
 * onnx_format.c - ONNX's row in the format registry.
 *
 * ONNX has no magic number: a file is a serialized ModelProto.  The sniff
 * checks that the first fields are ModelProto fields with the wire types
 * onnx.proto gives them (ir_version, the producer strings, the graph, the
 * opset imports, ...), which every exporter writes first; a file named
 * .onnx that fails it is refused as "not an ONNX model" before the reader
 * runs.  One write option: "external-data" (auto: only when the model would
 * reach protobuf's 2 GiB limit; always: every tensor of 1 KiB or more goes
 * to "<output>.data"; an ONNX input with external data keeps it when
 * converted to ONNX).
 */
#include <stdio.h>
#include <string.h>

#include "onnx_format.h"

/* ModelProto's fields (onnx.proto) and their wire types. */
static int model_field(uint32_t num, unsigned wt) {
    switch (num) {
    case 1: case 5: return wt == 0;                                  /* ir_version, model_version */
    case 2: case 3: case 4: case 6: case 7: case 8: case 14: case 20: case 25: return wt == 2;
    default: return 0;
    }
}

int npuc__onnx_looks_like(const unsigned char *p, size_t n) {
    const unsigned char *q = p, *end = p + n;
    int seen = 0;
    for (int k = 0; k < 2 && q < end; k++) {
        npuc__ox_field f;
        const unsigned char *at = q;
        const char *why = npuc__ox_next(&q, end, &f);
        if (why) {
            /* A field cut by the end of the probe is fine once its tag fits. */
            uint64_t tag;
            const unsigned char *t = at;
            if (seen && !npuc__ox_varint(&t, end, &tag) && model_field((uint32_t)(tag >> 3), (unsigned)(tag & 7)))
                return 1;
            return 0;
        }
        if (!model_field(f.num, f.wt)) return 0;
        if (f.num == 1 && (f.v == 0 || f.v > 100)) return 0;
        seen++;
    }
    return seen > 0;
}

static int onnx_sniff(const char *path) {
    unsigned char b[64];
    FILE *f = fopen(path, "rb");
    if (!f) return NPUC__SNIFF_NO;
    size_t n = fread(b, 1, sizeof b, f);
    fclose(f);
    return n && npuc__onnx_looks_like(b, n) ? NPUC__SNIFF_PLAUSIBLE : NPUC__SNIFF_NO;
}

static const char *const ONNX_EXTERNAL[] = {"auto", "always", NULL};

static const char *const ONNX_INT4[] = {"dq", "matmulnbits", NULL};

static const npuc__opt_decl ONNX_OPTS[] = {
    {.key = "external-data", .type = NPUC__OPT_CHOICE, .label = "ONNX external data", .choices = ONNX_EXTERNAL,
     .dflt = "auto",
     .help = "ONNX outputs: auto (tensors go to <output>.data only when the model would reach 2 GiB) or always "
             "(every tensor of 1 KiB or more)"},
    {.key = "onnx-int4", .type = NPUC__OPT_CHOICE, .label = "ONNX 4-bit form", .choices = ONNX_INT4, .dflt = "dq",
     .help = "ONNX outputs of 4-bit groups: dq (DequantizeLinear with block_size, opset 21) or matmulnbits "
             "(com.microsoft::MatMulNBits for weights read by MatMul)"},
};

/* An ONNX input with external data keeps it in an ONNX output. */
static const char *onnx_describe(const npuc_model *m, const char *key) {
    if (strcmp(key, "external-data") != 0) return NULL;
    return npuc__onnx_model_external(m) ? "always" : NULL;
}

static const char *const ONNX_EXT[] = {".onnx", NULL};

const npuc__format_row npuc__onnx_format = {
    .name = "onnx",
    .ext = ONNX_EXT,
    .sniff = onnx_sniff,
    .no_signature = "not an ONNX model (its first bytes are not ModelProto fields)",
    .open = npuc__onnx_open,
    .writer = &npuc__onnx_writer_backend,
    .opts = ONNX_OPTS,
    .nopts = sizeof ONNX_OPTS / sizeof ONNX_OPTS[0],
    .describe = onnx_describe,
    .read_graph = npuc__onnx_read_graph,
    .graph_meta_key = NPUC__ONNX_MODEL_KEY,
    .graph_meta = NPUC__ONNX_MODEL_KEY,
    .graph_write = npuc__onnx_graph_write,
    .decompress = npuc__onnx_decompress,
};
