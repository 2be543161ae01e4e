/*
 * recipe_run.c - running a recipe on one model: the chain of passes, the
 * provenance metadata, the merged summary, and the final move into place.
 *
 * Each step is a whole pass, run unchanged through its model-level driver.
 * A quantize step streams its input (unless it has a budget, whose
 * measurement reads every tensor before the writing does): it runs at the same time as the step
 * before it, which writes into an in-memory pipe (src/pipeline/pipe.h) instead
 * of a file (run_group below; safetensors artifacts only).  Every other
 * step reads the step file the step before wrote beside the output, a name
 * private to this run (recipe_files.c), through the writer's temp + fsync +
 * rename, removed as soon as it has been read
 * (docs/recipes.md#how-a-recipe-runs).
 *
 * Provenance: the three "npuc.recipe*" / "npuc.input_sha256" entries are
 * added to the opened input's metadata before the first step; every pass
 * copies the input's metadata into its output, so they reach the artifact.
 * The last file is reopened and checked for them before it is moved to the
 * output path, so an artifact at its path always says which recipe and
 * input made it (what `npuc batch --resume` trusts).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <dirent.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/evp.h>
#include <pthread.h>

#include "format_row.h"
#include "passes/pass_gate.h"
#include "pipeline/pipe.h"
#include "pipeline/recipe_internal.h"

npuc_run_opts npuc_run_opts_defaults(void) {
    npuc_run_opts o;
    memset(&o, 0, sizeof o);
    o.write = npuc_write_opts_defaults();
    return o;
}

/* Feeds the rest of fd to md; 0, or -1 with errno. */
static int digest_fd(EVP_MD_CTX *md, int fd, unsigned char *buf, size_t cap) {
    for (;;) {
        ssize_t k = read(fd, buf, cap);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) return 0;
        if (EVP_DigestUpdate(md, buf, (size_t)k) != 1) { errno = ENOMEM; return -1; }
    }
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* A checkpoint directory's digest: its non-hidden regular files (links
 * followed) in bytewise name order, each as name, NUL, then its bytes. */
static npuc_status digest_dir(npuc_ctx *ctx, const char *path, int fd, EVP_MD_CTX *md, unsigned char *buf, size_t cap) {
    DIR *d = fdopendir(dup(fd));
    if (!d) return npuc_fail(ctx, NPUC_ERR_IO, "%s: %s", path, strerror(errno));
    char **names = NULL;
    size_t n = 0;
    npuc_status st = NPUC_OK;
    struct dirent *e;
    while (st == NPUC_OK && (e = readdir(d)) != NULL) {
        struct stat sb;
        if (e->d_name[0] == '.' || fstatat(dirfd(d), e->d_name, &sb, 0) != 0 || !S_ISREG(sb.st_mode)) continue;
        char **p = realloc(names, (n + 1) * sizeof *p);
        if (p) names = p;
        if (!p || !(names[n] = strdup(e->d_name))) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); break; }
        n++;
    }
    if (n) qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n && st == NPUC_OK; i++) {
        int f = openat(dirfd(d), names[i], O_RDONLY | O_CLOEXEC);
        if (f < 0 || EVP_DigestUpdate(md, names[i], strlen(names[i]) + 1) != 1 || digest_fd(md, f, buf, cap) != 0)
            st = npuc_fail(ctx, NPUC_ERR_IO, "%s/%s: read: %s", path, names[i], strerror(errno));
        if (f >= 0) close(f);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    closedir(d);
    return st;
}

npuc_status npuc_sha256_file(npuc_ctx *ctx, const char *path, char hex[65]) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return npuc_fail(ctx, errno == ENOENT ? NPUC_ERR_NOT_FOUND : NPUC_ERR_IO, "%s: %s", path, strerror(errno));
    enum { BUF = 1 << 20 };
    unsigned char *buf = malloc(BUF);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    npuc_status st = NPUC_OK;
    struct stat sb;
    if (!buf || !md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    if (fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode)) { /* a checkpoint directory */
        if ((st = digest_dir(ctx, path, fd, md, buf, BUF)) != NPUC_OK) goto done;
    } else if (digest_fd(md, fd, buf, BUF) != 0) {
        st = npuc_fail(ctx, NPUC_ERR_IO, "%s: read: %s", path, strerror(errno));
        goto done;
    }
    unsigned char dig[EVP_MAX_MD_SIZE];
    unsigned int dl = 0;
    if (EVP_DigestFinal_ex(md, dig, &dl) != 1 || dl != 32) { st = npuc_fail(ctx, NPUC_ERR_INTERNAL, "SHA-256 failed"); goto done; }
    for (unsigned i = 0; i < dl; i++) snprintf(hex + 2 * i, 3, "%02x", dig[i]);
