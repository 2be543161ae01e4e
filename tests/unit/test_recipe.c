/*
 * test_recipe.c - recipes (include/npuc/recipe.h): every sample recipe
 * parses; invalid recipes fail with the expected message, line and column;
 * the canonical form ignores comments, quoting and key order; patterns that
 * match nothing fail at run time with the recipe's line and column; the
 * sweep removes exactly our temporary files; options set from the command
 * line (npuc_recipe_set_option) change the canonical form as a file would;
 * batch work lists are sorted,
 * sharded and checked.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

static npuc_ctx *ctx;

static int setup(void **state) { (void)state; return npuc_ctx_new(&ctx) == NPUC_OK ? 0 : -1; }
static int teardown(void **state) { (void)state; npuc_ctx_free(ctx); return 0; }

static const char *src_dir(void) {
    const char *s = getenv("NPUC_SRC");
    return s && *s ? s : ".";
}

static npuc_status parse(const char *text, npuc_recipe **r) {
    return npuc_recipe_parse(ctx, "r.yaml", text, strlen(text), r);
}

/* Parses text that must be valid, failing with the library's message. */
#define must_parse(text, r)                                                     \
    do {                                                                        \
        if (parse((text), (r)) != NPUC_OK) fail_msg("%s", npuc_ctx_errmsg(ctx)); \
    } while (0)

/* ------------------------------------------------------------ valid */

static void test_samples_parse(void **state) {
    (void)state;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/samples/recipes", src_dir());
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".yaml") != 0) continue;
        char p[2048];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        npuc_recipe *r = NULL;
        npuc_status st = npuc_recipe_load(ctx, p, &r);
        if (st != NPUC_OK) fail_msg("%s: %s", p, npuc_ctx_errmsg(ctx));
        assert_true(npuc_recipe_step_count(r) >= 1);
        assert_int_equal(strlen(npuc_recipe_sha256(r)), 64);
        assert_non_null(strstr(npuc_recipe_json(r), "\"steps\""));
        /* The last step of every sample is quantize. */
        assert_int_equal(npuc_recipe_step_kind(r, npuc_recipe_step_count(r) - 1, NULL, NULL), NPUC_STEP_QUANTIZE);
        npuc_recipe_free(r);
        n++;
    }
    closedir(d);
    assert_true(n >= 5);
}

static void test_canonical(void **state) {
    (void)state;
    npuc_recipe *a = NULL, *b = NULL, *c = NULL;
    must_parse("steps:\n  - fold-bn:\n  - quantize: {bits: 4, group_size: 128}\n", &a);
    must_parse("# a comment\ndescription: same thing\nsteps:\n"
               "  - fold-bn: ~\n"
               "  - quantize:\n"
               "      group_size: 128   # key order does not matter\n"
               "      bits: 4\n",
               &b);
    must_parse("steps:\n  - quantize: {bits: 4, group_size: 64}\n", &c);
    assert_string_equal(npuc_recipe_json(a), npuc_recipe_json(b));
    assert_string_equal(npuc_recipe_sha256(a), npuc_recipe_sha256(b));
    assert_string_not_equal(npuc_recipe_sha256(a), npuc_recipe_sha256(c));
    assert_string_equal(npuc_recipe_json(a),
                        "{\"version\":1,\"steps\":[{\"fold-bn\":{}},{\"quantize\":{\"bits\":4,\"group_size\":128}}]}");
    int line, col;
    assert_int_equal(npuc_recipe_step_kind(b, 1, &line, &col), NPUC_STEP_QUANTIZE);
    assert_int_equal(line, 5);
    assert_int_equal(col, 5);
    npuc_recipe_free(a);
    npuc_recipe_free(b);
    npuc_recipe_free(c);
}

/* npuc_recipe_set_option: a value typed as the command line types it
 * replaces the step's own, NULL removes it, the canonical JSON and hash
 * follow; a bad value, an unknown key or a check the step then fails leave
 * the recipe as it was (the JSON compared with the expected text by hand). */
