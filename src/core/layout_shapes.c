/*
 * layout_shapes.c - what the shapes of a model's tensors say together
 * (layout_rules.h: npuc__layout_refine), for the tensors no name settled.
 *
 * Two rules, each applied only to open decisions (kind UNNAMED or DEMOTED):
 *
 *   ONNX RNN: a rank-3 [dirs, G*h, x] (dirs 1 or 2, G*h divisible by 4 for
 *   LSTM or 3 for GRU) beside a rank-2 [dirs, 2*G*h] is an LSTM/GRU W or R
 *   (layout doi: per channel along axis 1) and its B (a bias, left alone).
 *   With a second rank-3 [dirs, G*h, h] (R, h = G*h / G) beside it the
 *   pattern is complete: convention; W and B alone: a guess.
 *
 *   Dimension chain, in a file that names no family: the 2-D weights in
 *   storage order multiply only one way (250->128->5 connects as [in,out],
 *   not as [out,in]) and no bias length says otherwise: certain.  Without a
 *   chain, a weight's own bias (module.bias, its length one axis of the
 *   weight and not the other) gives its output axis: convention.  Biases
 *   that disagree with each other or with the chain decide nothing.
 */
#include <stdio.h>
#include <string.h>

#include "layout_rules.h"

static int open_dec(const npuc__layout_decision *d) {
    return d->kind == NPUC__DEC_UNNAMED || d->kind == NPUC__DEC_DEMOTED;
}

static void set(npuc__layout_decision *d, npuc_role role, npuc_layout l, npuc_confidence c) {
    d->role = role;
    d->layout = l;
    d->conf = c;
    d->kind = NPUC__DEC_NAMED; /* settled: no later rule reopens it */
}

/* ------------------------------------------------------------ ONNX RNN */

static void onnx_rnn(const npuc__layout_src *s, const npuc_tensor_info *t, size_t n, npuc__layout_decision *d) {
    if (s->fam != NPUC__FAM_UNKNOWN && s->fam != NPUC__FAM_PT) return;
    for (size_t i = 0; i < n; i++) {
        const npuc_tensor_info *w = &t[i];
        if (!open_dec(&d[i]) || w->rank != 3 || (w->shape[0] != 1 && w->shape[0] != 2)) continue;
        const int64_t gh = w->shape[1];
        if (gh <= 0 || (gh % 4 != 0 && gh % 3 != 0)) continue;
        size_t b = n, r = n;
        for (size_t j = 0; j < n && b == n; j++)
            if (t[j].rank == 2 && t[j].shape[0] == w->shape[0] && t[j].shape[1] == 2 * gh) b = j;
        if (b == n) continue;
        int gates = 0;
        for (size_t k = 0; k < n && r == n; k++) {
            if (k == i || t[k].rank != 3 || t[k].shape[0] != w->shape[0] || t[k].shape[1] != gh) continue;
            if (gh % 4 == 0 && t[k].shape[2] == gh / 4) { r = k; gates = 4; }
            else if (gh % 3 == 0 && t[k].shape[2] == gh / 3) { r = k; gates = 3; }
        }
        const npuc_confidence c = r < n ? NPUC_CONF_CONVENTION : NPUC_CONF_GUESS;
        set(&d[i], NPUC_ROLE_RNN, NPUC_LAYOUT_DOI, c);
        if (r < n)
            snprintf(d[i].ev, sizeof d[i].ev, "shapes: ONNX %s W/R [dirs,gates*hidden,in] beside R '%.30s' and B "
                     "'%.30s'", gates == 4 ? "LSTM" : "GRU", t[r].name, t[b].name);
        else
            snprintf(d[i].ev, sizeof d[i].ev, "shapes: ONNX LSTM/GRU W [dirs,gates*hidden,in] beside B '%.30s' [dirs,"
                     "2*gates*hidden], no R [dirs,gates*hidden,hidden]: a guess", t[b].name);
        if (open_dec(&d[b]) || d[b].role == NPUC_ROLE_BIAS) {
            set(&d[b], NPUC_ROLE_BIAS, NPUC_LAYOUT_NONE, c);
            snprintf(d[b].ev, sizeof d[b].ev, "shapes: ONNX LSTM/GRU B [dirs,2*gates*hidden] beside W '%.30s'%s",
                     w->name, r < n ? " and R" : " (no R: a guess)");
        }
    }
}

/* ------------------------------------------------------------ dimension chain */

