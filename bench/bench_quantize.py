#!/usr/bin/env python3
"""Quantize throughput and memory, measured side by side in one run.

    bench/bench_quantize.py [--build build] [--gib 1] [--big-gib 2] [--dir /dev/shm] [--reps 3]
                            [--overwrite]

1. Writes a >= 1 GiB F32 safetensors model (16 x [4096, 4096] Gaussian by
   default) and a >= 2 GiB one (8 x [8192, 8192]) into --dir (tmpfs by
   default, so the disk is not what is measured), removed at the end.
2. memcpy of the same number of bytes (bench_memcpy, 1 and 2 threads): the
   yardstick, in GB/s of bytes read + written.
3. `npuc quantize --bits 8 --per-channel` (minmax, symmetric), end to end
   (process start, open, quantize, write the artifact, fsync, rename), with
   -j 1 and -j 2: GB/s of input bytes read + artifact bytes written, and the
   ratio to memcpy with the same thread count.  Alternating with these runs,
   the I/O floor (bench_iofloor, mapped and with pread): a program that
   reads every byte of the model and writes a file of the artifact's size
   the way npuc does, with no computation; npuc's time is also given as a
   multiple of the floor's.
4. In memory (bench_quantize_mem): npuc_quantize_tensor on the same shapes
   already in RAM against memcpy, alternating, best of 7: the computation
   without the file I/O.
5. NumPy in memory on the same tensors, two ways: codes only (per-channel
   amax, scale, rint, clip, int8), and the same work as npuc (codes plus the
   error sums npuc reports for every tensor: sum x^2, sum e^2, sum x*deq,
   sum deq^2, max |e|, clipped count); torch.quantize_per_channel with the
   same scales (codes only).  npuc is compared with them end to end and in
   memory.
6. `--range mse` against minmax, end to end, -j 2.
7. Peak anonymous memory (RssAnon, polled every 2 ms from /proc; the mmapped
   input does not count) of `npuc quantize` on the >= 2 GiB model, against
   its largest tensor.
Best of --reps runs (default 3) for every timing.  Before each timed npuc run
the previous run's artifact is deleted, untimed: every run writes a new file,
as a user quantizing a model does, rather than also paying for freeing the
last run's pages through -f.  Each line ends with the CPU time of the best
run (user + sys, which a busy machine disturbs less than wall time) and the
1-minute load average when it was measured.  --overwrite times runs that
replace the previous artifact with -f instead.  Prints figures only; never
fails.
"""
import argparse
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np


def write_model(path, n, rows, cols, seed):
    rng = np.random.default_rng(seed)
    hdr, off = {}, 0
    for i in range(n):
        nb = rows * cols * 4
        hdr[f"layers.{i}.weight"] = {"dtype": "F32", "shape": [rows, cols], "data_offsets": [off, off + nb]}
        off += nb
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for i in range(n):
            (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).tofile(f)
    return off


def best_of(fn, reps=3, before=None):
    """Best wall time of reps calls of fn; before() runs untimed before each."""
    best = None
    for _ in range(reps):
        if before:
            before()
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        best = dt if best is None or dt < best else best
    return best


def load():
    return f"load {os.getloadavg()[0]:.2f}"


class NpucRuns:
    """Best-of-reps timing of npuc runs that write `out`, deleted before each
    run; also the CPU time (user, sys) of the fastest run."""

    def __init__(self, npuc, reps, overwrite):
        self.npuc, self.reps, self.overwrite = npuc, reps, overwrite

    def time(self, args, out):
        best, cpu = None, (0.0, 0.0)
        if self.overwrite:
            args = args + ["-f"]
        for _ in range(self.reps):
            if os.path.exists(out) and not self.overwrite:
                os.unlink(out)
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run([self.npuc] + args + ["-o", out], check=True, stdout=subprocess.DEVNULL)
            dt = time.perf_counter() - t0
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            if best is None or dt < best:
                best, cpu = dt, (r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime)
        return best, cpu


def alternate(cmds, reps, before=None):
    """Best wall time of each command in cmds (name -> argv), the commands
    run in turn reps times so that the machine's load hits all alike;
    before() runs untimed before every run."""
    best = {k: None for k in cmds}
    for _ in range(reps):
        for k, argv in cmds.items():
            if before:
                before()
            t0 = time.perf_counter()
            subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
            dt = time.perf_counter() - t0
            best[k] = dt if best[k] is None or dt < best[k] else best[k]
    return best


def cpu_str(cpu):
    return f"cpu {cpu[0]:.3f} user + {cpu[1]:.3f} sys"


