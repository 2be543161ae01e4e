/*
 * test_threads.c - no library-global mutable state: two reports written at
 * the same time in two threads, and two recipe runs in two threads writing
 * into one folder, give exactly what each gives alone.
 *
 * The reports sort thousands of records worst SQNR first; their SQNRs are
 * two different permutations, so a sort that read the other thread's
 * records (the qsort-with-a-global pattern this replaced) gives a different
 * order or crashes.  The expected order is also computed here from the
 * permutation itself, not from npuc's output.  The recipe runs write step
 * files beside their outputs: their names must be private to each run, and
 * nothing may be left in the folder afterwards.
 */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define NREC 3000
#define ROUNDS 20

/* ------------------------------------------------------------ reports */

typedef struct rep_case {
    npuc_summary s;
    int perm[NREC];      /* record i has SQNR perm[i] / 4 dB */
    char *alone[2];      /* text and markdown written with no other thread */
    int mismatches;
} rep_case;

static void make_case(rep_case *c, uint64_t seed) {
    for (int i = 0; i < NREC; i++) c->perm[i] = i;
    for (int i = NREC - 1; i > 0; i--) { /* Fisher-Yates */
        int j = (int)(npuc_test_rand(&seed) % (uint64_t)(i + 1)), t = c->perm[i];
        c->perm[i] = c->perm[j];
        c->perm[j] = t;
    }
    assert_int_equal(npuc_summary_init(&c->s, "test", NREC), NPUC_OK);
    for (int i = 0; i < NREC; i++) {
        char name[32];
        snprintf(name, sizeof name, "t%05d.weight", i);
        npuc_tensor_info t;
        memset(&t, 0, sizeof t);
        t.name = name;
        t.dtype = NPUC_DTYPE_F32;
        t.rank = 1;
        t.shape[0] = 16;
        t.numel = 16;
        t.nbytes = 64;
        npuc_tensor_record *r = &c->s.records[i];
        assert_int_equal(npuc_record_from_tensor(r, &t), NPUC_OK);
        r->action = NPUC_ACTION_QUANTIZED;
        r->bytes_after = 16;
        r->has_error = 1;
        npuc_error_from_sums(&r->err, 16, 1.0, 0.01, 0.99, 1.0, 0.05, 0, 0);
        r->err.sqnr_db = c->perm[i] / 4.0;
    }
    npuc_summary_finish(&c->s);
}

static char *render(const npuc_summary *s, npuc_report_format fmt) {
    npuc_ctx *ctx;
    if (npuc_ctx_new(&ctx) != NPUC_OK) return NULL;
    npuc_report_info info = npuc_report_info_defaults();
    info.sort_by_sqnr = 1;
    info.timestamp = 0;
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    npuc_status st = f ? npuc_report_write(ctx, f, fmt, s, &info) : NPUC_ERR_NOMEM;
    if (f) fclose(f);
    npuc_ctx_free(ctx);
    if (st != NPUC_OK) {
        free(buf);
        return NULL;
    }
    return buf;
}

static void *rep_thread(void *arg) {
    rep_case *c = arg;
    static const npuc_report_format F[2] = {NPUC_REPORT_TEXT, NPUC_REPORT_MD};
    for (int k = 0; k < ROUNDS; k++)
        for (int f = 0; f < 2; f++) {
            char *r = render(&c->s, F[f]);
            if (!r || strcmp(r, c->alone[f]) != 0) c->mismatches++;
            free(r);
        }
    return NULL;
}

/* The text report lists the records worst SQNR first: record i comes at
 * position perm[i], checked by where each name appears. */
static void check_order(const rep_case *c, const char *text) {
    const char *prev = text;
    int *by_rank = malloc(NREC * sizeof *by_rank);
    assert_non_null(by_rank);
    for (int i = 0; i < NREC; i++) by_rank[c->perm[i]] = i;
    for (int k = 0; k < NREC; k++) {
        char name[32];
        snprintf(name, sizeof name, "t%05d.weight ", by_rank[k]);
        const char *p = strstr(prev, name);
        if (!p) fail_msg("record of rank %d (%s) not after the one before it", k, name);
        prev = p;
    }
    free(by_rank);
}

static void test_two_reports(void **state) {
    (void)state;
    static rep_case c[2];
    make_case(&c[0], 1);
    make_case(&c[1], 2);
    for (int i = 0; i < 2; i++) {
        c[i].alone[0] = render(&c[i].s, NPUC_REPORT_TEXT);
        c[i].alone[1] = render(&c[i].s, NPUC_REPORT_MD);
        assert_non_null(c[i].alone[0]);
        assert_non_null(c[i].alone[1]);
        check_order(&c[i], c[i].alone[0]);
    }
    assert_true(strcmp(c[0].alone[0], c[1].alone[0]) != 0);
    pthread_t th[2];
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, rep_thread, &c[i]), 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(c[i].mismatches, 0);
        free(c[i].alone[0]);
        free(c[i].alone[1]);
        npuc_summary_free(&c[i].s);
    }
}

