#!/usr/bin/env python3
"""Mixed precision under a budget (issue 32) on the tiny transformer.

    python3 bench/tiny_transformer/eval_budget.py WORKDIR NPUC [--threads 2]

WORKDIR holds train.py's model.safetensors and val.bin.  Every run quantizes
the Linear weights only (eval_quant.py's --include: qkv, proj, fc1, fc2,
head; embeddings, LayerNorms and biases stay float32), writes a real
artifact (codes and f16 scales), decompresses it and measures the held-out
loss (nats per byte) with torch:
 1. uniform schemes: int2..int8 symmetric at g32, g64, g128 and per channel;
 2. --target-size at the file size of uniform int4 g32, without calibration
    data (the allocator minimises the summed relative weight error) and with
    it (--calib: Hessians of --calib-seqs training windows, as eval_quant.py
    makes them; the relative output error), and with the Hessians plus each
    Linear's W.output_grad_sq (the mean over the same rows of the squared
    derivative of the summed loss with respect to each output channel, from
    backward hooks; the objective becomes the predicted loss increase,
    docs/budget.md);
 3. --target-bpw 3.5 and 3.0, each without data, with --calib and with
    --calib plus the sensitivities.
Prints the table of (file bytes, loss increase), and for each budgeted run
every uniform run of the same size or smaller, with whether the budget beat
it.  Writes WORKDIR/results_budget.json.  The edge rule is off
(--quantize-all) in every run, so the allocator decides the head as well.
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
from eval_quant import INCLUDE, heldout_loss, windows  # noqa: E402
from model import CONFIG, load  # noqa: E402
from dump_calib import collect, output_grads, write_safetensors  # noqa: E402  (model.py put samples/calib on the path)


def run(npuc, args, out, threads):
    cmd = [npuc, "quantize", "-q", "-f", "--quantize-all", "--include", INCLUDE, "--scale-dtype", "f16",
           "-j", str(threads)] + args + ["-o", out]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    secs = time.perf_counter() - t0
    dq = out.replace(".safetensors", ".dq.safetensors")
    subprocess.run([npuc, "decompress", "-q", "-f", out, "-o", dq], check=True, stdout=subprocess.DEVNULL)
    return os.path.getsize(out), dq, secs, " ".join(cmd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workdir")
    ap.add_argument("npuc")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval-windows", type=int, default=1024)
    ap.add_argument("--calib-seqs", type=int, default=256)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    W = a.workdir
    T = CONFIG["context"]
    val = np.fromfile(os.path.join(W, "val.bin"), np.uint8)
    n_eval = min(a.eval_windows, (len(val) - 1) // T)
    model_path = os.path.join(W, "model.safetensors")
    model = load(model_path)
    base = heldout_loss(model, val, n_eval, T)
    train = np.fromfile(os.path.join(W, "train.bin"), np.uint8)
    calib = os.path.join(W, "calib_budget.safetensors")
    rng = np.random.default_rng(1234)
    starts = rng.integers(0, len(train) - T - 1, a.calib_seqs)
    batches = (windows(train, starts[i:i + 32], T)[0] for i in range(0, len(starts), 32))
    hess = collect(model, batches, False)
    write_safetensors(calib, hess)
    calib_g = os.path.join(W, "calib_budget_grad.safetensors")
    loss = lambda m, b: F.cross_entropy(m(b[0]).reshape(-1, 256), b[1].reshape(-1), reduction="sum")  # noqa: E731
    grads = output_grads(model, (windows(train, starts[i:i + 32], T) for i in range(0, len(starts), 32)), loss)
    write_safetensors(calib_g, hess + grads)
    print("float: %.4f nats/byte, %d held-out windows of %d bytes" % (base, n_eval, T))
    res = {"float": base, "uniform": {}, "budget": {}}
    for bits in range(2, 9):
        for g in ("32", "64", "128", "ch"):
            key = "int%d/%s" % (bits, "g" + g if g != "ch" else "ch")
            flags = ["-b", str(bits)] + (["-g", g] if g != "ch" else ["--per-channel"])
            size, dq, secs, cmd = run(a.npuc, flags + [model_path], os.path.join(W, "u.safetensors"), a.threads)
            loss = heldout_loss(load(dq), val, n_eval, T)
            res["uniform"][key] = {"bytes": size, "increase": loss - base, "npuc_s": round(secs, 2)}
            print("%-12s %9d B  +%.4f nats/byte  (npuc %.1f s)" % (key, size, loss - base, secs), flush=True)
    u = res["uniform"]["int4/g32"]
    budgets = [("size=int4/g32", ["--target-size", str(u["bytes"])]),
               ("size=int4/g32 calib", ["--target-size", str(u["bytes"]), "--calib", calib]),
               ("bpw=3.5", ["--target-bpw", "3.5"]), ("bpw=3.0", ["--target-bpw", "3.0"]),
               ("size=int4/g32 calib+grad", ["--target-size", str(u["bytes"]), "--calib", calib_g]),
               ("bpw=3.5 calib", ["--target-bpw", "3.5", "--calib", calib]),
               ("bpw=3.0 calib", ["--target-bpw", "3.0", "--calib", calib]),
               ("bpw=3.5 calib+grad", ["--target-bpw", "3.5", "--calib", calib_g]),
               ("bpw=3.0 calib+grad", ["--target-bpw", "3.0", "--calib", calib_g])]
    for key, flags in budgets:
        plan = os.path.join(W, "plan_%s.json" % key.replace("/", "_").replace(" ", "_"))
        size, dq, secs, cmd = run(a.npuc, flags + ["--plan-out", plan, model_path], os.path.join(W, "b.safetensors"),
                                  a.threads)
        loss = heldout_loss(load(dq), val, n_eval, T)
        smaller = {k: v for k, v in res["uniform"].items() if v["bytes"] <= size}
        beaten = {k: loss - base < v["increase"] for k, v in smaller.items()}
        res["budget"][key] = {"bytes": size, "increase": loss - base, "npuc_s": round(secs, 2), "cmd": cmd,
                              "uniform_same_or_smaller": {k: smaller[k]["increase"] for k in smaller},
                              "beats_all": all(beaten.values())}
        print("%-14s %9d B  +%.4f nats/byte  (npuc %.1f s); uniform of that size or smaller: %s" % (
            key, size, loss - base, secs,
            ", ".join("%s +%.4f%s" % (k, smaller[k]["increase"], "" if beaten[k] else " (NOT beaten)")
                      for k in sorted(smaller, key=lambda k: smaller[k]["increase"])[:4]) or "none"), flush=True)
    for key in ("size=int4/g32", "size=int4/g32 calib", "size=int4/g32 calib+grad"):
        r = res["budget"][key]["increase"] / u["increase"]
        res["ratio " + key] = r
        print("%s: %d vs %d bytes, loss increase %.4f vs %.4f (%.2fx the uniform int4 g32)" % (
            key, res["budget"][key]["bytes"], u["bytes"], res["budget"][key]["increase"], u["increase"], r))
    with open(os.path.join(W, "results_budget.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
