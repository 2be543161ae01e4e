#!/usr/bin/env bash
# Issue 31 item 2: an ONNX-exported LSTM saved as safetensors with tensors
# named by number (W and R [1,256,64], B [1,512]), with no metadata and with
# format = pt.  The shapes are the LSTM pattern [dirs, gates*hidden, in]:
# W/R are per channel along axis 1 (256 channels), B is a bias left alone,
# never "convention" without that rule; W and B without an R are a flagged
# guess that --strict refuses.  Values checked against NumPy's int8 per
# channel along axis 1.
source "$(dirname "$0")/lib/cli_test.bash"

"$PY" - "$T" "$TESTLIB" <<'EOF_PY'
import sys
sys.path.insert(0, sys.argv[2])
import numpy as np
from io_models import write
r = np.random.default_rng(5)
d = sys.argv[1]
ts = [("0", r.standard_normal((1, 256, 64))), ("1", r.standard_normal((1, 256, 64))), ("2", r.standard_normal((1, 512)))]
write(d + "/lstm.safetensors", ts)
write(d + "/lstm_pt.safetensors", ts, {"format": "pt"})
write(d + "/w_only.safetensors", [("7", r.standard_normal((1, 256, 32))), ("8", r.standard_normal((1, 512)))])
EOF_PY

for f in lstm lstm_pt; do
    expect_rc 0 "$NPUC_BIN" info --json "$T/$f.safetensors"
    "$PY" - "$T/out" <<'EOF_PY'
import json, sys
by = {t["name"]: t for t in json.load(open(sys.argv[1]))["tensors"]}
for n in ("0", "1"):
    t = by[n]
    assert (t["role"], t["layout"], t["out_axis"], t["confidence"]) == ("rnn", "doi", 1, "convention"), t
    assert t["evidence"].startswith("shapes: ONNX LSTM"), t
t = by["2"]
assert (t["role"], t["layout"]) == ("bias", "none") and t["evidence"].startswith("shapes: ONNX LSTM"), t
EOF_PY
    expect_rc 0 "$NPUC_BIN" quantize "$T/$f.safetensors" -o "$T/$f.fq.safetensors" --fake-quant --strict
    must_match "$T/out" "^\\[1/3\\] 0 .*int8/ch256"
    must_match "$T/out" "^\\[3/3\\] 2 .*role bias: .*left as is"
    "$PY" "$TESTLIB/int8_channel_check.py" "$T/$f.safetensors" "$T/$f.fq.safetensors" 1 0 1
    "$PY" -c 'import sys; sys.path.insert(0, sys.argv[3]); from npuc_test import read_st
a, b = ({n: x for n, d, s, x in read_st(p)[1]} for p in sys.argv[1:3]); assert a["2"] == b["2"], "B changed"' \
        "$T/$f.safetensors" "$T/$f.fq.safetensors" "$TESTLIB"
done

# W and B without an R: the same reading, but a guess.
expect_rc 0 "$NPUC_BIN" info --json "$T/w_only.safetensors"
"$PY" -c 'import json,sys; by={t["name"]: t for t in json.load(open(sys.argv[1]))["tensors"]}
assert by["7"]["layout"] == "doi" and by["7"]["confidence"] == "guess", by["7"]
assert by["8"]["role"] == "bias" and by["8"]["confidence"] == "guess", by["8"]' "$T/out"
expect_rc 2 "$NPUC_BIN" quantize "$T/w_only.safetensors" -o "$T/w.q8.safetensors" --strict
must_match "$T/err" "tensor '7': .*a guess.*refused by --strict"
echo "layout_onnx_rnn: ok"
