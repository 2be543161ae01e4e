#!/usr/bin/env python3
"""Independent GGUF checks for tests/cli/gguf.sh (NumPy + struct only).

    gguf_check.py make OUT.safetensors            the generated test model
    gguf_check.py huge OUT.safetensors            one q8_0 block whose scale overflows fp16
    gguf_check.py check SRC.safetensors OUT.gguf TYPE [ARCH]
        parses OUT with a reader written from the GGUF specification (ggml's
        docs/gguf.md) and compares header, metadata, tensor table and every
        tensor's bytes with what the scalar reference quantizers below make
        of SRC's tensors
    gguf_check.py dequant OUT.gguf DENSE.safetensors [SRC.safetensors]
        DENSE (npuc decompress of OUT) equals the reference dequantization of
        OUT's blocks, bit for bit, under the source's names and shapes
    gguf_check.py hostile DIR                     malformed GGUF files for the CLI
    gguf_check.py selftest                        NumPy's fp16 rounding is round-half-even

The quantizers are written from the block definitions and the reference
quantizers' contract (ggml's quantize_row_*_ref): every step a float32
operation, Q8_0 rounding half away from zero, the 4/5-bit types truncating
x/d + 8.5 (16.5, 0.5), scales stored as fp16 rounded to nearest even.
"""
import json
import os
import struct
import sys

import numpy as np

F32 = np.float32
TYPE_IDS = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8,
            "I8": 24, "I16": 25, "I32": 26, "I64": 27, "F64": 28, "BF16": 30}
TYPE_NAMES = {v: k for k, v in TYPE_IDS.items()}
BLOCK_BYTES = {"Q8_0": 34, "Q4_0": 18, "Q4_1": 20, "Q5_0": 22, "Q5_1": 24}
FILE_TYPE = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "BF16": 32}
ST_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I8": np.int8, "I16": np.int16,
             "I32": np.int32, "I64": np.int64, "BF16": np.uint16}


# ------------------------------------------------------------ safetensors

def st_read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        base = 8 + n
        meta = hdr.pop("__metadata__", {})
        out = {}
        for name, e in hdr.items():
            b, end = e["data_offsets"]
            f.seek(base + b)
            a = np.frombuffer(f.read(end - b), dtype=ST_DTYPES[e["dtype"]]).reshape(e["shape"])
            out[name] = (e["dtype"], a)
    return meta, out


def st_write(path, tensors, meta=None):
    hdr, off, blobs = {}, 0, []
    if meta:
        hdr["__metadata__"] = meta
    for name, dt, a in tensors:
        b = np.ascontiguousarray(a).tobytes()
        hdr[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(hdr).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def as_f32(dt, a):
    if dt == "BF16":
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float32)


# ------------------------------------------------------------- fp16, bf16

def fp16_bits(x):
    """fp16 bit patterns of float32 values: NumPy's conversion, which rounds
    to nearest even (checked by selftest against an integer reference)."""
    return np.asarray(x, dtype=F32).astype(np.float16).view(np.uint16)


def fp16_rne_int(x):
    """A second, integer-only fp16 round-to-nearest-even for finite normal
    and subnormal float32 values (selftest only)."""
    u = int(np.asarray(x, dtype=F32).view(np.uint32))
    sign = (u >> 16) & 0x8000
    e = (u >> 23) & 0xFF
    m = u & 0x7FFFFF
    if e == 0:
        return sign  # float32 subnormals are far below fp16's range
    mant = m | 0x800000  # value = mant * 2^(e - 150)
    he = e - 127 + 15
    if he >= 1:
        shift = 13  # keep 10 mantissa bits
        q, r = divmod(mant, 1 << shift)
        half = 1 << (shift - 1)
        if r > half or (r == half and q & 1):
            q += 1
        v = ((he << 10) + (q - 0x400)) if q < 0x800 else ((he + 1) << 10)
        return sign | min(v, 0x7C00)
    # subnormal fp16: value / 2^-24 = mant * 2^(e - 150 + 24)
    shift = 150 - 24 - e
    q, r = divmod(mant, 1 << shift)
    half = 1 << (shift - 1)
    if r > half or (r == half and q & 1):
        q += 1
    return sign | q


