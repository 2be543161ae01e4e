/*
 * cmd_meta.c - what the program says about itself: `npuc version [--json]`
 * (and `npuc --version`), and the two hidden generators the build runs,
 * `npuc __man [COMMAND]` (a man page in roff) and `npuc __completion`
 * (the bash completion script).
 *
 * The man pages and the completion are made from the same text --help
 * prints (each command's usage or its pass descriptor's option table,
 * cli_print_usage), so they cannot disagree with it: a page holds the help
 * text whole, and the completion offers every flag that text lists.
 * Option values come from the pass option tables (choices) and from
 * VALUES below, file extensions from the format registry
 * (npuc_build_info_json).  CMake runs both generators after linking and
 * installs share/man/man1/npuc*.1 and
 * share/bash-completion/completions/npuc; tests/cli/man_completion.sh
 * checks every flag of every command appears in --help, the page, the
 * completion and docs/cli.md.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_common.h"

/* ------------------------------------------------------------ version */

/* The build facts as a JSON object (owned by the caller), or NULL after
 * printing an error. */
static json_t *build_info(void) {
    npuc_ctx *ctx = NULL;
    char *s = NULL;
    json_t *doc = NULL;
    if (npuc_ctx_new(&ctx) == NPUC_OK && npuc_build_info_json(ctx, &s) == NPUC_OK) doc = json_loads(s, 0, NULL);
    if (!doc) cli_error("%s", ctx ? npuc_ctx_errmsg(ctx) : "out of memory");
    free(s);
    npuc_ctx_free(ctx);
    return doc;
}

static void print_list(const char *label, json_t *arr) {
    size_t i;
    json_t *v;
    printf("%s", label);
    json_array_foreach(arr, i, v) printf("%s%s", i ? " " : "", json_string_value(v));
    putchar('\n');
}

int cli_print_version(int json) {
    json_t *doc = build_info();
    if (!doc) return CLI_EXIT_FAIL;
    if (json) return cli_json_print(doc);
    json_t *simd = json_object_get(doc, "simd"), *libs = json_object_get(doc, "libraries");
    printf("npuc %s (git %s, %s build)\n", json_string_value(json_object_get(doc, "version")),
           json_string_value(json_object_get(doc, "git")), json_string_value(json_object_get(doc, "build_type")));
    print_list("SIMD compiled: ", json_object_get(simd, "compiled"));
    print_list("SIMD detected: ", json_object_get(simd, "detected"));
    printf("SIMD selected: %s (NPUC_FORCE_REF=1 forces ref)\n",
           json_string_value(json_object_get(simd, "selected")));
    printf("OpenMP: %s\n", json_string_value(json_object_get(doc, "openmp")));
    const char *k;
    json_t *v;
    printf("libraries:");
    json_object_foreach(libs, k, v) {
        /* OpenBLAS's configuration string is long: its first two words. */
        const char *s = json_string_value(v);
        int n = strcmp(k, "openblas") == 0 && strchr(s, ' ') && strchr(strchr(s, ' ') + 1, ' ')
                    ? (int)(strchr(strchr(s, ' ') + 1, ' ') - s) : (int)strlen(s);
        printf(" %s %.*s;", k, n, s);
    }
    putchar('\n');
    size_t i;
    printf("formats:");
    json_array_foreach(json_object_get(doc, "formats"), i, v) {
        printf("%s %s (", i ? "," : "", json_string_value(json_object_get(v, "name")));
        size_t e;
        json_t *x;
        json_array_foreach(json_object_get(v, "extensions"), e, x) printf("%s%s", e ? " " : "", json_string_value(x));
        printf("%s)", json_is_true(json_object_get(v, "write")) ? "" : ", read-only");
    }
    putchar('\n');
    print_list("encodings: ", json_object_get(doc, "encodings"));
    json_decref(doc);
    return CLI_EXIT_OK;
}

static const char VERSION_USAGE[] =
    "Usage: npuc version [--json]\n"
    "\n"
    "Prints the version, the git description and build type of this build, the SIMD\n"
    "kernels compiled in, detected on this CPU and selected, the OpenMP version, the\n"
    "versions of the linked libraries (HDF5, zlib, LAPACK, OpenBLAS, jansson,\n"
    "libfyaml), and the formats and encodings the registries hold.  `npuc --version`\n"
    "prints the same text.\n"
    "\n"
    "Options:\n"
    "      --json             print the npuc.version/1 JSON document (docs/cli.md)\n"
    "  -h, --help             this help\n";

