#!/usr/bin/env bash
# npuc quantize on F16 and BF16 inputs (issue 18: the conversion to F32 runs
# in the SIMD widening kernels, inside the quantizer's units of work where the
# one-pass order applies, else for the whole tensor across the threads):
#  - int8 per channel, int4 group 32 and int8 per tensor (widened whole, not
#    unit by unit, on the large tensor) on an F16 and a BF16 file give the
#    same codes, scales and artifact metadata (but the recorded source dtype)
#    as the same run on the F32 copy that NumPy converted, and the same
#    errors in the JSON report;
#  - the half-input artifacts are byte-identical for -j 1, -j 2 and
#    NPUC_FORCE_REF=1 (the scalar reference conversion).
# Values include subnormals, signed zeros and the extremes of each format; a
# 640x1024 tensor is split into conversion chunks, a 37x29 one is odd-sized.
# Packed sub-byte codes (issue 18: the quantizer's workers pack the codes of
# each unit of work while they are in cache, the groups of eight codes that
# straddle two units afterwards):
#  - bits 2..7, per channel, per tensor, groups 32/64/128, symmetric and
#    asymmetric, --axis 1 (columns; a 3-D tensor whose channels are strided),
#    on rows of 33 and 7 values (no row a multiple of 8) and rows longer than
#    the 64K-value units: an independent reader unpacks the codes (LSB first),
#    re-packs them with numpy (trailing bits zero) to the same bytes, and
#    dequantizes them (docs/artifact.md) to --fake-quant's values bit for bit;
#  - an F16 input gives the tensors of its F32 copy; -j 1 (odd schemes) and
#    NPUC_FORCE_REF=1 (even ones) give the -j 2 artifact.
source "$(dirname "$0")/lib/cli_test.bash"

"$PY" - "$T" "$TESTLIB" <<'PY'
import sys
import numpy as np
sys.path.insert(0, sys.argv[2])
from gguf_check import st_write
d = sys.argv[1]
rng = np.random.default_rng(18)

def special(a, tiny, big):
    f = a.reshape(-1)
    f[:8] = [0.0, -0.0, tiny, -tiny, 3 * tiny, big, -big, 1.0]
    return a

def bf16_bits(a):
    """float32 -> bfloat16 bits, round half to even (NumPy has no bfloat16)."""
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)

shapes = {"big.weight": (640, 1024), "odd.weight": (37, 29), "fc.weight": (64, 96)}
h16, b16, f_h, f_b = [], [], [], []
for name, shp in shapes.items():
    w = rng.standard_normal(shp) * 0.05
    h = special(w.astype(np.float16), np.float16(2.0 ** -24), np.float16(65504.0) if name == "odd.weight" else np.float16(0.5))
    b = special(w.astype(np.float32), np.float32(2.0 ** -133), np.float32(3.0e38) if name == "odd.weight" else np.float32(0.5))
    bb = bf16_bits(b)
    h16.append((name, "F16", h))
    b16.append((name, "BF16", bb))
    f_h.append((name, "F32", h.astype(np.float32)))                      # NumPy's conversion
    f_b.append((name, "F32", (bb.astype(np.uint32) << 16).view(np.float32)))  # bf16 = upper half of f32
st_write(f"{d}/h.safetensors", h16)
st_write(f"{d}/b.safetensors", b16)
st_write(f"{d}/hf.safetensors", f_h)
st_write(f"{d}/bf.safetensors", f_b)
PY

