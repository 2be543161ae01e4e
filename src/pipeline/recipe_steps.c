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

#include "pipeline/recipe_internal.h"

static npuc_status run_step(npuc_ctx *ctx, const recipe_step *s, npuc_model *m, const char *out,
                            const recipe_hooks *h, npuc_summary *sum) {
    npuc_pass_optset view;
    npuc__pass_optset_view(&view, npuc_pass_of_kind(s->kind), &s->opts, s->ov, s->nov, h->recipe);
    npuc_pass_io io = npuc_pass_io_defaults();
    io.write = h->write;
    io.on_tensor = h->on_tensor;
    io.user = h->user;
    const npuc__sink to = {out, NULL, h->sink_open, h->sink_state};
    return npuc__pass_run_to(ctx, &view, m, &to, &io, sum);
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
