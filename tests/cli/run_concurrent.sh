#!/usr/bin/env bash
# Issue 15, side files of `run` and `batch`:
#  - two `npuc run` at once with one recipe into one folder (different
#    outputs, then the same output with and without -f), streamed and
#    --no-stream: every output passes `validate --deep` and equals the result
#    of a run made alone (sha256); without -f on one output exactly one run
#    exits 0 and the other 2; no temporary or step file is left;
#  - a run killed with SIGKILL leaves its step file; the next run in that
#    folder removes it (its anchor's lock is gone) and leaves nothing;
#  - an unwritable `run --report`, `batch --summary` or `--merge-summaries`
#    path exits 2 before anything is written: no artifact, no report.
source "$(dirname "$0")/lib/cli_test.bash"
"$PY" -c "import numpy" 2>/dev/null || skip "numpy is not installed for $PY"
TRIES=${NPUC_RACE_TRIES:-5}
R="$SAMPLES/recipes"

mkdir -p "$T/in" "$T/big"
"$PY" "$TESTLIB/io_models.py" convbn "$T/in/m.safetensors" 6 48
in="$T/in/m.safetensors"
in_sum=$(sha256sum "$in")

no_leftovers() { # DIR: no temporary, step or anchor file
    local left
    left=$(find "$1" -name '*.tmp*' -o -name '*npuc-*' -o -name '*npucstep-*' | head -3)
    [ -z "$left" ] || fail "left behind: $left"
}

mkdir -p "$T/ref" "$T/o"
for mode in "" --no-stream; do
    "$NPUC_BIN" run "$R/fold_int8.yaml" "$in" -o "$T/ref/alone$mode.safetensors" -q $mode >/dev/null
    want=$(sha256sum <"$T/ref/alone$mode.safetensors" | cut -d' ' -f1)
    for i in $(seq "$TRIES"); do
        # Different outputs in one folder.
        "$NPUC_BIN" run "$R/fold_int8.yaml" "$in" -o "$T/o/a.safetensors" -q -f $mode >/dev/null 2>"$T/ea" &
        pa=$!
        "$NPUC_BIN" run "$R/fold_int8.yaml" "$in" -o "$T/o/b.safetensors" -q -f $mode >/dev/null 2>"$T/eb" &
        pb=$!
        wait $pa || fail "run a failed: $(cat "$T/ea")"
        wait $pb || fail "run b failed: $(cat "$T/eb")"
        for o in a b; do
            [ "$(sha256sum <"$T/o/$o.safetensors" | cut -d' ' -f1)" = "$want" ] ||
                fail "try $i$mode: $o differs from the run made alone"
        done
        # One output, -f: both succeed, the file is one whole result.
        "$NPUC_BIN" run "$R/fold_int8.yaml" "$in" -o "$T/o/same.safetensors" -q -f $mode >/dev/null 2>"$T/e1" &
        p1=$!
        "$NPUC_BIN" run "$R/fold_int8.yaml" "$in" -o "$T/o/same.safetensors" -q -f $mode >/dev/null 2>"$T/e2" &
        p2=$!
        wait $p1 && wait $p2 || fail "try $i$mode: a -f run failed: $(cat "$T/e1" "$T/e2")"
        [ "$(sha256sum <"$T/o/same.safetensors" | cut -d' ' -f1)" = "$want" ] || fail "try $i$mode: same.safetensors"
        # One output, no -f: one wins, the other exits 2.
        rm -f "$T/o/x.safetensors"
        set +e
        "$NPUC_BIN" run "$R/fold_int8.yaml" "$in" -o "$T/o/x.safetensors" -q $mode >/dev/null 2>"$T/e1" &
        p1=$!
        "$NPUC_BIN" run "$R/fold_int8.yaml" "$in" -o "$T/o/x.safetensors" -q $mode >/dev/null 2>"$T/e2" &
        p2=$!
        wait $p1; r1=$?
        wait $p2; r2=$?
        set -e
        [ "$r1$r2" = "02" ] || [ "$r1$r2" = "20" ] || fail "try $i$mode: no -f gave exits $r1 and $r2: $(cat "$T/e1" "$T/e2")"
        grep -qh 'output exists' "$T/e1" "$T/e2" || fail "the loser did not say why: $(cat "$T/e1" "$T/e2")"
        [ "$(sha256sum <"$T/o/x.safetensors" | cut -d' ' -f1)" = "$want" ] || fail "try $i$mode: x.safetensors"
        no_leftovers "$T/o"
    done
