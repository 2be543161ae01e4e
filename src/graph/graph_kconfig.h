/*
 * graph_kconfig.h - the one reader of a Keras model configuration into the
 * network graph (graph_kconfig.c has the format and the rules).
 */
#ifndef NPUC_GRAPH_KCONFIG_H
#define NPUC_GRAPH_KCONFIG_H

#include "graph/graph_net.h"

#define NPUC_KC_MAX_TEXT ((size_t)16 << 20) /* bytes of JSON (the largest Keras application's is ~3 MiB) */
#define NPUC_KC_MAX_LAYERS 65536            /* layers and layer calls */
#define NPUC_KC_MAX_SCOPE_DEPTH 32          /* models inside models */
#define NPUC_KC_MAX_REFS 4096               /* tensors one call reads */
#define NPUC_KC_MAX_EDGES ((size_t)1 << 22) /* references in all */

/* Parses the configuration text[0..len) into a new graph (*out, the
 * caller's).  label starts every message ("model.h5: model_config").
 * NPUC_ERR_FORMAT with one line for malformed or hostile text: not JSON,
 * a duplicate key, no layer list, a layer listed twice, a reference to a
 * layer or call that does not exist, a layer consuming itself, a cycle,
 * nesting or sizes beyond the limits above; NPUC_ERR_NOMEM. */
npuc_status npuc__kconfig_parse(npuc_ctx *ctx, const char *label, const char *text, size_t len, npuc__ng **out);

/* The layers the configuration declares, without wiring them: names[k]
 * and classes[k] for k < *n (malloc'd arrays of malloc'd strings, the
 * caller's; nested models are listed, then their layers), in list order.
 * This is the layer reading of npuc__kconfig_parse with its refusals
 * (duplicate keys, a layer without name or class, a name listed twice,
 * nesting beyond the limit): NPUC_ERR_FORMAT then, and nothing returned;
 * NPUC_ERR_NOMEM.  Core's layout rules ask it for each layer's class before
 * the model's tensors are known (the graph needs their layouts). */
npuc_status npuc__kconfig_layers(npuc_ctx *ctx, const char *label, const char *text, size_t len, char ***names,
                                 char ***classes, size_t *n);

/* Writes g, an edited copy of the graph npuc__kconfig_parse read from
 * text[0..len), back into that configuration: layers whose nodes g no
 * longer has are dropped and their consumers (and the model outputs) read
 * their input instead (npuc__ng_remove_node's rewiring); a kept layer's
 * filters / units follow its kernel's shape in g and use_bias turns true
 * when its node has a bias.  Everything else keeps its value and order
 * (the jansson tree of the text is edited and dumped).  *out: the new text
 * (malloc'd), NULL when nothing changed.  NPUC_ERR_FORMAT when text is not
 * a configuration the reader accepts; NPUC_ERR_UNSUPPORTED naming the
 * layer when a removal cannot be written (a shared layer, several inputs,
 * across a nested model's boundary); NPUC_ERR_NOMEM. */
npuc_status npuc__kconfig_write(npuc_ctx *ctx, const char *label, const char *text, size_t len, const npuc__ng *g,
                                char **out);

/* The format-neutral op of a Keras class ("Conv2D" -> "Conv"); the class
 * itself when the table does not know it. */
const char *npuc__kconfig_op(const char *cls);

#endif
