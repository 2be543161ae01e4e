/*
 * quantize_model.c - quantizing a whole model into an artifact.
 *
 * Three phases:
 *   plan     decide for every tensor whether it is quantized and how (rank
 *            >= 2 float tensors by default, --include/--exclude, --layer-bits,
 *            the edge layers kept at 8 bits below 8 bits: graph_roles.h);
 *            every rule must match something and every selected tensor must
 *            have a channel axis, or the run fails before anything is written;
 *   declare  every output tensor (codes, scales, zero points, or the tensor
 *            itself) and the "npuc" description, so the writer can lay out the
 *            file before the first payload;
 *   stream   one tensor at a time: load (the backend's buffer itself when the
 *            source is aligned F32, else a converted copy), quantize, write,
 *            release.  Scratch buffers
 *            grow to the largest tensor and are reused, so peak anonymous
 *            memory is about twice the largest tensor, whatever the model size.
 *
 * The input may be an artifact whose entries are "fake_quant" (dense already)
 * or "lowrank" (npuc lowrank's output): the factors "<W>.lr_a"/"<W>.lr_b" are
 * stored float tensors like any other and are quantized under their own
 * names, so the output holds nested entries (docs/artifact.md): the
 * "lowrank" entry for W, carried over unchanged, names parts that now have
 * "quant" entries of their own.  Entries for tensors this run does not touch
 * are carried over unchanged too; any other encoding is refused (decompress
 * first).  For the 8-bit edge rule the two factors of W are one layer.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "codecs/artifact_meta.h"
#include "codecs/codec.h"
#include "codecs/entry_fields.h"
#include "graph/graph_roles.h"
#include "kernels/npuc_kernels.h"
#include "npuc_internal.h"
#include "passes/pass_desc.h"
#include "passes/pass_driver.h"
#include "passes/pass_sinks.h"
#include "passes/pass_util.h"
#include "passes/quantize/budget_alloc.h"
#include "passes/quantize/quant_gptq.h"
#include "passes/sparsify/sparsify_nm.h"
#include "calib_out_error.h"
#include "gguf/gguf_format.h"

npuc_quantize_opts npuc_quantize_opts_defaults(void) {
    npuc_quantize_opts o;
    memset(&o, 0, sizeof o);
    o.params = npuc_quant_params_defaults();
    o.write = npuc_write_opts_defaults();
    o.damp = 0.01;
    return o;
}

typedef struct qplan {
    int quantize;
    npuc_quant_params p;
    npuc_quant_shape qs;
    int packed;
    int nm;             /* --pattern applies (see the end of this file) */
    int gptq;           /* --method gptq with calibration data for this tensor */
    int pinned;         /* scheme fixed by --layer-bits, --layer-group-size or the edge rule */
    npuc_nm_geom nmg;
    char *nmn[3];
} qplan;

/* What the 8-bit edge rule did, for the summary (edges_report). */
typedef struct edge_books {
    size_t kept;       /* tensors raised to 8 bits */
    size_t guessed;    /* of them by order alone */
    int64_t guess;     /* one of those, for the message; -1 when none */
    int below8;        /* some tensor is quantized below 8 bits */
    int found;         /* some rule found an edge (applied or not) */
    int tied;          /* the output side is the embedding */
    int by_numbering;  /* the order was the numbers in the names */
} edge_books;

static npuc_status keep_edges(npuc_ctx *ctx, npuc_model *m, const size_t *layer, const int *explicit_bits,
                              int budget, qplan *plan, npuc_tensor_record *rep, edge_books *b) {
    const size_t n = npuc_model_count(m);
    unsigned char *elig = calloc(n ? n : 1, 1);
    if (!elig) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        /* the edges of the model, whatever this run selects; kept only where it quantizes */
        elig[i] = (unsigned char)(plan[i].quantize || npuc__edge_candidate(npuc_model_tensor(m, i)));
        /* A budget may take any tensor below 8 bits: the edges are pinned. */
        if (plan[i].quantize && (plan[i].p.bits < 8 || budget)) b->below8 = 1;
    }
    npuc__edge_roles er;
    npuc_status st = npuc__edge_roles_find(ctx, m, elig, layer, &er);
    free(elig);
    if (st != NPUC_OK) return st;
    b->found = er.nfound > 0 || er.tied;
    b->tied = er.tied;
    b->by_numbering = er.by_numbering;
    b->guess = -1;
    for (size_t i = 0; i < n; i++) {
        if (er.edge[i] == NPUC_EDGE_NONE || !plan[i].quantize || explicit_bits[i] || (plan[i].p.bits >= 8 && !budget))
            continue;
        plan[i].p.bits = 8;
        plan[i].pinned = 1;
        b->kept++;
        if (er.confidence[i] == NPUC_CONF_GUESS) {
            b->guessed++;
            if (b->guess < 0) b->guess = (int64_t)i;
        }
        snprintf(rep[i].note, sizeof rep[i].note, "kept at 8 bits: %s (%s%s)", npuc__edge_name(er.edge[i]),
                 er.why[i], er.confidence[i] == NPUC_CONF_GUESS ? ", a guess" : "");
    }
    npuc__edge_roles_free(&er);
    return NPUC_OK;
}

/* The edge rule in the summary: a guess is a warning (NPUC_ERR_GUESS under
 * --strict, before anything is written); finding no edge layer at all while
 * going below 8 bits is a warning too, so a file that names none of them
 * does not silently lose the rule. */
