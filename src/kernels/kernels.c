/*
 * kernels.c - the one kernel dispatcher: picks every kernel table once.
 *
 * At the first call of any npuc_*kernels() accessor, pthread_once runs
 * choose(): with NPUC_FORCE_REF set to a non-empty value other than "0"
 * every family gets its scalar reference (the stb_image rule: the fast
 * path is chosen once and can be switched off); otherwise each family gets
 * the fastest version the CPU supports (each fast accessor returns NULL when
 * npuc_cpu_has() lacks its instruction sets).  The families, in the order
 * choose() tries them:
 *   quantization (npuc_kernels.h)     avx512 > avx2 > ref
 *   magnitude / N:M (nm_kernels.h)    avx2 > ref
 *   range lanes (calib_lanes.h)       avx512 > sse2 > ref
 *   F16/BF16 widening (cvt_kernels.h) avx512 > f16c > ref, and ref when the
 *                                     quantization family runs its reference
 *   GGUF blocks (gguf_kernels.h)      avx512 > ref, the same way
 *   K-quant searches (kquant_kernels.h) avx2 > ref, the same way
 * The choice never changes afterwards, and all of it sits in this file; the
 * CPU probe (x86/cpu_probe.c) also runs once, here.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/calib_lanes.h"
#include "kernels/cpu_x86.h"
#include "kernels/cvt_kernels.h"
#include "kernels/gguf_kernels.h"
#include "kernels/kquant_kernels.h"
#include "kernels/nm_kernels.h"
#include "kernels/npuc_kernels.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static const npuc_kernel_table *g_quant;
static const npuc_nm_kernel_table *g_nm;
static const npuc_calib_kernel_table *g_calib;
static const npuc_cvt_kernel_table *g_cvt;
static const npuc_gguf_kernel_table *g_gguf;
static const npuc_kq_ops *g_kq;
/* Its own once: choose() asks npuc_cpu_has() through the fast accessors. */
static pthread_once_t g_cpu_once = PTHREAD_ONCE_INIT;
static unsigned g_cpu;

static void probe(void) { g_cpu = npuc__cpu_probe(); }

unsigned npuc_cpu_features(void) {
    pthread_once(&g_cpu_once, probe);
    return g_cpu;
}

int npuc_cpu_has(unsigned need) { return (npuc_cpu_features() & need) == need; }

static void choose(void) {
    const char *force = getenv("NPUC_FORCE_REF");
    if (force && *force && strcmp(force, "0") != 0) {
        g_quant = npuc_kernels_ref();
        g_nm = npuc_nm_kernels_ref();
        g_calib = npuc_calib_kernels_ref();
        g_cvt = npuc_cvt_kernels_ref();
        g_gguf = npuc_gguf_kernels_ref();
        g_kq = npuc_kq_ops_ref();
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
    /* The widening and GGUF tables follow the quantization family: no
     * AVX2 there means the reference here too. */
    const npuc_cvt_kernel_table *cv = NULL;
    const npuc_gguf_kernel_table *gg = NULL;
    const npuc_kq_ops *kq = NULL;
    if (g_quant != npuc_kernels_ref()) {
        cv = npuc_cvt_kernels_avx512();
        if (!cv) cv = npuc_cvt_kernels_f16c();
        gg = npuc_gguf_kernels_avx512();
        kq = npuc_kq_ops_avx2();
    }
    g_cvt = cv ? cv : npuc_cvt_kernels_ref();
    g_gguf = gg ? gg : npuc_gguf_kernels_ref();
    g_kq = kq ? kq : npuc_kq_ops_ref();
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

const npuc_cvt_kernel_table *npuc_cvt_kernels(void) {
    pthread_once(&g_once, choose);
    return g_cvt;
}

const npuc_gguf_kernel_table *npuc_gguf_kernels(void) {
    pthread_once(&g_once, choose);
    return g_gguf;
}

const npuc_kq_ops *npuc_kq_ops_best(void) {
    pthread_once(&g_once, choose);
    return g_kq;
}
