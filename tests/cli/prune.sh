#!/usr/bin/env bash
# npuc prune end to end (issue 4), against independent computations
# (tests/cli/lib/prune_check.py, NumPy; torch for a forward pass):
#  - magnitude pruning: exactly floor(S*n) zeros, ties to the lower index, existing
#    zeros counted, bit for bit against a NumPy lexsort, per layer and global, F32 and
#    F16, safetensors and HDF5; the JSON report's sparsity extras agree;
#  - outputs are byte-identical for -j 1, -j 2, NPUC_FORCE_REF=1 and across runs;
#  - structured pruning shrinks every companion together: the PyTorch-named sample
#    loads into a smaller torch network and runs; the Keras sample, nsfwjs (model_config)
#    and ppocr (--graph catalog + --next) stay consistent layer by layer;
#  - fallback to zeroing (and a note) where no consumer is found;
#  - --layer-sparsity: matched tensors at their own S, bit for bit against NumPy, in
#    layer and global scope (global: matched tensors outside the pool), and the
#    matched layer's filter fraction in structured pruning;
#  - bad input: sparsity outside [0, 1) (also per layer), a rule matching nothing,
#    --next naming a missing tensor or mismatched shapes, bad --graph: exit 2, one
#    error line, nothing written.
source "$(dirname "$0")/lib/cli_test.bash"

"$PY" -c 'import numpy' 2>/dev/null || skip "numpy is not installed for $PY"
cnn="$SAMPLES/cnn_bn.safetensors"
keras="$SAMPLES/cnn_bn_keras.h5"
mlp="$SAMPLES/mlp_attn.safetensors"
chk() { "$PY" "$TESTLIB/prune_check.py" "$@"; }

# --- magnitude pruning against NumPy
srcs="$cnn $mlp"
have_h5py && srcs="$srcs $keras"
for src in $srcs; do
    ext="${src##*.}"
    for s in 0 0.3 0.5 0.9 0.999; do
        for scope in layer global; do
            keep_case 5 || continue # the quick passes: 6 of the 30, every model and scope among them
            expect_rc 0 "$NPUC_BIN" prune -q --sparsity "$s" --scope "$scope" --json "$src" -o "$T/p.$ext" -f
            cp "$T/out" "$T/p.json"
            chk magnitude "$src" "$T/p.$ext" "$s" "$scope" "$T/p.json" || fail "$src $s $scope: differs from NumPy"
        done
    done
done
echo "magnitude pruning ok"

# A model with ties, existing zeros (both signs), several parallel chunks and F16.
"$PY" - "$T/ties.safetensors" <<'PY'
import json, struct, sys
import numpy as np
rng = np.random.default_rng(3)
a = rng.choice(np.array([0, -0.0, 0.5, -0.5, 1, -1, 0.25], np.float32), size=(1100, 1031))
b = (rng.standard_normal((3000, 1000)) * 0.02).astype(np.float32)
b[rng.random(b.shape) < 0.3] = 0
c = rng.standard_normal((64, 33)).astype(np.float16)
ts = [("a.weight", "F32", a), ("b.weight", "F32", b), ("c.weight", "F16", c)]
hdr, off, blobs = {}, 0, []
for n, dt, x in ts:
    raw = x.tobytes()
    hdr[n] = {"dtype": dt, "shape": list(x.shape), "data_offsets": [off, off + len(raw)]}
    off += len(raw)
    blobs.append(raw)
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
for s in 0.2 0.5 0.77; do
    for scope in layer global; do
        keep_case 2 || continue
        expect_rc 0 "$NPUC_BIN" prune -q --sparsity "$s" --scope "$scope" --json "$T/ties.safetensors" -o "$T/t.safetensors" -f
        cp "$T/out" "$T/t.json"
        chk magnitude "$T/ties.safetensors" "$T/t.safetensors" "$s" "$scope" "$T/t.json" || fail "ties $s $scope"
    done
done
echo "ties and zeros ok"

