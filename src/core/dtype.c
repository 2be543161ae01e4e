/*
 * dtype.c - the dtype traits table and element conversions.
 *
 * Narrowing conversions round half to even.  The f16 and bf16 encoders work on
 * the IEEE bit patterns (the classic "add half an ulp minus one plus the lsb"
 * trick); the fp8 encoders go through a generic small-float encoder in double
 * precision, which is exact for every float32 input.  E4M3 follows the OCP
 * "FN" variant that PyTorch's float8_e4m3fn uses: no infinities, overflow and
 * NaN encode as 0x7f.
 */
#include <math.h>
#include <string.h>

#include "npuc_internal.h"

typedef struct dtype_traits {
    const char *name;
    size_t size;
    int is_float;
} dtype_traits;

static const dtype_traits TRAITS[NPUC_DTYPE_COUNT] = {
    [NPUC_DTYPE_F64] = {"F64", 8, 1},
    [NPUC_DTYPE_F32] = {"F32", 4, 1},
    [NPUC_DTYPE_F16] = {"F16", 2, 1},
    [NPUC_DTYPE_BF16] = {"BF16", 2, 1},
    [NPUC_DTYPE_F8_E4M3] = {"F8_E4M3", 1, 1},
    [NPUC_DTYPE_F8_E5M2] = {"F8_E5M2", 1, 1},
    [NPUC_DTYPE_I64] = {"I64", 8, 0},
    [NPUC_DTYPE_I32] = {"I32", 4, 0},
    [NPUC_DTYPE_I16] = {"I16", 2, 0},
    [NPUC_DTYPE_I8] = {"I8", 1, 0},
    [NPUC_DTYPE_U8] = {"U8", 1, 0},
    [NPUC_DTYPE_BOOL] = {"BOOL", 1, 0},
    [NPUC_DTYPE_U16] = {"U16", 2, 0},
    [NPUC_DTYPE_U32] = {"U32", 4, 0},
    [NPUC_DTYPE_U64] = {"U64", 8, 0},
};

static int valid(npuc_dtype dt) { return (unsigned)dt < NPUC_DTYPE_COUNT; }

size_t npuc_dtype_size(npuc_dtype dt) { return valid(dt) ? TRAITS[dt].size : 0; }
const char *npuc_dtype_name(npuc_dtype dt) { return valid(dt) ? TRAITS[dt].name : "?"; }
int npuc_dtype_is_float(npuc_dtype dt) { return valid(dt) && TRAITS[dt].is_float; }

