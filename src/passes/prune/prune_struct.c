/*
 * prune_struct.c - structured pruning: removing whole output filters (or
 * input channels) and shrinking every tensor that shares them.
 *
 * Three phases, like the other passes:
 *   plan     find each selected layer's chain (prune_chain.c), rank its
 *            channels by the L1 or L2 norm of the weights (the producer's
 *            filters, or in channel mode the consumers' input slices), pick
 *            the weakest to remove, rounded so the kept count is a multiple
 *            of --round-to, and record per tensor which channels of which
 *            axis survive.  A tensor can be in two chains (a conv is the
 *            consumer of one and the producer of the next: two different
 *            axes); an axis claimed twice makes the later chain fall back to
 *            zeroing.  Layers without a chain get their filters zeroed
 *            instead (same ranking, same count); layers that feed the model
 *            output (or read the model input, in channel mode) are left
 *            alone unless --include names them;
 *   declare  every tensor with its new shape;
 *   stream   one tensor at a time: zero, then gather the kept slices along
 *            each axis, in the source dtype, byte for byte.
 * Removal is exact: the smaller network computes the kept channels of the
 * original bit for bit (up to the order of float sums), because every
 * operation on the space is per channel.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format_row.h"
#include "graph/graph_net.h"
#include "passes/pass_driver.h"
#include "passes/prune/prune_internal.h"

typedef struct top {
    int axis_out, axis_in;     /* axes the masks apply to */
    uint64_t n_out, n_in;      /* mask lengths */
    uint8_t *keep_out, *keep_in;  /* 1 = channel kept (removal), or NULL */
    uint8_t *zero_out, *zero_in;  /* 1 = channel zeroed (fallback), or NULL */
    long chain;                /* chain index for notes, -1 */
    int role;                  /* what the tensor is in its chain */
    double target;             /* the sparsity its channels were pruned at (producer / fallback) */
} top;

enum { R_NONE, R_PRODUCER, R_BIAS, R_BN, R_DW, R_DWBIAS, R_CONSUMER };

typedef struct plan {
    npuc_model *m;
    npuc__graph *g;
    top *ops;
    npuc__chain *chains;
    size_t nchains;
    const npuc_prune_opts *o;
    const double *target;      /* per tensor: its --layer-sparsity S, else the global one */
    npuc_summary *sum;         /* for the warnings that list guesses one by one */
    size_t nfallback, nprotected;
    int stated;                /* the chains come from the file's graph (prune_stated.c) */
} plan;

/* [A, D, B] counts of a shape around axis. */
static void split(const npuc_tensor_info *t, int axis, uint64_t *A, uint64_t *D, uint64_t *B) {
    uint64_t a = 1, b = 1;
    for (int i = 0; i < axis; i++) a *= (uint64_t)t->shape[i];
    for (int i = axis + 1; i < t->rank; i++) b *= (uint64_t)t->shape[i];
    *A = a;
    *D = (uint64_t)t->shape[axis];
    *B = b;
}

/* acc[d] += sum over the slice d of `axis` of |x| (L1) or x^2 (L2). */
static void axis_norms(const npuc_tensor_info *t, int axis, const float *x, int l2, double *acc) {
    uint64_t A, D, B;
    split(t, axis, &A, &D, &B);
    for (uint64_t a = 0; a < A; a++)
        for (uint64_t d = 0; d < D; d++) {
            const float *p = x + (a * D + d) * B;
            double s = 0;
            for (uint64_t b = 0; b < B; b++) s += l2 ? (double)p[b] * (double)p[b] : fabs((double)p[b]);
            acc[d] += s;
        }
}

/* Channels kept out of c: c - floor(S c), rounded up to a multiple of r. */
static uint64_t kept_count(uint64_t c, double s, uint32_t r) {
    uint64_t k = c - (uint64_t)floor(s * (double)c);
    if (r > 1) k = (k + r - 1) / r * r;
    if (k > c) k = c;
    if (k == 0) k = 1;
    return k;
}

/* The note of a layer the sparsity leaves whole; --round-to is named only
 * when the user gave it (0: not given; issue 31 item 13). */
static void keeps_all_note(npuc_tensor_record *r, uint64_t channels, double S, uint32_t round_to) {
    if (round_to)
        npuc__fmt(r->note, sizeof r->note, "keeps all %llu channels (sparsity %g, --round-to %u)",
                  (unsigned long long)channels, S, round_to);
    else
        npuc__fmt(r->note, sizeof r->note, "keeps all %llu channels (sparsity %g)", (unsigned long long)channels, S);
}

typedef struct scored {
    double s;
    uint64_t i;
} scored;

static int cmp_scored(const void *a, const void *b) {
    const scored *x = a, *y = b;
    if (x->s != y->s) return x->s < y->s ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* keep[c] = 1 for the `kept` channels of largest score (ties: the lower
 * index is removed first). */
static npuc_status keep_mask(npuc_ctx *ctx, const double *score, uint64_t c, uint64_t kept, uint8_t *keep) {
    scored *s = malloc((size_t)(c ? c : 1) * sizeof *s);
    if (!s) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < c; i++) {
        s[i].s = score[i];
        s[i].i = i;
    }
    qsort(s, (size_t)c, sizeof *s, cmp_scored);
    for (uint64_t i = 0; i < c; i++) keep[s[i].i] = i >= c - kept;
    free(s);
    return NPUC_OK;
}

