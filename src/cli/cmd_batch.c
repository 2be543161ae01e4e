/*
 * cmd_batch.c - `npuc batch`: one recipe over every weight file of a folder
 * or a list, each output at the mirrored path with its report beside it.
 *
 * Each file runs in its own forked worker process, at most -j at a time.
 * Processes rather than threads because the serial HDF5 library is not
 * thread-safe, and because a file that crashes a worker then fails alone:
 * the parent records "crashed (signal N)" and goes on.  A worker sends its
 * result to the parent as one small JSON object through a pipe, then exits.
 * Workers die with the parent (PR_SET_PDEATHSIG), so killing `npuc batch`
 * leaves no orphan writing into the output folder.
 *
 * What makes a killed run resumable: an output appears only through
 * rename() after its report is written (npuc_run_opts.before_commit), and
 * it records the recipe and input hashes; `--resume` skips an output whose
 * hashes match, and every worker first sweeps the temporary files a killed
 * run may have left for its output (npuc_recipe_sweep).
 *
 * The summary (schema npuc.batch/1, docs/cli.md#npuc-batch) lists files in
 * the sorted order of the work list, with no timestamps or durations, so
 * the same zoo gives the same summary for any -j, and the summaries of the
 * shards of a zoo merge (--merge-summaries) into the unsharded one.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "cli_common.h"
#include "cli_outputs.h"
#include "cli_progress.h"

enum { OPT_INPUT = CLI_OPT_USER, OPT_RESUME, OPT_SHARD, OPT_SUMMARY, OPT_MERGE, OPT_TSIZE, OPT_TBPW, OPT_CAND };

static const cli_option OPTIONS[] = {
    {"input", 'i', 1, OPT_INPUT},
    {"resume", 0, 0, OPT_RESUME},
    {"shard", 0, 1, OPT_SHARD},
    {"summary", 0, 1, OPT_SUMMARY},
    {"merge-summaries", 0, 1, OPT_MERGE},
    {"target-size", 0, 1, OPT_TSIZE},
    {"target-bpw", 0, 1, OPT_TBPW},
    {"candidates", 0, 1, OPT_CAND},
    {NULL, 0, 0, 0},
};

typedef struct bargs {
    const char *input, *summary, *merge;
    /* A budget for the recipe's quantize step (docs/budget.md), set on the
     * recipe itself (npuc_recipe_set_option): its hash covers it. */
    const char *target_size, *target_bpw, *candidates;
    int resume;
    long shard_k, shard_n; /* shard_n 0: no --shard */
} bargs;

static int on_opt(cli_args *a, void *ud, int id, const char *arg) {
    bargs *b = ud;
    (void)a;
    switch (id) {
    case OPT_INPUT: b->input = arg; break;
    case OPT_RESUME: b->resume = 1; break;
    case OPT_SUMMARY: b->summary = arg; break;
    case OPT_MERGE: b->merge = arg; break;
    case OPT_TSIZE: b->target_size = arg; break;
    case OPT_TBPW: b->target_bpw = arg; break;
    case OPT_CAND: b->candidates = arg; break;
    case OPT_SHARD: {
        char *end;
        errno = 0;
        long k = strtol(arg, &end, 10);
        long n = (*end == '/' && end > arg) ? strtol(end + 1, &end, 10) : -1;
        if (errno || *end || n < 1 || n > 1000000 || k < 0 || k >= n)
            return cli_usage_error(&cli_cmd_batch, "--shard '%s': expected K/N with 0 <= K < N", arg);
        b->shard_k = k;
        b->shard_n = n;
        break;
    }
    }
    return CLI_CONTINUE;
}

/* ------------------------------------------------------------ files */

/* Creates every missing folder of path's parent ("a/b/c.st" -> a, a/b). */
static int mkdir_parents(const char *path) {
    char *p = strdup(path);
    if (!p) return -1;
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            free(p);
            return -1;
        }
        *s = '/';
    }
    free(p);
    return 0;
}

/* One file's line on stdout: its status, name, sizes and error. */
static void print_line(json_t *e, const char *rel) {
    const char *stt = json_string_value(json_object_get(e, "status"));
    char b1[CLI_FMT_MAX], b2[CLI_FMT_MAX];
    json_t *is = json_object_get(e, "input_size"), *os = json_object_get(e, "output_size");
    printf("%-8s %s", stt ? stt : "?", rel);
    if (json_is_integer(is) && json_is_integer(os))
        printf("  %s -> %s", cli_fmt_size((uint64_t)json_integer_value(is), b1),
               cli_fmt_size((uint64_t)json_integer_value(os), b2));
    json_t *bud = json_object_get(e, "budget"), *met = json_object_get(bud, "met");
    if (json_is_boolean(met)) {
        json_t *bpw = json_object_get(bud, "bpw");
        if (json_is_number(bpw))
            printf("  %.3f bpw (target %g): %s", json_number_value(bpw),
                   json_number_value(json_object_get(bud, "target_bpw")), json_is_true(met) ? "met" : "NOT met");
        else
            printf("  (target %s = %s: %s)", json_string_value(json_object_get(bud, "target_size")),
                   cli_fmt_size((uint64_t)json_integer_value(json_object_get(bud, "target_bytes")), b1),
                   json_is_true(met) ? "met" : "NOT met");
    }
    if (stt && !strcmp(stt, "failed")) printf("  %s", json_string_value(json_object_get(e, "error")));
    putchar('\n');
}

