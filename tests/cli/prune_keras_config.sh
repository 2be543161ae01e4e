#!/usr/bin/env bash
# prune_keras_config.sh - issue 31 item 8 / issue 28: after structured
# pruning (and fold-bn, and both), the Keras model_config an output carries
# agrees with its weights, in each format that keeps one (a Keras 2 .h5, a
# Keras 3 .keras archive, safetensors with a model_config entry): every
# Conv/Dense layer's filters / units equal its kernel's output extent, no
# folded BatchNorm layer is still listed, every reference names a listed
# layer, read back by tests/cli/lib/keras_config_check.py with Python's
# json, zipfile and h5py (not npuc), and `npuc validate --deep` accepts the
# file; a hand-broken config is refused by both, naming the layer.  Every
# shared .h5 with a model_config is used (the others have none to keep in
# step), converted to the other two formats by npuc convert.
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"
"$PY" -c 'import h5py' 2>/dev/null || skip "h5py is not installed for $PY"
[ -d "$SHARED" ] || skip "../shared/data is not there"
# Well-formed files only here: the contained HDF5 reader's per-tensor CPU
# limit (10 s, sized for native speed) once stopped a memcheck run of
# `validate --deep` (CI's first pass runs one call per test under valgrind,
# 20-50x slower) on a loaded machine.  The hang and bomb inputs that need
# the native limits are cli_fuzz_finds', which keep them.
export NPUC_H5_TIMEOUT=300
C=("$PY" "$TESTLIB/keras_config_check.py")
n=0
for src in "$SHARED"/*.h5; do
    rc=0
    "${C[@]}" "$src" >/dev/null || rc=$?
    [ "$rc" = 3 ] && continue # no model_config
    [ "$rc" = 0 ] || fail "$src: the shared file's own config disagrees with it"
    b=$(basename "$src" .h5)
    expect_rc 0 "$NPUC_BIN" convert "$src" -o "$T/$b.safetensors"
    expect_rc 0 "$NPUC_BIN" convert "$src" -o "$T/$b.keras"
    for in in "$src" "$T/$b.safetensors" "$T/$b.keras"; do
        e=${in##*.}
        "${C[@]}" "$in" >/dev/null || fail "$in: the converted file's config disagrees with it"
        expect_rc 0 "$NPUC_BIN" prune --structured filter --sparsity 0.25 "$in" -o "$T/$b.p.$e"
        "${C[@]}" "$T/$b.p.$e" || fail "$b.$e: model_config stale after structured prune"
        expect_rc 0 "$NPUC_BIN" validate --deep "$T/$b.p.$e"
        expect_rc 0 "$NPUC_BIN" fold-bn "$in" -o "$T/$b.f.$e"
        "${C[@]}" "$T/$b.f.$e" || fail "$b.$e: model_config wrong after fold-bn"
        expect_rc 0 "$NPUC_BIN" prune --structured filter --sparsity 0.5 "$T/$b.f.$e" -o "$T/$b.fp.$e"
        "${C[@]}" "$T/$b.fp.$e" || fail "$b.$e: model_config stale after fold-bn then structured prune"
        expect_rc 0 "$NPUC_BIN" validate --deep "$T/$b.fp.$e"
    done
    # A hand-broken config (the first layer stating filters the kernel has
    # not): the checker and validate --deep both refuse it, naming the layer.
    "$PY" - "$T/$b.p.safetensors" "$T/$b.broken.safetensors" >"$T/broken_layer" <<'PYEOF' || fail "could not break $b"
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
cfg = json.loads(h["__metadata__"]["model_config"])
def first(c):
    for l in c["config"]["layers"]:
        if isinstance(l.get("config", {}).get("layers"), list):
            r = first(l)
            if r: return r
        elif l["class_name"] == "Conv2D":
            return l
l = first(cfg)
l["config"]["filters"] += 7
h["__metadata__"]["model_config"] = json.dumps(cfg)
hb = json.dumps(h).encode()
hb += b" " * (-len(hb) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(hb)) + hb + b[8 + n:])
print(l["config"]["name"])
PYEOF
    layer=$(cat "$T/broken_layer")
    rc=0
    "${C[@]}" "$T/$b.broken.safetensors" >"$T/chk" || rc=$?
    [ "$rc" = 1 ] || fail "the checker accepted a hand-broken config (rc $rc)"
    expect_rc 2 "$NPUC_BIN" validate --deep "$T/$b.broken.safetensors"
    must_match "$T/err" "layer '$layer'"
    n=$((n + 1))
done
[ "$n" -gt 0 ] || skip "no shared .h5 carries a model_config"
echo "prune_keras_config: $n model(s): filters/units follow the pruned kernels (json + h5py)"
