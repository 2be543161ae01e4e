/*
 * npuc/recipe.h - recipes: one YAML file that names a chain of passes, run
 * the same way on one model (npuc run) or on a whole zoo (npuc batch).
 *
 * A recipe lists steps in order - fold-bn, prune, sparsify, lowrank,
 * quantize - each with the options of its command (the long option names
 * with '_' for '-') and per-layer overrides by regex.  docs/recipes.md is
 * the schema:
 *
 *     steps:
 *       - fold-bn:
 *       - quantize:
 *           bits: 4
 *           group_size: 128
 *           overrides:
 *             - match: '^features\.0\.'
 *               bits: 8
 *
 * Loading parses and validates everything that does not need a model:
 * unknown keys, wrong types, out-of-range values, malformed regexes and an
 * impossible step order are NPUC_ERR_ARG with "<file>:<line>:<col>: ..." in
 * the context.  Patterns that match no tensor can only be found against a
 * model: npuc_recipe_run checks every pattern against the tensors of the
 * step's input before the step runs, and fails with the same
 * "<file>:<line>:<col>:" prefix.
 *
 * Example (compiled by tests/cli/c_api.sh):
 *     npuc_recipe *r;
 *     if (npuc_recipe_load(ctx, "int8.yaml", &r) != NPUC_OK) return 1;   // message in ctx
 *     npuc_run_opts o = npuc_run_opts_defaults();
 *     npuc_summary sum;
 *     npuc_status st = npuc_recipe_run(ctx, r, "model.safetensors", "model.q8.safetensors", &o, &sum);
 *     if (st == NPUC_OK) npuc_summary_free(&sum);
 *     npuc_recipe_free(r);
 *
 * The artifact records its provenance in three metadata entries:
 * "npuc.recipe" (the recipe in canonical JSON: the steps and their options,
 * without comments or formatting), "npuc.recipe_sha256" (SHA-256 of that
 * JSON) and "npuc.input_sha256" (SHA-256 of the input file's bytes).  No
 * timestamps: the same input and recipe give a byte-identical artifact.
 */
#ifndef NPUC_RECIPE_H
#define NPUC_RECIPE_H

#include "api.h"

#include <stddef.h>
#include <stdint.h>
#include "model.h"
#include "record.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Values are pinned. */
typedef enum npuc_step_kind {
    NPUC_STEP_FOLD_BN = 0,
    NPUC_STEP_PRUNE = 1,
    NPUC_STEP_SPARSIFY = 2,
    NPUC_STEP_LOWRANK = 3,
    NPUC_STEP_QUANTIZE = 4,
    NPUC_STEP_COUNT = 5
} npuc_step_kind;

/* "fold-bn", "prune", "sparsify", "lowrank", "quantize"; "?" if invalid. */
NPUC_API const char *npuc_step_kind_name(npuc_step_kind k);
/* 1 when this build can run the step, 0 when its pass is not built in
 * (a recipe naming it still parses; running it fails with
 * NPUC_ERR_UNSUPPORTED "step 'X' is not available in this build"). */
NPUC_API int npuc_step_available(npuc_step_kind k);

/* The metadata keys a recipe run writes into its artifact. */
#define NPUC_META_RECIPE "npuc.recipe"
#define NPUC_META_RECIPE_SHA256 "npuc.recipe_sha256"
#define NPUC_META_INPUT_SHA256 "npuc.input_sha256"

typedef struct npuc_recipe npuc_recipe;

/* Reads and validates the recipe at path.  On success *out owns the recipe
 * (free with npuc_recipe_free); on failure *out is NULL and the context says
 * "<path>:<line>:<col>: <problem>" (NPUC_ERR_ARG), or why the file could not
 * be read (NPUC_ERR_NOT_FOUND, NPUC_ERR_IO). */
NPUC_API npuc_status npuc_recipe_load(npuc_ctx *ctx, const char *path, npuc_recipe **out);
/* The same from len bytes of text; name stands for the file in messages.
 * Errors as npuc_recipe_load's (NPUC_ERR_ARG with line and column). */
NPUC_API npuc_status npuc_recipe_parse(npuc_ctx *ctx, const char *name, const char *text, size_t len,
                              npuc_recipe **out);
/* Frees a recipe; NULL is a no-op. */
NPUC_API void npuc_recipe_free(npuc_recipe *r);

