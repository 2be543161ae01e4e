#!/usr/bin/env bash
# Output error over calibration data (issue 17, item 4; item 6 for tensors
# without data), against NumPy (tests/cli/lib/out_error_check.py):
#  - quantize --calib: each tensor's output_rel_error equals ||(W - W')X|| / ||WX||
#    computed in float64 from the calibration file's own tensors and the
#    decompressed weights, for a Linear (W.input with leading axes) and a conv
#    (unfolded patches), from W.input and from W.hessian alone (the two agree to
#    1e-6); a tensor the file does not name has none (null, '-', an empty CSV
#    cell) and a note; npuc report --calib gives the same figures;
#  - every format carries it: text (out=), CSV column, JSON, Markdown column,
#    HTML chart-error;
#  - a semidefinite W.hessian (fewer rows than K, a dead input) after GPTQ gives
#    the figure NumPy computes from the rows;
#  - --max-output-error: exit 3 and no output above the limit, 0 below; npuc
#    report --max-output-error exits 3 with the report written; --strict refuses a
#    tensor without calibration data (exit 2, nothing written).
# NPUC_TEST_QUICK=1 (the sanitizer pass) skips the Hessian-only pass run and the
# recipe.
source "$(dirname "$0")/lib/cli_test.bash"
"$PY" -c "import numpy" 2>/dev/null || skip "numpy is not installed"
C="$TESTLIB/out_error_check.py"
"$PY" "$C" make "$T"
m="$T/model.safetensors"
cal="$T/calib.safetensors"
calh="$T/calib_h.safetensors"
quick="${NPUC_TEST_QUICK:-0}"

# quantize --calib: the pass's own report against NumPy.
expect_rc 0 "$NPUC_BIN" quantize --quantize-all -b 4 --calib "$cal" "$m" -o "$T/q.safetensors" --report "$T/q.json"
grep -q 'conv.weight .* out=0\.' "$T/out" || fail "no out= on the conv line: $(cat "$T/out")"
grep -q 'emb.weight .*(no calibration data)' "$T/out" || fail "no note for emb.weight: $(cat "$T/out")"
grep 'emb.weight' "$T/out" | grep -q 'out=' && fail "emb.weight has an output error: $(cat "$T/out")"
grep -q 'output error=0\.' "$T/out" || fail "no output error in the totals: $(cat "$T/out")"
expect_rc 0 "$NPUC_BIN" decompress "$T/q.safetensors" -o "$T/d.safetensors"
"$PY" "$C" check "$T/q.json" "$T/d.safetensors" "$cal" 1e-9 || fail "quantize --calib: output error differs from NumPy"

# Only W.hessian: the same figures (NumPy from H; input vs Hessian to 1e-6).
if [ "$quick" != 1 ]; then
    expect_rc 0 "$NPUC_BIN" quantize -q --quantize-all -b 4 --calib "$calh" "$m" -o "$T/qh.safetensors" \
        --report "$T/qh.json"
    cmp -s "$T/q.safetensors" "$T/qh.safetensors" || fail "--calib changed the artifact of round-to-nearest"
    "$PY" "$C" check "$T/qh.json" "$T/d.safetensors" "$calh" 1e-9 || fail "W.hessian: output error differs from NumPy"
    "$PY" - "$T/q.json" "$T/qh.json" <<'PY' || fail "W.input and W.hessian disagree beyond 1e-6"
import json, sys
a, b = ({t["name"]: t["output_rel_error"] for t in json.load(open(p))["tensors"]} for p in sys.argv[1:3])
for n in ("fc.weight", "conv.weight"):
    assert abs(a[n] - b[n]) <= 1e-6 * a[n], (n, a[n], b[n])
PY
fi

# A semidefinite W.hessian (fewer rows than K, a dead input; the output error
# factors H + delta I and takes delta ||T||^2 off again) after GPTQ, which
# pushes the error into H's small directions: the figure from the Hessian alone
# equals NumPy's from the rows themselves (no cancellation on either side).
expect_rc 0 "$NPUC_BIN" quantize -q --quantize-all -b 4 -g 24 --method gptq --calib "$T/calib_r.safetensors" "$m" \
    -o "$T/qr.safetensors" --report "$T/qr.json"
