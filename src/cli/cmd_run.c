/*
 * cmd_run.c - `npuc run RECIPE IN -o OUT`: one model through a recipe's
 * chain of passes, one artifact, one report with a column per step.
 *
 * stdout carries the result: a table with one row per tensor name and one
 * column per step (what the step did to it, and the SQNR where it measured
 * one), then each step's totals and the run's; or, with --json, the
 * npuc.report/1 document of the run (records of every step, each with the
 * extra "step"; per-step totals under params.steps).  --report FILE writes
 * the same (text table for .txt and unknown extensions) before the artifact
 * is moved into place, so an artifact never appears without its report.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_common.h"
#include "cli_outputs.h"
#include "cli_progress.h"

enum { OPT_NO_STREAM = CLI_OPT_USER };

static const cli_option OPTIONS[] = {
    {"no-stream", 0, 0, OPT_NO_STREAM},
    {NULL, 0, 0, 0},
};

typedef struct rargs {
    int no_stream;
} rargs;

static int on_opt(cli_args *a, void *ud, int id, const char *arg) {
    rargs *r = ud;
    (void)a;
    (void)arg;
    if (id == OPT_NO_STREAM) r->no_stream = 1;
    return CLI_CONTINUE;
}

/* ------------------------------------------------------------ the step table */

/* What step k did to a tensor, for one cell: "folded", "int8/ch 41.2dB". */
static void cell_text(const npuc_tensor_record *r, char *buf, size_t n) {
    char sq[24] = "";
    if (r->has_error && !isnan(r->err.sqnr_db)) {
        if (isinf(r->err.sqnr_db)) snprintf(sq, sizeof sq, " %sinf dB", r->err.sqnr_db < 0 ? "-" : "");
        else snprintf(sq, sizeof sq, " %.1f dB", r->err.sqnr_db);
    }
    if (r->action == NPUC_ACTION_KEPT) snprintf(buf, n, "-");
    else if (r->scheme[0] && strcmp(r->scheme, "-") != 0) snprintf(buf, n, "%s%s", r->scheme, sq);
    else snprintf(buf, n, "%s%s", npuc_action_name(r->action), sq);
}

typedef struct row {
    const char *name;
    const npuc_tensor_record *first;
    size_t *rec; /* per step: record index + 1, 0 when the tensor is not in that step */
} row;

