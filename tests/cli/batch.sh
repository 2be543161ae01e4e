#!/usr/bin/env bash
# npuc batch over a generated zoo of 50 small models (32 safetensors, 16 HDF5,
# 2 corrupt):
#  - the corrupt files fail alone (their errors in the summary, exit 1), the
#    48 others are byte-identical to `npuc run` on each file;
#  - artifacts are byte-identical across runs, -j 1 / -j 3 and shards 0..3 of
#    4, whose merged summary lists the same files as the unsharded one;
#  - --resume skips complete outputs;
#  - kill test: `npuc batch` killed with SIGKILL at several points mid-run,
#    then rerun with --resume, ends with every artifact byte-identical to an
#    uninterrupted run and no temporary file left;
#  - usage errors exit 2.
source "$(dirname "$0")/lib/cli_test.bash"

R="$NPUC_SRC/samples/recipes"
recipe="$R/int8_per_channel.yaml"
printf 'steps:\n  - fold-bn:\n  - quantize:\n' >"$T/probe.yaml"
"$NPUC_BIN" run "$T/probe.yaml" "$SAMPLES/cnn_bn.safetensors" -o "$T/probe.safetensors" >"$T/probe.out" 2>&1 || true
if grep -q "not available" "$T/probe.out"; then
    echo "fold-bn not available: batch runs the int8 recipe"
else
    recipe="$R/fold_int8.yaml"
fi

# --- the zoo
# The quick passes (sanitizers) batch a zoo of 16 models: every path runs
# the same, the release pass ran all 48.
NZ=48
is_quick && NZ=16
NF=$((NZ + 2))
"$PY" "$TESTLIB/make_zoo.py" "$T/zoo" "$NZ" --corrupt 2 >"$T/convert.txt"
while read -r p; do
    "$NPUC_BIN" convert -q "$p" -o "${p%.safetensors}.h5"
    rm "$p"
done <"$T/convert.txt"
n=$(find "$T/zoo" -type f | wc -l)
[ "$n" -eq "$NF" ] || fail "the zoo has $n files, not $NF"
nh5=$(find "$T/zoo" -name '*.h5' | wc -l)
echo "zoo: $n files ($nh5 .h5 of which 1 corrupt, 1 corrupt .safetensors)"

# summary_files SUMMARY: the "files" array, for comparing runs (the output
# folder and shard fields differ by design).
summary_files() {
    "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps(d["files"], sort_keys=True, indent=1))' "$1"
}

# same_tree A B: every artifact (not reports, not summaries) byte-identical.
same_tree() {
    local a=$1 b=$2 f cnt=0
    while read -r f; do
        cmp -s "$a/$f" "$b/$f" || fail "$f differs between $a and $b"
        cnt=$((cnt + 1))
    done < <(cd "$a" && find . -type f \( -name '*.safetensors' -o -name '*.h5' \) | sort)
    local other
    other=$(cd "$b" && find . -type f \( -name '*.safetensors' -o -name '*.h5' \) | wc -l)
    [ "$cnt" -eq "$other" ] || fail "$a has $cnt artifacts, $b has $other"
    [ "$cnt" -eq "$NZ" ] || fail "$a has $cnt artifacts, expected $NZ"
}