static void test_set_option(void **state) {
    (void)state;
    npuc_recipe *r = NULL, *plain = NULL, *want = NULL;
    must_parse("steps:\n  - quantize: {bits: 4, target_bpw: 3}\n", &r);
    must_parse("steps:\n  - quantize: {bits: 4, target_size: \"25%\"}\n", &want);
    must_parse("steps:\n  - quantize: {bits: 4}\n", &plain);
    const char *json0 = "{\"version\":1,\"steps\":[{\"quantize\":{\"bits\":4,\"target_bpw\":3.0}}]}";
    assert_string_equal(npuc_recipe_json(r), json0);
    char sha0[65];
    memcpy(sha0, npuc_recipe_sha256(r), sizeof sha0);
    assert_int_equal(npuc_recipe_set_option(ctx, r, 0, "target_size", "25%"), NPUC_OK);
    assert_int_equal(npuc_recipe_set_option(ctx, r, 0, "target_bpw", NULL), NPUC_OK);
    assert_string_equal(npuc_recipe_json(r),
                        "{\"version\":1,\"steps\":[{\"quantize\":{\"bits\":4,\"target_size\":\"25%\"}}]}");
    assert_string_equal(npuc_recipe_sha256(r), npuc_recipe_sha256(want));
    assert_string_not_equal(npuc_recipe_sha256(r), sha0);
    /* Removing what is not there changes nothing. */
    assert_int_equal(npuc_recipe_set_option(ctx, r, 0, "target_bpw", NULL), NPUC_OK);
    assert_string_equal(npuc_recipe_sha256(r), npuc_recipe_sha256(want));
    /* Refusals leave the recipe as it was. */
    assert_int_equal(npuc_recipe_set_option(ctx, r, 0, "target_size", "0%"), NPUC_ERR_ARG);
    assert_int_equal(npuc_recipe_set_option(ctx, r, 0, "target_bpw", "40"), NPUC_ERR_ARG);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "--target-bpw '40'"));
    assert_int_equal(npuc_recipe_set_option(ctx, r, 0, "no_such_key", "1"), NPUC_ERR_ARG);
    assert_int_equal(npuc_recipe_set_option(ctx, r, 0, "exclude", "x"), NPUC_ERR_ARG); /* a list */
    assert_int_equal(npuc_recipe_set_option(ctx, r, 1, "bits", "8"), NPUC_ERR_ARG);     /* no step 2 */
    /* plan beside a budget: the step's own check refuses, at plan's line. */
    assert_int_equal(npuc_recipe_set_option(ctx, r, 0, "plan", "p.json"), NPUC_ERR_ARG);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "'plan' applies a plan"));
    assert_string_equal(npuc_recipe_sha256(r), npuc_recipe_sha256(want));
    assert_string_equal(npuc_recipe_json(r),
                        "{\"version\":1,\"steps\":[{\"quantize\":{\"bits\":4,\"target_size\":\"25%\"}}]}");
    /* A replaced value, then removed: back to the plain recipe. */
    assert_int_equal(npuc_recipe_set_option(ctx, r, 0, "target_size", "1M"), NPUC_OK);
    assert_non_null(strstr(npuc_recipe_json(r), "\"target_size\":\"1M\""));
    assert_int_equal(npuc_recipe_set_option(ctx, r, 0, "target_size", NULL), NPUC_OK);
    assert_string_equal(npuc_recipe_sha256(r), npuc_recipe_sha256(plain));
    npuc_recipe_free(r);
    npuc_recipe_free(want);
    npuc_recipe_free(plain);
}

/* rank (lowrank) and sparsity (prune) overrides parse, and the canonical
 * form records them in file order with their types. */
static void test_layer_overrides_parse(void **state) {
    (void)state;
    npuc_recipe *a = NULL, *b = NULL;
    must_parse("steps:\n"
               "  - prune:\n"
               "      sparsity: 0.5\n"
               "      scope: global\n"
               "      overrides:\n"
               "        - match: '^features\\.0\\.'\n"
               "          sparsity: 0.25\n"
               "        - {match: classifier, sparsity: 0}\n"
               "        - {match: bias, skip: true}\n"
               "  - lowrank:\n"
               "      energy: 0.9\n"
               "      round_to: 2\n"
               "      overrides:\n"
               "        - {match: '^features\\.3\\.weight$', rank: 3}\n"
               "        - {rank: 5, match: classifier}\n"
               "  - quantize: {bits: 8}\n",
               &a);
    assert_int_equal(npuc_recipe_step_count(a), 3);
    assert_string_equal(npuc_recipe_json(a),
                        "{\"version\":1,\"steps\":["
                        "{\"prune\":{\"sparsity\":0.5,\"scope\":\"global\",\"overrides\":["
                        "{\"match\":\"^features\\\\.0\\\\.\",\"sparsity\":0.25},"
                        "{\"match\":\"classifier\",\"sparsity\":0.0},"
                        "{\"match\":\"bias\",\"skip\":true}]}},"
                        "{\"lowrank\":{\"energy\":0.90000000000000002,\"round_to\":2,\"overrides\":["
                        "{\"match\":\"^features\\\\.3\\\\.weight$\",\"rank\":3},"
                        "{\"match\":\"classifier\",\"rank\":5}]}},"
                        "{\"quantize\":{\"bits\":8}}]}");
    /* Structured pruning takes the sparsity override too. */
    must_parse("steps:\n  - prune:\n      sparsity: 0.5\n      structured: filter\n      overrides:\n"
               "        - {match: 'features\\.3', sparsity: 0.75}\n",
               &b);
    assert_non_null(strstr(npuc_recipe_json(b), "\"overrides\":[{\"match\":\"features\\\\.3\",\"sparsity\":0.75}]"));
    npuc_recipe_free(a);
    npuc_recipe_free(b);
}

