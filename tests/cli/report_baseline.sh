#!/usr/bin/env bash
# npuc report --baseline OLD.json --max-regress PCT (issue 7):
#  - an identical rerun against its own JSON report exits 0;
#  - re-quantizing one layer at fewer bits (--layer-bits) exits 3 and names
#    that layer (its MSE grew), and the report is written all the same;
#  - a layer that got bigger (more bits) is a size regression: exit 3;
#  - a large enough --max-regress lets the fewer-bits run pass;
#  - a file that is not an npuc.report/1 document is an input error (2).
source "$(dirname "$0")/lib/cli_test.bash"

cnn="$SAMPLES/cnn_bn.safetensors"
"$NPUC_BIN" quantize -q --bits 4 "$cnn" -o "$T/q4.safetensors" >/dev/null
expect_rc 0 "$NPUC_BIN" report --no-timestamp "$cnn" "$T/q4.safetensors" -o "$T/base.json"
expect_rc 0 "$NPUC_BIN" report "$cnn" "$T/q4.safetensors" --baseline "$T/base.json"
must_not_match "$T/err" 'regression:'
must_match "$T/err" 'baseline .*base\.json: 21 tensors compared, 0 only in the baseline, 0 new; 0 regressions'

# One layer at 3 bits instead of 4: its error grows, its size shrinks.
"$NPUC_BIN" quantize -q --bits 4 --layer-bits '^features\.6\.weight$=3' "$cnn" -o "$T/q3.safetensors" >/dev/null
expect_rc 3 "$NPUC_BIN" report "$cnn" "$T/q3.safetensors" --baseline "$T/base.json" --format md -o "$T/r3.md"
must_match "$T/err" "^npuc: regression: 'features\.6\.weight': MSE [0-9.e-]+ -> [0-9.e-]+ \(\+[0-9]+%\), SQNR [0-9.]+ -> [0-9.]+ dB"
must_match "$T/err" '^npuc: error: [0-9]+ regressions? against .*base\.json beyond 5%'
must_not_match "$T/err" "regression: 'features\.(0|3)\.weight"
must_match "$T/r3.md" "^- regression against the baseline: 'features\.6\.weight': MSE"
# The same run passes when the allowed growth is large enough.
expect_rc 0 "$NPUC_BIN" report "$cnn" "$T/q3.safetensors" --baseline "$T/base.json" --max-regress 100000

# More bits: the error shrinks but the layer grows -> a size regression.
"$NPUC_BIN" quantize -q --bits 4 --layer-bits '^features\.3\.weight$=8' "$cnn" -o "$T/q8.safetensors" >/dev/null
expect_rc 3 "$NPUC_BIN" report -q "$cnn" "$T/q8.safetensors" --baseline "$T/base.json"
must_match "$T/err" "^npuc: regression: 'features\.3\.weight': 640 -> 1216 bytes \(\+90%\)"
must_match "$T/err" '^npuc: regression: totals: 1992 -> 2568 bytes'

# Not a report.
echo '{"schema": "npuc.artifact/1"}' >"$T/notreport.json"
expect_rc 2 "$NPUC_BIN" report "$cnn" "$T/q4.safetensors" --baseline "$T/notreport.json"
must_match "$T/err" 'notreport\.json: not an npuc\.report/1 JSON report'
expect_rc 2 "$NPUC_BIN" report "$cnn" "$T/q4.safetensors" --baseline "$T/absent.json"
echo "baseline ok"
