/*
 * report_header.c - what every report says about its run besides the records:
 * the inputs with size and SHA-256, the git commit the library was built
 * from, the UTC time, the warnings and the record orders (see
 * report_internal.h).
 *
 * The time is the wall clock, or SOURCE_DATE_EPOCH when set (the
 * reproducible-builds convention), and only when the caller asked for it:
 * reports carry a time, artifacts never do.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>

#include "report/report_internal.h"

/* Set by CMake from `git rev-parse --short HEAD` at configure time. */
#ifdef NPUC_GIT_COMMIT
static const char *const COMMIT = NPUC_GIT_COMMIT;
#else
static const char *const COMMIT = NULL;
#endif

/* SHA-256 of a file as lower-case hex into hex[65]; 0 on success. */
static int sha256_file(const char *path, uint64_t *size, char hex[65]) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned char *buf = malloc(1 << 20);
    int rc = -1;
    if (md && buf && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1) {
        size_t k;
        uint64_t total = 0;
        int ok = 1;
        while ((k = fread(buf, 1, 1 << 20, f)) > 0) {
            total += k;
            if (EVP_DigestUpdate(md, buf, k) != 1) { ok = 0; break; }
        }
        unsigned char dig[EVP_MAX_MD_SIZE];
        unsigned int dl = 0;
        if (ok && !ferror(f) && EVP_DigestFinal_ex(md, dig, &dl) == 1 && dl == 32) {
            for (unsigned int i = 0; i < dl; i++) snprintf(hex + 2 * i, 3, "%02x", dig[i]);
            *size = total;
            rc = 0;
        }
    }
    EVP_MD_CTX_free(md);
    free(buf);
    fclose(f);
    return rc;
}

static void utc_now(char buf[32]) {
    time_t now = time(NULL);
    const char *sde = getenv("SOURCE_DATE_EPOCH");
    if (sde && *sde) {
        char *end;
        errno = 0;
        long long v = strtoll(sde, &end, 10);
        if (!*end && errno == 0 && v >= 0) now = (time_t)v;
    }
    struct tm tm;
    if (!gmtime_r(&now, &tm) || strftime(buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0) buf[0] = 0;
}

npuc_status npuc__report_doc_init(npuc_ctx *ctx, const npuc_summary *s, const npuc_report_info *info,
                                  npuc__report_doc *d) {
    memset(d, 0, sizeof *d);
    d->commit = COMMIT;
    if (info->timestamp) utc_now(d->timestamp);
    d->inputs = calloc(info->ninputs ? info->ninputs : 1, sizeof *d->inputs);
    d->order = npuc__report_order(s, info->sort_by_sqnr);
    d->worst = malloc(sizeof *d->worst * (s->nrecords ? s->nrecords : 1));
    if (!d->inputs || !d->order || !d->worst) goto nomem;
    d->ninputs = info->ninputs;
    for (size_t i = 0; i < info->ninputs; i++) {
        d->inputs[i].path = info->inputs[i];
        d->inputs[i].ok = sha256_file(info->inputs[i], &d->inputs[i].size, d->inputs[i].sha256) == 0;
    }
    for (size_t i = 0; i < s->nrecords; i++)
        if (s->records[i].has_error) d->worst[d->nworst++] = i;
    if (npuc__sort_by_sqnr(s, d->worst, d->nworst) != 0) goto nomem;
    for (size_t i = 0; i < s->nwarnings; i++) {
        char **w = realloc(d->warnings, (d->nwarnings + 1) * sizeof *w);
        if (!w) goto nomem;
        d->warnings = w;
        if (!(w[d->nwarnings] = npuc__strdup(s->warnings[i]))) goto nomem;
        d->nwarnings++;
    }
    if (npuc__report_derive_warnings(s, info, d) != NPUC_OK) goto nomem;
    if (npuc__report_group_warnings(d) != NPUC_OK) goto nomem;
    return NPUC_OK;
nomem:
    npuc__report_doc_free(d);
    return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
}

void npuc__report_doc_free(npuc__report_doc *d) {
    if (!d) return;
    for (size_t i = 0; i < d->nwarnings; i++) free(d->warnings[i]);
    free(d->warnings);
    free(d->inputs);
    free(d->order);
    free(d->worst);
    memset(d, 0, sizeof *d);
}