/* Writes the column-per-step table and the totals to f. */
static int write_table(FILE *f, const npuc_recipe *rc, const npuc_summary *s, const char *cmdline) {
    size_t ns = npuc_recipe_step_count(rc), nr = 0;
    row *rows = calloc(s->nrecords ? s->nrecords : 1, sizeof *rows);
    size_t *cells = calloc((s->nrecords ? s->nrecords : 1) * ns, sizeof *cells);
    if (!rows || !cells) {
        free(rows);
        free(cells);
        return -1;
    }
    for (size_t i = 0; i < s->nrecords; i++) {
        const npuc_tensor_record *r = &s->records[i];
        size_t k = (size_t)npuc_record_get(r, "step", 1) - 1;
        if (k >= ns) k = ns - 1;
        size_t j = 0;
        /* Names repeat across steps; later steps usually keep the order. */
        while (j < nr && strcmp(rows[j].name, r->name ? r->name : "") != 0) j++;
        if (j == nr) {
            rows[nr].name = r->name ? r->name : "";
            rows[nr].first = r;
            rows[nr].rec = cells + nr * ns;
            nr++;
        }
        rows[j].rec[k] = i + 1;
    }
    /* A tensor a step creates from another ("w.lr_a" from "w") goes right
     * under it rather than at the end: rows created later whose name is a
     * row's name plus "." follow that row. */
    row *ordered = calloc(nr ? nr : 1, sizeof *ordered);
    unsigned char *done = calloc(nr ? nr : 1, 1);
    if (!ordered || !done) {
        free(ordered);
        free(done);
        free(rows);
        free(cells);
        return -1;
    }
    size_t no = 0;
    for (size_t j = 0; j < nr; j++) {
        if (done[j]) continue;
        done[j] = 1;
        ordered[no++] = rows[j];
        size_t l = strlen(rows[j].name);
        for (size_t m = j + 1; m < nr; m++)
            if (!done[m] && strncmp(rows[m].name, rows[j].name, l) == 0 && rows[m].name[l] == '.') {
                done[m] = 1;
                ordered[no++] = rows[m];
            }
    }
    memcpy(rows, ordered, nr * sizeof *rows);
    free(ordered);
    free(done);
    size_t namew = 4, shapew = 5, *colw = calloc(ns, sizeof *colw);
    if (!colw) {
        free(rows);
        free(cells);
        return -1;
    }
    char buf[160];
    for (size_t k = 0; k < ns; k++) colw[k] = strlen(npuc_step_kind_name(npuc_recipe_step_kind(rc, k, NULL, NULL))) + 3;
    for (size_t j = 0; j < nr; j++) {
        size_t w = cli_width(rows[j].name);
        if (w > namew) namew = w;
        npuc_tensor_info ti;
        memset(&ti, 0, sizeof ti);
        ti.rank = rows[j].first->rank;
        memcpy(ti.shape, rows[j].first->shape, sizeof ti.shape);
        cli_fmt_shape(&ti, buf, sizeof buf);
        if (strlen(buf) > shapew) shapew = strlen(buf);
        for (size_t k = 0; k < ns; k++) {
            if (!rows[j].rec[k]) continue;
            cell_text(&s->records[rows[j].rec[k] - 1], buf, sizeof buf);
            if (strlen(buf) > colw[k]) colw[k] = strlen(buf);
        }
    }
    if (namew > 48) namew = 48;
    if (cmdline) fprintf(f, "# %s\n", cmdline);
    fprintf(f, "recipe: %s (sha256 %.16s...)\n\n", npuc_recipe_name(rc), npuc_recipe_sha256(rc));
    fprintf(f, "%-*s  %-*s", (int)namew, "name", (int)shapew, "shape");
    for (size_t k = 0; k < ns; k++) {
        snprintf(buf, sizeof buf, "%zu:%s", k + 1, npuc_step_kind_name(npuc_recipe_step_kind(rc, k, NULL, NULL)));
        fprintf(f, "  %-*s", k + 1 < ns ? (int)colw[k] : 0, buf);
    }
    fputc('\n', f);
    for (size_t j = 0; j < nr; j++) {
        char nm[256];
        cli_fmt_oneline(rows[j].name, namew, nm, sizeof nm, NULL);
        fprintf(f, "%s%*s", nm, (int)(namew - (cli_width(nm) < namew ? cli_width(nm) : namew)), "");
        npuc_tensor_info ti;
        memset(&ti, 0, sizeof ti);
        ti.rank = rows[j].first->rank;
        memcpy(ti.shape, rows[j].first->shape, sizeof ti.shape);
        fprintf(f, "  %-*s", (int)shapew, cli_fmt_shape(&ti, buf, sizeof buf));
        for (size_t k = 0; k < ns; k++) {
            if (rows[j].rec[k]) cell_text(&s->records[rows[j].rec[k] - 1], buf, sizeof buf);
            else buf[0] = 0;
            fprintf(f, "  %-*s", k + 1 < ns ? (int)colw[k] : 0, buf);
        }
        fputc('\n', f);
    }
    fputc('\n', f);
    /* Per-step totals, from the same records. */
    for (size_t k = 0; k < ns; k++) {
        npuc_summary one;
        memset(&one, 0, sizeof one);
        size_t cnt = 0;
        for (size_t i = 0; i < s->nrecords; i++)
            if ((size_t)npuc_record_get(&s->records[i], "step", 0) == k + 1) cnt++;
        one.records = malloc((cnt ? cnt : 1) * sizeof *one.records);
        if (!one.records) break;
        for (size_t i = 0; i < s->nrecords; i++)
            if ((size_t)npuc_record_get(&s->records[i], "step", 0) == k + 1) one.records[one.nrecords++] = s->records[i];
        npuc_summary_finish(&one);
        char line[1024];
        npuc_report_totals_line(&one, line, sizeof line);
        fprintf(f, "step %zu %s: %s\n", k + 1, npuc_step_kind_name(npuc_recipe_step_kind(rc, k, NULL, NULL)),
                line + (strncmp(line, "total: ", 7) == 0 ? 7 : 0));
        free(one.records);
    }
    /* The run's line: tensors in (the first step's) and out (the last
     * step's, less those it removed) rather than records over all steps,
     * then every step's actions, bytes and SQNR as the report gives them. */
    char line[1024];
    npuc_report_totals_line(s, line, sizeof line);
    size_t nin = 0, nout = 0;
    for (size_t i = 0; i < s->nrecords; i++) {
        size_t k = (size_t)npuc_record_get(&s->records[i], "step", 0);
        nin += k == 1 && s->records[i].action != NPUC_ACTION_CREATED;
        nout += k == ns && s->records[i].action != NPUC_ACTION_REMOVED;
    }
    const char *rest = line + strcspn(line, ",;");
    if (strstr(line, " tensors in, ")) rest = strstr(line, " out") + 4; /* "total: N tensors in, M out, ..." */
    fprintf(f, "total: %zu tensors in, %zu out%s\n", nin, nout, rest);
    /* The report file keeps the warnings; on a terminal run they go to
     * stderr (cli_warn), never into the results on stdout. */
    int nomem = 0;
    if (f != stdout) {
        size_t ng;
        char **g = npuc_warnings_group((const char *const *)s->warnings, s->nwarnings, &ng);
        for (size_t i = 0; g && i < ng; i++) fprintf(f, "warning: %s\n", g[i]);
        npuc_warnings_free(g, g ? ng : 0);
        nomem = !g;
    }
    free(colw);
    free(rows);
    free(cells);
    return ferror(f) || nomem ? -1 : 0;
}

