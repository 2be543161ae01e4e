#!/usr/bin/env bash
# npuc sparsify end to end (issue 4), against independent computations
# (tests/cli/lib/prune_check.py, NumPy; torch's topk 2:4 mask for Linear weights):
#  - N:M along the input channels, checked bit for bit on every layout of the samples
#    and of a model with short last groups, patterns 2:4, 1:4, 4:8;
#  - --compressed decodes (from docs/artifact.md alone, in Python) to the dense output,
#    and `npuc decompress` gives it back bit for bit;
#  - quantize --pattern 2:4: decompress equals the fake-quant of the sparsified model;
#  - outputs are byte-identical for -j 1, -j 2, NPUC_FORCE_REF=1;
#  - the cost model's figures and warnings (depthwise, every layer, cannot pay);
#  - bad input: N >= M, a pattern on a tensor with fewer input channels than M,
#    bad cost parameters: exit 2, one error line, nothing written.
source "$(dirname "$0")/lib/cli_test.bash"

"$PY" -c 'import numpy' 2>/dev/null || skip "numpy is not installed for $PY"
cnn="$SAMPLES/cnn_bn.safetensors"
keras="$SAMPLES/cnn_bn_keras.h5"
mlp="$SAMPLES/mlp_attn.safetensors"
chk() { "$PY" "$TESTLIB/prune_check.py" "$@"; }

# A model with every layout and input axes M does not divide (short last groups).
"$PY" - "$T/odd.safetensors" <<'PY'
import json, struct, sys
import numpy as np
rng = np.random.default_rng(5)
ts = [("fc.weight", (7, 13)), ("conv1d.weight", (5, 10, 3)), ("conv.weight", (6, 9, 3, 3)), ("big.weight", (300, 1027)),
      ("pw.weight", (64, 40, 1, 1)), ("up_transpose.weight", (12, 5, 2, 2))]
hdr, off, blobs = {"__metadata__": {"npuc.layout": json.dumps({"up_transpose.weight": "iohw"})}}, 0, []
for n, s in ts:
    x = rng.standard_normal(s).astype(np.float32)
    if n == "pw.weight":
        x[rng.random(s) < 0.3] = 0          # existing zeros
        x[:, :8] = np.float32(0.5)           # ties
    raw = x.tobytes()
    hdr[n] = {"dtype": "F32", "shape": list(s), "data_offsets": [off, off + len(raw)]}
    off += len(raw)
    blobs.append(raw)
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY

