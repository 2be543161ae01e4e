/*
 * cli_outputs.h - what the commands share about the files they write: the
 * check that an output's name is one a format claims, and side files
 * (reports, batch summaries) written whole or not at all through the
 * library's atomic files (npuc_atomic_file_*, model.h).
 */
#ifndef CLI_OUTPUTS_H
#define CLI_OUTPUTS_H

#include <signal.h>
#include <stdio.h>

#include "cli_common.h"

/* CLI_EXIT_OK when path's extension is one the format registry claims, or
 * path has no extension (the output then takes the input's format); else
 * prints the registry's `<path>: cannot tell the output format from the name
 * (use ...)` as a usage error and returns CLI_EXIT_USAGE.  A name like
 * "x.gguf" is never written as something else under that name. */
int cli_check_output_name(const cli_command *cmd, const char *path);

/* The checks on a report's path (`npuc report -o`, the pass commands' and
 * `run`'s --report; `what` is "report"): its extension is a report's (.txt
 * .md .csv .json .html .htm; a device or FIFO such as /dev/stdout passes),
 * an existing file needs force, and an existing file that a reader opens as
 * a model is refused even with force (issue 31 item 11).  CLI_EXIT_OK, or
 * prints the reason and returns CLI_EXIT_USAGE. */
int cli_check_report_name(const char *path, int force, const char *what);

/* A side file being written: stdio on this run's own temporary file. */
typedef struct cli_side_file {
    npuc_atomic_file *af;
    FILE *f;
} cli_side_file;

/* Opens a new temporary file for path (replacing path when committed);
 * NULL with errno set when it cannot. */
FILE *cli_side_open(const char *path, cli_side_file *s);
/* ok != 0: flushes, fsyncs and publishes the file at its path; ok == 0 or
 * any failure: removes it.  0, or -1 with errno set.  Always releases s. */
int cli_side_close(cli_side_file *s, int ok);

/* Tries a side file's path before any work, so a run never publishes its
 * artifact and then fails on the report or summary asked for: creates this
 * run's temporary file beside path and removes it again.  CLI_CONTINUE, or
 * prints "<path>: cannot write the <what> there: <reason>" and returns
 * CLI_EXIT_USAGE (a directory, a missing or read-only folder, no
 * permission) or CLI_EXIT_FAIL (anything else).  path NULL: CLI_CONTINUE. */
int cli_side_probe(const char *path, const char *what);

/* Called first by the CLI's SIGINT/SIGTERM/SIGHUP handler (main.c) with
 * the signal number; only async-signal-safe code.  Returning nonzero tells
 * the handler the command takes the stop over (it has set a flag its own
 * loop checks, and will exit 128 + sig itself); zero lets the handler remove
 * this process's temporary files, print its "interrupted" line and exit
 * 128 + sig.  `npuc batch` sets it to pass the signal on to its workers and
 * then write its partial summary.  NULL: nothing. */
extern int (*volatile cli_signal_hook)(int sig);
/* The output the handler names in its "npuc: interrupted (SIGINT) while
 * writing PATH" line; NULL: nothing named.  Set through
 * cli_signal_set_target (by cli_check_output_name, cli_output_path and
 * cli_check_report_name), which keeps its own copy of path. */
extern const char *volatile cli_signal_target;
void cli_signal_set_target(const char *path);
/* Nonzero: the handler prints nothing (a batch worker: its parent speaks). */
extern volatile sig_atomic_t cli_signal_quiet;

#endif
