/*
 * report_text.c - the aligned text table: header, one line per tensor
 * (worst SQNR first with --sort sqnr), totals, warnings.
 */
#include <stdlib.h>
#include <string.h>

#include "report/report_internal.h"

npuc_status npuc__report_text(npuc_ctx *ctx, FILE *f, const npuc_summary *s, const npuc_report_info *info) {
    if (info->command_line) fprintf(f, "# %s\n", info->command_line);
    int namew = 8;
    for (size_t i = 0; i < s->nrecords; i++) {
        char tmp[256];
        int w = (int)npuc__fmt_name(s->records[i].name ? s->records[i].name : "", 48, tmp, sizeof tmp);
        if (w > namew) namew = w;
    }
    size_t *order = npuc__report_order(s, info->sort_by_sqnr);
    if (!order) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    char line[1024];
    for (size_t k = 0; k < s->nrecords; k++) {
        npuc_report_line(&s->records[order[k]], order[k], s->nrecords, namew, line, sizeof line);
        fprintf(f, "%s\n", line);
    }
    free(order);
    npuc_report_totals_line(s, line, sizeof line);
    fprintf(f, "%s\n", line);
    for (size_t i = 0; i < s->nwarnings; i++) fprintf(f, "warning: %s\n", s->warnings[i]);
    return NPUC_OK;
}
