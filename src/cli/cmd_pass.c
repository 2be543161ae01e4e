/*
 * cmd_pass.c - `npuc quantize`, `prune`, `sparsify`, `lowrank` and
 * `fold-bn`: one command made from each pass descriptor (npuc/pass.h).
 *
 * The flags come from the pass's option table (a long flag per option, a
 * short one where the row has it) plus the common -o -f -j --layout --json
 * --report --deflate -q -v -h; a value is typed and checked by
 * npuc_pass_optset_set against the same bounds a recipe key gets, and
 * --help is printed from the same rows.  What only one command does is a
 * hook (cli_pass.h).
 *
 * stdout carries the results: one line per tensor as it is written, then
 * the totals, or with --json the npuc.report/1 document; --report FILE
 * writes the report to a file too.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_outputs.h"
#include "cli_pass.h"
#include "cli_progress.h"

#define MAX_PASSES 16

static const cli_pass_hook *const HOOKS[] = {&cli_pass_hook_lowrank, &cli_pass_hook_fold_bn};

static const cli_pass_hook *hook_of(const npuc_pass *p) {
    for (size_t i = 0; i < sizeof HOOKS / sizeof HOOKS[0]; i++)
        if (strcmp(HOOKS[i]->pass, p->name) == 0) return HOOKS[i];
    return NULL;
}

/* ------------------------------------------------------------ --help */

/* "  -b, --bits N" then the help text from column 25, continuation lines
 * indented to it (a long left part pushes the text two spaces after it). */
static void print_option(FILE *f, int short_flag, const char *flag, const char *metavar, const char *help) {
    char left[96];
    int n = snprintf(left, sizeof left, "  %c%c%c %s%s%s%s", short_flag ? '-' : ' ', short_flag ? short_flag : ' ',
                     short_flag ? ',' : ' ', "--", flag, metavar ? " " : "", metavar ? metavar : "");
    fprintf(f, "%-*s", n <= 23 ? 25 : n + 2, left);
    for (const char *h = help; *h;) {
        size_t len = strcspn(h, "\n");
        fprintf(f, "%s%.*s\n", h == help ? "" : "                         ", (int)len, h);
        h += len + (h[len] == '\n');
    }
}

static void print_rows(FILE *f, const npuc_pass_option *rows, size_t n, const char *section, const char *first) {
    for (size_t i = 0; i < n; i++) {
        const char *sec = rows[i].section ? rows[i].section : first;
        if (strcmp(sec, section) == 0)
            print_option(f, rows[i].short_flag, rows[i].flag, rows[i].type == NPUC_OPT_BOOL ? NULL : rows[i].metavar,
                         rows[i].help);
    }
}

static void print_indented(FILE *f, const char *text) {
    for (const char *h = text; *h;) {
        size_t len = strcspn(h, "\n");
        fprintf(f, "  %.*s\n", (int)len, h);
        h += len + (h[len] == '\n');
    }
}

