/*
 * h5_child.c - the contained HDF5 reader's child process (h5_worker.h).
 *
 * It runs right after fork() in a copy of the host process: single
 * threaded, so it touches only HDF5, malloc and this protocol (never OpenMP,
 * never the host's locks or stdio).  It asks to die with its parent
 * (PR_SET_PDEATHSIG), drops the host's signal handlers (a Ctrl-C handler
 * that removes the host's temp files must not run here) and descriptors,
 * writes no core files, and bounds its CPU time and address space before
 * each piece of work, so a spin or a runaway allocation in libhdf5 ends in
 * a signal the parent reports.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "h5_proto.h"
#include "h5_worker.h"

/* The address space in use now, or 0 when unknown. */
static uint64_t vm_bytes(void) {
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char b[64];
    ssize_t n = read(fd, b, sizeof b - 1);
    close(fd);
    if (n <= 0) return 0;
    b[n] = 0;
    unsigned long long pages = strtoull(b, NULL, 10);
    long ps = sysconf(_SC_PAGESIZE);
    return pages && ps > 0 ? pages * (uint64_t)ps : 0;
}

/* Lets the next piece of work use cpu_s more seconds of CPU and extra more
 * bytes of address space.  Only soft limits move (the hard ones stay as
 * inherited, so they can be raised again for the next tensor). */
static void set_limits(unsigned cpu_s, uint64_t extra) {
    struct rusage ru;
    const unsigned floor_s = npuc__h5_timeout_env();
    if (floor_s > cpu_s) cpu_s = floor_s;
    struct rlimit rl;
    if (getrusage(RUSAGE_SELF, &ru) == 0 && getrlimit(RLIMIT_CPU, &rl) == 0) {
        rlim_t used = (rlim_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                      (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec > 0);
        rlim_t want = used + cpu_s;
        if (rl.rlim_max != RLIM_INFINITY && want > rl.rlim_max) want = rl.rlim_max;
        rl.rlim_cur = want;
        setrlimit(RLIMIT_CPU, &rl);
    }
#if !defined(__SANITIZE_ADDRESS__)
    /* AddressSanitizer reserves terabytes of shadow address space: an
     * RLIMIT_AS would make every allocation fail, so sanitized builds go
     * without the memory cap (CPU and wall time still apply). */
    uint64_t vm = vm_bytes();
    if (vm && getrlimit(RLIMIT_AS, &rl) == 0) {
        uint64_t want = vm + extra;
        if (want < vm) want = UINT64_MAX;
        if (rl.rlim_max != RLIM_INFINITY && want > (uint64_t)rl.rlim_max) want = rl.rlim_max;
        rl.rlim_cur = want >= (uint64_t)RLIM_INFINITY ? RLIM_INFINITY : (rlim_t)want;
        setrlimit(RLIMIT_AS, &rl);
    }
#else
    (void)extra;
    (void)vm_bytes;
#endif
}

#define NPUC_H5_KEEP_FDS 256

/* The descriptors of the files this process's HDF5 has open (the host's
 * own, or npuc's writer's), or -1 when that cannot be told (too many, or a
 * driver other than sec2, whose handle is not a descriptor). */
static int hdf5_fds(int *fds, int cap) {
    npuc_h5_quiet q;
    int n = 0;
    npuc__h5_quiet_begin(&q);
    ssize_t cnt = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_FILE);
    hid_t ids[NPUC_H5_KEEP_FDS];
    if (cnt < 0 || cnt > cap || cnt > NPUC_H5_KEEP_FDS) n = -1;
    else if (cnt > 0 && H5Fget_obj_ids(H5F_OBJ_ALL, H5F_OBJ_FILE, (size_t)cnt, ids) != cnt) n = -1;
    for (ssize_t k = 0; n >= 0 && k < cnt; k++) {
        hid_t fapl = H5Fget_access_plist(ids[k]);
        hid_t drv = fapl < 0 ? H5I_INVALID_HID : H5Pget_driver(fapl);
        void *h = NULL;
        if (drv != H5FD_SEC2 || H5Fget_vfd_handle(ids[k], H5P_DEFAULT, &h) < 0 || !h) n = -1;
        else fds[n++] = *(int *)h;
        if (fapl >= 0) H5Pclose(fapl);
    }
    npuc__h5_quiet_end(&q);
    return n;
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Closes every descriptor above 2 except keep[0..n). */
static void close_except(int *keep, int n) {
    qsort(keep, (size_t)n, sizeof *keep, cmp_int);
    unsigned lo = 3;
    for (int k = 0; k <= n; k++) {
        unsigned hi = k < n ? (unsigned)keep[k] : ~0u;
        if (k < n && keep[k] < 3) continue;
        if (hi > lo && close_range(lo, hi - 1, 0) != 0) {
            long max = sysconf(_SC_OPEN_MAX);
            long end = max > 0 && max < 65536 ? max : 65536;
            for (long fd = lo; fd < end && (unsigned long)fd < hi; fd++) close((int)fd);
        }
        lo = hi + 1;
        if (hi == ~0u) break;
    }
}

static void detach(int *sock, pid_t parent) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(0); /* the parent died before the prctl */
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP) signal(s, SIG_DFL);
    /* Terminal signals go to the whole process group: the host decides what
     * Ctrl-C means, and the child goes when the host goes. */
    signal(SIGINT, SIG_IGN);
    signal(SIGQUIT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    struct rlimit core = {0, 0};
    setrlimit(RLIMIT_CORE, &core);
    /* stdin/stdout on /dev/null; every other inherited descriptor closed
     * (the child must not hold the host's output files, locks or pipe ends)
     * except stderr (sanitizer reports), the socket, and the files the
     * host's HDF5 has open: HDF5 shares one open file between H5Fopen calls
     * on the same inode, so the child's copy of the library may read through
     * those descriptors. */
    int keep[NPUC_H5_KEEP_FDS + 1];
    int nk = hdf5_fds(keep, NPUC_H5_KEEP_FDS);
    if (nk >= 0) keep[nk++] = *sock;
    int dn = open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd = 0; fd < 2 && dn >= 0; fd++) {
        int kept = fd == *sock || nk < 0;
        for (int k = 0; k < nk; k++) kept |= keep[k] == fd;
        if (!kept) dup2(dn, fd);
    }
    if (dn > 2) close(dn);
    if (nk >= 0) close_except(keep, nk); /* else: not known which, close nothing */
}

