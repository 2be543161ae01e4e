# gguf.sh - GGUF in and out (docs/gguf.md), checked against an independent
# reader and reference quantizers written in NumPy from the format's
# definition (tests/cli/lib/gguf_check.py):
#   - for every --gguf-type, every block of `npuc convert -o x.gguf` equals
#     the reference on random weights, exact ties, all-zero and constant
#     blocks, huge ranges, f16/bf16 sources, odd rows (kept F32 with a
#     warning), long and non-ASCII names; the header (version 3, alignment
#     32, general.* keys, npuc.* metadata, tensor table) is parsed by the
#     test's own reader;
#   - GGUF -> decompress -> safetensors equals the reference dequantization
#     of the file's blocks, bit for bit, under the original names;
#   - info, validate and report open GGUF files; GGUF -> GGUF keeps the type;
#   - --gguf-arch, refusals (pass outputs, scales beyond fp16, NaN, hostile
#     files) exit 2 with one line naming the file and publish nothing;
#   - the real models of ../shared/data, when present, block for block.
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"

"$PY" -c 'import numpy' 2>/dev/null || skip "the Python at $PY has no numpy"
G() { "$PY" "$TESTLIB/gguf_check.py" "$@"; }

G selftest
G make "$T/m.safetensors"

TYPES="f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1"
for ty in $TYPES; do
    expect_rc 0 "$NPUC_BIN" convert "$T/m.safetensors" -o "$T/m_$ty.gguf" --gguf-type "$ty"
    case $ty in
    q*) must_match "$T/err" "warning: .*m_$ty.gguf: 1 tensor kept as F32, not ${ty^^}: .*'odd.weight'" ;;
    *) must_not_match "$T/err" "warning" ;;
    esac
    G check "$T/m.safetensors" "$T/m_$ty.gguf" "$ty"
    expect_rc 0 "$NPUC_BIN" validate "$T/m_$ty.gguf"
    expect_rc 0 "$NPUC_BIN" info --json "$T/m_$ty.gguf"
    "$PY" - "$T/out" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["format"] == "gguf", j["format"]
names = [t["name"] for t in j["tensors"]]
assert names[0] == "layers.0.weight" and any(n.startswith("model.encoder") for n in names), names
assert j["metadata"]["format"] == "pt" and j["metadata"]["source"] == "gguf_check", j["metadata"]
EOF
    expect_rc 0 "$NPUC_BIN" decompress "$T/m_$ty.gguf" -o "$T/d_$ty.safetensors"
    G dequant "$T/m_$ty.gguf" "$T/d_$ty.safetensors" "$T/m.safetensors"
    expect_rc 0 "$NPUC_BIN" report "$T/m.safetensors" "$T/m_$ty.gguf"
done

# The default type is f16; --gguf-arch sets general.architecture, and a GGUF
# input's architecture and type carry over to a GGUF output.
expect_rc 0 "$NPUC_BIN" convert "$T/m.safetensors" -o "$T/default.gguf"
G check "$T/m.safetensors" "$T/default.gguf" f16
expect_rc 0 "$NPUC_BIN" convert "$T/m.safetensors" -o "$T/llama.gguf" --gguf-type q5_1 --gguf-arch llama
G check "$T/m.safetensors" "$T/llama.gguf" q5_1 llama
expect_rc 0 "$NPUC_BIN" convert "$T/llama.gguf" -o "$T/again.gguf"
"$PY" - "$T/again.gguf" "$TESTLIB" <<'EOF'
import sys
sys.path.insert(0, sys.argv[2])
import gguf_check as g
r = g.gguf_read(sys.argv[1])
assert r["kv"]["general.architecture"] == (8, "llama"), r["kv"]["general.architecture"]
assert r["kv"]["general.file_type"] == (4, 9), r["kv"]["general.file_type"]
assert r["tensors"][0]["type"] == "Q5_1", r["tensors"][0]["type"]
assert not any(k.startswith("npuc.gguf.general") for k in r["kv"]), sorted(r["kv"])
EOF
expect_rc 2 "$NPUC_BIN" convert "$T/m.safetensors" -o "$T/bad.gguf" --gguf-arch "no spaces"
must_match "$T/err" "gguf-arch"
expect_rc 2 "$NPUC_BIN" convert "$T/m.safetensors" -o "$T/bad.gguf" --gguf-type iq2_xxs
must_match "$T/err" "q8_0"
[ ! -e "$T/bad.gguf" ] || fail "bad.gguf written"

# A pass's output: fake-quantized weights are dense and written (f16 by
# default); an artifact of codes and scales is refused and nothing is published.
expect_rc 0 "$NPUC_BIN" quantize "$T/m.safetensors" --fake-quant -o "$T/fq.safetensors"
expect_rc 0 "$NPUC_BIN" quantize "$T/m.safetensors" --fake-quant -o "$T/fq.gguf"
G check "$T/fq.safetensors" "$T/fq.gguf" f16
expect_rc 2 "$NPUC_BIN" quantize "$T/m.safetensors" -o "$T/q.gguf"
must_match "$T/err" "q.gguf: GGUF holds dense or ggml-quantized weights, not npuc artifacts"
G huge "$T/huge.safetensors"
expect_rc 2 "$NPUC_BIN" convert "$T/huge.safetensors" -o "$T/huge.gguf" --gguf-type q8_0
must_match "$T/err" "huge.gguf: tensor 'big.weight': row 0, elements 0..31: .*fp16"
expect_rc 0 "$NPUC_BIN" convert "$T/huge.safetensors" -o "$T/huge.gguf" --gguf-type f32
"$PY" - "$T/nan.safetensors" "$TESTLIB" <<'EOF'
import sys
import numpy as np
sys.path.insert(0, sys.argv[2])
import gguf_check as g
x = np.ones((2, 32), dtype=np.float32)
x[1, 4] = np.nan
g.st_write(sys.argv[1], [("n.weight", "F32", x)])
EOF
expect_rc 2 "$NPUC_BIN" convert "$T/nan.safetensors" -o "$T/nan.gguf" --gguf-type q4_0
must_match "$T/err" "nan.gguf: tensor 'n.weight': element 36 is NaN"
ls -a "$T" | grep -q 'npuc-.*tmp' && fail "a temporary file was left behind"
[ ! -e "$T/q.gguf" ] && [ ! -e "$T/nan.gguf" ] || fail "a refused output was published"