/* ------------------------------------------------------------ the run */

typedef struct runner {
    const cli_args *a;
    const rargs *ra;
    const npuc_recipe *rc;
    const char *in, *out, *cmdline;
    char in_sha[65];
    int progress;
    char err[1024]; /* a failure the CLI itself found, or "" */
} runner;

static void on_step(void *user, size_t step, size_t nsteps, npuc_step_kind kind) {
    runner *r = user;
    if (r->progress) {
        char line[128];
        snprintf(line, sizeof line, "[step %zu/%zu] %s...", step + 1, nsteps, npuc_step_kind_name(kind));
        cli_progress_draw(line);
    }
}

static void on_tensor(void *user, size_t step, size_t i, size_t n, const npuc_tensor_record *rec) {
    runner *r = user;
    (void)rec;
    if (r->progress) {
        char line[128];
        snprintf(line, sizeof line, "[step %zu/%zu] %s [%zu/%zu]", step + 1, npuc_recipe_step_count(r->rc),
                 npuc_step_kind_name(npuc_recipe_step_kind(r->rc, step, NULL, NULL)), i + 1, n);
        cli_progress_draw(line);
    }
}

/* Text reports are atomic files, like artifacts (cli_outputs.h).  The
 * library cannot name this failure, so the message goes to r->err. */
static npuc_status write_text_report(runner *r, const npuc_summary *s) {
    cli_side_file sf;
    FILE *f = cli_side_open(r->a->report, &sf);
    int bad = !f || cli_side_close(&sf, write_table(f, r->rc, s, r->cmdline) == 0) != 0;
    if (bad) snprintf(r->err, sizeof r->err, "%s: cannot write the report: %s", r->a->report, strerror(errno));
    return bad ? NPUC_ERR_IO : NPUC_OK;
}

static npuc_status before_commit(void *user, npuc_ctx *ctx, const npuc_summary *s) {
    runner *r = user;
    if (r->progress) cli_progress_erase();
    if (!r->a->report) return NPUC_OK;
    npuc_report_format fmt = npuc_report_format_from_path(r->a->report);
    if (fmt == NPUC_REPORT_TEXT) return write_text_report(r, s);
    char *pj = npuc_recipe_params_json(r->rc, s, r->in_sha);
    npuc_report_info info = npuc_report_info_defaults();
    const char *inputs[1] = {r->in};
    info.command_line = r->cmdline;
    info.inputs = inputs;
    info.ninputs = 1;
    info.output = r->out;
    info.params_json = pj;
    info.threads = npuc_ctx_threads(ctx);
    npuc_status st = npuc_report_write_file(ctx, r->a->report, fmt, s, &info);
    free(pj);
    return st;
}

