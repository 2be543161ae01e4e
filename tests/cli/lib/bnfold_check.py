#!/usr/bin/env python3
"""Independent checks of `npuc fold-bn` for the CLI tests (numpy, and torch
where asked).  Files are read with npuc_test.py's readers, not with npuc.

    bnfold_check.py plan PLAN.json CATALOG.json
        The dry-run plan (npuc.bnfold.plan/1) holds exactly the catalog's
        bn_pairs (conv tensor, BatchNorm prefix).  Prints "found N of M".
    bnfold_check.py values ORIGINAL FOLDED CATALOG.json
        For every catalog pair, recomputes the fold in float64 from the
        original (layout from the catalog's conv_class, eps from the catalog)
        and compares the folded file: weights and bias within 1e-6 relative
        (max |a - b| / max |b| per tensor); BatchNorm tensors gone; every other
        tensor byte-identical.
    bnfold_check.py torch ORIGINAL FOLDED
        PyTorch state-dict names: for each BatchNorm module P.N (running_mean
        beside it) and conv P.(N-1), the folded weight and bias equal
        torch.nn.utils.fusion.fuse_conv_bn_weights within 1e-6 relative.
        Prints the largest relative difference.  Exit 77 without torch.
    bnfold_check.py make-bad OUT KIND
        Writes a small PyTorch-named safetensors file (conv features.0 ->
        BatchNorm features.1) whose values or shapes are wrong in one way:
        negvar (a variance of -1), nangamma (a NaN gamma), infweight (an
        infinite conv weight), mismatch (running_var shorter than
        running_mean), zerovar (every variance exactly 0: legal).
    bnfold_check.py keras-config FOLDED
        The rewritten model_config has no BatchNormalization layer that was
        folded, no reference to a missing layer, use_bias on folded layers,
        and (HDF5) layer_names equal to the config's weighted layers.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from npuc_test import read_any  # noqa: E402

import numpy as np  # noqa: E402

NP = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32,
      "U8": np.uint8, "I8": np.int8}
RTOL = 1e-6


def arrays(path):
    meta, ts = read_any(path)
    out, raw = {}, {}
    for name, dtype, shape, data in ts:
        raw[name] = (dtype, shape, data)
        if dtype in NP:
            out[name] = np.frombuffer(data, dtype=NP[dtype]).reshape(shape)
    return meta, out, raw


def prefix(name):
    return name.rsplit("/", 1)[0] if "/" in name else name.rsplit(".", 1)[0]


def rel(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    den = np.max(np.abs(b)) if b.size else 0.0
    num = np.max(np.abs(a - b)) if b.size else 0.0
    return num / den if den > 0 else num


def bias_name(conv):
    if conv.endswith(".weight"):
        return conv[:-len("weight")] + "bias"
    if conv.endswith(".w_0"):
        return conv[:-len("w_0")] + "b_0"
    head, _, _ = conv.rpartition("/")
    return head + "/bias"


def cmd_plan(plan_path, catalog_path):
    with open(plan_path) as f:
        plan = json.load(f)
    with open(catalog_path) as f:
        cat = json.load(f)
    assert plan["schema"] == "npuc.bnfold.plan/1", plan["schema"]
    got = {(p["conv"], p["bn"]) for p in plan["pairs"]}
    want = {(p["conv"], prefix(p["mean"])) for p in cat["bn_pairs"]}
    found = len(got & want)
    print(f"{os.path.basename(plan_path)}: found {found} of {len(want)} catalog pairs "
          f"({len(got - want)} extra, {plan['guesses']} guessed)")
    if got != want:
        for p in sorted(want - got)[:10]:
            print(f"  missing {p}", file=sys.stderr)
        for p in sorted(got - want)[:10]:
            print(f"  extra {p}", file=sys.stderr)
        return 1
    return 0


def scale_along(w, s, conv_class):
    """W * s along the output-channel axis of the catalog's layer class."""
    if conv_class in ("Conv", "ConvTranspose") and w.ndim >= 3:
        shape = [1] * w.ndim
        if conv_class == "Conv":
            shape[0] = -1
        else:
            shape[1] = -1
        return w * s.reshape(shape)
    if conv_class == "DepthwiseConv2D":  # [kh, kw, in, mult], channel = i * mult + m
        kh, kw, cin, mult = w.shape
        return w * s.reshape(1, 1, cin, mult)
    if conv_class in ("Conv2D", "Conv1D", "Conv3D", "Dense", "MatMul", "Gemm"):
        return w * s.reshape([1] * (w.ndim - 1) + [-1])  # last axis
    raise ValueError(f"unknown conv_class {conv_class}")


