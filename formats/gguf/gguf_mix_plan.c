/*
 * gguf_mix_plan.c - every tensor's GGUF type for a whole model: the
 * --gguf-tensor-type rules parsed and compiled, the hyperparameters the
 * mixes read taken from the source's metadata, the tensors walked in
 * llama-quantize's order through npuc__gguf_mix_choose (gguf_mix.c).  The
 * GGUF writer plans its header with it, and npuc_gguf_plan (include/npuc/
 * gguf.h) hands the same decisions and their reasons to callers, so the
 * CLI can show them without the library printing.
 *
 * Rules follow llama-quantize's --tensor-type: the text before the first
 * '=' is a regular expression, lower-cased, searched anywhere in the
 * tensor name (npuc compiles it as a POSIX extended expression through
 * npuc__regcomp, where llama.cpp uses std::regex's ECMAScript grammar: the
 * same for the usual patterns, "blk\.[0-9]+\.ffn_down"); the text after it
 * names a ggml type, in any case.  The first rule that matches wins.
 */
#include <ctype.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_mix.h"
#include "npuc/gguf.h"

#define PLAN_RULES_MAX 64

typedef struct plan_rule {
    regex_t re;
    char pat[NPUC_WRITE_OPT_VALUE_MAX];
    int type;
} plan_rule;

/* The types a rule may name: those the writer can produce. */
static int rule_type(const char *s) {
    static const int IDS[] = {NPUC__GGML_F32,  NPUC__GGML_F16,  NPUC__GGML_BF16, NPUC__GGML_Q8_0,
                              NPUC__GGML_Q4_0, NPUC__GGML_Q4_1, NPUC__GGML_Q5_0, NPUC__GGML_Q5_1,
                              NPUC__GGML_Q2_K, NPUC__GGML_Q3_K, NPUC__GGML_Q4_K, NPUC__GGML_Q5_K,
                              NPUC__GGML_Q6_K};
    for (size_t i = 0; i < sizeof IDS / sizeof IDS[0]; i++) {
        const char *n = npuc__ggml_type_by_id((uint32_t)IDS[i])->name;
        if (strcasecmp(n, s) == 0) return IDS[i];
    }
    return -1;
}

static void rules_free(plan_rule *r, size_t n) {
    for (size_t i = 0; i < n; i++) regfree(&r[i].re);
}

/* Parses newline-separated REGEX=TYPE rules into r; returns the count, or
 * -1 with the message in ctx. */
static long rules_parse(npuc_ctx *ctx, const char *text, plan_rule *r) {
    size_t n = 0;
    for (const char *p = text; p && *p;) {
        const char *end = strchr(p, '\n'), *eq;
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char one[NPUC_WRITE_OPT_VALUE_MAX];
        if (len >= sizeof one) len = sizeof one - 1;
        memcpy(one, p, len);
        one[len] = 0;
        p = end ? end + 1 : p + len;
        eq = strchr(one, '=');
        if (!eq || eq == one || !eq[1]) {
            rules_free(r, n);
            npuc_fail(ctx, NPUC_ERR_ARG, "--gguf-tensor-type '%s': expected REGEX=TYPE", one);
            return -1;
        }
        if (n == PLAN_RULES_MAX) {
            rules_free(r, n);
            npuc_fail(ctx, NPUC_ERR_ARG, "--gguf-tensor-type: more than %d rules", PLAN_RULES_MAX);
            return -1;
        }
        const int type = rule_type(eq + 1);
        if (type < 0) {
            rules_free(r, n);
            npuc_fail(ctx, NPUC_ERR_ARG,
                      "--gguf-tensor-type '%s': unknown type '%s' (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, "
                      "q5_1, q2_k, q3_k, q4_k, q5_k or q6_k)", one, eq + 1);
            return -1;
        }
        size_t pl = (size_t)(eq - one);
        memcpy(r[n].pat, one, pl);
        r[n].pat[pl] = 0;
        for (char *c = r[n].pat; *c; c++) *c = (char)tolower((unsigned char)*c); /* as llama-quantize */
        int rc = npuc__regcomp(&r[n].re, r[n].pat);
        if (rc != 0) {
            char e[128];
            regerror(rc, NULL, e, sizeof e);
            rules_free(r, n);
            npuc_fail(ctx, NPUC_ERR_ARG, "--gguf-tensor-type '%s': bad regular expression: %s", one, e);
            return -1;
        }
        r[n].type = type;
        n++;
    }
    return (long)n;
}

