/*
 * tempfiles.c - atomic output files: a private temporary file beside the
 * output, published whole by one rename, and removed by a signal handler.
 *
 * Temporary names follow one pattern, ".<base>.npuc-<pid>-<random>.tmp" in
 * the output's directory (<base> cut to TEMP_BASE_MAX bytes), so a run can
 * recognise the leftovers of earlier runs of the same output.  The file is
 * created with O_EXCL and its creator holds an exclusive flock on it until
 * the file is published or removed: a temporary file whose lock anyone can
 * take belongs to a run that died (SIGKILL, power loss) and is removed by the
 * next run that writes the same output.  The creator checks, once it holds
 * the lock, that its name still names its file, so a cleaner that won the
 * race between create and lock costs a retry, never a lost file.
 *
 * Publishing is rename(2) with overwrite, else renameat2(RENAME_NOREPLACE)
 * (link(2) + unlink(2) where the filesystem lacks it): of two runs racing
 * for the same output without overwrite exactly one wins and the other gets
 * NPUC_ERR_EXISTS; with overwrite the last to publish wins.  Neither can
 * ever see the other's bytes, since each writes its own file.  The file is
 * fsynced before and the directory after the rename.
 *
 * Live temporary paths are also kept in a fixed table that
 * npuc_tempfiles_cleanup() walks with nothing but atomic loads and
 * unlink(2), so a signal handler can remove them.  A slot is written while
 * in state CLAIMED and only becomes LIVE (visible to the handler) once the
 * path is complete; it is freed after the file is gone or published, so a
 * handler that runs in between unlinks a name that no longer exists.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "npuc_internal.h"

#define TEMP_SLOTS 128     /* temporary files one process can have live */
#define TEMP_BASE_MAX 160  /* bytes of the output's name kept in the temp name */
#define TEMP_TAG ".npuc-"
#define TEMP_SUFFIX ".tmp"

enum { SLOT_FREE = 0, SLOT_CLAIMED, SLOT_LIVE };

static atomic_int g_state[TEMP_SLOTS];
static char g_path[TEMP_SLOTS][PATH_MAX];

struct npuc_atomic_file {
    npuc_ctx *ctx;
    char *path, *tmp;
    int fd;        /* holds the flock for the file's whole life */
    int overwrite;
    int slot;      /* index in g_path, -1 when the table was full */
};

static int slot_claim(const char *path) {
    size_t n = strlen(path);
    if (n >= PATH_MAX) return -1;
    for (int i = 0; i < TEMP_SLOTS; i++) {
        int expect = SLOT_FREE;
        if (atomic_compare_exchange_strong(&g_state[i], &expect, SLOT_CLAIMED)) {
            memcpy(g_path[i], path, n + 1);
            atomic_store(&g_state[i], SLOT_LIVE);
            return i;
        }
    }
    return -1; /* full: the file is still cleaned up on errors, not on signals */
}

static void slot_free(int i) {
    if (i >= 0) atomic_store(&g_state[i], SLOT_FREE);
}

int npuc__tempfiles_track(const char *path) { return slot_claim(path); }

void npuc__tempfiles_untrack(const char *path) {
    for (int i = 0; i < TEMP_SLOTS; i++)
        if (atomic_load(&g_state[i]) == SLOT_LIVE && strcmp(g_path[i], path) == 0) {
            slot_free(i);
            return;
        }
}

/* Unlinks the entries directly in directory path with nothing but
 * async-signal-safe calls (open, getdents64, unlinkat, close): a recipe's
 * last step directory is complete, its files no longer tracked, in the
 * span between its writer publishing it and the run moving it into place. */
static void empty_dir_signal_safe(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;
    char buf[4096] __attribute__((aligned(8)));
    long n;
    while ((n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
        for (long off = 0; off < n;) {
            const struct dirent64 *e = (const struct dirent64 *)(buf + off);
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) unlinkat(fd, e->d_name, 0);
            off += e->d_reclen;
        }
    }
    close(fd);
}

