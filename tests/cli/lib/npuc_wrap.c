/*
 * npuc_wrap.c - the `npuc` every CLI test runs (cli_test.bash exports it as
 * NPUC_BIN).  It runs the real binary (NPUC_REAL_BIN) with the same
 * arguments and checks npuc's promise that inputs are never modified:
 *
 *   - Before the run, every argument that names an existing regular file,
 *     and every regular file below an argument that names a directory
 *     (`batch --input DIR`), is recorded: inode, size, mtime and ctime (ns)
 *     and a 64-bit hash of its bytes (of the first and last 64 MiB only
 *     above 1 GiB, where the ctime covers the rest: see hash_file).
 *     Outputs are not recorded: the values of -o/--output, --report, --summary, --merge-summaries and
 *     --budget-cache (a measurement file quantize reads and updates, docs/budget.md) (the
 *     options of npuc that name existing files it writes, see src/cli/cli_common.c and
 *     cmd_batch.c), anything below an output directory, and, with -f/--force
 *     only, an argument that is the same path as an output (the command
 *     replaces it legitimately).  Temp files of npuc (".NAME.npuc-*.tmp")
 *     inside input directories are skipped: the next run removes stale ones.
 *   - After the run every record is checked again.  A difference prints
 *     "INPUT MODIFIED: <file> (<what>)" on stderr, appends the same line to
 *     $NPUC_GUARD_DIR/log and makes the wrapper exit 97, whatever npuc
 *     returned.  cli_test.bash fails the test when that log is not empty, so
 *     a test that expects a failing exit code still notices.
 *
 * Memcheck (NPUC_VALGRIND=1, used by .ci/run): the first NPUC_VALGRIND_N
 * (default 1) invocations of each subcommand in a test, and at most
 * NPUC_VALGRIND_MAX in all per test (unset: no such cap), run under
 *   valgrind --error-exitcode=98 --leak-check=full
 *            --errors-for-leak-kinds=definite --log-file=DIR/vg/TAG.%p.log
 * (plus --suppressions=$NPUC_VALGRIND_SUPP).  npuc itself exits 1 or 2 on bad
 * input, so the exit code alone cannot tell a memory error: the wrapper reads
 * every log of the invocation (one per process, forked workers included)
 * and any "ERROR SUMMARY: N" with N > 0 is recorded in the guard log as
 * "VALGRIND ERRORS: <log>" and makes the wrapper exit 98.  Invocations are
 * claimed with mkdir(DIR/vg/SUBCMD.K), so the subset is deterministic for
 * the sequential part of a test and safe for concurrent runs.  A test sets
 * NPUC_VALGRIND=0 for a run it times (it is still guarded).
 *
 * Everything else is transparent: the exit code is npuc's, a death by
 * signal is re-raised, SIGINT/SIGTERM/SIGHUP/SIGQUIT/SIGUSR1/SIGUSR2 sent to
 * the wrapper are forwarded to npuc, and npuc is killed (PR_SET_PDEATHSIG)
 * if the wrapper is SIGKILLed.  Without NPUC_GUARD_DIR the log is skipped.
 * NPUC_WRAP_TRACE=FILE appends one line per invocation to FILE.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EXIT_MODIFIED 97
#define EXIT_VALGRIND 98
#define MAX_DEPTH 4
#define MAX_FILES 20000

typedef struct {
    char *path;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime, ctime;
    uint64_t hash;
} record;

static record *recs;
static size_t nrecs, caprecs;

typedef struct {
    dev_t dev;
    ino_t ino;
} file_id;

static file_id outs[64]; /* existing outputs (files or directories) */
static size_t nouts;
static const char *guard_dir;
static file_id guard_id;
static int have_guard_id;

static void die(const char *what) {
    fprintf(stderr, "npuc_wrap: %s: %s\n", what, strerror(errno));
    exit(125);
}

static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

/* A 64-bit multiply-rotate hash of 8-byte words: not cryptographic, but any
 * change of bytes npuc could make by accident changes it with probability
 * 1 - 2^-64, and it runs at several GB/s. */
static uint64_t mix(uint64_t h, uint64_t w) {
    h ^= w * 0x9E3779B97F4A7C15ull;
    return rotl(h, 31) * 0xC2B2AE3D27D4EB4Full + 0x165667B19E3779F9ull;
}

