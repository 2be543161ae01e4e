/*
 * cli_common.c - option parsing, error reporting and formatting shared by
 * every npuc command (see cli_common.h for the contracts).
 *
 * Option parsing is getopt_long with a table assembled per command from the
 * common options it accepts plus its own, so every command spells -o, -f,
 * -j, --layout and --json the same way and reports a bad flag the same way.
 * getopt's own messages are switched off (opterr = 0): they do not follow the
 * `npuc: error:` convention and do not name the command's --help.
 */
#include "cli_common.h"
#include "cli_progress.h"
#include "cli_outputs.h"

#include <errno.h>
#include <math.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* How many common options cli_parse may add (help ... max-output-error, 18
 * today); the option tables are sized with it. */
#define CLI_COMMON_MAX 24

/* getopt values of the common long-only options (below CLI_OPT_USER). */
enum {
    ID_PROGRESS = 0x7ff, ID_LAYOUT = 0x800, ID_JSON = 0x801, ID_REPORT = 0x802, ID_DEFLATE = 0x803,
    ID_STRICT = 0x804, ID_ACCEPT_GUESSES = 0x805, ID_MIN_SQNR = 0x806, ID_MIN_LAYER_SQNR = 0x807,
    ID_MAX_MEMORY = 0x808, ID_MAX_SHARD = 0x809, ID_CKPT_FORMAT = 0x80a, ID_MAX_OUT_ERROR = 0x80b,
    ID_GGUF_TYPE = 0x80c, ID_GGUF_PURE = 0x80d, ID_IMATRIX = 0x80e, ID_ONNX_INT4 = 0x80f
};

/* ------------------------------------------------------------ messages */

int cli_parse_out_error(const char *s, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !isfinite(v) || v < 0) return -1;
    *out = v;
    return 0;
}

static void vmsg(const char *prefix, const char *fmt, va_list ap) {
    fflush(stdout); /* keep stdout and stderr in order on a shared terminal */
    /* One write for the whole line (stderr is unbuffered): a signal's
     * "interrupted" line (main.c) then never lands inside another line. */
    char line[8192];
    int k = snprintf(line, sizeof line, "npuc: %s", prefix);
    if (k < 0 || (size_t)k >= sizeof line) k = 0;
    int m = vsnprintf(line + k, sizeof line - (size_t)k - 1, fmt, ap);
    size_t n = m < 0 ? (size_t)k : (size_t)k + (size_t)m;
    if (n > sizeof line - 2) n = sizeof line - 2; /* cut: longer than any message */
    line[n++] = '\n';
    fwrite(line, 1, n, stderr);
}

void cli_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vmsg("error: ", fmt, ap);
    va_end(ap);
}

void cli_warn(const cli_args *a, const char *fmt, ...) {
    if (a && a->quiet) return;
    va_list ap;
    va_start(ap, fmt);
    vmsg("warning: ", fmt, ap);
    va_end(ap);
}

void cli_print_formats(FILE *f) {
    fputs("Formats (from the library's format registry; docs/formats.md):\n", f);
    for (int id = 1; strcmp(npuc_format_name((npuc_format)id), "auto") != 0; id++) {
        fprintf(f, "  %-12s", npuc_format_name((npuc_format)id));
        const char *e = npuc_format_ext((npuc_format)id, 0);
        if (!e) fputs(" a folder (or its index file)", f);
        for (size_t i = 0; e; e = npuc_format_ext((npuc_format)id, ++i)) fprintf(f, "%s%s", i ? " " : " ", e);
        fputc('\n', f);
    }
}

void cli_warn_summary(const cli_args *a, const char *prefix, const npuc_summary *s) {
    size_t n;
    char **g = npuc_warnings_group((const char *const *)s->warnings, s->nwarnings, &n);
    const char *const *w = g ? (const char *const *)g : (const char *const *)s->warnings;
    if (!g) n = s->nwarnings; /* out of memory: ungrouped */
    for (size_t i = 0; i < n; i++) cli_warn(a, "%s%s%s", prefix ? prefix : "", prefix ? ": " : "", w[i]);
    npuc_warnings_free(g, g ? n : 0);
}

void cli_warn_ctx(const cli_args *a, const npuc_ctx *ctx) {
    size_t n = npuc_ctx_warning_count(ctx), i = 0;
    for (const char *w; (w = npuc_ctx_warning(ctx, i)) != NULL; i++) cli_warn(a, "%s", w);
    if (n > i) cli_warn(a, "... and %zu more warnings", n - i);
}

void cli_note(const cli_args *a, const char *fmt, ...) {
    if (a && a->quiet) return;
    va_list ap;
    va_start(ap, fmt);
    vmsg("", fmt, ap);
    va_end(ap);
}

