# onnx_fold.sh - fold-bn writes ONNX (docs/onnx.md, "Folded BatchNorms"): models built by
# onnx's helpers (tests/cli/onnx/make_fold_models.py, plus conv_bn_relu and opset9 of
# make_models.py) are folded; python3-onnx checks that no BatchNormalization node is left
# (subgraphs included), that onnx.checker accepts the model, that the graph's inputs and
# outputs keep their names, that the BatchNorms' initializers / Constant nodes are gone and a
# created bias is the Conv's input 2; onnxruntime for Node (optimisation 'basic') gives a
# relative output error below 1e-5 against the original on seeded inputs.  Pairs come from
# the file's graph (no --pair, allowed under --strict); a stated pair it agrees with folds,
# one it contradicts is refused.  A BatchNorm that is not foldable (the Conv's output has a
# second reader, or a Relu makes its input while the names pair it) stays, listed as a skip
# with the graph's reason, with guesses accepted or not.
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"

"$PY" -c 'import numpy, onnx' 2>/dev/null || skip "the Python at $PY has no onnx (python3-onnx)"
O() { "$PY" "$NPUC_SRC/tests/cli/onnx/onnx_check.py" "$@"; }
M="$T/m"
"$PY" "$NPUC_SRC/tests/cli/onnx/make_models.py" "$M"
"$PY" "$NPUC_SRC/tests/cli/onnx/make_fold_models.py" "$M"

source "$TESTLIB/onnx_ort.bash"
R() { ort_cmp "$1" "$1" "$2" "$3"; } # ORIG OUT MAXREL

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
    if len(prod) == 1 and prod[0].op_type == "Add":  # after a MatMul, which has no bias input
        assert list(prod[0].input[:1]) == [b.input[0]] and prod[0].input[1] in names, prod[0].input
        mm = [n for g in graphs(out.graph) for n in g.node if b.input[0] in n.output]
        assert len(mm) == 1 and mm[0].op_type == "MatMul", mm
        continue
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

# Pairs from the file's graph (a BatchNormalization whose input is a Conv/ConvTranspose/Gemm
# output it alone reads): no --pair, no guess, so --strict folds them too.
fold conv_bn_relu                     # Conv with a bias (updated), BN, Relu
must_match "$T/out" "conv\.weight +bn +graph"
fold opset9 --strict                  # opset 9, IR 4
for b in bn_nobias bn_opset11 bn_opset9; do
    fold "$b"                         # bias created; BN output is the graph output
    must_match "$T/out" "folded 2 of 2 BatchNorms"
