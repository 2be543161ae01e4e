# calibrate.sh - activation calibration and the exports for other toolchains
# (issue 17 item 5, issue 16 item 6; docs/calibration-activations.md,
# docs/aimet.md), every figure against NumPy (tests/cli/lib/calib_check.py):
#   - minmax and percentile exact, entropy = TensorRT's EntropyCalibration2
#     re-implemented from pytorch-quantization (the same threshold bin), mse
#     = pytorch-quantization's histogram mse, on Gaussian, Laplacian and
#     ReLU-like samples, per tensor and per channel, symmetric and not;
#   - chunked (--chunk-rows, rows split over a safetensors and an HDF5 file)
#     equals one-shot;
#   - the TensorRT cache equals a file built by hand;
#   - AIMET encodings (0.6.1, 1.0.0) validate against a schema written from
#     AIMET's specification (lib/aimet_encodings.schema.json), and every
#     weight's code recomputed from the JSON's scale and offset equals the
#     code in npuc's artifact (per channel, per tensor, per block; merged
#     with calibrate's activations);
#   - refusals exit 2 with one line and write nothing.
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"

"$PY" -c 'import numpy, h5py, jsonschema' 2>/dev/null || skip "the Python at $PY lacks numpy, h5py or jsonschema"
# The checks are queued (Q) and run by one Python process at the end (B).
C() { "$PY" "$TESTLIB/calib_check.py" "$@"; }
Q() { printf '%q ' "$@" >>"$T/checks"; echo >>"$T/checks"; }
B() { C batch <"$T/checks" || fail "a check failed (above)"; rm -f "$T/checks"; }
SCHEMA="$TESTLIB/aimet_encodings.schema.json"
QUICK=${NPUC_TEST_QUICK:-0}

C make "$T"
A="$T/acts.safetensors"

# Every method per tensor (symmetric); per channel, asymmetric; chunked = one-shot.
METHODS="minmax percentile=99.9 entropy mse"
[ "$QUICK" = 1 ] && METHODS="percentile=99.9 entropy"
for m in $METHODS; do
    expect_rc 0 "$NPUC_BIN" calibrate "$A" -o "$T/s_$m.json" --method "$m"
    must_match "$T/out" '^gauss +8,192 samples +\[-'
    Q check "$T" "$T/s_$m.json" "$m" sym 0
    expect_rc 0 "$NPUC_BIN" calibrate "$A" -o "$T/a_$m.json" --method "$m" --asymmetric --per-channel 1
    # (the mse reference is the slow one: per tensor only)
    [ "$m" = mse ] || Q check "$T" "$T/a_$m.json" "$m" asym 1
    expect_rc 0 "$NPUC_BIN" calibrate "$T/part1.safetensors" "$T/part2.h5" -o "$T/c_$m.json" --method "$m" \
        --asymmetric --per-channel 1 --chunk-rows 333
    Q same "$T/a_$m.json" "$T/c_$m.json"
done
if [ "$QUICK" != 1 ]; then
    expect_rc 0 "$NPUC_BIN" calibrate "$A" -o "$T/p99.json" --method percentile=99 --asymmetric
    Q check "$T" "$T/p99.json" percentile=99 asym 0
    expect_rc 0 "$NPUC_BIN" calibrate "$A" -o "$T/e4.json" --method entropy --bits 4 --per-channel 1
    Q check "$T" "$T/e4.json" entropy sym 1
fi

# TensorRT cache, and AIMET activation encodings in both versions.
expect_rc 0 "$NPUC_BIN" calibrate "$A" -o "$T/e.json" --method entropy --trt-cache "$T/m.cache" \
    --trt-version 8601 --export-encodings "$T/enc1.json"
Q trt "$T" "$T/m.cache" 8601
Q schema "$T/enc1.json" "$SCHEMA"
Q acts "$T/enc1.json" "$T/e.json"
expect_rc 0 "$NPUC_BIN" calibrate "$A" -o "$T/e0.json" --method percentile=99.99 --asymmetric \
    --export-encodings "$T/enc0.json" --encodings-version 0.6.1
Q schema "$T/enc0.json" "$SCHEMA"
Q acts "$T/enc0.json" "$T/e0.json"

# quantize --export-encodings: codes recomputed from the JSON = npuc's codes.
M="$T/model.safetensors"
expect_rc 0 "$NPUC_BIN" quantize "$M" -o "$T/q1.safetensors" --export-encodings "$T/p1.json" \
    --activation-encodings "$T/e.json"
