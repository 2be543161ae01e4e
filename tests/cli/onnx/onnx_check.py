#!/usr/bin/env python3
"""Independent checks of npuc's ONNX files, with python3-onnx and NumPy only.

  onnx_check.py names MODEL                 every weight's name, one a line
      (initializers and Constant values, subgraphs included: onnx's own walk)
  onnx_check.py same ST MODEL               the safetensors file ST (read here
      from its spec) holds every weight of MODEL with numpy_helper's values
  onnx_check.py equal ORIG OUT              OUT passes onnx.checker, has ORIG's
      graph (nodes, inputs, outputs, opsets) and the same weight values
  onnx_check.py pruned ORIG OUT S           as equal, except that rank >= 2
      weights lost exactly floor(S*n) values, the smallest in magnitude
  onnx_check.py fakequant ORIG OUT          as equal, except that rank >= 2
      weights are int8 symmetric per output channel (axis 0), min-max scales
  onnx_check.py feeds MODEL OUT.json        seeded inputs for ort_compare.js
  onnx_check.py bad KIND DIR                writes a malformed model DIR/KIND.onnx
"""
import json
import os
import struct
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper


def weights(graph, out):
    """name -> TensorProto for initializers and Constant values, recursively."""
    for t in graph.initializer:
        out[t.name] = t
    for n in graph.node:
        for a in n.attribute:
            if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and a.name == "value":
                out[n.output[0]] = a.t
            if a.type == onnx.AttributeProto.GRAPH:
                weights(a.g, out)
            for g in a.graphs:
                weights(g, out)
    return out


def load(path):
    m = onnx.load(path)  # external data resolved beside the file
    return m, {k: numpy_helper.to_array(v) for k, v in weights(m.graph, {}).items()}


def read_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    types = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "F64": np.float64, "I32": np.int32}
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        if v["dtype"] == "BF16":
            u = np.frombuffer(data[a:b], dtype=np.uint16).astype(np.uint32) << 16
            out[k] = u.view(np.float32).reshape(v["shape"])
        else:
            out[k] = np.frombuffer(data[a:b], dtype=types[v["dtype"]]).reshape(v["shape"])
    return out


def as_f32(a):
    return a.astype(np.float32) if a.dtype != np.uint16 else a  # bf16 comes as uint16 bits? (see below)


def graph_shape(m):
    """Everything but the weight values: nodes without Constant payloads,
    inputs, outputs, opsets."""
    g = onnx.GraphProto()
    g.CopyFrom(m.graph)

    def strip(gr):
        for t in gr.initializer:
            t.ClearField("raw_data")
            t.ClearField("float_data")
            t.ClearField("int32_data")
            t.ClearField("int64_data")
            t.ClearField("external_data")
            t.ClearField("data_location")
        for n in gr.node:
            for a in n.attribute:
                if n.op_type == "Constant":
                    a.t.ClearField("raw_data")
                    a.t.ClearField("float_data")
                if a.type == onnx.AttributeProto.GRAPH:
                    strip(a.g)
    strip(g)
    return g.SerializeToString(), [(o.domain, o.version) for o in m.opset_import]


def bf16_values(t, arr):
    if t.data_type == onnx.TensorProto.BFLOAT16:
        bits = np.array(t.int32_data, dtype=np.uint32) if not t.raw_data else \
            np.frombuffer(t.raw_data, dtype=np.uint16).astype(np.uint32)
        return (bits << 16).view(np.float32).reshape(arr.shape)
    return arr


def compare(orig, out, mode, s=0.0):
    mo, wo = load(orig)
    onnx.checker.check_model(out)
    mn, wn = load(out)
    assert graph_shape(mo) == graph_shape(mn), "the graph changed"
    assert sorted(wo) == sorted(wn), (sorted(wo), sorted(wn))
    for k in wo:
        a, b = wo[k], wn[k]
        assert a.dtype == b.dtype and a.shape == b.shape, (k, a.dtype, b.dtype, a.shape, b.shape)
        # lstm.B is the LSTM's bias input (ONNX's B [dirs, 8*hidden]): a bias
        # is never pruned or quantized (issue 31 item 3), whatever its rank.
        if mode == "equal" or a.ndim < 2 or a.dtype.kind not in "f" or k == "lstm.B":
            assert np.array_equal(a, b), k
        elif mode == "pruned":
            n = a.size
            z = int(np.floor(s * n))
            flat_a, flat_b = a.ravel(), b.ravel()
            zeroed = (flat_b == 0) & (flat_a != 0)
            assert zeroed.sum() == z, (k, zeroed.sum(), z)
            assert np.array_equal(flat_b[~zeroed], flat_a[~zeroed]), k
            if z and z < n:
                assert np.abs(flat_a[zeroed]).max() <= np.abs(flat_a[~zeroed]).min(), k
        elif mode == "fakequant":
            a64 = a.astype(np.float64).reshape(a.shape[0], -1)
            scale = np.abs(a64).max(axis=1, keepdims=True) / 127.0
            scale[scale == 0] = 1.0
            want = (np.clip(np.round(a64 / scale), -127, 127) * scale).reshape(a.shape)
            assert np.allclose(b, want, rtol=1e-5, atol=1e-7), (k, np.abs(b - want).max())
            assert not np.array_equal(a, b), k
    print("ok", out, len(wo), "weights")