# Summaries are compared bit for bit below.  Under memcheck (NPUC_VALGRIND=1)
# the kernels differ (valgrind has no AVX-512), so a run's error sums differ in
# the last bits although its codes do not: the compared runs stay off valgrind
# and one extra batch run goes under it (end of file).
MEMCHECK=${NPUC_VALGRIND:-0}
export NPUC_VALGRIND=0
# --- the reference run: -j 3
expect_rc 1 "$NPUC_BIN" batch "$recipe" --input "$T/zoo" --output "$T/ref" -j 3 --summary "$T/ref.json"
must_match "$T/out" "^total: $NF files of $NF: $NZ ok, 0 skipped, 2 failed\$"
must_match "$T/err" 'bad/garbage.h5: not an HDF5 file'
must_match "$T/err" 'bad/truncated_0.safetensors: '
"$PY" - "$T/ref.json" "$T/ref" "$NZ" <<'PY' || fail "reference summary"
import json, os, sys
d = json.load(open(sys.argv[1]))
nz = int(sys.argv[3])
assert d["schema"] == "npuc.batch/1" and d["files_total"] == nz + 2 and d["shard"] is None
assert d["counts"] == {"files": nz + 2, "ok": nz, "skipped": 0, "failed": 2}, d["counts"]
names = [f["file"] for f in d["files"]]
assert names == sorted(names), "files not in sorted order"
failed = {f["file"]: f for f in d["files"] if f["status"] == "failed"}
assert set(failed) == {"bad/garbage.h5", "bad/truncated_0.safetensors"}, failed
assert all(f["exit_code"] == 2 and f["error"] for f in failed.values())
for f in d["files"]:
    out = os.path.join(sys.argv[2], f["file"])
    if f["status"] == "ok":
        assert os.path.isfile(out) and os.path.isfile(out + ".report.json"), out
        assert f["output_size"] == os.path.getsize(out) and len(f["input_sha256"]) == 64
        r = json.load(open(out + ".report.json"))
        assert r["schema"] == "npuc.report/1" and r["pass"] == "run" and r["timestamp_utc"] is None
    else:
        assert not os.path.exists(out)
PY
# Each output equals `npuc run` on its file (a sample of both formats).
for f in vision/cnn_000.safetensors nlp/mlp_001.safetensors vision/cnn_002.h5 nlp/mlp_005.h5 nlp/mlp_043.safetensors; do
    [ -f "$T/zoo/$f" ] || continue # the quick zoo has no model 43
    expect_rc 0 "$NPUC_BIN" run -q "$recipe" "$T/zoo/$f" -o "$T/single.${f##*.}" -f
    cmp "$T/single.${f##*.}" "$T/ref/$f" || fail "$f: batch output differs from npuc run"
done
expect_rc 0 "$NPUC_BIN" decompress -q "$T/ref/vision/cnn_002.h5" -o "$T/dq.h5"
echo "reference batch ok: $NZ ok, 2 corrupt reported"

# --- -j 1, and a rerun
expect_rc 1 "$NPUC_BIN" batch -q "$recipe" --input "$T/zoo" --output "$T/j1" -j 1 --summary "$T/j1.json"
same_tree "$T/ref" "$T/j1"
[ "$(summary_files "$T/ref.json")" = "$(summary_files "$T/j1.json")" ] || fail "summaries differ for -j 1 and -j 3"
echo "-j 1 == -j 3"

# --- shards 0..3 of 4 together equal the unsharded run
for k in 0 1 2 3; do
    rc=0
    "$NPUC_BIN" batch -q "$recipe" --input "$T/zoo" --output "$T/sh" -j 2 --shard "$k/4" --summary "$T/sh$k.json" \
        >"$T/sh$k.out" 2>&1 || rc=$?
    [ "$rc" -le 1 ] || { cat "$T/sh$k.out" >&2; fail "shard $k/4 exited $rc"; }
    must_match "$T/sh$k.out" "^total: [0-9]+ files of $NF \\(this shard\\)"
done
same_tree "$T/ref" "$T/sh"
expect_rc 1 "$NPUC_BIN" batch --merge-summaries "$T/merged.json" "$T/sh2.json" "$T/sh0.json" "$T/sh3.json" "$T/sh1.json"
must_match "$T/err" "merged 4 summaries: $NF of $NF files, $NZ ok, 0 skipped, 2 failed"
[ "$(summary_files "$T/ref.json")" = "$(summary_files "$T/merged.json")" ] || fail "merged shards differ from the unsharded summary"
expect_rc 2 "$NPUC_BIN" batch --merge-summaries "$T/m2.json" "$T/sh0.json" "$T/sh0.json"
must_match "$T/err" 'is in two summaries: the shards overlap'
expect_rc 1 "$NPUC_BIN" batch --merge-summaries "$T/m3.json" "$T/sh0.json"
must_match "$T/err" "[0-9]+ of $NF files.*some files are in no summary"
echo "shards 0..3 of 4 == unsharded"

