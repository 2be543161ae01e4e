/*
 * graph_net_ops.c - the format-neutral ops and what each does to the
 * channels flowing through it.  The names follow ONNX where ONNX has the op
 * (Conv, Gemm, BatchNormalization, Relu, Add, Concat, Flatten, Reshape);
 * a reader maps its own classes onto them and keeps its class name as the
 * node's source_op.  An op missing here is UNKNOWN: shape questions stop at
 * it, and a resize reaching it is refused, never guessed through.
 */
#include <string.h>

#include "graph/graph_net.h"

typedef struct op_row {
    const char *op;
    npuc__ng_kind kind;
} op_row;

static const op_row OPS[] = {
    {"Input", NPUC_NG_SOURCE},
    {"Conv", NPUC_NG_WEIGHTED},
    {"ConvTranspose", NPUC_NG_WEIGHTED},
    {"Gemm", NPUC_NG_WEIGHTED},
    {"MatMul", NPUC_NG_WEIGHTED},
    {"Embedding", NPUC_NG_WEIGHTED},
    {"LSTM", NPUC_NG_WEIGHTED},
    {"GRU", NPUC_NG_WEIGHTED},
    {"RNN", NPUC_NG_WEIGHTED},
    {"SeparableConv", NPUC_NG_WEIGHTED},
    {"DepthwiseConv", NPUC_NG_DEPTHWISE},
    {"BatchNormalization", NPUC_NG_CHANNELWISE},
    {"LayerNormalization", NPUC_NG_CHANNELWISE},
    {"PRelu", NPUC_NG_CHANNELWISE},
    {"Relu", NPUC_NG_ELEMENTWISE},
    {"LeakyRelu", NPUC_NG_ELEMENTWISE},
    {"Elu", NPUC_NG_ELEMENTWISE},
    {"Sigmoid", NPUC_NG_ELEMENTWISE},
    {"HardSigmoid", NPUC_NG_ELEMENTWISE},
    {"Tanh", NPUC_NG_ELEMENTWISE},
    {"Softmax", NPUC_NG_ELEMENTWISE},
    {"Clip", NPUC_NG_ELEMENTWISE},
    {"Activation", NPUC_NG_ELEMENTWISE},
    {"Dropout", NPUC_NG_ELEMENTWISE},
    {"Identity", NPUC_NG_ELEMENTWISE},
    {"Cast", NPUC_NG_ELEMENTWISE},
    {"QuantizeLinear", NPUC_NG_ELEMENTWISE},
    {"DequantizeLinear", NPUC_NG_ELEMENTWISE},
    {"MaxPool", NPUC_NG_SPATIAL},
    {"AveragePool", NPUC_NG_SPATIAL},
    {"Pad", NPUC_NG_SPATIAL},
    {"Crop", NPUC_NG_SPATIAL},
    {"Upsample", NPUC_NG_SPATIAL},
    {"GlobalAveragePool", NPUC_NG_GLOBAL_POOL},
    {"GlobalMaxPool", NPUC_NG_GLOBAL_POOL},
    {"Add", NPUC_NG_MERGE},
    {"Sub", NPUC_NG_MERGE},
    {"Mul", NPUC_NG_MERGE},
    {"Max", NPUC_NG_MERGE},
    {"Min", NPUC_NG_MERGE},
    {"Mean", NPUC_NG_MERGE},
    {"Concat", NPUC_NG_CONCAT},
    {"Flatten", NPUC_NG_FLATTEN},
    {"Reshape", NPUC_NG_RESHAPE},
};

npuc__ng_kind npuc__ng_op_kind(const char *op) {
    for (size_t i = 0; op && i < sizeof OPS / sizeof OPS[0]; i++)
        if (strcmp(OPS[i].op, op) == 0) return OPS[i].kind;
    return NPUC_NG_UNKNOWN;
}

const char *npuc__ng_kind_name(npuc__ng_kind k) {
    static const char *const N[] = {"unknown", "source", "weighted", "depthwise", "channelwise", "elementwise",
                                    "spatial", "global-pool", "merge", "concat", "flatten", "reshape"};
    return (unsigned)k < sizeof N / sizeof N[0] ? N[k] : "?";
}

int npuc__ng_channel_axis(const npuc__ng *g, int rank) {
    if (rank < 1) return -1;
    if (g->channels_last || rank == 1) return rank - 1;
    return 1;
}