# --- --layer-sparsity: matched tensors at their own S, the rest at --sparsity (layer
# scope) or sharing one global budget without them (global scope).  Reference: a NumPy
# lexsort over (|w|, [tensor,] index) of the input, compared bit for bit; zeros counted.
layer_ref() { # layer_ref IN OUT REPORT S SCOPE RULE...
    "$PY" - "$TESTLIB" "$@" <<'PY'
import json, math, re, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from npuc_test import read_any
NP = {"F32": np.float32, "F16": np.float16}
UI = {"F32": np.uint32, "F16": np.uint16}
def load(p):
    return {n: (d, np.frombuffer(b, NP[d]).reshape(s) if d in NP else None) for n, d, s, b in read_any(p)[1]}
src, out = load(sys.argv[2]), load(sys.argv[3])
rep = {t["name"]: t for t in json.load(open(sys.argv[4]))["tensors"]}
S, scope = float(sys.argv[5]), sys.argv[6]
rules = [(r.rsplit("=", 1)[0], float(r.rsplit("=", 1)[1])) for r in sys.argv[7:]]
def rule_of(name):
    for pat, v in rules:
        if re.search(pat, name):
            return v
    return None
sel = [n for n, (d, x) in src.items() if x is not None and x.ndim >= 2 and x.size]
def prune(xs, k):  # xs: list of float arrays, pruned together (file order, then index)
    mag = np.concatenate([np.abs(x.astype(np.float32)).ravel() for x in xs])
    pos = np.arange(mag.size)
    order = np.lexsort((pos, mag))
    z = np.zeros(mag.size, bool)
    z[order[:k]] = True
    res, off = [], 0
    for x in xs:
        e = x.copy().ravel()
        e[z[off:off + x.size]] = 0
        res.append(e.reshape(x.shape))
        off += x.size
    return res
own = [n for n in sel if rule_of(n) is not None]
pool = [n for n in sel if n not in own]
want = {}
for n in sel:
    if scope == "layer" or n in own:
        t = rule_of(n) if n in own else S
        want[n] = (prune([src[n][1]], math.floor(t * src[n][1].size))[0], t, math.floor(t * src[n][1].size))
if scope == "global" and pool:
    res = prune([src[n][1] for n in pool], math.floor(S * sum(src[n][1].size for n in pool)))
    for n, r in zip(pool, res):
        want[n] = (r, S, None)
for n, (d, x) in src.items():
    got = out[n][1]
    if n not in want:
        assert got is None or np.array_equal(got.view(UI[d]), x.view(UI[d])), f"{n}: changed"
        assert rep[n]["action"] == "kept", rep[n]
        continue
    ref, t, k = want[n]
    assert np.array_equal(got.view(UI[d]), ref.view(UI[d])), f"{n}: differs from NumPy"
    zeros = int(np.count_nonzero(got == 0))
    if k is not None:
        assert zeros == max(k, int(np.count_nonzero(x == 0))), (n, zeros, k)
    x_ = rep[n]["extra"]
    assert rep[n]["action"] == "pruned" and abs(x_["sparsity_target"] - t) < 1e-12, (n, x_)
    assert x_["zeros"] == zeros, (n, x_["zeros"], zeros)
    assert rep[n]["scheme"] == ("mag/global" if scope == "global" and n in pool else "mag/layer"), rep[n]["scheme"]
print(f"{sys.argv[2].split('/')[-1]} {scope}: {len(own)} tensors at their own sparsity, {len(want) - len(own)} at {S}")
PY
}
for scope in layer global; do
    keep_case 2 || continue # the quick passes: one scope (both ran in the release pass)
    expect_rc 0 "$NPUC_BIN" prune -q --sparsity 0.6 --scope $scope --layer-sparsity '^features\.3\.weight$=0.25' \
        --layer-sparsity 'classifier=0.9' --layer-sparsity 'classifier\.weight=0.1' --json "$cnn" -o "$T/ls.safetensors" -f
    cp "$T/out" "$T/ls.json"
    layer_ref "$cnn" "$T/ls.safetensors" "$T/ls.json" 0.6 $scope '^features\.3\.weight$=0.25' 'classifier=0.9' 'classifier\.weight=0.1' \
        || fail "--layer-sparsity cnn $scope"
    expect_rc 0 "$NPUC_BIN" prune -q --sparsity 0.3 --scope $scope --layer-sparsity '^attn\.[qk]_proj=0.8' \
        --layer-sparsity '^mlp\.fc2\.weight$=0' --json "$mlp" -o "$T/ls.safetensors" -f
    cp "$T/out" "$T/ls.json"
    layer_ref "$mlp" "$T/ls.safetensors" "$T/ls.json" 0.3 $scope '^attn\.[qk]_proj=0.8' '^mlp\.fc2\.weight$=0' \
        || fail "--layer-sparsity mlp $scope"
    expect_rc 0 "$NPUC_BIN" prune -q --sparsity 0.5 --scope $scope --layer-sparsity '^b\.weight$=0.9' --json \
        "$T/ties.safetensors" -o "$T/ls.safetensors" -f
    cp "$T/out" "$T/ls.json"
    layer_ref "$T/ties.safetensors" "$T/ls.safetensors" "$T/ls.json" 0.5 $scope '^b\.weight$=0.9' \
        || fail "--layer-sparsity ties $scope"
