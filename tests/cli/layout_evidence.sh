#!/usr/bin/env bash
# Layouts from evidence (issue 14): `npuc info --json` gives the output-channel
# axis each file's own conventions imply, int8 per-channel codes equal NumPy
# along it (shared models, both formats; generated Keras 3, ONNX LSTM, Paddle
# bias files), and a guessed layout is warned about, or refused by --strict.
source "$(dirname "$0")/lib/cli_test.bash"
"$PY" -c "import numpy, h5py" 2>/dev/null || skip "python3 numpy/h5py are not installed"
CHECK="$TESTLIB/layout_check.py"

# quant8 IN OUT: symmetric 8-bit per-channel, every weight (first/last included).
quant8() { "$NPUC_BIN" quantize --bits 8 --per-channel -q -f "$1" -o "$2" >/dev/null; }

# ---- the shared models, both formats
nshared=0
for m in silero_vad_v5 ppocrv4_rec ppocr_mobile_v2_cls nsfwjs_mobilenet_v2 faceapi_tiny_face_detector \
         faceapi_face_expression; do
    [ -n "$SHARED" ] && [ -f "$SHARED/$m.json" ] || continue
    for ext in safetensors h5; do
        keep_case 3 || continue # the quick passes: a third of the files, both formats among them
        f="$SHARED/$m.$ext"
        expect_rc 0 "$NPUC_BIN" info --json "$f"
        cp "$T/out" "$T/info.json"
        "$PY" "$CHECK" expect "$SHARED/$m.json" "$f" "$T/info.json" >"$T/axes.json" ||
            fail "$m.$ext: output-channel axes differ from the catalog's conventions"
        quant8 "$f" "$T/q.safetensors"
        "$PY" "$CHECK" codes "$f" "$T/q.safetensors" "$T/axes.json" || fail "$m.$ext: codes differ from NumPy"
        nshared=$((nshared + 1))
    done
done
[ "$nshared" -gt 0 ] || echo "note: ../shared/data absent; generated files only" >&2

# ---- a Keras 3 .weights.h5: DepthwiseConv2D axis 2, Conv2D axis 3, BatchNorm roles
"$PY" "$CHECK" gen-keras3 "$T/k3.weights.h5" >"$T/axes.json"
expect_rc 0 "$NPUC_BIN" info --json "$T/k3.weights.h5"
"$PY" - "$T/out" "$T/axes.json" <<'EOF' || fail "Keras 3 layouts"
import json, sys
info = {t["name"]: t for t in json.load(open(sys.argv[1]))["tensors"]}
for name, ax in json.load(open(sys.argv[2])).items():
    t = info[name]
    assert t["out_axis"] == ax and t["confidence"] == "convention" and "Keras 3" in t["evidence"], t
roles = [info[f"layers/batch_normalization/vars/{i}"]["role"] for i in range(4)]
assert roles == ["bn_gamma", "bn_beta", "bn_mean", "bn_var"], roles
EOF
quant8 "$T/k3.weights.h5" "$T/q.safetensors"
"$PY" "$CHECK" codes "$T/k3.weights.h5" "$T/q.safetensors" "$T/axes.json" || fail "Keras 3 codes"

# ---- ONNX LSTM W/R [dirs, 4*hidden, in]: axis 1
"$PY" "$CHECK" gen-st "$T/lstm.safetensors" lstm >"$T/axes.json"
expect_rc 0 "$NPUC_BIN" info --json "$T/lstm.safetensors"
"$PY" - "$T/out" "$T/axes.json" <<'EOF' || fail "LSTM layouts"
import json, sys
info = {t["name"]: t for t in json.load(open(sys.argv[1]))["tensors"]}
for name, ax in json.load(open(sys.argv[2])).items():
    assert info[name]["out_axis"] == ax and info[name]["layout"] == "doi" and info[name]["role"] == "rnn", info[name]
