/*
 * recipe_parse.c - reading a YAML recipe into typed, validated steps.
 *
 * libfyaml builds the document (duplicate keys rejected; aliases resolved
 * after recipe_yaml_guard.c has bounded what they expand to);
 * this file walks it against the schema of docs/recipes.md.  Scalars are
 * typed the way YAML 1.2's core schema types plain scalars (true/false,
 * decimal integers, floats, ~/null); a quoted scalar is always a string, so
 * `bits: "8"` is a wrong type, not 8.  Every error names the recipe's line
 * and column: libfyaml 0.7 keeps marks on scalar tokens only, so a mapping
 * or sequence is placed at its first scalar, or at the key that holds it.
 *
 * The canonical JSON (what the artifact records and the recipe hash covers)
 * lists the steps in order, each step's options in the adapter's key order
 * and the overrides in file order: comments, quoting, key order and
 * "description" do not change it.
 */
#include <errno.h>
#include <libfyaml.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "pipeline/recipe_internal.h"

#define RECIPE_MAX_BYTES (1u << 20)

/* In canonical JSON order.  A value key has the bounds of its pass's option
 * of the same name (test_pass_desc checks it). */
const recipe_key npuc__recipe_override_keys[] = {
    {.name = "match", .type = RT_STR, .flags = RK_REGEX},
    {.name = "bits", .type = RT_INT, .lo = 2, .hi = 8},
    {.name = "skip", .type = RT_BOOL},
    {.name = "optional", .type = RT_BOOL},
    {.name = "group_size", .type = RT_INT, .lo = 2, .hi = 1 << 30},
    {.name = "rank", .type = RT_INT, .lo = 1, .hi = 2147483647.0},
    {.name = "sparsity", .type = RT_NUM, .lo = 0, .hi = 1, .flags = RK_HI_OPEN},
    {.name = NULL},
};

const char *npuc_step_kind_name(npuc_step_kind k) {
    const recipe_step_def *d = npuc__recipe_step_def(k);
    return d ? d->name : "?";
}

int npuc_step_available(npuc_step_kind k) {
    const recipe_step_def *d = npuc__recipe_step_def(k);
    return d && d->run != NULL;
}

int npuc__sha256_hex(const void *p, size_t n, char hex[65]) {
    unsigned char dig[EVP_MAX_MD_SIZE];
    unsigned int dl = 0;
    if (EVP_Digest(p, n, dig, &dl, EVP_sha256(), NULL) != 1 || dl != 32) return -1;
    for (unsigned i = 0; i < dl; i++) snprintf(hex + 2 * i, 3, "%02x", dig[i]);
    return 0;
}

/* ------------------------------------------------------------ parse state */

typedef struct pstate {
    npuc_ctx *ctx;
    const char *file;
    npuc_recipe *r;
} pstate;

static npuc_status perr(pstate *ps, recipe_mark m, const char *fmt, ...) NPUC_PRINTF(3, 4);
static npuc_status perr(pstate *ps, recipe_mark m, const char *fmt, ...) {
    char where[512], msg[NPUC_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return npuc_fail(ps->ctx, NPUC_ERR_ARG, "%s%s", npuc__recipe_where(ps->file, m, where, sizeof where), msg);
}

static npuc_status nomem(pstate *ps) {
    return npuc_fail(ps->ctx, NPUC_ERR_NOMEM, "%s: out of memory", ps->file);
}

/* Where a node starts: its own token for a scalar, else its first scalar;
 * fallback when it has none (an empty collection, an implicit null). */
static recipe_mark node_mark(struct fy_node *n, recipe_mark fallback) {
    if (!n) return fallback;
    if (fy_node_is_scalar(n)) {
        struct fy_token *t = fy_node_get_scalar_token(n);
        const struct fy_mark *m = t ? fy_token_start_mark(t) : NULL;
        /* Quoted scalars' tokens start after the quote: cite the quote. */
        int quoted = fy_node_get_style(n) == FYNS_SINGLE_QUOTED || fy_node_get_style(n) == FYNS_DOUBLE_QUOTED;
        if (m && m->line >= 0) return (recipe_mark){m->line + 1, m->column + (quoted && m->column > 0 ? 0 : 1)};
        return fallback;
    }
    void *it = NULL;
    if (fy_node_is_mapping(n)) {
        struct fy_node_pair *p = fy_node_mapping_iterate(n, &it);
        return p ? node_mark(fy_node_pair_key(p), fallback) : fallback;
    }
    struct fy_node *c = fy_node_sequence_iterate(n, &it);
    return c ? node_mark(c, fallback) : fallback;
}

/* The scalar's text (NUL-terminated copy in buf, cut at n-1) for messages. */
static const char *scalar_text(struct fy_node *n, char *buf, size_t bn) {
    size_t len = 0;
    const char *s = n && fy_node_is_scalar(n) ? fy_node_get_scalar(n, &len) : NULL;
    if (!s) s = "";
    if (len > bn - 1) len = bn - 1;
    memcpy(buf, s, len);
    buf[len] = 0;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)buf[i] < 0x20) buf[i] = '?';
    return buf;
}

