/*
 * onnx_graph.c - the "onnx.model" entry parsed into the plain structs of
 * onnx_model.h.
 *
 * Field numbers (onnx/onnx.proto): ModelProto 1 ir_version, 7 graph,
 * 8 opset_import (OperatorSetIdProto: 1 domain, 2 version); GraphProto
 * 1 node, 2 name, 5 initializer (TensorProto, 8 name), 11 input, 12 output,
 * 13 value_info; NodeProto 1 input, 2 output, 3 name, 4 op_type, 5
 * attribute, 7 domain; AttributeProto 1 name, 2 f, 3 i, 4 s, 5 t, 6 g,
 * 7 floats, 8 ints, 11 graphs, 20 type; ValueInfoProto 1 name, 2 type
 * (TypeProto 1 tensor_type: 1 elem_type, 2 shape: 1 dim: 1 dim_value,
 * 2 dim_param).  Fields not listed are skipped; every one read is checked
 * for its wire type, and arrays grow by doubling, so a hostile entry costs
 * time and memory in proportion to its size.
 */
#include <stdlib.h>
#include <string.h>

#include "onnx_format.h"
#include "onnx_model.h"

typedef struct gp {
    npuc_ctx *ctx;
    const char *path;
    const unsigned char *base;
    npuc_status st;
} gp;

static int bad(gp *g, const unsigned char *at, const char *why) {
    if (g->st == NPUC_OK)
        g->st = npuc_fail(g->ctx, NPUC_ERR_FORMAT, "%s: the ONNX graph (\"%s\" entry) is malformed at byte %zu: %s",
                          g->path, NPUC__ONNX_MODEL_KEY, (size_t)(at - g->base), why);
    return -1;
}

static int nomem(gp *g) {
    if (g->st == NPUC_OK) g->st = npuc_fail(g->ctx, NPUC_ERR_NOMEM, "%s: out of memory", g->path);
    return -1;
}

/* Makes room for element n of *arr (capacity: the next power of two). */
static int push(gp *g, void **arr, size_t n, size_t es) {
    if (n & (n - 1)) return 0;
    size_t cap = n ? 2 * n : 1;
    void *p = realloc(*arr, cap * es);
    if (!p) return nomem(g);
    memset((char *)p + n * es, 0, (cap - n) * es);
    *arr = p;
    return 0;
}

static int next(gp *g, const unsigned char **q, const unsigned char *end, npuc__ox_field *f) {
    const char *why = npuc__ox_next(q, end, f);
    return why ? bad(g, *q, why) : 0;
}

static int want(gp *g, const npuc__ox_field *f, unsigned wt) {
    return f->wt == wt ? 0 : bad(g, f->start, "wrong wire type");
}

static int str(gp *g, const npuc__ox_field *f, char **out) {
    if (want(g, f, 2)) return -1;
    char *s = malloc((size_t)f->len + 1);
    if (!s) return nomem(g);
    memcpy(s, f->data, (size_t)f->len);
    s[f->len] = 0;
    free(*out);
    *out = s;
    return 0;
}

static int add_str(gp *g, const npuc__ox_field *f, char ***arr, size_t *n) {
    if (push(g, (void **)arr, *n, sizeof **arr)) return -1;
    if (str(g, f, &(*arr)[*n])) return -1;
    (*n)++;
    return 0;
}

static void free_graph(npuc__onnx_graph *gr);

static void free_values(npuc__onnx_value *v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(v[i].name);
        free(v[i].dims);
    }
    free(v);
}

static void free_node(npuc__onnx_node *nd) {
    free(nd->name);
    free(nd->op_type);
    free(nd->domain);
    for (size_t i = 0; i < nd->ninputs; i++) free(nd->inputs[i]);
    for (size_t i = 0; i < nd->noutputs; i++) free(nd->outputs[i]);
    free(nd->inputs);
    free(nd->outputs);
    for (size_t i = 0; i < nd->nattrs; i++) {
        npuc__onnx_attr *a = &nd->attrs[i];
        free(a->name);
        free(a->s);
        free(a->floats);
        free(a->ints);
        free(a->weight);
        free(a->tensor);
        for (size_t k = 0; k < a->ngraphs; k++) free_graph(a->graphs[k]);
        free(a->graphs);
    }
    free(nd->attrs);
}

