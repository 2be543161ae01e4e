# onnx.sh - ONNX in and out (docs/onnx.md), checked with python3-onnx and
# NumPy (tests/cli/onnx/onnx_check.py), never with npuc's own reading:
#   - models built by onnx's helpers (tests/cli/onnx/make_models.py): Conv +
#     BN + ReLU, Gemm, MatMul with an int64 shape, LSTM, weights in Constant
#     nodes and an If branch, typed float_data/F16/BF16, external data, opset
#     9 and 11;
#   - `npuc info` lists exactly the weights onnx's walk finds, and gives each
#     weight an op consumes (Conv OIHW, depthwise, ConvTranspose IOHW, Gemm
#     by transB, MatMul [K,N], LSTM W/R/B, Gather, through Identity / Cast /
#     Transpose / Reshape, inside an If branch) the role, layout and out
#     axis an independent walk of the graph computes, as certain;
#   - the graph: Conv -> BatchNormalization is a pair (bn_of), prune
#     consumers through Relu, depthwise Conv and an Add of two branches;
#   - convert to safetensors equals numpy_helper's values; ONNX -> ONNX and
#     ONNX -> safetensors -> ONNX give the original bytes back (external
#     data: the same values, onnx.checker accepts it);
#   - prune --sparsity 0.5 and quantize --fake-quant to ONNX pass the checker
#     with the graph unchanged and values equal to NumPy's expectation;
#     decompress of an int8 artifact writes the dequantized values;
#   - --external-data always writes OUT.data, page-aligned;
#   - passes that need graph edits npuc does not write (sparsify
#     --compressed; fold-bn writes ONNX: onnx_fold.sh, lowrank:
#     onnx_lowrank.sh) refuse
#     ONNX outputs (exit 2, one line,
#     nothing written), as does every malformed file: truncated or overlong
#     varint, length past the end, wrong wire type, nested graphs 40 deep,
#     dims disagreeing with the data, an external location with ".." or an
#     absolute path or a symlink leading out of the folder, offset + length
#     past the data file, a graph cycle, a value two nodes produce; a .onnx
#     file that is not ONNX is named as such.
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"

"$PY" -c 'import numpy, onnx' 2>/dev/null || skip "the Python at $PY has no onnx (python3-onnx)"
O() { "$PY" "$NPUC_SRC/tests/cli/onnx/onnx_check.py" "$@"; }
M="$T/m"
"$PY" "$NPUC_SRC/tests/cli/onnx/make_models.py" "$M"
MODELS_ONNX="conv_bn_relu gemm matmul lstm constant_if typed external opset9 opset11 convs convt_dw resolve"

for b in $MODELS_ONNX; do
    f="$M/$b.onnx"
    expect_rc 0 "$NPUC_BIN" info --json "$f"
    "$PY" - "$T/out" "$(O names "$f")" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["format"] == "onnx", j["format"]
got = sorted(t["name"] for t in j["tensors"])
want = sorted(sys.argv[2].split())
assert got == want, (got, want)
PYEOF
    O roles "$f" "$T/out"
    expect_rc 0 "$NPUC_BIN" convert "$f" -o "$T/$b.safetensors"
    O same "$T/$b.safetensors" "$f"
    expect_rc 0 "$NPUC_BIN" convert "$f" -o "$T/$b.onnx"
    O equal "$f" "$T/$b.onnx"
    expect_rc 0 "$NPUC_BIN" convert "$T/$b.safetensors" -o "$T/$b.back.onnx"
    O equal "$f" "$T/$b.back.onnx"
    if [ "$b" != external ] && [ "$b" != typed ]; then
        cmp "$f" "$T/$b.onnx" || fail "$b: ONNX -> ONNX changed bytes"
        cmp "$f" "$T/$b.back.onnx" || fail "$b: ONNX -> safetensors -> ONNX changed bytes"
    fi
    expect_rc 0 "$NPUC_BIN" prune --sparsity 0.5 "$f" -o "$T/$b.p.onnx"
    O pruned "$f" "$T/$b.p.onnx" 0.5
    # Fake quantization int8 per output channel along the axis the
    # consuming op gives (MatMul and Gemm transB=0: 1; Conv: 0;
    # ConvTranspose: 1, 0 when depthwise; LSTM: each [gates*hidden] row of each direction),
    # against NumPy's quantization along that axis.
    expect_rc 0 "$NPUC_BIN" quantize --bits 8 --per-channel --fake-quant "$f" -o "$T/$b.fq.onnx"
    O fakequant "$f" "$T/$b.fq.onnx"
    expect_rc 0 "$NPUC_BIN" quantize --bits 8 --per-channel "$f" -o "$T/$b.q8.safetensors"
    expect_rc 0 "$NPUC_BIN" decompress "$T/$b.q8.safetensors" -o "$T/$b.d.onnx"
    O fakequant "$f" "$T/$b.d.onnx"
done

# A real runtime: onnxruntime for Node (npm onnxruntime-node, installed by
# .ci/install-deps --test into $NPUC_NODE_CACHE) runs the original and each
# written model on the same seeded inputs: convert exactly, fake-quant int8
# per channel within 3% relative output error, pruned models finite.
NODE_CACHE="${NPUC_NODE_CACHE:-$HOME/.cache/npuc-node}"
if command -v node >/dev/null && [ -d "$NODE_CACHE/node_modules/onnxruntime-node" ]; then
    R() { NODE_PATH="$NODE_CACHE/node_modules" node "$NPUC_SRC/tests/cli/onnx/ort_compare.js" "$@"; }
    for b in $MODELS_ONNX; do
        O feeds "$M/$b.onnx" "$T/$b.feeds.json"
        R "$M/$b.onnx" "$T/$b.onnx" "$T/$b.feeds.json" 0
        R "$M/$b.onnx" "$T/$b.back.onnx" "$T/$b.feeds.json" 0
        R "$M/$b.onnx" "$T/$b.p.onnx" "$T/$b.feeds.json" 10
        R "$M/$b.onnx" "$T/$b.fq.onnx" "$T/$b.feeds.json" 0.03
        R "$M/$b.onnx" "$T/$b.d.onnx" "$T/$b.feeds.json" 0.03
    done
