/*
 * build_info.c - npuc_build_info_json (npuc/build.h): the build's facts, read
 * from the same places the library uses them (the format and codec tables,
 * the kernel dispatcher, the linked libraries' own version calls), so the
 * answer cannot go stale.  The git description and the build type are taken
 * when CMake configures (CMakeLists.txt sets them on this file only).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <H5public.h>
#include <jansson.h>
#include <lapacke.h>
#include <libfyaml.h>
#include <zlib.h>

#include "codecs/codec.h"
#include "core/format_row.h"
#include "kernels/npuc_kernels.h"
#include "npuc_internal.h"

#ifndef NPUC_GIT_DESCRIBE
#define NPUC_GIT_DESCRIBE "unknown"
#endif
#ifndef NPUC_BUILD_TYPE
#define NPUC_BUILD_TYPE "unknown"
#endif

char *openblas_get_config(void); /* OpenBLAS's cblas.h; declared here to keep CBLAS out */
char *openblas_get_corename(void);

#define STR2(x) #x
#define STR(x) STR2(x)

/* The SIMD levels the kernels are built for and those this CPU runs (the
 * dispatcher's own tests, kernels/x86/). */
static json_t *simd_json(void) {
    json_t *compiled = json_array(), *detected = json_array();
    json_array_append_new(compiled, json_string("ref"));
    json_array_append_new(detected, json_string("ref"));
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    json_array_append_new(compiled, json_string("avx2"));
    json_array_append_new(compiled, json_string("avx512"));
    if (npuc_kernels_avx2()) json_array_append_new(detected, json_string("avx2"));
    if (npuc_kernels_avx512()) json_array_append_new(detected, json_string("avx512"));
#endif
    return json_pack("{s:o, s:o, s:s}", "compiled", compiled, "detected", detected, "selected", npuc_kernels()->name);
}

static json_t *formats_json(void) {
    size_t n;
    const npuc__format_row *const *rows = npuc__format_table(&n);
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *ext = json_array();
        for (const char *const *e = rows[i]->ext; e && *e; e++) json_array_append_new(ext, json_string(*e));
        json_array_append_new(a, json_pack("{s:s, s:o, s:b}", "name", rows[i]->name, "extensions", ext, "write",
                                           rows[i]->writer != NULL));
    }
    return a;
}

static json_t *encodings_json(void) {
    json_t *a = json_array();
    for (size_t i = 0; i < npuc__codec_count; i++) json_array_append_new(a, json_string(npuc__codecs[i]->name));
    return a;
}

npuc_status npuc_build_info_json(npuc_ctx *ctx, char **out) {
    *out = NULL;
    lapack_int lmaj = 0, lmin = 0, lpatch = 0;
    LAPACKE_ilaver(&lmaj, &lmin, &lpatch);
    char lapack[48], hdf5[32], openmp[16];
    snprintf(lapack, sizeof lapack, "%d.%d.%d", (int)lmaj, (int)lmin, (int)lpatch);
    snprintf(hdf5, sizeof hdf5, "%d.%d.%d", H5_VERS_MAJOR, H5_VERS_MINOR, H5_VERS_RELEASE);
#ifdef _OPENMP
    snprintf(openmp, sizeof openmp, "%d", _OPENMP); /* the spec date, 201511 = OpenMP 4.5 */
#else
    snprintf(openmp, sizeof openmp, "none");
#endif
    const char *blas = openblas_get_config();
    const char *core = openblas_get_corename(); /* the kernels in use (src/core/blas_core.c) */
    json_t *libs = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "hdf5", hdf5, "zlib", zlibVersion(), "lapack",
                             lapack, "openblas", blas ? blas : "unknown", "openblas_core", core ? core : "unknown",
                             "jansson", jansson_version_str(), "libfyaml", fy_library_version());
    json_t *doc = json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:o, s:o, s:o}", "schema", "npuc.version/1", "version",
                            npuc_version(), "git", NPUC_GIT_DESCRIBE, "build_type", NPUC_BUILD_TYPE, "simd",
                            simd_json(), "openmp", openmp, "libraries", libs, "formats", formats_json(),
                            "encodings", encodings_json());
    char *s = doc ? json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(doc);
    if (!s) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    *out = s;
    return NPUC_OK;
}
