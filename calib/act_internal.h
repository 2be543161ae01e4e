/*
 * act_internal.h - what the activation calibration files share
 * (library-private): the accumulator of one activation (act_calib.c), the
 * exact order statistics of the percentile method (act_select.c) and the
 * histogram methods entropy and mse (act_hist.c).
 */
#ifndef NPUC_ACT_INTERNAL_H
#define NPUC_ACT_INTERNAL_H

#include <stdint.h>

#include "npuc/calib.h"
#include "range_internal.h"

/* Bins of one narrowing step of the percentile selection. */
#define NPUC_SEL_BINS 256
/* A target bin with at most this many values is kept and sorted. */
#define NPUC_SEL_KEEP 4096

enum { SEL_NARROW, SEL_COLLECT, SEL_DONE };

/* The search for the value of rank `rank` (0-based, ascending) of one
 * channel's values (|x| when symmetric). */
typedef struct npuc__sel {
    uint64_t rank;
    int state;
    float a, b;          /* the values still in play are those in [a, b] */
    uint64_t below;      /* values < a seen in this pass */
    uint64_t *cnt;       /* NARROW: NPUC_SEL_BINS counts */
    float *bmin, *bmax;  /* NARROW: extremes per bin */
    float *keep;         /* COLLECT: the values in [a, b] */
    uint64_t nkeep, cap;
    float value;         /* DONE */
} npuc__sel;

typedef struct npuc__act_chan {
    uint64_t n, n1;      /* this pass, and pass 1's count */
    float min, max;
    uint64_t *hist;      /* entropy, mse: NPUC_ACT_BINS */
    npuc__sel sel[4];
    int nsel;
    npuc_act_result res;
} npuc__act_chan;

struct npuc_act_calib {
    char *label;
    npuc_act_opts o;
    uint64_t channels;
    int pass;            /* 1, 2, ...; 0 when done */
    npuc__act_chan *ch;
    void *scratch;       /* npuc__entropy_search's */
};

/* Percentile: sets up ch's targets after pass 1 (ranks from the count). */
npuc_status npuc__sel_setup(npuc_ctx *ctx, npuc__act_chan *ch, double pct, int symmetric);
/* Feeds one value (already |x| when symmetric) to every open target. */
static inline void npuc__sel_feed(npuc__sel *s, float v);
/* Ends a pass for one target: NPUC_OK, or NPUC_ERR_NOMEM. *open = 1 while
 * the target needs another pass. */
npuc_status npuc__sel_end(npuc_ctx *ctx, npuc__sel *s, int *open);
void npuc__sel_free(npuc__sel *s);
/* The percentile from the finished targets, into ch->res. */
void npuc__sel_result(npuc__act_chan *ch, double pct, int symmetric);

/* Entropy and mse from ch->hist (pass 2 done), into ch->res.threshold etc. */
void npuc__act_entropy(npuc__act_chan *ch, int bits, void *scratch);
void npuc__act_mse(npuc__act_chan *ch, int bits);

static inline void npuc__sel_feed(npuc__sel *s, float v) {
    if (s->state == SEL_DONE) return;
    if (v < s->a) {
        s->below++;
        return;
    }
    if (v > s->b) return;
    if (s->state == SEL_COLLECT) {
        if (s->nkeep < s->cap) s->keep[s->nkeep] = v;
        s->nkeep++;
        return;
    }
    /* Monotone binning: values of a lower bin are below every value of a
     * higher one, so a bin's [min, max] holds exactly its values. */
    const double w = (double)s->b - (double)s->a;
    int k = w > 0 ? (int)(((double)v - (double)s->a) * NPUC_SEL_BINS / w) : 0;
    k = k < NPUC_SEL_BINS - 1 ? k : NPUC_SEL_BINS - 1;
    if (!s->cnt[k]++) {
        s->bmin[k] = v;
        s->bmax[k] = v;
    } else {
        s->bmin[k] = v < s->bmin[k] ? v : s->bmin[k];
        s->bmax[k] = v > s->bmax[k] ? v : s->bmax[k];
    }
}

#endif