static npuc_status scores_of(npuc_ctx *ctx, plan *P, size_t ti, int axis, int l2, double *acc,
                             npuc_scratch *scr) {
    const float *x;
    npuc_status st = npuc__load_f32(ctx, P->m, ti, scr, &x);
    if (st != NPUC_OK) return st;
    uint64_t nb = 0;
    const npuc_tensor_info *t = npuc_model_tensor(P->m, ti);
    for (uint64_t i = 0; i < t->numel; i++) nb += npuc_mag(x[i]) >= NPUC_MAG_BAD;
    if (nb) {
        npuc_model_release(P->m, ti);
        npuc__prune_bad_values(ctx, t->name, nb);
        return npuc__prefix_path(ctx, NPUC_ERR_VALUE, npuc_model_path(P->m));
    }
    axis_norms(t, axis, x, l2, acc);
    npuc_model_release(P->m, ti);
    return NPUC_OK;
}

static uint8_t *dupmask(const uint8_t *k, uint64_t n) {
    uint8_t *p = malloc((size_t)(n ? n : 1));
    if (p) memcpy(p, k, (size_t)n);
    return p;
}

/* Claims the axes of every tensor in chain ci for removal with keep[];
 * returns 1 (nothing claimed, *who names the conflict) when one is taken. */
static int claim_chain(plan *P, size_t ci, const uint8_t *keep, const char **who, int *nomem) {
    const npuc__chain *c = &P->chains[ci];
    top *ops = P->ops;
    /* check */
    struct { int64_t t; int in; int role; } list[3 + 7 * NPUC_CHAIN_MAX];
    size_t n = 0;
    list[n].t = (int64_t)c->producer; list[n].in = 0; list[n++].role = R_PRODUCER;
    if (c->bias >= 0) { list[n].t = c->bias; list[n].in = 0; list[n++].role = R_BIAS; }
    for (size_t i = 0; i < c->nwith; i++) { /* an Add's other branches: the same channels */
        list[n].t = (int64_t)c->with[i]; list[n].in = 0; list[n++].role = R_PRODUCER;
        if (c->with_bias[i] >= 0) { list[n].t = c->with_bias[i]; list[n].in = 0; list[n++].role = R_BIAS; }
    }
    for (size_t i = 0; i < c->nbn; i++) {
        const int64_t parts[4] = {c->bn[i].gamma, c->bn[i].beta, c->bn[i].mean, c->bn[i].var};
        for (int p = 0; p < 4; p++)
            if (parts[p] >= 0) { list[n].t = parts[p]; list[n].in = 0; list[n++].role = R_BN; }
    }
    for (size_t i = 0; i < c->ndw; i++) {
        list[n].t = (int64_t)c->dw[i].weight; list[n].in = 0; list[n++].role = R_DW;
        if (c->dw[i].bias >= 0) { list[n].t = c->dw[i].bias; list[n].in = 0; list[n++].role = R_DWBIAS; }
    }
    for (size_t i = 0; i < c->ncons; i++) { list[n].t = (int64_t)c->cons[i]; list[n].in = 1; list[n++].role = R_CONSUMER; }
    for (size_t i = 0; i < n; i++) {
        const top *o = &ops[list[i].t];
        if ((list[i].in ? (o->keep_in || o->zero_in) : (o->keep_out || o->zero_out))) {
            *who = npuc_model_tensor(P->m, (size_t)list[i].t)->name;
            return 1;
        }
        for (size_t j = 0; j < i; j++)
            if (list[j].t == list[i].t && list[j].in == list[i].in) {
                *who = npuc_model_tensor(P->m, (size_t)list[i].t)->name;
                return 1;
            }
    }
    for (size_t i = 0; i < n; i++) {
        top *o = &ops[list[i].t];
        const npuc_tensor_info *t = npuc_model_tensor(P->m, (size_t)list[i].t);
        uint8_t *k = dupmask(keep, c->channels);
        if (!k) { *nomem = 1; return 1; }
        if (list[i].in) {
            o->keep_in = k;
            o->axis_in = npuc__in_axis(t);
            o->n_in = c->channels;
        } else {
            o->keep_out = k;
            o->axis_out = t->rank == 1 ? 0 : npuc__out_axis(t);
            o->n_out = c->channels;
        }
        if (o->role == R_NONE || list[i].role == R_PRODUCER) o->role = list[i].role;
        if (o->chain < 0 || list[i].role == R_PRODUCER) o->chain = (long)ci;
        if (list[i].role == R_PRODUCER) o->target = P->target[c->producer];
    }
    return 0;
}

/* ------------------------------------------------------------ notes */

