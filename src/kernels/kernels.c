/*
 * kernels.c - the one kernel dispatcher: picks every kernel table once.
 *
 * At the first call of any npuc_*kernels() accessor, pthread_once runs
 * choose(): with NPUC_FORCE_REF set to a non-empty value other than "0"
 * every family gets its scalar reference (the stb_image rule: the fast
 * path is chosen once and can be switched off); otherwise each family gets
 * the fastest version the CPU supports.  The families:
 *   quantization (npuc_kernels.h)   avx512 > avx2 > ref
 *   magnitude / N:M (nm_kernels.h)  avx2 > ref
 *   range lanes (calib_lanes.h)     avx512 > sse2 > ref
 *   F16/BF16 widening (cvt_kernels.h) avx512 > f16c > ref, following the
 *                                   quantization family's choice (below)
 * The choice never changes afterwards, and all of it sits in this file.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/calib_lanes.h"
#include "kernels/cvt_kernels.h"
#include "kernels/nm_kernels.h"
#include "kernels/npuc_kernels.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static const npuc_kernel_table *g_quant;
static const npuc_nm_kernel_table *g_nm;
static const npuc_calib_kernel_table *g_calib;

static void choose(void) {
    const char *force = getenv("NPUC_FORCE_REF");
    if (force && *force && strcmp(force, "0") != 0) {
        g_quant = npuc_kernels_ref();
        g_nm = npuc_nm_kernels_ref();
        g_calib = npuc_calib_kernels_ref();
        return;
    }
    const npuc_kernel_table *q = npuc_kernels_avx512();
    if (!q) q = npuc_kernels_avx2();
    g_quant = q ? q : npuc_kernels_ref();
    const npuc_nm_kernel_table *nm = npuc_nm_kernels_avx2();
    g_nm = nm ? nm : npuc_nm_kernels_ref();
    const npuc_calib_kernel_table *c = npuc_calib_kernels_avx512();
    if (!c) c = npuc_calib_kernels_sse2();
    g_calib = c ? c : npuc_calib_kernels_ref();
}

const npuc_kernel_table *npuc_kernels(void) {
    pthread_once(&g_once, choose);
    return g_quant;
}

const npuc_nm_kernel_table *npuc_nm_kernels(void) {
    pthread_once(&g_once, choose);
    return g_nm;
}

const npuc_calib_kernel_table *npuc_calib_kernels(void) {
    pthread_once(&g_once, choose);
    return g_calib;
}

/* No table pointer of its own (no new mutable global: cli_no_globals): the
 * reference when the quantization family runs its reference (NPUC_FORCE_REF,
 * or no AVX2), else the fastest the CPU runs; the CPU checks are a few
 * loads, and callers ask once per tensor. */
const npuc_cvt_kernel_table *npuc_cvt_kernels(void) {
    if (npuc_kernels() == npuc_kernels_ref()) return npuc_cvt_kernels_ref();
    const npuc_cvt_kernel_table *t = npuc_cvt_kernels_avx512();
    if (!t) t = npuc_cvt_kernels_f16c();
    return t ? t : npuc_cvt_kernels_ref();
}
