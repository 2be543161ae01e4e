#!/usr/bin/env bash
# GNU parallel over shards: N `npuc batch --shard K/N` runs (each with its own
# worker processes), on this machine or over --sshlogin hosts, then one
# merged summary.
#
#   samples/zoo/parallel_shards.sh RECIPE ZOO_DIR OUT_DIR SHARDS [JOBS_PER_SHARD]
#
# Shard K takes files K, K+N, K+2N, ... of the zoo's sorted file list, so the
# shards split the zoo without talking to each other.  Each writes
# OUT_DIR/summary.K.json; `npuc batch --merge-summaries` then writes
# OUT_DIR/summary.json, which lists the same files as an unsharded run would.
# Runs are --resume: rerun the script after a failure or a lost host and only
# missing outputs are computed.  Set NPUC_SSHLOGIN as for parallel_run.sh to
# use several hosts (shared file system).  Exit status: 0 when every file
# succeeded, 1 when any failed or is missing from the summaries.
set -euo pipefail
[ $# -ge 4 ] || { echo "usage: $0 RECIPE ZOO_DIR OUT_DIR SHARDS [JOBS_PER_SHARD]" >&2; exit 2; }
recipe=$(realpath "$1") zoo=$(realpath "$2") out=$3 n=$4 per=${5:-1}
mkdir -p "$out"
out=$(realpath "$out")
npuc=${NPUC:-npuc}
# parallel runs its command through a shell: quote what we paste into it.
printf -v qr %q "$recipe"; printf -v qz %q "$zoo"; printf -v qo %q "$out"; printf -v qn %q "$npuc"
login=()
[ -n "${NPUC_SSHLOGIN:-}" ] && login=(--sshlogin "$NPUC_SSHLOGIN")

# A shard with a failed file exits 1; go on and merge anyway.
seq 0 $((n - 1)) | parallel --will-cite --halt never -j "$n" "${login[@]}" \
    "$qn batch -q $qr --input $qz --output $qo --shard {}/$n -j $per --resume --summary $qo/summary.{}.json >/dev/null" || true
summaries=()
for k in $(seq 0 $((n - 1))); do summaries+=("$out/summary.$k.json"); done
exec "$npuc" batch --merge-summaries "$out/summary.json" "${summaries[@]}"
