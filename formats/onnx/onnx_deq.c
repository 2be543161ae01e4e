/*
 * onnx_deq.c - `npuc decompress` of an ONNX graph's quantized weights
 * (onnx_format.h: npuc__onnx_decompress, the row's decompress hook).
 * docs/onnx.md ("Reading back") says what is read.
 *
 * The weights are read from the graph itself, not from a description npuc
 * stored: a chain of nodes whose inputs are all initializers of their graph
 * and which computes a float tensor is evaluated as the ONNX operators
 * define it and replaced by one float initializer under the chain's output
 * name, so every consumer reads it unchanged.  A chain starts at
 *   DequantizeLinear(x, scale[, zero_point]): x INT8/UINT8/INT16/UINT16/
 *       INT4/UINT4, scale FLOAT per tensor, per axis or blocked (opset 21
 *       block_size); y = float(x - zero_point) * scale;
 *   Cast(x, to=FLOAT) of an integer initializer, when a Mul follows
 *       (npuc's opset-9 form);
 * and goes on through nodes that are the only reader of the value: Sub or
 * Mul by a FLOAT initializer that broadcasts into it (float32 arithmetic),
 * Reshape by an INT64 initializer, and a Cast to FLOAT16, BFLOAT16 or
 * DOUBLE, which ends it.  These are every form onnx_qdq.c writes (DQ,
 * DQ + Reshape of a blocked 2-D view, DQ scale 1 [+ Sub] + Mul, Cast
 * [+ Sub] + Mul, any of them + Cast back to FLOAT16) and the standard QDQ
 * weight pattern of other producers.  com.microsoft::MatMulNBits (4 bits,
 * no g_idx, no bias) becomes MatMul(A, W) with W [K, N] FLOAT,
 * W[k, n] = float(q - zp) * scale (zp 8 when absent), named as npuc named
 * its codes without "_quantized".  The initializers only removed nodes read
 * are dropped, with the value_info of removed values; opsets stay.
 *
 * A DequantizeLinear of a constant or a MatMulNBits this does not read is
 * refused (one line): copying it while a float model was asked for would
 * be silently wrong.  The graph entry is hostile input like the file: a
 * tensor whose type, shape or bytes are not the entry's initializer's is
 * refused before it is read.  A model with none of them is not this hook's
 * (NPUC_ERR_NOT_FOUND): the npuc artifact path decides.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "onnx_format.h"
#include "onnx_model.h"
#include "strmap.h"

/* TensorProto.DataType */
enum { T_FLOAT = 1, T_UINT8 = 2, T_INT8 = 3, T_UINT16 = 4, T_INT16 = 5, T_INT32 = 6, T_INT64 = 7,
       T_FLOAT16 = 10, T_DOUBLE = 11, T_BFLOAT16 = 16, T_UINT4 = 21, T_INT4 = 22 };
enum { K_DQ, K_CAST, K_SUB, K_MUL, K_RESHAPE, K_TOFLOAT };
#define MAXCHAIN 8

typedef struct dq_const { /* an initializer of the graph */
    char *name;
    int type, rank;
    int64_t dims[NPUC_MAX_RANK];
    uint64_t numel;
    const unsigned char *raw; /* raw_data in the graph entry (tensors npuc does not list) */
    uint64_t rawlen;
    int has_raw;
} dq_const;

typedef struct dq_step {
    int kind;
    const npuc__onnx_node *n;
    const char *operand; /* SUB, MUL: the FLOAT initializer; RESHAPE: the shape */
    int64_t odims[NPUC_MAX_RANK]; /* the value's shape after the step */
    int orank;
} dq_step;

typedef struct dq_chain {
    const npuc__onnx_graph *g;
    dq_step s[MAXCHAIN];
    int ns;
    int nbits;           /* a MatMulNBits weight */
    const npuc__onnx_node *mnb; /* its first node */
    int64_t K, N, bs, nb;
    char *out;           /* the float initializer's name */
    int otype;           /* its ONNX type */
    int emitted;
} dq_chain;

typedef struct dq_state {
    npuc_ctx *ctx;
    npuc_model *m;
    const char *path;
    npuc__onnx_model *md;
    dq_const *c;
    size_t nc, capc;
    npuc__strmap cidx;   /* initializer name -> c index (first seen) */
    npuc__strmap consts; /* Constant node outputs */
    npuc__strmap uses;   /* value name -> reads (node inputs, graph outputs) */
    npuc__strmap names;  /* every name the model uses */
    dq_chain *ch;
    size_t nch, capch;
    npuc__strmap gone_node; /* first output of a removed node -> 1 */
    npuc__strmap nbnode;    /* MatMulNBits first output -> chain */
    npuc__strmap final;     /* chain output -> chain (DQ/Cast chains) */
    npuc__strmap chain_uses; /* initializer -> reads by removed nodes */
    npuc__strmap drop;       /* initializers left out */
    npuc__strmap gone_val;   /* values no longer produced */
} dq_state;

static npuc_status oom(dq_state *d) { return npuc_fail(d->ctx, NPUC_ERR_NOMEM, "%s: out of memory", d->path); }

static int default_domain(const char *s) { return !s || !*s || strcmp(s, "ai.onnx") == 0; }

static const npuc__onnx_attr *attr_of(const npuc__onnx_node *n, const char *name) {
    for (size_t i = 0; i < n->nattrs; i++)
        if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
    return NULL;
}

static size_t count_of(const npuc__strmap *m, const char *k) {
    size_t v = 0;
    return npuc__strmap_get(m, k, &v) ? v : 0;
}

static int bump(npuc__strmap *m, const char *k) { return npuc__strmap_put(m, k, count_of(m, k) + 1); }

/* ------------------------------------------------------------ the graph entry's initializers */

