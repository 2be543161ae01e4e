/*
 * keras_zip.c - reading a .keras zip archive through libzip, with every
 * entry checked before a byte of it is used (keras_format.h has the rules).
 *
 * Why these checks: npuc never writes an entry to a path taken from the
 * archive (model.weights.h5 goes to a temporary file of its own), but the
 * names of carried entries reappear in npuc's outputs, where another unzip
 * would honour them, so a name that could leave its folder ("../x", "/x",
 * "a\\..\\x") refuses the archive.  Sizes come from the central directory,
 * which the file controls: an entry may not claim more compressed bytes
 * than the file has, nor more uncompressed bytes than deflate can produce
 * from them (1032:1), and extraction stops at the declared size and checks
 * the CRC, so a zip bomb costs at most its declared size, which must also
 * fit NPUC_KERAS_MAX_WEIGHTS and the free space of the temporary folder.
 * Methods other than stored and deflated (bzip2, xz, zstd reach far higher
 * ratios) and encrypted entries are refused.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "keras_format.h"

const char *npuc__kzip_bad_name(const char *s, size_t len) {
    if (len == 0) return "an empty name";
    if (len > NPUC_KERAS_MAX_NAME) return "a name longer than 1024 bytes";
    if (!npuc__utf8_valid(s, len)) return "a name that is not UTF-8";
    if (s[0] == '/') return "an absolute path";
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) return "a control character in its name";
        if (c == '\\') return "a backslash in its name";
    }
    /* Components: "a//b", "./a" and "a/../b" are refused; "dir/" is a folder. */
    const char *c = s, *end = s + len;
    while (c < end) {
        const char *e = memchr(c, '/', (size_t)(end - c));
        size_t n = e ? (size_t)(e - c) : (size_t)(end - c);
        if (n == 0) return "an empty path component";
        if ((n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
            return "a '.' or '..' path component (path traversal)";
        if (!e) break;
        c = e + 1;
    }
    return NULL;
}

static npuc_status zfail(npuc_ctx *ctx, const npuc_kzip *z, zip_error_t *e, const char *what) {
    return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: %s (libzip: %s)", z->path, what, zip_error_strerror(e));
}

static npuc_status check_entry(npuc_ctx *ctx, npuc_kzip *z, zip_uint64_t i) {
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(z->za, i, 0, &st) != 0)
        return zfail(ctx, z, zip_get_error(z->za), "unreadable zip entry");
    const zip_uint64_t need = ZIP_STAT_NAME | ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE | ZIP_STAT_COMP_METHOD |
                              ZIP_STAT_ENCRYPTION_METHOD;
    if ((st.valid & need) != need)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: zip entry %llu: incomplete directory record", z->path,
                         (unsigned long long)i);
    const char *why = npuc__kzip_bad_name(st.name, strlen(st.name));
    if (why)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: zip entry %llu has %s: refusing the archive", z->path,
                         (unsigned long long)i, why);
    if (zip_name_locate(z->za, st.name, 0) != (zip_int64_t)i)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: zip entry '%s' appears twice", z->path, st.name);
    if (st.encryption_method != ZIP_EM_NONE)
        return npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: zip entry '%s' is encrypted", z->path, st.name);
    if (st.comp_method != ZIP_CM_STORE && st.comp_method != ZIP_CM_DEFLATE)
        return npuc_fail(ctx, NPUC_ERR_UNSUPPORTED,
                         "%s: zip entry '%s' uses compression method %d (npuc reads stored and deflated "
                         "entries)", z->path, st.name, (int)st.comp_method);
    if (st.comp_size > z->file_size)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: zip entry '%s' claims %llu compressed bytes in a "
                         "%llu-byte file", z->path, st.name, (unsigned long long)st.comp_size,
                         (unsigned long long)z->file_size);
    if (st.comp_method == ZIP_CM_STORE && st.size != st.comp_size)
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: stored zip entry '%s' claims %llu bytes but holds %llu",
                         z->path, st.name, (unsigned long long)st.size, (unsigned long long)st.comp_size);
    uint64_t lim;
    if (npuc_mul_overflow(st.comp_size, NPUC_KERAS_MAX_RATIO, &lim) ||
        npuc_add_overflow(lim, NPUC_KERAS_RATIO_SLACK, &lim))
        lim = UINT64_MAX;
    if (st.size > lim)
        return npuc_fail(ctx, NPUC_ERR_FORMAT,
                         "%s: zip entry '%s' claims %llu bytes from %llu compressed (more than %llu:1): "
                         "refusing a zip bomb", z->path, st.name, (unsigned long long)st.size,
                         (unsigned long long)st.comp_size, (unsigned long long)NPUC_KERAS_MAX_RATIO);
    return NPUC_OK;
}

npuc_status npuc__kzip_open(npuc_ctx *ctx, const char *path, npuc_kzip *z) {
    memset(z, 0, sizeof *z);
    z->path = path;
    struct stat sb;
    if (stat(path, &sb) != 0) return npuc_fail(ctx, NPUC_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    z->file_size = (uint64_t)sb.st_size;
    int err = 0;
    z->za = zip_open(path, ZIP_RDONLY | ZIP_CHECKCONS, &err);
    if (!z->za) {
        zip_error_t e;
        zip_error_init_with_code(&e, err);
        npuc_status st = npuc_fail(ctx, err == ZIP_ER_OPEN || err == ZIP_ER_READ ? NPUC_ERR_IO : NPUC_ERR_FORMAT,
                                   "%s: not a readable zip archive (libzip: %s)", path, zip_error_strerror(&e));
        zip_error_fini(&e);
        return st;
    }
    zip_int64_t n = zip_get_num_entries(z->za, 0);
    if (n < 0 || (uint64_t)n > NPUC_KERAS_MAX_ENTRIES) {
        npuc__kzip_close(z);
        return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: %lld zip entries (at most %u)", path, (long long)n,
                         NPUC_KERAS_MAX_ENTRIES);
    }
    z->n = (size_t)n;
    for (size_t i = 0; i < z->n; i++) {
        npuc_status st = check_entry(ctx, z, i);
        if (st != NPUC_OK) {
            npuc__kzip_close(z);
            return st;
        }
    }
    return NPUC_OK;
}

