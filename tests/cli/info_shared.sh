# info_shared.sh - `npuc info --json` on the four real models in
# $NPUC_SHARED_DATA (.safetensors and .h5), checked against their catalogs:
# tensor count, total params, the shape of every conv and 2-D linear weight,
# and the output-channel axis the layout guess gives:
#   - PyTorch/ONNX convention (OIHW convs, [out,in] linears) -> axis 0, also
#     for the .h5 files whose root attribute format == "pt"; Paddle MatMul
#     weights "<op>_N.w_0" of rank 2 are [in,out] -> axis 1 (issue 14);
#   - Keras-named tensors (nsfwjs, in either format): HWIO conv "kernel" -> 3,
#     "depthwise_kernel" [kh,kw,in,mult] -> 2 (rank-2: the channel spans the
#     last two axes), Dense "kernel" [in,out] -> 1.
# Then the documented override: --layout outranks every convention, so
# --layout '^linear_[0-9]+\.w_0$=oi' moves ppocrv4_rec's linears to axis 0
# (certain), and a rule that matches no tensor is a usage error (exit 2).
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"

[ -n "$SHARED" ] && [ -d "$SHARED" ] || skip "no shared data folder (NPUC_SHARED_DATA)"

checked=0
for m in $MODELS; do
    cat="$SHARED/$m.json"
    [ -f "$cat" ] || continue
    for ext in safetensors h5; do
        f="$SHARED/$m.$ext"
        [ -f "$f" ] || continue
        expect_rc 0 "$NPUC_BIN" info --json "$f"
        must_be_empty "$T/err"
        "$PY" - "$cat" "$T/out" "$m.$ext" <<'EOF'
import json, sys
cat = json.load(open(sys.argv[1]))
doc = json.load(open(sys.argv[2]))
where = sys.argv[3]
assert doc["schema"] == "npuc.info/1"
assert doc["n_tensors"] == cat["n_tensors"], (where, doc["n_tensors"], cat["n_tensors"])
assert doc["total_params"] == cat["total_params"], (where, doc["total_params"], cat["total_params"])
by = {t["name"]: t for t in doc["tensors"]}

def expected_axis(name, rank):
    leaf = name.rsplit("/", 1)[-1]
    if leaf == "depthwise_kernel":
        return rank - 2          # Keras DepthwiseConv2D [kh, kw, in, mult]
    if leaf == "kernel":
        return rank - 1          # Keras Conv HWIO / Dense [in, out]
    if leaf.endswith(".w_0") and rank == 2:
        return 1                 # Paddle MatMul [in, out]
    return 0                     # PyTorch / ONNX: OIHW, [out, in]

n = 0
for name, shape, role in cat["conv_weights"] + cat["linear_2d_weights"]:
    assert name in by, (where, "missing tensor", name)
    t = by[name]
    assert t["shape"] == shape, (where, name, t["shape"], shape)
    want = expected_axis(name, len(shape))
    assert t["out_axis"] == want, (where, name, t["layout"], t["out_axis"], want)
    n += 1
fmt = "hdf5" if where.endswith(".h5") else "safetensors"
assert doc["format"] == fmt, (where, doc["format"])
if fmt == "hdf5":
    # These files are in the Keras save_weights layout: one group per layer.
    assert doc["h5_style"] == "keras2", (where, doc["h5_style"])
    assert len(doc["groups"]) > 0
    assert sum(g["n_tensors"] for g in doc["groups"]) == doc["n_tensors"], where
print(f"{where}: {n} weights ok")
EOF
        checked=$((checked + 1))
    done
done
[ "$checked" -gt 0 ] || skip "none of the shared models is present in $SHARED"

# The documented override (docs/cli.md): --layout outranks the Paddle convention.
for ext in safetensors h5; do
    f="$SHARED/ppocrv4_rec.$ext"
    [ -f "$f" ] || continue
    expect_rc 0 "$NPUC_BIN" info "$f" --layout '^linear_[0-9]+\.w_0$=oi' --json
    "$PY" - "$SHARED/ppocrv4_rec.json" "$T/out" <<'EOF'
import json, sys
cat = json.load(open(sys.argv[1]))
doc = json.load(open(sys.argv[2]))
by = {t["name"]: t for t in doc["tensors"]}
assert doc["layout_rules"] == [r"^linear_[0-9]+\.w_0$=oi"], doc["layout_rules"]
for name, shape, role in cat["linear_2d_weights"]:
    assert by[name]["layout"] == "oi" and by[name]["out_axis"] == 0, by[name]
    assert by[name]["confidence"] == "certain" and "--layout" in by[name]["evidence"], by[name]
for name, shape, role in cat["conv_weights"]:
    assert by[name]["out_axis"] == 0, by[name]          # untouched
EOF
    # A rule that matches nothing is an error naming the rule, exit 2.
    expect_rc 2 "$NPUC_BIN" info "$f" --layout '^no_such_tensor$=io' --json
    must_be_empty "$T/out"
    must_match "$T/err" "^npuc: error: .*ppocrv4_rec\\.$ext: --layout '\\^no_such_tensor\\\$=io' matches no tensor"
    # A layout that does not fit a matched tensor's rank, and an unknown name.
    expect_rc 2 "$NPUC_BIN" info "$f" --layout 'b_0$=hwio'
    must_match "$T/err" "^npuc: error: .*needs rank >= 3"
    expect_rc 2 "$NPUC_BIN" info "$f" --layout 'w_0$=sideways'
    must_match "$T/err" "^npuc: error: .*unknown layout 'sideways'"
done

# Issue 31: no layout is stated as "convention" unless a rule listed in
# docs/formats.md ("Rules behind a convention") backs it.  Every model under
# the shared folder, both formats; the evidence, with the file's family and
# the name's token taken out, must start with one of the listed rules.
conv_checked=0
for f in "$SHARED"/*.safetensors "$SHARED"/*.h5; do
    [ -f "$f" ] || continue
    expect_rc 0 "$NPUC_BIN" info --json "$f"
    "$PY" - "$NPUC_SRC/docs/formats.md" "$T/out" "$(basename "$f")" <<'EOF'
import json, re, sys
doc = open(sys.argv[1]).read()
sec = doc.split("#### Rules behind a `convention`", 1)[1].split("\n#### ", 1)[0]
rules = [span for line in sec.splitlines() if line.startswith("| `")
         for span in re.findall(r"`([^`]+)`", line.split("|")[1])]
assert len(rules) > 20, rules
n = 0
for t in json.load(open(sys.argv[2]))["tensors"]:
    if t["confidence"] != "convention":
        continue
    ev = re.sub(r"^(format=\w+|Keras file), ", "", t["evidence"] or "")
    ev = re.sub(r"^([^':]+?) '[^']*'(: )", r"\1\2", ev)
    assert any(ev.startswith(r) for r in rules), (sys.argv[3], t["name"], t["evidence"])
    n += 1
print(f"{sys.argv[3]}: {n} convention layouts, each backed by a listed rule")
EOF
    conv_checked=$((conv_checked + 1))
done
[ "$conv_checked" -gt 0 ] || fail "no model checked for convention rules"

echo "info_shared: $checked files ok"