static npuc_status edges_report(npuc_ctx *ctx, npuc_model *m, const edge_books *b, npuc_summary *sum) {
    const char *path = npuc_model_path(m);
    const char *order = b->by_numbering ? "the numbers in the names (storage is alphabetical)" : "storage order";
    if (b->guessed) {
        const char *t = npuc_model_tensor(m, (size_t)b->guess)->name;
        if (npuc_ctx_policy(ctx)->strict)
            return npuc_fail(ctx, NPUC_ERR_GUESS, "%s: tensor '%s': kept at 8 bits as an edge layer by %s alone "
                             "(no graph in the file and no name tells that side); state it with "
                             "--layer-bits 'REGEX=8' or turn the rule off with --quantize-all", path, t, order);
        if (npuc_summary_warn(sum, "%zu layer(s) kept at 8 bits as the first/last weight layer by %s alone, a "
                              "guess (no graph in the file and no name tells that side; '%s' first): state them "
                              "with --layer-bits 'REGEX=8', or --quantize-all", b->guessed, order, t) != NPUC_OK)
            return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    } else if (b->below8 && !b->found && !b->kept &&
               npuc_summary_warn(sum, "no graph in the file and no embedding, input convolution or output head "
                                 "among the names of this shard (without its index, order says nothing about the "
                                 "whole model): no layer kept at 8 bits (name them with --layer-bits "
                                 "'REGEX=8')") != NPUC_OK) {
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    return NPUC_OK;
}

static npuc_status make_plan(npuc_ctx *ctx, npuc_model *m, const npuc_quantize_opts *o, const size_t *layer,
                             qplan *plan, npuc_tensor_record *rep, edge_books *edges) {
    const char *path = npuc_model_path(m);
    npuc_rules inc, exc, lb, lg;
    npuc_status st;
    memset(&inc, 0, sizeof inc);
    memset(&exc, 0, sizeof exc);
    memset(&lb, 0, sizeof lb);
    memset(&lg, 0, sizeof lg);
    if ((st = npuc__rules_compile(ctx, &inc, o->include, o->ninclude, 0, "--include")) != NPUC_OK ||
        (st = npuc__rules_compile(ctx, &exc, o->exclude, o->nexclude, 0, "--exclude")) != NPUC_OK ||
        (st = npuc__rules_compile(ctx, &lb, o->layer_bits, o->nlayer_bits, 1, "--layer-bits")) != NPUC_OK ||
        (st = npuc__rules_compile(ctx, &lg, o->layer_group_size, o->nlayer_group_size, 1,
                                  "--layer-group-size")) != NPUC_OK)
        goto done;
    for (size_t r = 0; r < lg.n; r++) {
        char *end;
        long g = strtol(lg.value[r], &end, 10);
        if (*end || g < 2 || g > (1L << 30)) {
            st = npuc_fail(ctx, NPUC_ERR_ARG, "--layer-group-size '%s': group size must be 2..2^30",
                           o->layer_group_size[r]);
            goto done;
        }
    }
    for (size_t r = 0; r < lb.n; r++) {
        char *end;
        long b = strtol(lb.value[r], &end, 10);
        if (*end) {
            st = npuc_fail(ctx, NPUC_ERR_ARG, "--layer-bits '%s': the bit width is not an integer", o->layer_bits[r]);
            goto done;
        }
        if ((st = npuc__pass_check_value(ctx, "quantize", "layer_bits", (double)b, o->layer_bits[r])) != NPUC_OK) goto done;
    }
    size_t n = npuc_model_count(m);
    int *explicit_bits = calloc(n ? n : 1, sizeof *explicit_bits);
    if (!explicit_bits) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
    for (size_t i = 0; i < n; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        qplan *q = &plan[i];
        q->p = o->params;
        /* By default every weight of rank >= 2; never a bias (Paddle stores
         * conv biases as [1,C,1,1]), norm or BatchNorm tensor, even when a
         * pattern matches it, unless an --include rule names it exactly. */
        int in = inc.n ? npuc__rules_match(&inc, t->name) >= 0 : t->rank >= 2;
        int ex = npuc__rules_match(&exc, t->name) >= 0;
        int r = npuc__rules_match(&lb, t->name);
        if (r >= 0) {
            q->p.bits = atoi(lb.value[r]);
            explicit_bits[i] = 1;
            q->pinned = 1;
        }
        int rg = npuc__rules_match(&lg, t->name);
        if (rg >= 0) {
            q->p.gran = NPUC_GRAN_GROUP;
            q->p.group_size = (uint32_t)atol(lg.value[rg]);
            q->pinned = 1;
        }
        if (!in || ex) continue;
        if (!npuc__rules_names(&inc, t->name) && npuc__kept_role(t, rep[i].note, sizeof rep[i].note)) continue;
        if (!npuc_dtype_is_float(t->dtype)) {
            snprintf(rep[i].note, sizeof rep[i].note, "not a float tensor");
            continue;
        }
        if (t->numel == 0) {
            snprintf(rep[i].note, sizeof rep[i].note, "empty");
            continue;
        }
        if (q->p.gran != NPUC_GRAN_TENSOR && q->p.axis < 0 && t->layout == NPUC_LAYOUT_NONE) {
            q->p.gran = NPUC_GRAN_TENSOR;
            snprintf(rep[i].note, sizeof rep[i].note, "no channel axis: per tensor");
        }
        q->quantize = 1;
    }
    /* Below 8 bits the layers at the model's edges (the embedding, the
     * input convolution, the output head: graph/graph_roles.h, each side
     * from the file's graph, else names, else order as a guess) stay at 8 bits; a layer is a stored
     * tensor, or the factors of one lowrank entry together. */
    if (!o->quantize_all)
        st = keep_edges(ctx, m, layer, explicit_bits, o->target_size || o->target_bpw > 0 || o->plan, plan, rep,
                        edges);
    free(explicit_bits);
    if (st != NPUC_OK) goto done;
    if ((st = npuc__rules_check_hits(ctx, &inc, "--include", path)) != NPUC_OK ||
        (st = npuc__rules_check_hits(ctx, &exc, "--exclude", path)) != NPUC_OK ||
        (st = npuc__rules_check_hits(ctx, &lb, "--layer-bits", path)) != NPUC_OK ||
        (st = npuc__rules_check_hits(ctx, &lg, "--layer-group-size", path)) != NPUC_OK)
        goto done;
    for (size_t i = 0; i < n; i++) {
        if (!plan[i].quantize) continue;
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        if ((st = npuc_quant_shape_of(ctx, t, &plan[i].p, &plan[i].qs)) != NPUC_OK) {
            st = npuc__prefix_path(ctx, st, path); /* the file name before the tensor-level message */
            goto done;
        }
        plan[i].packed = plan[i].p.bits < 8;
    }
done:
    npuc__rules_free(&inc);
    npuc__rules_free(&exc);
    npuc__rules_free(&lb);
    npuc__rules_free(&lg);
    return st;
}

/* How scales are stored: F16 or BF16 when asked, else F32 (also for
 * parameters built without npuc_quant_params_defaults). */
static npuc_dtype scale_dtype(const npuc_quant_params *p) {
    return p->scale_dtype == NPUC_DTYPE_F16 || p->scale_dtype == NPUC_DTYPE_BF16 ? p->scale_dtype : NPUC_DTYPE_F32;
}

static void scale_shape(const qplan *q, npuc_tensor_info *s) {
    if (q->p.gran == NPUC_GRAN_TENSOR) s->rank = 0;
    else if (q->p.gran == NPUC_GRAN_GROUP) {
        s->rank = 2;
        s->shape[0] = (int64_t)q->qs.channels;
        s->shape[1] = (int64_t)q->qs.groups_per_channel;
    } else {
        s->rank = 1;
        s->shape[0] = (int64_t)q->qs.channels;
    }
}

/* Declares the outputs of tensor t under plan q and describes them in art. */
static npuc_status declare(npuc_ctx *ctx, npuc_writer *w, json_t *art, const npuc_tensor_info *t,
                           const qplan *q, const npuc_quantize_opts *o, char **names) {
    npuc_status st;
    if (!q->quantize || o->fake_quant) {
        if (q->quantize) {
            json_t *e = npuc__art_add(art, t, npuc__codec_fake_quant.name);
            char range[48];
            npuc_range_format(&q->p.range, range, sizeof range);
            if (!e || json_object_set_new(e, "bits", json_integer(q->p.bits)) ||
                json_object_set_new(e, "symmetric", json_boolean(q->p.symmetric)) ||
                json_object_set_new(e, "range", json_string(range)))
                return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        }
        return npuc_writer_declare(w, t);
    }
    npuc_tensor_info c = *t;
    c.layout = NPUC_LAYOUT_NONE;
    c.dtype = q->p.symmetric && !q->packed ? NPUC_DTYPE_I8 : NPUC_DTYPE_U8;
    if (q->packed) {
        c.rank = 1;
        c.shape[0] = (int64_t)npuc_packed_size(t->numel, q->p.bits);
    }
    if ((st = npuc_writer_declare(w, &c)) != NPUC_OK) return st;
    names[0] = npuc__codec_part_dup(&npuc__codec_quant, "scale", t->name);
    names[1] = npuc__codec_part_dup(&npuc__codec_quant, "zero_point", t->name);
    if (!names[0] || !names[1]) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    npuc_tensor_info s;
    memset(&s, 0, sizeof s);
    s.name = names[0];
    s.dtype = scale_dtype(&q->p); /* --scale-dtype (src/codecs/scale_dtype.c) */
    s.group = t->group;
    scale_shape(q, &s);
    if ((st = npuc_writer_declare(w, &s)) != NPUC_OK) return st;
    if (!q->p.symmetric) {
        s.name = names[1];
        s.dtype = NPUC_DTYPE_U8;
        if ((st = npuc_writer_declare(w, &s)) != NPUC_OK) return st;
    }
    json_t *e = npuc__art_add(art, t, npuc__codec_quant.name);
    if (!e ||
        npuc__quant_entry_set(e, &q->p, &q->qs, q->packed, t->name, c.dtype, names[0],
                              q->p.symmetric ? NULL : names[1]) ||
        json_object_set_new(e, "parts", q->p.symmetric ? json_pack("[ss]", t->name, names[0])
                                                       : json_pack("[sss]", t->name, names[0], names[1])) ||
        (q->p.grid == NPUC_GRID_FULL && json_object_set_new(e, "grid", json_string("full"))) ||
        (q->gptq && json_object_set_new(e, "method", json_string("gptq"))))
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    return NPUC_OK;
}

static npuc_status carry_over(npuc_ctx *ctx, npuc_model *m, const json_t *prev, const qplan *plan, json_t *art);

/* The exact size of the output under a choice of schemes: the run's own
 * declarations (tensors, metadata, the artifact description) made on a
 * writer whose backend writes nothing and, when the writer begins (its
 * "npuc.layout" entry added, as for the real file), computes the file's size
 * the format's way.  Safetensors only: the 8-byte length, the padded JSON
 * header (npuc__st_header, the bytes the real writer writes) and the
 * payloads back to back. */
typedef struct dry_state {
    uint64_t size;
    int begun;
} dry_state;

static npuc_status dry_begin(npuc_writer *w) {
    dry_state *s = w->be_state;
    if (w->row == &npuc__gguf_format) {
        npuc_status st = npuc__gguf_writer_size(w, &s->size);
        s->begun = st == NPUC_OK;
        return st;
    }
    char *h;
    size_t len;
    npuc_status st = npuc__st_header(w, &h, &len);
    if (st != NPUC_OK) return st;
    free(h);
    uint64_t size = len;
    for (size_t i = 0; i < w->n; i++)
        if (npuc_add_overflow(size, w->t[i].nbytes, &size))
            return npuc_fail(w->ctx, NPUC_ERR_OVERFLOW, "%s: total size overflows", w->path);
    s->size = size;
    s->begun = 1;
    return NPUC_OK;
}
static npuc_status dry_write(npuc_writer *w, size_t i, const void *data, uint64_t n) {
    (void)w, (void)i, (void)data, (void)n;
    return NPUC_OK;
}
static npuc_status dry_finish(npuc_writer *w) {
    (void)w;
    return NPUC_OK;
}
static void dry_abort(npuc_writer *w) { (void)w; }
static const npuc_writer_backend dry_backend = {dry_begin, dry_write, dry_finish, dry_abort, 1};

static npuc_status dry_open(void *state, npuc_ctx *ctx, const char *path, const npuc_write_opts *write,
                            npuc_writer **out) {
    return npuc__writer_open_be(ctx, path, write, &dry_backend, state, out);
}

typedef struct dry_run {
    npuc_ctx *ctx;
    npuc_model *m;
    const npuc__sink *to;
    const npuc_quantize_opts *o;
    const json_t *prev;
    const qplan *plan;
    qplan *tmp;
    char **names;
} dry_run;

static npuc_format sink_format(const npuc__sink *to) {
    return to->write && to->write->format != NPUC_FORMAT_AUTO ? to->write->format : npuc_format_from_path(to->path);
}

/* A GGUF output under a budget: the tensors are written dense and the GGUF
 * writer quantizes each to the ggml type chosen for it, named in the
 * NPUC__GGUF_TYPES_KEY entry ({"name": type id, ...}); NULL when out of
 * memory. */
static char *gguf_types_json(npuc_model *m, const int *quantize, const int *types) {
    json_t *o = json_object();
    for (size_t i = 0; o && i < npuc_model_count(m); i++)
        if (quantize[i] && json_object_set_new(o, npuc_model_tensor(m, i)->name, json_integer(types[i]))) {
            json_decref(o);
            return NULL;
        }
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    return s;
}

/* Whether the output's exact size can be told before it is written: a
 * safetensors file (not the in-memory pipe of `npuc run`). */
static int dry_possible(const npuc__sink *to) {
    if (!to || !to->path || to->open) return 0;
    const npuc_format f = sink_format(to);
    return f == NPUC_FORMAT_SAFETENSORS || f == npuc_format_find("gguf");
}

static npuc_status dry_size(void *u, const npuc_quant_params *p, const int *gguf, uint64_t *size) {
    dry_run *d = u;
    npuc_ctx *ctx = d->ctx;
    const size_t n = npuc_model_count(d->m);
    npuc_status st = NPUC_OK;
    char *types = NULL;
    int *qz = NULL;
    if (gguf) {
        if (!(qz = calloc(n ? n : 1, sizeof *qz))) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < n; i++) qz[i] = d->plan[i].quantize;
        types = gguf_types_json(d->m, qz, gguf);
        free(qz);
        if (!types) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < n && st == NPUC_OK; i++) {
        d->tmp[i] = d->plan[i];
        if (gguf) d->tmp[i].quantize = 0; /* dense: the GGUF writer quantizes */
        if (!d->tmp[i].quantize) continue;
        d->tmp[i].p = p[i];
        d->tmp[i].packed = p[i].bits < 8;
        if ((st = npuc_quant_shape_of(ctx, npuc_model_tensor(d->m, i), &p[i], &d->tmp[i].qs)) != NPUC_OK)
            return npuc__prefix_path(ctx, st, npuc_model_path(d->m));
    }
    if (st != NPUC_OK) {
        free(types);
        return st;
    }
    dry_state ds = {0, 0};
    const npuc__sink sink = {d->to->path, d->to->write, dry_open, &ds};
    npuc__drive dr;
    npuc_summary sum;
    memset(&sum, 0, sizeof sum);
    st = npuc__drive_begin(&dr, ctx, d->m, &sink, "quantize", NULL, NULL, &sum);
    if (st == NPUC_OK) st = npuc__drive_open(&dr, NULL, NULL);
    if (st == NPUC_OK && types) st = npuc_writer_meta(dr.w, NPUC__GGUF_TYPES_KEY, types);
    free(types);
    if (st == NPUC_OK) st = npuc__drive_artifact(&dr);
    if (st == NPUC_OK) st = carry_over(ctx, d->m, d->prev, d->tmp, dr.art);
    for (size_t i = 0; i < n && st == NPUC_OK; i++)
        st = declare(ctx, dr.w, dr.art, npuc_model_tensor(d->m, i), &d->tmp[i], d->o, d->names + 2 * i);
    if (st == NPUC_OK) st = npuc__drive_describe(&dr);
    if (st == NPUC_OK) {
        /* Finishing begins the writer (dry_begin: the size) and then fails,
         * no payload having been written; only the size is wanted. */
        st = npuc_writer_finish(dr.w);
        dr.w = NULL;
        if (ds.begun) {
            npuc_ctx_clear(ctx);
            st = NPUC_OK;
        } else if (st == NPUC_OK) {
            st = npuc_fail(ctx, NPUC_ERR_INTERNAL, "%s: the output's size was not computed", d->to->path);
        }
    }
    for (size_t i = 0; i < 2 * n; i++) {
        free(d->names[i]);
        d->names[i] = NULL;
    }
    const npuc_status end = npuc__drive_end(&dr, st == NPUC_OK ? NPUC_ERR_INTERNAL : st); /* frees; publishes nothing */
    if (st != NPUC_OK) return end;
    *size = ds.size;
    return NPUC_OK;
}

