/*
 * cmd_info.c - `npuc info FILE`: what a weight file holds.
 *
 * Everything printed comes from the tensor table and metadata that opening a
 * model reads; no tensor payload is ever touched, so info on a 2 GiB
 * safetensors file costs one header read.  Two renderings of the same facts:
 * an aligned text table for people, and one JSON document (schema
 * "npuc.info/1", documented in docs/cli.md) for scripts and tests.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_common.h"

static const char USAGE[] =
    "Usage: npuc info FILE [options]\n"
    "\n"
    "Lists the tensors of a weight file (any format listed below): index, name, dtype,\n"
    "shape, parameter and byte counts, the role and layout npuc infers, the\n"
    "output-channel axis passes will use and how sure that is (certain: stated or\n"
    "implied by the file's structure, as an ONNX graph's op consuming the weight;\n"
    "convention: the exporter family's naming;\n"
    "guess: shape alone; -v adds the evidence); then totals by dtype, the Keras\n"
    "layers (for Keras files) and the file's metadata.  Only the header is read.\n"
    "Guessed layouts are also warned about on stderr.\n"
    "\n"
    "Options:\n"
    "      --graph              print the network graph instead: each node (op, name,\n"
    "                           the values it reads and makes, its weights with their\n"
    "                           roles) and each value, with the evidence it rests on\n"
    "                           (file, config, name, order) and its confidence; a\n"
    "                           malformed model_config is an error (exit 2)\n"
    "      --json               print one JSON document (schema \"npuc.info/1\"; its\n"
    "                           \"graph\" holds the graph, or null and \"graph_error\")\n"
    "      --layout REGEX=NAME  set the layout of every tensor whose name matches the\n"
    "                           POSIX extended REGEX (unanchored); repeatable, the\n"
    "                           first matching rule wins; a rule that matches no\n"
    "                           tensor is an error.  NAME: none oi io oihw iohw hwio\n"
    "                           hwim doi (aliases linear dense matmul conv\n"
    "                           convtranspose keras-conv depthwise onnx-rnn)\n"
    "  -q, --quiet              no warnings on stderr\n"
    "  -v, --verbose            show each tensor's evidence and metadata values in full\n"
    "  -h, --help               show this help\n"
    "\n"
    "Example:\n"
    "  npuc info ppocrv4_rec.safetensors --layout '^linear_[0-9]+\\.w_0$=io'\n"
    "  npuc info nsfwjs_mobilenet_v2.h5 --graph\n"
    "\n"
    "Exit codes: 0 ok, 1 failed, 2 usage error or unreadable/malformed file.\n";

static int run(int argc, char **argv);

/* USAGE, then the formats the registry has (not a list typed here). */
static void help(const cli_command *c, FILE *f) {
    (void)c;
    fputs(USAGE, f);
    fputc('\n', f);
    cli_print_formats(f);
}

const cli_command cli_cmd_info = {
    .name = "info",
    .summary = "list the tensors, layouts and metadata of a weight file",
    .help = help,
    .operand = "FILE",
    .run = run,
};

/* Metadata values longer than this many columns are cut in text mode. */
#define META_COLS 72

typedef struct dtype_total {
    uint64_t tensors, params, bytes;
} dtype_total;

/* Per-layer sums for Keras files; tensors[] lists member indices. */
typedef struct group_info {
    const char *name;
    uint64_t params, bytes;
    size_t *tensors;
    size_t n;
} group_info;

typedef struct info {
    npuc_model *m;
    npuc_ctx *ctx;
    size_t n;
    uint64_t params, bytes;
    dtype_total by_dtype[NPUC_DTYPE_COUNT];
    group_info *groups;
    size_t ngroups;
} info;

static void info_free(info *s) {
    for (size_t g = 0; g < s->ngroups; g++) free(s->groups[g].tensors);
    free(s->groups);
}

/* Gathers the totals and the layer grouping.  Returns 0, or -1 when out of
 * memory.  Layers are matched by name; a model has few enough layers that a
 * linear search per tensor is cheaper than building an index. */