static npuc_status pre_weight(npuc__ox_walk *wk, const npuc__ox_weight *w, npuc__ox_buf *out) {
    dq_state *d = wk->user;
    npuc__ox_put(out, w->msg, (size_t)w->len);
    if (w->constant) return npuc__strmap_put(&d->consts, w->name, 1) ? oom(d) : NPUC_OK;
    if (npuc__strmap_get(&d->cidx, w->name, NULL)) return NPUC_OK;
    if (npuc__grow((void **)&d->c, &d->capc, d->nc + 1, sizeof *d->c)) return oom(d);
    dq_const *c = &d->c[d->nc];
    memset(c, 0, sizeof *c);
    c->numel = 1;
    const unsigned char *p = w->msg, *end = w->msg + w->len;
    npuc__ox_field f;
    while (p < end) {
        if (npuc__ox_next(&p, end, &f)) break; /* the reader checked it */
        if (f.num == 1 && f.wt == 0 && c->rank < NPUC_MAX_RANK) c->dims[c->rank++] = (int64_t)f.v;
        else if (f.num == 1 && f.wt == 2) {
            for (const unsigned char *q = f.data, *qe = f.data + f.len; q < qe && c->rank < NPUC_MAX_RANK;) {
                uint64_t v;
                if (npuc__ox_varint(&q, qe, &v)) break;
                c->dims[c->rank++] = (int64_t)v;
            }
        } else if (f.num == 2 && f.wt == 0) c->type = (int)f.v;
        else if (f.num == 9 && f.wt == 2) {
            c->raw = f.data;
            c->rawlen = f.len;
            c->has_raw = 1;
        }
    }
    for (int k = 0; k < c->rank; k++) {
        if (c->dims[k] < 0 || npuc_mul_overflow(c->numel, (uint64_t)c->dims[k], &c->numel))
            return npuc_fail(d->ctx, NPUC_ERR_FORMAT, "%s: initializer '%s': bad dims", d->path, w->name);
    }
    if (!(c->name = npuc__strdup(w->name)) || npuc__strmap_put(&d->cidx, w->name, d->nc) != 0) return oom(d);
    d->nc++;
    return NPUC_OK;
}

static npuc_status keep_meta(npuc__ox_walk *wk, const char *k, const char *v, int *keep) {
    (void)wk, (void)k, (void)v;
    *keep = 1;
    return NPUC_OK;
}

static int in_list(char *const *l, size_t n, const char *s) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(l[i], s) == 0) return 1;
    return 0;
}

/* The initializer name of graph g, or NULL. */
static const dq_const *init_of(const dq_state *d, const npuc__onnx_graph *g, const char *name) {
    size_t i;
    if (!name || !*name || !in_list(g->initializers, g->ninitializers, name)) return NULL;
    return npuc__strmap_get(&d->cidx, name, &i) ? &d->c[i] : NULL;
}

static int is_int_type(int t) {
    return t == T_INT8 || t == T_UINT8 || t == T_INT16 || t == T_UINT16 || t == T_INT4 || t == T_UINT4;
}

static npuc_status count_uses(dq_state *d, const npuc__onnx_graph *g) {
    for (size_t i = 0; i < g->noutputs; i++)
        if (bump(&d->uses, g->outputs[i].name) != 0) return oom(d);
    for (size_t i = 0; i < g->nnodes; i++) {
        const npuc__onnx_node *n = &g->nodes[i];
        if (n->name && *n->name && npuc__strmap_put(&d->names, n->name, 0) != 0) return oom(d);
        for (size_t k = 0; k < n->ninputs; k++)
            if (*n->inputs[k] && (bump(&d->uses, n->inputs[k]) != 0 || npuc__strmap_put(&d->names, n->inputs[k], 0)))
                return oom(d);
        for (size_t k = 0; k < n->noutputs; k++)
            if (*n->outputs[k] && npuc__strmap_put(&d->names, n->outputs[k], 0) != 0) return oom(d);
        for (size_t a = 0; a < n->nattrs; a++)
            for (size_t k = 0; k < n->attrs[a].ngraphs; k++) {
                npuc_status st = count_uses(d, n->attrs[a].graphs[k]);
                if (st != NPUC_OK) return st;
            }
    }
    for (size_t i = 0; i < g->ninitializers; i++)
        if (npuc__strmap_put(&d->names, g->initializers[i], 0) != 0) return oom(d);
    return NPUC_OK;
}

/* ------------------------------------------------------------ recognising chains */

/* 1 when b (rank rb) broadcasts into a's shape without changing it. */
static int broadcasts_into(const int64_t *a, int ra, const int64_t *b, int rb) {
    if (rb > ra) return 0;
    for (int k = 0; k < rb; k++) {
        int64_t x = a[ra - rb + k], y = b[k];
        if (y != 1 && y != x) return 0;
    }
    return 1;
}

/* The only node of g reading value v (and nothing else reads it), or NULL. */
static const npuc__onnx_node *sole_reader(const dq_state *d, const npuc__onnx_graph *g, const char *v) {
    if (count_of(&d->uses, v) != 1) return NULL;
    for (size_t i = 0; i < g->nnodes; i++)
        for (size_t k = 0; k < g->nodes[i].ninputs; k++)
            if (strcmp(g->nodes[i].inputs[k], v) == 0) return &g->nodes[i];
    return NULL;
}

static int only_attrs(const npuc__onnx_node *n, const char *const *ok) {
    for (size_t i = 0; i < n->nattrs; i++) {
        int found = 0;
        for (size_t k = 0; ok[k]; k++) found |= strcmp(n->attrs[i].name, ok[k]) == 0;
        if (!found) return 0;
    }
    return 1;
}

/* The DequantizeLinear node n as a chain start; NULL, or why not. */
static const char *dq_start(const dq_state *d, const npuc__onnx_graph *g, const npuc__onnx_node *n, dq_step *s) {
    static const char *const ok[] = {"axis", "block_size", NULL};
    if (n->ninputs < 2 || n->ninputs > 3 || n->noutputs != 1) return "not 2 or 3 inputs and one output";
    const dq_const *x = init_of(d, g, n->inputs[0]), *sc = init_of(d, g, n->inputs[1]);
    const dq_const *z = n->ninputs == 3 && *n->inputs[2] ? init_of(d, g, n->inputs[2]) : NULL;
    if (!x || !sc || (n->ninputs == 3 && *n->inputs[2] && !z)) return "an input is not an initializer of its graph";
    if (!is_int_type(x->type)) return "its codes are not INT8, UINT8, INT16, UINT16, INT4 or UINT4";
    if (sc->type != T_FLOAT) return "its scale is not FLOAT";
    if (z && z->type != x->type) return "its zero point's type is not the codes' type";
    if (!only_attrs(n, ok)) return "an attribute other than axis and block_size";
    const npuc__onnx_attr *aa = attr_of(n, "axis"), *ab = attr_of(n, "block_size");
    int64_t axis = aa ? aa->i : 1, bs = ab ? ab->i : 0;
    if (x->rank && (axis < -x->rank || axis >= x->rank)) return "its axis is outside the codes' rank";
    if (axis < 0) axis += x->rank;
    if (z && (z->rank != sc->rank || memcmp(z->dims, sc->dims, (size_t)sc->rank * sizeof *sc->dims) != 0))
        return "its zero point's shape is not the scale's";
    if (bs < 0) return "a negative block_size";
    if (bs == 0 && sc->numel == 1 && sc->rank <= 1) {
        /* per tensor */
    } else if (bs == 0 && sc->rank == 1 && x->rank && sc->dims[0] == x->dims[axis]) {
        /* per axis */
    } else if (bs > 0 && sc->rank == x->rank && x->rank) {
        for (int k = 0; k < x->rank; k++)
            if (k == axis ? sc->dims[k] != (x->dims[k] + bs - 1) / bs : sc->dims[k] != x->dims[k])
                return "its blocked scale's shape does not fit the codes";
    } else {
        return "its scale's shape fits neither per tensor, per axis nor blocks";
    }
    uint64_t need = x->type == T_INT4 || x->type == T_UINT4 ? (x->numel + 1) / 2 : 0;
    if ((x->type == T_INT4 || x->type == T_UINT4) &&
        (!x->has_raw || x->rawlen != need || (z && (!z->has_raw || z->rawlen != (z->numel + 1) / 2))))
        return "its 4-bit codes or zero points are not in raw_data of the right length";
    s->kind = K_DQ;
    s->n = n;
    s->orank = x->rank;
    memcpy(s->odims, x->dims, sizeof s->odims);
    return NULL;
}

