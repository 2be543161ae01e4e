/*
 * h5_worker.c - the parent side of the contained HDF5 reader (h5_worker.h):
 * the registry's open for HDF5, and the model backend that asks the child
 * for each tensor.
 *
 * Open forks the child before this process makes any HDF5 call for the file
 * (npuc__h5_fork holds the HDF5 lock across fork, so the child's copy of the
 * library is consistent even when other threads use HDF5 for writing), waits
 * for the model description and rebuilds the model from it with the core's
 * builders.  Tensor bytes travel through shared buffers: sealed memfds
 * (sealed: the child cannot shrink one under our mapping, which would raise
 * SIGBUS here) whose pages we allocate up front (a shared-memory page fault
 * per 4 KiB in the child's read costs more than the copy), mapped here and,
 * after the descriptor is passed once, in the child.  As the safetensors
 * reader keeps one spare buffer, a released buffer is kept as the spare for
 * the next read, so a model read tensor by tensor creates and maps a buffer
 * only when a larger tensor comes.  One request at a time per model (a
 * mutex), since the socket carries one conversation.  When the caller's
 * context watches progress, a LOAD of a large tensor asks the child to
 * read in pieces and send a PROGRESS message after each (reply()).
 *
 * Everything the child sends is checked: the frame (h5_proto.c), the
 * description's counts, strings, dtypes, ranks and shapes, an error's status
 * and message.  A child that dies, overruns its wall time or sends garbage is
 * killed and reaped, and becomes one NPUC_ERR_FORMAT line naming the file.
 * NPUC_H5_INPROCESS=1 reads in this process instead (for debugging).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "h5_proto.h"
#include "h5_worker.h"

/* A shared buffer: a sealed memfd mapped here (and, once sent, in the child). */
typedef struct shbuf {
    uint64_t id, cap;
    int fd, sent;
    void *p;
} shbuf;

typedef struct h5_worker {
    pid_t pid; /* -1 once reaped */
    int sock;
    npuc_h5_style style;
    int dead;       /* the child is gone; why says how */
    char why[320];
    pthread_mutex_t mu;
    shbuf spare;    /* the one released buffer kept for the next read (p == NULL: none) */
    shbuf *used;    /* buffers handed out by w_load */
    size_t nused, capused;
    uint64_t next_id;
} h5_worker;

static npuc_status w_load(npuc_ctx *ctx, npuc_model *m, size_t i, void **data, int *owned);
static void w_close(npuc_model *m);
static void w_release(npuc_model *m, size_t i, void *data);
static const npuc_backend WORKER_BACKEND = {w_load, w_close, w_release, NULL, NULL};

/* ------------------------------------------------------------ the child's end */

unsigned npuc__h5_timeout_env(void) {
    const char *e = getenv("NPUC_H5_TIMEOUT");
    if (!e || !*e) return 0;
    char *end;
    unsigned long v = strtoul(e, &end, 10);
    return *end || v > 86400 ? 0 : (unsigned)v;
}

/* NPUC_H5_TIMEOUT when set, else dflt. */
static unsigned wall_limit(unsigned dflt) {
    unsigned v = npuc__h5_timeout_env();
    return v ? v : dflt;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* Reaps the child, waiting up to wait_ms for it to end by itself before
 * SIGKILL.  It is killed only while waitpid shows it is still our unreaped
 * child, so its pid cannot have been reused.  Returns 1 with *status when
 * known, 0 when someone else reaped it (SIGCHLD ignored by the host). */
static int reap(h5_worker *w, long wait_ms, int *status, int *killed) {
    *killed = 0;
    if (w->pid <= 0) return 0;
    pid_t pid = w->pid;
    w->pid = -1;
    for (long t = 0;; t += 5) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid) return 1;
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return 0;
        if (t >= wait_ms) break;
        sleep_ms(5);
    }
    kill(pid, SIGKILL);
    *killed = 1;
    while (waitpid(pid, status, 0) < 0)
        if (errno != EINTR) return 0;
    return 1;
}

typedef enum death { DEATH_EOF, DEATH_TIMEOUT, DEATH_GARBAGE, DEATH_IO } death;

