/*
 * trt_cache.c - a TensorRT calibration cache from a calibration document
 * (npuc_trt_cache_export, npuc/calib.h).
 *
 * Layout (what IInt8EntropyCalibrator2::writeCalibrationCache hands out and
 * readCalibrationCache takes back): a text file, the header line
 * "TRT-<version>-EntropyCalibration2" (version: the TensorRT version as
 * digits, 8601 for 8.6.1), then one line "<tensor name>: <hex>" per
 * activation, hex being the 8 lowercase hex digits of the IEEE-754 float32
 * scale's bits, most significant first (the big-endian bytes).  The scale is
 * amax / 127, the symmetric int8 step; npuc's document already holds it as
 * float32 (hi / 127 in float, act_calib.c), so its bits are written as is.
 * Every line ends with '\n'.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export_internal.h"

npuc_status npuc_trt_cache_export(npuc_ctx *ctx, const char *calib_path, const char *version, const char *out,
                                  int overwrite) {
    if (!calib_path || !version || !out) return npuc_fail(ctx, NPUC_ERR_ARG, "TensorRT cache: NULL argument");
    size_t vl = strlen(version);
    if (vl == 0 || vl > 16 || strspn(version, "0123456789") != vl)
        return npuc_fail(ctx, NPUC_ERR_ARG, "TensorRT cache version '%s': 1 to 16 digits (8601 for 8.6.1)", version);
    npuc__grids g;
    npuc_status st = npuc__calib_doc_read(ctx, calib_path, &g);
    if (st != NPUC_OK) return st;
    char *text = NULL;
    size_t cap = 64, len = 0;
    if (g.bits != 8 || !g.symmetric) {
        st = npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: a TensorRT cache holds symmetric 8-bit scales (calibrate "
                       "without --bits or --asymmetric)", calib_path);
        goto done;
    }
    for (size_t i = 0; i < g.n; i++) {
        if (g.v[i].n != 1 || g.v[i].per_channel) {
            st = npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: activation '%s': a TensorRT cache holds one scale per "
                           "tensor (calibrate without --per-channel)", calib_path, g.v[i].name);
            goto done;
        }
        if (strpbrk(g.v[i].name, "\r\n")) {
            st = npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: activation '%s': a line break in the name cannot be "
                           "written to a TensorRT cache", calib_path, g.v[i].name);
            goto done;
        }
        cap += strlen(g.v[i].name) + 16;
    }
    text = malloc(cap);
    if (!text) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        goto done;
    }
    len += (size_t)snprintf(text + len, cap - len, "TRT-%s-EntropyCalibration2\n", version);
    for (size_t i = 0; i < g.n; i++) {
        uint32_t u;
        memcpy(&u, &g.v[i].scale[0], sizeof u);
        len += (size_t)snprintf(text + len, cap - len, "%s: %08x\n", g.v[i].name, (unsigned)u);
    }
    st = npuc__export_write(ctx, out, overwrite, text, len);
done:
    free(text);
    npuc__grids_free(&g);
    return st;
}