/* Extends chain c (value v of shape in its last step) by v's sole reader. */
static int extend(const dq_state *d, dq_chain *c) {
    for (;;) {
        dq_step *last = &c->s[c->ns - 1];
        if (last->kind == K_TOFLOAT || c->ns == MAXCHAIN) return 1;
        const char *v = last->n->outputs[0];
        const npuc__onnx_node *r = sole_reader(d, c->g, v);
        if (!r || !default_domain(r->domain) || r->noutputs != 1 || !*r->outputs[0]) return 1;
        dq_step s = {0};
        s.n = r;
        s.orank = last->orank;
        memcpy(s.odims, last->odims, sizeof s.odims);
        if ((strcmp(r->op_type, "Sub") == 0 || strcmp(r->op_type, "Mul") == 0) && r->ninputs == 2 && !r->nattrs) {
            int mul = r->op_type[0] == 'M';
            int at = strcmp(r->inputs[0], v) == 0 ? 0 : 1;
            if (!mul && at != 0) return 1;
            for (int k = 0; k < c->ns; k++) /* its shape is known once the chain's shapes are read */
                if (c->s[k].kind == K_RESHAPE) return 1;
            const dq_const *b = init_of(d, c->g, r->inputs[1 - at]);
            if (!b || b->type != T_FLOAT || !broadcasts_into(last->odims, last->orank, b->dims, b->rank)) return 1;
            s.kind = mul ? K_MUL : K_SUB;
            s.operand = r->inputs[1 - at];
        } else if (strcmp(r->op_type, "Reshape") == 0 && r->ninputs == 2 && strcmp(r->inputs[0], v) == 0) {
            const dq_const *sh = init_of(d, c->g, r->inputs[1]);
            const npuc__onnx_attr *az = attr_of(r, "allowzero");
            if (!sh || sh->type != T_INT64 || sh->rank != 1 || sh->dims[0] > NPUC_MAX_RANK) return 1;
            if (r->nattrs > 1 || (r->nattrs && !az)) return 1;
            s.kind = K_RESHAPE;
            s.operand = r->inputs[1];
            s.orank = (int)sh->dims[0]; /* dims are filled when the shape is read */
        } else if (strcmp(r->op_type, "Cast") == 0 && r->ninputs == 1 && r->nattrs == 1) {
            const npuc__onnx_attr *to = attr_of(r, "to");
            if (!to || (to->i != T_FLOAT16 && to->i != T_BFLOAT16 && to->i != T_DOUBLE && to->i != T_FLOAT)) return 1;
            s.kind = K_TOFLOAT;
        } else {
            return 1;
        }
        c->s[c->ns++] = s;
    }
}

static npuc_status add_chain(dq_state *d, dq_chain **out) {
    if (npuc__grow((void **)&d->ch, &d->capch, d->nch + 1, sizeof *d->ch)) return oom(d);
    *out = &d->ch[d->nch];
    memset(*out, 0, sizeof **out);
    return NPUC_OK;
}

/* A name the model does not use: base, else base_1, base_2, ... */
static char *fresh(dq_state *d, const char *base) {
    size_t len = strlen(base) + 24;
    char *s = malloc(len);
    if (!s) return NULL;
    snprintf(s, len, "%s", base);
    for (unsigned k = 1; npuc__strmap_get(&d->names, s, NULL); k++) snprintf(s, len, "%s_%u", base, k);
    if (npuc__strmap_put(&d->names, s, 0) != 0) {
        free(s);
        return NULL;
    }
    return s;
}