typedef enum sclass { SC_NULL, SC_BOOL, SC_INT, SC_NUM, SC_STR } sclass;
static sclass classify(struct fy_node *n, int *b, int64_t *iv, double *dv);

/* An absent value, an empty one, or ~ / null. */
static int is_null(struct fy_node *n) {
    int b;
    int64_t i;
    double d;
    return !n || (fy_node_is_scalar(n) && classify(n, &b, &i, &d) == SC_NULL);
}

static const char *node_kind(struct fy_node *n) {
    if (is_null(n)) return "nothing";
    if (fy_node_is_mapping(n)) return "a mapping";
    if (fy_node_is_sequence(n)) return "a list";
    return "a scalar";
}

/* Types a scalar as YAML 1.2's core schema would (quoted: always a string). */
static sclass classify(struct fy_node *n, int *b, int64_t *iv, double *dv) {
    if (!n || fy_node_is_null(n)) return SC_NULL;
    size_t len;
    const char *s = fy_node_get_scalar(n, &len);
    if (!s) return SC_NULL;
    if (fy_node_get_style(n) != FYNS_PLAIN) return SC_STR;
    char buf[64];
    if (len == 0) return SC_NULL;
    if (len >= sizeof buf) return SC_STR;
    memcpy(buf, s, len);
    buf[len] = 0;
    if (!strcmp(buf, "~") || !strcmp(buf, "null") || !strcmp(buf, "Null") || !strcmp(buf, "NULL")) return SC_NULL;
    if (!strcmp(buf, "true") || !strcmp(buf, "True") || !strcmp(buf, "TRUE")) { *b = 1; return SC_BOOL; }
    if (!strcmp(buf, "false") || !strcmp(buf, "False") || !strcmp(buf, "FALSE")) { *b = 0; return SC_BOOL; }
    size_t k = (buf[0] == '-' || buf[0] == '+') ? 1 : 0;
    int digits = k < len;
    for (size_t j = k; j < len; j++)
        if (buf[j] < '0' || buf[j] > '9') digits = 0;
    if (digits) {
        errno = 0;
        long long v = strtoll(buf, NULL, 10);
        if (errno == 0) { *iv = v; *dv = (double)v; return SC_INT; }
        return SC_STR;
    }
    char *end;
    errno = 0;
    double d = strtod(buf, &end);
    if (*end == 0 && errno == 0 && isfinite(d) && strpbrk(buf, "0123456789") && !strpbrk(buf, "xXpP")) {
        *dv = d;
        return SC_NUM;
    }
    return SC_STR;
}

static char *scalar_dup(struct fy_node *n) {
    size_t len = 0;
    const char *s = fy_node_get_scalar(n, &len);
    char *c = malloc(len + 1);
    if (!c) return NULL;
    if (len) memcpy(c, s, len);
    c[len] = 0;
    return c;
}

static void format_range(char *buf, size_t n, const recipe_key *k) {
    if (k->type == RT_INT) snprintf(buf, n, "an integer from %.0f to %.0f", k->lo, k->hi);
    else snprintf(buf, n, "a number in %c%g, %g%c", k->flags & RK_LO_OPEN ? '(' : '[', k->lo, k->hi,
                  k->flags & RK_HI_OPEN ? ')' : ']');
}

/* Checks one string of a regex / rule key. */
static npuc_status check_pattern(pstate *ps, const char *ctxname, const recipe_key *k, const char *s,
                                 recipe_mark m) {
    char pat[1024];
    if (k->flags & RK_RULE) {
        const char *eq = strrchr(s, '=');
        if (!eq || eq == s || !eq[1])
            return perr(ps, m, "%s'%s': '%s' must be REGEX=VALUE", ctxname, k->name, s);
        size_t pl = (size_t)(eq - s);
        if (pl >= sizeof pat) return perr(ps, m, "%s'%s': pattern too long", ctxname, k->name);
        memcpy(pat, s, pl);
        pat[pl] = 0;
    } else {
        if (strlen(s) >= sizeof pat) return perr(ps, m, "%s'%s': pattern too long", ctxname, k->name);
        snprintf(pat, sizeof pat, "%s", s);
    }
    regex_t re;
    int rc = npuc__regcomp(&re, pat);
    if (rc != 0) {
        char why[256];
        regerror(rc, &re, why, sizeof why);
        return perr(ps, m, "%s'%s': bad regular expression '%s': %s", ctxname, k->name, pat, why);
    }
    regfree(&re);
    return NPUC_OK;
}

/* Types the value node v of key k into o.  ctxname prefixes messages
 * ("step 'quantize': "). */
