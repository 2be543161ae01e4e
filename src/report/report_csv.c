/*
 * report_csv.c - one row per tensor, a header row, numbers unformatted
 * (%.17g, so they parse back exactly; non-finite as inf, -inf, nan).  The
 * extras of all records form extra columns, in order of first appearance.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report/report_internal.h"

static void csv_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; s && *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void csv_num(FILE *f, double v) {
    if (isnan(v)) fputs("nan", f);
    else if (isinf(v)) fputs(v > 0 ? "inf" : "-inf", f);
    else fprintf(f, "%.17g", v);
}

npuc_status npuc__report_csv(npuc_ctx *ctx, FILE *f, const npuc_summary *s, const npuc_report_info *info,
                             const npuc__report_doc *d) {
    (void)info;
    (void)d;
    /* The union of extra keys. */
    size_t nk = 0, cap = 16;
    const char **keys = malloc(cap * sizeof *keys);
    if (!keys) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < s->nrecords; i++)
        for (size_t e = 0; e < s->records[i].nextra; e++) {
            const char *k = s->records[i].extra[e].key;
            size_t j = 0;
            while (j < nk && strcmp(keys[j], k) != 0) j++;
            if (j < nk) continue;
            if (nk == cap) {
                const char **nkeys = realloc(keys, 2 * cap * sizeof *keys);
                if (!nkeys) { free(keys); return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); }
                keys = nkeys;
                cap *= 2;
            }
            keys[nk++] = k;
        }
    fputs("name,dtype,shape,action,scheme,bytes_before,bytes_after,params_before,params_after,"
          "mse,rmse,max_abs,sqnr_db,cosine,rel_fro,noise_pred,clipped,output_rel_error", f);
    for (size_t j = 0; j < nk; j++) fprintf(f, ",%s", keys[j]);
    fputs(",compared,note\n", f);
    for (size_t i = 0; i < s->nrecords; i++) {
        const npuc_tensor_record *r = &s->records[i];
        char shape[160];
        npuc__fmt_shape(r, shape, sizeof shape);
        csv_str(f, r->name);
        fprintf(f, ",%s,", npuc_dtype_name(r->dtype));
        csv_str(f, shape);
        fprintf(f, ",%s,%s,%llu,%llu,%llu,%llu", npuc_action_name(r->action), r->scheme,
                (unsigned long long)r->bytes_before, (unsigned long long)r->bytes_after,
                (unsigned long long)r->params_before, (unsigned long long)r->params_after);
        const double v[7] = {r->err.mse, r->err.rmse, r->err.max_abs, r->err.sqnr_db, r->err.cosine,
                             r->err.rel_fro, r->err.noise_pred};
        for (int k = 0; k < 7; k++) {
            fputc(',', f);
            if (r->has_error) csv_num(f, v[k]);
        }
        fputc(',', f);
        if (r->has_error) fprintf(f, "%llu", (unsigned long long)r->err.clipped);
        fputc(',', f); /* empty without calibration data, never 0 */
        if (r->has_out_error) csv_num(f, r->out_rel_error);
        for (size_t j = 0; j < nk; j++) {
            fputc(',', f);
            for (size_t e = 0; e < r->nextra; e++)
                if (strcmp(r->extra[e].key, keys[j]) == 0) csv_num(f, r->extra[e].value);
        }
        fputc(',', f);
        csv_str(f, r->compared);
        fputc(',', f);
        csv_str(f, r->note);
        fputc('\n', f);
    }
    free(keys);
    return NPUC_OK;
}