int npuc_dtype_parse(const char *s, npuc_dtype *out) {
    static const struct { const char *alias; npuc_dtype dt; } ALIASES[] = {
        {"f64", NPUC_DTYPE_F64},  {"float64", NPUC_DTYPE_F64}, {"double", NPUC_DTYPE_F64},
        {"f32", NPUC_DTYPE_F32},  {"float32", NPUC_DTYPE_F32}, {"float", NPUC_DTYPE_F32},
        {"f16", NPUC_DTYPE_F16},  {"float16", NPUC_DTYPE_F16}, {"half", NPUC_DTYPE_F16},
        {"bf16", NPUC_DTYPE_BF16}, {"bfloat16", NPUC_DTYPE_BF16},
        {"f8_e4m3", NPUC_DTYPE_F8_E4M3}, {"f8_e5m2", NPUC_DTYPE_F8_E5M2},
        {"i64", NPUC_DTYPE_I64}, {"i32", NPUC_DTYPE_I32}, {"i16", NPUC_DTYPE_I16},
        {"i8", NPUC_DTYPE_I8}, {"u8", NPUC_DTYPE_U8}, {"bool", NPUC_DTYPE_BOOL},
        {"u16", NPUC_DTYPE_U16}, {"u32", NPUC_DTYPE_U32}, {"u64", NPUC_DTYPE_U64},
    };
    for (int i = 0; i < NPUC_DTYPE_COUNT; i++)
        if (strcmp(s, TRAITS[i].name) == 0) { *out = (npuc_dtype)i; return 0; }
    for (size_t i = 0; i < sizeof ALIASES / sizeof ALIASES[0]; i++)
        if (strcmp(s, ALIASES[i].alias) == 0) { *out = ALIASES[i].dt; return 0; }
    return -1;
}

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float npuc_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0) {
        /* zero or subnormal: m * 2^-24, exact in float */
        float v = (float)m * 0x1p-24f;
        return u2f(f2u(v) | sign);
    }
    if (e == 31) return u2f(sign | 0x7f800000u | (m << 13));
    return u2f(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t npuc_f32_to_f16(float f) {
    uint32_t x = f2u(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00 | (uint16_t)((ax >> 13) & 0x1ff);
    if (ax >= 0x477ff000u) return sign | 0x7c00; /* >= 65520 rounds to Inf */
    if (ax < 0x38800000u) {                      /* below 2^-14: f16 subnormal */
        float a = u2f(ax) * 0x1p24f;            /* exact scaling */
        return sign | (uint16_t)nearbyintf(a);   /* 1024 lands on the min normal */
    }
    uint32_t h = ((ax >> 23) - 112) << 10 | ((ax >> 13) & 0x3ff);
    uint32_t rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return sign | (uint16_t)h;
}

float npuc_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t npuc_f32_to_bf16(float f) {
    uint32_t x = f2u(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* Decodes a small float with ebits exponent and mbits mantissa bits. */
static float small_decode(uint8_t v, int ebits, int mbits, int bias, int fn) {
    int sign = v >> (ebits + mbits);
    int e = (v >> mbits) & ((1 << ebits) - 1);
    int m = v & ((1 << mbits) - 1);
    double r;
    if (fn) {
        if (e == (1 << ebits) - 1 && m == (1 << mbits) - 1) return NAN;
    } else if (e == (1 << ebits) - 1) {
        r = m ? NAN : INFINITY;
        return (float)(sign ? -r : r);
    }
    if (e == 0) r = ldexp((double)m, 1 - bias - mbits);
    else r = ldexp(1.0 + ldexp((double)m, -mbits), e - bias);
    return (float)(sign ? -r : r);
}

/* Encodes f with round half to even; fn selects the no-Inf "FN" variant whose
 * only NaN pattern (all ones) also takes overflow. */
static uint8_t small_encode(float f, int ebits, int mbits, int bias, int fn) {
    uint8_t sign = (uint8_t)(signbit(f) ? 1u << (ebits + mbits) : 0);
    int emax_field = fn ? (1 << ebits) - 1 : (1 << ebits) - 2;
    int mmax_at_emax = fn ? (1 << mbits) - 2 : (1 << mbits) - 1;
    uint8_t nan = fn ? (uint8_t)(sign | 0x7f) : (uint8_t)(sign | ((((1 << ebits) - 1) << mbits) | 1));
    uint8_t inf = fn ? nan : (uint8_t)(sign | (((1 << ebits) - 1) << mbits));
    if (isnan(f)) return nan;
    double a = fabs((double)f);
    if (isinf(f)) return inf;
    if (a == 0) return sign;
    double min_normal = ldexp(1.0, 1 - bias);
    if (a < min_normal) {
        double q = nearbyint(ldexp(a, bias - 1 + mbits)); /* units of the subnormal step */
        return (uint8_t)(sign | (uint8_t)q); /* q == 2^mbits encodes the min normal */
    }
    int ex;
    frexp(a, &ex);
    int E = ex - 1;
    double mant = nearbyint((ldexp(a, -E) - 1.0) * (double)(1 << mbits));
    if (mant >= (double)(1 << mbits)) { mant = 0; E++; }
    int field = E + bias;
    if (field > emax_field || (field == emax_field && (int)mant > mmax_at_emax)) return inf;
    return (uint8_t)(sign | (field << mbits) | (int)mant);
}

float npuc_e4m3_to_f32(uint8_t v) { return small_decode(v, 4, 3, 7, 1); }
uint8_t npuc_f32_to_e4m3(float f) { return small_encode(f, 4, 3, 7, 1); }
float npuc_e5m2_to_f32(uint8_t v) { return small_decode(v, 5, 2, 15, 0); }
uint8_t npuc_f32_to_e5m2(float f) { return small_encode(f, 5, 2, 15, 0); }

/* Generic element access through double (floats) or int64/uint64 (integers). */
static double load_d(const unsigned char *p, npuc_dtype dt) {
    switch (dt) {
    case NPUC_DTYPE_F64: { double v; memcpy(&v, p, 8); return v; }
    case NPUC_DTYPE_F32: { float v; memcpy(&v, p, 4); return v; }
    case NPUC_DTYPE_F16: { uint16_t v; memcpy(&v, p, 2); return npuc_f16_to_f32(v); }
    case NPUC_DTYPE_BF16: { uint16_t v; memcpy(&v, p, 2); return npuc_bf16_to_f32(v); }
    case NPUC_DTYPE_F8_E4M3: return npuc_e4m3_to_f32(*p);
    case NPUC_DTYPE_F8_E5M2: return npuc_e5m2_to_f32(*p);
    case NPUC_DTYPE_I64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    case NPUC_DTYPE_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case NPUC_DTYPE_I16: { int16_t v; memcpy(&v, p, 2); return v; }
    case NPUC_DTYPE_I8: return (int8_t)*p;
    case NPUC_DTYPE_U8: return *p;
    case NPUC_DTYPE_BOOL: return *p != 0;
    case NPUC_DTYPE_U16: { uint16_t v; memcpy(&v, p, 2); return v; }
    case NPUC_DTYPE_U32: { uint32_t v; memcpy(&v, p, 4); return v; }
    case NPUC_DTYPE_U64: { uint64_t v; memcpy(&v, p, 8); return (double)v; }
    default: return 0;
    }
}

static double sat(double v, double lo, double hi) {
    if (isnan(v)) return 0;
    v = nearbyint(v);
    return v < lo ? lo : v > hi ? hi : v;
}

static void store_d(unsigned char *p, npuc_dtype dt, double v) {
    switch (dt) {
    case NPUC_DTYPE_F64: memcpy(p, &v, 8); break;
    case NPUC_DTYPE_F32: { float f = (float)v; memcpy(p, &f, 4); break; }
    case NPUC_DTYPE_F16: { uint16_t h = npuc_f32_to_f16((float)v); memcpy(p, &h, 2); break; }
    case NPUC_DTYPE_BF16: { uint16_t h = npuc_f32_to_bf16((float)v); memcpy(p, &h, 2); break; }
    case NPUC_DTYPE_F8_E4M3: *p = npuc_f32_to_e4m3((float)v); break;
    case NPUC_DTYPE_F8_E5M2: *p = npuc_f32_to_e5m2((float)v); break;
    case NPUC_DTYPE_I64: {
        /* 2^63 is exactly representable; anything at or above saturates. */
        double r = sat(v, -0x1p63, 0x1p63);
        int64_t x = r >= 0x1p63 ? INT64_MAX : (int64_t)r;
        memcpy(p, &x, 8);
        break;
    }
    case NPUC_DTYPE_I32: { int32_t x = (int32_t)sat(v, INT32_MIN, INT32_MAX); memcpy(p, &x, 4); break; }
    case NPUC_DTYPE_I16: { int16_t x = (int16_t)sat(v, INT16_MIN, INT16_MAX); memcpy(p, &x, 2); break; }
    case NPUC_DTYPE_I8: { int8_t x = (int8_t)sat(v, INT8_MIN, INT8_MAX); memcpy(p, &x, 1); break; }
    case NPUC_DTYPE_U8: *p = (uint8_t)sat(v, 0, UINT8_MAX); break;
    case NPUC_DTYPE_BOOL: *p = (uint8_t)(v != 0 && !isnan(v)); break;
    case NPUC_DTYPE_U16: { uint16_t x = (uint16_t)sat(v, 0, UINT16_MAX); memcpy(p, &x, 2); break; }
    case NPUC_DTYPE_U32: { uint32_t x = (uint32_t)sat(v, 0, UINT32_MAX); memcpy(p, &x, 4); break; }
    case NPUC_DTYPE_U64: {
        double r = sat(v, 0, 0x1p64);
        uint64_t x = r >= 0x1p64 ? UINT64_MAX : (uint64_t)r;
        memcpy(p, &x, 8);
        break;
    }
    default: break;
    }
}

int npuc_convert(void *dst, npuc_dtype ddt, const void *src, npuc_dtype sdt, size_t n) {
    if (!valid(ddt) || !valid(sdt)) return -1;
    unsigned char *d = dst;
    const unsigned char *s = src;
    size_t ds = TRAITS[ddt].size, ss = TRAITS[sdt].size;
    if (ddt == sdt) {
        if (n) memmove(d, s, n * ds);
        return 0;
    }
    /* The common widening paths get tight loops; the rest go through double. */
    if (ddt == NPUC_DTYPE_F32) {
        switch (sdt) {
        case NPUC_DTYPE_F16:
            for (size_t i = 0; i < n; i++) {
                uint16_t h; memcpy(&h, s + 2 * i, 2);
                float f = npuc_f16_to_f32(h); memcpy(d + 4 * i, &f, 4);
            }
            return 0;
        case NPUC_DTYPE_BF16:
            for (size_t i = 0; i < n; i++) {
                uint16_t h; memcpy(&h, s + 2 * i, 2);
                float f = npuc_bf16_to_f32(h); memcpy(d + 4 * i, &f, 4);
            }
            return 0;
        default: break;
        }
    }
    for (size_t i = 0; i < n; i++) store_d(d + i * ds, ddt, load_d(s + i * ss, sdt));
    return 0;
}
