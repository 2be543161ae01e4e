/*
 * sparsify_model.c - N:M sparsity of a whole model, dense or compressed,
 * with the roofline estimate of what it buys on an NPU.
 *
 * Plan (selection, geometry, the cost estimate) before anything is
 * written; then every tensor is declared (compressed: "<name>" holds the
 * kept values as [C, groups * N] in the source dtype, "<name>.nm_meta" the
 * packed positions, described by an "nm_sparse" artifact entry); then the
 * tensors stream one at a time.  docs/sparsity.md explains the grouping,
 * the cost model and the warnings.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codecs/artifact_meta.h"
#include "codecs/codec.h"
#include "codecs/entry_fields.h"
#include "passes/pass_driver.h"
#include "passes/pass_sinks.h"
#include "passes/pass_util.h"
#include "passes/sparsify/sparsify_nm.h"

npuc_sparsify_opts npuc_sparsify_opts_defaults(void) {
    npuc_sparsify_opts o;
    memset(&o, 0, sizeof o);
    o.n = 2;
    o.m = 4;
    o.cost = npuc_cost_model_defaults();
    o.write = npuc_write_opts_defaults();
    return o;
}

typedef struct splan {
    int sparsify;
    npuc_nm_geom g;
    npuc_nm_cost cost;
    char *meta_name;
} splan;

/* A list of names for a warning: the first few, then "and N more". */
static void name_list(char *buf, size_t n, const char *const *names, size_t count) {
    size_t k = 0;
    buf[0] = 0;
    for (size_t i = 0; i < count && i < 4 && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s'%s'", i ? ", " : "", names[i]);
    if (count > 4 && k < n) snprintf(buf + k, n - k, " and %zu more", count - 4);
}

static npuc_status declare_nm(npuc_ctx *ctx, npuc_writer *w, json_t *art, const npuc_tensor_info *t,
                              splan *p) {
    const npuc_nm_geom *g = &p->g;
    npuc_tensor_info v;
    memset(&v, 0, sizeof v);
    v.name = t->name;
    v.dtype = t->dtype;
    v.rank = 2;
    v.shape[0] = (int64_t)g->channels;
    v.shape[1] = (int64_t)(g->kept / (g->channels ? g->channels : 1));
    v.group = t->group;
    npuc_status st = npuc_writer_declare(w, &v);
    if (st != NPUC_OK) return st;
    p->meta_name = npuc__codec_part_dup(&npuc__codec_nm_sparse, "meta", t->name);
    if (!p->meta_name) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    npuc_tensor_info mt;
    memset(&mt, 0, sizeof mt);
    mt.name = p->meta_name;
    mt.dtype = NPUC_DTYPE_U8;
    mt.rank = 1;
    mt.shape[0] = (int64_t)g->meta_bytes;
    mt.group = t->group;
    if ((st = npuc_writer_declare(w, &mt)) != NPUC_OK) return st;
    json_t *e = npuc__art_add(art, t, npuc__codec_nm_sparse.name);
    if (!e || npuc__nm_entry_set(e, g, t->name, p->meta_name, NULL) ||
        json_object_set_new(e, "parts", json_pack("[ss]", t->name, p->meta_name)))
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    return NPUC_OK;
}

npuc_status npuc__sparsify_model_to(npuc_ctx *ctx, npuc_model *m, const npuc__sink *to, const npuc_sparsify_opts *o,
                                    npuc_summary *sum) {
    const char *path = npuc_model_path(m);
    const size_t n = npuc_model_count(m);
    npuc_status st = NPUC_OK;
    npuc__drive dr = {0};
    npuc_scratch s_in = {0}, s_out = {0}, s_cast = {0}, s_val = {0}, s_meta = {0};
    npuc_rules inc, exc;
    memset(&inc, 0, sizeof inc);
    memset(&exc, 0, sizeof exc);
    memset(sum, 0, sizeof *sum);
    const char **shortl = NULL, **payl = NULL, *first_sp = NULL, *last_sp = NULL;
    size_t nshort = 0, npay = 0;
    splan *plan = NULL;
    if (!npuc__nm_ok(o->n, o->m))
        return npuc_fail(ctx, NPUC_ERR_ARG, "--pattern %d:%d: need " NPUC__NM_BOUNDS, o->n, o->m);
    if (!(o->cost.peak_tops > 0) || !(o->cost.bandwidth_gbs > 0) || !(o->cost.tokens > 0) ||
        !isfinite(o->cost.peak_tops) || !isfinite(o->cost.bandwidth_gbs) || !isfinite(o->cost.tokens))
        return npuc_fail(ctx, NPUC_ERR_ARG, "--peak-tops, --bandwidth and --tokens must be positive");
    if ((st = npuc__reject_artifact(ctx, m, "sparsifying")) != NPUC_OK) return st;
    plan = calloc(n ? n : 1, sizeof *plan);
    shortl = calloc(n ? n : 1, sizeof *shortl);
    payl = calloc(n ? n : 1, sizeof *payl);
    if ((st = npuc__drive_begin(&dr, ctx, m, to, "sparsify", o->on_tensor, o->user, sum)) != NPUC_OK) goto fail;
    if (!plan || !shortl || !payl) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((st = npuc__rules_compile(ctx, &inc, o->include, o->ninclude, 0, "--include")) != NPUC_OK ||
        (st = npuc__rules_compile(ctx, &exc, o->exclude, o->nexclude, 0, "--exclude")) != NPUC_OK)
        goto fail;

    /* Plan. */
    size_t ncand = 0, nsp = 0;
    for (size_t i = 0; i < n; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        npuc_tensor_record *r = &sum->records[i];
        const int named = inc.n && npuc__rules_match(&inc, t->name) >= 0;
        const int excluded = npuc__rules_match(&exc, t->name) >= 0;
        npuc_nm_geom g;
        const int rc = npuc__nm_geom(t, o->n, o->m, &g);
        const int weight = t->rank >= 2 && npuc_dtype_is_float(t->dtype) && t->numel > 0 &&
                           npuc_layout_out_axis(t->layout, t->rank) >= 0 && t->role != NPUC_ROLE_EMBEDDING;
        if (weight && rc == 0) ncand++;
        const int want = inc.n ? named : weight;
        if (!want || excluded) continue;
        if (!npuc__rules_names(&inc, t->name) && npuc__kept_role(t, r->note, sizeof r->note)) continue;
        if (!npuc_dtype_is_float(t->dtype) || t->numel == 0) {
            npuc__fmt(r->note, sizeof r->note, "%s", t->numel == 0 ? "empty" : "not a float tensor");
            continue;
        }
        if (rc != 0) {
            if (named) {
                st = npuc_nm_geometry(ctx, t, o->n, o->m, &g);
                st = npuc__prefix_path(ctx, st == NPUC_OK ? NPUC_ERR_ARG : st, path);
                goto fail;
            }
            if (rc == -2) {
                npuc__fmt(r->note, sizeof r->note, "input-channel axis %llu < M=%d%s: N:M cannot apply",
                         (unsigned long long)g.in, o->m, g.in == 1 ? " (depthwise)" : "");
                shortl[nshort++] = t->name;
            } else {
                npuc__fmt(r->note, sizeof r->note, "no channel layout");
            }
            continue;
        }
        splan *p = &plan[i];
        p->sparsify = 1;
        p->g = g;
        const double vb = (double)npuc_dtype_size(t->dtype);
        npuc_nm_cost_of(&g, vb, vb, &o->cost, &p->cost);
        nsp++;
        if (!first_sp) first_sp = t->name;
        last_sp = t->name;
        r->action = NPUC_ACTION_SPARSIFIED;
        r->has_error = 1;
        snprintf(r->scheme, sizeof r->scheme, "%d:%d", o->n, o->m);
        npuc_record_set(r, "n", o->n);
        npuc_record_set(r, "m", o->m);
        npuc_record_set(r, "sparsity_target", (double)(o->m - o->n) / (double)o->m);
        npuc_record_set(r, "ai", p->cost.ai);
        npuc_record_set(r, o->n == 2 && o->m == 4 ? "speedup_24" : "speedup_nm", p->cost.speedup);
        npuc_record_set(r, "bytes_sparse", (double)g.kept * vb + (double)g.meta_bytes);
        npuc_record_set(r, "bytes_meta", (double)g.meta_bytes);
        if (o->compressed) {
            r->bytes_after = g.kept * npuc_dtype_size(t->dtype) + g.meta_bytes;
            r->params_after = g.kept;
        }
        if (p->cost.speedup < NPUC_NM_MIN_GAIN) {
            payl[npay++] = t->name;
            npuc__fmt(r->note, sizeof r->note, "cannot pay: est. %.2fx (%s-bound, AI %.3g FLOP/B, ridge %.3g)",
                     p->cost.speedup, p->cost.ai < p->cost.ridge ? "memory" : "compute", p->cost.ai, p->cost.ridge);
        } else if (g.in % (uint64_t)o->m) {
            npuc__fmt(r->note, sizeof r->note, "input axis %llu: last group of each tap short (%llu)",
                     (unsigned long long)g.in, (unsigned long long)(g.in % (uint64_t)o->m));
        }
    }
    if ((st = npuc__rules_check_hits(ctx, &inc, "--include", path)) != NPUC_OK ||
        (st = npuc__rules_check_hits(ctx, &exc, "--exclude", path)) != NPUC_OK)
        goto fail;

    /* Never silent: N:M groups run along the reduction axis the layout names. */
    for (size_t i = 0; i < n; i++)
        if (plan[i].sparsify && (st = npuc__drive_guard(&dr, i, "N:M groups along the reduction axis")) != NPUC_OK)
            goto fail;

    /* Declare. */
    if ((st = npuc__drive_open(&dr, NULL, NULL)) != NPUC_OK || (st = npuc__drive_artifact(&dr)) != NPUC_OK) goto fail;
    for (size_t i = 0; i < n; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        if (plan[i].sparsify && o->compressed) st = declare_nm(ctx, dr.w, dr.art, t, &plan[i]);
        else st = npuc__drive_declare(&dr, t);
        if (st != NPUC_OK) goto fail;
    }
    if ((st = npuc__drive_describe(&dr)) != NPUC_OK) goto fail;

    /* Stream. */
    for (size_t i = 0; i < n; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        npuc_tensor_record *r = &sum->records[i];
        const void *raw;
        if (!plan[i].sparsify) {
            if ((st = npuc__drive_pass_through(&dr, i)) != NPUC_OK) goto fail;
            npuc__drive_done(&dr, i);
            continue;
        }
        const npuc_nm_geom *g = &plan[i].g;
        const float *x;
        if ((st = npuc__load_f32(ctx, m, i, &s_in, &x)) != NPUC_OK) goto fail;
        float *y = npuc__scratch(&s_out, t->numel * sizeof(float));
        if (!y) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: tensor '%s': out of memory", path, t->name); goto fail; }
        npuc_prune_stats ps;
        if ((st = npuc_nm_sparsify(ctx, t, g, x, y, &ps)) != NPUC_OK) {
            npuc_model_release(m, i);
            st = npuc__prefix_path(ctx, st, path);
            goto fail;
        }
        if ((st = npuc_model_data(ctx, m, i, &raw)) != NPUC_OK) goto fail;
        if (o->compressed) {
            const size_t es = npuc_dtype_size(t->dtype);
            void *vals = npuc__scratch(&s_val, g->kept * es);
            uint8_t *meta = npuc__scratch(&s_meta, g->meta_bytes);
            if (!vals || !meta) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto fail; }
            npuc_nm_pack(g, y, raw, es, vals, meta);
            if ((st = npuc__drive_write(&dr, vals, g->kept * es)) == NPUC_OK)
                st = npuc__drive_write(&dr, meta, g->meta_bytes);
        } else {
            st = npuc__write_pruned(ctx, dr.w, t, raw, y, &s_cast);
        }
        npuc_model_release(m, i);
        if (st != NPUC_OK) goto fail;
        r->err = ps.err;
        npuc_record_set(r, "sparsity", (double)ps.zeros / (double)t->numel);
        npuc_record_set(r, "zeros", (double)ps.zeros);
        npuc_record_set(r, "pruned", (double)ps.k);
        npuc__drive_done(&dr, i);
    }

    char names[400];
    if (nshort) {
        name_list(names, sizeof names, shortl, nshort);
        npuc_summary_warn(sum, "%zu tensor(s) not sparsified: input-channel axis shorter than M=%d, where %d:%d "
                          "has nothing to choose from and cannot pay (depthwise convolutions read one input channel "
                          "per output; first layers read 3 colour channels): %s", nshort, o->m, o->n, o->m, names);
    }
    if (npay) {
        name_list(names, sizeof names, payl, npay);
        npuc_summary_warn(sum, "%zu layer(s) where %d:%d cannot pay (estimated speedup below %.1fx at %g "
                          "token(s), %g TOPS, %g GB/s): %s", npay, o->n, o->m, NPUC_NM_MIN_GAIN, o->cost.tokens,
                          o->cost.peak_tops, o->cost.bandwidth_gbs, names);
    }
    if (nsp && nsp == ncand && ncand > 1)
        npuc_summary_warn(sum, "every layer %d:%d can apply to was sparsified, '%s' and '%s' included: sparsifying "
                          "every layer usually costs accuracy that only fine-tuning recovers (2:4 recipes prune, "
                          "then retrain); consider --exclude for the first and last layers", o->n, o->m, first_sp,
                          last_sp);
fail:
    st = npuc__drive_end(&dr, st);
    npuc__rules_free(&inc);
    npuc__rules_free(&exc);
    if (plan)
        for (size_t i = 0; i < n; i++) free(plan[i].meta_name);
    free(plan);
    free(shortl);
    free(payl);
    npuc__scratch_free(&s_in);
    npuc__scratch_free(&s_out);
    npuc__scratch_free(&s_cast);
    npuc__scratch_free(&s_val);
    npuc__scratch_free(&s_meta);
    return st;
}