done
fold bn_const --strict                # weights and statistics in Constant nodes
# epsilon 1e-3 as the BatchNormalization node states it: read from the
# file's graph (folding with 1e-5 instead moves the output far above 1e-5)
fold bn_convt
must_match "$T/out" "the file's graph"
fold bn_gemm                          # Gemm transB=1 without C: C created
fold bn_matmul                        # MatMul has no bias input: an Add of the created bias follows it
# On a rank-3 MatMul output the BatchNorm's axis 1 is not the MatMul's channels: not a pair.
expect_rc 0 "$NPUC_BIN" fold-bn "$M/bn_matmul3.onnx" -o "$T/bn_matmul3.f.onnx"
must_match "$T/out" "MatMul 'm3''s output has rank 3: BatchNormalization normalizes its axis 1"
check "$T/bn_matmul3.f.onnx" "$M/bn_matmul3.onnx" 1
"$PY" - "$T/bn_matmul.f.onnx" <<'PYEOF' || fail "bn_matmul: the fold's Add"
import onnx, sys
m = onnx.load(sys.argv[1])
ops = [(n.op_type, list(n.input), list(n.output)) for n in m.graph.node]
assert ops == [("MatMul", ["x", "mm.weight"], ["mm"]), ("Add", ["mm", "mm.bias"], ["y"])], ops
assert sorted(i.name for i in m.graph.initializer) == ["mm.bias", "mm.weight"], [i.name for i in m.graph.initializer]
PYEOF
fold bn_if                            # inside an If branch, epsilon 1e-3 from its node
must_match "$T/out" "folded 1 of 1 BatchNorms"
# The bias is the node's input 2 whatever its name ('B0' for kernel 'W0'); a Gemm whose beta
# scales C (0.5) keeps its BatchNorm, skipped with that reason.
expect_rc 0 "$NPUC_BIN" fold-bn "$M/bn_biasname.onnx" -o "$T/bn_biasname.f.onnx"
must_match "$T/out" "W0 +nb +graph .*[0-9] *$"
must_not_match "$T/out" "W0\.bias"
must_match "$T/out" "skip gb \(producer W1\): the file's graph: Gemm 'gemm' scales its C by beta 0\.5"
check "$T/bn_biasname.f.onnx" "$M/bn_biasname.onnx" 1
R "$M/bn_biasname.onnx" "$T/bn_biasname.f.onnx" 1e-5
# The pairing's evidence in the report.
expect_rc 0 "$NPUC_BIN" fold-bn "$M/bn_nobias.onnx" --dry-run
must_match "$T/out" "why: the file's graph: Conv 'c2' -> BatchNormalization 'bn2', the only reader of its output"
# A stated pair the graph agrees with still works (how: explicit) ...
fold bn_nobias -f --pair c1.weight=bn1 --pair c2.weight=bn2
must_match "$T/out" "c1\.weight +bn1 +explicit"
# ... one it contradicts is refused with one line, nothing written.
expect_rc 2 "$NPUC_BIN" fold-bn "$M/bn_nobias.onnx" -o "$T/contra.onnx" --pair c2.weight=bn1
must_match "$T/err" "--pair c2.weight=bn1: the file states otherwise: BatchNorm 'bn1' follows 'c1.weight'"
[ "$(wc -l <"$T/err")" = 1 ] || fail "the contradiction is not one line"
[ ! -e "$T/contra.onnx" ] || fail "contra.onnx was written after a refusal"

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

# Not foldable: the Conv's output is also read by an Add.  The file's graph says so: the
# BatchNorm stays, listed as a skip with that reason; the model is written unchanged in value.
# --accept-guesses changes nothing (no weaker rule overrides the graph); stating the pair is
# refused (exit 2, nothing written).
for a in "" --accept-guesses; do
    expect_rc 0 "$NPUC_BIN" fold-bn "$M/bn_shared.onnx" -o "$T/bn_shared.f.onnx" -f $a
    must_match "$T/out" "skip sb \(producer s\.weight\): the file's graph: the output 's' of Conv 's' has another reader \(Add 'add'\)"
    check "$T/bn_shared.f.onnx" "$M/bn_shared.onnx" 1
    R "$M/bn_shared.onnx" "$T/bn_shared.f.onnx" 0
done
expect_rc 2 "$NPUC_BIN" fold-bn "$M/bn_shared.onnx" -o "$T/bn_shared2.onnx" --pair s.weight=sb
must_match "$T/err" "--pair s.weight=sb: the file states otherwise: BatchNorm 'sb' cannot be folded: the output 's' of Conv 's' has another reader"
[ ! -e "$T/bn_shared2.onnx" ] || fail "bn_shared2.onnx was written after a refusal"
# conv1 -> Relu -> bn1: the names pair conv1 / bn1, the graph refuses (its input is the
# Relu's), and the names do not override it, with guesses accepted or not.
expect_rc 0 "$NPUC_BIN" fold-bn "$M/bn_relu_first.onnx" -o "$T/bn_relu_first.f.onnx" --accept-guesses
must_match "$T/out" "skip bn1 \(producer relu\): the file's graph: its input 'r' is made by Relu 'relu'"
check "$T/bn_relu_first.f.onnx" "$M/bn_relu_first.onnx" 1
R "$M/bn_relu_first.onnx" "$T/bn_relu_first.f.onnx" 0

echo "onnx_fold: ok"
