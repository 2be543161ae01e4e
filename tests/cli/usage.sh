# usage.sh - the conventions every command shares (docs/cli.md): --help on
# stdout with exit 0; unknown flags, missing values, missing operands and
# missing files exit 2 with `npuc: error: ...` on stderr and nothing on
# stdout; an existing output is never overwritten without -f (exit 2, file
# unchanged, no temporary left behind) and is with -f.
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"

SAMPLE="$SAMPLES/cnn_bn.safetensors"
[ -f "$SAMPLE" ] || fail "sample cnn_bn.safetensors is missing"

# ---------------------------------------------------------------- top level
expect_rc 0 "$NPUC_BIN" --help
must_be_empty "$T/err"
must_match "$T/out" '^Usage: npuc <command>'
must_match "$T/out" '^Exit codes'
must_match "$T/out" '^  3  '
# The command list, as --help prints it (two spaces, name, spaces, summary).
cmds=$(sed -n '/^Commands:/,/^$/p' "$T/out" | awk 'NF >= 2 && $1 != "Commands:" {print $1}')
for c in info validate convert; do
    grep -qx "$c" <<<"$cmds" || fail "npuc --help does not list '$c'"
done

expect_rc 0 "$NPUC_BIN" --version
must_match "$T/out" '^npuc [0-9]+\.[0-9]+\.[0-9]+ \(git [^,]+, [A-Za-z+]+ build\)$'   # issue 19: --version gives the build details below
expect_rc 0 "$NPUC_BIN" help info
must_match "$T/out" '^Usage: npuc info '

expect_rc 2 "$NPUC_BIN"
must_match "$T/err" '^Usage: npuc'
must_be_empty "$T/out"
expect_rc 2 "$NPUC_BIN" frobnicate
must_match "$T/err" "^npuc: error: unknown command 'frobnicate'$"
expect_rc 2 "$NPUC_BIN" --frobnicate
must_match "$T/err" '^npuc: error: '

# ---------------------------------------------------------------- per command
for c in $cmds; do
    expect_rc 0 "$NPUC_BIN" "$c" --help
    must_be_empty "$T/err"
    must_match "$T/out" "^Usage: npuc $c "
    expect_rc 0 "$NPUC_BIN" "$c" -h
    must_match "$T/out" "^Usage: npuc $c "

    expect_rc 2 "$NPUC_BIN" "$c" --no-such-flag "$SAMPLE"
    must_be_empty "$T/out"
    must_match "$T/err" "^npuc: error: unknown option '--no-such-flag'$"
    must_match "$T/err" "^Try 'npuc $c --help'\\.$"

    expect_rc 2 "$NPUC_BIN" "$c" -Z "$SAMPLE"
    must_match "$T/err" "^npuc: error: unknown option '-Z'$"
done

# The commands that read one model file: no operand, and a missing file.
for c in info validate convert; do
    out=()
    [ "$c" = convert ] && out=(-o "$T/never.safetensors")
    expect_rc 2 "$NPUC_BIN" "$c"
    must_be_empty "$T/out"
    must_match "$T/err" '^npuc: error: missing '

    # A missing input names its path.
    expect_rc 2 "$NPUC_BIN" "$c" "$T/does-not-exist.safetensors" "${out[@]}"
    must_be_empty "$T/out"
    must_match "$T/err" "^npuc: error: $T/does-not-exist\\.safetensors: No such file or directory$"
    [ ! -e "$T/never.safetensors" ] || fail "$c created an output for a missing input"
done

