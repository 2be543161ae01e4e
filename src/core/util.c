/*
 * util.c - small helpers every module needs: string copies, UTF-8 checks,
 * overflow-checked shape sizes.
 */
#include <stdlib.h>
#include <string.h>

#include "npuc_internal.h"

char *npuc__strdup(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* Validates UTF-8 per RFC 3629: rejects overlong forms, surrogates and code
 * points above U+10FFFF. */
int npuc__grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 16;
    while (nc < need) {
        if (nc > SIZE_MAX / 2) return -1;
        nc *= 2;
    }
    if (elem && nc > SIZE_MAX / elem) return -1;
    void *q = realloc(*p, nc * elem);
    if (!q) return -1;
    memset((char *)q + *cap * elem, 0, (nc - *cap) * elem);
    *p = q;
    *cap = nc;
    return 0;
}

int npuc__utf8_valid(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t len;
        unsigned min, cp;
        if ((c & 0xe0) == 0xc0) { len = 2; cp = c & 0x1f; min = 0x80; }
        else if ((c & 0xf0) == 0xe0) { len = 3; cp = c & 0x0f; min = 0x800; }
        else if ((c & 0xf8) == 0xf0) { len = 4; cp = c & 0x07; min = 0x10000; }
        else return 0;
        if (n - i < len) return 0;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
        i += len;
    }
    return 1;
}

int npuc__shape_sizes(npuc_dtype dt, int rank, const int64_t *shape, uint64_t *numel,
                      uint64_t *nbytes) {
    uint64_t n = 1;
    if (rank < 0 || rank > NPUC_MAX_RANK) return -1;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 0) return -1;
        if (npuc_mul_overflow(n, (uint64_t)shape[i], &n)) return -1;
    }
    uint64_t b;
    if (npuc_mul_overflow(n, npuc_dtype_size(dt), &b)) return -1;
    /* Keep every byte count addressable and representable as int64. */
    if (b > (uint64_t)INT64_MAX || n > (uint64_t)INT64_MAX) return -1;
    *numel = n;
    *nbytes = b;
    return 0;
}