static uint64_t hash_bytes(uint64_t h, const unsigned char *p, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = mix(h, w);
    }
    uint64_t tail = 0;
    memcpy(&tail, p + i, n - i);
    return mix(h, tail ^ ((uint64_t)(n - i) << 56));
}

/* Hashes [from, to) of fd; returns 0 on success. */
static int hash_range(int fd, off_t from, off_t to, uint64_t *h) {
    static unsigned char buf[1 << 20];
    *h = mix(mix(*h, (uint64_t)from), (uint64_t)to);
    while (from < to) {
        size_t want = (size_t)(to - from < (off_t)sizeof buf ? to - from : (off_t)sizeof buf);
        ssize_t got = pread(fd, buf, want, from);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        *h = hash_bytes(*h, buf, (size_t)got);
        from += got;
    }
    return 0;
}

/* The hash of a file's bytes.  Sparse files (tests/cli/large_offsets.sh has
 * a 4 GiB hole) hash their data extents and the extents' places only, so
 * a hole costs nothing; filling a hole changes the extents, hence the hash.
 * Data beyond HASH_ALL bytes is hashed only in its first and last HASH_ENDS
 * bytes: there the ctime (which every write, truncate and utimes updates,
 * and no call can set back) stands for the middle of the file. */
#define HASH_ALL ((off_t)1 << 30)
#define HASH_ENDS ((off_t)64 << 20)
static int hash_file(const char *path, off_t size, uint64_t *out) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    uint64_t h = 0x243F6A8885A308D3ull ^ (uint64_t)size;
    off_t pos = 0, stop = size;
    int rc = 0;
    if (size > HASH_ALL) {
        stop = HASH_ENDS;
        rc = hash_range(fd, size - HASH_ENDS, size, &h);
    }
    while (rc == 0 && pos < stop) {
        off_t d = lseek(fd, pos, SEEK_DATA);
        if (d < 0 && errno == ENXIO) break; /* only a hole is left */
        if (d < 0) {                        /* no SEEK_DATA here: read it all */
            rc = hash_range(fd, pos, stop, &h);
            break;
        }
        if (d >= stop) break;
        off_t e = lseek(fd, d, SEEK_HOLE);
        if (e < 0 || e > stop) e = stop;
        if ((rc = hash_range(fd, d, e, &h)) != 0) break;
        pos = e;
    }
    close(fd);
    *out = h;
    return rc;
}

static int is_output_id(const struct stat *st) {
    for (size_t i = 0; i < nouts; i++)
        if (outs[i].dev == st->st_dev && outs[i].ino == st->st_ino) return 1;
    return 0;
}

static void add_record(const char *path, const struct stat *st) {
    for (size_t i = 0; i < nrecs; i++)
        if (recs[i].dev == st->st_dev && recs[i].ino == st->st_ino) return;
    if (nrecs >= MAX_FILES) return;
    if (nrecs == caprecs) {
        caprecs = caprecs ? 2 * caprecs : 16;
        recs = realloc(recs, caprecs * sizeof *recs);
        if (!recs) die("out of memory");
    }
    record *r = &recs[nrecs];
    if (hash_file(path, st->st_size, &r->hash) != 0) return; /* unreadable: not an input npuc can read either */
    r->path = strdup(path);
    if (!r->path) die("out of memory");
    r->dev = st->st_dev;
    r->ino = st->st_ino;
    r->size = st->st_size;
    r->mtime = st->st_mtim;
    r->ctime = st->st_ctim;
    nrecs++;
}

static int is_npuc_temp(const char *name) {
    size_t n = strlen(name);
    return name[0] == '.' && strstr(name, ".npuc-") && n > 4 && strcmp(name + n - 4, ".tmp") == 0;
}

static void scan_dir(const char *dir, int depth) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || is_npuc_temp(e->d_name)) continue;
        char *p;
        if (asprintf(&p, "%s/%s", dir, e->d_name) < 0) die("out of memory");
        struct stat st;
        if (lstat(p, &st) == 0 && !is_output_id(&st)) {
            if (S_ISREG(st.st_mode))
                add_record(p, &st);
            else if (S_ISDIR(st.st_mode) && depth < MAX_DEPTH &&
                     !(have_guard_id && st.st_dev == guard_id.dev && st.st_ino == guard_id.ino))
                scan_dir(p, depth + 1);
        }
        free(p);
    }
    closedir(d);
}

