/*
 * cmd_validate.c - `npuc validate FILE [--deep]`: is this weight file sound?
 *
 * The structural check is the strict open every reader performs (header
 * grammar, offsets, overlaps, dtypes, shapes, names), so validate adds no
 * rules of its own: whatever npuc_model_open accepts, every other command
 * accepts too.  --deep then reads every payload once, one tensor at a time
 * (peak memory is the largest tensor, and nothing for mmapped safetensors),
 * and takes the NaN / Inf / subnormal / zero census with npuc_count_values
 * in each tensor's own dtype.  An npuc artifact's description is checked
 * against its stored tensors (npuc_artifact_check), and with --deep every
 * encoded tensor is decoded once.  Tensors attached to one channel set (a
 * bias, a BatchNorm, the next layer's input axis, where the file's own
 * evidence attaches them) must agree on its extent (npuc_model_check_consistency).
 * With --deep, a Keras model_config must still describe the weights
 * (npuc_model_check_graph: filters / units against each kernel).
 * NaN or Inf anywhere fails the check (exit 2);
 * subnormals are reported as a warning, since they are legal but slow on
 * some hardware and flush to zero on most accelerators.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_common.h"

static const char USAGE[] =
    "Usage: npuc validate FILE [options]\n"
    "\n"
    "Checks a weight file's structure as strictly as every npuc command reads it\n"
    "and prints \"ok: FILE: ...\".  With --deep, also reads every tensor and counts\n"
    "NaN, Inf, subnormal and zero values in each float tensor's own dtype.  An npuc\n"
    "artifact's description is checked against its stored tensors; with --deep every\n"
    "encoded tensor is decoded and must be finite.  Tensors attached to one channel\n"
    "set (a bias, a BatchNorm, the next layer's input channels, where the file's\n"
    "names or Keras model_config attach them) must have matching extents.  With\n"
    "--deep, a Keras model_config must still describe the weights: each layer's\n"
    "filters / units against its kernel (a malformed model_config is an error).\n"
    "\n"
    "Options:\n"
    "      --deep               read all tensor data and check the values, and the\n"
    "                           model_config against the weights\n"
    "      --json               print one JSON document (schema \"npuc.validate/1\")\n"
    "      --layout REGEX=NAME  layout override, as for 'npuc info' (repeatable)\n"
    "      --max-memory SIZE    decoding budget (default 256M; docs/artifact.md)\n"
    "  -q, --quiet              no warnings or progress on stderr\n"
    "  -v, --verbose            with --deep, a line for every tensor\n"
    "  -h, --help               show this help\n"
    "\n"
    "Exit codes: 0 valid (subnormals only warn), 1 I/O or memory failure,\n"
    "2 usage error, malformed file, inconsistent channel extents, or NaN/Inf\n"
    "values (--deep).\n";

static int run(int argc, char **argv);

const cli_command cli_cmd_validate = {
    .name = "validate",
    .summary = "check a weight file's structure (and its values with --deep)",
    .usage = USAGE,
    .operand = "FILE",
    .run = run,
};

enum { OPT_DEEP = CLI_OPT_USER };

static const cli_option OPTIONS[] = {
    {"deep", 0, 0, OPT_DEEP},
    {NULL, 0, 0, 0},
};

static int on_opt(cli_args *a, void *ud, int id, const char *arg) {
    (void)a, (void)arg;
    if (id == OPT_DEEP) *(int *)ud = 1;
    return CLI_CONTINUE;
}

typedef struct totals {
    uint64_t params, bytes;
    npuc_value_counts v;           /* over every tensor */
    size_t bad_tensors, sub_tensors; /* tensors with NaN/Inf, with subnormals */
    const char *first_bad, *first_sub;
} totals;

static int jset(json_t *o, const char *k, json_t *v) {
    if (!v) return -1;
    return json_object_set_new(o, k, v) == 0 ? 0 : -1;
}

