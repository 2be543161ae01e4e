#!/usr/bin/env python3
"""qdq_check.py: checks npuc's quantized ONNX outputs (tests/cli/onnx_qdq.sh)
with python3-onnx and NumPy only, never with npuc's own reading.

  qdq ORIG OUT FORM BITS SYM GROUP NAME=AXIS...
      For each NAME: the node producing NAME in OUT (any graph) is the FORM
      npuc said it wrote (dq: DequantizeLinear; mul: DequantizeLinear with
      scale 1 then [Sub] Mul; cast: Cast then [Sub] Mul; nbits:
      com.microsoft::MatMulNBits replaces the MatMuls reading NAME), NAME
      is no initializer any more, and the integer codes, scales and zero
      points equal those of a NumPy reference quantizer (docs/quantization.md:
      minmax, float32 scale arithmetic, round half to even) of ORIG's NAME
      along AXIS (the axis the scales vary along), per channel, or GROUP
      values a group along the one other axis of size > 1 (GROUP 0: per
      channel; AXIS -1: per tensor).  SYM 1: symmetric, zero point 0 of the
      codes' type (INT8 / INT4); 0: UINT8 / UINT4 with zero points.  Every
      other node of ORIG is in OUT with the same inputs (except MatMuls
      replaced by MatMulNBits).
  deq OUT DECOMP NAME...
      DECOMP's float initializer NAME equals, bit for bit, OUT's integer
      codes dequantized with NumPy ((q - zp) * scale in float32).
  deqx ORIG OUT DECOMP NAME...
      `npuc decompress OUT -o DECOMP` read every form npuc writes: each
      NAME is a float initializer of DECOMP equal, bit for bit and in dtype
      and shape, to NAME's value in OUT computed here from OUT's constants
      by the ONNX operator definitions (DequantizeLinear per tensor, per
      axis and blocked, INT4/UINT4 unpacked low nibble first; Cast, Sub,
      Mul with NumPy broadcasting in float32, Reshape; a MatMulNBits
      reading NAME's MatMul by onnxruntime's contrib definition
      W[k, n] = (q - zp) * scale, zp 8 when absent); no DequantizeLinear or
      MatMulNBits is left; DECOMP's nodes are ORIG's (attributes moved to
      inputs by an opset raise aside) and its weights ORIG's; onnx.checker
      passes (a model above onnx 1.12's IR version / opset is checked with
      those lowered to what it knows, said in the output).
  opset OUT N
      OUT imports the default opset N.
INT4/UINT4 tensors (opset 21) are unknown to onnx 1.12: their data_type
reads as 0 and their raw_data is unpacked here, low nibble first.
"""
import sys

import numpy as np
import onnx
from onnx import numpy_helper

FLT_MIN = np.float32(1.1754943508222875e-38)


def graphs(g):
    yield g
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from graphs(a.g)
            for s in a.graphs:
                yield from graphs(s)


def weights(m):
    out = {}
    for g in graphs(m.graph):
        for t in g.initializer:
            out[t.name] = t
        for n in g.node:
            if n.op_type == "Constant":
                for a in n.attribute:
                    if a.name == "value":
                        out[n.output[0]] = a.t
    return out


def producer(m, name):
    for g in graphs(m.graph):
        for n in g.node:
            if name in n.output:
                return g, n
    return None, None


def attr(n, key, default=None):
    for a in n.attribute:
        if a.name == key:
            return onnx.helper.get_attribute_value(a)
    return default


def ints(t, signed, bits4):
    """An integer initializer's values (INT4/UINT4 unpacked)."""
    dims = list(t.dims)
    if t.data_type in (0, 21, 22) or bits4:
        raw = np.frombuffer(t.raw_data, np.uint8)
        n = int(np.prod(dims)) if dims else 1
        v = np.empty(2 * raw.size, np.int16)
        v[0::2], v[1::2] = raw & 15, raw >> 4
        v = v[:n]
        if signed:
            v = np.where(v >= 8, v - 16, v)
        return v.reshape(dims).astype(np.int32)
    return numpy_helper.to_array(t).astype(np.int32)


