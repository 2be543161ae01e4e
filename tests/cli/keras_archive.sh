#!/usr/bin/env bash
# keras_archive.sh - issue 16 item 2: Keras 3 .keras archives, built here
# with zipfile + h5py in Keras 3's layout (tests/cli/lib/keras_archive.py):
#   - fold-bn pairs conv2d -> batch_normalization from config.json alone (no
#     --accept-guesses) and writes a valid .keras: same listing, metadata and
#     assets unchanged, config.json without the BatchNorm, the fold as NumPy
#     computes it;
#   - quantize --fake-quant writes a .keras whose kernels are NumPy's int8
#     per-channel fake quantization and whose other entries are unchanged;
#   - Keras 3 bfloat16 (opaque + dtype attribute) round-trips bit for bit
#     through .keras and into safetensors BF16;
#   - hostile archives (path traversal, absolute names, a declared 4 GiB
#     entry, no weights, weights that are not HDF5, not a zip) exit 2 with
#     one line naming the archive, and no extracted file is left behind.
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"
have_h5py || skip "h5py is not installed for $PY"
K=("$PY" "$TESTLIB/keras_archive.py")
export TMPDIR="$T/tmp" # where the reader extracts model.weights.h5
mkdir "$TMPDIR"

"${K[@]}" make "$T/m.keras"
expect_rc 0 "$NPUC_BIN" info "$T/m.keras"
must_match "$T/out" '^format: +keras \(keras3\)'
must_match "$T/out" 'layers/conv2d/vars/0 +F32 +\[3,3,3,8\] .* conv +hwio'

expect_rc 0 "$NPUC_BIN" fold-bn "$T/m.keras" -o "$T/f.keras" -q
"${K[@]}" check-fold "$T/m.keras" "$T/f.keras" || fail "fold-bn of a .keras archive"

expect_rc 0 "$NPUC_BIN" quantize "$T/m.keras" --fake-quant -o "$T/q.keras" -q
"${K[@]}" check-fq "$T/m.keras" "$T/q.keras" || fail "quantize --fake-quant of a .keras archive"

"${K[@]}" make "$T/b.keras" bf16
expect_rc 0 "$NPUC_BIN" convert "$T/b.keras" -o "$T/b2.keras"
"${K[@]}" check-bf16 "$T/b.keras" "$T/b2.keras" || fail "bf16 .keras -> .keras"
expect_rc 0 "$NPUC_BIN" convert "$T/b2.keras" -o "$T/b.safetensors"
"${K[@]}" bf16-bits "$T/b.keras" "$T/b.safetensors" || fail "bf16 .keras -> safetensors"

# Through safetensors and back: the archive's entries ride as metadata.
if [ "${NPUC_TEST_QUICK:-0}" != 1 ]; then
    expect_rc 0 "$NPUC_BIN" convert "$T/m.keras" -o "$T/m.safetensors"
    expect_rc 0 "$NPUC_BIN" convert "$T/m.safetensors" -o "$T/back.keras"
    "${K[@]}" check-same "$T/m.keras" "$T/back.keras" || fail ".keras -> safetensors -> .keras"
fi
# Without a Keras config the archive has no config.json, and a warning says so.
"${K[@]}" make-st "$T/noconf.safetensors"
expect_rc 0 "$NPUC_BIN" convert "$T/noconf.safetensors" -o "$T/noconf.keras"
must_match "$T/err" "no Keras model_config, so the archive has no config.json: Keras cannot load it"

declare -A WHY=(
    [traversal]="zip entry 3 has a '.' or '..' path component \(path traversal\): refusing the archive"
    [absolute]="zip entry 3 has an absolute path: refusing the archive"
    [huge]="zip entry 'model.weights.h5' claims 4294967294 bytes from [0-9]+ compressed \(more than 1032:1\): refusing a zip bomb"
    [noweights]="not a Keras 3 archive: no model.weights.h5 entry"
    [badh5]="model.weights.h5: not a readable HDF5 file"
    [notzip]="not a readable zip archive"
)
"${K[@]}" hostile "$T/h_"
for kind in traversal absolute huge noweights badh5 notzip; do
    expect_rc 2 "$NPUC_BIN" info "$T/h_$kind.keras"
    [ "$(wc -l <"$T/err")" -eq 1 ] || fail "$kind: not one line: $(cat "$T/err")"
    must_match "$T/err" "^npuc: error: $T/h_$kind.keras: ${WHY[$kind]}"
done
[ -z "$(ls -A "$TMPDIR")" ] || fail "extracted files left in TMPDIR: $(ls -A "$TMPDIR")"
echo "keras_archive: fold-bn, fake-quant, bf16 and hostile archives as expected"
