/*
 * onnx_resize.h - writing a resized network graph (structured prune) into
 * the "onnx.model" entry (onnx_resize.c); library-private.
 */
#ifndef NPUC_ONNX_RESIZE_H
#define NPUC_ONNX_RESIZE_H

#include "onnx_format.h"
#include "onnx_model.h"

/* The stored ModelProto skel[0..nskel) (parsed as om) rewritten for g, an
 * edit that resized weights along their output or input axis: the weights'
 * dims follow g, value_info of the values whose channels changed is
 * dropped.  *out the new entry (base64, malloc'd), or NULL when g resizes
 * no weight.  NPUC_ERR_UNSUPPORTED naming the node or value for an edit the
 * file cannot carry (a Reshape reading a resized value, a graph output). */
npuc_status npuc__onnx_resize_write(npuc_ctx *ctx, const char *label, const unsigned char *skel, size_t nskel,
                                    const npuc__onnx_model *om, const npuc_graph *g, char **out);

#endif
