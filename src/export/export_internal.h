/*
 * export_internal.h - what the exporters for other toolchains share
 * (library-private): the calibration document `npuc calibrate` writes, read
 * back and checked (calib_doc.c), and the per-tensor encodings of an npuc
 * artifact (aimet_params.c) that the AIMET writer (aimet_encodings.c) turns
 * into JSON.  The TensorRT cache (trt_cache.c) needs only the first.
 */
#ifndef NPUC_EXPORT_INTERNAL_H
#define NPUC_EXPORT_INTERNAL_H

#include <stdint.h>

#include "npuc_internal.h"

/* One tensor's integer grid: n encodings (1 per tensor, one per channel, or
 * channels x blocks in row-major order), each x = (q - zp) * scale with q in
 * [0, 2^bits - 1] (asymmetric) or [-(2^(bits-1) - 1), 2^(bits-1) - 1]
 * (symmetric, zp = 0), exactly as npuc quantizes (quant.h). */
typedef struct npuc__grid {
    char *name;
    int bits, symmetric;
    int per_channel;     /* several encodings along a channel axis */
    uint64_t block_size; /* > 0: per block of this many input channels */
    uint64_t n;
    float *scale;
    int32_t *zp;
} npuc__grid;

typedef struct npuc__grids {
    npuc__grid *v;
    size_t n;
    int bits, symmetric; /* of the calibration document; -1 for params */
} npuc__grids;

void npuc__grids_free(npuc__grids *g);
/* Appends an empty grid named name with n encodings (scale, zp allocated). */
npuc__grid *npuc__grids_add(npuc_ctx *ctx, npuc__grids *g, const char *name, uint64_t n);

/* Reads an npuc.calibration/1 document: one grid per activation.  Every
 * value is checked (a hand-edited file is input like any other):
 * NPUC_ERR_FORMAT naming the file and the activation. */
npuc_status npuc__calib_doc_read(npuc_ctx *ctx, const char *path, npuc__grids *out);
/* The grids of every "quant" entry of the artifact at path; entries AIMET
 * cannot express are left out with a warning on ctx. */
npuc_status npuc__artifact_grids(npuc_ctx *ctx, const char *path, const char *version, npuc__grids *out);

/* Writes text (n bytes) to path atomically. */
npuc_status npuc__export_write(npuc_ctx *ctx, const char *path, int overwrite, const char *text, size_t n);

#endif
