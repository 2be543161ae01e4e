/*
 * npuc/pass.h - pass descriptors: one row per pass (quantize, prune,
 * sparsify, lowrank, fold-bn) holding its option table, its recipe override
 * keys and its callbacks.
 *
 * The option table is the one place a pass's options are defined.  Each
 * row names the option twice - the recipe key ("group_size") and the
 * command-line flag ("group-size") - and gives its type, bounds, default,
 * help text and the command line's message for a bad value.  The pass
 * commands (`npuc quantize`, ...), their --help, the recipe parser (each
 * step's keys) and the parameters echoed in reports are all generated from
 * it, so a CLI flag and its recipe key cannot drift apart.
 *
 * Example (compiled by tests/cli/c_api.sh):
 *     const npuc_pass *p = npuc_pass_find("quantize");
 *     npuc_pass_optset *s;
 *     npuc_pass_optset_new(ctx, p, &s);
 *     npuc_pass_optset_set(ctx, s, npuc_pass_option_find(p, "bits"), "4");   // --bits 4
 *     npuc_pass_validate(ctx, s);                     // cross-option rules
 *     npuc_pass_io io = npuc_pass_io_defaults();
 *     npuc_summary sum;
 *     npuc_pass_run(ctx, s, model, "model.q4.safetensors", &io, &sum);     // npuc_quantize_model
 *     char *params;
 *     npuc_pass_params_json(ctx, s, &params);         // {"quantize":{"bits":4,...}}
 *     free(params);
 *     npuc_summary_free(&sum);
 *     npuc_pass_optset_free(s);
 *
 * Adding a pass: write src/passes/<pass>/<pass>_desc.c (one npuc_pass row
 * whose run calls the pass's public model-level function) and add it to the
 * list in src/passes/pass_table.c.  The command, its --help, the recipe step
 * and `npuc help --options` follow.
 */
#ifndef NPUC_PASS_H
#define NPUC_PASS_H

#include "api.h"

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "record.h"
#include "recipe.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Values are pinned. */
typedef enum npuc_opt_type {
    NPUC_OPT_BOOL = 0, /* a flag (no value on the command line); true/false in a recipe */
    NPUC_OPT_INT = 1,  /* a decimal integer in [lo, hi] */
    NPUC_OPT_NUM = 2,  /* a finite number between lo and hi (ends per NPUC_OPT_*_OPEN) */
    NPUC_OPT_STR = 3,  /* a string; `choices`, when set, lists the values allowed */
    NPUC_OPT_LIST = 4  /* repeatable strings (a string or a list in a recipe); with
                          NPUC_OPT_RULE each is "REGEX=VALUE" */
} npuc_opt_type;

/* Option flags.  The first four keep their values: recipes store them. */
#define NPUC_OPT_REGEX 0x1u   /* each string is a POSIX ERE that must match a tensor */
#define NPUC_OPT_RULE 0x2u    /* each string is "REGEX=VALUE"; REGEX must match a tensor */
#define NPUC_OPT_LO_OPEN 0x4u /* lo is excluded */
#define NPUC_OPT_HI_OPEN 0x8u /* hi is excluded */
#define NPUC_OPT_PATH 0x10u   /* a file name; in a recipe, relative to the recipe's folder */
#define NPUC_OPT_RULE_NUM 0x20u /* RULE: VALUE is a number (default: an integer) */

/* One option of a pass. */
typedef struct npuc_pass_option {
    const char *name;    /* the recipe key: "group_size" */
    const char *flag;    /* the command-line long flag without "--": "group-size" */
    int short_flag;      /* 'g', or 0 */
    npuc_opt_type type;
    double lo, hi;       /* INT, NUM: the bounds; RULE lists: the bounds of VALUE */
    unsigned flags;      /* NPUC_OPT_* */
    const char *const *choices; /* STR: the allowed values (NULL-terminated), or NULL */
    const char *noun;    /* STR with choices: what a value is ("scope"), for messages */
    const char *dflt;    /* the value the pass uses when the option is absent, as text
                            (parsed like a given value); NULL: none */
    const char *metavar; /* the value's name in --help: "N", "REGEX" */
    const char *section; /* the --help section it is listed in (a title of the pass's
                            sections); NULL: the first */
    const char *help;    /* --help text; "\n" starts a continuation line */
    const char *bad;     /* the command line's message for a value that fails the type,
                            bounds or check: "bit width must be 2..8" (printed after
                            "--bits '9': "); NULL: the check's own reason alone.  A list
                            option without one is checked by the pass when it runs. */
    /* An extra check of a string value (STR, LIST items): 0, or -1 with a
     * reason in why.  May be NULL. */
    int (*check)(const char *s, char *why, size_t n);
    int group;           /* > 0: at most one option of the group may be given */
    const char *needs;   /* "structured=filter": the option only applies beside this
                            one (documentation, tests); NULL: none */
    const char *override_key; /* LIST: recipe overrides with this key add rules here, in
                            front of the option's own values ("bits" -> layer_bits
                            "MATCH=N"; "skip" -> exclude "MATCH"); NULL: none */
} npuc_pass_option;