done
for o in a b same x; do
    "$NPUC_BIN" validate --deep "$T/o/$o.safetensors" >/dev/null || fail "validate --deep $o failed"
done

# SIGKILL while a step file exists, then the next run in the folder.
"$PY" "$TESTLIB/io_models.py" convbn "$T/big/big.safetensors" 12 256
mkdir -p "$T/k"
killed=0
for i in $(seq 20); do
    "$NPUC_BIN" run "$R/fold_int8.yaml" "$T/big/big.safetensors" -o "$T/k/out.safetensors" -q -f --no-stream \
        >/dev/null 2>&1 &
    p=$!
    for _ in $(seq 200); do # until its step file is there
        ls -a "$T/k" | grep -q 'npucstep-.*\.s1\.tmp$' && break
        sleep 0.01
    done
    kill -KILL $p 2>/dev/null || true
    wait $p 2>/dev/null || true
    if ls -a "$T/k" | grep -q 'npucstep-'; then killed=1; break; fi
done
[ "$killed" = 1 ] || fail "no run was killed with its step file on disk (20 tries)"
"$NPUC_BIN" run "$R/fold_int8.yaml" "$in" -o "$T/k/other.safetensors" -q >/dev/null ||
    fail "the run after the kill failed"
! ls -a "$T/k" | grep -q 'npucstep-' || fail "a dead run's step file survived the next run: $(ls -a "$T/k")"
"$NPUC_BIN" run "$R/fold_int8.yaml" "$in" -o "$T/k/out.safetensors" -q -f >/dev/null
no_leftovers "$T/k"

# Side files that cannot be written: exit 2 before any work.
expect_rc 2 "$NPUC_BIN" run "$R/fold_int8.yaml" "$in" -o "$T/r.safetensors" --report "$T/nodir/r.json" -q
must_match "$T/err" 'nodir/r\.json: cannot write the report there'
[ ! -e "$T/r.safetensors" ] || fail "run published its artifact without its report"
mkdir "$T/rdir"
expect_rc 2 "$NPUC_BIN" run "$R/fold_int8.yaml" "$in" -o "$T/r.safetensors" --report "$T/rdir" -q
[ ! -e "$T/r.safetensors" ] || fail "run published its artifact without its report"

expect_rc 2 "$NPUC_BIN" batch "$R/fold_int8.yaml" --input "$T/in" --output "$T/bo" --summary "$T/nodir/s.json" -q
must_match "$T/err" 'nodir/s\.json: cannot write the summary there'
[ ! -e "$T/bo" ] || fail "batch created or wrote $T/bo: $(find "$T/bo")"
mkdir "$T/bo2"
expect_rc 2 "$NPUC_BIN" batch "$R/fold_int8.yaml" --input "$T/in" --output "$T/bo2" --summary "$T/rdir" -q
[ -z "$(ls -A "$T/bo2")" ] || fail "batch wrote outputs before failing on its summary: $(ls -A "$T/bo2")"
# A summary inside the output folder is fine (the folder is made first).
expect_rc 0 "$NPUC_BIN" batch "$R/fold_int8.yaml" --input "$T/in" --output "$T/bo3" --summary "$T/bo3/s.json" -q
"$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['schema']=='npuc.batch/1' and len(d['files'])==1" \
    "$T/bo3/s.json" || fail "summary inside the output folder"
expect_rc 2 "$NPUC_BIN" batch --merge-summaries "$T/nodir/m.json" "$T/bo3/s.json"
must_match "$T/err" 'nodir/m\.json: cannot write the merged summary there'
no_leftovers "$T/bo3"

[ "$(sha256sum "$in")" = "$in_sum" ] || fail "the input changed"
echo ok
