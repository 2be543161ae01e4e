/*
 * prune_model.c - unstructured magnitude pruning of a whole model.
 *
 * Layer scope: each selected tensor gets exactly floor(S * n) zeros
 * (npuc_prune_magnitude).  Global scope: floor(S * total) zeros over all
 * selected tensors together, the smallest magnitudes anywhere, ties going to
 * the tensor earlier in storage order and then to the lower index; the
 * threshold is found by radix selection streaming the tensors (three
 * counting passes), then each tensor is written with its share.  A tensor
 * matched by a --layer-sparsity rule "REGEX=S" gets floor(S * n) zeros of its
 * own in either scope, and is left out of the global pool: a per-layer
 * target and a share of a global budget cannot both hold.
 *
 * The output has the same tensors, names, dtypes, shapes and metadata;
 * pruned tensors hold zeros where weights were removed.  Structured pruning
 * (filters / channels) lives in prune_struct.c: npuc_prune_model begins the
 * run (pass_driver.h) and hands it the rest.  Also here: the per-layer
 * targets both use (npuc__layer_sparsity).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/pass_driver.h"
#include "passes/pass_sinks.h"
#include "passes/prune/prune_internal.h"

/* Structured pruning (prune_struct.c) as the rest of the run dr, which
 * npuc_prune_model began; it ends dr. */
npuc_status npuc__structured_prune(npuc__drive *dr, const npuc_prune_opts *o);

npuc_prune_opts npuc_prune_opts_defaults(void) {
    npuc_prune_opts o;
    memset(&o, 0, sizeof o);
    o.sparsity = 0.5;
    o.write = npuc_write_opts_defaults();
    return o;
}

/* ------------------------------------------------------------ selection */

npuc_status npuc__layer_sparsity(npuc_ctx *ctx, npuc_model *m, const npuc_prune_opts *o, double *sp,
                                 unsigned char *own) {
    npuc_rules ls;
    npuc_status st = npuc__rules_compile(ctx, &ls, o->layer_sparsity, o->nlayer_sparsity, 1, "--layer-sparsity");
    if (st != NPUC_OK) return st;
    double *val = calloc(ls.n ? ls.n : 1, sizeof *val);
    if (!val) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t k = 0; k < ls.n; k++) {
        const char *v = ls.value[k];
        char *end;
        errno = 0;
        val[k] = strtod(v, &end);
        if (end == v || *end || errno == ERANGE || !(val[k] >= 0.0 && val[k] < 1.0)) {
            st = npuc_fail(ctx, NPUC_ERR_ARG, "--layer-sparsity '%s': the sparsity after '=' must be a number in [0, 1)",
                           o->layer_sparsity[k]);
            goto done;
        }
    }
    /* The first matching rule decides; every rule that matches a name counts
     * as used, so one shadowed by an earlier rule is not "matching nothing". */
    for (size_t i = 0; i < npuc_model_count(m); i++) {
        const char *name = npuc_model_tensor(m, i)->name;
        int r = -1;
        for (size_t k = 0; k < ls.n; k++)
            if (regexec(&ls.re[k], name, 0, NULL, 0) == 0) {
                ls.hits[k]++;
                if (r < 0) r = (int)k;
            }
        sp[i] = r >= 0 ? val[r] : o->sparsity;
        if (own) own[i] = r >= 0;
    }
    st = npuc__rules_check_hits(ctx, &ls, "--layer-sparsity", npuc_model_path(m));
done:
    free(val);
    npuc__rules_free(&ls);
    return st;
}

/* Marks the tensors to prune: --include (default rank >= 2), minus
 * --exclude, float and non-empty only, never a bias, norm or BatchNorm
 * tensor that no --include rule names exactly (npuc__kept_role).  Rules must
 * each match something. */
