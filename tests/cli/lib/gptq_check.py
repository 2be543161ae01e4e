#!/usr/bin/env python3
"""GPTQ and calibration files, checked against NumPy (issue 17).

    gptq_check.py make DIR          model.safetensors (fc1.weight [64, 256],
                                    fc2.weight [48, 96], emb.weight [32, 16] with no
                                    calibration data), calib.safetensors (W.input,
                                    correlated rows), calib_h.safetensors (W.hessian
                                    + W.hessian_count, F64)
    gptq_check.py check DIR ART NAMES BITS GROUP ACTORDER
                                    the artifact's codes for NAMES (a, b) against the GPTQ
                                    reference below: >= 99.9 % identical codes,
                                    output error within 1 % of the reference's and
                                    below round-to-nearest's with the same scales
    gptq_check.py same ART1 ART2 NAMES  >= 99.9 % identical codes
    gptq_check.py imp DIR WEIGHTED_ART PLAIN_ART NAMES
                                    --range mse with --calib: lower importance-weighted
                                    error than without
    gptq_check.py demo MODEL CALIB GPTQ_ART RTN_ART
                                    samples/calib/dump_calib.py's demo: GPTQ's output
                                    error below round-to-nearest's (see cmd_demo)

The reference is written from the paper's algorithm (Frantar et al. 2022,
Algorithm 1) in float64 without the lazy batching (which changes only the
order of floating-point operations): H = 2 X^T X / N, dead columns, damp *
mean(diag H), U = upper Cholesky factor of H^-1, column by column q =
quant(w), e = (w - q) / U_jj, W[:, j:] -= e U[j, j:].  Scales follow
docs/quantization.md (npuc's grid): per channel from the original row,
per group from the current weights when a group starts (act-order: from the
original weights, stored-order groups).  The quantizer is restated in
float32 as quant.h defines it (q = clamp(rint(x * (1/s)) + zp)).
"""
import json
import struct
import sys

import numpy as np

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import gguf_check  # noqa: E402  (its safetensors writer)
import npuc_test  # noqa: E402


ST_DTYPES = {"float32": "F32", "float64": "F64", "int64": "I64"}


def write_st(path, tensors):
    gguf_check.st_write(path, [(n, ST_DTYPES[str(a.dtype)], a) for n, a in tensors])


def inputs(rng, n, k):
    """Correlated rows: a random mixing of independent columns, uneven scales,
    one dead column (always 0)."""
    z = rng.standard_normal((n, k))
    mix = np.eye(k) + 0.4 * rng.standard_normal((k, k)) / np.sqrt(k)
    x = (z @ mix) * rng.uniform(0.2, 3.0, size=k)
    x[:, 5] = 0.0
    return x.astype(np.float32)


def cmd_make(d):
    rng = np.random.default_rng(17)
    w1 = rng.standard_normal((160, 640)).astype(np.float32)  # K > 2 x 256, rows > 128: blocked factor, two tiles
    w2 = (rng.standard_normal((48, 96)) * 0.1).astype(np.float32)
    emb = rng.standard_normal((32, 16)).astype(np.float32)
    x1, x2 = inputs(rng, 1024, 640), inputs(rng, 300, 96)
    write_st(d + "/model.safetensors", [("emb.weight", emb), ("fc1.weight", w1), ("fc2.weight", w2)])
    write_st(d + "/calib.safetensors", [("fc1.weight.input", x1), ("fc2.weight.input", x2.reshape(3, 100, 96))])
    h1, h2 = x1.astype(np.float64), x2.astype(np.float64)
    write_st(d + "/calib_h.safetensors", [("fc1.weight.hessian", h1.T @ h1),
                                          ("fc1.weight.hessian_count", np.array([1024], dtype=np.int64)),
                                          ("fc2.weight.hessian", h2.T @ h2),
                                          ("fc2.weight.hessian_count", np.array(300, dtype=np.int64))])


def tensors(path):
    return {n: (dt, shape, data) for n, dt, shape, data in npuc_test.read_any(path)[1]}