/* --target-size / --target-bpw (budget_alloc.h): every quantized tensor not
 * pinned gets the candidate scheme the allocator chooses.  For a target
 * size with a safetensors output, the file's size under each choice tried is
 * computed exactly (dry_size), so the output is the target or under it by
 * what the candidates' granularity leaves; for other outputs the bytes
 * besides the quantized payloads are estimated from the other tensors and a
 * safetensors-style header (names, shapes, offsets and the artifact
 * description), on the large side, so the output lands at or under the
 * target (docs/budget.md). */
static npuc_status budget_plan(npuc_ctx *ctx, npuc_model *m, npuc_calib *cal, const npuc__sink *to,
                               const json_t *prev, const npuc_quantize_opts *o, qplan *plan, npuc_tensor_record *rec,
                               uint64_t *file_bytes, char **gguf_types, char **curve_json) {
    const size_t n = npuc_model_count(m);
    if (o->fake_quant) return npuc_fail(ctx, NPUC_ERR_ARG, "--target-size/--target-bpw/--plan choose stored schemes: "
                                                          "drop --fake-quant");
    if (o->plan && (o->target_size || o->target_bpw > 0 || o->plan_out))
        return npuc_fail(ctx, NPUC_ERR_ARG, "--plan applies a plan: without --target-size, --target-bpw or --plan-out");
    if (o->pattern_m || o->method == NPUC_QMETHOD_GPTQ)
        return npuc_fail(ctx, NPUC_ERR_ARG, "--target-size/--target-bpw work with round-to-nearest dense schemes: "
                                            "drop --pattern and --method gptq");
    if (o->target_size && to && to->path && !to->open && !dry_possible(to))
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: --target-size: the size of this output format cannot be told before "
                         "it is written (use a .safetensors or .gguf output, or --target-bpw)", to->path);
    /* A .gguf output: the candidates are ggml types, written by the GGUF writer. */
    const int gguf_out = to && to->path && !to->open && sink_format(to) == npuc_format_find("gguf");
    if (gguf_out && o->plan)
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: --plan applies npuc schemes; a .gguf output takes --target-size or "
                         "--target-bpw", to->path);
    int *q = calloc(n ? n : 1, sizeof *q), *pin = calloc(n ? n : 1, sizeof *pin);
    npuc_quant_params *p = calloc(n ? n : 1, sizeof *p);
    char (*note)[128] = calloc(n ? n : 1, sizeof *note);
    qplan *tmp = calloc(n ? n : 1, sizeof *tmp);
    char **names = calloc(2 * (n ? n : 1), sizeof *names);
    int *gt = calloc(n ? n : 1, sizeof *gt);
    if (!q || !pin || !p || !note || !tmp || !names || !gt) {
        free(q), free(pin), free(p), free(note), free(tmp), free(names), free(gt);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    uint64_t overhead = 4096; /* the header's fixed part and metadata, generously */
    for (size_t i = 0; i < npuc_model_meta_count(m); i++) {
        const char *k, *v;
        npuc_model_meta_at(m, i, &k, &v);
        overhead += strlen(k) + strlen(v) * 2 + 8;
    }
    for (size_t i = 0; i < n; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        q[i] = plan[i].quantize;
        pin[i] = plan[i].pinned;
        p[i] = plan[i].p;
        /* Per stored tensor: its name, dtype, shape and offsets in JSON;
         * per quantized tensor three of them and its description entry. */
        overhead += q[i] ? 3 * (2 * strlen(t->name) + 160) + 2 * strlen(t->name) + 400 : 2 * strlen(t->name) + 160;
        if (!q[i]) overhead += t->nbytes;
        /* GGUF: a pinned tensor at 8 bits is Q8_0 (F16 when its rows do not
         * take 32-blocks); a free one starts at F16. */
        const int64_t row = t->rank ? t->shape[t->rank - 1] : 1;
        gt[i] = pin[i] && row % 32 == 0 ? NPUC__GGML_Q8_0 : NPUC__GGML_F16;
    }
    dry_run dry = {ctx, m, to, o, prev, plan, tmp, names};
    const npuc__budget_req rq = {o->target_size, o->target_bpw, o->candidates, o->plan_out, o->write.overwrite,
                                 cal != NULL, overhead, dry_possible(to) ? dry_size : NULL, &dry, file_bytes,
                                 gguf_out ? gt : NULL, to && to->write ? npuc__write_opts_get(to->write, "imatrix") : NULL,
                                 o->budget_cache, o->calib, curve_json};
    npuc_status st = o->plan ? npuc__budget_apply_plan(ctx, m, o->plan, q, pin, p, note)
                             : npuc__budget_choose(ctx, m, cal, &rq, q, pin, p, note);
    for (size_t i = 0; st == NPUC_OK && gguf_out && i < n; i++) {
        /* Written dense; the GGUF writer stores gt[i] (NPUC__GGUF_TYPES_KEY). */
        if (!q[i]) continue;
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        const npuc__ggml_type *g = npuc__ggml_type_by_id((uint32_t)gt[i]);
        uint64_t nb = t->nbytes;
        (void)npuc__gguf_nbytes(g, (uint64_t)t->shape[t->rank - 1], t->numel, &nb);
        plan[i].quantize = 0;
        rec[i].action = NPUC_ACTION_QUANTIZED;
        rec[i].bytes_after = nb;
        snprintf(rec[i].scheme, sizeof rec[i].scheme, "%s", g->name);
        if (note[i][0]) snprintf(rec[i].note, sizeof rec[i].note, "%s", note[i]);
        else if (pin[i]) snprintf(rec[i].note + strlen(rec[i].note), sizeof rec[i].note - strlen(rec[i].note),
                                  "%s%s", rec[i].note[0] ? "; " : "", g->name);
    }
    if (st == NPUC_OK && gguf_out && !(*gguf_types = gguf_types_json(m, q, gt)))
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == NPUC_OK && !gguf_out && i < n; i++) {
        if (!q[i] || pin[i]) continue;
        plan[i].p = p[i];
        plan[i].packed = p[i].bits < 8;
        if ((st = npuc_quant_shape_of(ctx, npuc_model_tensor(m, i), &p[i], &plan[i].qs)) != NPUC_OK)
            st = npuc__prefix_path(ctx, st, npuc_model_path(m));
        if (note[i][0]) snprintf(rec[i].note, sizeof rec[i].note, "%s", note[i]);
    }
    free(q), free(pin), free(p), free(note), free(tmp), free(names), free(gt);
    return st;
}

