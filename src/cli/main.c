/*
 * main.c - the npuc command-line program: the table of subcommands, the
 * top-level --help and --version, and the exit-code table every command
 * follows.
 *
 * A new command is a cmd_<name>.c defining a `const cli_command cli_cmd_<name>`
 * (declared in cli_common.h) plus one line in COMMANDS below.  A new pass
 * needs nothing here: its command comes from its descriptor (cmd_pass.c).
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli_common.h"
#include "cli_outputs.h"

/* The commands in the order `npuc --help` lists them: a command of its own,
 * or (name only) the command made from the pass descriptor of that name
 * (cmd_pass.c).  Passes not named here follow at the end. */
typedef struct command_entry {
    const cli_command *cmd;
    const char *pass;
} command_entry;

static const command_entry COMMANDS[] = {
    {&cli_cmd_info, NULL},     {&cli_cmd_validate, NULL}, {&cli_cmd_convert, NULL}, {NULL, "quantize"},
    {&cli_cmd_decompress, NULL}, {&cli_cmd_run, NULL},    {&cli_cmd_batch, NULL},   {&cli_cmd_report, NULL},
    {NULL, "lowrank"},         {NULL, "fold-bn"},         {NULL, "prune"},          {NULL, "sparsify"},
    {&cli_cmd_calibrate, NULL},
    {&cli_cmd_version, NULL},
};
#define NCOMMANDS (sizeof COMMANDS / sizeof COMMANDS[0])

/* The full list, fixed commands and pass commands resolved. */
size_t cli_command_list(const cli_command *out[CLI_MAX_COMMANDS]) {
    size_t n = 0;
    for (size_t i = 0; i < NCOMMANDS; i++) {
        const cli_command *c = COMMANDS[i].cmd ? COMMANDS[i].cmd : cli_pass_command(COMMANDS[i].pass);
        if (c) out[n++] = c;
    }
    for (size_t i = 0; i < npuc_pass_count() && n < CLI_MAX_COMMANDS; i++) {
        const char *name = npuc_pass_at(i)->name;
        int listed = 0;
        for (size_t k = 0; k < NCOMMANDS; k++) listed |= COMMANDS[k].pass && strcmp(COMMANDS[k].pass, name) == 0;
        if (!listed) out[n++] = cli_pass_command(name);
    }
    return n;
}

void cli_print_main_usage(FILE *f) {
    fputs("Usage: npuc <command> [options] <inputs>\n"
          "       npuc <command> --help\n"
          "       npuc help --options [--json]\n"
          "       npuc --version | version [--json]\n"
          "\n"
          "Compresses neural-network weight files.\n"
          "\n",
          f);
    cli_print_formats(f);
    fputs("\nCommands:\n", f);
    const cli_command *cmds[CLI_MAX_COMMANDS];
    size_t n = cli_command_list(cmds);
    int w = 0;
    for (size_t i = 0; i < n; i++)
        if ((int)strlen(cmds[i]->name) > w) w = (int)strlen(cmds[i]->name);
    for (size_t i = 0; i < n; i++) fprintf(f, "  %-*s  %s\n", w, cmds[i]->name, cmds[i]->summary);
    fputs("\n"
          "Exit codes (every command):\n"
          "  0  success\n"
          "  1  failure: I/O error, out of memory, internal error\n"
          "  2  usage error or bad input: unknown flag, missing or malformed file,\n"
          "     an existing output without -f, non-finite values\n"
          "  3  the work was done but a quality gate failed\n"
          "  129, 130, 143  stopped by SIGHUP, SIGINT or SIGTERM (temporary files removed)\n"
          "\n"
          "Results go to stdout; errors, warnings and progress to stderr.\n"
          "Run 'npuc <command> --help' for a command's options; docs/cli.md is the manual.\n",
          f);
}

