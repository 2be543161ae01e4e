/*
 * npuc/hdf5.h - what is specific to HDF5 files (Keras .h5, .weights.h5,
 * plain HDF5 trees): the kind of tree a file holds.  docs/hdf5.md describes
 * the trees, the reader's limits and the writer's layout.
 *
 * Writing HDF5 takes two write options (model.h, npuc_write_opts_set):
 *   "deflate"    0..9, default 4: shuffle + deflate level; 0 stores every
 *                dataset contiguously, uncompressed
 *   "structure"  "plain", "keras2" or "keras3" (the names npuc_h5_style_name
 *                gives); default keras2 when any tensor has a layer group,
 *                else plain
 *
 * Example (compiled by tests/cli/c_api.sh):
 *     npuc_writer *w;
 *     npuc_write_opts o = npuc_write_opts_defaults();
 *     npuc_write_opts_set(ctx, &o, "structure", npuc_h5_style_name(NPUC_H5_KERAS3));
 *     npuc_writer_open(ctx, "model.weights.h5", &o, &w);
 */
#ifndef NPUC_HDF5_H
#define NPUC_HDF5_H

#include "api.h"
#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The kind of HDF5 tree a model came from or is written as. */
typedef enum npuc_h5_style {
    NPUC_H5_PLAIN = 0,   /* any tree: every dataset, its path as its name */
    NPUC_H5_KERAS2 = 1,  /* Keras 2 save_weights: layer_names / weight_names */
    NPUC_H5_KERAS3 = 2   /* Keras 3 .weights.h5: layers/<name>/vars/<i> */
} npuc_h5_style;

/* The tree an HDF5 model was read from; NPUC_H5_PLAIN for other formats. */
NPUC_API npuc_h5_style npuc_model_h5_style(const npuc_model *m);
/* "plain", "keras2", "keras3": the "structure" option's values and what
 * npuc_model_format_opt(m, "structure") returns; "?" for other values
 * (static strings). */
NPUC_API const char *npuc_h5_style_name(npuc_h5_style s);

#ifdef __cplusplus
}
#endif
#endif