static int run(int argc, char **argv) {
    cli_args a;
    rargs ra = {0};
    npuc_ctx *ctx = NULL;
    npuc_recipe *rc = NULL;
    npuc_summary sum;
    memset(&sum, 0, sizeof sum);
    char *cmdline = cli_join_command(argc, argv);
    int rcode = cli_parse(&cli_cmd_run, argc, argv,
                          CLI_OPT_OUTPUT | CLI_OPT_FORCE | CLI_OPT_JOBS | CLI_OPT_JSON | CLI_OPT_REPORT | CLI_OPT_DEFLATE |
                              CLI_OPT_POLICY | CLI_OPT_PROGRESS,
                          OPTIONS, on_opt, &ra, 2, 2, &a);
    if (rcode != CLI_CONTINUE) goto done;
    if (!a.output) {
        rcode = cli_usage_error(&cli_cmd_run, "missing -o OUT");
        goto done;
    }
    if ((rcode = cli_check_output_name(&cli_cmd_run, a.output)) != CLI_EXIT_OK) goto done;
    /* An unwritable --report fails before any work (cli_outputs.h). */
    if ((rcode = cli_side_probe(a.report, "report")) != CLI_CONTINUE) goto done;
    if (a.report && (rcode = cli_check_report_name(a.report, 1, "report")) != CLI_EXIT_OK) goto done;
    rcode = CLI_EXIT_OK;
    if ((rcode = cli_ctx_new(&a, &ctx)) != CLI_EXIT_OK) goto done;
    npuc_ctx_set_policy(ctx, &a.policy);
    npuc_status st = npuc_recipe_load(ctx, a.pos[0], &rc);
    if (st != NPUC_OK) { rcode = cli_fail(ctx, st); goto done; }
    runner r;
    memset(&r, 0, sizeof r);
    r.a = &a;
    r.ra = &ra;
    r.rc = rc;
    r.in = a.pos[1];
    r.out = a.output;
    r.cmdline = cmdline;
    r.progress = cli_progress_enabled(&a);
    if ((st = npuc_sha256_file(ctx, r.in, r.in_sha)) != NPUC_OK) { rcode = cli_fail(ctx, st); goto done; }
    npuc_run_opts o = npuc_run_opts_defaults();
    cli_write_opts(&a, &o.write);
    o.no_stream = ra.no_stream;
    o.input_sha256 = r.in_sha;
    o.on_step = on_step;
    o.on_tensor = on_tensor;
    o.before_commit = before_commit;
    o.user = &r;
    st = npuc_recipe_run(ctx, rc, r.in, r.out, &o, &sum);
    if (r.progress) cli_progress_erase();
    if (st != NPUC_OK && r.err[0]) {
        cli_error("%s", r.err);
        rcode = CLI_EXIT_FAIL;
        goto done;
    }
    /* A failed gate: the results are printed like a success's, then the
     * error, exit 3; nothing was written at OUT. */
    npuc_status gate = st == NPUC_ERR_GATE ? st : NPUC_OK;
    char gate_msg[1024];
    snprintf(gate_msg, sizeof gate_msg, "%s", gate ? npuc_ctx_errmsg(ctx) : "");
    if (gate) r.out = NULL;
    if (st != NPUC_OK && !gate) { rcode = cli_fail(ctx, st); goto done; }
    if (a.json) {
        char *pj = npuc_recipe_params_json(rc, &sum, r.in_sha);
        npuc_report_info info = npuc_report_info_defaults();
        const char *inputs[1] = {r.in};
        info.command_line = cmdline;
        info.inputs = inputs;
        info.ninputs = 1;
        info.output = r.out;
        info.params_json = pj;
        info.threads = npuc_ctx_threads(ctx);
        st = npuc_report_write(ctx, stdout, NPUC_REPORT_JSON, &sum, &info);
        free(pj);
        if (st != NPUC_OK) { rcode = cli_fail(ctx, st); goto done; }
    } else if (write_table(stdout, rc, &sum, NULL) != 0) {
        rcode = CLI_EXIT_FAIL;
        goto done;
    }
    fflush(stdout);
    cli_warn_summary(&a, NULL, &sum);
    if (gate) {
        cli_error("%s", gate_msg);
        rcode = cli_exit_code(gate);
        goto done;
    }
    char b1[CLI_FMT_MAX], b2[CLI_FMT_MAX];
    cli_note(&a, "ran %s on %s -> %s: %zu steps, %s -> %s", npuc_recipe_name(rc), r.in, r.out,
             npuc_recipe_step_count(rc), cli_fmt_size(sum.bytes_before, b1), cli_fmt_size(sum.bytes_after, b2));
    rcode = CLI_EXIT_OK;
done:
    npuc_summary_free(&sum);
    npuc_recipe_free(rc);
    npuc_ctx_free(ctx);
    free(cmdline);
    cli_args_free(&a);
    return cli_finish_stdout(rcode);
}

