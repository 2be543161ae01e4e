/*
 * cli_outputs.c - output names and side files (cli_outputs.h).
 */
#include "cli_outputs.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* 1 when the last path component has an extension: a '.' after its
 * first character ("x.onnx"; not ".hidden", "dir.d/x"). */
static int has_extension(const char *path) {
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    const char *dot = strrchr(base, '.');
    return dot && dot > base && dot[1] != 0;
}

/* CLI_EXIT_OK, or prints "<path>: cannot write the <what> there: ..." and
 * returns CLI_EXIT_USAGE when the folder that would hold path does not
 * exist or is not a folder: a path the user typed wrong, exit 2 for every
 * output (-o, --report, --summary) alike (docs/cli.md, exit codes). */
static int check_parent(const char *path, const char *what) {
    size_t end = strlen(path);
    while (end > 1 && path[end - 1] == '/') end--; /* "out/": a folder output, its parent is the one */
    const char *slash = NULL;
    for (size_t k = 0; k < end; k++)
        if (path[k] == '/') slash = path + k;
    if (!slash) return CLI_EXIT_OK;
    size_t n = (size_t)(slash - path);
    while (n > 0 && path[n - 1] == '/') n--; /* "a//b" */
    if (n == 0) return CLI_EXIT_OK;           /* "/x" */
    char dir[4096];
    if (n >= sizeof dir) return CLI_EXIT_OK; /* the writer says what is wrong */
    memcpy(dir, path, n);
    dir[n] = 0;
    struct stat sb;
    if (stat(dir, &sb) != 0 && (errno == ENOENT || errno == ENOTDIR)) {
        cli_error("%s: cannot write the %s there: %s does not exist", path, what, dir);
        return CLI_EXIT_USAGE;
    }
    if (stat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
        cli_error("%s: cannot write the %s there: %s is not a folder", path, what, dir);
        return CLI_EXIT_USAGE;
    }
    return CLI_EXIT_OK;
}

void cli_signal_set_target(const char *path) {
    static char copy[4096];
    cli_signal_target = NULL; /* the handler never reads a half-copied name */
    if (!path) return;
    snprintf(copy, sizeof copy, "%s", path);
    cli_signal_target = copy;
}

int cli_check_output_name(const cli_command *cmd, const char *path) {
    struct stat sb;
    /* -o DIR: the writer decides, before the name's extension matters (a
     * file format says "is a directory", a checkpoint output may write
     * into an empty folder or replace a checkpoint with -f). */
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return CLI_EXIT_OK;
    if (check_parent(path, "output") != CLI_EXIT_OK) return CLI_EXIT_USAGE;
    cli_signal_set_target(path);
    if (npuc_format_from_path(path) != NPUC_FORMAT_AUTO || !has_extension(path)) return CLI_EXIT_OK;
    /* Ask the library: opening a writer for the name without a format
     * fails with the registry's message (it creates nothing). */
    npuc_ctx *ctx = NULL;
    if (npuc_ctx_new(&ctx) != NPUC_OK) return cli_usage_error(cmd, "%s: no format claims this extension", path);
    npuc_write_opts o = npuc_write_opts_defaults();
    o.overwrite = 1;
    npuc_writer *w = NULL;
    int rc = CLI_EXIT_OK;
    if (npuc_writer_open(ctx, path, &o, &w) != NPUC_OK) rc = cli_usage_error(cmd, "%s", npuc_ctx_errmsg(ctx));
    else rc = cli_usage_error(cmd, "%s: no format claims this extension", path);
    npuc_writer_abort(w);
    npuc_ctx_free(ctx);
    return rc;
}

/* The extensions a report may have: those npuc_report_format_from_path
 * reads (docs/report.md), and .txt for text. */
static const char *const REPORT_EXT[] = {".txt", ".md", ".csv", ".json", ".html", ".htm", NULL};

