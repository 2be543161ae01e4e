/*
 * pass_util.h - helpers shared by the pass drivers (library-private): tensor
 * selection rules, "REGEX=VALUE" rule lists, thread counts, scratch buffers,
 * float32 views of tensors and writing float32 results in a tensor's dtype,
 * messages.  What every driver does in the same order (output, metadata,
 * streaming, summary) is pass_driver.h.
 */
#ifndef NPUC_PASS_UTIL_H
#define NPUC_PASS_UTIL_H

#include <regex.h>
#include <stddef.h>
#include <stdint.h>

#include "npuc_internal.h"

/* A list of POSIX extended regexes, optionally each with a "=VALUE" part. */
typedef struct npuc_rules {
    size_t n;       /* rules compiled */
    size_t cap;     /* rules allocated */
    regex_t *re;
    char **value;   /* the text after the last '=', or NULL when values were not asked for */
    const char *const *src;
    size_t *hits;   /* how many tensors each rule matched */
} npuc_rules;

/* Compiles rules; with_value requires "REGEX=VALUE" (split at the last '=').
 * flag names the option in messages ("--include").  Errors are NPUC_ERR_ARG. */
npuc_status npuc__rules_compile(npuc_ctx *ctx, npuc_rules *r, const char *const *src, size_t n,
                                int with_value, const char *flag);
/* Index of the first rule matching name, or -1; every matching rule counts a hit. */
int npuc__rules_match(npuc_rules *r, const char *name);
/* 1 when a rule of r names exactly `name`, as "^NAME$" with every
 * metacharacter but '.' escaped ('.' may stand for itself unescaped): an
 * explicit per-tensor request, the only one that takes a bias, norm or
 * BatchNorm tensor into a quantize or prune pass (npuc__kept_role). */
int npuc__rules_names(const npuc_rules *r, const char *name);
/* Tensors whose role says their values must stay as they are: a bias, a
 * norm scale or a BatchNorm statistic are never quantized or pruned because
 * a pattern (or the rank >= 2 default) happens to match them.  Returns the
 * note for the per-tensor line ("role bias: left as is ..."), or NULL when
 * the role allows it (note untouched). */
const char *npuc__kept_role(const npuc_tensor_info *t, char *note, size_t n);
/* NPUC_ERR_ARG naming the first rule that matched nothing, else NPUC_OK. */
npuc_status npuc__rules_check_hits(npuc_ctx *ctx, const npuc_rules *r, const char *flag,
                                   const char *path);
void npuc__rules_free(npuc_rules *r);

/* The thread count a pass should use: the context's, or all cores. */
int npuc__threads(npuc_ctx *ctx);

/* A growable scratch buffer reused between tensors. */
typedef struct npuc_scratch {
    void *p;
    size_t cap;
} npuc_scratch;
/* Ensures at least n bytes (contents not kept); NULL on allocation failure. */
void *npuc__scratch(npuc_scratch *s, uint64_t n);
void npuc__scratch_free(npuc_scratch *s);

/* Float32 view of tensor i of m: the bytes npuc_model_data read (into the
 * backend's buffer, by pread or HDF5) when they are aligned F32, else a
 * converted copy in scr.  F16 and BF16 go through the widening kernels
 * (kernels/cvt_kernels.h), a large tensor split across the context's
 * threads (one thread when ctx is NULL); the copy is bit-identical to
 * npuc_convert's.  (No prefetch here: the bytes are read by then; issue 31
 * item 15 removed a readahead(2) of them.) */
npuc_status npuc__load_f32(npuc_ctx *ctx, npuc_model *m, size_t i, npuc_scratch *scr, const float **out);

/* dst[0..n) = the F16 or BF16 (dt) elements at src, widened by the kernels
 * (kernels/cvt_kernels.h) in fixed chunks of 256K elements shared out among
 * ctx's threads in contiguous runs (one thread when ctx is NULL).  Every
 * element is converted on its own: the result is npuc_convert's, bit for
 * bit, whatever the thread count. */
void npuc__widen_f32(npuc_ctx *ctx, float *dst, const void *src, npuc_dtype dt, size_t n);

/* x (numel floats) in dtype dt: x itself for F32, else a converted copy in
 * scr.  NPUC_ERR_NOMEM ("out of memory"). */
npuc_status npuc__f32_as(npuc_ctx *ctx, npuc_dtype dt, const float *x, uint64_t numel, npuc_scratch *scr,
                         const void **out);

/* Writes the pruned f32 values of tensor t (src: its original bytes) in t's
 * dtype: F32 as is; other dtypes copy src and clear the elements whose
 * pruned value is +0 (bits 0), so kept values stay bit-exact even for F64. */
npuc_status npuc__write_pruned(npuc_ctx *ctx, npuc_writer *w, const npuc_tensor_info *t,
                               const void *src, const float *pruned, npuc_scratch *scr);

/* snprintf that may cut (notes and reasons are for reading, not parsing). */
void npuc__fmt(char *buf, size_t n, const char *fmt, ...) NPUC_PRINTF(3, 4);

/* "<path>: <message in ctx>" with the same status. */
npuc_status npuc__prefix_path(npuc_ctx *ctx, npuc_status st, const char *path);

/* Scale and zero point of a clipping range (quantize.c; see quant.h);
 * full: the symmetric full grid (NPUC_GRID_FULL). */
void npuc__quant_params_from_range(float lo, float hi, int bits, int symmetric, int full, float *scale,
                                   float *inv, int32_t *zp);

/* Where npuc__quantize puts one tensor's results: codes, scales,
 * zero_points, deq and err as npuc_quantize_tensor's arguments of those
 * names (deq and err may be NULL); packed NULL, or npuc_packed_size(numel,
 * bits) bytes that get the codes bit-packed exactly as npuc_pack_bits on
 * the whole of codes would, packed by the quantizer's workers while their
 * codes are still in cache (issue 18). */
typedef struct npuc__qout {
    uint8_t *codes;
    uint8_t *packed;
    float *scales;
    int32_t *zero_points;
    float *deq;
    npuc_error_stats *err;
} npuc__qout;

/* npuc_quantize_tensor on w (F32), or, with half set (w unused), on tensor
 * t's F16 or BF16 bytes half (quantize.c): where the one-pass order takes the tensor in
 * units of at most 64K values (contiguous groups: [out, in] or OIHW per
 * channel, groups inside them) each worker widens a unit into its own buffer
 * just before quantizing it; otherwise the whole tensor is widened into scr
 * first.  Every output is that of npuc_quantize_tensor on the F32 values. */
npuc_status npuc__quantize(npuc_ctx *ctx, const npuc_tensor_info *t, const float *w, const void *half,
                           npuc_scratch *scr, const npuc_quant_params *p, const npuc__qout *out);

#endif