/* The MatMulNBits node n as a weight; NULL, or why not. */
static const char *nbits_node(dq_state *d, const npuc__onnx_graph *g, const npuc__onnx_node *n, dq_chain *c) {
    static const char *const ok[] = {"K", "N", "bits", "block_size", "accuracy_level", NULL};
    if (n->ninputs < 3 || n->noutputs != 1) return "fewer than 3 inputs";
    for (size_t k = 4; k < n->ninputs; k++)
        if (*n->inputs[k]) return "it has a g_idx or bias input";
    if (!only_attrs(n, ok)) return "an attribute npuc does not read";
    const npuc__onnx_attr *aK = attr_of(n, "K"), *aN = attr_of(n, "N"), *ab = attr_of(n, "bits"),
                          *abs = attr_of(n, "block_size");
    if (!aK || !aN || !abs) return "no K, N or block_size";
    if (ab && ab->i != 4) return "bits other than 4";
    int64_t K = aK->i, N = aN->i, bs = abs->i;
    if (K < 1 || N < 1 || bs < 16 || (bs & (bs - 1)) || K > (INT64_C(1) << 40) || N > (INT64_C(1) << 40))
        return "K, N or block_size out of range";
    int64_t nb = (K + bs - 1) / bs;
    const dq_const *B = init_of(d, g, n->inputs[1]), *S = init_of(d, g, n->inputs[2]);
    const dq_const *Z = n->ninputs > 3 && *n->inputs[3] ? init_of(d, g, n->inputs[3]) : NULL;
    if (!B || !S || (n->ninputs > 3 && *n->inputs[3] && !Z)) return "an input is not an initializer of its graph";
    if (B->type != T_UINT8 || B->rank != 3 || B->dims[0] != N || B->dims[1] != nb || B->dims[2] != bs / 2)
        return "B is not UINT8 [N, n_blocks, block_size / 2]";
    if (S->type != T_FLOAT || S->numel != (uint64_t)(N * nb)) return "its scales are not FLOAT [N * n_blocks]";
    if (Z && (Z->type != T_UINT8 || Z->numel != (uint64_t)(N * ((nb + 1) / 2))))
        return "its zero points are not UINT8 [N * ceil(n_blocks / 2)]";
    /* The same weight read by several MatMuls: one initializer. */
    for (size_t i = 0; i < d->nch; i++) {
        const dq_chain *o = &d->ch[i];
        if (o->nbits && o->g == g && strcmp(o->mnb->inputs[1], n->inputs[1]) == 0 &&
            strcmp(o->mnb->inputs[2], n->inputs[2]) == 0 &&
            strcmp(n->ninputs > 3 ? n->inputs[3] : "", o->mnb->ninputs > 3 ? o->mnb->inputs[3] : "") == 0 &&
            o->K == K && o->N == N && o->bs == bs) {
            c->out = (char *)o->out; /* shared: find_chains finds o by this pointer */
            return NULL;
        }
    }
    c->K = K, c->N = N, c->bs = bs, c->nb = nb;
    /* npuc wrote the codes as "<weight>_quantized" (or _quantized_<k>). */
    const char *bn = n->inputs[1];
    size_t len = strlen(bn);
    char *base = malloc(len + 16);
    if (!base) return "";
    memcpy(base, bn, len + 1);
    char *u = strstr(base, "_quantized");
    while (u && strstr(u + 1, "_quantized")) u = strstr(u + 1, "_quantized");
    int stripped = 0;
    if (u && u != base) {
        const char *t = u + 10;
        if (*t == '_' && t[1]) {
            for (t++; *t >= '0' && *t <= '9'; t++) {}
        }
        if (!*t) {
            *u = 0;
            stripped = 1;
        }
    }
    if (!stripped) snprintf(base + len, 16, "_dequantized");
    c->out = fresh(d, base);
    free(base);
    return c->out ? NULL : "";
}

static npuc_status refuse(dq_state *d, const npuc__onnx_node *n, const char *why) {
    return npuc_fail(d->ctx, NPUC_ERR_UNSUPPORTED,
                     "%s: the %s node with output '%s' is not a quantized weight decompress reads (%s); nothing "
                     "written", d->path, n->op_type, n->noutputs ? n->outputs[0] : "", why);
}

static int is_const(const dq_state *d, const npuc__onnx_graph *g, const char *v) {
    return init_of(d, g, v) || npuc__strmap_get(&d->consts, v, NULL) || npuc__strmap_get(&d->cidx, v, NULL);
}

static npuc_status find_chains(dq_state *d, const npuc__onnx_graph *g) {
    for (size_t i = 0; i < g->nnodes; i++) {
        const npuc__onnx_node *n = &g->nodes[i];
        for (size_t a = 0; a < n->nattrs; a++)
            for (size_t k = 0; k < n->attrs[a].ngraphs; k++) {
                npuc_status st = find_chains(d, n->attrs[a].graphs[k]);
                if (st != NPUC_OK) return st;
            }
        dq_chain *c;
        npuc_status st;
        if (default_domain(n->domain) && strcmp(n->op_type, "DequantizeLinear") == 0) {
            if (!n->ninputs || !is_const(d, g, n->inputs[0])) continue; /* an activation's */
            dq_step s = {0};
            const char *why = dq_start(d, g, n, &s);
            if (why) return refuse(d, n, why);
            if ((st = add_chain(d, &c)) != NPUC_OK) return st;
            c->g = g;
            c->s[0] = s;
            c->ns = 1;
            extend(d, c);
        } else if (default_domain(n->domain) && strcmp(n->op_type, "Cast") == 0 && n->ninputs == 1 &&
                   n->noutputs == 1 && n->nattrs == 1 && attr_of(n, "to") && attr_of(n, "to")->i == T_FLOAT) {
            const dq_const *x = init_of(d, g, n->inputs[0]);
            if (!x || !is_int_type(x->type) || x->type == T_INT4 || x->type == T_UINT4) continue;
            if ((st = add_chain(d, &c)) != NPUC_OK) return st;
            c->g = g;
            c->s[0] = (dq_step){.kind = K_CAST, .n = n, .orank = x->rank};
            memcpy(c->s[0].odims, x->dims, sizeof x->dims);
            c->ns = 1;
            extend(d, c);
            int mul = 0;
            for (int k = 0; k < c->ns; k++) mul |= c->s[k].kind == K_MUL;
            if (!mul) continue; /* not a dequantization: left as it is */
        } else if (strcmp(n->domain ? n->domain : "", "com.microsoft") == 0 && strcmp(n->op_type, "MatMulNBits") == 0) {
            if ((st = add_chain(d, &c)) != NPUC_OK) return st;
            c->g = g;
            c->nbits = 1;
            c->mnb = n;
            c->otype = T_FLOAT;
            const char *why = nbits_node(d, g, n, c);
            if (why) return *why ? refuse(d, n, why) : oom(d);
            if (npuc__strmap_put(&d->nbnode, n->outputs[0], d->nch) != 0) return oom(d);
            for (size_t i2 = 0; i2 < d->nch; i2++)
                if (d->ch[i2].nbits && d->ch[i2].out == c->out) { /* shared with an earlier node */
                    if (bump(&d->chain_uses, n->inputs[1]) || bump(&d->chain_uses, n->inputs[2]) ||
                        (n->ninputs > 3 && *n->inputs[3] && bump(&d->chain_uses, n->inputs[3])))
                        return oom(d);
                    if (npuc__strmap_put(&d->nbnode, n->outputs[0], i2) != 0) return oom(d);
                    memset(c, 0, sizeof *c);
                    goto next;
                }
            for (size_t k = 1; k < n->ninputs && k < 4; k++)
                if (*n->inputs[k] && bump(&d->chain_uses, n->inputs[k])) return oom(d);
            d->nch++;
            continue;
        } else {
            continue;
        }
        /* A DQ or Cast chain: its nodes go, its inputs' reads are counted. */
        dq_step *last = &c->s[c->ns - 1];
        c->otype = last->kind == K_TOFLOAT ? (int)attr_of(last->n, "to")->i : T_FLOAT;
        if (!(c->out = npuc__strdup(last->n->outputs[0]))) return oom(d);
        for (int k = 0; k < c->ns; k++) {
            const npuc__onnx_node *sn = c->s[k].n;
            if (npuc__strmap_put(&d->gone_node, sn->outputs[0], 1) != 0) return oom(d);
            if (k < c->ns - 1 && npuc__strmap_put(&d->gone_val, sn->outputs[0], 1) != 0) return oom(d);
            for (size_t j = 0; j < sn->ninputs; j++)
                if (*sn->inputs[j] && init_of(d, g, sn->inputs[j]) && bump(&d->chain_uses, sn->inputs[j]))
                    return oom(d);
        }
        if (npuc__strmap_put(&d->final, c->out, d->nch) != 0) return oom(d);
        d->nch++;
    next:;
    }
    return NPUC_OK;
}