/* ------------------------------------------------ --pattern N:M (sparsify_quant.c)
 * With --pattern every quantized tensor is N:M-sparsified first and the
 * sparse tensor quantized; the codes of the kept positions are stored as an
 * "nm_sparse" entry (or, with --fake-quant, the dequantized sparse tensor).
 * A tensor the pattern does not fit (input-channel axis shorter than M:
 * depthwise) is quantized dense with a note, or is an error when --include
 * named it. */
static npuc_status nm_plan(npuc_ctx *ctx, npuc_model *m, const npuc_quantize_opts *o, qplan *plan,
                           npuc_tensor_record *rec) {
    if (!npuc__nm_ok(o->pattern_n, o->pattern_m))
        return npuc_fail(ctx, NPUC_ERR_ARG, "--pattern %d:%d: need " NPUC__NM_BOUNDS, o->pattern_n, o->pattern_m);
    for (size_t i = 0; i < npuc_model_count(m); i++) {
        if (!plan[i].quantize) continue;
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        if (t->role == NPUC_ROLE_EMBEDDING && !o->ninclude) { /* a lookup table, as in npuc sparsify */
            snprintf(rec[i].note, sizeof rec[i].note, "embedding: quantized dense, without %d:%d", o->pattern_n,
                     o->pattern_m);
            continue;
        }
        if (npuc__nm_geom(t, o->pattern_n, o->pattern_m, &plan[i].nmg) == 0) {
            plan[i].nm = 1;
            continue;
        }
        if (o->ninclude) {
            npuc_nm_geom g;
            npuc_status st = npuc_nm_geometry(ctx, t, o->pattern_n, o->pattern_m, &g);
            return npuc__prefix_path(ctx, st == NPUC_OK ? NPUC_ERR_ARG : st, npuc_model_path(m));
        }
        snprintf(rec[i].note, sizeof rec[i].note, "%d:%d does not fit (input-channel axis < M): quantized dense",
                 o->pattern_n, o->pattern_m);
    }
    return NPUC_OK;
}

