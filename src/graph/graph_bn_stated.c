/*
 * graph_bn_stated.c - the first rule of BatchNorm attachment: what the
 * file's own graph states (an ONNX model's nodes and edges; graph_bn.c runs
 * the rules and keeps the books, docs/fold-bn.md explains them).
 *
 * A BatchNorm of the view whose tensors a BatchNormalization node of the
 * model's network graph reads, the node stated by the file (evidence file,
 * confidence certain), is decided by that graph alone:
 *   - its data input is the first output of a Conv, DepthwiseConv,
 *     ConvTranspose, Gemm or MatMul node that reads a weight tensor of the
 *     file as its kernel, the BatchNorm is that output's only reader and it
 *     is no graph output: linked to the kernel, evidence "graph", not a
 *     guess (--strict allows it); its bias is the node's (an ONNX Conv's
 *     input 2, whatever its name: bnfold_pairs.c reads it from the graph);
 *   - otherwise refused with what the graph states (another op makes its
 *     input, the producer's output has another reader or is a graph output,
 *     the kernel is computed, the kernel or bias is read by another node
 *     too, a Gemm's beta is not 1...).  The weaker rules after it (names, order)
 *     never see such a BatchNorm: they cannot override what the file
 *     states.
 * A BatchNorm whose tensors no such node reads (no graph, a graph from a
 * Keras configuration or from names) is left to the other rules.  Stated
 * pairs (--pair, --pairs) are checked against the same verdict
 * (graph_bn_rules.c): a statement the file's graph contradicts is refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "graph/graph_net.h"

#define NODE_MANY ((size_t)-2) /* a tensor read by two nodes */

npuc_status npuc__graph_stated_open(npuc_ctx *ctx, const npuc__graph *g, npuc__graph_stated *s) {
    memset(s, 0, sizeof *s);
    const npuc__ng *ng = npuc_model_graph(g->m);
    if (!ng || !ng->nnodes) return NPUC_OK;
    s->node_of = malloc((g->n ? g->n : 1) * sizeof *s->node_of);
    if (!s->node_of) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", g->path);
    for (size_t i = 0; i < g->n; i++) s->node_of[i] = NPUC_GRAPH_NONE;
    for (size_t nd = 0; nd < ng->nnodes; nd++)
        for (size_t k = 0; k < ng->nodes[nd].nw; k++) {
            size_t i;
            if (!ng->nodes[nd].w[k].tensor || npuc_model_find(g->m, ng->nodes[nd].w[k].tensor, &i) != 0) continue;
            s->node_of[i] = s->node_of[i] == NPUC_GRAPH_NONE || s->node_of[i] == nd ? nd : NODE_MANY;
        }
    s->ng = ng;
    return NPUC_OK;
}

void npuc__graph_stated_close(npuc__graph_stated *s) {
    free(s->node_of);
    memset(s, 0, sizeof *s);
}

static int is_op(const char *op, const char *name) { return op && strcmp(op, name) == 0; }

static int producer_op(const char *op) {
    return is_op(op, "Conv") || is_op(op, "DepthwiseConv") || is_op(op, "ConvTranspose") || is_op(op, "Gemm") ||
           is_op(op, "MatMul");
}

