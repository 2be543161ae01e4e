# info_samples.sh - `npuc info` (text and --json) on the bundled samples,
# checked against expectations written out here by hand: tensor names,
# dtypes, shapes, roles, layouts, output-channel axes, groups and totals.
# Also: info reads only the header (a 2 GiB sparse file is instant).
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"

for f in cnn_bn.safetensors cnn_bn_keras.h5 mlp_attn.safetensors; do
    [ -f "$SAMPLES/$f" ] || fail "sample $f is missing (build/npuc_gen_samples samples)"
done

# ---------------------------------------------------------------- JSON
for f in cnn_bn.safetensors cnn_bn_keras.h5 mlp_attn.safetensors; do
    expect_rc 0 "$NPUC_BIN" info --json "$SAMPLES/$f"
    must_be_empty "$T/err"
    cp "$T/out" "$T/$f.json"
done

"$PY" - "$T" <<'EOF'
import json, sys
T = sys.argv[1]

# name: (dtype, shape, role, layout, out_axis)
CNN_BN = {
    "features.0.weight": ("F32", [8, 3, 3, 3], "conv", "oihw", 0),
    "features.1.weight": ("F32", [8], "bn_gamma", "none", None),
    "features.1.bias": ("F32", [8], "bn_beta", "none", None),
    "features.1.running_mean": ("F32", [8], "bn_mean", "none", None),
    "features.1.running_var": ("F32", [8], "bn_var", "none", None),
    "features.1.num_batches_tracked": ("I64", [], "bn_count", "none", None),
    "features.3.weight": ("F32", [16, 8, 3, 3], "conv", "oihw", 0),
    "features.3.bias": ("F32", [16], "bias", "none", None),
    "features.4.weight": ("F32", [16], "bn_gamma", "none", None),
    "features.4.bias": ("F32", [16], "bn_beta", "none", None),
    "features.4.running_mean": ("F32", [16], "bn_mean", "none", None),
    "features.4.running_var": ("F32", [16], "bn_var", "none", None),
    "features.4.num_batches_tracked": ("I64", [], "bn_count", "none", None),
    "features.6.weight": ("F32", [16, 1, 3, 3], "dwconv", "oihw", 0),
    "features.7.weight": ("F32", [16], "bn_gamma", "none", None),
    "features.7.bias": ("F32", [16], "bn_beta", "none", None),
    "features.7.running_mean": ("F32", [16], "bn_mean", "none", None),
    "features.7.running_var": ("F32", [16], "bn_var", "none", None),
    "features.7.num_batches_tracked": ("I64", [], "bn_count", "none", None),
    "classifier.weight": ("F32", [10, 16], "linear", "oi", 0),
    "classifier.bias": ("F32", [10], "bias", "none", None),
}
# Keras: HWIO kernels (out axis 3), depthwise [kh,kw,in,mult] (channel spans
# the last two axes, reported at rank-2 = 2), Dense [in,out] (out axis 1).
KERAS = {
    "conv2d/kernel": ("F32", [3, 3, 3, 8], "conv", "hwio", 3),
    "batch_normalization/gamma": ("F32", [8], "bn_gamma", "none", None),
    "batch_normalization/beta": ("F32", [8], "bn_beta", "none", None),
    "batch_normalization/moving_mean": ("F32", [8], "bn_mean", "none", None),
    "batch_normalization/moving_variance": ("F32", [8], "bn_var", "none", None),
    "conv2d_1/kernel": ("F32", [3, 3, 8, 16], "conv", "hwio", 3),
    "conv2d_1/bias": ("F32", [16], "bias", "none", None),
    "batch_normalization_1/gamma": ("F32", [16], "bn_gamma", "none", None),
    "batch_normalization_1/beta": ("F32", [16], "bn_beta", "none", None),
    "batch_normalization_1/moving_mean": ("F32", [16], "bn_mean", "none", None),
    "batch_normalization_1/moving_variance": ("F32", [16], "bn_var", "none", None),
    "depthwise_conv2d/depthwise_kernel": ("F32", [3, 3, 16, 1], "dwconv", "hwim", 2),
    "batch_normalization_2/gamma": ("F32", [16], "bn_gamma", "none", None),
    "batch_normalization_2/beta": ("F32", [16], "bn_beta", "none", None),
    "batch_normalization_2/moving_mean": ("F32", [16], "bn_mean", "none", None),
    "batch_normalization_2/moving_variance": ("F32", [16], "bn_var", "none", None),
    "dense/kernel": ("F32", [16, 10], "linear", "io", 1),
    "dense/bias": ("F32", [10], "bias", "none", None),
}
KERAS_LAYERS = ["conv2d", "batch_normalization", "conv2d_1", "batch_normalization_1",
                "depthwise_conv2d", "batch_normalization_2", "dense"]