def fp16_val(bits):
    return np.asarray(bits, dtype=np.uint16).view(np.float16).astype(F32)


def bf16_bits(x):
    """bfloat16 by round to nearest even on the float32 bits (finite values)."""
    u = np.asarray(x, dtype=F32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


# ------------------------------------------------- reference quantizers

def roundf(x):
    """C roundf: half away from zero (exact in float64 for float32 inputs)."""
    x = x.astype(np.float64)
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def first_zero_signed(blocks, value):
    """Where value == 0, the first element equal to zero keeps its sign (a
    loop 'if (v < min) min = v' starting from +-FLT_MAX keeps the first of
    equal values)."""
    z = value == 0
    if z.any():
        idx = np.argmax(blocks[z] == 0, axis=1)
        value = value.copy()
        value[z] = blocks[z][np.arange(idx.size), idx]
    return value


def quantize(t, x):
    """Blocks of type t for x (float32, size a multiple of 32) as bytes."""
    b = np.asarray(x, dtype=F32).reshape(-1, 32)
    nb = b.shape[0]
    out = np.zeros((nb, BLOCK_BYTES[t]), dtype=np.uint8)
    if t == "Q8_0":
        amax = np.abs(b).max(axis=1)
        d = (amax / F32(127)).astype(F32)
        idv = np.where(d != 0, F32(1) / np.where(d != 0, d, F32(1)), F32(0)).astype(F32)
        x0 = (b * idv[:, None]).astype(F32)
        q = roundf(x0).astype(np.int64)
        out[:, 0:2] = fp16_bits(d).view(np.uint8).reshape(nb, 2)
        out[:, 2:] = (q & 0xFF).astype(np.uint8)
        return out.tobytes()
    if t in ("Q4_0", "Q5_0"):
        a = np.abs(b)
        i = np.argmax(a, axis=1)  # first index of the largest magnitude
        mx = b[np.arange(nb), i]
        mx = np.where(a.max(axis=1) == 0, F32(0), mx).astype(F32)  # max starts at +0.0
        div = F32(-8) if t == "Q4_0" else F32(-16)
        d = (mx / div).astype(F32)
        idv = np.where(d != 0, F32(1) / np.where(d != 0, d, F32(1)), F32(0)).astype(F32)
        x0 = (b * idv[:, None]).astype(F32)
        off = F32(8.5) if t == "Q4_0" else F32(16.5)
        q = np.trunc((x0 + off).astype(F32)).astype(np.int64)
        q = np.minimum(q, 15 if t == "Q4_0" else 31)
        out[:, 0:2] = fp16_bits(d).view(np.uint8).reshape(nb, 2)
        lo, hi = q[:, :16], q[:, 16:]
        if t == "Q4_0":
            out[:, 2:] = (lo | (hi << 4)).astype(np.uint8)
        else:
            qh = (((lo >> 4) & 1) << np.arange(16)).sum(axis=1) | ((((hi >> 4) & 1) << np.arange(16, 32)).sum(axis=1))
            out[:, 2:6] = qh.astype("<u4").view(np.uint8).reshape(nb, 4)
            out[:, 6:] = ((lo & 0xF) | ((hi & 0xF) << 4)).astype(np.uint8)
        return out.tobytes()
    # Q4_1, Q5_1
    mn = first_zero_signed(b, b.min(axis=1).astype(F32))
    mx = first_zero_signed(b, b.max(axis=1).astype(F32))
    levels = F32(15) if t == "Q4_1" else F32(31)
    d = ((mx - mn).astype(F32) / levels).astype(F32)
    idv = np.where(d != 0, F32(1) / np.where(d != 0, d, F32(1)), F32(0)).astype(F32)
    x0 = ((b - mn[:, None]).astype(F32) * idv[:, None]).astype(F32)
    q = np.trunc((x0 + F32(0.5)).astype(F32)).astype(np.int64)
    if t == "Q4_1":
        q = np.minimum(q, 15)
    else:
        q = q & 0xFF  # (uint8_t) of the reference
    out[:, 0:2] = fp16_bits(d).view(np.uint8).reshape(nb, 2)
    out[:, 2:4] = fp16_bits(mn).view(np.uint8).reshape(nb, 2)
    lo, hi = q[:, :16], q[:, 16:]
    if t == "Q4_1":
        out[:, 4:] = (lo | (hi << 4)).astype(np.uint8)
    else:
        qh = (((lo >> 4) & 1) << np.arange(16)).sum(axis=1) | ((((hi >> 4) & 1) << np.arange(16, 32)).sum(axis=1))
        out[:, 4:8] = qh.astype("<u4").view(np.uint8).reshape(nb, 4)
        out[:, 8:] = ((lo & 0xF) | ((hi & 0xF) << 4)).astype(np.uint8)
    return out.tobytes()


def dequantize(t, raw, n):
    """n floats from blocks of type t, from the block definitions."""
    nb = n // 32
    b = np.frombuffer(raw, dtype=np.uint8).reshape(nb, BLOCK_BYTES[t])
    d = fp16_val(b[:, 0:2].copy().view(np.uint16).ravel())[:, None]
    if t == "Q8_0":
        return (b[:, 2:].view(np.int8).astype(F32) * d).astype(F32).ravel()
    if t in ("Q4_0", "Q4_1"):
        qs = b[:, 2:] if t == "Q4_0" else b[:, 4:]
        q = np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.int64)
        if t == "Q4_0":
            return ((q - 8).astype(F32) * d).astype(F32).ravel()
        m = fp16_val(b[:, 2:4].copy().view(np.uint16).ravel())[:, None]
        return ((q.astype(F32) * d).astype(F32) + m).astype(F32).ravel()
    qh_off, qs_off = (2, 6) if t == "Q5_0" else (4, 8)
    qh = b[:, qh_off:qh_off + 4].copy().view("<u4").astype(np.int64)
    qs = b[:, qs_off:]
    hbits = (qh >> np.arange(32)) & 1
    q = np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.int64) | (hbits << 4)
    if t == "Q5_0":
        return ((q - 16).astype(F32) * d).astype(F32).ravel()
    m = fp16_val(b[:, 2:4].copy().view(np.uint16).ravel())[:, None]
    return ((q.astype(F32) * d).astype(F32) + m).astype(F32).ravel()


