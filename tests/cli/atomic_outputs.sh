#!/usr/bin/env bash
# Issue 15, outputs: every run writes its own temporary file and publishes it
# whole, so two runs racing for one output never mix their bytes.
#  - 2 runs x 6 tries, with and without -f, safetensors and HDF5 outputs:
#    the file passes `validate --deep` and its sha256 is one of the two runs'
#    own results (made separately beforehand); without -f exactly one run
#    exits 0 and the other 2 ("output exists");
#  - no temporary file is left; a dead run's temporary file (its lock gone)
#    is removed by the next run writing that output, a live one's is not;
#  - an output extension no format claims is exit 2 for every command that
#    writes one, and nothing is written;
#  - an output that is the input itself: refused without -f, with -f the
#    input is replaced whole while being read.
source "$(dirname "$0")/lib/cli_test.bash"
"$PY" -c "import numpy" 2>/dev/null || skip "numpy is not installed for $PY"
TRIES=${NPUC_RACE_TRIES:-6}

"$PY" "$TESTLIB/io_models.py" dense "$T/d.safetensors" 4 256 512
"$NPUC_BIN" convert -q "$T/d.safetensors" -o "$T/d.h5" --deflate 1
in_sha=$(sha256sum "$T/d.safetensors" "$T/d.h5")

no_temps() {
    local left
    left=$(find "$T" -name '*.tmp' | head -3)
    [ -z "$left" ] || fail "temporary files left: $left"
}

for ext in safetensors h5; do
    in="$T/d.$ext"
    # Each run's own result, made alone.
    for b in 8 4; do
        "$NPUC_BIN" quantize "$in" --bits "$b" -o "$T/ref$b.$ext" -q >/dev/null
    done
    r8=$(sha256sum <"$T/ref8.$ext" | cut -d' ' -f1)
    r4=$(sha256sum <"$T/ref4.$ext" | cut -d' ' -f1)
    [ "$r8" != "$r4" ] || fail "$ext: the two runs' results are identical; the test shows nothing"
    for force in "" -f; do
        wins8=0 wins4=0
        for i in $(seq "$TRIES"); do
            out="$T/race.$ext"
            rm -f "$out"
            "$NPUC_BIN" quantize "$in" --bits 8 -o "$out" $force -q >/dev/null 2>"$T/e8" & p8=$!
            "$NPUC_BIN" quantize "$in" --bits 4 -o "$out" $force -q >/dev/null 2>"$T/e4" & p4=$!
            rc8=0 rc4=0
            wait $p8 || rc8=$?
            wait $p4 || rc4=$?
            got=$(sha256sum <"$out" | cut -d' ' -f1)
            [ "$got" = "$r8" ] || [ "$got" = "$r4" ] || fail "$ext $force try $i: the output is neither run's result"
            expect_rc 0 "$NPUC_BIN" validate --deep "$out"
            if [ -n "$force" ]; then
                [ "$rc8" -eq 0 ] && [ "$rc4" -eq 0 ] || fail "$ext -f try $i: exits $rc8 and $rc4, both should be 0"
            else
                # The winner's bytes are at the output; the loser exits 2.
                if [ "$got" = "$r8" ]; then w=$rc8 l=$rc4 le="$T/e4"; else w=$rc4 l=$rc8 le="$T/e8"; fi
                [ "$w" -eq 0 ] && [ "$l" -eq 2 ] ||
                    fail "$ext try $i: winner exits $w, loser $l (want 0 and 2): $(cat "$le")"
                must_match "$le" 'output exists \(use -f to overwrite\)'
            fi
            [ "$got" = "$r8" ] && wins8=$((wins8 + 1)) || wins4=$((wins4 + 1))
            no_temps
        done
        echo "$ext ${force:-no -f}: $TRIES tries, int8 result $wins8 times, int4 $wins4 times"
    done
done

