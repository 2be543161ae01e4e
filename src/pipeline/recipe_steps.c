/*
 * recipe_steps.c - the step kinds of a recipe, each its pass's descriptor
 * (npuc/pass.h): the step's keys are the pass's option table, its override
 * keys the descriptor's, its cross-key checks the descriptor's validate,
 * and running it is the descriptor's run on a view of the step's options.
 *
 * Overrides become the pass's own per-tensor rules, placed before the rules
 * the step's options give, so that "the first matching rule wins" lets the
 * more specific recipe entry decide (npuc__pass_list: bits -> quantize's
 * layer_bits "REGEX=N", rank -> lowrank's layer_rank, skip -> exclude, ...).
 */
#include <pthread.h>
#include <regex.h>
#include <stdlib.h>

#include "pipeline/recipe_internal.h"

int npuc__recipe_override_optional(const recipe_optset *ov) {
    const recipe_opt *o = npuc__ropt(ov, "optional");
    return o && o->b;
}

/* 1 when the override's pattern matches a tensor of m (as the pass will
 * match it: a POSIX extended regex anywhere in the name). */
static int override_hits(const recipe_optset *ov, const npuc_model *m) {
    regex_t re;
    if (regcomp(&re, npuc__ropt(ov, "match")->s, REG_EXTENDED | REG_NOSUB) != 0) return 1; /* the pass says why */
    int hit = 0;
    for (size_t t = 0; t < npuc_model_count(m) && !hit; t++)
        hit = regexec(&re, npuc_model_tensor(m, t)->name, 0, NULL, 0) == 0;
    regfree(&re);
    return hit;
}

/* Runs the step's pass on m.  Optional overrides that match no tensor of m
 * are left out of the pass's rules (which would refuse a rule matching
 * nothing) and noted in the step's summary, so one recipe serves a zoo of
 * models that do not all have the named layers. */
static npuc_status run_step(npuc_ctx *ctx, const recipe_step *s, npuc_model *m, const char *out,
                            const recipe_hooks *h, npuc_summary *sum) {
    recipe_optset *ov = calloc(s->nov ? s->nov : 1, sizeof *ov);
    size_t *missed = calloc(s->nov ? s->nov : 1, sizeof *missed);
    size_t nov = 0, nmissed = 0;
    if (!ov || !missed) {
        free(ov);
        free(missed);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    for (size_t k = 0; k < s->nov; k++) {
        if (npuc__recipe_override_optional(&s->ov[k]) && !override_hits(&s->ov[k], m)) missed[nmissed++] = k;
        else ov[nov++] = s->ov[k];
    }
    npuc_pass_optset view;
    npuc__pass_optset_view(&view, npuc_pass_of_kind(s->kind), &s->opts, ov, nov, h->recipe);
    npuc_pass_io io = npuc_pass_io_defaults();
    io.write = h->write;
    io.on_tensor = h->on_tensor;
    io.user = h->user;
    io.pct_base = h->pct_base;
    const npuc__sink to = {out, NULL, h->sink_open, h->sink_state};
    npuc_status st = npuc__pass_run_to(ctx, &view, m, &to, &io, sum);
    for (size_t j = 0; j < nmissed && (st == NPUC_OK || st == NPUC_ERR_GATE); j++) {
        const recipe_opt *mt = npuc__ropt(&s->ov[missed[j]], "match");
        if (npuc_summary_warn(sum, "optional override '%s' (%s:%d:%d) matches no tensor: not applied", mt->s,
                              h->recipe, mt->mark.line, mt->mark.col) != NPUC_OK) {
            npuc_summary_free(sum);
            st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        }
    }
    free(ov);
    free(missed);
    return st;
}

/* Filled once from the pass table, so a new pass needs no line here. */
static recipe_step_def DEFS[NPUC_STEP_COUNT];
static pthread_once_t defs_once = PTHREAD_ONCE_INIT;

static void defs_init(void) {
    for (int k = 0; k < NPUC_STEP_COUNT; k++) {
        const npuc_pass *p = npuc_pass_of_kind((npuc_step_kind)k);
        DEFS[k] = (recipe_step_def){p ? p->name : "?", p, p && p->run ? run_step : NULL};
    }
}

const recipe_step_def *npuc__recipe_step_def(npuc_step_kind k) {
    if ((unsigned)k >= NPUC_STEP_COUNT) return NULL;
    pthread_once(&defs_once, defs_init);
    return &DEFS[k];
}
