/*
 * cli_common.h - what every `npuc <command>` shares: the command table entry,
 * option parsing, opening a model with --layout rules, error reporting, exit
 * codes, and number / size / JSON formatting.
 *
 * The CLI is a client of the public API only (<npuc/...>), like any other
 * program linking libnpuc.  A command is a cli_command with a run function;
 * main.c dispatches to it with argv starting at the command name.  A typical
 * run function:
 *
 *     static int run(int argc, char **argv) {
 *         cli_args a;
 *         int rc = cli_parse(&cli_cmd_info, argc, argv, CLI_OPT_JSON | CLI_OPT_LAYOUT,
 *                            NULL, NULL, NULL, 1, 1, &a);
 *         if (rc != CLI_CONTINUE) return rc;          // --help (0) or usage error (2)
 *         npuc_ctx *ctx; npuc_model *m;
 *         if ((rc = cli_ctx_new(&a, &ctx)) != CLI_EXIT_OK) goto done;
 *         if ((rc = cli_open_model(ctx, &a, a.pos[0], &m)) != CLI_EXIT_OK) goto done;
 *         ...results to stdout, diagnostics through cli_error/cli_warn/cli_note...
 *     done:
 *         npuc_model_close(m); npuc_ctx_free(ctx); cli_args_free(&a);
 *         return cli_finish_stdout(rc);
 *     }
 *
 * Conventions (docs/cli.md): results go to stdout, everything else to stderr;
 * `npuc: error: <message>` where a library message already starts with the
 * file's path; exit codes come from the table below and nowhere else.
 */
#ifndef NPUC_CLI_COMMON_H
#define NPUC_CLI_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>
#include <npuc/npuc.h>

#if defined(__GNUC__)
#define CLI_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CLI_PRINTF(a, b)
#endif

/* The exit-code table, the same for every command. */
enum {
    CLI_EXIT_OK = 0,    /* success */
    CLI_EXIT_FAIL = 1,  /* the machine failed: I/O, memory, a bug */
    CLI_EXIT_USAGE = 2, /* usage error or bad input (file, flag, pattern, values) */
    CLI_EXIT_GATE = 3   /* the work was done but a quality gate failed */
};

/* cli_parse()'s "go on and run the command" result; every other result is
 * an exit code to return at once. */
#define CLI_CONTINUE (-1)

typedef struct cli_command {
    const char *name;    /* "info" */
    const char *summary; /* one line for `npuc --help` */
    const char *usage;   /* the full text of `npuc <name> --help`, or NULL: help prints it */
    const char *operand; /* what a missing positional argument is called ("FILE") */
    int (*run)(int argc, char **argv); /* argv[0] is the command name */
    void (*help)(const struct cli_command *c, FILE *f); /* when usage is NULL */
} cli_command;

/* The commands, in the order `npuc --help` lists them (main.c holds the table). */
extern const cli_command cli_cmd_info;
extern const cli_command cli_cmd_validate;
extern const cli_command cli_cmd_convert;
extern const cli_command cli_cmd_decompress;
extern const cli_command cli_cmd_run;
extern const cli_command cli_cmd_batch;
extern const cli_command cli_cmd_report;
extern const cli_command cli_cmd_calibrate;
extern const cli_command cli_cmd_version;

/* Every command in `npuc --help` order, pass commands resolved (main.c);
 * returns the count (at most CLI_MAX_COMMANDS). */
#define CLI_MAX_COMMANDS 48
size_t cli_command_list(const cli_command *out[CLI_MAX_COMMANDS]);
/* The text of `npuc --help`. */
void cli_print_main_usage(FILE *f);
/* `npuc --version` (text) and `npuc version --json`: an exit code. */
int cli_print_version(int json);
/* The hidden generators `npuc __man [COMMAND]` and `npuc __completion`
 * (cmd_meta.c): their exit code, or CLI_CONTINUE when argv[1] is neither. */
int cli_hidden_command(int argc, char **argv);

/* The pass commands, made from the pass descriptors (cmd_pass.c): the one
 * for pass `name`, or NULL. */
const cli_command *cli_pass_command(const char *name);
/* `npuc help --options [--json]`: every pass's option table on stdout. */
int cli_pass_print_options(int json);

/* Prints a command's --help text to f. */
void cli_print_usage(const cli_command *c, FILE *f);

