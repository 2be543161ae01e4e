#!/usr/bin/env bash
# Golden files for the five report formats (issue 7): `npuc report` on
# samples/cnn_bn.safetensors against its 4-bit artifact must print exactly
# tests/golden/report/cnn_bn_q4.{txt,csv,json,md,html}.
#
# The run is made reproducible: relative paths inside a temp folder, -j 1,
# --no-timestamp; the git commit (the only thing that changes between two
# commits of the same code) is replaced by @COMMIT@ before comparing.
# Regenerate only on request, and review the diff:
#     tests/golden/regen.sh [BUILD_DIR]        (NPUC_GOLDEN_REGEN=1 here)
source "$(dirname "$0")/lib/cli_test.bash"

G="$NPUC_SRC/tests/golden/report"
cd "$T"
cp "$SAMPLES/cnn_bn.safetensors" cnn_bn.safetensors
"$NPUC_BIN" quantize -q --bits 4 -j 1 cnn_bn.safetensors -o cnn_bn.q4.safetensors >/dev/null

normalise() {
    sed -e 's/commit [0-9a-f]\{4,40\}/commit @COMMIT@/g' -e 's/commit unknown/commit @COMMIT@/g' \
        -e 's/"git_commit": \("[0-9a-f]*"\|null\)/"git_commit": "@COMMIT@"/'
}

bad=0
for ext in txt csv json md html; do
    fmt=$ext
    [ "$ext" = txt ] && fmt=text
    expect_rc 0 "$NPUC_BIN" report -j 1 --no-timestamp --warn-sqnr 30 --worst 3 --sort sqnr --format "$fmt" \
        cnn_bn.safetensors cnn_bn.q4.safetensors
    normalise <"$T/out" >"got.$ext"
    [ -s "got.$ext" ] || fail "$fmt: empty report"
    if [ "${NPUC_GOLDEN_REGEN:-0}" = 1 ]; then
        cp "got.$ext" "$G/cnn_bn_q4.$ext"
        echo "regenerated $G/cnn_bn_q4.$ext"
        continue
    fi
    [ -f "$G/cnn_bn_q4.$ext" ] || fail "missing golden file $G/cnn_bn_q4.$ext (run tests/golden/regen.sh)"
    if ! diff -u "$G/cnn_bn_q4.$ext" "got.$ext" >"diff.$ext"; then
        echo "--- $fmt differs from tests/golden/report/cnn_bn_q4.$ext:" >&2
        head -n 60 "diff.$ext" >&2
        bad=1
    fi
done
[ "$bad" = 0 ] || fail "report output differs from the golden files (if intended: tests/golden/regen.sh, review the diff)"
echo "5 formats match the golden files"