def codes_of(art, name):
    t = tensors(art)
    meta = json.loads(npuc_test.read_any(art)[0]["npuc"])["tensors"][name]
    bits, sym = meta["bits"], meta["symmetric"]
    shape = meta["shape"]
    n = int(np.prod(shape))
    raw = np.frombuffer(t[name][2], dtype=np.uint8)
    if meta["packed"]:
        b = np.unpackbits(raw, bitorder="little")[: n * bits].reshape(n, bits)
        q = (b.astype(np.int64) << np.arange(bits)).sum(1)
        if sym:
            q = np.where(q >= 1 << (bits - 1), q - (1 << bits), q)
    else:
        q = raw.astype(np.int8 if sym else np.uint8).astype(np.int64)
    scale = np.frombuffer(t[meta["scale"]][2], dtype="<f4").astype(np.float32)
    zp = np.zeros(scale.shape, np.int64)
    if meta.get("zero_point"):
        zp = np.frombuffer(t[meta["zero_point"]][2], dtype=np.uint8).astype(np.int64)
    return q.reshape(shape), scale, zp, meta


def params(v, bits, sym):
    """Scale and zero point of float32 values v (quant.h)."""
    lo, hi = np.float32(v.min()), np.float32(v.max())
    if sym:
        s = np.float32(max(abs(lo), abs(hi)) / np.float32((1 << (bits - 1)) - 1))
        z = 0
    else:
        l, h = min(float(lo), 0.0), max(float(hi), 0.0)
        s = np.float32((h - l) / ((1 << bits) - 1))
        s = max(s, np.float32(np.finfo(np.float32).tiny))
        z = int(np.clip(np.rint(np.float32(-l) / s), 0, (1 << bits) - 1))
    s = max(s, np.float32(np.finfo(np.float32).tiny))
    return s, z


def quant(w, s, z, bits, sym):
    qmin, qmax = (-((1 << (bits - 1)) - 1), (1 << (bits - 1)) - 1) if sym else (0, (1 << bits) - 1)
    v = np.asarray(w, dtype=np.float32) * (np.float32(1) / np.asarray(s, dtype=np.float32))
    q = np.clip(np.rint(v) + z, qmin, qmax)
    return q.astype(np.int64), ((q - z).astype(np.float32) * np.asarray(s, dtype=np.float32)).astype(np.float64)


