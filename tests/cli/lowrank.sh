#!/usr/bin/env bash
# npuc lowrank / decompress end to end (issue 5):
#  - every factored tensor's parts multiply back (numpy, in the layout's
#    orientation) to what `npuc decompress` writes; other tensors are copied;
#    both formats, F32 and F16, OIHW / HWIO / OI / IO;
#  - the factors load as documented (docs/lowrank.md): with PyTorch, a conv
#    with lr_b then a 1x1 conv with lr_a equals the decompressed conv, and two
#    Linear layers equal the decompressed Linear;
#  - on ppocrv4_rec (Paddle [in, out] Linear layers) the exact solver's error
#    equals numpy's optimum, and --energy/--max-error ranks match numpy's SVD;
#  - artifacts are byte-identical for -j 1 and -j 2 (both solvers);
#  - --layer-rank: matched tensors get their rank (first rule wins), the
#    others the global rule, read back from the factor shapes; --round-to
#    still applies; "no saving" leaves the tensor dense;
#  - bad input: rank 0, rank above min(m, n), energy outside (0, 1], a 1-D
#    tensor selected explicitly, NaN weights, bad --layer-rank rules, ...:
#    exit 2, one error line, nothing written.
source "$(dirname "$0")/lib/cli_test.bash"

cnn="$SAMPLES/cnn_bn.safetensors"
keras="$SAMPLES/cnn_bn_keras.h5"
mlp="$SAMPLES/mlp_attn.safetensors"
"$PY" -c 'import numpy' 2>/dev/null || skip "the Python at $PY has no numpy"

# check_artifact SRC ART DEC: the independent checks of one round trip.
check_artifact() {
    "$PY" - "$TESTLIB" "$@" <<'PY'
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from npuc_test import read_any
NP = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64}
def load(p):
    meta, ts = read_any(p)
    return meta, {n: (d, s, b) for n, d, s, b in ts}
def arr(t):
    d, s, b = t
    return np.frombuffer(b, dtype=NP[d]).reshape(s)
_, src = load(sys.argv[2])
meta, art = load(sys.argv[3])
_, dec = load(sys.argv[4])
desc = json.loads(meta["npuc"])["tensors"]
assert list(dec) == list(src) or sorted(dec) == sorted(src), (list(dec), list(src))
nf = 0
for name, (d, s, b) in src.items():
    e = desc.get(name)
    assert dec[name][0] == d and dec[name][1] == s, (name, dec[name][:2], (d, s))
    if e is None:
        assert dec[name][2] == b, f"{name}: not factored but changed"
        assert name in art
        continue
    nf += 1
    assert e["encoding"] == "lowrank" and e["dtype"] == d and e["shape"] == s, e
    assert e["parts"] == [name + ".lr_a", name + ".lr_b"], e["parts"]
    assert name not in art
    a, bb = arr(art[e["parts"][0]]).astype(np.float64), arr(art[e["parts"][1]]).astype(np.float64)
    r = e["rank"]
    m, n = e["matrix"]
    assert art[e["parts"][0]][0] == d and art[e["parts"][1]][0] == d, "factors keep the source dtype"
    if e["layout"] in ("oi", "oihw"):
        assert list(a.shape) == [s[0], r] + [1] * (len(s) - 2), (name, a.shape)
        assert list(bb.shape) == [r] + s[1:], (name, bb.shape)
        prod = a.reshape(m, r) @ bb.reshape(r, n)
    else:  # io, hwio
        assert list(bb.shape) == s[:-1] + [r], (name, bb.shape)
        assert list(a.shape) == [1] * (len(s) - 2) + [r, s[-1]], (name, a.shape)
        prod = bb.reshape(m, r) @ a.reshape(r, n)
    got = arr(dec[name]).astype(np.float64).reshape(m, n)
    tol = 2e-3 if d == "F16" else 1e-5
    err = np.abs(prod - got).max() / max(np.abs(prod).max(), 1e-30)
    assert err <= tol, f"{name}: decompressed differs from lr_a x lr_b by {err:.3g}"
print(f"{sys.argv[3].split('/')[-1]}: {nf} factored tensors multiply back")
assert nf > 0
PY
}

