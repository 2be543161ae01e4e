/*
 * codec_table.c - the table of artifact encodings (codec.h), and the one
 * place where the suffixes of their stored parts are spelled.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "codecs/codec.h"

/* Codes under the tensor's own name, scales, zero points (asymmetric only). */
const npuc__codec npuc__codec_quant = {
    .name = "quant",
    .parts = {{"codes", ""}, {"scale", ".scale"}, {"zero_point", ".zero_point"}},
    .decode = npuc__decode_quant,
    .action = NPUC_ACTION_QUANTIZED,
    .describe = npuc__codec_describe_quant,
    .nested_scheme = npuc__codec_scheme_quant,
    .noise = npuc__codec_noise_quant,
};

/* Dequantized floats stored under the tensor's own name (--fake-quant): the
 * entry only says how they were made, so there is nothing to decode. */
const npuc__codec npuc__codec_fake_quant = {
    .name = "fake_quant",
    .dense = 1,
    .action = NPUC_ACTION_QUANTIZED,
    .describe = npuc__codec_describe_fake_quant,
    .nested_scheme = npuc__codec_scheme_fake_quant,
};

/* The output-side and input-side factors; either may be a nested entry. */
const npuc__codec npuc__codec_lowrank = {
    .name = "lowrank",
    .parts = {{"lr_a", ".lr_a"}, {"lr_b", ".lr_b"}},
    .decode = npuc__decode_lowrank,
    .action = NPUC_ACTION_FACTORED,
    .describe = npuc__codec_describe_lowrank,
};

/* Kept values (or their codes) under the tensor's own name, scales and zero
 * points when quantized, and the packed positions. */
const npuc__codec npuc__codec_nm_sparse = {
    .name = "nm_sparse",
    .parts = {{"values", ""}, {"scale", ".scale"}, {"zero_point", ".zero_point"}, {"meta", ".nm_meta"}},
    .decode = npuc__decode_nm,
    .action = NPUC_ACTION_SPARSIFIED,
    .nested_scheme = npuc__codec_scheme_nm_sparse,
};

/* Names npuc neither writes nor decodes, which reports still file under what
 * was done (with no error figures: the values cannot be read). */
static const npuc__codec CODEC_SPARSE = {.name = "sparse", .action = NPUC_ACTION_SPARSIFIED};
static const npuc__codec CODEC_PRUNED = {.name = "pruned", .action = NPUC_ACTION_PRUNED};

const npuc__codec *const npuc__codecs[] = {
    &npuc__codec_quant, &npuc__codec_fake_quant, &npuc__codec_lowrank,
    &npuc__codec_nm_sparse, &CODEC_SPARSE, &CODEC_PRUNED,
};
const size_t npuc__codec_count = sizeof npuc__codecs / sizeof npuc__codecs[0];

const npuc__codec *npuc__codec_find(const char *name) {
    for (size_t i = 0; name && i < npuc__codec_count; i++)
        if (strcmp(name, npuc__codecs[i]->name) == 0) return npuc__codecs[i];
    return NULL;
}

const npuc__codec *npuc__codec_of(const json_t *entry) {
    return npuc__codec_find(json_string_value(json_object_get(entry, "encoding")));
}

int npuc__codec_entry_dense(const json_t *entry) {
    const npuc__codec *c = npuc__codec_of(entry);
    return c && c->dense && !json_object_get(entry, "parts");
}

const char *npuc__codec_part_suffix(const npuc__codec *c, const char *role) {
    for (size_t i = 0; i < NPUC_CODEC_PARTS_MAX && c->parts[i].role; i++)
        if (strcmp(c->parts[i].role, role) == 0) return c->parts[i].suffix;
    return NULL;
}

int npuc__codec_part_name(const npuc__codec *c, const char *role, const char *tensor, char *buf, size_t n) {
    const char *suf = npuc__codec_part_suffix(c, role);
    if (n) buf[0] = 0;
    if (!suf) return -1;
    const size_t a = strlen(tensor), b = strlen(suf);
    if (a >= n || b >= n - a) return -1;
    memcpy(buf, tensor, a);
    memcpy(buf + a, suf, b + 1);
    return 0;
}

char *npuc__codec_part_dup(const npuc__codec *c, const char *role, const char *tensor) {
    const char *suf = npuc__codec_part_suffix(c, role);
    assert(suf && "the codec has no part of that role");
    const size_t a = strlen(tensor), b = strlen(suf ? suf : "");
    char *s = malloc(a + b + 1);
    if (!s || npuc__codec_part_name(c, role, tensor, s, a + b + 1) != 0) {
        free(s);
        return NULL;
    }
    return s;
}
