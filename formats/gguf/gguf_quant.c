/*
 * gguf_quant.c - ggml's type traits, the driver of the block quantizers
 * (src/kernels/gguf_kernels.h: the scalar reference and its AVX-512 twin,
 * byte-identical to ggml's quantize_row_*_ref; src/kernels/kquant_kernels.h:
 * the K types and the importance-weighted paths, byte-identical to
 * ggml_quantize_chunk) and the dequantizers of the legacy 32-element block
 * types, written from the block definitions (ggml-common.h); the K types'
 * dequantizers are in src/kernels/ref/kquant_ref.c.
 *
 * Block layouts (little-endian; d and m are IEEE fp16):
 *   Q8_0  34 bytes: d, int8 qs[32]                  x = qs[j] * d
 *   Q4_0  18 bytes: d, qs[16]                       x = (nibble - 8) * d
 *   Q4_1  20 bytes: d, m, qs[16]                    x = nibble * d + m
 *   Q5_0  22 bytes: d, qh[4], qs[16]                x = (nibble | bit << 4) - 16) * d
 *   Q5_1  24 bytes: d, m, qh[4], qs[16]             x = (nibble | bit << 4) * d + m
 * In the 4- and 5-bit types byte qs[j] holds element j in its low nibble
 * and element j + 16 in its high one; the 32-bit word qh holds the fifth
 * bit of element j at bit j.  The quantizers' choices (scales, rounding)
 * are described in src/kernels/gguf_ref.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(_OPENMP)
#include <omp.h>
#endif

#include "gguf_format.h"
#include "kernels/gguf_kernels.h"
#include "kernels/kquant_kernels.h"

static const npuc__ggml_type TYPES[] = {
    {NPUC__GGML_F32, "F32", 1, 4, NPUC_DTYPE_F32, 1},
    {NPUC__GGML_F16, "F16", 1, 2, NPUC_DTYPE_F16, 1},
    {NPUC__GGML_Q4_0, "Q4_0", 32, 18, NPUC_DTYPE_F32, 1},
    {NPUC__GGML_Q4_1, "Q4_1", 32, 20, NPUC_DTYPE_F32, 1},
    {NPUC__GGML_Q5_0, "Q5_0", 32, 22, NPUC_DTYPE_F32, 1},
    {NPUC__GGML_Q5_1, "Q5_1", 32, 24, NPUC_DTYPE_F32, 1},
    {NPUC__GGML_Q8_0, "Q8_0", 32, 34, NPUC_DTYPE_F32, 1},
    {9, "Q8_1", 0, 0, NPUC_DTYPE_F32, 0},
    {NPUC__GGML_Q2_K, "Q2_K", 256, 84, NPUC_DTYPE_F32, 1},
    {NPUC__GGML_Q3_K, "Q3_K", 256, 110, NPUC_DTYPE_F32, 1},
    {NPUC__GGML_Q4_K, "Q4_K", 256, 144, NPUC_DTYPE_F32, 1},
    {NPUC__GGML_Q5_K, "Q5_K", 256, 176, NPUC_DTYPE_F32, 1},
    {NPUC__GGML_Q6_K, "Q6_K", 256, 210, NPUC_DTYPE_F32, 1},
    {15, "Q8_K", 0, 0, NPUC_DTYPE_F32, 0},
    {16, "IQ2_XXS", 0, 0, NPUC_DTYPE_F32, 0},
    {17, "IQ2_XS", 0, 0, NPUC_DTYPE_F32, 0},
    {18, "IQ3_XXS", 0, 0, NPUC_DTYPE_F32, 0},
    {19, "IQ1_S", 0, 0, NPUC_DTYPE_F32, 0},
    {20, "IQ4_NL", 0, 0, NPUC_DTYPE_F32, 0},
    {21, "IQ3_S", 0, 0, NPUC_DTYPE_F32, 0},
    {22, "IQ2_S", 0, 0, NPUC_DTYPE_F32, 0},
    {23, "IQ4_XS", 0, 0, NPUC_DTYPE_F32, 0},
    {NPUC__GGML_I8, "I8", 1, 1, NPUC_DTYPE_I8, 1},
    {NPUC__GGML_I16, "I16", 1, 2, NPUC_DTYPE_I16, 1},
    {NPUC__GGML_I32, "I32", 1, 4, NPUC_DTYPE_I32, 1},
    {NPUC__GGML_I64, "I64", 1, 8, NPUC_DTYPE_I64, 1},
    {NPUC__GGML_F64, "F64", 1, 8, NPUC_DTYPE_F64, 1},
    {29, "IQ1_M", 0, 0, NPUC_DTYPE_F32, 0},
    {NPUC__GGML_BF16, "BF16", 1, 2, NPUC_DTYPE_BF16, 1},
    {34, "TQ1_0", 0, 0, NPUC_DTYPE_F32, 0},
    {35, "TQ2_0", 0, 0, NPUC_DTYPE_F32, 0},
    {39, "MXFP4", 0, 0, NPUC_DTYPE_F32, 0},
};

const npuc__ggml_type *npuc__ggml_type_by_id(uint32_t id) {
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
        if ((uint32_t)TYPES[i].id == id) return &TYPES[i];
    return NULL;
}

int npuc__gguf_nbytes(const npuc__ggml_type *t, uint64_t row, uint64_t numel, uint64_t *nbytes) {
    if (!t->known || t->blck == 0) return -1;
    if (row % t->blck != 0 && numel != 0) return -1;
    return npuc_mul_overflow(numel / t->blck, t->tsize, nbytes) ? -1 : 0;
}

static float unhalf(const unsigned char *p) { return npuc_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

static uint32_t get_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Blocks quantized per kernel call: a tile of 256 blocks (32 KiB of
 * float32) is converted from the source dtype on the thread's stack, so an
 * f16 or bf16 source is read once, converted in cache and never whole. */