static npuc_status parse_value(pstate *ps, const char *ctxname, const recipe_key *k, struct fy_node *v,
                               recipe_mark keymark, recipe_opt *o) {
    char txt[96], rng[96];
    recipe_mark m = node_mark(v, keymark);
    o->key = k;
    o->mark = m;
    int b = 0;
    int64_t iv = 0;
    double dv = 0;
    if (k->type == RT_LIST) {
        if (v && fy_node_is_sequence(v)) {
            int cnt = fy_node_sequence_item_count(v);
            if (cnt <= 0) return perr(ps, m, "%s'%s' is an empty list", ctxname, k->name);
            o->list = calloc((size_t)cnt, sizeof *o->list);
            o->lmark = calloc((size_t)cnt, sizeof *o->lmark);
            if (!o->list || !o->lmark) return nomem(ps);
            void *it = NULL;
            struct fy_node *c;
            while ((c = fy_node_sequence_iterate(v, &it))) {
                recipe_mark cm = node_mark(c, m);
                sclass sc = classify(c, &b, &iv, &dv);
                if (!fy_node_is_scalar(c) || sc == SC_NULL || sc == SC_BOOL)
                    return perr(ps, cm, "%s'%s': each item must be a string, got %s", ctxname, k->name,
                                sc == SC_BOOL ? "a boolean" : node_kind(c));
                if (!(o->list[o->nlist] = scalar_dup(c))) return nomem(ps);
                o->lmark[o->nlist++] = cm;
            }
        } else {
            sclass sc = classify(v, &b, &iv, &dv);
            if (!v || !fy_node_is_scalar(v) || sc == SC_NULL || sc == SC_BOOL)
                return perr(ps, m, "%s'%s' must be a string or a list of strings, got %s", ctxname, k->name,
                            sc == SC_BOOL ? "a boolean" : node_kind(v));
            o->list = calloc(1, sizeof *o->list);
            o->lmark = calloc(1, sizeof *o->lmark);
            if (!o->list || !o->lmark || !(o->list[0] = scalar_dup(v))) return nomem(ps);
            o->lmark[0] = m;
            o->nlist = 1;
        }
        for (size_t i = 0; i < o->nlist; i++) {
            npuc_status st;
            if ((k->flags & (RK_REGEX | RK_RULE)) &&
                (st = check_pattern(ps, ctxname, k, o->list[i], o->lmark[i])) != NPUC_OK)
                return st;
            char why[200];
            if (k->check && k->check(o->list[i], why, sizeof why) != 0)
                return perr(ps, o->lmark[i], "%s'%s': %s", ctxname, k->name, why);
        }
        return NPUC_OK;
    }
    if (!v || !fy_node_is_scalar(v) || is_null(v)) {
        const char *want = k->type == RT_BOOL ? "true or false" : k->type == RT_STR ? "a string" : "a number";
        if (k->type == RT_INT || k->type == RT_NUM) { format_range(rng, sizeof rng, k); want = rng; }
        return perr(ps, m, "%s'%s' must be %s, got %s", ctxname, k->name, want, node_kind(v));
    }
    sclass sc = classify(v, &b, &iv, &dv);
    scalar_text(v, txt, sizeof txt);
    switch (k->type) {
    case RT_BOOL:
        if (sc != SC_BOOL) return perr(ps, m, "%s'%s' must be true or false, got '%s'", ctxname, k->name, txt);
        o->b = b;
        break;
    case RT_INT:
    case RT_NUM:
        format_range(rng, sizeof rng, k);
        if (!(sc == SC_INT || (k->type == RT_NUM && sc == SC_NUM)))
            return perr(ps, m, "%s'%s' must be %s, got %s'%s'", ctxname, k->name, rng,
                        sc == SC_STR && fy_node_get_style(v) != FYNS_PLAIN ? "the string " : "", txt);
        /* Integers compared exactly (long double holds every int64). */
        long double lv = sc == SC_INT ? (long double)iv : (long double)dv;
        if (lv < k->lo || lv > k->hi || ((k->flags & RK_LO_OPEN) && lv == k->lo) ||
            ((k->flags & RK_HI_OPEN) && lv == k->hi))
            return perr(ps, m, "%s'%s' must be %s, got %s", ctxname, k->name, rng, txt);
        o->i = iv;
        o->d = dv;
        break;
    case RT_STR:
        if (sc == SC_BOOL) return perr(ps, m, "%s'%s' must be a string, got '%s'", ctxname, k->name, txt);
        if (!(o->s = scalar_dup(v))) return nomem(ps);
        if (k->flags & (RK_REGEX | RK_RULE)) {
            npuc_status st = check_pattern(ps, ctxname, k, o->s, m);
            if (st != NPUC_OK) return st;
        }
        char why[200];
        if (k->choices && npuc__check_choice(k, o->s, why, sizeof why) != 0)
            return perr(ps, m, "%s'%s': %s", ctxname, k->name, why);
        if (k->check && k->check(o->s, why, sizeof why) != 0)
            return perr(ps, m, "%s'%s': %s", ctxname, k->name, why);
        break;
    case RT_LIST: break;
    }
    return NPUC_OK;
}

