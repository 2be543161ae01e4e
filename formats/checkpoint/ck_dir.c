/*
 * ck_dir.c - a checkpoint output directory published as a whole.
 *
 * The directory is built as ".<base>.npuc-<pid>-<random>.tmpdir" beside the
 * destination (the pattern of tempfiles.c's temporary files, with .tmpdir)
 * and moved into place by one rename(2), so a reader sees either no output
 * or the complete one.  The run holds an exclusive flock on the directory
 * while it builds it; a temporary directory whose lock anyone can take
 * belongs to a run that was killed and is removed (its regular files, then
 * itself) by the next run writing the same destination.  The directory and
 * each file in it are registered with tempfiles.c, whose signal cleanup
 * unlinks files before it removes directories.
 *
 * Without overwrite, publishing is renameat2(RENAME_NOREPLACE): an output
 * that appeared meanwhile is never replaced.  With overwrite (-f) an existing
 * destination directory is exchanged with the new one (RENAME_EXCHANGE, one
 * atomic step) and then removed, but only when it holds nothing but regular
 * files and is empty or a checkpoint (a *.safetensors or *.index.json in
 * it): -f replaces an earlier output, it never deletes a folder of other
 * things.  A destination that is a file is replaced only by a file output.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ck_format.h"

struct npuc__ck_tmpdir {
    npuc_ctx *ctx;
    char *dest, *tmp;
    int dfd; /* holds the flock */
    int overwrite;
    char **files; /* full paths registered with tempfiles.c */
    size_t nfiles;
};

/* 1 when -f may replace dir: only regular files, and empty or a checkpoint. */
static int replaceable(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int ok = 1, n = 0, ckpt = 0;
    struct dirent *e;
    while (ok && (e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        struct stat sb;
        ok = fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode);
        size_t l = strlen(e->d_name);
        ckpt |= (l > 12 && !strcmp(e->d_name + l - 12, ".safetensors")) || (l > 11 && !strcmp(e->d_name + l - 11, ".index.json"));
        n++;
    }
    closedir(d);
    return ok && (n == 0 || ckpt);
}

static void split(const char *dest, char *dir, size_t cap, const char **base) {
    const char *slash = strrchr(dest, '/');
    *base = slash ? slash + 1 : dest;
    if (!slash) snprintf(dir, cap, ".");
    else snprintf(dir, cap, "%.*s", slash == dest ? 1 : (int)(slash - dest), dest);
}

/* Removes the unlocked temporary directories of dest that killed runs left. */
static void sweep(const char *dir, const char *base) {
    char prefix[200];
    snprintf(prefix, sizeof prefix, ".%.160s.npuc-", base);
    size_t np = strlen(prefix);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n <= np + 7 || memcmp(e->d_name, prefix, np) || strcmp(e->d_name + n - 7, ".tmpdir")) continue;
        int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) continue;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            char p[PATH_MAX];
            if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, e->d_name) < sizeof p) npuc__remove_dir1(p);
        }
        close(fd);
    }
    closedir(d);
}

npuc_status npuc__ck_tmpdir_open(npuc_ctx *ctx, const char *dest, int overwrite, npuc__ck_tmpdir **out) {
    *out = NULL;
    size_t dl = strlen(dest);
    while (dl > 1 && dest[dl - 1] == '/') dl--;
    char *d0 = strndup(dest, dl);
    if (!d0) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    npuc_status st = npuc__ck_dir_move(ctx, NULL, d0, overwrite);
    if (st != NPUC_OK) { free(d0); return st; }
    char dir[PATH_MAX];
    const char *base;
    split(d0, dir, sizeof dir, &base);
    sweep(dir, base);
    npuc__ck_tmpdir *d = calloc(1, sizeof *d);
    char *tmp = malloc(strlen(dir) + 256);
    if (!d || !tmp) { free(d); free(tmp); free(d0); return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); }
    for (int tries = 0;; tries++) {
        uint64_t r = 0;
        if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) r = (uint64_t)tries * 0x9e3779b97f4a7c15u;
        sprintf(tmp, "%s/.%.160s.npuc-%ld-%016llx.tmpdir", dir, base, (long)getpid(), (unsigned long long)r);
        if (mkdir(tmp, 0755) == 0) break;
        if (errno != EEXIST || tries > 100) {
            st = npuc_fail(ctx, NPUC_ERR_IO, "%s: cannot create a temporary directory in %s: %s", d0, dir, strerror(errno));
            free(d); free(tmp); free(d0);
            return st;
        }
    }
    d->ctx = ctx;
    d->dest = d0;
    d->tmp = tmp;
    d->overwrite = overwrite;
    npuc__tempfiles_track(tmp);
    d->dfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d->dfd < 0 || flock(d->dfd, LOCK_EX | LOCK_NB) != 0) {
        st = npuc_fail(ctx, NPUC_ERR_IO, "%s: cannot lock %s: %s", d0, tmp, strerror(errno));
        npuc__ck_tmpdir_abort(d);
        return st;
    }
    *out = d;
    return NPUC_OK;
}

