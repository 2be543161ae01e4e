# gguf_mix.sh - llama.cpp's quantization mixes and --gguf-tensor-type on
# `npuc convert` (docs/gguf.md), checked with tests/cli/lib/gguf_mix_check.py:
# its own GGUF writer builds small llama-architecture F32 models
# (hyperparameters, no vocabulary), its own header reader (ggml's
# docs/gguf.md) reads npuc's output, and its own encoding of llama-quantize's
# rules (src/llama-quant.cpp, commit 007dbbf3) gives every tensor's expected
# type:
#   - rows of 96 and 160 (not multiples of 256): every mix runs today, each
#     K type falling back to a legacy type as llama-quantize does; the
#     per-tensor lines on stdout name type and reason; general.file_type is
#     the mix's LLAMA_FTYPE; dense, tied-embedding and 8-expert models;
#   - --gguf-tensor-type rules (first match wins, counters skip them);
#   - refusals: bad rules, a mix without <arch>.block_count, rules with f16;
#   - rows of 256 and 512: the K types themselves, skipped with a message
#     while this build cannot write them (no K-quant kernels yet).
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"

"$PY" -c 'import numpy' 2>/dev/null || skip "the Python at $PY has no numpy"
X() { "$PY" "$TESTLIB/gguf_mix_check.py" "$@"; }

MIXES="q2_k q3_k_s q3_k_m q3_k_l q4_k_s q4_k_m q5_k_s q5_k_m q6_k"
ftype() { # LLAMA_FTYPE_MOSTLY_*
    case $1 in
    q2_k) echo 10 ;; q3_k_s) echo 11 ;; q3_k_m) echo 12 ;; q3_k_l) echo 13 ;; q4_k_s) echo 14 ;;
    q4_k_m) echo 15 ;; q5_k_s) echo 16 ;; q5_k_m) echo 17 ;; q6_k) echo 18 ;;
    esac
}

# --- rows that are not multiples of 256: every mix, today
X make "$T/dense.gguf" 8 96 160 8 2
X make "$T/tied.gguf" 8 96 160 8 8 --tied
X make "$T/moe.gguf" 4 96 160 8 2 --experts 8
for m in dense tied moe; do
    for mix in $MIXES; do
        keep_case 4 || continue
        expect_rc 0 "$NPUC_BIN" convert "$T/$m.gguf" -o "$T/${m}_$mix.gguf" --gguf-type "$mix"
        # the types, general.file_type, one line per tensor (name, type, reason) on stdout
        X check "$T/$m.gguf" "$T/${m}_$mix.gguf" "$mix" --ftype "$(ftype "$mix")" --lines "$T/out" ||
            fail "$m $mix: differs from llama-quantize's rules"
        expect_rc 0 "$NPUC_BIN" validate "$T/${m}_$mix.gguf"
    done
done

expect_rc 0 "$NPUC_BIN" convert "$T/dense.gguf" -o "$T/d.gguf" --gguf-type q4_k_m
must_match "$T/out" '^blk\.3\.ffn_down\.weight +Q8_0: ffn_down, layer 3 of 8, use_more_bits \(Q6_K\); fallback: ne\[0\] 160 is not a multiple of 256$'
must_match "$T/out" '^blk\.1\.attn_v\.weight +Q5_0: attn_v, 1 of 8, mix default \(Q4_K\); fallback'
must_match "$T/out" '^output\.weight +Q8_0: output'
must_match "$T/out" '^blk\.0\.attn_norm\.weight +F32: rank 1'
expect_rc 0 "$NPUC_BIN" convert -q "$T/tied.gguf" -o "$T/t.gguf" --gguf-type q5_k_m
must_match "$T/out" '^token_embd\.weight +Q8_0: token_embd \(tied: no output\.weight\)'
expect_rc 0 "$NPUC_BIN" convert "$T/moe.gguf" -o "$T/e.gguf" --gguf-type q3_k_s
must_match "$T/out" '^blk\.2\.attn_v\.weight +Q8_0: attn_v, 2 of 4, .*8 experts \(Q3_K -> Q8_0\)'
must_match "$T/out" '^blk\.2\.ffn_gate_inp\.weight +F32: not quantized'

# --- overrides: first match wins, lower-cased, searched in the name
R1='BLK\.0\.attn_v=q8_0' R2='attn_v=q5_1' R3='ffn_down=Q4_0' R4='blk\.[12]\.=f16'
expect_rc 0 "$NPUC_BIN" convert "$T/dense.gguf" -o "$T/o.gguf" --gguf-type q4_k_m \
    --gguf-tensor-type "$R1" --gguf-tensor-type "$R2" --gguf-tensor-type "$R3" --gguf-tensor-type "$R4"