int npuc__graph_stated_verdict(const npuc__graph *g, const npuc__graph_stated *s, size_t b, int64_t *w,
                               const char **node, char *why, size_t n) {
    const npuc__ng *ng = s->ng;
    const npuc__bn *bn = &g->bns[b];
    *w = -1;
    *node = NULL;
    why[0] = 0;
    if (!ng || bn->mean < 0) return -1;
    size_t nd = s->node_of[bn->mean];
    const char *mean = npuc__gt(g, bn->mean)->name;
    if (nd == NODE_MANY) {
        /* Several nodes read the statistics: one of them stated by the file
         * is enough to refuse (folding changes them for every reader). */
        for (size_t k = 0; k < ng->nnodes; k++) {
            if (ng->nodes[k].ev.kind != NPUC_GRAPH_EV_FILE) continue;
            for (size_t j = 0; j < ng->nodes[k].nw; j++)
                if (strcmp(ng->nodes[k].w[j].tensor, mean) == 0) {
                    npuc__graph_fmt(why, n, "'%.60s' is read by several nodes", mean);
                    return 0;
                }
        }
        return -1;
    }
    if (nd == NPUC_GRAPH_NONE) return -1;
    const npuc__ng_node *x = &ng->nodes[nd];
    if (x->ev.kind != NPUC_GRAPH_EV_FILE || x->ev.conf != NPUC_CONF_CERTAIN || !is_op(x->op, "BatchNormalization"))
        return -1;
    const int64_t tensors[4] = {bn->gamma, bn->beta, bn->mean, bn->var};
    for (int k = 0; k < 4; k++)
        if (tensors[k] >= 0 && s->node_of[tensors[k]] != nd) {
            npuc__graph_fmt(why, n, "'%.60s' is not read by BatchNormalization '%.60s' alone",
                            npuc__gt(g, tensors[k])->name, x->name);
            return 0;
        }
    if (x->nin < 1) {
        npuc__graph_fmt(why, n, "BatchNormalization '%.60s' has no data input", x->name);
        return 0;
    }
    const npuc__ng_value *v = &ng->vals[x->in[0]];
    if (v->prod == NPUC_GRAPH_NONE) {
        npuc__graph_fmt(why, n, "its input '%.60s' is a graph input, not a producer's output", v->name);
        return 0;
    }
    const npuc__ng_node *p = &ng->nodes[v->prod];
    *node = p->name;
    if (!producer_op(p->op)) {
        npuc__graph_fmt(why, n, "its input '%.60s' is made by %.30s '%.60s', not by a Conv, ConvTranspose, Gemm "
                        "or MatMul", v->name, p->op ? p->op : "?", p->name);
        return 0;
    }
    const char *kernel = NULL;
    for (size_t k = 0; k < p->nw && !kernel; k++)
        if (is_op(p->w[k].role, "kernel") || is_op(p->w[k].role, "depthwise_kernel")) kernel = p->w[k].tensor;
    size_t i;
    const int have = kernel && npuc_model_find(g->m, kernel, &i) == 0;
    if (have) *node = npuc_model_tensor(g->m, i)->name;
    if (p->nout < 1 || p->out[0] != x->in[0]) {
        npuc__graph_fmt(why, n, "its input '%.60s' is not the first output of %.30s '%.60s'", v->name, p->op, p->name);
        return 0;
    }
    size_t c[2];
    if (npuc__ng_consumers(ng, x->in[0], c, 2) > 1) {
        const npuc__ng_node *o = &ng->nodes[c[0] == nd ? c[1] : c[0]];
        npuc__graph_fmt(why, n, "the output '%.60s' of %.30s '%.60s' has another reader (%.30s '%.60s')", v->name,
                        p->op, p->name, o->op ? o->op : "?", o->name);
        return 0;
    }
    if (v->is_output) {
        npuc__graph_fmt(why, n, "the output '%.60s' of %.30s '%.60s' is also a graph output", v->name, p->op, p->name);
        return 0;
    }
    if (!have) {
        npuc__graph_fmt(why, n, "%.30s '%.60s', which makes its input, has no kernel tensor in the file", p->op,
                        p->name);
        return 0;
    }
    if (s->node_of[i] != v->prod) {
        npuc__graph_fmt(why, n, "the kernel '%.60s' of %.30s '%.60s' is read by another node too", kernel, p->op,
                        p->name);
        return 0;
    }
    for (size_t k = 0; k < p->nw; k++) {
        size_t bi;
        if (is_op(p->w[k].role, "bias") && npuc_model_find(g->m, p->w[k].tensor, &bi) == 0 &&
            s->node_of[bi] != v->prod) {
            npuc__graph_fmt(why, n, "the bias '%.60s' of %.30s '%.60s' is read by another node too", p->w[k].tensor,
                            p->op, p->name);
            return 0;
        }
    }
    /* A MatMul's channels are its output's last axis, a BatchNormalization's
     * axis 1: the same axis only on a rank-2 output ([batch, N]). */
    if (is_op(p->op, "MatMul")) {
        const char *ra = npuc__ng_attr(ng, v->prod, "out_rank");
        const int r = v->rank >= 0 ? v->rank : ra ? atoi(ra) : -1;
        if (r != 2) {
            if (r < 0)
                npuc__graph_fmt(why, n, "the rank of MatMul '%.60s''s output is not stated (BatchNormalization "
                                "normalizes axis 1, a MatMul's channels are its last: the same only at rank 2)",
                                p->name);
            else
                npuc__graph_fmt(why, n, "MatMul '%.60s''s output has rank %d: BatchNormalization normalizes its "
                                "axis 1, not the MatMul's channels (the last axis)", p->name, r);
            return 0;
        }
    }
    /* Gemm: Y = alpha A B + beta C.  The fold writes C as the bias; with
     * beta != 1 the stored C is not the bias it adds. */
    const char *beta = is_op(p->op, "Gemm") ? npuc__ng_attr(ng, v->prod, "beta") : NULL;
    if (beta && strtod(beta, NULL) != 1.0) {
        npuc__graph_fmt(why, n, "Gemm '%.60s' scales its C by beta %.30s: C is not the bias the fold writes",
                        p->name, beta);
        return 0;
    }
    const npuc_tensor_info *t = npuc_model_tensor(g->m, i);
    if (!npuc__graph_is_producer(t)) {
        npuc__graph_fmt(why, n, "the kernel '%.60s' of %.30s '%.60s' is not a float conv/linear weight (role %s, "
                        "layout %s)", t->name, p->op, p->name, npuc_role_name(t->role), npuc_layout_name(t->layout));
        return 0;
    }
    *w = (int64_t)i;
    npuc__graph_fmt(why, n, "%.30s '%.60s' -> BatchNormalization '%.60s', the only reader of its output", p->op,
                    p->name, x->name);
    return 1;
}

npuc_status npuc__attach_rule_stated_graph(npuc__attach *a) {
    npuc__graph_stated s;
    npuc_status st = npuc__graph_stated_open(a->ctx, a->g, &s);
    for (size_t b = 0; b < a->g->nbn && st == NPUC_OK && s.ng; b++) {
        if (a->state[b] != ATTACH_UNDECIDED) continue;
        int64_t w;
        const char *node;
        char v[200], why[200];
        int r = npuc__graph_stated_verdict(a->g, &s, b, &w, &node, v, sizeof v);
        if (r < 0) continue;
        a->out->nstated++;
        npuc__graph_fmt(why, sizeof why, "the file's graph: %s", v);
        st = r ? npuc__attach_propose(a, (size_t)w, b, NPUC_EVIDENCE_GRAPH, 0, why)
               : npuc__attach_refuse(a, b, node, why);
    }
    npuc__graph_stated_close(&s);
    return st;
}