static void pass_help(const cli_command *c, FILE *f) {
    const npuc_pass *p = npuc_pass_find(c->name);
    const cli_pass_hook *h = hook_of(p);
    const char *first = p->sections[0].title;
    fprintf(f, "Usage: npuc %s %s\n\n%s\n", p->name, p->usage, p->intro);
    for (const npuc_pass_section *s = p->sections; s->title; s++) {
        int output = strcmp(s->title, "Output") == 0;
        if (*s->title) fprintf(f, "%s:\n", s->title);
        if (output) print_option(f, 'o', "output", "OUT", p->output_help);
        print_rows(f, p->options, p->noptions, s->title, first);
        if (h) print_rows(f, h->options, h->noptions, s->title, first);
        if (s->input) print_option(f, 0, "layout", "REGEX=NAME", "override the layout of matching tensors (docs/formats.md)");
        if (output) {
            print_option(f, 0, "deflate", "N", "HDF5 deflate level 0..9 (default 4)");
            print_option(f, 0, "max-shard-size", "SIZE", "checkpoint outputs: re-shard to at most SIZE per shard\n"
                         "(default: keep the input's sharding; docs/checkpoints.md)");
            print_option(f, 0, "format", "NAME", "checkpoint outputs: npuc (default) or compressed-tensors\n"
                         "(vLLM/transformers layout; docs/compressed-tensors.md)");
            print_option(f, 0, "gguf-type", "TYPE", "GGUF outputs: the type of float tensors of rank >= 2 (f16 default;\n"
                         "q8_0 .. q5_1, q3_k, q4_k, q5_k, or a llama.cpp mix: docs/gguf.md)");
            print_option(f, 0, "gguf-pure", NULL, "GGUF outputs: one type for every tensor, no mix rules");
            print_option(f, 0, "imatrix", "FILE", "GGUF outputs: llama.cpp importance matrix for the weighted\n"
                         "quantizers (docs/gguf.md); quantize under a budget: weighs each\n"
                         "tensor's measured error by importance (docs/budget.md)");
            print_option(f, 0, "onnx-int4", "FORM", "ONNX outputs of 4-bit groups: dq (DequantizeLinear with\n"
                         "block_size, default) or matmulnbits (com.microsoft::MatMulNBits; docs/onnx.md)");
            print_option(f, 'f', "force", NULL, "overwrite OUT");
            print_option(f, 0, "json", NULL, p->json_help);
            print_option(f, 0, "report", "FILE", "also write the results to FILE (.txt, .json, .csv, .md or .html;\n"
                         "never over a model file)");
            print_option(f, 'j', "jobs", "N", "worker threads (default: all cores); output is identical for any N");
            print_option(f, 0, "strict", NULL, "refuse every decision that rests on a guess (a layout, a pairing,\n"
                         "a layer's role): exit 2 before anything is written");
            print_option(f, 0, "accept-guesses", NULL, "apply guessed graph edges too (default: list them, apply only\n"
                         "stated or certain ones)");
            print_option(f, 0, "min-sqnr", "DB", "quality gate: exit 3 without publishing OUT when the weighted\n"
                         "SQNR of the transformed tensors is below DB");
            print_option(f, 0, "min-layer-sqnr", "DB", "quality gate: exit 3 without publishing OUT when a\n"
                         "transformed tensor's SQNR is below DB");
            print_option(f, 0, "max-output-error", "F", "quality gate: exit 3 without publishing OUT when a tensor's\n"
                         "relative output error ||(W-W')X||/||WX|| over its --calib data\n"
                         "is above F (tensors without calibration data are not judged)");
            print_option(f, 'q', "quiet", NULL, "no notes, warnings or progress on stderr");
            print_option(f, 'v', "verbose", NULL, "accepted as by every command; adds nothing here (each tensor's\n"
                         "line is always printed; `npuc info -v` shows the layout evidence)");
            print_option(f, 0, "progress", NULL, "progress on stderr even when it is not a terminal (a bar\n"
                         "with bytes/s and the time left when a tensor is 64 MiB or more)");
            print_option(f, 'h', "help", NULL, "this help");
        }
        if (s->note) print_indented(f, s->note);
        fputc('\n', f);
    }
    fputs(p->footer, f);
}

/* ------------------------------------------------------------ the commands */

static int run(int argc, char **argv);

static cli_command CMDS[MAX_PASSES];
static size_t NCMDS;

const cli_command *cli_pass_command(const char *name) {
    if (!NCMDS) /* main() is single-threaded when it looks commands up */
        for (size_t i = 0; i < npuc_pass_count() && i < MAX_PASSES; i++) {
            const npuc_pass *p = npuc_pass_at(i);
            CMDS[NCMDS++] = (cli_command){p->name, p->summary, NULL, "IN", run, pass_help};
        }
    for (size_t i = 0; i < NCMDS; i++)
        if (strcmp(CMDS[i].name, name) == 0) return &CMDS[i];
    return NULL;
}

/* ------------------------------------------------------------ running */

/* A flag of the pass (id - CLI_OPT_USER < noptions) or of its hook. */
static int on_opt(cli_args *a, void *ud, int id, const char *arg) {
    cli_pass_run *r = ud;
    const cli_pass_hook *h = hook_of(r->pass);
    size_t k = (size_t)(id - CLI_OPT_USER);
    (void)a;
    if (k >= r->pass->noptions) return h->on_option(r, &h->options[k - r->pass->noptions], arg);
    npuc_status st = npuc_pass_optset_set(r->ctx, r->opts, &r->pass->options[k], arg);
    if (st == NPUC_ERR_ARG) return cli_usage_error(r->cmd, "%s", npuc_ctx_errmsg(r->ctx));
    return st == NPUC_OK ? CLI_CONTINUE : cli_fail(r->ctx, st);
}

/* Parses argv into r: the pass's flags, the hook's and the common ones. */
static int parse(cli_pass_run *r, const cli_pass_hook *h, int argc, char **argv) {
    size_t n = r->pass->noptions + (h ? h->noptions : 0);
    cli_option *opts = calloc(n + 1, sizeof *opts);
    if (!opts) {
        cli_error("out of memory");
        return CLI_EXIT_FAIL;
    }
    for (size_t i = 0; i < n; i++) {
        const npuc_pass_option *o = i < r->pass->noptions ? &r->pass->options[i] : &h->options[i - r->pass->noptions];
        opts[i] = (cli_option){o->flag, o->short_flag, o->type != NPUC_OPT_BOOL, CLI_OPT_USER + (int)i};
    }
    int rc = cli_parse(r->cmd, argc, argv,
                       CLI_OPT_OUTPUT | CLI_OPT_FORCE | CLI_OPT_JOBS | CLI_OPT_LAYOUT | CLI_OPT_JSON | CLI_OPT_REPORT |
                           CLI_OPT_DEFLATE | CLI_OPT_POLICY | CLI_OPT_PROGRESS,
                       opts, on_opt, r, 1, 1, &r->a);
    free(opts);
    return rc;
}

