/*
 * codec.h - the artifact encodings, one table row each (library-private).
 *
 * An artifact's "npuc" entry (docs/artifact.md) names, for each encoded
 * tensor, an "encoding".  Everything npuc knows about an encoding sits in its
 * row here, and every reader and writer of artifacts asks the row:
 *   - the passes that write an encoding name their entries with c->name and
 *     their stored parts with npuc__codec_part_dup / _part_name (the
 *     ".scale", ".lr_a"... suffixes are spelled in codec_table.c only), and
 *     set the encoding's fields with entry_fields.h;
 *   - the logical view, `npuc decompress`, `npuc validate` and
 *     npuc_artifact_check decode (or, with out == NULL, validate) through
 *     c->decode;
 *   - `npuc report` / npuc_compare_models take the record's action and
 *     scheme from c->action, c->describe and c->nested_scheme, and the
 *     quantization figures from c->noise.
 *
 * Rows whose decode is NULL are encodings npuc recognises but does not
 * rebuild: "fake_quant" (dense: the tensor stored under the entry's own name
 * already holds the dequantized values, so readers read it as it is) and the
 * report-only names "sparse" and "pruned" (a report says what was done, but
 * cannot decode them: no error figures).
 *
 *     const npuc__codec *c = npuc__codec_find(encoding);
 *     if (c && c->decode) st = c->decode(ctx, m, &nest, name, entry, &orig, out);
 *
 *     char *scale = npuc__codec_part_dup(&npuc__codec_quant, "scale", t->name);
 *     json_t *e = npuc__art_add(art, t, npuc__codec_quant.name);
 *
 * To add an encoding: a decoder file (decode_<name>.c), a row in
 * codec_table.c (name, parts, decoder, action) with its declarations below
 * (the decoder, and the row itself when a pass names it), its report
 * description in codec_report.c when the encoding name alone is not enough,
 * and a section in docs/artifact.md.  Nothing outside src/codecs changes
 * but the pass that writes it.
 */
#ifndef NPUC_CODEC_H
#define NPUC_CODEC_H

#include <jansson.h>

#include "npuc_internal.h"
#include "codecs/decoders.h"

/* One stored part of an encoded tensor: its role, as docs/artifact.md names
 * it and as passes ask for it ("codes", "scale"), and the suffix appended to
 * the tensor's name to name it ("" for the part stored under the tensor's own
 * name). */
typedef struct npuc__codec_part {
    const char *role;
    const char *suffix;
} npuc__codec_part;

/* Most parts an encoding has; a row's list ends at the first NULL role. */
#define NPUC_CODEC_PARTS_MAX 4

typedef struct npuc__codec npuc__codec;

/* Fills the scheme and extras of record r (which already names the tensor,
 * the entry's key) for an outermost entry.  tensors
 * is the artifact's "tensors" object when some part of the entry is itself
 * an entry (nested), else NULL. */
typedef void (*npuc__codec_describe_fn)(npuc_tensor_record *r, const json_t *entry, const json_t *tensors);
/* The short scheme of an entry nested in another ("int8/ch" for a quantized
 * lowrank factor) into buf, and its bit width in *bits (0: not quantized). */
typedef void (*npuc__codec_scheme_fn)(const json_t *entry, char *buf, size_t n, int *bits);
/* The quantization figures of a decodable entry describing orig, against the
 * original values w: the noise prediction sum (scale^2 / 12 per value) and
 * the count of clipped values.  Both 0 when the parts cannot be read. */
typedef void (*npuc__codec_noise_fn)(npuc_ctx *ctx, npuc_model *m, const json_t *entry, const npuc_tensor_info *orig,
                                     const float *w, double *noise, uint64_t *clipped);

struct npuc__codec {
    const char *name;                              /* the entry's "encoding" */
    npuc__codec_part parts[NPUC_CODEC_PARTS_MAX];  /* in the order of the entry's "parts" */
    npuc_decode_fn decode;                         /* NULL: npuc does not rebuild it */
    int dense;                                     /* entries have no parts: the stored tensor of
                                                      the entry's name holds the values */
    npuc_action action;                            /* what reports say the encoding did */
    npuc__codec_describe_fn describe;              /* NULL: the scheme is the encoding name */
    npuc__codec_scheme_fn nested_scheme;           /* NULL: the scheme is the encoding name */
    npuc__codec_noise_fn noise;                    /* NULL: no quantization figures */
};

/* The rows the writing passes name directly. */
extern const npuc__codec npuc__codec_quant, npuc__codec_fake_quant, npuc__codec_lowrank, npuc__codec_nm_sparse;

