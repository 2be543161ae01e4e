#!/usr/bin/env bash
# npuc report: how two files are matched and what each tensor is called
# (include/npuc/compare.h), on files written here by an independent writer:
#  - BatchNorm gone -> removed, conv scaled -> folded, a new bias -> created
#    (listed right after its weight), 2:4 zeros -> sparsified, zeros -> pruned,
#    a smaller shape -> pruned with params before/after and no error, F16 ->
#    quantized "f16", NaN in the original -> a warning and a finite error, an
#    unknown encoding -> listed with its parts' bytes, no error, a warning;
#  - two dense files with changed values and no BatchNorm gone -> modified,
#    identical -> kept;
#  - the real passes: fold-bn and lowrank outputs (when those commands exist).
source "$(dirname "$0")/lib/cli_test.bash"

"$PY" - "$T" <<'PY' || fail "writing the test files"
import json, math, random, struct, sys
T = sys.argv[1]
random.seed(7)

def f32(vals): return struct.pack("<%df" % len(vals), *vals)
def f16(vals): return struct.pack("<%de" % len(vals), *vals)
def rnd(n): return [random.gauss(0, 0.1) for _ in range(n)]

def write(path, tensors, meta=None):
    header, off, data = {}, 0, b""
    for name, dt, shape, b in tensors:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b); data += b
    if meta: header["__metadata__"] = meta
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)

conv = rnd(8 * 4 * 9); fc = rnd(16 * 32); sp = rnd(16 * 32); pr = rnd(16 * 32); cast = rnd(16 * 32)
nanw = rnd(16 * 32); nanw[5] = float("nan"); nanw[9] = float("inf"); unk = rnd(16 * 32)
bn = [[1.0] * 8, [0.0] * 8, [0.0] * 8, [1.0] * 8]
orig = [("conv.weight", "F32", [8, 4, 3, 3], f32(conv))]
orig += [(f"bn.{k}", "F32", [8], f32(v)) for k, v in zip(["weight", "bias", "running_mean", "running_var"], bn)]
orig += [("fc.weight", "F32", [16, 32], f32(fc)), ("sp.weight", "F32", [16, 32], f32(sp)),
         ("pr.weight", "F32", [16, 32], f32(pr)), ("cast.weight", "F32", [16, 32], f32(cast)),
         ("unk.weight", "F32", [16, 32], f32(unk))]
write(f"{T}/orig.safetensors", orig)

fc24 = list(fc)
for i in range(0, len(fc24), 4):  # keep the two largest of every 4 along the input axis
    g = sorted(range(i, i + 4), key=lambda j: -abs(fc24[j]))
    for j in g[2:]: fc24[j] = 0.0
sp60 = [0.0 if random.random() < 0.6 else v for v in sp]
comp = [("conv.weight", "F32", [8, 4, 3, 3], f32([v * 1.5 for v in conv])),
        ("conv.bias", "F32", [8], f32([0.1] * 8)),
        ("fc.weight", "F32", [16, 32], f32(fc24)), ("sp.weight", "F32", [16, 32], f32(sp60)),
        ("pr.weight", "F32", [12, 32], f32(pr[:12 * 32])), ("cast.weight", "F16", [16, 32], f16(cast)),
        ("unk.weight.p", "U8", [100], bytes(100))]
art = {"schema": "npuc.artifact/1", "npuc_version": "9.9.9",
       "tensors": {"unk.weight": {"encoding": "fancy", "dtype": "F32", "shape": [16, 32], "layout": "oi",
                                  "parts": ["unk.weight.p"]}}}
write(f"{T}/comp.safetensors", comp, {"npuc": json.dumps(art)})

# Two dense files: one value changed (a fine-tuned copy), and an exact copy.
# NaN/Inf in the original: left out of the error, with a warning.
write(f"{T}/ft_a.safetensors", [("a.weight", "F32", [16, 32], f32(fc)), ("b.weight", "F32", [16, 32], f32(sp)),
                                ("nan.weight", "F32", [16, 32], f32(nanw))])
fc2 = list(fc); fc2[0] += 0.01
write(f"{T}/ft_b.safetensors", [("a.weight", "F32", [16, 32], f32(fc2)), ("b.weight", "F32", [16, 32], f32(sp)),
                                ("nan.weight", "F32", [16, 32], f32([v + 0.001 if math.isfinite(v) else 0.0 for v in nanw]))])
PY

expect_rc 0 "$NPUC_BIN" report --json "$T/orig.safetensors" "$T/comp.safetensors"
"$PY" - "$T/out" <<'PY' || fail "actions in the crafted comparison"
import json, math, sys
d = json.load(open(sys.argv[1]))
names = [t["name"] for t in d["tensors"]]
t = {x["name"]: x for x in d["tensors"]}
act = {n: x["action"] for n, x in t.items()}
want = {"conv.weight": "folded", "conv.bias": "created", "bn.weight": "removed", "bn.bias": "removed",
        "bn.running_mean": "removed", "bn.running_var": "removed", "fc.weight": "sparsified",
        "sp.weight": "pruned", "pr.weight": "pruned", "cast.weight": "quantized", "unk.weight": "modified"}