done:
    EVP_MD_CTX_free(md);
    free(buf);
    close(fd);
    return st;
}

/* Sets (or replaces) a metadata entry of an opened model, so the passes,
 * which copy the input's metadata, carry it into their outputs. */
static npuc_status set_meta(npuc_ctx *ctx, npuc_model *m, const char *k, const char *v) {
    for (size_t i = 0; i < m->nmeta; i++)
        if (strcmp(m->meta_k[i], k) == 0) {
            char *c = npuc__strdup(v);
            if (!c) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
            free(m->meta_v[i]);
            m->meta_v[i] = c;
            return NPUC_OK;
        }
    return npuc__model_add_meta(ctx, m, k, v);
}

/* Metadata entries kept across step files. */
typedef struct meta_list {
    char **k, **v;
    size_t n;
} meta_list;

static void meta_list_free(meta_list *l) {
    for (size_t i = 0; i < l->n; i++) {
        free(l->k[i]);
        free(l->v[i]);
    }
    free(l->k);
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* Copies m's "npuc.source.*" entries into l. */
static npuc_status keep_source_meta(npuc_ctx *ctx, const npuc_model *m, meta_list *l) {
    if (!(l->k = calloc(m->nmeta + 1, sizeof *l->k)) || !(l->v = calloc(m->nmeta + 1, sizeof *l->v)))
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < m->nmeta; i++) {
        if (strncmp(m->meta_k[i], "npuc.source.", 12) != 0) continue;
        l->k[l->n] = npuc__strdup(m->meta_k[i]);
        l->v[l->n] = npuc__strdup(m->meta_v[i]);
        if (!l->k[l->n++] || !l->v[l->n - 1]) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    return NPUC_OK;
}

/* Checks that every pattern the step gives matches a tensor of its input m
 * (the pass would say so too, but without the recipe's line and column). */
static npuc_status check_patterns(npuc_ctx *ctx, const npuc_recipe *r, size_t k, const npuc_model *m) {
    const recipe_step *s = &r->steps[k];
    const char *kind = npuc_step_kind_name(s->kind);
    size_t nt = npuc_model_count(m);
    /* (pattern, mark, what) triples: list options with RK_REGEX/RK_RULE, and overrides' match. */
    for (size_t pass = 0; pass < 2; pass++) {
        size_t nitems = pass == 0 ? s->opts.n : s->nov;
        for (size_t i = 0; i < nitems; i++) {
            const recipe_opt *o = pass == 0 ? &s->opts.v[i] : npuc__ropt(&s->ov[i], "match");
            if (!(o->key->flags & (RK_REGEX | RK_RULE))) continue;
            if (pass == 1 && npuc__recipe_override_optional(&s->ov[i])) continue; /* recipe_steps.c notes it */
            size_t nl = o->key->type == RT_LIST ? o->nlist : 1;
            for (size_t j = 0; j < nl; j++) {
                const char *src = o->key->type == RT_LIST ? o->list[j] : o->s;
                recipe_mark mk = o->key->type == RT_LIST ? o->lmark[j] : o->mark;
                char pat[1024];
                size_t pl = strlen(src);
                if (o->key->flags & RK_RULE) pl = (size_t)(strrchr(src, '=') - src);
                if (pl >= sizeof pat) pl = sizeof pat - 1;
                memcpy(pat, src, pl);
                pat[pl] = 0;
                regex_t re;
                if (npuc__regcomp(&re, pat) != 0)
                    return npuc_fail(ctx, NPUC_ERR_INTERNAL, "regex '%s' compiled at load but not now", pat);
                int hit = 0;
                for (size_t t = 0; t < nt && !hit; t++) hit = regexec(&re, npuc_model_tensor(m, t)->name, 0, NULL, 0) == 0;
                regfree(&re);
                if (!hit) {
                    char where[512];
                    return npuc_fail(ctx, NPUC_ERR_ARG,
                                     "%sstep '%s': %s '%s' matches no tensor of %s%s",
                                     npuc__recipe_where(r->name, mk, where, sizeof where), kind,
                                     pass == 0 ? o->key->name : "override", pat,
                                     k == 0 ? "the input" : "the output of step ",
                                     k == 0 ? "" : npuc_step_kind_name(r->steps[k - 1].kind));
                }
            }
        }
    }
    return NPUC_OK;
}

static npuc_status check_layout_rules(npuc_ctx *ctx, const npuc_recipe *r, npuc_model *m) {
    if (!r->nlayout) return NPUC_OK;
    for (size_t i = 0; i < r->nlayout; i++) {
        char pat[1024];
        const char *src = r->layout[i];
        size_t pl = (size_t)(strrchr(src, '=') - src);
        if (pl >= sizeof pat) pl = sizeof pat - 1;
        memcpy(pat, src, pl);
        pat[pl] = 0;
        regex_t re;
        if (npuc__regcomp(&re, pat) != 0)
            return npuc_fail(ctx, NPUC_ERR_INTERNAL, "regex '%s' compiled at load but not now", pat);
        int hit = 0;
        for (size_t t = 0; t < npuc_model_count(m) && !hit; t++)
            hit = regexec(&re, npuc_model_tensor(m, t)->name, 0, NULL, 0) == 0;
        regfree(&re);
        char where[512];
        if (!hit)
            return npuc_fail(ctx, NPUC_ERR_ARG, "%slayout rule '%s' matches no tensor of the input",
                             npuc__recipe_where(r->name, r->layout_mark[i], where, sizeof where), src);
    }
    npuc_status st = npuc_model_apply_layout_rules(ctx, m, (const char *const *)r->layout, r->nlayout);
    if (st != NPUC_OK) {
        char msg[NPUC_MSG_MAX], where[512];
        snprintf(msg, sizeof msg, "%s", npuc_ctx_errmsg(ctx));
        return npuc_fail(ctx, st, "%s%s", npuc__recipe_where(r->name, r->layout_mark[0], where, sizeof where), msg);
    }
    return NPUC_OK;
}

/* ------------------------------------------------------------ summaries */

/* Appends step k's records (extra "step" first) and warnings to sum. */
static npuc_status merge_step(npuc_summary *sum, const npuc_summary *s, size_t k, const char *kind) {
    for (size_t i = 0; i < s->nrecords; i++) {
        const npuc_tensor_record *src = &s->records[i];
        npuc_tensor_record *d = npuc_summary_append(sum);
        if (!d) return NPUC_ERR_NOMEM;
        char *name = npuc__strdup(src->name);
        if (src->name && !name) return NPUC_ERR_NOMEM;
        *d = *src;
        d->name = name;
        d->nextra = 0;
        npuc_record_set(d, "step", (double)(k + 1));
        for (size_t e = 0; e < src->nextra; e++) npuc_record_set(d, src->extra[e].key, src->extra[e].value);
    }
    for (size_t i = 0; i < s->nwarnings; i++)
        if (npuc_summary_warn(sum, "step %zu (%s): %s", k + 1, kind, s->warnings[i]) != NPUC_OK) return NPUC_ERR_NOMEM;
    return NPUC_OK;
}

typedef struct step_totals {
    uint64_t bytes_before, bytes_after, params_before, params_after;
    size_t n;
    double sw2, se2;
    int any_err;
} step_totals;

static void totals_of(const npuc_summary *s, size_t k, step_totals *t) {
    memset(t, 0, sizeof *t);
    for (size_t i = 0; i < s->nrecords; i++) {
        const npuc_tensor_record *r = &s->records[i];
        if ((size_t)npuc_record_get(r, "step", 0) != k + 1) continue;
        t->n++;
        t->bytes_before += r->bytes_before;
        t->bytes_after += r->bytes_after;
        t->params_before += r->params_before;
        t->params_after += r->params_after;
        if (r->has_error) {
            t->any_err = 1;
            t->sw2 += r->err.sum_w2;
            t->se2 += r->err.sum_e2;
        }
    }
}

static double sqnr_of(const step_totals *t) {
    return !t->any_err ? NAN : t->se2 == 0 ? INFINITY : t->sw2 == 0 ? -INFINITY : 10.0 * log10(t->sw2 / t->se2);
}

/* Totals of a run: the model before the first step and after the last. */
static void finish_run(npuc_summary *sum, size_t nsteps) {
    npuc_summary_finish(sum);
    step_totals first, last, t;
    totals_of(sum, 0, &first);
    totals_of(sum, nsteps - 1, &last);
    sum->bytes_before = first.bytes_before;
    sum->params_before = first.params_before;
    sum->bytes_after = last.bytes_after;
    sum->params_after = last.params_after;
    int nerr = 0;
    double v = NAN;
    for (size_t k = 0; k < nsteps; k++) {
        totals_of(sum, k, &t);
        if (t.any_err) { nerr++; v = sqnr_of(&t); }
    }
    sum->weighted_sqnr_db = nerr == 1 ? v : NAN;
}

static json_t *jnum(double v) {
    if (isnan(v)) return json_string("nan");
    if (isinf(v)) return json_string(v > 0 ? "inf" : "-inf");
    return json_real(v);
}

char *npuc_recipe_params_json(const npuc_recipe *r, const npuc_summary *sum, const char *input_sha256) {
    json_t *doc = json_object(), *steps = json_array();
    json_t *canon = json_loads(r->json, 0, NULL);
    char *out = NULL;
    if (!doc || !steps || !canon) goto done;
    json_object_set(doc, "recipe", canon);
    json_object_set_new(doc, "recipe_file", json_string(r->name));
    json_object_set_new(doc, "recipe_sha256", json_string(r->sha));
    json_object_set_new(doc, "input_sha256", input_sha256 ? json_string(input_sha256) : json_null());
    for (size_t k = 0; k < r->nsteps; k++) {
        step_totals t;
        if (sum) totals_of(sum, k, &t);
        else memset(&t, 0, sizeof t);
        json_t *e = json_pack("{s:I, s:s, s:i, s:I, s:I, s:I, s:I, s:I}", "step", (json_int_t)(k + 1), "kind",
                              npuc_step_kind_name(r->steps[k].kind), "line", r->steps[k].mark.line, "tensors",
                              (json_int_t)t.n, "bytes_before", (json_int_t)t.bytes_before, "bytes_after",
                              (json_int_t)t.bytes_after, "params_before", (json_int_t)t.params_before,
                              "params_after", (json_int_t)t.params_after);
        if (!e) goto done;
        json_object_set_new(e, "weighted_sqnr_db", jnum(sqnr_of(&t)));
        json_array_append_new(steps, e);
    }
    json_object_set(doc, "steps", steps);
    out = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
done:
    json_decref(canon);
    json_decref(steps);
    json_decref(doc);
    return out;
}

/* ------------------------------------------------------------ files */

/* Prefixes a step's failure with where it happened, and names the input
 * instead of an intermediate file the user never asked for. */
static npuc_status step_fail(npuc_ctx *ctx, npuc_status st, const npuc_recipe *r, size_t k, const char *in,
                             const char *stepin) {
    char msg[NPUC_MSG_MAX];
    const char *m = npuc_ctx_errmsg(ctx);
    size_t sl = strlen(stepin);
    if (strncmp(m, stepin, sl) == 0 && (m[sl] == ':' || m[sl] == 0)) m += sl + (m[sl] == ':');
    else if (strncmp(m, in, strlen(in)) == 0 && m[strlen(in)] == ':') m += strlen(in) + 1;
    while (*m == ' ') m++;
    snprintf(msg, sizeof msg, "%s", m);
    return npuc_fail(ctx, st, "%s: step %zu (%s, %s:%d:%d): %s", in, k + 1, npuc_step_kind_name(r->steps[k].kind),
                     r->name, r->steps[k].mark.line, r->steps[k].mark.col, msg);
}

/* Steps of one streamed group call back from their own threads: the
 * group's mutex (one per run_group call, never process-wide, so runs in
 * other threads do not wait on each other) makes the caller's on_tensor
 * see one call at a time. */
typedef struct hook_user {
    const npuc_run_opts *o;
    size_t step;
    pthread_mutex_t *mu;
} hook_user;

static void on_tensor_hook(void *user, size_t index, size_t count, const npuc_tensor_record *rec) {
    hook_user *h = user;
    pthread_mutex_lock(h->mu);
    h->o->on_tensor(h->o->user, h->step, index, count, rec);
    pthread_mutex_unlock(h->mu);
}

/* ------------------------------------------------------------ streamed groups
 *
 * A step whose pass reads each input tensor once, in order, can take its
 * input from the previous step while that step is still writing it: the two
 * run at the same time, the previous step's writer feeding an in-memory
 * pipe (src/pipeline/pipe.h) instead of "<out>.s<k>.tmp".  A group is a run of
 * steps joined this way; all but its last run in threads of their own, its
 * last one in the calling thread writes a file.  Only safetensors streams
 * (the pipe carries a safetensors header); an HDF5 output keeps its files. */

#define NPUC_PIPE_CAP ((uint64_t)64 << 20) /* bytes queued before the producer waits */

/* A quantize step under a budget (target_size, target_bpw, plan) reads its
 * tensors once to measure the candidates and again to write: it reads a
 * step file. */
static int streams_input(const recipe_step *s) {
    return s->kind == NPUC_STEP_QUANTIZE && !npuc__ropt(&s->opts, "target_size") &&
           !npuc__ropt(&s->opts, "target_bpw") && !npuc__ropt(&s->opts, "plan");
}

typedef struct step_job {
    const npuc_recipe *r;
    size_t k;               /* step index */
    npuc_ctx *c;
    npuc_model *m;          /* input */
    int own_m;              /* m is a pipe model this job closes */
    const char *out;
    npuc__pipe *pout;       /* the pipe it writes, or NULL for a file */
    recipe_hooks h;
    hook_user hu;
    npuc_summary ss;
    npuc_status st;
    int ran;
    pthread_t th;
    int threaded;
} step_job;

static void job_run(step_job *j) {
    const recipe_step *s = &j->r->steps[j->k];
    j->st = npuc__recipe_step_def(s->kind)->run(j->c, s, j->m, j->out, &j->h, &j->ss);
    j->ran = 1;
    if (j->own_m) { /* wakes a producer waiting for room if this step stopped early */
        npuc_model_close(j->m);
        j->m = NULL;
    }
    if (j->pout) npuc__pipe_producer_exit(j->pout);
}

static void *job_thread(void *arg) {
    job_run(arg);
    return NULL;
}

/* Runs steps k..last (a streamed group) on m, step last writing the file
 * paths[last]; merges their summaries into sum in step order. */
static npuc_status run_group(npuc_ctx *ctx, const npuc_recipe *r, const npuc_run_opts *o,
                             const npuc_write_opts *wo, size_t k, size_t last, npuc_model *m, char **paths,
                             npuc_summary *sum, const char *in) {
    const size_t g = last - k + 1;
    npuc_status st = NPUC_OK;
    step_job *jobs = calloc(g, sizeof *jobs);
    pthread_mutex_t hook_mu;
    if (!jobs) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    if (pthread_mutex_init(&hook_mu, NULL) != 0) {
        free(jobs);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "cannot create a mutex");
    }
    for (size_t j = 0; j < g; j++) {
        step_job *J = &jobs[j];
        J->r = r;
        J->k = k + j;
        J->out = paths[k + j];
        J->st = NPUC_OK;
        if (npuc_ctx_new(&J->c) != NPUC_OK) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); break; }
        npuc_ctx_set_threads(J->c, npuc_ctx_threads(ctx));
        /* strict and accept-guesses hold for every step; gates are the
         * run's (npuc_recipe_run checks each step's records before the
         * commit), so a step given a gate of -inf neither fails nor adds
         * the low-quality warning a gate makes moot. */
        npuc_policy pol = *npuc_ctx_policy(ctx);
        if (npuc__gate_any(ctx)) {
            pol.min_sqnr = pol.min_layer_sqnr = -INFINITY;
            pol.max_output_error = INFINITY;
        }
        npuc_ctx_set_policy(J->c, &pol);
        const recipe_step *s = &r->steps[k + j];
        if (o->on_step) o->on_step(o->user, k + j, r->nsteps, s->kind);
        if (j == 0) {
            J->m = m;
        } else {
            J->own_m = 1;
            if ((J->st = npuc__pipe_open(J->c, jobs[j - 1].pout, &J->m)) != NPUC_OK) break;
        }
        if ((J->st = check_patterns(J->c, r, k + j, J->m)) != NPUC_OK) break;
        J->hu.o = o;
        J->hu.step = k + j;
        J->hu.mu = &hook_mu;
        J->h.write = *wo;
        J->h.recipe = r->name;
        /* "target_size: 25%" is of the model the run was given, not of what
         * an earlier step handed over (a step file, tensors in memory). */
        struct stat isb;
        J->h.pct_base = stat(in, &isb) == 0 && S_ISREG(isb.st_mode) ? (uint64_t)isb.st_size : 0;
        J->h.write.overwrite = 1; /* our own temporary names: a leftover is stale */
        /* A step's file is read once by the next step and deleted: not worth compressing. */
        if (k + j + 1 < r->nsteps && npuc_format_accepts(wo->format, "deflate") &&
            (J->st = npuc_write_opts_set(J->c, &J->h.write, "deflate", "0")) != NPUC_OK)
            break;
        J->h.on_tensor = o->on_tensor ? on_tensor_hook : NULL;
        J->h.user = &J->hu;
        if (j + 1 < g) {
            if ((J->st = npuc__pipe_new(J->c, paths[k + j], NPUC_PIPE_CAP, &J->pout)) != NPUC_OK) break;
            J->h.sink_open = npuc__pipe_sink_open; /* the step writes into the pipe, not paths[k + j] */
            J->h.sink_state = J->pout;
            if (pthread_create(&J->th, NULL, job_thread, J) != 0) {
                J->st = npuc_fail(J->c, NPUC_ERR_NOMEM, "cannot start a thread");
                npuc__pipe_producer_exit(J->pout);
                break;
            }
            J->threaded = 1;
        } else {
            job_run(J);
        }
    }
    /* A job that did not run still has to let its producer go. */
    for (size_t j = 0; j < g; j++) {
        if (!jobs[j].ran && jobs[j].own_m && jobs[j].m) {
            npuc_model_close(jobs[j].m);
            jobs[j].m = NULL;
        }
        if (jobs[j].pout && j + 1 < g && !jobs[j + 1].ran) npuc__pipe_abandon(jobs[j].pout);
    }
    for (size_t j = 0; j < g; j++)
        if (jobs[j].threaded) pthread_join(jobs[j].th, NULL);
    /* The cause: the first failed step whose failure was not the other
     * side of a pipe giving up. */
    size_t root = g;
    for (size_t j = 0; j < g && root == g && st == NPUC_OK; j++) {
        if (jobs[j].st == NPUC_OK) continue;
        int induced = (jobs[j].pout && npuc__pipe_induced(jobs[j].pout, 0)) ||
                      (j > 0 && jobs[j - 1].pout && npuc__pipe_induced(jobs[j - 1].pout, 1));
        if (!induced) root = j;
    }
    if (st == NPUC_OK && root == g)
        for (size_t j = 0; j < g && root == g; j++)
            if (jobs[j].st != NPUC_OK) root = j;
    if (st == NPUC_OK && root < g) {
        npuc_fail(ctx, jobs[root].st, "%s", npuc_ctx_errmsg(jobs[root].c));
        st = step_fail(ctx, jobs[root].st, r, k + root, in, k + root ? paths[k + root - 1] : in);
    }
    for (size_t j = 0; j < g; j++) {
        if (st == NPUC_OK && merge_step(sum, &jobs[j].ss, k + j, npuc__recipe_step_def(r->steps[k + j].kind)->name) != NPUC_OK)
            st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        npuc_summary_free(&jobs[j].ss);
        npuc__pipe_free(jobs[j].pout);
        npuc_ctx_free(jobs[j].c);
    }
    free(jobs);
    pthread_mutex_destroy(&hook_mu);
    return st;
}

