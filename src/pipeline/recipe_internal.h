/*
 * recipe_internal.h - what the recipe parser (recipe_parse.c), the step
 * adapters (recipe_steps.c) and the runner (recipe_run.c) share.
 *
 * A parsed recipe keeps every option as a typed value with the place it
 * came from (passes/pass_desc.h), so errors found later (a pattern that
 * matches nothing in the model) still cite the recipe's line and column.
 * A step's keys, the override keys it honours, its cross-key checks and its
 * run all come from its pass's descriptor (npuc/pass.h).
 */
#ifndef NPUC_RECIPE_INTERNAL_H
#define NPUC_RECIPE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "npuc_internal.h"
#include "passes/pass_desc.h"

typedef struct recipe_step {
    npuc_step_kind kind;
    recipe_mark mark;
    recipe_optset opts;
    recipe_optset *ov; /* overrides, in order; each has "match" */
    size_t nov;
} recipe_step;

struct npuc_recipe {
    char *name;
    recipe_step *steps;
    size_t nsteps;
    char **layout;
    recipe_mark *layout_mark;
    size_t nlayout;
    char *json;
    char sha[65];
};

/* recipe_files.c: one run's anchor (an atomic file for out, flock-held
 * while the run lives) and its step files ".<out>.npucstep-<id>.s<k>.tmp"
 * (k = 1..nsteps, <id> the anchor's pid and random part), registered for
 * signal cleanup.  open fails with NPUC_ERR_EXISTS when out
 * exists without overwrite (out_dir: a directory output, whose path its
 * format's move_dir judges instead), and first sweeps the step files of
 * dead runs in out's folder.  close removes the step files (a directory
 * step: its files, then it), then the anchor; it accepts a zeroed or
 * half-opened f. */
typedef struct npuc__run_files {
    npuc_atomic_file *anchor;
    char **paths;
    size_t n;
} npuc__run_files;
npuc_status npuc__run_files_open(npuc_ctx *ctx, const char *out, size_t nsteps, int overwrite, int out_dir,
                                 npuc__run_files *f);
void npuc__run_files_close(npuc__run_files *f);
/* Moves the finished file tmp to out: link() without overwrite (an output
 * that appeared meanwhile gives NPUC_ERR_EXISTS), rename() with it; then
 * fsyncs the folder. */
npuc_status npuc__run_commit(npuc_ctx *ctx, const char *tmp, const char *out, int overwrite);
/* Removes, in out's folder, the step files (and their writers' temporary
 * files) of every run whose anchor is gone or unlocked; returns how many.
 * *err (may be NULL) gets the first unlink errno other than ENOENT. */
size_t npuc__step_files_sweep(const char *out, int *err);

/* recipe_yaml_guard.c: the text is UTF-8 without NUL bytes (checked before
 * libfyaml sees it); the document, built with aliases unresolved, expands to
 * a bounded number of nodes and depth, and is then resolved.  NPUC_ERR_ARG
 * naming the recipe. */
struct fy_document;
npuc_status npuc__recipe_text_check(npuc_ctx *ctx, const char *name, const char *text, size_t len);
npuc_status npuc__recipe_yaml_check(npuc_ctx *ctx, const char *name, struct fy_document *doc);

/* What a step's run function gets besides its options. */
typedef struct recipe_hooks {
    npuc_write_opts write;
    const char *recipe; /* the recipe's path: files it names are relative to its folder */
    void (*on_tensor)(void *user, size_t index, size_t count, const npuc_tensor_record *r);
    void *user;
    /* The step's output when it is not the file at out: the in-memory pipe
     * the next step reads (npuc__pipe_sink_open and the pipe); NULL: a file. */
    npuc__sink_open_fn sink_open;
    void *sink_state;
    uint64_t pct_base; /* the run's input file size, for "N%" budgets (npuc_pass_io) */
} recipe_hooks;

/* A step kind's adapter: its pass descriptor (whose option table is the
 * step's keys) and the run that hands the step's options and overrides to
 * the pass. */
typedef struct recipe_step_def {
    const char *name;
    const npuc_pass *pass;
    npuc_status (*run)(npuc_ctx *ctx, const recipe_step *s, npuc_model *in, const char *out,
                       const recipe_hooks *h, npuc_summary *sum);
} recipe_step_def;

/* The adapter of each kind (recipe_steps.c). */
const recipe_step_def *npuc__recipe_step_def(npuc_step_kind k);

/* The override keys every step may name; a step honours a subset. */
extern const recipe_key npuc__recipe_override_keys[];

/* 1 when the override is marked `optional: true`: matching no tensor of
 * the step's input is then a note in the step's summary, not a failure
 * (docs/recipes.md#optional-overrides). */
int npuc__recipe_override_optional(const recipe_optset *ov);

/* Hex SHA-256 of n bytes. */
int npuc__sha256_hex(const void *p, size_t n, char hex[65]);

#endif