static void fmt_shape(const npuc_tensor_info *t, const top *o, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < t->rank && k < n; i++) {
        uint64_t d = (uint64_t)t->shape[i];
        if (o->keep_out && i == o->axis_out) { d = 0; for (uint64_t j = 0; j < o->n_out; j++) d += o->keep_out[j]; }
        if (o->keep_in && i == o->axis_in) { d = 0; for (uint64_t j = 0; j < o->n_in; j++) d += o->keep_in[j]; }
        k += (size_t)snprintf(buf + k, n - k, "%s%llu", i ? "," : "", (unsigned long long)d);
    }
    if (k < n) snprintf(buf + k, n - k, "]");
}

static uint64_t count0(const uint8_t *k, uint64_t n) {
    uint64_t z = 0;
    for (uint64_t i = 0; i < n; i++) z += !k[i];
    return z;
}

static uint64_t count1(const uint8_t *k, uint64_t n) { return n - count0(k, n); }

/* ------------------------------------------------------------ planning */

/* A conv/linear weight: the module graph's, or the stated graph's kernel. */
static int is_weight(const plan *P, size_t i) {
    if (P->stated) return npuc__chain_stated_kind(P->m, i) != 0;
    return npuc__graph_mod(P->g, i)->weight == (int64_t)i;
}

/* 1 when tensor i is an Add branch of a chain found before. */
static int in_group(const plan *P, size_t i) {
    for (size_t k = 0; k < P->nchains; k++)
        for (size_t j = 0; j < P->chains[k].nwith; j++)
            if (P->chains[k].with[j] == i) return 1;
    return 0;
}

static int is_dw(const plan *P, size_t i) {
    return P->stated ? npuc__chain_stated_kind(P->m, i) == 2 : npuc__graph_is_dw(P->g, i, 0);
}

static int role_prunable(const npuc_tensor_info *t) {
    return t->role != NPUC_ROLE_EMBEDDING && t->role != NPUC_ROLE_RNN && t->role != NPUC_ROLE_NORM;
}

