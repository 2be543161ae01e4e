#!/usr/bin/env python3
"""Magnitude pruning and 2:4 sparsity throughput, side by side in one run.

    bench/bench_prune.py [--build build] [--gib 1] [--dir /dev/shm] [--reps 3]

1. Writes a >= 1 GiB F32 safetensors model (16 x [4096, 4096] Gaussian by
   default) into --dir (tmpfs by default, so the disk is not what is
   measured), removed at the end.
2. memcpy of the same number of bytes (bench_memcpy, 1 and 2 threads): the
   yardstick, in GB/s of bytes read + written.
3. In memory, through the library (ctypes on libnpuc.so, the tensors already
   in RAM, as NumPy and torch get them): npuc_prune_magnitude at 50 % and
   npuc_nm_sparsify 2:4, -j 1 and -j 2, in GB/s of bytes read + written
   (input and output are both the model's size) and as a ratio to memcpy
   with the same thread count.
4. End to end: `npuc prune --sparsity 0.5` and `npuc sparsify` (process
   start, open, compute, write the output file, fsync, rename), -j 1 and
   -j 2, same units, beside `npuc convert` of the same file (the same
   reader and writer with no computation: the floor set by the kernel's
   page-fault and write() paths), with the ratio of its time to theirs.
5. NumPy (partition based: np.argpartition on |w| per tensor, then zero the
   k chosen; 2:4 with np.argpartition inside groups of 4) and torch
   (torch.nn.utils.prune.l1_unstructured on a Linear holding each tensor;
   a 2:4 mask from topk over groups of 4) on the same tensors, in memory.
Best of --reps runs for every timing; the load average is printed beside
every figure, since this machine is shared.  Prints figures only; never
fails.  Goals (issue 4): magnitude pruning >= 0.25 of memcpy and >= 20x
NumPy; 2:4 >= 0.5 of memcpy.
"""
import argparse
import ctypes
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

ROWS = COLS = 4096


def write_model(path, n, seed):
    rng = np.random.default_rng(seed)
    hdr, off = {}, 0
    nb = ROWS * COLS * 4
    for i in range(n):
        hdr[f"layers.{i}.weight"] = {"dtype": "F32", "shape": [ROWS, COLS], "data_offsets": [off, off + nb]}
        off += nb
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for i in range(n):
            (rng.standard_normal((ROWS, COLS), dtype=np.float32) * 0.02).tofile(f)
    return off, 8 + len(h)


def best_of(fn, reps):
    best = None
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        best = dt if best is None or dt < best else best
    return best


def load():
    return f"load {os.getloadavg()[0]:.2f}"


class TensorInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("rank", ctypes.c_int),
                ("shape", ctypes.c_int64 * 8), ("numel", ctypes.c_uint64), ("nbytes", ctypes.c_uint64),
                ("role", ctypes.c_int), ("layout", ctypes.c_int), ("group", ctypes.c_char_p)]


