#!/usr/bin/env python3
"""torch.svd_lowrank on the matrix bench_lowrank wrote, for the side-by-side table.

    bench_lowrank_torch.py RAW M N R P Q THREADS REPS

RAW holds M*N float32 values (row-major).  Runs torch.svd_lowrank(A, q=R+P,
niter=Q) (the same Halko-Martinsson-Tropp scheme as npuc: Gaussian sketch of
R+P columns, Q power iterations with a QR after every product, small SVD),
keeps the leading R triplets, and prints one JSON line:
{"torch": "1.13.0", "threads": T, "time_s": best of REPS, "rel_fro": |A - U_r S_r V_r^T|_F / |A|_F}.
Exits 77 when torch is missing.
"""
import json
import sys
import time

try:
    import numpy as np
    import torch
except ImportError as e:  # pragma: no cover
    print(json.dumps({"error": str(e)}))
    sys.exit(77)


def main():
    raw, m, n, r, p, q, threads, reps = sys.argv[1], *map(int, sys.argv[2:9])
    torch.set_num_threads(threads)
    a = torch.from_numpy(np.fromfile(raw, dtype=np.float32, count=m * n).reshape(m, n))
    torch.manual_seed(0)
    torch.svd_lowrank(a, q=min(r + p, min(m, n)), niter=q)  # warm-up (allocations, thread pool)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        u, s, v = torch.svd_lowrank(a, q=min(r + p, min(m, n)), niter=q)
        best = min(best, time.perf_counter() - t0)
    approx = (u[:, :r] * s[:r]) @ v[:, :r].T
    rel = float(torch.linalg.norm((a - approx).double()) / torch.linalg.norm(a.double()))
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "time_s": best,
                      "rel_fro": rel}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