static npuc_status plan_chains(npuc_ctx *ctx, plan *P, const unsigned char *sel, const unsigned char *named,
                               npuc_tensor_record *rec, npuc_scratch *scr) {
    const npuc_prune_opts *o = P->o;
    const size_t n = npuc_model_count(P->m);
    const int l2 = o->criterion == NPUC_PRUNE_L2;
    const int channel_mode = o->structure == NPUC_PRUNE_CHANNEL;
    npuc_status st = NPUC_OK;
    long *cons_of = NULL;
    double *score = NULL;
    uint8_t *keep = NULL;
    size_t first_weight = n;

    P->chains = calloc(n ? n : 1, sizeof *P->chains);
    cons_of = malloc((n ? n : 1) * sizeof *cons_of);
    if (!P->chains || !cons_of) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
    for (size_t i = 0; i < n; i++) cons_of[i] = -1;
    /* Every producer's chain (channel mode needs consumer -> chain). */
    for (size_t i = 0; i < n; i++) {
        if (!is_weight(P, i)) continue;
        if (first_weight == n) first_weight = i;
        const npuc_tensor_info *t = npuc_model_tensor(P->m, i);
        if (is_dw(P, i) || !role_prunable(t)) continue;
        if (!channel_mode && !sel[i]) continue;
        if (channel_mode && in_group(P, i)) continue; /* an Add's branch: its group's chain has its consumers */
        npuc__chain *c = &P->chains[P->nchains];
        if ((st = P->stated ? npuc__chain_stated_of(ctx, P->m, i, c) : npuc__chain_of(ctx, P->g, i, c)) != NPUC_OK)
            goto done;
        if (channel_mode && c->ok)
            for (size_t k = 0; k < c->ncons; k++)
                cons_of[c->cons[k]] = cons_of[c->cons[k]] == -1 ? (long)P->nchains : -2; /* -2: two producers */
        P->nchains++;
    }

    for (size_t i = 0; i < n; i++) {
        if (!sel[i]) continue;
        const npuc_tensor_info *t = npuc_model_tensor(P->m, i);
        npuc_tensor_record *r = &rec[i];
        if (!is_weight(P, i) || npuc__out_axis(t) < 0) {
            npuc__fmt(r->note, sizeof r->note, "not a conv/linear weight");
            continue;
        }
        if (!role_prunable(t)) {
            npuc__fmt(r->note, sizeof r->note, "%s: no filters to prune", npuc_role_name(t->role));
            continue;
        }
        if (is_dw(P, i)) {
            npuc__fmt(r->note, sizeof r->note, "depthwise: its channels shrink with the layer feeding it");
            continue;
        }
        npuc__chan gch; /* the channels every pass reads (fold-bn included) */
        npuc__graph_channels(P->m, i, &gch);
        if (gch.groups > 1) {
            npuc__fmt(r->note, sizeof r->note, "a transposed conv of %d groups (stated by the file): its %llu "
                      "channels span the groups; not pruned", gch.groups, (unsigned long long)gch.channels);
            continue;
        }
        long ci = -1;
        if (channel_mode) ci = cons_of[i] >= 0 ? cons_of[i] : -1;
        else
            for (size_t k = 0; k < P->nchains; k++)
                if (P->chains[k].producer == i) ci = (long)k;
        npuc__chain *c = ci >= 0 ? &P->chains[ci] : NULL;
        const double S = P->target[i]; /* the selected tensor's rule decides, producer or consumer */
        const char *why = NULL, *conflict = NULL;
        char whybuf[256];
        if (c && c->ok && P->ops[c->producer].chain == ci && (P->ops[c->producer].keep_out)) continue; /* done */
        if (P->stated && !channel_mode && P->ops[i].keep_out && P->ops[i].role == R_PRODUCER) continue; /* an Add's branch */
        int usable = c && c->ok;
        if (usable && c->guess && kept_count(c->channels, S, o->round_to) < c->channels) {
            /* A chain resting on storage or layer order: refused under
             * --strict, listed and left alone unless --accept-guesses. */
            const npuc_policy *pol = npuc_ctx_policy(ctx);
            const char *pname = npuc_model_tensor(P->m, c->producer)->name;
            if (pol->strict) {
                st = npuc_fail(ctx, NPUC_ERR_GUESS,
                               "%s: tensor '%s': structured pruning: its consumers rest on a guess (%s); refused by "
                               "--strict: state them with --next/--graph", npuc_model_path(P->m), pname, c->guess_why);
                goto done;
            }
            if (!pol->accept_guesses) {
                if ((st = npuc_summary_warn(P->sum, "tensor '%s': its consumers rest on a guess (%s); not applied, "
                                            "its filters are zeroed instead: state them with --next/--graph, or "
                                            "--accept-guesses applies the guess", pname, c->guess_why)) != NPUC_OK)
                    goto done;
                usable = 0;
                why = "consumers found by a guess (see the warnings); --accept-guesses applies it";
            }
        }
        if (usable) {
            /* Rank the shared channels and claim the chain. */
            free(score);
            free(keep);
            score = calloc((size_t)c->channels, sizeof *score);
            keep = calloc((size_t)c->channels, 1);
            if (!score || !keep) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
            if (!channel_mode) {
                if ((st = scores_of(ctx, P, c->producer, npuc__out_axis(t), l2, score, scr)) != NPUC_OK) goto done;
                for (size_t k = 0; k < c->nwith; k++) /* an Add's branches rank the channels together */
                    if ((st = scores_of(ctx, P, c->with[k], npuc__out_axis(npuc_model_tensor(P->m, c->with[k])), l2,
                                        score, scr)) != NPUC_OK)
                        goto done;
            } else {
                for (size_t k = 0; k < c->ncons; k++)
                    if (sel[c->cons[k]]) {
                        const npuc_tensor_info *tc = npuc_model_tensor(P->m, c->cons[k]);
                        if ((st = scores_of(ctx, P, c->cons[k], npuc__in_axis(tc), l2, score, scr)) != NPUC_OK) goto done;
                    }
            }
            const uint64_t kc = kept_count(c->channels, S, o->round_to);
            if (kc == c->channels) {
                keeps_all_note(r, c->channels, S, o->round_to);
                continue;
            }
            if ((st = keep_mask(ctx, score, c->channels, kc, keep)) != NPUC_OK) goto done;
            int nomem = 0;
            if (claim_chain(P, (size_t)ci, keep, &conflict, &nomem) == 0) {
                P->ops[c->producer].target = S;
                if (c->guess &&
                    (st = npuc_summary_warn(P->sum, "tensor '%s': shrunk along consumers that rest on a guess (%s), "
                                            "applied by --accept-guesses: check them, or state them with "
                                            "--next/--graph", npuc_model_tensor(P->m, c->producer)->name,
                                            c->guess_why)) != NPUC_OK)
                    goto done;
                continue;
            }
            if (nomem) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
            snprintf(whybuf, sizeof whybuf, "'%s' is already shrunk by another chain", conflict);
            why = whybuf;
        } else if (why) {
            /* a guess not applied */
        } else if (channel_mode) {
            why = cons_of[i] == -2 ? "two producers feed it" : "its producer was not found";
        } else {
            why = c ? c->why : "no chain";
        }
        /* A graph the file states refuses a layer the user named: the edit
         * cannot be proven, and zeroing is not what was asked for. */
        if (P->stated && named[i] && !(c && c->output) && !channel_mode) {
            st = npuc_fail(ctx, NPUC_ERR_ARG, "%s: tensor '%s': structured pruning cannot follow the graph: %s",
                           npuc_model_path(P->m), t->name, why);
            goto done;
        }
        /* Fallback: zero the weakest filters (input slices) of this tensor. */
        const int protect = channel_mode ? i == first_weight : (c && c->output);
        if (protect && !named[i]) {
            npuc__fmt(r->note, sizeof r->note, "%s: kept (--include it to zero its %s)",
                     channel_mode ? "reads the model input" : "feeds the model output",
                     channel_mode ? "input channels" : "filters");
            P->nprotected++;
            continue;
        }
        const int axis = channel_mode ? npuc__in_axis(t) : npuc__out_axis(t);
        const uint64_t C = (uint64_t)t->shape[axis];
        uint64_t o_ = 0, c_ = 0, in_ = 0;
        uint64_t chn = C;
        if (!channel_mode && npuc_layout_view(t, &o_, &c_, &in_) == NPUC_OK) chn = c_;
        free(score);
        free(keep);
        score = calloc((size_t)chn, sizeof *score);
        keep = calloc((size_t)chn, 1);
        if (!score || !keep) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
        if (kept_count(chn, S, o->round_to) == chn) {
            keeps_all_note(r, chn, S, o->round_to);
            continue;
        }
        if ((st = scores_of(ctx, P, i, axis, l2, score, scr)) != NPUC_OK) goto done;
        if ((st = keep_mask(ctx, score, chn, kept_count(chn, S, o->round_to), keep)) != NPUC_OK) goto done;
        for (uint64_t k = 0; k < chn; k++) keep[k] = !keep[k]; /* zero mask */
        top *op = &P->ops[i];
        uint8_t *z = dupmask(keep, chn);
        if (!z) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
        if (channel_mode) {
            free(op->zero_in);
            op->zero_in = z;
            op->axis_in = axis;
            op->n_in = chn;
        } else {
            free(op->zero_out);
            op->zero_out = z;
            op->axis_out = axis;
            op->n_out = chn;
        }
        op->role = channel_mode ? R_CONSUMER : R_PRODUCER;
        op->target = S;
        P->nfallback++;
        npuc__fmt(r->note, sizeof r->note, "zeroed, not removed: %s", why);
    }
done:
    free(cons_of);
    free(score);
    free(keep);
    return st;
}

