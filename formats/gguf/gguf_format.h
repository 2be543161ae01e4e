/*
 * gguf_format.h - what the GGUF reader, writer and block codecs share
 * (library-private).  docs/gguf.md says which subset of GGUF npuc reads and
 * writes; the byte layout is at the top of gguf_reader.c.
 *
 * GGUF's tensor types are ggml's: a type has an id (pinned by ggml.h), a
 * block size in elements and a block size in bytes.  npuc knows the plain
 * types (F32, F16, BF16, F64, I8..I64), the legacy 32-element block
 * types Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 and the 256-element super-block
 * ("K") types Q2_K, Q3_K, Q4_K, Q5_K and Q6_K; gguf_quant.c drives their
 * quantizers (src/kernels/) and holds the dequantizers, written from the
 * block definitions so that their bytes equal ggml_quantize_chunk's and
 * their floats ggml's dequantize_row_*.
 */
#ifndef NPUC_GGUF_FORMAT_H
#define NPUC_GGUF_FORMAT_H

#include "format_row.h"

/* ggml type ids (ggml.h, enum ggml_type) of the types npuc handles. */
enum {
    NPUC__GGML_F32 = 0,
    NPUC__GGML_F16 = 1,
    NPUC__GGML_Q4_0 = 2,
    NPUC__GGML_Q4_1 = 3,
    NPUC__GGML_Q5_0 = 6,
    NPUC__GGML_Q5_1 = 7,
    NPUC__GGML_Q8_0 = 8,
    NPUC__GGML_Q2_K = 10,
    NPUC__GGML_Q3_K = 11,
    NPUC__GGML_Q4_K = 12,
    NPUC__GGML_Q5_K = 13,
    NPUC__GGML_Q6_K = 14,
    NPUC__GGML_I8 = 24,
    NPUC__GGML_I16 = 25,
    NPUC__GGML_I32 = 26,
    NPUC__GGML_I64 = 27,
    NPUC__GGML_F64 = 28,
    NPUC__GGML_BF16 = 30
};

/* One ggml type: name as GGUF tools print it, elements and bytes per block
 * (1 and the element size for plain types), the npuc dtype a model exposes
 * for it (F32 for block types, which are dequantized on load), and whether
 * npuc knows its bytes at all (known = 0: a ggml type npuc recognises by id
 * only, to say "unsupported" rather than "malformed"). */
typedef struct npuc__ggml_type {
    int id;
    const char *name;
    unsigned blck, tsize;
    npuc_dtype dtype;
    int known;
} npuc__ggml_type;

/* The traits of ggml type id, or NULL for an id ggml does not define. */
const npuc__ggml_type *npuc__ggml_type_by_id(uint32_t id);

/* Block codecs (gguf_quant.c).  quantize_rows: k elements of dtype sdt at
 * src (converted to float32 as npuc_convert does), rows of `row` elements
 * each (k a multiple of row, row a multiple of the type's block size: 32,
 * or 256 for the K types), into k/blck blocks of type id, on nth threads
 * (0: OpenMP's default; the bytes do not depend on it).  imp is NULL or
 * the importance of each of a row's `row` columns (one imatrix row, the
 * same for every row; finite and >= 0, checked by the caller): the bytes
 * then equal ggml_quantize_chunk(id, x, y, 0, k/row, row, imp), the
 * weighted paths of Q2_K..Q6_K and Q4_0, Q4_1, Q5_0, Q5_1 (Q8_0 has none
 * and ignores imp); without imp they equal the same call with NULL.
 * Returns 0; -1 when a block holds a NaN or infinite value or its fp16
 * scale or minimum would overflow fp16 (what ggml would store as inf),
 * with *bad_block set to the first such block's index; -2 out of memory.
 * quantize is quantize_rows with row = k and no importance.
 * dequantize: k floats from k/blck blocks, exactly as ggml's
 * dequantize_row_*.  They handle the ten block types and nothing else. */
int npuc__gguf_quantize_rows(int id, const void *src, npuc_dtype sdt, void *blocks, uint64_t k, uint64_t row,
                             const float *imp, int nth, uint64_t *bad_block);
int npuc__gguf_quantize(int id, const void *src, npuc_dtype sdt, void *blocks, uint64_t k, int nth,
                        uint64_t *bad_block);
void npuc__gguf_dequantize(int id, const void *blocks, float *y, uint64_t k);
/* 1 for the super-block types Q2_K..Q6_K. */
int npuc__gguf_is_ktype(int id);

/* Bytes of a tensor of type t with ne[0] = row elements and numel elements;
 * -1 when row is not a multiple of the block size or the size overflows. */
int npuc__gguf_nbytes(const npuc__ggml_type *t, uint64_t row, uint64_t numel, uint64_t *nbytes);

/* The reader (gguf_reader.c). */
npuc_status npuc__gguf_open(npuc_ctx *ctx, const char *path, const npuc_open_opts *o, npuc_model **out);
/* The ggml type of tensor i of a model the GGUF reader opened. */
int npuc__gguf_model_type(const npuc_model *m, size_t i);
/* The writer (gguf_writer.c). */
extern const npuc_writer_backend npuc__gguf_writer_backend;
/* The registry row (gguf_format.c) and its "gguf-type" choices (in the
 * order of GGUF_TYPE_IDS there). */
extern const npuc__format_row npuc__gguf_format;
int npuc__gguf_writer_type(const npuc_writer *w);
/* The size of the file w would write for its declared tensors and metadata,
 * computed as ggw_begin lays it out (header, padding, padded payloads)
 * without writing anything; the budget of quantize --target-size
 * (budget_alloc.h) is its caller. */
npuc_status npuc__gguf_writer_size(npuc_writer *w, uint64_t *size);
/* A metadata entry the writer reads instead of writing: a JSON object of
 * tensor name -> ggml type id, the type of each named tensor (quantize's
 * budget chooses them); the fallbacks of plan_type still apply. */
#define NPUC__GGUF_TYPES_KEY "npuc.gguf.types"
/* The llama.cpp mix "gguf-type" names (gguf_mix.h), or 0 for a plain type. */
int npuc__gguf_writer_mix(const npuc_writer *w);
/* A "gguf-type" value's type id (a mix: its default type) and mix; -1 for
 * a value that is not a choice. */
int npuc__gguf_type_choice(const char *value, int *type, int *mix);

#define NPUC__GGUF_MAGIC "GGUF"
#define NPUC__GGUF_VERSION 3u
#define NPUC__GGUF_ALIGN 32u
#define NPUC__GGUF_NAME_MAX 63u /* bytes of a tensor name (ggml's GGML_MAX_NAME - 1) */
#define NPUC__GGUF_MAX_DIMS 4   /* ggml's GGML_MAX_DIMS */
/* The metadata key that maps shortened tensor names back (docs/gguf.md). */
#define NPUC__GGUF_LONG_NAMES "npuc.gguf.long_names"

#endif
