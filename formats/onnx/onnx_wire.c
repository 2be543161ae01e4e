/*
 * onnx_wire.c - the protobuf wire format, as much of it as ONNX needs
 * (protobuf.dev/programming-guides/encoding): varints, field tags, the four
 * wire types proto3 uses, an output buffer with holes, base64, and the
 * table of ONNX data types.
 *
 * A field is a varint tag (field number << 3 | wire type) and a value:
 * wire type 0 a varint, 1 eight bytes, 2 a varint length and that many
 * bytes, 5 four bytes.  Wire types 3 and 4 (groups) never occur in ONNX and
 * are refused with 6 and 7.
 */
#include <stdlib.h>
#include <string.h>

#include "onnx_format.h"

const char *npuc__ox_varint(const unsigned char **p, const unsigned char *end, uint64_t *v) {
    uint64_t x = 0;
    const unsigned char *q = *p;
    for (int s = 0; s < 70; s += 7) {
        if (q >= end) return "truncated varint";
        unsigned char c = *q++;
        if (s == 63 && c > 1) return "varint longer than 64 bits";
        x |= (uint64_t)(c & 0x7f) << s;
        if (!(c & 0x80)) {
            *v = x;
            *p = q;
            return NULL;
        }
    }
    return "varint longer than 10 bytes";
}

const char *npuc__ox_next(const unsigned char **p, const unsigned char *end, npuc__ox_field *f) {
    const unsigned char *q = *p;
    uint64_t tag;
    const char *why = npuc__ox_varint(&q, end, &tag);
    if (why) return why;
    f->start = *p;
    f->wt = (unsigned)(tag & 7);
    if (tag >> 3 == 0 || tag >> 3 > 0x1fffffff) return "invalid field number";
    f->num = (uint32_t)(tag >> 3);
    f->data = NULL;
    f->len = 0;
    f->v = 0;
    switch (f->wt) {
    case 0:
        if ((why = npuc__ox_varint(&q, end, &f->v))) return why;
        break;
    case 1:
    case 5: {
        unsigned k = f->wt == 1 ? 8 : 4;
        if ((uint64_t)(end - q) < k) return "fixed-size value past the end";
        for (unsigned i = k; i-- > 0;) f->v = f->v << 8 | q[i];
        q += k;
        break;
    }
    case 2:
        if ((why = npuc__ox_varint(&q, end, &f->len))) return why;
        if (f->len > (uint64_t)(end - q)) return "length past the end";
        f->data = q;
        q += f->len;
        break;
    default:
        return "wrong wire type (groups and types 6-7 do not occur in ONNX)";
    }
    f->end = q;
    *p = q;
    return NULL;
}

/* ------------------------------------------------------------ the buffer */

static int reserve(npuc__ox_buf *b, size_t more) {
    if (b->oom) return -1;
    if (b->cap - b->n >= more) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->n < more) {
        if (cap > SIZE_MAX / 2) { b->oom = 1; return -1; }
        cap *= 2;
    }
    unsigned char *q = realloc(b->p, cap);
    if (!q) { b->oom = 1; return -1; }
    b->p = q;
    b->cap = cap;
    return 0;
}