def run_watched(cmd):
    """Runs cmd; returns its wall time, CPU time (user + sys) and peak RssAnon
    (polled every 2 ms from /proc; mapped files do not count)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    peak = 0
    status = f"/proc/{p.pid}/status"
    while p.poll() is None:
        try:
            with open(status) as f:
                for line in f:
                    if line.startswith("RssAnon:"):
                        peak = max(peak, int(line.split()[1]) * 1024)
        except (FileNotFoundError, ProcessLookupError):
            break
        time.sleep(0.002)
    if p.wait() != 0:
        raise RuntimeError(f"{cmd} failed")
    dt = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return dt, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), peak


def peak_rss_anon(cmd):
    return run_watched(cmd)[2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--big-gib", type=float, default=2.0)
    ap.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    ap.add_argument("--reps", type=int, default=3, help="runs per timing (best is reported)")
    ap.add_argument("--overwrite", action="store_true",
                    help="time runs that replace the previous artifact with -f (freeing its pages is timed)")
    a = ap.parse_args()
    npuc = os.path.join(a.build, "npuc")
    memcpy = os.path.join(a.build, "bench", "bench_memcpy")
    d = tempfile.mkdtemp(prefix="npuc-bench-", dir=a.dir)
    try:
        print(f"# machine: {os.cpu_count()} cores; {load()}; files in {d}; best of {a.reps}; "
              f"{'-f over the previous artifact' if a.overwrite else 'a new artifact each run'}")
        runs = NpucRuns(npuc, a.reps, a.overwrite)
        n16 = max(1, int(round(a.gib * 16)))
        model = os.path.join(d, "m1.safetensors")
        data_bytes = write_model(model, n16, 4096, 4096, 1)
        out = os.path.join(d, "m1.q8.safetensors")
        print(f"# model: {n16} x [4096,4096] F32 = {data_bytes / 2**30:.2f} GiB")

        mc = {}
        res = subprocess.run([memcpy, str(data_bytes >> 20), "2"], check=True, capture_output=True, text=True)
        for line in res.stdout.split("\n"):
            if line.startswith("memcpy"):
                kv = dict(x.split("=") for x in line.split()[1:])
                mc[int(kv["threads"])] = float(kv["gbps"])
        for t, g in sorted(mc.items()):
            print(f"memcpy            threads={t}  {g:7.2f} GB/s (read+write)  {load()}")

        results = {}
        iofloor = os.path.join(a.build, "bench", "bench_iofloor")
        for j in (1, 2):
            dt, cpu = runs.time(["quantize", "-q", "-j", str(j), "--bits", "8", "--per-channel", model], out)
            out_bytes = os.path.getsize(out)
            moved = data_bytes + out_bytes

            def rm_out():
                if os.path.exists(out):
                    os.unlink(out)
            args = ["-j", str(j), "--bits", "8", "--per-channel", model, "-o", out]
            if a.overwrite:
                args.append("-f")
            fl = alternate({"npuc": [npuc, "quantize", "-q"] + args,
                            "mmap": [iofloor, model, out, str(out_bytes), str(j), str(n16)],
                            "pread": [iofloor, model, out, str(out_bytes), str(j), str(n16), "pread"]},
                           a.reps, None if a.overwrite else rm_out)
            dt = min(dt, fl["npuc"])
            floor = min(fl["mmap"], fl["pread"])
            gbps = moved / dt / 1e9
            results[j] = dt
            print(f"npuc quantize     -j {j}        {gbps:7.2f} GB/s  {dt:6.3f} s  ratio to memcpy({j} thr) "
                  f"{gbps / mc[j]:.2f}; {dt / floor:.2f}x the I/O floor  {cpu_str(cpu)}  {load()}")
            print(f"I/O floor         threads={j}   {moved / floor / 1e9:7.2f} GB/s  {floor:6.3f} s  ratio to memcpy "
                  f"{moved / floor / 1e9 / mc[j]:.2f}  (read the model, write {out_bytes / 2**20:.0f} MiB; "
                  f"mmap {fl['mmap']:.3f} s, pread {fl['pread']:.3f} s)  {load()}")

        mem = {}
        res = subprocess.run([os.path.join(a.build, "bench", "bench_quantize_mem"), str(n16)], check=True,
                             capture_output=True, text=True)
        for line in res.stdout.split("\n"):
            f = line.split()
            if line.startswith("threads="):
                t = int(f[0].split("=")[1])
                mem[t] = (float(f[2]), float(f[5]), float(f[7].strip("()")))
                print(f"in memory         threads={t}   memcpy {mem[t][0]:6.2f} GB/s  npuc_quantize_tensor "
                      f"{mem[t][1]:6.2f} GB/s  {mem[t][2]:6.3f} s  ratio {mem[t][1] / mem[t][0]:.2f}  {load()}")

        # NumPy: the same per-channel symmetric int8 arithmetic, in memory.
        ws = [np.memmap(model, dtype=np.float32, mode="r", offset=8 + struct.unpack("<Q", open(model, "rb").read(8))[0]
                        + i * 4096 * 4096 * 4, shape=(4096, 4096)) for i in range(n16)]
        ws = [np.array(w) for w in ws]  # in RAM: NumPy is not charged for reading the file

        def numpy_q():
            for w in ws:
                amax = np.abs(w).max(axis=1)
                scale = np.maximum(amax / np.float32(127), np.float32(1.1754944e-38))
                inv = (np.float32(1) / scale).astype(np.float32)
                np.clip(np.rint(w * inv[:, None]), -127, 127).astype(np.int8)

        def numpy_same():
            sums = []
            for w in ws:
                amax = np.abs(w).max(axis=1)
                scale = np.maximum(amax / np.float32(127), np.float32(1.1754944e-38))
                inv = (np.float32(1) / scale).astype(np.float32)
                r = np.rint(w * inv[:, None])
                clipped = int(np.count_nonzero((r < -127) | (r > 127)))
                q = np.clip(r, -127, 127)
                q.astype(np.int8)
                deq = q * scale[:, None]
                e = (deq - w).ravel()
                x, d = w.ravel(), deq.ravel()
                sums.append((float(np.dot(x, x)), float(np.dot(e, e)), float(np.dot(x, d)),
                             float(np.dot(d, d)), float(np.abs(e).max()), clipped))
            return sums

        def vs(t_other):
            s = f"npuc end to end -j 2 is {t_other / results[2]:.1f}x faster (-j 1 {t_other / results[1]:.1f}x)"
            if 2 in mem:
                s += f", in memory -j 2 {t_other / mem[2][2]:.1f}x (-j 1 {t_other / mem[1][2]:.1f}x)"
            return s
        t_np = best_of(numpy_q, a.reps)
        print(f"numpy codes       (1 thread) {(data_bytes + data_bytes / 4) / t_np / 1e9:7.2f} GB/s  {t_np:6.3f} s  "
              f"{vs(t_np)}  {load()}")
        t_np2 = best_of(numpy_same, a.reps)
        print(f"numpy same work   (BLAS dot) {(data_bytes + data_bytes / 4) / t_np2 / 1e9:7.2f} GB/s  {t_np2:6.3f} s  "
              f"{vs(t_np2)}  {load()}")
        try:
            import torch
            torch.set_num_threads(2)
            tw = [torch.from_numpy(w) for w in ws]

            def torch_q():
                for w in tw:
                    amax = w.abs().amax(dim=1)
                    scale = torch.clamp(amax / 127, min=1.1754944e-38).double()
                    torch.quantize_per_channel(w, scale, torch.zeros(w.shape[0], dtype=torch.int64), 0, torch.qint8)
            t_t = best_of(torch_q, min(a.reps, 2))
            print(f"torch {torch.__version__:10s} (2 threads) {(data_bytes + data_bytes / 4) / t_t / 1e9:7.2f} GB/s  "
                  f"{t_t:6.3f} s  {vs(t_t)}  {load()}")
        except ImportError:
            print("torch: not installed")
        del ws

        t_mse, cpu = runs.time(["quantize", "-q", "-j", "2", "--bits", "8", "--range", "mse", model], out)
        print(f"npuc --range mse  -j 2        {t_mse:6.3f} s  = {t_mse / results[2]:.2f}x the minmax time  "
              f"{cpu_str(cpu)}  {load()}")
        os.unlink(model)
        os.unlink(out)

        nbig = max(1, int(round(a.big_gib * 4)))
        big = os.path.join(d, "m2.safetensors")
        big_bytes = write_model(big, nbig, 8192, 8192, 2)
        largest = 8192 * 8192 * 4
        peak = peak_rss_anon([npuc, "quantize", "-q", "-f", "-j", "2", big, "-o", os.path.join(d, "m2.q8.safetensors")])
        bound = 2 * largest + 64 * 2**20
        print(f"peak RssAnon      {peak / 2**20:8.1f} MiB on a {big_bytes / 2**30:.2f} GiB model, largest tensor "
              f"{largest / 2**20:.0f} MiB: {peak / largest:.2f}x the largest tensor (goal <= 2x + 64 MiB = "
              f"{bound / 2**20:.0f} MiB)  {load()}")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