# Options that take a value, without one; flags that take none, with one.
expect_rc 2 "$NPUC_BIN" info "$SAMPLE" --layout
must_match "$T/err" "^npuc: error: option '--layout' needs a value$"
expect_rc 2 "$NPUC_BIN" info "$SAMPLE" --json=yes
must_match "$T/err" "^npuc: error: option '--json' takes no value$"
expect_rc 2 "$NPUC_BIN" convert "$SAMPLE" -o
must_match "$T/err" "^npuc: error: option '-o' needs a value$"
expect_rc 2 "$NPUC_BIN" info "$SAMPLE" "$SAMPLE"
must_match "$T/err" "^npuc: error: unexpected argument "
# Options a command does not take are unknown to it.
expect_rc 2 "$NPUC_BIN" info "$SAMPLE" -o "$T/x.h5"
must_match "$T/err" "^npuc: error: unknown option '-o'$"
expect_rc 2 "$NPUC_BIN" validate "$SAMPLE" --deep=1
must_match "$T/err" "^npuc: error: option '--deep' takes no value$"

# convert's own checks.
expect_rc 2 "$NPUC_BIN" convert "$SAMPLE"
must_match "$T/err" '^npuc: error: missing -o OUT$'
expect_rc 2 "$NPUC_BIN" convert "$SAMPLE" -o "$T/out.bin"
must_match "$T/err" "^npuc: error: $T/out\\.bin: cannot tell the output format"
[ ! -e "$T/out.bin" ] || fail "convert wrote an output with an unknown extension"
expect_rc 2 "$NPUC_BIN" convert "$SAMPLE" -o "$T/x.h5" --deflate 10
must_match "$T/err" "^npuc: error: --deflate: deflate level 10 is outside 0\\.\\.9$"
# Issue 31 item 16: one parser for write options, so every command says the same.
head -1 "$T/err" >"$T/err.convert"
expect_rc 2 "$NPUC_BIN" quantize "$SAMPLE" -o "$T/x.h5" --deflate 10
head -1 "$T/err" | cmp -s - "$T/err.convert" || fail "quantize and convert word a bad --deflate differently: $(head -1 "$T/err")"
expect_rc 2 "$NPUC_BIN" convert "$SAMPLE" -o "$T/x.h5" --h5-style keras4
must_match "$T/err" "^npuc: error: --h5-style: structure 'keras4': expected plain, keras2 or keras3$"
expect_rc 2 "$NPUC_BIN" convert "$SAMPLE" -o "$T/x.safetensors" --dtype i8
must_match "$T/err" "^npuc: error: --dtype: expected f32, f16 or bf16, got 'i8'$"
[ ! -e "$T/x.h5" ] && [ ! -e "$T/x.safetensors" ] || fail "a rejected convert wrote an output"
expect_rc 2 "$NPUC_BIN" convert "$SAMPLE" -o "$T/x.safetensors" --layout '^nothing$=io'
must_match "$T/err" "matches no tensor"
[ ! -e "$T/x.safetensors" ] || fail "a rejected convert wrote an output"

# ---------------------------------------------------------------- no overwrite
for out in "$T/exists.safetensors" "$T/exists.h5"; do
    printf 'precious bytes\n' >"$out"
    cp "$out" "$T/orig"
    expect_rc 2 "$NPUC_BIN" convert "$SAMPLE" -o "$out"
    must_be_empty "$T/out"
    must_match "$T/err" "^npuc: error: $out: output exists \\(use -f to overwrite\\)$"
    cmp -s "$out" "$T/orig" || fail "convert without -f changed $out"
    [ ! -e "$out.tmp" ] || fail "convert left $out.tmp behind"

    expect_rc 0 "$NPUC_BIN" convert "$SAMPLE" -o "$out" -f
    cmp -s "$out" "$T/orig" && fail "convert -f did not overwrite $out"
    [ ! -e "$out.tmp" ] || fail "convert -f left $out.tmp behind"
    expect_rc 0 "$NPUC_BIN" validate "$out"
    # --force is the long spelling; a second -f run replaces it again.
    expect_rc 0 "$NPUC_BIN" convert --force -q "$SAMPLE" -o "$out"
    must_be_empty "$T/err"
done

# -q silences the summary; results never go to stdout for convert.
expect_rc 0 "$NPUC_BIN" convert "$SAMPLE" -o "$T/q.safetensors" -q
must_be_empty "$T/out"
must_be_empty "$T/err"

echo "usage: ok"
