#!/usr/bin/env python3
"""Small generated models for the atomic-output, signal and truncation tests.

    io_models.py dense OUT.safetensors N ROWS COLS   N F32 [ROWS, COLS] weights + biases
    io_models.py convbn OUT.safetensors N CH         N conv [CH, CH, 3, 3] + BatchNorm
                                                     (PyTorch names features.<k>)
Written with NumPy and plain struct packing (independent of npuc).
"""
import json
import struct
import sys

import numpy as np


def write(path, tensors, meta=None, keep_dtype=False):
    """Writes (name, array) pairs as safetensors: F32 (any array is converted),
    or with keep_dtype each array as its own F32 or F16; meta -> __metadata__."""
    hdr, off, blobs = {}, 0, []
    if meta:
        hdr["__metadata__"] = meta
    for name, a in tensors:
        dt = {np.float32: "F32", np.float16: "F16"}[a.dtype.type] if keep_dtype else "F32"
        b = np.ascontiguousarray(a, dtype="<f2" if dt == "F16" else "<f4").tobytes()
        hdr[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(hdr).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    kind, path = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(15)
    t = []
    if kind == "dense":
        n, r, c = map(int, sys.argv[3:6])
        for i in range(n):
            t.append((f"layers.{i}.weight", rng.standard_normal((r, c), dtype=np.float32)))
            t.append((f"layers.{i}.bias", rng.standard_normal((r,), dtype=np.float32)))
    elif kind == "convbn":
        n, ch = map(int, sys.argv[3:5])
        for i in range(n):
            t.append((f"features.{2 * i}.weight", rng.standard_normal((ch, ch, 3, 3), dtype=np.float32)))
            b = f"features.{2 * i + 1}"
            t.append((f"{b}.weight", rng.uniform(0.5, 1.5, ch).astype(np.float32)))
            t.append((f"{b}.bias", rng.standard_normal(ch, dtype=np.float32)))
            t.append((f"{b}.running_mean", rng.standard_normal(ch, dtype=np.float32)))
            t.append((f"{b}.running_var", rng.uniform(0.5, 2.0, ch).astype(np.float32)))
    else:
        sys.exit(f"unknown kind {kind}")
    write(path, t)


if __name__ == "__main__":
    main()