X check "$T/dense.gguf" "$T/o.gguf" q4_k_m "$R1" "$R2" "$R3" "$R4" || fail "overrides: types differ"
must_match "$T/out" '^blk\.0\.attn_v\.weight +Q8_0: override blk\\\.0\\\.attn_v$'
must_match "$T/out" '^blk\.2\.attn_q\.weight +F16: override blk\\\.\[12\]\\\.$'
# counters skip overridden tensors: blk.1 and blk.2's ffn_up are overridden,
# so blk.6's is the 5th the mix sees (layer 4 of 8)
must_match "$T/out" '^blk\.6\.ffn_up\.weight +Q5_0: ffn_up, layer 4 of 8'
# a plain quantized type takes rules too
expect_rc 0 "$NPUC_BIN" convert "$T/dense.gguf" -o "$T/p.gguf" --gguf-type q8_0 --gguf-tensor-type 'ffn_up=q4_1'
must_match "$T/out" '^blk\.0\.ffn_up\.weight +Q4_1: override ffn_up$'
must_match "$T/out" '^blk\.0\.ffn_down\.weight +Q8_0: the chosen type$'
"$PY" - "$T/p.gguf" "$TESTLIB" <<'EOF' || fail "q8_0 + ffn_up=q4_1: types"
import sys
sys.path.insert(0, sys.argv[2])
import gguf_mix_check as g
for name, ne, ty in g.read_header(sys.argv[1])[1]:
    want = "F32" if len(ne) == 1 else "Q4_1" if "ffn_up" in name else "Q8_0"
    assert ty == want, (name, ty, want)
EOF

# --- refusals: exit 2, one line, nothing written
for bad in 'attn_v' '=q8_0' 'attn_v=' 'attn_v=iq4_nl' 'attn_v[=q8_0'; do
    expect_rc 2 "$NPUC_BIN" convert "$T/dense.gguf" -o "$T/bad.gguf" --gguf-type q4_k_m --gguf-tensor-type "$bad"
    must_match "$T/err" 'gguf-tensor-type'
    [ ! -e "$T/bad.gguf" ] || fail "an output was written for --gguf-tensor-type '$bad'"
done
expect_rc 2 "$NPUC_BIN" convert "$T/dense.gguf" -o "$T/bad.gguf" --gguf-type f16 --gguf-tensor-type 'attn_v=q8_0'
must_match "$T/err" 'applies when --gguf-type is quantized'
X safetensors "$T/plain.safetensors"
expect_rc 2 "$NPUC_BIN" convert "$T/plain.safetensors" -o "$T/bad.gguf" --gguf-type q4_k_m
must_match "$T/err" 'mix Q4_K_M needs a GGUF source with .*block_count'
[ ! -e "$T/bad.gguf" ] || fail "an output was written for a mix without block_count"
expect_rc 2 "$NPUC_BIN" convert "$T/dense.gguf" -o "$T/bad.gguf" --gguf-type q4_k_x
must_match "$T/err" 'q4_k_m'

# --- the K types themselves (rows of 256 and 512)
X make "$T/k.gguf" 8 256 512 4 2
rc=0
"$NPUC_BIN" convert "$T/k.gguf" -o "$T/probe.gguf" --gguf-type q4_k_m >"$T/out" 2>"$T/err" || rc=$?
if [ "$rc" = 2 ] && grep -q 'is not supported by this build' "$T/err"; then
    echo "gguf_mix: the K types cannot be written by this build (no K-quant kernels): the 9 mixes on rows of 256 skipped" >&2
    [ ! -e "$T/probe.gguf" ] || fail "an output was written for an unsupported K type"
else
    [ "$rc" = 0 ] || { cat "$T/err" >&2; fail "convert --gguf-type q4_k_m: exit $rc"; }
    for mix in $MIXES; do
        expect_rc 0 "$NPUC_BIN" convert "$T/k.gguf" -o "$T/k_$mix.gguf" --gguf-type "$mix"
        X check "$T/k.gguf" "$T/k_$mix.gguf" "$mix" --ftype "$(ftype "$mix")" --lines "$T/out" || fail "k $mix: types differ from llama-quantize's rules"
        expect_rc 0 "$NPUC_BIN" validate "$T/k_$mix.gguf"
    done
fi
echo "gguf_mix: ok"
