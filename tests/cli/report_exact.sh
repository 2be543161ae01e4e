#!/usr/bin/env bash
# npuc report on exact transforms (issue 14, item 8): a report compares what
# the transform promises to keep, and every figure here is recomputed with
# NumPy from the files (tests/cli/lib/report_exact.py), not taken from npuc.
#  - fold-bn (explicit --pair, so the pairing is certain) on a PyTorch-style
#    safetensors file and a Keras-style .h5, convs with and without a bias:
#    each folded weight and bias against conv-then-BatchNorm of the original
#    (relative error <= 1e-6 and equal to NumPy's), no low-SQNR warning,
#    BatchNorm tensors accounted as folded; an edited (wrong) fold reads as a
#    large error; without the npuc.bnfold record the comparison is raw and a
#    warning says so;
#  - lowrank: the product of the factors against the original equals NumPy's
#    ||W - A B|| / ||W||, for the artifact and for factors stored without the
#    "npuc" entry;
#  - every report format names the comparison;
#  - ../shared/data/ppocr_mobile_v2_cls with its catalog's bn_pairs (when present).
source "$(dirname "$0")/lib/cli_test.bash"
"$PY" -c 'import numpy' 2>/dev/null || skip "no numpy for $PY"
X=("$PY" "$TESTLIB/report_exact.py")

"${X[@]}" make-st "$T" || fail "writing the safetensors model"
fold_check() { # ORIG FOLDED PAIRS EXPECT
    expect_rc 0 "$NPUC_BIN" report --json "$1" "$2"
    "${X[@]}" fold "$1" "$2" "$T/out" "$3" "$4" || fail "report of $2 against $1 ($4)"
}
"$NPUC_BIN" fold-bn -q "$T/bn.safetensors" -o "$T/bn.f.safetensors" --pair c1.weight=b1 --pair c2.weight=b2 \
    >/dev/null || fail "fold-bn safetensors"
fold_check "$T/bn.safetensors" "$T/bn.f.safetensors" "$T/bn_st.pairs.json" exact
expect_rc 0 "$NPUC_BIN" report "$T/bn.safetensors" "$T/bn.f.safetensors"
must_match "$T/out" '^\[.*\] c2\.weight .* rel=[0-9.e-]*  \[function: conv\+bn\]'
! grep -q 'below the SQNR' "$T/out" || fail "an exact fold is warned about"

# Every format names the comparison.
for fmt in csv md html; do
    expect_rc 0 "$NPUC_BIN" report --format $fmt "$T/bn.safetensors" "$T/bn.f.safetensors"
    grep -q 'function: conv+bn' "$T/out" || fail "$fmt report does not name the comparison"
    grep -q 'raw' "$T/out" || fail "$fmt report does not name the raw comparison"
done
expect_rc 0 "$NPUC_BIN" report --format csv "$T/bn.safetensors" "$T/bn.f.safetensors"
must_match "$T/out" '^name,.*,compared,note$'

# A wrong fold: the folded weight edited afterwards.
cp "$T/bn.f.safetensors" "$T/bad.safetensors"
"${X[@]}" scale "$T/bad.safetensors" c1.weight 1.5 || fail "editing the fold"
fold_check "$T/bn.safetensors" "$T/bad.safetensors" "$T/bn_st.pairs.json" 0.3

# Without the record: raw, and said so.
cp "$T/bn.f.safetensors" "$T/norec.safetensors"
"${X[@]}" strip "$T/norec.safetensors" npuc.bnfold || fail "stripping the record"
expect_rc 0 "$NPUC_BIN" report --json "$T/bn.safetensors" "$T/norec.safetensors"
"$PY" - "$T/out" <<'PY' || fail "fallback without npuc.bnfold"
import json, sys
d = json.load(open(sys.argv[1]))
t = {x["name"]: x for x in d["tensors"]}
assert t["c1.weight"]["compared"] == "raw" and t["c1.weight"]["action"] == "folded", t["c1.weight"]
assert "no usable npuc.bnfold record" in t["c1.weight"]["note"], t["c1.weight"]["note"]
w = " | ".join(d["warnings"])
assert "no npuc.bnfold record" in w and "compared raw" in w, w
PY

# Keras-style HDF5.
if have_h5py; then
    "${X[@]}" make-h5 "$T" || fail "writing the HDF5 model"
    "$NPUC_BIN" fold-bn -q "$T/bn.h5" -o "$T/bn.f.h5" --pair conv2d=batch_normalization \
        --pair conv2d_1=batch_normalization_1 >/dev/null || fail "fold-bn h5"
    fold_check "$T/bn.h5" "$T/bn.f.h5" "$T/bn_h5.pairs.json" exact
    cp "$T/bn.f.h5" "$T/bad.h5"
    "${X[@]}" scale "$T/bad.h5" conv2d_1/kernel:0 0.5 || fail "editing the HDF5 fold"
    fold_check "$T/bn.h5" "$T/bad.h5" "$T/bn_h5.pairs.json" 0.3
else
    echo "no h5py: the HDF5 fold is not checked"
fi

# lowrank: the artifact, and its factors without the "npuc" entry.
"${X[@]}" make-st "$T" >/dev/null
"$NPUC_BIN" lowrank -q --rank 3 --include '^(c1|c2|fc)\.weight$' "$T/bn.safetensors" -o "$T/lr.safetensors" \
    >/dev/null || fail "lowrank"
expect_rc 0 "$NPUC_BIN" report --json "$T/bn.safetensors" "$T/lr.safetensors"
"${X[@]}" lowrank "$T/bn.safetensors" "$T/lr.safetensors" "$T/out" || fail "lowrank artifact report"
cp "$T/lr.safetensors" "$T/lr_plain.safetensors"
"${X[@]}" strip "$T/lr_plain.safetensors" npuc || fail "stripping the artifact entry"
expect_rc 0 "$NPUC_BIN" report --json "$T/bn.safetensors" "$T/lr_plain.safetensors"
"${X[@]}" lowrank "$T/bn.safetensors" "$T/lr_plain.safetensors" "$T/out" || fail "entry-less factors report"

# A real model: ppocr_mobile_v2_cls folded on its catalog's pairs.
m=ppocr_mobile_v2_cls
if [ -n "$SHARED" ] && [ -f "$SHARED/$m.safetensors" ] && [ -f "$SHARED/$m.json" ]; then
    "${X[@]}" catalog "$SHARED/$m.json" "$T/cat" || fail "reading the catalog"
    "$NPUC_BIN" fold-bn -q "$SHARED/$m.safetensors" -o "$T/cls.f.safetensors" --pairs "$T/cat.pairs" >/dev/null ||
        fail "fold-bn $m"
    fold_check "$SHARED/$m.safetensors" "$T/cls.f.safetensors" "$T/cat.np" exact
else
    echo "no $m in ../shared/data: the real-model fold is not checked"
fi
echo "report exact ok"
