/*
 * decode_entry.h - the tensors a weight file stands for (library-private).
 *
 * A plain weight file holds its tensors as they are.  An npuc artifact holds
 * some tensors encoded: its "npuc" metadata entry (docs/artifact.md) maps an
 * original name to an encoding and the stored "parts" that encode it.  A
 * *logical view* lists what the file means: one logical tensor per original
 * (encoded) tensor and per stored tensor that is no part of an entry, in the
 * file order of their first stored tensor, with the original dtype, shape and
 * layout, and the bytes the tensor costs in the file (the sum of its parts).
 * Any logical tensor whose encoding npuc knows can be read back as float32;
 * the decoders are the ones `npuc decompress` uses (the codec table, codec.h).
 *
 * Nested entries (decoders.h): an entry that is a part of another entry is
 * no logical tensor of its own; its stored tensors belong to the outermost
 * entry, so after `npuc lowrank` then `npuc quantize` the file stands for one
 * logical tensor "W" whose bytes are those of W.lr_a's codes and scales plus
 * W.lr_b's.  Every stored tensor belongs to exactly one logical tensor.
 *
 *     npuc__lview v;
 *     if (npuc__lview_open(ctx, m, &v) != NPUC_OK) ...
 *     for (size_t i = 0; i < v.n; i++)
 *         if (npuc__lview_readable(&v.t[i])) npuc__lview_read_f32(ctx, &v, i, buf);
 *     npuc__lview_free(&v);
 */
#ifndef NPUC_DECODE_ENTRY_H
#define NPUC_DECODE_ENTRY_H

#include <jansson.h>

#include "npuc_internal.h"
#include "codecs/codec.h"

typedef struct npuc__ltensor {
    const char *name;       /* borrowed from the model or the artifact JSON */
    npuc_tensor_info info;  /* original dtype, shape, layout (name = .name) */
    const char *encoding;   /* NULL: stored as is; else the (outer) entry's encoding ("quant", "lowrank") */
    const npuc__codec *codec; /* the encoding's row (codec.h), or NULL when stored as is or unknown */
    const json_t *entry;    /* the artifact entry, or NULL */
    npuc_decode_fn fn;      /* the decoder; NULL for dense tensors and unknown encodings */
    const char *unknown;    /* fn == NULL for an entry: the encoding without a decoder (its own or nested) */
    int dense;              /* the values are the stored tensor `stored` itself */
    size_t stored;          /* the stored tensor (dense) or the first of its stored parts in file order */
    size_t nparts;          /* stored tensors behind it (1 when dense) */
    uint64_t bytes;         /* bytes in the file: the tensor's, or the sum of its parts' (nested ones too) */
    int nested;             /* 1 when some part is itself described by an entry */
} npuc__ltensor;

typedef struct npuc__lview {
    npuc_model *m;
    json_t *art;            /* the parsed "npuc" entry, or NULL for a plain file */
    npuc__ltensor *t;
    size_t n;
    const npuc__ltensor **by_name; /* t sorted by name, for npuc__lview_find */
    size_t *owner;          /* for each stored tensor, the index in t of the logical tensor it belongs to */
} npuc__lview;

/* Builds the logical view of m; every encoded entry with a known decoder is
 * validated (parts present, sizes consistent, nested entries too) without
 * decoding.  Errors: NPUC_ERR_FORMAT for a malformed "npuc" entry (a part
 * missing, shared by two entries or nested in a cycle or too deeply, no
 * parts), NPUC_ERR_NOMEM.  On failure *v is empty. */
npuc_status npuc__lview_open(npuc_ctx *ctx, npuc_model *m, npuc__lview *v);
/* 1 when logical tensor t can be read as float32 (dense float, or decodable:
 * the decoders of its entry and of every nested entry are known). */
int npuc__lview_readable(const npuc__ltensor *t);
/* Reads logical tensor i as t->info.numel float32 values into out. */
npuc_status npuc__lview_read_f32(npuc_ctx *ctx, npuc__lview *v, size_t i, float *out);
/* Index of the logical tensor called name, or -1 (binary search). */
long npuc__lview_find(const npuc__lview *v, const char *name);
void npuc__lview_free(npuc__lview *v);

#endif
