#!/usr/bin/env python3
"""bench_kquant_llama.py - `npuc convert --gguf-type q4_k|q6_k` against llama.cpp's
`llama-quantize --pure` (npuc: --gguf-pure) on the same llama-architecture float32 GGUF (hyperparameters, no
vocabulary; built here), 2 threads each, both outputs fsynced (npuc fsyncs its own):
checks that every tensor's type and bytes are the same in both files, then prints the
medians of REPS alternating runs.  Prints only what it measured.

Usage: bench_kquant_llama.py LLAMA_QUANTIZE NPUC [EMBD [FFN [LAYERS [REPS]]]]
       (default 512 1536 2 5; llama-quantize built from llama.cpp's public source)
"""
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "cli", "lib"))
import gguf_kquant_check as k  # noqa: E402


def make(path, E, F, L, V=1024):
    rng = np.random.default_rng(7)

    def s(x):
        b = x.encode()
        return struct.pack("<Q", len(b)) + b
    kv = [("general.architecture", 8, "llama"), ("llama.block_count", 4, L), ("llama.context_length", 4, 256),
          ("llama.embedding_length", 4, E), ("llama.feed_forward_length", 4, F),
          ("llama.attention.head_count", 4, 8), ("llama.attention.head_count_kv", 4, 8),
          ("llama.attention.layer_norm_rms_epsilon", 6, 1e-5), ("llama.rope.dimension_count", 4, E // 8),
          ("llama.vocab_size", 4, V), ("general.file_type", 4, 0)]
    ts = [("token_embd.weight", (V, E)), ("output_norm.weight", (E,)), ("output.weight", (V, E))]
    for i in range(L):
        p = f"blk.{i}."
        ts += [(p + "attn_norm.weight", (E,)), (p + "attn_q.weight", (E, E)), (p + "attn_k.weight", (E, E)),
               (p + "attn_v.weight", (E, E)), (p + "attn_output.weight", (E, E)), (p + "ffn_norm.weight", (E,)),
               (p + "ffn_gate.weight", (F, E)), (p + "ffn_up.weight", (F, E)), (p + "ffn_down.weight", (E, F))]
    hdr = b"GGUF" + struct.pack("<IQQ", 3, len(ts), len(kv))
    for key, t, v in kv:
        hdr += s(key) + struct.pack("<I", t) + (s(v) if t == 8 else struct.pack("<I", v) if t == 4
                                                 else struct.pack("<f", v))
    blobs, off = [], 0
    for name, sh in ts:
        a = np.ones(sh, np.float32) if len(sh) == 1 else (rng.standard_t(3, size=sh) * 0.02).astype(np.float32)
        hdr += s(name) + struct.pack("<I", len(sh)) + b"".join(struct.pack("<Q", d) for d in reversed(sh))
        hdr += struct.pack("<IQ", 0, off)
        b = a.tobytes() + b"\0" * ((-a.nbytes) % 32)
        blobs.append(b)
        off += len(b)
    hdr += b"\0" * ((-len(hdr)) % 32)
    with open(path, "wb") as f:
        f.write(hdr + b"".join(blobs))


def same_tensors(pa, pb):
    _, a = k.gguf_read(pa)
    _, b = k.gguf_read(pb)
    A, B = {t["name"]: t for t in a}, {t["name"]: t for t in b}
    assert set(A) == set(B), set(A) ^ set(B)
    for n in A:
        assert A[n]["type"] == B[n]["type"] and A[n]["raw"] == B[n]["raw"], f"{n}: differs"
    return len(A), sum(len(t["raw"]) for t in a)


def main():
    lq, npuc = sys.argv[1], sys.argv[2]
    E, F, L, reps = (int(x) for x in (sys.argv[3:] + ["512", "1536", "2", "5"][len(sys.argv[3:]):]))
    d = tempfile.mkdtemp(prefix="bench_kquant_llama.")
    src, lo, no = (os.path.join(d, n) for n in ("in.gguf", "lq.gguf", "np.gguf"))
    make(src, E, F, L)
    env = dict(os.environ, OMP_NUM_THREADS="2")
    print(f"input: llama, {L} layers, embd {E}, ffn {F}: {os.path.getsize(src) / 2**20:.1f} MiB float32")
    for t in ("q4_k", "q6_k"):
        a, b = [], []
        for _ in range(reps):
            t0 = time.perf_counter()
            subprocess.run([lq, "--pure", src, lo, t.upper(), "2"], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            fd = os.open(lo, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
            a.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            subprocess.run([npuc, "convert", src, "-o", no, "--gguf-type", t, "--gguf-pure", "-f", "-q"], check=True, env=env)
            b.append(time.perf_counter() - t0)
        n, nbytes = same_tensors(lo, no)
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"{t}: {n} tensors, {nbytes} bytes identical; llama-quantize {ma:.3f} s, npuc convert {mb:.3f} s, "
              f"npuc {ma / mb:.2f}x faster (medians of {reps} alternating runs)")
    print("load average", " ".join(f"{x:.1f}" for x in os.getloadavg()))
    for p in (src, lo, no):
        os.unlink(p)
    os.rmdir(d)


if __name__ == "__main__":
    main()
