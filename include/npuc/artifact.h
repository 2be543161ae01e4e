/*
 * npuc/artifact.h - checking an npuc artifact's description against its
 * stored tensors.
 *
 * An artifact's "npuc" metadata entry (docs/artifact.md) says how each
 * encoded tensor is rebuilt from stored parts.  npuc_artifact_check runs the
 * checks `npuc decompress` runs before it writes anything (every entry's
 * encoding known, its parts present and of consistent dtypes and sizes,
 * nested entries without cycles, no part claimed twice) and, with decode,
 * rebuilds every encoded tensor once, one at a time, counting NaN and Inf
 * among the rebuilt values.  `npuc validate` uses it.
 */
#ifndef NPUC_ARTIFACT_H
#define NPUC_ARTIFACT_H

#include "api.h"

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct npuc_artifact_info {
    size_t encoded;          /* tensors the "npuc" entry encodes (0: not an artifact) */
    size_t decoded;          /* with decode: tensors rebuilt (= encoded) */
    uint64_t nonfinite;      /* with decode: NaN or Inf values among the rebuilt tensors */
    char first_nonfinite[256]; /* the first rebuilt tensor holding one, or "" */
} npuc_artifact_info;

/* Checks m's "npuc" entry (a plain file passes with encoded = 0).  Errors:
 * NPUC_ERR_FORMAT for a malformed or inconsistent description,
 * NPUC_ERR_UNSUPPORTED for an encoding this build cannot decode, each naming
 * the file and the tensor; NPUC_ERR_NOMEM.  Memory with decode: the largest
 * rebuilt tensor as float32, plus what its decoder needs. */
NPUC_API npuc_status npuc_artifact_check(npuc_ctx *ctx, npuc_model *m, int decode, npuc_artifact_info *out);

#ifdef __cplusplus
}
#endif
#endif
