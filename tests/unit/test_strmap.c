/*
 * test_strmap.c - the one FNV-1a and string map (src/core/strmap.h, issue
 * 31 item 16).  The hashes against the published FNV-1a test vectors (the
 * reference code's table by Fowler/Noll/Vo: "", "a", "foobar"); the map
 * against a plain linear search over the same keys, through growth.
 */
#include <stdio.h>
#include <string.h>

#include "testutil.h"

#include "strmap.h"

static void test_fnv_vectors(void **state) {
    (void)state;
    assert_int_equal(npuc__fnv1a32(""), 0x811c9dc5u);
    assert_int_equal(npuc__fnv1a32("a"), 0xe40c292cu);
    assert_int_equal(npuc__fnv1a32("foobar"), 0xbf9cf968u);
    assert_true(npuc__fnv1a64("") == 0xcbf29ce484222325ull);
    assert_true(npuc__fnv1a64("a") == 0xaf63dc4c8601ec8cull);
    assert_true(npuc__fnv1a64("foobar") == 0x85944171f73967e8ull);
}

static void test_map_matches_search(void **state) {
    (void)state;
    enum { N = 1000 };
    static char keys[N][16];
    npuc__strmap m;
    memset(&m, 0, sizeof m);
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof keys[i], "layer_%d", i * 7 % N);
        assert_int_equal(npuc__strmap_put(&m, keys[i], (size_t)i), 0);
    }
    assert_int_equal(npuc__strmap_put(&m, keys[3], 12345), 0); /* replaces */
    assert_int_equal(m.n, N);
    for (int i = 0; i < N; i++) {
        size_t v = 0;
        assert_int_equal(npuc__strmap_get(&m, keys[i], &v), 1);
        assert_int_equal(v, i == 3 ? 12345 : (size_t)i);
    }
    assert_int_equal(npuc__strmap_get(&m, "layer_1000", NULL), 0);
    assert_int_equal(npuc__strmap_get(&m, "", NULL), 0);
    npuc__strmap_free(&m);
    assert_int_equal(npuc__strmap_get(&m, keys[0], NULL), 0); /* freed map is empty */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fnv_vectors),
        cmocka_unit_test(test_map_matches_search),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
