/*
 * recipe_files.c - the files a recipe run writes besides its artifact: the
 * run's anchor, its step files, the final move into place, and sweeping what
 * runs killed without cleanup left.
 *
 * Names.  A run first opens an atomic file for its output
 * (npuc_atomic_file_open, tempfiles.c), ".<out>.npuc-<pid>-<random>.tmp":
 * this empty file is the run's anchor, created with O_EXCL and flock-held by
 * the run for its whole life.  Step k writes "<anchor>.s<k>" (the writer
 * goes through its own temporary file and rename, so its temp is
 * "..<out>.npuc-<pid>-<random>.tmp.s<k>.npuc-<pid>-<random>.tmp").  Two runs
 * writing the same output, or outputs in the same folder, so never share a
 * step file: the pid and 64 random bits of the anchor are in every name.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipeline/recipe_internal.h"

/* ------------------------------------------------------------ one run's files */

npuc_status npuc__run_files_open(npuc_ctx *ctx, const char *out, size_t nsteps, int overwrite, npuc__run_files *f) {
    memset(f, 0, sizeof *f);
    npuc_status st = npuc_atomic_file_open(ctx, out, overwrite, &f->anchor);
    if (st != NPUC_OK) return st;
    npuc__step_files_sweep(out, NULL); /* dead runs' step files; ours has none yet */
    const char *a = npuc_atomic_file_temp(f->anchor);
    f->paths = calloc(nsteps ? nsteps : 1, sizeof *f->paths);
    f->n = nsteps;
    if (!f->paths) goto nomem;
    for (size_t k = 0; k < nsteps; k++) {
        size_t n = strlen(a) + 32;
        if (!(f->paths[k] = malloc(n))) goto nomem;
        snprintf(f->paths[k], n, "%s.s%zu", a, k + 1);
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
        unlink(f->paths[k]);
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

/* The length of the anchor name that name (a step file, or a step file's
 * writer temp: one more leading '.') starts with, after skip leading bytes:
 * ".<x>.npuc-<digits>-<16 hex>.tmp" followed by ".s<digits>".  0 when name
 * is not a step file's. */
static size_t anchor_len(const char *name, size_t *skip) {
    *skip = (name[0] == '.' && name[1] == '.') ? 1 : 0;
    const char *a = name + *skip;
    for (const char *t = strstr(a + 1, ".npuc-"); t; t = strstr(t + 1, ".npuc-")) {
        const char *p = t + 6;
        if (!isdigit((unsigned char)*p)) continue;
        while (isdigit((unsigned char)*p)) p++;
        if (*p++ != '-') continue;
        int h = 0;
        while (h < 16 && isxdigit((unsigned char)p[h])) h++;
        if (h != 16) continue;
        p += 16;
        if (strncmp(p, ".tmp.s", 6) != 0 || !isdigit((unsigned char)p[6])) continue;
        return (size_t)(p + 4 - a);
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
    free(dir);
    if (!d) return 0;
    struct dirent *e;
    char anchor[NAME_MAX + 1];
    while ((e = readdir(d)) != NULL) {
        size_t skip, n = anchor_len(e->d_name, &skip);
        if (!n || n > NAME_MAX) continue;
        memcpy(anchor, e->d_name + skip, n);
        anchor[n] = 0;
        if (!anchor_dead(dirfd(d), anchor)) continue;
        if (unlinkat(dirfd(d), e->d_name, 0) == 0) removed++;
        else if (errno != ENOENT && err && !*err) *err = errno;
    }
    closedir(d);
    return removed;
}
