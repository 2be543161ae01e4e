#!/usr/bin/env bash
# The cost of the contained HDF5 reader (docs/hdf5-containment.md): end-to-end
# `npuc quantize`, `npuc info` and `npuc validate --deep` on one valid
# Keras-layout HDF5 model, contained (the default) against in-process
# (NPUC_H5_INPROCESS=1), in alternating runs; prints the median wall times
# and the contained / in-process ratio.  The goal is <= 1.10.
#
#   bench/bench_h5_contain.sh [NPUC_BIN] [MIB]
#
# Defaults: build/npuc, a 512 MiB model (MIB 256..1024 as the issue asks;
# float32 dense layers of 2048 x 2048 in Keras 2 save_weights layout, written
# by h5py, uncompressed like Keras writes them, plus a bias per layer).
# REPS (default 5) pairs per command; `uptime` before and after, since other
# work on the machine changes the figures.  THREADS (default 2) is -j.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
npuc=${1:-$here/build/npuc}
mib=${2:-512}
reps=${REPS:-5}
threads=${THREADS:-2}
py=${PYTHON:-/usr/bin/python3}
[ -x "$npuc" ] || { echo "bench_h5_contain: $npuc is not built" >&2; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/npuc-bench-h5.XXXXXX")
trap 'rm -rf "$T"' EXIT

"$py" - "$T/model.h5" "$mib" <<'PYEOF'
import sys
import h5py
import numpy as np
path, mib = sys.argv[1], int(sys.argv[2])
n = max(1, mib // 16)  # 2048 x 2048 float32 = 16 MiB per layer
rng = np.random.default_rng(0)
with h5py.File(path, "w") as f:
    names = [f"dense_{i}" for i in range(n)]
    f.attrs["layer_names"] = np.array([s.encode() for s in names])
    f.attrs["backend"] = "tensorflow"
    f.attrs["keras_version"] = "2.13.1"
    for s in names:
        g = f.create_group(s)
        w = [f"{s}/kernel:0".encode(), f"{s}/bias:0".encode()]
        g.attrs["weight_names"] = np.array(w)
        g.create_dataset(f"{s}/kernel:0", data=rng.standard_normal((2048, 2048), dtype=np.float32))
        g.create_dataset(f"{s}/bias:0", data=rng.standard_normal(2048, dtype=np.float32))
PYEOF
size=$(stat -c %s "$T/model.h5")

# One timed run: prints seconds.
run() { # MODE CMD...
    local mode=$1 t0 t1
    shift
    t0=$(date +%s.%N)
    if [ "$mode" = in ]; then NPUC_H5_INPROCESS=1 "$@" >/dev/null; else env -u NPUC_H5_INPROCESS "$@" >/dev/null; fi
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l
}

median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

echo "contained vs in-process HDF5 reading: $(awk -v b="$size" 'BEGIN {printf "%.1f MiB", b / 1048576}') Keras 2 model, $reps alternating pairs, -j $threads, cores: $(nproc)"
echo "load before: $(uptime)"
printf '%-16s %12s %12s %8s\n' command "in-process s" "contained s" ratio
worst=0
for name in quantize info validate; do
    case $name in
    quantize) cmd=("$npuc" quantize -q -j "$threads" "$T/model.h5" -o "$T/q.safetensors" -f) ;;
    info) cmd=("$npuc" info "$T/model.h5") ;;
    validate) cmd=("$npuc" validate --deep "$T/model.h5") ;;
    esac
    run in "${cmd[@]}" >/dev/null # warm the page cache
    : >"$T/in.txt"
    : >"$T/co.txt"
    for ((r = 0; r < reps; r++)); do
        # Alternate which goes first, so drift in the machine's load falls on both.
        if ((r % 2)); then
            run co "${cmd[@]}" >>"$T/co.txt"
            run in "${cmd[@]}" >>"$T/in.txt"
        else
            run in "${cmd[@]}" >>"$T/in.txt"
            run co "${cmd[@]}" >>"$T/co.txt"
        fi
    done
    mi=$(median <"$T/in.txt")
    mc=$(median <"$T/co.txt")
    ratio=$(echo "$mc / $mi" | bc -l)
    printf '%-16s %12.3f %12.3f %8.3f\n' "$name" "$mi" "$mc" "$ratio"
done
echo "load after: $(uptime)"
echo "goal: contained / in-process <= 1.10 (quantize is the end-to-end throughput figure)"
