#!/usr/bin/python3
"""make_seeds.py - the named seeds of the checkpoint, keras, calib and imatrix fuzz
targets (docs/fuzzing.md), written from the formats' descriptions with the
Python standard library, NumPy, h5py and the Keras archive builder of the
CLI tests (tests/cli/lib/keras_archive.py); never with npuc.

    fuzz/make_seeds.py [TARGET...]     (default: checkpoint keras calib imatrix)

Writes fuzz/corpus/<target>/seed_*; existing files of those names are
replaced, the fuzzer's finds are left alone.  The seeds are small valid
files and hand-made edge cases (truncated, bad JSON, duplicate names, paths
leaving the folder, zip bombs, negative and huge counts).
"""
import io
import json
import os
import struct
import sys
import zipfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "cli", "lib"))

SEP = b"\n--npuc-part--\n"  # fuzz_checkpoint.c's NPUC_FUZZ_CK_SEP


def st_bytes(tensors, meta=None, raw_header=None):
    """A safetensors file: tensors maps name -> (dtype string, shape, bytes)."""
    hdr, off, blobs = {}, 0, []
    if meta is not None:
        hdr["__metadata__"] = meta
    for k, (dt, shape, b) in tensors.items():
        hdr[k] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = raw_header if raw_header is not None else json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def f32(a):
    a = np.asarray(a, np.float32)
    return ("F32", a.shape, a.tobytes())


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed_" + name), "wb") as f:
        f.write(data)


# ------------------------------------------------------------- checkpoint

def ck(index, a=None, b=None, config=None):
    """fuzz_checkpoint.c's input: the index, then optionally the shards and config.json."""
    idx = index if isinstance(index, bytes) else json.dumps(index).encode()
    if a is None and b is None and config is None:
        return idx
    parts = [idx, a or b"", b or b""]
    if config is not None:
        parts.append(config if isinstance(config, bytes) else json.dumps(config).encode())
    return SEP.join(parts)