/* ------------------------------------------------------------ invalid */

typedef struct bad {
    const char *text;
    const char *msg; /* expected substring, including "r.yaml:L:C:" */
} bad;

static const bad BAD[] = {
    {"stepz:\n  - quantize:\n", "r.yaml:1:1: unknown key 'stepz' (known: version, description, layout, steps)"},
    {"steps:\n  - quantise:\n", "r.yaml:2:5: unknown step 'quantise'"},
    {"steps:\n  - quantize:\n      bitz: 4\n", "r.yaml:3:7: step 'quantize': unknown key 'bitz' (known: bits,"},
    {"steps:\n  - quantize:\n      bits: \"8\"\n",
     "r.yaml:3:13: step 'quantize': 'bits' must be an integer from 2 to 8, got the string '8'"},
    {"steps:\n  - quantize:\n      bits: 9\n", "r.yaml:3:13: step 'quantize': 'bits' must be an integer from 2 to 8, got 9"},
    {"steps:\n  - quantize:\n      symmetric: yes\n",
     "r.yaml:3:18: step 'quantize': 'symmetric' must be true or false, got 'yes'"},
    {"steps:\n  - quantize:\n      group-size: 64\n",
     "r.yaml:3:7: step 'quantize': unknown key 'group-size' (option names use '_' for '-': 'group_size')"},
    {"steps:\n  - quantize:\n      overrides:\n        - match: '(fc'\n          bits: 8\n",
     "r.yaml:4:18: step 'quantize': 'match': bad regular expression '(fc'"},
    {"steps:\n  - quantize:\n      overrides:\n        - bits: 8\n", "r.yaml:4:11: step 'quantize': an override needs 'match: REGEX'"},
    {"steps:\n  - quantize:\n      overrides:\n        - match: fc\n          rank: 8\n",
     "r.yaml:5:11: step 'quantize': the override key 'rank' does not apply to this step (it takes: match, optional, bits, group_size, skip)"},
    /* Per-layer rank (lowrank) and sparsity (prune) overrides: type, range, step, skip. */
    {"steps:\n  - lowrank:\n      rank: 8\n      overrides:\n        - match: fc\n          rank: 0\n",
     "r.yaml:6:17: step 'lowrank': 'rank' must be an integer from 1 to 2147483647, got 0"},
    {"steps:\n  - lowrank:\n      energy: 0.9\n      overrides:\n        - {match: fc, rank: 2.5}\n",
     "r.yaml:5:29: step 'lowrank': 'rank' must be an integer from 1 to 2147483647, got '2.5'"},
    {"steps:\n  - lowrank:\n      rank: 8\n      overrides:\n        - match: fc\n          rank: \"4\"\n",
     "r.yaml:6:17: step 'lowrank': 'rank' must be an integer from 1 to 2147483647, got the string '4'"},
    {"steps:\n  - prune:\n      sparsity: 0.5\n      overrides:\n        - match: fc\n          sparsity: 1.0\n",
     "r.yaml:6:21: step 'prune': 'sparsity' must be a number in [0, 1), got 1.0"},
    {"steps:\n  - prune:\n      sparsity: 0.5\n      overrides:\n        - match: fc\n          sparsity: -0.1\n",
     "r.yaml:6:21: step 'prune': 'sparsity' must be a number in [0, 1), got -0.1"},
    {"steps:\n  - prune:\n      sparsity: 0.5\n      overrides:\n        - match: fc\n          sparsity: high\n",
     "r.yaml:6:21: step 'prune': 'sparsity' must be a number in [0, 1), got 'high'"},
    {"steps:\n  - prune:\n      sparsity: 0.5\n      overrides:\n        - match: fc\n          rank: 4\n",
     "r.yaml:6:11: step 'prune': the override key 'rank' does not apply to this step (it takes: match, optional, sparsity, skip)"},
    {"steps:\n  - lowrank:\n      rank: 8\n      overrides:\n        - {match: fc, sparsity: 0.5}\n",
     "r.yaml:5:23: step 'lowrank': the override key 'sparsity' does not apply to this step (it takes: match, optional, rank, skip)"},
    {"steps:\n  - sparsify:\n      overrides:\n        - {match: fc, sparsity: 0.5}\n",
     "r.yaml:4:23: step 'sparsify': the override key 'sparsity' does not apply to this step (it takes: match, optional, skip)"},
    {"steps:\n  - lowrank:\n      rank: 8\n      overrides:\n        - match: fc\n          skip: true\n          rank: 4\n",
     "r.yaml:7:17: step 'lowrank': the override for 'fc' sets 'skip: true' and 'rank': a skipped tensor gets no rank"},
    {"steps:\n  - prune:\n      sparsity: 0.5\n      overrides:\n        - {match: fc, sparsity: 0.2, skip: true}\n",
     "r.yaml:5:33: step 'prune': the override for 'fc' sets 'skip: true' and 'sparsity': a skipped tensor gets no sparsity"},
    {"steps:\n  - lowrank:\n      overrides:\n        - {match: fc, rank: 4}\n",
     "r.yaml:2:5: step 'lowrank': needs a rank rule"},
    {"steps:\n  - quantize:\n  - prune: {sparsity: 0.5}\n", "r.yaml:3:5: step 'prune' comes after 'quantize' (line 2)"},
    {"steps:\n  - lowrank:\n      round_to: 8\n", "r.yaml:2:5: step 'lowrank': needs a rank rule"},
    {"steps:\n  - lowrank: {rank: 8, energy: 0.9}\n", "r.yaml:2:32: step 'lowrank': choose one rank rule"},
    {"steps:\n  - quantize:\n      per_tensor: true\n      group_size: 32\n",
     "r.yaml:4:19: step 'quantize': choose one of per_channel, per_tensor, group_size"},
    {"steps: [\n", "r.yaml:2:1: YAML: "},
    {"", "r.yaml:1:1: the recipe is empty"},
    {"steps: 3\n", "r.yaml:1:8: 'steps' must be a non-empty list, got a scalar"},
    {"steps:\n  - quantize:\n      range: median\n", "r.yaml:3:14: step 'quantize': 'range': "},
    {"steps:\n  - lowrank: {rank: 4}\n  - fold-bn:\n", "r.yaml:3:5: 'fold-bn' must come before 'lowrank' (line 2)"},
    {"steps:\n  - quantize:\n    bits: 4\n", "r.yaml:2:5: each step must be a mapping with one key"},
    {"steps:\n  - sparsify: {pattern: 4:2}\n", "r.yaml:2:25: step 'sparsify': 'pattern': '4:2' is not an N:M pattern"},
    {"steps:\n  - prune: {scope: global}\n", "r.yaml:2:5: step 'prune': needs 'sparsity: S'"},
    {"steps:\n  - quantize:\n      include: [fc, true]\n", "r.yaml:3:21: step 'quantize': 'include': each item must be a string, got a boolean"},
    {"version: 2\nsteps:\n  - quantize:\n", "r.yaml:1:10: 'version' must be an integer from 1 to 1, got 2"},
    {"steps:\n  - quantize:\n      layer_bits: ['fc=12']\n", "r.yaml:3:20: step 'quantize': 'layer_bits': 'fc=12': the bit width"},
    {"steps:\n  - quantize:\n      bits: 4\n      bits: 8\n", "r.yaml:4:7: YAML: duplicate key"},
};

