"""budget_check.py - independent checks for tests/cli/budget.sh (issue 32).

  make OUT                 a model whose tensors differ in size and sensitivity
  dist MODEL DQ            sum over rank >= 2 tensors of ||W - W'||^2 / ||W||^2
  bpw MODEL ART            bits per weight of the quantized tensors of an
                           artifact, read from its own header: codes + scale +
                           zero point bytes over the original element counts
  schemes ART              name scheme per quantized tensor, from the header
  calib OUT MODEL          calibration rows W.input for every weight
  outdist MODEL DQ CALIB   sum of ||(W - W')X^T||^2 / ||W X^T||^2 over them
  imatrix OUT.dat MODEL    a legacy llama.cpp imatrix for every 2-D tensor
                           (gguf_kquant_check.write_dat: from the format's
                           description, random importances, some columns 1000x)
  impdist MODEL DQ DAT     sum over the imatrix's tensors of
                           sum_j imp_j (w_j - w'_j)^2 / sum_j imp_j w_j^2, imp_j
                           the importance of element j's input column
  gguf MODEL OUT.gguf PLAN TARGET_SIZE|- TARGET_BPW|- [LIB [DAT]]
                           a budgeted GGUF read with a reader written from the
                           GGUF specification (gguf_kquant_check.gguf_read):
                           every tensor the plan chose has the plan's type, the
                           file's size (header, padding, payloads as the header
                           lays them out) is the plan's file_bytes and at most
                           the target, the bpw at most the target; with LIB
                           (ggml's libggml-base.so) each chosen tensor's bytes
                           are ggml_quantize_chunk's and the plan's predicted
                           distortion is ggml's dequantization's summed
                           relative squared error; with DAT (an imatrix) the
                           bytes are ggml's weighted quantizers' and the error
                           is importance-weighted
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


def gradcalib(out, cal, model, skip=""):
    """cal's W.input rows plus W.output_grad_sq [O] for every weight but
    `skip`: per-channel loss sensitivities spread over four decades, so
    the predicted loss ranks schemes unlike the relative output error."""
    rng = np.random.default_rng(13)
    m, _ = read_st(model)
    c, _ = read_st(cal)
    rows = [(n, floats(t).astype(np.float32)) for n, t in c.items()]
    for name, t in m.items():
        if len(t[1]) == 2 and name != skip:
            g = np.exp(rng.normal(0, 2.0, t[1][0])) * (100.0 if name.startswith("layers.7") else 1.0)
            rows.append((name + ".output_grad_sq", g.astype(np.float32)))
    io_models.write(out, rows)


def lossdist(model, dq, cal):
    """sum over weights of 1/2 sum_c g_c ||(W - W')_c X^T||^2 / N (the
    predicted loss increase), g = W.output_grad_sq, X = W.input [N, K]."""
    a, _ = read_st(model)
    b, _ = read_st(dq)
    c, _ = read_st(cal)
    s = 0.0
    for name, t in a.items():
        if name + ".output_grad_sq" not in c:
            continue
        w, v, x = floats(t), floats(b[name]), floats(c[name + ".input"])
        g = floats(c[name + ".output_grad_sq"])
        e = ((w - v) @ x.T) ** 2  # [O, N]
        s += float(0.5 * (g[:, None] * e).sum() / x.shape[0])
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


def imatrix(out, model):
    import gguf_kquant_check as kq
    kq.write_dat(out, model)


def impdist(model, dq, dat):
    import gguf_kquant_check as kq
    imp = kq.read_dat(dat)
    m, _ = read_st(model)
    d, _ = read_st(dq)
    total = 0.0
    for n, v in imp.items():
        w, y = floats(m[n]), floats(d[n])
        a = v.astype(np.float64)[None, :]
        total += float((a * (w - y) ** 2).sum() / (a * w ** 2).sum())
    print(repr(total))


def gguf(model, out, plan, target, tbpw, lib=None, dat=None):
    import gguf_kquant_check as kq
    imp = kq.read_dat(dat) if dat else {}
    m, _ = read_st(model)
    plan = json.load(open(plan))
    kv, ts = kq.gguf_read(out)
    by = {t["name"]: t for t in ts}
    size = os.path.getsize(out)
    data = open(out, "rb").read()
    # The file ends where the last tensor's padded payload ends.
    r = kq.g.Reader(data)
    r.take(4), r.u32()
    nt, nkv = r.u64(), r.u64()
    for _ in range(nkv):
        r.string()
        r.value(r.u32())
    for _ in range(nt):
        r.string()
        [r.u64() for _ in range(r.u32())]
        r.u32(), r.u64()
    start = (r.p + 31) // 32 * 32
    last = max(ts, key=lambda t: t["offset"])
    end = start + last["offset"] + (len(last["raw"]) + 31) // 32 * 32
    assert end == size, f"the header lays out {end} bytes, the file has {size}"
    if "file_bytes" in plan or target != "-":
        assert plan["file_bytes"] == size, f"plan predicts {plan['file_bytes']} bytes, the file has {size}"
    if target != "-":
        assert size <= int(target), (size, target)
    chosen = {t["name"]: t["scheme"] for t in plan["tensors"]}
    assert chosen, "the plan chose nothing"
    nbytes = numel = 0
    for name, scheme in chosen.items():
        t = by[name]
        got = kq.TYPES[t["type"]][0]
        assert got == scheme, f"{name}: the file stores {got}, the plan chose {scheme}"
        nbytes += len(t["raw"])
        numel += t["n"]
    # --target-bpw counts the pinned tensors too: every rank >= 2 float tensor the plan's run quantized.
    if tbpw != "-":
        q = [t for t in ts if len(t["ne"]) >= 2 and kq.TYPES[t["type"]][0] not in ("F32",)]
        b = 8.0 * sum(len(t["raw"]) for t in q) / sum(t["n"] for t in q)
        assert float(tbpw) - 0.05 <= b <= float(tbpw), f"bpw {b} for --target-bpw {tbpw}"
    msg = f"{len(chosen)} tensors as planned ({sorted(set(chosen.values()))}), {size} bytes"
    if lib:
        lg = kq.ggml(lib)
        d = 0.0
        for name, scheme in chosen.items():
            t = by[name]
            x = floats(m[name]).astype(np.float32)
            row = x.shape[-1]
            if scheme == "F16":
                assert t["raw"] == x.astype(np.float16).tobytes(), name
                y = x.astype(np.float16).astype(np.float64)
            else:
                ref = kq.quantize(lg, t["type"], x.reshape(-1, row), imp.get(name))
                assert t["raw"] == ref, f"{name}: bytes differ from ggml_quantize_chunk ({scheme})"
                y = np.asarray(kq.dequantize(lg, t["type"], t["raw"], t["n"]), dtype=np.float64).reshape(x.shape)
            x64 = x.astype(np.float64)
            a = imp[name].astype(np.float64)[None, :] if name in imp else 1.0
            d += float((a * (x64 - y) ** 2).sum() / (a * x64 ** 2).sum())
        p = plan["predicted_distortion"]
        assert abs(p - d) <= 1e-6 * d, f"plan predicts {p}, ggml's dequantization gives {d}"
        msg += f"; bytes are ggml_quantize_chunk's, distortion {d:.6g} as predicted"
    print(msg)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"make": make, "dist": dist, "bpw": bpw, "schemes": schemes, "calib": calib, "outdist": outdist, "gguf": gguf, "imatrix": imatrix,
     "impdist": impdist, "gradcalib": gradcalib, "lossdist": lossdist}[cmd](*args)
