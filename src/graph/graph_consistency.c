/*
 * graph_consistency.c - do the tensors that share a channel set agree on its
 * extent?  Run after every pass on what it declared (pass_driver.c, before
 * the output is published) and by `npuc validate` (npuc_model_check_consistency).
 *
 * A channel set is the output channels of a producer (a conv or linear
 * weight, or a BatchNorm passing them on).  Attached to it, wherever the
 * graph knows the attachment by trustworthy evidence:
 *   bias       the producer's own bias (X.weight / X.bias, L/kernel /
 *              L/bias, X.w_0 / X.b_0): one value per output channel
 *   BatchNorm  its gamma, beta, mean and variance among themselves, and the
 *              BatchNorm the consumer view puts after a producer
 *   consumers  the input axis of the next layer (a depthwise conv passes the
 *              channels through, a grouped conv reads C/groups, a dense layer
 *              after a convolution or a BatchNorm may read C*H*W after a
 *              Flatten: a multiple of C)
 * Consumer edges come from npuc__graph_next with guesses refused (Keras
 * model_config, nn.Sequential naming) and from stated edges: storage order
 * and Keras layer order never accuse a file.  A layout that is not certain
 * (the core's guess from names, with no recorded evidence) may be the other
 * convention family's (a TensorFlow kernel read as OIHW): an extent that fits
 * that alternative is accepted, so a doubtful layout never makes a valid
 * file fail; the layout guard (pass_guard.c) is what reports the doubt.
 *
 * An artifact is checked in its logical view: each encoded tensor with the
 * dtype, shape and layout its "npuc" entry records, its stored parts left
 * out (read from the entry's "parts" list; no codec is needed).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"

#define ART_KEY "npuc"

/* ------------------------------------------------------------ extents */

static int is_certain(const npuc_tensor_info *t, const unsigned char *sure, size_t i) {
    return sure ? sure[i] : t->confidence == NPUC_CONF_CERTAIN && t->evidence != NULL;
}

/* Output (in = 0) or input (in = 1) extent of weight t under its layout
 * (alt = 0), or under the other family's (alt = 1) when its layout is not
 * certain; 0 when there is none.  An alternative reading of 1 channel is no
 * reading (a 1x1 kernel read the other way round). */
static uint64_t extent(const npuc_tensor_info *t, int certain, int in, int alt) {
    npuc_tensor_info u = *t;
    if (alt) {
        if (certain || (u.layout = npuc__layout_other_family(t->layout)) == NPUC_LAYOUT_NONE ||
            u.rank < npuc_layout_min_rank(u.layout))
            return 0;
    }
    const uint64_t e = in ? npuc__in_channels(&u) : npuc__out_channels(&u);
    return alt && e <= 1 ? 0 : e;
}

static void shape_str(const npuc_tensor_info *t, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < t->rank && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)t->shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* The one-line failure: "<path>: 'A' [..] <has> N channels, but 'B' [..]
 * (<rel>, by <evidence>) has M: ..." */
static npuc_status mismatch(npuc_ctx *ctx, const npuc__graph *g, const npuc_tensor_info *a, const char *what_a,
                            uint64_t ca, const npuc_tensor_info *b, const char *rel, uint64_t cb, const char *ev) {
    char sa[96], sb[96];
    shape_str(a, sa, sizeof sa);
    shape_str(b, sb, sizeof sb);
    return npuc_fail(ctx, NPUC_ERR_VALUE,
                     "%s: inconsistent channels: '%s' %s %s %llu, but '%s' %s (%s, by %s) has %llu; a pass left "
                     "one of them at its old size",
                     g->path, a->name, sa, what_a, (unsigned long long)ca, b->name, sb, rel, ev,
                     (unsigned long long)cb);
}

/* ------------------------------------------------------------ the checks */

static int producer_role(const npuc_tensor_info *t) {
    return t->role != NPUC_ROLE_EMBEDDING && t->role != NPUC_ROLE_RNN && t->role != NPUC_ROLE_NORM;
}

