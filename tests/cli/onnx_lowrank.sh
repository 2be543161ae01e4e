# onnx_lowrank.sh - lowrank writes ONNX (docs/onnx.md, "Factored weights"): each factored
# MatMul / Gemm weight's node becomes two, x W as (x lr_b) lr_a with the bias on the
# second.  Models: gemm, matmul, constant_if of make_models.py (Gemm transB 1 and 0 with
# bias, MatMul, weights in Constant nodes and an If branch) and lowrank_check.py's own
# (Gemm with alpha, beta, transA and one without C).  lowrank_check.py checks, by
# python3-onnx and NumPy: onnx.checker, the node structure and the factors' shapes; NumPy
# evaluating the output from the factors read out of it equals onnxruntime's output of it
# (1e-5 relative, seeded inputs); the output error against the original equals that of
# NumPy's own truncated SVD at the same rank.  A layer kept dense keeps its node.
# Refused (exit 2, one line naming the file and tensor, nothing written): an --include'd
# weight two nodes read, or of a grouped, depthwise or transposed Conv, one read through a
# Transpose, a Gemm at opset 9 (its first half has no C).  Picked by the default selection, a
# weight two nodes read or of a grouped Conv is kept dense with a note instead.
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"

"$PY" -c 'import numpy, onnx' 2>/dev/null || skip "the Python at $PY has no onnx (python3-onnx)"
NODE_CACHE="${NPUC_NODE_CACHE:-$HOME/.cache/npuc-node}"
command -v node >/dev/null && [ -d "$NODE_CACHE/node_modules/onnxruntime-node" ] ||
    skip "no node or no onnxruntime-node in $NODE_CACHE"
C() { "$PY" "$NPUC_SRC/tests/cli/onnx/lowrank_check.py" "$@"; }
M="$T/m"
"$PY" "$NPUC_SRC/tests/cli/onnx/make_models.py" "$M"
C models "$M"

# IN OUT RANK SPLIT [lowrank options]: lowrank, then every check.
lr() {
    local in=$1 out=$2 rank=$3 split=$4
    shift 4
    expect_rc 0 "$NPUC_BIN" lowrank --rank "$rank" "$M/$in" -o "$T/$out" "$@"
    local feeds="$T/$out.feeds.json"
    "$PY" "$NPUC_SRC/tests/cli/onnx/onnx_check.py" feeds "$M/$in" "$feeds"
    for f in "$M/$in" "$T/$out"; do
        NODE_PATH="$NODE_CACHE/node_modules" node "$NPUC_SRC/tests/cli/onnx/ort_run.js" "$f" "$feeds" \
            "$T/$out.$(basename "$f").ort.json" || fail "$f: onnxruntime could not run it"
    done
    C check "$M/$in" "$T/$out" "$rank" "$split" "$feeds" "$T/$out.$in.ort.json" "$T/$out.$out.ort.json" \
        || fail "$out: check failed"
}

lr gemm.onnx gemm.lr.onnx 2 fc1.weight,fc2.weight
lr gemm.onnx gemm.r4.onnx 4 fc1.weight            # fc2 [16,4] at rank 4: no saving, its Gemm stays
must_match "$T/out" "fc2.weight .*no saving at rank 4"
lr matmul.onnx matmul.lr.onnx 3 mm.weight
lr constant_if.onnx ci.lr.onnx 1 c.w,then.w      # Constant nodes, one inside the If branch
lr gemm_ab.onnx gemm_ab.lr.onnx 3 ab.weight,nc.weight
lr clash.onnx clash.lr.onnx 2 w
"$PY" - "$T/clash.lr.onnx" <<'PYEOF' || fail "clash: the new value's name was not made unique"
import onnx, sys
m = onnx.load(sys.argv[1])
assert [n.output[0] for n in m.graph.node][:2] == ["w.lr_mid_1", "w.lr_mid"], [n.output for n in m.graph.node]
PYEOF
# The output holds no lowrank description: the graph says it (decompress copies the factors).
"$PY" - "$T/gemm.lr.onnx" <<'PYEOF' || fail "the stored npuc description still lists the split weights"
import onnx, sys
assert "npuc" not in {p.key for p in onnx.load(sys.argv[1]).metadata_props}
PYEOF
expect_rc 0 "$NPUC_BIN" info "$T/gemm.lr.onnx"
must_match "$T/out" "fc1.weight.lr_b"

# Conv: a kh x kw Conv with r outputs (the original's attributes), then a 1x1 Conv with the bias.
lr conv_bn_relu.onnx cbr.lr.onnx 2 conv.weight                # Conv + BatchNormalization + Relu
lr conv_s2.onnx conv_s2.lr.onnx 2 c1.weight,c2.weight         # stride 2, pads, dilation, bias or none
must_match "$T/out" "dw.weight .*depthwise kernel: not factored"   # the depthwise Conv stays
lr conv_s2.onnx conv_s2.r1.onnx 1 c1.weight,c2.weight
lr conv1d.onnx conv1d.lr.onnx 2 k1.weight                     # Conv1d, auto_pad SAME_UPPER
lr grouped.onnx grouped.lr.onnx 2 p.weight                    # group 2 kept dense, the 1x1 Conv after it split
must_match "$T/out" "g.weight .*kept dense, no ONNX split: is read by Conv 'g' with group 2"

# Refusals: one line naming the output and the tensor, nothing written.
refused() { # OUT PATTERN lowrank-args...
    local out=$1 pat=$2
    shift 2
    expect_rc 2 "$NPUC_BIN" lowrank "$@" -o "$T/$out"
    must_match "$T/err" "$pat"
    [ "$(grep -c . "$T/err")" -eq 1 ] || fail "$out: more than one line: $(cat "$T/err")"
    [ ! -e "$T/$out" ] || fail "$out was written after a refusal"
}
refused shared.onnx "shared.onnx: tensor 'sh.weight' is read by 2 nodes" --rank 2 --include sh.weight \
    "$M/shared.onnx"
refused grouped.onnx "grouped.onnx: tensor 'g.weight' is read by Conv 'g' with group 2: a grouped convolution" \
    --rank 2 --include 'g\.weight' "$M/grouped.onnx"
refused dw.onnx "dw.onnx: tensor 'dw.weight' is read by DepthwiseConv 'dw': only factored MatMul, Gemm and Conv" \
    --rank 1 --include 'dw\.weight' "$M/conv_s2.onnx"
refused convt.onnx "convs.onnx: tensor 'up.weight': layout iohw .*cannot be factored" \
    --rank 1 --include 'up\.weight' "$M/convs.onnx"
refused gemm9.onnx \
    "gemm9.onnx: onnx.model: tensor 'g9.weight' .Gemm 'y'. cannot be written as a split Gemm.*opset 11.*opset 9" \
    --rank 2 "$M/gemm9.onnx"
refused resolve.onnx "resolve.onnx: onnx.model: tensor 't.weight' cannot be written as a split MatMul.*another node" \
    --rank 1 --include t.weight "$M/resolve.onnx"             # read through a Transpose
# --exclude keeps the Conv dense: the rest is written.
expect_rc 0 "$NPUC_BIN" lowrank --rank 2 --exclude conv.weight "$M/conv_bn_relu.onnx" -o "$T/conv_ex.onnx"
# The default selection keeps a weight whose node cannot be split dense, with a note, before any SVD.
lr shared.onnx shared.lr.onnx 2 ""
must_match "$T/out" "sh.weight .*kept dense, no ONNX split: is read by 2 nodes"
