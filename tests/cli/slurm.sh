#!/usr/bin/env bash
# The Slurm job-array example end to end on a single-node cluster started by
# tests/slurm/slurm_local.sh (munge, slurmctld, slurmd on localhost, private
# configuration): samples/zoo/slurm_submit.sh submits a 3-task array of
# `npuc batch --shard K/3` and a dependent merge job; the outputs are
# byte-identical to an unsharded `npuc batch`, and the merged summary lists
# the same files.  Skips (77) when Slurm cannot be installed or started
# within a minute; the packages are installed here, not by .ci/install-deps,
# so only this test pays for them (about 20 s on a fresh machine).
source "$(dirname "$0")/lib/cli_test.bash"

S="$T/slurm"
stop_slurm() { bash "$NPUC_SRC/tests/slurm/slurm_local.sh" stop "$S" || true; }
trap 'rc=$?; stop_slurm; cli_test_exit $rc' EXIT
rc=0
bash "$NPUC_SRC/tests/slurm/slurm_local.sh" start "$S" >"$T/slurm.env" 2>"$T/slurm.err" || rc=$?
cat "$T/slurm.err" >&2
[ "$rc" -eq 77 ] && skip "Slurm is not available here (see above)"
[ "$rc" -eq 0 ] || fail "slurm_local.sh start exited $rc"
# shellcheck disable=SC1091
source "$T/slurm.env"

recipe="$NPUC_SRC/samples/recipes/int8_per_channel.yaml"
"$PY" "$TESTLIB/make_zoo.py" "$T/zoo" 12 --corrupt 0 >"$T/convert.txt"
while read -r p; do
    "$NPUC_BIN" convert -q "$p" -o "${p%.safetensors}.h5"
    rm "$p"
done <"$T/convert.txt"
# Summaries are compared bit for bit below.  Under memcheck (NPUC_VALGRIND=1)
# the kernels differ (valgrind has no AVX-512), so a run's error sums differ in
# the last bits although its codes do not: the compared runs stay off valgrind
# and one extra batch run goes under it (end of file).
MEMCHECK=${NPUC_VALGRIND:-0}
export NPUC_VALGRIND=0
expect_rc 0 "$NPUC_BIN" batch -q "$recipe" --input "$T/zoo" --output "$T/ref" -j 2 --summary "$T/ref.json"

(cd "$T" && NPUC="$NPUC_BIN" bash "$NPUC_SRC/samples/zoo/slurm_submit.sh" "$recipe" "$T/zoo" "$T/res" 3) >"$T/ids" ||
    fail "slurm_submit.sh failed"
read -r _ array _ merge <"$T/ids"
echo "submitted array $array (3 tasks) and merge job $merge"
for _ in $(seq 180); do
    [ -z "$(squeue -h -j "$array,$merge" 2>/dev/null)" ] && break
    sleep 1
done
[ -z "$(squeue -h -j "$array,$merge" 2>/dev/null)" ] || fail "Slurm jobs still queued after 3 minutes: $(squeue)"
for k in 0 1 2; do
    log="$T/res/slurm-${array}_$k.log"
    [ -s "$log" ] && sed 's/^/  /' "$log"
done
[ -s "$T/res/summary.json" ] || { cat "$T"/res/slurm-*.log >&2 || true; fail "the merge job wrote no summary"; }

n=0
while read -r f; do
    cmp -s "$T/ref/$f" "$T/res/$f" || fail "$f: the Slurm run differs from npuc batch"
    n=$((n + 1))
done < <(cd "$T/ref" && find . -type f \( -name '*.safetensors' -o -name '*.h5' \) | sort)
[ "$n" -eq 12 ] || fail "$n artifacts, expected 12"
"$PY" - "$T/ref.json" "$T/res/summary.json" <<'PY' || fail "merged Slurm summary differs from npuc batch"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
strip = lambda fs: [{k: v for k, v in f.items() if k != "path"} for f in fs]
assert strip(a["files"]) == strip(b["files"]), "files differ"
assert b["counts"] == {"files": 12, "ok": 12, "skipped": 0, "failed": 0}, b["counts"]
PY
echo "Slurm job array (3 shards) + merge == npuc batch: 12 artifacts byte-identical"

if [ "$MEMCHECK" = 1 ]; then
    expect_rc 0 env NPUC_VALGRIND=1 "$NPUC_BIN" batch -q "$recipe" --input "$T/zoo" --output "$T/vg" -j 2
    while read -r f; do cmp -s "$T/ref/$f" "$T/vg/$f" || fail "$f: the memcheck batch differs"; done \
        < <(cd "$T/ref" && find . -type f \( -name '*.safetensors' -o -name '*.h5' \) | sort)
    echo "batch under memcheck: the same artifacts"
fi
