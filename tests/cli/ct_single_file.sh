#!/usr/bin/env bash
# Issue 31 item 7: `--format compressed-tensors` asks for a compressed-tensors
# checkpoint (a directory with config.json).  With a single-file output
# (.safetensors, .h5) npuc cannot write that, so it refuses: exit 2, one line
# naming the output and the option, nothing written, the input untouched; and
# an existing file given with -f is left as it was.  A directory output still
# writes compressed-tensors (config.json says so, checked with Python's json).
source "$(dirname "$0")/lib/cli_test.bash"

"$PY" - "$T/in.safetensors" "$TESTLIB" <<'EOF_PY'
import sys
sys.path.insert(0, sys.argv[2])
import numpy as np
from io_models import write
r = np.random.default_rng(7)
write(sys.argv[1], [("model.layers.0.mlp.down_proj.weight", r.standard_normal((64, 128))),
                    ("model.layers.0.mlp.up_proj.weight", r.standard_normal((128, 64))),
                    ("model.norm.weight", np.ones(64))], {"format": "pt"})
EOF_PY

for out in out.safetensors out.h5; do
    expect_rc 2 "$NPUC_BIN" quantize "$T/in.safetensors" -o "$T/$out" --bits 4 --format compressed-tensors
    must_match "$T/err" "^npuc: error: .*$out: checkpoint format 'compressed-tensors' is written only as a checkpoint directory"
    [ "$(wc -l <"$T/err")" -eq 1 ] || fail "more than one line on stderr"
    [ ! -e "$T/$out" ] || fail "$out was written although the run was refused"
done
# -f over an existing file: refused before anything replaces it.
echo keep >"$T/old.safetensors"
expect_rc 2 "$NPUC_BIN" quantize "$T/in.safetensors" -o "$T/old.safetensors" -f --format compressed-tensors
[ "$(cat "$T/old.safetensors")" = keep ] || fail "the existing output was replaced"
# The same through every pass command's shared option and convert.
expect_rc 2 "$NPUC_BIN" prune "$T/in.safetensors" -o "$T/p.safetensors" --sparsity 0.5 --format compressed-tensors
must_match "$T/err" "compressed-tensors' is written only as a checkpoint directory"
# The default (npuc) with a file output is fine, and so is compressed-tensors
# with a directory output.
expect_rc 0 "$NPUC_BIN" quantize "$T/in.safetensors" -o "$T/q.safetensors" --bits 4 --format npuc -q
expect_rc 0 "$NPUC_BIN" quantize "$T/in.safetensors" -o "$T/ctdir" --bits 4 --format compressed-tensors -q
"$PY" -c 'import json,sys; c=json.load(open(sys.argv[1])); q=c["quantization_config"]; assert q["quant_method"] == "compressed-tensors", q' \
    "$T/ctdir/config.json"
# ... and it holds the same values as --fake-quant (ct_check.py reads the
# compressed-tensors layout from its specification).
expect_rc 0 "$NPUC_BIN" decompress "$T/ctdir" -o "$T/ctd" -q
expect_rc 0 "$NPUC_BIN" quantize "$T/in.safetensors" -o "$T/fq.safetensors" --bits 4 --fake-quant -q
"$PY" "$TESTLIB/ct_check.py" dense "$T/ctd" "$T/fq.safetensors"
echo "ct_single_file: ok"