static void test_invalid(void **state) {
    (void)state;
    int nbad = 0;
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        npuc_recipe *r = (npuc_recipe *)1;
        npuc_status st = parse(BAD[i].text, &r);
        if (st != NPUC_ERR_ARG || r != NULL || !strstr(npuc_ctx_errmsg(ctx), BAD[i].msg)) {
            print_error("case %zu: status %d, message\n  '%s', expected\n  '%s'\n", i, (int)st, npuc_ctx_errmsg(ctx),
                        BAD[i].msg);
            nbad++;
        }
    }
    assert_int_equal(nbad, 0);
}

static void test_load_errors(void **state) {
    (void)state;
    npuc_recipe *r;
    assert_int_equal(npuc_recipe_load(ctx, "/nonexistent/r.yaml", &r), NPUC_ERR_NOT_FOUND);
    assert_null(r);
    const char *p = npuc_test_path("nul.yaml");
    npuc_test_write_file(p, "steps:\0\n", 8);
    assert_int_equal(npuc_recipe_load(ctx, p, &r), NPUC_ERR_ARG);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "NUL"));
}

/* ------------------------------------------------------------ running */

static void test_run_patterns(void **state) {
    (void)state;
    char in[1024];
    snprintf(in, sizeof in, "%s/samples/cnn_bn.safetensors", src_dir());
    npuc_recipe *r = NULL;
    /* An override that matches nothing: line 5, column 18 (the pattern). */
    must_parse("steps:\n  - quantize:\n      bits: 4\n      overrides:\n        - match: '^nothing$'\n"
               "          bits: 8\n",
               &r);
    const char *out = npuc_test_path("p.safetensors");
    npuc_summary sum;
    npuc_status st = npuc_recipe_run(ctx, r, in, out, NULL, &sum);
    assert_int_equal(st, NPUC_ERR_ARG);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "r.yaml:5:18: step 'quantize': override '^nothing$' matches no tensor"));
    assert_false(npuc_test_exists(out));
    npuc_recipe_free(r);
    /* A list item that matches nothing: its own position. */
    must_parse("steps:\n  - quantize:\n      exclude: [classifier, 'nope']\n", &r);
    assert_int_equal(npuc_recipe_run(ctx, r, in, out, NULL, &sum), NPUC_ERR_ARG);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "r.yaml:3:29: step 'quantize': exclude 'nope' matches no tensor"));
    npuc_recipe_free(r);
    /* A pattern that matches the input but not the previous step's output. */
    must_parse("steps:\n  - fold-bn:\n  - quantize:\n      exclude: ['running_var']\n", &r);
    if (npuc_step_available(NPUC_STEP_FOLD_BN)) {
        assert_int_equal(npuc_recipe_run(ctx, r, in, out, NULL, &sum), NPUC_ERR_ARG);
        assert_non_null(strstr(npuc_ctx_errmsg(ctx), "r.yaml:4:17: step 'quantize': exclude 'running_var' matches "
                                                     "no tensor of the output of step fold-bn"));
    }
    npuc_recipe_free(r);

    /* A good run: provenance recorded, output complete for this input only. */
    must_parse("steps:\n  - quantize:\n      overrides:\n        - {match: classifier, skip: true}\n", &r);
    st = npuc_recipe_run(ctx, r, in, out, NULL, &sum);
    if (st != NPUC_OK) fail_msg("%s", npuc_ctx_errmsg(ctx));
    assert_string_equal(sum.pass, "run");
    assert_int_equal(npuc_record_get(&sum.records[0], "step", 0), 1);
    npuc_summary_free(&sum);
    char sha[65];
    assert_int_equal(npuc_sha256_file(ctx, in, sha), NPUC_OK);
    npuc_model *m;
    assert_int_equal(npuc_model_open(ctx, out, NULL, &m), NPUC_OK);
    assert_string_equal(npuc_model_meta_get(m, NPUC_META_RECIPE_SHA256), npuc_recipe_sha256(r));
    assert_string_equal(npuc_model_meta_get(m, NPUC_META_INPUT_SHA256), sha);
    assert_string_equal(npuc_model_meta_get(m, NPUC_META_RECIPE), npuc_recipe_json(r));
    npuc_model_close(m);
    int complete = 0;
    assert_int_equal(npuc_recipe_output_complete(ctx, r, out, sha, &complete), NPUC_OK);
    assert_int_equal(complete, 1);
    sha[0] = sha[0] == '0' ? '1' : '0';
    assert_int_equal(npuc_recipe_output_complete(ctx, r, out, sha, &complete), NPUC_OK);
    assert_int_equal(complete, 0);
    /* Existing output without overwrite. */
    assert_int_equal(npuc_recipe_run(ctx, r, in, out, NULL, &sum), NPUC_ERR_EXISTS);
    npuc_recipe_free(r);
    /* A step this build lacks would say so; none lacks one here, so check the name table. */
    assert_string_equal(npuc_step_kind_name(NPUC_STEP_FOLD_BN), "fold-bn");
    assert_string_equal(npuc_step_kind_name((npuc_step_kind)42), "?");
}

