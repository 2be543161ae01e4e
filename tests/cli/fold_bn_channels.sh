#!/usr/bin/env bash
# One tensor means one thing in every pass (issue 31 item 6).  A guessed
# pairing on a Paddle detector head folded a 24-channel BatchNorm into
# conv2d_transpose_1.w_0 [24,1,2,2] by assuming groups == channels, while
# structured prune read the same tensor as one channel.  The graph decides a
# weight's channels once (npuc__graph_channels): fold-bn's plan and prune's
# report must give each weight the count its shape means by the file's own
# convention (checked by tests/cli/lib/bnfold_channels.py from the shapes it
# wrote, not from npuc's output), and the wrong fold is not made.
source "$(dirname "$0")/lib/cli_test.bash"
"$PY" -c "import numpy" 2>/dev/null || skip "numpy is not installed for $PY"
CH=("$PY" "$TESTLIB/bnfold_channels.py")
"${CH[@]}" make "$T/det.safetensors"

# Guesses accepted: batch_norm_1 pairs with a producer making 24 channels, never
# with conv2d_transpose_1 (1 channel; 24 groups would be a second guess).
expect_rc 0 "$NPUC_BIN" fold-bn "$T/det.safetensors" --dry-run --json --accept-guesses
"${CH[@]}" plan "$T/out" || fail "fold-bn plan reads a producer with another channel count"
expect_rc 0 "$NPUC_BIN" fold-bn "$T/det.safetensors" --dry-run --accept-guesses
must_not_match "$T/out" 'conv2d_transpose_1\.w_0 +batch_norm'
expect_rc 0 "$NPUC_BIN" prune "$T/det.safetensors" --structured filter -s 0.5 --accept-guesses --json \
    -o "$T/pruned.safetensors"
"${CH[@]}" prune "$T/out" || fail "prune reads a weight with another channel count than fold-bn"
expect_rc 0 "$NPUC_BIN" fold-bn "$T/det.safetensors" -o "$T/folded.safetensors" --accept-guesses -q
"${CH[@]}" same "$T/det.safetensors" "$T/folded.safetensors" conv2d_transpose_1.w_0 ||
    fail "the wrong fold was made"
npuc_py dump "$T/folded.safetensors" >"$T/dump.json"
must_not_match "$T/dump.json" 'conv2d_transpose_1\.b_0'

# Stated by the user, the pairing fits only with groups the file does not
# state: a guess (listed, not folded by default; --strict exit 2).
expect_rc 0 "$NPUC_BIN" fold-bn "$T/det.safetensors" --dry-run --pair conv2d_transpose_1.w_0=batch_norm_1
must_match "$T/out" '^would fold 0 of 2 BatchNorms'
must_match "$T/out" 'skip batch_norm_1 \(producer conv2d_transpose_1\.w_0\): a guess, not applied.*24 groups from the BatchNorm, the file states none \(the graph: 1 channels\)'
expect_rc 2 "$NPUC_BIN" fold-bn "$T/det.safetensors" -o "$T/strict.safetensors" --strict \
    --pair conv2d_transpose_1.w_0=batch_norm_1
must_match "$T/err" "refused by --strict: a depthwise transposed conv is stated with --layout 'conv2d_transpose_1\.w_0=oihw'"
[ ! -e "$T/strict.safetensors" ] || fail "--strict wrote an output"

# Stated as depthwise (channels on axis 0) with --layout: both passes read 24.
L=(--layout 'conv2d_transpose_1\.w_0=oihw')
expect_rc 0 "$NPUC_BIN" fold-bn "$T/det.safetensors" --dry-run --json --pair conv2d_transpose_1.w_0=batch_norm_1 "${L[@]}"
"${CH[@]}" plan "$T/out" 1 || fail "fold-bn plan with --layout oihw"
expect_rc 0 "$NPUC_BIN" prune "$T/det.safetensors" --structured filter -s 0.5 --accept-guesses --json \
    -o "$T/pruned2.safetensors" -f "${L[@]}"
"${CH[@]}" prune "$T/out" 1 || fail "prune with --layout oihw"
# ONNX states the groups (ConvTranspose group = 2, W [4,3,2,2]): both passes
# read 6 channels; prune leaves the grouped tensor whole instead of cutting
# along axis 1 as if it had 3.
if "$PY" -c "import onnx" 2>/dev/null; then
    "${CH[@]}" make-onnx "$T/g.onnx"
    expect_rc 0 "$NPUC_BIN" fold-bn "$T/g.onnx" --dry-run --json --accept-guesses
    cp "$T/out" "$T/plan.json"
    expect_rc 0 "$NPUC_BIN" prune "$T/g.onnx" --structured filter -s 0.5 --json -o "$T/gp.onnx"
    "${CH[@]}" onnx "$T/plan.json" "$T/out" || fail "ONNX stated groups: fold-bn and prune disagree"
else
    echo "fold_bn_channels: python3-onnx not installed, the stated-groups case is not checked"
fi
echo "fold_bn_channels: fold-bn and prune read every weight with the same channel count"
