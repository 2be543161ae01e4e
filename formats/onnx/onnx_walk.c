/*
 * onnx_walk.c - walks a ModelProto and rebuilds it, field by field.
 *
 * The messages npuc looks into (field numbers from onnx/onnx.proto):
 *
 *   ModelProto      7 graph, 14 metadata_props (StringStringEntryProto:
 *                   1 key, 2 value); everything else copied
 *   GraphProto      1 node, 5 initializer (TensorProto); everything else
 *                   (inputs, outputs, value_info, sparse initializers,
 *                   quantization annotations) copied
 *   NodeProto       2 output, 4 op_type, 7 domain, 5 attribute
 *   AttributeProto  1 name, 5 t (TensorProto), 6 g (GraphProto),
 *                   11 graphs (GraphProto)
 *
 * A weight is an initializer (named by its TensorProto's name, field 8) or
 * the "value" tensor of a Constant node of the default domain (named by the
 * node's first output, which is how the graph refers to it).  Subgraphs
 * (attributes g and graphs: If branches, Loop and Scan bodies) are walked
 * the same way, at most NPUC__ONNX_MAX_DEPTH deep.  Fields are copied in
 * the order they come, so a model whose weights do not change is rebuilt
 * byte for byte.  Every field npuc interprets is checked for its wire type.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_format.h"

npuc_status npuc__ox_bad(npuc__ox_walk *wk, const unsigned char *at, const char *where, const char *why) {
    return npuc_fail(wk->ctx, NPUC_ERR_FORMAT, "%s: malformed ONNX protobuf at byte %" PRIu64 " (%s): %s", wk->path,
                     (uint64_t)(at - wk->base), where, why);
}

static npuc_status want_len(npuc__ox_walk *wk, const npuc__ox_field *f, const char *where) {
    return f->wt == 2 ? NPUC_OK : npuc__ox_bad(wk, f->start, where, "wrong wire type (expected length-delimited)");
}

static npuc_status oom(npuc__ox_walk *wk) { return npuc_fail(wk->ctx, NPUC_ERR_NOMEM, "%s: out of memory", wk->path); }

/* A NUL-terminated copy of a string field (NULL: out of memory); an
 * embedded NUL is refused. */
static npuc_status str_of(npuc__ox_walk *wk, const npuc__ox_field *f, const char *where, char **out) {
    if (memchr(f->data, 0, (size_t)f->len)) return npuc__ox_bad(wk, f->start, where, "a NUL byte in a name");
    char *s = malloc((size_t)f->len + 1);
    if (!s) return oom(wk);
    memcpy(s, f->data, (size_t)f->len);
    s[f->len] = 0;
    *out = s;
    return NPUC_OK;
}

static npuc_status walk_graph(npuc__ox_walk *wk, const unsigned char *p, uint64_t n, int depth, npuc__ox_buf *out);

static npuc_status sub_graph(npuc__ox_walk *wk, const npuc__ox_field *f, uint32_t num, int depth, npuc__ox_buf *out) {
    if (depth >= NPUC__ONNX_MAX_DEPTH)
        return npuc__ox_bad(wk, f->start, "subgraph", "graphs nested deeper than 32 levels");
    npuc__ox_buf c = {0};
    npuc_status st = walk_graph(wk, f->data, f->len, depth + 1, &c);
    if (st == NPUC_OK) npuc__ox_put_sub(out, num, &c);
    else npuc__ox_free(&c);
    return st;
}

/* An attribute of a node; cname: the node's first output when the node is
 * a Constant (its "value" is a weight), else NULL. */