def cmd_values(orig_path, folded_path, catalog_path):
    _, a, araw = arrays(orig_path)
    _, b, braw = arrays(folded_path)
    with open(catalog_path) as f:
        cat = json.load(f)
    worst = 0.0
    touched = set()
    bad = []
    for p in cat["bn_pairs"]:
        conv = p["conv"]
        eps = p["eps"]
        g = a[p["gamma"]].astype(np.float64) if p.get("gamma") else 1.0
        be = a[p["beta"]].astype(np.float64) if p.get("beta") else 0.0
        mu = a[p["mean"]].astype(np.float64)
        var = a[p["var"]].astype(np.float64)
        s = g / np.sqrt(var + eps)
        bn_name = bias_name(conv)
        b0 = a[bn_name].astype(np.float64) if bn_name in a else 0.0
        want_w = scale_along(a[conv].astype(np.float64), s, p["conv_class"])
        want_b = (b0 - mu) * s + be
        if conv not in b or bn_name not in b:
            bad.append(f"{conv}: weight or bias '{bn_name}' missing from the folded file")
            continue
        rw, rb = rel(b[conv], want_w), rel(b[bn_name], want_b)
        worst = max(worst, rw, rb)
        if rw > RTOL or rb > RTOL:
            bad.append(f"{conv}: weight rel {rw:.3g}, bias rel {rb:.3g} > {RTOL}")
        for k in ("gamma", "beta", "mean", "var"):
            if p.get(k):
                touched.add(p[k])
                if p[k] in b:
                    bad.append(f"BatchNorm tensor '{p[k]}' still in the folded file")
        touched.update((conv, bn_name))
    for name, r in araw.items():
        if name in touched:
            continue
        if name not in braw:
            bad.append(f"'{name}' missing from the folded file")
        elif braw[name] != r:
            bad.append(f"'{name}' changed although it is not part of a pair")
    if bad:
        print("\n".join(bad[:15]), file=sys.stderr)
        return 1
    print(f"{os.path.basename(folded_path)}: {len(cat['bn_pairs'])} pairs equal to numpy float64 folding "
          f"(max rel diff {worst:.2e}); other tensors unchanged")
    return 0


def cmd_torch(orig_path, folded_path):
    try:
        import torch
        from torch.nn.utils.fusion import fuse_conv_bn_weights
    except ImportError as e:
        print(f"SKIP: {e}", file=sys.stderr)
        return 77
    _, a, _ = arrays(orig_path)
    _, b, _ = arrays(folded_path)
    pairs = []
    for name in a:
        if not name.endswith(".running_mean"):
            continue
        bn = name[:-len(".running_mean")]
        head, _, idx = bn.rpartition(".")
        if idx.isdigit() and int(idx) > 0 and f"{head}.{int(idx) - 1}.weight" in a:
            pairs.append((f"{head}.{int(idx) - 1}", bn))
    if not pairs:
        print("no conv -> BatchNorm pairs in the file", file=sys.stderr)
        return 1
    worst = 0.0
    bad = []
    t = lambda x: torch.from_numpy(np.array(x, dtype=np.float32))  # noqa: E731
    for conv, bn in pairs:
        w = t(a[conv + ".weight"])
        cb = t(a[conv + ".bias"]) if conv + ".bias" in a else None
        fw, fb = fuse_conv_bn_weights(w, cb, t(a[bn + ".running_mean"]), t(a[bn + ".running_var"]), 1e-5,
                                      t(a[bn + ".weight"]), t(a[bn + ".bias"]))
        rw = rel(b[conv + ".weight"], fw.detach().numpy())
        rb = rel(b[conv + ".bias"], fb.detach().numpy())
        worst = max(worst, rw, rb)
        if rw > RTOL or rb > RTOL:
            bad.append(f"{conv}: weight rel {rw:.3g}, bias rel {rb:.3g} > {RTOL}")
        for k in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked"):
            if f"{bn}.{k}" in b:
                bad.append(f"'{bn}.{k}' still in the folded file")
    if bad:
        print("\n".join(bad), file=sys.stderr)
        return 1
    print(f"{os.path.basename(folded_path)}: {len(pairs)} pairs equal to torch {torch.__version__} "
          f"fuse_conv_bn_weights, max rel diff {worst:.2e}")
    return 0