# ------------------------------------------------------------ GGUF reader

class Reader:
    def __init__(self, data):
        self.d, self.p = data, 0

    def take(self, n):
        if self.p + n > len(self.d):
            raise ValueError("truncated")
        b = self.d[self.p:self.p + n]
        self.p += n
        return b

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]

    def u64(self):
        return struct.unpack("<Q", self.take(8))[0]

    def string(self):
        return self.take(self.u64()).decode("utf-8")

    SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q",
               12: "<d"}

    def value(self, t):
        if t in self.SCALARS:
            f = self.SCALARS[t]
            return (t, struct.unpack(f, self.take(struct.calcsize(f)))[0])
        if t == 8:
            return (t, self.string())
        if t == 9:
            et, n = self.u32(), self.u64()
            return (t, (et, [self.value(et)[1] for _ in range(n)]))
        raise ValueError(f"value type {t}")


def gguf_read(path):
    data = open(path, "rb").read()
    r = Reader(data)
    assert r.take(4) == b"GGUF", "magic"
    version = r.u32()
    nt, nkv = r.u64(), r.u64()
    kv = {}
    order = []
    for _ in range(nkv):
        k = r.string()
        assert k not in kv, f"duplicate key {k}"
        kv[k] = r.value(r.u32())
        order.append(k)
    align = kv.get("general.alignment", (4, 32))[1]
    tensors = []
    for _ in range(nt):
        name = r.string()
        nd = r.u32()
        ne = [r.u64() for _ in range(nd)]
        t, off = r.u32(), r.u64()
        tensors.append({"name": name, "ne": ne, "type": TYPE_NAMES[t], "offset": off})
    start = (r.p + align - 1) // align * align
    assert all(b == 0 for b in data[r.p:start]), "header padding is not zeros"
    for t in tensors:
        n = int(np.prod(t["ne"], dtype=np.int64)) if t["ne"] else 1
        size = n // 32 * BLOCK_BYTES[t["type"]] if t["type"] in BLOCK_BYTES else \
            n * np.dtype(ST_DTYPES.get(t["type"], np.uint16)).itemsize
        t["n"] = n
        t["raw"] = data[start + t["offset"]:start + t["offset"] + size]
        assert len(t["raw"]) == size, t["name"]
    return {"version": version, "kv": kv, "order": order, "tensors": tensors, "align": align,
            "data_start": start, "size": len(data)}


