/*
 * npuc/check.h - does a model hang together?  Checks a weight file can pass
 * although no single tensor is malformed.
 *
 * npuc_model_check_consistency asks whether every tensor attached to a
 * channel set has the set's extent, wherever the file's own evidence says
 * they are attached: a weight and its bias, the four tensors of a BatchNorm,
 * the BatchNorm that follows a layer, a depthwise conv passing channels
 * through and the next layer's input axis, where a Keras model_config or
 * nn.Sequential naming (0.weight, 1.running_mean, 3.weight) says which layer
 * follows which.  Storage order alone never accuses a file.  A pruned model
 * with a BatchNorm left at the old channel count fails it; `npuc validate`
 * runs it, and every pass runs the same check on its output before
 * publishing it.
 *
 * Example (compiled by tests/cli/c_api.sh):
 *     if (npuc_model_check_consistency(ctx, m) != NPUC_OK)
 *         fprintf(stderr, "%s\n", npuc_ctx_errmsg(ctx));
 */
#ifndef NPUC_CHECK_H
#define NPUC_CHECK_H

#include "api.h"

#include "model.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Checks the channel extents of m (an npuc artifact in its logical view:
 * each encoded tensor with its recorded shape).  Returns NPUC_OK, or
 * NPUC_ERR_VALUE with a one-line message naming the file, both tensors,
 * their shapes and extents and the evidence that attaches them;
 * NPUC_ERR_FORMAT for a malformed artifact description; NPUC_ERR_NOMEM.
 * Reads names, shapes and metadata only, no payload. */
NPUC_API npuc_status npuc_model_check_consistency(npuc_ctx *ctx, npuc_model *m);

#ifdef __cplusplus
}
#endif
#endif