static npuc_status select_tensors(npuc_ctx *ctx, npuc_model *m, const npuc_prune_opts *o, unsigned char *sel,
                                  npuc_tensor_record *rec) {
    npuc_rules inc, exc;
    npuc_status st;
    memset(&inc, 0, sizeof inc);
    memset(&exc, 0, sizeof exc);
    if ((st = npuc__rules_compile(ctx, &inc, o->include, o->ninclude, 0, "--include")) != NPUC_OK ||
        (st = npuc__rules_compile(ctx, &exc, o->exclude, o->nexclude, 0, "--exclude")) != NPUC_OK)
        goto done;
    for (size_t i = 0; i < npuc_model_count(m); i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        int in = inc.n ? npuc__rules_match(&inc, t->name) >= 0 : t->rank >= 2;
        int ex = npuc__rules_match(&exc, t->name) >= 0;
        sel[i] = 0;
        if (!in || ex) continue;
        if (!npuc__rules_names(&inc, t->name) && npuc__kept_role(t, rec[i].note, sizeof rec[i].note)) continue;
        if (!npuc_dtype_is_float(t->dtype)) {
            npuc__fmt(rec[i].note, sizeof rec[i].note, "not a float tensor");
            continue;
        }
        if (t->numel == 0) {
            npuc__fmt(rec[i].note, sizeof rec[i].note, "empty");
            continue;
        }
        sel[i] = 1;
    }
    if ((st = npuc__rules_check_hits(ctx, &inc, "--include", npuc_model_path(m))) != NPUC_OK ||
        (st = npuc__rules_check_hits(ctx, &exc, "--exclude", npuc_model_path(m))) != NPUC_OK)
        goto done;
done:
    npuc__rules_free(&inc);
    npuc__rules_free(&exc);
    return st;
}

/* ------------------------------------------------------------ global scope */

typedef struct model_src {
    npuc_model *m;
    const size_t *idx;
    npuc_scratch *scr;
} model_src;

static npuc_status msrc_get(void *u, size_t i, const float **x, uint64_t *n) {
    model_src *s = u;
    /* The context is not at hand here; errors carry the model's path via
     * the caller, which re-prefixes. */
    npuc_status st = npuc__load_f32(NULL, s->m, s->idx[i], s->scr, x);
    *n = npuc_model_tensor(s->m, s->idx[i])->numel;
    return st;
}

static void msrc_put(void *u, size_t i) {
    model_src *s = u;
    npuc_model_release(s->m, s->idx[i]);
}

/* ------------------------------------------------------------ the pass */