static const cli_command *find_command(const char *name) {
    const cli_command *cmds[CLI_MAX_COMMANDS];
    size_t n = cli_command_list(cmds);
    for (size_t i = 0; i < n; i++)
        if (strcmp(cmds[i]->name, name) == 0) return cmds[i];
    return NULL;
}

/* SIGINT, SIGTERM, SIGHUP: remove this run's temporary files (the
 * library's async-signal-safe registry), say so in one line on stderr and
 * exit 128 + the signal number (130, 143, 129), as a shell reports a
 * command killed by it.  Nothing half-written is left at an output path:
 * outputs appear only by rename.  A command that finishes the stop itself
 * (`npuc batch`: its partial summary) takes it through cli_signal_hook. */
int (*volatile cli_signal_hook)(int sig);
const char *volatile cli_signal_target;
volatile sig_atomic_t cli_signal_quiet;

/* write(2) only: no stdio, no allocation (async-signal-safe). */
static void say(const char *s) {
    size_t n = 0;
    while (s[n]) n++;
    while (n > 0) {
        ssize_t w = write(STDERR_FILENO, s, n);
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

static void on_signal(int sig) {
    int (*hook)(int) = cli_signal_hook;
    if (hook && hook(sig)) return; /* the command stops itself, soon */
    npuc_tempfiles_cleanup();
    if (!cli_signal_quiet) {
        const char *target = cli_signal_target;
        say(sig == SIGINT ? "npuc: interrupted (SIGINT)" : sig == SIGTERM ? "npuc: interrupted (SIGTERM)"
                                                                          : "npuc: interrupted (SIGHUP)");
        if (target) {
            say(" while writing ");
            say(target);
            say(": not written, temporary files removed\n");
        } else {
            say(": nothing was being written\n");
        }
    }
    _exit(128 + sig);
}

static void install_signal_handlers(void) {
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaddset(&sa.sa_mask, sigs[i]);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old;
        /* A signal ignored by whoever started us (nohup, `cmd &` in a
         * non-interactive shell for SIGINT) stays ignored. */
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        sigaction(sigs[i], &sa, NULL);
    }
}

int main(int argc, char **argv) {
    /* A file-size limit (ulimit -f) then fails the write with EFBIG, which
     * is reported and cleaned up like a full disk, instead of killing us
     * with a temporary file left behind. */
    signal(SIGXFSZ, SIG_IGN);
    install_signal_handlers();
    if (argc < 2) {
        cli_print_main_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    const char *arg = argv[1];
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
        cli_print_main_usage(stdout);
        return cli_finish_stdout(CLI_EXIT_OK);
    }
    if (strcmp(arg, "-V") == 0 || strcmp(arg, "--version") == 0) {
        return cli_finish_stdout(cli_print_version(0));
    }
    if (strcmp(arg, "help") == 0) {
        if (argc < 3) {
            cli_print_main_usage(stdout);
            return cli_finish_stdout(CLI_EXIT_OK);
        }
        if (strcmp(argv[2], "--options") == 0) {
            int json = argc > 3 && strcmp(argv[3], "--json") == 0;
            if (argc > 3 + json) return cli_usage_error(NULL, "unexpected argument '%s'", argv[3 + json]);
            return cli_finish_stdout(cli_pass_print_options(json));
        }
        const cli_command *c = find_command(argv[2]);
        if (!c) return cli_usage_error(NULL, "unknown command '%s'", argv[2]);
        cli_print_usage(c, stdout);
        return cli_finish_stdout(CLI_EXIT_OK);
    }
    int hidden = cli_hidden_command(argc, argv);
    if (hidden != CLI_CONTINUE) return hidden;
    if (arg[0] == '-') return cli_usage_error(NULL, "unknown option '%s' (a command comes first)", arg);
    const cli_command *c = find_command(arg);
    if (!c) return cli_usage_error(NULL, "unknown command '%s'", arg);
    return c->run(argc - 1, argv + 1);
}
