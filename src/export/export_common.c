/*
 * export_common.c - the grids list and the atomic text write the exporters
 * share (export_internal.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "export_internal.h"

void npuc__grids_free(npuc__grids *g) {
    if (!g) return;
    for (size_t i = 0; i < g->n; i++) {
        free(g->v[i].name);
        free(g->v[i].scale);
        free(g->v[i].zp);
    }
    free(g->v);
    g->v = NULL;
    g->n = 0;
}

npuc__grid *npuc__grids_add(npuc_ctx *ctx, npuc__grids *g, const char *name, uint64_t n) {
    if (n == 0 || n > ((uint64_t)1 << 40)) {
        npuc_fail(ctx, NPUC_ERR_FORMAT, "tensor '%s': %llu encodings", name, (unsigned long long)n);
        return NULL;
    }
    npuc__grid *v = realloc(g->v, (g->n + 1) * sizeof *v);
    if (!v) goto nomem;
    g->v = v;
    npuc__grid *e = &v[g->n];
    memset(e, 0, sizeof *e);
    e->name = strdup(name);
    e->n = n;
    e->scale = malloc((size_t)n * sizeof *e->scale);
    e->zp = calloc((size_t)n, sizeof *e->zp);
    g->n++;
    if (!e->name || !e->scale || !e->zp) goto nomem;
    return e;
nomem:
    npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    return NULL;
}

npuc_status npuc__export_write(npuc_ctx *ctx, const char *path, int overwrite, const char *text, size_t n) {
    npuc_atomic_file *f;
    npuc_status st = npuc_atomic_file_open(ctx, path, overwrite, &f);
    if (st != NPUC_OK) return st;
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(npuc_atomic_file_fd(f), text + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = errno;
            npuc_atomic_file_abort(f);
            return npuc_fail(ctx, NPUC_ERR_IO, "%s: write failed: %s", path, strerror(e));
        }
        off += (size_t)w;
    }
    return npuc_atomic_file_commit(f);
}
