/*
 * fuzz_util.c - the scratch file and context every fuzz target uses
 * (fuzz_util.h).
 */
#include "fuzz_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[4096];

static void remove_dir(void) {
    if (!g_dir[0]) return;
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *e;
        char p[4096 + 512];
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(g_dir);
}

void npuc_fuzz_cleanup(void) {
    remove_dir();
    g_dir[0] = 0;
}

static const char *scratch_dir(void) {
    if (g_dir[0]) return g_dir;
    const char *bases[] = {getenv("TMPDIR"), "/dev/shm", "/tmp"};
    for (size_t i = 0; i < sizeof bases / sizeof bases[0]; i++) {
        if (!bases[i] || !bases[i][0] || access(bases[i], W_OK) != 0) continue;
        snprintf(g_dir, sizeof g_dir, "%s/npuc-fuzz-XXXXXX", bases[i]);
        if (mkdtemp(g_dir)) {
            atexit(remove_dir);
            return g_dir;
        }
    }
    g_dir[0] = 0;
    return NULL;
}

const char *npuc_fuzz_path(const char *name) {
    static char p[4096 + 256];
    const char *d = scratch_dir();
    if (!d) return NULL;
    snprintf(p, sizeof p, "%s/%s", d, name);
    return p;
}

const char *npuc_fuzz_write(const uint8_t *data, size_t size, const char *ext) {
    char name[64];
    snprintf(name, sizeof name, "input%s", ext);
    const char *p = npuc_fuzz_path(name);
    if (!p) return NULL;
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return NULL;
    size_t off = 0;
    while (off < size) {
        ssize_t w = write(fd, data + off, size - off);
        if (w <= 0) {
            close(fd);
            return NULL;
        }
        off += (size_t)w;
    }
    close(fd);
    return p;
}

npuc_ctx *npuc_fuzz_ctx(void) {
    npuc_ctx *ctx;
    if (npuc_ctx_new(&ctx) != NPUC_OK) return NULL;
    npuc_ctx_set_threads(ctx, 1);
    npuc_ctx_set_max_memory(ctx, NPUC_FUZZ_MAX_MEMORY);
    return ctx;
}

npuc_model *npuc_fuzz_open(const uint8_t *data, size_t size, const char *ext, npuc_format format,
                           npuc_ctx **ctx) {
    const char *path = npuc_fuzz_write(data, size, ext);
    npuc_model *m = NULL;
    *ctx = npuc_fuzz_ctx();
    if (!path || !*ctx) return NULL;
    npuc_open_opts o = npuc_open_opts_defaults();
    o.format = format;
    if (npuc_model_open(*ctx, path, &o, &m) != NPUC_OK) return NULL;
    return m;
}

void npuc_fuzz_read_all(npuc_ctx *ctx, npuc_model *m) {
    for (size_t i = 0; i < npuc_model_meta_count(m); i++) {
        const char *k, *v;
        npuc_model_meta_at(m, i, &k, &v);
    }
    for (size_t i = 0; i < npuc_model_group_count(m); i++) (void)npuc_model_group(m, i);
    (void)npuc_model_format_opt(m, "structure");
    for (size_t i = 0; i < npuc_model_count(m); i++) {
        const npuc_tensor_info *t = npuc_model_tensor(m, i);
        const void *data;
        if (npuc_model_data(ctx, m, i, &data) == NPUC_OK && t->nbytes) {
            /* Touch the first and last byte so a short buffer trips ASan. */
            volatile unsigned char sink = ((const unsigned char *)data)[0];
            sink ^= ((const unsigned char *)data)[t->nbytes - 1];
            (void)sink;
        }
        npuc_model_release(m, i);
        if (t->numel > NPUC_FUZZ_MAX_F32 / sizeof(float)) continue;
        float *w = malloc((t->numel ? t->numel : 1) * sizeof *w);
        if (!w) continue;
        npuc_model_read_f32(ctx, m, i, w);
        free(w);
    }
}

int npuc_fuzz_model(const uint8_t *data, size_t size, const char *ext, npuc_format format) {
    npuc_ctx *ctx;
    npuc_model *m = npuc_fuzz_open(data, size, ext, format, &ctx);
    if (m) npuc_fuzz_read_all(ctx, m);
    npuc_model_close(m);
    npuc_ctx_free(ctx);
    return 0;
}
