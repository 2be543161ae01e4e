/*
 * fuzz_checkpoint.c - libFuzzer target: the sharded Hugging Face checkpoint
 * reader (formats/checkpoint/: the index, the shards' cross-checks, the
 * compressed-tensors view decoded on load).
 *
 * The input is split at each NPUC_FUZZ_CK_SEP into up to four parts, written
 * into one checkpoint folder "ckpt/" of the scratch directory (reused for
 * every input: files are rewritten or removed, never synced):
 *
 *   part 0  model.safetensors.index.json (empty: no index file)
 *   part 1  a.safetensors                (empty: no such file)
 *   part 2  b.safetensors                (empty: no such file)
 *   part 3  config.json                  (absent or empty: no such file)
 *
 * An input without a separator is the index alone, read against two fixed
 * valid shards: a.safetensors ("a.w" F32 [2,3], "a.b" F16 [3]) and
 * b.safetensors ("b.w" BF16 [4]).  Beside them the folder always holds a
 * directory named "dir.safetensors", and the scratch directory (the
 * folder's parent) a valid "outside.safetensors", so an index naming
 * "../outside.safetensors" or "dir.safetensors" meets a real target.  The
 * folder is opened as a directory, or through its index file when the
 * input's length is odd; then everything is read as for any model.
 */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NPUC_FUZZ_CK_SEP "\n--npuc-part--\n"

/* Two tiny valid shards (written from the safetensors spec: an 8-byte
 * little-endian header length, the JSON header padded with spaces to 8
 * bytes, the payload). */
static const char SHARD_A_HDR[] =
    "{\"a.w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
    "\"a.b\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[24,30]}}";
static const char SHARD_B_HDR[] = "{\"b.w\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,8]}}";

static int write_file(const char *path, const void *data, size_t size) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    const char *p = data;
    while (size) {
        ssize_t w = write(fd, p, size);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        p += w;
        size -= (size_t)w;
    }
    return close(fd);
}

/* A safetensors file of header hdr and payload bytes 1, 2, 3, ... */
static int write_shard(const char *path, const char *hdr, size_t payload) {
    unsigned char buf[512];
    size_t n = strlen(hdr), padded = (n + 7) / 8 * 8;
    if (8 + padded + payload > sizeof buf) return -1;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(buf + 8, hdr, n);
    memset(buf + 8 + n, ' ', padded - n);
    for (size_t i = 0; i < payload; i++) buf[8 + padded + i] = (unsigned char)(i + 1);
    return write_file(path, buf, 8 + padded + payload);
}

/* Writes part (or removes the file when the part is empty). */
static int put(const char *dir, const char *name, const uint8_t *p, size_t n) {
    char path[4096 + 64];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path) return -1;
    if (!n) return unlink(path) == 0 || errno == ENOENT ? 0 : -1;
    return write_file(path, p, n);
}

static const char *const NAMES[] = {"model.safetensors.index.json", "a.safetensors", "b.safetensors",
                                    "config.json"};
static char g_dir[4096];

/* The folder goes before fuzz_util.c's scratch directory (atexit runs this
 * first), which removes only plain files. */
static void remove_folder(void) {
    char path[4096 + 64];
    for (int k = 0; k < 4; k++) put(g_dir, NAMES[k], NULL, 0);
    snprintf(path, sizeof path, "%s/dir.safetensors", g_dir);
    rmdir(path);
    rmdir(g_dir);
}

/* Makes the folder and the fixed files once per process; 0 when ready. */
static int setup(void) {
    if (g_dir[0]) return 0;
    const char *outside = npuc_fuzz_path("outside.safetensors");
    if (!outside || write_shard(outside, SHARD_B_HDR, 8) != 0) return -1;
    if ((size_t)snprintf(g_dir, sizeof g_dir, "%s", npuc_fuzz_path("ckpt")) >= sizeof g_dir) return -1;
    char sub[4096 + 64];
    snprintf(sub, sizeof sub, "%s/dir.safetensors", g_dir);
    if ((mkdir(g_dir, 0700) != 0 && errno != EEXIST) || (mkdir(sub, 0700) != 0 && errno != EEXIST)) {
        g_dir[0] = 0;
        return -1;
    }
    atexit(remove_folder);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (setup() != 0) return 0;
    const char *dir = g_dir;
    const size_t sep = sizeof NPUC_FUZZ_CK_SEP - 1;
    const uint8_t *p = data, *end = data + size;
    int nparts = 0, ok = 1;
    for (; nparts < 4 && ok; nparts++) {
        const uint8_t *e = nparts < 3 ? memmem(p, (size_t)(end - p), NPUC_FUZZ_CK_SEP, sep) : NULL;
        size_t n = e ? (size_t)(e - p) : (size_t)(end - p);
        ok = put(dir, NAMES[nparts], p, n) == 0;
        if (!e) {
            nparts++;
            break;
        }
        p = e + sep;
    }
    for (int k = nparts; k < 4 && ok; k++) ok = put(dir, NAMES[k], NULL, 0) == 0;
    if (nparts == 1) { /* the index alone: the fixed shards */
        char path[4096 + 64];
        snprintf(path, sizeof path, "%s/a.safetensors", dir);
        ok = ok && write_shard(path, SHARD_A_HDR, 30) == 0;
        snprintf(path, sizeof path, "%s/b.safetensors", dir);
        ok = ok && write_shard(path, SHARD_B_HDR, 8) == 0;
    }
    if (!ok) return 0;

    char path[4096 + 64];
    if (size % 2) snprintf(path, sizeof path, "%s/%s", dir, NAMES[0]);
    else snprintf(path, sizeof path, "%s", dir);
    npuc_ctx *ctx = npuc_fuzz_ctx();
    npuc_model *m = NULL;
    npuc_open_opts o = npuc_open_opts_defaults();
    o.format = npuc_format_find("checkpoint");
    if (ctx && npuc_model_open(ctx, path, &o, &m) == NPUC_OK) npuc_fuzz_read_all(ctx, m);
    npuc_model_close(m);
    npuc_ctx_free(ctx);
    return 0;
}
