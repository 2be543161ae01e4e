#!/usr/bin/env bash
# Structured pruning never writes an inconsistent model (issue 14), checked
# against an independent reader (tests/cli/lib/consistency_check.py: names,
# the catalogs' bn_pairs and layouts, NumPy), never against npuc's own output:
#  - every sample and every ../shared/data model (both formats) pruned at several
#    sparsities, structured (filter; channel on the samples) and magnitude: each
#    output passes the independent check and `npuc validate`;
#  - the repro of a top-level nn.Sequential (0.weight, 1.running_mean, 3.weight...)
#    with --next 0=3 --next 3=6 --next 6=9: the BatchNorms shrink with their conv,
#    and the kept channels are the ones NumPy picks (L1 norm, ties to the lower
#    index removed first); the same without --next (nn.Sequential naming);
#  - a hand-broken file (a BatchNorm left at the old size, a bias; a consumer
#    along a stated edge) makes `validate` (a pass) exit 2 naming both tensors; a pass on it publishes nothing;
#  - a guessed consumer (Keras layer order, leaving a container by storage
#    order): listed one by one and not applied by default; --strict exits 2 and
#    writes nothing; --accept-guesses applies it (and the result is consistent).
source "$(dirname "$0")/lib/cli_test.bash"

"$PY" -c 'import numpy' 2>/dev/null || skip "numpy is not installed for $PY"
cc() { "$PY" "$TESTLIB/consistency_check.py" "$@"; }

# --- every model at several sparsities
models="$SAMPLES/cnn_bn.safetensors $SAMPLES/mlp_attn.safetensors"
have_h5py && models="$models $SAMPLES/cnn_bn_keras.h5"
if [ -n "$SHARED" ] && [ -d "$SHARED" ]; then
    for s in ppocr_mobile_v2_cls ppocrv4_rec nsfwjs_mobilenet_v2 silero_vad_v5 faceapi_tiny_face_detector \
        faceapi_face_expression; do
        # The quick passes (sanitizers): each shared model in one format, the
        # formats alternating from model to model.
        if keep_case 2; then
            [ -f "$SHARED/$s.safetensors" ] && models="$models $SHARED/$s.safetensors"
            is_quick && continue
        fi
        [ -f "$SHARED/$s.h5" ] && have_h5py && models="$models $SHARED/$s.h5"
    done
