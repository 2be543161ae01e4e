/*
 * cli_pass.h - what the generic pass command (cmd_pass.c) shares with the
 * per-pass hooks (cli_pass_hooks.c).
 *
 * Every pass command runs the same way: parse the flags the pass's option
 * table generates plus the common ones, check them, open the model, pick
 * the output name, run the pass through its descriptor, and print the
 * totals or the JSON report.  A hook adds what only one command has: extra
 * flags (fold-bn's --dry-run), checks before the run, a tail on each
 * tensor's line (lowrank's energy and FLOPs) or its own output at the end
 * (fold-bn's table of pairs).
 */
#ifndef NPUC_CLI_PASS_H
#define NPUC_CLI_PASS_H

#include "cli_common.h"

/* One run of a pass command. */
typedef struct cli_pass_run {
    const cli_command *cmd;
    const npuc_pass *pass;
    cli_args a;
    npuc_pass_optset *opts;
    npuc_ctx *ctx;
    npuc_model *m;
    const char *in, *out;  /* out: NULL when nothing is written */
    npuc_pass_io io;
    cli_printer printer;
    npuc_summary sum;
    char *cmdline;         /* "npuc <cmd> ..." for reports */
    char *params;          /* the params JSON (npuc_pass_params_json) */
    void *plan;            /* a pass's plan, when the hook asked for it (io.plan) */
    int dry_run;           /* fold-bn's --dry-run */
} cli_pass_run;

typedef struct cli_pass_hook {
    const char *pass;                 /* the pass it belongs to */
    const npuc_pass_option *options;  /* extra flags, listed in --help like the pass's */
    size_t noptions;
    /* An extra flag was given: CLI_CONTINUE or an exit code. */
    int (*on_option)(cli_pass_run *r, const npuc_pass_option *o, const char *arg);
    /* After the flags are checked, before the model is opened: CLI_CONTINUE
     * or an exit code. */
    int (*prepare)(cli_pass_run *r);
    /* Appends to a tensor's line, or NULL. */
    void (*line_extra)(const npuc_tensor_record *rec);
    /* Prints the result instead of cli_emit_result: an exit code. */
    int (*finish)(cli_pass_run *r);
    /* Frees what the hook kept in r (its plan), on every path; may be NULL. */
    void (*done)(cli_pass_run *r);
} cli_pass_hook;

extern const cli_pass_hook cli_pass_hook_lowrank, cli_pass_hook_fold_bn;

#endif
