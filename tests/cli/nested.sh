#!/usr/bin/env bash
# Nested artifact entries (issue 8): `npuc lowrank` then `npuc quantize`.
#  - quantize accepts a lowrank artifact: the factors <W>.lr_a/.lr_b get
#    "quant" entries of their own, the "lowrank" entry for W is carried over
#    unchanged; both factors of the first/last layer stay at 8 bits below 8;
#  - decompress gives W back under its name, dtype and shape: checked against
#    numpy, which reads the stored codes and scales with an independent
#    reader, dequantizes them (docs/artifact.md), multiplies the factors and
#    rounds to the dtype; nothing of the factors is left;
#  - safetensors and HDF5 (Keras layer groups), int8 per channel and int4
#    groups of 32 with --quantize-all, and ppocrv4_rec from ../shared/data
#    when present; --fake-quant decompresses to the same bytes as the
#    quantized artifact;
#  - `npuc report` counts W once, with the bytes of all nested parts;
#  - `npuc run samples/recipes/lowrank_int8.yaml` on a low-rank model equals
#    `npuc lowrank` then `npuc quantize` (same tensors byte for byte, same
#    metadata but the recipe's provenance); artifacts are identical for -j 1
#    and -j 2;
#  - hostile descriptions (a cycle, a nested part missing, an inner entry of
#    the wrong shape or without parts, a part of two entries, nesting too
#    deep, an unknown inner encoding) fail with one error line, exit 2,
#    nothing written; report fails too, or for the unknown encoding lists
#    the tensor without figures and says which encoding it lacks.
source "$(dirname "$0")/lib/cli_test.bash"

mlp="$SAMPLES/mlp_attn.safetensors"
keras="$SAMPLES/cnn_bn_keras.h5"
recipe="$NPUC_SRC/samples/recipes/lowrank_int8.yaml"
"$PY" -c 'import numpy' 2>/dev/null || skip "the Python at $PY has no numpy"

# check_nested SRC LR ART DEC [BITS[:GROUP]]: the independent checks of one
# lowrank -> quantize -> decompress round trip.
check_nested() {
    "$PY" - "$TESTLIB" "$@" <<'PY'
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from npuc_test import read_any
NP = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I8": np.int8, "U8": np.uint8,
      "I64": np.int64}
src_p, lr_p, art_p, dec_p = sys.argv[2:6]
want = sys.argv[6] if len(sys.argv) > 6 else ""

def load(p):
    meta, ts = read_any(p)
    return meta, {n: (d, s, b) for n, d, s, b in ts}

def arr(t):
    d, s, b = t
    return np.frombuffer(b, dtype=NP[d]).reshape(s)

_, src = load(src_p)
lr_meta, _ = load(lr_p)
meta, art = load(art_p)
_, dec = load(dec_p)
lr_desc = json.loads(lr_meta["npuc"])["tensors"]
desc = json.loads(meta["npuc"])["tensors"]

def unpack(b, n, bits, sym):
    bitv = np.unpackbits(np.frombuffer(b, np.uint8), bitorder="little")[: n * bits]
    v = (bitv.reshape(n, bits).astype(np.int64) << np.arange(bits)).sum(axis=1)
    if sym:
        v = np.where(v >= 1 << (bits - 1), v - (1 << bits), v)
    return v