/* The keys of a table: nkeys rows, or up to a row without a name. */
static size_t nkeys_of(const recipe_key *keys, size_t nkeys) {
    size_t n = 0;
    while (n < nkeys && keys[n].name) n++;
    return n;
}

static const char *key_list(const recipe_key *keys, size_t nkeys, const char *extra, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    for (size_t i = 0; i < nkeys_of(keys, nkeys) && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? ", " : "", keys[i].name);
    if (extra && k < n) snprintf(buf + k, n - k, "%s%s", k ? ", " : "", extra);
    return buf;
}

/* Parses a mapping of options against keys.  allowed (may be NULL) limits
 * the keys actually honoured; a key in keys but not in allowed is refused
 * with the list of those that are.  A key "overrides" is handed to ov_fn. */
typedef npuc_status (*ov_fn)(pstate *ps, recipe_step *st, struct fy_node *v, recipe_mark km);

static npuc_status parse_optset(pstate *ps, const char *ctxname, const recipe_key *keys, size_t nkeys,
                                const char *const *allowed, struct fy_node *map,
                                recipe_mark mark, recipe_optset *out, recipe_step *step, ov_fn ovf) {
    out->mark = mark;
    if (is_null(map)) return NPUC_OK;
    if (!fy_node_is_mapping(map))
        return perr(ps, node_mark(map, mark), "%sexpected a mapping of options, got %s", ctxname, node_kind(map));
    int cnt = fy_node_mapping_item_count(map);
    out->v = calloc(cnt > 0 ? (size_t)cnt : 1, sizeof *out->v);
    if (!out->v) return nomem(ps);
    void *it = NULL;
    struct fy_node_pair *p;
    while ((p = fy_node_mapping_iterate(map, &it))) {
        struct fy_node *kn = fy_node_pair_key(p), *vn = fy_node_pair_value(p);
        recipe_mark km = node_mark(kn, mark);
        char name[96];
        if (!kn || !fy_node_is_scalar(kn)) return perr(ps, km, "%soption names must be plain words", ctxname);
        scalar_text(kn, name, sizeof name);
        if (ovf && strcmp(name, "overrides") == 0) {
            npuc_status st = ovf(ps, step, vn, km);
            if (st != NPUC_OK) return st;
            continue;
        }
        const recipe_key *k = NULL;
        nkeys = nkeys_of(keys, nkeys);
        for (size_t q = 0; q < nkeys; q++)
            if (strcmp(keys[q].name, name) == 0) k = &keys[q];
        if (!k) {
            char known[512];
            if (strchr(name, '-')) {
                for (char *c = name; *c; c++)
                    if (*c == '-') *c = '_';
                for (size_t q = 0; q < nkeys; q++)
                    if (strcmp(keys[q].name, name) == 0)
                        return perr(ps, km, "%sunknown key '%s' (option names use '_' for '-': '%s')", ctxname,
                                    scalar_text(kn, known, sizeof known), name);
                scalar_text(kn, name, sizeof name);
            }
            return perr(ps, km, "%sunknown key '%s' (known: %s)", ctxname, name,
                        key_list(keys, nkeys, ovf ? "overrides" : NULL, known, sizeof known));
        }
        if (allowed) {
            int ok = 0;
            for (const char *const *a = allowed; *a; a++)
                if (strcmp(*a, name) == 0) ok = 1;
            if (!ok) {
                char known[256];
                size_t k2 = 0;
                known[0] = 0;
                for (const char *const *a = allowed; *a && k2 < sizeof known; a++)
                    k2 += (size_t)snprintf(known + k2, sizeof known - k2, "%s%s", k2 ? ", " : "", *a);
                return perr(ps, km, "%sthe override key '%s' does not apply to this step (it takes: %s)", ctxname,
                            name, known);
            }
        }
        npuc_status st = parse_value(ps, ctxname, k, vn, km, &out->v[out->n]);
        out->v[out->n].seq = (int)out->n + 1;
        out->n++;
        if (st != NPUC_OK) return st;
    }
    return NPUC_OK;
}