static const char *meta(const char *const *mk, const char *const *mv, size_t n, const char *key) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(mk[i], key) == 0) return mv[i];
    return NULL;
}

/* An integer hyperparameter "gguf.<arch>.<key>", or 0 when absent or not a
 * plain non-negative number (per-layer arrays are not carried by the
 * reader). */
static int hparam(const char *const *mk, const char *const *mv, size_t n, const char *arch, const char *key,
                  int *found) {
    char k[160];
    snprintf(k, sizeof k, "gguf.%s.%s", arch ? arch : "", key);
    const char *v = meta(mk, mv, n, k);
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    *found = v && *v && !*end && x >= 0 && x <= 1000000;
    return *found ? (int)x : 0;
}

npuc_status npuc__gguf_plan(npuc_ctx *ctx, const char *path, int mix, int base, const char *rules,
                            const char *const *mk, const char *const *mv, size_t nmeta,
                            const npuc_tensor_info *t, size_t n, int *types,
                            char (*reasons)[NPUC__GGUF_REASON_MAX]) {
    plan_rule *r = calloc(PLAN_RULES_MAX, sizeof *r);
    const char **names = calloc(n ? n : 1, sizeof *names);
    size_t *order = calloc(n ? n : 1, sizeof *order);
    npuc_status st = NPUC_OK;
    long nr = 0;
    if (!r || !names || !order) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
    if ((nr = rules_parse(ctx, rules, r)) < 0) { st = npuc_ctx_errcode(ctx); nr = 0; goto done; }
    const npuc__ggml_type *bt = npuc__ggml_type_by_id((uint32_t)base);
    if (nr > 0 && mix == NPUC__GGUF_MIX_NONE && bt->blck == 1 && !(base >= NPUC__GGML_Q2_K && base <= NPUC__GGML_Q6_K)) {
        st = npuc_fail(ctx, NPUC_ERR_ARG,
                       "%s: --gguf-tensor-type applies when --gguf-type is quantized (a block type or a mix), "
                       "as llama-quantize's --tensor-type does; --gguf-type is %s", path, bt->name);
        goto done;
    }
    npuc__gguf_mix_state s = {0};
    s.arch = meta(mk, mv, nmeta, "gguf.general.architecture");
    int has_layers, f;
    s.n_layer = hparam(mk, mv, nmeta, s.arch, "block_count", &has_layers);
    s.n_expert = hparam(mk, mv, nmeta, s.arch, "expert_count", &f);
    s.n_head = hparam(mk, mv, nmeta, s.arch, "attention.head_count", &f);
    s.n_head_kv = hparam(mk, mv, nmeta, s.arch, "attention.head_count_kv", &f);
    if (!f) s.n_head_kv = s.n_head; /* llama.cpp's loader: n_head_kv defaults to n_head */
    if (mix != NPUC__GGUF_MIX_NONE && !has_layers) {
        st = npuc_fail(ctx, NPUC_ERR_ARG,
                       "%s: the llama.cpp mix %s needs a GGUF source with %s.block_count and llama.cpp's "
                       "tensor names (blk.N.attn_v.weight, ...); use a plain --gguf-type such as q8_0",
                       path, npuc__gguf_mix_name(mix), s.arch ? s.arch : "<arch>");
        goto done;
    }
    for (size_t i = 0; i < n; i++) names[i] = t[i].name;
    npuc__gguf_mix_count(&s, names, n);
    if (npuc__gguf_mix_order(names, n, order) != 0) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
    for (size_t k = 0; k < n; k++) {
        const size_t i = order[k];
        const npuc_tensor_info *ti = &t[i];
        char tmp[NPUC__GGUF_REASON_MAX];
        char *why = reasons ? reasons[i] : tmp;
        if (ti->rank > NPUC__GGUF_MAX_DIMS) {
            st = npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s': rank %d, GGUF tensors have at most %d dims",
                           path, ti->name, ti->rank, NPUC__GGUF_MAX_DIMS);
            goto done;
        }
        if (!npuc_dtype_is_float(ti->dtype)) {
            const int id = ti->dtype == NPUC_DTYPE_I8    ? NPUC__GGML_I8
                           : ti->dtype == NPUC_DTYPE_I16 ? NPUC__GGML_I16
                           : ti->dtype == NPUC_DTYPE_I32 ? NPUC__GGML_I32
                           : ti->dtype == NPUC_DTYPE_I64 ? NPUC__GGML_I64
                                                         : -1;
            if (id < 0) {
                st = npuc_fail(ctx, NPUC_ERR_UNSUPPORTED,
                               "%s: tensor '%s': dtype %s has no GGUF type (GGUF holds floats and I8, I16, I32, I64)",
                               path, ti->name, npuc_dtype_name(ti->dtype));
                goto done;
            }
            types[i] = id;
            snprintf(why, NPUC__GGUF_REASON_MAX, "%s: integer tensor, kept", npuc__ggml_type_by_id((uint32_t)id)->name);
            continue;
        }
        const int keep = ti->rank < 2                       ? NPUC__GGML_F32
                         : ti->dtype == NPUC_DTYPE_F16  ? NPUC__GGML_F16
                         : ti->dtype == NPUC_DTYPE_BF16 ? NPUC__GGML_BF16
                                                        : NPUC__GGML_F32;
        if (ti->rank < 2) {
            types[i] = NPUC__GGML_F32;
            snprintf(why, NPUC__GGUF_REASON_MAX, "F32: rank %d, kept F32", ti->rank);
            continue;
        }
        if (mix == NPUC__GGUF_MIX_NONE && nr == 0) { /* the plain type, as the writer gives it */
            const int64_t ne0 = ti->shape[ti->rank - 1];
            if (bt->blck > 1 && ne0 % bt->blck != 0) {
                types[i] = NPUC__GGML_F32;
                snprintf(why, NPUC__GGUF_REASON_MAX, "F32: kept F32: ne[0] %lld is not a multiple of %u",
                         (long long)ne0, bt->blck);
            } else {
                types[i] = base;
                snprintf(why, NPUC__GGUF_REASON_MAX, "%s: the chosen type", bt->name);
            }
            continue;
        }
        int ov = -1;
        const char *pat = NULL;
        for (long j = 0; j < nr && ov < 0; j++)
            if (regexec(&r[j].re, ti->name, 0, NULL, 0) == 0) {
                ov = r[j].type;
                pat = r[j].pat;
            }
        types[i] = npuc__gguf_mix_choose(&s, mix, mix ? npuc__gguf_mix_base(mix) : base, ti->name, ti->rank,
                                         ti->shape, keep, ov, pat, why, NPUC__GGUF_REASON_MAX);
        if (types[i] < 0) {
            st = npuc_fail(ctx, NPUC_ERR_ARG, "%s: %s", path, why);
            goto done;
        }
    }