/* Adds the five counts to o (a new object when o is NULL). */
static json_t *counts_json(json_t *o, const npuc_value_counts *c) {
    int own = !o;
    if (own && !(o = json_object())) return NULL;
    int err = 0;
    err |= jset(o, "nan", json_integer((json_int_t)c->nan));
    err |= jset(o, "inf", json_integer((json_int_t)c->inf));
    err |= jset(o, "subnormal", json_integer((json_int_t)c->subnormal));
    err |= jset(o, "zero", json_integer((json_int_t)c->zero));
    err |= jset(o, "finite", json_integer((json_int_t)c->finite));
    if (err) {
        if (own) json_decref(o);
        return NULL;
    }
    return o;
}

/* The part of the JSON document every outcome shares. */
static json_t *doc_new(const char *path, int deep) {
    json_t *doc = json_object();
    if (!doc) return NULL;
    int err = 0;
    err |= jset(doc, "schema", json_string("npuc.validate/1"));
    err |= jset(doc, "npuc_version", json_string(npuc_version()));
    err |= jset(doc, "file", cli_json_str(path));
    err |= jset(doc, "deep", json_boolean(deep));
    if (err) {
        json_decref(doc);
        return NULL;
    }
    return doc;
}

/* Prints the one-line account of a tensor's census. */
/* Scripts asked for JSON: they get a document for a failure too (the error
 * line is still printed on stderr).  Prints and releases *doc, if any. */
static void print_failure(json_t **doc, npuc_ctx *ctx) {
    if (!*doc) return;
    jset(*doc, "ok", json_false());
    jset(*doc, "error", cli_json_str(npuc_ctx_errmsg(ctx)));
    cli_json_print(*doc);
    *doc = NULL;
}

static void print_tensor_line(const char *tag, size_t i, const npuc_tensor_info *t,
                              const npuc_value_counts *c) {
    char shape[NPUC_MAX_RANK * 21 + 3], b[5][CLI_FMT_MAX];
    printf("%-10s [%zu] ", tag, i);
    cli_print_padded(t->name, 0);
    printf(" %s %s: %s NaN, %s Inf, %s subnormal, %s zero of %s %s\n", npuc_dtype_name(t->dtype),
           cli_fmt_shape(t, shape, sizeof shape), cli_fmt_count(c->nan, b[0]), cli_fmt_count(c->inf, b[1]),
           cli_fmt_count(c->subnormal, b[2]), cli_fmt_count(c->zero, b[3]), cli_fmt_count(t->numel, b[4]),
           t->numel == 1 ? "value" : "values");
}

/* Reads and counts every tensor.  Returns CLI_EXIT_OK, or the exit code of
 * a load failure (already reported).  tens (may be NULL) receives one JSON
 * entry per tensor. */
static int deep_check(npuc_ctx *ctx, npuc_model *m, const cli_args *a, totals *tot, json_t *tens) {
    size_t n = npuc_model_count(m);
    int progress = cli_progress_enabled(a) && !a->json;
    for (size_t i = 0; i < n; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        if (progress) fprintf(stderr, "\r[%zu/%zu] %.60s\033[K", i + 1, n, t->name);
        const void *p;
        npuc_status st = npuc_model_data(ctx, m, i, &p);
        if (st != NPUC_OK) {
            if (progress) fputs("\r\033[K", stderr);
            return cli_fail(ctx, st);
        }
        npuc_value_counts c;
        st = npuc_count_values(p, t->dtype, t->numel, &c);
        npuc_model_release(m, i);
        if (st != NPUC_OK) {
            if (progress) fputs("\r\033[K", stderr);
            cli_error("%s: tensor '%s': cannot count values of dtype %s", npuc_model_path(m),
                      t->name, npuc_dtype_name(t->dtype));
            return cli_exit_code(st);
        }
        npuc_value_counts_add(&tot->v, &c);
        if (c.nan || c.inf) {
            if (!tot->bad_tensors++) tot->first_bad = t->name;
        }
        if (c.subnormal) {
            if (!tot->sub_tensors++) tot->first_sub = t->name;
        }
        if (tens) {
            json_t *e = json_object();
            int err = !e || jset(e, "index", json_integer((json_int_t)i)) ||
                      jset(e, "name", cli_json_str(t->name)) ||
                      jset(e, "dtype", json_string(npuc_dtype_name(t->dtype))) ||
                      !counts_json(e, &c);
            if (err) json_decref(e);
            if (err || json_array_append_new(tens, e)) { /* append steals e */
                if (progress) fputs("\r\033[K", stderr);
                cli_error("out of memory");
                return CLI_EXIT_FAIL;
            }
        } else if (c.nan || c.inf) {
            if (progress) fputs("\r\033[K", stderr);
            print_tensor_line("non-finite", i, t, &c);
        } else if (c.subnormal) {
            if (progress) fputs("\r\033[K", stderr);
            print_tensor_line("subnormal", i, t, &c);
        } else if (a->verbose) {
            if (progress) fputs("\r\033[K", stderr);
            print_tensor_line("ok", i, t, &c);
        }
    }
    if (progress) fputs("\r\033[K", stderr);
    return CLI_EXIT_OK;
}

