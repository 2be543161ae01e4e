/*
 * graph_edges.c - stated consumer edges (graph_next.c has the automatic
 * ones): --next PRODUCER=CONSUMER[,...] statements and --graph FILE (lines
 * "A=B[,C]" with # comments, or JSON {"next": {...}, "bn_pairs": [...]},
 * which the data catalogs already are).  Every edge is checked when it is
 * read: names must resolve to a tensor or a module / layer, and the
 * consumer must read as many channels (or, a depthwise conv, pass as many
 * through) as the producer makes.  Failures are NPUC_ERR_ARG naming the
 * statement, before anything is written.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"


const npuc__xedge *npuc__graph_stated_next(const npuc__graph *g, size_t x) {
    for (size_t i = 0; i < g->nxe; i++)
        if (g->xe[i].prod == x) return &g->xe[i];
    return NULL;
}

int64_t npuc__graph_stated_bn(const npuc__graph *g, size_t x) {
    for (size_t i = 0; i < g->nxb; i++)
        if (g->xb[i].prod == x) return (int64_t)g->xb[i].bn;
    return -1;
}

/* The module a name means: a tensor's module, or a module / layer key. */
static int64_t resolve(const npuc__graph *g, const char *name, size_t len) {
    char buf[1024];
    if (len >= sizeof buf) return -1;
    memcpy(buf, name, len);
    buf[len] = 0;
    size_t ti;
    if (npuc_model_find(g->m, buf, &ti) == 0) return (int64_t)g->mod_of[ti];
    return npuc__find_mod(g, buf);
}

/* Checks one explicit edge locally: x's channels reach y's input. */
static npuc_status check_edge(npuc_ctx *ctx, npuc__graph *g, const char *text, size_t x, size_t y) {
    const npuc__mod *a = &g->mods[x], *b = &g->mods[y];
    const char *path = npuc_model_path(g->m);
    uint64_t c;
    if (a->is_bn) c = npuc__bn_channels(g, &a->bn);
    else if (a->weight >= 0) c = npuc__out_channels(npuc__gt(g, a->weight));
    else return npuc_fail(ctx, NPUC_ERR_ARG, "%s: %s: '%s' has no conv/linear weight", path, text, a->key);
    if (b->is_bn) {
        if (npuc__bn_channels(g, &b->bn) != c)
            return npuc_fail(ctx, NPUC_ERR_ARG, "%s: %s: BatchNorm '%s' has %llu channels, '%s' produces %llu",
                             path, text, b->key, (unsigned long long)npuc__bn_channels(g, &b->bn), a->key,
                             (unsigned long long)c);
        return NPUC_OK;
    }
    if (b->weight < 0)
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: %s: '%s' has no conv/linear weight", path, text, b->key);
    const npuc_tensor_info *tb = npuc__gt(g, b->weight);
    if (npuc__is_dw(tb, c) || npuc__in_channels(tb) == c) return NPUC_OK;
    return npuc_fail(ctx, NPUC_ERR_ARG,
                     "%s: %s: '%s'%s takes %llu input channels, '%s' produces %llu: shapes do not match", path,
                     text, tb->name, tb->layout == NPUC_LAYOUT_HWIM || (tb->layout == NPUC_LAYOUT_OIHW && tb->shape[1] == 1)
                         ? " (depthwise)" : "",
                     (unsigned long long)(npuc__is_dw(tb, 0) ? npuc__out_channels(tb) : npuc__in_channels(tb)), a->key,
                     (unsigned long long)c);
}

/* Trims spaces around a name of len bytes at *s. */
static void trim(const char **s, size_t *len) {
    while (*len && isspace((unsigned char)**s)) (*s)++, (*len)--;
    while (*len && isspace((unsigned char)(*s)[*len - 1])) (*len)--;
}

