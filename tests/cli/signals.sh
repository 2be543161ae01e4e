#!/usr/bin/env bash
# Issue 15, signals: SIGINT and SIGTERM sent at random moments to `quantize`,
# `fold-bn` (HDF5 in and out), `run` and `batch` end the run with exit 130 or
# 143 and no temporary file left (or exit 0 with a complete output when the
# run finished first); SIGKILL leaves a temporary file, which the next run of
# the same output removes.  Each stopped run says "interrupted" (issue 31
# item 9: said() below).
source "$(dirname "$0")/lib/cli_test.bash"
"$PY" -c "import numpy" 2>/dev/null || skip "numpy is not installed for $PY"
env --default-signal=INT true 2>/dev/null || skip "env --default-signal (coreutils >= 8.31) is needed"
TRIES=${NPUC_SIGNAL_TRIES:-6}
RANDOM=15

"$PY" "$TESTLIB/io_models.py" dense "$T/d.safetensors" 6 1024 1024
"$PY" "$TESTLIB/io_models.py" convbn "$T/cb.safetensors" 6 128
"$NPUC_BIN" convert -q "$T/cb.safetensors" -o "$T/cb.h5"
mkdir "$T/zoo"
for i in 1 2 3; do cp "$T/d.safetensors" "$T/zoo/m$i.safetensors"; done
in_sha=$(cat "$T/d.safetensors" "$T/cb.h5" | sha256sum)
recipe="$NPUC_SRC/samples/recipes/int8_per_channel.yaml"

temps() { find "$T" \( -name '*.tmp' -o -name '*.npuc-*' \) | head -3; }

# millis CMD...: how long CMD takes, in ms.
millis() {
    local s e
    s=$(date +%s%N)
    "$@" >/dev/null 2>&1
    e=$(date +%s%N)
    echo $(((e - s) / 1000000))
}

# interrupt NAME OUT CHECK CMD...: TRIES runs of CMD, each sent SIGINT or
# SIGTERM (alternating) after a random delay within CMD's own duration.
# OUT is removed before each run; CHECK (a command) checks a run that
# finished before the signal.  When no random delay caught a run (a run
# timed while the machine was busy and then run while it was quiet is
# shorter than its delays), up to three more tries signal a quarter of the
# way into the measured duration.
interrupt() {
    local name=$1 out=$2 check=$3
    shift 3
    rm -rf "$out"
    local ms hit=0 i d
    spoke=0
    ms=$(millis "$@")
    rm -rf "$out"
    [ "$ms" -gt 0 ] || ms=1
    for i in $(seq "$TRIES") x1 x2 x3; do
        if [ "${i#x}" != "$i" ]; then
            [ "$hit" -eq 0 ] || break
            d=$((ms / 4 + 1))
        else
            d=$((RANDOM % ms + 5))
        fi
        one_signal "$name" "$out" "$check" "$i" "$d" "$@" && hit=$((hit + 1))
    done
    [ "$hit" -gt 0 ] || fail "$name: no signal arrived while it ran (runs take ${ms} ms)"
    [ "$spoke" -gt 0 ] || fail "$name: $hit runs stopped by a signal and none said 'interrupted'"
    echo "$name: $TRIES tries (runs take ${ms} ms), $hit interrupted ($spoke said so), no temporary file left"
}