# --- round trips, both formats, several rules and solvers
for src in "$cnn" "$mlp" "$keras"; do
    ext="${src##*.}"
    if [ "$ext" = h5 ] && ! have_h5py; then echo "no h5py: skipping $src"; continue; fi
    for rule in "--rank 2" "--max-error 0.6" "--energy 0.7 --round-to 4" "--rank-ratio 0.2 --solver randomized" \
                "--energy 0.5 --solver randomized --oversample 3 --power-iters 1 --seed 7"; do
        keep_case 2 || continue
        # shellcheck disable=SC2086
        expect_rc 0 "$NPUC_BIN" lowrank $rule "$src" -o "$T/a.$ext" -f
        must_match "$T/out" '^total: '
        expect_rc 0 "$NPUC_BIN" decompress -q "$T/a.$ext" -o "$T/d.$ext" -f
        check_artifact "$src" "$T/a.$ext" "$T/d.$ext" || fail "$src $rule: round trip"
    done
done
# Depthwise kernels stay dense by default, with a note.
expect_rc 0 "$NPUC_BIN" lowrank --rank 2 "$cnn" -o "$T/a.safetensors" -f
must_match "$T/out" 'features\.6\.weight .*\(depthwise kernel: not factored\)'
must_match "$T/out" 'features\.3\.weight .*r=2 .*energy=0\.[0-9]+ err=0\.[0-9]+'
# A rank above a tensor's min(m, n) leaves it dense when not selected explicitly.
expect_rc 0 "$NPUC_BIN" lowrank --rank 9 "$cnn" -o "$T/a.safetensors" -f
must_match "$T/out" 'features\.0\.weight .*\(no saving: rank 9 > min\(m, n\) = 8\)'
# "No saving": rank ratio 0.5 of a square matrix.
expect_rc 0 "$NPUC_BIN" lowrank --rank-ratio 0.5 --include 'q_proj\.weight' "$mlp" -o "$T/a.safetensors" -f
must_match "$T/out" 'attn\.q_proj\.weight .*\(no saving at rank 32: r\(m\+n\) >= mn for 64x64\)'
must_match "$T/out" '^total: 15 tensors; '
echo "round trips ok"

# --- --layer-rank: matched tensors get their own rank, the others the global rule.
# check_ranks ART REPORT NAME=R...: every listed tensor is factored at rank R (R 0:
# left dense) according to the factor shapes read from ART, the artifact's
# description and the report; every other factored tensor has the global rank
# (GLOBAL, or any when empty).
check_ranks() {
    "$PY" - "$TESTLIB" "$@" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1])
from npuc_test import read_any
meta, ts = read_any(sys.argv[2])
shapes = {n: s for n, d, s, b in ts}
desc = json.loads(meta.get("npuc", '{"tensors": {}}'))["tensors"]
rep = {t["name"]: t for t in json.load(open(sys.argv[3]))["tensors"]}
glob = sys.argv[4]
want = dict((kv.rsplit("=", 1)[0], int(kv.rsplit("=", 1)[1])) for kv in sys.argv[5:])
def rank_of(name):
    a, b = shapes.get(name + ".lr_a"), shapes.get(name + ".lr_b")
    if a is None:
        assert b is None and name in shapes, name
        return 0
    s = desc[name]["shape"]
    if desc[name]["layout"] in ("oi", "oihw"):
        r = b[0]
        assert a == [s[0], r] + [1] * (len(s) - 2) and b == [r] + s[1:], (name, a, b)
    else:
        r = b[-1]
        assert b == s[:-1] + [r] and a == [1] * (len(s) - 2) + [r, s[-1]], (name, a, b)
    assert desc[name]["rank"] == r, (name, desc[name]["rank"], r)
    return r
for name, r in want.items():
    got = rank_of(name)
    assert got == r, f"{name}: rank {got}, wanted {r}"
    if r:
        assert rep[name]["action"] == "factored" and rep[name]["extra"]["rank"] == r, rep[name]
for name in desc:
    if name not in want and glob:
        assert rank_of(name) == int(glob), (name, rank_of(name), glob)
