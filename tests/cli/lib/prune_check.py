#!/usr/bin/env python3
"""Independent checks for `npuc prune` and `npuc sparsify` (tests/cli/prune.sh,
sparsify.sh).  Files are read with npuc_test.py's readers (standard library
for safetensors, h5py for HDF5), the reference computations use NumPy.

    prune_check.py magnitude IN OUT S layer|global [REPORT.json]
        OUT has exactly floor(S*n) smallest |w| zeroed per selected tensor
        (global: over the concatenation in file order), ties to the lower
        index, everything else bit for bit; REPORT's extras agree.
    prune_check.py nm IN OUT N M
        OUT is IN with N:M groups along the input channels (docs/sparsity.md)
        of every rank >= 2 float tensor whose input axis has >= M values.
    prune_check.py nm_compressed ART DENSE
        decodes ART's nm_sparse entries from the format in docs/artifact.md
        alone and compares with DENSE.
    prune_check.py keras_consistent FILE
        every layer of FILE's Keras model_config reads as many channels as its
        producer makes (through activations, padding, pooling, BatchNorm),
        and BatchNorm / bias lengths match their layer.
    prune_check.py shapes FILE NAME=DIM,... prints nothing, exits 1 unless
        tensor NAME has shape DIM (e.g. features.0.weight=4,3,3,3).
"""
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from npuc_test import read_any  # noqa: E402

NP = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "BF16": None}


def tensors(path):
    meta, ts = read_any(path)
    out = {}
    for name, dt, shape, data in ts:
        out[name] = (dt, shape, data)
    return meta, out, [t[0] for t in ts]


def arr(dt, shape, data):
    return np.frombuffer(data, dtype=np.dtype(NP[dt]).newbyteorder("<")).reshape(shape)


def layout_of(name, shape, keras, meta):
    """The layout npuc would guess (docs/formats.md), with npuc.layout overrides."""
    over = json.loads(meta.get("npuc.layout", "{}"))
    if name in over:
        return over[name]
    leaf = name.split("/")[-1].split(":")[0]
    r = len(shape)
    if leaf == "kernel":
        return "hwio" if r >= 3 else "io"
    if leaf == "depthwise_kernel":
        return "hwim"
    if keras:
        return "io" if r == 2 else "hwio" if r >= 3 else "none"
    if r == 2:
        return "oi"
    if r >= 3:
        return "iohw" if ("transpose" in name or "deconv" in name) else "oihw"
    return "none"


def is_keras(path, names):
    with open(path, "rb") as f:
        h5 = f.read(8) == b"\x89HDF\r\n\x1a\n"
    if h5:
        import h5py
        with h5py.File(path, "r") as f:
            if "layer_names" in f.attrs:
                return str(f.attrs.get("format", b"")) not in ("pt", "b'pt'")
    return False


def to_csi(w, layout):
    """View as [C, S, I] (output channel, tap, input channel) and the inverse."""
    sh = w.shape
    if layout == "oi":
        return w.reshape(sh[0], 1, sh[1]), lambda v: v.reshape(sh)
    if layout == "io":
        return w.T.reshape(sh[1], 1, sh[0]), lambda v: v.reshape(sh[1], sh[0]).T
    if layout == "oihw":
        s = int(np.prod(sh[2:]))
        v = w.reshape(sh[0], sh[1], s).transpose(0, 2, 1)
        return v, lambda x: x.transpose(0, 2, 1).reshape(sh)
    if layout == "hwio":
        s = int(np.prod(sh[:-2]))
        v = w.reshape(s, sh[-2], sh[-1]).transpose(2, 0, 1)
        return v, lambda x: x.transpose(1, 2, 0).reshape(sh)
    if layout == "iohw":
        s = int(np.prod(sh[2:]))
        v = w.reshape(sh[0], sh[1], s).transpose(1, 2, 0)
        return v, lambda x: x.transpose(2, 0, 1).reshape(sh)
    return None, None


