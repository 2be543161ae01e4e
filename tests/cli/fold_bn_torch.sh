#!/usr/bin/env bash
# `npuc fold-bn` against PyTorch: on the PyTorch-named sample, the folded
# weights and biases equal torch.nn.utils.fusion.fuse_conv_bn_weights within
# 1e-6 relative (issue 6).  Skipped where torch is absent (CI installs it).
source "$(dirname "$0")/lib/cli_test.bash"
"$PY" -c "import torch, numpy" 2>/dev/null || skip "python3-torch is not installed (.ci/install-deps --test installs it)"

for ext in safetensors h5; do
    out="$T/cnn_bn.folded.$ext"
    expect_rc 0 "$NPUC_BIN" fold-bn "$SAMPLES/cnn_bn.safetensors" -o "$out" -q
    if [ "$ext" = h5 ] && ! have_h5py; then continue; fi
    "$PY" "$TESTLIB/bnfold_check.py" torch "$SAMPLES/cnn_bn.safetensors" "$out" || fail "$out differs from torch"
done