print(f"ranks ok: {want}, others {glob or 'by the rule'}")
PY
}
expect_rc 0 "$NPUC_BIN" lowrank --rank 2 --layer-rank '^features\.3\.weight$=5' --layer-rank 'classifier=3' \
    --layer-rank 'weight$=4' --json "$cnn" -o "$T/lr.safetensors" -f
cp "$T/out" "$T/lr.json"
# first match wins: classifier.weight takes 3, not the later 'weight$=4'; features.0 takes 4
check_ranks "$T/lr.safetensors" "$T/lr.json" "" features.3.weight=5 classifier.weight=3 features.0.weight=4 \
    || fail "--layer-rank ranks (cnn)"
expect_rc 0 "$NPUC_BIN" decompress -q "$T/lr.safetensors" -o "$T/lrd.safetensors" -f
check_artifact "$cnn" "$T/lr.safetensors" "$T/lrd.safetensors" || fail "--layer-rank round trip"
# the global rule elsewhere: --energy on mlp, fixed ranks on two projections
expect_rc 0 "$NPUC_BIN" lowrank --energy 0.6 --layer-rank 'q_proj\.weight$=7' --layer-rank '^mlp\.fc1\.weight$=9' \
    --json "$mlp" -o "$T/lr2.safetensors" -f
cp "$T/out" "$T/lr2.json"
check_ranks "$T/lr2.safetensors" "$T/lr2.json" "" attn.q_proj.weight=7 mlp.fc1.weight=9 || fail "--layer-rank ranks (mlp)"
"$PY" - "$TESTLIB" "$mlp" "$T/lr2.json" <<'PY' || fail "--energy ranks beside --layer-rank"
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from npuc_test import read_any
src = {n: np.frombuffer(b, np.float16).reshape(s) for n, d, s, b in read_any(sys.argv[2])[1] if d == "F16"}
t = {x["name"]: x for x in json.load(open(sys.argv[3]))["tensors"]}
for n in ("attn.k_proj.weight", "attn.v_proj.weight", "attn.o_proj.weight", "mlp.fc2.weight"):
    s = np.linalg.svd(src[n].astype(np.float64), compute_uv=False)
    e = np.cumsum(s ** 2) / np.sum(s ** 2)
    want = int(np.argmax(e >= 0.6 - 1e-12)) + 1
    assert t[n]["extra"]["rank"] == want, (n, t[n]["extra"]["rank"], want)
print("the --energy rule ranks the unmatched tensors as numpy does")
PY
# --rank with --rank 2 everywhere else, checked explicitly (global "2")
expect_rc 0 "$NPUC_BIN" lowrank --rank 2 --layer-rank '^features\.3\.weight$=6' --json "$cnn" -o "$T/lr3.safetensors" -f
cp "$T/out" "$T/lr3.json"
check_ranks "$T/lr3.safetensors" "$T/lr3.json" 2 features.3.weight=6 || fail "--layer-rank beside --rank 2"
# --round-to still rounds a layer rank up, as it rounds --rank
expect_rc 0 "$NPUC_BIN" lowrank --rank 2 --round-to 4 --layer-rank '^features\.3\.weight$=5' --json "$cnn" \
    -o "$T/lr4.safetensors" -f
cp "$T/out" "$T/lr4.json"
check_ranks "$T/lr4.safetensors" "$T/lr4.json" 4 features.3.weight=8 || fail "--layer-rank with --round-to"
# no saving at the chosen rank: dense, and the note says so
expect_rc 0 "$NPUC_BIN" lowrank --rank 2 --layer-rank '^classifier\.weight$=7' --json "$cnn" -o "$T/lr5.safetensors" -f
cp "$T/out" "$T/lr5.json"
check_ranks "$T/lr5.safetensors" "$T/lr5.json" 2 classifier.weight=0 || fail "--layer-rank no saving"
"$PY" -c "import json,sys; t={x['name']:x for x in json.load(open('$T/lr5.json'))['tensors']}['classifier.weight']; assert t['action']=='kept' and t['extra']['rank']==7 and 'no saving at rank 7' in t['note'], t" \
    || fail "--layer-rank no-saving record"
