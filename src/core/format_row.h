/*
 * format_row.h - the format registry: one row per weight-file format.
 *
 * A row says everything the core needs to know about a format: its name,
 * the file extensions that name it, how to recognise its bytes (sniff), how
 * to open a file (the reader) and which writer backend writes one, and the
 * write options it accepts, declared as keys with a type, bounds, a default
 * and help text.  The core (model.c, writer.c, convert.c, format.c,
 * write_opts.c) only ever iterates the table; it never names a format, and
 * no file under src/core/ includes a header from formats/.  The table itself
 * lives in formats/format_registry.c, which lists the rows the format
 * folders define; the core reaches it through npuc__format_table(), declared
 * here and resolved at link time.
 *
 * Adding a format: a folder formats/<name>/ with its reader, its writer and
 * its row (a const npuc__format_row), plus one line in format_registry.c.
 * The format's npuc_format id is its row index + 1 (npuc_format_find()
 * finds it by name), so rows are only ever appended: the first two ids are
 * the pinned NPUC_FORMAT_SAFETENSORS and NPUC_FORMAT_HDF5.
 *
 * Write options travel as key/value strings in npuc_write_opts (set with
 * npuc_write_opts_set, which rejects a key no format declares and a value
 * the declaring format would refuse).  npuc_writer_open validates the
 * options again against the output format's declarations; options only other
 * formats declare are ignored, so one option set serves outputs of any
 * format.  A backend reads its options with npuc__writer_opt*().
 */
#ifndef NPUC_FORMAT_ROW_H
#define NPUC_FORMAT_ROW_H

#include "npuc_internal.h"

typedef enum npuc__opt_type {
    NPUC__OPT_INT = 0, /* a decimal integer in [min, max] */
    NPUC__OPT_CHOICE,  /* one of choices[]; backends get its index */
    NPUC__OPT_NAME,    /* a name of min..max bytes of [A-Za-z0-9_.-] (GGUF's
                          general.architecture) */
    NPUC__OPT_PATH,    /* a file path of min..max bytes without control
                          characters (GGUF's imatrix), opened by the backend */
    NPUC__OPT_TEXT     /* min..max bytes, no control characters but newlines
                          (GGUF's REGEX=TYPE rules, one a line); the
                          backend parses it */
} npuc__opt_type;

/* One write option a format accepts. */
typedef struct npuc__opt_decl {
    const char *key;            /* "deflate": what npuc_write_opts_set takes */
    npuc__opt_type type;
    const char *label;          /* how messages name the value: "deflate level" */
    long min, max;              /* INT: inclusive bounds; NAME: bounds on its length */
    const char *const *choices; /* CHOICE: the accepted values, NULL-terminated */
    const char *dflt;           /* the value when unset; NULL: the row's derive hook decides */
    const char *help;           /* one line for documentation and --help texts */
} npuc__opt_decl;

/* Sniff results: how sure a format is that a file is one of its own.  A
 * signature (magic bytes) beats a header that merely looks plausible. */
enum { NPUC__SNIFF_NO = 0, NPUC__SNIFF_PLAUSIBLE = 1, NPUC__SNIFF_SIGNATURE = 2 };