# same_but_dtype A B DTYPE [SKIP]: equal tensors (bytes) and metadata, except
# that A's tensors record DTYPE as their source dtype where B's record F32;
# tensor SKIP (and its parts) left out.
same_but_dtype() {
    "$PY" - "$1" "$2" "$3" "${4:-}" <<'PY' || fail "$1 and $2 differ"
import json, struct, sys
def read(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    meta = json.loads(h.pop("__metadata__")["npuc"])
    data = {k: (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in h.items()
            if not (sys.argv[4] and k.startswith(sys.argv[4]))}
    meta["tensors"].pop(sys.argv[4], None)
    return meta, data
ma, da = read(sys.argv[1])
mb, db = read(sys.argv[2])
assert da == db, "tensors differ: " + ", ".join(k for k in da if da[k] != db.get(k))
for name, t in ma["tensors"].items():
    assert t["dtype"] == sys.argv[3], (name, t["dtype"])
    t["dtype"] = "F32"
assert ma == mb, (ma, mb)
PY
}

# The memcheck pass (NPUC_VALGRIND=1) takes a test's first run, on a CPU that
# then looks like one without AVX-512: this run only has to succeed (its error
# sums come from other kernels, equal within NPUC_QSUM_RTOL, not bit for bit,
# to those of the runs compared below).
expect_rc 0 "$NPUC_BIN" quantize -q --bits 4 --group-size 32 -j 2 "$T/h.safetensors" -o "$T/vg.safetensors" -f

for kind in h b; do
    dt=$([ $kind = h ] && echo F16 || echo BF16)
    for scheme in "--bits 8 --per-channel" "--bits 4 --group-size 32" "--bits 8 --per-tensor"; do
        keep_case 2 || continue # quick: (F16, channel), (F16, tensor), (BF16, g32)
        # shellcheck disable=SC2086
        expect_rc 0 "$NPUC_BIN" quantize --json $scheme -j 2 "$T/$kind.safetensors" -o "$T/q.safetensors" -f
        mv "$T/out" "$T/q.json"
        # shellcheck disable=SC2086
        expect_rc 0 "$NPUC_BIN" quantize --json $scheme -j 2 "$T/${kind}f.safetensors" -o "$T/qf.safetensors" -f
        same_but_dtype "$T/q.safetensors" "$T/qf.safetensors" "$dt"
        # The reported errors are the same too (the same kernel calls on the same values).
        "$PY" - "$T/q.json" "$T/out" <<'PY' || fail "$dt $scheme: reported errors differ from the F32 run's"
import json, sys
a, b = (json.load(open(p))["tensors"] for p in sys.argv[1:])
assert [(t["name"], t["error"]) for t in a] == [(t["name"], t["error"]) for t in b], (a, b)
PY
        # shellcheck disable=SC2086
        expect_rc 0 "$NPUC_BIN" quantize -q $scheme -j 1 "$T/$kind.safetensors" -o "$T/q1.safetensors" -f
        # shellcheck disable=SC2086
        NPUC_FORCE_REF=1 expect_rc 0 "$NPUC_BIN" quantize -q $scheme -j 2 "$T/$kind.safetensors" -o "$T/qr.safetensors" -f
        cmp "$T/q.safetensors" "$T/q1.safetensors" || fail "$dt $scheme: -j 1 and -j 2 differ"
        cmp "$T/q.safetensors" "$T/qr.safetensors" || fail "$dt $scheme: NPUC_FORCE_REF=1 differs"
    done
done
echo "F16/BF16 inputs ok"

# --- packed sub-byte codes
"$PY" - "$T" "$TESTLIB" <<'PY'
import sys
import numpy as np
sys.path.insert(0, sys.argv[2])
from gguf_check import st_write
d = sys.argv[1]
rng = np.random.default_rng(181)
ts = [(n, (rng.standard_normal(s) * 0.05).astype(np.float16))
      for n, s in (("a.weight", (40, 33)), ("b.weight", (24, 7)), ("c.weight", (3, 70001)), ("e.weight", (6, 5, 7)))]
st_write(f"{d}/p16.safetensors", [(n, "F16", h) for n, h in ts])
st_write(f"{d}/p32.safetensors", [(n, "F32", h.astype(np.float32)) for n, h in ts])
PY
n=0
checks=()
for scheme in "--bits 4 --per-channel" "--bits 3 --asymmetric --group-size 32" "--bits 2 --group-size 64" \
              "--bits 4 --asymmetric --group-size 128" "--bits 5 --asymmetric --per-tensor" \
              "--bits 7 --group-size 32 --axis 1" "--bits 6 --asymmetric --axis 1"; do
    n=$((n + 1))
    keep_case 3 || continue # quick: schemes 1, 4, 7
    # The 3-D tensor has no channel axis but by --axis.
    sel=(--quantize-all --exclude e.weight)
    case "$scheme" in *--axis*) sel=(--quantize-all) ;; esac
    for in in p32 p16; do
        # shellcheck disable=SC2086
        expect_rc 0 "$NPUC_BIN" quantize -q "${sel[@]}" $scheme -j 2 "$T/$in.safetensors" -o "$T/k$n$in.safetensors" -f
    done
    same_but_dtype "$T/k${n}p16.safetensors" "$T/k${n}p32.safetensors" F16 e.weight
    # shellcheck disable=SC2086
    expect_rc 0 "$NPUC_BIN" quantize -q "${sel[@]}" --fake-quant $scheme -j 2 "$T/p32.safetensors" -o "$T/f$n.safetensors" -f
    checks+=("$T/k${n}p32.safetensors" "$T/f$n.safetensors")
    # Alternately -j 1 and the scalar reference kernels.
    ref=0 j=1
    [ $((n % 2)) = 0 ] && ref=1 j=2
    # shellcheck disable=SC2086
    NPUC_FORCE_REF=$ref expect_rc 0 "$NPUC_BIN" quantize -q "${sel[@]}" $scheme -j $j "$T/p32.safetensors" -o "$T/j.safetensors" -f
    cmp "$T/k${n}p32.safetensors" "$T/j.safetensors" || fail "$scheme: NPUC_FORCE_REF=$ref -j $j differs from -j 2"
done
"$PY" - "$TESTLIB" "${checks[@]}" <<'PY' || fail "packed codes: see above"
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from npuc_test import read_st
NP = {"F32": np.float32, "U8": np.uint8, "I8": np.int8}
for art_p, fq_p in zip(sys.argv[2::2], sys.argv[3::2]):
    meta, ts = read_st(art_p)
    art = {n: np.frombuffer(b, NP[dt]) for n, dt, _, b in ts}
    fq = {n: (dt, s, b) for n, dt, s, b in read_st(fq_p)[1]}
    desc = json.loads(meta["npuc"])["tensors"]
    for name, e in desc.items():
        assert e["encoding"] == "quant" and e["packed"] and e["bits"] < 8, (art_p, name, e)
        n, bits, raw = int(np.prod(e["shape"])), e["bits"], art[e["codes"]]
        assert raw.size == -(-n * bits // 8), (art_p, name, raw.size)
        # LSB first: code i is bits [i*bits, (i+1)*bits) of the byte string.
        fields = np.unpackbits(raw, bitorder="little")[: n * bits].reshape(n, bits)
        u = (fields.astype(np.int64) << np.arange(bits)).sum(axis=1)
        again = np.packbits(((u[:, None] >> np.arange(bits)) & 1).reshape(-1).astype(np.uint8), bitorder="little")
        assert again.tobytes() == raw.tobytes(), (art_p, name, "trailing bits or layout")
        q = np.where(u >= 1 << (bits - 1), u - (1 << bits), u) if e["symmetric"] else u
        outer, C, inner = e["view"]
        per = outer * inner
        G = e["group_size"] if e["granularity"] == "group" else per
        gpc = -(-per // G)
        sc = art[e["scale"]].astype(np.float32)
        zp = art[e["zero_point"]].astype(np.int64) if e["zero_point"] else np.zeros(sc.size, np.int64)
        assert sc.size == (1 if e["granularity"] == "tensor" else C * gpc), (art_p, name, sc.size)
        j = np.arange(outer)[:, None, None] * inner + np.arange(inner)[None, None, :]   # sequence number
        idx = np.zeros((outer, C, inner), np.int64) if e["granularity"] == "tensor" else \
            np.arange(C)[None, :, None] * gpc + j // G
        w = (q.reshape(outer, C, inner) - zp[idx]).astype(np.float32) * sc[idx]
        dt, s, b = fq.pop(name)
        assert dt == "F32" and s == e["shape"], (fq_p, name, dt, s)
        assert w.reshape(-1).tobytes() == b, (art_p, name, "codes differ from --fake-quant's values")
    assert all(k == "e.weight" for k in fq), (fq_p, list(fq))   # only the excluded tensor is left
print(f"{len(sys.argv[2:]) // 2} packed artifacts checked")
PY
echo "packed codes ok"
