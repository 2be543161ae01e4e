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

T="$(mktemp -d "${TMPDIR:-/tmp}/npuc-cli.XXXXXX")"
trap 'rm -rf "$T"' EXIT

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