# one_signal NAME OUT CHECK TRY DELAY_MS CMD...: one run signalled after
# DELAY_MS; returns 0 when the signal interrupted it.
one_signal() {
    local name=$1 out=$2 check=$3 i=$4 d=$5
    shift 5
    local sig=INT want=130 rc=0
    [ $((${i#x} % 2)) -eq 0 ] && sig=TERM want=143
    rm -rf "$out" "$out.summary.json"
    # Background jobs of a script start with SIGINT ignored; give the
    # program the default disposition, as an interactive shell would.
    env --default-signal=INT,TERM "$@" >/dev/null 2>"$T/sig.err" &
    local pid=$!
    sleep "$(printf '0.%03d' $((d % 1000)))"
    [ "$d" -gt 999 ] && sleep $((d / 1000))
    kill -s "$sig" "$pid" 2>/dev/null || true
    wait "$pid" || rc=$?
    if [ "$rc" -eq 0 ]; then
        $check "$out" || fail "$name try $i: exit 0 after SIG$sig but the output is not complete"
    else
        [ "$rc" -eq "$want" ] || fail "$name try $i: SIG$sig after ${d} ms gave exit $rc, not $want: $(cat "$T/sig.err")"
        said "$name" "$out" "$sig"
    fi
    [ -z "$(temps)" ] || fail "$name try $i: SIG$sig after ${d} ms left temporary files: $(temps)"
    [ "$rc" -ne 0 ]
}

# said NAME OUT SIG: issue 31 item 9, a stopped run says so on stderr in one
# line: what it was writing; a batch, how many files finished and where its
# partial summary is, which lists exactly those files (or, stopped before its
# first file, that nothing was being written).
said() {
    local name=$1 out=$2 sig=$3
    # A signal that arrives before main() installs its handler (the dynamic
    # loader can take tens of ms on a busy machine) kills with the same
    # code and says nothing: not counted (interrupt() wants one that spoke).
    [ -s "$T/sig.err" ] || return 0
    # Or between the handler's start and the moment the command named its
    # output (parsing): it says so, and is not counted either.
    grep -q '^npuc: interrupted (SIG[A-Z]*): nothing was being written$' "$T/sig.err" && return 0
    # A batch stopped before its loop (listing the input) has no summary
    # yet: the generic line, not counted.
    if [ "$name" = batch ] && ! grep -q 'files finished' "$T/sig.err"; then
        must_match "$T/sig.err" "^npuc: interrupted \\(SIG$sig\\)"
        [ ! -e "$out.summary.json" ] || fail "batch stopped before its loop wrote a summary"
        return 0
    fi
    spoke=$((spoke + 1))
    [ "$(grep -c . "$T/sig.err")" -le 2 ] || fail "$name: SIG$sig: more than the interrupted line: $(cat "$T/sig.err")"
    if [ "$name" != batch ]; then
        must_match "$T/sig.err" "^npuc: interrupted \(SIG$sig\) while writing $out: not written, temporary files removed$"
        return
    fi
    must_match "$T/sig.err" "^npuc: interrupted \(SIG$sig\): [0-3] of 3 files finished .*partial summary in $out.summary.json"
    local k
    k=$(sed -n 's/^npuc: interrupted ([A-Z]*): \([0-3]\) of 3 files finished.*/\1/p' "$T/sig.err")
    "$PY" - "$out.summary.json" "SIG$sig" "$k" "$out" <<'PY' || fail "batch SIG$sig: the partial summary is wrong"
import json, os, sys
d = json.load(open(sys.argv[1]))
assert d["interrupted"] == sys.argv[2], d.get("interrupted")
assert d["files_total"] == 3 and d["counts"]["files"] == int(sys.argv[3]) == len(d["files"]), d["counts"]
for f in d["files"]:
    assert f["status"] == "ok" and os.path.exists(os.path.join(sys.argv[4], f["file"])), f
PY
}

valid() { "$NPUC_BIN" validate --deep "$1" >/dev/null 2>&1; }
valid_dir() {
    local f
    for f in "$1"/m1.safetensors "$1"/m3.safetensors; do valid "$f" || return 1; done
}

# The signalled runs use the real binary (the wrapper's pid is not npuc's,
# and its valgrind runs would skew the timing); `valid` and the reruns are guarded.
interrupt quantize "$T/q.safetensors" valid "$NPUC_REAL_BIN" quantize "$T/d.safetensors" -o "$T/q.safetensors" -j1 --bits 4 --group-size 32 --asymmetric --range mse -q
interrupt fold-bn "$T/f.h5" valid "$NPUC_REAL_BIN" fold-bn "$T/cb.h5" -o "$T/f.h5" -q
interrupt run "$T/r.safetensors" valid "$NPUC_REAL_BIN" run "$recipe" "$T/d.safetensors" -o "$T/r.safetensors" -j1 \
    --report "$T/r.report.json"
rm -f "$T/r.report.json"
interrupt batch "$T/bout" valid_dir "$NPUC_REAL_BIN" batch "$recipe" --input "$T/zoo" --output "$T/bout" -j2 \
    --summary "$T/bout.summary.json"
rm -rf "$T/bout.summary.json" "$T/bout"

# SIGHUP: exit 129.
env --default-signal=HUP "$NPUC_REAL_BIN" fold-bn "$T/cb.h5" -o "$T/h.h5" -q >/dev/null 2>&1 &
pid=$!
for _ in $(seq 200); do [ -n "$(temps)" ] && break; sleep 0.02; done
kill -s HUP "$pid" 2>/dev/null || true
rc=0
wait "$pid" || rc=$?
[ "$rc" -eq 129 ] || fail "SIGHUP: exit $rc, not 129"
[ -z "$(temps)" ] || fail "SIGHUP left temporary files: $(temps)"

# SIGKILL: the temporary file stays; the next run of the same output removes it.
for kind in "quantize $T/d.safetensors -j1 --bits 4 --group-size 32 --asymmetric --range mse" "fold-bn $T/cb.h5"; do
    out="$T/k.safetensors"
    [[ $kind == fold-bn* ]] && out="$T/k.h5"
    rm -f "$out"
    "$NPUC_REAL_BIN" $kind -o "$out" -q >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 200); do [ -n "$(temps)" ] && break; sleep 0.05; done
    kill -s KILL "$pid"
    wait "$pid" 2>/dev/null || true
    left=$(temps)
    [ -n "$left" ] || fail "${kind%% *}: SIGKILL left no temporary file (the run was not writing yet?)"
    [[ $(basename "$left") == ".$(basename "$out").npuc-$pid-"*.tmp ]] || fail "unexpected temporary name: $left"
    expect_rc 0 "$NPUC_BIN" $kind -o "$out" -q
    [ ! -e "$left" ] || fail "${kind%% *}: the killed run's $left is still there after a rerun"
    [ -z "$(temps)" ] || fail "${kind%% *}: temporary files after the rerun: $(temps)"
    valid "$out" || fail "${kind%% *}: the rerun's output does not validate"
done
echo "SIGHUP and SIGKILL + rerun: ok"

# SIGKILL at random moments of a large write (issue 33): the writeback
# helper that fdatasyncs the output while npuc computes (src/core/writeback.c,
# here every 4 MiB: NPUC_WRITEBACK=4,16) changes nothing about what is
# published.  A 96 MiB model converted to safetensors (96 MiB
# written) and to GGUF F16 (48 MiB) in this test's folder (on a disk when
# TMPDIR is one), killed at random points of the first three quarters of
# the run's measured duration (the first run reads a cold input):
# the output path either does not exist or holds the complete output,
# byte for byte a complete run's, whose tensors are checked against the
# input's (npuc_test.py, a reader independent of npuc).  Then a rerun removes the killed
# runs' temporary files.
"$PY" "$TESTLIB/io_models.py" dense "$T/w.safetensors" 6 2048 2048
export NPUC_WRITEBACK=4,16
KTRIES=${NPUC_KILL_TRIES:-5}
is_quick && KTRIES=3
for kind in safetensors gguf; do
    out="$T/kw.$kind" ref="$T/kw-ref.$kind"
    args=(convert "$T/w.safetensors" -q)
    [ "$kind" = gguf ] && args+=(--gguf-type f16)
    ms=$(millis "$NPUC_REAL_BIN" "${args[@]}" -o "$ref")
    [ -s "$ref" ] || fail "kill $kind: the complete run wrote nothing"
    [ "$ms" -gt 0 ] || ms=1
    hit=0
    for i in $(seq "$KTRIES"); do
        rm -f "$out"
        "$NPUC_REAL_BIN" "${args[@]}" -o "$out" >/dev/null 2>&1 &
        pid=$!
        d=$((RANDOM % (ms * 3 / 4 + 1) + 1))
        sleep "$(printf '%d.%03d' $((d / 1000)) $((d % 1000)))"
        kill -s KILL "$pid" 2>/dev/null || true
        rc=0
        wait "$pid" 2>/dev/null || rc=$?
        if [ -e "$out" ]; then
            cmp -s "$out" "$ref" || fail "kill $kind try $i (after ${d} ms, exit $rc): a partial output was published ($(stat -c %s "$out") of $(stat -c %s "$ref") bytes)"
        else
            [ "$rc" -eq 137 ] || fail "kill $kind try $i: exit $rc and no output"
            hit=$((hit + 1))
        fi
    done
    [ "$hit" -gt 0 ] || fail "kill $kind: no SIGKILL arrived while a run wrote (runs take ${ms} ms)"
    rm -f "$out"
    expect_rc 0 "$NPUC_BIN" "${args[@]}" -o "$out"
    cmp -s "$out" "$ref" || fail "kill $kind: the rerun's output differs from the complete run's"
    [ -z "$(find "$T" -name ".kw.$kind.npuc-*")" ] || fail "kill $kind: temporary files after the rerun: $(find "$T" -name ".kw.$kind.npuc-*")"
    echo "SIGKILL during a large $kind write: $KTRIES tries (runs take ${ms} ms), $hit killed mid-run, nothing partial published"
done
npuc_py compare "$T/w.safetensors" "$T/kw-ref.safetensors" || fail "the complete safetensors output holds other tensors than the input"
rm -f "$T"/w.safetensors "$T"/kw*
unset NPUC_WRITEBACK

[ "$(cat "$T/d.safetensors" "$T/cb.h5" | sha256sum)" = "$in_sha" ] || fail "an input changed"
