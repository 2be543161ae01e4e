/*
 * bnfold_record.c - what a fold leaves behind for whoever checks it later.
 *
 * fold-bn removes the BatchNorm tensors, so the output alone cannot say what
 * the folded layer should equal.  Each pair of the "npuc.bnfold" entry
 * (docs/fold-bn.md) therefore records, besides the producer, its bias and
 * eps, everything needed to recompute the fold from the ORIGINAL file:
 *
 *   "gamma", "beta", "mean", "var"   the BatchNorm's tensor names (null when
 *                                    absent: gamma 1, beta 0), "count" the
 *                                    PyTorch num_batches_tracked if any;
 *   "layout", "axis", "groups"       the producer's layout as folded, its
 *                                    output-channel axis and the groups of a
 *                                    grouped transposed conv;
 *   "channels"                       the BatchNorm's channel count.
 *
 * `npuc report ORIGINAL FOLDED` reads them (src/report/compare_fold.c) and
 * compares W' with W * s and b' with (b - mean) * s + beta.  This only reads
 * the final plan: how pairs were chosen is bnfold_pairs.c's business.
 */
#include <jansson.h>

#include "passes/bnfold/bnfold_internal.h"

static json_t *tensor_name(npuc_model *m, int64_t idx) {
    if (idx < 0 || (size_t)idx >= npuc_model_count(m)) return json_null();
    return json_string(npuc_model_tensor(m, (size_t)idx)->name);
}

int npuc__bnfold_record_pair(json_t *o, npuc_model *m, const npuc_bnfold_pair *x) {
    const npuc_tensor_info *t = npuc_model_tensor(m, x->conv);
    json_t *f = json_pack("{s:o, s:o, s:o, s:o, s:o, s:s, s:i, s:i, s:I}", "gamma", tensor_name(m, x->bn.gamma),
                          "beta", tensor_name(m, x->bn.beta), "mean", tensor_name(m, x->bn.mean), "var",
                          tensor_name(m, x->bn.var), "count", tensor_name(m, x->bn.count), "layout",
                          npuc_layout_name(t->layout), "axis", npuc_layout_out_axis(t->layout, t->rank), "groups",
                          x->groups > 1 ? x->groups : 1, "channels", (json_int_t)x->bn.channels);
    if (!f) return -1;
    int rc = json_object_update(o, f);
    json_decref(f);
    return rc;
}
