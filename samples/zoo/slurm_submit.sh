#!/usr/bin/env bash
# Submits the zoo as a Slurm job array of N tasks and a merge job that runs
# when they have all ended (afterany: a task with a failed file still lets
# the merge run and report it).
#
#   samples/zoo/slurm_submit.sh RECIPE ZOO_DIR OUT_DIR N
#
# Prints the array's and the merge job's ids.  OUT_DIR/summary.json appears
# when the merge job is done; its exit status (sacct) is 0 only when every
# file of the zoo succeeded.  Paths are made absolute, since jobs start in
# the submit directory on whatever node they land.
set -euo pipefail
[ $# -eq 4 ] || { echo "usage: $0 RECIPE ZOO_DIR OUT_DIR N" >&2; exit 2; }
here=$(dirname "$(realpath "$0")")
recipe=$(realpath "$1") zoo=$(realpath "$2") out=$3 n=$4
mkdir -p "$out"
out=$(realpath "$out")
npuc=${NPUC:-npuc}
array=$(sbatch --parsable --array=0-$((n - 1)) --output="$out/slurm-%A_%a.log" \
    --export=ALL,NPUC="$npuc" "$here/slurm_array.sbatch" "$recipe" "$zoo" "$out")
summaries=""
for k in $(seq 0 $((n - 1))); do summaries="$summaries $out/summary.$k.json"; done
merge=$(sbatch --parsable --dependency=afterany:"$array" --output="$out/slurm-merge-%j.log" \
    --wrap="$npuc batch --merge-summaries $out/summary.json$summaries")
echo "array $array merge $merge"
