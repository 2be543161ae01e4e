"""ct_check.py - the compressed-tensors layout written from its specification
(neuralmagic/compressed-tensors: pack_to_int32, the naive and packed
compressors, QuantizationConfig), in NumPy, for tests/cli/checkpoints.sh.

  expect SRC ART CT   CT (npuc's --format compressed-tensors output) equals what
                      the specification builds from ART (npuc's own artifact of the
                      same quantization, read from docs/artifact.md): every tensor
                      (names, dtypes, shapes, bytes) and config.json (SRC's keys
                      unchanged plus the quantization_config block)
  dense D FAKE        D (decompress of CT) equals FAKE (quantize --fake-quant),
                      value for value once cast to FAKE's dtype
"""
import json, os, sys
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ckpt_check import read_any, read_st, run_commands  # noqa: E402

NP = {"F32": np.float32, "F16": np.float16, "I8": np.int8, "U8": np.uint8, "I32": np.int32, "I64": np.int64}


def arr(t):
    dt, shape, b = t
    return np.frombuffer(b, NP[dt]).reshape(shape)


def npuc_codes(t, e):
    """npuc's codes of entry e as ints (docs/artifact.md: LSB-first bit packing,
    symmetric codes two's complement in `bits` bits)."""
    bits, n = e["bits"], int(np.prod(e["shape"]))
    raw = np.frombuffer(t[2], np.uint8)
    if not e["packed"]:
        return raw.view(np.int8).astype(np.int64) if e["symmetric"] else raw.astype(np.int64)
    bitv = np.unpackbits(raw, bitorder="little")[: n * bits].reshape(n, bits)
    u = (bitv.astype(np.int64) << np.arange(bits)).sum(1)
    if e["symmetric"]:
        u = np.where(u >= 1 << (bits - 1), u - (1 << bits), u)
    return u


def pack_to_int32(v, bits, packed_dim=1):
    """compressed-tensors' pack_to_int32: signed int8 codes + 2^(bits-1), 32/bits
    per int32 along packed_dim, value i of a word in bits [bits*i, bits*(i+1))."""
    u = (v + (1 << (bits - 1))).astype(np.uint32)
    pf = 32 // bits
    if packed_dim == 0:
        u = u.T
    size = -(-u.shape[1] // pf)
    u = np.pad(u, [(0, 0), (0, size * pf - u.shape[1])])
    out = np.zeros((u.shape[0], size), np.uint32)
    for i in range(pf):
        out |= u[:, i::pf] << np.uint32(bits * i)
    if packed_dim == 0:
        out = np.ascontiguousarray(out.T)
    return out.view(np.int32)


def expect(src, art, ct):
    A = read_any(art)
    shard = sorted(f for f in os.listdir(art) if f.endswith(".safetensors"))[0]
    ents = json.loads(read_st(os.path.join(art, shard))[1]["npuc"])["tensors"]
    want, groups, ignore, parts = {}, {}, [], set()
    for name, e in ents.items():
        parts.update(p for p in (e["codes"], e["scale"], e["zero_point"]) if p)
        O, I = e["shape"]
        b, sym, gs = e["bits"], e["symmetric"], e["group_size"]
        q = npuc_codes(A[e["codes"]], e).reshape(O, I)
        if not sym:
            q = q - (1 << (b - 1))
        scale = arr(A[e["scale"]]).astype(np.float32).reshape(O, -1)
        if b == 8:
            want[name] = ("I8", (O, I), q.astype(np.int8).tobytes())
        else:
            p = pack_to_int32(q, b)
            want[name + "_packed"] = ("I32", p.shape, p.tobytes())
            want[name + "_shape"] = ("I64", (2,), np.array([O, I], np.int64).tobytes())
        want[name + "_scale"] = ("F32", scale.shape, scale.tobytes())
        if not sym:
            zp = arr(A[e["zero_point"]]).astype(np.int64).reshape(O, -1) - (1 << (b - 1))
            z = zp.astype(np.int8) if b == 8 else pack_to_int32(zp, b, packed_dim=0)
            want[name + "_zero_point"] = ("I8" if b == 8 else "I32", z.shape, z.tobytes())
        key = (b, sym, gs)
        if key not in groups:
            groups[key] = {"targets": [], "weights": {"num_bits": b, "type": "int", "symmetric": sym,
                           "strategy": "group" if gs else "channel", "group_size": gs or None, "dynamic": False,
                           "observer": "minmax"}, "input_activations": None, "output_activations": None,
                           "format": "int-quantized" if b == 8 else "pack-quantized"}
        groups[key]["targets"].append(name[: -len(".weight")])
    for k, t in A.items():
        if k in parts:
            continue
        want[k] = t
        if len(t[1]) == 2 and t[0] in ("F32", "F16", "BF16") and k.endswith(".weight"):
            ignore.append(k[: -len(".weight")])
    got = read_any(ct)
    assert sorted(got) == sorted(want), sorted(set(got) ^ set(want))[:8]
    for k in want:
        g, w = got[k], want[k]
        assert (g[0], tuple(g[1]), g[2]) == (w[0], tuple(w[1]), w[2]), f"{k}: {g[:2]} vs {w[:2]}"
    fmts = {g["format"] for g in groups.values()}
    gl = list(groups.values())
    if len(fmts) == 1:
        for g in gl:
            del g["format"]
    for g in gl:
        g["targets"].sort()
    qc = {"quant_method": "compressed-tensors", "format": fmts.pop() if len(fmts) == 1 else "mixed-precision",
          "quantization_status": "compressed", "config_groups": {f"group_{i}": g for i, g in enumerate(gl)},
          "ignore": ignore, "kv_cache_scheme": None}
    cfg = json.load(open(os.path.join(ct, "config.json")))
    got_qc = cfg.pop("quantization_config")
    for g in got_qc["config_groups"].values():
        g["targets"].sort()
    norm = lambda q: sorted(json.dumps(g, sort_keys=True) for g in q.pop("config_groups").values())
    assert norm(got_qc) == norm(qc) and got_qc == qc, json.dumps(got_qc) + "\n" + json.dumps(qc)
    assert cfg == json.load(open(os.path.join(src, "config.json"))), "config.json's other keys changed"
    print(f"expect: {len(want)} tensors, {len(groups)} config groups")


def dense(d, fake):
    D, F = read_any(d), read_any(fake)
    assert sorted(D) == sorted(F), sorted(set(D) ^ set(F))[:8]
    for k in F:
        f = arr(F[k])
        x = arr(D[k]).astype(f.dtype)
        assert x.shape == f.shape and np.array_equal(x.view(np.uint8), f.view(np.uint8)), k
    print(f"dense: {len(F)} tensors equal")


if __name__ == "__main__":  # several commands in one run: "expect a b c , dense d e"
    run_commands(globals(), sys.argv[1:])