def cmd_keras_config(folded_path):
    meta, _, raw = arrays(folded_path)
    cfg = json.loads(meta["model_config"])
    fold = json.loads(meta["npuc.bnfold"])
    folded_bn = {p["bn"] for p in fold["pairs"]}
    layers = cfg["config"]["layers"]
    names = {l["name"] for l in layers}
    bad = []
    for l in layers:
        if l["class_name"] == "BatchNormalization" and l["name"] in folded_bn:
            bad.append(f"folded BatchNorm layer '{l['name']}' still in model_config")
        for node in l.get("inbound_nodes", []):
            for e in node:
                if e[0] not in names:
                    bad.append(f"'{l['name']}' reads missing layer '{e[0]}'")
    for o in cfg["config"].get("output_layers", []):
        if o[0] not in names:
            bad.append(f"output reads missing layer '{o[0]}'")
    for p in fold["pairs"]:
        if p.get("use_bias"):
            l = [x for x in layers if x["name"] == p["layer"]]
            if not l or l[0]["config"].get("use_bias") is not True:
                bad.append(f"layer '{p['layer']}' should have use_bias true")
    weighted = [l["name"] for l in layers if l["class_name"] in
                ("Conv1D", "Conv2D", "Conv3D", "DepthwiseConv2D", "SeparableConv2D", "Dense", "BatchNormalization")]
    if folded_path.endswith(".h5"):
        import h5py
        with h5py.File(folded_path, "r") as f:
            ln = [x.decode() if isinstance(x, bytes) else x for x in f.attrs["layer_names"]]
        if ln != weighted:
            bad.append(f"layer_names ({len(ln)}) differ from the config's weighted layers ({len(weighted)})")
    if bad:
        print("\n".join(bad[:15]), file=sys.stderr)
        return 1
    print(f"{os.path.basename(folded_path)}: model_config has {len(layers)} layers, no folded BatchNorm, "
          f"no dangling reference; {len(weighted)} weighted layers")
    return 0


def write_st(path, tensors):
    """A minimal safetensors writer: tensors is [(name, numpy array)]."""
    import struct
    names = {np.dtype("float32"): "F32", np.dtype("int64"): "I64"}
    header, blobs, off = {}, [], 0
    for name, arr in tensors:
        b = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": names[arr.dtype], "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def cmd_make_bad(path, kind):
    rng = np.random.default_rng(7)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    w, g, b, mu = f32(4, 3, 3, 3), f32(4) + 2, f32(4), f32(4)
    var = (np.abs(f32(4)) + 0.5).astype(np.float32)
    if kind == "negvar":
        var[2] = -1
    elif kind == "nangamma":
        g[1] = np.nan
    elif kind == "infweight":
        w[3, 0, 1, 1] = np.inf
    elif kind == "mismatch":
        var = var[:3]
    elif kind == "zerovar":
        var[:] = 0
    else:
        print(f"unknown kind {kind}", file=sys.stderr)
        return 2
    write_st(path, [("features.0.weight", w), ("features.1.weight", g), ("features.1.bias", b),
                    ("features.1.running_mean", mu), ("features.1.running_var", var),
                    ("features.1.num_batches_tracked", np.array(3, dtype=np.int64))])
    return 0


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, args = argv[1], argv[2:]
    if cmd == "plan":
        return cmd_plan(*args)
    if cmd == "values":
        return cmd_values(*args)
    if cmd == "torch":
        return cmd_torch(*args)
    if cmd == "keras-config":
        return cmd_keras_config(*args)
    if cmd == "make-bad":
        return cmd_make_bad(*args)
    print(f"unknown command {cmd}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
