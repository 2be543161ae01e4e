#!/usr/bin/env python3
"""The output error of reports (issue 17, item 4), checked against NumPy.

    out_error_check.py make DIR     model.safetensors: fc.weight [48, 97] (Linear; K odd),
                                    conv.weight [16, 8, 3, 3] (OIHW, K = 72),
                                    emb.weight [32, 16] (no calibration data);
                                    calib.safetensors: W.input rows (conv: unfolded
                                    patches in in*kh*kw order, three leading axes for
                                    fc), calib_h.safetensors: only W.hessian (F64) +
                                    W.hessian_count; calib_r.safetensors: semidefinite
                                    W.hessian (fewer rows than K, a dead input),
                                    calib_rx.safetensors: the same rows as W.input,
                                    calib_i.safetensors: an indefinite fc W.hessian
    out_error_check.py check REPORT.json DENSE CALIB RTOL
                                    every tensor of the npuc.report/1 document: the
                                    output_rel_error equals ||(W - W')X|| / ||WX||
                                    computed here in float64 from MODEL (the report's
                                    first input), DENSE (the decompressed weights)
                                    and CALIB's own tensors (X from W.input, else
                                    tr(D H D^T) from W.hessian), within RTOL; tensors
                                    CALIB has nothing for carry null; the totals
                                    pool and maximise them
    out_error_check.py value REPORT.json NAME   prints the tensor's output_rel_error
"""
import json
import math
import sys

import numpy as np

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import gguf_check  # noqa: E402  (its safetensors writer)
import npuc_test  # noqa: E402

NP = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "F16": np.float16}


def write_st(path, tensors):
    names = {"float32": "F32", "float64": "F64", "int64": "I64"}
    gguf_check.st_write(path, [(n, names[str(a.dtype)], a) for n, a in tensors])


def load(path):
    out = {}
    for name, dt, shape, data in npuc_test.read_st(path)[1]:
        if dt in NP:
            out[name] = np.frombuffer(data, dtype=NP[dt]).reshape(shape)
    return out


def cmd_make(d):
    rng = np.random.default_rng(4)
    fc = rng.standard_normal((48, 97)).astype(np.float32)
    conv = (rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32)
    emb = rng.standard_normal((32, 16)).astype(np.float32)
    mix = np.eye(97) + 0.5 * rng.standard_normal((97, 97)) / np.sqrt(97)
    x_fc = (rng.standard_normal((200, 97)) @ mix * rng.uniform(0.3, 2.0, 97)).astype(np.float32)
    # Unfolded 3x3 patches of an 8-channel image, in the weight's in*kh*kw order.
    img = rng.standard_normal((8, 12, 12)).astype(np.float32)
    x_conv = np.stack([img[:, i:i + 3, j:j + 3].reshape(-1) for i in range(10) for j in range(10)])
    x_conv = np.concatenate([x_conv, 0.5 * x_conv[:50]]).astype(np.float32)  # 150 rows
    write_st(d + "/model.safetensors", [("emb.weight", emb), ("conv.weight", conv), ("fc.weight", fc)])
    write_st(d + "/calib.safetensors", [("fc.weight.input", x_fc.reshape(2, 100, 97)),
                                        ("conv.weight.input", x_conv)])
    h_fc, h_conv = x_fc.astype(np.float64), x_conv.astype(np.float64)
    write_st(d + "/calib_h.safetensors", [("fc.weight.hessian", h_fc.T @ h_fc),
                                          ("fc.weight.hessian_count", np.array([200], dtype=np.int64)),
                                          ("conv.weight.hessian", h_conv.T @ h_conv),
                                          ("conv.weight.hessian_count", np.array(150, dtype=np.int64))])
    # Semidefinite Hessians: fewer rows than K (fc 40 of 97, conv 30 of 72)
    # and a dead input each; calib_r holds only W.hessian, calib_rx the rows.
    r_fc, r_conv = h_fc[:40].copy(), h_conv[:30].copy()
    r_fc[:, 7] = 0
    r_conv[:, 5] = 0
    write_st(d + "/calib_r.safetensors", [("fc.weight.hessian", r_fc.T @ r_fc),
                                          ("fc.weight.hessian_count", np.array([40], dtype=np.int64)),
                                          ("conv.weight.hessian", r_conv.T @ r_conv),
                                          ("conv.weight.hessian_count", np.array(30, dtype=np.int64))])
    write_st(d + "/calib_rx.safetensors", [("fc.weight.input", r_fc), ("conv.weight.input", r_conv)])
    # An indefinite "Hessian" (not a sum of x x^T; the Cholesky fallback).
    h_ind = np.diag(rng.uniform(0.5, 2.0, 97))
    h_ind[[3, 30, 60], [3, 30, 60]] = -0.1
    write_st(d + "/calib_i.safetensors", [("fc.weight.hessian", h_ind),
                                          ("fc.weight.hessian_count", np.array([1], dtype=np.int64))])


def expected(w, wq, cal, name):
    """||(W - W')X|| / ||WX|| with W as [out, K] (OI, OIHW: rows as stored)."""
    W = w.astype(np.float64).reshape(w.shape[0], -1)
    D = W - wq.astype(np.float64).reshape(W.shape)
    if name + ".input" in cal:
        X = cal[name + ".input"].astype(np.float64).reshape(-1, W.shape[1])
        e2, y2 = np.sum((X @ D.T) ** 2), np.sum((X @ W.T) ** 2)
    elif name + ".hessian" in cal:
        H = cal[name + ".hessian"].astype(np.float64)
        e2, y2 = np.sum((D @ H) * D), np.sum((W @ H) * W)
    else:
        return None, 0.0, 0.0
    return math.sqrt(e2 / y2), e2, y2


def cmd_check(report, dense, calib, rtol):
    rep = json.load(open(report))
    model = load(rep["inputs"][0]["path"])
    deq, cal = load(dense), load(calib)
    e2s = y2s = 0.0
    vals = []
    for t in rep["tensors"]:
        name, got = t["name"], t["output_rel_error"]
        if name not in model:
            continue
        want, e2, y2 = expected(model[name], deq[name], cal, name)
        if want is None:
            assert got is None, f"{name}: no calibration data, yet output_rel_error {got}"
            continue
        assert got is not None, f"{name}: calibration data, but no output_rel_error"
        assert abs(got - want) <= rtol * want, f"{name}: npuc {got!r}, NumPy {want!r}"
        print(f"{name}: output error {got:.8g} (NumPy {want:.8g}), weight rel_fro {t['error']['rel_fro']:.4g}")
        e2s += e2
        y2s += y2
        vals.append(got)
    assert vals, "no tensor has an output error"
    tot = rep["totals"]
    assert abs(tot["output_rel_error"] - math.sqrt(e2s / y2s)) <= rtol * math.sqrt(e2s / y2s), tot
    assert tot["max_output_rel_error"] == max(vals), tot


def main(argv):
    if argv[1] == "make":
        cmd_make(argv[2])
    elif argv[1] == "check":
        cmd_check(argv[2], argv[3], argv[4], float(argv[5]))
    elif argv[1] == "value":
        rep = json.load(open(argv[2]))
        print(next(t["output_rel_error"] for t in rep["tensors"] if t["name"] == argv[3]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
