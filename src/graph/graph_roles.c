/*
 * graph_roles.c - the edge layers of a model, each side on its own: from
 * the network graph the file states, else names, else order
 * (graph_roles.h has the rules).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "graph/graph_net.h"
#include "graph/graph_roles.h"

const char *npuc__edge_name(npuc__edge e) {
    static const char *const N[] = {"", "embedding", "input convolution", "output head", "first weight layer",
                                    "last weight layer"};
    return (unsigned)e < sizeof N / sizeof N[0] ? N[e] : "";
}

/* Any path component. */
static const char *const EMBED[] = {"embed_tokens", "wte", "word_embeddings", "tok_embeddings", "embed_in",
                                    "token_embedding", "token_embeddings", "embed", "embedding", NULL};
/* Short forms, only as the first or second component (tok.weight,
 * model.shared.weight), where they cannot be part of a block. */
static const char *const EMBED_SHORT[] = {"tok", "tok_emb", "emb", "shared", NULL};
static const char *const HEAD[] = {"lm_head", "classifier", "head", "fc", "score", "logits", "predictions",
                                   "output", "out", "fc_out", "embed_out", "qa_outputs", NULL};
/* No "conv2d": Keras and Paddle name every convolution conv2d_N. */
static const char *const INCONV[] = {"conv1", "conv0", "Conv1", "conv_stem", "stem", "conv_first", "patch_embed",
                                     "input_conv", "conv1_conv", "block1_conv1", NULL};

/* The component [s, s+n) is `base`, or `base` "_" digits when numbered
 * (Keras and Paddle number their layers: fc_0). */
