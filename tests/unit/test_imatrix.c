/*
 * test_imatrix.c - llama.cpp importance matrices (formats/gguf/gguf_imatrix.c).
 *
 * Every file is packed byte by byte here from the format descriptions
 * (llama.cpp's tools/imatrix/imatrix.cpp writers, ggml's GGUF
 * specification), independently of npuc's writer; the expected importances
 * are worked by hand (value / ncall in float32; in_sum2 / count, 1 where the
 * count is 0).  Bad files must give NPUC_ERR_FORMAT with one line naming the
 * file and the entry; what llama-quantize tolerates must load with a warning
 * naming it.  The writer's bytes are compared with hand-packed ones, and
 * npuc_imatrix_from_calib is checked against NumPy (skipped without numpy).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf_imatrix.h"
#include "testutil.h"

static npuc_ctx *ctx;

/* ------------------------------------------------------------ a builder */

typedef struct buf {
    unsigned char b[8192];
    size_t n;
} buf;

static void put(buf *b, const void *p, size_t n) {
    assert_true(b->n + n <= sizeof b->b);
    memcpy(b->b + b->n, p, n);
    b->n += n;
}
static void i32(buf *b, int32_t v) {
    for (int i = 0; i < 4; i++) b->b[b->n++] = (unsigned char)((uint32_t)v >> (8 * i));
}
static void u64(buf *b, uint64_t v) {
    for (int i = 0; i < 8; i++) b->b[b->n++] = (unsigned char)(v >> (8 * i));
}
static void f32(buf *b, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    i32(b, (int32_t)u);
}
/* A legacy entry. */
static void entry(buf *b, const char *name, int32_t ncall, int32_t nval, const float *v) {
    i32(b, (int32_t)strlen(name));
    put(b, name, strlen(name));
    i32(b, ncall);
    i32(b, nval);
    for (int32_t i = 0; i < nval; i++) f32(b, v[i]);
}
/* A legacy file of one entry up to its values: a name of nb bytes
 * (embedded NULs allowed), ncall, nval. */
static void one_head(buf *b, const char *name, int32_t nb, int32_t ncall, int32_t nval) {
    b->n = 0;
    i32(b, 1);
    i32(b, nb);
    put(b, name, (size_t)nb);
    i32(b, ncall);
    i32(b, nval);
}
/* A legacy file of that one entry. */
static void one(buf *b, const char *name, int32_t ncall, int32_t nval, const float *v) {
    b->n = 0;
    i32(b, 1);
    entry(b, name, ncall, nval, v);
}
static void trailer(buf *b, int32_t last, const char *dataset) {
    i32(b, last);
    i32(b, (int32_t)strlen(dataset));
    put(b, dataset, strlen(dataset));
}

/* A new context: warnings accumulate on one, and only the first eight are kept. */
static void fresh(void) {
    npuc_ctx_free(ctx);
    assert_int_equal(npuc_ctx_new(&ctx), NPUC_OK);
}

static npuc_status load(const buf *b, const char *name, npuc__imatrix **im) {
    const char *p = npuc_test_path(name);
    npuc_test_write_file(p, b->b, b->n);
    fresh();
    return npuc__imatrix_load(ctx, p, im);
}

static void expect_bad(const buf *b, const char *name, const char *frag) {
    npuc__imatrix *im = (npuc__imatrix *)1;
    npuc_status st = load(b, name, &im);
    const char *msg = npuc_ctx_errmsg(ctx);
    if (st != NPUC_ERR_FORMAT || im != NULL || !strstr(msg, frag) || !strstr(msg, name) || strchr(msg, '\n'))
        fail_msg("%s: status %d, message '%s' (want '%s')", name, st, msg, frag);
}

/* 1 when some warning on ctx contains frag. */
static int warned(const char *frag) {
    for (size_t i = 0; i < npuc_ctx_warning_count(ctx); i++)
        if (strstr(npuc_ctx_warning(ctx, i), frag)) return 1;
    return 0;
}