/* The whole table, for walking it (tests). */
extern const npuc__codec *const npuc__codecs[];
extern const size_t npuc__codec_count;

/* The row of an encoding name, or NULL when npuc does not know it. */
const npuc__codec *npuc__codec_find(const char *name);

/* The row of an entry's "encoding", or NULL (not a string, or unknown). */
const npuc__codec *npuc__codec_of(const json_t *entry);

/* 1 when entry describes a tensor stored dense under its own name: an
 * encoding whose row is dense, and no "parts". */
int npuc__codec_entry_dense(const json_t *entry);

/* The suffix of part role of c, or NULL when c has no such part. */
const char *npuc__codec_part_suffix(const npuc__codec *c, const char *role);

/* Writes the name of part role of tensor `tensor` ("w" + ".scale") to buf
 * (n bytes).  Returns 0, or -1 when c has no such part or the name does not
 * fit (buf then holds an empty string when n > 0). */
int npuc__codec_part_name(const npuc__codec *c, const char *role, const char *tensor, char *buf, size_t n);

/* The same name in a malloc'd string (free with free()); NULL when out of
 * memory.  role must be one of c's parts (a programming error otherwise). */
char *npuc__codec_part_dup(const npuc__codec *c, const char *role, const char *tensor);

/* Sets record r's action, scheme and extras for an outermost entry of
 * encoding `encoding` through its row; an encoding without a row is
 * NPUC_ACTION_MODIFIED with the encoding name as scheme.  tensors as for
 * npuc__codec_describe_fn. */
void npuc__codec_describe(npuc_tensor_record *r, const char *encoding, const json_t *entry, const json_t *tensors);

/* The short scheme of any entry nested in another, through its row
 * (nested_scheme), else its encoding name; *bits as for npuc__codec_scheme_fn. */
void npuc__codec_nested_scheme(const json_t *entry, char *buf, size_t n, int *bits);

/* Scale precision (scale_dtype.c): 1 when dt may hold a quant artifact's
 * scales (F32, F16, BF16).  npuc__scale_round rounds *scale to dt (round
 * half to even, the sign kept (full-grid scales are negative); raised to
 * dt's smallest magnitude, lowered to its largest finite one) and sets *inv = 1 / *scale; F32 leaves both as they
 * are.  The quantizer calls it right after choosing each scale, so codes
 * are computed with the scale the artifact stores. */
int npuc__scale_dtype_ok(npuc_dtype dt);
void npuc__scale_round(npuc_dtype dt, float *scale, float *inv);
/* npuc__scale_round of scale[0..n) and inv[0..n), the same values in
 * fewer conversion calls. */
void npuc__scale_round_n(npuc_dtype dt, float *scale, float *inv, size_t n);

/* The rows' functions: the decoders, one file each (decode_<name>.c), and
 * the report functions (codec_report.c). */
npuc_status npuc__decode_quant(npuc_ctx *ctx, npuc_model *m, const npuc__nest *nest, const char *name,
                               const json_t *entry, const npuc_tensor_info *orig, float *out);
npuc_status npuc__decode_lowrank(npuc_ctx *ctx, npuc_model *m, const npuc__nest *nest, const char *name,
                                 const json_t *entry, const npuc_tensor_info *orig, float *out);
npuc_status npuc__decode_nm(npuc_ctx *ctx, npuc_model *m, const npuc__nest *nest, const char *name,
                            const json_t *entry, const npuc_tensor_info *orig, float *out);
void npuc__codec_describe_quant(npuc_tensor_record *r, const json_t *e, const json_t *tensors);
void npuc__codec_describe_fake_quant(npuc_tensor_record *r, const json_t *e, const json_t *tensors);
void npuc__codec_describe_lowrank(npuc_tensor_record *r, const json_t *e, const json_t *tensors);
void npuc__codec_scheme_quant(const json_t *e, char *buf, size_t n, int *bits);
/* The scheme name of p (npuc_quant_scheme_name) with the channel count of a
 * per-channel scheme appended, "int8/ch128", so a reviewer sees an axis of
 * length 1 at once; channels 0 leaves it out.  Every report of a quant
 * scheme goes through this. */
void npuc__quant_scheme_ch(const npuc_quant_params *p, uint64_t channels, char *buf, size_t n);
void npuc__codec_scheme_fake_quant(const json_t *e, char *buf, size_t n, int *bits);
void npuc__codec_scheme_nm_sparse(const json_t *e, char *buf, size_t n, int *bits);
void npuc__codec_noise_quant(npuc_ctx *ctx, npuc_model *m, const json_t *entry, const npuc_tensor_info *orig,
                             const float *w, double *noise, uint64_t *clipped);

#endif