const cli_command cli_cmd_run = {
    "run",
    "run a recipe (a YAML chain of passes) on one model",
    "Usage: npuc run RECIPE IN -o OUT [--report FILE] [--no-stream] [-j N] [-f] [--json] [-q]\n"
    "                [--strict] [--accept-guesses] [--min-sqnr DB] [--min-layer-sqnr DB]\n"
    "                [--max-output-error F]\n"
    "\n"
    "Runs the steps of RECIPE (docs/recipes.md) in order on IN and writes one artifact\n"
    "to OUT.  The artifact records the recipe (npuc.recipe), its SHA-256\n"
    "(npuc.recipe_sha256) and the input's SHA-256 (npuc.input_sha256); no timestamps,\n"
    "so the same recipe and input give a byte-identical artifact.\n"
    "\n"
    "stdout: a table with one row per tensor and one column per step, then each\n"
    "step's totals and the run's.\n"
    "\n"
    "Options:\n"
    "  -o, --output OUT       the artifact (required); format from its extension, else IN's\n"
    "      --report FILE      also write the report to FILE before the artifact appears\n"
    "                         (.json, .csv, .md, .html; else the text table)\n"
    "      --json             print the npuc.report/1 JSON document instead of the table\n"
    "      --deflate N        HDF5 deflate level of the artifact 0..9 (default 4)\n"
    "      --max-shard-size SIZE  checkpoint outputs: at most SIZE per shard (default: the input's sharding)\n"
    "      --no-stream        write every step's result to a file beside OUT; by default a\n"
    "                         quantize step reads the step before it from memory while\n"
    "                         that step runs (safetensors only); the artifact is the same\n"
    "  -f, --force            overwrite OUT\n"
    "  -j, --jobs N           worker threads (default: all cores); output is identical for any N\n"
    "      --strict           refuse every decision that rests on a guess (exit 2)\n"
    "      --accept-guesses   apply guessed graph edges too (default: list them only)\n"
    "      --min-sqnr DB      quality gate: exit 3 without writing OUT when a step's\n"
    "                         weighted SQNR is below DB (the report is still written)\n"
    "      --min-layer-sqnr DB  quality gate: likewise when a tensor's SQNR in any step is\n"
    "                         below DB\n"
    "      --max-output-error F  quality gate: likewise when a tensor's relative output\n"
    "                         error over its calibration data (a step's calib) is above F\n"
    "  -q, --quiet            no summary line, warnings or progress on stderr\n"
    "      --progress         progress on stderr even when it is not a terminal\n"
    "  -h, --help             this help\n"
    "\n"
    "Errors in the recipe (unknown keys, wrong types, patterns that match no tensor)\n"
    "name the recipe's line and column; they and bad input exit 2, nothing written.\n"
    "A failed quality gate prints the results and the report, writes nothing at OUT\n"
    "and exits 3.\n",
    "RECIPE",
    run,
    NULL,
};
