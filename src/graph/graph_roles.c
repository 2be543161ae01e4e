/*
 * graph_roles.c - the edge layers of a model from names, else storage order
 * (graph_roles.h has the rules and why names decide alone).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "graph/graph_roles.h"

const char *npuc__edge_name(npuc__edge e) {
    static const char *const N[] = {"", "embedding", "input convolution", "output head", "first weight layer",
                                    "last weight layer"};
    return (unsigned)e < sizeof N / sizeof N[0] ? N[e] : "";
}

static const char *const EMBED[] = {"embed_tokens", "wte", "word_embeddings", "tok_embeddings", "embed_in",
                                    "token_embedding", "token_embeddings", "embed", "embedding", NULL};
static const char *const HEAD[] = {"lm_head", "classifier", "head", "fc", "score", "logits", "predictions",
                                   "output", "embed_out", "qa_outputs", NULL};
static const char *const INCONV[] = {"conv1", "conv0", "Conv1", "conv_stem", "stem", "conv_first", "patch_embed",
                                     "input_conv", "conv1_conv", "block1_conv1", "conv2d", NULL};

/* The component [s, s+n) is `base`, or `base` "_" digits (Keras and
 * Paddle number their layers: fc_0, conv2d_0 only as the first). */
static int comp_is(const char *s, size_t n, const char *base, int numbered) {
    size_t bl = strlen(base);
    if (n < bl || memcmp(s, base, bl) != 0) return 0;
    if (n == bl) return 1;
    if (!numbered || s[bl] != '_' || n == bl + 1) return 0;
    for (size_t i = bl + 1; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return numbered == 1 || (n == bl + 2 && s[bl + 1] == '0'); /* 2: only "_0" */
}

static const char *in_list(const char *s, size_t n, const char *const *list, int numbered) {
    for (const char *const *b = list; *b; b++) {
        int num = numbered && strcmp(*b, "conv2d") == 0 ? 2 : numbered;
        if (comp_is(s, n, *b, num)) return *b;
    }
    return NULL;
}

npuc__edge npuc__edge_of_name(const char *name, int rank, char *why, size_t n) {
    if (rank < 2) return NPUC_EDGE_NONE;
    const size_t first = strcspn(name, "./");
    const char *hit;
    for (const char *c = name; *c;) { /* any component may name the embedding */
        size_t len = strcspn(c, "./:");
        if ((hit = in_list(c, len, EMBED, 0))) {
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
        r->edge[i] = e;
        r->confidence[i] = c;
        snprintf(r->why[i], sizeof r->why[i], "%s", why);
    }
}

npuc_status npuc__edge_roles_find(npuc_ctx *ctx, const npuc_model *m, const unsigned char *eligible,
                                  const size_t *layer, npuc__edge_roles *out) {
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

    /* Names: every embedding; the last head and the first input conv in
     * natural order (classifier.4 after classifier.1, conv2d_0 before 10). */
    int64_t head = -1, conv = -1;
    char why[64], head_why[64] = "", conv_why[64] = "";
    for (size_t i = 0; i < n; i++) {
        if (!eligible[i]) continue;
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        npuc__edge e = npuc__edge_of_name(t->name, t->rank, why, sizeof why);
        if (e == NPUC_EDGE_EMBEDDING) {
            mark(out, layer, n, i, e, NPUC_CONF_CONVENTION, why);
        } else if (e == NPUC_EDGE_HEAD) {
            if (head < 0 || npuc__graph_natcmp(t->name, npuc_model_tensor(m, (size_t)head)->name) > 0) {
                head = (int64_t)i;
                snprintf(head_why, sizeof head_why, "%s", why);
            }
        } else if (e == NPUC_EDGE_INPUT_CONV) {
            if (conv < 0 || npuc__graph_natcmp(t->name, npuc_model_tensor(m, (size_t)conv)->name) < 0) {
                conv = (int64_t)i;
                snprintf(conv_why, sizeof conv_why, "%s", why);
            }
        }
    }
    if (head >= 0) mark(out, layer, n, (size_t)head, NPUC_EDGE_HEAD, NPUC_CONF_CONVENTION, head_why);
    if (conv >= 0) mark(out, layer, n, (size_t)conv, NPUC_EDGE_INPUT_CONV, NPUC_CONF_CONVENTION, conv_why);
    if (out->nfound || out->alphabetical) return NPUC_OK;

    /* Nothing named: storage order, which exporters write in graph order
     * unless they sorted the names (a guess either way). */
    size_t first = n, last = n;
    for (size_t i = 0; i < n; i++)
        if (eligible[i]) {
            if (first == n) first = i;
            last = i;
        }
    if (first == n) return NPUC_OK;
    mark(out, layer, n, first, NPUC_EDGE_FIRST, NPUC_CONF_GUESS, "storage order");
    if (!layer ? last != first : layer[last] != layer[first])
        mark(out, layer, n, last, NPUC_EDGE_LAST, NPUC_CONF_GUESS, "storage order");
    out->nguess = out->nfound;
    return NPUC_OK;
}
