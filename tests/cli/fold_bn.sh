#!/usr/bin/env bash
# `npuc fold-bn` (issue 6): pairs found as the data catalogs list them, folded
# values equal to an independent numpy computation, outputs that pass
# `npuc validate --deep`, both formats in and out, Keras model_config
# rewritten, every validation error exits 2 with nothing written.
source "$(dirname "$0")/lib/cli_test.bash"
"$PY" -c "import numpy" 2>/dev/null || skip "numpy is not installed for $PY"
CHECK=("$PY" "$TESTLIB/bnfold_check.py")

# ---------------------------------------------------------------- usage
expect_rc 0 "$NPUC_BIN" fold-bn --help
must_match "$T/out" '^Usage: npuc fold-bn IN -o OUT'
expect_rc 2 "$NPUC_BIN" fold-bn "$SAMPLES/cnn_bn.safetensors"
must_match "$T/err" 'missing -o OUT'
expect_rc 2 "$NPUC_BIN" fold-bn "$SAMPLES/cnn_bn.safetensors" --dry-run --eps 0
must_match "$T/err" "^npuc: error: --eps '0': must be a positive number"
expect_rc 2 "$NPUC_BIN" fold-bn "$SAMPLES/cnn_bn.safetensors" --dry-run --pair nonsense
expect_rc 0 "$NPUC_BIN" help fold-bn

# ---------------------------------------------------------------- samples
# PyTorch names: features.0 -> features.1 and so on; a dry run writes nothing.
mkdir "$T/dry"
expect_rc 0 env -C "$T/dry" "$NPUC_BIN" fold-bn "$SAMPLES/cnn_bn.safetensors" --dry-run
must_match "$T/out" '^would fold 3 of 3 BatchNorms; 0 skipped'
must_match "$T/out" 'features\.0\.weight +features\.1 +name +8 +1e-05 \(default\)'
must_match "$T/out" 'why: names: module .features\.3. comes right before .features\.4.'
must_match "$T/out" '\+bias features\.6\.bias'
[ -z "$(ls -A "$T/dry")" ] || fail "--dry-run wrote files: $(ls "$T/dry")"

# Keras save_weights layout without topology: layer order; the depthwise pair is a guess,
# listed but applied only with --accept-guesses (issue 14; --no-guess is the default's old name).
expect_rc 0 "$NPUC_BIN" fold-bn "$SAMPLES/cnn_bn_keras.h5" --dry-run
must_match "$T/out" '^would fold 2 of 3 BatchNorms; 1 skipped'
must_match "$T/out" 'skip batch_normalization_2 \(producer depthwise_conv2d/depthwise_kernel\): a guess, not applied'
must_match "$T/err" 'warning: .*1 guessed pairing not applied.*--accept-guesses'
expect_rc 0 "$NPUC_BIN" fold-bn "$SAMPLES/cnn_bn_keras.h5" --dry-run --accept-guesses
must_match "$T/out" '^would fold 3 of 3 BatchNorms \(1 guessed\)'
must_match "$T/out" 'depthwise_conv2d/depthwise_kernel +batch_normalization_2 +layer-order,guess +16 +0\.001 \(keras default\)'
must_match "$T/err" 'warning: .*1 of 3 folded pairs are guesses'
expect_rc 0 "$NPUC_BIN" fold-bn "$SAMPLES/cnn_bn_keras.h5" --dry-run --no-guess -q
must_match "$T/out" '^would fold 2 of 3 BatchNorms; 1 skipped'
expect_rc 2 "$NPUC_BIN" fold-bn "$SAMPLES/cnn_bn_keras.h5" -o "$T/strict.h5" --strict
must_match "$T/err" "^npuc: error: .*BatchNorm 'batch_normalization_2': pairing it with 'depthwise_conv2d/depthwise_kernel' is a guess.*--pair .*--accept-guesses"
[ ! -e "$T/strict.h5" ] || fail "--strict wrote an output"

for in in "$SAMPLES/cnn_bn.safetensors" "$SAMPLES/cnn_bn_keras.h5"; do
    for ext in safetensors h5; do
        out="$T/$(basename "$in").folded.$ext"
        expect_rc 0 "$NPUC_BIN" fold-bn "$in" -o "$out" --accept-guesses
        must_match "$T/out" '^\[ *1/[0-9]+\] '
        must_match "$T/out" '^folded 3 of 3 BatchNorms'
        must_match "$T/out" '^total: [0-9]+ tensors in, [0-9]+ out, [34] folded, [0-9]+ removed, [0-9] created'
        expect_rc 0 "$NPUC_BIN" validate --deep "$out"
        # Nothing is left to fold.
        expect_rc 0 "$NPUC_BIN" fold-bn "$out" --dry-run -q
        must_match "$T/out" '^would fold 0 of 0 BatchNorms'
    done
