/*
 * test_pass_desc.c - the pass descriptors (include/npuc/pass.h): each table
 * is consistent (names, flags, echo and override bindings); the recipe
 * override keys have the bounds of the options they stand for; a table
 * keeps the canonical key order recipes were hashed with; command-line
 * values are typed against the table's bounds with the commands' messages;
 * and the parameters echoed for the defaults are what the commands always
 * printed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "pipeline/recipe_internal.h"

static npuc_ctx *ctx;

static int setup(void **state) { (void)state; return npuc_ctx_new(&ctx) == NPUC_OK ? 0 : -1; }
static int teardown(void **state) { (void)state; npuc_ctx_free(ctx); return 0; }

static void test_tables(void **state) {
    (void)state;
    assert_int_equal(npuc_pass_count(), NPUC_STEP_COUNT);
    for (size_t i = 0; i < npuc_pass_count(); i++) {
        const npuc_pass *p = npuc_pass_at(i);
        assert_ptr_equal(npuc_pass_find(p->name), p);
        assert_ptr_equal(npuc_pass_of_kind(p->kind), p);
        for (size_t k = 0; k < p->noptions; k++) {
            const npuc_pass_option *o = &p->options[k];
            /* The flag is the key with '-' for '_' (the recipe parser's hint relies on it). */
            char want[64];
            snprintf(want, sizeof want, "%s", o->name);
            for (char *c = want; *c; c++)
                if (*c == '_') *c = '-';
            assert_string_equal(o->flag, want);
            assert_non_null(o->help);
            for (size_t j = k + 1; j < p->noptions; j++) {
                assert_string_not_equal(o->name, p->options[j].name);
                assert_true(!o->short_flag || o->short_flag != p->options[j].short_flag);
            }
            if (o->choices) assert_non_null(o->bad);
            if (o->override_key) {
                int listed = 0;
                for (const char *const *ok = p->override_keys; *ok; ok++) listed |= strcmp(*ok, o->override_key) == 0;
                assert_true(listed);
                assert_int_equal(o->type, NPUC_OPT_LIST);
            }
        }
        /* Every override key adds rules to exactly one list. */
        for (const char *const *ok = p->override_keys; *ok; ok++) {
            int bound = 0;
            for (size_t k = 0; k < p->noptions; k++)
                bound += p->options[k].override_key && strcmp(p->options[k].override_key, *ok) == 0;
            assert_int_equal(bound, 1);
        }
        for (const npuc_pass_echo *e = p->echo; e->name; e++)
            if (e->key) assert_non_null(npuc_pass_option_find(p, e->key));
    }
}

/* An override key's value has the bounds of the option of the same name
 * (bits: quantize's --bits) and of the rule list it feeds. */
static void test_override_bounds(void **state) {
    (void)state;
    for (const recipe_key *k = npuc__recipe_override_keys; k->name; k++) {
        if (k->type != RT_INT && k->type != RT_NUM) continue;
        int seen = 0;
        for (size_t i = 0; i < npuc_pass_count(); i++) {
            const npuc_pass *p = npuc_pass_at(i);
            const npuc_pass_option *o = npuc_pass_option_find(p, k->name);
            if (!o) continue;
            seen++;
            assert_int_equal(o->type, k->type);
            assert_true(o->lo == k->lo && o->hi == k->hi);
            assert_int_equal(o->flags & (NPUC_OPT_LO_OPEN | NPUC_OPT_HI_OPEN), k->flags & (RK_LO_OPEN | RK_HI_OPEN));
            for (size_t r = 0; r < p->noptions; r++) {
                const npuc_pass_option *rule = &p->options[r];
                if (!rule->override_key || strcmp(rule->override_key, k->name) != 0) continue;
                assert_true(rule->lo == k->lo && rule->hi == k->hi);
                assert_int_equal(!!(rule->flags & NPUC_OPT_RULE_NUM), k->type == RT_NUM);
            }
        }
        assert_int_equal(seen, 1);
    }
}

