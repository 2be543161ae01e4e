# onnx_qdq.sh - quantize to ONNX writes DequantizeLinear (QDQ), MatMulNBits
# or the per-channel forms of older opsets (docs/onnx.md), checked with
# python3-onnx + NumPy (tests/cli/onnx/qdq_check.py: a reference quantizer
# of its own, the graph's structure, bit-exact dequantization) and run in
# onnxruntime for Node against the original model on seeded inputs:
#   - int8 per channel (symmetric: INT8 with zero point 0) on Conv+BN+ReLU,
#     Gemm, MatMul, weights in Constant nodes and an If branch, external
#     data, opset 9 and 11 models (raised to 13): relative output error
#     below 0.03; asymmetric (UINT8 + zero points) and per tensor;
#   - LSTM W/R (axis 1), depthwise Conv, 1x1 Conv, ConvTranspose (axis 1
#     stated with --layout): int8 per channel below 0.03;
#   - int4 in groups of 32 at opset 21 (INT4 blocked DequantizeLinear, the
#     blocked axis and the scales' layout from the encoding; a 3x3 Conv
#     blocked on its [O, I*kh*kw] view + Reshape), and raised from opset 10
#     with Clip / Unsqueeze / ReduceSum converted; runs;
#   - --onnx-int4 matmulnbits: com.microsoft::MatMulNBits; runs;
#   - opset 11 with Softmax (cannot be raised): DequantizeLinear scale 1 +
#     Mul; opset 9 with Upsample: Cast + Sub + Mul; each said in one line;
#   - 3-bit codes stored one a byte (INT8) with a note;
#   - groups in a model whose opset cannot be raised: exit 2, one line
#     naming the file, the node and why, nothing written;
#   - decompress of npuc's QDQ model (and of the artifact) gives float
#     weights equal bit for bit to NumPy's dequantization of the written codes.
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"

"$PY" -c 'import numpy, onnx' 2>/dev/null || skip "the Python at $PY has no onnx (python3-onnx)"
Q() { "$PY" "$NPUC_SRC/tests/cli/onnx/qdq_check.py" "$@"; }
O() { "$PY" "$NPUC_SRC/tests/cli/onnx/onnx_check.py" "$@"; }
M="$T/m"
"$PY" "$NPUC_SRC/tests/cli/onnx/make_models.py" "$M"
"$PY" "$NPUC_SRC/tests/cli/onnx/make_qdq_models.py" "$M"

source "$TESTLIB/onnx_ort.bash"
R() { ort_cmp "$1" "$1" "$2" "$3"; } # ORIG OUT MAXREL
# The one line naming the forms written.
form_line() { must_match "$T/err" "ONNX quantized weights written as $1"; }

# int8 per channel, symmetric: every builder model.  The axis is the one
# the encoding's scales vary along: the layout the consuming op states
# (Conv 0, Gemm with transB 0, Gemm without transB and MatMul [K, N] 1;
# some runs also state MatMul's with --layout, which must agree).
run8() { # model spec...
    local b=$1
    shift
    expect_rc 0 "$NPUC_BIN" quantize "$M/$b.onnx" -o "$T/$b.q8.onnx" "${LAYOUT[@]}"
    form_line "[0-9]* x DequantizeLinear int8 per channel"
    cp "$T/err" "$T/q8.err"
    Q qdq "$M/$b.onnx" "$T/$b.q8.onnx" dq 8 1 0 "$@"
    R "$M/$b.onnx" "$T/$b.q8.onnx" 0.03
    expect_rc 0 "$NPUC_BIN" decompress "$T/$b.q8.onnx" -o "$T/$b.d.onnx"
    local names=()
    for s in "$@"; do names+=("${s%=*}"); done
    Q deq "$T/$b.q8.onnx" "$T/$b.d.onnx" "${names[@]}"
    R "$M/$b.onnx" "$T/$b.d.onnx" 0.03
}
LAYOUT=()
run8 conv_bn_relu conv.weight=0
run8 gemm fc1.weight=0 fc2.weight=1
run8 constant_if c.w=1 then.w=1
run8 external ext.w1=0 ext.w2=1
run8 opset9 conv.weight=0
must_match "$T/q8.err" "opset raised 9 -> 13"
Q opset "$T/opset9.q8.onnx" 13
run8 opset11 fc1.weight=0 fc2.weight=1
must_match "$T/q8.err" "opset raised 11 -> 13"
run8 lstm lstm.W=1 lstm.R=1
LAYOUT=(--layout 'mm\.weight=io')
run8 matmul mm.weight=1
LAYOUT=(--quantize-all --layout 'ct\.weight=iohw')
run8 convs13 dw.weight=0 pw=0 ct.weight=1