void npuc_tempfiles_cleanup(void) {
    for (int i = 0; i < TEMP_SLOTS; i++)
        if (atomic_load(&g_state[i]) == SLOT_LIVE) unlink(g_path[i]);
    /* Then directories (a checkpoint output's, formats/checkpoint/ck_dir.c,
     * or a recipe's step directory), emptied first; rmdir of a file name
     * fails. */
    for (int i = 0; i < TEMP_SLOTS; i++)
        if (atomic_load(&g_state[i]) == SLOT_LIVE) {
            empty_dir_signal_safe(g_path[i]);
            rmdir(g_path[i]);
        }
}

/* The directory part of path ("." when there is none) and the name part. */
static npuc_status split_path(npuc_ctx *ctx, const char *path, char **dir, const char **base) {
    const char *slash = strrchr(path, '/');
    *base = slash ? slash + 1 : path;
    size_t n = slash ? (size_t)(slash - path) : 1;
    if (slash && n == 0) n = 1; /* "/name" */
    *dir = malloc(n + 1);
    if (!*dir) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    memcpy(*dir, slash ? path : ".", n);
    (*dir)[n] = 0;
    if (!**base) {
        free(*dir);
        *dir = NULL;
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: names a directory, not a file", path);
    }
    return NPUC_OK;
}

/* ".<base>.npuc-" with base cut to TEMP_BASE_MAX bytes: what every temp
 * name of this output starts with. */
static void temp_prefix(const char *base, char *buf, size_t cap) {
    snprintf(buf, cap, ".%.*s" TEMP_TAG, TEMP_BASE_MAX, base);
}

/* Removes name (in dirfd) when it is a regular file nobody holds a lock on
 * and, once we hold that lock, still names the file we locked.  Never blocks. */
static void remove_if_stale(int dirfd, const char *name) {
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return;
    struct stat a, b;
    if (fstat(fd, &a) == 0 && S_ISREG(a.st_mode) && flock(fd, LOCK_EX | LOCK_NB) == 0 &&
        fstatat(dirfd, name, &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        unlinkat(dirfd, name, 0);
    close(fd); /* releases the lock */
}

/* Removes the temporary files of dir/base that runs killed without cleanup
 * left behind: the name pattern and a lock nobody holds. */
static void remove_stale(const char *dir, const char *base) {
    char prefix[TEMP_BASE_MAX + 16];
    temp_prefix(base, prefix, sizeof prefix);
    size_t np = strlen(prefix), ns = strlen(TEMP_SUFFIX);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n > np + ns && memcmp(e->d_name, prefix, np) == 0 && strcmp(e->d_name + n - ns, TEMP_SUFFIX) == 0)
            remove_if_stale(dirfd(d), e->d_name);
    }
    closedir(d);
}

npuc_status npuc__tempfiles_sweep(npuc_ctx *ctx, const char *path) {
    char *dir;
    const char *base;
    npuc_status st = split_path(ctx, path, &dir, &base);
    if (st != NPUC_OK) return st;
    remove_stale(dir, base);
    free(dir);
    return NPUC_OK;
}

static uint64_t random64(void) {
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        static atomic_ulong counter;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        r = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15u ^ (uint64_t)ts.tv_sec ^
            (uint64_t)atomic_fetch_add(&counter, 1) << 32;
    }
    return r;
}

/* check: refuse an existing path (a directory always, a file without
 * overwrite); 0 for an anchor, whose path the caller checks. */
