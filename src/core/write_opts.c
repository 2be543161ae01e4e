/*
 * write_opts.c - format-specific write options as declared key/value pairs.
 *
 * npuc_write_opts carries the pairs inline (fixed-size buffers, so callers
 * copy the struct freely).  A key is accepted when some format's registry
 * row declares it, and its value is checked against that declaration both
 * when it is set and, against the output format's declaration, when a
 * writer opens; backends read values through npuc__writer_opt*, which
 * fall back to the declared default and then to the row's derive hook.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format_row.h"

npuc_write_opts npuc_write_opts_defaults(void) {
    npuc_write_opts o;
    memset(&o, 0, sizeof o);
    o.format = NPUC_FORMAT_AUTO;
    return o;
}

/* Parses a decimal integer the way the CLI's cli_parse_long does (strtol,
 * nothing after it); 0 or -1. */
static int parse_long(const char *s, long *out) {
    if (!*s) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s) return -1;
    *out = v;
    return 0;
}

/* The index of value among d's choices, or -1. */
static long choice_index(const npuc__opt_decl *d, const char *value) {
    for (long i = 0; d->choices[i]; i++)
        if (strcmp(d->choices[i], value) == 0) return i;
    return -1;
}

/* Checks value against d; the message names the option by its label. */
static npuc_status check_value(npuc_ctx *ctx, const npuc__opt_decl *d, const char *value) {
    long v;
    if (d->type == NPUC__OPT_INT) {
        if (parse_long(value, &v) != 0)
            return npuc_fail(ctx, NPUC_ERR_ARG, "%s '%.64s' is not an integer", d->label, value);
        if (v < d->min || v > d->max)
            return npuc_fail(ctx, NPUC_ERR_ARG, "%s %ld is outside %ld..%ld", d->label, v, d->min, d->max);
        return NPUC_OK;
    }
    if (d->type == NPUC__OPT_TEXT) {
        size_t n = strlen(value);
        int ok = n >= (size_t)d->min && n <= (size_t)d->max;
        for (const char *c = value; ok && *c; c++) ok = *c == '\n' || (unsigned char)*c >= 0x20;
        if (!ok)
            return npuc_fail(ctx, NPUC_ERR_ARG, "%s '%.64s': expected %ld..%ld bytes without control characters",
                             d->label, value, d->min, d->max);
        return NPUC_OK;
    }
    if (d->type == NPUC__OPT_NAME) {
        size_t n = strlen(value);
        int ok = n >= (size_t)d->min && n <= (size_t)d->max;
        for (const char *c = value; ok && *c; c++)
            ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                 *c == '_' || *c == '.' || *c == '-';
        if (!ok)
            return npuc_fail(ctx, NPUC_ERR_ARG, "%s '%.64s': expected %ld..%ld characters of A-Z a-z 0-9 _ . -",
                             d->label, value, d->min, d->max);
        return NPUC_OK;
    }
    if (d->type == NPUC__OPT_PATH) {
        size_t n = strlen(value);
        int ok = n >= (size_t)d->min && n <= (size_t)d->max;
        for (const char *c = value; ok && *c; c++) ok = (unsigned char)*c >= 0x20 && *c != 0x7f;
        if (!ok)
            return npuc_fail(ctx, NPUC_ERR_ARG, "%s '%.64s': expected a path of %ld..%ld bytes without control "
                                                "characters", d->label, value, d->min, d->max);
        return NPUC_OK;
    }
    if (choice_index(d, value) >= 0) return NPUC_OK;
    char list[256] = "";
    size_t len = 0;
    for (size_t i = 0; d->choices[i] && len < sizeof list; i++) {
        const char *sep = i == 0 ? "" : d->choices[i + 1] ? ", " : " or ";
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", sep, d->choices[i]);
    }
    return npuc_fail(ctx, NPUC_ERR_ARG, "%s '%.64s': expected %s", d->label, value, list);
}

const char *npuc__write_opts_get(const npuc_write_opts *o, const char *key) {
    for (unsigned i = 0; i < o->nopt && i < NPUC_WRITE_OPTS_MAX; i++)
        if (strncmp(o->opt[i].key, key, NPUC_WRITE_OPT_KEY_MAX) == 0) return o->opt[i].value;
    return NULL;
}

npuc_status npuc__write_opts_put(npuc_ctx *ctx, npuc_write_opts *o, const char *key, const char *value) {
    size_t kl = strlen(key), vl = strlen(value);
    if (kl >= NPUC_WRITE_OPT_KEY_MAX)
        return npuc_fail(ctx, NPUC_ERR_ARG, "write option '%.64s': key longer than %d bytes", key,
                         NPUC_WRITE_OPT_KEY_MAX - 1);
    if (vl >= NPUC_WRITE_OPT_VALUE_MAX)
        return npuc_fail(ctx, NPUC_ERR_ARG, "write option '%s': value longer than %d bytes", key,
                         NPUC_WRITE_OPT_VALUE_MAX - 1);
    unsigned i = 0;
    while (i < o->nopt && i < NPUC_WRITE_OPTS_MAX && strcmp(o->opt[i].key, key) != 0) i++;
    if (i == NPUC_WRITE_OPTS_MAX)
        return npuc_fail(ctx, NPUC_ERR_ARG, "write option '%s': more than %d options set", key,
                         NPUC_WRITE_OPTS_MAX);
    memcpy(o->opt[i].key, key, kl + 1);
    memcpy(o->opt[i].value, value, vl + 1);
    if (i == o->nopt) o->nopt++;
    return NPUC_OK;
}

