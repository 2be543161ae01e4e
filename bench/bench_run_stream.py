#!/usr/bin/env python3
"""`npuc run` with the quantize step streaming its input, against the same
recipe run through intermediate files (--no-stream), side by side.

    bench/bench_run_stream.py [--build build] [--gib 1] [--dir DIR] [--reps 3]

Writes a >= 1 GiB F32 safetensors model (16 x [4096, 4096] Gaussian by
default) into --dir (default: the current folder's filesystem, since what
streaming saves is the intermediate file; pass --dir /dev/shm to take the
disk out), then for two recipes (prune 50 % -> int8 per channel, 2:4
sparsify -> int8 per channel) prints, for the streamed run and the
--no-stream run: best wall time of --reps runs, the CPU time (user + sys)
of that run, peak anonymous memory (RssAnon polled every 2 ms; the mmapped
input does not count), then the ratios, and checks that both artifacts are byte-identical.  Each line
carries the 1-minute load average.  Prints figures only.
"""
import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_quantize import run_watched, write_model  # noqa: E402

RECIPES = {
    "prune50+int8": "version: 1\nsteps:\n  - prune:\n      sparsity: 0.5\n  - quantize:\n      bits: 8\n",
    "2:4+int8": "version: 1\nsteps:\n  - sparsify:\n      pattern: \"2:4\"\n  - quantize:\n      bits: 8\n",
}


def run_once(cmd):
    """Wall time, CPU time of the child, peak RssAnon."""
    return run_watched(cmd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--dir", default=".")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    npuc = os.path.abspath(os.path.join(a.build, "npuc"))
    d = tempfile.mkdtemp(prefix="npuc-bench-stream.", dir=a.dir)
    try:
        n = max(1, round(a.gib * 16))
        model = os.path.join(d, "m.safetensors")
        size = write_model(model, n, 4096, 4096, 1)
        largest = 4096 * 4096 * 4
        print(f"npuc run, streamed vs --no-stream: {n} x [4096,4096] F32 = {size / 2**30:.2f} GiB in {a.dir}, "
              f"largest tensor {largest / 2**20:.0f} MiB, {os.cpu_count()} cores, best of {a.reps}")
        for name, text in RECIPES.items():
            rp = os.path.join(d, "r.yaml")
            with open(rp, "w") as f:
                f.write(text)
            res = {}
            for mode in ("stream", "files"):
                out = os.path.join(d, f"out.{mode}.safetensors")
                best = None
                for _ in range(a.reps):
                    if os.path.exists(out):
                        os.unlink(out)
                    cmd = [npuc, "run", "-q", "-j", "2", rp, model, "-o", out]
                    if mode == "files":
                        cmd.append("--no-stream")
                    r = run_once(cmd)
                    if best is None or r[0] < best[0]:
                        best = r
                res[mode] = best
                print(f"  {name:13s} {mode:6s} {best[0]:7.3f} s wall  {best[1]:7.3f} s cpu  "
                      f"peak RssAnon {best[2] / 2**20:7.1f} MiB  "
                      f"load {os.getloadavg()[0]:.2f}")
            same = open(os.path.join(d, "out.stream.safetensors"), "rb").read() == \
                open(os.path.join(d, "out.files.safetensors"), "rb").read()
            print(f"  {name:13s} files/stream: wall {res['files'][0] / res['stream'][0]:.2f}x, "
                  f"cpu {res['files'][1] / res['stream'][1]:.2f}x; artifacts "
                  f"{'byte-identical' if same else 'DIFFER'}")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
