"""budget_check.py - independent checks for tests/cli/budget.sh (issue 32).

  make OUT                 a model whose tensors differ in size and sensitivity
  dist MODEL DQ            sum over rank >= 2 tensors of ||W - W'||^2 / ||W||^2
  bpw MODEL ART            bits per weight of the quantized tensors of an
                           artifact, read from its own header: codes + scale +
                           zero point bytes over the original element counts
  schemes ART              name scheme per quantized tensor, from the header
  calib OUT MODEL          calibration rows W.input for every weight
  outdist MODEL DQ CALIB   sum of ||(W - W')X^T||^2 / ||W X^T||^2 over them
safetensors files are read and written by the tests' own helpers (npuc_test.py,
io_models.py: the format's description, not npuc's code).
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import io_models  # noqa: E402  (the tests' independent safetensors writer)
import npuc_test  # noqa: E402  (and reader)


def read_st(path):
    """{name: (dtype, shape, bytes)} and the metadata, by npuc_test.read_st."""
    meta, tensors = npuc_test.read_st(path)
    return {n: (dt, shape, raw) for n, dt, shape, raw in tensors}, meta


def floats(t):
    dt, shape, raw = t
    assert dt in ("F32", "F16"), dt
    return np.frombuffer(raw, np.float32 if dt == "F32" else np.float16).astype(np.float64).reshape(shape)


def make(out):
    rng = np.random.default_rng(7)
    tensors = []
    shapes = [(256, 256), (512, 128), (128, 512), (256, 256), (64, 1024), (384, 128), (256, 192), (96, 96)]
    for i, (o, k) in enumerate(shapes):
        kind = i % 4
        if kind == 0:
            w = rng.normal(0, 0.05, (o, k))
        elif kind == 1:  # heavy tails
            w = rng.standard_t(2.5, (o, k)) * 0.02
        elif kind == 2:  # outlier columns
            w = rng.normal(0, 0.02, (o, k))
            w[:, rng.choice(k, 4, replace=False)] *= 40
        else:  # channels of very different scales
            w = rng.normal(0, 1, (o, k)) * np.exp(rng.normal(0, 1.5, (o, 1))) * 0.01
        tensors.append((f"layers.{i}.weight", w.astype(np.float32)))
        tensors.append((f"layers.{i}.bias", rng.normal(0, 0.1, o).astype(np.float32)))
    io_models.write(out, tensors, {"format": "pt"})


def dist(model, dq):
    a, _ = read_st(model)
    b, _ = read_st(dq)
    s = 0.0
    for name, t in a.items():
        if len(t[1]) < 2:
            continue
        w, v = floats(t), floats(b[name])
        s += float(((w - v) ** 2).sum() / (w ** 2).sum())
    print(f"{s:.12g}")


def calib(out, model):
    """W.input rows [64, K] for every weight: input columns of very different
    scales, so output and weight errors rank schemes differently."""
    rng = np.random.default_rng(11)
    m, _ = read_st(model)
    rows = []
    for name, t in m.items():
        if len(t[1]) == 2:
            k = t[1][1]
            x = rng.normal(0, 1, (64, k)) * np.exp(rng.normal(0, 1.0, k))
            rows.append((name + ".input", x.astype(np.float32)))
    io_models.write(out, rows)


def outdist(model, dq, cal):
    """sum over weights with W.input of ||(W - W') X^T||^2 / ||W X^T||^2."""
    a, _ = read_st(model)
    b, _ = read_st(dq)
    c, _ = read_st(cal)
    s = 0.0
    for name, t in a.items():
        if name + ".input" not in c:
            continue
        w, v, x = floats(t), floats(b[name]), floats(c[name + ".input"])
        s += float((((w - v) @ x.T) ** 2).sum() / ((w @ x.T) ** 2).sum())
    print(f"{s:.12g}")


def quantized(art):
    t, meta = read_st(art)
    return t, [n for n in t if n + ".scale" in t]


def bpw(model, art):
    m, _ = read_st(model)
    t, q = quantized(art)
    nbytes = sum(len(t[n][2]) + len(t[n + ".scale"][2]) + (len(t[n + ".zero_point"][2]) if n + ".zero_point" in t else 0)
                 for n in q)
    numel = sum(int(np.prod(m[n][1])) for n in q)
    print(f"{8.0 * nbytes / numel:.6f}")


def schemes(art):
    t, meta = read_st(art)
    desc = json.loads(meta["npuc"])
    for n in sorted(desc["tensors"]):
        e = desc["tensors"][n]
        if e.get("encoding") != "quant":
            continue
        g = e.get("group_size") or 0
        gran = f"g{g}" if g else ("t" if e.get("granularity") == "tensor" else "ch")
        print(n, f"{'int' if e['symmetric'] else 'uint'}{e['bits']}/{gran}")


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"make": make, "dist": dist, "bpw": bpw, "schemes": schemes, "calib": calib, "outdist": outdist}[cmd](*args)
