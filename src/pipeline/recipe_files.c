/*
 * recipe_files.c - the files a recipe run writes besides its artifact: the
 * run's anchor, its step files, the final move into place, and sweeping what
 * runs killed without cleanup left.
 *
 * Names.  A run first opens an atomic file for its output
 * (npuc_atomic_file_open, tempfiles.c), ".<out>.npuc-<pid>-<random>.tmp":
 * this empty file is the run's anchor, created with O_EXCL and flock-held by
 * the run for its whole life.  Step k writes ".<out>.npucstep-<pid>-<random>
 * .s<k>.tmp" with the anchor's pid and random part (the writer goes through
 * its own temporary file and rename, "..<out>.npucstep-...s<k>.tmp.npuc-
 * <pid>-<random>.tmp").  Two runs writing the same output, or outputs in the
 * same folder, so never share a step file.  "npucstep-" is not the
 * temporary-file pattern of tempfiles.c, whose stale-file cleanup would take
 * an unlocked step file of a live run for a dead run's file; the names still
 * end in ".tmp", as every temporary file of npuc does.
 *
 * Liveness.  The step files carry no lock of their own (a published step
 * file is closed); they live exactly as long as their anchor's lock is held:
 * a run creates its anchor (locked) before any step file and removes its
 * step files before its anchor.  So a step file whose anchor is gone, or
 * whose anchor's lock anyone can take, belongs to a dead run (SIGKILL, power
 * loss) and npuc__step_files_sweep removes it; nothing else is ever removed.
 * SIGINT/SIGTERM/SIGHUP never get that far: the step paths are registered
 * with the signal cleanup (npuc__tempfiles_track) like every temporary file.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipeline/recipe_internal.h"

#define TEMP_TAG ".npuc-"     /* tempfiles.c's pattern: ".<out>.npuc-<pid>-<random>.tmp" */
#define STEP_TAG ".npucstep-" /* a step file: ".<out>.npucstep-<pid>-<random>.s<k>.tmp" */

/* ------------------------------------------------------------ one run's files */

npuc_status npuc__run_files_open(npuc_ctx *ctx, const char *out, size_t nsteps, int overwrite, int out_dir,
                                 npuc__run_files *f) {
    memset(f, 0, sizeof *f);
    /* A directory output's path is judged by its format (move_dir). */
    npuc_status st = out_dir ? npuc__atomic_file_open_anchor(ctx, out, &f->anchor)
                             : npuc_atomic_file_open(ctx, out, overwrite, &f->anchor);
    if (st != NPUC_OK) return st;
    npuc__step_files_sweep(out, NULL); /* dead runs' step files; ours has none yet */
    /* ".../.<x>.npuc-<id>.tmp" -> ".../.<x>.npucstep-<id>.s<k>.tmp" */
    const char *a = npuc_atomic_file_temp(f->anchor), *tag = strstr(a, TEMP_TAG), *t;
    while (tag && (t = strstr(tag + 1, TEMP_TAG))) tag = t;
    size_t al = strlen(a);
    if (!tag || al < 4 || strcmp(a + al - 4, ".tmp") != 0) {
        npuc__run_files_close(f);
        return npuc_fail(ctx, NPUC_ERR_INTERNAL, "%s: unexpected temporary name %s", out, a);
    }
    const size_t pre = (size_t)(tag - a), id = al - 4 - pre - strlen(TEMP_TAG);
    f->paths = calloc(nsteps ? nsteps : 1, sizeof *f->paths);
    f->n = nsteps;
    if (!f->paths) goto nomem;
    for (size_t k = 0; k < nsteps; k++) {
        size_t n = al + 48;
        if (!(f->paths[k] = malloc(n))) goto nomem;
        snprintf(f->paths[k], n, "%.*s" STEP_TAG "%.*s.s%zu.tmp", (int)pre, a, (int)id, tag + strlen(TEMP_TAG), k + 1);
        npuc__tempfiles_track(f->paths[k]); /* removed by the CLI's signal handler */
    }
    return NPUC_OK;
nomem:
    npuc__run_files_close(f);
    return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
}

