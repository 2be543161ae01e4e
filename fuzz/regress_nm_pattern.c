/*
 * regress_nm_pattern.c - an N:M pattern is range-checked before it is
 * narrowed to int.  The fuzz-finds README suspected "4294967297:4294967300"
 * passed an older check that cast each long to int first (2^32 + 1 -> 1,
 * 2^32 + 4 -> 4, so 1:4).  Expected results are worked by hand from the
 * rule 1 <= N < M <= 16 on the decimal values as written; the same patterns
 * are then tried through the recipe parser, whose sparsify and quantize
 * steps take "pattern".
 */
#include <stdio.h>
#include <string.h>

#include "fuzz_util.h"

typedef struct nm_case {
    const char *s;
    int ok, n, m;
} nm_case;

static const nm_case CASES[] = {
    {"2:4", 1, 2, 4},
    {"1:16", 1, 1, 16},
    {"15:16", 1, 15, 16},
    {"4294967297:4294967300", 0, 0, 0}, /* 2^32+1 : 2^32+4, once read as 1:4 */
    {"4294967298:4", 0, 0, 0},          /* 2^32+2, once read as 2 */
    {"2:4294967300", 0, 0, 0},          /* once read as 2:4 */
    {"-4294967294:4", 0, 0, 0},         /* -(2^32-2), once read as 2 */
    {"9223372036854775807:4", 0, 0, 0}, /* LONG_MAX */
    {"99999999999999999999:4", 0, 0, 0}, /* beyond long: strtol saturates */
    {"0:4", 0, 0, 0},
    {"4:4", 0, 0, 0},
    {"2:17", 0, 0, 0},
    {"2:4x", 0, 0, 0},
    {":4", 0, 0, 0},
    {"2:", 0, 0, 0},
    {"", 0, 0, 0},
};

static int check_recipe(npuc_ctx *ctx, const char *step, const nm_case *c) {
    char text[512];
    int len = snprintf(text, sizeof text, "steps:\n  - %s:\n      pattern: \"%s\"\n", step, c->s);
    npuc_recipe *r = NULL;
    npuc_status st = npuc_recipe_parse(ctx, "nm.yaml", text, (size_t)len, &r);
    npuc_recipe_free(r);
    if (c->ok ? st == NPUC_OK : st == NPUC_ERR_ARG) return 0;
    fprintf(stderr, "FAIL: %s pattern \"%s\" in a recipe: %s (%s), expected %s\n", step, c->s, npuc_status_str(st),
            npuc_ctx_errmsg(ctx), c->ok ? "accepted" : "NPUC_ERR_ARG");
    return 1;
}

int main(void) {
    npuc_ctx *ctx = npuc_fuzz_ctx();
    if (!ctx) return 1;
    int fails = 0;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const nm_case *c = &CASES[i];
        int n = -1, m = -1;
        int rc = npuc_nm_parse(c->s, &n, &m);
        if (c->ok ? (rc != 0 || n != c->n || m != c->m) : rc == 0) {
            fprintf(stderr, "FAIL: npuc_nm_parse(\"%s\") = %d (%d:%d), expected %s\n", c->s, rc, n, m,
                    c->ok ? "accepted" : "refused");
            fails++;
        }
        fails += check_recipe(ctx, "sparsify", c);
        fails += check_recipe(ctx, "quantize", c);
    }
    npuc_ctx_free(ctx);
    printf("%s: %zu patterns, %d failures\n", fails ? "FAIL" : "ok", sizeof CASES / sizeof CASES[0], fails);
    return fails != 0;
}
