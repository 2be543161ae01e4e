#!/usr/bin/env python3
"""Independent checks of npuc's layout decisions (issue 14, layouts).

    layout_check.py expect MODEL.json WEIGHTS INFO.json
        The output-channel axis each catalogued weight must have, derived from
        the catalog (conv_weights / linear_2d_weights roles, its "layout" note)
        and the weight file's own "format" metadata (safetensors __metadata__
        or the HDF5 root attribute), never from npuc; compared with
        `npuc info --json`.  Prints the tensor -> axis map as JSON on stdout.
    layout_check.py codes WEIGHTS ARTIFACT.safetensors AXES.json
        Every tensor of AXES.json ({name: axis}) is an 8-bit symmetric
        per-channel "quant" entry of ARTIFACT whose codes equal a NumPy
        reference quantized along that axis (docs/quantization.md).
    layout_check.py gen-keras3 OUT.weights.h5
    layout_check.py gen-st OUT.safetensors KIND        (lstm, paddle_bias, guess)
        Writes the generated inputs of tests/cli/layout_evidence.sh.
"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from npuc_test import read_any, read_st  # noqa: E402

import numpy as np  # noqa: E402

NP = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I8": np.int8, "U8": np.uint8}


def arrays(path):
    meta, tensors = read_any(path)
    return meta, {n: np.frombuffer(d, dtype=NP[dt]).reshape(s) for n, dt, s, d in tensors if dt in NP}


def file_format(path):
    meta, _ = read_any(path)
    return meta.get("format")


def expected_axis(fmt, catalog_layout, role, shape):
    """The output-channel axis the file's conventions imply, from the
    catalog's own layout note."""
    r = len(shape)
    if fmt == "tf":
        # "conv kernels HWIO [kh,kw,in,out], depthwise [kh,kw,in,mult], dense/matmul [in,out]"
        assert "HWIO" in catalog_layout and "[kh,kw,in,mult]" in catalog_layout, catalog_layout
        return {"conv_weight": r - 1, "dwconv_weight": r - 2, "linear_weight": 1}[role]
    # ONNX: "Conv weight OIHW [out,in/groups,kh,kw]", "MatMul constant operand [in,out]",
    # "LSTM/GRU [dirs,gates*hidden,in]" (rank 2 when dirs is squeezed out)
    assert fmt == "pt" and "OIHW" in catalog_layout and "MatMul constant operand [in,out]" in catalog_layout
    if role in ("conv_weight", "dwconv_weight"):
        return 0
    if role == "linear_weight":
        return 1
    if role == "rnn_weight":
        return r - 2
    raise ValueError(role)


def cmd_expect(catalog, weights, info_path):
    cat = json.load(open(catalog))
    info = json.load(open(info_path))
    fmt = file_format(weights)
    by_name = {t["name"]: t for t in info["tensors"]}
    want = {}
    bad = []
    for name, shape, role in cat["conv_weights"] + cat["linear_2d_weights"]:
        ax = expected_axis(fmt, cat["layout"], role, shape)
        want[name] = ax
        t = by_name.get(name)
        if t is None:
            bad.append(f"{name}: not listed by npuc info")
        elif t["out_axis"] != ax or t["shape"] != shape:
            bad.append(f"{name} {shape} ({role}): npuc says axis {t['out_axis']} ({t['layout']}, "
                       f"{t['confidence']}: {t['evidence']}), the file's conventions say {ax}")
        elif t["confidence"] not in ("certain", "convention") or not t["evidence"]:
            bad.append(f"{name}: confidence {t['confidence']}, evidence {t['evidence']!r}")
    if bad:
        print("\n".join(bad[:20]), file=sys.stderr)
        return 1
    json.dump(want, sys.stdout)
    return 0


def reference_codes(w, axis):
    """Symmetric 8-bit per-channel codes along axis (docs/quantization.md)."""
    w = np.moveaxis(w.astype(np.float32), axis, 0)
    amax = np.abs(w.reshape(w.shape[0], -1)).max(axis=1).astype(np.float32)
    scale = np.maximum(amax / np.float32(127), np.float32(1.17549435e-38)).astype(np.float32)
    inv = (np.float32(1) / scale).astype(np.float32)
    v = (w * inv.reshape((-1,) + (1,) * (w.ndim - 1))).astype(np.float32)
    q = np.clip(np.rint(v), -127, 127).astype(np.int64)
    return np.moveaxis(q, 0, axis)