expect_rc 0 "$NPUC_BIN" decompress "$T/qr.safetensors" -o "$T/dr.safetensors"
"$PY" "$C" check "$T/qr.json" "$T/dr.safetensors" "$T/calib_rx.safetensors" 1e-9 ||
    fail "semidefinite W.hessian: output error differs from NumPy's from the rows"
# GPTQ's figure comes from its own factor of the dampened, permuted Hessian
# (quant_gptq.c out_sums): with --act-order and asymmetric codes too.
expect_rc 0 "$NPUC_BIN" quantize -q --quantize-all -b 3 -g 24 --asymmetric --act-order --method gptq \
    --calib "$T/calib_r.safetensors" "$m" -o "$T/qa.safetensors" --report "$T/qa.json"
expect_rc 0 "$NPUC_BIN" decompress "$T/qa.safetensors" -o "$T/da.safetensors"
"$PY" "$C" check "$T/qa.json" "$T/da.safetensors" "$T/calib_rx.safetensors" 1e-9 ||
    fail "GPTQ --act-order: output error differs from NumPy's from the rows"

# An indefinite W.hessian (a file's, not a sum of x x^T) still gives tr(D H D^T) / tr(W H W^T)
# (the factorisation falls back to a Gershgorin shift).
expect_rc 0 "$NPUC_BIN" report "$m" "$T/q.safetensors" --calib "$T/calib_i.safetensors" --json
cp "$T/out" "$T/ri.json"
"$PY" "$C" check "$T/ri.json" "$T/d.safetensors" "$T/calib_i.safetensors" 1e-9 ||
    fail "indefinite W.hessian: output error differs from NumPy"

# npuc report --calib: the same, in every format.
expect_rc 0 "$NPUC_BIN" report "$m" "$T/q.safetensors" --calib "$calh" --json
cp "$T/out" "$T/r.json"
"$PY" "$C" check "$T/r.json" "$T/d.safetensors" "$calh" 1e-9 || fail "npuc report --calib differs from NumPy"
"$PY" - "$T/r.json" "$T/q.json" <<'PY' || fail "npuc report and quantize disagree"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
va = {t["name"]: t["output_rel_error"] for t in a["tensors"]}
vb = {t["name"]: t["output_rel_error"] for t in b["tensors"]}
assert va.keys() == vb.keys() and va["emb.weight"] is None, (va, vb)
for k in va:
    assert (va[k] is None) == (vb[k] is None) and (va[k] is None or abs(va[k] - vb[k]) <= 1e-6 * vb[k]), (k, va, vb)
PY
# The figures do not depend on -j.
expect_rc 0 "$NPUC_BIN" report "$m" "$T/q.safetensors" --calib "$cal" --json -j 1 --no-timestamp
grep '"output_rel_error"' "$T/out" > "$T/j1"
expect_rc 0 "$NPUC_BIN" report "$m" "$T/q.safetensors" --calib "$cal" --json -j 2 --no-timestamp
grep '"output_rel_error"' "$T/out" | cmp -s - "$T/j1" || fail "-j 1 and -j 2 give other output errors"
expect_rc 0 "$NPUC_BIN" report "$m" "$T/q.safetensors" --calib "$cal" --format csv
"$PY" - "$T/out" "$T/r.json" <<'PY' || fail "CSV output_rel_error column"
import csv, json, sys
rows = {r["name"]: r for r in csv.DictReader(open(sys.argv[1]))}
js = {t["name"]: t["output_rel_error"] for t in json.load(open(sys.argv[2]))["tensors"]}
assert rows["emb.weight"]["output_rel_error"] == "", rows["emb.weight"]
for n in ("fc.weight", "conv.weight"):
    assert abs(float(rows[n]["output_rel_error"]) - js[n]) <= 1e-6 * js[n], (n, rows[n], js[n])