static void nm_record(const qplan *q, const npuc_quantize_opts *o, npuc_tensor_record *r) {
    const size_t l = strlen(r->scheme);
    snprintf(r->scheme + l, sizeof r->scheme - l, "+%d:%d", o->pattern_n, o->pattern_m);
    npuc_record_set(r, "n", o->pattern_n);
    npuc_record_set(r, "m", o->pattern_m);
    npuc_record_set(r, "sparsity_target", (double)(o->pattern_m - o->pattern_n) / (double)o->pattern_m);
    if (!o->fake_quant) {
        r->bytes_after = npuc__nmq_bytes(&q->p, &q->qs, &q->nmg);
        r->params_after = q->nmg.kept;
    }
}

static npuc_status nm_declare(npuc_ctx *ctx, npuc_writer *w, json_t *art, const npuc_tensor_info *t, qplan *q,
                              const npuc_quantize_opts *o, char **names) {
    if (!o->fake_quant) return npuc__nmq_declare(ctx, w, art, t, &q->p, &q->qs, &q->nmg, q->nmn);
    npuc_status st = declare(ctx, w, art, t, q, o, names);
    json_t *e = json_object_get(json_object_get(art, "tensors"), t->name);
    if (st == NPUC_OK && (!e || json_object_set_new(e, "n", json_integer(o->pattern_n)) ||
                          json_object_set_new(e, "m", json_integer(o->pattern_m))))
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    return st;
}

/* Compressed: sparsifies, quantizes and writes tensor i completely.
 * Fake-quant: replaces *x by the sparsified tensor for the caller to
 * quantize. */
static npuc_status nm_stream(npuc_ctx *ctx, npuc_writer *w, npuc_model *m, size_t i, const npuc_quantize_opts *o,
                             const qplan *q, npuc_tensor_record *r, const float **x, npuc_scratch *scr) {
    const npuc_tensor_info *t = npuc_model_tensor(m, i);
    npuc_status st;
    if (!o->fake_quant) {
        uint64_t zeros = 0;
        st = npuc__nmq_write(ctx, w, t, *x, &q->p, &q->qs, &q->nmg, &r->err, &zeros);
        npuc_model_release(m, i);
        if (st == NPUC_ERR_VALUE || st == NPUC_ERR_ARG) return npuc__prefix_path(ctx, st, npuc_model_path(m));
        if (st != NPUC_OK) return st;
        npuc_record_set(r, "sparsity", (double)zeros / (double)t->numel);
        npuc_record_set(r, "zeros", (double)zeros);
        return NPUC_OK;
    }
    float *y = npuc__scratch(scr, t->numel * sizeof(float));
    if (!y) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: tensor '%s': out of memory", npuc_model_path(m), t->name);
    npuc_prune_stats ps;
    if ((st = npuc_nm_sparsify(ctx, t, &q->nmg, *x, y, &ps)) != NPUC_OK)
        return npuc__prefix_path(ctx, st, npuc_model_path(m));
    npuc_record_set(r, "sparsity", (double)ps.zeros / (double)t->numel);
    npuc_record_set(r, "zeros", (double)ps.zeros);
    *x = y;
    return NPUC_OK;
}

/* ------------------------------------------------ an artifact as input
 * Checks that every entry of the input's description is one quantize can
 * build on, and gives every stored tensor its layer for the first/last rule:
 * its own index, or for a part of a lowrank entry the entry's (n + entry
 * number), so both factors of W count as the one layer W. */
static npuc_status input_layers(npuc_ctx *ctx, npuc_model *m, const json_t *prev, size_t *layer) {
    const size_t n = npuc_model_count(m);
    for (size_t i = 0; i < n; i++) layer[i] = i;
    if (!prev) return NPUC_OK;
    const char *k;
    json_t *v;
    size_t ent = 0;
    json_object_foreach(json_object_get(prev, "tensors"), k, v) {
        json_t *enc = json_object_get(v, "encoding");
        const char *es = json_is_string(enc) ? json_string_value(enc) : "";
        if (strcmp(es, npuc__codec_lowrank.name) == 0) {
            json_t *parts = json_object_get(v, "parts");
            for (size_t p = 0; p < json_array_size(parts); p++) {
                size_t idx;
                const char *pn = json_string_value(json_array_get(parts, p));
                if (pn && npuc_model_find(m, pn, &idx) == 0) layer[idx] = n + ent;
            }
        } else if (strcmp(es, npuc__codec_fake_quant.name) != 0) {
            return npuc_fail(ctx, NPUC_ERR_ARG,
                             "%s: already an npuc artifact (tensor '%s' is encoded); decompress it first",
                             npuc_model_path(m), k);
        }
        ent++;
    }
    return NPUC_OK;
}

