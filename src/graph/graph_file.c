/*
 * graph_file.c - reading what the caller states about the graph: whole
 * files (pairs files, graph files), and conv -> BatchNorm pairs: "CONV=BN"
 * strings (--pair) and --pairs files.
 *
 * A pairs file is either text, one "CONV=BN" per line (blank lines and
 * lines starting with '#' ignored, spaces around names trimmed, the last '='
 * separates), or JSON: an array of objects {"conv": ..., "bn": ...}, or an
 * object holding such an array under "pairs" or "bn_pairs".  In an object a
 * BatchNorm may also be named by one of its tensors ("gamma", "mean", "var",
 * "beta"), which makes the shared data catalogs usable as they are (an
 * entry with "conv": null, a BatchNorm without a producer, is passed over), and
 * `npuc fold-bn --dry-run --json` output can be edited and fed back.
 * Names are only parsed here; graph_bn_rules.c resolves them against the
 * model.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"

/* ------------------------------------------------------------ files */

npuc_status npuc__graph_read_text(npuc_ctx *ctx, const char *path, const char *label, const char *noun, char **buf,
                                  size_t *len) {
    *buf = NULL;
    *len = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return npuc_fail(ctx, errno == ENOENT ? NPUC_ERR_NOT_FOUND : NPUC_ERR_IO, "%s: cannot read the %s: %s", label,
                         noun, strerror(errno));
    npuc_status st = NPUC_OK;
    size_t cap = 4096, n = 0;
    char *b = malloc(cap + 1);
    for (;;) {
        if (!b) {
            st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory reading the %s", label, noun);
            break;
        }
        if (n > NPUC__GRAPH_FILE_MAX) {
            st = npuc_fail(ctx, NPUC_ERR_ARG, "%s: %s larger than %zu MiB", label, noun, NPUC__GRAPH_FILE_MAX >> 20);
            break;
        }
        if (n == cap) {
            /* cap stays <= 2 * (NPUC__GRAPH_FILE_MAX + 1): no overflow. */
            char *nb = realloc(b, 2 * cap + 1);
            if (!nb) {
                free(b);
                b = NULL;
                continue; /* the NOMEM error above */
            }
            b = nb;
            cap *= 2;
        }
        size_t r = fread(b + n, 1, cap - n, fp);
        n += r;
        if (r == 0) {
            if (ferror(fp)) st = npuc_fail(ctx, NPUC_ERR_IO, "%s: read error: %s", label, strerror(errno));
            else if (n > NPUC__GRAPH_FILE_MAX) continue; /* the size error above */
            break;
        }
    }
    fclose(fp);
    if (st != NPUC_OK) {
        free(b);
        return st;
    }
    b[n] = 0;
    *buf = b;
    *len = n;
    return NPUC_OK;
}

void npuc__graph_json_pair(const json_t *o, const char **conv, const char **bn) {
    static const char *const BN_KEYS[] = {"bn", "gamma", "mean", "var", "beta"};
    *conv = json_string_value(json_object_get(o, "conv"));
    *bn = NULL;
    for (size_t k = 0; k < sizeof BN_KEYS / sizeof BN_KEYS[0] && !*bn; k++)
        *bn = json_string_value(json_object_get(o, BN_KEYS[k]));
}

/* ------------------------------------------------------------ stated pairs */

void npuc__graph_pair_statements_free(npuc__pair_stmt *s, size_t n) {
    if (!s) return;
    for (size_t i = 0; i < n; i++) {
        free(s[i].conv);
        free(s[i].bn);
        free(s[i].origin);
    }
    free(s);
}

typedef struct stmts {
    npuc__pair_stmt *s;
    size_t n, cap;
} stmts;

static char *trimmed(const char *s, size_t n) {
    while (n && (*s == ' ' || *s == '\t')) { s++; n--; }
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r')) n--;
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static npuc_status push(npuc_ctx *ctx, stmts *v, char *conv, char *bn, char *origin) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 16;
        npuc__pair_stmt *p = realloc(v->s, cap * sizeof *p);
        if (!p) goto oom;
        v->s = p;
        v->cap = cap;
    }
    if (!conv || !bn || !origin) goto oom;
    v->s[v->n].conv = conv;
    v->s[v->n].bn = bn;
    v->s[v->n].origin = origin;
    v->n++;
    return NPUC_OK;
oom:
    free(conv);
    free(bn);
    free(origin);
    return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
}

/* "<a>" formatted with fmt, which takes a string and optionally a size_t. */
static char *fmt_origin(const char *fmt, const char *a, size_t k) {
    int n = snprintf(NULL, 0, fmt, a, k);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s) snprintf(s, (size_t)n + 1, fmt, a, k);
    return s;
}