static npuc_status walk_attr(npuc__ox_walk *wk, const unsigned char *p, uint64_t n, int depth, const char *cname,
                             npuc__ox_buf *out) {
    const unsigned char *q = p, *end = p + n;
    npuc__ox_field f;
    const char *why;
    int is_value = 0;
    while (q < end) { /* the name first: it may come after the tensor */
        if ((why = npuc__ox_next(&q, end, &f))) return npuc__ox_bad(wk, q, "AttributeProto", why);
        if (f.num == 1) {
            npuc_status st = want_len(wk, &f, "AttributeProto.name");
            if (st != NPUC_OK) return st;
            is_value = f.len == 5 && memcmp(f.data, "value", 5) == 0;
        }
    }
    for (q = p; q < end;) {
        (void)npuc__ox_next(&q, end, &f);
        npuc_status st = NPUC_OK;
        if (f.num == 5 && cname && is_value) {
            if ((st = want_len(wk, &f, "AttributeProto.t")) != NPUC_OK) return st;
            npuc__ox_buf c = {0};
            npuc__ox_weight w = {cname, f.data, f.len, 1, depth};
            if ((st = wk->weight(wk, &w, &c)) == NPUC_OK) npuc__ox_put_sub(out, 5, &c);
            else npuc__ox_free(&c);
        } else if (f.num == 6 || f.num == 11) {
            if ((st = want_len(wk, &f, "AttributeProto.g")) == NPUC_OK) st = sub_graph(wk, &f, f.num, depth, out);
        } else {
            npuc__ox_put(out, f.start, (size_t)(f.end - f.start));
        }
        if (st != NPUC_OK) return st;
    }
    return NPUC_OK;
}

static npuc_status walk_node(npuc__ox_walk *wk, const unsigned char *p, uint64_t n, int depth, npuc__ox_buf *out) {
    const unsigned char *q = p, *end = p + n;
    npuc__ox_field f;
    const char *why;
    npuc_status st = NPUC_OK;
    int constant = 0, domain_default = 1;
    char *out0 = NULL;
    while (q < end && st == NPUC_OK) {
        if ((why = npuc__ox_next(&q, end, &f))) { st = npuc__ox_bad(wk, q, "NodeProto", why); break; }
        if (f.num == 2 || f.num == 4 || f.num == 7 || f.num == 5) {
            if ((st = want_len(wk, &f, "NodeProto")) != NPUC_OK) break;
        }
        if (f.num == 4) constant = f.len == 8 && memcmp(f.data, "Constant", 8) == 0;
        if (f.num == 7) domain_default = f.len == 0 || (f.len == 7 && memcmp(f.data, "ai.onnx", 7) == 0);
        if (f.num == 2 && !out0) st = str_of(wk, &f, "NodeProto.output", &out0);
    }
    const char *cname = constant && domain_default ? out0 : NULL;
    for (q = p; q < end && st == NPUC_OK;) {
        (void)npuc__ox_next(&q, end, &f);
        if (f.num == 5) {
            if (constant && domain_default && !out0) {
                st = npuc__ox_bad(wk, f.start, "NodeProto", "a Constant node without an output");
                break;
            }
            npuc__ox_buf c = {0};
            if ((st = walk_attr(wk, f.data, f.len, depth, cname, &c)) == NPUC_OK) npuc__ox_put_sub(out, 5, &c);
            else npuc__ox_free(&c);
        } else {
            npuc__ox_put(out, f.start, (size_t)(f.end - f.start));
        }
    }
    free(out0);
    return st;
}

