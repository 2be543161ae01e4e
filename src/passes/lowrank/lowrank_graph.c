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
 * name.  Only MatMul and Gemm weights read by one node are split; a
 * factored Conv (two Convs) or a weight several nodes read is refused with
 * the output and the tensor named, before anything is written.
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

static npuc_status split_one(npuc_ctx *ctx, npuc_model *m, const npuc_writer *w, npuc__ng **g,
                             const npuc__lowrank_split *sp) {
    const npuc_tensor_info *t = npuc_model_tensor(m, sp->tensor);
    size_t nd = NPUC_GRAPH_NONE, readers = 0;
    for (size_t i = 0; i < (*g)->nnodes; i++)
        for (size_t k = 0; k < (*g)->nodes[i].nw; k++)
            if (strcmp((*g)->nodes[i].w[k].tensor, t->name) == 0) {
                if (nd == NPUC_GRAPH_NONE) nd = i;
                readers++;
                break;
            }
    if (nd == NPUC_GRAPH_NONE)
        return npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s': no node of the model's graph reads it, so its "
                         "factors have no node to split; --exclude it, or write safetensors", w->path, t->name);
    const npuc__ng_node *n = &(*g)->nodes[nd];
    if (readers > 1)
        return npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s' is read by %zu nodes ('%s' and others): a "
                         "factored weight is written as one split node; --exclude it, or write safetensors", w->path,
                         t->name, readers, n->name);
    const npuc_graph_weight *kern = npuc__ng_weight((npuc__ng *)*g, nd, "kernel");
    if (strcmp(n->op, "MatMul") != 0 && strcmp(n->op, "Gemm") != 0)
        return npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s' is read by %s '%s': only factored MatMul and "
                         "Gemm weights are written as split nodes; --exclude it, or write safetensors", w->path,
                         t->name, n->op, n->name);
    if (!kern || strcmp(kern->tensor, t->name) != 0 || kern->rank != 2 || sp->a->rank != 2 || sp->b->rank != 2)
        return npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s' is not the 2-D weight (input B) of %s '%s': "
                         "its factors cannot replace it; --exclude it, or write safetensors", w->path, t->name, n->op,
                         n->name);
    /* lr_b on the first node, lr_a and the bias on the second; both keep
     * the kernel's axes (the factors' layout is the weight's). */
    npuc_graph_weight w1[1], w2[8];
    size_t nw2 = 0;
    w1[0] = *kern;
    w1[0].tensor = sp->b->name;
    w1[0].shape[0] = sp->b->shape[0];
    w1[0].shape[1] = sp->b->shape[1];
    w2[nw2] = *kern;
    w2[nw2].tensor = sp->a->name;
    w2[nw2].shape[0] = sp->a->shape[0];
    w2[nw2].shape[1] = sp->a->shape[1];
    nw2++;
    for (size_t k = 0; k < n->nw; k++) {
        const npuc_graph_weight *x = &n->w[k];
        if (x == kern) continue;
        if (strcmp(x->role, "bias") != 0 || nw2 == sizeof w2 / sizeof w2[0])
            return npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s': %s '%s' also reads '%s' (%s), which a split "
                             "node does not carry; --exclude it, or write safetensors", w->path, t->name, n->op,
                             n->name, x->tensor, x->role);
        w2[nw2++] = *x;
    }
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
    if (!ns || !w || !w->row || !w->row->graph_meta || !w->row->graph_meta_key ||
        strcmp(w->row->graph_meta, w->row->graph_meta_key) != 0 || !npuc_model_meta_get(m, w->row->graph_meta))
        return NPUC_OK;
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
