/*
 * strmap.c - FNV-1a and the string -> index map (strmap.h).
 */
#include "strmap.h"

#include <stdlib.h>
#include <string.h>

#include "npuc_internal.h"


uint64_t npuc__fnv1a64(const char *s) {
    uint64_t h = 14695981039346656037ull; /* 0xcbf29ce484222325 */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

uint32_t npuc__fnv1a32(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* The slot holding key, or the empty slot where it would go. */
static size_t find_slot(char *const *keys, size_t cap, const char *key) {
    size_t i = (size_t)npuc__fnv1a64(key) & (cap - 1);
    while (keys[i] && strcmp(keys[i], key) != 0) i = (i + 1) & (cap - 1);
    return i;
}

int npuc__strmap_get(const npuc__strmap *s, const char *key, size_t *val) {
    if (!s->cap) return 0;
    size_t i = find_slot(s->key, s->cap, key);
    if (!s->key[i]) return 0;
    if (val) *val = s->val[i];
    return 1;
}

int npuc__strmap_put(npuc__strmap *s, const char *key, size_t val) {
    if (2 * (s->n + 1) > s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 64;
        char **nk = calloc(nc, sizeof *nk);
        size_t *nv = calloc(nc, sizeof *nv);
        if (!nk || !nv) { free(nk); free(nv); return -1; }
        for (size_t i = 0; i < s->cap; i++) {
            if (!s->key[i]) continue;
            size_t j = find_slot(nk, nc, s->key[i]);
            nk[j] = s->key[i];
            nv[j] = s->val[i];
        }
        free(s->key);
        free(s->val);
        s->key = nk;
        s->val = nv;
        s->cap = nc;
    }
    size_t i = find_slot(s->key, s->cap, key);
    if (!s->key[i]) {
        if (!(s->key[i] = npuc__strdup(key))) return -1;
        s->n++;
    }
    s->val[i] = val;
    return 0;
}

void npuc__strmap_free(npuc__strmap *s) {
    for (size_t i = 0; i < s->cap; i++) free(s->key[i]);
    free(s->key);
    free(s->val);
    memset(s, 0, sizeof *s);
}
