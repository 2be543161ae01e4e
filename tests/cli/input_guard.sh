#!/usr/bin/env bash
# Issue 15, "every CLI test checks the input's bytes and mtime are unchanged
# afterwards": the guard itself (tests/cli/lib/npuc_wrap.c, exported as
# NPUC_BIN by cli_test.bash) can fail.  A fake "npuc" (a shell script) does
# what npuc must never do: touch, rewrite or replace its input, or a file
# inside a batch input directory.  The wrapper must print "INPUT MODIFIED",
# log it and exit 97; a test script that ignores that exit code must still
# fail through cli_test.bash's EXIT trap.  What npuc may do is not flagged:
# write its outputs (-o, --report, --summary, --merge-summaries), replace the
# input with -f when it is also the output.  The exit code, a death by
# signal, and signals sent to the wrapper pass through unchanged.
source "$(dirname "$0")/lib/cli_test.bash"
[ -n "${NPUC_WRAP:-}" ] || skip "NPUC_WRAP is not set (run through ctest)"

# A real run is not flagged (and is this file's run under memcheck in the
# valgrind pass); the fakes below never run under valgrind.
expect_rc 0 "$NPUC_BIN" info "$SAMPLES/cnn_bn.safetensors"
[ ! -s "$NPUC_GUARD_DIR/log" ] || fail "a plain npuc info was flagged: $(cat "$NPUC_GUARD_DIR/log")"
export NPUC_VALGRIND=0

# The fake npuc: `fake ACTION FILE [args...]`.
cat >"$T/fake" <<'EOF'
#!/usr/bin/env bash
act=$1 f=$2
case $act in
    ok) ;;
    touch) touch -d '2001-01-01 00:00:00.5' "$f" ;;
    byte) # one byte changed, size and mtime restored
        cp -p "$f" "$f.keep"
        printf 'X' | dd of="$f" bs=1 seek=3 conv=notrunc status=none
        touch -r "$f.keep" "$f"; rm "$f.keep" ;;
    append) printf 'x' >>"$f" ;;
    replace) cp "$f" "$f.new" && mv "$f.new" "$f" ;;
    dir) printf 'x' >>"$f/sub/m.safetensors" ;;
    out) printf 'x' >>"$4" ;;        # fake ok X -o OUT: writes its output only
    rc) exit "$f" ;;
    segv) kill -SEGV $$ ;;
    sleep) sleep 20 & s=$!; trap 'kill $s; exit 143' TERM; wait ;;
esac
exit 0
EOF
chmod +x "$T/fake"
printf 'abcdefgh%.0s' $(seq 512) >"$T/in.bin"
mkdir -p "$T/zoo/sub"
printf 'model' >"$T/zoo/sub/m.safetensors"

# guarded WANT ACTION ARGS...: runs the wrapper on the fake with a guard
# directory of its own (the test's own guard log must stay empty).
n=0
guarded() {
    local want=$1
    shift
    n=$((n + 1))
    mkdir "$T/g$n"
    local rc=0
    NPUC_GUARD_DIR="$T/g$n" NPUC_REAL_BIN="$T/fake" "$NPUC_BIN" "$@" >"$T/out" 2>"$T/err" || rc=$?
    [ "$rc" -eq "$want" ] || { cat "$T/err" >&2; fail "wrapper on '$*': exit $rc, expected $want"; }
}
flagged() {
    guarded 97 "$@"
    must_match "$T/err" "^INPUT MODIFIED: $2"
    must_match "$T/g$n/log" "^INPUT MODIFIED: $2"
}

for act in touch byte append replace; do
    cp -p "$T/in.bin" "$T/a.bin"
    flagged "$act" "$T/a.bin"
    echo "flagged: $act"
done
guarded 97 dir "$T/zoo" --output "$T/ref"
must_match "$T/g$n/log" "^INPUT MODIFIED: $T/zoo/sub/m.safetensors"
# Allowed: writing the outputs, replacing an input named as the output with -f.
guarded 0 ok "$T/in.bin"
[ ! -s "$T/g$n/log" ] || fail "a run that changed nothing was flagged"
cp "$T/in.bin" "$T/o.bin"
guarded 0 out "$T/in.bin" -o "$T/o.bin"
guarded 0 out "$T/in.bin" --report "$T/o.bin"
guarded 0 replace "$T/o.bin" -o "$T/o.bin" -f
guarded 97 replace "$T/o.bin" -o "$T/o.bin" # without -f that is a modified input
# Exit codes and signals pass through.
guarded 3 rc 3
guarded 139 segv x
NPUC_GUARD_DIR="$T/gs" NPUC_REAL_BIN="$T/fake" env --default-signal=TERM "$NPUC_BIN" sleep x &
pid=$!
sleep 0.5
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
[ "$rc" -eq 143 ] || fail "SIGTERM to the wrapper: exit $rc, not 143 (the fake's own exit)"

# The EXIT trap of cli_test.bash fails a test that ignored the exit code.
cat >"$T/t.sh" <<EOF
source "$NPUC_SRC/tests/cli/lib/cli_test.bash"
cp "$T/in.bin" "\$T/x.bin"
NPUC_REAL_BIN="$T/fake" "\$NPUC_BIN" touch "\$T/x.bin" || true
exit 0
EOF
rc=0
env -u NPUC_REAL_BIN NPUC_BIN="$NPUC_REAL_BIN" bash "$T/t.sh" >"$T/out" 2>"$T/err" || rc=$?
[ "$rc" -eq 1 ] || { cat "$T/err" >&2; fail "a test that ignored exit 97 exited $rc, not 1"; }
must_match "$T/err" 'FAIL: an input was modified'
echo "input guard: 4 kinds of modification flagged, outputs and -f replacement allowed, exit codes and signals pass through"
