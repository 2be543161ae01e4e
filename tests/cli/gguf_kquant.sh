# gguf_kquant.sh - `npuc convert --gguf-type q2_k|q3_k|q4_k|q5_k|q6_k` (q2_k and
# q6_k with --gguf-pure: every tensor one type) checked
# against ggml itself (tests/cli/lib/gguf_kquant_check.py, ggml's
# libggml-base.so through ctypes; docs/gguf.md):
#   - every tensor's bytes equal ggml_quantize_chunk's for its type, and the
#     type is the one llama-quantize's fallback gives (rows of 96 -> the
#     32-block type, rows of 100 -> F16, rank 1 -> F32), one warning per
#     fallen-back tensor, general.file_type the K type's;
#   - the same bytes on 1 and 2 threads and with NPUC_FORCE_REF=1;
#   - info, validate and report read the files; decompress gives exactly
#     ggml's dequantize_row_* of the file's blocks; GGUF -> GGUF keeps the type.
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"

"$PY" -c 'import numpy' 2>/dev/null || skip "the Python at $PY has no numpy"
LIB="${NPUC_GGML_LIB:-}"
[ -n "$LIB" ] && [ -f "$LIB" ] ||
    skip "ggml's libggml-base.so not found (NPUC_GGML_LIB='$LIB'); .ci/install-deps --test installs @node-llama-cpp/linux-x64"
K() { "$PY" "$TESTLIB/gguf_kquant_check.py" "$@"; }

# q2_k and q6_k name llama.cpp's mixes (tests/cli/gguf_mix.sh); --gguf-pure
# makes them one type for every tensor, as llama-quantize --pure does.
pure() { case $1 in q2_k | q6_k) echo --gguf-pure ;; esac; }
K make "$T/m.safetensors"
for ty in q2_k q3_k q4_k q5_k q6_k; do
    expect_rc 0 "$NPUC_BIN" convert "$T/m.safetensors" -o "$T/m_$ty.gguf" --gguf-type "$ty" $(pure "$ty")
    TY=${ty^^}
    must_match "$T/err" "warning: .*m_$ty.gguf: tensor 'odd96.w': written as Q[0-9]_[01], not $TY: its rows \(GGUF ne\[0\] = 96\) are not a multiple of 256"
    must_match "$T/err" "warning: .*m_$ty.gguf: tensor 'odd100.w': written as F16, not $TY: .*not a multiple of 32 either"
    [ "$(grep -c warning "$T/err")" -eq 2 ] || fail "$ty: expected two warnings: $(cat "$T/err")"
    K check "$NPUC_GGML_LIB" "$T/m.safetensors" "$T/m_$ty.gguf" "$ty"
    expect_rc 0 "$NPUC_BIN" validate "$T/m_$ty.gguf"
    expect_rc 0 "$NPUC_BIN" info "$T/m_$ty.gguf"
    must_match "$T/out" "par.w"
    expect_rc 0 "$NPUC_BIN" decompress "$T/m_$ty.gguf" -o "$T/d_$ty.safetensors"
    K dequant "$NPUC_GGML_LIB" "$T/m_$ty.gguf" "$T/d_$ty.safetensors"
    expect_rc 0 "$NPUC_BIN" report "$T/m.safetensors" "$T/m_$ty.gguf"
    must_match "$T/out" "par.w"
done

# --imatrix: the importance-weighted quantizers, byte-identical to ggml's
# with the same importance rows (a legacy .dat written by the check script
# from the format's description), on 1 and 2 threads.
K dat "$T/imp.dat" "$T/m.safetensors"
for ty in q4_k q3_k q5_k q4_0 q4_1 q5_0 q5_1 q2_k q6_k; do
    expect_rc 0 "$NPUC_BIN" convert "$T/m.safetensors" -o "$T/i_$ty.gguf" --gguf-type "$ty" $(pure "$ty") \
        --imatrix "$T/imp.dat"
    K icheck "$NPUC_GGML_LIB" "$T/m.safetensors" "$T/i_$ty.gguf" "$T/imp.dat"
