/*
 * keras_format.c - the .keras row of the format registry: the extension,
 * the zip signature sniff, the write option (the weights' HDF5 deflate
 * level) and the hooks that answer as the HDF5 row does for the weights.
 */
#include <stdio.h>
#include <string.h>

#include "hdf5/h5_common.h"
#include "keras_format.h"

/* A zip starts with a local file header (PK\3\4), or is an empty archive
 * (PK\5\6).  Any zip is only plausible: the reader says when it is not
 * Keras' (no model.weights.h5).  An HDF5 file named .keras (Keras 2 saved
 * whole models under any name) is plausible too: the reader hands it to
 * the HDF5 reader. */
int npuc__keras_sniff(const char *path) {
    unsigned char b[4];
    FILE *f = fopen(path, "rb");
    if (!f) return NPUC__SNIFF_NO;
    size_t n = fread(b, 1, 4, f);
    fclose(f);
    if (n == 4 && b[0] == 'P' && b[1] == 'K' && ((b[2] == 3 && b[3] == 4) || (b[2] == 5 && b[3] == 6)))
        return NPUC__SNIFF_PLAUSIBLE;
    return NPUC__SNIFF_NO;
}

/* Keras rules apply to the weights, unless the model says its layouts are
 * PyTorch's (format = "pt", as for HDF5). */
static int keras_layouts(const npuc_writer *w) {
    for (size_t i = 0; i < w->nmeta; i++)
        if (strcmp(w->meta_k[i], "format") == 0 && strcmp(w->meta_v[i], "pt") == 0) return 0;
    return 1;
}

static const npuc__opt_decl KERAS_OPTS[] = {
    {.key = "deflate", .type = NPUC__OPT_INT, .label = "deflate level", .min = 0, .max = 9, .dflt = "0",
     .help = "HDF5 deflate level 0..9 of model.weights.h5 in a .keras archive (default 0, as Keras writes)"},
};

static const char *const KERAS_EXT[] = {".keras", NULL};

const npuc__format_row npuc__keras_format = {
    .name = "keras",
    .ext = KERAS_EXT,
    .sniff = npuc__keras_sniff,
    .no_signature = NULL, /* the reader explains (not a zip, not HDF5) */
    .open = npuc__keras_open,
    .writer = &npuc__keras_writer_backend,
    .opts = KERAS_OPTS,
    .nopts = sizeof KERAS_OPTS / sizeof KERAS_OPTS[0],
    .keras_layouts = keras_layouts,
    .describe = npuc__h5_describe,
    .graph_meta = "model_config",
    .graph_write = npuc__kconfig_graph_write,
};