def dequant(name, e):
    """docs/artifact.md: w' = (float)(q - zp) * scale of the value's group."""
    shape, n = e["shape"], int(np.prod(e["shape"]))
    codes = art[e["codes"]]
    assert e["codes"] == name and e["scale"] == name + ".scale", e
    if e["packed"]:
        q = unpack(codes[2], n, e["bits"], e["symmetric"])
    else:
        q = arr(codes).reshape(-1).astype(np.int64)
    outer, C, inner = e["view"]
    assert outer * C * inner == n, e
    if e["granularity"] != "tensor" and e["layout"] != "hwim":  # the view is the layout's channel axis
        ax = e["axis"]
        assert C == shape[ax] and outer == int(np.prod(shape[:ax], dtype=np.int64)), e
    sc = arr(art[e["scale"]]).reshape(-1).astype(np.float32)
    zp = (arr(art[e["zero_point"]]).reshape(-1).astype(np.int64) if e["zero_point"]
          else np.zeros(sc.size, np.int64))
    q3 = q.reshape(outer, C, inner)
    j = (np.arange(outer)[:, None] * inner + np.arange(inner)[None, :])   # sequence number [outer, inner]
    per = outer * inner
    if e["granularity"] == "tensor":
        idx = np.zeros((outer, C, inner), np.int64)
    elif e["granularity"] == "channel":
        idx = np.broadcast_to(np.arange(C)[None, :, None], (outer, C, inner))
    else:
        G = e["group_size"]
        gpc = -(-per // G)
        assert sc.size == C * gpc, (name, sc.size, C, gpc)
        idx = np.arange(C)[None, :, None] * gpc + (j // G)[:, None, :]
    w = (q3 - zp[idx]).astype(np.float32) * sc[idx]
    assert w.dtype == np.float32
    return w.reshape(shape)

def factor(name):
    """A lowrank part as the tensor its entry describes, in its dtype."""
    e = desc.get(name)
    if e is None:
        t = art[name]
        return arr(t), t[0]
    if e["encoding"] == "fake_quant":
        assert "parts" not in e and art[name][0] == e["dtype"], e
        return arr(art[name]), e["dtype"]
    assert e["encoding"] == "quant", e
    return dequant(name, e).astype(NP[e["dtype"]]), e["dtype"]

assert list(dec) == list(src), (list(dec), list(src))
nested = 0
for name, (d, s, b) in src.items():
    assert dec[name][0] == d and dec[name][1] == s, (name, dec[name][:2], (d, s))
    e = desc.get(name)
    if e is None:
        assert dec[name][2] == b and art[name][2] == b, f"{name}: untouched but changed"
        continue
    if e["encoding"] == "quant":           # a tensor lowrank left dense
        ref = dequant(name, e).astype(NP[d])
        assert np.array_equal(arr(dec[name]), ref), name
        continue
    if e["encoding"] == "fake_quant":      # the same, with --fake-quant
        assert dec[name] == art[name], name
        continue
    assert e["encoding"] == "lowrank" and e == lr_desc[name], (name, e, lr_desc.get(name))
    assert name not in art, name
    pa, pb = e["parts"]
    a, da = factor(pa)
    bb, db = factor(pb)
    assert da == d and db == d, (name, da, db)
    nested += pa in desc and pb in desc
    r = e["rank"]
    m, n = e["matrix"]
    if e["layout"] in ("oi", "oihw"):
        prod = a.astype(np.float64).reshape(m, r) @ bb.astype(np.float64).reshape(r, n)
    else:
        prod = bb.astype(np.float64).reshape(m, r) @ a.astype(np.float64).reshape(r, n)
    ref = prod.reshape(s)
    got = arr(dec[name]).astype(np.float64)
    # npuc multiplies in float32, then rounds to the dtype: a few ulps of the
    # dtype, or float32 rounding of the dot products.
    eps = float(np.finfo(NP[d]).eps)
    tol = 2 * eps * np.abs(ref) + 1e-5 * np.abs(ref).max()
    bad = np.abs(got - ref) > tol
    assert not bad.any(), (name, float(np.abs(got - ref).max()), float(np.abs(ref).max()))
    for p in (pa, pb):
        for suffix in ("", ".scale", ".zero_point"):
            assert p + suffix not in dec, f"{p + suffix} left in the decompressed file"
    if want and pa in desc:
        bits, _, group = want.partition(":")
        for p in (pa, pb):
            q = desc[p]
            assert q["encoding"] == "quant" and q["bits"] == int(bits), (p, q)
            assert q["granularity"] == ("group" if group else "channel"), (p, q)
            assert q["packed"] == (int(bits) < 8), (p, q)
            if group:
                assert q["group_size"] == int(group), (p, q)
assert nested > 0, "no lowrank entry with quantized factors"
print(f"{art_p}: {nested} nested entries checked")
PY
}

# --- safetensors and HDF5, int8 per channel and int4 g32 --quantize-all
"$PY" -c 'import h5py' 2>/dev/null && have_h5=1 || have_h5=0
for src in "$mlp" "$keras"; do
    ext="${src##*.}"
    rank=4
    [ "$ext" = h5 ] && { rank=2; [ "$have_h5" = 1 ] || { echo "no h5py: HDF5 round trips skipped"; continue; }; }
    expect_rc 0 "$NPUC_BIN" lowrank -q --rank "$rank" "$src" -o "$T/lr.$ext"
    expect_rc 0 "$NPUC_BIN" quantize -q "$T/lr.$ext" -o "$T/q8.$ext"
    must_match "$T/out" '\.lr_a .* int8/ch[0-9]+ '
    expect_rc 0 "$NPUC_BIN" decompress -q "$T/q8.$ext" -o "$T/d8.$ext"
    check_nested "$src" "$T/lr.$ext" "$T/q8.$ext" "$T/d8.$ext" 8
    expect_rc 0 "$NPUC_BIN" quantize -q --bits 4 --group-size 32 --quantize-all "$T/lr.$ext" -o "$T/q4.$ext"
    expect_rc 0 "$NPUC_BIN" decompress -q "$T/q4.$ext" -o "$T/d4.$ext"
    check_nested "$src" "$T/lr.$ext" "$T/q4.$ext" "$T/d4.$ext" 4:32

    # --fake-quant: the factors become fake_quant entries; decompressing
    # gives exactly the bytes the quantized artifact decompresses to.
    expect_rc 0 "$NPUC_BIN" quantize -q --fake-quant "$T/lr.$ext" -o "$T/fq.$ext"
    expect_rc 0 "$NPUC_BIN" decompress -q "$T/fq.$ext" -o "$T/dfq.$ext"
    check_nested "$src" "$T/lr.$ext" "$T/fq.$ext" "$T/dfq.$ext"
    npuc_py compare "$T/d8.$ext" "$T/dfq.$ext" || fail "$ext: --fake-quant and quant decompress differently"

    # Other readers: info, validate, report (W counted once, all nested bytes).
    expect_rc 0 "$NPUC_BIN" info "$T/q8.$ext"
    expect_rc 0 "$NPUC_BIN" validate --deep "$T/q8.$ext"
    expect_rc 0 "$NPUC_BIN" report -q --format json "$src" "$T/q8.$ext"
    "$PY" - "$TESTLIB" "$T/out" "$T/q8.$ext" "$src" <<'PY' || fail "$ext: report of the nested artifact"
import json, sys
sys.path.insert(0, sys.argv[1])
from npuc_test import read_any
doc = json.load(open(sys.argv[2]))
meta, ts = read_any(sys.argv[3])
_, src = read_any(sys.argv[4])
size = {n: len(b) for n, _, _, b in ts}
desc = json.loads(meta["npuc"])["tensors"]
recs = {t["name"]: t for t in doc["tensors"]}
assert sorted(recs) == sorted(n for n, *_ in src), sorted(recs)
k = 0
for name, e in desc.items():
    if e["encoding"] != "lowrank":
        continue
    parts = [q for p in e["parts"] for q in desc[p]["parts"]]
    r = recs[name]
    ch = [f"int8/ch{desc[p]['view'][1]}" for p in e["parts"]]  # per-channel schemes show their channel count
    assert r["scheme"] == f"r={e['rank']}+" + (ch[0] if ch[0] == ch[1] else ",".join(ch)), r
    assert r["bytes_after"] == sum(size[p] for p in parts), (r, parts)
    k += 1
assert k > 0
PY
done
echo "round trips ok"

# --- a real model when ../shared/data has it: Paddle [in, out] Linear layers
# (io: the product is lr_b x lr_a) and OIHW convs, int4 groups
ocr="${SHARED:+$SHARED/ppocrv4_rec.safetensors}"
if [ -n "$ocr" ] && [ -f "$ocr" ]; then
    expect_rc 0 "$NPUC_BIN" lowrank -q --layout '^linear_[0-9]+\.w_0$=io' --rank-ratio 0.25 "$ocr" -o "$T/ocr_lr.safetensors"
    expect_rc 0 "$NPUC_BIN" quantize -q --bits 4 --group-size 32 --quantize-all "$T/ocr_lr.safetensors" -o "$T/ocr_q.safetensors"
    expect_rc 0 "$NPUC_BIN" decompress -q "$T/ocr_q.safetensors" -o "$T/ocr_d.safetensors"
    check_nested "$ocr" "$T/ocr_lr.safetensors" "$T/ocr_q.safetensors" "$T/ocr_d.safetensors" 4:32
else
    echo "no ppocrv4_rec in the shared data: real-model round trip skipped"
fi

# --- the edge rule: both factors of the embedding at 8 bits (mlp_attn names no
# output head, and names decide alone, so mlp.fc2 is an ordinary layer: issue 14)
expect_rc 0 "$NPUC_BIN" quantize --json --bits 4 "$T/lr.safetensors" -o "$T/ql.safetensors"
"$PY" - "$T/out" <<'PY' || fail "first/last layer factors"
import json, sys
doc = json.load(open(sys.argv[1]))
bits = {t["name"]: t["extra"].get("bits") for t in doc["tensors"] if t["action"] == "quantized"}
for n in ("embed.weight.lr_a", "embed.weight.lr_b"):
    assert bits[n] == 8, (n, bits)
for n in ("attn.q_proj.weight.lr_a", "attn.q_proj.weight.lr_b", "mlp.fc1.weight.lr_b", "mlp.fc2.weight.lr_a",
          "mlp.fc2.weight.lr_b"):
    assert bits[n] == 4, (n, bits)
PY
# --layer-bits regexes see the factor names.
expect_rc 0 "$NPUC_BIN" quantize -q --json --bits 4 --layer-bits 'fc1\.weight\.lr_a$=6' "$T/lr.safetensors" -o "$T/qb.safetensors"
"$PY" -c 'import json,sys; b={t["name"]: t["extra"].get("bits") for t in json.load(open(sys.argv[1]))["tensors"]}; assert b["mlp.fc1.weight.lr_a"] == 6 and b["mlp.fc1.weight.lr_b"] == 4, b' "$T/out" ||
    fail "--layer-bits on a factor"
echo "selection ok"

# --- -j 1 and -j 2 give the same bytes (quantize and decompress)
expect_rc 0 "$NPUC_BIN" quantize -q -j 1 --bits 4 --group-size 32 "$T/lr.safetensors" -o "$T/j1.safetensors"
expect_rc 0 "$NPUC_BIN" quantize -q -j 2 --bits 4 --group-size 32 "$T/lr.safetensors" -o "$T/j2.safetensors"
cmp "$T/j1.safetensors" "$T/j2.safetensors" || fail "quantize: -j 1 and -j 2 differ"
expect_rc 0 "$NPUC_BIN" decompress -q -j 1 "$T/j1.safetensors" -o "$T/dj1.safetensors"
expect_rc 0 "$NPUC_BIN" decompress -q -j 2 "$T/j1.safetensors" -o "$T/dj2.safetensors"
cmp "$T/dj1.safetensors" "$T/dj2.safetensors" || fail "decompress: -j 1 and -j 2 differ"
echo "threads ok"

# --- the recipe on a model lowrank really factors at 95% energy
"$PY" - "$T/lrm.safetensors" <<'PY'
import json, struct, sys
import numpy as np
rng = np.random.default_rng(7)
def lowrank(m, n, r):  # rank r plus a little noise: 95% energy needs rank <= r
    return rng.standard_normal((m, r)) @ rng.standard_normal((r, n)) / np.sqrt(r * n) \
        + 1e-3 * rng.standard_normal((m, n))
ts = [("embed.weight", "F32", lowrank(96, 48, 3)),
      ("conv.weight", "F32", lowrank(32, 16 * 9, 4).reshape(32, 16, 3, 3)),
      ("conv.bias", "F32", rng.standard_normal(32) * 0.1),
      ("fc1.weight", "F32", lowrank(128, 96, 5)),
      ("fc1.bias", "F32", rng.standard_normal(128) * 0.1),
      ("fc2.weight", "F16", lowrank(64, 128, 6)),
      ("fc2.bias", "F16", rng.standard_normal(64) * 0.1),
      ("head.weight", "F32", rng.standard_normal((10, 64)) * 0.1)]
hdr, blob = {}, b""
for name, dt, a in ts:
    b = np.ascontiguousarray(a.astype({"F32": np.float32, "F16": np.float16}[dt])).tobytes()
    hdr[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [len(blob), len(blob) + len(b)]}
    blob += b
hdr["__metadata__"] = {"format": "pt"}
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + blob)
PY
expect_rc 0 "$NPUC_BIN" run -q -j 1 "$recipe" "$T/lrm.safetensors" -o "$T/run1.safetensors"
expect_rc 0 "$NPUC_BIN" run -q -j 2 "$recipe" "$T/lrm.safetensors" -o "$T/run2.safetensors"
cmp "$T/run1.safetensors" "$T/run2.safetensors" || fail "npuc run: -j 1 and -j 2 differ"
# The recipe's steps, one by one (its 'embed' override is lowrank's --exclude).
expect_rc 0 "$NPUC_BIN" lowrank -q --energy 0.95 --round-to 8 --solver auto --exclude embed \
    "$T/lrm.safetensors" -o "$T/step1.safetensors"