static npuc_status parse_overrides(pstate *ps, recipe_step *st, struct fy_node *v, recipe_mark km) {
    const recipe_step_def *d = npuc__recipe_step_def(st->kind);
    char cn[64];
    snprintf(cn, sizeof cn, "step '%s': ", d->name);
    if (!v || !fy_node_is_sequence(v))
        return perr(ps, node_mark(v, km), "%s'overrides' must be a list of mappings with 'match', got %s", cn,
                    node_kind(v));
    int cnt = fy_node_sequence_item_count(v);
    st->ov = calloc(cnt > 0 ? (size_t)cnt : 1, sizeof *st->ov);
    if (!st->ov) return nomem(ps);
    /* "match", "optional" plus what the step honours. */
    const char *allowed[9];
    size_t na = 0;
    allowed[na++] = "match";
    allowed[na++] = "optional";
    for (const char *const *a = d->pass->override_keys; a && *a && na < 8; a++) allowed[na++] = *a;
    allowed[na] = NULL;
    void *it = NULL;
    struct fy_node *c;
    while ((c = fy_node_sequence_iterate(v, &it))) {
        recipe_mark cm = node_mark(c, km);
        if (!fy_node_is_mapping(c))
            return perr(ps, cm, "%seach override must be a mapping with 'match', got %s", cn, node_kind(c));
        recipe_optset *o = &st->ov[st->nov++];
        npuc_status s = parse_optset(ps, cn, npuc__recipe_override_keys, SIZE_MAX, allowed, c, cm, o, NULL, NULL);
        if (s != NPUC_OK) return s;
        const recipe_opt *match = npuc__ropt(o, "match"), *skip = npuc__ropt(o, "skip");
        const recipe_opt *opt = npuc__ropt(o, "optional");
        if (!match) return perr(ps, cm, "%san override needs 'match: REGEX'", cn);
        if (o->n < 2 + (opt != NULL)) return perr(ps, cm, "%sthe override for '%s' sets nothing", cn, match->s);
        /* skip leaves the tensors alone, so a value beside it would be silently
         * ignored (the pass's exclude list wins over its per-tensor rules). */
        for (size_t i = 0; skip && skip->b && i < o->n; i++)
            if (&o->v[i] != match && &o->v[i] != skip && &o->v[i] != opt)
                return perr(ps, o->v[i].mark, "%sthe override for '%s' sets 'skip: true' and '%s': a skipped tensor "
                            "gets no %s", cn, match->s, o->v[i].key->name, o->v[i].key->name);
    }
    return NPUC_OK;
}

/* "fold-bn, prune, sparsify, lowrank, quantize": the step names, in kind order. */
static const char *step_names(char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < NPUC_STEP_COUNT && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? ", " : "", npuc_step_kind_name((npuc_step_kind)i));
    return buf;
}

static npuc_status parse_step(pstate *ps, struct fy_node *item, recipe_mark fallback, recipe_step *st) {
    recipe_mark m = node_mark(item, fallback);
    char names[160];
    if (!item || !fy_node_is_mapping(item) || fy_node_mapping_item_count(item) != 1)
        return perr(ps, m, "each step must be a mapping with one key, the step's name (%s), got %s",
                    step_names(names, sizeof names),
                    item && fy_node_is_mapping(item) ? "several keys" : node_kind(item));
    void *it = NULL;
    struct fy_node_pair *p = fy_node_mapping_iterate(item, &it);
    struct fy_node *kn = fy_node_pair_key(p), *vn = fy_node_pair_value(p);
    char name[64];
    scalar_text(kn, name, sizeof name);
    int kind = -1;
    for (int k = 0; k < NPUC_STEP_COUNT; k++)
        if (strcmp(name, npuc_step_kind_name((npuc_step_kind)k)) == 0 ||
            (k == NPUC_STEP_FOLD_BN && strcmp(name, "fold_bn") == 0))
            kind = k;
    if (kind < 0)
        return perr(ps, m, "unknown step '%s' (steps: %s)", name, step_names(names, sizeof names));
    st->kind = (npuc_step_kind)kind;
    st->mark = m;
    const recipe_step_def *d = npuc__recipe_step_def(st->kind);
    char cn[64];
    snprintf(cn, sizeof cn, "step '%s': ", d->name);
    npuc_status s = parse_optset(ps, cn, d->pass->options, d->pass->noptions, NULL, vn, m, &st->opts, st,
                                 parse_overrides);
    if (s != NPUC_OK) return s;
    npuc_pass_optset view;
    npuc__pass_optset_view(&view, d->pass, &st->opts, st->ov, st->nov, ps->file);
    return npuc_pass_validate(ps->ctx, &view);
}

/* Order rules (docs/recipes.md#order): quantize writes codes, so it comes
 * last; fold-bn needs dense producers, so it precedes lowrank and quantize. */
static npuc_status check_order(pstate *ps) {
    const npuc_recipe *r = ps->r;
    for (size_t i = 0; i < r->nsteps; i++) {
        const recipe_step *s = &r->steps[i];
        if (s->kind == NPUC_STEP_QUANTIZE && i + 1 < r->nsteps)
            return perr(ps, r->steps[i + 1].mark,
                        "step '%s' comes after 'quantize' (line %d): quantize must be the last step, "
                        "later steps would see integer codes",
                        npuc_step_kind_name(r->steps[i + 1].kind), s->mark.line);
        if (s->kind == NPUC_STEP_FOLD_BN)
            for (size_t j = 0; j < i; j++)
                if (r->steps[j].kind == NPUC_STEP_LOWRANK)
                    return perr(ps, s->mark,
                                "'fold-bn' must come before 'lowrank' (line %d): folding needs the dense "
                                "producer weights",
                                r->steps[j].mark.line);
    }
    return NPUC_OK;
}

