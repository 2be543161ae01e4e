/*
 * onnx_qdq.h - quantized weights written as ONNX graph edits (library-
 * private; used by onnx_writer.c).  docs/onnx.md says what is written.
 *
 * The plan reads the artifact description (the "npuc" metadata entry) and
 * the graph: each "quant" entry whose name is a weight of the graph
 * becomes an integer initializer "<name>_quantized", a scale (and zero
 * point) initializer and a DequantizeLinear node (or, where the model's
 * opset lacks per-axis DequantizeLinear and cannot be raised, the same
 * values through Mul / Cast) whose output carries the weight's name, so
 * its consumers are unchanged; --onnx-int4 matmulnbits turns 4-bit
 * blocked MatMul weights into com.microsoft::MatMulNBits instead.  The
 * plan installs walker hooks (onnx_walk.c) that write these edits, raises
 * the opset import (converting nodes whose attributes became inputs) when
 * the encoding needs it, and transforms payloads as they are written
 * (unpacking sub-byte codes ONNX has no type for, widening F16 scales,
 * transposing block scales): memory stays bounded by the largest tensor.
 */
#ifndef NPUC_ONNX_QDQ_H
#define NPUC_ONNX_QDQ_H

#include "onnx_format.h"

typedef struct npuc__oq_plan npuc__oq_plan;

/* Emits the data of declared tensor i, size bytes in the output, into out
 * (a raw_data hole or external data): the writer's. */
typedef void (*npuc__oq_put_data_fn)(void *wr, size_t i, uint64_t size, npuc__ox_buf *out);

/* The plan for writer w from its graph skel[0..nskel) and the artifact
 * JSON art (NULL: none).  *out stays NULL when no tensor is encoded.
 * An encoding ONNX cannot express (lowrank, N:M, a nested entry, groups
 * across several axes, groups in a model whose opset cannot be raised to
 * 21) is NPUC_ERR_UNSUPPORTED naming the file, tensor (or node) and why. */
npuc_status npuc__oq_plan_make(npuc_writer *w, const unsigned char *skel, size_t nskel, const char *art,
                               npuc__oq_put_data_fn put, void *put_user, npuc__oq_plan **out);
/* Installs the plan's hooks into wk (weight stays the writer's). */
void npuc__oq_hooks(npuc__oq_plan *q, npuc__ox_walk *wk);
/* 1 when name is a weight the plan replaces (its initializer is dropped). */
int npuc__oq_replaces(const npuc__oq_plan *q, const char *name);
/* 1 when declared tensor i is part of an encoded entry (written by the plan). */
int npuc__oq_owns(const npuc__oq_plan *q, size_t i);
/* After the walk: every planned weight found in the graph, else an error. */
npuc_status npuc__oq_check(npuc__oq_plan *q);
/* The bytes of declared tensor i as they go to the file: *out points at data
 * itself or at a buffer the plan owns (valid until the next call). */
npuc_status npuc__oq_transform(npuc__oq_plan *q, size_t i, const void *data, uint64_t n, const void **out,
                               uint64_t *nout);
/* The artifact JSON rewritten for the output: entries npuc can read back
 * from the ONNX file (8-bit DequantizeLinear) name the ONNX tensors, the
 * others are left out.  malloc'd; NULL when out of memory. */
char *npuc__oq_artifact(const npuc__oq_plan *q, const char *art);
/* One line: which forms were written (for a ctx warning). */
const char *npuc__oq_summary(const npuc__oq_plan *q);
void npuc__oq_free(npuc__oq_plan *q);

#endif