int cli_usage_error(const cli_command *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vmsg("error: ", fmt, ap);
    va_end(ap);
    if (cmd) fprintf(stderr, "Try 'npuc %s --help'.\n", cmd->name);
    else fprintf(stderr, "Try 'npuc --help'.\n");
    return CLI_EXIT_USAGE;
}

int cli_exit_code(npuc_status st) {
    if (st == NPUC_OK) return CLI_EXIT_OK;
    if (st == NPUC_ERR_GATE) return CLI_EXIT_GATE;
    return npuc_status_is_input_error(st) ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
}

int cli_fail(const npuc_ctx *ctx, npuc_status st) {
    const char *msg = ctx ? npuc_ctx_errmsg(ctx) : "";
    cli_error("%s", msg && *msg ? msg : npuc_status_str(st));
    return cli_exit_code(st);
}

/* ------------------------------------------------------------ parsing */

/* The getopt_long tables being assembled for one command; sized for the
 * worst case before the first add. */
typedef struct opt_tables {
    struct option *lo; /* long options, zero-terminated */
    size_t nl;
    char *so; /* short options, ':' first so a missing value is reported as ':' */
    size_t ns;
} opt_tables;

/* Adds an option under its long name and, when short_name is a letter, its
 * short one; getopt returns val for either. */
static void add_opt(opt_tables *t, const char *name, int short_name, int has_arg, int val) {
    t->lo[t->nl].name = name;
    t->lo[t->nl].has_arg = has_arg ? required_argument : no_argument;
    t->lo[t->nl].flag = NULL;
    t->lo[t->nl].val = val;
    t->nl++;
    if (short_name) {
        t->so[t->ns++] = (char)short_name;
        if (has_arg) t->so[t->ns++] = ':';
        t->so[t->ns] = 0;
    }
}

/* The option text the user typed for getopt value val, for messages. */
static const char *opt_text(const struct option *lo, int val, const char *typed, char *buf,
                            size_t n) {
    if (typed && strncmp(typed, "--", 2) == 0) {
        size_t len = strcspn(typed, "=");
        snprintf(buf, n, "%.*s", (int)len, typed);
        return buf;
    }
    if (val > 0 && val < 128) {
        snprintf(buf, n, "-%c", val);
        return buf;
    }
    for (size_t i = 0; lo[i].name; i++)
        if (lo[i].val == val) {
            snprintf(buf, n, "--%s", lo[i].name);
            return buf;
        }
    return typed ? typed : "?";
}

static int add_layout(cli_args *a, const char *rule) {
    const char **p = realloc(a->layouts, (a->nlayouts + 1) * sizeof *p);
    if (!p) {
        cli_error("out of memory");
        return CLI_EXIT_FAIL;
    }
    a->layouts = p;
    a->layouts[a->nlayouts++] = rule;
    return CLI_CONTINUE;
}