# A FLOAT16 weight: DequantizeLinear then Cast back to FLOAT16 (decompress
# of it: onnx_deq.sh).
expect_rc 0 "$NPUC_BIN" quantize --layout 'w16=io' "$M/f16.onnx" -o "$T/f16.q.onnx"
Q qdq "$M/f16.onnx" "$T/f16.q.onnx" dq 8 1 0 w16=1
"$PY" - "$T/f16.q.onnx" <<'PYEOF'
import onnx, sys
m = onnx.load(sys.argv[1])
n = [n for n in m.graph.node if "w16" in n.output][0]
assert n.op_type == "Cast" and n.attribute[0].i == onnx.TensorProto.FLOAT16, n
PYEOF
R "$M/f16.onnx" "$T/f16.q.onnx" 0.03
expect_rc 0 "$NPUC_BIN" decompress "$T/f16.q.onnx" -o "$T/f16.d.onnx"
R "$M/f16.onnx" "$T/f16.d.onnx" 0.03

# Asymmetric (UINT8 + zero points) and per tensor.
expect_rc 0 "$NPUC_BIN" quantize --asymmetric --layout 'mm\.weight=io' "$M/matmul.onnx" -o "$T/mm.a.onnx"
form_line "1 x DequantizeLinear uint8 per channel"
Q qdq "$M/matmul.onnx" "$T/mm.a.onnx" dq 8 0 0 mm.weight=1
R "$M/matmul.onnx" "$T/mm.a.onnx" 0.03
expect_rc 0 "$NPUC_BIN" decompress "$T/mm.a.onnx" -o "$T/mm.a.d.onnx"
Q deq "$T/mm.a.onnx" "$T/mm.a.d.onnx" mm.weight
expect_rc 0 "$NPUC_BIN" quantize --per-tensor "$M/gemm.onnx" -o "$T/g.t.onnx"
form_line "2 x DequantizeLinear int8 per tensor"
Q qdq "$M/gemm.onnx" "$T/g.t.onnx" dq 8 1 0 fc1.weight=-1 fc2.weight=-1
R "$M/gemm.onnx" "$T/g.t.onnx" 0.05

# int4 in groups of 32 at opset 21: the MatMul weight [64, 24] blocked
# along axis 0 (scales [2, 24]), the Gemm weight [16, 64] along axis 1.
expect_rc 0 "$NPUC_BIN" quantize -b 4 -g 32 --quantize-all --layout 'mm\.weight=io' "$M/mm21.onnx" -o "$T/mm21.q4.onnx"
form_line "2 x DequantizeLinear int4 blocked \(block_size 32\); opset 21"
Q qdq "$M/mm21.onnx" "$T/mm21.q4.onnx" dq 4 1 32 mm.weight=1 fc.weight=0
R "$M/mm21.onnx" "$T/mm21.q4.onnx" 0.25
expect_rc 0 "$NPUC_BIN" quantize -b 4 -g 32 --asymmetric --quantize-all --layout 'mm\.weight=io' "$M/mm21.onnx" \
    -o "$T/mm21.u4.onnx"
form_line "2 x DequantizeLinear uint4 blocked"
Q qdq "$M/mm21.onnx" "$T/mm21.u4.onnx" dq 4 0 32 mm.weight=1 fc.weight=0
R "$M/mm21.onnx" "$T/mm21.u4.onnx" 0.25
# The artifact of the same run: convert writes the same QDQ model, decompress
# the float weights NumPy computes from its codes.
expect_rc 0 "$NPUC_BIN" quantize -b 4 -g 32 --quantize-all --layout 'mm\.weight=io' "$M/mm21.onnx" -o "$T/a4.safetensors"
expect_rc 0 "$NPUC_BIN" convert "$T/a4.safetensors" -o "$T/a4.onnx"
cmp "$T/a4.onnx" "$T/mm21.q4.onnx" || fail "convert of the artifact differs from quantize to ONNX"
expect_rc 0 "$NPUC_BIN" decompress "$T/a4.safetensors" -o "$T/a4.d.onnx"
Q deq "$T/a4.onnx" "$T/a4.d.onnx" mm.weight fc.weight

