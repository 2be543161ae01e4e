/*
 * gguf_writer.c - the GGUF writer: version 3, alignment 32, the legacy and
 * K block types byte-identical to ggml's quantizers (gguf_quant.c).
 *
 * The header holds every tensor's type, dims and offset, so begin() decides
 * each tensor's ggml type from the "gguf-type" option and the tensor alone,
 * the way `llama-quantize --pure` does:
 *   - float tensors of rank >= 2 get the chosen type; rank 0 and 1 (biases,
 *     norms) stay F32, as llama.cpp's converters and quantizer keep them;
 *   - a legacy block type needs ne[0] (the last npuc dimension: GGUF lists
 *     dims innermost first) to be a multiple of 32, else the tensor stays
 *     F32 and the context gets a warning naming it (npuc__ctx_warn);
 *   - a K type needs ne[0] to be a multiple of 256, else the tensor falls
 *     back as llama-quantize's llama_tensor_get_type does: Q4_K -> Q5_0,
 *     Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K and Q3_K -> Q4_0 (llama-quantize
 *     uses IQ4_NL, which npuc does not write; Q4_0 is the 4.5-bit 32-block
 *     type nearest to it), and to F16 when ne[0] is not a multiple of 32
 *     either; every such tensor gets its own warning;
 *   - integer tensors keep their type (I8, I16, I32, I64); unsigned and
 *     bool ones have no GGUF type and are refused.
 * A llama.cpp mix ("gguf-type" q2_k .. q6_k) or "gguf-tensor-type" rules
 * replace the one type by a per-tensor plan (gguf_mix_plan.c, gguf_mix.c:
 * llama-quantize's choice by role and layer), and the metadata entry
 * NPUC__GGUF_TYPES_KEY (quantize's budget, docs/budget.md) names the type of
 * each tensor it lists (read, not written); a planned type this build
 * cannot write (a K type without its kernels) is refused as unsupported.
 * Payloads then stream through in declaration order, converted and
 * quantized in chunks of whole blocks, each padded to the alignment.
 *
 * Keys written (docs/gguf.md): general.architecture (option "gguf-arch"),
 * general.alignment = 32, general.file_type (llama.cpp's LLAMA_FTYPE of the
 * chosen type), general.quantization_version = 2, then every metadata entry
 * of the source as a string under "npuc." + its key, and, when a name was
 * shortened, npuc.gguf.long_names: [short, full, short, full, ...].
 *
 * Option "imatrix" (a llama.cpp importance matrix, gguf_imatrix.h): loaded
 * once in begin(), every tensor stored in a block type gets its importance
 * row by name, a length that does not match is refused, and the call site
 * in ggw_write marks where the weighted quantizers will take it (not yet:
 * the bytes are those without importance).
 *
 * npuc artifacts whose "npuc" entry describes encoded tensors are refused:
 * their parts are codes and scales only npuc can read.  Fake-quantized
 * tensors are dense and are written like any other.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "gguf_format.h"
#include "gguf_mix.h"
#include "gguf_imatrix.h"
#include "strmap.h"

/* Elements converted (plain types) or quantized (block types) at a time:
 * multiples of the block.  A block type's chunk is one parallel region of
 * the quantizer; it is large (64 MiB of float32, a 4096x4096 matrix at
 * once) because between regions, while this thread reads the next tensor
 * or writes this one, the other OpenMP threads spin and then sleep, and
 * with 1 MiB chunks that idling cost 40% of the CPU time (perf). */
#define GGW_CHUNK (32u * 32768u)
#define GGW_QCHUNK (32u * 524288u)
#define GGW_OUT_BYTES (GGW_QCHUNK / 32u * 34u) /* >= GGW_CHUNK * 8 and any block chunk */

typedef struct ggw_tensor {
    int type;
    char name[NPUC__GGUF_NAME_MAX + 1];
    uint64_t nbytes, offset;
    /* With an importance matrix ("imatrix" option), for a tensor stored in a
     * block type: n_mat(t) matrices of row input columns, n_mat * row
     * floats owned by the state's imatrix; NULL without an entry. */
    const float *imp;
} ggw_tensor;

typedef struct ggw_state {
    FILE *f;
    ggw_tensor *t;
    unsigned char *out; /* one converted chunk */
    npuc__imatrix *im;  /* the "imatrix" option's file, or NULL */
} ggw_state;