MLP_ATTN = {
    "embed.weight": ("F16", [100, 64], "embedding", "oi", 0),
    "ln1.weight": ("F32", [64], "norm", "none", None),
    "ln1.bias": ("F32", [64], "bias", "none", None),
    "mlp.fc1.weight": ("F16", [128, 64], "linear", "oi", 0),
    "mlp.fc1.bias": ("F16", [128], "bias", "none", None),
    "mlp.fc2.weight": ("F16", [64, 128], "linear", "oi", 0),
    "mlp.fc2.bias": ("F16", [64], "bias", "none", None),
}
for p in "qkvo":
    MLP_ATTN[f"attn.{p}_proj.weight"] = ("F16", [64, 64], "linear", "oi", 0)
    MLP_ATTN[f"attn.{p}_proj.bias"] = ("F16", [64], "bias", "none", None)

SIZE = {"F32": 4, "F16": 2, "I64": 8}

def prod(s):
    n = 1
    for d in s:
        n *= d
    return n

def check(fname, doc, want, fmt, style, params, meta_keys, layers=None):
    where = fname
    assert doc["schema"] == "npuc.info/1", (where, doc["schema"])
    assert doc["format"] == fmt, (where, doc["format"])
    assert doc["h5_style"] == style, (where, doc["h5_style"])
    assert doc["file_size"] > 0
    assert doc["n_tensors"] == len(want) == len(doc["tensors"]), (where, doc["n_tensors"])
    assert doc["total_params"] == params == sum(prod(v[1]) for v in want.values()), \
        (where, doc["total_params"], params)
    assert doc["total_bytes"] == sum(prod(v[1]) * SIZE[v[0]] for v in want.values())
    by = {}
    for v in want.values():
        e = by.setdefault(v[0], {"tensors": 0, "params": 0, "bytes": 0})
        e["tensors"] += 1
        e["params"] += prod(v[1])
        e["bytes"] += prod(v[1]) * SIZE[v[0]]
    assert doc["by_dtype"] == by, (where, doc["by_dtype"], by)
    for k in meta_keys:
        assert k in doc["metadata"], (where, k, doc["metadata"])
    assert doc["layout_rules"] == []
    seen = set()
    for i, t in enumerate(doc["tensors"]):
        assert t["index"] == i
        name = t["name"]
        assert name in want, (where, "unexpected tensor", name)
        seen.add(name)
        dt, shape, role, layout, ax = want[name]
        got = (t["dtype"], t["shape"], t["role"], t["layout"], t["out_axis"])
        assert got == (dt, shape, role, layout, ax), (where, name, got, want[name])
        assert t["params"] == prod(shape) and t["bytes"] == prod(shape) * SIZE[dt]
        if layers is None:
            assert t["group"] is None, (where, name, t["group"])
        else:
            assert t["group"] == name.split("/")[0], (where, name, t["group"])
    assert seen == set(want)
    if layers is None:
        assert doc["groups"] == []
    else:
        assert [g["name"] for g in doc["groups"]] == layers, (where, doc["groups"])
        for g in doc["groups"]:
            members = [doc["tensors"][i]["name"] for i in g["tensors"]]
            assert members and all(m.split("/")[0] == g["name"] for m in members), (where, g)
            assert g["n_tensors"] == len(members)
            assert g["params"] == sum(prod(want[m][1]) for m in members)

load = lambda f: json.load(open(f"{T}/{f}.json"))
check("cnn_bn.safetensors", load("cnn_bn.safetensors"), CNN_BN, "safetensors", None, 1861,
      ["format"])
check("cnn_bn_keras.h5", load("cnn_bn_keras.h5"), KERAS, "hdf5", "keras2", 1858,
      ["backend", "keras_version"], KERAS_LAYERS)
check("mlp_attn.safetensors", load("mlp_attn.safetensors"), MLP_ATTN, "safetensors", None,
      39744, ["format"])
d = load("cnn_bn_keras.h5")["metadata"]
assert d["backend"] == "tensorflow" and d["keras_version"] == "2.11.0", d
# Storage order is the order the file declares (PyTorch state-dict order).
names = [t["name"] for t in load("cnn_bn.safetensors")["tensors"]]
assert names == list(CNN_BN), names
print("json ok")
EOF

