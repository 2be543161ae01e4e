/*
 * batch_list.c - the work list of `npuc batch`: the weight files under a
 * folder (recursively; a sharded checkpoint folder is one entry) or named
 * in a list file, sorted by the relative path
 * their outputs mirror, and a deterministic 1/N of it for --shard.
 *
 * Sorting is bytewise on the relative path, so the list (and so each
 * shard) is the same on every machine whatever the locale or the order the
 * file system returns entries in.  Sharding takes every N-th entry of that
 * list (index mod N): shards differ in size by at most one file, and N
 * machines that see the same tree split it without talking to each other.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pipeline/recipe_internal.h"

static int push(npuc_batch_list *l, size_t *cap, const char *path, const char *rel) {
    if (l->n == *cap) {
        size_t nc = *cap ? 2 * *cap : 64;
        char **p = realloc(l->path, nc * sizeof *p);
        if (!p) return -1;
        l->path = p;
        char **r = realloc(l->rel, nc * sizeof *r);
        if (!r) return -1;
        l->rel = r;
        *cap = nc;
    }
    char *a = npuc__strdup(path), *b = npuc__strdup(rel);
    if (!a || !b) {
        free(a);
        free(b);
        return -1;
    }
    l->path[l->n] = a;
    l->rel[l->n] = b;
    l->n++;
    return 0;
}

void npuc_batch_list_free(npuc_batch_list *l) {
    if (!l) return;
    for (size_t i = 0; i < l->n; i++) {
        free(l->path[i]);
        free(l->rel[i]);
    }
    free(l->path);
    free(l->rel);
    memset(l, 0, sizeof *l);
}

/* Compares (rel, path) pairs by rel. */
static int cmp_rel(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorts both arrays by rel (an index sort keeps them paired). */
static int sort_list(npuc_batch_list *l) {
    size_t n = l->n;
    if (n < 2) return 0;
    char **pair = malloc(2 * n * sizeof *pair);
    if (!pair) return -1;
    for (size_t i = 0; i < n; i++) {
        pair[2 * i] = l->rel[i];
        pair[2 * i + 1] = l->path[i];
    }
    qsort(pair, n, 2 * sizeof *pair, cmp_rel);
    for (size_t i = 0; i < n; i++) {
        l->rel[i] = pair[2 * i];
        l->path[i] = pair[2 * i + 1];
    }
    free(pair);
    return 0;
}

/* 1 when dir is a sharded checkpoint (holds a *.safetensors.index.json):
 * one model, listed as the folder and not walked into (docs/checkpoints.md).
 * A folder holding only model.safetensors stays a folder of one file. */
static int is_checkpoint_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        found = e->d_name[0] != '.' && n > 23 && strcmp(e->d_name + n - 23, ".safetensors.index.json") == 0;
    }
    closedir(d);
    return found;
}

static int is_weight_file(const char *name) {
    return npuc_format_from_path(name) != NPUC_FORMAT_AUTO;
}

typedef struct walk {
    npuc_ctx *ctx;
    npuc_batch_list *l;
    size_t cap;
    dev_t skip_dev;
    ino_t skip_ino;
    int have_skip;
} walk;

static npuc_status walk_dir(walk *w, const char *dir, const char *rel, int depth) {
    if (depth > 64) return npuc_fail(w->ctx, NPUC_ERR_ARG, "%s: folders nested deeper than 64 levels", dir);
    DIR *d = opendir(dir);
    if (!d)
        return npuc_fail(w->ctx, errno == ENOENT ? NPUC_ERR_NOT_FOUND : NPUC_ERR_IO, "%s: %s", dir, strerror(errno));
    npuc_status st = NPUC_OK;
    struct dirent *e;
    while (st == NPUC_OK && (e = readdir(d))) {
        const char *nm = e->d_name;
        if (!strcmp(nm, ".") || !strcmp(nm, "..")) continue;
        size_t pl = strlen(dir) + strlen(nm) + 2, rl = strlen(rel) + strlen(nm) + 2;
        char *p = malloc(pl), *r = malloc(rl);
        if (!p || !r) {
            free(p);
            free(r);
            st = npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
            break;
        }
        snprintf(p, pl, "%s/%s", dir, nm);
        snprintf(r, rl, "%s%s%s", rel, *rel ? "/" : "", nm);
        struct stat sb, lsb;
        if (lstat(p, &lsb) == 0 && stat(p, &sb) == 0) {
            if (S_ISDIR(lsb.st_mode)) {
                if (w->have_skip && sb.st_dev == w->skip_dev && sb.st_ino == w->skip_ino) {
                    /* the output folder */
                } else if (is_checkpoint_dir(p)) {
                    if (push(w->l, &w->cap, p, r)) st = npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
                } else {
                    st = walk_dir(w, p, r, depth + 1);
                }
            } else if (S_ISREG(sb.st_mode) && is_weight_file(nm)) {
                if (push(w->l, &w->cap, p, r)) st = npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
            }
        }
        free(p);
        free(r);
    }
    closedir(d);
    return st;
}