static void free_graph(npuc__onnx_graph *gr) {
    if (!gr) return;
    free(gr->name);
    for (size_t i = 0; i < gr->nnodes; i++) free_node(&gr->nodes[i]);
    free(gr->nodes);
    free_values(gr->inputs, gr->ninputs);
    free_values(gr->outputs, gr->noutputs);
    free_values(gr->value_info, gr->nvalue_info);
    for (size_t i = 0; i < gr->ninitializers; i++) free(gr->initializers[i]);
    free(gr->initializers);
    free(gr);
}

void npuc__onnx_graph_free(npuc__onnx_model *m) {
    if (!m) return;
    for (size_t i = 0; i < m->nopsets; i++) free(m->opsets[i].domain);
    free(m->opsets);
    free_graph(m->graph);
    free(m);
}

/* ValueInfoProto: name, and the tensor type's element type and shape. */
static int parse_value(gp *g, const unsigned char *p, uint64_t n, npuc__onnx_value *v) {
    const unsigned char *q = p, *end = p + n;
    npuc__ox_field f, t, tt, sh, d;
    v->rank = -1;
    while (q < end) {
        if (next(g, &q, end, &f)) return -1;
        if (f.num == 1 && str(g, &f, &v->name)) return -1;
        if (f.num != 2) continue;
        if (want(g, &f, 2)) return -1;
        for (const unsigned char *a = f.data, *ae = f.data + f.len; a < ae;) { /* TypeProto */
            if (next(g, &a, ae, &t)) return -1;
            if (t.num != 1) continue; /* only tensor types */
            if (want(g, &t, 2)) return -1;
            for (const unsigned char *b = t.data, *be = t.data + t.len; b < be;) { /* TypeProto.Tensor */
                if (next(g, &b, be, &tt)) return -1;
                if (tt.num == 1) {
                    if (want(g, &tt, 0)) return -1;
                    v->elem_type = (int)(tt.v & 0x7fffffff);
                } else if (tt.num == 2) {
                    if (want(g, &tt, 2)) return -1;
                    v->rank = 0;
                    for (const unsigned char *c = tt.data, *ce = tt.data + tt.len; c < ce;) { /* shape */
                        if (next(g, &c, ce, &sh)) return -1;
                        if (sh.num != 1) continue;
                        if (want(g, &sh, 2) || push(g, (void **)&v->dims, (size_t)v->rank, sizeof *v->dims)) return -1;
                        if (v->rank == 1 << 20) return bad(g, sh.start, "a shape of more than 2^20 dimensions");
                        int64_t val = -1;
                        for (const unsigned char *e = sh.data, *ee = sh.data + sh.len; e < ee;) {
                            if (next(g, &e, ee, &d)) return -1;
                            if (d.num == 1 && d.wt == 0 && d.v <= INT64_MAX) val = (int64_t)d.v;
                        }
                        v->dims[v->rank++] = val;
                    }
                }
            }
        }
    }
    return 0;
}

static npuc__onnx_graph *parse_graph(gp *g, const unsigned char *p, uint64_t n, int depth);

static int add_graph(gp *g, npuc__onnx_attr *a, const npuc__ox_field *f, int depth) {
    if (want(g, f, 2)) return -1;
    if (depth >= NPUC__ONNX_MAX_DEPTH) return bad(g, f->start, "graphs nested deeper than 32 levels");
    if (push(g, (void **)&a->graphs, a->ngraphs, sizeof *a->graphs)) return -1;
    npuc__onnx_graph *sg = parse_graph(g, f->data, f->len, depth + 1);
    if (!sg) return -1;
    a->graphs[a->ngraphs++] = sg;
    return 0;
}

