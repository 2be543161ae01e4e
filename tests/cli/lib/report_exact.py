#!/usr/bin/env python3
"""Independent checks of `npuc report` on exact transforms (issue 14, item 8).

Everything npuc's report says is recomputed here with NumPy from the files
themselves, never from npuc's output:

  make-st DIR / make-h5 DIR       write a small model with conv -> BatchNorm pairs
                                  (some convs with a bias, some without) as
                                  PyTorch-style safetensors / Keras-style HDF5
  fold ORIG FOLDED REPORT PAIRS   PAIRS: JSON [[conv, bias, gamma, beta, mean, var,
                                  eps, axis], ...] (bias null when the conv had none;
                                  the folded bias is conv's bias name or PAIRS' 8th
                                  entry...).  For each pair: NumPy's relative error of
                                  W' against W*s and of b' against (b-mean)*s+beta
                                  must equal the report's; prints the worst
  scale FILE NAME FACTOR          multiplies tensor NAME of FILE in place (a wrong fold)
  strip FILE KEY                  drops metadata entry KEY from a safetensors file
  lowrank ORIG LR REPORT          the report's error of each factored tensor equals
                                  ||W - A B|| / ||W|| from the factors read here
  catalog CATALOG OUT             the catalog's bn_pairs as a --pairs file and as PAIRS
"""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import npuc_test  # noqa: E402  (the independent safetensors / HDF5 readers)

NP = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64}


def tensors(path):
    meta, ts = npuc_test.read_any(path)
    out = {}
    for name, dt, shape, data in ts:
        out[name] = np.frombuffer(data, dtype=NP[dt]).reshape(shape)
    return meta, out


def write_st(path, items, meta=None):
    header, off, blob = {}, 0, b""
    for name, arr in items:
        arr = np.ascontiguousarray(arr)
        dt = {np.float32: "F32", np.int64: "I64", np.float16: "F16"}[arr.dtype.type]
        b = arr.tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blob += b
    if meta:
        header["__metadata__"] = meta
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + blob)


def bn_stats(rng, c):
    return (rng.uniform(0.5, 2.0, c).astype(np.float32), rng.normal(0, 0.3, c).astype(np.float32),
            rng.normal(0, 0.5, c).astype(np.float32), rng.uniform(0.05, 3.0, c).astype(np.float32))


def make_st(d):
    rng = np.random.default_rng(14)
    items = []
    # c1: conv with a bias -> b1; c2: conv without one -> b2; fc stays.
    for conv, bn, shape, bias in (("c1", "b1", (8, 4, 3, 3), True), ("c2", "b2", (16, 8, 3, 3), False)):
        items.append((conv + ".weight", rng.normal(0, 0.2, shape).astype(np.float32)))
        if bias:
            items.append((conv + ".bias", rng.normal(0, 0.1, shape[0]).astype(np.float32)))
        g, b, m, v = bn_stats(rng, shape[0])
        items += [(bn + ".weight", g), (bn + ".bias", b), (bn + ".running_mean", m), (bn + ".running_var", v),
                  (bn + ".num_batches_tracked", np.array(100, dtype=np.int64))]
    items.append(("fc.weight", rng.normal(0, 0.1, (10, 16)).astype(np.float32)))
    write_st(os.path.join(d, "bn.safetensors"), items)
    pairs = [["c1.weight", "c1.bias", "b1.weight", "b1.bias", "b1.running_mean", "b1.running_var", 1e-5, 0, "c1.bias"],
             ["c2.weight", None, "b2.weight", "b2.bias", "b2.running_mean", "b2.running_var", 1e-5, 0, "c2.bias"]]
    json.dump(pairs, open(os.path.join(d, "bn_st.pairs.json"), "w"))


def make_h5(d):
    import h5py
    rng = np.random.default_rng(15)
    layers = []
    # conv2d (HWIO, with bias) -> batch_normalization; conv2d_1 (no bias) -> batch_normalization_1.
    for conv, bn, shape, bias in (("conv2d", "batch_normalization", (3, 3, 3, 8), True),
                                  ("conv2d_1", "batch_normalization_1", (3, 3, 8, 16), False)):
        w = [("kernel", rng.normal(0, 0.2, shape).astype(np.float32))]
        if bias:
            w.append(("bias", rng.normal(0, 0.1, shape[-1]).astype(np.float32)))
        layers.append((conv, w))
        g, b, m, v = bn_stats(rng, shape[-1])
        layers.append((bn, [("gamma", g), ("beta", b), ("moving_mean", m), ("moving_variance", v)]))
    layers.append(("dense", [("kernel", rng.normal(0, 0.1, (16, 10)).astype(np.float32)),
                             ("bias", np.zeros(10, np.float32))]))
    with h5py.File(os.path.join(d, "bn.h5"), "w") as f:
        f.attrs["layer_names"] = np.array([n.encode() for n, _ in layers])
        f.attrs["backend"] = b"tensorflow"
        f.attrs["keras_version"] = b"2.11.0"
        for name, ws in layers:
            g = f.create_group(name)
            g.attrs["weight_names"] = np.array([f"{name}/{k}:0".encode() for k, _ in ws])
            for k, arr in ws:
                g.create_dataset(f"{name}/{k}:0", data=arr)
    bn0, bn1 = "batch_normalization/", "batch_normalization_1/"
    pairs = [["conv2d/kernel:0", "conv2d/bias:0", bn0 + "gamma:0", bn0 + "beta:0", bn0 + "moving_mean:0",
              bn0 + "moving_variance:0", 1e-3, -1, None],
             ["conv2d_1/kernel:0", None, bn1 + "gamma:0", bn1 + "beta:0", bn1 + "moving_mean:0",
              bn1 + "moving_variance:0", 1e-3, -1, None]]
    json.dump(pairs, open(os.path.join(d, "bn_h5.pairs.json"), "w"))