done
OMP_NUM_THREADS=1 expect_rc 0 "$NPUC_BIN" convert "$T/m.safetensors" -o "$T/i1.gguf" --gguf-type q4_k \
    --imatrix "$T/imp.dat"
cmp "$T/i1.gguf" "$T/i_q4_k.gguf" || fail "--imatrix: 1 thread differs from 2"

# A pass writes GGUF K-quants too: the pruned weights as Q4_K, byte-identical
# to ggml's quantization of the same pass's safetensors output.
expect_rc 0 "$NPUC_BIN" prune --sparsity 0.5 "$T/m.safetensors" -o "$T/pr.safetensors"
expect_rc 0 "$NPUC_BIN" prune --sparsity 0.5 "$T/m.safetensors" -o "$T/pr.gguf" --gguf-type q4_k
K check "$NPUC_GGML_LIB" "$T/pr.safetensors" "$T/pr.gguf" q4_k
expect_rc 2 "$NPUC_BIN" prune --sparsity 0.5 "$T/m.safetensors" -o "$T/x.gguf" --gguf-type q9_k

# Thread count and the forced reference kernels do not change a byte.
for ty in q4_k q6_k; do
    OMP_NUM_THREADS=1 expect_rc 0 "$NPUC_BIN" convert "$T/m.safetensors" -o "$T/t1_$ty.gguf" --gguf-type "$ty" $(pure "$ty")
    OMP_NUM_THREADS=2 expect_rc 0 "$NPUC_BIN" convert "$T/m.safetensors" -o "$T/t2_$ty.gguf" --gguf-type "$ty" $(pure "$ty")
    NPUC_FORCE_REF=1 expect_rc 0 "$NPUC_BIN" convert "$T/m.safetensors" -o "$T/tr_$ty.gguf" --gguf-type "$ty" $(pure "$ty")
    cmp "$T/t1_$ty.gguf" "$T/m_$ty.gguf" || fail "$ty: 1 thread differs"
    cmp "$T/t2_$ty.gguf" "$T/m_$ty.gguf" || fail "$ty: 2 threads differ"
    cmp "$T/tr_$ty.gguf" "$T/m_$ty.gguf" || fail "$ty: NPUC_FORCE_REF=1 differs"
done

# A K-quant GGUF input converted to GGUF keeps its type (the same bytes:
# requantizing ggml's dequantized K blocks is not the identity, so check the
# type only), and converts to another type on request.
expect_rc 0 "$NPUC_BIN" convert "$T/m_q5_k.gguf" -o "$T/again.gguf"
"$PY" - "$T/again.gguf" "$TESTLIB" <<'EOF'
import sys
sys.path.insert(0, sys.argv[2])
import gguf_kquant_check as k
kv, ts = k.gguf_read(sys.argv[1])
assert kv["general.file_type"][1] == 16, kv["general.file_type"]
assert k.TYPES[ts[0]["type"]][0] == "Q5_K", ts[0]
EOF
expect_rc 0 "$NPUC_BIN" convert "$T/m_q5_k.gguf" -o "$T/q8.gguf" --gguf-type q8_0

# A scale beyond fp16 is refused naming the 256-value block, nothing published.
"$PY" - "$T/huge.safetensors" "$TESTLIB" <<'EOF'
import sys
import numpy as np
sys.path.insert(0, sys.argv[2])
import gguf_check as g
x = np.ones((2, 512), dtype=np.float32)
x[1, 300] = 1e12
g.st_write(sys.argv[1], [("big.weight", "F32", x)])
EOF
expect_rc 2 "$NPUC_BIN" convert "$T/huge.safetensors" -o "$T/huge.gguf" --gguf-type q4_k
must_match "$T/err" "huge.gguf: tensor 'big.weight': row 1, elements 256..511: the Q4_K block scale"
[ ! -e "$T/huge.gguf" ] || fail "huge.gguf was published"
