# validate_config.sh - `npuc validate --deep` checks a Keras model_config
# against the weights beside it (issue 28; issue 31 item 8): a layer whose
# filters / units disagree with its kernel exits 2 naming the layer, the
# field, the tensor and both counts.  The broken configurations are made
# here by hand (Python's json; h5py for the shared Keras .h5) and the
# expected counts read from the same files independently.
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"

# --- a safetensors file with a model_config entry: Dense "d" with units U, kernel [2,2]
st_dense() { # OUT UNITS
    "$PY" - "$1" "$2" <<'EOF2'
import json, struct, sys
cfg = {"class_name": "Sequential", "config": {"name": "s", "layers": [
    {"class_name": "InputLayer", "config": {"batch_input_shape": [None, 2], "name": "x"}},
    {"class_name": "Dense", "config": {"name": "d", "units": int(sys.argv[2])}}]}}
h = json.dumps({"__metadata__": {"model_config": json.dumps(cfg)},
                "d/kernel": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + struct.pack("<4f", 1, 2, 3, 4))
EOF2
}
st_dense "$T/good.safetensors" 2
expect_rc 0 "$NPUC_BIN" validate --deep "$T/good.safetensors"
st_dense "$T/bad.safetensors" 3
expect_rc 2 "$NPUC_BIN" validate --deep "$T/bad.safetensors"
must_match "$T/err" "bad\.safetensors: model_config: layer 'd' \(Dense\) states units 3, but its kernel 'd/kernel' \[2,2\] has 2 on axis 1"
[ "$(wc -l <"$T/err")" -eq 1 ] || fail "more than one line: $(cat "$T/err")"
# without --deep the structure alone is checked, as before
expect_rc 0 "$NPUC_BIN" validate "$T/bad.safetensors"
expect_rc 2 "$NPUC_BIN" validate --deep --json "$T/bad.safetensors"
must_match "$T/out" "states units 3"

# --- the shared Keras .h5: as shipped it passes; with one layer's filters changed it is refused
f="$SHARED/nsfwjs_mobilenet_v2.h5"
if [ -n "$SHARED" ] && [ -f "$f" ]; then
    expect_rc 0 "$NPUC_BIN" validate --deep "$f"
    cp "$f" "$T/broken.h5"
    "$PY" - "$T/broken.h5" >"$T/want" <<'EOF2' || fail "could not break the config"
import json, sys, h5py
with h5py.File(sys.argv[1], "r+") as h:
    mc = h.attrs["model_config"]
    cfg = json.loads(mc.decode() if isinstance(mc, bytes) else mc)
    layer = next(l for l in cfg["config"]["layers"] if l["class_name"] == "Conv2D" and l["name"] == "block_3_expand")
    root = h["model_weights"] if "model_weights" in h else h
    k = root["block_3_expand"]["block_3_expand"]["kernel:0"] if "kernel:0" in root["block_3_expand"]["block_3_expand"] \
        else root["block_3_expand"]["block_3_expand"]["kernel"]
    have = k.shape[-1]
    layer["config"]["filters"] = have + 7
    h.attrs["model_config"] = json.dumps(cfg).encode()
    print(f"layer 'block_3_expand' (Conv2D) states filters {have + 7}, but its kernel 'block_3_expand/kernel' "
          f"[{','.join(map(str, k.shape))}] has {have} on axis 3")
EOF2
    expect_rc 2 "$NPUC_BIN" validate --deep "$T/broken.h5"
    grep -qF "$(cat "$T/want")" "$T/err" || fail "expected '$(cat "$T/want")', got: $(cat "$T/err")"
fi
