#!/usr/bin/env bash
# pass_options.sh - every option of every pass is accepted the same way as a
# command-line flag and as a recipe key (issue 13): the option tables come
# from the binary (`npuc help --options --json`); each option is run with
# values at and just beyond its bounds (a valid and an invalid value for
# flags, strings, lists and REGEX=VALUE rules) on samples/cnn_bn.safetensors,
# once as `npuc <pass> --<flag> VALUE` and once as a one-step recipe through
# `npuc run`; both must accept or both reject with exit 2, and a value beyond
# a bound must be rejected.
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"

# The table itself: JSON with the schema, and the text form.
expect_rc 0 "$NPUC_BIN" help --options --json
must_match "$T/out" '"schema": "npuc.pass_options/1"'
expect_rc 0 "$NPUC_BIN" help --options
must_match "$T/out" '^quantize:$'
must_match "$T/out" '^  --bits N +bits +integer \[2, 8\], default 8$'
expect_rc 2 "$NPUC_BIN" help --options --yaml
must_match "$T/err" "^npuc: error: unexpected argument '--yaml'$"

"$PY" "$TESTLIB/pass_options.py" "$NPUC_BIN" "$SAMPLES/cnn_bn.safetensors" "$T" || fail "a pass option differs between the CLI and recipes"