/* Every weight's own bias has one value per output channel. */
static npuc_status check_biases(npuc_ctx *ctx, const npuc__graph *g, const unsigned char *sure) {
    for (size_t k = 0; k < g->nmods; k++) {
        const int64_t wi = g->mods[k].weight;
        if (wi < 0) continue;
        const npuc_tensor_info *w = npuc__gt(g, wi);
        if (!producer_role(w)) continue;
        char *bn = npuc__graph_bias_name(w->name);
        if (!bn) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        size_t bi;
        const int found = npuc_model_find(g->m, bn, &bi) == 0;
        free(bn);
        if (!found) continue;
        const npuc_tensor_info *b = npuc__gt(g, (int64_t)bi);
        if (b->rank != 1 || b->role != NPUC_ROLE_BIAS) continue;
        const int certain = is_certain(w, sure, (size_t)wi);
        const uint64_t c = extent(w, certain, 0, 0);
        if (c == 0 || c == b->numel || extent(w, certain, 0, 1) == b->numel) continue;
        /* A grouped transposed conv (IOHW [in, out/groups, ...]) has groups * C biases. */
        if (w->layout == NPUC_LAYOUT_IOHW && b->numel % c == 0 && (uint64_t)w->shape[0] % (b->numel / c) == 0)
            continue;
        return mismatch(ctx, g, w, "has output channels", c, b, "its bias", b->numel, "naming");
    }
    return NPUC_OK;
}

/* The tensors of one BatchNorm (gamma, beta, mean, variance) have one length. */
static npuc_status check_bn_parts(npuc_ctx *ctx, const npuc__graph *g) {
    int64_t *first = malloc((g->nmods ? g->nmods : 1) * sizeof *first);
    if (!first) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    for (size_t k = 0; k < g->nmods; k++) first[k] = -1;
    npuc_status st = NPUC_OK;
    for (size_t i = 0; i < g->n && st == NPUC_OK; i++) {
        const npuc_tensor_info *t = npuc__gt(g, (int64_t)i);
        if (t->role != NPUC_ROLE_BN_GAMMA && t->role != NPUC_ROLE_BN_BETA && t->role != NPUC_ROLE_BN_MEAN &&
            t->role != NPUC_ROLE_BN_VAR)
            continue;
        const size_t k = g->mod_of[i];
        if (first[k] < 0) { first[k] = (int64_t)i; continue; }
        const npuc_tensor_info *a = npuc__gt(g, first[k]);
        if (a->numel != t->numel)
            st = mismatch(ctx, g, a, "has", a->numel, t, "the same BatchNorm", t->numel, "naming");
    }
    free(first);
    return st;
}

/* Channels module x hands on under layout family alt (see extent): a
 * weight's output extent, a BatchNorm's length (the same in both).  0 when
 * it hands on nothing this check understands. */
static uint64_t handed(const npuc__graph *g, const unsigned char *sure, size_t x, int alt,
                       const npuc_tensor_info **t) {
    const npuc__mod *md = &g->mods[x];
    if (md->is_bn) {
        const int64_t i = md->bn.mean >= 0 ? md->bn.mean : md->bn.var;
        *t = npuc__gt(g, i);
        return npuc__bn_channels(g, &md->bn);
    }
    if (md->weight < 0) return 0;
    *t = npuc__gt(g, md->weight);
    if (!producer_role(*t)) return 0;
    return extent(*t, is_certain(*t, sure, (size_t)md->weight), 0, alt);
}

/* Whether consumer weight ty reads c channels handed on by tx (a BatchNorm
 * when bn) under layout family alt. */
static int reads(const npuc_tensor_info *tx, int bn, const npuc_tensor_info *ty, int certain, uint64_t c, int alt) {
    const uint64_t in = extent(ty, certain, 1, alt);
    if (!c || !in) return 0;
    if (in == c || (!alt && npuc__is_dw(ty, c))) return 1;
    /* grouped conv: C/groups inputs per filter, groups dividing the outputs */
    if (ty->rank >= 3 && in < c && c % in == 0 && extent(ty, certain, 0, alt) % (c / in) == 0) return 1;
    /* dense after a conv or BatchNorm: a Flatten may sit between */
    return ty->rank == 2 && (tx->rank != 2 || bn) && in % c == 0;
}

/* Module y reads what x hands on (evidence ev; strong: stated or
 * model_config): under both layouts' family, or under both alternatives. */