/* A --help section: a title ("Scheme") and a note printed under its options. */
typedef struct npuc_pass_section {
    const char *title;
    const char *note;    /* or NULL */
    int input;           /* 1: front ends list their input options (--layout) here */
} npuc_pass_section;

/* A value of the parameters a pass echoes into reports (npuc_pass_params_json). */
typedef struct npuc_pass_value {
    npuc_opt_type type;  /* BOOL, INT, NUM or STR */
    int null;            /* 1: JSON null */
    int b;
    int64_t i;
    double d;
    char s[64];
} npuc_pass_value;

/* One member of the echoed parameters, in order: an option's value (given,
 * else its default; a list as an array) or, with key NULL, a value the
 * pass derives (its echo_value callback). */
typedef struct npuc_pass_echo {
    const char *name;    /* the JSON member */
    const char *key;     /* the option, or NULL */
} npuc_pass_echo;

typedef struct npuc_pass_optset npuc_pass_optset;

/* Where a run's output goes: library-internal (passes are defined inside
 * libnpuc; callers give npuc_pass_run a path). */
struct npuc__sink;

/* What a pass's run gets besides its options. */
typedef struct npuc_pass_io {
    npuc_write_opts write;  /* output format, overwrite, HDF5 settings */
    /* Called after each tensor record is complete (calling thread); may be NULL. */
    void (*on_tensor)(void *user, size_t index, size_t count, const npuc_tensor_record *r);
    void *user;
    int dry_run;            /* a pass with a plan (fold-bn): plan and measure, write
                               nothing (out may be NULL) */
    void **plan;            /* a pass with a plan: when not NULL, receives the plan on
                               success (fold-bn: a malloc'd npuc_bnfold_plan the caller
                               frees with npuc_bnfold_plan_free and free) */
    uint64_t pct_base;      /* what a budget's "N%" (quantize --target-size) is a percentage
                               of, in bytes: a recipe run's input file size; 0: the size of
                               the model the pass reads (docs/budget.md) */
} npuc_pass_io;

NPUC_API npuc_pass_io npuc_pass_io_defaults(void);

/* Pass flags. */
#define NPUC_PASS_WARNINGS 0x1u     /* front ends print the summary's warnings */
#define NPUC_PASS_NO_SQNR_WARN 0x2u /* the report's low-SQNR warning does not apply (the
                                       error is the point of the pass, not noise) */

typedef struct npuc_pass {
    const char *name;     /* the command and the recipe step: "quantize", "fold-bn" */
    npuc_step_kind kind;
    const char *summary;  /* one line for `npuc --help` */
    const char *usage;    /* what follows "Usage: npuc <name> "; "\n" may add lines */
    const char *intro;    /* --help paragraphs after the usage */
    const char *footer;   /* --help's last paragraph (errors) */
    const char *verb;     /* "quantizing", for progress lines */
    const char *output_help; /* --help text of -o: what is written, its default name */
    const char *json_help;   /* --help text of --json */
    const npuc_pass_section *sections; /* title NULL ends; the front end adds its output
                                          options to the section titled "Output" */
    const npuc_pass_option *options;
    size_t noptions;
    const char *const *override_keys; /* recipe override keys honoured (besides "match"),
                                         in the order messages list them; NULL-terminated */
    const npuc_pass_echo *echo;       /* the echoed parameters; name NULL ends */
    const char *const *base;          /* the smallest valid option set, "key=value"
                                         (examples, tests); NULL-terminated */
    unsigned flags;                   /* NPUC_PASS_* */
    /* The tag of the default output name "<stem>.<tag><ext>" ("q8", "pruned")
     * into buf; NULL when the pass has no default output (-o is required). */
    void (*tag)(const npuc_pass_optset *s, char *buf, size_t n);
    /* Rules between options, after every value is typed: NPUC_ERR_ARG with the
     * message (in a recipe's terms for a recipe's options).  May be NULL. */
    npuc_status (*validate)(npuc_ctx *ctx, const npuc_pass_optset *s);
    /* A derived echoed value (an echo entry without key): 0, 1 to leave the
     * member out, -1 on error. */
    int (*echo_value)(const npuc_pass_optset *s, const char *name, npuc_pass_value *v);
    /* Typed options -> the pass's options struct -> its model-level function,
     * writing to `to` (a file, or the in-memory stream of `npuc run`). */
    npuc_status (*run)(npuc_ctx *ctx, const npuc_pass_optset *s, npuc_model *m, const struct npuc__sink *to,
                       const npuc_pass_io *io, npuc_summary *sum);
} npuc_pass;