# int4 g32 on a 3x3 convolution: its groups run along I*kh*kw, contiguous in
# OIHW, so the blocks are those of the [O, I*kh*kw] view and a Reshape
# gives the weight its shape back.
expect_rc 0 "$NPUC_BIN" quantize -b 4 -g 32 --quantize-all "$M/conv_bn_relu.onnx" -o "$T/cbr.q4.onnx"
form_line "1 x DequantizeLinear int4 blocked \(block_size 32\); opset raised 13 -> 21"
Q qdq "$M/conv_bn_relu.onnx" "$T/cbr.q4.onnx" dq 4 1 32 conv.weight=0
R "$M/conv_bn_relu.onnx" "$T/cbr.q4.onnx" 0.3
expect_rc 0 "$NPUC_BIN" quantize -b 4 -g 32 --quantize-all "$M/conv_bn_relu.onnx" -o "$T/cbr4.safetensors"
expect_rc 0 "$NPUC_BIN" decompress "$T/cbr4.safetensors" -o "$T/cbr4.d.onnx"
Q deq "$T/cbr.q4.onnx" "$T/cbr4.d.onnx" conv.weight

# An artifact whose description disagrees with its stored parts (hostile or
# damaged: group_size 16 with the scales of 32) is refused, never read past.
"$PY" - "$T/a4.safetensors" "$T/bad4.safetensors" <<'PYEOF'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
art = json.loads(h["__metadata__"]["npuc"])
art["tensors"]["mm.weight"]["group_size"] = 16
h["__metadata__"]["npuc"] = json.dumps(art)
hb = json.dumps(h).encode()
hb += b" " * (-len(hb) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(hb)) + hb + b[8 + n:])
PYEOF
expect_rc 2 "$NPUC_BIN" convert "$T/bad4.safetensors" -o "$T/never.onnx"
must_match "$T/err" "never.onnx: tensor 'mm.weight': its stored codes, scales or zero points do not have the sizes"
[ ! -e "$T/never.onnx" ] || fail "never.onnx was written from a damaged artifact"

# MatMulNBits for the MatMul weight; the Gemm weight stays DequantizeLinear.
expect_rc 0 "$NPUC_BIN" quantize -b 4 -g 32 --quantize-all --layout 'mm\.weight=io' --onnx-int4 matmulnbits \
    "$M/mm21.onnx" -o "$T/mm21.nb.onnx"
form_line "1 x com.microsoft::MatMulNBits \(4-bit, block 32\), 1 x DequantizeLinear int4 blocked"
must_match "$T/err" "'fc.weight' not as MatMulNBits: not a \[K, N\] weight grouped along K"
Q qdq "$M/mm21.onnx" "$T/mm21.nb.onnx" nbits 4 1 32 mm.weight=1
R "$M/mm21.onnx" "$T/mm21.nb.onnx" 0.25
expect_rc 0 "$NPUC_BIN" quantize -b 4 -g 32 --asymmetric --quantize-all --layout 'mm\.weight=io' \
    --onnx-int4 matmulnbits "$M/mm21.onnx" -o "$T/mm21.nbu.onnx"
Q qdq "$M/mm21.onnx" "$T/mm21.nbu.onnx" nbits 4 0 32 mm.weight=1
R "$M/mm21.onnx" "$T/mm21.nbu.onnx" 0.25
h=$("$NPUC_BIN" quantize --help)
case "$h" in *"--onnx-int4"*) ;; *) fail "quantize --help does not list --onnx-int4" ;; esac
expect_rc 2 "$NPUC_BIN" quantize --onnx-int4 nbits "$M/mm21.onnx" -o "$T/never.onnx"

# Raised from opset 10: Clip's min/max, Unsqueeze's and ReduceSum's axes
# become Constant inputs (checked against the attributes).
expect_rc 0 "$NPUC_BIN" quantize -b 4 -g 32 --quantize-all --layout 'mm\.weight=io' "$M/convert10.onnx" \
    -o "$T/c10.q4.onnx"
form_line "1 x DequantizeLinear int4 blocked \(block_size 32\); opset raised 10 -> 21"
Q opset "$T/c10.q4.onnx" 21
Q qdq "$M/convert10.onnx" "$T/c10.q4.onnx" dq 4 1 32 mm.weight=1
R "$M/convert10.onnx" "$T/c10.q4.onnx" 0.25
expect_rc 0 "$NPUC_BIN" quantize --layout 'mm\.weight=io' "$M/convert10.onnx" -o "$T/c10.q8.onnx"
form_line "1 x DequantizeLinear int8 per channel; opset raised 10 -> 13"
Q qdq "$M/convert10.onnx" "$T/c10.q8.onnx" dq 8 1 0 mm.weight=1
R "$M/convert10.onnx" "$T/c10.q8.onnx" 0.03

