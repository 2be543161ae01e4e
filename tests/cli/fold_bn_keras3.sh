#!/usr/bin/env bash
# fold_bn_keras3.sh - issue 14 acceptance: a Keras 3 .weights.h5
# (layers/<name>/vars/N, unnamed variables) with DepthwiseConv2D -> BN and
# Conv2D -> BN: the depthwise kernel is read as hwim, the BatchNorm
# variables by position, Keras' epsilon 1e-3 applies, and both BatchNorms
# fold as NumPy computes them (tests/cli/lib/bnfold_trust.py).
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"
have_h5py || skip "h5py is not installed for $PY"
GEN=("$PY" "$TESTLIB/bnfold_trust.py")
"${GEN[@]}" keras3 "$T/k3.weights.h5"
expect_rc 0 "$NPUC_BIN" fold-bn "$T/k3.weights.h5" --dry-run --accept-guesses
must_match "$T/out" '^would fold 2 of 2 BatchNorms'
expect_rc 0 "$NPUC_BIN" fold-bn "$T/k3.weights.h5" -o "$T/k3.folded.weights.h5" --accept-guesses -q
"${GEN[@]}" check-keras3 "$T/k3.weights.h5" "$T/k3.folded.weights.h5" || fail "Keras 3 fold"
echo "fold_bn_keras3: both BatchNorms folded"
