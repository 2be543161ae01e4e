#!/usr/bin/env bash
# npuc quantize / decompress end to end (issue: quantize):
#  - quantize -> decompress reproduces --fake-quant exactly, every scheme, both formats;
#  - artifacts are byte-identical for -j 1, -j 2, NPUC_FORCE_REF=1, the read-ahead
#    helper forced on or off (NPUC_READAHEAD) and across runs;
#  - selection rules (rank >= 2, --include/--exclude, --layer-bits, first/last at 8 bits);
#  - bad input: NaN weights, bad bits/axis/group size, patterns matching nothing,
#    an existing output without -f: exit 2, one line naming the problem, nothing written.
source "$(dirname "$0")/lib/cli_test.bash"

cnn="$SAMPLES/cnn_bn.safetensors"
keras="$SAMPLES/cnn_bn_keras.h5"
mlp="$SAMPLES/mlp_attn.safetensors"

# --- round trip == fake-quant
for src in "$cnn" "$mlp" "$keras"; do
    ext="${src##*.}"
    for scheme in "--bits 8" "--bits 8 --asymmetric" "--bits 4 --group-size 16" "--bits 3 --asymmetric --per-tensor" \
                  "--bits 2 --quantize-all" "--bits 6 --range mse" "--bits 5 --asymmetric --range percentile=99" \
                  "--bits 8 --range entropy --group-size 64"; do
        keep_case 3 || continue
        # shellcheck disable=SC2086
        expect_rc 0 "$NPUC_BIN" quantize -q $scheme "$src" -o "$T/a.$ext" -f
        # shellcheck disable=SC2086
        expect_rc 0 "$NPUC_BIN" quantize -q $scheme --fake-quant "$src" -o "$T/fq.$ext" -f
        expect_rc 0 "$NPUC_BIN" decompress -q "$T/a.$ext" -o "$T/dq.$ext" -f
        npuc_py compare "$T/dq.$ext" "$T/fq.$ext" || fail "$src $scheme: decompress differs from --fake-quant"
        # Fake-quant changed the weights (it is not a copy), decompress kept names/shapes/dtypes.
        if npuc_py compare "$T/fq.$ext" "$src" 2>/dev/null; then fail "$src $scheme: fake-quant equals the input"; fi
    done
done
echo "round trips ok"

# --- byte-identical artifacts: threads, SIMD on/off, reruns
for src in "$mlp" "$keras"; do
    ext="${src##*.}"
    "$NPUC_BIN" quantize -q --bits 4 --group-size 32 -j 1 "$src" -o "$T/j1.$ext" >/dev/null
    "$NPUC_BIN" quantize -q --bits 4 --group-size 32 -j 2 "$src" -o "$T/j2.$ext" >/dev/null
    NPUC_FORCE_REF=1 "$NPUC_BIN" quantize -q --bits 4 --group-size 32 -j 2 "$src" -o "$T/ref.$ext" >/dev/null
    "$NPUC_BIN" quantize -q --bits 4 --group-size 32 "$src" -o "$T/again.$ext" >/dev/null
    cmp "$T/j1.$ext" "$T/j2.$ext" || fail "$src: -j 1 and -j 2 artifacts differ"
    cmp "$T/j1.$ext" "$T/ref.$ext" || fail "$src: SIMD and reference artifacts differ"
    cmp "$T/j1.$ext" "$T/again.$ext" || fail "$src: two runs differ"
    # The read-ahead helper (forced on for these small files, and off) changes nothing.
    for ra in 0 1; do
        for j in 1 2; do
            keep_case 2 || continue
            NPUC_READAHEAD=$ra "$NPUC_BIN" quantize -q --bits 4 --group-size 32 -j $j "$src" -o "$T/ra$ra$j.$ext" >/dev/null
            cmp "$T/j1.$ext" "$T/ra$ra$j.$ext" || fail "$src: NPUC_READAHEAD=$ra -j $j artifact differs"
        done
    done
    # The other grouped minmax schemes (minmax_groups, range_params, quant_groups
    # kernels): asymmetric, the full grid, f16 scales; and the MSE range search
    # (its exact mode evaluates several candidates per pass with AVX-512; the
    # reference one at a time): SIMD -j 1 against reference -j 2.
    for scheme in "--bits 4 --group-size 32 --asymmetric" "--bits 3 --group-size 128 --grid full" \
                  "--bits 8 --group-size 64 --scale-dtype f16" "--bits 4 --group-size 32 --range mse" \
                  "--bits 4 --group-size 32 --asymmetric --range mse" "--bits 3 --asymmetric --range mse"; do
        # The search does not depend on the format: the quick pass runs it on the first source.
        case "$scheme" in *mse*) is_quick && [ "$src" != "$mlp" ] && continue ;; esac
        "$NPUC_BIN" quantize -q $scheme -j 1 "$src" -o "$T/g1.$ext" -f >/dev/null
        NPUC_FORCE_REF=1 "$NPUC_BIN" quantize -q $scheme -j 2 "$src" -o "$T/g2.$ext" -f >/dev/null
        cmp "$T/g1.$ext" "$T/g2.$ext" || fail "$src $scheme: SIMD -j 1 and reference -j 2 artifacts differ"
    done