/* The keys recipes had before the descriptors, in their canonical order: a
 * table may add keys anywhere but never reorder these (the recipe hash). */
static void test_canonical_order(void **state) {
    (void)state;
    static const struct {
        const char *pass;
        const char *keys[16];
    } LEGACY[] = {
        {"fold-bn", {"eps", "pair", "pairs", "no_guess"}},
        {"prune", {"sparsity", "scope", "structured", "criterion", "round_to", "next", "graph", "no_guess", "include",
                   "exclude"}},
        {"sparsify", {"pattern", "compressed", "peak_tops", "bandwidth", "tokens", "include", "exclude"}},
        {"lowrank", {"rank", "rank_ratio", "energy", "max_error", "round_to", "solver", "oversample", "power_iters",
                     "seed", "include", "exclude"}},
        {"quantize", {"bits", "symmetric", "asymmetric", "per_channel", "per_tensor", "group_size", "axis", "range",
                      "include", "exclude", "layer_bits", "quantize_all", "fake_quant"}},
    };
    for (size_t i = 0; i < sizeof LEGACY / sizeof LEGACY[0]; i++) {
        const npuc_pass *p = npuc_pass_find(LEGACY[i].pass);
        assert_non_null(p);
        const npuc_pass_option *prev = NULL;
        for (size_t k = 0; LEGACY[i].keys[k]; k++) {
            const npuc_pass_option *o = npuc_pass_option_find(p, LEGACY[i].keys[k]);
            assert_non_null(o);
            assert_true(!prev || o > prev);
            prev = o;
        }
    }
}

static void expect_bad(const char *pass, const char *key, const char *text, const char *msg) {
    const npuc_pass *p = npuc_pass_find(pass);
    npuc_pass_optset *s;
    assert_int_equal(npuc_pass_optset_new(ctx, p, &s), NPUC_OK);
    npuc_status st = npuc_pass_optset_set(ctx, s, npuc_pass_option_find(p, key), text);
    if (st != NPUC_ERR_ARG || strcmp(npuc_ctx_errmsg(ctx), msg) != 0)
        fail_msg("%s %s '%s': status %d, '%s', expected '%s'", pass, key, text, (int)st, npuc_ctx_errmsg(ctx), msg);
    npuc_pass_optset_free(s);
}

static void test_cli_values(void **state) {
    (void)state;
    expect_bad("quantize", "bits", "9", "--bits '9': bit width must be 2..8");
    expect_bad("quantize", "bits", "8x", "--bits '8x': bit width must be 2..8");
    expect_bad("quantize", "group_size", "1", "--group-size '1': must be an integer from 2 to 2^30");
    expect_bad("quantize", "pattern", "4:2", "--pattern '4:2': expected N:M with 1 <= N < M <= 16");
    expect_bad("prune", "sparsity", "1", "--sparsity '1': must be a number in [0, 1)");
    expect_bad("prune", "scope", "all", "--scope 'all': expected layer or global");
    expect_bad("lowrank", "max_error", "1", "--max-error '1': must be a number in (0, 1)");
    expect_bad("lowrank", "solver", "svd", "--solver 'svd': must be exact, randomized or auto");
    expect_bad("fold-bn", "eps", "0", "--eps '0': must be a positive number");
    expect_bad("fold-bn", "pair", "conv", "--pair 'conv': expected CONV=BN");
    expect_bad("sparsify", "tokens", "inf", "--tokens 'inf': must be a positive number");
}

static char *params_of(const char *pass, const char *const *kv) {
    const npuc_pass *p = npuc_pass_find(pass);
    npuc_pass_optset *s;
    char *out = NULL;
    assert_int_equal(npuc_pass_optset_new(ctx, p, &s), NPUC_OK);
    for (; kv && kv[0]; kv += 2)
        assert_int_equal(npuc_pass_optset_set(ctx, s, npuc_pass_option_find(p, kv[0]), kv[1]), NPUC_OK);
    assert_int_equal(npuc_pass_params_json(ctx, s, &out), NPUC_OK);
    npuc_pass_optset_free(s);
    return out;
}

