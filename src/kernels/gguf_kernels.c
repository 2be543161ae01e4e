/*
 * gguf_kernels.c - picks the GGUF block-quantizer table and the K-quant
 * searches (kquant_kernels.h).  It follows the
 * quantization family's choice (kernels.c, made once) rather than reading
 * NPUC_FORCE_REF again: when that family runs its reference, so does this
 * one; otherwise the AVX-512 table when the CPU has it.  Nothing is cached
 * here (no mutable globals: cli_no_globals); the writer asks once per
 * chunk of 16M weights, and the CPU checks are a few loads.
 */
#include <string.h>

#include "kernels/gguf_kernels.h"
#include "kernels/kquant_kernels.h"
#include "kernels/npuc_kernels.h"

const npuc_gguf_kernel_table *npuc_gguf_kernels(void) {
    const npuc_gguf_kernel_table *t = NULL;
    if (strcmp(npuc_kernels()->name, "ref") != 0) t = npuc_gguf_kernels_avx512();
    return t ? t : npuc_gguf_kernels_ref();
}

const npuc_kq_ops *npuc_kq_ops_best(void) {
    const npuc_kq_ops *o = NULL;
    if (strcmp(npuc_kernels()->name, "ref") != 0) o = npuc_kq_ops_avx2();
    return o ? o : npuc_kq_ops_ref();
}