/* Copies the input's entries into the new description, except a
 * "fake_quant" entry for a tensor this run quantizes again (its new entry
 * replaces it).  A lowrank entry keeps its parts' names, which are now
 * described by their own entries when quantized (nested entries). */
static npuc_status carry_over(npuc_ctx *ctx, npuc_model *m, const json_t *prev, const qplan *plan, json_t *art) {
    if (!prev) return NPUC_OK;
    json_t *tens = json_object_get(art, "tensors");
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(prev, "tensors"), k, v) {
        size_t idx;
        if (npuc_model_find(m, k, &idx) == 0 && plan[idx].quantize) continue;
        if (json_object_set(tens, k, v)) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    return NPUC_OK;
}

/* ------------------------------------------------ --method gptq
 * Every planned tensor with a Hessian in the calibration file (W.input or
 * W.hessian) is quantized by GPTQ; the others, and per-tensor schemes,
 * round to nearest with a note, or fail under --strict. */
static npuc_status gptq_plan(npuc_ctx *ctx, npuc_model *m, const npuc_quantize_opts *o, const npuc_calib *cal,
                             qplan *plan, npuc_tensor_record *rec) {
    if (o->pattern_m)
        return npuc_fail(ctx, NPUC_ERR_ARG, "--method gptq does not combine with --pattern (use --method rtn)");
    npuc_status st = npuc__pass_check_value(ctx, "quantize", "damp", o->damp, NULL);
    if (st != NPUC_OK) return st;
    for (size_t i = 0; i < npuc_model_count(m); i++) {
        if (!plan[i].quantize) continue;
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        const char *why = NULL;
        if (npuc_calib_has(cal, t->name) != 1) why = "no calibration data";
        else if (plan[i].p.gran == NPUC_GRAN_TENSOR) why = "per-tensor scale";
        if (!why) {
            plan[i].gptq = 1;
            continue;
        }
        if (npuc_ctx_policy(ctx)->strict)
            return npuc_fail(ctx, NPUC_ERR_ARG, "%s: tensor '%s': %s for --method gptq in '%s' (name it in the "
                             "calibration file, or --exclude it, or drop --strict to round it to nearest)",
                             npuc_model_path(m), t->name, why, npuc_calib_path(cal));
        const size_t l = strlen(rec[i].note);
        snprintf(rec[i].note + l, sizeof rec[i].note - l, "%s%s: round to nearest", l ? "; " : "", why);
    }
    return NPUC_OK;
}

/* GPTQ of tensor t (plan q) with its Hessian from the calibration file. */
static npuc_status gptq_stream(npuc_ctx *ctx, npuc_model *m, npuc_calib *cal, const npuc_tensor_info *t,
                               const float *x, const qplan *q, const npuc_quantize_opts *o, uint8_t *codes,
                               float *scales, int32_t *zps, float *deq, npuc_tensor_record *r, npuc_scratch *sh) {
    const uint64_t K = q->qs.per_channel;
    uint64_t hb;
    if (npuc_mul_overflow(K, K, &hb) || npuc_mul_overflow(hb, sizeof(double), &hb))
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: tensor '%s': Hessian too large", npuc_model_path(m), t->name);
    double *H = npuc__scratch(sh, hb), n = 0;
    int found = 0;
    if (!H) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: tensor '%s': out of memory", npuc_model_path(m), t->name);
    npuc_status st = npuc_calib_hessian(ctx, cal, t->name, K, H, &n, &found);
    if (st != NPUC_OK) return st;
    /* The output error comes from GPTQ's factor of H (quant_gptq.h), not a
     * second read and factorisation of H by out_error_of. */
    double oe[2] = {0, 0};
    const npuc__gptq_opts go = {.damp = o->damp, .act_order = o->act_order, .out = oe};
    if ((st = npuc__gptq_tensor(ctx, t, x, &q->p, H, n, &go, codes, scales, zps, deq, &r->err)) != NPUC_OK)
        return npuc__prefix_path(ctx, st, npuc_model_path(m));
    npuc_record_set(r, "gptq", 1);
    npuc_record_set(r, "calib_rows", n);
    /* A file's Hessian is only nearly semidefinite: a tiny negative residue
     * is an error of 0 (as calib_out_error.c). */
    r->has_out_error = 1;
    r->out_e2 = oe[0] > 0 ? oe[0] : 0;
    r->out_y2 = oe[1] > 0 ? oe[1] : 0;
    r->out_rel_error = r->out_e2 == 0 ? 0.0 : r->out_y2 == 0 ? INFINITY : sqrt(r->out_e2 / r->out_y2);
    return NPUC_OK;
}

/* --calib with --range mse: the importance of tensor t's input columns
 * (W.input_sq, else diag H / n) weighs the range search (npuc/calib.h,
 * npuc_range_estimate_weighted); without calibration data, or per tensor,
 * the search stays unweighted and the record says so. */
static npuc_status importance_of(npuc_ctx *ctx, npuc_calib *cal, const npuc_tensor_info *t, const qplan *q,
                                 npuc_quant_params *pw, npuc_tensor_record *r, npuc_scratch *si) {
    if (q->p.range.method != NPUC_RANGE_MSE) return NPUC_OK;
    const char *why = NULL;
    if (q->p.gran == NPUC_GRAN_TENSOR) why = "per-tensor scale: unweighted mse";
    else if (!npuc_calib_has(cal, t->name)) why = "no calibration data: unweighted mse";
    if (why) {
        const size_t l = strlen(r->note);
        snprintf(r->note + l, sizeof r->note - l, "%s%s", l ? "; " : "", why);
        return NPUC_OK;
    }
    const uint64_t K = q->qs.per_channel;
    double *imp = npuc__scratch(si, K * sizeof(double));
    int found = 0;
    if (!imp) return npuc_fail(ctx, NPUC_ERR_NOMEM, "tensor '%s': out of memory", t->name);
    npuc_status st = npuc_calib_importance(ctx, cal, t->name, K, imp, &found);
    if (st != NPUC_OK) return st;
    if (found) {
        pw->importance = imp;
        npuc_record_set(r, "importance", 1);
    }
    return NPUC_OK;
}

/* ------------------------------------------------ output error (--calib)
 * Every quantized tensor with W.input or W.hessian in the calibration file
 * gets its relative output error ||(W - W')X|| / ||WX|| (calib_out_error.h)
 * beside the weight error; the others get a note and no figure, or, under
 * --strict, fail the run before anything is written. */
static void note_add(npuc_tensor_record *r, const char *what) {
    if (strstr(r->note, what)) return;
    const size_t l = strlen(r->note);
    snprintf(r->note + l, sizeof r->note - l, "%s%s", l ? "; " : "", what);
}