int cli_parse(const cli_command *cmd, int argc, char **argv, unsigned common,
              const cli_option *extra, cli_opt_fn fn, void *ud, int min_pos, int max_pos,
              cli_args *a) {
    memset(a, 0, sizeof *a);
    a->cmd = cmd;
    size_t nextra = 0;
    while (extra && extra[nextra].name) nextra++;

    a->policy = npuc_policy_defaults();
    /* CLI_COMMON_MAX: room for every common option added below */
    opt_tables t = {calloc(CLI_COMMON_MAX + nextra + 1, sizeof(struct option)), 0,
                    malloc(3 * (CLI_COMMON_MAX + nextra) + 2), 0};
    if (!t.lo || !t.so) {
        free(t.lo);
        free(t.so);
        cli_error("out of memory");
        return CLI_EXIT_FAIL;
    }
    t.so[t.ns++] = ':';
    t.so[t.ns] = 0;
    add_opt(&t, "help", 'h', 0, 'h');
    add_opt(&t, "quiet", 'q', 0, 'q');
    add_opt(&t, "verbose", 'v', 0, 'v');
    if (common & CLI_OPT_OUTPUT) add_opt(&t, "output", 'o', 1, 'o');
    if (common & CLI_OPT_FORCE) add_opt(&t, "force", 'f', 0, 'f');
    if (common & CLI_OPT_JOBS) add_opt(&t, "jobs", 'j', 1, 'j');
    if (common & CLI_OPT_LAYOUT) add_opt(&t, "layout", 0, 1, ID_LAYOUT);
    if (common & CLI_OPT_JSON) add_opt(&t, "json", 0, 0, ID_JSON);
    if (common & CLI_OPT_REPORT) add_opt(&t, "report", 0, 1, ID_REPORT);
    if (common & CLI_OPT_DEFLATE) add_opt(&t, "deflate", 0, 1, ID_DEFLATE);
    if (common & CLI_OPT_DEFLATE) add_opt(&t, "max-shard-size", 0, 1, ID_MAX_SHARD);
    if (common & CLI_OPT_DEFLATE) add_opt(&t, "format", 0, 1, ID_CKPT_FORMAT);
    if (common & CLI_OPT_DEFLATE) add_opt(&t, "gguf-type", 0, 1, ID_GGUF_TYPE);
    if (common & CLI_OPT_DEFLATE) add_opt(&t, "gguf-pure", 0, 0, ID_GGUF_PURE);
    if (common & CLI_OPT_DEFLATE) add_opt(&t, "imatrix", 0, 1, ID_IMATRIX);
    if (common & CLI_OPT_DEFLATE) add_opt(&t, "onnx-int4", 0, 1, ID_ONNX_INT4);
    if (common & CLI_OPT_MAX_MEMORY) add_opt(&t, "max-memory", 0, 1, ID_MAX_MEMORY);
    if (common & CLI_OPT_PROGRESS) add_opt(&t, "progress", 0, 0, ID_PROGRESS);
    if (common & CLI_OPT_POLICY) {
        add_opt(&t, "strict", 0, 0, ID_STRICT);
        add_opt(&t, "accept-guesses", 0, 0, ID_ACCEPT_GUESSES);
        add_opt(&t, "min-sqnr", 0, 1, ID_MIN_SQNR);
        add_opt(&t, "min-layer-sqnr", 0, 1, ID_MIN_LAYER_SQNR);
        add_opt(&t, "max-output-error", 0, 1, ID_MAX_OUT_ERROR);
    }
    for (size_t i = 0; i < nextra; i++)
        add_opt(&t, extra[i].name, extra[i].short_name, extra[i].has_arg,
                extra[i].short_name ? extra[i].short_name : extra[i].id);
    const struct option *lo = t.lo;

    int rc = CLI_CONTINUE;
    char tb[128];
    optind = 0; /* glibc: full re-initialisation, so commands can be run repeatedly */
    opterr = 0;
    int c;
    while (rc == CLI_CONTINUE && (c = getopt_long(argc, argv, t.so, lo, NULL)) != -1) {
        const char *typed = optind > 0 && optind <= argc ? argv[optind - 1] : NULL;
        /* The command's own options first: one may reuse a letter of a
         * common option the command does not accept. */
        const cli_option *e = NULL;
        for (size_t i = 0; i < nextra && !e; i++)
            if ((extra[i].short_name ? extra[i].short_name : extra[i].id) == c) e = &extra[i];
        if (e) {
            rc = fn ? fn(a, ud, e->id, optarg)
                    : cli_usage_error(cmd, "unhandled option (a bug in npuc)");
            continue;
        }
        switch (c) {
        case 'h':
            cli_print_usage(cmd, stdout);
            rc = CLI_EXIT_OK;
            break;
        case 'q': a->quiet = 1; break;
        case 'v': a->verbose++; break;
        case 'o':
            a->output = optarg;
            cli_signal_set_target(optarg); /* named from the start ("interrupted" line, main.c) */
            break;
        case 'f': a->force = 1; break;
        case 'j': {
            long j;
            if (cli_parse_long(optarg, 0, 4096, &j) != 0)
                rc = cli_usage_error(cmd, "-j: expected a thread count 0..4096, got '%s'", optarg);
            else a->jobs = (int)j;
            break;
        }
        case ID_LAYOUT: rc = add_layout(a, optarg); break;
        case ID_JSON: a->json = 1; break;
        case ID_PROGRESS: a->progress = 1; break;
        case ID_REPORT: a->report = optarg; break;
        case ID_DEFLATE:
            /* Checked here against the option's declaration (the HDF5 row),
             * kept as text for cli_write_opts. */
            if ((rc = cli_set_write_opt(cmd, NULL, "deflate", "deflate", optarg)) == CLI_CONTINUE) a->deflate = optarg;
            break;
        case ID_MAX_SHARD:
            if (cli_parse_max_shard(optarg, &a->max_shard_size) != 0)
                rc = cli_usage_error(cmd, "--max-shard-size: expected a size such as 500M or 5G, got '%s'", optarg);
            break;
        /* GGUF outputs of every command that writes a model (formats/gguf:
         * docs/gguf.md); checked against the GGUF row's declarations. */
        case ID_GGUF_TYPE:
            if ((rc = cli_set_write_opt(cmd, NULL, "gguf-type", "gguf-type", optarg)) == CLI_CONTINUE)
                a->gguf_type = optarg;
            break;
        case ID_GGUF_PURE: a->gguf_pure = 1; break;
        case ID_IMATRIX:
            if ((rc = cli_set_write_opt(cmd, NULL, "imatrix", "imatrix", optarg)) == CLI_CONTINUE) a->imatrix = optarg;
            break;
        /* ONNX outputs: the ONNX row's "onnx-int4" (formats/onnx, docs/onnx.md). */
        case ID_ONNX_INT4:
            if ((rc = cli_set_write_opt(cmd, NULL, "onnx-int4", "onnx-int4", optarg)) == CLI_CONTINUE)
                a->onnx_int4 = optarg;
            break;
        case ID_CKPT_FORMAT:
            if ((rc = cli_set_write_opt(cmd, NULL, "format", "checkpoint-format", optarg)) == CLI_CONTINUE)
                a->ckpt_format = optarg;
            break;
        case ID_MAX_MEMORY:
            if (cli_parse_size(optarg, &a->max_memory) != 0 || a->max_memory == 0)
                rc = cli_usage_error(cmd, "--max-memory: expected a size such as 512M or 4G, got '%s'", optarg);
            break;
        case ID_STRICT: a->policy.strict = 1; break;
        case ID_ACCEPT_GUESSES: a->policy.accept_guesses = 1; break;
        case ID_MIN_SQNR:
        case ID_MIN_LAYER_SQNR: {
            char *end;
            double v = strtod(optarg, &end);
            if (end == optarg || *end || !isfinite(v))
                rc = cli_usage_error(cmd, "--%s: expected a number of dB, got '%s'",
                                     c == ID_MIN_SQNR ? "min-sqnr" : "min-layer-sqnr", optarg);
            else if (c == ID_MIN_SQNR) a->policy.min_sqnr = v;
            else a->policy.min_layer_sqnr = v;
            break;
        }
        case ID_MAX_OUT_ERROR:
            if (cli_parse_out_error(optarg, &a->policy.max_output_error) != 0)
                rc = cli_usage_error(cmd, "--max-output-error: expected a relative error >= 0 (0.05 for 5%%), got '%s'",
                                     optarg);
            break;
        case ':':
            rc = cli_usage_error(cmd, "option '%s' needs a value",
                                 opt_text(lo, optopt, typed, tb, sizeof tb));
            break;
        case '?':
            if (optopt != 0 && typed && strncmp(typed, "--", 2) == 0)
                rc = cli_usage_error(cmd, "option '%s' takes no value",
                                     opt_text(lo, optopt, typed, tb, sizeof tb));
            else if (optopt > 0 && optopt < 128)
                rc = cli_usage_error(cmd, "unknown option '-%c'", optopt);
            else
                rc = cli_usage_error(cmd, "unknown option '%s'",
                                     opt_text(lo, optopt, typed, tb, sizeof tb));
            break;
        default:
            rc = cli_usage_error(cmd, "unhandled option (a bug in npuc)");
            break;
        }
    }
    if (rc == CLI_CONTINUE) {
        a->pos = argv + optind;
        a->npos = argc - optind;
        if (a->npos < min_pos)
            rc = cli_usage_error(cmd, "missing %s", cmd->operand ? cmd->operand : "argument");
        else if (max_pos >= 0 && a->npos > max_pos)
            rc = cli_usage_error(cmd, "unexpected argument '%s'", a->pos[max_pos]);
    }
    free(t.lo);
    free(t.so);
    return rc;
}

