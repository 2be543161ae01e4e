/*
 * main.c - the npuc command-line program: the table of subcommands, the
 * top-level --help and --version, and the exit-code table every command
 * follows.
 *
 * A new command is a cmd_<name>.c defining a `const cli_command cli_cmd_<name>`
 * (declared in cli_common.h) plus one line in COMMANDS below.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli_common.h"

static const cli_command *const COMMANDS[] = {
    &cli_cmd_info,
    &cli_cmd_validate,
    &cli_cmd_convert,
    &cli_cmd_quantize,
    &cli_cmd_decompress,
    &cli_cmd_run,
    &cli_cmd_batch,
    &cli_cmd_report,
    &cli_cmd_lowrank,
    &cli_cmd_fold_bn,
    &cli_cmd_prune, &cli_cmd_sparsify,
};
#define NCOMMANDS (sizeof COMMANDS / sizeof COMMANDS[0])

static void usage(FILE *f) {
    fputs("Usage: npuc <command> [options] <inputs>\n"
          "       npuc <command> --help\n"
          "       npuc --version\n"
          "\n"
          "Compresses neural-network weight files (safetensors, HDF5/Keras).\n"
          "\n"
          "Commands:\n",
          f);
    int w = 0;
    for (size_t i = 0; i < NCOMMANDS; i++)
        if ((int)strlen(COMMANDS[i]->name) > w) w = (int)strlen(COMMANDS[i]->name);
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-*s  %s\n", w, COMMANDS[i]->name, COMMANDS[i]->summary);
    fputs("\n"
          "Exit codes (every command):\n"
          "  0  success\n"
          "  1  failure: I/O error, out of memory, internal error\n"
          "  2  usage error or bad input: unknown flag, missing or malformed file,\n"
          "     an existing output without -f, non-finite values\n"
          "  3  the work was done but a quality gate failed\n"
          "\n"
          "Results go to stdout; errors, warnings and progress to stderr.\n"
          "Run 'npuc <command> --help' for a command's options; docs/cli.md is the manual.\n",
          f);
}

static const cli_command *find_command(const char *name) {
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(COMMANDS[i]->name, name) == 0) return COMMANDS[i];
    return NULL;
}

int main(int argc, char **argv) {
    /* A file-size limit (ulimit -f) then fails the write with EFBIG, which
     * is reported and cleaned up like a full disk, instead of killing us
     * with a temporary file left behind. */
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    const char *arg = argv[1];
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
        usage(stdout);
        return cli_finish_stdout(CLI_EXIT_OK);
    }
    if (strcmp(arg, "-V") == 0 || strcmp(arg, "--version") == 0) {
        printf("npuc %s\n", npuc_version());
        return cli_finish_stdout(CLI_EXIT_OK);
    }
    if (strcmp(arg, "help") == 0) {
        if (argc < 3) {
            usage(stdout);
            return cli_finish_stdout(CLI_EXIT_OK);
        }
        const cli_command *c = find_command(argv[2]);
        if (!c) return cli_usage_error(NULL, "unknown command '%s'", argv[2]);
        fputs(c->usage, stdout);
        return cli_finish_stdout(CLI_EXIT_OK);
    }
    if (arg[0] == '-') return cli_usage_error(NULL, "unknown option '%s' (a command comes first)", arg);
    const cli_command *c = find_command(arg);
    if (!c) return cli_usage_error(NULL, "unknown command '%s'", arg);
    return c->run(argc - 1, argv + 1);
}
