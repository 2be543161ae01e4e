/*
 * value_counts.c - the NaN / Inf / subnormal / zero census of a tensor.
 *
 * Every IEEE-style format is a sign bit, an exponent field and a mantissa
 * field, so one classifier serves them all once it knows the two field masks
 * of the dtype: an all-ones exponent is Inf (zero mantissa) or NaN, a zero
 * exponent is zero (zero mantissa) or subnormal.  OCP F8_E4M3 ("FN") is the
 * exception: it has no infinities and only the all-ones pattern S.1111.111 is
 * NaN; the other all-ones-exponent patterns are the normal numbers 256..448.
 *
 * Values are classified from their bits in their own dtype, never after a
 * widening conversion: widening an F16 subnormal gives a normal float32 and
 * would hide exactly what the census is for.  Loads go through memcpy, so
 * the input may sit at any alignment (safetensors payloads often do).
 */
#include <stddef.h>
#include <string.h>

#include "npuc_internal.h"

typedef struct float_format {
    unsigned width;   /* bytes per value */
    uint64_t exp;     /* exponent field mask */
    uint64_t man;     /* mantissa field mask */
    int has_inf;      /* 0: the FN variant, all ones is the only NaN */
} float_format;

static const float_format F64 = {8, 0x7ff0000000000000ull, 0x000fffffffffffffull, 1};
static const float_format F32 = {4, 0x7f800000u, 0x007fffffu, 1};
static const float_format F16 = {2, 0x7c00u, 0x03ffu, 1};
static const float_format BF16 = {2, 0x7f80u, 0x007fu, 1};
static const float_format E4M3 = {1, 0x78u, 0x07u, 0};
static const float_format E5M2 = {1, 0x7cu, 0x03u, 1};

/* Reads one little-endian value of `width` bytes (a compile-time constant at
 * every call site once inlined, so this becomes a single unaligned load). */
static inline uint64_t load_le(const unsigned char *p, unsigned width) {
    switch (width) {
    case 1: return p[0];
    case 2: { uint16_t v; memcpy(&v, p, 2);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        v = __builtin_bswap16(v);
#endif
        return v; }
    case 4: { uint32_t v; memcpy(&v, p, 4);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        v = __builtin_bswap32(v);
#endif
        return v; }
    default: { uint64_t v; memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        v = __builtin_bswap64(v);
#endif
        return v; }
    }
}

static inline void count_float(const unsigned char *p, uint64_t n, const float_format *f,
                               npuc_value_counts *c) {
    const unsigned w = f->width;
    const uint64_t em = f->exp, mm = f->man;
    uint64_t nan = 0, inf = 0, sub = 0, zero = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t v = load_le(p + i * w, w);
        uint64_t e = v & em, m = v & mm;
        if (e == em) {
            if (f->has_inf) {
                if (m) nan++;
                else inf++;
            } else if (m == mm) {
                nan++;
            }
        } else if (e == 0) {
            if (m) sub++;
            else zero++;
        }
    }
    c->nan = nan;
    c->inf = inf;
    c->subnormal = sub;
    c->zero = zero;
    c->finite = n - nan - inf;
}

static inline void count_int(const unsigned char *p, uint64_t n, unsigned w, npuc_value_counts *c) {
    uint64_t zero = 0;
    for (uint64_t i = 0; i < n; i++) zero += load_le(p + i * w, w) == 0;
    c->zero = zero;
    c->finite = n;
}

npuc_status npuc_count_values(const void *data, npuc_dtype dt, uint64_t n, npuc_value_counts *out) {
    memset(out, 0, sizeof *out);
    size_t size = npuc_dtype_size(dt);
    if (size == 0) return NPUC_ERR_ARG;
    if (n == 0) return NPUC_OK;
    if (!data) return NPUC_ERR_ARG;
    const unsigned char *p = data;
    switch (dt) {
    case NPUC_DTYPE_F64: count_float(p, n, &F64, out); break;
    case NPUC_DTYPE_F32: count_float(p, n, &F32, out); break;
    case NPUC_DTYPE_F16: count_float(p, n, &F16, out); break;
    case NPUC_DTYPE_BF16: count_float(p, n, &BF16, out); break;
    case NPUC_DTYPE_F8_E4M3: count_float(p, n, &E4M3, out); break;
    case NPUC_DTYPE_F8_E5M2: count_float(p, n, &E5M2, out); break;
    default:
        switch (size) {
        case 1: count_int(p, n, 1, out); break;
        case 2: count_int(p, n, 2, out); break;
        case 4: count_int(p, n, 4, out); break;
        default: count_int(p, n, 8, out); break;
        }
        break;
    }
    return NPUC_OK;
}

void npuc_value_counts_add(npuc_value_counts *acc, const npuc_value_counts *b) {
    acc->nan += b->nan;
    acc->inf += b->inf;
    acc->subnormal += b->subnormal;
    acc->zero += b->zero;
    acc->finite += b->finite;
}