/* The totals or the JSON report, the warnings, the --report file.  The
 * summary's warnings go to stderr for every pass: they include the guard's
 * layout warnings and the low-quality warning (passes/pass_gate.h), which
 * must never be silent. */
/* An HTML report shows each layer's weight and error histograms: the pass
 * does not measure them, so they come from comparing the written output
 * with the input (npuc_compare_models, as `npuc report` does) and move into
 * the run's records by name.  A failure costs the histograms only. */
static void attach_histograms(cli_pass_run *r) {
    if (!r->a.report || !r->out || npuc_report_format_from_path(r->a.report) != NPUC_REPORT_HTML) return;
    npuc_model *outm = NULL;
    npuc_summary cmp;
    memset(&cmp, 0, sizeof cmp);
    npuc_compare_opts co = npuc_compare_opts_defaults();
    co.histograms = 1;
    if (npuc_model_open(r->ctx, r->out, NULL, &outm) != NPUC_OK ||
        npuc_compare_models(r->ctx, r->m, outm, &co, &cmp) != NPUC_OK) {
        cli_warn(&r->a, "%s: no histograms in the report: %s", r->a.report, npuc_ctx_errmsg(r->ctx));
        npuc_model_close(outm);
        return;
    }
    for (size_t i = 0, j = 0; i < r->sum.nrecords; i++) {
        npuc_tensor_record *d = &r->sum.records[i];
        if (!d->has_error || d->hist) continue;
        /* Both lists follow the input's order: look ahead from the last match. */
        for (size_t k = 0; k < cmp.nrecords; k++) {
            npuc_tensor_record *c = &cmp.records[(j + k) % cmp.nrecords];
            if (c->hist && strcmp(c->name, d->name) == 0) {
                d->hist = c->hist;
                c->hist = NULL;
                j = (j + k + 1) % cmp.nrecords;
                break;
            }
        }
    }
    npuc_summary_free(&cmp);
    npuc_model_close(outm);
}

static int finish(cli_pass_run *r) {
    attach_histograms(r);
    unsigned flags = CLI_RESULT_WARNINGS;
    if (r->pass->flags & NPUC_PASS_NO_SQNR_WARN) flags |= CLI_RESULT_NO_SQNR_WARN;
    return cli_emit_result(r->ctx, &r->a, &r->sum, r->in, r->out, r->cmdline, r->params, r->a.report, flags);
}

