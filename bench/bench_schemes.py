#!/usr/bin/env python3
"""Every quantization scheme end to end against the I/O floor and int8 per
channel, in one table, measured in one run (issue 18).

    bench/bench_schemes.py [--build build] [--gib 1] [--dir /dev/shm] [--reps 3] [-j 2]
                           [--only REGEX] [--no-mem] [--quick]

Model: --gib GiB of F32 (16 x [4096, 4096] Gaussian per GiB; bench_quantize's
generator), and the same values as F16 and BF16 files, in --dir (tmpfs by
default so the disk is not what is measured); all removed at the end.

Rows, every one timed end to end (process start to the fsynced, renamed
output) with -j THREADS (convert has no -j), the output removed (untimed)
before each run; quantize runs with --quantize-all, so the first and last
tensors take the row's bit width too:
  - minmax quantize: bits 2..8 x {per tensor, per channel, groups 32, 64,
    128, 256} x {symmetric, asymmetric} (codes below 8 bits bit-packed);
  - --range mse at every granularity, bits 4 and 8 (symmetric) and int4
    g32 asymmetric: the ratio to the same scheme's minmax row;
  - F16 and BF16 inputs for int8 per channel and int4 g32: the ratio of
    seconds per input byte to the F32 input's, beside the same ratio of
    the two inputs' I/O floors (the codes written are as large from F16 as
    from F32, so the floor itself is not the same per byte read);
  - prune --sparsity 0.5 and sparsify (2:4), against the I/O floor;
  - GGUF q8_0/q4_0/q4_1 (npuc convert --gguf-type), against npuc's int8
    per channel / int4 g32 sym / int4 g32 asym rows (full grid for Q4_0);
  - when NPUC_LLAMA_QUANTIZE names a llama-quantize binary: its Q8_0, Q4_0,
    Q4_1 and Q4_K (--pure) on a GGUF F32 copy of the model (npuc convert
    --gguf-type f32 --gguf-arch $NPUC_LLAMA_ARCH, default llama), each run
    followed by `sync OUT` (npuc fsyncs, llama-quantize does not), timed
    together; a run that fails prints its error and drops the row.
  - the I/O floor (bench_iofloor, mapped and pread, the faster kept): read
    the input, write a file of the output's size, fsync, rename; measured
    for each input at the smallest and the largest output size of the rows
    on that input, and interpolated linearly in the output size between.
All commands run in turn, --reps rounds of the whole list, so a change in
the machine's load hits every row alike; each row shows the median wall
time, the median CPU time (user + sys) and the median 1-minute load average
at its runs; xfloor and xint8 are ratios of wall medians, cpu x8 the ratio
of CPU medians to int8 per channel's (steadier on a busy machine).  In
memory (bench_quantize_mem, best of --reps, alternating with memcpy):
npuc_quantize_tensor's GB/s (4 bytes in, 1 code byte out + scales) for
every quantize row, and its ratio to memcpy's GB/s.  The goal column checks
each row against issue 18's goals (see the legend printed below the
table).  Prints figures only; never fails.  --quick: a 64 MiB
model and one round, to show every row runs.
"""
import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_quantize import write_model  # noqa: E402  (the F32 Gaussian model)

GRANS = [("tensor", ["--per-tensor"], "t"), ("channel", ["--per-channel"], "c")] + \
        [(f"g{g}", ["--group-size", str(g)], f"g{g}") for g in (32, 64, 128, 256)]


