/*
 * pass_util.h - helpers shared by the pass drivers (library-private): tensor
 * selection rules, "REGEX=VALUE" rule lists, thread counts, scratch buffers.
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

/* Float32 view of tensor i of m: the mapped bytes themselves when they are
 * aligned F32, else a converted copy in scr.  prefault: map a large mapped
 * tensor's pages in with one call first (the backend's prefetch hook:
 * MADV_POPULATE_READ), for passes that read it several times; a kernel
 * without it takes the page faults. */
npuc_status npuc__load_f32(npuc_ctx *ctx, npuc_model *m, size_t i, npuc_scratch *scr, int prefault,
                           const float **out);

/* Scale and zero point of a clipping range (quantize.c; see quant.h). */
void npuc__quant_params_from_range(float lo, float hi, int bits, int symmetric, float *scale,
                                   float *inv, int32_t *zp);

#endif
