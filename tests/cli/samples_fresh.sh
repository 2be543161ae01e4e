# samples_fresh.sh - the committed samples are exactly what
# `npuc_gen_samples` writes today: regenerate into a temporary folder and
# compare byte for byte.  Fails on a non-deterministic generator or writer
# (timestamps, uninitialised padding, hash order) and on samples left stale
# after a change to the generator or the writers.  To refresh them:
#     build/npuc_gen_samples samples
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"

: "${NPUC_GEN_SAMPLES:?NPUC_GEN_SAMPLES is not set (run through ctest)}"
FILES="cnn_bn.safetensors cnn_bn_keras.h5 mlp_attn.safetensors"

expect_rc 0 "$NPUC_GEN_SAMPLES" "$T/a"
for f in $FILES; do
    [ -f "$T/a/$f" ] || fail "npuc_gen_samples did not write $f"
    size=$(wc -c <"$T/a/$f")
    [ "$size" -lt 102400 ] || fail "$f is $size bytes; samples stay under 100 KiB"
done

# Twice in a row: identical (the generator is deterministic by itself).
sleep 1 # a different second, so a stored timestamp would show
expect_rc 0 "$NPUC_GEN_SAMPLES" "$T/b"
for f in $FILES; do
    cmp "$T/a/$f" "$T/b/$f" || fail "two runs of npuc_gen_samples differ in $f"
done

# And identical to the committed files.
for f in $FILES; do
    [ -f "$SAMPLES/$f" ] || fail "samples/$f is not committed (run: build/npuc_gen_samples samples)"
    cmp "$T/a/$f" "$SAMPLES/$f" ||
        fail "samples/$f is stale: regenerate with build/npuc_gen_samples samples and review"
done

# The generated files are valid models.
for f in $FILES; do
    expect_rc 0 "$NPUC_BIN" validate --deep -q "$T/a/$f"
done

echo "samples_fresh: ok"