def to_half(src, dst, kind):
    """Writes src (an F32 safetensors file) as F16 or BF16 (round half to
    even), tensor by tensor."""
    import json
    import struct
    with open(src, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        base = 8 + n
    mm = np.memmap(src, dtype=np.uint8, mode="r")
    out_hdr, off = {}, 0
    for k, v in hdr.items():
        nb = (v["data_offsets"][1] - v["data_offsets"][0]) // 2
        out_hdr[k] = {"dtype": kind, "shape": v["shape"], "data_offsets": [off, off + nb]}
        off += nb
    h = json.dumps(out_hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for k, v in hdr.items():
            a, b = v["data_offsets"]
            x = mm[base + a:base + b].view(np.float32)
            if kind == "F16":
                x.astype(np.float16).tofile(f)
            else:
                u = x.view(np.uint32).astype(np.uint64)
                ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).tofile(f)
    return off


class Row:
    def __init__(self, name, argv, inp, out, kind, mem=None, ref=None, post=None):
        self.name, self.argv, self.inp, self.out, self.kind = name, argv, inp, out, kind
        self.mem = mem          # bench_quantize_mem scheme, or None
        self.ref = ref          # name of the row this one is compared with (mse, dtype, gguf)
        self.post = post        # argv run after argv, timed with it (sync OUT)
        self.wall, self.cpu, self.load = [], [], []
        self.size = None
        self.failed = None

    def run(self, timed=True):
        if os.path.exists(self.out):
            os.unlink(self.out)
        ld = os.getloadavg()[0]
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        p = subprocess.run(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if p.returncode == 0 and self.post:
            subprocess.run(self.post, check=True)
        dt = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if p.returncode != 0:
            self.failed = (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]
            return
        self.size = os.path.getsize(self.out)
        if timed:
            self.wall.append(dt)
            self.cpu.append((r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime))
            self.load.append(ld)
        os.unlink(self.out)

    def med(self):
        return statistics.median(self.wall)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    ap.add_argument("--reps", type=int, default=3, help="rounds; medians are reported")
    ap.add_argument("-j", "--threads", type=int, default=2)
    ap.add_argument("--only", help="regex: keep only rows whose name matches (int8 channel sym is always kept)")
    ap.add_argument("--no-mem", action="store_true", help="skip the in-memory column")
    ap.add_argument("--quick", action="store_true", help="64 MiB model, one round: shows every row runs")
    a = ap.parse_args()
    if a.quick:
        a.gib, a.reps = 1 / 16, 1
    npuc = os.path.join(a.build, "npuc")
    iofloor = os.path.join(a.build, "bench", "bench_iofloor")
    memcpy = os.path.join(a.build, "bench", "bench_memcpy")
    qmem = os.path.join(a.build, "bench", "bench_quantize_mem")
    j = str(a.threads)
    d = tempfile.mkdtemp(prefix="npuc-bench-schemes-", dir=a.dir)
    try:
        n16 = max(1, int(round(a.gib * 16)))
        inputs = {"F32": os.path.join(d, "m.f32.safetensors"), "F16": os.path.join(d, "m.f16.safetensors"),
                  "BF16": os.path.join(d, "m.bf16.safetensors")}
        nbytes = {"F32": write_model(inputs["F32"], n16, 4096, 4096, 18)}
        for k in ("F16", "BF16"):
            nbytes[k] = to_half(inputs["F32"], inputs[k], k)
        print(f"# {os.cpu_count()} cores; model {n16} x [4096,4096] = {nbytes['F32'] / 2**30:.2f} GiB F32 "
              f"(+ F16, BF16 copies) in {d}; -j {j}; {a.reps} alternating rounds, medians; "
              f"load {os.getloadavg()[0]:.2f}")
        print(f"# command: {' '.join(sys.argv)}")

        rows = []
        seq = [0]

        def out_path(ext=".safetensors"):
            seq[0] += 1
            return os.path.join(d, f"o{seq[0]}{ext}")

        def q(name, args, inp="F32", mem=None, ref=None, kind="quant"):
            o = out_path()
            argv = [npuc, "quantize", "-q", "--quantize-all", "-j", j] + args + [inputs[inp], "-o", o]
            rows.append(Row(name, argv, inp, o, kind, mem, ref))

        for bits in range(2, 9):
            for gname, gargs, gcode in GRANS:
                for sym in (True, False):
                    q(f"int{bits} {gname} {'sym' if sym else 'asym'}",
                      ["--bits", str(bits)] + gargs + ([] if sym else ["--asymmetric"]),
                      mem=f"b{bits}{gcode}{'' if sym else 'a'}")
        for bits in (4, 8):
            for gname, gargs, gcode in GRANS:
                q(f"int{bits} {gname} sym mse", ["--bits", str(bits), "--range", "mse"] + gargs,
                  mem=f"b{bits}{gcode}m", ref=f"int{bits} {gname} sym", kind="mse")
        q("int4 g32 asym mse", ["--bits", "4", "--group-size", "32", "--asymmetric", "--range", "mse"],
          mem="b4g32am", ref="int4 g32 asym", kind="mse")
        for dt in ("F16", "BF16"):
            q(f"int8 channel sym {dt} in", ["--bits", "8", "--per-channel"], inp=dt, ref="int8 channel sym",
              kind="dtype")
            q(f"int4 g32 sym {dt} in", ["--bits", "4", "--group-size", "32"], inp=dt, ref="int4 g32 sym",
              kind="dtype")
        for name, args in (("prune --sparsity 0.5", ["prune", "--sparsity", "0.5"]),
                           ("sparsify --pattern 2:4", ["sparsify", "--pattern", "2:4"])):
            o = out_path()
            rows.append(Row(name, [npuc] + args + ["-q", "-j", j, inputs["F32"], "-o", o], "F32", o, "sparse"))
        q("int4 g32 sym full grid", ["--bits", "4", "--group-size", "32", "--grid", "full"])
        for t, ref in (("q8_0", "int8 channel sym"), ("q4_0", "int4 g32 sym full grid"), ("q4_1", "int4 g32 asym")):
            o = out_path(".gguf")
            rows.append(Row(f"GGUF {t.upper()} (npuc convert)", [npuc, "convert", "-q", inputs["F32"],
                                                                "--gguf-type", t, "-o", o], "F32", o, "gguf",
                            ref=ref))
        llama = os.environ.get("NPUC_LLAMA_QUANTIZE")
        if llama and os.access(llama, os.X_OK):
            gin = os.path.join(d, "m.f32.gguf")
            subprocess.run([npuc, "convert", "-q", inputs["F32"], "--gguf-type", "f32", "--gguf-arch",
                            os.environ.get("NPUC_LLAMA_ARCH", "llama"), "-o", gin], check=True)
            inputs["GGUF F32"] = gin
            nbytes["GGUF F32"] = nbytes["F32"]
            for t, ref in (("Q8_0", "GGUF Q8_0 (npuc convert)"), ("Q4_0", "GGUF Q4_0 (npuc convert)"),
                           ("Q4_1", "GGUF Q4_1 (npuc convert)"), ("Q4_K", "int4 g32 asym mse")):
                o = out_path(".gguf")
                rows.append(Row(f"llama-quantize {t} + sync", [llama, "--pure", gin, o, t, j], "GGUF F32", o,
                                "llama", ref=ref, post=["sync", o]))
        else:
            print("# llama-quantize: skipped (set NPUC_LLAMA_QUANTIZE to the binary's path to add its Q8_0, Q4_0, "
                  "Q4_1 and Q4_K rows)")
        if a.only:
            rx = re.compile(a.only)
            keep = {r.name for r in rows if rx.search(r.name)}
            keep |= {r.ref for r in rows if r.name in keep and r.ref}
            keep.add("int8 channel sym")
            rows = [r for r in rows if r.name in keep]

        # Untimed warm-up round: output sizes (for the floors) and page cache.
        for r in rows:
            r.run(timed=False)
            if r.failed:
                print(f"# {r.name}: failed, row dropped: {r.failed}")
        rows = [r for r in rows if not r.failed]

        floors = []  # (input key, out bytes, [times])
        for key in sorted({r.inp for r in rows}):
            sizes = sorted({r.size for r in rows if r.inp == key})
            for s in {sizes[0], sizes[-1]}:
                floors.append((key, s, []))

        def floor_run(key, size, acc):
            o = os.path.join(d, "floor.out")
            best = None
            for mode in ([], ["pread"]):
                t0 = time.perf_counter()
                subprocess.run([iofloor, inputs[key], o, str(size), j, str(n16)] + mode, check=True,
                               stdout=subprocess.DEVNULL)
                dt = time.perf_counter() - t0
                best = dt if best is None or dt < best else best
                os.unlink(o)
            acc.append(best)

        for rnd in range(a.reps):
            for key, size, acc in floors:
                floor_run(key, size, acc)
            for r in rows:
                r.run()
            print(f"# round {rnd + 1}/{a.reps} done, load {os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
        fl = {}
        for key, size, acc in floors:
            fl.setdefault(key, []).append((size, statistics.median(acc)))

        def floor_of(r):
            pts = sorted(fl[r.inp])
            (s0, t0), (s1, t1) = pts[0], pts[-1]
            return t0 if s1 == s0 else t0 + (t1 - t0) * (r.size - s0) / (s1 - s0)

        mem, mc = {}, None
        if not a.no_mem:
            schemes = [r.mem for r in rows if r.mem]
            res = subprocess.run([qmem, "-j", j, "-r", str(max(a.reps, 2)), str(n16), "4096", "4096"] + schemes,
                                 check=True, capture_output=True, text=True)
            for line in res.stdout.splitlines():
                f = line.split()
                if line.startswith("threads="):
                    mem[f[-1].split("=")[1]] = (float(f[5]), float(f[5]) / float(f[2]))
                    mc = float(f[2])

        by = {r.name: r for r in rows}
        base = by["int8 channel sym"].med()
        base_cpu = statistics.median(by["int8 channel sym"].cpu)
        print(f"# memcpy in memory ({j} threads, read + write): {mc:.2f} GB/s" if mc else "# in memory: skipped")
        hdr = (f"{'scheme':34s} {'wall s':>7s} {'cpu s':>6s} {'load':>5s} {'MiB out':>8s} {'xfloor':>6s} "
               f"{'xint8':>6s} {'cpu x8':>6s} {'mem GB/s':>8s} {'xmemcpy':>7s}  {'vs ref':24s} goal")
        print(hdr)
        print("-" * len(hdr))
        misses = []
        for r in rows:
            t = r.med()
            xf = t / floor_of(r)
            xi = t / base
            gm = mem.get(r.mem)
            vs, ok = "", []
            if r.kind == "quant":
                ok.append(xi <= 1.15 if r.name != "int8 channel sym" else xf <= 1.2)
            if r.mem == "b4g32" and gm:
                ok.append(gm[1] >= 0.7)
            if r.ref and r.ref in by:
                rr = by[r.ref]
                ratio = t / rr.med()
                if r.kind == "mse":
                    vs = f"{ratio:.2f}x minmax"
                    ok.append(ratio <= 3)
                elif r.kind == "dtype":
                    per_byte = (t / nbytes[r.inp]) / (rr.med() / nbytes[rr.inp])
                    # The I/O floor's own ratio: the output (codes) is as large as from F32.
                    fpb = (floor_of(r) / nbytes[r.inp]) / (floor_of(rr) / nbytes[rr.inp])
                    vs = f"{per_byte:.2f}x F32 s/B (floor {fpb:.2f}x)"
                    ok.append(per_byte <= 1.1)
                else:
                    vs = f"{ratio:.2f}x {rr.name[:14]}"
                    if r.kind == "gguf":
                        ok.append(ratio <= 1.15)
            if r.kind == "sparse":
                ok.append(xf <= 1.3)
            goal = "-" if not ok else ("met" if all(ok) else "MISSED")
            if goal == "MISSED":
                misses.append(r.name)
            print(f"{r.name:34s} {t:7.3f} {statistics.median(r.cpu):6.2f} {statistics.median(r.load):5.2f} "
                  f"{r.size / 2**20:8.1f} {xf:6.2f} {xi:6.2f} {statistics.median(r.cpu) / base_cpu:6.2f} "
                  f"{(f'{gm[0]:8.2f} {gm[1]:7.2f}' if gm else f'{chr(32) * 8} {chr(32) * 7}')}  {vs:24s} {goal}")
        for key, pts in sorted(fl.items()):
            for s, t in sorted(pts):
                print(f"# I/O floor {key:8s} in {nbytes[key] / 2**20:7.1f} MiB, out {s / 2**20:7.1f} MiB: {t:.3f} s "
                      f"(faster of mmap and pread, median)")
        print("# goals: quantize minmax rows xint8 <= 1.15 (int8 channel sym: xfloor <= 1.2); int4 g32 sym in memory "
              ">= 0.7 of memcpy; mse <= 3x its minmax row; F16/BF16 <= 1.1x F32's seconds per input byte; prune "
              "and 2:4 xfloor <= 1.3; GGUF <= 1.15x npuc's row (llama rows: figures only)")
        print(f"# missed: {len(misses)} rows{': ' + ', '.join(misses) if misses else ''}")
        print(f"# load at the end {os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