/* Writes doc to path as an atomic file (cli_outputs.h): 0, or -1 and errno. */
static int write_json_file(const char *path, json_t *doc) {
    cli_side_file sf;
    FILE *f = cli_side_open(path, &sf);
    if (!f) return -1;
    int ok = json_dumpf(doc, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER) == 0 && fputc('\n', f) != EOF;
    return cli_side_close(&sf, ok);
}

static char *join(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 2;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s/%s", a, b);
    return s;
}

static char *suffixed(const char *a, const char *suffix) {
    size_t n = strlen(a) + strlen(suffix) + 1;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s%s", a, suffix);
    return s;
}

/* ------------------------------------------------------------ one file (worker) */

typedef struct job {
    const npuc_recipe *rc;
    const char *recipe_path;
    const char *in, *out, *report;
    int resume, force;
    const npuc_policy *policy; /* --strict, gates: a file failing a gate has exit_code 3 */
    const bargs *budget;       /* --target-size / --target-bpw (NULL members: none) */
    const char *command;       /* with a budget: the batch's command line, for the reports */
} job;

static npuc_status write_report(void *user, npuc_ctx *ctx, const npuc_summary *s) {
    const job *j = user;
    /* The equivalent single-file command, so each report can be reproduced. */
    char *argv[5] = {"run", (char *)j->recipe_path, (char *)j->in, "-o", (char *)j->out};
    /* With --target-size/--target-bpw no single-file command has the budget:
     * the batch's own command line (the recipe in the report has it). */
    char *cmd = j->command ? strdup(j->command) : cli_join_command(5, argv);
    npuc_report_info info = npuc_report_info_defaults();
    const char *inputs[1] = {j->in};
    char *pj = npuc_recipe_params_json(j->rc, s, NULL);
    info.command_line = cmd;
    info.inputs = inputs;
    info.ninputs = 1;
    info.output = j->out;
    info.params_json = pj;
    info.threads = 1;
    npuc_status st = npuc_report_write_file(ctx, j->report, NPUC_REPORT_JSON, s, &info);
    free(pj);
    free(cmd);
    return st;
}

/* The bytes of path: a file's size, or the sum of the regular files at the
 * top of a checkpoint directory. */
static long long path_bytes(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) return -1;
    if (!S_ISDIR(sb.st_mode)) return (long long)sb.st_size;
    long long total = 0;
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        if (e->d_name[0] != '.' && fstatat(dirfd(d), e->d_name, &sb, 0) == 0 && S_ISREG(sb.st_mode)) total += sb.st_size;
    if (d) closedir(d);
    return total;
}

/* The totals an earlier run wrote into the report beside a skipped output. */
static void totals_from_report(const char *report, json_t *res) {
    json_t *doc = json_load_file(report, 0, NULL);
    json_t *tot = json_object_get(doc, "totals");
    const char *keys[] = {"tensors", "bytes_before", "bytes_after"};
    for (int i = 0; i < 3; i++) {
        json_t *v = json_object_get(tot, keys[i]);
        if (json_is_integer(v)) json_object_set(res, keys[i], v);
    }
    json_t *sq = json_object_get(tot, "weighted_sqnr_db");
    if (json_is_number(sq)) json_object_set(res, "weighted_sqnr_db", sq);
    json_decref(doc);
}

/* The "budget" member of a file's result: the target, what was reached and
 * whether it holds.  --target-size: N% is of this input's file size (as the
 * quantize step takes it when it is the recipe's first step), and the output
 * file's size is compared with it; --target-bpw: the quantized tensors' bits
 * per weight (their bytes after, scales and zero points included, over their
 * parameters before), as the per-tensor lines count them. */
static void budget_verdict(const job *j, const npuc_summary *sum, long long in_bytes, long long out_bytes,
                           json_t *res) {
    const bargs *b = j->budget;
    json_t *v = NULL;
    if (b->target_size) {
        const char *t = b->target_size;
        size_t n = strlen(t);
        uint64_t target = 0;
        int known = 0;
        if (n > 1 && t[n - 1] == '%' && in_bytes >= 0) {
            const double x = floor(strtod(t, NULL) / 100.0 * (double)in_bytes);
            target = x >= 1 ? (uint64_t)x : 1;
            known = 1;
        } else if (cli_parse_size(t, &target) == 0) {
            known = 1;
        }
        v = json_pack("{s:s}", "target_size", t);
        if (v && known) json_object_set_new(v, "target_bytes", json_integer((json_int_t)target));
        if (v && known && out_bytes >= 0) json_object_set_new(v, "met", json_boolean((uint64_t)out_bytes <= target));
    } else if (b->target_bpw) {
        const double target = strtod(b->target_bpw, NULL);
        uint64_t bytes = 0, params = 0;
        for (size_t i = 0; sum && i < sum->nrecords; i++)
            if (sum->records[i].action == NPUC_ACTION_QUANTIZED) {
                bytes += sum->records[i].bytes_after;
                params += sum->records[i].params_before;
            }
        v = json_pack("{s:f}", "target_bpw", target);
        if (v && params) {
            const double bpw = 8.0 * (double)bytes / (double)params;
            json_object_set_new(v, "bpw", json_real(bpw));
            json_object_set_new(v, "met", json_boolean(bpw <= target));
        }
    }
    if (v) json_object_set_new(res, "budget", v);
}