def reference(W, X, bits, group, sym, act_order, damp=0.01):
    W = W.astype(np.float64).copy()
    rows, K = W.shape
    G = group if group else K
    X = X.astype(np.float64)
    H = 2.0 * X.T @ X / X.shape[0]
    S = np.zeros((rows, (K + G - 1) // G), np.float32)
    Z = np.zeros(S.shape, np.int64)
    static = not group or act_order
    if not group:
        for r in range(rows):
            S[r, 0], Z[r, 0] = params(W[r].astype(np.float32), bits, sym)
    dead = np.diag(H) == 0
    H[dead, dead] = 1
    W[:, dead] = 0
    if group and act_order:
        for r in range(rows):
            for g in range(S.shape[1]):
                S[r, g], Z[r, g] = params(W[r, g * G:(g + 1) * G].astype(np.float32), bits, sym)
    perm = np.argsort(-np.diag(H), kind="stable") if act_order else np.arange(K)
    W, H = W[:, perm], H[perm][:, perm]
    H[np.arange(K), np.arange(K)] += damp * np.mean(np.diag(H))
    U = np.linalg.cholesky(np.linalg.inv(H)).T
    Q = np.zeros((rows, K), np.int64)
    for i in range(K):
        j = perm[i]
        if not static and i % G == 0:
            for r in range(rows):
                S[r, i // G], Z[r, i // G] = params(W[r, i:i + G].astype(np.float32), bits, sym)
        q, dq = quant(W[:, i], S[:, j // G], Z[:, j // G], bits, sym)
        Q[:, j] = q
        e = (W[:, i] - dq) / U[i, i]
        W[:, i:] -= np.outer(e, U[i, i:])
    return Q, S, Z


def deq(Q, S, Z, G):
    K = Q.shape[1]
    g = np.arange(K) // G
    return (Q - Z[:, g]).astype(np.float32) * S[:, g]


def out_err(W, Wq, X):
    X = X.astype(np.float64)
    return np.linalg.norm((W.astype(np.float64) - Wq.astype(np.float64)) @ X.T) / np.linalg.norm(W.astype(np.float64) @ X.T)


def cmd_check(d, art, names, bits, group, act_order):
    return max(check_one(d, art, n, int(bits), int(group), int(act_order)) for n in names.split(","))


def check_one(d, art, name, bits, group, act_order):
    W = tensors(d + "/model.safetensors")[name]
    W = np.frombuffer(W[2], dtype="<f4").reshape(W[1])
    c = tensors(d + "/calib.safetensors")[name + ".input"]
    X = np.frombuffer(c[2], dtype="<f4").reshape(-1, c[1][-1])
    q, s, z, meta = codes_of(art, name)
    assert meta.get("method") == "gptq", meta
    sym = meta["symmetric"]
    G = group if group else W.shape[1]
    s, z = s.reshape(W.shape[0], -1), z.reshape(W.shape[0], -1)
    Qr, Sr, Zr = reference(W, X, bits, group, sym, act_order)
    same = float(np.mean(q == Qr))
    e_npuc = out_err(W, deq(q, s, z, G), X)
    e_ref = out_err(W, deq(Qr, Sr, Zr, G), X)
    # Round to nearest with npuc's (GPTQ's) scales.
    gi = np.arange(W.shape[1]) // G
    q_rtn, _ = quant(W, s[:, gi], z[:, gi], bits, sym)
    e_rtn = out_err(W, deq(q_rtn, s, z, G), X)
    print(f"{name} int{bits} g{group} act_order={act_order}: codes identical {same * 100:.3f} %, output error "
          f"npuc {e_npuc:.5f} reference {e_ref:.5f} rtn(same scales) {e_rtn:.5f}")
    ok = same >= 0.999 and abs(e_npuc - e_ref) <= 0.01 * e_ref and e_npuc < e_rtn
    return 0 if ok else 1


def cmd_same(a, b, names):
    return max(same_one(a, b, n) for n in names.split(","))


def same_one(a, b, name):
    qa, qb = codes_of(a, name)[0], codes_of(b, name)[0]
    same = float(np.mean(qa == qb))
    print(f"{name}: {same * 100:.3f} % codes identical")
    return 0 if same >= 0.999 else 1


def cmd_demo(model, calib, gptq_art, rtn_art):
    """samples/calib/dump_calib.py's output: GPTQ's output error, summed over
    the layers with W.input, is below round-to-nearest's, and no layer's is
    more than 10 % above it (GPTQ is greedy: on a 16-input layer of an
    untrained model it may lose a little)."""
    w, c = tensors(model), tensors(calib)
    bad, tot = 0, [0.0, 0.0]
    for name in sorted(n[:-6] for n in c if n.endswith(".input")):
        W = np.frombuffer(w[name][2], dtype="<f4").reshape(w[name][1][0], -1)
        X = np.frombuffer(c[name + ".input"][2], dtype="<f4").reshape(-1, W.shape[1])
        errs = []
        for art in (gptq_art, rtn_art):
            q, s, z, meta = codes_of(art, name)
            errs.append(out_err(W, deq(q.reshape(W.shape), s.reshape(W.shape[0], -1), z.reshape(W.shape[0], -1),
                                       W.shape[1]), X))
        print(f"{name}: output error gptq {errs[0]:.5f} rtn {errs[1]:.5f}")
        bad += errs[0] > 1.1 * errs[1]
        tot[0] += errs[0]
        tot[1] += errs[1]
    return 1 if bad or tot[0] >= tot[1] else 0


def cmd_imp(d, weighted, plain, names):
    """--calib with --range mse: the importance-weighted error sum_k imp_k
    (w - w')^2 (imp = mean x^2 of the calibration rows) of the weighted
    artifact is below the unweighted one's, for every tensor."""
    w, c = tensors(d + "/model.safetensors"), tensors(d + "/calib.safetensors")
    bad = 0
    for name in names.split(","):
        W = np.frombuffer(w[name][2], dtype="<f4").reshape(w[name][1])
        X = np.frombuffer(c[name + ".input"][2], dtype="<f4").reshape(-1, W.shape[1]).astype(np.float64)
        imp = (X * X).mean(0)
        errs = []
        for art in (weighted, plain):
            q, s, z, meta = codes_of(art, name)
            G = meta["group_size"] or W.shape[1]
            Wq = deq(q.reshape(W.shape), s.reshape(W.shape[0], -1), z.reshape(W.shape[0], -1), G)
            errs.append(float((((W - Wq) ** 2) * imp).sum()))
        print(f"{name}: importance-weighted error, weighted mse {errs[0]:.5g}, plain mse {errs[1]:.5g}")
        bad += not errs[0] < errs[1]
    return 1 if bad else 0


def main(argv):
    if argv[1] == "imp":
        return cmd_imp(*argv[2:6])
    if argv[1] == "demo":
        return cmd_demo(*argv[2:6])
    if argv[1] == "make":
        cmd_make(argv[2])
        return 0
    if argv[1] == "check":
        return cmd_check(*argv[2:8])
    if argv[1] == "same":
        return cmd_same(*argv[2:5])
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
