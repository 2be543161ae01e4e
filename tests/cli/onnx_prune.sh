# onnx_prune.sh - structured pruning of ONNX models along the file's graph (docs/onnx.md,
# "Structured pruning"): models built by onnx's helpers (tests/cli/onnx/make_prune_models.py,
# plus convs of make_models.py) are pruned at sparsity 0.5.  prune_check.py (python3-onnx and
# numpy, no npuc) finds the channels each producer kept by matching the pruned kernel's rows
# to the original's, checks every BatchNorm / bias / depthwise vector is the original at those
# channels, that the graph's outputs keep their size and that onnx.checker (full check, shape
# inference) accepts the model, and builds the reference: the ORIGINAL model with the removed
# channels' consumer-input slices zeroed (removing a channel is exactly that).  onnxruntime for
# Node (optimisation 'basic') must give the pruned model's outputs within 1e-5 relative on
# seeded inputs.  Edges the edit cannot follow (Flatten, Reshape, a per-channel Mul operand)
# zero the producer's filters instead (shapes unchanged, the reason in its note), and are
# refused when the layer is named with --include (exit 2, one line naming the file and the
# node, nothing written).
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"

"$PY" -c 'import numpy, onnx' 2>/dev/null || skip "the Python at $PY has no onnx (python3-onnx)"
O() { "$PY" "$NPUC_SRC/tests/cli/onnx/onnx_check.py" "$@"; }
M="$T/m"
"$PY" "$NPUC_SRC/tests/cli/onnx/make_models.py" "$M" >/dev/null
"$PY" "$NPUC_SRC/tests/cli/onnx/make_prune_models.py" "$M"

source "$TESTLIB/onnx_ort.bash"
R() { ort_cmp "$@"; } # ORIG REF OUT MAXREL: REF and OUT on ORIG's seeded inputs

# name MIN_SHRUNK: prune, check the structure, run against the zeroed original.
prune() {
    local b=$1
    expect_rc 0 "$NPUC_BIN" prune --structured filter --sparsity 0.5 "$M/$b.onnx" -o "$T/$b.p.onnx"
    must_match "$T/out" "ONNX graph"
    "$PY" "$NPUC_SRC/tests/cli/onnx/prune_check.py" "$M/$b.onnx" "$T/$b.p.onnx" "$T/$b.z.onnx" "$2" ||
        fail "$b: structure check failed"
    R "$M/$b.onnx" "$T/$b.z.onnx" "$T/$b.p.onnx" 1e-5
}

prune p_conv 8      # Conv+bias -> BN -> Relu -> Conv -> Clip -> Conv: kernels, bias, BN shrink
prune p_gemm 5      # Gemm (transB 0 and 1, C) -> Relu / HardSigmoid
prune p_matmul 3    # MatMul -> Mul by a scalar -> Relu -> MatMul
prune p_add 5       # an Add of two branches: pa and pb share one mask; c0 feeds both
prune p_dw 8        # through a depthwise Conv (its group follows) and its BatchNorm
prune convs 6       # make_models.py's: Conv -> Relu -> depthwise -> two 1x1 -> Add -> ConvTranspose

# The output layer is left alone; the notes name the graph's consumers.
expect_rc 0 "$NPUC_BIN" prune --structured filter --sparsity 0.5 "$M/p_conv.onnx" -o "$T/p_conv2.onnx"
must_match "$T/err" "1 layer\(s\) at the model's output were left as they are"
must_match "$T/out" "c3.weight .*-> \[4,3,1,1\]: input channels of c2.weight"
must_match "$T/out" "c1.weight .*next c2.weight \(ONNX graph\)"

# value_info of the resized values is gone (runtimes infer it), the rest stays.
"$PY" - "$T/p_conv.p.onnx" <<'PYEOF' || fail "value_info"
import sys
import onnx
m = onnx.load(sys.argv[1])
assert {v.name for v in m.graph.value_info} == set(), [v.name for v in m.graph.value_info]
PYEOF

# Edges the edit cannot follow: the filters are zeroed, the shapes stay, the note says why.
for b in p_flatten p_reshape p_mulvec; do
    expect_rc 0 "$NPUC_BIN" prune --structured filter --sparsity 0.5 "$M/$b.onnx" -o "$T/$b.p.onnx"
    must_match "$T/err" "1 layer\(s\) had channels zeroed instead of removed: the file's graph has edges the edit cannot follow"
    must_match "$T/out" "c1.weight .*zeroed, not removed: node 'c1': "
    "$PY" - "$M/$b.onnx" "$T/$b.p.onnx" <<'PYEOF' || fail "$b: zeroed fallback"
import sys
import numpy as np
import onnx
from onnx import numpy_helper
o, p = ({t.name: numpy_helper.to_array(t) for t in onnx.load(f).graph.initializer} for f in sys.argv[1:])
assert all(o[n].shape == p[n].shape for n in o), "a shape changed"
w = p["c1.weight"]
assert sum(not w[i].any() for i in range(w.shape[0])) == w.shape[0] // 2, "not half the filters zeroed"
PYEOF
done
# A weight read through Transpose / Identity / Cast (resolve.onnx) is resized where it is
# stored; the model stays valid for onnx.checker's full check.  Channels that leave through a
# subgraph's output (constant_if.onnx: the If's else branch returns them) are not followed.
expect_rc 0 "$NPUC_BIN" prune --structured filter --sparsity 0.5 "$M/resolve.onnx" -o "$T/resolve.p.onnx"
must_match "$T/out" "t.weight .*-> \[3,6\]; .*\(ONNX graph\)"
"$PY" -c 'import onnx, sys; onnx.checker.check_model(onnx.load(sys.argv[1]), full_check=True)' "$T/resolve.p.onnx" ||
    fail "resolve.p.onnx: onnx.checker refused it"
expect_rc 0 "$NPUC_BIN" prune --structured filter --sparsity 0.5 "$M/constant_if.onnx" -o "$T/constant_if.p.onnx"
must_match "$T/out" "c.w .*zeroed, not removed: node 'MatMul_1': no node reads 'e' \(a subgraph's output\?\)"

# ... and refused when the layer is named: one line naming the file and the node.
refuse() { # model pattern
    expect_rc 2 "$NPUC_BIN" prune --structured filter --sparsity 0.5 --include c1.weight "$M/$1.onnx" -o "$T/$1.r.onnx"
    must_match "$T/err" "$2"
    [ "$(wc -l <"$T/err")" = 1 ] || fail "$1: the refusal is not one line"
    [ ! -e "$T/$1.r.onnx" ] || fail "$1.r.onnx was written after a refusal"
}
refuse p_flatten "p_flatten.onnx: tensor 'c1.weight': structured pruning cannot follow the graph: node 'c1': Flatten 'flat' reads it"
refuse p_reshape "p_reshape.onnx: tensor 'c1.weight': .* node 'c1': Reshape 'reshape' reads it"
refuse p_mulvec "p_mulvec.onnx: tensor 'c1.weight': .* node 'c1': Mul 'mulvec' reads it"

# --structured channel ranks the consumers' input slices; the same chains, the same checks.
expect_rc 0 "$NPUC_BIN" prune --structured channel --sparsity 0.5 "$M/p_add.onnx" -o "$T/p_add.c.onnx"
"$PY" "$NPUC_SRC/tests/cli/onnx/prune_check.py" "$M/p_add.onnx" "$T/p_add.c.onnx" "$T/p_add.cz.onnx" 5 ||
    fail "p_add channel: structure check failed"
R "$M/p_add.onnx" "$T/p_add.cz.onnx" "$T/p_add.c.onnx" 1e-5

echo "onnx_prune: ok"
