/*
 * h5_format.c - HDF5's row in the format registry: extensions, the
 * signature sniff, and the two write options (deflate level, tree
 * structure) with the rules that derive the structure's default and tell
 * the core whether a reader will apply Keras layout rules.
 */
#include <stdio.h>
#include <string.h>

#include "h5_common.h"

/* HDF5 files start with an 8-byte signature at 0, 512, 1024, 2048... (a
 * user block may come first); we look up to 8 KiB in. */
static int h5_sniff(const char *path) {
    static const unsigned char SIG[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    FILE *f = fopen(path, "rb");
    if (!f) return NPUC__SNIFF_NO;
    int found = 0;
    unsigned char b[8];
    for (long off = 0; off <= 8192 && !found; off = off ? off * 2 : 512) {
        if (fseek(f, off, SEEK_SET) != 0 || fread(b, 1, 8, f) != 8) break;
        found = memcmp(b, SIG, 8) == 0;
    }
    fclose(f);
    return found ? NPUC__SNIFF_SIGNATURE : NPUC__SNIFF_NO;
}

/* In npuc_h5_style order: the index of a value is its style. */
static const char *const STRUCTURES[] = {"plain", "keras2", "keras3", NULL};

const char *npuc_h5_style_name(npuc_h5_style s) {
    return (unsigned)s < sizeof STRUCTURES / sizeof STRUCTURES[0] - 1 ? STRUCTURES[s] : "?";
}

npuc_h5_style npuc__h5_writer_style(const npuc_writer *w) {
    return (npuc_h5_style)npuc__writer_opt_long(w, "structure", NPUC_H5_PLAIN);
}

/* Tensors that belong to Keras layers are written as Keras 2 save_weights
 * unless the caller chose a tree. */
static const char *h5_derive(const npuc_writer *w, const char *key) {
    if (strcmp(key, "structure") != 0) return NULL;
    for (size_t i = 0; i < w->n; i++)
        if (w->t[i].group) return STRUCTURES[NPUC_H5_KERAS2];
    return STRUCTURES[NPUC_H5_PLAIN];
}

/* A Keras tree is read with Keras rules, except that ONNX/PyTorch weights
 * moved into one keep OIHW: the file says so with format = "pt" (the reader,
 * h5_reader.c, applies the same rule). */
static int h5_keras_layouts(const npuc_writer *w) {
    if (npuc__h5_writer_style(w) == NPUC_H5_PLAIN) return 0;
    for (size_t i = 0; i < w->nmeta; i++)
        if (strcmp(w->meta_k[i], "format") == 0 && strcmp(w->meta_v[i], "pt") == 0) return 0;
    return 1;
}

static const npuc__opt_decl H5_OPTS[] = {
    {.key = "deflate", .type = NPUC__OPT_INT, .label = "deflate level", .min = 0, .max = 9,
     .dflt = "4", .help = "HDF5 deflate level 0..9 (default 4; 0 = contiguous)"},
    {.key = "structure", .type = NPUC__OPT_CHOICE, .label = "structure", .choices = STRUCTURES,
     .dflt = NULL,
     .help = "HDF5 tree: plain, keras2 or keras3 (default keras2 when tensors have Keras layer "
             "groups, else plain)"},
};

static const char *const H5_EXT[] = {".h5", ".hdf5", ".he5", NULL};

const npuc__format_row npuc__h5_format = {
    .name = "hdf5",
    .ext = H5_EXT,
    .sniff = h5_sniff,
    .no_signature = "not an HDF5 file (no HDF5 signature)",
    .open = npuc__h5_open,
    .writer = &npuc__h5_writer_backend,
    .opts = H5_OPTS,
    .nopts = sizeof H5_OPTS / sizeof H5_OPTS[0],
    .derive = h5_derive,
    .keras_layouts = h5_keras_layouts,
    .describe = npuc__h5_describe,
    .graph_meta = "model_config",
    .graph_write = npuc__kconfig_graph_write,
};
