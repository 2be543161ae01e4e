/*
 * format_registry.c - the table of file formats the core iterates
 * (src/core/format_row.h).  Each format folder defines its row; this file
 * only lists them.
 *
 * A row's position is its format's id (npuc_format = index + 1): append new
 * rows, never reorder, so NPUC_FORMAT_SAFETENSORS (1) and NPUC_FORMAT_HDF5
 * (2) keep their pinned values.  Order also breaks ties between equally sure
 * sniffs, and the first row opens a file nothing recognises.
 */
#include "checkpoint/ck_format.h"
#include "gguf/gguf_format.h"
#include "hdf5/h5_common.h"
#include "keras/keras_format.h"
#include "onnx/onnx_format.h"
#include "safetensors/st_format.h"

static const npuc__format_row *const ROWS[] = {
    &npuc__st_format, /* 1 = NPUC_FORMAT_SAFETENSORS */
    &npuc__h5_format, /* 2 = NPUC_FORMAT_HDF5 */
    &npuc__gguf_format,
    &npuc__keras_format,
    &npuc__ck_format,
    &npuc__onnx_format,
};

const npuc__format_row *const *npuc__format_table(size_t *n) {
    *n = sizeof ROWS / sizeof ROWS[0];
    return ROWS;
}
