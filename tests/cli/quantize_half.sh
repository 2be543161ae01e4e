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

# same_but_dtype A B DTYPE: equal tensors (bytes) and metadata, except that
# A's tensors record DTYPE as their source dtype where B's record F32.
same_but_dtype() {
    "$PY" - "$1" "$2" "$3" <<'PY' || fail "$1 and $2 differ"
import json, struct, sys
def read(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    meta = json.loads(h.pop("__metadata__")["npuc"])
    data = {k: (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in h.items()}
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
