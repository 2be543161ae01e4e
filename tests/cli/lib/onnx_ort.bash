# onnx_ort.bash - onnxruntime for Node in the ONNX CLI tests (sourced after
# cli_test.bash): RUNTIME is 1 when node and onnxruntime-node (the cache
# .ci/install-deps --test fills) are there, else 0 with one line saying
# the comparisons are skipped.
#   ort_cmp FEEDS_OF A B MAXREL   A and B in onnxruntime (graph optimisation
#                                 'basic') on FEEDS_OF's seeded inputs
#                                 (onnx_check.py feeds, made once per model):
#                                 fails when any relative output error of B
#                                 against A exceeds MAXREL or is not finite.
NODE_CACHE="${NPUC_NODE_CACHE:-$HOME/.cache/npuc-node}"
RUNTIME=0
if command -v node >/dev/null && [ -d "$NODE_CACHE/node_modules/onnxruntime-node" ]; then
    RUNTIME=1
else
    echo "$(basename "$0" .sh): runtime comparisons skipped: no node or no onnxruntime-node in $NODE_CACHE"
fi
ort_cmp() {
    [ "$RUNTIME" = 1 ] || return 0
    local feeds="$T/$(basename "$1" .onnx).feeds.json"
    [ -s "$feeds" ] || "$PY" "$NPUC_SRC/tests/cli/onnx/onnx_check.py" feeds "$1" "$feeds"
    NODE_PATH="$NODE_CACHE/node_modules" node "$NPUC_SRC/tests/cli/onnx/ort_compare.js" "$2" "$3" "$feeds" "$4" ||
        fail "$3: onnxruntime comparison failed"
}
