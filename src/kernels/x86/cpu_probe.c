/*
 * cpu_probe.c - CPUID and XGETBV, read into NPUC_CPU_* bits (cpu_x86.h).
 *
 * A vector set is usable when the CPU has it and the OS saves its
 * registers on a context switch: OSXSAVE set and XCR0 holding the SSE and
 * AVX state (bits 1-2) for AVX2, FMA and F16C, and also the opmask and
 * both ZMM halves (bits 5-7) for AVX-512 (Intel SDM vol. 1, 13.3 and 15.2).
 * The bit positions are those of the SDM's CPUID tables: leaf 1 EDX 26
 * SSE2; ECX 12 FMA, 23 POPCNT, 27 OSXSAVE, 28 AVX, 29 F16C; leaf 7.0 EBX 5
 * AVX2, 16 AVX512F, 17 AVX512DQ, 30 AVX512BW.
 */
#include "kernels/cpu_x86.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <cpuid.h>
#include <stddef.h>

static unsigned long long xcr0(void) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

unsigned npuc__cpu_probe(void) {
    unsigned a, b, c, d, f = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    if (d & (1u << 26)) f |= NPUC_CPU_SSE2;
    if (c & (1u << 23)) f |= NPUC_CPU_POPCNT;
    const int osxsave = (c & (1u << 27)) != 0;
    const unsigned long long x = osxsave ? xcr0() : 0;
    const int ymm = (x & 0x6) == 0x6, zmm = (x & 0xe6) == 0xe6;
    if (!ymm || !(c & (1u << 28))) return f; /* no AVX: none of the rest */
    if (c & (1u << 12)) f |= NPUC_CPU_FMA;
    if (c & (1u << 29)) f |= NPUC_CPU_F16C;
    if (__get_cpuid_max(0, NULL) < 7) return f;
    __cpuid_count(7, 0, a, b, c, d);
    if (b & (1u << 5)) f |= NPUC_CPU_AVX2;
    if (zmm) {
        if (b & (1u << 16)) f |= NPUC_CPU_AVX512F;
        if (b & (1u << 17)) f |= NPUC_CPU_AVX512DQ;
        if (b & (1u << 30)) f |= NPUC_CPU_AVX512BW;
    }
    return f;
}

#else

unsigned npuc__cpu_probe(void) { return 0; }

#endif
