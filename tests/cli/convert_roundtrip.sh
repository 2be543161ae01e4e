# convert_roundtrip.sh - `npuc convert` keeps every tensor byte for byte:
# safetensors -> h5 -> safetensors and h5 -> safetensors -> h5, for the
# samples and every shared model present.  Bytes are compared by an
# independent reader (tests/cli/lib/npuc_test.py: stdlib for safetensors,
# h5py for HDF5); names, dtypes, shapes, layouts and Keras groups by
# `npuc info --json`.  Also: --dtype casts float tensors with round half to
# even and leaves integer tensors alone, and a --layout override is stored
# in the output.
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"

have_h5py || skip "the Python at $PY has no h5py"

# Compares the `npuc info --json` views of two files: same tensors with the
# same dtype, shape, layout and output axis (and role), in the same order; and
# the same Keras groups when both have them.
same_info() {
    local a=$1 b=$2
    "$NPUC_BIN" info --json "$a" >"$T/ia.json" || fail "info $a"
    "$NPUC_BIN" info --json "$b" >"$T/ib.json" || fail "info $b"
    "$PY" - "$T/ia.json" "$T/ib.json" <<'EOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
key = lambda t: (t["name"], t["dtype"], t["shape"], t["role"], t["layout"], t["out_axis"])
ta, tb = [key(t) for t in a["tensors"]], [key(t) for t in b["tensors"]]
if ta != tb:
    diff = [(x, y) for x, y in zip(ta, tb) if x != y][:5]
    sys.exit(f"{a['file']} vs {b['file']}: {len(ta)} vs {len(tb)} tensors; first differences {diff}")
assert a["total_params"] == b["total_params"]
if a["groups"] and b["groups"]:
    ga = [(g["name"], g["n_tensors"]) for g in a["groups"]]
    gb = [(g["name"], g["n_tensors"]) for g in b["groups"]]
    assert ga == gb, (ga[:5], gb[:5])
# User metadata survives (npuc.layout is npuc's own and recomputed).
ma = {k: v for k, v in a["metadata"].items() if k != "npuc.layout"}
mb = {k: v for k, v in b["metadata"].items() if k != "npuc.layout"}
missing = {k for k in ma if mb.get(k) != ma[k]}
assert not missing, (a["file"], b["file"], sorted(missing)[:5])
EOF
}