done
# Structured: features.3's filters at 0.75 (the 4 of largest L1 norm kept), features.0 at 0.5. features.6 -> classifier is a guess (storage order): --accept-guesses.
expect_rc 0 "$NPUC_BIN" prune -q --sparsity 0.5 --structured filter --accept-guesses --layer-sparsity '^features\.3\.weight$=0.75' \
    --json "$cnn" -o "$T/lss.safetensors" -f
cp "$T/out" "$T/lss.json"
chk shapes "$T/lss.safetensors" features.0.weight=4,3,3,3 features.1.running_mean=4 features.3.weight=4,4,3,3 \
    features.3.bias=4 features.4.weight=4 features.6.weight=4,1,3,3 features.7.bias=4 classifier.weight=10,4 \
    || fail "--layer-sparsity structured shapes"
"$PY" - "$TESTLIB" "$cnn" "$T/lss.safetensors" "$T/lss.json" <<'PY' || fail "--layer-sparsity structured values"
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from npuc_test import read_any
load = lambda p: {n: np.frombuffer(b, np.float32).reshape(s) for n, d, s, b in read_any(p)[1] if d == "F32"}
src, out = load(sys.argv[2]), load(sys.argv[3])
def keep(w, n):  # the n filters of largest L1 norm; ties: the lower index goes first
    l1 = np.abs(w.astype(np.float64)).reshape(w.shape[0], -1).sum(1)
    return np.sort(np.lexsort((np.arange(w.shape[0]), l1))[w.shape[0] - n:])
k0, k3 = keep(src["features.0.weight"], 4), keep(src["features.3.weight"], 4)
assert np.array_equal(out["features.0.weight"], src["features.0.weight"][k0])
assert np.array_equal(out["features.3.weight"], src["features.3.weight"][k3][:, k0])
assert np.array_equal(out["classifier.weight"], src["classifier.weight"][:, k3])
t = {x["name"]: x for x in json.load(open(sys.argv[4]))["tensors"]}
e3, e0 = t["features.3.weight"]["extra"], t["features.0.weight"]["extra"]
assert e3["sparsity_target"] == 0.75 and e3["channels_removed"] == 12 and e3["sparsity"] == 0.75, e3
assert e0["sparsity_target"] == 0.5 and e0["channels_removed"] == 4, e0
print("structured --layer-sparsity: kept filters match NumPy's L1 ranking")
PY
echo "--layer-sparsity ok"

# --- determinism
for args in "--sparsity 0.6" "--sparsity 0.6 --scope global" "--sparsity 0.5 --structured filter"; do
    keep_case 2 || continue
    # shellcheck disable=SC2086
    "$NPUC_BIN" prune -q $args -j 1 "$T/ties.safetensors" -o "$T/j1.safetensors" -f >/dev/null 2>&1
    # shellcheck disable=SC2086
    "$NPUC_BIN" prune -q $args -j 2 "$T/ties.safetensors" -o "$T/j2.safetensors" -f >/dev/null 2>&1
    # shellcheck disable=SC2086
    NPUC_FORCE_REF=1 "$NPUC_BIN" prune -q $args -j 2 "$T/ties.safetensors" -o "$T/ref.safetensors" -f >/dev/null 2>&1
    cmp "$T/j1.safetensors" "$T/j2.safetensors" || fail "$args: -j 1 and -j 2 differ"
    cmp "$T/j1.safetensors" "$T/ref.safetensors" || fail "$args: SIMD and reference differ"
done
echo "determinism ok"

# --- structured, PyTorch names: a smaller torch network loads the output and runs
# features.6 -> classifier leaves a container by storage order: a guess, applied with --accept-guesses
expect_rc 0 "$NPUC_BIN" prune --sparsity 0.5 --structured filter --round-to 2 --accept-guesses --json "$cnn" -o "$T/s.safetensors" -f
chk shapes "$T/s.safetensors" features.0.weight=4,3,3,3 features.1.running_var=4 features.1.num_batches_tracked= \
    features.3.weight=8,4,3,3 features.3.bias=8 features.4.weight=8 features.6.weight=8,1,3,3 features.7.bias=8 \
    classifier.weight=10,8 classifier.bias=10 || fail "structured shapes (cnn_bn)"