static int run_version(int argc, char **argv) {
    cli_args a;
    int rc = cli_parse(&cli_cmd_version, argc, argv, CLI_OPT_JSON, NULL, NULL, NULL, 0, 0, &a);
    if (rc == CLI_CONTINUE) rc = cli_print_version(a.json);
    cli_args_free(&a);
    return cli_finish_stdout(rc);
}

const cli_command cli_cmd_version = {
    "version", "print the version and what this build contains", VERSION_USAGE, NULL, run_version, NULL,
};

/* ------------------------------------------------------------ the help text */

/* A command's --help text, malloc'd (NULL when out of memory). */
static char *help_text(const cli_command *c) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f) return NULL;
    cli_print_usage(c, f);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* ------------------------------------------------------------ man pages */

/* One line of text for roff: backslashes doubled, '-' as \-, and a line
 * that would start with a control character protected with \&. */
static void roff_line(const char *s, size_t n) {
    if (n && (s[0] == '.' || s[0] == '\'')) fputs("\\&", stdout);
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\') fputs("\\e", stdout);
        else if (s[i] == '-') fputs("\\-", stdout);
        else putchar(s[i]);
    }
    putchar('\n');
}

/* The help text as a page: "Usage:" lines become the SYNOPSIS, a line
 * "Title:" at column 0 a subsection, indented blocks (option lists,
 * examples) stay as they are (.nf), other lines are filled paragraphs. */
static void man_body(const char *text) {
    int in_usage = 0, nofill = 0;
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, "\n");
        const char *line = p;
        p += n + (p[n] == '\n');
        if (strncmp(line, "Usage: ", 7) == 0 || (in_usage && n && line[0] == ' ')) {
            if (!in_usage) fputs(".SH SYNOPSIS\n.nf\n", stdout);
            in_usage = 1;
            size_t skip = strncmp(line, "Usage: ", 7) == 0 ? 7 : 0;
            while (skip < n && line[skip] == ' ' && strncmp(line, "Usage: ", 7) != 0) skip++;
            roff_line(line + skip, n - skip);
            continue;
        }
        if (in_usage) {
            fputs(".fi\n.SH DESCRIPTION\n", stdout);
            in_usage = 0;
        }
        int indented = n && line[0] == ' ';
        if (indented && !nofill) {
            fputs(".RS 2\n.nf\n", stdout);
            nofill = 1;
        } else if (!indented && nofill) {
            fputs(".fi\n.RE\n", stdout);
            nofill = 0;
        }
        if (!n) {
            if (!nofill) fputs(".PP\n", stdout);
            else putchar('\n');
        } else if (!indented && line[n - 1] == ':' && n < 60 && !memchr(line, ' ', n - 1)) {
            fputs(".SS ", stdout);
            roff_line(line, n - 1);
        } else {
            roff_line(indented ? line + 2 : line, indented ? n - 2 : n);
        }
    }
    if (in_usage) fputs(".fi\n", stdout);
    if (nofill) fputs(".fi\n.RE\n", stdout);
}

static void man_header(const char *name, const char *summary) {
    char up[64];
    size_t i = 0;
    for (; name[i] && i + 1 < sizeof up; i++) up[i] = (char)(name[i] >= 'a' && name[i] <= 'z' ? name[i] - 32 : name[i]);
    up[i] = 0;
    printf(".TH \"%s\" 1 \"\" \"npuc %s\" \"User Commands\"\n.SH NAME\n", up, npuc_version());
    char line[256];
    snprintf(line, sizeof line, "%s - %s", name, summary);
    roff_line(line, strlen(line));
}

static int man_page(const char *name) {
    const cli_command *cmds[CLI_MAX_COMMANDS];
    size_t n = cli_command_list(cmds);
    if (!name) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        if (!f) return CLI_EXIT_FAIL;
        cli_print_main_usage(f);
        fclose(f);
        man_header("npuc", "compress neural-network weight files");
        man_body(buf);
        free(buf);
        fputs(".SH SEE ALSO\n", stdout);
        for (size_t i = 0; i < n; i++) printf("\\fBnpuc\\-%s\\fR(1)%s\n", cmds[i]->name, i + 1 < n ? "," : "");
        return CLI_EXIT_OK;
    }
    for (size_t i = 0; i < n; i++) {
        if (strcmp(cmds[i]->name, name) != 0) continue;
        char *text = help_text(cmds[i]);
        if (!text) return CLI_EXIT_FAIL;
        char full[64];
        snprintf(full, sizeof full, "npuc-%s", name);
        man_header(full, cmds[i]->summary);
        man_body(text);
        free(text);
        fputs(".SH SEE ALSO\n\\fBnpuc\\fR(1); docs/cli.md in the source tree\n", stdout);
        return CLI_EXIT_OK;
    }
    return cli_usage_error(NULL, "unknown command '%s'", name);
}