def nm_ref(w, layout, n, m):
    """N:M along I of [C, S, I]; None when the layout has no input axis >= m."""
    v, back = to_csi(w, layout)
    if v is None or v.shape[2] < m:
        return None
    C, S, I = v.shape
    G = -(-I // m)
    mag = np.abs(v.astype(np.float64))
    pad = np.full((C, S, G * m), np.inf)
    pad[:, :, :I] = mag
    g = pad.reshape(C, S, G, m)
    r = np.minimum(m, I - np.arange(G) * m)                  # values per group
    drop = np.maximum(r - n, 0)                              # zeroed per group
    # rank by (|w|, position): stable argsort keeps the lower position first
    order = np.argsort(g, axis=3, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(m)[None, None, None, :].repeat(G, 2).repeat(S, 1).repeat(C, 0), axis=3)
    zero = rank < drop[None, None, :, None]
    zero = zero.reshape(C, S, G * m)[:, :, :I]
    out = v.copy()
    out[zero] = 0
    return back(out)


def selected(name, shape, dt):
    return len(shape) >= 2 and dt in ("F32", "F16", "F64") and int(np.prod(shape)) > 0


def cmd_magnitude(a):
    src, dst, s, scope = a[0], a[1], float(a[2]), a[3]
    _, ti, order = tensors(src)
    _, to, _ = tensors(dst)
    sel = [n for n in order if selected(n, ti[n][1], ti[n][0])]
    bad = 0
    zeros = {}
    if scope == "global":
        mags = np.concatenate([np.abs(arr(*ti[n]).astype(np.float64)).ravel() for n in sel])
        k = math.floor(s * mags.size)
        idx = np.lexsort((np.arange(mags.size), mags))[:k]
        zmask = np.zeros(mags.size, bool)
        zmask[idx] = True
        off = 0
    for n in order:
        dt, shape, data = ti[n]
        if n not in sel:
            if to[n][2] != data:
                print(f"{dst}: unselected tensor '{n}' changed", file=sys.stderr)
                bad = 1
            continue
        w = arr(dt, shape, data).ravel()
        if scope == "global":
            zm = zmask[off:off + w.size]
            off += w.size
        else:
            k = math.floor(s * w.size)
            zm = np.zeros(w.size, bool)
            zm[np.lexsort((np.arange(w.size), np.abs(w.astype(np.float64))))[:k]] = True
        ref = w.copy()
        ref[zm] = 0
        got = arr(*to[n]).ravel()
        if ref.tobytes() != got.tobytes():
            d = np.nonzero(ref.view(np.uint8).reshape(w.size, -1).any(1) != got.view(np.uint8).reshape(w.size, -1).any(1))
            print(f"{dst}: tensor '{n}' differs from the reference (first at {d[0][:3]})", file=sys.stderr)
            bad = 1
        zeros[n] = int((got == 0).sum())
        if scope == "layer" and zeros[n] != max(math.floor(s * w.size), int((w == 0).sum())):
            print(f"{dst}: tensor '{n}': {zeros[n]} zeros", file=sys.stderr)
            bad = 1
    if len(a) > 4:
        rep = {t["name"]: t for t in json.load(open(a[4]))["tensors"]}
        for n in sel:
            x = rep[n]["extra"]
            numel = int(np.prod(ti[n][1]))
            if abs(x["sparsity"] - zeros[n] / numel) > 1e-12 or x["sparsity_target"] != s or x["zeros"] != zeros[n]:
                print(f"report: tensor '{n}': {x} vs zeros {zeros[n]}", file=sys.stderr)
                bad = 1
    return bad


def cmd_nm(a):
    src, dst, n, m = a[0], a[1], int(a[2]), int(a[3])
    meta, ti, order = tensors(src)
    _, to, _ = tensors(dst)
    keras = is_keras(src, order)
    bad = 0
    count = 0
    for name in order:
        dt, shape, data = ti[name]
        ref = None
        if selected(name, shape, dt) and "embed" not in name:
            ref = nm_ref(arr(dt, shape, data), layout_of(name, shape, keras, meta), n, m)
        want = data if ref is None else ref.astype(arr(dt, shape, data).dtype).tobytes()
        if to[name][2] != want:
            print(f"{dst}: tensor '{name}' differs from the N:M reference", file=sys.stderr)
            bad = 1
        count += ref is not None
    if count == 0:
        print("no tensor was sparsified", file=sys.stderr)
        bad = 1
    return bad


def cmd_nm_compressed(a):
    art, dense = a[0], a[1]
    meta, ta, _ = tensors(art)
    _, td, _ = tensors(dense)
    ents = json.loads(meta["npuc"])["tensors"]
    bad = 0
    for name, e in ents.items():
        if e["encoding"] != "nm_sparse":
            continue
        n, m, bits = e["n"], e["m"], e["meta_bits"]
        shape, layout = e["shape"], e["layout"]
        dt = e["dtype"]
        vals = arr(ta[e["values"]][0], ta[e["values"]][1], ta[e["values"]][2]).reshape(-1)
        mb = np.frombuffer(ta[e["meta"]][2], np.uint8)
        bitsarr = np.unpackbits(mb, bitorder="little")
        pos = np.zeros(vals.size, np.int64)
        for b in range(bits):
            pos |= bitsarr[np.arange(vals.size) * bits + b].astype(np.int64) << b
        ref = np.zeros(shape, dtype=NP[dt])
        v, back = to_csi(ref, layout)
        C, S, I = v.shape
        G = -(-I // m)
        out = np.zeros((C, S, G * m), dtype=v.dtype)
        vv = vals.reshape(C, S, G, n)
        pp = pos.reshape(C, S, G, n)
        for j in range(n):
            idx = np.arange(G) * m + pp[:, :, :, j]          # position inside the padded row
            np.put_along_axis(out, idx.reshape(C, S, G), vv[:, :, :, j], axis=2)
        full = back(out[:, :, :I].copy())
        if full.tobytes() != td[name][2]:
            print(f"{art}: tensor '{name}' decodes differently from {dense}", file=sys.stderr)
            bad = 1
        if len(ta[e["meta"]][2]) != -(-vals.size * bits // 8):
            print(f"{art}: tensor '{name}': metadata size", file=sys.stderr)
            bad = 1
    return bad


PASS = ("Activation", "ReLU", "LeakyReLU", "ELU", "Dropout", "ZeroPadding2D", "MaxPooling2D", "AveragePooling2D",
        "GlobalAveragePooling2D", "GlobalMaxPooling2D", "Flatten")


def cmd_keras_consistent(a):
    import h5py
    with h5py.File(a[0], "r") as f:
        cfg = json.loads(f.attrs["model_config"])
        shapes = {}

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                shapes[name] = obj.shape
        f.visititems(visit)
    layers = cfg["config"]["layers"]
    by = {l["config"]["name"]: l for l in layers}

    def w(layer, leaf):
        for k, s in shapes.items():
            parts = k.split("/")
            if parts[0] == layer and parts[-1].split(":")[0] == leaf:
                return s
        return None

    def out_ch(name):
        l = by[name]
        c = l["class_name"]
        if c in ("Conv2D", "Dense"):
            return w(name, "kernel")[-1]
        if c == "DepthwiseConv2D":
            return w(name, "depthwise_kernel")[-2]
        if c == "BatchNormalization" or c in PASS:
            return out_ch(l["inbound_nodes"][0][0][0])
        if c == "Add":
            chs = {out_ch(x[0]) for x in l["inbound_nodes"][0]}
            if len(chs) != 1:
                raise SystemExit(f"Add '{name}' joins different channel counts {chs}")
            return chs.pop()
        if c == "InputLayer":
            return 3
        raise SystemExit(f"unhandled layer {c}")

    bad = 0
    for l in layers:
        c, name = l["class_name"], l["config"]["name"]
        if c in ("InputLayer",):
            continue
        ins = l["inbound_nodes"][0]
        src = ins[0][0]
        cin = out_ch(src)
        if c == "Conv2D" or c == "Dense":
            k = w(name, "kernel")
            got = k[-2] if c == "Conv2D" else k[0]
            if c == "Dense" and by[src]["class_name"] == "Flatten":
                pass  # 1x1 spatial in this model
            if got != cin:
                print(f"{name}: reads {got} channels, its input has {cin}", file=sys.stderr)
                bad = 1
            b = w(name, "bias")
            if b is not None and b[0] != k[-1]:
                print(f"{name}: bias {b} vs {k[-1]} outputs", file=sys.stderr)
                bad = 1
        elif c == "DepthwiseConv2D":
            if w(name, "depthwise_kernel")[-2] != cin:
                print(f"{name}: depthwise over {w(name, 'depthwise_kernel')[-2]}, input has {cin}", file=sys.stderr)
                bad = 1
        elif c == "BatchNormalization":
            for leaf in ("gamma", "beta", "moving_mean", "moving_variance"):
                s = w(name, leaf)
                if s is not None and s[0] != cin:
                    print(f"{name}/{leaf}: {s[0]} vs {cin} channels", file=sys.stderr)
                    bad = 1
    return bad


def cmd_shapes(a):
    _, t, _ = tensors(a[0])
    bad = 0
    for spec in a[1:]:
        name, dims = spec.rsplit("=", 1)
        want = [int(x) for x in dims.split(",") if x]
        if t[name][1] != want:
            print(f"{a[0]}: '{name}' has shape {t[name][1]}, expected {want}", file=sys.stderr)
            bad = 1
    return bad


def main(argv):
    cmds = {"magnitude": cmd_magnitude, "nm": cmd_nm, "nm_compressed": cmd_nm_compressed,
            "keras_consistent": cmd_keras_consistent, "shapes": cmd_shapes}
    if len(argv) < 2 or argv[1] not in cmds:
        print(__doc__, file=sys.stderr)
        return 2
    return cmds[argv[1]](argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