#define GGQ_TILE 256u

/* The legacy tables' function for id, or NULL. */
static npuc_gguf_qfn legacy_fn(const npuc_gguf_kernel_table *kt, int id) {
    return id == NPUC__GGML_Q8_0   ? kt->q8_0
           : id == NPUC__GGML_Q4_0 ? kt->q4_0
           : id == NPUC__GGML_Q4_1 ? kt->q4_1
           : id == NPUC__GGML_Q5_0 ? kt->q5_0
           : id == NPUC__GGML_Q5_1 ? kt->q5_1
                                   : NULL;
}

int npuc__gguf_is_ktype(int id) { return id >= NPUC__GGML_Q2_K && id <= NPUC__GGML_Q6_K; }

/* With importance: one row at a time (the legacy weighted paths take the
 * row's mean square), rows split over the threads. */
static int quantize_rows_imp(int id, const unsigned char *s, npuc_dtype sdt, unsigned char *b, uint64_t k,
                             uint64_t row, const float *imp, int nth, uint64_t *bad_block) {
    const npuc__ggml_type *t = npuc__ggml_type_by_id((uint32_t)id);
    const size_t ss = npuc_dtype_size(sdt);
    const int64_t nrow = (int64_t)(k / row);
    const uint64_t bpr = row / t->blck;
    uint64_t first_bad = UINT64_MAX;
    int oom = 0;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nth) reduction(min : first_bad) reduction(| : oom)
    for (int64_t r = 0; r < nrow; r++) {
        const unsigned char *p = s + (uint64_t)r * row * ss;
        const float *x = (const float *)(const void *)p;
        float *buf = NULL;
        if (sdt != NPUC_DTYPE_F32) {
            buf = malloc((size_t)row * sizeof *buf);
            if (!buf) {
                oom = 1;
                continue;
            }
            npuc_convert(buf, NPUC_DTYPE_F32, p, sdt, (size_t)row);
            x = buf;
        }
        const size_t got = npuc_kq_row(id, x, b + (uint64_t)r * bpr * t->tsize, (size_t)row, imp);
        if (got < bpr && (uint64_t)r * bpr + got < first_bad) first_bad = (uint64_t)r * bpr + got;
        free(buf);
    }
    if (oom) return -2;
    if (first_bad != UINT64_MAX) {
        *bad_block = first_bad;
        return -1;
    }
    return 0;
}