void npuc__kzip_close(npuc_kzip *z) {
    if (z->za) zip_discard(z->za);
    z->za = NULL;
}

const char *npuc__kzip_name(const npuc_kzip *z, size_t i) { return zip_get_name(z->za, i, 0); }

long npuc__kzip_find(const npuc_kzip *z, const char *name) {
    zip_int64_t i = zip_name_locate(z->za, name, 0);
    return i < 0 ? -1 : (long)i;
}

/* Streams entry i into sink (a buffer or a file), requiring exactly its
 * declared size; libzip checks the CRC when the last byte is read. */
static npuc_status stream(npuc_ctx *ctx, const npuc_kzip *z, size_t i, uint64_t size, char *buf, int fd) {
    const char *name = npuc__kzip_name(z, i);
    zip_file_t *f = zip_fopen_index(z->za, i, 0);
    if (!f) return zfail(ctx, z, zip_get_error(z->za), "cannot open a zip entry");
    npuc_status st = NPUC_OK;
    enum { CHUNK = 1 << 20 };
    char *tmp = buf ? NULL : malloc(CHUNK);
    uint64_t got = 0;
    if (!buf && !tmp) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", z->path); goto done; }
    for (;;) {
        /* One byte more than declared may come, and is an error. */
        uint64_t want = size - got + 1;
        if (want > CHUNK) want = CHUNK;
        char *dst = buf ? buf + got : tmp; /* buf holds size + 1 bytes */
        zip_int64_t r = zip_fread(f, dst, want);
        if (r < 0) {
            st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: zip entry '%s': cannot read (libzip: %s)", z->path, name,
                           zip_error_strerror(zip_file_get_error(f)));
            goto done;
        }
        if (r == 0) break;
        if ((uint64_t)r > size - got) {
            st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: zip entry '%s' holds more than its declared %llu bytes",
                           z->path, name, (unsigned long long)size);
            goto done;
        }
        if (!buf) {
            for (zip_int64_t off = 0; off < r;) {
                ssize_t k = write(fd, tmp + off, (size_t)(r - off));
                if (k < 0 && errno == EINTR) continue;
                if (k <= 0) {
                    st = npuc_fail(ctx, NPUC_ERR_IO, "%s: zip entry '%s': cannot write the extracted copy: %s",
                                   z->path, name, k < 0 ? strerror(errno) : "short write");
                    goto done;
                }
                off += k;
            }
        }
        got += (uint64_t)r;
    }
    if (got != size)
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: zip entry '%s' holds %llu of its declared %llu bytes", z->path,
                       name, (unsigned long long)got, (unsigned long long)size);
done:
    if (zip_fclose(f) != 0 && st == NPUC_OK)
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: zip entry '%s' is damaged (CRC or size mismatch)", z->path, name);
    free(tmp);
    return st;
}

static npuc_status entry_size(npuc_ctx *ctx, const npuc_kzip *z, size_t i, uint64_t *size) {
    zip_stat_t s;
    zip_stat_init(&s);
    if (zip_stat_index(z->za, i, 0, &s) != 0)
        return zfail(ctx, z, zip_get_error(z->za), "unreadable zip entry");
    *size = s.size;
    return NPUC_OK;
}

npuc_status npuc__kzip_read(npuc_ctx *ctx, const npuc_kzip *z, size_t i, char **out, int *text) {
    *out = NULL;
    *text = 0;
    uint64_t size = 0;
    npuc_status st = entry_size(ctx, z, i, &size);
    if (st != NPUC_OK) return st;
    if (size > NPUC_KERAS_MAX_TEXT)
        return npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: zip entry '%s' holds %llu bytes (at most %llu)",
                         z->path, npuc__kzip_name(z, i), (unsigned long long)size,
                         (unsigned long long)NPUC_KERAS_MAX_TEXT);
    char *buf = malloc((size_t)size + 1);
    if (!buf) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", z->path);
    if ((st = stream(ctx, z, i, size, buf, -1)) != NPUC_OK) {
        free(buf);
        return st;
    }
    buf[size] = 0;
    *text = memchr(buf, 0, (size_t)size) == NULL && npuc__utf8_valid(buf, (size_t)size);
    *out = buf;
    return NPUC_OK;
}

npuc_status npuc__kzip_extract(npuc_ctx *ctx, const npuc_kzip *z, size_t i, int fd) {
    uint64_t size = 0;
    npuc_status st = entry_size(ctx, z, i, &size);
    if (st != NPUC_OK) return st;
    const char *name = npuc__kzip_name(z, i);
    if (size > NPUC_KERAS_MAX_WEIGHTS)
        return npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: zip entry '%s' holds %llu bytes (at most %llu)",
                         z->path, name, (unsigned long long)size, (unsigned long long)NPUC_KERAS_MAX_WEIGHTS);
    struct statvfs vs;
    if (fstatvfs(fd, &vs) == 0 && vs.f_frsize && size / vs.f_frsize >= (uint64_t)vs.f_bavail)
        return npuc_fail(ctx, NPUC_ERR_IO,
                         "%s: zip entry '%s' needs %llu bytes to extract and the temporary folder has less "
                         "free (set TMPDIR to a larger one)", z->path, name, (unsigned long long)size);
    return stream(ctx, z, i, size, NULL, fd);
}
