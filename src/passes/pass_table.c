/*
 * pass_table.c - the list of pass descriptors, and the public calls that
 * dispatch to a descriptor's callbacks.
 *
 * The order is the recipe steps' (npuc_step_kind).  A new pass is one
 * src/passes/<pass>/<pass>_desc.c file and one line here.
 */
#include <stdlib.h>
#include <string.h>

#include "passes/pass_desc.h"

/* Each defined in src/passes/<pass>/<pass>_desc.c. */
extern const npuc_pass npuc__pass_fold_bn, npuc__pass_prune, npuc__pass_sparsify, npuc__pass_lowrank,
    npuc__pass_quantize;

static const npuc_pass *const PASSES[] = {
    &npuc__pass_fold_bn, &npuc__pass_prune, &npuc__pass_sparsify, &npuc__pass_lowrank, &npuc__pass_quantize,
};
#define NPASSES (sizeof PASSES / sizeof PASSES[0])

size_t npuc_pass_count(void) { return NPASSES; }

const npuc_pass *npuc_pass_at(size_t i) { return i < NPASSES ? PASSES[i] : NULL; }

const npuc_pass *npuc_pass_find(const char *name) {
    for (size_t i = 0; name && i < NPASSES; i++)
        if (strcmp(PASSES[i]->name, name) == 0) return PASSES[i];
    return NULL;
}

const npuc_pass *npuc_pass_of_kind(npuc_step_kind k) {
    for (size_t i = 0; i < NPASSES; i++)
        if (PASSES[i]->kind == k) return PASSES[i];
    return NULL;
}

const npuc_pass_option *npuc_pass_option_find(const npuc_pass *p, const char *name) {
    for (size_t i = 0; p && name && i < p->noptions; i++)
        if (strcmp(p->options[i].name, name) == 0) return &p->options[i];
    return NULL;
}

npuc_pass_io npuc_pass_io_defaults(void) {
    npuc_pass_io io;
    memset(&io, 0, sizeof io);
    io.write = npuc_write_opts_defaults();
    return io;
}

npuc_status npuc_pass_validate(npuc_ctx *ctx, const npuc_pass_optset *s) {
    return s->pass->validate ? s->pass->validate(ctx, s) : NPUC_OK;
}

int npuc_pass_output_tag(const npuc_pass_optset *s, char *buf, size_t n) {
    if (!s->pass->tag) return -1;
    s->pass->tag(s, buf, n);
    return 0;
}

/* The lists (overrides' rules first) are made here once for every pass, so
 * a pass's run only points its options struct at them. */
npuc_status npuc_pass_run(npuc_ctx *ctx, const npuc_pass_optset *s, npuc_model *m, const char *out,
                          const npuc_pass_io *io, npuc_summary *sum) {
    const npuc__sink to = {out, NULL, NULL, NULL};
    return npuc__pass_run_to(ctx, s, m, &to, io, sum);
}

npuc_status npuc__pass_run_to(npuc_ctx *ctx, const npuc_pass_optset *s, npuc_model *m, const npuc__sink *to,
                              const npuc_pass_io *io, npuc_summary *sum) {
    const npuc_pass *p = s->pass;
    npuc_pass_io dflt = npuc_pass_io_defaults();
    npuc_pass_optset v = *s;
    npuc__strv *lists = calloc(p->noptions ? p->noptions : 1, sizeof *lists);
    npuc_status st = NPUC_OK;
    for (size_t i = 0; lists && i < p->noptions && st == NPUC_OK; i++)
        if (p->options[i].type == NPUC_OPT_LIST && npuc__pass_list(s, p->options[i].name, &lists[i]) != 0)
            st = NPUC_ERR_NOMEM;
    if (!lists || st != NPUC_OK) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    } else {
        v.lists = lists;
        st = p->run(ctx, &v, m, to, io ? io : &dflt, sum);
    }
    for (size_t i = 0; lists && i < p->noptions; i++) npuc__strv_free(&lists[i]);
    free(lists);
    return st;
}
