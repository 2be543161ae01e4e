#!/usr/bin/env bash
# ONNX with external data against safetensors (docs/onnx.md "Measured"):
# `npuc quantize --bits 8 --per-channel` of the same weights, to a
# safetensors artifact, timed in alternating runs; prints each run's wall
# time and peak RSS (/usr/bin/time -v), the medians, the ONNX / safetensors
# ratio and peak RSS over the largest tensor.  Goals: ratio <= 1.3, peak
# below 3x the largest tensor.
#
#   bench/bench_onnx.sh [NPUC_BIN]
#
# The model: 16 MatMuls with 4096 x 4096 F32 weights (1 GiB), a chain
# x [1,4096] -> ... -> y, written with NumPy and python3-onnx into a scratch
# folder: the ONNX graph with every weight in model.onnx.data (external
# data: location / offset / length), and the same bytes as one safetensors
# file.  REPS (default 3) runs of each; THREADS (default 2) is -j; `uptime`
# before and after, since other work on the machine changes the figures.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
npuc=${1:-$here/build/npuc}
reps=${REPS:-3}
threads=${THREADS:-2}
py=${PYTHON:-/usr/bin/python3}
[ -x "$npuc" ] || { echo "bench_onnx: $npuc is not built" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "bench_onnx: /usr/bin/time is not installed" >&2; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/npuc-bench-onnx.XXXXXX")
trap 'rm -rf "$T"' EXIT

"$py" - "$T" <<'PYEOF'
import json, os, struct, sys
import numpy as np
import onnx
from onnx import TensorProto, helper

d = sys.argv[1]
n, layers = 4096, 16
rng = np.random.default_rng(1)
inits, nodes, hdr, off = [], [], {}, 0
with open(os.path.join(d, "model.onnx.data"), "wb") as f:
    for i in range(layers):
        w = (rng.standard_normal((n, n), dtype=np.float32) / 64).astype(np.float32)
        b = w.tobytes()
        f.write(b)
        t = TensorProto(name=f"w{i}", data_type=TensorProto.FLOAT, dims=[n, n])
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", "model.onnx.data"), ("offset", str(off)), ("length", str(len(b)))):
            e = t.external_data.add()
            e.key, e.value = k, v
        inits.append(t)
        hdr[f"w{i}"] = {"dtype": "F32", "shape": [n, n], "data_offsets": [off, off + len(b)]}
        nodes.append(helper.make_node("MatMul", ["x" if i == 0 else f"h{i}", f"w{i}"],
                                      ["y" if i == layers - 1 else f"h{i + 1}"]))
        off += len(b)
g = helper.make_graph(nodes, "bench", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], inits)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="bench_onnx")
m.ir_version = 7
with open(os.path.join(d, "model.onnx"), "wb") as f:
    f.write(m.SerializeToString())
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
with open(os.path.join(d, "model.safetensors"), "wb") as out, open(os.path.join(d, "model.onnx.data"), "rb") as f:
    out.write(struct.pack("<Q", len(h)) + h)
    while True:
        c = f.read(1 << 26)
        if not c:
            break
        out.write(c)
PYEOF

largest=$((4096 * 4096 * 4))
echo "bench_onnx: 16 x [4096,4096] F32 (1 GiB), largest tensor $((largest >> 20)) MiB, -j $threads, $reps runs each"
echo "load before: $(uptime)"
# The same work on both sides: the ONNX graph states each MatMul weight [K, N] (layout io, channels
# along axis 1); a safetensors file states no layout, and npuc's guess by rank would quantize along
# axis 0 (oi), a different computation, so the safetensors run states io.
run() { # FILE [FLAGS] -> "seconds kib"
    local f=$1
    shift
    /usr/bin/time -v "$npuc" quantize -f --bits 8 --per-channel -j "$threads" "$@" "$f" -o "$T/out.safetensors" \
        >/dev/null 2>"$T/time" || { cat "$T/time" >&2; exit 1; }
    local wall kib
    wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; print s}' "$T/time")
    kib=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$T/time")
    echo "$wall $kib"
}
onnx_t=() st_t=() onnx_r=() st_r=()
for i in $(seq "$reps"); do
    read -r t r < <(run "$T/model.onnx"); onnx_t+=("$t"); onnx_r+=("$r")
    echo "  run $i onnx:        ${t} s, peak RSS $((r / 1024)) MiB"
    read -r t r < <(run "$T/model.safetensors" --layout '.*=io'); st_t+=("$t"); st_r+=("$r")
    echo "  run $i safetensors: ${t} s, peak RSS $((r / 1024)) MiB"
done
echo "load after:  $(uptime)"
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
mo=$(median "${onnx_t[@]}") ms=$(median "${st_t[@]}")
ro=$(median "${onnx_r[@]}") rs=$(median "${st_r[@]}")
awk -v mo="$mo" -v ms="$ms" -v ro="$ro" -v rs="$rs" -v big="$largest" 'BEGIN {
    printf "median wall: onnx %.2f s, safetensors %.2f s, ratio %.2f (goal <= 1.3)\n", mo, ms, mo / ms
    printf "median peak RSS: onnx %.1f MiB (%.2fx the largest tensor, goal < 3), safetensors %.1f MiB (%.2fx)\n",
           ro / 1024, ro * 1024 / big, rs / 1024, rs * 1024 / big }'
