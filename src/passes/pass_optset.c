/*
 * pass_optset.c - typed option sets of a pass: made from command-line text
 * (npuc_pass_optset_set, checked against the option table) or viewed over a
 * recipe step's parsed options, and read by the passes' run callbacks
 * through getters that fall back to the table's defaults.
 *
 * Command-line text is typed the way the commands always typed it:
 * integers with strtoll (base 10, the whole text), numbers with strtod
 * (finite, no overflow), then the row's bounds, choices and check; a
 * failure is "--<flag> '<text>': <the row's message>".  List options are
 * only checked here when the row has a message for them; the others are
 * checked by the pass, which names the flag in its own message.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/pass_desc.h"
#include "passes/sparsify/sparsify_nm.h"

/* ------------------------------------------------------------ sets */

npuc_status npuc_pass_optset_new(npuc_ctx *ctx, const npuc_pass *p, npuc_pass_optset **out) {
    *out = calloc(1, sizeof **out);
    if (!*out) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    (*out)->pass = p;
    (*out)->opts = &(*out)->own;
    return NPUC_OK;
}

void npuc__optset_free_values(recipe_optset *s) {
    for (size_t i = 0; i < s->n; i++) {
        recipe_opt *o = &s->v[i];
        free(o->s);
        for (size_t j = 0; j < o->nlist; j++) free(o->list[j]);
        free(o->list);
        free(o->lmark);
    }
    free(s->v);
    memset(s, 0, sizeof *s);
}

void npuc_pass_optset_free(npuc_pass_optset *s) {
    if (!s) return;
    npuc__optset_free_values(&s->own);
    free(s->log);
    free(s);
}

const npuc_pass *npuc_pass_optset_pass(const npuc_pass_optset *s) { return s->pass; }

void npuc__pass_optset_view(npuc_pass_optset *s, const npuc_pass *p, const recipe_optset *opts,
                            const recipe_optset *ov, size_t nov, const char *recipe) {
    memset(s, 0, sizeof *s);
    s->pass = p;
    s->opts = opts;
    s->ov = ov;
    s->nov = nov;
    s->recipe = recipe ? recipe : "recipe";
}

const recipe_opt *npuc__ropt(const recipe_optset *s, const char *name) {
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i].key->name, name) == 0) return &s->v[i];
    return NULL;
}

int npuc_pass_optset_has(const npuc_pass_optset *s, const char *name) { return npuc__ropt(s->opts, name) != NULL; }

int npuc__pass_is_cli(const npuc_pass_optset *s) { return s->recipe == NULL; }

/* ------------------------------------------------------------ command-line values */

static npuc_status bad_value(npuc_ctx *ctx, const npuc_pass_option *o, const char *text, const char *why) {
    if (o->bad) return npuc_fail(ctx, NPUC_ERR_ARG, "--%s '%s': %s", o->flag, text, o->bad);
    return npuc_fail(ctx, NPUC_ERR_ARG, "%s", why && *why ? why : "bad value");
}

/* long double holds every int64 exactly (x86-64's 64-bit mantissa), so an
 * integer just above a bound of 2^53 is not rounded onto it. */
static int in_bounds(const npuc_pass_option *o, long double v) {
    if (!(v >= o->lo && v <= o->hi)) return 0; /* NaN too */
    if ((o->flags & NPUC_OPT_LO_OPEN) && v == o->lo) return 0;
    if ((o->flags & NPUC_OPT_HI_OPEN) && v == o->hi) return 0;
    return 1;
}

/* Types text as option o wants it: 0, or -1 with a reason in why. */
static int type_text(const npuc_pass_option *o, const char *text, recipe_opt *v, char *why, size_t n) {
    char *end;
    why[0] = 0;
    switch (o->type) {
    case NPUC_OPT_BOOL: v->b = 1; return 0;
    case NPUC_OPT_INT: {
        errno = 0;
        long long x = text && *text ? strtoll(text, &end, 10) : 0;
        if (!text || !*text || errno || *end || !in_bounds(o, (long double)x)) return -1;
        v->i = x;
        v->d = (double)x;
        return 0;
    }
    case NPUC_OPT_NUM: {
        errno = 0;
        double x = text ? strtod(text, &end) : 0;
        if (!text || end == text || *end || errno == ERANGE || !isfinite(x) || !in_bounds(o, x)) return -1;
        v->d = x;
        return 0;
    }
    case NPUC_OPT_STR:
    case NPUC_OPT_LIST:
        if (!text) return -1;
        if (o->choices && npuc__check_choice(o, text, why, n) != 0) return -1;
        if (o->check && (o->type == NPUC_OPT_STR || o->bad) && o->check(text, why, n) != 0) return -1;
        return 0;
    }
    return -1;
}