# ---------------------------------------------------------------- text
expect_rc 0 "$NPUC_BIN" info "$SAMPLES/cnn_bn.safetensors"
must_be_empty "$T/err"
must_match "$T/out" '^file: +.*cnn_bn\.safetensors$'
must_match "$T/out" '^format: +safetensors$'
must_match "$T/out" '^tensors: +21$'
must_match "$T/out" '^parameters: +1,861$'
must_match "$T/out" '^ +idx +name +dtype +shape +params +bytes +role +layout +out +confidence$'
must_match "$T/out" '^ +0 +features\.0\.weight +F32 +\[8,3,3,3\] +216 +864 B +conv +oihw +0 +convention$'
must_match "$T/out" '^ +5 +features\.1\.num_batches_tracked +I64 +\[\] +1 +8 B +bn_count +none +- +certain$'
must_match "$T/out" '^ +6 +features\.3\.weight +F32 +\[16,8,3,3\] +1,152 +4\.50 KiB +conv +oihw +0 +convention$'
must_match "$T/out" '^ +13 +features\.6\.weight +F32 +\[16,1,3,3\] +144 +576 B +dwconv +oihw +0 +convention$'
must_match "$T/out" '^ +19 +classifier\.weight +F32 +\[10,16\] +160 +640 B +linear +oi +0 +convention$'
must_match "$T/out" '^ +F32 +18 tensors +1,858 params +7\.26 KiB$'
must_match "$T/out" '^ +I64 +3 tensors +3 params +24 B$'
must_match "$T/out" '^metadata: 2 keys$'
must_match "$T/out" '^ +format +pt$'
must_not_match "$T/out" '^layers:'
# The columns line up: every table row puts "F32"/"I64" at the same offset.
"$PY" - "$T/out" <<'EOF'
import re, sys
rows = [l for l in open(sys.argv[1]) if re.match(r"^ +\d+ ", l)]
assert len(rows) == 21, len(rows)
cols = {l.index(" F32 ") if " F32 " in l else l.index(" I64 ") for l in rows}
assert len(cols) == 1, cols
EOF

expect_rc 0 "$NPUC_BIN" info "$SAMPLES/cnn_bn_keras.h5"
must_match "$T/out" '^format: +hdf5 \(keras2\)$'
must_match "$T/out" '^tensors: +18$'
must_match "$T/out" 'conv2d/kernel +F32 +\[3,3,3,8\] +216 +864 B +conv +hwio +3 +convention$'
must_match "$T/out" 'depthwise_conv2d/depthwise_kernel +F32 +\[3,3,16,1\] +144 +576 B +dwconv +hwim +2 +certain$'
must_match "$T/out" 'dense/kernel +F32 +\[16,10\] +160 +640 B +linear +io +1 +certain$'
must_match "$T/out" '^layers: 7$'
must_match "$T/out" '^ +batch_normalization_1 +4 tensors +64 params +256 B$'
must_match "$T/out" '^ +dense +2 tensors +170 params +680 B$'
must_match "$T/out" '^ +keras_version +2\.11\.0$'

expect_rc 0 "$NPUC_BIN" info "$SAMPLES/mlp_attn.safetensors"
must_match "$T/out" '^ +0 +embed\.weight +F16 +\[100,64\] +6,400 +12\.50 KiB +embedding +oi +0 +convention$'
must_match "$T/out" '^ +F16 +13 tensors +39,616 params +77\.38 KiB$'

# --layout shows up in both renderings.
expect_rc 0 "$NPUC_BIN" info "$SAMPLES/cnn_bn.safetensors" --layout 'classifier\.weight$=io'
must_match "$T/out" '^layout rules: classifier\\\.weight\$=io$'
must_match "$T/out" 'classifier\.weight +F32 +\[10,16\] +160 +640 B +linear +io +1 +certain$'

# ---------------------------------------------------------------- header only
# A 2 GiB tensor whose payload is a hole: info and validate (without --deep)
# must not read it.
"$PY" - "$T/big.safetensors" <<'EOF'
import json, struct, sys
n = 2 * 1024**3
h = json.dumps({"huge.weight": {"dtype": "F32", "shape": [32768, 16384],
                                "data_offsets": [0, n]}}).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    f.truncate(8 + len(h) + n)
EOF
# Timed: never under valgrind (NPUC_VALGRIND=0), still input-guarded.
start=$(date +%s%N)
expect_rc 0 env NPUC_VALGRIND=0 timeout 20 "$NPUC_BIN" info --json "$T/big.safetensors"
must_match "$T/out" '"total_params": 536870912'
expect_rc 0 env NPUC_VALGRIND=0 timeout 20 "$NPUC_BIN" validate "$T/big.safetensors"
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ "$elapsed_ms" -lt 5000 ] || fail "info+validate on a 2 GiB file took ${elapsed_ms} ms"

echo "info_samples: ok"
