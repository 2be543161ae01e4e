#!/usr/bin/env python3
"""Builds the ONNX test models with python3-onnx (onnx 1.12), independently of
npuc.  Usage: make_models.py OUTDIR.  Writes:

  conv_bn_relu.onnx  Conv (OIHW) + BatchNormalization + Relu, opset 13
  gemm.onnx          Gemm with transB=1 and a second Gemm without, opset 13
  matmul.onnx        MatMul [K,N] + Add, an int64 Reshape shape, opset 13
  lstm.onnx          LSTM W/R/B, opset 13
  constant_if.onnx   weights in Constant nodes, one in an If branch (Constant
                     and initializer inside the subgraph), opset 13
  typed.onnx         float_data (typed field), F16 and BF16 (int32_data), opset 13
  external.onnx      weights in external.onnx.data (offset/length), opset 13
  opset9.onnx, opset11.onnx  Conv + Gemm at old opsets
  convs.onnx         Conv -> Relu -> depthwise Conv (group == channels) ->
                     ConvTranspose (IOHW), and an Add of two Conv branches
  convt_dw.onnx      a depthwise ConvTranspose (group 8, W [8,1,2,2]: out axis 0)
  resolve.onnx       Gather of an embedding; MatMul weights reached through
                     Transpose (perm [1,0]), Identity and Cast, and Reshape
                     (value_info states its output), opset 13
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(7)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def save(model, name, **kw):
    onnx.checker.check_model(model)
    onnx.save_model(model, os.path.join(out, name), **kw)


def vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def model(nodes, inits, inputs, outputs, opset=13, name="g"):
    g = helper.make_graph(nodes, name, inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="npuc-test")
    m.ir_version = 7 if opset >= 13 else (6 if opset >= 11 else 4)
    m.metadata_props.add(key="source", value="make_models.py")
    return m


def conv_bn_relu(opset=13, name="conv_bn_relu.onnx"):
    inits = [numpy_helper.from_array(f32(8, 3, 3, 3), "conv.weight"), numpy_helper.from_array(f32(8), "conv.bias"),
             numpy_helper.from_array(np.abs(f32(8)) + 0.5, "bn.scale"), numpy_helper.from_array(f32(8), "bn.bias"),
             numpy_helper.from_array(f32(8), "bn.mean"), numpy_helper.from_array(np.abs(f32(8)) + 0.5, "bn.var")]
    nodes = [helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["b"]),
             helper.make_node("Relu", ["b"], ["y"])]
    save(model(nodes, inits, [vi("x", [1, 3, 8, 8])], [vi("y", [1, 8, 8, 8])], opset), name)


def gemm(opset=13, name="gemm.onnx"):
    inits = [numpy_helper.from_array(f32(16, 32), "fc1.weight"), numpy_helper.from_array(f32(16), "fc1.bias"),
             numpy_helper.from_array(f32(16, 4), "fc2.weight"), numpy_helper.from_array(f32(4), "fc2.bias")]
    nodes = [helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], transB=1),
             helper.make_node("Gemm", ["h", "fc2.weight", "fc2.bias"], ["y"])]
    save(model(nodes, inits, [vi("x", [2, 32])], [vi("y", [2, 4])], opset), name)


conv_bn_relu()
gemm()

# MatMul [K, N] + Add, and an int64 shape constant for Reshape.
inits = [numpy_helper.from_array(f32(32, 24), "mm.weight"), numpy_helper.from_array(f32(24), "mm.bias"),
         numpy_helper.from_array(np.array([2, 4, 6], dtype=np.int64), "shape")]
nodes = [helper.make_node("MatMul", ["x", "mm.weight"], ["m"]), helper.make_node("Add", ["m", "mm.bias"], ["a"]),
         helper.make_node("Reshape", ["a", "shape"], ["y"])]
save(model(nodes, inits, [vi("x", [2, 32])], [vi("y", [2, 4, 6])]), "matmul.onnx")

# LSTM: W [1, 4h, in], R [1, 4h, h], B [1, 8h].
h, inp = 8, 5
inits = [numpy_helper.from_array(f32(1, 4 * h, inp), "lstm.W"), numpy_helper.from_array(f32(1, 4 * h, h), "lstm.R"),
         numpy_helper.from_array(f32(1, 8 * h), "lstm.B")]
nodes = [helper.make_node("LSTM", ["x", "lstm.W", "lstm.R", "lstm.B"], ["y"], hidden_size=h)]
save(model(nodes, inits, [vi("x", [3, 1, inp])], [vi("y", [3, 1, 1, h])]), "lstm.onnx")

# Weights in Constant nodes, one inside an If branch.
w_then = helper.make_node("Constant", [], ["then.w"], value=numpy_helper.from_array(f32(4, 4), "ignored"))
mm_then = helper.make_node("MatMul", ["x", "then.w"], ["t0"])
add_then = helper.make_node("Add", ["t0", "then.b"], ["t"])
then_g = helper.make_graph([w_then, mm_then, add_then], "then", [], [vi("t", [2, 4])],
                           [numpy_helper.from_array(f32(4), "then.b")])
else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [], [vi("e", [2, 4])])
nodes = [helper.make_node("Constant", [], ["c.w"], value=numpy_helper.from_array(f32(4, 4))),
         helper.make_node("MatMul", ["x0", "c.w"], ["x"]),
         helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)]
save(model(nodes, [], [vi("x0", [2, 4]), vi("cond", [], TensorProto.BOOL)], [vi("y", [2, 4])]), "constant_if.onnx")

# Typed fields: float_data, F16 and BF16 in int32_data.
fd = f32(3, 4)
f16 = f32(6).astype(np.float16)
bf = f32(5)
bf_bits = (bf.view(np.uint32) >> 16).astype(np.uint16)
inits = [helper.make_tensor("typed.f32", TensorProto.FLOAT, [3, 4], fd.flatten().tolist()),
         helper.make_tensor("typed.f16", TensorProto.FLOAT16, [6], f16.view(np.uint16).astype(np.int32).tolist()),
         helper.make_tensor("typed.bf16", TensorProto.BFLOAT16, [5], bf_bits.astype(np.int32).tolist())]
nodes = [helper.make_node("MatMul", ["x", "typed.f32"], ["y"])]
save(model(nodes, inits, [vi("x", [2, 3])], [vi("y", [2, 4])]), "typed.onnx")

# External data: every tensor in external.onnx.data.
inits = [numpy_helper.from_array(f32(32, 64), "ext.w1"), numpy_helper.from_array(f32(32), "ext.b1"),
         numpy_helper.from_array(f32(32, 8), "ext.w2")]
nodes = [helper.make_node("Gemm", ["x", "ext.w1", "ext.b1"], ["h"], transB=1),
         helper.make_node("MatMul", ["h", "ext.w2"], ["y"])]
m = model(nodes, inits, [vi("x", [2, 64])], [vi("y", [2, 8])])
save(m, "external.onnx", save_as_external_data=True, all_tensors_to_one_file=True, location="external.onnx.data",
     size_threshold=0)

conv_bn_relu(9, "opset9.onnx")
gemm(11, "opset11.onnx")


# Convolutions: a plain Conv, ReLU, a depthwise Conv (group == channels,
# W [8,1,3,3]), an Add of two Conv branches, and a ConvTranspose W [8,4,2,2].
inits = [numpy_helper.from_array(f32(8, 3, 3, 3), "c1.weight"), numpy_helper.from_array(f32(8), "c1.bias"),
         numpy_helper.from_array(f32(8, 1, 3, 3), "dw.weight"), numpy_helper.from_array(f32(8), "dw.bias"),
         numpy_helper.from_array(f32(8, 8, 1, 1), "pa.weight"), numpy_helper.from_array(f32(8, 8, 1, 1), "pb.weight"),
         numpy_helper.from_array(f32(8, 4, 2, 2), "up.weight"), numpy_helper.from_array(f32(4), "up.bias")]
nodes = [helper.make_node("Conv", ["x", "c1.weight", "c1.bias"], ["c1"], pads=[1, 1, 1, 1], name="c1"),
         helper.make_node("Relu", ["c1"], ["r1"], name="r1"),
         helper.make_node("Conv", ["r1", "dw.weight", "dw.bias"], ["d"], pads=[1, 1, 1, 1], group=8, name="dw"),
         helper.make_node("Conv", ["d", "pa.weight"], ["pa"], name="pa"),
         helper.make_node("Conv", ["d", "pb.weight"], ["pb"], name="pb"),
         helper.make_node("Add", ["pa", "pb"], ["s"], name="add"),
         helper.make_node("ConvTranspose", ["s", "up.weight", "up.bias"], ["y"], strides=[2, 2], name="up")]
save(model(nodes, inits, [vi("x", [1, 3, 8, 8])], [vi("y", [1, 4, 16, 16])]), "convs.onnx")

# A depthwise ConvTranspose (group == channels, W [8,1,2,2]): output channel
# c reads W[c] alone, so its channels run along axis 0, not IOHW's axis 1.
inits = [numpy_helper.from_array(f32(8, 4, 3, 3), "c.weight"),
         numpy_helper.from_array(f32(8, 1, 2, 2), "dwt.weight"), numpy_helper.from_array(f32(8), "dwt.bias")]
nodes = [helper.make_node("Conv", ["x", "c.weight"], ["c"], pads=[1, 1, 1, 1], name="c"),
         helper.make_node("ConvTranspose", ["c", "dwt.weight", "dwt.bias"], ["y"], strides=[2, 2], group=8,
                          name="dwt")]
save(model(nodes, inits, [vi("x", [1, 4, 8, 8])], [vi("y", [1, 8, 16, 16])]), "convt_dw.onnx")

# Weights reached through pass-through ops, and an embedding.
inits = [numpy_helper.from_array(f32(10, 6), "emb.weight"),
         numpy_helper.from_array(f32(5, 6), "t.weight"),       # Transpose perm [1,0] -> [6,5]: out axis 0 stored
         numpy_helper.from_array(f32(5, 4), "i.weight"),       # Identity -> [5,4]: out axis 1
         numpy_helper.from_array(f32(4, 3), "k.weight"),       # Cast -> [4,3]: out axis 1
         numpy_helper.from_array(f32(2, 3, 3), "r.weight"),    # Reshape -> [6,3]: out axis 2 stored
         numpy_helper.from_array(np.array([6, 3], dtype=np.int64), "r.shape")]
nodes = [helper.make_node("Gather", ["emb.weight", "ids"], ["e"], name="emb"),
         helper.make_node("Transpose", ["t.weight"], ["t.wt"], perm=[1, 0], name="t_tr"),
         helper.make_node("MatMul", ["e", "t.wt"], ["h1"], name="mm_t"),
         helper.make_node("Identity", ["i.weight"], ["i.wi"], name="i_id"),
         helper.make_node("MatMul", ["h1", "i.wi"], ["h2"], name="mm_i"),
         helper.make_node("Cast", ["k.weight"], ["k.wc"], to=TensorProto.FLOAT, name="k_cast"),
         helper.make_node("MatMul", ["h2", "k.wc"], ["h3"], name="mm_k"),
         helper.make_node("Concat", ["h3", "h3"], ["h4"], axis=-1, name="cat"),
         helper.make_node("Reshape", ["r.weight", "r.shape"], ["r.wr"], name="r_rs"),
         helper.make_node("MatMul", ["h4", "r.wr"], ["y"], name="mm_r")]
m = model(nodes, inits, [vi("ids", [2, 3], TensorProto.INT64)], [vi("y", [2, 3, 3])])
m.graph.value_info.append(vi("r.wr", [6, 3]))
save(m, "resolve.onnx")