/* The value of an output option in argv[*i] ("-o V", "-oV", "--output V",
 * "--output=V"), advancing *i past a separate value; NULL if argv[*i] is not
 * an output option. */
static const char *output_value(int argc, char **argv, int *i) {
    static const char *const longs[] = {"--output", "--report", "--summary", "--merge-summaries", "--budget-cache"};
    const char *a = argv[*i];
    if (!strcmp(a, "-o")) return *i + 1 < argc ? argv[++*i] : NULL;
    if (!strncmp(a, "-o", 2) && a[1] == 'o') return a + 2;
    for (size_t k = 0; k < sizeof longs / sizeof *longs; k++) {
        size_t n = strlen(longs[k]);
        if (!strncmp(a, longs[k], n)) {
            if (a[n] == 0) return *i + 1 < argc ? argv[++*i] : NULL;
            if (a[n] == '=') return a + n + 1;
        }
    }
    return NULL;
}

static int is_force(const char *a) {
    if (!strcmp(a, "--force")) return 1;
    if (a[0] != '-' || a[1] == '-' || !strchr(a, 'f')) return 0;
    return strspn(a + 1, "qvfh") == strlen(a + 1); /* a cluster of flags: -qf */
}

static int same_path(const char *a, const char *b) {
    char *ra = realpath(a, NULL), *rb = realpath(b, NULL);
    int same = ra && rb && !strcmp(ra, rb);
    free(ra);
    free(rb);
    return same;
}

static void guard_log(const char *line) {
    fprintf(stderr, "%s\n", line);
    if (!guard_dir) return;
    char *p;
    if (asprintf(&p, "%s/log", guard_dir) < 0) return;
    FILE *f = fopen(p, "a");
    if (f) {
        fprintf(f, "%s\n", line);
        fclose(f);
    }
    free(p);
}

static pid_t child = -1;
static volatile sig_atomic_t pending;

static void forward(int sig) {
    if (child > 0)
        kill(child, sig);
    else
        pending = sig;
}

static const int FWD[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

/* Claims one of the test's NPUC_VALGRIND_MAX memcheck runs in all (unset or
 * 0: no limit besides NPUC_VALGRIND_N per subcommand); 1 when one was free. */
static int claim_total(const char *vg) {
    const char *ms = getenv("NPUC_VALGRIND_MAX");
    int max = ms && *ms ? atoi(ms) : 0;
    if (max <= 0) return 1;
    for (int k = 1; k <= max; k++) {
        char *p;
        if (asprintf(&p, "%s/all.%d", vg, k) < 0) return 0;
        int ok = mkdir(p, 0777) == 0;
        free(p);
        if (ok) return 1;
    }
    return 0;
}

/* Claims a valgrind slot for this invocation: returns its tag
 * ("SUBCMD.K") or NULL when this subcommand already had its N runs. */
static char *claim_valgrind(const char *sub) {
    const char *on = getenv("NPUC_VALGRIND");
    if (!on || strcmp(on, "1") || !guard_dir) return NULL;
    const char *ns = getenv("NPUC_VALGRIND_N");
    int n = ns && *ns ? atoi(ns) : 1;
    char clean[32];
    size_t j = 0;
    for (const char *s = sub; *s && j + 1 < sizeof clean; s++)
        clean[j++] = (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-' ? *s : '_';
    clean[j] = 0;
    if (!j) strcpy(clean, "none");
    char *vg;
    if (asprintf(&vg, "%s/vg", guard_dir) < 0) return NULL;
    mkdir(vg, 0777);
    for (int k = 1; k <= n; k++) {
        char *p;
        if (asprintf(&p, "%s/%s.%d", vg, clean, k) < 0) break;
        int ok = mkdir(p, 0777) == 0;
        if (ok && !claim_total(vg)) { /* the test's whole allowance is used */
            rmdir(p);
            free(p);
            break;
        }
        free(p);
        if (ok) {
            char *tag;
            if (asprintf(&tag, "%s.%d", clean, k) < 0) break;
            free(vg);
            return tag;
        }
    }
    free(vg);
    return NULL;
}

/* Scans DIR/vg/TAG.*.log; returns the number of logs with errors. */
static int valgrind_errors(const char *tag) {
    char *vg;
    if (asprintf(&vg, "%s/vg", guard_dir) < 0) return 0;
    DIR *d = opendir(vg);
    int bad = 0;
    size_t tl = strlen(tag);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, tag, tl) || e->d_name[tl] != '.' || !strstr(e->d_name + tl, ".log")) continue;
        char *p;
        if (asprintf(&p, "%s/%s", vg, e->d_name) < 0) continue;
        FILE *f = fopen(p, "r");
        char line[512];
        int found = 0, errors = 0;
        while (f && fgets(line, sizeof line, f)) {
            const char *s = strstr(line, "ERROR SUMMARY: ");
            if (s) {
                found = 1;
                if (atol(s + 15) > 0) errors = 1;
            }
        }
        if (f) fclose(f);
        /* A log with no summary is a process valgrind could not finish
         * (killed by a signal the test sent): nothing to judge. */
        if (found && errors) {
            char *msg;
            if (asprintf(&msg, "VALGRIND ERRORS: %s", p) >= 0) {
                guard_log(msg);
                free(msg);
            }
            bad++;
        }
        free(p);
    }
    if (d) closedir(d);
    free(vg);
    return bad;
}