npuc_status npuc_pass_optset_set(npuc_ctx *ctx, npuc_pass_optset *s, const npuc_pass_option *o, const char *text) {
    char why[NPUC_MSG_MAX];
    recipe_opt typed;
    memset(&typed, 0, sizeof typed);
    if (type_text(o, text, &typed, why, sizeof why) != 0) return bad_value(ctx, o, text ? text : "", why);
    recipe_optset *own = &s->own;
    recipe_opt *v = NULL;
    for (size_t i = 0; i < own->n && !v; i++)
        if (own->v[i].key == o) v = &own->v[i];
    if (!v) {
        recipe_opt *nv = realloc(own->v, (own->n + 1) * sizeof *nv);
        if (!nv) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        own->v = nv;
        v = &own->v[own->n++];
        memset(v, 0, sizeof *v);
        v->key = o;
    }
    int *log = realloc(s->log, (s->nlog + 1) * sizeof *log);
    if (!log) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    s->log = log;
    s->log[s->nlog++] = (int)(o - s->pass->options);
    v->seq = ++s->nseq;
    v->b = typed.b;
    v->i = typed.i;
    v->d = typed.d;
    if (o->type == NPUC_OPT_STR) {
        char *c = npuc__strdup(text);
        if (!c) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        free(v->s);
        v->s = c;
    } else if (o->type == NPUC_OPT_LIST) {
        char **l = realloc(v->list, (v->nlist + 1) * sizeof *l);
        if (!l) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        v->list = l;
        if (!(v->list[v->nlist] = npuc__strdup(text))) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        v->nlist++;
    }
    return NPUC_OK;
}

/* ------------------------------------------------------------ getters */

const recipe_opt *npuc__pass_get(const npuc_pass_optset *s, const char *name) { return npuc__ropt(s->opts, name); }

/* The option's value, given or its default typed; 0 when it has neither. */
static int value_of(const npuc_pass_optset *s, const char *name, recipe_opt *out) {
    const recipe_opt *v = npuc__pass_get(s, name);
    memset(out, 0, sizeof *out);
    if (v) {
        *out = *v;
        return 1;
    }
    const npuc_pass_option *o = npuc_pass_option_find(s->pass, name);
    if (!o || !o->dflt) return 0;
    out->key = o;
    switch (o->type) {
    case NPUC_OPT_BOOL: out->b = strcmp(o->dflt, "true") == 0; break;
    case NPUC_OPT_INT: out->i = strtoll(o->dflt, NULL, 10); out->d = (double)out->i; break;
    case NPUC_OPT_NUM: out->d = strtod(o->dflt, NULL); break;
    case NPUC_OPT_STR: out->s = (char *)o->dflt; break;
    case NPUC_OPT_LIST: return 0;
    }
    return 1;
}

int npuc__pass_bool(const npuc_pass_optset *s, const char *name) {
    recipe_opt v;
    return value_of(s, name, &v) ? v.b : 0;
}

int64_t npuc__pass_int(const npuc_pass_optset *s, const char *name) {
    recipe_opt v;
    return value_of(s, name, &v) ? v.i : 0;
}

double npuc__pass_num(const npuc_pass_optset *s, const char *name) {
    recipe_opt v;
    return value_of(s, name, &v) ? v.d : 0.0;
}

const char *npuc__pass_str(const npuc_pass_optset *s, const char *name) {
    recipe_opt v;
    return value_of(s, name, &v) ? v.s : NULL;
}

const recipe_opt *npuc__pass_later(const npuc_pass_optset *s, const char *a, const char *b) {
    const recipe_opt *x = npuc__pass_get(s, a), *y = npuc__pass_get(s, b);
    if (!x || !y) return x ? x : y;
    return y->seq > x->seq ? y : x;
}

/* ------------------------------------------------------------ lists */

void npuc__strv_free(npuc__strv *v) {
    for (size_t i = 0; i < v->nown; i++) free(v->own[i]);
    free(v->own);
    free(v->v);
    memset(v, 0, sizeof *v);
}

static int strv_push(npuc__strv *v, const char *x) {
    const char **p = realloc(v->v, (v->n + 1) * sizeof *p);
    if (!p) return -1;
    v->v = p;
    p[v->n++] = x;
    return 0;
}

static int strv_push_own(npuc__strv *v, char *x) {
    if (!x) return -1;
    char **p = realloc(v->own, (v->nown + 1) * sizeof *p);
    if (!p) {
        free(x);
        return -1;
    }
    v->own = p;
    p[v->nown++] = x;
    return strv_push(v, x);
}

int npuc__pass_list(const npuc_pass_optset *s, const char *name, npuc__strv *out) {
    const npuc_pass_option *o = npuc_pass_option_find(s->pass, name);
    const char *ok = o ? o->override_key : NULL;
    /* Overrides first: "the first matching rule wins" then lets the more
     * specific recipe entry decide (docs/recipes.md#overrides). */
    for (size_t k = 0; ok && k < s->nov; k++) {
        const recipe_opt *v = npuc__ropt(&s->ov[k], ok);
        if (!v) continue;
        const char *re = npuc__ropt(&s->ov[k], "match")->s;
        if (v->key->type == NPUC_OPT_BOOL) {
            if (v->b && strv_push(out, re)) return -1;
            continue;
        }
        size_t n = strlen(re) + 32;
        char *rule = malloc(n);
        /* Numbers with %.17g, so the pass parses back the recipe's double. */
        if (rule && v->key->type == NPUC_OPT_INT) snprintf(rule, n, "%s=%lld", re, (long long)v->i);
        else if (rule) snprintf(rule, n, "%s=%.17g", re, v->d);
        if (strv_push_own(out, rule)) return -1;
    }
    const recipe_opt *v = npuc__pass_get(s, name);
    for (size_t i = 0; v && i < v->nlist; i++)
        if (strv_push(out, v->list[i])) return -1;
    return 0;
}