int npuc__gguf_quantize_rows(int id, const void *src, npuc_dtype sdt, void *blocks, uint64_t k, uint64_t row,
                             const float *imp, int nth, uint64_t *bad_block) {
    const npuc__ggml_type *t = npuc__ggml_type_by_id((uint32_t)id);
    const npuc_gguf_kernel_table *kt = npuc_gguf_kernels();
    const int ktype = npuc__gguf_is_ktype(id);
    const npuc_gguf_qfn fn = legacy_fn(kt, id);
    if (!t || (!fn && !ktype)) return -1;
    if (id == NPUC__GGML_Q8_0) imp = NULL; /* as ggml: Q8_0 has no weighted path */
#if defined(_OPENMP)
    if (nth <= 0) nth = omp_get_max_threads();
#else
    (void)nth;
#endif
    unsigned char *b = blocks;
    const unsigned char *s = src;
    if (imp) {
        if (row == 0 || k % row != 0 || row % t->blck != 0) return -1;
        return quantize_rows_imp(id, s, sdt, b, k, row, imp, nth, bad_block);
    }
    const size_t ss = npuc_dtype_size(sdt);
    const uint64_t nb = k / 32; /* 32-element units; a K block is 8 of them */
    const int64_t ntiles = (int64_t)((nb + GGQ_TILE - 1) / GGQ_TILE);
    const uint64_t per = t->blck / 32;
    uint64_t first_bad = UINT64_MAX;
    /* Blocks are independent: any split gives the same bytes, and the
     * smallest refused index is the same whatever the thread count.  A K
     * tile (32 super-blocks) costs ~50 times a legacy one: split from 2. */
#pragma omp parallel for schedule(static) num_threads(nth) reduction(min : first_bad) if (ntiles >= (ktype ? 2 : 16))
    for (int64_t i = 0; i < ntiles; i++) {
        const uint64_t b0 = (uint64_t)i * GGQ_TILE;
        const size_t n = (size_t)(nb - b0 < GGQ_TILE ? nb - b0 : GGQ_TILE);
        float tile[32 * GGQ_TILE];
        const float *x = (const float *)(const void *)(s + b0 * 32 * ss);
        if (sdt != NPUC_DTYPE_F32) {
            npuc_convert(tile, NPUC_DTYPE_F32, s + b0 * 32 * ss, sdt, 32 * n);
            x = tile;
        }
        const size_t r = ktype ? npuc_kq_row(id, x, b + t->tsize * (b0 / per), 32 * n, NULL) * per
                               : fn(x, b + t->tsize * b0, n);
        if (r < n && (b0 + r) / per < first_bad) first_bad = (b0 + r) / per;
    }
    if (first_bad != UINT64_MAX) {
        *bad_block = first_bad;
        return -1;
    }
    return 0;
}

int npuc__gguf_quantize(int id, const void *src, npuc_dtype sdt, void *blocks, uint64_t k, int nth,
                        uint64_t *bad_block) {
    return npuc__gguf_quantize_rows(id, src, sdt, blocks, k, k, NULL, nth, bad_block);
}

void npuc__gguf_dequantize(int id, const void *blocks, float *y, uint64_t k) {
    const unsigned char *b = blocks;
    if (npuc__gguf_is_ktype(id)) {
        (void)npuc_kq_dequantize(id, b, y, (size_t)k);
        return;
    }
    const npuc__ggml_type *t = npuc__ggml_type_by_id((uint32_t)id);
    for (uint64_t i = 0; i < k / 32; i++, b += t->tsize, y += 32) {
        const float d = unhalf(b);
        switch (id) {
        case NPUC__GGML_Q8_0:
            for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)b[2 + j] * d;
            break;
        case NPUC__GGML_Q4_0:
            for (int j = 0; j < 16; j++) {
                y[j] = (float)((b[2 + j] & 0x0f) - 8) * d;
                y[j + 16] = (float)((b[2 + j] >> 4) - 8) * d;
            }
            break;
        case NPUC__GGML_Q4_1: {
            const float m = unhalf(b + 2);
            for (int j = 0; j < 16; j++) {
                const float v0 = (float)(b[4 + j] & 0x0f) * d, v1 = (float)(b[4 + j] >> 4) * d;
                y[j] = v0 + m;
                y[j + 16] = v1 + m;
            }
            break;
        }
        case NPUC__GGML_Q5_0: {
            const uint32_t qh = get_u32(b + 2);
            for (int j = 0; j < 16; j++) {
                const int h0 = (int)((qh >> j) << 4 & 0x10), h1 = (int)((qh >> (j + 12)) & 0x10);
                y[j] = (float)(((b[6 + j] & 0x0f) | h0) - 16) * d;
                y[j + 16] = (float)(((b[6 + j] >> 4) | h1) - 16) * d;
            }
            break;
        }
        case NPUC__GGML_Q5_1: {
            const float m = unhalf(b + 2);
            const uint32_t qh = get_u32(b + 4);
            for (int j = 0; j < 16; j++) {
                const int h0 = (int)((qh >> j) << 4 & 0x10), h1 = (int)((qh >> (j + 12)) & 0x10);
                const float v0 = (float)((b[8 + j] & 0x0f) | h0) * d;
                const float v1 = (float)((b[8 + j] >> 4) | h1) * d;
                y[j] = v0 + m;
                y[j + 16] = v1 + m;
            }
            break;
        }
        default:
            return;
        }
    }
}
