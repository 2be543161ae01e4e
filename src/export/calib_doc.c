/*
 * calib_doc.c - reads back the calibration document of `npuc calibrate`
 * (schema npuc.calibration/1, docs/calibration-activations.md) for the
 * exporters: per activation, per channel, the scale and zero point.
 *
 * The document is input: every field used is checked (type, range, the
 * scale finite and positive, the zero point inside the grid), and a file
 * over 1 GiB is refused before it is parsed.
 */
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "export_internal.h"

#define DOC_MAX_BYTES ((long long)1 << 30)

static npuc_status bad(npuc_ctx *ctx, const char *path, const char *name, const char *what) {
    if (name) return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: activation '%s': %s", path, name, what);
    return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: %s", path, what);
}

npuc_status npuc__calib_doc_read(npuc_ctx *ctx, const char *path, npuc__grids *out) {
    memset(out, 0, sizeof *out);
    struct stat sb;
    if (stat(path, &sb) != 0) return npuc_fail(ctx, NPUC_ERR_NOT_FOUND, "%s: cannot open the calibration file", path);
    if ((long long)sb.st_size > DOC_MAX_BYTES) return bad(ctx, path, NULL, "calibration file over 1 GiB");
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: line %d: %s", path, je.line, je.text);
    npuc_status st = NPUC_OK;
    const json_t *schema = json_object_get(root, "schema"), *acts = json_object_get(root, "activations");
    const json_t *jb = json_object_get(root, "bits"), *js = json_object_get(root, "symmetric");
    if (!json_is_string(schema) || strcmp(json_string_value(schema), "npuc.calibration/1") != 0) {
        st = bad(ctx, path, NULL, "not an npuc.calibration/1 document (write it with npuc calibrate)");
        goto done;
    }
    if (!json_is_integer(jb) || json_integer_value(jb) < 2 || json_integer_value(jb) > 16 || !json_is_boolean(js) ||
        !json_is_object(acts)) {
        st = bad(ctx, path, NULL, "'bits', 'symmetric' or 'activations' is missing or out of range");
        goto done;
    }
    out->bits = (int)json_integer_value(jb);
    out->symmetric = json_is_true(js);
    const int64_t qmax = ((int64_t)1 << out->bits) - 1;
    const char *name;
    const json_t *a;
    json_object_foreach((json_t *)acts, name, a) {
        const json_t *ch = json_object_get(a, "channels"), *axis = json_object_get(a, "axis");
        if (!json_is_array(ch) || json_array_size(ch) == 0 || !(json_is_null(axis) || json_is_integer(axis))) {
            st = bad(ctx, path, name, "'channels' must be a non-empty list and 'axis' null or an integer");
            goto done;
        }
        npuc__grid *g = npuc__grids_add(ctx, out, name, json_array_size(ch));
        if (!g) {
            st = npuc_ctx_errcode(ctx);
            goto done;
        }
        g->bits = out->bits;
        g->symmetric = out->symmetric;
        g->per_channel = json_is_integer(axis);
        for (size_t k = 0; k < json_array_size(ch); k++) {
            const json_t *e = json_array_get(ch, k);
            const json_t *s = json_object_get(e, "scale"), *z = json_object_get(e, "zero_point");
            double sv = json_is_number(s) ? json_number_value(s) : NAN;
            float sf = (float)sv;
            if (!(sf > 0.0f) || !isfinite(sf) || (double)sf != sv) {
                st = bad(ctx, path, name, "a 'scale' is not a positive finite float32");
                goto done;
            }
            if (!json_is_integer(z) || json_integer_value(z) < 0 || json_integer_value(z) > qmax ||
                (out->symmetric && json_integer_value(z) != 0)) {
                st = bad(ctx, path, name, "a 'zero_point' is outside the grid (0 when symmetric)");
                goto done;
            }
            g->scale[k] = sf;
            g->zp[k] = (int32_t)json_integer_value(z);
        }
    }
done:
    json_decref(root);
    if (st != NPUC_OK) npuc__grids_free(out);
    return st;
}
