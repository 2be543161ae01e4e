/*
 * kernels.c - picks the kernel table once, at the first call.
 *
 * The fastest table the CPU supports is used unless NPUC_FORCE_REF is set
 * to a non-empty value other than "0" (the stb_image rule: the fast path is
 * chosen once and can be switched off).  The choice is published through a
 * C11 atomic pointer.  Threads that race on the first call each compute the
 * same answer from the same CPU and environment, so a duplicated store is
 * harmless and no lock is needed.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/npuc_kernels.h"

static _Atomic(const npuc_kernel_table *) g_table;

static const npuc_kernel_table *choose(void) {
    const char *force = getenv("NPUC_FORCE_REF");
    if (force && *force && strcmp(force, "0") != 0) return npuc_kernels_ref();
    const npuc_kernel_table *t = npuc_kernels_avx512();
    if (!t) t = npuc_kernels_avx2();
    return t ? t : npuc_kernels_ref();
}

const npuc_kernel_table *npuc_kernels(void) {
    const npuc_kernel_table *t = atomic_load_explicit(&g_table, memory_order_acquire);
    if (!t) {
        t = choose();
        atomic_store_explicit(&g_table, t, memory_order_release);
    }
    return t;
}
