"""gguf_kquant_check.py - checks npuc's GGUF K-quant files against ggml itself.

The oracle is ggml's libggml-base.so (the npm package @node-llama-cpp/linux-x64
that .ci/install-deps --test installs), called through ctypes: every tensor's
bytes in npuc's file must equal ggml_quantize_chunk's for the type the file
declares, that type must be the one llama-quantize's fallback rule gives, and
npuc's dequantized floats (decompress) must equal ggml's dequantize_row_* of
the file's bytes, bit for bit.  The GGUF header is parsed here, from the
specification (gguf_check.Reader reads the primitive values).

  gguf_kquant_check.py make SRC.safetensors
  gguf_kquant_check.py check LIB SRC.safetensors OUT.gguf TYPE
  gguf_kquant_check.py dequant LIB OUT.gguf DENSE.safetensors
"""
import ctypes
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_check as g  # noqa: E402

# ggml type id -> (name, elements per block, bytes per block), ggml-common.h
TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
         6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 10: ("Q2_K", 256, 84),
         11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210)}
BY_NAME = {v[0]: k for k, v in TYPES.items()}
# llama-quantize's fallback (llama_tensor_get_type) for rows not a multiple of
# 256; IQ4_NL (Q2_K, Q3_K) is Q4_0 in npuc; F16 when 32 does not divide either.
FALLBACK = {"Q2_K": "Q4_0", "Q3_K": "Q4_0", "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}
FILE_TYPE = {"Q2_K": 10, "Q3_K": 11, "Q4_K": 14, "Q5_K": 16, "Q6_K": 18}


class InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


def ggml(path):
    lib = ctypes.CDLL(path)
    lib.ggml_init.restype = ctypes.c_void_p
    lib.ggml_init.argtypes = [InitParams]
    assert lib.ggml_init(InitParams(1 << 20, None, False))  # fills fp16 tables in older builds
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    return lib


def quantize(lib, tid, x, imp=None):
    x = np.ascontiguousarray(x, dtype=np.float32)
    row = x.shape[-1]
    nrow = x.size // row
    name, blck, tsize = TYPES[tid]
    out = np.zeros(x.size // blck * tsize, dtype=np.uint8)
    if imp is not None:
        imp = np.ascontiguousarray(imp, dtype=np.float32)
        assert imp.size == row, (imp.size, row)
    n = lib.ggml_quantize_chunk(tid, x.ctypes.data, out.ctypes.data, 0, nrow, row,
                                None if imp is None else imp.ctypes.data)
    assert n == out.size, (name, n, out.size)
    return out.tobytes()


def dequantize(lib, tid, raw, n):
    name = TYPES[tid][0]
    if name == "F32":
        return np.frombuffer(raw, dtype=np.float32).copy()
    if name == "F16":
        return np.frombuffer(raw, dtype=np.float16).astype(np.float32)
    f = getattr(lib, "dequantize_row_" + name.lower().replace("_k", "_K"))
    f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    f.restype = None
    buf = np.frombuffer(raw, dtype=np.uint8).copy()
    y = np.zeros(n, dtype=np.float32)
    f(buf.ctypes.data, y.ctypes.data, n)
    return y


def gguf_read(path):
    data = open(path, "rb").read()
    r = g.Reader(data)
    assert r.take(4) == b"GGUF"
    r.u32()
    nt, nkv = r.u64(), r.u64()
    kv = {}
    for _ in range(nkv):
        k = r.string()
        kv[k] = r.value(r.u32())
    align = kv.get("general.alignment", (4, 32))[1]
    ts = []
    for _ in range(nt):
        name = r.string()
        ne = [r.u64() for _ in range(r.u32())]
        tid, off = r.u32(), r.u64()
        ts.append({"name": name, "ne": ne, "type": tid, "offset": off})
    start = (r.p + align - 1) // align * align
    for t in ts:
        n = int(np.prod(t["ne"], dtype=np.int64))
        _, blck, tsize = TYPES[t["type"]]
        t["n"] = n
        t["raw"] = data[start + t["offset"]:start + t["offset"] + n // blck * tsize]
        assert len(t["raw"]) == n // blck * tsize, t["name"]
    return kv, ts


def make(path):
    rng = np.random.default_rng(29)

    def heavy(shape):
        return (rng.standard_t(3, size=shape) * 0.02).astype(np.float32)

    a = heavy((48, 512))
    a[:, 37] *= 40.0       # outlier column
    a[5, :] = 0.0          # all-zero row
    a[6, :] = 0.37         # constant row
    a[7, :] = (rng.integers(-8, 9, 512) * 0.25).astype(np.float32)  # exact ties
    a[8, :] *= np.where(np.arange(512) % 3 == 0, 1e-7, 300.0 / 0.02).astype(np.float32)  # huge range
    h = heavy((16, 768)).astype(np.float16)
    par = heavy((64, 4096))  # 32 tiles of 8192 weights: both threads work
    g.st_write(path, [("blk.0.w", "F32", a), ("blk.1.w", "F16", h), ("par.w", "F32", par),
                      ("odd96.w", "F32", heavy((8, 96))), ("odd100.w", "F32", heavy((4, 100))),
                      ("norm", "F32", np.ones(512, dtype=np.float32))])


def expected(want, shape):
    if len(shape) < 2:
        return "F32"
    if shape[-1] % 256 == 0:
        return want
    return FALLBACK[want] if shape[-1] % 32 == 0 else "F16"


def check(libpath, src, out, want):
    lib = ggml(libpath)
    want = want.upper()
    _, st = g.st_read(src)
    kv, ts = gguf_read(out)
    assert kv["general.file_type"][1] == FILE_TYPE[want], kv["general.file_type"]
    assert [t["name"] for t in ts] == list(st), [t["name"] for t in ts]
    nblocks = 0
    for t in ts:
        dt, a = st[t["name"]]
        x = g.as_f32(dt, a)
        exp = expected(want, a.shape)
        got = TYPES[t["type"]][0]
        assert got == exp, f"{t['name']}: type {got}, llama-quantize's rule gives {exp}"
        assert t["ne"] == list(reversed(a.shape)), t["name"]
        ref = quantize(lib, t["type"], x.reshape(-1, a.shape[-1]) if a.ndim else x.reshape(1, 1))
        if t["raw"] != ref:
            bs = TYPES[t["type"]][2]
            i = next(i for i in range(0, len(ref), bs) if ref[i:i + bs] != t["raw"][i:i + bs])
            raise AssertionError(f"{t['name']} ({got}): block {i // bs} differs from ggml_quantize_chunk")
        nblocks += len(ref) // TYPES[t["type"]][2]
    print(f"ok: {out}: {len(ts)} tensors, {nblocks} blocks byte-identical to ggml_quantize_chunk")


def dequant(libpath, out, dense):
    lib = ggml(libpath)
    _, ts = gguf_read(out)
    _, st = g.st_read(dense)
    for t in ts:
        dt, a = st[t["name"]]
        if dt == "F16":  # a plain F16 tensor (a fallback) stays F16, its bits kept
            assert TYPES[t["type"]][0] == "F16" and a.tobytes() == t["raw"], t["name"]
            continue
        assert dt == "F32", (t["name"], dt)
        y = dequantize(lib, t["type"], t["raw"], t["n"])
        assert np.array_equal(y.view(np.uint32), a.reshape(-1).view(np.uint32)), \
            f"{t['name']}: npuc's dequantized values differ from ggml's dequantize_row"
    print(f"ok: {dense}: {len(ts)} tensors equal ggml's dequantization bit for bit")


def write_dat(path, src):
    """A legacy llama.cpp imatrix (.dat) for every 2-D tensor of src, written
    from the format's description: int32 entry count; per entry int32 name
    length, name, int32 ncall, int32 nval, nval float32 sums; then int32 last
    call and a dataset name.  Importance = sums / ncall, random and positive,
    some columns 1000x the others."""
    import struct
    rng = np.random.default_rng(5)
    _, st = g.st_read(src)
    ents = [(n, a.shape[-1]) for n, (dt, a) in st.items() if a.ndim == 2]
    b = struct.pack("<i", len(ents))
    for n, k in ents:
        v = rng.gamma(0.5, 1.0, k) * np.where(rng.random(k) < 0.05, 1000.0, 1.0) * 3
        b += struct.pack("<i", len(n)) + n.encode() + struct.pack("<ii", 3, k) + v.astype("<f4").tobytes()
    b += struct.pack("<i", 3) + struct.pack("<i", 4) + b"test"
    with open(path, "wb") as f:
        f.write(b)


def read_dat(path):
    import struct
    b = open(path, "rb").read()
    (n,), pos, out = struct.unpack_from("<i", b, 0), 4, {}
    for _ in range(n):
        (ln,) = struct.unpack_from("<i", b, pos)
        name = b[pos + 4:pos + 4 + ln].decode()
        pos += 4 + ln
        ncall, nval = struct.unpack_from("<ii", b, pos)
        v = np.frombuffer(b, "<f4", nval, pos + 8)
        pos += 8 + 4 * nval
        out[name] = (v / np.float32(ncall)).astype(np.float32)
    return out


def icheck(libpath, src, out, dat):
    """Every tensor of out equals ggml_quantize_chunk of src's tensor with the
    .dat's importance row as quant weights (and that importance changes
    ggml's bytes somewhere, so the check can tell)."""
    lib = ggml(libpath)
    imp = read_dat(dat)
    _, st = g.st_read(src)
    _, ts = gguf_read(out)
    changed = nblocks = 0
    for t in ts:
        dt, a = st[t["name"]]
        if a.ndim != 2 or TYPES[t["type"]][0] in ("F32", "F16"):
            continue
        x = g.as_f32(dt, a).reshape(-1, a.shape[-1])
        ref = quantize(lib, t["type"], x, imp[t["name"]])
        changed += ref != quantize(lib, t["type"], x)
        assert t["raw"] == ref, f"{t['name']} ({TYPES[t['type']][0]}): differs from ggml with its importance"
        nblocks += len(ref) // TYPES[t["type"]][2]
    assert changed, "the importance changed no tensor's bytes in ggml: the check cannot tell"
    print(f"ok: {out}: {nblocks} blocks byte-identical to ggml_quantize_chunk with importance ({changed} tensors differ "
          f"from the unweighted bytes)")


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"make": make, "check": check, "dequant": dequant, "dat": write_dat, "icheck": icheck}[cmd](*args)
