#!/usr/bin/env bash
# Issue 14 acceptance, not registered in CTest yet (tests/cli/*.sh is globbed;
# this folder is not): a Keras 3 .weights.h5 (layers/<name>/vars/N) with
# DepthwiseConv2D -> BN and Conv2D -> BN; both BatchNorms folded as numpy
# does.  Fails on branch i14-bn because the variables of a Keras 3 file carry
# no names: the BatchNorm vars are read with role "other" and the depthwise
# kernel [3,3,8,1] as hwio (the layout/role work of branch i14-layout).
# Run by hand: NPUC_BIN=build/npuc NPUC_SRC=$PWD NPUC_PYTHON=/usr/bin/python3 bash tests/cli/pending/fold_bn_keras3.sh
source "$(dirname "$0")/../lib/cli_test.bash"
have_h5py || skip "h5py is not installed for $PY"
GEN=("$PY" "$TESTLIB/bnfold_trust.py")
"${GEN[@]}" keras3 "$T/k3.weights.h5"
expect_rc 0 "$NPUC_BIN" fold-bn "$T/k3.weights.h5" --dry-run --accept-guesses
must_match "$T/out" '^would fold 2 of 2 BatchNorms'
expect_rc 0 "$NPUC_BIN" fold-bn "$T/k3.weights.h5" -o "$T/k3.folded.weights.h5" --accept-guesses -q
"${GEN[@]}" check-keras3 "$T/k3.weights.h5" "$T/k3.folded.weights.h5" || fail "Keras 3 fold"
echo "fold_bn_keras3: both BatchNorms folded"
