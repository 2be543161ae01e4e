#!/usr/bin/env python3
"""Writes a zoo of small deterministic weight files for the batch tests and
benchmarks (standard library only: safetensors written by hand; HDF5 copies
are made by the caller with `npuc convert`).

    make_zoo.py DIR N [--corrupt K]

Writes DIR/vision/cnn_XXX.safetensors (PyTorch-named CNN with BatchNorm) and
DIR/nlp/mlp_XXX.safetensors (MLP) alternately, N files in all, with shapes
and values from the file's index; with --corrupt K, K more files that are
not valid weight files: a truncated safetensors and a garbage .h5 (and, for
K > 2, more truncated ones).  Prints the paths of the .safetensors files
that the caller may convert to HDF5 (every third one), one per line.
"""
import json
import os
import random
import struct
import sys


def st_bytes(tensors, meta):
    header = {"__metadata__": meta}
    blob = b""
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + blob


def f32(rng, n, scale=1.0, positive=False):
    vals = [abs(rng.gauss(0, scale)) + 0.05 if positive else rng.gauss(0, scale) for _ in range(n)]
    return struct.pack("<%df" % n, *vals)


def cnn(i):
    rng = random.Random(1000 + i)
    c1, c2, k = 4 + 4 * (i % 3), 8 + 8 * (i % 2), 10
    t = []
    t.append(("features.0.weight", "F32", [c1, 3, 3, 3], f32(rng, c1 * 27, 0.3)))
    for name, c in (("features.1", c1), ("features.4", c2)):
        if name == "features.4":
            t.append(("features.3.weight", "F32", [c2, c1, 3, 3], f32(rng, c2 * c1 * 9, 0.2)))
            t.append(("features.3.bias", "F32", [c2], f32(rng, c2, 0.1)))
        t.append((name + ".weight", "F32", [c], f32(rng, c, 0.2, True)))
        t.append((name + ".bias", "F32", [c], f32(rng, c, 0.1)))
        t.append((name + ".running_mean", "F32", [c], f32(rng, c, 0.1)))
        t.append((name + ".running_var", "F32", [c], f32(rng, c, 0.5, True)))
        t.append((name + ".num_batches_tracked", "I64", [], struct.pack("<q", 100 + i)))
    t.append(("classifier.weight", "F32", [k, c2], f32(rng, k * c2, 0.3)))
    t.append(("classifier.bias", "F32", [k], f32(rng, k, 0.1)))
    return st_bytes(t, {"format": "pt", "zoo_index": str(i)})


def mlp(i):
    rng = random.Random(5000 + i)
    d, h = 16 * (1 + i % 4), 32 * (1 + i % 3)
    t = [("fc1.weight", "F32", [h, d], f32(rng, h * d, 0.2)), ("fc1.bias", "F32", [h], f32(rng, h, 0.1)),
         ("fc2.weight", "F32", [d, h], f32(rng, d * h, 0.2)), ("fc2.bias", "F32", [d], f32(rng, d, 0.1)),
         ("head.weight", "F32", [10, d], f32(rng, 10 * d, 0.2))]
    return st_bytes(t, {"format": "pt", "zoo_index": str(i)})


def main():
    out, n = sys.argv[1], int(sys.argv[2])
    corrupt = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[3] == "--corrupt" else 0
    for sub in ("vision", "nlp", "bad"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    for i in range(n):
        kind = "vision" if i % 2 == 0 else "nlp"
        path = os.path.join(out, kind, "%s_%03d.safetensors" % ("cnn" if kind == "vision" else "mlp", i))
        with open(path, "wb") as f:
            f.write(cnn(i) if kind == "vision" else mlp(i))
        if i % 3 == 2:
            print(path)
    for j in range(corrupt):
        if j == 1:
            with open(os.path.join(out, "bad", "garbage.h5"), "wb") as f:
                f.write(bytes(random.Random(j).getrandbits(8) for _ in range(4096)))
        else:
            good = cnn(900 + j)
            with open(os.path.join(out, "bad", "truncated_%d.safetensors" % j), "wb") as f:
                f.write(good[: len(good) // 2])


if __name__ == "__main__":
    main()
