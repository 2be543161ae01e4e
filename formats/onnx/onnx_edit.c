/*
 * onnx_edit.c - the stored ONNX graph entry opened for a graph_write edit
 * (onnx_fold.c, onnx_split.c, onnx_resize.c): decoded once, every weight's
 * ONNX data_type read, the graph parsed, and the weights the edited
 * network graph still holds indexed.
 */
#include <stdlib.h>
#include <string.h>

#include "graph/graph_net.h"
#include "onnx_edit.h"

static npuc_status scan_weight(npuc__ox_walk *wk, const npuc__ox_weight *w, npuc__ox_buf *out) {
    npuc__strmap *wtype = wk->user;
    const unsigned char *q = w->msg, *end = w->msg + w->len;
    uint64_t dt = 0;
    npuc__ox_field f;
    (void)out;
    while (q < end) {
        const char *why = npuc__ox_next(&q, end, &f);
        if (why) return npuc__ox_bad(wk, q, "TensorProto", why);
        if (f.num == 2 && f.wt == 0) dt = f.v; /* TensorProto.data_type */
    }
    if (npuc__strmap_put(wtype, w->name, (size_t)dt) != 0) return npuc_fail(wk->ctx, NPUC_ERR_NOMEM, "out of memory");
    return NPUC_OK;
}

npuc_status npuc__ox_keep_meta(npuc__ox_walk *wk, const char *k, const char *v, int *keep) {
    (void)wk;
    (void)k;
    (void)v;
    *keep = 1;
    return NPUC_OK;
}

npuc_status npuc__ox_edit_open(npuc_ctx *ctx, const char *label, const char *stored, const npuc_graph *g,
                               npuc__ox_edit *e) {
    memset(e, 0, sizeof *e);
    if (npuc__ox_b64_decode(stored, &e->skel, &e->nskel) != 0)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: not base64", label);
    npuc__ox_walk wk;
    memset(&wk, 0, sizeof wk);
    wk.ctx = ctx;
    wk.path = label;
    wk.base = e->skel;
    wk.weight = scan_weight;
    wk.meta = npuc__ox_keep_meta;
    wk.user = &e->wtype;
    npuc__ox_buf scan = {0};
    npuc_status st = npuc__ox_walk_model(&wk, e->skel, e->nskel, &scan);
    npuc__ox_free(&scan);
    if (st == NPUC_OK) st = npuc__onnx_graph_parse_bytes(ctx, label, e->skel, e->nskel, &e->om);
    for (size_t i = 0; st == NPUC_OK && i < g->nnodes; i++)
        for (size_t k = 0; k < g->nodes[i].nw; k++)
            if (npuc__strmap_put(&e->gw, g->nodes[i].w[k].tensor, i) != 0)
                st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    return st;
}

void npuc__ox_edit_close(npuc__ox_edit *e) {
    npuc__onnx_graph_free(e->om);
    npuc__strmap_free(&e->wtype);
    npuc__strmap_free(&e->gw);
    free(e->skel);
    memset(e, 0, sizeof *e);
}

int npuc__ox_field_is(const npuc__ox_field *f, const char *s) {
    size_t n = strlen(s);
    return f->wt == 2 && f->len == n && memcmp(f->data, s, n) == 0;
}

char *npuc__ox_field_dup(const npuc__ox_field *f) {
    if (f->wt != 2 || memchr(f->data, 0, (size_t)f->len)) return NULL;
    char *s = malloc((size_t)f->len + 1);
    if (s) {
        memcpy(s, f->data, (size_t)f->len);
        s[f->len] = 0;
    }
    return s;
}

int npuc__ox_value_info_name(const npuc__ox_field *f, char **name) {
    *name = NULL;
    if ((f->num != 11 && f->num != 13) || f->wt != 2) return 0; /* GraphProto.input, .value_info */
    const unsigned char *q = f->data, *end = f->data + f->len;
    npuc__ox_field g;
    while (q < end) {
        if (npuc__ox_next(&q, end, &g)) return 0;
        if (g.num != 1 || g.wt != 2) continue; /* ValueInfoProto.name */
        return (*name = npuc__ox_field_dup(&g)) ? 1 : -1;
    }
    return 0;
}