# --- dense N:M against NumPy, compressed decoded independently, decompress exact
srcs="$cnn $mlp $T/odd.safetensors"
have_h5py && srcs="$srcs $keras"
for src in $srcs; do
    ext="${src##*.}"
    for pat in 2:4 1:4 4:8; do
        keep_case 2 || continue
        n=${pat%:*}
        m=${pat#*:}
        expect_rc 0 "$NPUC_BIN" sparsify -q --pattern "$pat" "$src" -o "$T/d.$ext" -f
        chk nm "$src" "$T/d.$ext" "$n" "$m" || fail "$src $pat: differs from the NumPy reference"
        expect_rc 0 "$NPUC_BIN" sparsify -q --pattern "$pat" --compressed "$src" -o "$T/c.$ext" -f
        chk nm_compressed "$T/c.$ext" "$T/d.$ext" || fail "$src $pat: compressed form does not decode to the dense output"
        expect_rc 0 "$NPUC_BIN" decompress -q "$T/c.$ext" -o "$T/u.$ext" -f
        npuc_py compare "$T/u.$ext" "$T/d.$ext" || fail "$src $pat: decompress differs from the dense output"
        [ "$(stat -c %s "$T/c.$ext")" -lt "$(stat -c %s "$T/d.$ext")" ] || [ "$ext" = h5 ] || fail "$src $pat: not smaller"
    done
done
echo "N:M ok"

# --- torch's 2:4 mask (topk of |w| in groups of 4 along the input) on Linear weights
if "$PY" -c 'import torch' 2>/dev/null; then
    expect_rc 0 "$NPUC_BIN" sparsify -q "$T/odd.safetensors" -o "$T/t.safetensors" -f --include '^big\.weight$'
    "$PY" - "$T/odd.safetensors" "$T/t.safetensors" "$TESTLIB" <<'PY' || fail "torch 2:4 mask differs"
import sys
import numpy as np
import torch
sys.path.insert(0, sys.argv[3])
from npuc_test import read_st
def get(path, name):
    return {n: np.frombuffer(b, np.float32).reshape(s) for n, _, s, b in read_st(path)[1]}[name]
w = torch.from_numpy(get(sys.argv[1], "big.weight").copy())
full = w[:, :1024].reshape(-1, 4)
keep = full.abs().topk(2, dim=1).indices
mask = torch.zeros_like(full, dtype=torch.bool).scatter_(1, keep, True)
ref = (full * mask).reshape(300, 1024).numpy()
got = get(sys.argv[2], "big.weight")
assert np.array_equal(got[:, :1024], ref)
# the short last group of 3 keeps its 2 largest
tail = get(sys.argv[1], "big.weight")[:, 1024:]
assert ((got[:, 1024:] != 0).sum(1) == 2).all() and np.array_equal(got[:, 1024:] != 0, np.abs(tail) > np.abs(tail).min(1, keepdims=True))
PY
    echo "torch mask ok"
fi

# --- 2:4 + quantization: decompress(quantize --pattern) == fake-quant of the sparsified model
qsrcs="$cnn $mlp"
have_h5py && qsrcs="$qsrcs $keras"
for src in $qsrcs; do
    ext="${src##*.}"
    expect_rc 0 "$NPUC_BIN" sparsify -q "$src" -o "$T/s.$ext" -f
    for scheme in "--bits 8" "--bits 8 --asymmetric" "--bits 4 --group-size 16" "--bits 5 --per-tensor --quantize-all"; do
        keep_case 3 || continue
        # shellcheck disable=SC2086
        expect_rc 0 "$NPUC_BIN" quantize -q $scheme --pattern 2:4 "$src" -o "$T/q.$ext" -f
        expect_rc 0 "$NPUC_BIN" decompress -q "$T/q.$ext" -o "$T/dq.$ext" -f
        # shellcheck disable=SC2086
        expect_rc 0 "$NPUC_BIN" quantize -q $scheme --fake-quant "$T/s.$ext" -o "$T/fq.$ext" -f
        npuc_py compare "$T/dq.$ext" "$T/fq.$ext" || fail "$src $scheme: 2:4 + quantize round trip differs"
        # shellcheck disable=SC2086
        expect_rc 0 "$NPUC_BIN" quantize -q $scheme --pattern 2:4 --fake-quant "$src" -o "$T/pfq.$ext" -f
        npuc_py compare "$T/pfq.$ext" "$T/fq.$ext" || fail "$src $scheme: --pattern --fake-quant differs"
    done
done
expect_rc 0 "$NPUC_BIN" quantize -q --bits 5 --per-tensor --pattern 2:4 "$cnn" -o "$T/q.safetensors" -f
"$PY" - "$T/q.safetensors" <<'PY' || fail "2:4 + int8 artifact layout"
import json, sys
sys.path.insert(0, __import__("os").environ["NPUC_SRC"] + "/tests/cli/lib")
from npuc_test import read_st
meta, ts = read_st(sys.argv[1])
e = json.loads(meta["npuc"])["tensors"]["features.3.weight"]
assert e["encoding"] == "nm_sparse" and e["n"] == 2 and e["m"] == 4 and e["quant"]["bits"] == 5, e
shapes = {n: s for n, _, s, _ in ts}
assert shapes["features.3.weight.nm_meta"] == [16 * 9 * 2 * 2 * 2 // 8], shapes["features.3.weight.nm_meta"]
PY
echo "2:4 + quantize ok"

# --- determinism
for args in "" "--compressed" "--pattern 1:4 --compressed"; do
    keep_case 2 || continue
    # shellcheck disable=SC2086
    "$NPUC_BIN" sparsify -q $args -j 1 "$T/odd.safetensors" -o "$T/j1.safetensors" -f
    # shellcheck disable=SC2086
    "$NPUC_BIN" sparsify -q $args -j 2 "$T/odd.safetensors" -o "$T/j2.safetensors" -f
    # shellcheck disable=SC2086
    NPUC_FORCE_REF=1 "$NPUC_BIN" sparsify -q $args -j 2 "$T/odd.safetensors" -o "$T/r.safetensors" -f
    cmp "$T/j1.safetensors" "$T/j2.safetensors" || fail "sparsify $args: -j 1 and -j 2 differ"
    cmp "$T/j1.safetensors" "$T/r.safetensors" || fail "sparsify $args: SIMD and reference differ"
done
echo "determinism ok"

# --- cost model and warnings
expect_rc 0 "$NPUC_BIN" sparsify --json "$cnn" -o "$T/w.safetensors" -f
must_match "$T/err" "2 tensor\(s\) not sparsified: input-channel axis shorter than M=4"
must_match "$T/err" "every layer 2:4 can apply to was sparsified"
"$PY" - "$T/out" <<'PY' || fail "cost model figures"
import json, sys
d = json.load(open(sys.argv[1]))
t = {x["name"]: x for x in d["tensors"]}
x = t["features.3.weight"]["extra"]
# 1 token, F32: FLOPs 2*1152, bytes 4*1152 + (8 + 16)*4 activations; 2:4 keeps 576 values + 144 metadata bytes
P, act = 1152, (8 + 16) * 4
flops, bd, bs = 2 * P, 4 * P + act, 4 * 576 + 144 + act
td, ts = max(flops / 200e12, bd / 1e12), max(0.5 * flops / 200e12, bs / 1e12)
assert abs(x["ai"] - flops / bd) < 1e-9 and abs(x["speedup_24"] - td / ts) < 1e-9, x
assert x["bytes_sparse"] == 4 * 576 + 144 and x["bytes_meta"] == 144 and x["sparsity_target"] == 0.5
assert t["features.6.weight"]["action"] == "kept" and "depthwise" in t["features.6.weight"]["note"]
assert len(d["warnings"]) == 2, d["warnings"]
PY
# 56x56 output pixels: activations dominate the small convolutions and 2:4 cannot pay
expect_rc 0 "$NPUC_BIN" sparsify --tokens 3136 --exclude classifier "$cnn" -o "$T/w.safetensors" -f
must_match "$T/err" "1 layer\(s\) where 2:4 cannot pay .*features\.3\.weight"
must_not_match "$T/err" "every layer"
must_match "$T/out" "features\.3\.weight.*cannot pay"
echo "cost model ok"

# --- bad input: exit 2, one line, nothing written
bad() { # bad PATTERN ARGS...
    local pat=$1
    shift
    rm -f "$T/bad.safetensors"
    expect_rc 2 "$NPUC_BIN" sparsify "$@" -o "$T/bad.safetensors"
    must_match "$T/err" "$pat"
    [ "$(wc -l <"$T/err")" -le 2 ] || fail "more than one error line for: $*"
    [ ! -e "$T/bad.safetensors" ] && [ ! -e "$T/bad.safetensors.tmp" ] || fail "output written for: $*"
    must_be_empty "$T/out"
}
bad "expected N:M with 1 <= N < M <= 16" --pattern 4:4 "$cnn"
bad "expected N:M with 1 <= N < M <= 16" --pattern 5:4 "$cnn"
bad "expected N:M with 1 <= N < M <= 16" --pattern 0:4 "$cnn"
bad "expected N:M with 1 <= N < M <= 16" --pattern 2:x "$cnn"
bad "tensor 'features.6.weight': input-channel axis 1 has 1 value, shorter than M=4 \(depthwise\)" \
    --include 'features\.6\.weight' "$cnn"
bad "tensor 'features.0.weight': input-channel axis 1 has 3 values, shorter than M=4" --include 'features\.0' "$cnn"
bad "--peak-tops '0': must be a positive number" --peak-tops 0 "$cnn"
bad "--tokens 'x': must be a positive number" --tokens x "$cnn"
bad "matches no tensor" --exclude nothing_like_this "$cnn"
expect_rc 2 "$NPUC_BIN" quantize --pattern 4:4 "$cnn" -o "$T/bad.safetensors"
must_match "$T/err" "--pattern '4:4'"
[ ! -e "$T/bad.safetensors" ] || fail "quantize --pattern 4:4 wrote output"
expect_rc 2 "$NPUC_BIN" quantize --pattern 2:4 --include 'features\.6' "$cnn" -o "$T/bad.safetensors"
must_match "$T/err" "shorter than M=4"
[ ! -e "$T/bad.safetensors" ] || fail "quantize --pattern on a depthwise conv wrote output"
# A sparsified artifact is not sparsified (or pruned) again.
expect_rc 2 "$NPUC_BIN" sparsify "$T/c.safetensors" -o "$T/bad.safetensors"
must_match "$T/err" "already an npuc artifact"
# A corrupted position fails decompress with a message naming the tensor, nothing written.
expect_rc 0 "$NPUC_BIN" sparsify -q --compressed "$cnn" -o "$T/c.safetensors" -f
"$PY" - "$T/c.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
n = struct.unpack_from("<Q", b)[0]
h = json.loads(b[8:8 + n])
a, _ = h["classifier.weight.nm_meta"]["data_offsets"]
b[8 + n + a] = 0x00 # positions 0,0: not increasing
open(p, "wb").write(b)
PY
expect_rc 2 "$NPUC_BIN" decompress "$T/c.safetensors" -o "$T/bad.safetensors"
must_match "$T/err" "classifier.weight.*not increasing"
[ ! -e "$T/bad.safetensors" ] || fail "decompress of a corrupted artifact wrote output"
echo "bad input ok"