/* ------------------------------------------------------------ applying */

/* Zeroes the slices d of axis with z[d] = 1, in place, esize bytes per element. */
static void zero_axis(const npuc_tensor_info *t, int axis, const uint8_t *z, uint8_t *b, size_t es) {
    uint64_t A, D, B;
    split(t, axis, &A, &D, &B);
    for (uint64_t a = 0; a < A; a++)
        for (uint64_t d = 0; d < D; d++)
            if (z[d]) memset(b + (a * D + d) * B * es, 0, (size_t)(B * es));
}

/* Gathers the kept slices of axis from src (shape t) into dst; returns the
 * kept count. */
static uint64_t select_axis(const npuc_tensor_info *t, int axis, const uint8_t *keep, const uint8_t *src,
                            uint8_t *dst, size_t es) {
    uint64_t A, D, B, k = 0;
    split(t, axis, &A, &D, &B);
    uint8_t *p = dst;
    for (uint64_t a = 0; a < A; a++)
        for (uint64_t d = 0; d < D; d++)
            if (keep[d]) {
                memcpy(p, src + (a * D + d) * B * es, (size_t)(B * es));
                p += B * es;
            }
    for (uint64_t d = 0; d < D; d++) k += keep[d];
    return k;
}

/* The tensor after its ops: new shape in *nt; bytes in *out (points into
 * one of the scratch buffers). */
static void apply_ops(const npuc_tensor_info *t, const top *o, const void *raw, npuc_tensor_info *nt,
                      uint8_t *b1, uint8_t *b2, const uint8_t **out) {
    const size_t es = npuc_dtype_size(t->dtype);
    memcpy(b1, raw, (size_t)t->nbytes);
    if (o->zero_out) zero_axis(t, o->axis_out, o->zero_out, b1, es);
    if (o->zero_in) zero_axis(t, o->axis_in, o->zero_in, b1, es);
    *nt = *t;
    const uint8_t *cur = b1;
    uint8_t *other = b2;
    if (o->keep_out) {
        nt->shape[o->axis_out] = (int64_t)select_axis(nt, o->axis_out, o->keep_out, cur, other, es);
        cur = other;
        other = b1;
    }
    if (o->keep_in) {
        nt->shape[o->axis_in] = (int64_t)select_axis(nt, o->axis_in, o->keep_in, cur, other, es);
        cur = other;
    }
    uint64_t numel = 1;
    for (int i = 0; i < nt->rank; i++) numel *= (uint64_t)nt->shape[i];
    nt->numel = numel;
    nt->nbytes = numel * es;
    *out = cur;
}

static int has_ops(const top *o) { return o->keep_out || o->keep_in || o->zero_out || o->zero_in; }

/* The error of the removal / zeroing on a weight: the removed elements count
 * as zeroed. */