static const float V3[] = {4.0f, 8.0f, 1.0f};
static const float V6[] = {2.0f, 4.0f, 6.0f, 1.0f, 3.0f, 5.0f};

/* Two entries (a 2-D weight, ncall 3; a MoE weight of 2 experts, ncall 2),
 * then the trailer when with_trailer; *entries_end gets the size before it. */
static void good_legacy(buf *b, int with_trailer, size_t *entries_end) {
    b->n = 0;
    i32(b, 2);
    entry(b, "blk.0.ffn_up_exps.weight", 2, 6, V6);
    entry(b, "blk.0.attn_q.weight", 3, 3, V3);
    if (entries_end) *entries_end = b->n;
    if (with_trailer) trailer(b, 7, "wiki.train.raw");
}

static void test_legacy_good(void **state) {
    (void)state;
    buf b;
    good_legacy(&b, 1, NULL);
    npuc__imatrix *im;
    assert_int_equal(load(&b, "good.dat", &im), NPUC_OK);
    assert_int_equal(npuc_ctx_warning_count(ctx), 0);
    assert_false(npuc__imatrix_is_gguf(im));
    assert_int_equal(npuc__imatrix_count(im), 2);
    assert_string_equal(npuc__imatrix_name(im, 0), "blk.0.attn_q.weight"); /* name order */
    assert_string_equal(npuc__imatrix_name(im, 1), "blk.0.ffn_up_exps.weight");
    assert_string_equal(npuc__imatrix_dataset(im), "wiki.train.raw");
    assert_int_equal(npuc__imatrix_chunks(im), 7);
    /* value / ncall in float32. */
    const float *v = npuc__imatrix_values(im, 0);
    assert_true(v[0] == 4.0f / 3.0f && v[1] == 8.0f / 3.0f && v[2] == 1.0f / 3.0f);
    v = npuc__imatrix_values(im, 1);
    for (int i = 0; i < 6; i++) assert_true(v[i] == V6[i] / 2.0f);

    /* Lookups: exact; without .weight (the entry has it); MoE as 2 x 3. */
    const float *imp;
    assert_int_equal(npuc__imatrix_unmatched_count(im), 2);
    assert_int_equal(npuc__imatrix_lookup(ctx, im, "blk.0.attn_q", NULL, 3, 1, &imp), NPUC_OK);
    assert_ptr_equal(imp, npuc__imatrix_values(im, 0));
    assert_int_equal(npuc__imatrix_unmatched_count(im), 1);
    assert_string_equal(npuc__imatrix_unmatched(im, 0), "blk.0.ffn_up_exps.weight");
    fresh();
    npuc__imatrix_warn_unmatched(ctx, im);
    assert_true(warned("1 imatrix entry matching no tensor: 'blk.0.ffn_up_exps.weight'"));
    assert_int_equal(npuc__imatrix_lookup(ctx, im, "blk.0.ffn_up_exps.weight", NULL, 3, 2, &imp), NPUC_OK);
    assert_ptr_equal(imp, npuc__imatrix_values(im, 1));
    assert_int_equal(npuc__imatrix_unmatched_count(im), 0);
    /* No entry: NULL, no error. */
    assert_int_equal(npuc__imatrix_lookup(ctx, im, "output.weight", NULL, 3, 1, &imp), NPUC_OK);
    assert_null(imp);
    /* The alternative (shortened GGUF) name. */
    assert_int_equal(npuc__imatrix_lookup(ctx, im, "a.very.long.name", "blk.0.attn_q.weight", 3, 1, &imp), NPUC_OK);
    assert_non_null(imp);
    /* A length that does not match: one line naming the file, entry, tensor. */
    imp = V3;
    assert_int_equal(npuc__imatrix_lookup(ctx, im, "blk.0.attn_q.weight", NULL, 4, 1, &imp), NPUC_ERR_FORMAT);
    assert_null(imp);
    const char *msg = npuc_ctx_errmsg(ctx);
    assert_non_null(strstr(msg, "good.dat: entry 'blk.0.attn_q.weight' has 3 values, tensor "
                                "'blk.0.attn_q.weight' needs 4"));
    assert_null(strchr(msg, '\n'));
    assert_int_equal(npuc__imatrix_lookup(ctx, im, "blk.0.ffn_up_exps.weight", NULL, 6, 2, &imp), NPUC_ERR_FORMAT);
    /* Overflowing n_mat * n_per_row is a mismatch, not a wrap. */
    assert_int_equal(npuc__imatrix_lookup(ctx, im, "blk.0.attn_q.weight", NULL, (1ull << 63) + 3, 2, &imp),
                     NPUC_ERR_FORMAT);
    npuc__imatrix_free(im);

    /* token_embd.weight: a mismatch is a warning, as in llama-quantize. */
    one(&b, "token_embd.weight", 1, 3, V3);
    assert_int_equal(load(&b, "embd.dat", &im), NPUC_OK);
    imp = V3;
    assert_int_equal(npuc__imatrix_lookup(ctx, im, "token_embd.weight", NULL, 8, 1, &imp), NPUC_OK);
    assert_null(imp);
    assert_true(warned("quantized without importance, as llama-quantize does for token_embd.weight"));
    /* .weight appended to an entry name without it matches too. */
    npuc__imatrix_free(im);
    one(&b, "fc1", 1, 3, V3);
    assert_int_equal(load(&b, "short.dat", &im), NPUC_OK);
    assert_int_equal(npuc__imatrix_lookup(ctx, im, "fc1.weight", NULL, 3, 1, &imp), NPUC_OK);
    assert_non_null(imp);
    assert_true(npuc__imatrix_mark(im, "fc1.weight", NULL));
    assert_false(npuc__imatrix_mark(im, "fc2.weight", NULL));
    npuc__imatrix_free(im);

    /* Without the trailer. */
    good_legacy(&b, 0, NULL);
    assert_int_equal(load(&b, "notrailer.dat", &im), NPUC_OK);
    assert_string_equal(npuc__imatrix_dataset(im), "");
    assert_int_equal(npuc__imatrix_chunks(im), -1);
    npuc__imatrix_free(im);
}

