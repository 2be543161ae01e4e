#!/usr/bin/env python3
"""Quantize the tiny transformer with npuc three ways and measure held-out loss.

    python3 bench/tiny_transformer/eval_quant.py WORKDIR NPUC [--threads 2]

WORKDIR holds train.py's model.safetensors, train.bin and val.bin.  Steps:
 1. calibration: samples/calib/dump_calib.py's hooks over --calib-seqs
    training windows of 128 bytes (WORKDIR/calib.safetensors: W.hessian,
    W.hessian_count, W.input_sq for every nn.Linear);
 2. for int4 g128, int4 g32, int3 g128 (symmetric, npuc's default grid):
      rtn   npuc quantize (round to nearest, minmax ranges)
      imse  npuc quantize --range mse --calib  (importance-weighted ranges)
      gptq  npuc quantize --method gptq --calib (--damp 0.01, no act-order)
    each with --fake-quant, on the Linear weights only (--include: qkv, proj,
    fc1, fc2, head).  The token and position embeddings, LayerNorms and biases
    stay float32 in every run (the embeddings have no calibration data), so
    the runs differ only in how the same Linear weights are quantized;
 3. held-out loss (nats per byte, mean over --eval-windows non-overlapping
    128-byte windows of val.bin) of each, and the increase over float.
Prints a table and writes WORKDIR/results.json.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from model import CONFIG, load  # noqa: E402
from dump_calib import collect, write_safetensors  # noqa: E402  (model.py put samples/calib on the path)

INCLUDE = r"(qkv|proj|fc1|fc2)\.weight$|^head\.weight$"
SETTINGS = [(4, 128), (4, 32), (3, 128)]
METHODS = {"rtn": [], "imse": ["--range", "mse", "--calib", "{calib}"],
           "gptq": ["--method", "gptq", "--calib", "{calib}"]}


def windows(data, starts, T):
    x = np.stack([data[s:s + T] for s in starts]).astype(np.int64)
    y = np.stack([data[s + 1:s + T + 1] for s in starts]).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def heldout_loss(model, val, n, T, batch=64):
    starts = np.arange(n) * T
    tot = 0.0
    with torch.no_grad():
        for i in range(0, n, batch):
            x, y = windows(val, starts[i:i + batch], T)
            tot += F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1), reduction="sum").item()
    return tot / (n * T)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workdir")
    ap.add_argument("npuc")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--calib-seqs", type=int, default=256)
    ap.add_argument("--eval-windows", type=int, default=1024)
    ap.add_argument("--extra", default="", help="extra npuc quantize flags for every run (e.g. '--grid full')")
    ap.add_argument("--gptq-extra", default="", help="extra flags for the GPTQ runs only (e.g. '--act-order')")
    ap.add_argument("--tag", default="", help="suffix of the output files (results<TAG>.json)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    W = a.workdir
    T = CONFIG["context"]
    train = np.fromfile(os.path.join(W, "train.bin"), np.uint8)
    val = np.fromfile(os.path.join(W, "val.bin"), np.uint8)
    n_eval = min(a.eval_windows, (len(val) - 1) // T)
    model = load(os.path.join(W, "model.safetensors"))
    calib = os.path.join(W, "calib.safetensors")
    rng = np.random.default_rng(1234)
    starts = rng.integers(0, len(train) - T - 1, a.calib_seqs)
    batches = (windows(train, starts[i:i + 32], T)[0] for i in range(0, len(starts), 32))
    write_safetensors(calib, collect(model, batches, False))
    base = heldout_loss(model, val, n_eval, T)
    print("float: %.4f nats/byte (%.4f bits), %d held-out windows of %d bytes" % (base, base / np.log(2), n_eval, T))
    res = {"float": base, "eval_bytes": n_eval * T, "calib_rows": int(len(starts) * T), "runs": {}}
    for bits, group in SETTINGS:
        for meth, flags in METHODS.items():
            out = os.path.join(W, "q_%d_%d_%s%s.safetensors" % (bits, group, meth, a.tag))
            cmd = [a.npuc, "quantize", "-q", "-f", "--quantize-all", "--include", INCLUDE, "-b", str(bits), "-g",
                   str(group), "-j", str(a.threads), "--fake-quant"] + [f.format(calib=calib) for f in flags] + \
                a.extra.split() + (a.gptq_extra.split() if meth == "gptq" else []) + [os.path.join(W, "model.safetensors"), "-o", out]
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            secs = time.perf_counter() - t0
            loss = heldout_loss(load(out), val, n_eval, T)
            key = "int%d g%d %s" % (bits, group, meth)
            res["runs"][key] = {"loss": loss, "increase": loss - base, "npuc_s": round(secs, 2),
                                "cmd": " ".join(cmd)}
            print("%-18s loss %.4f  +%.4f nats/byte  (npuc %.1f s)" % (key, loss, loss - base, secs), flush=True)
    print("\n| setting | RTN minmax | importance mse | GPTQ | GPTQ/RTN | target |\n|---|---|---|---|---|---|")
    for bits, group in SETTINGS:
        inc = {m: res["runs"]["int%d g%d %s" % (bits, group, m)]["increase"] for m in METHODS}
        r = inc["gptq"] / inc["rtn"] if inc["rtn"] > 0 else float("nan")
        tgt = 0.6 if bits == 4 else 0.5
        res["runs"]["int%d g%d" % (bits, group)] = {"ratio": r, "target": tgt, "met": r <= tgt}
        print("| int%d g%d | +%.4f | +%.4f | +%.4f | %.2f | <= %.1f %s |" % (
            bits, group, inc["rtn"], inc["imse"], inc["gptq"], r, tgt, "met" if r <= tgt else "MISSED"))
    with open(os.path.join(W, "results%s.json" % a.tag), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
