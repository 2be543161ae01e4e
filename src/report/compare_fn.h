/*
 * compare_fn.h - comparing what an exact transform promises to preserve
 * (library-private; used by compare.c).
 *
 * Comparing a folded or factored file tensor by tensor against its original
 * measures the wrong thing: a BatchNorm fold rescales every output channel
 * (W' = W s), so W' against W reads -19 dB for a fold that is exact, and a
 * factored tensor is not stored under its own name at all.  What such a
 * transform keeps is a function, and that is what is compared:
 *
 *   fold-bn   the folded layer against conv-then-BatchNorm computed from the
 *             ORIGINAL's stored statistics: W' against W * s along the
 *             output-channel axis, b' against (b - mean) * s + beta (b = 0
 *             when the layer had no bias), s = gamma / sqrt(var + eps).  The
 *             pairs come from the folded file's "npuc.bnfold" record
 *             (docs/fold-bn.md; src/passes/bnfold/bnfold_record.c), never
 *             from guessing; the BatchNorm tensors it names are accounted as
 *             folded.  Without a usable record the comparison stays raw and
 *             the report says so (compare_fold.c).
 *   lowrank   the product of the factors against the original: an artifact
 *             entry is decoded by the lview already; factors "<name>.lr_a",
 *             "<name>.lr_b" stored without an entry (the "npuc" metadata lost
 *             on the way) are multiplied here (compare_factors.c).
 *
 * Each record says which comparison it holds in npuc_tensor_record.compared.
 */
#ifndef NPUC_COMPARE_FN_H
#define NPUC_COMPARE_FN_H

#include "codecs/decode_entry.h"

/* The values of npuc_tensor_record.compared. */
#define NPUC__CMP_RAW "raw"
#define NPUC__CMP_CONV_BN "function: conv+bn"
#define NPUC__CMP_FACTORS "product of factors"

/* One recorded fold, resolved in both views (indices into a.t / b.t). */
typedef struct npuc__cmp_fold {
    const char *conv, *bn;      /* names, borrowed from the record */
    long conv_a, conv_b;        /* the producer weight in the original / the folded file */
    long bias_a, bias_b;        /* its bias: -1 in the original when the fold created it */
    long stats[5];              /* gamma, beta, mean, var, count in the original, -1 when absent */
    npuc_layout layout;         /* the producer's layout as folded */
    int groups;
    size_t channels;
    double eps;
    double *scale, *shift;      /* per channel, from the original's statistics (owned) */
} npuc__cmp_fold;

typedef struct npuc__cmp_folds {
    json_t *record;             /* the parsed "npuc.bnfold" entry, or NULL */
    npuc__cmp_fold *f;          /* the usable folds */
    size_t n;
    char raw_why[200];          /* why some recorded fold, or a BatchNorm that is gone, is
                                   compared raw; "" when every fold is compared as a function */
} npuc__cmp_folds;

/* What an original tensor is to a fold. */
typedef enum npuc__fold_part {
    NPUC__FOLD_NONE = 0, NPUC__FOLD_WEIGHT, NPUC__FOLD_BIAS, NPUC__FOLD_STAT
} npuc__fold_part;

/* Reads the folded view b's "npuc.bnfold" record and resolves each pair in
 * the original view a, reading the original's BatchNorm statistics.  A pair
 * that cannot be resolved (a tensor missing, old record without tensor
 * names, channel counts that disagree, var + eps <= 0) is left out and named
 * in raw_why; so is the case of BatchNorm tensors gone without any record.
 * Fails only with NPUC_ERR_NOMEM or a read error. */
npuc_status npuc__cmp_folds_open(npuc_ctx *ctx, npuc__lview *a, const npuc__lview *b, npuc__cmp_folds *out);
void npuc__cmp_folds_free(npuc__cmp_folds *f);
/* The fold original tensor ia takes part in (*part says how), or -1. */
long npuc__cmp_fold_of_orig(const npuc__cmp_folds *f, size_t ia, npuc__fold_part *part);
/* The fold whose created bias is tensor jb of the folded view, or -1. */
long npuc__cmp_fold_created_bias(const npuc__cmp_folds *f, size_t jb);
/* Measures fb (the folded file's values of the weight, or of the bias, of
 * fold k) against what conv-then-BatchNorm gives: fa holds the original's
 * weight values for a weight, is ignored for a bias (the original's bias,
 * if any, is read from view a).  ref_f32 (n floats) receives the reference
 * rounded to float32, for the histograms.  Fills r->err and r->has_error. */
npuc_status npuc__cmp_fold_measure(npuc_ctx *ctx, const npuc__cmp_folds *f, size_t k, npuc__fold_part part,
                                   npuc__lview *a, const float *fa, const float *fb, uint64_t n, float *ref_f32,
                                   npuc_tensor_record *r);

/* Factors stored without an entry.  For each tensor i of the original that
 * the other file lacks but holds as "<name>.lr_a" and "<name>.lr_b" whose
 * shapes are those of a factorisation of it (npuc_lowrank_factor_shapes),
 * sets fac[i] = the rank, else 0, and marks both factors in used_b[]. */
npuc_status npuc__cmp_factors_find(npuc_ctx *ctx, const npuc__lview *a, const npuc__lview *b, int64_t *fac,
                                   unsigned char *used_b);
/* Fills record r for original tensor i stored as factors of rank `rank` in
 * b: the product of the factors against the original values fa (n floats),
 * bytes of both factors, action FACTORED, scheme "r=N".  out receives the
 * product (n floats). */
npuc_status npuc__cmp_factors_measure(npuc_ctx *ctx, const npuc__lview *a, npuc__lview *b, size_t i, int64_t rank,
                                      const float *fa, float *out, npuc_tensor_record *r);

#endif
