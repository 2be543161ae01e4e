# gates_roles.sh - issue 14, items 4, 6 and 7:
#   - the 8-bit edge rule from names: an HF-style checkpoint stored
#     alphabetically keeps exactly model.embed_tokens and lm_head at 8 bits
#     under --bits 4, whole and split into two shards quantized separately
#     (checked from the artifact's own header: 8-bit codes are I8 of the
#     original shape, 4-bit ones packed U8 of half the elements);
#   - quality gates: --min-sqnr / --min-layer-sqnr exit 3 with no artifact and
#     no temporary file, the --report file and the stdout table still written;
#     the threshold is checked against a NumPy SQNR of a passing run's
#     decompressed output; a 2-bit run without a gate warns;
#   - optional recipe overrides: a note and exit 0; a plain one still fails;
#     the sample recipes over the samples + ppocrv4_rec in a batch all pass.
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"
"$PY" -c 'import numpy' 2>/dev/null || skip "no numpy"

# --- an HF-style checkpoint, stored alphabetically as save_file does
"$PY" - "$T" <<'PY'
import json, struct, sys
import numpy as np
rng = np.random.default_rng(3)
d, v = 32, 64
t = {"lm_head.weight": (v, d), "model.embed_tokens.weight": (v, d), "model.norm.weight": (d,)}
for n in range(2):
    for p in ("q_proj", "k_proj", "v_proj", "o_proj"):
        t[f"model.layers.{n}.self_attn.{p}.weight"] = (d, d)
    for p, s in (("gate_proj", (2 * d, d)), ("up_proj", (2 * d, d)), ("down_proj", (d, 2 * d))):
        t[f"model.layers.{n}.mlp.{p}.weight"] = s
    t[f"model.layers.{n}.input_layernorm.weight"] = (d,)