static void test_legacy_tolerated(void **state) {
    (void)state;
    buf b;
    npuc__imatrix *im;
    /* ncall 0: values undivided. */
    one(&b, "w", 0, 3, V3);
    assert_int_equal(load(&b, "ncall0.dat", &im), NPUC_OK);
    assert_true(warned("ncall0.dat: 1 entry with ncall 0 ('w'): values used undivided"));
    assert_true(npuc__imatrix_values(im, 0)[1] == 8.0f);
    npuc__imatrix_free(im);
    /* A name twice: the last one wins. */
    b.n = 0;
    i32(&b, 3);
    entry(&b, "w", 1, 3, V3);
    entry(&b, "x", 1, 3, V3);
    entry(&b, "w", 2, 3, V3);
    assert_int_equal(load(&b, "dup.dat", &im), NPUC_OK);
    assert_true(warned("dup.dat: 1 entry named twice ('w'): the last one is used"));
    assert_int_equal(npuc__imatrix_count(im), 2);
    assert_true(npuc__imatrix_values(im, 0)[0] == 2.0f);
    npuc__imatrix_free(im);
    /* Bytes after the trailer. */
    good_legacy(&b, 1, NULL);
    i32(&b, 0);
    assert_int_equal(load(&b, "tail.dat", &im), NPUC_OK);
    assert_true(warned("tail.dat: 4 bytes after the dataset name are ignored"));
    npuc__imatrix_free(im);
}