int cli_check_report_name(const char *path, int force, const char *what) {
    struct stat sb;
    const int exists = stat(path, &sb) == 0;
    /* /dev/stdout, a FIFO: not a file a report could be mistaken for. */
    if (exists && !S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode)) return CLI_EXIT_OK;
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    const char *dot = strrchr(base, '.');
    int ok = 0;
    for (size_t i = 0; dot && REPORT_EXT[i]; i++) ok |= strcmp(dot, REPORT_EXT[i]) == 0;
    if (!ok) {
        cli_error("%s: a %s is .txt, .md, .csv, .json or .html%s", path, what,
                  npuc_format_from_path(path) != NPUC_FORMAT_AUTO ? ", not a model file's extension" : "");
        return CLI_EXIT_USAGE;
    }
    if (!cli_signal_target) cli_signal_set_target(path); /* an artifact, when there is one, is named */
    if (!exists || !S_ISREG(sb.st_mode)) return CLI_EXIT_OK;
    /* An existing file: -f replaces a report, never a model renamed to a
     * report's extension (the readers decide, from its bytes). */
    npuc_ctx *ctx = NULL;
    npuc_model *m = NULL;
    if (npuc_ctx_new(&ctx) == NPUC_OK && npuc_model_open(ctx, path, NULL, &m) == NPUC_OK) {
        cli_error("%s: is a %s model, not a report: refusing to replace it with a %s (-f replaces reports "
                  "only; move the model away first)",
                  path, npuc_format_name(npuc_model_format(m)), what);
        npuc_model_close(m);
        npuc_ctx_free(ctx);
        return CLI_EXIT_USAGE;
    }
    npuc_ctx_free(ctx);
    if (!force) {
        cli_error("%s: exists (use -f to overwrite)", path);
        return CLI_EXIT_USAGE;
    }
    return CLI_EXIT_OK;
}

FILE *cli_side_open(const char *path, cli_side_file *s) {
    s->af = NULL;
    s->f = NULL;
    errno = 0;
    if (npuc_atomic_file_open(NULL, path, 1, &s->af) != NPUC_OK) {
        if (!errno) errno = EIO;
        return NULL;
    }
    int fd = dup(npuc_atomic_file_fd(s->af)); /* the original carries the lock */
    if (fd < 0 || !(s->f = fdopen(fd, "w"))) {
        int e = errno;
        if (fd >= 0) close(fd);
        npuc_atomic_file_abort(s->af);
        s->af = NULL;
        errno = e;
        return NULL;
    }
    return s->f;
}

int cli_side_close(cli_side_file *s, int ok) {
    int e = 0;
    if (s->f) {
        if (fflush(s->f) != 0 || ferror(s->f)) { ok = 0; e = errno; }
        if (fclose(s->f) != 0 && ok) { ok = 0; e = errno; }
        s->f = NULL;
    }
    if (!s->af) return ok ? 0 : -1;
    if (!ok) {
        npuc_atomic_file_abort(s->af);
    } else if (npuc_atomic_file_commit(s->af) != NPUC_OK) { /* fsyncs and publishes */
        ok = 0;
        e = errno;
    }
    s->af = NULL;
    if (!ok) errno = e ? e : EIO;
    return ok ? 0 : -1;
}

int cli_side_probe(const char *path, const char *what) {
    struct stat sb;
    cli_side_file sf;
    if (!path) return CLI_CONTINUE;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        cli_error("%s: cannot write the %s there: is a directory", path, what);
        return CLI_EXIT_USAGE;
    }
    if (check_parent(path, what) != CLI_EXIT_OK) return CLI_EXIT_USAGE;
    if (!cli_side_open(path, &sf)) {
        int e = errno;
        cli_error("%s: cannot write the %s there: %s", path, what, strerror(e));
        return e == ENOENT || e == ENOTDIR || e == EACCES || e == EROFS ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
    }
    cli_side_close(&sf, 0);
    return CLI_CONTINUE;
}
