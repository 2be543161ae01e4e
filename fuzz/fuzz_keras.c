/*
 * fuzz_keras.c - libFuzzer target: the Keras 3 .keras archive reader
 * (formats/keras/: every zip entry checked through libzip, config.json and
 * the other text entries carried as metadata, model.weights.h5 extracted to
 * a private temporary file and read by the HDF5 reader).  The input is a
 * whole .keras file, opened through the public npuc_model_open as the hdf5
 * target opens .h5 files: the extracted weights are read by whatever reads
 * HDF5 underneath (the contained worker, or in process with
 * NPUC_H5_INPROCESS=1), then metadata, groups and every tensor are walked.
 * Any error is fine; a crash, hang or leak is not.
 */
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return npuc_fuzz_model(data, size, ".keras", npuc_format_find("keras"));
}