/* ------------------------------------------------------------ canonical JSON */

static json_t *opt_json(const recipe_opt *o) {
    switch (o->key->type) {
    case RT_BOOL: return json_boolean(o->b);
    case RT_INT: return json_integer((json_int_t)o->i);
    case RT_NUM: return json_real(o->d);
    case RT_STR: return json_string(o->s);
    case RT_LIST: {
        json_t *a = json_array();
        for (size_t i = 0; a && i < o->nlist; i++)
            if (json_array_append_new(a, json_string(o->list[i]))) { json_decref(a); return NULL; }
        return a;
    }
    }
    return NULL;
}

/* Options in key-table order, so the file's key order does not matter. */
static json_t *optset_json(const recipe_optset *s, const recipe_key *keys, size_t nkeys) {
    json_t *o = json_object();
    nkeys = nkeys_of(keys, nkeys);
    for (const recipe_key *k = keys; o && k < keys + nkeys; k++) {
        const recipe_opt *v = npuc__ropt(s, k->name);
        if (!v) continue;
        json_t *j = opt_json(v);
        if (!j || json_object_set_new(o, k->name, j)) { json_decref(o); return NULL; }
    }
    return o;
}

static char *canonical_json(const npuc_recipe *r) {
    json_t *root = json_object(), *steps = json_array();
    char *out = NULL;
    if (!root || !steps) goto done;
    json_object_set_new(root, "version", json_integer(1));
    if (r->nlayout) {
        json_t *l = json_array();
        for (size_t i = 0; l && i < r->nlayout; i++) json_array_append_new(l, json_string(r->layout[i]));
        if (!l || json_object_set_new(root, "layout", l)) goto done;
    }
    for (size_t i = 0; i < r->nsteps; i++) {
        const recipe_step *s = &r->steps[i];
        const recipe_step_def *d = npuc__recipe_step_def(s->kind);
        json_t *o = optset_json(&s->opts, d->pass->options, d->pass->noptions);
        if (!o) goto done;
        if (s->nov) {
            json_t *ov = json_array();
            for (size_t k = 0; ov && k < s->nov; k++) {
                json_t *e = optset_json(&s->ov[k], npuc__recipe_override_keys, SIZE_MAX);
                if (!e || json_array_append_new(ov, e)) { json_decref(ov); ov = NULL; }
            }
            if (!ov || json_object_set_new(o, "overrides", ov)) { json_decref(o); goto done; }
        }
        json_t *st = json_object();
        if (!st || json_object_set_new(st, d->name, o) || json_array_append_new(steps, st)) goto done;
    }
    if (json_object_set(root, "steps", steps)) goto done;
    out = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
done:
    json_decref(steps);
    json_decref(root);
    return out;
}

/* ------------------------------------------------------------ top level */

static const recipe_key LAYOUT_KEY = {.name = "layout", .type = RT_LIST, .flags = RK_RULE};
static const recipe_key VERSION_KEY = {.name = "version", .type = RT_INT, .lo = 1, .hi = 1};
static const recipe_key DESC_KEY = {.name = "description", .type = RT_STR};

static npuc_status parse_root(pstate *ps, struct fy_node *root) {
    npuc_recipe *r = ps->r;
    recipe_mark top = {1, 1};
    if (is_null(root)) return perr(ps, top, "the recipe is empty (it needs 'steps:')");
    if (!fy_node_is_mapping(root))
        return perr(ps, node_mark(root, top), "a recipe is a mapping with 'steps:', got %s", node_kind(root));
    struct fy_node *steps = NULL;
    recipe_mark steps_mark = top;
    void *it = NULL;
    struct fy_node_pair *p;
    while ((p = fy_node_mapping_iterate(root, &it))) {
        struct fy_node *kn = fy_node_pair_key(p), *vn = fy_node_pair_value(p);
        recipe_mark km = node_mark(kn, top);
        char name[96];
        scalar_text(kn, name, sizeof name);
        recipe_opt o;
        memset(&o, 0, sizeof o);
        npuc_status st = NPUC_OK;
        if (strcmp(name, "steps") == 0) {
            steps = vn;
            steps_mark = km;
        } else if (strcmp(name, "version") == 0) {
            st = parse_value(ps, "", &VERSION_KEY, vn, km, &o);
        } else if (strcmp(name, "description") == 0) {
            st = parse_value(ps, "", &DESC_KEY, vn, km, &o);
        } else if (strcmp(name, "layout") == 0) {
            st = parse_value(ps, "", &LAYOUT_KEY, vn, km, &o);
            if (st == NPUC_OK) {
                r->layout = o.list;
                r->layout_mark = o.lmark;
                r->nlayout = o.nlist;
                o.list = NULL;
                o.lmark = NULL;
                o.nlist = 0;
            }
        } else {
            st = perr(ps, km, "unknown key '%s' (known: version, description, layout, steps)", name);
        }
        if (o.key) {
            free(o.s);
            for (size_t j = 0; j < o.nlist; j++) free(o.list[j]);
            free(o.list);
            free(o.lmark);
        }
        if (st != NPUC_OK) return st;
    }
    if (!steps) return perr(ps, top, "the recipe has no 'steps:'");
    if (!fy_node_is_sequence(steps) || fy_node_sequence_item_count(steps) <= 0)
        return perr(ps, node_mark(steps, steps_mark), "'steps' must be a non-empty list, got %s",
                    fy_node_is_sequence(steps) ? "an empty list" : node_kind(steps));
    int cnt = fy_node_sequence_item_count(steps);
    r->steps = calloc((size_t)cnt, sizeof *r->steps);
    if (!r->steps) return nomem(ps);
    it = NULL;
    struct fy_node *item;
    while ((item = fy_node_sequence_iterate(steps, &it))) {
        npuc_status st = parse_step(ps, item, steps_mark, &r->steps[r->nsteps]);
        r->nsteps++;
        if (st != NPUC_OK) return st;
    }
    return check_order(ps);
}

