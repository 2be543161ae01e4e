/*
 * range.c - the front of the range estimators: option defaults, parsing and
 * formatting of method names, scratch sizing, validation and dispatch, and
 * the minmax method itself.
 *
 * Every method starts from one pass that finds the group's extremes and
 * detects non-finite values (the caller is meant to reject those first; a
 * NaN that slipped through gets NPUC_ERR_VALUE rather than undefined float
 * to int conversions deeper down).  minmax is that pass and nothing else.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "range_internal.h"

npuc_range_opts npuc_range_opts_defaults(void) {
    npuc_range_opts o;
    memset(&o, 0, sizeof o);
    o.method = NPUC_RANGE_MINMAX;
    o.percentile = 99.99;
    o.bits = 8;
    o.symmetric = 1;
    return o;
}

/* 1 if s is a plain decimal number (no sign other than '+', no leading
 * blanks, no hex, no inf/nan); strtod accepts more than we want. */
static int plain_number(const char *s) {
    if (*s == '+') s++;
    int digits = 0;
    while (*s >= '0' && *s <= '9') s++, digits++;
    if (*s == '.') {
        s++;
        while (*s >= '0' && *s <= '9') s++, digits++;
    }
    if (!digits) return 0;
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-') s++;
        if (!(*s >= '0' && *s <= '9')) return 0;
        while (*s >= '0' && *s <= '9') s++;
    }
    return *s == 0;
}

npuc_status npuc_range_parse(npuc_ctx *ctx, const char *s, npuc_range_opts *o) {
    if (!s || !o) return npuc_fail(ctx, NPUC_ERR_ARG, "range method: NULL argument");
    if (!strcmp(s, "minmax")) {
        o->method = NPUC_RANGE_MINMAX;
        return NPUC_OK;
    }
    if (!strcmp(s, "mse")) {
        o->method = NPUC_RANGE_MSE;
        return NPUC_OK;
    }
    if (!strcmp(s, "entropy")) {
        o->method = NPUC_RANGE_ENTROPY;
        return NPUC_OK;
    }
    static const char pfx[] = "percentile=";
    if (!strncmp(s, pfx, sizeof pfx - 1)) {
        const char *num = s + sizeof pfx - 1;
        if (!plain_number(num))
            return npuc_fail(ctx, NPUC_ERR_ARG,
                             "range method '%s': '%s' is not a number (expected percentile=P "
                             "with P in (0, 100])",
                             s, num);
        errno = 0;
        double p = strtod(num, NULL);
        if (errno == ERANGE || !(p > 0.0 && p <= 100.0))
            return npuc_fail(ctx, NPUC_ERR_ARG,
                             "range method '%s': the percentile must be in (0, 100]", s);
        o->method = NPUC_RANGE_PERCENTILE;
        o->percentile = p;
        return NPUC_OK;
    }
    if (!strcmp(s, "percentile"))
        return npuc_fail(ctx, NPUC_ERR_ARG,
                         "range method 'percentile' needs a value: percentile=P with P in (0, 100]");
    return npuc_fail(ctx, NPUC_ERR_ARG,
                     "unknown range method '%s' (expected minmax, percentile=P, mse or entropy)", s);
}

void npuc_range_format(const npuc_range_opts *o, char *buf, size_t n) {
    if (!buf || n == 0) return;
    if (!o) {
        buf[0] = 0;
        return;
    }
    switch (o->method) {
    case NPUC_RANGE_MINMAX: snprintf(buf, n, "minmax"); return;
    case NPUC_RANGE_MSE: snprintf(buf, n, "mse"); return;
    case NPUC_RANGE_ENTROPY: snprintf(buf, n, "entropy"); return;
    case NPUC_RANGE_PERCENTILE: {
        /* The shortest plain decimal that reads back as the same double
         * (99.99 prints as "99.99", 100 as "100"), so parse(format(o))
         * round-trips; tiny values fall back to the shortest %g. */
        char num[64];
        int found = 0;
        for (int dec = 0; dec <= 20 && !found; dec++) {
            snprintf(num, sizeof num, "%.*f", dec, o->percentile);
            found = strtod(num, NULL) == o->percentile;
        }
        for (int prec = 1; prec <= 17 && !found; prec++) {
            snprintf(num, sizeof num, "%.*g", prec, o->percentile);
            found = strtod(num, NULL) == o->percentile;
        }
        snprintf(buf, n, "percentile=%s", num);
        return;
    }
    }
    snprintf(buf, n, "unknown");
}

