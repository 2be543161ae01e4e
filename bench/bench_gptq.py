#!/usr/bin/env python3
"""GPTQ of one layer: npuc against a plain PyTorch (CPU) GPTQ, same process.

    bench_gptq.py NPUC [--size K] [--bits 4] [--group 128] [--threads T]

Writes a [K, K] float32 layer and its Hessian (F64, H = B B^T / n + I with a
[K, K/8] Gaussian B, so H is correlated and positive definite) to a temporary
folder, times `npuc quantize --method gptq` on it (the whole command: reading
the 8K^2-byte Hessian, GPTQ, writing the artifact), then runs the reference
algorithm (Frantar et al. 2022: blocks of 128, lazy batch updates, the
Cholesky factor of H^-1) in torch float32 on the same data, as IST-DASLab's
fasterquant does on a CPU, with torch on T threads.  Prints one JSON line
with both times and the output error proxy tr((W-Q) H (W-Q)^T) / tr(W H W^T)
of each, the CPU time (user + system) of each beside its wall time, and the
1-minute load average before the runs (the machine is shared: compare wall
times only at a low load).  Not run in CI (torch, and minutes at K = 4096 on
a loaded machine).
"""
import argparse
import json
import os
import resource
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "samples", "calib"))
try:
    import torch
    from dump_calib import write_safetensors as write_st
except ImportError:  # pragma: no cover
    print(json.dumps({"error": "torch is not installed"}))
    sys.exit(77)


def torch_gptq(W, H, bits, group, blocksize=128, percdamp=0.01):
    """The reference algorithm in torch float32 (symmetric, npuc's restricted grid)."""
    W = W.clone()
    cols = W.shape[1]
    qmax = 2 ** (bits - 1) - 1
    H = H.clone()
    dead = torch.diag(H) == 0
    H[dead, dead] = 1
    W[:, dead] = 0
    H += percdamp * torch.mean(torch.diag(H)) * torch.eye(cols)
    L = torch.linalg.cholesky(H)
    Hinv = torch.linalg.cholesky(torch.cholesky_inverse(L), upper=True)
    Q = torch.zeros_like(W)
    scale = None
    for i1 in range(0, cols, blocksize):
        i2 = min(i1 + blocksize, cols)
        W1 = W[:, i1:i2].clone()
        Err1 = torch.zeros_like(W1)
        Hinv1 = Hinv[i1:i2, i1:i2]
        for i in range(i2 - i1):
            if (i1 + i) % group == 0:
                scale = W[:, i1 + i:i1 + i + group].abs().amax(1).clamp(min=1e-30) / qmax
            w = W1[:, i]
            q = torch.clamp(torch.round(w / scale), -qmax, qmax) * scale
            Q[:, i1 + i] = q
            err = (w - q) / Hinv1[i, i]
            W1[:, i:] -= err.unsqueeze(1) * Hinv1[i, i:].unsqueeze(0)
            Err1[:, i] = err
        W[:, i2:] -= Err1 @ Hinv[i1:i2, i2:]
    return Q


def proxy(W, Q, H):
    D = (W - Q).double()
    return float(torch.trace(D @ H @ D.T) / torch.trace(W.double() @ H @ W.double().T))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("npuc")
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--bits", type=int, default=4)
    ap.add_argument("--group", type=int, default=128)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--skip-torch", action="store_true", help="time npuc alone")
    a = ap.parse_args()
    K = a.size
    rng = np.random.default_rng(0)
    W = rng.standard_normal((K, K), dtype=np.float32)
    B = rng.standard_normal((K, K // 8))
    H = B @ B.T / (K // 8) + np.eye(K)
    with tempfile.TemporaryDirectory() as d:
        write_st(d + "/m.safetensors", [("fc.weight", W)])
        write_st(d + "/c.safetensors", [("fc.weight.hessian", H), ("fc.weight.hessian_count", np.array([1], np.int64))])
        # The files just written are flushed first, so the kernel's writeback of
        # 200 MiB of test data does not share the disk with npuc's fsync.
        os.sync()
        load = os.getloadavg()[0]
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run([a.npuc, "quantize", "-q", "--quantize-all", "--method", "gptq", "--calib", d + "/c.safetensors",
                        "-b", str(a.bits), "-g", str(a.group), "-j", str(a.threads), d + "/m.safetensors",
                        "-o", d + "/q.safetensors", "--fake-quant"], check=True, stdout=subprocess.DEVNULL)
        t_npuc = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_npuc = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
        with open(d + "/q.safetensors", "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            hdr = json.loads(f.read(n))
            o = hdr["fc.weight"]["data_offsets"]
            f.seek(8 + n + o[0])
            Qn = torch.from_numpy(np.frombuffer(f.read(o[1] - o[0]), dtype=np.float32).reshape(K, K).copy())
    torch.set_num_threads(a.threads)
    Wt, Ht = torch.from_numpy(W), torch.from_numpy(H)
    # The OpenBLAS kernels each side runs (OPENBLAS_CORETYPE, when set, chooses them for both).
    ver = json.loads(subprocess.run([a.npuc, "version", "--json"], check=True, capture_output=True).stdout)
    try:
        import ctypes
        ob = ctypes.CDLL("libopenblas.so.0")
        ob.openblas_get_corename.restype = ctypes.c_char_p
        torch_core = ob.openblas_get_corename().decode()
    except OSError:
        torch_core = "unknown"
    out = {"size": K, "bits": a.bits, "group": a.group, "threads": a.threads, "torch": torch.__version__,
           "npuc_openblas_core": ver["libraries"].get("openblas_core"), "python_openblas_core": torch_core,
           "load1": round(load, 2), "npuc_s": round(t_npuc, 3), "npuc_cpu_s": round(cpu_npuc, 3),
           "npuc_err": proxy(Wt, Qn, Ht)}
    if not a.skip_torch:
        t0, c0 = time.perf_counter(), time.process_time()
        Qt = torch_gptq(Wt, Ht.float(), a.bits, a.group)
        out["torch_s"] = round(time.perf_counter() - t0, 3)
        out["torch_cpu_s"] = round(time.process_time() - c0, 3)
        out["torch_err"] = proxy(Wt, Qt, Ht)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