expect_rc 0 "$NPUC_BIN" quantize -q --bits 8 "$T/step1.safetensors" -o "$T/step2.safetensors"
npuc_py compare "$T/run1.safetensors" "$T/step2.safetensors" || fail "recipe and its steps hold different tensors"
npuc_py meta "$T/run1.safetensors" >"$T/m1.json"
npuc_py meta "$T/step2.safetensors" >"$T/m2.json"
"$PY" - "$T/m1.json" "$T/m2.json" <<'PY' || fail "recipe and its steps: metadata differs beyond provenance"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for k in ("npuc.recipe", "npuc.recipe_sha256", "npuc.input_sha256"):
    a.pop(k, None); b.pop(k, None)
assert a == b, (a, b)
t = json.loads(a["npuc"])["tensors"]
assert [n for n in t if t[n]["encoding"] == "lowrank"] == ["conv.weight", "fc1.weight", "fc2.weight"], list(t)
PY
expect_rc 0 "$NPUC_BIN" decompress -q "$T/run1.safetensors" -o "$T/drun.safetensors"
check_nested "$T/lrm.safetensors" "$T/step1.safetensors" "$T/run1.safetensors" "$T/drun.safetensors" 8
echo "recipe ok"

# --- a nested artifact is not quantized again
expect_rc 2 "$NPUC_BIN" quantize "$T/q8.safetensors" -o "$T/never.safetensors"
must_match "$T/err" "^npuc: error: .*q8\\.safetensors: already an npuc artifact \\(tensor '[^']+' is encoded\\); decompress it first$"
[ ! -e "$T/never.safetensors" ] || fail "quantize of a quantized artifact wrote its output"