typedef struct npuc__format_row {
    const char *name;             /* "hdf5": npuc_format_name, npuc_format_find */
    const char *const *ext;       /* extensions with the dot, NULL-terminated; ext[0]
                                     is the one messages suggest */
    /* One of NPUC__SNIFF_*: does the file at path look like this format?
     * Reads a few bytes; never fails (an unreadable file is NO). */
    int (*sniff)(const char *path);
    /* When non-NULL, a file whose extension names this format but whose
     * sniff says NO is refused with "<path>: <no_signature>"
     * (NPUC_ERR_FORMAT) before the reader runs.  NULL: the reader itself
     * says what is wrong (safetensors' detailed header messages). */
    const char *no_signature;
    /* Reads path's header and tensor table into a new model (the core sets
     * the model's format id afterwards).  On failure *out is NULL and ctx
     * holds the message. */
    npuc_status (*open)(npuc_ctx *ctx, const char *path, const npuc_open_opts *o, npuc_model **out);
    const npuc_writer_backend *writer; /* NULL: the format is read-only */
    const npuc__opt_decl *opts;        /* the write options it accepts */
    size_t nopts;
    /* Optional, NULL-terminated: keys of opts whose value other than the
     * default asks for an output only this format writes (checkpoint-format
     * compressed-tensors): an output of another format refuses it
     * (npuc__write_opts_check_output) instead of ignoring it. */
    const char *const *output_opts;
    /* Optional: the default of a declared option whose dflt is NULL,
     * computed from w's declared tensors and metadata (HDF5 "structure":
     * keras2 when any tensor has a layer group, else plain).  Called only
     * after every tensor is declared. */
    const char *(*derive)(const npuc_writer *w, const char *key);
    /* Optional: 1 when a reader of the file w writes will guess roles and
     * layouts by Keras rules, so "npuc.layout" records the layouts that
     * differ from those guesses; NULL means never. */
    int (*keras_layouts)(const npuc_writer *w);
    /* Optional: the value of write option key that describes how m (opened
     * by this row) is stored, e.g. "structure" -> "keras3"; NULL when the
     * key does not apply.  npuc_model_format_opt() answers through it, and
     * npuc_model_convert() carries these values over to an output in the
     * same format unless the caller set them. */
    const char *(*describe)(const npuc_model *m, const char *key);
    /* 1 when the format stores tensors encoded and its reader decodes them
     * on load (GGUF's quantized blocks): `npuc decompress` then writes the
     * decoded tensors, as convert would, instead of refusing a file that
     * is not an npuc artifact. */
    int decodes_on_load;
    /* 1 when the format's files are directories (formats/checkpoint): its
     * reader opens directories (npuc_model_open refuses a directory for any
     * other row), and its writer builds and publishes the output directory
     * itself (no_file; ck_dir.c), so an existing directory at the output
     * path is for the backend to judge; the backend
     * sees the "npuc.source.*" metadata a reader recorded about its source
     * (the checkpoint directory whose sharding and side files it keeps).
     * Every other format's writer drops those keys, so no source path is
     * stored in a file. */
    int writes_dir;
    /* For writes_dir rows: moves a complete output directory that a
     * recipe's last step wrote under a name of its own (from) to its path,
     * atomically and under the row's rules for an existing path
     * (overwrite); from NULL only checks that path may be written.  On
     * failure from is left where it was. */
    npuc_status (*move_dir)(npuc_ctx *ctx, const char *from, const char *path, int overwrite);
    /* Optional: builds m's network graph (src/graph/graph_net.h) from a
     * graph the file states, hands it to m (npuc__model_set_graph) and
     * states the roles and layouts its ops give the weights
     * (npuc__model_state_layout, certain).  NPUC_ERR_NOT_FOUND when m
     * carries no graph of this format (any model is offered to every row
     * with this hook: a safetensors file converted from ONNX keeps the
     * ONNX graph in its metadata); NPUC_ERR_FORMAT for a malformed one.
     * npuc_model_open calls it after the reader, npuc_model_read_graph
     * (graph_fill.c) before its own Keras and name rules. */
    npuc_status (*read_graph)(npuc_ctx *ctx, npuc_model *m);
    /* With read_graph: the metadata key that carries the graph ("onnx.model").
     * A writer whose output carries it records no "npuc.layout": the reader
     * restates the layouts from the graph's ops, and an unchanged ONNX
     * model is written back byte for byte. */
    const char *graph_meta_key;
    /* Optional: the metadata entry in which this format keeps a model's
     * network graph ("model_config": a Keras configuration in an HDF5 root
     * attribute, a .keras archive's config.json, a safetensors entry), and
     * the hook that writes an edited graph back into it.  A pass that edits
     * the graph (fold-bn removes BatchNorm nodes, structured prune resizes
     * kernels) hands the output's row the source's entry `stored` and the
     * edited graph g; *out is the entry's new value (malloc'd), or NULL when
     * nothing changed.  Fields the graph does not model keep their values.
     * NPUC_ERR_FORMAT when stored is not a graph the format's reader
     * accepts, NPUC_ERR_UNSUPPORTED naming the node when an edit cannot be
     * written, NPUC_ERR_NOMEM.  Adding a format with a graph: its reader
     * stores the graph (or a read hook builds it) and its row names both. */
    const char *graph_meta;
    npuc_status (*graph_write)(npuc_ctx *ctx, const char *label, const char *stored, const npuc_graph *g,
                               char **out);
    /* Optional: `npuc decompress` of quantized weights that m's graph of this
     * format states as operators (ONNX's DequantizeLinear, MatMulNBits):
     * writes out with them evaluated into float weights.  Offered to every
     * model before the npuc artifact path, as read_graph is (a safetensors
     * file converted from ONNX keeps the graph); NPUC_ERR_NOT_FOUND when m
     * carries no such weights, and the artifact path decides. */
    npuc_status (*decompress)(npuc_ctx *ctx, npuc_model *m, const char *out, const npuc_write_opts *wo);
} npuc__format_row;

