#!/usr/bin/env bash
# `npuc fold-bn` folds only trustworthy pairs by default (issue 14, "What to
# build" 3): explicit, model_config, unambiguous names.  Guessed pairs are
# listed one by one and applied only with --accept-guesses; --strict makes a
# guess exit 2 before anything is written.  Checked against the data catalogs'
# bn_pairs and numpy folding (tests/cli/lib/bnfold_trust.py), never npuc's own
# output.
source "$(dirname "$0")/lib/cli_test.bash"
"$PY" -c "import numpy" 2>/dev/null || skip "numpy is not installed for $PY"
GEN=("$PY" "$TESTLIB/bnfold_trust.py")

# ---------------------------------------------------------------- repro 2: Paddle detector, alphabetical
"${GEN[@]}" paddle "$T/det.safetensors"
expect_rc 0 "$NPUC_BIN" fold-bn "$T/det.safetensors" --dry-run --json
"${GEN[@]}" check-paddle "$T/out" default || fail "Paddle detector: default plan"
expect_rc 0 "$NPUC_BIN" fold-bn "$T/det.safetensors" --dry-run
must_match "$T/out" '^would fold 0 of 4 BatchNorms; 4 skipped'
must_match "$T/out" 'skip batch_norm_2 \(producer conv2d_2\.w_0\): a guess, not applied'
must_not_match "$T/out" 'b_0\.bias'
must_match "$T/err" 'warning: .*4 guessed pairings not applied.*--pair CONV=BN.*--accept-guesses'
expect_rc 0 "$NPUC_BIN" fold-bn "$T/det.safetensors" --dry-run --json --accept-guesses
"${GEN[@]}" check-paddle "$T/out" accept || fail "Paddle detector: accepted guesses"
expect_rc 0 "$NPUC_BIN" fold-bn "$T/det.safetensors" -o "$T/det.folded.safetensors" --accept-guesses -q
npuc_py dump "$T/det.folded.safetensors" >"$T/dump.json"
must_not_match "$T/dump.json" 'b_0\.bias'
# A bias is never a candidate, not even when stated.
expect_rc 2 "$NPUC_BIN" fold-bn "$T/det.safetensors" --dry-run --pair conv2d_transpose_0.b_0=batch_norm_3
must_match "$T/err" "tensor 'conv2d_transpose_0\.b_0' is not a float conv/linear weight"

# ---------------------------------------------------------------- --strict: exit 2, nothing written
expect_rc 2 "$NPUC_BIN" fold-bn "$T/det.safetensors" -o "$T/strict.safetensors" --strict
must_match "$T/err" "^npuc: error: $T/det\.safetensors: BatchNorm 'batch_norm_[0-9]': pairing it with 'conv2d_[0-9a-z_]*\.w_0' is a guess .*refused by --strict: state it with --pair conv2d_.*=batch_norm_[0-9] or --pairs FILE, or apply guesses with --accept-guesses"
[ "$(wc -l <"$T/err")" -eq 1 ] || fail "--strict: the error is not one line"
[ ! -e "$T/strict.safetensors" ] && [ ! -e "$T/strict.safetensors.tmp" ] || fail "--strict wrote an output"
expect_rc 2 "$NPUC_BIN" fold-bn "$T/det.safetensors" --dry-run --strict
# --accept-guesses answers --strict; stated pairs are no guesses.
expect_rc 0 "$NPUC_BIN" fold-bn "$T/det.safetensors" -o "$T/strict.safetensors" --strict --accept-guesses -q
expect_rc 0 "$NPUC_BIN" fold-bn "$T/det.safetensors" --dry-run --strict --pair conv2d_0.w_0=batch_norm_0
must_match "$T/out" '^would fold 1 of 4 BatchNorms'

# ---------------------------------------------------------------- Keras 2 HDF5 with model_config
if have_h5py; then
    "${GEN[@]}" keras2 "$T/k2.h5"
    expect_rc 0 "$NPUC_BIN" fold-bn "$T/k2.h5" --dry-run --strict
    must_match "$T/out" '^would fold 1 of 2 BatchNorms; 1 skipped'
    must_match "$T/out" "skip c2_bn \(producer add\): its input 'add' is a merge \(Add\)"
    for ext in h5 safetensors; do
        expect_rc 0 "$NPUC_BIN" fold-bn "$T/k2.h5" -o "$T/k2.folded.$ext" -q
        "${GEN[@]}" check-keras2 "$T/k2.h5" "$T/k2.folded.$ext" || fail "Keras 2 fold ($ext)"
    done
else
    echo "note: h5py absent: the Keras 2 case is skipped" >&2
fi

# ---------------------------------------------------------------- shared models against the catalogs
if [ -z "$SHARED" ] || [ ! -f "$SHARED/ppocr_mobile_v2_cls.json" ]; then
    echo "note: shared data absent ($SHARED); generated files checked only" >&2
    echo "fold_bn_trust: generated files checked"
    exit 0
fi
have_h5py || skip "h5py is not installed for $PY (needed to read HDF5 outputs)"
for m in ppocr_mobile_v2_cls ppocrv4_rec; do
    for ext in safetensors h5; do
        in="$SHARED/$m.$ext"
        expect_rc 0 "$NPUC_BIN" fold-bn "$in" --dry-run --json
        "${GEN[@]}" check-catalog "$T/out" "$SHARED/$m.json" default || fail "$in: default plan"
        expect_rc 0 "$NPUC_BIN" fold-bn "$in" --dry-run --json --accept-guesses
        "${GEN[@]}" check-catalog "$T/out" "$SHARED/$m.json" accept || fail "$in: --accept-guesses plan"
        expect_rc 2 "$NPUC_BIN" fold-bn "$in" --dry-run --strict
        must_match "$T/err" "is a guess .*--accept-guesses"
    done
done
# Folded values of the guessed-and-accepted pairs equal numpy (ppocrv4_rec; fold_bn.sh covers the others).
expect_rc 0 "$NPUC_BIN" fold-bn "$SHARED/ppocrv4_rec.safetensors" -o "$T/rec.safetensors" --accept-guesses -q
"$PY" "$TESTLIB/bnfold_check.py" values "$SHARED/ppocrv4_rec.safetensors" "$T/rec.safetensors" \
    "$SHARED/ppocrv4_rec.json" || fail "ppocrv4_rec folded values"
# nsfwjs: model_config makes every pair certain; folded as the config says, --strict accepts it.
expect_rc 0 "$NPUC_BIN" fold-bn "$SHARED/nsfwjs_mobilenet_v2.h5" --dry-run --json --strict
"${GEN[@]}" check-catalog "$T/out" "$SHARED/nsfwjs_mobilenet_v2.json" certain || fail "nsfwjs plan"
expect_rc 0 "$NPUC_BIN" fold-bn "$SHARED/nsfwjs_mobilenet_v2.h5" -o "$T/nsfw.safetensors" --strict -q
"$PY" "$TESTLIB/bnfold_check.py" values "$SHARED/nsfwjs_mobilenet_v2.h5" "$T/nsfw.safetensors" \
    "$SHARED/nsfwjs_mobilenet_v2.json" || fail "nsfwjs folded values"
echo "fold_bn_trust: generated files and shared models checked"