# ----------------------------------------------------------- expectations

def fnv1a(s):
    h = 2166136261
    for c in s.encode():
        h = ((h ^ c) * 16777619) & 0xFFFFFFFF
    return h


def gguf_name(name):
    b = name.encode()
    if len(b) <= 63:
        return name
    keep = 54
    while keep > 0 and (b[keep] & 0xC0) == 0x80:
        keep -= 1
    return b[:keep].decode() + "~%08x" % fnv1a(name)


def expected_type(dt, shape, want):
    if dt in ("I8", "I16", "I32", "I64"):
        return dt
    if len(shape) < 2:
        return "F32"
    if want in BLOCK_BYTES and shape[-1] % 32 != 0:
        return "F32"
    return want


def encode(t, x):
    if t == "F32":
        return x.astype("<f4").tobytes()
    if t == "F16":
        return fp16_bits(x).tobytes()
    if t == "BF16":
        return bf16_bits(x).tobytes()
    return quantize(t, x.ravel())


def check(src, out, want, arch="npuc"):
    meta, tensors = st_read(src)
    g = gguf_read(out)
    kv = g["kv"]
    assert g["version"] == 3, g["version"]
    assert g["order"][0] == "general.architecture", g["order"][:3]
    assert kv["general.architecture"] == (8, arch), kv["general.architecture"]
    assert kv["general.alignment"] == (4, 32), kv["general.alignment"]
    assert kv["general.quantization_version"] == (4, 2), kv["general.quantization_version"]
    assert kv["general.file_type"] == (4, FILE_TYPE[want]), (kv["general.file_type"], want)
    for k, v in meta.items():
        assert kv.get("npuc." + k) == (8, v), ("metadata", k, kv.get("npuc." + k))
    allowed = {"general.architecture", "general.alignment", "general.quantization_version",
               "general.file_type", "npuc.gguf.long_names", "npuc.npuc.layout"} | {"npuc." + k for k in meta}
    assert set(kv) <= allowed, sorted(set(kv) - allowed)
    long_pairs = []
    names = list(tensors)
    assert [t["name"] for t in g["tensors"]] == [gguf_name(n) for n in names], "names"
    for n in names:
        if gguf_name(n) != n:
            long_pairs += [gguf_name(n), n]
    if long_pairs:
        assert kv["npuc.gguf.long_names"] == (9, (8, long_pairs)), kv.get("npuc.gguf.long_names")
    else:
        assert "npuc.gguf.long_names" not in kv
    prev_end = 0
    for (name, (dt, a)), t in zip(tensors.items(), g["tensors"]):
        assert all(len(t["name"].encode()) <= 63 for t in g["tensors"])
        assert t["ne"] == list(reversed(a.shape)), (name, t["ne"], a.shape)
        et = expected_type(dt, a.shape, want)
        assert t["type"] == et, (name, t["type"], et)
        assert t["offset"] % 32 == 0 and t["offset"] >= prev_end, (name, t["offset"])
        prev_end = t["offset"] + len(t["raw"])
        ref = a.astype("<" + a.dtype.str[1:]).tobytes() if et == dt else encode(et, as_f32(dt, a))
        if t["raw"] != ref:
            if et in BLOCK_BYTES:
                bs = BLOCK_BYTES[et]
                for i in range(0, len(ref), bs):
                    if t["raw"][i:i + bs] != ref[i:i + bs]:
                        blk = as_f32(dt, a).ravel()[i // bs * 32:i // bs * 32 + 32]
                        sys.exit(f"{out}: tensor {name} ({et}): block {i // bs} differs:\n"
                                 f"  npuc {t['raw'][i:i + bs].hex()}\n  ref  {ref[i:i + bs].hex()}\n"
                                 f"  values {blk.tolist()}")
            sys.exit(f"{out}: tensor {name} ({et}): bytes differ")
    assert g["size"] >= g["data_start"] + prev_end
    print(f"ok: {os.path.basename(out)} {want}: {len(names)} tensors, every block equals the reference")


def dequant(out, dense, src=None):
    g = gguf_read(out)
    _, dec = st_read(dense)
    src_names = list(st_read(src)[1]) if src else None
    long = dict(zip(*[iter(g["kv"].get("npuc.gguf.long_names", (9, (8, [])))[1][1])] * 2))
    names = []
    for t in g["tensors"]:
        name = long.get(t["name"], t["name"])
        names.append(name)
        dt, a = dec[name]
        shape = list(reversed(t["ne"]))
        assert list(a.shape) == shape, (name, a.shape, shape)
        if t["type"] in BLOCK_BYTES:
            ref = dequantize(t["type"], t["raw"], t["n"])
            assert dt == "F32", (name, dt)
        else:
            ref = np.frombuffer(t["raw"], dtype=ST_DTYPES[t["type"]])
            assert dt == t["type"], (name, dt, t["type"])
        if a.ravel().tobytes() != ref.tobytes():
            sys.exit(f"{dense}: tensor {name}: decompressed values differ from the reference dequantization")
    if src_names is not None:
        assert names == src_names, "names after the round trip"
    assert set(names) == set(dec), "tensor sets"
    print(f"ok: {os.path.basename(dense)}: {len(names)} tensors equal the dequantized reference")


# --------------------------------------------------------------- models

def make(path):
    rng = np.random.default_rng(16)
    t = []
    t.append(("layers.0.weight", "F32", rng.standard_normal((64, 128), dtype=np.float32)))
    t.append(("layers.0.bias", "F32", rng.standard_normal(64, dtype=np.float32)))
    # Exact ties: with a scale of exactly 1 every x.5 value sits on a
    # rounding boundary of every type (q8_0: amax 127; q4_0: max -8; q5_0:
    # max -16; q4_1/q5_1: min 0, max 15 or 31), and the same pattern scaled.
    ties = []
    for top in (127.0, -8.0, -16.0):  # q8_0, q4_0, q5_0: |x| < |top| = amax
        blk = (np.floor(np.linspace(-abs(top) + 1, abs(top) - 1, 32)) + 0.5).astype(np.float32)
        blk[0] = top
        blk[1] = -0.5
        ties += [blk, (blk * np.float32(0.25)).astype(np.float32), (blk * np.float32(3.0)).astype(np.float32)]
    for top in (15.0, 31.0):  # q4_1, q5_1: min 0, max top
        blk = (np.floor(np.linspace(0, top - 1, 32)) + 0.5).astype(np.float32)
        blk[0] = top
        blk[1] = 0.0
        ties += [blk, (blk * np.float32(0.25)).astype(np.float32), (blk * np.float32(3.0)).astype(np.float32)]
    ties.append(np.arange(32, dtype=np.float32) - np.float32(15.5))
    t.append(("ties.weight", "F32", np.stack(ties).reshape(-1, 64)))
    z = np.zeros((4, 64), dtype=np.float32)
    z[1, :32] = -0.0
    z[2, 5] = -0.0
    z[3, 32:] = 2.5  # a constant block: d = 0 for the min/max types
    t.append(("zeros.weight", "F32", z))
    # Huge ranges inside fp16's scale range: one large value beside tiny ones.
    h = (rng.standard_normal((8, 64)) * 1e-6).astype(np.float32)
    h[:, 7] = np.float32(4.0e5)  # q4_0's scale 4e5/8 still fits fp16
    h[0, 40] = np.float32(-6.0e4)  # and so does the q4_1/q5_1 minimum
    h[1, 33:40] = np.float32(1e-30)
    t.append(("huge.weight", "F32", h))
    t.append(("conv.weight", "F32", rng.standard_normal((8, 4, 3, 32), dtype=np.float32)))
    t.append(("odd.weight", "F32", rng.standard_normal((6, 48), dtype=np.float32)))
    t.append(("half.weight", "F16", rng.standard_normal((16, 64)).astype(np.float16)))
    bf = rng.standard_normal((16, 32), dtype=np.float32)
    t.append(("bf.weight", "BF16", (bf.view(np.uint32) >> 16).astype(np.uint16)))
    t.append(("steps", "I64", np.arange(5, dtype=np.int64)))
    t.append(("ids", "I32", rng.integers(-5, 5, (3, 4)).astype(np.int32)))
    long = "model.encoder.layers.11.attention.self_attention.query_key_value.weight_extra"
    t.append((long, "F32", rng.standard_normal((4, 64), dtype=np.float32)))
    t.append(("émbed." + "ü" * 40 + ".weight", "F32", rng.standard_normal((2, 32), dtype=np.float32)))
    t.append(("scalar", "F32", np.array(1.5, dtype=np.float32)))
    st_write(path, t, {"format": "pt", "source": "gguf_check"})


def huge(path):
    x = np.ones((1, 32), dtype=np.float32)
    x[0, 3] = 1e7  # q8_0: d = 1e7 / 127 > 65504
    st_write(path, [("big.weight", "F32", x)])


# --------------------------------------------------------- hostile files

def gguf_bytes(nt=1, kvs=(), tensors=None, version=3, magic=b"GGUF", n_kv=None, data=b"", align_pad=True):
    out = magic + struct.pack("<IQQ", version, nt, len(kvs) if n_kv is None else n_kv)
    for k, body in kvs:
        out += struct.pack("<Q", len(k)) + k + body
    for name, ne, ty, off in (tensors or []):
        out += struct.pack("<Q", len(name)) + name + struct.pack("<I", len(ne))
        out += b"".join(struct.pack("<Q", d) for d in ne) + struct.pack("<IQ", ty, off)
    if align_pad:
        out += b"\0" * ((32 - len(out) % 32) % 32)
    return out + data


def hostile(d):
    os.makedirs(d, exist_ok=True)
    w = lambda n, b: open(os.path.join(d, n + ".gguf"), "wb").write(b)
    ok_t = [(b"w", [32, 2], 8, 0)]
    w("ok", gguf_bytes(1, tensors=ok_t, data=b"\0" * 68))
    w("magic", gguf_bytes(1, tensors=ok_t, magic=b"GGUG", data=b"\0" * 68))
    w("version1", gguf_bytes(1, tensors=ok_t, version=1, data=b"\0" * 68))
    w("bigendian", gguf_bytes(1, tensors=ok_t, version=3 << 24, data=b"\0" * 68))
    w("ntensors", gguf_bytes(1 << 60, tensors=ok_t, data=b"\0" * 68))
    w("nkv", gguf_bytes(1, tensors=ok_t, n_kv=1 << 62, data=b"\0" * 68))
    w("keylen", gguf_bytes(1, kvs=[(b"a", struct.pack("<I", 8) + struct.pack("<Q", 1 << 63))], tensors=ok_t))
    w("arraylen", gguf_bytes(1, kvs=[(b"a", struct.pack("<IIQ", 9, 4, 1 << 61))], tensors=ok_t))
    w("nested", gguf_bytes(0, kvs=[(b"a", struct.pack("<IIQ", 9, 9, 1) + struct.pack("<IQ", 4, 0))]))
    w("valtype", gguf_bytes(0, kvs=[(b"a", struct.pack("<I", 99))]))
    w("align0", gguf_bytes(0, kvs=[(b"general.alignment", struct.pack("<II", 4, 0))]))
    w("align3", gguf_bytes(0, kvs=[(b"general.alignment", struct.pack("<II", 4, 3))]))
    w("dupkey", gguf_bytes(0, kvs=[(b"k", struct.pack("<II", 4, 1)), (b"k", struct.pack("<II", 4, 2))]))
    w("namelen", gguf_bytes(1, tensors=[(b"n" * 64, [32], 0, 0)], data=b"\0" * 128))
    w("ndims", gguf_bytes(1, tensors=[(b"w", [1, 1, 1, 1, 1], 0, 0)], data=b"\0" * 32))
    w("dimoverflow", gguf_bytes(1, tensors=[(b"w", [1 << 62, 1 << 62], 0, 0)], data=b"\0" * 32))
    w("dimhuge", gguf_bytes(1, tensors=[(b"w", [1 << 63], 0, 0)], data=b"\0" * 32))
    w("type", gguf_bytes(1, tensors=[(b"w", [32], 77, 0)], data=b"\0" * 128))
    w("iquant", gguf_bytes(1, tensors=[(b"w", [256], 16, 0)], data=b"\0" * 66))
    w("blockrow", gguf_bytes(1, tensors=[(b"w", [33], 8, 0)], data=b"\0" * 64))
    w("offset", gguf_bytes(1, tensors=[(b"w", [32], 0, 1 << 63)], data=b"\0" * 128))
    w("unaligned", gguf_bytes(1, tensors=[(b"w", [4], 0, 4)], data=b"\0" * 64))
    w("pastend", gguf_bytes(1, tensors=[(b"w", [64], 0, 0)], data=b"\0" * 128))
    w("overlap", gguf_bytes(2, tensors=[(b"a", [16], 0, 0), (b"b", [16], 0, 32)], data=b"\0" * 96))
    w("dupname", gguf_bytes(2, tensors=[(b"a", [8], 0, 0), (b"a", [8], 0, 32)], data=b"\0" * 64))
    w("utf8", gguf_bytes(1, tensors=[(b"\xff\xfe", [8], 0, 0)], data=b"\0" * 32))
    w("truncated", gguf_bytes(1, tensors=ok_t, data=b"\0" * 68)[:40])
    w("longnames", gguf_bytes(1, kvs=[(b"npuc.gguf.long_names",
                                       struct.pack("<IIQ", 9, 8, 2) + struct.pack("<Q", 1) + b"x" +
                                       struct.pack("<Q", 1) + b"y")], tensors=[(b"w", [8], 0, 0)],
                              data=b"\0" * 32))


def selftest():
    # fp16: ties between representable values go to the even one, also in
    # the subnormal range, and NumPy agrees with an integer-only reference.
    one = np.float32(1.0)
    assert fp16_bits(one + np.float32(2.0 ** -11)) == 0x3C00  # tie -> even (1.0)
    assert fp16_bits(one + np.float32(3 * 2.0 ** -11)) == 0x3C02  # tie -> even (up)
    assert fp16_bits(np.float32(2.0 ** -25)) == 0x0000  # half of the smallest subnormal -> 0
    assert fp16_bits(np.float32(3 * 2.0 ** -25)) == 0x0002
    rng = np.random.default_rng(7)
    vals = np.concatenate([rng.standard_normal(20000).astype(np.float32) * s for s in (1e-6, 1e-3, 1, 300, 60000)])
    ties = (np.arange(1, 4000, dtype=np.uint32) << 12 | 0x1000 | 0x3F800000).view(np.float32)
    for v in np.concatenate([vals, ties, -ties]):
        assert int(fp16_bits(v)) == fp16_rne_int(v), (float(v), hex(int(fp16_bits(v))), hex(fp16_rne_int(v)))
    print("ok: NumPy's float16 conversion rounds to nearest even")


def main():
    cmd = sys.argv[1]
    if cmd == "make":
        make(sys.argv[2])
    elif cmd == "huge":
        huge(sys.argv[2])
    elif cmd == "check":
        check(sys.argv[2], sys.argv[3], sys.argv[4].upper(), *(sys.argv[5:6]))
    elif cmd == "dequant":
        dequant(*sys.argv[2:5])
    elif cmd == "hostile":
        hostile(sys.argv[2])
    elif cmd == "selftest":
        selftest()
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