/* The length of weight w's bias: a rank-1 tensor named like w with the last
 * component "bias" (module.weight / module.bias, a/b/weight / a/b/bias), or
 * 0 when there is none. */
static int64_t bias_len(const npuc_tensor_info *t, size_t n, const npuc_tensor_info *w) {
    const char *sep = NULL;
    for (const char *p = w->name; *p; p++)
        if (*p == '.' || *p == '/') sep = p;
    const size_t stem = sep ? (size_t)(sep - w->name) + 1 : 0;
    for (size_t j = 0; j < n; j++)
        if (t[j].rank == 1 && strncmp(t[j].name, w->name, stem) == 0 && strcmp(t[j].name + stem, "bias") == 0)
            return t[j].shape[0];
    return 0;
}

static void chain(const npuc__layout_src *s, const npuc_tensor_info *t, size_t n, npuc__layout_decision *d) {
    if (s->fam != NPUC__FAM_UNKNOWN) return;
    size_t nw = 0, first = n, last = n;
    int io_ok = 1, oi_ok = 1, vote_io = 0, vote_oi = 0;
    const npuc_tensor_info *prev = NULL;
    for (size_t i = 0; i < n; i++) {
        if (!open_dec(&d[i]) || t[i].rank != 2 || d[i].role != NPUC_ROLE_LINEAR) continue;
        const npuc_tensor_info *w = &t[i];
        if (prev) {
            io_ok &= prev->shape[1] == w->shape[0];
            oi_ok &= prev->shape[0] == w->shape[1];
        }
        const int64_t bl = bias_len(t, n, w);
        if (bl && bl == w->shape[1] && bl != w->shape[0]) vote_io = 1;
        if (bl && bl == w->shape[0] && bl != w->shape[1]) vote_oi = 1;
        if (first == n) first = i;
        last = i;
        prev = w;
        nw++;
    }
    if (!nw || (vote_io && vote_oi)) return; /* biases that disagree decide nothing */
    int io = -1; /* 1: [in,out], 0: [out,in], -1: undecided */
    npuc_confidence c = NPUC_CONF_CONVENTION;
    if (nw >= 2 && io_ok != oi_ok && !(io_ok && vote_oi) && !(oi_ok && vote_io)) {
        io = io_ok;
        c = NPUC_CONF_CERTAIN;
    } else if (vote_io || vote_oi) {
        io = vote_io;
    }
    if (io < 0) return;
    char path[64] = "";
    if (c == NPUC_CONF_CERTAIN) {
        /* 250->128->5: the input width, then each weight's output width. */
        size_t k = 0;
        int64_t in = io ? t[first].shape[0] : t[first].shape[1];
        k += (size_t)snprintf(path, sizeof path, "%lld", (long long)in);
        for (size_t i = first; i <= last && k < sizeof path; i++) {
            if (!open_dec(&d[i]) || t[i].rank != 2 || d[i].role != NPUC_ROLE_LINEAR) continue;
            k += (size_t)snprintf(path + k, sizeof path - k, "->%lld", (long long)t[i].shape[io ? 1 : 0]);
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (!open_dec(&d[i]) || t[i].rank != 2 || d[i].role != NPUC_ROLE_LINEAR) continue;
        const int64_t bl = bias_len(t, n, &t[i]);
        if (c != NPUC_CONF_CERTAIN && !(bl && bl != t[i].shape[io ? 0 : 1] && bl == t[i].shape[io ? 1 : 0]))
            continue; /* only a weight's own bias speaks for it */
        set(&d[i], NPUC_ROLE_LINEAR, io ? NPUC_LAYOUT_IO : NPUC_LAYOUT_OI, c);
        if (c == NPUC_CONF_CERTAIN)
            snprintf(d[i].ev, sizeof d[i].ev, "shapes: the %zu 2-D weights chain only as %s (%s)%s", nw,
                     io ? "[in,out]" : "[out,in]", path, vote_io || vote_oi ? ", biases agree" : "");
        else
            snprintf(d[i].ev, sizeof d[i].ev, "shapes: its bias has %lld values, the %s axis: %s", (long long)bl,
                     io ? "last" : "first", io ? "[in,out]" : "[out,in]");
    }
}

void npuc__layout_refine(const npuc__layout_src *s, const npuc_tensor_info *t, size_t n, npuc__layout_decision *d) {
    onnx_rnn(s, t, n, d);
    chain(s, t, n, d);
}