static void send_err(int sock, const npuc_ctx *c, npuc_status st) {
    const char *msg = c->msg;
    npuc__h5p_send(sock, NPUC_H5P_ERR, (int32_t)st, msg, strlen(msg), -1);
}

/* The model as the parent rebuilds it: style, groups, metadata, tensors. */
static int describe(npuc_h5p_enc *e, const npuc_model *m) {
    npuc__h5p_put_u64(e, (uint64_t)npuc_model_h5_style(m));
    npuc__h5p_put_u64(e, m->ngroups);
    for (size_t i = 0; i < m->ngroups; i++) npuc__h5p_put_str(e, m->groups[i]);
    npuc__h5p_put_u64(e, m->nmeta);
    for (size_t i = 0; i < m->nmeta; i++) {
        npuc__h5p_put_str(e, m->meta_k[i]);
        npuc__h5p_put_str(e, m->meta_v[i]);
    }
    npuc__h5p_put_u64(e, m->n);
    for (size_t i = 0; i < m->n; i++) {
        const npuc_tensor_info *t = &m->t[i];
        npuc__h5p_put_str(e, t->name);
        npuc__h5p_put_str(e, m->src[i] ? m->src[i] : "");
        npuc__h5p_put_u64(e, (uint64_t)t->dtype);
        npuc__h5p_put_u64(e, (uint64_t)t->rank);
        for (int k = 0; k < t->rank; k++) npuc__h5p_put_u64(e, (uint64_t)t->shape[k]);
        npuc__h5p_put_u64(e, t->group != NULL);
        if (t->group) npuc__h5p_put_str(e, t->group);
    }
    return e->oom ? -1 : 0;
}

/* The parent's shared buffers this child has mapped, by id. */
typedef struct bufmap {
    uint64_t id, cap;
    void *p;
} bufmap;
typedef struct buftab {
    bufmap *v;
    size_t n, cap;
} buftab;

static bufmap *buf_find(buftab *t, uint64_t id) {
    for (size_t k = 0; k < t->n; k++)
        if (t->v[k].id == id) return &t->v[k];
    return NULL;
}

static void buf_drop(buftab *t, uint64_t id) {
    bufmap *b = buf_find(t, id);
    if (!b) return;
    munmap(b->p, (size_t)b->cap);
    *b = t->v[--t->n];
}