arr = {k: rng.standard_normal(s).astype(np.float32) for k, s in t.items()}
def save(path, names):
    names = sorted(names)
    hdr, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for k in names:
        b = arr[k].tobytes()
        hdr[k] = {"dtype": "F32", "shape": list(arr[k].shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
save(sys.argv[1] + "/hf.safetensors", arr)
one = [k for k in arr if k.startswith("model.embed_tokens") or k.startswith("model.layers.0.")]
save(sys.argv[1] + "/hf-00001-of-00002.safetensors", one)
save(sys.argv[1] + "/hf-00002-of-00002.safetensors", [k for k in arr if k not in one])
PY
# eight_bit FILE: the names whose codes are 8-bit, from the safetensors header.
eight_bit() {
    "$PY" - "$1" <<'PY'
import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
meta = json.loads(h["__metadata__"]["npuc"])["tensors"]
out = []
for name in meta:
    e = h[name]
    if e["dtype"] in ("I8", "U8") and len(e["shape"]) == 2: out.append(name)   # unpacked: 8-bit codes
    else: assert e["dtype"] == "U8" and len(e["shape"]) == 1, (name, e)       # packed 4-bit
print(" ".join(sorted(out)))
PY
}
expect_rc 0 "$NPUC_BIN" quantize --bits 4 "$T/hf.safetensors" -o "$T/hf.q4.safetensors"
must_match "$T/out" 'lm_head.weight .*kept at 8 bits: output head \(name lm_head\)'
must_match "$T/out" 'model.embed_tokens.weight .*kept at 8 bits: embedding \(name embed_tokens\)'
[ "$(eight_bit "$T/hf.q4.safetensors")" = "lm_head.weight model.embed_tokens.weight" ] ||
    fail "whole checkpoint: 8-bit tensors are '$(eight_bit "$T/hf.q4.safetensors")'"
expect_rc 0 "$NPUC_BIN" quantize -q --bits 4 "$T/hf-00001-of-00002.safetensors" -o "$T/s1.safetensors"
expect_rc 0 "$NPUC_BIN" quantize -q --bits 4 "$T/hf-00002-of-00002.safetensors" -o "$T/s2.safetensors"
[ "$(eight_bit "$T/s1.safetensors")" = "model.embed_tokens.weight" ] || fail "shard 1: $(eight_bit "$T/s1.safetensors")"
[ "$(eight_bit "$T/s2.safetensors")" = "lm_head.weight" ] || fail "shard 2: $(eight_bit "$T/s2.safetensors")"
# Storage order alone is a guess: --strict refuses it before writing.
"$PY" - "$T" <<'PY'
import json, struct, sys
import numpy as np
a = {k: np.ones((8, 8), np.float32) * (i + 1) for i, k in enumerate(["zeta.weight", "alpha.weight", "mid.weight"])}
hdr, off, blobs = {}, 0, []
for k, x in a.items():
    hdr[k] = {"dtype": "F32", "shape": [8, 8], "data_offsets": [off, off + x.nbytes]}; off += x.nbytes; blobs.append(x.tobytes())
h = json.dumps(hdr).encode()
open(sys.argv[1] + "/ord.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
expect_rc 0 "$NPUC_BIN" quantize --bits 4 "$T/ord.safetensors" -o "$T/ord.q.safetensors"
must_match "$T/err" 'by storage order alone, a guess'
expect_rc 2 "$NPUC_BIN" quantize --strict --bits 4 "$T/ord.safetensors" -o "$T/ord.s.safetensors"
must_match "$T/err" "tensor 'zeta.weight'.*--layer-bits"
[ ! -e "$T/ord.s.safetensors" ] || fail "--strict wrote an output"
echo "edge roles ok"

# --- quality gates
cnn="$SAMPLES/cnn_bn.safetensors"
expect_rc 0 "$NPUC_BIN" quantize --bits 2 "$cnn" -o "$T/q2.safetensors"
must_match "$T/err" 'warning: weighted SQNR [0-9.]+ dB is below 10 dB'
expect_rc 0 "$NPUC_BIN" decompress -q "$T/q2.safetensors" -o "$T/d2.safetensors"
db=$("$PY" - "$cnn" "$T/d2.safetensors" <<'PY'
import json, struct, sys
import numpy as np
def load(p):
    f = open(p, "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); base = 8 + n
    raw = open(p, "rb").read()
    return {k: np.frombuffer(raw[base + v["data_offsets"][0]: base + v["data_offsets"][1]], np.float32).reshape(v["shape"])
            for k, v in h.items() if k != "__metadata__" and v["dtype"] == "F32"}
a, b = load(sys.argv[1]), load(sys.argv[2])
w2 = e2 = 0.0
worst = 1e9
for k, x in a.items():
    if x.ndim < 2: continue
    e = (x.astype(np.float64) - b[k]) ** 2
    w2 += float((x.astype(np.float64) ** 2).sum()); e2 += float(e.sum())
    worst = min(worst, 10 * np.log10((x.astype(np.float64) ** 2).sum() / e.sum()))
print("%.3f %.3f" % (10 * np.log10(w2 / e2), worst))
PY
)
w=${db% *}; l=${db#* }
echo "numpy: weighted $w dB, worst tensor $l dB"
above=$("$PY" -c "print(round($w + 0.5, 2))"); below=$("$PY" -c "print(round($w - 0.5, 2))")
labove=$("$PY" -c "print(round($l + 0.5, 2))"); lbelow=$("$PY" -c "print(round($l - 0.5, 2))")
# The issue's own case: --min-sqnr 10 on a 2-bit quantization (NumPy says
# the weighted SQNR is under 10 dB).
"$PY" -c "import sys; sys.exit(0 if $w < 10 else 1)" || fail "2-bit weighted SQNR $w dB is not under 10"
gates=("--min-sqnr 10" "--min-sqnr $above" "--min-layer-sqnr $labove")
for gate in "${gates[@]}"; do
    rm -f "$T/g.safetensors" "$T/g.json"
    expect_rc 3 "$NPUC_BIN" quantize --bits 2 $gate --report "$T/g.json" "$cnn" -o "$T/g.safetensors"
    [ ! -e "$T/g.safetensors" ] || fail "$gate: the artifact was published"
    ls "$T" | grep -q '\.tmp$' && fail "$gate: a temporary file was left"
    must_match "$T/out" '^total: 21 tensors'
    must_match "$T/err" 'error: .*quality gate failed: .*(weighted SQNR|tensor .features\.3\.weight.)'
    "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); assert any('quality gate failed' in x for x in d['warnings']), d['warnings']" "$T/g.json" ||
        fail "$gate: the report does not say the gate failed"
done
expect_rc 0 "$NPUC_BIN" quantize --bits 2 --min-sqnr "$below" --min-layer-sqnr "$lbelow" "$cnn" -o "$T/g.safetensors"
[ -e "$T/g.safetensors" ] || fail "a passing gate published nothing"
must_not_match "$T/err" 'probably damaged'
# The same gate in a recipe run and a batch.
printf 'steps:\n  - quantize: {bits: 2}\n' > "$T/q2.yaml"
expect_rc 3 "$NPUC_BIN" run "$T/q2.yaml" "$cnn" -o "$T/r.safetensors" --min-sqnr "$above" --report "$T/r.json"
[ ! -e "$T/r.safetensors" ] && [ -e "$T/r.json" ] || fail "run: artifact published or report missing"
ls "$T" | grep -q 'tmp$' && fail "run: a temporary file was left"
mkdir -p "$T/zoo" && cp "$cnn" "$T/zoo/"
expect_rc 1 "$NPUC_BIN" batch "$T/q2.yaml" -i "$T/zoo" -o "$T/bout" --min-sqnr "$above" --summary "$T/b.json"
"$PY" -c "import json,sys; f=json.load(open(sys.argv[1]))['files']; assert f[0]['exit_code']==3 and f[0]['status']=='failed', f" "$T/b.json" ||
    fail "batch: the gated file is not exit_code 3"
echo "gates ok"

# --- optional overrides
printf 'steps:\n  - quantize:\n      bits: 4\n      overrides:\n        - {match: %s, bits: 8, optional: true}\n' "'^nothing\$'" > "$T/opt.yaml"
expect_rc 0 "$NPUC_BIN" run "$T/opt.yaml" "$cnn" -o "$T/o.safetensors"
must_match "$T/err" "^npuc: warning: .*optional override '\^nothing\\$' \(.*opt.yaml:5:[0-9]+\) matches no tensor: not applied"
sed 's/, optional: true//' "$T/opt.yaml" > "$T/req.yaml"
expect_rc 2 "$NPUC_BIN" run "$T/req.yaml" "$cnn" -o "$T/p.safetensors"
must_match "$T/err" "override '\^nothing\\$' matches no tensor"
if [ -n "$SHARED" ] && [ -f "$SHARED/ppocrv4_rec.safetensors" ]; then
    printf '%s\n' "$SAMPLES"/*.safetensors "$SAMPLES"/*.h5 "$(cd "$SHARED" && pwd -P)/ppocrv4_rec.safetensors" > "$T/list"
    for r in "$SAMPLES"/recipes/*.yaml; do
        rm -rf "$T/zo"
        expect_rc 0 "$NPUC_BIN" batch -q "$r" -i "$T/list" -o "$T/zo" -j 2 --summary "$T/zs.json"
        "$PY" -c "import json,sys; c=json.load(open(sys.argv[1]))['counts']; assert c['failed']==0 and c['ok']==c['files'], c" "$T/zs.json" ||
            fail "$(basename "$r"): a file failed"
    done
else
    echo "no ppocrv4_rec in the shared data: sample-recipe batch skipped"
fi
echo "optional overrides ok"
