/*
 * huge_alloc.c - large buffers backed by transparent huge pages
 * (npuc__huge_alloc, npuc_internal.h).
 *
 * Touching a fresh 4 KiB page costs a fault, and on a virtual machine a
 * slow one: 128 MiB is 32768 faults, about half a second measured here.
 * From 4 MiB up a buffer is 2 MiB-aligned and advised as huge-page memory,
 * so it faults in 2 MiB at a time; smaller ones are 64-byte aligned (what
 * the kernels want).  Used for K x K scratch (GPTQ, the output error), pass
 * scratch and the safetensors reader's payload buffers.
 */
#include <stdlib.h>
#include <sys/mman.h>

#include "npuc_internal.h"

#define HUGE_PAGE ((size_t)2 << 20)

void *npuc__huge_alloc(size_t n) {
    void *p = NULL;
    if (n < 2 * HUGE_PAGE) return posix_memalign(&p, 64, n ? n : 1) == 0 ? p : NULL;
    const size_t r = (n + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    if (r < n || posix_memalign(&p, HUGE_PAGE, r) != 0) return NULL;
#if defined(MADV_HUGEPAGE)
    (void)madvise(p, r, MADV_HUGEPAGE);
#endif
    return p;
}