# --- resume skips complete outputs; without it an existing output fails
expect_rc 1 "$NPUC_BIN" batch -q "$recipe" --input "$T/zoo" --output "$T/ref" -j 2 --resume --summary "$T/res.json"
must_match "$T/out" "^total: $NF files of $NF: 0 ok, $NZ skipped, 2 failed\$"
"$PY" - "$T/ref.json" "$T/res.json" <<'PY' || fail "resumed summary"
import json, sys
a, b = (json.load(open(p))["files"] for p in sys.argv[1:3])
for x, y in zip(a, b):
    if x["status"] == "ok":
        assert y["status"] == "skipped", y
        y["status"] = "ok"
    assert x == y, (x, y)
PY
expect_rc 1 "$NPUC_BIN" batch -q "$recipe" --input "$T/zoo" --output "$T/ref" -j 2
must_match "$T/err" 'output exists \(use -f to overwrite\)'
same_tree "$T/ref" "$T/j1"
echo "resume ok"

# --- kill test: SIGKILL mid-run at several points, then --resume.  The
# points are counts of published artifacts, polled, not fixed delays: on a
# loaded machine a fixed delay can land before the first artifact every time.
killed_mid=0
points="0 1 8 20 35 47"
is_quick && points="0 4 12" # the sanitizer pass: three kills
for want in $points; do
    rm -rf "$T/kill"
    "$NPUC_REAL_BIN" batch -q "$recipe" --input "$T/zoo" --output "$T/kill" -j 2 >/dev/null 2>&1 & # signalled: the real npuc
    pid=$!
    if [ "$want" -eq 0 ]; then
        sleep 0.02
    else
        for _ in $(seq 3000); do # at most about a minute
            have=$(find "$T/kill" -type f \( -name '*.safetensors' -o -name '*.h5' \) 2>/dev/null | wc -l || true)
            [ "$have" -lt "$want" ] || break
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.02
        done
    fi
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    # Workers die with their parent (PR_SET_PDEATHSIG); wait for them.
    for _ in $(seq 50); do
        pgrep -f -- "--output $T/kill" >/dev/null || break
        sleep 0.1
    done
    pgrep -f -- "--output $T/kill" >/dev/null && fail "workers outlived the killed batch"
    # A dying worker leaves the process list (its memory is freed) a moment
    # before its files are closed and its temp file's flock released: wait
    # for the locks too, or --resume may see a live run's file and keep it.
    # A worker killed inside fsync dies only when the I/O is done: up to 30 s.
    for _ in $(seq 300); do
        busy=
        while read -r f; do
            # 9< opens without creating: a file gone meanwhile is not busy.
            { flock -n 9 || busy="$busy $f"; } 2>/dev/null 9<"$f" || true
        done < <(find "$T/kill" -name '*.tmp' 2>/dev/null)
        [ -z "$busy" ] && break
        sleep 0.1
    done
    [ -z "$busy" ] || echo "note: still locked 30 s after the kill:$busy" >&2
    mkdir -p "$T/kill" # a kill before the batch made it
    done_before=$(find "$T/kill" -type f \( -name '*.safetensors' -o -name '*.h5' \) | wc -l)
    tmp_before=$(find "$T/kill" -name '*.tmp' | wc -l)
    # Whatever is at an output path is complete: byte-identical to the reference.
    while read -r f; do
        cmp -s "$T/kill/$f" "$T/ref/$f" || fail "killed after $want artifacts: $f is not the complete artifact"
    done < <(cd "$T/kill" && find . -type f \( -name '*.safetensors' -o -name '*.h5' \) | sort)
    if [ "$done_before" -gt 0 ] && [ "$done_before" -lt "$NZ" ]; then killed_mid=$((killed_mid + 1)); fi
    echo "killed after $want artifacts: $done_before of $NZ artifacts done, $tmp_before temporary files left"
    expect_rc 1 "$NPUC_BIN" batch -q "$recipe" --input "$T/zoo" --output "$T/kill" -j 2 --resume
    same_tree "$T/ref" "$T/kill"
    left=$(find "$T/kill" -name '*.tmp' | head -3)
    if [ -n "$left" ]; then
        held=no
        { flock -n 9 || held=yes; } 2>/dev/null 9<"${left%%$'\n'*}" || true
        fail "temporary files left after --resume (the first still locked: $held): $left"
    fi