/* ------------------------------------------------------------ values */

/* Initializer c's values as int32 (integers), float (FLOAT) or int64. */
static npuc_status load(dq_state *d, const dq_const *c, int32_t **iv, float **fv, int64_t **lv) {
    size_t idx;
    const unsigned char *p = NULL;
    uint64_t n = c->numel;
    int listed = npuc_model_find(d->m, c->name, &idx) == 0;
    npuc_status st = NPUC_OK;
    /* The bytes must be those the graph entry's type and dims say (a file
     * converted from ONNX carries the entry beside tensors of its own). */
    int four = c->type == T_INT4 || c->type == T_UINT4;
    uint64_t want = four ? (n + 1) / 2 : n * (uint64_t)(c->type == T_FLOAT ? 4 : c->type == T_INT64 ? 8
                                                      : c->type == T_INT16 || c->type == T_UINT16 ? 2 : 1);
    npuc_dtype dt;
    uint32_t field;
    if (listed) {
        const npuc_tensor_info *t = npuc_model_tensor(d->m, idx);
        if (npuc__ox_dtype((uint64_t)c->type, &dt, &field) != 0 || t->dtype != dt || t->numel != n || t->nbytes != want)
            return npuc_fail(d->ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': its type or shape differs from the ONNX "
                             "graph's initializer", d->path, c->name);
    } else if (c->has_raw && c->rawlen != want) {
        return npuc_fail(d->ctx, NPUC_ERR_FORMAT, "%s: initializer '%s': raw_data holds %" PRIu64 " bytes, its "
                         "dims need %" PRIu64, d->path, c->name, c->rawlen, want);
    }
    if (listed) {
        const void *data;
        if ((st = npuc_model_data(d->ctx, d->m, idx, &data)) != NPUC_OK) return st;
        p = data;
    } else if (c->has_raw) {
        p = c->raw;
    } else {
        return npuc_fail(d->ctx, NPUC_ERR_UNSUPPORTED, "%s: initializer '%s': its values are not in raw_data",
                         d->path, c->name);
    }
    void *buf = malloc((n ? n : 1) * 8);
    if (!buf) {
        if (listed) npuc_model_release(d->m, idx);
        return oom(d);
    }
    if (fv) {
        memcpy(buf, p, (size_t)n * 4);
        *fv = buf;
    } else if (lv) {
        memcpy(buf, p, (size_t)n * 8);
        *lv = buf;
    } else {
        int32_t *o = buf;
        for (uint64_t k = 0; k < n; k++) {
            switch (c->type) {
            case T_INT8: o[k] = (signed char)p[k]; break;
            case T_UINT8: o[k] = p[k]; break;
            case T_INT16: o[k] = (int16_t)(uint16_t)(p[2 * k] | p[2 * k + 1] << 8); break;
            case T_UINT16: o[k] = (uint16_t)(p[2 * k] | p[2 * k + 1] << 8); break;
            default: { /* INT4 / UINT4, low nibble first */
                int v = (p[k / 2] >> (4 * (k & 1))) & 15;
                o[k] = c->type == T_INT4 && v >= 8 ? v - 16 : v;
            }
            }
        }
        *iv = o;
    }
    if (listed) npuc_model_release(d->m, idx);
    return NPUC_OK;
}

static const dq_const *cfind(const dq_state *d, const char *name) {
    size_t i;
    return npuc__strmap_get(&d->cidx, name, &i) ? &d->c[i] : NULL;
}

/* v (shape a) op= b broadcast into it (numpy rules), in float32. */
static void bcast(float *v, const int64_t *a, int ra, const float *b, const int64_t *bd, int rb, int mul) {
    int64_t co[NPUC_MAX_RANK] = {0}, bst[NPUC_MAX_RANK] = {0};
    int64_t st = 1;
    for (int k = rb - 1; k >= 0; k--) {
        bst[ra - rb + k] = bd[k] == 1 ? 0 : st;
        st *= bd[k];
    }
    uint64_t n = 1;
    for (int k = 0; k < ra; k++) n *= (uint64_t)a[k];
    int64_t bi = 0;
    for (uint64_t i = 0; i < n; i++) {
        v[i] = mul ? v[i] * b[bi] : v[i] - b[bi];
        for (int k = ra - 1; k >= 0; k--) { /* next coordinate */
            co[k]++;
            bi += bst[k];
            if (co[k] < a[k]) break;
            bi -= bst[k] * co[k];
            co[k] = 0;
        }
    }
}

static npuc_status eval_dq(dq_state *d, const npuc__onnx_node *n, float *out) {
    const dq_const *x = cfind(d, n->inputs[0]), *sc = cfind(d, n->inputs[1]);
    const dq_const *zc = n->ninputs == 3 && *n->inputs[2] ? cfind(d, n->inputs[2]) : NULL;
    int32_t *q = NULL, *z = NULL;
    float *s = NULL;
    npuc_status st;
    if ((st = load(d, x, &q, NULL, NULL)) != NPUC_OK || (st = load(d, sc, NULL, &s, NULL)) != NPUC_OK ||
        (zc && (st = load(d, zc, &z, NULL, NULL)) != NPUC_OK))
        goto done;
    const npuc__onnx_attr *aa = attr_of(n, "axis"), *ab = attr_of(n, "block_size");
    int64_t axis = aa ? aa->i : 1, bs = ab ? ab->i : 0;
    if (axis < 0) axis += x->rank;
    int64_t D = 1, inner = 1;
    if (x->rank) {
        D = x->dims[axis];
        for (int k = (int)axis + 1; k < x->rank; k++) inner *= x->dims[k];
    }
    int per_tensor = bs == 0 && sc->numel == 1 && sc->rank <= 1;
    int64_t Db = bs ? sc->dims[axis] : 0;
    for (uint64_t i = 0; i < x->numel; i++) {
        uint64_t j = 0;
        if (!per_tensor) {
            uint64_t ia = (i / (uint64_t)inner) % (uint64_t)D;
            if (!bs) j = ia;
            else {
                uint64_t o = i / ((uint64_t)inner * (uint64_t)D), in = i % (uint64_t)inner;
                j = (o * (uint64_t)Db + ia / (uint64_t)bs) * (uint64_t)inner + in;
            }
        }
        out[i] = (float)(q[i] - (z ? z[j] : 0)) * s[j];
    }
done:
    free(q);
    free(z);
    free(s);
    return st;
}

