/*
 * recipe_internal.h - what the recipe parser (recipe_parse.c), the step
 * adapters (recipe_steps.c) and the runner (recipe_run.c) share.
 *
 * A parsed recipe keeps every option as a typed value with the place it
 * came from, so errors found later (a pattern that matches nothing in the
 * model) still cite the recipe's line and column.  Each step kind is an
 * adapter (recipe_step_def): the table of keys it accepts, which override
 * keys it honours, a cross-key check, and a run function that turns the
 * options into its pass's options and calls the pass's model-level driver.
 */
#ifndef NPUC_RECIPE_INTERNAL_H
#define NPUC_RECIPE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "npuc_internal.h"

typedef struct recipe_mark {
    int line, col; /* 1-based; 0 when unknown */
} recipe_mark;

typedef enum recipe_type {
    RT_BOOL,
    RT_INT,
    RT_NUM,
    RT_STR,
    RT_LIST /* strings; a single scalar is a list of one */
} recipe_type;

/* Key flags. */
enum {
    RK_REGEX = 1u << 0,   /* each string is a POSIX ERE that must match a tensor */
    RK_RULE = 1u << 1,    /* each string is "REGEX=VALUE"; the REGEX must match a tensor */
    RK_LO_OPEN = 1u << 2, /* lo is exclusive */
    RK_HI_OPEN = 1u << 3  /* hi is exclusive */
};

typedef struct recipe_key {
    const char *name;
    recipe_type type;
    double lo, hi;  /* RT_INT / RT_NUM bounds */
    unsigned flags;
    /* Extra check of a string value: returns 0, or -1 with a reason in why. */
    int (*check)(const char *s, char *why, size_t n);
} recipe_key;

typedef struct recipe_opt {
    const recipe_key *key;
    int b;
    int64_t i;
    double d;
    char *s;
    char **list;
    recipe_mark *lmark; /* one per list item */
    size_t nlist;
    recipe_mark mark;    /* of the value (of the key when the value has none) */
} recipe_opt;

typedef struct recipe_optset {
    recipe_opt *v;
    size_t n;
    recipe_mark mark;
} recipe_optset;

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

/* Looks up an option by key name; NULL when absent. */
const recipe_opt *npuc__ropt(const recipe_optset *s, const char *name);

/* What a step's run function gets besides its options. */
typedef struct recipe_hooks {
    npuc_write_opts write;
    const char *recipe; /* the recipe's path: files it names are relative to its folder */
    void (*on_tensor)(void *user, size_t index, size_t count, const npuc_tensor_record *r);
    void *user;
} recipe_hooks;

typedef struct recipe_step_def {
    const char *name;
    const recipe_key *keys;             /* terminated by name NULL */
    const char *const *override_keys;   /* override keys honoured (besides "match") */
    /* Cross-key checks after every value is typed; message with the mark. */
    npuc_status (*validate)(npuc_ctx *ctx, const char *file, const recipe_step *s);
    npuc_status (*run)(npuc_ctx *ctx, const recipe_step *s, npuc_model *in, const char *out,
                       const recipe_hooks *h, npuc_summary *sum);
} recipe_step_def;

/* The adapter of each kind (recipe_steps.c); run is NULL for a step whose
 * pass this build lacks. */
const recipe_step_def *npuc__recipe_step_def(npuc_step_kind k);

/* The override keys every step may name; a step honours a subset. */
extern const recipe_key npuc__recipe_override_keys[];

/* "<file>:<line>:<col>: " into buf (or "<file>: " without a mark). */
const char *npuc__recipe_where(const char *file, recipe_mark m, char *buf, size_t n);

/* Hex SHA-256 of n bytes. */
int npuc__sha256_hex(const void *p, size_t n, char hex[65]);

#endif
