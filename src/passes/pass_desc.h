/*
 * pass_desc.h - the library side of the pass descriptors (npuc/pass.h):
 * the typed option set and what the <pass>_desc.c files use to read it.
 *
 * A typed option set is a list of recipe_opt values, each pointing at its
 * option row.  The recipe parser fills one per step, with the line and
 * column of every value so later errors can cite them; the command line
 * fills one through npuc_pass_optset_set (no marks).  A pass's run reads it
 * through the getters below, which give the option's default when it is
 * absent, so the default in the table is the one the pass uses, --help
 * shows and reports echo.  A recipe step's set also carries the step's
 * overrides: npuc__pass_list() puts the rules they make in front of the
 * option's own values (npuc_pass_option.override_key).
 */
#ifndef NPUC_PASS_DESC_H
#define NPUC_PASS_DESC_H

#include <stddef.h>
#include <stdint.h>

#include "npuc_internal.h"
#include "npuc/pass.h"
#include "passes/pass_sinks.h"

/* The typed values keep the names the recipe code has always used. */
typedef struct recipe_mark {
    int line, col; /* 1-based; 0 when unknown (the command line) */
} recipe_mark;

typedef npuc_pass_option recipe_key;
#define RT_BOOL NPUC_OPT_BOOL
#define RT_INT NPUC_OPT_INT
#define RT_NUM NPUC_OPT_NUM
#define RT_STR NPUC_OPT_STR
#define RT_LIST NPUC_OPT_LIST
#define RK_REGEX NPUC_OPT_REGEX
#define RK_RULE NPUC_OPT_RULE
#define RK_LO_OPEN NPUC_OPT_LO_OPEN
#define RK_HI_OPEN NPUC_OPT_HI_OPEN

typedef struct recipe_opt {
    const recipe_key *key;
    int b;
    int64_t i;
    double d;
    char *s;
    char **list;
    recipe_mark *lmark; /* one per list item */
    size_t nlist;
    recipe_mark mark;   /* of the value (of the key when the value has none) */
    int seq;            /* when it was given, counting every value of the set: the
                           later of two options wins where they contradict */
} recipe_opt;

typedef struct recipe_optset {
    recipe_opt *v;
    size_t n;
    recipe_mark mark;
} recipe_optset;

struct npuc_pass_optset {
    const npuc_pass *pass;
    recipe_optset own;         /* the values of a set made by npuc_pass_optset_new */
    const recipe_optset *opts; /* &own, or a recipe step's options */
    const recipe_optset *ov;   /* a recipe step's overrides (each has "match"), or NULL */
    size_t nov;
    const char *recipe;        /* the recipe's path (messages, relative files); NULL: CLI */
    int *log;                  /* CLI: the option index of every value given, in order */
    size_t nlog;
    int nseq;
    const struct npuc__strv *lists; /* while a run lasts: every list option's strings
                                       (npuc__pass_list), by option index */
};

/* A view of a recipe step's options as a pass option set (no allocation). */
void npuc__pass_optset_view(npuc_pass_optset *s, const npuc_pass *p, const recipe_optset *opts,
                            const recipe_optset *ov, size_t nov, const char *recipe);

/* Frees the values of a set of options (not the set itself). */
void npuc__optset_free_values(recipe_optset *s);

/* Looks up an option by key name; NULL when absent. */
const recipe_opt *npuc__ropt(const recipe_optset *s, const char *name);

/* The given value of option `name`, or NULL. */
const recipe_opt *npuc__pass_get(const npuc_pass_optset *s, const char *name);
/* Given values, else the table's default (0 / 0.0 / NULL without one). */
int npuc__pass_bool(const npuc_pass_optset *s, const char *name);
int64_t npuc__pass_int(const npuc_pass_optset *s, const char *name);
/* NPUC_OK when v is inside the bounds pass's option name declares (its
 * .lo/.hi in the option table: the one place a bound is written), else the
 * table's message for it ("--bits '9': bit width must be 2..8"), for values
 * that reach a pass through the C API rather than the option parser.  shown:
 * the text the message quotes (NULL: v itself). */