/* The name given to load/parse (owned by r), and the number of steps. */
NPUC_API const char *npuc_recipe_name(const npuc_recipe *r);
NPUC_API size_t npuc_recipe_step_count(const npuc_recipe *r);
/* The kind of step i and where it starts in the file (1-based line and
 * column; either pointer may be NULL).  i must be < the step count. */
NPUC_API npuc_step_kind npuc_recipe_step_kind(const npuc_recipe *r, size_t i, int *line, int *col);
/* The canonical JSON of the recipe (what "npuc.recipe" holds) and its
 * SHA-256 as 64 lower-case hex digits.  Both are owned by the recipe. */
NPUC_API const char *npuc_recipe_json(const npuc_recipe *r);
NPUC_API const char *npuc_recipe_sha256(const npuc_recipe *r);

/* Sets option `key` of step `step` (0-based) to text, typed and checked as
 * the command line types the pass's flag ("25%" for target_size, "4" for
 * target_bpw), replacing the step's own value; text NULL removes the option.
 * The step's cross-key checks run again, and the canonical JSON and hash
 * then cover the new value (npuc batch --target-size sets its recipe's
 * quantize step this way).  List options cannot be set.  Errors:
 * NPUC_ERR_ARG (no such step or option, a bad value, a check the step now
 * fails), with the recipe unchanged. */
NPUC_API npuc_status npuc_recipe_set_option(npuc_ctx *ctx, npuc_recipe *r, size_t step, const char *key,
                                            const char *text);

/* SHA-256 of a file's bytes as 64 lower-case hex digits and a NUL into
 * hex.  NPUC_ERR_NOT_FOUND / NPUC_ERR_IO naming the path on failure. */
NPUC_API npuc_status npuc_sha256_file(npuc_ctx *ctx, const char *path, char hex[65]);

/* ---------------------------------------------------------------- running */

typedef struct npuc_run_opts {
    npuc_write_opts write;        /* the artifact: format (AUTO: from out's extension, else
                                     the input's), overwrite, HDF5 settings */
    const char *input_sha256;     /* the input's SHA-256 when the caller already has it
                                     (npuc batch does); NULL: computed */
    /* Called when step `step` (0-based) of nsteps starts, and after each
     * tensor record of that step is complete.  Steps that stream into
     * each other run at the same time in threads of their own, so
     * on_tensor may come from any of them, one call at a time.  Either may
     * be NULL. */
    void (*on_step)(void *user, size_t step, size_t nsteps, npuc_step_kind kind);
    void (*on_tensor)(void *user, size_t step, size_t index, size_t count,
                      const npuc_tensor_record *r);
    /* Called once every step has succeeded, before the artifact is moved to
     * its path (and also when a quality gate then refuses it): a caller
     * that writes a report beside the artifact does it here, so an artifact
     * at its path always has its report.  A status
     * other than NPUC_OK (with a message set on ctx) fails the run and
     * nothing appears at out.  May be NULL. */
    npuc_status (*before_commit)(void *user, npuc_ctx *ctx, const npuc_summary *sum);
    void *user;
    int no_stream;                /* 1: every step writes its step file, none streams
                                     into the next (the output is the same either way) */
} npuc_run_opts;

NPUC_API npuc_run_opts npuc_run_opts_defaults(void);

/* Runs recipe r on the file in and writes one artifact to out.
 *
 * The steps run in order, each a whole pass: step k reads step k-1's result
 * and writes its step file ".<out>.npucstep-<pid>-<random>.s<k>.tmp" beside
 * out (through its own temporary file and rename), a name private to this
 * run: concurrent runs, in one folder or on one output, never share one
 * (docs/outputs.md) - except that a quantize step streams its input from the step
 * before it when the artifact is safetensors: the two run at the same time
 * and the intermediate tensors pass through memory, never through a file
 * (docs/recipes.md#how-a-recipe-runs; no_stream turns this off, the artifact
 * is byte-identical either way).  The last result is checked for the provenance entries and then
 * moved to out (link() without overwrite, rename() with it) and the
 * directory fsynced.  Intermediate files are removed as soon as the next
 * step has read them, and on any failure; a run killed by SIGKILL may
 * leave them, and the next run in out's folder (or npuc_recipe_sweep)
 * removes them once their run's lock is gone.
 *
 * *sum (pass "run") holds every step's records in step order, each with the
 * extra "step" (1-based) first; bytes/params "before" are the first step's,
 * "after" the last step's; weighted_sqnr_db is the one step's that measured
 * an error, NaN when several did (each step's figure is in
 * npuc_recipe_params_json).  Warnings are prefixed "step k (kind): ".
 *
 * Errors: NPUC_ERR_ARG with "<recipe>:<line>:<col>:" for a pattern that
 * matches no tensor of the step's input; a step's own failure with
 * "<in>: step k (kind, <recipe>:<line>:<col>): " before its message;
 * NPUC_ERR_EXISTS when out exists without write.overwrite;
 * NPUC_ERR_UNSUPPORTED for a step not available in this build.  On failure
 * nothing is written at out and *sum is empty, except NPUC_ERR_GATE: a
 * quality gate of ctx's policy (min_sqnr on a step's weighted SQNR,
 * min_layer_sqnr on each tensor) failed after every step ran; before_commit
 * was still called, nothing is at out, and *sum holds the run (the caller
 * reports it, then frees it).  An override marked `optional: true` that
 * matches no tensor of its step's input is not applied and is listed among
 * the warnings. */
