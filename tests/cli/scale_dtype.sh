#!/usr/bin/env bash
# scale_dtype.sh - issue 16 item 7: quantize --scale-dtype f32|f16|bf16 and
# bits per weight on every per-tensor line and the total.
#   - f16/bf16 scales are NumPy's roundings of the f32 scales, the codes are
#     computed with them, and decompress and --fake-quant both use them
#     exactly (tests/cli/lib/scale_dtype.py);
#   - the bpw figures, worked by hand below, are printed.
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"
S=("$PY" "$TESTLIB/scale_dtype.py")
"$PY" -c 'import numpy' 2>/dev/null || skip "numpy is not installed for $PY"
"${S[@]}" make "$T/m.safetensors"
Q=(quantize "$T/m.safetensors" -b 4 -g 32 --quantize-all)
for d in f32 f16 bf16; do
    expect_rc 0 "$NPUC_BIN" "${Q[@]}" --scale-dtype "$d" -o "$T/a$d.safetensors"
    cp "$T/out" "$T/out.$d"
done
expect_rc 0 "$NPUC_BIN" "${Q[@]}" --scale-dtype f16 --fake-quant -o "$T/fq16.safetensors"
expect_rc 0 "$NPUC_BIN" decompress "$T/af16.safetensors" -o "$T/d16.safetensors"
"${S[@]}" check "$T/m.safetensors" "$T/af32.safetensors" "$T/af16.safetensors" "$T/abf16.safetensors" \
    "$T/d16.safetensors" "$T/fq16.safetensors" || fail "--scale-dtype values"

# By hand: fc1.weight [64,64] and fc2.weight [32,64] at int4 in groups of 32
# (2 per row): 4 bits + 16/32 (f16 scale) = 4.50 bpw, + 32/32 (f32) = 5.00;
# fc1.bias stays f32: 32.00.  Totals over 4096 + 64 + 2048 = 6208 values:
# f16 (2048 + 128*2 + 256 + 1024 + 64*2) * 8 / 6208 = 3712 * 8 / 6208 = 4.78,
# f32 (2048 + 512 + 256 + 1024 + 256) * 8 / 6208 = 4096 * 8 / 6208 = 5.28.
must_match "$T/out.f16" '^\[1/3\] fc1\.weight .* 4\.50 bpw  sqnr='
must_match "$T/out.f16" '^\[3/3\] fc2\.weight .* 4\.50 bpw  sqnr='
must_match "$T/out.bf16" '^\[1/3\] fc1\.weight .* 4\.50 bpw  sqnr='
must_match "$T/out.f32" '^\[1/3\] fc1\.weight .* 5\.00 bpw  sqnr='
must_match "$T/out.f16" '^\[2/3\] fc1\.bias .* 32\.00 bpw$'
must_match "$T/out.f16" '^total: 3 tensors, 2 quantized; .*\(6\.69x, 4\.78 bpw\)'
must_match "$T/out.f32" '^total: 3 tensors, 2 quantized; .*\(6\.06x, 5\.28 bpw\)'

# N:M artifacts keep f32 scales: asking for f16 there is a usage error.
expect_rc 2 "$NPUC_BIN" quantize "$T/m.safetensors" --pattern 2:4 --scale-dtype f16 -o "$T/nm.safetensors"
must_match "$T/err" 'N:M artifacts \(--pattern\) store f32 scales'
expect_rc 2 "$NPUC_BIN" quantize "$T/m.safetensors" --scale-dtype f8 -o "$T/bad.safetensors"
echo "scale_dtype: scales, decoding and bits per weight as computed by hand and by NumPy"