/* Common options a command may accept, as a bit set for cli_parse().
 * -h/--help, -q/--quiet and -v/--verbose are always accepted. */
enum {
    CLI_OPT_OUTPUT = 1u << 0, /* -o, --output FILE */
    CLI_OPT_FORCE = 1u << 1,  /* -f, --force: overwrite an existing output */
    CLI_OPT_JOBS = 1u << 2,   /* -j, --jobs N: worker threads, 0 = all cores */
    CLI_OPT_LAYOUT = 1u << 3, /* --layout REGEX=NAME, repeatable */
    CLI_OPT_JSON = 1u << 4,   /* --json */
    CLI_OPT_REPORT = 1u << 5, /* --report FILE */
    CLI_OPT_DEFLATE = 1u << 6, /* --deflate N: HDF5 deflate level 0..9 */
    CLI_OPT_POLICY = 1u << 7,  /* --strict --accept-guesses --min-sqnr DB --min-layer-sqnr DB
                                  --max-output-error F
                                  (npuc_policy; cli_parse starts from its defaults) */
    CLI_OPT_MAX_MEMORY = 1u << 8, /* --max-memory SIZE: the decoding budget (npuc_ctx_set_max_memory,
                                    set by cli_ctx_new) */
    CLI_OPT_PROGRESS = 1u << 9    /* --progress: draw progress even when stderr is not a terminal */
};

/* A command's own option.  id is handed back to the command's callback; use
 * values >= CLI_OPT_USER for options without a short letter. */
typedef struct cli_option {
    const char *name; /* long name without "--" */
    int short_name;   /* a letter, or 0 */
    int has_arg;      /* 0 or 1 */
    int id;           /* passed to the callback */
} cli_option;

#define CLI_OPT_USER 0x1000

/* Parsed command line.  Strings point into argv; layouts is owned. */
typedef struct cli_args {
    const cli_command *cmd;
    int quiet;    /* -q: no notes, warnings or progress on stderr */
    int progress; /* --progress: progress on stderr even when it is not a terminal */
    int verbose;  /* -v, counted */
    int force;    /* -f */
    int json;     /* --json */
    int jobs;     /* -j N (0 when not given: all cores) */
    const char *output;   /* -o FILE, or NULL */
    const char *report;   /* --report FILE, or NULL */
    const char *deflate;  /* --deflate N (checked), or NULL */
    uint64_t max_shard_size; /* --max-shard-size SIZE in bytes (checked), or 0 */
    const char *ckpt_format;  /* --format npuc|compressed-tensors (checked), or NULL */
    const char *gguf_type;    /* --gguf-type TYPE for GGUF outputs (checked), or NULL */
    int gguf_pure;            /* --gguf-pure */
    const char *imatrix;      /* --imatrix FILE for GGUF outputs (checked), or NULL */
    const char *onnx_int4;    /* --onnx-int4 dq|matmulnbits for ONNX outputs (checked), or NULL */
    const char **layouts; /* --layout rules in command-line order */
    size_t nlayouts;
    npuc_policy policy;   /* CLI_OPT_POLICY flags, else the defaults */
    uint64_t max_memory;  /* --max-memory in bytes, 0 when not given */
    char **pos;           /* positional arguments */
    int npos;
} cli_args;

/* A command's callback for its own options: returns CLI_CONTINUE to go on or
 * an exit code (after printing an error, usually via cli_usage_error). */
typedef int (*cli_opt_fn)(cli_args *a, void *ud, int id, const char *arg);

/* Parses argv (argv[0] = the command name) with getopt_long; options may come
 * before or after the positional arguments, "--" ends options.  `common`
 * selects the CLI_OPT_* options the command accepts, `extra` (terminated by
 * an entry with name NULL, or NULL itself) adds the command's own.  Checks
 * the positional count against [min_pos, max_pos] (max_pos < 0: unlimited).
 * Returns CLI_CONTINUE with *a filled, CLI_EXIT_OK after printing the usage
 * for --help, or CLI_EXIT_USAGE after printing `npuc: error: ...` and a hint.
 * On every result *a may be passed to cli_args_free(). */
int cli_parse(const cli_command *cmd, int argc, char **argv, unsigned common,
              const cli_option *extra, cli_opt_fn fn, void *ud, int min_pos, int max_pos,
              cli_args *a);
void cli_args_free(cli_args *a);