NPUC_API npuc_status npuc_recipe_run(npuc_ctx *ctx, const npuc_recipe *r, const char *in, const char *out,
                            const npuc_run_opts *o, npuc_summary *sum);

/* A JSON object for npuc_report_info.params_json: {"recipe": <canonical>,
 * "recipe_file", "recipe_sha256", "input_sha256", "steps": [{"step", "kind",
 * "line", "tensors", "bytes_before", "bytes_after", "params_before",
 * "params_after", "weighted_sqnr_db"}]} computed from a run's summary.
 * input_sha256 may be NULL.  malloc'd; NULL when out of memory. */
NPUC_API char *npuc_recipe_params_json(const npuc_recipe *r, const npuc_summary *sum,
                              const char *input_sha256);

/* Sets *complete to 1 when out exists, opens as a weight file and records
 * this recipe's hash and the given input hash, else 0.  An output that
 * cannot be opened counts as incomplete (NPUC_OK); only an allocation
 * failure is an error. */
NPUC_API npuc_status npuc_recipe_output_complete(npuc_ctx *ctx, const npuc_recipe *r, const char *out,
                                        const char *input_sha256, int *complete);

/* Removes what a killed run writing out (and its report at report, which
 * may be NULL) can leave: "<out>.tmp", "<out>.s<k>.tmp", "<out>.s<k>.tmp.tmp"
 * and "<report>.tmp" (names of older versions), and in out's folder the
 * step files of every run that is no longer alive (its lock released).  *removed (may be NULL) gets the number of files
 * removed.  Fails with NPUC_ERR_IO only when a file exists and cannot be
 * removed. */
NPUC_API npuc_status npuc_recipe_sweep(npuc_ctx *ctx, const char *out, const char *report, size_t *removed);

/* ---------------------------------------------------------------- batches */

/* The weight files of a batch: paths to open and the relative paths their
 * outputs mirror, sorted by relative path (bytewise). */
typedef struct npuc_batch_list {
    char **path;  /* as opened: "<dir>/<rel>" or the listed path */
    char **rel;   /* relative path, the output mirrors it under the output folder */
    size_t n;
} npuc_batch_list;

/* Every weight file (.safetensors, .st, .h5, .hdf5, .keras) under dir,
 * recursively.  Directory symlinks are not followed; skip (may be NULL) is a
 * folder left out of the walk (the output folder when it lies inside dir).
 * NPUC_ERR_NOT_FOUND / NPUC_ERR_IO naming the folder on failure. */
NPUC_API npuc_status npuc_batch_list_dir(npuc_ctx *ctx, const char *dir, const char *skip,
                                npuc_batch_list *l);
/* The files named in a list file, one path a line; blank lines and lines
 * starting with '#' are skipped.  A relative output path is the listed path
 * without leading "./" and "/"; a path with a ".." component, an empty one,
 * or one listed twice is NPUC_ERR_ARG naming the list's line. */
NPUC_API npuc_status npuc_batch_list_file(npuc_ctx *ctx, const char *listfile, npuc_batch_list *l);
/* Keeps entries whose index i (in the sorted list) has i % count == index.
 * 0 <= index < count; count 1 keeps everything. */
NPUC_API void npuc_batch_list_shard(npuc_batch_list *l, size_t index, size_t count);
/* Frees what l holds and empties it; an empty list is a no-op. */
NPUC_API void npuc_batch_list_free(npuc_batch_list *l);

#ifdef __cplusplus
}
#endif
#endif
