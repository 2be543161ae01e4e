#!/usr/bin/env bash
# Runs one libFuzzer target for a while over its corpus (docs/fuzzing.md).
#
#   fuzz/run.sh TARGET SECONDS [JOBS]
#
# TARGET is one of safetensors hdf5 recipe artifact pairs graph gguf checkpoint keras calib imatrix onnx kconfig.  Builds the
# fuzz tree (clang-14, NPUC_FUZZ=ON NPUC_SANITIZE=ON) in $NPUC_FUZZ_BUILD
# (default build-fuzz/ at the top of the source tree) when needed, then runs
# fuzz_TARGET under nice for SECONDS seconds (JOBS > 1: libFuzzer's fork
# mode with JOBS workers, which keeps going after a crash).  Inputs the fuzzer
# makes are at most a target's max_len bytes ($NPUC_FUZZ_MAX_LEN overrides),
# so the corpora stay small; seeds may be larger.  New inputs go to
# a scratch folder and are merged back into fuzz/corpus/TARGET/ only when
# they add coverage (-merge=1; the merge also drops earlier finds that no
# longer add any, never the named seeds and regression files).  Crashes, leaks, timeouts and out-of-memory
# inputs are saved under fuzz/crashes/TARGET/, the fuzzer's log as
# fuzz/crashes/TARGET.log; the script prints executions,
# the corpus before and after, and exits 1 when a crash was saved.
set -euo pipefail

usage() { echo "usage: $0 TARGET SECONDS [JOBS]   (TARGET: safetensors hdf5 recipe artifact pairs graph gguf checkpoint keras calib imatrix onnx kconfig)" >&2; exit 2; }
[[ $# -ge 2 && $# -le 3 ]] || usage
target=$1 secs=$2 jobs=${3:-1}
case $target in safetensors|hdf5|recipe|artifact|pairs|graph|gguf|checkpoint|keras|calib|imatrix|onnx|kconfig) ;; *) usage ;; esac
[[ $secs =~ ^[1-9][0-9]*$ && $jobs =~ ^[1-9][0-9]*$ ]] || usage

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
build=${NPUC_FUZZ_BUILD:-$src/build-fuzz}
cc=${CC_FUZZ:-clang-14}

if [[ ! -f $build/CMakeCache.txt ]]; then
  CC=$cc cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNPUC_FUZZ=ON -DNPUC_SANITIZE=ON \
    -DNPUC_BUILD_TESTS=OFF -DNPUC_BUILD_BENCH=OFF >/dev/null
fi
nice cmake --build "$build" --target "fuzz_$target" -j"$(nproc)" >/dev/null
bin=$build/fuzz/fuzz_$target

corpus=$here/corpus/$target
crashes=$here/crashes/$target
mkdir -p "$corpus" "$crashes"
case $target in
  hdf5) max_len=65536 ;;      # HDF5 files are rarely smaller than a few KiB
  artifact|keras) max_len=16384 ;;  # a .keras archive holds an HDF5 file
  checkpoint|calib) max_len=8192 ;;  # an index and two shards; a few small tensors
  *) max_len=4096 ;;
esac
max_len=${NPUC_FUZZ_MAX_LEN:-$max_len}
scratch=$(mktemp -d "${TMPDIR:-/tmp}/npuc-fuzz-$target.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
mkdir "$scratch/new"

count() { find "$1" -maxdepth 1 -type f ! -name '.*' | wc -l; }
size() { find "$1" -maxdepth 1 -type f ! -name '.*' -printf '%s\n' | awk '{s += $1} END {printf "%d", (s + 1023) / 1024}'; }
before_n=$(count "$corpus") before_k=$(size "$corpus")
crash_before=$(count "$crashes")

export LSAN_OPTIONS="suppressions=$here/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
args=(-max_total_time="$secs" -rss_limit_mb=2048 -timeout=30 -max_len="$max_len" -print_final_stats=1
      -artifact_prefix="$crashes/")
if ((jobs > 1)); then args+=(-fork="$jobs" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1); fi

log=$here/crashes/$target.log
echo "fuzz/run.sh: $target for ${secs}s with $jobs job(s); log $log"
set +e
(cd "$scratch" && nice "$bin" "${args[@]}" "$scratch/new" "$corpus") >"$log" 2>&1
rc=$?
set -e

# Executions: the final stats (one process), else the last status line (fork mode).
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
[[ -n $execs ]] || execs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#')

# Minimising merge: the named files (seeds, regression inputs) always stay;
# of the fuzzer's finds (40-hex names), old and new, only those adding
# coverage beyond them are kept.
mkdir "$scratch/merged" "$scratch/old"
find "$corpus" -maxdepth 1 -regextype posix-extended -type f ! -name '.*' ! -regex '.*/[0-9a-f]{40}' -exec cp {} "$scratch/merged/" \;
find "$corpus" -maxdepth 1 -regextype posix-extended -type f -regex '.*/[0-9a-f]{40}' -exec cp {} "$scratch/old/" \;
if "$bin" -merge=1 -rss_limit_mb=2048 -timeout=30 "$scratch/merged" "$scratch/old" "$scratch/new" \
     >"$scratch/merge.log" 2>&1; then
  find "$corpus" -maxdepth 1 -regextype posix-extended -type f -regex '.*/[0-9a-f]{40}' -delete
  find "$scratch/merged" -maxdepth 1 -regextype posix-extended -type f -regex '.*/[0-9a-f]{40}' -exec cp {} "$corpus/" \;
else
  echo "fuzz/run.sh: merge failed, corpus left as it was:" >&2
  tail -20 "$scratch/merge.log" >&2
fi

after_n=$(count "$corpus") after_k=$(size "$corpus")
crash_after=$(count "$crashes")
echo "fuzz/run.sh: $target: ${execs:-?} executions in ${secs}s, exit $rc; corpus $before_n files ${before_k} KiB -> $after_n files ${after_k} KiB"
if ((crash_after > crash_before)); then
  echo "fuzz/run.sh: $target: $((crash_after - crash_before)) new crash file(s) in $crashes:" >&2
  ls -t "$crashes" | head -$((crash_after - crash_before)) >&2
  grep -E 'ERROR: |SUMMARY: |runtime error' "$log" | head -20 >&2
  exit 1
fi
if ((rc != 0)); then
  echo "fuzz/run.sh: $target: the fuzzer exited $rc without saving a crash:" >&2
  tail -20 "$log" >&2
  exit 1
fi
