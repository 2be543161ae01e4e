/*
 * ck_index.c - finding and validating a checkpoint's index.
 *
 * The index (transformers' `model.safetensors.index.json`, written by
 * save_pretrained / huggingface_hub.save_torch_state_dict) is
 *
 *   { "metadata": { "total_size": <bytes of all tensors> },
 *     "weight_map": { "<tensor name>": "<shard file name>", ... } }
 *
 * It comes from the outside, so it is bounded and checked before any shard
 * is opened: the file is at most NPUC__CK_INDEX_MAX_BYTES, valid UTF-8 JSON
 * without duplicate keys (one name cannot map to two shards), with at most
 * NPUC__CK_MAX_TENSORS names and NPUC__CK_MAX_SHARDS distinct shards; a shard
 * is a plain file name in the index's directory (no '/', so neither "../x"
 * nor "/etc/x"; no leading '.'; ending in .safetensors) and must exist as a
 * regular file.  "metadata" is optional and not trusted (the writer
 * recomputes total_size).  Each message is one line naming the index file.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ck_format.h"

#define SHOWN 120 /* bytes of a name from the file a message shows */

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int is_reg_in(const char *dir, const char *name) {
    char p[4096];
    struct stat sb;
    if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, name) >= sizeof p) return 0;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* In dir: the index's name (*index_name, malloc'd) or, without one, the one
 * shard (*single); counts of candidates in *nidx and *nst. */
static int scan_dir(const char *dir, char **index_name, char **single, size_t *nidx, size_t *nst) {
    *index_name = *single = NULL;
    *nidx = *nst = 0;
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *e;
    int oom = 0;
    while ((e = readdir(d)) != NULL && !oom) {
        const char *nm = e->d_name;
        if (nm[0] == '.' || !is_reg_in(dir, nm)) continue;
        if (ends_with(nm, ".safetensors.index.json")) {
            (*nidx)++;
            /* model.safetensors.index.json wins over any other index */
            if (!*index_name || strcmp(nm, "model.safetensors.index.json") == 0) {
                free(*index_name);
                oom = !(*index_name = npuc__strdup(nm));
            }
        } else if (ends_with(nm, ".safetensors")) {
            (*nst)++;
            if (!*single || strcmp(nm, "model.safetensors") == 0) {
                free(*single);
                oom = !(*single = npuc__strdup(nm));
            }
        }
    }
    closedir(d);
    return oom ? -2 : 0;
}

int npuc__ck_sniff(const char *path) {
    if (is_dir(path)) {
        char *ix, *one;
        size_t ni, ns;
        if (scan_dir(path, &ix, &one, &ni, &ns) != 0) return NPUC__SNIFF_PLAUSIBLE;
        int sure = ni > 0 || (one && strcmp(one, "model.safetensors") == 0);
        free(ix);
        free(one);
        return sure ? NPUC__SNIFF_SIGNATURE : NPUC__SNIFF_PLAUSIBLE;
    }
    struct stat sb;
    return ends_with(path, ".index.json") && stat(path, &sb) == 0 && S_ISREG(sb.st_mode) ? NPUC__SNIFF_SIGNATURE
                                                                                           : NPUC__SNIFF_NO;
}

void npuc__ck_index_free(npuc__ck_index *ix) {
    if (!ix) return;
    for (size_t i = 0; i < ix->nshards; i++) free(ix->shards[i]);
    free(ix->shards);
    free(ix->dir);
    free(ix->index_name);
    json_decref(ix->map);
    memset(ix, 0, sizeof *ix);
}

long npuc__ck_index_shard(const npuc__ck_index *ix, const char *name) {
    json_t *v = json_object_get(ix->map, name);
    return v ? (long)json_integer_value(v) : -1;
}

/* Reads the whole index file (bounded); malloc'd, NUL-terminated. */
static npuc_status read_index(npuc_ctx *ctx, const char *path, char **buf, size_t *len) {
    *buf = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return npuc_fail(ctx, errno == ENOENT ? NPUC_ERR_NOT_FOUND : NPUC_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat sb;
    npuc_status st = NPUC_OK;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = npuc_fail(ctx, NPUC_ERR_IO, "%s: not a readable regular file", path);
    } else if ((uint64_t)sb.st_size > NPUC__CK_INDEX_MAX_BYTES) {
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: index is %llu bytes, over the %u-byte limit", path,
                       (unsigned long long)sb.st_size, NPUC__CK_INDEX_MAX_BYTES);
    } else {
        size_t n = (size_t)sb.st_size, got = 0;
        char *b = malloc(n + 1);
        if (!b) st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
        while (b && got < n) {
            ssize_t r = read(fd, b + got, n - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) { st = npuc_fail(ctx, NPUC_ERR_IO, "%s: read: %s", path, r ? strerror(errno) : "file shrank"); break; }
            got += (size_t)r;
        }
        if (st == NPUC_OK) {
            b[n] = 0;
            *buf = b;
            *len = n;
        } else {
            free(b);
        }
    }
    close(fd);
    return st;
}

/* The shard's index in ix->shards, appending it when new; -1 out of memory. */
static long shard_slot(npuc__ck_index *ix, const char *name) {
    for (size_t i = ix->nshards; i-- > 0;)
        if (strcmp(ix->shards[i], name) == 0) return (long)i;
    if ((ix->nshards & (ix->nshards - 1)) == 0) { /* grow at powers of two */
        char **p = realloc(ix->shards, (ix->nshards ? 2 * ix->nshards : 1) * sizeof *p);
        if (!p) return -1;
        ix->shards = p;
    }
    if (!(ix->shards[ix->nshards] = npuc__strdup(name))) return -1;
    return (long)ix->nshards++;
}