/* Prints `npuc: error: <message>` and `Try 'npuc <cmd> --help'.` to stderr
 * and returns CLI_EXIT_USAGE. */
int cli_usage_error(const cli_command *cmd, const char *fmt, ...) CLI_PRINTF(2, 3);
/* `npuc: error: <message>` on stderr. */
void cli_error(const char *fmt, ...) CLI_PRINTF(1, 2);
/* `npuc: warning: <message>` on stderr unless -q. */
void cli_warn(const cli_args *a, const char *fmt, ...) CLI_PRINTF(2, 3);
/* cli_warn for each warning the library left on ctx (npuc_ctx_warning). */
/* Prints "Formats ...:" and one line per registry format with its
 * extensions (npuc --help, npuc info --help). */
void cli_print_formats(FILE *f);
/* Prints s's warnings through cli_warn, grouped (npuc_warnings_group: one
 * line for warnings that differ only in the tensor they name); prefix, when
 * not NULL, goes before each ("<input>: "). */
void cli_warn_summary(const cli_args *a, const char *prefix, const npuc_summary *s);
void cli_warn_ctx(const cli_args *a, const npuc_ctx *ctx);
/* `npuc: <message>` on stderr unless -q (summaries, notes). */
void cli_note(const cli_args *a, const char *fmt, ...) CLI_PRINTF(2, 3);

/* The exit code for a library status: 0 for NPUC_OK, 2 for input errors
 * (npuc_status_is_input_error), 1 otherwise. */
int cli_exit_code(npuc_status st);
/* Prints the context's message for a failed call as `npuc: error: ...` and
 * returns cli_exit_code(st). */
int cli_fail(const npuc_ctx *ctx, npuc_status st);

/* Creates a context with a's -j setting; on failure prints and returns 1. */
int cli_ctx_new(const cli_args *a, npuc_ctx **ctx);
/* Opens path and applies a's --layout rules.  Returns CLI_EXIT_OK with *m
 * set, or prints the error and returns its exit code with *m NULL. */
int cli_open_model(npuc_ctx *ctx, const cli_args *a, const char *path, npuc_model **m);

/* The write options the common flags give: -f, --deflate, --max-shard-size
 * and --format.  The one
 * place --deflate reaches the library. */
void cli_write_opts(const cli_args *a, npuc_write_opts *w);

/* Parses --max-shard-size's SIZE (cli_parse_size, > 0, within the
 * checkpoint format's bound) into bytes; 0 or -1. */
int cli_parse_max_shard(const char *s, uint64_t *out);
/* Sets the write option key = arg in w (w NULL: only checks it) against the
 * format registry's declaration; a bad value is a usage error "--FLAG: "
 * followed by the registry's own message, the same for every command.
 * CLI_CONTINUE, or the exit code. */
int cli_set_write_opt(const cli_command *cmd, npuc_write_opts *w, const char *flag, const char *key,
                      const char *arg);

/* Parses a --max-output-error value, a finite relative error >= 0; 0, or -1. */
int cli_parse_out_error(const char *s, double *out);
/* Parses a decimal integer in [lo, hi]; returns 0, or -1 if it is not one. */
int cli_parse_long(const char *s, long lo, long hi, long *out);
/* Parses a size: digits with an optional K/M/G/T suffix (powers of 1024; "Ki", "MB" and
 * "MiB" spellings too).  Returns 0, or -1 on anything else or overflow. */
int cli_parse_size(const char *s, uint64_t *out);

/* Formatting into caller buffers (returned for use in printf arguments). */
#define CLI_FMT_MAX 48
/* "864 B", "12.34 KiB", "1.50 MiB", "2.00 GiB" (binary units, 2 decimals). */
const char *cli_fmt_size(uint64_t bytes, char buf[CLI_FMT_MAX]);
/* "2,690,109". */
const char *cli_fmt_count(uint64_t n, char buf[CLI_FMT_MAX]);
/* "[8,3,3,3]", "[]" for a scalar. */
const char *cli_fmt_shape(const npuc_tensor_info *t, char *buf, size_t n);

/* Terminal columns a UTF-8 string takes, counting one per code point. */
size_t cli_width(const char *s);
/* Prints s to stdout padded with spaces to `width` columns (left-aligned),
 * with control characters shown as '?'. */
