/*
 * npuc/compare.h - comparing two weight files tensor by tensor: what changed
 * and what it cost, as the same npuc_summary every pass fills (record.h), so
 * `npuc report` writes it in any report format (report.h).
 *
 * Either file may be a plain safetensors or HDF5 file or an npuc artifact in
 * either format; artifact tensors are decoded with the decoders `npuc
 * decompress` uses (quant, lowrank, ...), so a compressed tensor is compared
 * by value with its original and costs the bytes of all its stored parts.
 * Tensors are matched by name:
 *
 *   in both, same shape   KEPT when the stored bytes are identical; else the
 *                         action of the encoding (quant and fake_quant:
 *                         QUANTIZED, lowrank: FACTORED, ...) or, between two
 *                         dense files, what the values show: more zeros ->
 *                         PRUNED (SPARSIFIED when every group of 4 along the
 *                         reduction axis keeps at most 2), another float dtype
 *                         -> QUANTIZED (scheme "f16"...), a BatchNorm of the
 *                         original gone -> FOLDED for conv/linear weights and
 *                         biases, otherwise MODIFIED; with the element-wise
 *                         error (npuc_error_stats) and, optionally, histograms
 *   in both, other shape  PRUNED (structured): parameters before and after, no
 *                         element-wise error, the new shape in the note
 *   only in the original  REMOVED (folded BatchNorm statistics, pruned layers)
 *   only in the other     CREATED (a bias made by folding), listed after the
 *                         tensor it follows in that file
 *
 * With o->calib, records also carry the output error over that file's
 * calibration rows (record.h).  Records come in the original's file order.  Non-finite values are left out
 * of the error sums and reported as summary warnings; an encoding this npuc
 * cannot decode is listed without an error figure and with a warning.
 *
 * Example (compiled by tests/cli/c_api.sh):
 *     npuc_compare_opts o = npuc_compare_opts_defaults();
 *     npuc_summary s;
 *     if (npuc_compare_models(ctx, orig, compressed, &o, &s) == NPUC_OK) {
 *         npuc_report_write(ctx, stdout, NPUC_REPORT_TEXT, &s, NULL);
 *         npuc_summary_free(&s);
 *     }
 */
#ifndef NPUC_COMPARE_H
#define NPUC_COMPARE_H

#include "api.h"

#include "model.h"
#include "record.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct npuc_compare_opts {
    int histograms;   /* fill each measured record's hist (default 1) */
    const char *calib; /* a calibration file (docs/calibration.md), or NULL (default): each
                          tensor compared raw or as a product of factors for which it holds
                          W.input or W.hessian also gets its relative output error
                          ||(W - W')X|| / ||WX|| (record.h out_rel_error); others get none */
} npuc_compare_opts;

NPUC_API npuc_compare_opts npuc_compare_opts_defaults(void);

/* Compares every tensor of orig with its namesake in compressed and fills
 * *out (pass "compare", totals computed).  Peak memory is about four times
 * the largest tensor as float32.  Errors: NPUC_ERR_FORMAT for a malformed
 * artifact description, NPUC_ERR_IO / NPUC_ERR_NOMEM; on failure *out is
 * empty.  On success the caller frees *out with npuc_summary_free. */
NPUC_API npuc_status npuc_compare_models(npuc_ctx *ctx, npuc_model *orig, npuc_model *compressed,
                                const npuc_compare_opts *o, npuc_summary *out);

#ifdef __cplusplus
}
#endif
#endif