const char *npuc__ck_tmpdir_path(const npuc__ck_tmpdir *d) { return d->tmp; }

npuc_status npuc__ck_tmpdir_create(npuc__ck_tmpdir *d, const char *name, int *fd) {
    *fd = -1;
    size_t cap = strlen(d->tmp) + strlen(name) + 2;
    char *p = malloc(cap);
    char **f = realloc(d->files, (d->nfiles + 1) * sizeof *f);
    if (f) d->files = f;
    if (!p || !f) { free(p); return npuc_fail(d->ctx, NPUC_ERR_NOMEM, "out of memory"); }
    snprintf(p, cap, "%s/%s", d->tmp, name);
    d->files[d->nfiles++] = p;
    npuc__tempfiles_track(p);
    *fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (*fd < 0) return npuc_fail(d->ctx, NPUC_ERR_IO, "%s: cannot create %s: %s", d->dest, p, strerror(errno));
    return NPUC_OK;
}

static void release(npuc__ck_tmpdir *d) {
    for (size_t i = 0; i < d->nfiles; i++) {
        npuc__tempfiles_untrack(d->files[i]);
        free(d->files[i]);
    }
    npuc__tempfiles_untrack(d->tmp);
    if (d->dfd >= 0) close(d->dfd);
    free(d->files);
    free(d->tmp);
    free(d->dest);
    free(d);
}

void npuc__ck_tmpdir_abort(npuc__ck_tmpdir *d) {
    if (!d) return;
    npuc__remove_dir1(d->tmp);
    release(d);
}

static void sync_parent(const char *dest) {
    char dir[PATH_MAX];
    const char *base;
    split(dest, dir, sizeof dir, &base);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) { fsync(fd); close(fd); }
}

/* Moves the complete directory from to dest (see npuc__ck_dir_move); from
 * stays where it was on failure. */
static npuc_status move_into_place(npuc_ctx *ctx, const char *from, const char *dest, int overwrite) {
    if (renameat2(AT_FDCWD, from, AT_FDCWD, dest, RENAME_NOREPLACE) == 0) return NPUC_OK;
    int e = errno;
    if (e == EINVAL || e == ENOSYS || e == ENOTSUP) { /* no RENAME_NOREPLACE here: check, then rename */
        struct stat sb;
        if (stat(dest, &sb) != 0 && rename(from, dest) == 0) return NPUC_OK;
        e = stat(dest, &sb) == 0 ? EEXIST : errno;
    }
    if (e != EEXIST) return npuc_fail(ctx, NPUC_ERR_IO, "%s: rename: %s", dest, strerror(e));
    npuc_status st = npuc__ck_dir_move(ctx, NULL, dest, overwrite);
    if (st != NPUC_OK) return st;
    if (renameat2(AT_FDCWD, from, AT_FDCWD, dest, RENAME_EXCHANGE) != 0)
        return npuc_fail(ctx, NPUC_ERR_IO, "%s: exchanging with the new output: %s", dest, strerror(errno));
    npuc__remove_dir1(from); /* now the old output */
    return NPUC_OK;
}

npuc_status npuc__ck_dir_move(npuc_ctx *ctx, const char *from, const char *dest, int overwrite) {
    if (from) {
        npuc_status st = move_into_place(ctx, from, dest, overwrite);
        if (st == NPUC_OK) sync_parent(dest);
        return st;
    }
    struct stat sb;
    if (lstat(dest, &sb) != 0) return NPUC_OK;
    if (!overwrite) return npuc_fail(ctx, NPUC_ERR_EXISTS, "%s: output exists (use -f to overwrite)", dest);
    if (!S_ISDIR(sb.st_mode))
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: exists and is not a directory; a checkpoint output is a directory", dest);
    if (!replaceable(dest))
        return npuc_fail(ctx, NPUC_ERR_ARG,
                         "%s: -f replaces only an empty directory or a checkpoint of regular files; remove it yourself", dest);
    return NPUC_OK;
}

npuc_status npuc__ck_tmpdir_publish(npuc__ck_tmpdir *d) {
    npuc_status st = NPUC_OK;
    if (fsync(d->dfd) != 0) st = npuc_fail(d->ctx, NPUC_ERR_IO, "%s: fsync: %s", d->dest, strerror(errno));
    else st = move_into_place(d->ctx, d->tmp, d->dest, d->overwrite);
    if (st != NPUC_OK) {
        npuc__ck_tmpdir_abort(d);
        return st;
    }
    sync_parent(d->dest);
    release(d);
    return NPUC_OK;
}