static npuc_status add_edge(npuc_ctx *ctx, npuc__graph *g, const char *text, const char *lhs, size_t ll,
                            const char *rhs) {
    const char *path = npuc_model_path(g->m);
    trim(&lhs, &ll);
    int64_t x = resolve(g, lhs, ll);
    if (x < 0)
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: %s: no tensor or layer '%.*s'", path, text, (int)ll, lhs);
    if (npuc__graph_stated_next(g, (size_t)x))
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: %s: '%s' has consumers stated twice", path, text, g->mods[x].key);
    npuc__xedge *p = realloc(g->xe, (g->nxe + 1) * sizeof *p);
    if (!p) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    g->xe = p;
    npuc__xedge *e = &g->xe[g->nxe];
    memset(e, 0, sizeof *e);
    e->prod = (size_t)x;
    e->text = npuc__strdup(text);
    e->cons = calloc(NPUC_GRAPH_MAX_NEXT, sizeof *e->cons);
    if (!e->text || !e->cons) {
        free(e->text);
        free(e->cons);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    g->nxe++;
    const char *s = rhs;
    while (1) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        const char *next = comma ? comma + 1 : NULL;
        trim(&s, &len);
        if (len == 0) return npuc_fail(ctx, NPUC_ERR_ARG, "%s: %s: empty consumer name", path, text);
        int64_t y = resolve(g, s, len);
        if (y < 0) return npuc_fail(ctx, NPUC_ERR_ARG, "%s: %s: no tensor or layer '%.*s'", path, text, (int)len, s);
        if (e->ncons >= NPUC_GRAPH_MAX_NEXT) return npuc_fail(ctx, NPUC_ERR_ARG, "%s: %s: too many consumers", path, text);
        npuc_status st = check_edge(ctx, g, text, (size_t)x, (size_t)y);
        if (st != NPUC_OK) return st;
        e->cons[e->ncons++] = (size_t)y;
        if (!next) break;
        s = next;
    }
    return NPUC_OK;
}

static npuc_status add_statement(npuc_ctx *ctx, npuc__graph *g, const char *text) {
    const char *eq = strchr(text, '=');
    if (!eq || eq == text || !eq[1])
        return npuc_fail(ctx, NPUC_ERR_ARG, "--next '%s': expected PRODUCER=CONSUMER[,CONSUMER...]", text);
    char label[1100];
    snprintf(label, sizeof label, "--next '%s'", text);
    return add_edge(ctx, g, label, text, (size_t)(eq - text), eq + 1);
}

static npuc_status add_bn_pair(npuc_ctx *ctx, npuc__graph *g, const char *file, const json_t *p) {
    const char *conv, *bn;
    npuc__graph_json_pair(p, &conv, &bn);
    if (!conv || !bn)
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: a bn_pairs entry needs \"conv\" and \"bn\" (or \"gamma\"/\"mean\")",
                         file);
    int64_t x = resolve(g, conv, strlen(conv)), b = resolve(g, bn, strlen(bn));
    if (x < 0 || b < 0)
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: bn_pairs %s=%s: no tensor or layer '%s'", file, conv, bn,
                         x < 0 ? conv : bn);
    if (!g->mods[b].is_bn)
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: bn_pairs %s=%s: '%s' is not a BatchNorm", file, conv, bn, bn);
    char text[600];
    snprintf(text, sizeof text, "%s: bn_pairs %s=%s", file, conv, bn);
    npuc_status st = check_edge(ctx, g, text, (size_t)x, (size_t)b);
    if (st != NPUC_OK) return st;
    npuc__xbn *q = realloc(g->xb, (g->nxb + 1) * sizeof *q);
    if (!q) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    g->xb = q;
    g->xb[g->nxb].prod = (size_t)x;
    g->xb[g->nxb].bn = (size_t)b;
    g->nxb++;
    return NPUC_OK;
}

/* --graph FILE: JSON {"next": {"A": "B" | ["B", ...]}, "bn_pairs": [...]}
 * or text lines "A=B[,C...]" with # comments. */