PY
expect_rc 0 "$NPUC_BIN" report "$m" "$T/q.safetensors" --calib "$cal" --format md
grep -q '| output error |' "$T/out" || fail "Markdown: no output error column"
grep -q '`emb.weight` .* | - |' "$T/out" || fail "Markdown: emb.weight's output error is not '-'"
expect_rc 0 "$NPUC_BIN" report "$m" "$T/q.safetensors" --calib "$cal" -o "$T/r.html"
grep -q '<svg id="chart-error"' "$T/r.html" || fail "HTML: no chart-error"
[ "$(grep -o '<rect class="out"' "$T/r.html" | wc -l)" -eq 2 ] || fail "HTML: chart-error should have 2 layers"
expect_rc 0 "$NPUC_BIN" report "$m" "$T/q.safetensors" --calib "$cal"
grep -q 'fc.weight .* out=0\.' "$T/out" || fail "text report: no out= for fc.weight"
# Without --calib nothing changes: no output error anywhere.
expect_rc 0 "$NPUC_BIN" report "$m" "$T/q.safetensors" -o "$T/n.html"
grep -q 'chart-error' "$T/n.html" && fail "HTML without --calib has chart-error"
expect_rc 0 "$NPUC_BIN" report "$m" "$T/q.safetensors" --json
"$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['totals']['output_rel_error'] is None and all(t['output_rel_error'] is None for t in d['tensors'])" "$T/out" || fail "output errors without --calib"

# The gate: exit 3 and nothing published above the limit, 0 below.
worst=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['totals']['max_output_rel_error'])" "$T/q.json")
lo=$("$PY" -c "print(float('$worst') * 0.99)") hi=$("$PY" -c "print(float('$worst') * 1.01)")
expect_rc 3 "$NPUC_BIN" quantize --quantize-all -b 4 --calib "$cal" --max-output-error "$lo" "$m" -o "$T/g.safetensors" \
    --report "$T/g.json"
grep -q "quality gate failed: tensor 'fc.weight' output error .* > --max-output-error" "$T/err" ||
    fail "gate message: $(cat "$T/err")"
[ ! -e "$T/g.safetensors" ] || fail "a failed gate published the output"
[ -s "$T/g.json" ] || fail "a failed gate wrote no report"
expect_rc 0 "$NPUC_BIN" quantize --quantize-all -b 4 --calib "$cal" --max-output-error "$hi" "$m" -o "$T/g.safetensors"
[ -e "$T/g.safetensors" ] || fail "a passed gate published nothing"
expect_rc 3 "$NPUC_BIN" report "$m" "$T/q.safetensors" --calib "$cal" --max-output-error "$lo" -o "$T/gr.json"
[ -s "$T/gr.json" ] || fail "report --max-output-error wrote no report"
expect_rc 0 "$NPUC_BIN" report "$m" "$T/q.safetensors" --calib "$cal" --max-output-error "$hi"
expect_rc 2 "$NPUC_BIN" report "$m" "$T/q.safetensors" --max-output-error 0.5
expect_rc 2 "$NPUC_BIN" quantize --max-output-error -1 "$m" -o "$T/x.safetensors"

# --strict: a tensor to quantize without calibration data is an error; --exclude it and the run passes.
expect_rc 2 "$NPUC_BIN" quantize --strict --quantize-all -b 4 --calib "$cal" "$m" -o "$T/s.safetensors"
grep -q "tensor 'emb.weight': no calibration data" "$T/err" || fail "--strict message: $(cat "$T/err")"
[ ! -e "$T/s.safetensors" ] || fail "--strict wrote an output"
expect_rc 0 "$NPUC_BIN" quantize --strict --quantize-all -b 4 --calib "$cal" --exclude emb "$m" -o "$T/s.safetensors"

# A recipe step with calib takes the gate through npuc run.
if [ "$quick" != 1 ]; then
    cat >"$T/r.yaml" <<YAML
version: 1
steps:
  - quantize:
      bits: 4
      calib: calib.safetensors
      quantize_all: true
YAML
    expect_rc 3 "$NPUC_BIN" run "$T/r.yaml" "$m" -o "$T/run.safetensors" --max-output-error "$lo"
    [ ! -e "$T/run.safetensors" ] || fail "npuc run published past a failed gate"
    expect_rc 0 "$NPUC_BIN" run -q "$T/r.yaml" "$m" -o "$T/run.safetensors" --max-output-error "$hi"
fi
echo "output error: ok"
