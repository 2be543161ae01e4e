"""lowrank_check.py - checks of npuc lowrank's ONNX output (tests/cli/onnx_lowrank.sh).

  lowrank_check.py models OUTDIR
      test models of its own: Gemm with alpha/beta/transA and one without C,
      a weight two MatMuls read, Gemm at opset 9, a value named like a split's,
      Convs (stride 2 + asymmetric pads + bias, dilation 2 without bias, a
      depthwise one), a Conv1d with auto_pad SAME_UPPER, a grouped Conv
  lowrank_check.py check ORIG OUT RANK SPLIT FEEDS ORIG_ORT OUT_ORT
      SPLIT: comma-separated weights expected split (the others' nodes
      unchanged).  Checks, by python3-onnx and NumPy alone:
      - onnx.checker (full_check) accepts OUT; its inputs and outputs are ORIG's;
      - each split weight is gone and its MatMul/Gemm/Conv is two nodes: the first reads
        the node's input and W.lr_b (transA, alpha, transB kept, no C, no beta) and
        makes a new value, the second reads it with W.lr_a and C (transB, beta kept)
        and makes the node's output; factor shapes [K,r]/[r,N] (transB 0) or
        [r,K]/[N,r] (transB 1); a Conv's first node keeps every attribute and reads
        W.lr_b [r,I,k..], the second none, W.lr_a [O,r,1..] and the bias; every
        other node is ORIG's;
      - NumPy evaluating OUT from the factors read out of the file equals
        onnxruntime's outputs of OUT (OUT_ORT) within 1e-5 relative;
      - the relative output error of OUT against ORIG (both onnxruntime) equals the
        one NumPy's own truncated SVD at rank RANK gives (within 1e-5 relative), and
        its outputs are those of ORIG with NumPy's rank-RANK weights (1e-5 relative);
        a Conv weight [O,I,k..] is truncated as its [O, I*k..] matrix.
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qdq_check import graphs  # noqa: E402  (every graph, subgraphs included)


def f32(*shape):
    return np.random.default_rng(sum(shape) + 7 * len(shape)).standard_normal(shape).astype(np.float32)


def vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def save(nodes, inits, inputs, outputs, path, opset=13):
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="npuc-test")
    m.ir_version = 7 if opset >= 13 else 4
    onnx.checker.check_model(m)
    onnx.save(m, path)


def models(d):
    # alpha/beta/transA on a transB=0 Gemm with C; a transB=1 Gemm without C.
    inits = [numpy_helper.from_array(f32(24, 20), "ab.weight"), numpy_helper.from_array(f32(20), "ab.bias"),
             numpy_helper.from_array(f32(12, 20), "nc.weight")]
    nodes = [helper.make_node("Gemm", ["x", "ab.weight", "ab.bias"], ["h"], name="gemm_ab", alpha=0.5, beta=2.0,
                              transA=1),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "nc.weight"], ["y"], name="gemm_nc", transB=1, alpha=1.5)]
    save(nodes, inits, [vi("x", [24, 3])], [vi("y", [3, 12])], f"{d}/gemm_ab.onnx")
    # one weight, two readers
    nodes = [helper.make_node("MatMul", ["x", "sh.weight"], ["a"]),
             helper.make_node("MatMul", ["x", "sh.weight"], ["b"]), helper.make_node("Add", ["a", "b"], ["y"])]
    save(nodes, [numpy_helper.from_array(f32(16, 16), "sh.weight")], [vi("x", [2, 16])], [vi("y", [2, 16])],
         f"{d}/shared.onnx")
    # Gemm at opset 9: C required
    nodes = [helper.make_node("Gemm", ["x", "g9.weight", "g9.bias"], ["y"], transB=1)]
    save(nodes, [numpy_helper.from_array(f32(16, 32), "g9.weight"), numpy_helper.from_array(f32(16), "g9.bias")],
         [vi("x", [2, 32])], [vi("y", [2, 16])], f"{d}/gemm9.onnx", opset=9)
    # a value already named like the split's new value: the name gets "_1"
    nodes = [helper.make_node("MatMul", ["x", "w"], ["w.lr_mid"]), helper.make_node("Relu", ["w.lr_mid"], ["y"])]
    save(nodes, [numpy_helper.from_array(f32(32, 24), "w")], [vi("x", [2, 32])], [vi("y", [2, 24])],
         f"{d}/clash.onnx")
    # Conv 3x3 stride 2 with asymmetric pads and a bias; Conv 3x3 dilation 2
    # without bias (kernel_shape given); a depthwise Conv (kept dense)
    inits = [numpy_helper.from_array(f32(8, 4, 3, 3), "c1.weight"), numpy_helper.from_array(f32(8), "c1.bias"),
             numpy_helper.from_array(f32(6, 8, 3, 3), "c2.weight"),
             numpy_helper.from_array(f32(6, 1, 3, 3), "dw.weight")]
    nodes = [helper.make_node("Conv", ["x", "c1.weight", "c1.bias"], ["h"], name="c1", strides=[2, 2],
                              pads=[1, 0, 0, 1]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Conv", ["r", "c2.weight"], ["d"], name="c2", dilations=[2, 2], pads=[2, 2, 2, 2],
                              kernel_shape=[3, 3]),
             helper.make_node("Conv", ["d", "dw.weight"], ["y"], name="dw", group=6, pads=[1, 1, 1, 1])]
    save(nodes, inits, [vi("x", [1, 4, 11, 11])], [vi("y", [1, 6, 5, 5])], f"{d}/conv_s2.onnx")
    # Conv1d, kernel 4, auto_pad SAME_UPPER (pads 1 and 2), bias
    nodes = [helper.make_node("Conv", ["x", "k1.weight", "k1.bias"], ["y"], name="k1", auto_pad="SAME_UPPER")]
    save(nodes, [numpy_helper.from_array(f32(8, 5, 4), "k1.weight"), numpy_helper.from_array(f32(8), "k1.bias")],
         [vi("x", [2, 5, 16])], [vi("y", [2, 8, 16])], f"{d}/conv1d.onnx")
    # a grouped Conv (group 2, not depthwise) before a 1x1 Conv
    inits = [numpy_helper.from_array(f32(8, 2, 3, 3), "g.weight"), numpy_helper.from_array(f32(6, 8, 1, 1), "p.weight")]
    nodes = [helper.make_node("Conv", ["x", "g.weight"], ["h"], name="g", group=2, pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["h", "p.weight"], ["y"], name="p")]
    save(nodes, inits, [vi("x", [1, 4, 6, 6])], [vi("y", [1, 6, 6, 6])], f"{d}/grouped.onnx")


def attrs(n):
    return {a.name: helper.get_attribute_value(a) for a in n.attribute}


def tensors(m):
    t = {}
    for g in graphs(m.graph):
        for i in g.initializer:
            t[i.name] = numpy_helper.to_array(i)
        for n in g.node:
            if n.op_type == "Constant":
                t[n.output[0]] = numpy_helper.to_array(attrs(n)["value"])
    return t


def conv(x, w, b, a):
    """ONNX Conv in float64: pads or auto_pad, strides, dilations, group."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    nsp = w.ndim - 2
    ks = w.shape[2:]
    st, dil, group = a.get("strides", [1] * nsp), a.get("dilations", [1] * nsp), a.get("group", 1)
    ap = a.get("auto_pad", b"NOTSET")
    ap = ap.decode() if isinstance(ap, bytes) else ap
    if ap in ("SAME_UPPER", "SAME_LOWER"):
        lo, hi = [], []
        for i in range(nsp):
            out = -(-x.shape[2 + i] // st[i])
            tot = max(0, (out - 1) * st[i] + dil[i] * (ks[i] - 1) + 1 - x.shape[2 + i])
            lo.append(tot // 2 if ap == "SAME_UPPER" else tot - tot // 2)
            hi.append(tot - lo[-1])
    else:
        p = a.get("pads", [0] * 2 * nsp)
        lo, hi = p[:nsp], p[nsp:]
    x = np.pad(x, [(0, 0), (0, 0)] + list(zip(lo, hi)))
    cg, og = x.shape[1] // group, w.shape[0] // group
    osz = [(x.shape[2 + i] - dil[i] * (ks[i] - 1) - 1) // st[i] + 1 for i in range(nsp)]
    y = np.zeros([x.shape[0], w.shape[0]] + osz)
    for kx in np.ndindex(*ks):
        sl = tuple(slice(kx[i] * dil[i], kx[i] * dil[i] + (osz[i] - 1) * st[i] + 1, st[i]) for i in range(nsp))
        patch = x[(slice(None), slice(None)) + sl]
        for gi in range(group):
            wk = w[(slice(gi * og, (gi + 1) * og), slice(None)) + kx]
            y[:, gi * og:(gi + 1) * og] += np.einsum("oc,nc...->no...", wk, patch[:, gi * cg:(gi + 1) * cg])
    if b is not None:
        y += b.astype(np.float64).reshape([1, -1] + [1] * nsp)
    return y


def run(g, env, w):
    """NumPy evaluation of graph g: env holds the values, w the weights."""
    env = dict(env)
    val = lambda k: env[k] if k in env else w[k]  # noqa: E731
    for n in g.node:
        a = attrs(n)
        if n.op_type == "Constant":
            env[n.output[0]] = w[n.output[0]]
        elif n.op_type == "MatMul":
            env[n.output[0]] = val(n.input[0]).astype(np.float64) @ val(n.input[1]).astype(np.float64)
        elif n.op_type == "Gemm":
            x, b = val(n.input[0]).astype(np.float64), val(n.input[1]).astype(np.float64)
            x = x.T if a.get("transA", 0) else x
            b = b.T if a.get("transB", 0) else b
            y = a.get("alpha", 1.0) * (x @ b)
            if len(n.input) > 2 and n.input[2]:
                y = y + a.get("beta", 1.0) * val(n.input[2])
            env[n.output[0]] = y
        elif n.op_type == "Conv":
            b = val(n.input[2]) if len(n.input) > 2 and n.input[2] else None
            env[n.output[0]] = conv(val(n.input[0]), val(n.input[1]), b, a)
        elif n.op_type == "BatchNormalization":
            x, sc, bb, mu, var = (val(k).astype(np.float64) for k in n.input[:5])
            sh = [1, -1] + [1] * (x.ndim - 2)
            eps = a.get("epsilon", 1e-5)
            env[n.output[0]] = sc.reshape(sh) * (x - mu.reshape(sh)) / np.sqrt(var.reshape(sh) + eps) + bb.reshape(sh)
        elif n.op_type == "Add":
            env[n.output[0]] = val(n.input[0]) + val(n.input[1])
        elif n.op_type == "Relu":
            env[n.output[0]] = np.maximum(val(n.input[0]), 0)
        elif n.op_type in ("Identity",):
            env[n.output[0]] = val(n.input[0])
        elif n.op_type == "Reshape":
            env[n.output[0]] = val(n.input[0]).reshape(val(n.input[1]))
        elif n.op_type == "If":
            br = a["then_branch"] if bool(val(n.input[0])) else a["else_branch"]
            sub = run(br, env, w)
            for o, bo in zip(n.output, br.output):
                env[o] = sub[bo.name]
        else:
            raise SystemExit(f"evaluator: op {n.op_type} not known")
    return env


def outputs(m, feeds, w):
    env = run(m.graph, feeds, w)
    return {o.name: env[o.name] for o in m.graph.output}


def rel(a, b):
    return float(np.linalg.norm(np.ravel(a - b)) / np.linalg.norm(np.ravel(b)))


def check(orig_p, out_p, rank, split, feeds_p, orig_ort_p, out_ort_p):
    orig, out = onnx.load(orig_p), onnx.load(out_p)
    onnx.checker.check_model(out, full_check=True)
    assert [i.name for i in out.graph.input] == [i.name for i in orig.graph.input]
    assert [o.name for o in out.graph.output] == [o.name for o in orig.graph.output]
    wo, wn = tensors(orig), tensors(out)
    split = [s for s in split.split(",") if s]
    onodes = [n for g in graphs(orig.graph) for n in g.node if n.op_type != "Constant" or n.output[0] not in split]
    nnodes = [n for g in graphs(out.graph) for n in g.node]
    byout = {o: n for n in nnodes for o in n.output}
    seen = set()
    for n in onodes:
        if n.op_type in ("MatMul", "Gemm", "Conv") and n.input[1] in split:
            W = n.input[1]
            assert W not in wn, f"{W}: still in the output"
            second = byout[n.output[0]]
            first = byout[second.input[0]]
            seen |= {id(first), id(second)}
            a, a1, a2 = attrs(n), attrs(first), attrs(second)
            assert first.op_type == second.op_type == n.op_type, (first.op_type, second.op_type)
            assert list(first.input) == [n.input[0], W + ".lr_b"], first.input
            assert list(second.input) == [first.output[0], W + ".lr_a"] + list(n.input[2:]), second.input
            assert first.name == n.name, (first.name, n.name)
            if n.op_type == "Conv":  # the first keeps every attribute, the second is 1x1 with none
                assert a1 == a and not a2, (a1, a2, a)
                O, I, *k = wo[W].shape
                assert list(wn[W + ".lr_b"].shape) == [rank, I] + k, (W, wn[W + ".lr_b"].shape)
                assert list(wn[W + ".lr_a"].shape) == [O, rank] + [1] * len(k), (W, wn[W + ".lr_a"].shape)
                continue
            if n.op_type == "Gemm":
                assert a1 == {k: v for k, v in a.items() if k != "beta"}, (a1, a)
                assert a2 == {k: v for k, v in a.items() if k in ("transB", "beta")}, (a2, a)
            else:
                assert not a1 and not a2
            K, N = wo[W].shape[::-1] if a.get("transB", 0) else wo[W].shape
            want_b, want_a = ([rank, K], [N, rank]) if a.get("transB", 0) else ([K, rank], [rank, N])
            assert list(wn[W + ".lr_b"].shape) == want_b, (W, wn[W + ".lr_b"].shape, want_b)
            assert list(wn[W + ".lr_a"].shape) == want_a, (W, wn[W + ".lr_a"].shape, want_a)
        else:
            sub = any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute)
            key = lambda m: (m.op_type, m.name, list(m.input), list(m.output))  # noqa: E731
            same = [m for m in nnodes if (key(m) == key(n) if sub else m == n)]  # subgraphs: checked node by node
            assert same, f"node {n.name or n.output[0]} ({n.op_type}) changed"
            seen |= {id(m) for m in same}
    assert len(seen) == len(nnodes), "the output has nodes the split does not explain"
    for s in split:
        assert s not in wn, s

    feeds = {k: np.array(v["data"], dtype=bool if v["type"] == "bool" else np.float32).reshape(v["dims"])
             for k, v in json.load(open(feeds_p)).items()}
    ort_o = {k: np.array(v["data"]).reshape(v["dims"]) for k, v in json.load(open(orig_ort_p)).items()}
    ort_n = {k: np.array(v["data"]).reshape(v["dims"]) for k, v in json.load(open(out_ort_p)).items()}
    # NumPy on the factors npuc wrote = onnxruntime on npuc's model
    mine = outputs(out, feeds, wn)
    for k in ort_n:
        e = rel(ort_n[k], mine[k])
        assert e < 1e-5, f"{k}: onnxruntime and NumPy on the written factors differ by {e:.3e}"
    # the error npuc's model makes = the error of NumPy's truncated SVD at rank
    trunc = dict(wo)
    for s in split:
        # a Conv's [O, I, k..] as the [O, I*k..] matrix
        u, sv, vt = np.linalg.svd(wo[s].astype(np.float64).reshape(wo[s].shape[0], -1), full_matrices=False)
        trunc[s] = ((u[:, :rank] * sv[:rank]) @ vt[:rank]).reshape(wo[s].shape)
    ref = outputs(orig, feeds, trunc)
    exact = outputs(orig, feeds, wo)
    for k in ort_o:
        assert rel(ort_o[k], exact[k]) < 1e-5, f"{k}: the NumPy evaluator does not reproduce the original"
        e_npuc, e_np = rel(ort_n[k], ort_o[k]), rel(ref[k], exact[k])
        print(f"{out_p}: {k}: relative output error {e_npuc:.6e}, NumPy's truncated SVD at rank {rank}: {e_np:.6e}")
        assert abs(e_npuc - e_np) <= 1e-5 * e_np + 1e-7, (e_npuc, e_np)
        # and the outputs themselves: W_r is unique for distinct singular values
        assert rel(ort_n[k], ref[k]) < 1e-5, f"{k}: npuc's model and NumPy's rank-{rank} model differ"


if __name__ == "__main__":
    if sys.argv[1] == "models":
        models(sys.argv[2])
    elif sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6], sys.argv[7], sys.argv[8])
    else:
        raise SystemExit(__doc__)