static npuc_status check_edge(npuc_ctx *ctx, const npuc__graph *g, const unsigned char *sure, size_t x, size_t y,
                              const char *ev, int strong) {
    const npuc_tensor_info *tx;
    const uint64_t c = handed(g, sure, x, 0, &tx);
    if (c == 0) return NPUC_OK;
    const int xbn = g->mods[x].is_bn;
    const char *what = xbn ? "has" : "has output channels";
    const npuc__mod *my = &g->mods[y];
    if (my->is_bn) {
        const uint64_t b = npuc__bn_channels(g, &my->bn);
        const int64_t i = my->bn.mean >= 0 ? my->bn.mean : my->bn.var;
        if (b && b != c && handed(g, sure, x, 1, &tx) != b)
            return mismatch(ctx, g, tx, what, c, npuc__gt(g, i), "the BatchNorm after it", b, ev);
        return NPUC_OK;
    }
    if (my->weight < 0) return NPUC_OK;
    const npuc_tensor_info *ty = npuc__gt(g, my->weight);
    if (!producer_role(ty)) return NPUC_OK;
    const int cy = is_certain(ty, sure, (size_t)my->weight);
    if (reads(tx, xbn, ty, cy, c, 0) || reads(tx, xbn, ty, cy, handed(g, sure, x, 1, &tx), 1)) return NPUC_OK;
    handed(g, sure, x, 0, &tx);
    if (npuc__is_dw(ty, 0) || (ty->layout == NPUC_LAYOUT_OIHW && ty->shape[1] == 1))
        return mismatch(ctx, g, tx, what, c, ty, "the depthwise conv after it", npuc__out_channels(ty), ev);
    /* Numbering alone does not tell an nn.Sequential from an nn.ModuleList
     * whose members run side by side (heads, experts): a plain layer that
     * does not read what the one numbered before it hands on is no proof of
     * damage, so only stated and model_config edges are held to it.  A
     * BatchNorm or a depthwise conv after a layer has no other producer. */
    if (!strong) return NPUC_OK;
    return mismatch(ctx, g, tx, what, c, ty, "its consumer's input", extent(ty, cy, 1, 0), ev);
}

static npuc_status check_edges(npuc_ctx *ctx, npuc__graph *g, const unsigned char *sure) {
    npuc_status st;
    for (size_t i = 0; i < g->nxe; i++)
        for (size_t k = 0; k < g->xe[i].ncons; k++)
            if ((st = check_edge(ctx, g, sure, g->xe[i].prod, g->xe[i].cons[k], "--next/--graph", 1)) != NPUC_OK)
                return st;
    for (size_t i = 0; i < g->nxb; i++)
        if ((st = check_edge(ctx, g, sure, g->xb[i].prod, g->xb[i].bn, "--graph bn_pairs", 1)) != NPUC_OK) return st;
    g->no_guess = 1;
    for (size_t x = 0; x < g->nmods; x++) {
        const npuc_tensor_info *tx;
        if (handed(g, sure, x, 0, &tx) == 0) continue;
        npuc__next r;
        if (npuc__graph_next(g, x, &r) != 0 || r.guess) continue;
        const char *ev = r.evidence == NPUC_EVIDENCE_CONFIG ? "Keras model_config" : "nn.Sequential naming";
        for (size_t k = 0; k < r.n; k++)
            if ((st = check_edge(ctx, g, sure, x, r.mod[k], ev, r.evidence == NPUC_EVIDENCE_CONFIG)) != NPUC_OK)
                return st;
    }
    return NPUC_OK;
}

static npuc_status check_model(npuc_ctx *ctx, npuc_model *m, const unsigned char *sure, const char *const *next,
                               size_t nnext, const char *graph_file) {
    npuc__graph *g;
    npuc_status st = npuc__graph_open(ctx, m, &g);
    if (st != NPUC_OK) return st;
    if ((st = npuc__graph_read_modules(ctx, g)) == NPUC_OK && (st = check_bn_parts(ctx, g)) == NPUC_OK &&
        (st = check_biases(ctx, g, sure)) == NPUC_OK &&
        (st = npuc__graph_read_next(ctx, g, next, nnext, graph_file)) == NPUC_OK)
        st = check_edges(ctx, g, sure);
    npuc__graph_free(g);
    return st;
}

/* ------------------------------------------------------------ the logical view */

/* A model of the given infos and metadata, without payloads: what the check
 * reads is names, shapes, roles, layouts and model_config.  sure[i] keeps
 * whether info i's layout was certain (the shadow records no evidence). */