static npuc_status measure(npuc_ctx *ctx, npuc_model *m, size_t i, const top *o, npuc_scratch *sa,
                           npuc_scratch *sb, npuc_error_stats *err) {
    const npuc_tensor_info *t = npuc_model_tensor(m, i);
    const float *x;
    npuc_status st = npuc__load_f32(ctx, m, i, sa, &x);
    if (st != NPUC_OK) return st;
    float *y = npuc__scratch(sb, t->numel * sizeof(float));
    if (!y) {
        npuc_model_release(m, i);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    memcpy(y, x, (size_t)t->numel * sizeof(float));
    uint8_t *z;
    if (o->zero_out) zero_axis(t, o->axis_out, o->zero_out, (uint8_t *)y, 4);
    if (o->zero_in) zero_axis(t, o->axis_in, o->zero_in, (uint8_t *)y, 4);
    if (o->keep_out && (z = dupmask(o->keep_out, o->n_out))) {
        for (uint64_t k = 0; k < o->n_out; k++) z[k] = !z[k];
        zero_axis(t, o->axis_out, z, (uint8_t *)y, 4);
        free(z);
    }
    if (o->keep_in && (z = dupmask(o->keep_in, o->n_in))) {
        for (uint64_t k = 0; k < o->n_in; k++) z[k] = !z[k];
        zero_axis(t, o->axis_in, z, (uint8_t *)y, 4);
        free(z);
    }
    npuc_error_measure(x, y, t->numel, err);
    npuc_model_release(m, i);
    return NPUC_OK;
}

static void fill_record(plan *P, size_t i, npuc_tensor_record *r, const npuc_tensor_info *nt) {
    const top *o = &P->ops[i];
    const npuc_tensor_info *t = npuc_model_tensor(P->m, i);
    const npuc_prune_opts *opt = P->o;
    char shp[96];
    fmt_shape(t, o, shp, sizeof shp);
    r->action = NPUC_ACTION_PRUNED;
    r->params_after = nt->numel;
    r->bytes_after = nt->nbytes;
    snprintf(r->scheme, sizeof r->scheme, "%s/%s", opt->structure == NPUC_PRUNE_CHANNEL ? "channel" : "filter",
             opt->criterion == NPUC_PRUNE_L2 ? "l2" : "l1");
    const npuc__chain *c = o->chain >= 0 ? &P->chains[o->chain] : NULL;
    const char *head = c ? npuc_model_tensor(P->m, c->producer)->name : "?";
    if (o->zero_out || o->zero_in) {
        const uint64_t C = o->zero_out ? o->n_out : o->n_in;
        const uint64_t z = o->zero_out ? count1(o->zero_out, C) : count1(o->zero_in, C);
        npuc_record_set(r, "channels", (double)C);
        npuc_record_set(r, "channels_removed", (double)z);
        npuc_record_set(r, "sparsity_target", o->target);
        npuc_record_set(r, "sparsity", C ? (double)z / (double)C : 0);
        return; /* the note was written at planning */
    }
    uint64_t C = o->keep_out ? o->n_out : o->n_in;
    uint64_t rem = o->keep_out ? count0(o->keep_out, o->n_out) : count0(o->keep_in, o->n_in);
    if (o->role == R_PRODUCER) {
        npuc_record_set(r, "channels", (double)C);
        npuc_record_set(r, "channels_removed", (double)rem);
        npuc_record_set(r, "sparsity_target", o->target);
        npuc_record_set(r, "sparsity", C ? (double)rem / (double)C : 0);
        char cons[80] = "";
        if (c && c->ncons) npuc__fmt(cons, sizeof cons, "%s%s", npuc_model_tensor(P->m, c->cons[0])->name, c->ncons > 1 ? ",..." : "");
        npuc__fmt(r->note, sizeof r->note, "-> %s; %zu BN, %zu dw, next %s (%s)", shp, c ? c->nbn : 0,
                 c ? c->ndw : 0, cons, c ? c->how : "?");
        if (o->keep_in) {
            /* also the consumer of another chain */
            uint64_t ri = count0(o->keep_in, o->n_in);
            npuc_record_set(r, "inputs_removed", (double)ri);
        }
        return;
    }
    npuc_record_set(r, "channels_removed", (double)rem);
    const char *what = o->role == R_BIAS ? "bias of" : o->role == R_BN ? "BatchNorm on" :
                       o->role == R_DW ? "depthwise on" : o->role == R_DWBIAS ? "depthwise bias on" :
                       "input channels of";
    npuc__fmt(r->note, sizeof r->note, "-> %s: %s %s", shp, what, head);
}

/* The consistency check (graph_consistency.c) on the planned output, with
 * the stated edges of o: the driver checks every output again before it is
 * published, but only by the file's own evidence. */
static npuc_status check_planned(npuc_ctx *ctx, npuc_model *m, const npuc_tensor_info *newt,
                                 const npuc_prune_opts *o) {
    if (!o->nnext && !o->graph_file) return NPUC_OK;
    const size_t nm = npuc_model_meta_count(m);
    char **k = calloc(nm ? nm : 1, sizeof *k), **v = calloc(nm ? nm : 1, sizeof *v);
    npuc_status st = NPUC_OK;
    if (!k || !v) st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < nm && st == NPUC_OK; i++) npuc_model_meta_at(m, i, (const char **)&k[i], (const char **)&v[i]);
    if (st == NPUC_OK) {
        st = npuc__graph_check_declared_edges(ctx, npuc_model_path(m), newt, npuc_model_count(m), k, v, nm, o->next,
                                              o->nnext, o->graph_file);
    }
    free(k);
    free(v);
    return st;
}

/* Writes the model's graph entry (model_config) with the kernels at their
 * pruned shapes newt[0..n) through the output format's graph_write hook.
 * A configuration the graph reader refuses is left as it was (validate
 * --deep reports it); only running out of memory or an edit the format
 * cannot write fails. */