done
[ "$killed_mid" -ge 1 ] || fail "no kill landed mid-run"
echo "kill test ok ($killed_mid of $(wc -w <<<"$points") kills landed mid-run)"

# The kill above lands at a random moment; this is its narrowest window, made
# by hand: a worker killed after publishing its output and before removing
# its run's anchor (".<out>.npuc-<pid>-<random>.tmp", unlocked once the run
# is dead).  --resume skips the complete output and must still remove that
# file, and must keep a temp file whose lock a live run holds.
one=$(cd "$T/kill" && find . -type f -name '*.safetensors' | sort | head -1)
dead="$T/kill/$(dirname "$one")/.$(basename "$one").npuc-99999-0123456789abcdef.tmp"
live="$T/kill/$(dirname "$one")/.$(basename "$one").npuc-99998-fedcba9876543210.tmp"
: >"$dead"
exec 8>"$live"
flock -n 8 || fail "cannot lock $live"
expect_rc 1 "$NPUC_BIN" batch -q "$recipe" --input "$T/zoo" --output "$T/kill" -j 2 --resume
[ ! -e "$dead" ] || fail "--resume kept a dead run's anchor beside the complete $one"
[ -e "$live" ] || fail "--resume removed a temp file a live run holds locked"
exec 8>&-
rm -f "$live"
same_tree "$T/ref" "$T/kill"
echo "a dead run's anchor beside a complete output: removed by --resume (a locked one kept)"

# --- a list file instead of a folder
(cd "$T/zoo" && find . -name '*.safetensors' -path './nlp/*' | sort) >"$T/list.txt"
(cd "$T/zoo" && expect_rc 0 "$NPUC_BIN" batch -q "$recipe" --input "$T/list.txt" --output "$T/fromlist" -j 2)
for f in $(cd "$T/zoo" && find . -name '*.safetensors' -path './nlp/*'); do
    cmp -s "$T/fromlist/$f" "$T/ref/$f" || fail "list mode: $f differs"
done
echo "list input ok"

# --- usage errors
expect_rc 2 "$NPUC_BIN" batch "$recipe" --input "$T/zoo"
must_match "$T/err" 'missing --output DIR'
expect_rc 2 "$NPUC_BIN" batch "$recipe" --input "$T/nonexistent" --output "$T/x"
expect_rc 2 "$NPUC_BIN" batch "$recipe" --input "$T/zoo" --output "$T/x" --shard 4/4
expect_rc 2 "$NPUC_BIN" batch "$recipe" --input "$T/zoo" --output "$T/zoo"
must_match "$T/err" 'the output folder is the input folder'
printf 'steps:\n  - quantize: {bits: 1}\n' >"$T/bad.yaml"
expect_rc 2 "$NPUC_BIN" batch "$T/bad.yaml" --input "$T/zoo" --output "$T/x"
must_match "$T/err" 'bad.yaml:2:22: step .quantize.: .bits. must be an integer from 2 to 8, got 1'
echo "usage errors ok"

if [ "$MEMCHECK" = 1 ]; then
    # Four files (two per format, one corrupt) from a list: valgrind follows
    # the forked workers, and 48 models under it cost minutes.
    (cd "$T/zoo" && { find . -path './nlp/*' -name '*.safetensors' | sort | head -1
                      find . -path './vision/*' -name '*.h5' | sort | head -2
                      echo ./bad/garbage.h5; }) >"$T/vg.txt"
    (cd "$T/zoo" && expect_rc 1 env NPUC_VALGRIND=1 "$NPUC_BIN" batch -q "$recipe" --input "$T/vg.txt" --output "$T/vg" -j 2)
    n=0
    while read -r f; do
        case $f in ./bad/*) [ ! -e "$T/vg/$f" ] || fail "memcheck batch: $f was written" ;;
        *) cmp -s "$T/vg/$f" "$T/ref/$f" || fail "memcheck batch: $f differs"; n=$((n + 1)) ;; esac
    done <"$T/vg.txt"
    [ "$n" -eq 3 ] || fail "memcheck batch: $n artifacts compared, expected 3"
    echo "batch under memcheck (3 models and a corrupt file): the same artifacts"
fi