/* ------------------------------------------------------------ completion */

/* Values of the options of commands without a pass table (the pass
 * options' values come from their choices); "@FILES:ext ext" completes
 * file names with those extensions, "@MODELS" with the model formats'. */
static const struct {
    const char *cmd, *flag, *values;
} VALUES[] = {
    {"report", "--format", "text csv json md html"},
    {"report", "--sort", "file sqnr"},
    {"convert", "--dtype", "f32 f16 bf16"},
    {"convert", "--h5-style", "plain keras2 keras3"},
    {"convert", "--gguf-type",
     "f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q3_k q4_k q5_k q2_k q3_k_s q3_k_m q3_k_l q4_k_s q4_k_m q5_k_s q5_k_m q6_k"},
    {"convert", "--imatrix", "@FILES:dat gguf"},
    {"calibrate", "--imatrix-out", "@FILES:dat"},
    {"convert", "--external-data", "auto always"},
    {"*", "--onnx-int4", "dq matmulnbits"},
    {"quantize", "--range", "minmax percentile= mse entropy"},
    {"*", "--report", "@FILES:json csv md html txt"},
    {"report", "-o", "@FILES:json csv md html txt"},
    {"report", "--output", "@FILES:json csv md html txt"},
    {"report", "--baseline", "@FILES:json"},
    {"batch", "--summary", "@FILES:json"},
    {"batch", "--input", "@DIRS"},
    {"batch", "-i", "@DIRS"},
    {"batch", "-o", "@DIRS"},
    {"batch", "--output", "@DIRS"},
    {"*", "-o", "@MODELS"},
    {"*", "--output", "@MODELS"},
};

/* Every flag a help text lists: words starting with '-' at the start of an
 * option line ("  -b, --bits N", "      --json"). */
static void print_flags(const char *text) {
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, "\n");
        const char *q = p, *end = p + n;
        p = end + (*end == '\n');
        while (q < end && *q == ' ') q++;
        if (q == end || *q != '-' || q - (end - n) < 2) continue;
        while (q < end && *q == '-') {
            size_t w = strcspn(q, " ,=\n");
            if (q + w > end) w = (size_t)(end - q);
            if (w < 2) break; /* a dash in prose */
            printf(" %.*s", (int)w, q);
            q += w;
            if (q < end && *q == ',') q++;
            while (q < end && *q == ' ' && q[1] == '-') q++;
            if (q < end && *q == ' ' && q + 1 < end && q[1] != '-') break; /* the metavar */
        }
    }
}