def checkpoint():
    rng = np.random.default_rng(15)
    fixed = {"weight_map": {"a.w": "a.safetensors", "a.b": "a.safetensors", "b.w": "b.safetensors"},
             "metadata": {"total_size": 44}}
    write("checkpoint", "fixed_shards.json", ck(fixed))
    write("checkpoint", "fixed_shards_odd.json", ck(fixed) + b" ")  # odd length: opened through the index file
    a = st_bytes({"m.0.weight": f32(rng.standard_normal((4, 8))), "m.0.bias": f32(np.zeros(4))},
                 meta={"format": "pt"})
    b = st_bytes({"m.1.weight": ("F16", (2, 4), np.ones((2, 4), np.float16).tobytes())})
    wm = {"m.0.weight": "a.safetensors", "m.0.bias": "a.safetensors", "m.1.weight": "b.safetensors"}
    write("checkpoint", "two_shards", ck({"metadata": {"total_size": 160}, "weight_map": wm}, a, b))
    write("checkpoint", "single_shard", ck(b"", a, b""))  # no index: a one-shard checkpoint
    # hostile indexes against the fixed shards
    hostile = {
        "dotdot": {"weight_map": {"a.w": "../outside.safetensors"}},
        "absolute": {"weight_map": {"a.w": "/etc/passwd.safetensors"}},
        "subdir": {"weight_map": {"a.w": "sub/a.safetensors"}},
        "hidden": {"weight_map": {"a.w": ".a.safetensors"}},
        "directory": {"weight_map": {"a.w": "dir.safetensors"}},
        "missing": {"weight_map": {"a.w": "a.safetensors", "a.b": "a.safetensors", "b.w": "c.safetensors"}},
        "unlisted": {"weight_map": {"a.w": "a.safetensors", "b.w": "b.safetensors"}},
        "ghost": dict(fixed, weight_map=dict(fixed["weight_map"], ghost="b.safetensors")),
        "wrong_shard": {"weight_map": {"a.w": "b.safetensors", "a.b": "a.safetensors", "b.w": "b.safetensors"}},
        "notstring": {"weight_map": {"a.w": 7}},
        "no_weight_map": {"metadata": {}},
        "array_root": [1, 2],
        "bad_metadata": {"metadata": [1], "weight_map": {}},
        "negative_total": {"metadata": {"total_size": -5}, "weight_map": fixed["weight_map"]},
        "huge_total": {"metadata": {"total_size": 2 ** 63 - 1}, "weight_map": fixed["weight_map"]},
        "empty_map": {"weight_map": {}},
        "not_safetensors": {"weight_map": {"a.w": "a.bin"}},
        "empty_name": {"weight_map": {"": "a.safetensors"}},
    }
    for k, v in hostile.items():
        write("checkpoint", "idx_" + k + ".json", ck(v))
    write("checkpoint", "idx_duplicate_key.json",
          b'{"weight_map": {"a.w": "a.safetensors", "a.w": "b.safetensors"}}')
    write("checkpoint", "idx_bad_json.json", b'{"weight_map": {"a.w": "a.safetensors",')
    write("checkpoint", "idx_bad_utf8.json", b'{"weight_map": {"a.\xff": "a.safetensors"}}')
    write("checkpoint", "idx_truncated.json", ck(fixed)[:25])
    write("checkpoint", "idx_long_name.json", ck({"weight_map": {"x" * 1500: "a.safetensors"}}))
    # shards that disagree with the index or each other
    write("checkpoint", "inboth", ck({"weight_map": {"m.0.weight": "a.safetensors", "m.0.bias": "a.safetensors",
                                                     "m.1.x": "b.safetensors"}},
                                     a, st_bytes({"m.1.x": f32(np.ones(2)), "m.0.bias": f32(np.ones(4))})))
    write("checkpoint", "shard_truncated", ck({"weight_map": wm}, a[:len(a) - 7], b))
    write("checkpoint", "shard_bad_header", ck({"weight_map": wm}, st_bytes({}, raw_header=b'{"m.0.weight": 1}'), b))
    write("checkpoint", "layout_meta", ck({"weight_map": wm},
                                          st_bytes({"m.0.weight": f32(np.ones((4, 8))), "m.0.bias": f32(np.ones(4))},
                                                   meta={"npuc.layout": '{"m.0.weight": "oi"}'}),
                                          st_bytes({"m.1.weight": f32(np.ones((2, 4)))},
                                                   meta={"npuc.layout": "[1]"})))
    # compressed-tensors: a 4-bit pack-quantized and an 8-bit int-quantized layer
    O, I, G = 4, 16, 2
    q4 = rng.integers(0, 16, (O, I)).astype(np.uint32)
    packed = np.zeros((O, I // 8), np.uint32)
    for j in range(I):
        packed[:, j // 8] |= q4[:, j] << (4 * (j % 8))
    ct_a = st_bytes({"l0.weight_packed": ("I32", packed.shape, packed.astype(np.int32).tobytes()),
                     "l0.weight_shape": ("I64", (2,), np.array([O, I], np.int64).tobytes()),
                     "l0.weight_scale": f32(np.full((O, G), 0.01)),
                     "l0.weight_zero_point": ("I32", (1, G), np.zeros((1, G), np.int32).tobytes())})
    ct_b = st_bytes({"l1.weight": ("I8", (O, I), rng.integers(-127, 128, (O, I)).astype(np.int8).tobytes()),
                     "l1.weight_scale": f32(np.full((O, 1), 0.02)),
                     "l1.bias": f32(np.zeros(O))})
    ct_wm = {"l0.weight_packed": "a.safetensors", "l0.weight_shape": "a.safetensors",
             "l0.weight_scale": "a.safetensors", "l0.weight_zero_point": "a.safetensors",
             "l1.weight": "b.safetensors", "l1.weight_scale": "b.safetensors", "l1.bias": "b.safetensors"}
    qc = {"quantization_config": {"quant_method": "compressed-tensors", "format": "pack-quantized",
                                  "config_groups": {
                                      "group_0": {"targets": ["re:l0$"], "weights": {"num_bits": 4, "symmetric": False}},
                                      "group_1": {"targets": ["Linear"], "weights": {"num_bits": 8, "symmetric": True}}},
                                  "ignore": ["lm_head"]}}
    write("checkpoint", "ct_two_layers", ck({"weight_map": ct_wm}, ct_a, ct_b, qc))
    bad_shape = st_bytes({"l0.weight_packed": ("I32", packed.shape, packed.astype(np.int32).tobytes()),
                          "l0.weight_shape": ("I64", (2,), np.array([O, -I], np.int64).tobytes()),
                          "l0.weight_scale": f32(np.full((O, G), 0.01))})
    write("checkpoint", "ct_negative_shape", ck({"weight_map": {k: "a.safetensors" for k in
                                                                ("l0.weight_packed", "l0.weight_shape", "l0.weight_scale")}},
                                                bad_shape, b"", qc))
    write("checkpoint", "ct_no_groups", ck({"weight_map": ct_wm}, ct_a, ct_b,
                                           {"quantization_config": {"quant_method": "compressed-tensors"}}))
    write("checkpoint", "ct_bits_huge", ck({"weight_map": ct_wm}, ct_a, ct_b,
                                           {"quantization_config": {"quant_method": "compressed-tensors",
                                                                    "config_groups": {"g": {"targets": ["Linear"],
                                                                                            "weights": {"num_bits": 2 ** 40}}}}}))
    write("checkpoint", "config_bad_json", ck({"weight_map": wm}, a, b, b"{not json"))


# ------------------------------------------------------------- keras

def zip_bytes(entries, method=zipfile.ZIP_DEFLATED):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=method) as z:
        for name, data in entries:
            if name.endswith("/"):
                z.writestr(zipfile.ZipInfo(name), b"")
            else:
                z.writestr(name, data)
    return buf.getvalue()


def patch_sizes(b, name, size):
    """Sets the uncompressed size of entry name in its local and central headers."""
    b = bytearray(b)
    for sig, off, nl, no in ((b"PK\x03\x04", 22, 26, 30), (b"PK\x01\x02", 24, 28, 46)):
        i = 0
        while (i := b.find(sig, i)) >= 0:
            n = struct.unpack_from("<H", b, i + nl)[0]
            if bytes(b[i + no:i + no + n]) == name.encode():
                struct.pack_into("<I", b, i + off, size)
            i += 4
    return bytes(b)


def keras():
    import keras_archive as ka
    w = ka.weights_h5(ka.variables(), False)
    w16 = ka.weights_h5(ka.variables(), True)
    meta = json.dumps({"keras_version": "3.3.3", "date_saved": "2026-11-26@16:00:00"})
    cfg = json.dumps(ka.config())
    base = [("metadata.json", meta), ("config.json", cfg), ("model.weights.h5", w)]
    write("keras", "valid.keras", zip_bytes(base + [("assets/notes.txt", "kept\n")]))
    write("keras", "valid_stored.keras", zip_bytes(base, zipfile.ZIP_STORED))
    write("keras", "valid_bf16.keras", zip_bytes([("config.json", cfg), ("model.weights.h5", w16)]))
    write("keras", "dir_entry.keras", zip_bytes(base + [("assets/", b""), ("assets/sub/", b"")]))
    write("keras", "dotdot.keras", zip_bytes(base + [("../evil.txt", "x")]))
    write("keras", "absolute.keras", zip_bytes(base + [("/tmp/evil.txt", "x")]))
    write("keras", "dot_component.keras", zip_bytes(base + [("assets/./x", "x"), ("a//b", "y")]))
    write("keras", "backslash.keras", zip_bytes(base + [("assets\\..\\x", "x")]))
    write("keras", "overlong_name.keras", zip_bytes(base + [("n" * 1100, "x")]))
    write("keras", "control_name.keras", zip_bytes(base + [("a\x01b", "x")]))
    write("keras", "duplicate.keras", zip_bytes(base + [("config.json", "{}")]))
    write("keras", "noweights.keras", zip_bytes(base[:2]))
    write("keras", "badh5.keras", zip_bytes(base[:2] + [("model.weights.h5", b"not HDF5" * 64)]))
    write("keras", "config_binary.keras", zip_bytes([("config.json", b"\xff\x00\xfe"), ("model.weights.h5", w)]))
    write("keras", "binary_entry.keras", zip_bytes(base + [("assets/blob.bin", bytes(range(256)))]))
    write("keras", "empty.keras", zip_bytes([]))
    write("keras", "notzip.keras", b"PK\x03\x04" + bytes(range(200)))
    write("keras", "truncated.keras", zip_bytes(base)[:-40])
    # zip bombs: a deflated entry claiming far more than deflate can give
    bomb = zip_bytes(base[:2] + [("model.weights.h5", b"\0" * 100000)])
    write("keras", "bomb_4g.keras", patch_sizes(bomb, "model.weights.h5", 0xFFFFFFFE))
    write("keras", "bomb_ratio.keras", patch_sizes(bomb, "model.weights.h5", 200 * 1024 * 1024))
    write("keras", "size_short.keras", patch_sizes(bomb, "model.weights.h5", 99999))
    write("keras", "size_long.keras", patch_sizes(bomb, "model.weights.h5", 100001))
    stored = zip_bytes(base, zipfile.ZIP_STORED)
    write("keras", "stored_size_lie.keras", patch_sizes(stored, "config.json", 5))
    # a method npuc refuses (bzip2), and an "encrypted" flag
    write("keras", "bzip2.keras", zip_bytes(base[:2], zipfile.ZIP_BZIP2))
    enc = bytearray(zip_bytes(base[:2], zipfile.ZIP_STORED))
    for sig, off in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        i = 0
        while (i := enc.find(sig, i)) >= 0:
            enc[i + off] |= 1
            i += 4
    write("keras", "encrypted.keras", bytes(enc))
    # a Keras 2 HDF5 file named .keras is read as HDF5
    with open(os.path.join(HERE, "..", "samples", "cnn_bn_keras.h5"), "rb") as f:
        h5 = f.read()
    if len(h5) <= 64 * 1024:
        write("keras", "keras2_h5.keras", h5)


# ------------------------------------------------------------- calib

def calib():
    rng = np.random.default_rng(16)
    K, N = 8, 100  # N > 64: two chunks of 64 rows
    x = rng.standard_normal((N, K)).astype(np.float32)
    H = (x.astype(np.float64).T @ x.astype(np.float64))
    write("calib", "inputs.safetensors", st_bytes({"fc.weight.input": f32(x)}))
    write("calib", "hessian.safetensors", st_bytes({
        "fc.weight.hessian": ("F64", (K, K), H.tobytes()),
        "fc.weight.hessian_count": ("I64", (1,), np.array([N], np.int64).tobytes()),
        "fc.weight.input_sq": f32((x * x).mean(0))}))
    write("calib", "input_sq_only.safetensors", st_bytes({"fc.weight.input_sq": f32(np.abs(x[0]))}))
    write("calib", "input_3d_f16.safetensors",
          st_bytes({"c.weight.input": ("F16", (2, 5, K), x[:10].astype(np.float16).tobytes())}))
    write("calib", "input_bf16.safetensors",
          st_bytes({"c.weight.input": ("BF16", (4, K), (x[:4].view(np.uint32) >> 16).astype(np.uint16).tobytes())}))
    acts = rng.standard_normal((6, 3, 4)).astype(np.float32)
    write("calib", "activations.safetensors",
          st_bytes({"relu1": f32(np.maximum(acts, 0)), "conv1": f32(acts), "pool": f32(acts[:, :, 0]),
                    "fc": f32(acts.reshape(-1)), "zeros": f32(np.zeros((2, 2)))}))
    # edge cases
    Hbad = H.copy()
    Hbad[0, 1] += 1000
    write("calib", "hessian_asymmetric.safetensors", st_bytes({
        "w.hessian": ("F64", (K, K), Hbad.tobytes()),
        "w.hessian_count": ("I64", (1,), np.array([N], np.int64).tobytes())}))
    write("calib", "hessian_no_count.safetensors", st_bytes({"w.hessian": ("F64", (K, K), H.tobytes())}))
    for tag, cnt in (("negative", -5), ("huge", 2 ** 62), ("zero", 0)):
        write("calib", f"count_{tag}.safetensors", st_bytes({
            "w.hessian": ("F32", (K, K), H.astype(np.float32).tobytes()),
            "w.hessian_count": ("I64", (), np.array(cnt, np.int64).tobytes())}))
    write("calib", "count_two.safetensors", st_bytes({
        "w.hessian": ("F32", (K, K), H.astype(np.float32).tobytes()),
        "w.hessian_count": ("F32", (2,), np.array([1, 2], np.float32).tobytes())}))
    nan = x[:3].copy()
    nan[1, 2] = np.nan
    write("calib", "input_nan.safetensors", st_bytes({"w.input": f32(nan), "act_nan": f32(nan)}))
    write("calib", "input_sq_negative.safetensors", st_bytes({"w.input_sq": f32(-np.ones(K))}))
    write("calib", "input_int.safetensors", st_bytes({"w.input": ("I32", (2, K), np.ones((2, K), np.int32).tobytes())}))
    write("calib", "input_rank1.safetensors", st_bytes({"w.input": f32(x[0])}))
    write("calib", "input_zero_rows.safetensors", st_bytes({"w.input": ("F32", (0, K), b"")}))
    write("calib", "hessian_not_square.safetensors", st_bytes({
        "w.hessian": f32(np.ones((K, K + 1))), "w.hessian_count": f32([3.0])}))
    write("calib", "duplicate_names.safetensors",
          st_bytes({}, raw_header=b'{"w.input":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]},'
                                  b'"w.input":{"dtype":"F32","shape":[2,1],"data_offsets":[0,8]}}') + b"\0" * 8)
    write("calib", "truncated.safetensors", st_bytes({"fc.weight.input": f32(x)})[:200])
    write("calib", "act_inf.safetensors", st_bytes({"a": f32([1.0, np.inf, 2.0])}))


# ------------------------------------------------------------- imatrix

def imx_entry(name, ncall, vals):
    n = name.encode()
    return struct.pack("<i", len(n)) + n + struct.pack("<ii", ncall, len(vals)) + struct.pack("<%df" % len(vals), *vals)


def imx_gguf(tensors, chunks=True):
    """A GGUF imatrix: tensors is a list of (name, ne0, ne1, float values)."""
    def s(x):
        x = x.encode()
        return struct.pack("<Q", len(x)) + x
    kv = [s("general.type") + struct.pack("<I", 8) + s("imatrix"),
          s("imatrix.datasets") + struct.pack("<IIQ", 9, 8, 1) + s("wiki.train.raw")]
    if chunks:
        kv += [s("imatrix.chunk_count") + struct.pack("<II", 4, 10),
               s("imatrix.chunk_size") + struct.pack("<II", 4, 512)]
    ts, data = [], b""
    for name, ne0, ne1, vals in tensors:
        ts.append(s(name) + struct.pack("<IQQIQ", 2, ne0, ne1, 0, len(data)))
        b = struct.pack("<%df" % len(vals), *vals)
        data += b + b"\0" * (-len(b) % 32)
    h = b"GGUF" + struct.pack("<IQQ", 3, len(ts), len(kv)) + b"".join(kv) + b"".join(ts)
    return h + b"\0" * (-len(h) % 32) + data


def imatrix():
    """fuzz_imatrix.c's input: a legacy .dat or a GGUF imatrix (gguf_imatrix.c's layouts)."""
    good = struct.pack("<i", 2) + imx_entry("blk.0.attn_q.weight", 3, [3.0, 6.0, 0.5, 1.0]) + \
        imx_entry("blk.0.ffn_up_exps.weight", 2, [1.0] * 8)
    trailer = struct.pack("<ii", 7, 14) + b"wiki.train.raw"
    write("imatrix", "legacy.dat", good + trailer)
    write("imatrix", "legacy_no_trailer.dat", good)
    write("imatrix", "legacy_ncall0_dup.dat", struct.pack("<i", 3) + imx_entry("w", 0, [1.0, 2.0]) +
          imx_entry("x", 1, [1.0]) + imx_entry("w", 4, [4.0, 4.0]) + trailer + b"junk")
    write("imatrix", "legacy_nan.dat", struct.pack("<i", 1) + imx_entry("w", 1, [1.0, float("nan")]))
    write("imatrix", "legacy_huge_count.dat", struct.pack("<i", 0x7fffffff) + imx_entry("w", 1, [1.0]))
    write("imatrix", "legacy_huge_nval.dat", struct.pack("<i", 1) + struct.pack("<i", 1) + b"w" +
          struct.pack("<ii", 1, 0x40000000) + b"\0" * 16)
    write("imatrix", "legacy_truncated.dat", (good + trailer)[:-9])
    write("imatrix", "gguf.gguf", imx_gguf([
        ("blk.0.attn_q.weight.in_sum2", 4, 1, [3.0, 6.0, 0.5, 1.0]), ("blk.0.attn_q.weight.counts", 1, 1, [3.0]),
        ("blk.0.ffn_up_exps.weight.in_sum2", 4, 2, [1.0] * 8),
        ("blk.0.ffn_up_exps.weight.counts", 1, 2, [2.0, 0.0]), ("other", 1, 1, [0.0])]))
    write("imatrix", "gguf_unpaired.gguf", imx_gguf([("w.in_sum2", 4, 1, [1.0] * 4)]))
    write("imatrix", "gguf_bad_counts.gguf", imx_gguf([
        ("w.in_sum2", 2, 2, [1.0] * 4), ("w.counts", 1, 3, [1.0, -1.0, float("nan")])]))
    write("imatrix", "gguf_no_chunks.gguf", imx_gguf([
        ("w.in_sum2", 4, 1, [1.0] * 4), ("w.counts", 1, 1, [1.0])], chunks=False))


def main(argv):
    makers = {"checkpoint": checkpoint, "keras": keras, "calib": calib, "imatrix": imatrix}
    for t in argv[1:] or list(makers):
        if t not in makers:
            print(__doc__, file=sys.stderr)
            return 2
        makers[t]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
