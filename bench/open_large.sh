#!/usr/bin/env bash
# Opening a large safetensors file reads the header only.
#
#   bench/open_large.sh [NPUC_BIN] [GiB]
#
# Writes a sparse safetensors file of GiB (default 2) GiB with 64 F32 tensors
# (the payload is a hole: reading it would show up as resident memory), then
# runs `npuc info` and `npuc validate` (not --deep) on it and prints the wall
# time, peak RSS and bytes read from the file, measured by the kernel.
set -euo pipefail
bin=${1:-build/npuc}
gib=${2:-2}
py=/usr/bin/python3; [ -x "$py" ] || py=python3
dir=$(mktemp -d "${TMPDIR:-/tmp}/npuc-open.XXXXXX")
trap 'rm -rf "$dir"' EXIT
f="$dir/large.safetensors"
"$py" - "$f" "$gib" <<'PY'
import json, struct, sys
path, gib = sys.argv[1], float(sys.argv[2])
n = 64
per = int(gib * (1 << 30)) // n // 4 // 1024 * 1024   # floats per tensor, a multiple of 1024
hdr, off = {"__metadata__": {"format": "pt"}}, 0
for i in range(n):
    hdr[f"layers.{i}.weight"] = {"dtype": "F32", "shape": [per // 1024, 1024], "data_offsets": [off, off + per * 4]}
    off += per * 4
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
with open(path, "wb") as fp:
    fp.write(struct.pack("<Q", len(h)) + h)
    fp.truncate(8 + len(h) + off)
PY
size=$(stat -c %s "$f")
echo "file: $(awk -v s="$size" 'BEGIN{printf "%.2f GiB", s/2^30}') ($size bytes), 64 tensors, sparse payload"
for cmd in info validate; do
    "$py" - "$bin" "$cmd" "$f" <<'PY'
import resource, subprocess, sys, time
bin_, cmd, f = sys.argv[1:4]
t0 = time.perf_counter()
p = subprocess.Popen([bin_, cmd, f], stdout=subprocess.DEVNULL)
_, status, ru = __import__("os").wait4(p.pid, 0)
dt = time.perf_counter() - t0
print(f"npuc {cmd:8s}: exit {status >> 8}, {dt * 1000:7.1f} ms wall, peak RSS {ru.ru_maxrss / 1024:6.1f} MiB, "
      f"blocks read {ru.ru_inblock}")
PY
done