static int info_collect(info *s, npuc_model *m) {
    memset(s, 0, sizeof *s);
    s->m = m;
    s->n = npuc_model_count(m);
    for (size_t i = 0; i < s->n; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        s->params += t->numel;
        s->bytes += t->nbytes;
        if ((unsigned)t->dtype < NPUC_DTYPE_COUNT) {
            dtype_total *d = &s->by_dtype[t->dtype];
            d->tensors++;
            d->params += t->numel;
            d->bytes += t->nbytes;
        }
    }
    s->ngroups = npuc_model_group_count(m);
    if (!s->ngroups) return 0;
    s->groups = calloc(s->ngroups, sizeof *s->groups);
    if (!s->groups) return -1;
    for (size_t g = 0; g < s->ngroups; g++) s->groups[g].name = npuc_model_group(m, g);
    for (size_t i = 0; i < s->n; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        if (!t->group) continue;
        for (size_t g = 0; g < s->ngroups; g++) {
            group_info *gi = &s->groups[g];
            if (!gi->name || strcmp(gi->name, t->group) != 0) continue;
            size_t *p = realloc(gi->tensors, (gi->n + 1) * sizeof *p);
            if (!p) return -1;
            gi->tensors = p;
            gi->tensors[gi->n++] = i;
            gi->params += t->numel;
            gi->bytes += t->nbytes;
            break;
        }
    }
    return 0;
}