/* Ends the child and records in w->why what happened, in words a user can act on. */
static void bury(h5_worker *w, death how, unsigned wall_s) {
    int status = 0, killed = 0, known;
    if (w->sock >= 0) {
        close(w->sock);
        w->sock = -1;
    }
    known = reap(w, how == DEATH_EOF ? 2000 : 0, &status, &killed);
    w->dead = 1;
    if (how == DEATH_TIMEOUT)
        snprintf(w->why, sizeof w->why,
                 "the HDF5 library did not finish within %u s in the contained reader and was "
                 "stopped; the file is damaged or hostile (NPUC_H5_TIMEOUT=SECONDS allows longer)",
                 wall_s);
    else if (how == DEATH_GARBAGE)
        snprintf(w->why, sizeof w->why,
                 "the contained HDF5 reader sent a malformed reply; the file is damaged or hostile");
    else if (how == DEATH_IO)
        snprintf(w->why, sizeof w->why, "lost contact with the contained HDF5 reader (%s)",
                 strerror(errno));
    else if (known && !killed && WIFSIGNALED(status) && WTERMSIG(status) == SIGXCPU)
        snprintf(w->why, sizeof w->why,
                 "the HDF5 library exceeded its CPU-time limit reading this file (contained reader "
                 "stopped); the file is damaged or hostile");
    else if (known && !killed && WIFSIGNALED(status))
        snprintf(w->why, sizeof w->why,
                 "the HDF5 library crashed reading this file (signal %d in the contained reader); "
                 "the file is damaged or hostile",
                 WTERMSIG(status));
    else if (known && !killed && WIFEXITED(status))
        snprintf(w->why, sizeof w->why,
                 "the contained HDF5 reader exited unexpectedly (status %d); the file is damaged or "
                 "hostile",
                 WEXITSTATUS(status));
    else
        snprintf(w->why, sizeof w->why,
                 "the contained HDF5 reader ended unexpectedly; the file is damaged or hostile");
}

/* What a failed recv means. */
static death recv_death(void) {
    return errno == 0 || errno == ECONNRESET || errno == EPIPE ? DEATH_EOF : errno == ETIMEDOUT ? DEATH_TIMEOUT : errno == EPROTO ? DEATH_GARBAGE : DEATH_IO;
}

/* The child's error reply as this ctx's error: a known error status and a
 * message made printable (one line, bounded). */
static npuc_status child_error(npuc_ctx *ctx, h5_worker *w, const npuc_h5p_hdr *h,
                               unsigned char *msg) {
    if (h->status <= (int32_t)NPUC_OK || h->status > (int32_t)NPUC_ERR_GATE || !msg) {
        bury(w, DEATH_GARBAGE, 0);
        return NPUC_ERR_FORMAT; /* the caller adds the message */
    }
    size_t n = (size_t)h->len;
    if (n > NPUC_MSG_MAX - 1) n = NPUC_MSG_MAX - 1;
    msg[n] = 0;
    int utf8 = npuc__utf8_valid((const char *)msg, n);
    for (size_t k = 0; k < n; k++)
        if (msg[k] < 0x20 || msg[k] == 0x7f || (!utf8 && msg[k] >= 0x80)) msg[k] = '?';
    return npuc_fail(ctx, (npuc_status)h->status, "%s", (const char *)msg);
}

/* ------------------------------------------------------------ open */

/* Rebuilds m from the child's description; 0, or -1 when it is malformed
 * (the caller reports garbage) with *st set for a failure of our own. */
static int rebuild(npuc_ctx *ctx, npuc_model *m, const unsigned char *p, size_t n,
                   npuc_h5_style *style, npuc_status *st) {
    npuc_h5p_dec d = {p, n, 0, 0};
    *st = NPUC_OK;
    uint64_t sty = npuc__h5p_get_u64(&d);
    if (d.bad || sty > NPUC_H5_KERAS3) return -1;
    *style = (npuc_h5_style)sty;
    uint64_t ng = npuc__h5p_get_count(&d, 9);
    for (uint64_t k = 0; k < ng && !d.bad; k++) {
        const char *g = npuc__h5p_get_str(&d);
        if (d.bad || !npuc__utf8_valid(g, strlen(g))) return -1;
        if ((*st = npuc__model_add_group(ctx, m, g)) != NPUC_OK) return -1;
    }
    uint64_t nm = npuc__h5p_get_count(&d, 18);
    for (uint64_t k = 0; k < nm && !d.bad; k++) {
        const char *key = npuc__h5p_get_str(&d), *v = npuc__h5p_get_str(&d);
        if (d.bad || !npuc__utf8_valid(key, strlen(key)) || !npuc__utf8_valid(v, strlen(v))) return -1;
        if ((*st = npuc__model_add_meta(ctx, m, key, v)) != NPUC_OK) return -1;
    }
    uint64_t nt = npuc__h5p_get_count(&d, 42);
    if (d.bad || nt > NPUC_H5_MAX_OBJECTS) return -1;
    for (uint64_t k = 0; k < nt; k++) {
        const char *name = npuc__h5p_get_str(&d), *src = npuc__h5p_get_str(&d);
        uint64_t dt = npuc__h5p_get_u64(&d), rank = npuc__h5p_get_u64(&d);
        int64_t shape[NPUC_MAX_RANK] = {0};
        if (d.bad || dt >= NPUC_DTYPE_COUNT || rank > NPUC_MAX_RANK) return -1;
        for (uint64_t r = 0; r < rank; r++) {
            uint64_t v = npuc__h5p_get_u64(&d);
            if (v > (uint64_t)INT64_MAX) return -1;
            shape[r] = (int64_t)v;
        }
        uint64_t has_group = npuc__h5p_get_u64(&d);
        const char *group = has_group == 1 ? npuc__h5p_get_str(&d) : NULL;
        if (d.bad || has_group > 1 || !npuc__utf8_valid(name, strlen(name)) ||
            (group && !npuc__utf8_valid(group, strlen(group))))
            return -1;
        size_t idx;
        if ((*st = npuc__model_add(ctx, m, name, (npuc_dtype)dt, (int)rank, shape, group, &idx)) !=
            NPUC_OK)
            return -1;
        if (!(m->src[idx] = npuc__strdup(src))) {
            *st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", m->path);
            return -1;
        }
    }
    return d.bad || d.off != d.n ? -1 : 0;
}