npuc_status npuc_recipe_parse(npuc_ctx *ctx, const char *name, const char *text, size_t len,
                              npuc_recipe **out) {
    *out = NULL;
    npuc_recipe *r = calloc(1, sizeof *r);
    if (!r || !(r->name = npuc__strdup(name))) {
        free(r);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", name);
    }
    pstate ps = {ctx, name, r};
    npuc_status st = NPUC_OK;
    struct fy_diag *diag = NULL;
    struct fy_document *doc = NULL;
    if ((st = npuc__recipe_text_check(ctx, name, text, len)) != NPUC_OK) goto done;
    struct fy_diag_cfg dc;
    fy_diag_cfg_default(&dc);
    dc.fp = NULL;
    diag = fy_diag_create(&dc);
    if (!diag) { st = nomem(&ps); goto done; }
    fy_diag_set_collect_errors(diag, true);
    struct fy_parse_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.flags = FYPCF_QUIET; /* resolved by npuc__recipe_yaml_check once its size is known */
    cfg.diag = diag;
    doc = fy_document_build_from_string(&cfg, text, len);
    if (!doc) {
        void *it = NULL;
        struct fy_diag_error *e = fy_diag_errors_iterate(diag, &it);
        if (e) {
            char where[512];
            st = npuc_fail(ctx, NPUC_ERR_ARG, "%sYAML: %s",
                           npuc__recipe_where(name, (recipe_mark){e->line, e->column}, where, sizeof where),
                           e->msg ? e->msg : "syntax error");
        } else {
            /* No document at all: only blanks and comments. */
            st = perr(&ps, (recipe_mark){1, 1}, "the recipe is empty (it needs 'steps:')");
        }
        goto done;
    }
    if ((st = npuc__recipe_yaml_check(ctx, name, doc)) != NPUC_OK) goto done;
    if ((st = parse_root(&ps, fy_document_root(doc))) != NPUC_OK) goto done;
    if (!(r->json = canonical_json(r)) || npuc__sha256_hex(r->json, strlen(r->json), r->sha) != 0) {
        st = nomem(&ps);
        goto done;
    }
done:
    fy_document_destroy(doc);
    if (diag) fy_diag_destroy(diag);
    if (st != NPUC_OK) npuc_recipe_free(r);
    else *out = r;
    return st;
}

npuc_status npuc_recipe_load(npuc_ctx *ctx, const char *path, npuc_recipe **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return npuc_fail(ctx, errno == ENOENT ? NPUC_ERR_NOT_FOUND : NPUC_ERR_IO, "%s: %s", path, strerror(errno));
    char *buf = malloc(RECIPE_MAX_BYTES + 1);
    if (!buf) { fclose(f); return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path); }
    size_t n = fread(buf, 1, RECIPE_MAX_BYTES + 1, f);
    int err = ferror(f);
    fclose(f);
    npuc_status st;
    if (err) st = npuc_fail(ctx, NPUC_ERR_IO, "%s: read error", path);
    else if (n > RECIPE_MAX_BYTES) st = npuc_fail(ctx, NPUC_ERR_ARG, "%s: larger than 1 MiB: not a recipe", path);
    else st = npuc_recipe_parse(ctx, path, buf, n, out);
    free(buf);
    return st;
}