static int completion(void) {
    json_t *doc = build_info();
    if (!doc) return CLI_EXIT_FAIL;
    const cli_command *cmds[CLI_MAX_COMMANDS];
    size_t n = cli_command_list(cmds);
    printf("# bash completion for npuc %s, generated by `npuc __completion` from the\n"
           "# commands' --help text and option tables (do not edit).\n\n",
           npuc_version());
    printf("_npuc_models='");
    size_t i, e;
    json_t *v, *x;
    int first = 1;
    json_array_foreach(json_object_get(doc, "formats"), i, v) json_array_foreach(json_object_get(v, "extensions"), e, x) {
        printf("%s%s", first ? "" : " ", json_string_value(x) + 1);
        first = 0;
    }
    json_decref(doc);
    printf("'\n\n");
    fputs("# Completes file names ending in one of the extensions in $1 (and folders).\n"
          "_npuc_files() {\n"
          "    local f ext\n"
          "    COMPREPLY=()\n"
          "    while IFS= read -r f; do\n"
          "        [[ -n $f ]] || continue\n"
          "        if [[ -d $f ]]; then COMPREPLY+=(\"$f/\"); continue; fi\n"
          "        for ext in $1; do\n"
          "            if [[ $f == *.$ext ]]; then COMPREPLY+=(\"$f\"); break; fi\n"
          "        done\n"
          "    done < <(compgen -f -- \"$cur\")\n"
          "    # a folder is completed further, a file ends the word\n"
          "    [[ ${#COMPREPLY[@]} -eq 1 && ${COMPREPLY[0]} != */ ]] || compopt -o nospace 2>/dev/null\n"
          "}\n\n"
          "_npuc() {\n"
          "    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cmd=${COMP_WORDS[1]} opts\n"
          "    if ((COMP_CWORD == 1)); then\n"
          "        COMPREPLY=($(compgen -W \"",
          stdout);
    for (i = 0; i < n; i++) printf("%s ", cmds[i]->name);
    fputs("help --help --version\" -- \"$cur\"))\n"
          "        return\n"
          "    fi\n"
          "    case $cmd in\n",
          stdout);
    for (i = 0; i < n; i++) {
        char *text = help_text(cmds[i]);
        if (!text) return CLI_EXIT_FAIL;
        printf("    %s) opts='", cmds[i]->name);
        print_flags(text);
        printf(" ';;\n");
        free(text);
    }
    fputs("    help) COMPREPLY=($(compgen -W \"", stdout);
    for (i = 0; i < n; i++) printf("%s ", cmds[i]->name);
    fputs("--options\" -- \"$cur\")); return;;\n"
          "    *) return;;\n"
          "    esac\n"
          "    case $cmd:$prev in\n",
          stdout);
    /* The pass options' choices, then the fixed table. */
    for (i = 0; i < npuc_pass_count(); i++) {
        const npuc_pass *p = npuc_pass_at(i);
        for (size_t k = 0; k < p->noptions; k++) {
            const npuc_pass_option *o = &p->options[k];
            if (o->choices) {
                printf("    %s:--%s) COMPREPLY=($(compgen -W \"", p->name, o->flag);
                for (const char *const *c = o->choices; *c; c++) printf("%s%s", c == o->choices ? "" : " ", *c);
                fputs("\" -- \"$cur\")); return;;\n", stdout);
            } else if (o->flags & NPUC_OPT_PATH) {
                printf("    %s:--%s) COMPREPLY=($(compgen -f -- \"$cur\")); return;;\n", p->name, o->flag);
            }
        }
    }
    for (i = 0; i < sizeof VALUES / sizeof VALUES[0]; i++) {
        const char *val = VALUES[i].values;
        printf("    %s:%s) ", strcmp(VALUES[i].cmd, "*") == 0 ? "*" : VALUES[i].cmd, VALUES[i].flag);
        if (strncmp(val, "@FILES:", 7) == 0) printf("_npuc_files '%s'; return;;\n", val + 7);
        else if (strcmp(val, "@MODELS") == 0) printf("_npuc_files \"$_npuc_models\"; return;;\n");
        else if (strcmp(val, "@DIRS") == 0) printf("COMPREPLY=($(compgen -d -- \"$cur\")); return;;\n");
        else printf("COMPREPLY=($(compgen -W \"%s\" -- \"$cur\")); return;;\n", val);
    }
    fputs("    esac\n"
          "    if [[ $cur == -* ]]; then\n"
          "        COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n"
          "        return\n"
          "    fi\n"
          "    case $cmd in\n"
          "    run|batch) if ((COMP_CWORD == 2)); then _npuc_files 'yaml yml'; return; fi;;\n"
          "    esac\n"
          "    _npuc_files \"$_npuc_models\"\n"
          "}\n"
          "complete -F _npuc npuc\n",
          stdout);
    return CLI_EXIT_OK;
}

int cli_hidden_command(int argc, char **argv) {
    if (strcmp(argv[1], "__man") == 0) {
        if (argc == 3 && strcmp(argv[2], "--list") == 0) { /* the pages to make: one per command */
            const cli_command *cmds[CLI_MAX_COMMANDS];
            size_t n = cli_command_list(cmds);
            for (size_t i = 0; i < n; i++) printf("%s\n", cmds[i]->name);
            return cli_finish_stdout(CLI_EXIT_OK);
        }
        if (argc > 3) return cli_usage_error(NULL, "usage: npuc __man [COMMAND]");
        return cli_finish_stdout(man_page(argc > 2 ? argv[2] : NULL));
    }
    if (strcmp(argv[1], "__completion") == 0) {
        if (argc > 2) return cli_usage_error(NULL, "usage: npuc __completion");
        return cli_finish_stdout(completion());
    }
    return CLI_CONTINUE;
}
