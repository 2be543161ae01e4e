#!/usr/bin/env python3
"""calib_check.py - independent references for `npuc calibrate` and the
AIMET / TensorRT exporters (tests/cli/calibrate.sh).  NumPy only; nothing
here calls npuc.

    calib_check.py make DIR               activation samples and a small model
    calib_check.py check DIR CALIB METHOD SYM AXIS
                                          every number of CALIB against NumPy
    calib_check.py same A.json B.json     the activations of two runs are equal
    calib_check.py trt DIR CACHE VERSION  the cache's bytes, built by hand
    calib_check.py schema ENC SCHEMA      ENC validates against SCHEMA
    calib_check.py acts ENC CALIB         activation_encodings = CALIB's grids
    calib_check.py params ENC MODEL ART [SKIPPED...]
                                          codes recomputed from ENC = ART's codes
    calib_check.py batch                  the commands above, one per line on stdin

Entropy is TensorRT's EntropyCalibration2 as NVIDIA's pytorch-quantization
computes it (calib/histogram.py, _compute_amax_entropy), re-implemented here
loop for loop from that description: bins[0] = bins[1]; for i = 128..2048 the
reference P = bins[:i] with the outliers added to its last bin, Q = bins[:i]
merged into 128 levels by np.digitize over linspace(0, i, 129), each level
spread over its nonzero bins; KL(P || Q) as scipy.stats.entropy (an empty Q
under P mass is +inf); the last minimum wins; amax = bin_edges[i].
"""
import json
import math
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import io_models  # noqa: E402

BINS = 2048


def read_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        dt = {"F32": "<f4", "I8": "i1", "U8": "u1", "F16": "<f2"}[v["dtype"]]
        out[k] = np.frombuffer(data[a:b], dtype=dt).reshape(v["shape"])
    return out, hdr.get("__metadata__", {})


def make(d):
    rng = np.random.default_rng(17)
    g = rng.standard_normal((8192, 4)).astype(np.float32)
    lap = rng.laplace(size=(8192, 4)).astype(np.float32)
    relu = np.maximum(rng.standard_normal((2048, 4, 8)) * np.array([1.0, 2.0, 0.5, 3.0]).reshape(1, 4, 1), 0).astype(np.float32)
    acts = [("gauss", g), ("laplace", lap), ("relu", relu)]
    io_models.write(os.path.join(d, "acts.safetensors"), acts)
    # The same samples split: rows 0..999 in one file, the rest in another.
    io_models.write(os.path.join(d, "part1.safetensors"), [(n, a[:1000]) for n, a in acts])
    io_models.write(os.path.join(d, "part2.safetensors"), [(n, a[1000:]) for n, a in acts])
    import h5py
    with h5py.File(os.path.join(d, "part2.h5"), "w") as f:
        for n, a in acts:
            f.create_dataset(n, data=a[1000:])
    w = [("layers.0.weight", rng.standard_normal((64, 128)).astype(np.float32)),
         ("layers.0.bias", rng.standard_normal(64).astype(np.float32)),
         ("layers.1.weight", rng.standard_normal((32, 16, 3, 3)).astype(np.float32)),
         ("layers.2.weight", rng.standard_normal((10, 64)).astype(np.float32) * 0.01)]
    io_models.write(os.path.join(d, "model.safetensors"), w)


# ------------------------------------------------------------ references


def hist_abs(x, amax):
    """floor(|x| * 2048 / amax) in double, the last bin closed at amax."""
    h = np.zeros(BINS, np.int64)
    if amax == 0:
        h[0] = x.size
        return h
    u = np.floor(np.abs(x).astype(np.float64) * BINS / np.float64(amax))
    idx = np.minimum(u, BINS - 1).astype(np.int64)
    np.add.at(h, idx, 1)
    return h