void npuc_recipe_free(npuc_recipe *r) {
    if (!r) return;
    for (size_t i = 0; i < r->nsteps; i++) {
        recipe_step *s = &r->steps[i];
        npuc__optset_free_values(&s->opts);
        for (size_t k = 0; k < s->nov; k++) npuc__optset_free_values(&s->ov[k]);
        free(s->ov);
    }
    free(r->steps);
    for (size_t i = 0; i < r->nlayout; i++) free(r->layout[i]);
    free(r->layout);
    free(r->layout_mark);
    free(r->json);
    free(r->name);
    free(r);
}

const char *npuc_recipe_name(const npuc_recipe *r) { return r->name; }
size_t npuc_recipe_step_count(const npuc_recipe *r) { return r->nsteps; }
const char *npuc_recipe_json(const npuc_recipe *r) { return r->json; }
const char *npuc_recipe_sha256(const npuc_recipe *r) { return r->sha; }

npuc_step_kind npuc_recipe_step_kind(const npuc_recipe *r, size_t i, int *line, int *col) {
    if (line) *line = r->steps[i].mark.line;
    if (col) *col = r->steps[i].mark.col;
    return r->steps[i].kind;
}

/* ------------------------------------------------------------ changing a step */

/* Puts back what npuc_recipe_set_option replaced, when the step refuses the change. */
static void opt_swap(recipe_opt *a, recipe_opt *b) {
    recipe_opt t = *a;
    *a = *b;
    *b = t;
}

npuc_status npuc_recipe_set_option(npuc_ctx *ctx, npuc_recipe *r, size_t step, const char *key, const char *text) {
    if (step >= r->nsteps) return npuc_fail(ctx, NPUC_ERR_ARG, "%s: it has no step %zu", r->name, step + 1);
    recipe_step *s = &r->steps[step];
    const recipe_step_def *d = npuc__recipe_step_def(s->kind);
    const npuc_pass_option *o = d && d->pass ? npuc_pass_option_find(d->pass, key) : NULL;
    if (!o || o->type == NPUC_OPT_LIST)
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: step '%s' has no %soption '%s'", r->name, d ? d->name : "?",
                         o ? "single-valued " : "", key);
    size_t at = s->opts.n;
    int seq = 0;
    for (size_t i = 0; i < s->opts.n; i++) {
        if (s->opts.v[i].key == o) at = i;
        if (s->opts.v[i].seq > seq) seq = s->opts.v[i].seq;
    }
    recipe_opt nv, old;
    memset(&nv, 0, sizeof nv);
    memset(&old, 0, sizeof old);
    npuc_status st = NPUC_OK;
    if (text) {
        /* Typed and checked as the command line types it. */
        npuc_pass_optset *tmp = NULL;
        if ((st = npuc_pass_optset_new(ctx, d->pass, &tmp)) != NPUC_OK) return st;
        st = npuc_pass_optset_set(ctx, tmp, o, text);
        if (st == NPUC_OK) {
            nv = tmp->own.v[0];
            memset(&tmp->own.v[0], 0, sizeof tmp->own.v[0]); /* moved into nv */
            nv.seq = seq + 1;
            nv.mark = (recipe_mark){0, 0};
        }
        npuc_pass_optset_free(tmp);
        if (st != NPUC_OK) return st;
    } else if (at == s->opts.n) {
        return NPUC_OK; /* nothing to remove */
    }
    const size_t n0 = s->opts.n;
    if (at == n0 && text) {
        recipe_opt *v = realloc(s->opts.v, (n0 + 1) * sizeof *v);
        if (!v) {
            free(nv.s);
            return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        }
        s->opts.v = v;
        s->opts.v[s->opts.n++] = nv;
    } else if (text) {
        old = s->opts.v[at];
        s->opts.v[at] = nv;
    } else {
        old = s->opts.v[at];
        memmove(&s->opts.v[at], &s->opts.v[at + 1], (n0 - at - 1) * sizeof *s->opts.v);
        s->opts.n--;
    }
    npuc_pass_optset view;
    npuc__pass_optset_view(&view, d->pass, &s->opts, s->ov, s->nov, r->name);
    st = npuc_pass_validate(ctx, &view);
    char *json = NULL;
    char sha[65];
    if (st == NPUC_OK && (!(json = canonical_json(r)) || npuc__sha256_hex(json, strlen(json), sha) != 0))
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", r->name);
    if (st != NPUC_OK) { /* the recipe as it was */
        free(json);
        if (at == n0) {
            s->opts.n--;
            free(nv.s);
        } else if (text) {
            opt_swap(&s->opts.v[at], &old);
            free(old.s); /* now the new value */
            old.s = NULL;
        } else {
            memmove(&s->opts.v[at + 1], &s->opts.v[at], (n0 - at - 1) * sizeof *s->opts.v);
            s->opts.v[at] = old;
            s->opts.n++;
        }
        return st;
    }
    free(old.s); /* a single value: no list */
    free(old.lmark);
    free(r->json);
    r->json = json;
    memcpy(r->sha, sha, sizeof sha);
    return NPUC_OK;
}
