/*
 * export_hook.h - the quantize pass's hook into the AIMET exporter
 * (aimet_hook.c); library-private.
 */
#ifndef NPUC_EXPORT_HOOK_H
#define NPUC_EXPORT_HOOK_H

#include "npuc_internal.h"

/* Before any output: out (may be NULL: no export) must be writable without
 * -f, and act (may be NULL) a valid calibration document; act without out
 * is NPUC_ERR_ARG. */
npuc_status npuc__aimet_hook_check(npuc_ctx *ctx, const char *act, const char *out, int overwrite);
/* After the artifact is published: writes the encodings (nothing when out
 * is NULL); tensors left out become warnings of sum. */
npuc_status npuc__aimet_hook_write(npuc_ctx *ctx, const char *act, const char *artifact, const char *version,
                                   const char *out, int overwrite, npuc_summary *sum);

#endif
