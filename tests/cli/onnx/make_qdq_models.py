#!/usr/bin/env python3
"""Builds the models of tests/cli/onnx_qdq.sh with python3-onnx (onnx 1.12),
independently of npuc.  Usage: make_qdq_models.py OUTDIR.  Writes:

  mm21.onnx        MatMul [64, 24] + Add, Gemm transB=1 [16, 64]: opset 21,
                   IR 10 (onnx 1.12 cannot build those: built at opset 17,
                   then the two numbers are patched after the checker ran)
  convert10.onnx   opset 10: MatMul [64, 24], Clip with min/max attributes,
                   Unsqueeze and ReduceSum with axes attributes (all become
                   inputs when the opset is raised)
  softmax11last.onnx  the same with the Softmax along its last axis: raised to 13
  softmax11.onnx   opset 11: Gemm [16, 32] (transB) + Softmax on axis 0 (its meaning
                   changed at 13: the opset cannot be raised)
  upsample9.onnx   opset 9: Conv [8, 3, 3, 3] + Upsample (removed at 10)
  convs13.onnx     opset 13: depthwise Conv [8, 1, 3, 3] (group 8), a 1x1 Conv
                   [4, 8, 1, 1] and a ConvTranspose [4, 6, 3, 3] (IOHW)
  f16.onnx         opset 13: a FLOAT16 MatMul weight [32, 24] behind a Cast
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


def vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def build(nodes, inits, inputs, outputs, opset, ir):
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="npuc-test")
    m.ir_version = ir
    onnx.checker.check_model(m)
    return m


# opset 21 / IR 10: checked at 17, then patched.
inits = [numpy_helper.from_array(f32(64, 24), "mm.weight"), numpy_helper.from_array(f32(24), "mm.bias"),
         numpy_helper.from_array(f32(16, 64), "fc.weight")]
nodes = [helper.make_node("MatMul", ["x", "mm.weight"], ["m"]), helper.make_node("Add", ["m", "mm.bias"], ["y"]),
         helper.make_node("Gemm", ["x", "fc.weight"], ["z"], transB=1)]
m = build(nodes, inits, [vi("x", [2, 64])], [vi("y", [2, 24]), vi("z", [2, 16])], 17, 8)
m.opset_import[0].version = 21
m.ir_version = 10
onnx.save_model(m, os.path.join(out, "mm21.onnx"))

# opset 10 with attributes that became inputs.
inits = [numpy_helper.from_array(f32(64, 24), "mm.weight")]
nodes = [helper.make_node("MatMul", ["x", "mm.weight"], ["m"]),
         helper.make_node("Clip", ["m"], ["c"], min=-4.0, max=4.0),
         helper.make_node("Unsqueeze", ["c"], ["u"], axes=[0]),
         helper.make_node("ReduceSum", ["u"], ["y"], axes=[0], keepdims=0)]
m = build(nodes, inits, [vi("x", [2, 64])], [vi("y", [2, 24])], 10, 5)
onnx.save_model(m, os.path.join(out, "convert10.onnx"))

# opset 11 with Softmax along axis 0, not the last: its meaning changed at 13
# (below 13 it normalizes the input flattened to 2-D at the axis), so the
# model cannot be raised to 13.
inits = [numpy_helper.from_array(f32(16, 32), "fc.weight"), numpy_helper.from_array(f32(16), "fc.bias")]
nodes = [helper.make_node("Gemm", ["x", "fc.weight", "fc.bias"], ["h"], transB=1),
         helper.make_node("Softmax", ["h"], ["y"], axis=0)]
m = build(nodes, inits, [vi("x", [2, 32])], [vi("y", [2, 16])], 11, 6)
onnx.save_model(m, os.path.join(out, "softmax11.onnx"))

# The same with the Softmax along its last axis (the output's rank 2 is
# stated): the same meaning at 13, so the opset is raised.
nodes = [helper.make_node("Gemm", ["x", "fc.weight", "fc.bias"], ["h"], transB=1),
         helper.make_node("Softmax", ["h"], ["y"], axis=1)]
m = build(nodes, inits, [vi("x", [2, 32])], [vi("y", [2, 16])], 11, 6)
onnx.save_model(m, os.path.join(out, "softmax11last.onnx"))

# opset 9 with Upsample: cannot be raised to 10.
inits = [numpy_helper.from_array(f32(8, 3, 3, 3), "conv.weight"), numpy_helper.from_array(f32(8), "conv.bias"),
         numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "up.scales")]
nodes = [helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Upsample", ["c", "up.scales"], ["y"], mode="nearest")]
m = build(nodes, inits, [vi("x", [1, 3, 8, 8])], [vi("y", [1, 8, 16, 16])], 9, 4)
onnx.save_model(m, os.path.join(out, "upsample9.onnx"))

# opset 13: a depthwise Conv (group = channels) and a ConvTranspose (IOHW).
inits = [numpy_helper.from_array(f32(8, 1, 3, 3), "dw.weight"), numpy_helper.from_array(f32(4, 6, 3, 3), "ct.weight"),
         numpy_helper.from_array(f32(6), "ct.bias")]
nodes = [helper.make_node("Conv", ["x", "dw.weight"], ["d"], group=8, pads=[1, 1, 1, 1]),
         helper.make_node("Conv", ["d", "pw"], ["p"]),
         helper.make_node("ConvTranspose", ["p", "ct.weight", "ct.bias"], ["y"], strides=[2, 2])]
inits.append(numpy_helper.from_array(f32(4, 8, 1, 1), "pw"))
m = build(nodes, inits, [vi("x", [1, 8, 6, 6])], [vi("y", [1, 6, 13, 13])], 13, 7)
onnx.save_model(m, os.path.join(out, "convs13.onnx"))

# opset 13: a FLOAT16 weight, cast to float before its MatMul.
nodes = [helper.make_node("Cast", ["w16"], ["w"], to=TensorProto.FLOAT), helper.make_node("MatMul", ["x", "w"], ["y"])]
m = build(nodes, [numpy_helper.from_array(f32(32, 24).astype(np.float16), "w16")], [vi("x", [2, 32])],
          [vi("y", [2, 24])], 13, 7)
onnx.save_model(m, os.path.join(out, "f16.onnx"))
