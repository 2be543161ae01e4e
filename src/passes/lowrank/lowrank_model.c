/*
 * lowrank_model.c - factoring a whole model into an artifact.
 *
 * The writer is declare-then-stream (model.h): every output tensor's shape
 * must be known before the first payload is written.  With --energy or
 * --max-error a factor's shape depends on the spectrum, so the work comes
 * first and the writing after:
 *
 *   plan     select tensors (--include/--exclude, or every factorable weight),
 *            fail early on explicit selections that cannot be factored, on
 *            an existing output and on NaN/Inf in a selected tensor;
 *   factor   one tensor at a time: load, SVD, choose the rank, form the
 *            factors, measure the error, append the factors (already in the
 *            source dtype) to a spill file;
 *   declare  every output tensor and the "npuc" description;
 *   stream   copy untouched tensors from the model and factors from the spill.
 *
 * The spill file is created beside the output and unlinked at once, so it
 * never outlives the process whatever happens; memory stays at a few times
 * the largest tensor (plus the SVD's workspace), not the model.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codecs/artifact_meta.h"
#include "codecs/codec.h"
#include "npuc_internal.h"
#include "passes/lowrank/lowrank_internal.h"
#include "passes/pass_driver.h"
#include "passes/pass_sinks.h"
#include "passes/pass_util.h"

npuc_lowrank_opts npuc_lowrank_opts_defaults(void) {
    npuc_lowrank_opts o;
    memset(&o, 0, sizeof o);
    o.params = npuc_lowrank_params_defaults();
    o.write = npuc_write_opts_defaults();
    return o;
}

typedef struct lrplan {
    int select;              /* try to factor it */
    int explicit_sel;        /* matched --include */
    int factored;
    int64_t layer_rank;      /* fixed rank from a --layer-rank rule, 0 when none matched */
    int64_t rank;
    npuc_svd_solver solver;
    npuc_lowrank_geom g;
    npuc_tensor_info a, b;   /* factor shapes, with names */
    char *name_a, *name_b;
    uint64_t off;            /* spill offset of a; b follows */
} lrplan;

/* The default selection: float weights with a plain matrix view. */
static int eligible(const npuc_tensor_info *t, const char **why) {
    *why = NULL;
    if (t->rank < 2 || t->numel == 0) return 0;
    if (!npuc_dtype_is_float(t->dtype)) return 0;
    switch (t->layout) {
    case NPUC_LAYOUT_OI:
    case NPUC_LAYOUT_IO:
    case NPUC_LAYOUT_HWIO:
        return 1;
    case NPUC_LAYOUT_OIHW:
        if (t->role == NPUC_ROLE_DWCONV) { *why = "depthwise kernel: not factored"; return 0; }
        return 1;
    case NPUC_LAYOUT_HWIM: *why = "depthwise kernel: not factored"; return 0;
    case NPUC_LAYOUT_IOHW: *why = "transposed convolution: not factored"; return 0;
    default: return 0;
    }
}

static char *suffixed(const char *name, const char *suffix) {
    size_t a = strlen(name), b = strlen(suffix);
    char *s = malloc(a + b + 1);
    if (!s) return NULL;
    memcpy(s, name, a);
    memcpy(s + a, suffix, b + 1);
    return s;
}

/* The rank of each --layer-rank rule: "REGEX=R" with an integer R >= 1. */
static npuc_status layer_ranks(npuc_ctx *ctx, const npuc_lowrank_opts *o, const npuc_rules *lr, int64_t *ranks) {
    for (size_t k = 0; k < lr->n; k++) {
        const char *v = lr->value[k];
        char *end;
        errno = 0;
        long long r = strtoll(v, &end, 10);
        if (end == v || *end || errno == ERANGE || r < 1 || r > 2147483647LL)
            return npuc_fail(ctx, NPUC_ERR_ARG, "--layer-rank '%s': the rank after '=' must be an integer >= 1",
                             o->layer_rank[k]);
        ranks[k] = (int64_t)r;
    }
    return NPUC_OK;
}

/* Selection and rank rules per tensor.  A --layer-rank rule counts as used
 * when it matches any tensor name, even one an earlier rule decides (what a
 * recipe checks before the step runs); it applies only to tensors the
 * selection takes, and there a rank above min(m, n) is an error even without
 * --include: the rule names the tensor. */
