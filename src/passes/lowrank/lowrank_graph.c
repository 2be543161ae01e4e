/*
 * lowrank_graph.c - the factored layers as a network-graph edit, for an
 * output format whose graph entry is the file's graph itself (ONNX: the
 * row's graph_meta_key): each factored weight's node is split in two in a
 * copy of the model's graph (npuc__ng_split_node), the first node reading
 * the input-side factor lr_b and producing the rank-r value, the second
 * reading it with the output-side factor lr_a and the node's bias, and the
 * format's graph_write hook writes that graph into its entry
 * (npuc__graph_write_meta; ONNX: formats/onnx/onnx_split.c).
 *
 * Names: the second node is "<weight>.lr" and the rank-r value
 * "<weight>.lr_mid", with "_1", "_2", ... appended while the graph uses the
 * name.  MatMul, Gemm and Conv (group 1: a kh x kw Conv with r outputs, then
 * a 1x1 Conv) weights read by one node are split; others (a grouped or
 * depthwise Conv, another op, a weight several nodes read) cannot be:
 * npuc__lowrank_graph_splittable tells the pass so before any SVD (it
 * keeps a default-selected weight dense, refuses an --include'd one), and
 * the split refuses them with the output and the tensor named, before
 * anything is written.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format_row.h"
#include "graph/graph_net.h"
#include "npuc_internal.h"
#include "passes/lowrank/lowrank_internal.h"

static npuc_status nomem(npuc_ctx *ctx) { return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); }

/* base + suffix, or with "_k" appended: a name no node, value or weight of
 * g uses (NULL: out of memory). */
static char *fresh(const npuc__ng *g, const npuc_model *m, const char *base, const char *suffix) {
    size_t len = strlen(base) + strlen(suffix) + 24;
    char *s = malloc(len);
    if (!s) return NULL;
    snprintf(s, len, "%s%s", base, suffix);
    size_t t;
    for (unsigned k = 1; npuc__ng_find_node(g, s) != NPUC_GRAPH_NONE || npuc__ng_find_value(g, s) != NPUC_GRAPH_NONE ||
                         npuc__ng_weight_node(g, s) != NPUC_GRAPH_NONE || npuc_model_find(m, s, &t) == 0;
         k++)
        snprintf(s, len, "%s%s_%u", base, suffix, k);
    return s;
}

/* 1 when m's graph entry is the file's graph, which w rewrites (ONNX). */
static int graph_output(npuc_model *m, const npuc_writer *w) {
    return w && w->row && w->row->graph_meta && w->row->graph_meta_key &&
           strcmp(w->row->graph_meta, w->row->graph_meta_key) == 0 && npuc_model_meta_get(m, w->row->graph_meta);
}

/* The node of g reading tensor as its kernel when that node can be split
 * (*nd), else 0 with why ("is read by ..." completing "tensor 'T' ").  A
 * MatMul / Gemm with a 2-D kernel, or a Conv (1-D to 3-D) of group 1 whose
 * kernel is the tensor. */
static int splittable(const npuc__ng *g, const char *tensor, size_t *nd, char *why, size_t nwhy) {
    size_t readers = 0;
    *nd = NPUC_GRAPH_NONE;
    for (size_t i = 0; i < g->nnodes; i++)
        for (size_t k = 0; k < g->nodes[i].nw; k++)
            if (strcmp(g->nodes[i].w[k].tensor, tensor) == 0) {
                if (*nd == NPUC_GRAPH_NONE) *nd = i;
                readers++;
                break;
            }
    if (*nd == NPUC_GRAPH_NONE) {
        snprintf(why, nwhy, "is read by no node of the model's graph, so its factors have no node to split");
        return 0;
    }
    const npuc__ng_node *n = &g->nodes[*nd];
    if (readers > 1) {
        snprintf(why, nwhy, "is read by %zu nodes ('%s' and others): a factored weight is written as one split node",
                 readers, n->name);
        return 0;
    }
    int conv = strcmp(n->op, "Conv") == 0;
    if (strcmp(n->op, "MatMul") != 0 && strcmp(n->op, "Gemm") != 0 && !conv) {
        snprintf(why, nwhy, "is read by %s '%s': only factored MatMul, Gemm and Conv (group 1) weights are written "
                 "as split nodes", n->op, n->name);
        return 0;
    }
    const char *group = conv ? npuc__ng_attr(g, *nd, "group") : NULL;
    if (group && strcmp(group, "1") != 0) {
        snprintf(why, nwhy, "is read by Conv '%s' with group %s: a grouped convolution is not a product of two "
                 "convolutions", n->name, group);
        return 0;
    }
    const npuc_graph_weight *kern = npuc__ng_weight((npuc__ng *)g, *nd, "kernel");
    if (!kern || strcmp(kern->tensor, tensor) != 0 || (conv ? kern->rank < 3 || kern->rank > 5 : kern->rank != 2)) {
        snprintf(why, nwhy, "is not the %s weight of %s '%s': its factors cannot replace it",
                 conv ? "[O, I, k..]" : "2-D", n->op, n->name);
        return 0;
    }
    for (size_t k = 0; k < n->nw; k++)
        if (&n->w[k] != kern && strcmp(n->w[k].role, "bias") != 0) {
            snprintf(why, nwhy, "is read by %s '%s', which also reads '%s' (%s), which a split node does not carry",
                     n->op, n->name, n->w[k].tensor, n->w[k].role);
            return 0;
        }
    return 1;
}