# --- hostile descriptions: exit 2, one line naming file and tensor, nothing written
# edit SRC DST CASE: rewrites the "npuc" description of a safetensors or HDF5
# artifact (data untouched).
edit() {
    "$PY" - "$@" <<'PY'
import json, struct, sys
src, dst, case = sys.argv[1:4]
h5 = open(src, "rb").read(8) == b"\x89HDF\r\n\x1a\n"
if h5:
    import h5py, shutil
    shutil.copy(src, dst)
    f = h5py.File(dst, "r+")
    s = f.attrs["npuc"]
    art = json.loads(s.decode() if isinstance(s, bytes) else s)
else:
    blob = open(src, "rb").read()
    (n,) = struct.unpack_from("<Q", blob, 0)
    hdr = json.loads(blob[8:8 + n])
    art = json.loads(hdr["__metadata__"]["npuc"])
T = art["tensors"]
W = next(k for k, e in T.items() if e["encoding"] == "lowrank")
A = W + ".lr_a"
V = next(k for k, e in T.items() if e["encoding"] == "lowrank" and k != W)
if case == "cycle":            # W.lr_a's entry names W as a part: W -> W.lr_a -> W
    T[A]["parts"].append(W)
elif case == "missing":        # the scale of a nested entry is not stored
    T[A]["scale"] = T[A]["parts"][1] = A + ".nowhere"
elif case == "orphan":         # a factor no entry describes and no tensor stores
    T[W]["parts"][0] = W + ".lr_x"
elif case == "shape":          # the inner entry does not have the factor's shape
    T[A]["shape"] = T[A]["shape"][::-1]
elif case == "twice":          # one nested entry claimed by two lowrank entries
    T[V]["parts"][0] = A
elif case == "deep":           # W -> W.lr_a -> V -> V.lr_a: three levels
    T[A]["parts"].append(V)
elif case == "noparts":        # a nested quant entry without parts
    del T[A]["parts"]
elif case == "unknown":        # a nested encoding this npuc does not know
    T[A]["encoding"] = "quant9"
s = json.dumps(art, separators=(",", ":"))
if h5:
    f.attrs["npuc"] = s
    f.close()
else:
    hdr["__metadata__"]["npuc"] = s
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    open(dst, "wb").write(struct.pack("<Q", len(h)) + h + blob[8 + n:])
PY
}