done
# num_batches_tracked goes with its BatchNorm; the created bias sits after its conv.
npuc_py dump "$T/cnn_bn.safetensors.folded.safetensors" >"$T/dump.json"
must_not_match "$T/dump.json" 'running_|num_batches_tracked'
"$PY" - "$T/dump.json" <<'EOF' || fail "tensor order of the folded sample"
import json, sys
names = list(json.load(open(sys.argv[1])))
assert names[:3] == ["features.0.weight", "features.0.bias", "features.3.weight"], names
EOF

# An existing output is refused without -f and left alone.
out="$T/cnn_bn.safetensors.folded.safetensors"
before=$(sha256sum "$out")
expect_rc 2 "$NPUC_BIN" fold-bn "$SAMPLES/cnn_bn.safetensors" -o "$out" --eps 1e-3
[ "$(sha256sum "$out")" = "$before" ] || fail "existing output modified without -f"
expect_rc 0 "$NPUC_BIN" fold-bn "$SAMPLES/cnn_bn.safetensors" -o "$out" --eps 1e-3 -f -q
must_match "$T/out" 'features\.0\.weight +features\.1 +name +8 +0\.001 \(--eps\)'
npuc_py meta "$out" >"$T/meta.json"
must_match "$T/meta.json" '\\"eps\\":0\.001'

# --json is an npuc.report/1 document; --report writes one to a file.
expect_rc 0 "$NPUC_BIN" fold-bn "$SAMPLES/cnn_bn.safetensors" -o "$T/j.safetensors" --json --report "$T/r.json"
"$PY" - "$T/out" "$T/r.json" <<'EOF' || fail "JSON report"
import json, sys
for p in sys.argv[1:]:
    d = json.load(open(p))
    assert d["schema"] == "npuc.report/1", d["schema"]
    recs = d.get("tensors") or d.get("records")
    folded = [r for r in recs if r.get("action") == "folded" and (r.get("extra") or {}).get("channels")]
    assert len(folded) == 3, folded
EOF
# A dry-run plan can be fed back as --pairs.
expect_rc 0 "$NPUC_BIN" fold-bn "$SAMPLES/cnn_bn.safetensors" --dry-run --json
cp "$T/out" "$T/plan.json"
must_match "$T/plan.json" '"schema": "npuc.bnfold.plan/1"'
expect_rc 0 "$NPUC_BIN" fold-bn "$SAMPLES/cnn_bn.safetensors" --dry-run --pairs "$T/plan.json"
must_match "$T/out" 'would fold 3 of 3 BatchNorms'
must_match "$T/out" 'features\.0\.weight +features\.1 +explicit'
printf '# one pair\nfeatures.3.weight = features.4\n' >"$T/pairs.txt"
expect_rc 0 "$NPUC_BIN" fold-bn "$SAMPLES/cnn_bn.safetensors" --dry-run --pairs "$T/pairs.txt"
must_match "$T/out" 'would fold 1 of 3 BatchNorms; 2 skipped'
must_match "$T/out" 'skip features\.1: not among the stated pairs'

# ---------------------------------------------------------------- errors: exit 2, nothing written
bad_case() { # KIND PATTERN
    local kind=$1 pat=$2
    "${CHECK[@]}" make-bad "$T/bad_$kind.safetensors" "$kind"
    for ext in safetensors h5; do
        expect_rc 2 "$NPUC_BIN" fold-bn "$T/bad_$kind.safetensors" -o "$T/bad_$kind.out.$ext"
        must_match "$T/err" "^npuc: error: $T/bad_$kind\.safetensors: $pat"
        [ "$(wc -l <"$T/err")" -eq 1 ] || fail "$kind: error is not one line"
        [ ! -e "$T/bad_$kind.out.$ext" ] && [ ! -e "$T/bad_$kind.out.$ext.tmp" ] || fail "$kind: output written"
    done
    expect_rc 2 "$NPUC_BIN" fold-bn "$T/bad_$kind.safetensors" --dry-run
}
bad_case negvar "BatchNorm 'features\.1' \(eps 1e-05, default\): channel 2: var \+ eps = -1 \+ 1e-05 <= 0"
bad_case nangamma "tensor 'features\.1\.weight': value 1 is NaN"
bad_case infweight "tensor 'features\.0\.weight': value [0-9]+ is infinite"
bad_case mismatch "BatchNorm 'features\.1': .*mismatched channel counts"
# Variance exactly 0 is legal: eps carries it.
"${CHECK[@]}" make-bad "$T/zerovar.safetensors" zerovar
expect_rc 0 "$NPUC_BIN" fold-bn "$T/zerovar.safetensors" -o "$T/zerovar.out.safetensors"
expect_rc 0 "$NPUC_BIN" validate --deep "$T/zerovar.out.safetensors"
# A BatchNorm stated for two producers; a producer stated for two BatchNorms; channels.
expect_rc 2 "$NPUC_BIN" fold-bn "$SAMPLES/cnn_bn.safetensors" -o "$T/x.safetensors" \
    --pair features.3.weight=features.4 --pair features.6.weight=features.4