def cmd_codes(weights, artifact, axes_path):
    axes = json.load(open(axes_path))
    _, orig = arrays(weights)
    meta, art = read_st(artifact)
    desc = json.loads(meta["npuc"])["tensors"]
    stored = {n: (dt, s, d) for n, dt, s, d in art}
    bad = []
    values = 0
    for name, axis in axes.items():
        e = desc.get(name)
        if not e or e["encoding"] != "quant" or e["bits"] != 8 or e["granularity"] != "channel":
            bad.append(f"{name}: not an 8-bit per-channel quant entry ({e})")
            continue
        w = orig[name]
        dt, _, data = stored[e["codes"]]
        codes = np.frombuffer(data, dtype=np.int8).astype(np.int64).reshape(w.shape)
        ref = reference_codes(w, axis)
        if e["view"][1] != w.shape[axis] and not (axis == w.ndim - 2 and w.shape[-1] == 1):
            bad.append(f"{name}: view {e['view']} does not have {w.shape[axis]} channels")
        diff = int((codes != ref).sum())
        if diff:
            bad.append(f"{name}: {diff} of {w.size} codes differ from NumPy along axis {axis}")
        values += w.size
    if bad:
        print("\n".join(bad[:20]), file=sys.stderr)
        return 1
    print(f"{os.path.basename(weights)}: {len(axes)} tensors, {values} codes equal NumPy along the expected axes")
    return 0


def write_st(path, tensors, meta=None):
    header = {}
    off = 0
    blobs = []
    if meta:
        header["__metadata__"] = meta
    for name, arr in tensors:
        b = np.ascontiguousarray(arr, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def cmd_gen_keras3(out):
    import h5py
    rng = np.random.default_rng(14)
    with h5py.File(out, "w") as f:
        f.create_dataset("layers/depthwise_conv2d/vars/0", data=rng.standard_normal((3, 3, 16, 1), dtype=np.float32))
        f.create_dataset("layers/depthwise_conv2d/vars/1", data=rng.standard_normal(16, dtype=np.float32))
        for i in range(4):
            f.create_dataset(f"layers/batch_normalization/vars/{i}", data=rng.random(16, dtype=np.float32) + 0.5)
        f.create_dataset("layers/conv2d/vars/0", data=rng.standard_normal((3, 3, 16, 32), dtype=np.float32))
        f.create_dataset("layers/conv2d/vars/1", data=rng.standard_normal(32, dtype=np.float32))
    # What the file's own structure implies: Keras DepthwiseConv2D [kh,kw,in,mult]
    # channels on axis 2, Conv2D [kh,kw,in,out] on axis 3.
    json.dump({"layers/depthwise_conv2d/vars/0": 2, "layers/conv2d/vars/0": 3}, sys.stdout)
    return 0


def cmd_gen_st(out, kind):
    rng = np.random.default_rng(15)
    if kind == "lstm":
        h, i = 16, 24
        write_st(out, [("rnn.lstm.W", rng.standard_normal((1, 4 * h, i), dtype=np.float32)),
                       ("rnn.lstm.R", rng.standard_normal((1, 4 * h, h), dtype=np.float32)),
                       ("rnn.lstm.B", rng.standard_normal((1, 8 * h), dtype=np.float32))])
        json.dump({"rnn.lstm.W": 1, "rnn.lstm.R": 1}, sys.stdout)
    elif kind == "paddle_bias":
        write_st(out, [("conv2d_transpose_0.w_0", rng.standard_normal((8, 24, 3, 3), dtype=np.float32)),
                       ("conv2d_transpose_0.b_0", rng.standard_normal((1, 24, 1, 1), dtype=np.float32))])
    elif kind == "guess":
        write_st(out, [("blob", rng.standard_normal((3, 3, 16, 32), dtype=np.float32)),
                       ("stuff", rng.standard_normal((40, 24), dtype=np.float32))])
    else:
        raise ValueError(kind)
    return 0


def main(argv):
    cmd = argv[1]
    if cmd == "expect":
        return cmd_expect(*argv[2:5])
    if cmd == "codes":
        return cmd_codes(*argv[2:5])
    if cmd == "gen-keras3":
        return cmd_gen_keras3(argv[2])
    if cmd == "gen-st":
        return cmd_gen_st(argv[2], argv[3])
    raise SystemExit(f"unknown command {cmd}")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
