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
  onnx_check.py fakequant ORIG OUT          as equal, except that the weights
      a kernel slot consumes are int8 symmetric per output channel along the
      axis the consuming op gives (expected() below), min-max scales
  onnx_check.py roles MODEL INFO.json       `npuc info --json` gives every
      weight expected() decides that role, layout and out axis, certain
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


# What each op's weight input is (an independent reading of the ONNX operator
# specs): op -> {input index: (npuc role, kind, out axis, in axis)}, kind
# "mat" (layout by its axes), "doi" (recurrent), "vec" (no layout), "bias2"
# (LSTM B: a bias per channel along axis 1).
SLOTS = {
    "Conv": {1: ("conv", "mat", 0, 1), 2: ("bias", "vec", None, None)},
    "ConvTranspose": {1: ("convt", "mat", 1, 0), 2: ("bias", "vec", None, None)},
    "MatMul": {1: ("linear", "mat", 1, 0)},
    "LSTM": {1: ("rnn", "doi", 1, 2), 2: ("rnn", "doi", 1, 2), 3: ("bias", "bias2", 1, None)},
    "GRU": {1: ("rnn", "doi", 1, 2), 2: ("rnn", "doi", 1, 2), 3: ("bias", "bias2", 1, None)},
    "RNN": {1: ("rnn", "doi", 1, 2), 2: ("rnn", "doi", 1, 2), 3: ("bias", "bias2", 1, None)},
    "Gather": {0: ("embedding", "mat", 0, None)},
    "BatchNormalization": {1: ("bn_gamma", "vec", None, None), 2: ("bn_beta", "vec", None, None),
                           3: ("bn_mean", "vec", None, None), 4: ("bn_var", "vec", None, None)},
}


def expected(m):
    """tensor name -> (role, layout, out_axis) from the op consuming it."""
    W = {k: list(v.dims) for k, v in weights(m.graph, {}).items()}
    prod, shapes, nodes = {}, {}, []

    def coll(g):
        for n in g.node:
            nodes.append(n)
            for o in n.output:
                prod.setdefault(o, n)
        for v in list(g.value_info) + list(g.output) + list(g.input):
            dims = v.type.tensor_type.shape.dim
            if v.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") and d.dim_value > 0 for d in dims):
                shapes.setdefault(v.name, [d.dim_value for d in dims])
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    coll(a.g)
                for sg in a.graphs:
                    coll(sg)
    coll(m.graph)

    def res(name, depth=0):
        """(tensor, [stored axis of each axis of the value]) or None."""
        if name in W:
            return name, list(range(len(W[name])))
        n = prod.get(name)
        if n is None or depth > 16 or n.domain not in ("", "ai.onnx") or n.output[0] != name:
            return None
        if n.op_type in ("Identity", "Cast"):
            return res(n.input[0], depth + 1)
        if n.op_type == "Transpose":
            r = res(n.input[0], depth + 1)
            if r is None:
                return None
            perm = [a.ints for a in n.attribute if a.name == "perm"]
            perm = list(perm[0]) if perm else list(reversed(range(len(r[1]))))
            return r[0], [r[1][p] for p in perm]
        if n.op_type == "Reshape":
            r = res(n.input[0], depth + 1)
            if r is None or name not in shapes:
                return (r[0], None) if r else None
            ind = [W[r[0]][a] for a in r[1]]
            od = shapes[name]
            ax = []
            for a in range(len(od)):
                before = int(np.prod(od[:a]))
                hit = None
                for k in range(len(ind)):
                    if int(np.prod(ind[:k])) == before and ind[k] == od[a]:
                        hit = r[1][k]
                        break
                ax.append(hit)
            return r[0], ax
        return None

    def layout(rank, out, inn):
        if rank == 2:
            return {0: "oi", 1: "io"}.get(out) if inn in (None, 1 - out) else None
        if out == 0 and inn in (None, 1):
            return "oihw"
        if out == 1 and inn in (None, 0):
            return "iohw"
        if out == rank - 1 and inn in (None, rank - 2):
            return "hwio"
        return None

    got = {}
    for n in nodes:
        # Gemm: B is [K,N] (out axis 1) unless transB=1 makes it [N,K] (out axis 0); C a bias
        if n.domain in ("", "ai.onnx") and n.op_type == "Gemm" and len(n.input) > 1:
            tb = [a.i for a in n.attribute if a.name == "transB"]
            tb = tb[0] if tb else 0
            r = res(n.input[1])
            if r and r[1] is not None and len(r[1]) == 2:
                so = r[1][0 if tb else 1]
                dec = ("linear", {0: "oi", 1: "io"}[so], so)
                got[r[0]] = "conflict" if r[0] in got and got[r[0]] != dec else dec
            if len(n.input) > 2 and n.input[2]:
                r = res(n.input[2])
                if r:
                    got.setdefault(r[0], ("bias", "none", None))
        if n.domain not in ("", "ai.onnx") or n.op_type not in SLOTS:
            continue
        for k, x in enumerate(n.input):
            if k not in SLOTS[n.op_type] or not x:
                continue
            r = res(x)
            if r is None:
                continue
            t, ax = r
            role, kind, out, inn = SLOTS[n.op_type][k]
            rank = len(W[t])
            if kind == "vec":
                dec = (role, "none", None)
            else:
                if n.op_type == "ConvTranspose" and rank >= 3:
                    group = [a.i for a in n.attribute if a.name == "group"]
                    if group and group[0] > 1 and W[t][1] == 1 and W[t][0] == group[0]:
                        # W [C, 1, k..], group C: output channel c reads W[c] alone
                        role, out, inn = "dwconv", 0, 1
                if ax is None or out >= len(ax) or ax[out] is None:
                    continue
                so = ax[out]
                si = ax[inn] if inn is not None and inn < len(ax) else None
                if kind == "doi":
                    if len(ax) != 3 or (so, si) != (1, 2):
                        continue
                    dec = (role, "doi", 1)
                elif kind == "bias2":
                    dec = (role, {0: "oi", 1: "io"}[so], so) if rank == 2 else None
                else:
                    if n.op_type == "Conv" and rank >= 3 and (so, si) == (0, 1):
                        group = [a.i for a in n.attribute if a.name == "group"]
                        if group and group[0] > 1 and W[t][1] == 1:
                            role = "dwconv"
                    lay = layout(rank, so, si)
                    dec = (role, lay, so) if lay else None
            if dec is None:
                continue
            if t in got and got[t] != dec:
                got[t] = "conflict"
            else:
                got.setdefault(t, dec)
    return {k: v for k, v in got.items() if v != "conflict"}