typedef struct ggw_buf {
    unsigned char *p;
    size_t n, cap;
    int oom;
} ggw_buf;

static void put(ggw_buf *b, const void *src, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t c = b->cap ? b->cap : 4096;
        while (c < b->n + n) c *= 2;
        unsigned char *q = realloc(b->p, c);
        if (!q) { b->oom = 1; return; }
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_u32(ggw_buf *b, uint32_t v) {
    unsigned char x[4];
    for (int i = 0; i < 4; i++) x[i] = (unsigned char)(v >> (8 * i));
    put(b, x, 4);
}

static void put_u64(ggw_buf *b, uint64_t v) {
    unsigned char x[8];
    for (int i = 0; i < 8; i++) x[i] = (unsigned char)(v >> (8 * i));
    put(b, x, 8);
}

static void put_str(ggw_buf *b, const char *s) {
    size_t n = strlen(s);
    put_u64(b, n);
    put(b, s, n);
}

enum { GGUF_T_U32 = 4, GGUF_T_STRING = 8, GGUF_T_ARRAY = 9 };

static void kv_u32(ggw_buf *b, const char *k, uint32_t v) {
    put_str(b, k);
    put_u32(b, GGUF_T_U32);
    put_u32(b, v);
}

static void kv_str(ggw_buf *b, const char *k, const char *v) {
    put_str(b, k);
    put_u32(b, GGUF_T_STRING);
    put_str(b, v);
}

/* Output goes through stdio: the header's many small pieces and the
 * per-chunk payloads alike are buffered, and ggw_finish flushes and fsyncs. */
static npuc_status out(npuc_writer *w, FILE *f, const void *p, size_t n, const char *what) {
    if (n && fwrite(p, 1, n, f) != n)
        return npuc_fail(w->ctx, NPUC_ERR_IO, "%s: writing %s: %s", w->path, what, strerror(errno));
    const off_t at = ftello(f); /* the writeback of what is written (writeback.c) */
    return at < 0 ? NPUC_OK : npuc__writer_wrote(w, fileno(f), (uint64_t)at);
}

static npuc_status pad(npuc_writer *w, FILE *f, uint64_t n, const char *what) {
    static const unsigned char Z[NPUC__GGUF_ALIGN];
    uint64_t r = n % NPUC__GGUF_ALIGN;
    return r ? out(w, f, Z, (size_t)(NPUC__GGUF_ALIGN - r), what) : NPUC_OK;
}

/* FNV-1a, 32 bits: the tag of a shortened name (docs/gguf.md). */
static uint32_t fnv1a(const char *s) {
    return npuc__fnv1a32(s); /* core/strmap.h: the one FNV-1a */
}

/* GGUF names hold at most 63 bytes.  A longer name keeps its first bytes
 * (cut on a UTF-8 character boundary, at most 54) followed by "~" and the
 * 8 hex digits of its FNV-1a hash; returns 1 when it was shortened. */
static int gguf_name(const char *name, char out[NPUC__GGUF_NAME_MAX + 1]) {
    size_t n = strlen(name);
    if (n <= NPUC__GGUF_NAME_MAX) {
        memcpy(out, name, n + 1);
        return 0;
    }
    size_t keep = NPUC__GGUF_NAME_MAX - 9;
    while (keep > 0 && ((unsigned char)name[keep] & 0xc0) == 0x80) keep--;
    snprintf(out, NPUC__GGUF_NAME_MAX + 1, "%.*s~%08x", (int)keep, name, (unsigned)fnv1a(name));
    return 1;
}

/* llama.cpp's LLAMA_FTYPE for a file "mostly" of ggml type id. */
static uint32_t file_type(int id) {
    switch (id) {
    case NPUC__GGML_F16: return 1;
    case NPUC__GGML_Q4_0: return 2;
    case NPUC__GGML_Q4_1: return 3;
    case NPUC__GGML_Q8_0: return 7;
    case NPUC__GGML_Q5_0: return 8;
    case NPUC__GGML_Q5_1: return 9;
    /* A file all of one K type: the _S ("small") mix's number, the mix
     * closest to a uniform type (Q2_K and Q6_K have one ftype each). */
    case NPUC__GGML_Q2_K: return 10;
    case NPUC__GGML_Q3_K: return 11;
    case NPUC__GGML_Q4_K: return 14;
    case NPUC__GGML_Q5_K: return 16;
    case NPUC__GGML_Q6_K: return 18;
    case NPUC__GGML_BF16: return 32;
    default: return 0; /* ALL_F32 */
    }
}

/* Metadata the writer sets itself, so a GGUF source's copies are dropped. */
static int regenerated(const char *k) {
    static const char *const KEYS[] = {"gguf.general.architecture", "gguf.general.alignment",
                                       "gguf.general.file_type", "gguf.general.quantization_version",
                                       NPUC__GGUF_TYPES_KEY};
    for (size_t i = 0; i < sizeof KEYS / sizeof KEYS[0]; i++)
        if (strcmp(k, KEYS[i]) == 0) return 1;
    return 0;
}

/* The ggml type tensor t is stored as, or -1 (message in ctx). */
static int plan_type(npuc_writer *w, const npuc_tensor_info *t, int want, size_t *nkept,
                     const char **kept_first) {
    if (t->rank > NPUC__GGUF_MAX_DIMS) {
        npuc_fail(w->ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s': rank %d, GGUF tensors have at most %d dims",
                  w->path, t->name, t->rank, NPUC__GGUF_MAX_DIMS);
        return -1;
    }
    if (!npuc_dtype_is_float(t->dtype)) {
        switch (t->dtype) {
        case NPUC_DTYPE_I8: return NPUC__GGML_I8;
        case NPUC_DTYPE_I16: return NPUC__GGML_I16;
        case NPUC_DTYPE_I32: return NPUC__GGML_I32;
        case NPUC_DTYPE_I64: return NPUC__GGML_I64;
        default:
            npuc_fail(w->ctx, NPUC_ERR_UNSUPPORTED,
                      "%s: tensor '%s': dtype %s has no GGUF type (GGUF holds floats and I8, I16, I32, I64)",
                      w->path, t->name, npuc_dtype_name(t->dtype));
            return -1;
        }
    }
    if (t->rank < 2) return NPUC__GGML_F32;
    const npuc__ggml_type *g = npuc__ggml_type_by_id((uint32_t)want);
    if (!g->known) {
        npuc_fail(w->ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s': ggml type %s is not supported by this build of npuc",
                  w->path, t->name, g->name);
        return -1;
    }
    const int64_t row = t->shape[t->rank - 1];
    if (npuc__gguf_is_ktype(want) && row % g->blck != 0) {
        const int to = npuc__gguf_k_fallback(want, row);
        npuc__ctx_warn(w->ctx,
                       "%s: tensor '%s': written as %s, not %s: its rows (GGUF ne[0] = %lld) are not a multiple "
                       "of 256 (llama-quantize's fallback%s)",
                       w->path, t->name, npuc__ggml_type_by_id((uint32_t)to)->name, g->name, (long long)row,
                       to == NPUC__GGML_F16 ? ", rows not a multiple of 32 either"
                       : to == NPUC__GGML_Q4_0 ? ", which is IQ4_NL there; npuc writes the nearest type it has"
                                               : "");
        return to;
    }
    if (g->blck > 1 && row % g->blck != 0) {
        if ((*nkept)++ == 0) *kept_first = t->name;
        return NPUC__GGML_F32;
    }
    return want;
}

/* 1 when w's "npuc" artifact entry describes a tensor that is not declared
 * as itself, dense, with its original shape: its codes, scales or factors
 * are parts only npuc decodes.  Dense entries (fake quantization) are
 * plain weights and may be written. */
static int has_encoded_tensors(const npuc_writer *w) {
    for (size_t i = 0; i < w->nmeta; i++) {
        if (strcmp(w->meta_k[i], "npuc") != 0) continue;
        json_t *root = json_loads(w->meta_v[i], 0, NULL), *ts = json_object_get(root, "tensors");
        const char *name;
        json_t *e;
        int encoded = 0;
        json_object_foreach(ts, name, e) {
            const json_t *shape = json_object_get(e, "shape");
            size_t k = 0;
            while (k < w->n && strcmp(w->t[k].name, name) != 0) k++;
            int same = k < w->n && npuc_dtype_is_float(w->t[k].dtype) && json_is_array(shape) &&
                       json_array_size(shape) == (size_t)w->t[k].rank;
            for (int d = 0; same && d < w->t[k].rank; d++)
                same = json_integer_value(json_array_get(shape, (size_t)d)) == w->t[k].shape[d];
            if (!same) encoded = 1;
        }
        json_decref(root);
        if (encoded) return 1;
    }
    return 0;
}

static npuc_status build_header(npuc_writer *w, ggw_state *s, ggw_buf *b) {
    int want = npuc__gguf_writer_type(w);
    /* A llama.cpp mix or --gguf-tensor-type rules: each tensor's type from
     * the plan (gguf_mix_plan.c), else `want` for every tensor. */
    const int mix = npuc__gguf_writer_mix(w);
    const char *rules = npuc__writer_opt(w, "gguf-tensor-type");
    int *planned = NULL;
    if (mix || rules) {
        npuc_status pst;
        if (!(planned = malloc((w->n ? w->n : 1) * sizeof *planned)))
            return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
        if ((pst = npuc__gguf_plan(w->ctx, w->path, mix, want, rules, (const char *const *)w->meta_k,
                                   (const char *const *)w->meta_v, w->nmeta, w->t, w->n, planned, NULL)) != NPUC_OK) {
            free(planned);
            return pst;
        }
    }
    /* Per-tensor types chosen by a budget (NPUC__GGUF_TYPES_KEY): they
     * replace the plan's or the one type for the tensors they name. */
    const char *chosen = NULL;
    for (size_t i = 0; i < w->nmeta; i++)
        if (strcmp(w->meta_k[i], NPUC__GGUF_TYPES_KEY) == 0) chosen = w->meta_v[i];
    if (chosen) {
        json_t *map = json_loads(chosen, 0, NULL);
        if (!json_is_object(map)) {
            json_decref(map);
            free(planned);
            return npuc_fail(w->ctx, NPUC_ERR_INTERNAL, "%s: malformed %s entry", w->path, NPUC__GGUF_TYPES_KEY);
        }
        if (!planned && !(planned = malloc((w->n ? w->n : 1) * sizeof *planned))) {
            json_decref(map);
            return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
        }
        for (size_t i = 0; i < w->n; i++) {
            const json_t *v = json_object_get(map, w->t[i].name);
            if (json_is_integer(v)) planned[i] = (int)json_integer_value(v);
            else if (!mix && !rules) planned[i] = want;
        }
        json_decref(map);
    }
    const char *arch = npuc__writer_opt(w, "gguf-arch");
    size_t nkept = 0, nlong = 0;
    const char *kept_first = NULL;
    uint64_t off = 0;
    for (size_t i = 0; i < w->n; i++) {
        const npuc_tensor_info *t = &w->t[i];
        ggw_tensor *g = &s->t[i];
        g->type = plan_type(w, t, planned ? planned[i] : want, &nkept, &kept_first);
        if (g->type < 0) {
            free(planned);
            return npuc_ctx_errcode(w->ctx);
        }
        const npuc__ggml_type *gt = npuc__ggml_type_by_id((uint32_t)g->type);
        uint64_t row = t->rank ? (uint64_t)t->shape[t->rank - 1] : 1, padded;
        if (npuc__gguf_nbytes(gt, row, t->numel, &g->nbytes) != 0 ||
            npuc_add_overflow(g->nbytes, NPUC__GGUF_ALIGN - 1, &padded)) {
            free(planned);
            return npuc_fail(w->ctx, NPUC_ERR_OVERFLOW, "%s: tensor '%s': size overflows", w->path, t->name);
        }
        g->offset = off;
        if (npuc_add_overflow(off, padded / NPUC__GGUF_ALIGN * NPUC__GGUF_ALIGN, &off)) {
            free(planned);
            return npuc_fail(w->ctx, NPUC_ERR_OVERFLOW, "%s: total size overflows", w->path);
        }
        nlong += (size_t)gguf_name(t->name, g->name);
    }
    free(planned);
    /* Shortened names must stay distinct from every other name. */
    for (size_t i = 0; nlong && i < w->n; i++) {
        if (strcmp(s->t[i].name, w->t[i].name) == 0) continue;
        for (size_t j = 0; j < w->n; j++)
            if (j != i && strcmp(s->t[i].name, s->t[j].name) == 0)
                return npuc_fail(w->ctx, NPUC_ERR_ARG,
                                 "%s: tensor '%s': its shortened GGUF name '%s' collides with tensor '%s'",
                                 w->path, w->t[i].name, s->t[i].name, w->t[j].name);
    }
    if (nkept) {
        const npuc__ggml_type *gt = npuc__ggml_type_by_id((uint32_t)want);
        npuc__ctx_warn(w->ctx,
                       "%s: %zu tensor%s kept as F32, not %s: the last dimension (GGUF ne[0]) is not a "
                       "multiple of %u (first: '%s')",
                       w->path, nkept, nkept == 1 ? "" : "s", gt->name, gt->blck, kept_first);
    }

    size_t nsrc = 0;
    for (size_t i = 0; i < w->nmeta; i++) nsrc += !regenerated(w->meta_k[i]);
    put(b, NPUC__GGUF_MAGIC, 4);
    put_u32(b, NPUC__GGUF_VERSION);
    put_u64(b, w->n);
    put_u64(b, 4 + nsrc + (nlong ? 1 : 0));
    kv_str(b, "general.architecture", arch ? arch : "npuc");
    kv_u32(b, "general.alignment", NPUC__GGUF_ALIGN);
    kv_u32(b, "general.file_type", mix ? npuc__gguf_mix_ftype(mix) : file_type(want));
    kv_u32(b, "general.quantization_version", 2);
    for (size_t i = 0; i < w->nmeta; i++) {
        if (regenerated(w->meta_k[i])) continue;
        size_t kl = strlen(w->meta_k[i]);
        char *k = malloc(kl + 6);
        if (!k) return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
        memcpy(k, "npuc.", 5);
        memcpy(k + 5, w->meta_k[i], kl + 1);
        kv_str(b, k, w->meta_v[i]);
        free(k);
    }
    if (nlong) {
        put_str(b, NPUC__GGUF_LONG_NAMES);
        put_u32(b, GGUF_T_ARRAY);
        put_u32(b, GGUF_T_STRING);
        put_u64(b, 2 * (uint64_t)nlong);
        for (size_t i = 0; i < w->n; i++)
            if (strcmp(s->t[i].name, w->t[i].name) != 0) {
                put_str(b, s->t[i].name);
                put_str(b, w->t[i].name);
            }
    }
    for (size_t i = 0; i < w->n; i++) {
        const npuc_tensor_info *t = &w->t[i];
        put_str(b, s->t[i].name);
        put_u32(b, (uint32_t)t->rank);
        for (int d = t->rank - 1; d >= 0; d--) put_u64(b, (uint64_t)t->shape[d]);
        put_u32(b, (uint32_t)s->t[i].type);
        put_u64(b, s->t[i].offset);
    }
    if (b->oom) return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
    return NPUC_OK;
}

npuc_status npuc__gguf_writer_size(npuc_writer *w, uint64_t *size) {
    ggw_state s;
    ggw_buf b = {0};
    memset(&s, 0, sizeof s);
    if (!(s.t = calloc(w->n ? w->n : 1, sizeof *s.t))) return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
    npuc_status st = build_header(w, &s, &b);
    uint64_t total = (b.n + NPUC__GGUF_ALIGN - 1) / NPUC__GGUF_ALIGN * NPUC__GGUF_ALIGN;
    for (size_t i = 0; st == NPUC_OK && i < w->n; i++) {
        const uint64_t padded = (s.t[i].nbytes + NPUC__GGUF_ALIGN - 1) / NPUC__GGUF_ALIGN * NPUC__GGUF_ALIGN;
        if (npuc_add_overflow(total, padded, &total))
            st = npuc_fail(w->ctx, NPUC_ERR_OVERFLOW, "%s: total size overflows", w->path);
    }
    free(b.p);
    free(s.t);
    if (st == NPUC_OK) *size = total;
    return st;
}

/* The matrices of tensor t as llama-quantize counts them for importance:
 * GGUF ne[2] (the first of three npuc dims: a MoE weight's experts), 1 for
 * a matrix. */
static uint64_t n_mat(const npuc_tensor_info *t) { return t->rank >= 3 ? (uint64_t)t->shape[t->rank - 3] : 1; }

/* The "imatrix" option: the file is loaded once, and every tensor stored in
 * a block type looks up its importance by name, as llama-quantize does
 * before quantizing it: n_mat = GGUF ne[2] matrices (the first of three
 * npuc dims; 1 for a matrix) of ne[0] input columns.  A length that does
 * not match is an error (gguf_imatrix.h); tensors without an entry and
 * entries that match no tensor are warnings.  Tensors written unquantized
 * only mark their entries as matched. */
static npuc_status attach_imatrix(npuc_writer *w, ggw_state *s) {
    const char *path = npuc__writer_opt(w, "imatrix");
    if (!path) return NPUC_OK;
    npuc_status st = npuc__imatrix_load(w->ctx, path, &s->im);
    if (st != NPUC_OK) return st;
    size_t nq = 0, nmiss = 0;
    const char *miss_first = NULL;
    for (size_t i = 0; i < w->n; i++) {
        const npuc_tensor_info *t = &w->t[i];
        ggw_tensor *g = &s->t[i];
        const char *alt = strcmp(g->name, t->name) != 0 ? g->name : NULL;
        if (npuc__ggml_type_by_id((uint32_t)g->type)->blck == 1) {
            if (t->rank >= 2) (void)npuc__imatrix_mark(s->im, t->name, alt);
            continue;
        }
        nq++;
        const uint64_t row = (uint64_t)t->shape[t->rank - 1];
        if ((st = npuc__imatrix_lookup(w->ctx, s->im, t->name, alt, row, n_mat(t), &g->imp)) != NPUC_OK) return st;
        if (!g->imp && nmiss++ == 0) miss_first = t->name;
    }
    if (nq == 0)
        npuc__ctx_warn(w->ctx, "%s: --imatrix %s is not used: no tensor is stored in a quantized type", w->path,
                       path);
    else if (nmiss)
        npuc__ctx_warn(w->ctx, "%s: %zu of %zu quantized tensors have no imatrix entry (first: '%s') and are "
                               "quantized without importance", w->path, nmiss, nq, miss_first);
    npuc__imatrix_warn_unmatched(w->ctx, s->im);
    return NPUC_OK;
}

static void state_free(ggw_state *s) {
    if (!s) return;
    if (s->f) fclose(s->f);
    free(s->t);
    free(s->out);
    npuc__imatrix_free(s->im);
    free(s);
}

static npuc_status ggw_begin(npuc_writer *w) {
    if (has_encoded_tensors(w))
        return npuc_fail(w->ctx, NPUC_ERR_UNSUPPORTED,
                         "%s: GGUF holds dense or ggml-quantized weights, not npuc artifacts; write the "
                         "artifact as .safetensors, or quantize to GGUF with `npuc convert IN -o %s "
                         "--gguf-type q8_0`",
                         w->path, w->path);
    ggw_state *s = calloc(1, sizeof *s);
    ggw_buf b = {0};
    npuc_status st = NPUC_OK;
    if (!s) return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
    s->t = calloc(w->n ? w->n : 1, sizeof *s->t);
    s->out = malloc(GGW_OUT_BYTES);
    if (!s->t || !s->out) { st = npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory"); goto fail; }
    if ((st = build_header(w, s, &b)) != NPUC_OK || (st = attach_imatrix(w, s)) != NPUC_OK) goto fail;
    s->f = fopen(w->tmp, "wbe");
    if (!s->f) {
        st = npuc_fail(w->ctx, NPUC_ERR_IO, "%s: cannot create %s: %s", w->path, w->tmp, strerror(errno));
        goto fail;
    }
    if ((st = out(w, s->f, b.p, b.n, "the header")) != NPUC_OK ||
        (st = pad(w, s->f, b.n, "the header")) != NPUC_OK)
        goto fail;
    free(b.p);
    w->be_state = s;
    return NPUC_OK;
fail:
    free(b.p);
    state_free(s);
    return st;
}

/* The first NaN or infinite element of k values of dtype dt at p, found
 * only after the quantizer refused a block (the error path): a chunk's
 * first non-finite element is reported before any block whose scale
 * overflows fp16, wherever the two lie in the chunk. */
static int first_nonfinite(const void *p, npuc_dtype dt, size_t k, size_t *at) {
    float x[1024];
    const size_t ss = npuc_dtype_size(dt);
    for (size_t i = 0; i < k; i += 1024) {
        const size_t n = k - i < 1024 ? k - i : 1024;
        npuc_convert(x, NPUC_DTYPE_F32, (const unsigned char *)p + i * ss, dt, n);
        for (size_t j = 0; j < n; j++)
            if (!isfinite(x[j])) {
                *at = i + j;
                return isnan(x[j]) ? 1 : 2;
            }
    }
    return 0;
}

static npuc_status ggw_write(npuc_writer *w, size_t i, const void *data, uint64_t n) {
    ggw_state *s = w->be_state;
    const npuc_tensor_info *t = &w->t[i];
    const ggw_tensor *g = &s->t[i];
    const npuc__ggml_type *gt = npuc__ggml_type_by_id((uint32_t)g->type);
    char what[128];
    snprintf(what, sizeof what, "tensor '%.100s'", t->name);
    (void)n;
    size_t ss = npuc_dtype_size(t->dtype);
    const unsigned char *src = data;
    uint64_t row = t->rank ? (uint64_t)t->shape[t->rank - 1] : 1;
    npuc_status st = NPUC_OK;
    for (uint64_t done = 0; done < t->numel && st == NPUC_OK;) {
        /* Block types: whole rows per chunk when a row fits (the weighted
         * paths, npuc__gguf_quantize_rows with an importance row, need
         * them; without importance any split gives the same bytes). */
        const size_t chunk = gt->blck == 1 ? GGW_CHUNK : row <= GGW_QCHUNK ? GGW_QCHUNK / row * row : GGW_QCHUNK;
        size_t k = t->numel - done < chunk ? (size_t)(t->numel - done) : chunk;
        const unsigned char *p = src + done * ss;
        if (gt->blck == 1) {
            npuc_dtype dd = gt->dtype;
            if (dd == t->dtype) {
                st = out(w, s->f, p, k * ss, what);
            } else {
                npuc_convert(s->out, dd, p, t->dtype, k);
                st = out(w, s->f, s->out, k * npuc_dtype_size(dd), what);
            }
        } else {
            size_t at;
            uint64_t bad;
            /* With an importance matrix, the weighted quantizers take whole
             * rows of one matrix: the chunk is cut at the matrix's end (a 3-D
             * tensor holds n_mat(t) matrices of `row` columns, one importance
             * row each). */
            const float *imp = NULL;
            if (g->imp) {
                const uint64_t mat = row * (t->rank >= 2 ? (uint64_t)t->shape[t->rank - 2] : 1);
                if (k % row != 0)
                    return npuc_fail(w->ctx, NPUC_ERR_UNSUPPORTED,
                                     "%s: tensor '%s': rows of %llu values are too long for the weighted quantizer",
                                     w->path, t->name, (unsigned long long)row);
                if (k > mat - done % mat) k = (size_t)(mat - done % mat);
                imp = g->imp + (done / mat) % n_mat(t) * row;
            }
            if (npuc__gguf_quantize_rows(g->type, p, t->dtype, s->out, k, row, imp, npuc_ctx_threads(w->ctx), &bad) !=
                0) {
                const int nf = first_nonfinite(p, t->dtype, k, &at);
                if (nf)
                    return npuc_fail(w->ctx, NPUC_ERR_VALUE, "%s: tensor '%s': element %llu is %s; %s cannot hold it",
                                     w->path, t->name, (unsigned long long)(done + at),
                                     nf == 1 ? "NaN" : "infinite", gt->name);
                uint64_t e = done + bad * gt->blck;
                return npuc_fail(w->ctx, NPUC_ERR_VALUE,
                                 "%s: tensor '%s': row %llu, elements %llu..%llu: the %s block scale or "
                                 "minimum exceeds fp16's range (65504); use --gguf-type f32, f16 or bf16",
                                 w->path, t->name, (unsigned long long)(e / row), (unsigned long long)(e % row),
                                 (unsigned long long)(e % row + gt->blck - 1), gt->name);
            }
            st = out(w, s->f, s->out, k / gt->blck * gt->tsize, what);
        }
        done += k;
    }
    if (st == NPUC_OK) st = pad(w, s->f, g->nbytes, what);
    return st;
}

static npuc_status ggw_finish(npuc_writer *w) {
    ggw_state *s = w->be_state;
    npuc_status st = NPUC_OK;
    if (fflush(s->f) != 0 || fsync(fileno(s->f)) != 0)
        st = npuc_fail(w->ctx, NPUC_ERR_IO, "%s: writing: %s", w->path, strerror(errno));
    if (fclose(s->f) != 0 && st == NPUC_OK)
        st = npuc_fail(w->ctx, NPUC_ERR_IO, "%s: close: %s", w->path, strerror(errno));
    s->f = NULL;
    state_free(s);
    w->be_state = NULL;
    return st;
}

static void ggw_abort(npuc_writer *w) {
    state_free(w->be_state);
    w->be_state = NULL;
}

const npuc_writer_backend npuc__gguf_writer_backend = {ggw_begin, ggw_write, ggw_finish, ggw_abort, 0};