/* The table's defaults echo what the library's defaults are. */
static void test_params(void **state) {
    (void)state;
    static const struct {
        const char *pass;
        const char *kv[8];
        const char *want;
    } CASES[] = {
        {"quantize", {NULL},
         "{\"quantize\":{\"bits\":8,\"symmetric\":true,\"scheme\":\"int8/ch\",\"granularity\":\"channel\","
         "\"group_size\":0,\"axis\":-1,\"range\":\"minmax\",\"include\":[],\"exclude\":[],\"layer_bits\":[],"
         "\"layer_group_size\":[],\"quantize_all\":false,\"fake_quant\":false,\"pattern\":null}}"},
        {"quantize", {"asymmetric", NULL, "group_size", "32", "pattern", "2:4", NULL},
         "{\"quantize\":{\"bits\":8,\"symmetric\":false,\"scheme\":\"uint8/g32\",\"granularity\":\"group\","
         "\"group_size\":32,\"axis\":-1,\"range\":\"minmax\",\"include\":[],\"exclude\":[],\"layer_bits\":[],"
         "\"layer_group_size\":[],\"quantize_all\":false,\"fake_quant\":false,\"pattern\":\"2:4\"}}"},
        {"prune", {"sparsity", "0.5", NULL},
         "{\"prune\":{\"sparsity\":0.5,\"scope\":\"layer\",\"structured\":\"unstructured\",\"criterion\":\"l1\","
         "\"round_to\":0,\"include\":[],\"exclude\":[],\"layer_sparsity\":[],\"next\":[],\"graph\":null,"
         "\"no_guess\":false}}"},
        {"sparsify", {NULL},
         "{\"sparsify\":{\"pattern\":\"2:4\",\"compressed\":false,\"include\":[],\"exclude\":[],\"peak_tops\":200.0,"
         "\"bandwidth_gbs\":1000.0,\"tokens\":1.0}}"},
        {"lowrank", {"energy", "0.5", NULL},
         "{\"lowrank\":{\"rule\":\"energy\",\"value\":0.5,\"round_to\":1,\"solver\":\"auto\",\"oversample\":10,"
         "\"power_iters\":3,\"seed\":\"0\",\"include\":[],\"exclude\":[],\"layer_rank\":[]}}"},
        {"fold-bn", {NULL}, "{\"fold-bn\":{\"eps\":null,\"pair\":[],\"pairs_file\":null,\"no_guess\":false}}"},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        char *got = params_of(CASES[i].pass, CASES[i].kv);
        if (strcmp(got, CASES[i].want) != 0) fail_msg("%s:\n  got  %s\n  want %s", CASES[i].pass, got, CASES[i].want);
        free(got);
    }
    /* And they are the defaults the passes use. */
    npuc_quantize_opts q = npuc_quantize_opts_defaults();
    npuc_svd_opts svd = npuc_svd_opts_defaults();
    npuc_cost_model cm = npuc_cost_model_defaults();
    assert_int_equal(q.params.bits, atoi(npuc_pass_option_find(npuc_pass_find("quantize"), "bits")->dflt));
    assert_int_equal(svd.oversample, atoi(npuc_pass_option_find(npuc_pass_find("lowrank"), "oversample")->dflt));
    assert_int_equal(svd.power_iters, atoi(npuc_pass_option_find(npuc_pass_find("lowrank"), "power_iters")->dflt));
    assert_true(cm.peak_tops == atof(npuc_pass_option_find(npuc_pass_find("sparsify"), "peak_tops")->dflt));
    assert_true(cm.bandwidth_gbs == atof(npuc_pass_option_find(npuc_pass_find("sparsify"), "bandwidth")->dflt));
    assert_true(cm.tokens == atof(npuc_pass_option_find(npuc_pass_find("sparsify"), "tokens")->dflt));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_override_bounds),
        cmocka_unit_test(test_canonical_order),
        cmocka_unit_test(test_cli_values),
        cmocka_unit_test(test_params),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