npuc_status npuc_write_opts_set(npuc_ctx *ctx, npuc_write_opts *o, const char *key, const char *value) {
    if (!o || !key || !value) return npuc_fail(ctx, NPUC_ERR_ARG, "write option: no key or value given");
    /* Accepted when a format declaring key accepts value; otherwise the
     * first declaring format says why. */
    size_t n;
    const npuc__format_row *const *t = npuc__format_table(&n);
    const npuc__opt_decl *first = NULL;
    for (size_t i = 0; i < n; i++) {
        const npuc__opt_decl *d = npuc__format_opt_decl(t[i], key);
        if (!d) continue;
        if (check_value(NULL, d, value) == NPUC_OK) return npuc__write_opts_put(ctx, o, key, value);
        if (!first) first = d;
    }
    if (first) return check_value(ctx, first, value);
    return npuc_fail(ctx, NPUC_ERR_ARG, "unknown write option '%.64s' (no format declares it)", key);
}

npuc_status npuc__write_opts_check(npuc_ctx *ctx, const npuc__format_row *row, const npuc_write_opts *o) {
    if (o->nopt > NPUC_WRITE_OPTS_MAX)
        return npuc_fail(ctx, NPUC_ERR_ARG, "write options: %u set, at most %d", o->nopt, NPUC_WRITE_OPTS_MAX);
    size_t n;
    const npuc__format_row *const *t = npuc__format_table(&n);
    for (unsigned i = 0; i < o->nopt; i++) {
        const npuc_write_opt *p = &o->opt[i];
        if (!memchr(p->key, 0, sizeof p->key) || !memchr(p->value, 0, sizeof p->value))
            return npuc_fail(ctx, NPUC_ERR_ARG, "write option %u is not NUL-terminated", i);
        const npuc__opt_decl *d = npuc__format_opt_decl(row, p->key);
        if (d) {
            npuc_status st = check_value(ctx, d, p->value);
            if (st != NPUC_OK) return st;
            continue;
        }
        int known = 0;
        for (size_t j = 0; j < n && !known; j++) known = npuc__format_opt_decl(t[j], p->key) != NULL;
        if (!known)
            return npuc_fail(ctx, NPUC_ERR_ARG, "unknown write option '%s' (no format declares it)", p->key);
    }
    return NPUC_OK;
}

npuc_status npuc__write_opts_check_output(npuc_ctx *ctx, const npuc__format_row *row, const npuc_write_opts *o,
                                          const char *path) {
    size_t n;
    const npuc__format_row *const *t = npuc__format_table(&n);
    for (unsigned i = 0; i < o->nopt && i < NPUC_WRITE_OPTS_MAX; i++) {
        const npuc_write_opt *p = &o->opt[i];
        if (npuc__format_opt_decl(row, p->key)) continue;
        for (size_t j = 0; j < n; j++) {
            const npuc__opt_decl *d = npuc__format_opt_decl(t[j], p->key);
            int picks = 0;
            for (const char *const *k = t[j]->output_opts; k && *k && !picks; k++) picks = strcmp(*k, p->key) == 0;
            if (d && picks && d->dflt && strcmp(p->value, d->dflt) != 0)
                return npuc_fail(ctx, NPUC_ERR_ARG, "%s: %s '%s' is written only as a %s%s, and this output is "
                                 "%s: name such an output, or leave the option out", path, d->label, p->value,
                                 t[j]->name, t[j]->writes_dir ? " directory (an output name without an extension)"
                                                              : " output", row->name);
        }
    }
    return NPUC_OK;
}

npuc_status npuc__writer_inherit(npuc_writer *w, const npuc_model *m) {
    const npuc__format_row *r = w->row;
    if (!r->describe) return NPUC_OK;
    for (size_t i = 0; i < r->nopts; i++) {
        const char *key = r->opts[i].key, *v;
        if (npuc__write_opts_get(&w->opts, key) || !(v = r->describe(m, key))) continue;
        npuc_status st = npuc__write_opts_put(w->ctx, &w->opts, key, v);
        if (st != NPUC_OK) return st;
    }
    return NPUC_OK;
}

const char *npuc__writer_opt(const npuc_writer *w, const char *key) {
    const npuc__opt_decl *d = npuc__format_opt_decl(w->row, key);
    if (!d) return NULL;
    const char *v = npuc__write_opts_get(&w->opts, key);
    if (!v) v = d->dflt;
    if (!v && w->row->derive) v = w->row->derive(w, key);
    return v;
}

long npuc__writer_opt_long(const npuc_writer *w, const char *key, long fallback) {
    const npuc__opt_decl *d = npuc__format_opt_decl(w->row, key);
    const char *v = npuc__writer_opt(w, key);
    long x;
    if (!v) return fallback;
    if (d->type == NPUC__OPT_CHOICE) return (x = choice_index(d, v)) >= 0 ? x : fallback;
    if (d->type == NPUC__OPT_NAME || d->type == NPUC__OPT_PATH || d->type == NPUC__OPT_TEXT) return fallback;
    return parse_long(v, &x) == 0 ? x : fallback;
}
