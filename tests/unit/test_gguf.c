/*
 * test_gguf.c - the GGUF reader on hostile files, the block codecs on
 * hand-worked blocks.
 *
 * Every file is built byte by byte here from the GGUF specification (ggml's
 * docs/gguf.md), independently of npuc's writer.  A malformed file must make
 * npuc_model_open() return one specific status with *out NULL and a
 * one-line message naming the file and the problem (and the tensor, where
 * there is one); every prefix of a valid file must fail cleanly.  The
 * hand-worked blocks follow the block definitions: Q8_0 x = q * d, Q4_0
 * x = (q - 8) * d, Q5_1 x = (q | h << 4) * d + m, with fp16 d and m.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf_format.h"
#include "testutil.h"

static npuc_ctx *ctx;

/* ------------------------------------------------------------ a builder */

typedef struct buf {
    unsigned char b[4096];
    size_t n;
} buf;

static void put(buf *b, const void *p, size_t n) {
    assert_true(b->n + n <= sizeof b->b);
    memcpy(b->b + b->n, p, n);
    b->n += n;
}
static void u32(buf *b, uint32_t v) {
    for (int i = 0; i < 4; i++) b->b[b->n++] = (unsigned char)(v >> (8 * i));
}
static void u64(buf *b, uint64_t v) {
    for (int i = 0; i < 8; i++) b->b[b->n++] = (unsigned char)(v >> (8 * i));
}
static void str(buf *b, const char *s) {
    u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void head(buf *b, uint32_t version, uint64_t nt, uint64_t nkv) {
    b->n = 0;
    put(b, "GGUF", 4);
    u32(b, version);
    u64(b, nt);
    u64(b, nkv);
}
/* A tensor info with up to 4 dims (innermost first). */
static void tinfo(buf *b, const char *name, int nd, const uint64_t *ne, uint32_t type, uint64_t off) {
    str(b, name);
    u32(b, (uint32_t)nd);
    for (int i = 0; i < nd; i++) u64(b, ne[i]);
    u32(b, type);
    u64(b, off);
}
static void align32(buf *b) {
    while (b->n % 32) b->b[b->n++] = 0;
}
static void zeros(buf *b, size_t n) {
    memset(b->b + b->n, 0, n);
    b->n += n;
}

static npuc_status open_buf(const buf *b, const char *name, npuc_model **m) {
    const char *p = npuc_test_path(name);
    npuc_test_write_file(p, b->b, b->n);
    return npuc_model_open(ctx, p, NULL, m);
}

static void expect_bad(const buf *b, const char *name, npuc_status want, const char *frag) {
    npuc_model *m = (npuc_model *)1;
    npuc_status st = open_buf(b, name, &m);
    const char *msg = npuc_ctx_errmsg(ctx);
    if (st != want || m != NULL || !strstr(msg, frag) || !strstr(msg, name) || strchr(msg, '\n'))
        fail_msg("%s: status %d (want %d), message '%s' (want '%s')", name, st, want, msg, frag);
}

#define FMT NPUC_ERR_FORMAT
#define UNS NPUC_ERR_UNSUPPORTED

/* --------------------------------------------------------------- cases */

static void test_header_counts(void **state) {
    (void)state;
    buf b;
    head(&b, 3, 0, 0);
    zeros(&b, 8);
    b.b[3] = 'X';
    expect_bad(&b, "magic.gguf", FMT, "not a GGUF file");
    head(&b, 1, 0, 0);
    expect_bad(&b, "v1.gguf", UNS, "GGUF version 1 is not supported");
    head(&b, 3u << 24, 0, 0);
    expect_bad(&b, "be.gguf", UNS, "big-endian");
    head(&b, 3, UINT64_C(1) << 60, 0);
    zeros(&b, 64);
    expect_bad(&b, "nt.gguf", FMT, "n_tensors 1152921504606846976 cannot fit");
    head(&b, 3, 0, UINT64_MAX);
    zeros(&b, 64);
    expect_bad(&b, "nkv.gguf", FMT, "n_kv 18446744073709551615 cannot fit");
    b.n = 10;
    expect_bad(&b, "short.gguf", FMT, "too short for a GGUF header");
}

static void test_keys(void **state) {
    (void)state;
    buf b;
    head(&b, 3, 0, 1);
    u64(&b, UINT64_C(1) << 63);
    zeros(&b, 16);
    expect_bad(&b, "keylen.gguf", FMT, "key #0: length 9223372036854775808 exceeds");
    head(&b, 3, 0, 1);
    str(&b, "");
    u32(&b, 4);
    u32(&b, 0);
    expect_bad(&b, "keyempty.gguf", FMT, "key #0 is empty");
    head(&b, 3, 0, 1);
    str(&b, "a");
    u32(&b, 8);
    u64(&b, UINT64_MAX);
    expect_bad(&b, "strlen.gguf", FMT, "key 'a': length 18446744073709551615 exceeds the rest of the file");
    head(&b, 3, 0, 1);
    str(&b, "a");
    u32(&b, 9);
    u32(&b, 4);
    u64(&b, UINT64_C(1) << 61);
    expect_bad(&b, "arrlen.gguf", FMT, "array elements cannot fit");
    head(&b, 3, 0, 1);
    str(&b, "a");
    u32(&b, 9);
    u32(&b, 8);
    u64(&b, UINT64_C(1) << 40);
    zeros(&b, 16);
    expect_bad(&b, "strarr.gguf", FMT, "array elements cannot fit");
    head(&b, 3, 0, 1);
    str(&b, "a");
    u32(&b, 9);
    u32(&b, 9);
    u64(&b, 1);
    zeros(&b, 16);
    expect_bad(&b, "nested.gguf", UNS, "nested arrays are not supported");
    head(&b, 3, 0, 1);
    str(&b, "a");
    u32(&b, 99);
    zeros(&b, 8);
    expect_bad(&b, "vtype.gguf", FMT, "key 'a': unknown value type 99");
    head(&b, 3, 0, 1);
    str(&b, "a");
    u32(&b, 7);
    b.b[b.n++] = 2;
    expect_bad(&b, "bool.gguf", FMT, "bool value 2 is not 0 or 1");
    head(&b, 3, 0, 2);
    str(&b, "k");
    u32(&b, 4);
    u32(&b, 1);
    str(&b, "k");
    u32(&b, 4);
    u32(&b, 2);
    expect_bad(&b, "dupkey.gguf", FMT, "key 'k' appears twice");
    head(&b, 3, 0, 1);
    str(&b, "a");
    u32(&b, 8);
    str(&b, "\xc3\x28");
    expect_bad(&b, "utf8v.gguf", FMT, "key 'a' is not valid UTF-8");
    for (uint32_t a = 0; a < 4; a += 3) {
        head(&b, 3, 0, 1);
        str(&b, "general.alignment");
        u32(&b, 4);
        u32(&b, a);
        expect_bad(&b, a ? "align3.gguf" : "align0.gguf", FMT, "is not a power of two");
    }
    head(&b, 3, 0, 1);
    str(&b, "general.alignment");
    u32(&b, 10);
    u64(&b, 32);
    expect_bad(&b, "alignty.gguf", FMT, "general.alignment is of type 10, not u32");
    head(&b, 3, 0, 1);
    str(&b, "general.alignment");
    u32(&b, 4);
    u32(&b, 1u << 30);
    expect_bad(&b, "alignbig.gguf", FMT, "the data area (aligned to 1073741824) starts past the end");
}

static void test_tensors(void **state) {
    (void)state;
    buf b;
    uint64_t ne[5] = {32, 2, 1, 1, 1};
    char name[80];
    memset(name, 'n', 64);
    name[64] = 0;
    head(&b, 3, 1, 0);
    tinfo(&b, name, 1, ne, 0, 0);
    expect_bad(&b, "namelen.gguf", FMT, "tensor #0: name of 64 bytes exceeds GGUF's 63");
    head(&b, 3, 1, 0);
    tinfo(&b, "\xff", 1, ne, 0, 0);
    expect_bad(&b, "nameutf8.gguf", FMT, "tensor #0 name is not valid UTF-8");
    head(&b, 3, 1, 0);
    tinfo(&b, "w", 5, ne, 0, 0);
    expect_bad(&b, "ndims.gguf", FMT, "tensor 'w': 5 dims, GGUF allows at most 4");
    uint64_t big[2] = {UINT64_C(1) << 62, UINT64_C(1) << 62};
    head(&b, 3, 1, 0);
    tinfo(&b, "w", 2, big, 0, 0);
    expect_bad(&b, "dimovf.gguf", NPUC_ERR_OVERFLOW, "tensor 'w': shape overflows");
    uint64_t huge[1] = {UINT64_C(1) << 63};
    head(&b, 3, 1, 0);
    tinfo(&b, "w", 1, huge, 0, 0);
    expect_bad(&b, "dimhuge.gguf", FMT, "tensor 'w': ne[0] = 9223372036854775808 is out of range");
    head(&b, 3, 1, 0);
    tinfo(&b, "w", 1, ne, 77, 0);
    expect_bad(&b, "type.gguf", FMT, "tensor 'w': unknown ggml type 77");
    uint64_t k256[1] = {256};
    head(&b, 3, 1, 0);
    tinfo(&b, "w", 1, k256, 16, 0);
    expect_bad(&b, "iquant.gguf", UNS, "tensor 'w': ggml type IQ2_XXS is not supported");
    uint64_t k128[1] = {128};
    head(&b, 3, 1, 0);
    tinfo(&b, "w", 1, k128, NPUC__GGML_Q4_K, 0);
    expect_bad(&b, "krow.gguf", FMT, "tensor 'w': ne[0] = 128 is not a multiple of Q4_K's block of 256");
    uint64_t odd[1] = {33};
    head(&b, 3, 1, 0);
    tinfo(&b, "w", 1, odd, NPUC__GGML_Q8_0, 0);
    expect_bad(&b, "blockrow.gguf", FMT, "tensor 'w': ne[0] = 33 is not a multiple of Q8_0's block of 32");
    head(&b, 3, 1, 0);
    tinfo(&b, "w", 1, ne, 0, UINT64_MAX - 31);
    align32(&b);
    zeros(&b, 128);
    expect_bad(&b, "offset.gguf", FMT, "tensor 'w': data [18446744073709551584, +128) exceeds the 128-byte data area");
    head(&b, 3, 1, 0);
    tinfo(&b, "w", 1, ne, 0, 4);
    align32(&b);
    zeros(&b, 160);
    expect_bad(&b, "unaligned.gguf", FMT, "tensor 'w': offset 4 is not a multiple of the alignment 32");
    head(&b, 3, 1, 0);
    tinfo(&b, "w", 2, ne, 0, 0);
    align32(&b);
    zeros(&b, 255);
    expect_bad(&b, "pastend.gguf", FMT, "tensor 'w': data [0, +256) exceeds the 255-byte data area");
    uint64_t sixteen[1] = {16};
    head(&b, 3, 2, 0);
    tinfo(&b, "a", 1, sixteen, 0, 0);
    tinfo(&b, "b", 1, sixteen, 0, 32);
    align32(&b);
    zeros(&b, 96);
    expect_bad(&b, "overlap.gguf", FMT, "tensor 'b': data overlaps tensor 'a'");
    uint64_t eight[1] = {8};
    head(&b, 3, 2, 0);
    tinfo(&b, "a", 1, eight, 0, 0);
    tinfo(&b, "a", 1, eight, 0, 32);
    align32(&b);
    zeros(&b, 64);
    expect_bad(&b, "dupname.gguf", FMT, "duplicate tensor name 'a'");
    head(&b, 3, 1, 1);
    str(&b, NPUC__GGUF_LONG_NAMES);
    u32(&b, 9);
    u32(&b, 8);
    u64(&b, 2);
    str(&b, "x");
    str(&b, "y");
    tinfo(&b, "w", 1, eight, 0, 0);
    align32(&b);
    zeros(&b, 32);
    expect_bad(&b, "longnames.gguf", FMT, "names 'x', which is no tensor");
}

/* A valid file: one Q8_0 [2, 32] tensor, one F16 [3], one Q4_0 [32], one
 * Q5_1 [32]; every prefix of it must fail cleanly. */
static void build_valid(buf *b) {
    uint64_t ne_q8[2] = {32, 2}, ne_f16[1] = {3}, ne_32[1] = {32};
    head(b, 3, 4, 2);
    str(b, "general.architecture");
    u32(b, 8);
    str(b, "test");
    str(b, "npuc.format");
    u32(b, 8);
    str(b, "pt");
    tinfo(b, "q8", 2, ne_q8, NPUC__GGML_Q8_0, 0);
    tinfo(b, "h", 1, ne_f16, NPUC__GGML_F16, 96);
    tinfo(b, "q4", 1, ne_32, NPUC__GGML_Q4_0, 128);
    tinfo(b, "q5", 1, ne_32, NPUC__GGML_Q5_1, 160);
    align32(b);
    /* q8: block 0 d = 1.0 (0x3c00), q = j - 16; block 1 d = 0.5 (0x3800), q = 100 - j */
    size_t s = b->n;
    b->b[b->n++] = 0x00;
    b->b[b->n++] = 0x3c;
    for (int j = 0; j < 32; j++) b->b[b->n++] = (unsigned char)(int8_t)(j - 16);
    b->b[b->n++] = 0x00;
    b->b[b->n++] = 0x38;
    for (int j = 0; j < 32; j++) b->b[b->n++] = (unsigned char)(int8_t)(100 - j);
    while (b->n - s < 96) b->b[b->n++] = 0;
    /* h: 1.0, -2.0, 65504 */
    static const unsigned char H[] = {0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b};
    put(b, H, sizeof H);
    while (b->n - s < 128) b->b[b->n++] = 0;
    /* q4: d = 0.25 (0x3400); byte j = low nibble j % 16, high nibble 15 - j % 16 */
    b->b[b->n++] = 0x00;
    b->b[b->n++] = 0x34;
    for (int j = 0; j < 16; j++) b->b[b->n++] = (unsigned char)(j | (15 - j) << 4);
    while (b->n - s < 160) b->b[b->n++] = 0;
    /* q5: d = 2.0 (0x4000), m = -1.5 (0xbe00), qh = 0xF000000F, qs byte j = j | j << 4 */
    static const unsigned char Q5[] = {0x00, 0x40, 0x00, 0xbe, 0x0f, 0x00, 0x00, 0xf0};
    put(b, Q5, sizeof Q5);
    for (int j = 0; j < 16; j++) b->b[b->n++] = (unsigned char)(j | j << 4);
    align32(b);
}

static void test_valid_values(void **state) {
    (void)state;
    buf b;
    build_valid(&b);
    npuc_model *m = NULL;
    assert_int_equal(open_buf(&b, "valid.gguf", &m), NPUC_OK);
    assert_int_equal(npuc_model_count(m), 4);
    assert_string_equal(npuc_model_meta_get(m, "format"), "pt");
    assert_string_equal(npuc_model_meta_get(m, "gguf.general.architecture"), "test");
    const npuc_tensor_info *t = npuc_model_tensor(m, 0);
    assert_string_equal(t->name, "q8");
    assert_int_equal(t->rank, 2);
    assert_int_equal(t->shape[0], 2);
    assert_int_equal(t->shape[1], 32);
    assert_int_equal(t->dtype, NPUC_DTYPE_F32);
    float f[64];
    assert_int_equal(npuc_model_read_f32(ctx, m, 0, f), NPUC_OK);
    for (int j = 0; j < 32; j++) {
        assert_true(f[j] == (float)(j - 16));
        assert_true(f[32 + j] == 0.5f * (float)(100 - j));
    }
    assert_int_equal(npuc_model_tensor(m, 1)->dtype, NPUC_DTYPE_F16);
    assert_int_equal(npuc_model_read_f32(ctx, m, 1, f), NPUC_OK);
    assert_true(f[0] == 1.0f && f[1] == -2.0f && f[2] == 65504.0f);
    assert_int_equal(npuc_model_read_f32(ctx, m, 2, f), NPUC_OK);
    for (int j = 0; j < 16; j++) {
        assert_true(f[j] == 0.25f * (float)(j - 8));
        assert_true(f[16 + j] == 0.25f * (float)(15 - j - 8));
    }
    assert_int_equal(npuc_model_read_f32(ctx, m, 3, f), NPUC_OK);
    for (int j = 0; j < 32; j++) {
        int h = j < 4 || j >= 28; /* qh bits 0-3 and 28-31 */
        int q = (j % 16) | h << 4;
        assert_true(f[j] == 2.0f * (float)q - 1.5f);
    }
    npuc_model_close(m);
}

static void test_every_prefix(void **state) {
    (void)state;
    buf b, p;
    build_valid(&b);
    /* The last tensor (Q5_1, 24 bytes) ends 8 bytes before the file's end,
     * where only padding follows: every shorter prefix cuts something. */
    for (size_t n = 0; n < b.n - 8; n++) {
        memcpy(p.b, b.b, n);
        p.n = n;
        npuc_model *m = (npuc_model *)1;
        npuc_status st = open_buf(&p, "prefix.gguf", &m);
        if (st == NPUC_OK) fail_msg("a %zu-byte prefix of a %zu-byte file opened", n, b.n);
        assert_null(m);
        assert_true(st == NPUC_ERR_FORMAT);
        assert_non_null(strstr(npuc_ctx_errmsg(ctx), "prefix.gguf"));
    }
}

/* Hand-worked blocks for the quantizers (gguf_quant.c's contract). */
static void test_quantize_by_hand(void **state) {
    (void)state;
    float x[32];
    unsigned char blk[34];
    uint64_t bad;
    /* Q8_0: amax 127 -> d = 1 (0x3c00); 2.5 -> 3 and -2.5 -> -3 (half away
     * from zero), 0.49 -> 0. */
    memset(x, 0, sizeof x);
    x[0] = 127.0f;
    x[1] = 2.5f;
    x[2] = -2.5f;
    x[3] = 0.49f;
    x[4] = -126.5f;
    assert_int_equal(npuc__gguf_quantize(NPUC__GGML_Q8_0, x, NPUC_DTYPE_F32, blk, 32, 1, &bad), 0);
    assert_int_equal(blk[0], 0x00);
    assert_int_equal(blk[1], 0x3c);
    assert_int_equal((int8_t)blk[2], 127);
    assert_int_equal((int8_t)blk[3], 3);
    assert_int_equal((int8_t)blk[4], -3);
    assert_int_equal((int8_t)blk[5], 0);
    assert_int_equal((int8_t)blk[6], -127);
    /* Q4_0: the signed max -8 gives d = 1 (0x3c00), 1/d = 1: q = min(15,
     * trunc(x + 8.5)): -8 -> 0, 7.5 -> 15 (16 capped), 0.5 -> 9, -0.5 -> 8,
     * -7.6 -> 0 (trunc 0.9). */
    memset(x, 0, sizeof x);
    x[0] = -8.0f;
    x[16] = 7.5f;
    x[1] = 0.5f;
    x[17] = -0.5f;
    x[2] = -7.6f;
    assert_int_equal(npuc__gguf_quantize(NPUC__GGML_Q4_0, x, NPUC_DTYPE_F32, blk, 32, 1, &bad), 0);
    assert_int_equal(blk[0] | blk[1] << 8, 0x3c00);
    assert_int_equal(blk[2], 0 | 15 << 4);
    assert_int_equal(blk[3], 9 | 8 << 4);
    assert_int_equal(blk[4], 0 | 8 << 4);
    /* An all-zero block: d = 0/-8 = -0.0 (fp16 0x8000), q = trunc(8.5) = 8. */
    memset(x, 0, sizeof x);
    assert_int_equal(npuc__gguf_quantize(NPUC__GGML_Q4_0, x, NPUC_DTYPE_F32, blk, 32, 1, &bad), 0);
    assert_int_equal(blk[0] | blk[1] << 8, 0x8000);
    assert_int_equal(blk[2], 0x88);
    /* A scale beyond fp16 is refused with the block's index. */
    float y[64];
    for (int j = 0; j < 64; j++) y[j] = 1.0f;
    y[40] = 1e7f;
    unsigned char two[68];
    assert_int_equal(npuc__gguf_quantize(NPUC__GGML_Q8_0, y, NPUC_DTYPE_F32, two, 64, 1, &bad), -1);
    assert_int_equal(bad, 1);
}

/* Replays the seed corpus (fuzz/corpus/gguf): each file opens, or fails
 * with an input error naming it; every tensor of one that opens reads. */
static void test_corpus(void **state) {
    (void)state;
    const char *src = getenv("NPUC_SRC");
    if (!src) skip();
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/fuzz/corpus/gguf", src);
    DIR *d = opendir(dir);
    if (!d) skip();
    int seen = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        npuc_model *m = NULL;
        npuc_status st = npuc_model_open(ctx, path, NULL, &m);
        seen++;
        if (st != NPUC_OK) {
            assert_true(npuc_status_is_input_error(st));
            assert_non_null(strstr(npuc_ctx_errmsg(ctx), e->d_name));
            continue;
        }
        for (size_t i = 0; i < npuc_model_count(m); i++) {
            const void *p;
            assert_int_equal(npuc_model_data(ctx, m, i, &p), NPUC_OK);
            npuc_model_release(m, i);
        }
        npuc_model_close(m);
    }
    closedir(d);
    assert_true(seen > 0);
}

static int setup(void **state) {
    (void)state;
    return npuc_ctx_new(&ctx) == NPUC_OK ? 0 : -1;
}
static int teardown(void **state) {
    (void)state;
    npuc_ctx_free(ctx);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_counts), cmocka_unit_test(test_keys),
        cmocka_unit_test(test_tensors),       cmocka_unit_test(test_valid_values),
        cmocka_unit_test(test_every_prefix),  cmocka_unit_test(test_quantize_by_hand),
        cmocka_unit_test(test_corpus),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