def trt_entropy(hist, num_bits=8, start=128):
    bins = hist.astype(np.float64).copy()
    bins[0] = bins[1]
    nbins = 1 << (num_bits - 1)
    divs = []
    for i in range(start, len(bins) + 1):
        space = np.linspace(0, i, num=nbins + 1)
        dig = np.digitize(np.arange(i), space) - 1
        dig[bins[:i] == 0] = -1
        keep = dig != -1
        level_sum = np.bincount(dig[keep], weights=bins[:i][keep], minlength=nbins)
        level_cnt = np.bincount(dig[keep], minlength=nbins)
        q = np.zeros(i)
        q[keep] = level_sum[dig[keep]] / level_cnt[dig[keep]]
        p = bins[:i].copy()
        p[-1] += bins[i:].sum()
        p = p / p.sum()
        q = q / q.sum()
        m = p > 0
        if np.any(q[m] == 0):
            divs.append(np.inf)
        else:
            divs.append(float(np.sum(p[m] * np.log(p[m] / q[m]))))
    divs = np.array(divs)
    last = len(divs) - 1 - int(np.argmin(divs[::-1]))
    return start + last, divs[last]


def mse_ref(hist, amax, num_bits=8, start=128):
    w = np.float64(amax) / BINS
    c = (np.arange(BINS) + 0.5) * w
    qmax = float((1 << (num_bits - 1)) - 1)
    best, best_i = np.inf, start
    for i in range(start, BINS):
        scale = qmax / c[i]
        q = np.clip(np.rint(c * scale), -qmax - 1, qmax)
        e = float(np.sum(hist * (q / scale - c) ** 2)) / BINS
        if e < best:
            best, best_i = e, i
    return best_i, best


def pct_ref(v, p):
    """NumPy's linear definition in double from sorted float32 values."""
    a = np.sort(v.astype(np.float32))
    n = a.size
    h = (n - 1) * p / 100.0
    h = min(max(h, 0.0), n - 1)
    k = int(math.floor(h))
    frac = h - k
    val = np.float64(a[k])
    if frac > 0 and k + 1 < n:
        val = val + frac * (np.float64(a[k + 1]) - val)
    return np.float32(val)


def codes_of(lo, hi, bits, sym):
    """scale and zero point as quant.h (float32)."""
    if sym:
        qmax = (1 << (bits - 1)) - 1
        s = np.float32(np.float32(hi) / np.float32(qmax))
        return (s, 0) if s >= np.finfo(np.float32).tiny else (np.finfo(np.float32).tiny, 0)
    qmax = (1 << bits) - 1
    lo, hi = min(np.float32(lo), np.float32(0)), max(np.float32(hi), np.float32(0))
    s = np.float32((np.float64(hi) - np.float64(lo)) / qmax)
    if not s >= np.finfo(np.float32).tiny:
        return np.finfo(np.float32).tiny, 0
    z = np.float32(np.rint(np.float32(-lo) / s))
    return s, int(min(max(z, 0), qmax))


def channels(x, axis):
    if not axis:
        return [x.reshape(-1)]
    return [np.take(x, k, axis=axis).reshape(-1) for k in range(x.shape[axis])]


