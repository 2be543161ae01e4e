/*
 * fuzz_gguf.c - libFuzzer target: the GGUF reader (formats/gguf/).  The
 * input is a whole .gguf file: open it (header, key/value pairs, tensor
 * table), walk what info lists, read every tensor raw and as float32 (the
 * block types dequantized), close.  Seeds: fuzz/corpus/gguf/.  GGUF has no
 * pinned npuc_format value, so its id comes from the registry by name.
 */
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return npuc_fuzz_model(data, size, ".gguf", npuc_format_find("gguf"));
}