must_match "$T/err" "BatchNorm 'features\.4' is stated for two producers"
expect_rc 2 "$NPUC_BIN" fold-bn "$SAMPLES/cnn_bn.safetensors" -o "$T/x.safetensors" --pair features.3.weight=features.1
must_match "$T/err" "mismatched channel counts"
[ ! -e "$T/x.safetensors" ] || fail "output written after a bad --pair"

# ---------------------------------------------------------------- shared models
if [ -z "$SHARED" ] || [ ! -f "$SHARED/ppocr_mobile_v2_cls.json" ]; then
    echo "note: shared data absent ($SHARED); checked the samples only" >&2
    echo "fold_bn: samples checked"
    exit 0
fi
have_h5py || skip "h5py is not installed for $PY (needed to read the HDF5 outputs)"
for m in ppocr_mobile_v2_cls nsfwjs_mobilenet_v2; do
    cat="$SHARED/$m.json"
    for ifmt in safetensors h5; do
        in="$SHARED/$m.$ifmt"
        expect_rc 0 "$NPUC_BIN" fold-bn "$in" --dry-run --json --accept-guesses
        cp "$T/out" "$T/plan.json"
        "${CHECK[@]}" plan "$T/plan.json" "$cat" || fail "$in: dry-run pairs differ from the catalog"
        for ofmt in safetensors h5; do
            keep_case 3 || continue # the quick passes: 3 of the 8 input/output pairs, each format in and out
            out="$T/$m.$ifmt.folded.$ofmt"
            expect_rc 0 "$NPUC_BIN" fold-bn "$in" -o "$out" -q --accept-guesses
            expect_rc 0 "$NPUC_BIN" validate --deep "$out"
            "${CHECK[@]}" values "$in" "$out" "$cat" || fail "$in -> $out: folded values"
        done
    done
done
# Keras model.save file: the topology is rewritten to match (both output formats).
for ofmt in safetensors h5; do
    is_quick && [ ! -f "$T/nsfwjs_mobilenet_v2.h5.folded.$ofmt" ] && continue # not made in the quick pass
    "${CHECK[@]}" keras-config "$T/nsfwjs_mobilenet_v2.h5.folded.$ofmt" || fail "model_config of the folded nsfwjs ($ofmt)"
done
# Exported names: every pair is a guess; by default (or --no-guess) none of them is folded.
expect_rc 0 "$NPUC_BIN" fold-bn "$SHARED/ppocr_mobile_v2_cls.safetensors" --dry-run --no-guess -q
must_match "$T/out" '^would fold 0 of 35 BatchNorms; 35 skipped'
# The catalog itself works as a --pairs file.
expect_rc 0 "$NPUC_BIN" fold-bn "$SHARED/nsfwjs_mobilenet_v2.safetensors" -o "$T/nsfw_stated.safetensors" \
    --pairs "$SHARED/nsfwjs_mobilenet_v2.json" -q
"${CHECK[@]}" values "$SHARED/nsfwjs_mobilenet_v2.safetensors" "$T/nsfw_stated.safetensors" \
    "$SHARED/nsfwjs_mobilenet_v2.json" || fail "--pairs catalog"
# Output bytes do not depend on the thread count.
"$NPUC_BIN" fold-bn "$SHARED/nsfwjs_mobilenet_v2.h5" -o "$T/j1.safetensors" -j 1 -q >/dev/null
"$NPUC_BIN" fold-bn "$SHARED/nsfwjs_mobilenet_v2.h5" -o "$T/j4.safetensors" -j 4 -q >/dev/null
cmp -s "$T/j1.safetensors" "$T/j4.safetensors" || fail "-j 1 and -j 4 outputs differ"
echo "fold_bn: samples and shared models checked"