Q schema "$T/p1.json" "$SCHEMA"
Q params "$T/p1.json" "$M" "$T/q1.safetensors"
Q acts "$T/p1.json" "$T/e.json"
expect_rc 0 "$NPUC_BIN" quantize "$M" -o "$T/q2.safetensors" --bits 4 --asymmetric --group-size 32 \
    --layer-group-size 'layers\.1\.weight=36' --quantize-all --export-encodings "$T/p2.json"
Q schema "$T/p2.json" "$SCHEMA"
Q params "$T/p2.json" "$M" "$T/q2.safetensors"
[ "$(grep -c '"PER_BLOCK"' "$T/p2.json")" = 3 ] || fail "expected 3 PER_BLOCK param encodings"
if [ "$QUICK" != 1 ]; then
    expect_rc 0 "$NPUC_BIN" quantize "$M" -o "$T/q3.safetensors" --asymmetric --range percentile=99.9 \
        --per-tensor --export-encodings "$T/p3.json" --encodings-version 0.6.1 --activation-encodings "$T/e0.json"
    Q schema "$T/p3.json" "$SCHEMA"
    Q params "$T/p3.json" "$M" "$T/q3.safetensors"
    Q acts "$T/p3.json" "$T/e0.json"
    expect_rc 0 "$NPUC_BIN" quantize "$M" -o "$T/q5.safetensors" --bits 5 --export-encodings "$T/p5.json" \
        --quantize-all --encodings-version 0.6.1
    Q schema "$T/p5.json" "$SCHEMA"
    Q params "$T/p5.json" "$M" "$T/q5.safetensors"
fi
# Groups AIMET cannot express are left out with a warning naming the tensor.
expect_rc 0 "$NPUC_BIN" quantize "$M" -o "$T/q4.safetensors" --bits 4 --group-size 32 --quantize-all \
    --export-encodings "$T/p4.json" --encodings-version 0.6.1
must_match "$T/err" "warning: .*q4.safetensors: tensor 'layers.0.weight': AIMET 0.6.1 has no per-block encodings"
Q schema "$T/p4.json" "$SCHEMA"
Q params "$T/p4.json" "$M" "$T/q4.safetensors" layers.0.weight layers.1.weight layers.2.weight

B

# Refusals: one line, exit 2, nothing written.
expect_rc 2 "$NPUC_BIN" calibrate "$A" -o "$T/x.json" --per-channel 1 --trt-cache "$T/x.cache"
must_match "$T/err" "^npuc: error: --trt-cache holds symmetric 8-bit per-tensor scales"
expect_rc 2 "$NPUC_BIN" calibrate "$A" -o "$T/x.json" --method percentile=0
expect_rc 2 "$NPUC_BIN" calibrate "$A" -o "$T/x.json" --per-channel 3
must_match "$T/err" "tensor 'gauss' has rank 2: --per-channel 3"
expect_rc 2 "$NPUC_BIN" calibrate "$A" -o "$T/e.json"
must_match "$T/err" "e.json: the output exists .use -f to overwrite it.$"
expect_rc 2 "$NPUC_BIN" quantize "$M" -o "$T/x.safetensors" --activation-encodings "$T/e.json"
must_match "$T/err" "add --export-encodings FILE"
"$PY" -c 'import sys, struct, json
h = json.dumps({"bad": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + struct.pack("<4f", 1, float("nan"), 2, 3))' "$T/nan.safetensors"
expect_rc 2 "$NPUC_BIN" calibrate "$T/nan.safetensors" -o "$T/x.json"
must_match "$T/err" "nan.safetensors: tensor 'bad': 1 NaN or Inf values in the activation samples"
echo '{"schema": "npuc.calibration/1", "bits": 8, "symmetric": true, "activations": {"a": {"axis": null, "channels": [{"scale": -1, "zero_point": 0}]}}}' >"$T/badcal.json"
expect_rc 2 "$NPUC_BIN" quantize "$M" -o "$T/x.safetensors" --export-encodings "$T/x.enc" --activation-encodings "$T/badcal.json"
must_match "$T/err" "badcal.json: activation 'a': a 'scale' is not a positive finite float32"
for f in x.json x.cache x.safetensors x.enc; do [ ! -e "$T/$f" ] || fail "$f was written by a refused run"; done
echo "calibrate: ok"