/* The record of tensor name made by step k (1-based) of a run. */
static const npuc_tensor_record *step_rec(const npuc_summary *sum, int k, const char *name) {
    for (size_t i = 0; i < sum->nrecords; i++)
        if (npuc_record_get(&sum->records[i], "step", 0) == k && strcmp(sum->records[i].name, name) == 0)
            return &sum->records[i];
    fail_msg("no record of '%s' in step %d", name, k);
    return NULL;
}

/* rank and sparsity overrides reach the passes: the matched tensors get the
 * override's rank / sparsity, the others the step's rule; an override that
 * matches nothing fails at run time with its line and column. */
static void test_run_layer_overrides(void **state) {
    (void)state;
    char in[1024];
    snprintf(in, sizeof in, "%s/samples/cnn_bn.safetensors", src_dir());
    const char *out = npuc_test_path("ov.safetensors");
    npuc_run_opts ro = npuc_run_opts_defaults();
    ro.write.overwrite = 1;
    npuc_recipe *r = NULL;
    npuc_summary sum;
    if (npuc_step_available(NPUC_STEP_PRUNE)) {
        must_parse("steps:\n  - prune:\n      sparsity: 0.5\n      overrides:\n"
                   "        - {match: '^features\\.3\\.weight$', sparsity: 0.25}\n"
                   "        - {match: 'weight$', sparsity: 0.75}\n",
                   &r);
        if (npuc_recipe_run(ctx, r, in, out, &ro, &sum) != NPUC_OK) fail_msg("%s", npuc_ctx_errmsg(ctx));
        const npuc_tensor_record *a = step_rec(&sum, 1, "features.3.weight"), *b = step_rec(&sum, 1, "classifier.weight");
        assert_close(npuc_record_get(a, "sparsity_target", -1), 0.25, 0, 0);
        assert_close(npuc_record_get(a, "pruned", -1), 288, 0, 0); /* floor(0.25 * 1152) */
        assert_close(npuc_record_get(b, "sparsity_target", -1), 0.75, 0, 0);
        assert_close(npuc_record_get(b, "pruned", -1), 120, 0, 0); /* floor(0.75 * 160) */
        npuc_summary_free(&sum);
        npuc_recipe_free(r);
    }
    if (npuc_step_available(NPUC_STEP_LOWRANK)) {
        must_parse("steps:\n  - lowrank:\n      rank: 2\n      overrides:\n"
                   "        - {match: '^features\\.3\\.', rank: 5}\n",
                   &r);
        if (npuc_recipe_run(ctx, r, in, out, &ro, &sum) != NPUC_OK) fail_msg("%s", npuc_ctx_errmsg(ctx));
        const npuc_tensor_record *a = step_rec(&sum, 1, "features.3.weight"), *b = step_rec(&sum, 1, "classifier.weight");
        assert_int_equal(a->action, NPUC_ACTION_FACTORED);
        assert_close(npuc_record_get(a, "rank", -1), 5, 0, 0);
        assert_string_equal(a->scheme, "r=5");
        assert_close(npuc_record_get(b, "rank", -1), 2, 0, 0);
        npuc_summary_free(&sum);
        npuc_recipe_free(r);
        /* Rank above min(m, n) of a matched tensor: the tensor and the rule. */
        must_parse("steps:\n  - lowrank:\n      energy: 0.9\n      overrides:\n"
                   "        - {match: '^classifier\\.weight$', rank: 11}\n",
                   &r);
        assert_int_equal(npuc_recipe_run(ctx, r, in, out, &ro, &sum), NPUC_ERR_ARG);
        assert_non_null(strstr(npuc_ctx_errmsg(ctx), "tensor 'classifier.weight': --layer-rank '^classifier\\.weight$=11' "
                                                     "asks for rank 11, above min(m, n) = 10 of its 10x16 matrix"));
        npuc_recipe_free(r);
    }
    /* Checked before the step runs, at the override's pattern. */
    must_parse("steps:\n  - lowrank:\n      rank: 2\n      overrides:\n        - match: '^fc$'\n          rank: 4\n", &r);
    remove(out);
    assert_int_equal(npuc_recipe_run(ctx, r, in, out, NULL, &sum), NPUC_ERR_ARG);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "r.yaml:5:18: step 'lowrank': override '^fc$' matches no tensor of the input"));
    assert_false(npuc_test_exists(out));
    npuc_recipe_free(r);
    must_parse("steps:\n  - fold-bn:\n  - prune:\n      sparsity: 0.5\n      overrides:\n"
               "        - {sparsity: 0.1, match: 'running_mean'}\n",
               &r);
    if (npuc_step_available(NPUC_STEP_FOLD_BN)) {
        assert_int_equal(npuc_recipe_run(ctx, r, in, out, NULL, &sum), NPUC_ERR_ARG);
        assert_non_null(strstr(npuc_ctx_errmsg(ctx), "r.yaml:6:34: step 'prune': override 'running_mean' matches no "
                                                     "tensor of the output of step fold-bn"));
        assert_false(npuc_test_exists(out));
    }
    npuc_recipe_free(r);
}