hostile() { # FILE CASE PATTERN [REPORT_RC]
    local f=$1 case=$2 pat=$3 rrc=${4:-2} ext="${1##*.}"
    edit "$f" "$T/bad_$case.$ext" "$case"
    expect_rc 2 "$NPUC_BIN" decompress "$T/bad_$case.$ext" -o "$T/bad_out.$ext"
    must_match "$T/err" "^npuc: error: .*bad_$case\\.$ext: tensor '[^']+': $pat"
    [ "$(wc -l <"$T/err")" -eq 1 ] || fail "$case: more than one line on stderr"
    [ ! -e "$T/bad_out.$ext" ] || fail "$case: decompress wrote its output"
    ! ls "$T"/bad_out.* >/dev/null 2>&1 || fail "$case: a temporary file is left"
    expect_rc "$rrc" "$NPUC_BIN" report -q "$src_of_bad" "$T/bad_$case.$ext"
    if [ "$rrc" = 2 ]; then
        must_match "$T/err" "^npuc: error: .*bad_$case\\.$ext: tensor '[^']+': $pat"
    fi
}

src_of_bad="$mlp"
hostile "$T/q8.safetensors" cycle "artifact entries are parts of each other in a cycle$"
hostile "$T/q8.safetensors" missing "its part '[^']+\\.lr_a\\.nowhere' is missing$"
hostile "$T/q8.safetensors" orphan "its part '[^']+\\.lr_x' is missing$"
hostile "$T/q8.safetensors" shape "part '[^']+\\.lr_a' is described as F16 \\[4,[0-9]+\\], the entry implies a float \\[[0-9]+,4\\]$"
hostile "$T/q8.safetensors" twice "part '[^']+\\.lr_a' belongs to two entries$"
hostile "$T/q8.safetensors" deep "artifact entries nest more than 2 deep$"
# An unknown inner encoding: decompress refuses, report lists W without figures.
hostile "$T/q8.safetensors" noparts "artifact entry has no parts$"
hostile "$T/q8.safetensors" unknown "part '[^']+\\.lr_a': unknown encoding 'quant9' \\(newer npuc\\?\\)$" 0
must_match "$T/out" "^warning: tensor '[^']+': encoding 'quant9' is unknown to npuc "
if [ "$have_h5" = 1 ]; then
    src_of_bad="$keras"
    hostile "$T/q8.h5" cycle "artifact entries are parts of each other in a cycle$"
    hostile "$T/q8.h5" shape "part '[^']+\\.lr_a' is described as F32 \\[[0-9,]+\\], the entry implies a float \\[[0-9,]+\\]$"
fi
echo "hostile ok"
