/*
 * ck_side.c - side files of a checkpoint directory (ck_side.h).
 *
 * A checkpoint is more than its weights: config.json, generation_config.json,
 * tokenizer.json, tokenizer_config.json, special_tokens_map.json,
 * tokenizer.model, vocab/merges files, chat templates.  The writer copies
 * every regular file at the top of the source directory except weights and
 * indexes, unchanged (symbolic links, as in the Hugging Face cache, are
 * followed and copied as files), so the output loads wherever the input did.
 */
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ck_side.h"
#include "safetensors/st_format.h"

static npuc_status close_synced(npuc_ctx *ctx, const char *p, int fd, npuc_status st) {
    if (st == NPUC_OK && fsync(fd) != 0) st = npuc_fail(ctx, NPUC_ERR_IO, "%s: fsync: %s", p, strerror(errno));
    if (close(fd) != 0 && st == NPUC_OK) st = npuc_fail(ctx, NPUC_ERR_IO, "%s: close: %s", p, strerror(errno));
    return st;
}

npuc_status npuc__ck_write_file(npuc_ctx *ctx, npuc__ck_tmpdir *td, const char *dest, const char *name, const void *data,
                                size_t n, int newline) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", dest, name);
    int fd;
    npuc_status st = npuc__ck_tmpdir_create(td, name, &fd);
    if (st != NPUC_OK) return st;
    st = npuc__st_write_all(ctx, p, fd, data, n, name);
    if (st == NPUC_OK && newline) st = npuc__st_write_all(ctx, p, fd, "\n", 1, name);
    return close_synced(ctx, p, fd, st);
}

int npuc__ck_is_weight_name(const char *name) {
    static const char *const EXT[] = {".safetensors", ".index.json", ".bin", ".pt", ".pth", ".ckpt",
                                      ".h5", ".keras", ".msgpack", ".gguf", ".onnx"};
    if (name[0] == '.') return 1;
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof EXT / sizeof EXT[0]; i++) {
        size_t k = strlen(EXT[i]);
        if (n >= k && strcmp(name + n - k, EXT[i]) == 0) return 1;
    }
    return 0;
}

static npuc_status copy_one(npuc_ctx *ctx, npuc__ck_tmpdir *td, const char *dest, const char *src, const char *name) {
    char sp[PATH_MAX], dp[PATH_MAX];
    snprintf(sp, sizeof sp, "%s/%s", src, name);
    snprintf(dp, sizeof dp, "%s/%s", dest, name);
    int in = open(sp, O_RDONLY | O_CLOEXEC);
    if (in < 0) return npuc_fail(ctx, NPUC_ERR_IO, "%s: %s", sp, strerror(errno));
    int out;
    npuc_status st = npuc__ck_tmpdir_create(td, name, &out);
    char *buf = st == NPUC_OK ? malloc(1 << 20) : NULL;
    if (st == NPUC_OK && !buf) st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    while (st == NPUC_OK) {
        ssize_t r = read(in, buf, 1 << 20);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) st = npuc_fail(ctx, NPUC_ERR_IO, "%s: read: %s", sp, strerror(errno));
        if (r <= 0) break;
        st = npuc__st_write_all(ctx, dp, out, buf, (uint64_t)r, name);
    }
    free(buf);
    close(in);
    return out >= 0 ? close_synced(ctx, dp, out, st) : st;
}

npuc_status npuc__ck_copy_side_files(npuc_ctx *ctx, npuc__ck_tmpdir *td, const char *dest, const char *src_dir,
                                     const char *const *skip, size_t nskip) {
    DIR *d = opendir(src_dir);
    if (!d) return npuc_fail(ctx, NPUC_ERR_IO, "%s: cannot read the source checkpoint's directory: %s", src_dir, strerror(errno));
    npuc_status st = NPUC_OK;
    struct dirent *e;
    while (st == NPUC_OK && (e = readdir(d)) != NULL) {
        const char *nm = e->d_name;
        int skipped = npuc__ck_is_weight_name(nm);
        for (size_t i = 0; i < nskip && !skipped; i++) skipped = skip[i] && strcmp(skip[i], nm) == 0;
        struct stat sb;
        if (skipped || fstatat(dirfd(d), nm, &sb, 0) != 0 || !S_ISREG(sb.st_mode)) continue;
        char tp[PATH_MAX];
        struct stat tb;
        snprintf(tp, sizeof tp, "%s/%s", npuc__ck_tmpdir_path(td), nm);
        if (stat(tp, &tb) == 0) continue; /* the output format wrote its own (config.json) */
        st = copy_one(ctx, td, dest, src_dir, nm);
    }
    closedir(d);
    return st;
}