npuc_status npuc_recipe_run(npuc_ctx *ctx, const npuc_recipe *r, const char *in, const char *out,
                            const npuc_run_opts *o, npuc_summary *sum) {
    npuc_run_opts dflt = npuc_run_opts_defaults();
    if (!o) o = &dflt;
    memset(sum, 0, sizeof *sum);
    npuc_status st = NPUC_OK;
    npuc_model *m = NULL;
    npuc__run_files files = {0};
    meta_list src_meta = {0};
    char *out_dir_name = NULL;
    char **paths = NULL;
    char in_sha[65];
    if (npuc_summary_init(sum, "run", 0) != NPUC_OK) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    for (size_t k = 0; k < r->nsteps; k++) {
        if (!npuc_step_available(r->steps[k].kind)) {
            st = npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s:%d:%d: step '%s' is not available in this build", r->name,
                           r->steps[k].mark.line, r->steps[k].mark.col, npuc_step_kind_name(r->steps[k].kind));
            goto fail;
        }
    }
    if ((st = npuc_model_open(ctx, in, NULL, &m)) != NPUC_OK) goto fail;
    npuc_write_opts wo = o->write;
    if (wo.format == NPUC_FORMAT_AUTO) wo.format = npuc_format_from_path(out);
    if (wo.format == NPUC_FORMAT_AUTO) wo.format = npuc_model_format(m);
    /* A directory output (a checkpoint): every step but the last writes a
     * safetensors step file, the last one a step directory that the
     * format's move_dir puts in place (docs/recipes.md). */
    const npuc__format_row *orow = npuc__format_by_id(wo.format);
    const int out_dir = orow && orow->writes_dir && orow->move_dir;
    if (out_dir) { /* "ckpt/" names the directory ckpt */
        size_t n = strlen(out);
        while (n > 1 && out[n - 1] == '/') n--;
        if (!(out_dir_name = strndup(out, n))) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto fail; }
        out = out_dir_name;
    }
    if (out_dir && (st = orow->move_dir(ctx, NULL, out, o->write.overwrite)) != NPUC_OK) goto fail;
    /* Fails with NPUC_ERR_EXISTS when out exists without overwrite. */
    if ((st = npuc__run_files_open(ctx, out, r->nsteps, o->write.overwrite, out_dir, &files)) != NPUC_OK) goto fail;
    paths = files.paths;
    if (o->input_sha256) snprintf(in_sha, sizeof in_sha, "%s", o->input_sha256);
    else if ((st = npuc_sha256_file(ctx, in, in_sha)) != NPUC_OK) goto fail;
    if ((st = check_layout_rules(ctx, r, m)) != NPUC_OK) goto fail;
    if ((st = set_meta(ctx, m, NPUC_META_RECIPE, r->json)) != NPUC_OK ||
        (st = set_meta(ctx, m, NPUC_META_RECIPE_SHA256, r->sha)) != NPUC_OK ||
        (st = set_meta(ctx, m, NPUC_META_INPUT_SHA256, in_sha)) != NPUC_OK)
        goto fail;
    /* A step file drops the "npuc.source.*" facts the directory writer
     * needs (the source's sharding and side files: writer.c), so they are
     * kept here and given back to each step file read. */
    if (out_dir && r->nsteps > 1 && (st = keep_source_meta(ctx, m, &src_meta)) != NPUC_OK) goto fail;
    npuc_write_opts wo_mid = wo;
    if (out_dir) wo_mid.format = NPUC_FORMAT_SAFETENSORS;

    const int stream = wo.format == NPUC_FORMAT_SAFETENSORS && !o->no_stream;
    for (size_t k = 0; k < r->nsteps;) {
        size_t last = k;
        while (stream && last + 1 < r->nsteps && streams_input(&r->steps[last + 1])) last++;
        st = run_group(ctx, r, o, last + 1 < r->nsteps ? &wo_mid : &wo, k, last, m, paths, sum, in);
        if (st != NPUC_OK) goto fail;
        npuc_model_close(m);
        m = NULL;
        if (k > 0) unlink(paths[k - 1]);
        if ((st = npuc_model_open(ctx, paths[last], NULL, &m)) != NPUC_OK) goto fail;
        for (size_t i = 0; last + 1 < r->nsteps && i < src_meta.n; i++)
            if ((st = set_meta(ctx, m, src_meta.k[i], src_meta.v[i])) != NPUC_OK) goto fail;
        k = last + 1;
    }
    /* The provenance must have survived every pass. */
    const char *keys[3] = {NPUC_META_RECIPE, NPUC_META_RECIPE_SHA256, NPUC_META_INPUT_SHA256};
    const char *want[3] = {r->json, r->sha, in_sha};
    for (int i = 0; i < 3; i++) {
        const char *v = npuc_model_meta_get(m, keys[i]);
        if (!v || strcmp(v, want[i]) != 0) {
            st = npuc_fail(ctx, NPUC_ERR_INTERNAL, "%s: a step dropped the '%s' metadata entry", in, keys[i]);
            goto fail;
        }
    }
    npuc_model_close(m);
    m = NULL;
    finish_run(sum, r->nsteps);
    /* The quality gates, per step, before the report is written (it lists
     * the failure) and instead of the commit: a failed gate publishes
     * nothing and keeps the summary for the caller's report. */
    npuc_status gate = NPUC_OK;
    for (size_t k = 0; k < r->nsteps && gate == NPUC_OK; k++) {
        char label[64];
        snprintf(label, sizeof label, "step %zu (%s): ", k + 1, npuc_step_kind_name(r->steps[k].kind));
        const npuc__gate_scope sc = {in, out, k + 1, label, 0};
        gate = npuc__gate_check(ctx, sum, &sc);
    }
    if (gate != NPUC_OK && gate != NPUC_ERR_GATE) { st = gate; goto fail; }
    char gate_msg[NPUC_MSG_MAX];
    snprintf(gate_msg, sizeof gate_msg, "%s", gate == NPUC_OK ? "" : npuc_ctx_errmsg(ctx));
    if (o->before_commit && (st = o->before_commit(o->user, ctx, sum)) != NPUC_OK) goto fail;
    if (gate != NPUC_OK) {
        st = npuc_fail(ctx, gate, "%s", gate_msg);
        goto done;
    }
    st = out_dir ? orow->move_dir(ctx, paths[r->nsteps - 1], out, o->write.overwrite)
                 : npuc__run_commit(ctx, paths[r->nsteps - 1], out, o->write.overwrite);
    if (st != NPUC_OK) goto fail;
    goto done;