static npuc_status read_graph_file(npuc_ctx *ctx, npuc__graph *g, const char *file) {
    char *buf;
    size_t len;
    char what[PATH_MAX + 16];
    snprintf(what, sizeof what, "--graph %s", file);
    npuc_status rs = npuc__graph_read_text(ctx, file, what, "graph file", &buf, &len);
    if (rs != NPUC_OK) return rs;
    if (memchr(buf, 0, len)) {
        free(buf);
        return npuc_fail(ctx, NPUC_ERR_ARG, "--graph %s: NUL byte in the file", file);
    }
    npuc_status st = NPUC_OK;
    json_t *root = NULL;
    const char *p = buf;
    while (*p && isspace((unsigned char)*p)) p++;
    if (*p == '{') {
        json_error_t je;
        root = json_loads(buf, 0, &je);
        if (!root) { st = npuc_fail(ctx, NPUC_ERR_ARG, "--graph %s: line %d: %s", file, je.line, je.text); goto done; }
        json_t *next = json_object_get(root, "next"), *pairs = json_object_get(root, "bn_pairs");
        if (!next && !pairs) {
            st = npuc_fail(ctx, NPUC_ERR_ARG, "--graph %s: expected a \"next\" object or a \"bn_pairs\" array", file);
            goto done;
        }
        size_t i;
        json_t *e;
        json_array_foreach(pairs, i, e) if ((st = add_bn_pair(ctx, g, file, e)) != NPUC_OK) goto done;
        const char *k;
        json_object_foreach(next, k, e) {
            char rhs[4096] = "";
            if (json_is_string(e) && strlen(json_string_value(e)) >= sizeof rhs) {
                st = npuc_fail(ctx, NPUC_ERR_ARG, "--graph %s: \"next\" of '%s' is longer than %zu bytes", file, k,
                               sizeof rhs - 1);
                goto done;
            }
            if (json_is_string(e)) snprintf(rhs, sizeof rhs, "%s", json_string_value(e));
            else if (json_is_array(e)) {
                size_t j, l = 0;
                json_t *s;
                json_array_foreach(e, j, s) {
                    /* Every entry a name, the list whole: never a list cut short. */
                    if (!json_is_string(s)) { rhs[0] = 0; break; }
                    l += (size_t)snprintf(rhs + l, sizeof rhs - l, "%s%s", j ? "," : "", json_string_value(s));
                    if (l >= sizeof rhs) {
                        st = npuc_fail(ctx, NPUC_ERR_ARG, "--graph %s: \"next\" of '%s' is longer than %zu bytes",
                                       file, k, sizeof rhs - 1);
                        goto done;
                    }
                }
            }
            if (!*rhs) { st = npuc_fail(ctx, NPUC_ERR_ARG, "--graph %s: \"next\" of '%s' is not a name or list", file, k); goto done; }
            char label[1100];
            snprintf(label, sizeof label, "--graph %s: '%s'", file, k);
            if ((st = add_edge(ctx, g, label, k, strlen(k), rhs)) != NPUC_OK) goto done;
        }
        goto done;
    }
    int line = 0;
    for (char *s = buf; s && *s;) {
        char *nl = strchr(s, '\n');
        if (nl) *nl = 0;
        line++;
        char *hash = strchr(s, '#');
        if (hash) *hash = 0;
        while (*s && isspace((unsigned char)*s)) s++;
        size_t l = strlen(s);
        while (l && isspace((unsigned char)s[l - 1])) s[--l] = 0;
        if (*s) {
            char *eq = strchr(s, '=');
            char label[1100];
            snprintf(label, sizeof label, "--graph %s:%d", file, line);
            if (!eq || eq == s || !eq[1]) {
                st = npuc_fail(ctx, NPUC_ERR_ARG, "%s: expected PRODUCER=CONSUMER[,CONSUMER...]", label);
                goto done;
            }
            if ((st = add_edge(ctx, g, label, s, (size_t)(eq - s), eq + 1)) != NPUC_OK) goto done;
        }
        s = nl ? nl + 1 : NULL;
    }
done:
    json_decref(root);
    free(buf);
    return st;
}

npuc_status npuc__graph_read_next(npuc_ctx *ctx, npuc__graph *g, const char *const *next, size_t nnext,
                                  const char *file) {
    npuc_status st;
    if (file && (st = read_graph_file(ctx, g, file)) != NPUC_OK) return st;
    for (size_t i = 0; i < nnext; i++)
        if ((st = add_statement(ctx, g, next[i])) != NPUC_OK) return st;
    return NPUC_OK;
}