/* The passes, in recipe-step order (fold-bn, prune, sparsify, lowrank,
 * quantize).  npuc_pass_at returns NULL for i >= the count; npuc_pass_find
 * NULL for an unknown name.  The descriptors are static: never freed. */
NPUC_API size_t npuc_pass_count(void);
NPUC_API const npuc_pass *npuc_pass_at(size_t i);
NPUC_API const npuc_pass *npuc_pass_find(const char *name);
NPUC_API const npuc_pass *npuc_pass_of_kind(npuc_step_kind k);
/* The option with recipe key `name`, or NULL. */
NPUC_API const npuc_pass_option *npuc_pass_option_find(const npuc_pass *p, const char *name);

/* An empty option set for p: every option at its default.  NPUC_ERR_NOMEM. */
NPUC_API npuc_status npuc_pass_optset_new(npuc_ctx *ctx, const npuc_pass *p, npuc_pass_optset **out);
/* NULL is a no-op. */
NPUC_API void npuc_pass_optset_free(npuc_pass_optset *s);
/* The pass s was made for (static). */
NPUC_API const npuc_pass *npuc_pass_optset_pass(const npuc_pass_optset *s);

/* Sets o (an option of the set's pass) from command-line text, checked
 * against its type, bounds, choices and check: a flag takes text NULL; a
 * list option appends; any other replaces an earlier value.  text is
 * copied.  A bad value is NPUC_ERR_ARG with "--<flag> '<text>': <bad>" (or
 * the check's reason) in ctx. */
NPUC_API npuc_status npuc_pass_optset_set(npuc_ctx *ctx, npuc_pass_optset *s, const npuc_pass_option *o,
                                          const char *text);
/* 1 when the option with recipe key `name` was given. */
NPUC_API int npuc_pass_optset_has(const npuc_pass_optset *s, const char *name);

/* The pass's rules between options (a required option, a mutually
 * exclusive pair): NPUC_OK or NPUC_ERR_ARG with the message in ctx. */
NPUC_API npuc_status npuc_pass_validate(npuc_ctx *ctx, const npuc_pass_optset *s);

/* The default output tag into buf (see npuc_pass.tag); 0, or -1 when the
 * pass has none. */
NPUC_API int npuc_pass_output_tag(const npuc_pass_optset *s, char *buf, size_t n);

/* Runs the pass on m, writing out (io may be NULL: defaults).  The same
 * contract as the pass's model-level function (npuc_quantize_model, ...):
 * on success *sum is the caller's (npuc_summary_free); on failure it is
 * empty, nothing is written at out and ctx has the message (NPUC_ERR_GATE
 * when a quality gate of the context's policy failed: then *sum is filled
 * and must be freed, but nothing was published). */
NPUC_API npuc_status npuc_pass_run(npuc_ctx *ctx, const npuc_pass_optset *s, npuc_model *m, const char *out,
                                   const npuc_pass_io *io, npuc_summary *sum);

/* The parameters of a run, for npuc_report_info.params_json:
 * {"<pass>":{...the echo entries...}}, compact, malloc'd into *out (the
 * caller frees).  NPUC_ERR_NOMEM. */
NPUC_API npuc_status npuc_pass_params_json(npuc_ctx *ctx, const npuc_pass_optset *s, char **out);

/* Every pass's option table as one JSON document (schema
 * "npuc.pass_options/1", docs/cli.md#npuc-help---options), malloc'd into
 * *out (the caller frees it with free()); for front ends' completion and
 * the option tests.  NPUC_ERR_NOMEM. */
NPUC_API npuc_status npuc_pass_options_json(npuc_ctx *ctx, char **out);

#ifdef __cplusplus
}
#endif

#endif
