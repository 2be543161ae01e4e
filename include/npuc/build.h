/*
 * npuc/build.h - what this build of the library is: its version, the git
 * commit it was built from, the build type, the SIMD kernels compiled in and
 * those the CPU runs, and the versions of the libraries it links, with the
 * formats and artifact encodings its registries hold.  `npuc --version` and
 * `npuc version --json` print it; bug reports quote it.
 *
 * Example (compiled by tests/cli/c_api.sh):
 *     char *doc;
 *     if (npuc_build_info_json(ctx, &doc) == NPUC_OK) {
 *         puts(doc);   // {"schema":"npuc.version/1","version":"0.1.0",...}
 *         free(doc);
 *     }
 */
#ifndef NPUC_BUILD_H
#define NPUC_BUILD_H

#include "api.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The build as one compact JSON document (schema "npuc.version/1",
 * docs/cli.md#npuc-version), malloc'd into *out; the caller frees it with
 * free().  Errors: NPUC_ERR_NOMEM (message in ctx, *out NULL). */
NPUC_API npuc_status npuc_build_info_json(npuc_ctx *ctx, char **out);

#ifdef __cplusplus
}
#endif

#endif