static int comp_is(const char *s, size_t n, const char *base, int numbered) {
    size_t bl = strlen(base);
    if (n < bl || memcmp(s, base, bl) != 0) return 0;
    if (n == bl) return 1;
    if (!numbered || s[bl] != '_' || n == bl + 1) return 0;
    for (size_t i = bl + 1; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

static const char *in_list(const char *s, size_t n, const char *const *list, int numbered) {
    for (const char *const *b = list; *b; b++)
        if (comp_is(s, n, *b, numbered)) return *b;
    return NULL;
}

npuc__edge npuc__edge_of_name(const char *name, int rank, char *why, size_t n) {
    if (rank < 2) return NPUC_EDGE_NONE;
    const size_t first = strcspn(name, "./");
    const char *hit;
    int k = 0;
    for (const char *c = name; *c; k++) { /* any component may name the embedding */
        size_t len = strcspn(c, "./:");
        if ((hit = in_list(c, len, EMBED, 0)) || (k < 2 && c[len] && (hit = in_list(c, len, EMBED_SHORT, 0)))) {
            npuc__graph_fmt(why, n, "name %s", hit);
            return NPUC_EDGE_EMBEDDING;
        }
        c += len;
        if (*c) c++;
    }
    if ((hit = in_list(name, first, HEAD, 1))) {
        npuc__graph_fmt(why, n, "name %s", hit);
        return NPUC_EDGE_HEAD;
    }
    if (rank < 3) return NPUC_EDGE_NONE;
    if ((hit = in_list(name, first, INCONV, 1))) {
        npuc__graph_fmt(why, n, "name %s", hit);
        return NPUC_EDGE_INPUT_CONV;
    }
    if (strncmp(name, "features.0.", 11) == 0) {
        npuc__graph_fmt(why, n, "name features.0");
        return NPUC_EDGE_INPUT_CONV;
    }
    if (strstr(name, "patch_embeddings.")) {
        npuc__graph_fmt(why, n, "name patch_embeddings");
        return NPUC_EDGE_INPUT_CONV;
    }
    return NPUC_EDGE_NONE;
}

int npuc__edge_candidate(const npuc_tensor_info *t) {
    switch (t->role) {
    case NPUC_ROLE_BIAS: case NPUC_ROLE_NORM: case NPUC_ROLE_BN_GAMMA: case NPUC_ROLE_BN_BETA: case NPUC_ROLE_BN_MEAN:
    case NPUC_ROLE_BN_VAR: case NPUC_ROLE_BN_COUNT: return 0;
    default: return t->rank >= 2 && npuc_dtype_is_float(t->dtype) && t->numel > 0;
    }
}

void npuc__edge_roles_free(npuc__edge_roles *r) {
    if (!r) return;
    free(r->edge);
    free(r->confidence);
    free(r->why);
    memset(r, 0, sizeof *r);
}

/* Marks every tensor of layer L (tensor t's) with the decision. */
static void mark(npuc__edge_roles *r, const size_t *layer, size_t n, size_t t, npuc__edge e, npuc_confidence c,
                 const char *why) {
    for (size_t i = 0; i < n; i++) {
        if (i != t && (!layer || layer[i] != layer[t])) continue;
        if (r->edge[i] == NPUC_EDGE_NONE) r->nfound++;
        if (c == NPUC_CONF_GUESS && (r->edge[i] == NPUC_EDGE_NONE || r->confidence[i] != NPUC_CONF_GUESS))
            r->nguess++;
        r->edge[i] = e;
        r->confidence[i] = c;
        snprintf(r->why[i], sizeof r->why[i], "%s", why);
    }
}

/* ------------------------------------------------------------ from the graph */

/* 1 when m carries a graph the file states (ONNX nodes, a Keras
 * model_config): names and order stand in for nothing then.  A graph
 * npuc inferred from names is no better than the name rules here. */
static const npuc__ng *stated_graph(npuc_ctx *ctx, npuc_model *m) {
    const char *fmt = npuc_format_name(npuc_model_format(m));
    if (!npuc_model_graph(m) && !npuc_model_meta_get(m, "model_config") && strcmp(fmt, "onnx") != 0) return NULL;
    if (!npuc_model_graph(m) && npuc_model_read_graph(ctx, m) != NPUC_OK) return NULL; /* names decide */
    const npuc__ng *g = npuc_model_graph(m);
    if (!g || !g->nnodes) return NULL;
    for (size_t i = 0; i < g->nnodes; i++)
        if (g->nodes[i].ev.kind != NPUC_GRAPH_EV_FILE && g->nodes[i].ev.kind != NPUC_GRAPH_EV_CONFIG) return NULL;
    return g;
}

/* Marks node nd's eligible weights; returns how many. */
static size_t mark_node(const npuc__ng *g, size_t nd, const npuc_model *m, const unsigned char *eligible,
                        const size_t *layer, npuc__edge_roles *out, int input_side) {
    size_t hit = 0, n = npuc_model_count(m);
    const npuc__ng_node *x = &g->nodes[nd];
    for (size_t k = 0; k < x->nw; k++) {
        size_t t;
        if (!x->w[k].tensor || npuc_model_find(m, x->w[k].tensor, &t) != 0 || !eligible[t]) continue;
        const npuc_tensor_info *ti = npuc_model_tensor(m, t);
        npuc__edge e = !input_side ? NPUC_EDGE_HEAD
                       : ti->role == NPUC_ROLE_EMBEDDING ? NPUC_EDGE_EMBEDDING
                       : ti->role == NPUC_ROLE_CONV || ti->role == NPUC_ROLE_DWCONV ? NPUC_EDGE_INPUT_CONV
                                                                                     : NPUC_EDGE_FIRST;
        char why[64];
        npuc__graph_fmt(why, sizeof why, "%s: %s '%s'", npuc_graph_evidence_name(x->ev.kind),
                        input_side ? "reads the model input, layer" : "makes the model output, layer", x->name);
        mark(out, layer, n, t, e, x->ev.conf == NPUC_CONF_GUESS ? NPUC_CONF_CONVENTION : x->ev.conf, why);
        hit++;
    }
    return hit;
}

/* The weighted nodes nearest the model inputs (input_side) or outputs:
 * a walk from the inputs along consumers (from the outputs along
 * producers) that stops at every node holding an eligible weight.  Returns
 * the tensors marked; NPUC_ERR_NOMEM through *st. */
static size_t graph_side(const npuc__ng *g, const npuc_model *m, const unsigned char *eligible, const size_t *layer,
                         npuc__edge_roles *out, int input_side, npuc_status *st) {
    size_t nn = g->nnodes, nv = g->nvals, marked = 0, top = 0;
    unsigned char *seen = calloc(nn ? nn : 1, 1);
    size_t *stack = malloc((nn + 1) * sizeof *stack);
    size_t *cons = NULL, *cstart = NULL;
    if (input_side) { /* consumers of each value, as CSR */
        size_t ne = 0;
        for (size_t i = 0; i < nn; i++) ne += g->nodes[i].nin;
        cons = malloc((ne ? ne : 1) * sizeof *cons);
        cstart = calloc(nv + 1, sizeof *cstart);
        if (cons && cstart) {
            for (size_t i = 0; i < nn; i++)
                for (size_t k = 0; k < g->nodes[i].nin; k++) cstart[g->nodes[i].in[k] + 1]++;
            for (size_t v = 0; v < nv; v++) cstart[v + 1] += cstart[v];
            size_t *fill = calloc(nv ? nv : 1, sizeof *fill);
            if (fill) {
                for (size_t i = 0; i < nn; i++)
                    for (size_t k = 0; k < g->nodes[i].nin; k++) {
                        size_t v = g->nodes[i].in[k];
                        cons[cstart[v] + fill[v]++] = i;
                    }
                free(fill);
            } else {
                free(cons);
                cons = NULL;
            }
        }
    }
    if (!seen || !stack || (input_side && (!cons || !cstart))) {
        *st = NPUC_ERR_NOMEM;
        goto done;
    }
    /* seeds: the nodes next to a model input (output) */
    int any_input = 0;
    for (size_t v = 0; v < nv && input_side; v++) {
        size_t t;
        if (!g->vals[v].is_input || (g->vals[v].name && npuc_model_find(m, g->vals[v].name, &t) == 0))
            continue; /* an initializer, not an input */
        any_input = 1;
        for (size_t c = cstart[v]; c < cstart[v + 1]; c++)
            if (!seen[cons[c]]) seen[cons[c]] = 1, stack[top++] = cons[c];
    }
    for (size_t i = 0; i < nn && input_side && !any_input; i++) /* a Keras Sequential without InputLayer */
        if (!g->nodes[i].nin && !seen[i]) seen[i] = 1, stack[top++] = i;
    for (size_t v = 0; v < nv && !input_side; v++) {
        size_t p = g->vals[v].prod;
        if (g->vals[v].is_output && p != NPUC_GRAPH_NONE && p < nn && !seen[p]) seen[p] = 1, stack[top++] = p;
    }
    while (top) {
        size_t x = stack[--top];
        size_t h = mark_node(g, x, m, eligible, layer, out, input_side);
        marked += h;
        if (h) continue;
        const npuc__ng_node *nd = &g->nodes[x];
        if (input_side) {
            for (size_t o = 0; o < nd->nout; o++)
                for (size_t c = cstart[nd->out[o]]; c < cstart[nd->out[o] + 1]; c++)
                    if (!seen[cons[c]]) seen[cons[c]] = 1, stack[top++] = cons[c];
        } else {
            for (size_t k = 0; k < nd->nin; k++) {
                size_t p = g->vals[nd->in[k]].prod;
                if (p != NPUC_GRAPH_NONE && p < nn && !seen[p]) seen[p] = 1, stack[top++] = p;
            }
        }
    }
done:
    free(seen);
    free(stack);
    free(cons);
    free(cstart);
    return marked;
}

/* ------------------------------------------------------------ shards */

/* 1 when path's last component looks like a shard of a checkpoint
 * (name-00001-of-00003.safetensors). */
static int shard_name(const char *path) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    const char *of = strstr(b, "-of-");
    if (!of || of - b < 2) return 0;
    const char *p = of - 1;
    while (p > b && p[-1] >= '0' && p[-1] <= '9') p--;
    return p > b && p[-1] == '-' && p < of && of[4] >= '0' && of[4] <= '9';
}

/* The checkpoint folder holding path as one of several shards, opened as
 * one model (names and headers only), or NULL. */
static npuc_model *whole_checkpoint(const npuc_model *m) {
    const char *path = npuc_model_path(m);
    const char *slash = strrchr(path, '/');
    size_t dl = slash ? (size_t)(slash - path) : 1;
    char *dir = malloc(dl + 1);
    if (!dir) return NULL;
    memcpy(dir, slash ? path : ".", dl);
    dir[dl] = 0;
    DIR *d = opendir(dir);
    int found = 0;
    for (struct dirent *e; d && !found && (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        found = e->d_name[0] != '.' && n > 23 && strcmp(e->d_name + n - 23, ".safetensors.index.json") == 0;
    }
    if (d) closedir(d);
    npuc_model *w = NULL;
    npuc_ctx *c = NULL;
    if (found && npuc_ctx_new(&c) == NPUC_OK && npuc_model_open(c, dir, NULL, &w) != NPUC_OK) w = NULL;
    npuc_ctx_free(c);
    free(dir);
    if (!w) return NULL;
    size_t k;
    int holds = npuc_model_count(w) > npuc_model_count(m); /* several shards, this one among them */
    for (size_t i = 0; holds && i < npuc_model_count(m); i++)
        holds = npuc_model_find(w, npuc_model_tensor(m, i)->name, &k) == 0;
    if (!holds) {
        npuc_model_close(w);
        return NULL;
    }
    return w;
}

/* ------------------------------------------------------------ the decision */

static npuc_status decide(npuc_ctx *ctx, npuc_model *m, const unsigned char *eligible, const size_t *layer,
                          int use_order, npuc__edge_roles *out) {
    const size_t n = npuc_model_count(m);
    memset(out, 0, sizeof *out);
    out->edge = calloc(n ? n : 1, sizeof *out->edge);
    out->confidence = calloc(n ? n : 1, sizeof *out->confidence);
    out->why = calloc(n ? n : 1, sizeof *out->why);
    if (!out->edge || !out->confidence || !out->why) {
        npuc__edge_roles_free(out);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    out->alphabetical = n >= 3;
    for (size_t i = 1; i < n && out->alphabetical; i++)
        if (strcmp(npuc_model_tensor(m, i - 1)->name, npuc_model_tensor(m, i)->name) > 0) out->alphabetical = 0;

    /* The graph the file states, each side on its own. */
    size_t in_side = 0, out_side = 0;
    const npuc__ng *g = stated_graph(ctx, m);
    npuc_status st = NPUC_OK;
    if (g) {
        in_side = graph_side(g, m, eligible, layer, out, 1, &st);
        if (st == NPUC_OK) out_side = graph_side(g, m, eligible, layer, out, 0, &st);
        if (st != NPUC_OK) {
            npuc__edge_roles_free(out);
            return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        }
    }

    /* Names: every embedding and the first input conv in natural order
     * (conv0 before conv1) on the input side; the last head in natural
     * order (classifier.4 after classifier.1) on the output side. */
    int64_t head = -1, conv = -1, emb = -1;
    char why[64], head_why[64] = "", conv_why[64] = "";
    for (size_t i = 0; i < n; i++) {
        if (!eligible[i]) continue;
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        npuc__edge e = npuc__edge_of_name(t->name, t->rank, why, sizeof why);
        if (e == NPUC_EDGE_EMBEDDING && !in_side) {
            if (out->edge[i] == NPUC_EDGE_NONE) mark(out, layer, n, i, e, NPUC_CONF_CONVENTION, why);
            if (emb < 0) emb = (int64_t)i;
        } else if (e == NPUC_EDGE_HEAD && !out_side) {
            if (head < 0 || npuc__graph_natcmp(t->name, npuc_model_tensor(m, (size_t)head)->name) > 0) {
                head = (int64_t)i;
                snprintf(head_why, sizeof head_why, "%s", why);
            }
        } else if (e == NPUC_EDGE_INPUT_CONV && !in_side) {
            if (conv < 0 || npuc__graph_natcmp(t->name, npuc_model_tensor(m, (size_t)conv)->name) < 0) {
                conv = (int64_t)i;
                snprintf(conv_why, sizeof conv_why, "%s", why);
            }
        }
    }
    if (head >= 0) mark(out, layer, n, (size_t)head, NPUC_EDGE_HEAD, NPUC_CONF_CONVENTION, head_why);
    if (conv >= 0) mark(out, layer, n, (size_t)conv, NPUC_EDGE_INPUT_CONV, NPUC_CONF_CONVENTION, conv_why);
    int in_done = in_side || emb >= 0 || conv >= 0, out_done = out_side || head >= 0;

    /* A named token embedding [V, d] with no head named and no layer
     * making V outputs: the output is the embedding again (tied weights)
     * or hidden states, and no other layer is the head. */
    if (!out_done && emb >= 0) {
        const npuc_tensor_info *e = npuc_model_tensor(m, (size_t)emb);
        uint64_t v = (uint64_t)e->shape[0];
        int makes = 0;
        for (size_t i = 0; i < n && !makes; i++)
            makes = eligible[i] && (int64_t)i != emb && npuc_model_tensor(m, i)->rank >= 2 &&
                    npuc__out_channels(npuc_model_tensor(m, i)) == v;
        if (!makes) out_done = 1, out->tied = 1;
    }
    if ((in_done && out_done) || !use_order) return NPUC_OK;

    /* Each side no rule decided: order, storage order unless it is
     * alphabetical, then the numbers in the names (conv2d_9 before
     * conv2d_10), a guess either way. */
    size_t first = n, last = n;
    for (size_t i = 0; i < n; i++) {
        if (!eligible[i]) continue;
        const char *nm = npuc_model_tensor(m, i)->name;
        if (!out->alphabetical) {
            if (first == n) first = i;
            last = i;
        } else {
            if (first == n || npuc__graph_natcmp(nm, npuc_model_tensor(m, first)->name) < 0) first = i;
            if (last == n || npuc__graph_natcmp(nm, npuc_model_tensor(m, last)->name) > 0) last = i;
        }
    }
    if (first == n) return NPUC_OK;
    const char *how = out->alphabetical ? "numbering order" : "storage order";
    out->by_numbering = out->alphabetical;
    if (!in_done) mark(out, layer, n, first, NPUC_EDGE_FIRST, NPUC_CONF_GUESS, how);
    if (!out_done && (in_done || (!layer ? last != first : layer[last] != layer[first])) &&
        out->edge[last] == NPUC_EDGE_NONE)
        mark(out, layer, n, last, NPUC_EDGE_LAST, NPUC_CONF_GUESS, how);
    return NPUC_OK;
}

npuc_status npuc__edge_roles_find(npuc_ctx *ctx, npuc_model *m, const unsigned char *eligible, const size_t *layer,
                                  npuc__edge_roles *out) {
    /* One shard of a checkpoint: decided over the whole model (the folder
     * and its index), then read back for this shard's tensors.  A shard
     * without its index can only use names. */
    npuc_model *w = strcmp(npuc_format_name(npuc_model_format(m)), "safetensors") == 0 ? whole_checkpoint(m) : NULL;
    if (!w) return decide(ctx, m, eligible, layer, !shard_name(npuc_model_path(m)), out);
    const size_t n = npuc_model_count(m), nw = npuc_model_count(w);
    unsigned char *we = calloc(nw ? nw : 1, 1);
    npuc__edge_roles wr;
    npuc_status st = we ? NPUC_OK : npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == NPUC_OK && i < nw; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(w, i);
        size_t k;
        we[i] = npuc_model_find(m, t->name, &k) == 0 ? eligible[k] : (unsigned char)npuc__edge_candidate(t);
    }
    if (st == NPUC_OK) st = decide(ctx, w, we, NULL, 1, &wr);
    free(we);
    if (st == NPUC_OK) {
        memset(out, 0, sizeof *out);
        out->edge = calloc(n ? n : 1, sizeof *out->edge);
        out->confidence = calloc(n ? n : 1, sizeof *out->confidence);
        out->why = calloc(n ? n : 1, sizeof *out->why);
        if (!out->edge || !out->confidence || !out->why) {
            npuc__edge_roles_free(out);
            st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        }
        out->alphabetical = wr.alphabetical;
        out->by_numbering = wr.by_numbering;
        out->tied = wr.tied;
        for (size_t i = 0; st == NPUC_OK && i < nw; i++) {
            size_t k;
            if (wr.edge[i] == NPUC_EDGE_NONE || npuc_model_find(m, npuc_model_tensor(w, i)->name, &k) != 0) continue;
            char why[64];
            npuc__graph_fmt(why, sizeof why, "%s, over all shards", wr.why[i]);
            mark(out, layer, n, k, wr.edge[i], wr.confidence[i], why);
        }
        npuc__edge_roles_free(&wr);
    }
    npuc_model_close(w);
    return st;
}
