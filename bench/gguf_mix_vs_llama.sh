#!/usr/bin/env bash
# gguf_mix_vs_llama.sh - npuc's llama.cpp mixes against llama-quantize itself.
#
#   bench/gguf_mix_vs_llama.sh LLAMA_QUANTIZE [NPUC] [--70b]
#
# Builds small llama-architecture F32 GGUFs (tests/cli/lib/gguf_mix_check.py:
# hyperparameters, no vocabulary; rows of 96/160, where every K type falls
# back to a legacy type, and of 256/512, where the K types stay; dense, tied
# embeddings, fused attn_qkv, 8 experts; with --70b also an 80-layer GQA model,
# ~110 MB), quantizes each with llama-quantize (no --pure) and with
# `npuc convert --gguf-type MIX` for the nine mixes, and compares every
# tensor's type.  npuc's types come from its output file when it wrote one,
# else from its per-tensor lines (a build without the K-quant kernels refuses
# to write K types but still says which it chose).  Prints one line per model
# and mix and a total.  npuc follows llama.cpp at 007dbbf3 (docs/gguf.md); a
# llama-quantize from before that refactoring differs in two known ways,
# counted apart: Q2_K/Q3_K rows that are not a multiple of 256 fall back to
# IQ4_NL there (Q4_0 at 007dbbf3), and fused attn_qkv has its own rules
# there.  Exits 1 when a type differs for any other reason.
set -euo pipefail
LQ=${1:?usage: $0 LLAMA_QUANTIZE [NPUC] [--70b]}
NPUC=${2:-build/npuc}
BIG=${3:-}
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY=${NPUC_PYTHON:-/usr/bin/python3}
LIB="$HERE/tests/cli/lib/gguf_mix_check.py"
T="$(mktemp -d "${TMPDIR:-/tmp}/gguf_mix_vs_llama.XXXXXX")"
trap 'rm -rf "$T"' EXIT

MODELS="dense96:8:96:160:8:2 dense256:8:256:512:4:2 tied256:8:256:512:4:4:--tied qkv256:8:256:512:4:4:--qkv moe256:4:256:256:4:1:--experts:8"
[ "$BIG" = --70b ] && MODELS="$MODELS llama70b:80:256:256:8:1"
MIXES="q2_k q3_k_s q3_k_m q3_k_l q4_k_s q4_k_m q5_k_s q5_k_m q6_k"

# "name TYPE" of npuc's choice: from the file when written, else from stdout.
npuc_types() {
    if [ -s "$1" ]; then
        "$PY" "$LIB" types "$1"
    else
        sed -nE 's/^([^ ]+) +([A-Z0-9_]+): .*/\1 \2/p' "$2"
    fi
}

total=0 differ=0 known=0
printf '%-9s %-7s %7s %7s %9s %7s  %s\n' model mix tensors differ "IQ4_NL fb" "qkv" "npuc wrote the file"
for spec in $MODELS; do
    IFS=: read -r name l e f h kv x1 x2 <<<"$spec"
    "$PY" "$LIB" make "$T/$name.gguf" "$l" "$e" "$f" "$h" "$kv" ${x1:+$x1} ${x2:+$x2}
    for mix in $MIXES; do
        rm -f "$T/lq.gguf" "$T/np.gguf"
        if ! "$LQ" "$T/$name.gguf" "$T/lq.gguf" "${mix^^}" 2 >"$T/lq.log" 2>&1; then
            echo "$name ${mix^^}: llama-quantize failed:" >&2
            tail -5 "$T/lq.log" >&2
            differ=$((differ + 1))
            continue
        fi
        "$NPUC" convert "$T/$name.gguf" -o "$T/np.gguf" --gguf-type "$mix" >"$T/np.out" 2>"$T/np.err" || true
        "$PY" "$LIB" types "$T/lq.gguf" | sort >"$T/a"
        npuc_types "$T/np.gguf" "$T/np.out" | sort >"$T/b"
        n=$(wc -l <"$T/a")
        diff "$T/a" "$T/b" | grep '^<' >"$T/d" || true
        d=$(wc -l <"$T/d")
        [ -s "$T/b" ] || d=$n
        # llama-quantize's IQ4_NL fallback where npuc (007dbbf3) has Q4_0
        fb=$(grep -c ' IQ4_NL$' "$T/d" || true)
        qkv=$(grep -v ' IQ4_NL$' "$T/d" | grep -c 'attn_qkv' || true)
        wrote=no
        [ -s "$T/np.gguf" ] && wrote=yes
        printf '%-9s %-7s %7d %7d %9d %7d  %s\n' "$name" "${mix^^}" "$n" "$d" "$fb" "$qkv" "$wrote"
        if [ "$((d - fb - qkv))" != 0 ]; then
            diff "$T/a" "$T/b" | head -10 >&2 || true
        fi
        total=$((total + n))
        differ=$((differ + d - fb - qkv))
        known=$((known + fb + qkv))
    done
done
echo "total: $total tensors compared; $known differ in the two known ways (IQ4_NL fallback, attn_qkv);" \
    "$differ differ otherwise"
[ "$differ" = 0 ]