else
    echo "onnx: runtime comparisons skipped: no node or no onnxruntime-node in $NODE_CACHE (.ci/install-deps --test installs it)"
fi

# The graph's edges for fold-bn and structured prune (node attributes).
expect_rc 0 "$NPUC_BIN" info --json "$M/conv_bn_relu.onnx"
"$PY" - "$T/out" <<'PYEOF'
import json, sys
g = json.load(open(sys.argv[1]))["graph"]
nodes = {n["op"]: n for n in g["nodes"]}
assert nodes["BatchNormalization"]["attributes"].get("bn_of") == nodes["Conv"]["name"], nodes
assert [v["name"] for v in g["values"] if v["is_input"]] == ["x"], g["values"]
assert [v["name"] for v in g["values"] if v["is_output"]] == ["y"], g["values"]
PYEOF
expect_rc 0 "$NPUC_BIN" info --json "$M/convs.onnx"
"$PY" - "$T/out" <<'PYEOF'
import json, sys
n = {x["name"]: x["attributes"] for x in json.load(open(sys.argv[1]))["graph"]["nodes"]}
assert n["c1"]["prune_consumers"] == "pa,pb", n["c1"]      # through Relu and the depthwise Conv
assert "depthwise" in n["dw"]["prune_refused"], n["dw"]
assert n["pa"]["prune_consumers"] == "up" and n["pa"]["prune_with"] == "pb", n["pa"]  # Add of two branches
assert "model output" in n["up"]["prune_refused"], n["up"]
PYEOF

# ONNX input with external data keeps it; --external-data always moves
# tensors of 1 KiB or more out, at offsets that are multiples of 4096.
[ -s "$T/external.onnx.data" ] || fail "external.onnx: converting to ONNX dropped its external data"
expect_rc 0 "$NPUC_BIN" convert "$M/gemm.onnx" -o "$T/gx.onnx" --external-data always
O equal "$M/gemm.onnx" "$T/gx.onnx"
"$PY" - "$T/gx.onnx" <<'PYEOF'
import onnx, sys
m = onnx.load(sys.argv[1], load_external_data=False)
ext = {t.name: {e.key: e.value for e in t.external_data} for t in m.graph.initializer if t.data_location == 1}
assert sorted(ext) == ["fc1.weight"], ext  # fc2.weight: 256 bytes, stays inline
for e in ext.values():
    assert e["location"] == "gx.onnx.data" and int(e["offset"]) % 4096 == 0, e
PYEOF
expect_rc 2 "$NPUC_BIN" convert "$M/gemm.onnx" -o "$T/gy.onnx" --external-data sometimes
must_match "$T/err" "external-data"

# Passes that would need graph edits npuc does not write refuse an ONNX
# output (quantize writes DequantizeLinear nodes: tests/cli/onnx_qdq.sh;
# lowrank splits MatMul / Gemm nodes: tests/cli/onnx_lowrank.sh).
expect_rc 2 "$NPUC_BIN" sparsify --pattern 2:4 --compressed "$M/gemm.onnx" -o "$T/s.onnx"
must_match "$T/err" "s.onnx: tensor 'fc1.weight' is stored as 'nm_sparse', which in ONNX needs graph edits"
for o in s; do [ ! -e "$T/$o.onnx" ] || fail "$o.onnx was written after a refusal"; done

# Not ONNX at all, and ONNX without its extension.
cp "$SAMPLES/cnn_bn.safetensors" "$T/fake.onnx"
expect_rc 2 "$NPUC_BIN" quantize "$T/fake.onnx" -o "$T/fake.q.safetensors"
must_match "$T/err" "fake.onnx: not an ONNX model"
cp "$M/gemm.onnx" "$T/noext.bin"
expect_rc 0 "$NPUC_BIN" info "$T/noext.bin"
must_match "$T/out" "format: *onnx"

# Malformed files: exit 2, one line naming the file and what is wrong.
B="$T/bad/models"
mkdir -p "$B"
bad() {
    local kind=$1 why=$2
    O bad "$kind" "$B"
    expect_rc 2 "$NPUC_BIN" info "$B/$kind.onnx"
    [ "$(wc -l <"$T/err")" -eq 1 ] || fail "$kind: more than one line: $(cat "$T/err")"
    must_match "$T/err" "$kind.onnx: .*$why"
}
bad truncated_varint "truncated varint"
bad overlong_varint "varint longer than"
bad length_past_end "length past the end"
bad wrong_wire_type "wrong wire type"
bad depth "nested deeper than 32"
bad dims "dims \\[4, 4\\] of F32 need 64 bytes but raw_data holds 60"
bad dotdot "location '../w.data' is not a relative path inside the model's folder"
bad absolute "location '/etc/hostname' is not a relative path"
bad past_end "offset 8 \\+ 16 bytes runs past the end of 'w.data'"
bad symlink "'link.data': leads outside the model's folder"
bad cycle "ONNX graph: .*cycle"
bad twice "ONNX graph: value 'y' is produced twice"

echo "onnx: ok"