static npuc_status make_plan(npuc_ctx *ctx, npuc_model *m, const npuc_lowrank_opts *o, lrplan *plan,
                             npuc_summary *sum) {
    const char *path = npuc_model_path(m);
    const size_t n = npuc_model_count(m);
    npuc_rules inc, exc, lr;
    int64_t *ranks = NULL;
    npuc_status st;
    memset(&inc, 0, sizeof inc);
    memset(&exc, 0, sizeof exc);
    memset(&lr, 0, sizeof lr);
    if ((st = npuc__rules_compile(ctx, &inc, o->include, o->ninclude, 0, "--include")) != NPUC_OK ||
        (st = npuc__rules_compile(ctx, &exc, o->exclude, o->nexclude, 0, "--exclude")) != NPUC_OK ||
        (st = npuc__rules_compile(ctx, &lr, o->layer_rank, o->nlayer_rank, 1, "--layer-rank")) != NPUC_OK)
        goto done;
    ranks = calloc(lr.n ? lr.n : 1, sizeof *ranks);
    if (!ranks) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
    if ((st = layer_ranks(ctx, o, &lr, ranks)) != NPUC_OK) goto done;
    for (size_t i = 0; i < n; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        npuc_tensor_record *r = &sum->records[i];
        lrplan *q = &plan[i];
        const char *why;
        int rule = -1; /* the first matching rule; every matching one counts as used */
        for (size_t k = 0; k < lr.n; k++)
            if (regexec(&lr.re[k], t->name, 0, NULL, 0) == 0) {
                lr.hits[k]++;
                if (rule < 0) rule = (int)k;
            }
        int el = eligible(t, &why);
        int in = inc.n ? npuc__rules_match(&inc, t->name) >= 0 : el;
        int ex = npuc__rules_match(&exc, t->name) >= 0;
        if (!in || ex) {
            if (why && !ex) snprintf(r->note, sizeof r->note, "%s", why);
            continue;
        }
        q->explicit_sel = inc.n > 0;
        if ((st = npuc_lowrank_geometry(ctx, t, &q->g)) != NPUC_OK) {
            st = npuc__prefix_path(ctx, st, path);
            goto done;
        }
        if (q->explicit_sel && t->role == NPUC_ROLE_DWCONV &&
            (st = npuc_summary_warn(sum, "%s: tensor '%s' looks like a depthwise kernel ([out, 1, kh, kw]); its "
                                         "factors are valid only if it is a regular convolution with one input "
                                         "channel", path, t->name)) != NPUC_OK) {
            st = npuc_fail(ctx, st, "out of memory");
            goto done;
        }
        int64_t mn = q->g.m < q->g.n ? q->g.m : q->g.n;
        if (rule >= 0) {
            q->layer_rank = ranks[rule];
            if (q->layer_rank > mn) {
                st = npuc_fail(ctx, NPUC_ERR_ARG,
                               "%s: tensor '%s': --layer-rank '%s' asks for rank %lld, above min(m, n) = %lld of "
                               "its %lldx%lld matrix",
                               path, t->name, o->layer_rank[rule], (long long)q->layer_rank, (long long)mn,
                               (long long)q->g.m, (long long)q->g.n);
                goto done;
            }
        } else if (o->params.rule == NPUC_RANK_FIXED && o->params.rank > mn) {
            if (q->explicit_sel) {
                st = npuc_fail(ctx, NPUC_ERR_ARG,
                               "%s: tensor '%s': --rank %lld exceeds min(m, n) = %lld of its %lldx%lld matrix", path,
                               t->name, (long long)o->params.rank, (long long)mn, (long long)q->g.m,
                               (long long)q->g.n);
                goto done;
            }
            snprintf(r->note, sizeof r->note, "no saving: rank %lld > min(m, n) = %lld", (long long)o->params.rank,
                     (long long)mn);
            npuc_record_set(r, "m", (double)q->g.m);
            npuc_record_set(r, "n", (double)q->g.n);
            continue;
        }
        q->select = 1;
        q->name_a = npuc__codec_part_dup(&npuc__codec_lowrank, "lr_a", t->name);
        q->name_b = npuc__codec_part_dup(&npuc__codec_lowrank, "lr_b", t->name);
        if (!q->name_a || !q->name_b) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
        size_t dup;
        if (npuc_model_find(m, q->name_a, &dup) == 0 || npuc_model_find(m, q->name_b, &dup) == 0) {
            st = npuc_fail(ctx, NPUC_ERR_ARG, "%s: tensor '%s': the model already has a tensor named '%s'", path,
                           t->name, npuc_model_tensor(m, dup)->name);
            goto done;
        }
    }
    if ((st = npuc__rules_check_hits(ctx, &inc, "--include", path)) != NPUC_OK ||
        (st = npuc__rules_check_hits(ctx, &exc, "--exclude", path)) != NPUC_OK ||
        (st = npuc__rules_check_hits(ctx, &lr, "--layer-rank", path)) != NPUC_OK)
        goto done;
done:
    npuc__rules_free(&inc);
    npuc__rules_free(&exc);
    npuc__rules_free(&lr);
    free(ranks);
    return st;
}

