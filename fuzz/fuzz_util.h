/*
 * fuzz_util.h - what every npuc fuzz target shares: a scratch directory for
 * the input as a file, and a context with a small decoding budget.
 *
 * libFuzzer hands a target bytes; npuc's readers open paths.  Each target
 * writes the bytes to one scratch file per process (rewritten in place for
 * every input, the name ending in the extension the reader wants) and runs
 * the public API on it.  Any status is fine: a target only fails by
 * crashing, hanging, leaking or tripping a sanitizer.
 */
#ifndef NPUC_FUZZ_UTIL_H
#define NPUC_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <npuc/npuc.h>

/* Memory budget of the fuzz contexts (npuc_ctx_set_max_memory): legitimate
 * decompression bombs are refused well inside libFuzzer's -rss_limit_mb. */
#define NPUC_FUZZ_MAX_MEMORY (64ull << 20)

/* Tensors above this many float32 bytes are not converted with
 * npuc_model_read_f32 (their raw bytes are still read): the file format
 * allows them, and the fuzzer's memory limit would call them a leak. */
#define NPUC_FUZZ_MAX_F32 (128ull << 20)

/* Writes data to the scratch file "<dir>/input<ext>" and returns its path
 * (static storage, valid until the next call), or NULL when the file cannot
 * be written.  The directory is made once per process under $TMPDIR (else
 * /dev/shm, else /tmp) and removed at exit. */
const char *npuc_fuzz_write(const uint8_t *data, size_t size, const char *ext);

/* Removes the scratch directory now (what the exit handler does), for a
 * process that ends with _exit(): replay_main.c's probe child, a fork of
 * the replay that makes its own directory and would otherwise leave it
 * behind. */
void npuc_fuzz_cleanup(void);

/* A path "<dir>/<name>" in the same scratch directory (static storage, valid
 * until the next call), for outputs a target writes. */
const char *npuc_fuzz_path(const char *name);

/* A new context (one thread, NPUC_FUZZ_MAX_MEMORY), or NULL. */
npuc_ctx *npuc_fuzz_ctx(void);

/* Writes data to the scratch file with extension ext and opens it as a model
 * of the given format.  Returns the model, or NULL when the file could not be
 * written or opened; *ctx gets a new fuzz context either way (NULL when out
 * of memory), which the caller frees after closing the model. */
npuc_model *npuc_fuzz_open(const uint8_t *data, size_t size, const char *ext, npuc_format format,
                           npuc_ctx **ctx);

/* Walks everything a reader hands out for m: metadata, Keras groups, and
 * every tensor, raw and as float32 when that fits NPUC_FUZZ_MAX_F32.
 * Errors are ignored. */
void npuc_fuzz_read_all(npuc_ctx *ctx, npuc_model *m);

/* The whole weight-file target: npuc_fuzz_open, npuc_fuzz_read_all, close.
 * Returns 0 (libFuzzer's "keep going"). */
int npuc_fuzz_model(const uint8_t *data, size_t size, const char *ext, npuc_format format);

#endif