done:
    rules_free(r, (size_t)nr);
    free(r);
    free(names);
    free(order);
    return st;
}

/* ------------------------------------------------------------ public */

npuc_status npuc_gguf_plan(npuc_ctx *ctx, const npuc_model *m, const npuc_write_opts *opts, int to_dtype_set,
                           npuc_dtype to_dtype, npuc_gguf_choice *out) {
    if (!m || !out) return npuc_fail(ctx, NPUC_ERR_ARG, "npuc_gguf_plan: no model or no output");
    const char *ty = opts ? npuc__write_opts_get(opts, "gguf-type") : NULL;
    const char *rules = opts ? npuc__write_opts_get(opts, "gguf-tensor-type") : NULL;
    if (!ty) ty = npuc_model_format_opt(m, "gguf-type");
    if (!ty) ty = "f16";
    int mix, base;
    if (npuc__gguf_type_choice(ty, &base, &mix) != 0)
        return npuc_fail(ctx, NPUC_ERR_ARG, "GGUF tensor type '%s' is not one npuc writes", ty);
    npuc_tensor_info *t = malloc((m->n ? m->n : 1) * sizeof *t);
    int *types = malloc((m->n ? m->n : 1) * sizeof *types);
    char(*why)[NPUC__GGUF_REASON_MAX] = malloc((m->n ? m->n : 1) * sizeof *why);
    npuc_status st = NPUC_OK;
    if (!t || !types || !why) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    } else {
        for (size_t i = 0; i < m->n; i++) {
            t[i] = m->t[i];
            if (to_dtype_set && npuc_dtype_is_float(t[i].dtype)) t[i].dtype = to_dtype;
        }
        st = npuc__gguf_plan(ctx, m->path, mix, base, rules, (const char *const *)m->meta_k,
                             (const char *const *)m->meta_v, m->nmeta, t, m->n, types, why);
        for (size_t i = 0; st == NPUC_OK && i < m->n; i++) {
            snprintf(out[i].type, sizeof out[i].type, "%s", npuc__ggml_type_by_id((uint32_t)types[i])->name);
            snprintf(out[i].reason, sizeof out[i].reason, "%s", why[i]);
        }
    }
    free(t);
    free(types);
    free(why);
    return st;
}
