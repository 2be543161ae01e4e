#!/usr/bin/env bash
# npuc report: the documents agree with each other and with the passes (issue 7).
#  - the JSON validates against docs/report.schema.json (python3-jsonschema);
#  - the CSV parses back (python csv) to the same numbers as the JSON;
#  - `npuc report ORIGINAL ARTIFACT` measures what `npuc quantize` measured
#    (actions, bytes, MSE/SQNR, noise prediction, clipped counts);
#  - safetensors against HDF5 holding the same values: every tensor kept;
#  - every pass's --report FILE writes md and html too, with the same header;
#  - usage errors exit 2; -o refuses to overwrite without -f.
source "$(dirname "$0")/lib/cli_test.bash"

cnn="$SAMPLES/cnn_bn.safetensors"
schema="$NPUC_SRC/docs/report.schema.json"
"$PY" -c 'import jsonschema' 2>/dev/null || skip "python3-jsonschema is not installed (.ci/install-deps --test)"

validate() { # FILE...: every file is a valid npuc.report/1 document
    "$PY" - "$schema" "$@" <<'PY'
import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
jsonschema.Draft202012Validator.check_schema(schema)
v = jsonschema.Draft202012Validator(schema)
for path in sys.argv[2:]:
    errs = sorted(v.iter_errors(json.load(open(path))), key=lambda e: list(e.path))
    for e in errs[:5]:
        print(f"{path}: {'/'.join(map(str, e.path))}: {e.message}", file=sys.stderr)
    if errs:
        sys.exit(1)
PY
}

# --- quantize reports and the report of the same artifact agree
"$NPUC_BIN" quantize -q --bits 4 --range percentile=99 --json "$cnn" -o "$T/a.safetensors" >"$T/q.json"
expect_rc 0 "$NPUC_BIN" report --json "$cnn" "$T/a.safetensors"
cp "$T/out" "$T/r.json"
expect_rc 0 "$NPUC_BIN" report --format csv "$cnn" "$T/a.safetensors"
cp "$T/out" "$T/r.csv"
validate "$T/q.json" "$T/r.json" || fail "JSON does not validate against docs/report.schema.json"
# The schema is not vacuous: a document with a wrong field fails it.
"$PY" -c "
import json; d = json.load(open('$T/r.json')); d['tensors'][0]['action'] = 'squashed'; d['totals']['ratio'] = 'big'
json.dump(d, open('$T/broken.json', 'w'))"
if validate "$T/broken.json" 2>/dev/null; then fail "the schema accepted a broken document"; fi

"$PY" - "$T/q.json" "$T/r.json" "$T/r.csv" <<'PY' || fail "quantize, report JSON and report CSV disagree"
import csv, json, math, sys
q, r = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
rows = list(csv.DictReader(open(sys.argv[3], newline="")))
assert r["schema"] == "npuc.report/1" and r["pass"] == "compare"
assert [i["sha256"] for i in r["inputs"]] and all(len(i["sha256"]) == 64 for i in r["inputs"])
assert r["params"]["artifact"]["encodings"] == {"quant": 4}, r["params"]
qt = {t["name"]: t for t in q["tensors"]}
rt = {t["name"]: t for t in r["tensors"]}
assert list(qt) == list(rt), "same tensors in the same order"
def num(v):
    return float(v) if not isinstance(v, str) else {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}[v]
clipped = 0
for n, a in qt.items():
    b = rt[n]
    for k in ("action", "scheme", "bytes_before", "bytes_after", "params_before", "params_after", "shape"):
        assert a[k] == b[k], (n, k, a[k], b[k])
    assert (a["error"] is None) == (b["error"] is None), n
    if a["error"]:
        for k in ("mse", "rmse", "sqnr_db", "cosine", "max_abs", "noise_pred"):
            x, y = num(a["error"][k]), num(b["error"][k])
            assert math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-12), (n, k, x, y)
        assert a["error"]["clipped"] == b["error"]["clipped"], (n, a["error"]["clipped"], b["error"]["clipped"])
        clipped += a["error"]["clipped"]
        h = b["histogram"]
        assert sum(h["w_count"]) == math.prod(b["shape"]) == sum(h["e_count"]), n
    else:
        assert b["histogram"] is None
assert clipped > 0, "percentile=99 clips values: the clipped counts were compared"
for k in ("bytes_before", "bytes_after", "params_before", "params_after"):
    assert q["totals"][k] == r["totals"][k], k
