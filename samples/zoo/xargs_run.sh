#!/usr/bin/env bash
# One machine, one `npuc run` per file, N at a time with xargs -P.
#
#   samples/zoo/xargs_run.sh RECIPE ZOO_DIR OUT_DIR [JOBS]
#
# Every .safetensors / .h5 / .hdf5 / .keras file under ZOO_DIR (a symlink to
# a file too, as `npuc batch` takes it; folder symlinks are not entered) becomes
# OUT_DIR/<same relative path> with its report beside it
# (<out>.report.json).  A file that already has an output is skipped (npuc
# writes outputs whole through a temporary file and rename, so an output
# that exists is complete; `npuc batch --resume` also checks that it was made
# by the same recipe from the same input).  Each `npuc run` runs with -j 1:
# the parallelism is across files.  Exit status: 0 when every file
# succeeded, 123 (xargs) when any failed; the failures' errors are on stderr.
# Environment: NPUC (the npuc binary, default "npuc").
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 RECIPE ZOO_DIR OUT_DIR [JOBS]" >&2; exit 2; }
recipe=$1 zoo=${2%/} out=${3%/} jobs=${4:-$(nproc)}
export NPUC=${NPUC:-npuc} RECIPE=$recipe ZOO=$zoo OUT=$out

one() { # one relative path
    local rel=${1#./} dst
    dst="$OUT/$rel"
    [ -e "$dst" ] && return 0
    mkdir -p "$(dirname "$dst")"
    "$NPUC" run -q -j 1 "$RECIPE" "$ZOO/$rel" -o "$dst" --report "$dst.report.json" >/dev/null
}
export -f one

(cd "$zoo" && find . -xtype f \( -name '*.safetensors' -o -name '*.st' -o -name '*.h5' -o -name '*.hdf5' \
    -o -name '*.keras' \) -print0 | LC_ALL=C sort -z) |
    xargs -0 -P "$jobs" -n 1 bash -c 'one "$1"' _