npuc_status npuc__prune_model_to(npuc_ctx *ctx, npuc_model *m, const npuc__sink *to, const npuc_prune_opts *o,
                                 npuc_summary *sum) {
    const char *path = npuc_model_path(m);
    const size_t n = npuc_model_count(m);
    npuc_status st = NPUC_OK;
    npuc__drive dr = {0};
    npuc_scratch s_in = {0}, s_out = {0}, s_cast = {0};
    size_t *idx = NULL;
    unsigned char *sel = NULL, *own = NULL;
    double *target = NULL;
    memset(sum, 0, sizeof *sum);
    if (!(o->sparsity >= 0.0 && o->sparsity < 1.0))
        return npuc_fail(ctx, NPUC_ERR_ARG, "--sparsity %g: must be in [0, 1)", o->sparsity);
    if ((st = npuc__drive_begin(&dr, ctx, m, to, "prune", o->on_tensor, o->user, sum)) != NPUC_OK) goto fail;
    if (o->structure != NPUC_PRUNE_UNSTRUCTURED) return npuc__structured_prune(&dr, o);
    if (o->scope != NPUC_PRUNE_LAYER && o->scope != NPUC_PRUNE_GLOBAL) {
        st = npuc_fail(ctx, NPUC_ERR_ARG, "unknown pruning scope %d", (int)o->scope);
        goto fail;
    }
    if ((st = npuc__reject_artifact(ctx, m, "pruning")) != NPUC_OK) goto fail;
    sel = calloc(n ? n : 1, 1);
    own = calloc(n ? n : 1, 1);
    idx = calloc(n ? n : 1, sizeof *idx);
    target = calloc(n ? n : 1, sizeof *target);
    if (!sel || !own || !idx || !target) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((st = select_tensors(ctx, m, o, sel, sum->records)) != NPUC_OK) goto fail;
    if ((st = npuc__layer_sparsity(ctx, m, o, target, own)) != NPUC_OK) goto fail;

    /* Global scope: one threshold over every selected tensor without a
     * --layer-sparsity rule of its own (those are pruned alone at their S). */
    size_t nsel = 0;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        if (sel[i] && !own[i]) {
            idx[nsel++] = i;
            total += npuc_model_tensor(m, i)->numel;
        }
    uint32_t gt = 0;
    uint64_t gties = 0;
    if (o->scope == NPUC_PRUNE_GLOBAL && nsel) {
        model_src ms = {m, idx, &s_in};
        npuc__mag_src src = {nsel, msrc_get, msrc_put, &ms};
        uint64_t nbad = 0, kglob = (uint64_t)floor(o->sparsity * (double)total);
        if ((st = npuc__mag_select_radix(ctx, &src, kglob, &gt, &gties, &nbad)) != NPUC_OK) {
            if (st != NPUC_ERR_NOMEM && st != NPUC_ERR_INTERNAL)
                st = npuc_fail(ctx, st, "%s: reading a tensor failed", path);
            goto fail;
        }
        if (nbad) { /* name the first offender */
            for (size_t a = 0; a < nsel && st == NPUC_OK; a++) {
                const float *x;
                if ((st = npuc__load_f32(ctx, m, idx[a], &s_in, &x)) != NPUC_OK) goto fail;
                uint64_t nb = 0;
                for (uint64_t e = 0; e < npuc_model_tensor(m, idx[a])->numel; e++) nb += npuc_mag(x[e]) >= NPUC_MAG_BAD;
                npuc_model_release(m, idx[a]);
                if (nb) st = npuc__prune_bad_values(ctx, npuc_model_tensor(m, idx[a])->name, nb);
            }
            st = npuc__prefix_path(ctx, st == NPUC_OK ? NPUC_ERR_VALUE : st, path);
            goto fail;
        }
    }

    if ((st = npuc__drive_open(&dr, NULL, NULL)) != NPUC_OK || (st = npuc__drive_declare_inputs(&dr)) != NPUC_OK)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        npuc_tensor_record *r = &sum->records[i];
        if (!sel[i]) {
            if ((st = npuc__drive_pass_through(&dr, i)) != NPUC_OK) goto fail;
            npuc__drive_done(&dr, i);
            continue;
        }
        const float *x;
        if ((st = npuc__load_f32(ctx, m, i, &s_in, &x)) != NPUC_OK) goto fail;
        float *y = npuc__scratch(&s_out, t->numel * sizeof(float));
        if (!y) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: tensor '%s': out of memory", path, t->name); goto fail; }
        npuc_prune_stats ps;
        memset(&ps, 0, sizeof ps);
        uint64_t k;
        const int alone = o->scope == NPUC_PRUNE_LAYER || own[i];
        if (alone) {
            k = (uint64_t)floor(target[i] * (double)t->numel);
            if ((st = npuc_prune_magnitude(ctx, x, t->numel, k, y, &ps)) != NPUC_OK) {
                char msg[NPUC_MSG_MAX];
                snprintf(msg, sizeof msg, "%s", npuc_ctx_errmsg(ctx));
                st = npuc_fail(ctx, st, "%s: tensor '%s': %s", path, t->name, msg);
                goto fail;
            }
        } else {
            npuc_prune_sums s;
            memset(&s, 0, sizeof s);
            const uint64_t before = gties;
            if ((st = npuc__mag_apply(ctx, x, t->numel, gt, &gties, y, &s)) != NPUC_OK) goto fail;
            ps.n = t->numel;
            ps.zeros = s.zeros;
            ps.threshold = (float)s.max_e;
            npuc__prune_error(&s, t->numel, &ps.err);
            /* With a threshold above 0 every output zero was pruned (kept
             * values have larger magnitudes); at 0 only the ties taken were. */
            k = gt > 0 ? s.zeros : before - gties;
        }
        const void *src = NULL;
        if (t->dtype != NPUC_DTYPE_F32 && (st = npuc_model_data(ctx, m, i, &src)) != NPUC_OK) goto fail;
        st = npuc__write_pruned(ctx, dr.w, t, src, y, &s_cast);
        npuc_model_release(m, i);
        if (st != NPUC_OK) goto fail;
        r->action = NPUC_ACTION_PRUNED;
        r->has_error = 1;
        r->err = ps.err;
        snprintf(r->scheme, sizeof r->scheme, "%s", alone ? "mag/layer" : "mag/global");
        npuc_record_set(r, "sparsity_target", target[i]);
        npuc_record_set(r, "sparsity", (double)ps.zeros / (double)t->numel);
        npuc_record_set(r, "zeros", (double)ps.zeros);
        npuc_record_set(r, "pruned", (double)k);
        npuc_record_set(r, "threshold", ps.threshold);
        npuc__drive_done(&dr, i);
    }
fail:
    st = npuc__drive_end(&dr, st);
    free(sel);
    free(own);
    free(target);
    free(idx);
    npuc__scratch_free(&s_in);
    npuc__scratch_free(&s_out);
    npuc__scratch_free(&s_cast);
    return st;
}
