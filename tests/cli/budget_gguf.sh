#!/usr/bin/env bash
# budget_gguf.sh - issue 32: quantize --target-size / --target-bpw with a
# .gguf output: the candidates are ggml types (Q2_K..Q6_K, Q8_0, Q4_0, Q4_1,
# Q5_0, Q5_1, F16), measured with the GGUF writer's quantizers, each tensor
# written in the type chosen for it.  Checked by tests/cli/lib/budget_check.py
# gguf, with a GGUF reader written from the specification: every chosen
# tensor's type is the plan's, the file's size is the one its header lays out,
# the plan's file_bytes, and at most the target; with ggml's libggml-base.so
# (NPUC_GGML_LIB) every chosen tensor's bytes are ggml_quantize_chunk's and the
# plan's predicted distortion is that of ggml's dequantization.
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"
"$PY" -c 'import numpy' 2>/dev/null || skip "numpy is not installed for $PY"
B=("$PY" "$TESTLIB/budget_check.py")
LIB="${NPUC_GGML_LIB:-}"
[ -n "$LIB" ] && [ -f "$LIB" ] || LIB="" # without the oracle: types and sizes only
"${B[@]}" make "$T/m.safetensors"
M="$T/m.safetensors"

# Uniform Q4_K (rows of 96 fall back to Q5_0, as llama-quantize's) for a size.
expect_rc 0 "$NPUC_BIN" convert "$M" --gguf-type q4_k -o "$T/u.gguf"
size_u=$(stat -c %s "$T/u.gguf")
for t in "$size_u" 200000 300001; do
    expect_rc 0 "$NPUC_BIN" quantize "$M" --target-size "$t" --quantize-all --plan-out "$T/p$t.json" -o "$T/b$t.gguf"
    must_match "$T/out" 'f32 -> (Q[2-8]_[01K]|F16) .*budget: rel\. weight error\^2'
    "${B[@]}" gguf "$M" "$T/b$t.gguf" "$T/p$t.json" "$t" - $LIB || fail "--target-size $t to GGUF"
done
# The smallest reachable size, named when a size is not reachable, is reachable.
expect_rc 2 "$NPUC_BIN" quantize "$M" --target-size 40K --quantize-all -o "$T/x.gguf"
must_match "$T/err" 'target-size 40960 is not reachable .* the smallest output is [0-9]+ bytes$'
[ ! -e "$T/x.gguf" ] || fail "an unreachable budget left an output"
least=$(sed -n 's/.*the smallest output is \([0-9]*\) bytes$/\1/p' "$T/err")
expect_rc 0 "$NPUC_BIN" quantize "$M" --target-size "$least" --quantize-all --plan-out "$T/pl.json" -o "$T/l.gguf"
"${B[@]}" gguf "$M" "$T/l.gguf" "$T/pl.json" "$least" - $LIB || fail "--target-size $least (the smallest) to GGUF"

# Bits per weight, with the edge layers pinned at Q8_0 (8 bits), and a
# candidate list of ggml types.
expect_rc 0 "$NPUC_BIN" quantize "$M" --target-bpw 4.5 --plan-out "$T/pb.json" -o "$T/bpw.gguf"
must_match "$T/out" 'layers\.0\.weight .* Q8_0 .*kept at 8 bits'
"${B[@]}" gguf "$M" "$T/bpw.gguf" "$T/pb.json" - 4.5 $LIB || fail "--target-bpw 4.5 to GGUF"
expect_rc 0 "$NPUC_BIN" quantize "$M" --target-bpw 5 --quantize-all --candidates q4_k,q8_0,Q5_0 \
    --plan-out "$T/pc.json" -o "$T/c.gguf"
"$PY" -c "import json, sys; s = {t['scheme'] for t in json.load(open('$T/pc.json'))['tensors']}; sys.exit(0 if s <= {'Q4_K', 'Q8_0', 'Q5_0'} else 1)" ||
    fail "--candidates q4_k,q8_0,Q5_0 chose others"
"${B[@]}" gguf "$M" "$T/c.gguf" "$T/pc.json" - 5 $LIB || fail "--candidates to GGUF"
# With an importance matrix (--imatrix, the GGUF writer's option) the types
# are measured with the writer's weighted quantizers and the errors weighted
# by importance: with ggml, the bytes are its weighted quantizers' and the
# plan's prediction its dequantization's importance-weighted error.
"${B[@]}" imatrix "$T/m.dat" "$M"
expect_rc 0 "$NPUC_BIN" quantize "$M" --target-size 250000 --quantize-all --imatrix "$T/m.dat" \
    --plan-out "$T/pi.json" -o "$T/i.gguf"
must_match "$T/out" 'budget: rel\. imatrix-weighted error\^2'
if [ -n "$LIB" ]; then
    "${B[@]}" gguf "$M" "$T/i.gguf" "$T/pi.json" 250000 - "$LIB" "$T/m.dat" || fail "--imatrix to GGUF"
else
    "${B[@]}" gguf "$M" "$T/i.gguf" "$T/pi.json" 250000 - || fail "--imatrix to GGUF"
fi
expect_rc 2 "$NPUC_BIN" quantize "$M" --target-bpw 4 --candidates q4_k,int4/g32 -o "$T/x.gguf"
must_match "$T/err" "candidates"
expect_rc 2 "$NPUC_BIN" quantize "$M" --target-bpw 1.5 --quantize-all -o "$T/x.gguf"
must_match "$T/err" 'target-bpw 1.5 is not reachable'
echo "budget_gguf: types, sizes${LIB:+, bytes and distortions (ggml)} as planned"
