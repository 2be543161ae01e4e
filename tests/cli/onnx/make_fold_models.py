"""make_fold_models.py OUTDIR - ONNX models for fold-bn (tests/cli/onnx_fold.sh), built
with onnx's helpers.  BatchNorm statistics are random and far from identity, so a fold
that drops a term shows in the output.  fold-bn reads ONNX's epsilon attribute
from the BatchNormalization node: models with epsilon 1e-3 show a fold that used the default 1e-5.

  bn_nobias.onnx    Conv without bias -> BN -> Relu -> Conv + bias -> BN (output
                    of the graph: its name must stay), opset 13
  bn_opset11.onnx   the same at opset 11 (IR 6)
  bn_opset9.onnx    the same at opset 9 (IR 4; BN's spatial attribute)
  bn_const.onnx     BN statistics in Constant nodes (as PaddleOCR stores weights)
  bn_convt.onnx     ConvTranspose (IOHW, group 1) -> BN (eps 1e-3)
  bn_gemm.onnx      Gemm (transB=1, no C: a bias is created) -> BN on [N, C]
  bn_matmul.onnx    MatMul ([K, N], no bias input) -> BN on [N, C]: folded with an Add of the
                    created bias after the MatMul
  bn_matmul3.onnx   MatMul on [2, 8, 16] -> BN: BN normalizes axis 1, the MatMul's channels are
                    the last axis: not a pair (the BN stays)
  bn_if.onnx        a Conv -> BN pair inside an If branch (eps 1e-3; the other branch a plain Conv)
  bn_shared.onnx    Conv -> BN where the Conv's output is also added to the BN's output:
                    not foldable, the BN stays
  bn_relu_first.onnx  conv1 -> Relu -> bn1: the names pair conv1 / bn1, the graph does not
                    (the BN stays)
  bn_biasname.onnx  Conv with kernel 'W0' and bias 'B0' -> BN, Gemm (beta 0.5, C 'C1') -> BN:
                    the bias is the node's input 2, whatever its name; Gemm's beta scales C
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(11)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def t(a, name):
    return numpy_helper.from_array(np.asarray(a, np.float32), name)


def vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def bn_inits(p, c):
    return [t(np.abs(f32(c)) + 0.3, p + ".scale"), t(f32(c), p + ".bias"), t(f32(c) * 0.5, p + ".mean"),
            t(np.abs(f32(c)) + 0.2, p + ".var")]


def bn_node(p, x, y, eps, opset):
    kw = {"epsilon": eps}
    if opset < 9:
        kw["spatial"] = 1
    return helper.make_node("BatchNormalization", [x, p + ".scale", p + ".bias", p + ".mean", p + ".var"], [y],
                            name=p, **kw)


def save(g, name, opset=13, vis=()):
    g.value_info.extend(vis)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="npuc-test")
    m.ir_version = 7 if opset >= 13 else (6 if opset >= 11 else 4)
    onnx.checker.check_model(m)
    onnx.save_model(m, os.path.join(out, name))


def two(opset, name):
    inits = [t(f32(6, 3, 3, 3), "c1.weight"), t(f32(4, 6, 1, 1), "c2.weight"), t(f32(4), "c2.bias")]
    inits += bn_inits("bn1", 6) + bn_inits("bn2", 4)
    nodes = [helper.make_node("Conv", ["x", "c1.weight"], ["c1"], name="c1", pads=[1, 1, 1, 1]),
             bn_node("bn1", "c1", "b1", 1e-5, opset),
             helper.make_node("Relu", ["b1"], ["r1"], name="r1"),
             helper.make_node("Conv", ["r1", "c2.weight", "c2.bias"], ["c2"], name="c2"),
             bn_node("bn2", "c2", "y", 1e-5, opset)]
    g = helper.make_graph(nodes, "g", [vi("x", [1, 3, 8, 8])], [vi("y", [1, 4, 8, 8])], inits)
    save(g, name, opset, [vi("c1", [1, 6, 8, 8]), vi("b1", [1, 6, 8, 8])])


two(13, "bn_nobias.onnx")
two(11, "bn_opset11.onnx")
two(9, "bn_opset9.onnx")

# Constant nodes hold the weights and the statistics.
consts = [helper.make_node("Constant", [], ["k.weight"], value=t(f32(5, 3, 3, 3), "k.weight"))]
for a in bn_inits("kb", 5):
    consts.append(helper.make_node("Constant", [], [a.name], value=a))
g = helper.make_graph(consts + [helper.make_node("Conv", ["x", "k.weight"], ["k"], name="k", pads=[1, 1, 1, 1]),
                                bn_node("kb", "k", "kbo", 1e-5, 13),
                                helper.make_node("Relu", ["kbo"], ["y"], name="relu")],
                      "g", [vi("x", [1, 3, 6, 6])], [vi("y", [1, 5, 6, 6])])
save(g, "bn_const.onnx")

# ConvTranspose: W [I, O, kh, kw].
g = helper.make_graph([helper.make_node("ConvTranspose", ["x", "ct.weight", "ct.bias"], ["ct"], name="ct",
                                        strides=[2, 2]),
                       bn_node("ctb", "ct", "y", 1e-3, 13)],
                      "g", [vi("x", [1, 4, 5, 5])], [vi("y", [1, 6, 11, 11])],
                      [t(f32(4, 6, 3, 3), "ct.weight"), t(f32(6), "ct.bias")] + bn_inits("ctb", 6))
save(g, "bn_convt.onnx")

# Gemm [N, K] x W^T, no C, then BatchNorm over [N, C].
g = helper.make_graph([helper.make_node("Gemm", ["x", "fc.weight"], ["fc"], name="fc", transB=1),
                       bn_node("fb", "fc", "y", 1e-5, 13)],
                      "g", [vi("x", [4, 16])], [vi("y", [4, 8])], [t(f32(8, 16), "fc.weight")] + bn_inits("fb", 8))
save(g, "bn_gemm.onnx")

g = helper.make_graph([helper.make_node("MatMul", ["x", "mm.weight"], ["mm"], name="mm"),
                       bn_node("mb", "mm", "y", 1e-5, 13)],
                      "g", [vi("x", [4, 16])], [vi("y", [4, 8])], [t(f32(16, 8), "mm.weight")] + bn_inits("mb", 8))
save(g, "bn_matmul.onnx", vis=[vi("mm", [4, 8])])
g = helper.make_graph([helper.make_node("MatMul", ["x", "m3.weight"], ["m3"], name="m3"),
                       bn_node("m3b", "m3", "y", 1e-5, 13)],
                      "g", [vi("x", [2, 8, 16])], [vi("y", [2, 8, 8])], [t(f32(16, 8), "m3.weight")] + bn_inits("m3b", 8))
save(g, "bn_matmul3.onnx")

# A pair inside an If branch; the condition is an input.
then_g = helper.make_graph([helper.make_node("Conv", ["x", "it.weight"], ["ic"], name="ic", pads=[1, 1, 1, 1]),
                            bn_node("ib", "ic", "ib_out", 1e-3, 13)],
                           "then", [], [vi("ib_out", [1, 4, 6, 6])],
                           [t(f32(4, 3, 3, 3), "it.weight")] + bn_inits("ib", 4))
else_g = helper.make_graph([helper.make_node("Conv", ["x", "ie.weight"], ["ie_out"], name="ie", pads=[1, 1, 1, 1])],
                           "else", [], [vi("ie_out", [1, 4, 6, 6])], [t(f32(4, 3, 3, 3), "ie.weight")])
g = helper.make_graph([helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then_g, else_branch=else_g)],
                      "g", [vi("x", [1, 3, 6, 6]), helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                      [vi("y", [1, 4, 6, 6])])
save(g, "bn_if.onnx")

# Not foldable: the Conv's output has a second reader.
g = helper.make_graph([helper.make_node("Conv", ["x", "s.weight"], ["s"], name="s", pads=[1, 1, 1, 1]),
                       bn_node("sb", "s", "sbo", 1e-5, 13),
                       helper.make_node("Add", ["s", "sbo"], ["y"], name="add")],
                      "g", [vi("x", [1, 3, 6, 6])], [vi("y", [1, 4, 6, 6])],
                      [t(f32(4, 3, 3, 3), "s.weight")] + bn_inits("sb", 4))
save(g, "bn_shared.onnx")

# The names pair conv1 / bn1 (conv1.weight stored first), but a Relu sits between them.
g = helper.make_graph([helper.make_node("Conv", ["x", "conv1.weight"], ["conv1"], name="conv1", pads=[1, 1, 1, 1]),
                       helper.make_node("Relu", ["conv1"], ["r"], name="relu"),
                       bn_node("bn1", "r", "y", 1e-5, 13)],
                      "g", [vi("x", [1, 3, 6, 6])], [vi("y", [1, 4, 6, 6])],
                      [t(f32(4, 3, 3, 3), "conv1.weight")] + bn_inits("bn1", 4))
save(g, "bn_relu_first.onnx")

# Biases not named after their kernels, and a Gemm whose beta scales C.
g = helper.make_graph([helper.make_node("Conv", ["x", "W0", "B0"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                       bn_node("nb", "c", "nbo", 1e-5, 13),
                       helper.make_node("Flatten", ["nbo"], ["f"], name="flat"),
                       helper.make_node("Gemm", ["f", "W1", "C1"], ["g"], name="gemm", transB=1, beta=0.5),
                       bn_node("gb", "g", "y", 1e-5, 13)],
                      "g", [vi("x", [1, 3, 2, 2])], [vi("y", [1, 5])],
                      [t(f32(4, 3, 3, 3), "W0"), t(f32(4), "B0"), t(f32(5, 16), "W1"), t(f32(5), "C1")]
                      + bn_inits("nb", 4) + bn_inits("gb", 5))
save(g, "bn_biasname.onnx")