static void test_legacy_bad(void **state) {
    (void)state;
    buf b;
    const float nanv[] = {1.0f, NAN, 2.0f}, infv[] = {INFINITY, 1.0f, 1.0f}, negv[] = {1.0f, 2.0f, -0.5f};
    b.n = 0;
    expect_bad(&b, "empty.dat", "too short");
    i32(&b, 0);
    expect_bad(&b, "zero.dat", "entry count 0: no importance data");
    b.n = 0;
    i32(&b, -5);
    expect_bad(&b, "negcount.dat", "entry count -5");
    b.n = 0;
    i32(&b, 0x7fffffff);
    entry(&b, "w", 1, 3, V3);
    expect_bad(&b, "absurd.dat", "entry count 2147483647 cannot fit the 29-byte file");
    b.n = 0;
    i32(&b, 2);
    entry(&b, "w", 1, 6, V6);
    expect_bad(&b, "missing.dat", "entry #2 of 2: the file ends before it");
    /* Names. */
    static const int32_t LENS[] = {0, -1, 4097};
    for (int k = 0; k < 3; k++) {
        b.n = 0;
        i32(&b, 1);
        i32(&b, LENS[k]);
        put(&b, "abcdefghijklmnopqrstuvwx", 24);
        expect_bad(&b, "namelen.dat", "entry #1: name length");
    }
    b.n = 0;
    i32(&b, 1);
    i32(&b, 30);
    put(&b, "abcdefghijklmnopq", 17);
    expect_bad(&b, "namepast.dat", "entry #1: its 30-byte name runs past the end of the file");
    one_head(&b, "a\0b", 3, 1, 3);
    for (int i = 0; i < 3; i++) f32(&b, 1.0f);
    expect_bad(&b, "nul.dat", "entry #1: the name is not UTF-8 text without NUL");
    one_head(&b, "\xff\xfe", 2, 1, 1);
    f32(&b, 1.0f);
    for (int i = 0; i < 3; i++) i32(&b, 0);
    expect_bad(&b, "utf8.dat", "entry #1: the name is not UTF-8");
    /* Counts and values. */
    one(&b, "w", -1, 3, V3);
    expect_bad(&b, "negcall.dat", "entry 'w': ncall -1 is negative");
    one(&b, "w", 1, 0, V3);
    for (int i = 0; i < 3; i++) i32(&b, 0);
    expect_bad(&b, "nval0.dat", "entry 'w': 0 values");
    one(&b, "w", 1, -3, V3);
    for (int i = 0; i < 3; i++) i32(&b, 0);
    expect_bad(&b, "nvalneg.dat", "entry 'w': -3 values");
    one(&b, "w", 1, 3, V3);
    b.n -= 4;
    expect_bad(&b, "truncval.dat", "entry 'w': 3 values run past the end of the file (8 bytes left)");
    one_head(&b, "w", 1, 1, 0x40000000);
    for (int i = 0; i < 4; i++) f32(&b, 1.0f);
    expect_bad(&b, "hugeval.dat", "entry 'w': 1073741824 values run past the end of the file");
    one(&b, "w", 1, 3, nanv);
    expect_bad(&b, "nan.dat", "entry 'w': value 1 is NaN");
    one(&b, "w", 1, 3, infv);
    expect_bad(&b, "inf.dat", "entry 'w': value 0 is infinite");
    one(&b, "w", 1, 3, negv);
    expect_bad(&b, "neg.dat", "entry 'w': value 2 is negative");
    /* The trailer. */
    good_legacy(&b, 0, NULL);
    i32(&b, 7);
    expect_bad(&b, "trail4.dat", "4 bytes after the entries: a truncated trailer");
    good_legacy(&b, 0, NULL);
    i32(&b, 7);
    i32(&b, 100);
    put(&b, "abc", 3);
    expect_bad(&b, "traillen.dat", "dataset name length 100 does not fit the 3 bytes left");
    good_legacy(&b, 0, NULL);
    trailer(&b, -2, "x");
    expect_bad(&b, "traillast.dat", "last call -2 is negative");

    /* Every prefix of a valid file: only the whole file and the one that
     * ends with the entries load; the others fail with one line. */
    size_t end;
    good_legacy(&b, 1, &end);
    const size_t full = b.n;
    for (size_t n = 0; n <= full; n++) {
        buf p = b;
        p.n = n;
        npuc__imatrix *im = NULL;
        npuc_status st = load(&p, "prefix.dat", &im);
        if (n == full || n == end) {
            assert_int_equal(st, NPUC_OK);
            npuc__imatrix_free(im);
        } else {
            if (st != NPUC_ERR_FORMAT || im || strchr(npuc_ctx_errmsg(ctx), '\n'))
                fail_msg("prefix of %zu bytes: status %d, '%s'", n, st, npuc_ctx_errmsg(ctx));
        }
    }
    /* A missing file. */
    npuc__imatrix *im = (npuc__imatrix *)1;
    assert_int_equal(npuc__imatrix_load(ctx, npuc_test_path("no-such.dat"), &im), NPUC_ERR_NOT_FOUND);
    assert_null(im);
}