int main(int argc, char **argv) {
    const char *real = getenv("NPUC_REAL_BIN");
    if (!real || !*real) {
        fprintf(stderr, "npuc_wrap: NPUC_REAL_BIN is not set\n");
        return 125;
    }
    guard_dir = getenv("NPUC_GUARD_DIR");
    if (guard_dir && !*guard_dir) guard_dir = NULL;
    struct stat gst;
    if (guard_dir && stat(guard_dir, &gst) == 0) {
        guard_id = (file_id){gst.st_dev, gst.st_ino};
        have_guard_id = 1;
    }

    /* Outputs first, so that inputs below them can be left out. */
    const char *outpaths[64];
    size_t nout = 0;
    int force = 0;
    char *is_out = calloc((size_t)argc + 1, 1);
    if (!is_out) die("out of memory");
    for (int i = 1; i < argc; i++) {
        int at = i;
        const char *v = output_value(argc, argv, &i);
        if (v) {
            is_out[i] = 1; /* the value's slot (== at for "-oV" / "--x=V") */
            if (nout < 64) outpaths[nout++] = v;
            struct stat st;
            if (nouts < 64 && stat(v, &st) == 0) outs[nouts++] = (file_id){st.st_dev, st.st_ino};
        } else if (is_force(argv[at])) {
            force = 1;
        }
    }
    for (int i = 1; i < argc; i++) {
        if (is_out[i]) continue;
        const char *a = argv[i];
        const char *eq = a[0] == '-' && a[1] == '-' ? strchr(a, '=') : NULL;
        if (eq) a = eq + 1; /* --pairs=FILE */
        struct stat st;
        if (!*a || stat(a, &st) != 0) continue;
        int replaced = 0;
        for (size_t k = 0; force && k < nout && !replaced; k++) replaced = same_path(a, outpaths[k]);
        if (replaced) continue;
        if (S_ISREG(st.st_mode))
            add_record(a, &st);
        else if (S_ISDIR(st.st_mode) && !is_output_id(&st) &&
                 !(have_guard_id && st.st_dev == guard_id.dev && st.st_ino == guard_id.ino))
            scan_dir(a, 1);
    }
    free(is_out);

    /* Memcheck looks for memory errors, which a small input shows as well
     * as a big one: with NPUC_VALGRIND_MAX_BYTES set, an invocation whose
     * input files total more bytes leaves its slot to a later, smaller one
     * (valgrind runs npuc some 20-50x slower, and a test's first call is
     * often its biggest). */
    off_t in_bytes = 0;
    for (size_t i = 0; i < nrecs; i++) in_bytes += recs[i].size;
    const char *vmax = getenv("NPUC_VALGRIND_MAX_BYTES");
    int vg_small = !(vmax && *vmax) || in_bytes <= (off_t)strtoll(vmax, NULL, 10);
    char *tag = vg_small ? claim_valgrind(argc > 1 ? argv[1] : "") : NULL;
    /* NPUC_WRAP_TRACE=FILE: one line per invocation (subcommand, files
     * recorded, memcheck tag or "-", input bytes, then after the run the
     * CPU and wall seconds of npuc and its children), to count what a
     * suite run checked and where its time goes. */
    const char *trace = getenv("NPUC_WRAP_TRACE");
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);

    sigset_t block, old;
    sigemptyset(&block);
    for (size_t k = 0; k < sizeof FWD / sizeof *FWD; k++) sigaddset(&block, FWD[k]);
    sigprocmask(SIG_BLOCK, &block, &old);
    /* Forward only what npuc would not ignore anyway (a background job of a
     * script starts with SIGINT ignored; exec keeps SIG_IGN for npuc). */
    for (size_t k = 0; k < sizeof FWD / sizeof *FWD; k++) {
        struct sigaction cur;
        sigaction(FWD[k], NULL, &cur);
        if (cur.sa_handler == SIG_IGN) continue;
        struct sigaction sa = {0};
        sa.sa_handler = forward;
        sigemptyset(&sa.sa_mask);
        sigaction(FWD[k], &sa, NULL);
    }

    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(137);
        sigprocmask(SIG_SETMASK, &old, NULL);
        if (tag) {
            const char *supp = getenv("NPUC_VALGRIND_SUPP");
            char *logopt = NULL, *suppopt = NULL;
            if (asprintf(&logopt, "--log-file=%s/vg/%s.%%p.log", guard_dir, tag) < 0) _exit(125);
            if (supp && *supp && asprintf(&suppopt, "--suppressions=%s", supp) < 0) _exit(125);
            char **av = calloc((size_t)argc + 16, sizeof *av);
            if (!av) _exit(125);
            int n = 0;
            av[n++] = "valgrind";
            av[n++] = "--error-exitcode=98";
            av[n++] = "--leak-check=full";
            av[n++] = "--errors-for-leak-kinds=definite";
            av[n++] = "--show-leak-kinds=definite";
            av[n++] = "--num-callers=40";
            av[n++] = logopt;
            if (suppopt) av[n++] = suppopt;
            av[n++] = (char *)real;
            for (int i = 1; i < argc; i++) av[n++] = argv[i];
            av[n] = NULL;
            execvp("valgrind", av);
            perror("npuc_wrap: valgrind");
            _exit(127);
        }
        argv[0] = (char *)real;
        execv(real, argv);
        fprintf(stderr, "npuc_wrap: %s: %s\n", real, strerror(errno));
        _exit(127);
    }
    child = pid;
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (pending) kill(child, pending);

    int status = 0;
    struct rusage ru = {0};
    while (wait4(pid, &status, 0, &ru) < 0)
        if (errno != EINTR) die("waitpid");
    FILE *tf = trace && *trace ? fopen(trace, "a") : NULL;
    if (tf) {
        struct timespec t1;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
                     ru.ru_stime.tv_usec * 1e-6;
        double wall = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
        fprintf(tf, "%s %s %zu %s %lld %.3f %.3f\n", guard_dir ? guard_dir : "-", argc > 1 ? argv[1] : "-", nrecs, tag ? tag : "-",
                (long long)in_bytes, cpu, wall);
        fclose(tf);
    }

    int modified = 0;
    for (size_t i = 0; i < nrecs; i++) {
        const record *r = &recs[i];
        struct stat st;
        const char *what = NULL;
        uint64_t h = 0;
        if (stat(r->path, &st) != 0)
            what = "removed";
        else if (st.st_dev != r->dev || st.st_ino != r->ino)
            what = "replaced by another file";
        else if (st.st_size != r->size)
            what = "size changed";
        else if (st.st_mtim.tv_sec != r->mtime.tv_sec || st.st_mtim.tv_nsec != r->mtime.tv_nsec)
            what = "mtime changed";
        else if (st.st_ctim.tv_sec != r->ctime.tv_sec || st.st_ctim.tv_nsec != r->ctime.tv_nsec)
            what = "ctime changed: written, truncated or its times set";
        else if (hash_file(r->path, st.st_size, &h) != 0 || h != r->hash)
            what = "bytes changed";
        if (what) {
            char *msg;
            if (asprintf(&msg, "INPUT MODIFIED: %s (%s) by: npuc %s", r->path, what, argc > 1 ? argv[1] : "") >= 0) {
                guard_log(msg);
                free(msg);
            }
            modified = 1;
        }
    }
    int vg_bad = tag ? valgrind_errors(tag) : 0;
    free(tag);
    if (modified) return EXIT_MODIFIED;
    if (vg_bad) return EXIT_VALGRIND;
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        signal(sig, SIG_DFL);
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, sig);
        sigprocmask(SIG_UNBLOCK, &one, NULL);
        raise(sig);
        return 128 + sig;
    }
    return WEXITSTATUS(status);
}