def bad(kind, d):
    """Malformed models, each built here by hand or from a good one."""
    p = os.path.join(d, kind + ".onnx")
    X = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])
    if kind in ("dotdot", "absolute", "past_end", "symlink"):
        w = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
        w.ClearField("raw_data")
        w.data_location = onnx.TensorProto.EXTERNAL
        loc = {"dotdot": "../w.data", "absolute": "/etc/hostname", "past_end": "w.data",
               "symlink": "link.data"}[kind]
        for k, v in (("location", loc), ("offset", "8" if kind == "past_end" else "0"), ("length", "16")):
            w.external_data.add(key=k, value=v)
        with open(os.path.join(d, "w.data"), "wb") as f:
            f.write(np.arange(4, dtype=np.float32).tobytes())
        if kind == "symlink":
            outside = os.path.join(os.path.dirname(os.path.abspath(d)), "outside.data")
            with open(outside, "wb") as f:
                f.write(bytes(16))
            if os.path.lexists(os.path.join(d, "link.data")):
                os.remove(os.path.join(d, "link.data"))
            os.symlink(outside, os.path.join(d, "link.data"))
        g = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [], [X], [w])
        data = helper.make_model(g).SerializeToString()
    elif kind == "dims":
        w = numpy_helper.from_array(np.arange(15, dtype=np.float32), "w")
        w.ClearField("dims")
        w.dims.extend([4, 4])  # 16 elements, 15 stored
        g = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [], [X], [w])
        data = helper.make_model(g).SerializeToString()
    elif kind == "depth":
        leaf = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [X], [X])
        g = leaf
        for _ in range(40):
            n = helper.make_node("If", ["c"], ["y"], then_branch=g, else_branch=leaf)
            g = helper.make_graph([n], "g", [X], [X])
        data = helper.make_model(g).SerializeToString()
    else:  # hand-written bytes: ir_version 7, then a broken graph
        data = {"truncated_varint": b"\x08\x07\x3a\x02\x0a\x80",
                "length_past_end": b"\x08\x07\x3a\x05\x0a\x10\x0a\x01",
                "wrong_wire_type": b"\x08\x07\x3a\x02\x28\x01",
                "overlong_varint": b"\x08\x07\x3a\x0b\x28" + b"\xff" * 10}[kind]
    with open(p, "wb") as f:
        f.write(data)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "names":
        print("\n".join(sorted(weights(onnx.load(sys.argv[2], load_external_data=False).graph, {}))))
    elif cmd == "same":
        st = read_st(sys.argv[2])
        m = onnx.load(sys.argv[3])
        for k, t in weights(m.graph, {}).items():
            want = bf16_values(t, numpy_helper.to_array(t))
            got = st[k]
            assert got.shape == want.shape, (k, got.shape, want.shape)
            assert np.array_equal(got.astype(np.float64) if got.dtype.kind == "f" else got,
                                  want.astype(np.float64) if want.dtype.kind == "f" else want), k
        assert len(st) == len(weights(m.graph, {})), sorted(st)
        print("ok", sys.argv[2], len(st), "tensors")
    elif cmd in ("equal", "fakequant"):
        compare(sys.argv[2], sys.argv[3], cmd)
    elif cmd == "pruned":
        compare(sys.argv[2], sys.argv[3], cmd, float(sys.argv[4]))
    elif cmd == "feeds":
        # Seeded inputs for every graph input: floats N(0, 1), bools true.
        m = onnx.load(sys.argv[2], load_external_data=False)
        rng = np.random.default_rng(3)
        feeds = {}
        for i in m.graph.input:
            t = i.type.tensor_type
            dims = [d.dim_value if d.dim_value > 0 else 1 for d in t.shape.dim]
            n = int(np.prod(dims)) if dims else 1
            if t.elem_type == onnx.TensorProto.BOOL:
                feeds[i.name] = {"type": "bool", "dims": dims, "data": [1] * n}
            else:
                feeds[i.name] = {"type": "float32", "dims": dims, "data": rng.standard_normal(n).tolist()}
        with open(sys.argv[3], "w") as f:
            json.dump(feeds, f)
    elif cmd == "bad":
        bad(sys.argv[2], sys.argv[3])
    else:
        sys.exit("unknown command " + cmd)
