/*
 * npuc/tensor.h - what npuc knows about one tensor: name, dtype, shape, role
 * and layout.
 *
 * A *layout* says where a weight's output-channel axis is and which axes are
 * reduced over when the layer runs.  Every pass needs it: per-channel
 * quantization scales one channel at a time, N:M sparsity groups along the
 * reduction axis, BatchNorm folding scales output channels.  The layouts:
 *
 *   NONE   rank < 2, or not a weight: no channel axis (biases, norms, stats)
 *   OI     [out, in]                  PyTorch Linear, embeddings, RNN weights
 *   IO     [in, out]                  Keras Dense, Paddle/ONNX MatMul constants
 *   OIHW   [out, in/groups, *spatial] PyTorch/ONNX Conv1d/2d/3d
 *   IOHW   [in, out/groups, *spatial] PyTorch ConvTranspose (out axis 1)
 *   HWIO   [*spatial, in, out]        Keras Conv1D/2D/3D
 *   HWIM   [*spatial, in, mult]       Keras DepthwiseConv2D: the channel is the
 *                                     flattened (in, mult) pair, c = i*mult + m
 *   DOI    [dirs, out, in]            ONNX LSTM/GRU/RNN W and R ([dirs,
 *                                     gates*hidden, in]): out axis rank-2; the
 *                                     channel is the flattened (dir, out) pair,
 *                                     one [out, in] matrix per direction
 *
 * Every layout views a tensor as [outer, C, inner] in row-major order: C
 * channels, each channel's elements at (o*C + c)*inner + k.  npuc_layout_view()
 * gives the three counts; passes need nothing else.
 *
 * Layouts are decided from evidence, strongest first (docs/formats.md#layouts):
 * a --layout rule or a recorded "npuc.layout" entry, then the file's structure
 * and metadata (safetensors "format", Keras model_config, Keras 3 layer
 * paths), then the naming conventions of the exporter family, then shape
 * plausibility.  Each tensor records its confidence and a short evidence
 * phrase; the user overrides with REGEX=NAME rules (see
 * npuc_model_apply_layout_rules in model.h).
 */
#ifndef NPUC_TENSOR_H
#define NPUC_TENSOR_H

#include "api.h"

#include <stdint.h>
#include "dtype.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NPUC_MAX_RANK 8

/* Values are pinned. */
typedef enum npuc_layout {
    NPUC_LAYOUT_NONE = 0,
    NPUC_LAYOUT_OI = 1,
    NPUC_LAYOUT_IO = 2,
    NPUC_LAYOUT_OIHW = 3,
    NPUC_LAYOUT_IOHW = 4,
    NPUC_LAYOUT_HWIO = 5,
    NPUC_LAYOUT_HWIM = 6,
    NPUC_LAYOUT_DOI = 7,
    NPUC_LAYOUT_COUNT = 8
} npuc_layout;

/* What a tensor is for, guessed from names and shapes. Values are pinned. */
typedef enum npuc_role {
    NPUC_ROLE_OTHER = 0,
    NPUC_ROLE_CONV = 1,        /* convolution kernel */
    NPUC_ROLE_DWCONV = 2,      /* depthwise convolution kernel */
    NPUC_ROLE_LINEAR = 3,      /* linear / dense / matmul weight */
    NPUC_ROLE_EMBEDDING = 4,
    NPUC_ROLE_RNN = 5,         /* recurrent weight */
    NPUC_ROLE_BIAS = 6,
    NPUC_ROLE_BN_GAMMA = 7,
    NPUC_ROLE_BN_BETA = 8,
    NPUC_ROLE_BN_MEAN = 9,
    NPUC_ROLE_BN_VAR = 10,
    NPUC_ROLE_BN_COUNT = 11,   /* num_batches_tracked */
    NPUC_ROLE_NORM = 12,       /* LayerNorm/GroupNorm scale or shift */
    NPUC_ROLE_CONVT = 13,      /* transposed convolution kernel */
    NPUC_ROLE_COUNT = 14
} npuc_role;