def roles(model, info):
    m = onnx.load(model, load_external_data=False)
    want = expected(m)
    j = json.load(open(info))
    tensors = {t["name"]: t for t in j["tensors"]}
    assert want, "no weight decided"
    for k, (role, lay, ax) in want.items():
        t = tensors[k]
        got = (t["role"], t["layout"], t.get("out_axis"), t["confidence"])
        assert got == (role, lay, ax, "certain"), (model, k, got, (role, lay, ax, "certain"))
    print("ok", model, len(want), "weights: roles, layouts and out axes certain")


def fq_ref(a, lay, ax, bits=8):
    """Symmetric int8 fake quantization with min-max scales per channel."""
    qmax = 2 ** (bits - 1) - 1
    a64 = a.astype(np.float64)
    if lay == "doi":
        c = a64.reshape(-1, a.shape[-1])
    else:
        c = np.moveaxis(a64, ax, 0).reshape(a.shape[ax], -1)
    scale = np.abs(c).max(axis=1, keepdims=True) / qmax
    scale[scale == 0] = 1.0
    x = c / scale
    q = np.clip(np.round(x), -qmax, qmax) * scale
    # a code halfway between two (|x - round(x)| = 0.5 within float32's
    # precision) may round either way in npuc's float32 arithmetic: one step
    tie = np.abs(np.abs(x - np.trunc(x)) - 0.5) < 1e-5
    step = np.broadcast_to(scale, c.shape)
    out = []
    for v in (q, tie, step):
        if lay == "doi":
            out.append(v.reshape(a.shape))
        else:
            out.append(np.moveaxis(v.reshape((a.shape[ax],) + tuple(np.delete(a.shape, ax))), 0, ax))
    return out


