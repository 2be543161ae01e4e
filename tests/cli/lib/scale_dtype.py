#!/usr/bin/env python3
"""--scale-dtype checks for tests/cli/scale_dtype.sh, with NumPy only.

    scale_dtype.py make OUT.safetensors
        fc1.weight [64,64], fc1.bias [64], fc2.weight [32,64] (PyTorch names,
        so per-group scales run along the 64 inputs: 2 groups of 32 per row).
    scale_dtype.py check ORIG A32 A16 ABF D16 F16
        A32/A16/ABF: the int4 -g 32 artifacts with f32/f16/bf16 scales.
        Each weight's A16 scale part is F16 and equals NumPy's
        astype(float16) of A32's f32 scales; ABF's is BF16 and equals the
        round-half-even bfloat16 of them (bit manipulation).  D16 (A16
        decompressed) and F16 (the f16 --fake-quant output) equal, for every
        weight, codes * s where s is the stored f16 scale widened to f32 and
        codes = clip(rint(w * (1/s)), -7, 7) computed here in float32: the
        codes are computed with the rounded scale and decoding uses it.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from npuc_test import read_st  # noqa: E402

import numpy as np  # noqa: E402

NP = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}
WEIGHTS = ["fc1.weight", "fc2.weight"]


def cmd_make(out):
    import json
    import struct
    rng = np.random.default_rng(716)
    ts = [("fc1.weight", rng.standard_normal((64, 64)).astype(np.float32) * 0.05),
          ("fc1.bias", rng.standard_normal(64).astype(np.float32)),
          ("fc2.weight", rng.standard_normal((32, 64)).astype(np.float32))]
    hdr, off, body = {}, 0, b""
    for n, a in ts:
        hdr[n] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
        body += a.tobytes()
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    open(out, "wb").write(struct.pack("<Q", len(h)) + h + body)
    return 0


def tensors(path):
    return {n: (dt, shape, np.frombuffer(b, dtype=NP.get(dt, np.uint8)).reshape(shape) if dt in NP else b)
            for n, dt, shape, b in read_st(path)[1]}


def bf16_bits(a):
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def cmd_check(orig, a32, a16, abf, d16, f16):
    o, t32, t16, tbf, dd, ff = (tensors(p) for p in (orig, a32, a16, abf, d16, f16))
    bad = []
    for w in WEIGHTS:
        s32 = t32[w + ".scale"]
        s16 = t16[w + ".scale"]
        sbf = tbf[w + ".scale"]
        if s32[0] != "F32" or s16[0] != "F16" or sbf[0] != "BF16":
            bad.append(f"{w}: scale dtypes {s32[0]} {s16[0]} {sbf[0]}, not F32 F16 BF16")
            continue
        if s16[2].view(np.uint16).tobytes() != s32[2].astype(np.float16).view(np.uint16).tobytes():
            bad.append(f"{w}: f16 scales are not NumPy's float16 of the f32 scales")
        if sbf[2].tobytes() != bf16_bits(s32[2]).tobytes():
            bad.append(f"{w}: bf16 scales are not the round-half-even bfloat16 of the f32 scales")
        x = o[w][2].astype(np.float32)
        s = s16[2].astype(np.float32)  # [rows, groups]
        rows, cols = x.shape
        sf = np.repeat(s, 32, axis=1)[:, :cols]
        inv = (np.float32(1) / sf).astype(np.float32)
        q = np.clip(np.rint(x * inv), -7, 7) + 0.0  # integer codes: no negative zero
        ref = (q.astype(np.float32) * sf).astype(np.float32)
        for name, got in (("decompressed", dd[w][2]), ("fake-quant", ff[w][2])):
            if got.tobytes() != ref.tobytes():
                d = np.max(np.abs(got.astype(np.float64) - ref))
                bad.append(f"{w}: {name} differs from codes * f16 scale (max |diff| {d:.3g})")
    if bad:
        print("\n".join(bad), file=sys.stderr)
        return 1
    print("scale_dtype: f16/bf16 scales are NumPy's roundings; decoding uses them exactly")
    return 0


if __name__ == "__main__":
    cmds = {"make": cmd_make, "check": cmd_check}
    sys.exit(cmds[sys.argv[1]](*sys.argv[2:]) if len(sys.argv) > 1 and sys.argv[1] in cmds else 2)