static int run_pass(cli_pass_run *r, const cli_pass_hook *h, int argc, char **argv) {
    int rc;
    npuc_status st;
    if (npuc_ctx_new(&r->ctx) != NPUC_OK || npuc_pass_optset_new(r->ctx, r->pass, &r->opts) != NPUC_OK) {
        cli_error("out of memory");
        return CLI_EXIT_FAIL;
    }
    if ((rc = parse(r, h, argc, argv)) != CLI_CONTINUE) return rc;
    if ((st = npuc_pass_validate(r->ctx, r->opts)) != NPUC_OK) return cli_usage_error(r->cmd, "%s", npuc_ctx_errmsg(r->ctx));
    r->in = r->a.pos[0];
    r->io = npuc_pass_io_defaults();
    cli_write_opts(&r->a, &r->io.write);
    if (h && h->prepare && (rc = h->prepare(r)) != CLI_CONTINUE) return rc;
    /* An unwritable --report fails before any work (cli_outputs.h). */
    if ((rc = cli_side_probe(r->a.report, "report")) != CLI_CONTINUE) return rc;
    if (r->a.report && (rc = cli_check_report_name(r->a.report, 1, "report")) != CLI_EXIT_OK) return rc;
    npuc_ctx_set_threads(r->ctx, r->a.jobs);
    npuc_ctx_set_policy(r->ctx, &r->a.policy);
    if ((rc = cli_open_model(r->ctx, &r->a, r->in, &r->m)) != CLI_EXIT_OK) return rc;

    char tag[64] = "";
    char *out_alloc = NULL;
    if (npuc_pass_output_tag(r->opts, tag, sizeof tag) == 0 || r->a.output) {
        rc = cli_output_path(&r->a, r->m, tag, &r->io.write, &r->out, &out_alloc);
        if (rc != CLI_EXIT_OK) return rc;
    }
    if (r->dry_run) r->out = NULL;
    cli_printer_init(&r->printer, &r->a, r->m, r->pass->verb);
    cli_printer_watch(&r->printer, r->ctx);
    if (h) r->printer.extra = h->line_extra;
    if (r->dry_run) {
        r->printer.text = 0;
        r->printer.progress = cli_progress_enabled(&r->a);
    }
    r->io.on_tensor = cli_printer_on_tensor;
    r->io.user = &r->printer;
    st = npuc_pass_run(r->ctx, r->opts, r->m, r->out, &r->io, &r->sum);
    npuc_ctx_set_progress(r->ctx, NULL, NULL); /* the report's reads draw no bar */
    if (r->printer.bar) cli_progress_erase();
    cli_warn_ctx(&r->a, r->ctx); /* the library's notes (a pairs file's skipped entries, a writer's) */
    npuc_status gate = NPUC_OK;
    if (st == NPUC_ERR_GATE) { /* nothing was published, but the results are reported */
        gate = st;
        st = NPUC_OK;
        r->out = NULL;
    }
    if (st == NPUC_OK) st = npuc_pass_params_json(r->ctx, r->opts, &r->params);
    if (st != NPUC_OK) {
        fflush(stdout);
        rc = cli_fail(r->ctx, st);
    } else if (gate != NPUC_OK) {
        /* The gate's message, kept while the report is written on the same
         * context; the hook's own finish wants the plan a gated run does
         * not hand back, so the common table and report stand in for it. */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", npuc_ctx_errmsg(r->ctx));
        rc = h && h->finish && r->plan ? h->finish(r) : finish(r);
        fflush(stdout);
        cli_error("%s", msg);
        if (rc == CLI_EXIT_OK) rc = cli_exit_code(gate);
    } else {
        rc = h && h->finish ? h->finish(r) : finish(r);
    }
    r->out = NULL;
    free(out_alloc);
    return rc;
}

static int run(int argc, char **argv) {
    cli_pass_run r;
    memset(&r, 0, sizeof r);
    r.cmd = cli_pass_command(argv[0]);
    r.pass = npuc_pass_find(argv[0]);
    r.cmdline = cli_join_command(argc, argv);
    const cli_pass_hook *h = hook_of(r.pass);
    int rc = run_pass(&r, h, argc, argv);
    if (h && h->done) h->done(&r);
    npuc_summary_free(&r.sum);
    free(r.params);
    free(r.cmdline);
    npuc_model_close(r.m);
    npuc_pass_optset_free(r.opts);
    npuc_ctx_free(r.ctx);
    cli_args_free(&r.a);
    return cli_finish_stdout(rc == CLI_CONTINUE ? CLI_EXIT_OK : rc);
}

/* ------------------------------------------------------------ npuc help --options */

int cli_pass_print_options(int json) {
    if (json) {
        npuc_ctx *ctx;
        char *doc = NULL;
        if (npuc_ctx_new(&ctx) != NPUC_OK) {
            cli_error("out of memory");
            return CLI_EXIT_FAIL;
        }
        npuc_status st = npuc_pass_options_json(ctx, &doc);
        int rc = st == NPUC_OK ? CLI_EXIT_OK : cli_fail(ctx, st);
        if (doc) printf("%s\n", doc);
        free(doc);
        npuc_ctx_free(ctx);
        return rc;
    }
    static const char *const TYPES[] = {"flag", "integer", "number", "string", "list"};
    for (size_t i = 0; i < npuc_pass_count(); i++) {
        const npuc_pass *p = npuc_pass_at(i);
        printf("%s%s:\n", i ? "\n" : "", p->name);
        for (size_t k = 0; k < p->noptions; k++) {
            const npuc_pass_option *o = &p->options[k];
            char flag[64], range[96] = "";
            snprintf(flag, sizeof flag, "--%s%s%s", o->flag, o->type == NPUC_OPT_BOOL ? "" : " ",
                     o->type == NPUC_OPT_BOOL ? "" : o->metavar);
            if (o->type == NPUC_OPT_INT || o->type == NPUC_OPT_NUM)
                snprintf(range, sizeof range, " %c%g, %g%c", (o->flags & NPUC_OPT_LO_OPEN) ? '(' : '[', o->lo, o->hi,
                         (o->flags & NPUC_OPT_HI_OPEN) ? ')' : ']');
            printf("  %-28s %-18s %s%s%s%s\n", flag, o->name,
                   (o->flags & NPUC_OPT_RULE) ? "rules" : TYPES[o->type], range, o->dflt ? ", default " : "",
                   o->dflt ? o->dflt : "");
        }
    }
    return CLI_EXIT_OK;
}