fi
runs=0
for src in $models; do
    ext="${src##*.}"
    stem="$(basename "$src" ".$ext")"
    cat=""
    [ -f "$(dirname "$src")/$stem.json" ] && case "$src" in "$SHARED"/*) cat="$(dirname "$src")/$stem.json" ;; esac
    variants="--structured=filter:0.3 --structured=filter:0.6 --structured=filter:0.6:--accept-guesses magnitude:0.5"
    # NPUC_TEST_QUICK (the sanitizer pass of .ci/run): one sparsity per mode.
    [ -n "${NPUC_TEST_QUICK:-}" ] && variants="--structured=filter:0.6:--accept-guesses magnitude:0.5"
    case "$src" in "$SAMPLES"/*) variants="$variants --structured=channel:0.5" ;; esac
    for v in $variants; do
        IFS=: read -r mode s extra <<<"$v"
        args=(prune -q --sparsity "$s")
        [ "$mode" != magnitude ] && args+=(--structured "${mode#--structured=}")
        [ -n "$extra" ] && args+=("$extra")
        # ppocr: the catalog states the BatchNorm pairs (--graph)
        [ -n "$cat" ] && [ "$mode" != magnitude ] && case "$stem" in ppocr*) args+=(--graph "$cat") ;; esac
        out="$T/o.$ext"
        rm -f "$out"
        expect_rc 0 "$NPUC_BIN" "${args[@]}" "$src" -o "$out" -f
        cc "$out" $cat || fail "$stem ${args[*]}: inconsistent output (independent check)"
        expect_rc 0 "$NPUC_BIN" validate "$out"
        runs=$((runs + 1))
    done
done
echo "consistent after $runs prune runs"

# --- repro: a top-level nn.Sequential
"$PY" - "$T/seq.safetensors" <<'PY'
import json, struct, sys
import numpy as np
rng = np.random.default_rng(5)
def conv(o, i, k): return (rng.standard_normal((o, i, k, k)) * rng.uniform(0.2, 2, (o, 1, 1, 1))).astype(np.float32)
def bn(c):
    return [("weight", rng.uniform(0.5, 2, c)), ("bias", rng.standard_normal(c)), ("running_mean", rng.standard_normal(c)),
            ("running_var", rng.uniform(0.5, 2, c))]
# Conv(3,16,3) BN ReLU Conv(16,32,3) BN ReLU Conv(32,24,1) ReLU Pool Conv(24,10,1)
ts = [("0.weight", conv(16, 3, 3)), ("0.bias", rng.standard_normal(16))]
ts += [("1." + n, v) for n, v in bn(16)] + [("1.num_batches_tracked", np.array([7], np.int64))]
ts += [("3.weight", conv(32, 16, 3)), ("3.bias", rng.standard_normal(32))]
ts += [("4." + n, v) for n, v in bn(32)] + [("4.num_batches_tracked", np.array([7], np.int64))]
ts += [("6.weight", conv(24, 32, 1)), ("6.bias", rng.standard_normal(24)), ("9.weight", conv(10, 24, 1)),
       ("9.bias", rng.standard_normal(10))]
hdr, off, blobs = {}, 0, []
for n, x in ts:
    x = np.ascontiguousarray(x if x.dtype == np.int64 else x.astype(np.float32))
    raw = x.tobytes()
    hdr[n] = {"dtype": "I64" if x.dtype == np.int64 else "F32", "shape": list(x.shape), "data_offsets": [off, off + len(raw)]}
    off += len(raw)
    blobs.append(raw)
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
seq_ref() { # seq_ref IN OUT S: shapes and kept channels against NumPy
    "$PY" - "$TESTLIB" "$@" <<'PY'
import math, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from npuc_test import read_st
def load(p):
    return {n: np.frombuffer(b, {"F32": np.float32, "I64": np.int64}[dt]).reshape(s) for n, dt, s, b in read_st(p)[1]}
a, b, S = load(sys.argv[2]), load(sys.argv[3]), float(sys.argv[4])
def keep(w):
    c = w.shape[0]
    k = c - math.floor(S * c)
    norms = np.abs(w.astype(np.float64)).reshape(c, -1).sum(1)
    order = np.lexsort((np.arange(c), norms))  # ascending norm, ties: lower index removed first
    return np.sort(order[c - k:])
k0, k3, k6 = keep(a["0.weight"]), keep(a["3.weight"]), keep(a["6.weight"])
want = {"0.weight": a["0.weight"][k0], "0.bias": a["0.bias"][k0], "3.weight": a["3.weight"][k3][:, k0],
        "3.bias": a["3.bias"][k3], "6.weight": a["6.weight"][k6][:, k3], "6.bias": a["6.bias"][k6],
        "9.weight": a["9.weight"][:, k6], "9.bias": a["9.bias"]}
for leaf in ("weight", "bias", "running_mean", "running_var"):
    want["1." + leaf] = a["1." + leaf][k0]
    want["4." + leaf] = a["4." + leaf][k3]
for n, w in want.items():
    assert b[n].shape == w.shape, (n, b[n].shape, w.shape)
    assert np.array_equal(b[n], w), n
assert b["1.running_mean"].shape == (len(k0),) and len(k0) == 12, b["1.running_mean"].shape
PY
}
expect_rc 0 "$NPUC_BIN" prune --structured filter --sparsity 0.25 --next 0=3 --next 3=6 --next 6=9 \
    "$T/seq.safetensors" -o "$T/seq_p.safetensors"
seq_ref "$T/seq.safetensors" "$T/seq_p.safetensors" 0.25 || fail "nn.Sequential repro: BatchNorms or kept channels differ from NumPy"
cc "$T/seq_p.safetensors" || fail "nn.Sequential repro: inconsistent"
expect_rc 0 "$NPUC_BIN" validate "$T/seq_p.safetensors"
expect_rc 0 "$NPUC_BIN" prune --structured filter --sparsity 0.25 "$T/seq.safetensors" -o "$T/seq_n.safetensors"
seq_ref "$T/seq.safetensors" "$T/seq_n.safetensors" 0.25 || fail "nn.Sequential by naming alone"
echo "nn.Sequential repro ok"

# --- hand-broken files: validate exits 2 naming both tensors; a pass publishes nothing
breakit() { # breakit PRUNED ORIG OUT NAME...: OUT is PRUNED with NAMEs taken from ORIG
    "$PY" - "$TESTLIB" "$@" <<'PY'
import json, struct, sys
sys.path.insert(0, sys.argv[1])
from npuc_test import read_st
ts = read_st(sys.argv[2])[1]
orig = {n: (dt, s, b) for n, dt, s, b in read_st(sys.argv[3])[1]}
hdr, off, blobs = {}, 0, []
for n, dt, s, b in ts:
    if n in sys.argv[5:]:
        dt, s, b = orig[n]
    hdr[n] = {"dtype": dt, "shape": list(s), "data_offsets": [off, off + len(b)]}
    off += len(b)
    blobs.append(b)
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[4], "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
}
breakit "$T/seq_p.safetensors" "$T/seq.safetensors" "$T/bn.safetensors" 1.weight 1.bias 1.running_mean 1.running_var
! cc "$T/bn.safetensors" 2>/dev/null || fail "the independent checker misses the broken BatchNorm"
expect_rc 2 "$NPUC_BIN" validate "$T/bn.safetensors"
must_match "$T/err" "'0\.weight' \[12,3,3,3\].* 12.*'1\.running_mean' \[16\].* 16"
[ "$(wc -l <"$T/err")" -eq 1 ] || fail "validate: more than one error line"
expect_rc 2 "$NPUC_BIN" validate --json "$T/bn.safetensors"
expect_rc 2 "$NPUC_BIN" quantize "$T/bn.safetensors" -o "$T/q.safetensors"
must_match "$T/err" "1\.running_mean"
[ ! -e "$T/q.safetensors" ] && [ ! -e "$T/q.safetensors.tmp" ] || fail "quantize published an inconsistent model"
breakit "$T/seq_p.safetensors" "$T/seq.safetensors" "$T/b2.safetensors" 4.running_var
expect_rc 2 "$NPUC_BIN" validate "$T/b2.safetensors"
must_match "$T/err" "'4\.weight' \[24\].*'4\.running_var' \[32\]"
# A plain consumer left at the old input size: numbering alone does not tell
# an nn.Sequential from an nn.ModuleList run side by side, so validate holds
# only stated edges to it (--next is not a validate flag: a pass checks it).
breakit "$T/seq_p.safetensors" "$T/seq.safetensors" "$T/b3.safetensors" 9.weight
expect_rc 0 "$NPUC_BIN" validate "$T/b3.safetensors"
expect_rc 2 "$NPUC_BIN" prune "$T/b3.safetensors" --structured=filter --sparsity 0.1 --next 6=9 -o "$T/b3p.safetensors"
must_match "$T/err" "'9\.weight' takes 24 input channels, '6' produces 18"
[ ! -e "$T/b3p.safetensors" ] || fail "prune published an inconsistent model"
breakit "$T/seq_p.safetensors" "$T/seq.safetensors" "$T/b4.safetensors" 3.bias
expect_rc 2 "$NPUC_BIN" validate "$T/b4.safetensors"
must_match "$T/err" "'3\.weight' \[24,12,3,3\].*'3\.bias' \[32\]"
echo "hand-broken files refused"

# --- guessed consumers
if have_h5py; then
    keras="$SAMPLES/cnn_bn_keras.h5"
    expect_rc 2 "$NPUC_BIN" prune --structured filter --sparsity 0.5 --strict "$keras" -o "$T/ks.h5"
    must_match "$T/err" "conv2d.*guess.*--strict.*--next"
    [ "$(wc -l <"$T/err")" -eq 1 ] || fail "--strict: more than one error line"
    [ ! -e "$T/ks.h5" ] && [ ! -e "$T/ks.h5.tmp" ] || fail "--strict wrote an output"
    expect_rc 0 "$NPUC_BIN" prune --structured filter --sparsity 0.5 --json "$keras" -o "$T/kd.h5"
    "$PY" - "$T/out" "$keras" "$T/kd.h5" "$TESTLIB" <<'PY' || fail "default: guesses listed one by one, not applied"
import json, sys
sys.path.insert(0, sys.argv[4])
from npuc_test import read_any
d = json.load(open(sys.argv[1]))
g = [w for w in d["warnings"] if "rest on a guess" in w]
assert len(g) >= 2 and all("not applied" in w and "--accept-guesses" in w and "layer_names order" in w for w in g), g
assert any("'conv2d_1/kernel'" in w for w in g) and any("'conv2d/kernel'" in w for w in g), g
a = {n: s for n, dt, s, b in read_any(sys.argv[2])[1]}
b = {n: s for n, dt, s, b in read_any(sys.argv[3])[1]}
assert a == b, "a guessed chain was applied"
PY
    expect_rc 0 "$NPUC_BIN" prune --structured filter --sparsity 0.5 --accept-guesses "$keras" -o "$T/ka.h5"
    must_match "$T/err" "applied by --accept-guesses"
    cc "$T/ka.h5" || fail "--accept-guesses: inconsistent"
fi
# storage order out of a container (features -> classifier): the same
expect_rc 2 "$NPUC_BIN" prune --structured filter --sparsity 0.5 --strict "$SAMPLES/cnn_bn.safetensors" -o "$T/cs.safetensors"
must_match "$T/err" "features\.3\.weight.*storage order.*--strict"
[ ! -e "$T/cs.safetensors" ] || fail "--strict wrote an output"
expect_rc 0 "$NPUC_BIN" prune --structured filter --sparsity 0.5 --no-guess "$SAMPLES/cnn_bn.safetensors" -o "$T/cn.safetensors"
"$PY" "$TESTLIB/prune_check.py" shapes "$T/cn.safetensors" features.0.weight=4,3,3,3 features.3.weight=16,4,3,3 \
    classifier.weight=10,16 || fail "--no-guess: the guessed chain was applied"
echo "guesses ok"