class Lib:
    """The few library calls the in-memory figures need."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        L = self.lib
        L.npuc_ctx_new.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        L.npuc_ctx_set_threads.argtypes = [ctypes.c_void_p, ctypes.c_int]
        L.npuc_ctx_errmsg.argtypes = [ctypes.c_void_p]
        L.npuc_ctx_errmsg.restype = ctypes.c_char_p
        L.npuc_prune_magnitude.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64,
                                           ctypes.c_void_p, ctypes.c_void_p]
        L.npuc_nm_geometry.argtypes = [ctypes.c_void_p, ctypes.POINTER(TensorInfo), ctypes.c_int, ctypes.c_int,
                                       ctypes.c_void_p]
        L.npuc_nm_sparsify.argtypes = [ctypes.c_void_p, ctypes.POINTER(TensorInfo), ctypes.c_void_p,
                                       ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        self.ctx = ctypes.c_void_p()
        if L.npuc_ctx_new(ctypes.byref(self.ctx)) != 0:
            raise RuntimeError("npuc_ctx_new failed")
        self.info = TensorInfo(b"w", 1, 2, (ctypes.c_int64 * 8)(ROWS, COLS), ROWS * COLS, ROWS * COLS * 4, 3, 1,
                               None)  # F32, [4096, 4096], role linear, layout OI
        self.geom = ctypes.create_string_buffer(256)
        if L.npuc_nm_geometry(self.ctx, ctypes.byref(self.info), 2, 4, self.geom) != 0:
            raise RuntimeError(L.npuc_ctx_errmsg(self.ctx).decode())

    def threads(self, n):
        self.lib.npuc_ctx_set_threads(self.ctx, n)

    def check(self, rc):
        if rc != 0:
            raise RuntimeError(self.lib.npuc_ctx_errmsg(self.ctx).decode())

    def prune(self, w, out, k):
        self.check(self.lib.npuc_prune_magnitude(self.ctx, w.ctypes.data, w.size, k, out.ctypes.data, None))

    def nm(self, w, out):
        self.check(self.lib.npuc_nm_sparsify(self.ctx, ctypes.byref(self.info), self.geom, w.ctypes.data,
                                             out.ctypes.data, None))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    npuc = os.path.join(a.build, "npuc")
    memcpy = os.path.join(a.build, "bench", "bench_memcpy")
    d = tempfile.mkdtemp(prefix="npuc-bench-prune-", dir=a.dir)
    try:
        ntens = max(1, int(round(a.gib * 16)))
        model = os.path.join(d, "m.safetensors")
        data_bytes, data_off = write_model(model, ntens, 7)
        moved = 2 * data_bytes  # read + written, for every figure below
        print(f"# machine: {os.cpu_count()} cores; {load()}; files in {d}")
        print(f"# model: {ntens} x [{ROWS},{COLS}] F32 = {data_bytes / 2**30:.2f} GiB; "
              f"GB/s below = (bytes read + bytes written) / time, best of {a.reps}")

        mc = {}
        res = subprocess.run([memcpy, str(data_bytes >> 20), "2"], check=True, capture_output=True, text=True)
        for line in res.stdout.split("\n"):
            if line.startswith("memcpy"):
                kv = dict(x.split("=") for x in line.split()[1:])
                mc[int(kv["threads"])] = float(kv["gbps"])
        for t, g in sorted(mc.items()):
            print(f"memcpy                      threads={t}  {g:7.2f} GB/s                         ({load()})")

        mm = np.memmap(model, dtype=np.float32, mode="r", offset=data_off, shape=(ntens, ROWS, COLS))
        ws = [np.array(mm[i]) for i in range(ntens)]  # in RAM: nobody is charged for reading the file
        del mm
        out = np.empty_like(ws[0])
        k = int(0.5 * ROWS * COLS)

        lib = Lib(os.path.join(a.build, "libnpuc.so"))
        lib_t = {}
        for name, fn in (("prune 50%", lambda w: lib.prune(w, out, k)), ("2:4", lambda w: lib.nm(w, out))):
            for j in (1, 2):
                lib.threads(j)
                dt = best_of(lambda: [fn(w) for w in ws], a.reps)
                lib_t[(name, j)] = dt
                g = moved / dt / 1e9
                print(f"npuc {name:9s} in memory  -j {j}  {g:7.2f} GB/s  {dt:6.3f} s  "
                      f"ratio to memcpy({j} thr) {g / mc[j]:.2f}  ({load()})")

        cli_t = {}
        outp = os.path.join(d, "o.safetensors")
        dt = best_of(lambda: subprocess.run([npuc, "convert", "-q", "-f", model, "-o", outp], check=True,
                                            stdout=subprocess.DEVNULL), a.reps)
        g = (data_bytes + os.path.getsize(outp)) / dt / 1e9
        cli_conv = dt
        print(f"npuc convert (copy, the I/O floor) {g:7.2f} GB/s  {dt:6.3f} s  ratio to memcpy(1 thr) "
              f"{g / mc[1]:.2f}  ({load()})")
        for name, args in (("prune 50%", ["prune", "--sparsity", "0.5"]), ("2:4", ["sparsify"])):
            outp = os.path.join(d, "o.safetensors")
            for j in (1, 2):
                dt = best_of(lambda: subprocess.run([npuc] + args + ["-q", "-f", "-j", str(j), model, "-o", outp],
                                                    check=True, stdout=subprocess.DEVNULL), a.reps)
                cli_t[(name, j)] = dt
                g = (data_bytes + os.path.getsize(outp)) / dt / 1e9
                print(f"npuc {name:9s} end to end -j {j}  {g:7.2f} GB/s  {dt:6.3f} s  "
                      f"ratio to memcpy({j} thr) {g / mc[j]:.2f}, convert time / this {cli_conv / dt:.2f}  ({load()})")
            os.unlink(outp)

        # NumPy, partition based, one thread.
        def np_prune():
            for w in ws:
                o = w.copy()
                idx = np.argpartition(np.abs(w).ravel(), k - 1)[:k]
                o.ravel()[idx] = 0

        def np_24():
            for w in ws:
                g = w.reshape(-1, 4)
                drop = np.argpartition(np.abs(g), 1, axis=1)[:, :2]
                o = g.copy()
                np.put_along_axis(o, drop, 0, axis=1)

        for name, fn, key in (("prune 50%", np_prune, "prune 50%"), ("2:4", np_24, "2:4")):
            dt = best_of(fn, max(1, a.reps - 1))
            g = moved / dt / 1e9
            print(f"numpy {name:9s} (1 thread)      {g:7.2f} GB/s  {dt:6.3f} s  npuc in memory -j 1 is "
                  f"{dt / lib_t[(key, 1)]:.1f}x faster, -j 2 {dt / lib_t[(key, 2)]:.1f}x; end to end -j 2 "
                  f"{dt / cli_t[(key, 2)]:.1f}x  ({load()})")
        try:
            import torch
            import torch.nn.utils.prune as tprune
            torch.set_num_threads(2)
            tw = [torch.from_numpy(w) for w in ws]

            def torch_prune():
                for w in tw:
                    lin = torch.nn.Linear(COLS, ROWS, bias=False)
                    with torch.no_grad():
                        lin.weight.copy_(w)
                    tprune.l1_unstructured(lin, "weight", amount=0.5)
                    lin.weight  # the pruned tensor (weight_orig * mask)

            def torch_24():
                for w in tw:
                    g = w.reshape(-1, 4)
                    keep = g.abs().topk(2, dim=1).indices
                    mask = torch.zeros_like(g, dtype=torch.bool).scatter_(1, keep, True)
                    (g * mask).reshape(w.shape)

            for name, fn, key in (("prune 50%", torch_prune, "prune 50%"), ("2:4", torch_24, "2:4")):
                dt = best_of(fn, max(1, a.reps - 1))
                g = moved / dt / 1e9
                print(f"torch {torch.__version__[:6]} {name:9s} (2 thr) {g:7.2f} GB/s  {dt:6.3f} s  npuc in memory "
                      f"-j 2 is {dt / lib_t[(key, 2)]:.1f}x faster; end to end -j 2 {dt / cli_t[(key, 2)]:.1f}x  "
                      f"({load()})")
        except ImportError:
            print("torch: not installed")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
