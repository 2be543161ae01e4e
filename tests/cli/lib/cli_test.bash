# cli_test.bash - sourced by every tests/cli/*.sh script (this folder is not
# globbed, so it is not a test itself).
#
# CTest passes NPUC_BIN, NPUC_SRC, NPUC_BUILD, NPUC_SHARED_DATA, NPUC_PYTHON
# and NPUC_GEN_SAMPLES (tests/CMakeLists.txt).  Exit 77 means "skipped" and is
# used only when a dependency is genuinely absent.
set -euo pipefail

: "${NPUC_BIN:?NPUC_BIN is not set (run through ctest)}"
: "${NPUC_SRC:?NPUC_SRC is not set (run through ctest)}"

PY="${NPUC_PYTHON:-python3}"
export PYTHONDONTWRITEBYTECODE=1 # keep __pycache__ out of the source tree
[ -n "$PY" ] || PY=python3
TESTLIB="$NPUC_SRC/tests/cli/lib"
SAMPLES="$NPUC_SRC/samples"
SHARED="${NPUC_SHARED_DATA:-}"
MODELS="silero_vad_v5 ppocrv4_rec ppocr_mobile_v2_cls nsfwjs_mobilenet_v2"

T="$(mktemp -d "${TMPDIR:-/tmp}/npuc-cli.$(basename "$0" .sh).XXXXXX")" # the test's name: a leftover folder says whose it is

# Input guard (issue 15: inputs are never modified).  NPUC_BIN becomes the
# wrapper tests/cli/lib/npuc_wrap.c, which runs the real binary
# (NPUC_REAL_BIN) and checks every input file named on its command line is
# unchanged afterwards (size, mtime, hash).  A change is appended to
# $NPUC_GUARD_DIR/log and cli_test_exit fails the test, whatever the test
# expected of that run's exit code.  Runs the test itself disturbs on
# purpose (the input truncated underneath) use "$NPUC_REAL_BIN".  In the
# valgrind pass of .ci/run the wrapper also runs a subset of the
# invocations under memcheck and records its errors in the same log.
export NPUC_REAL_BIN="${NPUC_REAL_BIN:-$NPUC_BIN}"
export NPUC_GUARD_DIR="$T/.guard"
mkdir "$NPUC_GUARD_DIR"
if [ -n "${NPUC_WRAP:-}" ]; then
    [ -x "$NPUC_WRAP" ] || { echo "FAIL: NPUC_WRAP=$NPUC_WRAP is not executable" >&2; exit 1; }
    export NPUC_BIN="$NPUC_WRAP"
fi

# cli_test_exit: the EXIT trap.  Fails the test (exit 1) when the guard log
# is not empty, showing it and the valgrind logs it names, then removes $T.
# A test with its own EXIT trap calls it last.
cli_test_exit() {
    local rc=${1:-$?} f
    if [ -s "$NPUC_GUARD_DIR/log" ]; then
        echo "--- input guard / valgrind ($NPUC_GUARD_DIR/log):" >&2
        head -c 4000 "$NPUC_GUARD_DIR/log" >&2
        sed -n 's/^VALGRIND ERRORS: //p' "$NPUC_GUARD_DIR/log" | head -3 | while read -r f; do
            echo "--- $f:" >&2
            head -c 12000 "$f" >&2
        done
        echo "FAIL: an input was modified or valgrind found errors (see above)" >&2
        rc=1
    fi
    rm -rf "$T"
    # NPUC_TEST_TIMES=FILE: the test's CPU seconds (its shell and every
    # child it waited for: npuc, python, valgrind), for finding where a
    # suite's time goes on a machine too loaded for wall times.
    if [ -n "${NPUC_TEST_TIMES:-}" ]; then
        times >"$NPUC_TEST_TIMES.$$" # not in a pipe: a subshell's times are its own
        awk -v t="$(basename "$0" .sh)" -v w="$SECONDS" '{ for (i = 1; i <= NF; i++) { split($i, a, "m"); s += a[1] * 60 + a[2] } }
            END { printf "%s %.1f %d\n", t, s, w }' "$NPUC_TEST_TIMES.$$" >>"$NPUC_TEST_TIMES"
        rm -f "$NPUC_TEST_TIMES.$$"
    fi
    exit "$rc"
}
trap cli_test_exit EXIT

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

skip() {
    echo "SKIP: $*" >&2
    exit 77
}

# expect_rc WANT CMD...: runs CMD with stdout in $T/out and stderr in $T/err
# and fails the test (showing both) unless it exits with WANT.
expect_rc() {
    local want=$1 rc=0
    shift
    "$@" >"$T/out" 2>"$T/err" || rc=$?
    if [ "$rc" -ne "$want" ]; then
        echo "--- stdout:" >&2
        head -c 4000 "$T/out" >&2 || true
        echo "--- stderr:" >&2
        head -c 4000 "$T/err" >&2 || true
        fail "expected exit $want, got $rc: $*"
    fi
}

# grep_q FILE PATTERN (extended regex) or fail, showing the file.
must_match() {
    local file=$1 pat=$2
    if ! grep -Eq -- "$pat" "$file"; then
        echo "--- $file:" >&2
        head -c 4000 "$file" >&2 || true
        fail "'$pat' not found in $(basename "$file")"
    fi
}

must_not_match() {
    local file=$1 pat=$2
    if grep -Eq -- "$pat" "$file"; then
        echo "--- $file:" >&2
        head -c 4000 "$file" >&2 || true
        fail "'$pat' unexpectedly found in $(basename "$file")"
    fi
}

must_be_empty() {
    if [ -s "$1" ]; then
        echo "--- $1:" >&2
        head -c 4000 "$1" >&2
        fail "$(basename "$1") should be empty"
    fi
}

# Runs tests/cli/lib/npuc_test.py (independent safetensors/HDF5 readers).
npuc_py() {
    "$PY" "$TESTLIB/npuc_test.py" "$@"
}

have_h5py() {
    "$PY" -c 'import h5py' 2>/dev/null
}

# keep_case N: in the quick passes of .ci/run (NPUC_TEST_QUICK=1: the
# sanitizer pass, after the release pass ran every case) true for every Nth
# call in the test, else always true.  Put it at the top of the innermost body
# of a loop over cases (`keep_case 3 || continue`): with N coprime to the
# inner loop's length the kept cases rotate, so every value of every loop
# still runs at least once under the sanitizers.
NPUC__CASE=0
keep_case() {
    NPUC__CASE=$((NPUC__CASE + 1))
    [ "${NPUC_TEST_QUICK:-0}" != 1 ] || [ $(((NPUC__CASE - 1) % $1)) -eq 0 ]
}

# is_quick: true in the quick passes (see keep_case).
is_quick() { [ "${NPUC_TEST_QUICK:-0}" = 1 ]; }
