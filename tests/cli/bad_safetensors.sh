#!/usr/bin/env bash
# bad_safetensors.sh - the CLI on malformed safetensors files.
#
# Writes a few representative bad files (Python stdlib: struct + json, no
# npuc code involved) and checks, for `npuc info` and `npuc validate`: exit
# code 2, nothing on stdout, exactly one line on stderr that starts with
# "npuc: error: ", names the file and names the problem.  `npuc convert BAD
# -o out.h5` must fail the same way and leave neither out.h5 nor out.h5.tmp.
# The full catalogue of bad files lives in tests/unit/test_st_bad.c.
set -euo pipefail

if [[ -z ${NPUC_BIN:-} || ! -x $NPUC_BIN ]]; then
    echo "skip: npuc binary '${NPUC_BIN:-}' not built" >&2
    exit 77
fi
PY=${NPUC_PYTHON:-/usr/bin/python3}
if [[ ! -x $PY ]]; then
    echo "skip: no python3 at '$PY'" >&2
    exit 77
fi

source "$(dirname "$0")/lib/cli_test.bash" # $T, the input guard
mkdir -p "$T/in" "$T/dir with space" "$T/out"

# Each file is "<name>.safetensors" plus a line "<name>\t<fragment>" in
# cases.tsv: the fragment the error line must contain.
"$PY" - "$T" <<'EOF'
import json, os, struct, sys

root = sys.argv[1]
cases = []

def put(name, header, data=b"", length=None, raw=None, where="in"):
    """Writes 8-byte LE length + header bytes + data (or raw bytes)."""
    path = os.path.join(root, where, name + ".safetensors")
    if raw is None:
        h = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
        raw = struct.pack("<Q", len(h) if length is None else length) + h + data
    with open(path, "wb") as f:
        f.write(raw)
    return path

def case(name, frag, *args, **kw):
    path = put(name, *args, **kw)
    cases.append((path, frag))

def t(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}

case("short", "too short for a safetensors header", None, raw=b"\x02\0\0\0\0\0\0")
case("len_past_eof", "exceeds the file", b"{}", length=64)
case("len_over_limit", "exceeds the 100000000-byte limit", b"{}", length=100000001)
case("not_object", "does not start with a JSON object", b"[]")
case("trailing_comma", "header JSON:", b'{"w":' + json.dumps(t("F32", [1], 0, 4)).encode() + b',}',
     b"\0" * 4)
case("bad_utf8", "not valid UTF-8", b'{"w\xff":{}}')
case("dup_name", "duplicate object key",
     b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
     b'"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', b"\0" * 8)
case("unknown_dtype", "unknown dtype 'F128'", {"enc.w": t("F128", [1], 0, 16)}, b"\0" * 16)
case("rank9", "rank 9 exceeds 8", {"enc.w": t("U8", [1] * 9, 0, 1)}, b"\0")
case("overflow", "shape overflows 64-bit sizes", {"enc.w": t("U8", [2**32, 2**32], 0, 0)})
case("size_mismatch", "hold 4 bytes, F32 shape needs 8", {"enc.w": t("F32", [2], 0, 4)}, b"\0" * 4)
case("gap", "gap in the buffer", {"a": t("F32", [1], 0, 4), "enc.b": t("F32", [1], 8, 12)}, b"\0" * 12)
case("truncated", "but the header describes", {"enc.w": t("F32", [4], 0, 16)}, b"\0" * 8)
case("newline_name", "unknown dtype 'F99'", {"enc\nw": t("F99", [1], 0, 4)}, b"\0" * 4)
case("spaced_path", "missing field 'shape'", {"enc.w": {"dtype": "F32", "data_offsets": [0, 4]}},
     b"\0" * 4, where="dir with space")

with open(os.path.join(root, "cases.tsv"), "w") as f:
    for path, frag in cases:
        f.write(path + "\t" + frag + "\n")
EOF

failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

# run_bad LABEL FILE FRAGMENT CMD...: the command must exit 2 with nothing on
# stdout and one "npuc: error: " line on stderr naming FILE and FRAGMENT.
run_bad() {
    local label=$1 file=$2 frag=$3
    shift 3
    local rc=0
    "$@" >"$T/stdout" 2>"$T/stderr" || rc=$?
    local err
    err=$(cat "$T/stderr")
    [[ $rc -eq 2 ]] || fail "$label: exit $rc, want 2 (stderr: $err)"
    [[ ! -s $T/stdout ]] || fail "$label: stdout not empty: $(head -c 200 "$T/stdout")"
    local lines
    lines=$(wc -l <"$T/stderr")
    [[ $lines -eq 1 && $(tail -c 1 "$T/stderr" | od -An -c | tr -d ' ') == '\n' ]] ||
        fail "$label: stderr has $lines lines, want exactly 1: $err"
    if grep -q $'\r' "$T/stderr"; then fail "$label: carriage return on stderr"; fi
    [[ $err == "npuc: error: "* ]] || fail "$label: stderr does not start with 'npuc: error: ': $err"
    [[ $err == *"$file"* ]] || fail "$label: stderr does not name $file: $err"
    [[ $err == *"$frag"* ]] || fail "$label: stderr lacks '$frag': $err"
}

n=0
while IFS=$'\t' read -r file frag; do
    n=$((n + 1))
    name=$(basename "$file" .safetensors)
    run_bad "info $name" "$file" "$frag" "$NPUC_BIN" info "$file"
    run_bad "validate $name" "$file" "$frag" "$NPUC_BIN" validate "$file"
    out="$T/out/$name.h5"
    run_bad "convert $name" "$file" "$frag" "$NPUC_BIN" convert "$file" -o "$out"
    [[ ! -e $out ]] || fail "convert $name: $out exists"
    [[ ! -e $out.tmp ]] || fail "convert $name: $out.tmp exists"
done <"$T/cases.tsv"

[[ $n -ge 10 ]] || fail "only $n cases were written"
# Nothing may appear in the output folder, under any name.
leftover=$(ls -A "$T/out")
[[ -z $leftover ]] || fail "files left in the output folder: $leftover"

if [[ $failures -gt 0 ]]; then
    echo "$failures check(s) failed over $n bad files" >&2
    exit 1
fi
echo "ok: $n bad files, info/validate/convert each"