/* How sure a decision about a tensor (its role and layout) or a graph edge
 * is, from the evidence it rests on.  Values are pinned.
 *   CERTAIN     stated: --layout, a recorded npuc.layout, --pair/--graph, or a
 *               file structure that says it (Keras model_config, safetensors
 *               "format" metadata together with an unambiguous name)
 *   CONVENTION  the naming convention of the exporter family the file shows
 *               (PyTorch/HF, Keras/TF/tfjs, ONNX/Paddle), with a fitting shape
 *   GUESS       shape plausibility or storage order alone */
typedef enum npuc_confidence {
    NPUC_CONF_CERTAIN = 0,
    NPUC_CONF_CONVENTION = 1,
    NPUC_CONF_GUESS = 2,
    NPUC_CONF_COUNT = 3
} npuc_confidence;

typedef struct npuc_tensor_info {
    const char *name;            /* UTF-8, owned by the model */
    npuc_dtype dtype;
    int rank;                    /* 0..NPUC_MAX_RANK */
    int64_t shape[NPUC_MAX_RANK];
    uint64_t numel;              /* product of shape (1 for rank 0) */
    uint64_t nbytes;             /* numel * dtype size */
    npuc_role role;
    npuc_layout layout;
    const char *group;           /* Keras layer name, or NULL; owned by the model */
    npuc_confidence confidence;  /* of role and layout (CERTAIN for tensors without a layout
                                    whose role does not matter to any pass) */
    const char *evidence;        /* why, one short phrase ("safetensors format=tf: TF conv
                                    kernel [kh,kw,in,out]"); NULL when nothing was decided;
                                    owned by the model */
} npuc_tensor_info;

/* Lower-case name of a layout ("oihw"), or "?" when invalid. */
NPUC_API const char *npuc_layout_name(npuc_layout l);
/* Parses a layout name or alias (none oi io oihw iohw hwio hwim doi; linear
 * dense matmul conv convtranspose keras-conv depthwise onnx-rnn). Returns 0,
 * or -1 if unknown. */
NPUC_API int npuc_layout_parse(const char *s, npuc_layout *out);
/* The lowest rank a layout applies to (2 for OI/IO, 3 for the conv layouts
 * and DOI, 0 for NONE). */
NPUC_API int npuc_layout_min_rank(npuc_layout l);
/* The output-channel axis of a layout for a tensor of the given rank, or -1
 * (NONE, or a rank too small).  For HWIM it is rank-2: the channel spans the
 * last two axes.  For DOI it is rank-2 too: the channel spans every axis but
 * the last. */
NPUC_API int npuc_layout_out_axis(npuc_layout l, int rank);
/* "certain", "convention", "guess"; "?" when invalid (static). */
NPUC_API const char *npuc_confidence_name(npuc_confidence c);
/* Short name of a role ("conv", "bn_var", ...; static). */
NPUC_API const char *npuc_role_name(npuc_role r);

/* Views t as [outer, C, inner] (see above).  For NONE all elements form one
 * channel: outer = 1, C = 1, inner = numel.  Returns NPUC_ERR_ARG when the
 * layout does not fit the tensor's rank. */
NPUC_API npuc_status npuc_layout_view(const npuc_tensor_info *t, uint64_t *outer, uint64_t *channels,
                             uint64_t *inner);

/* The role and layout npuc decides for a tensor from its name and shape
 * alone, given only whether its file is a Keras tree (keras != 0): the
 * naming rules of docs/formats.md without the file's metadata (a reader also
 * weighs the "format" metadata and Keras model_config, and records the
 * confidence and evidence in npuc_tensor_info).  Exposed so that tools and
 * tests can ask the same question. */
NPUC_API void npuc_guess_role_layout(const char *name, int rank, const int64_t *shape, int keras,
                            npuc_role *role, npuc_layout *layout);

#ifdef __cplusplus
}
#endif
#endif
