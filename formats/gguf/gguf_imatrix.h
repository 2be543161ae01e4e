/*
 * gguf_imatrix.h - llama.cpp importance matrices (library-private): the two
 * file formats llama-quantize's --imatrix reads, a lookup by weight name, and
 * a writer of the legacy format.  docs/gguf.md, "Importance matrices", is
 * the user's view; gguf_imatrix.c starts with both byte layouts.
 *
 * An importance matrix holds, per weight matrix, one value per input column
 * (the mean of x^2 over the activations that column multiplied); a 3-D MoE
 * weight [n_expert, rows, cols] has one such row per expert, n_expert * cols
 * values.  Loading turns either format into these means exactly as
 * llama-quantize's load_imatrix / load_legacy_imatrix do, and checks the file
 * as untrusted input.
 */
#ifndef NPUC_GGUF_IMATRIX_H
#define NPUC_GGUF_IMATRIX_H

#include "npuc_internal.h"

typedef struct npuc__imatrix npuc__imatrix;

/* Longest entry name the legacy reader accepts (the writer refuses longer
 * ones): llama.cpp's names are GGUF tensor names of at most 63 bytes, npuc's
 * may be a source's own names. */
#define NPUC__IMATRIX_NAME_MAX 4096u

/* Loads the importance matrix at path: a GGUF file (magic "GGUF") through the
 * GGUF reader, anything else as the legacy binary format.  Malformed files
 * are NPUC_ERR_FORMAT with a one-line message naming the file and the entry;
 * what llama-quantize tolerates (a zero count, a duplicate legacy name, bytes
 * after the legacy trailer) is accepted the way it does and left as a
 * warning on ctx (npuc__ctx_warn).  Memory follows the file's size. */
npuc_status npuc__imatrix_load(npuc_ctx *ctx, const char *path, npuc__imatrix **out);
void npuc__imatrix_free(npuc__imatrix *im);

const char *npuc__imatrix_path(const npuc__imatrix *im);
/* 1 for the GGUF format, 0 for the legacy one. */
int npuc__imatrix_is_gguf(const npuc__imatrix *im);
size_t npuc__imatrix_count(const npuc__imatrix *im);
/* Entry i (in name order): its name, its value count, its values. */
const char *npuc__imatrix_name(const npuc__imatrix *im, size_t i);
uint64_t npuc__imatrix_len(const npuc__imatrix *im, size_t i);
const float *npuc__imatrix_values(const npuc__imatrix *im, size_t i);
/* The legacy trailer's dataset name ("" when absent) and last call count
 * (-1 when absent); the GGUF format's imatrix.chunk_count. */
const char *npuc__imatrix_dataset(const npuc__imatrix *im);
int64_t npuc__imatrix_chunks(const npuc__imatrix *im);

/* The importance of weight tensor name: n_mat matrices (1 for a 2-D weight,
 * ne[2] = the first of three npuc dims for a MoE one) of n_per_row input
 * columns (the last npuc dim, GGUF ne[0]), n_mat * n_per_row floats, matrix
 * after matrix, in *imp; *imp = NULL when no entry matches.  The entry is
 * found by the first of these names that is an entry: name; alt (the
 * tensor's name in the GGUF output when it differs, e.g. shortened; may be
 * NULL); name without a trailing ".weight"; name with ".weight" appended.
 * An entry whose length is not n_mat * n_per_row is NPUC_ERR_FORMAT naming
 * the file, the entry and the tensor, except for token_embd.weight, which
 * llama-quantize quantizes without importance after a message: a warning on
 * ctx and *imp = NULL.  A found entry is marked matched. */
npuc_status npuc__imatrix_lookup(npuc_ctx *ctx, npuc__imatrix *im, const char *name, const char *alt,
                                 uint64_t n_per_row, uint64_t n_mat, const float **imp);
/* Marks the entry of tensor name matched, as a lookup would, without
 * checking its length (a tensor written unquantized); 1 when there is one. */
int npuc__imatrix_mark(npuc__imatrix *im, const char *name, const char *alt);
/* Entries no lookup matched so far: how many, and the k-th of them. */
size_t npuc__imatrix_unmatched_count(const npuc__imatrix *im);
const char *npuc__imatrix_unmatched(const npuc__imatrix *im, size_t k);
/* A warning on ctx "<path>: N imatrix entries matching no tensor: a, b, ..."
 * (the first few names) when there are any. */
void npuc__imatrix_warn_unmatched(npuc_ctx *ctx, const npuc__imatrix *im);

/* One entry of a legacy file to write: values[nval] are sums whose quotient
 * by ncall is the importance (llama.cpp's convention). */
typedef struct npuc__imatrix_out {
    const char *name;
    int32_t ncall;
    uint64_t nval;
    const float *values;
} npuc__imatrix_out;

/* Writes the legacy binary format to path atomically (nothing appears on
 * failure; an existing path is NPUC_ERR_EXISTS unless overwrite): the n
 * entries in the given order, then last_call and the dataset name.  Names of
 * 1..NPUC__IMATRIX_NAME_MAX bytes, ncall >= 1, 1 <= nval <= INT32_MAX,
 * finite values, else NPUC_ERR_ARG. */
npuc_status npuc__imatrix_write_dat(npuc_ctx *ctx, const char *path, int overwrite, const npuc__imatrix_out *e,
                                    size_t n, int32_t last_call, const char *dataset);

#endif