assert info["rnn.lstm.B"]["role"] == "bias" and info["rnn.lstm.B"]["out_axis"] is None
EOF
quant8 "$T/lstm.safetensors" "$T/q.safetensors"
"$PY" "$CHECK" codes "$T/lstm.safetensors" "$T/q.safetensors" "$T/axes.json" || fail "LSTM codes"

# ---- a Paddle [1,C,1,1] bias beside a transposed conv: role bias, never quantized
"$PY" "$CHECK" gen-st "$T/pb.safetensors" paddle_bias
expect_rc 0 "$NPUC_BIN" info --json "$T/pb.safetensors"
"$PY" - "$T/out" <<'EOF' || fail "Paddle bias layout"
import json, sys
info = {t["name"]: t for t in json.load(open(sys.argv[1]))["tensors"]}
b, w = info["conv2d_transpose_0.b_0"], info["conv2d_transpose_0.w_0"]
assert b["role"] == "bias" and b["layout"] == "none" and b["out_axis"] is None, b
assert w["role"] == "convt" and w["out_axis"] == 1, w   # Paddle conv2d_transpose: [in, out/groups, kh, kw]
EOF
expect_rc 0 "$NPUC_BIN" quantize --bits 4 -f "$T/pb.safetensors" -o "$T/pb4.safetensors"
"$PY" - "$T/pb.safetensors" "$T/pb4.safetensors" <<'EOF' || fail "Paddle bias was touched"
import json, os, sys
sys.path.insert(0, os.environ["NPUC_SRC"] + "/tests/cli/lib")
from npuc_test import read_st
_, a = read_st(sys.argv[1])
meta, b = read_st(sys.argv[2])
orig = {n: (dt, s, d) for n, dt, s, d in a}
out = {n: (dt, s, d) for n, dt, s, d in b}
name = "conv2d_transpose_0.b_0"
assert out[name] == orig[name], "bias bytes changed"
desc = json.loads(meta["npuc"])["tensors"]
assert name not in desc and desc["conv2d_transpose_0.w_0"]["encoding"] == "quant", desc.keys()
EOF

# ---- guessed layouts: warned on stderr; --strict refuses before writing anything
"$PY" "$CHECK" gen-st "$T/guess.safetensors" guess
expect_rc 0 "$NPUC_BIN" info "$T/guess.safetensors"
must_match "$T/out" 'confidence'
must_match "$T/out" ' blob .* guess'
must_match "$T/err" "tensor 'blob': layout hwio is a guess.*--layout"
expect_rc 2 "$NPUC_BIN" quantize --bits 8 --strict "$T/guess.safetensors" -o "$T/strict.safetensors"
must_match "$T/err" "tensor '(blob|stuff)'.*--strict.*--layout"
[ ! -e "$T/strict.safetensors" ] && [ ! -e "$T/strict.safetensors.tmp" ] || fail "--strict wrote an output"
for pass in "sparsify --pattern 2:4" "lowrank --rank 4"; do
    # shellcheck disable=SC2086
    expect_rc 2 "$NPUC_BIN" $pass --strict "$T/guess.safetensors" -o "$T/strict.safetensors"
    must_match "$T/err" "--strict.*--layout"
    [ ! -e "$T/strict.safetensors" ] || fail "$pass --strict wrote an output"
done
expect_rc 0 "$NPUC_BIN" quantize --bits 8 "$T/guess.safetensors" -o "$T/warned.safetensors"
must_match "$T/err" "tensor 'blob'.*guess.*--layout"
must_match "$T/out" 'int8/ch32 '
# Stated layouts are certain: --strict accepts them.
expect_rc 0 "$NPUC_BIN" quantize --bits 8 --strict --layout 'blob=hwio' --layout 'stuff=oi' \
    "$T/guess.safetensors" -o "$T/stated.safetensors"
must_not_match "$T/err" 'guess'
echo "layout_evidence: $nshared shared files and 4 generated files checked"