if have_h5py; then   # out-last layouts (HWIO, IO)
    expect_rc 0 "$NPUC_BIN" lowrank --max-error 0.6 --layer-rank '^conv2d_1/kernel$=3' --layer-rank '^dense/kernel$=2' \
        --json "$keras" -o "$T/lrk.h5" -f
    cp "$T/out" "$T/lrk.json"
    check_ranks "$T/lrk.h5" "$T/lrk.json" "" conv2d_1/kernel=3 dense/kernel=2 || fail "--layer-rank ranks (keras)"
fi
echo "--layer-rank ok"

# --- loading the factors the documented way (PyTorch)
if "$PY" -c 'import torch' 2>/dev/null; then
    expect_rc 0 "$NPUC_BIN" lowrank --rank 3 "$cnn" -o "$T/t.safetensors" -f
    expect_rc 0 "$NPUC_BIN" decompress -q "$T/t.safetensors" -o "$T/td.safetensors" -f
    "$PY" - "$TESTLIB" "$T/t.safetensors" "$T/td.safetensors" <<'PY' || fail "torch loading check"
import sys
import numpy as np, torch
import torch.nn.functional as F
sys.path.insert(0, sys.argv[1])
from npuc_test import read_st
def load(p):
    return {n: torch.from_numpy(np.frombuffer(b, dtype=np.float32).reshape(s).copy())
            for n, d, s, b in read_st(p)[1] if d == "F32"}
art, dec = load(sys.argv[2]), load(sys.argv[3])
torch.manual_seed(0)
x = torch.randn(2, 8, 11, 13)
# features.3: Conv2d(8, 16, 3, padding=1) -> Conv2d(8, r, 3, padding=1) + Conv2d(r, 16, 1)
y = F.conv2d(x, dec["features.3.weight"], dec["features.3.bias"], padding=1)
z = F.conv2d(F.conv2d(x, art["features.3.weight.lr_b"], padding=1),
             art["features.3.weight.lr_a"], art["features.3.bias"])
assert torch.allclose(y, z, rtol=1e-4, atol=1e-5), (y - z).abs().max()
# classifier: Linear(16, 10) -> Linear(16, r, bias=False) + Linear(r, 10)
v = torch.randn(5, 16)
y = F.linear(v, dec["classifier.weight"], dec["classifier.bias"])
z = F.linear(F.linear(v, art["classifier.weight.lr_b"]), art["classifier.weight.lr_a"], art["classifier.bias"])
assert torch.allclose(y, z, rtol=1e-4, atol=1e-5), (y - z).abs().max()
print("torch: conv and linear factors reproduce the decompressed layers")
PY
else
    echo "no torch: skipping the PyTorch loading check"
fi

# --- determinism
for solver in exact randomized; do
    keep_case 2 || continue
    "$NPUC_BIN" lowrank -q --energy 0.8 --solver $solver -j 1 "$mlp" -o "$T/j1.safetensors" -f >/dev/null
    "$NPUC_BIN" lowrank -q --energy 0.8 --solver $solver -j 2 "$mlp" -o "$T/j2.safetensors" -f >/dev/null
    "$NPUC_BIN" lowrank -q --energy 0.8 --solver $solver -j 2 "$mlp" -o "$T/j3.safetensors" -f >/dev/null
    cmp "$T/j1.safetensors" "$T/j2.safetensors" || fail "$solver: -j 1 and -j 2 artifacts differ"
    cmp "$T/j2.safetensors" "$T/j3.safetensors" || fail "$solver: two runs differ"
done
echo "determinism ok"