/* Does one file; returns its result object (never NULL unless out of memory). */
static json_t *do_job(const job *j) {
    json_t *res = json_object();
    npuc_ctx *ctx = NULL;
    npuc_summary sum;
    memset(&sum, 0, sizeof sum);
    char sha[65];
    npuc_status st = npuc_ctx_new(&ctx);
    if (st != NPUC_OK) return NULL;
    npuc_ctx_set_threads(ctx, 1);
    npuc_ctx_set_policy(ctx, j->policy);
    const char *status = "failed";
    json_object_set_new(res, "status", json_string(status));
    if (mkdir_parents(j->out) != 0) {
        json_object_set_new(res, "exit_code", json_integer(CLI_EXIT_FAIL));
        char msg[1200];
        snprintf(msg, sizeof msg, "%s: cannot create its folder: %s", j->out, strerror(errno));
        json_object_set_new(res, "error", cli_json_str(msg));
        goto done;
    }
    if ((st = npuc_recipe_sweep(ctx, j->out, j->report, NULL)) != NPUC_OK) goto fail;
    if ((st = npuc_sha256_file(ctx, j->in, sha)) != NPUC_OK) goto fail;
    json_object_set_new(res, "input_sha256", json_string(sha));
    if (path_bytes(j->in) >= 0) json_object_set_new(res, "input_size", json_integer((json_int_t)path_bytes(j->in)));
    if (j->resume) {
        int complete = 0;
        if ((st = npuc_recipe_output_complete(ctx, j->rc, j->out, sha, &complete)) != NPUC_OK) goto fail;
        if (complete) {
            status = "skipped";
            totals_from_report(j->report, res);
            json_object_set_new(res, "exit_code", json_integer(0));
            json_object_set_new(res, "error", json_null());
            goto done;
        }
    }
    npuc_run_opts o = npuc_run_opts_defaults();
    o.write.overwrite = j->force;
    o.input_sha256 = sha;
    o.before_commit = write_report;
    o.user = (void *)j;
    if ((st = npuc_recipe_run(ctx, j->rc, j->in, j->out, &o, &sum)) != NPUC_OK) goto fail;
    status = "ok";
    json_object_set_new(res, "exit_code", json_integer(0));
    json_object_set_new(res, "error", json_null());
    json_object_set_new(res, "tensors", json_integer((json_int_t)sum.nrecords));
    json_object_set_new(res, "bytes_before", json_integer((json_int_t)sum.bytes_before));
    json_object_set_new(res, "bytes_after", json_integer((json_int_t)sum.bytes_after));
    if (!isnan(sum.weighted_sqnr_db) && !isinf(sum.weighted_sqnr_db))
        json_object_set_new(res, "weighted_sqnr_db", json_real(sum.weighted_sqnr_db));
    if (j->budget->target_size || j->budget->target_bpw)
        budget_verdict(j, &sum, path_bytes(j->in), path_bytes(j->out), res);
    goto done;
fail:
    json_object_set_new(res, "exit_code", json_integer(cli_exit_code(st)));
    json_object_set_new(res, "error", cli_json_str(npuc_ctx_errmsg(ctx)));
done:
    if (strcmp(status, "failed") != 0 && path_bytes(j->out) >= 0)
        json_object_set_new(res, "output_size", json_integer((json_int_t)path_bytes(j->out)));
    json_object_set_new(res, "status", json_string(status));
    npuc_summary_free(&sum);
    npuc_ctx_free(ctx);
    return res;
}

/* ------------------------------------------------------------ workers */

typedef struct slot {
    pid_t pid;
    int fd;
    size_t item;
} slot;

/* The running workers, for the signal handler (cli_signal_hook): a signal
 * that stops `npuc batch` is passed on to them, and they are reaped, so
 * each removes its own temporary files before the batch exits. */
static slot *volatile g_slots;
static volatile size_t g_nslots;
/* The job tables run() allocates, reachable from here while workers run: a
 * worker is a fork that ends with _exit(), and valgrind's exit-time scan of
 * it calls the parent's tables "definitely lost" when the only pointer to
 * them sat in a register the worker's frames reused.  Not a leak (the parent
 * frees them), but memcheck cannot tell, so they stay visible. */
static void *g_job_tables[3];

/* The signal that stopped the batch (0: none yet): set by stop_workers,
 * read by run()'s loop, which then writes the partial summary. */
static volatile sig_atomic_t g_stop;

/* The first signal: passed on to the workers (each removes its own
 * temporary files and exits), and run()'s loop takes over (returns 1).  A
 * second one while the loop is finishing: wait for the workers here, then
 * the handler exits at once (returns 0). */
static int stop_workers(int sig) {
    for (size_t s = 0; s < g_nslots; s++)
        if (g_slots[s].pid > 0) kill(g_slots[s].pid, sig);
    if (!g_stop) {
        g_stop = sig;
        return 1;
    }
    for (size_t s = 0; s < g_nslots; s++)
        if (g_slots[s].pid > 0) waitpid(g_slots[s].pid, NULL, 0);
    return 0;
}

static const char *signame(int sig) {
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "a signal";
}

static void worker_main(const job *j, int fd, pid_t parent) {
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
    if (getppid() != parent) _exit(CLI_EXIT_FAIL);
    json_t *res = do_job(j);
    char *s = res ? json_dumps(res, JSON_COMPACT) : NULL;
    int rc = s ? 0 : CLI_EXIT_FAIL;
    for (size_t off = 0, n = s ? strlen(s) : 0; off < n;) {
        ssize_t w = write(fd, s + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) { rc = CLI_EXIT_FAIL; break; }
        off += (size_t)w;
    }
    free(s);
    json_decref(res);
    close(fd);
    _exit(rc);
}