done
echo "determinism ok"

# --- selection and the JSON report
expect_rc 0 "$NPUC_BIN" quantize --bits 4 --json "$cnn" -o "$T/s.safetensors" -f
"$PY" - "$T/out" <<'PY' || fail "selection / JSON checks"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["schema"] == "npuc.report/1", d["schema"]
t = {x["name"]: x for x in d["tensors"]}
q = [n for n, x in t.items() if x["action"] == "quantized"]
assert q == ["features.0.weight", "features.3.weight", "features.6.weight", "classifier.weight"], q
assert t["features.1.running_var"]["action"] == "kept"
assert t["features.0.weight"]["extra"]["bits"] == 8 and "input convolution" in t["features.0.weight"]["note"]
assert t["classifier.weight"]["extra"]["bits"] == 8 and "output head" in t["classifier.weight"]["note"]
assert t["features.3.weight"]["extra"]["bits"] == 4 and t["features.3.weight"]["scheme"] == "int4/ch16"
e = t["features.3.weight"]["error"]
assert e["sqnr_db"] > 10 and 0.9 < e["cosine"] <= 1 and e["clipped"] == 0
# The uniform-noise prediction is in the right range of the measured MSE.
assert 0.3 < e["mse"] / e["noise_pred"] < 3, (e["mse"], e["noise_pred"])
assert d["totals"]["counts"]["quantized"] == 4 and d["totals"]["bytes_after"] < d["totals"]["bytes_before"]
assert d["inputs"][0]["sha256"] and len(d["inputs"][0]["sha256"]) == 64
PY
expect_rc 0 "$NPUC_BIN" quantize --bits 4 --quantize-all --json "$cnn" -o "$T/s.safetensors" -f
"$PY" -c "import json,sys; d=json.load(open('$T/out')); t={x['name']:x for x in d['tensors']}; assert t['features.0.weight']['extra']['bits']==4" || fail "--quantize-all"
expect_rc 0 "$NPUC_BIN" quantize --bits 4 --layer-bits 'classifier=6' --layer-bits '^features\.3=5' --exclude 'features\.6' --json "$cnn" -o "$T/s.safetensors" -f
"$PY" - "$T/out" <<'PY' || fail "--layer-bits / --exclude"
import json, sys
t = {x["name"]: x for x in json.load(open(sys.argv[1]))["tensors"]}
assert t["classifier.weight"]["extra"]["bits"] == 6
assert t["features.3.weight"]["extra"]["bits"] == 5
assert t["features.6.weight"]["action"] == "kept"
assert t["features.0.weight"]["extra"]["bits"] == 8
PY
# The first matching rule decides; a later rule that matched only tensors an
# earlier rule decided still matched them, so it is not "matches no tensor".
expect_rc 0 "$NPUC_BIN" quantize --bits 4 --layer-bits 'weight=6' --layer-bits '^classifier\.weight$=3' --json "$cnn" -o "$T/s.safetensors" -f
"$PY" - "$T/out" <<'PY' || fail "--layer-bits: first match wins"
import json, sys
t = {x["name"]: x for x in json.load(open(sys.argv[1]))["tensors"]}
assert t["classifier.weight"]["extra"]["bits"] == 6, t["classifier.weight"]  # 'weight=6' came first
assert t["features.3.weight"]["extra"]["bits"] == 6
PY
expect_rc 0 "$NPUC_BIN" quantize -q --include '^classifier\.weight$' --json "$cnn" -o "$T/s.safetensors" -f
"$PY" -c "import json; d=json.load(open('$T/out')); assert d['totals']['counts']['quantized']==1" || fail "--include"
# Keras HWIO kernels are quantized along their last axis: 8 scales for conv2d/kernel [3,3,3,8].
expect_rc 0 "$NPUC_BIN" quantize -q "$keras" -o "$T/k.safetensors" -f
"$PY" - "$T/k.safetensors" <<PY || fail "Keras per-channel axis"
import json, sys
sys.path.insert(0, "$TESTLIB")
from npuc_test import read_st
meta, ts = read_st(sys.argv[1])
shapes = {n: s for n, _, s, _ in ts}
d = json.loads(meta["npuc"])["tensors"]
k = [n for n in d if n.endswith("kernel") and "depthwise" not in n and len(d[n]["shape"]) == 4][0]
assert d[k]["axis"] == 3 and shapes[k + ".scale"] == [d[k]["shape"][3]], (k, d[k], shapes[k + ".scale"])
PY
echo "selection ok"

