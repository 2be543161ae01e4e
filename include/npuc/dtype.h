/*
 * npuc/dtype.h - element types and their conversions.
 *
 * Every fact about a dtype (byte size, safetensors name, whether it is a
 * float) lives in one traits table in src/core/dtype.c.  Conversions to and
 * from float32 are exact where the target can represent the value and round
 * half to even otherwise, as PyTorch and NumPy do.  All multi-byte values are
 * little-endian in memory buffers handed to or from npuc, whatever the file
 * stored (readers convert big-endian data on load).
 *
 * Example (compiled by tests/cli/c_api.sh):
 *     float f[4]; uint16_t h[4];
 *     npuc_convert(h, NPUC_DTYPE_F16, f, NPUC_DTYPE_F32, 4);
 */
#ifndef NPUC_DTYPE_H
#define NPUC_DTYPE_H

#include "api.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Values are pinned. */
typedef enum npuc_dtype {
    NPUC_DTYPE_F64 = 0,
    NPUC_DTYPE_F32 = 1,
    NPUC_DTYPE_F16 = 2,
    NPUC_DTYPE_BF16 = 3,
    NPUC_DTYPE_F8_E4M3 = 4, /* OCP E4M3FN: no infinities, 0x7f/0xff are NaN, max 448 */
    NPUC_DTYPE_F8_E5M2 = 5, /* OCP E5M2: IEEE-like, max 57344 */
    NPUC_DTYPE_I64 = 6,
    NPUC_DTYPE_I32 = 7,
    NPUC_DTYPE_I16 = 8,
    NPUC_DTYPE_I8 = 9,
    NPUC_DTYPE_U8 = 10,
    NPUC_DTYPE_BOOL = 11,
    NPUC_DTYPE_U16 = 12,
    NPUC_DTYPE_U32 = 13,
    NPUC_DTYPE_U64 = 14,
    NPUC_DTYPE_COUNT = 15
} npuc_dtype;

/* Bytes per element; 0 for an invalid dtype. */
NPUC_API size_t npuc_dtype_size(npuc_dtype dt);
/* The safetensors spelling ("F32", "BF16", "F8_E4M3", "BOOL", ...); "?" if invalid. */
NPUC_API const char *npuc_dtype_name(npuc_dtype dt);
/* Parses a safetensors spelling (case-sensitive) or a lower-case alias
 * ("f32", "float32", "f16", "half", "bf16"). Returns 0 on success, -1 if unknown. */
NPUC_API int npuc_dtype_parse(const char *s, npuc_dtype *out);
/* 1 for floating-point dtypes (F64 F32 F16 BF16 F8_*), else 0. */
NPUC_API int npuc_dtype_is_float(npuc_dtype dt);

/* Scalar conversions (round half to even on narrowing; NaN stays NaN;
 * values beyond a format's range become +-Inf, or NaN for E4M3 which has no Inf). */
NPUC_API float npuc_f16_to_f32(uint16_t h);
NPUC_API uint16_t npuc_f32_to_f16(float f);
NPUC_API float npuc_bf16_to_f32(uint16_t h);
NPUC_API uint16_t npuc_f32_to_bf16(float f);
NPUC_API float npuc_e4m3_to_f32(uint8_t v);
NPUC_API uint8_t npuc_f32_to_e4m3(float f);
NPUC_API float npuc_e5m2_to_f32(uint8_t v);
NPUC_API uint8_t npuc_f32_to_e5m2(float f);

/* Converts n elements from src (of dtype sdt) to dst (of dtype ddt).  Buffers
 * may be unaligned; they must not overlap.  Integer targets round half to even
 * and saturate; NaN becomes 0 for integer targets.  Returns 0, or -1 if a
 * dtype is invalid. */
NPUC_API int npuc_convert(void *dst, npuc_dtype ddt, const void *src, npuc_dtype sdt, size_t n);

#ifdef __cplusplus
}
#endif
#endif