def check(d, calib, method, sym, axis):
    sym, axis = sym == "sym", int(axis)
    doc = json.load(open(calib))
    assert doc["schema"] == "npuc.calibration/1", doc["schema"]
    acts, _ = read_st(os.path.join(d, "acts.safetensors"))
    assert sorted(doc["activations"]) == sorted(acts), doc["activations"].keys()
    bits = doc["bits"]
    for name, x in acts.items():
        ent = doc["activations"][name]
        assert ent["samples"] == x.shape[0] and ent["shape"] == list(x.shape), (name, ent["shape"])
        chs = channels(x, axis)
        assert len(ent["channels"]) == len(chs), name
        for k, (v, e) in enumerate(zip(chs, ent["channels"])):
            where = "%s[%d] %s" % (name, k, method)
            mn, mx = np.float32(v.min()), np.float32(v.max())
            amax = max(abs(mn), abs(mx))
            assert e["count"] == v.size and np.float32(e["min"]) == mn and np.float32(e["max"]) == mx, where
            assert np.float32(e["amax"]) == amax, where
            if method == "minmax":
                lo, hi = (-amax, amax) if sym else (mn, mx)
            elif method.startswith("percentile="):
                p = float(method.split("=")[1])
                if sym:
                    t = pct_ref(np.abs(v), p)
                    lo, hi = -t, t
                else:
                    plo = min(p, 100 - p)
                    lo, hi = pct_ref(v, plo), pct_ref(v, 100 - plo)
                # NumPy's own percentile agrees within an ulp (its lerp differs in the last bit).
                want = np.percentile(np.abs(v).astype(np.float64) if sym else v.astype(np.float64),
                                     p if sym else 100 - min(p, 100 - p))
                assert abs(np.float64(hi) - want) <= 1e-6 * max(1.0, abs(want)), (where, hi, want)
            else:
                h = hist_abs(v, amax)
                assert e["histogram"] == h.tolist(), where + ": histogram"
                if method == "entropy":
                    i, kl = trt_entropy(h, bits)
                    assert e["bin"] == i, (where, e["bin"], i)
                    assert abs(e["kl"] - kl) <= 1e-9 + 1e-7 * abs(kl), (where, e["kl"], kl)
                    t = np.float32(i * (np.float64(amax) / BINS))
                else:
                    i, err = mse_ref(h, amax, bits)
                    assert e["bin"] == i, (where, e["bin"], i)
                    assert abs(e["mse"] - err) <= 1e-12 + 1e-9 * err, (where, e["mse"], err)
                    t = np.float32((i + 0.5) * (np.float64(amax) / BINS))
                t = min(t, amax)
                lo, hi = (-t, t) if sym else (max(mn, -t), min(mx, t))
            assert np.float32(e["lo"]) == np.float32(lo) and np.float32(e["hi"]) == np.float32(hi), \
                (where, e["lo"], e["hi"], lo, hi)
            s, z = codes_of(lo, hi, bits, sym)
            assert np.float32(e["scale"]) == s and e["zero_point"] == z, (where, e["scale"], s, e["zero_point"], z)
    print("calib_check: %s ok (%d activations)" % (method, len(acts)))


def same(a, b):
    ja, jb = json.load(open(a)), json.load(open(b))
    assert ja["activations"] == jb["activations"], "chunked and one-shot runs differ"


def trt(d, cache, version):
    """The cache written by hand: header, then name: big-endian float32 bits of amax / 127."""
    acts, _ = read_st(os.path.join(d, "acts.safetensors"))
    want = "TRT-%s-EntropyCalibration2\n" % version
    for name, x in acts.items():
        v = x.reshape(-1)
        amax = np.float32(np.abs(v).max())
        i, _ = trt_entropy(hist_abs(v, amax))
        t = min(np.float32(i * (np.float64(amax) / BINS)), amax)
        scale = np.float32(t / np.float32(127))
        want += "%s: %s\n" % (name, struct.pack(">f", scale).hex())
    got = open(cache, "rb").read()
    assert got == want.encode(), (got, want)


def schema(enc, sch):
    import jsonschema
    jsonschema.validate(json.load(open(enc)), json.load(open(sch)))


def encodings(doc, key):
    """name -> (bits, sym, [scale], [offset], enc_type, block) for either version."""
    out = {}
    sec = doc[key]
    if doc["version"] == "1.0.0":
        for e in sec:
            out[e["name"]] = (e["bw"], e["is_sym"], e["scale"], e["offset"], e["enc_type"], e.get("block_size", 0))
    else:
        for n, lst in sec.items():
            for e in lst:  # min/max follow from scale and offset
                assert math.isclose(e["min"], e["offset"] * e["scale"], rel_tol=1e-12), (n, e)
                assert math.isclose(e["max"], (2 ** e["bitwidth"] - 1 + e["offset"]) * e["scale"], rel_tol=1e-12)
            out[n] = (lst[0]["bitwidth"], lst[0]["is_symmetric"] == "True", [e["scale"] for e in lst],
                      [e["offset"] for e in lst], "PER_CHANNEL" if len(lst) > 1 else "PER_TENSOR", 0)
    return out


def acts_check(enc, calib):
    doc, cal = json.load(open(enc)), json.load(open(calib))
    got = encodings(doc, "activation_encodings")
    assert sorted(got) == sorted(cal["activations"]), (sorted(got), sorted(cal["activations"]))
    for n, a in cal["activations"].items():
        bits, sym, sc, off, _, _ = got[n]
        assert bits == cal["bits"] and sym == cal["symmetric"], n
        for c, s, o in zip(a["channels"], sc, off):
            assert np.float32(s) == np.float32(c["scale"]) and s == float(np.float32(s)), n
            assert o == (-(1 << (bits - 1)) if sym else -c["zero_point"]), (n, o)