static npuc_status eval_nbits(dq_state *d, const dq_chain *c, float *out) {
    const npuc__onnx_node *n = c->mnb;
    const dq_const *B = cfind(d, n->inputs[1]), *S = cfind(d, n->inputs[2]);
    const dq_const *Z = n->ninputs > 3 && *n->inputs[3] ? cfind(d, n->inputs[3]) : NULL;
    int32_t *b = NULL, *z = NULL;
    float *s = NULL;
    npuc_status st;
    if ((st = load(d, B, &b, NULL, NULL)) != NPUC_OK || (st = load(d, S, NULL, &s, NULL)) != NPUC_OK ||
        (Z && (st = load(d, Z, &z, NULL, NULL)) != NPUC_OK))
        goto done;
    int64_t blob = c->bs / 2, per = (c->nb + 1) / 2;
    for (int64_t nn = 0; nn < c->N; nn++)
        for (int64_t k = 0; k < c->K; k++) {
            int64_t bl = k / c->bs, j = k % c->bs;
            int q = (b[(nn * c->nb + bl) * blob + j / 2] >> (4 * (j & 1))) & 15;
            int zp = z ? (z[nn * per + bl / 2] >> (4 * (bl & 1))) & 15 : 8;
            out[k * c->N + nn] = (float)(q - zp) * s[nn * c->nb + bl];
        }
done:
    free(b);
    free(z);
    free(s);
    return st;
}

/* Chain c's float32 values (before a final Cast) into out, its element count
 * (chain_shape has filled the steps' shapes). */
static npuc_status eval_chain(dq_state *d, dq_chain *c, float *out) {
    if (c->nbits) return eval_nbits(d, c, out);
    npuc_status st = NPUC_OK;
    for (int k = 0; k < c->ns && st == NPUC_OK; k++) {
        dq_step *s = &c->s[k];
        const dq_step *prev = k ? &c->s[k - 1] : s;
        if (s->kind == K_DQ) st = eval_dq(d, s->n, out);
        else if (s->kind == K_CAST) {
            int32_t *q = NULL;
            if ((st = load(d, cfind(d, s->n->inputs[0]), &q, NULL, NULL)) == NPUC_OK) {
                const dq_const *x = cfind(d, s->n->inputs[0]);
                for (uint64_t i = 0; i < x->numel; i++) out[i] = (float)q[i];
            }
            free(q);
        } else if (s->kind == K_SUB || s->kind == K_MUL) {
            const dq_const *b = cfind(d, s->operand);
            float *bv = NULL;
            if ((st = load(d, b, NULL, &bv, NULL)) == NPUC_OK)
                bcast(out, prev->odims, prev->orank, bv, b->dims, b->rank, s->kind == K_MUL);
            free(bv);
        }
    }
    return st;
}

/* The shapes after each Reshape (its INT64 shape read: 0 copies the input's
 * extent unless allowzero, one -1 takes the rest) and the output's info. */
static npuc_status chain_shape(dq_state *d, dq_chain *c, npuc_tensor_info *t) {
    memset(t, 0, sizeof *t);
    t->name = c->out;
    if (c->nbits) {
        t->rank = 2;
        t->shape[0] = c->K;
        t->shape[1] = c->N;
    } else {
        for (int k = 1; k < c->ns; k++) {
            dq_step *s = &c->s[k], *p = &c->s[k - 1];
            if (s->kind != K_RESHAPE) {
                s->orank = p->orank;
                memcpy(s->odims, p->odims, sizeof s->odims);
                continue;
            }
            int64_t *v = NULL;
            const dq_const *sh = cfind(d, s->operand);
            npuc_status st = load(d, sh, NULL, NULL, &v);
            if (st != NPUC_OK) return st;
            const npuc__onnx_attr *az = attr_of(s->n, "allowzero");
            uint64_t in = 1, known = 1;
            for (int j = 0; j < p->orank; j++) in *= (uint64_t)p->odims[j];
            int neg = -1, bad = 0;
            for (int j = 0; j < s->orank; j++) {
                int64_t e = v[j];
                if (e == 0 && !(az && az->i)) {
                    if (j >= p->orank) bad = 1;
                    else e = p->odims[j];
                }
                if (e == -1 && neg < 0) neg = j;
                else if (e < 0) bad = 1;
                else known *= (uint64_t)e;
                s->odims[j] = e;
            }
            if (neg >= 0 && known && in % known == 0) s->odims[neg] = (int64_t)(in / known);
            else if (neg >= 0) bad = 1;
            uint64_t outn = 1;
            for (int j = 0; j < s->orank; j++) outn *= (uint64_t)s->odims[j];
            free(v);
            if (bad || outn != in)
                return npuc_fail(d->ctx, NPUC_ERR_FORMAT, "%s: the Reshape node with output '%s': its shape does not "
                                 "fit its input", d->path, s->n->outputs[0]);
        }
        t->rank = c->s[c->ns - 1].orank;
        memcpy(t->shape, c->s[c->ns - 1].odims, sizeof t->shape);
    }
    t->dtype = c->otype == T_FLOAT16 ? NPUC_DTYPE_F16 : c->otype == T_BFLOAT16 ? NPUC_DTYPE_BF16
             : c->otype == T_DOUBLE ? NPUC_DTYPE_F64 : NPUC_DTYPE_F32;
    t->numel = 1;
    for (int k = 0; k < t->rank; k++) t->numel *= (uint64_t)t->shape[k];
    t->nbytes = t->numel * npuc_dtype_size(t->dtype);
    return NPUC_OK;
}

/* ------------------------------------------------------------ the rewritten graph */

static char *first_output(const unsigned char *p, uint64_t n, char *buf, size_t nb) {
    const unsigned char *r = p, *end = p + n;
    npuc__ox_field f;
    while (r < end) {
        if (npuc__ox_next(&r, end, &f)) return NULL;
        if (f.num == 2 && f.wt == 2) {
            if (f.len >= nb) return NULL;
            memcpy(buf, f.data, (size_t)f.len);
            buf[f.len] = 0;
            return buf;
        }
    }
    return NULL;
}