fail:
    npuc_summary_free(sum);
done:
    npuc_model_close(m);
    npuc__run_files_close(&files);
    meta_list_free(&src_meta);
    free(out_dir_name);
    return st;
}

/* ------------------------------------------------------------ resume support */

npuc_status npuc_recipe_output_complete(npuc_ctx *ctx, const npuc_recipe *r, const char *out,
                                        const char *input_sha256, int *complete) {
    *complete = 0;
    struct stat sb;
    if (stat(out, &sb) != 0 || !(S_ISREG(sb.st_mode) || S_ISDIR(sb.st_mode))) return NPUC_OK; /* dir: a checkpoint */
    npuc_ctx *c2;
    if (npuc_ctx_new(&c2) != NPUC_OK) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    npuc_model *m = NULL;
    if (npuc_model_open(c2, out, NULL, &m) == NPUC_OK) {
        const char *rs = npuc_model_meta_get(m, NPUC_META_RECIPE_SHA256);
        const char *is = npuc_model_meta_get(m, NPUC_META_INPUT_SHA256);
        *complete = rs && is && strcmp(rs, r->sha) == 0 && strcmp(is, input_sha256) == 0;
    }
    npuc_model_close(m);
    npuc_ctx_free(c2);
    return NPUC_OK;
}

static int unlink_counted(npuc_ctx *ctx, const char *p, size_t *removed, npuc_status *st) {
    if (unlink(p) == 0) {
        (*removed)++;
        return 0;
    }
    if (errno != ENOENT && *st == NPUC_OK) *st = npuc_fail(ctx, NPUC_ERR_IO, "%s: cannot remove: %s", p, strerror(errno));
    return -1;
}