# --- the real model: Paddle Linear layers are [in, out]
pp="$SHARED/ppocrv4_rec.safetensors"
if [ -n "$SHARED" ] && [ -f "$pp" ]; then
    lay='^linear_[0-9]+\.w_0$=io'
    for rule in "--energy 0.9" "--max-error 0.35"; do
        keep_case 2 || continue
        # shellcheck disable=SC2086
        expect_rc 0 "$NPUC_BIN" lowrank $rule --solver exact --layout "$lay" --include '^linear_[0-9]+\.w_0$' \
            --json --report "$T/pp.csv" "$pp" -o "$T/pp.safetensors" -f
        cp "$T/out" "$T/pp.json"
        expect_rc 0 "$NPUC_BIN" decompress -q "$T/pp.safetensors" -o "$T/ppd.safetensors" -f
        check_artifact "$pp" "$T/pp.safetensors" "$T/ppd.safetensors" || fail "ppocrv4_rec $rule: round trip"
        "$PY" - "$TESTLIB" "$pp" "$T/pp.json" "$T/ppd.safetensors" "$rule" <<'PY' || fail "ppocrv4_rec $rule: ranks/errors"
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from npuc_test import read_st
src = {n: np.frombuffer(b, np.float32).reshape(s) for n, d, s, b in read_st(sys.argv[2])[1]}
dec = {n: np.frombuffer(b, np.float32).reshape(s) for n, d, s, b in read_st(sys.argv[4])[1]}
rep = json.load(open(sys.argv[3]))
assert rep["schema"] == "npuc.report/1"
rule, val = sys.argv[5].split()
val = float(val)
seen = 0
for t in rep["tensors"]:
    if not t["name"].startswith("linear_") or not t["name"].endswith(".w_0"):
        assert t["action"] == "kept", t
        continue
    w = src[t["name"]].astype(np.float64)          # [in, out]: the matrix as stored
    s = np.linalg.svd(w, compute_uv=False)
    e = np.cumsum(s ** 2) / np.sum(s ** 2)
    tail = np.sqrt(np.maximum(1 - e, 0))
    want = int(np.argmax(e >= val - 1e-12)) + 1 if rule == "--energy" else int(np.argmax(tail <= val + 1e-12)) + 1
    x = t["extra"]
    assert x["rank"] == want, (t["name"], x["rank"], want)
    m, n = w.shape
    assert x["m"] == m and x["n"] == n and x["flops_before"] == 2 * m * n
    if t["action"] == "factored":
        seen += 1
        opt = np.sqrt(np.sum(s[want:] ** 2) / np.sum(s ** 2))
        assert abs(t["error"]["rel_fro"] / opt - 1) < 1e-4, (t["name"], t["error"]["rel_fro"], opt)
        got = np.linalg.norm(dec[t["name"]] - w) / np.linalg.norm(w)
        assert abs(got / opt - 1) < 1e-4, (t["name"], got, opt)
        assert abs(x["energy"] - e[want - 1]) < 1e-5
        assert x["flops_after"] == 2 * want * (m + n) and t["params_after"] == want * (m + n)
        assert x["solver"] == 1
    else:
        assert want * (m + n) >= m * n and "no saving" in t["note"], t
assert seen >= 5, seen
print(f"ppocrv4_rec {rule} {val}: {seen} Linear layers factored at numpy's ranks and optimal errors")
PY
        must_match "$T/pp.csv" '^name,'
        must_match "$T/pp.csv" 'linear_85\.w_0'
    done
else
    echo "no shared data: ppocrv4_rec checks skipped"
fi

# --- bad input: exit 2, one error line, nothing written
bad() {
    local pat=$1
    shift
    rm -f "$T/bad.safetensors"
    expect_rc 2 "$NPUC_BIN" lowrank "$@" -o "$T/bad.safetensors"
    [ "$(grep -c '^npuc: error: ' "$T/err")" -eq 1 ] || fail "expected one error line: $*"
    must_match "$T/err" "^npuc: error: .*$pat"
    must_be_empty "$T/out"
    [ ! -e "$T/bad.safetensors" ] || fail "output written despite the error: $*"
    if ls "$T"/bad.safetensors.* >/dev/null 2>&1; then fail "temporary files left: $(ls "$T"/bad.safetensors.*)"; fi
}
bad "--rank '0': must be a positive integer" --rank 0 "$cnn"
bad "--rank '-3': must be a positive integer" --rank -3 "$cnn"
bad "tensor 'features.0.weight': --rank 9 exceeds min\(m, n\) = 8 of its 8x27 matrix" \
    --rank 9 --include '^features\.0\.weight$' "$cnn"