/* ------------------------------------------------------------- GGUF */

static void gstr(buf *b, const char *s) {
    u64(b, strlen(s));
    put(b, s, strlen(s));
}

typedef struct gt {
    const char *name;
    uint64_t ne0, ne1;
    uint32_t type;    /* 0 F32, 1 F16 */
    const float *v;   /* ne0 * ne1 values */
} gt;

/* A GGUF v3 imatrix file: general.type, imatrix.datasets, and the chunk
 * keys when chunks, then the tensors (2 dims each), data aligned to 32. */
static void gguf_file(buf *b, const gt *t, size_t nt, int chunks) {
    b->n = 0;
    put(b, "GGUF", 4);
    i32(b, 3);
    u64(b, nt);
    u64(b, chunks ? 4 : 2);
    gstr(b, "general.type");
    i32(b, 8);
    gstr(b, "imatrix");
    gstr(b, "imatrix.datasets");
    i32(b, 9);
    i32(b, 8);
    u64(b, 1);
    gstr(b, "wiki.train.raw");
    if (chunks) {
        gstr(b, "imatrix.chunk_count");
        i32(b, 4);
        i32(b, 12);
        gstr(b, "imatrix.chunk_size");
        i32(b, 4);
        i32(b, 512);
    }
    uint64_t off = 0;
    for (size_t i = 0; i < nt; i++) {
        gstr(b, t[i].name);
        i32(b, 2);
        u64(b, t[i].ne0);
        u64(b, t[i].ne1);
        i32(b, (int32_t)t[i].type);
        u64(b, off);
        uint64_t nb = t[i].ne0 * t[i].ne1 * (t[i].type ? 2 : 4);
        off += (nb + 31) / 32 * 32;
    }
    while (b->n % 32) b->b[b->n++] = 0;
    for (size_t i = 0; i < nt; i++) {
        size_t start = b->n;
        for (uint64_t k = 0; k < t[i].ne0 * t[i].ne1; k++) {
            if (t[i].type == 0) f32(b, t[i].v[k]);
            else {
                b->b[b->n++] = 0;
                b->b[b->n++] = 0x3c; /* fp16 1.0 */
            }
        }
        while ((b->n - start) % 32) b->b[b->n++] = 0;
    }
}

