/*
 * h5_proto.c - framing, descriptor passing and payload coding for the
 * contained HDF5 reader (see h5_proto.h for the layout).
 */
#include "h5_proto.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

int npuc__h5p_send(int sock, uint32_t type, int32_t status, const void *p, uint64_t len, int passfd) {
    npuc_h5p_hdr h = {NPUC_H5P_MAGIC, type, status, 0, len};
    struct iovec iov[2] = {{&h, sizeof h}, {(void *)p, (size_t)len}};
    union {
        struct cmsghdr c;
        char b[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = len ? 2 : 1};
    if (passfd >= 0) {
        memset(&ctl, 0, sizeof ctl);
        mh.msg_control = ctl.b;
        mh.msg_controllen = sizeof ctl.b;
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &passfd, sizeof(int));
    }
    /* The first sendmsg carries the descriptor; what a short write leaves
     * goes out with plain iovecs. */
    while (mh.msg_iovlen) {
        ssize_t w = sendmsg(sock, &mh, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        mh.msg_control = NULL;
        mh.msg_controllen = 0;
        size_t left = (size_t)w;
        while (mh.msg_iovlen && left >= mh.msg_iov[0].iov_len) {
            left -= mh.msg_iov[0].iov_len;
            mh.msg_iov++;
            mh.msg_iovlen--;
        }
        if (mh.msg_iovlen) {
            mh.msg_iov[0].iov_base = (char *)mh.msg_iov[0].iov_base + left;
            mh.msg_iov[0].iov_len -= left;
        }
    }
    return 0;
}

int64_t npuc__h5p_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Reads exactly n bytes before the deadline (-1: none); a descriptor that
 * arrives is stored in *fd (later ones are closed). */
static int read_full(int sock, void *buf, size_t n, int64_t deadline, int *fd) {
    unsigned char *p = buf;
    while (n) {
        if (deadline >= 0) {
            int64_t left = deadline - npuc__h5p_now_ms();
            if (left <= 0) { errno = ETIMEDOUT; return -1; }
            struct pollfd pf = {sock, POLLIN, 0};
            int r = poll(&pf, 1, left > 1000000000 ? 1000000000 : (int)left);
            if (r < 0) {
                if (errno == EINTR) continue;
                return -1;
            }
            if (r == 0) { errno = ETIMEDOUT; return -1; }
        }
        union {
            struct cmsghdr c;
            char b[CMSG_SPACE(sizeof(int))];
        } ctl;
        struct iovec iov = {p, n};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
                            .msg_controllen = sizeof ctl.b};
        ssize_t r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
            size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t j = 0; j < k; j++) {
                int got;
                memcpy(&got, CMSG_DATA(c) + j * sizeof(int), sizeof got);
                if (*fd < 0) *fd = got;
                else close(got);
            }
        }
        if (r == 0) { errno = 0; return -1; }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

int npuc__h5p_recv(int sock, int timeout_ms, uint64_t cap, npuc_h5p_hdr *h, unsigned char **payload,
                   int *rxfd) {
    int64_t deadline = timeout_ms < 0 ? -1 : npuc__h5p_now_ms() + timeout_ms;
    int fd = -1;
    *payload = NULL;
    if (rxfd) *rxfd = -1;
    if (read_full(sock, h, sizeof *h, deadline, &fd) != 0) goto fail;
    if (h->magic != NPUC_H5P_MAGIC || h->zero != 0 || h->len > cap || h->len >= SIZE_MAX) {
        errno = EPROTO;
        goto fail;
    }
    if (h->len) {
        if (!(*payload = malloc((size_t)h->len + 1))) { errno = ENOMEM; goto fail; }
        if (read_full(sock, *payload, (size_t)h->len, deadline, &fd) != 0) goto fail;
        (*payload)[h->len] = 0;
    }
    if (rxfd) *rxfd = fd;
    else if (fd >= 0) close(fd);
    return 0;
fail:;
    int e = errno;
    free(*payload);
    *payload = NULL;
    if (fd >= 0) close(fd);
    errno = e;
    return -1;
}

/* ------------------------------------------------------------ coding */

static void put(npuc_h5p_enc *e, const void *p, size_t n) {
    if (e->oom) return;
    if (n > SIZE_MAX - e->n) { e->oom = 1; return; }
    if (e->n + n > e->cap) {
        size_t nc = e->cap ? e->cap : 4096;
        while (nc < e->n + n) {
            if (nc > SIZE_MAX / 2) { e->oom = 1; return; }
            nc *= 2;
        }
        unsigned char *q = realloc(e->p, nc);
        if (!q) { e->oom = 1; return; }
        e->p = q;
        e->cap = nc;
    }
    memcpy(e->p + e->n, p, n);
    e->n += n;
}

void npuc__h5p_put_u64(npuc_h5p_enc *e, uint64_t v) { put(e, &v, sizeof v); }

void npuc__h5p_put_str(npuc_h5p_enc *e, const char *s) {
    size_t n = strlen(s);
    npuc__h5p_put_u64(e, n);
    put(e, s, n + 1);
}

uint64_t npuc__h5p_get_u64(npuc_h5p_dec *d) {
    uint64_t v = 0;
    if (d->bad || d->n - d->off < sizeof v) { d->bad = 1; return 0; }
    memcpy(&v, d->p + d->off, sizeof v);
    d->off += sizeof v;
    return v;
}

const char *npuc__h5p_get_str(npuc_h5p_dec *d) {
    uint64_t n = npuc__h5p_get_u64(d);
    if (d->bad || n >= d->n - d->off) { d->bad = 1; return ""; }
    const char *s = (const char *)d->p + d->off;
    if (s[n] != 0 || memchr(s, 0, (size_t)n)) { d->bad = 1; return ""; }
    d->off += (size_t)n + 1;
    return s;
}

uint64_t npuc__h5p_get_count(npuc_h5p_dec *d, size_t min_item) {
    uint64_t n = npuc__h5p_get_u64(d);
    if (d->bad || (min_item && n > (d->n - d->off) / min_item)) { d->bad = 1; return 0; }
    return n;
}