npuc_status npuc__lowrank_graph_splittable(npuc_ctx *ctx, npuc_model *m, const npuc_writer *w, size_t tensor,
                                           char *why, size_t nwhy, int *ok) {
    *ok = 1;
    if (!graph_output(m, w)) return NPUC_OK;
    npuc_status st = npuc_model_read_graph(ctx, m);
    if (st != NPUC_OK) return st;
    const npuc__ng *g = npuc_model_graph(m);
    size_t nd;
    if (g) *ok = splittable(g, npuc_model_tensor(m, tensor)->name, &nd, why, nwhy);
    return NPUC_OK;
}

static npuc_status split_one(npuc_ctx *ctx, npuc_model *m, const npuc_writer *w, npuc__ng **g,
                             const npuc__lowrank_split *sp) {
    const npuc_tensor_info *t = npuc_model_tensor(m, sp->tensor);
    size_t nd;
    char msg[400];
    if (!splittable(*g, t->name, &nd, msg, sizeof msg))
        return npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s' %s; --exclude it, or write safetensors", w->path,
                         t->name, msg);
    const npuc__ng_node *n = &(*g)->nodes[nd];
    const npuc_graph_weight *kern = npuc__ng_weight((npuc__ng *)*g, nd, "kernel");
    if (sp->a->rank != kern->rank || sp->b->rank != kern->rank)
        return npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s': its factors have rank %d and %d, its %s "
                         "kernel %d: they cannot replace it; --exclude it, or write safetensors", w->path, t->name,
                         sp->a->rank, sp->b->rank, n->op, kern->rank);
    /* lr_b on the first node, lr_a and the bias on the second; both keep
     * the kernel's axes (the factors' layout is the weight's: a Conv's
     * lr_b [r, I, k..] and lr_a [O, r, 1..] are kernels as OIHW). */
    npuc_graph_weight w1[1], w2[8];
    size_t nw2 = 0;
    w1[0] = *kern;
    w1[0].tensor = sp->b->name;
    for (int k = 0; k < kern->rank; k++) w1[0].shape[k] = sp->b->shape[k];
    w2[nw2] = *kern;
    w2[nw2].tensor = sp->a->name;
    for (int k = 0; k < kern->rank; k++) w2[nw2].shape[k] = sp->a->shape[k];
    nw2++;
    for (size_t k = 0; k < n->nw; k++) {
        const npuc_graph_weight *x = &n->w[k];
        if (x == kern) continue;
        if (nw2 == sizeof w2 / sizeof w2[0])
            return npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s': %s '%s' reads too many weights for a split; "
                             "--exclude it, or write safetensors", w->path, t->name, n->op, n->name);
        w2[nw2++] = *x;
    }
    /* The rank-r value's shape is left unknown: the ONNX reader's values
     * carry none (a Conv chain with r channels between passes
     * npuc__ng_check when they do: test_netgraph's test_split_conv). */
    char *name = npuc__strdup(n->name), *op = npuc__strdup(n->op);
    char *second = fresh(*g, m, t->name, ".lr"), *mid = fresh(*g, m, t->name, ".lr_mid");
    npuc_status st = NPUC_OK;
    if (!name || !op || !second || !mid) st = nomem(ctx);
    if (st == NPUC_OK) st = npuc__ng_split_node(ctx, g, name, second, op, mid, -1, NULL, w1, 1, w2, nw2);
    if (st != NPUC_OK && st != NPUC_ERR_NOMEM) {
        char why[512];
        snprintf(why, sizeof why, "%s", npuc_ctx_errmsg(ctx));
        st = npuc_fail(ctx, st, "%s: tensor '%s': %s", w->path, t->name, why);
    }
    free(name);
    free(op);
    free(second);
    free(mid);
    return st;
}

npuc_status npuc__lowrank_graph_meta(npuc_ctx *ctx, npuc_model *m, npuc_writer *w, const npuc__lowrank_split *sp,
                                     size_t ns) {
    if (!ns || !graph_output(m, w)) return NPUC_OK;
    npuc_status st = npuc_model_read_graph(ctx, m);
    if (st != NPUC_OK) return st;
    npuc__ng *g = npuc__ng_clone(npuc_model_graph(m));
    if (!g) return nomem(ctx);
    for (size_t k = 0; k < ns && st == NPUC_OK; k++) st = split_one(ctx, m, w, &g, &sp[k]);
    const char *key = NULL;
    char *out = NULL;
    if (st == NPUC_OK) st = npuc__graph_write_meta(ctx, w, m, g, &key, &out);
    if (st == NPUC_OK && !out)
        st = npuc_fail(ctx, NPUC_ERR_INTERNAL, "%s: the graph entry was not rewritten for the split nodes", w->path);
    if (st == NPUC_OK) st = npuc_writer_meta(w, key, out);
    free(out);
    npuc__ng_free(g);
    return st;
}