static void test_gguf_good(void **state) {
    (void)state;
    static const float S2[] = {8.0f, 4.0f, 2.0f}, C2[] = {4.0f};
    static const float SM[] = {3.0f, 6.0f, 9.0f, 5.0f, 5.0f, 5.0f}, CM[] = {3.0f, 0.0f};
    static const float OTHER[] = {1.0f};
    const gt T[] = {
        {"blk.0.attn_q.weight.counts", 1, 1, 0, C2},
        {"blk.0.ffn_up_exps.weight.in_sum2", 3, 2, 0, SM},
        {"blk.0.attn_q.weight.in_sum2", 3, 1, 0, S2},
        {"blk.0.ffn_up_exps.weight.counts", 1, 2, 0, CM},
        {"other", 1, 1, 0, OTHER},
    };
    buf b;
    gguf_file(&b, T, 5, 1);
    npuc__imatrix *im;
    assert_int_equal(load(&b, "good.gguf", &im), NPUC_OK);
    assert_true(npuc__imatrix_is_gguf(im));
    assert_int_equal(npuc__imatrix_chunks(im), 12);
    assert_int_equal(npuc__imatrix_count(im), 2);
    assert_string_equal(npuc__imatrix_name(im, 0), "blk.0.attn_q.weight");
    assert_int_equal(npuc__imatrix_len(im, 0), 3);
    const float *v = npuc__imatrix_values(im, 0);
    assert_true(v[0] == 2.0f && v[1] == 1.0f && v[2] == 0.5f);
    /* Expert 0: sums / 3; expert 1 never reached (count 0): all 1. */
    v = npuc__imatrix_values(im, 1);
    assert_int_equal(npuc__imatrix_len(im, 1), 6);
    assert_true(v[0] == 1.0f && v[1] == 2.0f && v[2] == 3.0f && v[3] == 1.0f && v[4] == 1.0f && v[5] == 1.0f);
    assert_true(warned("good.gguf: 1 entry with a count of 0 (partial data: 'blk.0.ffn_up_exps.weight')"));
    const float *imp;
    assert_int_equal(npuc__imatrix_lookup(ctx, im, "blk.0.ffn_up_exps.weight", NULL, 3, 2, &imp), NPUC_OK);
    assert_ptr_equal(imp, v);
    assert_int_equal(npuc__imatrix_lookup(ctx, im, "blk.0.ffn_up_exps.weight", NULL, 6, 1, &imp), NPUC_OK);
    assert_ptr_equal(imp, v); /* llama.cpp compares the total, ne[0] * ne[2] */
    assert_int_equal(npuc__imatrix_lookup(ctx, im, "blk.0.attn_q.weight", NULL, 4, 1, &imp), NPUC_ERR_FORMAT);
    npuc__imatrix_free(im);
}

static void gguf_bad(const gt *t, size_t nt, int chunks, const char *name, const char *frag) {
    buf b;
    gguf_file(&b, t, nt, chunks);
    expect_bad(&b, name, frag);
}

static void test_gguf_bad(void **state) {
    (void)state;
    static const float S[] = {8.0f, 4.0f, 2.0f, 1.0f, 1.0f, 1.0f}, C1[] = {4.0f}, C2[] = {4.0f, 2.0f};
    static const float CNEG[] = {-1.0f}, CNAN[] = {NAN}, SNAN[] = {1.0f, NAN, 1.0f}, SNEG[] = {1.0f, -1.0f, 1.0f};
    static const float SBIG[] = {3e38f, 1.0f, 1.0f}, CTINY[] = {1e-30f};
    const gt ok[] = {{"w.in_sum2", 3, 1, 0, S}, {"w.counts", 1, 1, 0, C1}};
    gguf_bad(ok, 2, 0, "nochunks.gguf", "without imatrix.chunk_count and imatrix.chunk_size");
    gguf_bad(ok, 1, 1, "nocounts.gguf", "entry 'w': a .in_sum2 tensor without .counts");
    gguf_bad(ok + 1, 1, 1, "nosums.gguf", "entry 'w': a .counts tensor without .in_sum2");
    const gt none[] = {{"x", 3, 1, 0, S}};
    gguf_bad(none, 1, 1, "nopairs.gguf", "no <tensor>.in_sum2 / <tensor>.counts pairs");
    const gt ncnt[] = {{"w.in_sum2", 3, 1, 0, S}, {"w.counts", 1, 2, 0, C2}};
    gguf_bad(ncnt, 2, 1, "ncounts.gguf", "entry 'w': .counts has 2 values, .in_sum2 1 matrices");
    const gt f16[] = {{"w.in_sum2", 3, 1, 1, S}, {"w.counts", 1, 1, 0, C1}};
    gguf_bad(f16, 2, 1, "f16.gguf", "entry 'w': .in_sum2 and .counts must be F32");
    const gt cneg[] = {{"w.in_sum2", 3, 1, 0, S}, {"w.counts", 1, 1, 0, CNEG}};
    gguf_bad(cneg, 2, 1, "cneg.gguf", "entry 'w': count 0 is -1");
    const gt cnan[] = {{"w.in_sum2", 3, 1, 0, S}, {"w.counts", 1, 1, 0, CNAN}};
    gguf_bad(cnan, 2, 1, "cnan.gguf", "entry 'w': count 0 is");
    const gt snan[] = {{"w.in_sum2", 3, 1, 0, SNAN}, {"w.counts", 1, 1, 0, C1}};
    gguf_bad(snan, 2, 1, "snan.gguf", "entry 'w': in_sum2 value 1 is NaN");
    const gt sneg[] = {{"w.in_sum2", 3, 1, 0, SNEG}, {"w.counts", 1, 1, 0, C1}};
    gguf_bad(sneg, 2, 1, "sneg.gguf", "entry 'w': in_sum2 value 1 is negative");
    const gt sbig[] = {{"w.in_sum2", 3, 1, 0, SBIG}, {"w.counts", 1, 1, 0, CTINY}};
    gguf_bad(sbig, 2, 1, "sbig.gguf", "entry 'w': in_sum2 value 0 divided by the count");
    /* A malformed GGUF: the reader's message. */
    buf b;
    gguf_file(&b, ok, 2, 1);
    b.n -= 40;
    npuc__imatrix *im = (npuc__imatrix *)1;
    assert_int_not_equal(load(&b, "trunc.gguf", &im), NPUC_OK);
    assert_null(im);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "trunc.gguf"));
}

