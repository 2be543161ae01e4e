#!/usr/bin/env python3
"""Keras 3 .keras archives for tests/cli/keras_archive.sh, built and checked
with zipfile, h5py and NumPy only (never with npuc).

    keras_archive.py make OUT.keras [bf16]
        A Keras 3 archive as keras.saving writes it: metadata.json,
        config.json (a Functional model input -> conv2d (Conv2D 3->8, no bias)
        -> batch_normalization (epsilon 1e-3) -> pool -> dense (8->4)),
        model.weights.h5 (layers/<name>/vars/<i>, the pooling layer with an
        empty vars group, an empty optimizer/vars) and assets/notes.txt.  With
        bf16 the weights are bfloat16 as Keras 3 stores them: 2-byte opaque
        data with the attribute dtype = "bfloat16".
    keras_archive.py check-fold ORIG FOLDED
        FOLDED is a valid zip listing the same entries in Keras' order;
        metadata.json and assets are byte-identical; config.json has no
        batch_normalization, the pooling layer reads conv2d, conv2d has
        use_bias; the conv kernel and new bias equal the fold computed in
        float64 within 1e-6 relative; the BatchNorm variables are gone; the
        dense variables are bit-identical.
    keras_archive.py check-fq ORIG OUT
        OUT lists the same entries; config.json, metadata.json and assets are
        byte-identical; each kernel equals NumPy's int8 symmetric
        per-output-channel fake quantization (scale max|w|/127 over the
        channel, codes rint(w/scale) in [-127, 127], value code*scale):
        codes equal and values within 1 ulp; every other variable
        bit-identical.
    keras_archive.py check-bf16 ORIG OUT
        Every variable of OUT is stored as ORIG's: 2-byte opaque with
        dtype = "bfloat16", and its 16-bit patterns equal ORIG's.
    keras_archive.py bf16-bits ORIG OUT.safetensors
        The safetensors file (parsed here from its header) holds each
        variable as BF16 with ORIG's 16-bit patterns.
    keras_archive.py check-same ORIG OUT
        Same listing, every entry but the weights byte-identical, every
        variable bit-identical.
    keras_archive.py make-st OUT.safetensors
        A one-tensor safetensors file without metadata.
    keras_archive.py hostile PREFIX
        Writes PREFIX<kind>.keras for each kind: traversal (an entry ../evil.txt), absolute (/tmp/evil.txt), huge (the
        weights entry declares 4 GiB from a few hundred deflated bytes),
        noweights (no model.weights.h5), badh5 (the weights entry is not
        HDF5), notzip (random bytes).
"""
import io
import json
import struct
import sys
import zipfile

import h5py
import numpy as np

ORDER = ["metadata.json", "config.json", "model.weights.h5", "assets/notes.txt"]
EPS = 1e-3
rng = np.random.default_rng(16)


def ktensor(name, shape, hist):
    return {"class_name": "__keras_tensor__",
            "config": {"shape": shape, "dtype": "float32", "keras_history": [hist, 0, 0]}}


def layer(cls, name, cfg, inbound):
    d = {"module": "keras.layers", "class_name": cls, "config": dict(cfg, name=name),
         "registered_name": None, "name": name}
    d["inbound_nodes"] = [{"args": [ktensor(name, None, inbound)], "kwargs": {}}] if inbound else []
    return d


def config():
    layers = [
        {"module": "keras.layers", "class_name": "InputLayer",
         "config": {"batch_shape": [None, 8, 8, 3], "dtype": "float32", "name": "input_layer"},
         "registered_name": None, "name": "input_layer", "inbound_nodes": []},
        layer("Conv2D", "conv2d", {"filters": 8, "kernel_size": [3, 3], "use_bias": False,
                                   "data_format": "channels_last"}, "input_layer"),
        layer("BatchNormalization", "batch_normalization", {"axis": -1, "epsilon": EPS}, "conv2d"),
        layer("GlobalAveragePooling2D", "global_average_pooling2d", {}, "batch_normalization"),
        layer("Dense", "dense", {"units": 4, "use_bias": True}, "global_average_pooling2d"),
    ]
    return {"module": "keras", "class_name": "Functional",
            "config": {"name": "functional", "layers": layers,
                       "input_layers": [["input_layer", 0, 0]], "output_layers": [["dense", 0, 0]]},
            "registered_name": "Functional"}


def variables():
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    bn = [f(8) + 2, f(8), f(8), (np.abs(f(8)) + 0.5).astype(np.float32)]
    return {"conv2d": [f(3, 3, 3, 8)], "batch_normalization": bn, "global_average_pooling2d": [],
            "dense": [f(8, 4), f(4)]}