def unpack(codes, n, bits, sym):
    if codes.dtype != np.uint8 or bits == 8:
        return codes.reshape(-1).astype(np.int64)
    b = np.unpackbits(codes, bitorder="little")[: n * bits].reshape(n, bits)
    v = (b * (1 << np.arange(bits))).sum(axis=1)
    if sym:
        v = np.where(v >= 1 << (bits - 1), v - (1 << bits), v)
    return v.astype(np.int64)


def params(enc, model, art, *skipped):
    doc = json.load(open(enc))
    got = encodings(doc, "param_encodings")
    w, _ = read_st(model)
    a, meta = read_st(art)
    desc = json.loads(meta["npuc"])["tensors"]
    quant = [n for n, e in desc.items() if e["encoding"] == "quant"]
    assert sorted(got) == sorted(set(quant) - set(skipped)), (sorted(got), quant, skipped)
    total = div_diff = 0
    for n, (bits, sym, sc, off, etype, block) in got.items():
        e = desc[n]
        assert e["axis"] in (0, -1), (n, e["axis"])
        x = w[n].astype(np.float32)
        O = x.shape[0]
        q_npuc = unpack(a[e["codes"]], x.size, bits, sym).reshape(x.shape)
        sc = np.array(sc, np.float64)
        assert np.all(sc.astype(np.float32).astype(np.float64) == sc), n + ": scales are not float32"
        sc = sc.astype(np.float32)
        off = np.array(off, np.int64)
        if etype == "PER_TENSOR":
            S, Z = np.full(x.shape, sc[0]), np.full(x.shape, off[0])
        elif etype == "PER_CHANNEL":
            shp = (O,) + (1,) * (x.ndim - 1)
            S, Z = np.broadcast_to(sc.reshape(shp), x.shape), np.broadcast_to(off.reshape(shp), x.shape)
        else:
            assert etype == "PER_BLOCK" and block > 0, (n, etype)
            nb = x.shape[1] // block
            S = np.repeat(sc.reshape(O, nb), block, axis=1).reshape((O, x.shape[1]) + (1,) * (x.ndim - 2))
            Z = np.repeat(off.reshape(O, nb), block, axis=1).reshape(S.shape)
            S, Z = np.broadcast_to(S, x.shape), np.broadcast_to(Z, x.shape)
        inv = (np.float32(1) / S.astype(np.float32)).astype(np.float32)
        q = np.clip(np.rint((x * inv).astype(np.float32)) - Z, 0, 2 ** bits - 1).astype(np.int64)
        want = q_npuc + (1 << (bits - 1)) if sym else q_npuc
        bad = int(np.sum(q != want))
        assert bad == 0, "%s: %d of %d codes recomputed from the encodings differ from npuc's" % (n, bad, x.size)
        qd = np.clip(np.rint((x / S.astype(np.float32)).astype(np.float32)) - Z, 0, 2 ** bits - 1)
        div_diff += int(np.sum(qd != want))
        total += x.size
    print("calib_check: %d weights in %d tensors: codes equal (x / scale instead of x * (1 / scale): %d differ)"
          % (total, len(got), div_diff))


def main(argv):
    cmd = argv[1]
    if cmd == "batch":
        # One command per line on stdin (one interpreter start for all of them).
        import shlex
        for line in sys.stdin:
            if line.strip():
                print("calib_check:", line.strip(), flush=True)
                main(["calib_check.py"] + shlex.split(line))
        return
    if cmd == "make":
        make(argv[2])
    elif cmd == "check":
        check(*argv[2:7])
    elif cmd == "same":
        same(argv[2], argv[3])
    elif cmd == "trt":
        trt(argv[2], argv[3], argv[4])
    elif cmd == "schema":
        schema(argv[2], argv[3])
    elif cmd == "acts":
        acts_check(argv[2], argv[3])
    elif cmd == "params":
        params(*argv[2:])
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main(sys.argv)
