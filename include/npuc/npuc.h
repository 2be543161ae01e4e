/*
 * npuc/npuc.h - the umbrella header of libnpuc, a C11 library that compresses
 * neural-network weight files (safetensors and HDF5/Keras).
 *
 * Include this one header.  The pieces:
 *   status.h  status codes and the context that owns error messages
 *   dtype.h   element types, f16/bf16/fp8 conversions
 *   tensor.h  tensor descriptions, roles and layouts
 *   model.h   reading and writing weight files
 *   hdf5.h    HDF5 specifics: the Keras tree a file holds
 *   gguf.h    GGUF specifics: each tensor's ggml type and why (mixes, overrides)
 *   calib.h   range estimation for quantization
 *   quant.h   integer quantization of tensors and models, decompression
 *   record.h  what a pass did to each tensor: records and summaries
 *   report.h  writing summaries as text, CSV, JSON (and Markdown, HTML)
 *   compare.h two weight files tensor by tensor, as a summary (npuc report)
 *   metrics.h measuring tensor values (NaN/Inf/subnormal census)
 *   recipe.h  recipes (a YAML chain of passes) and batch work lists
 *   pass.h    pass descriptors: each pass's options, shared by commands and recipes
 *   check.h   whether a model hangs together (channel extents of attached tensors)
 *   netgraph.h the network graph a model carries: nodes, values, weights, evidence
 *   api.h     NPUC_API, the export marker (every header includes it)
 *
 *   build.h   what this build is: version, git, SIMD levels, linked libraries
 *
 * Conventions, which every header's comments build on:
 *   - Errors: a function returning npuc_status returns NPUC_OK or a failure
 *     and leaves a one-line message naming the file, the tensor and what is
 *     wrong in its npuc_ctx (npuc_ctx_errmsg); its out-parameters are then
 *     NULL, zeroed or empty, and nothing appears at an output path.  Input
 *     errors (npuc_status_is_input_error) are the caller's data or
 *     arguments; the rest are I/O, memory or internal failures.  The library
 *     never prints, never exits and never aborts on file data.
 *   - Ownership: what a call hands back through a pointer-to-pointer
 *     out-parameter belongs to the caller and is released with the matching
 *     *_free / *_close (free() where a comment says so); *_free(NULL) and
 *     *_close(NULL) are no-ops.  A const char * or const struct pointer a
 *     function returns is borrowed: it belongs to the object it was read
 *     from (or is static) and stays valid until that object is freed or
 *     closed; the caller never frees it.  *_defaults() return plain structs
 *     by value.
 *   - Threads: a context and the objects made with it are used by one
 *     thread at a time; separate contexts may run in parallel.
 */
#ifndef NPUC_NPUC_H
#define NPUC_NPUC_H

#define NPUC_VERSION_MAJOR 0
#define NPUC_VERSION_MINOR 1
#define NPUC_VERSION_PATCH 0

#include "status.h"
#include "dtype.h"
#include "tensor.h"
#include "model.h"
#include "hdf5.h"
#include "gguf.h"
#include "metrics.h"
#include "calib.h"
#include "quant.h"
#include "record.h"
#include "report.h"
#include "recipe.h"
#include "compare.h"
#include "lowrank.h"
#include "bnfold.h"
#include "prune.h"
#include "artifact.h"
#include "check.h"
#include "netgraph.h"
#include "pass.h"
#include "build.h"

#endif