static void put_str(npuc__ox_buf *b, uint32_t num, const char *s) { npuc__ox_put_bytes(b, num, s, strlen(s)); }

static npuc_status rw_weight(npuc__ox_walk *wk, const npuc__ox_weight *w, npuc__ox_buf *out) {
    dq_state *d = wk->user;
    if (!w->constant && npuc__strmap_get(&d->drop, w->name, NULL)) wk->drop = 1;
    else npuc__ox_put(out, w->msg, (size_t)w->len);
    return NPUC_OK;
}

static npuc_status rw_graph_begin(npuc__ox_walk *wk, const unsigned char *p, uint64_t n, int depth,
                                  npuc__ox_buf *out) {
    (void)depth;
    dq_state *d = wk->hook_user;
    const unsigned char *r = p, *end = p + n;
    npuc__ox_field f;
    char o[1024];
    while (r < end) {
        if (npuc__ox_next(&r, end, &f)) return NPUC_OK; /* the walker reports it */
        if (f.num != 1 || f.wt != 2 || !first_output(f.data, f.len, o, sizeof o)) continue;
        size_t ci;
        if (!npuc__strmap_get(&d->final, o, &ci) && !npuc__strmap_get(&d->nbnode, o, &ci)) continue;
        dq_chain *c = &d->ch[ci];
        if (c->emitted) continue;
        c->emitted = 1;
        npuc_tensor_info t;
        npuc_status st = chain_shape(d, c, &t);
        if (st != NPUC_OK) return st;
        npuc__ox_buf tb = {0};
        for (int k = 0; k < t.rank; k++) {
            npuc__ox_put_tag(&tb, 1, 0);
            npuc__ox_put_varint(&tb, (uint64_t)t.shape[k]);
        }
        npuc__ox_put_tag(&tb, 2, 0);
        npuc__ox_put_varint(&tb, (uint64_t)c->otype);
        put_str(&tb, 8, c->out);
        npuc__ox_put_sub(out, 5, &tb);
    }
    return out->oom ? oom(d) : NPUC_OK;
}

static npuc_status rw_node(npuc__ox_walk *wk, const unsigned char *p, uint64_t n, int depth, npuc__ox_buf *out,
                           int *handled) {
    (void)depth;
    dq_state *d = wk->hook_user;
    char o[1024];
    size_t ci;
    if (!first_output(p, n, o, sizeof o)) return NPUC_OK;
    if (npuc__strmap_get(&d->gone_node, o, NULL)) {
        *handled = 1;
        return NPUC_OK;
    }
    if (!npuc__strmap_get(&d->nbnode, o, &ci)) return NPUC_OK;
    /* MatMulNBits(A, B, scales[, zp]) -> MatMul(A, W): name, outputs and
     * doc_string kept, attributes and domain gone. */
    const unsigned char *r = p, *end = p + n;
    npuc__ox_field f;
    npuc__ox_buf nd = {0};
    int k = 0;
    while (r < end) {
        (void)npuc__ox_next(&r, end, &f);
        if (f.num == 1 && f.wt == 2) {
            if (k == 0) npuc__ox_put(&nd, f.start, (size_t)(f.end - f.start));
            else if (k == 1) put_str(&nd, 1, d->ch[ci].out);
            k++;
        } else if (f.num == 2 || f.num == 3 || f.num == 6) {
            npuc__ox_put(&nd, f.start, (size_t)(f.end - f.start));
        }
    }
    put_str(&nd, 4, "MatMul");
    npuc__ox_put_sub(out, 1, &nd);
    *handled = 1;
    return out->oom ? oom(d) : NPUC_OK;
}

/* Graph inputs (IR < 4) and value_info naming what is gone. */
static npuc_status rw_graph_field(npuc__ox_walk *wk, const npuc__ox_field *f, int depth, int *keep) {
    (void)depth;
    dq_state *d = wk->hook_user;
    if ((f->num != 11 && f->num != 13) || f->wt != 2) return NPUC_OK;
    const unsigned char *r = f->data, *end = f->data + f->len;
    npuc__ox_field g;
    while (r < end) {
        if (npuc__ox_next(&r, end, &g)) return NPUC_OK;
        if (g.num == 1 && g.wt == 2 && g.len < 1024) {
            char nm[1024];
            memcpy(nm, g.data, (size_t)g.len);
            nm[g.len] = 0;
            if (npuc__strmap_get(&d->gone_val, nm, NULL) || npuc__strmap_get(&d->drop, nm, NULL)) *keep = 0;
            return NPUC_OK;
        }
    }
    return NPUC_OK;
}

/* ------------------------------------------------------------ the hook */

/* An npuc artifact entry decompress would lose here: any but fake_quant
 * and the quant entries of weights read from the graph. */
static npuc_status check_art(dq_state *d) {
    const char *art = npuc_model_meta_get(d->m, "npuc");
    if (!art) return NPUC_OK;
    json_t *root = json_loads(art, 0, NULL);
    json_t *tensors = json_object_get(root, "tensors");
    const char *k;
    json_t *v;
    npuc_status st = NPUC_OK;
    json_object_foreach(tensors, k, v) {
        const char *enc = json_string_value(json_object_get(v, "encoding"));
        if (enc && strcmp(enc, "fake_quant") == 0) continue;
        if (enc && strcmp(enc, "quant") == 0 && npuc__strmap_get(&d->final, k, NULL)) continue;
        st = npuc_fail(d->ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s' is stored as '%s' by npuc besides the graph's "
                       "quantized weights; decompress reads one or the other, not both", d->path, k, enc ? enc : "?");
        break;
    }
    json_decref(root);
    return st;
}

static void state_free(dq_state *d) {
    for (size_t i = 0; i < d->nc; i++) free(d->c[i].name);
    free(d->c);
    for (size_t i = 0; i < d->nch; i++) free(d->ch[i].out);
    free(d->ch);
    npuc__strmap *maps[] = {&d->cidx, &d->consts, &d->uses, &d->names, &d->gone_node, &d->nbnode,
                            &d->final, &d->chain_uses, &d->drop, &d->gone_val};
    for (size_t i = 0; i < sizeof maps / sizeof maps[0]; i++) npuc__strmap_free(maps[i]);
    npuc__onnx_graph_free(d->md);
}

static int is_graph_output(const npuc__onnx_graph *g, const char *s) {
    for (size_t i = 0; i < g->noutputs; i++)
        if (strcmp(g->outputs[i].name, s) == 0) return 1;
    return 0;
}