const npuc__strv *npuc__pass_strv(const npuc_pass_optset *s, const char *name) {
    static const npuc__strv NONE = {0};
    const npuc_pass_option *o = npuc_pass_option_find(s->pass, name);
    return o && s->lists ? &s->lists[o - s->pass->options] : &NONE;
}

int npuc__pass_path(const npuc_pass_optset *s, const char *name, char **out) {
    const recipe_opt *v = npuc__pass_get(s, name);
    *out = NULL;
    if (!v) return 0;
    const char *p = v->s, *slash = s->recipe ? strrchr(s->recipe, '/') : NULL;
    /* A recipe and the files it names move together. */
    if (p[0] == '/' || !slash) return (*out = npuc__strdup(p)) ? 0 : -1;
    size_t dl = (size_t)(slash - s->recipe), n = dl + strlen(p) + 2;
    if (!(*out = malloc(n))) return -1;
    snprintf(*out, n, "%.*s/%s", (int)dl, s->recipe, p);
    return 0;
}

/* ------------------------------------------------------------ messages */

npuc_status npuc__pass_fail(npuc_ctx *ctx, const npuc_pass_optset *s, const recipe_opt *o, const char *msg) {
    if (npuc__pass_is_cli(s)) return npuc_fail(ctx, NPUC_ERR_ARG, "%s", msg);
    char where[512];
    return npuc_fail(ctx, NPUC_ERR_ARG, "%sstep '%s': %s",
                     npuc__recipe_where(s->recipe, o ? o->mark : s->opts->mark, where, sizeof where), s->pass->name,
                     msg);
}

const char *npuc__recipe_where(const char *file, recipe_mark m, char *buf, size_t n) {
    if (m.line > 0) snprintf(buf, n, "%s:%d:%d: ", file, m.line, m.col);
    else snprintf(buf, n, "%s: ", file);
    return buf;
}

npuc_status npuc__pass_check_value(npuc_ctx *ctx, const char *pass, const char *name, double v, const char *shown) {
    const npuc_pass_option *o = npuc_pass_option_find(npuc_pass_find(pass), name);
    if (!o) return npuc_fail(ctx, NPUC_ERR_INTERNAL, "no option %s.%s (a bug in npuc)", pass, name);
    if (in_bounds(o, v)) return NPUC_OK;
    char num[32];
    snprintf(num, sizeof num, "%g", v);
    const char *text = shown ? shown : num;
    if (!o->bad)
        return npuc_fail(ctx, NPUC_ERR_ARG, "--%s '%s': must be %s%g..%g%s", o->flag, text,
                         (o->flags & NPUC_OPT_LO_OPEN) ? "above " : "", o->lo, o->hi,
                         (o->flags & NPUC_OPT_HI_OPEN) ? " (exclusive)" : "");
    return bad_value(ctx, o, text, NULL);
}

/* ------------------------------------------------------------ shared checks */

int npuc__check_choice(const npuc_pass_option *o, const char *s, char *why, size_t n) {
    for (const char *const *c = o->choices; *c; c++)
        if (strcmp(*c, s) == 0) return 0;
    size_t k = (size_t)snprintf(why, n, "'%s' is not a %s (", s, o->noun ? o->noun : "choice");
    for (const char *const *c = o->choices; *c && k < n; c++)
        k += (size_t)snprintf(why + k, n - k, "%s%s", c == o->choices ? "" : ", ", *c);
    if (k < n) snprintf(why + k, n - k, ")");
    return -1;
}

int npuc__check_nm(const char *s, char *why, size_t n) {
    int a, b;
    if (npuc_nm_parse(s, &a, &b) != 0) {
        snprintf(why, n, "'%s' is not an N:M pattern with " NPUC__NM_BOUNDS " (quote it: \"2:4\")", s);
        return -1;
    }
    return 0;
}

int npuc__check_range(const char *s, char *why, size_t n) {
    npuc_ctx *c;
    if (npuc_ctx_new(&c) != NPUC_OK) {
        snprintf(why, n, "out of memory");
        return -1;
    }
    npuc_range_opts r;
    int rc = npuc_range_parse(c, s, &r) == NPUC_OK ? 0 : -1;
    if (rc) snprintf(why, n, "%s", npuc_ctx_errmsg(c));
    npuc_ctx_free(c);
    return rc;
}
