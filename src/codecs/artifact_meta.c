/*
 * artifact_meta.c - building and parsing the "npuc" artifact description.
 */
#include <string.h>

#include "codecs/artifact_meta.h"

json_t *npuc__art_new(void) {
    json_t *r = json_object();
    if (!r) return NULL;
    if (json_object_set_new(r, "schema", json_string(NPUC_ART_SCHEMA)) ||
        json_object_set_new(r, "npuc_version", json_string(npuc_version())) ||
        json_object_set_new(r, "tensors", json_object())) {
        json_decref(r);
        return NULL;
    }
    return r;
}

json_t *npuc__art_add(json_t *root, const npuc_tensor_info *t, const char *encoding) {
    json_t *e = json_object(), *shape = json_array();
    if (!e || !shape) { json_decref(e); json_decref(shape); return NULL; }
    int bad = 0;
    for (int i = 0; i < t->rank; i++) bad |= json_array_append_new(shape, json_integer(t->shape[i]));
    bad |= json_object_set_new(e, "encoding", json_string(encoding));
    bad |= json_object_set_new(e, "dtype", json_string(npuc_dtype_name(t->dtype)));
    bad |= json_object_set_new(e, "shape", shape);
    bad |= json_object_set_new(e, "layout", json_string(npuc_layout_name(t->layout)));
    if (bad) { json_decref(e); return NULL; }
    /* json_object_set_new takes the reference even when it fails. */
    if (json_object_set_new(json_object_get(root, "tensors"), t->name, e)) return NULL;
    return e;
}

char *npuc__art_dumps(const json_t *root) {
    return json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
}

npuc_status npuc__art_load(npuc_ctx *ctx, const npuc_model *m, json_t **root) {
    *root = NULL;
    const char *s = npuc_model_meta_get(m, NPUC_ART_KEY);
    if (!s) return NPUC_OK;
    json_error_t je;
    json_t *r = json_loads(s, JSON_REJECT_DUPLICATES, &je);
    const char *path = npuc_model_path(m);
    if (!r) return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: metadata 'npuc': %s", path, je.text);
    json_t *schema = json_object_get(r, "schema");
    if (!json_is_object(r) || !json_is_string(schema) ||
        strcmp(json_string_value(schema), NPUC_ART_SCHEMA) != 0 ||
        !json_is_object(json_object_get(r, "tensors"))) {
        json_decref(r);
        return npuc_fail(ctx, NPUC_ERR_FORMAT,
                         "%s: metadata 'npuc' is not an %s description (newer npuc?)", path, NPUC_ART_SCHEMA);
    }
    *root = r;
    return NPUC_OK;
}

npuc_status npuc__art_int(npuc_ctx *ctx, const char *path, const char *name, const json_t *e,
                          const char *key, long long lo, long long hi, long long *out) {
    json_t *v = json_object_get(e, key);
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': artifact field '%s' is missing or out of range",
                         path, name, key);
    *out = json_integer_value(v);
    return NPUC_OK;
}

npuc_status npuc__art_bool(npuc_ctx *ctx, const char *path, const char *name, const json_t *e,
                           const char *key, int *out) {
    json_t *v = json_object_get(e, key);
    if (!json_is_boolean(v))
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': artifact field '%s' is not a boolean",
                         path, name, key);
    *out = json_is_true(v);
    return NPUC_OK;
}

npuc_status npuc__art_str(npuc_ctx *ctx, const char *path, const char *name, const json_t *e,
                          const char *key, const char **out) {
    json_t *v = json_object_get(e, key);
    if (!json_is_string(v))
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': artifact field '%s' is not a string",
                         path, name, key);
    *out = json_string_value(v);
    return NPUC_OK;
}

npuc_status npuc__art_orig(npuc_ctx *ctx, const char *path, const char *name, const json_t *e,
                           npuc_tensor_info *t) {
    const char *dt = NULL, *lay = NULL;
    npuc_status st;
    if ((st = npuc__art_str(ctx, path, name, e, "dtype", &dt)) != NPUC_OK) return st;
    if ((st = npuc__art_str(ctx, path, name, e, "layout", &lay)) != NPUC_OK) return st;
    json_t *shape = json_object_get(e, "shape");
    memset(t, 0, sizeof *t);
    if (npuc_dtype_parse(dt, &t->dtype) != 0 || npuc_layout_parse(lay, &t->layout) != 0 ||
        !json_is_array(shape) || json_array_size(shape) > NPUC_MAX_RANK)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': bad dtype, layout or shape in artifact",
                         path, name);
    t->rank = (int)json_array_size(shape);
    for (int i = 0; i < t->rank; i++) {
        json_t *d = json_array_get(shape, (size_t)i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': bad shape in artifact", path, name);
        t->shape[i] = json_integer_value(d);
    }
    if (npuc__shape_sizes(t->dtype, t->rank, t->shape, &t->numel, &t->nbytes) != 0)
        return npuc_fail(ctx, NPUC_ERR_OVERFLOW, "%s: tensor '%s': artifact shape overflows", path, name);
    if (t->layout != NPUC_LAYOUT_NONE && npuc_layout_out_axis(t->layout, t->rank) < 0)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': layout does not fit rank in artifact",
                         path, name);
    return NPUC_OK;
}