/* ------------------------------------------------------------- writer */

static void test_writer(void **state) {
    (void)state;
    const float a[] = {6.0f, 3.0f}, c[] = {1.5f};
    const npuc__imatrix_out e[] = {{"fc1.weight", 3, 2, a}, {"blk.1.ffn_down.weight", 1, 1, c}};
    const char *p = npuc_test_path("w.dat");
    assert_int_equal(npuc__imatrix_write_dat(ctx, p, 0, e, 2, 3, "calib.safetensors"), NPUC_OK);
    buf want = {.n = 0};
    i32(&want, 2);
    entry(&want, "fc1.weight", 3, 2, a);
    entry(&want, "blk.1.ffn_down.weight", 1, 1, c);
    trailer(&want, 3, "calib.safetensors");
    size_t n;
    unsigned char *got = npuc_test_read_file(p, &n);
    assert_int_equal(n, want.n);
    assert_memory_equal(got, want.b, n);
    free(got);
    npuc__imatrix *im;
    assert_int_equal(npuc__imatrix_load(ctx, p, &im), NPUC_OK);
    assert_true(npuc__imatrix_values(im, 1)[0] == 2.0f && npuc__imatrix_values(im, 1)[1] == 1.0f);
    npuc__imatrix_free(im);
    /* An existing output, bad entries: refused, the file unchanged. */
    assert_int_equal(npuc__imatrix_write_dat(ctx, p, 0, e, 2, 3, "x"), NPUC_ERR_EXISTS);
    const float nanv[] = {NAN};
    const npuc__imatrix_out bad[] = {{"w", 1, 1, nanv}, {"", 1, 1, c}, {"w", 0, 1, c}};
    for (int k = 0; k < 3; k++) assert_int_equal(npuc__imatrix_write_dat(ctx, p, 1, &bad[k], 1, 1, ""), NPUC_ERR_ARG);
    got = npuc_test_read_file(p, &n);
    assert_int_equal(n, want.n);
    free(got);
}

/* npuc_imatrix_from_calib against NumPy: Python writes calibration rows
 * (F32 and F16, rank 2 and 3, one weight split over two files) and the
 * expected means in float64; the written file is read back by the legacy
 * reader. */
