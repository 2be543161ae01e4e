#!/usr/bin/env python3
"""GGUF output speed against npuc's own int8 and int4 artifacts, side by side.

    bench/bench_gguf.py [--build build] [--gib 1] [--dir /dev/shm] [--reps 5]

Writes a >= 1 GiB F32 safetensors model (16 x [4096, 4096] Gaussian by
default) into --dir (tmpfs by default, so the disk is not what is measured)
and times, end to end (process start, open, quantize, write, fsync, rename):
  - `npuc quantize --bits 8 --per-channel`              (npuc's int8 artifact)
  - `npuc convert -o x.gguf --gguf-type q8_0`           (GGUF Q8_0: 8.5 bits)
  - `npuc quantize --bits 4 --group-size 32`            (npuc's int4 g32 artifact)
  - `npuc convert -o x.gguf --gguf-type q4_0`           (GGUF Q4_0: 4.5 bits)
  - `npuc quantize --bits 4 --group-size 32 --asymmetric` (int4 asym g32)
  - `npuc convert -o x.gguf --gguf-type q4_1`           (GGUF Q4_1: 5 bits)
The commands run in turn, --reps rounds of the whole list (so load on a
shared machine hits every command alike), the output removed before each
run.  Each line gives the median wall time, GB/s of input read, the output
size and the median CPU time (user + sys) of the command; each GGUF type is
then compared with its artifact by the ratio of the medians, wall and CPU.
Prints figures only; never fails.
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_quantize import write_model  # noqa: E402  (the same 16 x [4096, 4096] Gaussian model)


def run_once(cmd, out):
    if os.path.exists(out):
        os.unlink(out)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return t, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    npuc = os.path.join(a.build, "npuc")
    n = max(1, int(round(a.gib * 16)))
    src = os.path.join(a.dir, f"bench_gguf_{os.getpid()}.safetensors")
    runs = [
        ("int8/ch artifact", ["quantize", src, "--bits", "8", "--per-channel", "-q"], ".safetensors"),
        ("GGUF Q8_0", ["convert", src, "--gguf-type", "q8_0", "-q"], ".gguf"),
        ("int4/g32 artifact", ["quantize", src, "--bits", "4", "--group-size", "32", "-q"], ".safetensors"),
        ("GGUF Q4_0", ["convert", src, "--gguf-type", "q4_0", "-q"], ".gguf"),
        ("int4/g32 asym", ["quantize", src, "--bits", "4", "--group-size", "32", "--asymmetric", "-q"],
         ".safetensors"),
        ("GGUF Q4_1", ["convert", src, "--gguf-type", "q4_1", "-q"], ".gguf"),
    ]
    pairs = [("GGUF Q8_0", "int8/ch artifact"), ("GGUF Q4_0", "int4/g32 artifact"), ("GGUF Q4_1", "int4/g32 asym")]
    outs = [os.path.join(a.dir, f"bench_gguf_{os.getpid()}_{i}{ext}") for i, (_, _, ext) in enumerate(runs)]
    try:
        nbytes = write_model(src, n, 4096, 4096, 16)
        print(f"model: {n} x [4096, 4096] F32, {nbytes / 2**30:.2f} GiB; {a.reps} alternating rounds; "
              f"load {os.getloadavg()[0]:.2f}")
        wall = {r[0]: [] for r in runs}
        cpu = {r[0]: [] for r in runs}
        size = {}
        for _ in range(a.reps):
            for (label, args, _), out in zip(runs, outs):
                t, c = run_once([npuc] + args + ["-o", out], out)
                wall[label].append(t)
                cpu[label].append(c)
                size[label] = os.path.getsize(out)
                os.unlink(out)
        med = {k: statistics.median(v) for k, v in wall.items()}
        mcpu = {k: statistics.median(v) for k, v in cpu.items()}
        for label, _, _ in runs:
            print(f"{label:18s} {med[label]:7.3f} s  {nbytes / med[label] / 1e9:6.2f} GB/s in  "
                  f"out {size[label] / 2**20:8.1f} MiB  cpu {mcpu[label]:6.2f} s  "
                  f"(wall min {min(wall[label]):.3f} max {max(wall[label]):.3f})")
        for g, art in pairs:
            print(f"ratio {g} / {art}: {med[g] / med[art]:.2f}x wall, {mcpu[g] / mcpu[art]:.2f}x cpu")
        print(f"load {os.getloadavg()[0]:.2f}")
    finally:
        for p in [src] + outs:
            if os.path.exists(p):
                os.unlink(p)


if __name__ == "__main__":
    main()