npuc_status npuc__pass_check_value(npuc_ctx *ctx, const char *pass, const char *name, double v, const char *shown);
double npuc__pass_num(const npuc_pass_optset *s, const char *name);
const char *npuc__pass_str(const npuc_pass_optset *s, const char *name);
/* The later given of options a and b (by seq); NULL when neither was. */
const recipe_opt *npuc__pass_later(const npuc_pass_optset *s, const char *a, const char *b);

/* A list of strings, some owned. */
typedef struct npuc__strv {
    const char **v;
    char **own;
    size_t n, nown;
} npuc__strv;
void npuc__strv_free(npuc__strv *v);
/* *out := the rules the overrides make for list option `name` (its
 * override_key), then its own values.  -1 out of memory. */
int npuc__pass_list(const npuc_pass_optset *s, const char *name, npuc__strv *out);
/* Inside a pass's run: list option `name` as npuc__pass_list made it
 * (npuc_pass_run gathers them all before the run and frees them after). */
const npuc__strv *npuc__pass_strv(const npuc_pass_optset *s, const char *name);

/* What every pass's options struct has under the same names: the include /
 * exclude lists (options "include" and "exclude") and the output options. */
#define NPUC__PASS_SELECT(o, s)                                                                         \
    ((o).include = npuc__pass_strv(s, "include")->v, (o).ninclude = npuc__pass_strv(s, "include")->n, \
     (o).exclude = npuc__pass_strv(s, "exclude")->v, (o).nexclude = npuc__pass_strv(s, "exclude")->n)
#define NPUC__PASS_IO(o, io) ((o).write = (io)->write, (o).on_tensor = (io)->on_tensor, (o).user = (io)->user)

/* A descriptor's tables, when its file names them SECTIONS, OPTIONS,
 * OVERRIDES, ECHO and BASE (every <pass>_desc.c does). */
#define NPUC__PASS_TABLES                                                                                   \
    .sections = SECTIONS, .options = OPTIONS, .noptions = sizeof OPTIONS / sizeof OPTIONS[0],                \
    .override_keys = OVERRIDES, .echo = ECHO, .base = BASE

/* A PATH option's value, relative to the recipe's folder in a recipe;
 * malloc'd into *out (NULL when absent).  -1 out of memory. */
int npuc__pass_path(const npuc_pass_optset *s, const char *name, char **out);

/* 1 when the set came from the command line (messages in flag terms). */
int npuc__pass_is_cli(const npuc_pass_optset *s);

/* NPUC_ERR_ARG for a rule between options: on the command line `msg`; in a
 * recipe "<file>:<line>:<col>: step '<pass>': msg" at o's mark (the step's
 * when o is NULL). */
npuc_status npuc__pass_fail(npuc_ctx *ctx, const npuc_pass_optset *s, const recipe_opt *o, const char *msg);

/* "<file>:<line>:<col>: " into buf (or "<file>: " without a mark). */
const char *npuc__recipe_where(const char *file, recipe_mark m, char *buf, size_t n);

/* Recipe-side checks shared by option rows and recipe keys. */
int npuc__check_nm(const char *s, char *why, size_t n);
int npuc__check_range(const char *s, char *why, size_t n);
/* A STR option's choices: 0 when s is one, else -1 and "'s' is not a <noun> (a, b)". */
int npuc__check_choice(const npuc_pass_option *o, const char *s, char *why, size_t n);

/* npuc_pass_run with the output as a sink (pass_driver.h): `npuc run` hands
 * a step the in-memory pipe its next step reads this way. */
npuc_status npuc__pass_run_to(npuc_ctx *ctx, const npuc_pass_optset *s, npuc_model *m, const npuc__sink *to,
                              const npuc_pass_io *io, npuc_summary *sum);

#endif
