"""make_prune_models.py OUTDIR - ONNX models for structured pruning along the graph's edges
(tests/cli/onnx_prune.sh), built with onnx's helpers; seeded weights.

  p_conv.onnx     Conv c1 (+bias) -> BN -> Relu -> Conv c2 -> Clip -> Conv c3 (output);
                  value_info on the intermediate values
  p_gemm.onnx     Gemm g1 (transB 0, C) -> Relu -> Gemm g2 (transB 1, C) -> HardSigmoid
                  -> Gemm g3 (output)
  p_matmul.onnx   MatMul m1 -> Mul by a scalar -> Relu -> MatMul m2 -> MatMul m3 (output)
  p_add.onnx      Conv c0 -> Relu -> {Conv pa, Conv pb} -> Add -> Relu -> Conv up (output):
                  pa and pb prune together, c0 shrinks both
  p_dw.onnx       Conv c1 -> Relu -> depthwise Conv dw (+bias) -> BN -> Relu -> Conv c2 (output)
  p_flatten.onnx  Conv c1 -> Relu -> Flatten -> Gemm fc (output): c1 is refused
  p_reshape.onnx  Conv c1 -> Relu -> Reshape [1, -1] -> MatMul fc (output): c1 is refused
  p_mulvec.onnx   Conv c1 -> Mul by a per-channel [C,1,1] tensor -> Conv c2 (output): refused
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(5)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def t(a, name):
    return numpy_helper.from_array(np.asarray(a, np.float32), name)


def vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def bn(p, x, y, c):
    inits = [t(np.abs(f32(c)) + 0.3, p + ".scale"), t(f32(c), p + ".bias"), t(f32(c) * 0.5, p + ".mean"),
             t(np.abs(f32(c)) + 0.2, p + ".var")]
    node = helper.make_node("BatchNormalization", [x, p + ".scale", p + ".bias", p + ".mean", p + ".var"], [y],
                            name=p)
    return node, inits


def save(nodes, inits, name, x, y, vis=()):
    g = helper.make_graph(nodes, "g", [vi("x", x)], [vi("y", y)], inits)
    g.value_info.extend(vis)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="npuc-test")
    m.ir_version = 7
    onnx.checker.check_model(m, full_check=True)
    onnx.save_model(m, os.path.join(out, name))


def node(op, ins, outs, name, **kw):
    return helper.make_node(op, ins, outs, name=name, **kw)


# Conv + BN + ReLU chain.
b, bi = bn("bn1", "c1", "b1", 8)
save([node("Conv", ["x", "c1.weight", "c1.bias"], ["c1"], "c1", pads=[1, 1, 1, 1]), b,
      node("Relu", ["b1"], ["r1"], "r1"),
      node("Conv", ["r1", "c2.weight"], ["c2"], "c2", pads=[1, 1, 1, 1]),
      node("Clip", ["c2", "lo", "hi"], ["k2"], "clip"),
      node("Conv", ["k2", "c3.weight", "c3.bias"], ["y"], "c3")],
     [t(f32(8, 3, 3, 3), "c1.weight"), t(f32(8), "c1.bias"), t(f32(6, 8, 3, 3), "c2.weight"),
      t(np.float32(0), "lo"), t(np.float32(6), "hi"), t(f32(4, 6, 1, 1), "c3.weight"), t(f32(4), "c3.bias")] + bi,
     "p_conv.onnx", [1, 3, 8, 8], [1, 4, 8, 8],
     [vi("c1", [1, 8, 8, 8]), vi("b1", [1, 8, 8, 8]), vi("r1", [1, 8, 8, 8]), vi("c2", [1, 6, 8, 8])])

# Gemm chain (transB 0, then 1).
save([node("Gemm", ["x", "g1.weight", "g1.bias"], ["g1"], "g1"),
      node("Relu", ["g1"], ["r1"], "r1"),
      node("Gemm", ["r1", "g2.weight", "g2.bias"], ["g2"], "g2", transB=1),
      node("HardSigmoid", ["g2"], ["h2"], "hs"),
      node("Gemm", ["h2", "g3.weight"], ["y"], "g3")],
     [t(f32(16, 12), "g1.weight"), t(f32(12), "g1.bias"), t(f32(10, 12), "g2.weight"), t(f32(10), "g2.bias"),
      t(f32(10, 5), "g3.weight")],
     "p_gemm.onnx", [2, 16], [2, 5], [vi("g1", [2, 12]), vi("r1", [2, 12])])

# MatMul chain on [B, T, K].
save([node("MatMul", ["x", "m1.weight"], ["m1"], "m1"),
      node("Mul", ["m1", "s"], ["s1"], "scale"),
      node("Relu", ["s1"], ["r1"], "r1"),
      node("MatMul", ["r1", "m2.weight"], ["m2"], "m2"),
      node("Relu", ["m2"], ["r2"], "r2"),
      node("MatMul", ["r2", "m3.weight"], ["y"], "m3")],
     [t(f32(16, 12), "m1.weight"), t(np.float32(0.5), "s"), t(f32(12, 8), "m2.weight"), t(f32(8, 3), "m3.weight")],
     "p_matmul.onnx", [2, 4, 16], [2, 4, 3])

# An Add of two branches.
save([node("Conv", ["x", "c0.weight"], ["c0"], "c0", pads=[1, 1, 1, 1]),
      node("Relu", ["c0"], ["r0"], "r0"),
      node("Conv", ["r0", "pa.weight", "pa.bias"], ["pa"], "pa"),
      node("Conv", ["r0", "pb.weight"], ["pb"], "pb", pads=[1, 1, 1, 1]),
      node("Add", ["pa", "pb"], ["s"], "add"),
      node("Relu", ["s"], ["rs"], "rs"),
      node("Conv", ["rs", "up.weight"], ["y"], "up")],
     [t(f32(6, 3, 3, 3), "c0.weight"), t(f32(8, 6, 1, 1), "pa.weight"), t(f32(8), "pa.bias"),
      t(f32(8, 6, 3, 3), "pb.weight"), t(f32(5, 8, 1, 1), "up.weight")],
     "p_add.onnx", [1, 3, 6, 6], [1, 5, 6, 6], [vi("s", [1, 8, 6, 6])])

# A depthwise consumer with its BatchNorm.
b, bi = bn("bn", "dw", "bd", 8)
save([node("Conv", ["x", "c1.weight"], ["c1"], "c1"),
      node("Relu", ["c1"], ["r1"], "r1"),
      node("Conv", ["r1", "dw.weight", "dw.bias"], ["dw"], "dw", group=8, pads=[1, 1, 1, 1]), b,
      node("Relu", ["bd"], ["r2"], "r2"),
      node("Conv", ["r2", "c2.weight"], ["y"], "c2")],
     [t(f32(8, 3, 1, 1), "c1.weight"), t(f32(8, 1, 3, 3), "dw.weight"), t(f32(8), "dw.bias"),
      t(f32(4, 8, 1, 1), "c2.weight")] + bi,
     "p_dw.onnx", [1, 3, 6, 6], [1, 4, 6, 6])

# Flatten / Reshape after the conv: the channels are mixed with the positions.
save([node("Conv", ["x", "c1.weight"], ["c1"], "c1", pads=[1, 1, 1, 1]),
      node("Relu", ["c1"], ["r1"], "r1"),
      node("Flatten", ["r1"], ["f"], "flat"),
      node("Gemm", ["f", "fc.weight"], ["y"], "fc")],
     [t(f32(8, 3, 3, 3), "c1.weight"), t(f32(8 * 36, 10), "fc.weight")],
     "p_flatten.onnx", [1, 3, 6, 6], [1, 10])
save([node("Conv", ["x", "c1.weight"], ["c1"], "c1", pads=[1, 1, 1, 1]),
      node("Relu", ["c1"], ["r1"], "r1"),
      node("Reshape", ["r1", "shape"], ["f"], "reshape"),
      node("MatMul", ["f", "fc.weight"], ["y"], "fc")],
     [t(f32(8, 3, 3, 3), "c1.weight"), numpy_helper.from_array(np.array([1, -1], np.int64), "shape"),
      t(f32(8 * 36, 10), "fc.weight")],
     "p_reshape.onnx", [1, 3, 6, 6], [1, 10])

# A per-channel operand on the way.
save([node("Conv", ["x", "c1.weight"], ["c1"], "c1"),
      node("Mul", ["c1", "g"], ["m"], "mulvec"),
      node("Conv", ["m", "c2.weight"], ["y"], "c2")],
     [t(f32(8, 3, 1, 1), "c1.weight"), t(f32(8, 1, 1), "g"), t(f32(4, 8, 1, 1), "c2.weight")],
     "p_mulvec.onnx", [1, 3, 6, 6], [1, 4, 6, 6])