/* ------------------------------------------------------------ recipe runs */

static const char *src_dir(void) {
    const char *s = getenv("NPUC_SRC");
    return s && *s ? s : ".";
}

typedef struct run_case {
    const npuc_recipe *r;
    const char *in;
    char out[1024];
    size_t tensors;      /* on_tensor calls */
    npuc_status st;
    char err[1024];
} run_case;

static void on_tensor(void *user, size_t step, size_t index, size_t count, const npuc_tensor_record *r) {
    (void)step, (void)index, (void)count, (void)r;
    ((run_case *)user)->tensors++;
}

static void *run_thread(void *arg) {
    run_case *c = arg;
    npuc_ctx *ctx;
    if (npuc_ctx_new(&ctx) != NPUC_OK) {
        c->st = NPUC_ERR_NOMEM;
        return NULL;
    }
    npuc_ctx_set_threads(ctx, 1);
    npuc_run_opts o = npuc_run_opts_defaults();
    o.no_stream = 1; /* every step through its step file */
    o.write.overwrite = 1;
    o.on_tensor = on_tensor;
    o.user = c;
    npuc_summary sum;
    c->st = npuc_recipe_run(ctx, c->r, c->in, c->out, &o, &sum);
    snprintf(c->err, sizeof c->err, "%s", npuc_ctx_errmsg(ctx));
    if (c->st == NPUC_OK) npuc_summary_free(&sum);
    npuc_ctx_free(ctx);
    return NULL;
}

/* Names in dir that are neither in keep[] nor "." / "..": 0 when none. */
static int leftovers(const char *dir, const char *const *keep, int nkeep) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int known = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
        for (int i = 0; i < nkeep && !known; i++) known = !strcmp(e->d_name, keep[i]);
        if (!known) {
            print_error("left in %s: %s\n", dir, e->d_name);
            n++;
        }
    }
    closedir(d);
    return n;
}

static void test_two_runs(void **state) {
    (void)state;
    if (!npuc_step_available(NPUC_STEP_FOLD_BN)) skip();
    char in[1024];
    snprintf(in, sizeof in, "%s/samples/cnn_bn.safetensors", src_dir());
    npuc_ctx *ctx;
    assert_int_equal(npuc_ctx_new(&ctx), NPUC_OK);
    npuc_recipe *r = NULL;
    static const char Y[] = "steps:\n  - fold-bn:\n  - quantize:\n      bits: 8\n";
    if (npuc_recipe_parse(ctx, "t.yaml", Y, strlen(Y), &r) != NPUC_OK) fail_msg("%s", npuc_ctx_errmsg(ctx));
    /* Alone: the reference result. */
    run_case ref = {.r = r, .in = in};
    snprintf(ref.out, sizeof ref.out, "%s", npuc_test_path("ref.safetensors"));
    run_thread(&ref);
    if (ref.st != NPUC_OK) fail_msg("%s", ref.err);
    size_t nref;
    void *want = npuc_test_read_file(ref.out, &nref);
    assert_non_null(want);
    assert_true(ref.tensors > 0);
    /* Two at a time, different outputs in one folder, then the same output. */
    for (int round = 0; round < 6; round++) {
        run_case c[2] = {{.r = r, .in = in}, {.r = r, .in = in}};
        for (int i = 0; i < 2; i++)
            snprintf(c[i].out, sizeof c[i].out, "%s",
                     npuc_test_path(round % 2 ? "same.safetensors" : i ? "b.safetensors" : "a.safetensors"));
        pthread_t th[2];
        for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, run_thread, &c[i]), 0);
        for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
        for (int i = 0; i < 2; i++) {
            if (c[i].st != NPUC_OK) fail_msg("round %d run %d: %s", round, i, c[i].err);
            assert_int_equal(c[i].tensors, ref.tensors);
            size_t n;
            void *got = npuc_test_read_file(c[i].out, &n);
            assert_non_null(got);
            assert_int_equal(n, nref);
            assert_memory_equal(got, want, nref);
            free(got);
        }
    }
    static const char *const keep[] = {"ref.safetensors", "a.safetensors", "b.safetensors", "same.safetensors"};
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", npuc_test_path("x"));
    *strrchr(dir, '/') = 0;
    assert_int_equal(leftovers(dir, keep, 4), 0);
    free(want);
    npuc_recipe_free(r);
    npuc_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_reports),
        cmocka_unit_test(test_two_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