void npuc__ox_put(npuc__ox_buf *b, const void *p, size_t n) {
    if (!n || reserve(b, n) != 0) return;
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

void npuc__ox_put_varint(npuc__ox_buf *b, uint64_t v) {
    unsigned char t[10];
    size_t k = 0;
    do {
        t[k] = (unsigned char)(v & 0x7f);
        v >>= 7;
        if (v) t[k] |= 0x80;
        k++;
    } while (v);
    npuc__ox_put(b, t, k);
}

void npuc__ox_put_tag(npuc__ox_buf *b, uint32_t num, unsigned wt) { npuc__ox_put_varint(b, (uint64_t)num << 3 | wt); }

void npuc__ox_put_bytes(npuc__ox_buf *b, uint32_t num, const void *p, size_t n) {
    npuc__ox_put_tag(b, num, 2);
    npuc__ox_put_varint(b, n);
    npuc__ox_put(b, p, n);
}

static void add_hole(npuc__ox_buf *b, uint64_t pos, uint64_t size, size_t idx) {
    if (b->oom) return;
    if (b->nh == b->caph) {
        size_t cap = b->caph ? 2 * b->caph : 8;
        npuc__ox_hole *h = realloc(b->h, cap * sizeof *h);
        if (!h) { b->oom = 1; return; }
        b->h = h;
        b->caph = cap;
    }
    b->h[b->nh++] = (npuc__ox_hole){pos, size, idx};
    b->holes += size;
}

void npuc__ox_put_hole(npuc__ox_buf *b, uint32_t num, uint64_t size, size_t idx) {
    npuc__ox_put_tag(b, num, 2);
    npuc__ox_put_varint(b, size);
    add_hole(b, b->n, size, idx);
}

void npuc__ox_put_sub(npuc__ox_buf *b, uint32_t num, npuc__ox_buf *c) {
    if (c->oom) b->oom = 1;
    npuc__ox_put_tag(b, num, 2);
    npuc__ox_put_varint(b, npuc__ox_size(c));
    size_t at = b->n;
    npuc__ox_put(b, c->p, c->n);
    for (size_t i = 0; i < c->nh; i++) add_hole(b, at + c->h[i].pos, c->h[i].size, c->h[i].idx);
    npuc__ox_free(c);
}

void npuc__ox_free(npuc__ox_buf *b) {
    free(b->p);
    free(b->h);
    memset(b, 0, sizeof *b);
}

void npuc__ox_put_tensor_meta(npuc__ox_buf *b, const unsigned char *msg, uint64_t len) {
    const unsigned char *q = msg, *end = msg + len;
    npuc__ox_field f;
    while (q < end && !npuc__ox_next(&q, end, &f)) {
        /* the values: float/int32/int64/raw/double/uint64 data, external_data, data_location */
        if (f.num == 4 || f.num == 5 || f.num == 7 || f.num == 9 || f.num == 10 || f.num == 11 || f.num == 13 ||
            f.num == 14)
            continue;
        npuc__ox_put(b, f.start, (size_t)(f.end - f.start));
    }
}

/* ------------------------------------------------------------ base64 */

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *npuc__ox_b64_encode(const unsigned char *p, size_t n) {
    if (n > (SIZE_MAX - 1) / 4 * 3 - 3) return NULL;
    char *s = malloc((n + 2) / 3 * 4 + 1), *o = s;
    if (!s) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        *o++ = B64[v >> 18 & 63];
        *o++ = B64[v >> 12 & 63];
        *o++ = i + 1 < n ? B64[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? B64[v & 63] : '=';
    }
    *o = 0;
    return s;
}

static int b64_val(char c) {
    const char *q = c ? strchr(B64, c) : NULL;
    return q ? (int)(q - B64) : -1;
}

int npuc__ox_b64_decode(const char *s, unsigned char **out, size_t *n) {
    size_t len = strlen(s);
    if (len % 4) return -1;
    unsigned char *p = malloc(len / 4 * 3 + 1);
    if (!p) return -1;
    size_t k = 0;
    for (size_t i = 0; i < len; i += 4) {
        int v[4], pad = 0;
        for (int j = 0; j < 4; j++) {
            if (s[i + j] == '=' && i + 4 == len && j >= 2) { v[j] = 0; pad++; continue; }
            if (pad || (v[j] = b64_val(s[i + j])) < 0) { free(p); return -1; }
        }
        uint32_t x = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        p[k++] = (unsigned char)(x >> 16);
        if (pad < 2) p[k++] = (unsigned char)(x >> 8);
        if (pad < 1) p[k++] = (unsigned char)x;
    }
    *out = p;
    *n = k;
    return 0;
}

/* ------------------------------------------------------------ data types */

static const struct {
    uint64_t onnx;
    npuc_dtype dt;
    uint32_t field;
} TYPES[] = {
    {1, NPUC_DTYPE_F32, 4},      {2, NPUC_DTYPE_U8, 5},   {3, NPUC_DTYPE_I8, 5},     {4, NPUC_DTYPE_U16, 5},
    {5, NPUC_DTYPE_I16, 5},      {6, NPUC_DTYPE_I32, 5},  {7, NPUC_DTYPE_I64, 7},    {9, NPUC_DTYPE_BOOL, 5},
    {10, NPUC_DTYPE_F16, 5},     {11, NPUC_DTYPE_F64, 10}, {12, NPUC_DTYPE_U32, 11}, {13, NPUC_DTYPE_U64, 11},
    {16, NPUC_DTYPE_BF16, 5},    {17, NPUC_DTYPE_F8_E4M3, 5}, {19, NPUC_DTYPE_F8_E5M2, 5},
};

int npuc__ox_dtype(uint64_t t, npuc_dtype *dt, uint32_t *field) {
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
        if (TYPES[i].onnx == t) {
            *dt = TYPES[i].dt;
            *field = TYPES[i].field;
            return 0;
        }
    return -1;
}

uint64_t npuc__ox_type_of(npuc_dtype dt) {
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
        if (TYPES[i].dt == dt) return TYPES[i].onnx;
    return 0;
}