/* "<base>.s<digits>.tmp" or "<base>.s<digits>.tmp.tmp". */
static int is_step_temp(const char *name, const char *base, size_t bl) {
    if (strncmp(name, base, bl) != 0 || strncmp(name + bl, ".s", 2) != 0) return 0;
    const char *p = name + bl + 2;
    if (*p < '0' || *p > '9') return 0;
    while (*p >= '0' && *p <= '9') p++;
    return strcmp(p, ".tmp") == 0 || strcmp(p, ".tmp.tmp") == 0;
}

npuc_status npuc_recipe_sweep(npuc_ctx *ctx, const char *out, const char *report, size_t *removed) {
    size_t cnt = 0, n = strlen(out) + (report ? strlen(report) : 0) + 300;
    npuc_status st = NPUC_OK;
    char *p = malloc(n);
    if (!p) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    snprintf(p, n, "%s.tmp", out);
    unlink_counted(ctx, p, &cnt, &st);
    if (report) {
        snprintf(p, n, "%s.tmp", report);
        unlink_counted(ctx, p, &cnt, &st);
    }
    /* Step files: whatever step a killed run was in, scan the folder. */
    const char *slash = strrchr(out, '/');
    const char *base = slash ? slash + 1 : out;
    size_t dl = slash ? (size_t)(slash - out) : 0, bl = strlen(base);
    char *dir = slash ? strndup(out, dl ? dl : 1) : strdup(".");
    DIR *d = dir ? opendir(dir) : NULL;
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!is_step_temp(e->d_name, base, bl)) continue;
            snprintf(p, n, "%s/%s", dir, e->d_name);
            unlink_counted(ctx, p, &cnt, &st);
        }
        closedir(d);
    }
    free(dir);
    free(p);
    /* Step files of runs that died (recipe_files.c). */
    int err = 0;
    cnt += npuc__step_files_sweep(out, &err);
    /* The output's own temp file of a run killed between publishing it
     * (link) and unlinking the temp: the output is complete, so --resume
     * never opens a new temp, whose open would sweep it. */
    npuc_status ts = npuc__tempfiles_sweep(ctx, out);
    if (ts != NPUC_OK && st == NPUC_OK) st = ts;
    if (err && st == NPUC_OK) st = npuc_fail(ctx, NPUC_ERR_IO, "%s: cannot remove a step file: %s", out, strerror(err));
    if (removed) *removed = cnt;
    return st;
}