static npuc_status out_error_plan(npuc_ctx *ctx, npuc_model *m, const npuc_calib *cal, const qplan *plan) {
    if (!npuc_ctx_policy(ctx)->strict) return NPUC_OK;
    for (size_t i = 0; i < npuc_model_count(m); i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        if (plan[i].quantize && npuc_calib_has(cal, t->name) != 1)
            return npuc_fail(ctx, NPUC_ERR_ARG, "%s: tensor '%s': no calibration data in '%s' for its output error "
                             "(name it in the calibration file, or --exclude it, or drop --strict)",
                             npuc_model_path(m), t->name, npuc_calib_path(cal));
    }
    return NPUC_OK;
}

static npuc_status out_error_of(npuc_ctx *ctx, npuc_model *m, npuc_calib *cal, const npuc_tensor_info *t,
                                const float *w, const float *deq, npuc_tensor_record *r) {
    const char *why = NULL;
    npuc_status st = npuc__out_error_measure(ctx, cal, t, w, deq, r, &why);
    if (st != NPUC_OK) return npuc__prefix_path(ctx, st, npuc_model_path(m));
    if (why && strcmp(why, "no calibration data") == 0) note_add(r, "no calibration data");
    else if (why) {
        char b[64];
        snprintf(b, sizeof b, "%s: no output error", why);
        note_add(r, b);
    }
    return NPUC_OK;
}

/* --target-size N%: N percent of the input's size, its file's when it is a
 * regular file, else (a checkpoint folder, a step of `npuc run` handed over
 * in memory) its tensors' bytes. */
static uint64_t input_size(npuc_model *m) {
    struct stat sb;
    if (stat(npuc_model_path(m), &sb) == 0 && S_ISREG(sb.st_mode)) return (uint64_t)sb.st_size;
    uint64_t b = 0;
    for (size_t i = 0; i < npuc_model_count(m); i++) b += npuc_model_tensor(m, i)->nbytes;
    return b;
}