static void test_sweep(void **state) {
    (void)state;
    const char *names[] = {"m.safetensors.tmp", "m.safetensors.s1.tmp", "m.safetensors.s12.tmp.tmp",
                           "m.safetensors.report.json.tmp"};
    const char *keep[] = {"m.safetensors", "m.safetensors.s1.tmpx", "m.safetensors.sx.tmp", "n.safetensors.s1.tmp"};
    for (int i = 0; i < 4; i++) {
        npuc_test_write_file(npuc_test_path(names[i]), "x", 1);
        npuc_test_write_file(npuc_test_path(keep[i]), "x", 1);
    }
    char out[1024], rep[1024];
    snprintf(out, sizeof out, "%s", npuc_test_path("m.safetensors"));
    snprintf(rep, sizeof rep, "%s", npuc_test_path("m.safetensors.report.json"));
    size_t removed = 0;
    assert_int_equal(npuc_recipe_sweep(ctx, out, rep, &removed), NPUC_OK);
    assert_int_equal(removed, 4);
    for (int i = 0; i < 4; i++) {
        assert_false(npuc_test_exists(npuc_test_path(names[i])));
        assert_true(npuc_test_exists(npuc_test_path(keep[i])));
    }
}

/* Step files of runs (src/pipeline/recipe_files.c): removed when their
 * run's anchor is gone or unlocked, kept while a live run holds it. */