/* The file does not name a MatMulNBits weight: say which names were chosen. */
static void name_note(dq_state *d) {
    char s[512];
    size_t used = 0, n = 0;
    for (size_t i = 0; i < d->nch; i++) {
        const dq_chain *c = &d->ch[i];
        if (!c->nbits) continue;
        if (n++ < 3 && used < sizeof s)
            used += (size_t)snprintf(s + used, sizeof s - used, "%s'%.100s' -> '%.100s'", n > 1 ? ", " : "",
                                     c->mnb->inputs[1], c->out);
    }
    if (n)
        npuc__ctx_warn(d->ctx, "%s: %zu MatMulNBits weight(s) named from their codes (%s%s)", d->path, n, s,
                       n > 3 ? ", ..." : "");
}

npuc_status npuc__onnx_decompress(npuc_ctx *ctx, npuc_model *m, const char *out, const npuc_write_opts *wo) {
    const char *entry = npuc_model_meta_get(m, NPUC__ONNX_MODEL_KEY);
    if (!entry) return NPUC_ERR_NOT_FOUND;
    dq_state d = {.ctx = ctx, .m = m, .path = npuc_model_path(m)};
    unsigned char *skel = NULL;
    size_t nskel = 0;
    npuc__ox_buf tmp = {0}, nw = {0};
    npuc_writer *w = NULL;
    char *b64 = NULL;
    float *f = NULL;
    void *cast = NULL;
    npuc_status st;
    if (npuc__ox_b64_decode(entry, &skel, &nskel) != 0)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: the \"%s\" metadata entry is not base64", d.path,
                         NPUC__ONNX_MODEL_KEY);
    if ((st = npuc__onnx_graph_parse_bytes(ctx, d.path, skel, nskel, &d.md)) != NPUC_OK) goto done;
    npuc__ox_walk pre = {.ctx = ctx, .path = d.path, .base = skel, .weight = pre_weight, .meta = keep_meta, .user = &d};
    if ((st = npuc__ox_walk_model(&pre, skel, nskel, &tmp)) != NPUC_OK) goto done;
    if ((st = count_uses(&d, d.md->graph)) != NPUC_OK || (st = find_chains(&d, d.md->graph)) != NPUC_OK) goto done;
    if (!d.nch) {
        st = NPUC_ERR_NOT_FOUND;
        goto done;
    }
    if ((st = check_art(&d)) != NPUC_OK) goto done;
    /* Initializers only removed nodes read go. */
    for (size_t i = 0; i < d.nc; i++) {
        size_t cu = count_of(&d.chain_uses, d.c[i].name);
        if (cu && cu == count_of(&d.uses, d.c[i].name) && !is_graph_output(d.md->graph, d.c[i].name) &&
            npuc__strmap_put(&d.drop, d.c[i].name, 1) != 0) {
            st = oom(&d);
            goto done;
        }
    }
    npuc__ox_walk rw = {.ctx = ctx, .path = d.path, .base = skel, .weight = rw_weight, .meta = keep_meta, .user = &d,
                        .graph_begin = rw_graph_begin, .node = rw_node, .graph_field = rw_graph_field,
                        .hook_user = &d};
    if ((st = npuc__ox_walk_model(&rw, skel, nskel, &nw)) != NPUC_OK) goto done;
    for (size_t i = 0; i < d.nch; i++)
        if (!d.ch[i].emitted) {
            st = npuc_fail(ctx, NPUC_ERR_INTERNAL, "%s: weight '%s' was not placed", d.path, d.ch[i].out);
            goto done;
        }
    if (nw.oom || nw.nh || !(b64 = npuc__ox_b64_encode(nw.p, nw.n))) {
        st = nw.nh ? npuc_fail(ctx, NPUC_ERR_INTERNAL, "%s: holes in the graph entry", d.path) : oom(&d);
        goto done;
    }

    if ((st = npuc_writer_open(ctx, out, wo, &w)) != NPUC_OK) goto done;
    for (size_t i = 0; i < npuc_model_meta_count(m) && st == NPUC_OK; i++) {
        const char *mk, *mv;
        npuc_model_meta_at(m, i, &mk, &mv);
        if (strcmp(mk, "npuc") == 0 || strcmp(mk, "npuc.layout") == 0) continue;
        st = npuc_writer_meta(w, mk, strcmp(mk, NPUC__ONNX_MODEL_KEY) == 0 ? b64 : mv);
    }
    size_t nt = npuc_model_count(m);
    for (size_t i = 0; i < nt && st == NPUC_OK; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        if (!npuc__strmap_get(&d.drop, t->name, NULL)) st = npuc_writer_declare(w, t);
    }
    uint64_t maxn = 1;
    for (size_t i = 0; i < d.nch && st == NPUC_OK; i++) {
        npuc_tensor_info t;
        if ((st = chain_shape(&d, &d.ch[i], &t)) == NPUC_OK) st = npuc_writer_declare(w, &t);
        if (t.numel > maxn) maxn = t.numel;
    }
    if (st != NPUC_OK) goto done;
    for (size_t i = 0; i < nt && st == NPUC_OK; i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        if (npuc__strmap_get(&d.drop, t->name, NULL)) continue;
        const void *p;
        if ((st = npuc_model_data(ctx, m, i, &p)) != NPUC_OK) break;
        st = npuc_writer_write(w, p, t->nbytes);
        npuc_model_release(m, i);
    }
    if (st == NPUC_OK && (!(f = malloc((size_t)maxn * 4)) || !(cast = malloc((size_t)maxn * 8)))) st = oom(&d);
    for (size_t i = 0; i < d.nch && st == NPUC_OK; i++) {
        npuc_tensor_info t;
        if ((st = chain_shape(&d, &d.ch[i], &t)) != NPUC_OK || (st = eval_chain(&d, &d.ch[i], f)) != NPUC_OK) break;
        const void *o = f;
        if (t.dtype != NPUC_DTYPE_F32) {
            npuc_convert(cast, t.dtype, f, NPUC_DTYPE_F32, (size_t)t.numel);
            o = cast;
        }
        st = npuc_writer_write(w, o, t.nbytes);
    }
    if (st == NPUC_OK) {
        st = npuc_writer_finish(w);
        w = NULL;
    }
    if (st == NPUC_OK) name_note(&d);
done:
    npuc_writer_abort(w);
    npuc__ox_free(&tmp);
    npuc__ox_free(&nw);
    free(b64);
    free(f);
    free(cast);
    free(skel);
    state_free(&d);
    return st;
}