int cli_parse_size(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    if (!s || !isdigit((unsigned char)*s)) return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return -1;
    unsigned shift = 0;
    switch (*end) {
    case 'K': case 'k': shift = 10; end++; break;
    case 'M': case 'm': shift = 20; end++; break;
    case 'G': case 'g': shift = 30; end++; break;
    case 'T': case 't': shift = 40; end++; break;
    default: break;
    }
    if ((*end == 'i' || *end == 'I') && shift) end++;
    if ((*end == 'B' || *end == 'b')) end++;
    if (*end || (shift && v > (UINT64_MAX >> shift))) return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

void cli_print_usage(const cli_command *c, FILE *f) {
    if (c->usage) fputs(c->usage, f);
    else c->help(c, f);
}

int cli_set_write_opt(const cli_command *cmd, npuc_write_opts *w, const char *flag, const char *key,
                      const char *arg) {
    npuc_write_opts probe = npuc_write_opts_defaults();
    npuc_ctx *c = NULL;
    if (npuc_ctx_new(&c) != NPUC_OK) {
        cli_error("out of memory");
        return CLI_EXIT_FAIL;
    }
    int rc = CLI_CONTINUE;
    if (npuc_write_opts_set(c, w ? w : &probe, key, arg) != NPUC_OK)
        rc = cli_usage_error(cmd, "--%s: %s", flag, npuc_ctx_errmsg(c));
    npuc_ctx_free(c);
    return rc;
}

void cli_write_opts(const cli_args *a, npuc_write_opts *w) {
    w->overwrite = a->force;
    /* Validated by cli_parse, so this cannot fail. */
    if (a->deflate) (void)npuc_write_opts_set(NULL, w, "deflate", a->deflate);
    if (a->ckpt_format) (void)npuc_write_opts_set(NULL, w, "checkpoint-format", a->ckpt_format);
    if (a->gguf_type) (void)npuc_write_opts_set(NULL, w, "gguf-type", a->gguf_type);
    if (a->gguf_pure) (void)npuc_write_opts_set(NULL, w, "gguf-pure", "yes");
    if (a->imatrix) (void)npuc_write_opts_set(NULL, w, "imatrix", a->imatrix);
    if (a->onnx_int4) (void)npuc_write_opts_set(NULL, w, "onnx-int4", a->onnx_int4);
    if (a->max_shard_size) {
        char v[32];
        snprintf(v, sizeof v, "%llu", (unsigned long long)a->max_shard_size);
        (void)npuc_write_opts_set(NULL, w, "max-shard-size", v);
    }
}

int cli_parse_max_shard(const char *s, uint64_t *out) {
    npuc_write_opts probe = npuc_write_opts_defaults();
    char v[32];
    if (cli_parse_size(s, out) != 0 || *out == 0) return -1;
    snprintf(v, sizeof v, "%llu", (unsigned long long)*out);
    return npuc_write_opts_set(NULL, &probe, "max-shard-size", v) == NPUC_OK ? 0 : -1;
}

void cli_args_free(cli_args *a) {
    if (!a) return;
    free(a->layouts);
    a->layouts = NULL;
    a->nlayouts = 0;
}

int cli_parse_long(const char *s, long lo, long hi, long *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* ------------------------------------------------------------ models */

int cli_ctx_new(const cli_args *a, npuc_ctx **ctx) {
    if (npuc_ctx_new(ctx) != NPUC_OK) {
        cli_error("out of memory");
        return CLI_EXIT_FAIL;
    }
    npuc_ctx_set_threads(*ctx, a ? a->jobs : 0);
    if (a && a->max_memory) npuc_ctx_set_max_memory(*ctx, a->max_memory);
    return CLI_EXIT_OK;
}

int cli_open_model(npuc_ctx *ctx, const cli_args *a, const char *path, npuc_model **m) {
    npuc_status st = npuc_model_open(ctx, path, NULL, m);
    if (st != NPUC_OK) return cli_fail(ctx, st);
    if (a && a->nlayouts) {
        st = npuc_model_apply_layout_rules(ctx, *m, a->layouts, a->nlayouts);
        if (st != NPUC_OK) {
            npuc_model_close(*m);
            *m = NULL;
            return cli_fail(ctx, st);
        }
    }
    return CLI_EXIT_OK;
}

/* ------------------------------------------------------------ formatting */

const char *cli_fmt_size(uint64_t b, char buf[CLI_FMT_MAX]) {
    static const char *const UNITS[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (b < 1024) {
        snprintf(buf, CLI_FMT_MAX, "%" PRIu64 " B", b);
        return buf;
    }
    double v = (double)b / 1024.0;
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, CLI_FMT_MAX, "%.2f %s", v, UNITS[u]);
    return buf;
}

const char *cli_fmt_count(uint64_t n, char buf[CLI_FMT_MAX]) {
    char digits[24];
    int len = snprintf(digits, sizeof digits, "%" PRIu64, n);
    int k = 0;
    for (int i = 0; i < len; i++) {
        if (i > 0 && (len - i) % 3 == 0) buf[k++] = ',';
        buf[k++] = digits[i];
    }
    buf[k] = 0;
    return buf;
}

const char *cli_fmt_shape(const npuc_tensor_info *t, char *buf, size_t n) {
    size_t k = 0;
    if (n == 0) return buf;
    buf[0] = 0;
    k += (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < t->rank && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%" PRId64, i ? "," : "", t->shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if it is not one
 * (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF). */
static size_t utf8_seq(const unsigned char *s) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned cp, min;
    if ((c & 0xe0) == 0xc0) { len = 2; cp = c & 0x1f; min = 0x80; }
    else if ((c & 0xf0) == 0xe0) { len = 3; cp = c & 0x0f; min = 0x800; }
    else if ((c & 0xf8) == 0xf0) { len = 4; cp = c & 0x07; min = 0x10000; }
    else return 0;
    for (size_t k = 1; k < len; k++) {
        if ((s[k] & 0xc0) != 0x80) return 0; /* also stops at the terminating NUL */
        cp = (cp << 6) | (s[k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

size_t cli_width(const char *s) {
    size_t w = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if ((*p & 0xc0) != 0x80) w++;
    return w;
}

void cli_print_padded(const char *s, size_t width) {
    size_t w = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        unsigned char c = *p;
        putchar(c < 0x20 || c == 0x7f ? '?' : c);
        if ((c & 0xc0) != 0x80) w++;
    }
    for (; w < width; w++) putchar(' ');
}

const char *cli_fmt_oneline(const char *s, size_t max_cols, char *buf, size_t n, int *cut) {
    const unsigned char *p = (const unsigned char *)s;
    size_t k = 0, cols = 0;
    if (cut) *cut = 0;
    if (n < 8) {
        if (n) buf[0] = 0;
        return buf;
    }
    /* Reserve room for "..." and the NUL. */
    size_t limit = n - 4;
    while (*p) {
        char piece[8];
        size_t plen, pcols;
        size_t sl = utf8_seq(p);
        if (sl == 1 && (*p < 0x20 || *p == 0x7f)) {
            const char *esc = *p == '\n' ? "\\n" : *p == '\t' ? "\\t" : *p == '\r' ? "\\r" : NULL;
            if (esc) plen = (size_t)snprintf(piece, sizeof piece, "%s", esc);
            else plen = (size_t)snprintf(piece, sizeof piece, "\\x%02x", *p);
            pcols = plen;
        } else if (sl == 0) {
            plen = (size_t)snprintf(piece, sizeof piece, "\\x%02x", *p);
            pcols = plen;
            sl = 1;
        } else {
            memcpy(piece, p, sl);
            plen = sl;
            pcols = 1;
        }
        if (cols + pcols > max_cols || k + plen > limit) {
            memcpy(buf + k, "...", 4);
            if (cut) *cut = 1;
            return buf;
        }
        memcpy(buf + k, piece, plen);
        k += plen;
        cols += pcols;
        p += sl;
    }
    buf[k] = 0;
    return buf;
}

json_t *cli_json_str(const char *s) {
    if (!s) return json_null();
    size_t n = strlen(s);
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, sl;
    while (i < n && (sl = utf8_seq(p + i)) != 0) i += sl;
    if (i == n) return json_stringn(s, n);
    /* Invalid bytes: each becomes U+FFFD (3 bytes). */
    char *b = malloc(3 * n + 1);
    if (!b) return NULL;
    size_t k = 0;
    for (i = 0; i < n;) {
        sl = utf8_seq(p + i);
        if (sl) {
            memcpy(b + k, p + i, sl);
            k += sl;
            i += sl;
        } else {
            memcpy(b + k, "\xef\xbf\xbd", 3);
            k += 3;
            i++;
        }
    }
    json_t *j = json_stringn(b, k);
    free(b);
    return j;
}

/* A container is written on one line when it is an element of an array (a
 * record, such as one tensor), holds only scalars, or is short; otherwise
 * one member per line.  The result reads like a table and greps well, and
 * is still plain JSON. */
#define JSON_INLINE_COLS 80
#define JSON_ONE_LINE (JSON_INDENT(0) | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY)

static int json_all_scalars(json_t *v) {
    size_t i;
    json_t *e;
    if (!json_is_array(v)) return 0;
    json_array_foreach(v, i, e) if (json_is_object(e) || json_is_array(e)) return 0;
    return 1;
}

static int json_is_short(json_t *v) {
    char *s = json_dumps(v, JSON_ONE_LINE);
    if (!s) return 0;
    int r = strlen(s) <= JSON_INLINE_COLS;
    free(s);
    return r;
}

static int json_pretty(json_t *v, int depth, int in_array) {
    int container = json_is_object(v) || json_is_array(v);
    if (!container || (depth > 0 && (in_array || json_all_scalars(v) || json_is_short(v))) ||
        (json_is_object(v) ? json_object_size(v) : json_array_size(v)) == 0)
        return json_dumpf(v, stdout, JSON_ONE_LINE);
    int r = 0;
    if (json_is_object(v)) {
        const char *k;
        json_t *e;
        size_t left = json_object_size(v);
        fputs("{\n", stdout);
        json_object_foreach(v, k, e) {
            json_t *ks = json_string(k);
            printf("%*s", 2 * (depth + 1), "");
            r |= !ks || json_dumpf(ks, stdout, JSON_ONE_LINE);
            json_decref(ks);
            fputs(": ", stdout);
            r |= json_pretty(e, depth + 1, 0);
            fputs(--left ? ",\n" : "\n", stdout);
        }
        printf("%*s}", 2 * depth, "");
    } else {
        size_t i, n = json_array_size(v);
        json_t *e;
        fputs("[\n", stdout);
        json_array_foreach(v, i, e) {
            printf("%*s", 2 * (depth + 1), "");
            r |= json_pretty(e, depth + 1, 1);
            fputs(i + 1 < n ? ",\n" : "\n", stdout);
        }
        printf("%*s]", 2 * depth, "");
    }
    return r ? -1 : 0;
}

int cli_json_print(json_t *doc) {
    if (!doc) {
        cli_error("out of memory");
        return CLI_EXIT_FAIL;
    }
    int r = json_pretty(doc, 0, 0);
    json_decref(doc);
    if (r != 0) {
        cli_error("writing JSON to stdout failed");
        return CLI_EXIT_FAIL;
    }
    putchar('\n');
    return CLI_EXIT_OK;
}

int cli_progress_enabled(const cli_args *a) {
    return !(a && a->quiet) && ((a && a->progress) || isatty(STDERR_FILENO));
}

int cli_finish_stdout(int rc) {
    if (fflush(stdout) != 0 || ferror(stdout)) {
        int e = errno;
        cli_error("writing to stdout: %s", e ? strerror(e) : "write error");
        return rc ? rc : CLI_EXIT_FAIL;
    }
    return rc;
}

char *cli_join_command(int argc, char **argv) {
    size_t n = 8;
    for (int i = 0; i < argc; i++) n += 4 * strlen(argv[i]) + 3;
    char *s = malloc(n), *p = s;
    if (!s) return NULL;
    p += sprintf(p, "npuc");
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int plain = *a != 0;
        for (const char *c = a; *c; c++)
            if (!(isalnum((unsigned char)*c) || strchr("-_./=:,+@%^", *c))) plain = 0;
        *p++ = ' ';
        if (plain) {
            p += sprintf(p, "%s", a);
            continue;
        }
        *p++ = '\'';
        for (const char *c = a; *c; c++) {
            if (*c == '\'') { memcpy(p, "'\\''", 4); p += 4; }
            else *p++ = *c;
        }
        *p++ = '\'';
        *p = 0;
    }
    return s;
}

int cli_emit_result(npuc_ctx *ctx, const cli_args *a, const npuc_summary *sum, const char *input,
                    const char *output, const char *cmdline, const char *params_json, const char *report,
                    unsigned flags) {
    npuc_report_info info = npuc_report_info_defaults();
    const char *inputs[1] = {input};
    info.command_line = cmdline;
    info.inputs = inputs;
    info.ninputs = 1;
    info.output = output;
    info.params_json = params_json;
    info.threads = npuc_ctx_threads(ctx);
    if (flags & CLI_RESULT_NO_SQNR_WARN) info.warn_sqnr_db = NAN;
    npuc_status st;
    if (a->json) {
        if ((st = npuc_report_write(ctx, stdout, NPUC_REPORT_JSON, sum, &info)) != NPUC_OK) return cli_fail(ctx, st);
    } else {
        char line[1024];
        npuc_report_totals_line(sum, line, sizeof line);
        printf("%s\n", line);
    }
    if (flags & CLI_RESULT_WARNINGS)
        cli_warn_summary(a, NULL, sum);
    if (report) {
        info.timestamp = 1;
        st = npuc_report_write_file(ctx, report, npuc_report_format_from_path(report), sum, &info);
        if (st != NPUC_OK) return cli_fail(ctx, st);
    }
    return CLI_EXIT_OK;
}

void cli_printer_init(cli_printer *p, const cli_args *a, const npuc_model *m, const char *verb) {
    memset(p, 0, sizeof *p);
    p->namew = 8;
    p->text = !a->json;
    p->progress = cli_progress_enabled(a) && a->json;
    p->verb = verb;
    int big = 0;
    for (size_t i = 0; i < npuc_model_count(m); i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        int w = (int)cli_width(t->name);
        if (w > p->namew) p->namew = w;
        p->total += t->nbytes;
        big |= t->nbytes >= CLI_BAR_MIN_TENSOR;
    }
    /* A large tensor takes seconds: the bar says how fast and how long. */
    p->bar = big && cli_progress_enabled(a);
    p->n = npuc_model_count(m);
    if (p->bar) p->progress = 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    p->t0 = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    if (p->namew > 48) p->namew = 48;
}

/* Inside a tensor: reading it is the first half of its bytes, writing its
 * result the second. */
static void printer_progress(void *user, npuc_progress_phase ph, uint64_t done, uint64_t total) {
    cli_printer *p = user;
    if (ph == NPUC_PROGRESS_READ) p->cur_in = total;
    const double in = (double)(p->cur_in ? p->cur_in : total), f = total ? (double)done / (double)total : 1;
    const uint64_t cur = (uint64_t)((ph == NPUC_PROGRESS_READ ? 0.5 * f : 0.5 + 0.5 * f) * in);
    cli_bar b = {1, p->t0, p->total, p->n};
    cli_bar_update(&b, p->ndone, p->done + cur, ph == NPUC_PROGRESS_READ ? "(reading)" : "(writing)");
}

void cli_printer_watch(cli_printer *p, npuc_ctx *ctx) {
    if (p->bar) npuc_ctx_set_progress(ctx, printer_progress, p);
}

void cli_printer_on_tensor(void *user, size_t i, size_t n, const npuc_tensor_record *r) {
    cli_printer *p = user;
    p->ndone = i + 1;
    p->n = n;
    p->cur_in = 0;
    if (p->bar) cli_progress_erase();
    if (p->text) {
        char line[1024];
        npuc_report_line(r, i, n, p->namew, line, sizeof line);
        fputs(line, stdout);
        if (p->extra) p->extra(r);
        putchar('\n');
        if (p->bar) fflush(stdout);
    }
    if (p->progress) {
        char line[128];
        snprintf(line, sizeof line, "[%zu/%zu] %s...", i + 1, n, p->verb);
        cli_progress_draw(line);
        if (i + 1 == n) cli_progress_erase();
    }
    if (p->bar) {
        cli_bar b = {1, p->t0, p->total, n};
        p->done += r->bytes_before;
        if (i + 1 < n) cli_bar_update(&b, i + 1, p->done, r->name);
    }
}

int cli_push(const char ***arr, size_t *n, const char *s) {
    const char **p = realloc(*arr, (*n + 1) * sizeof *p);
    if (!p) return -1;
    p[(*n)++] = s;
    *arr = p;
    return 0;
}

int cli_output_path(const cli_args *a, const npuc_model *m, const char *tag, npuc_write_opts *w,
                    const char **out, char **alloc) {
    *alloc = NULL;
    *out = a->output;
    if (!*out) {
        const char *in = a->pos[0], *dot = strrchr(in, '.'), *slash = strrchr(in, '/');
        if (!dot || (slash && dot < slash)) dot = in + strlen(in);
        /* A checkpoint (its directory or its index): "<dir>.<tag>", a directory too. */
        struct stat sb;
        size_t il = strlen(in);
        int is_dir = stat(in, &sb) == 0 && S_ISDIR(sb.st_mode);
        if (is_dir || (il > 11 && strcmp(in + il - 11, ".index.json") == 0)) {
            size_t stem = is_dir ? il : (slash ? (size_t)(slash - in) : 0);
            while (stem > 1 && in[stem - 1] == '/') stem--;
            size_t n = (stem ? stem : 1) + strlen(tag) + 8;
            char *s = malloc(n);
            if (!s) return CLI_EXIT_FAIL;
            snprintf(s, n, "%.*s.%s", stem ? (int)stem : 1, stem ? in : ".", tag);
            *out = *alloc = s;
            w->format = npuc_model_format(m);
            return CLI_EXIT_OK;
        }
        size_t stem = (size_t)(dot - in), n = stem + strlen(tag) + strlen(dot) + 16;
        char *s = malloc(n);
        if (!s) return CLI_EXIT_FAIL;
        snprintf(s, n, "%.*s.%s%s", (int)stem, in, tag, *dot ? dot : ".safetensors");
        *out = *alloc = s;
    } else if (cli_check_output_name(a->cmd, *out) != CLI_EXIT_OK) {
        return CLI_EXIT_USAGE; /* "-o x.onnx": no format claims it */
    }
    cli_signal_set_target(*out); /* the "interrupted" line names it (cli_outputs.h) */
    if (npuc_format_from_path(*out) == NPUC_FORMAT_AUTO) {
        /* --format compressed-tensors asks for a checkpoint directory: an
         * output without an extension is one, whatever the input's format. */
        int ct = a->ckpt_format && strcmp(a->ckpt_format, "npuc") != 0;
        w->format = ct ? npuc_format_find("checkpoint") : npuc_model_format(m);
    }
    return CLI_EXIT_OK;
}