/* Maps the buffer a new id names (its memfd came with the request). */
static bufmap *buf_add(buftab *t, uint64_t id, uint64_t cap, int fd) {
    if (t->n == t->cap) {
        size_t nc = t->cap ? 2 * t->cap : 8;
        bufmap *v = realloc(t->v, nc * sizeof *v);
        if (!v) return NULL;
        t->v = v;
        t->cap = nc;
    }
    /* MAP_POPULATE: the parent allocated the pages; map them in one go
     * instead of one fault per page during the read. */
    void *p = mmap(NULL, (size_t)cap, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) return NULL;
    t->v[t->n] = (bufmap){id, cap, p};
    return &t->v[t->n++];
}

/* Tells the parent how much of the tensor is in its buffer (a parent that
 * is gone makes the next send or recv end this process). */
static void send_progress(void *user, uint64_t done, uint64_t total) {
    (void)total;
    npuc__h5p_send(*(const int *)user, NPUC_H5P_PROGRESS, 0, &done, sizeof done, -1);
}

/* One tensor read into a shared buffer of the parent's. */
static void serve_load(int sock, npuc_model *m, buftab *bt, uint64_t headroom,
                       const unsigned char *p, uint64_t len, int fd) {
    npuc_ctx c = {0};
    uint64_t req[5];
    if (len != sizeof req) _exit(5); /* the parent never sends that */
    memcpy(req, p, sizeof req);
    npuc_status st;
    bufmap *b = buf_find(bt, req[2]);
    if (req[0] >= m->n || req[1] != m->t[req[0]].nbytes || req[3] < req[1] || req[3] > SIZE_MAX || req[4] > 1 ||
        (!b && fd < 0) || (b && (fd >= 0 || b->cap != req[3]))) {
        st = npuc_fail(&c, NPUC_ERR_INTERNAL, "%s: contained reader: bad tensor request", m->path);
        send_err(sock, &c, st);
        return;
    }
    const size_t i = (size_t)req[0];
    const uint64_t nb = m->t[i].nbytes;
    if (!b && !(b = buf_add(bt, req[2], req[3], fd))) {
        st = npuc_fail(&c, NPUC_ERR_NOMEM, "%s: tensor '%s': contained reader cannot map %llu bytes",
                       m->path, m->t[i].name, (unsigned long long)req[3]);
        send_err(sock, &c, st);
        return;
    }
    uint64_t extra = headroom;
    if (npuc_add_overflow(extra, 2 * nb, &extra)) extra = UINT64_MAX;
    set_limits(NPUC_H5_LOAD_CPU_S + (unsigned)(nb >> 24), extra);
    st = npuc__h5_read(&c, m, i, b->p, req[4] ? send_progress : NULL, &sock);
    if (st != NPUC_OK) send_err(sock, &c, st);
    else npuc__h5p_send(sock, NPUC_H5P_LOAD_OK, 0, NULL, 0, -1);
}

_Noreturn void npuc__h5_child_main(int sock, const char *path, uint64_t headroom, pid_t parent) {
    detach(&sock, parent);
    npuc_ctx c = {0};
    npuc_model *m = NULL;
    struct stat sb;
    uint64_t fsz = stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
    set_limits(NPUC_H5_OPEN_CPU_S + (unsigned)(fsz >> 28), headroom);
    npuc_status st = npuc__h5_scan(&c, path, &m);
    if (st != NPUC_OK) {
        send_err(sock, &c, st);
        _exit(0);
    }
    npuc_h5p_enc e = {0};
    if (describe(&e, m) != 0) {
        st = npuc_fail(&c, NPUC_ERR_NOMEM, "%s: out of memory in the contained HDF5 reader", path);
        send_err(sock, &c, st);
        _exit(0);
    }
    if (npuc__h5p_send(sock, NPUC_H5P_OPEN_OK, 0, e.p, e.n, -1) != 0) _exit(0);
    free(e.p);
    buftab bt = {0};
    for (;;) {
        npuc_h5p_hdr h;
        unsigned char *p;
        int fd;
        if (npuc__h5p_recv(sock, -1, 64, &h, &p, &fd) != 0) _exit(0); /* the parent closed */
        if (h.type == NPUC_H5P_LOAD) {
            serve_load(sock, m, &bt, headroom, p, h.len, fd);
        } else if (h.type == NPUC_H5P_DROP && h.len == sizeof(uint64_t)) {
            uint64_t id;
            memcpy(&id, p, sizeof id);
            buf_drop(&bt, id);
        } else {
            _exit(5);
        }
        free(p);
        if (fd >= 0) close(fd);
    }
}