# Opsets that cannot be raised keep per-channel scales in the form they have.
expect_rc 0 "$NPUC_BIN" quantize "$M/softmax11.onnx" -o "$T/s11.onnx"
form_line "1 x DequantizeLinear int8 scale 1 \+ Mul by per channel scales; opset 11 \(not raised to 13: the Softmax node with output 'y': Softmax no longer flattens"
Q opset "$T/s11.onnx" 11
Q qdq "$M/softmax11.onnx" "$T/s11.onnx" mul 8 1 0 fc.weight=0
R "$M/softmax11.onnx" "$T/s11.onnx" 0.03
# A Softmax along its last axis (the rank stated) means the same at 13: raised.
expect_rc 0 "$NPUC_BIN" quantize "$M/softmax11last.onnx" -o "$T/s11l.onnx"
form_line "1 x DequantizeLinear int8 per channel; opset raised 11 -> 13"
Q opset "$T/s11l.onnx" 13
R "$M/softmax11last.onnx" "$T/s11l.onnx" 0.03
expect_rc 0 "$NPUC_BIN" quantize --asymmetric "$M/upsample9.onnx" -o "$T/u9.onnx"
form_line "1 x Cast uint8 \+ Mul by per channel scales; opset 9 \(not raised to 13: the Upsample node"
Q opset "$T/u9.onnx" 9
Q qdq "$M/upsample9.onnx" "$T/u9.onnx" cast 8 0 0 conv.weight=0
R "$M/upsample9.onnx" "$T/u9.onnx" 0.03
expect_rc 0 "$NPUC_BIN" quantize -b 4 --quantize-all "$M/softmax11.onnx" -o "$T/s11.q4.onnx"
must_match "$T/err" "1 4-bit weight\(s\) stored as int8 \(INT4 needs opset 21\)"
Q qdq "$M/softmax11.onnx" "$T/s11.q4.onnx" mul 4 1 0 fc.weight=0
R "$M/softmax11.onnx" "$T/s11.q4.onnx" 0.3

# 3 bits: one code a byte, said.
expect_rc 0 "$NPUC_BIN" quantize -b 3 --quantize-all --layout 'mm\.weight=io' "$M/mm21.onnx" -o "$T/mm21.q3.onnx"
must_match "$T/err" "2 weight\(s\) of 2, 3, 5, 6 or 7 bits stored one code a byte"
Q qdq "$M/mm21.onnx" "$T/mm21.q3.onnx" dq 3 1 0 mm.weight=1 fc.weight=0
R "$M/mm21.onnx" "$T/mm21.q3.onnx" 0.6

# Groups where the opset cannot be raised to 21: refused, one line.
expect_rc 2 "$NPUC_BIN" quantize -b 4 -g 32 --quantize-all "$M/softmax11.onnx" -o "$T/never.onnx"
must_match "$T/err" "never.onnx: blocked quantization needs opset 21 and the model's opset 11 cannot be raised: the Softmax node with output 'y': Softmax no longer flattens its input to 2-D at opset 13"
[ "$(grep -c . "$T/err")" = 1 ] || fail "the refusal is not one line"
[ ! -e "$T/never.onnx" ] || fail "never.onnx was written after a refusal"
# Groups whose sequence is not contiguous (a ConvTranspose read as IOHW:
# [in, out, kh, kw] along out): ONNX blocks one axis.
expect_rc 2 "$NPUC_BIN" quantize -b 4 -g 9 --quantize-all --layout 'ct\.weight=iohw' "$M/convs13.onnx" -o "$T/never.onnx"
must_match "$T/err" "never.onnx: tensor '(dw.weight|ct.weight)': groups of 9 run across [0-9] axes"

# A quantized artifact without an ONNX graph (from safetensors).
expect_rc 0 "$NPUC_BIN" convert "$M/gemm.onnx" -o "$T/plain.safetensors"
"$PY" - "$T/plain.safetensors" <<'PYEOF'
import json, struct, sys
p = sys.argv[1]
b = open(p, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
h["__metadata__"].pop("onnx.model")
hb = json.dumps(h).encode()
hb += b" " * (-len(hb) % 8)
open(p, "wb").write(struct.pack("<Q", len(hb)) + hb + b[8 + n:])
PYEOF
expect_rc 0 "$NPUC_BIN" quantize "$T/plain.safetensors" -o "$T/plain.q.safetensors"
expect_rc 2 "$NPUC_BIN" convert "$T/plain.q.safetensors" -o "$T/never.onnx"
must_match "$T/err" "never.onnx: quantized tensors need the ONNX graph their weights belong to"
[ ! -e "$T/never.onnx" ] || fail "never.onnx was written after a refusal"

echo "onnx_qdq: ok"
