#!/usr/bin/env bash
# Issue 31 item 3: a tensor whose role is bias, norm or BatchNorm statistic is
# never quantized or pruned, even when a pattern (or the rank >= 2 default)
# matches it; the per-tensor line says so.  Only an explicit per-tensor
# request, an --include rule naming the tensor exactly ('^NAME$'), asks.
# The Paddle-style file is written here with NumPy; outputs are read back with
# the reader of tests/cli/lib/npuc_test.py (from the safetensors spec).
source "$(dirname "$0")/lib/cli_test.bash"

"$PY" - "$T/pd.safetensors" "$TESTLIB" <<'EOF_PY'
import sys
sys.path.insert(0, sys.argv[2])
import numpy as np
from io_models import write
r = np.random.default_rng(3)
write(sys.argv[1], [
    ("batch_norm_3.b_0", r.standard_normal(16)), ("batch_norm_3.w_0", r.uniform(0.5, 1.5, 16)),
    ("batch_norm_3.w_1", r.standard_normal(16)), ("batch_norm_3.w_2", r.uniform(0.5, 2, 16)),
    ("conv2d_107.b_0", r.standard_normal(16)), ("conv2d_107.w_0", r.standard_normal((16, 8, 3, 3))),
    ("conv2d_transpose_1.b_0", r.standard_normal((1, 24, 1, 1))),
    ("conv2d_transpose_1.w_0", r.standard_normal((16, 24, 2, 2))),
    ("layer_norm_0.w_0", r.uniform(0.5, 1.5, 64)), ("linear_2.w_0", r.standard_normal((64, 32)))])
EOF_PY

# values DIR/A DIR/B NAME...: the named tensors are byte-identical in A and B.
same() {
    "$PY" - "$@" "$TESTLIB" <<'EOF_PY'
import sys
sys.path.insert(0, sys.argv[-1])
from npuc_test import read_st
a = {n: (d, s, b) for n, d, s, b in read_st(sys.argv[1])[1]}
b = {n: (d, s, b) for n, d, s, b in read_st(sys.argv[2])[1]}
for name in sys.argv[3:-1]:
    assert a[name] == b[name], f"{name} changed: {a[name][:2]} -> {b[name][:2]}"
EOF_PY
}
# quantized NAME ART: the artifact's npuc metadata lists NAME as quantized.
quantized() {
    "$PY" - "$@" "$TESTLIB" <<'EOF_PY'
import json, sys
sys.path.insert(0, sys.argv[-1])
from npuc_test import read_st
meta, ts = read_st(sys.argv[2])
ents = json.loads(meta["npuc"])["tensors"]
e = ents.get(sys.argv[1]) if isinstance(ents, dict) else next((x for x in ents if x.get("name") == sys.argv[1]), None)
assert e is not None and e.get("bits", 0) > 0, (sys.argv[1], e)
EOF_PY
}

# --include conv2d_107 matches the bias too: the weight is quantized, the bias kept.
expect_rc 0 "$NPUC_BIN" quantize "$T/pd.safetensors" -o "$T/q.safetensors" --include conv2d_107 --bits 4
must_match "$T/out" "conv2d_107\\.b_0 .*role bias: a bias tensor, left as is"
same "$T/pd.safetensors" "$T/q.safetensors" conv2d_107.b_0
quantized conv2d_107.w_0 "$T/q.safetensors"
# Patterns over BatchNorm and norm tensors: all kept, each said.
expect_rc 0 "$NPUC_BIN" quantize "$T/pd.safetensors" -o "$T/qbn.safetensors" --include 'batch_norm|layer_norm|linear'
for n in batch_norm_3.b_0 batch_norm_3.w_0 batch_norm_3.w_1 batch_norm_3.w_2 layer_norm_0.w_0; do
    must_match "$T/out" "${n//./\\.} .*left as is"
done
same "$T/pd.safetensors" "$T/qbn.safetensors" batch_norm_3.b_0 batch_norm_3.w_0 batch_norm_3.w_1 batch_norm_3.w_2 layer_norm_0.w_0
# The default selection (rank >= 2) leaves the [1,24,1,1] bias too.
expect_rc 0 "$NPUC_BIN" quantize "$T/pd.safetensors" -o "$T/qd.safetensors"
same "$T/pd.safetensors" "$T/qd.safetensors" conv2d_transpose_1.b_0
# An --include naming the tensor exactly is the explicit per-tensor override.
expect_rc 0 "$NPUC_BIN" quantize "$T/pd.safetensors" -o "$T/qx.safetensors" --include '^conv2d_107\.b_0$' --bits 8
quantized conv2d_107.b_0 "$T/qx.safetensors"
# ... anchored but not a literal name is a pattern, not an override.
expect_rc 0 "$NPUC_BIN" quantize "$T/pd.safetensors" -o "$T/qy.safetensors" --include '^conv2d_10[0-9]\.b_0$' --bits 8
must_match "$T/out" "conv2d_107\\.b_0 .*left as is"
same "$T/pd.safetensors" "$T/qy.safetensors" conv2d_107.b_0

# Magnitude prune, default selection (rank >= 2) and a pattern: the Paddle
# transposed-conv bias [1,24,1,1] keeps every value; the weights lose half.
for sel in "" "--include conv2d_transpose_1"; do
    rm -f "$T/p.safetensors"
    # shellcheck disable=SC2086
    expect_rc 0 "$NPUC_BIN" prune "$T/pd.safetensors" -o "$T/p.safetensors" --sparsity 0.5 --scope layer $sel
    must_match "$T/out" "conv2d_transpose_1\\.b_0 .*role bias: a bias tensor, left as is"
    same "$T/pd.safetensors" "$T/p.safetensors" conv2d_transpose_1.b_0
    "$PY" - "$T/p.safetensors" "$TESTLIB" <<'EOF_PY'
import sys
sys.path.insert(0, sys.argv[2])
import numpy as np
from npuc_test import read_st
t = {n: np.frombuffer(b, "<f4") for n, d, s, b in read_st(sys.argv[1])[1]}
w = t["conv2d_transpose_1.w_0"]
assert (w == 0).sum() == w.size // 2, (w == 0).sum()
EOF_PY
done
expect_rc 0 "$NPUC_BIN" prune "$T/pd.safetensors" -o "$T/px.safetensors" --sparsity 0.5 --scope layer \
    --include '^conv2d_transpose_1\.b_0$'
"$PY" -c 'import sys; sys.path.insert(0, sys.argv[2]); import numpy as np; from npuc_test import read_st
t = {n: np.frombuffer(b, "<f4") for n, d, s, b in read_st(sys.argv[1])[1]}
assert (t["conv2d_transpose_1.b_0"] == 0).sum() == 12' "$T/px.safetensors" "$TESTLIB"
echo "roles_kept: ok"