/* Splits "CONV=BN" at the last '='. */
static npuc_status parse_one(npuc_ctx *ctx, stmts *v, const char *text, size_t len, char *origin) {
    const char *eq = NULL;
    for (size_t i = 0; i < len; i++)
        if (text[i] == '=') eq = text + i;
    char *conv = eq ? trimmed(text, (size_t)(eq - text)) : NULL;
    char *bn = eq ? trimmed(eq + 1, len - (size_t)(eq - text) - 1) : NULL;
    if (!origin || (eq && (!conv || !bn))) {
        free(conv);
        free(bn);
        free(origin);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    if (!eq || !conv[0] || !bn[0]) {
        npuc_status st = npuc_fail(ctx, NPUC_ERR_ARG, "%s: expected CONV=BN", origin);
        free(conv);
        free(bn);
        free(origin);
        return st;
    }
    return push(ctx, v, conv, bn, origin);
}

static npuc_status parse_json(npuc_ctx *ctx, stmts *v, const char *path, const char *text, size_t len) {
    json_error_t e;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &e);
    if (!root)
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: line %d: not valid JSON: %s", path, e.line, e.text);
    json_t *arr = root;
    if (json_is_object(root)) {
        arr = json_object_get(root, "pairs");
        if (!arr) arr = json_object_get(root, "bn_pairs");
    }
    npuc_status st = NPUC_OK;
    if (!json_is_array(arr)) {
        st = npuc_fail(ctx, NPUC_ERR_ARG, "%s: expected an array of {\"conv\", \"bn\"} objects, or an object "
                       "with one under \"pairs\" or \"bn_pairs\"", path);
        goto done;
    }
    size_t i, nnull = 0;
    json_t *o;
    json_array_foreach(arr, i, o) {
        const char *conv, *bn;
        /* A catalog's BatchNorm without a producer ("conv": null) states no
         * pair: passed over, with one note for the caller to show. */
        if (json_is_object(o) && json_is_null(json_object_get(o, "conv"))) {
            nnull++;
            continue;
        }
        npuc__graph_json_pair(o, &conv, &bn);
        if (!conv || !bn || !*conv || !*bn) {
            st = npuc_fail(ctx, NPUC_ERR_ARG, "%s: pair %zu: needs string fields \"conv\" and \"bn\"", path, i + 1);
            goto done;
        }
        if ((st = push(ctx, v, npuc__strdup(conv), npuc__strdup(bn), fmt_origin("%s: pair %zu", path, i + 1))) !=
            NPUC_OK)
            goto done;
    }
    if (nnull)
        npuc__ctx_warn(ctx, "%s: %zu %s with \"conv\": null (a BatchNorm without a producer) skipped", path, nnull,
                       nnull == 1 ? "entry" : "entries");
done:
    json_decref(root);
    return st;
}

npuc_status npuc__graph_pair_statements(npuc_ctx *ctx, const char *const *pairs, size_t npairs, const char *file,
                                        npuc__pair_stmt **out, size_t *n) {
    stmts v = {NULL, 0, 0};
    npuc_status st = NPUC_OK;
    *out = NULL;
    *n = 0;
    for (size_t i = 0; i < npairs && st == NPUC_OK; i++)
        st = parse_one(ctx, &v, pairs[i], strlen(pairs[i]), fmt_origin("--pair %s", pairs[i], 0));
    if (st == NPUC_OK && file) {
        char *text = NULL;
        size_t len = 0;
        if ((st = npuc__graph_read_text(ctx, file, file, "pairs file", &text, &len)) == NPUC_OK) {
            size_t k = 0;
            while (k < len && (text[k] == ' ' || text[k] == '\t' || text[k] == '\r' || text[k] == '\n')) k++;
            if (k < len && (text[k] == '[' || text[k] == '{')) {
                st = parse_json(ctx, &v, file, text, len);
            } else {
                size_t line = 0;
                for (size_t a = 0; a < len && st == NPUC_OK;) {
                    size_t b = a;
                    while (b < len && text[b] != '\n') b++;
                    line++;
                    size_t s = a;
                    while (s < b && (text[s] == ' ' || text[s] == '\t' || text[s] == '\r')) s++;
                    if (s < b && text[s] != '#') {
                        if (memchr(text + a, 0, b - a))
                            st = npuc_fail(ctx, NPUC_ERR_ARG, "%s:%zu: NUL byte in the line", file, line);
                        else st = parse_one(ctx, &v, text + a, b - a, fmt_origin("%s:%zu", file, line));
                    }
                    a = b + 1;
                }
            }
            free(text);
        }
    }
    if (st != NPUC_OK) {
        npuc__graph_pair_statements_free(v.s, v.n);
        return st;
    }
    if (v.n == 0) {
        npuc__graph_pair_statements_free(v.s, v.n);
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: no pairs stated", file ? file : "--pair");
    }
    *out = v.s;
    *n = v.n;
    return NPUC_OK;
}