npuc_status npuc__quantize_model_to(npuc_ctx *ctx, npuc_model *m, const npuc__sink *to, const npuc_quantize_opts *o0,
                                    npuc_summary *sum) {
    npuc_quantize_opts oo = *o0;
    if (oo.target_size_pct > 0) {
        const double t = floor(oo.target_size_pct / 100.0 * (double)input_size(m));
        oo.target_size = t >= 1 ? (uint64_t)t : 1;
    }
    const npuc_quantize_opts *o = &oo;
    const char *path = npuc_model_path(m);
    const size_t n = npuc_model_count(m);
    npuc_status st = NPUC_OK;
    npuc__drive dr = {0};
    edge_books edges = {0};
    json_t *prev = NULL;
    char **names = NULL;
    npuc_scratch s_in = {0}, s_codes = {0}, s_pack = {0}, s_deq = {0}, s_cast = {0}, s_zp = {0}, s_nm = {0},
                 s_h = {0}, s_imp = {0};
    npuc_calib *cal = NULL;
    float *scales = NULL;
    int32_t *zps = NULL;
    uint64_t file_bytes = 0; /* --target-size: the exact size of the output, when known before */
    char *gguf_types = NULL; /* a .gguf output under a budget: NPUC__GGUF_TYPES_KEY */
    qplan *plan = calloc(n ? n : 1, sizeof *plan);
    size_t *layer = calloc(n ? n : 1, sizeof *layer);
    names = calloc(2 * (n ? n : 1), sizeof *names);
    if ((st = npuc__drive_begin(&dr, ctx, m, to, "quantize", o->on_tensor, o->user, sum)) != NPUC_OK) goto fail;
    if (!plan || !layer || !names) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        goto fail;
    }

    if ((st = npuc__art_load(ctx, m, &prev)) != NPUC_OK) goto fail;
    if ((st = input_layers(ctx, m, prev, layer)) != NPUC_OK) goto fail;
    if ((st = make_plan(ctx, m, o, layer, plan, sum->records, &edges)) != NPUC_OK) goto fail;
    if ((st = edges_report(ctx, m, &edges, sum)) != NPUC_OK) goto fail;
    if (o->calib && (st = npuc_calib_open(ctx, o->calib, &cal)) != NPUC_OK) goto fail;
    if ((o->target_size || o->target_bpw > 0 || o->plan) &&
        (st = budget_plan(ctx, m, cal, to, prev, o, plan, sum->records, &file_bytes, &gguf_types, &sum->budget_json)) !=
            NPUC_OK)
        goto fail;
    if (o->pattern_m && scale_dtype(&o->params) != NPUC_DTYPE_F32) {
        st = npuc_fail(ctx, NPUC_ERR_ARG, "--scale-dtype %s: N:M artifacts (--pattern) store f32 scales",
                       npuc_dtype_name(o->params.scale_dtype));
        goto fail;
    }
    if (o->pattern_m && (st = nm_plan(ctx, m, o, plan, sum->records)) != NPUC_OK) goto fail;
    if (o->method == NPUC_QMETHOD_GPTQ && !o->calib) {
        st = npuc_fail(ctx, NPUC_ERR_ARG, "--method gptq needs calibration data: add --calib FILE");
        goto fail;
    }
    if (o->method == NPUC_QMETHOD_GPTQ && (st = gptq_plan(ctx, m, o, cal, plan, sum->records)) != NPUC_OK) goto fail;
    if (cal && (st = out_error_plan(ctx, m, cal, plan)) != NPUC_OK) goto fail;
    /* Never silent: per-channel and per-group scales, and N:M groups, follow
     * the layout; say so when it is not certain (pass_guard.c). */
    for (size_t i = 0; i < n; i++) {
        const qplan *q = &plan[i];
        if (!q->quantize || (q->p.gran == NPUC_GRAN_TENSOR && !q->nm) || (q->p.axis >= 0 && !q->nm)) continue;
        if ((st = npuc__drive_guard(&dr, i, q->nm ? "N:M groups along the reduction axis"
                                            : q->p.gran == NPUC_GRAN_GROUP ? "per-group quantization"
                                                                           : "per-channel quantization")) != NPUC_OK)
            goto fail;
    }

    /* Records that do not depend on the data. */
    uint64_t max_scales = 1;
    for (size_t i = 0; i < n; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        npuc_tensor_record *r = &sum->records[i];
        if (!plan[i].quantize) continue;
        const qplan *q = &plan[i];
        r->action = NPUC_ACTION_QUANTIZED;
        r->has_error = 1;
        npuc_record_set(r, "bits", q->p.bits);
        npuc_record_set(r, "symmetric", q->p.symmetric);
        npuc_record_set(r, "group_size", q->p.gran == NPUC_GRAN_GROUP ? q->p.group_size : 0);
        npuc_record_set(r, "axis", q->qs.axis);
        npuc__quant_scheme_ch(&q->p, q->qs.channels, r->scheme, sizeof r->scheme);
        if (!o->fake_quant) {
            uint64_t code_bytes = q->packed ? npuc_packed_size(t->numel, q->p.bits) : t->numel;
            r->bytes_after = code_bytes + q->qs.nscales * npuc_dtype_size(scale_dtype(&q->p)) +
                             (q->p.symmetric ? 0 : q->qs.nscales);
        }
        if (q->qs.nscales > max_scales) max_scales = q->qs.nscales;
        if (q->nm) nm_record(q, o, r);
    }

    if ((st = npuc__drive_open(&dr, NULL, NULL)) != NPUC_OK || (st = npuc__drive_artifact(&dr)) != NPUC_OK) goto fail;
    if (gguf_types && dr.w && (st = npuc_writer_meta(dr.w, NPUC__GGUF_TYPES_KEY, gguf_types)) != NPUC_OK) goto fail;
    if ((st = carry_over(ctx, m, prev, plan, dr.art)) != NPUC_OK) goto fail;
    for (size_t i = 0; i < n; i++)
        if ((st = plan[i].nm ? nm_declare(ctx, dr.w, dr.art, npuc_model_tensor(m, i), &plan[i], o, names + 2 * i)
                             : declare(ctx, dr.w, dr.art, npuc_model_tensor(m, i), &plan[i], o, names + 2 * i)) != NPUC_OK)
            goto fail;
    if ((st = npuc__drive_describe(&dr)) != NPUC_OK) goto fail;

    scales = malloc(sizeof(float) * (size_t)max_scales);
    zps = malloc(sizeof(int32_t) * (size_t)max_scales);
    if (!scales || !zps) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto fail; }
    /* With a core to spare, a helper maps in the next two tensors while this
     * one is computed (src/pipeline/readahead.h). */
    npuc__drive_readahead(&dr, NULL, 2);
    for (size_t i = 0; i < n; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        npuc__drive_at(&dr, i);
        npuc_tensor_record *r = &sum->records[i];
        const qplan *q = &plan[i];
        if (!q->quantize) {
            if ((st = npuc__drive_pass_through(&dr, i)) != NPUC_OK) goto fail;
            npuc__drive_done(&dr, i);
            continue;
        }
        const float *x = NULL;
        /* F16/BF16 weights quantized on their own (no N:M step, GPTQ or
         * calibration, which need the F32 values) are widened inside the
         * quantizer, unit by unit (npuc__quantize). */
        const void *half = NULL;
        const int fuse = !cal && !q->nm && !q->gptq && (t->dtype == NPUC_DTYPE_F16 || t->dtype == NPUC_DTYPE_BF16);
        if (fuse) {
            if ((st = npuc_model_data(ctx, m, i, &half)) != NPUC_OK) goto fail;
        } else if ((st = npuc__load_f32(ctx, m, i, &s_in, &x)) != NPUC_OK) {
            goto fail;
        }
        const float *x0 = x; /* --pattern: sparsify first */
        if (q->nm && (st = nm_stream(ctx, dr.w, m, i, o, q, r, &x, &s_nm)) != NPUC_OK) goto fail;
        if (q->nm && !o->fake_quant) {
            if (cal) note_add(r, "N:M artifact: output error by 'npuc report --calib'");
            npuc__drive_done(&dr, i);
            continue;
        }
        uint8_t *codes = npuc__scratch(&s_codes, t->numel);
        /* The dequantized tensor: written with --fake-quant, measured with --calib. */
        float *deq = o->fake_quant || cal ? npuc__scratch(&s_deq, t->numel * sizeof(float)) : NULL;
        if (!codes || ((o->fake_quant || cal) && !deq)) {
            st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: tensor '%s': out of memory", path, t->name);
            goto fail;
        }
        /* Packed codes come from the quantizer's workers (GPTQ's are packed
         * after it). */
        uint8_t *pk = NULL;
        const uint64_t pb = q->packed && !o->fake_quant ? npuc_packed_size(t->numel, q->p.bits) : 0;
        if (q->packed && !o->fake_quant && !(pk = npuc__scratch(&s_pack, pb))) {
            st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: tensor '%s': out of memory", path, t->name);
            goto fail;
        }
        const npuc__qout qo = {codes, pk, scales, zps, deq, &r->err};
        npuc_quant_params pw = q->p;
        if (q->gptq) st = gptq_stream(ctx, m, cal, t, x, q, o, codes, scales, zps, deq, r, &s_h);
        else if (cal && (st = importance_of(ctx, cal, t, q, &pw, r, &s_imp)) != NPUC_OK) goto fail;
        else st = npuc__quantize(ctx, t, x, half, &s_in, &pw, &qo);
        if (st != NPUC_OK) {
            st = npuc__prefix_path(ctx, st, path);
            goto fail;
        }
        if (q->nm) npuc_error_measure(x0, deq, t->numel, &r->err); /* against the weights before N:M */
        if (cal && !q->gptq && (st = out_error_of(ctx, m, cal, t, x0, deq, r)) != NPUC_OK) goto fail;
        if (o->fake_quant) {
            const void *outp;
            if ((st = npuc__f32_as(ctx, t->dtype, deq, t->numel, &s_cast, &outp)) != NPUC_OK) goto fail;
            st = npuc__drive_write(&dr, outp, t->nbytes);
        } else if (q->packed) {
            if (q->gptq) npuc_pack_bits(codes, (size_t)t->numel, q->p.bits, pk);
            st = npuc__drive_write(&dr, pk, pb);
        } else {
            st = npuc__drive_write(&dr, codes, t->numel);
        }
        npuc_model_release(m, i);
        if (st != NPUC_OK) goto fail;
        if (!o->fake_quant) {
            const void *sp;
            const npuc_dtype sdt = scale_dtype(&q->p);
            if ((st = npuc__f32_as(ctx, sdt, scales, q->qs.nscales, &s_cast, &sp)) != NPUC_OK ||
                (st = npuc__drive_write(&dr, sp, q->qs.nscales * npuc_dtype_size(sdt))) != NPUC_OK)
                goto fail;
            if (!q->p.symmetric) {
                uint8_t *z8 = npuc__scratch(&s_zp, q->qs.nscales);
                if (!z8) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto fail; }
                for (uint64_t k = 0; k < q->qs.nscales; k++) z8[k] = (uint8_t)zps[k];
                if ((st = npuc__drive_write(&dr, z8, q->qs.nscales)) != NPUC_OK) goto fail;
            }
        }
        npuc__drive_done(&dr, i);
    }
fail:
    st = npuc__drive_end(&dr, st);
    if (names)
        for (size_t i = 0; i < 2 * n; i++) free(names[i]);
    free(names);
    if (plan)
        for (size_t i = 0; i < n; i++)
            for (int k = 0; k < 3; k++) free(plan[i].nmn[k]);
    free(plan);
    free(layer);
    free(scales);
    free(zps);
    json_decref(prev);
    free(gguf_types);
    npuc__scratch_free(&s_in);
    npuc__scratch_free(&s_codes);
    npuc__scratch_free(&s_pack);
    npuc__scratch_free(&s_deq);
    npuc__scratch_free(&s_cast);
    npuc__scratch_free(&s_zp);
    npuc__scratch_free(&s_nm);
    npuc__scratch_free(&s_h);
    npuc__scratch_free(&s_imp);
    npuc_calib_close(cal);
    return st;
}