def bf16_bits(a):
    """Round-to-nearest-even float32 -> bfloat16 bit patterns (uint16)."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def weights_h5(vs, bf16):
    bio = io.BytesIO()
    with h5py.File(bio, "w") as f:
        root = f.create_group("layers")
        for name, arrs in vs.items():
            g = root.create_group(name).create_group("vars")
            for i, x in enumerate(arrs):
                if bf16:
                    d = g.create_dataset(str(i), data=bf16_bits(x).view("V2"))
                    d.attrs["dtype"] = "bfloat16"
                else:
                    g.create_dataset(str(i), data=x)
        f.create_group("optimizer").create_group("vars")
        f.create_group("vars")
    return bio.getvalue()


def cmd_make(out, kind=""):
    meta = json.dumps({"keras_version": "3.3.3", "date_saved": "2026-11-26@16:00:00"})
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("metadata.json", meta)
        z.writestr("config.json", json.dumps(config()))
        z.writestr("model.weights.h5", weights_h5(variables(), kind == "bf16"))
        z.writestr("assets/notes.txt", "kept byte for byte\n")
    return 0


def load(path):
    z = zipfile.ZipFile(path)
    if z.testzip() is not None:
        raise SystemExit(f"{path}: bad CRC in {z.testzip()}")
    files = {n: z.read(n) for n in z.namelist()}
    vs, raw = {}, {}
    with h5py.File(io.BytesIO(files["model.weights.h5"]), "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                raw[name] = obj
                vs[name] = obj[()]
        f.visititems(visit)
        attrs = {n: (raw[n].dtype, dict(raw[n].attrs)) for n in raw}
    return z.namelist(), files, vs, attrs


def fail(msgs):
    if msgs:
        print("\n".join(msgs), file=sys.stderr)
        return 1
    return 0


def same_entries(names_a, names_b, files_a, files_b, keep):
    bad = []
    if names_b != names_a:
        bad.append(f"zip listing {names_b} != {names_a}")
    for n in keep:
        if files_a.get(n) != files_b.get(n):
            bad.append(f"{n} changed")
    return bad


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def cmd_check_fold(orig, folded):
    na, fa, va, _ = load(orig)
    nb, fb, vb, _ = load(folded)
    bad = same_entries(na, nb, fa, fb, ["metadata.json", "assets/notes.txt"])
    cfg = json.loads(fb["config.json"])
    layers = {l["name"]: l for l in cfg["config"]["layers"]}
    if "batch_normalization" in layers:
        bad.append("config.json still has batch_normalization")
    if not layers["conv2d"]["config"].get("use_bias"):
        bad.append("conv2d has no use_bias in config.json")
    hist = layers["global_average_pooling2d"]["inbound_nodes"][0]["args"][0]["config"]["keras_history"]
    if hist[0] != "conv2d":
        bad.append(f"pooling reads {hist[0]}, not conv2d")
    g, b, m, v = (va[f"layers/batch_normalization/vars/{i}"].astype(np.float64) for i in range(4))
    s = g / np.sqrt(v + EPS)
    ww = va["layers/conv2d/vars/0"].astype(np.float64) * s
    wb = b - m * s
    if rel(vb["layers/conv2d/vars/0"], ww) > 1e-6 or rel(vb["layers/conv2d/vars/1"], wb) > 1e-6:
        bad.append("conv2d kernel/bias differ from the NumPy fold")
    if any(k.startswith("layers/batch_normalization/") for k in vb):
        bad.append("BatchNorm variables still in the weights")
    for k in ("layers/dense/vars/0", "layers/dense/vars/1"):
        if va[k].tobytes() != vb[k].tobytes():
            bad.append(f"{k} changed")
    if not bad:
        print("check-fold: listing, config, metadata and the fold agree with NumPy")
    return fail(bad)


def fake_quant8(w):
    """int8 symmetric per-channel along the last axis (Keras kernels: HWIO, IO)."""
    w = np.asarray(w, np.float32)
    red = tuple(range(w.ndim - 1))
    scale = (np.max(np.abs(w), axis=red) / np.float32(127)).astype(np.float32)
    q = np.clip(np.rint(w / scale), -127, 127)
    return q, scale, (q * scale).astype(np.float32)


def cmd_check_fq(orig, out):
    na, fa, va, _ = load(orig)
    nb, fb, vb, _ = load(out)
    bad = same_entries(na, nb, fa, fb, ["metadata.json", "config.json", "assets/notes.txt"])
    if sorted(va) != sorted(vb):
        bad.append(f"variables {sorted(vb)} != {sorted(va)}")
    for k in sorted(va):
        if k.endswith("vars/0") and va[k].ndim >= 2:
            q, scale, ref = fake_quant8(va[k])
            got = vb[k].astype(np.float32)
            if not np.array_equal(np.rint(got / scale), q):
                bad.append(f"{k}: codes differ from NumPy's")
            if np.max(np.abs(got - ref)) > np.max(np.spacing(np.abs(ref)) + 0):
                bad.append(f"{k}: values differ from code*scale by more than an ulp")
            if np.array_equal(got, va[k]):
                bad.append(f"{k}: unchanged")
        elif va[k].tobytes() != vb[k].tobytes():
            bad.append(f"{k} changed")
    if not bad:
        print("check-fq: kernels are NumPy's int8 per-channel fake quantization; the rest is unchanged")
    return fail(bad)


def cmd_check_bf16(orig, out):
    _, _, va, aa = load(orig)
    _, _, vb, ab = load(out)
    bad = []
    if sorted(va) != sorted(vb):
        bad.append(f"variables {sorted(vb)} != {sorted(va)}")
    for k in sorted(va):
        dt, attrs = ab.get(k, (None, {}))
        if dt is None or dt.kind != "V" or dt.itemsize != 2 or attrs.get("dtype") != "bfloat16":
            bad.append(f"{k}: stored as {dt} {attrs.get('dtype')}, not opaque bfloat16")
        elif va[k].tobytes() != vb[k].tobytes():
            bad.append(f"{k}: bfloat16 bits changed")
    if not bad:
        print(f"check-bf16: {len(va)} variables round-trip bit for bit as Keras 3 bfloat16")
    return fail(bad)


def read_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    hdr = json.loads(data[8:8 + n])
    body = data[8 + n:]
    return {k: (v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in hdr.items() if k != "__metadata__"}


def cmd_bf16_bits(orig, st):
    _, _, va, _ = load(orig)
    ts = read_safetensors(st)
    bad = []
    for k in sorted(va):
        got = ts.get(k)
        if got is None:
            bad.append(f"{k} missing from {st} ({sorted(ts)})")
        elif got[0] != "BF16" or got[2] != va[k].tobytes() or list(got[1]) != list(va[k].shape):
            bad.append(f"{k}: {got[0]} {got[1]} does not hold ORIG's bfloat16 bits")
    if not bad:
        print(f"bf16-bits: {len(va)} tensors are BF16 with the archive's bit patterns")
    return fail(bad)


def cmd_check_same(orig, out):
    na, fa, va, _ = load(orig)
    nb, fb, vb, _ = load(out)
    bad = same_entries(na, nb, fa, fb, [n for n in na if n != "model.weights.h5"])
    if sorted(va) != sorted(vb) or any(va[k].tobytes() != vb[k].tobytes() for k in va):
        bad.append("variables differ")
    if not bad:
        print("check-same: same entries, same variables")
    return fail(bad)


def cmd_make_st(out):
    """A safetensors file without metadata (no Keras config)."""
    x = np.ones((2, 2), np.float32).tobytes()
    hdr = json.dumps({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, len(x)]}}).encode()
    hdr += b" " * (-len(hdr) % 8)
    open(out, "wb").write(struct.pack("<Q", len(hdr)) + hdr + x)
    return 0


HOSTILE = ["traversal", "absolute", "huge", "noweights", "badh5", "notzip"]


def cmd_hostile(prefix):
    for kind in HOSTILE:
        hostile(f"{prefix}{kind}.keras", kind)
    return 0


def hostile(out, kind):
    if kind == "notzip":
        open(out, "wb").write(rng.integers(0, 256, 4096, dtype=np.uint8).tobytes())
        return 0
    w = weights_h5(variables(), False)
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("metadata.json", "{}")
        z.writestr("config.json", json.dumps(config()))
        if kind != "noweights":
            z.writestr("model.weights.h5", {"huge": b"\0" * 100000, "badh5": b"not HDF5" * 64}.get(kind, w))
        if kind == "traversal":
            z.writestr("../evil.txt", "x")
        if kind == "absolute":
            z.writestr("/tmp/evil.txt", "x")
    if kind == "huge":
        # Declare 4 GiB - 1 for the weights in the local header and the
        # central directory alike (uncompressed-size fields).
        b = bytearray(open(out, "rb").read())
        name = b"model.weights.h5"
        for sig, off in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
            i = 0
            while True:
                i = b.find(sig, i)
                if i < 0:
                    break
                nlen = struct.unpack_from("<H", b, i + (26 if sig == b"PK\x03\x04" else 28))[0]
                noff = i + (30 if sig == b"PK\x03\x04" else 46)
                if bytes(b[noff:noff + nlen]) == name:
                    struct.pack_into("<I", b, i + off, 0xFFFFFFFF - 1)
                i += 4
        open(out, "wb").write(bytes(b))
    return 0


def main(argv):
    cmds = {"make": cmd_make, "check-fold": cmd_check_fold, "check-fq": cmd_check_fq,
            "check-bf16": cmd_check_bf16, "bf16-bits": cmd_bf16_bits, "hostile": cmd_hostile,
            "check-same": cmd_check_same, "make-st": cmd_make_st}
    if len(argv) < 2 or argv[1] not in cmds:
        print(__doc__, file=sys.stderr)
        return 2
    return cmds[argv[1]](*argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