/* Why a shard name from the index is refused, or NULL when it is fine. */
static const char *bad_shard_name(const char *s) {
    if (!*s) return "is empty";
    if (s[0] == '/') return "is an absolute path";
    if (strstr(s, "..")) return "contains '..'";
    if (strchr(s, '/')) return "is not a file name in the checkpoint directory";
    if (s[0] == '.') return "is a hidden file";
    if (!ends_with(s, ".safetensors")) return "is not a .safetensors file (npuc reads safetensors checkpoints only)";
    return NULL;
}

static npuc_status parse_index(npuc_ctx *ctx, const char *ipath, npuc__ck_index *ix) {
    char *buf = NULL;
    size_t len = 0;
    npuc_status st = read_index(ctx, ipath, &buf, &len);
    if (st != NPUC_OK) return st;
    json_t *root = NULL;
    if (!npuc__utf8_valid(buf, len)) {
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: index is not valid UTF-8", ipath);
        goto done;
    }
    json_error_t je;
    root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: index JSON: %s at byte %d", ipath, je.text, je.position);
        goto done;
    }
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(root) || !json_is_object(wm)) {
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: index has no \"weight_map\" object", ipath);
        goto done;
    }
    json_t *meta = json_object_get(root, "metadata");
    if (meta && !json_is_object(meta) && !json_is_null(meta)) {
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: index \"metadata\" is not an object", ipath);
        goto done;
    }
    if (json_object_size(wm) > NPUC__CK_MAX_TENSORS) {
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: index lists %zu tensors, over the limit of %u", ipath,
                       json_object_size(wm), NPUC__CK_MAX_TENSORS);
        goto done;
    }
    if (!(ix->map = json_object())) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", ipath); goto done; }
    const char *k;
    json_t *v;
    json_object_foreach(wm, k, v) {
        if (!json_is_string(v)) {
            st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%.*s': shard is not a string", ipath, SHOWN, k);
            goto done;
        }
        const char *sh = json_string_value(v), *why = bad_shard_name(sh);
        if (why) {
            st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%.*s': shard '%.*s' %s", ipath, SHOWN, k, SHOWN, sh, why);
            goto done;
        }
        size_t before = ix->nshards;
        long s = shard_slot(ix, sh);
        if (s < 0 || json_object_set_new(ix->map, k, json_integer(s))) {
            st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", ipath);
            goto done;
        }
        if (ix->nshards > NPUC__CK_MAX_SHARDS) {
            st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: index names over %u shards", ipath, NPUC__CK_MAX_SHARDS);
            goto done;
        }
        if (ix->nshards > before && !is_reg_in(ix->dir, sh)) {
            st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%.*s': shard '%.*s' is missing from %s", ipath, SHOWN, k,
                           SHOWN, sh, ix->dir);
            goto done;
        }
    }
done:
    json_decref(root);
    free(buf);
    return st;
}

npuc_status npuc__ck_index_load(npuc_ctx *ctx, const char *path, npuc__ck_index *ix) {
    memset(ix, 0, sizeof *ix);
    npuc_status st = NPUC_OK;
    char *ipath = NULL;
    if (is_dir(path)) {
        size_t n = strlen(path);
        while (n > 1 && path[n - 1] == '/') n--;
        if (!(ix->dir = strndup(path, n))) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
        char *single = NULL;
        size_t ni, ns;
        int r = scan_dir(ix->dir, &ix->index_name, &single, &ni, &ns);
        if (r != 0) {
            st = r == -2 ? npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path)
                         : npuc_fail(ctx, NPUC_ERR_IO, "%s: %s", path, strerror(errno));
        } else if (ni > 1 && strcmp(ix->index_name, "model.safetensors.index.json") != 0) {
            st = npuc_fail(ctx, NPUC_ERR_ARG, "%s: holds %zu *.safetensors.index.json files; name the one to read", path, ni);
        } else if (!ix->index_name && (ns == 1 || (single && strcmp(single, "model.safetensors") == 0))) {
            /* one model.safetensors: a one-shard checkpoint, mapped by the reader */
            ix->shards = malloc(sizeof *ix->shards);
            ix->map = json_object();
            if (!ix->shards || !ix->map) st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
            else { ix->shards[0] = single; single = NULL; ix->nshards = 1; }
        } else if (!ix->index_name) {
            st = npuc_fail(ctx, NPUC_ERR_FORMAT,
                           "%s: a directory without model.safetensors.index.json or model.safetensors; not a checkpoint",
                           path);
        }
        free(single);
        if (st == NPUC_OK && ix->index_name) {
            size_t cap = strlen(ix->dir) + strlen(ix->index_name) + 2;
            if (!(ipath = malloc(cap))) st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
            else snprintf(ipath, cap, "%s/%s", ix->dir, ix->index_name);
        }
    } else {
        const char *slash = strrchr(path, '/');
        ix->dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : npuc__strdup(".");
        ix->index_name = npuc__strdup(slash ? slash + 1 : path);
        ipath = npuc__strdup(path);
        if (!ix->dir || !ix->index_name || !ipath) st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
    }
    if (st == NPUC_OK && ipath) st = parse_index(ctx, ipath, ix);
    free(ipath);
    if (st != NPUC_OK) npuc__ck_index_free(ix);
    return st;
}