static npuc_status shadow(npuc_ctx *ctx, const char *path, const npuc_tensor_info *t, size_t n,
                          char *const *mk, char *const *mv, size_t nmeta, npuc_model **out, unsigned char **sure) {
    *out = NULL;
    *sure = NULL;
    npuc_model *m = npuc__model_new(path ? path : "(output)", NPUC_FORMAT_AUTO);
    unsigned char *s = calloc(n ? n : 1, 1);
    if (!m || !s) {
        npuc_model_close(m);
        free(s);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    npuc_status st = NPUC_OK;
    for (size_t i = 0; i < n && st == NPUC_OK; i++) {
        size_t idx;
        st = npuc__model_add(ctx, m, t[i].name, t[i].dtype, t[i].rank, t[i].shape, t[i].group, &idx);
    }
    for (size_t i = 0; i < nmeta && st == NPUC_OK; i++)
        if (strcmp(mk[i], ART_KEY) != 0 && strcmp(mk[i], "npuc.layout") != 0)
            st = npuc__model_add_meta(ctx, m, mk[i], mv[i]);
    if (st == NPUC_OK) st = npuc__model_finish(ctx, m, 0);
    if (st != NPUC_OK) {
        npuc_model_close(m);
        free(s);
        return st;
    }
    for (size_t i = 0; i < n; i++) {
        m->t[i].role = t[i].role;
        m->t[i].layout = t[i].layout;
        m->t[i].confidence = t[i].confidence;
        s[i] = t[i].confidence == NPUC_CONF_CERTAIN && t[i].evidence != NULL;
    }
    *out = m;
    *sure = s;
    return NPUC_OK;
}

static int in_set(const char *const *v, size_t n, const char *s) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i], s) == 0) return 1;
    return 0;
}

/* The logical info of outermost entry e (called key) into L: its recorded
 * dtype, shape and layout, the role of a stored tensor of that name or else
 * the core's guess.  NPUC_ERR_FORMAT for an entry without a valid shape. */
static npuc_status entry_info(npuc_ctx *ctx, const char *path, const char *key, json_t *e,
                              const npuc_tensor_info *t, size_t n, npuc_tensor_info *L) {
    json_t *sh = json_object_get(e, "shape");
    const char *dt = json_string_value(json_object_get(e, "dtype"));
    const char *ly = json_string_value(json_object_get(e, "layout"));
    memset(L, 0, sizeof *L);
    if (!json_is_array(sh) || json_array_size(sh) > NPUC_MAX_RANK || !dt || npuc_dtype_parse(dt, &L->dtype) != 0)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: npuc entry '%s': no valid dtype and shape", path, key);
    L->name = key;
    L->rank = (int)json_array_size(sh);
    for (int d = 0; d < L->rank; d++) {
        L->shape[d] = json_integer_value(json_array_get(sh, (size_t)d));
        if (L->shape[d] < 0) return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: npuc entry '%s': negative shape", path, key);
    }
    npuc_guess_role_layout(key, L->rank, L->shape, npuc__graph_is_keras_leaf(key), &L->role, &L->layout);
    for (size_t s = 0; s < n; s++)
        if (strcmp(t[s].name, key) == 0) {
            L->role = t[s].role;
            L->group = t[s].group;
        }
    npuc_layout lay;
    if (ly && npuc_layout_parse(ly, &lay) == 0) L->layout = lay;
    L->confidence = NPUC_CONF_CONVENTION;
    return NPUC_OK;
}

/* 1 when stored tensor name is a part of some entry (its own codes included). */
static int own_part(json_t *ents, const char *name) {
    const char *key;
    json_t *e;
    json_object_foreach(ents, key, e) {
        size_t j;
        json_t *p;
        json_array_foreach(json_object_get(e, "parts"), j, p) if (json_is_string(p) && strcmp(json_string_value(p), name) == 0)
            return 1;
    }
    return 0;
}

/* The logical infos of stored tensors t[n] under artifact description art:
 * stored parts left out, each outermost entry (one that is no part of
 * another) in place of its stored tensor of the same name, or at the end.
 * Names point into t or art. */