static npuc_status open_contained(npuc_ctx *ctx, const char *path, const npuc_h5_as *as,
                                  npuc_model **out) {
    struct stat sb;
    if (stat(path, &sb) != 0) return npuc_fail(ctx, NPUC_ERR_IO, "%s: cannot stat", path);
    const uint64_t fsz = (uint64_t)sb.st_size;
    h5_worker *w = calloc(1, sizeof *w);
    if (!w) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
    w->pid = -1;
    w->sock = -1;
    pthread_mutex_init(&w->mu, NULL);
    npuc_model *m = NULL;
    npuc_status st = NPUC_OK;
    unsigned char *p = NULL;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        st = npuc_fail(ctx, NPUC_ERR_IO, "%s: cannot start the contained HDF5 reader (socketpair: %s)",
                       path, strerror(errno));
        goto fail;
    }
    uint64_t headroom = npuc_ctx_max_memory(ctx);
    if (headroom < NPUC_H5_HEADROOM) headroom = NPUC_H5_HEADROOM;
    const pid_t parent = getpid();
    pid_t pid = npuc__h5_fork();
    if (pid == 0) {
        close(sv[0]);
        npuc__h5_child_main(sv[1], path, headroom, parent);
    }
    close(sv[1]);
    w->sock = sv[0];
    if (pid < 0) {
        st = npuc_fail(ctx, NPUC_ERR_IO, "%s: cannot start the contained HDF5 reader (fork: %s)",
                       path, strerror(errno));
        goto fail;
    }
    w->pid = pid;
    const unsigned wall = wall_limit(NPUC_H5_OPEN_WALL_S + (unsigned)(fsz >> 26));
    npuc_h5p_hdr h;
    if (npuc__h5p_recv(w->sock, (int)(wall * 1000u), NPUC_H5_MAX_DESCRIPTION, &h, &p, NULL) != 0) {
        bury(w, recv_death(), wall);
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: %s", path, w->why);
        goto fail;
    }
    if (h.type == NPUC_H5P_ERR) {
        st = child_error(ctx, w, &h, p);
        if (w->dead) st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: %s", path, w->why);
        goto fail;
    }
    if (h.type != NPUC_H5P_OPEN_OK || h.status != 0) {
        bury(w, DEATH_GARBAGE, 0);
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: %s", path, w->why);
        goto fail;
    }
    if (!(m = npuc__model_new(path, NPUC_FORMAT_HDF5))) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    m->file_size = fsz;
    if (rebuild(ctx, m, p, (size_t)h.len, &w->style, &st) != 0) {
        if (st == NPUC_OK) {
            bury(w, DEATH_GARBAGE, 0);
            st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: %s", path, w->why);
        }
        goto fail;
    }
    free(p);
    p = NULL;
    m->be = &WORKER_BACKEND;
    m->be_state = w;
    w = NULL; /* the model owns it now: closing m ends the child */
    if ((st = npuc__h5_adopt(ctx, m, as)) != NPUC_OK ||
        (st = npuc__model_finish(ctx, m, npuc__h5_keras_rules(m, npuc_model_h5_style(m)))) != NPUC_OK)
        goto fail;
    *out = m;
    return NPUC_OK;
fail:
    free(p);
    npuc_model_close(m);
    if (w) {
        int status, killed;
        if (w->sock >= 0) close(w->sock);
        reap(w, 0, &status, &killed);
        pthread_mutex_destroy(&w->mu);
        free(w);
    }
    return st;
}