/* NaN or Inf in a selected tensor is found before any SVD runs: one pass
 * over the bytes (npuc_count_values, no conversion), so a bad file fails in
 * seconds instead of after minutes of work. */
static npuc_status check_finite(npuc_ctx *ctx, npuc_model *m, const lrplan *plan) {
    for (size_t i = 0; i < npuc_model_count(m); i++) {
        if (!plan[i].select) continue;
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        const void *p;
        npuc_value_counts c;
        npuc_status st = npuc_model_data(ctx, m, i, &p);
        if (st != NPUC_OK) return st;
        st = npuc_count_values(p, t->dtype, t->numel, &c);
        npuc_model_release(m, i);
        if (st != NPUC_OK) return npuc_fail(ctx, st, "%s: tensor '%s': cannot read its values", npuc_model_path(m), t->name);
        uint64_t bad = c.nan + c.inf;
        if (bad)
            return npuc_fail(ctx, NPUC_ERR_VALUE,
                             "%s: tensor '%s': %llu NaN/Inf value%s; low-rank factorisation needs finite weights",
                             npuc_model_path(m), t->name, (unsigned long long)bad, bad == 1 ? "" : "s");
    }
    return NPUC_OK;
}

/* ------------------------------------------------------------- spill file */

typedef struct spill {
    int fd;
    char *path;   /* for messages only: the file is unlinked */
    uint64_t size;
} spill;

static npuc_status spill_open(npuc_ctx *ctx, const char *out, spill *s) {
    s->fd = -1;
    s->size = 0;
    s->path = suffixed(out, ".lr-XXXXXX");
    if (!s->path) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    s->fd = mkstemp(s->path);
    if (s->fd < 0) return npuc_fail(ctx, NPUC_ERR_IO, "%s: cannot create a temporary file: %s", s->path, strerror(errno));
    unlink(s->path);
    return NPUC_OK;
}

static void spill_close(spill *s) {
    if (s->fd >= 0) close(s->fd);
    free(s->path);
    s->fd = -1;
    s->path = NULL;
}

static npuc_status spill_write(npuc_ctx *ctx, spill *s, const void *data, uint64_t n) {
    const char *p = data;
    while (n) {
        size_t chunk = n > (1u << 30) ? (1u << 30) : (size_t)n;
        ssize_t k = pwrite(s->fd, p, chunk, (off_t)s->size);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return npuc_fail(ctx, NPUC_ERR_IO, "%s: cannot write a temporary file: %s", s->path,
                                     k < 0 ? strerror(errno) : "no space");
        p += k;
        n -= (uint64_t)k;
        s->size += (uint64_t)k;
    }
    return NPUC_OK;
}