def fq_close(a, b, lay, ax):
    """b is a's fake quantization along ax: equal to NumPy's but for ties."""
    want, tie, step = fq_ref(a, lay, ax)
    off = ~np.isclose(b, want, rtol=1e-5, atol=1e-7)
    return not (off & ~(tie & (np.abs(b - want) <= step * 1.001))).any()


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
                if n.op_type == "Constant":  # values in any field: the writer may store them as raw_data
                    for fld in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
                        a.t.ClearField(fld)
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
    exp = expected(mo)
    onnx.checker.check_model(out)
    mn, wn = load(out)
    assert graph_shape(mo) == graph_shape(mn), "the graph changed"
    assert sorted(wo) == sorted(wn), (sorted(wo), sorted(wn))
    unchecked = []
    for k in wo:
        a, b = wo[k], wn[k]
        assert a.dtype == b.dtype and a.shape == b.shape, (k, a.dtype, b.dtype, a.shape, b.shape)
        # lstm.B is the LSTM's bias input (ONNX's B [dirs, 8*hidden]): a bias
        # is never pruned or quantized (issue 31 item 3), whatever its rank.
        kernel = k in exp and exp[k][1] != "none" and exp[k][0] != "bias"
        if mode == "fakequant" and k not in exp and a.ndim >= 2 and a.dtype.kind == "f":
            unchecked.append(k)  # no op slot here decides it: npuc's name rules do, not checked
        elif mode == "fakequant" and not kernel:  # biases, BN vectors, anything no kernel slot reads
            assert np.array_equal(a, b), k
        elif mode == "equal" or a.ndim < 2 or a.dtype.kind not in "f" or k == "lstm.B":
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
            assert fq_close(a, b, exp[k][1], exp[k][2]), (k, exp[k], np.abs(b - fq_ref(a, exp[k][1], exp[k][2])[0]).max())
            if a.ndim == 2 and a.shape[0] > 1 and a.shape[1] > 1:  # the axis matters: the other one differs
                assert not fq_close(a, b, "oi" if exp[k][2] == 1 else "io", 1 - exp[k][2]), \
                    (k, "quantized along the other axis")
            assert not np.array_equal(a, b), k
    print("ok", out, len(wo), "weights" + (f" ({len(unchecked)} matrices no op slot decides, not checked)"
                                         if unchecked else ""))


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
    elif kind in ("cycle", "twice"):  # the graph itself: a -> b -> a, or two producers of one value
        w = numpy_helper.from_array(np.ones((4, 4), dtype=np.float32), "w")
        if kind == "cycle":
            nodes = [helper.make_node("MatMul", ["b", "w"], ["a"], name="n1"),
                     helper.make_node("Relu", ["a"], ["b"], name="n2"),
                     helper.make_node("Identity", ["a"], ["y"], name="n3")]
        else:
            nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="n1"),
                     helper.make_node("Relu", ["x"], ["y"], name="n2")]
        g = helper.make_graph(nodes, "g", [X], [X], [w])
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
    elif cmd == "roles":
        roles(sys.argv[2], sys.argv[3])
    elif cmd == "pruned":
        compare(sys.argv[2], sys.argv[3], cmd, float(sys.argv[4]))
    elif cmd == "feeds":
        def text_image(rng, dims, norm):
            """A synthetic page [1, 3, H, W]: a light, slightly noisy background
            with dark word-like bars on lines 18 pixels apart (what an OCR model
            is made for: on N(0, 1) noise PP-OCRv4 det's map is ~0 everywhere),
            normalized as PaddleOCR does: "imagenet" (x/255 - mean) / std (det),
            "pm1" (x/255 - 0.5) / 0.5 (rec, cls)."""
            _, c, h, w = dims
            img = np.full((h, w, c), 235.0) + rng.normal(0, 4, (h, w, c))
            for r in range(max(2, (h % 18) // 2 + 4), h - 10, 18):
                x = 6
                while x < w - 10:
                    ln = int(rng.integers(4, 14))
                    img[r:r + 9, x:x + ln, :] = rng.uniform(10, 60)
                    x += ln + int(rng.integers(2, 6))
            img = np.clip(img, 0, 255) / 255.0
            if norm == "imagenet":
                img = (img - np.array([0.485, 0.456, 0.406])) / np.array([0.229, 0.224, 0.225])
            else:
                img = (img - 0.5) / 0.5
            return img.transpose(2, 0, 1)[None].astype(np.float32)

        # Seeded inputs for every graph input: floats N(0, 1), bools true, int64 in 0..3.
        # Optional argv[4]: JSON {input: dims list, {"dims": list, "std": s}
        # (N(0, s^2) values), {"dims": list, "image": "imagenet" | "pm1"} (a
        # synthetic page of text, text_image), or a number that fills it
        # (Silero's sample rate)} for inputs with symbolic dims.
        m = onnx.load(sys.argv[2], load_external_data=False)
        over = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
        rng = np.random.default_rng(3)
        feeds = {}
        inits = {t.name for t in m.graph.initializer}
        for i in m.graph.input:
            if i.name in inits:
                continue
            t = i.type.tensor_type
            dims = [d.dim_value if d.dim_value > 0 else 1 for d in t.shape.dim]
            std, image = 1.0, None
            if isinstance(over.get(i.name), dict) and "image" in over[i.name]:  # {"dims": [1, 3, H, W], "image": norm}
                dims, image = over[i.name]["dims"], over[i.name]["image"]
            elif isinstance(over.get(i.name), dict):  # {"dims": [...], "std": s}: audio is quieter than N(0, 1)
                dims, std = over[i.name]["dims"], over[i.name]["std"]
            elif isinstance(over.get(i.name), list):
                dims = over[i.name]
            n = int(np.prod(dims)) if dims else 1
            if isinstance(over.get(i.name), (int, float)):
                kind = "int64" if t.elem_type == onnx.TensorProto.INT64 else "float32"
                feeds[i.name] = {"type": kind, "dims": dims, "data": [over[i.name]] * n}
            elif t.elem_type == onnx.TensorProto.BOOL:
                feeds[i.name] = {"type": "bool", "dims": dims, "data": [1] * n}
            elif t.elem_type == onnx.TensorProto.INT64:  # indices: 0..3 fit every table here
                feeds[i.name] = {"type": "int64", "dims": dims, "data": rng.integers(0, 4, n).tolist()}
            elif image:
                feeds[i.name] = {"type": "float32", "dims": dims, "data": text_image(rng, dims, image).ravel().tolist()}
            else:
                feeds[i.name] = {"type": "float32", "dims": dims, "data": (std * rng.standard_normal(n)).tolist()}
        with open(sys.argv[3], "w") as f:
            json.dump(feeds, f)
    elif cmd == "bad":
        bad(sys.argv[2], sys.argv[3])
    else:
        sys.exit("unknown command " + cmd)
