#!/usr/bin/env bash
# A write that fails half-way (here: a file-size limit, `ulimit -f`, which
# fails write() with EFBIG exactly as a full disk fails it with ENOSPC):
# exit 1, one line naming the output, the tensor and the reason, no output
# file and no temporary file left, the input untouched.  Covers the
# safetensors writer, the HDF5 writer (HDF5 1.10 used to crash at exit
# after such a failure), quantize, and `npuc run` with a streamed quantize
# step.
source "$(dirname "$0")/lib/cli_test.bash"

"$PY" - "$T/big.safetensors" <<'PY'
import json, struct, sys
import numpy as np
rng = np.random.default_rng(0)
ts = {f"l{i}.weight": rng.standard_normal((512, 1024)).astype(np.float32) for i in range(4)}
hdr, off, blobs = {}, 0, []
for k, v in ts.items():
    b = v.tobytes()
    hdr[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
    off += len(b)
    blobs.append(b)
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
in="$T/big.safetensors" # 4 x 2 MiB
sum0=$(sha256sum "$in" | cut -d' ' -f1)
mkdir "$T/o"
cat >"$T/r.yaml" <<'EOF'
version: 1
steps:
  - prune:
      sparsity: 0.5
  - quantize:
      bits: 8
      fake_quant: true
EOF

limited() { # limited KIB CMD...: CMD with files capped at KIB KiB
    local kib=$1
    shift
    (
        ulimit -f "$kib"
        exec "$@"
    )
}

n=0
while read -r kib name cmd; do
    n=$((n + 1))
    out="$T/o/$name"
    # shellcheck disable=SC2086
    expect_rc 1 limited "$kib" "$NPUC_BIN" $cmd -o "$out"
    [ "$(wc -l <"$T/err")" -eq 1 ] || fail "$name: not one line: $(cat "$T/err")"
    must_match "$T/err" "^npuc: error: .*$name.*tensor 'l[0-9]\.weight'.*File too large"
    [ -z "$(ls -A "$T/o")" ] || fail "$name: left $(ls -A "$T/o")"
    [ "$(sha256sum "$in" | cut -d' ' -f1)" = "$sum0" ] || fail "$name: the input changed"
    # Without the limit the same command works: the failure was the limit's.
    expect_rc 0 "$NPUC_BIN" $cmd -o "$out" -q
    rm -f "$out"
done <<EOF
5000 c.safetensors convert $in
5000 c.h5 convert $in
5000 q.safetensors quantize --fake-quant $in
5000 r.safetensors run $T/r.yaml $in
EOF
[ "$n" -eq 4 ] || fail "ran $n cases"
echo "ok"
