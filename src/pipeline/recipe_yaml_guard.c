/*
 * recipe_yaml_guard.c - what a recipe's YAML may cost before libfyaml sees
 * it or resolves it.
 *
 * Recipes come from users and from other people's repositories, so they are
 * hostile input like any weight file (docs/security.md).  libfyaml loops
 * forever on some invalid UTF-8 (a 4-byte "%! \xff" directive), and resolving
 * aliases expands them in full (542 bytes of nested aliases became 5.8 GB).
 * So the text must be UTF-8 before it is parsed, and the document is built
 * unresolved, measured with aliases counted as the nodes they stand for
 * (stopping as soon as the count passes the cap, so measuring costs at most
 * the cap), and only then resolved.  Anchors and aliases that stay within the
 * caps keep working.
 */
#include <libfyaml.h>
#include <string.h>

#include "pipeline/recipe_internal.h"

#define RECIPE_MAX_NODES 100000u /* nodes after alias expansion */
#define RECIPE_MAX_DEPTH 64u     /* nesting, aliases included */

typedef struct measure {
    size_t nodes;
    int over; /* 1: too many nodes, 2: too deep, 3: an alias without its anchor */
} measure;

static void walk(measure *ms, struct fy_node *n, unsigned depth) {
    if (ms->over) return;
    if (depth > RECIPE_MAX_DEPTH) { ms->over = 2; return; }
    if (++ms->nodes > RECIPE_MAX_NODES) { ms->over = 1; return; }
    if (!n) return;
    if (fy_node_is_alias(n)) {
        struct fy_node *target = fy_node_resolve_alias(n);
        if (!target) { ms->over = 3; return; }
        walk(ms, target, depth + 1);
        return;
    }
    void *it = NULL;
    if (fy_node_is_sequence(n)) {
        struct fy_node *c;
        while (!ms->over && (c = fy_node_sequence_iterate(n, &it)) != NULL) walk(ms, c, depth + 1);
    } else if (fy_node_is_mapping(n)) {
        struct fy_node_pair *p;
        while (!ms->over && (p = fy_node_mapping_iterate(n, &it)) != NULL) {
            walk(ms, fy_node_pair_key(p), depth + 1);
            walk(ms, fy_node_pair_value(p), depth + 1);
        }
    }
}

npuc_status npuc__recipe_text_check(npuc_ctx *ctx, const char *name, const char *text, size_t len) {
    if (memchr(text, 0, len))
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: not a YAML text file (it holds NUL bytes)", name);
    if (!npuc__utf8_valid(text, len))
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: not a YAML text file (it is not valid UTF-8)", name);
    return NPUC_OK;
}

npuc_status npuc__recipe_yaml_check(npuc_ctx *ctx, const char *name, struct fy_document *doc) {
    measure ms = {0, 0};
    walk(&ms, fy_document_root(doc), 0);
    switch (ms.over) {
    case 1:
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: the recipe expands to more than %u YAML nodes (aliases included)",
                         name, RECIPE_MAX_NODES);
    case 2:
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: the recipe nests deeper than %u levels (aliases included)", name,
                         RECIPE_MAX_DEPTH);
    case 3:
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: YAML alias without a matching anchor", name);
    default:
        break;
    }
    if (fy_document_resolve(doc) != 0)
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: YAML: the anchors and aliases cannot be resolved", name);
    return NPUC_OK;
}