static int run(int argc, char **argv) {
    cli_args a;
    int deep = 0;
    npuc_ctx *ctx = NULL;
    npuc_model *m = NULL;
    json_t *doc = NULL, *tens = NULL;
    totals tot;
    memset(&tot, 0, sizeof tot);
    char b1[CLI_FMT_MAX], b2[CLI_FMT_MAX];

    int rc = cli_parse(&cli_cmd_validate, argc, argv, CLI_OPT_JSON | CLI_OPT_LAYOUT | CLI_OPT_MAX_MEMORY, OPTIONS,
                       on_opt, &deep, 1, 1, &a);
    if (rc != CLI_CONTINUE) goto done;
    const char *path = a.pos[0];
    if ((rc = cli_ctx_new(&a, &ctx)) != CLI_EXIT_OK) goto done;
    if (a.json && !(doc = doc_new(path, deep))) {
        cli_error("out of memory");
        rc = CLI_EXIT_FAIL;
        goto done;
    }
    if ((rc = cli_open_model(ctx, &a, path, &m)) != CLI_EXIT_OK) {
        print_failure(&doc, ctx);
        goto done;
    }

    size_t n = npuc_model_count(m);
    for (size_t i = 0; i < n; i++) {
        tot.params += npuc_model_tensor(m, i)->numel;
        tot.bytes += npuc_model_tensor(m, i)->nbytes;
    }
    /* An artifact's description must match what it stores (and, with
     * --deep, every encoded tensor must decode, to finite values). */
    npuc_artifact_info art;
    npuc_status ast = npuc_artifact_check(ctx, m, deep, &art);
    if (ast != NPUC_OK) {
        rc = cli_fail(ctx, ast);
        print_failure(&doc, ctx);
        goto done;
    }
    /* Tensors attached to one channel set must agree on its extent (a
     * pruned conv with its BatchNorm left at the old size fails here). */
    if ((ast = npuc_model_check_consistency(ctx, m)) != NPUC_OK) {
        rc = cli_fail(ctx, ast);
        print_failure(&doc, ctx);
        goto done;
    }
    /* A Keras configuration must still describe the weights (a structured
     * prune that left "filters" at the old count fails here). */
    if (deep && (ast = npuc_model_check_graph(ctx, m)) != NPUC_OK) {
        rc = cli_fail(ctx, ast);
        print_failure(&doc, ctx);
        goto done;
    }
    if (deep) {
        if (doc && !(tens = json_array())) {
            cli_error("out of memory");
            rc = CLI_EXIT_FAIL;
            goto done;
        }
        if ((rc = deep_check(ctx, m, &a, &tot, tens)) != CLI_EXIT_OK) {
            if (doc) {
                jset(doc, "ok", json_false());
                jset(doc, "error", cli_json_str(npuc_ctx_errmsg(ctx)));
                cli_json_print(doc);
                doc = NULL;
            }
            goto done;
        }
    }

    int bad = tot.bad_tensors > 0 || art.nonfinite > 0;
    const char *structure = npuc_model_format_opt(m, "structure"); /* HDF5: its tree */
    char msg[1024] = "";
    if (tot.bad_tensors)
        snprintf(msg, sizeof msg,
                 "%s: non-finite values in %zu %s (%" PRIu64 " NaN, %" PRIu64 " Inf; first: '%s')",
                 path, tot.bad_tensors, tot.bad_tensors == 1 ? "tensor" : "tensors", tot.v.nan,
                 tot.v.inf, tot.first_bad);
    else if (art.nonfinite)
        snprintf(msg, sizeof msg, "%s: %" PRIu64 " non-finite values in decoded tensors (first: '%s')", path,
                 art.nonfinite, art.first_nonfinite);

    if (doc) {
        int err = 0;
        err |= jset(doc, "ok", json_boolean(!bad));
        err |= jset(doc, "error", bad ? cli_json_str(msg) : json_null());
        err |= jset(doc, "format", json_string(npuc_format_name(npuc_model_format(m))));
        err |= jset(doc, "h5_style", structure ? json_string(structure) : json_null());
        err |= jset(doc, "file_size", json_integer((json_int_t)npuc_model_file_size(m)));
        err |= jset(doc, "n_tensors", json_integer((json_int_t)n));
        err |= jset(doc, "total_params", json_integer((json_int_t)tot.params));
        err |= jset(doc, "total_bytes", json_integer((json_int_t)tot.bytes));
        err |= jset(doc, "values", deep ? counts_json(NULL, &tot.v) : json_null());
        err |= jset(doc, "nonfinite_tensors", json_integer((json_int_t)tot.bad_tensors));
        err |= jset(doc, "subnormal_tensors", json_integer((json_int_t)tot.sub_tensors));
        json_t *aj = NULL;
        if (art.encoded)
            aj = json_pack("{s:I, s:o, s:o}", "encoded", (json_int_t)art.encoded, "decoded",
                           deep ? json_integer((json_int_t)art.decoded) : json_null(), "nonfinite",
                           deep ? json_integer((json_int_t)art.nonfinite) : json_null());
        err |= jset(doc, "artifact", art.encoded ? aj : json_null());
        err |= jset(doc, "tensors", tens ? tens : json_array());
        tens = NULL;
        if (err) {
            cli_error("out of memory");
            rc = CLI_EXIT_FAIL;
            goto done;
        }
        rc = cli_json_print(doc);
        doc = NULL;
        if (rc != CLI_EXIT_OK) goto done;
    } else {
        if (deep) {
            char c[4][CLI_FMT_MAX];
            printf("values: %s checked: %s NaN, %s Inf, %s subnormal (in %zu %s), %s zero\n",
                   cli_fmt_count(tot.v.nan + tot.v.inf + tot.v.finite, b1), cli_fmt_count(tot.v.nan, c[0]),
                   cli_fmt_count(tot.v.inf, c[1]), cli_fmt_count(tot.v.subnormal, c[2]), tot.sub_tensors,
                   tot.sub_tensors == 1 ? "tensor" : "tensors", cli_fmt_count(tot.v.zero, c[3]));
        }
        if (art.encoded) {
            printf("artifact: %zu encoded %s, description consistent with the stored tensors", art.encoded,
                   art.encoded == 1 ? "tensor" : "tensors");
            if (deep)
                printf("; %zu decoded: %" PRIu64 " NaN or Inf", art.decoded, art.nonfinite);
            putchar('\n');
        }
        if (!bad)
            printf("ok: %s: %zu %s, %s params, %s, %s%s%s%s\n", path, n,
                   n == 1 ? "tensor" : "tensors", cli_fmt_count(tot.params, b1),
                   cli_fmt_size(tot.bytes, b2), npuc_format_name(npuc_model_format(m)),
                   structure ? " (" : "", structure ? structure : "", structure ? ")" : "");
    }
    if (tot.sub_tensors)
        cli_warn(&a, "%s: %" PRIu64 " subnormal values in %zu %s (first: '%s')", path,
                 tot.v.subnormal, tot.sub_tensors, tot.sub_tensors == 1 ? "tensor" : "tensors",
                 tot.first_sub);
    if (bad) {
        cli_error("%s", msg);
        rc = CLI_EXIT_USAGE;
    }
done:
    json_decref(doc);
    json_decref(tens);
    npuc_model_close(m);
    npuc_ctx_free(ctx);
    cli_args_free(&a);
    return cli_finish_stdout(rc);
}