# Tensors large enough for the quantizer's parallel tiles: the bytes are the
# same on 1 and 2 threads and with the scalar reference kernels forced
# (NPUC_FORCE_REF=1) as with the AVX-512 ones, and equal the NumPy
# reference; an F16 source is converted inside the tiles.
"$PY" - "$T/par.safetensors" "$TESTLIB" <<'EOF'
import sys
import numpy as np
sys.path.insert(0, sys.argv[2])
import gguf_check as g
rng = np.random.default_rng(18)
a = (rng.standard_normal((129, 1024)) * 0.02).astype(np.float32)  # 17 tiles of 256 blocks, the last short
a[3, :] = 0.0
a[4, :64] = -0.0
a[5, :32] = np.floor(np.linspace(-126, 126, 32)) + 0.5
a[5, 0] = 127.0
a[6, 100] = 3.0e4
h = (rng.standard_normal((128, 1024)) * 0.5).astype(np.float16)  # 16 tiles: just parallel
g.st_write(sys.argv[1], [("a.weight", "F32", a), ("h.weight", "F16", h)])
EOF
ptypes="q8_0 q4_0 q4_1 q5_0 q5_1"
[ "${NPUC_TEST_QUICK:-0}" = 1 ] && ptypes="q8_0 q5_1"
for ty in $ptypes; do
    OMP_NUM_THREADS=2 expect_rc 0 "$NPUC_BIN" convert "$T/par.safetensors" -o "$T/par2_$ty.gguf" --gguf-type "$ty"
    OMP_NUM_THREADS=1 expect_rc 0 "$NPUC_BIN" convert "$T/par.safetensors" -o "$T/par1_$ty.gguf" --gguf-type "$ty"
    NPUC_FORCE_REF=1 expect_rc 0 "$NPUC_BIN" convert "$T/par.safetensors" -o "$T/parr_$ty.gguf" --gguf-type "$ty"
    cmp "$T/par2_$ty.gguf" "$T/par1_$ty.gguf" || fail "$ty: 1 and 2 threads differ"
    cmp "$T/par2_$ty.gguf" "$T/parr_$ty.gguf" || fail "$ty: NPUC_FORCE_REF=1 differs"
    G check "$T/par.safetensors" "$T/par2_$ty.gguf" "$ty"
done

# Hostile files: one line naming the file, exit 2, never a crash.
G hostile "$T/bad"
expect_rc 0 "$NPUC_BIN" info "$T/bad/ok.gguf"
for f in "$T"/bad/*.gguf; do
    case $f in */ok.gguf) continue ;; esac
    expect_rc 2 "$NPUC_BIN" info "$f"
    [ "$(wc -l <"$T/err")" -eq 1 ] || fail "$(basename "$f"): not one line: $(cat "$T/err")"
    must_match "$T/err" "^npuc: error: .*$(basename "$f"): "
done
expect_rc 2 "$NPUC_BIN" info "$T/bad/ntensors.gguf"
must_match "$T/err" "n_tensors 1152921504606846976 cannot fit"
expect_rc 2 "$NPUC_BIN" info "$T/bad/iquant.gguf"
must_match "$T/err" "tensor 'w': ggml type IQ2_XXS is not supported"
expect_rc 2 "$NPUC_BIN" info "$T/bad/overlap.gguf"
must_match "$T/err" "tensor 'b': data overlaps tensor 'a'"

# An independent GGUF library, when installed, reads npuc's files the same.
if "$PY" -c 'import gguf' 2>/dev/null; then
    "$PY" - "$T/m_q4_0.gguf" <<'EOF'
import sys, gguf
r = gguf.GGUFReader(sys.argv[1])
assert r.fields["general.alignment"].parts[-1][0] == 32
print("ok: gguf-py reads", len(r.tensors), "tensors")
EOF
fi

# Real models, block for block.
# The quick passes of .ci/run (sanitizers: NPUC_TEST_QUICK=1) check one model
# in two types; the release pass checks them all.
types="q8_0 q4_0 q4_1 q5_0 q5_1 bf16"
[ "${NPUC_TEST_QUICK:-0}" = 1 ] && types="q8_0 q4_1"
n=0
for stem in $MODELS; do
    src="$SHARED/$stem.safetensors"
    [ -f "$src" ] || continue
    [ "${NPUC_TEST_QUICK:-0}" = 1 ] && [ "$n" -ge 1 ] && break
    n=$((n + 1))
    for ty in $types; do
        expect_rc 0 "$NPUC_BIN" convert "$src" -o "$T/real_$ty.gguf" --gguf-type "$ty" -f
        G check "$src" "$T/real_$ty.gguf" "$ty"
        expect_rc 0 "$NPUC_BIN" decompress "$T/real_$ty.gguf" -o "$T/real_$ty.safetensors" -f
        G dequant "$T/real_$ty.gguf" "$T/real_$ty.safetensors" "$src"
    done
done
echo "gguf: $n real models checked"
