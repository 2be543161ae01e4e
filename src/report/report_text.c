/*
 * report_text.c - the aligned text table: a header of '#' lines (version,
 * command, inputs, parameters, threads, time), one line per tensor (worst
 * SQNR first with --sort sqnr), the warnings, and the totals last.
 */
#include <stdlib.h>
#include <string.h>

#include "report/report_internal.h"

npuc_status npuc__report_text(npuc_ctx *ctx, FILE *f, const npuc_summary *s, const npuc_report_info *info,
                              const npuc__report_doc *d) {
    (void)ctx;
    fprintf(f, "# npuc report: %s\n", s->pass);
    fprintf(f, "# npuc %s, commit %s\n", npuc_version(), d->commit ? d->commit : "unknown");
    if (info->command_line) fprintf(f, "# command: %s\n", info->command_line);
    for (size_t i = 0; i < d->ninputs; i++) {
        if (d->inputs[i].ok)
            fprintf(f, "# input: %s (%llu bytes, sha256 %s)\n", d->inputs[i].path,
                    (unsigned long long)d->inputs[i].size, d->inputs[i].sha256);
        else
            fprintf(f, "# input: %s (unreadable)\n", d->inputs[i].path);
    }
    if (info->output) fprintf(f, "# output: %s\n", info->output);
    if (info->params_json) fprintf(f, "# params: %s\n", info->params_json);
    if (info->threads) fprintf(f, "# threads: %d\n", info->threads);
    if (d->timestamp[0]) fprintf(f, "# time: %s\n", d->timestamp);
    int namew = 8;
    for (size_t i = 0; i < s->nrecords; i++) {
        char tmp[256];
        int w = (int)npuc__fmt_name(s->records[i].name ? s->records[i].name : "", 48, tmp, sizeof tmp);
        if (w > namew) namew = w;
    }
    char line[1024];
    for (size_t k = 0; k < s->nrecords; k++) {
        npuc_report_line(&s->records[d->order[k]], d->order[k], s->nrecords, namew, line, sizeof line);
        fprintf(f, "%s\n", line);
    }
    for (size_t i = 0; i < d->nwarnings; i++) fprintf(f, "warning: %s\n", d->warnings[i]);
    npuc_report_totals_line(s, line, sizeof line);
    fprintf(f, "%s\n", line);
    return NPUC_OK;
}
