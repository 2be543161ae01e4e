#!/usr/bin/env bash
# prune_keras_config.sh - issue 31 item 8 / issue 28: after structured
# pruning (and fold-bn, and both), the Keras model_config an HDF5 output
# carries agrees with its weights: every Conv/Dense layer's filters / units
# equal its kernel's output extent, read back by tests/cli/lib/
# keras_config_check.py with Python's json and h5py (not npuc), and
# `npuc validate --deep` accepts the file.  Every shared .h5 with a
# model_config is used (the others have none to keep in step).
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"
"$PY" -c 'import h5py' 2>/dev/null || skip "h5py is not installed for $PY"
[ -d "$SHARED" ] || skip "../shared/data is not there"
C=("$PY" "$TESTLIB/keras_config_check.py")
n=0
for src in "$SHARED"/*.h5; do
    rc=0
    "${C[@]}" "$src" >/dev/null || rc=$?
    [ "$rc" = 3 ] && continue # no model_config
    [ "$rc" = 0 ] || fail "$src: the shared file's own config disagrees with it"
    b=$(basename "$src" .h5)
    expect_rc 0 "$NPUC_BIN" prune --structured filter --sparsity 0.25 "$src" -o "$T/$b.p.h5"
    "${C[@]}" "$T/$b.p.h5" || fail "$b: model_config stale after structured prune"
    expect_rc 0 "$NPUC_BIN" validate --deep "$T/$b.p.h5"
    expect_rc 0 "$NPUC_BIN" fold-bn "$src" -o "$T/$b.f.h5"
    "${C[@]}" "$T/$b.f.h5" || fail "$b: model_config wrong after fold-bn"
    expect_rc 0 "$NPUC_BIN" prune --structured filter --sparsity 0.5 "$T/$b.f.h5" -o "$T/$b.fp.h5"
    "${C[@]}" "$T/$b.fp.h5" || fail "$b: model_config stale after fold-bn then structured prune"
    expect_rc 0 "$NPUC_BIN" validate --deep "$T/$b.fp.h5"
    n=$((n + 1))
done
[ "$n" -gt 0 ] || skip "no shared .h5 carries a model_config"
echo "prune_keras_config: $n model(s): filters/units follow the pruned kernels (json + h5py)"
