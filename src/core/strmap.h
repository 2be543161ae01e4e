/*
 * strmap.h - the library's one string hash (FNV-1a) and one map from
 * strings to indices (library-private).  Before issue 31 item 16 the hash
 * was typed three times (model.c, the HDF5 writer's map, the GGUF writer's
 * name tags) and the map lived inside the HDF5 folder; the two 64-bit
 * copies had lost a digit of the offset basis (1469598103934665603 for
 * 14695981039346656037), harmless for in-memory tables but not FNV-1a.
 */
#ifndef NPUC_STRMAP_H
#define NPUC_STRMAP_H

#include <stddef.h>
#include <stdint.h>

/* FNV-1a over the bytes of s up to its NUL (Fowler, Noll, Vo: offset basis
 * and prime of the 64- and 32-bit variants).  The 32-bit value is part of
 * file names npuc writes (GGUF's shortened tensor names, docs/gguf.md), so
 * it never changes. */
uint64_t npuc__fnv1a64(const char *s);
uint32_t npuc__fnv1a32(const char *s);

/* An open-addressing map from strings (copied) to indices: zero it to
 * start, npuc__strmap_free to end. */
typedef struct npuc__strmap {
    char **key;
    size_t *val;
    size_t cap, n;
} npuc__strmap;

/* 1 and *val (when val is non-NULL) if key is present, else 0. */
int npuc__strmap_get(const npuc__strmap *s, const char *key, size_t *val);
/* Sets key -> val; 0 on success, -1 on allocation failure. */
int npuc__strmap_put(npuc__strmap *s, const char *key, size_t val);
void npuc__strmap_free(npuc__strmap *s);

#endif