assert act == want, {n: (act.get(n), w) for n, w in want.items() if act.get(n) != w}
assert names.index("conv.bias") == names.index("conv.weight") + 1, names   # created after its weight
assert t["conv.bias"]["bytes_before"] == 0 and t["conv.bias"]["bytes_after"] == 32
assert t["bn.weight"]["bytes_after"] == 0 and t["bn.weight"]["params_after"] == 0
assert t["conv.weight"]["scheme"] == "bn" and abs(t["conv.weight"]["error"]["rel_fro"] - 0.5) < 1e-6
assert t["fc.weight"]["scheme"] == "2:4" and abs(t["fc.weight"]["extra"]["sparsity"] - 0.5) < 1e-9
assert t["sp.weight"]["scheme"].endswith("% zeros") and t["sp.weight"]["error"]["sqnr_db"] < 10
p = t["pr.weight"]
assert p["error"] is None and p["params_before"] == 512 and p["params_after"] == 384, p
assert p["bytes_after"] == 384 * 4 and "[16,32] -> [12,32]" in p["note"], p
c = t["cast.weight"]
assert c["scheme"] == "f16" and c["extra"]["bits"] == 16 and c["bytes_after"] == 1024 and c["error"]["sqnr_db"] > 60
u = t["unk.weight"]
assert u["error"] is None and u["scheme"] == "fancy" and u["bytes_after"] == 100 and "cannot be decoded" in u["note"]
w = " | ".join(d["warnings"])
assert "encoding 'fancy' is unknown" in w, w
c = d["totals"]["counts"]
assert (c["removed"], c["created"], c["folded"], c["pruned"], c["sparsified"]) == (4, 1, 1, 2, 1), c
print("crafted comparison ok")
PY

expect_rc 0 "$NPUC_BIN" report --json "$T/ft_a.safetensors" "$T/ft_b.safetensors"
"$PY" - "$T/out" <<'PY' || fail "modified / kept / non-finite"
import json, sys
d = json.load(open(sys.argv[1]))
t = {x["name"]: x for x in d["tensors"]}
assert t["a.weight"]["action"] == "modified" and t["a.weight"]["error"]["max_abs"] > 0.009, t["a.weight"]
assert t["b.weight"]["action"] == "kept" and t["b.weight"]["error"] is None
n = t["nan.weight"]
assert n["action"] == "modified" and "2 non-finite" in n["note"], n
assert abs(n["error"]["max_abs"] - 0.001) < 1e-6 and abs(n["error"]["rmse"] - 0.001) < 1e-6, n["error"]
assert n["histogram"] and sum(n["histogram"]["w_count"]) == 510, n["histogram"]
w = " | ".join(d["warnings"])
assert "'nan.weight': 2 NaN/Inf values in the original" in w, w
PY

# A malformed artifact description is an input error naming the file.
"$PY" - "$T" <<'PY'
import json, struct, sys
T = sys.argv[1]
h = {"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
     "__metadata__": {"npuc": json.dumps({"schema": "npuc.artifact/1", "tensors": {"y": {"encoding": "quant",
        "dtype": "F32", "shape": [2], "layout": "none", "parts": ["nope"]}}})}}
b = json.dumps(h).encode(); b += b" " * ((8 - len(b) % 8) % 8)
open(f"{T}/badart.safetensors", "wb").write(struct.pack("<Q", len(b)) + b + bytes(8))
PY
expect_rc 2 "$NPUC_BIN" report "$T/orig.safetensors" "$T/badart.safetensors"
must_match "$T/err" "^npuc: error: .*badart\.safetensors: tensor 'y': its part 'nope' is missing"

# --- the real passes, when their commands are built in
cnn="$SAMPLES/cnn_bn.safetensors"
if "$NPUC_BIN" fold-bn --help >/dev/null 2>&1; then
    "$NPUC_BIN" fold-bn -q "$cnn" -o "$T/fold.safetensors" >/dev/null || fail "fold-bn"
    expect_rc 0 "$NPUC_BIN" report --json "$cnn" "$T/fold.safetensors"
    "$PY" - "$T/out" <<'PY' || fail "fold-bn output"
import json, sys
d = json.load(open(sys.argv[1]))
t = {x["name"]: x for x in d["tensors"]}
assert t["features.1.running_var"]["action"] == "removed"
assert t["features.0.weight"]["action"] == "folded", t["features.0.weight"]
assert t["features.0.bias"]["action"] == "created"
print("fold-bn:", d["totals"]["counts"])
PY
else
    echo "fold-bn not built in: skipping that part"
fi
mlp="$SAMPLES/mlp_attn.safetensors"
if "$NPUC_BIN" lowrank --help >/dev/null 2>&1; then
    "$NPUC_BIN" lowrank -q --rank 4 "$mlp" -o "$T/lr.safetensors" >/dev/null || fail "lowrank"
    "$NPUC_BIN" decompress -q "$T/lr.safetensors" -o "$T/lr_dense.safetensors" || fail "decompress lowrank"
    expect_rc 0 "$NPUC_BIN" report --json "$mlp" "$T/lr.safetensors"
    cp "$T/out" "$T/lr.json"
    expect_rc 0 "$NPUC_BIN" report --json "$mlp" "$T/lr_dense.safetensors"
    "$PY" - "$T/lr.json" "$T/out" <<'PY' || fail "lowrank output"
import json, math, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
fa = [x for x in a["tensors"] if x["action"] == "factored"]
assert fa, "no factored tensor"
tb = {x["name"]: x for x in b["tensors"]}
for x in fa:
    assert x["scheme"] == "r=4" and x["extra"]["rank"] == 4 and x["bytes_after"] < x["bytes_before"], x
    # The decoded factors have the error of the dense product decompress writes.
    y = tb[x["name"]]["error"]
    assert math.isclose(x["error"]["mse"], y["mse"], rel_tol=1e-5), (x["name"], x["error"]["mse"], y["mse"])
print(f"lowrank: {len(fa)} factored tensors")
PY
else
    echo "lowrank not built in: skipping that part"
fi
echo "report compare ok"
