#!/usr/bin/env python3
"""Checks npuc's 8-bit codes against PyTorch, element for element.

    torch_codes.py ORIGINAL.safetensors ARTIFACT.safetensors [ARTIFACT ...]

For every tensor the artifact's "npuc" entry marks as encoding "quant"
(8 bits, per channel or per tensor), the original float weights are viewed
as [outer, C, inner] (the entry's "view") and quantized by
torch.quantize_per_channel(w, scales, zero_points, axis=1, dtype) (or
torch.quantize_per_tensor) with npuc's own scales and zero points; the
int_repr() must equal npuc's codes exactly.  Exit 0 and a summary line when
every code matches, 1 with the first mismatches otherwise, 77 without torch.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from npuc_test import read_st  # noqa: E402

try:
    import numpy as np
    import torch
except ImportError as e:  # pragma: no cover
    print(f"SKIP: {e}", file=sys.stderr)
    sys.exit(77)

NP = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I8": np.int8, "U8": np.uint8}


def arrays(path):
    meta, tensors = read_st(path)
    out = {}
    for name, dtype, shape, data in tensors:
        out[name] = np.frombuffer(data, dtype=NP[dtype]).reshape(shape) if dtype in NP else None
    return meta, out


def check(orig, art_path):
    meta, art = arrays(art_path)
    desc = json.loads(meta["npuc"])
    checked = values = 0
    bad = []
    for name, e in desc["tensors"].items():
        if e["encoding"] != "quant" or e["bits"] != 8 or e["granularity"] == "group":
            continue
        outer, C, inner = e["view"]
        w = torch.from_numpy(orig[name].astype(np.float32).reshape(outer, C, inner).copy())
        scales = art[e["scale"]].astype(np.float64).reshape(-1)
        if e["symmetric"]:
            zps = np.zeros(scales.shape, dtype=np.int64)
            dt = torch.qint8
            codes = art[name].view(np.int8).reshape(outer, C, inner).astype(np.int64)
        else:
            zps = art[e["zero_point"]].astype(np.int64).reshape(-1)
            dt = torch.quint8
            codes = art[name].reshape(outer, C, inner).astype(np.int64)
        if e["granularity"] == "tensor":
            q = torch.quantize_per_tensor(w, float(scales[0]), int(zps[0]), dt)
        else:
            q = torch.quantize_per_channel(w, torch.from_numpy(scales), torch.from_numpy(zps), 1, dt)
        ref = q.int_repr().numpy().astype(np.int64)
        diff = np.nonzero(ref != codes)
        checked += 1
        values += ref.size
        if diff[0].size:
            i = tuple(d[0] for d in diff)
            bad.append(f"{name}: {diff[0].size} codes differ, first at {i}: npuc {codes[i]} torch {ref[i]}")
    if bad:
        print(f"{art_path}:", file=sys.stderr)
        print("\n".join(bad[:10]), file=sys.stderr)
        return 1
    if checked == 0:
        print(f"{art_path}: no 8-bit quant tensors found", file=sys.stderr)
        return 1
    print(f"{os.path.basename(art_path)}: {checked} tensors, {values} codes equal to torch {torch.__version__}")
    return 0


def main():
    _, orig = arrays(sys.argv[1])
    return max(check(orig, a) for a in sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