static npuc_status walk_graph(npuc__ox_walk *wk, const unsigned char *p, uint64_t n, int depth, npuc__ox_buf *out) {
    const unsigned char *q = p, *end = p + n;
    npuc__ox_field f;
    const char *why;
    npuc_status st = NPUC_OK;
    if (wk->graph_begin && (st = wk->graph_begin(wk, p, n, depth, out)) != NPUC_OK) return st;
    while (q < end && st == NPUC_OK) {
        if ((why = npuc__ox_next(&q, end, &f))) return npuc__ox_bad(wk, q, "GraphProto", why);
        if (f.num == 1) {
            if ((st = want_len(wk, &f, "GraphProto.node")) != NPUC_OK) break;
            int handled = 0;
            if (wk->node && ((st = wk->node(wk, f.data, f.len, depth, out, &handled)) != NPUC_OK || handled)) continue;
            npuc__ox_buf c = {0};
            if ((st = walk_node(wk, f.data, f.len, depth, &c)) == NPUC_OK) npuc__ox_put_sub(out, 1, &c);
            else npuc__ox_free(&c);
        } else if (f.num == 5) {
            if ((st = want_len(wk, &f, "GraphProto.initializer")) != NPUC_OK) break;
            /* the name: field 8 of the TensorProto */
            const unsigned char *t = f.data, *tend = f.data + f.len;
            npuc__ox_field g;
            char *name = NULL;
            while (t < tend && st == NPUC_OK) {
                if ((why = npuc__ox_next(&t, tend, &g))) { st = npuc__ox_bad(wk, t, "TensorProto", why); break; }
                if (g.num == 8) {
                    if ((st = want_len(wk, &g, "TensorProto.name")) != NPUC_OK) break;
                    free(name);
                    name = NULL;
                    st = str_of(wk, &g, "TensorProto.name", &name);
                }
            }
            if (st == NPUC_OK && (!name || !*name))
                st = npuc__ox_bad(wk, f.start, "GraphProto.initializer", "an initializer without a name");
            if (st == NPUC_OK) {
                npuc__ox_buf c = {0};
                npuc__ox_weight w = {name, f.data, f.len, 0, depth};
                wk->drop = 0;
                if ((st = wk->weight(wk, &w, &c)) == NPUC_OK && !wk->drop) npuc__ox_put_sub(out, 5, &c);
                else npuc__ox_free(&c);
                wk->drop = 0;
            }
            free(name);
        } else {
            int keep = 1;
            if (wk->graph_field && (st = wk->graph_field(wk, &f, depth, &keep)) != NPUC_OK) break;
            if (keep) npuc__ox_put(out, f.start, (size_t)(f.end - f.start));
        }
    }
    if (st == NPUC_OK && out->oom) st = oom(wk);
    return st;
}

npuc_status npuc__ox_walk_model(npuc__ox_walk *wk, const unsigned char *p, uint64_t n, npuc__ox_buf *out) {
    const unsigned char *q = p, *end = p + n;
    npuc__ox_field f;
    const char *why;
    npuc_status st = NPUC_OK;
    int graphs = 0;
    while (q < end && st == NPUC_OK) {
        if ((why = npuc__ox_next(&q, end, &f))) return npuc__ox_bad(wk, q, "ModelProto", why);
        if (f.num == 7) {
            if ((st = want_len(wk, &f, "ModelProto.graph")) != NPUC_OK) break;
            if (graphs++) { st = npuc__ox_bad(wk, f.start, "ModelProto", "a second graph"); break; }
            npuc__ox_buf c = {0};
            if ((st = walk_graph(wk, f.data, f.len, 0, &c)) == NPUC_OK) npuc__ox_put_sub(out, 7, &c);
            else npuc__ox_free(&c);
        } else if (f.num == 14) {
            if ((st = want_len(wk, &f, "ModelProto.metadata_props")) != NPUC_OK) break;
            char *k = NULL, *v = NULL;
            const unsigned char *t = f.data, *tend = f.data + f.len;
            npuc__ox_field g;
            while (t < tend && st == NPUC_OK) {
                if ((why = npuc__ox_next(&t, tend, &g))) { st = npuc__ox_bad(wk, t, "metadata_props", why); break; }
                if (g.num != 1 && g.num != 2) continue;
                if ((st = want_len(wk, &g, "metadata_props")) != NPUC_OK) break;
                char **dst = g.num == 1 ? &k : &v;
                free(*dst);
                *dst = NULL;
                st = str_of(wk, &g, "metadata_props", dst);
            }
            int keep = 1;
            if (st == NPUC_OK) st = wk->meta(wk, k ? k : "", v ? v : "", &keep);
            if (st == NPUC_OK && keep) npuc__ox_put(out, f.start, (size_t)(f.end - f.start));
            free(k);
            free(v);
        } else {
            int handled = 0;
            if (wk->model_field && (st = wk->model_field(wk, &f, out, &handled)) != NPUC_OK) break;
            if (!handled) npuc__ox_put(out, f.start, (size_t)(f.end - f.start));
        }
    }
    if (st == NPUC_OK && !graphs) st = npuc__ox_bad(wk, end, "ModelProto", "no graph");
    if (st == NPUC_OK && out->oom) st = oom(wk);
    return st;
}
