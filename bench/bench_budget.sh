#!/usr/bin/env bash
# bench_budget.sh - issue 32's speed goal: one --target-bpw run (measuring
# every candidate of every tensor, then quantizing) against one uniform
# int4 g32 minmax run of the same model, end to end, alternating, medians.
#
#   bench/bench_budget.sh NPUC [TENSORS [ROWS [COLS [REPS]]]]
#     (default 16 x 1024 x 1024 float32, 64 MiB, 3 runs each)
# The model is written by NumPy into a temporary folder; outputs go to
# /dev/shm so the figures are compute, not disk.  Prints both medians and
# the ratio (the issue's goal: at most 10x), with the candidate count.
set -euo pipefail
npuc=${1:?usage: bench_budget.sh NPUC [TENSORS [ROWS [COLS [REPS]]]]}
n=${2:-16} rows=${3:-1024} cols=${4:-1024} reps=${5:-3}
dir=$(mktemp -d)
trap 'rm -rf "$dir" /dev/shm/bench_budget.*.safetensors' EXIT
/usr/bin/python3 - "$dir/m.safetensors" "$n" "$rows" "$cols" "$(dirname "$0")/../tests/cli/lib" <<'PY'
import sys
import numpy as np
sys.path.insert(0, sys.argv[5])
import io_models  # the tests' safetensors writer
path, n, r, c = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(3)
io_models.write(path, [(f"layers.{i}.weight", (rng.standard_t(4, (r, c)) * 0.02 * (1 + i % 4)).astype(np.float32))
                       for i in range(n)], {"format": "pt"})
PY
t() { local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N); awk -v a="$s" -v b="$e" 'BEGIN {printf "%.3f\n", b - a}'; }
u=() b=()
for ((k = 0; k < reps; k++)); do
    u+=("$(t "$npuc" quantize "$dir/m.safetensors" -b 4 -g 32 --scale-dtype f16 --quantize-all -f \
        -o /dev/shm/bench_budget.u.safetensors)")
    b+=("$(t "$npuc" quantize "$dir/m.safetensors" --target-bpw 4 --quantize-all -f \
        -o /dev/shm/bench_budget.b.safetensors)")
done
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
mu=$(med "${u[@]}") mb=$(med "${b[@]}")
echo "model: $n x $rows x $cols float32; outputs on /dev/shm; medians of $reps alternating runs; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "uniform int4 g32 (f16 scales): $mu s"
echo "--target-bpw 4 (56 default candidates measured, then quantized): $mb s"
echo "ratio: $(awk -v a="$mb" -v b="$mu" 'BEGIN {printf "%.2f", a / b}')x (goal: at most 10x)"
