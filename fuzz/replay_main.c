/*
 * replay_main.c - runs a fuzz target's LLVMFuzzerTestOneInput on files,
 * without libFuzzer: the plain program CTest builds with any compiler and
 * runs over a target's checked-in corpus (fuzz/corpus/<target>/).
 *
 *     fuzz_replay_<target> [--timeout SECONDS] [--skip-unless-contained PROBE] PATH...
 *
 * Every regular file under each PATH (a directory is read one level deep,
 * in name order, skipping names that start with '.') is one input.  The
 * program exits 0 when every input returned (and there was at least one); a crash, a sanitizer report or
 * an input running longer than the timeout (default 60 s, or
 * $NPUC_FUZZ_REPLAY_TIMEOUT) fails it.  The name of each input is printed
 * before it runs, so a failure names its input.
 *
 * --skip-unless-contained PROBE replays the inputs only when PROBE (an input
 * known to crash or hang a library in process, such as a libhdf5 defect)
 * ends normally when run in a child process, i.e. when npuc contains that
 * library; otherwise, or when $NPUC_H5_INPROCESS is set, it exits 77
 * (CTest's skip) saying why.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *g_current = "";

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "replay: timeout on ";
    if (write(2, msg, sizeof msg - 1) < 0 || write(2, g_current, strlen(g_current)) < 0 || write(2, "\n", 1) < 0) {
    }
    _exit(1);
}

/* Reads a whole regular file; returns 0, or -1 with errno. */
static int slurp(const char *path, uint8_t **buf, size_t *len) {
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f) return -1;
    if (fstat(fileno(f), &st) != 0 || st.st_size < 0) {
        fclose(f);
        return -1;
    }
    size_t n = (size_t)st.st_size;
    uint8_t *b = malloc(n ? n : 1);
    size_t got = b ? fread(b, 1, n, f) : 0;
    int bad = !b || got != n || ferror(f);
    fclose(f);
    if (bad) {
        free(b);
        errno = b ? EIO : ENOMEM;
        return -1;
    }
    *buf = b;
    *len = n;
    return 0;
}

static int run_one(const char *path, unsigned timeout) {
    uint8_t *buf;
    size_t len;
    if (slurp(path, &buf, &len) != 0) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    printf("replay: %s (%zu bytes)\n", path, len);
    fflush(stdout);
    g_current = path;
    alarm(timeout);
    LLVMFuzzerTestOneInput(buf, len);
    alarm(0);
    free(buf);
    return 0;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Replays path (a file, or the files of a directory); adds to *count. */
static int run_path(const char *path, unsigned timeout, size_t *count) {
    struct stat s;
    if (stat(path, &s) != 0) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(s.st_mode)) {
        if (run_one(path, timeout) != 0) return -1;
        (*count)++;
        return 0;
    }
    DIR *d = opendir(path);
    if (!d) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn) {
                rc = -1;
                break;
            }
            names = nn;
        }
        if (!(names[n] = strdup(e->d_name))) {
            rc = -1;
            break;
        }
        n++;
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp_names);
    for (size_t i = 0; i < n; i++) {
        char *p = malloc(strlen(path) + strlen(names[i]) + 2);
        if (!p) {
            rc = -1;
        } else {
            sprintf(p, "%s/%s", path, names[i]);
            if (rc == 0 && stat(p, &s) == 0 && S_ISREG(s.st_mode)) {
                if (run_one(p, timeout) != 0) rc = -1;
                else (*count)++;
            }
            free(p);
        }
        free(names[i]);
    }
    free(names);
    if (rc) fprintf(stderr, "replay: %s: could not list or read every input\n", path);
    return rc;
}

/* 1 when probe ends normally in a child process within timeout seconds. */
static int probe_contained(const char *probe, unsigned timeout) {
    pid_t pid = fork();
    if (pid < 0) return 0;
    if (pid == 0) {
        uint8_t *buf;
        size_t len;
        if (slurp(probe, &buf, &len) != 0) _exit(2);
        LLVMFuzzerTestOneInput(buf, len);
        npuc_fuzz_cleanup(); /* _exit skips the exit handler that would */
        _exit(0);
    }
    int status = 0;
    for (unsigned ms = 0;; ms += 50) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (w < 0 || ms >= timeout * 1000u) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return 0;
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int main(int argc, char **argv) {
    unsigned timeout = 60;
    const char *env = getenv("NPUC_FUZZ_REPLAY_TIMEOUT");
    if (env && atoi(env) > 0) timeout = (unsigned)atoi(env);
    const char *probe = NULL;
    int i = 1;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0) {
            timeout = (unsigned)atoi(argv[++i]);
        } else if (strcmp(argv[i], "--skip-unless-contained") == 0 && i + 1 < argc) {
            probe = argv[++i];
        } else {
            break;
        }
    }
    if (i == argc) {
        fprintf(stderr, "usage: %s [--timeout SECONDS] [--skip-unless-contained PROBE] PATH...\n", argv[0]);
        return 2;
    }
    if (probe) {
        if (getenv("NPUC_H5_INPROCESS")) {
            printf("replay: skipped: NPUC_H5_INPROCESS is set, the library runs in process\n");
            return 77;
        }
        if (!probe_contained(probe, timeout)) {
            printf("replay: skipped: %s crashes or hangs in process: the library it reaches is not "
                   "contained in this build\n", probe);
            return 77;
        }
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    size_t count = 0;
    int rc = 0;
    for (; i < argc; i++)
        if (run_path(argv[i], timeout, &count) != 0) rc = 1;
    printf("replay: %zu inputs%s\n", count, rc ? ", with errors" : "");
    if (count == 0) {
        fprintf(stderr, "replay: no inputs found\n");
        return 1;
    }
    return rc;
}
