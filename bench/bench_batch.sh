#!/usr/bin/env bash
# Batch throughput: `npuc batch` over a generated zoo of small models with
# -j 1 and -j 2 (worker processes), side by side, with the machine's load.
#
#   bench/bench_batch.sh [NPUC_BIN] [FILES] [RECIPE]
#
# Defaults: build/npuc, 200 files (a third HDF5, the rest safetensors, made by
# tests/cli/lib/make_zoo.py), samples/recipes/fold_int8.yaml when fold-bn is
# built, else int8_per_channel.yaml.  Each -j value runs REPS times (default
# 3) into a fresh output folder after one warm-up run; the best wall time is
# reported.  Prints files/s, input MB/s, the -j 2 / -j 1 speedup, and
# `uptime` before and after, since other work on the machine changes the
# figures.  Checks that the -j 1 and -j 2 artifacts are byte-identical.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
npuc=${1:-$here/build/npuc}
files=${2:-200}
reps=${REPS:-3}
py=${PYTHON:-/usr/bin/python3}
[ -x "$npuc" ] || { echo "bench_batch: $npuc is not built" >&2; exit 1; }
recipe=${3:-$here/samples/recipes/fold_int8.yaml}
T=$(mktemp -d "${TMPDIR:-/tmp}/npuc-bench-batch.XXXXXX")
trap 'rm -rf "$T"' EXIT
if ! "$npuc" run -q "$recipe" "$here/samples/cnn_bn.safetensors" -o "$T/probe.safetensors" >/dev/null 2>&1; then
    recipe=$here/samples/recipes/int8_per_channel.yaml
fi

"$py" "$here/tests/cli/lib/make_zoo.py" "$T/zoo" "$files" >"$T/convert.txt"
while read -r p; do
    "$npuc" convert -q "$p" -o "${p%.safetensors}.h5"
    rm "$p"
done <"$T/convert.txt"
bytes=$(find "$T/zoo" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
nh5=$(find "$T/zoo" -name '*.h5' | wc -l)

echo "npuc batch throughput: $files models ($nh5 HDF5), $(awk -v b="$bytes" 'BEGIN {printf "%.2f MB", b / 1e6}') in total"
echo "recipe: ${recipe#"$here"/}   cores: $(nproc)   reps: $reps (best of)"
echo "load before: $(uptime)"
declare -A best
for j in 1 2; do
    "$npuc" batch -q "$recipe" --input "$T/zoo" --output "$T/warm$j" -j "$j" >/dev/null
    best[$j]=""
    for r in $(seq "$reps"); do
        rm -rf "$T/out$j"
        t0=$(date +%s.%N)
        "$npuc" batch -q "$recipe" --input "$T/zoo" --output "$T/out$j" -j "$j" >/dev/null
        t1=$(date +%s.%N)
        dt=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')
        if [ -z "${best[$j]}" ] || awk -v a="$dt" -v b="${best[$j]}" 'BEGIN {exit !(a < b)}'; then best[$j]=$dt; fi
    done
    printf '  -j %d  %7.3f s  %7.1f files/s  %6.2f MB/s\n' "$j" "${best[$j]}" \
        "$(awk -v n="$files" -v t="${best[$j]}" 'BEGIN {print n / t}')" \
        "$(awk -v b="$bytes" -v t="${best[$j]}" 'BEGIN {print b / 1e6 / t}')"
done
printf '  speedup -j 2 / -j 1: %.2fx\n' "$(awk -v a="${best[1]}" -v b="${best[2]}" 'BEGIN {print a / b}')"
echo "load after:  $(uptime)"
diff -r -q -x '*.report.json' "$T/out1" "$T/out2" >/dev/null || { echo "bench_batch: -j 1 and -j 2 artifacts differ" >&2; exit 1; }
echo "artifacts of -j 1 and -j 2 byte-identical"