size_t npuc_range_scratch_size(size_t n, const npuc_range_opts *o) {
    if (!o || n == 0) return 0;
    switch (o->method) {
    case NPUC_RANGE_MINMAX: return 0;
    case NPUC_RANGE_PERCENTILE: return npuc__range_percentile_scratch(n);
    case NPUC_RANGE_MSE: return npuc__range_mse_scratch(n, o->bits, o->symmetric);
    case NPUC_RANGE_ENTROPY: return npuc__range_entropy_scratch(n, o->bits, o->symmetric);
    }
    return 0;
}

/* min and max over 8 lanes (lane = index mod 8; kernels/calib_lanes.h: SSE2
 * or the same operations in scalar code, so both give the same bits, signed
 * zeros included).
 * Non-finite values are caught by summing x * 0, which is +-0 for every
 * finite x and NaN for NaN or +-Inf. */
int npuc__range_minmax(const float *x, size_t n, float *lo, float *hi) {
    if (n == 0) {
        *lo = *hi = 0.0f;
        return 0;
    }
    float l[8], h[8], z[8];
    for (int j = 0; j < 8; j++) l[j] = h[j] = x[0], z[j] = 0.0f;
    /* Whole blocks of 8 in the lane kernel (SSE2 or the scalar reference:
     * the same bits), the tail here with the same operations. */
    size_t i = n / 8 * 8;
    npuc_calib_kernels()->lanes_minmax(x, n / 8, l, h, z);
    for (; i < n; i++) {
        const float v = x[i];
        l[i & 7] = v < l[i & 7] ? v : l[i & 7];
        h[i & 7] = v > h[i & 7] ? v : h[i & 7];
        z[i & 7] += v * 0.0f;
    }
    float a = l[0], b = h[0], s = z[0];
    for (int j = 1; j < 8; j++) {
        a = l[j] < a ? l[j] : a;
        b = h[j] > b ? h[j] : b;
        s += z[j];
    }
    *lo = a;
    *hi = b;
    return isnan(s) || !isfinite(a) || !isfinite(b);
}

npuc_status npuc_range_estimate(npuc_ctx *ctx, const float *x, size_t n, const npuc_range_opts *o,
                                float *lo, float *hi, void *scratch) {
    if (!o || !lo || !hi || (!x && n))
        return npuc_fail(ctx, NPUC_ERR_ARG, "range estimate: NULL argument");
    switch (o->method) {
    case NPUC_RANGE_MINMAX: break;
    case NPUC_RANGE_PERCENTILE:
        if (!(o->percentile > 0.0 && o->percentile <= 100.0))
            return npuc_fail(ctx, NPUC_ERR_ARG, "range percentile %g is outside (0, 100]",
                             o->percentile);
        break;
    case NPUC_RANGE_MSE:
    case NPUC_RANGE_ENTROPY:
        if (o->bits < NPUC_RANGE_MIN_BITS || o->bits > NPUC_RANGE_MAX_BITS)
            return npuc_fail(ctx, NPUC_ERR_ARG, "range estimate: %d bits is outside [%d, %d]",
                             o->bits, NPUC_RANGE_MIN_BITS, NPUC_RANGE_MAX_BITS);
        break;
    default:
        return npuc_fail(ctx, NPUC_ERR_ARG, "range estimate: unknown method %d", (int)o->method);
    }

    *lo = *hi = 0.0f;
    if (n == 0) return NPUC_OK;

    float l, h;
    if (npuc__range_minmax(x, n, &l, &h))
        return npuc_fail(ctx, NPUC_ERR_VALUE, "range estimate: the group holds NaN or Inf values");
    if (o->symmetric) {
        float a = fmaxf(fabsf(l), fabsf(h));
        l = -a;
        h = a;
    }
    if (o->method == NPUC_RANGE_MINMAX || l == h) {
        /* A constant group (or all zeros) has nothing to clip. */
        *lo = l;
        *hi = h;
        return NPUC_OK;
    }

    size_t need = npuc_range_scratch_size(n, o);
    void *own = NULL;
    if (!scratch && need) {
        if (need == SIZE_MAX || !(own = malloc(need)))
            return npuc_fail(ctx, NPUC_ERR_NOMEM, "range estimate: cannot allocate %zu bytes of scratch",
                             need);
        scratch = own;
    }
    int sym = o->symmetric != 0;
    switch (o->method) {
    case NPUC_RANGE_PERCENTILE:
        npuc__range_percentile(x, n, o->percentile, sym, l, h, lo, hi, scratch);
        break;
    case NPUC_RANGE_MSE: npuc__range_mse(x, n, o->bits, sym, l, h, lo, hi, scratch); break;
    case NPUC_RANGE_ENTROPY: npuc__range_entropy(x, n, o->bits, sym, l, h, lo, hi, scratch); break;
    default: break;
    }
    free(own);
    return NPUC_OK;
}
