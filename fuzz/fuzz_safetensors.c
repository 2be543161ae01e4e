/*
 * fuzz_safetensors.c - libFuzzer target: the safetensors header parser and
 * reader.  The input is a whole .safetensors file: open it (header, tensor
 * table, metadata), walk what info lists, read every tensor raw and as
 * float32, close.
 */
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return npuc_fuzz_model(data, size, ".safetensors", NPUC_FORMAT_SAFETENSORS);
}
