/*
 * calib_out_error.h - the output error of a compressed weight over its
 * calibration data (library-private; docs/calibration.md#output-error).
 *
 * The weight error says how far W' is from W; what a layer hands on is
 * W X, so the figure that predicts the damage is the relative output error
 *     ||(W - W') X^T|| / ||W X^T||
 * over the calibration rows X [N, K] of the weight (W.input), or, when the
 * file holds only W.hessian = X^T X, the same from the Hessian:
 * ||D X^T||^2 = tr(D H D^T).  W and W' are viewed as [channels, K] in the
 * weight's reduction order (npuc_layout_view: element (c, j) at
 * ((j / inner) * C + c) * inner + j % inner), the order calibration files
 * use.  Used by the quantize pass (quantize_model.c) and by npuc report
 * (src/report/compare.c), which both hold W and W' as floats.
 */
#ifndef NPUC_CALIB_OUT_ERROR_H
#define NPUC_CALIB_OUT_ERROR_H

#include "npuc_internal.h"

/* The context's thread count, all cores for 0 (calib_file.c). */
int npuc__calib_threads(npuc_ctx *ctx);

/* 1 when the calibration file holds W.input for `weight`, else 0
 * (calib_file.c). */
int npuc__calib_has_input(const npuc_calib *c, const char *weight);

/* Receives rows x K values of W.input converted to F64 (row-major), in row
 * order; a status other than NPUC_OK stops the reading. */
typedef npuc_status (*npuc__calib_rows_fn)(void *u, const double *X, uint64_t rows);

/* Streams W.input of `weight` in chunks of the handle's chunk_rows (at most
 * 16 MiB of F64 by default) to fn, after checking its shape ends in K
 * (NPUC_ERR_FORMAT naming the file and tensor otherwise, or for NaN/Inf).
 * *n receives the row count.  *found is 0 and nothing is called when the
 * file has no W.input (calib_file.c). */
npuc_status npuc__calib_input_rows(npuc_ctx *ctx, npuc_calib *c, const char *weight, uint64_t K,
                                   npuc__calib_rows_fn fn, void *u, double *n, int *found);

/* Measures the output error of tensor t between w (its original values)
 * and wq (the values the compressed file holds), t->numel floats each, over
 * the calibration data c holds for t->name: W.input when present, else
 * W.hessian.  On success with data, fills r->has_out_error, out_e2, out_y2,
 * out_rel_error (sqrt(e2 / y2); 0 when both are 0, +inf when only y2 is) and
 * the extra "calib_rows", and sets *why to NULL.  Without data (no W.input
 * or W.hessian; W.input_sq alone cannot give it) or without a channel axis
 * (layout NONE), r is untouched and *why says why in a short static phrase
 * for the record's note.  Errors: what the calibration file's reader
 * reports (NPUC_ERR_FORMAT for a shape that does not end in K...),
 * NPUC_ERR_NOMEM, NPUC_ERR_VALUE for a W.hessian that cannot be factored
 * even after a Gershgorin shift.  Runs on the context's threads with
 * single-threaded BLAS over fixed tiles of channels, so the figures do not
 * depend on -j. */
npuc_status npuc__out_error_measure(npuc_ctx *ctx, npuc_calib *c, const npuc_tensor_info *t, const float *w,
                                    const float *wq, npuc_tensor_record *r, const char **why);

/* As npuc__out_error_measure, with channel k of the error weighed by
 * chan_w[k] >= 0 (C values; NULL: all 1): r->out_e2 receives
 * sum_k chan_w[k] ||D_k X^T||^2 (r->out_y2 stays unweighted, so
 * r->out_rel_error mixes both: read out_e2), *rows (may be NULL) the
 * number of calibration rows. */
npuc_status npuc__out_error_measure_w(npuc_ctx *ctx, npuc_calib *c, const npuc_tensor_info *t, const float *w,
                                      const float *wq, const double *chan_w, npuc_tensor_record *r, double *rows,
                                      const char **why);

/* The loss sensitivity of weight's C output channels, from the file's
 * "<weight>.output_grad_sq" ([C], or any shape of C values; any float,
 * finite and >= 0: the mean over calibration rows of the squared
 * derivative of the loss, summed over the batch, with respect to the
 * channel's output) into g.  *found 0 when the file has none;
 * NPUC_ERR_FORMAT naming the file and tensor for a wrong count, NaN/Inf or
 * a negative value (calib_file.c). */
npuc_status npuc__calib_output_grad(npuc_ctx *ctx, npuc_calib *c, const char *weight, uint64_t C, double *g,
                                    int *found);

#endif
