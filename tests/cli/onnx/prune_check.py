"""prune_check.py ORIG PRUNED ZEROED [MIN_SHRUNK] - checks a structured prune of an ONNX model
(tests/cli/onnx_prune.sh) without npuc's help, and writes the reference the runtime compares
it with.

Walking ORIG's nodes in order, the channels each value keeps are found from the weights
alone: a weighted node (Conv, Gemm, MatMul) reads the kept channels of its input along its
kernel's input axis; the rows of PRUNED's kernel along the output axis are matched, in
order, to ORIG's rows (restricted to those input channels) - every pruned row must be an
exact copy of one original row, and its bias the same entry.  A depthwise Conv, a
BatchNormalization and an elementwise op keep the channels of their input (their pruned
vectors must be the originals at those channels); an Add needs the same channels on both
inputs; a graph output keeps all of them.

Removing a channel is exactly zeroing the slice of the consumer's kernel that reads it, so
ZEROED is ORIG with those slices zeroed: onnxruntime must give PRUNED's outputs.  PRUNED must
pass onnx.checker (full check: shape inference) and hold at least MIN_SHRUNK (default 1)
smaller initializers.
"""
import sys

import numpy as np
import onnx
from onnx import numpy_helper

orig = onnx.load(sys.argv[1])
pruned = onnx.load(sys.argv[2])
min_shrunk = int(sys.argv[4]) if len(sys.argv) > 4 else 1
onnx.checker.check_model(pruned, full_check=True)

O = {t.name: numpy_helper.to_array(t) for t in orig.graph.initializer}
P = {t.name: numpy_helper.to_array(t) for t in pruned.graph.initializer}
assert set(O) == set(P), (sorted(O), sorted(P))
shrunk = [n for n in O if P[n].shape != O[n].shape]
assert len(shrunk) >= min_shrunk, f"only {shrunk} shrunk"
for n in shrunk:
    assert P[n].size < O[n].size, (n, O[n].shape, P[n].shape)
assert [i.name for i in pruned.graph.input] == [i.name for i in orig.graph.input]
assert [o.name for o in pruned.graph.output] == [o.name for o in orig.graph.output]

kept = {}       # value -> kept channel indices (None: all)
zero = {}       # kernel name -> (axis, kept indices)


def attr(n, name, d):
    for a in n.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return d


def match(sub, new, oa, what):
    """Indices j of sub's slices along oa that new's slices copy, in order."""
    if new.shape[oa] == sub.shape[oa]:
        assert np.array_equal(sub, new), f"{what}: kept all rows but they differ"
        return None
    out, j = [], 0
    for r in range(new.shape[oa]):
        row = np.take(new, r, axis=oa)
        while j < sub.shape[oa] and not np.array_equal(np.take(sub, j, axis=oa), row):
            j += 1
        assert j < sub.shape[oa], f"{what}: pruned row {r} is no original row"
        out.append(j)
        j += 1
    return out


def vec(name, k, what):
    if k is None:
        assert np.array_equal(O[name], P[name]), f"{what}: '{name}' changed"
    else:
        assert np.array_equal(O[name][k], P[name]), f"{what}: '{name}' is not the original at the kept channels"


for n in orig.graph.node:
    ins = [i for i in n.input if i and i not in O]
    kin = kept.get(ins[0]) if ins else None
    op = n.op_type
    if op in ("Conv", "ConvTranspose", "Gemm", "MatMul") and len(n.input) > 1 and n.input[1] in O:
        w = n.input[1]
        if op == "ConvTranspose":
            assert attr(n, "group", 1) == 1, n.name
            dw = False
            oa, ia = 1, 0
        elif op == "Conv":
            dw = attr(n, "group", 1) > 1 and O[w].shape[1] == 1
            oa, ia = 0, 1
        elif op == "Gemm":
            dw = False
            oa, ia = (0, 1) if attr(n, "transB", 0) else (1, 0)
        else:
            dw = False
            oa, ia = 1, 0
        if dw:
            vec(w, kin, n.name)
            if len(n.input) > 2:
                vec(n.input[2], kin, n.name)
            kept[n.output[0]] = kin
            continue
        sub = O[w] if kin is None else np.take(O[w], kin, axis=ia)
        kout = match(sub, P[w], oa, n.name)
        if kin is not None:
            zero[w] = (ia, kin)
        if len(n.input) > 2 and n.input[2]:
            vec(n.input[2], kout, n.name + " bias")
        kept[n.output[0]] = kout
    elif op == "BatchNormalization":
        for x in n.input[1:]:
            vec(x, kin, n.name)
        kept[n.output[0]] = kin
    elif op == "Add" and len(ins) == 2:
        assert kept.get(ins[0]) == kept.get(ins[1]), f"{n.name}: its inputs keep other channels"
        kept[n.output[0]] = kin
    elif op in ("Flatten", "Reshape", "Concat", "Transpose"):
        assert kin is None, f"{n.name} ({op}) reads a pruned value"
        kept[n.output[0]] = None
    else:  # elementwise: Relu, Clip, HardSigmoid, Mul by a scalar
        for x in n.input[1:]:
            if x in O:
                vec(x, None if O[x].size == 1 else kin, n.name)
        kept[n.output[0]] = kin
for o in orig.graph.output:
    assert kept.get(o.name) is None, f"output {o.name} lost channels"

z = onnx.load(sys.argv[1])
for t in z.graph.initializer:
    if t.name in zero:
        ax, k = zero[t.name]
        a = O[t.name].copy()
        drop = [i for i in range(a.shape[ax]) if i not in set(k)]
        idx = [slice(None)] * a.ndim
        idx[ax] = drop
        a[tuple(idx)] = 0
        t.CopyFrom(numpy_helper.from_array(a, t.name))
onnx.save_model(z, sys.argv[3])
print("ok", sys.argv[2], "shrunk:", ",".join(f"{n}{list(O[n].shape)}->{list(P[n].shape)}" for n in shrunk),
      "zeroed:", ",".join(sorted(zero)))
