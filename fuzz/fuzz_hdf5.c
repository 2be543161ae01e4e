/*
 * fuzz_hdf5.c - libFuzzer target: the HDF5 reader (plain trees, Keras 2 and
 * Keras 3 weight files).  The input is a whole .h5 file, opened through the
 * public npuc_model_open whatever reads it underneath (in process, or a
 * contained worker): open, walk metadata and Keras groups, read every
 * tensor, close.  Any error is fine; a crash or hang is not.
 */
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return npuc_fuzz_model(data, size, ".h5", NPUC_FORMAT_HDF5);
}
