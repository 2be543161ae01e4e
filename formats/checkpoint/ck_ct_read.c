/*
 * ck_ct_read.c - reading a compressed-tensors checkpoint's config
 * (ck_ct.h): the quantization_config of config.json and the scheme it gives
 * a module.  The checkpoint reader (ck_reader.c) presents each quantized
 * weight as one F32 tensor decoded on load, so info, validate, report and
 * decompress see the dense model.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ck_ct.h"

npuc_status npuc__ct_read_config(npuc_ctx *ctx, const char *dir, json_t **qc) {
    *qc = NULL;
    char p[4200];
    struct stat sb;
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (stat(p, &sb) != 0) return NPUC_OK;
    if (!S_ISREG(sb.st_mode) || sb.st_size > (16 << 20))
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: not a regular file of at most 16 MiB", p);
    json_error_t je;
    json_t *cfg = json_load_file(p, JSON_REJECT_DUPLICATES, &je);
    if (!cfg) return NPUC_OK; /* not ours to judge: transformers reads it */
    json_t *q = json_object_get(cfg, "quantization_config");
    const char *qm = json_string_value(json_object_get(q, "quant_method"));
    if (qm && strcmp(qm, "compressed-tensors") == 0) {
        if (!json_is_object(json_object_get(q, "config_groups"))) {
            json_decref(cfg);
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: quantization_config has no config_groups object", p);
        }
        *qc = json_incref(q);
    }
    json_decref(cfg);
    return NPUC_OK;
}

/* 1 when target names module: the module itself, "Linear" (every Linear
 * layer, which is what a 2-D weight with a scale is) or "re:<regex>"
 * (matched from the start, as Python's re.match). */
static int targets(const char *target, const char *module) {
    if (strcmp(target, module) == 0 || strcmp(target, "Linear") == 0) return 1;
    if (strncmp(target, "re:", 3) != 0) return 0;
    char pat[1100];
    snprintf(pat, sizeof pat, "^(%s)", target + 3);
    regex_t re;
    if (npuc__regcomp(&re, pat) != 0) return 0;
    int hit = regexec(&re, module, 0, NULL, 0) == 0;
    regfree(&re);
    return hit;
}

int npuc__ct_scheme(const json_t *qc, const char *module, int *bits, int *symmetric) {
    const json_t *groups = json_object_get(qc, "config_groups"), *ign = json_object_get(qc, "ignore");
    size_t i;
    json_t *v;
    json_array_foreach(ign, i, v) if (json_is_string(v) && targets(json_string_value(v), module)) return -1;
    const char *gk;
    json_t *g;
    json_object_foreach((json_t *)groups, gk, g) {
        json_t *ts = json_object_get(g, "targets"), *w = json_object_get(g, "weights");
        json_array_foreach(ts, i, v) {
            if (!json_is_string(v) || !targets(json_string_value(v), module)) continue;
            *bits = (int)json_integer_value(json_object_get(w, "num_bits"));
            *symmetric = json_is_true(json_object_get(w, "symmetric"));
            return *bits >= 2 && *bits <= 8 ? 0 : -1;
        }
    }
    return -1;
}
