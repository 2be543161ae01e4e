# onnx_fold.sh - fold-bn writes ONNX (docs/onnx.md, "Folded BatchNorms"): models built by
# onnx's helpers (tests/cli/onnx/make_fold_models.py, plus conv_bn_relu and opset9 of
# make_models.py) are folded; python3-onnx checks that no BatchNormalization node is left
# (subgraphs included), that onnx.checker accepts the model, that the graph's inputs and
# outputs keep their names, that the BatchNorms' initializers / Constant nodes are gone and a
# created bias is the Conv's input 2; onnxruntime for Node (optimisation 'basic') gives a
# relative output error below 1e-5 against the original on seeded inputs.  A BatchNorm that
# is not foldable (the Conv's output has a second reader) stays when its pairing is a guess
# not applied, and is refused with the reason (exit 2, nothing written) when applied.
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"

"$PY" -c 'import numpy, onnx' 2>/dev/null || skip "the Python at $PY has no onnx (python3-onnx)"
O() { "$PY" "$NPUC_SRC/tests/cli/onnx/onnx_check.py" "$@"; }
M="$T/m"
"$PY" "$NPUC_SRC/tests/cli/onnx/make_models.py" "$M"
"$PY" "$NPUC_SRC/tests/cli/onnx/make_fold_models.py" "$M"

NODE_CACHE="${NPUC_NODE_CACHE:-$HOME/.cache/npuc-node}"
RUNTIME=0
if command -v node >/dev/null && [ -d "$NODE_CACHE/node_modules/onnxruntime-node" ]; then
    RUNTIME=1
else
    echo "onnx_fold: runtime comparisons skipped: no node or no onnxruntime-node in $NODE_CACHE"
fi
R() { # ORIG OUT MAXREL
    [ "$RUNTIME" = 1 ] || return 0
    local feeds="$T/$(basename "$1" .onnx).feeds.json"
    [ -s "$feeds" ] || O feeds "$1" "$feeds"
    NODE_PATH="$NODE_CACHE/node_modules" node "$NPUC_SRC/tests/cli/onnx/ort_compare.js" "$1" "$2" "$feeds" "$3" ||
        fail "$2: onnxruntime comparison failed"
}

# FOLDED ORIG NBN_LEFT: the structure of the folded model, by python3-onnx.
check() {
    "$PY" - "$1" "$2" "$3" "$NPUC_SRC/tests/cli/onnx" <<'PYEOF' || fail "$1: structure check failed"
import sys
import onnx
sys.path.insert(0, sys.argv[4])
from qdq_check import graphs  # noqa: E402  (every graph, subgraphs included)
out, orig, left = onnx.load(sys.argv[1]), onnx.load(sys.argv[2]), int(sys.argv[3])
onnx.checker.check_model(out)

def bns(m):
    return [n for g in graphs(m.graph) for n in g.node if n.op_type == "BatchNormalization"]

assert len(bns(out)) == left, (len(bns(out)), left)
assert [i.name for i in out.graph.input] == [i.name for i in orig.graph.input]
assert [o.name for o in out.graph.output] == [o.name for o in orig.graph.output]
names = set()
for g in graphs(out.graph):
    names |= {t.name for t in g.initializer}
    names |= {n.output[0] for n in g.node if n.op_type == "Constant"}
kept = {n.name for n in bns(out)}
for b in bns(orig):
    if b.name in kept:
        continue
    for w in b.input[1:]:
        assert w not in names, f"{w}: the folded BatchNorm's tensor is still in the model"
    # its producer now makes its output and has a bias
    prod = [n for g in graphs(out.graph) for n in g.node if b.output[0] in n.output]
    assert len(prod) == 1 and prod[0].op_type in ("Conv", "ConvTranspose", "Gemm"), prod
    assert len(prod[0].input) == 3 and prod[0].input[2] in names, prod[0].input
    assert b.input[0] not in {i for g in graphs(out.graph) for n in g.node for i in n.input}
PYEOF
}

# name ARGS...: fold, check, run.
fold() {
    local b=$1
    shift
    expect_rc 0 "$NPUC_BIN" fold-bn "$M/$b.onnx" -o "$T/$b.f.onnx" "$@"
    check "$T/$b.f.onnx" "$M/$b.onnx" 0
    R "$M/$b.onnx" "$T/$b.f.onnx" 1e-5
}

fold conv_bn_relu                     # Conv with a bias (updated), BN, Relu: pairs by name
fold opset9 --pair conv.weight=bn     # opset 9, IR 4
for b in bn_nobias bn_opset11 bn_opset9; do
    fold "$b" --pair c1.weight=bn1 --pair c2.weight=bn2 # bias created; BN output is the graph output
done
fold bn_const --accept-guesses         # weights and statistics in Constant nodes
# epsilon 1e-3 as the BatchNormalization node states it: read from the
# file's graph (folding with 1e-5 instead moves the output far above 1e-5)
fold bn_convt --pair ct.weight=ctb
must_match "$T/out" "the file's graph"
fold bn_gemm --pair fc.weight=fb       # Gemm transB=1 without C: C created
fold bn_if --pair it.weight=ib          # inside an If branch, epsilon 1e-3 from its node
must_match "$T/out" "folded 1 of 1 BatchNorms"

# A created bias is an initializer of the Conv's graph with the kernel's type.
"$PY" - "$T/bn_nobias.f.onnx" <<'PYEOF' || fail "created bias"
import sys
import numpy as np
import onnx
from onnx import numpy_helper
m = onnx.load(sys.argv[1])
c1 = [n for n in m.graph.node if n.name == "c1"][0]
b = {t.name: t for t in m.graph.initializer}[c1.input[2]]
assert b.data_type == onnx.TensorProto.FLOAT and list(b.dims) == [6], b
assert c1.output[0] == "b1" and np.all(np.isfinite(numpy_helper.to_array(b)))
assert "c1" not in {v.name for v in m.graph.value_info}  # the old output's value_info went
PYEOF

# Not foldable: the Conv's output is also read by an Add.  Unapplied guess: the BatchNorm
# stays and is listed as a skip; the model is written unchanged in value.
expect_rc 0 "$NPUC_BIN" fold-bn "$M/bn_shared.onnx" -o "$T/bn_shared.f.onnx"
must_match "$T/out" "skip sb"
check "$T/bn_shared.f.onnx" "$M/bn_shared.onnx" 1
R "$M/bn_shared.onnx" "$T/bn_shared.f.onnx" 0
# Applied: refused with the reason, nothing written.
expect_rc 2 "$NPUC_BIN" fold-bn "$M/bn_shared.onnx" -o "$T/bn_shared2.onnx" --accept-guesses
must_match "$T/err" "BatchNormalization 'sb' cannot be folded in the ONNX graph: its input is read by another node"
[ ! -e "$T/bn_shared2.onnx" ] || fail "bn_shared2.onnx was written after a refusal"

echo "onnx_fold: ok"