static npuc_status resized_graph_meta(npuc_ctx *ctx, npuc_model *m, npuc_writer *w, const npuc_tensor_info *newt,
                                      size_t n, const npuc__ng *resized) {
    if (!w || !w->row || !w->row->graph_meta || !npuc_model_meta_get(m, w->row->graph_meta)) return NPUC_OK;
    if (resized) {
        /* the stated graph's edit (prune_stated.c), already checked against newt */
        const char *key;
        char *out = NULL;
        npuc_status st = npuc__graph_write_meta(ctx, w, m, resized, &key, &out);
        if (st == NPUC_OK && out) st = npuc_writer_meta(w, key, out);
        free(out);
        return st;
    }
    npuc_status st = npuc_model_read_graph(ctx, m);
    if (st == NPUC_ERR_NOMEM) return st;
    if (st != NPUC_OK) {
        npuc_ctx_clear(ctx);
        return NPUC_OK;
    }
    npuc__ng *g = npuc__ng_clone(npuc_model_graph(m));
    if (!g) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < g->nnodes; i++)
        for (size_t k = 0; k < g->nodes[i].nw; k++) {
            npuc_graph_weight *W = &g->nodes[i].w[k];
            size_t t;
            if (npuc_model_find(m, W->tensor, &t) != 0 || t >= n || newt[t].rank != W->rank) continue;
            for (int a = 0; a < W->rank; a++) W->shape[a] = newt[t].shape[a];
        }
    const char *key;
    char *out = NULL;
    st = npuc__graph_write_meta(ctx, w, m, g, &key, &out);
    npuc__ng_free(g);
    if (st == NPUC_OK && out) st = npuc_writer_meta(w, key, out);
    free(out);
    return st;
}

