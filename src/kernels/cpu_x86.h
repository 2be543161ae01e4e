/*
 * cpu_x86.h - which x86 instruction sets this CPU and its OS let npuc run
 * (library-private).
 *
 * One probe (x86/cpu_probe.c: CPUID through <cpuid.h>, and XGETBV for the
 * register state the OS saves) instead of __builtin_cpu_supports, whose
 * feature strings differ between compilers (clang 14 rejects "f16c",
 * issue 31 item 17).  kernels.c runs the probe once and caches the result;
 * every fast table's accessor asks npuc_cpu_has() with the sets its
 * functions are compiled for.
 */
#ifndef NPUC_CPU_X86_H
#define NPUC_CPU_X86_H

enum {
    NPUC_CPU_SSE2 = 1u << 0,
    NPUC_CPU_AVX2 = 1u << 1, /* with the OS saving YMM state */
    NPUC_CPU_FMA = 1u << 2,
    NPUC_CPU_POPCNT = 1u << 3,
    NPUC_CPU_F16C = 1u << 4,
    NPUC_CPU_AVX512F = 1u << 5, /* with the OS saving ZMM and mask state */
    NPUC_CPU_AVX512BW = 1u << 6,
    NPUC_CPU_AVX512DQ = 1u << 7,
};

/* The NPUC_CPU_* bits this CPU runs, probed once (kernels.c). */
unsigned npuc_cpu_features(void);
/* Nonzero when every bit of `need` is in npuc_cpu_features(). */
int npuc_cpu_has(unsigned need);
/* The probe itself (x86/cpu_probe.c): CPUID and XGETBV each time; 0 on a
 * CPU that is not x86-64 or a compiler without <cpuid.h>. */
unsigned npuc__cpu_probe(void);

#endif