"$PY" - "$T/out" <<'PY' || fail "structured report"
import json, sys
d = json.load(open(sys.argv[1]))
t = {x["name"]: x for x in d["tensors"]}
p = t["features.3.weight"]
assert p["action"] == "pruned" and p["scheme"] == "filter/l1", p
assert p["extra"]["channels"] == 16 and p["extra"]["channels_removed"] == 8 and p["extra"]["sparsity"] == 0.5, p
assert "classifier.weight" in p["note"], p["note"]
assert t["features.1.num_batches_tracked"]["action"] == "kept"
assert "model's output" in " ".join(d.get("warnings", [])), d.get("warnings")
PY
if "$PY" -c 'import torch' 2>/dev/null; then
    "$PY" - "$cnn" "$T/s.safetensors" "$TESTLIB" <<'PY' || fail "torch cannot run the pruned network"
import sys
import numpy as np
import torch
sys.path.insert(0, sys.argv[3])
from npuc_test import read_st
def sd(path):
    _, ts = read_st(path)
    out = {}
    for n, dt, s, b in ts:
        a = np.frombuffer(b, {"F32": np.float32, "I64": np.int64}[dt]).reshape(s).copy()
        out[n] = torch.from_numpy(a)
    return out
def net(d):
    w0, w3, w6, wc = d["features.0.weight"], d["features.3.weight"], d["features.6.weight"], d["classifier.weight"]
    return torch.nn.Sequential(
        torch.nn.Sequential(torch.nn.Conv2d(w0.shape[1], w0.shape[0], 3, padding=1, bias=False), torch.nn.BatchNorm2d(w0.shape[0]),
                            torch.nn.ReLU(), torch.nn.Conv2d(w3.shape[1], w3.shape[0], 3, padding=1), torch.nn.BatchNorm2d(w3.shape[0]),
                            torch.nn.ReLU(), torch.nn.Conv2d(w6.shape[0], w6.shape[0], 3, padding=1, groups=w6.shape[0], bias=False),
                            torch.nn.BatchNorm2d(w6.shape[0]), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()),
        torch.nn.Linear(wc.shape[1], wc.shape[0]))
for path in sys.argv[1:3]:
    d = sd(path)
    m = net(d)
    m.load_state_dict({k.replace("classifier", "1").replace("features", "0"): v for k, v in d.items()}, strict=True)
    m.eval()
    y = m(torch.randn(2, 3, 8, 8))
    assert y.shape == (2, 10) and torch.isfinite(y).all()
PY
    echo "torch runs the pruned network"
fi

# --round-to above the channel count keeps every channel (and says so)
expect_rc 0 "$NPUC_BIN" prune --sparsity 0.5 --structured filter --round-to 16 --json "$cnn" -o "$T/r.safetensors" -f
"$PY" -c "import json; t={x['name']:x for x in json.load(open('$T/out'))['tensors']}; n=t['features.0.weight']['note']; assert 'keeps all 8 channels' in n, n" \
    || fail "--round-to 16 on 8 channels"
chk shapes "$T/r.safetensors" features.0.weight=8,3,3,3 features.3.weight=16,8,3,3 classifier.weight=10,16 || fail "--round-to 16 shapes"

# --- structured, Keras layer order (a guess: listed, applied only with --accept-guesses)
if have_h5py; then
    expect_rc 0 "$NPUC_BIN" prune --sparsity 0.5 --structured filter --accept-guesses "$keras" -o "$T/k.h5" -f
    must_match "$T/err" "guess"
    chk shapes "$T/k.h5" conv2d/kernel=3,3,3,4 batch_normalization/gamma=4 conv2d_1/kernel=3,3,4,8 conv2d_1/bias=8 \
        batch_normalization_1/moving_variance=8 depthwise_conv2d/depthwise_kernel=3,3,8,1 batch_normalization_2/beta=8 \
        dense/kernel=8,10 dense/bias=10 || fail "structured shapes (keras)"
    # default (and --no-guess, now its alias): nothing is removed, the weakest filters are zeroed in place
    expect_rc 0 "$NPUC_BIN" prune --sparsity 0.5 --structured filter --json "$keras" -o "$T/kz0.h5" -f
    chk shapes "$T/kz0.h5" conv2d_1/kernel=3,3,8,16 dense/kernel=16,10 || fail "default guess shapes"
    expect_rc 0 "$NPUC_BIN" prune --sparsity 0.5 --structured filter --no-guess --json "$keras" -o "$T/kz.h5" -f
    "$PY" -c "import json,sys; d=json.load(open('$T/out')); t={x['name']:x for x in d['tensors']}; n=t['conv2d_1/kernel']['note']; assert 'zeroed, not removed' in n, n" \
        || fail "--no-guess note"
    chk shapes "$T/kz.h5" conv2d_1/kernel=3,3,8,16 dense/kernel=16,10 || fail "--no-guess shapes"
