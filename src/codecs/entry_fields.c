/*
 * entry_fields.c - writing and reading the encoding-specific fields of
 * artifact entries (entry_fields.h).
 */
#include <string.h>

#include "codecs/artifact_meta.h"
#include "codecs/entry_fields.h"

static const struct {
    const char *name;
    npuc_granularity gran;
} GRANS[] = {
    {"channel", NPUC_GRAN_CHANNEL},
    {"group", NPUC_GRAN_GROUP},
    {"tensor", NPUC_GRAN_TENSOR},
};

static const char *gran_name(npuc_granularity g) {
    for (size_t i = 0; i < sizeof GRANS / sizeof GRANS[0]; i++)
        if (GRANS[i].gran == g) return GRANS[i].name;
    return "channel";
}

/* 0 and *g when s names a granularity, else -1. */
static int gran_parse(const char *s, npuc_granularity *g) {
    for (size_t i = 0; i < sizeof GRANS / sizeof GRANS[0]; i++)
        if (strcmp(s, GRANS[i].name) == 0) {
            *g = GRANS[i].gran;
            return 0;
        }
    return -1;
}

int npuc__quant_entry_set(json_t *e, const npuc_quant_params *p, const npuc_quant_shape *qs, int packed,
                          const char *codes, npuc_dtype codes_dtype, const char *scale, const char *zero_point) {
    char range[48];
    npuc_range_format(&p->range, range, sizeof range);
    json_t *view = json_pack("[III]", (json_int_t)qs->outer, (json_int_t)qs->channels, (json_int_t)qs->inner);
    /* json_object_set_new takes the reference even when it fails. */
    if (!view) return -1;
    int bad = json_object_set_new(e, "bits", json_integer(p->bits));
    bad |= json_object_set_new(e, "symmetric", json_boolean(p->symmetric));
    bad |= json_object_set_new(e, "granularity", json_string(gran_name(p->gran)));
    bad |= json_object_set_new(e, "axis", json_integer(qs->axis));
    bad |= json_object_set_new(e, "group_size", json_integer(p->gran == NPUC_GRAN_GROUP ? p->group_size : 0));
    bad |= json_object_set_new(e, "view", view);
    bad |= json_object_set_new(e, "range", json_string(range));
    bad |= json_object_set_new(e, "packed", json_boolean(packed));
    if (codes) bad |= json_object_set_new(e, "codes", json_string(codes));
    bad |= json_object_set_new(e, "codes_dtype", json_string(npuc_dtype_name(codes_dtype)));
    bad |= json_object_set_new(e, "scale", json_string(scale));
    bad |= json_object_set_new(e, "zero_point", zero_point ? json_string(zero_point) : json_null());
    return bad ? -1 : 0;
}

npuc_status npuc__quant_entry_read(npuc_ctx *ctx, const char *path, const char *name, const json_t *e,
                                   npuc_quant_params *p, const char **gran, int *packed) {
    npuc_status st;
    long long bits, axis, gs;
    int sym;
    if ((st = npuc__art_int(ctx, path, name, e, "bits", 2, 8, &bits)) != NPUC_OK ||
        (st = npuc__art_bool(ctx, path, name, e, "symmetric", &sym)) != NPUC_OK ||
        (st = npuc__art_str(ctx, path, name, e, "granularity", gran)) != NPUC_OK ||
        (st = npuc__art_int(ctx, path, name, e, "axis", -1, NPUC_MAX_RANK - 1, &axis)) != NPUC_OK ||
        (st = npuc__art_int(ctx, path, name, e, "group_size", 0, UINT32_MAX, &gs)) != NPUC_OK ||
        (st = npuc__art_bool(ctx, path, name, e, "packed", packed)) != NPUC_OK)
        return st;
    *p = npuc_quant_params_defaults();
    p->bits = (int)bits;
    p->symmetric = sym;
    p->group_size = (uint32_t)gs;
    p->axis = (int)axis;
    return NPUC_OK;
}

npuc_status npuc__quant_entry_gran(npuc_ctx *ctx, const char *path, const char *name, const char *gran,
                                   npuc_quant_params *p) {
    if (gran_parse(gran, &p->gran) != 0)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': unknown granularity '%s'", path, name, gran);
    return NPUC_OK;
}

static long long jint(const json_t *e, const char *key, long long dflt) {
    const json_t *v = json_object_get(e, key);
    return json_is_integer(v) ? json_integer_value(v) : dflt;
}

npuc_quant_params npuc__quant_entry_params(const json_t *e) {
    npuc_quant_params p = npuc_quant_params_defaults();
    p.bits = (int)jint(e, "bits", 8);
    p.symmetric = !json_is_false(json_object_get(e, "symmetric"));
    p.axis = (int)jint(e, "axis", -1);
    const json_t *g = json_object_get(e, "granularity");
    if (json_is_string(g) && gran_parse(json_string_value(g), &p.gran) == 0 && p.gran == NPUC_GRAN_GROUP) {
        long long G = jint(e, "group_size", 0);
        p.group_size = G > 0 && G <= UINT32_MAX ? (uint32_t)G : 0;
    }
    return p;
}

int npuc__nm_entry_set(json_t *e, const npuc_nm_geom *g, const char *values, const char *meta, json_t *quant) {
    int bad = json_object_set_new(e, "n", json_integer(g->n));
    bad |= json_object_set_new(e, "m", json_integer(g->m));
    bad |= json_object_set_new(e, "in_axis", json_integer(g->in_axis));
    bad |= json_object_set_new(e, "groups", json_integer((json_int_t)g->groups));
    bad |= json_object_set_new(e, "values", json_string(values));
    bad |= json_object_set_new(e, "meta", json_string(meta));
    bad |= json_object_set_new(e, "meta_bits", json_integer(g->meta_bits));
    bad |= json_object_set_new(e, "quant", quant ? quant : json_null());
    return bad ? -1 : 0;
}
