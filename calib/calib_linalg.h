/*
 * calib_linalg.h - what the dense linear algebra of GPTQ
 * (src/passes/quantize/quant_gptq.c) and of the output error from a
 * Hessian (calib_out_error.c) shares (library-private): the blocked
 * Cholesky factorisation and large buffers backed by huge pages.
 */
#ifndef NPUC_CALIB_LINALG_H
#define NPUC_CALIB_LINALG_H

#include <stddef.h>
#include <stdint.h>

/* malloc for buffers of K x K doubles and the like: from 4 MiB up, aligned
 * to 2 MiB and advised to the kernel as huge-page memory (madvise
 * MADV_HUGEPAGE, ignored where unsupported), since touching a fresh 4 KiB
 * page costs a fault, and on a virtual machine a slow one: 128 MiB of
 * Hessian is 32768 faults, about half a second measured here.  Freed with
 * free(); NULL when out of memory. */
void *npuc__huge_alloc(size_t n);

/* The upper Cholesky factor R of the column-major K x K symmetric matrix A
 * (A = R^T R), written over A's upper triangle; the strict lower triangle
 * is left as it was.  Read row-major, the same bytes hold L = R^T in the
 * lower triangle with A = L L^T (A is symmetric, so its row-major and
 * column-major bytes are the same matrix).  Right-looking in blocks of 256
 * columns; the panel solve and the trailing update are split into fixed
 * column blocks, one BLAS call each on nthreads OpenMP threads, so the
 * bytes do not depend on nthreads provided the caller has set BLAS to one
 * thread (npuc__blas_enter).  Returns 0, or the column (from 1) where A
 * was found not positive definite (LAPACK's info); A is then partly
 * overwritten.  K must fit an int. */
int npuc__chol_upper(int nthreads, double *A, uint64_t K);

#endif