fi
echo "structured samples ok"

# --- shared models: nsfwjs (Keras model_config), ppocr (--graph catalog + --next)
if [ -n "$SHARED" ] && [ -f "$SHARED/nsfwjs_mobilenet_v2.h5" ] && have_h5py; then
    expect_rc 0 "$NPUC_BIN" prune -q --sparsity 0.5 --structured filter --criterion l2 --round-to 8 --json \
        "$SHARED/nsfwjs_mobilenet_v2.h5" -o "$T/n.h5" -f
    chk keras_consistent "$T/n.h5" || fail "nsfwjs: inconsistent after structured pruning"
    "$PY" - "$T/out" <<'PY' || fail "nsfwjs report"
import json, sys
t = {x["name"]: x for x in json.load(open(sys.argv[1]))["tensors"]}
e = t["block_1_expand/kernel"]
assert e["extra"]["channels"] == 96 and e["extra"]["channels_removed"] == 48, e
assert "keras topology" in e["note"] and "block_1_project/kernel" in e["note"], e["note"]
p = t["block_2_project/kernel"]
assert "zeroed, not removed" in p["note"] and "Add" in p["note"], p["note"]   # residual: never removed
kept = [x for x in t.values() if x["action"] == "pruned" and "channels" in x["extra"] and "->" in x["note"]]
assert len(kept) > 10 and all((x["extra"]["channels"] - x["extra"]["channels_removed"]) % 8 == 0 for x in kept)
PY
    echo "nsfwjs ok"
fi
if [ -n "$SHARED" ] && [ -f "$SHARED/ppocr_mobile_v2_cls.safetensors" ]; then
    p="$SHARED/ppocr_mobile_v2_cls"
    cat >"$T/graph.txt" <<'EOF'
# expand -> depthwise -> project, MobileNetV3 blocks without squeeze-excite
conv2d_6.w_0 = conv2d_7.w_0
conv2d_7 =conv2d_8
conv2d_9=conv2d_10.w_0
conv2d_10=conv2d_11
EOF
    expect_rc 0 "$NPUC_BIN" prune -q --sparsity 0.5 --structured filter --graph "$p.json" --next conv2d_6=conv2d_7 \
        --next conv2d_7=conv2d_8 --include 'conv2d_(6|9)\.w_0$' --json "$p.safetensors" -o "$T/pp.safetensors" -f
    cp "$T/out" "$T/pp.json"
    expect_rc 2 "$NPUC_BIN" prune -q --sparsity 0.5 --structured filter --graph "$T/graph.txt" --next conv2d_6=conv2d_7 \
        "$p.safetensors" -o "$T/pp2.safetensors" -f
    must_match "$T/err" "stated twice"
    chk shapes "$T/pp.safetensors" conv2d_6.w_0=12,8,1,1 batch_norm_4.w_0=12 batch_norm_4.w_2=12 conv2d_7.w_0=12,1,3,3 \
        batch_norm_5.b_0=12 conv2d_8.w_0=8,12,1,1 conv2d_9.w_0=32,8,1,1 conv2d_11.w_0=8,32,1,1 \
        || fail "ppocr shapes (conv2d_9 has no stated consumer in this run: zeroed, not shrunk)"
    "$PY" -c "import json; t={x['name']:x for x in json.load(open('$T/pp.json'))['tensors']}; assert 'zeroed' in t['conv2d_9.w_0']['note']" \
        || fail "ppocr: conv2d_9 note"
    # the text graph form
    sed -i '/^conv2d_6/d; /^conv2d_7/d' "$T/graph.txt"
    expect_rc 0 "$NPUC_BIN" prune -q --sparsity 0.5 --structured filter --graph "$T/graph.txt" --include 'conv2d_9\.w_0$' \
        "$p.safetensors" -o "$T/pp3.safetensors" -f
    chk shapes "$T/pp3.safetensors" conv2d_9.w_0=16,8,1,1 conv2d_10.w_0=16,1,3,3 conv2d_11.w_0=8,16,1,1 \
        || fail "ppocr text graph shapes"
    echo "ppocr ok"