def rel(ref, got):
    ref = ref.astype(np.float64)
    got = got.astype(np.float64)
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def report_tensors(path):
    d = json.load(open(path))
    return d, {t["name"]: t for t in d["tensors"]}


def close(a, b, what):
    # Both are computed in double from the same float32 values: they agree to
    # far better than this, whatever the summation order.
    assert abs(a - b) <= 1e-3 * max(abs(a), abs(b)) + 1e-12, f"{what}: report {a!r} vs NumPy {b!r}"


def fold(orig, folded, report, pairs_path, expect):
    _, A = tensors(orig)
    _, B = tensors(folded)
    d, R = report_tensors(report)
    worst = 0.0
    for conv, bias, g, be, m, v, eps, axis, *rest in json.load(open(pairs_path)):
        s = A[g].astype(np.float64) / np.sqrt(A[v].astype(np.float64) + eps)
        shape = [1] * A[conv].ndim
        shape[axis] = -1
        ref_w = A[conv].astype(np.float64) * s.reshape(shape)
        b0 = A[bias].astype(np.float64) if bias else 0.0
        ref_b = (b0 - A[m]) * s + A[be]
        # The folded bias: the conv's own, or the one the fold created (named in the report).
        newb = bias or (rest[0] if rest and rest[0] else None)
        if newb is None:
            newb = [n for n, t in R.items() if t["action"] == "created" and f"'{conv}'" in t["note"]][0]
        for name, ref in ((conv, ref_w), (newb, ref_b)):
            t = R[name]
            assert t["compared"] == "function: conv+bn", (name, t["compared"])
            mine = rel(ref, B[name])
            close(t["error"]["rel_fro"], mine, name)
            worst = max(worst, mine)
        for bn in (g, be, m, v):
            t = R[bn]
            assert t["action"] == "removed" and t["compared"] == "function: conv+bn", (bn, t)
            assert conv in t["note"], t["note"]
    low = [w for w in d["warnings"] if "below the SQNR" in w]
    if expect == "exact":
        assert worst <= 1e-6, f"an exact fold reads {worst}"
        assert not low, low
    else:
        assert worst > float(expect), f"a wrong fold reads only {worst}"
        assert low, d["warnings"]
    print(f"{len(json.load(open(pairs_path)))} pairs checked, worst relative error {worst:.3g}")


def scale(path, name, factor):
    if path.endswith(".h5"):
        import h5py
        with h5py.File(path, "r+") as f:
            def visit(n, o):
                if isinstance(o, h5py.Dataset) and (n == name or n.endswith("/" + name)):
                    o[...] = o[()] * np.float32(factor)
            f.visititems(visit)
        return
    meta, ts = npuc_test.read_st(path)
    items = [(n, np.frombuffer(b, dtype=NP[dt]).reshape(sh) * (np.float32(factor) if n == name else 1))
             for n, dt, sh, b in ts]
    write_st(path, [(n, a.astype(NP[dt])) for (n, a), (_, dt, _, _) in zip(items, ts)], meta)


def strip(path, key):
    meta, ts = npuc_test.read_st(path)
    meta.pop(key, None)
    write_st(path, [(n, np.frombuffer(b, dtype=NP[dt]).reshape(sh)) for n, dt, sh, b in ts], meta)


def lowrank(orig, lr, report):
    _, A = tensors(orig)
    _, B = tensors(lr)
    _, R = report_tensors(report)
    n = 0
    for name, w in A.items():
        if name + ".lr_a" not in B:
            continue
        a, b = B[name + ".lr_a"].astype(np.float64), B[name + ".lr_b"].astype(np.float64)
        # PyTorch layouts (oi / oihw): W [O, ...] = A [O, r] x B [r, ...].
        prod = (a.reshape(a.shape[0], -1) @ b.reshape(b.shape[0], -1)).reshape(w.shape)
        mine = rel(w, prod)
        t = R[name]
        assert t["compared"] == "product of factors" and t["action"] == "factored", t
        close(t["error"]["rel_fro"], mine, name)
        assert name + ".lr_a" not in R and name + ".lr_b" not in R, "factors listed as created tensors"
        n += 1
    assert n, "no factored tensor"
    print(f"{n} factored tensors match NumPy")


def catalog(cat, out):
    c = json.load(open(cat))
    json.dump({"pairs": [{"conv": p["conv"], "gamma": p["gamma"], "mean": p["mean"], "var": p["var"]}
                         for p in c["bn_pairs"]]}, open(out + ".pairs", "w"))
    json.dump([[p["conv"], None, p["gamma"], p["beta"], p["mean"], p["var"], 1e-5, 0, None]
               for p in c["bn_pairs"]], open(out + ".np", "w"))


def main(argv):
    cmd, args = argv[1], argv[2:]
    if cmd == "make-st": make_st(*args)
    elif cmd == "make-h5": make_h5(*args)
    elif cmd == "fold": fold(*args)
    elif cmd == "scale": scale(args[0], args[1], float(args[2]))
    elif cmd == "strip": strip(*args)
    elif cmd == "lowrank": lowrank(*args)
    elif cmd == "catalog": catalog(*args)
    else: raise SystemExit(f"unknown command {cmd}")


if __name__ == "__main__":
    main(sys.argv)
