#!/usr/bin/env python3
"""Train the tiny byte-level transformer (model.py) once, on CPU.

    nice python3 bench/tiny_transformer/train.py WORKDIR [--minutes 12] [--threads 2]

Text: the Python standard library sources on this machine
(/usr/lib/python3.X/**/*.py, without test/ folders), files in sorted path
order; every 10th file goes to the held-out split, the rest to training.
Writes WORKDIR/train.bin and WORKDIR/val.bin (bytes), WORKDIR/model.safetensors
and WORKDIR/train.json (steps, time, losses).  The learning rate follows the
elapsed fraction of the time budget (warm-up, then cosine to 10%), so the number
of steps depends on the machine's load; the weights are not committed.
"""
import argparse
import glob
import json
import math
import os
import sys
import sysconfig
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import CONFIG, TinyGPT, save  # noqa: E402


def corpus(workdir):
    tr, va = os.path.join(workdir, "train.bin"), os.path.join(workdir, "val.bin")
    if not os.path.exists(tr):
        root = sysconfig.get_paths()["stdlib"]
        files = sorted(f for f in glob.glob(root + "/**/*.py", recursive=True) if "/test/" not in f and "/tests/" not in f)
        parts = ([], [])
        for i, f in enumerate(files):
            with open(f, "rb") as fh:
                parts[i % 10 == 9].append(fh.read())
        for path, p in ((tr, parts[0]), (va, parts[1])):
            with open(path, "wb") as fh:
                fh.write(b"".join(p))
        with open(os.path.join(workdir, "corpus.json"), "w") as fh:
            json.dump({"root": root, "files": len(files)}, fh)
    return np.fromfile(tr, np.uint8), np.fromfile(va, np.uint8)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workdir")
    ap.add_argument("--minutes", type=float, default=12)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    train, val = corpus(a.workdir)
    T = CONFIG["context"]
    model = TinyGPT()
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    other = [p for n, p in model.named_parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95))
    rng = np.random.default_rng(0)
    budget = a.minutes * 60
    t0 = time.time()
    step, log = 0, []
    while True:
        frac = (time.time() - t0) / budget
        if frac >= 1:
            break
        lr = a.lr * (min(1.0, step / 50) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac))))
        for g in opt.param_groups:
            g["lr"] = lr
        ix = rng.integers(0, len(train) - T - 1, a.batch)
        x = torch.from_numpy(np.stack([train[i:i + T] for i in ix]).astype(np.int64))
        y = torch.from_numpy(np.stack([train[i + 1:i + T + 1] for i in ix]).astype(np.int64))
        loss = F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 25 == 0:
            log.append((step, round(time.time() - t0, 1), round(loss.item(), 4)))
            print("step %d  %.0fs  loss %.4f nats  lr %.2e" % (step, time.time() - t0, loss.item(), lr), flush=True)
    model.eval()
    save(model, os.path.join(a.workdir, "model.safetensors"))
    with open(os.path.join(a.workdir, "train.json"), "w") as fh:
        json.dump({"config": CONFIG, "steps": step, "seconds": round(time.time() - t0, 1), "batch": a.batch,
                   "train_bytes": int(len(train)), "val_bytes": int(len(val)), "log": log}, fh)
    print("saved after %d steps" % step)


if __name__ == "__main__":
    main()
