/*
 * test_cpu_probe.c - the CPUID probe (src/kernels/x86/cpu_probe.c, issue 31
 * item 17) against an independent source: the flags Linux lists in
 * /proc/cpuinfo, which the kernel computes from CPUID and clears for sets
 * whose register state it does not save.  Each NPUC_CPU_* bit must be set
 * exactly when its flag is listed; the cached answer (kernels.c) equals a
 * fresh probe; a fast table is offered only when its sets are present.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/cpu_x86.h"
#include "kernels/cvt_kernels.h"
#include "kernels/gguf_kernels.h"
#include "kernels/npuc_kernels.h"

static const struct {
    unsigned bit;
    const char *flag;
} k_flags[] = {
    {NPUC_CPU_SSE2, "sse2"},       {NPUC_CPU_AVX2, "avx2"},         {NPUC_CPU_FMA, "fma"},
    {NPUC_CPU_POPCNT, "popcnt"},   {NPUC_CPU_F16C, "f16c"},         {NPUC_CPU_AVX512F, "avx512f"},
    {NPUC_CPU_AVX512BW, "avx512bw"}, {NPUC_CPU_AVX512DQ, "avx512dq"},
};

/* The first "flags" line of /proc/cpuinfo, with a space at each end; NULL
 * when there is none (not Linux/x86). */
static char *cpuinfo_flags(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return NULL;
    char line[8192];
    char *out = NULL;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5) != 0) continue;
        char *colon = strchr(line, ':');
        if (!colon) break;
        line[strcspn(line, "\n")] = '\0';
        size_t n = strlen(colon + 1);
        out = malloc(n + 3);
        if (out) snprintf(out, n + 3, " %s ", colon + 1);
        break;
    }
    fclose(f);
    return out;
}

static int listed(const char *flags, const char *name) {
    char word[32];
    snprintf(word, sizeof word, " %s ", name);
    return strstr(flags, word) != NULL;
}

static void test_matches_cpuinfo(void **state) {
    (void)state;
    char *flags = cpuinfo_flags();
    if (!flags) skip();
    unsigned f = npuc_cpu_features();
    for (size_t i = 0; i < sizeof k_flags / sizeof k_flags[0]; i++) {
        int want = listed(flags, k_flags[i].flag), got = (f & k_flags[i].bit) != 0;
        if (want != got) fprintf(stderr, "%s: /proc/cpuinfo %d, probe %d\n", k_flags[i].flag, want, got);
        assert_int_equal(want, got);
    }
    free(flags);
}

static void test_cached_equals_probe(void **state) {
    (void)state;
    assert_int_equal(npuc_cpu_features(), npuc__cpu_probe());
    assert_int_equal(npuc_cpu_has(0), 1);
    assert_int_equal(npuc_cpu_has(NPUC_CPU_AVX2 | NPUC_CPU_F16C),
                     (npuc_cpu_features() & (NPUC_CPU_AVX2 | NPUC_CPU_F16C)) == (NPUC_CPU_AVX2 | NPUC_CPU_F16C));
}

static void test_tables_follow_probe(void **state) {
    (void)state;
    assert_int_equal(npuc_cvt_kernels_f16c() != NULL, npuc_cpu_has(NPUC_CPU_AVX2 | NPUC_CPU_F16C));
    assert_int_equal(npuc_kernels_avx2() != NULL, npuc_cpu_has(NPUC_CPU_AVX2 | NPUC_CPU_FMA | NPUC_CPU_POPCNT));
    assert_int_equal(npuc_gguf_kernels_avx512() != NULL,
                     npuc_cpu_has(NPUC_CPU_AVX512F | NPUC_CPU_AVX512BW | NPUC_CPU_AVX512DQ | NPUC_CPU_F16C));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_cpuinfo),
        cmocka_unit_test(test_cached_equals_probe),
        cmocka_unit_test(test_tables_follow_probe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
