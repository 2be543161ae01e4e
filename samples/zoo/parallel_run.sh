#!/usr/bin/env bash
# GNU parallel: one `npuc run` per file, on this machine or on several.
#
#   samples/zoo/parallel_run.sh RECIPE ZOO_DIR OUT_DIR [JOBS]
#
# Like xargs_run.sh (the same files: symlinks to files followed, as
# `npuc batch` does), with GNU parallel's job log (OUT_DIR/parallel.log: one
# line per file with its exit code and run time) and its --sshlogin: set
# NPUC_SSHLOGIN to spread the files over several hosts, e.g.
#
#   NPUC_SSHLOGIN=":,4/gpu1,4/gpu2" samples/zoo/parallel_run.sh r.yaml /shared/zoo /shared/out
#
# (":" is this machine, "4/gpu1" four jobs on host gpu1).  Remote hosts need
# npuc on their PATH (or NPUC set to its path on every host) and ZOO_DIR,
# OUT_DIR and RECIPE at the same paths, i.e. a shared file system; outputs
# are written whole through a temporary file and rename, so concurrent hosts
# never see half an artifact.  --resume-failed reruns only the failed files
# of an earlier run with the same job log.  Exit status: the number of failed
# files (0..100), as GNU parallel reports it.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 RECIPE ZOO_DIR OUT_DIR [JOBS]" >&2; exit 2; }
recipe=$(realpath "$1") zoo=$(realpath "$2") out=$3 jobs=${4:-100%}
mkdir -p "$out"
out=$(realpath "$out")
npuc=${NPUC:-npuc}
# parallel runs its command through a shell: quote what we paste into it.
printf -v qr %q "$recipe"; printf -v qz %q "$zoo"; printf -v qo %q "$out"; printf -v qn %q "$npuc"
login=()
[ -n "${NPUC_SSHLOGIN:-}" ] && login=(--sshlogin "$NPUC_SSHLOGIN")

(cd "$zoo" && find . -xtype f \( -name '*.safetensors' -o -name '*.st' -o -name '*.h5' -o -name '*.hdf5' \
    -o -name '*.keras' \) | sed 's|^\./||' | LC_ALL=C sort) |
    parallel --will-cite --halt never -j "$jobs" "${login[@]}" --joblog "$out/parallel.log" \
        "mkdir -p \$(dirname $qo/{}) && [ -e $qo/{} ] || $qn run -q -j 1 $qr $qz/{} -o $qo/{} --report $qo/{}.report.json >/dev/null"