void cli_print_padded(const char *s, size_t width);
/* Copies s into buf (n bytes, at least 8) for one-line display: control
 * characters and invalid UTF-8 bytes escaped (\n, \t, \xHH), cut at max_cols
 * columns (or when buf is full) on a character boundary with "..." appended;
 * *cut (may be NULL) tells whether it was cut. */
const char *cli_fmt_oneline(const char *s, size_t max_cols, char *buf, size_t n, int *cut);

/* A JSON string from s; invalid UTF-8 bytes become U+FFFD.  NULL s gives
 * JSON null.  Returns NULL only when out of memory. */
json_t *cli_json_str(const char *s);
/* Prints doc to stdout (2-space indent, key order kept, trailing newline)
 * and drops the reference.  Returns 0, or 1 after printing an error. */
int cli_json_print(json_t *doc);

/* "npuc <cmd> arg1 arg2 ..." for reports (arguments with spaces or quotes
 * are single-quoted); malloc'd, NULL when out of memory.  argv[0] is the
 * command name, as run functions receive it. */
char *cli_join_command(int argc, char **argv);

/* Appends s to a growing array of option values (repeatable flags). */
int cli_push(const char ***arr, size_t *n, const char *s);

/* Where a pass command writes: -o, else "<dir>/<stem>.<tag><ext>" beside
 * the input (".safetensors" when it has no extension; "<ckpt>.<tag>", a
 * checkpoint directory, for a checkpoint directory or its index).  When the name has
 * no known extension the output keeps m's format (w->format).  *alloc is
 * what the caller frees.  CLI_EXIT_OK, or CLI_EXIT_FAIL out of memory. */
int cli_output_path(const cli_args *a, const npuc_model *m, const char *tag, npuc_write_opts *w,
                    const char **out, char **alloc);

/* Per-tensor output of a pass command: a line per tensor on stdout (not
 * with --json), a progress line on stderr (a terminal, and --json). */
typedef struct cli_printer {
    int namew;
    int text;                 /* per-tensor lines on stdout */
    int progress;             /* a progress line on stderr */
    int bar;                  /* the byte bar (a tensor >= CLI_BAR_MIN_TENSOR, progress on) */
    double t0;                /* the bar's start (cli_progress.h) */
    uint64_t total, done;     /* the model's tensor bytes, those done */
    size_t n, ndone;          /* tensors, those done */
    uint64_t cur_in;          /* the tensor being read: its bytes (0: none seen) */
    const char *verb;         /* "quantizing", for the progress line */
    /* Appends to a tensor's line (before its newline), or NULL. */
    void (*extra)(const npuc_tensor_record *r);
} cli_printer;

/* Sets p up for m's tensors (name column width) and the command's flags. */
void cli_printer_init(cli_printer *p, const cli_args *a, const npuc_model *m, const char *verb);
/* Moves p's byte bar inside a large tensor too: sets ctx's progress
 * function (npuc_ctx_set_progress) when p draws the bar.  p must outlive
 * the runs made with ctx. */
void cli_printer_watch(cli_printer *p, npuc_ctx *ctx);
/* The passes' on_tensor callback; user is a cli_printer. */
void cli_printer_on_tensor(void *user, size_t i, size_t n, const npuc_tensor_record *r);

/* How a pass command reports its finished run (cli_emit_result). */
#define CLI_RESULT_WARNINGS 1u    /* print the summary's warnings on stderr */
#define CLI_RESULT_NO_SQNR_WARN 2u /* the report's low-SQNR warning does not apply (pruning) */

/* The end of every pass command: the npuc.report/1 JSON on stdout with
 * --json, else the totals line; the summary's warnings (flags); then the
 * --report file (report may be NULL), with a timestamp.  input/output/
 * cmdline/params_json describe the run in the report.  Returns the exit code
 * (CLI_EXIT_OK, or cli_fail's). */
int cli_emit_result(npuc_ctx *ctx, const cli_args *a, const npuc_summary *sum, const char *input,
                    const char *output, const char *cmdline, const char *params_json, const char *report,
                    unsigned flags);

/* 1 when progress lines should be drawn: stderr is a terminal or
 * --progress was given, and no -q. */
int cli_progress_enabled(const cli_args *a);

/* Flushes stdout; if that or an earlier write failed, prints an error and
 * returns 1 when rc was 0.  Otherwise returns rc. */
int cli_finish_stdout(int rc);

#endif
