#!/usr/bin/env bash
# samples/zoo end to end with GNU parallel and xargs: the scripts compress a
# generated zoo (24 models, safetensors and HDF5, one corrupt) and their
# outputs are byte-identical to `npuc batch`'s; the sharded script's merged
# summary lists the same files as the unsharded batch.  parallel_run.sh runs
# with NPUC_SSHLOGIN=":" (GNU parallel's name for this machine), the code path
# a multi-host --sshlogin run takes.  Skips (77) when GNU parallel is absent
# (CI installs it: .ci/install-deps --test).
source "$(dirname "$0")/lib/cli_test.bash"

command -v parallel >/dev/null || skip "GNU parallel is not installed (apt-get install parallel)"
Z="$NPUC_SRC/samples/zoo"
recipe="$NPUC_SRC/samples/recipes/int8_per_channel.yaml"
export NPUC="$NPUC_BIN"

"$PY" "$TESTLIB/make_zoo.py" "$T/zoo" 24 --corrupt 1 >"$T/convert.txt"
while read -r p; do
    "$NPUC_BIN" convert -q "$p" -o "${p%.safetensors}.h5"
    rm "$p"
done <"$T/convert.txt"
# Issue 31 item 10: a model that is a symlink is compressed by the scripts as
# `npuc batch` compresses it (same_outputs below counts all 24).
mkdir "$T/elsewhere"
linked=$(cd "$T/zoo" && find . -type f -name '*.h5' | LC_ALL=C sort | head -1)
mv "$T/zoo/$linked" "$T/elsewhere/linked.h5"
ln -s "$T/elsewhere/linked.h5" "$T/zoo/$linked"

# Summaries are compared bit for bit below.  Under memcheck (NPUC_VALGRIND=1)
# the kernels differ (valgrind has no AVX-512), so a run's error sums differ in
# the last bits although its codes do not: the compared runs stay off valgrind
# and one extra batch run goes under it (end of file).
MEMCHECK=${NPUC_VALGRIND:-0}
export NPUC_VALGRIND=0
rc=0
"$NPUC_BIN" batch -q "$recipe" --input "$T/zoo" --output "$T/ref" -j 2 --summary "$T/ref.json" >/dev/null 2>"$T/ref.err" || rc=$?
[ "$rc" -eq 1 ] || fail "reference batch exited $rc, expected 1 (one corrupt file)"

# same_outputs DIR: every artifact of the reference run is in DIR, byte for byte, and nothing else.
same_outputs() {
    local n=0 f
    while read -r f; do
        cmp -s "$T/ref/$f" "$1/$f" || fail "$1: $f differs from npuc batch"
        n=$((n + 1))
    done < <(cd "$T/ref" && find . -type f \( -name '*.safetensors' -o -name '*.h5' \) | sort)
    local m
    m=$(cd "$1" && find . -type f \( -name '*.safetensors' -o -name '*.h5' \) | wc -l)
    [ "$n" -eq 24 ] && [ "$m" -eq 24 ] || fail "$1: $m artifacts, reference $n, expected 24"
    [ -z "$(find "$1" -name '*.tmp')" ] || fail "$1: temporary files left"
}

rc=0
bash "$Z/xargs_run.sh" "$recipe" "$T/zoo" "$T/xargs" 2 2>"$T/xargs.err" || rc=$?
[ "$rc" -eq 123 ] || fail "xargs_run.sh exited $rc, expected 123 (one corrupt file)"
must_match "$T/xargs.err" 'truncated_0.safetensors'
same_outputs "$T/xargs"
echo "xargs -P: outputs == npuc batch"

rc=0
NPUC_SSHLOGIN=":" bash "$Z/parallel_run.sh" "$recipe" "$T/zoo" "$T/par" 2 2>"$T/par.err" || rc=$?
[ "$rc" -eq 1 ] || { cat "$T/par.err" >&2; fail "parallel_run.sh exited $rc, expected 1 (one failed file)"; }
same_outputs "$T/par"
[ "$(grep -c . "$T/par/parallel.log")" -eq 26 ] || fail "the job log should have a header and 25 jobs"
# A rerun skips every complete output and only retries the corrupt file.
rc=0
bash "$Z/parallel_run.sh" "$recipe" "$T/zoo" "$T/par" 2 2>/dev/null || rc=$?
[ "$rc" -eq 1 ] || fail "parallel_run.sh rerun exited $rc"
same_outputs "$T/par"
echo "GNU parallel (--sshlogin :): outputs == npuc batch"

rc=0
bash "$Z/parallel_shards.sh" "$recipe" "$T/zoo" "$T/shards" 3 >"$T/sh.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || { cat "$T/sh.out" >&2; fail "parallel_shards.sh exited $rc, expected 1"; }
must_match "$T/sh.out" 'merged 3 summaries: 25 of 25 files, 24 ok, 0 skipped, 1 failed'
same_outputs "$T/shards"
"$PY" - "$T/ref.json" "$T/shards/summary.json" <<'PY' || fail "merged summary differs from the unsharded one"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
strip = lambda fs: [{k: v for k, v in f.items() if k != "path"} for f in fs]
assert strip(a["files"]) == strip(b["files"])
assert b["files_total"] == 25 and b["shard"] is None
PY
echo "GNU parallel over 3 shards + merge == npuc batch"

if [ "$MEMCHECK" = 1 ]; then
    rc=0
    NPUC_VALGRIND=1 "$NPUC_BIN" batch -q "$recipe" --input "$T/zoo" --output "$T/vg" -j 2 >/dev/null 2>&1 || rc=$?
    [ "$rc" -eq 1 ] || fail "memcheck batch exited $rc, expected 1 (one corrupt file)"
    same_outputs "$T/vg"
    echo "batch under memcheck: the same artifacts"
fi
