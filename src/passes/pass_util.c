/*
 * pass_util.c - rule lists, thread counts, scratch buffers, float32 views
 * and messages for passes.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "calib_linalg.h"
#include "kernels/cvt_kernels.h"
#include "passes/pass_util.h"

npuc_status npuc__rules_compile(npuc_ctx *ctx, npuc_rules *r, const char *const *src, size_t n,
                                int with_value, const char *flag) {
    memset(r, 0, sizeof *r);
    if (n == 0) return NPUC_OK;
    r->re = calloc(n, sizeof *r->re);
    r->value = calloc(n, sizeof *r->value);
    r->hits = calloc(n, sizeof *r->hits);
    r->src = src;
    r->cap = n;
    if (!r->re || !r->value || !r->hits) {
        npuc__rules_free(r);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        const char *s = src[i];
        size_t plen = strlen(s);
        if (with_value) {
            const char *eq = strrchr(s, '=');
            if (!eq || eq == s || !eq[1]) {
                npuc__rules_free(r);
                return npuc_fail(ctx, NPUC_ERR_ARG, "%s '%s': expected REGEX=VALUE", flag, s);
            }
            plen = (size_t)(eq - s);
            r->value[i] = npuc__strdup(eq + 1);
        }
        char *pat = malloc(plen + 1);
        if (!pat || (with_value && !r->value[i])) {
            free(pat);
            npuc__rules_free(r);
            return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        }
        memcpy(pat, s, plen);
        pat[plen] = 0;
        int rc = npuc__regcomp(&r->re[i], pat);
        free(pat);
        if (rc != 0) {
            r->n = i; /* free only the compiled ones */
            npuc__rules_free(r);
            return npuc_fail(ctx, NPUC_ERR_ARG, "%s '%s': %s", flag, s,
                             rc == REG_ESIZE ? "regular expression too long or too complex (counted repetition "
                                               "multiplies; npuc allows about 20000 expanded nodes)"
                                             : "invalid regular expression");
        }
        r->n = i + 1;
    }
    return NPUC_OK;
}

int npuc__rules_match(npuc_rules *r, const char *name) {
    /* Every matching rule counts as used, the first one decides: a rule
     * that loses to an earlier one on some tensors still matched them, and
     * "matches no tensor" should mean exactly that (as the recipe check,
     * which sees tensor names only, reads it). */
    int first = -1;
    for (size_t i = 0; i < r->n; i++)
        if (regexec(&r->re[i], name, 0, NULL, 0) == 0) {
            r->hits[i]++;
            if (first < 0) first = (int)i;
        }
    return first;
}

int npuc__rules_names(const npuc_rules *r, const char *name) {
    for (size_t k = 0; k < r->n; k++) {
        const char *p = r->src[k];
        size_t e = strlen(p);
        if (r->value) {
            const char *eq = strrchr(p, '=');
            if (eq) e = (size_t)(eq - p);
        }
        if (e < 2 || p[0] != '^' || p[e - 1] != '$') continue;
        const char *nm = name;
        size_t i = 1;
        int ok = 1;
        e--; /* the closing '$' */
        while (ok && i < e) {
            char c = p[i];
            if (c == '\\') {
                if (i + 1 >= e) ok = 0; /* "\$": the '$' is escaped, nothing anchors the end */
                c = p[i + 1];
                i += 2;
            } else {
                if (strchr("[]()*+?{}|^$", c)) ok = 0;
                i++;
            }
            if (ok && *nm++ != c) ok = 0;
        }
        if (ok && !*nm) return 1;
    }
    return 0;
}

const char *npuc__kept_role(const npuc_tensor_info *t, char *note, size_t n) {
    const char *what;
    switch (t->role) {
    case NPUC_ROLE_BIAS: what = "bias"; break;
    case NPUC_ROLE_NORM: what = "norm"; break;
    case NPUC_ROLE_BN_GAMMA: case NPUC_ROLE_BN_BETA: case NPUC_ROLE_BN_MEAN: case NPUC_ROLE_BN_VAR:
    case NPUC_ROLE_BN_COUNT: what = "BatchNorm"; break;
    default: return NULL;
    }
    snprintf(note, n, "role %s: a %s tensor, left as is; only --include '^NAME$' asks", npuc_role_name(t->role), what);
    return note;
}

npuc_status npuc__rules_check_hits(npuc_ctx *ctx, const npuc_rules *r, const char *flag,
                                   const char *path) {
    for (size_t i = 0; i < r->n; i++)
        if (!r->hits[i])
            return npuc_fail(ctx, NPUC_ERR_ARG, "%s: %s '%s' matches no tensor", path, flag, r->src[i]);
    return NPUC_OK;
}

void npuc__rules_free(npuc_rules *r) {
    for (size_t i = 0; i < r->n; i++) regfree(&r->re[i]);
    if (r->value)
        for (size_t i = 0; i < r->cap; i++) free(r->value[i]);
    free(r->re);
    free(r->value);
    free(r->hits);
    memset(r, 0, sizeof *r);
}