def ref_quant(w, bits, sym, axis, group):
    """codes (w's shape), scales and zero points per group: arrays [C, G]."""
    w = w.astype(np.float32)
    if axis < 0:
        x = w.reshape(1, 1, -1)
    else:
        x = w.reshape(int(np.prod(w.shape[:axis], dtype=np.int64)), w.shape[axis], -1)
    outer, C, inner = x.shape
    seq = x.transpose(1, 0, 2).reshape(C, outer * inner)  # channel c: o*inner + k
    L = seq.shape[1]
    G = group if group > 0 else L
    ng = (L + G - 1) // G
    codes = np.zeros_like(seq, dtype=np.int32)
    scales = np.zeros((C, ng), np.float32)
    zps = np.zeros((C, ng), np.int32)
    for c in range(C):
        for g in range(ng):
            v = seq[c, g * G:(g + 1) * G]
            lo, hi = np.float32(v.min()), np.float32(v.max())
            if sym:
                qmax = 2 ** (bits - 1) - 1
                s = np.float32(max(abs(lo), abs(hi))) / np.float32(qmax)
                s = max(s, FLT_MIN)
                z, qlo = 0, -qmax
            else:
                qmax = 2 ** bits - 1
                lo64, hi64 = min(float(lo), 0.0), max(float(hi), 0.0)
                s = np.float32((hi64 - lo64) / qmax)
                s = max(s, FLT_MIN)
                z = int(np.clip(np.rint(np.float32(-lo64) / s), 0, qmax))
                qlo = 0
            inv = np.float32(1) / s
            q = np.clip(np.rint(np.clip(v * inv, -2.0 ** 24, 2.0 ** 24)) + z, qlo, qmax)
            codes[c, g * G:(g + 1) * G] = q.astype(np.int32)
            scales[c, g], zps[c, g] = s, z
    codes = codes.reshape(C, outer, inner).transpose(1, 0, 2).reshape(w.shape)
    return codes, scales, zps


def expand(a, shape, axis, baxis, group):
    """Per-group values [C, G] to the weight's shape."""
    if axis < 0:
        return np.broadcast_to(a.reshape(()), shape)
    C, G = a.shape
    idx = [slice(None)] * len(shape)
    out = np.empty(shape, a.dtype)
    for c in range(C):
        for g in range(G):
            idx = [slice(None)] * len(shape)
            idx[axis] = c
            if group:
                idx[baxis] = slice(g * group, (g + 1) * group)
            out[tuple(idx)] = a[c, g]
    return out


def other_axis(shape, axis):
    ax = [k for k in range(len(shape)) if k != axis and shape[k] > 1]
    if len(ax) > 1:
        return None  # blocked on a 2-D view (a Reshape follows)
    return ax[0] if ax else (1 if axis == 0 else 0)


# Attributes that became inputs (1, 2, ...) when the opset was raised.
MOVED = {"Clip": ["min", "max"], "Slice": ["starts", "ends", "axes"], "TopK": ["k"], "Pad": ["pads", "value"],
         "Dropout": ["ratio"], "Squeeze": ["axes"], "Unsqueeze": ["axes"], "Split": ["split"],
         "ReduceSum": ["axes"], "ReduceMean": ["axes"], "ReduceMax": ["axes"], "ReduceMin": ["axes"],
         "ReduceProd": ["axes"], "ReduceL1": ["axes"], "ReduceL2": ["axes"], "ReduceLogSum": ["axes"],
         "ReduceLogSumExp": ["axes"], "ReduceSumSquare": ["axes"]}


def check_moved(mo, mq):
    """Nodes of MOVED: same data input and outputs; each moved attribute is
    now the input at its position, a Constant holding the same value."""
    consts = {n.output[0]: numpy_helper.to_array(attr(n, "value")) for g in graphs(mq.graph) for n in g.node
              if n.op_type == "Constant"}
    outs = {tuple(n.output): n for g in graphs(mq.graph) for n in g.node}
    for g in graphs(mo.graph):
        for n in g.node:
            if n.op_type not in MOVED:
                continue
            m = outs[tuple(n.output)]
            assert m.op_type == n.op_type and m.input[0] == n.input[0], (n, m)
            had = [a.name for a in n.attribute if a.name in MOVED[n.op_type]]
            if not had or list(m.input[1:]) == list(n.input[1:]):
                continue
            for k, key in enumerate(MOVED[n.op_type], 1):
                if key in had:
                    want = np.array(attr(n, key))
                    got = consts[m.input[k]]
                    assert np.array_equal(got.reshape(-1), want.reshape(-1)), (n.op_type, key, got, want)
                    assert attr(m, key) is None, (n.op_type, key)
                else:
                    assert len(m.input) <= k or m.input[k] == "", (n.op_type, key)