# --- bad input: exit 2, one line, nothing written
"$PY" - "$T/nan.safetensors" <<'PY'
import json, struct, sys
vals = [0.5, float("nan"), -1.0, float("inf"), 2.0, 3.0]
data = struct.pack("<6f", *vals)
h = json.dumps({"fc.weight": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}}).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + data)
PY
expect_rc 2 "$NPUC_BIN" quantize "$T/nan.safetensors" -o "$T/nan.q.safetensors"
must_match "$T/err" "^npuc: error: .*nan\.safetensors: tensor 'fc\.weight': 2 NaN or Inf values"
[ "$(wc -l <"$T/err")" -eq 1 ] || fail "NaN error is not one line"
[ ! -e "$T/nan.q.safetensors" ] && [ ! -e "$T/nan.q.safetensors.tmp" ] || fail "output written for NaN input"

bad() { # bad EXPECTED_PATTERN ARGS...
    local pat=$1
    shift
    rm -f "$T/bad.safetensors"
    expect_rc 2 "$NPUC_BIN" quantize "$@" -o "$T/bad.safetensors"
    must_match "$T/err" "$pat"
    [ "$(wc -l <"$T/err")" -le 2 ] || fail "more than one error line for: $*"
    [ ! -e "$T/bad.safetensors" ] || fail "output written for: $*"
    must_be_empty "$T/out"
}
bad "bit width must be 2\.\.8" --bits 9 "$cnn"
bad "bit width must be 2\.\.8" --bits 1 "$cnn"
bad "axis 3 is outside its rank 2" --axis 3 "$mlp"
bad "group-size '1'" --group-size 1 "$cnn"
bad "matches no tensor" --include 'nothing_like_this' "$cnn"
bad "matches no tensor" --exclude 'nothing_like_this' "$cnn"
bad "--layer-bits 'x'" --layer-bits 'x' "$cnn"
bad "--layer-bits 'classifier=12': must be 2\.\.8" --layer-bits 'classifier=12' "$cnn"
bad "range" --range kl "$cnn"
bad "choose one of" --per-tensor --group-size 8 "$cnn"
echo keep >"$T/exists.safetensors"
expect_rc 2 "$NPUC_BIN" quantize "$cnn" -o "$T/exists.safetensors"
must_match "$T/err" "exists"
[ "$(cat "$T/exists.safetensors")" = keep ] || fail "existing output was modified"
# An artifact cannot be quantized again.
expect_rc 2 "$NPUC_BIN" quantize "$T/j1.safetensors" -o "$T/twice.safetensors"
must_match "$T/err" "already an npuc artifact"
# decompress of a plain model is an error too.
expect_rc 2 "$NPUC_BIN" decompress "$cnn" -o "$T/plain.safetensors"
must_match "$T/err" "not an npuc artifact"
echo "bad input ok"

# --- per-tensor group size
expect_rc 0 "$NPUC_BIN" quantize --bits 4 --layer-group-size '^features\.3\.weight$=16' --json "$cnn" -o "$T/g.safetensors" -f
"$PY" - "$T/out" <<'PY' || fail "--layer-group-size"
import json, sys
t = {x["name"]: x for x in json.load(open(sys.argv[1]))["tensors"]}
assert t["features.3.weight"]["scheme"] == "int4/g16" and t["features.3.weight"]["extra"]["group_size"] == 16
assert t["features.6.weight"]["scheme"] == "int4/ch16"  # per-channel schemes show their channel count
PY
bad "group size must be 2" --layer-group-size 'classifier=1' "$cnn"
bad "matches no tensor" --layer-group-size 'nothing_like_this=8' "$cnn"
echo "layer group size ok"
