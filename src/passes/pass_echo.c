/*
 * pass_echo.c - what the descriptors print as JSON: the parameters of a run
 * (npuc_pass_params_json, for the report header) and every pass's option
 * table (npuc_pass_options_json, for `npuc help --options`).
 *
 * The parameters follow the descriptor's echo list: an option's value as
 * given, else its default (its table text, typed), else null; a list as an
 * array of what was given; entries without an option come from the pass's
 * echo_value callback (derived values such as quantize's "scheme").
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "passes/pass_desc.h"

/* A JSON string from text that may hold invalid UTF-8: each byte that does
 * not start a valid sequence (RFC 3629) becomes U+FFFD, as the CLI's own
 * JSON strings do. */
static json_t *jtext(const char *s) {
    if (!s) return json_null();
    json_t *j = json_string(s);
    if (j) return j;
    size_t n = strlen(s), k = 0;
    char *b = malloc(3 * n + 1);
    if (!b) return NULL;
    for (size_t i = 0; i < n;) {
        const unsigned char *p = (const unsigned char *)s + i;
        size_t len = p[0] < 0x80 ? 1 : (p[0] & 0xe0) == 0xc0 ? 2 : (p[0] & 0xf0) == 0xe0 ? 3 : (p[0] & 0xf8) == 0xf0 ? 4 : 0;
        for (size_t q = 1; q < len; q++)
            if ((p[q] & 0xc0) != 0x80) len = 0;
        char one[5] = {0};
        if (len) memcpy(one, p, len);
        json_t *t = len ? json_string(one) : NULL; /* rejects overlongs, surrogates */
        if (t) {
            json_decref(t);
            memcpy(b + k, p, len);
            k += len;
            i += len;
        } else {
            memcpy(b + k, "\xef\xbf\xbd", 3);
            k += 3;
            i++;
        }
    }
    j = json_stringn(b, k);
    free(b);
    return j;
}

static json_t *value_json(const npuc_pass_value *v) {
    if (v->null) return json_null();
    switch (v->type) {
    case NPUC_OPT_BOOL: return json_boolean(v->b);
    case NPUC_OPT_INT: return json_integer((json_int_t)v->i);
    case NPUC_OPT_NUM: return json_real(v->d);
    case NPUC_OPT_STR: return jtext(v->s);
    case NPUC_OPT_LIST: break;
    }
    return json_null();
}

/* An option's echoed value: given, else its default, else null. */
static json_t *option_json(const npuc_pass_optset *s, const npuc_pass_option *o) {
    const recipe_opt *v = npuc__pass_get(s, o->name);
    if (o->type == NPUC_OPT_LIST) {
        json_t *a = json_array();
        for (size_t i = 0; a && v && i < v->nlist; i++)
            if (json_array_append_new(a, jtext(v->list[i]))) {
                json_decref(a);
                return NULL;
            }
        return a;
    }
    if (!v && !o->dflt) return o->type == NPUC_OPT_BOOL ? json_false() : json_null();
    switch (o->type) {
    case NPUC_OPT_BOOL: return json_boolean(npuc__pass_bool(s, o->name));
    case NPUC_OPT_INT: return json_integer((json_int_t)npuc__pass_int(s, o->name));
    case NPUC_OPT_NUM: return json_real(npuc__pass_num(s, o->name));
    case NPUC_OPT_STR: return jtext(npuc__pass_str(s, o->name));
    case NPUC_OPT_LIST: break;
    }
    return json_null();
}

npuc_status npuc_pass_params_json(npuc_ctx *ctx, const npuc_pass_optset *s, char **out) {
    const npuc_pass *p = s->pass;
    json_t *o = json_object(), *root = json_object();
    *out = NULL;
    if (!o || !root) goto nomem;
    for (const npuc_pass_echo *e = p->echo; e && e->name; e++) {
        json_t *j = NULL;
        if (e->key) {
            j = option_json(s, npuc_pass_option_find(p, e->key));
        } else {
            npuc_pass_value v;
            memset(&v, 0, sizeof v);
            int rc = p->echo_value ? p->echo_value(s, e->name, &v) : 1;
            if (rc == 1) continue;
            if (rc < 0) goto nomem;
            j = value_json(&v);
        }
        if (!j || json_object_set_new(o, e->name, j)) goto nomem;
    }
    if (json_object_set(root, p->name, o)) goto nomem;
    *out = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!*out) goto nomem;
    json_decref(o);
    json_decref(root);
    return NPUC_OK;
