/*
 * budget_alloc.h - mixed precision under a budget: --target-size and
 * --target-bpw (library-private; quantize_model.c is the caller).
 *
 * For every tensor the quantize pass may choose freely, the allocator
 * measures each candidate scheme with the production quantizer (the same
 * rounding and range search as the run that follows), keeps the tensor's
 * relative squared output error ||(W - W')X||^2 / ||WX||^2 over its
 * calibration data (cal, W.input or W.hessian) or, without data, its
 * relative squared weight error ||W - W'||^2 / ||W||^2 as its distortion and
 * the bytes the per-tensor line counts (codes, scales, zero points) as its
 * cost, and chooses one scheme per tensor with npuc__budget_solve
 * (budget_solve.h) so that the budget holds and the summed distortion is
 * least.  Tensors the caller pinned (--layer-bits, the 8-bit edge rule, a
 * recipe override) keep their scheme and their bytes are taken off the
 * budget first.  docs/budget.md states the objective and what it assumes.
 */
#ifndef NPUC_BUDGET_ALLOC_H
#define NPUC_BUDGET_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#include "npuc/calib.h"
#include "npuc/quant.h"

typedef struct npuc__budget_req {
    uint64_t target_size;   /* bytes of the output file; 0: none */
    double target_bpw;      /* bits per weight over the quantized tensors; 0: none */
    const char *candidates; /* "int4/g32,uint8/ch,..."; NULL: the default set */
    const char *plan_out;   /* where to write the plan JSON; NULL: nowhere */
    int overwrite;          /* plan_out may replace an existing file */
    int calibrated;         /* a calibration file is given (for the plan's text) */
    uint64_t overhead;      /* target_size only, without file_size: bytes of the
                               output besides the payloads of the quantized
                               tensors (header, other tensors), as the caller
                               estimates them */
    /* target_size: the exact size of the output file when every tensor i
     * takes scheme p[i] (free and pinned alike), or NULL when the output's
     * size cannot be told before it is written (overhead is then used). */
    npuc_status (*file_size)(void *u, const npuc_quant_params *p, const int *gguf, uint64_t *size);
    void *file_size_user;
    uint64_t *file_bytes;   /* out, may be NULL: the exact file size of the
                               choice (file_size given), else 0 */
    /* A GGUF output: the candidates are ggml types (ids, formats/gguf),
     * measured with the GGUF writer's quantizers, and gguf[i] holds tensor
     * i's type (in: the pinned tensors' types; out: the free tensors'
     * choice); p is then left as it is.  NULL: npuc schemes. */
    int *gguf;
    const char *imatrix; /* llama.cpp importance matrix, or NULL */
    const char *cache;   /* --budget-cache FILE, or NULL */
    const char *calib_path; /* the calibration file (the cache's key), or NULL */
    char **curve_json;   /* out, may be NULL: the summary's budget_json (npuc/record.h) */
} npuc__budget_req;

/* Per tensor i of m: quantize[i] says whether the pass quantizes it,
 * pinned[i] whether its scheme is fixed; p[i] holds the scheme (in: the
 * pinned or planned one; out: the chosen one) and note[i] gets the reason.
 * NPUC_ERR_ARG for a bad candidate list or an infeasible budget (the message
 * names the smallest reachable size). */
npuc_status npuc__budget_choose(npuc_ctx *ctx, npuc_model *m, npuc_calib *cal, const npuc__budget_req *rq,
                                const int *quantize, const int *pinned, npuc_quant_params *p, char (*note)[128]);

/* --plan FILE: the schemes of an npuc.plan/1 document (--plan-out) for
 * exactly the free tensors (quantize[i] and not pinned[i]) of this run;
 * NPUC_ERR_FORMAT for a malformed plan, NPUC_ERR_ARG for one that does not
 * fit this model and these flags. */
npuc_status npuc__budget_apply_plan(npuc_ctx *ctx, npuc_model *m, const char *plan, const int *quantize,
                                    const int *pinned, npuc_quant_params *p, char (*note)[128]);

/* 0 when list is a valid --candidates list; else -1 with the reason in why. */
int npuc__budget_check_candidates(const char *list, char *why, size_t n);

/* Parses a size: digits with an optional K, M or G suffix (powers of 1024)
 * or a plain byte count; 0 on success. */
int npuc__budget_parse_size(const char *s, uint64_t *out);

#endif
