# validate.sh - `npuc validate [--deep]`: the samples are valid; --deep's
# NaN / Inf / subnormal / zero counts equal an independent census taken in
# Python from the raw bits (each value in its own dtype); crafted files with
# NaN/Inf fail with exit 2 naming the tensor; malformed files fail with exit 2
# naming the file.
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"

# ---------------------------------------------------------------- samples
for f in cnn_bn.safetensors cnn_bn_keras.h5 mlp_attn.safetensors; do
    p="$SAMPLES/$f"
    [ -f "$p" ] || fail "sample $f is missing"
    expect_rc 0 "$NPUC_BIN" validate "$p"
    must_be_empty "$T/err"
    must_match "$T/out" "^ok: .*$f: [0-9]+ tensors, [0-9,]+ params, "
    [ "$(wc -l <"$T/out")" -eq 1 ] || fail "validate without --deep prints one line"

    expect_rc 0 "$NPUC_BIN" validate --deep "$p"
    must_match "$T/out" "^values: [0-9,]+ checked: 0 NaN, 0 Inf, "
    must_match "$T/out" "^ok: .*$f: "

    # The census per tensor, against the Python reader (h5py for .h5).
    if [[ "$f" == *.h5 ]] && ! have_h5py; then continue; fi
    expect_rc 0 "$NPUC_BIN" validate --deep --json -q "$p"
    must_be_empty "$T/err"
    cp "$T/out" "$T/v.json"
    npuc_py counts "$p" >"$T/want.json"
    "$PY" - "$T/v.json" "$T/want.json" "$f" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
want = json.load(open(sys.argv[2]))
where = sys.argv[3]
assert doc["schema"] == "npuc.validate/1" and doc["ok"] is True and doc["deep"] is True, doc
assert doc["error"] is None
got = {t["name"]: {k: t[k] for k in ("nan", "inf", "subnormal", "zero", "finite")}
       for t in doc["tensors"]}
assert got == want, (where, [(n, got.get(n), want[n]) for n in want if got.get(n) != want[n]][:5])
tot = {k: sum(c[k] for c in want.values()) for k in ("nan", "inf", "subnormal", "zero", "finite")}
assert doc["values"] == tot, (doc["values"], tot)
assert doc["nonfinite_tensors"] == 0
assert doc["subnormal_tensors"] == sum(1 for c in want.values() if c["subnormal"])
print(where, "census", tot)
EOF
done

# The samples were built to show both warnings' cases: mlp_attn is F16 and has
# F16 subnormals (normal numbers once widened to f32); the Keras sample has
# two exact zeros in a moving variance.
expect_rc 0 "$NPUC_BIN" validate --deep "$SAMPLES/mlp_attn.safetensors"
must_match "$T/out" '^subnormal +\[[0-9]+\] [a-z_.0-9]+ F16 '
must_match "$T/err" '^npuc: warning: .*mlp_attn\.safetensors: [0-9]+ subnormal values in [0-9]+ tensors'
expect_rc 0 "$NPUC_BIN" validate --deep -q "$SAMPLES/mlp_attn.safetensors"
must_be_empty "$T/err"
expect_rc 0 "$NPUC_BIN" validate --deep --json "$SAMPLES/cnn_bn_keras.h5"
"$PY" - "$T/out" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
t = {t["name"]: t for t in doc["tensors"]}["batch_normalization_1/moving_variance"]
assert t["zero"] == 2 and t["finite"] == 16, t
EOF

# ---------------------------------------------------------------- NaN / Inf
"$PY" - "$T" <<'EOF'
import json, struct, sys
T = sys.argv[1]

def st(path, tensors):
    hdr, data = {}, b""
    for name, dt, shape, raw in tensors:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(hdr).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)