int npuc__threads(npuc_ctx *ctx) {
    int n = npuc_ctx_threads(ctx);
#ifdef _OPENMP
    if (n <= 0) n = omp_get_max_threads();
#else
    n = 1;
#endif
    return n < 1 ? 1 : n;
}

void *npuc__scratch(npuc_scratch *s, uint64_t n) {
    if (n == 0) n = 1;
    if ((uint64_t)(size_t)n != n) return NULL;
    if (n <= s->cap) return s->p;
    void *p = npuc__huge_alloc((size_t)n); /* fewer first-touch page faults */
    if (!p) return NULL;
    free(s->p);
    s->p = p;
    s->cap = (size_t)n;
    return p;
}

void npuc__scratch_free(npuc_scratch *s) {
    free(s->p);
    s->p = NULL;
    s->cap = 0;
}

#define WIDEN_CHUNK ((size_t)1 << 18) /* elements: 1 MiB of output */

void npuc__widen_f32(npuc_ctx *ctx, float *dst, const void *src, npuc_dtype dt, size_t n) {
    const npuc_cvt_kernel_table *k = npuc_cvt_kernels();
    const npuc_cvt_fn fn = dt == NPUC_DTYPE_F16 ? k->f16_to_f32 : k->bf16_to_f32;
    const size_t nch = n / WIDEN_CHUNK + (n % WIDEN_CHUNK != 0);
    int nt = ctx ? npuc__threads(ctx) : 1;
    if ((size_t)nt > nch) nt = nch < 1 ? 1 : (int)nch;
    const unsigned char *s = src;
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (size_t c = 0; c < nch; c++) {
        const size_t a = c * WIDEN_CHUNK, len = n - a < WIDEN_CHUNK ? n - a : WIDEN_CHUNK;
        fn(dst + a, s + 2 * a, len);
    }
}

npuc_status npuc__load_f32(npuc_ctx *ctx, npuc_model *m, size_t i, npuc_scratch *scr, const float **out) {
    const npuc_tensor_info *t = npuc_model_tensor(m, i);
    const void *p;
    npuc_status st = npuc_model_data(ctx, m, i, &p);
    if (st != NPUC_OK) return st;
    if (t->dtype == NPUC_DTYPE_F32 && ((uintptr_t)p & 3) == 0) {
        *out = p; /* the backend's buffer, already read (pread, or HDF5's) */
        return NPUC_OK;
    }
    uint64_t nb;
    if (npuc_mul_overflow(t->numel, sizeof(float), &nb))
        return npuc_fail(ctx, NPUC_ERR_OVERFLOW, "%s: tensor '%s': too large", npuc_model_path(m), t->name);
    float *f = npuc__scratch(scr, nb);
    if (!f) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: tensor '%s': out of memory", npuc_model_path(m), t->name);
    if (t->dtype == NPUC_DTYPE_F16 || t->dtype == NPUC_DTYPE_BF16)
        npuc__widen_f32(ctx, f, p, t->dtype, (size_t)t->numel);
    else
        npuc_convert(f, NPUC_DTYPE_F32, p, t->dtype, (size_t)t->numel);
    *out = f;
    return NPUC_OK;
}

npuc_status npuc__f32_as(npuc_ctx *ctx, npuc_dtype dt, const float *x, uint64_t numel, npuc_scratch *scr,
                         const void **out) {
    *out = x;
    if (dt == NPUC_DTYPE_F32) return NPUC_OK;
    void *c = npuc__scratch(scr, numel * npuc_dtype_size(dt));
    if (!c) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    npuc_convert(c, dt, x, NPUC_DTYPE_F32, (size_t)numel);
    *out = c;
    return NPUC_OK;
}

npuc_status npuc__write_pruned(npuc_ctx *ctx, npuc_writer *w, const npuc_tensor_info *t, const void *src,
                               const float *pruned, npuc_scratch *scr) {
    if (t->dtype == NPUC_DTYPE_F32) return npuc_writer_write(w, pruned, t->nbytes);
    uint8_t *b = npuc__scratch(scr, t->nbytes);
    if (!b) return npuc_fail(ctx, NPUC_ERR_NOMEM, "tensor '%s': out of memory", t->name);
    const size_t es = npuc_dtype_size(t->dtype);
    memcpy(b, src, (size_t)t->nbytes);
    for (uint64_t i = 0; i < t->numel; i++) {
        uint32_t u;
        memcpy(&u, &pruned[i], 4);
        if (u == 0) memset(b + i * es, 0, es);
    }
    return npuc_writer_write(w, b, t->nbytes);
}

void npuc__fmt(char *buf, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

npuc_status npuc__prefix_path(npuc_ctx *ctx, npuc_status st, const char *path) {
    char msg[NPUC_MSG_MAX];
    snprintf(msg, sizeof msg, "%s", npuc_ctx_errmsg(ctx));
    return npuc_fail(ctx, st, "%s: %s", path, msg);
}