static npuc_status open_temp(npuc_ctx *ctx, const char *path, int overwrite, int check, npuc_atomic_file **out) {
    *out = NULL;
    if (!path || !*path) return npuc_fail(ctx, NPUC_ERR_ARG, "no output file given");
    char *dir = NULL;
    const char *base;
    npuc_status st = split_path(ctx, path, &dir, &base);
    if (st != NPUC_OK) return st;
    struct stat sb;
    if (check && stat(path, &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) st = npuc_fail(ctx, NPUC_ERR_ARG, "%s: is a directory (the output must be a file name)", path);
        else if (!overwrite) st = npuc_fail(ctx, NPUC_ERR_EXISTS, "%s: output exists (use -f to overwrite)", path);
        if (st != NPUC_OK) { free(dir); return st; }
    }
    remove_stale(dir, base);
    npuc_atomic_file *f = calloc(1, sizeof *f);
    size_t cap = strlen(dir) + TEMP_BASE_MAX + 64;
    char *tmp = malloc(cap);
    char *p = npuc__strdup(path);
    if (!f || !tmp || !p) {
        free(f); free(tmp); free(p); free(dir);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    char prefix[TEMP_BASE_MAX + 16];
    temp_prefix(base, prefix, sizeof prefix);
    int fd = -1, tries = 0, slot = -1;
    for (;;) {
        snprintf(tmp, cap, "%s/%s%ld-%016llx" TEMP_SUFFIX, dir, prefix, (long)getpid(),
                 (unsigned long long)random64());
        /* Registered before it exists, so a signal between the create and
         * the registration cannot leave it behind; the name carries our pid
         * and 64 random bits, so it is no other run's file. */
        slot_free(slot);
        slot = slot_claim(tmp);
        fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0) {
            if (errno == EEXIST && ++tries < 100) continue;
            st = npuc_fail(ctx, NPUC_ERR_IO, "%s: cannot create a temporary file in %s: %s", path, dir,
                           strerror(errno));
            break;
        }
        struct stat a, b;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &a) == 0 && stat(tmp, &b) == 0 &&
            a.st_dev == b.st_dev && a.st_ino == b.st_ino)
            break; /* ours, and locked */
        /* Another run's cleanup took it between create and lock: try again. */
        close(fd);
        fd = -1;
        if (++tries >= 100) {
            st = npuc_fail(ctx, NPUC_ERR_IO, "%s: cannot hold a temporary file in %s", path, dir);
            break;
        }
    }
    free(dir);
    if (st != NPUC_OK) { slot_free(slot); free(f); free(tmp); free(p); return st; }
    f->ctx = ctx;
    f->path = p;
    f->tmp = tmp;
    f->fd = fd;
    f->overwrite = overwrite;
    f->slot = slot;
    *out = f;
    return NPUC_OK;
}

npuc_status npuc_atomic_file_open(npuc_ctx *ctx, const char *path, int overwrite, npuc_atomic_file **out) {
    return open_temp(ctx, path, overwrite, 1, out);
}

npuc_status npuc__atomic_file_open_anchor(npuc_ctx *ctx, const char *path, npuc_atomic_file **out) {
    return open_temp(ctx, path, 1, 0, out);
}

int npuc__remove_dir1(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL)
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlinkat(dirfd(d), e->d_name, 0);
        closedir(d);
    }
    return rmdir(path);
}

int npuc_atomic_file_fd(const npuc_atomic_file *f) { return f->fd; }
const char *npuc_atomic_file_temp(const npuc_atomic_file *f) { return f->tmp; }

static void release(npuc_atomic_file *f) {
    slot_free(f->slot);
    if (f->fd >= 0) close(f->fd);
    free(f->path);
    free(f->tmp);
    free(f);
}

void npuc_atomic_file_abort(npuc_atomic_file *f) {
    if (!f) return;
    unlink(f->tmp);
    release(f);
}

/* fsyncs the directory holding path so the rename itself is durable. */
static void sync_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir) return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) { fsync(fd); close(fd); }
    free(dir);
}

/* Moves tmp to path without replacing an existing path: 0, or -1 and errno
 * (EEXIST when path exists). */
static int publish_noreplace(const char *tmp, const char *path) {
#ifdef RENAME_NOREPLACE
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE) == 0) return 0;
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) return -1;
#endif
    /* Filesystems without RENAME_NOREPLACE: link() fails on an existing name. */
    if (link(tmp, path) == 0) {
        unlink(tmp);
        return 0;
    }
    return -1;
}

npuc_status npuc_atomic_file_commit(npuc_atomic_file *f) {
    npuc_ctx *ctx = f->ctx;
    npuc_status st = NPUC_OK;
    if (fsync(f->fd) != 0) {
        st = npuc_fail(ctx, NPUC_ERR_IO, "%s: fsync: %s", f->path, strerror(errno));
    } else if (f->overwrite ? rename(f->tmp, f->path) : publish_noreplace(f->tmp, f->path)) {
        int e = errno;
        st = e == EEXIST ? npuc_fail(ctx, NPUC_ERR_EXISTS, "%s: output exists (use -f to overwrite)", f->path)
                         : npuc_fail(ctx, NPUC_ERR_IO, "%s: rename: %s", f->path, strerror(e));
    }
    if (st != NPUC_OK) {
        npuc_atomic_file_abort(f);
        return st;
    }
    sync_dir(f->path);
    release(f);
    return NPUC_OK;
}
