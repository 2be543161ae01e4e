/*
 * gguf_kernels.c - picks the GGUF block-quantizer table once.  It follows
 * the quantization family's choice (kernels.c) rather than reading
 * NPUC_FORCE_REF again: when that family runs its reference, so does this
 * one; otherwise the AVX-512 table when the CPU has it.
 */
#include <pthread.h>
#include <string.h>

#include "kernels/gguf_kernels.h"
#include "kernels/npuc_kernels.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static const npuc_gguf_kernel_table *g_table;

static void choose(void) {
    const npuc_gguf_kernel_table *t = NULL;
    if (strcmp(npuc_kernels()->name, "ref") != 0) t = npuc_gguf_kernels_avx512();
    g_table = t ? t : npuc_gguf_kernels_ref();
}

const npuc_gguf_kernel_table *npuc_gguf_kernels(void) {
    pthread_once(&g_once, choose);
    return g_table;
}
