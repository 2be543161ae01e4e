/*
 * gguf_format.c - GGUF's row in the format registry: the ".gguf"
 * extension, the "GGUF" magic, and three write options: "gguf-type", the
 * ggml type of the float matrices (default f16, what llama.cpp's
 * convert_hf_to_gguf.py writes by default: quantizing is asked for, never
 * implied), "gguf-arch", general.architecture (default: the source's,
 * when it is a GGUF file, else "npuc"), and "imatrix", the path of a
 * llama.cpp importance matrix (gguf_imatrix.h; no default).
 */
#include <stdio.h>
#include <string.h>

#include "gguf_format.h"
#include "gguf_mix.h"

static int gguf_sniff(const char *path) {
    unsigned char b[4];
    FILE *f = fopen(path, "rb");
    if (!f) return NPUC__SNIFF_NO;
    int ok = fread(b, 1, 4, f) == 4 && memcmp(b, NPUC__GGUF_MAGIC, 4) == 0;
    fclose(f);
    return ok ? NPUC__SNIFF_SIGNATURE : NPUC__SNIFF_NO;
}

/* The plain types, then llama.cpp's mixes (gguf_mix.h), whose id here is
 * the mix's default type.  q2_k and q6_k name the mixes, as llama-quantize's
 * Q2_K and Q6_K do (LLAMA_FTYPE_MOSTLY_Q2_K, _Q6_K: output.weight and
 * attn_v get other types); with "gguf-pure" (--gguf-pure, llama-quantize's
 * --pure) every tensor takes the mix's default type instead. */
#define GGUF_NPLAIN 11
static const char *const GGUF_PURE[] = {"no", "yes", NULL};
static const char *const GGUF_TYPES[] = {"f32",    "f16",    "bf16",   "q8_0",   "q4_0",   "q4_1",   "q5_0",
                                         "q5_1",   "q3_k",   "q4_k",   "q5_k",   "q2_k",   "q3_k_s", "q3_k_m",
                                         "q3_k_l", "q4_k_s", "q4_k_m", "q5_k_s", "q5_k_m", "q6_k",   NULL};
#define GGUF_NTYPES (sizeof GGUF_TYPES / sizeof GGUF_TYPES[0] - 1)
static const int GGUF_TYPE_IDS[GGUF_NTYPES] = {
    NPUC__GGML_F32,  NPUC__GGML_F16,  NPUC__GGML_BF16, NPUC__GGML_Q8_0, NPUC__GGML_Q4_0, NPUC__GGML_Q4_1,
    NPUC__GGML_Q5_0, NPUC__GGML_Q5_1, NPUC__GGML_Q3_K, NPUC__GGML_Q4_K, NPUC__GGML_Q5_K, NPUC__GGML_Q2_K,
    NPUC__GGML_Q3_K, NPUC__GGML_Q3_K, NPUC__GGML_Q3_K, NPUC__GGML_Q4_K, NPUC__GGML_Q4_K, NPUC__GGML_Q5_K,
    NPUC__GGML_Q5_K, NPUC__GGML_Q6_K};

int npuc__gguf_writer_type(const npuc_writer *w) {
    long i = npuc__writer_opt_long(w, "gguf-type", 1);
    return GGUF_TYPE_IDS[i >= 0 && i < (long)GGUF_NTYPES ? i : 1];
}

int npuc__gguf_writer_mix(const npuc_writer *w) {
    if (npuc__writer_opt_long(w, "gguf-pure", 0) == 1) return NPUC__GGUF_MIX_NONE;
    return npuc__gguf_mix_parse(npuc__writer_opt(w, "gguf-type"));
}

int npuc__gguf_type_choice(const char *value, int *type, int *mix) {
    for (size_t i = 0; i < GGUF_NTYPES; i++)
        if (strcmp(GGUF_TYPES[i], value) == 0) {
            *type = GGUF_TYPE_IDS[i];
            *mix = npuc__gguf_mix_parse(value);
            return 0;
        }
    return -1;
}

static const char *gguf_derive(const npuc_writer *w, const char *key) {
    if (strcmp(key, "gguf-arch") != 0) return NULL; /* "imatrix": none */
    for (size_t i = 0; i < w->nmeta; i++)
        if (strcmp(w->meta_k[i], "gguf.general.architecture") == 0 && strlen(w->meta_v[i]) < 40)
            return w->meta_v[i];
    return "npuc";
}

/* A GGUF input's type: that of its first tensor of rank >= 2 stored in a
 * type the writer offers, so converting GGUF to GGUF keeps it. */
static const char *gguf_describe(const npuc_model *m, const char *key) {
    if (strcmp(key, "gguf-type") != 0) return NULL;
    for (size_t i = 0; i < m->n; i++) {
        if (m->t[i].rank < 2) continue;
        int id = npuc__gguf_model_type(m, i);
        for (size_t k = 0; k < GGUF_NPLAIN; k++)
            if (GGUF_TYPE_IDS[k] == id) return GGUF_TYPES[k];
    }
    return NULL;
}

static const npuc__opt_decl GGUF_OPTS[] = {
    {.key = "gguf-type", .type = NPUC__OPT_CHOICE, .label = "GGUF tensor type", .choices = GGUF_TYPES,
     .dflt = "f16",
     .help = "ggml type of float tensors of rank >= 2: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, "
             "q3_k, q4_k or q5_k, or a llama.cpp mix q2_k, q3_k_s, q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s, "
             "q5_k_m or q6_k (default f16; rank 0-1 stay f32; a K type's rows not a multiple of 256 fall "
             "back as llama-quantize's: docs/gguf.md)"},
    {.key = "gguf-pure", .type = NPUC__OPT_CHOICE, .label = "GGUF pure", .choices = GGUF_PURE, .dflt = "no",
     .help = "yes: every float tensor of rank >= 2 in the gguf-type's own type, no mix rules "
             "(llama-quantize --pure)"},
    {.key = "gguf-tensor-type", .type = NPUC__OPT_TEXT, .label = "GGUF tensor type rules", .min = 3,
     .max = NPUC_WRITE_OPT_VALUE_MAX - 1, .dflt = NULL,
     .help = "REGEX=TYPE rules, one a line: the first whose REGEX is found in a tensor's name gives its "
             "type (llama-quantize --tensor-type)"},
    {.key = "gguf-arch", .type = NPUC__OPT_NAME, .label = "GGUF architecture", .min = 1, .max = 39,
     .dflt = NULL,
     .help = "general.architecture (default: the source GGUF's, else npuc)"},
    {.key = "imatrix", .type = NPUC__OPT_PATH, .label = "GGUF importance matrix", .min = 1,
     .max = NPUC_WRITE_OPT_VALUE_MAX - 1, .dflt = NULL,
     .help = "llama.cpp importance matrix (legacy .dat or GGUF) for the quantized types: loaded and "
             "checked against every quantized tensor (docs/gguf.md)"},
};

static const char *const GGUF_EXT[] = {".gguf", NULL};

const npuc__format_row npuc__gguf_format = {
    .name = "gguf",
    .ext = GGUF_EXT,
    .sniff = gguf_sniff,
    .no_signature = "not a GGUF file (no GGUF magic)",
    .open = npuc__gguf_open,
    .writer = &npuc__gguf_writer_backend,
    .opts = GGUF_OPTS,
    .nopts = sizeof GGUF_OPTS / sizeof GGUF_OPTS[0],
    .derive = gguf_derive,
    .describe = gguf_describe,
    .decodes_on_load = 1,
};