/* The graph_write of the rows whose graph_meta is a Keras model_config
 * (src/graph/graph_kconfig.c: npuc__kconfig_write, resolved at link time
 * as npuc__format_table is). */
npuc_status npuc__kconfig_graph_write(npuc_ctx *ctx, const char *label, const char *stored, const npuc_graph *g,
                                      char **out);

/* The registry (formats/format_registry.c): rows in id order, *n of them. */
const npuc__format_row *const *npuc__format_table(size_t *n);

/* The row of format id f; NULL for NPUC_FORMAT_AUTO and unknown ids. */
const npuc__format_row *npuc__format_by_id(npuc_format f);
/* The id of row r (its index + 1). */
npuc_format npuc__format_id(const npuc__format_row *r);
/* r's declaration of key, or NULL. */
const npuc__opt_decl *npuc__format_opt_decl(const npuc__format_row *r, const char *key);

/* Picks the row that opens path under o's format: the row o names, else the
 * row path's extension names (refused when that row has a no_signature
 * message and sniffs NO), else the row whose sniff is surest (ties: table
 * order), else the first row, whose reader then says what is wrong. */
npuc_status npuc__format_for_open(npuc_ctx *ctx, const char *path, const npuc_open_opts *o,
                                  const npuc__format_row **row);

/* ------------------------------------------------------ write options */

/* The value stored for key in o, or NULL. */
const char *npuc__write_opts_get(const npuc_write_opts *o, const char *key);
/* Stores key = value in o without checking it against any declaration
 * (values the core derived or carried over, already valid); replaces an
 * earlier value.  NPUC_ERR_ARG when key or value does not fit or o is full. */
npuc_status npuc__write_opts_put(npuc_ctx *ctx, npuc_write_opts *o, const char *key, const char *value);
/* Checks every option in o: a key no format declares is NPUC_ERR_ARG; a
 * key row declares must hold a valid value; other keys are ignored. */
npuc_status npuc__write_opts_check(npuc_ctx *ctx, const npuc__format_row *row, const npuc_write_opts *o);
/* NPUC_ERR_ARG naming path when o sets, to a value other than its default,
 * an option another format lists in output_opts (checkpoint-format
 * compressed-tensors for a .safetensors output): what was asked cannot be
 * written there, and ignoring it would write something else. */
npuc_status npuc__write_opts_check_output(npuc_ctx *ctx, const npuc__format_row *row, const npuc_write_opts *o,
                                          const char *path);
/* Copies into w's options what row->describe says about m for every key
 * the caller left unset (npuc_model_convert to the input's own format). */
npuc_status npuc__writer_inherit(npuc_writer *w, const npuc_model *m);

/* A backend's view of its options (valid once npuc_writer_open succeeded):
 * the value set, else the declared default, else the derived one; NULL for
 * a key the output format does not declare. */
const char *npuc__writer_opt(const npuc_writer *w, const char *key);
/* The same as a number: an INT option's value, a CHOICE option's index;
 * fallback when there is none. */
long npuc__writer_opt_long(const npuc_writer *w, const char *key, long fallback);

#endif