/* Reads a finished worker's result; a worker that died without one failed. */
static json_t *collect(slot *s, int status, const char *path) {
    char buf[65536];
    size_t n = 0;
    for (;;) {
        ssize_t r = read(s->fd, buf + n, sizeof buf - 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        n += (size_t)r;
        if (n == sizeof buf - 1) break;
    }
    buf[n] = 0;
    close(s->fd);
    json_t *res = n ? json_loads(buf, 0, NULL) : NULL;
    if (res) return res;
    char msg[1200];
    if (WIFSIGNALED(status)) snprintf(msg, sizeof msg, "%s: the worker crashed (signal %d)", path, WTERMSIG(status));
    else snprintf(msg, sizeof msg, "%s: the worker exited with %d and no result", path, WEXITSTATUS(status));
    return json_pack("{s:s, s:i, s:s}", "status", "failed", "exit_code", CLI_EXIT_FAIL, "error", msg);
}

/* ------------------------------------------------------------ summaries */

static json_t *summary_doc(const bargs *b, const char *recipe, const npuc_recipe *rc, const char *outdir,
                           size_t total, json_t *files) {
    size_t ok = 0, skipped = 0, failed = 0, idx;
    json_t *f;
    json_array_foreach(files, idx, f) {
        const char *s = json_string_value(json_object_get(f, "status"));
        if (s && !strcmp(s, "ok")) ok++;
        else if (s && !strcmp(s, "skipped")) skipped++;
        else failed++;
    }
    json_t *doc = json_object();
    json_object_set_new(doc, "schema", json_string("npuc.batch/1"));
    json_object_set_new(doc, "npuc_version", json_string(npuc_version()));
    json_object_set_new(doc, "recipe", cli_json_str(recipe));
    json_object_set_new(doc, "recipe_sha256", json_string(npuc_recipe_sha256(rc)));
    json_object_set_new(doc, "input", cli_json_str(b->input));
    json_object_set_new(doc, "output", cli_json_str(outdir));
    json_object_set_new(doc, "shard", b->shard_n ? json_pack("{s:I, s:I}", "index", (json_int_t)b->shard_k, "count",
                                                             (json_int_t)b->shard_n)
                                                 : json_null());
    json_object_set_new(doc, "files_total", json_integer((json_int_t)total));
    json_object_set_new(doc, "counts", json_pack("{s:I, s:I, s:I, s:I}", "files", (json_int_t)json_array_size(files),
                                                 "ok", (json_int_t)ok, "skipped", (json_int_t)skipped, "failed",
                                                 (json_int_t)failed));
    json_object_set(doc, "files", files);
    return doc;
}

static int by_file(const void *a, const void *b) {
    const char *x = json_string_value(json_object_get(*(json_t *const *)a, "file"));
    const char *y = json_string_value(json_object_get(*(json_t *const *)b, "file"));
    return strcmp(x ? x : "", y ? y : "");
}

/* npuc batch --merge-summaries OUT IN...: the shards' files in one list. */
static int merge(const cli_args *a, const bargs *b) {
    size_t n = (size_t)a->npos, total = 0, cap = 0, nf = 0;
    json_t **all = NULL, *first = NULL;
    int rc = cli_side_probe(b->merge, "merged summary"); /* before reading anything */
    if (rc != CLI_CONTINUE) return rc;
    rc = CLI_EXIT_USAGE;
    for (size_t i = 0; i < n; i++) {
        json_error_t je;
        json_t *d = json_load_file(a->pos[i], 0, &je);
        if (!d) {
            cli_error("%s:%d:%d: %s", a->pos[i], je.line, je.column, je.text);
            goto done;
        }
        const char *schema = json_string_value(json_object_get(d, "schema"));
        json_t *files = json_object_get(d, "files");
        if (!schema || strcmp(schema, "npuc.batch/1") != 0 || !json_is_array(files) ||
            !json_is_integer(json_object_get(d, "files_total")) ||
            !json_is_string(json_object_get(d, "recipe_sha256"))) {
            cli_error("%s: not an npuc.batch/1 summary", a->pos[i]);
            json_decref(d);
            goto done;
        }
        size_t ft = (size_t)json_integer_value(json_object_get(d, "files_total"));
        if (!first) {
            first = d;
            total = ft;
        } else {
            if (strcmp(json_string_value(json_object_get(d, "recipe_sha256")),
                       json_string_value(json_object_get(first, "recipe_sha256"))) != 0) {
                cli_error("%s: made with another recipe than %s (recipe_sha256 differs)", a->pos[i], a->pos[0]);
                json_decref(d);
                goto done;
            }
            if (ft != total) {
                cli_error("%s: a zoo of %zu files, but %s has %zu: not shards of one zoo", a->pos[i], ft, a->pos[0],
                          total);
                json_decref(d);
                goto done;
            }
        }
        size_t idx;
        json_t *f;
        json_array_foreach(files, idx, f) {
            if (!json_is_string(json_object_get(f, "file"))) {
                cli_error("%s: files[%zu] has no \"file\"", a->pos[i], idx);
                if (d != first) json_decref(d);
                goto done;
            }
            if (nf == cap) {
                cap = cap ? 2 * cap : 256;
                json_t **p = realloc(all, cap * sizeof *p);
                if (!p) { rc = CLI_EXIT_FAIL; if (d != first) json_decref(d); goto done; }
                all = p;
            }
            all[nf++] = json_incref(f);
        }
        if (d != first) json_decref(d);
    }
    qsort(all, nf, sizeof *all, by_file);
    json_t *files = json_array();
    for (size_t i = 0; i < nf; i++) {
        if (i && by_file(&all[i - 1], &all[i]) == 0) {
            cli_error("'%s' is in two summaries: the shards overlap",
                      json_string_value(json_object_get(all[i], "file")));
            json_decref(files);
            goto done;
        }
        json_array_append(files, all[i]);
    }
    size_t ok = 0, skipped = 0, failed = 0, idx;
    json_t *f;
    json_array_foreach(files, idx, f) {
        const char *s = json_string_value(json_object_get(f, "status"));
        if (s && !strcmp(s, "ok")) ok++;
        else if (s && !strcmp(s, "skipped")) skipped++;
        else failed++;
    }
    json_object_set(first, "shard", json_null());
    json_object_set_new(first, "counts", json_pack("{s:I, s:I, s:I, s:I}", "files", (json_int_t)nf, "ok",
                                                   (json_int_t)ok, "skipped", (json_int_t)skipped, "failed",
                                                   (json_int_t)failed));
    json_object_set_new(first, "files", files);
    if (write_json_file(b->merge, first) != 0) {
        cli_error("%s: %s", b->merge, strerror(errno));
        rc = CLI_EXIT_FAIL;
        goto done;
    }
    cli_note(a, "merged %zu summaries: %zu of %zu files, %zu ok, %zu skipped, %zu failed%s", n, nf, total, ok,
             skipped, failed, nf < total ? " (some files are in no summary)" : "");
    rc = failed || nf < total ? CLI_EXIT_FAIL : CLI_EXIT_OK;
done:
    for (size_t i = 0; i < nf; i++) json_decref(all[i]);
    free(all);
    json_decref(first);
    return rc;
}

/* ------------------------------------------------------------ the batch */

/* The bar: files done, input bytes per second and the time left, by the
 * input sizes (cli_progress.h); failures and skips after the last name. */
static void progress(cli_bar *bar, size_t done, uint64_t bytes, size_t failed, size_t skipped, const char *last) {
    if (!bar->enabled) return;
    char label[160];
    if (failed || skipped) snprintf(label, sizeof label, "%zu failed, %zu skipped  %s", failed, skipped, last);
    else snprintf(label, sizeof label, "%s", last);
    if (done == bar->n) cli_bar_clear(bar);
    else cli_bar_update(bar, done, bytes, label);
}

/* --target-size / --target-bpw / --candidates: set on the recipe's quantize
 * step (the last step, when it has one), replacing the step's own budget, so
 * the recipe hash, the artifacts' "npuc.recipe" and --resume all see the
 * budget.  A recipe without a quantize step has nothing to budget: exit 2. */
static int apply_budget(npuc_ctx *ctx, npuc_recipe *rc, const char *recipe, const bargs *b) {
    if (!b->target_size && !b->target_bpw) return CLI_EXIT_OK;
    const size_t n = npuc_recipe_step_count(rc);
    const char *flag = b->target_size ? "--target-size" : "--target-bpw";
    if (n == 0 || npuc_recipe_step_kind(rc, n - 1, NULL, NULL) != NPUC_STEP_QUANTIZE) {
        cli_error("%s: %s budgets a quantize step, and the recipe has none", recipe, flag);
        return CLI_EXIT_USAGE;
    }
    npuc_status st = npuc_recipe_set_option(ctx, rc, n - 1, b->target_size ? "target_size" : "target_bpw",
                                            b->target_size ? b->target_size : b->target_bpw);
    if (st == NPUC_OK)
        st = npuc_recipe_set_option(ctx, rc, n - 1, b->target_size ? "target_bpw" : "target_size", NULL);
    if (st == NPUC_OK && b->candidates) st = npuc_recipe_set_option(ctx, rc, n - 1, "candidates", b->candidates);
    if (st != NPUC_OK) { /* a value's message without its flag: "'0%': expected a size ..." */
        const char *m = npuc_ctx_errmsg(ctx);
        cli_error("%s%s", m[0] == '\'' ? (b->target_size ? "--target-size " : "--target-bpw ") : "", m);
        return st == NPUC_ERR_NOMEM ? CLI_EXIT_FAIL : CLI_EXIT_USAGE;
    }
    return CLI_EXIT_OK;
}

static int run(int argc, char **argv) {
    cli_args a;
    bargs b;
    memset(&b, 0, sizeof b);
    npuc_ctx *ctx = NULL;
    npuc_recipe *rc = NULL;
    npuc_batch_list l;
    memset(&l, 0, sizeof l);
    json_t **results = NULL;
    uint64_t *sizes = NULL; /* input sizes, for the progress bar */
    slot *slots = NULL;
    char **outs = NULL, **reports = NULL;
    size_t nslots = 0;
    char *cmdline = NULL; /* with a budget: this command, for the reports */
    int code = cli_parse(&cli_cmd_batch, argc, argv, CLI_OPT_OUTPUT | CLI_OPT_FORCE | CLI_OPT_JOBS | CLI_OPT_POLICY | CLI_OPT_PROGRESS, OPTIONS, on_opt,
                         &b, 1, -1, &a);
    if (code != CLI_CONTINUE) goto done;
    if (b.merge) {
        if (b.input || a.output || b.resume || b.shard_n || b.summary || b.target_size || b.target_bpw ||
            b.candidates) {
            code = cli_usage_error(&cli_cmd_batch, "--merge-summaries takes only summary files");
            goto done;
        }
        code = merge(&a, &b);
        goto done;
    }
    if (a.npos != 1) {
        code = cli_usage_error(&cli_cmd_batch, a.npos ? "unexpected argument '%s'" : "missing RECIPE%s",
                               a.npos ? a.pos[1] : "");
        goto done;
    }
    if (!b.input || !a.output) {
        code = cli_usage_error(&cli_cmd_batch, "missing %s", !b.input ? "--input DIR|LIST" : "--output DIR");
        goto done;
    }
    if (b.target_size && b.target_bpw) {
        code = cli_usage_error(&cli_cmd_batch, "choose one of --target-size, --target-bpw");
        goto done;
    }
    if (b.candidates && !b.target_size && !b.target_bpw) {
        code = cli_usage_error(&cli_cmd_batch, "--candidates needs --target-size or --target-bpw");
        goto done;
    }
    if ((code = cli_ctx_new(&a, &ctx)) != CLI_EXIT_OK) goto done;
    npuc_status st = npuc_recipe_load(ctx, a.pos[0], &rc);
    if (st != NPUC_OK) { code = cli_fail(ctx, st); goto done; }
    if ((code = apply_budget(ctx, rc, a.pos[0], &b)) != CLI_EXIT_OK) goto done;
    if (b.target_size || b.target_bpw) {
        if (!(cmdline = cli_join_command(argc, argv))) { cli_error("out of memory"); code = CLI_EXIT_FAIL; goto done; }
    }
    for (size_t k = 0; k < npuc_recipe_step_count(rc); k++) {
        int line, col;
        npuc_step_kind kind = npuc_recipe_step_kind(rc, k, &line, &col);
        if (!npuc_step_available(kind)) {
            cli_error("%s:%d:%d: step '%s' is not available in this build", a.pos[0], line, col,
                      npuc_step_kind_name(kind));
            code = CLI_EXIT_USAGE;
            goto done;
        }
    }
    const char *outdir = a.output;
    cli_signal_set_target(NULL); /* -o is a folder: its own "interrupted" line (below) */
    struct stat isb, osb;
    if (stat(b.input, &isb) != 0) {
        cli_error("%s: %s", b.input, strerror(errno));
        code = CLI_EXIT_USAGE;
        goto done;
    }
    /* The output folder and its missing parents are created, as mkdir -p
     * would; a path that cannot be one (a file on the way, no permission,
     * a read-only file system) is a usage error. */
    int made_outdir = mkdir_parents(outdir) == 0 && mkdir(outdir, 0777) == 0;
    if (!made_outdir && errno != EEXIST) {
        int e = errno;
        cli_error("%s: cannot create the output folder: %s", outdir, strerror(e));
        code = e == ENOENT || e == ENOTDIR || e == EACCES || e == EROFS || e == EEXIST ? CLI_EXIT_USAGE
                                                                                      : CLI_EXIT_FAIL;
        goto done;
    }
    if (stat(outdir, &osb) != 0 || !S_ISDIR(osb.st_mode)) {
        cli_error("%s: not a folder", outdir);
        code = CLI_EXIT_USAGE;
        goto done;
    }
    /* The summary's path is tried before any file is worked on (it may be
     * inside the output folder, hence after the mkdir, undone on failure):
     * a batch never publishes outputs and then fails on its summary. */
    if ((code = cli_side_probe(b.summary, "summary")) != CLI_CONTINUE) {
        if (made_outdir) rmdir(outdir);
        goto done;
    }
    code = CLI_EXIT_OK;
    if (S_ISDIR(isb.st_mode) && isb.st_dev == osb.st_dev && isb.st_ino == osb.st_ino) {
        cli_error("%s: the output folder is the input folder (outputs would replace inputs)", outdir);
        code = CLI_EXIT_USAGE;
        goto done;
    }
    st = S_ISDIR(isb.st_mode) ? npuc_batch_list_dir(ctx, b.input, outdir, &l) : npuc_batch_list_file(ctx, b.input, &l);
    if (st != NPUC_OK) { code = cli_fail(ctx, st); goto done; }
    size_t total = l.n;
    if (b.shard_n) npuc_batch_list_shard(&l, (size_t)b.shard_k, (size_t)b.shard_n);
    size_t n = l.n;
    long jobs = a.jobs > 0 ? a.jobs : sysconf(_SC_NPROCESSORS_ONLN);
    if (jobs < 1) jobs = 1;
    if ((size_t)jobs > n && n > 0) jobs = (long)n;
    results = calloc(n ? n : 1, sizeof *results);
    slots = calloc((size_t)jobs, sizeof *slots);
    nslots = slots ? (size_t)jobs : 0;
    outs = calloc(n ? n : 1, sizeof *outs);
    reports = calloc(n ? n : 1, sizeof *reports);
    if (!results || !slots || !outs || !reports) { cli_error("out of memory"); code = CLI_EXIT_FAIL; goto done; }
    g_job_tables[0] = results, g_job_tables[1] = outs, g_job_tables[2] = reports;
    for (size_t i = 0; i < n; i++) {
        outs[i] = join(outdir, l.rel[i]);
        reports[i] = outs[i] ? suffixed(outs[i], ".report.json") : NULL;
        if (!reports[i]) { cli_error("out of memory"); code = CLI_EXIT_FAIL; goto done; }
    }
    cli_bar bar;
    uint64_t bytes_total = 0, bytes_done = 0;
    sizes = calloc(n ? n : 1, sizeof *sizes);
    if (!sizes) { cli_error("out of memory"); code = CLI_EXIT_FAIL; goto done; }
    for (size_t i = 0; i < n; i++) {
        struct stat fsb;
        sizes[i] = stat(l.path[i], &fsb) == 0 && fsb.st_size > 0 ? (uint64_t)fsb.st_size : 0;
        bytes_total += sizes[i];
    }
    cli_bar_start(&bar, &a, bytes_total, n);

    size_t next = 0, ndone = 0, running = 0, nfailed = 0, nskipped = 0, nprinted = 0;
    pid_t self = getpid();
    g_slots = slots;
    g_nslots = nslots;
    cli_signal_hook = stop_workers;
    sigset_t stops, old;
    sigemptyset(&stops);
    sigaddset(&stops, SIGINT);
    sigaddset(&stops, SIGTERM);
    sigaddset(&stops, SIGHUP);
    while (ndone < n) {
        while (!g_stop && running < (size_t)jobs && next < n) {
            int fds[2];
            if (pipe(fds) != 0) { cli_error("pipe: %s", strerror(errno)); code = CLI_EXIT_FAIL; goto done; }
            fflush(stdout);
            fflush(stderr);
            job j = {rc, a.pos[0], l.path[next], outs[next], reports[next], b.resume, a.force, &a.policy, &b, cmdline};
            sigprocmask(SIG_BLOCK, &stops, &old); /* until the worker is in slots[] */
            pid_t pid = fork();
            if (pid == 0) {
                cli_signal_hook = NULL; /* a worker has no workers */
                cli_signal_quiet = 1;   /* and its parent says what stopped */
                sigprocmask(SIG_SETMASK, &old, NULL);
            }
            if (pid < 0) {
                sigprocmask(SIG_SETMASK, &old, NULL);
                cli_error("fork: %s", strerror(errno));
                close(fds[0]);
                close(fds[1]);
                code = CLI_EXIT_FAIL;
                goto done;
            }
            if (pid == 0) {
                close(fds[0]);
                worker_main(&j, fds[1], self);
            }
            close(fds[1]);
            size_t s = 0;
            while (slots[s].pid) s++;
            slots[s] = (slot){pid, fds[0], next};
            sigprocmask(SIG_SETMASK, &old, NULL);
            running++;
            next++;
        }
        if (g_stop) break;
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) {
            if (errno == EINTR) continue;
            cli_error("waitpid: %s", strerror(errno));
            code = CLI_EXIT_FAIL;
            goto done;
        }
        size_t s = 0;
        while (s < (size_t)jobs && slots[s].pid != pid) s++;
        if (s == (size_t)jobs) continue; /* not one of ours */
        size_t i = slots[s].item;
        json_t *r = collect(&slots[s], status, l.path[i]);
        slots[s].pid = 0;
        running--;
        ndone++;
        if (!r) { cli_error("out of memory"); code = CLI_EXIT_FAIL; goto done; }
        /* Fixed leading keys, then the worker's figures. */
        json_t *entry = json_pack("{s:o, s:o}", "file", cli_json_str(l.rel[i]), "path", cli_json_str(l.path[i]));
        const char *lead[] = {"status", "exit_code", "error"};
        for (int k = 0; k < 3; k++) {
            json_t *v = json_object_get(r, lead[k]);
            json_object_set(entry, lead[k], v ? v : json_null());
        }
        json_object_update_missing(entry, r);
        json_decref(r);
        results[i] = entry;
        const char *stt = json_string_value(json_object_get(entry, "status"));
        if (stt && !strcmp(stt, "failed")) {
            nfailed++;
            cli_bar_clear(&bar);
            cli_error("%s", json_string_value(json_object_get(entry, "error")));
        } else if (stt && !strcmp(stt, "skipped")) {
            nskipped++;
        }
        /* Each file's line as soon as the ones before it in the work list
         * are done, flushed: a batch stopped half-way (or read through a
         * pipe) still shows every line it finished. */
        for (; nprinted < n && results[nprinted]; nprinted++) {
            cli_bar_clear(&bar);
            print_line(results[nprinted], l.rel[nprinted]);
            fflush(stdout);
        }
        json_t *isz = json_object_get(entry, "input_size");
        bytes_done += json_is_integer(isz) ? (uint64_t)json_integer_value(isz) : sizes[i];
        progress(&bar, ndone, bytes_done, nfailed, nskipped, l.rel[i]);
    }

    /* Stopped by a signal (stop_workers): the workers still running got it
     * too; wait for them (each removes its temporary files), and what they
     * were doing is not in the summary: only the files that finished. */
    const int stop = g_stop;
    if (stop) {
        for (size_t s = 0; s < nslots; s++)
            if (slots[s].pid > 0) {
                while (waitpid(slots[s].pid, NULL, 0) < 0 && errno == EINTR) {}
                close(slots[s].fd);
                slots[s].pid = 0;
            }
        cli_bar_clear(&bar);
        for (size_t i = nprinted; i < n; i++)
            if (results[i]) print_line(results[i], l.rel[i]);
    }
    /* Results, in the order of the work list. */
    json_t *files = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *e = results[i];
        if (e) json_array_append(files, e);
    }
    /* Stopped: no totals on stdout (they would read as a finished batch);
     * the "interrupted" line on stderr says what finished. */
    if (!stop)
        printf("total: %zu files of %zu%s: %zu ok, %zu skipped, %zu failed\n", n, total,
               b.shard_n ? " (this shard)" : "", n - nfailed - nskipped, nskipped, nfailed);
    fflush(stdout);
    if (b.summary) {
        json_t *doc = summary_doc(&b, a.pos[0], rc, outdir, total, files);
        if (doc && stop) json_object_set_new(doc, "interrupted", json_string(signame(stop)));
        if (!doc || write_json_file(b.summary, doc) != 0) {
            cli_error("%s: %s", b.summary, doc ? strerror(errno) : "out of memory");
            json_decref(doc);
            json_decref(files);
            code = CLI_EXIT_FAIL;
            goto done;
        }
        json_decref(doc);
    }
    json_decref(files);
    if (stop) {
        /* Said whatever -q says: the user asked why it stopped. */
        fprintf(stderr, "npuc: interrupted (%s): %zu of %zu files finished (%zu ok, %zu skipped, %zu failed), "
                        "outputs in %s; %s%s%s\n",
                signame(stop), ndone, n, ndone - nfailed - nskipped, nskipped, nfailed, outdir,
                b.summary ? "partial summary in " : "no summary (--summary FILE)", b.summary ? b.summary : "",
                b.summary ? " (--resume continues)" : "");
        npuc_tempfiles_cleanup();
        code = 128 + stop;
        goto done;
    }
    cli_note(&a, "batch: %zu files: %zu ok, %zu skipped, %zu failed -> %s", n, n - nfailed - nskipped, nskipped,
             nfailed, outdir);
    code = nfailed ? CLI_EXIT_FAIL : CLI_EXIT_OK;