void npuc__run_files_close(npuc__run_files *f) {
    /* Step files first, the anchor (and with it the lock) last: see Liveness. */
    for (size_t k = 0; f->paths && k < f->n; k++) {
        if (!f->paths[k]) continue;
        if (unlink(f->paths[k]) != 0 && errno == EISDIR) npuc__remove_dir1(f->paths[k]); /* a checkpoint step */
        npuc__tempfiles_untrack(f->paths[k]);
        free(f->paths[k]);
    }
    free(f->paths);
    npuc_atomic_file_abort(f->anchor);
    memset(f, 0, sizeof *f);
}

static void fsync_dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, (size_t)(slash - path) + (slash == path)) : strdup(".");
    if (!dir) return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

npuc_status npuc__run_commit(npuc_ctx *ctx, const char *tmp, const char *out, int overwrite) {
    if (!overwrite) {
        /* link() fails on an existing name, so an output that appeared
         * meanwhile (another run's) is never clobbered without -f. */
        if (link(tmp, out) != 0) {
            int e = errno;
            if (e == EEXIST) return npuc_fail(ctx, NPUC_ERR_EXISTS, "%s: output exists (use -f to overwrite)", out);
            /* Filesystems without hard links: a plain rename. */
            if (rename(tmp, out) != 0) return npuc_fail(ctx, NPUC_ERR_IO, "%s: %s", out, strerror(errno));
        } else {
            unlink(tmp);
        }
    } else if (rename(tmp, out) != 0) {
        return npuc_fail(ctx, NPUC_ERR_IO, "%s: rename: %s", out, strerror(errno));
    }
    fsync_dir_of(out);
    return NPUC_OK;
}

/* ------------------------------------------------------------ sweeping */

/* When name is a step file (or a step file's writer temp: one more leading
 * '.'), writes the name of its run's anchor to anchor (cap bytes) and
 * returns 1; else 0.  Step file: ".<x>.npucstep-<digits>-<16 hex>.s<digits>
 * .tmp..."; anchor: ".<x>.npuc-<digits>-<16 hex>.tmp". */
static int anchor_of(const char *name, char *anchor, size_t cap) {
    const char *a = (name[0] == '.' && name[1] == '.') ? name + 1 : name;
    for (const char *t = strstr(a + 1, STEP_TAG); t; t = strstr(t + 1, STEP_TAG)) {
        const char *id = t + strlen(STEP_TAG), *p = id;
        if (!isdigit((unsigned char)*p)) continue;
        while (isdigit((unsigned char)*p)) p++;
        if (*p++ != '-') continue;
        int h = 0;
        while (h < 16 && isxdigit((unsigned char)p[h])) h++;
        if (h != 16) continue;
        p += 16;
        if (strncmp(p, ".s", 2) != 0 || !isdigit((unsigned char)p[2])) continue;
        int n = snprintf(anchor, cap, "%.*s" TEMP_TAG "%.*s.tmp", (int)(t - a), a, (int)(p - id), id);
        return n > 0 && (size_t)n < cap;
    }
    return 0;
}

/* 1 when anchor (in dirfd) is gone or unlocked: its run is dead. */
static int anchor_dead(int dirfd, const char *anchor) {
    int fd = openat(dirfd, anchor, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT;
    int dead = flock(fd, LOCK_EX | LOCK_NB) == 0;
    close(fd); /* releases a lock we took */
    return dead;
}

size_t npuc__step_files_sweep(const char *out, int *err) {
    const char *slash = strrchr(out, '/');
    char *dir = slash ? strndup(out, slash == out ? 1 : (size_t)(slash - out)) : strdup(".");
    size_t removed = 0;
    if (err) *err = 0;
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d) {
        free(dir);
        return 0;
    }
    struct dirent *e;
    char anchor[NAME_MAX + 1], sub[PATH_MAX];
    while ((e = readdir(d)) != NULL) {
        if (!anchor_of(e->d_name, anchor, sizeof anchor) || !anchor_dead(dirfd(d), anchor)) continue;
        int r = unlinkat(dirfd(d), e->d_name, 0);
        /* A checkpoint output's step (or its writer's temporary directory). */
        if (r != 0 && errno == EISDIR && (size_t)snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name) < sizeof sub)
            r = npuc__remove_dir1(sub);
        if (r == 0) removed++;
        else if (errno != ENOENT && err && !*err) *err = errno;
    }
    closedir(d);
    free(dir);
    return removed;
}