# roundtrip SRC: SRC -> other format -> SRC's format, all three identical.
roundtrip() {
    local src=$1 base ext other
    base=$(basename "$src")
    ext=${base##*.}
    if [ "$ext" = h5 ]; then other=safetensors; else other=h5; fi
    local mid="$T/${base%.*}.mid.$other" back="$T/${base%.*}.back.$ext"
    expect_rc 0 "$NPUC_BIN" convert "$src" -o "$mid"
    must_be_empty "$T/out"
    must_match "$T/err" "^npuc: converted .*$base .* -> .*$(basename "$mid") "
    expect_rc 0 "$NPUC_BIN" convert -q "$mid" -o "$back"
    must_be_empty "$T/err"
    [ ! -e "$mid.tmp" ] && [ ! -e "$back.tmp" ] || fail "a .tmp file was left behind"
    npuc_py compare "$src" "$mid" "$back" || fail "tensor bytes differ after $src -> $mid -> $back"
    same_info "$src" "$mid"
    same_info "$src" "$back"
    expect_rc 0 "$NPUC_BIN" validate "$back"
    echo "roundtrip ok: $base -> $other -> $ext"
}

n=0
for f in cnn_bn.safetensors cnn_bn_keras.h5 mlp_attn.safetensors; do
    [ -f "$SAMPLES/$f" ] || fail "sample $f is missing"
    roundtrip "$SAMPLES/$f"
    n=$((n + 1))
done
if [ -n "$SHARED" ] && [ -d "$SHARED" ]; then
    for m in $MODELS; do
        for ext in safetensors h5; do
            if [ -f "$SHARED/$m.$ext" ] && keep_case 3; then
                roundtrip "$SHARED/$m.$ext"
                n=$((n + 1))
            fi
        done
    done
else
    echo "no shared data: samples only"
fi

# safetensors has no layer groups, so the Keras sample comes back from its
# safetensors hop as a plain HDF5 tree; the Keras layouts must survive anyway
# (they follow from the names).
expect_rc 0 "$NPUC_BIN" info --json "$T/cnn_bn_keras.back.h5"
"$PY" - "$T/out" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["format"] == "hdf5"
t = {t["name"]: t for t in d["tensors"]}
assert t["dense/kernel"]["layout"] == "io" and t["dense/kernel"]["out_axis"] == 1, t["dense/kernel"]
assert t["depthwise_conv2d/depthwise_kernel"]["out_axis"] == 2
EOF

# ---------------------------------------------------------------- --dtype
expect_rc 0 "$NPUC_BIN" convert "$SAMPLES/cnn_bn.safetensors" -o "$T/half.safetensors" --dtype f16
must_match "$T/err" 'cast to F16'
"$PY" - "$SAMPLES/cnn_bn.safetensors" "$T/half.safetensors" "$TESTLIB" <<'EOF'
import sys
sys.path.insert(0, sys.argv[3])
import npuc_test
import numpy as np
_, a = npuc_test.read_st(sys.argv[1])
_, b = npuc_test.read_st(sys.argv[2])
b = {n: (d, s, raw) for n, d, s, raw in b}
for name, dt, shape, raw in a:
    d2, s2, raw2 = b[name]
    assert s2 == shape, name
    if dt == "F32":
        assert d2 == "F16", (name, d2)
        # numpy's float32 -> float16 cast rounds half to even, as npuc must.
        want = np.frombuffer(raw, "<f4").astype("<f2").tobytes()
        assert raw2 == want, name
    else:
        assert (d2, raw2) == (dt, raw), name      # I64 num_batches_tracked untouched
print("dtype cast ok")
EOF
expect_rc 0 "$NPUC_BIN" convert "$T/half.safetensors" -o "$T/half.h5"
npuc_py compare "$T/half.safetensors" "$T/half.h5" || fail "F16 tensors differ through HDF5"
expect_rc 0 "$NPUC_BIN" convert "$SAMPLES/mlp_attn.safetensors" -o "$T/bf.safetensors" --dtype bf16 -q
expect_rc 0 "$NPUC_BIN" info --json "$T/bf.safetensors"
must_match "$T/out" '"BF16": \{"tensors": 15,'

# ---------------------------------------------------------------- --layout
# The override is recorded in the output, so later commands see it without
# repeating the flag; the tensor bytes are not touched.
f="$SHARED/ppocrv4_rec.safetensors"
if [ -f "$f" ]; then
    for out in "$T/lay.safetensors" "$T/lay.h5"; do
        expect_rc 0 "$NPUC_BIN" convert "$f" -o "$out" --layout '^linear_[0-9]+\.w_0$=oi'
        npuc_py compare "$f" "$out" || fail "--layout changed tensor bytes"
        expect_rc 0 "$NPUC_BIN" info --json "$out"
        "$PY" - "$T/out" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
t = {t["name"]: t for t in d["tensors"]}
# The Paddle convention says [in, out]; the stated [out, in] is recorded and certain.
assert t["linear_85.w_0"]["layout"] == "oi" and t["linear_85.w_0"]["out_axis"] == 0, t["linear_85.w_0"]
assert t["linear_85.w_0"]["confidence"] == "certain", t["linear_85.w_0"]
assert t["conv2d_10.w_0"]["out_axis"] == 0
assert "npuc.layout" in d["metadata"], d["metadata"].keys()
EOF
    done
fi

# ---------------------------------------------------------------- h5 options
expect_rc 0 "$NPUC_BIN" convert "$SAMPLES/cnn_bn.safetensors" -o "$T/plain0.h5" --deflate 0 --h5-style plain
expect_rc 0 "$NPUC_BIN" info --json "$T/plain0.h5"
must_match "$T/out" '"h5_style": "plain"'
npuc_py compare "$SAMPLES/cnn_bn.safetensors" "$T/plain0.h5" || fail "plain h5 differs"
expect_rc 0 "$NPUC_BIN" convert "$SAMPLES/cnn_bn_keras.h5" -o "$T/k9.h5" --deflate 9 --h5-style keras2
npuc_py compare "$SAMPLES/cnn_bn_keras.h5" "$T/k9.h5" || fail "deflate 9 h5 differs"
expect_rc 0 "$NPUC_BIN" convert "$SAMPLES/cnn_bn_keras.h5" -o "$T/k3.h5" --h5-style keras3
expect_rc 0 "$NPUC_BIN" info --json "$T/k3.h5"
must_match "$T/out" '"h5_style": "keras3"'
expect_rc 0 "$NPUC_BIN" convert "$T/k3.h5" -o "$T/k3.safetensors"
npuc_py compare "$SAMPLES/cnn_bn_keras.h5" "$T/k3.safetensors" || fail "keras3 tree lost data"
# HDF5-only options on a safetensors output: a warning, not an error.
expect_rc 0 "$NPUC_BIN" convert "$SAMPLES/cnn_bn.safetensors" -o "$T/w.safetensors" --deflate 3
must_match "$T/err" '^npuc: warning: .*apply to HDF5 outputs only'

echo "convert_roundtrip: $n files ok"