static void test_sweep_step_files(void **state) {
    (void)state;
    char out[1024];
    snprintf(out, sizeof out, "%s", npuc_test_path("w.safetensors"));
    /* A live run: its anchor locked here. */
    const char *live_anchor = ".w.safetensors.npuc-11-0123456789abcdef.tmp";
    const char *live[] = {".w.safetensors.npucstep-11-0123456789abcdef.s1.tmp",
                          "..w.safetensors.npucstep-11-0123456789abcdef.s2.tmp.npuc-11-00000000000000aa.tmp"};
    /* A run killed without cleanup: anchor gone; another: anchor left unlocked. */
    const char *dead_anchor = ".w.safetensors.npuc-12-fedcba9876543210.tmp";
    const char *dead[] = {".w.safetensors.npucstep-13-00000000000000ff.s1.tmp",
                          "..w.safetensors.npucstep-13-00000000000000ff.s3.tmp.npuc-13-00000000000000bb.tmp",
                          ".w.safetensors.npucstep-12-fedcba9876543210.s2.tmp"};
    const char *other[] = {".w.safetensors.npucstep-14-0123.s1.tmp", "w.safetensors.npucstep-x.s1.tmp"};
    npuc_test_write_file(npuc_test_path(live_anchor), "", 0);
    npuc_test_write_file(npuc_test_path(dead_anchor), "", 0);
    for (int i = 0; i < 2; i++) npuc_test_write_file(npuc_test_path(live[i]), "x", 1);
    for (int i = 0; i < 3; i++) npuc_test_write_file(npuc_test_path(dead[i]), "x", 1);
    for (int i = 0; i < 2; i++) npuc_test_write_file(npuc_test_path(other[i]), "x", 1);
    int fd = open(npuc_test_path(live_anchor), O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(flock(fd, LOCK_EX), 0);
    size_t removed = 0;
    assert_int_equal(npuc_recipe_sweep(ctx, out, NULL, &removed), NPUC_OK);
    assert_int_equal(removed, 3);
    for (int i = 0; i < 3; i++) assert_false(npuc_test_exists(npuc_test_path(dead[i])));
    for (int i = 0; i < 2; i++) assert_true(npuc_test_exists(npuc_test_path(live[i])));
    for (int i = 0; i < 2; i++) assert_true(npuc_test_exists(npuc_test_path(other[i])));
    close(fd); /* the live run dies */
    assert_int_equal(npuc_recipe_sweep(ctx, out, NULL, &removed), NPUC_OK);
    assert_int_equal(removed, 2);
    for (int i = 0; i < 2; i++) assert_false(npuc_test_exists(npuc_test_path(live[i])));
}

/* ------------------------------------------------------------ batch lists */

static void test_batch_lists(void **state) {
    (void)state;
    char root[1024];
    snprintf(root, sizeof root, "%s", npuc_test_path("zoo"));
    mkdir(root, 0777);
    const char *files[] = {"b/x.safetensors", "a.h5", "b/a/y.keras", "c.txt", "b/z.hdf5", "out/skip.safetensors"};
    char p[2048];
    snprintf(p, sizeof p, "%s/b", root);
    mkdir(p, 0777);
    snprintf(p, sizeof p, "%s/b/a", root);
    mkdir(p, 0777);
    snprintf(p, sizeof p, "%s/out", root);
    mkdir(p, 0777);
    for (int i = 0; i < 6; i++) {
        snprintf(p, sizeof p, "%s/%s", root, files[i]);
        npuc_test_write_file(p, "x", 1);
    }
    npuc_batch_list l;
    char skip[1100];
    snprintf(skip, sizeof skip, "%s/out", root);
    assert_int_equal(npuc_batch_list_dir(ctx, root, skip, &l), NPUC_OK);
    assert_int_equal(l.n, 4);
    const char *want[] = {"a.h5", "b/a/y.keras", "b/x.safetensors", "b/z.hdf5"};
    for (int i = 0; i < 4; i++) assert_string_equal(l.rel[i], want[i]);
    snprintf(p, sizeof p, "%s/b/a/y.keras", root);
    assert_string_equal(l.path[1], p);
    npuc_batch_list_shard(&l, 1, 2);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.rel[0], "b/a/y.keras");
    assert_string_equal(l.rel[1], "b/z.hdf5");
    npuc_batch_list_free(&l);

    const char *lp = npuc_test_path("list.txt");
    const char *list = "# zoo\n\n./m/b.safetensors\n/abs/a.h5  \nm/c.keras\n";
    npuc_test_write_file(lp, list, strlen(list));
    if (npuc_batch_list_file(ctx, lp, &l) != NPUC_OK) fail_msg("%s", npuc_ctx_errmsg(ctx));
    assert_int_equal(l.n, 3);
    assert_string_equal(l.rel[0], "abs/a.h5");
    assert_string_equal(l.path[0], "/abs/a.h5");
    assert_string_equal(l.rel[1], "m/b.safetensors");
    assert_string_equal(l.path[1], "./m/b.safetensors");
    npuc_batch_list_free(&l);
    const char *bad1 = "a.h5\n../up.safetensors\n";
    npuc_test_write_file(lp, bad1, strlen(bad1));
    assert_int_equal(npuc_batch_list_file(ctx, lp, &l), NPUC_ERR_ARG);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "list.txt:2: '../up.safetensors': the output would leave"));
    const char *bad2 = "a.h5\nreadme.txt\n";
    npuc_test_write_file(lp, bad2, strlen(bad2));
    assert_int_equal(npuc_batch_list_file(ctx, lp, &l), NPUC_ERR_ARG);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "list.txt:2: 'readme.txt': not a weight file name"));
    const char *bad3 = "x/a.h5\n/x/a.h5\n";
    npuc_test_write_file(lp, bad3, strlen(bad3));
    assert_int_equal(npuc_batch_list_file(ctx, lp, &l), NPUC_ERR_ARG);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "'x/a.h5' is listed twice"));
    assert_int_equal(npuc_batch_list_dir(ctx, npuc_test_path("nonexistent"), NULL, &l), NPUC_ERR_NOT_FOUND);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_samples_parse),
        cmocka_unit_test(test_canonical),
        cmocka_unit_test(test_set_option),
        cmocka_unit_test(test_layer_overrides_parse),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_run_patterns),
        cmocka_unit_test(test_run_layer_overrides),
        cmocka_unit_test(test_sweep),
        cmocka_unit_test(test_sweep_step_files),
        cmocka_unit_test(test_batch_lists),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