npuc_status npuc__structured_prune(npuc__drive *dr, const npuc_prune_opts *o) {
    npuc_ctx *ctx = dr->ctx;
    npuc_model *m = dr->m;
    npuc_summary *sum = dr->sum;
    const char *path = npuc_model_path(m);
    const size_t n = npuc_model_count(m);
    npuc_status st = NPUC_OK;
    plan P;
    memset(&P, 0, sizeof P);
    P.m = m;
    P.o = o;
    P.sum = sum;
    npuc_scratch s1 = {0}, s2 = {0}, sa = {0}, sb = {0};
    unsigned char *sel = calloc(n ? n : 1, 1), *named = calloc(n ? n : 1, 1);
    npuc_tensor_info *newt = calloc(n ? n : 1, sizeof *newt);
    double *target = calloc(n ? n : 1, sizeof *target);
    P.target = target;
    npuc_rules inc, exc;
    memset(&inc, 0, sizeof inc);
    memset(&exc, 0, sizeof exc);
    P.ops = calloc(n ? n : 1, sizeof *P.ops);
    npuc__ng *resized = NULL;
    if (o->criterion != NPUC_PRUNE_L1 && o->criterion != NPUC_PRUNE_L2) {
        st = npuc_fail(ctx, NPUC_ERR_ARG, "unknown criterion %d", (int)o->criterion);
        goto fail;
    }
    if (!sel || !named || !newt || !target || !P.ops) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < n; i++) P.ops[i].chain = -1;
    if ((st = npuc__reject_artifact(ctx, m, "pruning")) != NPUC_OK) goto fail;
    if ((st = npuc__rules_compile(ctx, &inc, o->include, o->ninclude, 0, "--include")) != NPUC_OK ||
        (st = npuc__rules_compile(ctx, &exc, o->exclude, o->nexclude, 0, "--exclude")) != NPUC_OK)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        int in = inc.n ? npuc__rules_match(&inc, t->name) >= 0 : t->rank >= 2;
        named[i] = inc.n && in;
        if (npuc__rules_match(&exc, t->name) >= 0) in = 0;
        sel[i] = in && npuc_dtype_is_float(t->dtype) && t->numel > 0;
    }
    if ((st = npuc__rules_check_hits(ctx, &inc, "--include", path)) != NPUC_OK ||
        (st = npuc__rules_check_hits(ctx, &exc, "--exclude", path)) != NPUC_OK)
        goto fail;
    if ((st = npuc__layer_sparsity(ctx, m, o, target, NULL)) != NPUC_OK) goto fail;
    if ((st = npuc__chain_graph(ctx, m, o, &P.g)) != NPUC_OK) goto fail;
    /* A graph the file states (ONNX) gives the chains; stated --next/--graph
     * edges keep the older rules. */
    P.stated = !o->nnext && !o->graph_file && npuc__chain_stated(ctx, m);
    if ((st = plan_chains(ctx, &P, sel, named, sum->records, &sa)) != NPUC_OK) goto fail;

    uint64_t maxb = 1;
    for (size_t i = 0; i < n; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        newt[i] = *t;
        if (t->nbytes > maxb) maxb = t->nbytes;
    }
    uint8_t *b1 = npuc__scratch(&s1, maxb), *b2 = npuc__scratch(&s2, maxb);
    if (!b1 || !b2) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto fail; }
    /* New shapes, from the masks alone (declare before any payload). */
    for (size_t i = 0; i < n; i++) {
        const top *op = &P.ops[i];
        if (!has_ops(op)) continue;
        npuc_tensor_info *nt = &newt[i];
        if (op->keep_out) nt->shape[op->axis_out] = (int64_t)count1(op->keep_out, op->n_out);
        if (op->keep_in) nt->shape[op->axis_in] = (int64_t)count1(op->keep_in, op->n_in);
        uint64_t numel = 1;
        for (int d = 0; d < nt->rank; d++) numel *= (uint64_t)nt->shape[d];
        nt->numel = numel;
        nt->nbytes = numel * npuc_dtype_size(nt->dtype);
    }

    /* Before a byte is written: every layout the removal relies on, and the
     * planned output's channel extents along the stated edges too. */
    for (size_t i = 0; i < n; i++)
        if (has_ops(&P.ops[i]) && npuc_model_tensor(m, i)->layout != NPUC_LAYOUT_NONE &&
            (st = npuc__drive_guard(dr, i, "structured pruning")) != NPUC_OK)
            goto fail;
    if ((st = check_planned(ctx, m, newt, o)) != NPUC_OK) goto fail;
    if (P.stated) {
        /* the file's graph, resized along its edges, must agree with newt */
        uint64_t *kept = calloc(P.nchains ? P.nchains : 1, sizeof *kept);
        if (!kept) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto fail; }
        for (size_t ci = 0; ci < P.nchains; ci++) {
            const top *op = &P.ops[P.chains[ci].producer];
            if (P.chains[ci].ok && op->keep_out && op->chain == (long)ci) kept[ci] = count1(op->keep_out, op->n_out);
        }
        st = npuc__chain_stated_resize(ctx, m, P.chains, P.nchains, kept, newt, &resized);
        free(kept);
        if (st != NPUC_OK) goto fail;
    }

    if ((st = npuc__drive_open(dr, NULL, NULL)) != NPUC_OK) goto fail;
    for (size_t i = 0; i < n; i++)
        if ((st = npuc__drive_declare(dr, &newt[i])) != NPUC_OK) goto fail;
    /* The graph the format keeps (a Keras model_config) follows the
     * weights: each kernel's new shape goes into the model's network graph
     * and the output format's graph_write hook writes it back (filters /
     * units of every layer whose kernel shrank); `npuc validate --deep`
     * checks the result. */
    if ((st = resized_graph_meta(ctx, m, dr->w, newt, n, resized)) != NPUC_OK) goto fail;
    for (size_t i = 0; i < n; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        npuc_tensor_record *r = &sum->records[i];
        const top *op = &P.ops[i];
        const void *raw;
        if (!has_ops(op)) {
            if ((st = npuc__drive_pass_through(dr, i)) != NPUC_OK) goto fail;
            npuc__drive_done(dr, i);
            continue;
        }
        if (t->rank >= 2 && npuc_dtype_is_float(t->dtype)) {
            if ((st = measure(ctx, m, i, op, &sa, &sb, &r->err)) != NPUC_OK) goto fail;
            r->has_error = 1;
        }
        if ((st = npuc_model_data(ctx, m, i, &raw)) != NPUC_OK) goto fail;
        npuc_tensor_info nt;
        const uint8_t *bytes;
        apply_ops(t, op, raw, &nt, b1, b2, &bytes);
        st = npuc__drive_write(dr, bytes, nt.nbytes);
        npuc_model_release(m, i);
        if (st != NPUC_OK) goto fail;
        fill_record(&P, i, r, &nt);
        npuc__drive_done(dr, i);
    }
    if (P.nfallback && P.stated)
        npuc_summary_warn(sum, "%zu layer(s) had channels zeroed instead of removed: the file's graph has edges the edit "
                          "cannot follow (see their notes)", P.nfallback);
    else if (P.nfallback)
        npuc_summary_warn(sum, "%zu layer(s) had channels zeroed instead of removed: no trustworthy consumer chain was "
                          "found (see their notes); pass --next/--graph to shrink them", P.nfallback);
    if (P.nprotected)
        npuc_summary_warn(sum, "%zu layer(s) at the model's %s were left as they are", P.nprotected,
                          o->structure == NPUC_PRUNE_CHANNEL ? "input" : "output");
fail:
    st = npuc__drive_end(dr, st);
    npuc__rules_free(&inc);
    npuc__rules_free(&exc);
    if (P.ops)
        for (size_t i = 0; i < n; i++) {
            free(P.ops[i].keep_out);
            free(P.ops[i].keep_in);
            free(P.ops[i].zero_out);
            free(P.ops[i].zero_in);
        }
    free(P.ops);
    free(P.chains);
    npuc__ng_free(resized);
    npuc__graph_free(P.g);
    free(sel);
    free(named);
    free(newt);
    free(target);
    npuc__scratch_free(&s1);
    npuc__scratch_free(&s2);
    npuc__scratch_free(&sa);
    npuc__scratch_free(&sb);
    return st;
}