# A dead run's temporary file: same name pattern, no lock held (made by hand
# here, as SIGKILL leaves it); a live run's: the lock is held (flock(1)).
out="$T/stale.safetensors"
echo junk >"$T/.stale.safetensors.npuc-999999-00000000deadbeef.tmp"
echo held >"$T/.stale.safetensors.npuc-999998-00000000feedface.tmp"
echo other >"$T/.other.safetensors.npuc-999997-0000000000000001.tmp"
flock "$T/.stale.safetensors.npuc-999998-00000000feedface.tmp" sleep 30 & holder=$!
sleep 0.3
expect_rc 0 "$NPUC_BIN" quantize "$T/d.safetensors" -o "$out" -q
[ ! -e "$T/.stale.safetensors.npuc-999999-00000000deadbeef.tmp" ] || fail "a dead run's temporary file was not removed"
[ -e "$T/.stale.safetensors.npuc-999998-00000000feedface.tmp" ] || fail "a live run's temporary file was removed"
[ -e "$T/.other.safetensors.npuc-999997-0000000000000001.tmp" ] || fail "another output's temporary file was removed"
kill "$holder" 2>/dev/null || true
wait "$holder" 2>/dev/null || true
rm -f "$T"/.*.npuc-*.tmp

# Unclaimed output extensions: exit 2 on every command writing a model, nothing written.
unclaimed() {
    local o=$1 cmd
    shift
    for cmd in "$@"; do
        expect_rc 2 "$NPUC_BIN" $cmd -o "$T/$o"
        must_match "$T/err" "$o: cannot tell the output format from the name \(use \.safetensors.*\.h5"
        [ ! -e "$T/$o" ] || fail "$cmd -o $o wrote $o"
    done
}
unclaimed x.tflite "quantize $T/d.safetensors" "lowrank $T/d.safetensors --rank 4" \
    "prune $T/d.safetensors --sparsity 0.5" "sparsify $T/d.safetensors" "fold-bn $SAMPLES/cnn_bn.safetensors" \
    "decompress $T/ref8.safetensors" "run $NPUC_SRC/samples/recipes/int8_per_channel.yaml $T/d.safetensors"
unclaimed x.pb "quantize $T/d.h5" "prune $T/d.safetensors --sparsity 0.5" # .onnx is claimed now (docs/onnx.md)
unclaimed t.pt "fold-bn $SAMPLES/cnn_bn.safetensors" "fold-bn $SAMPLES/cnn_bn_keras.h5"
# A name without an extension keeps meaning "the input's format".
expect_rc 0 "$NPUC_BIN" quantize "$T/d.safetensors" -o "$T/noext" -q
"$PY" -c 'import sys; d = open(sys.argv[1], "rb").read(9); sys.exit(d[8:9] != b"{")' "$T/noext" ||
    fail "noext is not a safetensors file"
no_temps

# The output is the input (same inode, also through another name).
cp "$T/d.safetensors" "$T/self.safetensors"
ln "$T/self.safetensors" "$T/self_link.safetensors"
before=$(sha256sum <"$T/self.safetensors")
expect_rc 2 "$NPUC_BIN" quantize "$T/self.safetensors" -o "$T/self_link.safetensors"
must_match "$T/err" 'output exists \(use -f to overwrite\)'
[ "$(sha256sum <"$T/self.safetensors")" = "$before" ] || fail "a refused run changed its input"
expect_rc 0 "$NPUC_BIN" quantize "$T/self.safetensors" -o "$T/self.safetensors" -f -q
cmp -s "$T/self.safetensors" "$T/ref8.safetensors" || fail "quantize -f onto its own input differs from the reference"
[ "$(sha256sum <"$T/self_link.safetensors")" = "$before" ] || fail "the input's other name changed: the input was written in place"
no_temps

# A --report path that cannot be written fails before anything is published.
for bad in "$T/no/such/dir/r.json" "$T"; do
    rm -f "$T/rep.safetensors"
    expect_rc 2 "$NPUC_BIN" quantize "$T/d.safetensors" -o "$T/rep.safetensors" --report "$bad"
    must_match "$T/err" "cannot write the report there"
    [ ! -e "$T/rep.safetensors" ] || fail "--report $bad: the artifact was published without its report"
done
no_temps

# Inputs are never modified.
[ "$(sha256sum "$T/d.safetensors" "$T/d.h5")" = "$in_sha" ] || fail "an input changed"
echo "atomic outputs: ok"