done:
    cli_signal_hook = NULL;
    /* Only after an error can workers still run: stop and reap them. */
    for (size_t s = 0; slots && s < nslots; s++)
        if (slots[s].pid > 0) {
            kill(slots[s].pid, SIGTERM);
            waitpid(slots[s].pid, NULL, 0);
            close(slots[s].fd);
        }
    for (size_t i = 0; results && i < l.n; i++) json_decref(results[i]);
    for (size_t i = 0; outs && i < l.n; i++) free(outs[i]);
    for (size_t i = 0; reports && i < l.n; i++) free(reports[i]);
    memset(g_job_tables, 0, sizeof g_job_tables);
    free(sizes);
    free(outs);
    free(reports);
    free(results);
    free(slots);
    npuc_batch_list_free(&l);
    npuc_recipe_free(rc);
    npuc_ctx_free(ctx);
    free(cmdline);
    cli_args_free(&a);
    return cli_finish_stdout(code);
}

const cli_command cli_cmd_batch = {
    "batch",
    "run a recipe over every weight file of a folder or list (shardable, resumable)",
    "Usage: npuc batch RECIPE --input DIR|LIST --output DIR [-j N] [--resume]\n"
    "                  [--shard K/N] [--summary FILE.json] [-f] [-q] [-v]\n"
    "                  [--strict] [--accept-guesses] [--min-sqnr DB] [--min-layer-sqnr DB]\n"
    "                  [--max-output-error F]\n"
    "                  [--target-size SIZE|N% | --target-bpw B] [--candidates LIST]\n"
    "       npuc batch --merge-summaries OUT.json IN.json...\n"
    "\n"
    "Compresses every weight file (.safetensors, .st, .h5, .hdf5, .keras) under DIR\n"
    "(recursively; the output folder is left out), or every path listed in LIST (one a\n"
    "line, # comments), with RECIPE (docs/recipes.md), to the mirrored path under the\n"
    "output folder, with its report (npuc.report/1 JSON) beside it as <out>.report.json.\n"
    "Files are processed in sorted order of their relative paths.  A file that fails\n"
    "(corrupt, unsupported, a worker crash) fails alone: its error is printed and kept in\n"
    "the summary, and the other files go on.\n"
    "\n"
    "Options:\n"
    "  -i, --input DIR|LIST   a folder to walk, or a file listing weight files\n"
    "  -o, --output DIR       where outputs go (created if missing)\n"
    "  -j, --jobs N           files processed at once, one worker process each\n"
    "                         (default: all cores); outputs are identical for any N\n"
    "      --resume           skip outputs already complete for this recipe and input\n"
    "                         (hashes recorded in the artifact); sweep temporary files\n"
    "                         a killed run left\n"
    "      --shard K/N        take files K, K+N, K+2N, ... of the sorted list (0 <= K < N):\n"
    "                         N machines split a zoo without coordination\n"
    "      --summary FILE     write the npuc.batch/1 summary (docs/cli.md)\n"
    "      --merge-summaries OUT IN...  combine shards' summaries into OUT\n"
    "  -f, --force            overwrite outputs that exist and are not complete for this\n"
    "                         recipe and input (without -f they fail with exit 2)\n"
    "      --strict, --accept-guesses, --min-sqnr DB, --min-layer-sqnr DB,\n"
    "      --max-output-error F\n"
    "                         as for `npuc run`, for every file: a file failing a quality\n"
    "                         gate gets its report but no output, and exit_code 3\n"
    "      --target-size SIZE|N%  a budget for RECIPE's quantize step (docs/budget.md),\n"
    "                         for every file: each output at most SIZE (K/M/G) or N%\n"
    "                         of its own input's size; replaces the recipe's budget\n"
    "      --target-bpw B     the same in bits per weight of the quantized tensors\n"
    "      --candidates LIST  the schemes the budget chooses from (int4/g32,int8/ch,...)\n"
    "  -q, --quiet            no progress or summary line on stderr (errors still print)\n"
    "      --progress         the progress bar (files, bytes/s, time left) on stderr even\n"
    "                         when it is not a terminal\n"
    "  -h, --help             this help\n"
    "\n"
    "stdout: one line per file (ok / skipped / failed, sizes or the error, with a budget\n"
    "the target and whether it was met), then totals.\n"
    "Exit: 0 every file ok or skipped; 1 one or more files failed (each file's own exit\n"
    "code is in the summary); 2 the batch could not start (usage, recipe, input).\n"
    "--merge-summaries exits 1 when the merged summary has failed or missing files.\n",
    "RECIPE",
    run,
    NULL,
};