assert math.isclose(q["totals"]["weighted_sqnr_db"], r["totals"]["weighted_sqnr_db"], rel_tol=1e-6)
# CSV: one row per tensor, the JSON's numbers (parsed back exactly).
assert len(rows) == len(r["tensors"]), (len(rows), len(r["tensors"]))
for row, t in zip(rows, r["tensors"]):
    assert row["name"] == t["name"] and row["action"] == t["action"] and row["scheme"] == t["scheme"], row
    for k in ("bytes_before", "bytes_after", "params_before", "params_after"):
        assert int(row[k]) == t[k], (t["name"], k)
    assert row["shape"] == "[" + ",".join(map(str, t["shape"])) + "]"
    if t["error"] is None:
        assert row["sqnr_db"] == "" and row["mse"] == ""
    else:
        for k in ("mse", "rmse", "max_abs", "sqnr_db", "cosine", "rel_fro", "noise_pred"):
            assert float(row[k]) == num(t["error"][k]), (t["name"], k, row[k], t["error"][k])
        assert int(row["clipped"]) == t["error"]["clipped"]
        assert float(row["bits"]) == t["extra"]["bits"]
print(f"{len(rows)} tensors agree across quantize JSON, report JSON and report CSV")
PY

# --- safetensors against HDF5 with the same values: all kept, no error
"$NPUC_BIN" convert -q "$cnn" -o "$T/c.h5"
expect_rc 0 "$NPUC_BIN" report --json "$cnn" "$T/c.h5"
"$PY" - "$T/out" <<'PY' || fail "safetensors vs HDF5"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["totals"]["counts"]["kept"] == d["totals"]["tensors"] == 21, d["totals"]
assert all(t["error"] is None for t in d["tensors"])
PY
# HDF5 artifact against the safetensors original: decoded through the same table.
"$NPUC_BIN" quantize -q --bits 8 "$T/c.h5" -o "$T/c8.h5" >/dev/null
expect_rc 0 "$NPUC_BIN" report --json "$cnn" "$T/c8.h5"
"$PY" -c "import json,sys; d=json.load(open('$T/out')); c=d['totals']['counts']; assert c['quantized']==4 and c['kept']==17, c; assert d['totals']['weighted_sqnr_db']>35" || fail "safetensors vs HDF5 artifact"

# --- every pass's --report FILE: the same document in each format
for ext in txt csv json md html; do
    "$NPUC_BIN" quantize -q --bits 4 "$cnn" -o "$T/p.safetensors" -f --report "$T/p.$ext" >/dev/null || fail "quantize --report p.$ext"
    [ -s "$T/p.$ext" ] || fail "quantize --report p.$ext wrote nothing"
done
validate "$T/p.json" || fail "quantize --report JSON does not validate"
must_match "$T/p.md" '^## npuc report: quantize'
must_match "$T/p.md" '^\| 1 \| `features\.3\.weight` \| \[16,8,3,3\] \| quantized \| int4/ch16 \|'
must_match "$T/p.md" '^\| input \| `.*cnn_bn\.safetensors`: 9184 bytes, sha256 `[0-9a-f]{64}` \|'
must_match "$T/p.md" '^\| time \(UTC\) \| [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z \|'
must_match "$T/p.html" '^<!DOCTYPE html>'
must_match "$T/p.html" 'id="chart-sqnr"'
must_match "$T/p.html" '<td class="mono">features\.3\.weight</td>'
must_not_match "$T/p.html" '(src|href)='
must_match "$T/p.txt" '^# input: .*cnn_bn\.safetensors \(9184 bytes, sha256 [0-9a-f]{64}\)'
must_match "$T/p.csv" '^name,dtype,shape,action,scheme,'
# The text report: worst first with --sort sqnr, the totals on the last line.
expect_rc 0 "$NPUC_BIN" report --sort sqnr "$cnn" "$T/p.safetensors"
grep -E '^\[' "$T/out" | head -n 1 | grep -q 'features\.3\.weight' || fail "--sort sqnr: features.3.weight (20 dB) is not first"
tail -n 1 "$T/out" | grep -q '^total: 21 tensors, 4 quantized' || fail "the totals are not the last line"
echo "pass reports ok"

# --- usage and output rules
expect_rc 2 "$NPUC_BIN" report "$cnn"
expect_rc 2 "$NPUC_BIN" report --format pdf "$cnn" "$cnn"
expect_rc 2 "$NPUC_BIN" report --warn-sqnr loud "$cnn" "$cnn"
expect_rc 2 "$NPUC_BIN" report --max-regress -1 "$cnn" "$cnn"
expect_rc 2 "$NPUC_BIN" report "$cnn" "$T/missing.safetensors"
must_match "$T/err" "^npuc: error: .*missing\.safetensors"
echo keep >"$T/exists.html"
expect_rc 2 "$NPUC_BIN" report "$cnn" "$cnn" -o "$T/exists.html"
must_match "$T/err" 'exists'
[ "$(cat "$T/exists.html")" = keep ] || fail "-o without -f overwrote the file"
expect_rc 0 "$NPUC_BIN" report -q "$cnn" "$cnn" -o "$T/exists.html" -f
must_be_empty "$T/err"
must_match "$T/exists.html" '^<!DOCTYPE html>'
expect_rc 0 "$NPUC_BIN" report --help
must_match "$T/out" '^Usage: npuc report ORIGINAL COMPRESSED'
echo "report formats ok"