static npuc_status logical(npuc_ctx *ctx, const char *path, const npuc_tensor_info *t, size_t n, json_t *art,
                           npuc_tensor_info **out, size_t *nout) {
    json_t *ents = json_object_get(art, "tensors");
    const size_t ne = json_object_size(ents);
    const char **parts = NULL;
    size_t nparts = 0, k = 0;
    npuc_tensor_info *v = calloc(n + ne + 1, sizeof *v);
    unsigned char *placed = calloc(n + 1, 1);
    npuc_status st = NPUC_OK;
    const char *key;
    json_t *e;
    json_object_foreach(ents, key, e) nparts += json_array_size(json_object_get(e, "parts"));
    parts = malloc((nparts ? nparts : 1) * sizeof *parts);
    if (!v || !placed || !parts) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto done; }
    nparts = 0;
    json_object_foreach(ents, key, e) {
        size_t j;
        json_t *p;
        /* an entry's codes may be stored under its own name: a part of another entry is what counts */
        json_array_foreach(json_object_get(e, "parts"), j, p) if (json_is_string(p) && strcmp(json_string_value(p), key) != 0)
            parts[nparts++] = json_string_value(p);
    }
    for (size_t i = 0; i < n && st == NPUC_OK; i++) {
        e = json_object_get(ents, t[i].name);
        if (in_set(parts, nparts, t[i].name)) continue;
        if (e) {
            st = entry_info(ctx, path, t[i].name, e, t, n, &v[k++]);
            placed[i] = 1;
        } else if (!own_part(ents, t[i].name)) {
            v[k++] = t[i];
        }
    }
    json_object_foreach(ents, key, e) {
        if (st != NPUC_OK) break;
        if (in_set(parts, nparts, key)) continue;
        int stored = 0;
        for (size_t i = 0; i < n && !stored; i++) stored = placed[i] && strcmp(t[i].name, key) == 0;
        if (!stored) st = entry_info(ctx, path, key, e, t, n, &v[k++]);
    }
done:
    free(parts);
    free(placed);
    if (st != NPUC_OK) { free(v); v = NULL; k = 0; }
    *out = v;
    *nout = k;
    return st;
}

/* Checks infos t[n] with metadata: through the logical view when the
 * metadata holds an artifact description. */
static npuc_status check_infos(npuc_ctx *ctx, const char *path, const npuc_tensor_info *t, size_t n,
                               char *const *mk, char *const *mv, size_t nmeta, const char *const *next,
                               size_t nnext, const char *graph_file) {
    const char *aj = NULL;
    for (size_t i = 0; i < nmeta; i++)
        if (strcmp(mk[i], ART_KEY) == 0) aj = mv[i];
    json_t *art = NULL;
    npuc_tensor_info *lv = NULL;
    if (aj) {
        json_error_t je;
        if (!(art = json_loads(aj, 0, &je)))
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: the npuc entry is not JSON: %s", path, je.text);
        npuc_status st = logical(ctx, path, t, n, art, &lv, &n);
        if (st != NPUC_OK) { json_decref(art); return st; }
        t = lv;
    }
    npuc_model *m;
    unsigned char *sure;
    npuc_status st = shadow(ctx, path, t, n, mk, mv, nmeta, &m, &sure);
    if (st == NPUC_OK) st = check_model(ctx, m, sure, next, nnext, graph_file);
    npuc_model_close(m);
    free(sure);
    free(lv);
    json_decref(art);
    return st;
}

/* ------------------------------------------------------------ entry points */

npuc_status npuc__graph_check_declared(npuc_ctx *ctx, const char *path, const npuc_tensor_info *t, size_t n,
                                       char *const *meta_k, char *const *meta_v, size_t nmeta) {
    return check_infos(ctx, path, t, n, meta_k, meta_v, nmeta, NULL, 0, NULL);
}

npuc_status npuc__graph_check_declared_edges(npuc_ctx *ctx, const char *path, const npuc_tensor_info *t, size_t n,
                                             char *const *meta_k, char *const *meta_v, size_t nmeta,
                                             const char *const *next, size_t nnext, const char *graph_file) {
    return check_infos(ctx, path, t, n, meta_k, meta_v, nmeta, next, nnext, graph_file);
}

npuc_status npuc__graph_check_consistency(npuc_ctx *ctx, npuc_model *m, const char *const *next, size_t nnext,
                                          const char *graph_file) {
    if (!npuc_model_meta_get(m, ART_KEY)) return check_model(ctx, m, NULL, next, nnext, graph_file);
    return check_infos(ctx, m->path, m->t, m->n, m->meta_k, m->meta_v, m->nmeta, next, nnext, graph_file);
}

npuc_status npuc_model_check_consistency(npuc_ctx *ctx, npuc_model *m) {
    if (!m) return npuc_fail(ctx, NPUC_ERR_ARG, "npuc_model_check_consistency: no model");
    return npuc__graph_check_consistency(ctx, m, NULL, 0, NULL);
}