npuc_status npuc__h5_open(npuc_ctx *ctx, const char *path, const npuc_open_opts *o,
                          npuc_model **out) {
    (void)o;
    *out = NULL;
    return npuc__h5_open_as(ctx, path, NULL, out);
}

npuc_status npuc__h5_open_as(npuc_ctx *ctx, const char *path, const npuc_h5_as *as, npuc_model **out) {
    *out = NULL;
    const char *e = getenv("NPUC_H5_INPROCESS");
    if (e && strcmp(e, "1") == 0) return npuc__h5_open_inprocess(ctx, path, as, out);
    return open_contained(ctx, path, as, out);
}

/* ------------------------------------------------------------ backend */

/* Unmaps and closes b, and tells a live child to unmap it too. */
static void shbuf_destroy(h5_worker *w, shbuf *b) {
    if (!b->p) return;
    munmap(b->p, (size_t)b->cap);
    close(b->fd);
    if (b->sent && !w->dead && w->sock >= 0)
        npuc__h5p_send(w->sock, NPUC_H5P_DROP, 0, &b->id, sizeof b->id, -1);
    memset(b, 0, sizeof *b);
}

/* A new buffer of at least len bytes (64 KiB granules, so tensors of
 * similar sizes share one), its pages allocated and mapped. */