static int parse_attr(gp *g, const unsigned char *p, uint64_t n, int depth, const npuc__onnx_node *nd,
                      npuc__onnx_attr *a) {
    const unsigned char *q = p, *end = p + n;
    npuc__ox_field f;
    while (q < end) {
        if (next(g, &q, end, &f)) return -1;
        switch (f.num) {
        case 1: if (str(g, &f, &a->name)) return -1; break;
        case 2: {
            if (want(g, &f, 5)) return -1;
            uint32_t u = (uint32_t)f.v;
            memcpy(&a->f, &u, 4);
            break;
        }
        case 3: if (want(g, &f, 0)) return -1; a->i = (int64_t)f.v; break;
        case 4: if (str(g, &f, &a->s)) return -1; a->slen = (size_t)f.len; break;
        case 5:
            if (want(g, &f, 2)) return -1;
            free(a->tensor);
            if (!(a->tensor = malloc((size_t)f.len + 1))) return nomem(g);
            memcpy(a->tensor, f.data, (size_t)f.len);
            a->tensor_len = (size_t)f.len;
            break;
        case 6: case 11: if (add_graph(g, a, &f, depth)) return -1; break;
        case 20: if (want(g, &f, 0)) return -1; a->type = (int)(f.v & 0xff); break;
        case 7: case 8: {
            const unsigned char *v = f.wt == 2 ? f.data : f.start, *ve = f.wt == 2 ? f.data + f.len : f.end;
            while (v < ve) {
                if (f.num == 7) {
                    float x;
                    if (f.wt == 2) {
                        if (ve - v < 4) return bad(g, f.start, "a broken packed float array");
                        memcpy(&x, v, 4);
                        v += 4;
                    } else {
                        if (want(g, &f, 5)) return -1;
                        uint32_t u = (uint32_t)f.v;
                        memcpy(&x, &u, 4);
                        v = ve;
                    }
                    if (push(g, (void **)&a->floats, a->nfloats, sizeof *a->floats)) return -1;
                    a->floats[a->nfloats++] = x;
                } else {
                    uint64_t x;
                    if (f.wt == 2) {
                        const char *why = npuc__ox_varint(&v, ve, &x);
                        if (why) return bad(g, f.start, why);
                    } else {
                        if (want(g, &f, 0)) return -1;
                        x = f.v;
                        v = ve;
                    }
                    if (push(g, (void **)&a->ints, a->nints, sizeof *a->ints)) return -1;
                    a->ints[a->nints++] = (int64_t)x;
                }
            }
            break;
        }
        default: break;
        }
    }
    /* A Constant's value is a weight of the model, named by the output. */
    if (a->tensor && a->name && strcmp(a->name, "value") == 0 && nd->op_type &&
        strcmp(nd->op_type, "Constant") == 0 && (!nd->domain || !*nd->domain || strcmp(nd->domain, "ai.onnx") == 0) &&
        nd->noutputs) {
        if (!(a->weight = npuc__strdup(nd->outputs[0]))) return nomem(g);
        free(a->tensor);
        a->tensor = NULL;
        a->tensor_len = 0;
    }
    return 0;
}

static int parse_node(gp *g, const unsigned char *p, uint64_t n, int depth, npuc__onnx_node *nd) {
    const unsigned char *q = p, *end = p + n;
    npuc__ox_field f;
    /* Everything but the attributes first: a Constant's value needs them. */
    while (q < end) {
        if (next(g, &q, end, &f)) return -1;
        if ((f.num == 1 && add_str(g, &f, &nd->inputs, &nd->ninputs)) ||
            (f.num == 2 && add_str(g, &f, &nd->outputs, &nd->noutputs)) || (f.num == 3 && str(g, &f, &nd->name)) ||
            (f.num == 4 && str(g, &f, &nd->op_type)) || (f.num == 7 && str(g, &f, &nd->domain)))
            return -1;
    }
    for (q = p; q < end;) {
        (void)npuc__ox_next(&q, end, &f);
        if (f.num != 5) continue;
        if (want(g, &f, 2) || push(g, (void **)&nd->attrs, nd->nattrs, sizeof *nd->attrs)) return -1;
        if (parse_attr(g, f.data, f.len, depth, nd, &nd->attrs[nd->nattrs++])) return -1;
    }
    if (!nd->domain && !(nd->domain = npuc__strdup(""))) return nomem(g);
    if (!nd->op_type) return bad(g, p, "a node without op_type");
    return 0;
}

static int add_value(gp *g, const npuc__ox_field *f, npuc__onnx_value **arr, size_t *n) {
    if (want(g, f, 2) || push(g, (void **)arr, *n, sizeof **arr)) return -1;
    return parse_value(g, f->data, f->len, &(*arr)[(*n)++]);
}

