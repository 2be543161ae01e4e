#!/usr/bin/env bash
# Issue 31 item 1: a numpy-origin MLP (metadata format = np) with PyTorch-like
# names.  The name 'weight' does not outrank the stated format; the shapes
# decide: 250 -> 128 -> 5 connects only as [in,out] and the biases (128, 5)
# agree, so every weight is per channel along axis 1, certain, and --strict
# accepts it.  Checked against an independent NumPy int8 per-channel
# quantization of the same weights along axis 1 (--fake-quant output equal).
# When nothing decides (square weights), it is a guess: a warning, and
# --strict refuses it (exit 2, nothing written).
source "$(dirname "$0")/lib/cli_test.bash"

"$PY" - "$T" "$TESTLIB" <<'EOF_PY'
import sys
sys.path.insert(0, sys.argv[2])
import numpy as np
from io_models import write
r = np.random.default_rng(11)
d = sys.argv[1]
write(d + "/mlp.safetensors", [("contact/hidden/weight", r.standard_normal((250, 128))),
                              ("contact/hidden/bias", r.standard_normal(128)),
                              ("contact/output/weight", r.standard_normal((128, 5))),
                              ("contact/output/bias", r.standard_normal(5))], {"format": "np"})
# The same network stored [out,in]: the shapes say so too.
write(d + "/mlp_oi.safetensors", [("contact/hidden/weight", r.standard_normal((128, 250))),
                                 ("contact/hidden/bias", r.standard_normal(128)),
                                 ("contact/output/weight", r.standard_normal((5, 128))),
                                 ("contact/output/bias", r.standard_normal(5))], {"format": "np"})
# Nothing decides: two square weights without biases.
write(d + "/sq.safetensors", [("a/weight", r.standard_normal((64, 64))), ("b/weight", r.standard_normal((64, 64)))],
      {"format": "np"})
EOF_PY

expect_rc 0 "$NPUC_BIN" info --json "$T/mlp.safetensors"
"$PY" - "$T/out" <<'EOF_PY'
import json, sys
by = {t["name"]: t for t in json.load(open(sys.argv[1]))["tensors"]}
for n in ("contact/hidden/weight", "contact/output/weight"):
    t = by[n]
    assert (t["layout"], t["out_axis"], t["confidence"]) == ("io", 1, "certain"), t
    assert "PyTorch" not in t["evidence"] and "250->128->5" in t["evidence"], t["evidence"]
EOF_PY
expect_rc 0 "$NPUC_BIN" info --json "$T/mlp_oi.safetensors"
"$PY" -c 'import json,sys; by={t["name"]: t for t in json.load(open(sys.argv[1]))["tensors"]}
assert all(by[n]["layout"] == "oi" and by[n]["confidence"] == "certain" for n in ("contact/hidden/weight", "contact/output/weight")), by' "$T/out"

# quantize --strict accepts the decided layout; the values equal NumPy's
# symmetric int8 per channel along axis 1.
expect_rc 0 "$NPUC_BIN" quantize "$T/mlp.safetensors" -o "$T/fq.safetensors" --fake-quant --strict
must_match "$T/out" "contact/hidden/weight .*int8/ch128"
must_match "$T/out" "contact/output/weight .*int8/ch5 "
"$PY" "$TESTLIB/int8_channel_check.py" "$T/mlp.safetensors" "$T/fq.safetensors" 1 contact/hidden/weight contact/output/weight

# Square weights: a guess, said, and refused by --strict.
expect_rc 0 "$NPUC_BIN" info --json "$T/sq.safetensors"
"$PY" -c 'import json,sys; ts=json.load(open(sys.argv[1]))["tensors"]
assert all(t["confidence"] == "guess" and "format=np" in t["evidence"] for t in ts), ts' "$T/out"
expect_rc 2 "$NPUC_BIN" quantize "$T/sq.safetensors" -o "$T/sq.q8.safetensors" --strict
must_match "$T/err" "tensor 'a/weight': .*a guess.*refused by --strict"
[ ! -e "$T/sq.q8.safetensors" ] || fail "a refused output was written"
expect_rc 0 "$NPUC_BIN" quantize "$T/sq.safetensors" -o "$T/sq.q8.safetensors"
must_match "$T/err" "warning: .*the layout is a guess.*'a/weight'" # grouped with b/weight (issue 31 item 12)
# Stating it makes it certain.
expect_rc 0 "$NPUC_BIN" quantize "$T/sq.safetensors" -o "$T/sq2.q8.safetensors" --strict --layout 'weight$=io'
echo "layout_np_chain: ok"