nan, inf = float("nan"), float("inf")
st(f"{T}/nan.safetensors", [
    ("good.weight", "F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)),
    ("bad.weight", "F32", [2, 3], struct.pack("<6f", 1, nan, inf, 0.0, -inf, 1e-40)),
])
# F16 Inf (0x7c00) and NaN (0x7e00), plus a subnormal (0x0001), no F32 at all.
st(f"{T}/half.safetensors", [
    ("ok.bias", "F16", [2], struct.pack("<2H", 0x3c00, 0x0000)),
    ("half.weight", "F16", [2, 2], struct.pack("<4H", 0x7c00, 0x0001, 0x3c00, 0x7e00)),
])
# F8_E4M3: 0x7f is NaN (the format has no Inf); 0x7e (448) is finite.
st(f"{T}/e4m3.safetensors", [
    ("q.weight", "F8_E4M3", [4], bytes([0x7e, 0x01, 0x7f, 0x00])),
])
# Only subnormals: a warning, exit 0.
st(f"{T}/sub.safetensors", [
    ("tiny.weight", "F32", [3], struct.pack("<3I", 0x00000001, 0x3f800000, 0x807fffff)),
])
EOF

# Structure alone is fine; the values are not.
expect_rc 0 "$NPUC_BIN" validate "$T/nan.safetensors"
expect_rc 2 "$NPUC_BIN" validate --deep "$T/nan.safetensors"
must_match "$T/out" '^non-finite +\[1\] bad\.weight F32 \[2,3\]: 1 NaN, 2 Inf, 1 subnormal, 1 zero of 6 values$'
must_not_match "$T/out" 'good\.weight'
must_not_match "$T/out" '^ok:'
must_match "$T/err" "^npuc: error: .*nan\\.safetensors: non-finite values in 1 tensor \\(1 NaN, 2 Inf; first: 'bad\\.weight'\\)$"

expect_rc 2 "$NPUC_BIN" validate --deep --json "$T/nan.safetensors"
"$PY" - "$T/out" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["ok"] is False and "bad.weight" in doc["error"], doc
assert doc["values"] == {"nan": 1, "inf": 2, "subnormal": 1, "zero": 1, "finite": 7}, doc["values"]
assert doc["nonfinite_tensors"] == 1
EOF

expect_rc 2 "$NPUC_BIN" validate --deep "$T/half.safetensors"
must_match "$T/out" '^non-finite +\[1\] half\.weight F16 \[2,2\]: 1 NaN, 1 Inf, 1 subnormal, 0 zero of 4 values$'
must_match "$T/err" "first: 'half\\.weight'"

expect_rc 2 "$NPUC_BIN" validate --deep "$T/e4m3.safetensors"
must_match "$T/out" '^non-finite +\[0\] q\.weight F8_E4M3 \[4\]: 1 NaN, 0 Inf, 1 subnormal, 1 zero of 4 values$'

expect_rc 0 "$NPUC_BIN" validate --deep "$T/sub.safetensors"
must_match "$T/out" '^subnormal +\[0\] tiny\.weight F32 \[3\]: 0 NaN, 0 Inf, 2 subnormal, 0 zero of 3 values$'
must_match "$T/out" '^ok: '
must_match "$T/err" '^npuc: warning: .*sub\.safetensors: 2 subnormal values in 1 tensor'

# ---------------------------------------------------------------- malformed
printf 'not a model at all' >"$T/junk.safetensors"
expect_rc 2 "$NPUC_BIN" validate "$T/junk.safetensors"
must_match "$T/err" "^npuc: error: $T/junk\\.safetensors: "
must_be_empty "$T/out"
expect_rc 2 "$NPUC_BIN" validate --json "$T/junk.safetensors"
must_match "$T/err" "^npuc: error: $T/junk\\.safetensors: "
"$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["ok"] is False and d["error"], d' "$T/out"

# Truncated: the header promises more data than the file holds.
head -c 100 "$SAMPLES/cnn_bn.safetensors" >"$T/trunc.safetensors"
expect_rc 2 "$NPUC_BIN" validate "$T/trunc.safetensors"
must_match "$T/err" "^npuc: error: $T/trunc\\.safetensors: "

# An .h5 name on a file that is not HDF5.
cp "$T/junk.safetensors" "$T/junk.h5"
expect_rc 2 "$NPUC_BIN" validate "$T/junk.h5"
must_match "$T/err" "^npuc: error: $T/junk\\.h5: "

expect_rc 2 "$NPUC_BIN" validate "$T/missing.safetensors"
must_match "$T/err" "^npuc: error: $T/missing\\.safetensors: "

# ---------------------------------------------------------------- artifacts
# The "npuc" description is checked against the stored tensors; --deep
# decodes every encoded tensor (and finds NaN/Inf that only decoding makes).
"$NPUC_BIN" quantize -q "$SAMPLES/mlp_attn.safetensors" -o "$T/q.safetensors" >/dev/null
nenc=$("$PY" -c 'import json,sys
sys.path.insert(0, sys.argv[2])
from npuc_test import read_st
meta, _ = read_st(sys.argv[1]); print(len(json.loads(meta["npuc"])["tensors"]))' "$T/q.safetensors" "$TESTLIB")
[ "$nenc" -gt 0 ] || fail "the artifact encodes no tensor"
expect_rc 0 "$NPUC_BIN" validate "$T/q.safetensors"
must_match "$T/out" "^artifact: $nenc encoded tensors, description consistent with the stored tensors\$"
expect_rc 0 "$NPUC_BIN" validate --deep --json "$T/q.safetensors"
"$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); a=d["artifact"]
assert d["ok"] is True and a == {"encoded": int(sys.argv[2]), "decoded": int(sys.argv[2]), "nonfinite": 0}, d' "$T/out" "$nenc"
expect_rc 0 "$NPUC_BIN" validate --json "$SAMPLES/cnn_bn.safetensors"
"$PY" -c 'import json,sys; assert json.load(open(sys.argv[1]))["artifact"] is None' "$T/out"

# rewrite IN OUT MODE: a broken copy of the artifact (independent writer).
rewrite() {
    "$PY" - "$@" <<'PY'
import json, struct, sys
src, dst, mode = sys.argv[1:4]
b = open(src, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
hdr = json.loads(b[8:8 + n])
data = bytearray(b[8 + n:])
art = json.loads(hdr["__metadata__"]["npuc"])
name = "attn.q_proj.weight"
e = art["tensors"][name]
if mode == "part":      # the description names a scale tensor that is not stored
    e["scale"] = name + ".no_such_scale"
else:                   # finite stored scales whose products overflow float32
    lo, hi = hdr[e["scale"]]["data_offsets"]
    data[lo:hi] = struct.pack("<f", 3e38) * ((hi - lo) // 4)
hdr["__metadata__"]["npuc"] = json.dumps(art)
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
open(dst, "wb").write(struct.pack("<Q", len(h)) + h + bytes(data))
PY
}
rewrite "$T/q.safetensors" "$T/badpart.safetensors" part
expect_rc 2 "$NPUC_BIN" validate "$T/badpart.safetensors"
[ "$(wc -l <"$T/err")" -eq 1 ] || fail "not one error line: $(cat "$T/err")"
must_match "$T/err" "^npuc: error: $T/badpart\.safetensors: .*attn\.q_proj\.weight"
expect_rc 2 "$NPUC_BIN" validate --json "$T/badpart.safetensors"
"$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["ok"] is False and "attn.q_proj.weight" in d["error"], d' "$T/out"
rewrite "$T/q.safetensors" "$T/overflow.safetensors" overflow
expect_rc 0 "$NPUC_BIN" validate "$T/overflow.safetensors" # the description is sound...
expect_rc 2 "$NPUC_BIN" validate --deep "$T/overflow.safetensors" # ...the decoded values are not
must_match "$T/err" "^npuc: error: $T/overflow\.safetensors: [0-9]+ non-finite values in decoded tensors \(first: 'attn\.q_proj\.weight'\)\$"

echo "validate: ok"