def check_qdq(orig, out, form, bits, sym, group, specs):
    mo, mq = onnx.load(orig), onnx.load(out)
    wo, wq = weights(mo), weights(mq)
    for spec in specs:
        name, axis = spec.rsplit("=", 1)
        axis = int(axis)
        w = numpy_helper.to_array(wo[name]).astype(np.float32)
        codes, scales, zps = ref_quant(w, bits, sym, axis, group)
        assert name not in wq, f"{name}: still an initializer"
        baxis = other_axis(w.shape, axis) if group else None
        if form == "nbits":
            nodes = [n for g in graphs(mq.graph) for n in g.node if n.op_type == "MatMulNBits"]
            mine = [n for n in nodes if n.domain == "com.microsoft" and any(
                t.name == n.input[1] for t in [wq.get(n.input[1])] if t is not None)]
            assert mine, f"{name}: no MatMulNBits"
            n = mine[0]
            K, N = w.shape
            assert (attr(n, "K"), attr(n, "N"), attr(n, "bits"), attr(n, "block_size")) == (K, N, 4, group), n
            nb = (K + group - 1) // group
            B = numpy_helper.to_array(wq[n.input[1]])
            assert B.shape == (N, nb, group // 2) and B.dtype == np.uint8, B.shape
            q = np.empty((N, nb, group), np.int32)
            q[:, :, 0::2], q[:, :, 1::2] = B & 15, B >> 4
            q = q.reshape(N, nb * group)[:, :K].T  # [K, N]
            s = numpy_helper.to_array(wq[n.input[2]]).reshape(N, nb)
            if sym:
                assert len(n.input) < 4 or not n.input[3], "symmetric: no zero points (default 8)"
                z = np.full((N, nb), 8)
            else:
                zr = numpy_helper.to_array(wq[n.input[3]]).reshape(N, -1)
                z = np.empty((N, zr.shape[1] * 2), np.int32)
                z[:, 0::2], z[:, 1::2] = zr & 15, zr >> 4
                z = z[:, :nb]
            want = codes + (8 if sym else 0)
            assert np.array_equal(q, want), f"{name}: MatMulNBits codes differ"
            assert np.array_equal(s, scales), f"{name}: scales differ"
            assert np.array_equal(z, zps + (8 if sym else 0)), f"{name}: zero points differ"
            continue
        g, n = producer(mq, name)
        assert n is not None, f"{name}: nothing produces it"
        if n.op_type == "Cast" and form != "cast":  # back to the original float type
            g, n = producer(mq, n.input[0])
        if n.op_type == "Reshape":  # blocks of a contiguous sequence: a 2-D view
            assert group and list(numpy_helper.to_array(wq[n.input[1]])) == list(w.shape), name
            outer, inner = int(np.prod(w.shape[:axis])), int(np.prod(w.shape[axis + 1:]))
            assert outer == 1 or inner == 1, w.shape
            w = w.reshape(w.shape[axis], inner) if outer == 1 else w.reshape(outer, w.shape[axis])
            axis = 0 if outer == 1 else 1
            codes, scales, zps = ref_quant(w, bits, sym, axis, group)
            baxis = 1 - axis
            g, n = producer(mq, n.input[0])
        if form == "dq":
            assert n.op_type == "DequantizeLinear", n.op_type
            q = ints(wq[n.input[0]], sym, bits == 4)
            s = numpy_helper.to_array(wq[n.input[1]])
            z = ints(wq[n.input[2]], sym, bits == 4)
            assert q.shape == w.shape, (q.shape, w.shape)
            if group:
                assert attr(n, "axis") == baxis and attr(n, "block_size") == group, (attr(n, "axis"), baxis)
                sc = np.moveaxis(scales, 0, axis) if axis > baxis else scales  # [.., C, .., G, ..]
                shp = [1] * w.ndim
                shp[axis], shp[baxis] = w.shape[axis], scales.shape[1]
                assert s.shape == tuple(shp), (s.shape, shp)
                assert np.array_equal(s.reshape(-1), (scales.T if axis > baxis else scales).reshape(-1)), name
                assert np.array_equal(z.reshape(-1), (zps.T if axis > baxis else zps).reshape(-1)), name
                del sc
            elif axis >= 0:
                assert attr(n, "axis", 1) == axis, (name, attr(n, "axis"), axis)
                assert np.array_equal(s, scales[:, 0]) and np.array_equal(z, zps[:, 0]), name
            else:
                assert s.shape == () and np.array_equal(s, scales[0, 0]) and z.reshape(()) == zps[0, 0], name
            if sym:
                t = wq[n.input[0]].data_type
                assert t in ((0, 22) if bits == 4 else (3,)), f"{name}: codes of type {t}"
            assert np.array_equal(q, codes), f"{name}: codes differ"
        else:
            assert n.op_type == "Mul", n.op_type
            s = numpy_helper.to_array(wq[n.input[1]])
            assert np.array_equal(s.reshape(-1), scales[:, 0]), name
            x = n.input[0]
            _, p = producer(mq, x)
            if not sym:
                assert p.op_type == "Sub", p.op_type
                zf = numpy_helper.to_array(wq[p.input[1]])
                assert np.array_equal(zf.reshape(-1), zps[:, 0].astype(np.float32)), name
                _, p = producer(mq, p.input[0])
            if form == "mul":
                assert p.op_type == "DequantizeLinear", p.op_type
                assert numpy_helper.to_array(wq[p.input[1]]) == 1 and ints(wq[p.input[2]], sym, False) == 0
                assert attr(p, "axis") is None
            else:
                assert p.op_type == "Cast" and attr(p, "to") == onnx.TensorProto.FLOAT, p.op_type
            q = ints(wq[p.input[0]], sym, False)
            assert np.array_equal(q, codes), f"{name}: codes differ"
    # Every other node is still there, reading the same inputs.
    mine = {spec.rsplit("=", 1)[0] for spec in specs}

    def sig(m, drop):  # (a Reshape giving a checked weight its shape is npuc's)
        return sorted((n.op_type, tuple(n.input), tuple(n.output)) for g in graphs(m.graph) for n in g.node
                      if n.op_type not in drop and not (n.op_type == "Reshape" and n.output[0] in mine))
    drop = {"Constant", "DequantizeLinear", "Mul", "Sub", "Cast", "MatMul", "MatMulNBits"} | set(MOVED)
    a, b = sig(mo, drop), sig(mq, drop)
    assert a == b, (a, b)
    check_moved(mo, mq)
    print(f"{out}: {len(specs)} weights as {form} equal to NumPy's quantization")


def dequant(mq, wq, name):
    """NAME's float value from OUT's integer form, in NumPy."""
    g, n = producer(mq, name)
    if n.op_type == "Reshape":
        return dequant(mq, wq, n.input[0]).reshape(numpy_helper.to_array(wq[n.input[1]]))
    if n.op_type == "DequantizeLinear":
        t = wq[n.input[0]]
        signed = t.data_type in (3, 22) or (t.data_type == 0 and wq[n.input[2]].data_type == 0 and True)
        q = ints(t, t.data_type != 2 and t.data_type != 21, t.data_type in (0, 21, 22))
        s = numpy_helper.to_array(wq[n.input[1]])
        z = ints(wq[n.input[2]], t.data_type != 2 and t.data_type != 21, t.data_type in (0, 21, 22))
        del signed
        axis, bs = attr(n, "axis", 1), attr(n, "block_size", 0)
        if s.ndim == 0:
            return ((q - z).astype(np.float32) * s).astype(np.float32)
        if bs:
            s = np.repeat(s, bs, axis=axis).take(range(q.shape[axis]), axis=axis)
            z = np.repeat(z, bs, axis=axis).take(range(q.shape[axis]), axis=axis)
            return ((q - z).astype(np.float32) * s).astype(np.float32)
        shp = [1] * q.ndim
        shp[axis] = -1
        return ((q - z.reshape(shp)).astype(np.float32) * s.reshape(shp)).astype(np.float32)
    raise AssertionError(f"{name}: produced by {n.op_type}")


def data_type(t):
    """t's data_type, read from its bytes when onnx 1.12 does not know it
    (INT4 22, UINT4 21 arrive as 0 with the field among unknown fields)."""
    if t.data_type:
        return t.data_type
    b, i = t.SerializeToString(), 0
    while i < len(b):
        key, i = varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(b, i)
            if num == 2:
                return v
        elif wt == 2:
            n, i = varint(b, i)
            i += n
        elif wt == 1:
            i += 8
        elif wt == 5:
            i += 4
        else:
            raise AssertionError(f"{t.name}: wire type {wt}")
    return 0


def varint(b, i):
    v = s = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 127) << s
        s += 7
        if c < 128:
            return v, i