static int shbuf_new(h5_worker *w, size_t len, shbuf *b) {
    const size_t gran = (size_t)64 << 10;
    if (len > SIZE_MAX - gran) { errno = ENOMEM; return -1; }
    size_t cap = (len + gran - 1) / gran * gran;
    memset(b, 0, sizeof *b);
    b->fd = memfd_create("npuc-h5-tensor", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (b->fd < 0) return -1;
    if (ftruncate(b->fd, (off_t)cap) != 0 || fallocate(b->fd, 0, 0, (off_t)cap) != 0 ||
        fcntl(b->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
        goto fail;
    b->p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, b->fd, 0);
    if (b->p == MAP_FAILED) goto fail;
    b->cap = cap;
    b->id = ++w->next_id;
    return 0;
fail:;
    int e = errno;
    close(b->fd);
    memset(b, 0, sizeof *b);
    errno = e;
    return -1;
}

/* Keeps a buffer no longer handed out: as the spare when it is the larger. */
static void shbuf_put(h5_worker *w, shbuf *b) {
    if (w->spare.p && w->spare.cap >= b->cap) {
        shbuf_destroy(w, b);
        return;
    }
    shbuf_destroy(w, &w->spare);
    w->spare = *b;
}

/* Waits for the child's reply to a LOAD of t, passing the progress messages
 * before it to ctx's progress function (want: LOAD asked for them).  The
 * tensor's wall time counts from here for all of it: progress does not
 * extend it.  A progress message must come only when asked, carry a count
 * larger than the last and at most t's bytes, and come at most 8 times per
 * NPUC_PROGRESS_STEP (the child sends one per piece of about a STEP), else
 * the child is babbling.  0 with the reply in *h, *p; -1 with the child
 * buried (w->why says how). */
static int reply(npuc_ctx *ctx, h5_worker *w, const npuc_tensor_info *t, unsigned wall, int want,
                 npuc_h5p_hdr *h, unsigned char **p) {
    const int64_t deadline = npuc__h5p_now_ms() + (int64_t)wall * 1000;
    const uint64_t most = 8 * (t->nbytes / NPUC_PROGRESS_STEP) + 8;
    uint64_t last = 0, count = 0;
    for (;;) {
        const int64_t left = deadline - npuc__h5p_now_ms();
        if (npuc__h5p_recv(w->sock, left <= 0 ? 0 : left > 2000000000 ? 2000000000 : (int)left, NPUC_MSG_MAX, h, p,
                           NULL) != 0) {
            bury(w, recv_death(), wall);
            return -1;
        }
        if (h->type != NPUC_H5P_PROGRESS) return 0;
        uint64_t done = 0;
        if (h->len == sizeof done) memcpy(&done, *p, sizeof done);
        free(*p);
        *p = NULL;
        if (!want || h->status != 0 || h->len != sizeof done || done <= last || done > t->nbytes || ++count > most) {
            bury(w, DEATH_GARBAGE, wall);
            return -1;
        }
        last = done;
        npuc__progress(ctx, NPUC_PROGRESS_READ, done, t->nbytes);
    }
}

static npuc_status w_load(npuc_ctx *ctx, npuc_model *m, size_t i, void **data, int *owned) {
    h5_worker *w = m->be_state;
    const npuc_tensor_info *t = &m->t[i];
    if (t->nbytes > SIZE_MAX - 1)
        return npuc_fail(ctx, NPUC_ERR_OVERFLOW, "%s: tensor '%s': too large for memory", m->path, t->name);
    const size_t len = t->nbytes ? (size_t)t->nbytes : 1;
    const unsigned wall = wall_limit(NPUC_H5_LOAD_WALL_S + (unsigned)(t->nbytes >> 22));
    npuc_status st = NPUC_OK;
    unsigned char *p = NULL;
    shbuf b = {0};
    pthread_mutex_lock(&w->mu);
    if (w->dead) {
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': %s", m->path, t->name, w->why);
        goto done;
    }
    if (w->nused == w->capused) {
        size_t nc = w->capused ? 2 * w->capused : 8;
        shbuf *v = realloc(w->used, nc * sizeof *v);
        if (!v) {
            st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", m->path);
            goto done;
        }
        w->used = v;
        w->capused = nc;
    }
    if (w->spare.p && w->spare.cap >= len) {
        b = w->spare;
        memset(&w->spare, 0, sizeof w->spare);
    } else if (shbuf_new(w, len, &b) != 0) {
        st = npuc_fail(ctx, errno == ENOMEM || errno == ENOSPC ? NPUC_ERR_NOMEM : NPUC_ERR_IO,
                       "%s: tensor '%s': cannot create %zu bytes of shared memory (%s)", m->path,
                       t->name, len, strerror(errno));
        goto done;
    }
    /* Progress comes from the child between the request and its reply. */
    const int want = ctx && ctx->progress && t->nbytes >= NPUC_PROGRESS_MIN;
    const uint64_t req[5] = {i, t->nbytes, b.id, b.cap, (uint64_t)want};
    if (npuc__h5p_send(w->sock, NPUC_H5P_LOAD, 0, req, sizeof req, b.sent ? -1 : b.fd) != 0) {
        bury(w, errno == EPIPE || errno == ECONNRESET ? DEATH_EOF : DEATH_IO, wall);
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': %s", m->path, t->name, w->why);
        goto done;
    }
    b.sent = 1;
    npuc_h5p_hdr h;
    if (reply(ctx, w, t, wall, want, &h, &p) != 0) {
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': %s", m->path, t->name, w->why);
        goto done;
    }
    if (h.type == NPUC_H5P_ERR) {
        st = child_error(ctx, w, &h, p);
        if (w->dead) st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': %s", m->path, t->name, w->why);
        goto done;
    }
    if (h.type != NPUC_H5P_LOAD_OK || h.status != 0 || h.len != 0) {
        bury(w, DEATH_GARBAGE, wall);
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': %s", m->path, t->name, w->why);
        goto done;
    }
    w->used[w->nused++] = b;
    *data = b.p;
    *owned = 0;
    b.p = NULL;
done:
    if (b.p) shbuf_put(w, &b);
    pthread_mutex_unlock(&w->mu);
    free(p);
    return st;
}

static void w_release(npuc_model *m, size_t i, void *data) {
    h5_worker *w = m->be_state;
    (void)i;
    pthread_mutex_lock(&w->mu);
    for (size_t k = 0; k < w->nused; k++) {
        if (w->used[k].p != data) continue;
        shbuf b = w->used[k];
        w->used[k] = w->used[--w->nused];
        shbuf_put(w, &b);
        break;
    }
    pthread_mutex_unlock(&w->mu);
}

static void w_close(npuc_model *m) {
    h5_worker *w = m->be_state;
    if (!w) return;
    int status, killed;
    if (w->sock >= 0) close(w->sock);
    w->sock = -1;
    /* The child is idle between requests and holds nothing worth keeping:
     * no need to wait for it to notice the closed socket. */
    reap(w, 0, &status, &killed);
    w->dead = 1;
    shbuf_destroy(w, &w->spare);
    for (size_t k = 0; k < w->nused; k++) shbuf_destroy(w, &w->used[k]);
    free(w->used);
    pthread_mutex_destroy(&w->mu);
    free(w);
    m->be_state = NULL;
}

int npuc__h5_worker_style(const npuc_model *m, npuc_h5_style *style) {
    if (!m || m->be != &WORKER_BACKEND || !m->be_state) return 0;
    *style = ((const h5_worker *)m->be_state)->style;
    return 1;
}

pid_t npuc__h5_worker_pid(const npuc_model *m) {
    if (!m || m->be != &WORKER_BACKEND || !m->be_state) return -1;
    return ((const h5_worker *)m->be_state)->pid;
}