bad "--energy '0': must be a number in \(0, 1\]" --energy 0 "$cnn"
bad "--energy '1.5': must be a number in \(0, 1\]" --energy 1.5 "$cnn"
bad "--energy 'nan': must be a number in \(0, 1\]" --energy nan "$cnn"
bad "--max-error '1': must be a number in \(0, 1\)" --max-error 1 "$cnn"
bad "--rank-ratio '0': must be a number in \(0, 1\]" --rank-ratio 0 "$cnn"
bad "tensor 'features.3.bias': a rank-1 tensor cannot be factored" --rank 2 --include '^features\.3\.bias$' "$cnn"
bad "tensor 'features.1.num_batches_tracked': a rank-0 tensor" --rank 2 --include 'num_batches' "$cnn"
bad "tensor 'features.6.weight': layout none has no output axis" --rank 2 --include '^features\.6\.weight$' \
    --layout '^features\.6\.weight$=none' "$cnn"
bad "choose a rank rule" "$cnn"
bad "--rank and --energy: give one rank rule" --rank 2 --energy 0.5 "$cnn"
bad "--solver 'svd': must be exact, randomized or auto" --rank 2 --solver svd "$cnn"
bad "--include 'nothing' matches no tensor" --rank 2 --include nothing "$cnn"
bad "--layer-rank 'features.3.weight=0': the rank after '=' must be an integer >= 1" \
    --rank 2 --layer-rank 'features.3.weight=0' "$cnn"
bad "--layer-rank 'features.3.weight=2.5': the rank after '=' must be an integer >= 1" \
    --rank 2 --layer-rank 'features.3.weight=2.5' "$cnn"
bad "--layer-rank 'features.3.weight=': expected REGEX=VALUE" --rank 2 --layer-rank 'features.3.weight=' "$cnn"
bad "--layer-rank 'features.3.weight': expected REGEX=VALUE" --rank 2 --layer-rank 'features.3.weight' "$cnn"
bad "--layer-rank '\(fc=3': invalid regular expression" --rank 2 --layer-rank '(fc=3' "$cnn"
bad "cnn_bn.safetensors: --layer-rank 'nothing=3' matches no tensor" --rank 2 --layer-rank 'nothing=3' "$cnn"
bad "tensor 'classifier.weight': --layer-rank 'classifier=11' asks for rank 11, above min\(m, n\) = 10 of its 10x16 matrix" \
    --energy 0.9 --layer-rank 'classifier=11' "$cnn"
bad "choose a rank rule" --layer-rank 'classifier=3' "$cnn"
# NaN weights (found while factoring, after other tensors were done).
"$PY" - "$cnn" "$T/nan.safetensors" <<'PY'
import json, struct, sys
blob = bytearray(open(sys.argv[1], "rb").read())
(n,) = struct.unpack_from("<Q", blob, 0)
h = json.loads(blob[8:8 + n])
a, _ = h["classifier.weight"]["data_offsets"]
struct.pack_into("<f", blob, 8 + n + a + 4 * 37, float("nan"))
open(sys.argv[2], "wb").write(blob)
PY
bad "nan\.safetensors: tensor 'classifier\.weight': 1 NaN/Inf value; low-rank factorisation needs finite weights" \
    --rank 2 "$T/nan.safetensors"
# An existing output without -f.
echo keep >"$T/exists.safetensors"
expect_rc 2 "$NPUC_BIN" lowrank --rank 2 "$cnn" -o "$T/exists.safetensors"
must_match "$T/err" "exists.safetensors: output exists \(use -f to overwrite\)"
[ "$(cat "$T/exists.safetensors")" = keep ] || fail "existing output was modified"
# An artifact is not factored again.
expect_rc 0 "$NPUC_BIN" lowrank -q --rank 2 "$cnn" -o "$T/a.safetensors" -f
expect_rc 2 "$NPUC_BIN" lowrank --rank 2 "$T/a.safetensors" -o "$T/aa.safetensors"
must_match "$T/err" "already an npuc artifact"
echo "bad inputs ok"

expect_rc 0 "$NPUC_BIN" lowrank --help
must_match "$T/out" '^Usage: npuc lowrank IN'
echo "ok"