fi

# --- bad input: exit 2, one line, nothing written
bad() { # bad PATTERN ARGS...
    local pat=$1
    shift
    rm -f "$T/bad.safetensors"
    expect_rc 2 "$NPUC_BIN" prune "$@" -o "$T/bad.safetensors"
    must_match "$T/err" "$pat"
    [ "$(wc -l <"$T/err")" -le 2 ] || fail "more than one error line for: $*"
    [ ! -e "$T/bad.safetensors" ] && [ ! -e "$T/bad.safetensors.tmp" ] || fail "output written for: $*"
    must_be_empty "$T/out"
}
bad "must be a number in \[0, 1\)" --sparsity 1 "$cnn"
bad "must be a number in \[0, 1\)" --sparsity 1.5 "$cnn"
bad "must be a number in \[0, 1\)" --sparsity -0.1 "$cnn"
bad "must be a number in \[0, 1\)" --sparsity nan "$cnn"
bad "must be a number in \[0, 1\)" --sparsity abc "$cnn"
bad "missing --sparsity" "$cnn"
bad "expected layer or global" --sparsity 0.5 --scope all "$cnn"
bad "need --structured" --sparsity 0.5 --criterion l2 "$cnn"
bad "no tensor or layer 'features.9'" --sparsity 0.5 --structured filter --next features.0=features.9 "$cnn"
bad "no tensor or layer 'nope'" --sparsity 0.5 --structured filter --next nope=features.3 "$cnn"
bad "shapes do not match" --sparsity 0.5 --structured filter --next features.0.weight=classifier.weight "$cnn"
bad "expected PRODUCER=CONSUMER" --sparsity 0.5 --structured filter --next features.0 "$cnn"
bad "graph.*No such file" --sparsity 0.5 --structured filter --graph "$T/missing.json" "$cnn"
echo '{"next": {"features.0": 3}}' >"$T/badgraph.json"
bad "not a name or list" --sparsity 0.5 --structured filter --graph "$T/badgraph.json" "$cnn"
echo '{"next": ' >"$T/badgraph.json"
bad "badgraph.json" --sparsity 0.5 --structured filter --graph "$T/badgraph.json" "$cnn"
bad "matches no tensor" --sparsity 0.5 --include nothing_like_this "$cnn"
bad "--layer-sparsity 'classifier=1': the sparsity after '=' must be a number in \[0, 1\)" \
    --sparsity 0.5 --layer-sparsity 'classifier=1' "$cnn"
bad "--layer-sparsity 'classifier=-0.2': the sparsity after '=' must be a number in \[0, 1\)" \
    --sparsity 0.5 --scope global --layer-sparsity 'classifier=-0.2' "$cnn"
bad "--layer-sparsity 'classifier=half': the sparsity after '=' must be a number in \[0, 1\)" \
    --sparsity 0.5 --structured filter --layer-sparsity 'classifier=half' "$cnn"
bad "--layer-sparsity 'classifier=nan': the sparsity" --sparsity 0.5 --layer-sparsity 'classifier=nan' "$cnn"
bad "--layer-sparsity 'classifier': expected REGEX=VALUE" --sparsity 0.5 --layer-sparsity classifier "$cnn"
bad "cnn_bn.safetensors: --layer-sparsity 'nothing_like_this=0.5' matches no tensor" \
    --sparsity 0.5 --layer-sparsity 'nothing_like_this=0.5' "$cnn"
bad "cnn_bn.safetensors: --layer-sparsity 'nothing_like_this=0.5' matches no tensor" \
    --sparsity 0.5 --structured channel --layer-sparsity 'nothing_like_this=0.5' "$cnn"
"$PY" - "$T/nan.safetensors" <<'PY'
import json, struct, sys
data = struct.pack("<6f", 0.5, float("nan"), -1.0, float("inf"), 2.0, 3.0)
h = json.dumps({"fc.weight": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}}).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + data)
PY
bad "tensor 'fc.weight': 2 NaN or Inf values" --sparsity 0.5 "$T/nan.safetensors"
bad "tensor 'fc.weight': 2 NaN or Inf values" --sparsity 0.5 --scope global "$T/nan.safetensors"
echo keep >"$T/exists.safetensors"
expect_rc 2 "$NPUC_BIN" prune --sparsity 0.5 "$cnn" -o "$T/exists.safetensors"
[ "$(cat "$T/exists.safetensors")" = keep ] || fail "existing output was modified"
echo "bad input ok"