static const char *format_label(const npuc_model *m, char *buf, size_t n) {
    const char *structure = npuc_model_format_opt(m, "structure");
    if (structure) snprintf(buf, n, "%s (%s)", npuc_format_name(npuc_model_format(m)), structure);
    else snprintf(buf, n, "%s", npuc_format_name(npuc_model_format(m)));
    return buf;
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* ------------------------------------------------------------ text */

static void print_text(const info *s, const cli_args *a) {
    npuc_model *m = s->m;
    char b1[CLI_FMT_MAX], b2[CLI_FMT_MAX], lab[64];
    size_t nmeta = npuc_model_meta_count(m);

    printf("file:        %s\n", npuc_model_path(m));
    printf("format:      %s\n", format_label(m, lab, sizeof lab));
    printf("file size:   %s (%s bytes)\n", cli_fmt_size(npuc_model_file_size(m), b1),
           cli_fmt_count(npuc_model_file_size(m), b2));
    printf("tensors:     %zu\n", s->n);
    printf("parameters:  %s\n", cli_fmt_count(s->params, b1));
    printf("tensor data: %s (%s bytes)\n", cli_fmt_size(s->bytes, b1), cli_fmt_count(s->bytes, b2));
    if (a->nlayouts) {
        printf("layout rules:");
        for (size_t r = 0; r < a->nlayouts; r++) printf(" %s", a->layouts[r]);
        putchar('\n');
    }

    /* The tensor table: column widths from the data, numbers right-aligned. */
    static const char *const HDR[] = {"idx", "name", "dtype", "shape", "params", "bytes",
                                      "role", "layout", "out", "confidence"};
    size_t w[10];
    for (int c = 0; c < 10; c++) w[c] = strlen(HDR[c]);
    char shape[NPUC_MAX_RANK * 21 + 3];
    for (size_t i = 0; i < s->n; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        char idx[24];
        w[0] = max_sz(w[0], (size_t)snprintf(idx, sizeof idx, "%zu", i));
        w[1] = max_sz(w[1], cli_width(t->name));
        w[2] = max_sz(w[2], strlen(npuc_dtype_name(t->dtype)));
        w[3] = max_sz(w[3], strlen(cli_fmt_shape(t, shape, sizeof shape)));
        w[4] = max_sz(w[4], strlen(cli_fmt_count(t->numel, b1)));
        w[5] = max_sz(w[5], strlen(cli_fmt_size(t->nbytes, b1)));
        w[6] = max_sz(w[6], strlen(npuc_role_name(t->role)));
        w[7] = max_sz(w[7], strlen(npuc_layout_name(t->layout)));
        w[9] = max_sz(w[9], strlen(npuc_confidence_name(t->confidence)));
    }
    if (s->n) {
        printf("\n  %*s  ", (int)w[0], HDR[0]);
        cli_print_padded(HDR[1], w[1]);
        printf("  %-*s  %-*s  %*s  %*s  %-*s  %-*s  %s  %s%s\n", (int)w[2], HDR[2], (int)w[3], HDR[3],
               (int)w[4], HDR[4], (int)w[5], HDR[5], (int)w[6], HDR[6], (int)w[7], HDR[7], HDR[8],
               a->verbose ? "" : HDR[9], a->verbose ? "confidence  evidence" : "");
    }
    for (size_t i = 0; i < s->n; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        int ax = npuc_layout_out_axis(t->layout, t->rank);
        char axs[16];
        if (ax >= 0) snprintf(axs, sizeof axs, "%d", ax);
        else snprintf(axs, sizeof axs, "-");
        printf("  %*zu  ", (int)w[0], i);
        cli_print_padded(t->name, w[1]);
        printf("  %-*s  %-*s  %*s  %*s  %-*s  %-*s  %3s  ", (int)w[2], npuc_dtype_name(t->dtype),
               (int)w[3], cli_fmt_shape(t, shape, sizeof shape), (int)w[4],
               cli_fmt_count(t->numel, b1), (int)w[5], cli_fmt_size(t->nbytes, b2), (int)w[6],
               npuc_role_name(t->role), (int)w[7], npuc_layout_name(t->layout), axs);
        if (a->verbose) {
            printf("%-*s  ", (int)w[9], npuc_confidence_name(t->confidence));
            cli_print_padded(t->evidence ? t->evidence : "-", 0);
            putchar('\n');
        } else {
            printf("%s\n", npuc_confidence_name(t->confidence));
        }
    }

    /* Totals by dtype. */
    printf("\nby dtype:\n");
    size_t wd = 0, wt = 0, wp = 0;
    for (int d = 0; d < NPUC_DTYPE_COUNT; d++) {
        const dtype_total *dt = &s->by_dtype[d];
        if (!dt->tensors) continue;
        char tb[CLI_FMT_MAX];
        wd = max_sz(wd, strlen(npuc_dtype_name((npuc_dtype)d)));
        wt = max_sz(wt, strlen(cli_fmt_count(dt->tensors, tb)));
        wp = max_sz(wp, strlen(cli_fmt_count(dt->params, tb)));
    }
    for (int d = 0; d < NPUC_DTYPE_COUNT; d++) {
        const dtype_total *dt = &s->by_dtype[d];
        if (!dt->tensors) continue;
        char tb[CLI_FMT_MAX];
        printf("  %-*s  %*s %-7s  %*s %-6s  %s\n", (int)wd, npuc_dtype_name((npuc_dtype)d),
               (int)wt, cli_fmt_count(dt->tensors, tb), dt->tensors == 1 ? "tensor" : "tensors",
               (int)wp, cli_fmt_count(dt->params, b1), dt->params == 1 ? "param" : "params",
               cli_fmt_size(dt->bytes, b2));
    }

    /* Keras layers. */
    if (s->ngroups) {
        size_t wn = 0, wc = 0, wpp = 0;
        for (size_t g = 0; g < s->ngroups; g++) {
            char tb[CLI_FMT_MAX];
            wn = max_sz(wn, cli_width(s->groups[g].name ? s->groups[g].name : ""));
            wc = max_sz(wc, strlen(cli_fmt_count(s->groups[g].n, tb)));
            wpp = max_sz(wpp, strlen(cli_fmt_count(s->groups[g].params, tb)));
        }
        printf("\nlayers: %zu\n", s->ngroups);
        for (size_t g = 0; g < s->ngroups; g++) {
            const group_info *gi = &s->groups[g];
            char tb[CLI_FMT_MAX];
            printf("  ");
            cli_print_padded(gi->name ? gi->name : "", wn);
            printf("  %*s %-7s  %*s %-6s  %s\n", (int)wc, cli_fmt_count(gi->n, tb),
                   gi->n == 1 ? "tensor" : "tensors", (int)wpp, cli_fmt_count(gi->params, b1),
                   gi->params == 1 ? "param" : "params", cli_fmt_size(gi->bytes, b2));
        }
    }

    /* Metadata, one line per key; long values cut unless -v. */
    printf("\nmetadata: %zu %s\n", nmeta, nmeta == 1 ? "key" : "keys");
    size_t wk = 0;
    for (size_t i = 0; i < nmeta; i++) {
        const char *k, *v;
        npuc_model_meta_at(m, i, &k, &v);
        wk = max_sz(wk, cli_width(k ? k : ""));
    }
    for (size_t i = 0; i < nmeta; i++) {
        const char *k, *v;
        npuc_model_meta_at(m, i, &k, &v);
        if (!k) continue;
        size_t vlen = v ? strlen(v) : 0;
        size_t cols = a->verbose ? vlen * 4 + 8 : META_COLS;
        size_t cap = cols * 4 + 16;
        char *buf = malloc(cap);
        printf("  ");
        cli_print_padded(k, wk);
        if (!buf) {
            printf("  (out of memory)\n");
            continue;
        }
        int cut;
        cli_fmt_oneline(v ? v : "", cols, buf, cap, &cut);
        if (cut) printf("  %s (%zu bytes)\n", buf, vlen);
        else printf("  %s\n", buf);
        free(buf);
    }
}

/* ------------------------------------------------------------ JSON */

/* json_object_set_new with NULL-safety: returns -1 if v is NULL or the set
 * fails (both mean out of memory here). */
static int jset(json_t *o, const char *k, json_t *v) {
    if (!v) return -1;
    return json_object_set_new(o, k, v) == 0 ? 0 : -1;
}

static int jappend(json_t *arr, json_t *v) {
    if (!v) return -1;
    return json_array_append_new(arr, v) == 0 ? 0 : -1;
}

static json_t *tensor_json(const npuc_tensor_info *t, size_t i) {
    json_t *o = json_object(), *shape = json_array();
    int err = !o || !shape;
    for (int d = 0; !err && d < t->rank; d++) err |= jappend(shape, json_integer(t->shape[d]));
    int ax = npuc_layout_out_axis(t->layout, t->rank);
    if (!err) {
        err |= jset(o, "index", json_integer((json_int_t)i));
        err |= jset(o, "name", cli_json_str(t->name));
        err |= jset(o, "dtype", json_string(npuc_dtype_name(t->dtype)));
        err |= jset(o, "shape", shape);
        shape = NULL;
        err |= jset(o, "params", json_integer((json_int_t)t->numel));
        err |= jset(o, "bytes", json_integer((json_int_t)t->nbytes));
        err |= jset(o, "role", json_string(npuc_role_name(t->role)));
        err |= jset(o, "layout", json_string(npuc_layout_name(t->layout)));
        err |= jset(o, "out_axis", ax >= 0 ? json_integer(ax) : json_null());
        err |= jset(o, "confidence", json_string(npuc_confidence_name(t->confidence)));
        err |= jset(o, "evidence", t->evidence ? cli_json_str(t->evidence) : json_null());
        err |= jset(o, "group", cli_json_str(t->group));
    }
    json_decref(shape);
    if (err) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *graph_json(const npuc_graph *g);

static json_t *info_json(const info *s, const cli_args *a) {
    npuc_model *m = s->m;
    json_t *doc = json_object();
    if (!doc) return NULL;
    int err = 0;
    const char *structure = npuc_model_format_opt(m, "structure");
    err |= jset(doc, "schema", json_string("npuc.info/1"));
    err |= jset(doc, "npuc_version", json_string(npuc_version()));
    err |= jset(doc, "file", cli_json_str(npuc_model_path(m)));
    err |= jset(doc, "format", json_string(npuc_format_name(npuc_model_format(m))));
    err |= jset(doc, "h5_style", structure ? json_string(structure) : json_null());
    err |= jset(doc, "file_size", json_integer((json_int_t)npuc_model_file_size(m)));
    err |= jset(doc, "n_tensors", json_integer((json_int_t)s->n));
    err |= jset(doc, "total_params", json_integer((json_int_t)s->params));
    err |= jset(doc, "total_bytes", json_integer((json_int_t)s->bytes));

    json_t *bd = json_object();
    err |= jset(doc, "by_dtype", bd);
    for (int d = 0; !err && d < NPUC_DTYPE_COUNT; d++) {
        const dtype_total *dt = &s->by_dtype[d];
        if (!dt->tensors) continue;
        json_t *e = json_object();
        err |= jset(bd, npuc_dtype_name((npuc_dtype)d), e);
        if (err) break;
        err |= jset(e, "tensors", json_integer((json_int_t)dt->tensors));
        err |= jset(e, "params", json_integer((json_int_t)dt->params));
        err |= jset(e, "bytes", json_integer((json_int_t)dt->bytes));
    }

    json_t *rules = json_array();
    err |= jset(doc, "layout_rules", rules);
    for (size_t r = 0; !err && r < a->nlayouts; r++) err |= jappend(rules, cli_json_str(a->layouts[r]));

    json_t *meta = json_object();
    err |= jset(doc, "metadata", meta);
    for (size_t i = 0; !err && i < npuc_model_meta_count(m); i++) {
        const char *k, *v;
        npuc_model_meta_at(m, i, &k, &v);
        if (!k) continue;
        json_t *ks = cli_json_str(k); /* a key must be valid UTF-8 too */
        if (!ks) { err = 1; break; }
        err |= jset(meta, json_string_value(ks), cli_json_str(v ? v : ""));
        json_decref(ks);
    }

    json_t *groups = json_array();
    err |= jset(doc, "groups", groups);
    for (size_t g = 0; !err && g < s->ngroups; g++) {
        const group_info *gi = &s->groups[g];
        json_t *e = json_object(), *idx = json_array();
        if (!e || !idx) { json_decref(e); json_decref(idx); err = 1; break; }
        err |= jset(e, "name", cli_json_str(gi->name));
        err |= jset(e, "n_tensors", json_integer((json_int_t)gi->n));
        err |= jset(e, "params", json_integer((json_int_t)gi->params));
        err |= jset(e, "bytes", json_integer((json_int_t)gi->bytes));
        for (size_t k = 0; !err && k < gi->n; k++)
            err |= jappend(idx, json_integer((json_int_t)gi->tensors[k]));
        err |= jset(e, "tensors", idx); /* steals idx even on failure */
        if (err) { json_decref(e); break; }
        err |= jappend(groups, e);
    }

    json_t *tensors = json_array();
    err |= jset(doc, "tensors", tensors);
    for (size_t i = 0; !err && i < s->n; i++)
        err |= jappend(tensors, tensor_json(npuc_model_tensor(m, i), i));

    if (!err) { /* the graph, or why there is none */
        if (npuc_model_read_graph(s->ctx, m) == NPUC_OK) {
            json_t *gj = graph_json(npuc_model_graph(m));
            err |= !gj || jset(doc, "graph", gj);
        } else {
            err |= jset(doc, "graph", json_null());
            err |= jset(doc, "graph_error", cli_json_str(npuc_ctx_errmsg(s->ctx)));
        }
    }
    if (err) {
        json_decref(doc);
        return NULL;
    }
    return doc;
}

/* ------------------------------------------------------------ the graph */

static json_t *graph_value_names(const npuc_graph *g, const size_t *v, size_t n) {
    json_t *arr = json_array();
    for (size_t k = 0; arr && k < n; k++) {
        npuc_graph_value x;
        if (npuc_graph_get_value(g, v[k], &x) != NPUC_OK || jappend(arr, cli_json_str(x.name))) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

static json_t *graph_json(const npuc_graph *g) {
    json_t *o = json_object(), *nodes = json_array(), *values = json_array();
    int err = !o || !nodes || !values;
    for (size_t i = 0; !err && i < npuc_graph_node_count(g); i++) {
        npuc_graph_node n;
        npuc_graph_get_node(g, i, &n);
        json_t *e = json_object(), *w = json_array(), *at = json_object();
        err |= !e || !w || !at;
        for (size_t k = 0; !err && k < n.nweights; k++) {
            json_t *we = json_object();
            err |= jset(we, "tensor", cli_json_str(n.weights[k].tensor));
            err |= jset(we, "role", cli_json_str(n.weights[k].role));
            err |= jappend(w, we);
        }
        for (size_t k = 0; !err && k < n.nattrs; k++) {
            const char *key, *val;
            npuc_graph_node_attr(g, i, k, &key, &val);
            json_t *ks = cli_json_str(key);
            err |= !ks || jset(at, json_string_value(ks), cli_json_str(val));
            json_decref(ks);
        }
        err |= jset(e, "name", cli_json_str(n.name));
        err |= jset(e, "op", json_string(n.op));
        err |= jset(e, "source_op", n.source_op ? cli_json_str(n.source_op) : json_null());
        err |= jset(e, "inputs", graph_value_names(g, n.inputs, n.ninputs));
        err |= jset(e, "outputs", graph_value_names(g, n.outputs, n.noutputs));
        err |= jset(e, "weights", w);
        err |= jset(e, "attributes", at);
        err |= jset(e, "evidence", json_string(npuc_graph_evidence_name(n.evidence)));
        err |= jset(e, "confidence", json_string(npuc_confidence_name(n.confidence)));
        err |= jset(e, "why", cli_json_str(n.why));
        err |= jappend(nodes, e);
    }
    for (size_t i = 0; !err && i < npuc_graph_value_count(g); i++) {
        npuc_graph_value v;
        npuc_graph_get_value(g, i, &v);
        json_t *e = json_object(), *shape = v.rank >= 0 ? json_array() : json_null();
        err |= !e || !shape;
        for (int d = 0; !err && d < v.rank; d++)
            err |= jappend(shape, v.shape[d] >= 0 ? json_integer(v.shape[d]) : json_null());
        npuc_graph_node p;
        int has_p = v.producer != NPUC_GRAPH_NONE && npuc_graph_get_node(g, v.producer, &p) == NPUC_OK;
        err |= jset(e, "name", cli_json_str(v.name));
        err |= jset(e, "producer", has_p ? cli_json_str(p.name) : json_null());
        err |= jset(e, "consumers", json_integer((json_int_t)v.nconsumers));
        err |= jset(e, "shape", shape);
        err |= jset(e, "is_input", json_boolean(v.is_input));
        err |= jset(e, "is_output", json_boolean(v.is_output));
        err |= jset(e, "evidence", json_string(npuc_graph_evidence_name(v.evidence)));
        err |= jset(e, "confidence", json_string(npuc_confidence_name(v.confidence)));
        err |= jset(e, "why", cli_json_str(v.why));
        err |= jappend(values, e);
    }
    err |= jset(o, "nodes", nodes);
    err |= jset(o, "values", values);
    if (err) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static void print_value_list(const npuc_graph *g, const size_t *v, size_t n) {
    for (size_t k = 0; k < n; k++) {
        npuc_graph_value x;
        npuc_graph_get_value(g, v[k], &x);
        printf("%s%s", k ? ", " : "", x.name);
    }
}

/* `npuc info --graph`: one line per node, its weights below it, then the
 * values with their producers and evidence. */
static void print_graph(const npuc_graph *g, const npuc_model *m) {
    printf("%s: %zu nodes, %zu values\n", npuc_model_path(m), npuc_graph_node_count(g), npuc_graph_value_count(g));
    printf("\nnodes (op name (file op) <- inputs -> outputs [evidence, confidence: why]):\n");
    for (size_t i = 0; i < npuc_graph_node_count(g); i++) {
        npuc_graph_node n;
        npuc_graph_get_node(g, i, &n);
        printf("  %s %s", n.op, n.name);
        if (n.source_op) printf(" (%s)", n.source_op);
        printf(" <- ");
        print_value_list(g, n.inputs, n.ninputs);
        printf(" -> ");
        print_value_list(g, n.outputs, n.noutputs);
        printf(" [%s, %s: %s]\n", npuc_graph_evidence_name(n.evidence), npuc_confidence_name(n.confidence), n.why);
        for (size_t k = 0; k < n.nweights; k++) printf("      %-16s %s\n", n.weights[k].role, n.weights[k].tensor);
    }
    printf("\nvalues (name <- producer, consumers [evidence, confidence: why]):\n");
    for (size_t i = 0; i < npuc_graph_value_count(g); i++) {
        npuc_graph_value v;
        npuc_graph_get_value(g, i, &v);
        npuc_graph_node p;
        const char *prod = v.producer != NPUC_GRAPH_NONE && npuc_graph_get_node(g, v.producer, &p) == NPUC_OK
                               ? p.name : "-";
        printf("  %s <- %s, %zu consumer%s%s%s [%s, %s: %s]\n", v.name, prod, v.nconsumers,
               v.nconsumers == 1 ? "" : "s", v.is_input ? ", model input" : "", v.is_output ? ", model output" : "",
               npuc_graph_evidence_name(v.evidence), npuc_confidence_name(v.confidence), v.why);
    }
}

/* ------------------------------------------------------------ command */

/* Never silent: a layout npuc only guessed is named on stderr with the flag
 * that states it (the first few by name, then a count). */
static void warn_guesses(npuc_model *m, const cli_args *a) {
    size_t n = 0;
    for (size_t i = 0; i < npuc_model_count(m); i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        if (t->confidence != NPUC_CONF_GUESS || t->layout == NPUC_LAYOUT_NONE) continue;
        if (n++ < 3)
            cli_warn(a, "%s: tensor '%s': layout %s is a guess (%s); state it with --layout 'REGEX=LAYOUT'",
                     npuc_model_path(m), t->name, npuc_layout_name(t->layout), t->evidence ? t->evidence : "-");
    }
    if (n > 3)
        cli_warn(a, "%s: %zu more tensors have guessed layouts (npuc info -v shows the evidence)",
                 npuc_model_path(m), n - 3);
}


enum { OPT_GRAPH = CLI_OPT_USER };

static const cli_option OPTIONS[] = {
    {"graph", 0, 0, OPT_GRAPH},
    {NULL, 0, 0, 0},
};

static int on_opt(cli_args *a, void *ud, int id, const char *arg) {
    (void)a;
    (void)arg;
    if (id == OPT_GRAPH) *(int *)ud = 1;
    return CLI_CONTINUE;
}

static int run(int argc, char **argv) {
    cli_args a;
    int graph = 0;
    npuc_ctx *ctx = NULL;
    npuc_model *m = NULL;
    info s;
    memset(&s, 0, sizeof s);
    int rc = cli_parse(&cli_cmd_info, argc, argv, CLI_OPT_JSON | CLI_OPT_LAYOUT, OPTIONS, on_opt, &graph,
                       1, 1, &a);
    if (rc != CLI_CONTINUE) goto done;
    if ((rc = cli_ctx_new(&a, &ctx)) != CLI_EXIT_OK) goto done;
    if ((rc = cli_open_model(ctx, &a, a.pos[0], &m)) != CLI_EXIT_OK) goto done;
    if (info_collect(&s, m) != 0) {
        cli_error("out of memory");
        rc = CLI_EXIT_FAIL;
        goto done;
    }
    s.ctx = ctx;
    if (a.json) {
        rc = cli_json_print(info_json(&s, &a));
    } else if (graph) {
        npuc_status st = npuc_model_read_graph(ctx, m);
        if (st != NPUC_OK) {
            cli_error("%s", npuc_ctx_errmsg(ctx));
            rc = npuc_status_is_input_error(st) ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
            goto done;
        }
        print_graph(npuc_model_graph(m), m);
    } else {
        print_text(&s, &a);
    }
    warn_guesses(m, &a);
done:
    info_free(&s);
    npuc_model_close(m);
    npuc_ctx_free(ctx);
    cli_args_free(&a);
    return cli_finish_stdout(rc);
}