static npuc_status spill_read(npuc_ctx *ctx, const spill *s, uint64_t off, void *data, uint64_t n) {
    char *p = data;
    while (n) {
        size_t chunk = n > (1u << 30) ? (1u << 30) : (size_t)n;
        ssize_t k = pread(s->fd, p, chunk, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return npuc_fail(ctx, NPUC_ERR_IO, "%s: cannot read back a temporary file: %s", s->path,
                                     k < 0 ? strerror(errno) : "short read");
        p += k;
        n -= (uint64_t)k;
        off += (uint64_t)k;
    }
    return NPUC_OK;
}

/* ------------------------------------------------------------- factoring */

static void fill_record(npuc_tensor_record *r, const npuc_lowrank_result *res) {
    const double m = (double)res->g.m, n = (double)res->g.n, k = (double)res->rank;
    npuc_record_set(r, "rank", k);
    npuc_record_set(r, "m", m);
    npuc_record_set(r, "n", n);
    if (!isnan(res->energy)) npuc_record_set(r, "energy", res->energy);
    npuc_record_set(r, "flops_before", 2 * m * n);
    if (!res->factored) {
        snprintf(r->note, sizeof r->note, "no saving at rank %s%lld: r(m+n) >= mn for %lldx%lld",
                 res->rank_is_bound ? ">= " : "", (long long)res->rank, (long long)res->g.m, (long long)res->g.n);
        npuc_record_set(r, "flops_after", 2 * m * n);
        return;
    }
    r->action = NPUC_ACTION_FACTORED;
    snprintf(r->scheme, sizeof r->scheme, "r=%lld", (long long)res->rank);
    r->bytes_after = res->a_info.nbytes + res->b_info.nbytes;
    r->params_after = res->a_info.numel + res->b_info.numel;
    r->has_error = 1;
    r->err = res->err;
    npuc_record_set(r, "flops_after", 2 * k * (m + n));
    npuc_record_set(r, "solver", res->solver);
    npuc_record_set(r, "rel_fro_measured", res->rel_fro_measured);
}

static npuc_status factor_all(npuc__drive *d, const npuc_lowrank_opts *o, lrplan *plan, spill *sp) {
    npuc_ctx *ctx = d->ctx;
    npuc_model *m = d->m;
    const char *path = npuc_model_path(m);
    const size_t n = npuc_model_count(m);
    npuc_scratch s_in = {0}, s_cast = {0};
    npuc_status st = NPUC_OK;
    for (size_t i = 0; i < n; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        lrplan *q = &plan[i];
        npuc_tensor_record *r = &d->sum->records[i];
        if (!q->select) {
            npuc__drive_done(d, i);
            continue;
        }
        const float *w = NULL;
        npuc_lowrank_result res;
        npuc_lowrank_params p = o->params;
        if (q->layer_rank > 0) {
            p.rule = NPUC_RANK_FIXED;
            p.rank = q->layer_rank;
        }
        if ((st = npuc__load_f32(ctx, m, i, &s_in, &w)) != NPUC_OK) break;
        st = npuc_lowrank_tensor(ctx, t, w, &p, &res);
        npuc_model_release(m, i);
        if (st != NPUC_OK) { st = npuc__prefix_path(ctx, st, path); break; }
        q->factored = res.factored;
        q->rank = res.rank;
        q->solver = res.solver;
        fill_record(r, &res);
        if (res.factored) {
            q->a = res.a_info;
            q->b = res.b_info;
            q->a.name = q->name_a;
            q->b.name = q->name_b;
            q->a.group = q->b.group = t->group;
            q->off = sp->size;
            const float *parts[2] = {res.a, res.b};
            const npuc_tensor_info *infos[2] = {&q->a, &q->b};
            for (int k = 0; k < 2 && st == NPUC_OK; k++) {
                const void *bytes;
                if ((st = npuc__f32_as(ctx, t->dtype, parts[k], infos[k]->numel, &s_cast, &bytes)) == NPUC_OK)
                    st = spill_write(ctx, sp, bytes, infos[k]->nbytes);
            }
        }
        npuc_lowrank_result_free(&res);
        if (st != NPUC_OK) break;
        npuc__drive_done(d, i);
    }
    npuc__scratch_free(&s_in);
    npuc__scratch_free(&s_cast);
    return st;
}

/* ------------------------------------------------------------- writing */

/* An ONNX output writes each factored weight as a split node: one whose
 * node cannot be split (a grouped Conv, another op, several readers) is
 * found before any SVD.  Picked by --include: refused.  Picked by the
 * default selection: kept dense with a note, so that `npuc lowrank
 * model.onnx -o out.onnx` factors what it can write. */
static npuc_status keep_unsplittable(npuc__drive *d, lrplan *plan) {
    const char *path = d->w ? d->w->path : NULL;
    for (size_t i = 0; d->w && i < npuc_model_count(d->m); i++) {
        if (!plan[i].select) continue;
        char why[400];
        int ok = 1;
        npuc_status st = npuc__lowrank_graph_splittable(d->ctx, d->m, d->w, i, why, sizeof why, &ok);
        if (st != NPUC_OK) return st;
        if (ok) continue;
        const char *name = npuc_model_tensor(d->m, i)->name;
        if (plan[i].explicit_sel)
            return npuc_fail(d->ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s' %s; --exclude it, or write safetensors",
                             path, name, why);
        plan[i].select = 0;
        npuc_tensor_record *r = &d->sum->records[i];
        snprintf(r->note, sizeof r->note, "kept dense, no ONNX split: %.99s", why);
    }
    return NPUC_OK;
}

/* An ONNX output: the factored layers as split nodes (lowrank_graph.c). */
static npuc_status split_graph(npuc__drive *d, const lrplan *plan) {
    const size_t n = npuc_model_count(d->m);
    size_t ns = 0;
    for (size_t i = 0; i < n; i++) ns += plan[i].factored != 0;
    if (!ns || !d->w) return NPUC_OK;
    npuc__lowrank_split *sp = malloc(ns * sizeof *sp);
    if (!sp) return npuc_fail(d->ctx, NPUC_ERR_NOMEM, "out of memory");
    ns = 0;
    for (size_t i = 0; i < n; i++)
        if (plan[i].factored) sp[ns++] = (npuc__lowrank_split){i, &plan[i].a, &plan[i].b};
    npuc_status st = npuc__lowrank_graph_meta(d->ctx, d->m, d->w, sp, ns);
    free(sp);
    return st;
}

static npuc_status describe(json_t *art, const npuc_tensor_info *t, const lrplan *q) {
    json_t *e = npuc__art_add(art, t, npuc__codec_lowrank.name);
    if (!e || json_object_set_new(e, "parts", json_pack("[ss]", q->name_a, q->name_b)) ||
        json_object_set_new(e, "rank", json_integer((json_int_t)q->rank)) ||
        json_object_set_new(e, "matrix", json_pack("[II]", (json_int_t)q->g.m, (json_int_t)q->g.n)) ||
        json_object_set_new(e, "solver", json_string(npuc_svd_solver_name(q->solver))))
        return NPUC_ERR_NOMEM;
    return NPUC_OK;
}

npuc_status npuc__lowrank_model_to(npuc_ctx *ctx, npuc_model *m, const npuc__sink *to, const npuc_lowrank_opts *o,
                                   npuc_summary *sum) {
    const size_t n = npuc_model_count(m);
    npuc_status st = NPUC_OK;
    npuc__drive dr = {0};
    const char *out = to->path;
    npuc_scratch s_buf = {0};
    spill sp = {-1, NULL, 0};
    int blas = npuc__blas_enter();
    lrplan *plan = calloc(n ? n : 1, sizeof *plan);
    if ((st = npuc__drive_begin(&dr, ctx, m, to, "lowrank", o->on_tensor, o->user, sum)) != NPUC_OK) goto fail;
    if (!plan) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((st = npuc_lowrank_params_check(ctx, &o->params)) != NPUC_OK) goto fail;
    if ((st = npuc__reject_artifact(ctx, m, NULL)) != NPUC_OK) goto fail;
    if ((st = make_plan(ctx, m, o, plan, sum)) != NPUC_OK) goto fail;
    /* Never silent: the matrix split follows the layout (pass_guard.c). */
    for (size_t i = 0; i < n; i++)
        if (plan[i].select && (st = npuc__drive_guard(&dr, i, "the low-rank split")) != NPUC_OK) goto fail;
    /* Open the output first: an existing OUT without -f fails before the work. */
    if ((st = npuc__drive_open(&dr, NULL, NULL)) != NPUC_OK) goto fail;
    if ((st = keep_unsplittable(&dr, plan)) != NPUC_OK) goto fail;
    if ((st = check_finite(ctx, m, plan)) != NPUC_OK) goto fail;
    if ((st = spill_open(ctx, out, &sp)) != NPUC_OK) goto fail;
    if ((st = factor_all(&dr, o, plan, &sp)) != NPUC_OK) goto fail;
    if ((st = split_graph(&dr, plan)) != NPUC_OK) goto fail;

    if ((st = npuc__drive_artifact(&dr)) != NPUC_OK) goto fail;
    for (size_t i = 0; i < n; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        if (!plan[i].factored) {
            if ((st = npuc__drive_declare(&dr, t)) != NPUC_OK) goto fail;
            continue;
        }
        if ((st = npuc__drive_declare(&dr, &plan[i].a)) != NPUC_OK ||
            (st = npuc__drive_declare(&dr, &plan[i].b)) != NPUC_OK)
            goto fail;
        if (describe(dr.art, t, &plan[i]) != NPUC_OK) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto fail; }
    }
    if ((st = npuc__drive_describe(&dr)) != NPUC_OK) goto fail;
    for (size_t i = 0; i < n; i++) {
        const lrplan *q = &plan[i];
        if (!q->factored) {
            if ((st = npuc__drive_pass_through(&dr, i)) != NPUC_OK) goto fail;
            continue;
        }
        uint64_t off = q->off;
        const npuc_tensor_info *parts[2] = {&q->a, &q->b};
        for (int k = 0; k < 2; k++) {
            void *buf = npuc__scratch(&s_buf, parts[k]->nbytes);
            if (!buf) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto fail; }
            if ((st = spill_read(ctx, &sp, off, buf, parts[k]->nbytes)) != NPUC_OK ||
                (st = npuc__drive_write(&dr, buf, parts[k]->nbytes)) != NPUC_OK)
                goto fail;
            off += parts[k]->nbytes;
        }
    }
fail:
    st = npuc__drive_end(&dr, st);
    if (plan)
        for (size_t i = 0; i < n; i++) {
            free(plan[i].name_a);
            free(plan[i].name_b);
        }
    free(plan);
    spill_close(&sp);
    npuc__scratch_free(&s_buf);
    npuc__blas_leave(blas);
    return st;
}