nomem:
    json_decref(o);
    json_decref(root);
    return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
}

/* ------------------------------------------------------------ option tables */

static json_t *bound_json(double v) {
    if (isinf(v)) return json_string(v > 0 ? "inf" : "-inf");
    return json_real(v);
}

static json_t *strs_json(const char *const *v) {
    json_t *a = json_array();
    for (; a && v && *v; v++) json_array_append_new(a, json_string(*v));
    return a;
}

static const char *const TYPE_NAMES[] = {"bool", "int", "number", "string", "list"};

static json_t *option_table_json(const npuc_pass_option *o) {
    json_t *j = json_object();
    if (!j) return NULL;
    json_object_set_new(j, "key", json_string(o->name));
    json_object_set_new(j, "flag", json_string(o->flag));
    if (o->short_flag) {
        char sf[2] = {(char)o->short_flag, 0};
        json_object_set_new(j, "short", json_string(sf));
    }
    json_object_set_new(j, "type", json_string((o->flags & NPUC_OPT_RULE) ? "rules" : TYPE_NAMES[o->type]));
    int num = o->type == NPUC_OPT_NUM || (o->flags & NPUC_OPT_RULE_NUM);
    if (o->flags & NPUC_OPT_RULE) json_object_set_new(j, "value_type", json_string(num ? "number" : "int"));
    if (o->type == NPUC_OPT_INT || o->type == NPUC_OPT_NUM || (o->flags & NPUC_OPT_RULE)) {
        json_object_set_new(j, "lo", bound_json(o->lo));
        json_object_set_new(j, "hi", bound_json(o->hi));
        json_object_set_new(j, "lo_open", json_boolean(o->flags & NPUC_OPT_LO_OPEN));
        json_object_set_new(j, "hi_open", json_boolean(o->flags & NPUC_OPT_HI_OPEN));
    }
    if (o->choices) json_object_set_new(j, "choices", strs_json(o->choices));
    json_object_set_new(j, "regex", json_boolean(o->flags & (NPUC_OPT_REGEX | NPUC_OPT_RULE)));
    json_object_set_new(j, "path", json_boolean(o->flags & NPUC_OPT_PATH));
    json_object_set_new(j, "default", o->dflt ? json_string(o->dflt) : json_null());
    json_object_set_new(j, "metavar", o->metavar ? json_string(o->metavar) : json_null());
    json_object_set_new(j, "group", json_integer(o->group));
    json_object_set_new(j, "needs", o->needs ? json_string(o->needs) : json_null());
    json_object_set_new(j, "override", o->override_key ? json_string(o->override_key) : json_null());
    json_object_set_new(j, "checked_by_pass", json_boolean(o->type == NPUC_OPT_LIST && !o->bad));
    return j;
}

npuc_status npuc_pass_options_json(npuc_ctx *ctx, char **out) {
    json_t *root = json_object(), *passes = json_array();
    *out = NULL;
    if (!root || !passes) {
        json_decref(root);
        json_decref(passes);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    json_object_set_new(root, "schema", json_string("npuc.pass_options/1"));
    for (size_t i = 0; i < npuc_pass_count(); i++) {
        const npuc_pass *p = npuc_pass_at(i);
        json_t *pj = json_object(), *opts = json_array();
        json_object_set_new(pj, "name", json_string(p->name));
        json_object_set_new(pj, "summary", json_string(p->summary));
        json_object_set_new(pj, "base", strs_json(p->base));
        json_object_set_new(pj, "override_keys", strs_json(p->override_keys));
        for (size_t k = 0; k < p->noptions; k++) json_array_append_new(opts, option_table_json(&p->options[k]));
        json_object_set_new(pj, "options", opts);
        json_array_append_new(passes, pj);
    }
    json_object_set_new(root, "passes", passes);
    *out = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    return *out ? NPUC_OK : npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
}
