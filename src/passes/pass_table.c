/*
 * pass_table.c - the list of pass descriptors, and the public calls that
 * dispatch to a descriptor's callbacks.
 *
 * The order is the recipe steps' (npuc_step_kind).  A new pass is one
 * src/passes/<pass>/<pass>_desc.c file and one line here.
 */
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

npuc_status npuc_pass_run(npuc_ctx *ctx, const npuc_pass_optset *s, npuc_model *m, const char *out,
                          const npuc_pass_io *io, npuc_summary *sum) {
    npuc_pass_io dflt = npuc_pass_io_defaults();
    return s->pass->run(ctx, s, m, out, io ? io : &dflt, sum);
}
