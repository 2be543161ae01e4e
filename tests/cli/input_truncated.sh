#!/usr/bin/env bash
# Issue 15, inputs that change underneath: the input truncated at random
# moments while `quantize` reads it (50 tries).  Never a signal death (no
# SIGBUS: payloads are read, not mapped); a run that lost its input exits 1
# (2 when the file was already short when opened) with one line naming the
# file, nothing at the output path and no temporary file; a run that read
# everything first gives exactly the reference result.  Every fifth try is
# guided rather than timed: the run is stopped (SIGSTOP) once /proc/PID/io
# shows it has read between 1 MiB and half the file, the file is cut below
# half, and the run continued; it must then fail mid-read (exit 1), whatever
# the machine's load (random delays alone hit the read phase in only 10-20%
# of tries, and once in CI in 1 of 10).  Replacing the input by rename while
# it is read is harmless: the opened file is read whole.
source "$(dirname "$0")/lib/cli_test.bash"
"$PY" -c "import numpy" 2>/dev/null || skip "numpy is not installed for $PY"
TRIES=${NPUC_TRUNC_TRIES:-50}
RANDOM=15

"$PY" "$TESTLIB/io_models.py" dense "$T/model.safetensors" 8 512 1024
size=$(stat -c %s "$T/model.safetensors")
"$NPUC_BIN" quantize "$T/model.safetensors" -o "$T/ref.safetensors" -j1 -q >/dev/null
ref=$(sha256sum <"$T/ref.safetensors")
s=$(date +%s%N)
"$NPUC_REAL_BIN" quantize "$T/model.safetensors" -o "$T/ref2.safetensors" -j1 -q >/dev/null
ms=$((($(date +%s%N) - s) / 1000000 + 1))

# Bytes the process has read so far (rchar of /proc/PID/io), or empty once
# it has gone.
rchar() {
    local k v r=
    while read -r k v; do [ "$k" = rchar: ] && r=$v; done <"/proc/$1/io" 2>/dev/null
    echo "$r"
}

mid=0 early=0 late=0 guided=0 guided_hit=0
for i in $(seq "$TRIES"); do
    in="$T/in.safetensors" out="$T/out.safetensors"
    rm -f "$out"
    cp "$T/model.safetensors" "$in"
    cut=$(((RANDOM * 32768 + RANDOM) % size))
    d=$((RANDOM % ms))
    rc=0 stopped=
    # The real binary: the test changes its input on purpose (no input guard).
    "$NPUC_REAL_BIN" quantize "$in" -o "$out" -j1 -q >/dev/null 2>"$T/e" &
    pid=$!
    if [ $((i % 5)) -eq 0 ]; then
        guided=$((guided + 1))
        cut=$((cut % (size / 2)))
        while r=$(rchar "$pid") && [ -n "$r" ]; do
            [ "$r" -ge $((size / 2)) ] && break
            if [ "$r" -ge 1048576 ]; then
                kill -STOP "$pid" 2>/dev/null && stopped=$(rchar "$pid")
                break
            fi
        done
        if [ -n "$stopped" ] && [ "$stopped" -lt $((size / 2)) ]; then
            truncate -s "$cut" "$in"
        fi
        [ -z "$stopped" ] || kill -CONT "$pid"
    else
        sleep "$((d / 1000)).$(printf '%03d' $((d % 1000)))"
        truncate -s "$cut" "$in"
    fi
    wait "$pid" || rc=$?
    if [ -n "$stopped" ] && [ "$stopped" -lt $((size / 2)) ]; then
        # Stopped with more than half the file unread, then cut below half.
        [ "$rc" -eq 1 ] || fail "try $i: stopped after reading $stopped of $size bytes, cut to $cut: exit $rc, not a mid-read failure: $(cat "$T/e")"
        guided_hit=$((guided_hit + 1))
    fi
    [ "$rc" -lt 128 ] || fail "try $i: killed by signal $((rc - 128)) (cut to $cut bytes after $d ms)"
    case $rc in
    0)
        [ "$(sha256sum <"$out")" = "$ref" ] || fail "try $i: exit 0 but the output differs from the reference"
        late=$((late + 1))
        ;;
    1 | 2)
        [ "$(wc -l <"$T/e")" -eq 1 ] || fail "try $i: not a one-line message: $(cat "$T/e")"
        must_match "$T/e" "^npuc: error: $in: "
        if [ "$rc" -eq 1 ]; then
            must_match "$T/e" "tensor 'layers\.[0-9]+\.(weight|bias)': the file shrank from $size to $cut bytes"
            mid=$((mid + 1))
        else
            early=$((early + 1))
        fi
        [ ! -e "$out" ] || fail "try $i: exit $rc but $out exists"
        ;;
    *) fail "try $i: exit $rc: $(cat "$T/e")" ;;
    esac
    left=$(find "$T" -name '*.tmp' | head -3)
    [ -z "$left" ] || fail "try $i: temporary files left: $left"
done
echo "$TRIES tries (a run takes $ms ms): $mid cut mid-read (exit 1), $early before opening (exit 2), $late after reading (exit 0)"
echo "$guided guided tries: $guided_hit stopped mid-read and cut (each failed mid-read, exit 1)"
[ "$guided_hit" -ge 1 ] || fail "none of $guided guided tries caught the run mid-read"

# Replaced (renamed over) while being read: the run reads the file it opened.
cp "$T/model.safetensors" "$T/in.safetensors"
rm -f "$T/out.safetensors"
"$NPUC_REAL_BIN" quantize "$T/in.safetensors" -o "$T/out.safetensors" -j1 -q >/dev/null 2>"$T/e" &
pid=$!
# Replace it once the run has it open (a fixed delay raced slow starts under ASan).
for _ in $(seq 500); do
    ls -l "/proc/$pid/fd" 2>/dev/null | grep -q "in\.safetensors" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.01
done
head -c 100 /dev/zero >"$T/other"
mv "$T/other" "$T/in.safetensors"
rc=0
wait "$pid" || rc=$?
[ "$rc" -eq 0 ] || fail "input replaced by rename: exit $rc: $(cat "$T/e")"
[ "$(sha256sum <"$T/out.safetensors")" = "$ref" ] || fail "input replaced by rename: output differs from the reference"
echo "input replaced by rename while read: output equals the reference"