static npuc__onnx_graph *parse_graph(gp *g, const unsigned char *p, uint64_t n, int depth) {
    npuc__onnx_graph *gr = calloc(1, sizeof *gr);
    if (!gr) {
        nomem(g);
        return NULL;
    }
    const unsigned char *q = p, *end = p + n;
    npuc__ox_field f, t;
    int rc = 0;
    while (q < end && rc == 0) {
        if ((rc = next(g, &q, end, &f))) break;
        switch (f.num) {
        case 1:
            if (!(rc = want(g, &f, 2)) && !(rc = push(g, (void **)&gr->nodes, gr->nnodes, sizeof *gr->nodes)))
                rc = parse_node(g, f.data, f.len, depth, &gr->nodes[gr->nnodes++]);
            break;
        case 2: rc = str(g, &f, &gr->name); break;
        case 5:
            if ((rc = want(g, &f, 2))) break;
            for (const unsigned char *a = f.data, *ae = f.data + f.len; a < ae && rc == 0;) {
                if ((rc = next(g, &a, ae, &t))) break;
                if (t.num == 8) rc = add_str(g, &t, &gr->initializers, &gr->ninitializers);
            }
            break;
        case 11: rc = add_value(g, &f, &gr->inputs, &gr->ninputs); break;
        case 12: rc = add_value(g, &f, &gr->outputs, &gr->noutputs); break;
        case 13: rc = add_value(g, &f, &gr->value_info, &gr->nvalue_info); break;
        default: break;
        }
    }
    if (rc) {
        free_graph(gr);
        return NULL;
    }
    return gr;
}

npuc_status npuc__onnx_graph_parse(npuc_ctx *ctx, const npuc_model *m, npuc__onnx_model **out) {
    *out = NULL;
    const char *b64 = npuc_model_meta_get(m, NPUC__ONNX_MODEL_KEY);
    const char *path = npuc_model_path(m);
    if (!b64) return npuc_fail(ctx, NPUC_ERR_NOT_FOUND, "%s: no ONNX graph (\"%s\" entry)", path, NPUC__ONNX_MODEL_KEY);
    unsigned char *p;
    size_t n;
    if (npuc__ox_b64_decode(b64, &p, &n) != 0)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: the \"%s\" entry is not base64", path, NPUC__ONNX_MODEL_KEY);
    npuc_status st = npuc__onnx_graph_parse_bytes(ctx, path, p, n, out);
    free(p);
    return st;
}

npuc_status npuc__onnx_graph_parse_bytes(npuc_ctx *ctx, const char *path, const unsigned char *p, size_t n,
                                         npuc__onnx_model **out) {
    *out = NULL;
    gp g = {ctx, path, p, NPUC_OK};
    npuc__onnx_model *md = calloc(1, sizeof *md);
    if (!md) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
    const unsigned char *q = p, *end = p + n;
    npuc__ox_field f, o;
    int rc = 0;
    while (q < end && rc == 0) {
        if ((rc = next(&g, &q, end, &f))) break;
        if (f.num == 1) {
            if (!(rc = want(&g, &f, 0))) md->ir_version = (int64_t)f.v;
        } else if (f.num == 7) {
            if ((rc = want(&g, &f, 2))) break;
            if (md->graph) { rc = bad(&g, f.start, "a second graph"); break; }
            if (!(md->graph = parse_graph(&g, f.data, f.len, 0))) rc = -1;
        } else if (f.num == 8) {
            if ((rc = want(&g, &f, 2)) || (rc = push(&g, (void **)&md->opsets, md->nopsets, sizeof *md->opsets))) break;
            npuc__onnx_opset *os = &md->opsets[md->nopsets++];
            for (const unsigned char *a = f.data, *ae = f.data + f.len; a < ae && rc == 0;) {
                if ((rc = next(&g, &a, ae, &o))) break;
                if (o.num == 1) rc = str(&g, &o, &os->domain);
                else if (o.num == 2 && !(rc = want(&g, &o, 0))) os->version = (int64_t)o.v;
            }
            if (rc == 0 && !os->domain && !(os->domain = npuc__strdup(""))) rc = nomem(&g);
        }
    }
    if (rc == 0 && !md->graph) rc = bad(&g, end, "no graph");
    if (rc) {
        npuc__onnx_graph_free(md);
        return g.st != NPUC_OK ? g.st : npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: malformed ONNX graph", path);
    }
    *out = md;
    return NPUC_OK;
}