INTS = {2: (np.uint8, 8), 3: (np.int8, 8), 4: (np.uint16, 16), 5: (np.int16, 16), 21: (None, 4), 22: (None, 4)}


def spec_ints(t):
    dt = data_type(t)
    if dt in (21, 22):
        return ints(t, dt == 22, True)
    assert dt in INTS, f"{t.name}: data type {dt}"
    return numpy_helper.to_array(t).astype(np.int32)


def spec_value(mq, wq, name):
    """NAME's value in OUT by the ONNX operator definitions, from OUT's constants."""
    g, n = producer(mq, name)
    if n is None or n.op_type == "Constant":
        return numpy_helper.to_array(wq[name])
    if n.op_type == "Cast":
        to = {1: np.float32, 10: np.float16, 11: np.float64}[attr(n, "to")]
        t = wq.get(n.input[0])
        x = spec_ints(t) if t is not None else spec_value(mq, wq, n.input[0])
        return x.astype(to)
    if n.op_type == "Reshape":
        return spec_value(mq, wq, n.input[0]).reshape(numpy_helper.to_array(wq[n.input[1]]))
    if n.op_type in ("Mul", "Sub"):
        a, b = spec_value(mq, wq, n.input[0]), spec_value(mq, wq, n.input[1])
        assert a.dtype == np.float32 and b.dtype == np.float32, (a.dtype, b.dtype)
        return a * b if n.op_type == "Mul" else a - b
    if n.op_type == "DequantizeLinear":
        q = spec_ints(wq[n.input[0]])
        s = numpy_helper.to_array(wq[n.input[1]])
        assert s.dtype == np.float32, s.dtype
        z = spec_ints(wq[n.input[2]]) if len(n.input) > 2 and n.input[2] else np.zeros(s.shape, np.int32)
        axis, bs = attr(n, "axis", 1), attr(n, "block_size", 0)
        axis = axis + q.ndim if axis < 0 else axis
        if s.size == 1 and not bs:  # per tensor
            s, z = s.reshape(()), z.reshape(())
        elif bs:  # blocked: index i_axis // block_size
            idx = np.arange(q.shape[axis]) // bs
            s, z = np.take(s, idx, axis=axis), np.take(z, idx, axis=axis)
        else:  # per axis
            shp = [1] * q.ndim
            shp[axis] = -1
            s, z = s.reshape(shp), z.reshape(shp)
        return (q.astype(np.float32) - z.astype(np.float32)) * s
    raise AssertionError(f"{name}: produced by {n.op_type}")