static void test_from_calib_numpy(void **state) {
    (void)state;
    const char *py = getenv("NPUC_PYTHON");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s -c 'import numpy' 2>/dev/null", py && *py ? py : "python3");
    if (system(cmd) != 0) {
        print_message("SKIP: numpy is not available to %s\n", py && *py ? py : "python3");
        skip();
    }
    const char *dir = npuc_test_tmpdir();
    FILE *f = fopen(npuc_test_path("mk.py"), "w");
    assert_non_null(f);
    fputs("import json, struct, sys\n"
          "import numpy as np\n"
          "d = sys.argv[1]\n"
          "def st(path, ts):\n"
          "    hdr, off, blobs = {}, 0, []\n"
          "    for n, a in ts:\n"
          "        b = np.ascontiguousarray(a).tobytes()\n"
          "        hdr[n] = {'dtype': {'float32': 'F32', 'float16': 'F16'}[str(a.dtype)], 'shape': list(a.shape),\n"
          "                  'data_offsets': [off, off + len(b)]}\n"
          "        off += len(b); blobs.append(b)\n"
          "    h = json.dumps(hdr).encode(); h += b' ' * ((8 - len(h) % 8) % 8)\n"
          "    open(path, 'wb').write(struct.pack('<Q', len(h)) + h + b''.join(blobs))\n"
          "r = np.random.default_rng(5)\n"
          "a = (r.standard_t(2, size=(1000, 33)) * 50).astype(np.float32)\n"
          "b1 = r.standard_normal((3, 7, 16)).astype(np.float16)\n"
          "b2 = r.standard_normal((5, 16)).astype(np.float16)\n"
          "st(d + '/c1.safetensors', [('a.weight.input', a), ('b.input', b1)])\n"
          "st(d + '/c2.safetensors', [('b.input', b2)])\n"
          "ma = np.mean(a.astype(np.float64) ** 2, axis=0)\n"
          "mb = np.mean(np.concatenate([b1.reshape(-1, 16), b2]).astype(np.float64) ** 2, axis=0)\n"
          "open(d + '/expect.f64', 'wb').write(np.concatenate([ma, mb]).astype('<f8').tobytes())\n",
          f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s '%s' '%s'", py && *py ? py : "python3", npuc_test_path("mk.py"), dir);
    assert_int_equal(system(cmd), 0);
    npuc_model *m[2];
    assert_int_equal(npuc_model_open(ctx, npuc_test_path("c1.safetensors"), NULL, &m[0]), NPUC_OK);
    assert_int_equal(npuc_model_open(ctx, npuc_test_path("c2.safetensors"), NULL, &m[1]), NPUC_OK);
    size_t ne = 0;
    const char *out = npuc_test_path("calib.dat");
    assert_int_equal(npuc_imatrix_from_calib(ctx, m, 2, out, 1, &ne), NPUC_OK);
    assert_int_equal(ne, 2);
    size_t n;
    double *exp = npuc_test_read_file(npuc_test_path("expect.f64"), &n);
    assert_int_equal(n, (33 + 16) * 8);
    npuc__imatrix *im;
    assert_int_equal(npuc__imatrix_load(ctx, out, &im), NPUC_OK);
    assert_int_equal(npuc__imatrix_count(im), 2);
    assert_string_equal(npuc__imatrix_name(im, 0), "a.weight");
    assert_string_equal(npuc__imatrix_name(im, 1), "b");
    assert_int_equal(npuc__imatrix_len(im, 0), 33);
    assert_int_equal(npuc__imatrix_len(im, 1), 16);
    assert_int_equal(npuc__imatrix_chunks(im), 1000);
    for (int k = 0; k < 49; k++) {
        const float got = k < 33 ? npuc__imatrix_values(im, 0)[k] : npuc__imatrix_values(im, 1)[k - 33];
        /* float32 sum stored, divided in float32: two roundings. */
        assert_close(got, exp[k], 3e-7, 0);
    }
    npuc__imatrix_free(im);
    free(exp);
    /* No .input rows: NOT_FOUND, nothing written. */
    const char *none = npuc_test_path("none.dat");
    assert_int_equal(npuc_imatrix_from_calib(ctx, &m[0], 0, none, 1, &ne), NPUC_ERR_ARG);
    npuc_model_close(m[0]);
    npuc_model_close(m[1]);
    assert_false(npuc_test_exists(none));
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
        cmocka_unit_test(test_legacy_good), cmocka_unit_test(test_legacy_tolerated),
        cmocka_unit_test(test_legacy_bad),  cmocka_unit_test(test_gguf_good),
        cmocka_unit_test(test_gguf_bad),    cmocka_unit_test(test_writer),
        cmocka_unit_test(test_from_calib_numpy),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