npuc_status npuc_batch_list_dir(npuc_ctx *ctx, const char *dir, const char *skip, npuc_batch_list *l) {
    memset(l, 0, sizeof *l);
    walk w;
    memset(&w, 0, sizeof w);
    w.ctx = ctx;
    w.l = l;
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return npuc_fail(ctx, errno == ENOENT ? NPUC_ERR_NOT_FOUND : NPUC_ERR_IO, "%s: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return npuc_fail(ctx, NPUC_ERR_ARG, "%s: not a folder", dir);
    if (skip && stat(skip, &sb) == 0) {
        w.have_skip = 1;
        w.skip_dev = sb.st_dev;
        w.skip_ino = sb.st_ino;
    }
    size_t dl = strlen(dir);
    char *d = npuc__strdup(dir);
    if (!d) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    while (dl > 1 && d[dl - 1] == '/') d[--dl] = 0;
    npuc_status st = walk_dir(&w, d, "", 0);
    free(d);
    if (st == NPUC_OK && sort_list(l)) st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    if (st != NPUC_OK) npuc_batch_list_free(l);
    return st;
}

#define BATCH_LINE_MAX 4096 /* bytes of one line of a list file (PATH_MAX) */

/* Reads one line (without its '\n') into buf, which holds BATCH_LINE_MAX + 1
 * bytes, NUL-terminated; *len is its length, BATCH_LINE_MAX + 1 when longer
 * (the rest of the line is not read).  -1 at the end of the file or on a
 * read error (ferror tells). */
static int read_line(FILE *f, char *buf, size_t *len) {
    size_t n = 0;
    int c;
    while ((c = getc(f)) != EOF && c != '\n') {
        if (n > BATCH_LINE_MAX) break; /* one byte past the limit is enough to know */
        buf[n++] = (char)c;
    }
    if (c == EOF && n == 0) return -1;
    buf[n < BATCH_LINE_MAX + 1 ? n : BATCH_LINE_MAX] = 0;
    *len = n;
    return 0;
}

npuc_status npuc_batch_list_file(npuc_ctx *ctx, const char *listfile, npuc_batch_list *l) {
    memset(l, 0, sizeof *l);
    FILE *f = fopen(listfile, "r");
    if (!f)
        return npuc_fail(ctx, errno == ENOENT ? NPUC_ERR_NOT_FOUND : NPUC_ERR_IO, "%s: %s", listfile, strerror(errno));
    size_t cap = 0, lineno = 0;
    /* A line is one path: a fixed buffer, so a list without newlines (a
     * binary file, /dev/zero) costs BATCH_LINE_MAX bytes, not the file. */
    char *line = malloc(BATCH_LINE_MAX + 1);
    npuc_status st = line ? NPUC_OK : npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    size_t len;
    while (st == NPUC_OK && read_line(f, line, &len) == 0) {
        lineno++;
        if (len > BATCH_LINE_MAX) {
            st = npuc_fail(ctx, NPUC_ERR_ARG, "%s:%zu: line longer than %d bytes: not a list of paths", listfile, lineno,
                           BATCH_LINE_MAX);
            break;
        }
        while (len > 0 && line[len - 1] == '\r') line[--len] = 0;
        if (memchr(line, 0, (size_t)len)) {
            st = npuc_fail(ctx, NPUC_ERR_ARG, "%s:%zu: a NUL byte in the path", listfile, lineno);
            break;
        }
        char *s = line;
        while (*s == ' ' || *s == '\t') s++;
        size_t sl = strlen(s);
        while (sl > 0 && (s[sl - 1] == ' ' || s[sl - 1] == '\t')) s[--sl] = 0;
        if (!*s || *s == '#') continue;
        const char *rel = s;
        for (;;) {
            if (rel[0] == '/') rel++;
            else if (rel[0] == '.' && rel[1] == '/') rel += 2;
            else break;
        }
        int dotdot = 0;
        for (const char *c = rel; *c;) {
            const char *e = strchr(c, '/');
            size_t cl = e ? (size_t)(e - c) : strlen(c);
            if (cl == 2 && c[0] == '.' && c[1] == '.') dotdot = 1;
            c += cl + (e != NULL);
        }
        if (!*rel || dotdot) {
            st = npuc_fail(ctx, NPUC_ERR_ARG, "%s:%zu: '%s': the output would leave the output folder (a '..' "
                           "component or no file name)", listfile, lineno, s);
            break;
        }
        if (!is_weight_file(rel)) {
            st = npuc_fail(ctx, NPUC_ERR_ARG, "%s:%zu: '%s': not a weight file name (.safetensors, .h5, .hdf5, "
                           ".keras)", listfile, lineno, s);
            break;
        }
        if (push(l, &cap, s, rel)) st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    if (st == NPUC_OK && ferror(f)) st = npuc_fail(ctx, NPUC_ERR_IO, "%s: read error: %s", listfile, strerror(errno));
    free(line);
    fclose(f);
    if (st == NPUC_OK && sort_list(l)) st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    for (size_t i = 1; st == NPUC_OK && i < l->n; i++)
        if (strcmp(l->rel[i - 1], l->rel[i]) == 0)
            st = npuc_fail(ctx, NPUC_ERR_ARG, "%s: '%s' is listed twice (or two paths map to it)", listfile, l->rel[i]);
    if (st != NPUC_OK) npuc_batch_list_free(l);
    return st;
}

void npuc_batch_list_shard(npuc_batch_list *l, size_t index, size_t count) {
    if (count <= 1) return;
    size_t k = 0;
    for (size_t i = 0; i < l->n; i++) {
        if (i % count == index) {
            l->path[k] = l->path[i];
            l->rel[k] = l->rel[i];
            k++;
        } else {
            free(l->path[i]);
            free(l->rel[i]);
        }
    }
    l->n = k;
}