def nbits_value(mq, wq, n):
    """The [K, N] float weight a com.microsoft::MatMulNBits node reads."""
    K, N, bs = attr(n, "K"), attr(n, "N"), attr(n, "block_size")
    assert attr(n, "bits", 4) == 4
    nb = (K + bs - 1) // bs
    B = numpy_helper.to_array(wq[n.input[1]]).reshape(N, nb, bs // 2)
    q = np.empty((N, nb, bs), np.int32)
    q[:, :, 0::2], q[:, :, 1::2] = B & 15, B >> 4
    s = numpy_helper.to_array(wq[n.input[2]]).reshape(N, nb)
    if len(n.input) > 3 and n.input[3]:
        zr = numpy_helper.to_array(wq[n.input[3]]).reshape(N, -1)
        z = np.empty((N, zr.shape[1] * 2), np.int32)
        z[:, 0::2], z[:, 1::2] = zr & 15, zr >> 4
        z = z[:, :nb]
    else:
        z = np.full((N, nb), 8, np.int32)
    w = (q - z[:, :, None]).astype(np.float32) * s[:, :, None]  # [N, nb, bs]
    return w.reshape(N, nb * bs)[:, :K].T.copy()


def check_deqx(orig, out, dec, names):
    mo, mq, md = onnx.load(orig), onnx.load(out), onnx.load(dec)
    wo, wq, wd = weights(mo), weights(mq), weights(md)
    inits = {t.name: t for g in graphs(md.graph) for t in g.initializer}
    for name in names:
        assert name in inits, f"{name}: not an initializer of {dec}"
        got = numpy_helper.to_array(inits[name])
        mm = [n for g in graphs(md.graph) for n in g.node if n.op_type == "MatMul" and n.input[1] == name]
        _, p = producer(mq, mm[0].output[0]) if mm else (None, None)
        if p is not None and p.op_type == "MatMulNBits":
            assert p.domain == "com.microsoft" and p.input[0] == mm[0].input[0], p
            want = nbits_value(mq, wq, p)
        else:
            want = spec_value(mq, wq, name)
        assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, got.shape, want.dtype, want.shape)
        u = {2: np.uint16, 4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
        assert np.array_equal(got.view(u), want.view(u)), f"{name}: not the dequantized values"
    left = [n.op_type for g in graphs(md.graph) for n in g.node if n.op_type in ("DequantizeLinear", "MatMulNBits")]
    assert not left, f"{dec}: {left} left"
    extra = set(wd) - set(wo) - {n.output[0] for g in graphs(md.graph) for n in g.node if n.op_type == "Constant"}
    assert not extra and set(wo) <= set(wd), (extra, set(wo) - set(wd))

    def sig(m):
        return sorted((n.op_type, tuple(n.input), tuple(n.output)) for g in graphs(m.graph) for n in g.node
                      if n.op_type != "Constant" and n.op_type not in MOVED)
    assert sig(mo) == sig(md), (sig(mo), sig(md))
    check_moved(mo, md)
    note = ""
    if md.ir_version > onnx.IR_VERSION or any(o.version > onnx.defs.onnx_opset_version()
                                              for o in md.opset_import if o.domain in ("", "ai.onnx")):
        md.ir_version = min(md.ir_version, onnx.IR_VERSION)
        for o in md.opset_import:
            if o.domain in ("", "ai.onnx"):
                o.version = min(o.version, onnx.defs.onnx_opset_version())
        note = f" (checked as IR {md.ir_version}, opset {onnx.defs.onnx_opset_version()}: onnx {onnx.__version__})"
    onnx.checker.check_model(md)
    print(f"{dec}: {len(names)} weights equal the ONNX dequantization bit for bit; no DequantizeLinear/MatMulNBits; "
          f"ORIG's nodes; onnx.checker passes{note}")


def main():
    cmd = sys.argv[1]
    if cmd == "qdq":
        orig, out, form, bits, sym, group = sys.argv[2:8]
        check_qdq(orig, out, form, int(bits), sym == "1", int(group), sys.argv[8:])
    elif cmd == "deq":
        mq, md = onnx.load(sys.argv[2]), onnx.load(sys.argv[3])
        wq, wd = weights(mq), weights(md)
        for name in sys.argv[4:]:
            want = dequant(mq, wq, name)
            got = numpy_helper.to_array(wd[name])
            assert got.dtype == np.float32 and got.shape == want.shape, (got.dtype, got.shape, want.shape)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), f"{name}: not the dequantized values"
        print(f"{sys.argv[3]}: {len(sys.argv) - 4} weights equal the dequantized codes bit for bit")
    elif cmd == "deqx":
        check_deqx(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
    elif cmd == "opset":
        m = onnx.load(sys.argv[2], load_external_data=False)
        v = [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")]
        assert v == [int(sys.argv[3])], v
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
