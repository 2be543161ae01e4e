#!/usr/bin/env python3
"""GGUF output speed against npuc's own int8 and int4 artifacts, side by side.

    bench/bench_gguf.py [--build build] [--gib 1] [--dir /dev/shm] [--reps 3]

Writes a >= 1 GiB F32 safetensors model (16 x [4096, 4096] Gaussian by
default) into --dir (tmpfs by default, so the disk is not what is measured)
and times, end to end (process start, open, quantize, write, fsync, rename),
best of --reps:
  - `npuc quantize --bits 8 --per-channel`        (npuc's int8 artifact)
  - `npuc convert -o x.gguf --gguf-type q8_0`     (GGUF Q8_0: 8.5 bits)
  - `npuc quantize --bits 4 --group-size 32`      (npuc's int4 g32 artifact)
  - `npuc convert -o x.gguf --gguf-type q4_0`     (GGUF Q4_0: 4.5 bits)
each line with GB/s of input read, the output size, the CPU time (user +
sys) of the best run and the GGUF/artifact time ratio.  Prints figures
only; never fails.
"""
import argparse
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_quantize import write_model  # noqa: E402  (the same 16 x [4096, 4096] Gaussian model)


def timed(cmd, out, reps):
    best = None
    for _ in range(reps):
        if os.path.exists(out):
            os.unlink(out)
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        if best is None or t < best[0]:
            best = (t, cpu)
    return best[0], best[1], os.path.getsize(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    npuc = os.path.join(a.build, "npuc")
    n = max(1, int(round(a.gib * 16)))
    src = os.path.join(a.dir, f"bench_gguf_{os.getpid()}.safetensors")
    outs = []
    try:
        nbytes = write_model(src, n, 4096, 4096, 16)
        print(f"model: {n} x [4096, 4096] F32, {nbytes / 2**30:.2f} GiB; load {os.getloadavg()[0]:.2f}")
        runs = [
            ("int8/ch artifact", ["quantize", src, "--bits", "8", "--per-channel", "-q"], ".safetensors"),
            ("GGUF Q8_0", ["convert", src, "--gguf-type", "q8_0", "-q"], ".gguf"),
            ("int4/g32 artifact", ["quantize", src, "--bits", "4", "--group-size", "32", "-q"], ".safetensors"),
            ("GGUF Q4_0", ["convert", src, "--gguf-type", "q4_0", "-q"], ".gguf"),
        ]
        res = {}
        for label, args, ext in runs:
            out = os.path.join(a.dir, f"bench_gguf_{os.getpid()}_out{ext}")
            outs.append(out)
            t, cpu, size = timed([npuc] + args + ["-o", out], out, a.reps)
            res[label] = t
            print(f"{label:18s} {t:7.3f} s  {nbytes / t / 1e9:6.2f} GB/s in  out {size / 2**20:8.1f} MiB"
                  f"  cpu {cpu:6.2f} s  load {os.getloadavg()[0]:.2f}")
        print(f"ratio GGUF Q8_0 / int8 artifact: {res['GGUF Q8_0'] / res['int8/ch artifact']:.2f}x time; "
              f"GGUF Q4_0 / int4 artifact: {res['GGUF Q4_0'] / res['int4/g32 artifact']:.2f}x time")
    finally:
        for p in [src] + outs:
            if os.path.exists(p):
                os.unlink(p)


if __name__ == "__main__":
    main()
